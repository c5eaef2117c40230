"""``ctxos proxy`` with the real ``openai`` and ``anthropic`` SDK clients pointed at it and a
scripted provider behind it (tests/proxy/upstream.py): the provider gets the assembled context,
streams come through chunk by chunk, each conversation is a session, keys pass untouched, errors
keep their API's shape, and context_os failing never breaks the agent."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import anthropic
import httpx
import openai
import pytest

from context_os import Session
from context_os.context.frames import frame_docs
from context_os.context.load import load_view
from context_os.context.tools import CONTEXT_TOOLS
from context_os.errors import ConfigError
from context_os.files import Workspace
from context_os.harness.openai import OpenAIHook
from context_os.hashing import verify_doc
from context_os.server import transports
from context_os.server.proxy import SESSION_HEADER, STATUS_PATH, Proxy, derive_session, make_proxy_server
from context_os.store.sqlite import SqliteStore
from tests.files.conftest import WATCHDOG_RACE_WARNING
from tests.helpers import overfill, wait_for
from tests.proxy.running import CTXOS, KEY, Running, anthropic_client, openai_client, proxy_command, verified_frames
from tests.proxy.upstream import ToolCall, Upstream, call, reasoning_item, thinking_block, upstream

pytestmark = pytest.mark.timeout(120)


def coding_conversation(steps: int) -> list[dict[str, Any]]:
    """A system prompt, a task, and ``steps`` tool calls with long outputs (enough to be managed)."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "find why the build fails"},
    ]
    for n in range(steps):
        call = {
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat m{n}.py"})},
        }
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"# module {n}\n" + "x = 1\n" * 700})
    return msgs


def test_the_provider_gets_the_assembled_context_and_the_reply_comes_back(
    proxy: Running, up: Upstream, tmp_path: Path
) -> None:
    messages = coding_conversation(60)  # ~63k tokens: past manage_from_tokens
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]
    got = proxy.openai().chat.completions.create(model="m", messages=messages, tools=tools)  # type: ignore[arg-type]
    assert got.choices[0].message.content == "first answer here"
    sent = up.requests[0]
    assert sent["model"] == "m"  # everything but the messages and the tools as it came
    # the client's tools first, then context_os's own, which the proxy runs itself
    assert sent["tools"][:1] == tools
    assert {t["function"]["name"] for t in sent["tools"][1:]} == set(CONTEXT_TOOLS)
    # what went upstream is what context_os assembles for this conversation (rendering is
    # deterministic: the same session on another store gives the same bytes) ...
    with SqliteStore(tmp_path / "check.db") as check:
        sid = derive_session("openai", {"messages": messages})
        expected = OpenAIHook(Session.open(check, sid, harness="openai")).transform_context(messages)
    assert sent["messages"] == json.loads(json.dumps(expected))
    # ... which is smaller than the conversation, and recorded as a verified frame
    assert len(json.dumps(sent["messages"])) < 0.6 * len(json.dumps(messages))
    assert verified_frames(proxy.store, sid) == 1


def test_a_stream_comes_through_chunk_by_chunk(tmp_path: Path) -> None:
    hold = threading.Event()
    with upstream(replies=["one two three four"], hold=hold) as up:
        running = Running(tmp_path, up)
        try:
            stream = running.openai().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "count"}], stream=True
            )
            pieces = []
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                    # the upstream holds the rest until the client has the first chunk: nothing is
                    # buffered on the way
                    hold.set()
            assert "".join(pieces) == "one two three four" and len(pieces) == 4
        finally:
            running.close()


def test_a_client_gone_mid_stream_is_logged_at_debug(tmp_path: Path, caplog: Any) -> None:
    """The docs promise one line at ``-vv`` when the client goes away mid-answer; the upstream's
    answer is closed, the proxy carries on."""
    hold = threading.Event()
    with (
        upstream(replies=["one two three four", "again"], hold=hold) as up,
        caplog.at_level("DEBUG", logger="context_os.proxy"),
    ):
        running = Running(tmp_path, up)
        try:
            stream = running.openai().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "count"}], stream=True
            )
            next(iter(stream))
            stream.close()
            hold.set()
            wait_for(lambda: "went away" in caplog.text, "the client's going logged")
            got = running.openai().chat.completions.create(model="m", messages=[{"role": "user", "content": "more"}])
            assert got.choices[0].message.content == "again"
        finally:
            running.close()


def test_a_request_for_several_choices_is_offered_none_of_ours(proxy: Running, up: Upstream) -> None:
    """With ``n`` over 1 a round of our tools would continue the first choice only and hand its
    answer back as every choice: such a request goes with the client's tools alone."""
    client = proxy.openai()
    client.chat.completions.create(model="m", n=2, messages=[{"role": "user", "content": "two ways"}])
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "one way"}])
    offered = [{t["function"]["name"] for t in r.get("tools") or []} for r in up.requests]
    assert not offered[0] & set(CONTEXT_TOOLS) and "activate" in offered[1]


def test_anthropic_messages_json_and_streamed(proxy: Running, up: Upstream) -> None:
    client = proxy.anthropic()
    got = client.messages.create(
        model="m", max_tokens=100, system="You review code.", messages=[{"role": "user", "content": "review a.py"}]
    )
    assert got.content[0].text == "first answer here"  # type: ignore[union-attr]
    assert up.requests[0]["system"] and "review a.py" in json.dumps(up.requests[0]["messages"])
    with client.messages.stream(
        model="m", max_tokens=100, system="You review code.", messages=[{"role": "user", "content": "review b.py"}]
    ) as stream:
        text = "".join(stream.text_stream)
    assert text == "second answer here"
    sent = {k.lower(): v for k, v in up.headers[0].items()}
    assert KEY in (sent.get("x-api-key"), sent.get("authorization", "").removeprefix("Bearer ")), sorted(sent)


def test_a_cache_breakpoint_is_no_part_of_how_a_conversation_starts() -> None:
    """Claude Code marks its newest message for the prompt cache: its first call's first message
    carries the mark, the next calls' do not, and they are one conversation."""
    first = {"role": "user", "content": [{"type": "text", "text": "fix f7"}]}
    marked = {"role": "user", "content": [{"type": "text", "text": "fix f7", "cache_control": {"type": "ephemeral"}}]}
    body = {"system": "You are Claude Code.", "metadata": {"user_id": "user_ab12_account__session_5f3c"}}
    assert derive_session("anthropic", {**body, "messages": [marked]}) == derive_session(
        "anthropic", {**body, "messages": [first, {"role": "assistant", "content": "ok"}]}
    )
    plain = {"system": "You are Claude Code."}  # without the client's key: the start alone
    assert (
        derive_session("anthropic", {**plain, "messages": [marked]})
        == derive_session("anthropic", {**plain, "messages": [first, {"role": "assistant", "content": "ok"}]})
        != derive_session("anthropic", {**body, "messages": [first]})
    )


def test_each_conversation_is_a_session_and_a_resumed_one_finds_its_own(proxy: Running, up: Upstream) -> None:
    client = proxy.openai()
    a = [{"role": "user", "content": "task A"}]
    b = [{"role": "user", "content": "task B"}]
    client.chat.completions.create(model="m", messages=a)  # type: ignore[arg-type]
    client.chat.completions.create(model="m", messages=b)  # type: ignore[arg-type]
    client.chat.completions.create(  # type: ignore[call-overload]
        model="other-model", messages=[*a, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    )
    sa, sb = derive_session("openai", {"messages": a}), derive_session("openai", {"messages": b})
    assert sa != sb
    assert len(frame_docs(proxy.store, sa)) == 2 and len(frame_docs(proxy.store, sb)) == 1
    named = proxy.openai(**{SESSION_HEADER: "my-run-7"})
    named.chat.completions.create(model="m", messages=a)  # type: ignore[arg-type]
    assert len(frame_docs(proxy.store, "my-run-7")) == 1
    assert all(SESSION_HEADER.lower() not in {k.lower() for k in h} for h in up.headers)  # ours stays here


def test_the_key_goes_upstream_untouched_and_is_never_stored(proxy: Running, up: Upstream) -> None:
    proxy.openai().chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    auth = {k.lower(): v for k, v in up.headers[0].items()}["authorization"]
    assert auth == f"Bearer {KEY}"
    proxy.store.close()
    assert KEY.encode() not in proxy.db.read_bytes()


def test_concurrent_conversations_stay_apart(proxy: Running, up: Upstream) -> None:
    def talk(n: int) -> None:
        client = proxy.openai()
        msgs: list[dict[str, Any]] = [{"role": "user", "content": f"conversation {n}"}]
        for turn in range(3):
            client.chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
            msgs += [{"role": "assistant", "content": f"reply {turn}"}, {"role": "user", "content": f"go on {turn}"}]

    threads = [threading.Thread(target=talk, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for n in range(6):
        sid = derive_session("openai", {"messages": [{"role": "user", "content": f"conversation {n}"}]})
        assert verified_frames(proxy.store, sid) == 3
    for body in up.requests:  # no request carries another conversation's words
        text = json.dumps(body["messages"])
        assert sum(f"conversation {n}" in text for n in range(6)) == 1


READ_TOOL = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}]


def read_a_big_file(
    proxy: Running, before: list[list[dict[str, Any]]], start: list[dict[str, Any]], path: str, text: str
) -> list[dict[str, Any]]:
    """A keyless chat conversation: a request of each of ``before``, then ``start`` with a read of
    ``path`` answered by ``text`` and 240 kB more, and three steps after it; its messages."""
    client = proxy.openai()
    for messages in before:
        client.chat.completions.create(model="m", messages=messages, tools=READ_TOOL)  # type: ignore[arg-type]
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": json.dumps({"path": path})}}
    msgs = [*start, {"role": "assistant", "content": None, "tool_calls": [call]}]
    msgs.append({"role": "tool", "tool_call_id": "c1", "content": text + "\n" + "x = 1\n" * 40_000})
    for n in range(3):
        client.chat.completions.create(model="m", messages=msgs, tools=READ_TOOL)  # type: ignore[arg-type]
        msgs += [{"role": "assistant", "content": f"step {n}"}, {"role": "user", "content": "go on"}]
    return msgs


def test_conversations_that_start_alike_never_see_each_others_files(proxy: Running, up: Upstream) -> None:
    """Two runs of one task (the same system prompt and first message) read different files:
    from their first reply on they are two sessions, and neither is sent what the other read."""
    start = [{"role": "system", "content": "same system"}, {"role": "user", "content": "help me with the repo"}]
    read_a_big_file(proxy, [start], start, "/w/a.txt", "the content of A: SECRET-A-123")
    seen = len(up.requests)
    read_a_big_file(proxy, [start], start, "/w/b.txt", "the content of B")
    assert seen == 4 and all("SECRET-A-123" not in json.dumps(body) for body in up.requests[seen:])


def test_an_upstream_error_after_our_tool_round_ends_the_stream_as_an_error(tmp_path: Path) -> None:
    """The client was sent the first round's start: the error of the round after our tool's
    reaches it in the stream, in its API's shape, and its SDK raises it (it got an empty answer)."""
    with upstream(replies=[call("pin", id="r1"), "-", call("pin", id="r1")], errors={2: 429, 4: 429}) as up:
        running = Running(tmp_path, up)
        try:
            chat = running.openai().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], stream=True
            )
            with pytest.raises(openai.APIError, match="slow down"):
                list(chat)
            ask = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
            with (
                pytest.raises(anthropic.APIStatusError, match="slow down"),
                running.anthropic().messages.stream(
                    **ask  # type: ignore[arg-type]
                ) as stream,
            ):
                list(stream.text_stream)
        finally:
            running.close()


