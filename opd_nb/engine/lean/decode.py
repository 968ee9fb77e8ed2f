"""Decoding with the lean forward (:mod:`opd_nb.engine.lean`): the loop, one step, its cache and tables.

Why separate from the forward: a decoding step (T = 1) is the full forward's ops minus what one
new token per row makes needless, over a KV cache preallocated for the whole decode and per-step
rotary rows and attention bias built once; these are decode-only state, and the forward's class
stays one concept (the layers' math over the model's own parameters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from opd_nb.engine.lean.attention import attend_step, causal_mask

if TYPE_CHECKING:
    from opd_nb.engine.lean.forward import LeanLM, PrefixKV
    from opd_nb.engine.lean.weights import Fused


@torch.inference_mode()
def decode(
    lm: LeanLM,
    ids: torch.Tensor,
    att: torch.Tensor,
    prefix: int,
    max_new: int,
    pick: Any,
    eos: torch.Tensor,
    pad: int,
) -> torch.Tensor:
    """`lm` samples up to `max_new` tokens after left-padded prompts; returns [B, P + generated].

    `pick(logits [B, V]) -> ids [B]` chooses each token; rows stop at an id in `eos` and are
    padded with `pad` afterwards; the loop ends when every row has stopped.
    """
    B, P = ids.shape
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    past, c0, key_valid = lm.split_prefix(ids, att, pos, prefix)
    n0 = key_valid.shape[1]
    kv = KVBuffer(len(lm.layers), B, lm.kvh, n0 + max_new, lm.D, ids.device, lm.cos.dtype, past)
    x = lm.stack(
        lm.embed(ids[:, c0:]),
        pos[:, c0:],
        kv,
        causal_mask(key_valid, prefix, P - c0),
        keep=1,
        live=key_valid[:, prefix:],
    )
    steps = StepTables(lm, pos[:, -1:], max_new, key_valid, n0 + max_new)
    done = torch.zeros(B, dtype=torch.bool, device=ids.device)
    toks: list[torch.Tensor] = []
    one_eos = eos.numel() == 1  # then `==` is isin in one op
    x = x[:, -1]
    W = lm.fused()  # once: no parameter changes within a decode
    for _ in range(max_new):
        logits = lm.logits(x, W)
        nxt = pick(logits if logits.dtype == torch.float32 else logits.float()).masked_fill_(done, pad)
        toks.append(nxt)
        done |= nxt.eq(eos) if one_eos else torch.isin(nxt, eos)
        if bool(done.all()) or len(toks) == max_new:
            break
        x = _step(lm, nxt, kv, steps, W)
    return torch.cat([ids, torch.stack(toks, 1)], dim=1)


def _step(lm: LeanLM, nxt: torch.Tensor, kv: KVBuffer, steps: StepTables, W: Fused) -> torch.Tensor:
    """One decoding step (no grad): the new tokens [B] through every layer -> the last layer's
    output [B, H]. :meth:`LeanLM.stack`'s ops on the same operands (bit for bit), minus what T = 1 makes
    needless: no packing or layout changes, the queries copied once into the attention's
    [B * kvh, g, D] operand, keys and values written into their cache slot."""
    nh, kvh, D = lm.nh, lm.kvh, lm.D
    n = kv.n
    cos, sin, bias = steps.next(n + 1)
    x = lm.base.embed_tokens.weight.index_select(0, nxt)
    for i in range(len(lm.layers)):
        qk, v = lm.rope_qk(lm.proj(lm.norm(x), W.qkv_wt[i], W.qkv_b[i]), cos, sin, W.qkn_w[i])
        kv.k4[i][:, :, n].copy_(qk[:, nh:])
        kv.v4[i][:, :, n].copy_(v)
        o = attend_step(
            qk[:, :nh].reshape(-1, nh // kvh, D),
            kv.k[i][:, : n + 1],
            kv.v[i][:, : n + 1],
            bias,
            lm.scale,
        )
        x = torch.addmm(x, o.view(-1, nh * D), W.o_wt[i])
        x = torch.addmm(x, lm.gate(torch.mm(lm.norm(x), W.gu_wt[i]), False), W.down_wt[i])
    kv.n = n + 1
    return x


class StepTables:
    """What every decoding step needs besides the new tokens, built once per decode: the rotary rows
    of each step's positions and an additive attention bias [B, kvh, g, capacity] that each step
    extends by one column (its new key, which every row sees), instead of a mask rebuilt per token."""

    def __init__(self, lm: LeanLM, last_pos: torch.Tensor, n: int, key_valid: torch.Tensor, cap: int):
        B, n0 = key_valid.shape
        pos = last_pos + torch.arange(1, n + 1, device=last_pos.device)  # [B, n]
        # a short prompt batched with a long one may decode past the table; those tokens lie beyond
        # its row's own budget and are dropped (TorchSampler.generate_ids), so any rotary row will do for them
        pos = pos.clamp(max=lm.cos.shape[0] - 1)
        self.cos, self.sin = lm.cos[pos].unsqueeze(2), lm.sin_signed[pos].unsqueeze(2)  # [B, n, 1, D]
        g = lm.nh // lm.kvh
        # every row sees every decoded key (column n0 on); a step reads the columns up to its own
        self.bias = torch.zeros((B * lm.kvh, g, cap), dtype=lm.cos.dtype, device=key_valid.device)
        self.bias.view(B, lm.kvh, g, cap)[..., :n0].masked_fill_(~key_valid[:, None, None, :], float("-inf"))
        self.t = 0

    def next(self, S: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(cos [B, 1, D], sin, bias [B * kvh, g, S]) of the next step, whose keys end at column S."""
        t, self.t = self.t, self.t + 1
        return self.cos[:, t], self.sin[:, t], self.bias[:, :, :S]


class KVBuffer:
    """Preallocated KV cache for decoding: new keys are written in place, attention reads a view."""

    def __init__(
        self,
        n_layers: int,
        B: int,
        kvh: int,
        cap: int,
        D: int,
        device: Any,
        dtype: Any,
        past: PrefixKV | None,
    ):
        # [B * kvh, cap, D], the attention's operand layout, and its [B, kvh, cap, D] view
        self.k = [torch.empty((B * kvh, cap, D), device=device, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.empty((B * kvh, cap, D), device=device, dtype=dtype) for _ in range(n_layers)]
        self.k4 = [t.view(B, kvh, cap, D) for t in self.k]
        self.v4 = [t.view(B, kvh, cap, D) for t in self.v]
        self.n = 0
        self.n_layers = n_layers
        if past is not None:
            n = past.k[0].shape[2]
            for i in range(n_layers):
                self.k4[i][:, :, :n] = past.k[i]
                self.v4[i][:, :, :n] = past.v[i]
            self.n = n

    def extend(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        T = k.shape[2]
        end = self.n + T
        self.k4[i][:, :, self.n : end] = k
        self.v4[i][:, :, self.n : end] = v
        K, V = self.k4[i][:, :, :end], self.v4[i][:, :, :end]
        if i == self.n_layers - 1:
            self.n = end
        return K, V
