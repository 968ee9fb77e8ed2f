"""Issue 26's preflight rules: each documented contract planted as a mistake, with its rule, line and fix.

Every test writes a workspace by hand (see test_checks_config.make_workspace), plants one mistake and
asserts the finding's rule id, severity, `file:line` and fix; the fixed variant must be clean of it.
"""

from __future__ import annotations

import pytest
from test_checks_config import REWARD_CODE, REWARD_FUNCTIONS, SDK_WHEEL, config_text, make_workspace

from opd_nb.checks import RULES, check, check_config_text


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-test-key-for-checks")
    for name in ("DASHSCOPE_HTTP_BASE_URL", "FC_PYPI_LIB", "FC_LAYER_USED"):
        monkeypatch.delenv(name, raising=False)


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line of `text` containing `needle`."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def only(report, rule: str):
    assert rule in RULES, rule
    hits = report.by_rule(rule)
    assert len(hits) == 1, f"{rule}: {hits}\n{report}"
    return hits[0]


def reward_ws(tmp_path, code: str = REWARD_CODE, functions: str = REWARD_FUNCTIONS):
    ws = make_workspace(tmp_path, reward=True, config=config_text(functions=functions))
    (ws / "functions" / "reward" / "reward.py").write_text(code, encoding="utf-8")
    return ws


# ---------------------------------------------------------------- defects 4, 11: config values


def test_gkd_is_accepted_locally_and_refused_for_the_cloud(tmp_path):
    ws = make_workspace(tmp_path)
    text = config_text(extra_hp="algorithm: gkd\n")
    local = check_config_text(text, ws, "local", base_url="http://127.0.0.1:9/api/v1")
    assert "config.bad-value" not in local.rules(), str(local)
    hit = only(check_config_text(text, ws), "config.bad-value")
    assert hit.where == f"config.yaml:{line_of(text, 'algorithm: gkd')}"
    assert "only on the local engine" in hit.message and "gspo" in hit.fix
    bad = check_config_text(
        config_text(extra_hp="algorithm: gkdd\n"), ws, "local", base_url="http://127.0.0.1:9"
    )
    assert "config.bad-value" in bad.rules()


def test_model_as_a_string_is_one_error_with_the_mapping_fix(tmp_path):
    ws = make_workspace(tmp_path)
    text = config_text(replace={"model:\n  name: qwen3.5-9b\n": 'model: "qwen3.5-9b"\n'})
    rep = check_config_text(text, ws)
    assert "config.model-missing" not in rep.rules(), str(rep)
    hit = only(rep, "config.schema")
    assert hit.where == "config.yaml:2" and hit.fix.startswith("write `model: {name: qwen3.5-9b}`")


# ---------------------------------------------------------------- teacher choice and limits


@pytest.mark.parametrize("teacher", ["gpt-4o", "claude-3-5-sonnet", "gemini-1.5-pro"])
def test_teacher_bailian_cannot_serve(tmp_path, teacher):
    ws = make_workspace(tmp_path)
    text = config_text(replace={"teacher_model: qwen3.5-397b-a17b": f"teacher_model: {teacher}"})
    hit = only(check_config_text(text, ws), "config.teacher-not-bailian")
    assert hit.severity == "error" and hit.where == "config.yaml:4"
    assert "qwen3.5-397b-a17b" in hit.fix
    assert "config.teacher-not-bailian" not in check_config_text(config_text(), ws).rules()
    local = check_config_text(text, ws, "local", base_url="http://127.0.0.1:9/api/v1")
    # the local plane refuses it too (issue 51): no rehearsal of a job Bailian refuses
    assert only(local, "config.teacher-not-bailian").severity == "error"


def test_teacher_smaller_than_the_student(tmp_path):
    ws = make_workspace(tmp_path)
    text = config_text(
        replace={
            "name: qwen3.5-9b": "name: qwen3-32b",
            "teacher_model: qwen3.5-397b-a17b": "teacher_model: qwen3-8b",
        }
    )
    hit = only(check_config_text(text, ws), "config.teacher-smaller")
    assert hit.severity == "warning" and hit.where == "config.yaml:4"
    assert "(8B) is smaller than the student 'qwen3-32b' (32B)" in hit.message and "larger" in hit.fix


