"""This engine's gkd estimator vs TRL's DistillationTrainer and GKDTrainer, side by side in one run.

All three run on-policy reverse KL (``beta=1``: TRL's ``DistillationTrainer(beta=1)`` and
``GKDTrainer(lmbda=1, beta=1)``, sampling at temperature 1 with no top-k) on the same tiny
student/teacher pair, data, batch (64 prompts x 1 sample), learning rate (constant 1e-3, the
engine's local rate for the tiny pair), steps and seed. Each TRL trainer runs twice: as it comes
(gradient checkpointing on, its default: the headline) and with it off, which at this size only
costs time (GKDTrainer then even generates without a KV cache), printed on the line before.
Seconds per step are medians after a warm-up; accuracy is the same greedy exact-match on the same
held-out prompts for every trainer. The engine runs 3 times, interleaved with the TRL runs (these
machines swing ~25% and more between processes and over minutes), and its median is the
headline; all three are printed.

Stage times per step (medians): ``gen`` (sampling), ``teacher`` (teacher scoring), ``update``
(student forward, backward, optimizer) and ``record`` (the engine's rollout recording; TRL has
none). For TRL, gen and teacher are timed around its own generate and teacher-forward calls and
update is the rest of the step.

The FLOP bound per step is (2 N_s + 2 N_t + 6 N_s) x tokens per step (student sampling + teacher
scoring + student training; tokens = real prompt + completion tokens, as if every token were
computed, although the engine runs the prompts' shared prefix once) at a measured matmul rate.
Two rates are measured in a child process (see ``calibrate``), with the same thread count:

* the headline ``flop_bound_ratio`` uses the *model-shape* rate: every nn.Linear GEMM of one step
  at its real shape (M = tokens per step; student forward twice, its two backward GEMMs, teacher
  forward), rate = their FLOPs / their summed best-of-3 time. It is what this machine's BLAS
  reaches on exactly the matrix products these models consist of, so the bound is the time the
  step's GEMMs alone need, with everything else (attention, norms, softmax, sampling) free;
  both rates are the best over 1..--threads threads (2 OpenMP threads on a busy 2-core box spin
  and collapse to a few GFLOP/s, which would inflate the bound);
* ``flop_bound_ratio_1024`` uses a square 1024^2 GEMM, a rate no layer of these tiny models can
  reach (hidden 64/128), printed as the stricter figure.

The scaling table runs the engine alone for ``--scaling-steps`` steps per row: student width 1x,
2x and 4x (hidden size, MLP width and head size scaled; the wider students are random-initialised
copies of the tiny student's config) at batch 64, and batch 16 and 256 at width 1x, each row with
its own FLOP bound at its own token count. Cost that grows like the bound is FLOP-bound; a ratio
that falls as the work grows is per-operation overhead.

Last line: ``speedup_vs_trl=X speedup_vs_trl_distillation=Y accuracy_engine=A accuracy_trl=B
accuracy_trl_distillation=C flop_bound_ratio=W`` (TRL as it comes); the line before it gives the same
figures against TRL without gradient checkpointing.
TRL is a benchmark-only dependency (``pip install 'opd-nb[bench]'``).
Usage: ``python bench/engine_vs_trl.py [--steps 300] [--threads 2] [--device cuda] [--scaling-steps 0]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WARMUP = 5
ENGINE_RUNS = 3
MAX_PROMPT = 27  # longest task prompt in tokens (system + user turn of 8 digits + generation prompt)
MAX_NEW = 16  # response budget for every trainer (the longest answer is 14 tokens incl. EOS)
STAGES = ("gen", "teacher", "update", "record")
WIDTHS = (1, 2, 4)
BATCHES = (16, 64, 256)


# ---- the matmul rate the FLOP bound uses ------------------------------------------------------------


def _sync(torch, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def gemm_seconds(torch, m: int, k: int, n: int, reps: int, tries: int, device: str = "cpu") -> float:
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


def matmul_gflops(torch, device: str, n: int = 1024, reps: int = 10) -> float:
    """Rate of a square n x n GEMM (best of 5 timings)."""
    return 2 * n**3 / gemm_seconds(torch, n, n, n, reps, tries=5, device=device) / 1e9


def model_gemm_gflops(torch, models: dict, tokens: int, device: str, reps: int = 5) -> float:
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
        secs += gemm_seconds(torch, m, k, n, reps, tries=3, device=device) * count
    return flops / secs / 1e9


def calibrate(tokens: int, args: argparse.Namespace, student: Path, teacher: Path) -> tuple[float, float]:
    """(1024^2 rate, model-shape rate) in GFLOP/s, measured in a child process.

    Why a child: switching this process's thread count for the best-over-threads search was seen to
    leave the next trainer ~20% slower (OpenMP/MKL pools resized mid-run), which would tilt
    whichever trainer ran after it; a child process leaves every trainer untouched.
    """
    cmd = [sys.executable, __file__, "--calibrate-tokens", str(tokens), "--threads", str(args.threads)]
    cmd += ["--student", str(student), "--teacher", str(teacher), "--device", args.device]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    rates = json.loads(out.stdout.strip().splitlines()[-1])
    return rates["square"], rates["shapes"]


def _calibrate_main(tokens: int, threads: int, student: str, teacher: str, device: str) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    models = {
        "student": AutoModelForCausalLM.from_pretrained(student),
        "teacher": AutoModelForCausalLM.from_pretrained(teacher),
    }
    square = best_over_threads(torch, lambda: matmul_gflops(torch, device), threads)
    shapes = best_over_threads(torch, lambda: model_gemm_gflops(torch, models, tokens, device), threads)
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


# ---- accuracy ---------------------------------------------------------------------------------------


def greedy_accuracy(model, tok, rows: list[dict], device: str = "cpu") -> float:
    """Greedy exact match (after the thinking block) on rows, in batches; counted only with EOS."""
    import torch

    from opd_nb.engine import task
    from opd_nb.engine.data import template_ids

    model.to(device).eval()
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


# ---- the engine -------------------------------------------------------------------------------------


def run_engine(work: Path, train: str, steps: int, batch: int, seed: int, pair: tuple, device: str) -> dict:
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
        output_dir=str(work),
        seed=seed,
        local_learning_rate=1e-3,
        device=device,
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
    t0 = time.perf_counter()
    run(job, ev, lambda: len(ev.rows) >= steps)
    timed = ev.rows[WARMUP:] or ev.rows
    return {
        "s_per_step": statistics.median(r["timing_s/step"] for r in timed),
        "tokens_per_step": statistics.mean(r["perf/tokens_per_s"] * r["timing_s/step"] for r in ev.rows),
        "final": str(work / "final"),
        "steps": len(ev.rows),
        "stages": {k: statistics.median(r[f"timing_s/{k}"] for r in timed) for k in STAGES},
        "forward": next((m for _, m in ev.logs if m.startswith("forward:")), ""),
        "wall": time.perf_counter() - t0,
    }


# ---- TRL --------------------------------------------------------------------------------------------


class StageClock:
    """Seconds spent inside wrapped callables, per stage, read per training step by a callback."""

    def __init__(self) -> None:
        self.total = {"gen": 0.0, "teacher": 0.0}
        self.steps: list[dict[str, float]] = []

    def wrap(self, stage: str, fn: Callable, when: Callable[..., bool] = lambda *a, **k: True) -> Callable:
        def timed(*a, **kw):  # noqa: ANN002, ANN003
            if not when(*a, **kw):
                return fn(*a, **kw)
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.total[stage] += time.perf_counter() - t

        return timed

    def callback(self):
        from transformers import TrainerCallback

        clock = self

        class Timer(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001, ANN003
                self.t, self.at = time.perf_counter(), dict(clock.total)

            def on_step_end(self, args, state, control, **kw):  # noqa: ANN001, ANN003
                row = {k: clock.total[k] - self.at[k] for k in clock.total}
                row["step"] = time.perf_counter() - self.t
                row["update"] = row["step"] - row["gen"] - row["teacher"]
                clock.steps.append(row)

        return Timer()

    def summary(self) -> dict:
        timed = self.steps[WARMUP:] or self.steps
        med = {k: statistics.median(r[k] for r in timed) for k in ("step", "gen", "teacher", "update")}
        return {"s_per_step": med.pop("step"), "stages": med, "steps": len(self.steps)}


def trl_args(cls, work: Path, name: str, steps: int, batch: int, seed: int, device: str, ckpt: bool, **extra):
    """The TrainingArguments every TRL trainer shares here (see the module docstring); `ckpt`:
    gradient checkpointing, TRL's default (on) or off."""
    return cls(
        output_dir=str(work / name),
        beta=1.0,
        temperature=1.0,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        per_device_train_batch_size=batch,
        max_steps=steps,
        max_grad_norm=1.0,
        seed=seed,
        report_to=[],
        logging_steps=10**6,
        save_strategy="no",
        use_cpu=device == "cpu",
        dataloader_num_workers=0,
        bf16=False,
        fp16=False,
        gradient_checkpointing=ckpt,
        **extra,
    )


