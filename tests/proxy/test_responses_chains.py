"""``ctxos proxy`` and Responses conversations the provider keeps (``previous_response_id``), with
the real ``openai`` SDK and the scripted provider of tests/proxy/upstream.py: a request that
continues a response the proxy relayed is sent as the whole conversation, managed as any other,
in the session of the chain's start; the links are kept in the store from a chain's first
continuation on (a restarted proxy goes on with it), never one holding a secret, and an eviction
ends them; a response the proxy does not know goes upstream as it came."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from context_os.context.evict import evict
from context_os.server.proxy_chains import Chains
from context_os.store.sqlite import SqliteStore
from tests.proxy.running import Running, only_session, verified_frames
from tests.proxy.test_responses import INSTRUCTIONS, TOOLS, user, well_formed
from tests.proxy.upstream import ToolCall, Upstream, call, upstream

pytestmark = pytest.mark.timeout(120)


def create(client: openai.OpenAI, stream: bool, **request: Any) -> Any:
    """A response, read from the stream's end when streamed."""
    if not stream:
        return client.responses.create(model="m", instructions=INSTRUCTIONS, tools=TOOLS, **request)
    events = list(client.responses.create(model="m", instructions=INSTRUCTIONS, tools=TOOLS, stream=True, **request))
    [done] = [e.response for e in events if e.type == "response.completed"]
    return done


