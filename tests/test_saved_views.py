"""What a notebook saves of each view, run in a real kernel (nbclient) against a real `opd serve`.

JupyterLab and Notebook 7 prefer an output's widget view over its HTML, and a reopened notebook has
no widget model for it (no kernel, or a new one), so an output that still names a widget reopens as
"Error displaying widget: model not found". A view that reached its final state must therefore leave
the snapshot alone: the monitor and the sweep once their jobs ended (also when they were displayed
while running), `%opd watch` of a finished job, a comparison, a finished eval, a chat whose question
was answered. Their snapshot keeps the interactive chart (an iframe) and a static SVG picture of the
same curves for hosts that strip scripts. Views that stay interactive (rollouts, the form) keep their
widget; a saved notebook restores them from the widget state JupyterLab saves (binder/ turns that on;
tests/test_browser.py reopens one). The browser side is tests/test_browser.py.
"""

from __future__ import annotations

import html
import json
import re

import pytest
from conftest import tiny_workspace

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
    return json.loads(path.read_text())


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


def test_interactive_views_stay_live_widgets(saved: dict) -> None:
    data = _only_output(saved, 11)
    assert WIDGET_VIEW in data and "rollouts of" in data["text/html"]  # the snapshot rides along


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
