"""FileIndex on every store backend (the embedded SQLite store and a real XTDB node): ids,
versions, content-hash dedup, valid times, moves, deletion, compare-and-set between writers."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from context_os.files import FileIndex, Workspace
from context_os.files.index import Indexed, claim_id
from context_os.hashing import verify_doc
from context_os.store import Store, open_store
from context_os.store.base import MAX_CLOCK_WAIT_MS, next_valid_time


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


def test_two_processes_indexing_one_new_file_at_once_make_one_object(store: Store, root: Path) -> None:
    """Two MCP servers on one store read the same new files at once: 7 of 30 got two objects each
    (the creation matched nothing), and the one a later read did not find stayed at version 1."""
    ws = Workspace(root)
    other = open_store(store.url)  # another process's client of the same store
    first, second = FileIndex(store, ws), FileIndex(other, ws)
    (root / "n.txt").write_text("n\n")
    path = ws.resolve("n.txt")
    made: list[Indexed] = []
    looked = first._moved_here

    def meanwhile(p: Path) -> object:  # the first found no object at the path: the other makes one now
        if not made:
            made.append(second.index(p, read=True, cause="read"))
        return looked(p)

    first._moved_here = meanwhile  # type: ignore[method-assign]
    try:
        got = first.index(path, read=True, cause="read")
    finally:
        other.close()
    assert made[0].status == "new" and (got.id, got.status) == (made[0].id, "already indexed")
    assert [v.id for v in store.find("file", {"abs_path": str(path)})] == [got.id]
    # a move to a path is a claim too: a file moved where another process made one is one object there
    os.rename(path, root / "m.txt")
    moved = first.refresh(got.id, ws.resolve("m.txt"), cause="tracker")
    assert moved is not None and moved.changes == ("path",)
    assert first.index(ws.resolve("m.txt"), read=True, cause="read").id == got.id


def test_a_paths_claim_verifies_like_every_document(store: Store, root: Path) -> None:
    """The claim a new file (or a move) writes carried no hashes: `ctxos verify` called every
    store that had indexed a file damaged (content_hash, meta_hash, object_hash do not match)."""
    ws = Workspace(root)
    idx = FileIndex(store, ws)
    (root / "c.txt").write_text("c\n")
    before = ws.resolve("c.txt")
    got = idx.index(before, read=True, cause="read")
    os.rename(root / "c.txt", root / "d.txt")
    after = ws.resolve("d.txt")
    assert idx.refresh(got.id, after, cause="tracker") is not None
    claims = [claim_id(str(before)), claim_id(str(after))]
    for i in [*claims, got.id]:
        assert store.history(i), i
        for v in store.history(i):
            assert v.doc is not None and verify_doc(v.doc) == [], i


def test_a_move_claims_the_path_as_read_before_it_looks_for_objects_there(store: Store, root: Path) -> None:
    """``mv a.txt b.txt`` then a change to b.txt: one process's tracker records the move while
    another process reads b.txt, which it cannot know for a.txt's file (its bytes changed), and
    makes a new object of it. The move read the path's claim after looking for objects at b.txt:
    one made between the two looks was neither marked replaced nor in the way of the write, and
    b.txt had two objects for good."""
    ws = Workspace(root)
    other = open_store(store.url)  # another process's client of the same store
    first, second = FileIndex(store, ws), FileIndex(other, ws)
    (root / "a.txt").write_text("A\n")
    oid = first.index(ws.resolve("a.txt"), read=True, cause="read").id
    os.rename(root / "a.txt", root / "b.txt")
    with open(root / "b.txt", "a") as f:
        f.write("more\n")
    dest = ws.resolve("b.txt")
    made: list[Indexed] = []
    looked = store.find

    def find(kind: str, where: dict, *args: object, **kwargs: object) -> object:
        found = looked(kind, where, *args, **kwargs)
        if where == {"abs_path": str(dest)} and not made:  # the mover found nothing there: the other reads it now
            made.append(second.index(dest, read=True, cause="read"))
        return found

    store.find = find  # type: ignore[method-assign]
    try:
        moved = first.refresh(oid, dest, cause="tracker")
    finally:
        del store.find
        other.close()
    assert made[0].status == "new" and made[0].id != oid
    assert moved is not None and moved.version.doc is not None and moved.version.doc["meta"]["path"] == "b.txt"
    at = [v for v in store.find("file", {"abs_path": str(dest)}) if v.doc and not v.doc["meta"]["missing"]]
    assert [v.id for v in at] == [oid]
    gone = store.get(made[0].id)
    assert gone is not None and gone.doc is not None and gone.doc["meta"]["missing_reason"] == f"replaced by {oid}"


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


class FrozenClock:
    """Wall-clock time that stands still until something sleeps: two writes then always fall in
    one millisecond, which real clocks do only now and then (the read-after-write race)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.ns = time.time_ns()
        monkeypatch.setattr(time, "time_ns", lambda: self.ns)
        monkeypatch.setattr(time, "sleep", self.sleep)

    def sleep(self, seconds: float) -> None:
        self.ns += max(1, int(seconds * 1e9))


