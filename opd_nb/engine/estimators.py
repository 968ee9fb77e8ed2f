"""The OPD loss estimators behind one interface, picked once per job from ``plan.estimator``.

``pg_opd`` (default, the cloud's): per-token advantage -(log pi_s - log pi_t) on the sampled tokens,
clamped to ``kl_clamp``, discount 0, the plan's clipped policy loss (GSPO-token by default).
``gkd`` (local): the exact reverse KL over the full vocabulary on the teacher-scored tokens, computed
in chunks from both models' hidden states. With a task reward, both add its group-normalised
advantage through the policy loss.

Each estimator also fills the step's per-token records (:class:`Records`) with what its loss computed,
so the diagnostics and the rollout records need no extra forward.

A new estimator is a class with the :class:`Estimator` members, built as ``cls(plan, student,
teacher)``, plus one line in :data:`REGISTRY`; ``EngineJob.algorithm`` (or ``hyper_parameters.algorithm``
on the engine itself) then picks it. Users see it (``opd check``, ``opd serve``'s job bodies) once its
name is also in ``opd_nb.constants.LOCAL_ESTIMATORS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from opd_nb.constants import CLOUD_ESTIMATOR, LOCAL_ESTIMATORS
from opd_nb.engine.api import EngineError

if TYPE_CHECKING:
    from torch import Tensor
    from torch.nn import Module


@dataclass
class Records:
    """The step's sampled tokens' values under the sampling policy, [B, W] (filled by the updates)."""

    student: Tensor  # student log-prob
    entropy: Tensor  # full-vocabulary entropy of the student
    teacher: Tensor  # teacher log-prob
    frozen_logprobs: bool  # `student` was taken before the updates (several mini-batches)
    frozen_entropy: bool  # `entropy` likewise


@dataclass
class MiniBatch:
    """One update's rows and the tensors its loss reads ([b, W] unless noted)."""

    idx: Tensor  # the rows' indices in the step's batch
    whole: bool  # idx is every row in order (one update per step)
    h: Tensor  # student final hidden states [b, W, H]
    lp: Tensor | None  # student log-probs of the sampled tokens (with grad)
    lp_old: Tensor | None  # the sampling policy's log-probs
    ent: Tensor | None  # student entropies from this pass
    teacher: Tensor  # the teacher's scores of these rows: log-probs, or hidden states [b, W, H]
    ids: Tensor  # the whole step's window token ids [B, W] (gathered by the estimator that needs them)
    tm: Tensor  # trained-token mask
    v: Tensor  # teacher-scored mask
    at: Tensor | None  # task advantage per token


class EstimatorPlan(Protocol):
    """What an estimator reads of the job's plan (:class:`opd_nb.engine.hparams.Plan` has it)."""

    @property
    def estimator(self) -> str: ...  # the estimator's name in :data:`REGISTRY`

    @property
    def policy_loss(self) -> str: ...  # gspo | grpo (:func:`opd_nb.engine.losses.policy_loss`)

    @property
    def clip_low(self) -> float: ...

    @property
    def clip_high(self) -> float: ...

    @property
    def kl_clamp(self) -> float: ...


class Estimator(Protocol):
    """What the update loop asks of an estimator."""

    @property
    def teacher_logprobs(self) -> bool:
        """The teacher gives log-probs of the sampled tokens (else its final hidden states)."""
        ...

    @property
    def pass_entropy(self) -> bool:
        """The student pass computes entropies from its own logits."""
        ...

    def needs_logprobs(self, has_task: bool) -> bool:
        """Whether the update needs the student's sampled-token log-probs."""
        ...

    def teacher_record(self, t_vals: Tensor, zeros: Tensor) -> Tensor:
        """The teacher log-prob record to start from ([B, W])."""
        ...

    def loss(self, mb: MiniBatch, rec: Records) -> tuple[Tensor, dict[str, float], float]:
        """(loss, policy-loss extras, sum of the per-token distillation term); fills `rec`."""
        ...


# How the registry builds an estimator: from the plan and the pair (student, teacher).
EstimatorClass = Callable[[EstimatorPlan, "Module", "Module"], Estimator]


def _put(dst: Tensor, idx: Tensor, mask: Tensor, vals: Tensor, whole: bool) -> None:
    """dst[idx][mask] = vals (`whole`: idx is every row in order, so no gather/scatter of rows)."""
    if whole:
        dst[mask] = vals
        return
    blk = dst[idx]
    blk[mask] = vals
    dst[idx] = blk


def _given(x: Tensor | None, what: str) -> Tensor:
    """`x`, which the update computed because this estimator asked for it (`needs_logprobs`, `pass_entropy`)."""
    if x is None:
        raise RuntimeError(f"the update gave no {what}, which this estimator asks for")
    return x


