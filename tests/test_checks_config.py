"""Config rules: each one planted in a hand-written workspace, and the clean case beside it."""

from __future__ import annotations

import json
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from opd_nb.checks import RULES, check, check_config_text
from opd_nb.engine.task import make_rows

BASE_CONFIG = """\
name: my-opd-job
model:
  name: qwen3.5-9b
teacher_model: qwen3.5-397b-a17b
datasets:
  - type: training
    data_source_type: file_id
    file_name: data/train.jsonl
  - type: validation
    data_source_type: file_id
    file_name: data/validation.jsonl
{functions}training:
  hyper_parameters:
    learning_rate: 1.0e-6
    lr_scheduler_type: cosine
    n_epochs: 1
    batch_size: 16
    n_rollouts: 8
    ppo_mini_batch_size: 32
    eval_steps: 2
{extra_hp}{teacher_hp}  resources:
    charge_type: mtu_postpaid
    mtu_spec_code: MTU4
    mtu_capacity: 24
"""

REWARD_FUNCTIONS = """\
functions:
  - type: reward
    name: exact-match
    weight: 1.0
    timeout: 30
    fcmodel:
      zipdir: ./
      classpath: functions.reward.reward.MyRewardProcessor
"""

REWARD_CODE = """\
import os

from dashscope.finetune.reinforcement import AbstractRewardProcessor, Reward, RewardInput, RewardOutput
from dashscope.finetune.reinforcement.component.observability import observe_processor


class MyRewardProcessor(AbstractRewardProcessor):
    @observe_processor
    async def process(self, input: RewardInput) -> RewardOutput:
        solution = (input.agent_output.rollout_extra or {}).get("solution")
        text = (input.agent_output.messages or [{}])[-1].get("content", "")
        return RewardOutput(reward=Reward(reward_score=float(text.strip() == solution)))
"""


# The docs' serving values for the >=30B teacher above (the table's large column), as the template writes
# them: a clean config sets them, since the rule reads the value a job gets, set or default (issue 42).
TEACHER_HP = {
    "opd_teacher_max_model_len": "16384",
    "opd_teacher_max_num_batched_tokens": "16384",
    "opd_teacher_gpu_memory_utilization": "0.85",
}


def config_text(*, functions: str = "", extra_hp: str = "", replace: dict[str, str] | None = None) -> str:
    text = BASE_CONFIG.format(
        functions=functions,
        extra_hp=textwrap.indent(extra_hp, "    ") if extra_hp else "",
        teacher_hp="{teacher_hp}",
    )
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    planted = {
        line.strip().removeprefix("- ").partition(":")[0] for line in text.splitlines()
    }  # a test's own value wins
    block = "".join(f"    {k}: {v}\n" for k, v in TEACHER_HP.items() if k not in planted)
    return text.replace("{teacher_hp}", block)


def write_rows(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


SDK_WHEEL = f"dashscope-{metadata.version('dashscope')}-py3-none-any.whl"  # seed 001: FC_PYPI_LIB is required


def make_workspace(
    root: Path,
    *,
    config: str | None = None,
    reward: bool = False,
    n_train: int = 120,
    n_val: int = 12,
    requirements: bool = True,
) -> Path:
    """A small workspace written by hand: config.yaml, data/*.jsonl, optional reward function."""
    ws = root / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    train = make_rows(n_train, seed=1)
    val = make_rows(n_val, seed=2, exclude={r["messages"][1]["content"] for r in train})
    write_rows(ws / "data" / "train.jsonl", train)
    write_rows(ws / "data" / "validation.jsonl", val)
    if config is None:
        config = config_text(functions=REWARD_FUNCTIONS if reward else "")
    (ws / "config.yaml").write_text(config, encoding="utf-8")
    if requirements:  # the function runtime needs the SDK (issue 42), with the extra 2.1+ keeps the server in
        sdk = "dashscope[agentic-rl]>=2.0.2\n" if reward else ""
        (ws / "requirements.txt").write_text(sdk, encoding="utf-8")
    if "\nfunctions:" in config:  # the SDK wheel the function runtime installs, of the version installed here
        (ws / SDK_WHEEL).write_bytes(b"PK")
        (ws / ".env").write_text(f"FC_PYPI_LIB=./{SDK_WHEEL}\n", encoding="utf-8")
    if reward:
        (ws / "functions" / "reward").mkdir(parents=True, exist_ok=True)
        (ws / "functions" / "__init__.py").write_text("", encoding="utf-8")
        (ws / "functions" / "reward" / "__init__.py").write_text("", encoding="utf-8")
        (ws / "functions" / "reward" / "reward.py").write_text(REWARD_CODE, encoding="utf-8")
    return ws


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-test-key-for-checks")
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)


