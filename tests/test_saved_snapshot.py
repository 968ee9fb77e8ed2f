"""What a notebook file keeps of our views: the save hook (our live parts dropped, nothing else
touched) and the line a live view's snapshot carries ("as of step 58, 13:08 — re-run this cell to
reconnect"), per view kind. The browser side is tests/test_browser_saved_live.py."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from opd_nb.client import Job
from opd_nb.constants import LOSS
from opd_nb.notebook import display, save_hook
from opd_nb.notebook.chat import ChatWidget
from opd_nb.notebook.eval_view import EvalView
from opd_nb.notebook.job_state import JobState
from opd_nb.notebook.monitor import JobMonitor

REPO = Path(__file__).resolve().parent.parent


def _view(model: str) -> dict:
    return {"model_id": model, "version_major": 2, "version_minor": 0}


def _model(name: str, **refs: object) -> dict:
    return {"model_name": name, "model_module": "@jupyter-widgets/controls", "state": refs}


# Saved widget state (saveState): our live root "r" (its style "h" and the view's box "b", whose layout
# "L" a widget of someone else's, "t", shares), and "u", which nothing shows.
STATE = {
    "r": _model("VBoxModel", children=["IPY_MODEL_h", "IPY_MODEL_b"]),
    "h": _model("HTMLModel", value="<style>"),
    "b": _model("VBoxModel", layout="IPY_MODEL_L"),
    "L": _model("LayoutModel"),
    "t": _model("IntSliderModel", layout="IPY_MODEL_L"),
    "u": _model("LabelModel"),
}
AS_OF = re.compile(r"as of (.*), \d\d:\d\d — re-run this cell to reconnect")


def _out(data: dict, meta: dict | None = None, kind: str = "display_data") -> dict:
    return {"output_type": kind, "data": data, "metadata": meta or {}}


def _notebook() -> dict:
    ours_live = _out({display.WIDGET_VIEW: _view("r")}, display.marked(display.LIVE))
    ours_snap = _out({"text/html": "<b>as of</b>", "text/plain": "x"}, display.marked(display.SNAPSHOT))
    theirs = _out({display.WIDGET_VIEW: _view("t"), "text/plain": "slider"}, {"isolated": True})
    stream = {"output_type": "stream", "name": "stdout", "text": "hi\n"}
    return {
        "cells": [
            {
                "cell_type": "code",
                "id": "a",
                "metadata": {"tags": ["t"]},
                "source": "m",
                "outputs": [ours_live, ours_snap],
            },
            {"cell_type": "code", "id": "b", "metadata": {}, "source": "w", "outputs": [theirs, stream]},
            {"cell_type": "markdown", "id": "c", "metadata": {}, "source": "# t"},
            {
                "cell_type": "code",
                "id": "d",
                "metadata": {},
                "source": "x",
                "outputs": [
                    _out({display.WIDGET_VIEW: _view("x")}, {display.OURS: {"part": "snapshot"}}),
                    _out({"text/plain": "1"}, {"opd_nb_other": {"part": "live"}}, "execute_result"),
                ],
            },
        ],
        "metadata": {
            "widgets": {save_hook.WIDGET_STATE: {"state": copy.deepcopy(STATE), "version_major": 2}},
            "k": 1,
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def test_the_hook_drops_our_live_parts_and_nothing_else() -> None:
    nb = _notebook()
    before = copy.deepcopy(nb)
    assert save_hook.drop_live_parts(nb) == 1
    assert nb["cells"][0]["outputs"] == [before["cells"][0]["outputs"][1]]  # our snapshot stays
    assert nb["cells"][1:] == before["cells"][1:]  # others' widgets, streams, markdown: untouched
    assert nb["cells"][0]["metadata"] == {"tags": ["t"]} and nb["metadata"]["k"] == 1
    # the saved widget state keeps all but what only our dropped live part showed
    widgets = nb["metadata"]["widgets"][save_hook.WIDGET_STATE]
    assert sorted(widgets["state"]) == ["L", "t", "u"] and widgets["version_major"] == 2
    again = copy.deepcopy(nb)
    assert save_hook.drop_live_parts(nb) == 0 and nb == again  # idempotent


def test_the_pre_save_hook_touches_notebooks_only() -> None:
    model = {"type": "notebook", "content": _notebook()}
    save_hook.pre_save(model, path="a.ipynb", contents_manager=None)
    assert [len(c.get("outputs", [])) for c in model["content"]["cells"]] == [1, 2, 0, 2]
    text = {"type": "file", "format": "text", "content": json.dumps(_notebook())}
    kept = copy.deepcopy(text)
    save_hook.pre_save(text, path="a.json")
    assert text == kept
    for odd in ({"type": "notebook", "content": None}, {"type": "directory"}):
        save_hook.pre_save(odd)  # no content (a rename, a directory): nothing to do, no error


def test_the_hook_runs_in_a_contents_manager_save(tmp_path: Path) -> None:
    """The server's own contents manager, with the hook registered as the extension registers it."""
    from jupyter_server.services.contents.filemanager import FileContentsManager

    cm = FileContentsManager(root_dir=str(tmp_path))

    class App:
        contents_manager = cm
        log = cm.log

    save_hook._load_jupyter_server_extension(App())
    cm.save({"type": "notebook", "content": _notebook()}, "n.ipynb")
    saved = json.loads((tmp_path / "n.ipynb").read_text())
    assert len(saved["cells"][0]["outputs"]) == 1
    assert saved["cells"][0]["outputs"][0]["metadata"] == display.marked(display.SNAPSHOT)


