"""`opd submit|jobs|status|logs|watch|cancel|delete`: job commands over the shared job client."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from opd_nb import settings
from opd_nb.cli._app import app
from opd_nb.cli._argv import LOCAL_DEFAULT as _LOCAL_DEFAULT
from opd_nb.cli._output import config_sets, echo, emit, note, print_result
from opd_nb.cli._secrets import NOTIFY_SECRET, NOTIFY_URL, secret
from opd_nb.cli.intents import WatchRequest
from opd_nb.cli.watch import POLL_S, Hooks, wait_reporting_alerts, watch_terminal
from opd_nb.constants import SUCCEEDED
from opd_nb.errors import OpdError
from opd_nb.health.rules import GuardThresholds, best_checkpoint_line
from opd_nb.watching.contact import RECONNECT_MINUTES
from opd_nb.watching.notify import SECRET_VAR as NOTIFY_SECRET_VAR
from opd_nb.watching.notify import URL_VAR as NOTIFY_URL_VAR
from opd_nb.workspace.connection import LOCAL_URL_RULE

# `--local` takes an optional URL; opd_nb.cli._argv.normalize() fills in the default before parsing.
TargetOpt = Annotated[
    str | None,
    typer.Option("--local", metavar="[URL]", help=f"use a local `opd serve` [default: {LOCAL_URL_RULE}]"),
]
CloudOpt = Annotated[bool, typer.Option("--cloud", help="use Bailian (key from DASHSCOPE_API_KEY or .env)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
YesOpt = Annotated[bool, typer.Option("--yes", help="start a paid job on Bailian (needed with --cloud)")]
# `opd watch`'s guard, notify and meter options (defaults: opd_nb.health.rules.GuardThresholds).
GuardOpt = Annotated[bool, typer.Option("--guard", help="cancel the job when an error health rule fires")]
VtrStepsOpt = Annotated[
    int, typer.Option("--guard-valid-token-steps", min=1, help="valid_token_rate < 1 for K steps")
]
RewardFailuresOpt = Annotated[
    float, typer.Option("--guard-reward-failures", min=0.0, max=1.0, help="reward failure rate at or above")
]
LossFactorOpt = Annotated[
    float, typer.Option("--guard-loss-factor", min=1.0, help="|loss| above this x max(|first loss|, 1)")
]
ZeroVarianceOpt = Annotated[
    int,
    typer.Option("--guard-zero-variance-evals", min=1, help="every group zero-variance for N evaluations"),
]
NotifyOpt = Annotated[
    str | None,
    typer.Option(
        "--notify",
        metavar="URL",
        envvar=NOTIFY_URL_VAR,
        show_envvar=False,
        help=f"post each alert and the final status to this webhook (never printed): better ${NOTIFY_URL_VAR} "
        "or --notify-file, as `ps` shows a URL typed here and the URL holds the robot's token",
    ),
]
NotifyFileOpt = Annotated[
    Path | None,
    typer.Option("--notify-file", metavar="PATH", help=NOTIFY_URL.file_help("the webhook URL")),
]
NotifyFormatOpt = Annotated[
    str | None,
    typer.Option("--notify-format", help="dingtalk|feishu|wecom|slack|json (default: from the URL)"),
]
NotifySecretOpt = Annotated[
    str | None,
    typer.Option(
        "--notify-secret",
        metavar="SECRET",
        envvar=NOTIFY_SECRET_VAR,
        show_envvar=False,
        help="the signing secret of a DingTalk or Feishu/Lark robot with the signature setting (never "
        f"printed): better ${NOTIFY_SECRET_VAR} or --notify-secret-file, as `ps` shows a secret typed here",
    ),
]
NotifySecretFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--notify-secret-file", metavar="PATH", help=NOTIFY_SECRET.file_help("the robot's signing secret")
    ),
]
ReconnectOpt = Annotated[
    float,
    typer.Option(
        "--reconnect-minutes",
        min=0.0,
        help="when the control plane stops answering, keep trying this long (saying so once, and once "
        "when it is back) before giving up; 0: give up at once",
    ),
]
PriceOpt = Annotated[
    float | None,
    typer.Option(
        "--price", help=f"money per unit-hour for the meter {settings.PRICE_PER_UNIT_HOUR.flag_default()}"
    ),
]
NoCheckOpt = Annotated[
    bool, typer.Option("--no-check", help="skip the preflight rules (`opd check`) that run before a submit")
]

ReportToOpt = Annotated[
    str | None,
    typer.Option(
        "--report-to",
        metavar="TRACKERS",
        help="also write the job to trackio, wandb, tensorboard and/or mlflow (comma-separated) as it runs",
    ),
]

SmokeOpt = Annotated[
    int | None,
    typer.Option(
        "--smoke",
        metavar="[N]",
        min=0,
        help="a small first run: N sampled training rows (default: two steps' worth), one epoch, "
        "a few validation rows, job name +-smoke; data/ is not edited",
    ),
]


def _client(local: str | None, cloud: bool, workspace: Path | None = None) -> Any:
    from opd_nb.client import JobClient, resolve_target

    if local and cloud:
        raise OpdError("--local and --cloud are exclusive")
    if local:
        target = resolve_target(
            "local", base_url=None if local == _LOCAL_DEFAULT else local, workspace=workspace
        )
    else:
        target = resolve_target("cloud" if cloud else None, workspace=workspace)
    return JobClient(target)


def _exit_code(job: Any) -> int:
    """A watched job's exit code: 0 only for SUCCEEDED."""
    return 0 if job.status == SUCCEEDED else 1


