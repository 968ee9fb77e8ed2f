"""The committed tutorials as a reader meets them after a clone: JupyterLab (Chromium, no network)
opens each `notebooks/*.ipynb` untrusted, as any notebook whose signature this server has never seen.

JupyterLab's sanitizer then strips scripts and frames: every chart the notebook saved (each job
monitor, the sweep and the comparison) must still show its curves as the static picture, with the line
saying how to get the interactive chart. Trusted (Command Palette > Trust Notebook, as that line says),
every chart is the interactive frame again and answers a hover. One screenshot per notebook lands in
tests/artifacts/ (`tutorial_<name>_untrusted.png`).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from browser_driver import HAVE_CHROMIUM, NO_CHROMIUM
from jupyter_browser import ARTIFACTS, REPO, WIDGET_ERROR, Lab, hover_frame, jupyter_lab, scroll_to

pytestmark = [pytest.mark.slow, pytest.mark.browser]

TUTORIALS = sorted((REPO / "notebooks").glob("*.ipynb"))
FRAME = "iframe.opd-chart-frame"
PICTURE = "img.opd-chart-img"


def saved_charts(path: Path) -> int:
    """How many interactive charts the committed notebook holds (one frame per monitor, sweep, compare)."""
    nb = json.loads(path.read_text())
    html = (
        "".join(out.get("data", {}).get("text/html", ""))
        for cell in nb["cells"]
        for out in cell.get("outputs", [])
    )
    return sum(text.count('<iframe class="opd-chart-frame"') for text in html)


def job_ids(path: Path) -> set[str]:
    """The ids of the jobs the notebook ran (each saved chart holds some of them)."""
    return set(re.findall(r"\bft-\d{12}-[0-9a-f]{6}\b", path.read_text()))


def first_chart_label(path: Path) -> str:
    """The legend label of the first job in the notebook's first chart (which notebook a frame is from)."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = "".join(out.get("data", {}).get("text/html", ""))
            if '<iframe class="opd-chart-frame"' in text:
                found = re.search(r"&quot;label&quot;:&quot;([^&]+)&quot;", text)
                assert found, "a saved chart without a label"
                return found.group(1)
    raise AssertionError(f"{path.name} has no saved chart")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    if not HAVE_CHROMIUM:
        pytest.skip(NO_CHROMIUM)
    ARTIFACTS.mkdir(exist_ok=True)
    tmp = tmp_path_factory.mktemp("tutorials")
    root = tmp / "clone"
    root.mkdir()
    for path in TUTORIALS:  # a copy, byte for byte: this server has no signature for any of them
        shutil.copy(path, root / path.name)
    with jupyter_lab(root, tmp) as opened:
        yield opened


def _visible(elements: list) -> list:
    return [e for e in elements if e.is_displayed()]


@pytest.mark.parametrize("tutorial", [p.name for p in TUTORIALS])
def test_committed_tutorial_shows_its_curves_untrusted_and_charts_trusted(lab: Lab, tutorial: str) -> None:
    charts = saved_charts(REPO / "notebooks" / tutorial)
    assert charts >= 1, f"{tutorial} has no saved chart: was it executed and committed with its outputs?"
    lab.open(f"lab/tree/{tutorial}", kernel=False)
    pictures = lab.wait_for(  # the last output rendered: every saved picture is on the page
        lambda: found if len(found := _visible(lab.css(PICTURE))) == charts else None,
        60,
        f"{charts} static chart picture(s) in {tutorial}",
    )
    assert WIDGET_ERROR not in lab.outputs_text()
    assert not lab.css(FRAME) and not lab.css(".opd-chart"), "an untrusted notebook kept a script or frame"
    for picture in pictures:
        assert lab.driver.execute_script("return arguments[0].naturalWidth", picture) > 100
    hints = [p for p in lab.css(".jp-OutputArea-output") if "trust the notebook" in p.text]
    assert len(hints) >= charts, "each chart says how to make it interactive"
    scroll_to(lab, pictures[0], "start")
    lab.driver.save_screenshot(str(ARTIFACTS / f"tutorial_{Path(tutorial).stem}_untrusted.png"))

    # The notebook's panel takes the focus (the palette's target): a click on the first cell's prompt
    # area, not its middle, where a tutorial's link to another notebook would open that one instead.
    first = lab.css(".jp-Notebook .jp-Cell .jp-InputPrompt")[0]
    scroll_to(lab, first)
    first.click()
    lab.wait_for(
        lambda: lab.driver.execute_script(
            "return document.activeElement && !!document.activeElement.closest('.jp-Notebook')"
        ),
        15,
        "the notebook to take the focus",
    )
    lab.trust_notebook()
    ours = job_ids(REPO / "notebooks" / tutorial)
    # trusting saves it (with saveState on, JupyterLab writes an empty widget state, which the tutorials
    # are committed with): what is on disk is still the committed file, byte for byte
    saved = REPO / "notebooks" / tutorial
    lab.wait_for(
        lambda: (lab.root / tutorial).read_bytes() == saved.read_bytes(), 15, f"{tutorial} unchanged"
    )

    def drawn() -> list | None:
        """This notebook's frames (not one left from the previous page), once each has drawn its chart.
        A frame drawn while its output was still being laid out reports a tiny page; Chromium runs an
        offscreen sandboxed frame's animation frames only once it is scrolled into view, as a reader's
        scrolling does, so each frame still short is brought into view."""
        frames = [
            f
            for f in _visible(lab.css(FRAME))
            if any(job in (f.get_attribute("srcdoc") or "") for job in ours)
        ]
        short = [f for f in frames if f.size["height"] <= 100]
        for frame in short:
            lab.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", frame)
        return frames if len(frames) == charts and not short else None

    frames = lab.wait_for(drawn, 90, f"{charts} interactive chart(s) in trusted {tutorial}")
    assert not _visible(lab.css(PICTURE)), "the static pictures hide where the chart runs"
    tip, legend, _ = hover_frame(lab, frames[0], ARTIFACTS / f"tutorial_{Path(tutorial).stem}_trusted.png")
    assert "step" in tip and first_chart_label(REPO / "notebooks" / tutorial) in legend, legend
    assert lab.offsite_requests() == []
