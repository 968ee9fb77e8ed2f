"""What the student actually wrote: a sample of each step's rollouts and every validation answer, on disk.

Why: a loss curve says *that* a job moved, not *what* the student said or which tokens the
teacher disliked. The trainer records, per step, a fair sample of its rollouts (round-robin over
the step's prompts, at most ``OPD_ROLLOUTS_PER_STEP``, default 16; ``0`` records nothing) and,
at every evaluation, every validation answer, each token with the student's and the teacher's
log-probability of it, taken from the log-probs the step computes anyway.

This module is pure Python (no torch) so that the control plane can read the files.

On disk, in the job's output directory::

    rollouts/train-000012.json.gz        # one file per recorded step and kind, gzip'd JSON,
    rollouts/validation-000012.json.gz   # written atomically (temporary file + rename)

Each file is ``{"format": "opd-rollouts/1", "kind": ..., "step": ..., "records": [...]}``; a record::

    {"kind": "train" | "validation", "step": 12,
     "group": 3,            # prompt index within the step (validation: row of the validation file)
     "sample": 0,           # rollout index within the prompt's group (0 .. n_rollouts - 1)
     "messages": [...],     # native: the prompt turns; agentic: the trajectory the rollout function
                            # returned, each message with "trained": bool (its tokens were trained on)
     "completion": "...",   # the decoded completion (agentic: the trajectory's assistant turns, joined)
     "tokens": [{"id": 7, "text": "<think>", "student_logprob": -0.12, "teacher_logprob": -0.03}, ...],
     "truncated": false}    # hit max_length without EOS

``"".join(t["text"] for t in tokens) == completion`` always holds (the end-of-sequence token is
included, with text ``""``). Log-probs are natural logs of the token's probability (<= 0, rounded
to 5 decimals; ``null`` if not finite): ``student_logprob`` under the student at temperature 1 as
the step's update computed it (the sampling policy; with several gkd updates per step, the policy
at that sample's update), for validation answers from the greedy decode itself;
``teacher_logprob`` from the step's teacher pass (validation: one extra no-grad teacher pass per
evaluation), ``null`` where the teacher gave no score (past ``opd_teacher_max_model_len``).
Agentic tokens also carry ``"turn"`` (index of their assistant message) and ``"trained"`` (false
for tokens cut to fit ``max_length``: no log-probs). With a reward function a record also has
``reward_score`` (the weighted total the engine trains on, ``null`` if a call failed),
``reward_metrics`` (the components' merged; with several components also ``reward_components``,
name -> score), ``reward_status`` (``"success"`` | ``"failed"``) and ``reward_error``; an agentic
record has ``rollout_status`` and ``rollout_error`` (a failed call is recorded with no tokens).

Retention: the newest ``OPD_ROLLOUTS_KEEP_STEPS`` (default 50) train steps, plus the train step
of every evaluation, plus every validation file. Only older files are deleted, after the new one
is in place, so a reader of the latest step never loses its file.

Reader API (what ``GET /api/v1/fine-tunes/{job_id}/rollouts?step=&kind=&limit=`` serves):

* ``recorded_steps(output_dir, kind=None) -> list[int]``: the steps on disk, ascending
  (``kind``: ``"train"``, ``"validation"`` or ``None`` for either).
* ``read_rollouts(output_dir, step=None, kind=None, limit=None) -> list[dict]``: the records of
  ``step`` (default: the latest recorded step of that kind), train records before validation
  ones, at most ``limit``; ``[]`` when nothing is recorded there. Raises ``ValueError`` for an
  unknown kind or a negative step/limit.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from opd_nb import settings
from opd_nb.errors import OpdError
from opd_nb.wire.rollouts import RolloutRow, TokenRow

DIRNAME = "rollouts"
FORMAT = "opd-rollouts/1"
KINDS = ("train", "validation")
PER_STEP_ENV = settings.ROLLOUTS_PER_STEP.name
KEEP_ENV = settings.ROLLOUTS_KEEP_STEPS.name
_FILE = re.compile(r"^(train|validation)-(\d+)\.json\.gz$")


# ---- reading (the control plane's side) -----------------------------------------------------------


def _check_kind(kind: str | None) -> None:
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)} (or omitted), not {kind!r}")


def _files(output_dir: str | Path) -> list[tuple[str, int, Path]]:
    d = Path(output_dir) / DIRNAME
    try:
        entries = list(os.scandir(d))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[tuple[str, int, Path]] = []
    for e in entries:
        m = _FILE.match(e.name)
        if m:
            out.append((m.group(1), int(m.group(2)), Path(e.path)))
    return out


def file_name(kind: str, step: int) -> str:
    return f"{kind}-{step:06d}.json.gz"


def recorded_steps(output_dir: str | Path, kind: str | None = None) -> list[int]:
    """Steps with recorded rollouts of `kind` (either kind when None), ascending."""
    _check_kind(kind)
    return sorted({s for k, s, _ in _files(output_dir) if kind is None or k == kind})


def read_rollouts(
    output_dir: str | Path, step: int | None = None, kind: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Records of `step` (default: the latest recorded one of `kind`), train before validation, at most `limit`."""
    _check_kind(kind)
    if step is not None and step < 0:
        raise ValueError(f"step must be >= 0, not {step}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, not {limit}")
    if step is None:
        steps = recorded_steps(output_dir, kind)
        if not steps:
            return []
        step = steps[-1]
    out: list[dict[str, Any]] = []
    for k in KINDS if kind is None else (kind,):
        path = Path(output_dir) / DIRNAME / file_name(k, step)
        try:
            data = json.loads(gzip.decompress(path.read_bytes()))
        except FileNotFoundError:  # never recorded, or retention removed it meanwhile
            continue
        out.extend(data.get("records", []))
    return out if limit is None else out[:limit]


