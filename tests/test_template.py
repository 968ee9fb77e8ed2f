"""The cookiecutter template: every valid combination bakes, has exactly its files, and works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers_template import ALL_PAIRS, CASE_IDS, CASES, COMBINATIONS, MODES, bake, expected_files, files_of

from opd_nb.engine.task import is_correct, make_rows
from opd_nb.workspace.new import create, template_dir

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
# The template's starting rate: the docs' 1e-6, lower for multi-turn (agentic) trajectories.
START_LR = {"pure-distill": 1.0e-6, "reward": 1.0e-6, "agentic": 3.0e-7}
FAKE_KEY = "sk-" + "fake0123456789abcdefSECRET"  # assembled: no key-like literal in the repo
DOTENV_KEY = "sk-" + "dotenv9876543210fedcbaSECRET"


def test_the_matrix_is_every_choice_of_the_template_that_opd_new_accepts(tmp_path: Path) -> None:
    """The matrix comes from cookiecutter.json: every mode is in it, and each pair left out is one that
    `opd new` refuses (before it writes anything)."""
    from opd_nb.errors import OpdError
    from opd_nb.workspace.rules import MODES as RULE_MODES

    assert set(MODES) == set(RULE_MODES) and {mode for mode, _ in COMBINATIONS} == set(MODES)
    for mode, with_reward in (pair for pair in ALL_PAIRS if pair not in COMBINATIONS):
        with pytest.raises(OpdError):
            create(mode, tmp_path / f"{mode}-{with_reward}", with_reward=with_reward)
        assert not (tmp_path / f"{mode}-{with_reward}").exists()


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str, bool, str]]:
    """Each valid combination, baked once through opd_nb.workspace.new.create."""
    root = tmp_path_factory.mktemp("baked")
    out = {}
    for ((mode, with_reward), name), case_id in zip(CASES, CASE_IDS, strict=True):
        ws = create(mode, root / case_id, name=name, with_reward=with_reward if mode == "agentic" else None)
        out[case_id] = (ws.path, mode, with_reward, name)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_exact_file_set_and_no_template_markup(baked: dict, case_id: str) -> None:
    path, mode, with_reward, _ = baked[case_id]
    assert files_of(path) == expected_files(mode, with_reward)
    for file in path.rglob("*"):
        if file.is_file():
            text = file.read_text(encoding="utf-8")
            for marker in ("{{", "{%", "{#", "cookiecutter"):
                assert marker not in text, f"{file.relative_to(path)} still contains {marker!r}"


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_config_loads_with_the_sdk(baked: dict, case_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from dashscope.finetune.reinforcement import TuningModel

    path, mode, with_reward, _ = baked[case_id]
    monkeypatch.chdir(path)
    tuning = TuningModel.load_from_yaml("config.yaml")
    types = sorted(str(getattr(f.type, "value", f.type)) for f in tuning.functions)
    assert types == sorted(
        ["reward"] * (mode == "reward" or (mode == "agentic" and with_reward))
        + ["rollout"] * (mode == "agentic")
    )
    assert tuning.model.name == "qwen3.5-9b" and tuning.teacher_model == "qwen3.5-397b-a17b"
    assert str(getattr(tuning.training.type, "value", tuning.training.type)) == "pg_opd"
    hp = tuning.training.hyper_parameters
    assert hp["learning_rate"] == START_LR[mode] and isinstance(hp["learning_rate"], float)
    assert hp["ppo_mini_batch_size"] <= hp["batch_size"] * hp["n_rollouts"]
    assert hp["lr_scheduler_type"] == "cosine"
    assert set(tuning.training.resources) == {"charge_type", "mtu_spec_code", "mtu_capacity"}
    for function in tuning.functions:
        file, _, cls = function.fcmodel.classpath.partition(":")
        assert Path(file).is_file() and f"class {cls}(" in Path(file).read_text()
        assert function.fcmodel.zipdir == "./" and function.runtime.concurrency
    raw = yaml.safe_load((path / "config.yaml").read_text())
    if mode == "pure-distill":
        assert "functions" not in raw  # `functions: null` is rejected by the SDK 2.0.2 loader


def test_awkward_names_end_up_safe(baked: dict) -> None:
    for path, _, _, name in baked.values():
        raw = yaml.safe_load((path / "config.yaml").read_text())
        assert isinstance(raw["name"], str) and raw["name"] and raw["name"] == raw["name"].lower()
        assert name.strip() in (path / "README.md").read_text(encoding="utf-8")
    assert (
        yaml.safe_load((baked["pure-distill-noreward"][0] / "config.yaml").read_text())["name"]
        == "3d-printing-lab"
    )


def test_baked_data_is_the_engine_task() -> None:
    data = template_dir() / "{{cookiecutter.workspace_slug}}" / "data"
    train = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    validation = [json.loads(line) for line in (data / "validation.jsonl").read_text().splitlines()]
    assert train == make_rows(512, seed=0) and len(validation) == 64
    assert not {r["messages"][-1]["content"] for r in train} & {
        r["messages"][-1]["content"] for r in validation
    }
    row = validation[0]
    assert is_correct(
        f"<think>n=0</think>{row['rollout_extra']['solution']}", row["rollout_extra"]["solution"]
    )
    rc = subprocess.run(
        [PY, str(REPO / "scripts" / "make_template_data.py"), "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert rc.returncode == 0, rc.stderr


@pytest.mark.slow
def test_post_gen_hook_removes_what_the_mode_does_not_use(tmp_path: Path) -> None:
    # Direct cookiecutter use (no opd_nb validation in front): the hook alone decides.
    project = bake(tmp_path / "out", workspace_name="Hooked", mode="agentic", with_reward=False)
    assert not (project / "functions" / "reward").exists() and (project / "functions" / "rollout").is_dir()
    project = bake(tmp_path / "out2", workspace_name="Plain", mode="pure-distill")
    assert not (project / "functions").exists() and not (project / "tests" / "test_reward.py").exists()


@pytest.mark.parametrize(
    "context",
    [
        {"workspace_name": "!!!"},
        {"workspace_name": "ok", "reward_class": "class"},
        {"workspace_name": "ok", "student_model": "qwen 3"},
        {"workspace_name": "ok", "reward_class": "RewardInput"},
    ],
    ids=["no-slug", "keyword-class", "space-in-model", "reserved-class"],
)
def test_pre_gen_hook_rejects_invalid_answers(
    tmp_path: Path, context: dict, capfd: pytest.CaptureFixture[str]
) -> None:
    from cookiecutter.exceptions import FailedHookException

    with pytest.raises(FailedHookException):
        bake(tmp_path / "out", **context)
    assert "error:" in capfd.readouterr().err
    assert list((tmp_path / "out").iterdir()) == []  # cookiecutter removed the half-made project


def test_template_dir_finds_the_wheel_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import opd_nb.workspace.new

    assert (template_dir() / "cookiecutter.json").is_file()
    fake_pkg = tmp_path / "site-packages" / "opd_nb"
    (fake_pkg / "template").mkdir(parents=True)
    (fake_pkg / "template" / "cookiecutter.json").write_text("{}")
    monkeypatch.setattr(opd_nb.workspace.new, "__file__", str(fake_pkg / "workspace" / "new.py"))
    assert template_dir() == fake_pkg / "template"


def _dry_run(path: Path, *args: str, cwd: Path | None = None) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "FC_"))}
    env["DASHSCOPE_API_KEY"] = FAKE_KEY
    proc = subprocess.run(
        [PY, str(path / "submit_job.py"), "--dry-run", *args],
        cwd=cwd or path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert FAKE_KEY not in proc.stdout + proc.stderr and DOTENV_KEY not in proc.stdout + proc.stderr
    return json.loads(proc.stdout), proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_dry_run_shows_the_effective_job_and_never_the_key(baked: dict, case_id: str, tmp_path: Path) -> None:
    path, mode, with_reward, _ = baked[case_id]
    (path / ".env").write_text(f"DASHSCOPE_API_KEY={DOTENV_KEY}\n")
    try:
        job, _ = _dry_run(path, cwd=tmp_path)  # run from elsewhere: the script changes into the workspace
        assert job["teacher_model"] == "qwen3.5-397b-a17b" and job["training_type"] == "pg_opd"
        assert job["api_key"] == "environment" and job["target"].startswith("https://")
        assert [d["file_name"] for d in job["training_datasets"]] == ["data/train.jsonl"]
        assert [d["file_name"] for d in job["validation_datasets"]] == ["data/validation.jsonl"]
        has_reward = mode == "reward" or (mode == "agentic" and with_reward)
        kinds = [f["type"] for f in job["functions"] or []]
        assert kinds == ["rollout"] * (mode == "agentic") + ["reward"] * has_reward
        assert job["hyper_parameters"]["learning_rate"] == START_LR[mode]

        over, _ = _dry_run(
            path,
            "--no-reward",
            "--teacher-model",
            "qwen3-max",
            "--model",
            "s-2",
            "--job-name",
            "exp1",
            "--local",
        )
        assert over["functions"] == ([{**job["functions"][0]}] if mode == "agentic" else None)
        assert (over["teacher_model"], over["model"], over["job_name"]) == (
            "qwen3-max",
            "s-2",
            "exp1-<8 hex>",
        )
        assert over["target"] == "http://127.0.0.1:8765/api/v1"
        custom, _ = _dry_run(path, "-c", str(path / "config.yaml"), "--local", "http://127.0.0.1:9999/api/v1")
        assert custom["target"] == "http://127.0.0.1:9999/api/v1"
    finally:
        (path / ".env").unlink()
    for file in path.rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            assert FAKE_KEY.encode() not in data and DOTENV_KEY.encode() not in data, file


@pytest.mark.slow
def test_submit_without_a_key_is_a_clear_error(baked: dict, tmp_path: Path) -> None:
    path = baked["reward-reward"][0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "FC_"))}
    env["HOME"] = str(tmp_path)
    proc = subprocess.run(
        [PY, "submit_job.py"], cwd=path, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "no API key" in proc.stderr and "Traceback" not in proc.stderr
    bad = subprocess.run(
        [PY, "submit_job.py", "--dry-run", "-c", "nope.yaml"],
        cwd=path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "nope.yaml" in bad.stderr and "Traceback" not in bad.stderr
    (path / ".env").write_text(f'# comment\nexport DASHSCOPE_API_KEY="{DOTENV_KEY}"  \n')
    try:
        dotenv = subprocess.run(
            [PY, "submit_job.py", "--dry-run"], cwd=path, env=env, capture_output=True, text=True, timeout=60
        )
    finally:
        (path / ".env").unlink()
    assert dotenv.returncode == 0 and json.loads(dotenv.stdout)["api_key"] == ".env"
    assert DOTENV_KEY not in dotenv.stdout + dotenv.stderr


def test_a_python_without_the_requirements_gets_one_line(baked: dict, tmp_path: Path) -> None:
    """`python3 submit_job.py --dry-run` with a Python that lacks dashscope (a fresh venv, as a user's
    system Python): one line naming what to install and how, exit 2, no ModuleNotFoundError traceback."""
    import venv

    venv.create(tmp_path / "bare", with_pip=False)
    bare = tmp_path / "bare" / "bin" / "python"
    path = baked["reward-reward"][0]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    proc = subprocess.run(
        [str(bare), "submit_job.py", "--dry-run"],
        cwd=path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "lacks dashscope, PyYAML, python-dotenv" in lines[0]
    assert f"{bare} -m pip install -r requirements.txt" in lines[0] and "opd submit ." in lines[0]
    requirements = (path / "requirements.txt").read_text(encoding="utf-8")
    assert all(name in requirements for name in ("dashscope", "PyYAML", "python-dotenv"))


@pytest.mark.slow
def test_broken_config_is_reported_with_the_sdk_code(baked: dict, tmp_path: Path) -> None:
    path = baked["pure-distill-noreward"][0]
    broken = tmp_path / "broken.yaml"
    broken.write_text((path / "config.yaml").read_text() + "functions: null\n")
    proc = subprocess.run(
        [PY, str(path / "submit_job.py"), "--dry-run", "-c", str(broken)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "broken.yaml" in proc.stderr and "1002" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_generated_workspace_passes_its_own_tests_and_ruff(baked: dict, case_id: str) -> None:
    path = baked[case_id][0]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTHONPATH")}
    tests = subprocess.run(
        [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert " passed" in tests.stdout and "failed" not in tests.stdout
    if (path / "functions" / "reward").is_dir():  # the docs' command runs every reward test (issue 51)
        docs = subprocess.run(
            [PY, "-m", "pytest", "test_reward.py", "-v", "-p", "no:cacheprovider"],
            cwd=path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert docs.returncode == 0, docs.stdout[-3000:] + docs.stderr[-2000:]
        written = (path / "tests" / "test_reward.py").read_text().count("\ndef test_")
        assert f" {written} passed" in docs.stdout, docs.stdout[-1500:]
    ruff = subprocess.run(
        [PY, "-m", "ruff", "check", "--no-cache", "."], cwd=path, capture_output=True, text=True
    )
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr


@pytest.mark.slow
def test_reward_and_rollout_run_under_the_sdk_function_server(baked: dict) -> None:
    """The classpaths in config.yaml load in the SDK's own server and answer over HTTP."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import httpx

    from opd_nb.functions.server import FunctionServer

    path = baked["agentic-reward"][0]
    raw = yaml.safe_load((path / "config.yaml").read_text())
    classpaths = {f["type"]: f["fcmodel"]["classpath"] for f in raw["functions"]}
    agent_output = {
        "messages": [{"role": "assistant", "content": "<think>n=5</think>13489"}],
        "rollout_extra": {"solution": "13489"},
    }
    with FunctionServer.start(path, "reward", classpaths["reward"]) as server:
        body = httpx.post(f"{server.url}/api/v1", json={"agent_output": agent_output}, timeout=30).json()
    assert body["status"] == "success" and body["reward"]["reward_score"] == 1.0, body

    class Student(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            data = json.dumps({"choices": [{"message": {"role": "assistant", "content": "13489"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    student = ThreadingHTTPServer(("127.0.0.1", 0), Student)
    threading.Thread(target=student.serve_forever, daemon=True).start()
    try:
        payload = {
            "messages": [{"role": "user", "content": "93418"}],
            "rollout_extra": {"solution": "13489"},
            "model_resource": {
                "model_name": "s",
                "api_key": "local",
                "base_url": f"http://127.0.0.1:{student.server_address[1]}/v1",
            },
        }
        with FunctionServer.start(path, "rollout", classpaths["rollout"]) as server:
            body = httpx.post(f"{server.url}/api/v1", json=payload, timeout=30).json()
    finally:
        student.shutdown()
    assert body["status"] == "success", body
    assert body["agent_output"]["messages"][-1]["content"] == "13489"
