"""End to end through the OpenAI hook: a scripted agent loop reads a file (it becomes active),
the file changes on disk under a real watchdog tracker (the shown version goes stale, never
reloads by itself), the agent refreshes it, edits it; every frame re-renders to its hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.load import object_states
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


def test_a_file_deleted_on_disk_leaves_the_active_pool_and_its_index_line_says_missing(
    root: Path, db: SqliteStore
) -> None:
    """The tracker records a deleted file as a version without content. At the next turn the
    session takes the file out of the active pool (actor ``system``, recorded as any state
    change), and its index line says the file is missing: before, its old text stayed in the
    active pool, sent on every call until the policy found it idle, although the file was gone.
    The user naming the file in that turn does not bring it back (there is nothing on disk to
    show), ``activate`` loads nothing and says why, and every frame re-renders to its hash."""
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
        assert "return 1" in tail_text(hook.transform_context(msgs))
        (root / "app.py").unlink()
        wait_for(lambda: latest_meta(db, oid).get("missing") is True, what="the tracker's missing version")
        msgs.append(user("where did app.py go?"))
        out = hook.transform_context(msgs)
        text = tail_text(out)
        assert "return 1" not in text and "Active content:" not in text
        assert f"- {oid} file app.py 7 tokens v1 (v2 newer: missing) inactive" in text
        assert hook.last is not None
        changes = hook.last.changes
        assert [(c.id, c.was, c.to, c.actor, c.reason) for c in changes] == [
            (oid, "active", "inactive", "system", "the file is missing (deleted or moved away)")
        ]
        last = object_states(db, oid)[-1]
        assert (last["state"], last["actor"], last["reason"]) == (
            "inactive",
            "system",
            "the file is missing (deleted or moved away)",
        )

        # the context tool loads nothing (the text it showed is not the file), and says so
        r = hook.session.activate(oid)
        assert r["status"] == "missing" and hook.session.view.objects[oid].state == "inactive"
        assert r["note"] == (
            "the file is missing (deleted or moved away on disk; version 2): nothing to load; "
            "lines(id) shows its text of version 1, the last one known"
        )
        assert "return 1" in hook.session.lines(oid)
        msgs.append(user("go on"))
        assert "Active content:" not in tail_text(hook.transform_context(msgs))

        frames = frame_docs(hook.session.store, hook.session.id)
        assert len(frames) == 3 and all(verify_frame(db, f).ok for f in frames)
        hook.session.close()
