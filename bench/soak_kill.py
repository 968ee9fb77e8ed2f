"""Soak test of crash resume: one reward job, its server SIGKILLed at random moments and restarted.

    python bench/soak_kill.py [--kills 5] [--seed 0] [--epochs 16] [--keep DIR]

It starts a server on a fresh data dir, registers the template's reward function over plain HTTP
(upload URL, signed PUT, register), submits a small reward job on the bundled tiny pair, and then
``--kills`` times: waits until the job trains again (a step past the one it resumed from), then a
random 0-8 s more, SIGKILLs the server (mid-step, mid-checkpoint, mid-evaluation: wherever it is),
checks that no process of the job survives it, notes the newest complete checkpoint on disk, and restarts the
server on the same data dir. Each restart must resume the job from that checkpoint (or an equal or
newer one). The same job also runs, never interrupted, on a second server, for comparison.

The last line is the result:
``kills=N resumed=N lost_jobs=0 lost_checkpoints=0 final_accuracy=X uninterrupted_accuracy=Y``.
``resumed`` counts the restarts after which the job resumed, ``lost_jobs`` whether the job failed
to SUCCEED, ``lost_checkpoints`` the restarts that resumed from an older checkpoint than the newest
one on disk (or found a series with repeated or missing steps). Timings on a shared CPU are noisy.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

H = {"Authorization": "Bearer soak"}
ACCURACY = "validation/accuracy"


def _wait(fn, timeout: float, what: str):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.3)
    raise SystemExit(f"soak_kill: timed out after {timeout:.0f}s waiting for {what}")


def _upload(api: str, rows: list[dict], name: str) -> str:
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    out = httpx.post(api + "/files", headers=H, files={"files": (name, body)}, timeout=60).json()
    return out["data"]["uploaded_files"][0]["file_id"]


def _register_reward(api: str, workdir: Path) -> str:
    from opd_nb.workspace.new import create

    ws = Path(create("reward", workdir / "ws").path)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path in (ws / "functions").rglob("*.py"):
            zf.write(path, path.relative_to(ws).as_posix())
    key = f"reward-soak-{time.time_ns()}"
    url = httpx.post(api + "/fine-tunes/generate/faas/upload/url", headers=H, json={"unique_key": key})
    assert httpx.put(url.json()["output"]["url"], content=buf.getvalue(), timeout=60).status_code == 200
    out = httpx.post(
        api + "/fine-tunes/create/reward",
        headers=H,
        json={"name": "functions/reward/reward.py", "unique_key": key, "func": "RewardProcessor"},
    )
    return out.json()["output"]["reward_id"]


def _submit(api: str, workdir: Path, epochs: int) -> str:
    from opd_nb.engine.task import make_rows

    job = {
        "model": "qwen3-8b",
        "teacher_model": "qwen3-max",
        "training_type": "pg_opd",
        "training_datasets": [
            {"type": "training", "file_id": _upload(api, make_rows(16, seed=5), "t.jsonl")}
        ],
        "validation_datasets": [
            {"type": "validation", "file_id": _upload(api, make_rows(8, seed=9), "v.jsonl")}
        ],
        "rewards": [{"reward_id": _register_reward(api, workdir), "name": "reward-1", "weight": 1.0}],
        "hyper_parameters": {
            "n_epochs": epochs,
            "batch_size": 4,
            "n_rollouts": 2,
            "ppo_mini_batch_size": 8,
            "max_prompt_length": 40,
            "max_length": 48,
            "eval_steps": 8,
            "save_strategy": "steps",
            "save_steps": 2,
            "save_total_limit": 2,
            "learning_rate": 1e-7,  # local 1e-4: the tiny pair keeps a non-zero accuracy to compare
        },
    }
    resp = httpx.post(api + "/fine-tunes", headers=H, json=job, timeout=60)
    resp.raise_for_status()
    return resp.json()["output"]["job_id"]


def _job(api: str, job_id: str) -> dict:
    return httpx.get(f"{api}/fine-tunes/{job_id}", headers=H, timeout=30).json()["output"]


def _logs(api: str, job_id: str) -> list[str]:
    out = httpx.get(f"{api}/fine-tunes/{job_id}/logs", headers=H, params={"line": 10000}, timeout=30)
    return out.json()["output"]["logs"]


def _metrics(api: str, job_id: str) -> list[dict]:
    return httpx.get(f"{api}/fine-tunes/{job_id}/metrics", headers=H, timeout=30).json()["output"]["metrics"]


def _finish(api: str, job_id: str, timeout: float) -> dict:
    return _wait(
        lambda: (j := _job(api, job_id))["status"] in ("SUCCEEDED", "FAILED", "CANCELED") and j,
        timeout,
        f"job {job_id} to finish",
    )


def _step(api: str, job_id: str) -> int:
    return int((_job(api, job_id).get("progress") or {}).get("step") or 0)


def _done(api: str, job_id: str) -> bool:
    return _job(api, job_id)["status"] != "RUNNING"


def _accuracy(api: str, job_id: str) -> float | None:
    values = [r[ACCURACY] for r in _metrics(api, job_id) if r.get(ACCURACY) is not None]
    return values[-1] if values else None


def _resumes(api: str, job_id: str) -> list[int]:
    """The checkpoint step of each resume in the log (0: restarted from step 0)."""
    steps = []
    for line in _logs(api, job_id):
        if "after a server restart (worker pid" in line:
            steps.append(int(line.split("checkpoint-")[1].split()[0]) if "checkpoint-" in line else 0)
    return steps


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 - one story, start to end
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=16, help="long enough to outlast the kills")
    parser.add_argument("--keep", default=None, help="work in this directory and keep it")
    args = parser.parse_args(argv)

    from opd_nb.server import process_tree, start
    from opd_nb.server.resume import latest_checkpoint, output_dir

    rng = random.Random(args.seed)
    work = Path(args.keep or tempfile.mkdtemp(prefix="opd-soak-"))
    for sub in ("b", "s"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    data_dir = work / "data"
    baseline = start(port=0, data_dir=work / "baseline")
    server = baseline
    kills = lost_checkpoints = 0
    newest_at_kill: list[int] = []
    try:
        server = start(port=0, data_dir=data_dir, max_interruptions=args.kills + 1)
        clean_id = _submit(baseline.api_base, work / "b", args.epochs)
        job_id = _submit(server.api_base, work / "s", args.epochs)
        print(f"soak_kill: job {job_id} on {server.base_url}, baseline {clean_id} on {baseline.base_url}")
        for n in range(1, args.kills + 1):
            api = server.api_base
            since = _step(api, job_id)
            _wait(lambda: _step(api, job_id) > since or _done(api, job_id), 300, "the job to train")  # noqa: B023
            time.sleep(rng.uniform(0.0, 8.0))
            if _job(api, job_id)["status"] != "RUNNING":
                print(f"soak_kill: the job finished before kill {n}; use more --epochs")
                break
            step = (_job(api, job_id).get("progress") or {}).get("step", 0)
            server.kill()
            kills += 1
            owner = process_tree.job_owner(job_id)
            _wait(lambda: not process_tree.members(data_dir, owner), 20, "the job's processes to end")  # noqa: B023
            newest = latest_checkpoint(output_dir(data_dir, job_id)).step
            newest_at_kill.append(newest)
            print(f"soak_kill: kill {n} at step {step}; newest checkpoint on disk: step {newest}")
            server = start(port=0, data_dir=data_dir, max_interruptions=args.kills + 1)
        api = server.api_base
        final = _finish(api, job_id, 1800)
        clean = _finish(baseline.api_base, clean_id, 1800)
        resumes = _resumes(api, job_id)
        for newest, resumed_from in zip(newest_at_kill, resumes, strict=False):
            if resumed_from < newest:
                lost_checkpoints += 1
        steps = [r["step"] for r in _metrics(api, job_id)]
        if steps != sorted(set(steps)) or steps[-1] != _job(api, job_id)["progress"]["total_steps"]:
            print(f"soak_kill: the metric series is not one row per step: {steps}")
            lost_checkpoints += 1
        lost_jobs = int(final["status"] != "SUCCEEDED")
        if lost_jobs:
            print("\n".join(_logs(api, job_id)[-30:]))
        acc, clean_acc = _accuracy(api, job_id), _accuracy(baseline.api_base, clean_id)
        time.sleep(0.5)
        deadline = time.monotonic() + 15
        while (left := process_tree.members(data_dir)) and time.monotonic() < deadline:
            time.sleep(0.3)  # the finished job's worker is still exiting
        print(
            f"soak_kill: resumed from steps {resumes}; baseline {clean['status']}; {len(left)} process(es) left"
        )
        print(
            f"kills={kills} resumed={len(resumes)} lost_jobs={lost_jobs} lost_checkpoints={lost_checkpoints} "
            f"final_accuracy={acc} uninterrupted_accuracy={clean_acc}"
        )
        return 0 if lost_jobs == 0 and lost_checkpoints == 0 and len(resumes) == kills else 1
    finally:
        server.stop()
        baseline.stop()


if __name__ == "__main__":
    sys.exit(main())
