"""Google's Agent Development Kit (``google-adk``): context_os in an ADK app::

    plugin = ContextOSPlugin(store)
    agent = LlmAgent(name="coder", model="gemini-2.5-pro", instruction=SYSTEM, tools=[*my_tools, *plugin.tools()])
    app = App(name="coder", root_agent=agent, plugins=[plugin])

``ContextOSPlugin(store)`` gives each conversation, an agent's in one ADK session, a context_os
session of its own (``adk:<app>:<user>:<session>:<agent>``, each part percent-quoted), opened
when its first request comes and resumed from the store after a restart. Before each model
call it gives the model that session's assembly (``GeminiHook.atransform_contents``) in place of
the request's contents, and leaves ADK's session and its events as they are: they stay the
session's event source. The system instruction and the tools stay in the request's config.
``plugin.tools()`` are our tools (activate, deactivate, pin, unpin, lines, history; with
``files``, the file tools) as ADK tools, for the agents' ``tools`` (where ADK looks a model's
call up); each runs against the session of the conversation that called it. At most
``max_open`` sessions stay open (their leases held); the one used longest ago is closed for a
new one, and resumed when its conversation comes back. ``await plugin.close()`` (ADK calls it
when its runner closes) closes them all.

For one conversation you drive yourself, with a hook of your own::

    hook = GeminiHook(Session.open(store, "my-session", harness="openai"))
    agent = LlmAgent(..., tools=[*my_tools, *adk_tools(hook)], before_model_callback=before_model(hook))

``before_model(hook)`` manages the requests of the first conversation it sees and sends those of
another agent or another ADK session as they came, saying so once for each. Put it last when the
agent has other before-model callbacks: those after it would see the assembly.

ADK builds the request's contents anew from its session's events for every call (each a copy).
A content equal to the one at its place at the last call is taken as that one
(``base.reuse_equal``), so a call reads what came since, as in a loop of your own. When the
store cannot be reached, a request goes to the model as it came, with a warning.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from ..context.session import Session
from ..context.tools import CONTEXT_TOOLS
from ..errors import ContextOSError
from .base import reuse_equal
from .google_genai import GeminiHook

if TYPE_CHECKING:
    from ..context.policy import RetentionPolicy
    from ..files.file_tools import FileTools
    from ..scrub import RedactFunction
    from ..store.base import Store

__all__ = ["MAX_OPEN", "ContextOSPlugin", "Conversation", "adk_tools", "before_model"]

log = logging.getLogger(__name__)

MAX_OPEN = 64
"""How many conversations' sessions a plugin keeps open at most (by default)."""

BeforeModel = Callable[..., Awaitable[LlmResponse | None]]


class Conversation(NamedTuple):
    """One agent's conversation in one ADK session."""

    app: str
    user: str
    session: str
    agent: str

    @classmethod
    def of(cls, context: CallbackContext) -> Conversation:
        s = context.session
        return cls(s.app_name, s.user_id, s.id, context.agent_name)

    @property
    def session_id(self) -> str:
        """Its context_os session's id: ``adk:<app>:<user>:<session>:<agent>``, each percent-quoted."""
        return "adk:" + ":".join(quote(part, safe="") for part in self)


class _Managed:
    """A conversation's hook and what it read at its last call."""

    def __init__(self, hook: GeminiHook):
        self.hook = hook
        self.users = 0
        self._last: list[types.Content] = []

    async def assemble(self, llm_request: LlmRequest) -> None:
        # ADK copies every content for every request: those equal to the last call's are those
        contents = self._last = reuse_equal(self._last, list(llm_request.contents))
        llm_request.contents = await self.hook.atransform_contents(contents)


class _Said:
    """Warnings said once for each thing they are about."""

    def __init__(self) -> None:
        self._said: set[Any] = set()

    def __call__(self, about: Any, message: str, *args: Any) -> None:
        if about not in self._said:
            self._said.add(about)
            log.warning(message, *args)

    def unmanaged(self, e: ContextOSError) -> None:
        """Once for each kind of error: context_os could not manage a request."""
        self(type(e), "context_os: a request went to the model as it came: %s", e)


