"""Reward playground: score one candidate answer, or a JSONL batch, with the workspace's own reward.

Scoring runs the workspace's processor class (from config.yaml's reward function) in the SDK's
function server, as training and ``opd eval`` do (:mod:`opd_nb.functions.reward_call` builds the request and
reads the reply for all three), so a score here is the score a job would get. The server starts in
the background and is replaced whenever a code file changes (:mod:`.scoring_server`), so the
latest edits of ``functions/`` are what runs, and a crash in user code never touches the kernel.
"""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from opd_nb.errors import OpdError
from opd_nb.functions import reward_metrics
from opd_nb.notebook.display import LiveView
from opd_nb.results import ResultMixin
from opd_nb.views import render

if TYPE_CHECKING:
    from opd_nb.experiments.evaluation import RewardFunction

CANDIDATE_KEYS = ("candidate", "completion", "answer", "response", "content")
CLEAN_TIMEOUT_S = 10.0


class ScoreResult(ResultMixin, BaseModel):
    """One scored candidate: the cleaned text, the processor's output, and any failure."""

    index: int = 0
    prompt: str = ""
    candidate: str = ""
    ground_truth: Any = None
    cleaned: str | None = None
    reward_score: float | None = None
    reward_metrics: dict[str, Any] | None = None  # as returned: a non-float is flagged, not refused
    status: str = "failed"
    error: str | None = None
    error_code: str | None = None
    elapsed_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "success" and self.error is None

    @property
    def metric_warnings(self) -> list[str]:
        """One line per metric the console would not show (not a float), the job log's wording."""
        found = reward_metrics.non_float(self.reward_metrics)
        return [reward_metrics.message(key, kind) for key, kind in found.items()]

    def __str__(self) -> str:
        head = f"reward_score={self.reward_score} status={self.status}"
        if self.reward_metrics:
            head += " metrics=" + ", ".join(f"{k}={render.fmt(v)}" for k, v in self.reward_metrics.items())
        lines = [head, f"cleaned: {self.cleaned!r}"]
        lines += [f"warning: {w}" for w in self.metric_warnings]
        if self.error:
            lines.append(f"error: {self.error} ({self.error_code})")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        cls = "ok" if self.ok else "bad"
        rows = [
            ("reward_score", f'<b class="{cls}">{render.esc(render.fmt(self.reward_score))}</b>'),
            ("status", f'<span class="{cls}">{render.esc(self.status)}</span>'),
            ("cleaned text", f"<pre>{render.esc(self.cleaned)}</pre>"),
            ("ground truth", render.esc(self.ground_truth)),
        ]
        for k, v in (self.reward_metrics or {}).items():
            rows.append((f"reward_metrics.{k}", render.esc(render.fmt(v))))
        for warning in self.metric_warnings:
            rows.append(("warning", f'<span class="bad">{render.esc(warning)}</span>'))
        if self.error:
            rows.append(
                (
                    "error",
                    f'<span class="bad">{render.esc(self.error)} ({render.esc(self.error_code)})</span>',
                )
            )
        rows.append(("time", f"{self.elapsed_ms:.1f} ms"))
        return render.box(render.table(["field", "value"], rows, raw_cols=(1,)))


