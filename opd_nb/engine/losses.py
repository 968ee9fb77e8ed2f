"""Per-token log-probs, the chunked full-vocabulary reverse KL, and the PG (GSPO/GRPO) losses.

Why chunks: a [batch, sequence, vocabulary] logits tensor is 40 GB at Qwen's vocabulary, so
logits are only ever formed for at most ``CHUNK_ELEMS`` (rows x vocab) at a time from the
final hidden states; with gradients the chunk is recomputed in backward (activation
checkpointing) instead of being kept. For a tiny vocabulary everything fits in one chunk and
the plain path (no recomputation) is taken.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint as _checkpoint  # pyright: ignore[reportUnknownVariableType]

from opd_nb.constants import PG_CLIPFRAC, PPO_KL

# torch leaves checkpoint()'s function argument untyped (so its result is unknown): it returns what the function does
checkpoint = cast("Callable[..., Any]", _checkpoint)

CHUNK_ELEMS = 1 << 24  # logits elements formed at once (64 MB in fp32)


def _rows_per_chunk(vocab: int) -> int:
    return max(1, CHUNK_ELEMS // max(1, vocab))


def head_params(model: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    head = model.get_output_embeddings()
    return head.weight, getattr(head, "bias", None)


def _lp_chunk(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, ids: torch.Tensor) -> torch.Tensor:
    logits = F.linear(h, w, b).float()
    return logits.gather(-1, ids[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def token_logprobs(
    h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, ids: torch.Tensor
) -> torch.Tensor:
    """log p(ids[i] | h[i]) for flattened rows h [N, H], chunked over rows."""
    rows = _rows_per_chunk(w.shape[0])
    if h.shape[0] <= rows:
        return _lp_chunk(h, w, b, ids)
    outs: list[torch.Tensor] = []
    for s in range(0, h.shape[0], rows):
        if torch.is_grad_enabled() and h.requires_grad:
            outs.append(checkpoint(_lp_chunk, h[s : s + rows], w, b, ids[s : s + rows], use_reentrant=False))
        else:
            outs.append(_lp_chunk(h[s : s + rows], w, b, ids[s : s + rows]))
    return torch.cat(outs)


def _lp_ent_chunk(
    h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = F.linear(h, w, b).float()
    lse = torch.logsumexp(logits, dim=-1)
    lp = logits.gather(-1, ids[:, None]).squeeze(-1) - lse
    with torch.no_grad():
        ls = logits.detach() - lse.detach()[:, None]
        ent = -(ls.exp() * ls).sum(-1)
    return lp, ent


def token_logprobs_entropy(
    h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(ids[i] | h[i]), entropy of p(. | h[i]) without gradient) for rows h [N, H], chunked over rows.

    Why together: the entropy diagnostic reuses the logits the log-probs need (no second head pass).
    """
    rows = _rows_per_chunk(w.shape[0])
    if h.shape[0] <= rows:
        return _lp_ent_chunk(h, w, b, ids)
    lps: list[torch.Tensor] = []
    ents: list[torch.Tensor] = []
    for s in range(0, h.shape[0], rows):
        args = (h[s : s + rows], w, b, ids[s : s + rows])
        if torch.is_grad_enabled() and h.requires_grad:
            lp, ent = checkpoint(_lp_ent_chunk, *args, use_reentrant=False)
        else:
            lp, ent = _lp_ent_chunk(*args)
        lps.append(lp)
        ents.append(ent)
    return torch.cat(lps), torch.cat(ents)


def _rkl_chunk(
    hs: torch.Tensor,
    ws: torch.Tensor,
    bs: torch.Tensor | None,
    ht: torch.Tensor,
    wt: torch.Tensor,
    bt: torch.Tensor | None,
) -> torch.Tensor:
    ls = F.log_softmax(F.linear(hs, ws, bs).float(), dim=-1)
    with torch.no_grad():
        lt = F.log_softmax(F.linear(ht, wt, bt).float(), dim=-1)
    return (ls.exp() * (ls - lt)).sum(-1)


