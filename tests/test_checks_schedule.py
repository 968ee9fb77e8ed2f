"""Cross-field rules against the job's size: each step-counted field against the total steps the rows,
batch and epochs give, and each pair of fields the docs relate (planted, found at file:line, fixed).

The workspace has 120 training rows, batch_size 16, 1 epoch: ceil(120/16) x 1 = 8 steps.
"""

from __future__ import annotations

import math

import pytest
from test_checks_config import REWARD_FUNCTIONS, config_text, make_workspace

from opd_nb.checks import RULES, check, check_config_text
from opd_nb.cli import main
from opd_nb.paid.estimate import estimate


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-test-key-for-checks")
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)


STEPS = math.ceil(120 / 16) * 1

# (case id, extra hyper-parameters or edits, rule, severity, key the finding points at, text in the fix,
#  the fixed version)
CASES = [
    ("save-steps-past-the-end", "save_steps: 20\n", "config.save-steps-beyond-total", "warning", "save_steps", "save_steps <= 2", "save_steps: 4\n"),
    ("warm-up-as-long-as-the-job", "lr_warmup_steps: 8\n", "config.warmup-beyond-total", "warning", "lr_warmup_steps", "well below 8", "lr_warmup_steps: 2\n"),
    ("save-steps-with-epoch-saves", "save_strategy: epoch\nsave_steps: 4\n", "config.save-field-unused", "warning", "save_steps", "save_strategy: steps", "save_strategy: steps\nsave_steps: 4\n"),
    ("keep-limit-without-saves", 'save_strategy: "no"\nsave_total_limit: 2\n', "config.save-field-unused", "warning", "save_total_limit", "delete", 'save_strategy: "no"\n'),
    ("warm-up-on-a-constant-rate", "lr_warmup_steps: 2\n", "config.warmup-unused", "warning", "lr_warmup_steps", "constant_with_warmup", "lr_warmup_steps: 0\n"),
    ("mini-batch-not-a-divisor", "", "config.mini-batch-divides", "warning", "ppo_mini_batch_size", "a divisor of 128 (e.g. 64)", ""),
    ("algorithm-without-reward", "algorithm: grpo\n", "config.algorithm-unused", "info", "algorithm", "add a reward", ""),
]  # fmt: skip
EDITS = {  # the cases that need more than extra keys
    "warm-up-on-a-constant-rate": {"lr_scheduler_type: cosine": "lr_scheduler_type: constant"},
    "mini-batch-not-a-divisor": {"ppo_mini_batch_size: 32": "ppo_mini_batch_size: 48"},
}


@pytest.mark.parametrize(
    ("case", "extra", "rule", "severity", "key", "fix", "fixed"), CASES, ids=[c[0] for c in CASES]
)
def test_planted_cross_field_mistake(tmp_path, case, extra, rule, severity, key, fix, fixed):
    assert rule in RULES
    ws = make_workspace(tmp_path)
    text = config_text(extra_hp=extra, replace=EDITS.get(case))
    report = check_config_text(text, ws)
    hits = report.by_rule(rule)
    assert hits, f"{rule} not reported:\n{report}"
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.strip().startswith(f"{key}:"))
    assert (hits[0].severity, hits[0].where) == (severity, f"config.yaml:{line}"), str(report)
    assert fix in hits[0].fix, hits[0].fix
    edits = None if case == "mini-batch-not-a-divisor" else EDITS.get(case)
    good = check_config_text(config_text(extra_hp=fixed, replace=edits), ws)
    assert rule not in good.rules(), str(good)


def test_the_total_comes_from_the_rows_batch_and_epochs(tmp_path):
    """The same save_steps and warm-up are fine once the data or the epochs make the job long enough."""
    extra = "save_steps: 20\nlr_warmup_steps: 8\n"
    short = make_workspace(tmp_path / "short", config=config_text(extra_hp=extra))
    found = check(short)
    assert {"config.save-steps-beyond-total", "config.warmup-beyond-total"} <= found.rules()
    assert (
        f"{STEPS} step(s) (120 rows / batch_size 16 x 1 epoch(s))"
        in found.by_rule("config.warmup-beyond-total")[0].message
    )
    assert estimate(short).steps == STEPS  # the rule and `opd estimate` count alike
    more_epochs = make_workspace(
        tmp_path / "epochs", config=config_text(extra_hp=extra, replace={"n_epochs: 1": "n_epochs: 3"})
    )
    assert not {"config.save-steps-beyond-total", "config.warmup-beyond-total"} & check(more_epochs).rules()
    more_rows = make_workspace(tmp_path / "rows", config=config_text(extra_hp=extra), n_train=400)
    assert not {"config.save-steps-beyond-total", "config.warmup-beyond-total"} & check(more_rows).rules()


def test_a_set_change_is_checked_and_named_as_the_set(tmp_path):
    """`--set` is the config a submit sends: the rules see it and point at it, not at the file."""
    ws = make_workspace(tmp_path)
    assert check(ws).ok and not check(ws).findings
    with pytest.raises(SystemExit) as exited:
        main(["check", str(ws), "--set", "lr_warmup_steps=50", "--set", "save_steps=400", "--json"])
    assert exited.value.code == 0
    report = check(ws, sets={"lr_warmup_steps": 50, "save_steps": 400})
    assert (
        report.by_rule("config.warmup-beyond-total")[0].where
        == "--set training.hyper_parameters.lr_warmup_steps"
    )
    assert (
        report.by_rule("config.save-steps-beyond-total")[0].where
        == "--set training.hyper_parameters.save_steps"
    )


def test_algorithm_with_a_reward_or_the_local_gkd_is_not_flagged(tmp_path):
    reward = make_workspace(tmp_path / "r", reward=True)
    text = config_text(functions=REWARD_FUNCTIONS, extra_hp="algorithm: grpo\n")
    assert "config.algorithm-unused" not in check_config_text(text, reward).rules()
    pure = make_workspace(tmp_path / "p")
    gkd = check_config_text(
        config_text(extra_hp="algorithm: gkd\n"), pure, target="local", base_url="http://127.0.0.1:9/api/v1"
    )
    assert "config.algorithm-unused" not in gkd.rules()


def test_constant_with_warmup_and_no_warmup_is_a_note(tmp_path):
    ws = make_workspace(tmp_path)
    text = config_text(replace={"lr_scheduler_type: cosine": "lr_scheduler_type: constant_with_warmup"})
    (note,) = check_config_text(text, ws).by_rule("config.warmup-unused")
    assert note.severity == "info" and "lr_warmup_steps" in note.fix
