"""Is a run healthy, and which checkpoint is best: the docs' rules (:mod:`.rules`), the guard that acts on them, the checkpoint table.

The tutorials call ``opd_nb.health.pick_checkpoint`` (earlier ones ``best_checkpoint``), so both are re-exported here.
"""

from __future__ import annotations

from opd_nb.health.rules import best_checkpoint, pick_checkpoint

__all__ = ["best_checkpoint", "pick_checkpoint"]
