"""The background-server lifecycle: typed start results, one record per data dir, stop and status."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from opd_nb.server import (
    ServerInfo,
    StartFailed,
    StartLaunched,
    StartReused,
    StartTimedOut,
    read_state,
    running_server,
    server_status,
    start_background,
    state_file,
    stop_background,
)


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated $XDG_CACHE_HOME, so the state file is ours alone."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("OPD_DATA_DIR", raising=False)
    return tmp_path / "cache"


@pytest.mark.slow
def test_start_twice_reuses_the_server_for_its_data_dir_then_stop(cache: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start_background(port=0, data_dir=data)
    try:
        assert isinstance(first, StartLaunched), first
        info = first.info
        assert info.port != 0 and info.api_base == f"http://127.0.0.1:{info.port}/api/v1"
        assert Path(info.data_dir) == data.resolve()
        assert state_file(data).parent.parent.parent == cache and read_state(data) == info
        recorded = json.loads(state_file(data).read_text())
        assert recorded["pid"] == info.pid and "servers" not in recorded  # one record per data dir
        reply = httpx.get(
            info.api_base + "/fine-tunes", headers={"Authorization": "Bearer k"}, trust_env=False
        )
        assert reply.status_code == 200

        second = start_background(port=0, data_dir=data)
        assert isinstance(second, StartReused) and second.info.pid == info.pid
        assert running_server() == info == running_server(data)
        assert server_status(data).running and server_status(data).recorded == info
    finally:
        stopped = stop_background(data_dir=data)
    assert [s.pid for s in stopped] == [info.pid]
    status = server_status(data)
    assert not status.running and status.recorded is None
    assert running_server() is None and not state_file(data).exists()
    assert stop_background(data_dir=data) == []  # nothing left to stop


@pytest.mark.slow
def test_a_stop_says_what_it_stopped_and_a_second_says_nothing_was_running(
    cache: Path, tmp_path: Path
) -> None:
    """`opd serve stop` (the CLI, `%opd serve stop` and the agent's tool share `stop_info`): the first
    says which server it stopped, not "not running"; the second that there was nothing to stop."""
    from opd_nb.server.serve_info import stop_info

    data = tmp_path / "data"
    started = start_background(port=0, data_dir=data)
    assert isinstance(started, StartLaunched), started
    first = stop_info(str(data))
    assert str(first).startswith(f"opd serve: stopped the server at {started.info.base_url}"), str(first)
    assert "not running" not in str(first) + first._repr_html_()
    again = stop_info(str(data))
    assert str(again).startswith("opd serve: not running; nothing to stop"), str(again)


@pytest.mark.slow
def test_two_notebooks_with_two_data_dirs_get_two_servers_and_each_stops_its_own(
    cache: Path, tmp_path: Path
) -> None:
    """`%opd serve start --data-dir B` beside a server on A starts B's (A keeps the default port, B takes a
    free one), and a kernel stops only what it started: another kernel's stop leaves A running."""
    from opd_nb.constants import LOCAL_PORT
    from opd_nb.server import lifecycle

    a, b = tmp_path / "A", tmp_path / "B"
    port_a = _free_port()
    first = start_background(port=port_a, data_dir=a)
    assert isinstance(first, StartLaunched), first
    lifecycle._STARTED_HERE.clear()  # the first notebook's kernel is another process
    try:
        with _holding(LOCAL_PORT):  # the default port is someone else's (the first notebook's, say)
            second = start_background(data_dir=b)
        assert isinstance(second, StartLaunched), second
        assert second.info.pid != first.info.pid and second.info.port not in (port_a, LOCAL_PORT)
        assert Path(second.info.data_dir) == b.resolve() and (b / "server.json").is_file()
        assert {Path(i.data_dir) for i in lifecycle.running_servers()} == {a.resolve(), b.resolve()}
        assert running_server() == second.info  # this kernel's own server comes first
        stopped = stop_background(started_here_only=True)  # `%opd serve stop` in the second notebook
        assert [s.pid for s in stopped] == [second.info.pid]
        assert running_server(a) == first.info  # the first notebook's server still answers
        assert stop_background(started_here_only=True) == []  # nothing else of this kernel's
    finally:
        stop_background(data_dir=a)
        stop_background(data_dir=b)
    assert lifecycle.running_servers() == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _holding(port: int) -> Iterator[None]:
    """``port`` taken for the block (by us, unless something else already holds it)."""
    with socket.socket() as held:
        with contextlib.suppress(OSError):
            held.bind(("127.0.0.1", port))
        yield


@pytest.mark.slow
def test_a_record_of_an_earlier_version_is_still_found_and_stopped(cache: Path, tmp_path: Path) -> None:
    """Before servers were kept per data dir there was one `serve-state.json`: its server still shows."""
    from opd_nb.server import start
    from opd_nb.server.records import legacy_state_file

    data = tmp_path / "data"
    with start(port=0, data_dir=data, detach=False) as handle:
        legacy_state_file().parent.mkdir(parents=True, exist_ok=True)
        legacy_state_file().write_text(handle.info.to_json())
        assert read_state(data) == handle.info and running_server(data) is not None
        assert [s.pid for s in stop_background(data_dir=data)] == [handle.pid]
    assert not legacy_state_file().exists()


