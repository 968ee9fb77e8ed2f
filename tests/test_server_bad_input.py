"""Bad input is a short Bailian-shaped 4xx that leaves nothing on disk, never a 500 (issue 12, defect 6/7).

Every case here used to be a 500, a reply the size of the input, or a half-written directory.
"""

from __future__ import annotations

import io
import json
import struct
import time
import zipfile
from pathlib import Path

import httpx
import pytest
from server_http import register_reward

pytestmark = pytest.mark.slow
JSON = {"Content-Type": "application/json"}


def _error(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, (resp.status_code, resp.text[:300])
    body = resp.json()
    assert {"request_id", "code", "message"} <= set(body), body
    assert len(resp.content) < 2000, len(resp.content)  # a short message, whatever was sent
    return body


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


def _zip(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _upload_url(api: httpx.Client, key: str) -> str:
    resp = api.post("/fine-tunes/generate/faas/upload/url", json={"unique_key": key})
    assert resp.status_code == 200, resp.text
    return resp.json()["output"]["url"]


DEEP = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000


@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT, '{"model": ' + "[" * 70 + "]" * 70 + "}"])
@pytest.mark.parametrize(
    "path", ["/fine-tunes", "/fine-tunes/create/faas/layer", "/fine-tunes/create/reward"]
)
def test_deeply_nested_json_is_a_400(api, path, body):
    err = _error(api.post(path, content=body, headers=JSON), 400)
    assert "nested more than" in err["message"]


@pytest.mark.parametrize(
    "path,body",
    [
        ("/fine-tunes", {"model": "\\ud800", "training_type": "pg_opd", "teacher_model": "t"}),
        ("/fine-tunes/create/faas/layer", {"layer_name": "\\ud800"}),
        ("/fine-tunes/create/faas/layer", {"requirements_content": "numpy\\udfff"}),
        ("/fine-tunes/generate/faas/upload/url", {"unique_key": "\\ud800"}),
        ("/fine-tunes/create/reward", {"name": "r.py", "unique_key": "\\udbff", "func": "R"}),
        (
            "/fine-tunes",
            {
                "model": "m",
                "training_type": "pg_opd",
                "teacher_model": "t",
                "training_datasets": [{"file_id": "\\ud800"}],
            },
        ),
        ("/fine-tunes", {"model": "m", "hyper_parameters": {"\\ud800": 1}}),
    ],
)
def test_lone_surrogates_are_a_400(api, path, body):
    raw = json.dumps(body).replace("\\\\u", "\\u")  # the escape itself, as a client would send it
    assert "\\ud8" in raw or "\\udb" in raw or "\\udf" in raw
    err = _error(api.post(path, content=raw, headers=JSON), 400)
    assert "surrogate" in err["message"]


def test_a_valid_surrogate_pair_is_text(api):
    resp = api.post(
        "/fine-tunes/create/faas/layer", content='{"layer_name": "emoji \\ud83d\\ude00"}', headers=JSON
    )
    assert resp.status_code == 200, resp.text


def _multipart(filename: bytes, data: bytes = b'{"a": 1}\n') -> tuple[bytes, dict]:
    boundary = b"opdtestboundary"
    body = (
        b"--" + boundary + b"\r\n"
        b'Content-Disposition: form-data; name="files"; filename="' + filename + b'"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n--" + boundary + b"--\r\n"
    )
    return body, {"Content-Type": "multipart/form-data; boundary=opdtestboundary"}


@pytest.mark.parametrize("filename", [b"..", b"a\x00b.jsonl", b"x" * 300 + b".jsonl", b"."])
def test_bad_dataset_file_names_are_a_400_and_leave_no_folder(api, local_server, filename):
    files = Path(local_server.data_dir) / "files"
    before = _tree(files)
    body, headers = _multipart(filename)
    err = _error(api.post("/files", content=body, headers=headers), 400)
    assert err["code"] == "InvalidParameter"
    assert _tree(files) == before


def test_one_bad_name_refuses_the_whole_upload(api, local_server):
    files = Path(local_server.data_dir) / "files"
    before = _tree(files)
    resp = api.post(
        "/files", files=[("files", ("good.jsonl", b'{"a": 1}\n')), ("files", ("..", b'{"a": 1}\n'))]
    )
    _error(resp, 400)
    assert _tree(files) == before


@pytest.mark.parametrize("value", ["²".encode(), b"9" * 5000, b"-1", b"12abc"])
def test_bad_last_event_id_is_a_400(api, value):
    err = _error(api.get("/fine-tunes/any-job/stream", headers={"Last-Event-ID": value}), 400)
    assert "Last-Event-ID" in err["message"]


def _bad_crc_zip() -> bytes:
    raw = bytearray(_zip({"ok.py": b"x = 1\n" * 50}))
    local = raw.index(b"PK\x03\x04")
    name_len, extra_len = struct.unpack("<HH", raw[local + 26 : local + 30])
    data_at = local + 30 + name_len + extra_len
    raw[data_at + 2] ^= 0xFF  # corrupt the compressed data, keep the stored CRC
    return bytes(raw)


