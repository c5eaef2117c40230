"""What the harness tests share: ``db``, a real SQLite store in the test's directory (the replay
tests' fixture: a test module's own ``db`` overrides it)."""

from __future__ import annotations

from tests.replay.conftest import db

__all__ = ["db"]