@app.command("submit")
def submit_cmd(
    workspace: Annotated[Path, typer.Argument(help="workspace folder (default: current folder)")] = Path("."),
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    config: Annotated[
        str, typer.Option("--config", "-c", help="job YAML inside the workspace")
    ] = "config.yaml",
    job_name: Annotated[str | None, typer.Option(help="job name (the service appends -<8 hex>)")] = None,
    teacher_model: Annotated[str | None, typer.Option(help="teacher model id (overrides config)")] = None,
    model: Annotated[str | None, typer.Option(help="student model id (overrides config)")] = None,
    no_reward: Annotated[bool, typer.Option("--no-reward", help="submit without reward functions")] = False,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="register the functions again even if their code is unchanged")
    ] = False,
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="change one config value for this submit only, e.g. learning_rate=2e-6 (a hyper-parameter or "
            "resource by name) or training.hyper_parameters.learning_rate=2e-6 (VALUE is JSON, else text; repeatable)",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="run the preflight and print its findings and the effective job (submit_job.py --dry-run); "
            "send nothing (exit 2 on a preflight error)",
        ),
    ] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="follow the job until it ends")] = False,
    yes: YesOpt = False,
    no_check: NoCheckOpt = False,
    smoke: SmokeOpt = None,
    as_json: JsonOpt = False,
) -> Any:
    """Check, then submit the workspace's job through the dashscope SDK (registers functions, uploads data).

    On Bailian (--cloud) a job is billed: without --yes one line says what would start and nothing is sent.
    """
    from opd_nb.client import dry_run as dry_run_job
    from opd_nb.client import submit

    client = _client(local, cloud, workspace)
    overrides = {"job_name": job_name, "teacher_model": teacher_model, "model": model, "no_reward": no_reward}
    common = {"config": config, "sets": config_sets(sets), "fresh": fresh, "smoke": smoke}
    common.update(no_check=no_check, **overrides)
    if dry_run:
        return emit(dry_run_job(workspace, client.target, **common), as_json=as_json)
    # the gate's warnings go to `note` before sending (the result's notes carry them too)
    result = submit(workspace, client.target, yes=yes, client=client, on_note=note, **common)
    if watch and not as_json:
        return emit(result, present=lambda: _submit_and_watch(client, result))
    return emit(result, as_json=as_json)


def _submit_and_watch(client: Any, result: Any) -> None:
    """`opd submit --watch` in a terminal: the submit line, then the job followed until it ends."""
    echo(str(result))
    with client:
        job = watch_terminal(client, result.job_id, _hooks(client, result.job_id))
    print_result(job)
    raise typer.Exit(_exit_code(job))


@app.command("jobs")
def jobs_cmd(
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    page: Annotated[int, typer.Option(min=1, help="page number")] = 1,
    size: Annotated[int, typer.Option(min=1, max=100, help="jobs per page")] = 20,
    as_json: JsonOpt = False,
) -> Any:
    """List jobs, newest first."""
    return emit(_client(local, cloud).list(page=page, size=size), as_json=as_json)


@app.command("status")
def status_cmd(
    job_id: str, local: TargetOpt = None, cloud: CloudOpt = False, as_json: JsonOpt = False
) -> Any:
    """Show one job."""
    return emit(_client(local, cloud).get(job_id), as_json=as_json)


