"""The file tracker (files/tracker.py) against the disk, driven by hypothesis: random writes,
deletions, renames (over other files too), hard links, atomic saves, backups restored and
directory moves of tracked and untracked files in a real directory, with a real watchdog observer
running, in bursts of a few operations between looks. Which object follows a file through a burst
depends on when the observer's events arrive (an atomic save keeps the object on its path: the
path that still holds a file wins), so a look checks what holds whatever the timing, once every
event was reconciled:

* every object in force that is not ``missing`` holds, at its path, the bytes on disk there;
* every path some object names that holds a file is held by exactly one object not missing (a
  file re-created where a missing object was is that object again; a file moved over another
  object's takes its path, and the other is missing);
* the index finds that object by path;
* a rescan by the tracker, and a new tracker started on the same store, record nothing more;
* the store, asked as of the time of every earlier look, answers what that look found: a later
  change is valid from when it came to its path, never from before (a backup restored with its
  old times, ``cp -p``, or a file written earlier moved over one, keep an mtime from before).

Operations in bursts may be made while no tracker runs (its start at the next look records
them). Operations done one at a time (a look after each) must also keep every tracked file
tracked: a file indexed, renamed, written or saved atomically is held by an object wherever it
is, and a file moved over a tracked one is that object's new text.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from context_os.files import FileTracker, Workspace
from context_os.store.base import now_ms
from context_os.store.sqlite import SqliteStore
from tests.files.conftest import WATCHDOG_RACE_WARNING, flushed, index, restore
from tests.reliability._adversarial import FUZZ, examples

pytestmark = pytest.mark.filterwarnings(WATCHDOG_RACE_WARNING)

PATHS = ["a.txt", "b.txt", "d/c.txt", "d/e.txt", "x/c.txt"]
paths = st.sampled_from(PATHS)
SENTINEL = ".sentinel"


class TrackerMachine(RuleBasedStateMachine):
    one_at_a_time = False

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="ctxos-tracker-model-"))
        self.root = self.tmp / "ws"
        self.root.mkdir()
        self.db = SqliteStore(self.tmp / "store.db")
        self.ws = Workspace(self.root)
        self.tracker = FileTracker(self.db, self.ws, rescan_interval=None).start()
        self.n = 0
        self.ops: list[tuple[object, ...]] = []
        """What was done, for a failure's message (one that depends on the observer's timing
        may not come again when hypothesis replays it)."""
        self.sentinel = index(self.tracker, self.root, SENTINEL, "0")
        self.marked: set[str] = set()
        """(one at a time) the paths that hold a file a tracked object must follow."""
        self.looks: list[tuple[int, dict[str, tuple[str, str | None, bool]]]] = []
        """(time, object id → (path, content, missing)) of every look."""

    def teardown(self) -> None:
        self.tracker.stop()
        self.db.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def put(self, rel: str, text: str) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def text(self, same: bool, rel: str) -> str:
        p = self.root / rel
        if same and p.is_file():
            return p.read_text()
        self.n += 1
        return f"text {self.n}\n"

    def after(self, *op: object) -> None:
        self.ops.append(op)
        if self.one_at_a_time:
            self.look()

    # -- operations

    @rule(rel=paths, same=st.booleans())
    def write(self, rel: str, same: bool) -> None:
        self.put(rel, self.text(same, rel))
        self.after("write", rel, same)

    @rule(rel=paths)
    def track(self, rel: str) -> None:
        if (self.root / rel).is_file():
            index(self.tracker, self.root, rel)
            self.marked.add(rel)
        self.after("track", rel)

    @rule(rel=paths)
    def delete(self, rel: str) -> None:
        if (self.root / rel).is_file():
            (self.root / rel).unlink()
            self.marked.discard(rel)
        self.after("delete", rel)

    @rule(src=paths, dst=paths)
    def rename(self, src: str, dst: str) -> None:
        if src != dst and (self.root / src).is_file():
            (self.root / dst).parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.root / src, self.root / dst)
            if src in self.marked:  # an untracked file moved over a tracked one is its new text
                self.marked.discard(src)
                self.marked.add(dst)
        self.after("rename", src, dst)

    @rule(rel=paths, move=st.booleans())
    def restore(self, rel: str, move: bool) -> None:
        """A backup made an hour ago comes back over the file, its times kept (``cp -p``), or is
        moved there from outside the workspace (``mv``)."""
        restore(self.tmp / "backup", self.root / rel, self.text(False, rel), move=move)
        self.after("restore", rel, move)

    @rule(src=paths, dst=paths)
    def hard_link(self, src: str, dst: str) -> None:
        """A second name of one file: a write through either changes what both hold."""
        if (self.root / src).is_file() and not (self.root / dst).exists():
            (self.root / dst).parent.mkdir(parents=True, exist_ok=True)
            os.link(self.root / src, self.root / dst)
        self.after("hard_link", src, dst)

    @rule(rel=paths)
    def atomic_save(self, rel: str) -> None:
        p = self.root / rel
        if p.is_file():
            tmp = p.with_name(p.name + ".tmp~")
            tmp.write_text(self.text(False, rel))
            os.replace(tmp, p)
        self.after("atomic_save", rel)

    @rule()
    def move_directory(self) -> None:
        d, x = self.root / "d", self.root / "x"
        if d.is_dir() and not x.exists():
            os.rename(d, x)
            old, new = "d/", "x/"
        elif x.is_dir() and not d.exists():
            os.rename(x, d)
            old, new = "x/", "d/"
        else:
            return
        self.marked = {new + m[len(old) :] if m.startswith(old) else m for m in self.marked}
        self.after("move_directory")

    @precondition(lambda self: not self.one_at_a_time and self.tracker.running)
    @rule()
    def stop_tracker(self) -> None:
        """Nothing watches until the next look starts a tracker again (its start records what
        changed meanwhile)."""
        self.tracker.stop()
        self.after("stop_tracker")

    @precondition(lambda self: not self.one_at_a_time)
    @rule()
    def look_now(self) -> None:
        self.look()

    # -- the look

    def flush(self) -> None:
        """Change the sentinel and wait for its version: the observer dispatches in order, so
        every earlier event was seen; then wait until each was reconciled."""
        flushed(self.tracker, self.db, self.root)
        assert self.tracker.settle(timeout=30)

    def in_force(self) -> dict[str, dict]:
        far = time.time_ns() // 1_000_000 + 10**6
        out = {}
        for oid in self.tracker.tracked():
            if oid == self.sentinel:
                continue
            v = self.db.get(oid, valid_time=far)
            assert v is not None and v.doc is not None, oid
            out[oid] = v.doc
        return out

    def look(self) -> None:
        try:
            self._look()
        except AssertionError as e:
            raise AssertionError(f"{e}\nops: {self.ops}") from None

    def _look(self) -> None:
        self.ops.append(("look",))
        if not self.tracker.running:
            self.tracker = FileTracker(self.db, self.ws, rescan_interval=None).start()
        self.flush()
        docs = self.in_force()
        held: dict[str, list[str]] = {}
        for oid, doc in docs.items():
            meta = doc["meta"]
            if not meta["missing"]:
                held.setdefault(meta["path"], []).append(oid)
                p = self.root / meta["path"]
                assert p.is_file(), (oid, meta)
                assert doc["content"] == p.read_text(), (oid, meta["path"])
        for doc in docs.values():
            path = doc["meta"]["path"]
            if (self.root / path).is_file():
                assert len(held.get(path, [])) == 1, (path, held.get(path), docs)
        for path, (oid, *_) in held.items():
            found = self.tracker.index.lookup(self.root.resolve() / path)
            assert found is not None and found.id == oid, path
        if self.one_at_a_time:
            assert self.marked <= set(held), (held, self.marked)
        assert self.tracker.rescan() == 0
        with FileTracker(self.db, self.ws, rescan_interval=None):
            pass
        assert self.in_force() == docs
        found = {oid: (d["meta"]["path"], d["content"], bool(d["meta"]["missing"])) for oid, d in docs.items()}
        for t, seen in self.looks:
            for oid, want in seen.items():
                v = self.db.get(oid, valid_time=t)
                assert v is not None and v.doc is not None, (oid, t)
                got = (v.doc["meta"]["path"], v.doc["content"], bool(v.doc["meta"]["missing"]))
                assert got == want, ("as of an earlier look", t, oid, got, want)
        self.looks.append((now_ms(), found))
        time.sleep(0.02)  # (past the kernel clock's tick: what comes next has times of its own)


class OneAtATime(TrackerMachine):
    one_at_a_time = True


def test_the_tracker_agrees_with_the_disk_after_bursts_of_changes() -> None:
    steps = settings(FUZZ, max_examples=examples(25), stateful_step_count=25)
    run_state_machine_as_test(TrackerMachine, settings=steps)


def test_the_tracker_follows_every_tracked_file_through_changes_seen_one_at_a_time() -> None:
    steps = settings(FUZZ, max_examples=examples(15), stateful_step_count=15)
    run_state_machine_as_test(OneAtATime, settings=steps)
