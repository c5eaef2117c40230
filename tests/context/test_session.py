"""The context engine through the OpenAI hook: ingest, retention, state ops, frames, resume."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from context_os import RetentionPolicy, Session
from context_os.context.frames import FrameMemo, frame_basis, frame_docs, verify_frame
from context_os.context.view import stub_text
from context_os.errors import ContentTooLarge, LockedObject, MalformedMessage, NotFound
from context_os.harness.openai import OPENAI_PAIRING, OpenAIAdapter, OpenAIHook
from context_os.harness.pairing import pairing_problems
from context_os.store.sqlite import SqliteStore
from tests.helpers import (
    EAGER,
    assert_frames_verify,
    blocks_text,
    call,
    coding_session,
    pdf,
    png,
    result,
    say,
    stub_ref,
    user,
)

try:
    from openai.types.chat import ChatCompletionMessageParam

    OPENAI_MESSAGE = TypeAdapter(ChatCompletionMessageParam)
except ImportError:  # pragma: no cover - openai is a dev dependency
    OPENAI_MESSAGE = None


@pytest.fixture
def db(tmp_path: Path) -> SqliteStore:
    s = SqliteStore(tmp_path / "s.db")
    yield s
    s.close()


def hook_for(store, sid="s1", **policy) -> OpenAIHook:
    return OpenAIHook(Session.open(store, sid, harness="openai", policy=RetentionPolicy(**{**EAGER, **policy})))


def tool_texts(out):
    return {m["tool_call_id"]: m["content"] for m in out if m["role"] == "tool"}


def test_new_results_are_expanded_then_collapse_after_three_turns(db):
    hook = hook_for(db)
    msgs = coding_session(1)
    out = hook.transform_context(msgs)
    assert tool_texts(out)["c0"].startswith("line 0")
    for n in range(1, 4):
        msgs += [call(f"c{n}", command="ls"), result(f"c{n}", f"out {n}")]
        out = hook.transform_context(msgs)
    texts = tool_texts(out)
    assert hook.session.resolve(stub_ref(texts["c0"]) or "") == "toolcall:s1:c0"
    assert texts["c3"] == "out 3"
    assert not pairing_problems(OPENAI_PAIRING, out)


def test_only_the_five_newest_results_stay_expanded(db):
    hook = hook_for(db)
    msgs = [user("go")]
    # seven parallel calls in one assistant message, all answered in the same turn
    msgs.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"p{n}", "type": "function", "function": {"name": "grep", "arguments": "{}"}} for n in range(7)
            ],
        }
    )
    hits = [f"hit {n} " + "z" * 200 for n in range(7)]
    msgs += [result(f"p{n}", hits[n]) for n in range(7)]
    out = hook.transform_context(msgs)
    texts = tool_texts(out)
    assert [texts[f"p{n}"] for n in range(2, 7)] == hits[2:]
    assert stub_ref(texts["p0"]) and stub_ref(texts["p1"])


def test_a_collapsed_result_no_longer_than_its_stub_shows_its_own_text(db):
    """Layout 3: an edit's confirmation collapses like any result (it leaves the live set) but
    shows its text, no longer than the stub would be; it keeps that text in memory. A frame of an
    earlier layout re-renders with stubs."""
    hook = hook_for(db)
    msgs = [user("go")]
    for n in range(8):
        msgs += [call(f"c{n}"), result(f"c{n}", "ok" if n % 2 else f"out {n} " + "y" * 300)]
        out = hook.transform_context(msgs)
    texts = tool_texts(out)
    c1 = hook.session.view.objects["toolcall:s1:c1"]
    assert c1.collapsed and c1.state == "inactive" and c1.content == "ok"
    assert texts["c1"] == "ok" and texts["c3"] == "ok"  # collapsed, shown as they came
    assert stub_ref(texts["c0"]) and stub_ref(texts["c2"])  # longer than a stub: stubs
    assert c1.id not in {o.id for o in hook.session.view.live()}
    assert stub_text(c1) == "ok" and stub_ref(stub_text(c1, 2))
    frames = frame_docs(db, "s1")
    assert frames[-1]["content"]["layout"] >= 3 and all(verify_frame(db, f).ok for f in frames)
    hook.session.close()
    resumed = Session.open(db, "s1", harness="openai")
    assert resumed.view.objects["toolcall:s1:c1"].content == "ok"


def test_pinned_results_never_collapse_and_activate_brings_content_back_at_the_end(db):
    hook = hook_for(db)
    msgs = coding_session(2)
    hook.transform_context(msgs)
    assert json.loads(hook.call_tool("pin", {"id": "toolcall:s1:c0"}))["status"] == "pinned"
    for n in range(2, 6):
        msgs += [call(f"c{n}"), result(f"c{n}", f"out {n}")]
        out = hook.transform_context(msgs)
    texts = tool_texts(out)
    assert texts["c0"].startswith("line 0")  # pinned, in place
    assert stub_ref(texts["c1"])
    assert json.loads(hook.call_tool("activate", '{"id": "toolcall:s1:c1"}'))["status"] == "activated"
    out = hook.transform_context(msgs)
    assert stub_ref(tool_texts(out)["c1"])  # history stays append-only
    assert out[-1]["role"] == "user" and "line 1" in blocks_text(out)  # content in the active pool
    assert json.loads(hook.call_tool("activate", {"id": "toolcall:s1:c1"}))["status"] == "already active"
    assert json.loads(hook.call_tool("deactivate", {"id": "toolcall:s1:c1"}))["status"] == "deactivated"
    out = hook.transform_context(msgs)
    assert "line 1" not in blocks_text(out)
    ref = stub_ref(tool_texts(out)["c1"])  # what the stub names takes the agent back to it
    assert json.loads(hook.call_tool("activate", {"id": ref})) == {
        "id": "toolcall:s1:c1",
        "status": "activated",
        "tokens": 1002,
    }
    assert json.loads(hook.call_tool("activate", {"id": "r999"}))["type"] == "NotFound"


def test_every_state_change_is_recorded_with_actor_and_reason(db):
    hook = hook_for(db)
    msgs = coding_session(1)
    for n in range(1, 5):
        hook.transform_context(msgs)
        msgs += [call(f"c{n}"), result(f"c{n}", "x")]
    hook.call_tool("activate", {"id": "toolcall:s1:c0"})
    changes = hook.session.state_changes("toolcall:s1:c0")
    got = [(v.doc["content"]["state"], v.doc["meta"]["actor"], v.doc["meta"]["reason"]) for v in changes]
    assert got == [  # arriving active is not a change: the first version is the collapse
        ("inactive", "policy", "3 turns old"),
        ("active", "agent", "activate"),
    ]
    assert [v.valid_time for v in changes] == sorted(v.valid_time for v in changes)


def test_chat_and_session_are_locked(db):
    hook = hook_for(db)
    hook.transform_context(coding_session(1))
    with pytest.raises(LockedObject):
        hook.session.deactivate("chat:s1:00000")
    reply = json.loads(hook.call_tool("deactivate", {"id": "session:s1"}))
    assert reply["type"] == "LockedObject"
    with pytest.raises(NotFound):
        hook.session.activate("toolcall:s1:nope")
    with pytest.raises(LockedObject, match="another session's chat.*recall finds what a chat said"):
        hook.session.activate("chat:other:00000")  # no part of this context: nothing to load


def test_every_frame_re_renders_byte_identically_from_the_store(db):
    hook = hook_for(db)
    msgs = coding_session(1)
    for n in range(1, 8):
        hook.transform_context(msgs)
        msgs += [call(f"c{n}"), result(f"c{n}", "out" * n)]
        if n == 4:
            hook.call_tool("activate", {"id": "toolcall:s1:c0"})
    frames = frame_docs(hook.session.store, hook.session.id)
    assert len(frames) == 7
    for f in frames:
        check = verify_frame(db, f)
        assert check.ok, check.problems


def test_frames_verified_through_shared_memos_match_each_verified_alone_and_leave_them_intact(store, uid):
    from context_os.hashing import verify_doc
    from context_os.replay import replay_transcript
    from context_os.replay.transcripts import demo_transcript

    t = demo_transcript()  # a real session: file objects, stubs, collapsed calls, the horizon
    with Session.open(store, f"demo-{uid}", harness=t.harness, workspace=t.cwd) as session:
        replay_transcript(t, session, verify="none")
    frames = frame_docs(store, f"demo-{uid}")
    memo = FrameMemo()
    shared = [verify_frame(store, f, memo=memo) for f in frames]
    alone = [verify_frame(store, f) for f in frames]
    assert [(c.ok, c.rendered_hash, c.problems) for c in shared] == [(c.ok, c.rendered_hash, c.problems) for c in alone]
    assert all(c.ok for c in shared) and len(shared) == 88
    # the documents the frames shared were only read: each still matches its own hashes
    assert len(memo.docs) > 100
    assert [d["id"] for d in memo.docs.values() if verify_doc(d)] == []
    # what the memo resolved is checked again for each frame: a frame naming another version of
    # a block or a static ref the memo knows fails
    assert len(memo.blocks) > 10 and len(memo.versions) > 10
    last = frames[-1]
    ref = next(r for r in last["content"]["refs"] if "object_hash" in r)
    bad_ref = copy.deepcopy(last)
    next(r for r in bad_ref["content"]["refs"] if r["id"] == ref["id"])["object_hash"] = "blake3:" + "0" * 64
    assert verify_frame(store, bad_ref, memo=memo).problems[-1].startswith(f"static ref {ref['id']} @ tx")
    bad_block = copy.deepcopy(last)
    at, block_id, key = bad_block["content"]["blocks"][0]
    other = next(b[1] for f in frames for b in f["content"]["blocks"] if b[1] != block_id)
    bad_block["content"]["blocks"][0] = [at, other, key]
    assert not verify_frame(store, bad_block, memo=memo).ok


def test_tampering_with_a_stored_page_breaks_frame_verification(db, tmp_path):
    hook = hook_for(db)
    hook.transform_context(coding_session(2))
    frame = frame_docs(hook.session.store, hook.session.id)[-1]
    db._conn.execute("UPDATE docs SET json = replace(json, 'fix the bug', 'fix the bug!')")  # noqa: SLF001
    db._conn.commit()  # noqa: SLF001
    check = verify_frame(db, frame)
    assert not check.ok


def test_a_resumed_session_renders_exactly_what_the_live_one_did(db):
    hook = hook_for(db)
    msgs = coding_session(6)
    live = hook.transform_context(msgs)
    resumed = OpenAIHook(Session.open(db, "s1"))
    assert resumed.session.view.turn == 1
    again = resumed.transform_context(msgs)  # nothing new: same state, one turn later
    assert resumed.last.sync.new == 0
    assert [m["role"] for m in again] == [m["role"] for m in live]


def test_a_session_opened_without_its_harness_named_takes_it_when_named(db):
    def recorded(sid: str) -> str:
        doc = db.doc(f"session:{sid}")
        assert doc is not None
        return str(doc["content"]["harness"])

    Session.open(db, "q").close()  # the README's quickstart, before it named the harness
    assert recorded("q") == "generic"
    Session.open(db, "q", harness="openai").close()
    assert recorded("q") == "openai"
    reopened = Session.open(db, "q", harness="anthropic")  # a harness once named stays
    assert reopened.harness == "openai"
    reopened.close()
    assert recorded("q") == "openai"


def test_only_new_messages_are_translated(db):
    hook = hook_for(db)
    msgs = coding_session(3)
    hook.transform_context(msgs)
    msgs += [user("and now?")]
    hook.transform_context(msgs)
    assert hook.last.sync.new == 1 and not hook.last.sync.rewritten


def test_a_retried_call_gets_the_same_context_without_a_new_turn_unless_something_changed(db):
    """A harness retrying a model call (a provider's 429) sends the same messages again: a new turn
    per try aged every result, and collapsed the newest one before the model ever saw it."""
    hook = hook_for(db, collapse_after_turns=1)
    build = "the build output\n" + "compiling a module\n" * 100
    msgs = [*coding_session(1), call("c1", command="make"), result("c1", build)]
    first = hook.transform_context(msgs)
    for _ in range(3):
        assert hook.transform_context(msgs) == first and hook.last.turn == 1
    assert tool_texts(first)["c1"] == build and len(frame_docs(db, "s1")) == 1
    # something changed between the tries: the agent deactivated a result, another process wrote
    hook.session.deactivate("toolcall:s1:c1")
    again = hook.transform_context(msgs)
    assert hook.last.turn == 2 and tool_texts(again)["c1"] != build
    assert hook.transform_context(msgs) == again and hook.last.turn == 2
    with SqliteStore(db.path) as other:
        other.put({"id": "note:1", "kind": "note", "meta": {}, "content": "from another process"})
    hook.transform_context(msgs)
    assert hook.last.turn == 3
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))


def test_a_retry_gets_the_context_as_made_though_the_caller_changed_the_list_it_got(db):
    """The hook keeps no copy of the list it returns (a copy per call, for a retry that seldom
    comes, cost 13% of a call at 30,000 messages): a retry makes it again from what the hook holds.
    The list the caller got and changed in place (a message appended, one replaced, one emptied)
    changes nothing of what the retry gets, nor of the next turn."""
    hook = hook_for(db, collapse_after_turns=1)
    msgs = [*coding_session(2), call("c1", command="make"), result("c1", "built\n" * 50)]
    first = hook.transform_context(msgs)
    made = copy.deepcopy(first)
    first.append({"role": "assistant", "content": "the caller's own"})
    first[0] = {"role": "system", "content": "replaced by the caller"}
    first[-2] = {**first[-2], "content": ""}
    again = hook.transform_context(msgs)
    assert again == made and again is not first and hook.last.turn == 1
    msgs += [say("done"), user("next")]
    after = hook.transform_context(msgs)
    assert after[0] == made[0] and hook.last.turn == 2
    assert "caller" not in json.dumps(after) and after[-1] == user("next")
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))


@pytest.mark.parametrize("between", ["nothing", "an activate"])
def test_a_retry_after_a_restart_is_the_last_frame_unless_the_session_changed_since(db, between):
    """A process restarted between a try and its retry: the retry is the last frame's context, no
    new turn, when nothing changed since. An object the agent activated after that frame (written
    to the store before the restart) is not in the frame's blocks, and the frame's blocks rendered
    to its hash all the same: the retry was given the frame's context, without what it activated."""
    output = "\n".join(f"the long output, line {n}" for n in range(300))
    msgs = [user("show env"), call("c1", command="env"), result("c1", output)]
    hook = hook_for(db)
    for n in range(2, 9):  # c1 collapses
        hook.transform_context(msgs)
        msgs += [call(f"c{n}", command="ls"), result(f"c{n}", f"file{n}.txt")]
    first = hook.transform_context(msgs)
    assert tool_texts(first)["c1"] != output and len(frame_docs(db, "s1")) == 8
    if between == "an activate":
        hook.call_tool("activate", {"id": "toolcall:s1:c1"})
    hook.session.close()
    again = hook_for(db)
    context = again.transform_context(msgs)
    if between == "nothing":
        assert context == first and len(frame_docs(db, "s1")) == 8
    else:
        assert json.dumps(output)[1:-1] in json.dumps(context) and len(frame_docs(db, "s1")) == 9
    # and a retry of that retry: the same again (a session that answered from its last frame had
    # written nothing and made a turn of the next retry, before 2026-12-06)
    frames = len(frame_docs(db, "s1"))
    assert again.transform_context(msgs) == context and len(frame_docs(db, "s1")) == frames
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))
    again.session.close()


