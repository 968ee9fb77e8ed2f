"""The local control plane's HTTP contract: SDK-shaped answers, and a 4xx (never a 500) for bad input."""

from __future__ import annotations

import io
import json
import stat
import zipfile

import httpx
import pytest

from opd_nb.engine.task import make_rows


def _error(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) >= {"request_id", "code", "message"}, body
    assert body["message"]
    return body


def _zip(entries: dict[str, bytes], links: tuple[str, ...] = ()) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
    return buf.getvalue()


def _upload_file(api: httpx.Client, rows: list[dict] | None = None, raw: bytes | None = None) -> dict:
    body = raw if raw is not None else "".join(json.dumps(r) + "\n" for r in rows or []).encode()
    resp = api.post(
        "/files",
        files={"files": ("train.jsonl", body, "application/octet-stream")},
        data={"purpose": "fine-tune"},
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def test_missing_or_empty_bearer_is_401(local_server):
    for headers in ({}, {"Authorization": "Bearer"}, {"Authorization": "Basic x"}):
        body = _error(httpx.get(local_server.api_base + "/fine-tunes", headers=headers), 401)
        assert body["code"] == "InvalidApiKey"
    assert (
        httpx.get(local_server.api_base + "/fine-tunes", headers={"Authorization": "Bearer any"}).status_code
        == 200
    )


def test_malformed_json_and_non_object_bodies_are_400(api):
    for raw in (b"{not json", b"[1, 2]", b"", b"\xff\xfe"):
        _error(api.post("/fine-tunes", content=raw, headers={"Content-Type": "application/json"}), 400)
    _error(api.post("/fine-tunes/generate/faas/upload/url", content=b"{"), 400)


def test_unknown_ids_are_404(api):
    for method, path in [
        ("GET", "/fine-tunes/ft-nope"),
        ("POST", "/fine-tunes/ft-nope/cancel"),
        ("DELETE", "/fine-tunes/ft-nope"),
        ("GET", "/fine-tunes/ft-nope/logs"),
        ("GET", "/fine-tunes/ft-nope/stream"),
        ("GET", "/fine-tunes/ft-nope/metrics"),
        ("GET", "/fine-tunes/ft-nope/checkpoints"),
        ("GET", "/files/file-nope"),
        ("POST", "/fine-tunes/query/faas/rw-ins-nope"),
        ("POST", "/fine-tunes/delete/faas/rw-ins-nope"),
        ("POST", "/fine-tunes/online/faas/jobId-x/rw-nope"),
    ]:
        _error(api.request(method, path, json={} if method == "POST" else None), 404)


def test_submit_validation(api):
    train = _upload_file(api, make_rows(8, seed=1))["uploaded_files"][0]["file_id"]
    base = {
        "model": "qwen3-8b",
        "training_datasets": [{"type": "training", "data_source_type": "file_id", "file_id": train}],
        "training_type": "pg_opd",
        "teacher_model": "qwen3-max",
    }
    cases = [
        ({"training_type": "sft"}, "training_type"),
        ({"teacher_model": None}, "teacher_model"),
        ({"model": "Qwen/Qwen3-8B"}, "cannot be served"),
        ({"teacher_model": "/no/such/model/dir"}, "not a local Hugging Face model"),
        ({"model": "opd-local/ft-unknown"}, "not a published local model"),
        (
            {"training_datasets": [{"type": "training", "data_source_type": "file_id", "file_id": "file-x"}]},
            "file-x",
        ),
        ({"training_datasets": []}, "training_datasets"),
        ({"rewards": [{"reward_id": "rw-000000000000", "name": "r"}]}, "rw-000000000000"),
        ({"rollout": {"rollout_id": "ro-000000000000"}}, "ro-000000000000"),
        ({"hyper_parameters": [1]}, "hyper_parameters"),
        ({"training_type": "reinforcement", "teacher_model": None}, "reward"),
    ]
    for change, needle in cases:
        body = {**base, **change}
        body = {k: v for k, v in body.items() if v is not None}
        err = _error(api.post("/fine-tunes", json=body), 400)
        assert needle in err["message"], (change, err)


def test_files_answer_under_data_and_reject_bad_jsonl(api):
    data = _upload_file(api, make_rows(4, seed=2))
    assert data["failed_uploads"] == [] and data["uploaded_files"][0]["lines"] == 4
    file_id = data["uploaded_files"][0]["file_id"]
    assert api.get(f"/files/{file_id}").json()["output"]["name"] == "train.jsonl"
    bad = _upload_file(api, raw=b'{"messages": []}\nnot json\n')
    assert bad["uploaded_files"] == [] and "line 2" in bad["failed_uploads"][0]["reason"]
    _error(api.post("/files", content=b"x", headers={"Content-Type": "text/plain"}), 400)


@pytest.mark.parametrize(
    "entries,links,needle",
    [
        ({"/abs/evil.py": b"x"}, (), "absolute"),
        ({"../evil.py": b"x"}, (), "'..'"),
        ({"ok.py": b"x"}, ("link.py",), "symbolic link"),
    ],
)
def test_unsafe_zips_are_refused(api, local_server, entries, links, needle):
    url = api.post("/fine-tunes/generate/faas/upload/url", json={"unique_key": "reward-zip-test"}).json()[
        "output"
    ]["url"]
    assert url.startswith(local_server.base_url)
    err = _error(httpx.put(url, content=_zip(entries, links)), 400)
    assert needle in err["message"]
    _error(httpx.put(url, content=b"this is not a zip"), 400)


@pytest.mark.slow
def test_oversize_zip_is_refused(tmp_path, monkeypatch):
    from opd_nb.server import start

    monkeypatch.setenv("OPD_MAX_ZIP_BYTES", "2000")
    with start(port=0, data_dir=tmp_path) as server:
        url = httpx.post(
            server.api_base + "/fine-tunes/generate/faas/upload/url",
            json={"unique_key": "k1"},
            headers={"Authorization": "Bearer t"},
        ).json()["output"]["url"]
        err = _error(httpx.put(url, content=_zip({"big.py": bytes(range(256)) * 64})), 413)
        assert "MiB" in err["message"]
        assert httpx.put(url, content=_zip({"small.py": b"x = 1\n"})).status_code == 200


def test_register_needs_uploaded_zip_and_existing_file(api):
    _error(
        api.post("/fine-tunes/create/reward", json={"name": "r.py", "unique_key": "nope", "func": "R"}), 400
    )
    url = api.post("/fine-tunes/generate/faas/upload/url", json={"unique_key": "reward-reg"}).json()[
        "output"
    ]["url"]
    assert httpx.put(url, content=_zip({"rewards/r.py": b"class R: pass\n"})).status_code == 200
    err = _error(
        api.post(
            "/fine-tunes/create/reward",
            json={"name": "rewards/missing.py", "unique_key": "reward-reg", "func": "R"},
        ),
        400,
    )
    assert "missing.py" in err["message"]
    ok = api.post(
        "/fine-tunes/create/reward", json={"name": "rewards/r.py", "unique_key": "reward-reg", "func": "R"}
    )
    assert ok.status_code == 200 and ok.json()["output"]["reward_id"].startswith("rw-")
    group = api.post(
        "/fine-tunes/create/group-reward",
        json={"name": "rewards/r.py", "unique_key": "reward-reg", "func": "R"},
    )
    assert group.json()["output"]["group_reward_id"].startswith("grw-")
    _error(
        api.post("/fine-tunes/create/widget", json={"name": "r.py", "unique_key": "reward-reg", "func": "R"}),
        404,
    )


def test_list_paging_and_params(api):
    out = api.get("/fine-tunes", params={"page_no": 1, "page_size": 5}).json()["output"]
    assert set(out) >= {"page_no", "page_size", "total", "jobs"}
    _error(api.get("/fine-tunes", params={"page_no": 0}), 400)
    _error(api.get("/fine-tunes", params={"page_size": "many"}), 400)


def test_models_listing_and_lookup(api):
    out = api.get("/models").json()["output"]
    kinds = {m["kind"] for m in out["models"]}
    assert "stand-in" in kinds and out["default_student"] and out["default_teacher"]
    teacher = api.get("/models/qwen3-max", params={"role": "teacher"})
    if teacher.status_code == 200:  # the bundled pair is present
        assert teacher.json()["output"]["kind"] == "stand-in"
        assert teacher.json()["output"]["path"].endswith("tiny-teacher")
    err = _error(api.get("/models/Qwen/Qwen3-8B"), 404)
    assert err["code"] == "ModelNotFound" and "--model-map" in err["message"]


def test_huge_paging_numbers_are_a_400_not_a_500(api):
    """Found by the schema fuzz: numbers beyond SQLite's 64-bit INTEGER used to overflow into a 500."""
    for path, params in [
        ("/fine-tunes", {"page_no": "999999999999999999999"}),
        ("/files", {"page_no": "999999999999999999999"}),
        ("/fine-tunes/no-such-job/logs", {"offset": "999999999999999999999999"}),
    ]:
        resp = api.get(path, params=params)
        assert resp.status_code == 400, (path, resp.text)
        assert resp.json()["code"] == "InvalidParameter"


@pytest.mark.parametrize(
    "path,body,needle",
    [
        ("/fine-tunes/generate/faas/upload/url", {"unique_key": "has space"}, "unique_key must be"),
        ("/fine-tunes/generate/faas/upload/url", {}, "unique_key is required"),
        ("/fine-tunes/create/reward", {"name": " ", "unique_key": "k", "func": "R"}, "name is required"),
        (
            "/fine-tunes/create/reward",
            {"name": "r.py", "unique_key": "k", "func": "1R"},
            "not a Python class",
        ),
        ("/fine-tunes/query/faas/log/rw-ins-x", {"pageSize": 0}, "pageSize"),
        ("/fine-tunes/query/faas/log/rw-ins-x", {"keywords": "one"}, "keywords"),
        ("/fine-tunes", {"model": "m", "training_type": "pg_opd", "teacher_model": "t"}, "training_datasets"),
        (
            "/fine-tunes",
            {"model": "m", "rewards": [{"reward_id": "rw-x", "weight": "heavy"}]},
            "rewards[0].weight",
        ),
        ("/fine-tunes", {"model": "m", "job_name": "x" * 300, "teacher_model": "t"}, "job_name"),
    ],
)
def test_bad_bodies_are_400_invalid_parameter_naming_the_field(api, path, body, needle):
    err = _error(api.post(path, json=body), 400)
    assert err["code"] == "InvalidParameter" and needle in err["message"], err


def test_a_json_body_sent_as_another_content_type_says_how_to_send_it(api):
    resp = api.post(
        "/fine-tunes/generate/faas/upload/url",
        content=b'{"unique_key": "k"}',
        headers={"Content-Type": "text/plain"},
    )
    assert "Content-Type: application/json" in _error(resp, 400)["message"]


def test_the_sdk_layer_call_without_requirements_is_accepted(api):
    """dashscope sends `requirements_content: null` when the function has no requirements file."""
    out = api.post("/fine-tunes/create/faas/layer", json={"layer_name": "l", "requirements_content": None})
    assert out.status_code == 200, out.text
    code = out.json()["output"]["layer_code"]
    assert api.get("/fine-tunes/query/faas/layer/status", params={"layer_code": code}).status_code == 200
    _error(api.get("/fine-tunes/query/faas/layer/status", params={"layer_code": "layer-nope"}), 404)
