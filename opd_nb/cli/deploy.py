"""`opd deploy|deployments|undeploy|chat`: serve a model and talk to it, on `opd serve` or on Bailian.

The same calls on both control planes (Bailian's deployment API and its compatible-mode chat API);
``--local [URL]`` / ``--cloud`` pick the target as for the job commands. ``chat`` returns a
:class:`ChatRequest`: a terminal answers one message or chats on stdin, the notebook opens the chat
widget; the other commands return their typed results.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import echo, emit, note, print_result, write
from opd_nb.cli.intents import ChatRequest
from opd_nb.cli.jobs import CloudOpt, JsonOpt, TargetOpt, _client
from opd_nb.errors import OpdError

CLOUD_DEPLOY_NOTE = (
    "note: a Bailian deployment costs money for as long as it runs; stop it with `opd undeploy NAME --cloud`"
)
CLOUD_CHAT_NOTE = "note: on Bailian every message is a paid model call"
MaxTokensOpt = Annotated[int | None, typer.Option("--max-tokens", min=1, help="longest answer in tokens")]
TemperatureOpt = Annotated[
    float | None, typer.Option("--temperature", min=0.0, max=2.0, help="sampling temperature (0: greedy)")
]
SystemOpt = Annotated[str | None, typer.Option("--system", help="a system message before the conversation")]


@app.command("deploy")
def deploy_cmd(
    model: Annotated[
        str, typer.Argument(help="what to deploy: opd-local/<job_id>, a checkpoint path, a model id")
    ],
    capacity: Annotated[
        int, typer.Option(min=1, help="instances (locally: one process; sizes its batch)")
    ] = 1,
    suffix: Annotated[str | None, typer.Option(help="name suffix: the deployment is MODEL-SUFFIX")] = None,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="return at once (PENDING) instead of at RUNNING")
    ] = False,
    plan: Annotated[
        str | None,
        typer.Option("--plan", help="lora (token-billed, default) | ptu (needs TPMs) | mu (model units)"),
    ] = None,
    deploy_spec: Annotated[
        str | None,
        typer.Option(
            "--deploy-spec", metavar="JSON", help='ptu: {"input_tpm": N, "output_tpm": N}; mu: its spec'
        ),
    ] = None,
    billing_method: Annotated[
        str | None, typer.Option("--billing-method", help="mu: POST_PAY or PRE_PAY")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="confirm a paid deployment on Bailian")] = False,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    as_json: JsonOpt = False,
) -> Any:
    """Deploy a model (a finished job's output, an exported checkpoint, a base model) and wait until it runs."""
    from opd_nb.wire.deploy_plans import parse_deploy_spec

    client = _client(local, cloud)
    spec = parse_deploy_spec(deploy_spec)
    # The client checks the plan, then the consent (`--yes`), before anything is sent.
    how = {"plan": plan, "deploy_spec": spec, "billing_method": billing_method}
    if client.target.kind == "cloud" and yes:  # said before the paid call, not after it
        echo(CLOUD_DEPLOY_NOTE, err=True)
    dep = client.deploy(model, capacity=capacity, suffix=suffix, yes=yes, **how)
    for line in dep.notes:  # a lost answer found again: said before the wait
        echo(f"note: {line}", err=True)
    if not no_wait:
        if not as_json:
            note(f"deploying {dep.deployed_model} ...")
        dep = client.wait_deployed(dep.deployed_model).model_copy(update={"notes": dep.notes})
    return emit(dep, as_json=as_json)


@app.command("deployments")
def deployments_cmd(
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    page: Annotated[int, typer.Option(min=1, help="page number")] = 1,
    size: Annotated[int, typer.Option(min=1, max=100, help="deployments per page")] = 20,
    as_json: JsonOpt = False,
) -> Any:
    """List deployments, newest first."""
    return emit(_client(local, cloud).deployments(page=page, size=size), as_json=as_json)


@app.command("undeploy")
def undeploy_cmd(
    name: Annotated[str, typer.Argument(help="the deployed_model name (`opd deployments` lists them)")],
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    as_json: JsonOpt = False,
) -> Any:
    """Stop a deployment (calls to it then say it was deleted)."""
    return emit(_client(local, cloud).undeploy(name), as_json=as_json)


@app.command("chat")
def chat_cmd(
    name: Annotated[str, typer.Argument(help="a deployed_model name, or a base model id")],
    message: Annotated[
        str | None, typer.Argument(help="one message (without it: an interactive chat)")
    ] = None,
    system: SystemOpt = None,
    max_tokens: MaxTokensOpt = None,
    temperature: TemperatureOpt = None,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    as_json: JsonOpt = False,
) -> Any:
    """Chat with a model through the chat API: one message, or interactively (a widget in a notebook)."""
    client = _client(local, cloud)
    if client.target.kind == "cloud":
        note(CLOUD_CHAT_NOTE)
    params = {"max_tokens": max_tokens, "temperature": temperature}
    request = ChatRequest(model=name, target=client.target, message=message, system=system, **params)
    return emit(request, present=lambda: _chat_here(client, request, as_json))


def _chat_here(client: Any, request: ChatRequest, as_json: bool) -> None:
    """The terminal's chat: one message answered as it streams (or as JSON), else a chat on stdin."""
    name, message = request.model, request.message
    history = [{"role": "system", "content": request.system}] if request.system else []
    params = {"max_tokens": request.max_tokens, "temperature": request.temperature}
    if message is None:
        _interactive(client, name, history, params)
    elif as_json:
        print_result(
            client.chat(name, [*history, {"role": "user", "content": message}], **params), as_json=True
        )
    else:
        _stream_answer(client, name, [*history, {"role": "user", "content": message}], params)


def _stream_answer(client: Any, name: str, messages: list[dict], params: dict) -> str:
    """Print the answer as it comes (plain text: never read as markup); returns it."""
    pieces = []
    for piece in client.chat_stream(name, messages, **params):
        pieces.append(piece)
        write(piece)
    write("\n")
    return "".join(pieces)


def _interactive(client: Any, name: str, history: list[dict], params: dict) -> None:
    echo(f"chatting with {name} (empty line or Ctrl-D to quit, /reset to start over)", err=True)
    system = list(history)
    while True:
        try:
            line = input("you> ")
        except (EOFError, KeyboardInterrupt):
            echo("", err=True)
            return None
        if not line.strip():
            return None
        if line.strip() == "/reset":
            history[:] = system
            echo("(history cleared)", err=True)
            continue
        history.append({"role": "user", "content": line})
        write(f"{name}> ")
        try:
            answer = _stream_answer(client, name, history, params)
        except OpdError as exc:
            history.pop()
            echo(f"error: {exc}", err=True)
            continue
        history.append({"role": "assistant", "content": answer})
