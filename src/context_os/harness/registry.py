"""The harnesses context_os speaks, by name: the one list every entry point reads.

A ``Harness`` says how to make a session's hook for that harness (with or without file tools),
how its messages and tool definitions cross a wire as JSON (the JSON-RPC server; pydantic-ai
messages are objects in Python and their own JSON form on the wire), and whether it takes the
system prompt apart from the messages (Anthropic). ``harness(name)`` finds one; ``NAMES`` lists
them. The JSON-RPC server, ``ctxos replay`` and the Pi extension all go through here, so a
harness added here is a harness everywhere.

This module only wires the adapters together; it never reaches the store.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..context.ingest import SyncReport
from ..context.session import Session
from ..errors import ConfigError, MalformedMessage
from .anthropic import AnthropicAdapter, AnthropicHook
from .base import Adapter, ContextHook, invalid
from .openai import OpenAIAdapter, OpenAIHook
from .pi import PiAdapter, PiHook, host_tool_observer

if TYPE_CHECKING:
    from ..files.file_tools import FileTools

__all__ = ["HARNESSES", "NAMES", "Harness", "harness"]

OnSync = Callable[[Session, SyncReport], None]


def _same(values: list[Any]) -> list[Any]:
    return values


@dataclass(frozen=True)
class Harness:
    """One harness context_os can sit in."""

    name: str
    make_hook: Callable[[Session, FileTools | None, OnSync | None], ContextHook[Any]]
    """``(session, files, on_sync) -> hook``."""
    decode: Callable[[list[Any]], list[Any]] = _same
    """Messages as JSON (from a wire) → the harness's messages."""
    encode: Callable[[list[Any]], list[Any]] = _same
    """The harness's messages → JSON."""
    tool_json: Callable[[list[Any]], list[Any]] = _same
    """The hook's tool definitions → JSON."""
    system_apart: bool = False
    """The system prompt travels beside the messages (Anthropic's ``system``), not among them."""
    adapter_class: Callable[[], type[Adapter[Any]]] | None = None
    """Its adapter's class (the hook's ``adapter_class``), for reading its messages without a
    session (``adapter()``)."""

    def adapter(self) -> Adapter[Any]:
        """A new adapter of this harness's messages (a replay's check of a transcript)."""
        assert self.adapter_class is not None, self.name
        return self.adapter_class()()

    def hook(
        self, session: Session, *, files: FileTools | None = None, on_sync: OnSync | None = None
    ) -> ContextHook[Any]:
        """The hook of ``session`` for this harness; with ``files``, the file tools too."""
        return self.make_hook(session, files, on_sync)


def _pi_hook(session: Session, files: FileTools | None, on_sync: OnSync | None) -> ContextHook[Any]:
    # Pi runs its own edit, write and bash: with files, their objects follow what those did on disk
    if on_sync is None and files is not None:
        on_sync = host_tool_observer(files)
    return PiHook(session, files=files, on_sync=on_sync)


def _pydantic_ai_hook(session: Session, files: FileTools | None, on_sync: OnSync | None) -> ContextHook[Any]:
    from .pydantic_ai import PydanticAIHook

    return PydanticAIHook(session, files=files, on_sync=on_sync)


def _pydantic_ai_adapter() -> type[Adapter[Any]]:
    from .pydantic_ai import PydanticAIAdapter

    return PydanticAIAdapter


def _pydantic_ai_decode(messages: list[Any]) -> list[Any]:
    from pydantic import ValidationError
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    try:
        return list(ModelMessagesTypeAdapter.validate_python(messages))
    except ValidationError as e:
        raise invalid(e) from None


def _pydantic_ai_encode(messages: list[Any]) -> list[Any]:
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    out: list[Any] = ModelMessagesTypeAdapter.dump_python(messages, mode="json")
    return out


def _pydantic_ai_tools(definitions: list[Any]) -> list[Any]:
    return [{"name": d.name, "description": d.description, "parameters": d.parameters_json_schema} for d in definitions]


def _langchain_hook(session: Session, files: FileTools | None, on_sync: OnSync | None) -> ContextHook[Any]:
    from .langchain import LangChainHook

    return LangChainHook(session, files=files, on_sync=on_sync)


def _langchain_adapter() -> type[Adapter[Any]]:
    from .langchain import LangChainAdapter

    return LangChainAdapter


def _langchain_decode(messages: list[Any]) -> list[Any]:
    """``messages_to_dict``'s form (``{"type": "human", "data": {...}}``) → LangChain messages."""
    from langchain_core.messages import messages_from_dict
    from pydantic import ValidationError

    out = []
    for i, m in enumerate(messages):
        try:
            out.extend(messages_from_dict([m]))
        except ValidationError as e:
            raise invalid(e, i) from None
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            detail = f"missing {e}" if isinstance(e, KeyError) else str(e)
            raise MalformedMessage(
                f"not a LangChain message as messages_to_dict writes one: {detail}", index=i
            ) from None
    return out


def _langchain_encode(messages: list[Any]) -> list[Any]:
    from langchain_core.messages import messages_to_dict

    return [{**m, "data": {k: v for k, v in m["data"].items() if k != "artifact"}} for m in messages_to_dict(messages)]


HARNESSES: dict[str, Harness] = {
    h.name: h
    for h in (
        Harness("openai", lambda s, f, o: OpenAIHook(s, files=f, on_sync=o), adapter_class=lambda: OpenAIAdapter),
        Harness(
            "anthropic",
            lambda s, f, o: AnthropicHook(s, files=f, on_sync=o),
            system_apart=True,
            adapter_class=lambda: AnthropicAdapter,
        ),
        Harness("pi", _pi_hook, adapter_class=lambda: PiAdapter),
        Harness(
            "pydantic-ai",
            _pydantic_ai_hook,
            decode=_pydantic_ai_decode,
            encode=_pydantic_ai_encode,
            tool_json=_pydantic_ai_tools,
            adapter_class=_pydantic_ai_adapter,
        ),
        Harness(
            "langchain",
            _langchain_hook,
            decode=_langchain_decode,
            encode=_langchain_encode,
            adapter_class=_langchain_adapter,
        ),
    )
}
"""Every harness, by the name sessions record (``session.open {harness}``, ``Transcript.harness``)."""

NAMES: tuple[str, ...] = tuple(HARNESSES)

_OPTIONAL = {"pydantic-ai": "pydantic-ai-slim>=2.64,<3", "langchain": "langchain-core>=1.8,<2"}
"""The harnesses whose adapter needs a package of its own: what to install for each."""


def harness(name: str) -> Harness:
    """The harness called ``name``; ``ConfigError`` naming the known ones otherwise."""
    found = HARNESSES.get(name)
    if found is None:
        raise ConfigError(f"unknown harness {name!r}; known: {', '.join(NAMES)}")
    optional = _OPTIONAL
    if name in optional:
        try:
            importlib.import_module(f".{name.replace('-', '_')}", __package__)
        except ImportError as e:
            hint = "" if "pip install" in str(e) else f" (pip install '{optional[name]}')"
            raise ConfigError(f"the {name} harness cannot be used: {e}{hint}") from None
    return found