def test_teacher_batched_tokens_below_its_context(tmp_path):
    ws = make_workspace(tmp_path)
    planted = "opd_teacher_max_model_len: 16384\nopd_teacher_max_num_batched_tokens: 8192\n"
    text = config_text(extra_hp=planted)
    hit = only(check_config_text(text, ws), "config.teacher-batched-tokens")
    assert hit.severity == "warning"
    assert hit.where == f"config.yaml:{line_of(text, 'opd_teacher_max_num_batched_tokens')}"
    assert hit.fix == "set opd_teacher_max_num_batched_tokens >= 16384 (the docs raise both together)"
    fixed = config_text(extra_hp=planted.replace("tokens: 8192", "tokens: 16384"))
    assert "config.teacher-batched-tokens" not in check_config_text(fixed, ws).rules()


def test_large_teacher_below_the_docs_preset(tmp_path):
    ws = make_workspace(tmp_path)
    text = config_text(extra_hp="opd_teacher_gpu_memory_utilization: 0.95\n")
    hit = only(check_config_text(text, ws), "config.teacher-preset")
    assert hit.where == f"config.yaml:{line_of(text, 'opd_teacher_gpu_memory_utilization')}"
    assert ">=30B teacher" in hit.message and "opd_teacher_gpu_memory_utilization: 0.85" in hit.fix
    small = text.replace("teacher_model: qwen3.5-397b-a17b", "teacher_model: qwen3-14b")
    assert "config.teacher-preset" not in check_config_text(small, ws).rules()


def test_continued_training_suggests_a_lower_rate(tmp_path):
    ws = make_workspace(tmp_path)
    text = config_text(replace={"name: qwen3.5-9b": "name: opd-local/ft-20260101-abcd"})
    hit = only(
        check_config_text(text, ws, "local", base_url="http://127.0.0.1:9/api/v1"),
        "config.continued-training",
    )
    assert hit.where == "config.yaml:3" and "same base model" in hit.message
    assert hit.fix.startswith("set learning_rate: 5.0e-07")
    assert "config.continued-training" not in check_config_text(config_text(), ws).rules()


# ---------------------------------------------------------------- runtime sanity


RUNTIME = (
    REWARD_FUNCTIONS + "    runtime:\n      concurrency: 20\n      min_capacity: 10\n      max_capacity: 30\n"
)


@pytest.mark.parametrize(
    "rule,planted,needle",
    [
        ("config.runtime-capacity", {"min_capacity: 10": "min_capacity: 40"}, "min_capacity"),
        ("config.runtime-nonpositive", {"concurrency: 20": "concurrency: 0"}, "concurrency"),
        ("config.runtime-nonpositive", {"timeout: 30": "timeout: 0"}, "timeout"),
        ("config.negative-weight", {"weight: 1.0": "weight: -1.0"}, "weight"),
    ],
)
def test_runtime_sanity(tmp_path, rule, planted, needle):
    ws = make_workspace(tmp_path, reward=True)
    clean = config_text(functions=RUNTIME)
    assert rule not in check_config_text(clean, ws).rules()
    text = clean
    for old, new in planted.items():
        text = text.replace(old, new)
    hit = only(check_config_text(text, ws), rule)
    assert hit.severity == "error" and hit.where == f"config.yaml:{line_of(text, needle + ':')}"
    assert hit.fix


# ---------------------------------------------------------------- defects 5, 6: the reward class


def test_class_without_sdk_base_is_an_error(tmp_path):
    code = REWARD_CODE.replace(
        "class MyRewardProcessor(AbstractRewardProcessor)", "class MyRewardProcessor(object)"
    )
    rep = check(reward_ws(tmp_path, code))
    hit = only(rep, "functions.wrong-base")
    assert hit.severity == "error" and not rep.ok
    assert "derives from no SDK processor" in hit.message and "AbstractRewardProcessor" in hit.fix


