"""What a notebook saves of each view, run in a real kernel (nbclient) against a real `opd serve`.

JupyterLab and Notebook 7 prefer an output's widget view over its HTML, and a reopened notebook has
no widget model for it (no kernel, or a new one), so an output that still names a widget reopens as
"Error displaying widget: model not found". A view that reached its final state must therefore leave
the snapshot alone: the monitor and the sweep once their jobs ended (also when they were displayed
while running), `%opd watch` of a finished job, a comparison, a finished eval, a chat whose question
was answered. Their snapshot keeps the interactive chart (an iframe) and a static SVG picture of the
same curves for hosts that strip scripts. Every view shown in a kernel writes two outputs (its live
widget part and its snapshot part); the server's save hook drops the live parts (``notebook/save_hook``,
applied here as the server applies it), so a view still live at save time (the rollout viewer) is saved
as its snapshot, which says it is the last state seen. The browser side is tests/test_browser.py and
tests/test_browser_saved_live.py.
"""

from __future__ import annotations

import copy
import html
import json
import re

import pytest
from conftest import tiny_workspace

from opd_nb.notebook import save_hook

pytestmark = pytest.mark.slow

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
NAME = "saved-views"


def _notebook(workspace: str, api_base: str) -> object:
    cells = [
        "%load_ext opd_nb",
        f"%opd use local --base-url {api_base}",
        # displayed while its jobs run: the output turns into the snapshot when they end
        f"sweep = %opd sweep {workspace} --param learning_rate=1.0e-6,2.0e-6\nsweep",
        "monitor = %opd watch {sweep.job_ids[0]}\nmonitor",
        "sweep.wait(timeout_s=400)\nmonitor.wait(timeout_s=60)\nNone",
        "%opd watch {sweep.job_ids[1]}",  # finished when shown
        "%opd compare {' '.join(sweep.job_ids)}",
        f"ev = %opd eval {workspace} --model qwen3.5-9b --rows 2 --max-tokens 8\nev",
        "ev.wait(300)\nNone",
        "chat = %opd chat qwen3-8b 93418 --max-tokens 8 --temperature 0\nchat",
        "chat.wait(120)\nNone",
        "%opd rollouts {sweep.job_ids[0]}",  # interactive: stays a live widget
        "%opd traces {sweep.job_ids[0]} --kind train",  # so does the trace view
        f"%opd probe {workspace} -n 2 -k 1",  # a finished result when shown
    ]
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


