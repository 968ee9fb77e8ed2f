"""A step's optimizer updates: ``ceil(batch_size x n_rollouts / ppo_mini_batch_size)`` per step.

Mini-batches are a random permutation of the step's sequences (the job's global RNG). With more than
one, later updates are off-policy, so the sampling policy's log-probs are frozen first (one no-grad
pass). The loss is the job's :mod:`~opd_nb.engine.estimators` estimator's; gradients are clipped to
norm 1; AdamW's ``fused`` kernel (at 4x the bundled student's width 1.4 ms a step against ``foreach``'s
6.2; it rounds a few parameters one ulp apart from ``foreach``). That kernel leaves the parameters'
version counters alone, which the lean forward's no-grad weight cache reads to see a change
(lean.weights.FusedWeights.current), so every optimizer step also marks that cache stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opd_nb.constants import ENTROPY, GRAD_NORM, LOSS, PG_CLIPFRAC, PPO_KL, TEACHER_KL, VALID_TOKEN_RATE
from opd_nb.engine import hparams as hp_mod
from opd_nb.engine.api import EngineError
from opd_nb.engine.estimators import Estimator, MiniBatch, Records
from opd_nb.engine.scoring import StudentScorer, TokenScores


@dataclass
class _StepBatch:
    """A step's batch and what every one of its updates reads."""

    b: Any  # the SeqBatch
    window: int
    t_vals: Any  # the teacher's scores (log-probs [B, W] or hidden states [B, W, H])
    adv_task: Any  # task advantage per sample [B], or None
    ids: Any  # window token ids [B, W]
    tmask: Any  # trained-token mask [B, W]
    valid: Any  # teacher-scored mask [B, W]


class Updater:
    """The optimizer, its learning-rate schedule and the update loop over one step's batch."""

    def __init__(self, student: StudentScorer, estimator: Estimator, plan: Any, total_steps: int):
        import torch

        self.torch = torch
        self.student, self.estimator, self.plan = student, estimator, plan
        self.opt = torch.optim.AdamW(
            [q for q in student.student.parameters() if q.requires_grad],
            lr=plan.learning_rate,
            weight_decay=0.0,
            fused=True,
        )
        if student.lean is not None:  # see the module docstring
            weights = student.lean.weights
            self.opt.register_step_post_hook(lambda *_args, **_kw: weights.stale())  # pyright: ignore[reportUnknownLambdaType, reportUnknownArgumentType]
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, hp_mod.lr_lambda(plan, total_steps))

    def lr(self) -> float:
        return float(self.sched.get_last_lr()[0])  # torch types it float | Tensor; LambdaLR's is a float

    def update(self, b: Any, t_vals: Any, adv_task: Any, window: int, metrics: dict[str, Any], step: int):
        """Optimizer updates over mini-batches of the step's sequences -> :class:`TokenScores`.

        The scores are the sampled tokens' log-probs under the sampling policy and the teacher, as the
        update computed them (the diagnostics and the rollout records read these; no extra passes).
        With several gkd updates per step, later mini-batches' student log-probs are those the
        policy had at that update.
        """
        from opd_nb.engine.batch import targets_window

        torch, p, est = self.torch, self.plan, self.estimator
        ids_w, tmask, pos = targets_window(b, window)
        valid = tmask & (pos < p.teacher_max_model_len)
        order = torch.randperm(len(b)).tolist()
        mbs = [order[i : i + p.hp.ppo_mini_batch_size] for i in range(0, len(b), p.hp.ppo_mini_batch_size)]
        need_lp = est.needs_logprobs(adv_task is not None)
        lp_old = ent_old = None
        # later updates are off-policy: freeze the sampling policy's log-probs first
        if len(mbs) > 1 and need_lp:
            lp_old, ent_old = self.student.frozen(b, window)
        zeros = torch.zeros(tmask.shape, device=tmask.device)
        rec = Records(
            student=lp_old if lp_old is not None else zeros,
            entropy=ent_old if ent_old is not None else zeros.clone(),
            teacher=est.teacher_record(t_vals, zeros),
            frozen_logprobs=lp_old is not None,
            frozen_entropy=ent_old is not None,
        )
        batch = _StepBatch(b, window, t_vals, adv_task, ids_w, tmask, valid)
        d_sum = d_cnt = 0.0
        norms: list[float] = []
        clipfracs: list[float] = []
        ppo_kls: list[float] = []
        for mb in mbs:
            loss, extra, d, n_valid = self._loss(batch, mb, len(mbs) == 1, rec)
            d_sum += d
            d_cnt += n_valid
            norms.append(self._step(loss, step))
            if extra:
                clipfracs.append(extra[PG_CLIPFRAC])
                ppo_kls.append(extra[PPO_KL])
        metrics[LOSS] = d_sum / max(1.0, d_cnt)
        metrics[GRAD_NORM] = sum(norms) / len(norms)
        if clipfracs:
            metrics[PG_CLIPFRAC] = sum(clipfracs) / len(clipfracs)
            metrics[PPO_KL] = sum(ppo_kls) / len(ppo_kls)
        scores = TokenScores(ids_w, tmask, valid, rec.student, rec.teacher)
        self._diagnostics(metrics, scores, rec.entropy)
        return scores

    def _loss(self, s: _StepBatch, mb: list[int], one: bool, rec: Records):
        """Mini-batch `mb`'s student pass and loss -> (loss, extras, distillation sum, teacher-scored tokens)."""
        torch, b, adv_task = self.torch, s.b, s.adv_task
        if one:  # one update per step: the whole batch in its own order (no copy)
            mb = list(range(len(b)))
        sub = b if one else b.select(mb)
        idx = torch.tensor(mb, device=b.input_ids.device)
        need_lp = self.estimator.needs_logprobs(adv_task is not None)
        h, lp, ent = self.student.logprobs(
            sub,
            s.window,
            need_logprobs=need_lp,
            entropy=self.estimator.pass_entropy and not rec.frozen_entropy,
        )
        frozen = rec.student if rec.frozen_logprobs else None
        lp_o = None if lp is None else (lp.detach() if frozen is None else frozen[idx])
        v = s.valid[idx]
        tm = s.tmask[idx]
        at = adv_task[idx][:, None].expand_as(tm).to(h.dtype) * tm if adv_task is not None else None
        mini = MiniBatch(idx, one, h, lp, lp_o, ent, s.t_vals[idx], s.ids, tm, v, at)
        loss, extra, d = self.estimator.loss(mini, rec)
        return loss, extra, d, float(v.sum())

    def _step(self, loss: Any, step: int) -> float:
        """One optimizer step on `loss` -> the gradient norm before clipping."""
        torch = self.torch
        if not torch.isfinite(loss):
            raise EngineError(f"the loss became {float(loss)} at step {step}; lower the learning rate")
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(self.student.student.parameters(), 1.0))
        self.opt.step()  # pyright: ignore[reportUnknownMemberType] - torch's step overloads leave the closure untyped
        return norm

    def _diagnostics(self, metrics: dict[str, Any], s: TokenScores, ent: Any) -> None:
        """Entropy of the sampling policy at its trained tokens, and the k1 estimate of KL(student || teacher)."""
        torch = self.torch
        n_gen = float(s.mask.sum())
        metrics[VALID_TOKEN_RATE] = float(s.valid.sum()) / max(1.0, n_gen)
        metrics[ENTROPY] = float(torch.where(s.mask, ent, 0.0).sum()) / max(1.0, n_gen)
        kl = torch.where(s.valid, s.student - s.teacher, 0.0).sum() / s.valid.sum().clamp(min=1)
        metrics[TEACHER_KL] = float(kl)