def _huge_declared_size_zip() -> bytes:
    raw = bytearray(_zip({"big.bin": b"0" * 100}))
    central = raw.index(b"PK\x01\x02")
    raw[central + 24 : central + 28] = struct.pack("<L", 0xFFFFFFF0)  # uncompressed size: ~4 GiB
    return bytes(raw)


def _many_entries_zip(n: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for i in range(n):
            zf.writestr(f"f{i}", b"")
    return buf.getvalue()


@pytest.mark.parametrize(
    "name,payload,needle",
    [
        ("file-and-dir", lambda: _zip({"pkg": b"x", "pkg/mod.py": b"y"}), "both a file and a directory"),
        ("long-name", lambda: _zip({"d/" + "n" * 300 + ".py": b"x"}), "over 255 bytes"),
        ("bad-crc", _bad_crc_zip, "corrupt"),
        ("expands-too-far", _huge_declared_size_zip, "unpacks to more than"),
        ("too-many-entries", lambda: _many_entries_zip(10_001), "entries"),
        ("duplicate", lambda: _zip({"a.py": b"1", "b.py": b"2"}).replace(b"b.py", b"a.py"), "twice"),
    ],
)
def test_zips_that_would_not_unpack_are_refused_at_the_put(api, local_server, name, payload, needle):
    data_dir = Path(local_server.data_dir)
    before = _tree(data_dir / "uploads") | _tree(data_dir / "functions")
    url = _upload_url(api, f"reward-bad-{name}")
    t0 = time.monotonic()
    err = _error(httpx.put(url, content=payload()), 400)
    assert time.monotonic() - t0 < 10
    assert err["code"] == "InvalidZip" and needle in err["message"], err
    assert _tree(data_dir / "uploads") | _tree(data_dir / "functions") == before
    # nothing was recorded under the key: registering from it is a plain 400, and nothing is left either
    _error(
        api.post(
            "/fine-tunes/create/reward",
            json={"name": "a.py", "unique_key": f"reward-bad-{name}", "func": "R"},
        ),
        400,
    )
    assert not list((data_dir / "functions").rglob("code.tmp"))


def test_json_bodies_are_capped_at_16_mib(api):
    big = b'{"model": "' + b"m" * (16 * 2**20) + b'"}'
    err = _error(api.post("/fine-tunes", content=big, headers=JSON), 413)
    assert "16 MiB" in err["message"]

    def chunks():  # no Content-Length: the cap is counted while reading
        yield b'{"model": "'
        for _ in range(17):
            yield b"m" * 2**20
        yield b'"}'

    _error(api.post("/fine-tunes", content=chunks(), headers=JSON), 413)


def _read_reply(sock) -> str:
    """One whole HTTP reply: the head, then its Content-Length of body (they may come in separate reads)."""
    data = b""
    while b"\r\n\r\n" not in data and (chunk := sock.recv(4096)):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(v)
            for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n"))
            if k.lower() == b"content-length"
        ),
        0,
    )
    while len(body) < length and (chunk := sock.recv(4096)):
        body += chunk
    return (head + b"\r\n\r\n" + body).decode("latin-1")


def test_a_declared_oversize_upload_is_refused_before_it_is_read(local_server):
    """A 600 MiB multipart upload is refused from its Content-Length: the server reads none of it."""
    import socket

    host, port = local_server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"POST /api/v1/files HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer t\r\n".encode()
            + b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 629145600\r\n\r\n--b\r\n"
        )
        reply = _read_reply(sock)
    assert reply.startswith("HTTP/1.1 413"), reply[:200]
    assert "512 MiB" in reply


def test_a_huge_value_is_not_echoed_back(api):
    resp = api.post("/fine-tunes", json={"model": "m" * 10_000_000, "training_type": "x"})
    _error(resp, 400)


def test_requirements_content_is_capped_at_1_mib(api):
    err = _error(
        api.post("/fine-tunes/create/faas/layer", json={"requirements_content": "a" * (2**20 + 1)}), 400
    )
    assert "requirements_content" in err["message"]
    ok = api.post("/fine-tunes/create/faas/layer", json={"requirements_content": "numpy\n" * 1000})
    assert ok.status_code == 200, ok.text


def test_405_carries_allow(local_server):
    resp = httpx.post(local_server.base_url + "/health")
    body = _error(resp, 405)
    assert body["code"] == "MethodNotAllowed" and "GET" in resp.headers["allow"]


def test_the_openapi_documents_the_400_body(local_server):
    schema = httpx.get(local_server.base_url + "/openapi.json").json()
    assert "Error" in schema["components"]["schemas"]
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            assert "422" not in op["responses"], (method, path)
            shape = "OpenAIError" if path.startswith("/compatible-mode/") else "Error"  # as each answers
            assert op["responses"]["400"]["content"]["application/json"]["schema"] == {
                "$ref": f"#/components/schemas/{shape}"
            }