def test_upstream_errors_keep_their_shape(tmp_path: Path, caplog: Any) -> None:
    with upstream(status=429) as up:
        running = Running(tmp_path, up)
        try:
            with pytest.raises(openai.RateLimitError, match="slow down"):
                running.openai().chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            with pytest.raises(anthropic.RateLimitError, match="slow down"):
                running.anthropic().messages.create(
                    model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
                )
        finally:
            running.close()
    # an upstream that is not there: a 502 in the client's shape, saying which upstream
    gone = f"http://127.0.0.1:{_free_port()}"
    store = SqliteStore(tmp_path / "gone.db")
    proxy = Proxy(store, gone)
    server = make_proxy_server(proxy, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(openai.APIStatusError) as e, caplog.at_level("WARNING", logger="context_os.proxy"):
            openai_client(f"{base}/v1").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        # whoever runs the proxy sees it too
        assert any(f"the upstream {gone} cannot be reached (502 to the client)" in r.message for r in caplog.records)
        assert e.value.status_code == 502 and "cannot be reached" in str(e.value)
        assert e.value.body["type"] == "upstream_error"  # type: ignore[index]
        with pytest.raises(anthropic.APIStatusError) as e2:
            anthropic_client(base).messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        assert e2.value.status_code == 502 and e2.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    finally:
        server.shutdown()
        server.server_close()
        proxy.close()
        store.close()


def test_an_upstream_answering_a_page_is_answered_as_it_came(tmp_path: Path) -> None:
    """An upstream address that answers no API (a web server, a captive portal) with a 200 page:
    the client gets that page as it came, status and body, and the proxy goes on serving (it
    used to fail on reading the page as a reply and drop the connection: a bare "Connection
    error" in the SDK)."""
    page = b"<html><body>Sign in to the network</body></html>"
    with upstream(pages={1: page, 2: page}) as up:
        running = Running(tmp_path, up)
        try:
            for path, ask in [
                ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "x"}]}),
                ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "y"}]}),
            ]:
                got = httpx.post(running.url + path, json=ask, headers={"Authorization": f"Bearer {KEY}"})
                assert (got.status_code, got.headers["content-type"], got.content) == (200, "text/html", page)
            assert len(up.requests) == 2 and all(r["tools"] for r in up.requests)  # our tools were offered
            answer = running.openai().chat.completions.create(model="m", messages=[{"role": "user", "content": "z"}])
            assert answer.choices[0].message.content == "ok"
        finally:
            running.close()


def test_an_upstream_breaking_off_mid_stream_ends_the_stream_as_an_error(tmp_path: Path, caplog: Any) -> None:
    """The upstream's connection breaks after the first event of a stream: the client's stream
    ends with its API's error event naming the upstream (its SDK raises it, rather than a bare
    connection error), the proxy says so on stderr, and it goes on serving."""
    with upstream(cut={1, 2, 3}) as up, caplog.at_level("WARNING", logger="context_os.proxy"):
        running = Running(tmp_path, up)
        try:
            chat = running.openai().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], stream=True
            )
            with pytest.raises(openai.APIError, match=f"the upstream {up.url} broke off its answer"):
                list(chat)
            ask = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "y"}]}
            with (
                pytest.raises(anthropic.APIStatusError, match="broke off its answer"),
                running.anthropic().messages.stream(**ask) as stream,  # type: ignore[arg-type]
            ):
                list(stream.text_stream)
            # forwarded as it came (a conversation the provider keeps): the same end
            events = list(
                running.openai().responses.create(model="m", input="z", previous_response_id="resp_0", stream=True)
            )
            assert events[-1].type == "error" and "broke off its answer" in events[-1].message  # type: ignore[union-attr]
            assert [e.sequence_number for e in events] == list(range(len(events)))
            assert sum("broke off its answer" in r.message for r in caplog.records) == 3
            answer = running.openai().chat.completions.create(model="m", messages=[{"role": "user", "content": "w"}])
            assert answer.choices[0].message.content == "ok"
        finally:
            running.close()


def test_a_chunked_request_body_is_read(proxy: Running, up: Upstream) -> None:
    """A client that sends its body chunked (its length not known in advance) is answered as one
    that gives a Content-Length, and its connection goes on serving: the proxy read no body then,
    answered 400 "not a JSON object", and left the chunks to be read as the next request."""
    ask = {"model": "m", "messages": [{"role": "user", "content": "hello " * 2000}]}
    raw = json.dumps(ask).encode()
    with httpx.Client(base_url=proxy.url, headers={"Authorization": f"Bearer {KEY}"}) as client:
        for _ in range(2):  # the same connection, kept alive
            got = client.post(
                "/v1/chat/completions",
                content=iter([raw[:1000], raw[1000:5000], raw[5000:]]),  # httpx sends it chunked
                headers={"Content-Type": "application/json"},
            )
            assert got.status_code == 200, got.text
            assert got.json()["choices"][0]["message"]["content"]
    # chunks that are not well formed: a 400 in the API's shape, and the connection closes; a
    # negative size (int(x, 16) takes "-1") read the rest of the connection past MAX_BODY
    port = int(proxy.url.rsplit(":", 1)[1])
    for body in (
        b"zz\r\n{}\r\n0\r\n\r\n",
        b"-1\r\n" + b"x" * 100_000,
        b"+2\r\n{}\r\n0\r\n\r\n",
        b"5\r\n{}\r\n0\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n%s" % (port, body)
            )
            sock.settimeout(30)  # answered before the client says it is done: no wait for more
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 400 ") and b"not well formed" in answer, body[:10]
    # a body that ends before its Content-Length (the client gone mid-send): what came may parse,
    # but it is not the request sent, and nothing goes upstream
    with socket.create_connection(("127.0.0.1", port)) as sock:
        whole = json.dumps({"model": "m", "messages": [{"role": "user", "content": "cut"}]}).encode()
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (port, len(whole) + 40, whole)
        )
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(30)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ") and b"not well formed" in answer
    assert [r["messages"] for r in up.requests] == [ask["messages"]] * 2


def test_a_retried_request_is_sent_again_as_it_was(tmp_path: Path) -> None:
    """A client retrying a request the upstream refused (a 429, as the SDKs and agents do by
    themselves) sends the same request again: it goes upstream as it went, one frame for all its
    tries. Each try was a turn of its own, and after a few the tool result the model had not seen
    yet was old enough to collapse: the model got a stub of it."""
    with upstream(replies=["looked", "-", "-", "-", "-", "found it"], errors={k: 429 for k in (2, 3, 4, 5)}) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            msgs = coding_conversation(60)  # managed
            client.chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
            fresh = "# the newest module\n" + "y = 2\n" * 700
            call = {"id": "c60", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            msgs += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c60", "content": fresh},
            ]
            tried = openai_client(f"{running.url}/v1").with_options(max_retries=4)
            with pytest.MonkeyPatch.context() as mp:  # the SDK's pause between tries, made short
                mp.setattr(openai._base_client.BaseClient, "_calculate_retry_timeout", lambda *a, **k: 0.01)
                got = tried.chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
            assert got.choices[0].message.content == "found it"
            assert len(up.requests) == 6
            assert all(json.dumps(r) == json.dumps(up.requests[1]) for r in up.requests[2:])
            assert up.requests[-1]["messages"][-1]["content"] == fresh  # in full
            assert verified_frames(running.store, derive_session("openai", {"messages": msgs})) == 2
        finally:
            running.close()


def test_context_os_failing_forwards_the_original_messages(proxy: Running, up: Upstream, caplog: Any) -> None:
    odd = [{"role": "user", "content": "hi"}, {"role": "robot", "content": "beep"}]  # a role we cannot read
    with caplog.at_level("WARNING", logger="context_os.proxy"):
        for _ in range(2):
            got = proxy.openai().chat.completions.create(model="m", messages=odd)  # type: ignore[arg-type]
            assert got.choices[0].message.content
    assert up.requests[0]["messages"] == odd and up.requests[1]["messages"] == odd
    assert proxy.proxy.counts["failed_open"] == 2
    assert sum("original messages go upstream" in r.message for r in caplog.records) == 1  # once per session


