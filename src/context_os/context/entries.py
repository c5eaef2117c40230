"""Neutral chat entries: the harness-independent form of a conversation message.

Adapters translate harness messages into ``Incoming`` messages and rendered ``Msg`` back; the
context engine only ever sees these shapes. Entries are plain dicts (they are stored inside chat
pages as JSON), typed here for readers and for mypy.

This module must never know about any specific harness.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from ..hashing import compact_json

__all__ = ["ROLES", "Entry", "Incoming", "Msg", "ToolCall", "msg_chars"]

ROLES = ("system", "user", "assistant", "tool")
Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(TypedDict):
    id: str
    """The harness's tool call id."""
    name: str
    arguments: Any
    """As the harness gave them (OpenAI: a JSON string; Anthropic: an object)."""
    object: NotRequired[str]
    """The toolcall object holding this call's output (set on ingest)."""


class Incoming(TypedDict):
    """One harness message, translated by an adapter; tool output still inline."""

    role: Role
    text: str | None
    """Text content (for ``tool``: the full tool output)."""
    tool_calls: NotRequired[list[ToolCall]]
    tool_call_id: NotRequired[str]
    """For ``tool``: the call this is the result of."""
    tool_name: NotRequired[str]
    is_error: NotRequired[bool]
    ts: NotRequired[int]
    """When the message happened (epoch ms), if the harness knows."""
    extra: NotRequired[dict[str, Any]]
    """Harness fields context_os does not interpret, kept verbatim for rendering back."""
    extra_chars: NotRequired[int]
    """Characters of ``extra`` the model receives too (e.g. reasoning a harness sends back, images:
    ``tokens.image_tokens``): counted in token estimates, never managed. A tool result's counts
    its output's blocks, with its object's tokens, and only while it shows them (in full)."""
    block_chars: NotRequired[int]
    """Characters of ``extra`` the model receives at every call, never left off: an assistant
    message's blocks of the provider's own tools (an Anthropic server tool's call and its results,
    web pages and code output), counted in token estimates, sent as they came."""
    h: str
    """Hash of the raw harness message (cursor / rewrite detection)."""


class Entry(TypedDict):
    """One message as stored in a chat page. Tool output is *not* here: ``object`` points to it."""

    i: int
    role: Role
    text: str | None
    h: str
    tool_calls: NotRequired[list[ToolCall]]
    tool_call_id: NotRequired[str]
    object: NotRequired[str]
    ts: NotRequired[int]
    extra: NotRequired[dict[str, Any]]
    extra_chars: NotRequired[int]
    block_chars: NotRequired[int]
    ft: NotRequired[int]
    """Tokens this message costs in the full, unmanaged transcript (tool output included)."""


class Msg(TypedDict):
    """One rendered message, neutral; adapters turn it into harness format."""

    role: Role
    text: str | None
    tool_calls: NotRequired[list[ToolCall]]
    tool_call_id: NotRequired[str]
    tool_name: NotRequired[str]
    """For ``tool``: the name of the tool that produced the result."""
    is_error: NotRequired[bool]
    extra: NotRequired[dict[str, Any]]
    extra_chars: NotRequired[int]
    block_chars: NotRequired[int]
    drop_thinking: NotRequired[bool]
    """For ``assistant``: render it without the reasoning its ``extra`` holds (past the session's
    thinking horizon)."""


def _args_chars(arguments: Any) -> int:
    if isinstance(arguments, str):
        return len(arguments)
    return len(compact_json(arguments))


def msg_chars(msg: Msg | Incoming) -> int:
    """Characters a message puts in front of the model: text, tool call names and arguments, and
    the ``extra_chars`` and ``block_chars`` the adapter counted in its harness-only fields."""
    n = len(msg.get("text") or "") + int(msg.get("extra_chars") or 0) + int(msg.get("block_chars") or 0)
    for call in msg.get("tool_calls") or ():
        n += len(call["name"]) + _args_chars(call["arguments"])
    return n
