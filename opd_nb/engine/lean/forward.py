"""A lean forward for Llama-family decoders (Qwen3, Qwen2, Llama) over the model's own parameters.

Why: at the scale the engine runs locally (hidden 64-128, a few layers) a step is bound by
per-operation overhead, not by FLOPs: ``transformers``' forward builds masks, rotary tables,
cache objects and output dataclasses on every call, and unfused q/k/v and gate/up projections
double the number of small matrix products. This module computes the same function with fused
projections (q|k|v and gate|up as one GEMM each), one rotary table, one boolean attention mask
per forward and, for decoding, a preallocated KV cache written in place. It reads and trains the
Hugging Face parameters themselves (no copy), so ``save_pretrained`` and the optimizer work as
before. Architectures or options it does not reproduce exactly (rope scaling, sliding windows,
biases on the MLP, ...) make :func:`wrap` return ``None`` and the engine uses ``transformers``.
"""

from __future__ import annotations

# pyright: reportConstantRedefinition=false
# (tensor shapes are named as in the papers, B, T, D, and shrink inside the layer loop: not constants)
from typing import Any

import torch
import torch.nn.functional as F

from opd_nb import settings
from opd_nb.engine.lean.attention import attend, attention_bias, causal_mask
from opd_nb.engine.lean.decode import decode as sample_after_prompts
from opd_nb.engine.lean.swiglu import swiglu
from opd_nb.engine.lean.weights import Fused, FusedWeights

SUPPORTED = {"qwen3", "qwen2", "llama"}
DISABLE_ENV = settings.ENGINE_LEAN.name  # "0": always use the transformers forward (a debugging escape hatch)


def wrap(model: Any) -> LeanLM | None:
    """A :class:`LeanLM` over `model`, or None where this module would not match it exactly."""
    if not settings.ENGINE_LEAN.get():
        return None
    cfg = model.config
    if getattr(cfg, "model_type", None) not in SUPPORTED:
        return None
    rope: dict[str, Any] = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if (rope.get("rope_type") or rope.get("type") or "default") != "default":
        return None
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "mlp_bias", False):
        return None
    if getattr(cfg, "use_sliding_window", False) or getattr(cfg, "attention_dropout", 0.0):
        return None
    if getattr(cfg, "pretraining_tp", 1) not in (None, 1):
        return None
    if model.get_input_embeddings().weight.dtype != torch.float32:  # HF upcasts norms to fp32; we stay exact
        return None
    try:
        return LeanLM(model)
    except (AttributeError, TypeError, ValueError):
        return None


