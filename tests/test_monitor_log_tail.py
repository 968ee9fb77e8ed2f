"""A monitor opened on a finished job shows the log's real tail: it reads every new page of the log in
one poll, and skips straight to the kept tail when the server says how long the log is (issue 49: a
finished stage showed SUCCEEDED over a log tail that stopped at step 167 of 192, where its first page did)."""

from __future__ import annotations

from collections import deque

import pytest

from opd_nb.notebook import monitor_polling
from opd_nb.notebook.monitor import JobMonitor

pytestmark = pytest.mark.slow


@pytest.fixture()
def job_and_client(finished_job, local_server):
    from opd_nb.client import JobClient, resolve_target

    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    job = finished_job("pure-distill").job
    return job.job_id, client, client.logs(job.job_id, lines=10000).lines


@pytest.mark.parametrize("page", [3, 7, 200])
def test_one_poll_reads_the_log_to_its_end_in_pages(job_and_client, monkeypatch, page: int) -> None:
    job_id, client, everything = job_and_client
    assert len(everything) > 10, "the shared job logs more than a few lines"
    monkeypatch.setattr(monitor_polling, "LOG_PAGE", page)
    monitor = JobMonitor(job_id, client)
    monitor.poll_once()
    kept = list(monitor._jobs[job_id].logs)
    assert kept == everything[-len(kept) :] and kept[-1] == everything[-1]
    assert len(kept) == min(len(everything), 200)


def test_a_long_log_is_read_from_its_kept_tail_not_from_its_start(job_and_client, monkeypatch) -> None:
    job_id, client, everything = job_and_client
    asked: list[int] = []
    logs = client.logs

    def counting(job: str, offset: int = 0, lines: int = 200):
        asked.append(offset)
        return logs(job, offset=offset, lines=lines)

    monkeypatch.setattr(monitor_polling, "LOG_PAGE", 4)
    monkeypatch.setattr(client, "logs", counting)
    monitor = JobMonitor(job_id, client)
    monitor._jobs[job_id].logs = deque(maxlen=8)
    monitor.poll_once()
    assert list(monitor._jobs[job_id].logs) == everything[-8:]
    assert len(asked) <= 4, asked  # the first page, then the tail's two pages (and an empty last ask)
