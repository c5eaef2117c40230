"""End to end through the OpenAI hook: a scripted agent loop reads a file (it becomes active),
the file changes on disk under a real watchdog tracker (the shown version goes stale, never
reloads by itself), the agent refreshes it, edits it; every frame re-renders to its hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.policy import RetentionPolicy
from context_os.files import FILE_TOOLS, FileTools, FileTracker, Workspace
from context_os.harness.openai import OPENAI_PAIRING, OpenAIHook
from context_os.harness.pairing import pairing_problems
from context_os.store.sqlite import SqliteStore
from tests.files.conftest import WATCHDOG_RACE_WARNING, latest_meta
from tests.helpers import EAGER, call, result, user, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings(WATCHDOG_RACE_WARNING)]


def tail_text(out: list[dict]) -> str:
    """The context_os blocks of a context (the object index, one block per active object)."""
    blocks = [m["content"] for m in out if m["role"] == "user" and m["content"].startswith("<context_os>")]
    assert blocks, "no context_os block"
    return "\n".join(blocks)


def test_read_stale_refresh_edit_through_the_openai_hook(root: Path, db: SqliteStore) -> None:
    (root / "app.py").write_text("def main():\n    return 'v1'\n")
    ws = Workspace(root)
    with FileTracker(db, ws, rescan_interval=None) as tracker:
        hook = OpenAIHook(
            Session.open(db, "e2e", harness="openai", workspace=str(ws.root), policy=RetentionPolicy(**EAGER))
        )
        tools = FileTools(hook.session, ws, tracker=tracker)
        assert {t["name"] for t in FILE_TOOLS} >= {"read", "edit", "write"}

        def run(call_id: str, name: str, **args: object) -> dict:
            msgs.append(call(call_id, name, **args))
            text = tools.call(name, args)
            msgs.append(result(call_id, text))
            return json.loads(text)

        msgs: list[dict] = [{"role": "system", "content": "You are a coding agent."}, user("fix app.py")]
        r = run("c1", "read", path="app.py")
        assert (r["indexed"], r["pool"], r["active"]) == ("new", "added", "activated")
        oid = r["id"]
        out = hook.transform_context(msgs)
        assert not pairing_problems(OPENAI_PAIRING, out)
        text = tail_text(out)
        assert "return 'v1'" in text and f'<object id="{oid}" kind="file" path="app.py" version="1">' in text
        assert "stale" not in text

        # someone edits the file on disk: the tracker records version 2 ...
        (root / "app.py").write_text("def main():\n    return 'v2 from disk'\n")
        wait_for(lambda: latest_meta(db, oid)["version"] == 2, what="the tracker's version 2")
        msgs.append({"role": "assistant", "content": "Let me think."})
        msgs.append(user("go on"))
        out = hook.transform_context(msgs)
        text = tail_text(out)
        # ... which the session marks stale but does not load by itself
        assert "return 'v1'" in text and "v2 from disk" not in text
        assert 'stale="version 2 is newer: activate(id) loads it"' in text
        assert f"- {oid} file app.py" in text and "(v2 newer)" in text

        r = run("c2", "activate", id=oid)
        assert r["status"] == "refreshed"
        out = hook.transform_context(msgs)
        text = tail_text(out)
        assert "v2 from disk" in text and "stale" not in text

        r = run("c3", "edit", path="app.py", oldText="v2 from disk", newText="v3 by the agent")
        assert r["version"] == 3 and r["active"] == "refreshed" and "+    return 'v3 by the agent'" in r["diff"]
        out = hook.transform_context(msgs)
        assert "v3 by the agent" in tail_text(out) and "stale" not in tail_text(out)
        # the tracker sees the agent's own write too, and records nothing new: same bytes
        tracker.settle(5)

        r = run("c4", "deactivate", id="app.py")
        assert r["status"] == "deactivated"
        out = hook.transform_context(msgs)
        assert "v3 by the agent" not in tail_text(out) and f"- {oid} file app.py" in tail_text(out)
        assert not pairing_problems(OPENAI_PAIRING, out)

        frames = frame_docs(hook.session.store, hook.session.id)
        assert len(frames) == 5
        for f in frames:
            check = verify_frame(db, f)
            assert check.ok, (f["id"], check.problems)
        # the frame of turn 2 showed version 1 although version 2 existed: exactly what was sent
        turn2 = verify_frame(db, frames[1]).rendered
        assert turn2 is not None and "return 'v1'" in "\n".join(m["text"] or "" for m in turn2.messages)
    assert latest_meta(db, oid)["version"] == 3


def test_a_file_deleted_on_disk_is_shown_as_missing_not_as_one_to_load(root: Path, db: SqliteStore) -> None:
    """The tracker records a deleted file as a version without content. The session still shows
    what it showed, but its mark says the file is gone: before, it said `activate(id) loads it`,
    and the model that did so got `metadata only: the file is missing` for its trouble."""
    (root / "app.py").write_text("def main():\n    return 1\n")
    ws = Workspace(root)
    with FileTracker(db, ws, rescan_interval=None) as tracker:
        hook = OpenAIHook(
            Session.open(db, "gone", harness="openai", workspace=str(ws.root), policy=RetentionPolicy(**EAGER))
        )
        tools = FileTools(hook.session, ws, tracker=tracker)
        msgs: list[dict] = [user("fix app.py"), call("c1", "read", path="app.py")]
        oid = json.loads(tools.call("read", {"path": "app.py"}))["id"]
        msgs.append(result("c1", "read"))
        hook.transform_context(msgs)
        (root / "app.py").unlink()
        wait_for(lambda: latest_meta(db, oid).get("missing") is True, what="the tracker's missing version")
        msgs.append(user("go on"))
        out = hook.transform_context(msgs)
        text = tail_text(out)
        assert 'stale="version 2 is newer: the file is missing (deleted or moved away)"' in text
        assert "activate(id) loads it" not in text and "(v2 newer: missing)" in text
        frames = frame_docs(hook.session.store, hook.session.id)
        assert all(verify_frame(db, f).ok for f in frames)
        hook.session.close()
