"""One `--set` grammar and one workspace path for every verb: check, estimate, config, submit (and its
--dry-run, --smoke), sweep, the magics and the workspace's own submit_job.py read them alike.

Through the real CLI (`opd_nb.cli.main`, as the `opd` script runs it) and the real submit_job.py.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiny_workspace

from opd_nb.cli import main
from opd_nb.errors import OpdError
from opd_nb.spec.sets import parse_sets

TEMPLATE_SCRIPT = Path(__file__).parents[1] / "template" / "{{cookiecutter.workspace_slug}}" / "submit_job.py"
ROWS = 24  # tiny_workspace: batch_size 8, 1 epoch -> 3 steps


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-" + "settests0123456789abcdef")
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)


@pytest.fixture()
def ws(tmp_path) -> Path:
    return tiny_workspace("pure-distill", tmp_path / "ws", train_rows=ROWS)


def opd(capsys, *argv: str) -> tuple[int, str, str]:
    """`opd ARGV` in-process: (exit code, stdout, stderr)."""
    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bare_names_expand_and_other_keys_pass_through():
    assert parse_sets(["n_epochs=2", "mtu_capacity=8", "learning_rate=2e-6", "model.name=qwen3.5-27b"]) == {
        "training.hyper_parameters.n_epochs": 2,
        "training.resources.mtu_capacity": 8,
        "training.hyper_parameters.learning_rate": 2e-6,
        "model.name": "qwen3.5-27b",
    }
    assert parse_sets(["lr_scheduler_type=linear", 'name="007"']) == {
        "training.hyper_parameters.lr_scheduler_type": "linear",
        "name": "007",
    }


@pytest.mark.parametrize(
    ("item", "words"),
    [
        ("n_epoch=2", "did you mean --set n_epochs=... (training.hyper_parameters.n_epochs)"),
        ("warmup_steps=5", "`warmup_steps` is another trainer's name for it"),
        ("training.hyper_parameters.bogus=1", "unknown key `bogus`"),
        ("training.resources.batch_size=4", "`batch_size` belongs under training.hyper_parameters"),
        ("training.n_epochs=2", "write --set n_epochs=... (training.hyper_parameters.n_epochs)"),
        ("learning_rate=-1.0e-6", "below the minimum"),
        ("batch_size=15.5", "expected a whole number"),
        ("lr_scheduler_type=cosinus", "not one of cosine"),
        ("model=qwen3.5-9b", "set one key in it, e.g. --set model.name=qwen3.5-9b"),
        ("n_epochs", "expected KEY=VALUE"),
        ("finetuned_output=my-model-v2", "remove `finetuned_output`: the service names the trained model"),
        ("job_id=ft-1", "the service gives each job its id"),
    ],
)
def test_a_set_the_service_would_ignore_or_refuse_is_one_line_with_the_key_to_write(item, words):
    with pytest.raises(OpdError) as refused:
        parse_sets([item])
    assert words in str(refused.value), str(refused.value)


@pytest.mark.slow
@pytest.mark.parametrize("verb", [["check"], ["estimate"], ["config"]])
def test_every_verb_refuses_the_same_bad_set(capsys, ws, verb):
    for item, words in (
        ("training.hyper_parameters.bogus=1", "unknown key `bogus`"),
        ("batch_size=0", "below the minimum 1"),
        ("n_epoch=2", "did you mean --set n_epochs"),
    ):
        code, out, err = opd(capsys, *verb, str(ws), "--set", item)
        assert code == 2 and words in err and "Traceback" not in err, (verb, item, out, err)


@pytest.mark.slow
def test_every_verb_reads_a_bare_name_into_the_config(capsys, ws):
    code, out, _ = opd(capsys, "estimate", str(ws), "--set", "batch_size=5", "--set", "n_epochs=2", "--json")
    got = json.loads(out)
    assert code == 0 and (got["batch_size"], got["n_epochs"]) == (5, 2)
    assert got["steps"] == math.ceil(ROWS / 5) * 2  # the changed estimate, not the file's
    code, out, _ = opd(capsys, "config", str(ws), "--set", "batch_size=5", "--json")
    payload = json.loads(out)
    assert payload["config"]["training"]["hyper_parameters"]["batch_size"] == 5
    assert (
        payload["sources"]["training.hyper_parameters.batch_size"]
        == "--set training.hyper_parameters.batch_size"
    )
    code, out, _ = opd(capsys, "check", str(ws), "--set", "batch_size=24", "--json")
    (finding,) = [f for f in json.loads(out) if f["rule"] == "data.too-few-rows"]
    assert code == 1 and finding["where"] == "--set training.hyper_parameters.batch_size"


@pytest.mark.slow
def test_every_verb_takes_the_config_file_as_its_workspace(capsys, ws):
    for verb in (["check"], ["estimate", "--json"], ["config", "--json"]):
        by_folder = opd(capsys, *verb, str(ws))
        by_file = opd(capsys, *verb, str(ws / "config.yaml"))
        assert by_folder[0] == by_file[0] == 0, (verb, by_file)
        assert by_file[1] == by_folder[1], verb
        assert "no estimate" not in by_file[1] and "not found" not in by_file[1] + by_file[2]
    (ws / "other.yaml").write_text((ws / "config.yaml").read_text().replace("n_epochs: 1", "n_epochs: 4"))
    code, out, _ = opd(capsys, "estimate", str(ws / "other.yaml"), "--json")
    assert code == 0 and json.loads(out)["n_epochs"] == 4
    code, _, err = opd(capsys, "estimate", str(ws / "other.yaml"), "--config", "third.yaml")
    assert code == 2 and "two configs given" in err


@pytest.mark.slow
def test_sweep_takes_the_config_file_and_checks_each_value(capsys, ws, tmp_path):
    code, out, err = opd(
        capsys,
        "sweep",
        str(ws / "config.yaml"),
        "-p",
        "eval_steps=1,2",
        "--local",
        "http://127.0.0.1:9",
        "--dry-run",
    )
    assert code == 0 and "nothing sent" in out, err
    code, _, err = opd(
        capsys, "sweep", str(ws), "-p", "batch_size=8,24", "--local", "http://127.0.0.1:9", "--dry-run"
    )
    assert code == 2 and "batch_size=24" in err and "data.too-few-rows" in err, (
        err
    )  # the one bad value, named


def _template_module():
    spec = importlib.util.spec_from_file_location("template_submit_job_sets", TEMPLATE_SCRIPT)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


CORPUS = [
    "n_epochs=2",
    "mtu_capacity=8",
    "training.hyper_parameters.learning_rate=2e-6",
    "training.resources.charge_type=mtu_postpaid",
    "model.name=qwen3.5-27b",
    "teacher_model=qwen3.5-397b-a17b",
    'name="exp 1"',
    "lr_scheduler_type=linear",
    "n_epoch=2",
    "training.hyper_parameters.bogus=1",
    "training.hyper_parameters.sub.key=1",
    "training.resources.batch_size=4",
    "training.hyper_parameters.mtu_capacity=4",
    "training.n_epochs=2",
    "training.hyper_parameters=5",
    "model=qwen3.5-9b",
    "bogus=1",
    "modle.name=x",
    "=3",
    "n_epochs",
    "a..b=1",
]


@pytest.mark.parametrize("item", CORPUS)
def test_submit_job_py_reads_a_set_as_opd_does_without_opd_nb(item):
    """The template's own parser (what runs where opd-nb is not installed) accepts and expands exactly what
    opd-nb's parser does, on one corpus of what people type."""
    module = _template_module()
    try:
        ours: object = parse_sets([item])
    except OpdError:
        ours = "refused"
    try:
        theirs: object = module.read_sets([item])
    except module.UsageError:
        theirs = "refused"
    assert theirs == ours, item


