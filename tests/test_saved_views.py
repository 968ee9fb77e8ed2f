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
from typing import Any

import pytest
from conftest import stop_jobs, tiny_workspace

from opd_nb.notebook import save_hook

pytestmark = pytest.mark.slow

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
NAME = "saved-views"
LIVE_NAME = "views-live"
LONG_SETS = " ".join(
    f"--set training.hyper_parameters.{kv}"
    for kv in ("n_epochs=100", "batch_size=1", "ppo_mini_batch_size=2", "eval_steps=100", "save_steps=100000")
)
# The views by cell, finished (their file holds the final snapshot) and mid-run (the snapshot says "as of").
FINISHED = {2: "sweep", 3: "monitor", 5: "watch", 6: "compare", 7: "eval", 9: "chat", 13: "probe"}
MID_RUN = {
    11: "rollouts",  # of a finished job, but interactive: live until the kernel stops
    12: "traces",
    14: "monitor",
    16: "rollouts",
    17: "traces",
    18: "sweep",
    19: "chat",
    20: "form",
    21: "eval",
}


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
        # mid-run when the kernel stops (the file is saved then): every view kind while it still moves
        f"live = %opd submit {workspace} --job-name {LIVE_NAME} {LONG_SETS}\nlive",
        "import time\nfor _ in range(1200):\n"
        "    if live.as_of().startswith('step ') and int(live.as_of().split()[1].split('/')[0]) >= 2: break\n"
        "    time.sleep(0.5)\ntime.sleep(11)  # the snapshot part's next refresh (at most every 10 s)\nlive.as_of()",
        "%opd rollouts {live.job_ids[0]}",
        "%opd traces {live.job_ids[0]} --kind train",
        f"live_sweep = %opd sweep {workspace} --param n_epochs=80,81\nlive_sweep",
        "%opd chat qwen3-8b",  # open, no question asked yet
        f"%opd form {workspace}",
        f"%opd eval {workspace} --model qwen3.5-9b --rows 16 --max-tokens 256",  # last: still running
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
    client = _client(local_server)
    before = {job.job_id for job in client.list(size=100).jobs}
    try:
        NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(root)}}
        ).execute()
    finally:
        mp.undo()
        # the mid-run jobs hold no worker for other tests
        stop_jobs(client, where=lambda job: job.job_id not in before)
    path = root / "saved.ipynb"
    nbformat.write(nb, path)
    executed = json.loads(path.read_text())
    saved = copy.deepcopy(executed)
    save_hook.drop_live_parts(saved)  # what the Jupyter server writes
    return {**saved, "executed": executed}


def _client(local_server):  # noqa: ANN001, ANN202
    from pydantic import SecretStr

    from opd_nb.client import JobClient, Target

    return JobClient(Target(kind="local", base_url=local_server.api_base, api_key=SecretStr("local")))


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


@pytest.mark.parametrize("index", sorted(MID_RUN))
def test_a_view_saved_mid_run_is_its_snapshot_saying_as_of(saved: dict, index: int) -> None:
    """Each view kind still moving when the kernel stopped: the file holds its snapshot alone, headed
    by the line saying it is the last state seen, with no control that needs a kernel."""
    data = _only_output(saved, index)
    assert set(data) == {"text/plain", "text/html"}, (MID_RUN[index], sorted(data))
    assert re.search(r"as of [^<]*\d\d:\d\d — re-run this cell to reconnect", data["text/html"]), MID_RUN[
        index
    ]
    # a button is the snapshot's own (its script expands and collapses, no kernel behind it)
    buttons = re.findall(r"<button[^>]*>", data["text/html"])
    if MID_RUN[index] == "monitor":  # its steps, and the clock time its ETA pointed at (not a countdown)
        assert re.search(r"as of step \d+/\d+", data["text/html"]) and "≈" in data["text/html"]
    assert all("data-act=" in b for b in buttons) and "(live)" not in data["text/html"], MID_RUN[index]


# ---- in the browser: each view kind, finished and mid-run, as a user reopens, exports and themes it ----
FILE = "views.ipynb"
VIEWS = {**FINISHED, **MID_RUN}


