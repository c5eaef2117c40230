"""OpenAI Responses item ids past the thinking horizon: a response whose reasoning item is left
off goes out without the item ids of its calls and texts, which OpenAI refuses without it (400
"Item 'fc_…' of type 'function_call' was provided without its required 'reasoning' item")."""

from __future__ import annotations

import asyncio
import json
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
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from context_os import RetentionPolicy, Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.harness.pairing import pairing_problems
from context_os.harness.pi import PI_PAIRING, PiHook
from context_os.harness.pydantic_ai import PydanticAIHook
from tests.harness.pi_msgs import USAGE, result, user
from tests.helpers import EAGER

TS = datetime(2026, 1, 2, tzinfo=UTC)


def _policy() -> RetentionPolicy:
    return RetentionPolicy(**{**EAGER, "keep_thinking_turns": 1})


def _responses(model: OpenAIResponsesModel, turns: int) -> list[ModelMessage]:
    """A pydantic-ai run on OpenAI Responses: each response a reasoning item, a text and a call,
    each with its item id, as ``OpenAIResponsesModel`` makes them."""
    msgs: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("go", timestamp=TS)], timestamp=TS)]
    for k in range(turns):
        parts = [
            ThinkingPart(f"plan {k} " * 20, id=f"rs_{k}", signature=f"gAAAA{k}", provider_name="openai"),
            TextPart(f"listing {k}", id=f"msg_{k}", provider_name="openai"),
            ToolCallPart("ls", {"d": "."}, f"call_{k}", id=f"fc_{k}", provider_name="openai"),
        ]
        url = str(model.client.base_url)
        msgs.append(ModelResponse(parts=parts, timestamp=TS, provider_name="openai", provider_url=url))
        msgs.append(ModelRequest(parts=[ToolReturnPart("ls", f"out {k}", f"call_{k}", timestamp=TS)], timestamp=TS))
    return msgs


def _sent(model: OpenAIResponsesModel, msgs: list[ModelMessage]) -> list[tuple[Any, ...]]:
    """The input items pydantic-ai's own OpenAI Responses model sends for ``msgs``."""
    _, items = asyncio.run(model._map_messages(list(msgs), {}, ModelRequestParameters()))
    sent = [(i.get("type") or i.get("role"), i.get("id"), i.get("call_id")) for i in items]
    return [i for i in sent if i[0] != "function_call_output"]


def test_pydantic_ai_sends_no_item_id_whose_reasoning_item_was_left_off(db):
    model = OpenAIResponsesModel("gpt-5", provider=OpenAIProvider(api_key="sk-test-not-used"))
    hook = PydanticAIHook(Session.open(db, "p", harness="pydantic-ai", policy=_policy()))
    for n in range(1, 4):
        out = hook.transform_context(_responses(model, n))
    assert _sent(model, out)[1:] == [
        ("assistant", None, None),  # a plain assistant message, no output item: new input
        ("function_call", None, "call_0"),
        ("assistant", None, None),
        ("function_call", None, "call_1"),
        ("reasoning", "rs_2", None),  # the newest keeps its reasoning, and its items their ids
        ("message", "msg_2", None),
        ("function_call", "fc_2", "call_2"),
    ]
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "p"))
    # a hook on the session in another process renders it the same from what is stored
    again = PydanticAIHook(Session.open(db, "p", harness="pydantic-ai", policy=_policy()))
    assert again.transform_context(_responses(model, 3)) == out


def test_pydantic_ai_keeps_the_item_ids_of_a_response_whose_thinking_was_no_reasoning_item(db):
    """Reasoning without an id (Anthropic's, with its signature) leaves the other parts' ids."""
    hook = PydanticAIHook(Session.open(db, "p", harness="pydantic-ai", policy=_policy()))
    msgs: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("go", timestamp=TS)], timestamp=TS)]
    for k in range(3):
        parts = [
            ThinkingPart("hmm " * 20, signature="sig", provider_name="anthropic"),
            ToolCallPart("ls", {}, f"c{k}", id=f"toolu_{k}", provider_name="anthropic"),
        ]
        msgs += [ModelResponse(parts=parts, timestamp=TS), ModelRequest(parts=[ToolReturnPart("ls", "a", f"c{k}")])]
        out = hook.transform_context(msgs)
    first = next(m for m in out if isinstance(m, ModelResponse))
    assert [(type(p).__name__, getattr(p, "id", None)) for p in first.parts] == [("ToolCallPart", "toolu_0")]


def _pi_turns(turns: int) -> list[dict[str, Any]]:
    """A Pi session on OpenAI Responses: pi-ai keeps each reasoning item in its thinking block's
    signature, a text's message id in its ``textSignature`` and a call's item id after its call id."""
    msgs = [user("go")]
    for k in range(turns):
        item = {"type": "reasoning", "id": f"rs_{k}", "summary": [], "encrypted_content": "gAAAA"}
        signature = json.dumps({"v": 1, "id": f"msg_{k}"})
        msgs.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": f"plan {k} " * 20, "thinkingSignature": json.dumps(item)},
                    {"type": "text", "text": f"listing {k}", "textSignature": signature},
                    {"type": "toolCall", "id": f"call_{k}|fc_{k}", "name": "ls", "arguments": {}},
                ],
                "api": "openai-responses",
                "provider": "openai",
                "model": "gpt-5",
                "usage": USAGE,
                "stopReason": "toolUse",
                "timestamp": 10 + k,
            }
        )
        msgs.append(result(f"call_{k}|fc_{k}", "ls", f"out {k}"))
    return msgs


def test_pi_sends_no_item_id_whose_reasoning_item_was_left_off(db):
    """pi-ai sends a call's item id (``call_…|fc_…``, split at ``|``) and a text's message id
    (``textSignature``) back with it: past the horizon the call is ``call_…``, and its result
    answers ``call_…`` (pi-ai pairs them by the whole id)."""
    hook = PiHook(Session.open(db, "s", harness="pi", policy=_policy()))
    msgs = _pi_turns(3)
    for n in range(1, 4):
        out = hook.transform_context(msgs[: 1 + 2 * n])
    blocks = [[(b["type"], b.get("id"), b.get("textSignature")) for b in m["content"]] for m in out[1::2]]
    ids = [x for pair in zip(blocks, [m["toolCallId"] for m in out[2::2]], strict=True) for x in pair]
    assert ids == [
        [("text", None, None), ("toolCall", "call_0", None)],
        "call_0",
        [("text", None, None), ("toolCall", "call_1", None)],
        "call_1",
        [("thinking", None, None), ("text", None, '{"v": 1, "id": "msg_2"}'), ("toolCall", "call_2|fc_2", None)],
        "call_2|fc_2",
    ]
    assert pairing_problems(PI_PAIRING, out) == []
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s"))
    again = PiHook(Session.open(db, "s", harness="pi", policy=_policy()))
    assert again.transform_context(msgs) == out


def test_pi_keeps_the_call_ids_of_a_message_whose_thinking_was_no_reasoning_item(db):
    hook = PiHook(Session.open(db, "s", harness="pi", policy=_policy()))
    msgs = _pi_turns(3)
    for m in msgs:
        if m["role"] == "assistant":
            m["content"][0]["thinkingSignature"] = "sig"  # Anthropic's
    for n in range(1, 4):
        out = hook.transform_context(msgs[: 1 + 2 * n])
    assert [b.get("id") for b in out[1]["content"]] == [None, "call_0|fc_0"] and out[2]["toolCallId"] == "call_0|fc_0"
