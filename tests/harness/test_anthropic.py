"""The Anthropic Messages adapter, round-tripped through the anthropic SDK's own types."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message, MessageParam, ToolParam
from pydantic import TypeAdapter

from context_os import RetentionPolicy, Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.errors import ContentTooLarge, InvalidOutput, MalformedMessage
from context_os.harness.anthropic import (
    ANTHROPIC_PAIRING,
    AnthropicAdapter,
    AnthropicHook,
    merge_turns,
    validate_anthropic,
)
from context_os.harness.pairing import pairing_problems
from context_os.store import Evict
from context_os.store.sqlite import SqliteStore
from tests.helpers import EAGER, eager_hook, pdf, png, stub_ref

MESSAGE = TypeAdapter(MessageParam)
TOOL = TypeAdapter(ToolParam)
SYSTEM = "You are a careful coding agent."
PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


def hook_for(store: SqliteStore, sid: str = "a1", **policy: Any) -> AnthropicHook:
    return eager_hook(AnthropicHook, store, sid, "anthropic", **policy)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def calls(*ids: str, name: str = "bash", think: bool = True, **args: Any) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if think:
        blocks.append({"type": "thinking", "thinking": f"plan for {ids}", "signature": f"sig-{ids[0]}"})
    blocks.append({"type": "text", "text": f"running {', '.join(ids)}"})
    blocks += [{"type": "tool_use", "id": i, "name": name, "input": dict(args or {"command": "ls"})} for i in ids]
    return {"role": "assistant", "content": blocks}


def results(*pairs: tuple[str, str], text: str | None = None) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": i, "content": out} for i, out in pairs]
    if text is not None:
        blocks.append({"type": "text", "text": text})
    return {"role": "user", "content": blocks}


def conversation(steps: int, width: int = 2, size: int = 2000) -> list[dict[str, Any]]:
    msgs = [{"role": "user", "content": [{"type": "text", "text": "fix the bug"}, {"type": "image", "source": PNG}]}]
    for n in range(steps):
        ids = [f"t{n}{c}" for c in "abcdefgh"[:width]]
        msgs.append(calls(*ids))
        msgs.append(results(*[(i, f"{i} output\n" + "x" * size) for i in ids]))
    return msgs


def result_texts(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        b["tool_use_id"]: b["content"]
        for m in messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    }


def assert_valid(request: dict[str, Any]) -> None:
    for m in request["messages"]:
        MESSAGE.validate_python(m)
    validate_anthropic(request["messages"])


def test_round_trip_collapses_old_results_and_keeps_everything_else_verbatim(db):
    hook = hook_for(db, keep_thinking_turns=None)  # every message's reasoning stays (see below)
    msgs = conversation(1)
    for n in range(1, 5):
        request = hook.transform_request(msgs, system=SYSTEM)
        assert_valid(request)
        assert request["system"] == SYSTEM
        msgs += [calls(f"t{n}z"), results((f"t{n}z", f"small {n}"))]
    request = hook.transform_request(msgs, system=SYSTEM)
    assert_valid(request)
    out = request["messages"]
    texts = result_texts(out)
    assert texts["t0a"].startswith("[bash output, ")
    assert hook.session.resolve(stub_ref(texts["t0b"]) or "") == "toolcall:a1:t0b"
    assert texts["t4z"] == "small 4"
    # user blocks (the image), thinking signatures and tool_use inputs come back as given
    assert out[0] == msgs[0]
    assert out[1] == msgs[1]
    assert [m["role"] for m in out] == [m["role"] for m in msgs]


def test_the_volatile_part_joins_the_last_user_turn_after_its_tool_results(db):
    hook = hook_for(db)
    msgs = conversation(4)
    hook.transform_request(msgs)
    assert json.loads(hook.call_tool("activate", {"id": "toolcall:a1:t0a"}))["status"] == "activated"
    out = hook.transform_request(msgs)["messages"]
    assert len(out) == len(msgs)  # merged, not appended as a fifth user message
    last = out[-1]
    assert last["role"] == "user"
    kinds = [b["type"] for b in last["content"]]
    assert kinds == ["tool_result", "tool_result", "text"]
    assert last["content"][-1]["text"].startswith("<context_os>")
    assert "t0a output" in last["content"][-1]["text"]
    assert_valid({"messages": out})


def test_tool_results_and_text_in_one_user_message_become_several_neutral_messages(db):
    hook = hook_for(db)
    msgs = [user("go"), calls("a", "b"), results(("a", "one"), ("b", "two"), text="and also this")]
    out = hook.transform_request(msgs)["messages"]
    assert hook.last.sync.new == 5  # user, assistant, two tool results, the trailing text
    assert out[-1] == msgs[-1]
    entries = hook.session.view.entries
    assert [e["role"] for e in entries] == ["user", "assistant", "tool", "tool", "user"]
    assert db.doc("toolcall:a1:b")["content"] == "two"
    msgs += [calls("c", think=False), results(("c", "three"))]
    hook.transform_request(msgs)
    assert hook.last.sync.new == 2 and not hook.last.sync.rewritten


def test_a_tool_result_added_in_place_to_the_last_message_is_taken_in(db):
    """A harness that adds a result to the user message it already sent: the last message is
    read again at each call (how many neutral messages it holds changed), so the result is not
    lost."""
    hook = hook_for(db)
    msgs = [user("go"), calls("a", "b"), results(("a", "one"))]
    hook.transform_request(msgs)
    msgs[-1]["content"].append({"type": "tool_result", "tool_use_id": "b", "content": "two"})
    out = hook.transform_request(msgs)["messages"]
    assert result_texts(out) == {"a": "one", "b": "two"}
    view = hook.session.view
    assert [view.entries[i]["role"] for i in view.visible] == ["user", "assistant", "tool", "tool"]


def test_a_call_with_the_same_system_prompt_reads_only_the_new_messages(db):
    """The system prompt is put in front of the list as the same object while it is the same:
    the hook sees a list appended to, and counts only what is new (and the last message)."""
    looked: list[int] = []

    class Counting(AnthropicAdapter):
        def count(self, message: dict[str, Any]) -> int:
            looked.append(1)
            return super().count(message)

    hook = AnthropicHook(Session.open(db, "a9", harness="anthropic", policy=RetentionPolicy(**EAGER)), Counting())
    msgs = conversation(5)
    hook.transform_request(msgs, system="be brief")
    first = len(looked)
    assert first == len(msgs) + 1
    msgs += [calls("z"), results(("z", "out"))]
    out = hook.transform_request(msgs, system="be brief")
    assert len(looked) == first + 3 and out["system"] == "be brief"
    hook.transform_request(msgs, system="be thorough")  # a new prompt: the list is read whole
    assert len(looked) == first + 3 + len(msgs) + 1 and hook.last.sync.rewritten


def test_the_system_parameter_is_recorded_and_returned(db):
    hook = hook_for(db)
    blocks = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    request = hook.transform_request([user("hi")], system=blocks)
    assert request["system"] == blocks
    assert hook.session.view.entries[0]["role"] == "system"
    frame = frame_docs(hook.session.store, hook.session.id)[-1]
    check = verify_frame(db, frame)
    assert check.ok and check.rendered.messages[0]["text"] == SYSTEM
    # a changed system prompt is a rewritten history: the cursor resets, nothing is lost
    request = hook.transform_request([user("hi")], system="Another prompt.")
    assert hook.last.sync.rewritten and request["system"] == "Another prompt."
    assert "system" not in hook.transform_request([user("hi")])


def test_system_messages_inside_messages_stay_in_place(db):
    hook = hook_for(db)
    msgs = [
        user("hi"),
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": "Be brief."},
        user("x"),
    ]
    out = hook.transform_request(msgs)["messages"]
    assert out == msgs
    assert_valid({"messages": out})


def test_sdk_response_blocks_are_accepted_as_assistant_content(db):
    response = Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [
                {"type": "thinking", "thinking": "look first", "signature": "sig"},
                {"type": "text", "text": "I'll look."},
                {"type": "tool_use", "id": "tu1", "name": "bash", "input": {"command": "ls"}},
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )
    hook = hook_for(db)
    msgs = [user("go"), {"role": "assistant", "content": response.content}, results(("tu1", "a.py b.py"))]
    out = hook.transform_request(msgs)["messages"]
    assert_valid({"messages": out})
    assert out[1]["content"][0] == {"type": "thinking", "thinking": "look first", "signature": "sig"}
    assert out[1]["content"][2]["input"] == {"command": "ls"}
    again = hook.transform_request(msgs)["messages"]
    assert again == out and hook.last.turn == 1  # SDK objects hash stably: nothing new, no new turn


@pytest.mark.parametrize("dump", ["model_dump", "model_dump_json"])
def test_a_history_of_sdk_blocks_saved_and_loaded_again_is_the_same_history(tmp_path, dump):
    """A loop that keeps ``response.content`` in its messages and saves them with the SDK's own
    dump (``"citations": null`` and the other unset fields written out) goes on in another
    process with the same history: nothing read again, nothing retired."""
    path = tmp_path / "s.db"
    msgs: list[dict[str, Any]] = [user("go")]
    with SqliteStore(path) as store:
        hook = hook_for(store)
        for n in range(3):
            hook.transform_request(msgs, system=SYSTEM)
            content = [{"type": "text", "text": f"step {n}"}]
            content.append({"type": "tool_use", "id": f"c{n}", "name": "bash", "input": {"command": "ls"}})
            reply = Message.model_validate({**_MESSAGE, "content": content})
            msgs += [{"role": "assistant", "content": reply.content}, results((f"c{n}", f"out {n}\n" * 50))]
        hook.transform_request(msgs, system=SYSTEM)
        hook.session.close()

    def saved(block: Any) -> Any:
        return json.loads(block.model_dump_json()) if dump == "model_dump_json" else block.model_dump(mode="json")

    loaded = json.loads(json.dumps(msgs, default=saved))
    assert loaded[1]["content"][0]["citations"] is None
    with SqliteStore(path) as store:
        resumed = AnthropicHook(Session.open(store, "a1", harness="anthropic"))
        resumed.transform_request([*loaded, user("and now?")], system=SYSTEM)
        assert not resumed.last.sync.rewritten and resumed.last.sync.new == 1


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"role": "wizard", "content": "hi"}, "role"),
        ({"role": "user"}, "content"),
        ({"role": "user", "content": 42}, "content"),
        ({"role": "user", "content": ["not a block"]}, "content[0]"),
        ({"role": "user", "content": [{"type": "tool_result", "content": "x"}]}, "content[0].tool_use_id"),
        ({"role": "user", "content": [{"type": "text", "text": "bad \udc80"}]}, "content[0].text"),
        (
            {"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "y", "input": "s"}]},
            "content[0].input",
        ),
        (
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "q", "is_error": "yes"}]},
            "content[0].is_error",
        ),
        ({"role": "system", "content": [{"type": "image", "source": PNG}]}, "content[0]"),
    ],
)
def test_malformed_messages_name_the_callers_index_and_store_nothing(db, bad, field):
    hook = hook_for(db)
    msgs = conversation(1)
    hook.transform_request(msgs, system=SYSTEM)
    before = db.latest_tx()
    with pytest.raises(MalformedMessage) as err:
        hook.transform_request([*msgs, user("fine"), bad], system=SYSTEM)
    assert err.value.index == len(msgs) + 1  # the caller's list, not ours with the system in front
    assert err.value.field == field
    assert db.latest_tx() == before
    out = hook.transform_request([*msgs, user("fine")], system=SYSTEM)["messages"]
    assert out[-1]["content"][-1] == {"type": "text", "text": "fine"}  # joins the results' user turn


def test_a_too_large_tool_result_names_its_anthropic_message(db):
    hook = hook_for(db, max_message_chars=1000)
    msgs = [user("go"), calls("a", "b"), results(("a", "ok"), ("b", "y" * 1001))]
    with pytest.raises(ContentTooLarge) as err:
        hook.transform_request(msgs)
    assert err.value.index == 2 and "1,001 characters" in str(err.value)


def test_the_reserved_system_key_is_refused_inside_messages(db):
    hook = hook_for(db)
    with pytest.raises(MalformedMessage, match="reserved"):
        hook.transform_request([user("a"), {"role": "system", "content": "x", "context_os_system_param": True}])


def test_output_stays_valid_when_the_input_has_orphans(db):
    hook = hook_for(db)
    msgs = [user("go"), calls("a", "b"), results(("a", "only a")), user("interrupted"), results(("ghost", "late"))]
    out = hook.transform_request(msgs)["messages"]
    assert_valid({"messages": out})
    assert not pairing_problems(ANTHROPIC_PAIRING, out)
    texts = result_texts(out)
    assert texts["a"] == "only a" and "No result was recorded" in texts["b"]
    assert "ghost" not in texts and "late" in json.dumps(out[-1])


def test_a_call_still_waiting_for_its_result_gets_one_so_the_request_is_valid(db):
    hook = hook_for(db)
    out = hook.transform_request([user("go"), calls("a")])["messages"]
    assert_valid({"messages": out})
    assert out[-1]["content"][0]["tool_use_id"] == "a"


def test_a_collapsed_calls_long_input_collapses_with_it_and_comes_back_on_activate(db):
    hook = hook_for(db)
    big = "new text " * 100
    msgs = [user("edit"), calls("e1", name="edit", path="a.py", new_text=big), results(("e1", "ok"))]
    out = hook.transform_request(msgs)["messages"]
    assert out[1]["content"][2]["input"]["new_text"] == big
    for n in range(3):
        msgs += [calls(f"c{n}"), results((f"c{n}", "x"))]
        out = hook.transform_request(msgs)["messages"]
    tool_input = out[1]["content"][1]["input"]
    assert tool_input["path"] == "a.py" and tool_input["new_text"].startswith("[900 chars elided: activate(")
    # its reasoning is past the thinking horizon now; the text is untouched
    assert [b["type"] for b in out[1]["content"]] == ["text", "tool_use"]
    assert out[1]["content"][0] == msgs[1]["content"][1]
    hook.call_tool("activate", {"id": "toolcall:a1:e1"})
    out = hook.transform_request(msgs)["messages"]
    assert big in out[-1]["content"][-1]["text"]
    for f in frame_docs(hook.session.store, hook.session.id):
        assert verify_frame(db, f).ok


def test_frames_verify_and_a_resumed_session_renders_the_same(db):
    hook = hook_for(db)
    msgs = conversation(6)
    live = hook.transform_request(msgs, system=SYSTEM)
    resumed = AnthropicHook(Session.open(db, "a1"))
    again = resumed.transform_request(msgs, system=SYSTEM)
    assert resumed.last.sync.new == 0
    assert again == live
    for f in frame_docs(resumed.session.store, resumed.session.id):
        assert verify_frame(db, f).ok


def test_rewriting_one_result_inside_a_message_is_detected(db):
    hook = hook_for(db)
    msgs = conversation(3)
    hook.transform_request(msgs)
    # the first of the last message's two results changes: every piece of that message rehashes
    edited = [*msgs[:-1], results(("t2a", "changed"), ("t2b", msgs[-1]["content"][1]["content"]))]
    hook.transform_request(edited)
    assert hook.last.sync.rewritten and hook.last.sync.retired == 2 and hook.last.sync.new == 2
    assert db.doc("toolcall:a1:t2a")["content"].startswith("t2a output")  # kept in the store


def test_async_transform(db):
    hook = hook_for(db)
    request = asyncio.run(hook.atransform_request(conversation(2), system=SYSTEM))
    assert request["system"] == SYSTEM
    assert result_texts(request["messages"])["t1a"].startswith("t1a output")


def test_tool_definitions_are_anthropic_tools(db):
    hook = hook_for(db)
    assert {t["name"] for t in hook.tools} == {"activate", "deactivate", "pin", "unpin", "lines", "history"}
    for t in hook.tools:
        TOOL.validate_python(t)


def test_merge_turns_keeps_singletons_and_puts_results_first():
    a = {"role": "user", "content": "x"}
    b = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}
    merged = merge_turns([a, b])
    assert merged == [
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}, {"type": "text", "text": "x"}],
        }
    ]
    single = [{"role": "assistant", "content": "hi"}]
    assert merge_turns(single)[0] is single[0]


def test_validation_rejects_what_the_api_rejects():
    with pytest.raises(InvalidOutput, match="no tool_result"):
        validate_anthropic([user("a"), calls("x"), user("b")])
    with pytest.raises(InvalidOutput, match="in a row"):
        validate_anthropic([user("a"), user("b")])
    with pytest.raises(InvalidOutput, match="before tool_result"):
        validate_anthropic(
            [
                user("a"),
                calls("x"),
                {"role": "user", "content": [{"type": "text", "text": "t"}, *results(("x", "r"))["content"]]},
            ]
        )
    with pytest.raises(InvalidOutput, match="ends with an assistant"):
        validate_anthropic([user("a"), {"role": "assistant", "content": "b"}])
    validate_anthropic([user("a"), {"role": "assistant", "content": "b"}], last_input_role="assistant")


def test_an_error_result_stays_an_error(db):
    hook = hook_for(db)
    block = {"type": "tool_result", "tool_use_id": "a", "content": "no such file", "is_error": True}
    out = hook.transform_request([user("go"), calls("a"), {"role": "user", "content": [block]}])["messages"]
    assert out[-1]["content"][0] == block


def test_an_expanded_result_keeps_its_images(db):
    hook = hook_for(db)
    content = [{"type": "text", "text": "see"}, {"type": "image", "source": PNG}]
    block = {"type": "tool_result", "tool_use_id": "a", "content": content}
    out = hook.transform_request([user("go"), calls("a"), {"role": "user", "content": [block]}])["messages"]
    assert out[-1]["content"][0] == block


def test_a_results_images_live_in_its_tool_call_object_and_evict_erases_them(db):
    hook = hook_for(db)
    secret_png = {"type": "base64", "media_type": "image/png", "data": "c2VjcmV0LXNjcmVlbnNob3Q="}
    content = [{"type": "text", "text": "see"}, {"type": "image", "source": secret_png}]
    block = {"type": "tool_result", "tool_use_id": "a", "content": content}
    msgs = [user("go"), calls("a"), {"role": "user", "content": [block]}]
    assert hook.transform_request(msgs)["messages"][-1]["content"][0] == block
    [obj] = [o for o in hook.session.view.objects.values() if o.kind == "toolcall"]
    assert obj.meta["blocks"] == {"content": content}  # hashed with the object's metadata

    def stored() -> str:
        return "".join(json.dumps(v.doc) for v in db.find() if v.doc)

    assert secret_png["data"] in stored()
    assert all(secret_png["data"] not in json.dumps(v.doc) for v in db.find("chat") if v.doc)  # not in the chat
    db.submit([Evict(obj.id)])
    assert secret_png["data"] not in stored()
    # the session goes on; the evicted result renders as erased
    out = hook_for(db).transform_request([*msgs, user("next")])["messages"]
    assert "erased" in json.dumps(out)


THOUGHT = "weighing the options for the parser " * 40


def thinking_calls(n: int) -> dict[str, Any]:
    """An assistant message as the SDK returns it with extended thinking: reasoning (redacted on
    every third), a word, a call."""
    reasoning: dict[str, Any] = (
        {"type": "redacted_thinking", "data": f"enc{n}:" + "Zm9v" * 300}
        if n % 3 == 1
        else {"type": "thinking", "thinking": f"thought {n}: {THOUGHT}", "signature": f"sig{n}"}
    )
    content = [reasoning, {"type": "text", "text": f"Reading part {n}."}]
    content.append({"type": "tool_use", "id": f"c{n}", "name": "bash", "input": {"command": f"cat part{n}"}})
    return {"role": "assistant", "content": Message.model_validate({**_MESSAGE, "content": content}).content}


_MESSAGE = {"id": "msg", "type": "message", "role": "assistant", "model": "claude", "stop_reason": "tool_use"}
_MESSAGE |= {"stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}


def reasoning_of(out: list[dict[str, Any]]) -> list[str]:
    """Which assistant messages of a request still carry their reasoning (by their call: None
    for one without)."""
    return [
        next((b["id"] for b in m["content"] if b["type"] == "tool_use"), None)
        for m in out
        if m["role"] == "assistant" and any(b["type"] in ("thinking", "redacted_thinking") for b in m["content"])
    ]


def test_only_the_newest_assistant_messages_keep_their_reasoning(db):
    """Extended thinking sent back with every assistant message (SDK blocks, signatures, redacted
    ones): the newest two keep it, as the API needs for the tool-use turn in progress; older ones
    keep their text and calls. Every request is valid and every frame verifies."""
    hook = hook_for(db, keep_thinking_turns=2, history_max_tokens=None)
    msgs: list[dict[str, Any]] = [user("Fix the parser.")]
    for n in range(8):
        msgs += [thinking_calls(n), results((f"c{n}", f"part {n}"))]
        request = hook.transform_request(msgs, system=SYSTEM)
        assert_valid(request)
    out = request["messages"]
    assert reasoning_of(out) == ["c6", "c7"]
    newest = [m for m in out if m["role"] == "assistant"][-2:]
    assert newest[0]["content"][0] == msgs[-4]["content"][0].model_dump(mode="json", exclude_none=True)
    assert newest[1]["content"][0]["type"] == "redacted_thinking"  # as given, data and all
    older = [m for m in out if m["role"] == "assistant"][:6]
    assert all([b["type"] for b in m["content"]] == ["text", "tool_use"] for m in older)
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "a1"))
    # with the setting off every message keeps it, and the context is that much larger
    whole = hook_for(db, "a2", keep_thinking_turns=None)
    assert reasoning_of(whole.transform_request(msgs, system=SYSTEM)["messages"]) == [f"c{n}" for n in range(8)]
    assert hook.last is not None and whole.last is not None
    assert hook.last.rendered.tokens < whole.last.rendered.tokens - 5 * len(THOUGHT) // 4


def test_a_message_of_nothing_but_reasoning_keeps_it(db):
    """The API refuses an assistant message with empty content: one whose only block is its
    reasoning keeps it past the horizon, and is sent as it came."""
    hook = hook_for(db, keep_thinking_turns=1, history_max_tokens=None)
    alone = {"role": "assistant", "content": [{"type": "thinking", "thinking": THOUGHT, "signature": "s"}]}
    msgs: list[dict[str, Any]] = [user("Think first."), alone, user("Now fix it.")]
    for n in range(4):
        msgs += [thinking_calls(3 * n), results((f"c{3 * n}", "ok"))]
        request = hook.transform_request(msgs)
        assert_valid(request)
    assert request["messages"][1] == alone
    assert reasoning_of(request["messages"]) == [None, "c9"]


def marked(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` with a cache breakpoint on its last block, as Claude Code marks its newest one."""
    blocks = list(message["content"])
    blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
    return {**message, "content": blocks}