def test_a_client_asking_the_provider_to_clear_tool_results_is_told_once(
    proxy: Running, up: Upstream, caplog: Any
) -> None:
    """Anthropic's context editing (``clear_tool_uses_20250919``) clears tool results from what
    context_os sent, after its frame is recorded: the request goes as the client asked, and the
    proxy says once per session that the model is shown less than the frames record. Claude
    Code's own edit (``clear_thinking``, keep all) clears no tool result: nothing is said."""
    edits = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}, {"type": "clear_tool_uses_20250919"}]}
    messages = [{"role": "user", "content": "review a.py"}]
    client = proxy.anthropic()
    with caplog.at_level("WARNING", logger="context_os.proxy"):
        for body in (edits, edits, {"edits": edits["edits"][:1]}):
            ask = {"model": "m", "max_tokens": 100, "messages": messages}
            client.messages.create(**ask, extra_body={"context_management": body})  # type: ignore[arg-type]
            messages = [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and b.py"}]
    assert [r["context_management"] for r in up.requests] == [edits, edits, {"edits": edits["edits"][:1]}]
    said = [r.message for r in caplog.records if "clear tool results" in r.message]
    assert len(said) == 1 and "(context_management: clear_tool_uses_20250919)" in said[0]


def test_a_first_message_context_os_cannot_hash_goes_upstream_as_it_came(proxy: Running, up: Upstream) -> None:
    """The session of a conversation is named by a hash of how it starts; a start that has no
    canonical form (a lone surrogate, a client that cut a string mid-emoji; a NaN, which JSON
    readers take) failed that hash outside the fail-open path: no answer at all, to every request
    of that conversation."""
    said = b'"messages": [{"role": "user", "content": "x"}]'
    odd = [
        ("/v1/chat/completions", b'{"model": "m", "messages": [{"role": "user", "content": "cut \\ud83d"}]}'),
        ("/v1/messages", b'{"model": "m", "max_tokens": 9, "system": NaN, ' + said + b"}"),
    ]
    for path, raw in odd:
        r = httpx.post(f"{proxy.url}{path}", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
    assert len(up.requests) == 2 and up.requests[0]["messages"][0]["content"] == "cut \ud83d"
    assert proxy.proxy.counts["failed_open"] == 2
    # a body nested past the JSON decoder's depth is no JSON object to it: a 400, not a cut connection
    r = httpx.post(f"{proxy.url}/v1/messages", content=b"[" * 100_000, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "not a JSON object" in r.json()["error"]["message"]


def test_a_client_gone_while_the_model_answered_gets_no_round_more(tmp_path: Path) -> None:
    """A request not streamed whose model calls context_os's tools: the client gone (its timeout,
    an agent killed) while the model answered, the proxy made every round of it anyway, each a
    model call billed for nobody."""
    gate = threading.Event()
    with upstream(replies=[call("pin", id="r1")] * 8, gate=gate) as up:
        running = Running(tmp_path, up)
        try:
            port = running.server.server_address[1]
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode()
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (port, len(body), body)
            )
            wait_for(lambda: len(up.requests) == 1, "the first round upstream")
            sock.close()
            gate.set()
            wait_for(lambda: running.proxy._relaying == 0, "the request's end")  # (what stop waits for)
            assert len(up.requests) == 1
        finally:
            running.close()


def test_an_answer_without_a_body_has_none_and_an_http_1_0_client_gets_no_chunks(tmp_path: Path) -> None:
    """An upstream's 204 (a ``DELETE``) or 304 went back chunked, its chunks' end read by the
    client as the start of its next answer on the connection; an HTTP/1.0 client, which knows no
    chunks, got them."""
    for status in (204, 304):
        with upstream(other_status=status) as up:
            running = Running(tmp_path / str(status), up)
            try:
                with httpx.Client(base_url=running.url) as client:
                    first = client.delete("/v1/responses/resp_1") if status == 204 else client.get("/v1/models")
                    assert first.status_code == status and first.content == b""
                    assert "transfer-encoding" not in first.headers
                    up.other_status = 200
                    assert client.get("/v1/models").json()["data"][0]["id"] == "m"  # the same connection
                    assert client.get("/v1/models").json()["data"][0]["id"] == "m"
            finally:
                running.close()
    with upstream() as up:
        running = Running(tmp_path / "1.0", up)
        try:
            port = running.server.server_address[1]
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(b"GET /v1/models HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n\r\n" % port)
                got = b""
                while chunk := sock.recv(65536):  # the answer ends with the connection
                    got += chunk
            head, _, body = got.partition(b"\r\n\r\n")
            assert b"chunked" not in head.lower()
            assert json.loads(body)["data"][0]["id"] == "m"
        finally:
            running.close()


def test_a_foreign_host_a_browser_origin_or_a_body_that_is_not_json_is_refused(proxy: Running, up: Upstream) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    for headers in ({"Host": "evil.example"}, {"Origin": "https://evil.example"}):
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 403 and "refused" in r.json()["error"]["message"]
    # a browser's "simple" POST (no preflight) is not JSON: refused before it is read
    r = httpx.post(f"{proxy.url}/v1/chat/completions", content=json.dumps(body), headers={"Content-Type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "invalid_request_error"  # the proxy refused it: no upstream's error
    for raw in (b"{not json", b"[1, 2]"):
        r = httpx.post(f"{proxy.url}/v1/messages", content=raw, headers={"Content-Type": "application/json"})
        assert (
            r.status_code == 400 and r.json()["type"] == "error" and "not a JSON object" in r.json()["error"]["message"]
        )
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert up.requests == []


def _as_user(uid: int, url: str, request: bytes, *, read: bool = True) -> bytes:
    """What the proxy at ``url`` answered ``request`` sent over a connection of user ``uid``'s (a
    process forked to become that user: only root can); ``read=False``: the process closes the
    connection as soon as the request is sent, reading nothing."""
    host, port = urlsplit(url).hostname, urlsplit(url).port
    read, write = os.pipe()
    with warnings.catch_warnings():  # fork beside the server's thread: the child only uses a socket
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgid(uid)
            os.setuid(uid)
            with socket.create_connection((host, port), timeout=10) as conn:
                conn.sendall(request)
                got = b""
                while read and (chunk := conn.recv(65536)):
                    got += chunk
            os.write(write, got)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        got = answer.read()
    os.waitpid(pid, 0)
    return got


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can connect as another user")
def test_another_users_process_is_refused_by_name_or_not(proxy: Running, up: Upstream) -> None:
    # another user naming this user's session would be given its context (and write into it)
    mine = proxy.openai(**{SESSION_HEADER: "mine"})
    assert mine.chat.completions.create(model="m", messages=[{"role": "user", "content": "read secrets.txt"}])
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "what did you read?"}]}).encode()
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {urlsplit(proxy.url).netloc}\r\n"
    head += f"Content-Type: application/json\r\n{SESSION_HEADER}: mine\r\nAuthorization: Bearer sk-other\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    got = _as_user(65534, proxy.url, head.encode() + body)
    assert got.startswith(b"HTTP/1.1 403"), got[:200]
    assert b"answers only the user that started it" in got and b"user 65534" in got
    assert len(up.requests) == 1  # nothing of the other user's went upstream
    assert verified_frames(proxy.store, "mine") == 1  # nor into the session
    # the status too, token or not
    status = f"GET {STATUS_PATH} HTTP/1.1\r\nHost: {urlsplit(proxy.url).netloc}\r\n"
    status += f"Authorization: Bearer {proxy.status_token}\r\nConnection: close\r\n\r\n"
    assert _as_user(65534, proxy.url, status.encode()).startswith(b"HTTP/1.1 403")


def test_a_request_whose_sender_closed_its_socket_is_refused(tmp_path: Path, up: Upstream, caplog: Any) -> None:
    # A closed socket's row in the kernel's table says uid 0 (root's, whom the proxy answers):
    # another user's process could send its request, close at once, and pass. The request here
    # is sent and its socket closed before the proxy accepts the connection.
    running = Running(tmp_path, up, serve=False)
    port = running.server.server_address[1]
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    head += f"{SESSION_HEADER}: mine\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as gone:
        gone.sendall(head.encode() + body)
    with caplog.at_level("WARNING", logger="context_os.proxy"):
        running.serve()
        try:
            wait_for(lambda: "a closed socket" in caplog.text, "the refusal")
            assert up.requests == []
        finally:
            running.close()


def test_a_proxy_answers_only_its_users(tmp_path: Path, up: Upstream) -> None:
    # this process's user made not one of them: its requests are refused, in the API's shape
    running = Running(tmp_path, up, users=frozenset({os.geteuid() + 4242}))
    try:
        with pytest.raises(openai.PermissionDeniedError, match=f"this connection is user {os.geteuid()}'s"):
            running.openai().chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(anthropic.PermissionDeniedError, match="answers only the user that started it"):
            running.anthropic().messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        assert up.requests == []
    finally:
        running.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


BASH = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]


def log_check() -> list[dict[str, Any]]:
    """A conversation whose last message is a long bash output (``r2`` once collapsed)."""
    return [
        {"role": "user", "content": "check the log"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "log line\n" * 50},
    ]  # fmt: skip


