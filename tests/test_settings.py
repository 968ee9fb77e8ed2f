"""`OPD_*` variables: declared once in opd_nb/settings.py, read only through it, tabled in the README,
and a bad value is one line that names the variable, the value and what is accepted."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from opd_nb import settings
from opd_nb.errors import OpdError

REPO = Path(__file__).resolve().parents[1]
NAME = re.compile(r"OPD_[A-Z0-9_]*[A-Z0-9]")
NOT_VARIABLES = {"OPD_TEACHER_IDS"}  # a Python constant (spec/models.py), not an environment variable
READS = ("get", "pop", "setdefault", "getenv")


def _aliases(trees: dict[Path, ast.Module]) -> set[str]:
    """Names bound to a setting's name anywhere (``TOKEN_ENV = settings.SERVING_TOKEN.name``), and what
    they are imported as elsewhere (``from opd_nb.watching.notify import URL_VAR as NOTIFY_URL_VAR``)."""
    out: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _is_setting_name(node.value):
                out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            if isinstance(node, ast.AnnAssign) and node.value is not None and _is_setting_name(node.value):
                out |= {node.target.id} if isinstance(node.target, ast.Name) else set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                out |= {a.asname for a in node.names if a.asname and a.name in out}
    return out


def _is_setting_name(node: ast.AST) -> bool:
    """``settings.X.name`` (or ``X.name`` for a setting imported by name)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "name"
        and isinstance(node.value, ast.Attribute | ast.Name)
        and ast.unparse(node.value).split(".")[0] == "settings"
    )


def _keyed_by_a_setting(key: ast.AST, aliases: set[str]) -> bool:
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return bool(NAME.fullmatch(key.value))
    if isinstance(key, ast.Name):
        return key.id in aliases
    if isinstance(key, ast.Attribute):
        return key.attr in aliases or _is_setting_name(key)
    return False


def violations(root: Path) -> list[str]:
    """Each place under `root` (a checkout) that names or reads an ``OPD_*`` variable itself."""
    files = [p for p in (root / "opd_nb").rglob("*.py") if p.name != "settings.py"]
    trees = {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in files}
    aliases = _aliases(trees)
    yours = {s.name for s in settings.SETTINGS if s.who == "you"}
    found = [  # the template's files are Jinja (no AST) and run without opd-nb: they name only what a user
        # sets, as the README's table declares it (submit_job.py --local sends OPD_SERVE_API_KEY, never the cloud key)
        f"{p.relative_to(root)}: names {name}"
        for p in (root / "template").rglob("*")
        if p.is_file()
        for name in sorted(set(NAME.findall(p.read_text(encoding="utf-8", errors="replace"))) - yours)
    ]
    for path, tree in trees.items():
        discarded = {
            id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)
        }  # `os.environ.pop(X)`: removal
        for node in ast.walk(tree):
            where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value):
                found.append(f"{where}: the literal {node.value!r}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in READS
                and node.args
                and id(node) not in discarded
                and _keyed_by_a_setting(node.args[0], aliases)
            ):
                found.append(f"{where}: {ast.unparse(node)}")
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Load)
                and _keyed_by_a_setting(node.slice, aliases)
            ):
                found.append(f"{where}: {ast.unparse(node)}")
    return sorted(found)


@pytest.mark.slow
def test_no_code_reads_an_opd_variable_but_through_the_settings_module() -> None:
    assert violations(REPO) == []


def test_the_scan_sees_each_way_of_reading_one_around_the_module(tmp_path: Path) -> None:
    """The scan itself: each form of a read it must catch, in a checkout of one module."""
    (tmp_path / "opd_nb").mkdir()
    (tmp_path / "template").mkdir()
    (tmp_path / "opd_nb" / "reads.py").write_text(
        "import os\nfrom opd_nb import settings\n"
        "DIR_VAR = settings.WATCH_DIR.name\n"
        "a = os.environ.get('OPD_WATCH_DIR')\n"
        "b = os.environ[DIR_VAR]\n"
        "c = os.environ.pop(settings.WATCH_DIR.name, '')\n"
        "d = os.getenv(DIR_VAR)\n"
        "os.environ.pop(DIR_VAR, None)\n"  # a removal, not a read
        "os.environ[DIR_VAR] = 'x'\n"  # a write, for a child
        "e = settings.WATCH_DIR.get()\n"
    )
    assert [v.split(": ", 1)[0] for v in violations(tmp_path)] == ["opd_nb/reads.py:4"] * 2 + [
        "opd_nb/reads.py:5",
        "opd_nb/reads.py:6",
        "opd_nb/reads.py:7",
    ]