def test_a_retry_is_the_same_turn_in_a_session_managed_on_request(db):
    """A session asked to be managed from the next turn on (its file tools, a file it showed
    changed) kept asking after it was: every retry of a call was a new turn."""
    hook = OpenAIHook(Session.open(db, "s1", harness="openai"))  # the default policy: a small one passes
    hook.session.manage()
    msgs = [user("first question")]
    first = hook.transform_context(msgs)
    assert hook.session.view.managed
    for _ in range(2):
        assert hook.transform_context(msgs) == first and hook.last.turn == 1
    assert len(frame_docs(db, "s1")) == 1


def test_a_retry_is_the_same_turn_after_a_write_the_session_saw_before_its_own(db):
    """Another writer's transaction the session looked at before writing its turn (a proxy's
    note of which conversation claimed a start, written as the request came) is no write it has
    not seen: the turn's retry is the same turn. It was a new one, the gap in the transaction ids
    taken for a write unseen."""
    hook = hook_for(db)
    msgs = [user("first question")]
    hook.transform_context(msgs)
    msgs += [say("an answer"), user("SECOND question")]
    with SqliteStore(db.path) as other:
        other.put({"id": "note:1", "kind": "note", "meta": {}, "content": "from another process"})
    second = hook.transform_context(msgs)
    assert hook.last.turn == 2
    assert hook.transform_context(msgs) == second and hook.last.turn == 2
    with SqliteStore(db.path) as other:  # one written after the turn is still seen
        other.put({"id": "note:2", "kind": "note", "meta": {}, "content": "from another process"})
    hook.transform_context(msgs)
    assert hook.last.turn == 3
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))


