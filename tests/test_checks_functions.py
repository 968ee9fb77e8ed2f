"""Function rules: classpath, packages, base class, requirements, zip contents; planted and clean."""

from __future__ import annotations

import pytest
from test_checks_config import REWARD_FUNCTIONS, config_text, make_workspace

from opd_nb.checks import check
from opd_nb.checks.function_code import excluded_by, split_classpath, zip_members

FAKE_KEY = "sk-" + "0123456789abcdef" * 2  # assembled so no key-like literal is committed


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-test-key-for-checks")
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)


def fn_rules(report) -> set[str]:
    return {f.rule for f in report.findings if f.rule.startswith("functions.")}


def reward_ws(tmp_path, classpath: str = "functions.reward.reward.MyRewardProcessor"):
    cfg = config_text(
        functions=REWARD_FUNCTIONS.replace("functions.reward.reward.MyRewardProcessor", classpath)
    )
    return make_workspace(tmp_path, reward=True, config=cfg)


def test_clean_reward_workspace(tmp_path):
    rep = check(reward_ws(tmp_path))
    assert fn_rules(rep) == set() and rep.ok, str(rep)


def test_file_style_classpath_is_accepted(tmp_path):
    assert fn_rules(check(reward_ws(tmp_path, "functions/reward/reward.py:MyRewardProcessor"))) == set()


def test_classpath_file_missing(tmp_path):
    hit = check(reward_ws(tmp_path, "functions.reward.rewards.MyRewardProcessor")).by_rule(
        "functions.classpath-missing"
    )
    assert hit and "functions/reward/rewards.py does not exist" in hit[0].message
    assert hit[0].where.startswith("config.yaml:")


def test_class_missing(tmp_path):
    hit = check(reward_ws(tmp_path, "functions.reward.reward.MyReward")).by_rule("functions.class-missing")
    assert hit and "MyReward is not defined in functions/reward/reward.py" in hit[0].message


@pytest.mark.parametrize("classpath", ["MyRewardProcessor", "'functions/reward/reward.py:'"])
def test_unparsable_classpath(tmp_path, classpath):
    assert check(reward_ws(tmp_path, classpath)).by_rule("functions.bad-classpath")


def test_missing_init(tmp_path):
    ws = reward_ws(tmp_path)
    (ws / "functions" / "reward" / "__init__.py").unlink()
    hits = check(ws).by_rule("functions.missing-init")
    assert [h.where for h in hits] == ["functions/reward"]
    assert "ModuleNotFoundError" in hits[0].message and "functions/reward/__init__.py" in hits[0].fix


def test_wrong_base_class(tmp_path):
    ws = reward_ws(tmp_path)
    code = (ws / "functions" / "reward" / "reward.py").read_text()
    (ws / "functions" / "reward" / "reward.py").write_text(
        code.replace("AbstractRewardProcessor", "AbstractRolloutProcessor")
    )
    hit = check(ws).by_rule("functions.wrong-base")[0]
    assert hit.severity == "error" and "AbstractRolloutProcessor" in hit.message


def test_base_class_followed_through_local_modules(tmp_path):
    ws = reward_ws(tmp_path)
    (ws / "functions" / "reward" / "base.py").write_text(
        "from dashscope.finetune.reinforcement import AbstractRewardProcessor as ARP\n\n"
        "class Base(ARP):\n    async def process(self, x):\n        return None\n"
    )
    (ws / "functions" / "reward" / "reward.py").write_text(
        "from functions.reward.base import Base\n\nclass MyRewardProcessor(Base):\n    pass\n"
    )
    assert fn_rules(check(ws)) == set()


def test_no_process_method(tmp_path):
    ws = reward_ws(tmp_path)
    (ws / "functions" / "reward" / "reward.py").write_text(
        "from dashscope.finetune.reinforcement import AbstractRewardProcessor\n\n"
        "class MyRewardProcessor(AbstractRewardProcessor):\n    def score(self, x):\n        return 1.0\n"
    )
    assert check(ws).by_rule("functions.no-process")


def test_requirements_missing(tmp_path):
    cfg = config_text(functions=REWARD_FUNCTIONS)
    ws = make_workspace(tmp_path, reward=True, config=cfg, requirements=False)
    hit = check(ws).by_rule("functions.requirements-missing")[0]
    assert hit.where == "requirements.txt" and "2052" in hit.message
    # Pure distillation uploads no function: no requirements.txt needed.
    pure = make_workspace(tmp_path / "pure", requirements=False)
    assert "functions.requirements-missing" not in check(pure).rules()


def test_import_from_excluded_folder(tmp_path):
    ws = reward_ws(tmp_path)
    (ws / "functions" / "reward" / "data").mkdir()
    (ws / "functions" / "reward" / "data" / "__init__.py").write_text("")
    (ws / "functions" / "reward" / "data" / "answers.py").write_text("ANSWERS = {}\n")
    code = (ws / "functions" / "reward" / "reward.py").read_text()
    (ws / "functions" / "reward" / "reward.py").write_text(
        code.replace("import os\n", "import os\n\nfrom functions.reward.data.answers import ANSWERS\n")
    )
    hit = check(ws).by_rule("functions.excluded-import")[0]
    assert hit.where == "functions/reward/reward.py:3" and "'data'" in hit.message
    # Renamed folder: fine.
    (ws / "functions" / "reward" / "data").rename(ws / "functions" / "reward" / "answer_data")
    (ws / "functions" / "reward" / "reward.py").write_text(
        code.replace("import os\n", "import os\n\nfrom functions.reward.answer_data.answers import ANSWERS\n")
    )
    assert "functions.excluded-import" not in check(ws).rules()


