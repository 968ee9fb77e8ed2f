"""One configuration of ``bench/engine_vs_trl.py``, run in its own process: train, time, evaluate.

Every trainer runs on-policy reverse KL (``beta=1``, temperature 1, no top-k) on the same pair,
data, batch, constant learning rate 1e-3, step count and seed. Per step it records the wall time,
the stages (``gen``, ``teacher``, ``update``; the engine's ``record`` too) and this process's CPU
seconds at the step's end (the same stamps ``bench/engine_ab.py`` reads); accuracy is the same greedy
exact match on the same held-out rows for every trainer.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_ab import cpu_ms_per_step, stamped_events  # noqa: E402

MAX_PROMPT = 27  # longest task prompt in tokens (system + user turn of 8 digits + generation prompt)
MAX_NEW = 16  # response budget for every trainer (the longest answer is 14 tokens incl. EOS)
TRL = {  # config name -> (trainer, gradient checkpointing, torch.compile)
    "dist_ckpt": ("DistillationTrainer", True, False),
    "dist": ("DistillationTrainer", False, False),
    "dist_compile": ("DistillationTrainer", False, True),
    "gkd_ckpt": ("GKDTrainer", True, False),
    "gkd": ("GKDTrainer", False, False),
}


def figures(wall: list[float], stages: dict[str, list[float]], cpu: list[tuple[int, float]], warmup: int):
    """Medians after `warmup` steps: wall and CPU ms per step, and each stage's ms."""
    med = lambda xs: statistics.median(xs[warmup:] or xs) * 1000  # noqa: E731
    return {
        "wall_ms": med(wall),
        "cpu_ms": statistics.median(cpu_ms_per_step(cpu, warmup) or [float("nan")]),
        "stages": {k: med(v) for k, v in stages.items()},
    }


def greedy_accuracy(model: Any, tok: Any, rows: list[dict], device: str = "cpu") -> float:
    """Greedy exact match (after the thinking block) on rows, in batches; counted only with EOS."""
    import torch

    from opd_nb.engine import task
    from opd_nb.engine.data import template_ids
    from opd_nb.engine.sampling import pad_prompts

    model.to(device).eval()
    ok = 0
    for s in range(0, len(rows), 256):
        part = rows[s : s + 256]
        prompts = [template_ids(tok, r["messages"], add_generation_prompt=True) for r in part]
        ids, att = pad_prompts(torch, prompts, tok.pad_token_id, "cpu")  # the engine's padding rule
        width = ids.shape[1]
        with torch.no_grad():
            out = model.generate(
                input_ids=ids.to(device), attention_mask=att.to(device), max_new_tokens=MAX_NEW,
                do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
            )  # fmt: skip
        for j, r in enumerate(part):
            comp = out[j, width:].tolist()
            if tok.eos_token_id in comp:
                text = tok.decode(comp[: comp.index(tok.eos_token_id)], skip_special_tokens=True)
                ok += task.is_correct(text, r["rollout_extra"]["solution"])
    return ok / len(rows)


