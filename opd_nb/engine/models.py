"""Loading the student/teacher pair (any local Hugging Face causal-LM directories).

Why a module of its own: the control plane lists the bundled pair without importing torch, and
the trainer needs one place that enforces the rule Bailian's teacher service implies: the
teacher scores the student's token ids, so both must share one vocabulary. :class:`Models` is a
job's loaded pair; a deployment (:mod:`opd_nb.engine.serving`) loads one model with the same loaders.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from opd_nb.engine.api import EngineError

ASSETS = Path(__file__).resolve().parent / "assets"
STUDENT_DIR = ASSETS / "tiny-student"
TEACHER_DIR = ASSETS / "tiny-teacher"


def default_pair() -> tuple[Path, Path]:
    """(student_dir, teacher_dir) of the tiny pair bundled with the package."""
    return STUDENT_DIR, TEACHER_DIR


def _check_dir(path: str | Path, role: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise EngineError(f"the {role} model directory {str(p)!r} does not exist")
    if not (p / "config.json").is_file():
        raise EngineError(
            f"the {role} model directory {str(p)!r} has no config.json; "
            "point it at a Hugging Face causal-LM directory (save_pretrained output)"
        )
    return p


def _quiet() -> None:
    """No progress bars in job logs."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def load_tokenizer(path: str | Path, role: str = "student") -> Any:
    from transformers.models.auto.tokenization_auto import AutoTokenizer

    _quiet()
    p = _check_dir(path, role)
    try:
        # transformers' Auto classes are typed loosely; what they load is used through its own attributes
        tok = cast(Any, AutoTokenizer.from_pretrained(str(p)))  # pyright: ignore[reportUnknownMemberType]
    except Exception as exc:  # noqa: BLE001 - any loader failure is the user's directory
        raise EngineError(f"could not load the {role} tokenizer from {str(p)!r}: {exc}") from exc
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    if not getattr(tok, "chat_template", None):
        raise EngineError(
            f"the {role} tokenizer in {str(p)!r} has no chat_template; the engine applies it to each row's messages"
        )
    return tok


def load_model(path: str | Path, role: str, device: str, dtype: Any = None) -> Any:
    import torch
    from transformers.models.auto.modeling_auto import AutoModelForCausalLM

    _quiet()
    p = _check_dir(path, role)
    try:
        model = cast(Any, AutoModelForCausalLM.from_pretrained(str(p), dtype=dtype or torch.float32))  # pyright: ignore[reportUnknownMemberType]
    except Exception as exc:  # noqa: BLE001
        raise EngineError(f"could not load the {role} model from {str(p)!r}: {exc}") from exc
    return model.to(device)


def check_vocab(
    student_tok: Any,
    teacher_tok: Any | None,
    student_model: Any,
    teacher_model: Any,
    student_path: str,
    teacher_path: str,
) -> None:
    """Refuse a pair whose vocabularies differ: teacher scores would belong to other tokens."""
    sv = student_model.get_output_embeddings().weight.shape[0]
    tv = teacher_model.get_output_embeddings().weight.shape[0]
    if sv != tv:
        raise EngineError(
            f"student and teacher vocabularies differ: the student {student_path!r} has {sv} output tokens, "
            f"the teacher {teacher_path!r} has {tv}; OPD scores the student's token ids with the teacher, "
            "so both must share one tokenizer (pick a teacher from the student's model family)"
        )
    if teacher_tok is not None and student_tok.get_vocab() != teacher_tok.get_vocab():
        raise EngineError(
            f"student and teacher tokenizers differ ({student_path!r} vs {teacher_path!r}): same size but "
            "different token ids; OPD needs one shared tokenizer"
        )


def pad_id(tok: Any) -> int:
    """The tokenizer's pad id (:func:`load_tokenizer` sets one: the EOS where the model has none)."""
    pad = tok.pad_token_id
    if not isinstance(pad, int):
        raise EngineError(f"the tokenizer has no single pad token id (it has {pad!r})")
    return pad


def n_params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def eos_ids(model: Any, tok: Any) -> list[int]:
    """The ids that end a completion: the model's generation EOS ids, plus the tokenizer's EOS."""
    given = model.generation_config.eos_token_id  # an id, a list of ids or None (transformers' config)
    ids = (
        list(cast("Sequence[int]", given))
        if isinstance(given, list | tuple)
        else ([] if given is None else [int(given)])
    )
    if tok.eos_token_id is not None and tok.eos_token_id not in ids:
        ids.append(tok.eos_token_id)
    return ids


class Models:
    """A job's student/teacher pair on its device: tokenizer, models, lean wrappers, EOS ids, size.

    The student loads from ``resume_from`` when resuming (its checkpoint holds the trained weights);
    the teacher is frozen (eval, no grad) and the student left in train mode.
    """

    def __init__(self, job: Any, log: Any):
        import torch

        from opd_nb.engine import lean

        self.device = job.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise EngineError(f"device {self.device!r} was asked for but CUDA is not available here")
        log(
            f"job {job.job_id}: loading student {job.student_path} and teacher {job.teacher_path} on {self.device}"
        )
        student_src = job.resume_from or job.student_path
        self.tok = load_tokenizer(student_src, "student")
        try:
            teacher_tok = load_tokenizer(job.teacher_path, "teacher")
        except EngineError:
            teacher_tok = None
        self.student = load_model(student_src, "student", self.device)
        self.teacher = load_model(job.teacher_path, "teacher", self.device)
        check_vocab(self.tok, teacher_tok, self.student, self.teacher, student_src, job.teacher_path)
        self.teacher.eval()
        self.teacher.requires_grad_(False)
        self.student.train()
        self.s_lean, self.t_lean = lean.wrap(self.student), lean.wrap(self.teacher)
        log("forward: " + ", ".join(self._forwards()))
        self.n_student = n_params(self.student)
        self.eos_ids = eos_ids(self.student, self.tok)

    def _forwards(self) -> list[str]:
        pairs = (("student", self.s_lean, self.student), ("teacher", self.t_lean, self.teacher))
        return [
            f"{role} {'lean fused' if fast else 'transformers'} ({m.config.model_type})"
            for role, fast, m in pairs
        ]

    def max_total(self, max_length: int) -> int:
        """The context limit: `max_length` cut to the student's position table."""
        max_pos = getattr(self.student.config, "max_position_embeddings", None) or 10**9
        return min(max_length, int(max_pos))