def test_a_file_recreated_within_the_millisecond_of_its_deletion_is_in_its_history(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from context_os.store.sqlite import SqliteStore

    with SqliteStore(tmp_path / "clock.db") as store:
        ws = Workspace(root)
        idx = FileIndex(store, ws)
        f = root / "r.txt"
        f.write_text("one\n")
        os.utime(f, ns=(1_700_000_000_000_000_000,) * 2)
        oid = idx.index(ws.resolve("r.txt"), read=True, cause="read").id
        FrozenClock(monkeypatch)
        f.unlink()
        gone = idx.refresh(oid, None, cause="tracker")
        f.write_text("two\n")
        back = idx.index(ws.resolve("r.txt"), read=True, cause="read")
        assert gone is not None and back.version.valid_time == gone.version.valid_time + 1
        # read right away, "as of now": the newest version is there
        assert [v.doc["meta"]["version"] for v in store.history(oid) if v.doc] == [1, 2, 3]
        assert store.get(oid).doc["content"] == "two\n"
        assert idx.lookup(ws.resolve("r.txt")).id == oid


def test_a_read_right_after_any_write_sees_it(store: Store, root: Path) -> None:
    """The same race on the real clock, many times, on every store."""
    ws = Workspace(root)
    idx = FileIndex(store, ws)
    f = root / "flip.txt"
    f.write_text("0\n")
    oid = idx.index(ws.resolve("flip.txt"), read=True, cause="read").id
    for n in range(1, 41):
        f.unlink()
        assert idx.refresh(oid, None, cause="tracker").meta["missing"]
        assert store.get(oid).doc["meta"]["missing"]
        f.write_text(f"{n}\n")
        back = idx.index(ws.resolve("flip.txt"), read=True, cause="read")
        assert store.get(oid).doc["content"] == f"{n}\n" == back.content
        newest = store.history(oid, "desc", with_docs=False)[0]
        assert (newest.valid_time, newest.tx_id) == (back.version.valid_time, back.version.tx_id)


def test_next_valid_time_waits_the_clock_out_but_not_for_ever(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FrozenClock(monkeypatch)
    now = clock.ns // 1_000_000
    assert next_valid_time() == now
    assert next_valid_time(now - 5) == now
    assert next_valid_time(now) == now + 1 and clock.ns // 1_000_000 == now + 1  # it waited
    assert next_valid_time(now - 10, at=now - 20) == now - 9  # a past time stays past
    assert next_valid_time(at=clock.ns // 1_000_000 + 3_600_000) == clock.ns // 1_000_000  # one ahead: now
    far = clock.ns // 1_000_000 + MAX_CLOCK_WAIT_MS + 50
    before = clock.ns
    assert next_valid_time(far) == far + 1 and clock.ns == before  # a clock far ahead: no wait


def test_a_same_bytes_stat_corrects_the_version_in_force(store: Store, root: Path) -> None:
    """``refresh(record_stat=True)`` (the tracker's) of a file rewritten with the same bytes: no
    new version; the version in force gets the new size, mtime and inode, as a correction at its
    own valid time, so a read as of the earlier transaction (a frame's) still sees the old one.
    ``restats_batched`` writes many such corrections together; one that a writer changed
    meanwhile is left out (its new version is what holds), the others are written."""
    ws = Workspace(root)
    idx = FileIndex(store, ws)
    for name in ("a.py", "b.py", "c.py"):
        (root / name).write_text(f"{name}\n")
    a, b, c = (idx.index(ws.resolve(n), read=True, cause="read") for n in ("a.py", "b.py", "c.py"))

    def rewrite(name: str) -> str:
        (root / f"{name}.tmp").write_bytes((root / name).read_bytes())
        os.replace(root / f"{name}.tmp", root / name)  # a new inode
        st = os.stat(root / name)
        return f"{st.st_dev}:{st.st_ino}"

    inode = rewrite("a.py")
    assert idx.refresh(a.id, ws.resolve("a.py"), cause="tracker").version == a.version  # by default: nothing
    done = idx.refresh(a.id, ws.resolve("a.py"), cause="tracker", record_stat=True)
    assert done is not None and done.status == "already indexed"
    now = store.get(a.id)
    assert now is not None and now.doc is not None and now.valid_time == a.version.valid_time
    assert (now.doc["meta"]["inode"], now.doc["meta"]["version"], now.doc["content"]) == (inode, 1, "a.py\n")
    assert len(store.history(a.id)) == 1
    old = store.get(a.id, a.version.valid_time, a.version.tx_id)
    assert old is not None and old.doc == a.version.doc
    assert idx.refresh(a.id, ws.resolve("a.py"), cause="tracker", record_stat=True).version == now  # as seen

    inodes = {n: rewrite(n) for n in ("b.py", "c.py")}
    before = store.latest_tx_id()
    with idx.restats_batched():
        for obj in (b, c):
            idx.refresh(obj.id, ws.resolve(obj.meta["path"]), cause="tracker", record_stat=True)
        assert store.latest_tx_id() == before  # (queued)
    got = [store.get(o.id) for o in (b, c)]
    assert [v.doc["meta"]["inode"] for v in got] == [inodes["b.py"], inodes["c.py"]]
    assert got[0].tx_id == got[1].tx_id  # one transaction

    inodes = {n: rewrite(n) for n in ("b.py", "c.py")}
    with idx.restats_batched():
        for obj in (b, c):
            idx.refresh(obj.id, ws.resolve(obj.meta["path"]), cause="tracker", record_stat=True)
        (root / "b.py").write_text("b changed\n")  # another writer records b meanwhile
        assert idx.index(ws.resolve("b.py"), read=True, cause="read").status == "new version"
    assert store.get(b.id).doc["content"] == "b changed\n" and store.get(b.id).doc["meta"]["version"] == 2
    assert store.get(c.id).doc["meta"]["inode"] == inodes["c.py"]
