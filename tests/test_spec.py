"""The spec: same acceptance as the SDK's TuningModel, line-numbered errors, the table, the precedence."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opd_nb.errors import OpdError
from opd_nb.spec import PARAMS, PARAMS_BY_NAME, JobConfig, load_config, parse_config_text
from opd_nb.spec.effective import effective_job
from opd_nb.spec.hyperparams import closest, starting_point

ISSUE_KEYS = {
    "algorithm",
    "learning_rate",
    "lr_scheduler_type",
    "lr_warmup_steps",
    "n_epochs",
    "batch_size",
    "n_rollouts",
    "ppo_mini_batch_size",
    "max_length",
    "max_prompt_length",
    "eval_steps",
    "save_steps",
    "save_strategy",
    "save_total_limit",
    "kl_loss_coef",
    "opd_teacher_max_model_len",
    "opd_teacher_max_num_batched_tokens",
    "opd_teacher_gpu_memory_utilization",
    "charge_type",
    "mtu_spec_code",
    "mtu_capacity",
}

CONFIG = """\
name: spec-job
model:
  name: qwen3.5-9b
teacher_model: qwen3.5-397b-a17b
datasets:
  - type: training
    data_source_type: file_id
    file_id: file-train-1
functions:
  - type: reward
    name: r1
    fcmodel:
      classpath: functions.reward.reward.R
training:
  hyper_parameters:
    learning_rate: 1.0e-6
    n_rollouts: 8
  resources:
    mtu_capacity: 24
