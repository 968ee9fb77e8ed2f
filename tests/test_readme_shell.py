"""Every command the README shows, run as a new user runs it: in a fresh shell with only the README.

Each command runs in its own ``env -i`` login shell (no variable of ours, ``HOME`` a temp folder,
``COLUMNS=80``) that does only what the README says first: ``source .venv/bin/activate`` from the
repository folder. The README's ```bash blocks run in order against a local ``opd serve`` on a free
port, and every ``opd …`` it names inline is checked against the real CLI (the verb's ``--help``, each
option it names). A command that cannot run in a test is in ``NOT_RUN`` with the reason; a README
command that is in neither list fails the test, so a new line is run or excused, never skipped.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import shrink_workspace

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
WORDS = ("opd", "python", "pytest", "bash", "source", "cd", "deactivate")

# README commands (as written, comment stripped) that no test can run, and why.
NOT_RUN = {
    "bash scripts/setup.sh && .venv/bin/opd demo ./opd-demo": "setup.sh made the environment this suite runs "
    "in; the demo is tests/test_demo.py (the same command, as a subprocess)",
    "bash scripts/test.sh": "it runs this suite",
    "bash scripts/test.sh --fast": "it runs this suite",
    "opd submit my-ws --cloud --smoke --yes": "starts a paid job on Bailian",
    "opd submit my-ws --cloud --yes --watch": "starts a paid job on Bailian",
    "opd serve": "runs in the foreground until Ctrl-C: started here in the background, on a free port "
    "(8765 may be another server's), with its own data dir",
}
# A README command -> what runs (placeholders filled), when it is not run as written.
FILLED = {
    "opd serve": "opd serve --port {port} --data-dir {data}",
    "export DASHSCOPE_HTTP_BASE_URL=http://127.0.0.1:8765/api/v1 DASHSCOPE_API_KEY=local": "export "
    "DASHSCOPE_HTTP_BASE_URL=http://127.0.0.1:{port}/api/v1 DASHSCOPE_API_KEY=local",
    "opd jobs; opd watch JOB_ID; opd logs JOB_ID -f; opd cancel JOB_ID": "opd jobs; opd watch {job}; "
    "opd logs {job} -f; opd cancel {running}",
    "opd checkpoints JOB [--json]": "opd checkpoints {job} && opd checkpoints {job} --json",
    "opd export JOB CHECKPOINT [--model-name early]": "opd export {job} {checkpoint} && "
    "opd export {job} {older_checkpoint} --model-name early",
    'opd logs JOB --search "reward" [--tail 20] [--json]': 'opd logs {job} --search "reward" && '
    'opd logs {job} --search "reward" --tail 20 --json',
    "opd metrics JOB [--name NAME ...] [--global-steps] [--json]": "opd metrics {job} && "
    "opd metrics {job} --name train/reward/mean --global-steps --json",
    "opd deploy opd-local/ft-…  --suffix v1": "opd deploy opd-local/{job}  --suffix v1",
    'opd deploy NAME --plan ptu --deploy-spec \'{"input_tpm": 100000, "output_tpm": 20000}\'': "opd deploy "
    '{exported} --plan ptu --deploy-spec \'{{"input_tpm": 100000, "output_tpm": 20000}}\'',
    'opd deployments; opd chat NAME "93418"': 'opd deployments; opd chat {deployed} "93418"',
    "opd eval my-ws --model NAME --model qwen3.5-9b [--rows N] [--json]": "opd eval my-ws --model "
    "{deployed} --model qwen3.5-9b --rows 2 --json",
    "opd undeploy NAME": "opd undeploy {deployed} && opd undeploy {deployed_ptu}",
    "opd watch JOB --report-to trackio,wandb,tensorboard,mlflow": "opd watch {job} --report-to "
    "trackio,wandb,tensorboard,mlflow",
    "opd report JOB --to mlflow [--project NAME]": "opd report {job} --to mlflow && "
    "opd report {job} --to mlflow --project readme-tour",
}
TRACKER_BLOCK = "opd report JOB --to mlflow [--project NAME]"  # reports the tour's local job
EXIT_CODES = {  # no API key yet: the README says so
    "opd check my-ws": 1,
    "opd check my-ws --json": 1,
    "opd check my-ws --set n_epochs=3": 1,
}
CLOUD_BLOCK = "opd estimate my-ws --price 12.5"  # the block of "To the cloud"
CLOUD_KEY = "sk-" + "readme0test0not0sent"  # never sent: the block's paid submits are NOT_RUN
INLINE_WORDS = ("opd", "pytest", "python", "deactivate")  # named bare in the prose: they must exist
SHAREGPT = [  # chats.json as a ShareGPT export is written: a pretty-printed array
    {
        "conversations": [
            {"from": "human", "value": f"Sort the digits: {n}"},
            {"from": "gpt", "value": "".join(sorted(str(n)))},
        ]
    }
    for n in range(9413, 9433)
]


def readme_blocks() -> list[list[str]]:
    """The README's ```bash blocks, one list of commands each (trailing comments dropped)."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [[c for c in map(_command, block.splitlines()) if c] for block in blocks]


