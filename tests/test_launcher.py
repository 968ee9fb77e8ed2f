"""The fork server's children are what ``python -m MODULE ARGS`` would have been.

One launcher per test module (its fork server imports torch once, like a control plane's). The
child module writes what it sees (argv, environment, working directory, session, parent) to its
log, then exits with the code it was given; the jobs, deployments and reliability tests cover the
same path end to end through the control plane.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from opd_nb.server import process_tree
from opd_nb.server.launcher import FORKSERVER_OWNER, ForkedProcess, Launcher

pytestmark = pytest.mark.slow  # the fork server imports torch (7-10 s) before its first child

CHILD = """
import json, os, sys, time
print(json.dumps({
    "argv": sys.argv[1:],
    "env": dict(os.environ),
    "cwd": os.getcwd(),
    "own_session": os.getsid(0) == os.getpid(),
    "parent": os.getppid(),
    "stdout_is_log": os.path.samefile("/proc/self/fd/1", os.environ["CHILD_LOG"]),
}))
print("to stderr", file=sys.stderr)
if sys.argv[1] == "sleep":
    time.sleep(60)
sys.exit(int(sys.argv[2]))
"""


@pytest.fixture(scope="module")
def forking(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    root = tmp_path_factory.mktemp("launcher")
    (root / "opd_probe_child.py").write_text(CHILD)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(root)  # the fork server's sys.path, as a server's children get it
    launcher = Launcher(root, enabled=True)
    try:
        yield launcher, root
    finally:
        launcher.close()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _start(launcher: Launcher, root: Path, name: str, *args: str, extra: dict | None = None):  # noqa: ANN202
    log = root / f"{name}.log"
    env = process_tree.child_env(root, f"job:{name}", {"CHILD_LOG": str(log), **(extra or {})})
    return launcher.start("opd_probe_child", list(args), env=env, log=log, wait_s=120), env, log


def _seen(log: Path) -> dict:
    return json.loads(log.read_text().splitlines()[0])


def test_a_child_gets_the_request_s_argv_environment_session_log_and_exit_code(forking) -> None:
    launcher, root = forking
    proc, env, log = _start(launcher, root, "exit", "exit", "7", extra={"OPD_SERVER_PID": "1", "ONLY": "x"})
    assert isinstance(proc, ForkedProcess)
    assert proc.wait(30) == 7 and proc.returncode == 7 and proc.poll() == 7
    seen = _seen(log)
    assert seen["argv"] == ["exit", "7"]
    fork_server = process_tree.members(root, FORKSERVER_OWNER)
    assert [p.pid for p in fork_server] == [seen["parent"]]  # the fork server is its parent ...
    expected = {**env, "OPD_WATCH_PID": str(seen["parent"]), "PYTHONUNBUFFERED": "1"}
    assert seen["env"] == expected  # ... and what it watches; unbuffered, as every child of the server
    assert "PYTHONPATH" not in seen["env"]  # exactly the request's environment, not the server's
    assert seen["cwd"] == os.getcwd() and seen["own_session"] and seen["stdout_is_log"]
    assert log.read_text().splitlines()[1:] == ["to stderr"]  # stderr shares the log; no runpy warning


def test_a_running_child_carries_its_tag_in_its_title_and_a_signal_ends_it(forking) -> None:
    launcher, root = forking
    proc, _, log = _start(launcher, root, "sleep", "sleep", "0")
    deadline = time.monotonic() + 30
    while not log.exists() or not log.read_text():
        assert time.monotonic() < deadline, "the child never wrote its log"
        time.sleep(0.1)
    members = process_tree.members(root, "job:sleep")
    assert [p.pid for p in members] == [proc.pid]  # found by its title: its environ is the fork server's
    assert "opd_probe_child sleep 0" in " ".join(psutil.Process(proc.pid).cmdline())
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.3)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL
    assert not process_tree.members(root, "job:sleep")  # reaped, not a zombie


def test_without_a_fork_server_the_same_request_is_a_fresh_process(forking, tmp_path: Path) -> None:
    _, root = forking
    fresh = Launcher(tmp_path, enabled=False)
    proc, env, log = _start(fresh, root, "fresh", "exit", "3", extra={"PYTHONPATH": str(root)})
    assert isinstance(proc, subprocess.Popen)
    assert proc.wait(60) == 3
    assert _seen(log)["argv"] == ["exit", "3"] and _seen(log)["env"]["CHILD_LOG"] == str(log)


def _fork_server_after_a_child(launcher: Launcher, root: Path, name: str) -> psutil.Process:
    """The fork server, once it has run one child to its end (so it is started and answering)."""
    proc, _, _ = _start(launcher, root, name, "exit", "0")
    assert proc.wait(30) == 0
    (server,) = process_tree.members(root, FORKSERVER_OWNER)
    return server


def test_a_fork_server_that_died_is_replaced_at_the_next_start(forking) -> None:
    launcher, root = forking
    old = _fork_server_after_a_child(launcher, root, "before")
    old.kill()
    old.wait(10)
    proc, _, log = _start(launcher, root, "after", "exit", "5")
    assert proc.wait(120) == 5
    (new,) = process_tree.members(root, FORKSERVER_OWNER)
    assert new.pid != old.pid and _seen(log)["parent"] == new.pid


def test_the_fork_server_exits_when_its_server_goes(forking) -> None:
    launcher, root = forking
    server = _fork_server_after_a_child(launcher, root, "last")
    launcher.close()
    assert not psutil.pid_exists(server.pid) or server.status() == psutil.STATUS_ZOMBIE