class LeanLM:
    """The decoder of a causal LM as a few fused tensor ops; see the module docstring."""

    def __init__(self, model: Any):
        cfg = model.config
        self.model = model
        self.base = model.base_model
        self.layers = list(self.base.layers)
        self.H = int(cfg.hidden_size)
        self.nh = int(cfg.num_attention_heads)
        self.kvh = int(getattr(cfg, "num_key_value_heads", None) or self.nh)
        if self.nh % self.kvh:
            raise ValueError("query heads must be a multiple of key/value heads")
        self.D = int(getattr(cfg, "head_dim", None) or self.H // self.nh)
        self.eps = float(cfg.rms_norm_eps)
        self.scale = self.D**-0.5
        a0 = self.layers[0].self_attn
        self.qk_norm = hasattr(a0, "q_norm")
        if getattr(a0.o_proj, "bias", None) is not None:
            raise ValueError("o_proj bias is not reproduced")
        rope: dict[str, Any] = getattr(cfg, "rope_parameters", None) or {}
        theta = float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))
        inv = 1.0 / (theta ** (torch.arange(0, self.D, 2, dtype=torch.float) / self.D))
        max_pos = int(getattr(cfg, "max_position_embeddings", 4096))
        ang = torch.arange(max_pos, dtype=torch.float)[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        dev = model.get_input_embeddings().weight.device
        half = self.D // 2
        sign = torch.cat([-torch.ones(half), torch.ones(half)])
        self.cos = ang.cos().to(dev)
        self.sin_signed = (ang.sin() * sign).to(dev)  # rotate_half(x) * sin == roll(x, D/2) * sin_signed
        # the norms' divisor and epsilon as 0-dim tensors: a Python scalar is wrapped into one per call
        self._eps = torch.tensor(self.eps, dtype=torch.float32)
        self._width = {n: torch.tensor(float(n)) for n in (self.H, self.D)}
        self.weights = FusedWeights(model, self.layers, self.nh, self.kvh, self.D, self.qk_norm)
        self.fused = self.weights.current  # bound once: no extra call per forward
        self.head = model.get_output_embeddings()  # its bias, read per decoding step

    # ---- core -----------------------------------------------------------------------------------
    def _inv_rms(self, x: torch.Tensor) -> torch.Tensor:
        """1 / RMS(x) over the last dim + eps: HF's ``rsqrt(x.pow(2).mean(-1) + eps)`` bit for bit (pow 2
        is x * x, mean is sum then div) in a third of the tensor ops."""
        return torch.rsqrt((x * x).sum(-1, keepdim=True).div_(self._width[x.shape[-1]]).add_(self._eps))

    def norm(self, x: torch.Tensor) -> torch.Tensor:
        """RMSNorm without its weight (folded into the next matrix); HF's formula, in fp32. With autograd
        HF's own ops (their backward rounds differently from :meth:`_inv_rms`'s)."""
        if torch.is_grad_enabled():
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * self._inv_rms(x)

    @staticmethod
    def proj(x: torch.Tensor, wt: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        """``F.linear(x, wt.t(), b)`` for x [N, in]: the kernel linear dispatches to, called directly."""
        return torch.mm(x, wt) if b is None else torch.addmm(b, x, wt)

    def rope_qk(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, qkn: torch.Tensor | None):
        """(q|k heads normed (Qwen3) and rotated, v heads) of a fused projection [..., (nh + 2 kvh) * D];
        cos/sin broadcast to [..., nh + kvh, D]."""
        nh, kvh, D = self.nh, self.kvh, self.D
        lead = qkv.shape[:-1]
        qk = qkv[..., : (nh + kvh) * D].view(*lead, nh + kvh, D)
        v = qkv[..., (nh + kvh) * D :].view(*lead, kvh, D)
        if torch.is_grad_enabled():
            if qkn is not None:
                qk = self.norm(qk) * qkn
            return torch.addcmul(qk * cos, qk.roll(D // 2, -1), sin), v
        if qkn is not None:  # same ops in place on qkv's own memory (no autograd to preserve inputs for)
            qk = qk.mul_(self._inv_rms(qk)).mul_(qkn)
        # roll, not index_select on the last dim: that gather took 0.9 ms of a 1,172-row teacher pass, roll 18 us
        return qk.mul(cos).addcmul_(qk.roll(D // 2, -1), sin), v

    def _rotary_and_mask(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        kv: Any,
        mask: torch.Tensor | None,
        pk: _Pack | None,
        T: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(cos, sin, mask, no-grad attention bias) of one :meth:`stack` call, built once for every layer."""
        grad = torch.is_grad_enabled()
        if mask is None and not grad:
            S = T + kv.n_past
            mask = causal_mask(torch.ones((1, S), dtype=torch.bool, device=x.device), S - T, T)
        bias = None if grad or mask is None else attention_bias(mask, self.nh, self.kvh, self.cos.dtype)
        p = pos.reshape(-1) if pk is None else pos.reshape(-1).index_select(0, pk.idx)
        return self.cos[p][:, None, :], self.sin_signed[p][:, None, :], mask, bias

    def _last_only(
        self,
        q: torch.Tensor,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        bias: torch.Tensor | None,
        pk: _Pack | None,
        keep: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The last layer's queries, states, mask and bias cut to the last `keep` positions (see :meth:`stack`)."""
        B, T = q.shape[:2]
        q = q[:, T - keep :]
        if pk is not None:
            x = pk.keep_last(x, keep)
        else:
            x = x.view(B, T, x.shape[-1])[:, T - keep :].reshape(B * keep, x.shape[-1])
        if mask is not None:
            mask = mask[:, :, T - keep :]
            bias = None if bias is None else attention_bias(mask, self.nh, self.kvh, self.cos.dtype)
        return q, x, mask, bias

    def stack(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        kv: Any,
        mask: torch.Tensor | None,
        keep: int = 0,
        live: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run every decoder layer on x [B, T, H] at positions pos [B, T]; kv supplies the keys.
        Returns the last layer's output (not normalised), [B, T or keep, H].

        keep > 0: only the last `keep` positions' outputs are wanted, so the last layer computes
        queries, attention output and MLP for those positions only (keys/values for all).
        live [B, T] (bool): the positions whose states anything reads (real tokens that are keys);
        with some dead (padding, a row's masked copy of the shared prefix) every per-token op (norms,
        projections, MLP) runs on the live positions only, packed, and just attention sees the padded
        layout (dead positions are zero and output zero).
        """
        B, T, H = x.shape
        nh, kvh, D = self.nh, self.kvh, self.D
        W = self.fused()
        last = len(self.layers) - 1
        grad = torch.is_grad_enabled()
        pk = _Pack(live, B, T) if live is not None and not bool(live.all()) else None
        x = x.reshape(B * T, H)
        if pk is not None:
            x = x.index_select(0, pk.idx)
        cos, sin, mask, bias = self._rotary_and_mask(x, pos, kv, mask, pk, T)
        for i in range(len(self.layers)):
            qk, v = self.rope_qk(self.proj(self.norm(x), W.qkv_wt[i], W.qkv_b[i]), cos, sin, W.qkn_w[i])
            if pk is not None:
                qk, v = pk.unpack(qk, v)
            else:
                qk, v = qk.view(B, T, nh + kvh, D), v.view(B, T, kvh, D)
            K, V = kv.extend(i, qk[:, :, nh:].transpose(1, 2), v.transpose(1, 2))
            q = qk[:, :, :nh]
            if keep and i == last and keep < T:
                q, x, mask, bias = self._last_only(q, x, mask, bias, pk, keep)
                T = keep
            o = attend(q, K, V, mask, bias, kvh, self.scale)
            x = torch.addmm(x, o if pk is None else o.index_select(0, pk.out), W.o_wt[i])
            x = torch.addmm(x, self.gate(torch.mm(self.norm(x), W.gu_wt[i]), grad), W.down_wt[i])
        if pk is not None:
            x = x.new_zeros(B * T, H).index_copy(0, pk.out, x)
        return x.view(B, T, H)

    @staticmethod
    def gate(gu: torch.Tensor, grad: bool) -> torch.Tensor:
        """silu(g) * u of the fused [g | u] projection: in place without autograd, else :func:`swiglu`."""
        if grad:
            return swiglu(gu)
        g, u = gu.chunk(2, -1)
        return F.silu(g, inplace=True).mul_(u)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.base.embed_tokens.weight)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) * self.base.norm.weight

    def logits(self, x: torch.Tensor, W: Fused | None = None) -> torch.Tensor:
        """Head logits [N, V] from the last layer's (un-normalised) output [N, H]."""
        return self.proj(self.norm(x), (W or self.fused()).head_wt, self.head.bias)

    # sampling after left-padded prompts, `self` as its `lm` (:func:`opd_nb.engine.lean.decode.decode`)
    decode = sample_after_prompts

    def _prefix(self, ids: torch.Tensor, pos: torch.Tensor) -> PrefixKV:
        """Run one row's shared prefix (no padding) and keep its per-layer keys and values."""
        kv = PrefixKV(len(self.layers))
        self.stack(self.embed(ids), pos, kv, None)
        return kv

    def split_prefix(self, ids: torch.Tensor, att: torch.Tensor, pos: torch.Tensor, prefix: int):
        """(prefix keys/values or None, first suffix column, key validity [B, prefix + suffix columns]).

        Rows are left-padded; with `prefix` > 0 every row's first `prefix` real tokens are the same
        and run once (one row); each row's own copy of them is masked out of its keys.
        """
        valid = att.bool()
        if not prefix:
            return None, 0, valid
        B, L = ids.shape
        npad = att.argmax(-1)
        c0 = int(npad.min()) + prefix
        s0 = int(npad[0])
        past = self._prefix(ids[:1, s0 : s0 + prefix], pos[:1, s0 : s0 + prefix])
        col = torch.arange(c0, L, device=ids.device)
        s_valid = valid[:, c0:] & (col[None, :] >= (npad + prefix)[:, None])  # drop each row's prefix copy
        key_valid = torch.cat([torch.ones((B, prefix), dtype=torch.bool, device=ids.device), s_valid], 1)
        return past, c0, key_valid

    # ---- full-sequence forward (training, teacher scoring) ----------------------------------------
    def hidden_window(
        self, ids: torch.Tensor, att: torch.Tensor, pos: torch.Tensor, window: int, prefix: int
    ) -> torch.Tensor:
        """Final-normed hidden states at the positions predicting the last `window` tokens, [B, window, H].

        Rows are left-padded; with `prefix` > 0 every row's first `prefix` real tokens are the same
        and run once (one row), every row attending to that one copy (gradients included).
        """
        B, L = ids.shape
        past, c0, key_valid = self.split_prefix(ids, att, pos, prefix)
        x = self.stack(
            self.embed(ids[:, c0:]),
            pos[:, c0:],
            _Cat(past, B),
            causal_mask(key_valid, prefix, L - c0),
            keep=window + 1,
            live=key_valid[:, prefix:],
        )
        return self.final_norm(x[:, :window])

    # ---- decoding -------------------------------------------------------------------------------


class _Pack:
    """Where the live positions of a [B, T] layout sit once packed (see :meth:`LeanLM.stack`)."""

    def __init__(self, live: torch.Tensor, B: int, T: int):
        self.B, self.T = B, T
        self.idx = live.reshape(-1).nonzero().squeeze(1)  # packed row -> flat [B * T] index
        self.out = self.idx  # flat index of each packed row in the layout the stack returns

    def unpack(self, qk: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Packed q|k [N, nh + kvh, D] and v [N, kvh, D] scattered into the zero-padded [B, T, ...] layout."""
        return self._scatter(qk), self._scatter(v)

    def _scatter(self, t: torch.Tensor) -> torch.Tensor:
        # each part on its own: one buffer for both cost a cat and, with autograd, a zero-filled
        # copy per part for the slices' backwards
        full = t.new_zeros((self.B * self.T, *t.shape[1:])).index_copy(0, self.idx, t)
        return full.view(self.B, self.T, *t.shape[1:])

    def keep_last(self, x: torch.Tensor, keep: int) -> torch.Tensor:
        """The packed rows of the last `keep` columns; the output layout becomes [B, keep]."""
        col = self.idx % self.T
        sel = (col >= self.T - keep).nonzero().squeeze(1)
        self.out = (
            (self.idx // self.T).index_select(0, sel) * keep + col.index_select(0, sel) - (self.T - keep)
        )
        return x.index_select(0, sel)


class PrefixKV:
    """Keys/values source for the shared prefix: attends to itself, keeps what it computed."""

    n_past = 0

    def __init__(self, n_layers: int):
        self.k: list[torch.Tensor] = [None] * n_layers  # pyright: ignore[reportAttributeAccessIssue]
        self.v: list[torch.Tensor] = [None] * n_layers  # pyright: ignore[reportAttributeAccessIssue]

    def extend(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k[i], self.v[i] = k, v
        return k, v


class _Cat:
    """Keys/values for a full forward: an optional shared prefix (one row, broadcast) then the rows' own."""

    def __init__(self, past: PrefixKV | None, B: int):
        self.past, self.B = past, B
        self.n_past = 0 if past is None else past.k[0].shape[2]

    def extend(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.past is None:
            return k, v
        pk, pv = self.past.k[i], self.past.v[i]
        return (
            torch.cat([pk.expand(self.B, -1, -1, -1), k], 2),
            torch.cat([pv.expand(self.B, -1, -1, -1), v], 2),
        )
