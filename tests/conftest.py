"""Shared fixtures and the suite's lanes.

`local_server`: one real `opd serve` (background subprocess) for the session. Markers: `slow` (trains a
model, starts a server or a CLI process of its own, or takes a second or more on the suite's workers), `browser`, `notebook` (every
tutorial cell, added here); `bash scripts/test.sh --fast` runs everything that is not slow. Under
`CI=true` a skip is a failure: scripts/test.sh installs every tool the suite uses, so a skip there
can only hide breakage.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from opd_nb.client import Job, JobClient

REPO = Path(__file__).resolve().parent.parent
# A tutorial's training cell waits for its job (`.wait(timeout_s=1800)`); pyproject's `timeout = 600`
# (pytest-timeout, per item) cut such a cell on a loaded machine while its job was healthy, so each
# cell gets the limit of the waits inside it. (Here, not in a notebooks/conftest.py: a second module
# named `conftest` would shadow this one, and tests import their helpers `from conftest`.)
NOTEBOOK_CELL_TIMEOUT_S = 1800
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_configure(config: pytest.Config) -> None:
    """The suite never reads or writes the user's own `~/.cache/opd-nb` (background server state, data
    dir): each test process (and the notebook kernels it starts) gets a cache of its own."""
    import tempfile

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="opd-tests-cache-")


@pytest.fixture(scope="session", autouse=True)
def nested_pytest_autoloads_no_plugin() -> Iterator[None]:
    """A pytest that a test starts (a workspace's own tests: `opd test`, `%opd test`, the test runner,
    the README's `pytest`) loads no plugin by entry point, as in a user's environment, where the suite's
    dev extras are not installed. Loading them (nbval, schemathesis, hypothesis) took 2.8 s of such a
    run's 3.3 s here; a workspace's tests use none. Set in the process that runs tests, never in
    `pytest_configure`: an xdist controller would hand it to its workers, which need nbval."""
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    yield
    os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tutorial cells are `notebook` and `slow`, with the tutorials' own time limit; a browser test is always `slow` too. Then the longest
    files go first, so that on xdist workers (`--dist loadfile --no-loadscope-reorder`) no long file
    starts last and leaves the other worker idle."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.notebook)
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.timeout(NOTEBOOK_CELL_TIMEOUT_S))
        elif item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.slow)
    items[:] = longest_files_first(items)


def longest_files_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """Files by their measured seconds (`tests/durations.json`, written by `scripts/file_durations.py`
    from a full run's JUnit XML), longest first; each file stays whole and in its own order. Only what
    starts first depends on it: a stale or missing figure costs balance, never a test."""
    known = json.loads((REPO / "tests" / "durations.json").read_text())
    files: dict[Path, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)

    def seconds(path: Path) -> float:
        return known.get(path.relative_to(REPO).as_posix(), 0.0) if path.is_relative_to(REPO) else 0.0

    return [it for path in sorted(files, key=lambda p: -seconds(p)) for it in files[path]]


def _skip_fails_in_ci(report: pytest.CollectReport | pytest.TestReport) -> None:
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true ({reason}): scripts/test.sh installs what this needs"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    _skip_fails_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """While a test module is imported, pytest may keep its assertion rewrite in `tests/__pycache__`
    even where PYTHONDONTWRITEBYTECODE is set (as on our machines): without it, each worker of each run
    rewrote every module again (the fast lane's collection: 15 s a worker, 7 s with the cache)."""
    kept, sys.dont_write_bytecode = sys.dont_write_bytecode, False
    outcome = yield
    sys.dont_write_bytecode = kept
    _skip_fails_in_ci(outcome.get_result())


@pytest.fixture(scope="session")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A running local control plane on a free port with its own data dir; yields the ServerHandle."""
    from opd_nb.server import start

    data_dir = tmp_path_factory.mktemp("opd-serve")
    handle = start(port=0, data_dir=data_dir)
    try:
        yield handle
    finally:
        handle.stop()


# How a workspace's own code submits through the unmodified SDK (`AgenticRL().run()`, argv[1]: a model).
SDK_SUBMIT = r"""
import asyncio, sys
from dashscope.finetune.agentic_rl import AgenticRL
kw = {"model": sys.argv[1]} if len(sys.argv) > 1 else {}
res = asyncio.run(AgenticRL().init(config_path="config.yaml").run(**kw))
assert res.status_code == 200, (res.status_code, res.code, res.message)
print("JOB", res.output.job_id, res.output.status, res.output.training_type)
"""
MARKUP_PROMPT = "[b]31[/b]"  # a validation prompt in rich markup: a terminal view must print it as text
SHARED_VAL_ROWS = 16  # the reward job's template validation rows; the markup row comes after them


@dataclass(frozen=True)
class FinishedJob:
    """A template workspace and the job the SDK ran from it on the session's `opd serve`, to the end."""

    workspace: Path
    job: object  # opd_nb.client.Job

    @property
    def job_id(self) -> str:
        return self.job.job_id  # type: ignore[attr-defined]


def _shared_workspace(mode: str, root: Path) -> Path:
    """The tiny template job of `mode`; the reward job evaluates after every step on 16 rows + a markup row."""
    if mode != "reward":
        return tiny_workspace(mode, root / mode)
    ws = tiny_workspace(mode, root / mode, val_rows=SHARED_VAL_ROWS, eval_steps=1)
    row = {
        "messages": [
            {"role": "system", "content": "Sort the digits."},
            {"role": "user", "content": MARKUP_PROMPT},
        ],
        "rollout_extra": {"solution": "13"},
    }
    with (ws / "data" / "validation.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    return ws


@pytest.fixture(scope="session")
def finished_job(
    local_server: object, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], FinishedJob]:
    """`finished_job(mode)`: one finished job per mode (pure-distill, reward, agentic) for the session.

    Trained once, on first use, by the workspace's SDK call, and shared by every test that only reads a
    finished job (SDK calls, rollouts, eval, checkpoints, client parity). A test that changes a job, or
    watches one run, submits its own."""
    from opd_nb.client import JobClient, resolve_target

    client = JobClient(resolve_target("local", base_url=local_server.api_base))  # type: ignore[attr-defined]
    root = tmp_path_factory.mktemp("shared-jobs")
    done: dict[str, FinishedJob] = {}

    def get(mode: str) -> FinishedJob:
        if mode not in done:
            ws = _shared_workspace(mode, root)
            proc = run_sdk(local_server, SDK_SUBMIT, ws)
            assert proc.returncode == 0, proc.stderr[-3000:]
            job_id = next(ln for ln in proc.stdout.splitlines() if ln.startswith("JOB ")).split()[1]
            job = wait_status(client, job_id, {"SUCCEEDED", "FAILED", "CANCELED"}, timeout=400)
            tail = "\n".join(client.logs(job_id, lines=10000).lines[-30:])
            assert job.status == "SUCCEEDED", f"shared {mode} job {job_id}: {job.message}\n{tail}"
            done[mode] = FinishedJob(ws, job)
        return done[mode]

    return get


@pytest.fixture()
def api(local_server: object) -> object:
    """An httpx client for the local server's /api/v1 with a Bearer set."""
    import httpx

    with httpx.Client(
        base_url=local_server.api_base, headers={"Authorization": "Bearer test"}, timeout=60
    ) as c:
        yield c


def sdk_env(server: object, **extra: str) -> dict[str, str]:
    """A clean environment for running the unmodified SDK: only the two variables it needs (+ basics)."""
    keep = {
        k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    }
    keep.update(server.env())  # type: ignore[attr-defined]
    keep["NO_PROXY"] = "127.0.0.1,localhost"
    keep.update(extra)
    return keep


def run_sdk(
    server: object, code: str, cwd: Path | str, *args: str, timeout: float = 300, **env: str
) -> subprocess.CompletedProcess:
    """Run Python `code` (with `args` as sys.argv[1:]) in a subprocess with only the SDK's env vars set."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=sdk_env(server, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


TINY_HP = {
    "n_epochs": 1,
    "batch_size": 8,
    "n_rollouts": 2,
    "ppo_mini_batch_size": 16,
    "eval_steps": 2,
    "save_strategy": "steps",
    "save_steps": 2,
    "max_prompt_length": 40,
    "max_length": 64,
}


def stop_jobs(
    client: JobClient,
    job_ids: Iterable[str] | None = None,
    *,
    where: Callable[[Job], bool] = lambda job: True,
) -> None:
    """Cleanup: cancel the jobs a test left running, so that they hold no worker for other tests (`job_ids`
    None: every listed job that has not ended and passes `where`). One that ended meanwhile (the server
    answers 400 JobFinished) needs nothing: that race is not the test's failure."""
    from opd_nb.errors import OpdError

    if job_ids is None:
        job_ids = [job.job_id for job in client.list(size=100).jobs if not job.terminal and where(job)]
    for job_id in job_ids:
        try:
            client.cancel(job_id)
        except OpdError as exc:
            if exc.code != "JobFinished":
                raise


def tiny_workspace(mode: str, dest: Path, *, train_rows: int = 16, val_rows: int = 8, **hp: object) -> Path:
    """A template workspace shrunk to a job that trains in seconds on a CPU (config stays SDK-valid)."""
    from opd_nb.workspace.new import create

    return shrink_workspace(
        Path(create(mode, dest).path), mode, train_rows=train_rows, val_rows=val_rows, **hp
    )


def shrink_workspace(path: Path, mode: str, *, train_rows: int = 16, val_rows: int = 8, **hp: object) -> Path:
    """Keep the first rows of the workspace's data and set TINY_HP (plus `hp`) in its config.yaml."""
    import yaml

    for name, n in (("train.jsonl", train_rows), ("validation.jsonl", val_rows)):
        data = path / "data" / name
        data.write_text("".join(data.read_text().splitlines(keepends=True)[:n]))
    cfg = yaml.safe_load((path / "config.yaml").read_text())
    tiny = dict(TINY_HP)
    if mode == "agentic":  # tool-using rows: keep the template's lengths (tools line, call, result, answer)
        tiny.pop("max_prompt_length")
        tiny.pop("max_length")
    cfg["training"]["hyper_parameters"].update({**tiny, **hp})
    (path / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def wait_status(client: object, job_id: str, statuses: set[str], timeout: float = 240) -> object:
    """Poll until the job is in one of `statuses` (fails the test on timeout, showing the log tail)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(job_id)  # type: ignore[attr-defined]
        if job.status in statuses:
            return job
        time.sleep(0.5)
    tail = client.logs(job_id, lines=10000).lines[-30:]  # type: ignore[attr-defined]
    raise AssertionError(f"job {job_id} still {job.status} after {timeout}s:\n" + "\n".join(tail))


# What `opd demo` narrates after scaffolding its workspace, in order (both modes).
DEMO_STAGES = [
    "Start a local control plane",
    "Preflight checks",
    "The workspace's own tests",
    "submit_job.py --local",
    "Watch job",
    "Metrics",
    "Done",
]


def assert_stages_in_order(text: str, stages: list[str]) -> None:
    """Every stage heading appears in `text`, in this order (the demo narrates each stage it runs)."""
    positions = [text.find(s) for s in stages]
    assert all(p >= 0 for p in positions), [s for s, p in zip(stages, positions, strict=True) if p < 0]
    assert positions == sorted(positions), "stages out of order"
