"""A session's recall copies of memory files' lines (``recall:memory:…:<file>#L<a>-<b>``) follow
the files: a copy its file no longer holds at its lines ends, and a file restored is recalled
again (context/sources.py, ``MemoryScopes.outdated``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.source_tools import SourceTools
from context_os.harness.openai import OpenAIHook
from context_os.sources.memory import MemoryScopes
from context_os.sources.recall import Recall
from context_os.store import Store
from tests.helpers import say, user

QUESTION = "where do the kestrel backups run?"


def recalling(db: Store, sid: str, tmp_path: Path) -> tuple[OpenAIHook, MemoryScopes]:
    """A session whose memory is ``tmp_path/repo``'s, recalling at each user message."""
    (tmp_path / "repo").mkdir(exist_ok=True)
    session = Session.open(db, sid, harness="openai", workspace=str(tmp_path / "repo"))
    memory = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    hook = OpenAIHook(session)
    SourceTools(session, recall=Recall(db), memory=memory).register(hook.registry)
    return hook, memory


def copies(hook: OpenAIHook) -> dict[str, str]:
    """The session's recall copies: id → text."""
    return {i: str(o.content) for i, o in hook.session.view.objects.items() if o.kind == "recall"}


def recalled(db: Store, tmp_path: Path) -> tuple[OpenAIHook, list[dict[str, Any]], str, Path]:
    """Session ``s1`` after a user message recalled a fact of the topic file ``ops.md``: its hook,
    the messages so far, the fact's recall copy and the file."""
    hook, memory = recalling(db, "s1", tmp_path)
    memory.remember("backups run nightly from the kestrel host", topic="ops")
    msgs = [user(QUESTION)]
    hook.transform_context(msgs)
    (copy,) = copies(hook)
    return hook, msgs, copy, tmp_path / "repo" / ".context_os" / "memory" / "ops.md"


def test_a_topic_file_deleted_then_restored_is_recalled_again(db: Store, tmp_path: Path) -> None:
    """The copy ended with its deleted file; restored with the same text, it was recalled again,
    but the session trusted what it had last written of it and wrote nothing: every turn that
    recalled it failed (NotFound: the store no longer held it), and so did the recall tool."""
    hook, msgs, copy, ops = recalled(db, tmp_path)
    saved = ops.read_text()
    ops.unlink()
    msgs += [say("ok"), user("thanks")]
    hook.transform_context(msgs)
    assert db.get(copy) is None and copy not in hook.session.view.objects
    ops.write_text(saved)  # a git checkout, an undo
    msgs += [say("ok"), user(QUESTION)]
    hook.transform_context(msgs)
    assert copy in hook.session.view.objects and db.get(copy) is not None
    out = json.loads(hook.call_tool("recall", {"query": "kestrel backups"}))
    assert [(h["id"], h["pool"]) for h in out["hits"]] == [(copy, "already in pool")]
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))
    hook.session.close()


def test_a_copy_another_session_ended_is_stored_again_by_one_that_had_dropped_it(db: Store, tmp_path: Path) -> None:
    """A session that no longer shows a copy (dropped) cannot tell from what it last wrote of it
    whether the store still holds it: another session ended it with its deleted file."""
    first, memory = recalling(db, "s1", tmp_path)
    second, _ = recalling(db, "s2", tmp_path)
    memory.remember("backups run nightly from the kestrel host", topic="ops")
    first.transform_context([user(QUESTION)])
    second.transform_context([user(QUESTION)])
    copy = next(i for i in copies(second) if ":ops.md#" in i)  # (beside the other session's chat)
    second.session.drop(copy)
    ops = tmp_path / "repo" / ".context_os" / "memory" / "ops.md"
    saved = ops.read_text()
    ops.unlink()
    first.transform_context([user(QUESTION), say("ok"), user("thanks")])
    assert db.get(copy) is None
    ops.write_text(saved)
    second.transform_context([user(QUESTION), say("ok"), user(QUESTION + " again")])
    assert copy in second.session.view.objects and db.get(copy) is not None
    first.session.close()
    second.session.close()


def test_a_line_inserted_above_a_recalled_fact_leaves_one_copy_of_it(db: Store, tmp_path: Path) -> None:
    """Copies are keyed by their lines: a heading added above the fact made it come back under a
    second id (``#L3-3``) beside the first (``#L1-1``), which stayed in force."""
    hook, msgs, old, ops = recalled(db, tmp_path)
    ops.write_text("# Ops notes\n\n" + ops.read_text())
    msgs += [say("ok"), user("and the kestrel backups, again?")]
    hook.transform_context(msgs)
    assert [i.rsplit("#", 1)[1] for i in copies(hook)] == ["L3-3"]
    assert db.get(old) is None
    hook.session.close()


def test_a_corrected_fact_s_copy_leaves_the_session_and_the_store(db: Store, tmp_path: Path) -> None:
    """The old copy of a fact the user corrected in the file stayed in the object index, to
    activate with its stale text, and in force in the store."""
    hook, msgs, copy, ops = recalled(db, tmp_path)
    said = db.latest_tx_id()
    ops.write_text("- backups run from the osprey host since March (kestrel was retired)\n")
    msgs += [say("ok"), user("something else now: lunch?")]
    hook.transform_context(msgs)
    assert copies(hook) == {} and db.get(copy) is None
    assert db.get(copy, tx_id=said) is not None  # what it said then stays in the history
    out = json.loads(hook.call_tool("activate", {"id": copy}))
    assert out["type"] == "NotFound"
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))
    hook.session.close()


def test_a_copy_its_file_still_holds_at_its_lines_stays(db: Store, tmp_path: Path) -> None:
    """A fact added below, a secret rotated in a redacted line: the copies are still what their
    lines say, and stay (the test above it fails with every copy ended)."""
    hook, memory = recalling(db, "s1", tmp_path)
    memory.remember("backups run nightly from the kestrel host", topic="ops")
    memory.remember("the kestrel database takes DB_PASSWORD=Tr0ub4dor&3 from the vault", topic="db")
    msgs = [user("how do the kestrel backups and the kestrel database log in?")]
    hook.transform_context(msgs)
    before = copies(hook)
    assert len(before) == 2 and any("[REDACTED:" in text for text in before.values())
    mem = tmp_path / "repo" / ".context_os" / "memory"
    memory.remember("restores are tested monthly", topic="ops")
    (mem / "db.md").write_text((mem / "db.md").read_text().replace("Tr0ub4dor&3", "n3w-Secr3t&9"))
    msgs += [say("ok"), user("lunch?")]
    hook.transform_context(msgs)
    assert copies(hook) == before and all(db.get(i) is not None for i in before)
    hook.session.close()
