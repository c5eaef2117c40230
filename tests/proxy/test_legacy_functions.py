"""Chat completions' legacy function calling (the ``functions`` parameter, an assistant's
``function_call``, the ``function`` message answering it; ``tools`` replaced them in 2023): a
conversation of it is managed as one of tool calls, and goes back in its own shape. Before, such a
conversation failed open at every call (``unknown role 'function'``); until 2026-12-05 it was
offered none of context_os's tools, which it gets as functions now."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from context_os import RetentionPolicy, Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.harness.openai import OPENAI_PAIRING, OpenAIHook
from context_os.harness.pairing import pairing_problems
from context_os.server.proxy import derive_session
from context_os.store.sqlite import SqliteStore
from tests.helpers import EAGER
from tests.proxy.running import Running, verified_frames
from tests.proxy.upstream import Upstream, call, upstream
from tests.replay.conftest import db

__all__ = ["db"]

pytestmark = pytest.mark.timeout(120)

_MESSAGE: TypeAdapter[Any] = TypeAdapter(ChatCompletionMessageParam)
FUNCTIONS = [
    {"name": "read_file", "description": "Read a file.", "parameters": {"type": "object", "properties": {}}},
    {"name": "run", "description": "Run a command.", "parameters": {"type": "object", "properties": {}}},
]


def legacy_conversation(steps: int, output_chars: int = 4_000) -> list[dict[str, Any]]:
    """A task, then ``steps`` rounds of a function called and its output, and an answer."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful engineer."},
        {"role": "user", "content": "find why the build fails"},
    ]
    for n in range(steps):
        name = "read_file" if n % 2 else "run"
        args = json.dumps({"path": f"m{n}.py"} if n % 2 else {"command": f"make m{n}"})
        msgs.append({"role": "assistant", "content": None, "function_call": {"name": name, "arguments": args}})
        msgs.append({"role": "function", "name": name, "content": f"# output {n}\n" + "x = 1\n" * (output_chars // 6)})
    msgs += [{"role": "assistant", "content": "m3.py is at fault."}, {"role": "user", "content": "fix it"}]
    return msgs


def _hook(db: SqliteStore, **policy: Any) -> OpenAIHook:
    return OpenAIHook(Session.open(db, "legacy", harness="openai", policy=RetentionPolicy(**{**EAGER, **policy})))


def test_a_small_conversation_goes_back_as_it_came(db: SqliteStore) -> None:
    """Below the size context_os manages from, every message comes back as it was given: the
    calls without ids, the function messages with their names, nothing added."""
    msgs = legacy_conversation(3, output_chars=300)
    hook = OpenAIHook(Session.open(db, "small", harness="openai"))
    assert hook.transform_context(msgs) == msgs
    for m in msgs:
        _MESSAGE.validate_python(m)


def test_old_outputs_collapse_and_every_message_keeps_its_legacy_shape(db: SqliteStore) -> None:
    """Managed: old function outputs show as stubs, each still a ``function`` message with its
    name right after its ``function_call``; no ``tool_calls`` or ``tool`` message is made, the
    pairing holds, and every frame re-renders to its hash."""
    msgs = legacy_conversation(30)
    hook = _hook(db)
    for n in range(10, len(msgs) + 1, 6):
        out = hook.transform_context(msgs[:n])
    out = hook.transform_context(msgs)
    assert not any("tool_calls" in m or m["role"] == "tool" or "tool_call_id" in m for m in out)
    functions = [m for m in out if m["role"] == "function"]
    assert len(functions) == 30 and sum("collapsed" in m["content"] for m in functions) > 20
    for k, m in enumerate(out):
        if m["role"] == "function":
            assert out[k - 1]["function_call"]["name"] == m["name"]
        _MESSAGE.validate_python(m)
    assert pairing_problems(OPENAI_PAIRING, out) == []
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "legacy"))


def test_a_call_left_unanswered_gets_a_function_message(db: SqliteStore) -> None:
    """A ``function_call`` the client never answered (it moved on) is answered by context_os, as
    every call is: with a ``function`` message of the call's name, not a ``tool`` message the API
    refuses in this shape."""
    msgs = legacy_conversation(2, output_chars=100)
    msgs[-2:] = [
        {"role": "assistant", "content": None, "function_call": {"name": "run", "arguments": '{"command": "ls"}'}},
        {"role": "user", "content": "never mind, fix m1.py"},
    ]
    out = _hook(db).transform_context(msgs)
    k = next(k for k, m in enumerate(out) if m.get("function_call", {}).get("arguments") == '{"command": "ls"}')
    assert out[k + 1]["role"] == "function" and out[k + 1]["name"] == "run"
    assert "tool_call_id" not in out[k + 1] and out[k + 2] == msgs[-1]
    assert pairing_problems(OPENAI_PAIRING, out) == []


def test_through_the_proxy_it_is_managed_and_offered_ours_as_functions(proxy: Running, up: Upstream) -> None:
    """Past the size context_os manages from, the proxy manages it (nothing fails open) and
    sends it in its own shape, which the scripted provider checks as the API does (a ``function``
    message right after its call); our tools are functions after the client's, which stay as
    they came, and no ``tools`` is added (before 2026-12-05 none of ours was offered)."""
    msgs = legacy_conversation(60)
    proxy.openai().chat.completions.create(model="m", messages=msgs, functions=FUNCTIONS)  # type: ignore[arg-type]
    assert proxy.proxy.counts["failed_open"] == 0
    sent = up.requests[0]
    assert "tools" not in sent and sent["functions"][: len(FUNCTIONS)] == FUNCTIONS
    assert {f["name"] for f in sent["functions"][len(FUNCTIONS) :]} >= {"activate", "pin"}
    assert all(set(f) == {"name", "description", "parameters"} for f in sent["functions"])
    assert len(json.dumps(sent["messages"])) < 0.5 * len(json.dumps(msgs))
    assert sum(m["role"] == "function" and "collapsed" in m["content"] for m in sent["messages"]) > 20
    assert verified_frames(proxy.store, derive_session("openai", {"messages": msgs})) == 1


def test_our_function_runs_inside_the_proxy_and_its_exchange_comes_back_in_the_legacy_shape(tmp_path: Path) -> None:
    """The model calls one of ours as a ``function_call``: the proxy runs it and asks again with
    the call and a ``function`` message of its result (no ``tool_calls``, which a request of
    ``functions`` does not speak); the client sees only the answer, and its next request gets
    the exchange spliced back, in that shape."""
    with upstream(replies=[call("pin", id="r2"), "pinned it, done", "second answer"]) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            msgs = legacy_conversation(2, output_chars=100)
            got = client.chat.completions.create(model="m", messages=msgs, functions=FUNCTIONS)  # type: ignore[arg-type]
            assert got.choices[0].message.content == "pinned it, done" and got.choices[0].message.function_call is None
            assert len(up.requests) == 2 and running.proxy.counts["tool_calls"] == 1
            again = up.requests[1]["messages"]
            k = next(k for k, m in enumerate(again) if (m.get("function_call") or {}).get("name") == "pin")
            assert json.loads(again[k]["function_call"]["arguments"]) == {"id": "r2"}
            assert again[k + 1]["role"] == "function" and again[k + 1]["name"] == "pin"
            assert not any("tool_calls" in m or m["role"] == "tool" for m in again)
            msgs += [{"role": "assistant", "content": "pinned it, done"}, {"role": "user", "content": "and now?"}]
            got = client.chat.completions.create(model="m", messages=msgs, functions=FUNCTIONS)  # type: ignore[arg-type]
            assert got.choices[0].message.content == "second answer"
            third = up.requests[2]["messages"]
            k = next(k for k, m in enumerate(third) if (m.get("function_call") or {}).get("name") == "pin")
            assert third[k + 1]["name"] == "pin" and third[k + 2]["content"] == "pinned it, done"
            assert running.proxy.counts["failed_open"] == 0
            assert verified_frames(running.store, derive_session("openai", {"messages": msgs})) == 3
        finally:
            running.close()


def test_in_a_stream_ours_runs_inside_and_the_clients_own_function_call_passes(tmp_path: Path) -> None:
    """Streamed, a ``function_call`` comes in pieces (its name, then its arguments): one of ours
    is held back and run, and the client's own reaches it whole, as the SDK adds it up."""
    replies = [call("pin", id="r1"), call("run", command="make test")]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            msgs: list[dict[str, Any]] = [{"role": "user", "content": "run the tests"}]
            chunks = list(
                running.openai().chat.completions.create(
                    model="m",
                    messages=msgs,  # type: ignore[arg-type]
                    functions=FUNCTIONS,  # type: ignore[arg-type]
                    stream=True,
                )
            )
            deltas = [f for c in chunks if c.choices and (f := c.choices[0].delta.function_call)]
            assert "".join(d.name or "" for d in deltas) == "run"
            assert json.loads("".join(d.arguments or "" for d in deltas)) == {"command": "make test"}
            assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
                "function_call"
            ]
            assert len(up.requests) == 2 and running.proxy.counts["tool_calls"] == 1
            again = up.requests[1]["messages"]
            assert [m.get("name") for m in again if m["role"] == "function"] == ["pin"]
        finally:
            running.close()


def test_a_conversation_of_tool_calls_is_still_offered_ours(proxy: Running, up: Upstream) -> None:
    """The other side of the rule: a request without ``functions`` is offered our tools."""
    proxy.openai().chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert {t["function"]["name"] for t in up.requests[0]["tools"]} >= {"activate", "pin"}
