"""This engine's gkd estimator vs TRL's GKDTrainer(lmbda=1, beta=1), side by side in one run.

Same tiny student/teacher pair, same data, batch (64 prompts x 1 sample), learning rate (constant
1e-3, the engine's local rate for the tiny pair), steps and seed. Seconds per step are medians
after a warm-up; accuracy is the same greedy exact-match on the same held-out prompts for both.

The FLOP bound per step is (2 N_s + 2 N_t + 6 N_s) x tokens per step (student sampling + teacher
scoring + student training; tokens = real prompt + completion tokens, as if every token were
computed, although the engine runs the prompts' shared prefix once) at a measured matmul rate.
Two rates are measured right after the engine run, in a child process (see ``calibrate``), with
the same thread count:

* the headline ``flop_bound_ratio`` uses the *model-shape* rate: every nn.Linear GEMM of one step
  at its real shape (M = tokens per step; student forward twice, its two backward GEMMs, teacher
  forward), rate = their FLOPs / their summed best-of-3 time. It is what this machine's BLAS
  reaches on exactly the matrix products these models consist of, so the bound is the time the
  step's GEMMs alone need, with everything else (attention, norms, softmax, sampling) free;
  both rates are the best over 1..--threads threads (2 OpenMP threads on a busy 2-core box spin
  and collapse to a few GFLOP/s, which would inflate the bound);
* ``flop_bound_ratio_1024`` uses a square 1024^2 GEMM, a rate no layer of these tiny models can
  reach (hidden 64/128), printed as the stricter figure.

Last line: ``speedup_vs_trl=X accuracy_engine=Y accuracy_trl=Z flop_bound_ratio=W``.
TRL is a benchmark-only dependency (``pip install 'opd-nb[bench]'``).
Usage: ``python bench/engine_vs_trl.py [--steps 300] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WARMUP = 5
MAX_PROMPT = 27  # longest task prompt in tokens (system + user turn of 8 digits + generation prompt)
MAX_NEW = 16  # response budget for both trainers (the longest answer is 14 tokens incl. EOS)


def gemm_seconds(torch, m: int, k: int, n: int, reps: int, tries: int) -> float:
    """Best seconds per [m, k] x [k, n] product over `tries` timings of `reps` products (after a warm-up)."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(tries):
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def matmul_gflops(torch, n: int = 1024, reps: int = 10) -> float:
    """Rate of a square n x n GEMM (best of 5 timings)."""
    return 2 * n**3 / gemm_seconds(torch, n, n, n, reps, tries=5) / 1e9


def model_gemm_gflops(torch, models: dict, tokens: int, reps: int = 5) -> float:
    """FLOP-weighted matmul rate over the step's own nn.Linear GEMM shapes (see the module docstring)."""
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
        secs += gemm_seconds(torch, m, k, n, reps, tries=3) * count
    return flops / secs / 1e9


def calibrate(tokens: int, threads: int, student: Path, teacher: Path) -> tuple[float, float]:
    """(1024^2 rate, model-shape rate) in GFLOP/s, measured in a child process.

    Why a child: switching this process's thread count for the best-over-threads search was seen to
    leave the next trainer ~20% slower (OpenMP/MKL pools resized mid-run), which would tilt
    whichever trainer ran after it; a child process leaves both trainers untouched.
    """
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--calibrate-tokens",
            str(tokens),
            "--threads",
            str(threads),
            "--student",
            str(student),
            "--teacher",
            str(teacher),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rates = json.loads(out.stdout.strip().splitlines()[-1])
    return rates["square"], rates["shapes"]


def _calibrate_main(tokens: int, threads: int, student: str, teacher: str) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    models = {
        "student": AutoModelForCausalLM.from_pretrained(student),
        "teacher": AutoModelForCausalLM.from_pretrained(teacher),
    }
    square = best_over_threads(torch, lambda: matmul_gflops(torch), threads)
    shapes = best_over_threads(torch, lambda: model_gemm_gflops(torch, models, tokens), threads)
    print(json.dumps({"square": square, "shapes": shapes}))
    return 0


def best_over_threads(torch, fn, threads: int) -> float:
    """max(fn()) over 1..threads threads: the rate the hardware can reach, not a contention artefact."""
    rates = []
    for n in range(1, threads + 1):
        torch.set_num_threads(n)
        rates.append(fn())
    torch.set_num_threads(threads)
    return max(rates)