def test_our_tools_run_inside_the_proxy_and_the_client_sees_only_its_answer(tmp_path: Path) -> None:
    replies = [call("pin", id="r2"), "pinned it, done", "second turn answer"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            msgs = log_check()
            got = client.chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
            assert got.choices[0].message.content == "pinned it, done" and not got.choices[0].message.tool_calls
            assert len(up.requests) == 2  # the proxy called upstream again with our tool's result
            again = up.requests[1]["messages"]
            hidden_call = next(
                m for m in again if m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "pin"
            )
            result = next(m for m in again if m.get("tool_call_id") == hidden_call["tool_calls"][0]["id"])
            assert "pinned" in result["content"]
            # the next request: the client's history lacks the exchange; the proxy splices it back
            msgs += [{"role": "assistant", "content": "pinned it, done"}, {"role": "user", "content": "and now?"}]
            got = client.chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
            assert got.choices[0].message.content == "second turn answer"
            third = json.dumps(up.requests[2]["messages"])
            assert third.index('"pin"') < third.index("pinned it, done") < third.index("and now?")
            sid = derive_session("openai", {"messages": msgs})
            assert verified_frames(running.store, sid) == 3
            assert running.proxy.counts["tool_calls"] == 1
        finally:
            running.close()


def test_our_tools_exchange_comes_back_after_a_restart(tmp_path: Path) -> None:
    """The exchange with our tools the client never saw is kept in the store: a proxy restarted
    between two requests of a conversation puts it back in its place, as the first would have
    (it was lost with the process: the model's history lost its own call, and the prompt cache
    its prefix from there)."""
    replies = [call("pin", id="r2"), "pinned it, done", "second turn answer"]
    msgs = log_check()
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            got = running.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
            assert got.choices[0].message.content == "pinned it, done"
        finally:
            running.close()
        msgs += [{"role": "assistant", "content": "pinned it, done"}, {"role": "user", "content": "and now?"}]
        running = Running(tmp_path, up)  # the same store, a new process's proxy
        try:
            got = running.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
            assert got.choices[0].message.content == "second turn answer"
        finally:
            running.close()
    # what the restarted proxy sent is what the first would have: the exchange in its place
    assert up.requests[2]["messages"][:-2] == up.requests[1]["messages"]
    third = json.dumps(up.requests[2]["messages"])
    assert third.index('"pin"') < third.index("pinned it, done") < third.index("and now?")
    with SqliteStore(tmp_path / "proxy.db") as store:
        assert verified_frames(store, derive_session("openai", {"messages": msgs})) == 3


def test_an_eviction_erases_the_exchanges_with_our_tools_kept_in_the_store(tmp_path: Path) -> None:
    """The kept exchanges hold our tools' outputs (a ``lines`` or ``recall`` output is stored text):
    after an eviction a restarted proxy does not put them back, and no version of them is left."""
    from context_os.context.evict import evict

    replies = [call("pin", id="r2"), "pinned it, done", "second turn answer"]
    msgs = log_check()
    sid = derive_session("openai", {"messages": msgs})
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            running.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
        finally:
            running.close()
        with SqliteStore(tmp_path / "proxy.db") as store:
            assert store.history(f"proxy-hidden:{sid}")  # kept
            evict(store, f"toolcall:{sid}:t1")  # the log it pinned held a secret, say
        msgs += [{"role": "assistant", "content": "pinned it, done"}, {"role": "user", "content": "and now?"}]
        running = Running(tmp_path, up)
        try:
            running.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
        finally:
            running.close()
    assert '"pin"' not in json.dumps(up.requests[2]["messages"])  # not put back
    with SqliteStore(tmp_path / "proxy.db") as store:
        assert store.history(f"proxy-hidden:{sid}") == []  # every version erased
    # while the proxy runs: the next request after the eviction goes without them already
    replies = [call("pin", id="r2"), "pinned it, done", "second turn answer"]
    msgs = log_check()
    with upstream(replies=replies) as up:
        (tmp_path / "live").mkdir()
        running = Running(tmp_path / "live", up)
        try:
            running.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
            with SqliteStore(tmp_path / "live" / "proxy.db") as store:
                evict(store, f"toolcall:{sid}:t1")
            msgs += [{"role": "assistant", "content": "pinned it, done"}, {"role": "user", "content": "and now?"}]
            running.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
        finally:
            running.close()
        assert '"pin"' not in json.dumps(up.requests[2]["messages"])
        with SqliteStore(tmp_path / "live" / "proxy.db") as store:
            assert store.history(f"proxy-hidden:{sid}") == []


def test_an_exchange_holding_a_secret_is_never_stored(tmp_path: Path) -> None:
    """An exchange with our tools that holds a secret (what the model said beside its call) is not
    kept in the store, whose every text is redacted: the conversation goes on with it in memory
    (the context sent redacts it, as any text), and a restarted proxy goes on without it."""
    secret = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    replies = [ToolCall("pin", {"id": "r1"}, say=f"the token is {secret}"), "pinned", "next", "after"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            client.responses.create(model="m", input="check the token")
            items: list[Any] = [
                {"role": "user", "content": "check the token"},
                {"role": "assistant", "content": "pinned"},
                {"role": "user", "content": "and now?"},
            ]
            client.responses.create(model="m", input=items)
            assert [i.get("name") for i in up.requests[2]["input"]].count("pin") == 1  # spliced back from memory
        finally:
            running.close()
        running = Running(tmp_path, up)
        try:
            running.openai().responses.create(model="m", input=[*items, {"role": "user", "content": "go on"}])
            assert [i.get("name") for i in up.requests[3]["input"]].count("pin") == 0
        finally:
            running.close()
    assert secret.encode() not in b"".join(p.read_bytes() for p in tmp_path.glob("proxy.db*"))


def test_our_tools_exchange_comes_back_though_claude_code_moves_its_cache_breakpoint(tmp_path: Path) -> None:
    """Claude Code marks its newest message for the prompt cache at every call: the message our
    exchange followed comes back unmarked, and the exchange is still put back in its place."""
    mark = {"type": "ephemeral"}
    with upstream(replies=[call("pin", id="r2"), "pinned it", "second answer"]) as up:
        running = Running(tmp_path, up)
        try:
            client = running.anthropic()
            first = [{"role": "user", "content": [{"type": "text", "text": "check the log", "cache_control": mark}]}]
            client.messages.create(model="m", max_tokens=100, messages=first)  # type: ignore[arg-type]
            later = [
                {"role": "user", "content": [{"type": "text", "text": "check the log"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "pinned it"}]},
                {"role": "user", "content": [{"type": "text", "text": "and now?", "cache_control": mark}]},
            ]
            client.messages.create(model="m", max_tokens=100, messages=later)  # type: ignore[arg-type]
            third = json.dumps(up.requests[2]["messages"])
            assert third.index('"pin"') < third.index("pinned it") < third.index("and now?")
            assert third.count("cache_control") == 1
        finally:
            running.close()


def test_our_tools_in_a_stream_and_the_clients_own_calls_pass(tmp_path: Path) -> None:
    replies = [call("pin", id="r1"), call("bash", cmd="ls"), call("unpin", id="r1"), "all done"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            msgs: list[dict[str, Any]] = [{"role": "user", "content": "list files"}]
            stream = client.chat.completions.create(model="m", messages=msgs, tools=BASH, stream=True)  # type: ignore[call-overload]
            calls = [
                tc.function.name
                for chunk in stream
                for tc in (chunk.choices[0].delta.tool_calls or [])
                if chunk.choices
            ]
            assert calls == ["bash"]  # our pin ran inside; the client's bash came through
            assert len(up.requests) == 2
            msgs += [
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_2", "content": "a.py b.py"},
            ]  # fmt: skip
            stream = client.chat.completions.create(model="m", messages=msgs, tools=BASH, stream=True)  # type: ignore[call-overload]
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            assert text == "all done" and len(up.requests) == 4
        finally:
            running.close()


def test_a_chat_stream_of_several_rounds_is_one_completion_to_the_sdk(tmp_path: Path) -> None:
    """A streamed chat completion that took a round of our tools reaches the client as one
    completion: every chunk has the first round's id and the role is said once, so the SDK's own
    stream helper, which adds up the deltas' strings, gives the role "assistant" (it gave
    "assistantassistant", which the client then sent back in its history)."""
    said = ToolCall("pin", {"id": "r1"}, say="Pinning it. ")  # its text and role reach the client at once
    with upstream(replies=[said, "done here"]) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            msgs: list[dict[str, Any]] = [{"role": "user", "content": "check the log"}]
            chunks = list(client.chat.completions.create(model="m", messages=msgs, stream=True))  # type: ignore[arg-type]
            assert len(up.requests) == 2
            assert {c.id for c in chunks} == {chunks[0].id}
            assert [c.choices[0].delta.role for c in chunks if c.choices and c.choices[0].delta.role] == ["assistant"]
            up.replies += [said, "done again"]
            with client.chat.completions.stream(model="m", messages=msgs) as stream:  # type: ignore[arg-type]
                final = stream.get_final_completion()
            assert final.choices[0].message.role == "assistant"
            assert final.choices[0].message.content == "Pinning it. done again"
        finally:
            running.close()


def test_anthropic_tool_rounds_json_and_streamed(tmp_path: Path) -> None:
    replies = [call("pin", id="r1"), "json done", call("unpin", id="r1"), "stream done"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.anthropic()
            got = client.messages.create(model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
            assert [b.type for b in got.content] == ["text"] and got.content[0].text == "json done"  # type: ignore[union-attr]
            tool_result = up.requests[1]["messages"][-1]["content"][0]
            assert tool_result["type"] == "tool_result" and tool_result["tool_use_id"] == "toolu_1"
            with client.messages.stream(model="m", max_tokens=50, messages=[{"role": "user", "content": "again"}]) as s:
                final = s.get_final_message()
            assert [b.type for b in final.content] == ["text"] and final.content[0].text == "stream done"  # type: ignore[union-attr]
        finally:
            running.close()


def test_with_extended_thinking_our_tool_rounds_keep_the_thinking_block(tmp_path: Path) -> None:
    """With extended thinking on (Claude Code's default), the assistant turn that calls one of our
    tools must go back to the API starting with its thinking block, unmodified (the API refuses
    the request otherwise): JSON and streamed, and in the client's next request, where the
    exchange is spliced back. The client sees the thinking the model streamed, and never our call."""
    replies = [call("pin", id="r1"), "json done", call("unpin", id="r1"), "stream done", "later"]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.anthropic()
            ask: dict[str, Any] = {"model": "m", "max_tokens": 2048, "thinking": thinking}
            got = client.messages.create(messages=[{"role": "user", "content": "hi"}], **ask)
            assert [b.type for b in got.content] == ["thinking", "text"] and got.content[1].text == "json done"  # type: ignore[union-attr]
            ours = up.requests[1]["messages"][-2]["content"]
            assert ours[0] == thinking_block(1) and ours[-1]["type"] == "tool_use"
            streamed = [{"role": "user", "content": "again"}]
            with client.messages.stream(messages=streamed, **ask) as s:  # type: ignore[arg-type]
                final = s.get_final_message()
            assert [b.type for b in final.content] == ["thinking", "thinking", "text"]
            assert final.content[-1].text == "stream done"  # type: ignore[union-attr]
            assert up.requests[3]["messages"][-2]["content"][0] == thinking_block(3)
            # the client's next request: its own history, our exchange spliced back in its place
            history = [*streamed, {"role": "assistant", "content": [b.model_dump() for b in final.content]}]
            client.messages.create(messages=[*history, {"role": "user", "content": "and now?"}], **ask)
            assert len(up.requests) == 5 and up.status == 200
            # each thinking block once, in the round the model wrote it (the stream gave the client both)
            sent = up.requests[4]["messages"]
            assert [[b["type"] for b in m["content"]] for m in sent[-4:-1]] == [
                ["thinking", "tool_use"],
                ["tool_result"],
                ["thinking", "text"],
            ]
            assert sent[-4]["content"][0] == thinking_block(3) and sent[-2]["content"][0] == thinking_block(4)
        finally:
            running.close()


def test_the_rounds_of_one_request_are_capped(tmp_path: Path) -> None:
    with upstream(replies=[call("pin", id="r1")] * 20) as up:
        running = Running(tmp_path, up)
        try:
            got = running.openai().chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            assert len(up.requests) == 8  # MAX_ROUNDS; the last offered none of ours ...
            assert "tools" not in up.requests[-1] or not up.requests[-1]["tools"]
            assert got.choices[0].message.tool_calls  # ... so what the model did then is the client's to see
        finally:
            running.close()


def test_recall_is_offered_and_finds_another_conversation(tmp_path: Path) -> None:
    from context_os.sources.recall import Recall

    with upstream(replies=["noted", call("recall", query="flaky payment webhook"), "found it"]) as up:
        store = SqliteStore(tmp_path / "r.db")
        proxy = Proxy(store, up.url, recall=Recall(store))
        server = make_proxy_server(proxy, 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        client = openai_client(f"http://127.0.0.1:{server.server_address[1]}/v1")
        try:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "the payment webhook test is flaky on CI"}]
            )
            got = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "what was flaky?"}])
            assert got.choices[0].message.content == "found it"
            assert "recall" in {t["function"]["name"] for t in up.requests[1]["tools"]}
            result = next(m for m in up.requests[2]["messages"] if m.get("role") == "tool")
            assert "payment webhook" in result["content"]
        finally:
            server.shutdown()
            server.server_close()
            proxy.close()
            store.close()


def test_the_proxy_command(tmp_path: Path, up: Upstream) -> None:
    said: list[str] = []
    with proxy_command(tmp_path / "c.db", up.url, said) as base_url:
        got = openai_client(base_url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello"}]
        )
        assert got.choices[0].message.content == "first answer here"
    assert said[0] == f"created a new store at sqlite://{tmp_path / 'c.db'}"  # after the listening line
    said.clear()
    with proxy_command(tmp_path / "c.db", up.url, said):
        pass
    assert not any("created" in line for line in said)


def test_the_proxy_command_serves_as_many_connections_as_it_is_told(tmp_path: Path, up: Upstream) -> None:
    """``--max-connections``: the connections served at once (64 by default, which a team's agents
    or one orchestrator's many at once outgrow), one more answered 503 when none is idle."""
    with proxy_command(tmp_path / "c.db", up.url, None, "--max-connections", "2") as base_url:
        port = urlsplit(base_url).port
        assert port is not None
        head, body = overfill(port, "POST /v1/chat/completions HTTP/1.1\r\n", slots=2)
        assert head.split()[1] == b"503", head
        assert "too many connections" in json.loads(body)["error"]["message"]
        got = openai_client(base_url).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert got.choices[0].message.content == "first answer here"


def test_a_stop_right_after_the_listening_line_is_a_clean_one(tmp_path: Path) -> None:
    """A supervisor that stops the proxy as soon as it says it listens (SIGTERM) gets a clean stop,
    exit 0, whenever the signal lands: it used to land, now and then, before the proxy began
    serving, and the command ended with click's "Aborted!" and exit 1. The window is short: a few
    stops in a row hit it most of the time on the unfixed command."""
    for _ in range(8):
        said: list[str] = []
        with proxy_command(tmp_path / "c.db", "http://127.0.0.1:9", said):  # asserts exit 0
            pass
        assert "Aborted!" not in said


def test_with_a_workspace_read_is_offered_unless_the_agent_has_its_own(tmp_path: Path) -> None:
    ws = tmp_path / "repo"
    ws.mkdir()
    (ws / "notes.md").write_text("deploys happen on fridays\n")
    with upstream(replies=[call("read", path="notes.md"), "fridays", "ok"]) as up:
        store = SqliteStore(tmp_path / "w.db")
        proxy = Proxy(store, up.url, workspace=ws)
        server = make_proxy_server(proxy, 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        client = openai_client(f"http://127.0.0.1:{server.server_address[1]}/v1")
        try:
            got = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "when do we deploy?"}]
            )
            assert got.choices[0].message.content == "fridays"
            offered = {t["function"]["name"] for t in up.requests[0]["tools"]}
            assert offered == {"read", *CONTEXT_TOOLS}  # never write, edit, grep…
            assert "deploys happen on fridays" in json.dumps(up.requests[1]["messages"])  # the file, as an object
            own = [
                {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}
            ]
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "other"}], tools=own)  # type: ignore[arg-type]
            assert [t["function"]["name"] for t in up.requests[2]["tools"]].count("read") == 1  # the agent's own
        finally:
            server.shutdown()
            server.server_close()
            proxy.close()
            store.close()


def _use(n: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": n, "name": "Read", "input": {}}]}


def _answer(n: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": n, "content": "x"}]}


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("/v1/messages", {"messages": [_use("a"), {"role": "user", "content": "hi"}]}, "without `tool_result`"),
        ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}, _answer("a")]}, "unexpected `tool_use_id`"),
        ("/v1/messages", {"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]}, "non-empty"),
        (
            "/v1/messages",
            {
                "messages": [
                    _use("a"),
                    {"role": "user", "content": [{"type": "text", "text": "x"}, *_answer("a")["content"]]},
                ]
            },
            "must come first",
        ),
        (
            "/v1/messages",
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {}}] * 5}]},
            "maximum of 4 blocks with cache_control",
        ),
        ("/v1/messages", {"thinking": {"type": "enabled"}, "messages": [_use("a"), _answer("a")]}, "thinking block"),
        ("/v1/messages", {"messages": [_use("a"), _answer("a"), _use("a"), _answer("a")]}, "must be unique"),
        ("/v1/chat/completions", {"messages": [{"role": "tool", "tool_call_id": "a", "content": "x"}]}, "'tool'"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "assistant", "tool_calls": [{"id": "a"}]}, {"role": "user", "content": "x"}]},
            "did not have response messages",
        ),
        ("/v1/responses", {"input": [{"type": "function_call_output", "call_id": "a", "output": "x"}]}, "No tool call"),
        ("/v1/responses", {"input": [reasoning_item(1), reasoning_item(1)]}, "Duplicate item"),
        ("/v1/responses", {"input": [reasoning_item(1)]}, "without its required following item"),
    ],
)
def test_the_scripted_provider_refuses_what_the_apis_refuse(path: str, body: dict[str, Any], says: str) -> None:
    """The proxy tests lean on the scripted provider to refuse a request the real APIs refuse
    (unpaired calls, an empty text, thinking or reasoning dropped or sent twice)."""
    with upstream() as up:
        got = httpx.post(up.url + path, json={"model": "m", **body})
    assert got.status_code == 400 and says in got.text


