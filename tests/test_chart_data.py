"""The chart's data: series, per-poll deltas, LTTB downsampling and continued jobs' global steps."""

from __future__ import annotations

import json
import math

from opd_nb.constants import LOSS, TOOL_LATENCY_P95, VALID_TOKEN_RATE
from opd_nb.plots.series import ChartFeed, lttb, parent_of, series_points, step_offset


def _rows(n: int, start: int = 1) -> list[dict]:
    return [{"step": s, LOSS: 1.0 / s, VALID_TOKEN_RATE: 1.0} for s in range(start, start + n)]


def test_series_skip_missing_and_non_finite_values_and_sort_by_step() -> None:
    rows = [{"step": 3, LOSS: 0.3}, {"step": 1, LOSS: 1.0}, {"step": 2, LOSS: math.nan}, {"step": 4}]
    rows.append({"step": 5, LOSS: True})  # a flag is not a number
    assert series_points(rows, LOSS) == ([1.0, 3.0], [1.0, 0.3])


def test_each_delta_holds_only_the_points_no_earlier_one_sent() -> None:
    feed = ChartFeed()
    rows = _rows(3)
    feed.update({"ft-a": rows}, [LOSS])
    first = feed.delta()
    assert [(p["job"], p["metric"], p["steps"]) for p in first] == [("ft-a", LOSS, [1, 2, 3])]
    feed.update({"ft-a": rows}, [LOSS])
    assert feed.delta() == []  # the same poll again: nothing new
    rows += _rows(2, start=4)
    feed.update({"ft-a": rows, "ft-b": _rows(1)}, [LOSS])
    second = {(p["job"], tuple(p["steps"])) for p in feed.delta()}
    assert second == {("ft-a", (4, 5)), ("ft-b", (1,))}
    assert feed.points == 6


def test_a_panel_that_appears_later_reads_that_metric_from_the_first_row() -> None:
    feed = ChartFeed()
    rows = _rows(4)
    feed.update({"ft-a": rows}, [LOSS])
    feed.delta()
    feed.update({"ft-a": rows}, [LOSS, VALID_TOKEN_RATE])
    (entry,) = feed.delta()
    assert entry["metric"] == VALID_TOKEN_RATE and entry["steps"] == [1, 2, 3, 4]
    assert feed.full(mark=False)["panels"] == [LOSS, VALID_TOKEN_RATE]


def test_a_step_row_that_grows_in_place_is_read_again() -> None:
    """The control plane merges a step's trace numbers (sent while the step runs) and the engine's row
    (written when it ends) into one row, in either order. A feed that read each row once kept only the
    trace numbers of every step after the first: a saved monitor of an agentic job showed its loss,
    entropy and reward panels as one point while its tool panels had whole curves."""
    feed = ChartFeed()
    rows: list[dict] = [{"step": 1, LOSS: 1.0, TOOL_LATENCY_P95: 0.1}, {"step": 2, TOOL_LATENCY_P95: 0.2}]
    feed.update({"ft-a": rows}, [LOSS, TOOL_LATENCY_P95])
    assert {p["metric"]: p["steps"] for p in feed.delta()} == {LOSS: [1], TOOL_LATENCY_P95: [1, 2]}
    rows[1] = {**rows[1], LOSS: 0.8}  # step 2 ends: its engine numbers join its row
    rows.append({"step": 3, TOOL_LATENCY_P95: 0.3})
    feed.update({"ft-a": rows}, [LOSS, TOOL_LATENCY_P95])
    assert {p["metric"]: p["steps"] for p in feed.delta()} == {LOSS: [2], TOOL_LATENCY_P95: [3]}
    doc = {(s["metric"]): (s["steps"], s["values"]) for s in feed.full()["series"]}
    assert doc[LOSS] == ([1, 2], [1.0, 0.8]) and doc[TOOL_LATENCY_P95] == ([1, 2, 3], [0.1, 0.2, 0.3])


