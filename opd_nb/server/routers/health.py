"""Local-only: ``GET /health``, what `opd serve start` polls until the server answers."""

from __future__ import annotations

from fastapi import APIRouter

from opd_nb.server.deps import ServicesDep
from opd_nb.wire.health import Health

router = APIRouter(tags=["local-only"])


@router.get("/health")
async def health(services: ServicesDep) -> Health:
    return Health(status="healthy", data_dir=str(services.data_dir))
