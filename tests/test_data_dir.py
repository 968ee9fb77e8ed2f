"""The data dir's records on disk (issue 48): the start-up sweep obeys the records over the journal of
interrupted writes, and a data dir moved, copied or restored keeps what its rows name (paths are
stored relative to it, and an older server's absolute rows are migrated at start)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import httpx
import pytest
from server_http import H, job_logs, job_view, register_reward, wait_until

from opd_nb.engine.task import make_rows
from opd_nb.server import start
from opd_nb.server.db_safety import DB_FILE
from opd_nb.server.leftovers import reap_partial_files
from opd_nb.server.store import PATH_COLUMNS, Store
from opd_nb.server.store.paths import DataPaths, map_path_keys

TINY = {"n_epochs": 1, "batch_size": 4, "n_rollouts": 2, "ppo_mini_batch_size": 8, "max_prompt_length": 40,
        "max_length": 48, "eval_steps": 100, "save_strategy": "steps", "save_steps": 1}  # fmt: skip


# ---- the one path rule (no server) --------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("{dd}/jobs/ft-1/output/checkpoints/checkpoint-1", "jobs/ft-1/output/checkpoints/checkpoint-1"),
        ("{dd}/files/file-ft-1/t.jsonl", "files/file-ft-1/t.jsonl"),
        ("{dd}/functions/rw-1/code", "functions/rw-1/code"),
        ("{dd}/uploads/rw.zip", "uploads/rw.zip"),
        ("{dd}/deployments/d/model", "deployments/d/model"),
        ("/opt/models/qwen", "/opt/models/qwen"),  # outside the data dir: absolute
        ("{dd}/server.log", "{dd}/server.log"),  # not in a data folder
    ],
)
def test_paths_under_the_data_dir_are_stored_relative_and_read_back_absolute(
    tmp_path: Path, given: str, stored: str
) -> None:
    paths = DataPaths(tmp_path)
    text = paths.stored(given.format(dd=tmp_path))
    assert text == stored.format(dd=tmp_path)
    assert paths.absolute(text) == given.format(dd=tmp_path)


@pytest.mark.parametrize("model_id", ["Qwen/Qwen3-8B", "opd-local/ft-1", "qwen3-8b"])
def test_a_model_id_is_never_read_as_a_data_dir_path(tmp_path: Path, model_id: str) -> None:
    assert DataPaths(tmp_path).absolute(model_id) == model_id


def test_an_older_servers_absolute_rows_migrate_from_wherever_the_data_dir_was(tmp_path: Path) -> None:
    """`mv /a/jobs-data /b/dd`: the old path's data-dir tail is found under the new place, even when a
    folder above the old data dir has a data folder's name."""
    dd = tmp_path / "dd"
    (dd / "jobs" / "ft-1" / "output" / "final").mkdir(parents=True)
    (dd / "files" / "file-1").mkdir(parents=True)
    paths = DataPaths(dd)
    for old in ("/srv/jobs/old-dd", "/home/u/dd", "/files"):
        assert paths.migrated(f"{old}/jobs/ft-1/output/final") == "jobs/ft-1/output/final"
        assert paths.migrated(f"{old}/files/file-1") == "files/file-1"
    assert paths.migrated("/home/u/dd/jobs/ft-gone/output") == "/home/u/dd/jobs/ft-gone/output"  # not here
    assert paths.migrated("jobs/ft-1/output/final") == "jobs/ft-1/output/final"  # already relative
    meta = {"student_path": "/x/dd/jobs/ft-1/output/final", "teacher_path": "/opt/t",
            "functions": [{"code_dir": "/x/dd/files/file-1"}], "resume": {"resume_from": None}}  # fmt: skip
    assert map_path_keys(meta, paths.migrated) == {
        "student_path": "jobs/ft-1/output/final",
        "teacher_path": "/opt/t",
        "functions": [{"code_dir": "files/file-1"}],
        "resume": {"resume_from": None},
    }


