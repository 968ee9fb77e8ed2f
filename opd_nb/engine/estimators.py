"""The two OPD loss estimators behind one interface, picked once per job from ``plan.estimator``.

``pg_opd`` (default, the cloud's): per-token advantage -(log pi_s - log pi_t) on the sampled tokens,
clamped to ``kl_clamp``, discount 0, the plan's clipped policy loss (GSPO-token by default).
``gkd`` (local): the exact reverse KL over the full vocabulary on the teacher-scored tokens, computed
in chunks from both models' hidden states. With a task reward, both add its group-normalised
advantage through the policy loss.

Each estimator also fills the step's per-token records (:class:`Records`) with what its loss computed,
so the diagnostics and the rollout records need no extra forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass
class Records:
    """The step's sampled tokens' values under the sampling policy, [B, W] (filled by the updates)."""

    student: Any  # student log-prob
    entropy: Any  # full-vocabulary entropy of the student
    teacher: Any  # teacher log-prob
    frozen_logprobs: bool  # `student` was taken before the updates (several mini-batches)
    frozen_entropy: bool  # `entropy` likewise


@dataclass
class MiniBatch:
    """One update's rows and the tensors its loss reads ([b, W] unless noted)."""

    idx: Any  # the rows' indices in the step's batch
    whole: bool  # idx is every row in order (one update per step)
    h: Any  # student final hidden states [b, W, H]
    lp: Any  # student log-probs of the sampled tokens (with grad), or None
    lp_old: Any  # the sampling policy's log-probs, or None
    ent: Any  # student entropies from this pass, or None
    teacher: Any  # the teacher's scores of these rows: log-probs, or hidden states [b, W, H]
    ids: Any  # the whole step's window token ids [B, W] (gathered by the estimator that needs them)
    tm: Any  # trained-token mask
    v: Any  # teacher-scored mask
    at: Any  # task advantage per token, or None


class Estimator(Protocol):
    """What the update loop asks of an estimator."""

    teacher_logprobs: bool  # the teacher gives log-probs of the sampled tokens (else hidden states)
    pass_entropy: bool  # the student pass computes entropies from its own logits

    def needs_logprobs(self, has_task: bool) -> bool:
        """Whether the update needs the student's sampled-token log-probs."""
        ...

    def teacher_record(self, t_vals: Any, zeros: Any) -> Any:
        """The teacher log-prob record to start from ([B, W])."""
        ...

    def loss(self, mb: MiniBatch, rec: Records) -> tuple[Any, dict[str, float], float]:
        """(loss, policy-loss extras, sum of the per-token distillation term); fills `rec`."""
        ...


def _put(dst: Any, idx: Any, mask: Any, vals: Any, whole: bool) -> None:
    """dst[idx][mask] = vals (`whole`: idx is every row in order, so no gather/scatter of rows)."""
    if whole:
        dst[mask] = vals
        return
    blk = dst[idx]
    blk[mask] = vals
    dst[idx] = blk


class PgOpd:
    """pg_opd: the clipped policy loss on A = -clamp(k1) (+ task advantage)."""

    teacher_logprobs = True
    pass_entropy = True

    def __init__(self, plan: Any):
        self.plan = plan

    def needs_logprobs(self, has_task: bool) -> bool:
        return True

    def teacher_record(self, t_vals: Any, zeros: Any) -> Any:
        return t_vals

    def loss(self, mb: MiniBatch, rec: Records) -> tuple[Any, dict[str, float], float]:
        from opd_nb.engine import losses

        p = self.plan
        if not rec.frozen_logprobs:  # one update: this pass is the sampling policy's
            rec.student, rec.entropy = mb.lp_old, mb.ent
        k1 = (mb.lp_old - mb.teacher).clamp(-p.kl_clamp, p.kl_clamp)
        adv = -k1 * mb.v
        if mb.at is not None:
            adv = adv + mb.at
        loss, extra = losses.policy_loss(
            mb.lp,
            mb.lp_old,
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

    def __init__(self, plan: Any, student: Any, teacher: Any):
        self.plan, self.student, self.teacher = plan, student, teacher

    def needs_logprobs(self, has_task: bool) -> bool:
        return has_task  # without a task reward the KL uses full distributions only

    def teacher_record(self, t_vals: Any, zeros: Any) -> Any:
        return zeros.clone()

    def loss(self, mb: MiniBatch, rec: Records) -> tuple[Any, dict[str, float], float]:
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
                mb.lp,
                mb.lp_old,
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


def make_estimator(plan: Any, student: Any, teacher: Any) -> Estimator:
    """The estimator the plan names."""
    return Gkd(plan, student, teacher) if plan.estimator == "gkd" else PgOpd(plan)
