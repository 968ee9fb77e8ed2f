"""Local-only: which models this machine runs, and what a model id resolves to."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from opd_nb.server.deps import RegistryDep
from opd_nb.server.models import STUDENT_ID, TEACHER_ID, ModelNotServable
from opd_nb.server.responses import err, ok

router = APIRouter(prefix="/api/v1/models", tags=["local-only"])


@router.get("")
def list_models(registry: RegistryDep) -> JSONResponse:
    """Local-only: what the local engine can run, and the stand-ins used for cloud model ids."""
    return ok({"models": registry.listing(), "default_student": STUDENT_ID, "default_teacher": TEACHER_ID})


@router.get("/{model_id:path}")
def get_model(
    model_id: str, registry: RegistryDep, role: Literal["student", "teacher"] = "student"
) -> JSONResponse:
    try:
        return ok(registry.resolve(model_id, role).model_dump())
    except ModelNotServable as exc:
        return err(404, "ModelNotFound", str(exc))