# ---- writing (the engine's side) ------------------------------------------------------------------


def _env_int(setting: settings.Setting[int], log: Callable[[str, str], None] | None) -> int:
    """`opd serve` refused a bad value at its start; a job run some other way logs it and uses the default."""
    try:
        return setting.get() or 0
    except OpdError as exc:
        if log is not None:
            log(f"{exc}; using {setting.default}", "WARNING")
        return setting.default or 0


def keep_steps(log: Callable[[str, str], None] | None = None) -> int:
    """How many train steps are kept (``OPD_ROLLOUTS_KEEP_STEPS``; the traces of a step follow the same rule)."""
    return _env_int(settings.ROLLOUTS_KEEP_STEPS, log)


def expired_steps(train: Sequence[int], evals: set[int], keep: int) -> list[int]:
    """The train steps retention removes: all but the newest `keep`, except the train step of every
    evaluation (`evals`)."""
    ordered = sorted(train)
    return [s for s in ordered[: max(0, len(ordered) - keep)] if s not in evals]


def fair_sample(groups: Sequence[int], limit: int, step: int) -> list[int]:
    """Indices of at most `limit` samples: round-robin over the groups, each group's samples in order.

    Why: every prompt gets a voice before any prompt gets a second one; the first group rotates
    with the step so that, across steps, different prompts are shown (deterministic, no RNG use,
    so recording never changes training).
    """
    by: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        by.setdefault(g, []).append(i)
    keys = sorted(by)
    if not keys or limit <= 0:
        return []
    start = (step * limit) % len(keys)
    keys = keys[start:] + keys[:start]
    out: list[int] = []
    depth = 0
    while len(out) < limit:
        took = False
        for g in keys:
            if depth < len(by[g]):
                out.append(by[g][depth])
                took = True
                if len(out) == limit:
                    break
        if not took:
            break
        depth += 1
    return out


def ranks(groups: Sequence[int]) -> list[int]:
    """Each sample's index within its group (its rollout number), in order of appearance."""
    seen: dict[int, int] = {}
    out: list[int] = []
    for g in groups:
        out.append(seen.get(g, 0))
        seen[g] = out[-1] + 1
    return out