def cache_marks(messages: list[dict[str, Any]]) -> list[tuple[int, int, Any]]:
    return [
        (i, j, b["cache_control"])
        for i, m in enumerate(messages)
        if isinstance(m["content"], list)
        for j, b in enumerate(m["content"])
        if "cache_control" in b
    ]


def test_a_retry_is_the_request_as_made_with_its_turns_merged_and_the_clients_breakpoint(db):
    """A retry (the same messages again) gets the same request, no new turn: its consecutive
    user messages merged again (``finalize`` keeps a merge cache per turn) and the client's cache
    breakpoint put back once, though the caller changed the messages it got in place."""
    hook = hook_for(db, "retry")
    msgs = conversation(4)
    sent = [*msgs[:-1], marked(msgs[-1])]
    system = [{"type": "text", "text": SYSTEM}]
    first = hook.transform_request(sent, system=system)
    made = json.loads(json.dumps(first))
    first["messages"][-1] = {"role": "user", "content": "changed by the caller"}
    first["messages"].pop(0)
    for _ in range(2):
        again = hook.transform_request(sent, system=system)
        assert again == made and hook.last.turn == 1
        assert len(cache_marks(again["messages"])) == 1
        assert_valid(again)


def test_a_cache_breakpoint_the_client_moves_on_is_no_rewrite_and_is_put_back_once(db):
    """Claude Code marks its newest message for the prompt cache at every call, so the message
    marked last time comes back unmarked: that is not a rewritten history (which would retire
    and read the whole conversation again, forgetting what was collapsed). What goes out holds
    the client's one breakpoint, on the conversation's own last block, before context_os's."""
    hook = hook_for(db, "cache")
    msgs = conversation(6)
    out = hook.transform_request([*msgs[:-1], marked(msgs[-1])], system=[{"type": "text", "text": SYSTEM}])
    for n in range(6, 9):
        ids = [f"t{n}a", f"t{n}b"]
        msgs += [calls(*ids), results(*[(i, f"{i} output\n" + "x" * 2000) for i in ids])]
        out = hook.transform_request([*msgs[:-1], marked(msgs[-1])], system=[{"type": "text", "text": SYSTEM}])
        assert not hook.last.sync.rewritten and hook.last.sync.new == 3  # the call and its two results
        assert_valid(out)
    [(i, j, mark)] = cache_marks(out["messages"])
    assert mark == {"type": "ephemeral"}
    last_own = [
        (i, j)
        for i, m in enumerate(out["messages"])
        if isinstance(m["content"], list)
        for j, b in enumerate(m["content"])
        if not str(b.get("text", "")).startswith("<context_os>")
    ][-1]
    assert (i, j) == last_own
    assert not any("~" in o.id for o in hook.session.view.objects.values())  # nothing read twice
    # two breakpoints of the client's: the second on the very last block
    two = [*msgs[:-2], marked(msgs[-2]), marked(msgs[-1])]
    out = hook.transform_request(two, system=[{"type": "text", "text": SYSTEM}])
    very_last = (len(out["messages"]) - 1, len(out["messages"][-1]["content"]) - 1)
    assert [(i, j) for i, j, _ in cache_marks(out["messages"])] == list(dict.fromkeys([last_own, very_last]))
    # a client that marks nothing gets nothing marked
    assert cache_marks(hook.transform_request(msgs, system=[{"type": "text", "text": SYSTEM}])["messages"]) == []
    # what is stored of a message read with breakpoints holds none: a call and a text marked when new
    msgs += [calls("u1"), results(("u1", "out"), text="and a note")]
    hook.transform_request([*msgs[:-2], marked(msgs[-2]), marked(msgs[-1])], system=[{"type": "text", "text": SYSTEM}])
    msgs += [calls("u2"), results(("u2", "out"))]
    out = hook.transform_request([*msgs[:-1], marked(msgs[-1])], system=[{"type": "text", "text": SYSTEM}])
    assert len(cache_marks(out["messages"])) == 1


