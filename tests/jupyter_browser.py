"""A JupyterLab server (which serves Notebook 7 too) and a headless Chromium on it, for the browser tests.

Chromium resolves no host but 127.0.0.1 (browser_driver.NO_NETWORK). The server gets its own settings,
config, runtime and data dirs under the test's tmp dir, so nothing of the user's Jupyter setup (trusted
notebook signatures included) is read or written; its config dir holds binder/'s labconfig, the setting
a Binder session runs with (widget state saved with the notebook).
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@contextlib.contextmanager
def jupyter_lab(root: Path, tmp: Path, *, window: str = "1400,2400") -> Iterator[Lab]:
    """JupyterLab on `root` (Notebook 7's pages are served by the same server) and Chromium on it."""
    import httpx

    settings, config = tmp / "lab-settings", tmp / "jcfg"
    write_settings(settings, config)
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
