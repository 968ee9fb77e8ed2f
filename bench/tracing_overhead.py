"""What tracing costs a reward job: the same local job with the SDK's tracing on and off, interleaved.

Two `opd serve` processes share the machine: one starts its jobs' function servers with tracing on
(spans exported to it, stored per step, folded into the step's metrics), the other with
``OPD_TRACING=0``. The template's reward workspace (its reward function is decorated with
``@observe_processor``: an ``invoke_agentic_rl`` and an ``invoke_reward`` span per reward call, every
sample of a step recorded and traced) runs on each in turn in ABBA blocks (off, on, on, off, then on,
off, off, on, ...), one job at a time, so that a shared machine's load drifts over both alike and the
second job of a pair (which ran faster here, whichever it was) favours neither.

Per job, over its steps after a warm-up: the median step time (``timing_s/step``) and the mean one
over the window (throughput: everything between the steps included), each stage's median (``gen``,
``teacher`` with the reward calls beside it, ``reward``, ``update``, ``record``), and the CPU seconds
per step of each process (psutil, sampled every 20 ms, read at the steps' log times): ``worker`` (the
engine), ``fn`` (the reward function server: the SDK's spans and their export), ``serve`` (the
control plane: the OTLP intake and the span files). CPU time hardly moves with the other load on the
machine; wall time does. A block's ratio is its traced jobs' mean over its untraced jobs' mean; the
overhead is the median of the blocks' ratios.

Last line: ``tracing_overhead=X% (median step: on A ms, off B ms; median of N ABBA blocks;
throughput Y%) cpu_added=Z ms/step (fn a, serve b, worker c) spans_per_step=S``.
Usage: ``python bench/tracing_overhead.py [--steps 40] [--blocks 3]`` (about 3 minutes on 2 cores). On a
shared machine: ``OPD_WORKER_NICE=0 nice -n -15 python bench/tracing_overhead.py``. A job's worker lowers
its own session's priority (``OPD_WORKER_NICE``, default 10, through the kernel's autogroup), so ``nice``
alone leaves the training itself at the mercy of other sessions' load; a job whose steps took ten times
their usual time was starved, and its block says so in its ratios.
"""

from __future__ import annotations

import argparse
import bisect
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WARMUP = 3  # steps left out of a job's figures (imports, the first calls)
SAMPLE_S = 0.02  # how often the processes' CPU times are read
STAGES = ("gen", "teacher", "reward", "update", "record")
ROLES = ("worker", "fn", "serve")
_STEP_LINE = re.compile(r"\] \S+ \S+ step (\d+)/\d+ \(epoch")


def role(cmdline: str) -> str:
    """Which part of a job a process of a server's tree is (by its command line)."""
    if "opd_nb.functions.server" in cmdline:  # python -m opd_nb.functions.server (FunctionServer)
        return "fn"
    if "worker" in cmdline:
        return "worker"
    if "forkserver" in cmdline:
        return "fork"
    return "other"


class CpuSampler(threading.Thread):
    """The CPU seconds (user + system) each role of a server's process tree has used so far, over time.

    A process that ended keeps counting with its last reading, so each role's total only grows."""

    def __init__(self, root_pid: int):
        super().__init__(daemon=True, name="cpu-sampler")
        import psutil

        self.root = psutil.Process(root_pid)
        self.times: list[float] = []
        self.totals: list[dict[str, float]] = []
        self._cpu: dict[int, tuple[str, float]] = {}
        self._procs: dict[int, tuple[str, Any]] = {root_pid: ("serve", self.root)}
        self._done = threading.Event()

    def run(self) -> None:
        import psutil

        refreshed = 0.0
        while not self._done.is_set():
            now = time.time()
            if now - refreshed > 0.25:  # new processes, and titles: a forked worker names itself once forked
                refreshed = now
                try:
                    for p in self.root.children(recursive=True):
                        self._procs[p.pid] = (role(" ".join(p.cmdline())), p)
                except psutil.Error:
                    pass
            for pid, (name, p) in list(self._procs.items()):
                try:
                    t = p.cpu_times()
                    self._cpu[pid] = (name, t.user + t.system)
                except psutil.Error:
                    self._procs.pop(pid)
            total: dict[str, float] = {}
            for name, cpu in self._cpu.values():  # a process's CPU counts under its latest role
                total[name] = total.get(name, 0.0) + cpu
            self.times.append(now)
            self.totals.append(total)
            self._done.wait(SAMPLE_S)

    def at(self, t: float) -> dict[str, float]:
        """Each role's CPU seconds at time `t` (linear between the two samples around it)."""
        i = bisect.bisect_left(self.times, t)
        if i <= 0 or i >= len(self.times):
            return dict(self.totals[min(max(i, 0), len(self.totals) - 1)])
        t0, t1 = self.times[i - 1], self.times[i]
        w = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
        a, b = self.totals[i - 1], self.totals[i]
        return {k: a.get(k, 0.0) + w * (b.get(k, 0.0) - a.get(k, 0.0)) for k in set(a) | set(b)}

    def stop(self) -> None:
        self._done.set()
        self.join(5)


