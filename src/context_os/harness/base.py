"""The adapter protocol and the hook that runs it before every model call.

An adapter translates a harness's message format to neutral ``Incoming`` messages and neutral
rendered messages back, validates the result, and nothing else. ``ContextHook`` drives it:
cursor-based ingestion (only messages past the cursor are translated), assembly, validation.
It accepts sync and async harness loops through one implementation.

No module here may reach into the store directly: everything goes through ``Session``.
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from ..context.entries import Incoming, Msg
from ..context.session import Assembly, Session
from ..context.tools import TOOLS, call_tool, tool_names
from ..context.view import Rendered, Unit

__all__ = ["Adapter", "ContextHook"]

M = TypeVar("M")


class Adapter(ABC, Generic[M]):
    """Translates one harness's messages. Stateless apart from caches."""

    name: str = "generic"

    @abstractmethod
    def hash_message(self, message: M) -> str:
        """A stable hash of one raw harness message (cursor checks)."""

    @abstractmethod
    def translate(self, message: M, index: int) -> Incoming:
        """Harness message → ``Incoming``; raise ``MalformedMessage`` naming ``index``."""

    @abstractmethod
    def render_msg(self, msg: Msg) -> M:
        """Neutral rendered message → harness message."""

    @abstractmethod
    def validate(self, messages: Sequence[M], *, last_input_role: str | None) -> None:
        """Raise ``InvalidOutput`` unless the provider would accept ``messages``."""

    def tool_definitions(self) -> list[Any]:
        """Our tools (activate, deactivate, pin, unpin) in the harness's tool format."""
        return list(TOOLS)

    def __init__(self) -> None:
        self._unit_cache: dict[str, list[M]] = {}

    def render(self, rendered: Rendered) -> list[M]:
        """Render every message; history units are converted once and reused."""
        out: list[M] = []
        for unit in rendered.units:
            out.extend(self._unit(unit))
        out.extend(self.render_msg(m) for m in rendered.volatile)
        return out

    def _unit(self, unit: Unit) -> list[M]:
        cached = self._unit_cache.get(unit.hash)
        if cached is None:
            cached = self._unit_cache[unit.hash] = [self.render_msg(m) for m in unit.msgs]
        return cached


class ContextHook(Generic[M]):
    """``transform_context`` for one session: call it with the harness's full message list
    before every model call and send what it returns instead.

    Returned message objects are shared with an internal cache: treat them as read-only.
    """

    def __init__(self, session: Session, adapter: Adapter[M]):
        self.session = session
        self.adapter = adapter
        self.last: Assembly | None = None
        self._lock = threading.Lock()

    def transform_context(self, messages: Sequence[M]) -> list[M]:
        """Ingest what is new in ``messages``, assemble the context, return it validated."""
        with self._lock:
            adapter = self.adapter
            assembly = self.session.transform(
                len(messages),
                lambda k: adapter.hash_message(messages[k]),
                lambda k: adapter.translate(messages[k], k),
            )
            out = adapter.render(assembly.rendered)
            last_role = adapter.translate(messages[-1], len(messages) - 1)["role"] if messages else None
            adapter.validate(out, last_input_role=last_role)
            self.last = assembly
            return out

    async def atransform_context(self, messages: Sequence[M]) -> list[M]:
        """The same, for async loops: store work runs in a thread, off the event loop."""
        return await asyncio.to_thread(self.transform_context, list(messages))

    @property
    def tools(self) -> list[Any]:
        """Tool definitions to register with the model, in the harness's format."""
        return self.adapter.tool_definitions()

    def handles(self, tool_name: str) -> bool:
        return tool_name in tool_names()

    def call_tool(self, name: str, arguments: str | dict[str, Any]) -> str:
        """Execute one of our tools; returns the tool output text (JSON)."""
        with self._lock:
            return call_tool(self.session, name, arguments)