def run_engine(spec: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The engine's gkd estimator for spec["steps"] steps; its figures and its trained student's dir."""
    from opd_nb.engine.api import EngineJob
    from opd_nb.engine.trainer import run

    work = Path(spec["work"])
    n_train = sum(1 for _ in open(spec["train"]))
    job = EngineJob(
        job_id="bench", student_path=spec["student"], teacher_path=spec["teacher"], train_file=spec["train"],
        validation_file=None, algorithm="gkd", output_dir=str(work), seed=spec["seed"],
        local_learning_rate=1e-3, device=spec["device"],
        hyper_parameters={
            "batch_size": spec["batch"], "n_rollouts": 1, "ppo_mini_batch_size": spec["batch"],
            "n_epochs": max(1, -(-spec["steps"] * spec["batch"] // n_train)), "lr_scheduler_type": "constant",
            "max_length": MAX_PROMPT + MAX_NEW, "eval_steps": 10**6, "save_strategy": "no",
        },
    )  # fmt: skip
    ev = stamped_events()
    run(job, ev, lambda: len(ev.rows) >= spec["steps"])
    rows = ev.rows
    stages = {k: [r[f"timing_s/{k}"] for r in rows] for k in ("gen", "teacher", "update", "record")}
    out = figures([r["timing_s/step"] for r in rows], stages, ev.cpu, spec["warmup"])
    out["tokens"] = statistics.mean(r["perf/tokens_per_s"] * r["timing_s/step"] for r in rows)
    out["forward"] = next((m for _, m in ev.logs if m.startswith("forward:")), "")
    return out, work / "final"


class StageClock:
    """Seconds spent inside wrapped callables, per stage, and CPU stamps, read per step by a callback."""

    def __init__(self) -> None:
        self.total = {"gen": 0.0, "teacher": 0.0}
        self.steps: list[dict[str, float]] = []
        self.cpu: list[tuple[int, float]] = []

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

    def callback(self) -> Any:
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
                clock.cpu.append((state.global_step, time.process_time()))

        return Timer()

    def figures(self, warmup: int) -> dict[str, Any]:
        stages = {k: [r[k] for r in self.steps] for k in ("gen", "teacher", "update")}
        return figures([r["step"] for r in self.steps], stages, self.cpu, warmup)


def trl_args(cls: Any, spec: dict[str, Any], ckpt: bool, compile_: bool, **extra: Any) -> Any:
    """The TrainingArguments every TRL trainer shares here; `ckpt`: gradient checkpointing (TRL's
    default: on); `compile_`: torch.compile, a setting a user could turn on."""
    return cls(
        output_dir=str(Path(spec["work"]) / "trl"), beta=1.0, temperature=1.0, learning_rate=1e-3,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        per_device_train_batch_size=spec["batch"], max_steps=spec["steps"], max_grad_norm=1.0,
        seed=spec["seed"], report_to=[], logging_steps=10**6, save_strategy="no",
        use_cpu=spec["device"] == "cpu", dataloader_num_workers=0, bf16=False, fp16=False,
        gradient_checkpointing=ckpt, torch_compile=compile_, **extra,
    )  # fmt: skip


def gkd_trainer(spec: dict[str, Any], rows: list[dict], ckpt: bool, compile_: bool, clock: StageClock) -> Any:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.experimental.gkd import GKDConfig, GKDTrainer

    from opd_nb.engine import task

    data = [
        {
            "messages": r["messages"]
            + [{"role": "assistant", "content": task.target_completion(r["messages"][-1]["content"])}]
        }
        for r in rows
    ]
    cfg = trl_args(
        GKDConfig, spec, ckpt, compile_, lmbda=1.0, max_new_tokens=MAX_NEW, max_length=MAX_PROMPT + MAX_NEW
    )
    trainer = GKDTrainer(
        model=AutoModelForCausalLM.from_pretrained(spec["student"]),
        teacher_model=AutoModelForCausalLM.from_pretrained(spec["teacher"]),
        args=cfg, train_dataset=Dataset.from_list(data),
        processing_class=AutoTokenizer.from_pretrained(spec["student"]), callbacks=[clock.callback()],
    )  # fmt: skip
    trainer.generation_config.top_k = 0
    trainer.generate_on_policy_outputs = clock.wrap("gen", trainer.generate_on_policy_outputs)
    trainer.teacher_model.forward = clock.wrap("teacher", trainer.teacher_model.forward)
    return trainer


def distillation_trainer(
    spec: dict[str, Any], rows: list[dict], ckpt: bool, compile_: bool, clock: StageClock
) -> Any:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DistillationConfig, DistillationTrainer

    tok = AutoTokenizer.from_pretrained(spec["student"])
    tok.padding_side = "left"
    cfg = trl_args(DistillationConfig, spec, ckpt, compile_, top_k=0, max_completion_length=MAX_NEW)
    trainer = DistillationTrainer(
        model=AutoModelForCausalLM.from_pretrained(spec["student"]),
        teacher_model=AutoModelForCausalLM.from_pretrained(spec["teacher"]),
        args=cfg, train_dataset=Dataset.from_list([{"prompt": r["messages"]} for r in rows]),
        processing_class=tok, callbacks=[clock.callback()],
    )  # fmt: skip
    teacher = trainer.teacher_model
    trainer._generate = clock.wrap("gen", trainer._generate)
    trainer._get_last_hidden_state = clock.wrap(
        "teacher", trainer._get_last_hidden_state, when=lambda m, *a, **k: m is teacher
    )
    return trainer


def run_trl(spec: dict[str, Any], rows: list[dict]) -> tuple[dict[str, Any], Any]:
    """One TRL configuration (TRL[spec["config"]]) for spec["steps"] steps; its figures and its model."""
    name, ckpt, compile_ = TRL[spec["config"]]
    clock = StageClock()
    make = distillation_trainer if name == "DistillationTrainer" else gkd_trainer
    trainer = make(spec, rows, ckpt, compile_, clock)
    trainer.train()
    return clock.figures(spec["warmup"]), trainer.model


def child_main(spec_file: str) -> int:
    """Run the configuration a spec file names and print its figures as one JSON line."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    spec = json.loads(Path(spec_file).read_text())
    hf_logging.set_verbosity_error()
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    read = lambda p: [json.loads(line) for line in open(p)]  # noqa: E731
    t0 = time.perf_counter()
    if spec["config"] == "engine":
        out, final = run_engine(spec)
        model = AutoModelForCausalLM.from_pretrained(final) if spec["accuracy"] else None
    else:
        out, model = run_trl(spec, read(spec["train"]))
    out["wall_s"] = time.perf_counter() - t0
    if spec["accuracy"]:
        tok = AutoTokenizer.from_pretrained(spec["student"])
        out["accuracy"] = greedy_accuracy(model, tok, read(spec["val"]), spec["device"])
    print(json.dumps(out))
    return 0
