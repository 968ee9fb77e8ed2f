"""Local-only: which models this machine runs, and what a model id resolves to."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter

from opd_nb.server.deps import RegistryDep
from opd_nb.server.errors import ApiError
from opd_nb.server.models import STUDENT_ID, TEACHER_ID, ModelNotServable
from opd_nb.wire.envelope import Output
from opd_nb.wire.models import ModelListing, ResolvedModel

router = APIRouter(prefix="/api/v1/models", tags=["local-only"])


@router.get("")
def list_models(registry: RegistryDep) -> Output[ModelListing]:
    """Local-only: what the local engine can run, and the stand-ins used for cloud model ids."""
    listing = ModelListing(models=registry.listing(), default_student=STUDENT_ID, default_teacher=TEACHER_ID)
    return Output[ModelListing].of(listing)


@router.get("/{model_id:path}")
def get_model(
    model_id: str, registry: RegistryDep, role: Literal["student", "teacher"] = "student"
) -> Output[ResolvedModel]:
    try:
        return Output[ResolvedModel].of(registry.resolve(model_id, role))
    except ModelNotServable as exc:
        raise ApiError(404, "ModelNotFound", str(exc)) from None
