"""``GET /health`` (local-only): what `opd serve start` polls until the server answers."""

from __future__ import annotations

from opd_nb.wire.base import Wire


class Health(Wire):
    status: str
    data_dir: str
