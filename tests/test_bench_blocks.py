"""The interleaved-block helpers of ``bench/engine_vs_trl.py``: run order, median of block ratios, spread.

The comparison must be one load cannot move: each block runs every configuration, the order
reverses every other block, and the headline is the median of the per-block ratios (not a ratio
of medians, which pairs figures from different spells of the machine)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_blocks  # noqa: E402  # pyright: ignore[reportMissingImports] - bench/ is put on sys.path above
import engine_ab  # noqa: E402  # pyright: ignore[reportMissingImports] - likewise


def test_every_other_block_runs_the_configurations_in_reverse_so_none_always_runs_first() -> None:
    configs = ["engine", "dist_ckpt", "dist", "engine_x2"]
    orders = [bench_blocks.block_order(configs, i) for i in range(4)]
    assert orders[0] == configs and orders[2] == configs
    assert orders[1] == configs[::-1] and orders[3] == configs[::-1]
    for name in configs:  # over a block pair each configuration's mean position is the middle
        assert sum(o.index(name) for o in orders[:2]) == len(configs) - 1


def test_the_headline_is_the_median_of_the_blocks_ratios_not_the_ratio_of_medians() -> None:
    # a slow spell hits both sides of block 2: its ratio stays 3 while its times triple
    blocks = [
        {"engine": 80.0, "trl": 240.0},
        {"engine": 240.0, "trl": 720.0},
        {"engine": 100.0, "trl": 200.0},
    ]
    spread = bench_blocks.median_ratio(blocks, "trl", "engine")
    assert bench_blocks.block_ratios(blocks, "trl", "engine") == [3.0, 3.0, 2.0]
    assert (spread.median, spread.lo, spread.hi) == (3.0, 2.0, 3.0)
    assert 240.0 / 100.0 != spread.median  # the ratio of the medians would say 2.4
    assert spread.fmt() == "3.00 (2.00-3.00)"


def test_an_even_number_of_blocks_takes_the_middle_pair_mean_and_blocks_missing_a_side_are_left_out() -> None:
    blocks = [{"a": 2.0, "b": 1.0}, {"a": 5.0, "b": 2.0}, {"a": 3.0}, {"a": 1.0, "b": 0.0}]
    assert bench_blocks.block_ratios(blocks, "a", "b") == [2.0, 2.5]
    assert bench_blocks.median_ratio(blocks, "a", "b").median == 2.25


def test_no_block_with_both_sides_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no blocks to summarise"):
        bench_blocks.median_ratio([{"a": 1.0}], "a", "b")


def test_cpu_per_step_counts_only_consecutive_steps_after_the_warmup() -> None:
    stamps = [(1, 0.5), (2, 0.7), (3, 0.8), (4, 1.1), (6, 1.9), (7, 2.0)]  # step 5's stamp is missing
    ms = engine_ab.cpu_ms_per_step(stamps, warmup=2)
    assert ms == pytest.approx([100.0, 300.0, 100.0])  # 2->3, 3->4, 6->7; never 4->6