def before_model(hook: GeminiHook) -> BeforeModel:
    """The ``before_model_callback`` of an ``LlmAgent`` whose model gets ``hook``'s assembly: for
    the first conversation whose request it sees; the others' requests go as they came."""
    managed = _Managed(hook)
    owner: list[Conversation] = []
    """The conversation it manages, once it has seen one."""
    say = _Said()

    async def callback(*, callback_context: CallbackContext, llm_request: LlmRequest) -> LlmResponse | None:
        conv = Conversation.of(callback_context)
        if not owner:
            owner.append(conv)
        if conv != owner[0]:
            say(
                conv,
                "context_os: the hook manages agent %s in ADK session %s; the requests of agent %s in ADK"
                " session %s go to the model as they came (ContextOSPlugin gives each conversation a session)",
                owner[0].agent,
                owner[0].session,
                conv.agent,
                conv.session,
            )
            return None
        try:
            await managed.assemble(llm_request)
        except ContextOSError as e:
            say.unmanaged(e)
        return None

    return callback


class ContextOSPlugin(BasePlugin):  # type: ignore[misc]
    """context_os for an ADK app: a session for each conversation (module docstring).

    ``policy``: the sessions' retention policy (the default's when None). ``files``: makes the
    file tools of a conversation's session, e.g. ``lambda s: FileTools(s, workspace,
    tracker=tracker)``; ``redact`` and ``workspace``: as ``Session.open``'s (e.g.
    ``workspace.redact`` and its root). ``agents``:
    the names of the agents whose requests are managed (every agent's when None); the others' go
    as they came. ``max_open``: how many sessions stay open at most."""

    def __init__(
        self,
        store: Store,
        *,
        policy: RetentionPolicy | None = None,
        files: Callable[[Session], FileTools] | None = None,
        redact: RedactFunction | bool | None = None,
        workspace: str | None = None,
        agents: Collection[str] | None = None,
        max_open: int = MAX_OPEN,
        name: str = "context_os",
    ):
        super().__init__(name=name)
        if max_open < 1:
            raise ValueError(f"max_open must be at least 1, got {max_open}")
        self.store = store
        self.policy = policy
        self.files = files
        self.redact = redact
        self.workspace = workspace
        self.agents = None if agents is None else frozenset(agents)
        self.max_open = max_open
        self._open: OrderedDict[Conversation, _Managed] = OrderedDict()
        self._lock = asyncio.Lock()
        """Held while a session opens or closes (each in a thread): one at a time, never one
        conversation's session twice."""
        self.say = _Said()
        """Its warnings, each said once."""

    @property
    def hooks(self) -> dict[Conversation, GeminiHook]:
        """The hooks of the conversations whose sessions are open, the one used longest ago first."""
        return {conv: m.hook for conv, m in self._open.items()}

    def manages(self, agent: str) -> bool:
        return self.agents is None or agent in self.agents

    def tools(self) -> list[BaseTool]:
        """Our tools as ADK tools, each run against its caller's conversation."""
        names = list(CONTEXT_TOOLS)
        if self.files is not None:
            from ..files.file_tools import FILE_TOOLS

            names += [t["name"] for t in FILE_TOOLS]
        return [_ConversationTool(self, name) for name in names]

    def _hook(self, conv: Conversation) -> _Managed:
        """Opens (or resumes) the session of ``conv`` (in a thread: it reads the store)."""
        session = Session.open(
            self.store,
            conv.session_id,
            harness="openai",
            workspace=self.workspace,
            policy=self.policy,
            redact=self.redact,
        )
        try:
            return _Managed(GeminiHook(session, files=self.files(session) if self.files else None))
        except BaseException:
            session.close()
            raise

    @asynccontextmanager
    async def using(self, context: CallbackContext) -> AsyncIterator[_Managed]:
        """The open session of ``context``'s conversation, opened if it is not, in use (not closed
        for another) until the block ends."""
        conv = Conversation.of(context)
        async with self._lock:
            managed = self._open.get(conv)
            if managed is None:
                managed = self._open[conv] = await asyncio.to_thread(self._hook, conv)
            self._open.move_to_end(conv)
            managed.users += 1
            if len(self._open) > self.max_open:  # the idle ones used longest ago closed for it
                idle = [c for c, m in self._open.items() if m.users == 0]
                for old in idle[: len(self._open) - self.max_open]:
                    await self._close(old, self._open.pop(old))
        try:
            yield managed
        finally:
            managed.users -= 1

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        if not self.manages(callback_context.agent_name):
            return None
        try:
            async with self.using(callback_context) as managed:
                await managed.assemble(llm_request)
        except ContextOSError as e:
            self.say.unmanaged(e)
        return None

    async def close(self) -> None:
        """Close every open session (their leases given back)."""
        async with self._lock:
            while self._open:
                await self._close(*self._open.popitem(last=False))

    async def _close(self, conv: Conversation, managed: _Managed) -> None:
        """Close ``conv``'s session (in a thread); one that cannot be closed (the store out of
        reach) is said in the log, and its lease expires."""
        try:
            await asyncio.to_thread(managed.hook.session.close)
        except ContextOSError as e:
            log.warning("context_os: the session of %s could not be closed: %s", conv.session_id, e)


