"""Headless Chromium (Debian's `chromium` + `chromium-driver`) driven by selenium, for the dashboard's tests.

This machine has no network: without the flags below Chromium tries to reach Google's services (component
updates, sync, QUIC probes) and stalls on those connections. Each browser gets a fresh profile directory.
`missing()` says why a browser test cannot run here (the test skips with that reason; `make system-deps`
installs the packages where it can).

Selenium's calls block: tests whose sim and dashboard run in their own event loop call them through
`asyncio.to_thread`, so the servers keep answering while the browser waits.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("EDGEAGENT_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("EDGEAGENT_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,900")


def missing() -> str:
    """Why a real browser cannot be driven here, or "" when it can."""
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[test]')"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return f"{path} not found: install Debian's {package} package (make system-deps does, as root)"
    return ""


@contextmanager
def chromium(window: tuple[int, int] = (1280, 900)) -> Iterator[Any]:
    """A selenium WebDriver on a fresh headless Chromium; quit (and its profile removed) on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = Path(tempfile.mkdtemp(prefix="edgeagent-chromium-"))
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={window[0]},{window[1]}")
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