def _command(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line).strip()


def inline_commands() -> list[str]:
    """Commands the README's prose shows in `code` (outside the blocks)."""
    prose = re.sub(r"```.*?```", "", README.read_text(encoding="utf-8"), flags=re.S)
    spans = re.findall(r"`([^`\n]+)`", prose)
    return [s for s in spans if s.split(" ", 1)[0] in WORDS]


# The README's `source .venv/bin/activate`, for the environment this suite runs in: setup.sh makes `.venv`
# unless OPD_VENV names another folder (CI's `.venv-ci`), and the README's command means that one.
ACTIVATE = shlex.quote(str(Path(sys.prefix) / "bin" / "activate"))


@dataclass
class Shell:
    """Fresh shells: `env -i`, a temp HOME, the README's activation, the exports the README made so far."""

    home: Path
    exports: list[str] = field(default_factory=list)

    def script(self, command: str, cwd: Path) -> str:
        steps = [f"cd {shlex.quote(str(REPO))}", f"source {ACTIVATE}", f"cd {shlex.quote(str(cwd))}"]
        return " && ".join([*steps, *self.exports]) + f"\n{command}"

    def run(self, command: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
        env = ["env", "-i", f"HOME={self.home}", "PATH=/usr/bin:/bin", "LANG=C.UTF-8", "COLUMNS=80"]
        return subprocess.run(
            [*env, "bash", "-lc", self.script(command, cwd)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, command: str, cwd: Path, rc: int = 0, timeout: float = 600) -> str:
        proc = self.run(command, cwd, timeout)
        assert proc.returncode == rc, (
            f"{command!r} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
        assert "Traceback" not in proc.stderr, f"{command!r}:\n{proc.stderr[-3000:]}"
        return proc.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Shell:
    home = tmp_path_factory.mktemp("home")
    return Shell(home)


@pytest.fixture(scope="module")
def server(shell: Shell, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The README's `opd serve`, in the background of a fresh shell (the command in FILLED)."""
    port, data = _free_port(), tmp_path_factory.mktemp("serve-data")
    command = FILLED["opd serve"].format(port=port, data=data)
    env = ["env", "-i", f"HOME={shell.home}", "PATH=/usr/bin:/bin", "LANG=C.UTF-8"]
    log = data / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*env, "bash", "-lc", shell.script(f"exec {command}", shell.home)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, log.read_text()
            time.sleep(0.3)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_every_readme_command_is_run_or_excused():
    """Each command of a ```bash block runs in the tour below (as written, or as FILLED says) or is
    excused in NOT_RUN; an excuse or a filling for a command the README no longer has is stale."""
    in_blocks = {c for block in readme_blocks() for c in block}
    assert {"opd new reward my-ws", "pytest my-ws", "python my-ws/submit_job.py --local"} <= in_blocks
    stale = (set(NOT_RUN) | set(FILLED)) - in_blocks - set(inline_commands())
    assert not stale, f"excused or filled, but no longer in the README: {stale}"


@pytest.mark.timeout(1200)  # two jobs, two deployments and an eval, command by command in fresh shells
def test_the_readme_tour_in_a_fresh_shell(shell: Shell, server: int, tmp_path: Path):
    """Every ```bash block in order, as a user types them after `source .venv/bin/activate`, from the
    folder that holds my-ws (the exports of one command stay for the next, as in one terminal)."""
    values: dict[str, str] = {"port": str(server)}
    (tmp_path / "chats.json").write_text(json.dumps(SHAREGPT, indent=2), encoding="utf-8")
    local: list[str] = []
    for block in readme_blocks():
        cloud = CLOUD_BLOCK in block
        if cloud:  # "To the cloud": the user's own key in the environment, no local base URL
            local, shell.exports = shell.exports, [f"export DASHSCOPE_API_KEY={CLOUD_KEY}"]
        elif TRACKER_BLOCK in block:  # the trackers get the tour's local job (a new terminal, as before)
            shell.exports = local
        for command in block:
            if command in NOT_RUN and command not in FILLED or command == "opd serve":
                continue  # `opd serve` is the `server` fixture
            text = FILLED.get(command, command).format(**values)
            if command.startswith("export "):
                shell.exports.append(text)
                continue
            out = shell.ok(text, tmp_path, rc=0 if cloud else EXIT_CODES.get(command, 0))
            assert CLOUD_KEY not in out
            _after(command, out, values, shell, tmp_path)
    assert values.keys() >= {"job", "running", "exported", "deployed", "deployed_ptu"}


def _after(command: str, out: str, values: dict[str, str], shell: Shell, cwd: Path) -> None:
    """What the tour reads from a command's output (ids for the next commands), and what it checks."""
    if command == "opd new reward my-ws":  # a job short enough for a test: 4 steps, a checkpoint each 2
        shrink_workspace(cwd / "my-ws", "reward", train_rows=32, save_steps=2)
    elif command == "opd check my-ws" and not shell.exports:  # no key yet: that one error, as the README says
        assert "env.no-api-key" in out and "1 error(s)" in out
    elif command == "opd check my-ws":  # with the user's key: ready, and the job's size follows
        assert "0 error(s)" in out and "steps: 4 = ceil(32 rows / batch_size 8)" in out
    elif command == "opd probe my-ws":  # the README's claim: on the template's task the teacher wins
        assert "opd-can-help" in out, out
    elif command.startswith("opd data convert"):
        assert "20 of 20 record(s) written, 20 with rollout_extra.solution" in out
    elif command == "python my-ws/submit_job.py --local":
        values["job"] = re.findall(r"job id: (\S+)", out)[0]
        # a second, longer job for the README's `opd cancel` (the first one will have ended)
        longer = shell.ok(f"{command} --set training.hyper_parameters.n_epochs=30", cwd)
        values["running"] = re.findall(r"job id: (\S+)", longer)[0]
    elif command.startswith("opd jobs; opd watch"):
        assert "SUCCEEDED" in out and values["job"] in out
    elif command.startswith(
        "opd checkpoints JOB"
    ):  # the names the README's CHECKPOINT stands for, newest first
        names = list(dict.fromkeys(re.findall(r"\bcheckpoint-\d+\b", out)))
        assert len(names) >= 2, out
        values["checkpoint"], values["older_checkpoint"] = names[0], names[-1]
    elif command.startswith("opd export"):
        values["exported"] = re.findall(r"as model_name (\S+);", out)[0]
        assert "'early' is its display name" in out
    elif command.startswith("opd deploy opd-local/"):
        values["deployed"] = f"opd-local-{values['job']}-v1"
        assert values["deployed"] in out
    elif command.startswith("opd deploy NAME --plan ptu"):
        values["deployed_ptu"] = re.findall(r"^(\S+) RUNNING", out, flags=re.M)[-1]
    elif command.startswith("opd deployments"):
        assert values["deployed"] in out and values["deployed_ptu"] in out  # whole, at 80 columns
    elif command.startswith(("opd watch JOB --report-to", "opd report JOB")):
        watch = "--report-to" in command  # a watch says `report-to NAME: where`, a report `  NAME: where`
        names = command.split("--report-to ")[-1].split()[0].split(",") if watch else ["mlflow"]
        for name in names:  # where each tracker's run is, and how to view it
            assert re.search(rf"^{'report-to ' if watch else '  '}{name}: \S", out, flags=re.M), out
    elif command.startswith("opd eval"):
        assert {m["model"] for m in json.loads(out)["models"]} == {values["deployed"], "qwen3.5-9b"}


def _help_texts(shell: Shell, paths: list[tuple[str, ...]], cwd: Path) -> dict[tuple[str, ...], str]:
    """`opd PATH --help` of each path, in one fresh shell (help goes to stdout)."""
    marker = "@@@help "
    script = "; ".join(f"echo '{marker}{' '.join(p)}'; opd {' '.join(p)} --help" for p in paths)
    out = shell.ok(script, cwd)
    texts: dict[tuple[str, ...], str] = {}
    for chunk in out.split(marker)[1:]:
        head, _, body = chunk.partition("\n")
        texts[tuple(head.split())] = body
    return texts


def _verb_path(command: str) -> tuple[str, ...]:
    from opd_nb.cli import command as cli

    group, path = cli(), []
    for token in command.split()[1:]:
        sub = getattr(group, "commands", {}).get(token)
        if sub is None:
            break
        path.append(token)
        group = sub
    return tuple(path)


def test_inline_commands_exist_with_the_options_they_name(shell: Shell, tmp_path: Path):
    """`opd watch JOB --guard`, `opd estimate WS [--json] [--price P] ...`: each verb runs in a fresh
    shell and knows every option the README gives it; `python -c ...` runs; `opd`, `pytest`, `python`
    and `deactivate` exist once the environment is active."""
    inline = [c for c in inline_commands() if c not in NOT_RUN]
    words = sorted({c for c in inline if " " not in c})
    assert set(words) == set(INLINE_WORDS)
    found = shell.ok(f"command -v {' '.join(words)}", tmp_path).split()
    assert len(found) == len(words) and all(f.startswith(str(REPO)) for f in found if "/" in f), found
    opd = [c for c in inline if c.startswith("opd ")]
    texts = _help_texts(shell, sorted({_verb_path(c) for c in opd}), tmp_path)
    for command in opd:
        help_text = texts[_verb_path(command)]
        for option in re.findall(r"--[a-z][a-z0-9-]*", command):
            assert option in help_text, (
                f"README: `{command}`: `opd {' '.join(_verb_path(command))}` has no {option}"
            )
    for command in (c for c in inline if c.startswith("python -c ")):
        assert len(shell.ok(command, tmp_path).strip()) >= 40


# The generated workspace's own README (what a user of `opd new` reads next), in a fresh shell too.
WORKSPACE_NOT_RUN = {
    "pip install -r requirements.txt pytest": "installs from the package index: the activated environment has "
    "them all (a Python without them gets one line: test_template)",
    "python submit_job.py --smoke --yes": "starts a paid job on Bailian",
    "python submit_job.py --yes --wait": "starts a paid job on Bailian",
}


def _workspace_blocks(ws: Path) -> list[str]:
    text = (ws / "README.md").read_text(encoding="utf-8")
    return [
        c
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
        for c in map(_command, block.splitlines())
        if c
    ]


def test_the_workspace_readme_in_a_fresh_shell(shell: Shell, server: int, tmp_path: Path):
    """`opd new`'s README: its tests, `.env` from the example, a dry run, and a local job to the end. Its
    `opd serve` is this module's (on a free port, named by DASHSCOPE_HTTP_BASE_URL, which --local follows)."""
    fresh = Shell(shell.home)
    fresh.ok("opd new reward ws", tmp_path)
    ws = shrink_workspace(tmp_path / "ws", "reward", train_rows=16)
    commands = _workspace_blocks(ws)
    assert set(WORKSPACE_NOT_RUN) <= set(commands), "excused, but no longer in the workspace README"
    for command in (c for c in commands if c not in WORKSPACE_NOT_RUN):
        if command == "python submit_job.py --local --wait":  # "`opd serve` in another terminal": this one
            fresh.exports.append(f"export DASHSCOPE_HTTP_BASE_URL=http://127.0.0.1:{server}/api/v1")
        out = fresh.ok(command, ws)
        if command == "python submit_job.py --dry-run":
            assert json.loads(out)["api_key"] == "not set"  # .env.example holds no key
        if command == "python submit_job.py --local --wait":
            assert "final status: SUCCEEDED" in out
    assert {"pytest", "cp .env.example .env", "python submit_job.py --local --wait"} <= set(commands)


def test_the_readme_states_no_test_count():
    """A count of tests goes stale with the next test (issue 51: the README said 1,072): the README names none."""
    text = README.read_text(encoding="utf-8")
    assert not re.findall(r"\b\d[\d,]*\s+(?:tests|test cases|passed)\b", text)