ODD_REWARD = """
from functions.reward.reward import RewardProcessor


class OddMetrics(RewardProcessor):
    async def process(self, input_data):
        out = (await super().process(input_data)).model_dump(mode="json")
        out["reward"]["reward_metrics"] = {**(out["reward"]["reward_metrics"] or {}), "tag": "x", "flag": True}
        return out
"""


def test_opd_test_and_the_playground_flag_non_float_reward_metrics(tmp_path):
    """A reward's bad metric (defect 8) is named by `opd test` and the playground, as in the job log."""
    from opd_nb.functions.testing import metric_warnings, run_workspace_tests
    from opd_nb.notebook.playground import score_one
    from opd_nb.workspace.new import create

    ws = Path(create("reward", tmp_path / "ws").path)
    assert metric_warnings(ws) == []  # the template's own reward returns floats only
    (ws / "functions" / "reward" / "odd.py").write_text(ODD_REWARD)
    config = ws / "config.yaml"
    config.write_text(
        config.read_text().replace(
            "functions/reward/reward.py:RewardProcessor", "functions/reward/odd.py:OddMetrics"
        )
    )
    report = run_workspace_tests(ws)
    assert report.ok  # the tests still pass: the warning is what tells
    assert len(report.warnings) == 2, report.warnings
    assert "'tag' is a str" in str(report) and "the console would not show it" in str(report)
    scored = score_one(ws, "<think>x</think>123", prompt="321", ground_truth="123")
    assert scored.reward_score == 1.0 and scored.reward_metrics["tag"] == "x"
    assert any("'flag' is a bool" in w for w in scored.metric_warnings) and "warning:" in str(scored)


# ---- environment maps (issue 37) ------------------------------------------------------------------
BAD_ENVS = {
    "a NUL byte in a value": ({"MY_FLAG": "on\x00off"}, "NUL byte"),
    "a NUL byte in a name": ({"MY\x00FLAG": "1"}, "is not allowed"),
    "an '=' in a name": ({"MY=FLAG": "1"}, "is not allowed"),
    "an empty name": ({"": "1"}, "is not allowed"),
    "an object as a value": ({"MY_FLAG": {"on": True}}, "string, number or boolean"),
    "null as a value": ({"MY_FLAG": None}, "string, number or boolean"),
    "more than an exec can carry": ({f"V{i}": "x" * 4096 for i in range(20)}, "at most 65536"),
    "not a map": (["MY_FLAG=1"], "NAME: value"),
}


@pytest.mark.parametrize("env, needle", list(BAD_ENVS.values()), ids=list(BAD_ENVS))
def test_env_maps_no_process_can_carry_are_a_400_where_they_enter(local_server, api, reward_id, env, needle):
    """Where an env map enters, loading an instance and submitting a job, it is a Bailian-shaped 400
    naming ``env``: before, a NUL byte reached ``os.execve`` and the load answered 500."""
    load = api.post(f"/fine-tunes/online/faas/t1/{reward_id}", json={"env": env}, timeout=120)
    message = _error(load, 400)["message"]
    assert "env" in message and needle in message, message
    job = {
        "model": "qwen3-8b",
        "training_type": "pg_opd",
        "teacher_model": "qwen3-max",
        "training_datasets": [{"type": "training", "file_id": "file-ft-none"}],
        "rewards": [{"reward_id": reward_id, "name": "r", "env": env}],
    }
    message = _error(api.post("/fine-tunes", json=job), 400)["message"]
    assert "rewards[0].env" in message and needle in message, message
    job["rollout"], job["rewards"] = {"rollout_id": "ro-x", "env": env}, []
    assert "rollout.env" in _error(api.post("/fine-tunes", json=job), 400)["message"]


def test_a_good_env_map_still_reaches_the_function(api, reward_id):
    """Strings, numbers and booleans (as the SDK sends them) load, and booleans arrive as true/false."""
    env = {"MY_FLAG": True, "MY_COUNT": 3, "MY_TEXT": "a=b c", "MY_EMPTY": ""}
    load = api.post(f"/fine-tunes/online/faas/t1/{reward_id}", json={"env": env}, timeout=120)
    assert load.status_code == 200, load.text
    out = load.json()["output"]
    try:
        import psutil

        port = int(out["trigger_url"].rsplit(":", 1)[1])
        pid = next(c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.pid)
        seen = psutil.Process(pid).environ()
        assert {k: seen.get(k) for k in env} == {
            "MY_FLAG": "true",
            "MY_COUNT": "3",
            "MY_TEXT": "a=b c",
            "MY_EMPTY": "",
        }
    finally:
        api.post(f"/fine-tunes/delete/faas/{out['instanceId']}", json={})


@pytest.fixture(scope="module")
def reward_id(local_server, tmp_path_factory):
    return register_reward(local_server.api_base, tmp_path_factory.mktemp("env"), key="rw-env-maps")
