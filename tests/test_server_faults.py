"""Faults that used to lose data or leave a job stuck (issue 28, part B), each against a real `opd serve`.

A clean stop, a delete, a kill -9 mid-upload, a damaged database, a worker that is gone, a full disk,
a resumed job racing its old worker, a killed deployment, a large upload: each test drives the fault
with real processes and signals and checks what a user would see (status, reason, files, exit code).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_http import H, job_logs, job_view, register_reward, wait_until

from opd_nb.engine.task import make_rows
from opd_nb.server import start
from opd_nb.server.store import Store

pytestmark = pytest.mark.slow  # most tests start a server of their own (each says why not)
TINY = {
    "n_epochs": 1,
    "batch_size": 4,
    "n_rollouts": 2,
    "ppo_mini_batch_size": 8,
    "max_prompt_length": 40,
    "max_length": 48,
    "eval_steps": 100,
    "save_strategy": "steps",
    "save_steps": 1,
}


def _upload(api: str, rows: list[dict], name: str = "t.jsonl") -> str:
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    resp = httpx.post(api + "/files", headers=H, files={"files": (name, body)}, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]["uploaded_files"][0]["file_id"]


def _submit(api: str, rows: int = 16, reward_id: str | None = None, **hp: object) -> str:
    job = {
        "model": "qwen3-8b",
        "teacher_model": "qwen3-max",
        "training_type": "pg_opd",
        "training_datasets": [{"type": "training", "file_id": _upload(api, make_rows(rows, seed=3))}],
        "hyper_parameters": {**TINY, **hp},
    }
    if reward_id:
        job["rewards"] = [{"reward_id": reward_id, "name": "reward-1", "weight": 1.0}]
    resp = httpx.post(api + "/fine-tunes", headers=H, json=job)
    assert resp.status_code == 200, resp.text
    return resp.json()["output"]["job_id"]


def _metrics(api: str, job_id: str) -> list[dict]:
    return httpx.get(f"{api}/fine-tunes/{job_id}/metrics", headers=H).json()["output"]["metrics"]


def _checkpoints(api: str, job_id: str) -> list[str]:
    out = httpx.get(f"{api}/fine-tunes/{job_id}/checkpoints", headers=H).json()["output"]
    return [c["checkpoint"] for c in (out["checkpoints"] if isinstance(out, dict) else out)]


def _ended(api: str, job_id: str, timeout: float = 120) -> dict:
    return wait_until(
        lambda: (j := job_view(api, job_id))["status"] in ("SUCCEEDED", "FAILED", "CANCELED") and j,
        timeout,
        f"job {job_id} to end",
    )


# ---- a clean stop ------------------------------------------------------------------------------
def test_sigterm_exits_0_and_removes_the_owner_record(tmp_path: Path) -> None:
    server = start(port=0, data_dir=tmp_path)
    assert (tmp_path / "server.json").is_file()
    server.stop(sig=signal.SIGTERM)
    assert server.process.returncode == 0, server.process.returncode
    assert not (tmp_path / "server.json").exists()


# ---- a deleted job's files -----------------------------------------------------------------------
def test_deleting_a_job_removes_its_files_but_keeps_an_exported_checkpoint(local_server) -> None:
    data = Path(local_server.data_dir)  # the session's: it deletes only its own jobs
    api = local_server.api_base
    plain, exported = _submit(api, rows=8), _submit(api, rows=8)
    for job_id in (plain, exported):
        assert _ended(api, job_id)["status"] == "SUCCEEDED", job_logs(api, job_id)[-20:]
    assert (data / "jobs" / plain).is_dir()
    out = httpx.get(f"{api}/fine-tunes/{exported}/export/checkpoint-1", headers=H)
    assert out.status_code == 200, out.text

    gone = httpx.delete(f"{api}/fine-tunes/{plain}", headers=H).json()
    assert gone["output"]["status"] == "DELETED"
    assert gone["local"]["freed_bytes"] > 0 and gone["local"]["kept"] == []
    assert not (data / "jobs" / plain).exists()

    kept = httpx.delete(f"{api}/fine-tunes/{exported}", headers=H).json()["local"]
    checkpoint = data / "jobs" / exported / "output" / "checkpoints" / "checkpoint-1"
    assert [k["path"] for k in kept["kept"]] == [str(checkpoint.resolve())]
    assert "exported as model" in kept["kept"][0]["why"]
    assert checkpoint.is_dir() and not (data / "jobs" / exported / "worker.log").exists()


# ---- leftovers after kill -9 ------------------------------------------------------------------------
def _slow_zip() -> Iterator[bytes]:
    """A zip upload's body that never finishes (the server is killed while it streams)."""
    yield b"PK\x03\x04" + b"\0" * 2**16
    for _ in range(600):
        time.sleep(0.1)
        yield b"\0" * 2**16


