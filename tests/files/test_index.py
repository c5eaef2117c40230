"""FileIndex on every store backend (the embedded SQLite store and a real XTDB node): ids,
versions, content-hash dedup, valid times, moves, deletion, compare-and-set between writers."""

from __future__ import annotations

import os
from pathlib import Path

from context_os.files import FileIndex, Workspace
from context_os.store import Store


def test_index_lifecycle(store: Store, root: Path) -> None:
    ws = Workspace(root)
    idx = FileIndex(store, ws)
    f = root / "a.txt"
    f.write_text("one\n")
    os.utime(f, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    new = idx.index(ws.resolve("a.txt"), read=True, cause="read")
    assert new.status == "new" and new.changes == ("created",) and new.id.startswith("file:")
    assert new.version.valid_time == 1_700_000_000_000 and new.content == "one\n"
    assert idx.index(ws.resolve("a.txt"), read=True, cause="read").status == "already indexed"
    assert idx.lookup(ws.resolve("a.txt")).id == new.id

    f.write_text("two\n")
    changed = idx.index(ws.resolve("a.txt"), read=True, cause="read")
    assert (changed.status, changed.changes, changed.meta["version"]) == ("new version", ("content",), 2)
    assert "-one\n+two\n" in changed.meta["diff"]

    os.rename(f, root / "b.txt")
    moved = idx.refresh(new.id, ws.resolve("b.txt"), cause="tracker")
    assert moved is not None and moved.changes == ("path",) and moved.meta["path"] == "b.txt"
    assert moved.meta["renamed_from"] == "a.txt" and idx.lookup(ws.resolve("b.txt")).id == new.id
    assert idx.lookup(root.resolve() / "a.txt") is None

    (root / "b.txt").unlink()
    gone = idx.refresh(new.id, None, cause="tracker", reason="deleted")
    assert gone is not None and gone.meta["missing"] and gone.content is None and gone.changes == ("missing",)
    assert idx.refresh(new.id, None, cause="tracker").status == "already indexed"

    (root / "b.txt").write_text("three\n")
    back = idx.index(ws.resolve("b.txt"), read=True, cause="read")
    assert back.id == new.id and back.changes == ("recreated", "content")
    assert back.content == "three\n" and not back.meta["missing"]
    history = store.history(new.id)
    assert [v.doc["meta"]["version"] for v in history] == [1, 2, 3, 4, 5]
    assert [v.valid_time for v in history] == sorted(v.valid_time for v in history)
    assert {v.id for v in idx.indexed()} == {new.id}


def test_two_writers_record_one_change_once(store: Store, root: Path) -> None:
    ws = Workspace(root)
    first, second = FileIndex(store, ws), FileIndex(store, ws)
    (root / "c.txt").write_text("c1\n")
    oid = first.index(ws.resolve("c.txt"), read=True, cause="read").id
    (root / "c.txt").write_text("c2\n")
    a = first.index(ws.resolve("c.txt"), read=True, cause="read")
    b = second.index(ws.resolve("c.txt"), read=True, cause="tracker")
    assert (a.status, b.status) == ("new version", "already indexed")
    assert len(store.history(oid)) == 2


def test_a_move_over_another_file_marks_that_one_replaced(store: Store, root: Path) -> None:
    ws = Workspace(root)
    idx = FileIndex(store, ws)
    (root / "x.txt").write_text("x\n")
    (root / "y.txt").write_text("y\n")
    x = idx.index(ws.resolve("x.txt"), read=True, cause="read").id
    y = idx.index(ws.resolve("y.txt"), read=True, cause="read").id
    os.replace(root / "x.txt", root / "y.txt")
    idx.refresh(x, ws.resolve("y.txt"), cause="tracker")
    assert idx.lookup(ws.resolve("y.txt")).id == x
    assert idx.latest(y).doc["meta"]["missing_reason"] == f"replaced by {x}"
