"""The local OPD engine: what Bailian does to an OPD job, on local Hugging Face models.

One step: take ``batch_size`` prompts, sample ``n_rollouts`` completions each from the student
(one batched decode loop, KV cache) or, in agentic mode, let the user's rollout function drive the
student through a local OpenAI-compatible endpoint; score every student token with the teacher
(one no-grad forward per ``opd_teacher_max_num_batched_tokens`` budget, heads only on the
response window); optionally score each trajectory with the reward functions; then make
``ceil(batch_size x n_rollouts / ppo_mini_batch_size)`` optimizer updates.

Estimators: ``pg_opd`` (default, the cloud's): per-token advantage -(log pi_s - log pi_t) on the
sampled tokens, discount 0, GSPO-token clipped policy loss. ``gkd`` (local): exact reverse KL over
the full vocabulary, computed in chunks. A task reward adds a group-normalised advantage.
The local meaning of the cloud's hyper-parameters is in :mod:`opd_nb.engine.hparams`.

Each step also records a fair sample of its rollouts, and each evaluation every validation answer,
with per-token student/teacher log-probs taken from the tensors the step already has
(:mod:`opd_nb.engine.rollouts`), and reports ``actor/entropy``, ``trace/distillation/teacher_kl``
and, with a reward, ``trace/reward/zero_variance_groups``.

Speed: Llama-family models (Qwen3, Qwen2, Llama) run through :mod:`opd_nb.engine.lean`, the same
function with fused projections and a preallocated KV cache; others through ``transformers``. The
prompts' shared prefix runs once (:mod:`opd_nb.engine.batch`), and the process keeps freed memory
for reuse (:mod:`opd_nb.engine.allocator`).
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opd_nb.constants import ENTROPY, TEACHER_KL, ZERO_VARIANCE_GROUPS
from opd_nb.engine import hparams as hp_mod
from opd_nb.engine.api import EngineError, EngineEvents, EngineJob, EngineResult

METRICS_FILE = "metrics.jsonl"
STATE_FILE = "trainer_state.pt"


@dataclass
class TokenScores:
    """Per-token view of a batch's last ``window`` columns, [B, W] tensors (what rollout records read)."""

    ids: Any  # token ids
    mask: Any  # bool: a trained (student-generated) token
    valid: Any  # bool: scored by the teacher (inside opd_teacher_max_model_len)
    student: Any  # student log-prob of the token under the sampling policy
    teacher: Any  # teacher log-prob of the token


def _put(dst: Any, idx: Any, mask: Any, vals: Any, whole: bool) -> None:
    """dst[idx][mask] = vals (`whole`: idx is every row in order, so no gather/scatter of rows)."""
    if whole:
        dst[mask] = vals
        return
    blk = dst[idx]
    blk[mask] = vals
    dst[idx] = blk


class ListEvents:
    """An :class:`EngineEvents` that records everything (tests, notebooks, the bench)."""

    def __init__(self, echo: bool = False):
        self.echo = echo
        self.logs: list[tuple[str, str]] = []
        self.rows: list[dict[str, Any]] = []
        self.progress_calls: list[tuple[int, int, int, int, float | None]] = []
        self.checkpoints: list[tuple[int, str, dict[str, float]]] = []

    def log(self, message: str, level: str = "INFO") -> None:
        self.logs.append((level, message))
        if self.echo:
            print(f"[{level}] {message}", flush=True)

    def progress(self, step: int, total_steps: int, epoch: int, n_epochs: int, eta_s: float | None) -> None:
        self.progress_calls.append((step, total_steps, epoch, n_epochs, eta_s))

    def metrics(self, row: dict[str, Any]) -> None:
        self.rows.append(dict(row))

    def checkpoint(self, step: int, path: str, metrics: dict[str, float]) -> None:
        self.checkpoints.append((step, path, dict(metrics)))

    def series(self, name: str) -> list[tuple[int, float]]:
        """(step, value) for every row that has metric `name`."""
        return [(r["step"], r[name]) for r in self.rows if name in r]

    @property
    def text(self) -> str:
        return "\n".join(m for _, m in self.logs)


