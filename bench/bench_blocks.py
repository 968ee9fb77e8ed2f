"""Interleaved blocks for a comparison load cannot move: the run order, and the median of block ratios.

Every configuration runs once per block; the order reverses every other block (A B C, C B A, ...:
ABBA over the whole list), so a slow or fast spell of a shared machine touches each side alike and
no configuration always runs first or last. A block's ratio compares two configurations measured
minutes apart at most; the headline is the median of the blocks' ratios, with their min and max.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def block_order(configs: Sequence[str], block: int) -> list[str]:
    """The run order of block `block` (0-based): as given in even blocks, reversed in odd ones."""
    return list(configs) if block % 2 == 0 else list(reversed(configs))


@dataclass(frozen=True)
class Spread:
    """The median of some per-block figures, with their min and max."""

    median: float
    lo: float
    hi: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no blocks to summarise: every block lacked one side of the ratio")
        return cls(statistics.median(values), min(values), max(values))

    def fmt(self, digits: int = 2) -> str:
        return f"{self.median:.{digits}f} ({self.lo:.{digits}f}-{self.hi:.{digits}f})"


def block_ratios(blocks: Sequence[dict[str, float]], num: str, den: str) -> list[float]:
    """blocks[i][num] / blocks[i][den] for every block that measured both (a block is {config: figure})."""
    return [b[num] / b[den] for b in blocks if num in b and den in b and b[den] > 0]


def median_ratio(blocks: Sequence[dict[str, float]], num: str, den: str) -> Spread:
    """The median and spread of the per-block ratios num/den (never a ratio of medians)."""
    return Spread.of(block_ratios(blocks, num, den))
