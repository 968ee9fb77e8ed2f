"""Tools before and after a job: create a workspace, check, estimate, probe; export, deploy, undeploy, chat,
evaluate (deploy and a cloud evaluation or probe are paid: two calls), report to trackers."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from opd_nb.agent.models import ExportResult, Paid
from opd_nb.agent.planes import (
    STATE,
    BaseUrlArg,
    ConfigArg,
    IdArg,
    JobIdArg,
    PathArg,
    TargetArg,
    TextArg,
    TokenArg,
    WorkspaceArg,
    client_for,
    tool_errors,
)
from opd_nb.agent.tools_jobs import paid
from opd_nb.checks.report import Finding
from opd_nb.client.deploy_results import ChatReply, Deployment
from opd_nb.experiments.evaluation import EvalResult
from opd_nb.experiments.probe_result import ProbeResult
from opd_nb.paid.estimate import Estimate
from opd_nb.trackers.records import ReportResult
from opd_nb.workspace.new import Workspace

Tracker = Literal["trackio", "wandb", "tensorboard", "mlflow"]


class CheckResult(BaseModel):
    """`opd check`: ok when no finding is an error; each finding has its rule, where, and fix."""

    ok: bool
    errors: int
    warnings: int
    findings: list[Finding]


@tool_errors
def new_workspace(
    mode: Annotated[Literal["pure-distill", "reward", "agentic"], Field(description="the OPD mode")],
    dest: Annotated[PathArg, Field(description="folder to create (must not exist, or be empty)")],
    name: IdArg | None = None,
    student: Annotated[IdArg | None, Field(description="student model id")] = None,
    teacher: Annotated[IdArg | None, Field(description="teacher model id")] = None,
    with_reward: Annotated[bool | None, Field(description="agentic only: add a reward function")] = None,
) -> Workspace:
    """Create a workspace (`opd new`): config.yaml, data, submit_job.py, tests, the mode's functions."""
    from opd_nb.workspace.new import create

    return create(mode, dest, name=name, student=student, teacher=teacher, with_reward=with_reward)


@tool_errors
def check(
    workspace: WorkspaceArg = ".",
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
    config: ConfigArg = "config.yaml",
) -> CheckResult:
    """Every preflight rule over config, data, functions and environment (`opd check`); read-only.
    Whose rules: the plane the other tools use by default (`opd mcp --local`: local). The
    preflight-rules resource lists every rule with its fix."""
    from opd_nb.checks import check as run_check
    from opd_nb.client import resolve_target

    kind = resolve_target(target, base_url=base_url, workspace=workspace).kind  # the tools' one default
    report = run_check(workspace, kind, base_url=base_url, config=config)
    return CheckResult(ok=report.ok, errors=len(report.errors), warnings=len(report.warnings),
                       findings=report.findings)  # fmt: skip


@tool_errors
def estimate(
    workspace: WorkspaceArg = ".",
    config: ConfigArg = "config.yaml",
    smoke: Annotated[int | None, Field(ge=0, description="size the smoke run of N rows (0: default)")] = None,
    sets: Annotated[dict[str, Any] | None, Field(description="as submit's sets")] = None,
    price: Annotated[float | None, Field(gt=0, description="money per training unit per hour")] = None,
) -> Estimate:
    """Size the job before it starts (`opd estimate`): steps, rollouts, evaluations, token bounds,
    reward calls, units held per hour, money with a price. Never guesses wall-clock time."""
    from opd_nb.paid.estimate import estimate as size

    return size(workspace, config=config, price=price, smoke=smoke, sets=dict(sets or {}))


@tool_errors
def export_checkpoint(
    job_id: JobIdArg,
    checkpoint: Annotated[IdArg, Field(description="checkpoint-N, JOB:checkpoint-N or the step number")],
    model_name: Annotated[IdArg | None, Field(description="a display name")] = None,
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
) -> ExportResult:
    """Export a checkpoint as a deployable model (`opd export`); deploy it by its model_name."""
    cp = client_for(target, base_url).export_checkpoint(job_id, checkpoint, model_name=model_name)
    return ExportResult(checkpoint=cp.name, model_name=cp.model_name,
                        next_step=f"deploy(model={cp.model_name!r})")  # fmt: skip