def reverse_kl(
    hs: torch.Tensor,
    ws: torch.Tensor,
    bs: torch.Tensor | None,
    ht: torch.Tensor,
    wt: torch.Tensor,
    bt: torch.Tensor | None,
) -> torch.Tensor:
    """Exact per-position KL(student || teacher) over the full vocabulary, [N], chunked over rows."""
    rows = _rows_per_chunk(ws.shape[0])
    if hs.shape[0] <= rows:
        return _rkl_chunk(hs, ws, bs, ht, wt, bt)
    outs: list[torch.Tensor] = []
    for s in range(0, hs.shape[0], rows):
        args = (hs[s : s + rows], ws, bs, ht[s : s + rows], wt, bt)
        if torch.is_grad_enabled() and hs.requires_grad:
            outs.append(checkpoint(_rkl_chunk, *args, use_reentrant=False))
        else:
            outs.append(_rkl_chunk(*args))
    return torch.cat(outs)


def seq_mean_token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over tokens within each sequence, then over sequences that have any token."""
    m = mask.to(x.dtype)
    per_seq = (x * m).sum(-1) / m.sum(-1).clamp(min=1.0)
    has = (m.sum(-1) > 0).to(x.dtype)
    return (per_seq * has).sum() / has.sum().clamp(min=1.0)


def policy_loss(
    lp: torch.Tensor,
    lp_old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    kind: str,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped PG loss on [B, T] tensors. gspo: GSPO-token sequence ratio (verl form); grpo: token ratio.

    On the first update of a step lp == lp_old, the ratio is 1 and this is REINFORCE on `adv`.
    """
    m = mask.to(lp.dtype)
    if kind == "gspo":
        seq_log_ratio = ((lp - lp_old) * m).sum(-1) / m.sum(-1).clamp(min=1.0)
        log_s = lp - lp.detach() + seq_log_ratio.detach()[:, None]
        ratio = torch.exp(log_s.clamp(max=10.0))
        lo, hi = 1.0 - clip_low, 1.0 + clip_high
    else:
        ratio = torch.exp((lp - lp_old).clamp(-20.0, 10.0))
        lo, hi = 0.8, 1.2
    l1 = -adv * ratio
    l2 = -adv * ratio.clamp(lo, hi)
    loss_tok = torch.maximum(l1, l2)
    loss = seq_mean_token_mean(loss_tok, mask)
    with torch.no_grad():
        clipfrac = ((l2 > l1).to(lp.dtype) * m).sum() / m.sum().clamp(min=1.0)
        ppo_kl = ((lp_old - lp) * m).sum() / m.sum().clamp(min=1.0)
    return loss, {PG_CLIPFRAC: float(clipfrac), PPO_KL: float(ppo_kl)}


def _rkl_stats_chunk(
    hs: torch.Tensor,
    ws: torch.Tensor,
    bs: torch.Tensor | None,
    ht: torch.Tensor,
    wt: torch.Tensor,
    bt: torch.Tensor | None,
    ids: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    ls = F.log_softmax(F.linear(hs, ws, bs).float(), dim=-1)
    ps = ls.exp()
    with torch.no_grad():
        lt = F.log_softmax(F.linear(ht, wt, bt).float(), dim=-1)
    kl = (ps * (ls - lt)).sum(-1)
    with torch.no_grad():
        lsd = ls.detach()
        s_lp = lsd.gather(-1, ids[:, None]).squeeze(-1)
        t_lp = lt.gather(-1, ids[:, None]).squeeze(-1)
        ent = -(ps.detach() * lsd).sum(-1)
    return kl, s_lp, t_lp, ent


def reverse_kl_stats(
    hs: torch.Tensor,
    ws: torch.Tensor,
    bs: torch.Tensor | None,
    ht: torch.Tensor,
    wt: torch.Tensor,
    bt: torch.Tensor | None,
    ids: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`reverse_kl` plus, without gradient, the student's and the teacher's log-prob of the sampled
    `ids` and the student's entropy, per position: (kl, student_lp, teacher_lp, entropy), each [N].

    Why: the gkd estimator forms both full distributions anyway; the diagnostics and the rollout
    records read them off instead of running the heads again.
    """
    rows = _rows_per_chunk(ws.shape[0])
    if hs.shape[0] <= rows:
        return _rkl_stats_chunk(hs, ws, bs, ht, wt, bt, ids)
    parts: list[tuple[torch.Tensor, ...]] = []
    for s in range(0, hs.shape[0], rows):
        args = (hs[s : s + rows], ws, bs, ht[s : s + rows], wt, bt, ids[s : s + rows])
        if torch.is_grad_enabled() and hs.requires_grad:
            parts.append(checkpoint(_rkl_stats_chunk, *args, use_reentrant=False))
        else:
            parts.append(_rkl_stats_chunk(*args))
    return tuple(torch.cat(x) for x in zip(*parts, strict=True))  # pyright: ignore[reportReturnType]
