"""What the engine spends per reward call: httpx's async client (the old path) vs ``RewardCaller``.

Both score the same samples against one SDK function server serving the reward template's processor
(``opd new reward``), 64 calls a round with ``concurrency`` 20, as the demo's steps do. Rounds of the
two alternate, so that a shared machine's drifting load tilts both alike. Measured per call: wall
time, and the CPU time of this process (the engine's side: in a job it shares the process and the
GIL with the trainer). The function server's own CPU is the same for both and not counted.

Last line: ``client_cpu_ratio=X wall_ratio=Y`` (httpx over RewardCaller; above 1 is the gain).
Usage: ``python bench/function_calls.py [--rounds 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CALLS = 64
CONCURRENCY = 20


def _samples():
    from opd_nb.engine.rewards import Sample

    messages = [{"role": "user", "content": "Sort 3 1 2"}, {"role": "assistant", "content": "123"}]
    return [
        Sample(messages, {"solution": "123"}, group=i // 4, sample_id=f"s{i}", rollout_id=str(i % 4))
        for i in range(CALLS)
    ]


def _httpx_round(runner: asyncio.Runner, client: httpx.AsyncClient, url: str, payloads: list[dict]) -> None:
    async def go() -> None:
        sem = asyncio.Semaphore(CONCURRENCY)

        async def one(p: dict) -> None:
            async with sem:
                resp = await client.post(f"{url}/api/v1", json=p, timeout=30)
                assert resp.status_code == 200, resp.text
                resp.json()

        await asyncio.gather(*(one(p) for p in payloads))

    runner.run(go())


def _measure(fn) -> tuple[float, float]:
    me = psutil.Process()
    cpu0, t0 = sum(me.cpu_times()[:2]), time.perf_counter()
    fn()
    return (time.perf_counter() - t0) / CALLS * 1e3, (sum(me.cpu_times()[:2]) - cpu0) / CALLS * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()

    from opd_nb.engine.api import RewardEndpoint
    from opd_nb.engine.rewards import RewardCaller, _payloads
    from opd_nb.functions.server import FunctionServer
    from opd_nb.workspace.new import create

    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(create("reward", Path(tmp) / "ws", name="bench").path)
        samples = _samples()
        with FunctionServer.start(ws, "reward", "functions/reward/reward.py:RewardProcessor") as fs:
            ep = RewardEndpoint(name="reward", url=fs.url, concurrency=CONCURRENCY)
            payloads = _payloads(ep, samples, "bench")
            caller, runner = RewardCaller(), asyncio.Runner()
            client = httpx.AsyncClient(trust_env=False, limits=httpx.Limits(max_connections=None))
            rounds = {
                "httpx async": lambda: _httpx_round(runner, client, fs.url, payloads),
                "RewardCaller": lambda: caller.submit([ep], samples, "bench", where="bench").result(),
            }
            for fn in rounds.values():  # warm: connections open, code paths imported
                fn()
            seen: dict[str, list[tuple[float, float]]] = {name: [] for name in rounds}
            for _ in range(args.rounds):
                for name, fn in rounds.items():
                    seen[name].append(_measure(fn))
            caller.close()
            runner.run(client.aclose())
            runner.close()
    medians = {name: tuple(statistics.median(x[i] for x in v) for i in (0, 1)) for name, v in seen.items()}
    for name, (wall, cpu) in medians.items():
        print(f"{name:>13}: {wall:.2f} ms/call wall, {cpu:.2f} ms/call client CPU (median of {args.rounds})")
    (h_wall, h_cpu), (r_wall, r_cpu) = medians["httpx async"], medians["RewardCaller"]
    print(f"client_cpu_ratio={h_cpu / r_cpu:.2f} wall_ratio={h_wall / r_wall:.2f}")


if __name__ == "__main__":
    main()
