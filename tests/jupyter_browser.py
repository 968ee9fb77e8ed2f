"""A JupyterLab server (which serves Notebook 7 too) and a headless Chromium on it, for the browser tests.

Chromium resolves no host but 127.0.0.1 (browser_driver.NO_NETWORK). The server gets its own settings,
config, runtime and data dirs under the test's tmp dir, so nothing of the user's Jupyter setup (trusted
notebook signatures included) is read or written; its config dir holds binder/'s labconfig, the setting
a Binder session runs with (widget state saved with the notebook), and says whether our save hook
(``opd_nb.notebook.save_hook``) runs: the package's own ``jupyter-config`` file, or the extension
turned off (a server from another environment).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from browser_driver import chromium

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(__file__).parent / "artifacts"
IDLE = ".jp-Notebook-ExecutionIndicator[data-status='idle']"
WIDGET_ERROR = "Error displaying widget"
LOSS_PANEL = 'svg.opd-panel[data-metric="actor/distillation/loss"]'  # a point every step


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_server_config(config: Path, *, save_hook: bool) -> None:
    """The package's server config (our save hook on), or that extension turned off; the config dir
    is read last, so this decides whichever the environment installed."""
    server_d = config / "jupyter_server_config.d"
    server_d.mkdir(parents=True, exist_ok=True)
    shipped = REPO / "jupyter-config" / "jupyter_server_config.d" / "opd_nb.json"
    if save_hook:
        shutil.copy(shipped, server_d / "opd_nb.json")
    else:
        (config / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"jpserver_extensions": {"opd_nb.notebook.save_hook": False}}})
        )


def write_settings(settings: Path, config: Path) -> None:
    """No virtual scrolling (all cells in the DOM), no news/update pop-ups, and the notebook's own
    kernel without a "Select Kernel" dialog: on a loaded machine that dialog came up after the test had
    stopped looking for it and blocked Run All (the config form then timed out; failure.png showed it).
    The widget manager's settings come from binder/, as a Binder session has them."""
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text(json.dumps({"windowingMode": "none", "autoStartDefaultKernel": True}))
    notif = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notif.parent.mkdir(parents=True, exist_ok=True)
    notif.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    labconfig = config / "labconfig"
    labconfig.mkdir(parents=True, exist_ok=True)
    shutil.copy(
        REPO / "binder" / "default_setting_overrides.json", labconfig / "default_setting_overrides.json"
    )


