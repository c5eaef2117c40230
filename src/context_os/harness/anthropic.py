"""Anthropic Messages API: the ``messages`` list (and ``system``) a loop sends to ``messages.create``.

One Anthropic message may hold several neutral ones: a user message carries every tool result
of a turn as ``tool_result`` blocks, maybe followed by text. This adapter splits such a message
into one neutral ``tool`` message per result (in block order), then one ``user`` message for the
remaining blocks, if any. Everything else is one neutral message per Anthropic message.

Rendering goes one neutral message at a time (a tool result becomes a user message holding one
``tool_result`` block), and ``finalize`` merges consecutive user or assistant messages into one
turn, ``tool_result`` blocks first, as the API requires. So the volatile ``<context_os>`` message
that follows a user message of tool results joins it as a text block after the results.

What the API needs verbatim is kept verbatim: assistant blocks (thinking and redacted_thinking
with their signatures, server tool blocks, citations) are stored in ``extra`` and
rendered back in their order; only a ``tool_use`` block's ``input`` comes from the neutral tool
call (so a collapsed call's long arguments collapse with its result). User content blocks
(images, documents, text) are kept as given. The reasoning blocks are counted (``extra_chars``)
and left off an assistant message past the session's thinking horizon (``drop_thinking``: the
policy's ``keep_thinking_turns``), as the API's own ``clear_thinking`` edit does; the engine keeps
them on a message with neither text nor calls (its content must not be empty).

Cache breakpoints (``cache_control`` on a message's block) say where the client wants its prompt
cached, not what the conversation is: a client such as Claude Code moves its one breakpoint to the
newest message at every call. The adapter reads messages without them (a message's hash and what
is stored of it leave them out, so a moved breakpoint is not a rewritten history), and
``AnthropicHook`` puts the client's back on what it sends, as many as the client's last
``MARKED_TAIL`` messages hold, at most two: one on the last block that is the conversation's own
(before context_os's blocks at the end, which change more often), a second on the very last
block, each with the value of the client's last breakpoint; never on a reasoning block or an
empty text, which the API refuses to mark. Breakpoints in ``system`` stay where they are.

The top-level ``system`` parameter is not part of ``messages``: ``AnthropicHook.transform`` takes
it, records it as the first message of the session (so frames show it), and returns it as
``system`` again. ``system``-role messages inside ``messages`` are kept where they are.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from pydantic import BaseModel

from ..context.entries import Entry, Incoming, Msg, ToolCall
from ..context.view import TAIL_OPEN
from ..errors import HashError, InvalidOutput, MalformedMessage
from ..hashing import hash_value
from ..tokens import CHARS_PER_TOKEN, document_tokens, image_tokens, value_chars
from .base import (
    Adapter,
    ContextHook,
    MergeCache,
    check_message_list,
    check_utf8,
    fallback_hash,
    message_of,
    renamed,
    sorted_keys,
)
from .pairing import CLOSES, Pairing, Reading, check_end, pairing_problems

if TYPE_CHECKING:
    pass

__all__ = [
    "ANTHROPIC_PAIRING",
    "SYSTEM_PARAM",
    "AnthropicAdapter",
    "AnthropicHook",
    "AnthropicRequest",
    "merge_turns",
    "validate_anthropic",
    "without_cache_marks",
]

MARKED_TAIL = 4
"""How many of the client's last messages its cache breakpoints are looked for in (Anthropic allows
four in a request; clients put theirs on the newest messages)."""
SYSTEM_PARAM = "context_os_system_param"
"""Key marking the pseudo-message that carries the top-level ``system`` parameter in the session."""

_ROLES = ("user", "assistant", "system")
_MANAGED = {"role", "content"}


class AnthropicRequest(TypedDict):
    """What ``AnthropicHook.transform_request`` returns: keyword arguments for ``messages.create``
    (its items typed ``Any``, so that a type checker lets them through as the SDK's own
    ``MessageParam`` and ``TextBlockParam``)."""

    messages: list[Any]
    system: NotRequired[str | list[Any]]
    """Present when a ``system`` was given (as given, or as it was last recorded)."""


_REASONING = ("thinking", "redacted_thinking")
_NO_CONTENT = "ctxos_no_content"
"""Kept in a tool result's ``extra`` when its block came without ``content`` (optional in the API):
rendered without one while its text is still empty, not with ``"content": ""``."""
"""Assistant blocks of the model's reasoning (extended thinking), as the API sends them back."""


