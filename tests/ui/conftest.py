"""Fixtures of the web view's tests: recorded sessions, a real server on loopback, a real
headless Chromium.

Under ``CI=true`` a browser that cannot be found or installed fails the tests that need it;
elsewhere they are skipped with the reason (``scripts/browser.sh`` says how to install it)."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.harness import OpenAIHook
from context_os.replay import demo_transcript
from context_os.replay.run import replay_transcript
from context_os.server.ui import make_ui_server
from context_os.store import Store
from context_os.store.sqlite import SqliteStore
from tests.ui.browser import BrowserUnavailable, chrome


def record_demo(store: Store, session_id: str, messages: int | None = None) -> str:
    """Replay the bundled session (its first ``messages`` only, if given) into ``store``."""
    t = demo_transcript()
    if messages is not None:
        t = dataclasses.replace(t, messages=t.messages[:messages])
    with Session.open(store, session_id, harness=t.harness, workspace=t.cwd) as session:
        replay_transcript(t, session, verify="none")
    return session_id


def record_long(store: Store, session_id: str, messages: int = 50_000, per_turn: int = 250) -> str:
    """A session of ``messages`` messages: a user message and ``per_turn`` tool calls and results
    per turn (each turn collapses the last one's results)."""
    with Session.open(store, session_id) as session:
        hook = OpenAIHook(session)
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a test agent."}]
        k = 0
        while len(msgs) < messages:
            msgs.append({"role": "user", "content": f"step {k}: look at item {k}"})
            for j in range(per_turn // 2 - 1):
                cid = f"call_{k}_{j}"
                call = {"id": cid, "type": "function", "function": {"name": "bash", "arguments": '{"command":"ls"}'}}
                msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
                msgs.append({"role": "tool", "tool_call_id": cid, "content": f"output {k}.{j} " + "lorem ipsum " * 40})
            hook.transform_context(msgs)
            msgs.append({"role": "assistant", "content": f"done with {k}"})
            k += 1
    return session_id


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
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Chromium could not be found or installed under CI=true: {e}")
        pytest.skip(f"Chromium not available: {e}")
    try:
        yield driver
    finally:
        driver.quit()