def _fmt_eta(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class _Run:
    """State of one job run (kept in an object so the step stages stay small functions)."""

    def __init__(self, job: EngineJob, events: EngineEvents, should_stop: Callable[[], bool]):
        import torch

        from opd_nb.engine import allocator, data, models

        allocator.keep_freed_memory()

        self.torch = torch
        self.job, self.events, self.should_stop = job, events, should_stop
        self.out = Path(job.output_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.device = job.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise EngineError(f"device {self.device!r} was asked for but CUDA is not available here")
        self.log(
            f"job {job.job_id}: loading student {job.student_path} and teacher {job.teacher_path} on {self.device}"
        )
        student_src = job.resume_from or job.student_path
        self.tok = models.load_tokenizer(student_src, "student")
        try:
            teacher_tok = models.load_tokenizer(job.teacher_path, "teacher")
        except EngineError:
            teacher_tok = None
        self.student = models.load_model(student_src, "student", self.device)
        self.teacher = models.load_model(job.teacher_path, "teacher", self.device)
        models.check_vocab(self.tok, teacher_tok, self.student, self.teacher, student_src, job.teacher_path)
        self.teacher.eval()
        self.teacher.requires_grad_(False)
        self.student.train()
        from opd_nb.engine import lean

        self.s_lean, self.t_lean = lean.wrap(self.student), lean.wrap(self.teacher)
        self.log(
            "forward: "
            + ", ".join(
                f"{role} {'lean fused' if fast else 'transformers'} ({m.config.model_type})"
                for role, fast, m in (
                    ("student", self.s_lean, self.student),
                    ("teacher", self.t_lean, self.teacher),
                )
            )
        )
        self.n_student = models.n_params(self.student)
        self.plan = hp_mod.resolve(
            job.hyper_parameters,
            student_params=self.n_student,
            estimator=job.algorithm,
            local_learning_rate=job.local_learning_rate,
        )
        p = self.plan
        self.log(f"learning rate: cloud {p.cloud_learning_rate:g} -> local {p.learning_rate:g} ({p.lr_rule})")
        self.log(
            f"estimator {p.estimator}, policy loss {p.policy_loss}; batch_size={p.batch_size} prompts x "
            f"n_rollouts={p.n_rollouts} per step, ppo_mini_batch_size={p.ppo_mini_batch_size} sequences per "
            f"update ({p.updates_per_step} update(s) per step); teacher max_model_len={p.teacher_max_model_len}, "
            f"max_num_batched_tokens={p.teacher_max_num_batched_tokens}"
        )
        if job.rewards and p.n_rollouts < 2 and job.rollout is None:
            self.log(
                "n_rollouts = 1 with a reward: the group-normalised task advantage is always 0; "
                "use n_rollouts >= 2 for the reward to matter",
                "WARNING",
            )
        self.train_rows = data.tokenize_rows(
            data.read_rows(job.train_file), self.tok, p.max_prompt_length, job.train_file, self.log
        )
        self.val_rows = []
        if job.validation_file:
            self.val_rows = data.tokenize_rows(
                data.read_rows(job.validation_file),
                self.tok,
                p.max_prompt_length,
                job.validation_file,
                self.log,
            )
        self.steps_per_epoch = math.ceil(len(self.train_rows) / p.batch_size)
        self.total_steps = self.steps_per_epoch * p.n_epochs
        self.opt = torch.optim.AdamW(
            [q for q in self.student.parameters() if q.requires_grad],
            lr=p.learning_rate,
            weight_decay=0.0,
            foreach=True,  # not fused=True: its kernel leaves parameters' version counters alone, which the
            # lean forward's no-grad weight cache reads to see an optimizer step (lean.LeanLM._weights)
        )
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, hp_mod.lr_lambda(p, self.total_steps))
        self.step = 0
        self.metrics_tail: dict[str, float] = {}
        self.best: tuple[float, str] | None = None
        self.eos_ids = self._eos_ids()
        self.agentic = None
        max_pos = getattr(self.student.config, "max_position_embeddings", None) or 10**9
        self.max_total = min(p.max_length, int(max_pos))
        random.seed(job.seed)
        torch.manual_seed(job.seed)
        if job.resume_from:
            self._load_state(Path(job.resume_from))
        from opd_nb.engine.rewards import RewardCaller
        from opd_nb.engine.rollouts import Recorder

        self.reward_caller = RewardCaller() if job.rewards else None
        self.recorder = Recorder(self.out, self.tok, self.log)
        if self.recorder.enabled:
            self.recorder.start(self.step)

    # ---- plumbing -------------------------------------------------------------------------------
    def log(self, message: str, level: str = "INFO") -> None:
        self.events.log(message, level)

    def _eos_ids(self) -> list[int]:
        ids = self.student.generation_config.eos_token_id
        ids = list(ids) if isinstance(ids, list | tuple) else ([ids] if ids is not None else [])
        if self.tok.eos_token_id is not None and self.tok.eos_token_id not in ids:
            ids.append(self.tok.eos_token_id)
        return ids

    def epoch_order(self, epoch: int) -> list[int]:
        g = self.torch.Generator().manual_seed(self.job.seed * 1_000_003 + epoch)
        return self.torch.randperm(len(self.train_rows), generator=g).tolist()

    # ---- generation -----------------------------------------------------------------------------
    def _generate(
        self,
        prompt_ids: list[list[int]],
        *,
        temperature: float,
        top_p: float,
        max_new: int,
        lps: list | None = None,
        seeds: list[int] | None = None,
        decode_steps: int | None = None,
    ):
        """One batched generate call (KV cache) -> (sequences [B, P+C], prompt attention [B, P], P, eos mask).

        `lps` (greedy only): filled with each decode step's log-prob of the chosen token, [B] per step.
        `seeds`: a random stream per row (:meth:`generate_ids`) instead of the job's global one.
        `decode_steps`: decode exactly this many steps (at most) instead of what the longest prompt leaves.
        """
        torch = self.torch
        pad = self.tok.pad_token_id
        P = max(len(x) for x in prompt_ids)
        ids = torch.full((len(prompt_ids), P), pad, dtype=torch.long)
        att = torch.zeros((len(prompt_ids), P), dtype=torch.long)
        for j, x in enumerate(prompt_ids):
            ids[j, P - len(x) :] = torch.tensor(x)
            att[j, P - len(x) :] = 1
        ids, att = ids.to(self.device), att.to(self.device)
        greedy = temperature <= 0
        was_training = self.student.training
        self.student.eval()
        n_new = decode_steps or max(1, min(max_new, self.max_total - P))
        draws = None if greedy or seeds is None else _row_draws(torch, seeds, n_new, ids.device)
        out = self._sample(ids, att, n_new, temperature, top_p, greedy, lps, draws)
        if was_training:
            self.student.train()
        comp = out[:, P:]
        is_eos = torch.zeros_like(comp, dtype=torch.bool)
        for e in self.eos_ids:
            is_eos |= comp == e
        before = (is_eos.cumsum(-1) - is_eos.long()) == 0  # tokens up to and including the first EOS
        return out, att, P, before, is_eos.any(-1)

    def _sample(
        self, ids, att, max_new: int, temperature: float, top_p: float, greedy: bool, lps=None, draws=None
    ):
        """A lean decode loop (KV cache, one forward per token, stops when every row has ended).

        Why not ``generate``: at small scale its per-token bookkeeping costs as much as the model.
        `draws` ([B, max_new] uniforms): decode step t samples with column t instead of the global RNG.
        """
        from transformers import DynamicCache

        from opd_nb.engine.batch import SeqBatch, cache_kw, prefix_forward, shared_prefix

        torch = self.torch
        pad = self.tok.pad_token_id
        eos = torch.tensor(self.eos_ids, device=ids.device)
        B = ids.shape[0]
        t = iter(range(max_new))

        def pick(logits):
            if greedy and lps is not None:  # the chosen token's log-prob comes with the argmax
                top, arg = logits.max(-1)
                lps.append(top - logits.logsumexp(-1))
                return arg
            if greedy:
                return logits.argmax(-1)
            probs = torch.softmax(logits / temperature, -1)
            if top_p < 1.0:
                sp, si = probs.sort(-1, descending=True)
                keep = (sp.cumsum(-1) - sp) < top_p
                probs = torch.zeros_like(probs).scatter(-1, si, sp * keep)
            # inverse-CDF draw: the same distribution as torch.multinomial at a sixth of its cost here;
            # a token of probability 0 is never drawn (its CDF step is empty)
            cdf = probs.cumsum(-1)
            u = (
                torch.rand((probs.shape[0], 1), device=probs.device)
                if draws is None
                else draws[:, next(t), None]
            )
            u = u * cdf[:, -1:]
            return (cdf < u).sum(-1).clamp(max=probs.shape[-1] - 1)

        # the prompts' common prefix (system prompt, template) runs once
        k = shared_prefix(SeqBatch(ids, att, torch.zeros_like(ids, dtype=torch.bool), ids[:, 0]), 0)
        if self.s_lean is not None:
            return self.s_lean.decode(ids, att, k, max_new, pick, eos, pad).clone()
        pos = (att.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        ckw = cache_kw(self.student, cache)
        toks = []
        done = torch.zeros(B, dtype=torch.bool, device=ids.device)
        with torch.inference_mode():
            if k:
                out, att = prefix_forward(self.student, ids, att, pos, k, cache, logits_to_keep=1)
            else:
                out = self.student(
                    input_ids=ids,
                    attention_mask=att,
                    position_ids=pos,
                    use_cache=True,
                    logits_to_keep=1,
                    **ckw,
                )
            last = pos[:, -1:]
            n_att = att.shape[1]
            att = torch.cat([att, torch.ones((B, max_new), dtype=att.dtype, device=att.device)], dim=1)
            for _ in range(max_new):
                nxt = pick(out.logits[:, -1].float())
                nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
                toks.append(nxt)
                done = done | torch.isin(nxt, eos)
                if bool(done.all()):
                    break
                n_att += 1
                last = last + 1
                out = self.student(
                    input_ids=nxt[:, None],
                    attention_mask=att[:, :n_att],
                    position_ids=last,
                    use_cache=True,
                    **ckw,
                )
        return torch.cat([ids, torch.stack(toks, 1)], dim=1).clone()

    def generate_ids(
        self,
        prompt_ids: list[list[int]],
        *,
        temperature: float,
        top_p: float,
        max_new: int | list[int],
        seeds: list[int] | None = None,
    ) -> list[tuple[list[int], bool]]:
        """Completion ids (incl. EOS when produced) and whether the row ended with EOS within its budget, per prompt.

        `max_new`: one budget for every row, or one per row. A row's budget is also cut to what its own
        prompt leaves of ``max_total``, never to what the batch's longest prompt leaves, and `seeds` (one
        per prompt) give each row a random stream of its own: so what a request samples does not depend
        on which other requests shared its batch.
        """
        wants = max_new if isinstance(max_new, list) else [max_new] * len(prompt_ids)
        budgets = [max(1, min(m, self.max_total - len(x))) for m, x in zip(wants, prompt_ids, strict=True)]
        out, _, P, before, has_eos = self._generate(
            prompt_ids,
            temperature=temperature,
            top_p=top_p,
            max_new=max(budgets),
            seeds=seeds,
            decode_steps=max(budgets),
        )
        lens = before.sum(-1).tolist()
        rows = []
        for j, budget in enumerate(budgets):
            n = min(lens[j], budget)  # the tokens after a row's budget were decoded for longer rows only
            rows.append((out[j, P : P + n].tolist(), bool(has_eos[j]) and lens[j] <= budget))
        return rows

    def generate(
        self, prompt_ids: list[list[int]], groups: list[int], *, greedy: bool, logprobs: bool = False
    ):
        """Native rollouts as a SeqBatch; completions are marked up to and including EOS.

        `logprobs` (greedy): keep the student's log-prob of each chosen token (``SeqBatch.logprobs``).
        """
        from opd_nb.engine.batch import SeqBatch

        torch = self.torch
        lps: list | None = [] if greedy and logprobs else None
        out, att, P, before, has_eos = self._generate(
            prompt_ids,
            temperature=0.0 if greedy else self.plan.temperature,
            top_p=1.0,
            max_new=self.max_total,
            lps=lps,
        )
        tmask = torch.zeros_like(out, dtype=torch.bool)
        tmask[:, P:] = before
        att_full = torch.cat([att, before.long()], dim=1)
        lengths = before.sum(-1).tolist()
        comp = out[:, P:]
        texts = self.tok.batch_decode(
            [comp[j, : lengths[j] - (1 if has_eos[j] else 0)].tolist() for j in range(len(prompt_ids))],
            skip_special_tokens=True,
        )
        b = SeqBatch(out, att_full, tmask, torch.tensor(groups, device=self.device), texts, ~has_eos)
        if lps:
            b.logprobs = torch.stack(lps, 1)  # [B, C]: the completion columns, which are the window
        return b

    def hidden(self, lean_model, model, b, window: int):
        """Final hidden states predicting the last `window` tokens, through the lean forward where it applies."""
        from opd_nb.engine.batch import hidden_window, shared_prefix

        if lean_model is None:
            return hidden_window(model, b, window)
        return lean_model.hidden_window(
            b.input_ids, b.attention_mask, b.position_ids, window, shared_prefix(b, window)
        )

    # ---- teacher --------------------------------------------------------------------------------
    def teacher_score(self, b, window: int, logprobs: bool | None = None):
        """Teacher log-probs of the window's tokens ([B, W]) or, for gkd, its hidden states ([B, W, H]).

        ``logprobs=True`` asks for log-probs whatever the estimator (validation records).
        """
        from opd_nb.engine import losses
        from opd_nb.engine.batch import targets_window

        torch = self.torch
        want_lp = self.plan.estimator != "gkd" if logprobs is None else logprobs
        L = b.input_ids.shape[1]
        rows = max(1, self.plan.teacher_max_num_batched_tokens // L)
        w, bias = losses.head_params(self.teacher)
        parts = []
        with torch.inference_mode():
            for s in range(0, len(b), rows):
                sub = b if rows >= len(b) else b.select(list(range(s, min(len(b), s + rows))))
                h = self.hidden(self.t_lean, self.teacher, sub, window)
                if not want_lp:
                    parts.append(h)
                else:
                    ids, _, _ = targets_window(sub, window)
                    lp = losses.token_logprobs(h.reshape(-1, h.shape[-1]), w, bias, ids.reshape(-1))
                    parts.append(lp.view(ids.shape))
        return torch.cat(parts)

    # ---- one step -------------------------------------------------------------------------------
    def student_logprobs(self, b, window: int, need_logprobs: bool = True, entropy: bool = False):
        """(final hidden states, log-probs of the window's tokens or None, entropies or None), [B, W(, H)].

        ``entropy``: also the full-vocabulary entropy at each position, from the same logits.
        """
        from opd_nb.engine import losses
        from opd_nb.engine.batch import targets_window

        h = self.hidden(self.s_lean, self.student, b, window)
        if not need_logprobs:
            return h, None, None
        ids, _, _ = targets_window(b, window)
        w, bias = losses.head_params(self.student)
        flat_h, flat_ids = h.reshape(-1, h.shape[-1]), ids.reshape(-1)
        if entropy:
            lp, ent = losses.token_logprobs_entropy(flat_h, w, bias, flat_ids)
            return h, lp.view(ids.shape), ent.view(ids.shape)
        return h, losses.token_logprobs(flat_h, w, bias, flat_ids).view(ids.shape), None

    def score_tokens(self, b) -> TokenScores:
        """No-grad student and teacher log-probs of a batch's tokens (validation answers): the student's from
        the greedy decode when it kept them, else one student pass; one teacher pass."""
        from opd_nb.engine.batch import targets_window

        window = b.window
        ids, tm, pos = targets_window(b, window)
        if b.logprobs is not None and b.logprobs.shape[1] == window:
            s_lp = b.logprobs
        else:
            with self.torch.inference_mode():
                _, s_lp, _ = self.student_logprobs(b, window)
        t_lp = self.teacher_score(b, window, logprobs=True)
        return TokenScores(ids, tm, tm & (pos < self.plan.teacher_max_model_len), s_lp, t_lp)

    def _old_logprobs(self, b, window: int):
        """The sampling policy's log-probs and entropies, frozen before several updates make the rest off-policy."""
        torch = self.torch
        mb = self.plan.ppo_mini_batch_size
        with torch.no_grad():
            parts = [
                self.student_logprobs(b.select(list(range(s, min(len(b), s + mb)))), window, entropy=True)
                for s in range(0, len(b), mb)
            ]
        return torch.cat([x[1] for x in parts]), torch.cat([x[2] for x in parts])

    def _pg_loss(self, lp, lp_o, t_lp, v, tm, at):
        """pg_opd: GSPO/GRPO loss on A = -clamp(k1) (+ task advantage) -> (loss, extra, sum of clamped k1)."""
        from opd_nb.engine import losses

        p = self.plan
        k1 = (lp_o - t_lp).clamp(-p.kl_clamp, p.kl_clamp)
        adv = -k1 * v
        if at is not None:
            adv = adv + at
        loss, extra = losses.policy_loss(
            lp,
            lp_o,
            adv.detach(),
            tm if at is not None else v,
            kind=p.policy_loss,
            clip_low=p.clip_low,
            clip_high=p.clip_high,
        )
        return loss, extra, float((k1 * v).sum())

    def _gkd_loss(self, h, t_h, ids, tm, v, lp, lp_o, at):
        """gkd: exact reverse KL on the teacher-scored tokens (+ the task PG loss) -> (loss, extra, KL sum,
        (student lp, teacher lp, entropy) at the trained tokens).

        The KL runs over every trained token (the records want the student's log-prob there too); the
        loss counts only the teacher-scored ones.
        """
        from opd_nb.engine import losses

        p = self.plan
        ws, bs = losses.head_params(self.student)
        wt, bt = losses.head_params(self.teacher)
        rkl, s_lp, t_lp, ent = losses.reverse_kl_stats(h[tm], ws, bs, t_h[tm], wt, bt, ids[tm])
        rkl = rkl * v[tm].to(rkl.dtype)
        loss = rkl.sum() / v.sum().clamp(min=1)
        extra: dict[str, float] = {}
        if at is not None:
            pg, extra = losses.policy_loss(
                lp, lp_o, at.detach(), tm, kind=p.policy_loss, clip_low=p.clip_low, clip_high=p.clip_high
            )
            loss = loss + pg
        return loss, extra, float(rkl.detach().sum()), (s_lp, t_lp, ent)

    def _diagnostics(self, metrics: dict[str, Any], s: TokenScores, ent) -> None:
        """Entropy of the sampling policy at its trained tokens, and the k1 estimate of KL(student || teacher)."""
        torch = self.torch
        n_gen = float(s.mask.sum())
        metrics["trace/distillation/valid_token_rate"] = float(s.valid.sum()) / max(1.0, n_gen)
        metrics[ENTROPY] = float(torch.where(s.mask, ent, 0.0).sum()) / max(1.0, n_gen)
        kl = torch.where(s.valid, s.student - s.teacher, 0.0).sum() / s.valid.sum().clamp(min=1)
        metrics[TEACHER_KL] = float(kl)

    def update(self, b, t_vals, adv_task, window: int, metrics: dict[str, Any]) -> TokenScores:
        """Optimizer updates over mini-batches of the step's sequences.

        Returns the sampled tokens' log-probs under the sampling policy and the teacher, as the
        update computed them (the diagnostics and the rollout records read these; no extra passes).
        With several gkd updates per step, later mini-batches' student log-probs are those the
        policy had at that update.
        """
        from opd_nb.engine.batch import targets_window

        torch = self.torch
        p = self.plan
        ids_w, tmask, pos = targets_window(b, window)
        valid = tmask & (pos < p.teacher_max_model_len)
        has_task = adv_task is not None
        gkd = p.estimator == "gkd"
        order = torch.randperm(len(b)).tolist()
        mbs = [order[i : i + p.ppo_mini_batch_size] for i in range(0, len(b), p.ppo_mini_batch_size)]
        need_lp = not gkd or has_task
        lp_old = ent_old = None
        if (
            len(mbs) > 1 and need_lp
        ):  # later updates are off-policy: freeze the sampling policy's log-probs first
            lp_old, ent_old = self._old_logprobs(b, window)
        zeros = torch.zeros(tmask.shape, device=tmask.device)
        s_rec = lp_old if lp_old is not None else zeros
        ent_rec = ent_old if ent_old is not None else zeros.clone()
        t_rec = zeros.clone() if gkd else t_vals
        d_sum = d_cnt = 0.0
        norms, clipfracs, ppo_kls = [], [], []
        for mb in mbs:
            one = len(mbs) == 1
            if one:  # one update per step: the whole batch in its own order (no copy)
                mb = list(range(len(b)))
            sub = b if one else b.select(mb)
            idx = torch.tensor(mb, device=b.input_ids.device)
            # gkd without a task reward needs no sampled-token log-probs (the KL uses full distributions)
            h, lp, ent = self.student_logprobs(
                sub, window, need_logprobs=need_lp, entropy=not gkd and ent_old is None
            )
            lp_o = None if lp is None else (lp.detach() if lp_old is None else lp_old[idx])
            v = valid[idx]
            tm = tmask[idx]
            at = adv_task[idx][:, None].expand_as(tm).to(h.dtype) * tm if has_task else None
            if not gkd:
                if lp_old is None:  # one update: this pass is the sampling policy's
                    s_rec, ent_rec = lp_o, ent
                loss, extra, k1_sum = self._pg_loss(lp, lp_o, t_vals[idx], v, tm, at)
                d_sum += k1_sum
            else:
                loss, extra, kl_sum, (s_lp, t_lp, ent_t) = self._gkd_loss(
                    h, t_vals[idx], ids_w[idx], tm, v, lp, lp_o, at
                )
                d_sum += kl_sum
                _put(t_rec, idx, tm, t_lp, one)
                if lp_old is None:
                    _put(s_rec, idx, tm, s_lp, one)
                if ent_old is None:
                    _put(ent_rec, idx, tm, ent_t, one)
            d_cnt += float(v.sum())
            if not torch.isfinite(loss):
                raise EngineError(
                    f"the loss became {float(loss)} at step {self.step}; lower the learning rate"
                )
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(self.student.parameters(), 1.0)))
            self.opt.step()
            if extra:
                clipfracs.append(extra["actor/pg_clipfrac"])
                ppo_kls.append(extra["actor/ppo_kl"])
        metrics["actor/distillation/loss"] = d_sum / max(1.0, d_cnt)
        metrics["actor/grad_norm"] = sum(norms) / len(norms)
        if clipfracs:
            metrics["actor/pg_clipfrac"] = sum(clipfracs) / len(clipfracs)
            metrics["actor/ppo_kl"] = sum(ppo_kls) / len(ppo_kls)
        scores = TokenScores(ids_w, tmask, valid, s_rec, t_rec)
        self._diagnostics(metrics, scores, ent_rec)
        return scores

    def rollout(self, rows):
        """Native or agentic rollouts for `rows` (n_rollouts each)."""
        n = self.plan.n_rollouts
        prompt_ids = [r.prompt_ids for r in rows for _ in range(n)]
        groups = [g for g in range(len(rows)) for _ in range(n)]
        b = self.generate(prompt_ids, groups, greedy=False)
        b.messages = [
            rows[g].messages + [{"role": "assistant", "content": t}]
            for g, t in zip(groups, b.texts, strict=True)
        ]
        return b

    def reward(self, rows, b, where: str):
        """Start scoring the step's rollouts with the job's reward functions (see rewards.RewardCaller)."""
        from opd_nb.engine import rewards

        groups = b.group.tolist()
        samples = [
            rewards.Sample(
                messages=b.messages[i],
                rollout_extra=rows[g].rollout_extra,
                group=g,
                sample_id=f"{where}-{g}",
                rollout_id=str(i),
            )
            for i, g in enumerate(groups)
        ]
        return self.reward_caller.submit(
            self.job.rewards, samples, self.job.job_id, where=where, log=self.log
        )

    def train_step(self, rows, epoch: int) -> dict[str, Any]:
        from opd_nb.engine import rewards

        torch = self.torch
        t0 = time.perf_counter()
        where = f"step {self.step + 1}"
        metrics: dict[str, Any] = {}
        adv_task = None
        traj = res = None
        if self.agentic is not None:
            b, m, adv_task, traj = self.agentic.collect(rows, self.plan.n_rollouts, where)
            metrics.update(m)
        else:
            b = self.rollout(rows)
        t1 = time.perf_counter()
        pending = self.reward(rows, b, where) if self.job.rewards and self.agentic is None else None
        window = b.window
        t_vals = self.teacher_score(b, window)  # while the reward functions score the same rollouts
        t2 = time.perf_counter()
        if pending is not None:
            res = pending.result()
            metrics.update(res.metrics)
            groups = b.group.tolist()
            metrics[ZERO_VARIANCE_GROUPS] = rewards.zero_variance_fraction(res.totals, groups)
            adv = rewards.group_advantages(res.totals, groups)
            adv_task = torch.tensor(adv, dtype=torch.float32, device=self.device)
        t3 = time.perf_counter()
        metrics["actor/lr"] = self.sched.get_last_lr()[0]
        scores = self.update(b, t_vals, adv_task, window, metrics)
        self.sched.step()
        t4 = time.perf_counter()
        if self.recorder.enabled:
            if traj is not None:
                recs = self.agentic.to_record(traj, scores, self.recorder.per_step, self.step + 1)
            else:
                per = res.per_sample if res is not None else None
                recs = self.native_rollouts(rows, b, scores, per, limit=self.recorder.per_step)
            self.recorder.write("train", self.step + 1, recs)
        t5 = time.perf_counter()
        resp = b.target_mask.sum(-1).float()
        metrics["response_length/mean"] = float(resp.mean())
        if b.truncated is not None:
            metrics["completions/truncated_fraction"] = float(b.truncated.float().mean())
        metrics["timing_s/gen"] = t1 - t0
        metrics["timing_s/teacher"] = t2 - t1
        metrics["timing_s/reward"] = 0.0 if pending is None else pending.seconds  # beside the teacher
        metrics["timing_s/update"] = t4 - t3
        metrics["timing_s/record"] = t5 - t4
        metrics["timing_s/step"] = t5 - t0
        metrics["perf/tokens_per_s"] = float(b.attention_mask.sum()) / max(1e-9, t5 - t0)
        return metrics

    # ---- rollout records ------------------------------------------------------------------------
    def turns(self, scores: TokenScores, rows: list[int]) -> dict[int, Any]:
        """A :class:`rollouts.Turn` (trained tokens and both log-probs) per batch row in `rows`."""
        from opd_nb.engine.rollouts import Turn

        if not rows:
            return {}
        idx = self.torch.tensor(rows, device=scores.ids.device)
        cols = [
            x[idx].tolist() for x in (scores.ids, scores.mask, scores.valid, scores.student, scores.teacher)
        ]
        out = {}
        for r, ids, tm, va, s, t in zip(rows, *cols, strict=True):
            keep = [j for j, m in enumerate(tm) if m]
            out[r] = Turn(
                ids=[ids[j] for j in keep],
                student=[s[j] for j in keep],
                teacher=[t[j] if va[j] else None for j in keep],
            )
        return out

    def native_rollouts(self, rows, b, scores: TokenScores, per: list | None, limit: int | None) -> list:
        """Records of native rollouts: a fair sample of at most `limit` (None: all), in batch order of groups."""
        from opd_nb.engine.rollouts import Rollout, fair_sample, ranks

        groups = b.group.tolist()
        sel = list(range(len(groups))) if limit is None else fair_sample(groups, limit, self.step + 1)
        turns = self.turns(scores, sel)
        rank = ranks(groups)
        trunc = b.truncated.tolist() if b.truncated is not None else [False] * len(groups)
        return [
            Rollout(
                group=groups[j],
                sample=rank[j],
                messages=rows[groups[j]].messages,
                turns=[turns[j]],
                truncated=bool(trunc[j]),
                reward=per[j] if per else None,
            )
            for j in sel
        ]

    # ---- evaluation -----------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """Greedy single sample per validation prompt: accuracy (task rows) and reward mean@1."""
        from opd_nb.engine import task

        if not self.val_rows:
            return {}
        if self.agentic is not None:  # validation rollouts go through the rollout function, as in training
            return self.agentic.validate(self.val_rows, where=f"validation at step {self.step}")
        out: dict[str, float] = {}
        rows = self.val_rows
        texts: list[str] = []
        chunk = 512
        batches = []
        per = None
        for s in range(0, len(rows), chunk):
            part = rows[s : s + chunk]
            b = self.generate(
                [r.prompt_ids for r in part],
                list(range(s, s + len(part))),
                greedy=True,
                logprobs=self.recorder.enabled,
            )
            texts.extend(t if not b.truncated[j] else "\x00" for j, t in enumerate(b.texts))
            batches.append(b)
        solved = [(t, r.solution) for t, r in zip(texts, rows, strict=True) if isinstance(r.solution, str)]
        if solved:
            out["validation/accuracy"] = sum(task.is_correct(t, s) for t, s in solved) / len(solved)
        if self.job.rewards and self.job.rollout is None:
            from opd_nb.engine import rewards

            samples = [
                rewards.Sample(
                    messages=r.messages + [{"role": "assistant", "content": t.replace("\x00", "")}],
                    rollout_extra=r.rollout_extra,
                    group=i,
                    sample_id=f"val-{i}",
                    rollout_id="0",
                )
                for i, (t, r) in enumerate(zip(texts, rows, strict=True))
            ]
            res = self.reward_caller.submit(
                self.job.rewards,
                samples,
                self.job.job_id,
                where=f"validation at step {self.step}",
                log=self.log,
            ).result()
            ok = [x for x in res.totals if not math.isnan(x)]
            if ok:
                out["validation/data/reward/mean@1"] = sum(ok) / len(ok)
            per = res.per_sample
        if self.recorder.enabled:
            t0 = time.perf_counter()
            recs = []
            for s, b in zip(range(0, len(rows), chunk), batches, strict=True):
                part = per[s : s + len(b)] if per else None
                recs.extend(self.native_rollouts(rows, b, self.score_tokens(b), part, limit=None))
            self.recorder.write("validation", self.step, recs)
            out["timing_s/validation_record"] = time.perf_counter() - t0
        return out

    # ---- checkpoints ----------------------------------------------------------------------------
    def save_checkpoint(self, epoch: int, cursor: int, metrics: dict[str, float]) -> str:
        torch = self.torch
        ck_root = self.out / "checkpoints"
        path = ck_root / f"checkpoint-{self.step}"
        tmp = ck_root / f".tmp-checkpoint-{self.step}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        self.student.save_pretrained(tmp, safe_serialization=True)
        self.tok.save_pretrained(tmp)
        state = {
            "step": self.step,
            "epoch": epoch,
            "cursor": cursor,
            "total_steps": self.total_steps,
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "rng": {
                "python": random.getstate(),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            },
            "metrics_tail": self.metrics_tail,
            "plan": self.plan.model_dump(),
            "job_id": self.job.job_id,
            "seed": self.job.seed,
            "n_train": len(self.train_rows),
        }
        torch.save(state, tmp / STATE_FILE)
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)
        self._retain(ck_root)
        self.events.checkpoint(self.step, str(path), dict(metrics))
        self.log(f"saved checkpoint-{self.step} to {path}")
        return str(path)

    def _retain(self, ck_root: Path) -> None:
        limit = self.plan.save_total_limit
        if not limit:
            return
        cks = sorted(
            (p for p in ck_root.glob("checkpoint-*") if p.is_dir()), key=lambda p: int(p.name.split("-")[-1])
        )
        for old in cks[:-limit]:
            shutil.rmtree(old, ignore_errors=True)
            self.log(f"removed {old.name} (save_total_limit={limit})")

    def _load_state(self, path: Path) -> None:
        torch = self.torch
        f = path / STATE_FILE
        if not f.is_file():
            raise EngineError(
                f"cannot resume from {str(path)!r}: it has no {STATE_FILE} (only checkpoint-N "
                "directories saved by the engine can be resumed; to start from weights only, "
                "use it as the student model instead)"
            )
        state = torch.load(f, map_location="cpu", weights_only=False)
        if state.get("n_train") != len(self.train_rows):
            self.log(
                f"the training file has {len(self.train_rows)} rows, the checkpoint was made with "
                f"{state.get('n_train')}; the data cursor may not line up",
                "WARNING",
            )
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        random.setstate(state["rng"]["python"])
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"].get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        self.step = int(state["step"])
        self.resume_epoch, self.resume_cursor = int(state["epoch"]), int(state["cursor"])
        self.metrics_tail = dict(state.get("metrics_tail") or {})
        self.log(
            f"resumed from {path.name}: step {self.step}, epoch {self.resume_epoch + 1}, "
            f"data cursor {self.resume_cursor}"
        )

    def publish(self) -> str:
        final = self.out / "final"
        tmp = self.out / ".tmp-final"
        if tmp.exists():
            shutil.rmtree(tmp)
        self.student.save_pretrained(tmp, safe_serialization=True)
        self.tok.save_pretrained(tmp)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        return str(final)

    # ---- main loop ------------------------------------------------------------------------------
    def emit(self, row: dict[str, Any]) -> None:
        clean = {
            k: (float(v) if isinstance(v, float | int) and k not in ("step",) else v) for k, v in row.items()
        }
        with (self.out / METRICS_FILE).open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(clean) + "\n")
        self.events.metrics(clean)

    def run(self) -> EngineResult:
        if self.job.rollout is not None:
            from opd_nb.engine.agentic import Agentic

            self.agentic = Agentic(self)
        try:
            return self._loop()
        finally:
            self.recorder.close()
            if self.reward_caller is not None:
                self.reward_caller.close()
            if self.agentic is not None:
                self.agentic.close()

    def _loop(self) -> EngineResult:
        p = self.plan
        start_epoch = getattr(self, "resume_epoch", 0)
        start_cursor = getattr(self, "resume_cursor", 0)
        if self.step == 0 and self.val_rows:
            ev = self.evaluate()
            if ev:
                self.emit({"step": 0, "epoch": 0.0, **ev})
                self.log("before training: " + ", ".join(f"{k}={v:.4f}" for k, v in ev.items()))
        self.log(
            f"training {self.total_steps} steps ({p.n_epochs} epoch(s) x {self.steps_per_epoch} steps over "
            f"{len(self.train_rows)} prompts)"
        )
        t_start = time.perf_counter()
        steps_here = 0
        every = max(1, self.total_steps // 20)
        stopped = False
        for epoch in range(start_epoch, p.n_epochs):
            order = self.epoch_order(epoch)
            cursor = start_cursor if epoch == start_epoch else 0
            while cursor < len(order):
                if self.should_stop():
                    self.log(f"stop requested; stopping after step {self.step}/{self.total_steps}", "WARNING")
                    stopped = True
                    break
                rows = [self.train_rows[i] for i in order[cursor : cursor + p.batch_size]]
                cursor += len(rows)
                metrics = self.train_step(rows, epoch)
                self.step += 1
                steps_here += 1
                if self.step % p.eval_steps == 0 or self.step == self.total_steps:
                    metrics.update(self.evaluate())
                row = {"step": self.step, "epoch": round(self.step / self.steps_per_epoch, 4), **metrics}
                self.emit(row)
                self.metrics_tail = {k: float(v) for k, v in row.items() if isinstance(v, int | float)}
                elapsed = time.perf_counter() - t_start
                eta = elapsed / steps_here * (self.total_steps - self.step)
                self.events.progress(self.step, self.total_steps, epoch + 1, p.n_epochs, eta)
                if self.step % every == 0 or self.step in (1, self.total_steps):
                    extra = "".join(
                        f", {k.split('/')[-1]}={row[k]:.3f}"
                        for k in ("validation/accuracy", "validation/data/reward/mean@1")
                        if k in row
                    )
                    self.log(
                        f"step {self.step}/{self.total_steps} (epoch {epoch + 1}/{p.n_epochs}): "
                        f"loss={row['actor/distillation/loss']:.4f}, valid_token_rate="
                        f"{row['trace/distillation/valid_token_rate']:.3f}{extra}, "
                        f"{row['timing_s/step'] * 1000:.0f} ms/step, ETA {_fmt_eta(eta)}"
                    )
                save = (p.save_strategy == "steps" and self.step % p.save_steps == 0) or (
                    p.save_strategy == "epoch" and cursor >= len(order)
                )
                if save:
                    path = self.save_checkpoint(
                        epoch if cursor < len(order) else epoch + 1,
                        cursor if cursor < len(order) else 0,
                        self.metrics_tail,
                    )
                    score = row.get("validation/data/reward/mean@1", row.get("validation/accuracy"))
                    if score is not None and (self.best is None or score > self.best[0]):
                        self.best = (float(score), path)
            if stopped:
                break
        final = self.publish()
        self.log(f"published the final model to {final} after {self.step} step(s)")
        return EngineResult(
            final_checkpoint=final,
            best_checkpoint=self.best[1] if self.best else None,
            steps=self.step,
            epochs=p.n_epochs,
            metrics_tail=self.metrics_tail,
        )


def run(
    job: EngineJob, events: EngineEvents, should_stop: Callable[[], bool] = lambda: False
) -> EngineResult:
    """Run one job to completion; raises EngineError (plain words) for job-level failures."""
    try:
        return _Run(job, events, should_stop).run()
    except EngineError as exc:
        events.log(f"job failed: {exc}", "ERROR")
        raise


def _row_draws(torch, seeds: list[int], n: int, device):
    """[len(seeds), n] uniforms, row j from a generator seeded with ``seeds[j]`` (rand(n) is a prefix of
    rand(m) for one seed, so a row's draws do not depend on how many steps its batch decodes)."""
    return torch.stack([torch.rand(n, generator=torch.Generator().manual_seed(s)) for s in seeds]).to(device)
