"""An ``on_sync`` that raised (the store locked by another process past its busy timeout while it
recorded an edit) comes after ``Session.sync`` took the new messages in: the harness retries the
call, and no sync reports them new again. The hook hands them over again at its next call, and
its observers (``VirtualFiles.observe``, ``host_tool_observer``) apply each once: on a real SQLite
file, locked by a second connection."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.ingest import SyncReport
from context_os.context.policy import RetentionPolicy
from context_os.errors import StoreUnavailable
from context_os.files import FileTools, Workspace
from context_os.harness import OpenAIHook, VirtualFiles
from context_os.harness.pi import PiHook, host_tool_observer
from context_os.store.base import Put
from context_os.store.sqlite import SqliteStore
from tests.harness.pi_msgs import step, user


@pytest.fixture(autouse=True)
def _fail_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SqliteStore, "BUSY_TIMEOUT_S", 0.2)  # the same failure as after 30 s


@contextmanager
def locked(path: Path) -> Iterator[sqlite3.Connection]:
    """Another process holding the store's write lock."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        yield other
    finally:
        if other.in_transaction:
            other.execute("COMMIT")
        other.close()


def u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def calls(*made: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in made
        ],
    }


def t(call_id: str, out: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": out}


def edit(call_id: str, path: str, old: str, new: str) -> tuple[str, str, dict[str, Any]]:
    return call_id, "edit", {"path": path, "oldText": old, "newText": new}


READ = [
    u("fix a.py and b.py"),
    calls(("c1", "read", {"path": "/w/a.py"}), ("c2", "read", {"path": "/w/b.py"})),
    t("c1", "a = 1\nx = OLD\n"),
    t("c2", "b = 1\ny = OLD\n"),
]
EDITS = [
    calls(edit("c3", "/w/a.py", "x = OLD", "x = NEW"), edit("c4", "/w/b.py", "y = OLD", "y = NEW")),
    t("c3", "Successfully replaced text in /w/a.py."),
    t("c4", "Successfully replaced text in /w/b.py."),
]


def virtual(store: SqliteStore) -> tuple[OpenAIHook, VirtualFiles]:
    session = Session.open(store, "s1", harness="openai", policy=RetentionPolicy(manage_from_tokens=0))
    files = VirtualFiles(session, root="/w", tool_names="pi")
    return OpenAIHook(session, on_sync=files.observe), files


def file_blocks(out: Any) -> dict[str, str]:
    """The text each file's last block in the context shows, by its path."""
    if isinstance(out, str):
        return dict(re.findall(r'<object id="file:[^"]*" kind="file" path="([^"]*)"[^>]*>\n(.*?)</object>', out, re.S))
    parts = out.values() if isinstance(out, dict) else out if isinstance(out, list) else []
    return {path: text for part in parts for path, text in file_blocks(part).items()}


def clean_run(tmp_path: Path) -> list[dict[str, Any]]:
    """The same calls on a store nobody locks."""
    with SqliteStore(tmp_path / "clean.db") as store:
        hook, _ = virtual(store)
        hook.transform_context(READ)
        out = hook.transform_context(READ + EDITS)
        hook.session.close()
        return out


def test_an_edit_whose_recording_failed_is_observed_at_the_retry(tmp_path: Path) -> None:
    """The harness retries the call that failed: the edits are applied then, and the context is
    what it would have been had nothing failed (before: both files kept their text from before
    the edits, not marked stale)."""
    path = tmp_path / "s.db"
    with SqliteStore(path) as store:
        hook, files = virtual(store)
        hook.transform_context(READ)
        with locked(path), pytest.raises(StoreUnavailable):
            hook.transform_context(READ + EDITS)
        out = hook.transform_context(READ + EDITS)  # the retry
        assert file_blocks(out) == {"a.py": "a = 1\nx = NEW\n\n", "b.py": "b = 1\ny = NEW\n\n"}
        assert {vf.path: (vf.version, vf.text()) for vf in files.files.values()} == {
            "/w/a.py": (2, "a = 1\nx = NEW\n"),
            "/w/b.py": (2, "b = 1\ny = NEW\n"),
        }
        for vf in files.files.values():
            assert store.get(vf.id).doc["content"] == vf.text()
        assert not files.stale_assembled()
        assert all(verify_frame(store, f).ok for f in frame_docs(store, "s1"))
        hook.session.close()
    assert out == clean_run(tmp_path)


@pytest.mark.parametrize("lock_after", ["a.py stored", "a.py shown"])
def test_an_edit_applied_before_on_sync_raised_is_not_applied_again(tmp_path: Path, lock_after: str) -> None:
    """The store is locked part way through the report: after the edit of a.py is recorded (its
    file not shown yet: the same entry fails), or once it is shown and its result collapsed (the
    edit of b.py fails). Handed over again, the edit of a.py is not applied a second time (its
    old text is no longer there: the file's content would be lost), nor stored again."""
    path = tmp_path / "s.db"
    with SqliteStore(path) as store:
        hook, files = virtual(store)
        hook.transform_context(READ)
        a_id = files.files["/w/a.py"].id
        other: list[sqlite3.Connection] = []
        submit = store.submit

        def lock_part_way(ops: Any) -> Any:
            tx = submit(ops)
            if not other and any(took(op) for op in ops):
                other.append(sqlite3.connect(path, isolation_level=None))
                other[0].execute("BEGIN EXCLUSIVE")
            return tx

        def took(op: Any) -> bool:
            if not isinstance(op, Put):
                return False
            if lock_after == "a.py stored":
                return bool(op.doc["id"] == a_id)
            return bool(op.doc["meta"].get("object") == "toolcall:s1:c3" and op.doc["content"]["collapsed"])

        store.submit = lock_part_way  # type: ignore[method-assign]
        with pytest.raises(StoreUnavailable):
            hook.transform_context(READ + EDITS)
        assert other, "the store was locked part way"
        other[0].execute("COMMIT")
        other[0].close()
        store.submit = submit  # type: ignore[method-assign]
        assert store.get(a_id).doc["content"] == "a = 1\nx = NEW\n"  # recorded before the failure
        out = hook.transform_context(READ + EDITS)
        assert {vf.path: (vf.version, vf.text()) for vf in files.files.values()} == {
            "/w/a.py": (2, "a = 1\nx = NEW\n"),
            "/w/b.py": (2, "b = 1\ny = NEW\n"),
        }
        # one version per change: the read's and the edit's
        assert len(store.history(a_id, with_corrections=True)) == 2
        assert all(verify_frame(store, f).ok for f in frame_docs(store, "s1"))
        view = hook.session.view
        assert view.objects["toolcall:s1:c3"].collapsed and view.objects["toolcall:s1:c4"].collapsed
        hook.session.close()
    assert out == clean_run(tmp_path)


def test_the_entries_of_an_on_sync_that_raised_come_again_before_the_new_ones(tmp_path: Path) -> None:
    """The hook's side: what an ``on_sync`` that raised was given, it is given again at the next
    call with what is new; once it returned, not again."""
    given: list[list[int]] = []

    def on_sync(session: Session, report: SyncReport) -> None:
        view = session.view
        given.append([view.entries[i]["i"] for i in view.visible[len(view.visible) - report.new :]])
        if len(given) == 1:
            raise StoreUnavailable("the store is out of reach")

    with SqliteStore(tmp_path / "s.db") as store:
        session = Session.open(store, "s1", harness="openai", policy=RetentionPolicy(manage_from_tokens=0))
        hook = OpenAIHook(session, on_sync=on_sync)
        msgs = [u("one"), {"role": "assistant", "content": "two"}]
        with pytest.raises(StoreUnavailable):
            hook.transform_context(msgs)
        hook.transform_context([*msgs, u("three")])
        hook.transform_context([*msgs, u("three"), {"role": "assistant", "content": "four"}, u("five")])
        assert given == [[0, 1], [0, 1, 2], [3, 4]]
        session.close()


def test_a_host_tools_edit_not_recorded_for_the_store_is_recorded_at_the_retry(tmp_path: Path) -> None:
    """Pi runs its own edit tool; ``host_tool_observer`` records the file's new version from the
    disk. With the store locked, that was not recorded (said only in the result it dropped) and
    no later call looked at the edit again: the retry showed the file's text from before it. The
    store is waited for once (the file was indexed a second time, to learn why its change went
    unrecorded: one more busy timeout, 30 s)."""
    root = tmp_path / "w"
    root.mkdir()
    (root / "a.py").write_text("x = 1\ny = OLD\n")
    path = tmp_path / "s.db"
    with SqliteStore(path) as store:
        session = Session.open(store, "p1", harness="pi", policy=RetentionPolicy(manage_from_tokens=0))
        files = FileTools(session, Workspace(str(root)))
        hook = PiHook(session, files=files, on_sync=host_tool_observer(files))
        msgs = [user("fix a.py")]
        hook.transform_context(msgs)
        file_id = files.read("a.py")["id"]
        (root / "a.py").write_text("x = 1\ny = NEW\n")  # Pi's edit tool ran
        msgs += step("c1", "edit", "Successfully replaced text.", path="a.py", oldText="y = OLD", newText="y = NEW")
        indexed: list[Path] = []
        index = files.index.index

        def counted(real: Path, **kwargs: Any) -> Any:
            indexed.append(real)
            return index(real, **kwargs)

        files.index.index = counted  # type: ignore[method-assign]
        with locked(path), pytest.raises(StoreUnavailable):
            hook.transform_context(msgs)
        assert indexed == [root / "a.py"]
        out = hook.transform_context(msgs)
        assert file_blocks(out) == {"a.py": "x = 1\ny = NEW\n\n"}
        assert store.get(file_id).doc["content"] == "x = 1\ny = NEW\n"
        assert session.view.objects[file_id].content == "x = 1\ny = NEW\n"
        assert all(verify_frame(store, f).ok for f in frame_docs(store, "p1"))
        session.close()
