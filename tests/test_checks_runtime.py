"""Issue 42: what runs the user's code in the cloud must be able to import it, and `process` is read by its
data flow. Each case writes a workspace by hand, plants one mistake (rule, severity, file:line, fix) and
checks the fixed variant is clean of it."""

from __future__ import annotations

import ast
import asyncio
from importlib import metadata

import pytest
from test_checks_config import REWARD_CODE, REWARD_FUNCTIONS, SDK_WHEEL, config_text, make_workspace
from test_checks_contracts import _env, line_of, only  # noqa: F401 (_env: the autouse fixture)

from opd_nb.checks import check
from opd_nb.checks.function_runtime import import_names, import_to_requirement
from opd_nb.checks.processor_contract import DICT_SHAPES
from opd_nb.workspace.new import create

SDK_LINE = "dashscope[agentic-rl]>=2.0.2\n"
RETURN = "return RewardOutput(reward=Reward(reward_score=float(text.strip() == solution)))"


def reward_ws(tmp_path, code: str = REWARD_CODE, requirements: str = SDK_LINE):
    ws = make_workspace(tmp_path, reward=True, config=config_text(functions=REWARD_FUNCTIONS))
    (ws / "functions" / "reward" / "reward.py").write_text(code, encoding="utf-8")
    (ws / "requirements.txt").write_text(requirements, encoding="utf-8")
    return ws


def with_import(statement: str) -> str:
    return REWARD_CODE.replace("import os\n", f"import os\n{statement}\n")


# ---------------------------------------------------------------- the SDK in the function runtime


def test_a_runtime_without_the_sdk_is_an_error_with_both_fixes(tmp_path, monkeypatch):
    """Seed 001: FC_PYPI_LIB is required for reward and agentic jobs; requirements.txt may bring it instead."""
    ws = reward_ws(tmp_path, requirements="# nothing\nhttpx>=0.27\n")
    (ws / ".env").unlink()  # no FC_PYPI_LIB either
    hit = only(check(ws), "functions.runtime-sdk")
    assert hit.severity == "error" and hit.where == "requirements.txt"
    assert "FC_PYPI_LIB is not set" in hit.message and "does not list dashscope" in hit.message
    assert "dashscope[agentic-rl]>=2.0.2" in hit.fix and "FC_PYPI_LIB=" in hit.fix
    local = only(check(ws, "local", base_url="http://127.0.0.1:9/api/v1"), "functions.runtime-sdk")
    assert local.severity == "warning"  # locally the function runs in this environment
    (ws / "dashscope-2.0.2-py3-none-any.whl").write_bytes(b"PK")
    monkeypatch.setenv("FC_PYPI_LIB", "./dashscope-2.0.2-py3-none-any.whl")
    assert "functions.runtime-sdk" not in check(ws).rules()  # the wheel is the SDK
    monkeypatch.delenv("FC_PYPI_LIB")
    (ws / ".env").write_text("FC_PYPI_LIB=./dashscope-2.0.2-py3-none-any.whl\n")
    assert "functions.runtime-sdk" not in check(ws).rules()  # read from .env, as submit_job.py does
    pure = make_workspace(tmp_path / "pure", requirements=True)  # no functions: no runtime is built
    assert "functions.runtime-sdk" not in check(pure).rules()


@pytest.mark.parametrize(
    "requirement,fc_pypi_lib,flagged",
    [
        ("dashscope>=2.0.2\n", "", "requirements.txt:1"),
        ("dashscope\n", "", "requirements.txt:1"),
        ("dashscope==2.0.2\n", "", None),
        ("dashscope>=2.0.2,<2.1\n", "", None),
        (SDK_LINE, "", None),
        ("dashscope>=2.0.2\nfastapi\nuvicorn\nopentelemetry-sdk\n", "", None),
        ("", "./dashscope-2.1.3-py3-none-any.whl", "FC_PYPI_LIB"),
        ("", "./dashscope-2.1.3-py3-none-any.whl[agentic-rl]", None),
        ("", "./dashscope-2.0.2-py3-none-any.whl", None),
    ],
)
def test_an_sdk_that_may_be_2_1_needs_the_agentic_rl_extra(
    tmp_path, monkeypatch, requirement, fc_pypi_lib, flagged
):
    """dashscope 2.1 moved the function server's dependencies into the agentic-rl extra (the lifecycle note)."""
    ws = reward_ws(tmp_path, requirements=requirement)
    if fc_pypi_lib:
        (ws / fc_pypi_lib.partition("[")[0]).write_bytes(b"PK")
        monkeypatch.setenv("FC_PYPI_LIB", fc_pypi_lib)
    hits = check(ws).by_rule("functions.runtime-sdk")
    if flagged is None:
        assert hits == []
    else:
        (hit,) = hits
        assert hit.severity == "warning" and hit.where == flagged and "agentic-rl" in hit.fix