def test_a_retry_of_a_call_that_failed_after_its_turn_was_assembled_assembles_again(db, monkeypatch):
    """A call whose turn was assembled but whose output then failed returned nothing: its retry
    is no repeat of the call before (whose context lacks the newest messages)."""
    hook = hook_for(db)
    msgs = [user("first question")]
    hook.transform_context(msgs)
    msgs += [say("an answer"), user("SECOND question")]
    finalize = hook.adapter.finalize
    failures = iter([RuntimeError("the output could not be written")])

    def failing_once(out):
        for e in failures:
            raise e
        return finalize(out)

    monkeypatch.setattr(hook.adapter, "finalize", failing_once)
    with pytest.raises(RuntimeError):
        hook.transform_context(msgs)
    out = hook.transform_context(msgs)
    assert out[-1]["content"] == "SECOND question" and hook.last.turn == 3
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))


def test_a_retry_of_a_call_whose_context_was_refused_is_checked_again(db, monkeypatch):
    """A context that failed validation is not returned; its units, kept by the hook for the
    next call, were not checked again there: the retry returned the context just refused."""
    from context_os.errors import InvalidOutput

    hook = hook_for(db)
    msgs = [user("build"), call("c1", cmd="make"), result("c1", "built")]
    hook.transform_context(msgs)
    msgs += [call("c2", cmd="make test"), result("c2", "passed")]
    render = hook.adapter.render_msg

    def orphaned(m):  # an adapter that answers a call nobody made
        out = render(m)
        return {**out, "tool_call_id": "nobody"} if out.get("role") == "tool" else out

    monkeypatch.setattr(hook.adapter, "render_msg", orphaned)
    for _ in range(2):
        with pytest.raises(InvalidOutput, match="nobody"):
            hook.transform_context(msgs)


def test_session_sync_reads_only_what_is_new_whatever_hash_the_translation_carries(db):
    # Session.sync driven by hand with an adapter's own translate (which leaves ``h`` empty) took
    # every list for a rewritten one and ingested it all again at each sync
    adapter = OpenAIAdapter()
    session = Session.open(db, "by-hand", harness="openai")
    msgs = coding_session(3)

    def sync() -> tuple[int, bool]:
        report = session.sync(
            len(msgs), lambda k: adapter.hash_message(msgs[k]), lambda k: adapter.translate(msgs[k], k)
        )
        session.flush()
        return report.new, report.rewritten

    assert sync() == (len(msgs), False)
    msgs.append(user("and now?"))
    assert sync() == (1, False)
    assert sync() == (0, False)
    assert len(session.view.entries) == len(msgs)


def test_rewritten_history_resets_the_cursor_and_loses_nothing(db):
    hook = hook_for(db)
    msgs = coding_session(4)
    hook.transform_context(msgs)
    compacted = [msgs[0], user("Summary of earlier work: read four files."), user("continue")]
    out = hook.transform_context(compacted)
    assert hook.last.sync.rewritten and hook.last.sync.retired == len(msgs) - 1
    assert [m["content"] for m in out if m["role"] == "user"][-2:] == [
        "Summary of earlier work: read four files.",
        "continue",
    ]
    # the earlier tool outputs are still in the store, inspectable
    assert db.doc("toolcall:s1:c0")["content"].startswith("line 0")
    for f in frame_docs(hook.session.store, hook.session.id):
        assert verify_frame(db, f).ok


def test_a_rewound_history_edited_early_is_seen_though_the_sampled_messages_match(db):
    """A harness that goes back to an early message, has it edited and runs again (new message
    objects): the session compared only the first, middle and last messages before its cursor,
    here the same ("continue" at both), and went on showing the old conversation."""
    hook = hook_for(db)
    system = {"role": "system", "content": "You are a helpful agent."}
    said = [user("Delete the old table."), say("Deleting it."), user("continue"), say("Deleted.")]
    hook.transform_context([system, *said, user("continue")])
    edited = [system, user("Keep the old table: list the tables only."), say("Listing them."), user("continue")]
    edited += [say("users, orders."), user("continue"), say("Anything else?"), user("Which is bigger?")]
    out = hook.transform_context(edited)
    assert [m["content"] for m in out] == [m["content"] for m in edited]
    assert hook.last.sync.rewritten and hook.last.sync.retired == 5
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))


@pytest.mark.parametrize(
    "change",
    ["content replaced", "a part appended", "a part's text replaced", "a key added", "a key removed"],
)
def test_a_first_message_changed_in_place_is_seen_though_its_hash_is_remembered(db, change):
    """The hook remembers the hashes of the messages it hashed by the objects each is made of (a
    long system prompt was serialised and hashed at every call): a message changed in place,
    at any depth, is hashed anew and seen as a rewritten history."""
    hook = hook_for(db)
    system = {"role": "system", "content": [{"type": "text", "text": "You are a helpful agent."}]}
    msgs = [system, user("list the tables"), say("users, orders.")]
    hook.transform_context(msgs)
    msgs.append(user("and now?"))
    hook.transform_context(msgs)  # the first message's hash is remembered, not computed again
    assert not hook.last.sync.rewritten
    if change == "content replaced":
        system["content"] = [{"type": "text", "text": "You are a careful agent."}]
    elif change == "a part appended":
        system["content"].append({"type": "text", "text": "Never drop a table."})
    elif change == "a part's text replaced":
        system["content"][0]["text"] = "You are a careful agent."
    elif change == "a key added":
        system["name"] = "ops"
    else:
        del system["content"][0]["type"]
        system["content"][0]["kind"] = "text"
    msgs.append(user("which is bigger?"))
    if change == "a key removed":  # (a part without a type is refused: it was read again)
        with pytest.raises(MalformedMessage, match="type"):
            hook.transform_context(msgs)
        return
    out = hook.transform_context(msgs)
    assert hook.last.sync.rewritten and hook.last.sync.retired == 4
    assert out[0] == system
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))


@pytest.mark.parametrize("every_message", [True, False])
def test_a_history_sent_as_new_objects_at_every_call_is_not_remembered(db, every_message):
    """A client that sends its whole history as JSON at every call (``ctxos serve``, the proxy)
    hands the hook new objects each time: none would be found again, so the hook remembers the
    hashes of no more of them after its first call (remembering each cost more than it saves)."""
    hook = hook_for(db)
    hook.every_message = every_message
    msgs = coding_session(3)
    hook.transform_context(json.loads(json.dumps(msgs)))
    first = len(hook._seen.hashed._hashes)
    for n in range(3):
        msgs += [say(f"answer {n}"), user(f"question {n}")]
        hook.transform_context(json.loads(json.dumps(msgs)))
        assert not hook.last.sync.rewritten and hook.last.sync.new == 2
    assert len(hook._seen.hashed._hashes) == first
    again = hook_for(db, "s2")  # the harness's own list: what it hashes is remembered
    for n in range(3):
        again.transform_context(msgs[: len(msgs) - 4 + 2 * n] if n < 2 else msgs)
    assert len(again._seen.hashed._hashes) > first


def test_a_collapsed_calls_arguments_follow_what_they_are_elided_by(db):
    """A collapsed call's elided arguments are remembered per object (the policy weighs each
    collapse at every turn): once its result is marked as showing a file's text, its arguments
    holding that text are elided, though short, as if nothing were remembered."""
    hook = hook_for(db, collapse_after_turns=1)
    written = "\n".join(f"wrote line {i}" for i in range(200))
    msgs = [user("write it"), call("c1", "write", path="a.py", content="print('short')"), result("c1", written)]
    for n in range(2, 5):
        hook.transform_context(msgs)
        msgs += [call(f"c{n}", command="ls"), result(f"c{n}", "a.py")]
    out = hook.transform_context(msgs)
    [shown] = [m for m in out if m.get("tool_calls") and m["tool_calls"][0]["id"] == "c1"]
    assert "print('short')" in shown["tool_calls"][0]["function"]["arguments"]
    assert "collapsed" in next(m["content"] for m in out if m.get("tool_call_id") == "c1")
    hook.session.mark_file_text("toolcall:s1:c1", ["content"])
    msgs += [say("done"), user("next")]
    out = hook.transform_context(msgs)
    [shown] = [m for m in out if m.get("tool_calls") and m["tool_calls"][0]["id"] == "c1"]
    arguments = json.loads(shown["tool_calls"][0]["function"]["arguments"])
    assert arguments["path"] == "a.py" and "elided" in arguments["content"]
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))


