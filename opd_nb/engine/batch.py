"""The one tensor layout every stage shares: padded sequences plus a mask of trained tokens.

Native rollouts come out of ``generate`` as [left-padded prompt | completion | right pad];
agentic samples are left-padded full sequences. Both are a :class:`SeqBatch`; the trained
tokens always sit in the last ``window`` columns, so models only run their heads there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class SeqBatch:
    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L] 1 = real token
    target_mask: torch.Tensor  # [B, L] bool: token is a trained (student-generated) token
    group: torch.Tensor  # [B] index of the prompt within the step (rollouts of a prompt share it)
    texts: list[str] = field(default_factory=list[str])  # decoded completions (for rewards)
    truncated: torch.Tensor | None = None  # [B] bool: hit the length budget without EOS
    messages: list[list[dict[str, Any]]] = field(
        default_factory=list[list[dict[str, Any]]]
    )  # full trajectory per sample (for rewards)
    logprobs: torch.Tensor | None = (
        None  # [B, window] student log-prob of each generated token (greedy decode)
    )

    @property
    def position_ids(self) -> torch.Tensor:
        return (self.attention_mask.cumsum(-1) - 1).clamp(min=0)

    @property
    def window(self) -> int:
        """Number of trailing columns that contain every trained token."""
        cols = self.target_mask.any(0).nonzero()
        if cols.numel() == 0:
            return 1
        return int(self.input_ids.shape[1] - cols[0].item())

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, idx: Any) -> SeqBatch:
        idx_t = torch.as_tensor(idx, dtype=torch.long, device=self.input_ids.device)
        il: list[int] = values(idx_t)
        return SeqBatch(
            self.input_ids[idx_t],
            self.attention_mask[idx_t],
            self.target_mask[idx_t],
            self.group[idx_t],
            [self.texts[i] for i in il] if self.texts else [],
            self.truncated[idx_t] if self.truncated is not None else None,
            [self.messages[i] for i in il] if self.messages else [],
        )


def values(t: torch.Tensor) -> list[Any]:
    """A tensor's values as a (nested) Python list, elements of its dtype's Python type."""
    return t.tolist()  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType] - torch types tolist() as a bare list


def left_padded(rows: Sequence[Sequence[Any]], fill: Any) -> list[list[Any]]:
    """Rows of different lengths as one rectangle, each row right-aligned after `fill`s.

    Why one nested list and one ``torch.tensor`` call: filling a tensor row by row cost two tensor
    ops per row (0.8 ms for 64 prompts, every generation step)."""
    n = max(len(r) for r in rows)
    return [[fill] * (n - len(r)) + list(r) for r in rows]


def left_pad(
    seqs: list[list[int]], masks: Sequence[Sequence[int]], groups: list[int], pad_id: int, device: str
) -> SeqBatch:
    """Build a SeqBatch from token lists (masks mark trained tokens, as bools or 0/1)."""
    if any(len(s) != len(m) for s, m in zip(seqs, masks, strict=True)):
        raise ValueError("every token mask must be as long as its sequence")
    ids = torch.tensor(left_padded(seqs, pad_id), dtype=torch.long)
    att = torch.tensor(left_padded([[1] * len(s) for s in seqs], 0), dtype=torch.long)
    tm = torch.tensor(left_padded(masks, False), dtype=torch.bool)
    return SeqBatch(ids.to(device), att.to(device), tm.to(device), torch.tensor(groups, device=device))


MIN_SHARED_PREFIX = 4  # shorter common prefixes are not worth the extra forward


def shared_prefix(b: SeqBatch, window: int) -> int:
    """Length of the token prefix every row starts with (its real tokens), usable for prefix sharing.

    Why: every prompt of a job starts with the same chat-template and system-prompt tokens (18 of
    ~37 tokens per row in the bundled task); like vLLM's prefix caching, running them once and
    letting every row attend to the one copy removes that share of the work, with the same result.
    Capped so that every hidden state the window needs comes from the suffix.
    """
    ids, att = b.input_ids, b.attention_mask
    B, L = ids.shape
    if B < 2:
        return 0
    npad = att.argmax(-1)  # leading padding: index of each row's first real token
    first_t = torch.where(b.target_mask.any(-1), b.target_mask.float().argmax(-1), torch.full_like(npad, L))
    cap = int(
        min(int((first_t - 1 - npad).min()), L - window - 1 - int(npad.min()), int((L - npad).min()) - 1)
    )
    if cap < MIN_SHARED_PREFIX:
        return 0
    cols = (npad[:, None] + torch.arange(cap, device=ids.device)).clamp(max=L - 1)
    aligned = ids.gather(1, cols)
    same = (aligned == aligned[:1]).all(0) & (att.gather(1, cols) == 1).all(0)
    k = int(same.long().cumprod(0).sum())
    return k if k >= MIN_SHARED_PREFIX else 0


def cache_kw(model: Any, cache: Any) -> dict[str, Any]:
    """The KV-cache keyword this model's forward takes (transformers 5 renamed past_key_values to cache)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return {"cache": cache} if "cache" in params else {"past_key_values": cache}