def test_the_breakpoint_goes_before_context_os_blocks_at_the_end():
    from context_os.harness.anthropic import _with_cache_marks

    out = [
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {"role": "user", "content": [{"type": "text", "text": "go on"}, {"type": "text", "text": "<context_os>\nx"}]},
    ]
    mark = {"type": "ephemeral", "ttl": "1h"}
    assert cache_marks(_with_cache_marks(list(out), [mark])) == [(1, 0, mark)]
    assert cache_marks(_with_cache_marks(list(out), [mark, mark])) == [(1, 0, mark), (1, 1, mark)]
    assert cache_marks(out) == []  # the list changes in place; the messages it held do not
    # never on reasoning or an empty text, which the API refuses to mark
    prefill = [out[0], {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}]}]
    assert cache_marks(_with_cache_marks(prefill, [mark])) == [(0, 0, mark)]
    empty = [{"role": "user", "content": [{"type": "text", "text": "go"}, {"type": "text", "text": ""}]}]
    assert cache_marks(_with_cache_marks(empty, [mark])) == [(0, 0, mark)]


def test_a_results_images_count_while_it_shows_them(db):
    # a screenshot costs the model about width x height / 750 tokens: the full transcript counts
    # it, the collapsed result's stub says so, and the context that leaves it out costs less
    shot = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(png(1000, 600)).decode()}
    hook = hook_for(db)
    msgs: list[dict[str, Any]] = [user("go")]
    for k in range(4):
        msgs += [calls(f"s{k}", think=False), results((f"s{k}", ""))]
        msgs[-1]["content"][0]["content"] = [{"type": "text", "text": "screen"}, {"type": "image", "source": shot}]
        out = hook.transform_request(msgs)["messages"]
    assert hook.session.view.objects["toolcall:a1:s0"].tokens == 2 + 800  # "screen", the image
    stub = out[2]["content"][0]["content"]
    assert stub.startswith("[bash output, 802 tokens, collapsed")
    assert hook.last.tokens_full > 4 * 800 > hook.last.tokens > 800
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "a1"))


