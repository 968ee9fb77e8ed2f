"""Tensor operations and CPU time per decode step of the engine's sampler, on the bundled tiny student.

Why: at the tiny pair's width generation is bound by per-operation overhead, not FLOPs, so the
number of tensor operations one decode step dispatches is the load-independent figure to cut.
It runs :meth:`TorchSampler.decode` on 64 task prompts with the training picker (temperature 1,
seeded per-row draws) and an EOS id no token has, so every row decodes exactly N steps; the ops
per decode step are the difference between an N-step and a 1-step decode over N - 1 (prefill
cancels), counted by ``torch.profiler`` (nested operations included). The CPU ms per decode step
come the same way from unprofiled repeats (median), and the sampled tokens' checksum shows two
runs decoded the same tokens.
Usage: ``python bench/decode_ops.py [--steps 16] [--repeats 15] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def sampler_and_prompts(n: int) -> tuple[Any, list[list[int]]]:
    from opd_nb.engine import task
    from opd_nb.engine.data import template_ids
    from opd_nb.engine.lean import wrap
    from opd_nb.engine.models import default_pair, load_model, load_tokenizer
    from opd_nb.engine.sampling import TorchSampler

    path = default_pair()[0]
    tok = load_tokenizer(path)
    model = load_model(path, "student", "cpu").eval()
    sampler = TorchSampler(model, wrap(model), tok, [tok.eos_token_id], 256, "cpu")
    rows = task.make_rows(n, seed=1)
    return sampler, [template_ids(tok, r["messages"], add_generation_prompt=True) for r in rows]


def decode(sampler: Any, prompts: list[list[int]], steps: int) -> Any:
    """`steps` decode steps of every row: the training picker, one seeded stream per row, no EOS."""
    import torch

    from opd_nb.engine.sampling import inverse_cdf_pick, row_draws

    ids, att = sampler.pad(prompts)
    draws = row_draws(torch, list(range(len(prompts))), steps, "cpu")
    pick = inverse_cdf_pick(torch, 1.0, 1.0, False, None, draws, steps)
    return sampler.decode(ids, att, steps, pick, torch.tensor([-1]))


def count_ops(sampler: Any, prompts: list[list[int]], steps: int) -> tuple[int, dict[str, int]]:
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        decode(sampler, prompts, steps)
    per = {e.key: e.count for e in prof.key_averages()}
    return sum(per.values()), per


def cpu_ms(sampler: Any, prompts: list[list[int]], steps: int, repeats: int) -> float:
    times: list[float] = []
    for _ in range(repeats):
        t = time.process_time()
        decode(sampler, prompts, steps)
        times.append((time.process_time() - t) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    import os

    import torch

    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=12, help="list the most frequent ops per decode step")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    sampler, prompts = sampler_and_prompts(64)
    for _ in range(3):
        decode(sampler, prompts, args.steps)  # warm-up
    n, per_n = count_ops(sampler, prompts, args.steps)
    one, per_one = count_ops(sampler, prompts, 1)
    k = args.steps - 1
    full, first = (
        cpu_ms(sampler, prompts, args.steps, args.repeats),
        cpu_ms(sampler, prompts, 1, args.repeats),
    )
    out = decode(sampler, prompts, args.steps)
    top = sorted(((c - per_one.get(key, 0)) / k, key) for key, c in per_n.items())[::-1][: args.top]
    print(
        f"decode_ops: {(n - one) / k:.1f} ops/decode step, {(full - first) / k:.2f} CPU ms/decode step, "
        f"{full:.1f} CPU ms for {args.steps} steps ({first:.1f} prefill + 1 step) | tokens checksum "
        f"{int((out * torch.arange(1, out.shape[1] + 1)).sum())} | load {os.getloadavg()[0]:.2f}"
    )
    print("  per step: " + ", ".join(f"{key.removeprefix('aten::')} {c:.0f}" for c, key in top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
