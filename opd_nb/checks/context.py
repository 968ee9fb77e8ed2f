"""What every rule family reads: the workspace, the parsed config (even when invalid) and the target."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opd_nb.checks.report import CheckReport
from opd_nb.spec.hyperparams import Written
from opd_nb.spec.job import JobConfig, KeyPath, ParsedConfig
from opd_nb.workspace.connection import Target, resolve_connection


def as_number(value: Any) -> float | None:
    """A YAML value as a number: ints/floats as-is, numeric strings parsed (they are flagged elsewhere)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


@dataclass
class CheckContext:
    workspace: Path
    target: str
    report: CheckReport
    parsed: ParsedConfig
    config_name: str = "config.yaml"
    base_url: str | None = None
    tokenizer_path: str | None = None
    train_rows: int | None = None  # filled by the data rules
    local_models: dict[str, Any] = field(default_factory=dict)
    text: str = ""  # the config as written (the YAML rules read its structure, before any field)
    explained: set[KeyPath] = field(default_factory=set)  # paths a YAML rule explained (no schema repeat)

    # ------------------------------------------------------------ raw views (work on invalid configs too)

    @property
    def config(self) -> JobConfig | None:
        return self.parsed.config

    @property
    def raw(self) -> dict[str, Any]:
        return self.parsed.data if isinstance(self.parsed.data, dict) else {}

    def raw_section(self, name: str) -> dict[str, Any]:
        training = self.raw.get("training")
        block = training.get(name) if isinstance(training, dict) else None
        return block if isinstance(block, dict) else {}

    @property
    def hp(self) -> dict[str, Any]:
        return self.raw_section("hyper_parameters")

    def hp_value(self, name: str) -> tuple[float | None, bool]:
        """(numeric value, explicitly set) of a hyper-parameter, falling back to the table default."""
        written = Written(self.hp)
        return as_number(written.get(name)), written.wrote(name)

    def raw_functions(self) -> list[dict[str, Any]]:
        funcs = self.raw.get("functions")
        return [f for f in funcs if isinstance(f, dict)] if isinstance(funcs, list) else []

    def function_kinds(self) -> set[str]:
        return {str(f.get("type", "rollout")) for f in self.raw_functions()}

    @property
    def has_reward(self) -> bool:
        return bool(self.function_kinds() & {"reward", "group_reward"})

    def where(self, path: KeyPath) -> str:
        return self.parsed.lines.where(path)

    def rel(self, path: Path) -> str:
        """A path as the user sees it: relative to the workspace when inside it."""
        try:
            return str(path.resolve().relative_to(self.workspace.resolve()))
        except ValueError:
            return str(path)

    def connection(self) -> Target:
        """The plane a read of the control plane goes to, and its key: the one resolver
        (:func:`opd_nb.workspace.connection.resolve_connection`), as `opd submit` sends. Raises OpdError
        for a cloud URL the user did not configure (the key is never sent there)."""
        return resolve_connection(self.target, base_url=self.base_url, workspace=self.workspace)

    def api_base(self) -> str:
        """The control plane the target reads from (see :meth:`connection`)."""
        return self.connection().base_url.rstrip("/")

    def api_key(self) -> str:
        """The key a read of the control plane sends: the cloud key only to the configured cloud, a local
        plane's own key otherwise (see :meth:`connection`)."""
        key = self.connection().api_key
        return key.get_secret_value() if key is not None else ""

    def setting(self, name: str) -> str:
        """A variable as submit_job.py sees it: the environment's, else the workspace .env's ('' when unset)."""
        import os

        if name in os.environ:
            return os.environ[name].strip()
        if (self.workspace / ".env").is_file():
            from dotenv import dotenv_values

            return (dotenv_values(self.workspace / ".env").get(name) or "").strip()
        return ""

    def resolve(self, path_text: str) -> Path:
        """Relative paths in the config resolve against the workspace (submit runs the SDK there)."""
        p = Path(path_text).expanduser()
        return p if p.is_absolute() else self.workspace / p
