"""What a module loads when it is imported, in a fresh interpreter: the import-linter contracts in
pyproject.toml see every import, even inside a function; these see what an import really loads."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest


def _loaded_after(*modules: str) -> set[str]:
    """The module names in ``sys.modules`` after a fresh interpreter imports `modules`."""
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + "print(__import__('json').dumps(sorted(sys.modules)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(proc.stdout))


@pytest.mark.slow
def test_the_version_comes_from_a_leaf_and_is_the_installed_one() -> None:
    from opd_nb._version import __version__

    ours = {m for m in _loaded_after("opd_nb._version") if m.startswith("opd_nb")}
    assert ours == {"opd_nb", "opd_nb._version"}
    assert metadata.version("opd-nb") == __version__  # pyproject reads the same file (hatch)
    proc = subprocess.run(
        [sys.executable, "-m", "opd_nb", "version"], capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.strip() == __version__


def test_importing_the_client_leaves_the_checks_out() -> None:
    loaded = _loaded_after("opd_nb.client")
    assert not {m for m in loaded if m.startswith(("opd_nb.checks", "opd_nb.paid.gate", "opd_nb.spec"))}
    assert (
        "opd_nb.client" in loaded and "opd_nb.paid.consent" in loaded
    )  # its paid calls hold the consent rule


@pytest.mark.slow
def test_the_control_plane_and_the_engine_never_load_the_paid_paths_rules() -> None:
    """The server checks a deployment's plan against the wire's facts (`wire/deploy_plans.py`), not
    through the consent rule: neither it nor the engine loads the gate, the consent or the checks."""
    loaded = _loaded_after("opd_nb.server.app", "opd_nb.server.worker", "opd_nb.engine.api")
    assert {"opd_nb.server.app", "opd_nb.wire.deploy_plans"} <= loaded
    assert not {m for m in loaded if m.startswith(("opd_nb.paid", "opd_nb.checks"))}


def test_each_package_of_opd_nb_says_why_it_exists_in_its_docstring() -> None:
    """The core is grouped by concept; each group's ``__init__.py`` opens with the line that says why."""
    import ast
    from pathlib import Path

    import opd_nb

    packages = sorted(Path(opd_nb.__file__).parent.glob("*/__init__.py"))
    assert {p.parent.name for p in packages} >= {"data", "functions", "health", "plots", "views", "watching"}
    silent = [
        p.parent.name for p in packages if not (ast.get_docstring(ast.parse(p.read_text())) or "").strip()
    ]
    assert silent == []


def test_the_floors_show_in_the_folders_with_at_most_ten_loose_modules() -> None:
    """Concepts live in subpackages; what lies loose under `opd_nb/` is the leaves, the entry points and
    the demo, and each of them is a module of the layers contract (or its one exhaustive ignore)."""
    import tomllib
    from pathlib import Path

    import opd_nb

    root = Path(opd_nb.__file__).parent
    loose = sorted(p.stem for p in root.glob("*.py"))
    assert len(loose) <= 10, loose
    pyproject = tomllib.loads((root.parent / "pyproject.toml").read_text())
    layers = next(c for c in pyproject["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    named = {name.strip() for floor in layers["layers"] for name in floor.split("|")}
    named |= set(layers["exhaustive_ignores"]) | {"__init__"}
    packages = {p.parent.name for p in root.glob("*/__init__.py")}
    assert set(loose) | packages <= named, sorted(set(loose) | packages - named)


@pytest.mark.slow
def test_the_control_plane_the_cli_and_the_notebook_never_load_torch() -> None:
    loaded = _loaded_after(
        "opd_nb.server.app",
        "opd_nb.server.runner",
        "opd_nb.cli",
        "opd_nb.notebook.magics",
        "opd_nb.agent.server",
    )
    assert {"opd_nb.server.app", "opd_nb.cli", "opd_nb.notebook.magics"} <= loaded
    assert not {m for m in loaded if m.split(".")[0] in ("torch", "transformers")}


@pytest.mark.slow
def test_sql_runs_only_in_the_store_and_the_database_check() -> None:
    """ARCHITECTURE.md: all SQL on the records is the store's (`store/`); `db_safety.py` checks and
    copies the file before a store opens it. No other module connects to SQLite or runs a statement."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "opd_nb"
    allowed = {"db_safety.py"}
    runs_sql = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if (
                    node.func.attr in ("execute", "executemany", "executescript")
                    or ast.unparse(node.func) == "sqlite3.connect"
                ):
                    runs_sql.add(path.relative_to(package).as_posix())
    outside = {p for p in runs_sql if not p.startswith("server/store") and Path(p).name not in allowed}
    assert outside == set()
    assert "server/db_safety.py" in runs_sql and "server/store/db.py" in runs_sql