def test_two_hooks_of_one_session_called_in_turn_send_what_their_frames_record(db):
    """Each hook keeps the messages it made of its last render, for the units the view reports
    unchanged since its last committed render; that render was the other hook's: a result the
    session had collapsed since went out expanded, where its frame recorded it collapsed."""
    from context_os.context.frames import rerender

    session = Session.open(db, "s1", harness="openai", policy=RetentionPolicy(**EAGER, keep_recent_results=1))
    first, second = OpenAIHook(session), OpenAIHook(session)
    msgs = [user("go"), call("c1", cmd="ls"), result("c1", "\n".join(f"row {i}" for i in range(200)))]
    first.transform_context(msgs)
    msgs += [call("c2", cmd="pwd"), result("c2", "/w")]
    second.transform_context(msgs)  # c1 collapses
    msgs += [say("ok"), user("next")]
    out = first.transform_context(msgs)
    recorded = [OpenAIAdapter().render_msg(m) for m in rerender(db, frame_docs(db, "s1")[-1]).messages]
    assert out == recorded
    assert "collapsed" in next(m["content"] for m in out if m.get("tool_call_id") == "c1")
    session.close()


def test_a_tool_result_rewritten_alone_is_its_calls_result(db):
    """The harness rewrote an old tool result (its own clearing) and kept its call: the result in
    its place was a new object no call named, and the call still named the one retired, showing
    its arguments elided behind a ref to it while the new result was expanded."""
    hook = hook_for(db)
    patch = "\n".join(f"+ line {i} of the new module" for i in range(30))
    msgs = [user("apply the patch"), call("c1", "apply_patch", patch=patch), result("c1", "applied: 30 lines")]
    msgs += [say("done"), user("now run the tests")]
    hook.transform_context(msgs)
    msgs[2] = result("c1", "applied")
    msgs += [say("running"), user("status?")]
    out = hook.transform_context(msgs)
    assert json.loads(out[1]["tool_calls"][0]["function"]["arguments"]) == {"patch": patch}
    assert out[2]["content"] == "applied"
    view = hook.session.view
    new = view.objects[view.entries[view.visible[2]]["object"]]
    assert new.id != "toolcall:s1:c1" and new.call_entry == view.visible[1]
    assert view.call_of(new)["id"] == "c1"
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))
    again = Session.open(db, "s1")  # a resumed session finds the same
    assert again.view.objects[new.id].call_entry == new.call_entry
    again.close()


def test_a_turn_whose_transaction_failed_is_that_turn_again_at_its_retry(tmp_path, monkeypatch):
    """A turn whose transaction failed (the store locked by another process past its busy
    timeout) had counted as a turn: its retry was the next, and the newest result, which the
    model never saw, one turn older (with ``collapse_after_turns=1``, collapsed at once)."""
    import sqlite3

    from context_os.errors import StoreUnavailable

    monkeypatch.setattr(SqliteStore, "BUSY_TIMEOUT_S", 0.2)
    db = SqliteStore(tmp_path / "s.db")
    hook = hook_for(db, collapse_after_turns=1)
    msgs = [user("build it"), call("c1", "bash", cmd="make"), result("c1", "BUILD FAILED\n" + "error\n" * 40)]
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process writes meanwhile
    with pytest.raises(StoreUnavailable):
        hook.transform_context(msgs)
    assert hook.session.view.turn == 0
    other.execute("COMMIT")
    other.close()
    out = hook.transform_context(msgs)  # the harness retries the call
    assert hook.last.turn == 1 and out[-1]["content"].startswith("BUILD FAILED")
    assert [f["content"]["turn"] for f in frame_docs(db, "s1")] == [1]
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))
    db.close()


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"role": "wizard", "content": "hi"}, "role"),
        ({"role": "user", "content": 42}, "content"),
        ({"role": "tool", "content": "x"}, "tool_call_id"),
        ({"role": "user", "content": "bad \udc80 surrogate"}, "content"),
        ({"role": "assistant", "content": None, "tool_calls": [{"id": "x", "function": {}}]}, "tool_calls[0]"),
    ],
)
def test_malformed_messages_name_index_and_field_and_store_nothing(db, bad, field):
    hook = hook_for(db)
    msgs = coding_session(1)
    hook.transform_context(msgs)
    before = db.latest_tx()
    with pytest.raises(MalformedMessage) as err:
        hook.transform_context([*msgs, user("fine"), bad])
    assert err.value.index == len(msgs) + 1
    assert err.value.field == field
    assert db.latest_tx() == before
    out = hook.transform_context([*msgs, user("fine")])  # the session goes on
    assert out[-1]["content"] == "fine"


def test_huge_content_is_refused_with_a_clear_error(db):
    hook = hook_for(db, max_message_chars=1000)
    with pytest.raises(ContentTooLarge, match="message 1, field 'content'"):
        hook.transform_context([user("a"), user("b" * 1001)])


def test_output_is_valid_openai_even_when_the_input_has_orphans(db):
    hook = hook_for(db)
    msgs = [user("go"), call("a"), user("interrupted"), result("ghost", "late output")]
    out = hook.transform_context(msgs)
    assert not pairing_problems(OPENAI_PAIRING, out)
    assert hook.last.rendered.message_count == len(out) == len(hook.last.rendered.messages)
    assert out[2]["role"] == "tool" and out[2]["tool_call_id"] == "a"  # synthetic result
    assert "late output" in out[-1]["content"] and out[-1]["role"] == "user"
    if OPENAI_MESSAGE is not None:
        for m in out:
            OPENAI_MESSAGE.validate_python(m)


