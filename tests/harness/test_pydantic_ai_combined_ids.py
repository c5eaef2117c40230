"""Tool call ids in the form older pydantic-ai kept OpenAI Responses calls in (``call_…|fc_…``:
the call id and its item id joined, before ``ToolCallPart`` had an ``id``), which its OpenAI
Responses model still splits, sending the item id: past the thinking horizon, where the reasoning
item is left off, the call goes out without it, as a call with an ``id`` does."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from context_os import RetentionPolicy, Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.harness.pairing import pairing_problems
from context_os.harness.pydantic_ai import PYDANTIC_AI_PAIRING, PydanticAIHook
from tests.helpers import EAGER

TS = datetime(2026, 1, 2, tzinfo=UTC)
PROVIDER = OpenAIProvider(api_key="sk-test-not-used")


def _hook(db: Any) -> PydanticAIHook:
    policy = RetentionPolicy(**{**EAGER, "keep_thinking_turns": 1})
    return PydanticAIHook(Session.open(db, "p", harness="pydantic-ai", policy=policy))


def _old_run(model: OpenAIResponsesModel, turns: int) -> list[ModelMessage]:
    """A run on OpenAI Responses as older pydantic-ai stored it: each response a reasoning item,
    a text and a call whose item id is joined to its call id, answered by that same id."""
    msgs: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("go", timestamp=TS)], timestamp=TS)]
    for k in range(turns):
        parts = [
            ThinkingPart(f"plan {k} " * 20, id=f"rs_{k}", signature=f"gAAAA{k}", provider_name="openai"),
            TextPart(f"listing {k}"),
            ToolCallPart("ls", {"d": "."}, f"call_{k}|fc_{k}"),
        ]
        url = str(model.client.base_url)
        msgs.append(ModelResponse(parts=parts, timestamp=TS, provider_name="openai", provider_url=url))
        msgs.append(ModelRequest(parts=[ToolReturnPart("ls", f"out {k}", f"call_{k}|fc_{k}", timestamp=TS)]))
    return msgs


def _sent(model: OpenAIResponsesModel, msgs: list[ModelMessage]) -> list[tuple[Any, ...]]:
    """The input items pydantic-ai's own OpenAI Responses model sends for ``msgs``."""
    _, items = asyncio.run(model._map_messages(list(msgs), {}, ModelRequestParameters()))
    return [(i.get("type") or i.get("role"), i.get("id"), i.get("call_id")) for i in items]


def _chat(msgs: list[ModelMessage]) -> list[Any]:
    """The messages pydantic-ai's own OpenAI Chat Completions model sends for ``msgs``."""
    model = OpenAIChatModel("gpt-4o", provider=PROVIDER)
    return list(asyncio.run(model._map_messages(list(msgs), ModelRequestParameters())))


def test_an_old_combined_call_id_goes_out_without_its_item_id_past_the_thinking_horizon(db):
    model = OpenAIResponsesModel("gpt-5", provider=PROVIDER)
    hook = _hook(db)
    for n in range(1, 4):
        out = hook.transform_context(_old_run(model, n))
        assert pairing_problems(PYDANTIC_AI_PAIRING, out) == []
    assert _sent(model, out)[1:] == [
        ("assistant", None, None),
        ("function_call", None, "call_0"),  # it went as fc_0, without rs_0: OpenAI's 400
        ("function_call_output", None, "call_0"),
        ("assistant", None, None),
        ("function_call", None, "call_1"),
        ("function_call_output", None, "call_1"),
        ("reasoning", "rs_2", None),  # the newest keeps its reasoning, and its call its item id
        ("assistant", None, None),
        ("function_call", "fc_2", "call_2"),
        ("function_call_output", None, "call_2"),
    ]
    # each return answers its call as it was rendered (a provider that pairs whole ids, too)
    returns = [p for m in out if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [p.tool_call_id for p in returns] == ["call_0", "call_1", "call_2|fc_2"]
    chat = _chat(out)
    calls = [c["id"] for m in chat if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    assert calls == [m["tool_call_id"] for m in chat if m["role"] == "tool"]
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "p"))
    # a hook on the session in another process renders it the same from what is stored
    assert _hook(db).transform_context(_old_run(model, 3)) == out
