"""`opd eval`: is the distilled student better than the base, and on which rows?

:func:`evaluate` sends the workspace's validation rows to each model through the target's chat API
(the compatible-mode ``/chat/completions``, the same call on Bailian and on ``opd serve``), greedy,
with bounded concurrency, and scores every answer the way training does: with the workspace's own
reward function, run in the SDK's function server (:mod:`opd_nb.functions.server`). A workspace
without a reward (pure distillation) is scored by exact match of the cleaned answer (thinking and
tool-call text removed) against ``rollout_extra.solution`` where a row has one; other rows get no
score. The result has each model's ``n``, ``reward_mean`` and metric means, and one entry per row
with every model's answer and score; rows where the models differ come first in its tables.

A fine-tuned model answers only once deployed (on Bailian and locally alike): evaluating an
undeployed one stops at the first call with an error that says how to deploy it.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin
from opd_nb.views import render
from opd_nb.views.terminal_table import WholeNamesTable

DEFAULT_CONCURRENCY = 8
EXACT_MATCH = "exact_match"
THINK_TAGS = ("<think>", "</think>")
TOOL_CALL_TAGS = ("<tool_call>", "</tool_call>")
Progress = Callable[[int, int], None]  # (calls done, calls in all)


# ---- the workspace's rows and scorer -----------------------------------------------------------
def clean_answer(text: str) -> str:
    """The answer without thinking blocks or tool-call text (the template reward's cleanup)."""
    for open_tag, close_tag in (THINK_TAGS, TOOL_CALL_TAGS):
        opened, closed = re.escape(open_tag), re.escape(close_tag)
        text = re.sub(f"{opened}.*?{closed}", "", text, flags=re.DOTALL)
        if close_tag in text:
            text = text.rsplit(close_tag, 1)[1]
        if open_tag in text:
            text = text.split(open_tag, 1)[0]
    return " ".join(text.split())


def _config(workspace: Path, config: str = "config.yaml") -> Any:
    from opd_nb.spec import parse_config_text
    from opd_nb.spec.job import read_config_text

    path = workspace / config
    if not path.is_file():
        return None
    return parse_config_text(read_config_text(path), str(path)).config  # not UTF-8: one line, not a traceback


def data_file(workspace: str | Path, kind: str, config: str = "config.yaml") -> Path:
    """The JSONL the job YAML `config` names for dataset `kind` ("validation", "training"; else
    ``data/<kind>.jsonl``), whether or not it exists."""
    ws = Path(workspace)
    job = _config(ws, config)
    names = [d.file_name for d in (job.datasets if job else []) if d.type == kind and d.file_name]
    default = "data/validation.jsonl" if kind == "validation" else "data/train.jsonl"
    return ws / (names[0] if names else default)


def validation_file(workspace: str | Path) -> Path:
    """The validation JSONL config.yaml names (else ``data/validation.jsonl``)."""
    ws = Path(workspace)
    path = data_file(ws, "validation")
    if not path.is_file():
        raise OpdError(
            f"no validation data at {path}",
            where=str(ws / "config.yaml"),
            fix="add a `type: validation` dataset (data/validation.jsonl) to the workspace",
        )
    return path


def load_rows(workspace: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The validation rows (``messages`` + ``rollout_extra``), the first `limit` of them."""
    return read_rows(validation_file(workspace), limit)


def read_rows(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """A data file's rows (``messages`` + ``rollout_extra``), the first `limit` of them; a bad row is one
    line naming it."""
    rows: list[dict[str, Any]] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise OpdError(
                "is not JSON", where=f"{path}:{n}", fix="`opd check` names every bad row"
            ) from None
        if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
            raise OpdError("has no messages list", where=f"{path}:{n}", fix="`opd check` names every bad row")
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise OpdError(f"{path} has no rows", fix="add validation rows (messages + rollout_extra.solution)")
    return rows


class RewardFunction(NamedTuple):
    """Where and how a workspace's reward runs, as a job runs it."""

    code_dir: Path  # the function's zipdir: the server's working directory and PYTHONPATH
    classpath: str
    env: dict[str, str]  # its runtime env
    timeout: float  # seconds per call


def reward_function(workspace: str | Path, config: str = "config.yaml") -> RewardFunction | None:
    """The workspace's first reward function (in the job YAML `config`); None without one."""
    return workspace_function(workspace, "reward", config)


def workspace_function(
    workspace: str | Path, kind: str, config: str = "config.yaml"
) -> RewardFunction | None:
    """The first function of `kind` ("reward", "rollout") the job YAML `config` names, as a job runs it;
    None without one."""
    from opd_nb.functions.reward_call import DEFAULT_TIMEOUT_S
    from opd_nb.spec import function_classpath

    ws = Path(workspace)
    job = _config(ws, config)
    for function in job.functions_of(kind) if job else []:
        classpath = function_classpath(function)
        if classpath:
            zipdir = (function.fcmodel.zipdir if function.fcmodel else None) or "./"
            env = {
                str(k): str(v)
                for k, v in ((function.runtime.env if function.runtime else None) or {}).items()
            }
            timeout = float(function.timeout) if function.timeout else DEFAULT_TIMEOUT_S
            return RewardFunction((ws / zipdir).resolve(), classpath, env, timeout)
    return None


def prompt_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    msgs = list(row["messages"])
    while msgs and msgs[-1].get("role") == "assistant":
        msgs.pop()  # the answer is what the model writes
    return msgs


def _solution(row: dict[str, Any]) -> Any:
    extra = row.get("rollout_extra")
    return extra.get("solution") if isinstance(extra, dict) else None


def _user_text(messages: Sequence[dict[str, Any]]) -> str:
    for m in reversed(list(messages)):
        if m.get("role") == "user":
            return str(m.get("content") or "")
    return ""


# ---- the result ----------------------------------------------------------------------------------
class ModelScore(ResultMixin, BaseModel):
    model: str
    n: int  # rows scored
    reward_mean: float | None
    metrics: dict[str, float] = Field(default_factory=dict)
    failed: int = 0  # rows whose call or score failed


class RowResult(ResultMixin, BaseModel):
    index: int
    prompt: str
    solution: Any = None
    answers: dict[str, str] = Field(default_factory=dict)
    scores: dict[str, float | None] = Field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = Field(default_factory=dict)
    errors: dict[str, str] = Field(default_factory=dict)

    @property
    def differs(self) -> bool:
        """The models scored this row differently (or, with equal scores, answered differently)."""
        return self.rank < 2

    @property
    def rank(self) -> int:
        """0: different scores, 1: same scores but different answers, 2: the same."""
        if len({None if v is None else round(v, 6) for v in self.scores.values()}) > 1:
            return 0
        return 1 if len(set(self.answers.values())) > 1 else 2


class EvalResult(ResultMixin, BaseModel):
    workspace: str
    target: str
    scorer: str  # "reward <classpath>" | "exact_match" | "none"
    models: list[ModelScore]
    rows: list[RowResult]
    seconds: float = 0.0

    def model(self, name: str) -> ModelScore:
        return next(m for m in self.models if m.model == name)

    def ordered_rows(self) -> list[RowResult]:
        """Rows where the models differ first (then by row number)."""
        return sorted(self.rows, key=lambda r: (r.rank, r.index))

    def to_payload(self) -> dict[str, Any]:
        return {
            "models": [
                {"model": m.model, "n": m.n, "reward_mean": m.reward_mean, "metrics": m.metrics}
                for m in self.models
            ],
            "rows": [r.model_dump(mode="json") for r in self.ordered_rows()],
            "scorer": self.scorer,
            "workspace": self.workspace,
        }

    def summary(self) -> str:
        parts = [f"{m.model}: reward_mean {render.fmt(m.reward_mean)} (n={m.n})" for m in self.models]
        differ = sum(r.differs for r in self.rows)
        return f"{'; '.join(parts)}; {differ} of {len(self.rows)} rows differ ({self.scorer})"

    def __str__(self) -> str:
        return self.summary()

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        summary = []
        for m in self.models:  # cells are Text: model names and answers are never rich markup
            metrics = ", ".join(f"{k}={render.fmt(v)}" for k, v in m.metrics.items())
            summary.append(
                [
                    Text(m.model),
                    Text(str(m.n)),
                    Text(render.fmt(m.reward_mean)),
                    Text(metrics),
                    Text(str(m.failed)),
                ]
            )
        # a model's name is what `opd chat`/`opd deploy` take: never cut (terminal_table)
        top = WholeNamesTable(
            ("model", "n", "reward_mean", "metrics", "failed"),
            summary,
            whole=(0,),
            title=f"eval of {self.workspace} ({self.scorer})",
        )
        rows = Table(title="rows (where the models differ first)")
        for name in ("#", "prompt", "solution", *(m.model for m in self.models)):
            rows.add_column(name, overflow="fold")  # a narrow terminal wraps a model's name, never cuts it
        for r in self.ordered_rows():
            cells = [
                Text(str(r.index)),
                Text(r.prompt[:60]),
                Text(str(r.solution) if r.solution is not None else ""),
            ]
            for m in self.models:
                score = render.fmt(r.scores.get(m.model))
                cells.append(Text(f"{score}  {r.errors.get(m.model) or r.answers.get(m.model, '')}"[:80]))
            rows.add_row(*cells)
        return Group(top, rows)

    def _repr_html_(self) -> str:
        return eval_html(self)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _summaries(models: Sequence[str], rows: Sequence[RowResult]) -> list[ModelScore]:
    out = []
    for model in models:
        scores = [score for r in rows if (score := r.scores.get(model)) is not None]
        keys = sorted({k for r in rows for k in (r.metrics.get(model) or {})})
        metrics = {  # each key is some row's, so no mean is of nothing
            k: mean
            for k in keys
            if (mean := _mean([r.metrics[model][k] for r in rows if k in (r.metrics.get(model) or {})]))
            is not None
        }
        failed = sum(model in r.errors for r in rows)
        out.append(
            ModelScore(model=model, n=len(scores), reward_mean=_mean(scores), metrics=metrics, failed=failed)
        )
    return out


def eval_html(result: EvalResult, *, max_rows: int = 200) -> str:
    """The side-by-side view as static HTML: the models' means, then each row's answers and scores,
    the rows where the models differ first (a saved notebook keeps it)."""
    best = max((m.reward_mean for m in result.models if m.reward_mean is not None), default=None)
    head = []
    for m in result.models:
        mean = render.esc(render.fmt(m.reward_mean))
        mark = (
            f'<b class="ok">{mean}</b>'
            if best is not None and m.reward_mean == best and len(result.models) > 1
            else mean
        )
        metrics = ", ".join(f"{render.esc(k)}={render.esc(render.fmt(v))}" for k, v in m.metrics.items())
        head.append((render.esc(m.model), m.n, mark, metrics, m.failed))
    summary = render.table(["model", "n", "reward_mean", "metrics", "failed"], head, raw_cols=(0, 2, 3))
    body = []
    for r in result.ordered_rows()[:max_rows]:
        cells: list[Any] = [
            r.index,
            render.esc(r.prompt),
            render.esc("" if r.solution is None else r.solution),
        ]
        top = max((v for v in r.scores.values() if v is not None), default=None)
        for m in result.models:
            score = r.scores.get(m.model)
            cls = (
                "ok" if r.rank == 0 and score is not None and score == top else ("bad" if r.rank == 0 else "")
            )
            text = r.errors.get(m.model) or r.answers.get(m.model, "")
            cells.append(
                f'<b class="{cls}">{render.esc(render.fmt(score))}</b> <code>{render.esc(text)}</code>'
            )
        cells.append('<span class="warn">differs</span>' if r.differs else "")
        body.append(cells)
    n_models = len(result.models)
    columns = ["#", "prompt", "solution", *[m.model for m in result.models], ""]
    table = render.table(columns, body, raw_cols=(1, 2, *range(3, 4 + n_models)), text_cols=(1, 2))
    differ = sum(r.differs for r in result.rows)
    note = (
        f"<small>{differ} of {len(result.rows)} rows differ; scored with {render.esc(result.scorer)}</small>"
    )
    return render.box(summary + note + table, title=f"eval of {result.workspace}")


# ---- running it ------------------------------------------------------------------------------------
def _max_tokens(workspace: Path) -> int | None:
    """Answers get the room training gave them: max_length - max_prompt_length, when both are set."""
    config = _config(workspace)
    hp = config.hyper_parameters if config else {}
    try:
        return max(16, int(hp["max_length"]) - int(hp["max_prompt_length"]))
    except (KeyError, TypeError, ValueError):
        return None


def calls_needed(workspace: str | Path, models: Sequence[str], rows: int | None = None) -> int:
    """How many chat calls :func:`evaluate` makes (one per row and model): what `--cloud` asks about."""
    return len(load_rows(workspace, rows)) * len(models)


EVAL_WARNING = (  # in words every surface shares: deploying is a paid start of its own
    "a fine-tuned model answers only once deployed (a paid deployment of its own); pass its deployed_model "
    "name as the model"
)


def eval_size(
    workspace: str | Path, models: Sequence[str], rows: int | None, max_tokens: int | None = None
) -> dict[str, Any]:
    """The calls an evaluation makes and their bounds (:func:`opd_nb.paid.start_size.eval_size`), read
    from the workspace as :func:`evaluate` reads it: what its consent shows."""
    from opd_nb.paid.start_size import eval_size as size

    limit = max_tokens if max_tokens is not None else _max_tokens(Path(workspace))
    return size(list(models), len(load_rows(workspace, rows)), limit)


def require_eval_consent(
    target_kind: str,
    workspace: str | Path,
    models: Sequence[str],
    rows: int | None,
    yes: bool,
    max_tokens: int | None = None,
) -> str | None:
    """On Bailian every row is a paid call: without `yes` an OpdError (code needs-confirmation) names the
    models and the calls, and nothing is sent; with it, the notice to show. None on a local target."""
    from opd_nb.paid.consent import is_paid, require_consent
    from opd_nb.paid.start_size import eval_line

    if not is_paid(target_kind):
        return None
    notice = eval_line(eval_size(workspace, models, rows, max_tokens))
    fix = "rerun with --yes to make these calls (a fine-tuned model first: `opd deploy MODEL --cloud --yes`)"
    require_consent(target_kind, yes, notice, fix=fix, warnings=[EVAL_WARNING])
    return f"{notice}. {EVAL_WARNING}"


def deploy_fix(model: str, cloud: bool) -> str:
    where = " --cloud" if cloud else ""
    return (
        f"a fine-tuned model answers only once deployed: `opd deploy {model}{where}` "
        "(Deployments.call), wait until `opd deployments` says RUNNING, then pass the deployed_model "
        "name to --model"
    )


class AnswerScorer:
    """The workspace's reward (the job YAML `config`'s) in a function server (the training path), else
    exact match."""

    def __init__(self, workspace: Path, config: str = "config.yaml"):
        self.fn = reward_function(workspace, config)
        self.server: Any = None
        self.name = f"reward {self.fn.classpath}" if self.fn else EXACT_MATCH
        self._lock = threading.Lock()

    def start(self) -> None:
        if self.fn is not None and self.server is None:
            from opd_nb.functions.server import FunctionServer

            self.server = FunctionServer.start(self.fn.code_dir, "reward", self.fn.classpath, env=self.fn.env)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def score(
        self, row: dict[str, Any], answer: str, model: str, index: int
    ) -> tuple[float | None, dict, str | None]:
        """(score, reward_metrics, error)."""
        solution = _solution(row)
        if self.server is None or self.fn is None:  # no reward function: exact match
            if solution is None:
                return None, {}, None
            hit = float(clean_answer(answer) == clean_answer(str(solution)))
            return hit, {EXACT_MATCH: hit}, None
        return self._reward(row, answer, model, index)

    def _reward(
        self, row: dict[str, Any], answer: str, model: str, index: int
    ) -> tuple[float | None, dict, str | None]:
        """The workspace's reward function's (score, metrics, error) for one answer (started first)."""
        conversation = [*prompt_messages(row), {"role": "assistant", "content": answer}]
        return self.score_conversation(row, conversation, model, index, job_id="opd-eval")

    def score_conversation(
        self, row: dict[str, Any], messages: list[dict[str, Any]], rollout_id: str, index: int, *, job_id: str
    ) -> tuple[float | None, dict, str | None]:
        """The reward function's (score, metrics, error) for a whole conversation (a rollout's
        trajectory, or a prompt and its answer), sent as a training job sends it (started first)."""
        from opd_nb.functions import reward_call

        if self.server is None or self.fn is None:
            raise RuntimeError("the reward function's server is not started: call start() first")
        url, timeout = self.server.url, self.fn.timeout
        request = reward_call.reward_request(
            messages,
            row.get("rollout_extra") or {},
            _solution(row),
            job_id=job_id,
            sample_id=str(index),
            rollout_id=rollout_id,
        )
        send = reward_call.post_once(url)
        (outcome,) = reward_call.call(send, request, timeout, url=url)
        return outcome.score, outcome.numeric_metrics, outcome.error


def evaluate(
    workspace: str | Path,
    models: Sequence[str],
    *,
    client: Any = None,
    rows: int | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    max_tokens: int | None = None,
    progress: Progress | None = None,
    yes: bool = False,
) -> EvalResult:
    """Answer every validation row with every model (greedy) and score the answers (see the module).

    On Bailian every row is a paid call: without `yes` nothing is sent (:func:`require_eval_consent`),
    whichever front end calls this."""
    ws = Path(workspace)
    models = list(dict.fromkeys(m.strip() for m in models if m and m.strip()))
    if not models:
        raise OpdError(
            "no model to evaluate", fix="pass --model MODEL (twice to compare, e.g. trained and base)"
        )
    if client is None:
        from opd_nb.client import JobClient

        client = JobClient()
    require_eval_consent(client.target.kind, ws, models, rows, yes, max_tokens)
    data = load_rows(ws, rows)
    limit = max_tokens if max_tokens is not None else _max_tokens(ws)
    scorer = AnswerScorer(ws)
    started = time.monotonic()
    results = [
        RowResult(index=i, prompt=_user_text(prompt_messages(r)), solution=_solution(r))
        for i, r in enumerate(data)
    ]
    scorer.start()
    try:
        _run_calls(client, models, data, results, scorer, limit, max(1, concurrency), progress)
    finally:
        scorer.stop()
    return EvalResult(
        workspace=str(ws),
        target=f"{client.target.kind} {client.target.base_url}",
        scorer=scorer.name
        if (scorer.server is not None or any(_solution(r) is not None for r in data))
        else "none",
        models=_summaries(models, results),
        rows=results,
        seconds=time.monotonic() - started,
    )


def _run_calls(
    client: Any,
    models: list[str],
    data: list[dict[str, Any]],
    results: list[RowResult],
    scorer: AnswerScorer,
    limit: int | None,
    concurrency: int,
    progress: Progress | None,
) -> None:
    total, done = len(models) * len(data), 0
    stop = threading.Event()

    def one(model: str, i: int) -> None:
        if stop.is_set():
            return
        row, out = data[i], results[i]
        try:
            reply = client.chat(
                model, prompt_messages(row), max_tokens=limit, temperature=0.0, seed=0, tools=row.get("tools")
            )
        except OpdError as exc:
            if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                stop.set()  # a model that is not there, or not deployed: every row would say the same
                raise _model_error(exc, model, client) from None
            out.errors[model] = str(exc)
            out.scores[model] = None
            return
        out.answers[model] = reply.content
        score, metrics, error = scorer.score(row, reply.content, model, i)
        out.scores[model] = score
        if metrics:
            out.metrics[model] = metrics
        if error:
            out.errors[model] = error

    if progress is not None:
        progress(0, total)  # the calls start now (the reward's function server is up)
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="opd-eval") as pool:
        futures = [pool.submit(one, m, i) for m in models for i in range(len(data))]
        try:
            for fut in as_completed(futures):
                fut.result()
                done += 1
                if progress is not None:
                    progress(done, total)
        except BaseException:
            stop.set()
            for fut in futures:
                fut.cancel()
            raise


def _model_error(exc: OpdError, model: str, client: Any) -> OpdError:
    cloud = client.target.kind == "cloud"
    if exc.code in ("ModelNotDeployed", "DeploymentNotReady") or (cloud and exc.status in (400, 404)):
        fix = deploy_fix(model, cloud)
    else:
        fix = exc.fix or "pass a base model id or a deployed name (`opd deployments` lists them)"
    return OpdError(f"cannot evaluate {model}: {exc.message}", fix=fix, status=exc.status, code=exc.code)