@pytest.mark.parametrize("dump", [{"exclude_none": True}, {}, {"exclude_unset": True}])
def test_the_sdk_s_own_reply_messages_are_taken_as_they_came(tmp_path, dump):
    """A loop written as the OpenAI SDK documents it appends ``completion.choices[0].message``
    (a ``ChatCompletionMessage``) to its messages, or builds a dict around its ``tool_calls``; a
    history saved as JSON (null fields written out or not) and loaded in another process is then
    the same history."""
    chat = pytest.importorskip("openai.types.chat")
    path = tmp_path / "s.db"

    def reply(call_id: str) -> object:
        choice = {"index": 0, "finish_reason": "tool_calls", "message": call(call_id, command="ls")}
        completion = {"id": "r", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
        return chat.ChatCompletion.model_validate(completion).choices[0].message

    store = SqliteStore(path)
    hook = hook_for(store)
    msgs: list = [user("go")]
    for n in range(6):
        hook.transform_context(msgs)
        message = reply(f"c{n}")
        msgs.append(message if n % 2 else {"role": "assistant", "content": None, "tool_calls": message.tool_calls})
        msgs.append(result(f"c{n}", f"out {n}\n" + "x" * 4000))
    out = hook.transform_context(msgs)
    assert [m["tool_calls"][0]["id"] for m in out if m["role"] == "assistant"] == [f"c{n}" for n in range(6)]
    assert stub_ref(tool_texts(out)["c0"])  # managed as any other result
    assert not pairing_problems(OPENAI_PAIRING, out)
    for m in out:
        OPENAI_MESSAGE.validate_python(m)
    hook.session.close()
    store.close()

    saved = json.loads(json.dumps(msgs, default=lambda sdk: sdk.model_dump(mode="json", **dump)))
    with SqliteStore(path) as again:
        resumed = OpenAIHook(Session.open(again, "s1", harness="openai"))
        assert resumed.held(saved) == len(saved)  # every message hashes as it did
        resumed.transform_context([*saved, user("and now?")])
        assert not resumed.last.sync.rewritten and resumed.last.sync.new == 1


def test_feeding_the_assembled_context_back_as_the_history_is_refused(db):
    """``messages = hook.transform_context(messages)`` keeps the assembled context as the
    history: once a result collapses, its stub would be taken in as a new tool output (and the
    ``<context_os>`` blocks as user messages). The hook names the first such message instead,
    and stores nothing of that call."""
    hook = hook_for(db)
    msgs = coding_session(1)
    with pytest.raises(MalformedMessage, match="one the hook returned") as err:
        for n in range(1, 8):
            msgs = hook.transform_context(msgs)
            before = db.latest_tx()
            msgs += [call(f"c{n}", command="ls"), result(f"c{n}", f"out {n}\n" + "x" * 4000)]
    assert err.value.index is not None and err.value.index < len(msgs) - 2
    assert db.latest_tx() == before
    assert not any((e.get("text") or "").startswith("[bash output") for e in hook.session.view.entries)


def test_a_hook_of_another_harness_than_the_session_was_recorded_with_is_refused(db):
    """``Session.open`` of a recorded session keeps the harness it was recorded with. A hook of
    another harness on it read its history in another format: every message a rewrite, the
    session still named after the first harness. It is refused, as ``ctxos serve`` refuses it;
    a session recorded as generic takes any hook."""
    from context_os.errors import StateError
    from context_os.harness import AnthropicHook

    with Session.open(db, "oa", harness="openai") as s:
        OpenAIHook(s).transform_context([user("hi")])
    with Session.open(db, "oa", harness="anthropic") as s:
        assert s.harness == "openai"
        with pytest.raises(StateError, match="'oa' was recorded with harness 'openai', not 'anthropic'"):
            AnthropicHook(s)
        assert OpenAIHook(s).transform_context([user("hi"), say("hello"), user("go on")])[-1] == user("go on")
    with Session.open(db, "any") as s:
        assert AnthropicHook(s).transform_request([user("hi")])["messages"] == [user("hi")]


def test_a_copy_of_the_assembled_context_fed_back_is_refused_too(db, tmp_path):
    """The same mistake through a copy: a harness that keeps the context and saves it as JSON (or
    deep-copies it) gives back equal messages, not the ones returned, so identity cannot tell.
    Before, its ``<context_os>`` blocks were taken in as user messages, and the next context
    showed every block twice. A user message holding a block of the last call is refused; the
    Anthropic hook's merged blocks as well."""
    from context_os.files import FileTools, Workspace
    from context_os.harness import AnthropicHook

    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.py").write_text("x = 1\n")
    ws = Workspace(tmp_path / "ws")
    session = Session.open(db, "copy", harness="openai", workspace=str(ws.root))
    hook = OpenAIHook(session, files=FileTools(session, ws))
    msgs = [user("go"), call("c1", "read", path="a.py"), result("c1", hook.call_tool("read", {"path": "a.py"}))]
    msgs = json.loads(json.dumps(hook.transform_context(msgs)))
    assert blocks_text(msgs)  # what the harness should never keep: blocks
    before = db.latest_tx()
    with pytest.raises(MalformedMessage, match="one the hook returned") as err:
        hook.transform_context([*msgs, say("done"), user("and now?")])
    assert err.value.index == 3 and msgs[3]["content"].startswith("<context_os>")
    assert db.latest_tx() == before

    a = Session.open(db, "copy-a", harness="anthropic", workspace=str(ws.root))
    ahook = AnthropicHook(a, files=FileTools(a, ws))
    out = ahook.call_tool("read", {"path": "a.py"})
    amsgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": out}]},
    ]
    sent = json.loads(json.dumps(ahook.transform_request(amsgs, system="S")["messages"]))
    assert any(b.get("type") == "text" and b["text"].startswith("<context_os>") for b in sent[2]["content"])
    with pytest.raises(MalformedMessage, match="one the hook returned") as err:
        ahook.transform_request([*sent, {"role": "assistant", "content": "ok"}, user("more")], system="S")
    assert err.value.index == 2


def test_a_copy_of_the_assembled_context_without_blocks_fed_back_is_refused(db):
    """A copy of the context that holds no ``<context_os>`` block (no files, no index) has only
    its stubs to tell it by. Before, a stub fed back through a deep copy or JSON was taken in as
    the result's new output: the real one retired, the model shown a stub of a stub whose ref
    answered ``NotFound``. A tool message whose text is the stub of one of the session's results
    is refused as the fed-back context it is, and nothing of that call is stored."""
    for n, keep in enumerate((copy.deepcopy, lambda out: json.loads(json.dumps(out)))):
        hook = hook_for(db, f"copy{n}", manage_from_tokens=1, keep_recent_results=1, collapse_after_turns=1)
        msgs = [user("go")]
        with pytest.raises(MalformedMessage, match="one the hook returned") as err:
            for k in range(6):
                msgs += [call(f"c{k}", command="ls"), result(f"c{k}", "x" * 2000)]
                before = db.latest_tx()
                msgs = keep(hook.transform_context(msgs))
        assert msgs[err.value.index]["content"].startswith("[bash output")
        assert db.latest_tx() == before
        assert not hook.session.retired


def test_token_budget_collapses_least_recently_used_first_deterministically(db):
    hook = hook_for(db, token_budget=3000, keep_recent_results=10, collapse_after_turns=10)
    msgs = [user("go")]
    for n in range(4):
        msgs += [call(f"c{n}"), result(f"c{n}", f"{n}" * 4000)]  # 1,000 tokens each
        hook.transform_context(msgs)
    assert hook.last.tokens <= 3000
    states = {o.id.rsplit(":", 1)[1]: o.state for o in hook.session.view.objects.values()}
    assert states == {"c0": "inactive", "c1": "inactive", "c2": "active", "c3": "active"}


def test_rendering_is_deterministic_across_stores(tmp_path):
    hashes = []
    for name in ("a", "b"):
        with SqliteStore(tmp_path / f"{name}.db") as s:
            hook = hook_for(s)
            msgs = coding_session(3)
            hook.transform_context(msgs)
            hashes.append(hook.last.rendered.rendered_hash)
    assert hashes[0] == hashes[1]


def test_async_hook(db):
    hook = hook_for(db)
    out = asyncio.run(hook.atransform_context(coding_session(2)))
    assert tool_texts(out)["c1"].startswith("line 1")


def test_final_answer_then_new_user_turn(db):
    hook = hook_for(db)
    msgs = [*coding_session(1), say("done"), user("thanks, now tests")]
    out = hook.transform_context(msgs)
    assert out[-1] == {"role": "user", "content": "thanks, now tests"}


def first_call_arguments(hook: OpenAIHook, msgs: list, turns: int = 3) -> tuple[dict, dict]:
    """The arguments of the first call as sent now, and after ``turns`` more calls (``msgs`` grows)."""

    def first() -> dict:
        return json.loads(out[1]["tool_calls"][0]["function"]["arguments"])

    out = hook.transform_context(msgs)
    before = first()
    for n in range(turns):
        msgs += [call(f"c{n}"), result(f"c{n}", "x")]
        out = hook.transform_context(msgs)
    return before, first()


def test_a_collapsed_calls_long_arguments_collapse_with_its_result(db):
    hook = hook_for(db)
    big = "new text " * 100
    msgs = [user("edit it"), call("e1", "edit", path="a.py", newText=big), result("e1", "ok")]
    before, args = first_call_arguments(hook, msgs)
    assert before["newText"] == big
    assert args["path"] == "a.py" and args["newText"].startswith("[900 chars elided: activate(")
    hook.call_tool("activate", {"id": "toolcall:s1:e1"})
    out = hook.transform_context(msgs)
    assert big in out[-1]["content"]  # the full call comes back with the output
    for f in frame_docs(hook.session.store, hook.session.id):
        assert verify_frame(db, f).ok


def test_a_collapsed_calls_long_list_arguments_collapse_too(db):
    from context_os.context.frames import rerender

    hook = hook_for(db)
    todos = [{"content": f"step {n}: fix the parser's error path", "status": "pending"} for n in range(8)]
    msgs = [user("plan it"), call("t1", "TodoWrite", todos=todos, note="short"), result("t1", "ok")]
    before, args = first_call_arguments(hook, msgs)
    assert before["todos"] == todos
    size = len(json.dumps(todos, separators=(",", ":")))
    assert args == {"todos": f'[{size:,} chars elided: activate("r2")]', "note": "short"}
    frame = frame_docs(db, "s1")[-1]
    assert frame["content"]["layout"] >= 6 and verify_frame(db, frame).ok
    old = rerender(db, {**frame, "content": {**frame["content"], "layout": 5}})
    assert json.loads(old.messages[1]["tool_calls"][0]["arguments"]) == {"todos": todos, "note": "short"}


def test_a_result_arriving_after_a_resume_keeps_frames_verifiable(db):
    hook = hook_for(db)
    msgs = [user("edit it"), call("e1", "edit", path="a.py", newText="n" * 1000)]
    hook.transform_context(msgs)
    resumed = OpenAIHook(Session.open(db, "s1"))
    msgs.append(result("e1", "ok"))
    for n in range(4):
        msgs += [call(f"c{n}"), result(f"c{n}", "x")]
        resumed.transform_context(msgs)
    for f in frame_docs(resumed.session.store, resumed.session.id):
        assert verify_frame(db, f).ok, f["id"]


