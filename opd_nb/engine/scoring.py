"""Per-token scores of a batch's response window: the teacher's (no grad) and the student's (with grad).

Why the window: only the last ``window`` columns of a batch hold trained tokens, so both forwards run
their heads there only. The teacher scores in chunks of ``opd_teacher_max_num_batched_tokens`` (one
no-grad forward each) and gives log-probs of the sampled tokens (``pg_opd``) or its final hidden states
(``gkd``, whose loss needs the full distribution, computed later in chunks). Llama-family models run
through :mod:`opd_nb.engine.lean`; the prompts' shared prefix runs once (:mod:`opd_nb.engine.batch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class TokenScores:
    """Per-token view of a batch's last ``window`` columns, [B, W] tensors (what rollout records read)."""

    ids: Any  # token ids
    mask: Any  # bool: a trained (student-generated) token
    valid: Any  # bool: scored by the teacher (inside opd_teacher_max_model_len)
    student: Any  # student log-prob of the token under the sampling policy
    teacher: Any  # teacher log-prob of the token


def hidden(lean_model: Any, model: Any, b: Any, window: int) -> Any:
    """Final hidden states predicting the last `window` tokens, through the lean forward where it applies."""
    from opd_nb.engine.batch import hidden_window, shared_prefix

    if lean_model is None:
        return hidden_window(model, b, window)
    return lean_model.hidden_window(
        b.input_ids, b.attention_mask, b.position_ids, window, shared_prefix(b, window)
    )


class TeacherScorer:
    """The teacher's no-grad scores of the student's tokens (what Bailian's teacher service returns)."""

    def __init__(self, teacher: Any, lean: Any, max_num_batched_tokens: int, logprobs: bool):
        self.teacher, self.lean = teacher, lean
        self.max_num_batched_tokens = max_num_batched_tokens
        self.logprobs = logprobs  # the estimator's default: log-probs, else hidden states

    def score(self, b: Any, window: int, logprobs: bool | None = None) -> Any:
        """Teacher log-probs of the window's tokens ([B, W]) or its hidden states ([B, W, H]).

        ``logprobs=True`` asks for log-probs whatever the estimator (validation records).
        """
        import torch

        from opd_nb.engine import losses
        from opd_nb.engine.batch import targets_window

        want_lp = self.logprobs if logprobs is None else logprobs
        L = b.input_ids.shape[1]
        rows = max(1, self.max_num_batched_tokens // L)
        w, bias = losses.head_params(self.teacher)
        parts: list[torch.Tensor] = []
        with torch.inference_mode():
            for s in range(0, len(b), rows):
                sub = b if rows >= len(b) else b.select(list(range(s, min(len(b), s + rows))))
                h = hidden(self.lean, self.teacher, sub, window)
                if not want_lp:
                    parts.append(h)
                else:
                    ids, _, _ = targets_window(sub, window)
                    lp = losses.token_logprobs(h.reshape(-1, h.shape[-1]), w, bias, ids.reshape(-1))
                    parts.append(lp.view(ids.shape))
        return torch.cat(parts)


class StudentScorer:
    """The student's forward over the window: hidden states, sampled-token log-probs and entropies."""

    def __init__(self, student: Any, lean: Any, mini_batch: int):
        self.student, self.lean, self.mini_batch = student, lean, mini_batch

    def logprobs(self, b: Any, window: int, need_logprobs: bool = True, entropy: bool = False):
        """(final hidden states, log-probs of the window's tokens or None, entropies or None), [B, W(, H)].

        ``entropy``: also the full-vocabulary entropy at each position, from the same logits.
        """
        from opd_nb.engine import losses
        from opd_nb.engine.batch import targets_window

        h = hidden(self.lean, self.student, b, window)
        if not need_logprobs:
            return h, None, None
        ids, _, _ = targets_window(b, window)
        w, bias = losses.head_params(self.student)
        flat_h, flat_ids = h.reshape(-1, h.shape[-1]), ids.reshape(-1)
        if entropy:
            lp, ent = losses.token_logprobs_entropy(flat_h, w, bias, flat_ids)
            return h, lp.view(ids.shape), ent.view(ids.shape)
        return h, losses.token_logprobs(flat_h, w, bias, flat_ids).view(ids.shape), None

    def frozen(self, b: Any, window: int):
        """The sampling policy's log-probs and entropies, frozen before several updates make the rest off-policy."""
        import torch

        mb = self.mini_batch
        with torch.no_grad():
            parts = [
                self.logprobs(b.select(list(range(s, min(len(b), s + mb)))), window, entropy=True)
                for s in range(0, len(b), mb)
            ]
        # need_logprobs and entropy: every part has both
        logprobs = [lp for _, lp, _ in parts if lp is not None]
        entropies = [e for _, _, e in parts if e is not None]
        return torch.cat(logprobs), torch.cat(entropies)


def score_tokens(student: StudentScorer, teacher: TeacherScorer, b: Any, max_model_len: int) -> TokenScores:
    """No-grad student and teacher log-probs of a batch's tokens (validation answers): the student's from
    the greedy decode when it kept them, else one student pass; one teacher pass."""
    import torch

    from opd_nb.engine.batch import targets_window

    window = b.window
    ids, tm, pos = targets_window(b, window)
    if b.logprobs is not None and b.logprobs.shape[1] == window:
        s_lp = b.logprobs
    else:
        with torch.inference_mode():
            _, s_lp, _ = student.logprobs(b, window)
    t_lp = teacher.score(b, window, logprobs=True)
    return TokenScores(ids, tm, tm & (pos < max_model_len), s_lp, t_lp)
