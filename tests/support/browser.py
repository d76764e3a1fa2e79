"""Headless Chromium, driven through chromedriver, for the status page: Debian's `chromium` and
`chromium-driver` (the test command installs them where it can). Selenium's own driver download
is never used: the test names both programs, and this machine reaches no browser mirror."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="chromium and chromium-driver (Debian's packages) are not installed",
)


@dataclass(frozen=True)
class PageLoad:
    console_errors: list[str]
    states: list[str]
    """`data-state` of every slot the page shows, in page order."""
    title: str


@contextmanager
def chromium(profile: Path) -> Iterator[webdriver.Chrome]:
    assert CHROMIUM is not None and CHROMEDRIVER is not None
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in a container: the sandbox needs user namespaces
        "--disable-gpu",
        "--disable-dev-shm-usage",
        # Without these Chromium calls home at start, and this machine refuses every such call.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def load(driver: webdriver.Chrome, url: str, *, screenshot: Path | None = None) -> PageLoad:
    """Open `url` and read what a person would see; blocking (run it in a thread)."""
    driver.get(url)
    states = [
        str(e.get_attribute("data-state"))
        for e in driver.find_elements(By.CSS_SELECTOR, "a.slot[data-state]")
    ]
    if screenshot is not None:
        driver.save_screenshot(str(screenshot))
    logs = driver.get_log("browser")  # type: ignore[no-untyped-call]
    errors = [str(e["message"]) for e in logs if e["level"] == "SEVERE"]
    return PageLoad(console_errors=errors, states=states, title=driver.title)
