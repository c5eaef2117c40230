"""A headless Chromium for the web view's tests and screenshots: the system's browser (Debian's
``chromium`` package, found or installed by ``scripts/browser.sh``) driven through its own
chromedriver by Selenium. Nothing is downloaded at run time: Selenium Manager is kept offline,
and the browser resolves no host but the loopback server under test."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class BrowserUnavailable(RuntimeError):
    """No Chromium and chromedriver could be found or installed."""


def browser_paths() -> tuple[str, str]:
    """(chromium, chromedriver), installing Debian's packages first if needed."""
    done = subprocess.run(
        [str(ROOT / "scripts" / "browser.sh")], capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        raise BrowserUnavailable(done.stderr.strip() or f"scripts/browser.sh exited {done.returncode}")
    chromium, driver = done.stdout.strip().splitlines()[-1].split()
    return chromium, driver


def chrome(profile: Path, *, width: int = 1280, height: int = 800) -> Any:
    """A headless Chromium session (a Selenium ``WebDriver``) with its console log kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a browser or driver
    chromium, driver = browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        f"--user-data-dir={profile}",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1 , EXCLUDE localhost",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


def console_errors(driver: Any) -> list[str]:
    """The browser console's errors since the last call (CSP violations and failed loads too)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
