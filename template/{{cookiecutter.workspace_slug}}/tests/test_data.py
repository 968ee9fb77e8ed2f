"""Checks the datasets and config.yaml the way the SDK and the service will read them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

WORKSPACE = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["train.jsonl", "validation.jsonl"])
def test_rows_have_the_opd_format(name: str) -> None:
    lines = (WORKSPACE / "data" / name).read_text(encoding="utf-8").splitlines()
    assert lines, f"data/{name} is empty"
    for number, line in enumerate(lines, start=1):
        row = json.loads(line)
        where = f"data/{name}:{number}"
        roles = [m["role"] for m in row["messages"]]
        assert roles[-1] == "user", f"{where}: the last message must be the user turn"
        assert set(roles) <= {"system", "user", "assistant"}, where
        assert all(isinstance(m["content"], str) and m["content"] for m in row["messages"]), where
        assert str(row["rollout_extra"]["solution"]).strip(), f"{where}: rollout_extra.solution is empty"


def test_validation_prompts_are_not_training_prompts() -> None:
    def prompts(name: str) -> set[str]:
        text = (WORKSPACE / "data" / name).read_text(encoding="utf-8")
        return {json.dumps(json.loads(line)["messages"]) for line in text.splitlines()}

    assert not prompts("train.jsonl") & prompts("validation.jsonl")


def test_config_loads_with_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    from dashscope.finetune.reinforcement import TuningModel

    monkeypatch.chdir(WORKSPACE)  # the SDK resolves relative paths against the working directory
    tuning = TuningModel.load_from_yaml("config.yaml")
    hp = tuning.training.hyper_parameters
    assert tuning.teacher_model, "teacher_model turns on distillation"
    assert isinstance(hp["learning_rate"], float), "write the learning rate as 1.0e-6, not 1e-6"
    assert hp["ppo_mini_batch_size"] <= hp["batch_size"] * hp["n_rollouts"]
    for dataset in tuning.datasets:
        assert os.path.isfile(dataset.file_name), dataset.file_name
    for function in tuning.functions:
        path, _, cls = function.fcmodel.classpath.partition(":")
        assert os.path.isfile(path) and f"class {cls}(" in Path(path).read_text(encoding="utf-8"), path