@dataclass
class Lab:
    """A running server and the browser on it."""

    root: Path
    port: int
    token: str
    driver: Any
    log: Path

    def url(self, path: str) -> str:
        """A page of the server; JupyterLab's own pages reset its workspace (only this notebook open)."""
        reset = "reset&" if path.startswith("lab/") else ""
        return f"http://127.0.0.1:{self.port}/{path}?{reset}token={self.token}"

    def api(self, method: str, path: str) -> Any:
        import httpx

        r = httpx.request(method, f"http://127.0.0.1:{self.port}/api/{path}?token={self.token}", timeout=30)
        r.raise_for_status()
        return r.json() if r.content else None

    def wait_for(self, fn: Callable[[], Any], timeout: float, what: str) -> Any:
        """`fn()` once it is truthy; a failure saves failure.png and says what was awaited."""
        end = time.monotonic() + timeout
        last = None
        while time.monotonic() < end:
            try:
                last = fn()
                if last:
                    return last
            except Exception as exc:  # element not there yet / went stale
                last = exc
            time.sleep(0.25)
        self.driver.save_screenshot(str(ARTIFACTS / "failure.png"))
        raise AssertionError(f"timed out waiting for {what} (last: {last!r})")

    def css(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def open(self, path: str, *, kernel: bool = True) -> None:
        """Load a page (a "leave the page?" prompt is accepted) and wait for its cells (and an idle kernel)."""
        from selenium.common.exceptions import NoAlertPresentException, TimeoutException

        try:
            self.driver.get(self.url(path))
        except TimeoutException:  # a loaded machine: the page may still finish; the waits below decide
            pass
        with contextlib.suppress(NoAlertPresentException):
            self.driver.switch_to.alert.accept()
        self.wait_for(lambda: self.css(".jp-Notebook .jp-Cell"), 60, "the notebook")
        if kernel:
            self.wait_for(lambda: self.css(IDLE), 90, "an idle kernel")
            self.accept_kernel_dialog()

    def accept_kernel_dialog(self) -> None:
        """JupyterLab may ask which kernel to start: accept the notebook's own (python3)."""
        end = time.monotonic() + 15
        while time.monotonic() < end:
            buttons = self.css(".jp-Dialog .jp-mod-accept")
            if buttons:
                buttons[0].click()
                break
            if self.css(IDLE):
                time.sleep(1.0)
                if not self.css(".jp-Dialog"):
                    break
            time.sleep(0.25)
        self.wait_for(lambda: self.css(IDLE), 90, "an idle kernel")

    def trust_notebook(self) -> None:
        """Command Palette > Trust Notebook, then accept the dialog (what the untrusted hint line says).
        The notebook's panel must have the focus (click a cell first)."""
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        def shown() -> Any:  # the palette's input is in the page while closed too: wait until it shows
            return next((b for b in self.css(".lm-CommandPalette-input") if b.is_displayed()), None)

        for attempt in range(3):  # a shortcut pressed while the page is still settling can be lost
            ActionChains(self.driver).key_down(Keys.CONTROL).key_down(Keys.SHIFT).send_keys("c").key_up(
                Keys.SHIFT
            ).key_up(Keys.CONTROL).perform()
            try:
                box = self.wait_for(shown, 5, "the command palette")
                break
            except AssertionError:
                if attempt == 2:
                    raise
        box.send_keys("Trust Notebook")
        self.wait_for(
            lambda: self.css(".lm-CommandPalette-item.lm-mod-active"), 10, "the Trust Notebook command"
        )
        box.send_keys(Keys.ENTER)
        self.wait_for(lambda: self.css(".jp-Dialog .jp-mod-accept"), 10, "the trust dialog")[0].click()

    def menu(self, *labels: str) -> None:
        """Click through the menu bar, as a user would (Run > Run All Cells)."""
        from selenium.webdriver.common.by import By

        top, *items = labels
        self.wait_for(
            lambda: self.driver.find_element(
                By.XPATH, f"//div[contains(@class,'lm-MenuBar-itemLabel') and text()='{top}']"
            ),
            30,
            f"the {top} menu",
        ).click()
        for label in items:
            self.wait_for(
                lambda label=label: self.driver.find_element(
                    By.XPATH, f"//div[contains(@class,'lm-Menu-itemLabel') and text()='{label}']"
                ),
                10,
                label,
            ).click()

    def save(self, name: str) -> dict:
        """File > Save Notebook; returns the file once it is written with every output."""
        path = self.root / name
        before = path.stat().st_mtime_ns
        self.menu("File", "Save Notebook")
        self.wait_for(lambda: path.stat().st_mtime_ns != before, 30, f"{name} to be saved")
        time.sleep(0.5)
        return json.loads(path.read_text())

    def shut_down_kernels(self) -> None:
        """Every kernel of the server shut down (the REST call the Kernel menu makes)."""
        for kernel in self.api("GET", "kernels"):
            self.api("DELETE", f"kernels/{kernel['id']}")
        self.wait_for(lambda: self.api("GET", "kernels") == [], 30, "the kernels to shut down")

    def outputs_text(self) -> str:
        return "\n".join(o.text for o in self.css(".jp-OutputArea-output"))

    def offsite_requests(self) -> list[str]:
        """What the page fetched from anywhere but this server (should be nothing)."""
        return self.driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
            ".filter(u => !/^(http:\\/\\/127\\.0\\.0\\.1[:/]|data:|blob:|about:)/.test(u))"
        )


def scroll_to(lab: Lab, element: Any, block: str = "center") -> None:
    """Scroll `element` into view and wait until it sits still inside the window (no fixed sleep: a
    smooth scroll or a late layout on a loaded machine takes as long as it takes)."""
    lab.driver.execute_script(f"arguments[0].scrollIntoView({{block: '{block}'}})", element)
    where = (
        "const r = arguments[0].getBoundingClientRect();"
        "return r.height > 0 && r.top < window.innerHeight && r.bottom > 0 ? Math.round(r.top) : null"
    )
    seen: list[int] = []

    def still() -> bool:
        top = lab.driver.execute_script(where, element)
        seen.append(top)
        return top is not None and seen[-2:] == [top, top]

    lab.wait_for(still, 15, "the element to scroll into view")


@contextlib.contextmanager
def inside(lab: Lab, frame: Any):  # noqa: ANN202
    lab.driver.switch_to.frame(frame)
    try:
        yield
    finally:
        lab.driver.switch_to.default_content()