@tool_errors
def deploy(
    model: Annotated[
        IdArg, Field(description="opd-local/<job_id>, an exported model_name, a checkpoint, a base model")
    ],
    capacity: Annotated[int, Field(ge=1)] = 1,
    suffix: IdArg | None = None,
    plan: Annotated[
        Literal["lora", "ptu", "mu"] | None, Field(description="Bailian's plan (default lora)")
    ] = None,
    deploy_spec: Annotated[
        dict[str, Any] | None, Field(description='ptu: {"input_tpm": N, "output_tpm": N}')
    ] = None,
    billing_method: Annotated[Literal["POST_PAY", "PRE_PAY"] | None, Field(description="mu only")] = None,
    wait: Annotated[bool, Field(description="return at RUNNING (else at once, PENDING)")] = True,
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
    confirmation_token: TokenArg = None,
) -> Paid[Deployment]:
    """Deploy a model (`opd deploy`). A Bailian deployment costs money while it runs: the first call
    sends nothing and returns the summary and a confirmation_token; stop it with `undeploy`."""
    from opd_nb.paid.start_size import deploy_size, deploy_warnings
    from opd_nb.wire.deploy_plans import check_plan

    client = client_for(target, base_url)
    check_plan(plan, deploy_spec, billing_method)  # before anything is sent, and before consent

    def start(yes: bool, request_id: str | None) -> Deployment:
        dep = client.deploy(model, capacity=capacity, suffix=suffix, plan=plan, deploy_spec=deploy_spec,
                            billing_method=billing_method, yes=yes, request_id=request_id)  # fmt: skip
        return _waited(client, dep) if wait else dep

    def find(request_id: str) -> Deployment | None:  # a resend: the create named by its suffix
        return client.find_deployment(suffix or request_id)

    def preview() -> dict[str, Any]:
        size = deploy_size(model, plan, capacity)
        body = {"model_name": model, "capacity": capacity, "suffix": suffix or "<the confirmation's request id>",
                "plan": plan, "deploy_spec": deploy_spec, "billing_method": billing_method}  # fmt: skip
        request = {
            "method": "POST",
            "path": "/deployments",
            "body": {k: v for k, v in body.items() if v is not None},
        }
        return {"warnings": deploy_warnings(size), "estimate": size, "request": request}

    arguments = {"model": model, "capacity": capacity, "suffix": suffix, "plan": plan,
                 "deploy_spec": deploy_spec, "billing_method": billing_method}  # fmt: skip
    return paid(STATE, "deploy", client, arguments, None, start, confirmation_token, preview, find)


def _waited(client: Any, dep: Deployment) -> Deployment:
    """The deployment once RUNNING, keeping what the client noted on the create (a lost answer found)."""
    running = client.wait_deployed(dep.deployed_model)
    running.notes = [*dep.notes, *running.notes]
    return running


@tool_errors
def undeploy(name: IdArg, target: TargetArg = None, base_url: BaseUrlArg = None) -> Deployment:
    """Stop a deployment (`opd undeploy`): on Bailian its billing stops."""
    return client_for(target, base_url).undeploy(name)


@tool_errors
def chat(
    model: Annotated[IdArg, Field(description="a deployed_model name, or a base model id")],
    message: TextArg,
    system: TextArg | None = None,
    max_tokens: Annotated[int | None, Field(ge=1)] = None,
    temperature: Annotated[float | None, Field(ge=0.0, le=2.0)] = None,
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
) -> ChatReply:
    """One message to a model through the chat API (`opd chat`); on Bailian each call is billed."""
    messages = [
        *([{"role": "system", "content": system}] if system else []),
        {"role": "user", "content": message},
    ]
    return client_for(target, base_url).chat(model, messages, max_tokens=max_tokens, temperature=temperature)