def test_images_in_a_user_message_count_in_what_it_costs(db):
    image = {"type": "image", "source": {**PNG, "data": base64.b64encode(png(300, 250)).decode()}}
    hook = hook_for(db)
    hook.transform_request([{"role": "user", "content": [{"type": "text", "text": "what is this"}, image]}])
    assert hook.last.tokens_full == hook.last.tokens == 3 + 100  # the text, the image


def test_documents_count_in_what_they_cost(db):
    # a PDF by its pages (2,300 tokens a page), a text source by its text, a URL as one page
    b64 = base64.b64encode(pdf(3)).decode()
    docs = [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": b64}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "y" * 400}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
    ]
    hook = hook_for(db)
    out = hook.transform_request([{"role": "user", "content": [{"type": "text", "text": "read these"}, *docs]}])
    assert out["messages"][0]["content"][1:] == docs
    assert hook.last.tokens_full == hook.last.tokens == 3 + 3 * 2300 + 100 + 2300


def test_search_results_count_in_what_they_cost(db):
    """Search result blocks (a retrieval tool's results, which the model cites) cost their
    source, title and texts, in a user message and in a tool's result, where they counted nothing
    (a result of nothing but search results was an empty result to the engine); a result of them
    collapses with them as any other."""

    def found(k: int) -> dict[str, Any]:
        texts = [{"type": "text", "text": f"passage {k} " + "p" * 1_990}]
        return {"type": "search_result", "source": f"https://docs.example.org/{k}", "title": f"Doc {k}",
                "content": texts, "citations": {"enabled": True}}  # fmt: skip

    chars = len("https://docs.example.org/0") + len("Doc 0") + 2_000
    cost = -(-chars // 4)
    hook = hook_for(db)
    hook.transform_request([{"role": "user", "content": [{"type": "text", "text": "what do these say"}, found(0)]}])
    assert hook.last.tokens_full == hook.last.tokens == -(-(len("what do these say") + chars) // 4)
    hook = hook_for(db, "a2")
    msgs: list[dict[str, Any]] = [user("look it up")]
    for k in range(4):
        msgs += [calls(f"q{k}", think=False), results((f"q{k}", ""))]
        msgs[-1]["content"][0]["content"] = [found(k)]
        out = hook.transform_request(msgs)["messages"]
    assert hook.session.view.objects["toolcall:a2:q0"].tokens == cost
    assert out[2]["content"][0]["content"].startswith(f"[bash output, {cost} tokens, collapsed")
    assert out[-1]["content"][0]["content"] == [found(3)]  # the newest as it came
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "a2"))