def test_the_package_enables_the_extension() -> None:
    conf = json.loads((REPO / "jupyter-config/jupyter_server_config.d/opd_nb.json").read_text())
    (module,) = conf["ServerApp"]["jpserver_extensions"]
    assert save_hook._jupyter_server_extension_points() == [{"module": module}]
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"jupyter-config/jupyter_server_config.d/opd_nb.json" = "etc/jupyter/' in pyproject


def test_the_as_of_line_is_one_wording() -> None:
    assert AS_OF.fullmatch(display.as_of_line("step 58", 0.0)).group(1) == "step 58"
    assert re.fullmatch(r"as of \d\d:\d\d — re-run this cell to reconnect", display.as_of_line("", 0.0))


def _snapshot(view: display.LiveView) -> tuple[str, str]:
    bundle = view._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    return bundle["text/html"], bundle["text/plain"]


def _monitor(status: str, steps: int) -> JobMonitor:
    job_id = "ft-202612010000-abcdef"
    mon = JobMonitor(job_id, client=object())  # never polled: its state is set below
    job = Job.from_output({"job_id": job_id, "status": status, "hyper_parameters": {"n_epochs": 2}})
    rows = [{"step": s, LOSS: 1.0 / s} for s in range(1, steps + 1)]
    st = JobState(job_id=job_id, status=status, job=job, metrics=rows)
    st.final = st.terminal
    mon._jobs[job_id] = st
    mon._offsets[job_id] = 0.0
    return mon


@pytest.mark.parametrize(
    ("status", "steps", "position"), [("RUNNING", 10, "step 10"), ("QUEUED", 0, "queued")]
)
def test_a_live_monitors_snapshot_says_as_of_and_holds_no_control(
    status: str, steps: int, position: str
) -> None:
    mon = _monitor(status, steps)
    assert not mon.final and mon.as_of() == position
    html, text = _snapshot(mon)
    assert AS_OF.search(html).group(1) == position and AS_OF.search(text).group(1) == position
    assert "<button" not in html and "(live)" not in html


def test_a_finished_monitors_snapshot_has_no_as_of_line() -> None:
    mon = _monitor("SUCCEEDED", 4)
    assert mon.final
    html, text = _snapshot(mon)
    assert "as of" not in html and "reconnect" not in text and "SUCCEEDED" in html


def test_an_eval_and_a_chat_say_where_they_were() -> None:
    ev = EvalView("ws", ["qwen3-8b"])
    ev.done_calls, ev.total_calls = 3, 8
    assert AS_OF.search(_snapshot(ev)[0]).group(1) == "3/8 calls"
    chat = ChatWidget("qwen3-8b", client=object())
    chat.messages.append({"role": "user", "content": "hi"})
    html, _ = _snapshot(chat)
    assert AS_OF.search(html).group(1) == "1 message" and "<button" not in html


def test_a_forms_snapshot_says_as_of_when(tmp_path: Path) -> None:
    """A view with no step (the config form) says only the time it was last seen."""
    from opd_nb.notebook.form import ConfigForm
    from opd_nb.workspace.new import create

    form = ConfigForm(create("reward", tmp_path / "ws").path)
    html, text = _snapshot(form)
    assert re.search(r"as of \d\d:\d\d — re-run this cell to reconnect", html) and "learning_rate" in text


def test_a_snapshot_saved_mid_run_gives_the_clock_time_its_eta_pointed_at() -> None:
    """A countdown saved at step 10 reads as time left whenever the file is opened; the snapshot says the
    clock time the job was expected to end instead (the live widget keeps its countdown)."""
    import time

    from opd_nb.notebook import monitor_html

    mon = _monitor("RUNNING", 10)
    state = mon.state
    (v,) = state["jobs"].values()
    v["eta_s"] = 3600.0
    before = time.time()
    snap = monitor_html.snapshot_html(mon.job_ids, state, "")
    ends = {time.strftime("%H:%M", time.localtime(t + 3600.0)) for t in (before, time.time())}
    assert any(f"≈{clock}" in snap for clock in ends), snap
    assert "3600s" not in snap
    assert "3600s" in monitor_html.status_html(state)  # the live view counts down
    v.update(status="SUCCEEDED", terminal=True)
    assert "≈" not in monitor_html.status_html(state, seen_at=before)  # an ended job has no ETA