class TokenTexts:
    """Per-token texts that join exactly to the decoded text, for any tokenizer.

    Fast path: each id decoded alone (cached). Where that does not join up (merged or multi-byte
    tokens, tokenizers that drop a leading space), an incremental decode assigns each token the
    new text it completes; the last resort compares prefix decodes with the full text.
    """

    def __init__(self, tokenizer: Any):
        self.tok = tokenizer
        self.cache: dict[int, str] = {}

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def piece(self, i: int) -> str:
        s = self.cache.get(i)
        if s is None:
            s = self.cache[i] = self.decode([i])
        return s

    def __call__(self, ids: Sequence[int]) -> tuple[list[str], str]:
        """(text per token, the decoded text); ``"".join(texts) == text``."""
        full = self.decode(ids)
        texts = [self.piece(i) for i in ids]
        if "".join(texts) == full:
            return texts, full
        texts = self._incremental(ids)
        if "".join(texts) == full:
            return texts, full
        return self._by_prefix(ids, full), full

    def _incremental(self, ids: Sequence[int]) -> list[str]:
        """Detokenize as a stream does: emit text once it stops ending in an incomplete character."""
        texts: list[str] = []
        prefix, read = 0, 0
        for i in range(len(ids)):
            prev = self.decode(ids[prefix:read])
            new = self.decode(ids[prefix : i + 1])
            if len(new) > len(prev) and new.startswith(prev) and not new.endswith("\ufffd"):
                texts.append(new[len(prev) :])
                prefix, read = read, i + 1
            else:
                texts.append("")
        return texts

    def _by_prefix(self, ids: Sequence[int], full: str) -> list[str]:
        texts: list[str] = []
        done = 0
        for i in range(len(ids)):
            n = len(os.path.commonprefix([self.decode(ids[: i + 1]), full]))
            texts.append(full[done:n] if n > done else "")
            done = max(done, n)
        if texts and done < len(full):
            texts[-1] += full[done:]
        return texts


def _lp(x: float | None) -> float | None:
    return round(x, 5) if x is not None and math.isfinite(x) else None


@dataclass
class Turn:
    """Trained tokens of one completion: a row of the step's batch (agentic: one assistant message)."""

    ids: list[int]  # trained token ids, in order
    student: list[float | None]  # student log-prob per trained token
    teacher: list[float | None]  # teacher log-prob per trained token, None where unscored
    message: int | None = None  # index of the assistant message in the trajectory (agentic)
    dropped: list[int] = field(default_factory=list[int])  # generated but cut to fit max_length (agentic)


@dataclass
class Rollout:
    """One sampled completion (native) or one trajectory (agentic) to record."""

    group: int
    sample: int
    messages: list[dict[str, Any]]
    turns: list[Turn]
    truncated: bool = False
    reward: dict[str, Any] | None = None  # reward_score / reward_metrics / reward_status / reward_error
    agentic: bool = False
    error: str | None = None  # a failed agentic rollout (no trajectory)


def _token_rows(t: Turn, texts: list[str], *, agentic: bool) -> list[TokenRow]:
    """A turn's tokens as written: each with both log-probs; agentic, its message and whether it was trained
    (the tokens cut to fit ``max_length`` follow, unscored)."""
    n = len(t.ids)
    if not agentic:
        return [
            TokenRow(id=i, text=x, student_logprob=_lp(s), teacher_logprob=_lp(q))
            for i, x, s, q in zip(t.ids, texts, t.student, t.teacher, strict=True)
        ]
    trained = [
        TokenRow(id=i, text=x, student_logprob=_lp(s), teacher_logprob=_lp(q), turn=t.message, trained=True)
        for i, x, s, q in zip(t.ids, texts[:n], t.student, t.teacher, strict=True)
    ]
    cut = [
        TokenRow(id=i, text=x, student_logprob=None, teacher_logprob=None, turn=t.message, trained=False)
        for i, x in zip(t.dropped, texts[n:], strict=True)
    ]
    return trained + cut


def _own_copy(tokenizer: Any) -> Any:
    """A private copy for the writer thread: a fast tokenizer shared with a thread that encodes (and may
    reconfigure padding/truncation) can fail with "Already borrowed"."""
    import copy

    try:
        return copy.deepcopy(tokenizer)
    except Exception:  # noqa: BLE001 - an uncopyable tokenizer is still usable, just shared
        return tokenizer


