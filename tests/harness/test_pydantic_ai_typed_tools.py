"""pydantic-ai's typed tool parts (tool search, loading a capability: ``tool_kind`` subclasses
of ``ToolCallPart`` and ``ToolReturnPart``) are calls and results: the history horizon never
stands between a return and its call, and pydantic-ai gets each return as it came."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic_ai.messages import (
    InstructionDeltaPart,
    LoadCapabilityCallPart,
    LoadCapabilityReturnPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelSettingsDeltaPart,
    TextPart,
    ToolSearchCallPart,
    ToolSearchReturnPart,
    UserPromptPart,
)

from context_os import RetentionPolicy, Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.harness.pairing import pairing_problems
from context_os.harness.pydantic_ai import PYDANTIC_AI_PAIRING, PydanticAIHook
from context_os.store.sqlite import SqliteStore
from tests.helpers import EAGER

TS = datetime(2026, 1, 2, tzinfo=UTC)
FOUND = {"discovered_tools": [{"name": "query_db", "description": "Run SQL"}], "message": "1 tool found"}


def _hook(db: SqliteStore, **policy: Any) -> PydanticAIHook:
    return PydanticAIHook(Session.open(db, "p", harness="pydantic-ai", policy=RetentionPolicy(**{**EAGER, **policy})))


def _searches(n: int) -> list[ModelMessage]:
    """``n`` turns, each a long answer with a tool search, its return, and a short answer."""
    msgs: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("start", timestamp=TS)], timestamp=TS)]
    for k in range(n):
        call = ToolSearchCallPart(args={"queries": ["db"]}, tool_call_id=f"ts{k}")
        found = ToolSearchReturnPart(content=FOUND, tool_call_id=f"ts{k}", timestamp=TS)
        msgs += [
            ModelResponse(parts=[TextPart(f"thinking aloud {k} " + "z" * 4000), call], timestamp=TS),
            ModelRequest(parts=[found], timestamp=TS),
            ModelResponse(parts=[TextPart(f"ok {k}")], timestamp=TS),
            ModelRequest(parts=[UserPromptPart(f"next {k}", timestamp=TS)], timestamp=TS),
        ]
    return msgs


def test_the_history_horizon_never_cuts_a_tool_search_return_from_its_call(db):
    """The return was a user message to the engine: the horizon stood right before it, and the
    context began with a return that answered no call (refused: InvalidOutput)."""
    hook = _hook(db, history_max_tokens=1500, history_keep_percent=20)
    for n in range(1, 6):
        out = hook.transform_context(_searches(n))
        assert pairing_problems(PYDANTIC_AI_PAIRING, out) == []
    assert hook.session.view.horizon > 0  # the horizon moved, and stands before a whole exchange
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "p"))


def test_a_typed_return_goes_out_whole_even_collapsed(db):
    """pydantic-ai reads the tools found from a search's return (and a capability's instructions
    from its load's): a stub in its place would lose them, so it is sent as it came."""
    hook = _hook(db, keep_recent_results=0, collapse_after_turns=0, history_max_tokens=None)
    load = LoadCapabilityCallPart(args={"id": "sql"}, tool_call_id="lc1")
    loaded = LoadCapabilityReturnPart(content={"message": "SQL loaded"}, tool_call_id="lc1", timestamp=TS)
    msgs = _searches(3)
    msgs += [ModelResponse(parts=[load], timestamp=TS), ModelRequest(parts=[loaded], timestamp=TS)]
    msgs += [ModelResponse(parts=[TextPart("done")], timestamp=TS), ModelRequest(parts=[UserPromptPart("bye")])]
    for n in range(len(msgs) - 6, len(msgs) + 1, 2):
        out = hook.transform_context(msgs[:n])
    collapsed = {o.meta.get("call_id", o.id) for o in hook.session.view.objects.values() if o.collapsed}
    assert len(collapsed) >= 3  # the engine shows the old ones as stubs: they are sent whole all the same
    returns = [p for m in out if isinstance(m, ModelRequest) for p in m.parts if not isinstance(p, UserPromptPart)]
    assert [type(p).__name__ for p in returns] == ["ToolSearchReturnPart"] * 3 + ["LoadCapabilityReturnPart"]
    assert all(p.content == FOUND for p in returns[:3]) and returns[3].content == {"message": "SQL loaded"}
    calls = [p for m in out if isinstance(m, ModelResponse) for p in m.parts if not isinstance(p, TextPart)]
    assert [(type(p).__name__, p.args) for p in calls] == [("ToolSearchCallPart", {"queries": ["db"]})] * 3 + [
        ("LoadCapabilityCallPart", {"id": "sql"})
    ]
    assert pairing_problems(PYDANTIC_AI_PAIRING, out) == []


def test_a_thinking_effort_and_instruction_changes_stand_behind_the_history_horizon(db):
    """The request parts that say what later requests are made with (a thinking effort,
    ``run(model_settings={"thinking": ...})``; an instruction's change) are system messages to
    the engine: the horizon never hides them, and the run keeps the effort it asked for. As user
    messages, they went behind the horizon with the prompt beside them, and pydantic-ai, which
    reads the effort in effect from the history it sends, took none to be."""
    effort = ModelSettingsDeltaPart(settings={"thinking": "high"}, top_level=True)
    changed = InstructionDeltaPart(id=None, content="Answer in French.")
    msgs: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("start", timestamp=TS), effort], timestamp=TS)]
    msgs += [ModelResponse(parts=[TextPart("ok " + "z" * 4000)], timestamp=TS)]
    msgs += [ModelRequest(parts=[changed, UserPromptPart("go on", timestamp=TS)], timestamp=TS)]
    for k in range(6):
        msgs += [
            ModelResponse(parts=[TextPart(f"step {k} " + "y" * 4000)], timestamp=TS),
            ModelRequest(parts=[UserPromptPart(f"next {k}", timestamp=TS)], timestamp=TS),
        ]
    hook = _hook(db, history_max_tokens=1500, history_keep_percent=20)
    for n in range(3, len(msgs) + 1, 2):
        out = hook.transform_context(msgs[:n])
    assert hook.session.view.horizon > 0
    parts = [p for m in out if isinstance(m, ModelRequest) for p in m.parts]
    assert effort in parts and changed in parts
    assert not any(isinstance(p, UserPromptPart) and p.content == "start" for p in parts)  # hidden, as before
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "p"))
