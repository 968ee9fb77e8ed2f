"""Load check for `opd serve`: N watchers poll get + logs at H Hz while a job really trains.

    python bench/serve_load.py [--watchers 50] [--hz 5] [--duration 60] [--url http://127.0.0.1:8765]

Without --url it starts its own server on a free port with a temporary data dir. It submits a
pure-distillation job on the bundled tiny pair (many epochs, so it trains for the whole run), then
starts the watchers. Each watcher alternates ``GET /fine-tunes/{id}`` and
``GET /fine-tunes/{id}/logs?offset=…`` (following the log like `opd logs -f`). Prints requests
served, errors, latency percentiles and the training steps done meanwhile. Target: 0 errors and
p99 < 100 ms. Not a test: timings on a shared CPU are noisy, so read the printed figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

H = {"Authorization": "Bearer bench"}


def submit_job(api: str) -> str:
    from opd_nb.engine.task import make_rows

    body = "".join(json.dumps(r) + "\n" for r in make_rows(256, seed=7)).encode()
    up = httpx.post(api + "/files", headers=H, files={"files": ("train.jsonl", body)}, timeout=60).json()
    file_id = up["data"]["uploaded_files"][0]["file_id"]
    job = {
        "model": "qwen3-8b",
        "teacher_model": "qwen3-max",
        "training_type": "pg_opd",
        "training_datasets": [{"type": "training", "data_source_type": "file_id", "file_id": file_id}],
        "hyper_parameters": {
            "n_epochs": 100,
            "batch_size": 8,
            "n_rollouts": 2,
            "ppo_mini_batch_size": 16,
            "max_prompt_length": 40,
            "max_length": 64,
            "eval_steps": 100000,
        },
    }
    resp = httpx.post(api + "/fine-tunes", headers=H, json=job, timeout=60)
    resp.raise_for_status()
    return resp.json()["output"]["job_id"]


async def watcher(
    api: str, job_id: str, hz: float, count_from: float, stop_at: float, lat: list[float], errors: list[str]
) -> None:
    period = 1.0 / hz
    offset = 1
    async with httpx.AsyncClient(base_url=api, headers=H, timeout=10) as client:
        n = 0
        while time.monotonic() < stop_at:
            started = time.monotonic()
            try:
                if n % 2 == 0:
                    resp = await client.get(f"/fine-tunes/{job_id}")
                else:
                    resp = await client.get(
                        f"/fine-tunes/{job_id}/logs", params={"offset": offset, "line": 200}
                    )
                    if resp.status_code == 200:
                        offset = resp.json()["output"]["next_offset"]
                if started >= count_from:
                    lat.append(time.monotonic() - started)
                if resp.status_code != 200:
                    errors.append(f"HTTP {resp.status_code}")
            except httpx.HTTPError as exc:
                errors.append(type(exc).__name__)
            n += 1
            await asyncio.sleep(max(0.0, period - (time.monotonic() - started)))


async def run_load(
    api: str, job_id: str, watchers: int, hz: float, duration: float, warmup: float
) -> tuple[list[float], list[str]]:
    lat: list[float] = []
    errors: list[str] = []
    count_from = time.monotonic() + warmup  # connection set-up of 50 clients is not steady state
    stop_at = count_from + duration
    await asyncio.gather(
        *(watcher(api, job_id, hz, count_from, stop_at, lat, errors) for _ in range(watchers))
    )
    return lat, errors


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--watchers", type=int, default=50)
    ap.add_argument("--hz", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of load before latencies count")
    ap.add_argument("--url", default=None, help="an already running server (default: start one)")
    args = ap.parse_args(argv)

    server = None
    if args.url:
        api = args.url.rstrip("/") + ("" if args.url.rstrip("/").endswith("/api/v1") else "/api/v1")
    else:
        from opd_nb.server import start

        server = start(port=0, data_dir=tempfile.mkdtemp(prefix="opd-bench-"))
        api = server.api_base
    try:
        job_id = submit_job(api)
        deadline = time.monotonic() + 120
        while httpx.get(f"{api}/fine-tunes/{job_id}", headers=H).json()["output"]["status"] == "PENDING":
            if time.monotonic() > deadline:
                raise SystemExit("the job did not start within 120 s")
            time.sleep(0.5)
        step0 = (
            httpx.get(f"{api}/fine-tunes/{job_id}", headers=H).json()["output"].get("progress") or {}
        ).get("step", 0)
        t0 = time.monotonic()
        lat, errors = asyncio.run(run_load(api, job_id, args.watchers, args.hz, args.duration, args.warmup))
        wall = time.monotonic() - t0 - args.warmup
        job = httpx.get(f"{api}/fine-tunes/{job_id}", headers=H).json()["output"]
        step1 = (job.get("progress") or {}).get("step", 0)
        httpx.post(f"{api}/fine-tunes/{job_id}/cancel", headers=H)
    finally:
        if server is not None:
            server.stop()
    target = args.watchers * args.hz * args.duration
    p50, p99 = pct(lat, 0.50) * 1000, pct(lat, 0.99) * 1000
    print(
        f"watchers={args.watchers} hz={args.hz} duration={args.duration:.0f}s after {args.warmup:.0f}s warm-up "
        f"(wall {wall:.1f}s)"
    )
    print(f"requests served: {len(lat)} (offered {target:.0f}; {len(lat) / wall:.0f} req/s)")
    print(f"errors: {len(errors)}" + (f" e.g. {sorted(set(errors))[:5]}" if errors else ""))
    print(
        f"latency ms: p50 {p50:.1f}  p90 {pct(lat, 0.90) * 1000:.1f}  p99 {p99:.1f}  max {max(lat) * 1000:.1f}"
        f"  mean {statistics.fmean(lat) * 1000:.1f}"
    )
    print(f"training during the run: job {job_id} {job['status']}, steps {step0} -> {step1}")
    ok = not errors and p99 < 100
    print(f"target (0 errors, p99 < 100 ms): {'MET' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
