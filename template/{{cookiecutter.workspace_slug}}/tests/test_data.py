"""Checks the datasets and config.yaml the way the SDK and the service will read them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

WORKSPACE = Path(__file__).resolve().parents[1]


def has_functions() -> bool:
    """Pure distillation registers no function: rollout_extra is then a passed-through marker only."""
    import yaml

    config = yaml.safe_load((WORKSPACE / "config.yaml").read_text(encoding="utf-8")) or {}
    return bool(config.get("functions"))


@pytest.mark.parametrize("name", ["train.jsonl", "validation.jsonl"])
def test_rows_have_the_opd_format(name: str) -> None:
    needs_solution = has_functions()  # a reward (or rollout) reads rollout_extra.solution
    lines = (WORKSPACE / "data" / name).read_text(encoding="utf-8").splitlines()
    assert lines, f"data/{name} is empty"
    for number, line in enumerate(lines, start=1):
        row = json.loads(line)
        where = f"data/{name}:{number}"
        roles = [m["role"] for m in row["messages"]]
        assert roles[-1] == "user", f"{where}: the last message must be the user turn"
        assert set(roles) <= {"system", "user", "assistant"}, where
        assert all(isinstance(m["content"], str) and m["content"] for m in row["messages"]), where
        if needs_solution:
            solution = (row.get("rollout_extra") or {}).get("solution")
            assert str(solution or "").strip(), f"{where}: rollout_extra.solution is empty"


def test_validation_prompts_are_not_training_prompts() -> None:
    def prompts(name: str) -> set[str]:
        text = (WORKSPACE / "data" / name).read_text(encoding="utf-8")
        return {json.dumps(json.loads(line)["messages"]) for line in text.splitlines()}

    assert not prompts("train.jsonl") & prompts("validation.jsonl")


def test_config_loads_with_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    from dashscope.finetune.reinforcement import TuningModel
    from dashscope.finetune.reinforcement.common.utils import get_filepath_classname

    monkeypatch.chdir(WORKSPACE)  # the SDK resolves relative paths against the working directory
    tuning = TuningModel.load_from_yaml("config.yaml")
    hp = tuning.training.hyper_parameters
    assert tuning.teacher_model, "teacher_model turns on distillation"
    assert isinstance(hp["learning_rate"], float), "write the learning rate as 1.0e-6, not 1e-6"
    assert hp["ppo_mini_batch_size"] <= hp["batch_size"] * hp["n_rollouts"]
    for dataset in tuning.datasets:
        assert os.path.isfile(dataset.file_name), dataset.file_name
    for function in tuning.functions:
        fcmodel = function.fcmodel
        # The SDK's own parser: `functions.reward.reward.Class` and `functions/reward/reward.py:Class` alike.
        path, cls = get_filepath_classname(fcmodel.classpath or f"{fcmodel.filepath}:{fcmodel.classname}")
        path = os.path.join(fcmodel.zipdir or ".", path)
        assert os.path.isfile(path), f"{fcmodel.classpath}: {path} does not exist"
        assert f"class {cls}(" in Path(path).read_text(encoding="utf-8"), f"{fcmodel.classpath}: no class {cls}"