def test_a_browser_s_state_counts_in_what_its_result_costs(db):
    """A browser tool's result may hold the browser's state (``browser_state``: every open tab,
    what the call changed), which the provider renders as text for the model; it counted nothing.
    Validated as the SDK's block param; it collapses with its result."""
    state = {
        "type": "browser_state",
        "tabs": [{"tab_id": f"t{k}", "url": f"https://example.org/page/{k}", "title": f"Page {k}", "active": k == 0}
                 for k in range(30)],
        "state_changes": [{"type": "tab_opened", "tab_id": "t29"}],
    }  # fmt: skip
    from anthropic.types.beta import BetaBrowserStateBlockParam, BetaToolResultBlockParam
    from pydantic import TypeAdapter

    chars = len(json.dumps([state["tabs"], state["state_changes"]]))
    hook = hook_for(db)
    msgs: list[dict[str, Any]] = [user("browse")]
    for k in range(4):
        msgs += [calls(f"b{k}", think=False), results((f"b{k}", ""))]
        msgs[-1]["content"][0]["content"] = [{"type": "text", "text": "clicked"}, state]
        TypeAdapter(BetaToolResultBlockParam).validate_python(msgs[-1]["content"][0])
        TypeAdapter(BetaBrowserStateBlockParam).validate_python(state)
        out = hook.transform_request(msgs)["messages"]
    assert chars > 2_000
    assert hook.session.view.objects["toolcall:a1:b0"].tokens == -(-(len("clicked") + chars) // 4)
    assert out[2]["content"][0]["content"].startswith("[bash output, ")
    assert out[-1]["content"][0]["content"][1] == state  # the newest as it came


@pytest.mark.parametrize("pool", [None, 1_000])
def test_activating_a_screenshot_says_its_image_is_not_shown_in_the_active_pool(db, pool):
    """With a pool smaller than the image (1600x1200: 1,600 tokens, what the result's count holds):
    the pool holds only its text, so it is no larger than the pool (it said "larger than the active
    pool", and nothing of the images)."""
    shot = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(png(1600, 1200)).decode()}
    hook = hook_for(db, **({} if pool is None else {"active_pool_tokens": pool}))
    msgs: list[dict[str, Any]] = [user("go")]
    for k in range(4):
        msgs += [calls(f"s{k}", think=False), results((f"s{k}", "")), user("next")]
        msgs[-2]["content"][0]["content"] = [{"type": "image", "source": shot}]
        msgs += [calls(f"t{k}", think=False), results((f"t{k}", "plain text output\n" * 50))]
        hook.transform_request(msgs)
    shown = json.loads(hook.call_tool("activate", {"id": "toolcall:a1:s0"}))
    assert shown["status"] == "activated" and "not its images" in shown["note"]
    assert "note" not in json.loads(hook.call_tool("activate", {"id": "toolcall:a1:t0"}))