def greedy_accuracy(model, tok, rows: list[dict], device: str = "cpu") -> float:
    """Greedy exact match (after the thinking block) on rows, in batches; counted only with EOS."""
    import torch

    from opd_nb.engine import task
    from opd_nb.engine.data import template_ids

    model.eval()
    ok = 0
    for s in range(0, len(rows), 256):
        part = rows[s : s + 256]
        prompts = [template_ids(tok, r["messages"], add_generation_prompt=True) for r in part]
        P = max(map(len, prompts))
        ids = torch.full((len(part), P), tok.pad_token_id)
        att = torch.zeros((len(part), P), dtype=torch.long)
        for j, x in enumerate(prompts):
            ids[j, P - len(x) :] = torch.tensor(x)
            att[j, P - len(x) :] = 1
        with torch.no_grad():
            out = model.generate(
                input_ids=ids.to(device),
                attention_mask=att.to(device),
                max_new_tokens=MAX_NEW,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        for j, r in enumerate(part):
            comp = out[j, P:].tolist()
            if tok.eos_token_id not in comp:
                continue
            text = tok.decode(comp[: comp.index(tok.eos_token_id)], skip_special_tokens=True)
            ok += task.is_correct(text, r["rollout_extra"]["solution"])
    return ok / len(rows)


def run_engine(work: Path, train: str, val: str, steps: int, batch: int, seed: int, pair: tuple) -> dict:
    from opd_nb.engine.api import EngineJob
    from opd_nb.engine.trainer import ListEvents, run

    student, teacher = pair
    n_train = sum(1 for _ in open(train))
    epochs = max(1, -(-steps * batch // n_train))
    job = EngineJob(
        job_id="bench",
        student_path=str(student),
        teacher_path=str(teacher),
        train_file=train,
        validation_file=None,
        algorithm="gkd",
        output_dir=str(work / "engine"),
        seed=seed,
        local_learning_rate=1e-3,
        hyper_parameters={
            "batch_size": batch,
            "n_rollouts": 1,
            "ppo_mini_batch_size": batch,
            "n_epochs": epochs,
            "lr_scheduler_type": "constant",
            "max_length": MAX_PROMPT + MAX_NEW,
            "eval_steps": 10**6,
            "save_strategy": "no",
        },
    )
    ev = ListEvents()
    run(job, ev, lambda: len(ev.rows) >= steps)
    step_s = [r["timing_s/step"] for r in ev.rows][WARMUP:]
    tokens = [r["perf/tokens_per_s"] * r["timing_s/step"] for r in ev.rows]
    stages = {
        k: statistics.median(r[f"timing_s/{k}"] for r in ev.rows[WARMUP:])
        for k in ("gen", "teacher", "update")
    }
    return {
        "s_per_step": statistics.median(step_s),
        "tokens_per_step": statistics.mean(tokens),
        "final": str(work / "engine" / "final"),
        "steps": len(ev.rows),
        "stages": stages,
        "forward": next((m for _, m in ev.logs if m.startswith("forward:")), ""),
    }


def run_trl(work: Path, train_rows: list[dict], steps: int, batch: int, seed: int, pair: tuple) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl.experimental.gkd import GKDConfig, GKDTrainer

    from opd_nb.engine import task

    student, teacher = pair
    tok = AutoTokenizer.from_pretrained(student)
    rows = [
        {
            "messages": r["messages"]
            + [{"role": "assistant", "content": task.target_completion(r["messages"][-1]["content"])}]
        }
        for r in train_rows
    ]
    ds = Dataset.from_list(rows)
    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001, ANN003
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001, ANN003
            times.append(time.perf_counter() - self.t)

    cfg = GKDConfig(
        output_dir=str(work / "trl"),
        lmbda=1.0,
        beta=1.0,
        temperature=1.0,
        max_new_tokens=MAX_NEW,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        per_device_train_batch_size=batch,
        max_steps=steps,
        max_grad_norm=1.0,
        seed=seed,
        report_to=[],
        logging_steps=50,
        save_strategy="no",
        use_cpu=True,
        max_length=MAX_PROMPT + MAX_NEW,
        dataloader_num_workers=0,
        bf16=False,
        fp16=False,
    )
    trainer = GKDTrainer(
        model=AutoModelForCausalLM.from_pretrained(student),
        teacher_model=AutoModelForCausalLM.from_pretrained(teacher),
        args=cfg,
        train_dataset=ds,
        processing_class=tok,
        callbacks=[Timer()],
    )
    trainer.generation_config.top_k = 0
    trainer.train()
    model = trainer.model
    model.to("cpu")
    torch.set_grad_enabled(True)
    return {"s_per_step": statistics.median(times[WARMUP:]), "model": model, "tok": tok, "steps": len(times)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--val", type=int, default=256)
    ap.add_argument("--student", default=None, help="student model dir (default: the bundled tiny student)")
    ap.add_argument("--teacher", default=None, help="teacher model dir (default: the bundled tiny teacher)")
    ap.add_argument("--calibrate-tokens", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.calibrate_tokens is not None:
        return _calibrate_main(args.calibrate_tokens, args.threads, args.student, args.teacher)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from opd_nb.engine import task
    from opd_nb.engine.models import default_pair, n_params

    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    val_rows = task.make_rows(args.val, seed=10_001)
    held = {r["messages"][-1]["content"] for r in val_rows}
    train_rows = task.make_rows(args.steps * args.batch // 4 + args.batch, seed=1, exclude=held)
    student, teacher = default_pair()
    student, teacher = Path(args.student or student), Path(args.teacher or teacher)
    pair = (student, teacher)
    tok = AutoTokenizer.from_pretrained(student)
    n_s = n_params(AutoModelForCausalLM.from_pretrained(student))
    n_t = n_params(AutoModelForCausalLM.from_pretrained(teacher))
    acc0 = greedy_accuracy(AutoModelForCausalLM.from_pretrained(student), tok, val_rows)
    print(
        f"student {n_s:,} params, teacher {n_t:,} params; student accuracy before training {acc0:.3f}",
        flush=True,
    )

    with tempfile.TemporaryDirectory(prefix="opd-bench-") as tmp:
        work = Path(tmp)
        train = work / "train.jsonl"
        train.write_text("\n".join(json.dumps(r) for r in train_rows) + "\n")
        val = work / "validation.jsonl"
        val.write_text("\n".join(json.dumps(r) for r in val_rows) + "\n")
        t0 = time.perf_counter()
        eng = run_engine(work, str(train), str(val), args.steps, args.batch, args.seed, pair)
        acc_e = greedy_accuracy(AutoModelForCausalLM.from_pretrained(eng["final"]), tok, val_rows)
        gflops, shape_gflops = calibrate(round(eng["tokens_per_step"]), args.threads, student, teacher)
        print(
            f"engine: {eng['steps']} steps, {eng['s_per_step'] * 1000:.1f} ms/step (median after {WARMUP}; "
            + ", ".join(f"{k} {v * 1000:.1f}" for k, v in eng["stages"].items())
            + f"), accuracy {acc_e:.3f}, wall {time.perf_counter() - t0:.1f}s; {eng['forward']}",
            flush=True,
        )
        t0 = time.perf_counter()
        trl = run_trl(work, train_rows, args.steps, args.batch, args.seed, pair)
        acc_t = greedy_accuracy(trl["model"], trl["tok"], val_rows)
        print(
            f"trl GKDTrainer: {trl['steps']} steps, {trl['s_per_step'] * 1000:.1f} ms/step, accuracy {acc_t:.3f}, "
            f"wall {time.perf_counter() - t0:.1f}s",
            flush=True,
        )

    flops = (2 * n_s + 2 * n_t + 6 * n_s) * eng["tokens_per_step"]
    bound = flops / (shape_gflops * 1e9)
    bound_1024 = flops / (gflops * 1e9)
    print(
        f"FLOP bound: {flops / 1e9:.2f} GFLOP/step ({eng['tokens_per_step']:.0f} tokens) -> {bound * 1000:.1f} ms/step "
        f"at the model-shape rate {shape_gflops:.1f} GFLOP/s (headline), {bound_1024 * 1000:.1f} ms/step at the "
        f"1024^2 rate {gflops:.1f} GFLOP/s (flop_bound_ratio_1024={eng['s_per_step'] / bound_1024:.2f})"
    )
    speedup = trl["s_per_step"] / eng["s_per_step"]
    print(
        f"speedup_vs_trl={speedup:.2f} accuracy_engine={acc_e:.3f} accuracy_trl={acc_t:.3f} "
        f"flop_bound_ratio={eng['s_per_step'] / bound:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