# ---- the journal against the records (no server) ----------------------------------------------
def test_the_sweep_keeps_every_journaled_path_a_record_holds(tmp_path: Path) -> None:
    held = {
        tmp_path / "files" / "file-ft-a" / "t.jsonl": "file file-ft-a",
        tmp_path / "functions" / "rw-a" / "code": "function rw-a",
        tmp_path / "uploads" / "rw.zip": "the upload rw",
    }
    journal = {  # the path a row names, a folder around it, a file inside it, the path of an orphan
        "files/file-ft-a": "kept",
        "files/file-ft-a/t.jsonl": "kept",
        "functions/rw-a": "kept",
        "functions/rw-a/code/r.py": "kept",
        "uploads/rw.zip": "kept",
        "uploads/rw.zip.part-1a2b": "removed",
        "functions/rw-orphan": "removed",
        "files/.tmp-file-ft-b-1a2b": "removed",
    }
    for path in [*held, *(tmp_path / rel for rel in journal)]:
        target = path / "x" if path.suffix == "" else path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.write_text("x")
    reaped = reap_partial_files(tmp_path, sorted(journal), held)
    assert sorted(reaped.removed) == sorted(tmp_path / r for r, w in journal.items() if w == "removed")
    assert sorted(p for p, _ in reaped.kept) == sorted(
        tmp_path / r for r, w in journal.items() if w == "kept"
    )
    for path, why in reaped.kept:
        assert path.exists() and " names " in why, (path, why)


# ---- against a real server ----------------------------------------------------------------------
def _upload(api: str, rows: int = 8) -> str:
    body = "".join(json.dumps(r) + "\n" for r in make_rows(rows, seed=3)).encode()
    resp = httpx.post(api + "/files", headers=H, files={"files": ("t.jsonl", body)}, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]["uploaded_files"][0]["file_id"]


def _run_job(api: str, file_id: str, reward_id: str | None = None) -> dict:
    job = {
        "model": "qwen3-8b",
        "teacher_model": "qwen3-max",
        "training_type": "pg_opd",
        "training_datasets": [{"type": "training", "file_id": file_id}],
        "hyper_parameters": TINY,
    }
    if reward_id:
        job["rewards"] = [{"reward_id": reward_id, "name": "reward-1", "weight": 1.0}]
    resp = httpx.post(api + "/fine-tunes", headers=H, json=job)
    assert resp.status_code == 200, resp.text
    job_id = resp.json()["output"]["job_id"]
    return wait_until(
        lambda: (j := job_view(api, job_id))["status"] in ("SUCCEEDED", "FAILED", "CANCELED") and j,
        180,
        f"job {job_id} to end",
    )


@pytest.mark.slow
def test_journal_rows_naming_live_records_are_kept_and_said(tmp_path: Path) -> None:
    """Before: start-up deleted a live dataset and a live function's code because a journal row named
    them; `GET /files/<id>` then answered 200 with nothing behind it and the next job reusing the
    function FAILED. Now only the orphan goes; the others are kept, said, and still work."""
    data = tmp_path / "data"
    with start(port=0, data_dir=data) as server:
        api = server.api_base
        file_id = _upload(api)
        reward_id = register_reward(api, tmp_path)
    journal = Store(data)
    live = [data / "files" / file_id, data / "functions" / reward_id, data / "functions" / reward_id / "code"]
    orphan = data / "functions" / "rw-orphan0000"
    (orphan / "code").mkdir(parents=True)
    journal.begin_write(*live, orphan)
    with start(port=0, data_dir=data) as server:
        api = server.api_base
        assert not orphan.exists()
        assert (data / "files" / file_id / "t.jsonl").is_file()
        assert httpx.get(f"{api}/files/{file_id}", headers=H).status_code == 200
        done = _run_job(api, file_id, reward_id)
        assert done["status"] == "SUCCEEDED", job_logs(api, done["job_id"])[-20:]
        assert Store(data).unfinished_writes() == []
    lines = (data / "server.log").read_text().splitlines()
    kept = [line for line in lines if line.startswith("opd serve: kept ")]
    assert len(kept) == len(live), kept
    assert any(f"file {file_id} names" in line for line in kept), kept
    assert any(f"function {reward_id} names" in line for line in kept), kept
    assert f"opd serve: removed {orphan}, left by an interrupted write of an earlier run" in lines


