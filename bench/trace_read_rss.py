"""Peak memory of `opd serve` while it answers trace reads of one big step.

    python bench/trace_read_rss.py [--spans 60000] [--readers 10] [--limit 1] [--rounds 3]

Writes one train step of ``--spans`` spans (calls of 4 spans each, ~430 bytes a span: 60,000 spans are
~25 MiB, under the step cap) into a fresh data dir for a SUCCEEDED job, starts a server on it and sends
``--readers`` concurrent ``GET /fine-tunes/{id}/traces?step=1&limit=N`` reads, ``--rounds`` times, while
sampling the server's RSS (its whole process tree) every 10 ms. Prints the RSS before, the peak and the
RSS after the reads, and the first trajectory's trace id (the same before and after a change).
Target (issue 48): a read costs what it returns, not the size of the step. Not a test: read the figures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

H = {"Authorization": "Bearer bench"}
JOB = "ft-bench-traces"


def write_step(data_dir: Path, spans: int) -> None:
    """A SUCCEEDED job whose train step 1 holds `spans` spans, written as the intake writes them."""
    from opd_nb.server.store import Store
    from opd_nb.server.store.job_record import JobMeta
    from opd_nb.server.store.traces import TraceFiles
    from opd_nb.traces import ids
    from opd_nb.traces.spans import Span

    store = Store(data_dir)
    meta = JobMeta(training_type="pg_opd", student_path="/s", teacher_path="/t", train_file="/f.jsonl")
    store.insert_job(JOB, "bench", {"model": "m"}, meta)
    store.set_job(JOB, status="SUCCEEDED")
    files = TraceFiles(data_dir)
    names = ("invoke_agentic_rl", "invoke_rollout R", "chat student", "execute_tool count_digits")
    kinds = ("CHAIN", "ROLLOUT", "LLM", "TOOL")
    batch: list[Span] = []
    for n in range(spans):
        call, part = divmod(n, 4)
        attrs = {
            ids.SAMPLE_ID_KEY: ids.sample_id(ids.where("train", 1), call // 8),
            ids.ROLLOUT_ID_KEY: str(call % 8),
            ids.ATTEMPT_ID_KEY: "0",
            "gen_ai.span.kind": kinds[part],
            "gen_ai.tool.name": "count_digits",
            "gen_ai.tool.call.arguments": '{"digits": "93418"}',
        }
        batch.append(
            Span(
                trace_id=f"{call:032x}",
                span_id=f"{n + 1:016x}",
                parent_id=None if part == 0 else f"{call * 4 + min(part, 2):016x}",
                name=names[part],
                kind=kinds[part],
                start_ms=1.7e12 + call * 10.0 + part,
                duration_ms=10.0 - part * 2,
                status="error" if part == 3 and call % 5 == 0 else "ok",
                attributes=attrs,
                service=f"opd {JOB} rollout r",
            )
        )
        if len(batch) == 1000:
            files.add(JOB, "train", 1, batch)
            batch = []
    files.add(JOB, "train", 1, batch)


def tree_rss(pid: int) -> int:
    proc = psutil.Process(pid)
    total = proc.memory_info().rss
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spans", type=int, default=60_000)
    parser.add_argument("--readers", type=int, default=10)
    parser.add_argument("--limit", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from opd_nb.server import start

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        write_step(data_dir, args.spans)
        size = sum(p.stat().st_size for p in (data_dir / "jobs" / JOB / "traces").iterdir())
        server = start(port=0, data_dir=data_dir)
        try:
            assert server.pid is not None
            pid = server.pid
            time.sleep(2)
            before = tree_rss(pid)
            peak = [before]
            done = threading.Event()

            def sample() -> None:
                while not done.is_set():
                    peak[0] = max(peak[0], tree_rss(pid))
                    time.sleep(0.01)

            sampler = threading.Thread(target=sample)
            sampler.start()
            url = f"{server.api_base}/fine-tunes/{JOB}/traces?step=1&limit={args.limit}"
            answers: list[dict] = []
            started = time.monotonic()

            def read() -> None:
                reply = httpx.get(url, headers=H, timeout=600)
                reply.raise_for_status()
                answers.append(reply.json()["output"])

            rounds: list[float] = []
            for _ in range(args.rounds):
                readers = [threading.Thread(target=read) for _ in range(args.readers)]
                begun = time.monotonic()
                for r in readers:
                    r.start()
                for r in readers:
                    r.join()
                rounds.append(time.monotonic() - begun)
            took = time.monotonic() - started
            time.sleep(1)
            done.set()
            sampler.join()
            after = tree_rss(pid)
        finally:
            server.stop()
    first = answers[0]["trajectories"][0]
    mib = 2**20
    print(f"step file: {args.spans} spans, {size / mib:.1f} MiB")
    print(
        f"{args.rounds} x {args.readers} concurrent reads with limit={args.limit}: {len(answers)} answers "
        f"in {took:.1f} s (rounds: {', '.join(f'{r:.1f} s' for r in rounds)}); each {len(answers[0]['trajectories'])} trajectory(ies), first {first['trace_id']} "
        f"({first['spans']} spans), metrics {sorted(answers[0]['metrics'])[:2]}..."
    )
    print(
        f"server RSS: before {before / mib:.0f} MiB, peak {peak[0] / mib:.0f} MiB, after {after / mib:.0f} MiB"
    )


if __name__ == "__main__":
    main()
