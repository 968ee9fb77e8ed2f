"""How a submit gets its result, and how the clients behind a submit and a monitor keep connections.

Against the session's real `opd serve`. The workspace's submit_job.py writes its result to a file
(`--result-file`), so what the workspace's own code prints cannot be taken for it; a submit_job.py
from an older template (no such flag) still submits, with a note on how to update it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import stop_jobs, tiny_workspace, wait_status

from opd_nb.client import JobClient, resolve_target, submit
from opd_nb.client.submit import LEGACY_NOTE
from opd_nb.constants import CANCELED, FAILED, SUCCEEDED

FAKE_ID = "ft-printed-by-the-users-code"
# What a user might add to their submit_job.py: a JSON log line, printed after the script's own output.
USER_PRINT = (
    "\nimport atexit as _atexit\n"
    f"_atexit.register(lambda: print(json.dumps({{'job_id': '{FAKE_ID}', 'status': 'mine'}}), flush=True))\n"
)


@pytest.fixture(scope="module")
def client(local_server) -> Iterator[JobClient]:
    with JobClient(resolve_target("local", base_url=local_server.base_url)) as c:
        yield c


def _with_user_print(ws: Path) -> None:
    script = ws / "submit_job.py"
    text = script.read_text(encoding="utf-8")
    anchor = "\nLOCAL_URL = "
    assert anchor in text
    script.write_text(text.replace(anchor, USER_PRINT + anchor, 1), encoding="utf-8")


def _as_older_template(ws: Path) -> None:
    """The workspace's submit_job.py as templates before `--result-file` made it: no flag, no file."""
    script = ws / "submit_job.py"
    lines = script.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if 'add_argument("--result-file"' in line)
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith(")"))
    kept = [line for line in lines[:start] + lines[end + 1 :] if "--result-file out.json" not in line]
    text = "".join(kept).replace("args.result_file", "None")
    assert "--result-file" not in text
    script.write_text(text, encoding="utf-8")


def _stop(client: JobClient, job_id: str) -> None:
    """Free the shared CPU: these tests only need the job to exist."""
    stop_jobs(client, [job_id])
    wait_status(client, job_id, {CANCELED, SUCCEEDED, FAILED}, timeout=60)


@pytest.mark.slow
def test_a_print_of_the_users_code_cannot_pass_for_the_result(local_server, client, tmp_path) -> None:
    ws = tiny_workspace("reward", tmp_path / "printing")
    _with_user_print(ws)
    result = submit(ws, client.target, client=client)
    try:
        assert result.job_id != FAKE_ID and result.job is not None and result.job.job_id == result.job_id
        assert result.runner == "submit_job.py" and LEGACY_NOTE not in result.notes
        assert [f["type"] for f in result.functions] == ["reward"] and result.functions[0]["entity_id"]
        assert any("registering" in line for line in result.note_lines())
        assert result.client is client  # the caller's client read the job back (the monitor reuses it)
    finally:
        _stop(client, result.job_id)


@pytest.mark.slow
def test_a_workspace_of_an_older_template_still_submits_and_says_how_to_update(
    local_server, client, tmp_path
) -> None:
    ws = tiny_workspace("reward", tmp_path / "older")
    _as_older_template(ws)
    result = submit(ws, client.target)
    try:
        assert result.job is not None and result.job.job_id == result.job_id
        assert LEGACY_NOTE in result.notes and LEGACY_NOTE in str(result)
        assert "opd new" in LEGACY_NOTE and [f["type"] for f in result.functions] == ["reward"]
    finally:
        _stop(client, result.job_id)


def _counting_connections(monkeypatch: pytest.MonkeyPatch, port: int) -> list[int]:
    """Every TCP connection opened to `port` from now on (httpx opens each with create_connection)."""
    opened: list[int] = []
    real = socket.create_connection

    def counted(address, *args, **kwargs):  # type: ignore[no-untyped-def]
        if address[1] == port:
            opened.append(port)
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", counted)
    return opened


@pytest.mark.slow
def test_a_monitor_polls_over_one_kept_connection_and_closes_it(
    local_server, client, tmp_path, monkeypatch
) -> None:
    from opd_nb.notebook.monitor import JobMonitor

    ws = tiny_workspace("pure-distill", tmp_path / "long", train_rows=64, n_epochs=50)
    job_id = submit(ws, client.target, client=client).job_id
    try:
        wait_status(client, job_id, {"RUNNING"}, timeout=240)
        port = int(client.target.base_url.split(":")[2].split("/")[0])
        watcher = JobClient(client.target)
        monitor = JobMonitor(job_id, watcher)
        opened = _counting_connections(monkeypatch, port)
        for _ in range(20):
            monitor.poll_once()
        assert monitor.polls == 20 and monitor.state["jobs"][job_id]["status"] == "RUNNING"
        assert len(opened) == 1, f"20 polls opened {len(opened)} connections"
        monitor.start()  # the polling thread: it closes the client's connections when the job ends
        stop_jobs(client, [job_id])
        monitor.wait(timeout_s=60)
        assert watcher._http is None
        watcher.get(job_id)  # a closed client opens a new pool on its next call
        assert len(opened) == 2
    finally:
        _stop(client, job_id)


@pytest.mark.slow
def test_a_workspace_without_submit_job_submits_through_the_sdk_runner(
    local_server, client, tmp_path
) -> None:
    ws = tiny_workspace("pure-distill", tmp_path / "bare")
    (ws / "submit_job.py").unlink()
    result = submit(ws, client.target, client=client)
    try:
        assert result.runner == "sdk" and result.job is not None and result.job.job_id == result.job_id
        assert result.client is client and LEGACY_NOTE not in result.notes
    finally:
        _stop(client, result.job_id)


@pytest.mark.slow
def test_the_result_protocol_is_declared_and_read_by_its_version(local_server, tmp_path) -> None:
    """The workspace's script writes the protocol version generated from opd-nb's constant; the package
    reads an older result (no version), a newer one for the fields it knows (a paid job may have started),
    and names a mistyped field in one line."""
    import json
    import subprocess
    import sys

    from opd_nb.client.submit import _read_result
    from opd_nb.constants import SUBMIT_RESULT_PROTOCOL
    from opd_nb.errors import OpdError

    ws = tiny_workspace("pure-distill", tmp_path / "ws")
    out = tmp_path / "result.json"
    cmd = [sys.executable, "submit_job.py", "--local", local_server.api_base, "--result-file", str(out)]
    done = subprocess.run(cmd, cwd=ws, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["protocol"] == SUBMIT_RESULT_PROTOCOL and written["job_id"].startswith("ft-")
    with JobClient(resolve_target("local", base_url=local_server.api_base)) as c:
        stop_jobs(c, [written["job_id"]])
    assert _read_result(out)["job_id"] == written["job_id"]
    for data, job_id in (
        ({"job_id": "ft-old"}, "ft-old"),
        ({"protocol": 99, "job_id": "ft-new", "x": 1}, "ft-new"),
    ):
        out.write_text(json.dumps(data), encoding="utf-8")
        assert _read_result(out)["job_id"] == job_id
    out.write_text(json.dumps({"protocol": 99, "job_id": ["not", "an", "id"]}), encoding="utf-8")
    with pytest.raises(OpdError) as bad:
        _read_result(out)
    assert "'job_id'" in bad.value.message and "upgrade opd-nb" in (bad.value.fix or "")
