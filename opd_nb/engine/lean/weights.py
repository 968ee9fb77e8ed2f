"""The lean forward's weights: fused per layer, RMSNorm weights folded in, cached between optimizer steps.

Why: the lean forward (:mod:`opd_nb.engine.lean`) runs q|k|v and gate|up as one GEMM each, and
folds every RMSNorm weight into the matrix that consumes the normalised states. Building these
costs a concatenation per layer; without autograd (teacher scoring, decoding) they are built once
and reused until a parameter changes in place (an in-place op bumps its version counter; an optimizer
whose fused kernel does not calls :meth:`FusedWeights.stale`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Fused:
    """Per-layer weights in the form the lean forward uses (see :class:`FusedWeights`)."""

    qkv_wt: list[torch.Tensor]  # ([q | k | v] x input-norm weight), transposed (mm operand)
    qkv_b: list[torch.Tensor | None]
    gu_wt: list[torch.Tensor]  # ([gate | up] x post-attention-norm weight), transposed
    o_wt: list[torch.Tensor]  # o_proj weight, transposed (addmm operand)
    down_wt: list[torch.Tensor]  # down_proj weight, transposed
    qkn_w: list[torch.Tensor | None]  # q_norm weight per q head | k_norm weight per kv head (Qwen3)
    head_wt: torch.Tensor  # (output head x final-norm weight), transposed


class FusedWeights:
    """The fused weights of one model's decoder layers, read from (and training) its own parameters."""

    def __init__(self, model: Any, layers: list[Any], nh: int, kvh: int, D: int, qk_norm: bool):
        self.model, self.base, self.layers = model, model.base_model, layers
        self.nh, self.kvh, self.D, self.qk_norm = nh, kvh, D, qk_norm
        self._fused: Fused | None = None
        self._fused_key: tuple[int, ...] | None = None
        self._params = list(model.parameters())

    def build(self) -> Fused:
        """Fuse q|k|v and gate|up into one GEMM each and fold every RMSNorm weight into the matrix that
        consumes the normalised states: linear(norm(x) * w, W) == linear(norm(x), W * w). Every matrix
        is kept as the transposed view ``F.linear`` would pass to ``mm``/``addmm``: the forward calls
        those directly (the same kernel on the same operands, without linear's dispatch chain)."""
        qkv_wt: list[torch.Tensor] = []
        qkv_b: list[torch.Tensor | None] = []
        gu_wt: list[torch.Tensor] = []
        o_wt: list[torch.Tensor] = []
        down_wt: list[torch.Tensor] = []
        qkn_w: list[torch.Tensor | None] = []
        for la in self.layers:
            a, m = la.self_attn, la.mlp
            w_in = la.input_layernorm.weight
            qkv_wt.append((torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]) * w_in).t())
            qkv_b.append(
                None if a.q_proj.bias is None else torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
            )
            gu_wt.append(
                (torch.cat([m.gate_proj.weight, m.up_proj.weight]) * la.post_attention_layernorm.weight).t()
            )
            o_wt.append(a.o_proj.weight.t())
            down_wt.append(m.down_proj.weight.t())
            qkn_w.append(
                torch.cat([a.q_norm.weight.expand(self.nh, self.D), a.k_norm.weight.expand(self.kvh, self.D)])
                if self.qk_norm
                else None
            )
        head = self.model.get_output_embeddings()
        head_wt = (head.weight * self.base.norm.weight).t()
        return Fused(qkv_wt, qkv_b, gu_wt, o_wt, down_wt, qkn_w, head_wt)

    def stale(self) -> None:
        """Parameters changed without bumping their version counters (AdamW's fused kernel): rebuild next time."""
        self._fused = None

    def current(self) -> Fused:
        """With autograd the fused weights are built per call (gradients flow to the real parameters);
        without, they are cached until any parameter changes in place (an optimizer step)."""
        if torch.is_grad_enabled():
            return self.build()
        key = tuple(p._version for p in self._params) + (self._params[0].data_ptr(),)
        if self._fused is None or key != self._fused_key:
            with torch.no_grad():
                built = self.build()
                self._fused = _row_major(built) if built.head_wt.device.type == "cpu" else built
            self._fused_key = key
        return self._fused


def _row_major(f: Fused) -> Fused:
    """The cached matrices as contiguous [in, out] copies, not transposed views: a decoding step's
    products (64 rows) ran 15-20% faster on CPU that way (no difference at thousands of rows). Only
    on CPU: GPU libraries take either layout, and the copies of o and down would cost memory there."""

    def each(ts: list[torch.Tensor]) -> list[torch.Tensor]:
        return [t.contiguous() for t in ts]

    return Fused(
        each(f.qkv_wt), f.qkv_b, each(f.gu_wt), each(f.o_wt), each(f.down_wt), f.qkn_w, f.head_wt.contiguous()
    )