def prefix_forward(
    model: Any, ids: torch.Tensor, att: torch.Tensor, pos: torch.Tensor, k: int, cache: Any, **kw: Any
) -> tuple[Any, torch.Tensor]:
    """Forward left-padded rows whose first `k` real tokens are shared (see :func:`shared_prefix`).

    The prefix runs once on one row into `cache`, which is then repeated to every row; each row's
    own copy of the prefix is masked out. Returns the suffix output and the attention mask that
    now matches the cache ([B, k + suffix columns]), for further decoding.
    """
    B, L = ids.shape
    npad = att.argmax(-1)
    c0 = int(npad.min()) + k
    start = int(npad[0])
    model(
        input_ids=ids[:1, start : start + k],
        position_ids=pos[:1, start : start + k],
        use_cache=True,
        **cache_kw(model, cache),
        **kw,
    )
    cache.batch_repeat_interleave(B)
    col = torch.arange(c0, L, device=ids.device)
    s_att = att[:, c0:] * (col[None, :] >= (npad + k)[:, None]).to(att.dtype)  # drop each row's prefix copy
    full_att = torch.cat([torch.ones((B, k), dtype=att.dtype, device=att.device), s_att], dim=1)
    out = model(
        input_ids=ids[:, c0:],
        attention_mask=full_att,
        position_ids=pos[:, c0:],
        use_cache=True,
        **cache_kw(model, cache),
        **kw,
    )
    return out, full_att


def hidden_window(model: Any, b: SeqBatch, window: int) -> torch.Tensor:
    """Final hidden states at the positions that predict the last `window` tokens: [B, window, H].

    A prefix shared by every row is run once (one row, KV cache) and the rows' remaining tokens
    attend to it; gradients flow through the shared copy exactly as through B identical ones.
    """
    k = shared_prefix(b, window)
    if k == 0:
        out = model.base_model(
            input_ids=b.input_ids,
            attention_mask=b.attention_mask,
            position_ids=b.position_ids,
            use_cache=False,
        )
        h = out.last_hidden_state
        L = h.shape[1]
        return h[:, L - window - 1 : L - 1]
    from transformers.cache_utils import DynamicCache

    out, _ = prefix_forward(
        model.base_model, b.input_ids, b.attention_mask, b.position_ids, k, DynamicCache()
    )
    h = out.last_hidden_state
    Ls = h.shape[1]
    return h[:, Ls - window - 1 : Ls - 1]


def targets_window(b: SeqBatch, window: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(token ids, trained mask, absolute positions) of the last `window` columns."""
    L = b.input_ids.shape[1]
    return b.input_ids[:, L - window :], b.target_mask[:, L - window :], b.position_ids[:, L - window :]
