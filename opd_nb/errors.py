"""User-facing errors: a message that says what is wrong, where, and how to fix it.

Raise :class:`OpdError` for any user mistake. The CLI prints it as one line (exit code 2 unless
set otherwise) and the ``%opd`` magic shows it as a UsageError-style line: never a traceback.
Callers branch on ``status`` (the HTTP status a control plane answered, if any) and ``code`` (the
service's error code, or a preflight rule id), never on the message text or the class name.
"""

from __future__ import annotations

UNREACHABLE = "Unreachable"  # the code of an OpdError raised when no control plane answered at all


class OpdError(Exception):
    """A user mistake or an unmet precondition, explained for a person."""

    def __init__(
        self,
        message: str,
        *,
        where: str | None = None,
        fix: str | None = None,
        exit_code: int = 2,
        status: int | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.where = where
        self.fix = fix
        self.exit_code = exit_code
        self.status = status
        self.code = code

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if (
            self.fix and "\n" in text
        ):  # a list (of findings, each with its own fix): this fix on a line of its own
            text += f"\nfix: {self.fix}"
        elif self.fix:
            text += f" (fix: {self.fix})"
        return text
