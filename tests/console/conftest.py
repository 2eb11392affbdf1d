"""A server with its console, and one headless Chromium (Selenium + Debian's chromedriver)
shared by every browser test, so the suite starts the browser once."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import metrics_url
from tests.conftest import ServerProcess
from weir.client import Client


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server of the module's own with the HTTP endpoint (and so the console) on."""
    srv = ServerProcess(tmp_path_factory.mktemp("console"), "--metrics-listen", "127.0.0.1:0")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def console_url(console_server: ServerProcess) -> str:
    return metrics_url(console_server) + "/console"


@pytest.fixture(scope="module")
def client(console_server: ServerProcess) -> Iterator[Client]:
    c = Client(console_server.endpoint)
    yield c
    c.close()


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: CONSOLE_SHOTS (to refresh docs/images; not WEIR_...: the
    server refuses WEIR_ variables it does not know), else a scratch dir."""
    named = os.environ.get("CONSOLE_SHOTS")
    if named:
        Path(named).mkdir(parents=True, exist_ok=True)
        return Path(named)
    return tmp_path_factory.mktemp("console-screenshots")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Chromium with its console log readable (get_log("browser"))."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_bin = shutil.which("chromedriver")
    if chromium is None or driver_bin is None:
        pytest.fail(
            "the console's browser tests need chromium and chromedriver "
            "(Debian: apt-get install chromium chromium-driver; .ci/run does)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--disable-extensions",
        "--no-first-run",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_bin))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