def test_syntax_error_in_the_reward_is_reported_with_its_line(tmp_path):
    code = REWARD_CODE.replace("        solution = (", "        solution = ((")
    rep = check(reward_ws(tmp_path, code))
    hit = only(rep, "functions.syntax-error")
    assert hit.where == f"functions/reward/reward.py:{line_of(code, 'solution = ((')}"
    assert "does not parse: '(' was never closed" in hit.message and "py_compile" in hit.fix
    assert "functions.no-process" not in rep.rules()


# ---------------------------------------------------------------- the static reward contract


def test_the_seed_reward_shape_is_clean(tmp_path):
    rep = check(reward_ws(tmp_path))
    assert {f.rule for f in rep.findings if f.rule.startswith("functions.")} == set(), str(rep)


@pytest.mark.parametrize(
    "rule,severity,old,new,needle",
    [
        (
            "functions.process-signature",
            "error",
            "async def process(self, input: RewardInput)",
            "async def process(self)",
            "async def process",
        ),
        (
            "functions.process-signature",
            "error",
            "async def process(self, input: RewardInput)",
            "def process(self, input, extra)",
            "def process",
        ),
        ("functions.no-observe-processor", "info", "    @observe_processor\n", "", "async def process"),
        (
            "functions.bad-return",
            "error",
            "return RewardOutput(reward=Reward(reward_score=float(text.strip() == solution)))",
            "return float(text.strip() == solution)",
            "return float",
        ),
        (
            "functions.bad-return",
            "error",
            "return RewardOutput(reward=Reward(reward_score=float(text.strip() == solution)))",
            "return Reward(reward_score=1.0)",
            "return Reward",
        ),
        (
            "functions.reward-score-in-metrics",
            "warning",
            "return RewardOutput(reward=Reward(reward_score=float(text.strip() == solution)))",
            "metrics = {'reward_score': 1.0, 'coverage': 1.0}\n"
            "        return RewardOutput(reward=Reward(reward_score=metrics['reward_score'], reward_metrics=metrics))",
            "return RewardOutput",
        ),
        (
            "functions.metric-not-float",
            "error",
            "return RewardOutput(reward=Reward(reward_score=float(text.strip() == solution)))",
            "return RewardOutput(reward=Reward(reward_score=1.0, reward_metrics={'quality': 'high'}))",
            "'quality': 'high'",
        ),
        (
            "functions.unknown-task-status",
            "error",
            "return RewardOutput(reward=Reward(reward_score=float(text.strip() == solution)))",
            "return RewardOutput(reward=Reward(reward_score=0.0), status=TaskStatus.FAIL)",
            "TaskStatus.FAIL",
        ),
    ],
)
def test_reward_contract_planted(tmp_path, rule, severity, old, new, needle):
    assert old in REWARD_CODE
    code = REWARD_CODE.replace(old, new)
    hit = only(check(reward_ws(tmp_path, code)), rule)
    assert hit.severity == severity
    assert hit.where == f"functions/reward/reward.py:{line_of(code, needle)}", (hit.where, code)
    assert hit.fix


def test_popped_reward_score_is_clean(tmp_path):
    code = REWARD_CODE.replace(
        "return RewardOutput(reward=Reward(reward_score=float(text.strip() == solution)))",
        "metrics = {'reward_score': 1.0, 'coverage': 1.0}\n"
        "        score = metrics.pop('reward_score')\n"
        "        return RewardOutput(reward=Reward(reward_score=score, reward_metrics=metrics))",
    )
    assert "functions.reward-score-in-metrics" not in check(reward_ws(tmp_path, code)).rules()


def test_unknown_task_status_fix_names_failed(tmp_path):
    code = REWARD_CODE.replace(
        "return RewardOutput(reward=Reward(reward_score=float(text.strip() == solution)))",
        "return RewardOutput(reward=Reward(reward_score=0.0), status=TaskStatus.FAIL)",
    )
    hit = only(check(reward_ws(tmp_path, code)), "functions.unknown-task-status")
    assert hit.fix == "use TaskStatus.FAILED" and "SUCCESS, FAILED" in hit.message


# ---------------------------------------------------------------- defects 8, 9 and the function runtime