def note(version: int, text: str) -> dict:
    """Version ``version`` of a stored object the session shows (a memory file's): ``text``."""
    from context_os.objects import SourceDoc

    return SourceDoc(
        id="memory:notes", kind="memory", content=text, meta={"name": "notes.md", "version": version, "tokens": 5}
    ).to_doc()


def test_shown_objects_go_stale_but_never_reload_by_themselves(db):
    db.put(note(1, "first draft"))
    hook = hook_for(db)
    msgs = [user("hi")]
    assert hook.session.show("memory:notes")["status"] == "activated"
    out = hook.transform_context(msgs)
    assert "first draft" in blocks_text(out) and "stale" not in blocks_text(out)
    db.put(note(2, "second draft"))
    out = hook.transform_context(msgs)
    assert "first draft" in blocks_text(out)
    assert 'stale="version 2 is newer' in blocks_text(out)
    assert json.loads(hook.call_tool("activate", {"id": "memory:notes"}))["status"] == "refreshed"
    out = hook.transform_context(msgs)
    assert "second draft" in blocks_text(out) and "stale" not in blocks_text(out)
    for f in frame_docs(hook.session.store, hook.session.id):
        assert verify_frame(db, f).ok, f["id"]
    reasons = [v.doc["meta"]["reason"] for v in hook.session.state_changes("memory:notes")]
    assert reasons == ["show", "a newer version exists", "refresh to the newer version"]


def test_a_newer_version_written_before_a_turn_that_could_not_check_is_seen_the_turn_after(db, monkeypatch):
    """A turn that cannot ask the store whether others wrote (out of reach: ``StoreUnavailable``)
    skips the checks for evictions and newer versions; the next turn that reaches it checks,
    though the newest transaction is then this session's own."""
    from context_os.errors import StoreUnavailable
    from context_os.objects import SourceDoc

    def note(version: int, text: str):
        return SourceDoc(id="memory:n", kind="memory", content=text, meta={"name": "n.md", "version": version}).to_doc()

    db.put(note(1, "first draft"))
    hook = hook_for(db)
    msgs = [user("hi")]
    hook.session.show("memory:n")
    hook.transform_context(msgs)
    db.put(note(2, "second draft"))  # another writer, before the next turn
    real = db.latest_tx_id

    def out_of_reach() -> int | None:
        monkeypatch.setattr(db, "latest_tx_id", real)  # once
        raise StoreUnavailable("the store is out of reach")

    monkeypatch.setattr(db, "latest_tx_id", out_of_reach)
    msgs.append(user("go on"))
    assert "stale" not in blocks_text(hook.transform_context(msgs))  # could not check: goes on
    msgs.append(user("and on"))
    assert 'stale="version 2 is newer' in blocks_text(hook.transform_context(msgs))


def test_full_chat_pages_are_named_by_one_aggregate_ref(db):
    hook = hook_for(db)
    from context_os.context.persist import PAGE_SIZE

    msgs = coding_session(PAGE_SIZE)  # 2 + 2 * PAGE_SIZE messages: two full pages and a partial one
    hook.transform_context(msgs)
    frame = frame_docs(hook.session.store, hook.session.id)[-1]
    refs = frame["content"]["refs"]
    sealed = [r for r in refs if "sealed_pages" in r]
    assert sealed == [{"id": "chat:s1", "sealed_pages": 2, "pages_hash": sealed[0]["pages_hash"]}]
    assert [r["id"] for r in refs if r["id"].startswith("chat:s1:")] == ["chat:s1:00002"]
    assert verify_frame(db, frame).ok
    forged = json.loads(json.dumps(frame))
    forged["content"]["refs"][refs.index(sealed[0])]["pages_hash"] = "b3:" + "0" * 64
    problems = verify_frame(db, forged).problems
    assert any("full chat pages" in p for p in problems)


# -- where the blocks of the volatile part stand ---------------------------------------------


def _note(version: int, text: str, name: str = "notes.md") -> dict:
    from context_os.objects import SourceDoc

    oid = "memory:" + name.split(".")[0]
    return SourceDoc(id=oid, kind="memory", content=text, meta={"name": name, "version": version}).to_doc()


def _block_positions(out: list[dict]) -> dict[str, int]:
    """Position of each context_os block in ``out``, by the first words after its header."""
    return {
        m["content"].splitlines()[2][:40]: i
        for i, m in enumerate(out)
        if m["role"] == "user" and m["content"].startswith("<context_os>")
    }