def test_kill_9_leaves_no_instance_running_and_the_next_start_reaps_only_what_the_database_names(
    tmp_path: Path,
) -> None:
    """A kill -9 mid-upload leaves a ``.part-`` file its journal entry names; the next start removes it
    and the other journaled leftovers, and nothing else: before issue 37 it removed every function
    directory the database did not know and every file named like a temporary, a user's too."""
    import threading

    import psutil

    data = tmp_path / "data"
    server = start(port=0, data_dir=data)
    api = server.api_base
    reward_id = register_reward(api, tmp_path)
    loaded = httpx.post(f"{api}/fine-tunes/online/faas/t1/{reward_id}", headers=H, json={}, timeout=120)
    assert loaded.status_code == 200, loaded.text
    port = int(loaded.json()["output"]["trigger_url"].rsplit(":", 1)[1])
    listener = next(c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.pid)
    url = httpx.post(api + "/fine-tunes/generate/faas/upload/url", headers=H, json={"unique_key": "cut"})
    put_url = url.json()["output"]["url"]

    def cut_off_put() -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.put(put_url, content=_slow_zip(), timeout=120)

    threading.Thread(target=cut_off_put, daemon=True).start()
    cut = wait_until(lambda: list((data / "uploads").glob("cut.part-*")), 30, "the upload to start")[0]
    server.kill()
    wait_until(
        lambda: not psutil.pid_exists(listener) or psutil.Process(listener).status() == "zombie",
        10,
        "the instance to exit",
    )
    # cut off as their write paths journal them: a registration mid-unpack, a dataset mid-copy
    journal = Store(data)
    registration = data / "functions" / "rw-cut0000000"
    dataset_tmp, dataset = data / "files" / ".tmp-file-ft-cut-1a2b", data / "files" / "file-ft-cut"
    journal.begin_write(registration)
    journal.begin_write(dataset_tmp, dataset)
    (registration / "code.tmp" / "functions").mkdir(parents=True)
    dataset_tmp.mkdir(parents=True)
    (dataset_tmp / "t.jsonl").write_bytes(b"\0" * 2**20)
    # what no journal entry names stays, whatever its name
    kept = [
        data / "uploads" / "mine.zip.part-1a2b3c4d",
        data / "files" / ".tmp-mine" / "notes.jsonl",
        data / "functions" / "my-notes" / "README.txt",
        data / "functions" / "rw-registered-elsewhere" / "code" / "r.py",
        data / "notes.txt",
    ]
    for path in kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("mine")
    with start(port=0, data_dir=data):
        for path in (cut, registration, dataset_tmp):
            assert not path.exists(), path
        for path in kept:
            assert path.read_text() == "mine", path
        assert (data / "functions" / reward_id / "code" / "functions" / "reward" / "reward.py").is_file()
        assert list((data / "uploads").glob("rw*")), "the finished upload stays"
        assert Store(data).unfinished_writes() == []
    log = (data / "server.log").read_text()
    removed = [line for line in log.splitlines() if line.startswith("opd serve: removed")]
    assert sorted(removed) == sorted(
        f"opd serve: removed {p}, left by an interrupted write of an earlier run"
        for p in (cut, registration, dataset_tmp)
    ), removed


