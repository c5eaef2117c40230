"""The directory an agent says it works in, read from its request (``ctxos proxy --workspace auto``).

Coding agents name their working directory in what they send the model, each its own way
(``harness.codex_tools.named_cwds``: Claude Code, OpenCode, Pi, Codex, Gemini CLI, Qwen Code). A
proxy on the agent's own machine can take that directory for the conversation's workspace: the
agent's files are then read from the disk and tracked as they change, as with ``--workspace
DIR``, each conversation in its own directory.

Only a directory that exists here is taken, and never the file system's root or the home
directory itself (a tracker would watch everything under it). Read from the request's system
prompt and the messages before the model's first turn, never from what a tool returned."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..harness.codex_tools import named_cwds

__all__ = ["AUTO", "agent_directory"]

AUTO = "auto"
"""``--workspace auto``: each conversation's workspace is the directory its agent names."""

_FIRST = 8
"""At most this many messages are read, from the first, and none from the model's first turn on
(the agent's context and the user's task come before it; tools' outputs after it)."""
_MAX_CHARS = 200_000
"""Of their text at most this much is read (a first message may hold a whole file)."""


def agent_directory(api: str, body: Mapping[str, Any]) -> Path | None:
    """The directory the agent of this request says it works in, resolved, if it is one of this
    machine's that may be a workspace (module docstring); None otherwise."""
    read = 0
    for text in _texts(api, body):
        text = text[: _MAX_CHARS - read]
        read += len(text)
        for named in named_cwds(text):
            found = _usable(named)
            if found is not None:
                return found
        if read >= _MAX_CHARS:
            break
    return None


def _usable(named: str) -> Path | None:
    path = Path(named)
    if not path.is_absolute():
        return None
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not resolved.is_dir() or resolved == Path(resolved.anchor) or resolved == Path.home().resolve():
        return None
    return resolved


def _texts(api: str, body: Mapping[str, Any]) -> Iterator[str]:
    """The request's system prompt, then its first messages, as texts."""
    if api == "gemini" and isinstance(body.get("request"), Mapping):  # Code Assist: in an envelope
        body = body["request"]
    if api == "anthropic":
        yield from _strings(body.get("system"))
        messages = body.get("messages")
    elif api == "responses":
        yield from _strings(body.get("instructions"))
        messages = body.get("input")
    elif api == "gemini":
        yield from _strings(body.get("systemInstruction") or body.get("system_instruction"))
        messages = body.get("contents")
    else:
        messages = body.get("messages")
    if isinstance(messages, str):
        yield messages
    elif isinstance(messages, list):
        for m in messages[:_FIRST]:
            if not isinstance(m, Mapping) or _answered(m):
                return
            yield from _strings(m.get("content", m.get("parts")))


def _answered(m: Mapping[str, Any]) -> bool:
    """Whether a message is the model's (a reply, a call) or a tool's output: the conversation
    has begun, and what comes from here on is not the agent's own context."""
    if m.get("role") in ("assistant", "model", "tool", "function"):
        return True
    kind = m.get("type", "message")  # (a Responses item)
    return kind != "message" or (
        isinstance(m.get("content"), list)
        and any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in m["content"])
    )


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """The texts of a message's content: a string, text blocks or parts."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping) and depth < 4:
        text = value.get("text")
        if isinstance(text, str):
            yield text
        elif "parts" in value:
            yield from _strings(value["parts"], depth + 1)
    elif isinstance(value, list) and depth < 4:
        for v in value:
            yield from _strings(v, depth + 1)
