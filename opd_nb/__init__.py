"""opd-nb: notebook-first toolkit for online policy distillation (OPD) jobs on Bailian.

Importing this package stays light: ``dashscope``, ``torch`` and ``transformers`` are imported
only by the subcommands that need them. Public helpers are resolved lazily on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

from opd_nb._version import __version__

# name -> "module:attribute"; resolved on first access so `import opd_nb` costs nothing.
_LAZY: dict[str, str] = {
    "check": "opd_nb.checks:check",
    "effective_job": "opd_nb.spec.effective:effective_job",
    "create_workspace": "opd_nb.workspace:create",
    "JobClient": "opd_nb.client:JobClient",
    "OpdError": "opd_nb.errors:OpdError",
}

__all__ = ["__version__", *sorted(_LAZY)]


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext opd_nb` registers the `%opd` line/cell magic (kept light)."""
    from opd_nb.notebook.magics import load_ipython_extension as _load

    _load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from opd_nb.notebook.magics import unload_ipython_extension as _unload

    _unload(ipython)


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        # Subpackages (opd_nb.workspace, opd_nb.data, ...) import normally.
        try:
            return importlib.import_module(f"opd_nb.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"opd_nb.{name}":
                raise AttributeError(f"module 'opd_nb' has no attribute {name!r}") from None
            raise
    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
