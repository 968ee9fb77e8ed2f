"""Checkpoints of a job run: save, retention, resume and the published final model.

A checkpoint is ``<output>/checkpoints/checkpoint-N``: the student's weights and tokenizer
(``save_pretrained``, so it also loads as a model) and :data:`STATE_FILE` with what resuming needs
(optimizer, scheduler, every RNG, the data cursor). Each is written to a temporary directory and
renamed into place, so a crash never leaves a half checkpoint; ``save_total_limit`` keeps the newest.
The final model goes to ``<output>/final`` the same way.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opd_nb.engine.api import EngineError, EngineEvents, EngineJob

STATE_FILE = "trainer_state.pt"


@dataclass
class Resumed:
    """Where a resumed run picks up."""

    step: int
    epoch: int
    cursor: int
    metrics_tail: dict[str, float]


class Checkpoints:
    """Writes and reads one job's checkpoints (the student, its optimizer state, the RNGs)."""

    def __init__(
        self,
        out: Path,
        job: EngineJob,
        plan: Any,
        models: Any,
        updater: Any,
        data: Any,
        events: EngineEvents,
        log: Callable[..., None],
    ):
        self.out, self.job, self.plan, self.models, self.updater = out, job, plan, models, updater
        self.data, self.events, self.log = data, events, log

    def due(self, step: int, epoch_end: bool) -> bool:
        """Whether the save strategy saves after `step` (`epoch_end`: the step ended an epoch)."""
        p = self.plan
        return (p.hp.save_strategy == "steps" and step % p.hp.save_steps == 0) or (
            p.hp.save_strategy == "epoch" and epoch_end
        )

    def save(self, step: int, epoch: int, cursor: int, metrics: dict[str, float]) -> str:
        """checkpoint-`step` (resuming at `epoch`, `cursor`); `metrics`: the last row, kept in the state."""
        import torch

        ck_root = self.out / "checkpoints"
        path = ck_root / f"checkpoint-{step}"
        tmp = ck_root / f".tmp-checkpoint-{step}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        self.models.student.save_pretrained(tmp, safe_serialization=True)
        self.models.tok.save_pretrained(tmp)
        state = {
            "step": step,
            "epoch": epoch,
            "cursor": cursor,
            "total_steps": self.data.total_steps,
            "optimizer": self.updater.opt.state_dict(),
            "scheduler": self.updater.sched.state_dict(),
            "rng": {
                "python": random.getstate(),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            },
            "metrics_tail": metrics,
            "plan": self.plan.model_dump(),
            "job_id": self.job.job_id,
            "seed": self.job.seed,
            "n_train": len(self.data.train),
        }
        torch.save(state, tmp / STATE_FILE)
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)
        self._retain(ck_root)
        self.events.checkpoint(step, str(path), dict(metrics))
        self.log(f"saved checkpoint-{step} to {path}")
        return str(path)

    def _retain(self, ck_root: Path) -> None:
        limit = self.plan.hp.save_total_limit
        if not limit:
            return
        cks = sorted(
            (p for p in ck_root.glob("checkpoint-*") if p.is_dir()), key=lambda p: int(p.name.split("-")[-1])
        )
        for old in cks[:-limit]:
            shutil.rmtree(old, ignore_errors=True)
            self.log(f"removed {old.name} (save_total_limit={limit})")

    def load(self, path: Path) -> Resumed:
        """Restore the optimizer, scheduler and RNGs from checkpoint `path` -> where to pick up."""
        import torch

        n_train = len(self.data.train)
        f = path / STATE_FILE
        if not f.is_file():
            raise EngineError(
                f"cannot resume from {str(path)!r}: it has no {STATE_FILE} (only checkpoint-N "
                "directories saved by the engine can be resumed; to start from weights only, "
                "use it as the student model instead)"
            )
        state = torch.load(f, map_location="cpu", weights_only=False)
        if state.get("n_train") != n_train:
            self.log(
                f"the training file has {n_train} rows, the checkpoint was made with "
                f"{state.get('n_train')}; the data cursor may not line up",
                "WARNING",
            )
        self.updater.opt.load_state_dict(state["optimizer"])
        self.updater.sched.load_state_dict(state["scheduler"])
        random.setstate(state["rng"]["python"])
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"].get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        got = Resumed(
            int(state["step"]),
            int(state["epoch"]),
            int(state["cursor"]),
            dict(state.get("metrics_tail") or {}),
        )
        self.log(
            f"resumed from {path.name}: step {got.step}, epoch {got.epoch + 1}, data cursor {got.cursor}"
        )
        return got

    def publish(self) -> str:
        """The student as ``<output>/final`` (the job's finetuned output)."""
        final = self.out / "final"
        tmp = self.out / ".tmp-final"
        if tmp.exists():
            shutil.rmtree(tmp)
        self.models.student.save_pretrained(tmp, safe_serialization=True)
        self.models.tok.save_pretrained(tmp)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        return str(final)