@app.command("logs")
def logs_cmd(
    job_id: str,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing new lines until the job ends")
    ] = False,
    offset: Annotated[int, typer.Option(min=0, help="first line (1-based)")] = 1,
    lines: Annotated[int, typer.Option(min=1, max=10000, help="lines per page")] = 200,
    search: Annotated[
        str | None, typer.Option("--search", help="only the lines containing this text (case-insensitive)")
    ] = None,
    tail: Annotated[
        int | None, typer.Option("--tail", min=1, help="only the last N (matching) lines")
    ] = None,
    as_json: JsonOpt = False,
) -> Any:
    """Print a job's log (with -f: follow it until the job ends; --search/--tail: filter the whole log)."""
    client = _client(local, cloud)
    if search is not None or tail is not None:
        if follow:
            raise OpdError("--follow cannot be combined with --search/--tail", fix="drop one of them")
        from opd_nb.watching.log_search import search_logs

        return emit(search_logs(client, job_id, search, tail), as_json=as_json)
    page = client.logs(job_id, offset=offset, lines=lines)
    if not follow:
        return emit(page, as_json=as_json)
    return emit(page, as_json=as_json, present=lambda: _follow_logs(client, job_id, page, lines))


def _follow_logs(client: Any, job_id: str, page: Any, lines: int) -> None:
    """`opd logs -f` in a terminal: print each page as it comes until the job ends (exit 0 only if it
    succeeded). A caller that takes the result back gets the first page; the notebook's monitor follows."""
    while True:
        for line in page.lines:
            echo(line)
        job = client.get(job_id) if len(page.lines) < lines else None
        if job is not None and job.terminal:
            rest = client.logs(job_id, offset=page.next_offset, lines=10000)
            for line in rest.lines:
                echo(line)
            raise typer.Exit(_exit_code(job))
        if len(page.lines) < lines:
            time.sleep(1.0)
        page = client.logs(job_id, offset=page.next_offset, lines=lines)


@app.command("watch")
def watch_cmd(
    ctx: typer.Context,
    job_id: Annotated[str | None, typer.Argument(help="the job (not needed with --list)")] = None,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    guard: GuardOpt = False,
    vtr_steps: VtrStepsOpt = GuardThresholds.valid_token_steps,
    reward_failures: RewardFailuresOpt = GuardThresholds.reward_failure_rate,
    loss_factor: LossFactorOpt = GuardThresholds.loss_divergence,
    zero_variance_evals: ZeroVarianceOpt = GuardThresholds.zero_variance_evals,
    notify: NotifyOpt = None,
    notify_file: NotifyFileOpt = None,
    notify_format: NotifyFormatOpt = None,
    notify_secret: NotifySecretOpt = None,
    notify_secret_file: NotifySecretFileOpt = None,
    reconnect_minutes: ReconnectOpt = RECONNECT_MINUTES,
    price: PriceOpt = None,
    report_to: ReportToOpt = None,
    detach: Annotated[bool, typer.Option("--detach", help="keep watching in a background process")] = False,
    list_: Annotated[bool, typer.Option("--list", help="list the detached watchers")] = False,
    stop: Annotated[bool, typer.Option("--stop", help="stop the detached watcher of JOB")] = False,
    as_json: JsonOpt = False,
) -> Any:
    """Follow a job: progress, metrics and health alerts in a terminal, a live widget in a notebook.

    --guard cancels it when an error rule fires (thresholds below); --notify posts alerts and the end to
    a webhook; --detach keeps watching after the terminal or notebook closes (--list, --stop). A watcher
    whose control plane stops answering keeps trying for --reconnect-minutes, and says so.
    """
    from opd_nb.watching import watchers

    if list_:
        return emit(watchers.list_watchers(), as_json=as_json)
    if job_id is None:
        raise OpdError("which job? pass its id", fix="opd watch JOB (or opd watch --list)")
    if stop:
        return emit(watchers.stop(job_id), as_json=as_json)
    client = _client(local, cloud)
    thresholds = GuardThresholds(vtr_steps, reward_failures, loss_factor, zero_variance_evals)
    notify = secret(ctx, NOTIFY_URL, notify, notify_file)
    notify_secret = secret(ctx, NOTIFY_SECRET, notify_secret, notify_secret_file)
    notifier = _notifier(notify, notify_format, notify_secret)
    hooks = _hooks(client, job_id, thresholds if guard else None, notifier, price, reconnect_minutes)
    if report_to:
        from opd_nb.trackers import Reporter, parse_report_to

        hooks.reporter = Reporter(client, job_id, parse_report_to(report_to))
    if detach:
        return emit(_detach(client, job_id, hooks, notify, notify_secret), as_json=as_json)
    request = WatchRequest(
        job_ids=(job_id,),
        target=client.target,
        guard=thresholds if guard else None,
        report_to=tuple(hooks.reporter.names) if hooks.reporter else (),
        notify=hooks.notifier is not None,
    )
    return emit(request, present=lambda: _watch_here(client, job_id, hooks, as_json))