def test_with_two_upstreams_each_providers_other_endpoints_go_to_it(tmp_path: Path) -> None:
    """One proxy for both providers (``--anthropic-upstream``): the requests it does not manage go
    to the provider whose API they are, Anthropic's by their path (``count_tokens``, which Claude
    Code calls) or the ``anthropic-version`` header its SDKs send (they all went to the OpenAI
    upstream), and a DELETE is forwarded as a GET is (it got a 501 page)."""
    with upstream() as oai, upstream() as ant:
        running = Running(tmp_path, oai, anthropic_upstream=ant.url)
        try:
            claude = running.anthropic()
            counted = claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
            assert counted.input_tokens == 7
            assert [m.id for m in claude.models.list()] == ["m"]
            assert [m.id for m in running.openai().models.list()] == ["m"]
            running.openai().responses.delete("resp_1")
        finally:
            running.close()
    assert [r.split("?")[0] for r in ant.other] == ["POST /v1/messages/count_tokens", "GET /v1/models"]
    assert oai.other == ["GET /v1/models", "DELETE /v1/responses/resp_1"]


def test_a_method_the_proxy_does_not_take_gets_405_in_the_apis_shape(tmp_path: Path) -> None:
    """HEAD, OPTIONS, PUT and made-up methods: 405 naming the methods it takes, the body in the
    client's API's error shape (http.server's HTML 501 page before); HEAD without a body."""
    with upstream() as up:
        running = Running(tmp_path, up)
        try:
            for method in ("OPTIONS", "PUT", "PATCH", "BREW"):
                got = httpx.request(method, running.url + "/v1/models", content=b"{}")
                assert (got.status_code, got.headers["allow"]) == (405, "GET, POST, DELETE")
                assert got.json()["error"]["message"].startswith(f"{method} is not a method the proxy takes")
            claude = httpx.request("PUT", running.url + "/v1/messages", headers={"anthropic-version": "2023-06-01"})
            assert claude.json()["type"] == "error" and claude.json()["error"]["type"] == "invalid_request_error"
            head = httpx.head(running.url + "/v1/models")
            assert head.status_code == 405 and head.content == b"" and int(head.headers["content-length"]) > 0
            assert [m.id for m in running.openai().models.list()] == ["m"]  # the proxy serves on
        finally:
            running.close()
    assert up.other == ["GET /v1/models"]  # none of them went upstream


