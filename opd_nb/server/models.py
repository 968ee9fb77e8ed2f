"""Which local model directory serves a model id named in a job.

A workspace's ``config.yaml`` must run unchanged against Bailian and against ``opd serve``, so the
local control plane accepts cloud model ids and runs them on stand-ins. Resolution order:

1. ``--model-map ID=PATH`` entries (kind ``mapped``);
2. ``opd-local/<job_id>``: the published final checkpoint of a SUCCEEDED local job, or the name an
   exported checkpoint was given (``GET /fine-tunes/{id}/export/{checkpoint}``) (``checkpoint``);
3. ``local/tiny-student`` / ``local/tiny-teacher``: the bundled pair, by name (``stand-in``);
4. an absolute path to an existing Hugging Face model directory (``path``);
5. any other plain cloud id (no ``/``, e.g. ``qwen3.5-9b``): the bundled tiny student when it is
   the job's ``model``, the bundled tiny teacher when it is the ``teacher_model`` (``stand-in``); a
   teacher must be an id Bailian documents (:func:`opd_nb.spec.submit_rules.teacher_problem`: a
   placeholder, another vendor's model or an unknown id is Bailian's model-not-found, as in the cloud).
   A *call* (chat, generation, deploy) resolves ``strict``: there the id must be one Bailian documents
   (:data:`opd_nb.spec.models.BAILIAN_MODEL_IDS`), or the caller gets Bailian's model-not-found.

"Cannot be served" means: an id with a ``/`` that none of the above resolve (it looks like a Hugging
Face repo id, and there is no model hub here), a path that does not exist, an ``opd-local/…`` id
whose job has not published a checkpoint, or a string that is not a model id at all.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Literal

from opd_nb import settings
from opd_nb.constants import LOCAL_OUTPUT_PREFIX, SUCCEEDED
from opd_nb.server.store import Store
from opd_nb.spec.models import documented
from opd_nb.spec.submit_rules import teacher_problem
from opd_nb.wire.models import LocalModel, ResolvedModel

LOCAL_PREFIX = LOCAL_OUTPUT_PREFIX
STUDENT_ID = "local/tiny-student"
TEACHER_ID = "local/tiny-teacher"
_CLOUD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$")
JOB_ID = re.compile(r"^ft-\d{12}-[0-9a-f]+$")
MAX_MODEL_ID_CHARS = 1024  # an absolute path included (Linux's PATH_MAX is 4096 bytes, a part 255)
MAX_PATH_PART_BYTES = 255


def model_id_problem(model_id: str) -> str | None:
    """Why a string cannot be a model id at all (before any lookup), or None.

    The one check for every id a job, a deployment or a call names: each of them reaches the
    file system (a path, a ``~``) or SQLite, where a NUL, a 5,000-character path or ``~nosuchuser``
    used to raise instead of answering."""
    if len(model_id) > MAX_MODEL_ID_CHARS:
        return f"model id is {len(model_id)} characters; at most {MAX_MODEL_ID_CHARS} are accepted"
    bad = next((c for c in model_id if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")), None)
    if bad is not None:
        return (
            f"model id {model_id!r} holds the control or format character U+{ord(bad):04X}; "
            "a model id is printable text (e.g. qwen3-8b, opd-local/<job_id> or /path/to/model)"
        )
    if model_id.startswith("~") and not (model_id == "~" or model_id.startswith("~/")):
        return f"model id {model_id!r}: only '~/' (your home) may start a path; write the full path"
    if model_id.startswith(("/", "~")):
        long = next((p for p in model_id.split("/") if len(p.encode()) > MAX_PATH_PART_BYTES), None)
        if long is not None:
            return f"model path {model_id!r} has a part over {MAX_PATH_PART_BYTES} bytes, which no file system holds"
    return None


def job_of_path(path: str) -> str | None:
    """The local job a checkpoint directory belongs to (its path has the job id as a part), if any."""
    return next((p for p in Path(path).parts if JOB_ID.match(p)), None)


def _is_file(path: Path) -> bool:
    """``Path.is_file``, with the errors a path of the right shape can still raise (ENAMETOOLONG, EACCES)."""
    try:
        return path.is_file()
    except OSError:
        return False


class ModelNotServable(Exception):
    """The id names no model this machine can run; the message says why and what to do."""


class ModelNotFound(ModelNotServable):
    """A call names a model id that exists nowhere (Bailian's model-not-found); the message has the fix."""


def default_pair() -> tuple[Path, Path]:
    """The (student, teacher) stand-ins: ``$OPD_STANDIN_STUDENT``/``$OPD_STANDIN_TEACHER``, else the bundled pair."""
    student, teacher = settings.STANDIN_STUDENT.get(), settings.STANDIN_TEACHER.get()
    if student and teacher:
        return student, teacher
    try:
        from opd_nb.engine.models import default_pair as engine_pair

        student, teacher = engine_pair()
        return Path(student), Path(teacher)
    except ImportError:
        assets = Path(__file__).resolve().parent.parent / "engine" / "assets"
        return assets / "tiny-student", assets / "tiny-teacher"


class ModelRegistry:
    def __init__(self, store: Store, model_map: dict[str, str] | None = None):
        self.store = store
        self.model_map = {k: str(Path(v).expanduser().resolve()) for k, v in (model_map or {}).items()}

    def resolve(
        self, model_id: object, role: Literal["student", "teacher"] = "student", *, strict: bool = False
    ) -> ResolvedModel:
        """The local model for `model_id`; `strict` (a call, not a job): a cloud id must be documented."""
        found = self._resolve(model_id, role)
        if strict and found.kind == "stand-in" and found.model_id not in (STUDENT_ID, TEACHER_ID):
            if not documented(found.model_id):
                raise ModelNotFound(
                    f"The model `{found.model_id}` does not exist or you do not have access to it: it is not a "
                    "Bailian model id, a deployment or an exported checkpoint here; check the spelling "
                    "(GET /compatible-mode/v1/models lists what answers), or map it to a local model with "
                    f"`opd serve --model-map {found.model_id}=/path/to/model`"
                )
        return found

    def _resolve(self, model_id: object, role: Literal["student", "teacher"]) -> ResolvedModel:
        if not isinstance(model_id, str) or not model_id.strip():
            raise ModelNotServable(f"model id must be a non-empty string, got {model_id!r}")
        model_id = model_id.strip()
        problem = model_id_problem(model_id)
        if problem:
            raise ModelNotServable(problem)
        if model_id in self.model_map:
            path = Path(self.model_map[model_id])
            if not (path / "config.json").is_file():
                raise ModelNotServable(
                    f"--model-map maps {model_id!r} to {path}, which is not a Hugging Face model directory "
                    "(no config.json); restart `opd serve` with a correct --model-map"
                )
            return ResolvedModel(
                model_id=model_id,
                kind="mapped",
                path=str(path),
                note=f"{role} model {model_id!r} runs on the mapped local model {path}",
            )
        published = self._published(model_id, role)
        if published is not None:
            return published
        student, teacher = default_pair()
        if model_id in (STUDENT_ID, TEACHER_ID):
            path = student if model_id == STUDENT_ID else teacher
            return self._standin(model_id, path, f"{role} model {model_id!r} is the bundled model {path}")
        if model_id.startswith("/") or model_id.startswith("~"):
            path = Path(model_id).expanduser()
            if not _is_file(path / "config.json"):
                raise ModelNotServable(
                    f"model path {model_id!r} is not a local Hugging Face model directory (no config.json there)"
                )
            resolved = str(path.resolve())
            return ResolvedModel(model_id=model_id, kind="path", path=resolved, job_id=job_of_path(resolved))
        if "/" in model_id or not _CLOUD_ID.match(model_id):
            raise ModelNotServable(
                f"model {model_id!r} cannot be served locally: it looks like a Hugging Face repo id and this "
                "server has no model hub; map it to a local directory with `opd serve --model-map "
                f"{model_id}=/path/to/model`, or use a cloud model id (it then runs on the bundled stand-in)"
            )
        if role == "teacher" and (problem := teacher_problem(model_id)) is not None:
            raise ModelNotFound(f"{problem.message}; {problem.fix}")  # TEACHER_ID: Bailian refuses it
        path = student if role == "student" else teacher
        return self._standin(
            model_id,
            path,
            f"{role} model {model_id!r} is a cloud model; it runs locally on the bundled stand-in {path.name} ({path})",
        )

    def _published(self, model_id: str, role: str) -> ResolvedModel | None:
        """A fine-tuned output by name: ``opd-local/<job_id>`` (its final checkpoint) or an exported name."""
        if model_id.startswith(LOCAL_PREFIX):
            job_id = model_id[len(LOCAL_PREFIX) :]
            job = self.store.job(job_id)
            final = job.meta.final_checkpoint if job else None
            if not job or job.status != SUCCEEDED or not final or not Path(final).is_dir():
                raise ModelNotServable(
                    f"{model_id!r} is not a published local model: job {job_id!r} has no final checkpoint "
                    "(it is unknown, was deleted, or has not SUCCEEDED); pick one from GET /api/v1/models"
                )
            return ResolvedModel(
                model_id=model_id,
                kind="checkpoint",
                path=final,
                note=f"{role} model {model_id!r} is the final checkpoint of job {job_id}: {final}",
                job_id=job_id,
            )
        exported = self.store.export(model_id)
        if exported is not None and Path(exported["path"]).is_dir():
            return ResolvedModel(
                model_id=model_id,
                kind="checkpoint",
                path=exported["path"],
                note=f"{role} model {model_id!r} is {exported['checkpoint']} of job {exported['job_id']}",
                job_id=exported["job_id"],
            )
        return None

    @staticmethod
    def _standin(model_id: str, path: Path, note: str) -> ResolvedModel:
        if not (path / "config.json").is_file():
            raise ModelNotServable(
                f"the bundled stand-in model {path} is missing; reinstall opd-nb (pip install 'opd-nb[engine]') "
                f"or map {model_id!r} with --model-map"
            )
        return ResolvedModel(model_id=model_id, kind="stand-in", path=str(path), note=note)

    def listing(self) -> list[LocalModel]:
        """Everything this server can run, as listed by GET /api/v1/models."""
        student, teacher = default_pair()
        out = [
            LocalModel(
                model_id=STUDENT_ID,
                kind="stand-in",
                path=str(student),
                role="student",
                stands_in_for="any cloud `model` id",
            ),
            LocalModel(
                model_id=TEACHER_ID,
                kind="stand-in",
                path=str(teacher),
                role="teacher",
                stands_in_for="any `teacher_model` id Bailian documents",
            ),
        ]
        out += [LocalModel(model_id=k, kind="mapped", path=v) for k, v in sorted(self.model_map.items())]
        for job in self.store.jobs_with_status(SUCCEEDED):
            final = job.meta.final_checkpoint
            if final and job.finetuned_output and Path(final).is_dir():
                out.append(
                    LocalModel(
                        model_id=job.finetuned_output, kind="checkpoint", path=final, job_id=job.job_id
                    )
                )
        return out