def rules_of(report, prefix: str = "config.") -> set[str]:
    return {f.rule for f in report.findings if f.rule.startswith(prefix)}


# ---------------------------------------------------------------- clean cases


@pytest.mark.parametrize("reward", [False, True])
def test_clean_workspace_has_no_findings(tmp_path, reward):
    ws = make_workspace(tmp_path, reward=reward)
    report = check(ws)
    assert report.ok, str(report)
    assert report.findings == [], str(report)


# ---------------------------------------------------------------- planted mistakes, each with its fix
# (rule, severity, planted config edits, fixed config edits). The fixed variant must not trip the rule.

CASES = [
    (
        "config.mini-batch-too-large",
        "error",
        {"ppo_mini_batch_size: 32": "ppo_mini_batch_size: 512"},
        {"ppo_mini_batch_size: 32": "ppo_mini_batch_size: 128"},
    ),
    (
        "config.teacher-missing",
        "error",
        {"teacher_model: qwen3.5-397b-a17b\n": "", "training:\n": "training:\n  type: pg_opd\n"},
        {"training:\n": "training:\n  type: pg_opd\n"},
    ),
    ("config.no-learning-signal", "error", {"teacher_model: qwen3.5-397b-a17b\n": ""}, {}),
    (
        "config.training-type-by-hand",
        "error",
        {"training:\n": "training:\n  type: reinforcement\n"},
        {"training:\n": "training:\n  type: pg_opd\n"},
    ),
    ("config.teacher-unknown", "error", {"qwen3.5-397b-a17b": "totally-made-up-model"}, {}),
    ("config.functions-empty-list", "warning", {"training:\n": "functions: []\ntraining:\n"}, {}),
    ("config.unknown-hyperparameter", "error", {"n_epochs: 1": "n_epoch: 1"}, {}),
    # the official Bailian CLI sends the learning rate as a string itself: a note, not an error (issue 51)
    ("config.numeric-string", "info", {"learning_rate: 1.0e-6": "learning_rate: 1e-6"}, {}),
    ("config.numeric-string", "warning", {"n_rollouts: 8": 'n_rollouts: "8"'}, {}),
    (
        "config.learning-rate-high",
        "warning",
        {"learning_rate: 1.0e-6": "learning_rate: 1.0e-4"},
        {"learning_rate: 1.0e-6": "learning_rate: 2.0e-6"},
    ),
    (
        "config.model-id-not-cloud",
        "error",
        {"teacher_model: qwen3.5-397b-a17b": "teacher_model: Qwen/Qwen3-235B"},
        {},
    ),
    ("config.model-id-not-cloud", "error", {"name: qwen3.5-9b": "name: ./models/student"}, {}),
    ("config.functions-null", "error", {"training:\n": "functions: null\ntraining:\n"}, {}),
    (
        "config.duplicate-function-name",
        "error",
        {"training:\n": REWARD_FUNCTIONS + REWARD_FUNCTIONS.replace("functions:\n", "") + "training:\n"},
        {
            "training:\n": REWARD_FUNCTIONS
            + REWARD_FUNCTIONS.replace("functions:\n", "").replace("exact-match", "exact-match-2")
            + "training:\n"
        },
    ),
    ("config.job-name", "error", {"name: my-opd-job": "name: ''"}, {"name: my-opd-job": "name: opd-2"}),
    (
        "config.job-name",
        "error",
        {"name: my-opd-job": "name: " + "x" * 257},
        {"name: my-opd-job": "name: " + "x" * 200},
    ),
    (
        "config.eval-steps-too-sparse",
        "warning",
        {"eval_steps: 2": "eval_steps: 5"},
        {"eval_steps: 2": "eval_steps: 1"},
    ),
    (
        "config.teacher-context-short",
        "warning",
        {"eval_steps: 2": "eval_steps: 2\n    max_length: 8192\n    opd_teacher_max_model_len: 4096"},
        {"eval_steps: 2": "eval_steps: 2\n    max_length: 8192\n    opd_teacher_max_model_len: 8192"},
    ),
    ("config.kl-loss-coef", "info", {"eval_steps: 2": "eval_steps: 2\n    kl_loss_coef: 0.001"}, {}),
    ("config.bad-value", "error", {"lr_scheduler_type: cosine": "lr_scheduler_type: cosinus"}, {}),
    ("config.bad-value", "error", {"n_rollouts: 8": "n_rollouts: 0"}, {}),
    ("config.misplaced-key", "error", {"eval_steps: 2": "eval_steps: 2\n    mtu_capacity: 4"}, {}),
    (
        "config.schema",
        "error",
        {"teacher_model: qwen3.5-397b-a17b": "teacher_model: qwen3.5-397b-a17b\njob_name: x"},
        {},
    ),
    ("config.model-missing", "error", {"model:\n  name: qwen3.5-9b\n": ""}, {}),
    ("config.testing-dataset", "warning", {"  - type: validation": "  - type: testing"}, {}),
    ("config.no-training-data", "error", {"  - type: training": "  - type: validation"}, {}),
    ("config.yaml-syntax", "error", {"model:\n  name: qwen3.5-9b": "model:\n  name: [qwen3.5-9b"}, {}),
]