def test_every_opd_name_anywhere_in_the_repository_is_declared() -> None:
    """Code, tests, scripts, binder, bench, notebooks and docs name only declared variables (or a prefix
    of them, as a filter of the environment does)."""
    declared = set(settings.BY_NAME)
    roots = ["opd_nb", "template", "scripts", "binder", "bench", "tests", "notebooks", "skills"]
    files = [
        p for r in roots for p in (REPO / r).rglob("*") if p.is_file() and p.suffix not in (".pyc", ".gz")
    ]
    files += [REPO / "README.md", REPO / "ARCHITECTURE.md"]
    unknown = {}
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for name in set(NAME.findall(text)) - declared - NOT_VARIABLES:
            if not any(d.startswith(name) for d in declared):
                unknown.setdefault(name, str(path.relative_to(REPO)))
    assert unknown == {}


def test_the_readme_table_is_generated_from_the_module() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert settings.with_table(readme) == readme, "run: python -m opd_nb.settings --write"
    for setting in settings.SETTINGS:
        assert f"| `{setting.name}` |" in readme
    proc = subprocess.run(
        [sys.executable, "-m", "opd_nb.settings", "--check", str(REPO / "README.md")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout


def test_a_stale_readme_table_is_caught(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        (REPO / "README.md")
        .read_text(encoding="utf-8")
        .replace("| `OPD_WATCH_DIR` |", "| `OPD_" + "RENAMED` |")
    )
    check = [sys.executable, "-m", "opd_nb.settings", "--check", str(readme)]
    stale = subprocess.run(check, capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1 and "stale" in stale.stdout
    subprocess.run([sys.executable, "-m", "opd_nb.settings", "--write", str(readme)], check=True, timeout=60)
    assert subprocess.run(check, capture_output=True, text=True, timeout=60).returncode == 0


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("OPD_TORCH_THREADS", "lots", "a whole number >= 1"),
        ("OPD_WORKER_NICE", "40", "a whole number 0..19"),
        ("OPD_FORKSERVER", "maybe", "1/true/yes/on or 0/false/no/off"),
        ("OPD_ROLLOUTS_PER_STEP", "-1", "a whole number >= 0"),
        ("OPD_LOCAL_LR", "fast", "a number > 0"),
        ("OPD_CHECKPOINT_TTL_DAYS", "nan", "a number >= 0"),
    ],
)
@pytest.mark.slow
def test_opd_serve_refuses_a_bad_value_in_one_line(
    name: str, value: str, accepted: str, tmp_path: Path
) -> None:
    env = {**os.environ, name: value, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "opd_nb", "serve", "--port", "0", "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{name}={value!r} is not {accepted}" in proc.stderr and "or unset it" in proc.stderr
    assert not (tmp_path / "data").exists()  # refused before it touched anything


def test_a_secret_is_never_echoed_in_the_error(monkeypatch) -> None:
    monkeypatch.setenv("OPD_OTLP_FORWARD_HEADERS", "{authorization: sk-live-123")
    with pytest.raises(OpdError) as bad:
        settings.check_environment()
    assert "OPD_OTLP_FORWARD_HEADERS" in str(bad.value) and "sk-live-123" not in str(bad.value)
    assert "a JSON object" in str(bad.value)


def test_unset_or_blank_is_the_default_and_a_value_is_parsed(monkeypatch) -> None:
    monkeypatch.delenv("OPD_MAX_DEPLOYMENTS", raising=False)
    assert settings.MAX_DEPLOYMENTS.get() == 3
    monkeypatch.setenv("OPD_MAX_DEPLOYMENTS", "  ")
    assert settings.MAX_DEPLOYMENTS.get() == 3
    monkeypatch.setenv("OPD_MAX_DEPLOYMENTS", " 5 ")
    assert settings.MAX_DEPLOYMENTS.get() == 5
    monkeypatch.setenv("OPD_ENGINE_LEAN", "Off")
    assert settings.ENGINE_LEAN.get() is False
    monkeypatch.setenv("OPD_WATCH_DIR", "~/w")
    assert settings.WATCH_DIR.get() == Path.home() / "w"
    monkeypatch.setenv(
        "OPD_SERVE_API_KEY", "\u00a0strong-key "
    )  # a secret as set: its own checks refuse the spaces
    assert settings.SERVE_API_KEY.get() == "\u00a0strong-key "
