"""The documented submit contract: each rule once, read by preflight and by the local control plane alike.

Why one module: a rule that only preflight knows lets ``dashscope rl run``, the SDK's ``run()`` or a raw
POST rehearse locally what Bailian would refuse or fail. Each :class:`SubmitRule` says where the docs or an
official client state it (``doc``: the file and a quote) and what Bailian does with a job that breaks it
(``on_bailian``), which is how the local plane answers it: ``"refuses"`` is a 400 in Bailian's error shape at
submit (``code``), ``"fails"`` a job that is accepted and then FAILS with the same message. Where the docs do
not say what Bailian does (``"undocumented"``), the rule is a preflight finding only and the plane lets the job
run. A rule's function answers "what is wrong" in words (None when nothing is), so preflight's finding and the
plane's answer carry one message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from opd_nb.spec.models import BAILIAN_MODEL_IDS, OPD_TEACHER_IDS, documented, other_vendor, placeholder

OnBailian = Literal["refuses", "fails", "undocumented"]
TEACHER_TRAINING_TYPE = "pg_opd"


@dataclass(frozen=True)
class SubmitRule:
    """One documented rule of a submit: its preflight rule id, its source, and what Bailian does."""

    rule: str  # the preflight finding's id (``opd check``)
    doc: str  # where it is documented: file and quote
    on_bailian: OnBailian
    code: str | None = None  # the error code the local plane answers with (None: preflight only)


TEACHER_ID = SubmitRule(
    "config.teacher-unknown",
    "seeds/000 FAQ 'teacher_model error': \"Common causes: teacher_model filled in a model ID not registered "
    'in Bailian (such as a HuggingFace repository name)"; reference/bailian-lifecycle-2026.md: "An unknown '
    'model id is an error on Bailian (model not found), never a silent fallback."',
    "refuses",
    "ModelNotFound",
)
TOO_FEW_SAMPLES = SubmitRule(
    "data.too-few-rows",
    "reference/bailian-lifecycle-2026.md (the official `bl finetune` CLI's gates): \"a training file whose "
    "sample count is not greater than `batch_size` is rejected, because the platform would otherwise fail "
    'about 10 minutes in"',
    "fails",
    "JobFailed",
)
TYPE_BY_HAND = SubmitRule(
    "config.training-type-by-hand",
    'seeds/002 配置教师模型: "传 teacher_model 即强制 training_type=pg_opd，无需也不能手动指定训练类型" '
    "(a teacher forces pg_opd; the type neither needs nor can be set by hand). The SDK switches the type "
    "silently before it sends; Bailian's answer to a raw body that sends both is not documented: the local "
    "plane refuses it, as the docs say the type cannot be set by hand",
    "refuses",
    "InvalidParameter",
)
NEEDS_A_SIGNAL = SubmitRule(
    "config.no-learning-signal",
    'dashscope 2.0.2 `dashscope rl run --help` (cli/agentic_rl.py:502): "Rollout and Reward are required '
    'for regular reinforcement learning, but optional for OPD."',
    "refuses",
    "InvalidParameter",
)
EMPTY_FUNCTIONS = SubmitRule(
    "config.functions-empty-list",
    'seeds/000 pure distillation: "Pure distillation must pass None rather than an empty list [] (the '
    'control plane does not guarantee identical handling of the two)." What Bailian does with [] is not '
    "documented (SDK 2.0.2 drops an empty list before it sends, so the body is the same as None's)",
    "undocumented",
)
RULES = (TEACHER_ID, TOO_FEW_SAMPLES, TYPE_BY_HAND, NEEDS_A_SIGNAL, EMPTY_FUNCTIONS)

TeacherProblemKind = Literal["placeholder", "other-vendor", "unknown"]


@dataclass(frozen=True)
class TeacherProblem:
    kind: TeacherProblemKind
    message: str
    fix: str


def teacher_problem(teacher: str) -> TeacherProblem | None:
    """Why a cloud-style teacher id (no ``/``, not a path, not a local output) is no teacher Bailian has.

    Known means documented (:data:`~opd_nb.spec.models.BAILIAN_MODEL_IDS`); the local plane also runs what
    ``--model-map`` maps and its own stand-ins and outputs, which it resolves before asking this."""
    ident = teacher.strip()
    fix = (
        f"write a Bailian model id, e.g. teacher_model: {OPD_TEACHER_IDS[0]} (the documented OPD teacher); "
        "locally, `opd serve --model-map ID=/path/to/model` runs another id"
    )
    if documented(ident):
        return None
    if placeholder(ident):
        return TeacherProblem(
            "placeholder",
            f"teacher_model {ident!r} is a placeholder to fill in, not a model id: Bailian refuses it "
            "(a model ID not registered in Bailian)",
            fix,
        )
    if other_vendor(ident):
        return TeacherProblem(
            "other-vendor",
            f"teacher_model {ident!r} is another vendor's API model: Bailian deploys only its own models as a "
            "teacher (the FAQ's teacher_model error)",
            fix,
        )
    return TeacherProblem(
        "unknown",
        f"teacher_model {ident!r} is not a model id Bailian documents ({len(BAILIAN_MODEL_IDS)} known ids, "
        "e.g. qwen3.5-397b-a17b, qwen3-max): the FAQ's teacher_model error, a model ID not registered in Bailian",
        fix,
    )


def too_few_samples(rows: int, batch_size: int) -> str | None:
    """Why a training file of ``rows`` samples cannot train at ``batch_size`` (None when it can)."""
    if rows > batch_size:
        return None
    relation = "fewer than" if rows < batch_size else "not more than"
    return (
        f"the training file has {rows} sample(s), {relation} batch_size {batch_size}: Bailian fails a job "
        "whose training sample count is not greater than batch_size (the official CLI refuses the file before "
        "upload)"
    )


def too_few_samples_fix(rows: int, batch_size: int) -> str:
    return f"add rows (more than {batch_size}) or set batch_size <= {max(1, rows - 1)}"


def type_by_hand_problem(training_type: str | None, teacher: str | None) -> str | None:
    """Why a written training type contradicts the teacher (None when it does not).

    A teacher makes the job pg_opd; ``pg_opd`` without a teacher is the SDK's error 3006 (another rule)."""
    if not (teacher or "").strip() or training_type in (None, TEACHER_TRAINING_TYPE):
        return None
    return (
        f"training type {training_type!r} is set by hand beside teacher_model {teacher!r}: a teacher makes the "
        "job pg_opd, and the docs say the type is not set by hand (the SDK silently switches it to pg_opd)"
    )


TYPE_BY_HAND_FIX = (
    "delete `training.type` (a teacher_model makes the job pg_opd by itself), or drop the teacher for RL"
)


def signal_problem(teacher: str | None, rewards: int) -> str | None:
    """Why a job learns from nothing: no teacher (so plain RL) and no reward function (None when it learns)."""
    if (teacher or "").strip() or rewards > 0:
        return None
    return (
        "no teacher_model and no reward function: the job would be plain reinforcement learning, which needs "
        "at least one reward function (or a teacher_model for OPD)"
    )


SIGNAL_FIX = (
    "add `teacher_model: <Bailian model id>` for OPD, or register a reward function under `functions:`"
)


def empty_functions_problem(functions: object) -> str | None:
    """Why ``functions: []`` is not what the docs ask of pure distillation (None for anything else)."""
    if functions != []:
        return None
    return (
        "`functions: []`: the docs say pure distillation must pass None rather than an empty list (the control "
        "plane does not guarantee identical handling of the two); what Bailian does with [] is not documented"
    )


EMPTY_FUNCTIONS_FIX = (
    "delete the `functions:` line for pure distillation (`functions: null` is refused by the SDK's loader)"
)