def _script(ws: Path, *args: str, opd_nb: bool = True) -> subprocess.CompletedProcess:
    """The workspace's submit_job.py as a user runs it; without opd-nb importable when `opd_nb` is False."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_NB_", "PYTHONPATH"))}
    env["DASHSCOPE_API_KEY"] = "sk-" + "settests0123456789abcdef"
    cmd = [sys.executable, "submit_job.py", *args]
    if not opd_nb:  # a Python where `import opd_nb` fails: the script's own fallbacks run
        blocker = ws / ".no-opd"
        blocker.mkdir(exist_ok=True)
        (blocker / "sitecustomize.py").write_text(
            "import sys\nclass _Block:\n    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'opd_nb' or name.startswith('opd_nb.'):\n            raise ImportError(name)\n"
            "sys.meta_path.insert(0, _Block())\n"
        )
        env["PYTHONPATH"] = str(blocker)
    return subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # submit_job.py imports the SDK
def test_submit_job_py_takes_bare_names_with_and_without_opd_nb(ws):
    for with_opd in (True, False):
        proc = _script(ws, "--dry-run", "--set", "n_epochs=2", "--set", "batch_size=16", opd_nb=with_opd)
        assert proc.returncode == 0, proc.stderr
        hp = json.loads(proc.stdout)["hyper_parameters"]
        assert (hp["n_epochs"], hp["batch_size"]) == (2, 16)
        refused = _script(ws, "--dry-run", "--set", "n_epoch=2", opd_nb=with_opd)
        assert refused.returncode == 2 and "n_epochs" in refused.stderr and "Traceback" not in refused.stderr
    out_of_range = _script(ws, "--dry-run", "--set", "learning_rate=-1.0e-6")
    assert out_of_range.returncode == 2 and "below the minimum" in out_of_range.stderr
    no_opd = _script(ws, "--dry-run", opd_nb=False)
    assert no_opd.returncode == 0 and "opd-nb is not installed" in no_opd.stderr


@pytest.mark.slow
@pytest.mark.parametrize("verb", [["check"], ["estimate"], ["estimate", "--json"], ["config"]])
def test_every_verb_says_what_its_set_applied(capsys, ws, verb):
    """`--set` gave no sign that it applied (issue 51): each change is one line on stderr, so --json stays JSON."""
    code, out, err = opd(capsys, *verb, str(ws), "--set", "n_epochs=2", "--set", "name=trial-7")
    assert code in (0, 1), (out, err)  # `opd check` exits 1 on its findings
    said = [line for line in err.splitlines() if line.startswith("--set ")]
    assert said == [
        "--set training.hyper_parameters.n_epochs = 2 (this run only; the config file is unchanged)",
        '--set name = "trial-7" (this run only; the config file is unchanged)',
    ], err
    if "--json" in verb:
        assert json.loads(out)["n_epochs"] == 2
    code, _, err = opd(capsys, *verb, str(ws))
    assert "--set " not in err  # nothing set, nothing said
