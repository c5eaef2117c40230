"""The ``create_agent`` middleware of ``LangChainHook`` (``langchain`` 1.x's agents): kept apart
from the adapter, which needs only ``langchain-core``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from langchain.agents.middleware import AgentMiddleware, ModelRequest
from langchain_core.messages import AnyMessage, BaseMessage, SystemMessage

if TYPE_CHECKING:
    from .langchain import LangChainHook

__all__ = ["ContextOSMiddleware"]


class ContextOSMiddleware(AgentMiddleware[Any, Any]):
    """Replaces the messages of every model request with the session's assembly (the agent's
    state keeps its own) and gives the agent our tools.

    The request's system message travels apart from its messages: it goes in first, and the
    assembly's first message, a system message, comes back in its place. An agent makes its
    system message anew for each request: one equal to the last is taken as that same object,
    so the history reads on from where it was rather than anew from its start."""

    def __init__(self, hook: LangChainHook) -> None:
        super().__init__()
        self.hook = hook
        self.tools = hook.langchain_tools()
        self._system: SystemMessage | None = None

    def _messages(self, request: ModelRequest[Any]) -> list[BaseMessage]:
        system = request.system_message
        if system is not None and self._system is not None and system is not self._system and system == self._system:
            system = self._system
        self._system = system
        return [system, *request.messages] if system is not None else list(request.messages)

    @staticmethod
    def _request(request: ModelRequest[Any], assembled: list[BaseMessage]) -> ModelRequest[Any]:
        out = cast("list[AnyMessage]", assembled)  # (every message rendered is one of AnyMessage's classes)
        if out and isinstance(out[0], SystemMessage):
            return request.override(system_message=out[0], messages=out[1:])
        return request.override(system_message=None, messages=out)

    def wrap_model_call(self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Any]) -> Any:
        return handler(self._request(request, self.hook.transform_context(self._messages(request))))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[Any]]
    ) -> Any:
        assembled = await self.hook.atransform_context(self._messages(request))
        return await handler(self._request(request, assembled))