class Recorder:
    """Writes one file per recorded step and kind under ``output_dir/rollouts`` (see the module docstring).

    Building the records, serialising and the file I/O run on one background thread, in order, so
    the training loop only hands over plain lists (their cost overlaps the next step's tensor work,
    which releases the GIL). A failed write is reported once, on the caller's thread, and turns
    recording off: it is a diagnostic and never fails a job. :meth:`close` waits for the queue.
    """

    def __init__(
        self,
        output_dir: str | Path,
        tokenizer: Any,
        log: Callable[[str, str], None] | None = None,
        background: bool = True,
    ):
        self.dir = Path(output_dir) / DIRNAME
        self.per_step = _env_int(settings.ROLLOUTS_PER_STEP, log)
        self.keep = keep_steps(log)
        self.texts = TokenTexts(_own_copy(tokenizer))
        self.log = log
        self.background = background
        self._q: queue.Queue[tuple[str, int, list[Rollout]] | None] = queue.Queue(maxsize=8)
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self.cpu_s: dict[str, float] = {}  # CPU seconds spent writing, per kind (the bench reads it)

    @property
    def enabled(self) -> bool:
        return self.per_step > 0

    def start(self, step: int) -> None:
        """Drop files of steps after `step` (an abandoned run in the same directory, or a resumed one) and
        temporary files a killed run left behind."""
        for _, s, path in _files(self.dir.parent):
            if s > step:
                path.unlink(missing_ok=True)
        for tmp in self.dir.glob(".*.tmp") if self.dir.is_dir() else ():
            tmp.unlink(missing_ok=True)

    def record(self, r: Rollout, kind: str, step: int) -> RolloutRow:
        trained_msgs = {t.message for t in r.turns}
        messages = (
            [{**m, "trained": a in trained_msgs} for a, m in enumerate(r.messages)]
            if r.agentic
            else r.messages
        )
        tokens: list[TokenRow] = []
        completion: list[str] = []
        for t in r.turns:
            texts, text = self.texts(t.ids + t.dropped)
            completion.append(text)
            tokens.extend(_token_rows(t, texts, agentic=r.agentic))
        rec = RolloutRow(kind=kind, step=step, group=r.group, sample=r.sample, messages=messages,
                         completion="".join(completion), tokens=tokens, truncated=bool(r.truncated))  # fmt: skip
        if r.reward is not None:
            rec.update(cast(RolloutRow, r.reward))
        if r.agentic:
            rec["rollout_status"] = "failed" if r.error else "success"
            rec["rollout_error"] = r.error
        return rec

    def write(self, kind: str, step: int, rollouts: list[Rollout]) -> None:
        """Record `rollouts` as step `step` of `kind` (queued for the background thread unless ``background=False``)."""
        _check_kind(kind)
        if self._error is not None:
            if self.per_step and self.log is not None:
                self.log(f"rollout recording stopped: {self._error}", "WARNING")
            self.per_step = 0
            return
        if not self.background:
            self.write_now(kind, step, rollouts)
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="opd-rollouts-writer", daemon=True)
            self._thread.start()
        self._q.put((kind, step, rollouts))

    def _work(self) -> None:
        while (item := self._q.get()) is not None:
            try:
                if self._error is None:
                    self.write_now(*item)
            except Exception as exc:  # noqa: BLE001 - a diagnostic must not take the job down
                self._error = f"{exc.__class__.__name__}: {exc}"
            finally:
                self._q.task_done()
        self._q.task_done()

    def flush(self) -> None:
        """Wait until every queued step is on disk."""
        if self._thread is not None:
            self._q.join()

    def close(self) -> None:
        """Write what is queued and stop the background thread."""
        if self._thread is not None:
            self._q.put(None)
            self._thread.join()
            self._thread = None
        if self._error is not None and self.per_step and self.log is not None:
            self.log(f"rollout recording stopped: {self._error}", "WARNING")
            self.per_step = 0

    def write_now(self, kind: str, step: int, rollouts: list[Rollout]) -> Path:
        """Write `rollouts` as step `step` of `kind` atomically (tmp + rename), then apply retention."""
        _check_kind(kind)
        t0 = time.thread_time()
        self.dir.mkdir(parents=True, exist_ok=True)
        body = {
            "format": FORMAT,
            "kind": kind,
            "step": step,
            "records": [self.record(r, kind, step) for r in rollouts],
        }
        data = gzip.compress(json.dumps(body, separators=(",", ":")).encode(), compresslevel=6, mtime=0)
        path = self.dir / file_name(kind, step)
        tmp = self.dir / f".{path.name}.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, path)
        if kind == "train":
            self._retain()
        self.cpu_s[kind] = self.cpu_s.get(kind, 0.0) + time.thread_time() - t0
        return path

    def _retain(self) -> None:
        files = _files(self.dir.parent)
        evals = {s for k, s, _ in files if k == "validation"}
        train = {s: p for k, s, p in files if k == "train"}
        for s in expired_steps(list(train), evals, self.keep):
            train[s].unlink(missing_ok=True)
