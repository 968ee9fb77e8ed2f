"""The one tensor layout every stage shares: padded sequences plus a mask of trained tokens.

Native rollouts come out of ``generate`` as [left-padded prompt | completion | right pad];
agentic samples are left-padded full sequences. Both are a :class:`SeqBatch`; the trained
tokens always sit in the last ``window`` columns, so models only run their heads there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class SeqBatch:
    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L] 1 = real token
    target_mask: torch.Tensor  # [B, L] bool: token is a trained (student-generated) token
    group: torch.Tensor  # [B] index of the prompt within the step (rollouts of a prompt share it)
    texts: list[str] = field(default_factory=list)  # decoded completions (for rewards)
    truncated: torch.Tensor | None = None  # [B] bool: hit the length budget without EOS
    messages: list[list[dict]] = field(default_factory=list)  # full trajectory per sample (for rewards)

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
        il = idx_t.tolist()
        return SeqBatch(
            self.input_ids[idx_t], self.attention_mask[idx_t], self.target_mask[idx_t], self.group[idx_t],
            [self.texts[i] for i in il] if self.texts else [],
            self.truncated[idx_t] if self.truncated is not None else None,
            [self.messages[i] for i in il] if self.messages else [],
        )


def left_pad(seqs: list[list[int]], masks: list[list[bool]], groups: list[int], pad_id: int,
             device: str) -> SeqBatch:
    """Build a SeqBatch from token lists (masks mark trained tokens)."""
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), n), dtype=torch.long)
    tm = torch.zeros((len(seqs), n), dtype=torch.bool)
    for j, (s, m) in enumerate(zip(seqs, masks, strict=True)):
        ids[j, n - len(s):] = torch.tensor(s, dtype=torch.long)
        att[j, n - len(s):] = 1
        tm[j, n - len(s):] = torch.tensor(m, dtype=torch.bool)
    return SeqBatch(ids.to(device), att.to(device), tm.to(device), torch.tensor(groups, device=device))


def hidden_window(model: Any, b: SeqBatch, window: int) -> torch.Tensor:
    """Final hidden states at the positions that predict the last `window` tokens: [B, window, H]."""
    out = model.base_model(input_ids=b.input_ids, attention_mask=b.attention_mask,
                           position_ids=b.position_ids, use_cache=False)
    h = out.last_hidden_state
    L = h.shape[1]
    return h[:, L - window - 1:L - 1]


def targets_window(b: SeqBatch, window: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(token ids, trained mask, absolute positions) of the last `window` columns."""
    L = b.input_ids.shape[1]
    return b.input_ids[:, L - window:], b.target_mask[:, L - window:], b.position_ids[:, L - window:]
