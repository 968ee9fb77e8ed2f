"""One seam between the commands and the front ends: a command returns one typed result on every surface.

The terminal presents it (``opd_nb.cli._output``), ``invoke()`` hands it back, and the notebook maps it to
a view in one place (``opd_nb.notebook.views``). The CLI never asks where it runs: the switch is read in
``_output`` alone, and the CLI imports nothing of the notebook.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import opd_nb.cli
from opd_nb.cli import _output, command, intents, invoke
from opd_nb.cli._argv import normalize

CLI = Path(opd_nb.cli.__file__).parent
DEAD = "http://127.0.0.1:9"  # nothing answers: these verbs must send nothing before they return


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_the_cli_never_asks_where_it_runs_nor_imports_the_notebook() -> None:
    """No `in_magic`, no notebook import, the hand-back switch read only in `_output`, and every printer
    there (no bare `print`, `sys.stdout`, `typer.echo`/`secho` in a command module)."""
    problems = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(_tree(path)):
            name = getattr(node, "id", None) or getattr(node, "attr", None)
            if name in ("in_magic", "set_magic", "_HANDED_BACK") and path.name != "_output.py":
                problems.append(f"{path.name}:{getattr(node, 'lineno', 0)} reads {name}")
            if isinstance(node, ast.ImportFrom | ast.Import):
                modules = (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                )
                if any(m.startswith("opd_nb.notebook") for m in modules):
                    problems.append(f"{path.name}:{node.lineno} imports the notebook")
            if (
                path.name != "_output.py"
                and isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
            ):
                if (node.value.id, node.attr) in (
                    ("sys", "stdout"),
                    ("sys", "stderr"),
                    ("typer", "echo"),
                    ("typer", "secho"),
                ):
                    problems.append(
                        f"{path.name}:{node.lineno} prints past _output ({node.value.id}.{node.attr})"
                    )
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                problems.append(f"{path.name}:{node.lineno} prints past _output")
    assert problems == []


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from opd_nb.workspace.new import create

    return create("reward", tmp_path_factory.mktemp("seam") / "ws").path


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`opd use` sets this process's variables: put them all back afterwards."""
    for key in ("DASHSCOPE_HTTP_BASE_URL", "OPD_NB_LOCAL_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-" + "seam0123456789abcdefghij")
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


# (argv, the typed result both surfaces get); {ws} is a workspace made once for the module.
VERBS = [
    (["watch", "ft-202612020000-abcd", "--local", DEAD, "--guard"], intents.WatchRequest),
    (["rollouts", "ft-202612020000-abcd", "--local", DEAD, "--step", "1"], intents.RolloutsRequest),
    (["traces", "ft-202612020000-abcd", "--local", DEAD, "--kind", "train"], intents.TracesRequest),
    (["chat", "qwen3-8b", "hello", "--local", DEAD, "--max-tokens", "8"], intents.ChatRequest),
    (["eval", "{ws}", "--model", "qwen3-8b", "--local", DEAD, "--rows", "2"], intents.EvalRequest),
    (["form", "{ws}/config.yaml"], intents.FormRequest),
    (["playground", "{ws}"], intents.PlaygroundRequest),
    (["config-cell", "{ws}"], intents.ConfigCellRequest),
    (["estimate", "{ws}", "--set", "n_epochs=2"], None),
    (["config", "{ws}"], None),
    (["check", "{ws}"], None),
    (["use", "local", "--base-url", "http://127.0.0.1:9999"], None),
]


def _argv(argv: list[str], workspace: Path) -> list[str]:
    return [a.replace("{ws}", str(workspace)) for a in argv]


def _in_a_terminal(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run `opd ARGV` as the console script parses it; the result the terminal was given to present."""
    seen: list[Any] = []
    monkeypatch.setattr(_output, "present_in_terminal", lambda result, **_: seen.append(result))
    command().main(args=normalize(argv), prog_name="opd", standalone_mode=False)
    (result,) = seen
    return result


@pytest.mark.parametrize(("argv", "kind"), VERBS, ids=[v[0][0] for v in VERBS])
def test_the_terminal_presents_the_result_that_invoke_hands_back(
    argv: list[str], kind: type | None, workspace: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = _argv(argv, workspace)
    handed_back = invoke(argv)
    in_terminal = _in_a_terminal(argv, monkeypatch)
    assert type(in_terminal) is type(handed_back)
    if kind is not None:
        assert isinstance(handed_back, kind) and in_terminal == handed_back  # the same intent, field by field


MAGICS = [
    "estimate {ws}",
    "config {ws}",
    "check {ws}",
    "form {ws}",
    "use local --base-url http://127.0.0.1:9999",
]


@pytest.mark.parametrize("line", MAGICS, ids=[m.split()[0] for m in MAGICS])
def test_the_magic_shows_the_view_of_the_result_invoke_hands_back(
    line: str, workspace: Path, clean_env: None
) -> None:
    """`%opd LINE` is `invoke()` plus the notebook's one mapping: the same result, or the view of it."""
    from opd_nb.notebook.magics import run_line
    from opd_nb.notebook.views import open_view

    line = line.replace("{ws}", str(workspace))
    assert type(run_line(line)) is type(open_view(invoke(line.split())))


def test_every_intent_has_a_view_and_a_watch_with_a_webhook_is_never_handed_back() -> None:
    from opd_nb.errors import OpdError
    from opd_nb.notebook.views import _OPENERS

    kinds = {c for c in vars(intents).values() if isinstance(c, type) and dataclasses.is_dataclass(c)}
    assert kinds and kinds <= set(_OPENERS)
    with pytest.raises(OpdError, match="--detach"):  # its URL stays in the CLI: only a watcher here posts
        invoke(["watch", "ft-202612020000-abcd", "--local", DEAD, "--notify", "http://x/h"])
