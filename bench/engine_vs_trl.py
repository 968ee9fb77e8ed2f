"""This engine's gkd estimator vs TRL's DistillationTrainer (and GKDTrainer), in interleaved blocks.

All trainers run on-policy reverse KL (``beta=1``: ``DistillationTrainer(beta=1)``,
``GKDTrainer(lmbda=1, beta=1)``; temperature 1, no top-k) on the same tiny pair, data, batch (64
prompts x 1 sample), constant learning rate 1e-3, step count and seed (``bench/vs_trl_trainers.py``).
TRL runs as it comes (gradient checkpointing on, its default) and with checkpointing off; with
``--configs`` also GKDTrainer both ways and DistillationTrainer under ``torch.compile`` (a setting a
user would turn on; its chunked loss needs liger-kernel, not installed here).

Why one torch thread per process by default: with two, a neighbour on one core stalls every
parallel region of the other thread, and the engine, with many more small operations than TRL,
stalls more. Beside a CPU burner the 2-thread ratio fell from 3.04 to 1.83 (40%); the 1-thread
ratio moved from 3.06 to 3.02 (bench/README.md, runs E to I). ``--threads 2`` measures the
quiet-machine speed of both.

Why blocks: on a shared machine the run order decided the old result (the engine's first pass once
took 267 ms/step, its next two 72 and 79). Here every configuration runs once per block, each in a
fresh process, in an order reversed every other block (``bench/bench_blocks.py``); each block also
runs the engine at 2x and 4x student width and measures the matmul rate the FLOP bound uses
(``bench/vs_trl_flops.py``). Per configuration and block: the median wall ms/step and the median CPU
ms/step of its process (CPU time moves far less than wall time under other load) after a warm-up,
stage medians, and greedy accuracy on the same held-out rows. Every ratio is the median of the
per-block ratios, printed with the blocks' min-max. The load average is printed at start and end.

Last line (one line): ``vs_trl_distillation cpu=R (min-max) wall=R (min-max) | no_ckpt cpu=... wall=...
| flop_bound_ratio 1x=A 2x=B 4x=C | accuracy engine=... trl=... trl_no_ckpt=... | load X->Y``.
The bound ratio is the engine's wall ms/step over (2 N_s + 2 N_t + 6 N_s) x tokens at the model-shape
rate. TRL is a benchmark-only dependency (``pip install 'opd-nb[bench]'``).
Usage: ``python bench/engine_vs_trl.py [--blocks 4] [--steps 40] [--quick] [--threads 1] [--configs ...]``;
``--quick`` (2 blocks of 6 steps, 32 held-out rows) is a smoke run, most of it imports: 75 s (1.2
CPU-minutes) on run E's host with the default one thread; with two, 5.7 CPU-minutes and about 3
minutes on the slower host of runs A to D.

Where the time over the bound goes: see bench/README.md ("engine_vs_trl").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]
from bench_blocks import Spread, block_order, median_ratio  # noqa: E402
from vs_trl_flops import calibrate_main, flop_bound, stage_bounds, wider_student  # noqa: E402
from vs_trl_trainers import child_main  # noqa: E402

WIDTHS = (2, 4)  # the engine also runs at these student widths in every block (1x is "engine")
STAGES = ("gen", "teacher", "update", "record")
HEADLINE = ("engine", "dist_ckpt", "dist")
EXTRA = ("gkd_ckpt", "gkd", "dist_compile")


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=None, help="interleaved blocks (default 4; --quick: 2)")
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default 40; --quick: 6)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 blocks of 6 steps, 32 held-out rows")
    ap.add_argument(
        "--configs", nargs="*", default=[], choices=EXTRA, help="TRL configurations beside the headline"
    )
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads per process (default 1: load-proof)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--val", type=int, default=None, help="held-out rows for accuracy (default 256; --quick: 32)"
    )
    ap.add_argument("--device", default="cpu", help="cpu or cuda (every trainer runs there)")
    ap.add_argument("--student", default=None, help="student model dir (default: the bundled tiny student)")
    ap.add_argument("--teacher", default=None, help="teacher model dir (default: the bundled tiny teacher)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--calibrate", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.blocks = args.blocks or (2 if args.quick else 4)
    args.steps = args.steps or (6 if args.quick else 40)
    args.val = args.val or (32 if args.quick else 256)
    args.warmup = 2 if args.steps <= 10 else 5
    return args


def spawn(flag: str, spec: dict[str, Any], work: Path) -> Any:
    """Run this script with `flag` on a spec file in a fresh process; its last stdout line, parsed."""
    path = work / "spec.json"
    path.write_text(json.dumps(spec))
    cmd = [sys.executable, __file__, flag, str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if out.returncode != 0:
        raise SystemExit(f"{flag} {spec.get('config')} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def prepare(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Data files, the pair, the wider students and every model's parameter count."""
    from transformers import AutoModelForCausalLM

    from opd_nb.engine import task
    from opd_nb.engine.models import default_pair, n_params

    val_rows = task.make_rows(args.val, seed=10_001)
    held = {r["messages"][-1]["content"] for r in val_rows}
    train_rows = task.make_rows(args.steps * args.batch // 4 + args.batch, seed=1, exclude=held)
    for name, rows in (("train", train_rows), ("val", val_rows)):
        (work / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    student, teacher = default_pair()
    student, teacher = Path(args.student or student), Path(args.teacher or teacher)
    students = {1: student} | {w: wider_student(student, w, work, args.seed) for w in WIDTHS}
    count = lambda p: n_params(AutoModelForCausalLM.from_pretrained(p))  # noqa: E731
    return {
        "teacher": str(teacher),
        "students": {w: str(p) for w, p in students.items()},
        "n_s": {w: count(p) for w, p in students.items()},
        "n_t": count(teacher),
    }


def run_block(args: argparse.Namespace, work: Path, setup: dict[str, Any], block: int) -> dict[str, Any]:
    """Every configuration once, in this block's order, then the matmul rate at each width."""
    runs = [*HEADLINE, *args.configs] + [f"engine_x{w}" for w in WIDTHS]
    figures: dict[str, dict[str, Any]] = {}
    for name in block_order(runs, block):
        width = int(name.split("_x")[1]) if name.startswith("engine_x") else 1
        spec = {
            "config": "engine" if width > 1 else name, "student": setup["students"][width],
            "teacher": setup["teacher"], "train": str(work / "train.jsonl"), "val": str(work / "val.jsonl"),
            "steps": args.steps, "batch": args.batch, "seed": args.seed, "device": args.device,
            "threads": args.threads, "warmup": args.warmup, "accuracy": width == 1,
            "work": str(work / f"b{block}-{name}"),
        }  # fmt: skip
        figures[name] = f = spawn("--child", spec, work)
        stages = ", ".join(f"{k} {v:.1f}" for k, v in f["stages"].items())
        acc = f" accuracy {f['accuracy']:.3f}" if "accuracy" in f else ""
        print(
            f"block {block + 1} {name}: wall {f['wall_ms']:.1f} ms/step, cpu {f['cpu_ms']:.1f} ms/step "
            f"({stages}){acc}; {f['wall_s']:.1f}s in all",
            flush=True,
        )
    widths = {1: "engine"} | {w: f"engine_x{w}" for w in WIDTHS}
    jobs = [{"student": setup["students"][w], "tokens": figures[n]["tokens"]} for w, n in widths.items()]
    spec = {"jobs": jobs, "teacher": setup["teacher"], "threads": args.threads, "device": args.device}
    rates = dict(zip(widths, spawn("--calibrate", spec, work), strict=True))
    bound = {
        w: 1000 * flop_bound(setup["n_s"][w], setup["n_t"], figures[n]["tokens"], rates[w])
        for w, n in widths.items()
    }
    eng = figures["engine"]
    return {
        "wall": {k: v["wall_ms"] for k, v in figures.items()},
        "cpu": {k: v["cpu_ms"] for k, v in figures.items()},
        "accuracy": {k: v["accuracy"] for k, v in figures.items() if "accuracy" in v},
        "bound_ratio": {w: figures[n]["wall_ms"] / bound[w] for w, n in widths.items()},
        "stages": eng["stages"],
        "stage_bounds": {
            k: 1000 * v
            for k, v in stage_bounds(setup["n_s"][1], setup["n_t"], eng["tokens"], rates[1]).items()
        },
        "rate": rates[1],
        "tokens": eng["tokens"],
    }


def profile_line(blocks: list[dict[str, Any]]) -> str:
    """The engine's stages at 1x width beside their share of the FLOP bound (medians over blocks)."""
    med = lambda key, k: statistics.median(b[key].get(k, 0.0) for b in blocks)  # noqa: E731
    parts = []
    for k in STAGES:
        ms, bound = med("stages", k), med("stage_bounds", k)
        parts.append(f"{k} {ms:.1f} ms (bound {bound:.1f}, over {ms - bound:+.1f})")
    total = sum(med("stage_bounds", k) for k in STAGES)
    return (
        f"engine stages at 1x, medians over blocks: {'; '.join(parts)}; bound {total:.1f} ms at "
        f"{statistics.median(b['rate'] for b in blocks):.1f} GFLOP/s, {statistics.median(b['tokens'] for b in blocks):.0f} tokens/step"
    )


def summary_line(blocks: list[dict[str, Any]], load: tuple[float, float]) -> str:
    """The one line: both ratios in CPU and wall time with their spread, the bound ratios, accuracy, load."""
    cpu, wall = [b["cpu"] for b in blocks], [b["wall"] for b in blocks]
    acc = lambda k: statistics.median(b["accuracy"][k] for b in blocks)  # noqa: E731
    bound = " ".join(f"{w}x={Spread.of([b['bound_ratio'][w] for b in blocks]).fmt()}" for w in (1, *WIDTHS))
    return (
        f"vs_trl_distillation cpu={median_ratio(cpu, 'dist_ckpt', 'engine').fmt()} "
        f"wall={median_ratio(wall, 'dist_ckpt', 'engine').fmt()} | no_ckpt cpu={median_ratio(cpu, 'dist', 'engine').fmt()} "
        f"wall={median_ratio(wall, 'dist', 'engine').fmt()} | flop_bound_ratio {bound} | accuracy "
        f"engine={acc('engine'):.3f} trl={acc('dist_ckpt'):.3f} trl_no_ckpt={acc('dist'):.3f} | "
        f"blocks={len(blocks)} load {load[0]:.2f}->{load[1]:.2f}"
    )


def report(args: argparse.Namespace, blocks: list[dict[str, Any]], load: tuple[float, float]) -> None:
    print(profile_line(blocks))
    for name in args.configs:
        cpu = median_ratio([b["cpu"] for b in blocks], name, "engine").fmt()
        wall = median_ratio([b["wall"] for b in blocks], name, "engine").fmt()
        acc = statistics.median(b["accuracy"][name] for b in blocks)
        print(f"vs_trl_{name} cpu={cpu} wall={wall} accuracy={acc:.3f}")
    print(summary_line(blocks, load), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        return child_main(args.child)
    if args.calibrate:
        spec = json.loads(Path(args.calibrate).read_text())
        return calibrate_main(spec["jobs"], spec["teacher"], spec["threads"], spec["device"])
    start = os.getloadavg()[0]
    print(f"load average at start {start:.2f}; {args.blocks} blocks of {args.steps} steps", flush=True)
    with tempfile.TemporaryDirectory(prefix="opd-bench-") as tmp:
        setup = prepare(args, Path(tmp))
        print(f"student {setup['n_s'][1]:,} params, teacher {setup['n_t']:,} params", flush=True)
        blocks = [run_block(args, Path(tmp), setup, i) for i in range(args.blocks)]
    end = os.getloadavg()[0]
    print(f"load average at end {end:.2f}")
    report(args, blocks, (start, end))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
