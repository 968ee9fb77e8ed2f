"""The SDK's own traces of a local agentic job, end to end: received from the job's function servers,
stored per step, tied to each recorded sample, shown by the API and `opd traces`, forwarded to the
user's collector, kept across a restart and gone with the job.

The job runs the template's agentic workspace with two planted tool calls in its rollout function: one
of the template's own ``count_digits`` (a tool span with arguments and result) and one of a tool that
raises (an error span); the student's own LLM calls are traced by the template's ``@observe_llm``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import SDK_SUBMIT, run_sdk, tiny_workspace, wait_status
from otlp_receiver import OtlpReceiver

from opd_nb.client import JobClient, resolve_target
from opd_nb.traces.facts import messages
from opd_nb.traces.ids import SampleRef

pytestmark = pytest.mark.slow

PLANTED = '''

@observe_tool
def planted_failure(digits: str) -> str:
    """A tool that always raises: its span must be an error span."""
    raise ValueError(f"planted failure on {digits}")
'''
CALLS = """        messages: list[dict[str, Any]] = [dict(m) for m in input_data.messages]
        count_digits(digits="93418")
        try:
            planted_failure("5")
        except ValueError:
            pass
"""


def _planted_workspace(root: Path) -> Path:
    ws = tiny_workspace("agentic", root / "agentic")
    path = ws / "functions" / "rollout" / "rollout.py"
    text = path.read_text()
    marker = "        messages: list[dict[str, Any]] = [dict(m) for m in input_data.messages]\n"
    assert marker in text
    # a loaded machine can take a minute per student call: the template's 60 s timeout is not the subject
    text = text.replace("REQUEST_TIMEOUT_S = 60.0", "REQUEST_TIMEOUT_S = 900.0")
    path.write_text(text.replace(marker, CALLS) + PLANTED)
    cfg = yaml.safe_load((ws / "config.yaml").read_text())
    for fn in cfg["functions"]:
        fn["timeout"] = 1800
    (ws / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return ws


def _wait_traces(client: JobClient, job_id: str, step: int, kinds: set[str], timeout: float = 60):
    """The step's page once spans of every kind in `kinds` arrived and their number held for 2 s (export
    batches trail the calls by up to half a second; a stopping function server sends its last)."""
    deadline = time.monotonic() + timeout
    counts: list[int] = []
    while True:
        page = client.traces(job_id, step=step, limit=1000)
        have = {k for k, steps in page.steps_by_kind.items() if step in steps}
        counts.append(sum(t.spans for t in page.trajectories))
        if (kinds <= have and counts[-5:] == [counts[-1]] * 5) or time.monotonic() > deadline:
            return page
        time.sleep(0.5)


def test_agentic_job_traces_are_stored_linked_shown_forwarded_kept_and_deleted(tmp_path: Path) -> None:
    from opd_nb.server import start

    receiver = OtlpReceiver()
    data_dir = tmp_path / "data"
    server = start(data_dir=data_dir, otlp_forward=receiver.url)
    try:
        client = JobClient(resolve_target("local", base_url=server.api_base))
        ws = _planted_workspace(tmp_path)
        proc = run_sdk(server, SDK_SUBMIT, ws)
        assert proc.returncode == 0, proc.stderr[-3000:]
        job_id = next(ln for ln in proc.stdout.splitlines() if ln.startswith("JOB ")).split()[1]
        job = wait_status(client, job_id, {"SUCCEEDED", "FAILED", "CANCELED"}, timeout=600)
        assert job.status == "SUCCEEDED", job.message
        rollouts = client.rollouts(job_id, kind="train")
        step = rollouts.step
        page = _wait_traces(client, job_id, step, {"train"})
        _check_every_recorded_sample(client, job_id, rollouts.rollouts, page)
        stored = {(t.trace_id, s.span.span_id) for t in page.trajectories for _, s in t.nodes()}
        _check_cli(server, job_id, step)
        _check_forwarded(receiver, stored)
        rows = client.metrics(job_id)
        assert any("trace/tool/count_digits/latency_p95_s" in r for r in rows), rows[-1]
        assert any(r.get("trace/tool/planted_failure/error_rate") == 1.0 for r in rows)
    finally:
        server.stop()
    # a restart keeps them
    server = start(data_dir=data_dir)
    try:
        client = JobClient(resolve_target("local", base_url=server.api_base))
        again = client.traces(job_id, step=step, limit=1000)
        assert {(t.trace_id, s.span.span_id) for t in again.trajectories for _, s in t.nodes()} == stored
        with httpx.Client(base_url=server.api_base, headers={"Authorization": "Bearer x"}) as api:
            assert api.delete(f"/fine-tunes/{job_id}").status_code == 200
            gone = api.get(f"/fine-tunes/{job_id}/traces")
        assert gone.status_code == 404 and gone.json()["code"] == "JobNotFound"
        assert not (data_dir / "jobs" / job_id / "traces").exists()
    finally:
        server.stop()
        receiver.close()


def _check_every_recorded_sample(client: JobClient, job_id: str, records: list[dict], page) -> None:  # noqa: ANN001
    assert records
    for rec in records:
        ref = SampleRef(kind="train", step=rec["step"], group=rec["group"], sample=rec["sample"])
        mine = page.of_sample(ref)
        names = [n.span.name for t in mine for _, n in t.nodes()]
        roots = [r.span.name for t in mine for r in t.roots]
        assert roots.count("invoke_agentic_rl") >= 2, (ref, names)  # the rollout call and the reward call
        assert "invoke_rollout RolloutProcessor" in names and "invoke_reward RewardProcessor" in names, names
        spans = [n.span for t in mine for _, n in t.nodes()]
        for s in spans:  # the SDK's baggage: every span carries the sample's ids
            assert s.attributes["bailian.agentic_rl.sample_id"] == f"step {ref.step}-{ref.group}"
            assert s.attributes["bailian.agentic_rl.rollout_id"] == str(ref.sample)
        tools = [s for s in spans if s.kind == "TOOL"]
        for s in tools:  # the planted calls and any the student made: each with its arguments and result
            assert s.attributes["gen_ai.tool.call.arguments"], s
        counted = [s for s in tools if s.attributes["gen_ai.tool.name"] == "count_digits"]
        planted = [
            s
            for s in counted
            if json.loads(s.attributes["gen_ai.tool.call.arguments"]) == {"digits": "93418"}
        ]
        assert planted and planted[0].status == "ok", [s.attributes for s in tools]
        assert json.loads(planted[0].attributes["gen_ai.tool.call.result"])["9"] == 1
        assert all(s.status == "ok" and s.attributes.get("gen_ai.tool.call.result") for s in counted)
        [failed] = [s for s in tools if s.attributes["gen_ai.tool.name"] == "planted_failure"]
        assert failed.status == "error" and "planted failure on 5" in failed.status_message
        llm = [s for s in spans if s.kind == "LLM"]
        assert llm, names
        seen = messages(llm[0].attributes.get("gen_ai.input.messages"))
        prompt = [m for m in rec["messages"] if m["role"] in ("system", "user")]
        assert [m["text"] for m in seen[: len(prompt)]] == [m["content"] for m in prompt]
        answered = messages(llm[-1].attributes.get("gen_ai.output.messages"))
        last = [m for m in rec["messages"] if m["role"] == "assistant"][-1]
        assert answered and (last["content"] or "") in answered[0]["text"]
        # from the trace back to the record: the API's filter by group and sample
        one = client.traces(job_id, step=ref.step, kind="train", group=ref.group, sample=ref.sample)
        assert {t.trace_id for t in one.trajectories} == {t.trace_id for t in mine}


def _check_cli(server, job_id: str, step: int) -> None:  # noqa: ANN001
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "opd_nb",
            "traces",
            job_id,
            "--step",
            str(step),
            "--group",
            "0",
            "--sample",
            "0",
            "--local",
            server.api_base,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, **server.env()},
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for name in (
        "invoke_agentic_rl [CHAIN]",
        "invoke_rollout RolloutProcessor [ROLLOUT]",
        "[LLM]",
        "execute_tool count_digits [TOOL]",
        "execute_tool planted_failure [TOOL]",
        "ERROR",
        "invoke_reward RewardProcessor [REWARD]",
        " ms ",
    ):
        assert name in text, text
    assert "error=ValueError: planted failure on 5" in text, text
    back = subprocess.run(
        [sys.executable, "-m", "opd_nb", "rollouts", job_id, "--step", str(step), "--kind", "train",
         "--local", server.api_base],
        capture_output=True, text=True, timeout=120, env={**__import__("os").environ, **server.env()},
    )  # fmt: skip
    assert f"opd traces {job_id} --step {step} --group G --sample S" in back.stdout, back.stdout[-2000:]


def _check_forwarded(receiver: OtlpReceiver, stored: set[tuple[str, str]]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = {(s.trace_id.hex(), s.span_id.hex()) for s in receiver.spans}
        if stored <= got:
            break
        time.sleep(0.5)
    got = {(s.trace_id.hex(), s.span_id.hex()) for s in receiver.spans}
    assert stored <= got, len(stored - got)


def test_a_reward_job_yields_invoke_reward_spans_for_its_samples(finished_job, local_server) -> None:  # noqa: ANN001
    job = finished_job("reward")
    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    records = client.rollouts(job.job_id, kind="train")
    page = _wait_traces(client, job.job_id, records.step, {"train"})
    for rec in records.rollouts:
        ref = SampleRef(kind="train", step=rec["step"], group=rec["group"], sample=rec["sample"])
        spans = [n.span for t in page.of_sample(ref) for _, n in t.nodes()]
        reward = [s for s in spans if s.name == "invoke_reward RewardProcessor"]
        assert reward and reward[0].kind == "REWARD", [s.name for s in spans]
        assert reward[0].attributes["agentic_rl.result.reward_score"] == rec["reward_score"]
        assert {s.name for s in spans} >= {"invoke_agentic_rl", "invoke_reward RewardProcessor"}


def test_the_trajectory_view_and_the_viewers_pane_live_and_on_bailian(finished_job, local_server) -> None:  # noqa: ANN001
    from pydantic import SecretStr

    from opd_nb.client import Target
    from opd_nb.notebook.rollout_viewer import RolloutViewer
    from opd_nb.notebook.trajectory_view import TrajectoryView
    from opd_nb.traces.page import CLOUD_NOTE

    job = finished_job("reward")
    local = JobClient(resolve_target("local", base_url=local_server.api_base))
    step = local.rollouts(job.job_id, kind="train").step
    _wait_traces(local, job.job_id, step, {"train"})
    view = TrajectoryView(job.job_id, local, kind="train", group=0, sample=0)
    assert view.state["step"] == step and view.state["trajectories"] >= 1 and view.available
    view.widget()
    html = view.to_html()
    assert (
        "invoke_reward RewardProcessor" in html and 'class="opd-span"' in html and "trajectory.js" not in html
    )
    assert "<script>" in html and "invoke_reward" in view._widgets[2].value
    viewer = RolloutViewer(job.job_id, local, kind="train")
    assert "invoke_reward RewardProcessor" in viewer.trajectory_html(viewer.selected)
    assert viewer.to_html().count('class="opd-trajectory"') >= len(viewer.records)
    cloud = JobClient(Target(kind="cloud", base_url=local_server.api_base, api_key=SecretStr("test")))
    on_bailian = TrajectoryView(job.job_id, cloud)
    assert on_bailian.available is False and str(on_bailian).endswith(CLOUD_NOTE)
    assert "ARMS" in on_bailian.to_html() and "Trajectory tab" in on_bailian.to_html()
    assert 'class="opd-span"' not in on_bailian.to_html()


def test_the_traces_magics_limit_keeps_that_many_trajectories(finished_job, local_server) -> None:  # noqa: ANN001
    """`%opd traces JOB --limit N` shows, and saves in the notebook, at most N trajectories (the request
    dropped --limit, and a tutorial saved every trajectory of a step)."""
    from opd_nb.cli import invoke
    from opd_nb.notebook.views import open_view

    job = finished_job("reward")
    local = JobClient(resolve_target("local", base_url=local_server.api_base))
    step = local.rollouts(job.job_id, kind="train").step
    _wait_traces(local, job.job_id, step, {"train"})
    argv = ["traces", job.job_id, "--local", local_server.api_base, "--step", str(step), "--kind", "train"]
    everything = open_view(invoke(argv))
    one = open_view(invoke([*argv, "--limit", "1"]))
    assert everything.state["trajectories"] > 1 and one.state["trajectories"] == 1
    assert len(one.to_html()) < len(everything.to_html())
    total = one.state["total"]  # the view says of how many, as `opd traces` does
    assert total == everything.state["total"] >= everything.state["trajectories"]
    assert (
        f"1 of {total} trajectories" in one.to_html()
        and f"{total} trajectories" in everything.to_html()  # all of the step's fit the default limit
        and f"of {total}" not in everything.to_html()
    )


@pytest.mark.parametrize("compression", ["gzip"])
def test_a_job_whose_function_servers_compress_their_exports_has_its_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    """`OTEL_EXPORTER_OTLP_COMPRESSION=gzip` in the server's environment reaches the function servers'
    exporter: the job's spans arrive compressed and are stored (they were a 400, and the job SUCCEEDED
    with no trace file), and nothing in its log or metrics says a span was refused."""
    from opd_nb.constants import TRACE_REFUSED_EXPORTS, TRACE_REJECTED_SPANS
    from opd_nb.server import start

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", compression)
    data_dir = tmp_path / "data"
    server = start(port=0, data_dir=data_dir)
    try:
        client = JobClient(resolve_target("local", base_url=server.api_base))
        ws = tiny_workspace("reward", tmp_path / "reward")
        proc = run_sdk(server, SDK_SUBMIT, ws)
        assert proc.returncode == 0, proc.stderr[-3000:]
        job_id = next(ln for ln in proc.stdout.splitlines() if ln.startswith("JOB ")).split()[1]
        job = wait_status(client, job_id, {"SUCCEEDED", "FAILED", "CANCELED"}, timeout=600)
        log = "\n".join(client.logs(job_id, lines=10000).lines)
        assert job.status == "SUCCEEDED", f"{job.message}\n{log[-3000:]}"
        step = client.rollouts(job_id, kind="train").step
        page = _wait_traces(client, job_id, step, {"train"})
        names = {n.span.name for t in page.trajectories for _, n in t.nodes()}
        assert "invoke_reward RewardProcessor" in names, names
        assert list((data_dir / "jobs" / job_id / "traces").glob("train-*.jsonl"))
        assert "its spans are traced" in log and "refused a span export" not in log, log[-3000:]
        rows = client.metrics(job_id)
        assert not any(r.get(TRACE_REFUSED_EXPORTS) or r.get(TRACE_REJECTED_SPANS) for r in rows), rows[-1]
    finally:
        server.stop()