def test_an_upstream_is_an_http_url_and_a_versioned_base_is_not_doubled(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        for bad in ("ftp://x", "notaurl", "http://"):
            with pytest.raises(ConfigError, match="--upstream must be an http"):
                Proxy(store, bad)
        proxy = Proxy(store, "https://api.example.com/openai/v1/", anthropic_upstream="https://claude.example.com")
        assert (
            proxy.upstream_url("openai", "/v1/chat/completions") == "https://api.example.com/openai/v1/chat/completions"
        )
        assert proxy.upstream_url("anthropic", "/v1/messages") == "https://claude.example.com/v1/messages"
        proxy.close()
    finally:
        store.close()


START = [{"role": "user", "content": "help me with the repo"}]
"""How two keyless conversations start alike (two runs of one task); ``RUN_A`` and ``RUN_B`` go on
after their model's first replies, which differ."""
RUN_A = [*START, {"role": "assistant", "content": "reading a.txt"}, {"role": "user", "content": "go on"}]
RUN_B = [*START, {"role": "assistant", "content": "reading b.txt"}, {"role": "user", "content": "go on"}]


def test_the_conversation_that_claimed_a_start_keeps_it_after_a_restart(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    begun = derive_session("openai", {"messages": START})
    try:
        first = Proxy(store, "http://127.0.0.1:9")
        assert first._route("openai", {"messages": START}, begun) == (begun, None)  # nothing claimed yet
        assert first._route("openai", {"messages": RUN_A}, begun) == (begun, None)  # a's reply claims it
        first.close()
        again = Proxy(store, "http://127.0.0.1:9")  # restarted: the claim is in the store
        forked, its_first = again._route("openai", {"messages": RUN_B}, begun)
        assert forked not in (begun, its_first) and its_first != begun
        assert again._route("openai", {"messages": START}, begun) == (its_first, None)  # b's first call, again
        assert again._route("openai", {"messages": RUN_A}, begun) == (begun, None)
        keyed = {"messages": RUN_B, "prompt_cache_key": "conv-7"}  # a client's own key: no claims needed
        assert again._route("openai", keyed, derive_session("openai", keyed)) == (derive_session("openai", keyed), None)
        again.close()
    finally:
        store.close()


@pytest.mark.parametrize("away", ["closed as idle", "proxy restarted"])
def test_a_first_calls_exchanges_with_our_tools_are_taken_over_after_its_session_closed(
    tmp_path: Path, away: str
) -> None:
    """A conversation whose start another had claimed runs its first call under a session of its
    own (``_route``), and its first reply takes that call's exchanges with our tools over. When
    that session had been closed before the reply came (idle for ``idle_close_s``, or a proxy
    restarted), the exchanges were lost: the model was no longer sent what our tool showed it."""
    replies = ["reading a.txt", "ok a", call("pin", id="r9"), "reading b.txt", "ok b"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            client.chat.completions.create(model="m", messages=START)  # type: ignore[arg-type]
            client.chat.completions.create(model="m", messages=RUN_A)  # type: ignore[arg-type]  # a claims the start
            got = client.chat.completions.create(model="m", messages=START)  # type: ignore[arg-type]
            assert got.choices[0].message.content == "reading b.txt" and len(up.requests) == 4
            assert '"pin"' in json.dumps(up.requests[3]["messages"])  # our tool ran inside b's first call
            if away == "proxy restarted":
                running.close()
                running = Running(tmp_path, up)
                client = running.openai()
            else:
                running.proxy.idle_close_s = 0.1  # b's next request closes what idled that long
                time.sleep(0.2)
            got = client.chat.completions.create(model="m", messages=RUN_B)  # type: ignore[arg-type]
            assert got.choices[0].message.content == "ok b"
            sent = json.dumps(up.requests[4]["messages"])
            assert '"pin"' in sent and sent.index('"pin"') < sent.index("reading b.txt") < sent.index("go on")
            first = running.store.doc(f"proxy-hidden:{_fork_of_start()}")
            assert first is not None and first["content"] == []  # taken over: never sent twice
        finally:
            running.close()
    # the claims and the kept exchanges carry their hashes, as every document (`ctxos verify`
    # called the store damaged: their three hashes did not match)
    with SqliteStore(tmp_path / "proxy.db") as store:
        kept = [v.doc for v in store.iter_versions() if v.doc and v.doc["kind"] in ("proxy_claim", "proxy_hidden")]
        assert {d["kind"] for d in kept} == {"proxy_claim", "proxy_hidden"}
        assert [d["id"] for d in kept if verify_doc(d)] == []


def _fork_of_start() -> str:
    from context_os.server.proxy import _fork

    return _fork(derive_session("openai", {"messages": START}), None)


def test_two_conversations_claiming_one_start_at_once_are_two_sessions(tmp_path: Path) -> None:
    # both first replies came while the start was unclaimed: each request found it so and
    # claimed it, the second's claim replaced the first's, and both were routed to the start's
    # session (one was sent what the other read)
    import threading

    store = SqliteStore(tmp_path / "s.db")
    begun = derive_session("openai", {"messages": START})
    try:
        proxy = Proxy(store, "http://127.0.0.1:9")
        both_looked = threading.Barrier(2)
        looked = proxy._claimed

        def claimed(begun: str) -> str | None:  # both look before either claims
            found = looked(begun)
            both_looked.wait(10)
            return found

        proxy._claimed = claimed  # type: ignore[method-assign]
        routes: dict[str, tuple[str, str | None]] = {}
        runs = [
            threading.Thread(target=lambda n=n, m=m: routes.update({n: proxy._route("openai", {"messages": m}, begun)}))
            for n, m in (("a", RUN_A), ("b", RUN_B))
        ]
        for t in runs:
            t.start()
        for t in runs:
            t.join(10)
        assert sorted(r[0] == begun for r in routes.values()) == [False, True]  # one holds the start
        proxy.close()
    finally:
        store.close()


def test_a_client_that_resets_its_connection_is_no_error(proxy: Running, capsys: Any) -> None:
    """A client that drops a kept-alive connection with a reset (an SDK closed mid-read, a killed
    agent) leaves no traceback on the proxy's stderr: it printed socketserver's "Exception
    occurred during processing of request" and a ConnectionResetError traceback."""
    import struct

    port = proxy.server.server_address[1]
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (port, len(body), body)
    )
    before = set(threading.enumerate())
    sock = socket.create_connection(("127.0.0.1", port))
    client = sock.getsockname()
    sock.sendall(request)
    got = b""
    while not got.endswith(b"0\r\n\r\n"):  # the whole answer: the proxy waits for the next request
        got += sock.recv(65536)
    assert b"[DONE]" in got
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # a reset, not a close
    started = [t for t in threading.enumerate() if t not in before]  # the proxy's and the upstream's handlers
    for t in started:
        t.join(10)  # the upstream closes its streamed answer's connection; the proxy's reads the reset
    assert not any(t.is_alive() for t in started)
    err = capsys.readouterr().err
    assert f"request from {client!r}" not in err and "ConnectionResetError" not in err


def test_an_answer_relayed_has_one_date_and_one_server_header(proxy: Running, up: Upstream) -> None:
    """The upstream's answer comes back with its own ``Date`` and ``Server``, once each: the proxy
    added its own beside them, and every answer had two of each (``Date`` is a single value)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for stream in (False, True):
        got = httpx.post(f"{proxy.url}/v1/chat/completions", json=dict(body, stream=stream), timeout=30)
        assert got.status_code == 200
        assert len(got.headers.get_list("date")) == 1 and len(got.headers.get_list("server")) == 1
        assert got.headers["server"].startswith("BaseHTTP")  # the upstream's
    got = httpx.get(f"{proxy.url}/v1/models", timeout=30)
    assert len(got.headers.get_list("date")) == 1 and len(got.headers.get_list("server")) == 1


def test_chat_messages_that_are_not_a_list_go_upstream_as_they_came(proxy: Running, up: Upstream) -> None:
    """A chat request whose ``messages`` is a string (no request the API takes: only a Responses
    ``input`` may be one) goes upstream as it came, for the provider to refuse: the proxy made it
    a user message, and the provider answered a request the client never sent."""
    got = httpx.post(f"{proxy.url}/v1/chat/completions", json={"model": "m", "messages": "hello"}, timeout=30)
    assert got.status_code == 400 and "valid list" in got.json()["error"]["message"]  # the provider's refusal
    assert up.requests[-1]["messages"] == "hello" and "tools" not in up.requests[-1]


def test_a_retried_request_is_one_frame_with_a_workspace(tmp_path: Path) -> None:
    """With ``--workspace`` (context_os's ``read`` offered: the session is managed from its first
    call) a retried request is one frame for all its tries too: each try was a turn of its own,
    as the session kept asking to be managed from the next turn on after it was."""
    work = tmp_path / "work"
    work.mkdir()
    with upstream(replies=["looked", "-", "-", "found it"], errors={2: 429, 3: 500}) as up:
        running = Running(tmp_path, up, workspace=work)
        try:
            msgs: list[dict[str, Any]] = [{"role": "user", "content": "look around"}]
            client = running.openai()
            client.chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
            msgs += [{"role": "assistant", "content": "looked"}, {"role": "user", "content": "and now?"}]
            for status in (429, 500):
                with pytest.raises(openai.APIStatusError) as e:
                    client.chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
                assert e.value.status_code == status
            got = client.chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
            assert got.choices[0].message.content == "found it"
            assert all(json.dumps(r) == json.dumps(up.requests[1]) for r in up.requests[2:])
            assert verified_frames(running.store, derive_session("openai", {"messages": msgs})) == 2
        finally:
            running.close()


def test_a_message_without_content_goes_upstream_without_one(tmp_path: Path) -> None:
    """An assistant message of calls only, as the SDK dumps its reply (``exclude_none``: no
    ``content`` field), goes upstream as the client sent it: the proxy added ``"content": null``,
    a change context_os never made, which a strict OpenAI-compatible provider may refuse."""
    with upstream(replies=[call("bash", cmd="ls"), "done"]) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            msgs: list[Any] = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "look"}]
            got = client.chat.completions.create(model="m", messages=msgs, tools=BASH)
            reply = got.choices[0].message.model_dump(exclude_none=True)
            assert "content" not in reply and reply["tool_calls"]
            msgs += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "a.py"}]
            assert client.chat.completions.create(model="m", messages=msgs, tools=BASH).choices[0].message.content
            assert up.requests[1]["messages"] == msgs
            assert "content" not in up.requests[1]["messages"][2]
            assert verified_frames(running.store, derive_session("openai", {"messages": msgs})) == 2
        finally:
            running.close()


def test_a_stop_mid_stream_ends_each_stream_with_its_apis_error(tmp_path: Path) -> None:
    """SIGTERM (as Ctrl-C) while answers stream: each stream ends with its API's error event,
    which the SDKs raise, and the proxy says so and stops cleanly. The streams were cut off,
    their end read as whole (an upstream's answer that ends with its connection, which the stop
    shut down, seemed whole to the proxy, and a client was sent the end of its stream)."""
    hold = threading.Event()
    with upstream(replies=["one two three", "four five six"], hold=hold) as up:
        store = tmp_path / "proxy.db"
        cmd = [CTXOS, "--store", str(store), "proxy", "--upstream", up.url, "--port", "0", "--no-recall"]
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
        try:
            assert proc.stderr is not None
            m = re.search(r"OpenAI base URL (http://127\.0\.0\.1:\d+/v1)", proc.stderr.readline().decode())
            assert m
            chat = iter(
                openai_client(m.group(1)).chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "count"}], stream=True
                )
            )
            assert next(chat).choices[0].delta.content == "one"  # the first chunk: the rest is held
            ask = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "count on"}]}
            with anthropic_client(m.group(1).removesuffix("/v1")).messages.stream(**ask) as messages:  # type: ignore[arg-type]
                events = iter(messages)
                assert next(events).type == "message_start"
                proc.send_signal(signal.SIGTERM)
                with pytest.raises(anthropic.APIStatusError, match="the proxy stopped"):
                    list(events)
            with pytest.raises(openai.APIError, match="the proxy stopped"):
                list(chat)
            assert proc.wait(30) == 0
            said = proc.stderr.read().decode()
            assert said.count("the proxy stopped (SIGTERM or Ctrl-C) before the answer ended") == 2, said
            assert "Traceback" not in said
        finally:
            hold.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            assert proc.stderr is not None
            proc.stderr.close()


def test_a_request_retried_across_a_restart_is_one_frame(tmp_path: Path) -> None:
    """The proxy restarted between a try the upstream refused and the client's retry: the retry
    goes upstream as the try went, one frame for both (the frame the store holds is the turn's,
    and the session stands as it did then). It was a turn of its own: the newest tool result aged."""
    with upstream(replies=["looked", "-", "found it"], errors={2: 503}) as up:
        msgs = coding_conversation(60)  # managed
        running = Running(tmp_path, up)
        try:
            running.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
            msgs += [{"role": "assistant", "content": "looked"}, {"role": "user", "content": "and the newest?"}]
            with pytest.raises(openai.APIStatusError):
                running.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
        finally:
            running.close()
        again = Running(tmp_path, up)
        try:
            got = again.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
            assert got.choices[0].message.content == "found it"
            assert json.dumps(up.requests[2]) == json.dumps(up.requests[1])
            assert verified_frames(again.store, derive_session("openai", {"messages": msgs})) == 2
            # the conversation goes on from there: a new turn
            msgs += [{"role": "assistant", "content": "found it"}, {"role": "user", "content": "thanks"}]
            again.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
            assert verified_frames(again.store, derive_session("openai", {"messages": msgs})) == 3
        finally:
            again.close()


def test_a_message_over_the_cap_is_managed_cut_to_it(tmp_path: Path, caplog: Any) -> None:
    """A tool output of 2.1 million characters (over ``max_message_chars``): the conversation is
    managed, the output cut to the cap with a note (said once on stderr), and collapsed as any
    other. Every request failed open for good: the whole output went upstream at every call."""
    with upstream(replies=["seen"] * 6) as up, caplog.at_level("WARNING", logger="context_os.proxy"):
        running = Running(tmp_path, up)
        try:
            call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            msgs: list[Any] = [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "print the log"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "log line\n" * 233_334},
            ]
            for n in range(6):
                running.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
                msgs += [{"role": "assistant", "content": "seen"}, {"role": "user", "content": f"and {n}?"}]
            assert running.proxy.counts["failed_open"] == 0
            sent = [json.dumps(r["messages"][3]) for r in up.requests]
            assert all(len(s) < 1_000_000 for s in sent)  # the managed view of it, then its stub
            assert "collapsed" in sent[-1]
            said = [r.message for r in caplog.records if "over the 2,000,000 one message keeps" in r.message]
            assert len(said) == 1 and "2,100,006 characters" in said[0]
            assert verified_frames(running.store, derive_session("openai", {"messages": msgs})) == 6
        finally:
            running.close()


def test_tool_outputs_go_upstream_in_the_shape_they_came(proxy: Running, up: Upstream) -> None:
    """A chat tool message whose content is text parts goes as those parts (it went as one string
    of their texts), an Anthropic ``tool_result`` without ``content`` without one (it went with
    ``"content": ""``): context_os changed neither."""
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    chat: list[Any] = [
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [{"type": "text", "text": "a.py"}, {"type": "text", "text": "b.py"}],
        },
    ]
    proxy.openai().chat.completions.create(model="m", messages=chat, tools=BASH)  # type: ignore[arg-type]
    assert up.requests[0]["messages"] == chat
    use = {"type": "tool_use", "id": "t1", "name": "touch", "input": {}}
    messages: list[Any] = [
        {"role": "user", "content": "touch it"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
    ]
    proxy.anthropic().messages.create(model="m", max_tokens=5, messages=messages)  # type: ignore[arg-type]
    assert up.requests[1]["messages"] == messages


def test_conversations_alike_to_their_first_reply_are_apart_once_they_diverge(proxy: Running, up: Upstream) -> None:
    """Two runs of one task whose first reply is the same (the same first command, the same
    output) and that read different files after: once they differ they are two sessions, and
    neither is sent what the other read. They were one session (told apart by the first reply
    alone), each request read as a rewrite of the other's history, and B was shown A's file."""
    ls = {"id": "c0", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": "ls"})}}
    start = [
        {"role": "system", "content": "same system"},
        {"role": "user", "content": "help me with the repo"},
        {"role": "assistant", "content": None, "tool_calls": [ls]},
        {"role": "tool", "tool_call_id": "c0", "content": "a.txt b.txt"},
    ]

    a = read_a_big_file(proxy, [start[:2], start], start, "/w/a.txt", "the content of A: SECRET-A-123")
    seen = len(up.requests)
    b = read_a_big_file(proxy, [start[:2], start], start, "/w/b.txt", "the content of B")
    assert seen == 5 and all("SECRET-A-123" not in json.dumps(body) for body in up.requests[seen:])
    # each went on in a session of its own: A's history was never rewritten by B's requests
    begun = derive_session("openai", {"messages": start})
    assert verified_frames(proxy.store, begun) == 5  # A's calls, none of B's
    held = proxy.store.doc(f"session:{begun}")
    assert held is not None and not held["meta"].get("retired")
    history = json.dumps(load_view(proxy.store, begun).entries)
    assert "/w/a.txt" in history and "/w/b.txt" not in history
    a_next = [*a, {"role": "assistant", "content": "done"}, {"role": "user", "content": "one more"}]
    proxy.openai().chat.completions.create(model="m", messages=a_next, tools=READ_TOOL)  # type: ignore[arg-type]
    assert "SECRET-A-123" in json.dumps(up.requests[-1]) and "the content of B" not in json.dumps(up.requests[-1])
    assert verified_frames(proxy.store, begun) == 6 and len(b) == len(a)


def test_a_keyless_client_rewriting_its_own_history_stays_in_its_session(proxy: Running, up: Upstream) -> None:
    """A client without a key that elides an old tool output in place (SWE-agent's last-n
    observations) and drops its replies' reasoning is the same conversation: one session, read
    from the rewritten message on, not another conversation's session."""
    msgs: list[Any] = [{"role": "system", "content": "agent"}, {"role": "user", "content": "fix it"}]
    for n in range(3):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"n": n})}}
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call], "reasoning_content": f"think {n}"},
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"output {n}"},
        ]
        proxy.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
    msgs[3] = {"role": "tool", "tool_call_id": "c0", "content": "Old environment output: (1 line omitted)"}
    msgs[2] = {k: v for k, v in msgs[2].items() if k != "reasoning_content"}
    msgs += [{"role": "user", "content": "go on"}]
    proxy.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
    assert verified_frames(proxy.store, derive_session("openai", {"messages": msgs})) == 4
    assert len(list(proxy.store.find("session"))) == 1


def test_a_keyless_client_dropping_the_reasoning_of_a_reply_that_held_a_secret_stays_in_its_session(
    proxy: Running, up: Upstream
) -> None:
    """The session holds a model's reply with its secrets redacted: a client sending that reply
    again, rewritten (its reasoning dropped), is compared with it redacted the same way. It was
    compared as it came, the secret read as another text, and the conversation went on in a new
    session (its history, and the provider's prompt cache, lost)."""
    secret = "sk-ant-api03-" + "A" * 90
    msgs: list[Any] = [{"role": "system", "content": "agent"}, {"role": "user", "content": "which key is set?"}]
    for n in range(2):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"n": n})}}
        said = f"the key is {secret}" if n == 0 else None
        msgs += [
            {"role": "assistant", "content": said, "tool_calls": [call], "reasoning_content": f"think {n}"},
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"output {n}"},
        ]
        proxy.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
    msgs[2] = {k: v for k, v in msgs[2].items() if k != "reasoning_content"}
    msgs += [{"role": "user", "content": "go on"}]
    proxy.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
    assert verified_frames(proxy.store, derive_session("openai", {"messages": msgs})) == 3
    assert len(list(proxy.store.find("session"))) == 1


