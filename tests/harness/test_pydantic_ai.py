"""The pydantic-ai integration: a real ``Agent`` driven by a scripted ``FunctionModel``, and
round trips through pydantic-ai's own message types."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, FunctionModel

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.errors import MalformedMessage
from context_os.harness.pairing import pairing_problems
from context_os.harness.pydantic_ai import PYDANTIC_AI_PAIRING, PydanticAIHook
from context_os.store.sqlite import SqliteStore
from tests.helpers import eager_hook, pdf, png, stub_ref

STUB = "[bash output, "


def hook_for(store: SqliteStore, sid: str = "p1", **policy: Any) -> PydanticAIHook:
    return eager_hook(PydanticAIHook, store, sid, "pydantic-ai", **policy)


def returns(messages: list[ModelMessage]) -> dict[str, Any]:
    return {
        p.tool_call_id: p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }


class ScriptedModel:
    """A fake LLM: calls ``bash`` ``steps`` times (then whatever ``extra`` says), then answers.
    Records what it received on every call."""

    def __init__(self, steps: int, extra: list[ToolCallPart] | None = None):
        self.steps = steps
        self.extra = list(extra or [])
        self.received: list[list[ModelMessage]] = []
        self.tools: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.received.append(messages)
        self.tools = [t.name for t in info.function_tools]
        n = len(self.received)
        if n <= self.steps:
            call = ToolCallPart("bash", {"command": f"cat file{n}.py"}, tool_call_id=f"c{n}")
            return ModelResponse(parts=[TextPart(f"step {n}"), call])
        if self.extra:
            return ModelResponse(parts=[self.extra.pop(0)])
        return ModelResponse(parts=[TextPart("done")])


def run(agent: Agent[None, str], prompt: str, **kwargs: Any) -> Any:
    # asyncio.run, not Agent.run_sync: that one leaves an event loop open for the whole process
    return asyncio.run(agent.run(prompt, **kwargs))


def agent_with(hook: PydanticAIHook, model: ScriptedModel) -> Agent[None, str]:
    agent = Agent(FunctionModel(model), system_prompt="You are a coding agent.", capabilities=[hook.capability()])

    @agent.tool_plain
    def bash(command: str) -> str:
        """Run a shell command."""
        return f"$ {command}\n" + "x" * 2000

    return agent


def test_an_agent_run_sends_stubs_for_old_results_and_keeps_its_own_history(db):
    hook = hook_for(db)
    model = ScriptedModel(steps=6)
    result = run(agent_with(hook, model), "fix the bug")
    assert result.output == "done"
    assert {"activate", "deactivate", "pin", "unpin", "bash"} <= set(model.tools)
    last = returns(model.received[-1])
    assert last["c1"].startswith(STUB) and hook.session.resolve(stub_ref(last["c1"]) or "") == "toolcall:p1:c1"
    assert last["c6"].startswith("$ cat file6.py")
    assert not pairing_problems(PYDANTIC_AI_PAIRING, model.received[-1])
    # the run's own history is untouched: the real outputs, no context_os parts
    history = returns(result.all_messages())
    assert history["c1"].startswith("$ cat file1.py")
    assert STUB not in json.dumps(ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json"))
    frames = frame_docs(hook.session.store, hook.session.id)
    assert len(frames) == len(model.received) == 7
    for f in frames:
        assert verify_frame(db, f).ok, f["id"]
    assert hook.last.sync.new == 2 and not hook.last.sync.rewritten  # only what was new, every call
    assert hook.last.tokens < hook.last.tokens_full


def test_the_model_can_activate_a_collapsed_result_through_our_tool(db):
    hook = hook_for(db)
    model = ScriptedModel(steps=5, extra=[ToolCallPart("activate", {"id": "toolcall:p1:c1"}, tool_call_id="act")])
    run(agent_with(hook, model), "fix the bug")
    after = model.received[-1]
    assert json.loads(returns(after)["act"])["status"] == "activated"
    tail = after[-1]
    assert isinstance(tail, ModelRequest)
    assert isinstance(tail.parts[0], ToolReturnPart)  # the activate result, then our part, merged
    assert isinstance(tail.parts[-1], UserPromptPart) and tail.parts[-1].content.startswith("<context_os>")
    assert "$ cat file1.py" in tail.parts[-1].content


def test_a_continued_conversation_is_recognised_as_the_same_history(db):
    hook = hook_for(db)
    first = run(agent_with(hook, ScriptedModel(steps=2)), "fix the bug")
    model = ScriptedModel(steps=0)
    run(agent_with(hook, model), "now the tests", message_history=first.all_messages())
    # only the first run's final answer (never sent to a model) and the new prompt are new
    assert not hook.last.sync.rewritten and hook.last.sync.new == 2
    assert model.received[-1][-1].parts[-1].content == "now the tests"


def dump(message: ModelMessage) -> Any:
    return ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]


def history() -> list[ModelMessage]:
    image = BinaryContent(data=b"\x89PNG\r\n", media_type="image/png")
    return [
        ModelRequest(
            parts=[SystemPromptPart("You are a coding agent."), UserPromptPart(["look at this", image])],
            instructions="Be brief.",
        ),
        ModelResponse(
            parts=[
                ThinkingPart("two files to read", signature="sig-1", provider_name="anthropic"),
                TextPart("Reading both."),
                ToolCallPart("read", {"path": "a.py"}, tool_call_id="r1"),
                ToolCallPart("read", '{"path": "b.py"}', tool_call_id="r2"),
            ],
            model_name="scripted",
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("read", "print('a')\n" * 50, tool_call_id="r1"),
                ToolReturnPart("read", {"lines": 2, "text": "b"}, tool_call_id="r2"),
                UserPromptPart("also check c.py"),
            ]
        ),
    ]


def test_pydantic_ai_messages_round_trip(db):
    hook = hook_for(db)
    msgs = history()
    out = hook.transform_context(msgs)
    again = ModelMessagesTypeAdapter.validate_python(ModelMessagesTypeAdapter.dump_python(out, mode="json"))
    assert again == out
    assert [type(m) for m in out] == [ModelRequest, ModelResponse, ModelRequest]
    assert dump(out[0]) == dump(msgs[0])  # system prompt, image and instructions as given
    assert dump(out[1]) == dump(msgs[1])  # thinking signature, text, both calls' args as given
    assert [type(p) for p in out[2].parts] == [ToolReturnPart, ToolReturnPart, UserPromptPart]
    r1, r2, tail = out[2].parts
    assert (r1.tool_name, r1.tool_call_id, r1.content) == ("read", "r1", "print('a')\n" * 50)
    assert r2.tool_name == "read" and r2.content == {"lines": 2, "text": "b"}  # structured, as given
    assert tail.content == "also check c.py"
    assert [type(e) for e in hook.session.view.entries] and [e["role"] for e in hook.session.view.entries] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
    ]


def test_results_collapse_and_calls_keep_pairing(db):
    hook = hook_for(db, collapse_after_turns=1)
    msgs = history()
    hook.transform_context(msgs)
    msgs += [ModelResponse(parts=[TextPart("ok")]), ModelRequest(parts=[UserPromptPart("next")])]
    out = hook.transform_context(msgs)
    assert stub_ref(returns(out)["r1"]) and stub_ref(returns(out)["r2"])
    assert not pairing_problems(PYDANTIC_AI_PAIRING, out)
    assert isinstance(out[-1], ModelRequest) and out[-1].parts[-1].content == "next"


def test_a_call_without_a_return_gets_one(db):
    hook = hook_for(db)
    msgs = history()[:2]
    out = hook.transform_context(msgs)
    assert isinstance(out[-1], ModelRequest)
    assert {p.tool_call_id: p.tool_name for p in out[-1].parts} == {"r1": "read", "r2": "read"}
    assert not pairing_problems(PYDANTIC_AI_PAIRING, out)


def test_a_request_of_nothing_but_returns_keeps_its_instructions_and_fields(db):
    """A loop that calls the model directly puts its instructions on every request, as an agent
    does, and the model reads them from the newest requests (``Model.request`` without
    instruction parts): a request of tool returns goes out with its own, not with none."""
    hook = hook_for(db)
    seen: list[str | None] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.instructions)
        return ModelResponse(parts=[ToolCallPart("bash", {"command": "ls"}, tool_call_id=f"c{len(seen)}")])

    model = FunctionModel(answer)
    msgs: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("fix it")], instructions="step 0")]
    for step in range(1, 7):
        out = hook.transform_context(msgs)
        response = asyncio.run(model.request(out, None, ModelRequestParameters()))
        call = response.parts[0]
        assert isinstance(call, ToolCallPart)
        returned = ToolReturnPart("bash", "x" * 3000, tool_call_id=call.tool_call_id)
        msgs += [response, ModelRequest(parts=[returned], instructions=f"step {step}", conversation_id="conv")]
    out = hook.transform_context(msgs)
    assert seen == [f"step {n}" for n in range(6)]
    last = out[-1]
    assert isinstance(last, ModelRequest) and isinstance(last.parts[0], ToolReturnPart)
    assert (last.instructions, last.conversation_id, last.timestamp) == ("step 6", "conv", msgs[-1].timestamp)
    collapsed = out[2]  # the first returns, collapsed to a stub: the request's fields all the same
    assert isinstance(collapsed, ModelRequest) and returns([collapsed])["c1"].startswith(STUB)
    assert collapsed.instructions == "step 1"


def test_async_processor(db):
    hook = hook_for(db)
    out = asyncio.run(hook.atransform_context(history()))
    assert returns(out)["r1"].startswith("print('a')")


def test_a_message_that_is_not_a_model_message_is_refused(db):
    hook = hook_for(db)
    hook.transform_context(history())
    before = db.latest_tx()
    with pytest.raises(MalformedMessage) as err:
        hook.transform_context([*history(), {"role": "user", "content": "hi"}])  # type: ignore[list-item]
    assert err.value.index == 3
    assert db.latest_tx() == before


def test_a_request_whose_part_is_no_part_is_refused_and_the_session_goes_on(db):
    # refused (MalformedMessage); the next list of the same length, the last request good, was
    # compared with it as a run made again, and its form read a part that was None: AttributeError
    # (a deeper fuzz run, CTXOS_FUZZ_SCALE=3)
    hook = hook_for(db)
    good = [*history(), ModelRequest(parts=[UserPromptPart("go on")])]
    with pytest.raises(MalformedMessage):
        hook.transform_context([*history(), ModelRequest(parts=[None])])  # type: ignore[list-item]
    assert hook.transform_context(good)
    with pytest.raises(MalformedMessage):  # a try again of a refused request: refused again
        hook.transform_context([*history(), ModelRequest(parts=[None])])  # type: ignore[list-item]
    assert hook.transform_context(good)


def test_tool_definitions_are_pydantic_ai_tool_definitions(db):
    hook = hook_for(db)
    assert [d.name for d in hook.tools] == ["activate", "deactivate", "pin", "unpin", "lines", "history"]
    assert hook.tools[0].parameters_json_schema["required"] == ["id"]


def test_only_the_newest_responses_keep_their_thinking_parts(db):
    """pydantic-ai keeps a model's ThinkingParts in its responses and sends them back: the newest
    two responses keep them, older ones keep their text and calls; every frame verifies."""
    hook = hook_for(db, keep_thinking_turns=2, history_max_tokens=None)
    thought = "weighing the options for the parser " * 40
    msgs: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("Fix the parser.")])]
    for n in range(6):
        parts = [ThinkingPart(f"thought {n}: {thought}", signature=f"sig{n}", provider_name="anthropic")]
        parts += [TextPart(f"Reading part {n}."), ToolCallPart("bash", {"command": f"cat part{n}"}, f"c{n}")]
        msgs += [ModelResponse(parts=parts), ModelRequest(parts=[ToolReturnPart("bash", f"part {n}", f"c{n}")])]
        out = hook.transform_context(msgs)
    responses = [m for m in out if isinstance(m, ModelResponse)]
    kinds = [[type(p).__name__ for p in m.parts] for m in responses]
    assert kinds[:4] == [["TextPart", "ToolCallPart"]] * 4
    assert kinds[4:] == [["ThinkingPart", "TextPart", "ToolCallPart"]] * 2
    assert dump(responses[-1]) == dump(msgs[-2])  # signature and all, as given
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "p1"))
    whole = hook_for(db, "p2", keep_thinking_turns=None)
    everything = whole.transform_context(msgs)
    assert all(isinstance(m.parts[0], ThinkingPart) for m in everything if isinstance(m, ModelResponse))


def test_a_history_processor_listed_after_the_capability_leaves_the_run_history_real(db):
    # pydantic-ai's own history processors (the ProcessHistory capability) write what they
    # return back into the run's history; the assembly must never be what they get, wherever
    # the user lists them, or the stubs would come back as the harness's history
    seen: list[int] = []

    def keep_all(messages: list[ModelMessage]) -> list[ModelMessage]:
        seen.append(len(messages))
        return list(messages)

    hook = hook_for(db)
    model = ScriptedModel(steps=5)
    agent = Agent(FunctionModel(model), capabilities=[hook.capability(), ProcessHistory(keep_all)])

    @agent.tool_plain
    def bash(command: str) -> str:
        """Run a shell command."""
        return f"$ {command}\n" + "x" * 2000

    result = run(agent, "fix the bug")
    assert result.output == "done" and len(seen) == 6
    assert returns(model.received[-1])["c1"].startswith(STUB)
    assert returns(result.all_messages())["c1"].startswith("$ cat file1.py")
    assert STUB not in json.dumps(ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json"))
    assert not hook.last.sync.rewritten


def test_a_fallback_to_another_model_gets_the_same_context_without_a_new_turn(db):
    # each attempt at a request (a fallback model, a retried request) is assembled for the model
    # that serves it: the same history again is the same context, and no new frame
    def failing(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(529, "first", body="overloaded")

    hook = hook_for(db)
    model = ScriptedModel(steps=5)
    agent = Agent(FallbackModel(FunctionModel(failing), FunctionModel(model)), capabilities=[hook.capability()])

    @agent.tool_plain
    def bash(command: str) -> str:
        """Run a shell command."""
        return f"$ {command}\n" + "x" * 2000

    assert run(agent, "fix the bug").output == "done"
    assert returns(model.received[-1])["c1"].startswith(STUB)
    frames = frame_docs(hook.session.store, hook.session.id)
    assert len(frames) == len(model.received) == 6
    assert all(verify_frame(db, f).ok for f in frames)


def test_an_image_a_tool_returns_counts_while_it_shows(db):
    hook = hook_for(db)
    shot = BinaryContent(data=png(1000, 600) + b"\0" * 5000, media_type="image/png")
    msgs: list[ModelMessage] = [ModelRequest.user_text_prompt("go")]
    for k in range(4):
        msgs.append(ModelResponse(parts=[ToolCallPart("screenshot", {}, tool_call_id=f"s{k}")]))
        msgs.append(ModelRequest(parts=[ToolReturnPart("screenshot", shot, tool_call_id=f"s{k}")]))
        out = hook.transform_context(msgs)
    assert hook.session.view.objects["toolcall:p1:s0"].tokens == 800
    assert returns(out)["s0"].startswith("[screenshot output, 800 tokens, collapsed")
    assert returns(out)["s3"].data == shot.data
    assert hook.last.tokens_full > 4 * 800 > hook.last.tokens > 800


def test_a_document_a_user_sends_counts_by_its_pages(db):
    hook = hook_for(db)
    document = BinaryContent(data=pdf(2), media_type="application/pdf")
    hook.transform_context([ModelRequest(parts=[UserPromptPart(["summarise", document])])])
    assert hook.last.tokens_full == hook.last.tokens == 3 + 2 * 2300


def test_one_agent_serves_several_sessions_with_the_capability_given_per_run(db):
    # a hook is one session: an agent that serves several conversations takes the capability of
    # each conversation's hook with each of its runs
    hooks = {sid: hook_for(db, sid) for sid in ("alice", "bob")}
    model = ScriptedModel(steps=0)
    agent = Agent(FunctionModel(model))

    async def both(prompt: str, before: dict[str, Any]) -> dict[str, Any]:
        runs = [
            agent.run(f"{prompt} {sid}", message_history=before.get(sid), capabilities=[hook.capability()])
            for sid, hook in hooks.items()
        ]
        return dict(zip(hooks, [r.all_messages() for r in await asyncio.gather(*runs)], strict=True))

    first = asyncio.run(both("hello", {}))
    asyncio.run(both("again", first))
    for sid, hook in hooks.items():
        assert not hook.last.sync.rewritten and hook.last.sync.new == 2
        said = [e["text"] for e in hook.session.view.entries if e["role"] == "user"]
        assert said == [f"hello {sid}", f"again {sid}"]


def test_a_structured_tool_output_reads_the_same_live_and_resumed(tmp_path):
    # a dict a tool returns reaches the model as JSON text: a session resumed in another process
    # (rebuilt from the store) must send the same text, or the prompt cache misses from there on
    msgs: list[ModelMessage] = [
        ModelRequest.user_text_prompt("status?"),
        ModelResponse(parts=[ToolCallPart("status", {}, tool_call_id="s1"), ToolCallPart("check", {}, "k1")]),
        ModelRequest(
            parts=[
                ToolReturnPart("status", {"zeta": 1, "alpha": {"y": 2, "b": [3]}}, tool_call_id="s1"),
                ToolReturnPart(
                    "check", [{"type": "missing", "loc": ["n"], "msg": "Field required"}], "k1", outcome="retried"
                ),
            ]
        ),
    ]

    def sent(store: SqliteStore) -> list[str]:
        out = PydanticAIHook(Session.open(store, "p1", harness="pydantic-ai")).transform_context(msgs)
        return [p.model_response_str() for p in out[-1].parts if isinstance(p, ToolReturnPart)]

    with SqliteStore(tmp_path / "s.db") as store:
        live = sent(store)
    with SqliteStore(tmp_path / "s.db") as store:
        assert sent(store) == live


def test_an_older_pydantic_ai_is_refused_naming_what_to_install():
    # 2.60-2.63 import and then hand a ProcessHistory listed after the capability the assembly
    # (test_a_history_processor_listed_after_the_capability_leaves_the_run_history_real fails
    # there); before 2.60 the adapter's imports fail naming a pydantic-ai internal
    import pydantic_ai

    from context_os.harness import _pydantic_ai_version as version

    for old in ("2.63.0", "2.0.0", "1.107.10", "2.63.0rc1", "unknown"):
        with pytest.raises(
            ImportError,
            match=r"needs pydantic-ai 2\.64 or later \(installed: .*pip install 'pydantic-ai-slim>=2\.64,<3'",
        ):
            version.check(old)
    for new in ("2.64.0", "2.64.1", "2.100.0", "3.0.0", pydantic_ai.__version__):
        version.check(new)


@pytest.mark.parametrize("with_history", [False, True], ids=["first-run", "later-run"])
def test_a_run_retried_after_it_failed_is_the_same_turn(db, with_history):
    # a run whose model call failed (a 500 past the SDK's own retries) is run again by its caller
    # with the same prompt and history: pydantic-ai makes the prompt's request anew (another
    # timestamp, run id, and without a history another conversation id); the model is sent the
    # same context, and no turn is added (a turn per try would age the results)
    fail = [True]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if (len(messages) > 1 or not with_history) and fail[0]:
            fail[0] = False
            raise ModelHTTPError(500, "m", body="boom")
        return ModelResponse(parts=[TextPart("ok")])

    hook = hook_for(db)
    agent = Agent(FunctionModel(model), capabilities=[hook.capability()])
    history = run(agent, "hello").all_messages() if with_history else None
    turn = hook.session.view.turn
    with pytest.raises(ModelHTTPError):
        run(agent, "fix the bug", message_history=history)
    sent = hook.last
    assert run(agent, "fix the bug", message_history=history).output == "ok"
    assert hook.session.view.turn == turn + 1
    assert hook.last is sent and not hook.last.sync.rewritten
    frames = frame_docs(db, hook.session.id)
    assert len(frames) == turn + 1 and all(verify_frame(db, f).ok for f in frames)
    # a prompt that is another is another turn
    assert run(agent, "and the tests", message_history=history).output == "ok"
    assert hook.session.view.turn == turn + 2