def _reasoning_chars(block: Mapping[str, Any]) -> int:
    """What a reasoning block puts in front of the model: its text (the encrypted ``data`` of a
    redacted one); the signature is not counted."""
    if block.get("type") == "thinking":
        return len(str(block.get("thinking") or ""))
    if block.get("type") == "redacted_thinking":
        return len(str(block.get("data") or ""))
    return 0


def server_block(block: Any) -> bool:
    """Whether a block is a server tool's (a tool the provider runs: web search, web fetch, code
    execution): its call (``server_tool_use``, ``mcp_tool_use``) or its result (a ``*_tool_result``
    other than a client tool's ``tool_result``)."""
    kind = block.get("type") if isinstance(block, Mapping) else None
    if not isinstance(kind, str):
        return False
    return kind in ("server_tool_use", "mcp_tool_use") or (kind.endswith("_tool_result") and kind != "tool_result")


def _media_chars(blocks: Sequence[Mapping[str, Any]]) -> int:
    """What the image, document and search result blocks among ``blocks`` put in front of the
    model, in characters: a base64 image by its size, any other source at the most
    (``tokens.image_tokens``); a document by its pages, or its text (``tokens.document_tokens``);
    a search result (a retrieval tool's, with citations) by its source, title and texts; a
    browser's state (a browser tool's result: its tabs and what the call changed, which the
    provider renders as text for the model) by their JSON."""
    n = 0
    for b in blocks:
        source = b.get("source")
        if b.get("type") == "browser_state":
            n += len(json.dumps([b.get("tabs"), b.get("state_changes")], default=str, ensure_ascii=False))
            continue
        if b.get("type") == "search_result":
            content = b.get("content")
            texts = [t for t in content if isinstance(t, Mapping)] if isinstance(content, list) else []
            n += len(str(source or "")) + len(str(b.get("title") or ""))
            n += sum(len(str(t.get("text") or "")) for t in texts if t.get("type") == "text")
            continue
        source = source if isinstance(source, Mapping) else {}
        data = source.get("data") if source.get("type") in ("base64", "text") else None
        if b.get("type") == "image":
            n += image_tokens(data if isinstance(data, str) else None) * CHARS_PER_TOKEN
        elif b.get("type") == "document":
            n += _document_chars(source)
    return n