def step_times(data_dir: Path, job_id: str) -> dict[int, float]:
    """When the train steps with a log line ended: the time that line was written (read-only, from the
    server's store)."""
    db = sqlite3.connect(f"file:{data_dir / 'opd.sqlite3'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT ts, line FROM logs WHERE job_id = ? ORDER BY seq", (job_id,)).fetchall()
    finally:
        db.close()
    return {int(m.group(1)): ts for ts, line in rows if (m := _STEP_LINE.search(line))}


@dataclass
class Job:
    """One job's figures over its steps after the warm-up (milliseconds per step)."""

    which: str
    step_ms: float  # median step
    window_ms: float  # wall time of the window / its steps (throughput)
    stages: dict[str, float]
    cpu: dict[str, float]
    spans: float = 0.0

    def line(self) -> str:
        stages = " ".join(f"{k} {self.stages.get(k, float('nan')):.1f}" for k in STAGES)
        cpu = " ".join(f"{k} {self.cpu.get(k, 0.0):.1f}" for k in ROLES)
        spans = f" | {self.spans:.0f} spans/step" if self.which == "on" else ""
        return (
            f"  {self.which:>3}: step {self.step_ms:6.1f} ms median, {self.window_ms:6.1f} ms throughput | "
            f"stages {stages} | CPU ms/step {cpu}{spans}"
        )


def job_figures(which: str, rows: list[dict[str, Any]], ends: dict[int, float], sampler: CpuSampler) -> Job:
    """A job's figures from its metric rows, its steps' end times and its server's CPU samples."""
    later = [r for r in rows if r.get("step", 0) > WARMUP]
    stages = {
        k: 1000 * statistics.median(vals)
        for k in (*STAGES, "step")
        if (vals := [r[f"timing_s/{k}"] for r in later if f"timing_s/{k}" in r])
    }
    # the engine logs a step line every 1/20 of the steps; the last step also evaluates: left out
    first = min(s for s in ends if s >= WARMUP)
    last = max(s for s in ends if s < max(ends))
    n = last - first
    a, b = sampler.at(ends[first]), sampler.at(ends[last])
    cpu = {k: 1000 * (b.get(k, 0.0) - a.get(k, 0.0)) / n for k in set(a) | set(b)}
    window = 1000 * (ends[last] - ends[first]) / n
    return Job(which, stages.pop("step"), window, stages, cpu)


@dataclass
class Block:
    order: tuple[str, ...]
    jobs: list[Job] = field(default_factory=list)

    def mean(self, which: str, attr: str) -> float:
        return statistics.mean(getattr(j, attr) for j in self.jobs if j.which == which)

    def ratio(self, attr: str = "step_ms") -> float:
        return self.mean("on", attr) / self.mean("off", attr)

    def cpu_added(self) -> dict[str, float]:
        on = [j.cpu for j in self.jobs if j.which == "on"]
        off = [j.cpu for j in self.jobs if j.which == "off"]
        return {
            k: statistics.mean(c.get(k, 0.0) for c in on) - statistics.mean(c.get(k, 0.0) for c in off)
            for k in ROLES
        }

    def line(self, i: int) -> str:
        added = self.cpu_added()
        parts = ", ".join(f"{k} {added[k]:+.1f}" for k in ROLES)
        return (
            f"block {i} ({','.join(self.order)}): on/off {(self.ratio() - 1) * 100:+.1f}% median step, "
            f"{(self.ratio('window_ms') - 1) * 100:+.1f}% throughput; CPU {sum(added.values()):+.1f} ms/step ({parts})"
        )


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


