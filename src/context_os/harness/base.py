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
from ..context.view import Rendered
from ..errors import InvalidOutput

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
    def check_pairs(self, messages: Sequence[M], pending: frozenset[str]) -> tuple[list[str], frozenset[str]]:
        """Walk ``messages`` with ``pending`` tool calls still open before them: the pairing
        problems found (orphaned calls or results) and the calls open after them."""

    @abstractmethod
    def check_end(self, messages: Sequence[M], *, last_input_role: str | None) -> list[str]:
        """Problems with how the list ends (e.g. on an assistant message the provider rejects)."""

    def tool_definitions(self) -> list[Any]:
        """Our tools (activate, deactivate, pin, unpin) in the harness's tool format."""
        return list(TOOLS)


class _Output(Generic[M]):
    """Converted history units and the pairing state after each, reused across turns for the
    prefix of units the view reports unchanged: a turn converts and checks only what changed."""

    def __init__(self) -> None:
        self.messages: list[M] = []
        self.offsets: list[int] = []
        self.pending: list[frozenset[str]] = []

    def update(self, adapter: Adapter[M], rendered: Rendered) -> list[str]:
        keep = min(rendered.stable_prefix, len(self.offsets))
        if keep < len(self.offsets):
            del self.messages[self.offsets[keep] :]
            del self.offsets[keep:], self.pending[keep:]
        problems: list[str] = []
        state = self.pending[-1] if self.pending else frozenset()
        for unit in rendered.units[keep:]:
            converted = [adapter.render_msg(m) for m in unit.msgs]
            found, state = adapter.check_pairs(converted, state)
            problems += found
            self.offsets.append(len(self.messages))
            self.pending.append(state)
            self.messages.extend(converted)
        return problems

    @property
    def open_calls(self) -> frozenset[str]:
        return self.pending[-1] if self.pending else frozenset()


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
        self._output: _Output[M] = _Output()

    def transform_context(self, messages: Sequence[M]) -> list[M]:
        """Ingest what is new in ``messages``, assemble the context, return it validated."""
        with self._lock:
            adapter = self.adapter
            assembly = self.session.transform(
                len(messages),
                lambda k: adapter.hash_message(messages[k]),
                lambda k: adapter.translate(messages[k], k),
            )
            rendered = assembly.rendered
            problems = self._output.update(adapter, rendered)
            volatile = [adapter.render_msg(m) for m in rendered.volatile]
            found, open_calls = adapter.check_pairs(volatile, self._output.open_calls)
            problems += found
            if open_calls:
                problems.append(f"tool call(s) {sorted(open_calls)} have no result at the end")
            out = self._output.messages + volatile
            last_role = adapter.translate(messages[-1], len(messages) - 1)["role"] if messages else None
            problems += adapter.check_end(out, last_input_role=last_role)
            if problems:
                raise InvalidOutput("assembled context failed validation: " + "; ".join(problems[:5]))
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
