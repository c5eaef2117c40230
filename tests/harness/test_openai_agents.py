"""The OpenAI Agents SDK integration: a real ``Runner`` run of an ``Agent`` whose model is
scripted, with context_os as the run's model input filter."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Agent, ModelResponse, RunConfig, Runner, Usage, function_tool
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from context_os.context.frames import frame_docs, verify_frame
from context_os.harness.openai import OpenAIHook
from context_os.harness.openai_agents import agent_tools, input_filter
from tests.helpers import eager_hook, hashed_per_call, stub_ref

STUB = "[bash output, "


class ScriptedModel(Model):
    """A fake LLM: calls ``bash`` ``steps`` times (then the calls of ``extra``), then answers.
    Records the input items and tools of every call."""

    def __init__(self, steps: int, extra: list[tuple[str, dict[str, Any]]] | None = None, ids: bool = False) -> None:
        """``ids``: each response has an id (``resp_N``), which a run chaining responses needs."""
        self.steps, self.extra, self.ids = steps, list(extra or []), ids
        self.received: list[list[Any]] = []
        self.previous: list[str | None] = []
        self.instructions: list[str | None] = []
        self.tools: list[str] = []

    async def get_response(  # type: ignore[override]
        self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.received.append(list(input) if isinstance(input, list) else [{"role": "user", "content": input}])
        self.previous.append(kwargs.get("previous_response_id"))
        self.instructions.append(system_instructions)
        self.tools = [t.name for t in tools]
        n = len(self.received)
        if n <= self.steps or self.extra:
            name, arguments = ("bash", {"command": f"cat file{n}.py"}) if n <= self.steps else self.extra.pop(0)
            call = ResponseFunctionToolCall(
                type="function_call", call_id=f"c{n}", name=name, arguments=json.dumps(arguments), id=f"fc{n}"
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=f"resp_{n}" if self.ids else None)
        text = ResponseOutputText(type="output_text", text="done", annotations=[])
        answer = ResponseOutputMessage(type="message", id=f"m{n}", role="assistant", status="completed", content=[text])
        return ModelResponse(output=[answer], usage=Usage(), response_id=f"resp_{n}" if self.ids else None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
def bash(command: str) -> str:
    """Run a shell command."""
    return f"$ {command}\n" + "x" * 2000


def run(hook: OpenAIHook, model: ScriptedModel, prompt: str = "fix the bug") -> Any:
    agent = Agent(name="coder", instructions="You are a coding agent.", model=model, tools=[bash, *agent_tools(hook)])
    config = RunConfig(call_model_input_filter=input_filter(hook), tracing_disabled=True)
    return asyncio.run(Runner.run(agent, prompt, run_config=config, max_turns=20))


def outputs(items: list[Any]) -> dict[str, str]:
    return {i["call_id"]: i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"}


def test_a_run_sends_stubs_for_old_outputs_and_keeps_its_own_items(db):
    hook = eager_hook(OpenAIHook, db, "ag1", "openai")
    model = ScriptedModel(steps=6)
    result = run(hook, model)
    assert result.final_output == "done"
    assert {"activate", "deactivate", "pin", "unpin", "bash"} <= set(model.tools)
    assert model.instructions[-1] == "You are a coding agent."
    last = outputs(model.received[-1])
    assert last["c1"].startswith(STUB) and hook.session.resolve(stub_ref(last["c1"]) or "") == "toolcall:ag1:c1"
    assert last["c6"].startswith("$ cat file6.py")
    # the run's own items are untouched: the real outputs
    assert outputs(result.to_input_list())["c1"].startswith("$ cat file1.py")
    frames = frame_docs(db, "ag1")
    assert len(frames) == len(model.received) == 7
    assert all(verify_frame(db, f).ok for f in frames)
    assert hook.last.sync.new == 2 and not hook.last.sync.rewritten
    assert hook.last.tokens < hook.last.tokens_full


def test_the_model_activates_a_collapsed_output_through_our_tool(db):
    hook = eager_hook(OpenAIHook, db, "ag1", "openai")
    model = ScriptedModel(steps=5, extra=[("activate", {"id": "toolcall:ag1:c1"})])
    run(hook, model)
    after = model.received[-1]
    assert json.loads(outputs(after)["c6"])["status"] == "activated"
    tail = after[-1]
    assert tail["role"] == "user" and "$ cat file1.py" in json.dumps(tail)


def test_a_run_continued_from_its_items_is_the_same_history(db):
    hook = eager_hook(OpenAIHook, db, "ag1", "openai")
    first = run(hook, ScriptedModel(steps=2))
    model = ScriptedModel(steps=0)
    agent = Agent(name="coder", instructions="You are a coding agent.", model=model, tools=[bash])
    config = RunConfig(call_model_input_filter=input_filter(hook), tracing_disabled=True)
    history = [*first.to_input_list(), {"role": "user", "content": "now the tests"}]
    asyncio.run(Runner.run(agent, history, run_config=config))
    # only the first run's answer and the new prompt are new
    assert hook.last.sync.new == 2 and not hook.last.sync.rewritten
    assert model.received[-1][-1]["content"] == "now the tests"


def test_a_call_reads_what_came_since_though_the_sdk_copies_every_item(db, monkeypatch):
    hook = eager_hook(OpenAIHook, db, "ag1", "openai")
    with hashed_per_call(hook, monkeypatch) as counts:
        run(hook, ScriptedModel(steps=10))
    # a flat few per call, however long the history: the new items, and the sampled ones the hook
    # does not find remembered unchanged (the middle one may be a newest one of a call before)
    assert len(counts) == 11 and max(counts[3:]) <= 5, counts


def test_input_that_is_no_chat_goes_to_the_model_as_it_came_with_one_warning(db, caplog):
    from agents.run_config import CallModelData, ModelInputData

    hook = eager_hook(OpenAIHook, db, "ag1", "openai")
    assemble = input_filter(hook)
    given = ModelInputData(
        input=[{"role": "user", "content": "hi"}, {"type": "item_reference", "id": "r1"}], instructions="x"
    )
    data = CallModelData(model_data=given, agent=Agent(name="coder"), context=None)
    with caplog.at_level("WARNING", logger="context_os.harness.openai_agents"):
        assert asyncio.run(assemble(data)) is given
        assert asyncio.run(assemble(data)) is given
    assert len([r for r in caplog.records if "unmanaged" in r.getMessage()]) == 1
    assert frame_docs(db, "ag1") == []


def test_a_run_whose_conversation_the_provider_keeps_goes_as_it_came(db, caplog):
    """``auto_previous_response_id=True``: each call after the first sends only its new tool
    outputs, whose calls the provider holds. They go to the model as they came (they were managed
    as a whole conversation, each output without its call sent as a user message), said once; so
    does the next run, continued by ``previous_response_id``."""
    hook = eager_hook(OpenAIHook, db, "ag1", "openai")
    model = ScriptedModel(steps=3, ids=True)
    agent = Agent(name="coder", instructions="You are a coding agent.", model=model, tools=[bash])
    config = RunConfig(call_model_input_filter=input_filter(hook), tracing_disabled=True)
    first = asyncio.run(Runner.run(agent, "fix the bug", run_config=config, auto_previous_response_id=True))
    assert first.final_output == "done" and model.previous == [None, "resp_1", "resp_2", "resp_3"]
    for n, got in enumerate(model.received[1:], start=1):
        assert [(i["type"], i["call_id"]) for i in got] == [("function_call_output", f"c{n}")]
        assert outputs(got)[f"c{n}"].startswith(f"$ cat file{n}.py")  # as the tool gave it
    again = asyncio.run(Runner.run(agent, "thanks", run_config=config, previous_response_id=first.last_response_id))
    assert again.final_output == "done" and model.received[-1] == [{"content": "thanks", "role": "user"}]
    assert len(frame_docs(db, "ag1")) == 1  # the first call, the whole conversation then
    said = [r.getMessage() for r in caplog.records if "provider keeps" in r.getMessage()]
    assert len(said) == 1