def test_refused_and_finished_writes_leave_no_journal_entry(local_server) -> None:
    """A refused zip, a refused dataset and a refused registration strike their journal entries off,
    and so do finished ones: a start after them removes nothing."""
    api = local_server.api_base
    url = httpx.post(
        api + "/fine-tunes/generate/faas/upload/url", headers=H, json={"unique_key": "journal-bad"}
    )
    assert httpx.put(url.json()["output"]["url"], content=b"not a zip").status_code == 400
    bad = httpx.post(api + "/files", headers=H, files={"files": ("bad.jsonl", b"{not json\n")})
    assert bad.json()["data"]["failed_uploads"], bad.text
    _upload(api, make_rows(2, seed=5))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("r.py", "class R:\n    pass\n")
    url = httpx.post(
        api + "/fine-tunes/generate/faas/upload/url", headers=H, json={"unique_key": "journal-ok"}
    )
    assert httpx.put(url.json()["output"]["url"], content=buf.getvalue()).status_code == 200
    missing = {"name": "nope.py", "unique_key": "journal-ok", "func": "R"}
    assert httpx.post(api + "/fine-tunes/create/reward", headers=H, json=missing).status_code == 400
    assert Store(local_server.data_dir).unfinished_writes() == []


# ---- a damaged database -----------------------------------------------------------------------------
def _serve_once(data: Path) -> subprocess.CompletedProcess:
    """`python -m opd_nb.server` on ``data`` until it refuses (or 60 s pass: it started)."""
    cmd = [sys.executable, "-m", "opd_nb.server", "--data-dir", str(data), "--port", "0"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


DAMAGE = {
    "empty": lambda raw: b"",
    "truncated": lambda raw: raw[: len(raw) // 2],
    "garbage": lambda raw: os.urandom(len(raw)),
}


def test_a_damaged_database_is_refused_and_a_rotated_backup_restores_it(tmp_path: Path) -> None:
    from opd_nb.server.db_safety import KEEP_BACKUPS, backups

    data = tmp_path / "data"
    with start(port=0, data_dir=data) as server:
        job_id = _submit(server.api_base, rows=8)
        assert _ended(server.api_base, job_id)["status"] == "SUCCEEDED"
    db = data / "opd.sqlite3"
    good = db.read_bytes()
    assert 2 <= len(backups(data)) <= KEEP_BACKUPS, backups(data)

    for kind, damage in DAMAGE.items():
        db.write_bytes(damage(good))
        refused = _serve_once(data)
        line = refused.stderr.strip()
        assert refused.returncode == 2 and len(line.splitlines()) == 1, (kind, refused.stderr)
        assert str(db) in line and str(backups(data)[0]) in line and "Traceback" not in line, (kind, line)
        assert not (data / "server.json").exists()

    restore = line.split("restore the newest backup: ", 1)[1].split(" (older ones", 1)[0]
    subprocess.run(["bash", "-c", restore], check=True)
    with start(port=0, data_dir=data) as server:
        assert job_view(server.api_base, job_id)["status"] == "SUCCEEDED"
        listed = httpx.get(server.api_base + "/files", headers=H)
        assert listed.status_code == 200 and listed.json()["output"]["total"] >= 1, listed.text
    for _ in range(KEEP_BACKUPS + 2):  # each start takes one: the count stays bounded
        with start(port=0, data_dir=data):
            pass
    assert len(backups(data)) == KEEP_BACKUPS


# ---- a missing database (issue 37) ---------------------------------------------------------------
@pytest.fixture(scope="module")
def used_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir a real server left after a real job: jobs, a registered function, datasets, a zip, backups."""
    root = tmp_path_factory.mktemp("used")
    data = root / "data"
    with start(port=0, data_dir=data) as server:
        register_reward(server.api_base, root)
        job_id = _submit(server.api_base, rows=8)
        assert _ended(server.api_base, job_id)["status"] == "SUCCEEDED"
    for folder in ("jobs", "functions", "files", "uploads", "backups"):
        assert any((data / folder).iterdir()), folder
    return data


def _files(data: Path) -> dict[str, int]:
    """Every file under the data dir and its size, but the server's own logs and lock."""
    skip = {"server.log", "forkserver.log", "server.lock", "server.json"}
    return {
        str(p.relative_to(data)): p.stat().st_size
        for p in data.rglob("*")
        if p.is_file() and p.name not in skip
    }


def _copy_without_database(used: Path, dest: Path, keep: tuple[str, ...]) -> Path:
    """A copy of ``used`` without its database and owner record, keeping only the folders in ``keep``."""
    shutil.copytree(used, dest)
    for path in [*dest.glob("opd.sqlite3*"), dest / "server.json"]:
        path.unlink(missing_ok=True)
    for folder in ("jobs", "functions", "files", "uploads", "backups"):
        if folder not in keep:
            shutil.rmtree(dest / folder)
    return dest


@pytest.mark.parametrize(
    "keep, names",
    [
        (("jobs", "functions", "files", "uploads", "backups"), ["job director", "backup"]),
        (("jobs",), ["1 job directory"]),
        (("functions",), ["1 function directory"]),
        (("files", "uploads"), ["uploaded dataset", "1 function zip"]),
        (("backups",), ["backup"]),
    ],
    ids=["everything", "job dirs only", "function dirs only", "datasets and zips only", "backups only"],
)
def test_a_missing_database_beside_data_is_refused_and_nothing_is_removed(
    used_data_dir, tmp_path, keep, names
):
    """Before: the start took the data dir for a new one, removed its function directories as leftovers
    and answered an empty job list. Now: exit 2, one line with the restore line, every file untouched."""
    data = _copy_without_database(used_data_dir, tmp_path / "copy", keep)
    before = _files(data)
    refused = _serve_once(data)
    line = refused.stderr.strip()
    assert refused.returncode == 2 and len(line.splitlines()) == 1, refused.stderr
    assert f"the database {data / 'opd.sqlite3'} cannot be used: it is missing but" in line, line
    assert all(name in line for name in names) and "Traceback" not in line, line
    assert _files(data) == before and not (data / "opd.sqlite3").exists()
    if "backups" not in keep:
        assert "no backup exists" in line and "nothing here is removed" in line, line
        return
    restore = line.split("restore the newest backup: ", 1)[1].split(" (older ones", 1)[0]
    subprocess.run(["bash", "-c", restore], check=True)
    with start(port=0, data_dir=data) as server:
        jobs = httpx.get(server.api_base + "/fine-tunes", headers=H).json()["output"]["jobs"]
        assert [j["status"] for j in jobs] == ["SUCCEEDED"], jobs
    assert all(path in _files(data) for path in before), "the restored server removed nothing"


def test_a_data_dir_with_only_a_users_file_starts_and_keeps_it(tmp_path):
    """Nothing a database accounts for: a new data dir (a user's own file beside it is left alone)."""
    data = tmp_path / "data"
    (data / "notes").mkdir(parents=True)
    (data / "notes" / "plan.txt").write_text("mine")
    (data / "README.md").write_text("mine")
    with start(port=0, data_dir=data) as server:
        assert httpx.get(server.api_base + "/fine-tunes", headers=H).json()["output"]["jobs"] == []
    assert (data / "notes" / "plan.txt").read_text() == "mine" and (data / "README.md").read_text() == "mine"


def test_an_empty_database_beside_function_directories_is_refused(used_data_dir, tmp_path):
    """An emptied database with no job directory but functions, datasets or zips: refused too (it was
    refused only beside job directories)."""
    data = _copy_without_database(
        used_data_dir, tmp_path / "copy", ("functions", "files", "uploads", "backups")
    )
    (data / "opd.sqlite3").write_bytes(b"")
    refused = _serve_once(data)
    line = refused.stderr.strip()
    assert refused.returncode == 2 and "it is empty but 1 function directory" in line, line
    assert "restore the newest backup" in line


# ---- a resumed job that failed: the old worker wrote FAILED after its server's kill -9 ----------------
KILLS_ITS_SERVER = """
import os
import signal
import socket

from functions.reward.reward import RewardProcessor

KILL_AT_CALL = 25  # step 4 of 8 calls each: checkpoint-3 is saved


class KillsItsServer(RewardProcessor):
    \"\"\"Once: kill -9 the control plane, then die, so that the orphaned worker's step fails at once.\"\"\"

    async def process(self, input_data):
        fd = os.open("calls.count", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, b"x")
        os.close(fd)
        if os.path.getsize("calls.count") >= KILL_AT_CALL:
            try:
                os.close(os.open("killed.marker", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return await super().process(input_data)
            os.kill(int(os.environ["OPD_SERVER_PID"]), signal.SIGKILL)
            os._exit(1)
        return await super().process(input_data)
"""


def test_a_job_whose_server_is_killed_mid_step_resumes_even_if_its_worker_fails_first(tmp_path: Path) -> None:
    """The interleaving forced: the worker's reward call fails (its function died with the server) before
    the worker notices the kill. Before the fix it wrote FAILED, and the next server did not resume it."""
    data = tmp_path / "data"
    server = start(port=0, data_dir=data)
    reward_id = register_reward(server.api_base, tmp_path, KILLS_ITS_SERVER, "KillsItsServer")
    job_id = _submit(server.api_base, reward_id=reward_id, n_epochs=2)
    server.process.wait(300)  # the reward kills it at step 4 (a loaded machine: minutes)
    assert server.process.returncode == -signal.SIGKILL
    time.sleep(2.0)  # the orphaned worker has settled whatever it settles

    with start(port=0, data_dir=data) as again:
        job = _ended(again.api_base, job_id)
        logs = job_logs(again.api_base, job_id)
        assert job["status"] == "SUCCEEDED", "\n".join([job.get("message", ""), *logs[-40:]])
        assert any("resumed from checkpoint-" in line for line in logs), logs[-30:]
        assert any("control plane that started this worker is gone" in line for line in logs), logs[-40:]


# ---- cancel ends a job whose worker is gone ----------------------------------------------------------
def _resumed_one(api: str, jobs: list[str]) -> str | None:
    """Once one of ``jobs`` has a worker again after the restart: the other one (still waiting)."""
    resumed = [j for j in jobs if any("after a server restart (worker pid" in ln for ln in job_logs(api, j))]
    return next(j for j in jobs if j not in resumed) if len(resumed) == 1 else None


def test_cancel_ends_a_running_job_that_has_no_worker(tmp_path: Path) -> None:
    """Two jobs RUNNING at a kill -9, one slot after the restart: the second waits with no worker.
    Before the fix a cancel of it did nothing until the first job ended (here: never)."""
    data = tmp_path / "data"
    server = start(port=0, data_dir=data, max_running=2)
    long_jobs = [_submit(server.api_base, n_epochs=50, save_steps=100) for _ in range(2)]
    for job_id in long_jobs:
        wait_until(
            lambda j=job_id: job_view(server.api_base, j).get("progress"), 120, f"{job_id} to make progress"
        )
    server.kill()
    with start(port=0, data_dir=data, max_running=1) as again:
        api = again.api_base
        waiting = wait_until(
            lambda: _resumed_one(api, long_jobs),
            30,
            "one job to resume and the other to wait",
        )
        assert job_view(api, waiting)["status"] == "RUNNING"
        asked = httpx.post(f"{api}/fine-tunes/{waiting}/cancel", headers=H).json()["output"]
        assert asked["status"] == "CANCELED", (asked, job_logs(api, waiting)[-5:])
        assert job_view(api, waiting)["status"] == "CANCELED"
        other = next(j for j in long_jobs if j != waiting)
        httpx.post(f"{api}/fine-tunes/{other}/cancel", headers=H)
        assert _ended(api, other, timeout=30)["status"] == "CANCELED"


# ---- a full disk ------------------------------------------------------------------------------------
FILLS_THE_DISK = """
import os
import sys

from functions.reward.reward import RewardProcessor


class FillsTheDisk(RewardProcessor):
    \"\"\"Prints 1 MB per call (its log is capped) and writes 2 MB more to a file beside its code.\"\"\"

    async def process(self, input_data):
        sys.stdout.write("x" * 2**20 + "\\n")
        sys.stdout.flush()
        with open(f"fill-{os.getpid()}-{os.urandom(4).hex()}.bin", "wb") as fh:
            fh.write(os.urandom(2 * 2**20))
        return await super().process(input_data)
"""
DISK_MB = 48
LOG_CAP = 2 * 2**20


def _fill(path: Path) -> None:
    """Write ``path`` until the disk under it is full."""
    with contextlib.suppress(OSError), open(path, "wb") as fh:
        while True:
            fh.write(b"\0" * 2**20)
            fh.flush()


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_MB MiB (root and `mount -t tmpfs` needed: CI runs as root; a skip fails under CI)."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip() or 'mount failed'}); run as root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_fails_the_job_with_the_reason_and_keeps_earlier_jobs(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPD_MAX_LOG_BYTES", str(LOG_CAP))
    data = small_disk / "data"
    with start(port=0, data_dir=data) as server:
        api = server.api_base
        earlier = _submit(api, rows=8)
        assert _ended(api, earlier)["status"] == "SUCCEEDED"
        before = (_metrics(api, earlier), _checkpoints(api, earlier))
        assert before[0] and before[1]

        reward_id = register_reward(api, tmp_path, FILLS_THE_DISK, "FillsTheDisk")
        chatty = _submit(api, rows=8, reward_id=reward_id, n_epochs=20, save_steps=100)
        job = _ended(api, chatty, timeout=180)
        logs = job_logs(api, chatty)
        assert job["status"] == "FAILED" and job["code"] == "InsufficientStorage", "\n".join(
            [job["message"], *logs[-30:]]
        )
        assert "no space left on device" in job["message"] and str(data) in job["message"], job["message"]
        assert "Free space" in job["message"] and any("no space left" in ln for ln in logs)

        log = data / "jobs" / chatty / "functions" / f"{reward_id}.log"
        # cut at each write: the cap plus one 1 MiB print at most
        assert log.stat().st_size < LOG_CAP + 2 * 2**20, log.stat().st_size
        assert "[opd] log cut" in log.read_text(errors="replace")

        _fill(data / "filler.bin")  # whatever the job's end freed (its reserve, a cut log), used up again
        big = {"files": ("big.jsonl", b'{"messages": []}\n' * (8 * 2**20 // 17))}
        full = httpx.post(api + "/files", headers=H, files=big, timeout=60)
        assert full.status_code == 507 and full.json()["code"] == "InsufficientStorage", full.text
        assert "no space left on device" in full.json()["message"]

        assert job_view(api, earlier)["status"] == "SUCCEEDED"  # earlier jobs stay intact
        assert (_metrics(api, earlier), _checkpoints(api, earlier)) == before
        for filler in [data / "filler.bin", *(data / "functions" / reward_id / "code").glob("fill-*.bin")]:
            filler.unlink()
        assert httpx.post(api + "/files", headers=H, files=big, timeout=60).status_code == 200


# ---- memory: uploads stream to disk, and only a few run at once -------------------------------------
UPLOAD_MB = 64


def test_a_large_upload_streams_to_disk_in_bounded_memory(tmp_path: Path) -> None:
    import threading

    import psutil

    row = json.dumps({"messages": [{"role": "user", "content": "x" * 900}]}).encode() + b"\n"
    body = row * (UPLOAD_MB * 2**20 // len(row))
    with start(port=0, data_dir=tmp_path / "data") as server:
        proc = psutil.Process(server.pid)
        httpx.get(server.api_base + "/files", headers=H)  # warm: imports and the thread pool exist
        base = proc.memory_info().rss
        peak, done = [base], threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak.append(proc.memory_info().rss)
                time.sleep(0.01)

        watcher = threading.Thread(target=sample)
        watcher.start()
        try:
            resp = httpx.post(
                server.api_base + "/files", headers=H, files={"files": ("big.jsonl", body)}, timeout=120
            )
        finally:
            done.set()
            watcher.join()
        assert resp.status_code == 200, resp.text
        stored = resp.json()["data"]["uploaded_files"][0]
        assert stored["bytes"] == len(body) and stored["lines"] == body.count(b"\n")
        grew = (max(peak) - base) / 2**20
        assert grew < UPLOAD_MB / 2, f"the server grew {grew:.0f} MiB for a {UPLOAD_MB} MiB upload"


def _stalled_upload(port: int) -> socket.socket:
    """A multipart POST /files whose body stops after its first bytes (the connection stays open). Its Host
    names the server's address and port, as every HTTP client sends it (the server refuses any other)."""
    sock = socket.create_connection(("127.0.0.1", port))
    head = (
        f"POST /api/v1/files HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer faults-test\r\n"
        "Content-Type: multipart/form-data; boundary=BOUNDARY\r\nContent-Length: 1000000\r\n\r\n"
        '--BOUNDARY\r\nContent-Disposition: form-data; name="files"; filename="a.jsonl"\r\n\r\n{"a": 1}\n'
    )
    sock.sendall(head.encode())
    return sock


def test_concurrent_uploads_past_the_limit_get_a_clear_429(tmp_path: Path) -> None:
    from opd_nb.server.limits import MAX_CONCURRENT_UPLOADS

    rows = {"files": ("t.jsonl", b'{"messages": []}\n')}
    with start(port=0, data_dir=tmp_path / "data") as server:
        stalled = [_stalled_upload(server.port) for _ in range(MAX_CONCURRENT_UPLOADS)]
        try:
            refused = wait_until(
                lambda: (
                    (r := httpx.post(server.api_base + "/files", headers=H, files=rows)).status_code == 429
                    and r
                ),
                10,
                "an upload past the limit to be refused",
            )
            assert refused.json()["code"] == "TooManyUploads" and refused.headers["retry-after"]
            assert f"{MAX_CONCURRENT_UPLOADS} uploads are already in progress" in refused.json()["message"]
        finally:
            for sock in stalled:
                sock.close()
        wait_until(
            lambda: httpx.post(server.api_base + "/files", headers=H, files=rows).status_code == 200,
            10,
            "uploads to be taken again once the stalled ones are gone",
        )


# ---- a killed deployment is restarted once ---------------------------------------------------------
def _deployment(api: str, name: str) -> dict:
    return httpx.get(f"{api}/deployments/{name}", headers=H).json()["output"]


def test_a_killed_deployment_is_restarted_once_then_fails_with_the_reason(tmp_path: Path) -> None:
    with start(port=0, data_dir=tmp_path / "data") as server:
        api = server.api_base
        made = httpx.post(api + "/deployments", headers=H, json={"model_name": "qwen3-8b", "capacity": 1})
        assert made.status_code == 200, made.text
        name = made.json()["output"]["deployed_model"]
        wait_until(lambda: _deployment(api, name)["status"] == "RUNNING", 120, "the deployment to run")
        store = Store(tmp_path / "data")

        first = store.deployment(name)["pid"]
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: (store.deployment(name)["pid"] or first) != first, 20, "a restart")
        back = wait_until(
            lambda: (d := _deployment(api, name))["status"] == "RUNNING" and d, 120, "it to run again"
        )
        events = [e["event"] for e in back["local"]["events"]]
        assert events == ["restarting", "restarted"], back["local"]["events"]
        assert "code -9" in back["local"]["events"][0]["message"]
        chat = {"model": name, "messages": [{"role": "user", "content": "123"}], "max_tokens": 4}
        assert (
            httpx.post(
                server.base_url + "/compatible-mode/v1/chat/completions", headers=H, json=chat, timeout=60
            ).status_code
            == 200
        )

        os.kill(store.deployment(name)["pid"], signal.SIGKILL)  # a second death: no second restart
        failed = wait_until(
            lambda: (d := _deployment(api, name))["status"] == "FAILED" and d, 20, "it to fail"
        )
        assert "restarted 1 time(s) already" in failed["local"]["message"], failed
        assert [e["event"] for e in failed["local"]["events"]][-1] == "failed"
        call = httpx.post(
            server.base_url + "/compatible-mode/v1/chat/completions", headers=H, json=chat, timeout=60
        )
        assert call.status_code == 400 and call.json()["error"]["code"] == "DeploymentFailed", call.text


# ---- checkpoints removed by retention are not listed -----------------------------------------------
def test_checkpoints_removed_by_save_total_limit_are_gone_from_the_list(local_server) -> None:
    data = Path(local_server.data_dir)  # the session's: any server will do
    api = local_server.api_base
    job_id = _submit(api, rows=16, save_total_limit=2)
    assert _ended(api, job_id)["status"] == "SUCCEEDED"
    out = httpx.get(f"{api}/fine-tunes/{job_id}/checkpoints", headers=H).json()["output"]
    listing = out["checkpoints"] if isinstance(out, dict) else out
    on_disk = sorted(p.name for p in (data / "jobs" / job_id / "output" / "checkpoints").iterdir())
    assert on_disk == ["checkpoint-3", "checkpoint-4"], on_disk
    assert {c["checkpoint"] for c in listing if not c["local"]["published"]} == set(on_disk)
    assert all(Path(c["local"]["path"]).is_dir() for c in listing)
    gone = httpx.get(f"{api}/fine-tunes/{job_id}/export/checkpoint-1", headers=H)
    assert gone.status_code in (400, 404) and "checkpoint-4" in gone.json()["message"], gone.text
