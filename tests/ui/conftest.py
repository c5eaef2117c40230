"""Fixtures of the web view's tests: recorded sessions, a real server on loopback, a real
headless Chromium.

Under ``CI=true`` a browser that cannot be found or installed fails the tests that need it;
elsewhere they are skipped with the reason (``scripts/browser.sh`` says how to install it)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from context_os.server.ui import make_ui_server
from context_os.store import Store
from context_os.store.sqlite import SqliteStore
from tests.helpers import unavailable
from tests.ui.browser import BrowserUnavailable, chrome
from tests.ui.recorded import record_demo, record_long


@pytest.fixture(scope="session")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite store holding the whole bundled session (88 turns) as ``demo``."""
    path = tmp_path_factory.mktemp("ui-demo") / "store.db"
    with SqliteStore(path) as store:
        record_demo(store, "demo")
    return path


@pytest.fixture(scope="session")
def long_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite store holding a 50,000-message session of 200 turns as ``long``."""
    path = tmp_path_factory.mktemp("ui-long") / "store.db"
    with SqliteStore(path) as store:
        record_long(store, "long")
    return path


@pytest.fixture
def serve() -> Iterator[Callable[[Store], str]]:
    """Start the web view of a store on a free loopback port; its base URL (stopped at the end)."""
    servers = []

    def start(store: Store) -> str:
        httpd = make_ui_server(store, 0)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium for the run."""
    try:
        driver = chrome(tmp_path_factory.mktemp("chromium-profile"))
    except BrowserUnavailable as e:  # pragma: no cover - depends on the machine
        unavailable("Chromium", e)
    try:
        yield driver
    finally:
        driver.quit()