def test_the_template_requirement_is_safe_on_2_0_and_2_1():
    from packaging.requirements import Requirement

    from opd_nb.workspace.new import template_dir

    lines = (template_dir() / "{{cookiecutter.workspace_slug}}" / "requirements.txt").read_text().splitlines()
    (sdk,) = [Requirement(ln) for ln in lines if ln.strip().startswith("dashscope")]
    assert sdk.extras == {"agentic-rl"}  # 2.1+: the function server's dependencies come with it
    assert sdk.specifier.contains("2.0.2") and sdk.specifier.contains("2.1.3")


# ---------------------------------------------------------------- every import resolvable in the runtime


@pytest.mark.slow
def test_a_module_nothing_installs_is_an_error_with_the_line_and_the_requirement_to_add(tmp_path):
    code = with_import("import sklearn.metrics")
    ws = reward_ws(tmp_path, code)
    rep = check(ws)
    hit = only(rep, "functions.unresolved-import")
    assert not rep.ok and hit.severity == "error"
    assert hit.where == f"functions/reward/reward.py:{line_of(code, 'import sklearn')}"
    assert "`sklearn.metrics` is imported" in hit.message and "ModuleNotFoundError" in hit.message
    assert hit.fix == "add `scikit-learn` to requirements.txt (its import name is sklearn)"
    local = only(check(ws, "local", base_url="http://127.0.0.1:9/api/v1"), "functions.unresolved-import")
    assert local.severity == "warning" and "the cloud's runtime is what fails" in local.message
    (ws / "requirements.txt").write_text(SDK_LINE + "scikit-learn>=1.4\n")
    assert "functions.unresolved-import" not in check(ws).rules()


@pytest.mark.parametrize(
    "statement,requirement",
    [
        ("import yaml", "PyYAML"),  # installed here: its metadata maps it
        ("from bs4 import BeautifulSoup", "beautifulsoup4"),
        ("import cv2", "opencv-python-headless"),  # not installed here: the documented table
        ("import dateutil.parser", "python-dateutil"),
        ("import sentence_transformers", "sentence-transformers"),  # the name with - as _
    ],
)
def test_requirement_names_are_matched_to_import_names(tmp_path, statement, requirement):
    ws = reward_ws(tmp_path, with_import(statement), requirements=SDK_LINE + f"{requirement}\n")
    assert "functions.unresolved-import" not in check(ws).rules(), str(check(ws))


def test_what_the_sdk_installs_with_it_resolves(tmp_path):
    """httpx and pydantic come with dashscope (its dependencies): no requirement line needed."""
    ws = reward_ws(tmp_path, with_import("import httpx\nfrom pydantic import BaseModel"))
    assert "functions.unresolved-import" not in check(ws).rules()


def test_local_modules_are_followed_and_their_imports_checked(tmp_path):
    ws = reward_ws(tmp_path, with_import("from functions.reward.helpers import tidy\nimport textutils"))
    (ws / "functions" / "reward" / "helpers.py").write_text(
        "import json\nimport rapidfuzz\n\ndef tidy(x):\n    return x\n"
    )
    (ws / "textutils.py").write_text("import re\n")  # a module at the zip's root: PYTHONPATH=.
    hit = only(check(ws), "functions.unresolved-import")
    assert hit.where == "functions/reward/helpers.py:2" and "`rapidfuzz`" in hit.message


def test_guarded_and_type_checking_imports_are_not_required(tmp_path):
    code = with_import(
        "try:\n    import ujson as json_impl\nexcept ImportError:\n    json_impl = None\n"
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import numpy_financial"
    )
    assert "functions.unresolved-import" not in check(reward_ws(tmp_path, code)).rules()


def test_an_import_a_requirement_not_installed_here_might_bring_is_a_warning(tmp_path):
    ws = reward_ws(
        tmp_path, with_import("import fancy_scorer_core"), requirements=SDK_LINE + "fancy-scorer\n"
    )
    hit = only(check(ws), "functions.unresolved-import")
    assert hit.severity == "warning" and "unless fancy-scorer" in hit.message


@pytest.mark.slow
def test_the_name_maps_agree_with_installed_metadata():
    assert "yaml" in import_names("PyYAML") and "sklearn" in import_names("scikit-learn")
    assert import_to_requirement("yaml") == "PyYAML" and import_to_requirement("bs4") == "beautifulsoup4"