def hover(lab: Lab, root: Any, shot: Path) -> str:
    """Hover the middle of the chart's first panel; returns the tooltip's text (step and value)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    def hovered() -> str:
        chart = root() if callable(root) else root
        panel = chart.find_element(By.CSS_SELECTOR, LOSS_PANEL)
        ActionChains(lab.driver).move_to_element_with_offset(panel, 10, 0).perform()
        tip = chart.find_element(By.CSS_SELECTOR, ".opd-tip")
        text = tip.text if tip.is_displayed() else ""
        return text if "step" in text and any(c.isdigit() for c in text) else ""

    tip = lab.wait_for(hovered, 30, "a tooltip on hover")
    (root() if callable(root) else root).screenshot(str(shot))
    return tip


def hover_frame(lab: Lab, frame: Any, shot: Path) -> tuple[str, str, float]:
    """Hover the chart inside a snapshot's frame: (tooltip, legend text, frame height - page height)."""
    from selenium.webdriver.common.by import By

    scroll_to(lab, frame)
    outer = frame.size["height"]
    with inside(lab, frame):
        tip = hover(lab, lambda: lab.driver.find_element(By.CSS_SELECTOR, ".opd-chart"), shot)
        legend = lab.driver.find_element(By.CSS_SELECTOR, ".opd-legend").text
        page = lab.driver.execute_script(
            "return document.getElementById('opd-chart').getBoundingClientRect().height"
        )
    return tip, legend, outer - page


@contextlib.contextmanager
def jupyter_lab(root: Path, tmp: Path, *, window: str = "1400,2400", save_hook: bool = True) -> Iterator[Lab]:
    """JupyterLab on `root` (Notebook 7's pages are served by the same server) and Chromium on it;
    `save_hook`: our server extension on, as the package installs it (else off)."""
    import httpx

    settings, config = tmp / "lab-settings", tmp / "jcfg"
    write_settings(settings, config)
    write_server_config(config, save_hook=save_hook)
    port, token = free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "JUPYTER"))}
    env.update(
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "ws"),
        JUPYTER_CONFIG_DIR=str(config),
        JUPYTER_RUNTIME_DIR=str(tmp / "jrt"),
        JUPYTER_DATA_DIR=str(tmp / "jdata"),  # trusted-notebook signatures: this run's own
        DASHSCOPE_API_KEY="local",
    )
    log = tmp / "lab.log"
    with open(log, "wb") as out:
        lab = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                f"--port={port}",
                "--ip=127.0.0.1",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
                "--ServerApp.open_browser=False",
                "--allow-root",
                "--LabApp.news_url=None",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            ],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    driver = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (
                    httpx.get(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=1).status_code
                    == 200
                ):
                    break
            assert lab.poll() is None, log.read_text()[-2000:]
            time.sleep(0.3)
        driver = chromium(
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={tmp / 'chrome'}",
            window=window,
        )
        driver.set_page_load_timeout(120)
        yield Lab(root=root, port=port, token=token, driver=driver, log=log)
    finally:
        if driver is not None:
            driver.quit()
        lab.terminate()
        try:
            lab.wait(15)
        except subprocess.TimeoutExpired:
            lab.kill()


