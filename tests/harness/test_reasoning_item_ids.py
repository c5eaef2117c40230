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
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from context_os import RetentionPolicy, Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.harness.pairing import pairing_problems
from context_os.harness.pi import PI_PAIRING, PiHook
from context_os.harness.pydantic_ai import PYDANTIC_AI_PAIRING, PydanticAIHook
from tests.harness.pi_msgs import USAGE, result, user
from tests.helpers import EAGER

TS = datetime(2026, 1, 2, tzinfo=UTC)
PROVIDER = OpenAIProvider(api_key="sk-test-not-used")


def _policy() -> RetentionPolicy:
    return RetentionPolicy(**{**EAGER, "keep_thinking_turns": 1})


def _responses(model: OpenAIResponsesModel, turns: int, *, combined: bool = False) -> list[ModelMessage]:
    """A pydantic-ai run on OpenAI Responses: each response a reasoning item, a text and a call,
    each with its item id, as ``OpenAIResponsesModel`` makes them; ``combined``: as older
    pydantic-ai stored them, the call's item id joined to its call id (``call_…|fc_…``, before
    ``ToolCallPart`` had an ``id``) and answered by that same id, the text without one."""
    msgs: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("go", timestamp=TS)], timestamp=TS)]
    for k in range(turns):
        call_id = f"call_{k}|fc_{k}" if combined else f"call_{k}"
        parts = [
            ThinkingPart(f"plan {k} " * 20, id=f"rs_{k}", signature=f"gAAAA{k}", provider_name="openai"),
            TextPart(f"listing {k}") if combined else TextPart(f"listing {k}", id=f"msg_{k}", provider_name="openai"),
            ToolCallPart("ls", {"d": "."}, call_id)
            if combined
            else ToolCallPart("ls", {"d": "."}, call_id, id=f"fc_{k}", provider_name="openai"),
        ]
        url = str(model.client.base_url)
        msgs.append(ModelResponse(parts=parts, timestamp=TS, provider_name="openai", provider_url=url))
        msgs.append(ModelRequest(parts=[ToolReturnPart("ls", f"out {k}", call_id, timestamp=TS)], timestamp=TS))
    return msgs


def _sent(model: OpenAIResponsesModel, msgs: list[ModelMessage], *, outputs: bool = False) -> list[tuple[Any, ...]]:
    """The input items pydantic-ai's own OpenAI Responses model sends for ``msgs`` (the tool
    outputs too if ``outputs``)."""
    _, items = asyncio.run(model._map_messages(list(msgs), {}, ModelRequestParameters()))
    sent = [(i.get("type") or i.get("role"), i.get("id"), i.get("call_id")) for i in items]
    return [i for i in sent if outputs or i[0] != "function_call_output"]


def test_pydantic_ai_sends_no_item_id_whose_reasoning_item_was_left_off(db):
    model = OpenAIResponsesModel("gpt-5", provider=PROVIDER)
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


def test_an_old_combined_call_id_goes_out_without_its_item_id_past_the_thinking_horizon(db):
    """The ``call_…|fc_…`` form, which pydantic-ai's OpenAI Responses model still splits, sending
    the item id: past the thinking horizon the call goes out without it, as a call with an ``id``
    does."""
    model = OpenAIResponsesModel("gpt-5", provider=PROVIDER)

    def hook() -> PydanticAIHook:
        return PydanticAIHook(Session.open(db, "p", harness="pydantic-ai", policy=_policy()))

    first = hook()
    for n in range(1, 4):
        out = first.transform_context(_responses(model, n, combined=True))
        assert pairing_problems(PYDANTIC_AI_PAIRING, out) == []
    assert _sent(model, out, outputs=True)[1:] == [
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
    chat = list(asyncio.run(OpenAIChatModel("gpt-4o", provider=PROVIDER)._map_messages(out, ModelRequestParameters())))
    calls = [c["id"] for m in chat if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    assert calls == [m["tool_call_id"] for m in chat if m["role"] == "tool"]
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "p"))
    # a hook on the session in another process renders it the same from what is stored
    assert hook().transform_context(_responses(model, 3, combined=True)) == out


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