@tool_errors
def evaluate(
    workspace: WorkspaceArg,
    models: Annotated[
        list[IdArg], Field(min_length=1, description="models to compare, e.g. trained and base")
    ],
    rows: Annotated[int | None, Field(ge=1, description="only the first N validation rows")] = None,
    concurrency: Annotated[int, Field(ge=1, le=64)] = 8,
    max_tokens: Annotated[int | None, Field(ge=1)] = None,
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
    confirmation_token: TokenArg = None,
) -> Paid[EvalResult]:
    """Answer the workspace's validation rows with each model and score them with its reward (`opd
    eval`). On Bailian every row is a paid call: two calls, as `submit`."""
    from opd_nb.experiments.evaluation import EVAL_WARNING, eval_size
    from opd_nb.experiments.evaluation import evaluate as run_eval

    client = client_for(target, base_url, workspace)

    def start(yes: bool, request_id: str | None) -> EvalResult:
        return run_eval(  # on Bailian, refused without `yes` before any call (the core's consent)
            workspace,
            models,
            client=client,
            rows=rows,
            concurrency=concurrency,
            max_tokens=max_tokens,
            yes=yes,
        )

    def preview() -> dict[str, Any]:  # chat calls leave no record to find: a spent token sends nothing again
        size = eval_size(workspace, models, rows, max_tokens)
        per_call = {"model": "<each model>", "messages": "<each validation row's prompt>",
                    "max_tokens": size["max_tokens"], "temperature": 0.0, "seed": 0}  # fmt: skip
        request = {"method": "POST", "path": "/chat/completions", "calls": size["calls"], "body": per_call}
        return {"warnings": [EVAL_WARNING], "estimate": size, "request": request}

    arguments = {"models": models, "rows": rows, "concurrency": concurrency, "max_tokens": max_tokens}
    return paid(STATE, "evaluate", client, arguments, workspace, start, confirmation_token, preview)


@tool_errors
def probe(
    workspace: WorkspaceArg,
    prompts: Annotated[
        int, Field(ge=1, description="prompts drawn (seeded) from validation, else training")
    ] = 32,
    samples: Annotated[int, Field(ge=1, description="answers per prompt and model")] = 4,
    seed: int = 0,
    budget: Annotated[IdArg | None, Field(description="cap: N calls (64) or tokens (20000tokens)")] = None,
    price: Annotated[float | None, Field(gt=0, description="money per million tokens")] = None,
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
    config: ConfigArg = "config.yaml",
    confirmation_token: TokenArg = None,
) -> Paid[ProbeResult]:
    """Before the first job (`opd probe`): sample the teacher and the student on the workspace's prompts,
    score them with its reward as a job does, and say whether OPD can help (verdicts with evidence).
    On Bailian every call is billed per token: two calls, as `submit`."""
    from opd_nb.experiments.probe import probe as run_probe

    client = client_for(target, base_url, workspace)

    def start(yes: bool, _request_id: str | None) -> ProbeResult:  # chat calls: nothing a plane names by it
        return run_probe(workspace, config=config, client=client, prompts=prompts, samples=samples,
                         seed=seed, budget=budget, price=price, yes=yes)  # fmt: skip

    arguments = {
        "config": config,
        "prompts": prompts,
        "samples": samples,
        "seed": seed,
        "budget": budget,
        "price": price,
    }
    return paid(STATE, "probe", client, arguments, workspace, start, confirmation_token)


@tool_errors
def report(
    job_id: JobIdArg,
    to: Annotated[list[Tracker], Field(min_length=1, description="the trackers to write the job to")],
    project: Annotated[IdArg | None, Field(description="trackio/W&B project, MLflow experiment")] = None,
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
) -> ReportResult:
    """Write a job to experiment trackers (`opd report --to`): every metric at the job's global step,
    its config, sample tables, alerts and final status. Local and offline by default."""
    from opd_nb.trackers import DEFAULT_PROJECT, parse_report_to, report_job

    with client_for(target, base_url) as client:
        return report_job(client, job_id, parse_report_to(list(to)), project=project or DEFAULT_PROJECT)


TOOLS = (
    new_workspace,
    check,
    estimate,
    export_checkpoint,
    deploy,
    undeploy,
    chat,
    evaluate,
    probe,
    report,
)  # registered by opd_nb.agent.server, in this order