def test_malformed_dotenv_is_an_error_without_its_text(tmp_path):
    ws = make_workspace(tmp_path)
    (ws / ".env").write_text("# keys\nDASHSCOPE_API_KEY=sk-abc\nsk-secret-value-here\n", encoding="utf-8")
    rep = check(ws)
    hit = only(rep, "env.dotenv-malformed")
    assert hit.severity == "error" and hit.where == ".env:3" and not rep.ok
    assert "sk-secret" not in hit.message + hit.fix and "KEY=VALUE" in hit.fix
    (ws / ".env").write_text("# keys\nexport DASHSCOPE_API_KEY='sk-abc'  \n", encoding="utf-8")
    assert "env.dotenv-malformed" not in check(ws).rules()


def test_check_accepts_the_config_file_itself(tmp_path):
    ws = make_workspace(tmp_path)
    rep = check(ws / "config.yaml")
    assert rep.ok and "workspace.missing" not in rep.rules(), str(rep)
    (ws / "notes.txt").write_text("x")
    hit = only(check(ws / "notes.txt"), "workspace.missing")
    assert "is a file, not a workspace folder" in hit.message


@pytest.mark.parametrize(
    "value,expected",
    [
        ("/abs/path/dashscope-2.0.2-py3-none-any.whl", "absolute path"),
        ("./dashscope-2.0.2-py3-none-any.whl", "does not exist under zipdir"),
        ("./data/dashscope-2.0.2-py3-none-any.whl", "left out of the function zip"),
    ],
)
def test_fc_pypi_lib(tmp_path, monkeypatch, value, expected):
    ws = reward_ws(tmp_path)
    (ws / SDK_WHEEL).unlink()  # only the wheel the value names, where the test puts it
    if "data/" in value:
        (ws / "data" / "dashscope-2.0.2-py3-none-any.whl").write_bytes(b"PK")
    monkeypatch.setenv("FC_PYPI_LIB", value)
    hit = only(check(ws), "env.fc-pypi-lib")
    assert hit.severity == "error" and hit.where == "FC_PYPI_LIB" and expected in hit.message
    assert hit.fix


def test_fc_pypi_lib_fine_and_skipped_for_pure_distillation(tmp_path, monkeypatch):
    ws = reward_ws(tmp_path)
    (ws / "dashscope-2.0.2-py3-none-any.whl").write_bytes(b"PK")
    (ws / ".env").write_text("FC_PYPI_LIB=./dashscope-2.0.2-py3-none-any.whl\n")
    assert "env.fc-pypi-lib" not in check(ws).rules()
    (ws / ".env").write_text("# wheel\nFC_PYPI_LIB=./missing.whl\n")
    hit = only(check(ws), "env.fc-pypi-lib")  # read from .env, as submit_job.py does
    assert hit.where == ".env:2" and "./missing.whl does not exist under zipdir ." in hit.message
    pure = make_workspace(tmp_path / "pure")
    monkeypatch.setenv("FC_PYPI_LIB", "/abs/dashscope.whl")
    assert "env.fc-pypi-lib" not in check(pure).rules()


def test_fc_layer_used_must_be_a_boolean(tmp_path, monkeypatch):
    ws = reward_ws(tmp_path)
    monkeypatch.setenv("FC_LAYER_USED", "on")
    hit = only(check(ws), "env.fc-layer-used")
    assert hit.severity == "warning" and "'on'" in hit.message and "FC_LAYER_USED=true" in hit.fix
    for ok in ("true", "False", "1", "no"):
        monkeypatch.setenv("FC_LAYER_USED", ok)
        assert "env.fc-layer-used" not in check(ws).rules()


def test_fc_pypi_lib_is_one_finding_for_functions_sharing_a_zipdir(tmp_path, monkeypatch):
    second = REWARD_FUNCTIONS.replace("functions:\n", "").replace("name: exact-match", "name: exact-match-2")
    ws = reward_ws(tmp_path, functions=REWARD_FUNCTIONS + second)
    monkeypatch.setenv("FC_PYPI_LIB", "./missing.whl")
    hit = only(check(ws), "env.fc-pypi-lib")
    assert hit.where == "FC_PYPI_LIB"  # from the environment: named, no line
