"""How a command hands its typed result back: printed in a terminal, returned to the magic.

Every command does its work through a public Python function that returns a typed result, then
ends with ``return emit(result, exit_code=...)``. In the CLI the result is printed (rich when it
knows how, plain text otherwise) and the exit code is honoured; under ``%opd`` nothing is printed
and the result object is returned so that Jupyter renders its ``_repr_html_``.

Everything the CLI prints goes through :func:`echo` or :func:`console` here, which escape the control
characters of user-supplied text (:func:`opd_nb.views.terminal_text.printable`): a job name must not be able
to clear the screen or fake coloured text.
"""

from __future__ import annotations

import contextvars
import json
from typing import Any

import typer

from opd_nb.views.terminal_text import printable

_MAGIC: contextvars.ContextVar[bool] = contextvars.ContextVar("opd_nb_magic", default=False)


def in_magic() -> bool:
    """True while a command runs on behalf of the ``%opd`` magic."""
    return _MAGIC.get()


def set_magic(value: bool) -> contextvars.Token:
    return _MAGIC.set(value)


def reset_magic(token: contextvars.Token) -> None:
    _MAGIC.reset(token)


def echo(text: Any = "", *, err: bool = False) -> None:
    """``typer.echo`` with control characters escaped: every plain line the CLI prints."""
    typer.echo(printable(str(text)), err=err)


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


def emit(result: Any, *, exit_code: int = 0, as_json: bool = False) -> Any:
    """Finish a command: print and exit in the CLI, return the result under the magic."""
    if in_magic():
        return result
    print_result(result, as_json=as_json)
    if exit_code:
        raise typer.Exit(exit_code)
    return result
