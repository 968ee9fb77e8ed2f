"""`opd jobs` commands (registered on the shared app)."""

from opd_nb.cli._app import app  # noqa: F401
