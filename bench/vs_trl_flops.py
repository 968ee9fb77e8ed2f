"""The FLOP bound of ``bench/engine_vs_trl.py``: the matmul rate it is measured at, and wider students.

The bound per step is (2 N_s + 2 N_t + 6 N_s) x tokens (student sampling + teacher scoring + student
training) at the *model-shape* rate: every nn.Linear GEMM of one step at its real shape, timed alone
(best of 3), in a child process (resizing a trainer's thread pools mid-run was seen to slow the next
trainer ~20%), best over 1..threads threads (2 OpenMP threads on a busy 2-core box spin and collapse).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

STAGE_FLOPS = {"gen": ("student", 2), "teacher": ("teacher", 2), "update": ("student", 6)}


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def gemm_seconds(torch: Any, m: int, k: int, n: int, reps: int, tries: int, device: str = "cpu") -> float:
    """Best seconds per [m, k] x [k, n] product over `tries` timings of `reps` products (after a warm-up)."""
    a, b = torch.randn(m, k, device=device), torch.randn(k, n, device=device)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(tries):
        _sync(torch, device)
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        _sync(torch, device)
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def model_gemm_gflops(torch: Any, models: dict[str, Any], tokens: int, device: str, reps: int = 2) -> float:
    """FLOP-weighted matmul rate over the step's own nn.Linear GEMM shapes: the student's forward
    twice (sampling, training) and its two backward GEMMs, the teacher's forward once."""
    shapes: list[tuple[int, int, int, int]] = []  # (M, K, N, count per step)
    for role, model in models.items():
        for mod in model.modules():
            if isinstance(mod, torch.nn.Linear):
                out_f, in_f = mod.weight.shape
                if role == "student":
                    shapes += [(tokens, in_f, out_f, 2), (tokens, out_f, in_f, 1), (out_f, tokens, in_f, 1)]
                else:
                    shapes.append((tokens, in_f, out_f, 1))
    flops = secs = 0.0
    for m, k, n, count in shapes:
        flops += 2 * m * k * n * count
        secs += gemm_seconds(torch, m, k, n, reps, tries=3, device=device) * count
    return flops / secs / 1e9


def best_over_threads(torch: Any, fn: Any, threads: int) -> float:
    """max(fn()) over 1..threads threads: the rate the hardware can reach, not a contention artefact."""
    rates = []
    for n in range(1, threads + 1):
        torch.set_num_threads(n)
        rates.append(fn())
    torch.set_num_threads(threads)
    return max(rates)


def calibrate_main(jobs: list[dict[str, Any]], teacher: str, threads: int, device: str) -> int:
    """Print one JSON list: the model-shape rate (GFLOP/s) for each {"student", "tokens"} in `jobs`."""
    import torch
    from transformers import AutoModelForCausalLM

    teacher_model = AutoModelForCausalLM.from_pretrained(teacher)
    rates = []
    for job in jobs:
        models = {"student": AutoModelForCausalLM.from_pretrained(job["student"]), "teacher": teacher_model}
        fn = lambda m=models, t=round(job["tokens"]): model_gemm_gflops(torch, m, t, device)  # noqa: E731
        rates.append(best_over_threads(torch, fn, threads))
    print(json.dumps(rates))
    return 0


def flop_bound(n_s: int, n_t: int, tokens: float, rate_gflops: float) -> float:
    """Seconds per step at `rate_gflops` (see the module docstring)."""
    return (2 * n_s + 2 * n_t + 6 * n_s) * tokens / (rate_gflops * 1e9)


def stage_bounds(n_s: int, n_t: int, tokens: float, rate_gflops: float) -> dict[str, float]:
    """Each stage's share of the bound in seconds: gen 2 N_s, teacher 2 N_t, update 6 N_s per token."""
    params = {"student": n_s, "teacher": n_t}
    return {k: mult * params[who] * tokens / (rate_gflops * 1e9) for k, (who, mult) in STAGE_FLOPS.items()}


def wider_student(student: Path, mult: int, out: Path, seed: int) -> Path:
    """A random-initialised copy of the student's architecture, `mult` times as wide (same vocabulary)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if mult == 1:
        return student
    cfg = AutoConfig.from_pretrained(student)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    cfg.hidden_size *= mult
    cfg.intermediate_size *= mult
    cfg.head_dim = head_dim * mult
    torch.manual_seed(seed)
    path = out / f"student-x{mult}"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    AutoTokenizer.from_pretrained(student).save_pretrained(path)
    return path
