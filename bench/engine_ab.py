"""The engine's ms/step in two source trees, interleaved in one run: the check for a refactor.

A refactor of ``opd_nb/engine`` must not make a step slower. This runs the same seeded job (the
bundled tiny pair, ``bench/engine_vs_trl.py``'s data and batch) with the engine of an old tree
and of this tree, alternating ``old, new, old, new, …`` so that a slow or fast spell of the
machine (they swing ~25% between processes) touches both sides, each run in a fresh process with
that tree first on ``sys.path``. It prints each run's median ms/step after a warm-up (wall clock)
and its median CPU ms/step (the process's own CPU time between steps: what other processes on a
shared machine inflate far less than the wall clock), then per estimator the medians of the runs
and both ratios new/old, and whether the two trees logged the same non-timing metrics (a refactor
should change no number).

Make an old tree with ``git worktree add /tmp/old REV`` or ``git archive REV | tar -x -C /tmp/old``.
Usage: ``python bench/engine_ab.py --old /tmp/old [--runs 3] [--steps 40] [--algorithms gkd pg_opd]``.
Last line: ``ratio_gkd=X ratio_pg_opd=Y cpu_ratio_gkd=X cpu_ratio_pg_opd=Y same_metrics=True``
(ratio < 1: the new tree is faster).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WARMUP = 3
BATCH = 64
TIMING = ("timing_s/", "perf/")
STAGES = ("gen", "teacher", "update", "record")


def stamped_events() -> Any:
    """A ListEvents that also records (step, this process's CPU seconds) at each step's end.

    Built on call: the engine it subclasses is imported from whichever tree is first on sys.path."""
    from opd_nb.engine.trainer import ListEvents

    class Stamped(ListEvents):
        def __init__(self) -> None:
            super().__init__()
            self.cpu: list[tuple[int, float]] = []

        def progress(self, step: int, *rest: Any) -> None:
            super().progress(step, *rest)
            self.cpu.append((step, time.process_time()))

    return Stamped()


def cpu_ms_per_step(stamps: list[tuple[int, float]], warmup: int) -> list[float]:
    """CPU ms of each step after `warmup`, from (step, CPU seconds at its end) stamps of consecutive steps."""
    return [
        (b - a) * 1000 for (s0, a), (s1, b) in itertools.pairwise(stamps) if s1 == s0 + 1 and s0 >= warmup
    ]


def child(tree: str, work: str, algorithm: str, steps: int, train: str, val: str) -> int:
    """Run one job with `tree`'s engine and print its rows as one JSON line."""
    sys.path.insert(0, tree)
    from opd_nb.engine.api import EngineJob
    from opd_nb.engine.models import default_pair
    from opd_nb.engine.trainer import run

    student, teacher = default_pair()
    job = EngineJob(
        job_id="ab",
        student_path=str(student),
        teacher_path=str(teacher),
        train_file=train,
        validation_file=val,
        algorithm=algorithm,
        output_dir=work,
        seed=0,
        local_learning_rate=1e-3,
        device="cpu",
        hyper_parameters={
            "batch_size": BATCH,
            "n_rollouts": 1 if algorithm == "gkd" else 2,
            "ppo_mini_batch_size": BATCH,
            "n_epochs": 1,
            "lr_scheduler_type": "constant",
            "max_length": 43,  # bench/engine_vs_trl.py: MAX_PROMPT + MAX_NEW
            "eval_steps": max(1, steps // 2),
            "save_strategy": "no",
        },
    )

    ev = stamped_events()
    run(job, ev, lambda: len([r for r in ev.rows if r["step"] > 0]) >= steps)
    engine = sys.modules["opd_nb.engine.trainer"].__file__
    print(json.dumps({"engine": engine, "rows": ev.rows, "cpu": ev.cpu}))
    return 0


def one_run(tree: Path, algorithm: str, steps: int, train: Path, val: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="opd-ab-") as work:
        cmd = [sys.executable, __file__, "--child", str(tree), "--work", work, "--algorithm", algorithm]
        cmd += ["--steps", str(steps), "--train", str(train), "--val", str(val)]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    if out.returncode != 0:
        raise SystemExit(f"{tree} {algorithm} failed:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if not res["engine"].startswith(str(tree)):
        raise SystemExit(f"ran {res['engine']}, not the engine of {tree}: check PYTHONPATH")
    steps_rows = [r for r in res["rows"] if r["step"] > 0]
    timed = steps_rows[WARMUP:]
    ms = statistics.median(r["timing_s/step"] for r in timed) * 1000
    stages = {k: statistics.median(r[f"timing_s/{k}"] for r in timed) * 1000 for k in STAGES}
    numbers = [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in res["rows"]]
    cpu = cpu_ms_per_step([(int(st), float(c)) for st, c in res["cpu"]], WARMUP)
    return {"ms": ms, "cpu": statistics.median(cpu), "stages": stages, "numbers": numbers}


def write_data(work: Path, steps: int) -> tuple[Path, Path]:
    sys.path.insert(0, str(REPO))
    from opd_nb.engine import task

    val_rows = task.make_rows(64, seed=10_001)
    held = {r["messages"][-1]["content"] for r in val_rows}
    train_rows = task.make_rows(steps * BATCH, seed=1, exclude=held)
    train, val = work / "train.jsonl", work / "val.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in train_rows))
    val.write_text("".join(json.dumps(r) + "\n" for r in val_rows))
    return train, val


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", help="the other source tree (its opd_nb/ is imported)")
    ap.add_argument("--runs", type=int, default=3, help="runs per tree and estimator")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--algorithms", nargs="+", default=["gkd", "pg_opd"])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--algorithm", help=argparse.SUPPRESS)
    ap.add_argument("--train", help=argparse.SUPPRESS)
    ap.add_argument("--val", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.work, args.algorithm, args.steps, args.train, args.val)
    if not args.old or not (Path(args.old) / "opd_nb" / "engine").is_dir():
        ap.error("--old must name a source tree with opd_nb/engine/ in it")
    trees = {"old": Path(args.old).resolve(), "new": REPO}
    summary, cpu_summary, same = [], [], True
    with tempfile.TemporaryDirectory(prefix="opd-ab-data-") as tmp:
        train, val = write_data(Path(tmp), args.steps)
        for algorithm in args.algorithms:
            ms: dict[str, list[float]] = {"old": [], "new": []}
            cpu: dict[str, list[float]] = {"old": [], "new": []}
            numbers = {}
            for i in range(args.runs):
                for side, tree in trees.items():
                    r = one_run(tree, algorithm, args.steps, train, val)
                    ms[side].append(r["ms"])
                    cpu[side].append(r["cpu"])
                    numbers[side] = r["numbers"]
                    stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stages"].items())
                    print(
                        f"{algorithm} {side} run {i + 1}/{args.runs}: {r['ms']:.1f} ms/step ({stages}); "
                        f"cpu {r['cpu']:.1f} ms/step",
                        flush=True,
                    )
            ratio = statistics.median(ms["new"]) / statistics.median(ms["old"])
            cpu_ratio = statistics.median(cpu["new"]) / statistics.median(cpu["old"])
            equal = numbers["old"] == numbers["new"]
            same = same and equal
            print(
                f"{algorithm}: old median {statistics.median(ms['old']):.1f} ms/step, new median "
                f"{statistics.median(ms['new']):.1f} ms/step, new/old {ratio:.3f}; cpu new/old "
                f"{cpu_ratio:.3f}; same metrics: {equal}",
                flush=True,
            )
            summary.append(f"ratio_{algorithm}={ratio:.3f}")
            cpu_summary.append(f"cpu_ratio_{algorithm}={cpu_ratio:.3f}")
    print(" ".join(summary + cpu_summary) + f" same_metrics={same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