@pytest.mark.parametrize("name", ["test_reward.py", "reward_test.py", "conftest.py"])
def test_a_pytest_file_at_the_root_may_import_the_excluded_tests(tmp_path, name):
    """The docs run `python -m pytest test_reward.py -v` from the workspace root, so a root test file that
    gathers tests/ is fine: the runtime never imports pytest's files. A function's module doing it is not."""
    ws = reward_ws(tmp_path)
    (ws / "tests").mkdir()
    (ws / "tests" / "test_reward.py").write_text("def test_one():\n    pass\n")
    (ws / name).write_text("from tests.test_reward import *  # noqa: F403\n")
    assert "functions.excluded-import" not in check(ws).rules()
    (ws / "functions" / "helpers.py").write_text("from tests.test_reward import test_one\n")
    hit = check(ws).by_rule("functions.excluded-import")[0]
    assert hit.where == "functions/helpers.py:1" and "'tests'" in hit.message


def test_zip_members_follow_the_sdk_exclusions(tmp_path):
    ws = reward_ws(tmp_path)
    (ws / ".env").write_text("DASHSCOPE_API_KEY=sk-real\n")
    (ws / "tests").mkdir()
    (ws / "tests" / "test_reward.py").write_text("")
    names = {p.relative_to(ws).as_posix() for p in zip_members(ws)}
    assert "functions/reward/reward.py" in names and "requirements.txt" in names
    assert not {".env", "tests/test_reward.py", "data/train.jsonl", "config.yaml", "submit_job.py"} & names
    assert (
        excluded_by("functions/tmp/x.py", ["tmp"]) == "tmp" and excluded_by("functions/a.py", ["tmp"]) is None
    )
    assert split_classpath("a.b.C") == ("a/b.py", "C") and split_classpath("x/y:C") == ("x/y.py", "C")


def test_zip_over_200_mib(tmp_path, monkeypatch):
    import opd_nb.checks.function_code as fn

    ws = reward_ws(tmp_path)
    (ws / "functions" / "weights.bin").write_bytes(__import__("os").urandom(64 * 1024))
    monkeypatch.setattr(fn, "ZIP_LIMIT_BYTES", 32 * 1024)  # the real limit is 200 MiB
    hit = check(ws).by_rule("functions.zip-too-large")[0]
    assert "functions/weights.bin" in hit.message
    monkeypatch.setattr(fn, "ZIP_LIMIT_BYTES", 10 * 1024**2)
    assert "functions.zip-too-large" not in check(ws).rules()


@pytest.mark.slow
def test_preflight_lists_what_a_submit_uploads_when_it_holds_data_or_large_files(tmp_path, monkeypatch):
    """Notebooks, data and large files in zipdir: named (largest first) before a submit uploads them;
    a workspace's own notebooks and checkpoints are already out of the zip and not mentioned."""
    monkeypatch.delenv("FC_ZIP_EXCLUDE_PATTERNS", raising=False)
    ws = reward_ws(tmp_path)
    (ws / "explore.ipynb").write_text('{"cells": []}')
    (ws / ".ipynb_checkpoints").mkdir()
    (ws / ".ipynb_checkpoints" / "explore-checkpoint.ipynb").write_text("{}")
    assert "functions.zip-contents" not in check(ws).rules()  # left out by the workspace's list
    (ws / "functions" / "labels.jsonl").write_text('{"a": 1}\n')
    (ws / "functions" / "table.pt").write_bytes(b"\0" * (2 * 1024**2))
    hit = check(ws).by_rule("functions.zip-contents")[0]
    assert hit.severity == "info" and "explore.ipynb" not in hit.message
    assert hit.message.index("functions/table.pt") < hit.message.index("functions/labels.jsonl")
    assert "2,048 KiB" in hit.message


def test_secret_in_zip(tmp_path, monkeypatch):
    ws = reward_ws(tmp_path)
    (ws / ".env").write_text("DASHSCOPE_API_KEY=" + FAKE_KEY + "\n")  # excluded: fine
    (ws / ".env.example").write_text("DASHSCOPE_API_KEY=sk-your-api-key\n")  # placeholder: fine
    assert "functions.secret-in-zip" not in check(ws).rules()
    code = (ws / "functions" / "reward" / "reward.py").read_text()
    (ws / "functions" / "reward" / "reward.py").write_text(code + f'\nKEY = "{FAKE_KEY}"\n')
    hit = check(ws).by_rule("functions.secret-in-zip")[0]
    assert hit.where.startswith("functions/reward/reward.py:") and "sk-0123" not in hit.message
    (ws / "functions" / "reward" / "reward.py").write_text(code)
    (ws / ".env.local").write_text("X=1\n")
    assert check(ws).by_rule("functions.secret-in-zip")[0].where == ".env.local"


def test_the_live_api_key_is_found_anywhere_in_the_zip(tmp_path, monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", "plainkey-without-prefix-123")
    ws = reward_ws(tmp_path)
    (ws / "notes.txt").write_text("remember: plainkey-without-prefix-123\n")
    assert check(ws).by_rule("functions.secret-in-zip")[0].where == "notes.txt:1"