@pytest.mark.parametrize("mode", ["reward", "agentic"])
def test_the_template_functions_import_only_what_the_runtime_installs(tmp_path, mode):
    ws = create(mode, tmp_path / mode).path
    rep = check(ws)
    assert (
        not {"functions.unresolved-import", "functions.runtime-sdk", "functions.bad-requirement"}
        & rep.rules()
    )


def test_a_requirement_pip_cannot_read_is_an_error(tmp_path):
    ws = reward_ws(tmp_path, requirements=SDK_LINE + "numpy >= = 2\n")
    hit = only(check(ws), "functions.bad-requirement")
    assert hit.where == "requirements.txt:2" and hit.severity == "error"


# ---------------------------------------------------------------- the processor contract by data flow


def test_a_plain_def_process_is_a_warning_and_the_workspace_tests_would_fail(tmp_path):
    code = REWARD_CODE.replace("async def process", "def process")
    hit = only(check(reward_ws(tmp_path, code)), "functions.process-not-async")
    assert (
        hit.severity == "warning"
        and hit.where == f"functions/reward/reward.py:{line_of(code, 'def process')}"
    )
    assert "async def process" in hit.fix
    # what the message says: the template's own test shape (asyncio.run(...process(...))) refuses a plain def
    namespace: dict = {}
    exec(compile(ast.parse(code), "reward.py", "exec"), namespace)
    with pytest.raises((TypeError, ValueError), match="coroutine was expected"):
        asyncio.run(namespace["MyRewardProcessor"]().process(_reward_input()))
    assert "functions.process-not-async" not in check(reward_ws(tmp_path / "ok")).rules()


def _reward_input():
    from dashscope.finetune.reinforcement import RewardInput

    return RewardInput.model_validate(
        {
            "agent_output": {
                "messages": [{"role": "assistant", "content": "x"}],
                "rollout_extra": {"solution": "x"},
            },
            "ground_truth": "x",
        }
    )


@pytest.mark.parametrize(
    "new,needle,what",
    [
        ('return {"reward_score": 1.0}', "return {", "a dict without `reward` (it has reward_score)"),
        ('out = {"reward_score": 1.0}\n        return out', "return out", "a dict without `reward`"),
        ('return dict(score=1.0, status="success")', "return dict", "a dict without `reward`"),
        ('return {"reward": {"score": 1.0}}', "return {", "a dict whose `reward` has no `reward_score`"),
        ("r = Reward(reward_score=1.0)\n        return r", "return r", "returns a Reward"),
    ],
)
def test_returned_dicts_and_variables_are_read_for_their_shape(tmp_path, new, needle, what):
    code = REWARD_CODE.replace(RETURN, new)
    hit = only(check(reward_ws(tmp_path, code)), "functions.bad-return")
    assert hit.where == f"functions/reward/reward.py:{line_of(code, needle)}" and what in hit.message


@pytest.mark.parametrize(
    "new",
    [
        'return {"reward": {"reward_score": 1.0, "reward_metrics": {}}, "status": "success"}',
        "out = RewardOutput(reward=Reward(reward_score=1.0))\n        return out",
    ],
)
def test_a_dict_or_variable_of_the_right_shape_is_clean(tmp_path, new):
    code = REWARD_CODE.replace(RETURN, new)
    assert "functions.bad-return" not in check(reward_ws(tmp_path, code)).rules()


def test_dict_shapes_are_the_sdk_models_required_fields():
    from dashscope.finetune.reinforcement import GroupReward, GroupRewardOutput, Reward, RewardOutput

    def required(model):
        return {k for k, f in model.model_fields.items() if f.is_required()}

    assert DICT_SHAPES["reward"] == ("reward", tuple(required(Reward))) and required(RewardOutput) == {
        "reward"
    }
    assert DICT_SHAPES["group_reward"] == ("reward", tuple(required(GroupReward)))
    assert required(GroupRewardOutput) == {"reward"}


TEMPLATE_POP = 'reward_score = metrics.pop("reward_score")'


