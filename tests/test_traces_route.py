"""The OTLP route and the traces API of one control plane app (in process: no job has to train).

Only the job's token opens ``POST /otlp/v1/traces`` (never the API key, with or without a server key);
a body that is no trace export is a 400 in Bailian's error shape, a body over the cap a 413; accepted
spans are answered as an OTLP ``ExportTraceServiceResponse``, stored under their step, shown as trees
by ``GET /fine-tunes/{id}/traces`` and folded into the step's metrics row beside the engine's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_traces import _as_otlp_json, _export

from opd_nb.server.app import create_app
from opd_nb.server.records import ServeOptions
from opd_nb.server.store.job_record import JobMeta
from opd_nb.wire.jobs import JobProgress

PB = {"Content-Type": "application/x-protobuf"}
SERVER_KEY = "k" * 8 + "-Zq8!vT2#rW9$mX4"


def _app(tmp_path: Path, api_key: str | None = None) -> tuple[TestClient, str]:
    app = create_app(ServeOptions(data_dir=str(tmp_path)), api_key=api_key)
    services = app.state.services
    meta = JobMeta(training_type="pg_opd", student_path="/s", teacher_path="/t", train_file="/f.jsonl")
    services.store.insert_job("ft-1", "traced", {"model": "m"}, meta)
    # running its step 3 of 10: a span may name steps 0..3 (tracing.intake.last_step)
    services.store.set_job("ft-1", status="RUNNING", progress=JobProgress(step=2, total_steps=10))
    return TestClient(app), services.traces.keys.token("ft-1")


@pytest.mark.parametrize("api_key", [None, SERVER_KEY])
def test_only_the_jobs_token_opens_the_route(tmp_path: Path, api_key: str | None) -> None:
    client, token = _app(tmp_path, api_key)
    body = _export()
    for auth in ({}, {"Authorization": "Bearer local"}, {"Authorization": f"Bearer {SERVER_KEY}"},
                 {"Authorization": f"Bearer {token}x"}, {"Authorization": token}):  # fmt: skip
        resp = client.post("/otlp/v1/traces", content=body, headers={**PB, **auth})
        assert resp.status_code == 401 and resp.json()["code"] == "InvalidTraceToken", (auth, resp.text)
    ok = client.post("/otlp/v1/traces", content=body, headers={**PB, "Authorization": f"Bearer {token}"})
    assert ok.status_code == 200 and ok.headers["content-type"] == "application/x-protobuf"
    key = {"Authorization": f"Bearer {api_key or 'local'}"}
    # ...and the token opens nothing else where the server has a key
    if api_key:
        assert (
            client.get("/api/v1/fine-tunes", headers={"Authorization": f"Bearer {token}"}).status_code == 401
        )
    page = client.get("/api/v1/fine-tunes/ft-1/traces", headers=key).json()["output"]
    [traj] = page["trajectories"]
    assert page["step"] == 3 and traj["sample"] == {
        "kind": "train",
        "step": 3,
        "group": 2,
        "sample": 1,
        "attempt": 0,
    }
    assert traj["roots"][0]["span"]["name"] == "invoke_agentic_rl" and traj["errors"] == 1


def test_bad_bodies_are_4xx_in_the_error_shape_and_store_nothing(tmp_path: Path) -> None:
    client, token = _app(tmp_path)
    auth = {"Authorization": f"Bearer {token}"}
    cases = [
        (b"\xff\xff\xff\x0f", PB, 400),
        (b"\x0a\x00", PB, 200),  # an empty ResourceSpans: valid protobuf, no span (not read as UTF-16)
        (b"{not json", {"Content-Type": "application/json"}, 400),
        (b'{"resourceSpans": "x"}', {"Content-Type": "application/json"}, 400),
        (b"hello", {"Content-Type": "text/plain"}, 400),
        (b"\x00" * (16 * 2**20 + 1), PB, 413),
    ]
    for body, headers, status in cases:
        resp = client.post("/otlp/v1/traces", content=body, headers={**headers, **auth})
        assert resp.status_code == status, (body[:20], resp.text[:300])
        if status >= 400:
            assert {"request_id", "code", "message"} <= set(resp.json())
    assert client.get("/api/v1/fine-tunes/ft-1/traces", headers=auth).json()["output"]["step"] is None
    other = client.post(
        "/otlp/v1/traces",
        content=_export(),
        headers={**PB, "Authorization": "Bearer " + token.replace("ft-1", "ft-2")},
    )
    assert other.status_code == 401


def test_json_exports_and_the_step_metrics_merge_with_the_engines_row(tmp_path: Path) -> None:
    client, token = _app(tmp_path)
    store = client.app.state.services.store
    store.add_metrics("ft-1", 3, {"step": 3, "actor/distillation/loss": 0.5})
    resp = client.post(
        "/otlp/v1/traces",
        content=_as_otlp_json(_export()),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    assert resp.status_code == 200 and resp.json() == {}
    [row] = store.metrics("ft-1")
    assert row["actor/distillation/loss"] == 0.5 and row["trace/tool/error_rate"] == 1.0
    store.add_metrics("ft-1", 3, {"step": 3, "actor/distillation/loss": 0.4})  # a late engine row keeps them
    assert store.metrics("ft-1")[0]["trace/tool/count_digits/error_rate"] == 1.0
    auth = {"Authorization": "Bearer local"}
    one = client.get("/api/v1/fine-tunes/ft-1/traces?step=3&group=2&sample=1", headers=auth).json()["output"]
    none = client.get("/api/v1/fine-tunes/ft-1/traces?step=3&group=2&sample=0", headers=auth).json()["output"]
    assert len(one["trajectories"]) == 1 and none["trajectories"] == []
    assert client.get("/api/v1/fine-tunes/ft-9/traces", headers=auth).status_code == 404
    assert client.get("/api/v1/fine-tunes/ft-1/traces?step=-1", headers=auth).status_code == 400


def test_a_limited_page_says_of_how_many_and_the_cli_shows_its_default(tmp_path: Path) -> None:
    """A step with more trajectories than the limit: the page carries the total (`--json` too) and its
    title says "2 of 5", not "2 trajectories" as if that were all; under the limit it says the plain count;
    `opd traces --help` shows the default limit the API applies."""
    from click.testing import CliRunner

    from opd_nb.cli import command
    from opd_nb.traces.page import DEFAULT_TRAJECTORIES, TracesPage

    client, token = _app(tmp_path)
    for _ in range(5):  # five rollout calls of the same step, each its own trace
        sent = client.post(
            "/otlp/v1/traces", content=_export(), headers={**PB, "Authorization": f"Bearer {token}"}
        )
        assert sent.status_code == 200
    key = {"Authorization": "Bearer local"}
    pages = {n: TracesPage.model_validate(client.get(f"/api/v1/fine-tunes/ft-1/traces?limit={n}", headers=key)
                                          .json()["output"]) for n in (2, 5, 9)}  # fmt: skip
    assert [len(p.trajectories) for p in pages.values()] == [2, 5, 5]
    assert {p.total for p in pages.values()} == {5}
    assert "2 of 5 trajectories" in pages[2].title() and '"total":5' in pages[2].model_dump_json()
    assert " 5 trajectories" in pages[9].title() and " of " not in pages[9].count_line()
    default = TracesPage.model_validate(
        client.get("/api/v1/fine-tunes/ft-1/traces", headers=key).json()["output"]
    )
    assert default.total == 5 and DEFAULT_TRAJECTORIES == 100
    shown = " ".join(
        CliRunner().invoke(command(), ["traces", "--help"], env={"COLUMNS": "200"}).output.split()
    )
    assert f"[default: {DEFAULT_TRAJECTORIES};" in shown