def run_trl_gkd(
    work: Path, train_rows: list[dict], steps: int, batch: int, seed: int, pair, device, ckpt
) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
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
    cfg = trl_args(
        GKDConfig,
        work,
        f"gkd-{ckpt}",
        steps,
        batch,
        seed,
        device,
        ckpt,
        lmbda=1.0,
        max_new_tokens=MAX_NEW,
        max_length=MAX_PROMPT + MAX_NEW,
    )
    clock = StageClock()
    trainer = GKDTrainer(
        model=AutoModelForCausalLM.from_pretrained(student),
        teacher_model=AutoModelForCausalLM.from_pretrained(teacher),
        args=cfg,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[clock.callback()],
    )
    trainer.generation_config.top_k = 0
    trainer.generate_on_policy_outputs = clock.wrap("gen", trainer.generate_on_policy_outputs)
    trainer.teacher_model.forward = clock.wrap("teacher", trainer.teacher_model.forward)
    trainer.train()
    return {**clock.summary(), "model": trainer.model, "tok": tok}


def run_trl_distillation(
    work: Path, train_rows, steps: int, batch: int, seed: int, pair, device, ckpt
) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DistillationConfig, DistillationTrainer

    student, teacher = pair
    tok = AutoTokenizer.from_pretrained(student)
    tok.padding_side = "left"
    cfg = trl_args(
        DistillationConfig,
        work,
        f"distillation-{ckpt}",
        steps,
        batch,
        seed,
        device,
        ckpt,
        top_k=0,
        max_completion_length=MAX_NEW,
    )
    clock = StageClock()
    trainer = DistillationTrainer(
        model=AutoModelForCausalLM.from_pretrained(student),
        teacher_model=AutoModelForCausalLM.from_pretrained(teacher),
        args=cfg,
        train_dataset=Dataset.from_list([{"prompt": r["messages"]} for r in train_rows]),
        processing_class=tok,
        callbacks=[clock.callback()],
    )
    teacher_model = trainer.teacher_model
    trainer._generate = clock.wrap("gen", trainer._generate)
    trainer._get_last_hidden_state = clock.wrap(
        "teacher", trainer._get_last_hidden_state, when=lambda m, *a, **k: m is teacher_model
    )
    trainer.train()
    return {**clock.summary(), "model": trainer.model, "tok": tok}


