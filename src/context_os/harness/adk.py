"""Google's Agent Development Kit (``google-adk``): context_os in an ADK agent::

    hook = GeminiHook(Session.open(store, "my-session", harness="openai"))
    agent = LlmAgent(
        name="coder",
        model="gemini-2.5-pro",
        instruction=SYSTEM,
        tools=[*my_tools, *adk_tools(hook)],
        before_model_callback=before_model(hook),
    )

``before_model(hook)`` is the agent's ``before_model_callback``: it gives the model ``hook``'s
assembly (``GeminiHook.atransform_contents``) in place of the request's contents, and leaves
ADK's session and its events as they are: they stay the session's event source. The system
instruction and the tools stay in the request's config. Put it last when the agent has other
before-model callbacks: those after it would see the assembly, not the conversation.

``ContextOSPlugin(hook)`` does the same for a ``Runner``'s plugins, for the agent named by
``agent`` (by default the first whose request it sees).

One hook is one conversation: one agent's in one ADK session. Both manage the requests of the
first they see (of the agent named), and send those of another agent or another ADK session as
they came, saying so once for each: a runner serving several sessions needs a hook, and an agent
with its callback, for each.

``adk_tools(hook)`` are our tools (activate, deactivate, pin, unpin, lines, history; with the
hook's ``files``, the file tools) as ADK tools, each run through ``hook.hook.call_tool``: put them
in the agent's ``tools``, which is where ADK looks a model's call up.

ADK builds the request's contents anew from its session's events for every call (each a copy).
A content equal to the one at its place at the last call is taken as that one
(``base.reuse_equal``), so a call reads what came since, as in a loop of your own.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from .base import reuse_equal
from .google_genai import GeminiHook

__all__ = ["ContextOSPlugin", "adk_tools", "before_model"]

log = logging.getLogger(__name__)

BeforeModel = Callable[..., Awaitable[LlmResponse | None]]


class _Assembler:
    """Gives the model ``hook``'s assembly in place of a request's contents: the requests of one
    conversation, an agent's in one ADK session, the first it sees (or of the agent named)."""

    def __init__(self, hook: GeminiHook, agent: str | None = None):
        self.hook = hook
        self.agent = agent
        self._session: str | None = None
        self._last: list[types.Content] = []
        self._said: set[tuple[str, str]] = set()

    async def __call__(self, callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        agent, session = callback_context.agent_name, callback_context.session.id
        if self.agent is None:
            self.agent = agent
        if self._session is None and agent == self.agent:
            self._session = session
        if (agent, session) != (self.agent, self._session):
            if (agent, session) not in self._said:
                self._said.add((agent, session))
                log.warning(
                    "context_os: the hook manages the conversation of agent %r (ADK session %s); the requests"
                    " of agent %r in ADK session %s go to the model as they came (one hook for each conversation)",
                    self.agent,
                    self._session or "not seen yet",
                    agent,
                    session,
                )
            return
        # ADK copies every content for every request: those equal to the last call's are those
        contents = self._last = reuse_equal(self._last, list(llm_request.contents))
        llm_request.contents = await self.hook.atransform_contents(contents)


def before_model(hook: GeminiHook) -> BeforeModel:
    """The ``before_model_callback`` of an ``LlmAgent`` whose model gets ``hook``'s assembly."""
    assemble = _Assembler(hook)

    async def callback(*, callback_context: CallbackContext, llm_request: LlmRequest) -> LlmResponse | None:
        await assemble(callback_context, llm_request)
        return None

    return callback


class ContextOSPlugin(BasePlugin):  # type: ignore[misc]
    """``before_model`` as a ``Runner`` plugin, for the agent named ``agent`` (the first agent
    whose request it sees if None)."""

    def __init__(self, hook: GeminiHook, *, agent: str | None = None, name: str = "context_os"):
        super().__init__(name=name)
        self._assemble = _Assembler(hook, agent)

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        await self._assemble(callback_context, llm_request)
        return None


class _Tool(BaseTool):  # type: ignore[misc]
    """One of our tools, for ADK."""

    def __init__(self, hook: GeminiHook, schema: dict[str, Any]):
        super().__init__(name=schema["name"], description=schema["description"])
        self._hook = hook
        self._parameters = schema["parameters"]

    def _get_declaration(self) -> types.FunctionDeclaration:
        return types.FunctionDeclaration(
            name=self.name, description=self.description, parameters_json_schema=self._parameters
        )

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> dict[str, Any]:
        output = await asyncio.to_thread(self._hook.hook.call_tool, self.name, json.dumps(args))
        return {"output": output}


def adk_tools(hook: GeminiHook) -> list[BaseTool]:
    """Our tools as ADK tools (their parameters as JSON Schema)."""
    return [_Tool(hook, schema) for schema in hook.hook.registry.schemas]