def test_a_stop_while_an_answer_has_not_begun_is_a_503_at_once(tmp_path: Path) -> None:
    """A request whose upstream has not begun its answer (one not streamed waits for the whole of
    it) when the proxy stops: its client is told at once, a 503 in its API's shape, and the stop
    does not wait for it. Its connection was not cut (no answer named it yet): the stop waited its
    time out and the process ended with the client's request unanswered."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    release = threading.Event()

    class Slow(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            release.wait(30)  # the model thinks: no headers yet
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    up = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    up.daemon_threads = True
    threading.Thread(target=up.serve_forever, daemon=True).start()
    store = SqliteStore(tmp_path / "p.db")
    proxy = Proxy(store, f"http://127.0.0.1:{up.server_address[1]}")
    server = make_proxy_server(proxy, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    got: list[httpx.Response] = []
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    asking = threading.Thread(target=lambda: got.append(httpx.post(url, json=ask, timeout=30)))
    try:
        asking.start()
        for _ in range(200):  # the request is upstream
            if proxy.counts["assembled"]:
                break
            threading.Event().wait(0.02)
        threading.Event().wait(0.3)
        assert proxy.stop(timeout=5)
        asking.join(5)
        assert got and got[0].status_code == 503 and "the proxy stopped" in got[0].text
    finally:
        release.set()
        asking.join(30)
        server.shutdown()
        server.server_close()
        proxy.close()
        store.close()
        up.shutdown()
        up.server_close()


def test_a_keyless_run_that_differs_first_in_a_tool_output_then_in_a_reply_is_not_merged_back(
    proxy: Running, up: Upstream
) -> None:
    """Two runs of one task, alike to their first reply: B's first command printed more (its tool
    output differs first), then B's model read another file. B goes on in a session of its own
    at every request, and A's history is never rewritten. Only the first message that differed
    was compared as a reply: once B's newest message was one A's session held too (a "go on"),
    B's request was read as A's client rewriting A's history, and went to A's session."""

    def bash(n: int, cmd: str) -> dict[str, Any]:
        return {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": cmd})}}

    def run(listing: str, file: str) -> None:
        msgs: list[Any] = [{"role": "system", "content": "agent"}, {"role": "user", "content": "fix it"}]
        steps = [
            [{"role": "assistant", "content": None, "tool_calls": [bash(0, "ls")]}],
            [{"role": "tool", "tool_call_id": "c0", "content": listing}],
            [{"role": "assistant", "content": None, "tool_calls": [bash(1, f"cat {file}")]}],
            [{"role": "tool", "tool_call_id": "c1", "content": f"the content of {file}"}],
            [{"role": "assistant", "content": "done"}, {"role": "user", "content": "go on"}],
        ]
        proxy.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]
        for k in (0, 2, 4):
            msgs += steps[k] + (steps[k + 1] if k < 4 else [])
            proxy.openai().chat.completions.create(model="m", messages=msgs, tools=BASH)  # type: ignore[arg-type]

    run("a.txt", "a.txt")
    begun = derive_session(
        "openai", {"messages": [{"role": "system", "content": "agent"}, {"role": "user", "content": "fix it"}]}
    )
    run("a.txt b.txt", "b.txt")
    held = proxy.store.doc(f"session:{begun}")
    assert held is not None and not held["meta"].get("retired"), held["meta"]
    assert verified_frames(proxy.store, begun) == 4  # A's calls, none of B's
    assert "b.txt" not in json.dumps(load_view(proxy.store, begun).entries)


@pytest.mark.filterwarnings(WATCHDOG_RACE_WARNING)
def test_the_status_endpoint_names_the_sessions_the_counts_and_the_trackers_errors(
    tmp_path: Path, up: Upstream
) -> None:
    """``GET /_context_os/status``: the proxy's own state (nothing goes upstream), behind the same
    guard as the rest of the proxy; a user could not ask it which sessions it manages, nor learn
    that the tracker of its workspace had lost it (a list only a Python caller could read)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("print('a')\n")
    proxy = Running(tmp_path, up, workspace=ws)
    try:
        proxy.openai(**{SESSION_HEADER: "run-1"}).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        sent = len(up.requests)
        auth = {"Authorization": f"Bearer {proxy.status_token}"}
        # it names sessions: without the proxy's status token (a user's own API key is none), refused
        for wrong in ({}, {"Authorization": "Bearer sk-some-users-own-key"}):
            refused = httpx.get(f"{proxy.url}{STATUS_PATH}", headers=wrong)
            assert refused.status_code == 401 and "run-1" not in refused.text, refused.text
        got = httpx.get(f"{proxy.url}{STATUS_PATH}", headers=auth)
        assert got.status_code == 200, got.text
        # the scheme's name in any case (RFC 9110), as the server's and MCP's guards take it
        lower = {"Authorization": f"bearer {proxy.status_token}"}
        assert httpx.get(f"{proxy.url}{STATUS_PATH}", headers=lower).is_success
        status = got.json()
        assert status["sessions"] == [{"session": "run-1", "harness": "openai", "turn": 1, "workspace": str(ws)}]
        assert status["counts"]["requests"] == 1 and status["counts"]["assembled"] == 1
        assert status["upstreams"]["openai"] == up.url and status["workspace"] == str(ws)
        assert len(up.requests) == sent  # answered by the proxy itself
        for headers in ({"Host": "evil.example"}, {"Origin": "https://evil.example"}):
            assert httpx.get(f"{proxy.url}{STATUS_PATH}", headers={**auth, **headers}).status_code == 403
        # the tracker of its workspace, once the workspace is gone
        assert proxy.proxy.trackers is not None
        proxy.proxy.trackers(Workspace(ws)).track(["a.py"])
        shutil.rmtree(ws)
        gone = wait_for(
            lambda: [
                e
                for t in httpx.get(f"{proxy.url}{STATUS_PATH}", headers=auth).json()["trackers"]
                for e in t["errors"]
                if "is gone" in e
            ],
            "the tracker's error in the status",
        )
        assert gone[0].startswith(f"{ws} is gone")
    finally:
        proxy.close()


def test_while_its_sessions_close_the_proxy_answers_its_status_and_opens_no_session(tmp_path: Path) -> None:
    """``Proxy.close`` waits up to 30 s for its sessions to close (a store that hangs): it did so
    holding the lock every request takes, so a status asked meanwhile waited as long, and a
    request that came meanwhile (on a kept-alive connection) then opened a session of its own,
    after the sessions were closed, which nothing closed. Now neither waits, and no session is
    opened once the proxy closes."""
    db = tmp_path / "p.db"
    with SqliteStore(db) as store:
        proxy = Proxy(store, "http://127.0.0.1:9")
        body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
        assert proxy.prepare("openai", {}, body).conversation is not None
        with _hung(db):
            closing = threading.Thread(target=proxy.close)
            closing.start()
            wait_for(lambda: any(t.name.startswith("ctxos-close-") for t in threading.enumerate()), "the close")
            answered: list[Any] = []
            asking = threading.Thread(target=lambda: answered.append(proxy.status()), daemon=True)
            asking.start()
            wait_for(lambda: answered, "the status while the sessions close")
            assert answered[0]["sessions"] == []
            other = {"model": "m", "messages": [{"role": "user", "content": "another"}]}
            assert proxy.prepare("openai", {}, other).conversation is None  # as it came
        closing.join(60)
        assert not closing.is_alive()
        assert store.get(f"session:{derive_session('openai', other)}") is None


def test_a_session_opening_on_a_store_that_hangs_holds_up_no_other_request(tmp_path: Path) -> None:
    """A new conversation's session was opened under the lock every request and the status take:
    on a store that hangs (each write waits its timeout, 30 s), every other request, a session's
    already open among them, and the status waited for it, one after the other."""
    db = tmp_path / "p.db"
    with SqliteStore(db) as store:
        proxy = Proxy(store, "http://127.0.0.1:9")
        first = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
        assert proxy.prepare("openai", {}, first).conversation is not None
        opened: list[Any] = []
        with _hung(db):
            new = {"model": "m", "messages": [{"role": "user", "content": "another"}]}
            opening = threading.Thread(target=lambda: opened.append(proxy.prepare("openai", {}, new)))
            opening.start()

            def not_written() -> bool:
                # read apart: the store's own connection is the opening's while its write waits
                with SqliteStore(db, read_only=True) as apart:
                    return apart.doc(f"session:{derive_session('openai', new)}") is None

            wait_for(lambda: _waits_on_store(opening) and not_written())
            answered: list[Any] = []
            threading.Thread(target=lambda: answered.append(proxy.status()), daemon=True).start()
            wait_for(lambda: answered, "the status while a session opens")
            assert answered[0]["counts"]["requests"] == 2
        opening.join(60)
        assert opened and opened[0].conversation is not None
        assert {s["session"] for s in proxy.status()["sessions"]} == {
            derive_session("openai", first),
            derive_session("openai", new),
        }
        proxy.close()


@contextmanager
def _hung(db: Path) -> Iterator[None]:
    """Within: the SQLite store at ``db`` hangs (another connection holds its write lock, so each
    write waits its timeout); it answers again after, whatever happened within."""
    blocker = sqlite3.connect(db)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        blocker.rollback()
        blocker.close()


def _waits_on_store(thread: threading.Thread) -> bool:
    """Whether ``thread`` is inside ``Session.open`` (waiting for the store)."""
    import sys
    import traceback

    frame = sys._current_frames().get(thread.ident or 0)
    return frame is not None and any(
        f.name == "open" and "session.py" in f.filename for f in traceback.extract_stack(frame)
    )


def test_connections_that_never_finish_their_headers_are_bounded_and_closed(tmp_path: Path, up: Upstream) -> None:
    """A local client that connects and never finishes its request line or headers held one of
    the proxy's threads for ever (its reads had no timeout at all), with no bound on how many.
    Now, as ``ctxos serve --http``: at most ``max_connections`` are served at once (one more is
    answered 503 in OpenAI's shape, which the SDKs retry), and one whose headers are not all in
    within ``header_seconds`` is closed."""
    with SqliteStore(tmp_path / "p.db") as store:
        proxy = Proxy(store, up.url)
        server = make_proxy_server(proxy, 0, max_connections=4, header_seconds=1.0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
        try:
            head, body = overfill(port, f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n")
            assert head.split()[1] == b"503", head
            assert "too many connections" in json.loads(body)["error"]["message"]
            client = openai_client(f"http://127.0.0.1:{port}/v1")
            reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert reply.choices[0].message.content == "first answer here"  # served again
        finally:
            server.shutdown()
            server.server_close()
            proxy.close()


def _status_on(sock: socket.socket, port: int, token: str, method: bytes = b"GET") -> bytes:
    """The status line of ``GET /_context_os/status`` asked on ``sock``, kept alive after it
    (``method``: what of ``GET`` is still to be sent)."""
    sock.sendall(
        method + f" {STATUS_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        assert chunk, f"the connection was closed with {answer!r} answered"
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head, re.IGNORECASE)[1])  # type: ignore[index]
    while len(body) < length:
        body += sock.recv(65536)
    return head.split(b"\r\n")[0]


@contextmanager
def _idle_pool(
    tmp_path: Path, up: Upstream, size: int, header_seconds: float = 600
) -> Iterator[tuple[Any, int, list[socket.socket]]]:
    """(server, port, pool): a proxy serving ``size`` connections at once, and a client's pool of
    ``size`` kept-alive connections to it, each answered once and now idle, the oldest first.
    They wait ``header_seconds`` for their next request (long: a test stalled by a loaded
    machine must not see them closed for that)."""
    with SqliteStore(tmp_path / "p.db") as store:
        proxy = Proxy(store, up.url)
        server = make_proxy_server(proxy, 0, max_connections=size, status_token="t0ken", header_seconds=header_seconds)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
        pool = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(size)]
        try:
            for n, sock in enumerate(pool, 1):
                assert _status_on(sock, port, "t0ken").split()[1] == b"200"
                # (its thread waits for the next request once the answer is out: in this order)
                wait_for(lambda n=n: len(server._idle) == n, "the connection to wait, idle")  # type: ignore[attr-defined]
            yield server, port, pool
        finally:
            for sock in pool:
                sock.close()
            server.shutdown()
            server.server_close()
            proxy.close()