class PgOpd:
    """pg_opd: the clipped policy loss on A = -clamp(k1) (+ task advantage)."""

    teacher_logprobs = True
    pass_entropy = True

    def __init__(self, plan: EstimatorPlan, student: Module, teacher: Module):
        self.plan = plan  # the pair is not read: the teacher's log-probs come with the batch

    def needs_logprobs(self, has_task: bool) -> bool:
        return True

    def teacher_record(self, t_vals: Tensor, zeros: Tensor) -> Tensor:
        return t_vals

    def loss(self, mb: MiniBatch, rec: Records) -> tuple[Tensor, dict[str, float], float]:
        from opd_nb.engine import losses

        p = self.plan
        lp_old = _given(mb.lp_old, "sampled-token log-probs")
        if not rec.frozen_logprobs:  # one update: this pass is the sampling policy's
            rec.student, rec.entropy = lp_old, _given(mb.ent, "entropies")
        k1 = (lp_old - mb.teacher).clamp(-p.kl_clamp, p.kl_clamp)
        adv = -k1 * mb.v
        if mb.at is not None:
            adv = adv + mb.at
        loss, extra = losses.policy_loss(
            _given(mb.lp, "sampled-token log-probs"),
            lp_old,
            adv.detach(),
            mb.tm if mb.at is not None else mb.v,
            kind=p.policy_loss,
            clip_low=p.clip_low,
            clip_high=p.clip_high,
        )
        return loss, extra, float((k1 * mb.v).sum())


class Gkd:
    """gkd: exact reverse KL on the teacher-scored tokens (+ the task policy loss).

    The KL runs over every trained token (the records want the student's log-prob there too); the
    loss counts only the teacher-scored ones.
    """

    teacher_logprobs = False
    pass_entropy = False

    def __init__(self, plan: EstimatorPlan, student: Module, teacher: Module):
        self.plan, self.student, self.teacher = plan, student, teacher

    def needs_logprobs(self, has_task: bool) -> bool:
        return has_task  # without a task reward the KL uses full distributions only

    def teacher_record(self, t_vals: Tensor, zeros: Tensor) -> Tensor:
        return zeros.clone()

    def loss(self, mb: MiniBatch, rec: Records) -> tuple[Tensor, dict[str, float], float]:
        from opd_nb.engine import losses

        p, tm = self.plan, mb.tm
        ws, bs = losses.head_params(self.student)
        wt, bt = losses.head_params(self.teacher)
        rkl, s_lp, t_lp, ent = losses.reverse_kl_stats(
            mb.h[tm], ws, bs, mb.teacher[tm], wt, bt, mb.ids[mb.idx][tm]
        )
        rkl = rkl * mb.v[tm].to(rkl.dtype)
        loss = rkl.sum() / mb.v.sum().clamp(min=1)
        extra: dict[str, float] = {}
        if mb.at is not None:
            pg, extra = losses.policy_loss(
                _given(mb.lp, "sampled-token log-probs"),
                _given(mb.lp_old, "sampled-token log-probs"),
                mb.at.detach(),
                tm,
                kind=p.policy_loss,
                clip_low=p.clip_low,
                clip_high=p.clip_high,
            )
            loss = loss + pg
        kl_sum = float(rkl.detach().sum())
        _put(rec.teacher, mb.idx, tm, t_lp, mb.whole)
        if not rec.frozen_logprobs:
            _put(rec.student, mb.idx, tm, s_lp, mb.whole)
        if not rec.frozen_entropy:
            _put(rec.entropy, mb.idx, tm, ent, mb.whole)
        return loss, extra, kl_sum


# The estimators by name: a new one is its class and one line here. The names users may pick are
# opd_nb.constants' (core code reads them without importing the engine); each must have a class here.
REGISTRY: dict[str, EstimatorClass] = {
    "pg_opd": PgOpd,
    "gkd": Gkd,
}


def _check_registry() -> None:
    """Every estimator name the core offers users has a class (else the engine does not import)."""
    missing = [n for n in (CLOUD_ESTIMATOR, *LOCAL_ESTIMATORS) if n not in REGISTRY]
    if missing:
        raise ImportError(
            f"opd_nb.constants names the estimator(s) {', '.join(missing)}, which have no class in "
            "opd_nb.engine.estimators.REGISTRY; add the class and its registry line"
        )


_check_registry()


def unknown_estimator(name: str) -> EngineError:
    """The error for an estimator name nothing registered, with the names that are."""
    local = [n for n in REGISTRY if n != CLOUD_ESTIMATOR]
    return EngineError(
        f"unknown estimator {name!r}; use {CLOUD_ESTIMATOR} (the cloud's) or one of the local engine's: "
        f"{', '.join(local)}"
    )


def make_estimator(plan: EstimatorPlan, student: Module, teacher: Module) -> Estimator:
    """The estimator the plan names."""
    cls = REGISTRY.get(plan.estimator)
    if cls is None:
        raise unknown_estimator(plan.estimator)
    return cls(plan, student, teacher)
