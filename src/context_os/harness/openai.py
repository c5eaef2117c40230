"""OpenAI chat-completions messages: the first adapter.

Input is the list of messages a loop sends to ``chat.completions.create`` (roles system,
developer, user, assistant, tool; and legacy function calling's, an assistant's
``function_call`` and the ``function`` message answering it): dicts, or the SDK's own objects
where the SDK takes them (the ``ChatCompletionMessage`` of a response appended as it came, its
``tool_calls``), which are read in their JSON form. Fields context_os does not interpret are
kept and rendered back verbatim; text content is what is measured and managed.

Like every adapter it translates formats and nothing else: it never reaches the store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..context.entries import Incoming, Msg, ToolCall
from ..context.view import SENT_WHOLE
from ..errors import HashError, InvalidOutput, MalformedMessage
from ..hashing import hash_value
from ..tokens import CHARS_PER_TOKEN, document_tokens, image_tokens
from . import gemini, responses
from .base import Adapter, ContextHook, check_utf8, fallback_hash
from .pairing import CLOSES, SAYS, Pairing, Reading, check_end, pairing_problems

if TYPE_CHECKING:
    pass

__all__ = ["OPENAI_PAIRING", "OpenAIAdapter", "OpenAIHook", "validate_openai"]

_ROLE_MAP = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}
_KNOWN = {"role", "content", "tool_calls", "tool_call_id", "is_error", "function_call"}
"""``is_error`` is no chat-completions field: a tool message that says ``"is_error": true`` (the
Responses translation's, for a built-in tool call that failed) is a failed result."""
_NO_CONTENT = "ctxos_no_content"
"""Kept in a message's ``extra`` when it came without a ``content`` field (an assistant message of
calls only, as the SDK dumps its reply): it is rendered without one, not with ``"content": null``."""
_LEGACY = "ctxos_function_call_"
"""Legacy function calling (the ``functions`` parameter, replaced by ``tools`` in 2023) names no
call: an assistant's ``function_call`` is answered by the ``function`` message right after it.
context_os gives the call the id ``_LEGACY`` + its message's index + ``:`` + the function's name,
and the answer the id of the message before it with its own function's name (the API refuses
another); neither goes back to the harness (``render_msg`` writes the legacy fields)."""


def _plain(value: Any) -> Any:
    """An SDK object (``ChatCompletionMessage``, ``ChatCompletionMessageToolCall``, a content
    part) in the JSON form the SDK sends of it, its unset fields left out; anything else as is."""
    if type(value) is dict or type(value) is str:  # (most are: no subclass check through the ABC)
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    return value


def _json_form(message: Any) -> Any:
    """A message with the SDK objects in it, itself or its tool calls and content parts (a dict
    built around ``reply.tool_calls``), in their JSON form; a message without any as it is."""
    message = _plain(message)
    if not isinstance(message, Mapping):
        return message
    lists = {
        k: [_plain(v) for v in value]
        for k in ("tool_calls", "content")
        if isinstance(value := message.get(k), list)
        and any(type(v) is not dict and isinstance(v, BaseModel) for v in value)
    }
    return {**message, **lists} if lists else message


def _hash_form(message: Any) -> Any:
    """A message as its hash reads it: its JSON form without the fields that are null, but for
    ``content``, which counts as null when left out. The SDK's reply reads without them
    (``_plain``), and the same reply saved with ``model_dump()`` and loaded again has them
    (``"refusal": null``, ``"audio": null``, ...): both are one message, not a rewritten history."""
    message = _json_form(message)
    if not isinstance(message, Mapping):
        return message
    calls = message.get("tool_calls")
    nulls = "content" not in message or any(v is None for k, v in message.items() if k != "content")
    if isinstance(calls, list) and any(isinstance(c, Mapping) and None in c.values() for c in calls):
        calls = [{k: v for k, v in c.items() if v is not None} if isinstance(c, Mapping) else c for c in calls]
        nulls = True
    if not nulls:
        return message
    out = {k: v for k, v in message.items() if v is not None}
    out["content"] = message.get("content")
    if calls is not None:
        out["tool_calls"] = calls
    return out


def _text_of(content: Any, index: int) -> tuple[str | None, list[Any] | None]:
    """(text, original parts) of an OpenAI ``content`` value."""
    if content is None or isinstance(content, str):
        return content, None
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or "type" not in part:
                raise MalformedMessage("content parts must be objects with a type", index=index, field=f"content[{j}]")
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise MalformedMessage("text part without text", index=index, field=f"content[{j}].text")
                texts.append(part["text"])
        return "\n".join(texts), list(content)
    raise MalformedMessage(
        f"content must be a string, a list of parts or null, not {type(content).__name__}", index=index, field="content"
    )


def _media_chars(parts: list[Any]) -> int:
    """What the ``image_url`` and ``file`` parts among a message's content parts put in front of
    the model, in characters: an image's ``data:`` URL by its size, any other at the most
    (``tokens.image_tokens``); a file's ``file_data`` by its pages, a file id as one page
    (``tokens.document_tokens``)."""
    n = 0
    for part in parts:
        if part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else None
            n += image_tokens(url if isinstance(url, str) and url.startswith("data:") else None) * CHARS_PER_TOKEN
        elif part.get("type") == "file":
            file = part.get("file")
            data = file.get("file_data") if isinstance(file, Mapping) else None
            n += document_tokens(data if isinstance(data, str) else None) * CHARS_PER_TOKEN
    return n


def _pairing(m: Mapping[str, Any]) -> Reading:
    """A ``tool`` message answers one call; any other message closes the calls still open (each
    call is answered by the tool messages right after its assistant message)."""
    role = m.get("role")
    if role == "tool":
        return Reading(True, (m.get("tool_call_id"),))
    if role == "function":  # legacy function calling: it answers the call right before it
        return Reading(True, (_LEGACY,))
    if role != "assistant":
        return CLOSES
    if m.get("function_call") and not m.get("tool_calls"):
        return Reading(False, opened=[_LEGACY], is_response=True)
    calls = m.get("tool_calls")
    if not calls:
        return SAYS
    calls = calls if isinstance(calls, list) else [calls]
    return Reading(False, opened=[c.get("id") if isinstance(c, Mapping) else None for c in calls], is_response=True)


OPENAI_PAIRING: Pairing[Mapping[str, Any]] = Pairing(_pairing)
"""How chat-completions messages pair tool calls with results."""


class OpenAIAdapter(Adapter[dict[str, Any]]):
    """Translates OpenAI chat-completions message dicts."""

    name = "openai"
    pairing = OPENAI_PAIRING

    def hash_message(self, message: dict[str, Any]) -> str:
        """The hash of the message's JSON form, its null fields left out (``_hash_form``): an SDK
        object hashes as the dict it dumps to, so a history saved as JSON and loaded again in
        another process is the same history."""
        try:
            return hash_value(_hash_form(message))
        except (HashError, TypeError, ValueError, RecursionError):
            return fallback_hash(message)  # unhashable input is rejected by translate

    def translate(self, message: dict[str, Any], index: int) -> Incoming:
        message = _json_form(message)
        if not isinstance(message, Mapping):
            raise MalformedMessage(f"a message must be an object, not {type(message).__name__}", index=index)
        role = message.get("role")
        if not isinstance(role, str) or role not in _ROLE_MAP:
            raise MalformedMessage(
                f"unknown role {role!r} (expected one of {sorted(_ROLE_MAP)})", index=index, field="role"
            )
        text, parts = _text_of(message.get("content"), index)
        if text is not None:
            check_utf8(text, index, "content")
        extra = {k: v for k, v in message.items() if k not in _KNOWN}
        if role != _ROLE_MAP[role]:
            extra["role"] = role
        whole = role == "tool" and responses.sent_whole(message)  # a Responses output the provider needs whole
        if parts is not None and role != "tool":
            extra["content"] = parts
        elif parts is not None or whole:  # a tool output of parts: shown as such while shown whole
            extra["full"] = {"content": parts if parts is not None else text, **({SENT_WHOLE: True} if whole else {})}
        if "content" not in message:
            extra[_NO_CONTENT] = True
        m: Incoming = {"role": _ROLE_MAP[role], "text": text, "h": ""}  # type: ignore[typeddict-item]
        if parts is not None and role in ("user", "tool") and (media := _media_chars(parts)):
            m["extra_chars"] = media
        if role == "assistant" and message.get("tool_calls"):
            m["tool_calls"] = self._calls(message["tool_calls"], index)
        elif role == "assistant" and message.get("function_call") is not None:
            m["tool_calls"] = [self._legacy_call(message["function_call"], index)]
            extra[_LEGACY] = True
        if "function_call" in message and _LEGACY not in extra:  # (a null one the SDK dumped)
            extra["function_call"] = message["function_call"]
        # (a message of the Responses API or Gemini: the provider's own tools' calls and results,
        # a Responses item the client added for later responses: the tools it adds)
        if served := responses.provider_chars(message) + gemini.provider_chars(message):
            m["block_chars"] = served
        if role == "function":
            if not isinstance(message.get("name"), str):
                raise MalformedMessage("a function message needs the function's name", index=index, field="name")
            m["tool_call_id"] = f"{_LEGACY}{index - 1}:{message['name']}"
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise MalformedMessage("a tool message needs a tool_call_id string", index=index, field="tool_call_id")
            m["tool_call_id"] = call_id
            if message.get("is_error") is True:
                m["is_error"] = True
        elif "is_error" in message:
            extra["is_error"] = message["is_error"]
        if extra:
            m["extra"] = extra
        return m

    def _calls(self, calls: Any, index: int) -> list[ToolCall]:
        if not isinstance(calls, list):
            raise MalformedMessage("tool_calls must be a list", index=index, field="tool_calls")
        out: list[ToolCall] = []
        for j, c in enumerate(calls):
            if isinstance(c, Mapping) and c.get("type") == "custom":
                out.append(self._custom_call(c, index, j))
                continue
            fn = c.get("function") if isinstance(c, Mapping) else None
            if not isinstance(fn, Mapping) or not isinstance(c.get("id"), str) or not isinstance(fn.get("name"), str):
                raise MalformedMessage(
                    "a tool call needs an id and function.name", index=index, field=f"tool_calls[{j}]"
                )
            args = fn.get("arguments", "")
            if not isinstance(args, str):
                raise MalformedMessage(
                    "function.arguments must be a JSON string", index=index, field=f"tool_calls[{j}].function.arguments"
                )
            check_utf8(args, index, f"tool_calls[{j}].function.arguments")
            out.append({"id": c["id"], "name": fn["name"], "arguments": args})
        return out

    def _legacy_call(self, fn: Any, index: int) -> ToolCall:
        """An assistant's ``function_call`` (legacy function calling): a call whose id its index
        makes (``_LEGACY``)."""
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise MalformedMessage("a function_call needs a name", index=index, field="function_call")
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            raise MalformedMessage(
                "function_call.arguments must be a JSON string", index=index, field="function_call.arguments"
            )
        check_utf8(args, index, "function_call.arguments")
        return {"id": f"{_LEGACY}{index}:{fn['name']}", "name": fn["name"], "arguments": args}

    def _custom_call(self, c: Mapping[str, Any], index: int, j: int) -> ToolCall:
        """A custom tool's call (free-form ``input``, no JSON arguments): its arguments are
        ``{"input": input}``, an object where a function call's are a JSON string, which is how
        ``render_msg`` tells the two apart."""
        custom = c.get("custom")
        if (
            not isinstance(custom, Mapping)
            or not isinstance(c.get("id"), str)
            or not isinstance(custom.get("name"), str)
            or not isinstance(custom.get("input"), str)
        ):
            raise MalformedMessage(
                "a custom tool call needs an id, custom.name and custom.input", index=index, field=f"tool_calls[{j}]"
            )
        check_utf8(custom["input"], index, f"tool_calls[{j}].custom.input")
        return {"id": c["id"], "name": custom["name"], "arguments": {"input": custom["input"]}}

    def render_msg(self, msg: Msg) -> dict[str, Any]:
        extra = dict(msg.get("extra") or {})
        role = extra.pop("role", msg["role"])
        content: Any = extra.pop("content", msg["text"])
        full = extra.pop("full", None)  # a tool output's parts, as it came (the view keeps them while it is whole)
        if msg["role"] == "tool" and isinstance(full, Mapping) and "content" in full:
            content = full["content"]
        out: dict[str, Any] = {"role": role, "content": content}
        if extra.pop(_NO_CONTENT, False) and content is None:  # it came without one: it goes without one
            del out["content"]
        if extra.pop(_LEGACY, False) and msg.get("tool_calls"):  # legacy function calling: one call, no id
            fn = _render_call(msg["tool_calls"][0]).get("function") or {}
            out["function_call"] = {"name": fn.get("name", ""), "arguments": fn.get("arguments", "")}
        elif msg.get("tool_calls"):
            out["tool_calls"] = [_render_call(c) for c in msg["tool_calls"]]
        if msg["role"] == "tool" and str(msg.get("tool_call_id", "")).startswith(_LEGACY):
            out["role"] = "function"  # its name: the one it came with (in extra), or its call's
            out["name"] = msg.get("tool_name") or str(msg["tool_call_id"]).partition(":")[2]
        elif msg["role"] == "tool":
            out["tool_call_id"] = msg.get("tool_call_id", "")
            if msg.get("is_error"):
                out["is_error"] = True
        out.update(extra)
        return out

    def tool_definitions(self, tools: list[dict[str, Any]]) -> list[Any]:
        return [{"type": "function", "function": dict(t)} for t in tools]


def _render_call(c: ToolCall) -> dict[str, Any]:
    """A neutral call as chat-completions has it: a custom tool's (arguments ``{"input": text}``,
    ``OpenAIAdapter._custom_call``), else a function's (other object arguments as JSON text)."""
    args = c["arguments"]
    if isinstance(args, Mapping) and list(args) == ["input"] and isinstance(args["input"], str):
        return {"id": c["id"], "type": "custom", "custom": {"name": c["name"], "input": args["input"]}}
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    return {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": args}}


def validate_openai(messages: Sequence[Mapping[str, Any]], *, last_input_role: str | None = None) -> None:
    """Raise ``InvalidOutput`` unless every tool call is answered right after it (and every
    result has its call), and the list ends where chat-completions expects: on a user, tool or
    system message (an assistant message only where the harness itself ended on one, as a
    prefill)."""
    problems = pairing_problems(OPENAI_PAIRING, messages) + check_end(
        OPENAI_PAIRING, messages, last_input_role=last_input_role
    )
    if problems:
        raise InvalidOutput("; ".join(problems[:5]))


class OpenAIHook(ContextHook[Any]):
    """``transform_context`` for loops that speak OpenAI chat-completions.

    Messages are typed ``Any``: dicts, the SDK's ``ChatCompletionMessageParam`` dicts or its
    ``ChatCompletionMessage`` objects go in, and what comes out (dicts) type-checks as the
    ``messages`` of ``chat.completions.create``."""

    adapter_class = OpenAIAdapter