@pytest.mark.parametrize(
    "rule,severity,planted,fixed", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_rule_planted_and_fixed(tmp_path, rule, severity, planted, fixed):
    assert rule in RULES
    ws = make_workspace(tmp_path)
    bad = check_config_text(config_text(replace=planted), ws)
    hits = bad.by_rule(rule)
    assert hits, f"{rule} not reported:\n{bad}"
    assert hits[0].severity == severity
    assert hits[0].where.startswith("config.yaml"), hits[0].where
    assert hits[0].message and hits[0].fix
    good = check_config_text(config_text(replace=fixed), ws)
    assert rule not in good.rules(), str(good)


def test_where_points_at_the_yaml_line(tmp_path):
    ws = make_workspace(tmp_path)
    text = config_text(replace={"ppo_mini_batch_size: 32": "ppo_mini_batch_size: 512"})
    line = text.splitlines().index("    ppo_mini_batch_size: 512") + 1
    f = check_config_text(text, ws).by_rule("config.mini-batch-too-large")[0]
    assert f.where == f"config.yaml:{line}"
    assert "512" in f.message and "16 x n_rollouts 8 = 128" in f.message


def test_unknown_hyperparameter_names_closest_key(tmp_path):
    ws = make_workspace(tmp_path)
    rep = check_config_text(config_text(replace={"learning_rate: 1.0e-6": "learnin_rate: 1.0e-6"}), ws)
    f = rep.by_rule("config.unknown-hyperparameter")[0]
    assert "`learning_rate`" in f.fix
    far = check_config_text(config_text(extra_hp="my_custom_knob: 3\n"), ws).by_rule(
        "config.unknown-hyperparameter"
    )[0]
    assert far.severity == "warning"


def test_numeric_string_fix_is_loadable_yaml(tmp_path):
    ws = make_workspace(tmp_path)
    rep = check_config_text(config_text(replace={"learning_rate: 1.0e-6": "learning_rate: 1e-6"}), ws)
    fix = rep.by_rule("config.numeric-string")[0].fix
    import yaml

    assert yaml.safe_load(fix.split("write ", 1)[1].split(" (")[0]) == {"learning_rate": 1e-6}


def test_reward_with_single_rollout(tmp_path):
    ws = make_workspace(tmp_path, reward=True)
    bad = check_config_text(
        config_text(
            functions=REWARD_FUNCTIONS,
            replace={"n_rollouts: 8": "n_rollouts: 1", "ppo_mini_batch_size: 32": "ppo_mini_batch_size: 16"},
        ),
        ws,
    )
    assert bad.by_rule("config.reward-single-rollout")[0].severity == "warning"
    # The same n_rollouts without a reward is fine (pure distillation needs no group).
    pure = check_config_text(
        config_text(
            replace={"n_rollouts: 8": "n_rollouts: 1", "ppo_mini_batch_size: 32": "ppo_mini_batch_size: 16"}
        ),
        ws,
    )
    assert "config.reward-single-rollout" not in pure.rules()


def test_unregistered_reward_code(tmp_path):
    ws = make_workspace(tmp_path, reward=True, config=config_text())  # code present, config registers nothing
    f = check(ws).by_rule("config.unregistered-code")
    assert f and f[0].where.startswith("functions/reward/reward.py:")
    assert "pure distillation" in f[0].message
    assert "config.unregistered-code" not in check(make_workspace(tmp_path / "b", reward=True)).rules()


def test_local_target_without_server_warns_not_crashes(tmp_path):
    ws = make_workspace(tmp_path)
    rep = check(ws, "local", base_url="http://127.0.0.1:9/api/v1")
    assert rep.by_rule("env.local-server-unreachable")[0].severity == "warning"
    assert rep.ok
    # HF-style ids are fine for the local target (the local plane decides), and no key is needed.
    assert "config.model-id-not-cloud" not in rep.rules()


@pytest.mark.slow
def test_local_target_asks_the_real_control_plane(tmp_path):
    """`--target local` asks `opd serve` (GET /models/{id}); a HF repo id it cannot serve is an error."""
    from opd_nb.server import start

    models = {}
    for name in ("my-student", "my-teacher"):
        d = tmp_path / "models" / name
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}", encoding="utf-8")
        models[name] = str(d)
    ws = make_workspace(
        tmp_path,
        config=config_text(
            replace={
                "name: qwen3.5-9b": "name: my-student",
                "teacher_model: qwen3.5-397b-a17b": "teacher_model: Qwen/Qwen3-235B",
            }
        ),
    )
    with start(port=0, data_dir=tmp_path / "serve", model_map=models) as server:
        rep = check(ws, "local", base_url=server.api_base)
        bad = rep.by_rule("config.model-not-servable")
        assert len(bad) == 1 and "Qwen/Qwen3-235B" in bad[0].message and bad[0].where == "config.yaml:4", str(
            rep
        )
        assert "env.no-api-key" not in rep.rules()
        fixed = config_text(
            replace={
                "name: qwen3.5-9b": "name: my-student",
                "teacher_model: qwen3.5-397b-a17b": "teacher_model: my-teacher",
            }
        )
        (ws / "config.yaml").write_text(fixed, encoding="utf-8")
        good = check(ws, "local", base_url=server.api_base)
        assert good.ok and not good.by_rule("config.model-not-servable"), str(good)