def test_a_running_total_that_changes_value_without_new_keys_is_sent_again_as_a_replacement() -> None:
    """A live step's trace numbers are running totals: the value at a step already drawn changes while
    the keys stay. The chart gets the new value (marked `replace`), once; a repeated poll sends nothing;
    settled rows are not read again (issue 50: the chart kept early partial values)."""
    from opd_nb.constants import EPOCH

    feed = ChartFeed()
    rows: list[dict] = [{"step": s, EPOCH: 1, LOSS: 1.0 / s, TOOL_LATENCY_P95: 0.1} for s in (1, 2, 3)]
    rows.append({"step": 4, TOOL_LATENCY_P95: 0.1})  # step 4 runs: its spans so far
    feed.update({"ft-a": rows}, [LOSS, TOOL_LATENCY_P95])
    feed.delta()
    rows[3] = {"step": 4, TOOL_LATENCY_P95: 0.4}  # more spans of step 4: a new value, the same keys
    feed.update({"ft-a": rows}, [LOSS, TOOL_LATENCY_P95])
    (entry,) = feed.delta()
    assert entry["replace"] is True and (entry["metric"], entry["steps"], entry["values"]) == (
        TOOL_LATENCY_P95,
        [4],
        [0.4],
    )
    feed.update({"ft-a": rows}, [LOSS, TOOL_LATENCY_P95])
    assert feed.delta() == []  # the same poll again: nothing
    doc = {s["metric"]: (s["steps"], s["values"]) for s in feed.full()["series"]}
    assert doc[TOOL_LATENCY_P95] == ([1, 2, 3, 4], [0.1, 0.1, 0.1, 0.4])
    from opd_nb.plots.series import RowCursor

    cursor = RowCursor()
    cursor.advance(rows)
    assert cursor.advance(rows)[0] == 1  # only rows after the settled ones (two engine rows later) are read


def test_full_marks_points_sent_unless_asked_not_to() -> None:
    feed = ChartFeed()
    feed.update({"ft-a": _rows(5)}, [LOSS])
    assert len(feed.full(mark=False)["series"][0]["steps"]) == 5
    assert feed.delta()[0]["steps"] == [1, 2, 3, 4, 5]
    feed.update({"ft-a": _rows(6)}, [LOSS])
    feed.full()
    assert feed.delta() == []


def test_lttb_keeps_the_ends_and_the_spike_of_a_long_series() -> None:
    steps = [float(s) for s in range(10_000)]
    values = [0.0] * 10_000
    values[6_543] = 9.0  # one spike: a mean-of-buckets downsampler would flatten it
    out_s, out_v = lttb(steps, values, 500)
    assert len(out_s) == 500 and out_s[0] == 0.0 and out_s[-1] == 9_999.0
    assert 9.0 in out_v and out_s == sorted(out_s)
    assert lttb(steps[:10], values[:10], 500) == (steps[:10], values[:10])


def test_a_ten_thousand_step_job_with_ten_series_is_downsampled_says_so_and_stays_small() -> None:
    feed = ChartFeed()
    metrics = [f"m{i}" for i in range(10)]
    rows = [{"step": s, **{m: math.sin(s / 50 + i) for i, m in enumerate(metrics)}} for s in range(1, 10_001)]
    feed.update({"ft-a": rows}, metrics)
    doc = feed.full()
    assert all(len(s["steps"]) == feed.max_points for s in doc["series"]) and feed.points == 100_000
    assert "downsampled" in doc["note"] and "10,000" in doc["note"]
    assert len(json.dumps(doc)) < 1_000_000


def test_continued_jobs_start_where_their_parents_stopped() -> None:
    assert parent_of("opd-local/ft-202612010000-abcdef") == ("ft-202612010000-abcdef", None)
    assert parent_of("ft-202612010000-abcdef:checkpoint-20") == ("ft-202612010000-abcdef", 20.0)
    path = "/data/jobs/ft-202612010000-abcdef/output/checkpoints/checkpoint-12"
    assert parent_of(path) == ("ft-202612010000-abcdef", 12.0)
    assert parent_of("qwen3-8b") == (None, None) and parent_of(None) == (None, None)

    last = {"ft-202612010000-aaaaaa": 256.0, "ft-202612010000-bbbbbb": 40.0}
    models = {
        "ft-202612010000-aaaaaa": "qwen3-8b",
        "ft-202612010000-bbbbbb": "opd-local/ft-202612010000-aaaaaa",
    }
    # grandchild of a continued job: 256 (grandparent) + 40 (parent's last step)
    got = step_offset("opd-local/ft-202612010000-bbbbbb", last.get, models.get)
    assert got == 296.0
    assert step_offset("ft-202612010000-aaaaaa:checkpoint-100", last.get, models.get) == 100.0
    assert step_offset("opd-local/ft-202612010000-zzzzzz", last.get, models.get) == 0.0  # unknown parent
