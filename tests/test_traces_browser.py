"""The trajectory view in a saved notebook with no kernel and no network: a notebook that opens a
finished reward job's traces and its rollout viewer is executed and exported with `jupyter nbconvert
--execute --to html`; Chromium (no host resolves) opens the export, "expand all" opens every span row,
a row shows the reward span's score and metrics, "only slow or failed spans" hides the rest, and in the
saved rollout viewer a clicked sample shows its trajectory, whose span rows open on a click.
A second test opens the live widget in JupyterLab (a kernel) and opens a span there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser_driver import HAVE_CHROMIUM, NO_CHROMIUM, chromium, notebook_doc

pytestmark = [pytest.mark.slow, pytest.mark.browser]
ARTIFACTS = Path(__file__).parent / "artifacts"
OFFLINE = ["--HTMLExporter.require_js_url=", "--HTMLExporter.mathjax_url="]
# As JupyterLab saves a notebook by default: outputs, but no widget state (so the snapshot is what shows).
NO_WIDGET_STATE = "--ExecutePreprocessor.store_widget_state=False"
_REMOTE = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=[\"']((?:https?:)?//[^\"']+)", re.I)


def _notebook(api_base: str, job_id: str) -> dict:
    cells = [
        "%load_ext opd_nb",
        f"%opd use local --base-url {api_base}",
        f"%opd traces {job_id} --kind train",
        f"%opd rollouts {job_id} --kind train",
    ]
    return notebook_doc(cells)


@pytest.mark.skipif(not HAVE_CHROMIUM, reason=NO_CHROMIUM)
def test_the_saved_trajectory_view_opens_span_by_span_with_no_kernel(
    tmp_path: Path, finished_job, local_server
) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    ARTIFACTS.mkdir(exist_ok=True)
    job = finished_job("reward")
    nb = tmp_path / "traces.ipynb"
    nb.write_text(json.dumps(_notebook(local_server.api_base, job.job_id)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHSCOPE_")}
    env["DASHSCOPE_API_KEY"] = "local"
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--execute", NO_WIDGET_STATE, *OFFLINE, str(nb),
         "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (tmp_path / "traces.html").read_text(encoding="utf-8")
    assert _REMOTE.findall(page) == [] and "invoke_reward" in page
    driver = chromium(window="1300,1600")
    try:
        driver.get((tmp_path / "traces.html").as_uri())
        view = next(s for s in driver.find_elements(By.CSS_SELECTOR, ".opd-snap") if "traces of" in s.text)
        rows = view.find_elements(By.CSS_SELECTOR, "details.opd-span")
        assert rows and not any(r.get_attribute("open") for r in rows)
        view.find_element(By.CSS_SELECTOR, "[data-act=open]").click()
        assert all(r.get_attribute("open") for r in rows)
        reward = next(r for r in rows if "invoke_reward" in r.find_element(By.TAG_NAME, "summary").text)
        assert "reward score" in reward.text and "reward metrics" in reward.text
        view.find_element(By.CSS_SELECTOR, "[data-act=close]").click()
        assert not any(r.get_attribute("open") for r in rows)
        view.find_element(By.CSS_SELECTOR, "[data-act=only]").click()
        shown = [r for r in rows if r.is_displayed()]
        assert all(r.get_attribute("data-flags") for r in shown)  # only slow or failed spans stay
        view.screenshot(str(ARTIFACTS / "trajectory_exported.png"))
        viewer = next(
            s for s in driver.find_elements(By.CSS_SELECTOR, ".opd-snap") if "rollouts of" in s.text
        )
        row = viewer.find_elements(By.CSS_SELECTOR, "tbody tr[data-sample]")[-1]
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)
        row.click()
        pane = viewer.find_element(
            By.CSS_SELECTOR, f'.opd-sample[data-sample="{row.get_attribute("data-sample")}"]'
        )
        assert pane.is_displayed() and "trajectory" in pane.text
        span = pane.find_element(By.CSS_SELECTOR, "details.opd-span summary")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", span)
        span.click()
        assert pane.find_element(By.CSS_SELECTOR, "details.opd-span").get_attribute("open")
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == [], errors
    finally:
        driver.quit()


@pytest.mark.skipif(not HAVE_CHROMIUM, reason=NO_CHROMIUM)
def test_the_live_trajectory_view_in_jupyterlab(tmp_path: Path, finished_job, local_server) -> None:  # noqa: ANN001
    """JupyterLab with a kernel: `%opd traces` on a finished reward job renders its widget; a click on the
    reward span opens it, with nothing fetched from beyond 127.0.0.1."""
    import time

    from jupyter_browser import jupyter_lab, probe_widgets
    from selenium.webdriver.common.by import By
    from test_browser import PROBE

    ARTIFACTS.mkdir(exist_ok=True)
    job = finished_job("reward")
    root = tmp_path / "nb"
    root.mkdir()
    cells = [f"import ipywidgets\nipywidgets.Label({PROBE!r})", "%load_ext opd_nb",
             f"%opd use local --base-url {local_server.api_base}", f"%opd traces {job.job_id} --kind train"]  # fmt: skip
    (root / "live.ipynb").write_text(json.dumps(notebook_doc(cells)))
    with jupyter_lab(root, tmp_path, window="1400,1800") as lab:
        lab.open("lab/tree/live.ipynb")
        probe_widgets(lab, PROBE)
        for _ in range(3):  # the rest of the cells, one Shift+Enter each, as a user steps through them
            lab.driver.switch_to.active_element.send_keys("\ue008\ue007")  # Shift+Enter
            time.sleep(1.0)
        view = lab.wait_for(
            lambda: lab.driver.find_element(By.CSS_SELECTOR, ".opd-trajectory-view"), 180, "the view"
        )
        lab.wait_for(lambda: "invoke_reward RewardProcessor" in view.text, 60, "the reward spans")
        row = next(
            r for r in view.find_elements(By.CSS_SELECTOR, "details.opd-span") if "invoke_reward" in r.text
        )
        lab.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)
        row.find_element(By.TAG_NAME, "summary").click()
        lab.wait_for(lambda: row.get_attribute("open") and "reward score" in row.text, 20, "the span's pane")
        view.screenshot(str(ARTIFACTS / "trajectory_live.png"))
        assert lab.offsite_requests() == []