@pytest.mark.parametrize("redact", [True, False])
def test_a_resumed_session_sends_the_blocks_it_keeps_verbatim_as_the_live_one_did(tmp_path, redact):
    # the store gives documents back with their keys sorted: a server tool's input (the model
    # reads it as JSON text) must not come back in another order after a resume, or the
    # provider's prompt cache is lost from that message on
    search = {"query": "x", "allowed_domains": ["a.com"], "b": {"z": 1, "a": 2}}
    found = {"url": "https://a.com", "type": "web_search_result", "title": "t", "encrypted_content": "E"}
    msgs: list[dict[str, Any]] = [
        user("search"),
        {
            "role": "assistant",
            "content": [
                {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": search},
                {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": [found]},
                {"type": "text", "text": "found"},
            ],
        },
        user("more"),
    ]
    db = SqliteStore(tmp_path / "s.db")
    live = AnthropicHook(Session.open(db, "a1", harness="anthropic", redact=redact))
    before = json.dumps(live.transform_request(msgs)["messages"][1])
    live.session.close()
    db.close()
    db = SqliteStore(tmp_path / "s.db")
    resumed = AnthropicHook(Session.open(db, "a1", harness="anthropic", redact=redact))
    after = resumed.transform_request([*msgs, {"role": "assistant", "content": "ok"}, user("again")])["messages"]
    assert json.dumps(after[1]) == before
    db.close()


def test_an_earlier_message_changed_in_place_to_hold_fewer_messages_is_read_again(tmp_path: Path) -> None:
    """A user message of tool results and a text, changed in place to hold the results alone: the
    hook's reading of it, kept by identity, counted two neutral messages where it now holds one,
    and every call after failed ("an adapter bug")."""
    store = SqliteStore(tmp_path / "s.db")
    hook = AnthropicHook(Session.open(store, "s1", harness="anthropic"))
    results = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
    results["content"].append({"type": "text", "text": "and please hurry"})
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "ls"}}]},
        results,
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
    ]
    hook.transform_request(msgs)
    results["content"].pop()  # the note taken back, in place
    msgs += [{"role": "assistant", "content": "sure"}, {"role": "user", "content": "more"}]
    sent = hook.transform_request(msgs)["messages"]
    assert "please hurry" not in json.dumps(sent) and "more" in json.dumps(sent[-1])
    assert hook.last is not None and hook.last.sync.rewritten
    assert all(verify_frame(store, f).ok for f in frame_docs(store, "s1"))
    store.close()