class BatchResult(ResultMixin, BaseModel):
    """Scores of a batch: distribution, mean, and the failures."""

    source: str = ""
    results: list[ScoreResult] = Field(default_factory=list)
    duration_s: float = 0.0

    @property
    def scores(self) -> list[float]:
        return [r.reward_score for r in self.results if r.reward_score is not None]

    @property
    def failures(self) -> list[ScoreResult]:
        return [r for r in self.results if not r.ok]

    @property
    def mean(self) -> float | None:
        s = self.scores
        return sum(s) / len(s) if s else None

    def summary(self) -> str:
        mean = f"{self.mean:.3f}" if self.mean is not None else "n/a"
        return (
            f"{len(self.results)} scored in {self.duration_s:.1f}s: mean reward_score {mean}, "
            f"{len(self.failures)} failure(s)"
        )

    def histogram_png(self) -> bytes | None:
        if not self.scores:
            return None
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(4.5, 2.4), dpi=90)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        ax.hist(self.scores, bins=min(20, max(5, len(set(self.scores)))), color="#4c72b0")
        ax.set_title("reward_score distribution", fontsize=9)
        ax.tick_params(labelsize=7)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()

    def failures_html(self) -> str:
        if not self.failures:
            return '<span class="ok">no failures</span>'
        rows = [(r.index, r.candidate[:80], r.status, r.error, r.error_code) for r in self.failures[:50]]
        return render.table(["#", "candidate", "status", "error", "code"], rows)

    @property
    def metric_warnings(self) -> list[str]:
        """Each non-float metric once, however many candidates returned it."""
        return list(dict.fromkeys(w for r in self.results for w in r.metric_warnings))

    def __str__(self) -> str:
        lines = [self.summary()]
        lines += [f"warning: {w}" for w in self.metric_warnings]
        for r in self.failures[:20]:
            lines.append(f"  #{r.index}: {r.status} {r.error}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        warnings = "".join(f'<div class="bad">warning: {render.esc(w)}</div>' for w in self.metric_warnings)
        return render.box(
            render.png_img(self.histogram_png(), alt="score distribution")
            + warnings
            + "<b>failures</b>"
            + self.failures_html(),
            title=self.summary(),
        )


def _configured_classpath(config: Path) -> str | None:
    """The reward class config.yaml registers, read through the spec (None if it names none)."""
    from opd_nb.spec import parse_config_text, reward_classpath_of

    try:
        text = config.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    parsed = parse_config_text(text, str(config))
    return reward_classpath_of(parsed.config) if parsed.config is not None else None


def _scanned_classpath(workspace: Path) -> str | None:
    """The processor class defined in the template's functions/reward/reward.py, if any."""
    candidate = workspace / "functions" / "reward" / "reward.py"
    if not candidate.is_file():
        return None
    m = re.search(
        r"^class\s+(\w+)\(\s*AbstractRewardProcessor\s*\)", candidate.read_text(encoding="utf-8"), re.M
    )
    return f"functions/reward/reward.py:{m.group(1)}" if m else None


def reward_classpath(workspace: str | Path) -> str:
    """The reward processor the workspace registers (config.yaml), else the one in functions/reward/."""
    ws = Path(workspace)
    config = ws / "config.yaml"
    found = (_configured_classpath(config) if config.is_file() else None) or _scanned_classpath(ws)
    if found:
        return found
    raise OpdError(
        "this workspace has no reward function",
        where=str(config),
        fix="create one with `opd new reward`, or add a `type: reward` function to config.yaml",
    )


def _prompt_text(messages: Sequence[dict]) -> str:
    for m in reversed(list(messages)):
        if m.get("role") == "user":
            return str(m.get("content", ""))
    return ""


def load_samples(workspace: str | Path, limit: int = 200) -> list[dict]:
    """Rows of data/train.jsonl and data/validation.jsonl (messages + rollout_extra)."""
    rows: list[dict] = []
    for name in ("train.jsonl", "validation.jsonl"):
        path = Path(workspace) / "data" / name
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if len(rows) >= limit:
                return rows
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict):
                    rows.append({**row, "_source": name})
    return rows


def item_from_row(row: dict, candidate: str | None = None) -> dict:
    """A scoring item from a dataset/candidates row: prompt messages, candidate, ground truth."""
    messages = row.get("messages")
    if not isinstance(messages, list):
        prompt = row.get("prompt")
        messages = [{"role": "user", "content": str(prompt)}] if prompt is not None else []
    extra = given if isinstance(given := row.get("rollout_extra"), dict) else None
    truth = row.get("ground_truth", row.get("solution"))
    if truth is None and extra:
        truth = extra.get("solution")
    if candidate is None:
        candidate = next((row[k] for k in CANDIDATE_KEYS if isinstance(row.get(k), str)), None)
    # Drop a trailing assistant turn: the candidate replaces it.
    if messages and messages[-1].get("role") == "assistant":
        if candidate is None:
            candidate = str(messages[-1].get("content", ""))
        messages = messages[:-1]
    return {"messages": messages, "candidate": candidate or "", "ground_truth": truth, "rollout_extra": extra}


def load_candidates(path: str | Path) -> list[dict]:
    """Items from a JSONL of candidates; each line needs a candidate text (see CANDIDATE_KEYS)."""
    p = Path(path)
    if not p.is_file():
        raise OpdError(
            f"{p} not found", where=str(p), fix="write one JSON object per line with a 'candidate' key"
        )
    items = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise OpdError(
                f"invalid JSON: {exc.msg}", where=f"{p}:{n}", fix="one JSON object per line"
            ) from None
        if not isinstance(row, dict):
            raise OpdError("expected a JSON object", where=f"{p}:{n}")
        item = item_from_row(row)
        if not any(isinstance(row.get(k), str) for k in CANDIDATE_KEYS) and not (
            isinstance(row.get("messages"), list)
            and row["messages"]
            and row["messages"][-1].get("role") == "assistant"
        ):
            raise OpdError(
                f"no candidate answer (keys: {', '.join(CANDIDATE_KEYS)})",
                where=f"{p}:{n}",
                fix='add e.g. "candidate": "<think>...</think>123"',
            )
        items.append(item)
    if not items:
        raise OpdError(f"{p} has no rows", where=str(p))
    return items


