"""Where the engine's step time goes, stage by stage, at the bundled tiny pair's width.

Runs ``bench/engine_vs_trl.py``'s engine configuration (gkd, 64 prompts x 1 sample, one torch thread) and
profiles the three stages of some steps after a warm-up with ``torch.profiler``: ``gen``
(``TorchSampler.generate``), ``teacher`` (``TeacherScorer.score``) and ``update``
(``Updater.update``). Per stage it prints the unprofiled median ms (the other steps), the number of
tensor operations per step, the self time of the matrix products (``mm``, ``addmm``, ``bmm``, ...:
the only part the FLOP bound counts) and the operations that take the most self time besides.
What is neither matmul nor another op's self time is Python and dispatch between the operations.
``--width 4`` profiles the 4x-wide student of the bound's widest check.
Usage: ``python bench/engine_profile.py [--steps 16] [--every 2] [--threads 1] [--width 1]``.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

GEMMS = {
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
}
STAGES = {"gen": ("sampling", "TorchSampler", "generate"), "teacher": ("scoring", "TeacherScorer", "score"),
          "update": ("updates", "Updater", "update")}  # fmt: skip


class StageProfiles:
    """Profiles every `every`-th call of each stage after `warmup` calls; times the others."""

    def __init__(self, warmup: int, every: int) -> None:
        self.warmup, self.every = warmup, every
        self.calls: collections.Counter[str] = collections.Counter()
        self.plain: dict[str, list[float]] = collections.defaultdict(list)
        self.ops: dict[str, list[dict[str, tuple[int, float]]]] = collections.defaultdict(list)
        self.profiled_ms: dict[str, list[float]] = collections.defaultdict(list)

    def wrap(self, stage: str, fn: Any) -> Any:
        import time

        import torch

        def timed(*a: Any, **kw: Any) -> Any:
            self.calls[stage] += 1
            n = self.calls[stage] - self.warmup
            t = time.perf_counter()
            if n <= 0 or n % self.every:
                out = fn(*a, **kw)
                if n > 0:
                    self.plain[stage].append((time.perf_counter() - t) * 1000)
                return out
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                out = fn(*a, **kw)
            self.profiled_ms[stage].append((time.perf_counter() - t) * 1000)
            self.ops[stage].append(
                {e.key: (e.count, e.self_cpu_time_total / 1000) for e in prof.key_averages()}
            )
            return out

        return timed

    def report(self, stage: str) -> str:
        """One stage's line: unprofiled ms, ops per call, matmul ms, and the top other ops by self time."""
        calls = self.ops[stage]
        per = lambda f: statistics.median(f(c) for c in calls)  # noqa: E731
        n_ops = per(lambda c: sum(n for n, _ in c.values()))
        self_ms = per(lambda c: sum(ms for _, ms in c.values()))
        gemm = per(lambda c: sum(ms for k, (_, ms) in c.items() if k in GEMMS))
        others: collections.Counter[str] = collections.Counter()
        for c in calls:
            for k, (_n, ms) in c.items():
                if k not in GEMMS:
                    others[k] += ms / len(calls)
        top = ", ".join(f"{k.removeprefix('aten::')} {ms:.1f}" for k, ms in others.most_common(6))
        plain = statistics.median(self.plain[stage]) if self.plain[stage] else float("nan")
        return (
            f"{stage}: {plain:.1f} ms unprofiled ({statistics.median(self.profiled_ms[stage]):.1f} profiled); "
            f"{n_ops:.0f} ops/step, op self time {self_ms:.1f} ms of which matmul {gemm:.1f} ms; top others (ms): {top}"
        )


def main(argv: list[str] | None = None) -> int:
    import importlib

    import torch
    from vs_trl_flops import wider_student
    from vs_trl_trainers import run_engine

    from opd_nb.engine import task

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--every", type=int, default=2, help="profile every n-th step after the warm-up")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the bench's default: 1)")
    ap.add_argument("--width", type=int, default=1, help="the student this many times as wide (vs_trl_flops)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    profiles = StageProfiles(warmup=3, every=args.every)
    for stage, (module, cls, meth) in STAGES.items():
        klass = getattr(importlib.import_module(f"opd_nb.engine.{module}"), cls)
        setattr(klass, meth, profiles.wrap(stage, getattr(klass, meth)))
    from opd_nb.engine.models import default_pair

    with tempfile.TemporaryDirectory(prefix="opd-prof-") as tmp:
        train = Path(tmp) / "train.jsonl"
        train.write_text("".join(json.dumps(r) + "\n" for r in task.make_rows(args.steps * 64, seed=1)))
        student, teacher = default_pair()
        student = wider_student(student, args.width, Path(tmp), seed=0)
        spec = {"work": tmp, "train": str(train), "student": str(student), "teacher": str(teacher),
                "seed": 0, "device": "cpu", "batch": 64, "steps": args.steps, "warmup": 3}  # fmt: skip
        out, _ = run_engine(spec)
    print(
        f"engine: {out['wall_ms']:.1f} ms/step wall (median, profiled steps included), {out['tokens']:.0f} tokens/step"
    )
    for stage in STAGES:
        print(profiles.report(stage))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