def test_a_taken_port_is_a_start_failure_with_the_log_tail(cache: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = start_background(port=port, data_dir=tmp_path / "data")
    assert isinstance(result, StartFailed), result
    assert result.exit_code == 2 and "cannot listen" in result.log_tail
    assert "cannot listen" in str(result.to_error())
    assert read_state(tmp_path / "data") is None  # a failed start records nothing


def test_a_server_that_does_not_answer_in_time_is_a_timeout(cache: Path, tmp_path: Path) -> None:
    result = start_background(port=0, data_dir=tmp_path / "data", startup_timeout=0.01)
    assert isinstance(result, StartTimedOut), result
    assert result.timeout_s == 0.01 and result.log_path.endswith("server.log")
    assert read_state(tmp_path / "data") is None and running_server() is None


def test_a_dead_recorded_server_is_reported_gone(cache: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = ServerInfo.at(int(done.stdout), "127.0.0.1", 9, tmp_path)
    state_file(tmp_path).parent.mkdir(parents=True)
    state_file(tmp_path).write_text(dead.to_json())
    assert read_state(tmp_path) == dead
    status = server_status(tmp_path)
    assert status.recorded == dead and not status.running
    assert running_server() is None
    assert stop_background(data_dir=tmp_path) == [] and not state_file(tmp_path).exists()


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"pid": 1, "host": "127.0.0.1"}',  # fields missing
        '{"pid": "1", "host": "h", "port": 1, "base_url": "u", "api_base": "a", "data_dir": "d"}',
        '{"pid": true, "host": "h", "port": 1, "base_url": "u", "api_base": "a", "data_dir": "d"}',
    ],
)
def test_a_garbled_state_file_reads_as_no_server(cache: Path, text: str) -> None:
    state_file().parent.mkdir(parents=True)
    state_file().write_text(text)
    assert read_state() is None
    assert not server_status().running and server_status().recorded is None


def test_server_info_round_trips_through_the_state_file_format(tmp_path: Path) -> None:
    info = ServerInfo.at(1234, "0.0.0.0", 8765, tmp_path, tmp_path / "server.log")
    assert info.base_url == "http://127.0.0.1:8765" and info.api_base == "http://127.0.0.1:8765/api/v1"
    assert ServerInfo.from_json(info.to_json()) == info
    assert info.env() == {"DASHSCOPE_HTTP_BASE_URL": info.api_base, "DASHSCOPE_API_KEY": "local"}
    older = {k: v for k, v in json.loads(info.to_json()).items() if k != "log_path"}
    assert ServerInfo.from_json(json.dumps(older)) == ServerInfo.at(1234, "0.0.0.0", 8765, tmp_path)


@pytest.mark.slow
def test_a_data_dir_has_one_owner_that_start_background_reuses(cache: Path, tmp_path: Path) -> None:
    """A second server on a data dir in use is refused naming the owner; `opd serve start` reuses it."""
    from opd_nb.errors import OpdError
    from opd_nb.server import start
    from opd_nb.server.lifecycle import data_dir_owner, read_owner

    data = tmp_path / "data"
    with start(port=0, data_dir=data) as owner:  # e.g. `opd serve run` in another terminal
        recorded = read_owner(data)
        assert recorded is not None and recorded.pid == owner.pid and recorded.port == owner.port
        assert data_dir_owner(data) == recorded
        with pytest.raises(OpdError) as refused:
            start(port=0, data_dir=data)
        assert f"{owner.base_url} (pid {owner.pid})" in str(refused.value)
        reused = start_background(port=0, data_dir=data)
        assert isinstance(reused, StartReused) and reused.info.pid == owner.pid, reused
        assert read_state(data) is None  # reusing someone else's server does not adopt it
    assert read_owner(data) is None and data_dir_owner(data) is None  # a clean stop forgets the record
    again = start_background(port=0, data_dir=data)  # the lock went with the first server
    try:
        assert isinstance(again, StartLaunched), again
    finally:
        stop_background(data_dir=data)


def test_the_worker_takes_its_torch_threads_from_opd_then_openmp(monkeypatch) -> None:
    from opd_nb.server.worker import torch_threads

    monkeypatch.delenv("OPD_TORCH_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert torch_threads() == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # two jobs at once on two cores: one thread each
    assert torch_threads() == 1
    monkeypatch.setenv("OPD_TORCH_THREADS", "3")
    assert torch_threads() == 3
    monkeypatch.setenv("OPD_TORCH_THREADS", "lots")  # not a number: the next source decides
    assert torch_threads() == 1


def test_a_job_with_function_servers_leaves_them_a_core_unless_told_otherwise(monkeypatch) -> None:
    """Its function servers answer beside the teacher's scoring; a second spinning OpenMP thread took
    their core (bench/tracing_overhead.py). A thread count the user set still wins."""
    from opd_nb.server.worker import torch_threads

    monkeypatch.delenv("OPD_TORCH_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert (torch_threads(with_functions=True), torch_threads(with_functions=False)) == (1, 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert torch_threads(with_functions=True) == 2
    monkeypatch.setenv("OPD_TORCH_THREADS", "3")
    assert torch_threads(with_functions=True) == 3