def _document_chars(source: Mapping[str, Any]) -> int:
    """A document block's source in characters: a text source its text, a content source its
    blocks' texts and images, a base64 one its pages (``tokens.document_tokens``)."""
    kind, data = source.get("type"), source.get("data")
    if kind == "text" and isinstance(data, str):
        return len(data)
    if kind == "content":
        content = source.get("content")
        if isinstance(content, str):
            return len(content)
        parts = [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []
        return sum(len(str(b.get("text") or "")) for b in parts if b.get("type") == "text") + _media_chars(parts)
    media = source.get("media_type")
    data = data if kind == "base64" and isinstance(data, str) else None
    return document_tokens(data, media if isinstance(media, str) else None) * CHARS_PER_TOKEN


def _plain(value: Any) -> Any:
    """SDK objects (e.g. ``response.content`` blocks passed back as assistant content) → dicts."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    return value


def _blocks(content: Any, index: int, *, marks: bool = False) -> list[dict[str, Any]] | None:
    """The content blocks of a message (None for string content), as plain dicts; with
    ``marks``, their cache breakpoints kept (a system message's), else left out."""
    if isinstance(content, str):
        return None
    if not isinstance(content, list | tuple):
        raise MalformedMessage(
            f"content must be a string or a list of content blocks, not {type(content).__name__}",
            index=index,
            field="content",
        )
    out: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        block = _plain(block)
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise MalformedMessage("a content block must be an object with a type", index=index, field=f"content[{j}]")
        out.append(dict(block) if marks else _uncached(block))
    return out


def _check_text(value: Any, index: int, field: str) -> str:
    if not isinstance(value, str):
        raise MalformedMessage(f"must be a string, not {type(value).__name__}", index=index, field=field)
    return check_utf8(value, index, field)


def _joined_text(blocks: Sequence[Mapping[str, Any]], index: int, field: str) -> str:
    texts = []
    for j, b in enumerate(blocks):
        if b.get("type") == "text":
            texts.append(_check_text(b.get("text"), index, f"{field}[{j}].text"))
    return "\n".join(texts)


def _is_result(block: Any) -> bool:
    if type(block) is dict:  # the common case, without the slower isinstance checks
        return block.get("type") == "tool_result"
    if isinstance(block, BaseModel):
        return getattr(block, "type", None) == "tool_result"
    return isinstance(block, Mapping) and block.get("type") == "tool_result"


CLEARED = "[Old tool result content cleared]"
"""What Claude Code puts in place of an old tool result it clears from its history; it saves a
large one to a file and puts a ``<persisted-output>`` pointer in its place."""
_PERSISTED = "<persisted-output>"


def _cleared(block: Any) -> bool:
    """Whether a tool result block is one the client cleared (``CLEARED``, ``<persisted-output>``)."""
    if not _is_result(block):
        return False
    content = block.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return isinstance(content, str) and (content.strip() == CLEARED or content.lstrip().startswith(_PERSISTED))


def _tool_ids(content: Any, kind: str, key: str) -> list[str]:
    if not isinstance(content, list | tuple):  # a string (or not content at all: validate says so)
        return []
    blocks = (_plain(x) for x in content)
    return [str(b.get(key)) for b in blocks if isinstance(b, Mapping) and b.get("type") == kind]


def _pairing(m: Mapping[str, Any]) -> Reading:
    """Every call must be answered in the user turn right after its assistant turn: consecutive
    user messages count as one turn (the API merges them), so each may carry results."""
    role = m.get("role")
    if role == "user":
        return Reading(True, _tool_ids(m.get("content"), "tool_result", "tool_use_id"))
    if role == "assistant":
        return Reading(False, opened=_tool_ids(m.get("content"), "tool_use", "id"), is_response=True)
    return CLOSES


ANTHROPIC_PAIRING: Pairing[Mapping[str, Any]] = Pairing(
    _pairing,
    call="tool_use",
    result="tool_result",
    orphan="tool_result {id!r} answers no tool_use of the turn before",
)
"""How Messages API messages pair ``tool_use`` blocks with ``tool_result`` blocks."""


class AnthropicAdapter(Adapter[dict[str, Any]]):
    """Translates Anthropic Messages API message dicts (``MessageParam``)."""

    name = "anthropic"
    pairing = ANTHROPIC_PAIRING

    def __init__(self) -> None:
        self._merges: MergeCache[dict[str, Any]] = MergeCache()
        self._before_clearing: dict[tuple[str, ...], str] = {}
        """The hash of each message of tool results as first seen, by its results' call ids: the
        hash it keeps once the client clears some of them (``_cleared``)."""

    def resume(self, entries: Sequence[Entry]) -> None:
        """The hash each message of tool results had before any clearing, from the stored entries
        of a resumed session: a client that cleared results while this process was not running
        (a restarted proxy) sends the same history, not a rewritten one."""
        results: dict[str, list[str]] = {}
        for e in entries:
            if e["role"] == "tool" and e.get("tool_call_id"):
                results.setdefault(message_of(e["h"]), []).append(str(e["tool_call_id"]))
        for h, ids in results.items():
            self._before_clearing.setdefault(tuple(ids), h)

    def hash_message(self, message: dict[str, Any]) -> str:
        """The message's hash, its cache breakpoints left out (a client moves them on); a message
        of tool results keeps the hash it had before the client cleared them (Claude Code's
        microcompact): the stored results stand, and what context_os collapses is its to say."""
        try:
            plain = dict(message)
            content = plain.get("content")
            results: tuple[str, ...] = ()
            if not isinstance(content, str | None):
                keep = plain.get("role") == "system"  # a breakpoint a client moves on is no content
                plain["content"] = blocks = [_unset(_plain(b) if keep else _uncached(_plain(b))) for b in content]
                results = tuple(str(b.get("tool_use_id")) for b in blocks if _is_result(b))
            if results and any(_cleared(b) for b in plain["content"]):
                known = self._before_clearing.get(results)
                if known is not None:
                    return known
                return hash_value(plain)
            h = hash_value(plain)
            if results:
                self._before_clearing[results] = h
            return h
        except (HashError, TypeError, ValueError, RecursionError):
            return fallback_hash(message)  # unhashable input is rejected by translate

    def count(self, message: dict[str, Any]) -> int:
        if not isinstance(message, Mapping) or message.get("role") != "user":
            return 1
        content = message.get("content")
        if isinstance(content, str) or not isinstance(content, list | tuple):
            return 1
        results = sum(1 for b in content if _is_result(b))
        return results + (1 if results < len(content) or not results else 0)

    def translate(self, message: dict[str, Any], index: int) -> list[Incoming]:
        if not isinstance(message, Mapping):
            what = type(message).__name__
            hint = (
                f' (an SDK {what} is the API\'s answer, with fields no request takes: append {{"role": '
                f'{what.lower()}.role, "content": {what.lower()}.content}})'
                if hasattr(message, "role") and hasattr(message, "content")
                else ""
            )
            raise MalformedMessage(f"a message must be an object, not {what}{hint}", index=index)
        role = message.get("role")
        if role not in _ROLES:
            raise MalformedMessage(f"unknown role {role!r} (expected one of {list(_ROLES)})", index=index, field="role")
        if "content" not in message:
            raise MalformedMessage("a message needs content", index=index, field="content")
        content = message["content"]
        blocks = _blocks(content, index, marks=role == "system")
        extra = {k: v for k, v in message.items() if k not in _MANAGED}
        if SYSTEM_PARAM in extra and (index != 0 or role != "system"):
            raise MalformedMessage(f"{SYSTEM_PARAM!r} is reserved for the system parameter", index=index)
        if role == "assistant":
            return [self._assistant(content, blocks, extra, index)]
        text = _check_text(content, index, "content") if blocks is None else _joined_text(blocks, index, "content")
        if role == "system":
            if blocks is not None:
                for j, b in enumerate(blocks):
                    if b["type"] != "text":
                        raise MalformedMessage(
                            "system content may only hold text blocks", index=index, field=f"content[{j}]"
                        )
                extra["content"] = blocks
            return [_incoming("system", text, extra)]
        if blocks is None:
            return [_incoming("user", text, extra)]
        out = [self._result(b, index, j) for j, b in enumerate(blocks) if b["type"] == "tool_result"]
        rest = [b for b in blocks if b["type"] != "tool_result"]
        if rest or not out:
            rest_text = _joined_text(rest, index, "content")
            user = _incoming("user", rest_text, {**extra, "content": rest})
            if media := _media_chars(rest):
                user["extra_chars"] = media
            out.append(user)
        return out

    def _assistant(
        self, content: Any, blocks: list[dict[str, Any]] | None, extra: dict[str, Any], index: int
    ) -> Incoming:
        if blocks is None:
            return _incoming("assistant", _check_text(content, index, "content"), extra)
        calls: list[ToolCall] = []
        kept: list[dict[str, Any]] = []
        for j, b in enumerate(blocks):
            if b["type"] == "tool_use":
                call_id, name, args = b.get("id"), b.get("name"), b.get("input", {})
                if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                    raise MalformedMessage(
                        "a tool_use block needs an id and a name", index=index, field=f"content[{j}]"
                    )
                if not isinstance(args, Mapping):
                    raise MalformedMessage(
                        f"tool_use input must be an object, not {type(args).__name__}",
                        index=index,
                        field=f"content[{j}].input",
                    )
                calls.append(
                    {
                        "id": call_id,
                        "name": name,
                        "arguments": sorted_keys(dict(args), index=index, field=f"content[{j}].input"),
                    }
                )
                # the input lives in the neutral call (where the engine may elide it)
                b = {k: v for k, v in b.items() if k != "input"}
            kept.append(b)
        m = _incoming("assistant", _joined_text(blocks, index, "content"), {**extra, "content": kept})
        if calls:
            m["tool_calls"] = calls
        # the model's reasoning, sent back with the message: counted (left off past the thinking horizon)
        if reasoning := sum(_reasoning_chars(b) for b in kept):
            m["extra_chars"] = reasoning
        # the provider's own tools' calls and results (web pages, code output): counted, sent whole
        if served := sum(value_chars(b) for b in kept if server_block(b)):
            m["block_chars"] = served
        return m

    def _result(self, block: dict[str, Any], index: int, j: int) -> Incoming:
        field = f"content[{j}]"
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            raise MalformedMessage(
                "a tool_result needs a tool_use_id string", index=index, field=f"{field}.tool_use_id"
            )
        raw = block.get("content", "")
        extra = {k: v for k, v in block.items() if k not in ("type", "tool_use_id", "content", "cache_control")}
        media = 0
        if raw is None or isinstance(raw, str):
            text = _check_text(raw or "", index, f"{field}.content")
        else:
            parts = _blocks(raw, index)
            assert parts is not None
            text = _joined_text(parts, index, f"{field}.content")
            # the output as given (images, several blocks): shown only while the result is shown in full
            extra["full"] = {"content": parts}
            media = _media_chars(parts)
        is_error = block.get("is_error", False)
        if not isinstance(is_error, bool):
            raise MalformedMessage("is_error must be a boolean", index=index, field=f"{field}.is_error")
        if "content" not in block:  # rendered without one, as it came
            extra[_NO_CONTENT] = True
        m: Incoming = {"role": "tool", "text": text, "tool_call_id": call_id, "h": ""}
        if media:
            m["extra_chars"] = media  # its images: counted while the result shows in full
        if is_error:
            m["is_error"] = True
        if extra:
            m["extra"] = extra
        return m

    def render_msg(self, msg: Msg) -> dict[str, Any]:
        extra = dict(msg.get("extra") or {})
        role = msg["role"]
        text = msg["text"] or ""
        if role == "tool":
            full = extra.pop("full", None)
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": msg.get("tool_call_id", "")}
            block["content"] = full["content"] if isinstance(full, Mapping) and "content" in full else text
            if extra.pop(_NO_CONTENT, False) and block["content"] == "":
                del block["content"]
            if msg.get("is_error"):
                block["is_error"] = True
            block.update(extra)
            return {"role": "user", "content": [block]}
        content: Any = extra.pop("content", None)
        if role == "assistant":
            if msg.get("drop_thinking") and isinstance(content, list):  # past the thinking horizon
                content = [b for b in content if b.get("type") not in _REASONING]
            content = _assistant_content(content, text, msg.get("tool_calls") or [])
        elif content is None:
            content = text
        out: dict[str, Any] = {"role": role, "content": content}
        out.update(extra)
        return out

    def finalize(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = merge_turns(messages, self._merges)
        self._merges.turn()
        return out

    def tool_definitions(self, tools: list[dict[str, Any]]) -> list[Any]:
        return [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in tools]


def _incoming(role: str, text: str | None, extra: dict[str, Any]) -> Incoming:
    m: Incoming = {"role": role, "text": text, "h": ""}  # type: ignore[typeddict-item]
    if extra:
        m["extra"] = extra
    return m


def _assistant_content(kept: Any, text: str, calls: Sequence[ToolCall]) -> Any:
    """Assistant blocks as recorded, each ``tool_use`` given the (maybe elided) neutral input."""
    if not isinstance(kept, list):
        if not calls:
            return text
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        return blocks + [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]} for c in calls]
    inputs = {c["id"]: c["arguments"] for c in calls}
    out = []
    for b in kept:
        if b.get("type") == "tool_use" and b.get("id") in inputs:
            b = {**b, "input": inputs.pop(b["id"])}
        out.append(b)
    return out


def _as_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content)