def probe_widgets(lab: Lab, probe: str) -> None:
    """Run the probe cell alone until its widget renders, before any job is submitted.

    Once, on a loaded machine, every widget of the run said "Error displaying widget: model not
    found" (failure.png): the kernel's widget messages reached a page whose widget manager was not
    listening yet, and the page never gets them again. A reload builds a new manager, which asks the
    kernel for its live widgets; the probe shows whether it listens before Run All submits anything."""
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    def probe_state() -> str | None:
        cell = lab.css(".jp-Notebook .jp-Cell")[0]
        text = " ".join(o.text for o in cell.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output"))
        return "broken" if WIDGET_ERROR in text else "ok" if probe in text else None

    def probe_ran() -> bool:
        """The prompt says ``[*]`` or ``[1]``: the kernel took the cell (a keystroke can be lost)."""
        text = lab.driver.find_element(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .jp-InputPrompt").text
        return "*" in text or any(ch.isdigit() for ch in text)

    def settle(fn, timeout: float):  # noqa: ANN001, ANN202
        """``wait_for`` without the failure: the probe decides what a miss means."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with contextlib.suppress(Exception):  # not rendered yet / went stale
                if found := fn():
                    return found
            time.sleep(0.25)
        return None

    for attempt in range(4):
        # a click can land while a dialog or a toast still covers the cell: try again until it takes
        lab.wait_for(
            lambda: (
                lab.driver.find_element(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .jp-InputPrompt").click()
                or True
            ),
            30,
            "a cell to take a click",
        )
        ActionChains(lab.driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
        if not settle(probe_ran, 20):
            continue  # the keystroke went nowhere: press it again
        # On a loaded CI machine (pytest at 2,100 s) the first import of ipywidgets took over 60 s.
        state = settle(probe_state, 180)
        if state == "ok":
            return
        lab.driver.save_screenshot(str(ARTIFACTS / f"probe_{state or 'silent'}_{attempt}.png"))
        lab.driver.refresh()
        with contextlib.suppress(NoAlertPresentException):
            lab.driver.switch_to.alert.accept()  # "leave the page?" for the unsaved probe output
        lab.wait_for(
            lambda: lab.css(".jp-Notebook-ExecutionIndicator[data-status='idle']"), 90, "an idle kernel"
        )
    raise AssertionError("the probe widget never rendered: the page's widget manager did not hear the kernel")


# WCAG contrast of every visible text inside an element (and the same-origin frames in it): the text's
# colour, faded by the opacities above it, over the backgrounds it sits on composited bottom up (a
# translucent tint over the host's page colour). Large text (24px, or 18.66px bold) needs 3:1, other 4.5:1.
_CONTRAST_JS = r"""
const root = arguments[0];
const parse = c => {
  const m = (c || '').match(/rgba?\(([^)]+)\)/);
  if (!m) return null;
  const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
  return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
};
const over = (top, under) => [0, 1, 2].map(i => top[i] * top[3] + under[i] * (1 - top[3])).concat([1]);
const up = e => e.parentElement || (e.ownerDocument.defaultView.frameElement || null);
function background(el) {
  const layers = [];
  for (let e = el; e; e = up(e)) {
    const c = parse(getComputedStyle(e).backgroundColor);
    if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
  }
  let bg = [255, 255, 255, 1];
  for (let i = layers.length - 1; i >= 0; i--) bg = over(layers[i], bg);
  return bg;
}
function opacity(el) { let o = 1; for (let e = el; e; e = up(e)) o *= parseFloat(getComputedStyle(e).opacity); return o; }
const lum = c => {
  const f = v => { v /= 255; return v <= 0.04045 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
};
const bad = []; let checked = 0;
function walk(top) {
  const doc = top.ownerDocument;
  const it = doc.createTreeWalker(top, NodeFilter.SHOW_TEXT);
  while (it.nextNode()) {
    const t = it.currentNode, el = t.parentElement;
    if (!el || !t.textContent.trim() || ['STYLE', 'SCRIPT', 'TITLE'].includes(el.tagName)) continue;
    const r = el.getBoundingClientRect(), st = getComputedStyle(el);
    if (r.width === 0 || r.height === 0 || st.visibility === 'hidden' || el.closest('[hidden],details:not([open]) > :not(summary)')) continue;
    const inSvg = el.closest('svg') !== null;
    const fg = parse(inSvg ? st.fill : st.color);
    if (!fg) continue;
    const bg = background(el);
    const text = over([fg[0], fg[1], fg[2], fg[3] * opacity(el)], bg);
    const [hi, lo] = [lum(text), lum(bg)].sort((a, b) => b - a);
    const ratio = (hi + 0.05) / (lo + 0.05);
    const size = parseFloat(st.fontSize), bold = parseInt(st.fontWeight) >= 700;
    const need = size >= 24 || (size >= 18.66 && bold) ? 3 : 4.5;
    checked++;
    if (ratio < need) bad.push(`${ratio.toFixed(2)} < ${need}: "${t.textContent.trim().slice(0, 40)}" `
      + `rgb(${text.slice(0, 3).map(Math.round)}) on rgb(${bg.slice(0, 3).map(Math.round)}) <${el.tagName.toLowerCase()} class="${el.className && el.className.baseVal !== undefined ? el.className.baseVal : el.className}">`);
  }
  for (const f of top.querySelectorAll('iframe')) {
    let inner = null;
    try { inner = f.contentDocument && f.contentDocument.body; } catch (e) { inner = null; }
    if (inner) walk(inner);
  }
}
walk(root);
return [checked, bad];
"""


def contrast_failures(lab: Lab, element: Any) -> tuple[int, list[str]]:
    """(texts checked, those under WCAG AA) inside `element` as the page shows it now."""
    checked, bad = lab.driver.execute_script(_CONTRAST_JS, element)
    return int(checked), list(bad)


def set_theme(lab: Lab, theme: str) -> None:
    """JupyterLab's theme setting (what Settings > Theme writes), through the server's settings API;
    the next page load uses it."""
    import httpx

    r = httpx.put(
        f"http://127.0.0.1:{lab.port}/lab/api/settings/@jupyterlab/apputils-extension:themes?token={lab.token}",
        json={"raw": json.dumps({"theme": theme})},
        timeout=30,
    )
    r.raise_for_status()
