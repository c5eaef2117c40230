"""Fixtures for the file tests: a real workspace directory, a real SQLite store beside it (never
inside it), sessions, file tools, and a started watchdog tracker."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from context_os import Session
from context_os.context.policy import RetentionPolicy
from context_os.files import FileTools, FileTracker, Workspace
from context_os.store.sqlite import SqliteStore
from tests.helpers import EAGER, wait_for

T = TypeVar("T")

WATCHDOG_RACE_WARNING = "ignore:Callback with id:RuntimeWarning"
"""watchdog's inotify thread warns when a new directory's watch is added twice (it races with
itself on ``mkdir -p``); harmless, but under ``filterwarnings = error`` it would kill that
thread. Tests that run a tracker ignore exactly this warning."""


def metas(db: SqliteStore, oid: str) -> list[dict[str, Any]]:
    """The meta of every version of ``oid``, oldest first (read slightly ahead of the clock)."""
    return [v.doc["meta"] for v in db.history(oid, with_docs=True) if v.doc]


def latest_meta(db: SqliteStore, oid: str) -> dict[str, Any]:
    v = db.get(oid, valid_time=int(time.time() * 1000) + 1000)
    assert v is not None and v.doc is not None
    return v.doc["meta"]


def index(tracker: FileTracker, root: Path, rel: str, text: str | None = None) -> str:
    if text is not None:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return tracker.index.index(tracker.workspace.resolve(rel), read=True, cause="read").id


def restore(backup: Path, dest: Path, text: str, *, move: bool) -> None:
    """A backup of ``text`` made an hour ago comes over ``dest``: copied with its times kept
    (``cp -p``, ``rsync -a``, ``tar x``), or moved there (``mv``); either way ``dest``'s mtime is an
    hour old, and only its ctime says when it came."""
    backup.write_text(text)
    os.utime(backup, (time.time() - 3600,) * 2)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if move:
        os.replace(backup, dest)
    else:
        shutil.copy2(backup, dest)


def wait_version(db: SqliteStore, oid: str, n: int, what: str = "") -> dict:
    return wait_for(lambda: (m := latest_meta(db, oid))["version"] >= n and m, what=what or f"{oid} v{n}")


def flushed(tracker: FileTracker, db: SqliteStore, root: Path) -> None:
    """Change a sentinel file and wait for its version: events are dispatched in order, so every
    earlier event has then been seen and reconciled."""
    sentinel = root / ".sentinel"
    known = tracker.index.lookup(root.resolve() / ".sentinel")
    oid = known.id if known is not None else index(tracker, root, ".sentinel", "0")
    n = latest_meta(db, oid)["version"]
    sentinel.write_text(str(n + 1))
    wait_version(db, oid, n + 1, "the sentinel")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "ws"
    r.mkdir()
    return r


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "store.db")
    yield s
    s.close()


@pytest.fixture
def ws(root: Path) -> Workspace:
    return Workspace(root)


@pytest.fixture
def session(db: SqliteStore) -> Session:
    return Session.open(db, "s1", harness="openai", policy=RetentionPolicy(**EAGER))


@pytest.fixture
def tools(session: Session, ws: Workspace) -> FileTools:
    return FileTools(session, ws)


@pytest.fixture
def tracker(db: SqliteStore, ws: Workspace) -> Iterator[FileTracker]:
    t = FileTracker(db, ws, rescan_interval=None).start()
    yield t
    t.stop()
