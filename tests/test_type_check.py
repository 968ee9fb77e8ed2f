"""The type checker verifies the engine's protocols where they are used: a class that lacks part of a
protocol is an error at the line that uses it as one, and a complete one is not.

Runs the project's own pyright (the dev extra) on a module written the way an engine extension is:
one estimator class for the registry. `scripts/test.sh` runs the checker on the package itself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PYRIGHT = Path(sys.executable).with_name("pyright")

# An estimator's members but loss(): the complete class adds it, the other leaves it out.
MEMBERS = """
    def __init__(self, plan: EstimatorPlan, student: Module, teacher: Module) -> None:
        self.plan = plan

    @property
    def teacher_logprobs(self) -> bool:
        return True

    @property
    def pass_entropy(self) -> bool:
        return False

    def needs_logprobs(self, has_task: bool) -> bool:
        return has_task

    def teacher_record(self, t_vals: Tensor, zeros: Tensor) -> Tensor:
        return t_vals
"""
LOSS = """
    def loss(self, mb: MiniBatch, rec: Records) -> tuple[Tensor, dict[str, float], float]:
        raise NotImplementedError
"""
EXTENSION = f"""
from __future__ import annotations

from torch import Tensor
from torch.nn import Module

from opd_nb.engine.estimators import EstimatorClass, EstimatorPlan, MiniBatch, Records


class Complete:{MEMBERS}{LOSS}

class NoLoss:{MEMBERS}

GOOD: EstimatorClass = Complete
BAD: EstimatorClass = NoLoss
"""


@pytest.mark.slow
def test_a_class_missing_part_of_the_estimator_protocol_is_a_type_error(tmp_path: Path) -> None:
    module = tmp_path / "my_estimator.py"
    module.write_text(EXTENSION)
    lines = EXTENSION.splitlines()
    good_line = lines.index("GOOD: EstimatorClass = Complete") + 1
    bad_line = lines.index("BAD: EstimatorClass = NoLoss") + 1
    run = subprocess.run(
        [str(PYRIGHT), "--pythonpath", sys.executable, str(module)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = run.stdout
    assert run.returncode == 1, out
    assert f"my_estimator.py:{bad_line}:" in out and '"loss" is not present' in out, out
    assert f"my_estimator.py:{good_line}:" not in out, out
    assert "1 error" in out, out


def test_the_package_says_it_is_typed_for_its_users_checkers():
    """PEP 561: a user's mypy or pyright reads opd-nb's annotations only when the installed package ships
    ``py.typed`` (the wheel holds every file of the package folder)."""
    from importlib.resources import files

    marker = files("opd_nb").joinpath("py.typed")
    assert marker.is_file() and marker.read_bytes() == b""
