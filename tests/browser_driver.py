"""Headless Chromium for the browser tests, with no network: no host but 127.0.0.1 resolves, so a page
that works here needs nothing from a CDN (Binder, air-gapped machines and CI have none)."""

from __future__ import annotations

import shutil
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
HAVE_CHROMIUM = bool(CHROMIUM and DRIVER)
NO_CHROMIUM = "needs Debian packages chromium and chromium-driver"
NO_NETWORK = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"


def notebook_doc(cells: list[str]) -> dict:
    """A notebook (nbformat 4) of unexecuted code cells on the python3 kernel."""
    return {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c}
            for c in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def chromium(*extra: str, window: str = "1200,900") -> Any:
    """A selenium Chrome driver (headless, no network, the browser console logged)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        NO_NETWORK,
        *extra,
    ):
        opts.add_argument(arg)
    opts.add_argument(f"--window-size={window}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(DRIVER), options=opts)
