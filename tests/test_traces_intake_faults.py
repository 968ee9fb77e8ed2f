"""Span exports as exporters send them, and as they race a job's end (in process: no job trains).

Compressed exports (``OTEL_EXPORTER_OTLP_COMPRESSION=gzip`` or ``deflate``) are read and stored like plain
ones, in protobuf and JSON; a coding the server does not decode is a 415 and one that expands past the
body cap a 413 (a bomb costs the cap, not its expansion); and the job whose export was refused says so in
its own log and metrics, where the health rules find it. Every other route takes the same rule. An export
racing the job's DELETE never brings a step file back.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_traces import _as_otlp_json, _export
from test_traces_route import PB, _app

from opd_nb.constants import TRACE_REFUSED_EXPORTS, TRACE_REJECTED_SPANS
from opd_nb.health.rules import job_alerts
from opd_nb.server.limits import MAX_JSON_BYTES
from opd_nb.wire.jobs import JobProgress

JSON = {"Content-Type": "application/json"}
KEY = {"Authorization": "Bearer local"}


def _raw_deflate(body: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(body) + packer.flush()


def _two_gzip_members(body: bytes) -> bytes:
    half = len(body) // 2
    return gzip.compress(body[:half]) + gzip.compress(body[half:])


# (Content-Encoding, how the body is packed): what OTLP/HTTP exporters and HTTP clients send
ACCEPTED: list[tuple[str, Callable[[bytes], bytes]]] = [
    ("gzip", gzip.compress),
    ("x-gzip", gzip.compress),
    ("GZip", gzip.compress),
    ("deflate", zlib.compress),  # what the OTLP exporter's Compression.Deflate sends (zlib)
    ("deflate", _raw_deflate),  # raw deflate, as some senders write it
    ("gzip", _two_gzip_members),
    ("identity", lambda b: b),
    ("gzip, identity", gzip.compress),
    ("deflate, gzip", lambda b: gzip.compress(zlib.compress(b))),
]


def _post(client: TestClient, token: str, body: bytes, headers: dict[str, str]):  # noqa: ANN202
    return client.post(
        "/otlp/v1/traces", content=body, headers={**headers, "Authorization": f"Bearer {token}"}
    )


def _stored_spans(client: TestClient) -> int:
    page = client.get("/api/v1/fine-tunes/ft-1/traces?limit=1000", headers=KEY).json()["output"]
    return sum(t["spans"] for t in page["trajectories"])


@pytest.mark.parametrize("media", ["protobuf", "json"])
@pytest.mark.parametrize(("coding", "pack"), ACCEPTED)
def test_compressed_exports_are_stored_like_plain_ones(
    tmp_path: Path, media: str, coding: str, pack: Callable[[bytes], bytes]
) -> None:
    client, token = _app(tmp_path)
    body, headers = (_export(), PB) if media == "protobuf" else (_as_otlp_json(_export()), JSON)
    resp = _post(client, token, pack(body), {**headers, "Content-Encoding": coding})
    assert resp.status_code == 200, resp.text[:300]
    assert _stored_spans(client) == 4  # CHAIN > ROLLOUT > (LLM, TOOL)
    rows = client.app.state.services.store.metrics("ft-1")
    assert rows[0]["trace/tool/error_rate"] == 1.0 and TRACE_REFUSED_EXPORTS not in rows[0]


def _bomb(coding: str) -> bytes:
    zeros = b"\0" * (MAX_JSON_BYTES + 1)
    return gzip.compress(zeros) if "gzip" in coding else zlib.compress(zeros)


REFUSED = [
    ("br", lambda: _export(), 415),
    ("zstd", lambda: _export(), 415),
    ("compress", lambda: _export(), 415),
    ("gzip, br", lambda: gzip.compress(_export()), 415),
    ("snappy-or-anything", lambda: _export(), 415),
    ("gzip", lambda: _bomb("gzip"), 413),
    ("deflate", lambda: _bomb("deflate"), 413),
    ("gzip, gzip", lambda: gzip.compress(_bomb("gzip")), 413),  # a bomb inside a bomb: each stage capped
    ("gzip", lambda: gzip.compress(_export())[:-9], 400),  # truncated
    ("gzip", lambda: _export(), 400),  # not compressed at all
    ("deflate", lambda: b"\x78\x9c" + b"\xff" * 40, 400),
    ("gzip", lambda: gzip.compress(_export()) + b"trailing junk", 400),
]


@pytest.mark.parametrize(("coding", "make", "status"), REFUSED)
def test_unreadable_exports_are_refused_and_the_job_says_so(
    tmp_path: Path, coding: str, make: Callable[[], bytes], status: int
) -> None:
    client, token = _app(tmp_path)
    store = client.app.state.services.store
    for media in (PB, JSON):
        resp = _post(client, token, make(), {**media, "Content-Encoding": coding})
        assert resp.status_code == status, (coding, resp.text[:300])
        assert {"request_id", "code", "message"} <= set(resp.json())
    assert _stored_spans(client) == 0
    warnings = [line for _, line in store.logs("ft-1", 0, 100) if "refused a span export" in line]
    assert len(warnings) == 1 and f"HTTP {status}" in warnings[0], warnings  # said once, then counted
    [row] = store.metrics("ft-1")  # the row of the last finished step (2)
    assert row["step"] == 2 and row[TRACE_REFUSED_EXPORTS] == 2 and row[TRACE_REJECTED_SPANS] == 0
    [alert] = [a for a in job_alerts([row], status="RUNNING", job_id="ft-1") if a.rule == "traces_refused"]
    assert "refused 2 of the job's span exports" in alert.message and "opd logs ft-1" in alert.fix


def test_spans_left_out_of_an_accepted_export_are_in_the_jobs_log_and_health(tmp_path: Path) -> None:
    client, token = _app(tmp_path)
    store = client.app.state.services.store
    # running step 3 of 10: an export naming step 7 is accepted with its spans left out (partial success)
    store.set_job("ft-1", progress=JobProgress(step=2, total_steps=10))
    ahead = _as_otlp_json(_export()).replace(b"step 3-2", b"step 7-2")
    assert _post(client, token, gzip.compress(ahead), {**JSON, "Content-Encoding": "gzip"}).status_code == 200
    [row] = store.metrics("ft-1")
    assert row[TRACE_REJECTED_SPANS] == 4 and row[TRACE_REFUSED_EXPORTS] == 0
    assert any("left out 4 span(s)" in line for _, line in store.logs("ft-1", 0, 100))
    assert [a.rule for a in job_alerts([row], status="RUNNING", job_id="ft-1")] == ["traces_refused"]


@pytest.mark.parametrize(
    ("coding", "pack", "status"),
    [
        ("gzip", gzip.compress, 0),  # 0: the answer the plain body gets
        ("deflate", zlib.compress, 0),
        ("deflate", _raw_deflate, 0),
        ("identity", lambda b: b, 0),
        ("br", lambda b: b, 415),
        ("zstd", lambda b: b, 415),
        ("gzip", lambda b: _bomb("gzip"), 413),
        ("gzip", lambda b: b, 400),
    ],
)
def test_every_route_reads_a_compressed_body_by_the_same_rule(
    tmp_path: Path, coding: str, pack: Callable[[bytes], bytes], status: int
) -> None:
    client, _ = _app(tmp_path)
    body = b'{"model": 5, "training_file_ids": []}'
    plain = client.post("/api/v1/fine-tunes", content=body, headers={**JSON, **KEY})
    resp = client.post(
        "/api/v1/fine-tunes", content=pack(body), headers={**JSON, **KEY, "Content-Encoding": coding}
    )
    assert resp.status_code == (status or plain.status_code), resp.text[:300]
    if not status:
        assert plain.status_code == 400 and resp.json()["message"] == plain.json()["message"]
    else:
        assert resp.json()["message"] != plain.json()["message"]


@pytest.mark.slow
def test_an_export_racing_delete_never_brings_a_step_file_back(tmp_path: Path) -> None:
    """Exporters post while the job ends and is deleted: once DELETE answered, its trace directory is gone
    and stays gone, and the token is dead. Each export takes a while to read (1,200 spans), so the ones
    that found the job running are still being read when DELETE answers; several tries and exporters."""
    client, _ = _app(tmp_path)
    services = client.app.state.services
    body = _export() * 300  # repeated fields concatenate: one request of 300 calls
    for attempt in range(6):
        job_id = f"ft-race-{attempt}"
        services.store.insert_job(job_id, "race", {"model": "m"}, services.store.job("ft-1").meta)
        services.store.set_job(job_id, status="RUNNING", progress=JobProgress(step=2, total_steps=10))
        token = services.traces.keys.token(job_id)
        stop, deleted = threading.Event(), threading.Event()
        after_delete: list[int] = []

        def export(
            token: str = token,
            stop: threading.Event = stop,
            deleted: threading.Event = deleted,
            after_delete: list[int] = after_delete,
        ) -> None:
            while not stop.is_set():
                started_after = deleted.is_set()
                code = _post(client, token, body, PB).status_code
                if started_after:
                    after_delete.append(code)

        threads = [threading.Thread(target=export) for _ in range(3)]
        for t in threads:
            t.start()
        while not (tmp_path / "jobs" / job_id / "traces").exists():
            time.sleep(0.01)
        time.sleep(0.1)  # exporters in the middle of their next export
        services.store.set_job(job_id, status="SUCCEEDED")
        assert client.delete(f"/api/v1/fine-tunes/{job_id}", headers=KEY).status_code == 200
        deleted.set()
        while len(after_delete) < 3:
            time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join()
        assert not (tmp_path / "jobs" / job_id).exists(), attempt
        assert set(after_delete) == {401}


@pytest.mark.parametrize(("coding", "pack"), [("gzip", gzip.compress), ("deflate", zlib.compress)])
def test_a_compressed_export_reaches_the_users_collector_readable(
    tmp_path: Path, coding: str, pack: Callable[[bytes], bytes]
) -> None:
    """--otlp-forward sends what was decoded (the forwarder sends no Content-Encoding)."""
    from otlp_receiver import OtlpReceiver

    from opd_nb.server.app import create_app
    from opd_nb.server.records import ServeOptions
    from opd_nb.server.store.job_record import JobMeta

    receiver = OtlpReceiver()
    try:
        app = create_app(ServeOptions(data_dir=str(tmp_path), otlp_forward=receiver.url))
        services = app.state.services
        meta = JobMeta(training_type="pg_opd", student_path="/s", teacher_path="/t", train_file="/f.jsonl")
        services.store.insert_job("ft-1", "traced", {"model": "m"}, meta)
        services.store.set_job("ft-1", status="RUNNING", progress=JobProgress(step=2, total_steps=10))
        client = TestClient(app)
        token = services.traces.keys.token("ft-1")
        assert _post(client, token, pack(_export()), {**PB, "Content-Encoding": coding}).status_code == 200
        services.traces.forwarder.close()
        assert sorted(s.name for s in receiver.spans) == sorted(
            ["invoke_agentic_rl", "invoke_rollout R", "chat student", "execute_tool count_digits"]
        )
    finally:
        receiver.close()


@pytest.mark.parametrize("coding", ["gzip", "br", "deflate, gzip"])
def test_a_compressed_multipart_upload_is_refused_in_words(tmp_path: Path, coding: str) -> None:
    """An upload is stored as it comes: compressed, it would be a dataset of gzip bytes."""
    client, _ = _app(tmp_path)
    upload = {"files": ("train.jsonl", gzip.compress(b'{"messages": []}\n'))}
    resp = client.post("/api/v1/files", files=upload, headers={**KEY, "Content-Encoding": coding})
    assert resp.status_code == 415 and "uncompressed" in resp.json()["message"], resp.text[:300]
    plain = client.post("/api/v1/files", files=upload, headers={**KEY, "Content-Encoding": "identity"})
    assert plain.status_code != 415