def test_a_block_stays_in_place_while_it_does_not_change_and_moves_to_the_end_when_it_does(db):
    db.put(_note(1, "plan v1"))
    db.put(_note(1, "todo v1", name="todo.md"))
    hook = hook_for(db)
    msgs = [user("hi")]
    hook.session.show("memory:notes")
    hook.session.show("memory:todo")
    first = hook.transform_context(msgs)
    assert [m["role"] for m in first[-3:]] == ["user"] * 3  # two objects, then the index: all at the end
    msgs += [say("ok"), user("go on")]
    second = hook.transform_context(msgs)
    # nothing changed: every block stands where it stood, the new messages come after them
    assert second[: len(first)] == first
    assert second[len(first) :] == [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go on"}]
    db.put(_note(2, "plan v2"))
    hook.transform_context(msgs)  # the session sees v2 (the block says it is stale)
    assert json.loads(hook.call_tool("activate", {"id": "memory:notes"}))["status"] == "refreshed"
    msgs += [say("noted"), user("and now")]
    third = hook.transform_context(msgs)
    pos = _block_positions(third)
    todo = next(p for k, p in pos.items() if "memory:todo" in k)
    notes = next(p for k, p in pos.items() if "memory:notes" in k)
    ok = third.index({"role": "assistant", "content": "ok"})
    assert third[todo] in first and todo < ok  # unchanged: in place, before the chat that followed
    assert notes > ok and "plan v2" in third[notes]["content"]  # changed: at the end
    assert "plan v1" not in blocks_text(third)
    assert not pairing_problems(OPENAI_PAIRING, third)
    assert_frames_verify(db, hook.session.id)
    recorded = frame_docs(hook.session.store, hook.session.id)[-1]["content"]["blocks"]
    assert recorded[0][0] is not None and recorded[0][1].startswith("block:s1:")  # recorded: todo in place


def test_a_block_is_never_left_between_a_call_and_its_results(db):
    db.put(_note(1, "plan"))
    hook = hook_for(db)
    hook.session.show("memory:notes")
    msgs = [user("hi"), call("c1", command="ls")]  # the model's call still waits for its result
    out = hook.transform_context(msgs)
    assert [m["role"] for m in out[-4:]] == ["assistant", "tool", "user", "user"]  # a stand-in result, the blocks
    msgs.append(result("c1", "a.py"))
    out = hook.transform_context(msgs)
    assert not pairing_problems(OPENAI_PAIRING, out)
    assert [m["role"] for m in out[-4:]] == ["assistant", "tool", "user", "user"]  # the blocks after the result
    assert out[-3]["content"] == "a.py"
    for f in frame_docs(hook.session.store, hook.session.id):
        assert verify_frame(db, f).ok


def test_a_frame_from_before_blocks_had_places_re_renders_as_one_block_at_the_end(db):
    from context_os.context.frames import rerender

    db.put(_note(1, "plan"))
    hook = hook_for(db)
    hook.session.show("memory:notes")
    hook.transform_context([user("hi")])
    frame = frame_docs(hook.session.store, hook.session.id)[-1]
    legacy = {
        **frame,
        "content": {k: v for k, v in frame["content"].items() if k not in ("tail_layout", "tail_at", "blocks")},
    }
    old = rerender(db, legacy)
    assert [m["role"] for m in old.volatile] == ["user"]
    assert "Objects in this session" in old.volatile[0]["text"] and "plan" in old.volatile[0]["text"]
    assert old.rendered_hash != frame["content"]["rendered_hash"]  # the layout is part of the hash


def test_the_hook_sends_what_the_frame_records_when_the_budget_renders_in_between(db):
    hook = hook_for(db, token_budget=3000)
    msgs = coding_session(1, output_chars=2000)
    for n in range(1, 8):
        hook.transform_context(msgs)
        msgs += [call(f"c{n}", command="ls"), result(f"c{n}", f"out {n}\n" + "y" * 2000)]
        out = hook.transform_context(msgs)
        rendered = hook.last.rendered if hook.last else None
        assert rendered is not None
        fresh = hook.adapter.finalize([hook.adapter.render_msg(m) for m in rendered.messages])
        assert out == fresh, n  # what the hook sent is what the frame re-renders to
    for f in frame_docs(hook.session.store, hook.session.id):
        assert verify_frame(db, f).ok


def test_the_sealed_pages_hash_kept_as_pages_fill_is_the_hash_of_them_all():
    from context_os.context.view import _SealedPages, sealed_pages_hash

    hashes = [f"b3:{i:064x}" for i in range(40)]
    sealed = _SealedPages()
    got = [sealed.extend(hashes[lo:hi]) for lo, hi in [(0, 0), (0, 1), (1, 17), (17, 40)]]
    assert got == [sealed_pages_hash(hashes[:n]) for n in (0, 1, 17, 40)]


def test_frames_of_a_long_session_verify_across_hash_checkpoints(db):
    # > 3 checkpoints' worth of history units (one every 64), with collapses rewriting units
    # behind the end every turn, so the hash resumes from an earlier checkpoint each time
    hook = hook_for(db)
    msgs = coding_session(1, output_chars=300)
    for n in range(1, 110):
        msgs += [call(f"c{n}", command=f"cat f{n}"), result(f"c{n}", f"out {n}\n" + "z" * 300)]
        hook.transform_context(msgs)
    frames = frame_docs(hook.session.store, hook.session.id)
    assert len(frames) == 109
    for f in frames[::9] + frames[-3:]:
        check = verify_frame(db, f)
        assert check.ok, (f["id"], check.problems)


def test_a_turn_is_one_transaction_and_its_frame_is_rendered_from_it(db):
    hook = hook_for(db)
    msgs = coding_session(1)
    hook.transform_context(msgs)
    for n in range(1, 6):
        msgs += [call(f"c{n}"), result(f"c{n}", f"out {n}")]
        before = db.latest_tx()
        hook.transform_context(msgs)
        after = db.latest_tx()
        assert before is not None and after is not None and after.id == before.id + 1
        frame = db.get(hook.last.frame_id)
        assert frame is not None and frame.tx_id == after.id
        assert "basis_tx_id" not in frame.doc["content"]
        assert frame_basis(db, frame.doc) == after.id
        # what the turn wrote is named without a transaction; the check resolves it to the frame's
        own = [r for r in frame.doc["content"]["refs"] if "sealed_pages" not in r and r["tx_id"] is None]
        assert any(r["id"] == "session:s1" for r in own)
        check = verify_frame(db, frame.doc)
        assert check.ok, check.problems
        assert check.basis == after.id and all(r["tx_id"] is not None for r in check.refs if "sealed_pages" not in r)


def test_a_turn_the_store_refused_is_written_with_the_next_one(db):
    hook = hook_for(db)
    msgs = coding_session(1)
    hook.transform_context(msgs)
    msgs += [call("c1"), result("c1", "out 1")]
    db._conn.execute("PRAGMA query_only=ON")  # noqa: SLF001 - the file refuses every write
    with pytest.raises(Exception, match="readonly|read-only|query"):
        hook.transform_context(msgs)
    db._conn.execute("PRAGMA query_only=OFF")  # noqa: SLF001
    msgs += [call("c2"), result("c2", "out 2")]
    hook.transform_context(msgs)
    frames = frame_docs(db, "s1")
    # the turn the store refused was never shown: no frame, and the next call is that turn again
    assert [f["content"]["turn"] for f in frames] == [1, 2]
    for f in frames:
        check = verify_frame(db, f)
        assert check.ok, check.problems
    assert db.get("toolcall:s1:c1") is not None  # what the refused turn took in was written with the next
    resumed = Session.open(db, "s2", harness="openai")
    resumed.close()


def test_a_collapsed_result_leaves_memory_and_comes_back_from_the_store(db):
    hook = hook_for(db)
    msgs = coding_session(1)
    hook.transform_context(msgs)
    for n in range(1, 5):
        msgs += [call(f"c{n}"), result(f"c{n}", f"out {n} " + "y" * 300)]
        hook.transform_context(msgs)
    c0 = hook.session.view.objects["toolcall:s1:c0"]
    assert c0.collapsed and c0.content is None  # the store has it
    assert hook.session.view.objects["toolcall:s1:c4"].content.startswith("out 4")
    assert json.loads(hook.call_tool("activate", {"id": "toolcall:s1:c0"}))["status"] == "activated"
    assert c0.content.startswith("line 0")
    out = hook.transform_context(msgs)
    assert "line 0" in blocks_text(out)
    for f in frame_docs(db, "s1"):
        assert verify_frame(db, f).ok
    # a resumed session lets them go too
    hook.session.close()
    resumed = Session.open(db, "s1", harness="openai")
    assert resumed.view.objects["toolcall:s1:c1"].content is None
    assert resumed.view.objects["toolcall:s1:c0"].content.startswith("line 0")  # active again


def test_a_session_is_not_opened_on_a_read_only_store(tmp_path: Path) -> None:
    """``Session.open`` writes (the lease, every turn): on a store opened ``?mode=ro`` it is
    refused saying so and what reads such a store (it said only "submit failed")."""
    from context_os.context.load import load_view
    from context_os.errors import StoreError
    from context_os.store import open_store

    path = tmp_path / "s.db"
    with SqliteStore(path) as db:
        OpenAIHook(Session.open(db, "a", harness="openai")).transform_context([{"role": "user", "content": "hi"}])
    with open_store(f"sqlite://{path}?mode=ro") as ro:
        with pytest.raises(StoreError, match=r"opened read-only: Session.open writes .* load_view"):
            Session.open(ro, "a", harness="openai")
        assert load_view(ro, "a").turn == 1


@pytest.mark.parametrize("bad", ["", "a b", "a\tb"])
def test_a_session_id_that_is_no_id_is_bad_input(db: SqliteStore, bad: str) -> None:
    """As the CLI (``--session``) and ``ctxos serve`` say it: InputError (it was StateError,
    which names a session in the wrong state, and nothing was in any state yet)."""
    from context_os.errors import InputError

    with pytest.raises(InputError, match="session id must be a non-empty string without spaces"):
        Session.open(db, bad)
    assert db.latest_tx() is None


def test_an_image_a_user_sends_counts_in_what_the_context_costs(db):
    hook = hook_for(db)
    url = "data:image/png;base64," + base64.b64encode(png(300, 250)).decode()
    parts = [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": url}}]
    out = hook.transform_context([{"role": "user", "content": parts}])
    assert out[0]["content"] == parts
    assert hook.last.tokens_full == hook.last.tokens == 3 + 100  # the text, the image
    # an image by its address: its size is unknown, it costs the most an image costs (1600)
    hook.transform_context(
        [
            {"role": "user", "content": parts},
            {"role": "assistant", "content": "a red square"},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]},
        ]
    )
    assert hook.last.tokens_full == 103 + 3 + 1600


def test_a_file_a_user_sends_counts_by_its_pages(db):
    hook = hook_for(db)
    data = "data:application/pdf;base64," + base64.b64encode(pdf(2)).decode()
    parts = [
        {"type": "text", "text": "summarise"},
        {"type": "file", "file": {"file_data": data, "filename": "a.pdf"}},
        {"type": "file", "file": {"file_id": "file-abc"}},  # uploaded: its size unknown, one page
    ]
    out = hook.transform_context([{"role": "user", "content": parts}])
    assert out[0]["content"] == parts
    assert hook.last.tokens_full == hook.last.tokens == 3 + 2 * 2300 + 2300


def test_calls_of_custom_tools_are_taken_and_rendered_as_custom_calls(db):
    """Chat completions' custom tools (free-form ``input``, no JSON arguments, e.g. a patch tool)
    are called with ``{"type": "custom", "custom": {"name", "input"}}``; a collapsed call's long
    input is elided and the call stays a custom one."""
    chat = pytest.importorskip("openai.types.chat")
    patch = "*** Begin Patch\n*** Update File: a.py\n" + "+x = 1\n" * 400 + "*** End Patch"

    def reply(call_id: str) -> object:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "custom", "custom": {"name": "apply_patch", "input": patch}}],
        }
        choice = {"index": 0, "finish_reason": "tool_calls", "message": message}
        completion = {"id": "r", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
        return chat.ChatCompletion.model_validate(completion).choices[0].message

    hook = hook_for(db)
    msgs: list = [user("patch it")]
    for n in range(5):
        msgs += [reply(f"p{n}"), result(f"p{n}", f"Done {n}\n" + "ok\n" * 500)]
        out = hook.transform_context(msgs)
        for m in out:
            OPENAI_MESSAGE.validate_python(m, strict=True)
    calls = [c for m in out if m["role"] == "assistant" for c in m["tool_calls"]]
    assert [c["type"] for c in calls] == ["custom"] * 5
    assert calls[-1]["custom"] == {"name": "apply_patch", "input": patch}
    assert stub_ref(tool_texts(out)["p0"]) and "chars elided" in calls[0]["custom"]["input"]
    assert not pairing_problems(OPENAI_PAIRING, out)
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))