def test_a_prefill_stays_last_with_the_blocks_before_it(tmp_path: Path) -> None:
    """A history ending on the assistant's own words for the model to go on with (a prefill, a
    turn the provider paused): context_os's blocks went after it, a user turn the model then
    answered instead of going on."""
    store = SqliteStore(tmp_path / "s.db")
    hook = hook_for(store, keep_recent_results=1)

    def use(i: str) -> MessageParam:
        return {"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": "bash", "input": {"cmd": i}}]}

    def answer(i: str, text: str) -> MessageParam:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": text}]}

    msgs: list[MessageParam] = [{"role": "user", "content": "read them"}, use("t1"), answer("t1", "A data " * 40)]
    msgs += [use("t2"), answer("t2", "B data " * 40)]
    hook.transform_request(msgs)  # t1 collapses
    shown = json.loads(hook.call_tool("activate", {"id": "r2"}))
    assert shown["status"] == "activated"
    msgs += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "Answer in JSON."}]
    msgs += [{"role": "assistant", "content": '{"answer":'}]
    sent = hook.transform_request(msgs)["messages"]
    assert sent[-1] == {"role": "assistant", "content": '{"answer":'}
    assert "<context_os>" in json.dumps(sent[-2]) and "A data" in json.dumps(sent[-2])
    msgs[-1] = {"role": "assistant", "content": '{"answer": 42}'}  # the model went on with it
    msgs += [{"role": "user", "content": "thanks"}]
    assert hook.transform_request(msgs)["messages"][-1]["role"] == "user"
    assert all(verify_frame(store, f).ok for f in frame_docs(store, "a1"))
    store.close()


