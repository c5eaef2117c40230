"""A harness that goes back in its history (Pi's ``/tree``, a rewind): what only the messages it
left had brought into the context leaves it too, as it leaves the harness's own context; what
the kept history brought in stays, and so does what a compaction keeps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.policy import RetentionPolicy
from context_os.files import FileTools, Workspace
from context_os.harness import OpenAIHook
from context_os.harness.pi import COMPACTION_SUMMARY_PREFIX, PiHook, host_tool_observer
from context_os.store.sqlite import SqliteStore
from tests.harness.pi_msgs import call, result, say, user


@pytest.fixture
def setup(tmp_path: Path):
    root = tmp_path / "w"
    root.mkdir()
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "secret_plan.py").write_text("PLAN_B_TEXT = 1\n")
    (root / "notes.md").write_text("# notes\n")
    store = SqliteStore(tmp_path / "s.db")
    session = Session.open(store, "p1", harness="pi", policy=RetentionPolicy(manage_from_tokens=0))
    files = FileTools(session, Workspace(str(root)))
    hook = PiHook(session, files=files, on_sync=host_tool_observer(files))
    yield root, store, session, files, hook
    session.close()
    store.close()


def read(hook: PiHook, files: FileTools, msgs: list[dict[str, Any]], call_id: str, path: str) -> None:
    """The model asks for a read, the extension's read tool runs, its report comes back."""
    hook.transform_context(msgs)
    msgs.append(call(call_id, "read", path=path))
    report = files.read(path)
    msgs.append(result(call_id, "read", json.dumps(report)) | {"details": {"contextOs": True}})


def read_calc(hook: PiHook, files: FileTools, prompt: str) -> tuple[list[dict[str, Any]], int]:
    """A session's first turn: ``prompt``, calc.py read, answered "A1.": (its messages, the
    length a rewind back to that answer keeps)."""
    msgs = [user(prompt)]
    read(hook, files, msgs, "c1", "calc.py")
    msgs.append(say("A1."))
    return msgs, len(msgs)


def shown(out: list[dict[str, Any]]) -> str:
    return "\n".join(b.get("text", "") for m in out for b in m.get("content") or [] if isinstance(b, dict))


def test_going_back_past_a_read_takes_its_file_out(setup) -> None:
    root, store, session, files, hook = setup
    msgs, branch_point = read_calc(hook, files, "read calc.py")
    msgs.append(user("read secret_plan.py"))
    read(hook, files, msgs, "c2", "secret_plan.py")
    assert "PLAN_B_TEXT" in shown(hook.transform_context(msgs))
    # Pi's /tree back to A1, with and then without a branch summary
    back = [*msgs[:branch_point], user("what next?")]
    out = hook.transform_context(back)
    text = shown(out)
    assert "PLAN_B_TEXT" not in text and "secret_plan" not in text
    assert "return a - b" in text  # read on the kept branch: still active
    calc = files.index.lookup(files.workspace.resolve("calc.py"))
    plan = files.index.lookup(files.workspace.resolve("secret_plan.py"))
    assert calc is not None and plan is not None
    assert session.view.objects[calc.id].state == "active"
    assert plan.id not in session.view.objects
    back += [say("C1."), user("and?")]
    assert "secret_plan" not in shown(hook.transform_context(back))
    assert all(verify_frame(store, f).ok for f in frame_docs(store, "p1"))
    # read again on the new branch: it comes back
    read(hook, files, back, "c3", "secret_plan.py")
    assert "PLAN_B_TEXT" in shown(hook.transform_context(back))


def test_an_edit_on_the_branch_left_keeps_the_file_known_but_not_shown(setup) -> None:
    root, store, session, files, hook = setup
    msgs, branch_point = read_calc(hook, files, "read calc.py")
    msgs.append(user("fix notes.md"))
    read(hook, files, msgs, "c2", "notes.md")
    hook.transform_context(msgs)
    msgs.append(call("c3", "edit", path="notes.md", oldText="# notes", newText="# NOTES_EDITED"))
    (root / "notes.md").write_text("# NOTES_EDITED\n")  # Pi's own edit tool ran
    msgs.append(result("c3", "edit", "Successfully replaced text in notes.md."))
    assert "NOTES_EDITED" in shown(hook.transform_context(msgs))
    out = hook.transform_context([*msgs[:branch_point], user("what next?")])
    notes = files.index.lookup(files.workspace.resolve("notes.md"))
    assert notes is not None
    # the disk changed: the object stays, in the index only
    assert session.view.objects[notes.id].state == "inactive"
    assert "NOTES_EDITED" not in shown(out)
    assert "notes.md" in shown(out)


def test_a_pinned_file_and_one_active_before_the_branch_stay(setup) -> None:
    root, store, session, files, hook = setup
    msgs, branch_point = read_calc(hook, files, "read both")
    msgs.append(user("again, and pin the plan"))
    read(hook, files, msgs, "c2", "calc.py")  # used again on the branch: it was active before
    read(hook, files, msgs, "c3", "secret_plan.py")
    plan = files.index.lookup(files.workspace.resolve("secret_plan.py"))
    assert plan is not None
    session.pin(plan.id)
    hook.transform_context(msgs)
    text = shown(hook.transform_context([*msgs[:branch_point], user("what next?")]))
    assert "return a - b" in text and "PLAN_B_TEXT" in text


