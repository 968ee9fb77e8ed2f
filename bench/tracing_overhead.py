"""What tracing costs a reward job: the same local job with the SDK's tracing on and off, interleaved.

Two `opd serve` processes share the machine: one starts its jobs' function servers with tracing on
(spans exported every 0.5 s to it, stored, folded into the step's metrics), the other with
``OPD_TRACING=0``. The template's reward workspace (the reward function is decorated with
``@observe_processor``: an ``invoke_agentic_rl`` and an ``invoke_reward`` span per reward call) runs on
each in turn in three ABBA blocks (off, on, on, off, then on, off, off, on, ...), one job at a time, so
that a shared machine's load drifts over both alike, and the second job of a pair (which ran faster here,
whichever it was) favours neither. A job's speed is the median ``timing_s/step`` after a warm-up; a
block's ratio is its traced jobs' mean over its untraced jobs' mean; the overhead is the median of the
blocks' ratios. The spans each traced job left (per step) are printed with it.

Last line: ``tracing_overhead=X% (on A ms/step, off B ms/step, median of 3 ABBA blocks) spans_per_step=N``.
Usage: ``python bench/tracing_overhead.py [--steps 24] [--pairs 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WARMUP = 3  # steps left out of a job's speed (imports, the first calls)


def workspace(root: Path, steps: int, batch: int) -> Path:
    """The template's reward workspace, sized to `steps` steps of `batch` prompts x 2 rollouts."""
    import yaml

    from opd_nb.workspace.new import create

    path = Path(create("reward", root / "ws").path)
    rows = (path / "data" / "train.jsonl").read_text().splitlines(keepends=True)
    need = steps * batch
    (path / "data" / "train.jsonl").write_text("".join((rows * (need // len(rows) + 1))[:need]))
    (path / "data" / "validation.jsonl").write_text("".join(rows[:8]))
    cfg = yaml.safe_load((path / "config.yaml").read_text())
    cfg["training"]["hyper_parameters"].update(
        n_epochs=1, batch_size=batch, n_rollouts=2, ppo_mini_batch_size=2 * batch, eval_steps=10**6,
        save_strategy="no", max_prompt_length=40, max_length=64,
    )  # fmt: skip
    (path / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_job(server: object, ws: Path) -> tuple[str, list[dict]]:
    from opd_nb.client import JobClient, resolve_target
    from opd_nb.demo import parse_job_id

    env = {**os.environ, **server.env(), "NO_PROXY": "127.0.0.1,localhost"}  # type: ignore[attr-defined]
    proc = subprocess.run(
        [sys.executable, "submit_job.py", "--local", server.api_base, "--wait"],  # type: ignore[attr-defined]
        cwd=ws, env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    job_id = parse_job_id(proc.stdout)
    if proc.returncode != 0 or not job_id:
        raise SystemExit(f"the job failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    client = JobClient(resolve_target("local", base_url=server.api_base))  # type: ignore[attr-defined]
    return job_id, client.metrics(job_id) or []


def ms_per_step(rows: list[dict]) -> float:
    times = [r["timing_s/step"] for r in rows if r.get("step", 0) > WARMUP and "timing_s/step" in r]
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args(argv)

    from opd_nb.server import start
    from opd_nb.server.trace_env import TRACING_ENV

    with tempfile.TemporaryDirectory(prefix="opd-trace-bench-") as tmp:
        root = Path(tmp)
        ws = workspace(root, args.steps, args.batch)
        traced = start(data_dir=root / "on")
        os.environ[TRACING_ENV] = "0"
        try:
            plain = start(data_dir=root / "off")
        finally:
            os.environ.pop(TRACING_ENV, None)
        ratios, on_ms, off_ms, spans = [], [], [], []
        try:
            for i in range(args.pairs):  # ABBA blocks: the order bias of a pair's first job cancels
                order = ("off", "on", "on", "off") if i % 2 == 0 else ("on", "off", "off", "on")
                runs: dict[str, list[float]] = {"on": [], "off": []}
                traced_jobs = []
                for which in order:
                    job, rows = run_job(traced if which == "on" else plain, ws)
                    runs[which].append(ms_per_step(rows))
                    if which == "on":
                        traced_jobs.append(job)
                job_id = traced_jobs[-1]
                on, off = sum(runs["on"]) / 2, sum(runs["off"]) / 2
                on_ms.append(on)
                off_ms.append(off)
                ratios.append(on / off)
                files = list((root / "on" / "jobs" / job_id / "traces").glob("train-*.jsonl"))
                spans.append(sum(sum(1 for _ in open(f)) for f in files) / max(1, len(files)))
                print(f"block {i + 1}: traced {on:.1f} ms/step, untraced {off:.1f} ms/step ({(on / off - 1) * 100:+.1f}%); "
                      f"{spans[-1]:.0f} spans per step", flush=True)  # fmt: skip
        finally:
            traced.stop()
            plain.stop()
    overhead = (statistics.median(ratios) - 1) * 100
    print(
        f"tracing_overhead={overhead:.1f}% (on {statistics.median(on_ms):.1f} ms/step, off "
        f"{statistics.median(off_ms):.1f} ms/step, median of {args.pairs} ABBA blocks) "
        f"spans_per_step={statistics.median(spans):.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
