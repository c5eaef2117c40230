"""The watchdog tracker on real directories with a real observer. Nothing here asserts a
duration: every check polls the store until the expected version shows up (or times out)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from context_os.context.frames import frame_docs, verify_frame
from context_os.context.load import object_states
from context_os.files import FileIndex, FileTools, FileTracker, Trackers, Workspace
from context_os.files.workspace import FileSnapshot
from context_os.harness.openai import OpenAIHook
from context_os.store.sqlite import SqliteStore
from tests.files.conftest import WATCHDOG_RACE_WARNING, flushed, index, latest_meta, metas, restore, wait_version
from tests.helpers import blocks_text, call, result, user, wait_for

pytestmark = pytest.mark.filterwarnings(WATCHDOG_RACE_WARNING)


def versions(db: SqliteStore, oid: str) -> int:
    return len(metas(db, oid))


def test_an_edit_on_disk_becomes_a_new_version_with_mtime_as_valid_time(root, db, tracker) -> None:
    oid = index(tracker, root, "app.py", "x = 1\n")
    (root / "app.py").write_text("x = 2\n")
    meta = wait_version(db, oid, 2)
    assert meta["cause"] == "tracker" and "-x = 1\n+x = 2\n" in meta["diff"]
    first, v = db.history(oid)
    st = os.stat(root / "app.py")
    changed = max(st.st_mtime_ns, st.st_ctime_ns) // 1_000_000  # (the ctime: see the test below)
    assert v.valid_time == max(changed, first.valid_time + 1, first.tx_time + 1)
    assert db.get(oid).doc["content"] == "x = 2\n"


@pytest.mark.parametrize("how", ["cp -p", "mv"])
def test_a_file_restored_or_moved_over_is_valid_from_when_it_came_not_from_its_mtime(root, db, tracker, how) -> None:
    """``cp -p``, ``rsync -a``, ``tar x`` keep a file's old mtime, and ``mv`` brings the mtime of
    where its bytes were written. Its text was made valid from that mtime (or just after the old
    version's valid time), so a read as of when the agent was shown the old text gave the new."""
    (root / "app.py").write_text("x = 1\n")
    os.utime(root / "app.py", (time.time() - 86_400,) * 2)  # last changed yesterday
    oid = index(tracker, root, "app.py")
    shown = db.history(oid)[-1].tx_time  # when the agent read it
    time.sleep(0.02)  # (past the kernel clock's tick: the file comes in a millisecond of its own)
    restore(root.parent / "app.py.other", root / "app.py", "came = True\n", move=how == "mv")
    wait_for(lambda: db.get(oid).doc["content"] == "came = True\n", what="the text that came")
    assert db.get(oid, shown).doc["content"] == "x = 1\n"
    assert db.history(oid)[-1].valid_time > shown


def test_saving_identical_bytes_makes_no_version(root, db, tracker) -> None:
    oid = index(tracker, root, "same.txt", "same\n")
    before = tracker.stats["reconciled"]
    (root / "same.txt").write_text("same\n")
    wait_for(lambda: tracker.stats["reconciled"] > before, what="the tracker to look at the file")
    flushed(tracker, db, root)
    assert versions(db, oid) == 1


def test_a_file_rewritten_with_the_same_bytes_is_not_read_again_by_every_rescan(root, db, tracker) -> None:
    """``touch``, ``sed -i`` that matched nothing, ``rm -rf`` then ``git checkout``: same bytes,
    new mtime or inode. No version, and the tracker takes the new stat as the file's, so the
    periodic rescan does not re-read and re-hash such files for as long as it runs."""
    touched = index(tracker, root, "touched.py", "t = 1\n")
    rewritten = index(tracker, root, "rewritten.py", "r = 1\n")
    seen = tracker.stats["reconciled"]
    os.utime(root / "touched.py", ns=(0, os.stat(root / "touched.py").st_mtime_ns + 5_000_000_000))
    (root / "rewritten.py.tmp").write_text("r = 1\n")
    os.replace(root / "rewritten.py.tmp", root / "rewritten.py")  # what sed -i does: a new inode
    wait_for(lambda: tracker.stats["reconciled"] > seen, what="the tracker to look at the rewritten file")
    flushed(tracker, db, root)
    assert tracker.rescan() == 0
    before = tracker.stats["reconciled"]
    assert tracker.rescan() == 0
    assert tracker.stats["reconciled"] == before, "a rescan read unchanged files again"
    assert versions(db, touched) == 1 and versions(db, rewritten) == 1


def test_a_same_bytes_rewrite_is_kept_as_the_stat_of_the_version_in_force(root, db, ws, session) -> None:
    """The new stat of a file rewritten with the same bytes is written to the store (a correction
    of the version in force: no new version), so the next ``start()`` does not read and hash it
    again (1,885 such files took 1.5 s of every start on a real repository). A session showing
    the file does not see it stale, and its frames still re-render byte for byte."""
    tools = FileTools(session, ws)
    hook = OpenAIHook(session, files=tools)
    (root / "a.py").write_text("A = 1\n")
    oid = tools.read("a.py")["id"]
    msgs = [user("look"), call("r1", "read", path="a.py"), result("r1", "read")]
    hook.transform_context(msgs)
    (root / "a.py.tmp").write_text("A = 1\n")
    os.replace(root / "a.py.tmp", root / "a.py")  # sed -i matching nothing: a new inode
    with FileTracker(db, ws, rescan_interval=None) as t:
        assert t.stats["reconciled"] == 1  # read once, found the same
    st = os.stat(root / "a.py")
    meta = latest_meta(db, oid)
    assert (meta["version"], meta["inode"], meta["mtime"]) == (1, f"{st.st_dev}:{st.st_ino}", st.st_mtime_ns // 10**6)
    assert versions(db, oid) == 1
    with FileTracker(db, ws, rescan_interval=None) as t:
        assert t.stats["reconciled"] == 0, "a start read the unchanged file again"
    msgs.append(user("and now?"))
    shown = blocks_text(hook.transform_context(msgs))
    assert f'<object id="{oid}" kind="file" path="a.py" version="1">' in shown and "stale=" not in shown
    frames = frame_docs(db, session.id)
    assert len(frames) == 2 and all(verify_frame(db, f).ok for f in frames)


def test_a_start_after_a_checkout_of_same_bytes_writes_their_stats_in_one_transaction(root, db, ws) -> None:
    """Files rewritten with the same bytes while no tracker ran (a checkout, a formatter): the
    next start() corrects each one's stat in batches, not in a transaction each (1,885 files on a
    real repository; on an XTDB node a transaction is a round trip)."""
    idx = FileIndex(db, ws)
    ids = []
    for n in range(5):
        (root / f"f{n}.py").write_text(f"N = {n}\n")
        ids.append(idx.index(ws.resolve(f"f{n}.py"), read=True, cause="read").id)
    for n in range(5):
        (root / f"f{n}.py.tmp").write_text(f"N = {n}\n")
        os.replace(root / f"f{n}.py.tmp", root / f"f{n}.py")
    before = db.latest_tx_id()
    with FileTracker(db, ws, rescan_interval=None) as t:
        assert t.stats["reconciled"] == 5
    assert db.latest_tx_id() == before + 1
    for n, oid in enumerate(ids):
        st = os.stat(root / f"f{n}.py")
        assert (latest_meta(db, oid)["inode"], versions(db, oid)) == (f"{st.st_dev}:{st.st_ino}", 1)


def test_a_file_rewritten_with_the_same_bytes_then_moved_while_no_tracker_ran_stays_one_object(root, db, ws) -> None:
    """A formatter or checkout rewrote the file with the same bytes (a new inode and mtime) while a
    tracker ran; it was moved once none ran. The object is known at its new path by the stat the
    tracker saw last, not the one of its first version: before, it became a new object."""
    with FileTracker(db, ws, rescan_interval=None) as t:
        oid = index(t, root, "a.py", "A = 1\n")
        (root / "a.py.tmp").write_text("A = 1\n")
        os.replace(root / "a.py.tmp", root / "a.py")
        assert t.rescan() == 0
    os.rename(root / "a.py", root / "b.py")
    with FileTracker(db, ws, rescan_interval=None) as t:
        assert latest_meta(db, oid)["missing"] is True
        assert index(t, root, "b.py") == oid
        meta = latest_meta(db, oid)
        assert (meta["path"], meta["renamed_from"], meta["missing"]) == ("b.py", "a.py", False)


def test_a_file_rewritten_with_the_same_bytes_or_touched_then_moved_while_no_tracker_ran_stays_one_object(
    root, db, ws
) -> None:
    """A same-bytes rewrite in place (or a ``touch``) and then a move, both while no tracker ran:
    nothing recorded the new mtime, so the inode, size and mtime last recorded no longer match.
    The same inode holding the same bytes is that file. Before, it became a new object, the old
    one staying missing; also in library use without any tracker (a read of the new name)."""
    idx = FileIndex(db, ws)
    ids = {}
    for name in ("a.py", "t.py", "lib.py", "linked.py", "edited.py"):
        (root / name).write_text(f"# {name}\n")
        ids[name] = idx.index(ws.resolve(name), read=True, cause="read").id
    later = os.stat(root / "a.py").st_mtime_ns + 5_000_000_000
    (root / "a.py").write_text("# a.py\n")  # the same bytes, in place: the same inode
    os.utime(root / "a.py", ns=(later, later))
    os.utime(root / "t.py", ns=(later, later))  # touch
    os.utime(root / "lib.py", ns=(later, later))
    os.utime(root / "linked.py", ns=(later, later))
    (root / "edited.py").write_text("# other bytes\n")  # the same inode, other bytes
    os.utime(root / "edited.py", ns=(later, later))
    for name in ("a.py", "t.py", "edited.py"):
        os.rename(root / name, root / f"moved-{name}")
    # library use: no tracker, the new name read while the object is still at its old path
    os.rename(root / "lib.py", root / "moved-lib.py")
    assert idx.index(ws.resolve("moved-lib.py"), read=True, cause="read").id == ids["lib.py"]
    assert latest_meta(db, ids["lib.py"])["renamed_from"] == "lib.py"
    # a hard link is another name of a file still at its own path: a file of its own there
    os.link(root / "linked.py", root / "link2.py")
    assert idx.index(ws.resolve("link2.py"), read=True, cause="read").id != ids["linked.py"]
    with FileTracker(db, ws, rescan_interval=None) as t:
        for name in ("a.py", "t.py", "edited.py"):
            assert latest_meta(db, ids[name])["missing"] is True
            assert latest_meta(db, ids[name])["last_sha"] is not None
        for name in ("a.py", "t.py"):
            assert index(t, root, f"moved-{name}") == ids[name]
            meta = latest_meta(db, ids[name])
            assert (meta["path"], meta["renamed_from"], meta["missing"]) == (f"moved-{name}", name, False)
        # other bytes in that inode: not known to be that file
        assert index(t, root, "moved-edited.py") != ids["edited.py"]


def test_an_empty_file_deleted_is_not_the_new_empty_file_that_gets_its_inode(root, db, ws) -> None:
    """Empty bytes tell no file from another: ``rm pkg/__init__.py; touch app/__init__.py`` (the
    file system gives the new file the freed inode, as ext4 does) makes a new object, whether the
    old one was recorded missing or not, and the deleted one stays deleted. Only an unchanged
    stat (a move) keeps an empty file's object. That the new file gets the freed inode is made
    certain here (a file system may give it another): the file is moved and given other times,
    which leaves the disk as the delete and the new file do, to what the index reads (the old
    path gone; the new one empty, in that inode, with a later mtime)."""
    idx = FileIndex(db, ws)
    (root / "pkg").mkdir()
    (root / "app").mkdir()
    olds, news = [], []
    for n in range(2):
        (root / "pkg" / f"e{n}.py").write_bytes(b"")
        olds.append(idx.index(ws.resolve(f"pkg/e{n}.py"), read=True, cause="read").id)
    st = os.stat(root / "pkg" / "e0.py")
    os.replace(root / "pkg" / "e0.py", root / "app" / "e0.py")  # still recorded present: no tracker ran
    later = st.st_mtime_ns + 5_000_000_000
    os.utime(root / "app" / "e0.py", ns=(later, later))
    news.append(idx.index(ws.resolve("app/e0.py"), read=True, cause="read").id)
    os.replace(root / "pkg" / "e1.py", root / "app" / "e1.py")
    os.utime(root / "app" / "e1.py", ns=(later, later))
    with FileTracker(db, ws, rescan_interval=None):  # records it missing (last_inode, last_sha)
        assert latest_meta(db, olds[1])["missing"] is True
    news.append(idx.index(ws.resolve("app/e1.py"), read=True, cause="read").id)
    for old, new in zip(olds, news, strict=True):
        assert new != old
        assert latest_meta(db, old)["path"].startswith("pkg/")


def test_a_same_bytes_stat_is_taken_only_once_the_file_looks_settled(root, db, ws) -> None:
    """As a new version is: a file changed a moment ago may be mid-write, and its stat, once
    kept, is what every later start compares the disk with."""
    (root / "a.py").write_text("A = 1\n")
    t = FileTracker(db, ws, rescan_interval=None, debounce=3600, max_delay=3600).start()
    try:
        oid = index(t, root, "a.py")
        first = latest_meta(db, oid)
        os.utime(root / "a.py", ns=(time.time_ns(), time.time_ns()))  # changed "just now"
        seen = t.stats["reconciled"]
        t.request_rescan("test")  # in the tracker's thread, which checks what it reads
        wait_for(lambda: t.stats["reconciled"] > seen and not t._busy, what="the rescan to look at the file")
        rec = t._records[oid]
        assert (rec.mtime, rec.inode) == (first["mtime"], first["inode"])
        assert latest_meta(db, oid) == first
    finally:
        t.stop()  # stopping takes what is there
    assert latest_meta(db, oid)["mtime"] == os.stat(root / "a.py").st_mtime_ns // 10**6


def test_a_touch_is_seen_at_once_and_a_chmod_reads_nothing(root, db, ws) -> None:
    """A change of times only (``touch``, ``cp -p``) is an event: a discovered (metadata-only)
    file gets its new version at once, a read one keeps its new stat (and is known by it when
    moved while no tracker runs). Before, the observer dropped these events: the version came
    with the next rescan (30 s), or never without one. A ``chmod`` changes no stat the store
    keeps: the file is not read again."""
    (root / "found.txt").write_text("found\n")
    (root / "a.py").write_text("A = 1\n")
    with FileTracker(db, ws, rescan_interval=None) as t:
        found = t.index.index(ws.resolve("found.txt"), read=False, cause="discovered").id
        oid = index(t, root, "a.py")
        flushed(t, db, root)
        for name in ("found.txt", "a.py"):
            st = os.stat(root / name)
            os.utime(root / name, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        mtime = os.stat(root / "a.py").st_mtime_ns // 10**6
        assert wait_version(db, found, 2)["mtime"] == os.stat(root / "found.txt").st_mtime_ns // 10**6
        wait_for(lambda: latest_meta(db, oid)["mtime"] == mtime, what="the touched file's new stat")
        assert versions(db, oid) == 1
        reads: list[str] = []
        snapshot = ws.snapshot

        def counted(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            reads.append(str(path))
            return snapshot(path, *args, **kwargs)

        ws.snapshot = counted  # type: ignore[method-assign]
        os.chmod(root / "a.py", 0o600)
        flushed(t, db, root)
        assert not [p for p in reads if p.endswith("a.py")], "a chmod read the file again"
    os.rename(root / "a.py", root / "b.py")
    with FileTracker(db, ws, rescan_interval=None) as t:
        assert index(t, root, "b.py") == oid


def test_rename_keeps_the_id_also_across_directories(root, db, tracker) -> None:
    oid = index(tracker, root, "src/util.py", "def f(): pass\n")
    os.rename(root / "src" / "util.py", root / "src" / "helpers.py")
    assert wait_for(lambda: latest_meta(db, oid)["path"] == "src/helpers.py", what="rename")
    (root / "lib" / "deep").mkdir(parents=True)  # a directory created after tracking started
    os.rename(root / "src" / "helpers.py", root / "lib" / "deep" / "helpers.py")
    meta = wait_for(lambda: (m := latest_meta(db, oid))["path"] == "lib/deep/helpers.py" and m, what="move")
    assert meta["renamed_from"] == "src/helpers.py" and not meta["missing"]
    assert [m["path"] for m in metas(db, oid)] == ["src/util.py", "src/helpers.py", "lib/deep/helpers.py"]
    (root / "lib" / "deep" / "helpers.py").write_text("def f(): return 1\n")
    assert wait_version(db, oid, 4)["path"] == "lib/deep/helpers.py"


def test_a_moved_file_read_at_its_new_name_before_the_tracker_saw_the_move_stays_one_object(root, db, tracker) -> None:
    """``mv a.py b.py`` then ``read b.py`` at once, before the tracker's debounce ran out: the
    read finds the object by inode, size and mtime and records the move. Before, ``b.py`` became
    a second object, and the tracker, seeing the move a moment later, marked the object just read
    missing (replaced by the first), while the session showed both."""
    oid = index(tracker, root, "a.py", "x = 1\n")
    os.rename(root / "a.py", root / "b.py")
    assert index(tracker, root, "b.py") == oid
    meta = latest_meta(db, oid)
    assert (meta["path"], meta["renamed_from"], meta["missing"]) == ("b.py", "a.py", False)
    flushed(tracker, db, root)
    assert tracker.index.lookup(root.resolve() / "b.py").id == oid
    assert not latest_meta(db, oid)["missing"] and [v.id for v in tracker.index.indexed()].count(oid) == 1
    assert len([v for v in tracker.index.indexed() if v.doc["meta"]["path"] in ("a.py", "b.py")]) == 1
    # a hard link is another name of a file still at its own: a file of its own there
    os.link(root / "b.py", root / "c.py")
    assert index(tracker, root, "c.py") != oid


def test_a_file_moved_while_no_tracker_ran_is_one_object_at_its_new_name(root, db, ws, session) -> None:
    """``mv a.py b.py`` while the session's process was not running: the next ``start()`` finds
    ``a.py`` gone and records it missing (it cannot know where the file went: nothing walks the
    repository). Reading ``b.py`` then finds the object by the inode, size and mtime it last had,
    and records the move. Before, ``b.py`` became a second object and the first stayed missing,
    the session showing a deleted file and a new one."""
    tools = FileTools(session, ws)
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("A = 1\n")
    oid = json.loads(tools.call("read", {"path": "src/a.py"}))["id"]
    os.rename(root / "src" / "a.py", root / "b.py")
    with FileTracker(db, ws, rescan_interval=None) as tracker:
        assert latest_meta(db, oid)["missing"] is True
        tools = FileTools(session, ws, tracker=tracker)
        out = json.loads(tools.call("read", {"path": "b.py"}))
        assert out["id"] == oid
        meta = latest_meta(db, oid)
        assert (meta["path"], meta["renamed_from"], meta["missing"], meta["version"]) == ("b.py", "src/a.py", False, 3)
        assert tracker.tracked()[oid] == str(root.resolve() / "b.py")
        (root / "b.py").write_text("A = 2\n")
        assert wait_version(db, oid, 4)["path"] == "b.py"
    # a new file that only reuses the name, or a file deleted for good, is not that object, even
    # where the file system gives the new file the freed inode (its bytes differ; the same bytes
    # in the same inode cannot be told from the file moved there, and are taken for it)
    (root / "b.py").unlink()
    (root / "c.py").write_text("A = 3\n")
    with FileTracker(db, ws, rescan_interval=None) as tracker:
        assert latest_meta(db, oid)["missing"] is True
        assert tracker.index.index(ws.resolve("c.py"), read=True, cause="read").id != oid


def test_a_write_through_one_hard_link_is_a_version_of_every_tracked_name(root, db, tracker) -> None:
    """Two names of one file (``ln``) are two objects (each path its own); a write through one
    changes both, but the kernel reports only the name written. Before, the other name kept the
    old text (a session showing it was not told it changed) until the next rescan."""
    (root / "sub").mkdir()
    first = index(tracker, root, "a.py", "A = 1\n")
    os.link(root / "a.py", root / "sub" / "link.py")
    other = index(tracker, root, "sub/link.py")
    assert other != first
    flushed(tracker, db, root)  # (the link's own creation event is taken)
    with open(root / "a.py", "r+") as f:  # in place: the same inode under both names
        f.write("A = 2\n")
    assert wait_version(db, first, 2)["path"] == "a.py"
    assert wait_version(db, other, 2)["path"] == "sub/link.py"
    assert db.get(other).doc["content"] == db.get(first).doc["content"] == "A = 2\n"


def test_a_write_through_an_untracked_hard_link_is_a_version_of_the_tracked_names(root, db, tracker) -> None:
    """``ln a.py b.py`` after ``a.py`` was read, ``b.py`` never indexed: a write in place through
    ``b.py`` is reported under ``b.py`` only, a path no tracked file has. Before, ``a.py`` kept its
    old text until the next rescan (30 s by default; never in this tracker, which has none)."""
    oid = index(tracker, root, "a.py", "A = 1\n")
    os.link(root / "a.py", root / "b.py")
    with open(root / "b.py", "r+") as f:  # in place: the same inode under both names
        f.write("A = 2\n")
    meta = wait_version(db, oid, 2)
    assert (meta["path"], db.get(oid).doc["content"]) == ("a.py", "A = 2\n")
    assert tracker.index.lookup(root.resolve() / "b.py") is None  # still not an object of its own
    # a touch through the untracked name: a new mtime, a new version of a discovered file
    (root / "m.txt").write_text("m\n")
    found = tracker.index.index(tracker.workspace.resolve("m.txt"), read=False, cause="discovered").id
    os.link(root / "m.txt", root / "n.txt")
    flushed(tracker, db, root)  # (the events of its writing are taken)
    assert latest_meta(db, found)["version"] == 1
    later = os.stat(root / "m.txt").st_mtime_ns + 5_000_000_000
    os.utime(root / "n.txt", ns=(later, later))
    assert wait_version(db, found, 2)["mtime"] == later // 1_000_000


@pytest.mark.parametrize("made", ["before", "after"])
@pytest.mark.parametrize("then", ["deleted", "replaced"])
def test_a_write_through_an_untracked_hard_link_gone_at_once_is_a_version_of_the_tracked_name(
    root, db, ws, made, then
) -> None:
    """The untracked name written through is deleted, or replaced by another file, right after
    the write: by the time the tracker looks at the name, it no longer leads to the tracked file.
    Before, the write was never recorded (until a rescan): a session showing ``a.py`` kept its old
    text. The link made before ``a.py`` was read, or after. The tracker's thread is held while
    it all happens, so the events are taken once the name is gone (found by the tracker's model
    test, where it happened at random)."""
    with FileTracker(db, ws, rescan_interval=None) as tracker:
        if made == "before":
            (root / "a.py").write_text("A = 1\n")
            os.link(root / "a.py", root / "b.py")
            oid = index(tracker, root, "a.py")
        else:
            oid = index(tracker, root, "a.py", "A = 1\n")
            os.link(root / "a.py", root / "b.py")
        flushed(tracker, db, root)
        with tracker._cond:  # the observer's thread waits for the lock to handle each event
            with open(root / "b.py", "r+") as f:  # in place: the same inode under both names
                f.write("A = 2\n")
            if then == "deleted":
                (root / "b.py").unlink()
            else:
                (root / "other.py").write_text("other\n")
                os.replace(root / "other.py", root / "b.py")
        meta = wait_version(db, oid, 2)
        assert (meta["path"], db.get(oid).doc["content"]) == ("a.py", "A = 2\n")


def test_two_files_swapped_leave_each_path_with_its_own_text(root, db, tracker) -> None:
    """``mv a tmp; mv b a; mv tmp b``: each path holds the other's bytes. As with an atomic save,
    the path that still holds a file keeps its object: each object has a new version with the
    text now at its path (never the text of the other path), and nothing is missing."""
    a = index(tracker, root, "a.py", "A\n")
    b = index(tracker, root, "b.py", "B\n")
    os.rename(root / "a.py", root / "tmp")
    os.rename(root / "b.py", root / "a.py")
    os.rename(root / "tmp", root / "b.py")
    for oid, path, text in ((a, "a.py", "B\n"), (b, "b.py", "A\n")):
        meta = wait_version(db, oid, 2)
        assert (meta["path"], meta["missing"], db.get(oid).doc["content"]) == (path, False, text)
    flushed(tracker, db, root)
    assert versions(db, a) == versions(db, b) == 2


def test_moving_a_directory_moves_the_files_in_it(root, db, tracker) -> None:
    a = index(tracker, root, "pkg/a.py", "a\n")
    b = index(tracker, root, "pkg/sub/b.py", "b\n")
    shutil.move(root / "pkg", root / "renamed")
    wait_for(lambda: latest_meta(db, a)["path"] == "renamed/a.py", what="a moved")
    wait_for(lambda: latest_meta(db, b)["path"] == "renamed/sub/b.py", what="b moved")


def test_a_file_moved_out_of_a_directory_made_a_moment_before_is_followed(root, db, tracker) -> None:
    """``mkdir d && echo > d/e.txt``, the file read, ``mv d/e.txt x/``: while the observer has not
    added d's watch yet, the move from d sends no event, only the file's arrival in x (reported
    as a creation). The object stayed recorded at d/e.txt, not missing, for good (one run in five
    of this race). Now the arrival is known by the inode, size and mtime the rename kept."""
    for n in range(20):  # (the race is lost in about one try of five)
        (root / f"d{n}").mkdir()
        oid = index(tracker, root, f"d{n}/e.txt", f"text {n}\n")
        (root / f"x{n}").mkdir()
        os.replace(root / f"d{n}/e.txt", root / f"x{n}/c.txt")
        wait_for(lambda: latest_meta(db, oid)["path"] == f"x{n}/c.txt", what=f"the move of d{n}/e.txt")  # noqa: B023
        assert not latest_meta(db, oid).get("missing")


def test_a_file_deleted_in_a_directory_made_a_moment_before_is_recorded_missing(root, db, ws) -> None:
    """``mkdir d && echo > d/e.txt``, the file read, ``rm d/e.txt``: while the observer has not
    added d's watch yet, the deletion sends no event, and the object stayed recorded there, not
    missing, for good without the periodic rescan (one run in three of this race). The
    directory's creation, reported once its watch is in place, now has what is below it looked
    at. (Found gone with no removal reported: missing after ``unreported_wait``.)"""
    with FileTracker(db, ws, rescan_interval=None, unreported_wait=0.2) as tracker:
        for n in range(15):  # (the race is lost in about one try of three)
            (root / f"d{n}").mkdir()
            oid = index(tracker, root, f"d{n}/e.txt", f"text {n}\n")
            (root / f"d{n}/e.txt").unlink()
            wait_for(lambda: latest_meta(db, oid).get("missing"), what=f"d{n}/e.txt missing")  # noqa: B023


def test_a_file_moved_out_of_a_directory_then_moved_with_it_is_where_it_went(root, db, ws) -> None:
    """``mv a/x.py . && mv a b``, ``mv a/sub sub && mv a c``: the directory's move took the files
    it no longer held along by their recorded paths (b/x.py, c/sub/y.py, where nothing is), over
    the moves just seen, and they were recorded missing. (A long debounce: both moves come
    before the tracker looks, as a script's do.)"""
    with FileTracker(db, ws, rescan_interval=None, debounce=0.5, max_delay=1.0) as tracker:
        x = index(tracker, root, "a/x.py", "x\n")
        y = index(tracker, root, "a/sub/y.py", "y\n")
        z = index(tracker, root, "a/z.py", "z\n")
        os.rename(root / "a" / "x.py", root / "x.py")
        os.rename(root / "a" / "sub", root / "sub")
        os.rename(root / "a", root / "b")
        for oid, path in ((x, "x.py"), (y, "sub/y.py"), (z, "b/z.py")):
            meta = wait_version(db, oid, 2)
            assert (meta["path"], meta["missing"]) == (path, False)
        assert not tracker.errors


class _HeldEvents:
    """Holds the observer's events of some kinds (its thread waits) until ``release``, or drops
    them: a lagging observer (a loaded machine; watchdog holds a move's first half up to 0.5 s to
    pair it), or one that never reports them (a watch made too late)."""

    def __init__(self, tracker: FileTracker, kinds: set[str], *, drop: bool = False) -> None:
        self.kinds, self.drop, self.gate, self.real = kinds, drop, threading.Event(), tracker._on_event
        tracker._on_event = self  # (the handler calls the tracker's attribute)

    def __call__(self, event) -> None:
        if event.event_type in self.kinds:
            if self.drop:
                return
            self.gate.wait(30)
        self.real(event)

    def release(self) -> None:
        self.gate.set()


def looked_at(tracker: FileTracker, seen: int) -> bool:
    return tracker.stats["reconciled"] > seen and not tracker._busy


@pytest.mark.parametrize("moved", ["file", "directory"])
def test_a_file_found_gone_before_its_move_is_reported_is_not_recorded_missing_meanwhile(root, db, ws, moved) -> None:
    """The tracker looks at a file for a write (or a periodic rescan does) after it moved, or its
    directory did, but before the observer reports the move: its removal is awaited, and its next
    version is at its new path. Before, it was recorded missing 0.25 s after the look, then found
    at its new path when the move was reported: a version that never was, and a session marked
    the file missing meanwhile (once in CI: ``mv a/x.py . && mv a b``, watchdog holding the first
    move's first half to pair it)."""
    with FileTracker(db, ws, rescan_interval=None) as tracker:
        oid = index(tracker, root, "a/z.py", "z\n")
        flushed(tracker, db, root)
        held = _HeldEvents(tracker, {"moved"})
        try:
            seen = tracker.stats["reconciled"]
            (root / "a" / "z.py").write_text("z = 2\n")
            if moved == "file":
                os.rename(root / "a" / "z.py", root / "a" / "w.py")
            else:
                os.rename(root / "a", root / "b")
            wait_for(lambda: looked_at(tracker, seen), what="the tracker to look at it")
            time.sleep(4 * tracker.missing_grace)  # (before, it was recorded missing by now)
            assert [m["version"] for m in metas(db, oid)] == [1], "recorded missing before its move was reported"
        finally:
            held.release()
        meta = wait_version(db, oid, 2)
        path = "a/w.py" if moved == "file" else "b/z.py"
        assert (meta["path"], meta["missing"], db.get(oid).doc["content"]) == (path, False, "z = 2\n")
        assert not tracker.errors


def test_a_file_whose_removal_is_never_reported_is_recorded_missing_after_a_wait(root, db, ws) -> None:
    """The removal's event never comes (dropped here; a watch made too late): the file is recorded
    missing ``unreported_wait`` after it was found gone, and a deletion reported is recorded
    ``missing_grace`` after."""
    with FileTracker(db, ws, rescan_interval=None, unreported_wait=3.0) as tracker:
        quiet = index(tracker, root, "quiet.py", "q\n")
        told = index(tracker, root, "told.py", "t\n")
        flushed(tracker, db, root)
        _HeldEvents(tracker, {"deleted"}, drop=True)
        seen = tracker.stats["reconciled"]
        (root / "quiet.py").write_text("q = 2\n")  # a write it looks at, after which it is gone
        (root / "quiet.py").unlink()
        wait_for(lambda: looked_at(tracker, seen), what="the tracker to look at it")
        time.sleep(2 * tracker.missing_grace)
        assert latest_meta(db, quiet)["version"] == 1, "recorded missing before its wait was over"
        meta = wait_version(db, quiet, 2)
        assert meta["missing"] and meta["path"] == "quiet.py"
        tracker._on_event = tracker._on_event.real  # deletions reported again
        (root / "told.py").unlink()
        assert wait_version(db, told, 2)["missing"]
        # looked at for its events (a write's three at most) and when due, not every
        # ``missing_grace`` while it waits (12 looks): the deletion reported, twice
        assert tracker.stats["reconciled"] <= seen + 8


def test_delete_marks_missing_keeps_history_and_recreation_is_a_new_version(root, db, tracker) -> None:
    oid = index(tracker, root, "gone.txt", "here\n")
    (root / "gone.txt").unlink()
    meta = wait_version(db, oid, 2)
    assert meta["missing"] is True and meta["missing_reason"] and db.get(oid).doc["content"] is None
    first = db.history(oid)[0]
    assert db.get(oid, first.valid_time, first.tx_id).doc["content"] == "here\n"  # history kept
    (root / "gone.txt").write_text("back\n")
    meta = wait_version(db, oid, 3)
    assert meta["missing"] is False and db.get(oid).doc["content"] == "back\n"
    assert tracker.tracked()[oid] == str(root.resolve() / "gone.txt")


def test_a_deleted_file_re_created_is_not_recorded_empty_before_its_text_is_written(root, db, ws) -> None:
    """A file restored after a delete (a checkout, a slow writer) is created first and written
    after: the tracker waits for the text (at most ``max_delay``) as it does for a truncated file,
    instead of recording an empty version and then the text (a session saw a stale flag for a
    version that never held the file's text)."""
    with FileTracker(db, ws, rescan_interval=None, max_delay=3600) as t:
        oid = index(t, root, "a.py", "A = 1\n")
        (root / "a.py").unlink()
        wait_for(lambda: latest_meta(db, oid)["missing"], what="the file recorded missing")
        fd = os.open(root / "a.py", os.O_CREAT | os.O_WRONLY, 0o644)  # created; its text comes later
        try:
            seen = t.stats["reconciled"]
            wait_for(
                lambda: (t.stats["reconciled"] > seen + 2 and not t._busy) or not latest_meta(db, oid)["missing"],
                what="the tracker to look at it",
            )
            assert latest_meta(db, oid)["missing"] is True, "recorded empty before its text was written"
            os.write(fd, b"A = 2\n")
        finally:
            os.close(fd)
        wait_for(lambda: latest_meta(db, oid)["version"] == 3, what="the re-created file")
        flushed(t, db, root)
    assert [(m["missing"], m.get("size")) for m in metas(db, oid)] == [(False, 6), (True, None), (False, 6)]


def test_an_atomic_save_is_one_version(root, db, tracker) -> None:
    oid = index(tracker, root, "doc.md", "# v1\n")
    tmp = root / ".doc.md.tmp1234"
    tmp.write_text("# v2\n")
    os.replace(tmp, root / "doc.md")
    assert wait_version(db, oid, 2)["path"] == "doc.md"
    flushed(tracker, db, root)
    assert versions(db, oid) == 2 and db.get(oid).doc["content"] == "# v2\n"


def test_a_writer_that_pauses_between_truncating_and_writing_makes_one_version(root, db, tracker) -> None:
    """A slow or descheduled writer: the file is truncated, then written 200 ms later (four times
    the debounce). The tracker waits for the writer to close it: one version with the new text,
    never an empty one in between (it failed under a loaded machine before)."""
    oid = index(tracker, root, "slow.txt", "old\n")
    with open(root / "slow.txt", "w") as f:  # truncates now
        f.flush()
        time.sleep(0.2)
        f.write("new\n")
    meta = wait_version(db, oid, 2)
    flushed(tracker, db, root)
    assert versions(db, oid) == 2 and db.get(oid).doc["content"] == "new\n" and meta["size"] == 4


class DeletedAsRead(Workspace):
    """A workspace whose tracker finds ``doomed`` deleted between its look and its read, once: a
    file removed right after a change (``git stash``, a test's temporary file)."""

    doomed: Path | None = None

    def snapshot(self, path: str | os.PathLike[str], *, read: bool = True) -> FileSnapshot:
        if self.doomed == Path(path) and threading.current_thread().name.startswith("ctxos-file-tracker"):
            self.doomed = None
            os.unlink(path)
        return super().snapshot(path, read=read)


def test_a_file_deleted_as_the_tracker_reads_it_is_missing_and_no_problem(root, db) -> None:
    """It was recorded missing (its delete event came after), but ``tracker.errors`` and the log
    said first that it could not be read (``no such file``): a warning on a server's stderr
    for every tracked file deleted right after a change."""
    ws = DeletedAsRead(root)
    with FileTracker(db, ws, rescan_interval=None) as tracker:
        oid = index(tracker, root, "tmp.txt", "a\n")
        ws.doomed = root.resolve() / "tmp.txt"
        (root / "tmp.txt").write_text("b\n")
        assert wait_version(db, oid, 2)["missing"] is True
        assert ws.doomed is None and not tracker.errors


def test_a_file_emptied_then_written_by_a_second_writer_makes_one_version(root, db) -> None:
    """Two writers: one truncates the file and closes it, another writes it 300 ms later (six
    times the debounce). The close says nothing is being written, yet an empty file that was not
    empty is only recorded once it stays so for ``max_delay`` (here far longer than the test):
    one version with the new text. Before, the empty file was a version of its own."""
    (root / "twice.txt").write_text("old\n")
    ws = Workspace(root)
    oid = FileIndex(db, ws).index(ws.resolve("twice.txt"), read=True, cause="read").id
    with FileTracker(db, ws, rescan_interval=None, max_delay=60.0) as tracker:
        (root / "twice.txt").write_text("")
        wait_for(lambda: tracker.stats["reconciled"] >= 1, what="the tracker to look at the empty file")
        time.sleep(0.3)
        (root / "twice.txt").write_text("new\n")
        meta = wait_version(db, oid, 2)
        tracker.settle()
    assert versions(db, oid) == 2 and db.get(oid).doc["content"] == "new\n" and meta["size"] == 4


def test_a_backup_rename_save_is_one_version_and_the_object_stays_on_its_path(root, db, tracker) -> None:
    oid = index(tracker, root, "vim.txt", "one\n")
    os.rename(root / "vim.txt", root / "vim.txt~")  # vim without backupcopy: rename away, write anew
    (root / "vim.txt").write_text("two\n")
    (root / "vim.txt~").unlink()
    meta = wait_version(db, oid, 2)
    flushed(tracker, db, root)
    assert versions(db, oid) == 2 and meta["path"] == "vim.txt" and not meta["missing"]


def test_moving_a_file_over_another_tracked_file(root, db, tracker) -> None:
    a = index(tracker, root, "a.txt", "A\n")
    b = index(tracker, root, "b.txt", "B\n")
    os.replace(root / "a.txt", root / "b.txt")
    wait_for(lambda: latest_meta(db, a)["path"] == "b.txt", what="a took b's path")
    meta_b = wait_for(lambda: (m := latest_meta(db, b))["missing"] and m, what="b replaced")
    assert meta_b["missing_reason"] == f"replaced by {a}"
    assert tracker.index.lookup(root.resolve() / "b.txt").id == a


def test_many_files_changing_at_once(root, db, tracker) -> None:
    ids = [index(tracker, root, f"many/f{n:03d}.txt", f"{n}\n") for n in range(60)]
    for n in range(60):
        (root / "many" / f"f{n:03d}.txt").write_text(f"{n} changed\n")
    for oid in ids:
        wait_version(db, oid, 2)
    flushed(tracker, db, root)
    assert all(versions(db, oid) == 2 for oid in ids)


def test_files_indexed_by_the_tools_are_tracked_at_once(root, db, tracker, session) -> None:
    from context_os.files import FileTools

    tools = FileTools(session, tracker.workspace, tracker=tracker)
    (root / "t.py").write_text("T = 1\n")
    oid = tools.read("t.py")["id"]
    assert oid in tracker.tracked()
    (root / "t.py").write_text("T = 2\n")
    wait_version(db, oid, 2)


def test_changes_made_while_nothing_watched_are_recorded_at_start(root, db, ws, session) -> None:
    """Recorded before ``start()`` returns: a session resumed right after it (the documented order)
    marks what it showed stale on its first turn. Before, the first context after a restart could
    show the old text as current, the rescan still running in the tracker's thread."""
    tools = FileTools(session, ws)
    (root / "offline.txt").write_text("before\n")
    (root / "deleted.txt").write_text("x\n")
    oid = json.loads(tools.call("read", {"path": "offline.txt"}))["id"]
    gone = json.loads(tools.call("read", {"path": "deleted.txt"}))["id"]
    hook = OpenAIHook(session, files=tools)
    msgs = [user("look"), call("r1", "read", path="offline.txt"), result("r1", "read")]
    hook.transform_context(msgs)
    (root / "offline.txt").write_text("after, longer\n")
    (root / "deleted.txt").unlink()
    with FileTracker(db, ws, rescan_interval=None) as t:
        assert latest_meta(db, oid)["version"] == 2
        assert latest_meta(db, gone)["missing"] is True
        assert t.stats["rescans"] >= 1
        shown = blocks_text(hook.transform_context([*msgs, user("and now?")]))
    assert 'stale="version 2 is newer' in shown


def test_a_session_showing_a_file_that_only_moved_is_told_where_it_went(root, db, tracker, session) -> None:
    """A rename (``git mv``, a refactoring tool's rename storm) keeps the text: the session still
    shows it stale, but says where the file is now and that its text is the same, so the agent
    neither edits the old path nor reloads the whole text to learn the new one. A move with a
    change says to activate, as any change does."""
    tools = FileTools(session, tracker.workspace, tracker=tracker)
    hook = OpenAIHook(session, files=tools)
    (root / "old.py").write_text("A = 1\n")
    (root / "edited.py").write_text("B = 1\n")
    moved = tools.read("old.py")["id"]
    edited = tools.read("edited.py")["id"]
    msgs = [user("look"), call("r1", "read", path="old.py"), result("r1", "read")]
    hook.transform_context(msgs)
    (root / "pkg").mkdir()
    flushed(tracker, db, root)  # (pkg is watched)
    os.rename(root / "old.py", root / "pkg" / "new.py")
    os.rename(root / "edited.py", root / "pkg" / "edited.py")
    (root / "pkg" / "edited.py").write_text("B = 2\n")
    wait_for(lambda: latest_meta(db, moved)["path"] == "pkg/new.py", what="the move")
    first = metas(db, edited)[0]["sha"]
    m = wait_for(lambda: (m := latest_meta(db, edited))["sha"] not in (first, None) and m, what="the edit")
    shown = blocks_text(hook.transform_context([*msgs, user("and now?")]))
    assert 'path="old.py" version="1" stale="version 2 is newer: moved to pkg/new.py, same text"' in shown
    assert f'path="edited.py" version="1" stale="version {m["version"]} is newer: activate(id) loads it"' in shown
    assert f"{moved} file old.py 2 tokens v1 (v2 newer: moved to pkg/new.py) active" in shown
    assert f"{edited} file edited.py 2 tokens v1 (v{m['version']} newer) active" in shown


def _read_through_hook(root, session, tracker, files: dict[str, str]) -> tuple[FileTools, OpenAIHook, list[str], list]:
    """``files`` (name → text) written under ``root`` and read through the file tools, then a
    first turn whose model read the first of them: (the tools, the hook, the files' ids, the
    messages so far)."""
    tools = FileTools(session, tracker.workspace, tracker=tracker)
    hook = OpenAIHook(session, files=tools)
    for name, text in files.items():
        (root / name).write_text(text)
    ids = [tools.read(name)["id"] for name in files]
    msgs = [user("look"), call("r1", "read", path=next(iter(files))), result("r1", "read")]
    hook.transform_context(msgs)
    return tools, hook, ids, msgs


def test_a_file_changed_and_changed_back_is_not_stale(root, db, tracker, session) -> None:
    """``git stash`` then ``git stash pop``, an edit undone, a branch switched and switched back:
    the file holds again the bytes the session shows, at the same path. It is not stale (the agent
    would reload the same text), also when it was marked stale in between."""
    _, hook, (oid,), msgs = _read_through_hook(root, session, tracker, {"a.py": "A = 1\n"})
    (root / "a.py").write_text("A = 2\n")
    wait_version(db, oid, 2)
    msgs.append(user("now?"))
    assert 'stale="version 2 is newer: activate(id) loads it"' in blocks_text(hook.transform_context(msgs))
    (root / "a.py").write_text("A = 1\n")
    wait_version(db, oid, 3)
    msgs.append(user("and now?"))
    shown = blocks_text(hook.transform_context(msgs))
    assert f'<object id="{oid}" kind="file" path="a.py" version="1">' in shown and "stale=" not in shown
    assert "(v3 newer" not in shown
    for n, text in ((4, "A = 3\n"), (5, "A = 1\n")):  # changed and back between two turns
        (root / "a.py").write_text(text)
        wait_version(db, oid, n)
    msgs.append(user("still?"))
    assert "stale=" not in blocks_text(hook.transform_context(msgs))
    frames = frame_docs(db, session.id)
    assert len(frames) == 4 and all(verify_frame(db, f).ok for f in frames)


def test_a_pinned_file_that_goes_missing_stays_shown_with_its_mark(root, db, tracker, session) -> None:
    """A pin outranks the system: a pinned file deleted on disk stays in the active pool, its mark
    saying the file is missing, so it is not dropped behind the back of whoever pinned it;
    ``activate`` then refreshes nothing (it loaded the missing version, a text saying there is
    none, as if it were the file; the file tools' ``activate`` made the file inactive) and says
    what the context shows."""
    tools = FileTools(session, tracker.workspace, tracker=tracker)
    hook = OpenAIHook(session, files=tools)
    (root / "keep.py").write_text("K = 1\n")
    oid = tools.read("keep.py")["id"]
    session.pin(oid)
    msgs = [user("look"), call("r1", "read", path="keep.py"), result("r1", "read")]
    hook.transform_context(msgs)
    (root / "keep.py").unlink()
    wait_for(lambda: latest_meta(db, oid)["missing"], what="the file recorded missing")
    msgs.append(user("and now?"))
    shown = blocks_text(hook.transform_context(msgs))
    assert 'stale="version 2 is newer: the file is missing (deleted or moved away)"' in shown and "K = 1" in shown
    assert f"{oid} file keep.py 2 tokens v1 (v2 newer: missing) pinned" in shown
    for r in (session.activate(oid), tools.activate(oid)):  # (the file tools' made it inactive)
        assert (r["status"], r["version"]) == ("already active", 1) and r["note"].endswith(
            "lines(id) shows its text of version 1, the last one known, which the context shows"
        )
        obj = session.view.objects[oid]
        assert (obj.state, obj.pinned, obj.meta["version"]) == ("active", True, 1)
    frames = frame_docs(db, session.id)
    assert len(frames) == 2 and all(verify_frame(db, f).ok for f in frames)


def test_a_missing_file_that_comes_back_says_so_in_its_index_line_and_stays_inactive(
    root, db, tracker, session
) -> None:
    """A file taken out of the active pool as missing is looked at again at each turn: back with
    the bytes it showed, at its path (a branch switched and back, a ``git stash`` undone), its
    index line no longer says it is missing; back with other bytes, it names the new version.
    Neither comes back into the active pool by itself (the tracker never loads anything): the
    agent's ``activate`` does, at the version on disk."""
    tools, hook, (same, other), msgs = _read_through_hook(
        root, session, tracker, {"same.py": "S = 1\n", "other.py": "O = 1\n"}
    )
    (root / "same.py").unlink()
    (root / "other.py").unlink()
    for oid in (same, other):
        wait_for(lambda oid=oid: latest_meta(db, oid)["missing"], what="the file recorded missing")
    msgs.append(user("now?"))
    shown = blocks_text(hook.transform_context(msgs))
    assert f"{same} file same.py 2 tokens v1 (v2 newer: missing) inactive" in shown
    assert f"{other} file other.py 2 tokens v1 (v2 newer: missing) inactive" in shown
    (root / "same.py").write_text("S = 1\n")
    (root / "other.py").write_text("O = 2\n")
    wait_version(db, same, 3)
    wait_version(db, other, 3)
    msgs.append(user("and now?"))
    shown = blocks_text(hook.transform_context(msgs))
    assert f"{same} file same.py 2 tokens v1 inactive" in shown
    assert f"{other} file other.py 2 tokens v1 (v3 newer) inactive" in shown
    assert "Active content:" not in shown
    last = object_states(db, same)[-1]
    assert (last["state"], last["actor"], last["reason"]) == (
        "inactive",
        "system",
        "the file holds again the version shown",
    )
    r = tools.activate(other)
    assert (r["status"], r["version"]) == ("activated", 3)
    msgs.append(user("go on"))
    shown = blocks_text(hook.transform_context(msgs))
    assert f'<object id="{other}" kind="file" path="other.py" version="3">' in shown and "O = 2" in shown
    frames = frame_docs(db, session.id)
    assert len(frames) == 4 and all(verify_frame(db, f).ok for f in frames)


def test_an_inactive_file_marked_stale_names_its_newest_version(root, db, tracker, session) -> None:
    """A file shown, changed on disk (marked ``(v2 newer)``), then deactivated, then changed
    again: its index line kept saying ``v2 newer`` (an inactive object was not looked at again)."""
    _, hook, (a,), msgs = _read_through_hook(root, session, tracker, {"a.py": "A = 1\n"})
    (root / "a.py").write_text("A = 2\n")
    wait_version(db, a, 2)
    msgs.append(user("changed?"))
    hook.transform_context(msgs)
    session.deactivate(a)
    (root / "a.py").write_text("A = 3\n")
    wait_version(db, a, 3)
    msgs.append(user("and now?"))
    shown = blocks_text(hook.transform_context(msgs))
    assert f"{a} file a.py 2 tokens v1 (v3 newer) inactive" in shown, shown
    frames = frame_docs(db, session.id)
    assert all(verify_frame(db, f).ok for f in frames)


def test_a_missing_file_is_not_brought_back_by_the_reading_list(root, db, tracker, session) -> None:
    """An edit of a file read brings back the next file read after it that left the active pool
    (``next_on_reading_list``), but not one that left it because it is missing: its last text
    is not the file, and it would be shown again until the policy found it idle."""
    tools, hook, (a, b), msgs = _read_through_hook(root, session, tracker, {"a.py": "A = 1\n", "b.py": "B = 1\n"})
    (root / "b.py").unlink()
    wait_for(lambda: latest_meta(db, b)["missing"], what="the file recorded missing")
    msgs.append(user("now?"))
    hook.transform_context(msgs)
    assert session.view.objects[b].state == "inactive"
    tools.edit("a.py", "A = 1", "A = 2")
    assert session.view.objects[a].state == "active" and session.view.objects[b].state == "inactive"
    msgs.append(user("go on"))
    assert "B = 1" not in blocks_text(hook.transform_context(msgs))


def test_a_deleted_workspace_root_is_said_once_and_awaited_without_rescanning(root, db, ws) -> None:
    """``rm -rf`` of the checkout while tracking: its files are recorded missing, the tracker says
    so once and waits for the root to come back with a stat per health check. Before, every
    health check (each second) found the root unwatched and rescanned every tracked file, for as
    long as the root stayed gone; when it comes back, its files are found again and watched."""
    t = FileTracker(db, ws, rescan_interval=None, health_interval=0.01)
    checks: list[int] = []
    real = t._check_health

    def counted() -> None:
        real()
        checks.append(1)

    t._check_health = counted  # type: ignore[method-assign]
    with t:
        oid = index(t, root, "a.py", "A = 1\n")
        shutil.rmtree(root)
        wait_for(lambda: latest_meta(db, oid)["missing"], what="the file recorded missing")
        wait_for(lambda: any("is gone" in e for e in t.errors), what="the tracker to say the root is gone")
        n = len(checks)
        wait_for(lambda: len(checks) >= n + 2, what="the rescan the loss asked for")
        rescans = t.stats["rescans"]
        wait_for(lambda: len(checks) >= n + 30, what="more health checks")
        assert t.stats["rescans"] == rescans, "the tracker rescans while the root is gone"
        assert sum("is gone" in e for e in t.errors) == 1 and not any("cannot watch" in e for e in t.errors)
        root.mkdir()
        (root / "a.py").write_text("A = 2\n")
        wait_for(lambda: (m := latest_meta(db, oid))["version"] >= 3 and not m["missing"], what="the file found again")
        (root / "a.py").write_text("A = 3\n")  # watched again: an event, not a rescan
        assert wait_version(db, oid, 4)["path"] == "a.py"
        assert db.get(oid).doc["content"] == "A = 3\n"


def test_a_workspace_root_moved_away_is_gone_and_the_one_put_in_its_place_is_watched(root, db, ws) -> None:
    """``mv repo repo.bak`` then a fresh clone at ``repo``, while tracking. The watch follows the
    directory it was made on: before, the files were never recorded missing, nothing watched the
    new root (its edits waited for a rescan, or for ever without one), and edits in the moved
    directory came as events for the paths of the new one. Now the moved root is gone, and the
    directory at its path is watched once it is there."""
    with FileTracker(db, ws, rescan_interval=None, health_interval=0.01) as t:
        oid = index(t, root, "a.py", "A = 1\n")
        aside = root.with_name("ws.bak")
        os.rename(root, aside)
        wait_for(lambda: latest_meta(db, oid)["missing"], what="the file recorded missing")
        assert sum("is gone" in e for e in t.errors) == 1
        root.mkdir()
        (root / "a.py").write_text("A = 2\n")
        wait_for(lambda: (m := latest_meta(db, oid))["version"] >= 3 and not m["missing"], what="the file found again")
        (aside / "a.py").write_text("old\n")  # no longer watched
        (root / "a.py").write_text("A = 3\n")  # an event: rescan_interval is None
        assert wait_version(db, oid, 4)["path"] == "a.py"
        flushed(t, db, root)
        assert [m.get("missing") for m in metas(db, oid)] == [False, True, False, False]
        assert db.get(oid).doc["content"] == "A = 3\n"


def test_a_root_back_before_the_tracker_noted_its_file_missing_is_rescanned(
    root, db, ws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root came back (``mkdir``, a file written) after the store had recorded its file
    missing and before the tracker noted that version: the note watched the root again, after
    the write whose events it would have needed, and asked no rescan, so the file stayed missing
    for good (without a periodic rescan). Seen once in a run with both cores busy; here the root
    comes back at that very moment. A root watched again after it was gone is rescanned."""
    noted = FileTracker._note_meta

    def note(self: FileTracker, oid: str, meta: dict, *, watch: bool = True) -> None:
        if meta.get("missing") and not root.exists():
            root.mkdir()
            (root / "a.py").write_text("A = 2\n")
        noted(self, oid, meta, watch=watch)

    monkeypatch.setattr(FileTracker, "_note_meta", note)
    with FileTracker(db, ws, rescan_interval=None, health_interval=0.01) as t:
        oid = index(t, root, "a.py", "A = 1\n")
        os.rename(root, root.with_name("ws.bak"))
        found = wait_for(
            lambda: (m := latest_meta(db, oid))["version"] >= 3 and not m["missing"] and m, what="the file"
        )
        assert [m.get("missing") for m in metas(db, oid)] == [False, True, False]
        assert found["path"] == "a.py" and db.get(oid).doc["content"] == "A = 2\n"


def test_a_change_made_while_a_new_root_is_being_watched_is_recorded(
    root, db, ws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first file indexed in a root has the tracker watch that root only then, once its
    version is committed, and scheduling the recursive watch walks every directory below it
    (half a second in a checkout of 20,000): a change made meanwhile sent no event, and waited for
    the periodic rescan (30 s), or for ever without one (5 of 5 runs in the audit's). A new watch
    now asks a rescan. Here the file changes at the very moment its root's watch is scheduled."""
    with FileTracker(db, ws, rescan_interval=None) as t:
        assert t._observer is not None and not t._watches
        schedule = t._observer.schedule

        def changing_meanwhile(*args: object, **kwargs: object) -> object:
            (root / "a.py").write_text("A = 22\n")  # (another size than the version read)
            return schedule(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(t._observer, "schedule", changing_meanwhile)
        oid = index(t, root, "a.py", "A = 1\n")
        assert t.settle()
        assert latest_meta(db, oid)["version"] == 2 and db.get(oid).doc["content"] == "A = 22\n"


def test_an_overflow_triggers_a_rescan(root, db, tracker) -> None:
    index(tracker, root, "o.txt", "o\n")
    assert tracker.settle()  # (the rescan the root's new watch asked)
    before = tracker.stats["rescans"]
    logging.getLogger("watchdog.observers.inotify_c").warning("Inotify queue overflowed; filesystem events were lost")
    wait_for(lambda: tracker.stats["rescans"] > before, what="a rescan")


def test_a_file_replaced_by_a_fifo_does_not_hang_the_tracker(root, db, tracker) -> None:
    oid = index(tracker, root, "p.txt", "p\n")
    other = index(tracker, root, "q.txt", "q\n")
    (root / "p.txt").unlink()
    os.mkfifo(root / "p.txt")
    assert wait_version(db, oid, 2)["missing"] is True  # no regular file there any more
    (root / "q.txt").write_text("q2\n")
    wait_version(db, other, 2, "the tracker to keep working")
    (root / "p.txt").unlink()
    (root / "p.txt").write_text("p again\n")
    assert wait_version(db, oid, 3)["missing"] is False


def test_a_file_replaced_by_a_symlink_is_missing(tmp_path, root, db, tracker) -> None:
    """``ln -sf``, or a checkout where the path is a symlink: the regular file is gone, and no tool
    opens a file through a symlink. Before, the object kept its last text as current (the reads
    were refused) and every rescan added the same error."""
    (tmp_path / "elsewhere.txt").write_text("outside\n")
    out = index(tracker, root, "out.txt", "o\n")
    inside = index(tracker, root, "in.txt", "i\n")
    other = index(tracker, root, "other.txt", "other\n")
    (root / "out.txt").unlink()
    (root / "out.txt").symlink_to(tmp_path / "elsewhere.txt")
    (root / "in.txt").unlink()
    (root / "in.txt").symlink_to("other.txt")
    for oid in (out, inside):
        assert wait_version(db, oid, 2)["missing"] is True
    assert tracker.rescan() == 0 and not tracker.errors
    assert latest_meta(db, other)["version"] == 1
    (root / "in.txt").unlink()
    (root / "in.txt").write_text("i again\n")
    assert wait_version(db, inside, 3)["missing"] is False


def test_a_file_moved_to_a_name_that_is_not_utf8_is_missing(root, db, tracker) -> None:
    """No store takes such a name (lone surrogates, as ``os.fsdecode`` gives it): the write of
    the move failed, and the object stayed current at the path it had left, with an error, until
    a rescan found that path empty (never, without a periodic one)."""
    oid = index(tracker, root, "notes.txt", "hello\n")
    try:
        os.rename(root / "notes.txt", os.fsencode(root) + b"/caf\xe9.txt")
    except OSError as e:  # a file system that takes only UTF-8 names: nothing to test
        pytest.skip(f"no non-UTF-8 name here: {e}")
    meta = wait_version(db, oid, 2)
    assert meta["missing"] is True and meta["missing_reason"] == "moved to a path that is not valid UTF-8"
    assert meta["path"] == "notes.txt" and not tracker.errors


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode; see the FIFO test")
def test_a_file_that_became_unreadable_is_reported_not_fatal(root, db, tracker) -> None:
    oid = index(tracker, root, "locked.txt", "a\n")
    (root / "locked.txt").write_text("b\n")
    (root / "locked.txt").chmod(0)
    try:
        wait_for(lambda: any("permission denied" in e for e in tracker.errors), what="the error")
        assert versions(db, oid) == 1
    finally:
        (root / "locked.txt").chmod(0o644)
    os.utime(root / "locked.txt")
    wait_version(db, oid, 2)


def test_a_symlink_loop_in_the_tree_is_harmless(root, db, tracker) -> None:
    oid = index(tracker, root, "real.txt", "r\n")
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    (root / "dirloop").mkdir()
    (root / "dirloop" / "self").symlink_to(root / "dirloop")
    (root / "real.txt").write_text("r2\n")
    wait_version(db, oid, 2)
    assert tracker.stats["errors"] == 0


def test_noise_in_ignored_and_unindexed_paths_indexes_nothing(root, db, tracker) -> None:
    index(tracker, root, "kept.txt", "k\n")
    for d in (".git/objects/ab", "node_modules/x", "build", "__pycache__"):
        (root / d).mkdir(parents=True)
        for n in range(5):
            (root / d / f"f{n}").write_text("noise")
    (root / "untracked.txt").write_text("u")
    flushed(tracker, db, root)
    assert {m.doc["meta"]["path"] for m in db.find("file")} == {"kept.txt", ".sentinel"}


def test_deleting_a_large_untracked_tree_does_not_walk_the_tracked_files_per_directory(root, db, tracker) -> None:
    """``rm -rf node_modules`` (or ``build/``, ``git clean -fdx``): one event per directory. Each
    used to be checked against every tracked file, in the observer thread and under the tracker's
    lock: 24,000 directories with 1,922 tracked files took 10 s of CPU. Only a directory that
    holds a tracked file is looked into now; the tracked ones still get their versions."""

    class Counting(dict):
        walks = 0

        def items(self):  # type: ignore[override]
            Counting.walks += 1
            return super().items()

    kept = [index(tracker, root, f"src/m{n}.py", f"m = {n}\n") for n in range(20)]
    gone = index(tracker, root, "build/out/keep.txt", "k\n")
    for n in range(60):
        (root / "node_modules" / f"pkg{n}" / "lib").mkdir(parents=True)
        (root / "node_modules" / f"pkg{n}" / "lib" / "index.js").write_text("x\n")
    flushed(tracker, db, root)
    with tracker._cond:
        tracker._by_path = Counting(tracker._by_path)
    shutil.rmtree(root / "node_modules")
    flushed(tracker, db, root)
    assert Counting.walks == 0, "directories holding no tracked file were checked against every tracked file"
    shutil.rmtree(root / "build")
    assert wait_for(lambda: latest_meta(db, gone)["missing"], what="the tracked file in the deleted tree")
    os.rename(root / "src", root / "lib")
    wait_for(lambda: all(latest_meta(db, k)["path"].startswith("lib/") for k in kept), what="the moved directory")


def test_tracked_files_gone_while_files_appear_stat_each_new_file_once(root, db, tracker, monkeypatch) -> None:
    """A checkout of a branch that renamed a directory deletes every tracked file under it and
    creates as many new ones (new inodes: not moves). Each vanished file is checked against the
    files that appeared (was it moved there?); each such check used to stat every one of them
    again, twice per vanished file (1,000 tracked files: 2 million stats, 4.7 s of CPU)."""
    n = 40
    ids = [index(tracker, root, f"src/f{i}.py", f"x = {i}\n") for i in range(n)]
    (root / "lib").mkdir()
    flushed(tracker, db, root)
    real, calls = os.stat, []

    def counting(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if "/lib/" in os.fsdecode(path):
            calls.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counting)
    for i in range(n):
        (root / "lib" / f"f{i}.py").write_text(f"x = {i}\n")
    shutil.rmtree(root / "src")
    for oid in ids:
        wait_for(lambda oid=oid: latest_meta(db, oid)["missing"], what="every file missing")
    monkeypatch.setattr(os, "stat", real)
    assert len(calls) <= 3 * n, f"{len(calls)} stats of {n} new files"


def test_evicted_objects_stop_being_tracked(root, db, tracker) -> None:
    from context_os.store import Evict

    oid = index(tracker, root, "leak.txt", "secret\n")
    db.submit([Evict(oid)])
    (root / "leak.txt").write_text("still secret\n")
    wait_for(lambda: oid not in tracker.tracked(), what="the tracker to forget it")
    assert db.history(oid) == []


def test_start_stop_and_context_manager(root, db, ws) -> None:
    t = FileTracker(db, ws)
    assert not t.running
    with t:
        assert t.running and t.settle(5)
    assert not t.running
    t.stop()  # idempotent


class CtrlCInRescan(FileTracker):
    """A tracker whose next ``rescan`` (once ``interrupt`` is set) raises as Ctrl-C would."""

    interrupt = False

    def rescan(self) -> int:
        if self.interrupt:
            self.interrupt = False
            raise KeyboardInterrupt
        return super().rescan()


def test_a_start_interrupted_midway_leaves_nothing_running(root, db, ws) -> None:
    """Ctrl-C while ``start()`` stats the indexed files (a large workspace changed while nothing
    watched): the start raises, and nothing of it is left behind: no observer thread with its
    inotify watches (a process has few inotify instances), no log handler, no index listener
    (a later start would have registered a second one). Before, ``stop()`` could not undo a
    start that never returned, and the observer kept queueing events nobody took."""

    (root / "a.txt").write_text("a\n")
    FileIndex(db, ws).index(ws.resolve("a.txt"), read=True, cause="read")
    t = CtrlCInRescan(db, ws, rescan_interval=None)
    t.interrupt = True
    watchers = lambda: [th for th in threading.enumerate() if th.name == f"ctxos-watchdog:{ws.root}"]  # noqa: E731
    with pytest.raises(KeyboardInterrupt):
        t.start()
    assert not t.running and watchers() == []
    assert all(not isinstance(h, type(t._overflow)) for h in logging.getLogger("watchdog.observers.inotify_c").handlers)
    assert t.index._listeners == []
    with t:  # a second start works, once
        assert t.running and len(watchers()) == 1 and len(t.index._listeners) == 1
        (root / "a.txt").write_text("b\n")
        oid = next(iter(t.tracked()))
        wait_version(db, oid, 2)
    assert watchers() == [] and t.index._listeners == []


def test_a_stop_interrupted_in_its_last_rescan_lets_a_later_start_start(root, db, ws) -> None:
    """Ctrl-C while ``stop()`` stats every tracked file once more: the stop raises, and the
    tracker is stopped all the same. It kept its thread's handle, so a later ``start()`` took it
    for running and watched nothing."""

    (root / "a.txt").write_text("a\n")
    FileIndex(db, ws).index(ws.resolve("a.txt"), read=True, cause="read")
    t = CtrlCInRescan(db, ws, rescan_interval=None).start()
    t.interrupt = True
    with pytest.raises(KeyboardInterrupt):
        t.stop()
    assert not t.running
    with t:  # started again, for real: a change is recorded
        assert t.running
        (root / "a.txt").write_text("b\n")
        wait_version(db, next(iter(t.tracked())), 2)


def test_a_tracker_with_allowed_outside_directories(tmp_path, root, db) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    ws = Workspace(root, allow_outside=[shared])
    (shared / "s.txt").write_text("s1\n")
    with FileTracker(db, ws, rescan_interval=None) as t:
        oid = t.track([shared / "s.txt"])[0].id
        (shared / "s.txt").write_text("s2\n")
        assert wait_version(db, oid, 2)["path"] == str((shared / "s.txt").resolve())


def test_a_change_made_just_before_stop_is_recorded_by_it(root, db, ws) -> None:
    """``stop()`` records what changed before it was called: an event still on its way from the
    kernel, or not yet taken by the tracker thread when it stopped, was left for the next start
    (never, if none came)."""
    for _ in range(10):
        t = FileTracker(db, ws, rescan_interval=None).start()
        oid = index(t, root, "a.py", "A = 0\n")
        n = latest_meta(db, oid)["version"]
        (root / "a.py").write_text(f"A = {n}, changed\n")
        t.stop()
        assert latest_meta(db, oid)["version"] == n + 1
        assert db.get(oid).doc["content"] == f"A = {n}, changed\n"


def test_watch_failures_of_two_roots_are_each_logged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The workspace and a directory it allows, neither of which can be watched (the inotify
    watch limit reached): the health check tries each again every second, and the two messages
    alternate. Only the message logged last was held back, so both were warnings on the server's
    stderr every second for as long as the tracker ran."""
    from context_os.files import tracker as tracker_module

    class Refusing(tracker_module.Observer):  # type: ignore[misc,valid-type]
        def schedule(self, *args: object, **kwargs: object) -> object:
            raise OSError(28, "inotify watch limit reached")

    monkeypatch.setattr(tracker_module, "Observer", Refusing)
    ws, other = tmp_path / "ws", tmp_path / "other"
    ws.mkdir()
    other.mkdir()
    (ws / "a.py").write_text("a\n")
    (other / "b.py").write_text("b\n")
    with SqliteStore(tmp_path / "s.db") as db:
        workspace = Workspace(ws, allow_outside=[other])
        with (
            caplog.at_level(logging.WARNING, logger="context_os"),
            FileTracker(db, workspace, rescan_interval=None, health_interval=0.02) as t,
        ):
            t.track([ws / "a.py", other / "b.py"])
            wait_for(lambda: len(t.errors) >= 20, "the watches tried again")
        said = [r.getMessage() for r in caplog.records if "cannot watch" in r.getMessage()]
    assert sorted(said) == sorted(
        f"file tracker of {ws}: cannot watch {d}: inotify watch limit reached" for d in (ws, other)
    )


def test_a_move_another_process_recorded_is_followed_not_undone(tmp_path, root, db, ws) -> None:
    """Two servers on one store, each with a tracker: ``mv f.txt m.txt`` then a read of ``m.txt``
    in one records the move before the other's tracker looks; that one found the object already at
    ``m.txt`` and wrote nothing, so nothing told it of the move. Its record stayed at ``f.txt``:
    its next rescan (a stop's, the periodic one) marked the object missing at ``m.txt``, and a new
    file made at ``f.txt`` moved the object back there, ``m.txt`` left untracked."""
    (root / "f.txt").write_text("F\n")
    (root / "g.txt").write_text("G\n")
    first = FileIndex(db, ws)
    moved = first.index(ws.resolve("f.txt"), read=True, cause="read").id
    renamed = first.index(ws.resolve("g.txt"), read=True, cause="read").id
    other = SqliteStore(tmp_path / "store.db")  # the other process's client of the store
    mine = FileTracker(db, ws, rescan_interval=None).start()
    try:
        with FileTracker(other, Workspace(root), rescan_interval=None) as theirs:
            seen = mine.stats["reconciled"]
            os.rename(root / "f.txt", root / "m.txt")
            os.rename(root / "g.txt", root / "n.txt")
            index(theirs, root, "m.txt")  # the other process reads the new names at once
            index(theirs, root, "n.txt")
            wait_for(lambda: mine.stats["reconciled"] >= seen + 2, what="the tracker to look at the moves")
            assert mine.settle()
            (root / "g.txt").write_text("a new file at the old name\n")
            flushed(mine, db, root)
            mine.stop()  # (its last rescan)
    finally:
        mine.stop()
        other.close()
    for oid, path, text in ((moved, "m.txt", "F\n"), (renamed, "n.txt", "G\n")):
        meta = latest_meta(db, oid)
        assert (meta["version"], meta["path"], meta["missing"]) == (2, path, False), meta
        assert db.get(oid).doc["content"] == text
    assert [v.id for v in db.find("file", {"abs_path": str(ws.resolve("n.txt"))})] == [renamed]


def test_trackers_stop_a_workspace_s_tracker_with_its_last_hold(root, db, ws) -> None:
    """``Trackers``: each taking of a workspace's tracker holds it, the last ``release`` stops it;
    a workspace taken again while its tracker is stopping waits for that stop (two trackers of
    one workspace would record one change twice) and gets a new one; ``close()`` stops what is
    left, and a release after it changes nothing."""
    trackers = Trackers(db)
    first = trackers(ws)
    assert trackers(Workspace(root)) is first and first.running  # (the same workspace, another object)
    trackers.release(ws)
    assert first.running and trackers.running() == [first]
    stopping = threading.Event()
    real_stop = first.stop

    def slow_stop() -> None:
        stopping.set()
        time.sleep(0.2)
        real_stop()

    first.stop = slow_stop  # type: ignore[method-assign]
    releasing = threading.Thread(target=trackers.release, args=(ws,))
    releasing.start()
    stopping.wait(5)
    second = trackers(ws)  # waits for the stop
    assert not first.running and second is not first and second.running
    releasing.join()
    assert trackers.running() == [second]
    (root / "sub").mkdir()
    third = trackers(Workspace(root / "sub"))
    trackers.close()
    assert not second.running and not third.running and trackers.running() == []
    trackers.release(ws)  # nothing held: nothing done
    assert trackers.running() == []