@pytest.mark.parametrize(
    "old,new",
    [
        (TEMPLATE_POP, 'reward_score = metrics["reward_score"]'),  # the template's comprehension, no pop
        (TEMPLATE_POP, 'reward_score = metrics.get("reward_score")'),
        (
            "reward_metrics={key: float(value) for key, value in metrics.items()},",
            "reward_metrics={k: float(v) for k, v in score_answer(answer, ground_truth).items()},",
        ),
        (
            "reward_metrics={key: float(value) for key, value in metrics.items()},",
            "reward_metrics={**extra},",
        ),
        ("reward_metrics={key: float(value) for key, value in metrics.items()},", "reward_metrics=merged,"),
    ],
)
def test_reward_score_left_in_metrics_is_found_in_the_templates_own_shapes(tmp_path, old, new):
    """The template builds reward_metrics with a dict comprehension; without the pop, the main score stays in it."""
    ws = create("reward", tmp_path / "ws").path
    path = ws / "functions" / "reward" / "reward.py"
    code = path.read_text()
    assert TEMPLATE_POP in code and old in code
    code = code.replace(old, new)
    if "**extra" in new:
        code = code.replace(
            TEMPLATE_POP, f"{TEMPLATE_POP}\n            extra = dict(metrics, reward_score=reward_score)"
        )
    if "merged" in new:  # a dict filled by update() from the scores, reward_score included
        code = code.replace(
            TEMPLATE_POP,
            f"{TEMPLATE_POP}\n            merged = {{}}\n            merged.update(score_answer(answer, ground_truth))",
        )
    path.write_text(code)
    hit = only(check(ws), "functions.reward-score-in-metrics")
    # the scored answer's Reward (the one built over lines; an empty answer and an error return 0 in one)
    scored = next(
        i for i, text in enumerate(code.splitlines(), 1) if text.rstrip().endswith("reward=Reward(")
    )
    assert hit.where == f"functions/reward/reward.py:{scored}"


def test_the_templates_reward_and_a_filtered_comprehension_are_clean(tmp_path):
    ws = create("reward", tmp_path / "ws").path
    assert "functions.reward-score-in-metrics" not in check(ws).rules()
    path = ws / "functions" / "reward" / "reward.py"
    code = path.read_text().replace(TEMPLATE_POP, 'reward_score = metrics["reward_score"]')
    code = code.replace(
        "for key, value in metrics.items()},", 'for key, value in metrics.items() if key != "reward_score"},'
    )
    path.write_text(code)
    assert "functions.reward-score-in-metrics" not in check(ws).rules()


# ---------------------------------------------------------------- FC_PYPI_LIB as the docs insist (issue 51)


def test_unset_fc_pypi_lib_is_a_cloud_finding_for_a_job_with_functions(tmp_path):
    """Seed 001: "FC_PYPI_LIB(required) ... pure distillation (functions=None) ... can be skipped"."""
    ws = reward_ws(tmp_path)  # requirements.txt lists dashscope: the old rule said nothing
    (ws / ".env").unlink()
    hit = only(check(ws), "env.fc-pypi-lib")
    assert hit.severity == "warning" and hit.where == "FC_PYPI_LIB" and "not set" in hit.message
    assert "FC_PYPI_LIB=./dashscope-" in hit.fix
    local = check(ws, "local", base_url="http://127.0.0.1:9/api/v1")  # functions run in this environment
    assert "env.fc-pypi-lib" not in local.rules()
    pure = make_workspace(tmp_path / "pure")
    assert "env.fc-pypi-lib" not in check(pure).rules()


@pytest.mark.parametrize("other", ["1.27.5", "2.1.3"])
@pytest.mark.parametrize("where", ["env", "dotenv"])
def test_fc_pypi_lib_of_another_sdk_version_than_installed(tmp_path, monkeypatch, other, where):
    """Seed 001: the wheel "本机与远端均按此版本安装" (this machine and the remote install this version)."""
    ws = reward_ws(tmp_path)
    wheel = f"dashscope-{other}-py3-none-any.whl"
    (ws / wheel).write_bytes(b"PK")
    if where == "env":
        monkeypatch.setenv("FC_PYPI_LIB", f"./{wheel}")
    else:
        (ws / ".env").write_text(f"FC_PYPI_LIB=./{wheel}\n")
    installed = metadata.version("dashscope")
    for target in ("cloud", "local"):
        hit = only(check(ws, target, base_url="http://127.0.0.1:9/api/v1"), "env.fc-pypi-lib")
        assert hit.severity == "warning" and f"dashscope {other}" in hit.message and installed in hit.message
        assert hit.where == ("FC_PYPI_LIB" if where == "env" else ".env:1")
        assert f"dashscope-{installed} wheel" in hit.fix
    monkeypatch.delenv("FC_PYPI_LIB", raising=False)
    (ws / ".env").write_text(f"FC_PYPI_LIB=./{SDK_WHEEL}\n")  # the installed version: nothing to say
    assert "env.fc-pypi-lib" not in check(ws).rules()