def test_idle_kept_alive_connections_make_room_for_a_new_one(tmp_path: Path, up: Upstream) -> None:
    """A client's pool of kept-alive connections, idle between its requests, held every one of
    the proxy's connections: any other client (another agent, the status) was answered 503 until
    they were closed for idleness. Now the connection idle the longest is closed for the new one;
    one in the middle of a request is never closed so."""
    with (
        _idle_pool(tmp_path, up, 3) as (server, port, pool),
        socket.create_connection(("127.0.0.1", port), timeout=30) as other,
    ):
        assert _status_on(other, port, "t0ken").split()[1] == b"200"
        assert pool[0].recv(65536) == b""  # the one idle the longest made room
        # the pool's others are still served on their connections; one whose client has
        # begun a request (a byte of it) is never closed for another
        assert _status_on(pool[1], port, "t0ken").split()[1] == b"200"
        wait_for(lambda: len(server._idle) == 3, "the three connections to wait, idle")
        for sock in (other, pool[1], pool[2]):
            sock.sendall(b"G")
        # (once the server has its byte: one still on its way is a request not begun, for the
        # server as for anyone; a byte come and not yet claimed: the test below)
        wait_for(lambda: not server._idle, "the three connections to be claimed by their requests")
        head, _ = overfill(port, "", slots=0)
        assert head.split()[1] == b"503", head
        for sock in (other, pool[1], pool[2]):
            sock.sendall(b"E")
            assert _status_on(sock, port, "t0ken", b"T").split()[1] == b"200"


def test_a_connection_whose_thread_took_the_first_byte_of_a_request_is_not_closed_for_another(
    tmp_path: Path, up: Upstream
) -> None:
    """A handler's thread took its client's first byte off the socket, then claimed the connection
    (not idle any more): preempted between the two, a new connection's ``_make_room`` found it
    idle with nothing to read and closed it, the client's begun request lost (1 CI run of the test
    above). The claim comes first now, while the bytes are still there; delayed here by 0.3 s as
    a preempted thread's is."""
    with _idle_pool(tmp_path, up, 2) as (server, port, pool):
        claims, slow = server.claims, threading.Event()  # type: ignore[attr-defined]

        def preempted(handler: Any) -> bool:
            if slow.is_set():
                time.sleep(0.3)
            return bool(claims(handler))

        server.claims = preempted  # type: ignore[attr-defined]
        slow.set()
        pool[0].sendall(b"G")  # the oldest idle one's client begins its next request
        time.sleep(0.1)  # its thread is woken and in its (slow) claim
        with socket.create_connection(("127.0.0.1", port), timeout=30) as other:
            assert _status_on(other, port, "t0ken").split()[1] == b"200"
            slow.clear()
            assert pool[1].recv(65536) == b""  # the one not begun made room
            assert _status_on(pool[0], port, "t0ken", b"ET").split()[1] == b"200"


def test_a_request_begun_late_in_a_kept_alive_wait_has_its_whole_header_time(
    tmp_path: Path, up: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept-alive connection waits ``header_seconds`` for its client's next request; that request
    had only what was left of the wait for its line and headers: begun a moment before the end, it
    was cut mid-request, its client never told the connection was about to go. Its headers have
    ``header_seconds`` from their first byte now. The server's clock is moved on here (59.8 s of a
    60 s wait gone) rather than a test waiting a minute."""
    later = [0.0]
    monkeypatch.setattr(transports, "time", SimpleNamespace(monotonic=lambda: time.monotonic() + later[0]))
    with _idle_pool(tmp_path, up, 1, header_seconds=60) as (server, port, pool):
        later[0] = 59.8  # 0.2 s of the wait left
        pool[0].sendall(b"G")  # the next request begins
        wait_for(lambda: not server._idle, "the connection to be claimed by its request")
        time.sleep(0.6)  # more than what was left of the wait
        assert _status_on(pool[0], port, "t0ken", b"ET").split()[1] == b"200"


def test_an_answer_relayed_to_a_client_that_pauses_its_reading_is_not_cut_by_the_header_deadline(
    tmp_path: Path,
) -> None:
    """A relayed answer (``_start`` writes its status line itself) was written with the socket
    timeout the header deadline left on the connection's last read (``header_seconds``, less what
    the headers took): a client that stopped reading for that long (a stream's reader busy, a large
    answer read slowly) had its answer cut, though the deadlines bound reading the request only.
    Its writes get the handler's own timeout, as every answer sent with ``send_response``."""
    big = b"x" * (8 << 20)  # more than the sockets between hold

    class Big(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(big)))
            self.end_headers()
            with suppress(OSError):
                self.wfile.write(big)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    upstream_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Big)
    threading.Thread(target=upstream_server.serve_forever, daemon=True).start()
    with SqliteStore(tmp_path / "p.db") as store:
        proxy = Proxy(store, f"http://127.0.0.1:{upstream_server.server_address[1]}")
        server = make_proxy_server(proxy, 0, header_seconds=1.0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
        try:
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.settimeout(30)
                sock.connect(("127.0.0.1", port))
                sock.sendall(f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
                got = sock.recv(4096)
                time.sleep(3)  # the reader is busy: the proxy's writes wait meanwhile
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)  # and then reads at speed
                while chunk := sock.recv(1 << 20):
                    got += chunk
            head, _, body = got.partition(b"\r\n\r\n")
            assert head.split()[1] == b"200", head
            assert body.endswith(b"0\r\n\r\n"), "the answer was cut"  # the chunked answer's end
            assert body.count(b"x") == len(big)
        finally:
            server.shutdown()
            server.server_close()
            proxy.close()
            upstream_server.shutdown()
            upstream_server.server_close()


def test_a_reply_whose_call_says_true_is_not_one_that_says_1() -> None:
    from context_os.server.proxy import _same_reply

    def reply(arguments: Any) -> dict[str, Any]:
        return {"role": "assistant", "text": "", "tool_calls": [{"id": "t1", "name": "f", "arguments": arguments}]}

    assert _same_reply(reply({"all": True, "n": 2}), reply({"n": 2, "all": True}))
    assert not _same_reply(reply({"all": True}), reply({"all": 1}))
    assert not _same_reply(reply({"n": 1.0}), reply({"n": 1}))


def test_a_stream_whose_line_ends_are_cut_in_two_is_read_event_by_event(tmp_path: Path) -> None:
    """A stream whose lines end with CRLF, cut between a CR and its LF (each event's last line
    end): read event by event. The proxy read a CR at a part's end and an LF at the next one's
    start as no line's end, took two events for one, and read the first alone: the model's call
    of our tool after its text went to the client as a call of a tool it does not have."""
    with upstream(replies=[ToolCall("history", {}), "done"], crlf=True) as up:
        running = Running(tmp_path, up)
        try:
            client = running.anthropic()
            messages: Any = [{"role": "user", "content": "go"}]
            with client.messages.stream(model="m", max_tokens=100, messages=messages) as stream:
                final = stream.get_final_message()
            assert [b.type for b in final.content] == ["text"] and final.content[0].text == "done"  # type: ignore[union-attr]
            assert len(up.requests) == 2  # ours ran in the proxy
        finally:
            running.close()


def test_a_conversation_idle_past_its_time_is_closed_and_goes_on_when_it_comes_again(
    tmp_path: Path,
) -> None:
    """The proxy kept every conversation's session open until it stopped: one that runs for days
    meets a conversation per task, each session's view held in memory, its lease held too. Now a
    conversation no request used for ``idle_close_s`` is closed when another opens (not one a
    request holds); its next request opens it again and it goes on at its next turn."""
    with SqliteStore(tmp_path / "p.db") as store:
        proxy = Proxy(store, "http://127.0.0.1:9", timeout=0.05, idle_close_s=0.1)
        first = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
        plan = proxy.prepare("openai", {}, first)
        conv = plan.conversation
        assert conv is not None
        sid = conv.hook.session.id
        wait_for(lambda: time.monotonic() - conv.used > 0.2, "the first conversation to idle")
        busy = proxy.prepare("openai", {}, {"model": "m", "messages": [{"role": "user", "content": "busy"}]})
        assert busy.conversation is not None and busy.conversation is not conv
        wait_for(lambda: time.monotonic() - busy.conversation.used > 0.2, "the second conversation to idle")
        with busy.conversation.lock:  # a request holds it: in use, however long since it began
            third = proxy.prepare("openai", {}, {"model": "m", "messages": [{"role": "user", "content": "third"}]})
        assert third.conversation is not None
        assert conv.closed and not busy.conversation.closed
        assert sorted(s["session"] for s in proxy.status()["sessions"]) == sorted(
            [busy.conversation.hook.session.id, third.conversation.hook.session.id]
        )
        again = dict(
            first,
            messages=[*first["messages"], {"role": "assistant", "content": "hi"}, {"role": "user", "content": "and?"}],
        )
        back = proxy.prepare("openai", {}, again)
        assert back.conversation is not None and back.conversation is not conv and not back.conversation.closed
        assert back.conversation.hook.session.id == sid and back.conversation.hook.session.view.turn == 2
        proxy.close()


def test_no_opening_lock_outlives_its_conversation(tmp_path: Path) -> None:
    """Each session that failed to open, and each the idle close closed, left its opening lock in
    the proxy: one that serves a keyless client for days (a session per conversation) kept one per
    conversation it ever met. Now a lock goes with the last request that held or waited for it."""
    with SqliteStore(tmp_path / "p.db") as store:
        proxy = Proxy(store, "http://127.0.0.1:9", timeout=0.05, idle_close_s=0.1)
        plans = []
        for n in range(5):
            plans.append(
                proxy.prepare("openai", {}, {"model": "m", "messages": [{"role": "user", "content": f"t{n}"}]})
            )
            assert plans[-1].conversation is not None
            wait_for(lambda: time.monotonic() - plans[-1].conversation.used > 0.2, "the conversation to idle")
        assert [p.conversation.closed for p in plans] == [True] * 4 + [False]  # type: ignore[union-attr]
        assert proxy._opening == {}
    with SqliteStore(tmp_path / "q.db") as gone:
        pass  # closed: every session opened on it fails
    proxy = Proxy(gone, "http://127.0.0.1:9")
    for n in range(3):
        plan = proxy.prepare("openai", {}, {"model": "m", "messages": [{"role": "user", "content": f"f{n}"}]})
        assert plan.conversation is None and plan.body is plan.original
    assert proxy.counts["failed_open"] == 3 and proxy._opening == {}
    proxy.close()


def test_the_idle_close_outlasts_a_round_of_a_request(tmp_path: Path) -> None:
    """A round of a request may wait twice the upstream timeout: a conversation closed as idle
    meanwhile would lose it, so the idle time is never less (a ``--timeout`` of an hour does not
    close a conversation after the default 60 minutes)."""
    with SqliteStore(tmp_path / "p.db") as store:
        for given, idle in [({"timeout": 600, "idle_close_s": 900}, 1200), ({"timeout": 3600}, 7200)] + [
            ({"timeout": 10}, 3600),
            ({"idle_close_s": None}, None),
        ]:
            proxy = Proxy(store, "http://127.0.0.1:9", **given)  # type: ignore[arg-type]
            proxy.close()
            assert proxy.idle_close_s == idle, given
