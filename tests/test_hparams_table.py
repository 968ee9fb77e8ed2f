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


def test_the_engine_reads_its_keys_defaults_from_the_table() -> None:
    defaults = hparams.cloud_defaults()
    assert set(defaults) == set(hparams.ENGINE_KEYS) <= set(PARAMS_BY_NAME)
    assert defaults == {name: PARAMS_BY_NAME[name].default for name in hparams.ENGINE_KEYS}
    plan = hparams.resolve({}, student_params=1)
    assert plan.batch_size == PARAMS_BY_NAME["batch_size"].default
    assert plan.teacher_max_model_len == PARAMS_BY_NAME["opd_teacher_max_model_len"].default


@pytest.mark.parametrize(
    "name",
    [n for n in hparams.ENGINE_KEYS if PARAMS_BY_NAME[n].le is not None or PARAMS_BY_NAME[n].ge is not None],
)
def test_every_range_of_the_table_is_enforced_with_key_value_and_fix(name: str) -> None:
    spec = PARAMS_BY_NAME[name]
    ge = spec.ge
    outside = ([ge - 1] if ge is not None else []) + ([spec.le * 2 + 1] if spec.le is not None else [])
    for raw in outside:
        value = int(raw) if spec.type == "int" else raw
        with pytest.raises(EngineError) as info:
            hparams.resolve({name: value}, student_params=1)
        msg = str(info.value)
        assert f"hyper_parameters.{name} = {value!r}" in msg, msg  # which key, which value
        assert "minimum" in msg or "maximum" in msg, msg  # what is wrong
        assert "(allowed:" in msg and "config.yaml" in msg, msg  # what is allowed, where to fix it


@pytest.mark.parametrize("name", [n for n in hparams.ENGINE_KEYS if PARAMS_BY_NAME[n].choices])
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
    assert value_problem("n_epochs", 1000) == "1000 is above the maximum 200 (allowed: int in [1, 200])"
    assert value_problem("algorithm", "gkd") is None
    assert value_problem("algorithm", "gkd", local=False) == "'gkd' is not one of gspo, grpo"


# The docs' tables (help.aliyun.com/zh/model-studio/opd-training-config, 必填参数综合表 / 选填参数 /
# 教师模型部署参数), quoted: key -> (range low, range high, default where the docs give one).
DOCS_RANGES = {
    "kl_loss_coef": (0, 10, None),  # "[0, 10]"
    "learning_rate": (0, 1, None),  # "[0, 1]"
    "lr_warmup_steps": (-1, None, None),  # ">= -1" (-1 = 自动)
    "n_epochs": (1, 200, None),  # "[1, 200]"
    "batch_size": (1, 100000, None),  # "[1, 100000]"
    "n_rollouts": (1, 1024, None),  # "[1, 1024]"
    "ppo_mini_batch_size": (1, 100000, None),
    "max_length": (1, 131072, None),
    "max_prompt_length": (1, 131072, None),
    "eval_steps": (1, 999999, None),
    "save_steps": (1, 999999, None),
    "save_total_limit": (1, 200, None),
    "n_gpus_rollout": (1, 1024, 8),
    "n_gpus_training": (1, 1024, 8),
    "nnodes_rollout": (1, 256, 1),
    "nnodes_training": (1, 256, 2),
}
DOCS_TEACHER_DEFAULTS = {  # "demo 默认值"
    "opd_teacher_nnodes": 1,
    "opd_teacher_n_gpus_per_node": 8,
    "opd_teacher_infer_tp": 8,
    "opd_teacher_gpu_memory_utilization": 0.75,
    "opd_teacher_max_model_len": 34816,
    "opd_teacher_max_num_batched_tokens": 4096,
    "opd_teacher_max_num_seqs": 2,
    "opd_teacher_num_replicas": 1,
}


@pytest.mark.parametrize("name", sorted(DOCS_RANGES))
def test_the_table_takes_the_docs_range_whole_and_nothing_past_it(name: str) -> None:
    low, high, default = DOCS_RANGES[name]
    spec = PARAMS_BY_NAME[name]
    assert (spec.ge, spec.le) == (low, high)
    for value in (low, high):  # both ends are accepted on the cloud target, not only locally
        if value is not None:
            assert spec.problem(value) is None, (name, value)
    assert spec.problem(low - 1) is not None
    if high is not None:
        assert spec.problem(high + 1) is not None
    if default is not None:
        assert spec.default == default


def test_the_teacher_defaults_are_the_docs_demo_defaults() -> None:
    assert {name: PARAMS_BY_NAME[name].default for name in DOCS_TEACHER_DEFAULTS} == DOCS_TEACHER_DEFAULTS


def test_documented_values_the_local_engine_reads_its_own_way() -> None:
    # lr_warmup_steps -1 is the cloud's "automatic": locally no warm-up (the job's log says so)
    auto = hparams.resolve({"lr_warmup_steps": -1}, student_params=1)
    assert auto.lr_warmup_steps == 0 and hparams.lr_lambda(auto, 10)(0) == pytest.approx(1.0)
    # a learning rate of 0 trains nothing here too (the tiny-student mapping would have made it 1e-4)
    assert hparams.resolve({"learning_rate": 0}, student_params=1).learning_rate == 0.0
    # the ends of the docs' ranges run
    big = hparams.resolve({"n_epochs": 200, "n_rollouts": 1024, "max_length": 131072}, student_params=1)
    assert (big.n_epochs, big.n_rollouts, big.max_length) == (200, 1024, 131072)
