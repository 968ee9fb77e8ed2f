"""`opd test` and `opd use` commands (registered on the shared app)."""

from opd_nb.cli._app import app  # noqa: F401