def test_the_apis_answer_appended_as_it_came_says_what_to_append(db):
    """An agent loop appended the SDK's ``Message`` itself: the error said only that a message
    must be an object."""
    answer = Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [{"type": "text", "text": "hello"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )
    with pytest.raises(MalformedMessage, match=r'append \{"role": message\.role, "content": message\.content\}'):
        hook_for(db).transform_request([user("hi"), answer], system=SYSTEM)


# --- server tools: the provider runs them (web search, code execution); their blocks come back ---

PAGE = base64.b64encode(b"the parser's grammar, as documented " * 100).decode()[:4_000]
"""A web search result's page, encrypted (as the API sends it: base64, 4,000 characters here)."""


def searched(n: int, *, then: str | None = None, think: bool = False) -> dict[str, Any]:
    """An assistant message as the SDK returns it after a web search the provider ran: its call,
    three encrypted pages, a text citing one, and a call of ours (``then``) or not (``pause_turn``:
    the provider paused a long turn; the client sends it back to continue)."""
    use = {"type": "server_tool_use", "id": f"srvtoolu_{n}", "name": "web_search", "input": {"query": f"parser {n}"}}
    pages = [
        {
            "type": "web_search_result",
            "url": f"https://docs.example/{n}/{k}",
            "title": f"Grammar {k}",
            "encrypted_content": PAGE,
            "page_age": "April 1, 2026",
        }  # fmt: skip
        for k in range(3)
    ]
    cite = {"type": "web_search_result_location", "url": pages[0]["url"], "title": "Grammar 0",
            "encrypted_index": "Eo8BCioIAhgBIiQ", "cited_text": "the parser's grammar"}  # fmt: skip
    content: list[dict[str, Any]] = (
        [{"type": "thinking", "thinking": f"search {n}: {THOUGHT}", "signature": f"sig{n}"}] if think else []
    )
    content += [use, {"type": "web_search_tool_result", "tool_use_id": use["id"], "content": pages}]
    if then is not None:
        content.append({"type": "text", "text": "The grammar says so.", "citations": [cite]})
        content.append({"type": "tool_use", "id": then, "name": "bash", "input": {"command": f"cat part{n}"}})
    stop = "tool_use" if then is not None else "pause_turn"
    return {
        "role": "assistant",
        "content": Message.model_validate({**_MESSAGE, "content": content, "stop_reason": stop}).content,
    }


def _dumped(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b.model_dump(mode="json", exclude_none=True) for b in message["content"]]


def test_a_server_tools_blocks_go_back_as_they_came_and_count(db):
    """A web search the provider ran: its call, its pages and the text citing them go back in
    their place, as the SDK gave them, at every call (the provider has no other copy); each page
    counts as the bytes it decrypts to, once in the context and once in full history."""
    hook = hook_for(db, history_max_tokens=None)
    bare = hook_for(db, "a2", history_max_tokens=None)
    msgs: list[dict[str, Any]] = [user("Fix the parser.")]
    plain: list[dict[str, Any]] = [user("Fix the parser.")]
    for n in range(6):
        answer = searched(n, then=f"c{n}")
        msgs += [answer, results((f"c{n}", f"part {n}"))]
        plain += [{"role": "assistant", "content": answer["content"][2:]}, results((f"c{n}", f"part {n}"))]
        request = hook.transform_request(msgs, system=SYSTEM)
        assert_valid(request)
        bare.transform_request(plain, system=SYSTEM)
    sent = [m for m in request["messages"] if m["role"] == "assistant"]
    assert [m["content"][:3] for m in sent] == [_dumped(m)[:3] for m in msgs[1::2]]
    assert sent[0]["content"][2]["citations"] == _dumped(msgs[1])[2]["citations"]
    pages = 3 * len(PAGE) * 3 // 4 // 4  # three pages of 4,000 base64 characters, in tokens
    assert hook.last is not None and bare.last is not None
    assert 6 * pages < hook.last.tokens_full - bare.last.tokens_full < 6 * (pages + 150)
    assert 6 * pages < hook.last.rendered.tokens - bare.last.rendered.tokens < 6 * (pages + 150)
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "a1"))


def test_a_paused_turn_goes_back_last_as_it_came(db):
    """``pause_turn``: the provider stopped a long turn of server tools; the client continues it by
    sending the assistant message back as the request's last, which goes as it came."""
    hook = hook_for(db)
    paused = searched(0)
    request = hook.transform_request([user("Search the grammar."), paused], system=SYSTEM)
    assert request["messages"][-1] == {"role": "assistant", "content": _dumped(paused)}


def test_past_the_thinking_horizon_a_message_keeps_its_server_tools_blocks(db):
    """The thinking horizon leaves an old message's reasoning off, never its search: the tokens it
    frees are its thinking's alone."""
    hook = hook_for(db, keep_thinking_turns=1, history_max_tokens=None)
    msgs: list[dict[str, Any]] = [user("Fix the parser.")]
    for n in range(3):
        msgs += [searched(n, then=f"c{n}", think=True), results((f"c{n}", f"part {n}"))]
        request = hook.transform_request(msgs, system=SYSTEM)
        assert_valid(request)
    kinds = [[b["type"] for b in m["content"]] for m in request["messages"] if m["role"] == "assistant"]
    searched_kinds = ["server_tool_use", "web_search_tool_result", "text", "tool_use"]
    assert kinds == [searched_kinds, searched_kinds, ["thinking", *searched_kinds]]
    assert hook.last is not None
    thoughts = 2 * len(f"search 0: {THOUGHT}") // 4
    assert thoughts - 4 <= hook.last.tokens_full - hook.last.rendered.tokens <= thoughts + 4
