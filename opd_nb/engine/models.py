"""Loading the student/teacher pair (any local Hugging Face causal-LM directories).

Why a module of its own: the control plane lists the bundled pair without importing torch, and
the trainer needs one place that enforces the rule Bailian's teacher service implies: the
teacher scores the student's token ids, so both must share one vocabulary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    from transformers import AutoTokenizer

    _quiet()
    p = _check_dir(path, role)
    try:
        tok = AutoTokenizer.from_pretrained(str(p))
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
    from transformers import AutoModelForCausalLM

    _quiet()
    p = _check_dir(path, role)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(p), dtype=dtype or torch.float32)
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


def n_params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
