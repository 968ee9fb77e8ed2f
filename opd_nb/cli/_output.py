"""How a command hands its typed result back: presented in a terminal, returned to `invoke()`'s caller.

Every command does its work through a public Python function that returns a typed result, then ends
with ``return emit(result, ...)``: the same result on every surface. In a terminal `emit` presents it
(rich when it knows how, JSON with ``--json``, plain text otherwise, or the command's own `present`,
such as a watch followed in the foreground) and honours the exit code; under :func:`handing_back`
(what ``opd_nb.cli.invoke`` runs a command in, for the ``%opd`` magic) it returns the result and
prints nothing: the caller decides how to show it (the notebook maps result types to its views).

That switch is read here and nowhere else: commands never ask where they run. The few terminal
habits a command keeps (running notes on stderr, prompts, holding the process) are the functions
below, each saying why a caller that takes the result back does without it.

Everything the CLI prints goes through :func:`echo`, :func:`write` or :func:`console` here, which
escape the control characters of user-supplied text (:func:`opd_nb.views.terminal_text.printable`):
a job name or a model's answer must not be able to clear the screen or fake coloured text.
"""

from __future__ import annotations

import contextvars
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer

from opd_nb.views.terminal_text import printable

_HANDED_BACK: contextvars.ContextVar[bool] = contextvars.ContextVar("opd_nb_handed_back", default=False)


@contextmanager
def handing_back() -> Iterator[None]:
    """Run commands for a Python caller (``invoke()``): each result is returned, nothing is printed."""
    token = _HANDED_BACK.set(True)
    try:
        yield
    finally:
        _HANDED_BACK.reset(token)


def echo(text: Any = "", *, err: bool = False) -> None:
    """``typer.echo`` with control characters escaped: every plain line the CLI prints."""
    typer.echo(printable(str(text)), err=err)


def write(text: str) -> None:
    """Text as it streams (no newline added; a model's answer piece by piece), control characters escaped."""
    sys.stdout.write(printable(text))
    sys.stdout.flush()


def error(text: str) -> None:
    """The one red ``error: ...`` line of a failed command, on stderr."""
    typer.secho(f"error: {printable(text)}", err=True, fg="red")


def console(**kwargs: Any) -> Any:
    """A rich ``Console`` that escapes control characters in the text it renders (not in its own codes)."""
    from rich.console import Console
    from rich.segment import Segment

    class _SafeConsole(Console):
        def _render_buffer(self, buffer: Any) -> str:
            safe = (seg if seg.control else Segment(printable(seg.text), seg.style) for seg in buffer)
            return super()._render_buffer(safe)

    return _SafeConsole(**kwargs)


def print_result(result: Any, *, as_json: bool = False) -> None:
    """Print a result for a terminal: JSON, rich renderable, or its plain text."""
    if result is None:
        return
    if as_json:
        payload = result.to_json() if hasattr(result, "to_json") else result
        if not isinstance(payload, str):
            payload = json.dumps(payload, indent=2, default=str, ensure_ascii=False)
        echo(payload)
        return
    if hasattr(result, "__rich__") or hasattr(result, "__rich_console__"):
        console(soft_wrap=True).print(result)
        return
    echo(result)


def emit(
    result: Any,
    *,
    exit_code: int = 0,
    as_json: bool = False,
    present: Callable[[], object] | None = None,
) -> Any:
    """Finish a command with its typed result: returned under ``invoke()``, presented in a terminal.

    `present` is what a terminal does with this result instead of printing it (follow a watch, page
    a step's rollouts, say a widget needs a notebook); it raises ``typer.Exit`` for its own exit code.
    """
    if _HANDED_BACK.get():
        return result
    present_in_terminal(result, exit_code=exit_code, as_json=as_json, present=present)
    return result


def present_in_terminal(
    result: Any, *, exit_code: int = 0, as_json: bool = False, present: Callable[[], object] | None = None
) -> None:
    """The terminal's side of :func:`emit` (a test stands in for it to see the result a terminal gets)."""
    if present is not None:
        present()
        return
    print_result(result, as_json=as_json)
    if exit_code:
        raise typer.Exit(exit_code)


def note(line: str) -> None:
    """A running note (a gate's warning, a sweep's progress) on stderr in a terminal.

    A caller that takes the result back gets none: the result carries what it needs (a submit's
    notes, a sweep's jobs), and the notebook shows them in the view it opens.
    """
    if not _HANDED_BACK.get():
        echo(line, err=True)


def config_sets(items: list[str] | None) -> dict[str, Any]:
    """Every verb's `--set KEY=VALUE` items, parsed by the one grammar (:mod:`opd_nb.spec.sets`), each applied
    change said in one note line: the command's output alone may not show that it took."""
    from opd_nb.spec.sets import parse_sets

    changes = parse_sets(items or [])
    for key, value in changes.items():
        note(
            f"--set {key} = {json.dumps(value, ensure_ascii=False)} (this run only; the config file is unchanged)"
        )
    return changes


def in_notebook_source() -> bool:
    """Whether the command's line is saved in a notebook's source (a ``%opd`` line, run under ``invoke()``)
    rather than typed in a terminal: the one thing a typed secret's warning words differently."""
    return _HANDED_BACK.get()


def interactive() -> bool:
    """Whether a command may ask the user questions: a terminal on stdin and stdout that it owns.

    Under ``invoke()`` the caller passes what it means; a prompt would wait on a kernel's stdin.
    """
    return not _HANDED_BACK.get() and sys.stdin.isatty() and sys.stdout.isatty()


def foreground() -> bool:
    """Whether a command may hold its process until it is stopped (a server, a stdio protocol).

    In a terminal it may. Under ``invoke()`` the process is the notebook's kernel, which must stay free
    to run the next cell: so ``opd serve`` with no action starts in the background there, and
    ``opd mcp`` says it is for a coding agent. (A watch, a chat or an eval instead return their
    request, which the notebook opens as a live view.)
    """
    return not _HANDED_BACK.get()
