"""The engine validates hyper-parameters through the spec's one table, then applies its local rules.

Every range and choice the engine enforces is the table's (so ``opd check``, submit and the engine
agree); what stays the engine's own: YAML's numeric strings, an ``algorithm`` naming the estimator,
the rules across keys and the local learning-rate mapping.
"""

from __future__ import annotations

import pytest

from opd_nb.engine import hparams
from opd_nb.engine.api import EngineError
from opd_nb.spec.hyperparams import PARAMS_BY_NAME, value_problem
from opd_nb.spec.training_plan import TrainingPlan

ENGINE_KEYS = tuple(TrainingPlan.model_fields)  # the engine's plan holds the job's TrainingPlan whole


def test_the_engine_reads_its_keys_defaults_from_the_table() -> None:
    defaults = hparams.resolve({}, student_params=1).hp.model_dump()
    assert set(defaults) == set(ENGINE_KEYS) <= set(PARAMS_BY_NAME)
    assert defaults == {name: PARAMS_BY_NAME[name].default for name in ENGINE_KEYS}
    plan = hparams.resolve({}, student_params=1)
    assert plan.batch_size == PARAMS_BY_NAME["batch_size"].default
    assert plan.teacher_max_model_len == PARAMS_BY_NAME["opd_teacher_max_model_len"].default


@pytest.mark.parametrize(
    "name",
    [n for n in ENGINE_KEYS if PARAMS_BY_NAME[n].le is not None or PARAMS_BY_NAME[n].ge is not None],
)
def test_every_range_of_the_table_is_enforced_with_key_value_and_fix(name: str) -> None:
    spec = PARAMS_BY_NAME[name]
    ge = spec.local_ge if spec.local_ge is not None else spec.ge  # the engine is local
    outside = ([ge - 1] if ge is not None else []) + ([spec.le * 2 + 1] if spec.le is not None else [])
    for raw in outside:
        value = int(raw) if spec.type == "int" else raw
        with pytest.raises(EngineError) as info:
            hparams.resolve({name: value}, student_params=1)
        msg = str(info.value)
        assert f"hyper_parameters.{name} = {value!r}" in msg, msg  # which key, which value
        assert "minimum" in msg or "maximum" in msg, msg  # what is wrong
        assert "(allowed:" in msg and "config.yaml" in msg, msg  # what is allowed, where to fix it


@pytest.mark.parametrize("name", [n for n in ENGINE_KEYS if PARAMS_BY_NAME[n].choices])
def test_every_choice_list_of_the_table_is_enforced(name: str) -> None:
    with pytest.raises(EngineError) as info:
        hparams.resolve({name: "no-such-choice"}, student_params=1)
    msg = str(info.value)
    assert f"hyper_parameters.{name} = 'no-such-choice'" in msg
    assert all(str(c) in msg for c in PARAMS_BY_NAME[name].choices), msg


def test_every_bad_key_is_named_in_one_error() -> None:
    with pytest.raises(EngineError) as info:
        hparams.resolve({"n_epochs": "abc", "batch_size": -3}, student_params=1)
    assert "hyper_parameters.n_epochs = 'abc'" in str(info.value)
    assert "hyper_parameters.batch_size = -3" in str(info.value)


def test_the_engines_local_readings_stay() -> None:
    # YAML's string forms and whole floats read as their numbers
    plan = hparams.resolve({"learning_rate": "1e-6", "n_epochs": "2", "eval_steps": 4.0}, student_params=1)
    assert (plan.cloud_learning_rate, plan.n_epochs, plan.eval_steps) == (1e-6, 2, 4)
    # algorithm may name the estimator; gkd is the local-only full-vocabulary KL
    assert hparams.resolve({"algorithm": "pg_opd"}, student_params=1).estimator == "pg_opd"
    gkd = hparams.resolve({"algorithm": "gkd"}, student_params=1)
    assert (gkd.estimator, gkd.policy_loss) == ("gkd", "gspo")
    assert hparams.resolve({"algorithm": "grpo"}, student_params=1).policy_loss == "grpo"
    with pytest.raises(EngineError, match="unknown estimator 'ppo'"):
        hparams.resolve({}, student_params=1, estimator="ppo")
    # a teacher window below the cloud's minimum is the local engine's (tiny stand-ins)
    assert hparams.resolve({"opd_teacher_max_model_len": 32}, student_params=1).teacher_max_model_len == 32
    # only max_length given: prompts may use all but one token of it
    assert hparams.resolve({"max_length": 64}, student_params=1).max_prompt_length == 63


def test_the_local_learning_rate_rule_and_its_overrides(monkeypatch) -> None:
    monkeypatch.delenv(hparams.LR_ENV, raising=False)
    lr, rule = hparams.local_learning_rate_rule(1e-6, 100_000, None)
    assert lr == pytest.approx(1e-3) and "tiny stand-in" in rule
    assert hparams.local_learning_rate_rule(2e-6, 10**9, None)[0] == 2e-6
    monkeypatch.setenv(hparams.LR_ENV, "2e-4")
    assert hparams.local_learning_rate_rule(1e-6, 100_000, None) == (
        2e-4,
        "local override (OPD_LOCAL_LR) 0.0002",
    )
    assert hparams.local_learning_rate_rule(1e-6, 100_000, 5e-4)[0] == 5e-4  # the job's own comes first
    monkeypatch.setenv(hparams.LR_ENV, "fast")
    with pytest.raises(EngineError, match="OPD_LOCAL_LR = 'fast' is not a number"):
        hparams.local_learning_rate_rule(1e-6, 100_000, None)


def test_value_problem_checks_one_value_against_the_table() -> None:
    assert value_problem("batch_size", 4) is None
    assert value_problem("batch_size", "4") is None  # a numeric string counts as its number
    assert value_problem("no_such_key", object()) is None  # the table does not know it: not its call
    assert value_problem("n_epochs", 1000) == "1000 is above the maximum 100 (allowed: int in [1, 100])"
    assert value_problem("algorithm", "gkd") is None
    assert value_problem("algorithm", "gkd", local=False) == "'gkd' is not one of gspo, grpo"
