"""A Pi session with real files going back in its history, drawn by hypothesis: turns of talk,
reads through context_os's ``read`` (its report in the history), edits by Pi's own edit tool (the
disk changes, then its result comes), each result seen by a model call as Pi makes one, rewinds
to an earlier turn (Pi's ``/tree``, between prompts), retries, the session closed and opened
again.

At every call:

* a file the context shows (the newest block of it: a change is a block after the old one, or a
  patch of it) shows the text on disk now: no stale copy;
* a file that no message of the history reads or edits is not shown (a rewind past its reads
  and edits takes it out; one edited there stays known, in the index only);

and every frame verifies at the end.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from context_os import Session
from context_os.context.policy import RetentionPolicy
from context_os.files import FileTools, Workspace
from context_os.files.tracker import FileTracker
from context_os.harness.pi import PiHook, host_tool_observer
from context_os.store.sqlite import SqliteStore
from tests.context._drawn import POLICIES
from tests.harness.pi_msgs import call, result, say, user
from tests.helpers import assert_frames_verify, objects_shown
from tests.reliability._adversarial import FUZZ, examples

FILES = 3
PATH = re.compile(r'path="([^"]+)"')
STEP = st.one_of(
    st.tuples(st.sampled_from(["talk", "read", "edit"]), st.integers(0, FILES - 1)),
    st.tuples(st.just("rewind"), st.integers(0, 1000)),
    st.tuples(st.just("retry"), st.just(0)),
)
CALLS = st.lists(st.lists(STEP, min_size=1, max_size=3), min_size=2, max_size=10)


AGENT_STEPS = ("talk", "read", "edit", "rewind", "retry")


def _agent_step(
    what: str, k: int, n: int, root: Path, msgs: list[dict[str, Any]], bounds: list[int], hook: PiHook, files: FileTools
) -> list[int]:
    """Step ``n`` of the agent's own (one of ``AGENT_STEPS``: a turn of talk, a read through
    context_os's ``read``, an edit by Pi's own edit tool, each result seen by a model call, or a
    rewind to turn ``k``, or a retry): ``msgs`` grows or goes back; the ends of its turns now."""
    path = f"src/f{k}.py"
    if what == "rewind":
        keep = bounds[k % len(bounds)]
        del msgs[keep:]
        bounds = [b for b in bounds if b <= keep]
        msgs.append(user(f"again {n}"))
    elif what == "read":
        hook.transform_context(msgs)  # the model asks for it: a call of its own
        report = files.read(path)
        msgs += [call(f"c{n}", "read", path=path)]
        msgs += [result(f"c{n}", "read", json.dumps(report)) | {"details": {"contextOs": True}}]
    elif what == "edit":
        old = (root / path).read_text().split("\n")[3]
        (root / path).write_text((root / path).read_text().replace(old, f"{old} edit {n}", 1))
        msgs += [call(f"c{n}", "edit", path=path, oldText=old, newText=f"{old} edit {n}")]
        msgs += [result(f"c{n}", "edit", f"Successfully replaced text in {path}.")]
    if what in ("read", "edit"):
        hook.transform_context(msgs)  # the model sees the result
    elif what == "talk":
        msgs += [say(f"reply {n}"), user(f"question {n}")]
    return bounds if what == "retry" else [*bounds, len(msgs)]


def _workspace(tmp: Path) -> Path:
    """A workspace under ``tmp`` with the files ``src/f0.py``… of 12 lines each."""
    root = tmp / "w"
    (root / "src").mkdir(parents=True)
    for k in range(FILES):
        (root / "src" / f"f{k}.py").write_text("".join(f"line {i} of f{k}\n" for i in range(12)))
    return root


@settings(FUZZ, max_examples=examples(60))
@given(calls=CALLS, policy=st.sampled_from(sorted(POLICIES)), data=st.data())
def test_a_pi_session_going_back_shows_the_files_its_history_holds_as_they_are(
    calls: list[list[tuple[str, int]]], policy: str, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = _workspace(Path(tmp))
        with SqliteStore(Path(tmp) / "s.db") as db:

            def open_session() -> tuple[Session, FileTools, PiHook]:
                session = Session.open(db, "p", harness="pi", policy=RetentionPolicy(**POLICIES[policy]))
                files = FileTools(session, Workspace(str(root)))
                return session, files, PiHook(session, files=files, on_sync=host_tool_observer(files))

            session, files, hook = open_session()
            msgs: list[dict[str, Any]] = [user("start")]
            bounds = [len(msgs)]
            n = 0
            try:
                for steps in calls:
                    for what, k in steps:
                        n += 1
                        bounds = _agent_step(what, k, n, root, msgs, bounds, hook, files)
                    out = hook.transform_context(msgs)
                    shown = {
                        m.group(1): text
                        for oid, (attrs, text) in objects_shown(out).items()
                        if oid.startswith("file:") and (m := PATH.search(attrs))
                    }
                    for path, text in shown.items():
                        assert text == (root / path).read_text(), path
                    touched = {
                        b["arguments"]["path"]
                        for m in msgs
                        if m["role"] == "assistant"
                        for b in m["content"]
                        if b.get("type") == "toolCall"
                    }
                    assert set(shown) <= touched, (sorted(shown), sorted(touched))
                    if data.draw(st.booleans(), label="opened again after this call"):
                        session.close()
                        session, files, hook = open_session()
            finally:
                session.close()
            assert_frames_verify(db, "p")


TRACKED_STEP = st.one_of(
    STEP, st.tuples(st.sampled_from(["outside", "delete", "restore", "revert"]), st.integers(0, FILES - 1))
)
STALE = re.compile(r'stale="version (\d+) is newer')


@settings(FUZZ, max_examples=examples(30), deadline=None)
@given(calls=st.lists(st.lists(TRACKED_STEP, min_size=1, max_size=3), min_size=2, max_size=8), data=st.data())
def test_a_pi_session_with_a_file_tracker_shows_each_file_as_it_is_or_says_it_is_stale(
    calls: list[list[tuple[str, int]]], data: st.DataObject
) -> None:
    """The same session with a real file tracker on its workspace, which records every change on
    disk as it comes, beside the versions Pi's own tools make (each edit's result), and changes
    made outside the session, which no message tells (the user's editor adds a line or puts back
    the text the agent last read or wrote; a file deleted, then written again). Calls between the
    checked ones are made while the tracker may not have seen the newest changes. At each checked
    call, once the tracker has seen every change:

    * a file the context shows, not marked stale, shows the text on disk now; a deleted one is not
      shown;
    * one marked stale names the newest version, which holds the text on disk, and shows other
      text (a file changed back to the text shown is not stale);
    * a file whose newest change is the agent's own (its read or edit, the newest step touching
      it) is not marked stale;

    and at the end the tracker finds nothing to record, and every frame verifies."""
    from tests.files.conftest import flushed  # (a barrier: every change before it seen)

    with tempfile.TemporaryDirectory() as tmp:
        root = _workspace(Path(tmp))
        with SqliteStore(Path(tmp) / "s.db") as db:
            ws = Workspace(str(root))
            tracker = FileTracker(db, ws, rescan_interval=None).start()

            def open_session() -> tuple[Session, FileTools, PiHook]:
                session = Session.open(db, "p", harness="pi")
                files = FileTools(session, ws, tracker=tracker)
                return session, files, PiHook(session, files=files, on_sync=host_tool_observer(files))

            session, files, hook = open_session()
            msgs: list[dict[str, Any]] = [user("start")]
            bounds = [len(msgs)]
            n = 0
            seen: dict[str, str] = {}  # path → its text as the agent last read or wrote it
            try:
                for steps in calls:
                    own: dict[str, bool] = {}  # path → whether its newest change in this call was the agent's
                    for what, k in steps:
                        n += 1
                        path = f"src/f{k}.py"
                        there = (root / path).exists()
                        if what in ("read", "edit", "outside", "revert", "delete") and not there:
                            continue  # (nothing to change, and Pi's tools fail on it: no call)
                        if what in AGENT_STEPS:
                            bounds = _agent_step(what, k, n, root, msgs, bounds, hook, files)
                        if what == "rewind":
                            own.clear()  # (what the history held of it may be gone)
                        elif what in ("read", "edit"):
                            own[path], seen[path] = True, (root / path).read_text()
                        elif what == "outside":
                            with (root / path).open("a") as f:
                                f.write(f"added outside {n}\n")
                            own[path] = False
                        elif what == "revert" and path in seen:
                            (root / path).write_text(seen[path])
                            own[path] = False
                        elif what == "delete":
                            (root / path).unlink()
                            own[path] = False
                        elif what == "restore" and not there:
                            (root / path).write_text("".join(f"line {i} restored {n}\n" for i in range(12)))
                            own[path] = False
                    flushed(tracker, db, root)
                    assert tracker.settle(timeout=30)
                    out = hook.transform_context(msgs)
                    for oid, (attrs, text) in objects_shown(out).items():
                        found = PATH.search(attrs)
                        if not oid.startswith("file:") or found is None:
                            continue
                        path = found.group(1)
                        assert (root / path).exists(), f"{path}: deleted, still shown"
                        disk, stale = (root / path).read_text(), STALE.search(attrs)
                        if stale is None:
                            assert text == disk, path
                            continue
                        assert not own.get(path), f"{path}: the agent's own change is marked stale"
                        newest = db.get(oid)
                        assert newest is not None and newest.doc is not None
                        assert newest.doc["meta"]["version"] == int(stale.group(1)), (path, attrs)
                        assert newest.doc["content"] == disk, path
                        assert text != disk, f"{path}: marked stale, showing the text on disk"
                    if data.draw(st.booleans(), label="opened again after this call"):
                        session.close()
                        session, files, hook = open_session()
            finally:
                session.close()
                tracker.stop()
            assert tracker.rescan() == 0
            assert_frames_verify(db, "p")
