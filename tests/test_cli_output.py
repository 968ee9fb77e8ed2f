"""Terminal rendering: user text (job names, models, key paths, messages) is printed as written.

rich reads ``[a-z...]`` as markup, so an unescaped ``[exp-1]`` in a job name or ``functions[reward]``
in a key path would silently vanish from the terminal output.
"""

from __future__ import annotations

from rich.console import Console

from opd_nb.checks.report import CheckReport
from opd_nb.cli._output import print_result
from opd_nb.client.jobs import Job, JobList

BRACKETS = "[exp-1][bold]"


def rendered(obj) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(obj)
    return console.export_text()


def test_job_and_job_list_keep_bracketed_user_text():
    job = Job(
        job_id="ft-1",
        job_name=f"distill {BRACKETS}",
        status="FAILED",
        model=f"qwen{BRACKETS}",
        message=f"reward raised KeyError{BRACKETS}",
    )
    text = rendered(job)
    assert f"distill {BRACKETS}" in text and f"qwen{BRACKETS}" in text and f"KeyError{BRACKETS}" in text
    listing = rendered(JobList(jobs=[job], total=1))
    assert f"qwen{BRACKETS}" in listing and "FAILED" in listing


def test_job_list_keeps_ids_whole_in_a_narrow_terminal():
    """`opd jobs` in an 80-column terminal (or a pipe): long models and outputs wrap, ids stay copyable."""
    jobs = [
        Job(
            job_id=f"ft-20261201154{i}-8e401{i}",
            status="SUCCEEDED",
            model="qwen3.5-9b-with-a-rather-long-model-name",
            create_time="2026-12-01 15:40:30",
            finetuned_output=f"opd-local/ft-20261201154{i}-8e401{i}-with-a-long-suffix",
        )
        for i in range(2)
    ]
    console = Console(width=80, record=True, color_system=None)
    console.print(JobList(jobs=jobs, total=2))
    text = console.export_text()
    assert all(j.job_id in text for j in jobs), text
    assert text.count("SUCCEEDED") == 2


def test_check_report_keeps_key_paths_and_messages(capsys):
    report = CheckReport(workspace="ws", target="local")
    report.add(
        "config.function",
        "error",
        "config.yaml:7 functions[reward].name",
        "unknown name [abc]",
        fix="use [x]",
    )
    text = rendered(report)
    assert "functions[reward].name" in text and "unknown name [abc]" in text and "use [x]" in text
    print_result(report)  # the CLI path
    assert "functions[reward].name" in capsys.readouterr().out
