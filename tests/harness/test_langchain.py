"""The LangChain integration: a real ``create_agent`` agent (LangGraph underneath) driven by a
scripted chat model, and round trips through langchain-core's own message types."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import dynamic_prompt
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.errors import MalformedMessage
from context_os.harness.langchain import LANGCHAIN_PAIRING, LangChainAdapter, LangChainHook
from context_os.harness.pairing import pairing_problems
from context_os.harness.registry import harness
from context_os.store.sqlite import SqliteStore
from context_os.tokens import value_chars
from tests.helpers import eager_hook, hashed_per_call, png, stub_ref

STUB = "[bash output, "


def hook_for(store: SqliteStore, sid: str = "lc1", **policy: Any) -> LangChainHook:
    return eager_hook(LangChainHook, store, sid, "langchain", **policy)


class ScriptedModel(BaseChatModel):
    """A fake LLM: calls ``bash`` ``steps`` times (then the calls of ``extra``, one reply each),
    then answers. Records what it received on every call, and the tools it was bound to."""

    steps: int = 6
    extra: list[list[dict[str, Any]]] = []
    received: list[list[BaseMessage]] = []
    tool_names: list[str] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        self.tool_names = [convert_to_openai_tool(t)["function"]["name"] for t in tools]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.received.append(list(messages))
        n = len(self.received)
        if n <= self.steps:
            call = {"name": "bash", "args": {"command": f"cat file{n}.py"}, "id": f"c{n}"}
            reply = AIMessage(f"step {n}", tool_calls=[call])
        elif self.extra:
            reply = AIMessage("", tool_calls=self.extra.pop(0))
        else:
            reply = AIMessage("done")
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def bash(command: str) -> str:
    """Run a shell command."""
    return f"$ {command}\n" + "x" * 2000


def agent_with(hook: LangChainHook, model: ScriptedModel) -> Any:
    return create_agent(model, [bash], system_prompt="You are a coding agent.", middleware=[hook.middleware()])


def results(messages: list[BaseMessage]) -> dict[str, Any]:
    return {m.tool_call_id: m.content for m in messages if isinstance(m, ToolMessage)}


def test_an_agent_run_sends_stubs_for_old_results_and_keeps_its_own_state(db):
    hook = hook_for(db)
    model = ScriptedModel(steps=6)
    out = agent_with(hook, model).invoke({"messages": [{"role": "user", "content": "fix the bug"}]})
    assert out["messages"][-1].content == "done"
    assert {"activate", "deactivate", "pin", "unpin", "bash"} <= set(model.tool_names)
    sent = model.received[-1]
    assert isinstance(sent[0], SystemMessage) and sent[0].content == "You are a coding agent."
    last = results(sent)
    assert last["c1"].startswith(STUB) and hook.session.resolve(stub_ref(last["c1"]) or "") == "toolcall:lc1:c1"
    assert last["c6"].startswith("$ cat file6.py")
    assert not pairing_problems(LANGCHAIN_PAIRING, sent)
    # the agent's own state is untouched: the real outputs, no context_os parts
    state = results(out["messages"])
    assert state["c1"].startswith("$ cat file1.py")
    assert STUB not in json.dumps(messages_to_dict(out["messages"]))
    frames = frame_docs(hook.session.store, hook.session.id)
    assert len(frames) == len(model.received) == 7
    for f in frames:
        assert verify_frame(db, f).ok, f["id"]
    # only what was new, every call: the agent's messages and its system prompt, made anew for
    # each request, are read as the same objects
    assert hook.last.sync.new == 2 and not hook.last.sync.rewritten
    assert hook.last.tokens < hook.last.tokens_full


def test_a_system_prompt_made_anew_for_each_request_is_read_once(db, monkeypatch):
    """A dynamic prompt makes a new ``SystemMessage`` for every request: read as the one before,
    a call hashes what came since, not the whole history again."""
    hook = hook_for(db)

    @dynamic_prompt
    def prompt(request: Any) -> str:
        return "You are a coding agent."

    model = ScriptedModel(steps=10)
    agent = create_agent(model, [bash], middleware=[prompt, hook.middleware()])
    with hashed_per_call(hook, monkeypatch) as counts:
        agent.invoke({"messages": [{"role": "user", "content": "fix the bug"}]})
    assert len(counts) == 11 and counts[-1] == counts[3] <= 5, counts
    assert model.received[-1][0].content == "You are a coding agent."


def test_a_thread_continued_from_a_checkpointer_is_the_same_history(db, monkeypatch):
    hook = hook_for(db)
    syncs = []
    transform = hook.transform_context
    monkeypatch.setattr(hook, "transform_context", lambda msgs: [transform(msgs), syncs.append(hook.last.sync)][0])
    model = ScriptedModel(steps=3)
    agent = create_agent(
        model,
        [bash],
        system_prompt="You are a coding agent.",
        middleware=[hook.middleware()],
        checkpointer=InMemorySaver(),
    )
    thread = {"configurable": {"thread_id": "t1"}}
    agent.invoke({"messages": [{"role": "user", "content": "fix the bug"}]}, thread)
    turns = hook.session.view.turn
    model.steps = 5
    agent.invoke({"messages": [{"role": "user", "content": "now the tests"}]}, thread)
    # at its first call, the first run's answer and the new prompt are new; nothing was rewritten
    assert hook.session.view.turn - turns == 2 and len(syncs) == 6
    assert [(x.new, x.rewritten) for x in syncs[turns:]] == [(2, False), (2, False)]
    sent = model.received[turns]
    assert sent[-1].content == "now the tests" and results(sent)["c1"].startswith(STUB)
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "lc1"))


def test_an_async_agent_run_assembles_every_request(db):
    hook = hook_for(db)
    model = ScriptedModel(steps=4)
    out = asyncio.run(agent_with(hook, model).ainvoke({"messages": [{"role": "user", "content": "fix it"}]}))
    assert out["messages"][-1].content == "done"
    assert results(model.received[-1])["c1"].startswith(STUB)
    assert len(frame_docs(db, "lc1")) == 5


def test_the_model_can_activate_a_collapsed_result_through_our_tool(db):
    hook = hook_for(db)
    activate = {"name": "activate", "args": {"id": "toolcall:lc1:c1"}, "id": "act"}
    model = ScriptedModel(steps=5, extra=[[activate]])
    agent_with(hook, model).invoke({"messages": [{"role": "user", "content": "fix the bug"}]})
    after = model.received[-1]
    assert json.loads(results(after)["act"])["status"] == "activated"
    tail = after[-1]
    assert isinstance(tail, HumanMessage) and tail.content.startswith("<context_os>")
    assert "$ cat file1.py" in tail.content


def history() -> list[BaseMessage]:
    image = base64.b64encode(png(64, 64)).decode()
    thinking = {"type": "thinking", "thinking": "two files to read", "signature": "sig-1"}
    use = {"type": "tool_use", "id": "r1", "name": "read", "input": {"path": "a.py"}}
    return [
        SystemMessage("You are a coding agent.", id="s0"),
        ChatMessage("Prefer small diffs.", role="developer"),
        HumanMessage(
            [{"type": "text", "text": "look at this"}, {"type": "image", "base64": image, "mime_type": "image/png"}],
            id="h1",
        ),
        AIMessage(
            [thinking, {"type": "text", "text": "Reading both."}, use],
            tool_calls=[
                {"name": "read", "args": {"path": "a.py"}, "id": "r1"},
                {"name": "read", "args": {"path": "b.py", "limit": 2}, "id": "r2"},
            ],
            response_metadata={"model_name": "scripted", "stop_reason": "tool_use"},
            usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
            id="a1",
        ),
        ToolMessage("print('a')\n" * 50, tool_call_id="r1", name="read", id="t1", artifact={"bytes": 550}),
        ToolMessage([{"type": "text", "text": "no such file"}], tool_call_id="r2", name="read", status="error"),
        HumanMessage("also check c.py", id="h2"),
    ]


def without_artifact(m: BaseMessage) -> BaseMessage:
    return m.model_copy(update={"artifact": None}) if isinstance(m, ToolMessage) else m


def test_langchain_messages_round_trip(db):
    hook = hook_for(db)
    msgs = history()
    out = hook.transform_context(msgs)
    # every message as given, of its class, with its fields; a tool message without its artifact,
    # which no model is sent
    assert out == [without_artifact(m) for m in msgs]
    assert [type(m) for m in out] == [type(m) for m in msgs]
    assert out[4].artifact is None and out[5].status == "error"
    view = hook.session.view
    assert [e["role"] for e in view.entries] == ["system", "system", "user", "assistant", "tool", "tool", "user"]
    assert view.objects[view.entries[5]["object"]].meta.get("is_error") is True
    # the thinking is counted, and so is the image
    assert view.entries[3].get("extra_chars") == len("two files to read")
    assert view.entries[2].get("extra_chars")
    # a history saved as JSON and loaded again (another process) is the same history
    again = hook.transform_context(messages_from_dict(messages_to_dict(msgs)))
    assert again == out and len(view.entries) == 7 and view.turn == 1  # nothing new: the same call again
    msgs.append(AIMessage("Checking c.py."))
    hook.transform_context([*messages_from_dict(messages_to_dict(msgs)), HumanMessage("go on")])
    assert hook.last.sync.new == 2 and not hook.last.sync.rewritten and len(view.entries) == 9


def test_a_collapsed_call_shows_its_long_arguments_elided_in_its_calls_and_its_tool_use_blocks(db):
    hook = hook_for(db, elide_arguments_over_chars=50, collapse_after_turns=1)
    text = "y" * 400
    use = {"type": "tool_use", "id": "w1", "name": "write", "input": {"path": "a.py", "content": text}}
    msgs: list[BaseMessage] = [
        HumanMessage("write it"),
        AIMessage([use], tool_calls=[{"name": "write", "args": {"path": "a.py", "content": text}, "id": "w1"}]),
        ToolMessage("x" * 3000, tool_call_id="w1", name="write"),
    ]
    for n in range(3):
        msgs += [HumanMessage(f"go on {n}"), AIMessage(f"on it {n}")]
        out = hook.transform_context([*msgs, HumanMessage("next")])
    call = next(m for m in out if isinstance(m, AIMessage) and m.tool_calls)
    assert call.tool_calls[0]["args"]["path"] == "a.py"
    assert call.tool_calls[0]["args"]["content"].startswith("[")  # elided: a note in its place
    assert call.content[0]["input"] == call.tool_calls[0]["args"]
    assert results(out)["w1"].startswith("[write output, ")


def test_reasoning_is_left_off_past_the_thinking_horizon(db):
    hook = hook_for(db, keep_thinking_turns=1)
    msgs: list[BaseMessage] = [HumanMessage("start")]
    for n in range(3):
        block = {"type": "thinking", "thinking": f"thought {n} " * 20, "signature": f"s{n}"}
        kwargs = {"reasoning_content": f"raw {n}"}
        msgs += [
            AIMessage([block, {"type": "text", "text": f"answer {n}"}], additional_kwargs=kwargs),
            HumanMessage(f"q{n}"),
        ]
        out = hook.transform_context(msgs)
    answers = [m for m in out if isinstance(m, AIMessage)]
    assert [[b["type"] for b in m.content] for m in answers] == [["text"], ["text"], ["thinking", "text"]]
    assert [m.additional_kwargs for m in answers] == [{}, {}, {"reasoning_content": "raw 2"}]


def test_a_chunk_in_the_history_is_sent_as_its_message(db):
    hook = hook_for(db)
    chunk = AIMessageChunk("partial answer", tool_call_chunks=[], id="k1")
    out = hook.transform_context([HumanMessage("hi"), chunk, HumanMessage("and?")])
    assert type(out[1]) is AIMessage and out[1].content == "partial answer" and out[1].id == "k1"


@pytest.mark.parametrize(
    ("message", "field", "words"),
    [
        (RemoveMessage(id="x"), "type", "not a message a model is sent"),
        (AIMessage("", tool_calls=[{"name": "read", "args": {}, "id": None}]), "tool_calls[0]", "needs an id"),
        (ToolMessage("out", tool_call_id=""), "tool_call_id", "needs a tool_call_id"),
        (HumanMessage([{"type": "text", "text": 3}]), "content[0].text", "without text"),
    ],
)
def test_a_message_no_model_takes_is_refused_naming_it(db, message, field, words):
    with pytest.raises(MalformedMessage) as e:
        hook_for(db).transform_context([HumanMessage("hi"), message])
    assert e.value.index == 1 and e.value.field == field and words in str(e.value)


def test_the_registry_reads_and_writes_langchain_messages_as_json():
    h = harness("langchain")
    msgs = history()
    wire = json.loads(json.dumps(h.encode(msgs)))
    assert h.decode(wire) == [without_artifact(m) for m in msgs]  # (an artifact is no model's input)
    with pytest.raises(MalformedMessage) as e:
        h.decode([{"type": "human", "data": {"content": "hi"}}, {"type": "nonsense", "data": {}}])
    assert e.value.index == 1


def test_secrets_in_langchain_messages_never_reach_the_store(tmp_path: Path) -> None:
    from tests.context.test_session_redaction import assert_no_secret, stored_text
    from tests.test_redact import AWS_KEY_ID, GITHUB, JWT

    msgs: list[BaseMessage] = [
        HumanMessage([{"type": "text", "text": f"deploy with {GITHUB}"}]),
        AIMessage(
            [{"type": "thinking", "thinking": f"I will send {JWT}", "signature": "sig"}],
            tool_calls=[{"name": "bash", "args": {"command": f"curl -H 'Authorization: Bearer {JWT}' x"}, "id": "c1"}],
            additional_kwargs={"reasoning_content": f"the key is {AWS_KEY_ID}"},
        ),
        ToolMessage([{"type": "text", "text": f"AWS_ACCESS_KEY_ID={AWS_KEY_ID}"}], tool_call_id="c1", name="bash"),
    ]
    db = tmp_path / "s.db"
    with SqliteStore(db) as store:
        hook = LangChainHook(Session.open(store, "lc1", harness="langchain"))
        out = hook.transform_context(msgs)
        assert_no_secret(json.dumps(messages_to_dict(out)))
        assert "[REDACTED:github-token]" in json.dumps(messages_to_dict(out))
        assert_no_secret(stored_text(store, db))
        for f in frame_docs(store, "lc1"):
            assert verify_frame(store, f).ok


def test_the_agent_reads_and_edits_through_our_file_tools(tmp_path: Path) -> None:
    from context_os.files import FileTools, Workspace

    (tmp_path / "app.py").write_text("def f7():\n    return 7\n")
    ws = Workspace(tmp_path)
    with SqliteStore(tmp_path / "s.db") as store:
        session = Session.open(store, "lcf", harness="langchain", workspace=str(tmp_path), redact=ws.redact)
        hook = LangChainHook(session, files=FileTools(session, ws))
        read = {"name": "read", "args": {"path": "app.py"}, "id": "r1"}
        edit = {
            "name": "edit",
            "args": {"path": "app.py", "oldText": "return 7", "newText": "return 'seven'"},
            "id": "e1",
        }
        model = ScriptedModel(steps=0, extra=[[read], [edit]])
        out = agent_with(hook, model).invoke({"messages": [{"role": "user", "content": "fix f7"}]})
        assert {"read", "write", "edit", "ls", "find", "grep"} <= set(model.tool_names)
        assert (tmp_path / "app.py").read_text() == "def f7():\n    return 'seven'\n"
        assert not any(m.status == "error" for m in out["messages"] if isinstance(m, ToolMessage))
        sent = json.dumps(messages_to_dict(model.received[-1]))
        assert "return 'seven'" in sent and 'path=\\"app.py\\"' in sent  # the file, as it is now
        (f,) = store.find("file", {"path": "app.py"})
        assert f.doc["content"] == "def f7():\n    return 'seven'\n"
        for frame in frame_docs(store, "lcf"):
            assert verify_frame(store, frame).ok


PAGES = [{"type": "web_search_result", "url": f"https://example.org/{k}", "encrypted_content": "e" * 3_000}
         for k in range(3)]  # fmt: skip


@pytest.mark.parametrize(
    "blocks",
    [
        [  # as langchain-anthropic keeps Anthropic's server tools' blocks
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "context os"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": PAGES},
        ],
        [  # langchain-core's standard blocks of a tool the provider ran
            {"type": "server_tool_call", "id": "ws_1", "name": "web_search", "args": {"query": "context os"}},
            {"type": "server_tool_result", "tool_call_id": "ws_1", "status": "success", "output": PAGES},
        ],
    ],
)
def test_the_providers_own_tools_blocks_count(blocks: list[dict[str, Any]]) -> None:
    """An assistant message's blocks of a tool the provider ran (a web search and its pages) go
    to the model at every later call: counted apart (``block_chars``), where they counted nothing."""
    message = AIMessage(content=[*blocks, {"type": "text", "text": "Here is what I found."}])
    m = LangChainAdapter().translate(message, 0)
    assert isinstance(m, dict)
    assert m["text"] == "Here is what I found."
    assert m["block_chars"] == sum(value_chars(b) for b in blocks) > 6_000