def _checkpoint_paths(api: str, job_id: str) -> dict[str, str]:
    out = httpx.get(f"{api}/fine-tunes/{job_id}/checkpoints", headers=H).json()["output"]
    entries = out["checkpoints"] if isinstance(out, dict) else out
    return {e["checkpoint"]: (e.get("local") or {}).get("path", "") for e in entries}


def _make_rows_absolute(data: Path) -> None:
    """What a server before issue 48 wrote: every path absolute, under the data dir's place then."""
    paths = DataPaths(data)
    db = sqlite3.connect(data / DB_FILE)
    with db:
        for table, col in PATH_COLUMNS:
            for rowid, text in db.execute(
                f"SELECT rowid, {col} FROM {table} WHERE {col} IS NOT NULL"
            ).fetchall():
                db.execute(f"UPDATE {table} SET {col} = ? WHERE rowid = ?", (paths.absolute(text), rowid))
        for rowid, text in db.execute("SELECT rowid, meta FROM jobs").fetchall():
            meta = map_path_keys(json.loads(text), paths.absolute)
            db.execute("UPDATE jobs SET meta = ? WHERE rowid = ?", (json.dumps(meta), rowid))
    db.close()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["moved", "copied"])
def test_a_moved_or_copied_data_dir_keeps_its_exported_checkpoints(tmp_path: Path, how: str) -> None:
    """Before: after `mv dd dd-moved` the list showed only `final` at the old path, DELETE kept nothing
    and freed the export, and deploying the export was a 404. The rows here are first made absolute,
    as an older server wrote them, so the start-up migration is what is tested."""
    data = tmp_path / "dd"
    with start(port=0, data_dir=data) as server:
        api = server.api_base
        done = _run_job(api, _upload(api))
        job_id = done["job_id"]
        assert done["status"] == "SUCCEEDED", job_logs(api, job_id)[-20:]
        export = httpx.get(f"{api}/fine-tunes/{job_id}/export/checkpoint-1", headers=H)
        assert export.status_code == 200, export.text
        before = _checkpoint_paths(api, job_id)
    _make_rows_absolute(data)
    moved = tmp_path / "dd-moved"
    (shutil.move if how == "moved" else shutil.copytree)(data, moved)
    if how == "copied":
        shutil.rmtree(data)  # the original is gone: nothing may still point into it
    with start(port=0, data_dir=moved) as server:
        api = server.api_base
        after = _checkpoint_paths(api, job_id)
        assert after.keys() == before.keys() and "checkpoint-1" in after, (before, after)
        assert all(p.startswith(str(moved.resolve())) or p.startswith(str(moved)) for p in after.values()), (
            after
        )
        model = export.json()["local"]["checkpoint"]["model_name"]
        deployed = httpx.post(f"{api}/deployments", headers=H, json={"model_name": model, "capacity": 1})
        assert deployed.status_code == 200, deployed.text
        name = deployed.json()["output"]["deployed_model"]
        wait_until(
            lambda: httpx.get(f"{api}/deployments/{name}", headers=H).json()["output"]["status"] == "RUNNING",
            120,
            "the export's deployment to run",
        )
        assert httpx.delete(f"{api}/deployments/{name}", headers=H).status_code == 200
        kept = httpx.delete(f"{api}/fine-tunes/{job_id}", headers=H).json()["local"]["kept"]
        checkpoint = moved / "jobs" / job_id / "output" / "checkpoints" / "checkpoint-1"
        assert [k["path"] for k in kept] == [str(checkpoint.resolve())], kept
        assert checkpoint.is_dir()
    text = (moved / "server.log").read_text()
    assert "database rows now name their files relative to the data dir" in text