def _declaration(schema: dict[str, Any]) -> types.FunctionDeclaration:
    return types.FunctionDeclaration(
        name=schema["name"], description=schema["description"], parameters_json_schema=schema["parameters"]
    )


class _Tool(BaseTool):  # type: ignore[misc]
    """One of our tools, for ADK, run through one hook."""

    def __init__(self, hook: GeminiHook, schema: dict[str, Any]):
        super().__init__(name=schema["name"], description=schema["description"])
        self._hook = hook
        self._schema = schema

    def _get_declaration(self) -> types.FunctionDeclaration:
        return _declaration(self._schema)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> dict[str, Any]:
        return {"output": await asyncio.to_thread(self._hook.hook.call_tool, self.name, json.dumps(args))}


class _ConversationTool(BaseTool):  # type: ignore[misc]
    """One of our tools, for ADK, run against the session of the conversation that calls it. The
    agent's holds no declaration: each request gets one of its own, declared as the
    conversation's session has it (``schema``)."""

    def __init__(self, plugin: ContextOSPlugin, name: str, schema: dict[str, Any] | None = None):
        description = schema["description"] if schema else CONTEXT_TOOLS[name][0] if name in CONTEXT_TOOLS else name
        super().__init__(name=name, description=description)
        self._plugin = plugin
        self._schema = schema

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        return None if self._schema is None else _declaration(self._schema)

    async def process_llm_request(self, *, tool_context: ToolContext, llm_request: LlmRequest) -> None:
        if not self._plugin.manages(tool_context.agent_name):
            return
        try:
            async with self._plugin.using(tool_context) as managed:
                found = [s for s in managed.hook.hook.registry.schemas if s["name"] == self.name]
        except ContextOSError as e:
            self._plugin.say.unmanaged(e)
            return
        if found:  # (the request's tool: ADK runs the model's calls of it)
            llm_request.append_tools([_ConversationTool(self._plugin, self.name, found[0])])

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> dict[str, Any]:
        if not self._plugin.manages(tool_context.agent_name):
            return {"output": json.dumps({"error": f"context_os does not manage agent {tool_context.agent_name}"})}
        try:
            async with self._plugin.using(tool_context) as managed:
                output = await asyncio.to_thread(managed.hook.hook.call_tool, self.name, json.dumps(args))
        except ContextOSError as e:
            output = json.dumps({"error": str(e), "type": type(e).__name__})
        return {"output": output}


def adk_tools(hook: GeminiHook) -> list[BaseTool]:
    """Our tools as ADK tools, run through ``hook`` (their parameters as JSON Schema)."""
    return [_Tool(hook, schema) for schema in hook.hook.registry.schemas]