def test_a_compaction_keeps_what_its_kept_messages_brought_in(setup) -> None:
    root, store, session, files, hook = setup
    msgs, kept_from = read_calc(hook, files, "read calc.py")
    msgs.append(user("read secret_plan.py"))
    read(hook, files, msgs, "c2", "secret_plan.py")
    msgs.append(say("B1."))
    hook.transform_context(msgs)
    # Pi's compaction: a summary in place of the older messages, the recent ones kept as they were
    summary = {"role": "compactionSummary", "summary": "read calc.py", "tokensBefore": 900, "timestamp": 1}
    compacted = [summary, *msgs[kept_from:], user("go on")]
    text = shown(hook.transform_context(compacted))
    assert COMPACTION_SUMMARY_PREFIX.strip()[:20] in text
    assert "PLAN_B_TEXT" in text  # its read is among the kept messages
    calc = files.index.lookup(files.workspace.resolve("calc.py"))
    assert calc is not None
    # a compaction summarizes, it does not go back: what came after that read is still there
    assert session.view.objects[calc.id].state == "active"
    # then a /tree back to before the second read (its messages' new places were followed)
    text = shown(hook.transform_context([summary, msgs[kept_from], user("other way")]))
    assert "PLAN_B_TEXT" not in text


def test_an_openai_history_that_shrank_takes_out_what_its_lost_tail_read(tmp_path: Path) -> None:
    """The same rule for every hook: here the reads are seen in the history (``VirtualFiles``),
    and the session is reopened in another process before the rewind."""
    from context_os.harness import OpenAIHook, VirtualFiles
    from context_os.harness.toolnames import preset

    def read_call(n: int, path: str, text: str) -> list[dict[str, Any]]:
        fn = {"name": "read_file", "arguments": json.dumps({"path": path})}
        return [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{n}", "type": "function", "function": fn}]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": text},
        ]

    names = preset("canonical").extend({"read_file": "read"})
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "read calc.py"}, *read_call(1, "calc.py", "CALC_TEXT\n")]
    msgs.append({"role": "assistant", "content": "A1."})
    branch_point = len(msgs)
    msgs += [{"role": "user", "content": "and the plan"}, *read_call(2, "plan.py", "PLAN_B_TEXT\n")]
    policy = RetentionPolicy(manage_from_tokens=0)
    with SqliteStore(tmp_path / "s.db") as store:
        session = Session.open(store, "o1", harness="openai", policy=policy)
        hook = OpenAIHook(session, on_sync=VirtualFiles(session, root="/repo", tool_names=names).observe)
        for upto in (1, 3, branch_point + 1):  # one call per model step, as a live agent makes them
            hook.transform_context(msgs[:upto])
        assert "PLAN_B_TEXT" in json.dumps(hook.transform_context(msgs))
        session.close()
        again = Session.open(store, "o1", harness="openai", policy=policy)
        hook = OpenAIHook(again, on_sync=VirtualFiles(again, root=None, tool_names=names).observe)
        out = json.dumps(hook.transform_context([*msgs[:branch_point], {"role": "user", "content": "other way"}]))
        assert "PLAN_B_TEXT" not in out and "plan.py" not in out
        assert "CALC_TEXT" in out
        assert all(verify_frame(store, f).ok for f in frame_docs(store, "o1"))
        again.close()


def test_a_history_taken_in_at_once_gives_up_what_its_turns_after_the_rewind_point_brought(tmp_path: Path) -> None:
    """A history's first call holds several turns (a proxy's first request, a resumed recording):
    what each read or edit brought in is stamped with its own message, not with the first message
    of that call, so a rewind to one of those turns takes out what the later ones read. Before, a
    file read in the second turn of a first request stayed shown after a rewind to the first."""
    from context_os.harness import OpenAIHook, VirtualFiles

    def read_call(n: int, path: str, text: str) -> list[dict[str, Any]]:
        fn = {"name": "read", "arguments": json.dumps({"path": path})}
        return [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{n}", "type": "function", "function": fn}]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": text},
        ]

    msgs: list[dict[str, Any]] = [{"role": "user", "content": "read calc.py"}, *read_call(1, "calc.py", "CALC_TEXT\n")]
    msgs.append({"role": "assistant", "content": "A1."})
    branch_point = len(msgs)
    msgs += [{"role": "user", "content": "and the plan"}, *read_call(2, "plan.py", "PLAN_B_TEXT\n")]
    with SqliteStore(tmp_path / "s.db") as store:
        session = Session.open(store, "o1", harness="openai", policy=RetentionPolicy(manage_from_tokens=0))
        hook = OpenAIHook(session, on_sync=VirtualFiles(session, root="/repo", tool_names="canonical").observe)
        assert "PLAN_B_TEXT" in json.dumps(hook.transform_context(msgs))  # all of it at once
        out = json.dumps(hook.transform_context([*msgs[:branch_point], {"role": "user", "content": "other way"}]))
        assert "PLAN_B_TEXT" not in out and "plan.py" not in out
        assert "CALC_TEXT" in out
        assert all(verify_frame(store, f).ok for f in frame_docs(store, "o1"))
        session.close()


