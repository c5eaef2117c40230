"""What the replay tests share: a real SQLite store in the test's directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from context_os.store.sqlite import SqliteStore


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "s.db")
    yield s
    s.close()
