"""Every package opd-nb imports is one it declares (issue 36: `opd eval` imported tqdm, undeclared).

An import that only works because another dependency happens to pull the package in breaks the day that
dependency drops it. Each top-level import of a third-party module in `opd_nb/` must map (through the
installed distributions) to a requirement of `pyproject.toml`: the core dependencies or an extra.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = list(project["dependencies"]) + [
        r for extra in project["optional-dependencies"].values() for r in extra
    ]
    return {_normal(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in reqs}


def _imports() -> dict[str, str]:
    """Top-level module name -> the first file that imports it (absolute imports only)."""
    found: dict[str, str] = {}
    for path in sorted((REPO / "opd_nb").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    return found


@pytest.mark.slow
def test_every_third_party_import_is_declared():
    dists = packages_distributions()
    declared = _declared()
    undeclared = {}
    for module, where in _imports().items():
        if module in sys.stdlib_module_names or module in ("opd_nb", "__future__"):
            continue
        names = {_normal(d) for d in dists.get(module, [])}
        assert names, f"{where} imports {module}, which no installed distribution provides"
        if not names & declared:
            undeclared[module] = where
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
