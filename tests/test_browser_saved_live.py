"""A monitor saved mid-run, in JupyterLab and Chromium (no network), with our save hook on as the
package installs it: the file holds the monitor's snapshot part alone, which says it is the last state
seen ("as of step N, 13:08 — re-run this cell to reconnect") and follows the run while the page is
open (a second save holds a later step) without re-creating the live widget. Then the kernel is shut
down, the page reloaded, the notebook saved again (what an autosave does) and reloaded once more, and
opened in Notebook 7: the monitor's output never says "Error displaying widget" (the first cells'
plain ipywidgets do: they are not ours), always that snapshot, and no Cancel button.

The first cell checks the premise of the two-part design: JupyterLab's widget renderer builds a new
widget view when an output holding one is updated, even with the same widget.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from browser_driver import HAVE_CHROMIUM, NO_CHROMIUM, notebook_doc
from jupyter_browser import ARTIFACTS, WIDGET_ERROR, Lab, jupyter_lab, probe_widgets
from test_browser import LONG_JOB, PROBE, _cancel

pytestmark = [pytest.mark.slow, pytest.mark.browser]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
NAME, JOB = "saved_live.ipynb", "saved-live"
RERENDER, MONITOR = 1, 4  # cells
AS_OF = re.compile(r"as of step (\d+)(?:/\d+)?, \d\d:\d\d — re-run this cell to reconnect")
UPDATE_AFTER_S = 6
# An output with a slider's widget view, updated a few seconds later with the same widget view.
RERENDER_CELL = f"""import threading, time, ipywidgets as W
from IPython.display import display, update_display
slider = W.IntSlider(description="rerender-probe")
view = {{k: v for k, v in slider._repr_mimebundle_().items() if k != "text/plain"}}
display({{**view, "text/html": "v1"}}, raw=True, display_id="rerender-probe")
def later():
    time.sleep({UPDATE_AFTER_S})
    update_display({{**view, "text/html": "v2"}}, raw=True, display_id="rerender-probe")
threading.Thread(target=later, daemon=True).start()"""


def _in_cell(lab: Lab, index: int, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    cell = lab.css(".jp-Notebook .jp-Cell")[index]
    return cell.find_elements(By.CSS_SELECTOR, f".jp-OutputArea {selector}")


def _mark(lab: Lab, element: Any) -> None:
    lab.driver.execute_script("arguments[0].dataset.opdMark = '1'", element)


def _page_as_of(lab: Lab) -> int | None:
    """The step the monitor's snapshot part says (hidden while the widget shows: its text content)."""
    parts = _in_cell(lab, MONITOR, ".opd-saved-view")
    if not parts:
        return None
    found = AS_OF.search(lab.driver.execute_script("return arguments[0].textContent", parts[0]) or "")
    return int(found.group(1)) if found else None


def _saved_step(nb: dict) -> int:
    """The file holds the monitor's snapshot part alone, saying its step; returns that step."""
    outputs = [o for o in nb["cells"][MONITOR]["outputs"] if o["output_type"] != "stream"]
    assert not any(WIDGET_VIEW in o.get("data", {}) for o in outputs), "a widget view was saved"
    (snap,) = outputs
    assert snap["metadata"] == {"opd_nb": {"part": "snapshot"}}
    found = AS_OF.search("".join(snap["data"]["text/html"]))
    assert found and AS_OF.search("".join(snap["data"]["text/plain"])), snap["data"]["text/plain"]
    return int(found.group(1))


def _reopened(lab: Lab, step: int, shot: str) -> None:
    """No widget error; the snapshot shows, saying the step it was saved at; no Cancel anywhere."""
    time.sleep(4)  # the widget manager's time to decide (an error would show by then)
    text = "\n".join(o.text for o in _in_cell(lab, MONITOR, ".jp-OutputArea-output"))
    assert WIDGET_ERROR not in text, text  # (the first cells' plain widgets have no model: not ours)
    line = lab.wait_for(lambda: _in_cell(lab, MONITOR, ".opd-as-of"), 60, "the as-of line")[0]
    assert line.is_displayed() and f"as of step {step}" in line.text and "re-run this cell" in line.text
    assert _in_cell(lab, MONITOR, ".opd-monitor-snap")[0].is_displayed()
    assert not [b for b in _in_cell(lab, MONITOR, "button") if "ancel" in b.text and b.is_enabled()]
    assert not _in_cell(lab, MONITOR, ".opd-job-monitor")  # no live widget came back
    lab.driver.execute_script("arguments[0].scrollIntoView()", line)
    lab.driver.save_screenshot(str(ARTIFACTS / f"{shot}.png"))
    assert lab.offsite_requests() == []


