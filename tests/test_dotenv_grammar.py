"""One `.env`, one key (issue 36): opd-nb and the workspace's `submit_job.py` read `.env` alike.

Every reader of `.env` (the client's key resolution, `opd check`, the template's `submit_job.py`, which
must run without opd-nb) uses python-dotenv's grammar. This corpus holds `.env` lines as people write
them (quotes, `export`, comments, spaces, empty values, CRLF, a pasted key with no name, an unclosed
quote) and runs both readers on each, against python-dotenv's own ``dotenv_values``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import tiny_workspace
from dotenv import dotenv_values

from opd_nb.checks import check
from opd_nb.client import resolve_target
from opd_nb.workspace.dotenv_file import read_dotenv
from opd_nb.workspace.new import create

KEY = "sk-" + "abc123def456"  # assembled: no key-like literal in the repo

# (what the line is, the file's text): each sets DASHSCOPE_API_KEY to KEY, whatever the writing.
SAME_KEY = [
    ("the issue's line: single quotes, then a comment", f"DASHSCOPE_API_KEY='{KEY}' # my key\n"),
    ("double quotes, then a comment", f'DASHSCOPE_API_KEY="{KEY}"   # my key\n'),
    ("unquoted, then a comment", f"DASHSCOPE_API_KEY={KEY} # my key\n"),
    ("export and quotes", f"export DASHSCOPE_API_KEY='{KEY}'\n"),
    ("export with two spaces", f"export  DASHSCOPE_API_KEY={KEY}\n"),
    ("spaces around =", f"  DASHSCOPE_API_KEY = {KEY}  \n"),
    ("a tab after =", f"DASHSCOPE_API_KEY=\t{KEY}\t\n"),
    ("CRLF line ends (a file saved on Windows)", f"# key\r\nDASHSCOPE_API_KEY={KEY}\r\nOTHER=1\r\n"),
    ("a byte-order mark", f"\ufeffDASHSCOPE_API_KEY={KEY}\n"),
    ("no newline at the end", f"DASHSCOPE_API_KEY={KEY}"),
    ("a comment line and a blank line", f"# Bailian\n\nDASHSCOPE_API_KEY={KEY}\n"),
    ("set twice: the last wins", f"DASHSCOPE_API_KEY=sk-old\nDASHSCOPE_API_KEY={KEY}\n"),
    ("a ${VAR} reference", f"MINE={KEY}\nDASHSCOPE_API_KEY=${{MINE}}\n"),
    ("a quoted name", f"'DASHSCOPE_API_KEY'={KEY}\n"),
]
# Other values people write: each reader must give the same value.
OTHER_VALUES = [
    ("an empty value", "FC_LAYER_USED=\n"),
    ("an empty value and a comment", "FC_LAYER_USED= # later\n"),
    ("a # inside an unquoted value", "FC_PYPI_LIB=./a#b.whl\n"),
    ("= inside a value", "EXTRA=a=b\n"),
    ("spaces inside an unquoted value", "EXTRA=a b c # c\n"),
    ("an escape in double quotes", 'EXTRA="a\\nb"\n'),
    ("a quoted value over two lines", 'EXTRA="a\nb"\n'),
    ("single quotes keep $", "EXTRA='$HOME'\n"),
]
# Lines python-dotenv cannot read, or that set nothing: (line text, 1-based line of the problem).
REFUSED = [
    ("a pasted key without its name", f"# keys\nA=1\n{KEY}\n", 3),
    ("an unclosed single quote", f"DASHSCOPE_API_KEY='{KEY}\nA=1\n", 1),
    ("a space instead of =", f"A=1\nDASHSCOPE_API_KEY {KEY}\n", 2),
    ("a colon instead of =", f"DASHSCOPE_API_KEY: {KEY}\n", 1),
    ("text after a closing quote", f"DASHSCOPE_API_KEY='{KEY}'x\n", 1),
    ("no name before =", f"={KEY}\n", 1),
    ("a shell `set` line", f"set DASHSCOPE_API_KEY={KEY}\n", 1),
    ("export without a value", "A=1\nB=2\nexport DASHSCOPE_API_KEY\n", 3),
    ("a CRLF file with an unclosed quote", f"A=1\r\nB='{KEY}\r\n", 2),
]


@pytest.fixture(scope="module")
def template_reader(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The generated workspace's submit_job.py, imported as a module (it runs without opd-nb)."""
    ws = create("pure-distill", tmp_path_factory.mktemp("ws") / "ws").path
    spec = importlib.util.spec_from_file_location("workspace_submit_job", Path(ws) / "submit_job.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / ".env"
    path.write_bytes(text.encode("utf-8"))  # bytes: CRLF and the BOM stay as written
    return path


def _truth(path: Path) -> dict[str, str]:
    """python-dotenv's own reading (what `load_dotenv` would set)."""
    return {k: v for k, v in dotenv_values(path, encoding="utf-8").items() if v is not None}


@pytest.mark.parametrize(
    ("what", "text"), SAME_KEY + OTHER_VALUES, ids=[w for w, _ in SAME_KEY + OTHER_VALUES]
)
def test_both_readers_agree_with_python_dotenv(tmp_path, template_reader, monkeypatch, what, text):
    monkeypatch.delenv("MINE", raising=False)
    path = _write(tmp_path, text)
    package = read_dotenv(path)
    assert package.problems == [], what
    assert package.values == _truth(path) == template_reader.read_dotenv(path), what
    if (what, text) in SAME_KEY:
        assert package.values["DASHSCOPE_API_KEY"] == KEY, what


@pytest.mark.parametrize(("what", "text", "line"), REFUSED, ids=[w for w, _, _ in REFUSED])
def test_a_line_dotenv_cannot_read_is_refused_by_both_with_its_line(
    tmp_path, template_reader, what, text, line
):
    path = _write(tmp_path, text)
    assert [p.line for p in read_dotenv(path).problems][:1] == [line], what
    with pytest.raises(template_reader.UsageError) as refused:
        template_reader.read_dotenv(path)
    assert f"{path}:{line}:" in str(refused.value) and KEY not in str(refused.value), what
    ws = _workspace_with(tmp_path, text)
    hits = check(ws, "local", base_url="http://127.0.0.1:9/api/v1").by_rule("env.dotenv-malformed")
    assert f".env:{line}" in [h.where for h in hits], what
    assert all(h.severity == "error" and "KEY=VALUE" in h.fix and KEY not in h.message + h.fix for h in hits)


def _workspace_with(tmp_path: Path, dotenv_text: str) -> Path:
    ws = tmp_path / "ws"
    if not ws.exists():
        create("pure-distill", ws)
    (ws / ".env").write_bytes(dotenv_text.encode("utf-8"))
    return ws


def test_the_client_sends_the_key_the_script_sends(tmp_path, monkeypatch):
    """The issue's case: `opd` (resolve_target) and submit_job.py read the same key from `.env`."""
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)
    ws = _workspace_with(tmp_path, f"DASHSCOPE_API_KEY='{KEY}' # my key\n")
    monkeypatch.chdir(tmp_path)
    target = resolve_target("cloud", workspace=ws)
    assert target.api_key is not None and target.api_key.get_secret_value() == KEY
    assert "env.no-api-key" not in check(ws).rules() and "env.dotenv-malformed" not in check(ws).rules()


