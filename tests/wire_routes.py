"""Every route of `opd serve` called once (the SDK's job flow included), and the key structure of each answer.

`exercise(server, workdir)` walks a real control plane through files, functions, jobs (one trained by the
unmodified SDK, one failed, one cancelled), checkpoints and export, models, generation and chat (plain and
streamed), deployments and the error shapes, and returns each answer: a JSON body, or a stream's text.
`shape()` reduces an answer to its structure (keys, and the JSON type at each; lists merged over their
elements; a stream by event), which is what must not change when the server's answers are built by
other code. Used by tests/test_wire_models.py; `python tests/wire_routes.py OUT.json` writes a capture.
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from pathlib import Path
from typing import Any

import httpx
import yaml
from conftest import SDK_SUBMIT, TINY_HP, run_sdk, tiny_workspace

Capture = dict[str, Any]  # {"status": int, "body": JSON} or {"status": int, "sse": text}
MESSAGES = [{"role": "user", "content": "93418"}]
GENERATION = "/services/aigc/text-generation/generation"


def _answer(resp: httpx.Response) -> Capture:
    try:
        return {"status": resp.status_code, "body": resp.json()}
    except ValueError:
        return {"status": resp.status_code, "body": resp.text}


def _stream(resp: httpx.Response) -> Capture:
    return {"status": resp.status_code, "sse": resp.text}


def _zip(ws: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in (ws / "functions").rglob("*.py"):
            z.write(f, f.relative_to(ws).as_posix())
    return buf.getvalue()


def _files(api: httpx.Client, out: dict[str, Capture]) -> str:
    from opd_nb.engine.task import make_rows

    rows = "".join(json.dumps(r) + "\n" for r in make_rows(16, seed=1)).encode()
    parts = [("files", ("train.jsonl", rows, "x")), ("files", ("bad.jsonl", b"nope\n", "x"))]
    out["files.upload"] = _answer(api.post("/files", files=parts, data={"descriptions": ["train", "bad"]}))
    file_id = out["files.upload"]["body"]["data"]["uploaded_files"][0]["file_id"]
    out["files.list"] = _answer(api.get("/files"))
    out["files.get"] = _answer(api.get(f"/files/{file_id}"))
    other = api.post("/files", files={"files": ("x.jsonl", b'{"a": 1}\n', "x")}).json()
    out["files.delete"] = _answer(api.delete(f"/files/{other['data']['uploaded_files'][0]['file_id']}"))
    return file_id


def _functions(api: httpx.Client, ws: Path, out: dict[str, Capture]) -> None:
    """The SDK's registration flow, by hand: upload URL, PUT, layer, register, load, query, logs, delete."""
    url = api.post("/fine-tunes/generate/faas/upload/url", json={"unique_key": "k-wire-1"})
    out["functions.upload_url"] = _answer(url)
    out["functions.oss_put"] = _answer(httpx.put(url.json()["output"]["url"], content=_zip(ws)))
    layer = api.post("/fine-tunes/create/faas/layer", json={"layer_name": "l", "requirements_content": "x"})
    out["functions.layer"] = _answer(layer)
    code = layer.json()["output"]["layer_code"]
    out["functions.layer_status"] = _answer(
        api.get("/fine-tunes/query/faas/layer/status", params={"layer_code": code})
    )
    classpath = yaml.safe_load((ws / "config.yaml").read_text())["functions"][0]["fcmodel"]["classpath"]
    file_name, cls = classpath.split(":")  # the template's form: functions/reward/reward.py:Class
    body = {"name": file_name, "unique_key": "k-wire-1", "func": cls}
    out["functions.register"] = _answer(api.post("/fine-tunes/create/reward", json=body))
    entity = out["functions.register"]["body"]["output"]["reward_id"]
    loaded = api.post(
        f"/fine-tunes/online/faas/jobId-wire/{entity}", json={"concurrency": 2, "env": {"A": True}}
    )
    out["functions.load"] = _answer(loaded)
    instance = loaded.json()["output"]["instance_id"]
    out["functions.query"] = _answer(api.post(f"/fine-tunes/query/faas/{instance}", json={}))
    out["functions.logs"] = _answer(api.post(f"/fine-tunes/query/faas/log/{instance}", json={"pageSize": 5}))
    out["functions.delete"] = _answer(api.post(f"/fine-tunes/delete/faas/{instance}", json={}))