@pytest.mark.timeout(1800)
def test_a_monitor_saved_mid_run_reopens_as_its_last_state(tmp_path_factory, local_server) -> None:  # noqa: ANN001
    from conftest import tiny_workspace

    if not HAVE_CHROMIUM:
        pytest.skip(NO_CHROMIUM)
    ARTIFACTS.mkdir(exist_ok=True)
    tmp = tmp_path_factory.mktemp("saved-live")
    root = tmp / "nb"
    root.mkdir()
    tiny_workspace("reward", root / "sorter", train_rows=16)
    sets = " ".join(f"--set training.hyper_parameters.{kv}" for kv in LONG_JOB)
    cells = [
        f"import ipywidgets\nipywidgets.Label({PROBE!r})",
        RERENDER_CELL,
        "%load_ext opd_nb",
        f"%opd use local --base-url {local_server.api_base}",
        f"live = %opd submit sorter --job-name {JOB} {sets}\nlive",
    ]
    (root / NAME).write_text(json.dumps(notebook_doc(cells)))
    with jupyter_lab(root, tmp, window="1400,1800") as lab:
        try:
            _run(lab)
        finally:
            _cancel(local_server, JOB)


def _run(lab: Lab) -> None:
    lab.open(f"lab/tree/{NAME}")
    probe_widgets(lab, PROBE)
    lab.menu("Run", "Run All Cells")

    # The premise: an update of an output holding a widget view builds a new view.
    slider = lab.wait_for(lambda: _in_cell(lab, RERENDER, ".widget-slider")[0], 120, "the probe slider")
    _mark(lab, slider)
    time.sleep(UPDATE_AFTER_S + 6)
    rebuilt = not _in_cell(lab, RERENDER, "[data-opd-mark]")
    print(f"update_display of an unchanged widget view rebuilt the view: {rebuilt}")
    assert rebuilt and _in_cell(lab, RERENDER, ".widget-slider")

    # The live monitor: its widget shows, its snapshot part is in the page but hidden.
    widget = lab.wait_for(lambda: _in_cell(lab, MONITOR, ".opd-job-monitor")[0], 300, "the live monitor")
    _mark(lab, widget)
    lab.wait_for(lambda: (_page_as_of(lab) or 0) >= 1, 600, "the snapshot part to reach step 1")
    assert not _in_cell(lab, MONITOR, ".opd-saved-view")[0].is_displayed()  # the page shows it once
    saved = lab.save(NAME)
    first = _saved_step(saved)
    state = saved["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert not [m for m in state.values() if "opdChart" in str(m["state"].get("_esm", ""))]
    assert any(m["model_name"] == "IntSliderModel" for m in state.values())  # others' widgets stay
    lab.wait_for(lambda: (_page_as_of(lab) or 0) > first, 600, "the snapshot part to move on")
    assert _in_cell(lab, MONITOR, "[data-opd-mark].opd-job-monitor"), "the live widget was rebuilt"
    second = _saved_step(lab.save(NAME))
    assert second > first, (first, second)

    # Next day: no kernel; reload, save (an autosave's write), reload; Notebook 7.
    lab.shut_down_kernels()
    lab.open(f"lab/tree/{NAME}")
    _reopened(lab, second, "saved_live_reopened")
    assert _saved_step(lab.save(NAME)) == second
    lab.open(f"lab/tree/{NAME}")
    _reopened(lab, second, "saved_live_reopened_twice")
    lab.open(f"notebooks/{NAME}", kernel=False)
    _reopened(lab, second, "saved_live_notebook7")
