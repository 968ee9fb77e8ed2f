"""A job's wall time with workers forked from the warm fork server vs a fresh ``python -m`` per job.

Starts two local control planes side by side in one run, one with the fork server and one with
``OPD_FORKSERVER=0``, and submits the same tiny job to each in turn (`--jobs` rounds, alternating
which goes first). It times each job from submit to SUCCEEDED and prints the per-round times, the
medians over rounds 2.. (the first fork-server job also pays the fork server's own start), and
``ratio_forked_vs_fresh=X`` (target <= 0.5 on two cores: a tiny job is mostly its imports).

    python bench/forkserver.py [--jobs 4] [--epochs 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

H = {"Authorization": "Bearer local"}
HP = {"n_epochs": 1, "batch_size": 4, "n_rollouts": 2, "ppo_mini_batch_size": 8, "max_prompt_length": 40}


def _upload(api: str, rows: list[dict]) -> str:
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    up = httpx.post(api + "/files", headers=H, files={"files": ("t.jsonl", body)}, timeout=60).json()
    return up["data"]["uploaded_files"][0]["file_id"]


def one_job(api: str, file_id: str, epochs: int) -> float:
    job = {
        "model": "qwen3-8b",
        "teacher_model": "qwen3-max",
        "training_type": "pg_opd",
        "training_datasets": [{"type": "training", "file_id": file_id}],
        "hyper_parameters": {**HP, "n_epochs": epochs},
    }
    t0 = time.perf_counter()
    job_id = httpx.post(api + "/fine-tunes", headers=H, json=job, timeout=60).json()["output"]["job_id"]
    while True:
        status = httpx.get(f"{api}/fine-tunes/{job_id}", headers=H, timeout=60).json()["output"]["status"]
        if status not in ("PENDING", "RUNNING"):
            break
        time.sleep(0.1)
    if status != "SUCCEEDED":
        raise SystemExit(f"job {job_id} ended {status}")
    return time.perf_counter() - t0


def _server(data_dir: Path, forked: bool):  # noqa: ANN202
    from opd_nb.server import start

    os.environ["OPD_FORKSERVER"] = "1" if forked else "0"  # read by the server process at its start
    try:
        return start(port=0, data_dir=data_dir)
    finally:
        os.environ.pop("OPD_FORKSERVER", None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=1)
    args = ap.parse_args()
    from opd_nb.engine.task import make_rows

    with tempfile.TemporaryDirectory() as tmp:
        servers = {
            "forked": _server(Path(tmp) / "forked", True),
            "fresh": _server(Path(tmp) / "fresh", False),
        }
        try:
            files = {name: _upload(s.api_base, make_rows(16, seed=3)) for name, s in servers.items()}
            times: dict[str, list[float]] = {"forked": [], "fresh": []}
            for round_no in range(args.jobs):
                order = ["forked", "fresh"] if round_no % 2 == 0 else ["fresh", "forked"]
                for name in order:
                    times[name].append(one_job(servers[name].api_base, files[name], args.epochs))
                print(f"round {round_no + 1}: " + ", ".join(f"{n} {times[n][-1]:.2f}s" for n in times))
        finally:
            for server in servers.values():
                server.stop()
    later = {name: statistics.median(t[1:] or t) for name, t in times.items()}
    print(f"median job (rounds 2..): forked {later['forked']:.2f}s, fresh {later['fresh']:.2f}s")
    print(
        f"first job: forked {times['forked'][0]:.2f}s (with the fork server's start), fresh {times['fresh'][0]:.2f}s"
    )
    print(f"ratio_forked_vs_fresh={later['forked'] / later['fresh']:.2f}")


if __name__ == "__main__":
    main()
