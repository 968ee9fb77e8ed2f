"""How a command hands its typed result back: printed in a terminal, returned to the magic.

Every command does its work through a public Python function that returns a typed result, then
ends with ``return emit(result, exit_code=...)``. In the CLI the result is printed (rich when it
knows how, plain text otherwise) and the exit code is honoured; under ``%opd`` nothing is printed
and the result object is returned so that Jupyter renders its ``_repr_html_``.
"""

from __future__ import annotations

import contextvars
import json
from typing import Any

import typer

_MAGIC: contextvars.ContextVar[bool] = contextvars.ContextVar("opd_nb_magic", default=False)


def in_magic() -> bool:
    """True while a command runs on behalf of the ``%opd`` magic."""
    return _MAGIC.get()


def set_magic(value: bool) -> contextvars.Token:
    return _MAGIC.set(value)


def reset_magic(token: contextvars.Token) -> None:
    _MAGIC.reset(token)


def print_result(result: Any, *, as_json: bool = False) -> None:
    """Print a result for a terminal: JSON, rich renderable, or its plain text."""
    if result is None:
        return
    if as_json:
        payload = result.to_json() if hasattr(result, "to_json") else result
        if not isinstance(payload, str):
            payload = json.dumps(payload, indent=2, default=str, ensure_ascii=False)
        typer.echo(payload)
        return
    if hasattr(result, "__rich__") or hasattr(result, "__rich_console__"):
        from rich.console import Console

        Console(soft_wrap=True).print(result)
        return
    typer.echo(str(result))


def emit(result: Any, *, exit_code: int = 0, as_json: bool = False) -> Any:
    """Finish a command: print and exit in the CLI, return the result under the magic."""
    if in_magic():
        return result
    print_result(result, as_json=as_json)
    if exit_code:
        raise typer.Exit(exit_code)
    return result