def _watch_here(client: Any, job_id: str, hooks: Hooks, as_json: bool) -> None:
    """`opd watch` in a terminal: follow the job in the foreground, exit 0 only if it succeeded."""
    with client:  # one connection pool for every poll, closed when the watch ends
        if as_json:
            poll_s = POLL_S if client.target.kind == "local" else 2.0  # a guard acts within a step locally
            job = wait_reporting_alerts(client, job_id, lambda line: echo(line, err=True), hooks, poll_s)
        else:
            job = watch_terminal(client, job_id, hooks)
        if job.status == SUCCEEDED and not as_json:  # ends by naming the best checkpoint (the docs' rule)
            echo(best_checkpoint_line(client.checkpoints(job_id), client.metrics(job_id)))
    print_result(job, as_json=as_json)
    raise typer.Exit(_exit_code(job))


def _notifier(url: str | None, fmt: str | None, secret: str | None) -> Any:
    """The webhook, checked whole before anything starts (one line, exit 2, no URL in it); None without one
    (a secret alone, say an exported $OPD_NOTIFY_SECRET, is then unused)."""
    from opd_nb.watching.notify import Notifier

    return Notifier.create(url, fmt, secret) if url else None


def _hooks(
    client: Any,
    job_id: str,
    thresholds: Any = None,
    notifier: Any = None,
    price: float | None = None,
    reconnect_minutes: float = RECONNECT_MINUTES,
) -> Hooks:
    from opd_nb.health.guard import Guard
    from opd_nb.paid.consent import is_paid
    from opd_nb.paid.estimate import price_from_env
    from opd_nb.watching.meter import Meter

    paid = is_paid(client.target.kind)
    meter = Meter(paid=paid, price=price_from_env(price)) if paid else None
    return Hooks(
        guard=Guard(client, job_id, thresholds) if thresholds is not None else None,
        notifier=notifier,
        meter=meter,
        reconnect_s=reconnect_minutes * 60,
    )


def _detach(client: Any, job_id: str, hooks: Hooks, notify: str | None, secret: str | None) -> Any:
    """The same watch in a detached child; the webhook URL and secret go in its environment, not its argv.

    The job is read first, here: an unknown job or a control plane that is not there fails in the
    user's terminal, not in a log nobody reads."""
    import os

    from opd_nb.watching import watchers
    from opd_nb.watching.notify import SECRET_VAR, URL_VAR

    with client:
        client.get(job_id)
    target = client.target
    argv = [
        "watch",
        job_id,
        "--json",
        *(["--local", target.base_url] if target.kind == "local" else ["--cloud"]),
    ]
    argv += ["--reconnect-minutes", f"{hooks.reconnect_s / 60:g}"]
    options = []
    if hooks.guard is not None:
        t = hooks.guard.thresholds
        argv += ["--guard", "--guard-valid-token-steps", str(t.valid_token_steps),
                 "--guard-reward-failures", str(t.reward_failure_rate), "--guard-loss-factor", str(t.loss_divergence),
                 "--guard-zero-variance-evals", str(t.zero_variance_evals)]  # fmt: skip
        options.append("guard")
    if hooks.reporter is not None:
        argv += ["--report-to", ",".join(hooks.reporter.names)]
        options.append(f"report-to {','.join(hooks.reporter.names)}")
    env = {k: v for k, v in os.environ.items() if k not in (URL_VAR, SECRET_VAR)}
    env.update(target.env())
    if hooks.notifier is not None and notify:
        env[URL_VAR] = notify
        argv += ["--notify-format", hooks.notifier.fmt]
        options.append(f"notify {hooks.notifier.fmt}" + (" signed" if secret else ""))
        if secret:
            env[SECRET_VAR] = secret
    return watchers.start(job_id, argv, env, options)


@app.command("cancel")
def cancel_cmd(
    job_id: str, local: TargetOpt = None, cloud: CloudOpt = False, as_json: JsonOpt = False
) -> Any:
    """Cancel a job (a running local job stops within a few seconds); on Bailian, says what was billed so far."""
    client = _client(local, cloud)
    job = client.cancel(job_id)
    meter = _hooks(client, job_id).meter
    if meter is None or as_json:
        return emit(job, as_json=as_json)
    return emit(job, present=lambda: _billed_then(meter.line(client.get(job_id)), job))


def _billed_then(line: str, job: Any) -> None:
    """A cancel on Bailian in a terminal: what was billed so far, then the job."""
    echo(line)
    print_result(job)


@app.command("delete")
def delete_cmd(job_id: str, local: TargetOpt = None, cloud: CloudOpt = False) -> Any:
    """Delete a finished job from the list."""
    _client(local, cloud).delete(job_id)
    return emit(f"deleted {job_id}")
