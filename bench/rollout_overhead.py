"""What rollout recording costs: the engine with recording on vs off, side by side in one run.

Same tiny pair, data, seed and configuration as ``bench/engine_vs_trl.py`` (64 prompts x 1 sample,
gkd by default), plus a validation set evaluated every ``--eval-steps`` steps (odd, so that
evaluations alternate too). Within one run, recording is switched on for every other step, so
that the load of a shared machine, which drifts over seconds, tilts both halves alike; a step's
time is the wall time between two consecutive metric rows (everything the loop does, including
the background writer's competition for the cores). Each recorded step is compared with the mean
of its two unrecorded neighbours of the same kind (train or evaluation step), and the overhead is
the median of those paired ratios after a warm-up: robust to the load drifting under a run. The
CPU the recording spends (its share of the training loop plus the writer thread's CPU time, per
recorded train step) is printed too, as a noise-free upper bound. A second run records nothing:
recording must not change training, so its loss series must equal the alternating run's.

Last line: ``rollout_recording_overhead=X% eval_recording_overhead=Y% identical_training=True``.
Usage: ``python bench/rollout_overhead.py [--steps 200] [--algorithm gkd|pg_opd]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WARMUP = 5
MAX_PROMPT = 27  # as in bench/engine_vs_trl.py
MAX_NEW = 16


class Alternating:
    """Stands in for the run's recorder: enabled on every other step (the phase flips after each metric row)."""

    def __init__(self, inner: object):
        self.inner = inner
        self.on = True

    @property
    def enabled(self) -> bool:
        return self.on

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def run_once(work: Path, name: str, train: str, val: str, args: argparse.Namespace, alternate: bool) -> dict:
    """One engine run; `alternate`: recording on for odd steps (incl. their evaluation), off for even ones."""
    from opd_nb.engine import rollouts
    from opd_nb.engine.api import EngineJob
    from opd_nb.engine.models import default_pair
    from opd_nb.engine.trainer import ListEvents, Trainer

    os.environ[rollouts.PER_STEP_ENV] = str(args.per_step if alternate else 0)
    student, teacher = default_pair()
    n_train = sum(1 for _ in open(train))
    job = EngineJob(
        job_id=f"bench-{name}",
        student_path=str(student),
        teacher_path=str(teacher),
        train_file=train,
        validation_file=val,
        algorithm=args.algorithm,
        output_dir=str(work / name),
        seed=args.seed,
        local_learning_rate=1e-3,
        hyper_parameters={
            "batch_size": args.batch,
            "n_rollouts": 1,
            "ppo_mini_batch_size": args.batch,
            "n_epochs": max(1, -(-args.steps * args.batch // n_train)),
            "lr_scheduler_type": "constant",
            "max_length": MAX_PROMPT + MAX_NEW,
            "eval_steps": args.eval_steps,
            "save_strategy": "no",
        },
    )
    phase: list[bool] = []
    stamps: list[float] = []

    class Stamped(ListEvents):
        def metrics(self, row: dict) -> None:
            stamps.append(time.perf_counter())
            phase.append(rec.on if alternate else False)
            if alternate and row["step"] > 0:
                rec.on = not rec.on
            super().metrics(row)

    ev = Stamped()
    r = Trainer(job, ev, lambda: sum(1 for x in ev.rows if x["step"] > 0) >= args.steps)
    rec = Alternating(r.recorder)
    if alternate:
        r.recorder = rec
    r.run()
    rows = ev.rows
    out = {
        "loss": [x.get("actor/distillation/loss") for x in rows],
        "files": len(rollouts.recorded_steps(job.output_dir)),
        "steps": sum(1 for x in rows if x["step"] > 0),
    }
    if not alternate:
        return out
    steps = [
        (phase[k], "validation/accuracy" in rows[k], stamps[k] - stamps[k - 1]) for k in range(1, len(rows))
    ]
    steps = steps[WARMUP:]
    for is_eval, name in ((False, "train"), (True, "eval")):
        seq = [(on, dt) for on, ev_, dt in steps if ev_ == is_eval]
        paired = [
            dt / ((seq[j - 1][1] + seq[j + 1][1]) / 2)
            for j, (on, dt) in enumerate(seq[1:-1], start=1)
            if on and not seq[j - 1][0] and not seq[j + 1][0]
        ]
        out[f"{name}_ratio"] = statistics.median(paired)
        out[f"{name}_on"] = statistics.median(dt for on, dt in seq if on)
        out[f"{name}_off"] = statistics.median(dt for on, dt in seq if not on)
    n_train_rec = sum(1 for x in rows if x.get("timing_s/record"))
    out["record_s"] = statistics.median(x["timing_s/record"] for x in rows if x.get("timing_s/record"))
    out["writer_cpu_s"] = rec.inner.cpu_s.get("train", 0.0) / max(1, n_train_rec)
    out["val_record_s"] = statistics.median(
        x["timing_s/validation_record"] for x in rows if "timing_s/validation_record" in x
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--val", type=int, default=256)
    ap.add_argument("--eval-steps", type=int, default=11)
    ap.add_argument("--per-step", type=int, default=16, help="OPD_ROLLOUTS_PER_STEP of the recorded steps")
    ap.add_argument("--algorithm", default="gkd", choices=["gkd", "pg_opd"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch
    from transformers.utils import logging as hf_logging

    from opd_nb.engine import task

    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    val_rows = task.make_rows(args.val, seed=10_001)
    held = {r["messages"][-1]["content"] for r in val_rows}
    train_rows = task.make_rows(args.steps * args.batch + args.batch, seed=1, exclude=held)
    with tempfile.TemporaryDirectory(prefix="opd-rollout-bench-") as tmp:
        work = Path(tmp)
        train, val = work / "train.jsonl", work / "validation.jsonl"
        train.write_text("\n".join(json.dumps(r) for r in train_rows) + "\n")
        val.write_text("\n".join(json.dumps(r) for r in val_rows) + "\n")
        alt = run_once(work, "alternating", str(train), str(val), args, alternate=True)
        off = run_once(work, "off", str(train), str(val), args, alternate=False)
    identical = alt["loss"] == off["loss"]
    cpu_share = (alt["record_s"] + alt["writer_cpu_s"]) / alt["train_off"]
    print(
        f"{args.algorithm}, {args.batch} prompts x 1, {args.per_step} records/step, {alt['steps']} steps: "
        f"train step {alt['train_on'] * 1000:.1f} ms recorded vs {alt['train_off'] * 1000:.1f} ms not (medians); "
        f"recording CPU per train step {alt['record_s'] * 1000:.2f} ms in the loop + "
        f"{alt['writer_cpu_s'] * 1000:.2f} ms in the writer thread = {cpu_share * 100:.1f}% of a step; "
        f"evaluation step {alt['eval_on'] * 1000:.1f} vs {alt['eval_off'] * 1000:.1f} ms (validation recording "
        f"{alt['val_record_s'] * 1000:.1f} ms in the loop for {args.val} answers, mostly the teacher pass); "
        f"{alt['files']} step(s) on disk, {off['files']} without recording",
        flush=True,
    )
    overhead = (alt["train_ratio"] - 1) * 100
    eval_overhead = (alt["eval_ratio"] - 1) * 100
    print(
        f"rollout_recording_overhead={overhead:.1f}% eval_recording_overhead={eval_overhead:.1f}% "
        f"identical_training={identical}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