@pytest.fixture(scope="module")
def saved(local_server, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The notebook as a front end would save it after running every cell."""
    import nbformat
    from nbclient import NotebookClient

    root = tmp_path_factory.mktemp("saved-views")
    tiny_workspace("reward", root / "sorter", val_rows=2, n_epochs=2)
    nb = _notebook("sorter", local_server.api_base)
    env_key = "DASHSCOPE_API_KEY"
    mp = pytest.MonkeyPatch()
    mp.setenv(env_key, "local")  # the kernel inherits it, as a Binder session's does
    try:
        NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(root)}}
        ).execute()
    finally:
        mp.undo()
    path = root / "saved.ipynb"
    nbformat.write(nb, path)
    executed = json.loads(path.read_text())
    saved = copy.deepcopy(executed)
    save_hook.drop_live_parts(saved)  # what the Jupyter server writes
    return {**saved, "executed": executed}


def _outputs(nb: dict, index: int) -> list[dict]:
    return [
        o for o in nb["cells"][index]["outputs"] if o["output_type"] in ("display_data", "execute_result")
    ]


def _only_output(nb: dict, index: int) -> dict:
    """The cell's one output, each mime type's text joined (a saved file splits it into lines)."""
    (out,) = _outputs(nb, index)
    return {k: "".join(v) if isinstance(v, list) else v for k, v in out["data"].items()}


def _chart_pages(snapshot: str) -> list[str]:
    return [
        html.unescape(p)
        for p in re.findall(r'<iframe class="opd-chart-frame"[^>]*srcdoc="([^"]*)"', snapshot)
    ]


def test_views_that_ended_leave_their_snapshot_alone(saved: dict) -> None:
    final = {
        2: "the sweep, displayed while its jobs ran",
        3: "a monitor displayed while its job ran",
        5: "a monitor of a finished job",
        6: "a comparison",
        7: "an eval, displayed while it ran",
        9: "a chat whose answer arrived",
    }
    for index, what in final.items():
        data = _only_output(saved, index)
        assert WIDGET_VIEW not in data, f"{what}: the saved output still names a widget ({sorted(data)})"
        assert set(data) == {"text/plain", "text/html"}, what
    for index in (2, 3, 5, 6):  # every chart: the interactive page and the static picture of its curves
        snapshot = _only_output(saved, index)["text/html"]
        assert len(_chart_pages(snapshot)) == 1, index
        assert 'class="opd-chart-img"' in snapshot and "data:image/svg+xml," in snapshot
        assert "trust the notebook" in snapshot and "re-run this cell" in snapshot
        assert "SUCCEEDED" in snapshot or index == 6
    sweep = _only_output(saved, 2)["text/html"]
    assert "(live)" not in sweep and sweep.count("SUCCEEDED") >= 2
    monitor = _only_output(saved, 3)["text/html"]
    assert "checkpoints of" in monitor and "(live)" not in monitor
    assert "reward_mean" in _only_output(saved, 7)["text/html"]
    chat = _only_output(saved, 9)["text/html"]
    assert "93418" in chat and "<b>model</b>" in chat and ".send(" in chat


@pytest.mark.parametrize(("index", "title"), [(11, "rollouts of"), (12, "traces of")])
def test_a_live_view_is_saved_as_its_snapshot_that_says_so(saved: dict, index: int, title: str) -> None:
    """The rollout viewer and the trace view stay live (interactive): in the kernel a widget part and
    a snapshot part; in the file the snapshot alone, saying it is the last state seen."""
    live, snap = _outputs(saved["executed"], index)
    assert set(live["data"]) == {WIDGET_VIEW} and live["metadata"] == {"opd_nb": {"part": "live"}}
    assert snap["metadata"] == {"opd_nb": {"part": "snapshot"}}
    data = _only_output(saved, index)
    assert set(data) == {"text/plain", "text/html"} and title in data["text/html"]
    assert re.search(r"as of step \d+, \d\d:\d\d — re-run this cell to reconnect", data["text/html"])
    assert data["text/plain"].startswith("as of step ")


def test_a_final_view_leaves_no_live_part_in_the_kernel_either(saved: dict) -> None:
    """Ended before it was shown (a finished job's monitor, a comparison): no live part at all, its one
    output the snapshot, in the kernel's own output too (nbconvert and nbclient write it as is)."""
    for index in (5, 6):
        (snap,) = _outputs(saved["executed"], index)
        assert snap["metadata"]["opd_nb"] == {"part": "snapshot"} and WIDGET_VIEW not in snap["data"]


def test_a_probe_is_saved_as_its_snapshot_alone(saved: dict) -> None:
    """`%opd probe` shows a finished result: in the kernel one output, its snapshot (no live part), which
    the file keeps as is: both score distributions, the verdicts and the lowest teacher answers."""
    (snap,) = _outputs(saved["executed"], 13)
    assert snap["metadata"] == {"opd_nb": {"part": "snapshot"}} and WIDGET_VIEW not in snap["data"]
    data = _only_output(saved, 13)
    assert set(data) == {"text/plain", "text/html"}
    page = data["text/html"]
    assert page.count("<svg") >= 1 and "lowest-scoring teacher answers" in page and "<script" not in page
    assert re.search(r"opd-can-help|no-headroom|reward-", page) and "teacher" in data["text/plain"]
    assert "as of" not in page  # final: not a last-seen state


def test_the_legend_names_jobs_by_their_name(saved: dict) -> None:
    """The sweep names each job after its value; the legend shows that name, not the job id."""
    page = _chart_pages(_only_output(saved, 2)["text/html"])[0]
    doc = json.loads(
        re.search(
            r"opdChart\(document\.getElementById\('opd-chart'\), (\{.*?\})\);</script>", page, re.S
        ).group(1)
    )
    labels = {s["job"]: s["label"] for s in doc["series"]}
    assert len(labels) == 2 and all(label != job for job, label in labels.items()), labels