def run_job(server: Any, ws: Path) -> tuple[str, list[dict[str, Any]]]:
    from opd_nb.client import JobClient, resolve_target
    from opd_nb.demo import parse_job_id

    env = {**os.environ, **server.env(), "NO_PROXY": "127.0.0.1,localhost"}
    proc = subprocess.run(
        [sys.executable, "submit_job.py", "--local", server.api_base, "--wait"],
        cwd=ws, env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    job_id = parse_job_id(proc.stdout)
    if proc.returncode != 0 or not job_id:
        raise SystemExit(f"the job failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    client = JobClient(resolve_target("local", base_url=server.api_base))
    return job_id, client.metrics(job_id) or []


def spans_per_step(data_dir: Path, job_id: str) -> float:
    files = list((data_dir / "jobs" / job_id / "traces").glob("train-*.jsonl"))
    return sum(sum(1 for _ in open(f)) for f in files) / max(1, len(files))


def summary(blocks: list[Block]) -> list[str]:
    """The closing lines: per-stage and per-process medians over the blocks, and the verdict line."""
    med = statistics.median
    lines = []
    for title, get, keys in (
        ("stage medians, ms (on/off)", lambda j, k: j.stages.get(k, float("nan")), STAGES),
        ("CPU per step, ms (on/off)", lambda j, k: j.cpu.get(k, 0.0), ROLES),
    ):
        cells = [
            f"{k} {med(med(get(j, k) for j in b.jobs if j.which == 'on') for b in blocks):.1f}/"
            f"{med(med(get(j, k) for j in b.jobs if j.which == 'off') for b in blocks):.1f}"
            for k in keys
        ]
        lines.append(f"{title}: " + ", ".join(cells))
    added = {k: med(b.cpu_added()[k] for b in blocks) for k in ROLES}
    on, off = (med(b.mean(w, "step_ms") for b in blocks) for w in ("on", "off"))
    spans = med(j.spans for b in blocks for j in b.jobs if j.which == "on")
    lines.append(
        f"tracing_overhead={(med(b.ratio() for b in blocks) - 1) * 100:.1f}% (median step: on {on:.1f} ms, "
        f"off {off:.1f} ms; median of {len(blocks)} ABBA blocks; throughput "
        f"{(med(b.ratio('window_ms') for b in blocks) - 1) * 100:+.1f}%) cpu_added={sum(added.values()):.1f} "
        f"ms/step ({', '.join(f'{k} {v:+.1f}' for k, v in added.items())}) spans_per_step={spans:.0f}"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--blocks", type=int, default=3)
    args = ap.parse_args(argv)

    from opd_nb.server import start
    from opd_nb.server.tracing.env import TRACING_ENV

    print(f"load average {os.getloadavg()[0]:.2f} at the start; {args.steps} steps of {args.batch} prompts x 2 "
          f"rollouts per job, figures after step {WARMUP}; on/off ms per step", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="opd-trace-bench-") as tmp:
        root = Path(tmp)
        ws = workspace(root, args.steps, args.batch)
        servers = {"on": start(data_dir=root / "on")}
        os.environ[TRACING_ENV] = "0"
        try:
            servers["off"] = start(data_dir=root / "off")
        finally:
            os.environ.pop(TRACING_ENV, None)
        samplers = {w: CpuSampler(s.pid or 0) for w, s in servers.items()}
        for s in samplers.values():
            s.start()
        blocks: list[Block] = []
        try:
            for i in range(args.blocks):  # ABBA blocks: the order bias of a pair's first job cancels
                block = Block(("off", "on", "on", "off") if i % 2 == 0 else ("on", "off", "off", "on"))
                for which in block.order:
                    job_id, rows = run_job(servers[which], ws)
                    job = job_figures(which, rows, step_times(root / which, job_id), samplers[which])
                    job.spans = spans_per_step(root / which, job_id) if which == "on" else 0.0
                    block.jobs.append(job)
                    print(job.line(), flush=True)
                blocks.append(block)
                print(block.line(i + 1), flush=True)
        finally:
            for s in samplers.values():
                s.stop()
            for s in servers.values():
                s.stop()
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    print("\n".join(summary(blocks)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