"""


def test_params_table_is_complete_and_self_consistent():
    assert {p.name for p in PARAMS} == ISSUE_KEYS
    for p in PARAMS:
        assert p.help and p.section in ("hyper_parameters", "resources")
        for value in (p.default, p.small, p.large):
            assert p.problem(value) is None, (p.name, value)
    assert PARAMS_BY_NAME["kl_loss_coef"].consumed_by_opd is False
    assert PARAMS_BY_NAME["charge_type"].section == "resources"
    assert PARAMS_BY_NAME["learning_rate"].default == 1e-6
    assert PARAMS_BY_NAME["n_rollouts"].problem(0) and PARAMS_BY_NAME["save_strategy"].problem("never")
    assert PARAMS_BY_NAME["batch_size"].problem("8")  # a string is the wrong type
    assert closest("learnig_rate") == "learning_rate"
    sp = starting_point("large")
    assert "kl_loss_coef" not in sp["hyper_parameters"] and sp["resources"]["mtu_capacity"] == 48


# ---------------------------------------------------------------- same acceptance as the SDK

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.text(max_size=4), st.just("1e-6"))
_function = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["reward", "rollout", "group_reward", "ppo", None]),
        "name": st.one_of(st.text(max_size=3), st.none(), st.integers()),
        "timeout": _scalar,
        "weight": _scalar,
        "fcmodel": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {},
                optional={
                    "classpath": _scalar,
                    "zipdir": _scalar,
                    "filepath": _scalar,
                    "requirements_path": _scalar,
                    "extra_files": st.one_of(st.none(), st.lists(st.text(max_size=2), max_size=2)),
                },
            ),
        ),
        "runtime": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {},
                optional={
                    "cpu": _scalar,
                    "memory_size": _scalar,
                    "env": st.one_of(st.none(), st.dictionaries(st.text(max_size=2), _scalar, max_size=2)),
                },
            ),
        ),
        "classpath": st.text(max_size=3),
    },
)
_dataset = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["training", "validation", "testing", "train"]),
        "data_source_type": st.sampled_from(["file_id", "download_url", "oss_mount", "ftp", None]),
        "file_name": _scalar,
        "file_id": _scalar,
        "mount_storage": st.one_of(st.none(), st.just({"bucket": "b"}), st.just({"x": 1})),
    },
)
_config = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.text(max_size=3), st.just(""), st.just("x" * 257), st.integers(), st.none()),
        "model": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"name": _scalar, "size": _scalar})),
        "teacher_model": _scalar,
        "functions": st.one_of(st.none(), st.lists(_function, max_size=2)),
        "datasets": st.one_of(st.none(), st.lists(_dataset, max_size=2)),
        "training": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {},
                optional={
                    "type": st.sampled_from(["reinforcement", "pg_opd", "ppo"]),
                    "hyper_parameters": st.one_of(
                        st.none(), st.dictionaries(st.text(max_size=3), _scalar, max_size=2)
                    ),
                    "resources": st.one_of(st.none(), st.just({"mtu_capacity": 2})),
                },
            ),
        ),
        "observability": st.one_of(st.none(), st.just({}), st.just({"x": 1})),
        "job_name": st.text(max_size=2),
    },
)


@pytest.mark.slow
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_config)
def test_accepts_exactly_what_the_sdk_accepts(data):
    from dashscope.finetune.reinforcement.common.model import TuningModel
    from pydantic import ValidationError

    try:
        TuningModel(**json.loads(json.dumps(data)))
        sdk_ok = True
    except (ValidationError, AttributeError, TypeError):
        sdk_ok = False
    try:
        JobConfig.model_validate(json.loads(json.dumps(data)))
        ours_ok = True
    except ValidationError:
        ours_ok = False
    assert ours_ok == sdk_ok, data


def test_errors_point_at_file_and_line(tmp_path):
    text = CONFIG.replace(
        "      classpath: functions.reward.reward.R",
        "      classpath: functions.reward.reward.R\n    classpath: misplaced.C",
    )
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(OpdError) as err:
        load_config(path)
    line = text.splitlines().index("    classpath: misplaced.C") + 1
    assert err.value.where == f"{path}:{line}" and "under `fcmodel:`" in err.value.fix
    path.write_text(
        CONFIG.replace(
            "functions:\n  - type: reward\n    name: r1\n    fcmodel:\n"
            "      classpath: functions.reward.reward.R\n",
            "functions: null\n",
        )
    )
    with pytest.raises(OpdError) as err:
        load_config(path)
    assert err.value.where == f"{path}:9" and "delete the `functions:` line" in err.value.fix
    path.write_text("name: [unclosed\n")
    with pytest.raises(OpdError) as err:
        load_config(path)
    assert "syntax" in err.value.message and err.value.where.startswith(str(path))


def test_yaml_like_the_sdk_keeps_1e_minus_6_a_string():
    parsed = parse_config_text(CONFIG.replace("1.0e-6", "1e-6"))
    assert parsed.config.hyper_parameters["learning_rate"] == "1e-6"
    assert parsed.lines.where(("training", "hyper_parameters", "learning_rate")) == "config.yaml:16"


# ---------------------------------------------------------------- precedence


def _ws(tmp_path, text=CONFIG):
    (tmp_path / "config.yaml").write_text(text)
    return tmp_path


def test_precedence_yaml_init_run(tmp_path):
    ws = _ws(tmp_path)
    job = effective_job(ws)
    assert job.config.name == "spec-job" and job.training_type == "pg_opd"
    assert job.sources["teacher_model"] == "config.yaml:4"
    job = effective_job(ws, init={"teacher_model": "t-init", "name": "init-name"}, teacher_model="t-run")
    assert job.config.teacher_model == "t-run" and job.config.name == "init-name"
    assert job.sources["teacher_model"] == "run()" and job.sources["name"] == "init()"
    # Empty run() values never clear YAML values; hyper_parameters from run() replace the whole dict.
    job = effective_job(ws, teacher_model="", functions=[], hyper_parameters={}, model=None)
    assert job.config.teacher_model == "qwen3.5-397b-a17b" and len(job.config.functions) == 1
    job = effective_job(ws, hyper_parameters={"batch_size": 4}, job_name="run-name", model="qwen3-8b")
    assert job.config.hyper_parameters == {"batch_size": 4}
    assert job.config.name == "run-name" and job.config.model.name == "qwen3-8b"
    assert job.request()["job_name"].startswith("run-name-")
    with pytest.raises(OpdError, match="job_name"):
        effective_job(ws, init={"job_name": "x"})  # the SDK's 1002 for job_name in init()
    assert effective_job(ws, no_reward=True).config.functions == []


def test_written_yaml_loads_identically_in_the_sdk(tmp_path):
    from dashscope.finetune.reinforcement.common.model import TuningModel

    ws = _ws(tmp_path, CONFIG.replace("1.0e-6", "1e-6"))
    job = effective_job(ws, init={"name": "via-init"}, teacher_model="t2")
    out = tmp_path / "written.yaml"
    out.write_text(job.to_yaml())
    expected = TuningModel.load_from_yaml(str(ws / "config.yaml"), name="via-init", teacher_model="t2")
    assert TuningModel.load_from_yaml(str(out)).model_dump() == expected.model_dump()


@pytest.mark.slow
def test_request_matches_what_the_real_sdk_sends(tmp_path):
    """The unmodified SDK submits to a capturing HTTP endpoint (standing in for the Bailian host)."""
    ws = _ws(
        tmp_path,
        CONFIG.replace(
            "functions:\n  - type: reward\n    name: r1\n    fcmodel:\n"
            "      classpath: functions.reward.reward.R\n",
            "",
        ),
    )
    script = textwrap.dedent(f"""
        import http.server, json, os, threading
        bodies = []
        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                out = json.dumps({{"request_id": "r", "output": {{"job_id": "ft-1", "status": "PENDING"}}}}).encode()
                self.send_response(200); self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out))); self.end_headers(); self.wfile.write(out)
            def log_message(self, *a): pass
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        os.environ["DASHSCOPE_HTTP_BASE_URL"] = f"http://127.0.0.1:{{srv.server_port}}/api/v1"
        os.environ["DASHSCOPE_API_KEY"] = "sk-x"
        os.environ["NO_PROXY"] = "127.0.0.1"
        from dashscope.finetune.agentic_rl import AgenticRL
        c = AgenticRL().init(config_path={str(ws / "config.yaml")!r}, name="init-name")
        c.submit_job(teacher_model="t-run", hyper_parameters={{"batch_size": 4}}, model="")
        print(json.dumps(bodies[0]))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    sent = json.loads(out.stdout.strip().splitlines()[-1])
    ours = effective_job(
        ws, init={"name": "init-name"}, teacher_model="t-run", hyper_parameters={"batch_size": 4}, model=""
    ).request()
    assert sent["job_name"].startswith("init-name-") and ours["job_name"].startswith("init-name-")
    for key in (
        "model",
        "teacher_model",
        "training_type",
        "hyper_parameters",
        "resource_config",
        "training_datasets",
    ):
        assert sent.get(key) == ours.get(key), key


def test_effective_job_reprs(tmp_path):
    job = effective_job(_ws(tmp_path))
    assert yaml.safe_load(str(job))["name"] == "spec-job"
    assert "<pre>" in job._repr_html_() and json.loads(job.to_json())["request"]["training_type"] == "pg_opd"