def _merged(run: list[dict[str, Any]]) -> dict[str, Any]:
    blocks = [b for m in run for b in _as_blocks(m.get("content"))]
    if run[0]["role"] == "user":
        blocks = [b for b in blocks if _is_result(b)] + [b for b in blocks if not _is_result(b)]
    merged = {k: v for k, v in run[0].items() if k != "content"}
    merged["content"] = blocks
    return merged


def merge_turns(
    messages: Sequence[dict[str, Any]], cache: MergeCache[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Consecutive user (or assistant) messages merged into one turn, ``tool_result`` blocks first
    in each user turn. Messages that need no merging are returned as they are (not copied)."""
    start, out = cache.resume(messages) if cache is not None else (0, [])
    run: list[dict[str, Any]] = []

    def flush() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            out.append(cache.get(run, _merged) if cache is not None else _merged(run))
        run.clear()

    for k in range(start, len(messages)):
        m = messages[k]
        role = m.get("role")
        if run and (role != run[0].get("role") or role == "system"):
            flush()
        if not run and cache is not None:
            cache.cut(k, len(out))
        run.append(m)
    flush()
    if cache is not None:
        cache.done(messages, out)
    return out


def validate_anthropic(messages: Sequence[Mapping[str, Any]], *, last_input_role: str | None = None) -> None:
    """Raise ``InvalidOutput`` unless every ``tool_use`` is answered in the next user turn (and
    every ``tool_result`` has its call), turns alternate, results lead their user message, and
    the list ends on a user turn (on an assistant turn only as a prefill, where the harness
    itself ended on one)."""
    problems = pairing_problems(ANTHROPIC_PAIRING, messages) + check_end(
        ANTHROPIC_PAIRING, messages, last_input_role=last_input_role
    )
    for k in range(1, len(messages)):
        role = messages[k].get("role")
        if role != "system" and role == messages[k - 1].get("role"):
            problems.append(f"message {k}: two {role} messages in a row")
    for k, m in enumerate(messages):
        if not isinstance(m.get("content"), str | list | tuple):
            problems.append(f"message {k}: content must be a string or a list of content blocks")
        elif m.get("role") == "user" and not isinstance(m.get("content"), str):
            kinds = [_is_result(b) for b in m["content"]]
            if kinds != sorted(kinds, reverse=True):
                problems.append(f"message {k}: text before tool_result blocks")
    if problems:
        raise InvalidOutput("; ".join(problems[:5]))


class AnthropicHook(ContextHook[Any]):
    """``transform_context`` for loops that speak the Anthropic Messages API.

    Prefer ``transform(messages, system=...)``: it returns ``{"messages": ..., "system": ...}``,
    ready to splat into ``client.messages.create(**request, model=..., max_tokens=...)``.
    """

    adapter_class = AnthropicAdapter
    _system: dict[str, Any] | None = None
    """The system message of the last call: the same object again while the prompt is the same,
    so that the hook sees the list as appended to, not rewritten (``_Seen``)."""

    def transform_request(
        self, messages: Sequence[Any], system: str | Sequence[Mapping[str, Any]] | None = None
    ) -> AnthropicRequest:
        """Assemble the context for ``messages`` and the top-level ``system`` parameter."""
        check_message_list(messages)
        harness: list[dict[str, Any]] = list(messages)
        if system is not None:
            if isinstance(system, str):
                content: Any = system
            else:
                content = [dict(b) for b in system if isinstance(b, Mapping)] if isinstance(system, Sequence) else None
                if content is None or len(content) != len(system):
                    raise MalformedMessage("must be a string or a list of text blocks", field="system")
            prompt = {"role": "system", "content": content, SYSTEM_PARAM: True}
            if prompt != self._system:
                self._system = prompt
            harness.insert(0, self._system)
        try:
            out = self.transform_context(harness)
        except MalformedMessage as e:
            if system is None or e.index is None:
                raise
            # name the caller's message, not our list with the system prompt in front
            index, field = (e.index - 1, e.field) if e.index else (None, "system" + (f".{e.field}" if e.field else ""))
            raise renamed(e, index, field) from None
        request: AnthropicRequest = {"messages": out}
        if out and out[0].get(SYSTEM_PARAM):
            request["system"] = out[0]["content"]
            request["messages"] = out[1:]
        if any(m.get(SYSTEM_PARAM) for m in request["messages"]):
            raise InvalidOutput("the system parameter was rendered after the first message (a bug: please report)")
        return request

    def transform_context(self, messages: Sequence[Any]) -> list[Any]:
        """``ContextHook.transform_context``, the client's cache breakpoints put back on what it
        sends (module docstring)."""
        return _with_cache_marks(super().transform_context(messages), _recent_marks(messages))

    async def atransform_request(
        self, messages: Sequence[Any], system: str | Sequence[Mapping[str, Any]] | None = None
    ) -> AnthropicRequest:
        """The same, for async loops: store work runs in a thread, off the event loop."""
        return await asyncio.to_thread(self.transform_request, list(messages), system)


def _uncached(block: Any) -> Any:
    """A content block without its ``cache_control`` (nor those of the blocks a tool result holds)."""
    if not isinstance(block, Mapping):
        return block
    out = {k: v for k, v in block.items() if k != "cache_control"}
    inner = out.get("content")
    if out.get("type") == "tool_result" and isinstance(inner, list):
        out["content"] = [_uncached(b) for b in inner]
    return out


def _unset(block: Any) -> Any:
    """A content block as its hash reads it: without the fields that are null (nor those of the
    blocks a tool result holds). An SDK block is read without them (``_plain``), and the same
    block saved with the SDK's ``model_dump()`` or ``model_dump_json()`` and loaded again has them
    (``"citations": null``): both are one message, not a rewritten history."""
    if not isinstance(block, Mapping):
        return block
    out = {k: v for k, v in block.items() if v is not None}
    inner = out.get("content")
    if out.get("type") == "tool_result" and isinstance(inner, list):
        out["content"] = [_unset(b) for b in inner]
    return out


def _marks(block: Any) -> list[Any]:
    """The ``cache_control`` values of a block and of the blocks a tool result holds, in order."""
    if not isinstance(block, Mapping):
        return []
    inner = block.get("content") if block.get("type") == "tool_result" else None
    found = [m for b in inner for m in _marks(b)] if isinstance(inner, list) else []
    return found + ([block["cache_control"]] if "cache_control" in block else [])


def without_cache_marks(messages: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """``messages`` with their blocks' cache breakpoints taken off (a message holding none is
    the same object), and the breakpoints' values in order. System messages keep theirs."""
    plain: list[Any] = []
    marks: list[Any] = []
    for m in messages:
        content = m.get("content") if isinstance(m, Mapping) and m.get("role") != "system" else None
        found = [v for b in content for v in _marks(b)] if isinstance(content, list) else []
        if found:
            marks += found
            m = {**m, "content": [_uncached(b) for b in content]}  # type: ignore[union-attr]
        plain.append(m)
    return plain, marks


def _recent_marks(messages: Sequence[Any]) -> list[Any]:
    """The cache breakpoints of the client's last ``MARKED_TAIL`` messages (not system ones), in order."""
    found: list[Any] = []
    for m in messages[-MARKED_TAIL:]:
        content = m.get("content") if isinstance(m, Mapping) and m.get("role") != "system" else None
        if isinstance(content, list):
            found += [v for b in content for v in _marks(_plain(b))]
    return found


def _with_cache_marks(out: list[dict[str, Any]], marks: list[Any]) -> list[dict[str, Any]]:
    """``out`` (the hook's own new list, changed in place; its messages and blocks are not) with
    the client's breakpoints put back (module docstring), walking back from its end only as far
    as the conversation's own last block."""
    if not marks:
        return out
    last: tuple[int, int] | None = None
    own: tuple[int, int] | None = None
    for i in range(len(out) - 1, -1, -1):
        content = out[i].get("content")
        if out[i].get("role") == "system" or not isinstance(content, list):
            continue
        for j in range(len(content) - 1, -1, -1):
            b = content[j]
            if not isinstance(b, Mapping) or b.get("type") in _REASONING or not b.get("text", True):
                continue  # the API refuses to mark reasoning and empty texts
            last = last or (i, j)
            if not str(b.get("text", "")).startswith(TAIL_OPEN):
                own = (i, j)
                break
        if own is not None:
            break
    if last is None:
        return out
    chosen = {own or last, last} if len(marks) > 1 else {own or last}
    for i, j in chosen:
        content = list(out[i]["content"])
        content[j] = {**content[j], "cache_control": marks[-1]}
        out[i] = {**out[i], "content": content}
    return out