@pytest.mark.parametrize("mode", ["pure-distill", "reward", "agentic"])
def test_fresh_template_workspace_has_no_errors(tmp_path, mode):
    from opd_nb.workspace import new as workspace  # our own package: a broken import must fail, not skip

    ws = workspace.create(mode, tmp_path / f"ws-{mode}")
    report = check(ws.path)
    assert report.ok, str(report)
    if mode == "pure-distill":
        assert not report.warnings, str(report)
        return
    # seed 001 calls FC_PYPI_LIB required for a job with functions: unset, the cloud check says so
    assert [w.rule for w in report.warnings] == ["env.fc-pypi-lib"], str(report)
    (ws.path / SDK_WHEEL).write_bytes(b"PK")
    (ws.path / ".env").write_text(f"FC_PYPI_LIB=./{SDK_WHEEL}\n", encoding="utf-8")
    assert not check(ws.path).warnings, str(check(ws.path))


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("finetuned_output: my-model-v2", "read it as `finetuned_output` of the finished job"),
        ("finetuned_model: my-model-v2", "to keep experiments apart, change only `name:`"),
        ("job_id: ft-202601010000-abcd", "the service gives each job its id"),
        ("status: RUNNING", "opd watch JOB"),
        ("training_file_ids: [file-ft-abc]", "under `datasets:` (type: training)"),
    ],
)
def test_a_key_the_service_reports_says_what_to_do_instead(tmp_path, line, words):
    """The docs' multi-experiment advice sets `finetuned_output:` in config.yaml, which the SDK refuses
    whole: preflight says what to do instead, not only "unknown key" (issue 51)."""
    ws = make_workspace(tmp_path)
    key = line.split(":")[0]
    bad = check_config_text(
        config_text(
            replace={"teacher_model: qwen3.5-397b-a17b": f"teacher_model: qwen3.5-397b-a17b\n{line}"}
        ),
        ws,
    )
    hit = bad.by_rule("config.schema")[0]
    assert f"`{key}` is what the service reports about a job" in hit.message and "1002" in hit.message
    assert hit.fix.startswith(f"remove `{key}`: ") and words in hit.fix, hit.fix
    assert hit.where.startswith("config.yaml:"), hit.where