def test_a_retry_is_the_same_turn_after_a_turn_that_found_a_newer_version(db):
    """A turn of a managed session that finds a newer version of an object it shows says so in
    that turn; a retry of its call is that turn again, not a new one (the newer version asked for
    the session to be managed from the next turn on, which it was already)."""
    db.put(note(1, "first draft"))
    hook = hook_for(db)
    msgs = [user("hi")]
    hook.session.show("memory:notes")
    hook.transform_context(msgs)
    assert hook.session.view.managed
    db.put(note(2, "second draft"))
    msgs += [say("hello"), user("and now?")]
    out = hook.transform_context(msgs)
    assert hook.last.turn == 2 and 'stale="version 2 is newer' in blocks_text(out)
    for _ in range(2):
        assert hook.transform_context(msgs) == out and hook.last.turn == 2
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))


def test_an_eviction_the_store_could_not_read_yet_when_the_session_looked_is_taken_in_after(db, monkeypatch):
    """A store names its newest transaction before every reader can read it (an XTDB node that
    has not indexed another client's yet): an eviction the session saw named, but could not read,
    at its turn is taken in at the next one (the turn's own write, just after, hid it for good)."""
    from context_os.context.evict import evict

    secret = "the words of the output evicted"
    hook = hook_for(db)
    msgs = [user("env"), call("c1", "bash", command="env"), result("c1", secret)]
    assert secret in json.dumps(hook.transform_context(msgs))
    readable = db.latest_tx()
    with SqliteStore(db.path) as other:
        evict(other, "toolcall:s1:c1")  # as another process would
    find, latest_tx = db.find, db.latest_tx
    # read as a node that has not indexed it yet: named by latest_tx_id, not readable
    monkeypatch.setattr(db, "find", lambda kind, *a, **k: [] if kind == "tombstone" else find(kind, *a, **k))
    monkeypatch.setattr(db, "latest_tx", lambda: readable)
    monkeypatch.setattr(db, "latest_tx_id", lambda: latest_tx().id)
    msgs += [say("ok"), user("next")]
    hook.transform_context(msgs)
    monkeypatch.setattr(db, "find", find)
    monkeypatch.setattr(db, "latest_tx", latest_tx)
    monkeypatch.delattr(db, "latest_tx_id")
    msgs += [say("ok"), user("and now?")]
    assert secret not in json.dumps(hook.transform_context(msgs))


@pytest.mark.parametrize("harness", ["openai", "anthropic"])
def test_a_message_of_text_parts_cut_to_the_cap_is_held_and_sent_cut(db, harness):
    """A tool output given as text parts (a chat tool message's, an Anthropic tool_result's
    blocks), over ``max_message_chars`` in a session that cuts such a message (the proxy's): its
    text was cut, but its parts, which are what is rendered and stored with its object, kept the
    whole of it: the upstream was sent all of it at every call, and the store held it."""
    from context_os.harness.anthropic import AnthropicHook

    policy = RetentionPolicy(**{**EAGER, "max_message_chars": 1_000})
    s = Session.open(db, "s1", harness=harness, policy=policy)
    s.ingest.cut_over_cap = True
    parts = [{"type": "text", "text": "A" * 3_000}, {"type": "text", "text": "B" * 3_000}]
    if harness == "openai":
        hook: OpenAIHook | AnthropicHook = OpenAIHook(s)
        msgs = [user("run it"), call("c1", command="make"), {"role": "tool", "tool_call_id": "c1", "content": parts}]
    else:
        hook = AnthropicHook(s)
        use = {"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "make"}}
        result_block = {"type": "tool_result", "tool_use_id": "c1", "content": parts}
        msgs = [
            {"role": "user", "content": "run it"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result_block]},
        ]
    out = json.dumps(hook.transform_context(msgs))
    assert s.ingest.cuts and "cut by context_os" in out
    assert "A" * 1_000 not in out and "B" * 100 not in out
    stored = json.dumps([v.doc for v in db.find()])
    assert "A" * 1_000 not in stored and "B" * 100 not in stored
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))
    s.close()


def test_a_call_hashes_what_is_new_not_the_whole_history(db):
    """A call compares the first, middle and last messages of the history it held (a flat cost),
    unless the caller asks for every message to be compared (the JSON-RPC server's hooks): after
    the comparison of every message became the default, each call hashed the whole history
    again, and taking in a session of 4,200 messages a turn at a time ran 126 messages/s
    instead of ~6,000."""
    adapter = OpenAIAdapter()
    msgs = [{"role": "user" if k % 2 == 0 else "assistant", "content": f"message {k}"} for k in range(1_000)]
    hashed: list[int] = []

    def hash_at(k: int) -> str:
        hashed.append(k)
        return adapter.hash_message(msgs[k])

    session = Session.open(db, "s1", harness="openai")
    session.sync(999, hash_at, lambda k: adapter.translate(msgs[k], k))
    hashed.clear()
    session.sync(1_000, hash_at, lambda k: adapter.translate(msgs[k], k))
    assert len(hashed) <= 4, hashed  # the first, middle and last held, and the new one
    # asked to compare every message, a changed one in the middle is seen
    msgs[400] = {"role": "user", "content": "changed"}
    assert not session.sync(1_000, hash_at, lambda k: adapter.translate(msgs[k], k)).rewritten
    report = session.sync(1_000, hash_at, lambda k: adapter.translate(msgs[k], k), same=0)
    assert report.rewritten and report.retired == 600
    # hooks compare the first, middle and last too, unless asked (the server asks)
    hook = OpenAIHook(Session.open(db, "s2", harness="openai"))
    assert hook.every_message is False
    hook.session.close()
    session.close()


def test_two_hooks_of_one_session_see_a_rewrite_made_between_their_calls(db):
    """Hooks that compare every message (the JSON-RPC server's) skip the messages that are the
    objects they took in at their last call. With two hooks on one session, called in turn, the
    other hook's call may have rewritten the history meanwhile: the messages this hook vouched
    for are then no longer what the session holds, and a change the first, middle and last
    comparison does not reach went unseen (the session kept the other history)."""
    session = Session.open(db, "s1", harness="openai")
    first, second = OpenAIHook(session), OpenAIHook(session)
    first.every_message = second.every_message = True
    msgs = [user("m0"), say("m1"), user("m2"), say("m3"), user("m4"), say("m5"), user("m6"), say("m7")]
    first.transform_context(msgs)
    other = list(msgs)
    other[6] = user("m6, as the other client has it")  # neither the first, middle nor last
    second.transform_context(other)
    assert session.view.entries[session.view.visible[6]]["text"] == "m6, as the other client has it"
    report_of: list[object] = []
    first.on_sync = lambda s, report: report_of.append(report)
    first.transform_context([*msgs, say("m8"), user("m9")])
    assert report_of[0].rewritten and report_of[0].retired == 2
    assert session.view.entries[session.view.visible[6]]["text"] == "m6"
    assert len(session.view.visible) == 10
    session.close()


def test_activating_an_inactive_object_known_to_be_stale_loads_its_newer_version(db):
    """An object shown, gone stale (a newer version stored), then deactivated: its index line
    says ``(v2 newer)``, and ``activate`` loaded the old text again, stale, so a second
    ``activate`` was needed to see the newer one (the file tools' activate loads the newest)."""
    db.put(note(1, "first draft"))
    hook = hook_for(db)
    msgs = [user("hi")]
    hook.session.show("memory:notes")
    hook.transform_context(msgs)
    db.put(note(2, "second draft"))
    hook.transform_context(msgs)  # marked stale
    hook.session.deactivate("memory:notes")
    out = hook.transform_context(msgs)
    assert "second draft" not in blocks_text(out)
    assert json.loads(hook.call_tool("activate", {"id": "memory:notes"}))["status"] == "activated"
    out = hook.transform_context(msgs)
    assert "second draft" in blocks_text(out) and "first draft" not in blocks_text(out)
    assert "stale" not in blocks_text(out)
    for f in frame_docs(hook.session.store, hook.session.id):
        assert verify_frame(db, f).ok, f["id"]