def _function_of(ws: Path, classpath: str) -> RewardFunction:
    """How a job would run `classpath`: config.yaml's zipdir, runtime env and timeout when it
    registers this class, else from the workspace itself with the default timeout."""
    from opd_nb.experiments.evaluation import RewardFunction, reward_function
    from opd_nb.functions.reward_call import DEFAULT_TIMEOUT_S
    from opd_nb.functions.server import classpath_to_module

    fn = reward_function(ws)
    if fn is not None and classpath_to_module(fn.classpath) == classpath_to_module(classpath):
        return fn._replace(classpath=classpath)
    return RewardFunction(ws, classpath, {}, DEFAULT_TIMEOUT_S)


def _cleaned(url: str, text: str) -> str | None:
    """The answer as the reward module's own cleaner sees it (None when it has none; its error
    in words when it raised)."""
    import http.client

    from opd_nb.functions import reward_call
    from opd_nb.functions.server import CLEAN_PATH, CleanReply, CleanRequest

    try:
        send = reward_call.post_once(url, CLEAN_PATH)
        status, data = send(CleanRequest(text=text).model_dump_json().encode(), CLEAN_TIMEOUT_S)
        reply = CleanReply.model_validate_json(data) if status == 200 else CleanReply()
    except (OSError, http.client.HTTPException, ValueError):
        return None
    return reply.cleaned if reply.error is None else f"(the module's cleaner raised {reply.error})"


def _score(url: str, index: int, item: dict, timeout_s: float) -> ScoreResult:
    """One item's reward call, read as training reads it (see :mod:`opd_nb.functions.reward_call`)."""
    from opd_nb.functions import reward_call

    candidate = item.get("candidate", "")
    messages = item.get("messages") or []
    request = reward_call.reward_request(
        [*messages, {"role": "assistant", "content": candidate}],
        item.get("rollout_extra"),
        item.get("ground_truth"),
        job_id="opd-playground",
        sample_id=str(index),
        rollout_id="0",
    )
    (out,) = reward_call.call(reward_call.post_once(url), request, timeout_s, url=url)
    return ScoreResult(
        index=index,
        prompt=_prompt_text(messages),
        candidate=candidate,
        ground_truth=item.get("ground_truth"),
        cleaned=_cleaned(url, candidate),
        reward_score=out.score,
        reward_metrics=out.metrics or None,
        status=out.status,
        error=out.error,
        error_code=out.error_code,
        elapsed_ms=out.seconds * 1000,
    )


def _workspace_dir(workspace: str | Path) -> Path:
    ws = Path(workspace).expanduser()
    if not ws.is_dir():
        raise OpdError(f"workspace {str(ws)!r} does not exist", fix="pass the folder made by `opd new`")
    return ws.resolve()


def score_items(
    workspace: str | Path,
    items: Sequence[dict],
    *,
    processor_class: str | None = None,
    concurrency: int = 8,
    on_result: Callable[[ScoreResult, int, int], None] | None = None,
    timeout_s: float | None = None,
) -> list[ScoreResult]:
    """Score `items` with the workspace's reward in its function server (results in input order).

    `timeout_s` is per call (default: the function's ``timeout`` in config.yaml, as in a job);
    `on_result` is called on this
    thread as each score arrives. Raises OpdError (with the server's log) if the code does not load.
    """
    from opd_nb.notebook import scoring_server

    ws = _workspace_dir(workspace)
    fn = _function_of(ws, processor_class or reward_classpath(ws))
    timeout_s = fn.timeout if timeout_s is None else timeout_s
    server = scoring_server.server_for(fn.code_dir, fn.classpath, fn.env)
    results: list[ScoreResult] = [ScoreResult()] * len(items)
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="opd-playground") as pool:
        futures = [pool.submit(_score, server.url, i, item, timeout_s) for i, item in enumerate(items)]
        for done, fut in enumerate(as_completed(futures), start=1):
            res = fut.result()
            results[res.index] = res
            if on_result is not None:
                on_result(res, done, len(items))
    return results


