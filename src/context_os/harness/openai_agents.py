"""The OpenAI Agents SDK (``openai-agents``): context_os as the run's model input filter::

    hook = OpenAIHook(Session.open(store, "my-session", harness="openai"))
    agent = Agent(name="coder", instructions="...", tools=[*my_tools, *agent_tools(hook)])
    result = await Runner.run(agent, "fix the bug", run_config=RunConfig(call_model_input_filter=input_filter(hook)))

The SDK calls ``RunConfig.call_model_input_filter`` right before every model call with the
input items it is about to send; the filter returns those the model gets instead. The run's own
items (``result.to_input_list()``, a session's) stay as the SDK made them: they are the
session's event source. The items are Responses API items: they are read as the chat messages
they stand for (``responses.to_chat``: a response's items one assistant message, its calls tool
calls, each output a tool message) and the assembly is given back as items (``to_items``: an item
context_os left as it was is the very item it came from). The instructions go to the model as they
came (a session's history is the conversation, as through ``ctxos proxy``'s Responses API).

``agent_tools(hook)`` are our tools (activate, deactivate, pin, unpin, lines, history; with
``files``, the file tools) as the SDK's ``FunctionTool``s, each run through ``hook.call_tool``.

The SDK copies its input items for every call: a message equal to the one at its place at the
last call is taken as that message, so that the hook reads what came since (comparing them is a
pass over the list at every call, but no hashing).
Input it cannot read as chat messages (a file input, an item reference, a computer-use call:
``to_chat`` refuses it) goes to the model as it came, unmanaged, and a warning says so once.

A run that keeps its conversation on the provider's side (``auto_previous_response_id=True``, a
``previous_response_id`` or a ``conversation_id``) gives the filter only what is new at each
call: from its first call whose input answers a call the input does not hold, the filter sends
every input as it came (a warning says so once). It managed those before 2026-12-05 as a whole
conversation, and a tool output without its call went to the model as a user message (the
provider then refuses the call left unanswered). ``ctxos proxy`` manages such runs: it keeps the
responses and sends the whole conversation (docs/proxy.md).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.run_config import CallModelData, ModelInputData

from ..errors import MalformedMessage
from .base import reuse_equal
from .openai import OpenAIHook
from .responses import CALLS, OUTPUTS, to_chat, to_items

__all__ = ["agent_tools", "input_filter"]

log = logging.getLogger(__name__)


def input_filter(hook: OpenAIHook) -> Any:
    """The ``RunConfig.call_model_input_filter`` that gives the model ``hook``'s assembly of the
    run's input items (async: the store's work runs in a thread, off the event loop)."""
    warned = False
    kept_by_provider = False  # (from the first input that continues a conversation held there)
    last: list[dict[str, Any]] = []

    async def assemble(data: CallModelData[Any]) -> ModelInputData:
        nonlocal warned, kept_by_provider, last
        given = data.model_data
        if kept_by_provider or _continues(given.input):
            if not kept_by_provider:
                kept_by_provider = True
                log.warning(
                    "context_os: the run continues a conversation the provider keeps (previous_response_id,"
                    " conversation_id): its input holds only what is new, and goes to the model as it came from"
                    " now on (ctxos proxy manages such runs)"
                )
            return given
        try:
            messages = to_chat(list(given.input))
        except MalformedMessage as e:
            if not warned:
                warned = True
                log.warning("context_os: the run's input holds %s: sent to the model unmanaged", e)
            return given
        messages = last = reuse_equal(last, messages)  # the SDK copies every item for every call
        assembled = await hook.atransform_context(messages)
        return ModelInputData(input=to_items(assembled), instructions=given.instructions)  # type: ignore[arg-type]

    return assemble


def _continues(items: Any) -> bool:
    """Whether input items answer a call they do not hold (a tool output without its call): the
    rest of the conversation is the provider's."""
    called = {i.get("call_id") for i in items if isinstance(i, dict) and i.get("type") in CALLS}
    return any(
        isinstance(i, dict) and i.get("type") in OUTPUTS and i.get(OUTPUTS[i["type"]]) not in called for i in items
    )


def agent_tools(hook: OpenAIHook) -> list[FunctionTool]:
    """Our tools as the Agents SDK's function tools (not strict: their schemas have optional
    arguments), each run through ``hook.call_tool``."""

    def tool(schema: dict[str, Any]) -> FunctionTool:
        name = schema["name"]

        async def run(ctx: RunContextWrapper[Any], arguments: str) -> str:
            return await asyncio.to_thread(hook.call_tool, name, arguments)

        return FunctionTool(
            name=name,
            description=schema["description"],
            params_json_schema=schema["parameters"],
            on_invoke_tool=run,
            strict_json_schema=False,
        )

    return [tool(s) for s in hook.registry.schemas]