@pytest.fixture(scope="module")
def lab(saved: dict, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """JupyterLab (our save hook on, as the package installs it) holding the notebook as the kernel left
    it, saved through the server as the page saves it: cells trusted (the user ran them), live parts in."""
    import httpx
    from browser_driver import HAVE_CHROMIUM, NO_CHROMIUM
    from jupyter_browser import ARTIFACTS, jupyter_lab

    if not HAVE_CHROMIUM:
        pytest.skip(NO_CHROMIUM)
    ARTIFACTS.mkdir(exist_ok=True)
    tmp = tmp_path_factory.mktemp("views-browser")
    root = tmp / "nb"
    root.mkdir()
    executed = copy.deepcopy(saved["executed"])
    for cell in executed["cells"]:
        cell["metadata"]["trusted"] = True
    with jupyter_lab(root, tmp, window="1400,2000") as opened:
        httpx.put(
            f"http://127.0.0.1:{opened.port}/api/contents/{FILE}?token={opened.token}",
            json={"type": "notebook", "format": "json", "content": executed},
            timeout=60,
        ).raise_for_status()
        yield opened


def _view_cell(lab: Any, index: int) -> Any:
    return lab.css(".jp-Notebook .jp-Cell")[index]


def _check_views(lab: Any, shots: str | None) -> None:
    """Every view cell: no widget error, its snapshot shown, "as of" exactly on the mid-run ones, no
    Cancel to click, every text at WCAG AA contrast; nothing fetched from off this machine."""
    import time

    from jupyter_browser import ARTIFACTS, WIDGET_ERROR, contrast_failures, scroll_to
    from selenium.webdriver.common.by import By

    time.sleep(4)  # the widget manager's time to decide (an error would show by then)
    failures: dict[str, list[str]] = {}
    for index, kind in sorted(VIEWS.items()):
        what = f"cell {index} ({kind}, {'mid-run' if index in MID_RUN else 'finished'})"
        cell = _view_cell(lab, index)
        text = "\n".join(o.text for o in cell.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output"))
        assert WIDGET_ERROR not in text, what
        views = lab.wait_for(lambda c=cell: c.find_elements(By.CSS_SELECTOR, ".opd-saved-view"), 60, what)
        assert len(views) == 1 and views[0].is_displayed(), what
        as_of = [e for e in cell.find_elements(By.CSS_SELECTOR, ".opd-as-of") if e.is_displayed()]
        assert bool(as_of) == (index in MID_RUN), what
        assert not as_of or "re-run this cell to reconnect" in as_of[0].text, what
        assert not [b for b in cell.find_elements(By.CSS_SELECTOR, "button") if "ancel" in b.text], what
        scroll_to(lab, views[0], "start")
        checked, bad = contrast_failures(lab, views[0])
        assert checked > 0, what
        if bad:
            failures[what] = bad
        if shots:
            views[0].screenshot(str(ARTIFACTS / f"views_{shots}_{index:02d}_{kind}.png"))
    assert not failures, json.dumps(failures, indent=1)[:4000]
    assert lab.offsite_requests() == []


def _view_outputs(nb: dict) -> dict[int, str]:
    return {index: _only_output(nb, index)["text/html"] for index in VIEWS}


@pytest.mark.browser
@pytest.mark.timeout(900)
def test_each_view_kind_reopens_autosaves_and_reopens_again_in_both_frontends(lab: Any, saved: dict) -> None:
    """The server's own save dropped our live parts; reopened with no kernel of its own, saved (what
    an autosave writes), reopened, and in Notebook 7, every view shows its last state in the light
    theme at AA contrast."""
    disk = json.loads((lab.root / FILE).read_text())
    assert not [
        o
        for c in disk["cells"]
        for o in c.get("outputs", [])
        if o.get("metadata", {}).get("opd_nb", {}).get("part") == "live"
    ]
    assert _view_outputs(disk) == _view_outputs(saved)  # the server's hook saves what the hook's test saw
    lab.open(f"lab/tree/{FILE}")  # a new kernel: it knows none of the views' widgets
    _check_views(lab, "light")
    assert _view_outputs(lab.save(FILE)) == _view_outputs(disk)  # an autosave keeps every snapshot
    lab.open(f"lab/tree/{FILE}")
    _check_views(lab, None)
    lab.open(f"notebooks/{FILE}", kernel=False)
    _check_views(lab, "notebook7")


@pytest.mark.browser
@pytest.mark.timeout(900)
def test_each_view_kind_reads_in_the_dark_theme(lab: Any) -> None:
    from jupyter_browser import set_theme

    set_theme(lab, "JupyterLab Dark")
    try:
        lab.open(f"lab/tree/{FILE}", kernel=False)
        lab.wait_for(
            lambda: lab.driver.execute_script("return document.body.dataset.jpThemeLight") == "false",
            60,
            "the dark theme",
        )
        _check_views(lab, "dark")
    finally:
        set_theme(lab, "JupyterLab Light")


@pytest.mark.browser
@pytest.mark.timeout(900)
def test_an_html_export_shows_each_view_kind_offline(lab: Any) -> None:
    """`jupyter nbconvert --to html` of the saved file, opened from disk with no network: every view's
    snapshot shows (no widget loader from a CDN needed), the charts' frames sized."""
    import subprocess
    import sys

    from jupyter_browser import ARTIFACTS, WIDGET_ERROR

    subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--output", "views.html", FILE],
        cwd=lab.root,
        check=True,
        capture_output=True,
        timeout=300,
    )
    lab.driver.get((lab.root / "views.html").as_uri())
    views = lab.wait_for(lambda: lab.css(".opd-saved-view"), 60, "the exported views")
    assert len(views) == len(VIEWS)
    assert all(v.is_displayed() and v.text.strip() for v in views)
    assert sum(bool(v.find_elements("css selector", ".opd-as-of")) for v in views) == len(MID_RUN)
    assert WIDGET_ERROR not in lab.driver.find_element("css selector", "body").text

    def sized_frames() -> list[Any]:
        """The chart frames that have taken their height; they size one by one, so wait for all four."""
        sized = [f for f in lab.css(".opd-saved-view iframe.opd-chart-frame") if f.size["height"] > 100]
        # the finished sweep, monitors and comparison; the live monitor and sweep
        return sized if len(sized) >= 4 else []

    frames = lab.wait_for(sized_frames, 60, "four sized chart frames")
    assert len(frames) >= 4
    lab.driver.save_screenshot(str(ARTIFACTS / "views_export_offline.png"))