# ---- report -----------------------------------------------------------------------------------------


def fmt_stages(stages: dict) -> str:
    return ", ".join(f"{k} {v * 1000:.1f}" for k, v in stages.items())


def flop_bound(n_s: int, n_t: int, tokens: float, rate_gflops: float) -> tuple[float, float]:
    """(FLOPs per step, seconds per step at `rate_gflops`): see the module docstring."""
    flops = (2 * n_s + 2 * n_t + 6 * n_s) * tokens
    return flops, flops / (rate_gflops * 1e9)


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


def scaling_table(work: Path, train: str, args: argparse.Namespace, pair: tuple) -> None:
    """Step time against student width and batch, each row beside its own FLOP bound."""
    from transformers import AutoModelForCausalLM

    from opd_nb.engine.models import n_params

    student, teacher = pair
    n_t = n_params(AutoModelForCausalLM.from_pretrained(teacher))
    rows = [(w, 64) for w in WIDTHS] + [(1, b) for b in BATCHES if b != 64]
    print(f"scaling ({args.scaling_steps} steps per row, median after {WARMUP}):", flush=True)
    print(
        f"{'width':>5} {'batch':>5} {'tokens':>7} {'ms/step':>8} {'bound ms':>8} {'ratio':>6}   stages (ms)"
    )
    for w, b in rows:
        s = wider_student(student, w, work, args.seed)
        n_s = n_params(AutoModelForCausalLM.from_pretrained(s))
        eng = run_engine(
            work / f"scale-{w}-{b}", train, args.scaling_steps, b, args.seed, (s, teacher), args.device
        )
        _, shape_rate = calibrate(round(eng["tokens_per_step"]), args, s, teacher)
        _, bound = flop_bound(n_s, n_t, eng["tokens_per_step"], shape_rate)
        print(
            f"{w:>4}x {b:>5} {eng['tokens_per_step']:>7.0f} {eng['s_per_step'] * 1000:>8.1f} {bound * 1000:>8.1f} "
            f"{eng['s_per_step'] / bound:>6.2f}   {fmt_stages(eng['stages'])}",
            flush=True,
        )


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--val", type=int, default=256)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (every trainer runs there)")
    ap.add_argument("--scaling-steps", type=int, default=25, help="steps per scaling-table row (0: no table)")
    ap.add_argument("--student", default=None, help="student model dir (default: the bundled tiny student)")
    ap.add_argument("--teacher", default=None, help="teacher model dir (default: the bundled tiny teacher)")
    ap.add_argument("--calibrate-tokens", type=int, default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.calibrate_tokens is not None:
        return _calibrate_main(args.calibrate_tokens, args.threads, args.student, args.teacher, args.device)

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
    pair = (Path(args.student or student), Path(args.teacher or teacher))
    tok = AutoTokenizer.from_pretrained(pair[0])
    n_s = n_params(AutoModelForCausalLM.from_pretrained(pair[0]))
    n_t = n_params(AutoModelForCausalLM.from_pretrained(pair[1]))
    acc0 = greedy_accuracy(AutoModelForCausalLM.from_pretrained(pair[0]), tok, val_rows, args.device)
    print(
        f"student {n_s:,} params, teacher {n_t:,} params; student accuracy before training {acc0:.3f}",
        flush=True,
    )

    with tempfile.TemporaryDirectory(prefix="opd-bench-") as tmp:
        work = Path(tmp)
        train = work / "train.jsonl"
        train.write_text("\n".join(json.dumps(r) for r in train_rows) + "\n")
        engines, trl = [], {}
        for what in SCHEDULE:
            if what == "engine":
                engines.append(measure_engine(work, str(train), args, pair, tok, val_rows, len(engines)))
            else:
                trl[what] = measure_trl(work, train_rows, args, pair, val_rows, *what)
        tokens = statistics.mean(e["tokens_per_step"] for e in engines)
        gflops, shape_gflops = calibrate(round(tokens), args, *pair)
        if args.scaling_steps:
            scaling_table(work, str(train), args, pair)
    report(engines, trl, n_s, n_t, tokens, gflops, shape_gflops)
    return 0


# Engine runs interleaved with TRL's, so that a slow or fast spell of the machine touches both sides.
SCHEDULE = [
    "engine",
    ("DistillationTrainer", True),
    ("GKDTrainer", True),
    "engine",
    ("DistillationTrainer", False),
    ("GKDTrainer", False),
    "engine",
]


def measure_engine(work: Path, train: str, args, pair, tok, val_rows, i: int) -> dict:
    from transformers import AutoModelForCausalLM

    eng = run_engine(work / f"engine-{i}", train, args.steps, args.batch, args.seed, pair, args.device)
    eng["accuracy"] = greedy_accuracy(
        AutoModelForCausalLM.from_pretrained(eng["final"]), tok, val_rows, args.device
    )
    print(
        f"engine run {i + 1}/{ENGINE_RUNS}: {eng['steps']} steps, {eng['s_per_step'] * 1000:.1f} ms/step "
        f"(median after {WARMUP}; {fmt_stages(eng['stages'])}), accuracy {eng['accuracy']:.3f}, "
        f"wall {eng['wall']:.1f}s; {eng['forward']}",
        flush=True,
    )
    return eng


def measure_trl(work: Path, train_rows, args, pair, val_rows, name: str, ckpt: bool) -> dict:
    fn = run_trl_distillation if name == "DistillationTrainer" else run_trl_gkd
    t0 = time.perf_counter()
    r = fn(work, train_rows, args.steps, args.batch, args.seed, pair, args.device, ckpt)
    r["accuracy"] = greedy_accuracy(r.pop("model"), r["tok"], val_rows, args.device)
    print(
        f"trl {name} (gradient checkpointing {'on, its default' if ckpt else 'off'}): {r['steps']} steps, "
        f"{r['s_per_step'] * 1000:.1f} ms/step ({fmt_stages(r['stages'])}), accuracy {r['accuracy']:.3f}, "
        f"wall {time.perf_counter() - t0:.1f}s",
        flush=True,
    )
    return r


def report(
    engines: list[dict], trl: dict, n_s: int, n_t: int, tokens: float, gflops: float, shape_gflops: float
):
    """The FLOP-bound line, TRL without gradient checkpointing, then the headline (TRL as it comes)."""
    eng_s = statistics.median(e["s_per_step"] for e in engines)
    acc_e = statistics.median(e["accuracy"] for e in engines)
    runs = ", ".join(f"{e['s_per_step'] * 1000:.1f}" for e in engines)
    flops, bound = flop_bound(n_s, n_t, tokens, shape_gflops)
    _, bound_1024 = flop_bound(n_s, n_t, tokens, gflops)
    print(
        f"FLOP bound: {flops / 1e9:.2f} GFLOP/step ({tokens:.0f} tokens) -> {bound * 1000:.1f} ms/step "
        f"at the model-shape rate {shape_gflops:.1f} GFLOP/s (headline), {bound_1024 * 1000:.1f} ms/step at the "
        f"1024^2 rate {gflops:.1f} GFLOP/s (flop_bound_ratio_1024={eng_s / bound_1024:.2f}); engine median "
        f"{eng_s * 1000:.1f} ms/step of {runs}"
    )

    def line(ckpt: bool) -> str:
        gkd, dist = trl[("GKDTrainer", ckpt)], trl[("DistillationTrainer", ckpt)]
        return (
            f"speedup_vs_trl={gkd['s_per_step'] / eng_s:.2f} speedup_vs_trl_distillation="
            f"{dist['s_per_step'] / eng_s:.2f} accuracy_engine={acc_e:.3f} accuracy_trl={gkd['accuracy']:.3f} "
            f"accuracy_trl_distillation={dist['accuracy']:.3f}"
        )

    print(f"TRL without gradient checkpointing: {line(False)}")
    print(f"{line(True)} flop_bound_ratio={eng_s / bound:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
