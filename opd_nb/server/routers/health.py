"""Local-only: ``GET /health``, what `opd serve start` polls until the server answers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from opd_nb.server.deps import ServicesDep

router = APIRouter(tags=["local-only"])


@router.get("/health")
async def health(services: ServicesDep) -> dict[str, Any]:
    return {"status": "healthy", "data_dir": str(services.data_dir)}