def test_an_empty_environment_variable_does_not_hide_the_dotenv_key(tmp_path, monkeypatch, template_reader):
    """`export DASHSCOPE_API_KEY=` in a shell profile: both paths fall back to `.env`, alike."""
    monkeypatch.setenv("DASHSCOPE_API_KEY", "")
    ws = _workspace_with(tmp_path, f"DASHSCOPE_API_KEY={KEY}\n")
    monkeypatch.chdir(ws)
    assert resolve_target("cloud", workspace=ws).api_key.get_secret_value() == KEY  # type: ignore[union-attr]
    args = template_reader.parse_args(["--dry-run"])
    assert template_reader.configure_env(args, ws) == ".env" and os.environ["DASHSCOPE_API_KEY"] == KEY


@pytest.mark.slow
def test_a_keyed_server_accepts_the_dotenv_key_from_opd_and_from_submit_job(tmp_path):
    """Against `opd serve --api-key K` (which accepts only K, as Bailian accepts only your key), with
    `DASHSCOPE_API_KEY='K' # my key` in the workspace's `.env` and no key in the environment, both
    `python submit_job.py --local URL` and `opd jobs --local URL` are let in."""
    from opd_nb.server import start

    key = secrets.token_urlsafe(32)
    ws = tiny_workspace("pure-distill", tmp_path / "ws")
    cloud_key = "sk-" + secrets.token_hex(16)
    (ws / ".env").write_text(
        f"OPD_SERVE_API_KEY='{key}' # my key\r\nDASHSCOPE_API_KEY={cloud_key}\r\n", encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_SERVE_API_KEY"))}
    env["NO_PROXY"] = "127.0.0.1,localhost"

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *args], cwd=ws, env=env, capture_output=True, text=True, timeout=300
        )

    with start(port=0, data_dir=tmp_path / "data", api_key=key) as server:
        url = server.api_base
        sub = run("submit_job.py", "--local", url, "--json")
        assert sub.returncode == 0, sub.stderr[-2000:]
        job_id = json.loads(sub.stdout.strip().splitlines()[-1])["job_id"]
        jobs = run("-m", "opd_nb", "jobs", "--local", url, "--json")
        assert jobs.returncode == 0, jobs.stderr[-2000:]
        assert job_id in jobs.stdout and key not in sub.stdout + sub.stderr + jobs.stdout + jobs.stderr
        run("-m", "opd_nb", "cancel", job_id, "--local", url)