def test_a_pi_edit_in_a_history_taken_in_at_once_is_not_shown_after_a_rewind_before_it(setup) -> None:
    """Pi's own edit tool, in the second turn of a history taken in at once: a rewind to the first
    turn leaves the file known (the disk changed) but no longer shown, as after an edit made
    turn by turn (``test_an_edit_on_the_branch_left_keeps_the_file_known_but_not_shown``)."""
    root, store, session, files, hook = setup
    (root / "notes.md").write_text("# NOTES_EDITED\n")  # Pi's own edit tool ran
    msgs = [user("look around"), say("A1.")]
    branch_point = len(msgs)
    msgs += [
        user("fix notes.md"),
        call("c1", "edit", path="notes.md", oldText="# notes", newText="# NOTES_EDITED"),
        result("c1", "edit", "Successfully replaced text in notes.md."),
        say("Done."),
    ]
    assert "NOTES_EDITED" in shown(hook.transform_context(msgs))  # all of it at once
    out = hook.transform_context([*msgs[:branch_point], user("what next?")])
    notes = files.index.lookup(files.workspace.resolve("notes.md"))
    assert notes is not None and session.view.objects[notes.id].state == "inactive"
    assert "NOTES_EDITED" not in shown(out)


def test_what_a_later_message_of_a_history_taken_in_at_once_brought_in_leaves_with_it(tmp_path: Path) -> None:
    """In a call that takes in several turns at once, a file named by the user's second message
    (back from the metadata pool) and a source's hit for it are that message's: a rewind to the
    turn before it takes them out again. Before, they were stamped with the call's first message,
    which the rewind kept, and stayed shown."""
    from context_os.harness import OpenAIHook, VirtualFiles
    from context_os.sources import TextSource

    fn = {"name": "read", "arguments": json.dumps({"path": "plan.py"})}
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "read the plan"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": fn}]},
        {"role": "tool", "tool_call_id": "c1", "content": "PLAN_B_TEXT\n"},
        {"role": "assistant", "content": "A1."},
    ]
    with SqliteStore(tmp_path / "s.db") as store:
        session = Session.open(store, "o1", harness="openai", policy=RetentionPolicy(manage_from_tokens=0))
        notes = {"recall:deploy": "DEPLOY_NOTE: releases go out by make release"}
        session.add_source(TextSource("notes", notes), active_score=0.3)
        hook = OpenAIHook(session, on_sync=VirtualFiles(session, root="/repo", tool_names="canonical").observe)
        hook.transform_context(msgs)
        plan = next(o for o in session.view.objects.values() if o.kind == "file")
        session.deactivate(plan.id)
        assert "PLAN_B_TEXT" not in json.dumps(hook.transform_context([*msgs, {"role": "user", "content": "hm"}]))
        branch_point = len(msgs) + 2
        msgs += [
            {"role": "user", "content": "hm"},
            {"role": "assistant", "content": "B1."},
            {"role": "user", "content": "look at plan.py again: how do releases go out?"},
        ]
        out = json.dumps(hook.transform_context(msgs))  # two turns at once
        assert "PLAN_B_TEXT" in out and "DEPLOY_NOTE" in out
        out = json.dumps(hook.transform_context([*msgs[:branch_point], {"role": "user", "content": "other way"}]))
        assert "PLAN_B_TEXT" not in out and "DEPLOY_NOTE" not in out
        assert all(verify_frame(store, f).ok for f in frame_docs(store, "o1"))
        session.close()


@pytest.mark.parametrize("hook_of", ["resumed", "another hook"])
def test_an_earlier_prompt_edited_before_a_hook_s_first_call_is_seen(tmp_path: Path, hook_of: str) -> None:
    """A prompt edited in place, far from the first, middle and last messages, before the first
    call of a hook that took in nothing of the history (a resumed session, a restarted proxy, a
    second hook of the session): the edit is shown, the old text is not. Before, that call
    compared the first, middle and last messages only, and the session went on showing the old
    prompt (found by the proxy's model test: a restart, then a prompt reworded)."""

    def u(text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def a(text: str) -> dict[str, Any]:
        return {"role": "assistant", "content": text}

    msgs: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, u("start")]
    for k in range(6):
        msgs += [a(f"answer {k}"), u(f"prompt {k}")]
    with SqliteStore(tmp_path / "s.db") as db:
        session = Session.open(db, "s", harness="openai")
        OpenAIHook(session).transform_context([dict(m) for m in msgs])
        if hook_of == "resumed":
            session.close()
            session = Session.open(db, "s", harness="openai")
        msgs[5] = u("prompt 1, edited")  # not the first, middle (7) or last message
        msgs += [a("answer 6"), u("prompt 6")]
        shown = json.dumps(OpenAIHook(session).transform_context([dict(m) for m in msgs]))
        session.close()
    assert "prompt 1, edited" in shown and '"prompt 1"' not in shown