def output(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def kinds(items: list[dict[str, Any]]) -> list[str]:
    return [str(i.get("type", "message")) for i in items]


def two_turns(client: openai.OpenAI) -> tuple[Any, Any]:
    """A chain's start ("hello") and its first continuation ("and?")."""
    first = create(client, False, input="hello")
    return first, create(client, False, input="and?", previous_response_id=first.id)


def user_said(request: dict[str, Any]) -> list[Any]:
    """What the user said in a request sent upstream, in order."""
    return [i.get("content") for i in request["input"] if i.get("role") == "user"]


def links(db: Path) -> set[str]:
    with SqliteStore(db) as store:
        return {v.id.removeprefix("proxy-response:") for v in store.find("proxy_response")}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
def test_a_conversation_the_provider_keeps_is_sent_whole_and_managed(tmp_path: Path, stream: bool) -> None:
    replies = [call("shell_command", command="cat m.py"), "It sets x.", "You are welcome."]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            first = create(client, stream, input=[user("what does m.py do?")])
            [fc] = [i for i in first.output if i.type == "function_call"]
            second = create(client, stream, previous_response_id=first.id, input=[output(fc.call_id, "x = 1\n")])
            assert second.output_text == "It sets x."
            sent = up.requests[1]
            # as a client keeping its own history sends it: no previous response, every item
            assert "previous_response_id" not in sent and sent["instructions"] == INSTRUCTIONS
            assert kinds(sent["input"]) == ["message", "function_call", "function_call_output"]
            assert sent["input"][0]["content"][0]["text"] == "what does m.py do?"
            assert sent["input"][1]["id"] == "fc_1" and sent["input"][1]["call_id"] == fc.call_id
            assert sent["input"][2]["output"] == "x = 1\n"
            well_formed(sent["input"])
            third = create(client, stream, previous_response_id=second.id, input="thanks")
            assert third.output_text == "You are welcome."
            again = up.requests[2]["input"]
            assert again[:3] == sent["input"]  # the conversation so far, as it was sent
            assert kinds(again[3:]) == ["message", "message"] and again[3]["content"][0]["text"] == "It sets x."
            assert again[4] == {"role": "user", "content": "thanks"}
            assert all("previous_response_id" not in r for r in up.requests)
            assert running.proxy.counts["continued"] == 2 and running.proxy.counts["continued_unknown"] == 0
            # one session, every call of it recorded as a frame that re-renders
            sid = only_session(running.store)
            assert verified_frames(running.store, sid) == 3
        finally:
            running.close()
    # from the chain's first continuation on, each response is a link in the store
    assert links(tmp_path / "proxy.db") == {first.id, second.id, third.id}


def test_a_long_kept_conversation_is_managed_like_one_the_client_keeps(tmp_path: Path) -> None:
    """Thirty reads of big files through ``previous_response_id``: the provider gets the whole
    conversation managed (old outputs collapsed), not the growing transcript."""
    n = 30
    replies: list[str | ToolCall] = [call("shell_command", command=f"cat m{k}.py") for k in range(n)] + ["done"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            got = create(client, False, input=[user("read every module")])
            full = 0
            for k in range(n):
                [fc] = [i for i in got.output if i.type == "function_call"]
                text = f"# module {k}\n" + "x = 1\n" * 2_000
                full += len(text)
                got = create(client, False, previous_response_id=got.id, input=[output(fc.call_id, text)])
            assert got.output_text == "done"
            last = up.requests[-1]
            assert "previous_response_id" not in last
            well_formed(last["input"])
            assert len(json.dumps(last["input"])) < 0.5 * full  # collapsed: not every output whole
            assert f"# module {n - 1}" in json.dumps(last["input"])  # the newest whole
            assert verified_frames(running.store, only_session(running.store)) == n + 1
        finally:
            running.close()


def test_our_tools_exchange_goes_on_in_a_kept_conversation(tmp_path: Path) -> None:
    """The model calls ``pin`` (run inside the proxy) in a conversation the provider keeps: the
    client's next request, which names the response it got, is sent with the exchange in its
    place, once."""
    replies = [call("pin", id="r2"), "pinned it, done", "next answer"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            items = [
                user("check the log"),
                {"type": "function_call", "name": "shell_command", "arguments": "{}", "call_id": "t1"},
                output("t1", "log line\n" * 50),
            ]
            got = create(client, False, input=items)
            assert got.output_text == "pinned it, done" and len(up.requests) == 2
            create(client, False, previous_response_id=got.id, input="and now?")
            third = up.requests[2]["input"]
            well_formed(third)
            text = json.dumps(third)
            assert [i.get("name") for i in third].count("pin") == 1
            assert text.index('"pin"') < text.index("pinned it, done") < text.index("and now?")
        finally:
            running.close()


def test_what_the_proxy_does_not_know_goes_as_it_came(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``store: false`` (the provider keeps nothing: nor does the proxy), a response relayed before
    the proxy started, and the chain after it: as they came, said once."""
    with upstream(replies=["one", "two", "three", "four"]) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            got = create(client, False, input="hello", store=False)
            create(client, False, input="again", previous_response_id=got.id)
            assert up.requests[1]["previous_response_id"] == got.id and up.requests[1]["input"] == "again"
            later = create(client, False, input="go on", previous_response_id="resp_elsewhere")
            create(client, False, input="and on", previous_response_id=later.id)
            assert up.requests[3]["previous_response_id"] == later.id and up.requests[3]["input"] == "and on"
            assert running.proxy.counts["continued_unknown"] == 3 and running.proxy.counts["continued"] == 0
            said = [r.getMessage() for r in caplog.records if "does not know" in r.getMessage()]
            assert [got.id in said[0], "resp_elsewhere" in said[1]] == [True, True] and len(said) == 2
        finally:
            running.close()
    assert links(tmp_path / "proxy.db") == set()


def test_a_conversation_of_the_conversations_api_goes_as_it_came(proxy: Running, up: Upstream) -> None:
    """A request naming a conversation the provider keeps (``conversation``: its items are the
    provider's, not the request's): as it came, no session opened."""
    client = proxy.openai()
    client.responses.create(model="m", conversation="conv_123", input="go on")
    assert up.requests[0]["conversation"] == "conv_123" and up.requests[0]["input"] == "go on"
    assert proxy.store.find("session") == []


def test_a_restarted_proxy_goes_on_with_a_stored_chain(tmp_path: Path) -> None:
    """Links are stored from a chain's first continuation on: a restarted proxy rebuilds the
    conversation from the store; a chain's start never continued was in memory only."""
    with upstream(replies=["one", "two", "three", "four"]) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            first, second = two_turns(client)
            alone = create(client, False, input=[user("another conversation")])
        finally:
            running.close()
        assert links(tmp_path / "proxy.db") == {first.id, second.id}
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            create(client, False, input="more", previous_response_id=second.id)
            assert user_said(up.requests[3]) == ["hello", "and?", "more"]
            create(client, False, input="lost", previous_response_id=alone.id)
            assert up.requests[4]["previous_response_id"] == alone.id  # not known: as it came
        finally:
            running.close()


def test_a_link_holding_a_secret_is_never_stored(tmp_path: Path) -> None:
    secret = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    with upstream(replies=["one", "two", "three"]) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            first = create(client, False, input=f"my token is {secret}")
            second = create(client, False, input="and?", previous_response_id=first.id)
            create(client, False, input="more", previous_response_id=second.id)
            assert "previous_response_id" not in up.requests[2]  # known, from memory
        finally:
            running.close()
    assert first.id not in links(tmp_path / "proxy.db")
    assert secret.encode() not in b"".join(p.read_bytes() for p in tmp_path.glob("proxy.db*"))


def test_an_eviction_ends_the_chains_the_proxy_knew(tmp_path: Path) -> None:
    """Links are stored text: after an eviction the proxy no longer rebuilds a chain (the request
    goes as it came), and the links written before it are erased, every version."""
    with upstream(replies=["one", "two", "three", "four"]) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            first = create(client, False, input=[user("read the log")])
            second = create(client, False, input="and?", previous_response_id=first.id)
            sid = only_session(running.store)
            [chat] = [v.id for v in running.store.find("chat") if sid in v.id][:1] or [None]
            assert chat is not None
            evict(running.store, chat)
            create(client, False, input="more", previous_response_id=second.id)
            assert up.requests[2]["previous_response_id"] == second.id
            assert up.requests[2]["input"] == "more"
        finally:
            running.close()
    with SqliteStore(tmp_path / "proxy.db") as store:
        assert store.history(f"proxy-response:{first.id}") == store.history(f"proxy-response:{second.id}") == []


def test_a_session_closed_as_idle_reads_its_chain_from_the_store(tmp_path: Path) -> None:
    with upstream(replies=["one", "two", "three", "four"]) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            first, second = two_turns(client)
            running.proxy.idle_close_s = 0.1  # the next conversation's request closes this one
            time.sleep(0.3)
            create(client, False, input=[user("another conversation")])
            assert running.proxy.chains._links.keys() == {"resp_3"}  # (that one's start only)
            create(client, False, input="more", previous_response_id=second.id)
            assert "previous_response_id" not in up.requests[3]
            assert user_said(up.requests[3]) == ["hello", "and?", "more"]
        finally:
            running.close()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
def test_a_request_failing_open_goes_whole_and_its_response_is_kept(tmp_path: Path, stream: bool) -> None:
    """An item context_os does not manage (an item reference) makes a request fail open: it goes
    upstream as the whole conversation, unmanaged, through the proxy's plain relay, and its
    response is kept all the same (before the client has its end), so the chain goes on."""
    with upstream(replies=["one", "two", "three"]) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            first = create(client, stream, input="hello")
            reference = {"type": "item_reference", "id": "msg_kept_by_the_provider"}
            second = create(client, stream, input=[reference], previous_response_id=first.id)
            assert running.proxy.counts["failed_open"] == 1
            assert "previous_response_id" not in up.requests[1] and up.requests[1]["input"][-1] == reference
            create(client, stream, input="more", previous_response_id=second.id)
            third = up.requests[2]
            assert "previous_response_id" not in third
            assert user_said(third) == ["hello", "more"]
            assert json.dumps(third["input"]).count('"two"') == 1  # the second response's text, once
        finally:
            running.close()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
@pytest.mark.parametrize("relay", ["managed", "failing open"])
def test_a_response_is_kept_before_the_client_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool, relay: str
) -> None:
    """A client continues a response as soon as it has it, maybe on another connection: the link
    is kept before the answer's end goes to the client, however slow keeping it is (here 0.3 s),
    on both of the proxy's ways of relaying an answer."""
    record = Chains.record

    def slow(self: Chains, *args: Any) -> None:
        time.sleep(0.3)
        record(self, *args)

    monkeypatch.setattr(Chains, "record", slow)
    odd = [{"type": "item_reference", "id": "msg_kept_by_the_provider"}] if relay == "failing open" else []
    with upstream(replies=["one", "two"]) as up:
        running = Running(tmp_path, up)
        try:
            first = create(running.openai(), stream, input=[*odd, user("hello")])
            # (on a connection of its own: the first's is not read again until its request ends)
            create(running.openai(), stream, input="more", previous_response_id=first.id)
            assert "previous_response_id" not in up.requests[1]
            assert running.proxy.counts["failed_open"] == (2 if odd else 0)
        finally:
            running.close()


def test_the_agents_sdk_chaining_responses_is_managed(tmp_path: Path) -> None:
    """The OpenAI Agents SDK, unchanged, in its server-side conversation mode
    (``auto_previous_response_id``: each call of its loop sends only the new tool outputs and the
    response they answer), through the proxy: the provider gets the whole conversation, managed;
    the next run goes on from the last response (``previous_response_id``) in the same session."""
    import asyncio

    from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool

    @function_tool
    def cat(path: str) -> str:
        """Read a file."""
        return f"# {path}\n" + "x = 1\n" * 10_000

    n = 6
    replies: list[str | ToolCall] = [call("cat", path=f"m{k}.py") for k in range(n)] + ["read them all", "ok"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = openai.AsyncOpenAI(base_url=f"{running.url}/v1", api_key="sk-test", max_retries=0)
            model = OpenAIResponsesModel(model="m", openai_client=client)
            agent = Agent(name="reader", instructions=INSTRUCTIONS, model=model, tools=[cat])
            config = RunConfig(tracing_disabled=True)

            async def runs() -> None:
                result = await Runner.run(
                    agent, "read every module", run_config=config, max_turns=20, auto_previous_response_id=True
                )
                assert result.final_output == "read them all"
                again = await Runner.run(
                    agent, "thanks", run_config=config, previous_response_id=result.last_response_id
                )
                assert again.final_output == "ok"
                await client.close()

            asyncio.run(runs())
            assert verified_frames(running.store, only_session(running.store)) == n + 2
        finally:
            running.close()
    assert len(up.requests) == n + 2
    assert all("previous_response_id" not in r for r in up.requests)
    last = up.requests[-1]["input"]
    well_formed(last)
    said = [i.get("content") for i in last if i.get("role") == "user"]
    assert said[0] == "read every module" and said[-1] == "thanks"
    outputs = [str(i["output"]) for i in last if i.get("type") == "function_call_output"]
    assert len(outputs) == n and "collapsed" in outputs[0]  # the oldest collapsed (managed), the newest whole
    assert outputs[-1] == f"# m{n - 1}.py\n" + "x = 1\n" * 10_000