def _wait(api: httpx.Client, job_ids: list[str], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [api.get(f"/fine-tunes/{j}").json()["output"]["status"] for j in job_ids]
        if all(s in ("SUCCEEDED", "FAILED", "CANCELED") for s in states):
            return
        time.sleep(0.5)
    raise AssertionError(f"jobs {job_ids} did not finish in {timeout}s")


def _jobs(api: httpx.Client, server: Any, ws: Path, file_id: str, out: dict[str, Capture]) -> tuple[str, str]:
    """A reward job the SDK submits from a template workspace, one failing in its data, one cancelled."""
    proc = run_sdk(server, SDK_SUBMIT, ws)
    assert proc.returncode == 0, proc.stderr[-2000:]
    job_id = next(ln for ln in proc.stdout.splitlines() if ln.startswith("JOB ")).split()[1]
    body = {
        "model": "qwen3-8b",
        "teacher_model": "qwen3-max",
        "training_type": "pg_opd",
        "training_datasets": [{"type": "training", "data_source_type": "file_id", "file_id": file_id}],
        "hyper_parameters": TINY_HP,
    }
    out["jobs.create"] = _answer(api.post("/fine-tunes", json=body))
    pending = api.post("/fine-tunes", json=body).json()["output"]["job_id"]
    out["jobs.cancel"] = _answer(api.post(f"/fine-tunes/{pending}/cancel", json={"reason": "wire test"}))
    out["jobs.get_canceled"] = _answer(api.get(f"/fine-tunes/{pending}"))
    too_short = {**body, "hyper_parameters": {**TINY_HP, "max_length": 16, "max_prompt_length": 8}}
    failing = api.post("/fine-tunes", json=too_short).json()["output"]["job_id"]
    _wait(api, [job_id, failing, out["jobs.create"]["body"]["output"]["job_id"]])
    out["jobs.get"] = _answer(api.get(f"/fine-tunes/{job_id}"))
    out["jobs.get_failed"] = _answer(api.get(f"/fine-tunes/{failing}"))
    out["jobs.list"] = _answer(api.get("/fine-tunes", params={"page_size": 3}))
    out["jobs.logs"] = _answer(api.get(f"/fine-tunes/{job_id}/logs", params={"line": 3}))
    out["jobs.stream"] = _stream(api.get(f"/fine-tunes/{job_id}/stream"))
    out["jobs.metrics"] = _answer(api.get(f"/fine-tunes/{job_id}/metrics"))
    out["jobs.checkpoints"] = _answer(api.get(f"/fine-tunes/{job_id}/checkpoints"))
    out["jobs.export"] = _answer(
        api.get(f"/fine-tunes/{job_id}/export/checkpoint-2", params={"model_name": "early"})
    )
    out["jobs.checkpoints_after_export"] = _answer(api.get(f"/fine-tunes/{job_id}/checkpoints"))
    out["jobs.rollouts"] = _answer(api.get(f"/fine-tunes/{job_id}/rollouts", params={"limit": 3}))
    out["jobs.cancel_finished"] = _answer(api.post(f"/fine-tunes/{job_id}/cancel"))
    return job_id, failing


def _inference(api: httpx.Client, root: str, out: dict[str, Capture]) -> None:
    ask = {"model": "qwen3-8b", "input": {"messages": MESSAGES}}
    plain = {"max_tokens": 4, "temperature": 0}
    out["inference.generation_text"] = _answer(api.post(GENERATION, json={**ask, "parameters": plain}))
    choices = {
        "result_format": "message",
        "max_tokens": 4,
        "n": 2,
        "logprobs": True,
        "top_logprobs": 1,
        "seed": 1,
    }
    out["inference.generation_message"] = _answer(api.post(GENERATION, json={**ask, "parameters": choices}))
    sse = {"X-DashScope-SSE": "enable"}
    out["inference.generation_stream"] = _stream(
        api.post(GENERATION, json={**ask, "parameters": plain}, headers=sse)
    )
    chat, key = f"{root}/compatible-mode/v1", {"Authorization": "Bearer test"}

    def post(body: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{chat}/chat/completions", json=body, headers=key, timeout=300)

    out["inference.chat"] = _answer(post({"model": "qwen3-8b", "messages": MESSAGES, "max_tokens": 4}))
    logprobs = {
        "model": "qwen3-8b",
        "messages": MESSAGES,
        "max_tokens": 3,
        "n": 2,
        "logprobs": True,
        "top_logprobs": 2,
    }
    out["inference.chat_logprobs"] = _answer(post(logprobs))
    stream = {"model": "qwen3-8b", "messages": MESSAGES, "max_tokens": 4, "stream": True}
    out["inference.chat_stream"] = _stream(post({**stream, "stream_options": {"include_usage": True}}))
    out["inference.models"] = _answer(httpx.get(f"{chat}/models", headers=key))
    out["inference.chat_error"] = _answer(post({"model": "qwen3-8b"}))
    out["inference.chat_missing_model"] = _answer(post({"model": "nope-model", "messages": MESSAGES}))


def _deployments(api: httpx.Client, job_id: str, out: dict[str, Capture]) -> None:
    created = api.post(
        "/deployments", json={"model_name": f"opd-local/{job_id}", "capacity": 1, "suffix": "wire"}
    )
    out["deployments.create"] = _answer(created)
    name = created.json()["output"]["deployed_model"]
    out["deployments.stream"] = _stream(api.get(f"/deployments/{name}/stream"))
    out["deployments.get"] = _answer(api.get(f"/deployments/{name}"))
    out["deployments.list"] = _answer(api.get("/deployments"))
    out["deployments.scale"] = _answer(api.put(f"/deployments/{name}/scale", json={"capacity": 2}))
    out["deployments.delete"] = _answer(api.delete(f"/deployments/{name}"))


def exercise(server: Any, workdir: Path) -> dict[str, Capture]:
    """Call every route of the control plane `server` (a ServerHandle) once; each answer by a name."""
    base = server.api_base
    root = base.removesuffix("/api/v1")
    out: dict[str, Capture] = {"health": _answer(httpx.get(root + "/health"))}
    ws = tiny_workspace("reward", workdir / "reward")
    with httpx.Client(base_url=base, headers={"Authorization": "Bearer test"}, timeout=300) as api:
        file_id = _files(api, out)
        _functions(api, ws, out)
        job_id, failing = _jobs(api, server, ws, file_id, out)
        out["models.list"] = _answer(api.get("/models"))
        out["models.get"] = _answer(api.get("/models/qwen3-8b"))
        out["models.get_missing"] = _answer(api.get("/models/no/such-model"))
        _inference(api, root, out)
        _deployments(api, job_id, out)
        out["errors.validation"] = _answer(api.post("/fine-tunes", json={"model": ""}))
        out["errors.not_found_route"] = _answer(api.get("/nowhere"))
        out["errors.unknown_job"] = _answer(api.get("/fine-tunes/ft-nope"))
        out["errors.no_key"] = _answer(httpx.get(base + "/fine-tunes"))
        out["jobs.delete"] = _answer(api.delete(f"/fine-tunes/{failing}"))
    return out


# ---- structure ---------------------------------------------------------------------------------
def _merge(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _merge(a.get(k, "missing"), b.get(k, "missing")) for k in sorted(set(a) | set(b))}
    if isinstance(a, list) and isinstance(b, list):
        return ["list", _merge(a[1], b[1])]
    return a if a == b else "|".join(sorted(set(f"{a}|{b}".split("|"))))


def _json_shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json_shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        merged: Any = "empty"
        for item in value:
            merged = _json_shape(item) if merged == "empty" else _merge(merged, _json_shape(item))
        return ["list", merged]
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else type(value).__name__


def _events(text: str) -> dict[str, Any]:
    """A stream's events by kind: the shape of their data (JSON, or "text"), merged over each kind."""
    out: dict[str, Any] = {}
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        kind, data = "message", []
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                kind = value
            elif field == "data":
                data.append(value)
            elif field == "" and value.startswith("HTTP_STATUS/"):
                kind = f"{kind} {value}"
        text_data = "\n".join(data)
        try:
            shape = _json_shape(json.loads(text_data)) if text_data[:1] in "{[" else "text"
        except ValueError:
            shape = "text"
        if not data:
            kind, shape = "comment", "none"
        out[kind] = _merge(out[kind], shape) if kind in out else shape
    return out


def shape(capture: Capture) -> dict[str, Any]:
    """An answer's structure: its status, and its body's keys and types (a stream: its events')."""
    if "sse" in capture:
        return {"status": capture["status"], "events": _events(capture["sse"])}
    return {"status": capture["status"], "body": _json_shape(capture["body"])}


if __name__ == "__main__":  # a capture from a fresh server, for looking at
    import sys
    import tempfile

    from opd_nb.server import start

    with tempfile.TemporaryDirectory() as tmp:
        handle = start(port=0, data_dir=Path(tmp) / "data")
        try:
            Path(sys.argv[1]).write_text(
                json.dumps(exercise(handle, Path(tmp)), indent=1, ensure_ascii=False)
            )
        finally:
            handle.stop()
