"""Fixtures of the proxy tests: a scripted provider (``up``) and the proxy in front of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.proxy.running import OPEN, Running
from tests.proxy.upstream import Upstream, upstream


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while OPEN:
        OPEN.pop().close()


@pytest.fixture
def up() -> Iterator[Upstream]:
    with upstream(replies=["first answer here", "second answer here"]) as u:
        yield u


@pytest.fixture
def proxy(tmp_path: Path, up: Upstream) -> Iterator[Running]:
    running = Running(tmp_path, up)
    yield running
    running.close()
