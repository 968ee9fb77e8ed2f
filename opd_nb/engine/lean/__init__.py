"""The lean forward for Llama-family decoders, one module per part: forward, decode, attention, weights, the gate.

The engine asks :func:`~opd_nb.engine.lean.forward.wrap` for it and the tests switch it off through
``DISABLE_ENV``, so both are re-exported here; like the forward, the package imports torch.
"""

from __future__ import annotations

from opd_nb.engine.lean.forward import DISABLE_ENV, wrap

__all__ = ["DISABLE_ENV", "wrap"]