def score_one(
    workspace: str | Path,
    candidate: str,
    *,
    prompt: str | None = None,
    messages: list[dict] | None = None,
    ground_truth: Any = None,
    rollout_extra: dict | None = None,
    processor_class: str | None = None,
) -> ScoreResult:
    """Score one candidate answer for a prompt (typed text or a dataset row's messages)."""
    msgs = messages if messages is not None else ([{"role": "user", "content": prompt}] if prompt else [])
    item = {
        "messages": msgs,
        "candidate": candidate,
        "ground_truth": ground_truth,
        "rollout_extra": rollout_extra,
    }
    return score_items(workspace, [item], processor_class=processor_class)[0]


class RewardPlayground(LiveView):
    """Widgets over `score_one` / `score_items` for one workspace."""

    def __init__(
        self, workspace: str | Path = ".", *, processor_class: str | None = None, concurrency: int = 8
    ):
        self.workspace = Path(workspace).expanduser()
        if not self.workspace.is_dir():
            raise OpdError(
                f"workspace {str(self.workspace)!r} does not exist", fix="pass the folder made by `opd new`"
            )
        self.processor_class = processor_class or reward_classpath(self.workspace)
        self.concurrency = concurrency
        self.samples = load_samples(self.workspace)
        self.last: ScoreResult | None = None
        self.last_batch: BatchResult | None = None
        self._widgets: dict[str, Any] | None = None
        self._build()
        self._warm()

    def _warm(self) -> None:
        """Start the reward's function server now, in the background, so the first score is quick."""
        from opd_nb.notebook import scoring_server

        try:
            fn = _function_of(self.workspace.resolve(), self.processor_class)
        except OpdError:
            return  # the first score says what is wrong
        scoring_server.warm(fn.code_dir, fn.classpath, fn.env)

    def _build(self) -> None:
        try:
            import ipywidgets as W
        except ImportError:
            return
        options = [("(type your own prompt)", -1)] + [
            (f"{s['_source']} #{i}: {_prompt_text(s.get('messages') or [])[:40]}", i)
            for i, s in enumerate(self.samples)
        ]
        first = 0 if self.samples else -1
        sample = W.Dropdown(
            options=options,
            value=first,
            description="sample",
            layout=W.Layout(width="70%"),
        )
        prompt = W.Textarea(description="prompt", layout=W.Layout(width="70%", height="60px"))
        truth = W.Text(description="truth", layout=W.Layout(width="70%"))
        candidate = W.Textarea(
            description="answer",
            placeholder="the student's answer, e.g. <think>...</think>123",
            layout=W.Layout(width="70%", height="60px"),
        )
        score = W.Button(description="Score", button_style="primary", icon="check")
        result = W.HTML()
        path = W.Text(
            description="batch",
            placeholder="candidates.jsonl (one {'candidate':..., 'messages' or 'prompt', ...} per line)",
            layout=W.Layout(width="70%"),
        )
        batch = W.Button(description="Score batch", icon="list")
        progress = W.IntProgress(min=0, max=1, value=0, description="0/0")
        hist = W.Image(format="png", layout=W.Layout(display="none"))  # shown once it has a plot
        failures = W.HTML()
        title = W.HTML(
            f"<b>reward playground</b> — <code>{render.esc(self.processor_class)}</code> "
            f"in {render.esc(self.workspace)}"
        )
        sample.observe(lambda ch: self._on_sample(ch["new"]), names="value")
        score.on_click(lambda _b: self._on_score())
        batch.on_click(lambda _b: self._on_batch())
        box = W.VBox(
            [
                title,
                sample,
                prompt,
                truth,
                candidate,
                score,
                result,
                path,
                W.HBox([batch, progress]),
                hist,
                failures,
            ]
        )
        box.add_class("opd-reward-playground")
        self._widgets = {
            "box": box,
            "sample": sample,
            "prompt": prompt,
            "truth": truth,
            "candidate": candidate,
            "score": score,
            "result": result,
            "path": path,
            "batch": batch,
            "progress": progress,
            "hist": hist,
            "failures": failures,
        }
        self._on_sample(first)

    def _on_sample(self, index: int) -> None:
        w = self._widgets
        if w is None or index is None or index < 0 or index >= len(self.samples):
            return
        item = item_from_row(self.samples[index])
        w["prompt"].value = _prompt_text(item["messages"])
        w["truth"].value = "" if item["ground_truth"] is None else str(item["ground_truth"])

    def _current_item(self) -> dict:
        w = self._widgets or {}
        index = w["sample"].value
        truth = w["truth"].value or None
        if index is not None and 0 <= index < len(self.samples):
            item = item_from_row(self.samples[index], candidate=w["candidate"].value)
            # The user may have edited the prompt or truth fields.
            if w["prompt"].value != _prompt_text(item["messages"]):
                item["messages"] = [m for m in item["messages"] if m.get("role") != "user"] + [
                    {"role": "user", "content": w["prompt"].value}
                ]
            item["ground_truth"] = truth
            return item
        return {
            "messages": [{"role": "user", "content": w["prompt"].value}] if w["prompt"].value else [],
            "candidate": w["candidate"].value,
            "ground_truth": truth,
            "rollout_extra": None,
        }

    def score(self, candidate: str | None = None) -> ScoreResult:
        """Score the form's current sample/prompt with `candidate` (or the answer field)."""
        if self._widgets is None:
            raise OpdError("ipywidgets is not installed", fix="use opd_nb.notebook.playground.score_one(...)")
        if candidate is not None:
            self._widgets["candidate"].value = candidate
        item = self._current_item()
        try:
            self.last = score_items(self.workspace, [item], processor_class=self.processor_class)[0]
            self._widgets["result"].value = self.last._repr_html_()
            self._refresh_static(force=True)  # the saved snapshot shows the last score
        except OpdError as exc:
            self._widgets["result"].value = render.box(f'<span class="bad">{render.esc(exc)}</span>')
            raise
        return self.last

    def score_batch(self, path: str | Path | None = None) -> BatchResult:
        """Score a JSONL of candidates concurrently; drives the progress bar and the histogram."""
        w = self._widgets
        source = path if path is not None else (w["path"].value if w else "")
        if not source:
            raise OpdError("no batch file given", fix="type the path of a JSONL of candidates")
        p = Path(source)
        p = p if p.is_absolute() else (self.workspace / p if not p.is_file() else p)
        items = load_candidates(p)
        if w is not None:
            w["progress"].max = len(items)
            w["progress"].value = 0
            w["progress"].description = f"0/{len(items)}"

        def tick(_res: ScoreResult, done: int, total: int) -> None:
            if w is not None:
                w["progress"].value = done
                w["progress"].description = f"{done}/{total}"

        start = time.perf_counter()
        results = score_items(
            self.workspace,
            items,
            processor_class=self.processor_class,
            concurrency=self.concurrency,
            on_result=tick,
        )
        self.last_batch = BatchResult(source=str(p), results=results, duration_s=time.perf_counter() - start)
        if w is not None:
            png = self.last_batch.histogram_png()
            if png:
                w["hist"].value = png
                w["hist"].layout.display = ""
            w["failures"].value = render.box(
                "<b>failures</b>" + self.last_batch.failures_html(), title=self.last_batch.summary()
            )
        self._refresh_static(force=True)  # the saved snapshot shows the last batch
        return self.last_batch

    def _on_score(self) -> None:
        self._in_background("score", "result", self.score)

    def _on_batch(self) -> None:
        self._in_background("batch", "failures", self.score_batch)

    def _in_background(self, button: str, field: str, work: Callable[[], Any]) -> None:
        """Run a button's `work` on a thread, so the kernel stays free while the reward runs (a first
        score may wait for the server to start); the thread only sets widget state."""
        import threading

        w = self._widgets
        if w is None or w[button].disabled:
            return
        w[button].disabled = True

        def run() -> None:
            try:
                work()
            except Exception as exc:  # shown where the result would be; nothing else to report to
                w[field].value = render.box(f'<span class="bad">{render.esc(exc)}</span>')
            finally:
                w[button].disabled = False

        threading.Thread(target=run, name=f"opd-playground-{button}", daemon=True).start()

    def widget(self) -> Any:
        return None if self._widgets is None else self._widgets["box"]

    def __str__(self) -> str:
        return f"reward playground for {self.workspace} ({self.processor_class}); {len(self.samples)} samples"

    def _repr_html_(self) -> str:
        parts = [f"<code>{render.esc(self.processor_class)}</code>, {len(self.samples)} samples"]
        if self.last is not None:
            parts.append(self.last._repr_html_())
        if self.last_batch is not None:
            parts.append(self.last_batch._repr_html_())
        return render.box("".join(parts), title="reward playground")

    def to_html(self) -> str:
        """The static snapshot a saved notebook keeps (:class:`~opd_nb.notebook.display.LiveView`)."""
        return self._repr_html_()


def reward_playground(workspace: str | Path = ".", **kwargs: Any) -> RewardPlayground:
    return RewardPlayground(workspace, **kwargs)
