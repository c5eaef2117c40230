"""context_os's own tools inside the proxy: offered to the model, run by the proxy, never seen by
the client.

When the model calls one of ours (``activate``, ``deactivate``, ``pin``, ``unpin``; ``recall``
with it on), the proxy runs it and calls upstream again with the call and its result appended,
until the model answers without one (at most ``MAX_ROUNDS`` times; the last round offers none of
ours). The client gets only that final answer, with its own tools' calls. The exchange it did
not see is kept per session (``Hidden``) and spliced back into its messages at the same place on
every later request, so the session's history stays the one the model saw (no rewritten history,
no lost prompt cache); if the client rewrites its history before that place, the exchange is
dropped.

A response that calls ours and the client's together: ours run, the client's are dropped, and
the model, seeing our results, calls the client's again.

This module speaks the four wire formats (``Dialect``: chat completions, messages, responses,
Gemini's generateContent):
which tools a request declares, how a response names its calls, how a stream is read
(``StreamFilter``: text passes on at once, tool calls are held until the response ends and it is
known whether any is ours). Our tools are declared in each format by the harness adapters
(``tool_definitions``), or for the Responses and Gemini APIs here (``definitions``). In the
Responses API the exchange the client did not see is the response's own output items (its
reasoning and text with our calls; the client's calls dropped; streamed, the client has every
item but the calls, so only ours) and our calls' outputs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..harness.anthropic import server_block, without_cache_marks
from ..harness.gemini import CODE_PARTS
from ..harness.responses import BUILT_IN_TOOLS, OUTPUTS, client_call, provider_item
from ..hashing import hash_value

__all__ = [
    "MAX_ROUNDS",
    "Call",
    "Hidden",
    "JsonArrayStream",
    "OneCompletion",
    "StreamFilter",
    "dialect",
    "prefix_hash",
    "splice",
    "with_sse",
]

MAX_ROUNDS = 8
"""Upstream calls one client request may take when the model keeps calling our tools."""


THINKING = ("thinking", "redacted_thinking")
"""An Anthropic reply's reasoning blocks (extended thinking)."""


def container_of(message: Any) -> str | None:
    """The id of the container an Anthropic reply's code ran in (a JSON reply's ``container``, a
    stream's ``message_delta``'s), if it names one."""
    container = message.get("container") if isinstance(message, Mapping) else None
    found = container.get("id") if isinstance(container, Mapping) else container
    return found if isinstance(found, str) and found else None


def _server_id(block: Mapping[str, Any]) -> Any:
    """The call a server tool's block belongs to: a call's own id, a result's ``tool_use_id``."""
    return block.get("id") if block.get("type") in ("server_tool_use", "mcp_tool_use") else block.get("tool_use_id")


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Hidden:
    """An exchange the client never saw: it stands after the client's first ``at`` messages."""

    at: int
    prefix: str
    """The hash of those ``at`` messages: if the client's differ, the exchange no longer fits."""
    messages: list[dict[str, Any]]


def prefix_hash(messages: Sequence[Any]) -> str:
    """The hash of a client's messages up to an exchange it never saw, their cache breakpoints and
    what their tool results say left out: Claude Code moves its one breakpoint to its newest
    message at every call, and clears old tool results after a while; neither moves the place of
    an exchange."""
    return hash_value([_without_results(m) for m in without_cache_marks(messages)[0]])


def _without_results(message: Any) -> Any:
    """A message (or Responses item) without what its tool results say: their calls' ids stay."""
    if not isinstance(message, Mapping):
        return message
    if message.get("role") == "tool" or message.get("type") == "tool_result":  # chat, Anthropic
        return {k: v for k, v in message.items() if k != "content"}
    if message.get("type") in OUTPUTS:  # a Responses output item
        return {k: v for k, v in message.items() if k != "output"}
    parts = message.get("parts")
    if isinstance(parts, list) and any(isinstance(p, Mapping) and "functionResponse" in p for p in parts):  # Gemini
        return {**message, "parts": [_without_response(p) for p in parts]}
    content = message.get("content")
    if isinstance(content, list) and any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content):
        return {**message, "content": [_without_results(b) for b in content]}
    return message


def _without_response(part: Any) -> Any:
    """A Gemini part without what its function response says."""
    fr = part.get("functionResponse") if isinstance(part, Mapping) else None
    if not isinstance(fr, Mapping):
        return part
    return {**part, "functionResponse": {k: v for k, v in fr.items() if k != "response"}}


def splice(messages: list[Any], hidden: list[Hidden]) -> tuple[list[Any], list[Hidden]]:
    """The client's messages with the hidden exchanges back in their places, and the exchanges
    that still fit (one whose place the client rewrote is dropped)."""
    out: list[Any] = []
    kept: list[Hidden] = []
    taken = 0
    for h in sorted(hidden, key=lambda h: h.at):
        if h.at > len(messages) or prefix_hash(messages[: h.at]) != h.prefix:
            continue
        # Responses items the client has of the same response (streamed to it: its reasoning, its
        # text) stand at the exchange's place: the rest of it goes after them, once each
        mine = set().union(*(_item_keys(i) for i in h.messages))
        at = h.at
        while at < len(messages) and _item_keys(messages[at]) & mine:
            at += 1
        known = set().union(*(_item_keys(m) for m in messages[h.at : at]))
        out.extend(messages[taken:at])
        out.extend(i for i in h.messages if not _item_keys(i) & known)
        taken = at
        if at < len(messages):  # an Anthropic reply streamed to the client holds our rounds' blocks too
            out.append(_without_blocks(messages[at], _streamed_of(h.messages)))
            taken = at + 1
        kept.append(h)
    out.extend(messages[taken:])
    return out, kept


def _streamed_of(messages: list[dict[str, Any]]) -> list[Any]:
    """The blocks of an exchange's model turns that a stream gives the client too: an Anthropic
    reply's thinking and server tools' blocks, a Gemini reply's code execution parts."""
    return [
        b
        for m in messages
        for b in _blocks_of(m)
        if isinstance(b, Mapping) and (b.get("type") in THINKING or server_block(b) or _code_part(b))
    ]


_TURN_BLOCKS = {"assistant": "content", "model": "parts"}
"""Where a model turn holds its blocks, by its role: Anthropic's ``content``, Gemini's ``parts``."""


def _blocks_of(message: Mapping[str, Any]) -> list[Any]:
    """A model turn's blocks (``_TURN_BLOCKS``); none for any other message."""
    found = message.get(_TURN_BLOCKS.get(str(message.get("role")), ""))
    return found if isinstance(found, list) else []


def _code_of(part: Any) -> dict[str, Any]:
    """A Gemini part's code execution (its code, its output: ``CODE_PARTS``), empty if it is none."""
    return {f: part[f] for f in CODE_PARTS if f in part} if isinstance(part, Mapping) else {}


def _code_part(part: Any) -> bool:
    """Whether a Gemini part is the model's code execution."""
    return bool(_code_of(part))


def _without_blocks(message: Any, blocks: list[Any]) -> Any:
    """An assistant message without the blocks an exchange spliced before it already holds (its
    thinking, the same; its server tools' calls and results, by their call's id, the client's
    copy written by its SDK): streamed, the client got every round's blocks as one message, though
    the model wrote the first ones in the rounds that called our tools (each keeps its own, where
    the model saw it)."""
    field = _TURN_BLOCKS.get(str(message.get("role"))) if isinstance(message, Mapping) else None
    content = message.get(field) if field is not None else None
    if not blocks or field is None or not isinstance(content, list):
        return message
    served = {_server_id(b) for b in blocks if server_block(b)}
    ran = [code for b in blocks if (code := _code_of(b))]

    def held(b: Any) -> bool:
        if not isinstance(b, Mapping):
            return False
        if code := _code_of(b):  # Gemini's code execution, by what it ran and gave (the SDK's copy)
            return code in ran
        return (b.get("type") in THINKING and b in blocks) or (server_block(b) and _server_id(b) in served)

    kept = [b for b in content if not held(b)]
    return {**message, field: kept} if len(kept) < len(content) and kept else message


def _item_keys(item: Any) -> set[str]:
    """What tells the items of a Responses reply a client is streamed and keeps apart (its
    reasoning, its text, the provider's own tools' items: a web search, an MCP server's call):
    their id, and what they hold, id and status aside (a client may drop or rewrite either); none
    for anything else (calls, outputs, chat and Anthropic messages)."""
    if not isinstance(item, Mapping) or not provider_item(item):
        return set()
    keys = {json.dumps({k: v for k, v in item.items() if k not in ("id", "status")}, sort_keys=True)}
    return keys | ({"id:" + item["id"]} if isinstance(item.get("id"), str) else set())


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw or "{}")
    except ValueError:
        return {"_unparsed": raw}
    return parsed if isinstance(parsed, dict) else {"_unparsed": raw}


def _calls(parts: list[Mapping[str, Any]], kind: str, id_key: str, args_key: str) -> list[Call]:
    """The calls among a response's blocks or items of type ``kind`` (flat: a ``name`` each)."""
    return [Call(p.get(id_key, ""), p.get("name", ""), _args(p.get(args_key))) for p in parts if p.get("type") == kind]


class OpenAIDialect:
    """``/v1/chat/completions``. (Every dialect names the request's field of tool definitions,
    ``TOOLS``; one the hook's adapter does not speak has ``definitions`` of its own.)"""

    TOOLS = "tools"

    @staticmethod
    def tool_names(tools: Any) -> set[str]:
        out = set()
        for t in tools if isinstance(tools, list) else []:
            fn = t.get("function") if isinstance(t, Mapping) else None
            if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
                out.add(fn["name"])
        return out

    @staticmethod
    def calls(response: Mapping[str, Any]) -> tuple[list[Call], dict[str, Any]]:
        """The calls of a JSON response, and its assistant message."""
        message = _chat_message(response)
        calls = [
            Call(
                c.get("id", ""),
                (c.get("function") or {}).get("name", ""),
                _args((c.get("function") or {}).get("arguments")),
            )
            for c in message.get("tool_calls") or []
        ]
        return calls, message

    @staticmethod
    def exchange(
        text: str | None, calls: list[Call], results: list[str], output: list[Any] | None = None
    ) -> list[dict[str, Any]]:
        assistant = {
            "role": "assistant",
            "content": text or None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in calls
            ],
        }
        return [
            assistant,
            *({"role": "tool", "tool_call_id": c.id, "content": r} for c, r in zip(calls, results, strict=True)),
        ]


class LegacyFunctionsDialect(OpenAIDialect):
    """``/v1/chat/completions`` with legacy function calling (``functions``, no ``tools``): our
    tools are functions beside the client's, a call is the message's one ``function_call``
    (without an id), and its result a ``function`` message of its name (``legacy``)."""

    TOOLS = "functions"

    @staticmethod
    def definitions(schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Our tools as functions (name, description, JSON Schema parameters)."""
        return [
            {
                "name": s["name"],
                "description": s.get("description", ""),
                "parameters": s.get("parameters", {"type": "object", "properties": {}}),
            }
            for s in schemas
        ]

    @staticmethod
    def calls(response: Mapping[str, Any]) -> tuple[list[Call], dict[str, Any]]:
        message = _chat_message(response)
        fn = message.get("function_call")
        if not isinstance(fn, Mapping):
            return [], message
        return [Call("", str(fn.get("name", "")), _args(fn.get("arguments")))], message

    @staticmethod
    def exchange(
        text: str | None, calls: list[Call], results: list[str], output: list[Any] | None = None
    ) -> list[dict[str, Any]]:
        """A call a message (the shape has no other), its ``function`` message after it."""
        out: list[dict[str, Any]] = []
        for n, (c, r) in enumerate(zip(calls, results, strict=True)):
            called = {"name": c.name, "arguments": json.dumps(c.arguments)}
            out.append({"role": "assistant", "content": (text or None) if n == 0 else None, "function_call": called})
            out.append({"role": "function", "name": c.name, "content": r})
        return out


def _chat_message(response: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON chat completion's (first choice's) assistant message."""
    choices = response.get("choices") or []
    return dict(choices[0].get("message") or {}) if choices else {}


def legacy(api: str, body: Mapping[str, Any]) -> bool:
    """Whether a request is one of chat completions' legacy function calling: ``functions``
    and no ``tools``."""
    return api == "openai" and isinstance(body.get("functions"), list) and not body.get("tools")


class AnthropicDialect:
    """``/v1/messages``."""

    TOOLS = "tools"

    @staticmethod
    def tool_names(tools: Any) -> set[str]:
        return (
            {t["name"] for t in tools if isinstance(t, Mapping) and isinstance(t.get("name"), str)}
            if isinstance(tools, list)
            else set()
        )

    @staticmethod
    def calls(response: Mapping[str, Any]) -> tuple[list[Call], dict[str, Any]]:
        blocks = [b for b in response.get("content") or [] if isinstance(b, Mapping)]
        return _calls(blocks, "tool_use", "id", "input"), {"role": "assistant", "content": blocks, "output": blocks}

    @staticmethod
    def exchange(
        text: str | None, calls: list[Call], results: list[str], output: list[Any] | None = None
    ) -> list[dict[str, Any]]:
        """``output``: the reply's blocks, unmodified and in their order (a JSON reply's, all of
        them, ``text`` then unused; a streamed reply's, those the client cannot send back in
        their place: its thinking, which a tool-use turn must start with when extended thinking
        is on, and its server tools' calls and results, without which the model's next round
        would not see what it searched). The client's tool calls are dropped, ours kept."""
        ours = {c.id for c in calls}
        if output is None:
            content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        else:
            content = [dict(b) for b in output if b.get("type") != "tool_use" or b.get("id") in ours]
        present = {b.get("id") for b in content if b.get("type") == "tool_use"}
        content += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in calls if c.id not in present
        ]
        tool_results = [
            {"type": "tool_result", "tool_use_id": c.id, "content": r} for c, r in zip(calls, results, strict=True)
        ]
        return [{"role": "assistant", "content": content}, {"role": "user", "content": tool_results}]


class ResponsesDialect:
    """``/v1/responses``."""

    TOOLS = "tools"

    @staticmethod
    def tool_names(tools: Any) -> set[str]:
        """Flat tools (a ``name`` each), and the built-in ones the client runs (``shell``,
        ``local_shell``, ``apply_patch``: a ``type`` each), by the names their calls take."""
        built_in = {
            t["type"] for t in tools if isinstance(t, Mapping) and t.get("type") in BUILT_IN_TOOLS
        } if isinstance(tools, list) else set()  # fmt: skip
        return AnthropicDialect.tool_names(tools) | built_in

    @staticmethod
    def definitions(schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Our tools as Responses function tools (flat: no ``function`` wrapper)."""
        return [{"type": "function", **f} for f in LegacyFunctionsDialect.definitions(schemas)]

    @staticmethod
    def calls(response: Mapping[str, Any]) -> tuple[list[Call], dict[str, Any]]:
        output = [i for i in response.get("output") or [] if isinstance(i, Mapping)]
        return _calls(output, "function_call", "call_id", "arguments"), {"output": output}

    @staticmethod
    def exchange(
        text: str | None, calls: list[Call], results: list[str], output: list[Any] | None = None
    ) -> list[dict[str, Any]]:
        ours = {c.id for c in calls}
        if output is not None:  # the response's own items: its reasoning and text stay with our calls
            # the client's calls of any kind are dropped (a custom or built-in tool's too: kept,
            # it was a call without its output, and one the client may have been streamed)
            items = [dict(i) for i in output if not client_call(i) or _ours(i, ours)]
        else:
            items = [{"type": "message", "role": "assistant", "content": text}] if text else []
            items += [
                {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": json.dumps(c.arguments)}
                for c in calls
            ]
        outputs = [
            {"type": "function_call_output", "call_id": c.id, "output": r} for c, r in zip(calls, results, strict=True)
        ]
        return [*items, *outputs]


class GeminiDialect:
    """``models/{model}:generateContent`` and ``:streamGenerateContent``. A call the model made
    without an ``id`` (Gemini models give none) is a ``Call`` with the id ``""``, and its response
    goes back without one, matched by its name and place."""

    TOOLS = "tools"

    @staticmethod
    def tool_names(tools: Any) -> set[str]:
        return {
            d["name"]
            for t in tools if isinstance(t, Mapping) and isinstance(t.get("functionDeclarations"), list)
            for d in t["functionDeclarations"] if isinstance(d, Mapping) and isinstance(d.get("name"), str)
        } if isinstance(tools, list) else set()  # fmt: skip

    @staticmethod
    def definitions(schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Our tools as one tool of function declarations (their parameters as JSON Schema)."""
        declarations = [
            {
                "name": s["name"],
                "description": s.get("description", ""),
                "parametersJsonSchema": s.get("parameters", {"type": "object", "properties": {}}),
            }
            for s in schemas
        ]
        return [{"functionDeclarations": declarations}]

    @staticmethod
    def calls(response: Mapping[str, Any]) -> tuple[list[Call], dict[str, Any]]:
        """The calls of a JSON response's first candidate, and its parts (``output``)."""
        candidates = response.get("candidates")
        first = candidates[0] if isinstance(candidates, list) and candidates else None
        content = first.get("content") if isinstance(first, Mapping) else None
        found = content.get("parts") if isinstance(content, Mapping) else None
        parts = [dict(p) for p in found if isinstance(p, Mapping)] if isinstance(found, list) else []
        return _gemini_calls(parts), {"parts": parts, "output": parts}

    @staticmethod
    def exchange(
        text: str | None, calls: list[Call], results: list[str], output: list[Any] | None = None
    ) -> list[dict[str, Any]]:
        """``output``: the reply's parts; those of the client's calls are dropped, a signature
        they carried going to our first call (Gemini signs a turn's first call: it refuses the
        turn sent back without it)."""
        if output is not None:
            ours = {id(p) for p in _ours_of(output, calls)}
            parts = [dict(p) for p in output if "functionCall" not in p or id(p) in ours]
            signature = next((p["thoughtSignature"] for p in output if "thoughtSignature" in p), None)
            first = next((p for p in parts if "functionCall" in p), None)
            if signature is not None and first is not None and not any("thoughtSignature" in p for p in parts):
                first["thoughtSignature"] = signature
        else:
            parts = [{"text": text}] if text else []
            parts += [{"functionCall": {"name": c.name, "args": c.arguments}} for c in calls]
        responses = [
            {"functionResponse": {**({"id": c.id} if c.id else {}), "name": c.name, "response": {"output": r}}}
            for c, r in zip(calls, results, strict=True)
        ]
        return [{"role": "model", "parts": parts}, {"role": "user", "parts": responses}]


def _gemini_calls(parts: Sequence[Mapping[str, Any]]) -> list[Call]:
    out = []
    for p in parts:
        fc = p.get("functionCall")
        if isinstance(fc, Mapping):
            args = fc.get("args")
            out.append(Call(str(fc.get("id") or ""), str(fc.get("name", "")), args if isinstance(args, dict) else {}))
    return out


def _ours_of(parts: list[Any], calls: list[Call]) -> list[Any]:
    """The parts of ``parts`` that are the calls ``calls`` (ours), each taken once, in order."""
    wanted = [(c.id, c.name, json.dumps(c.arguments, sort_keys=True)) for c in calls]
    out = []
    for p in parts:
        fc = p.get("functionCall") if isinstance(p, Mapping) else None
        if isinstance(fc, Mapping):
            key = (str(fc.get("id") or ""), fc.get("name"), json.dumps(fc.get("args") or {}, sort_keys=True))
            if key in wanted:
                wanted.remove(key)
                out.append(p)
    return out


def _ours(item: Mapping[str, Any], ours: set[str]) -> bool:
    """Whether a Responses item is a call of our tools (a function call ``ours`` names)."""
    return item.get("type") == "function_call" and item.get("call_id") in ours


def dialect(api: str, body: Mapping[str, Any]) -> Any:
    """The dialect of ``api``'s request ``body`` (a chat one may speak legacy function calling:
    ``legacy``)."""
    if legacy(api, body):
        return LegacyFunctionsDialect
    return {"anthropic": AnthropicDialect, "responses": ResponsesDialect, "gemini": GeminiDialect}.get(
        api, OpenAIDialect
    )


def sse_events(parts: Iterator[bytes]) -> Iterator[bytes]:
    """Whole server-sent events (each ending in a blank line) out of a byte stream (its lines
    ended by CRLF, or LF: a CRLF the stream's parts cut in two is one line's end)."""
    buf = b""
    cr = b""  # a part's last byte, a CR: the next part's first may be its LF
    for part in parts:
        part = cr + part
        cr = b"\r" if part.endswith(b"\r") else b""
        buf += part[: len(part) - len(cr)].replace(b"\r\n", b"\n")
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            yield event + b"\n\n"
    buf += cr
    if buf.strip():
        yield buf if buf.endswith(b"\n\n") else buf + b"\n\n"


def with_sse(path: str) -> str:
    """A Gemini stream's path asking for server-sent events (``alt=sse``, in place of any other
    ``alt``): the proxy reads a model's calls in those, and gives the client the JSON array it
    asked for (``JsonArrayStream``)."""
    route, _, query = path.partition("?")
    params = [p for p in query.split("&") if p and not p.startswith("alt=")]
    return route + "?" + "&".join([*params, "alt=sse"])


@dataclass
class JsonArrayStream:
    """Gemini: the events of an ``alt=sse`` stream as the stream a client asked for without it
    gets them, one JSON array whose elements come as they are answered: ``[`` before the first,
    ``,`` between, ``]`` at the end (``end``). A client that asked so was offered none of our
    tools before 2026-12-05: their calls are read in events only."""

    begun: bool = False

    def __call__(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        for event in sse_events(iter([chunk])):
            lines = [line[5:] for line in event.split(b"\n") if line.startswith(b"data:")]
            data = b"\n".join(line[1:] if line.startswith(b" ") else line for line in lines)
            if data.strip():
                out.append((b",\r\n" if self.begun else b"[") + data)
                self.begun = True
        return b"".join(out)

    def end(self) -> bytes:
        return b"]" if self.begun else b"[]"


@dataclass
class SequenceNumbers:
    """Responses: the events of one streamed response numbered 0, 1, 2... in the order the client
    gets them (``sequence_number``), over all the rounds it took (each round's upstream counts
    from 0 again, and events held back go out after others). The number is found in the event's
    bytes, not by parsing it again (``StreamFilter`` did): a Responses event has one key of that
    name, at its top level, and a string value holding the name has its quotes escaped."""

    sent: int = 0

    def __call__(self, chunk: bytes) -> bytes:
        if not chunk:
            return chunk
        out: list[bytes] = []
        for event in sse_events(iter([chunk])):
            found = _SEQUENCE_NUMBER.search(event)
            if found is not None:
                if int(found[1]) != self.sent:
                    event = event[: found.start(1)] + str(self.sent).encode() + event[found.end(1) :]
                self.sent += 1
            out.append(event)
        return b"".join(out)

    def follow(self, chunk: bytes) -> None:
        """Take the numbers of events passed on as they came: the next event is numbered after them."""
        for n in _SEQUENCE_NUMBER.findall(chunk):
            self.sent = max(self.sent, int(n) + 1)


@dataclass
class OneCompletion:
    """Chat completions: the chunks of one streamed reply that took several rounds, as one
    completion's, in the order the client gets them: each with the id of the first chunk it got,
    and the role said once (the SDKs add up every string of the deltas: a role said in two
    rounds is ``"assistantassistant"``)."""

    id: str | None = None
    said_role: bool = False

    def __call__(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        for event in sse_events(iter([chunk])) if chunk else ():
            data = _data(event)
            if isinstance(data, dict):
                self.id = self.id or data.get("id")
                choices = data.get("choices") or []
                delta = choices[0].get("delta") if choices and isinstance(choices[0], dict) else None
                again = isinstance(delta, dict) and "role" in delta and self.said_role
                self.said_role = self.said_role or (isinstance(delta, dict) and "role" in delta)
                if again or data.get("id") != self.id:
                    if again:
                        assert isinstance(delta, dict)
                        unsaid = {k: v for k, v in delta.items() if k != "role"}
                        choices = [dict(choices[0], delta=unsaid), *choices[1:]]
                    event = f"data: {json.dumps(dict(data, id=self.id, choices=choices))}\n\n".encode()
            out.append(event)
        return b"".join(out)


_SEQUENCE_NUMBER = re.compile(rb'"sequence_number":\s*(\d+)')


def _data(event: bytes) -> Any:
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return "[DONE]"
            try:
                return json.loads(payload)
            except ValueError:
                return None
    return None


@dataclass
class StreamFilter:
    """Reads one streamed response: ``feed`` an event, get what may go to the client now; at the
    end, ``calls`` says what the model called, ``held`` what was kept back (tool calls, the end)."""

    api: str
    first_round: bool
    block_offset: int = 0
    """Anthropic: content blocks the client was already sent in earlier rounds of this request."""
    text: list[str] = field(default_factory=list)
    held: list[bytes] = field(default_factory=list)
    _tools: dict[int, dict[str, Any]] = field(default_factory=dict)
    _held_blocks: set[int] = field(default_factory=set)
    sent_blocks: int = 0
    output: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Responses: the output items of the response, by index, as they were done."""
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Anthropic: the response's blocks an exchange keeps (its thinking, its server tools' calls
    and results), by index, put together from their events."""
    _inputs: dict[int, list[str]] = field(default_factory=dict)
    """Anthropic: the pieces of a server tool call's input, by its block's index."""
    _parts: list[dict[str, Any]] = field(default_factory=list)
    """Gemini: the parts of the calls the response made, and of the code it ran, in order."""
    enveloped: bool = False
    """Gemini: each event's answer is its ``response`` (Google's Code Assist API)."""
    _reasoning: dict[int, list[bytes]] = field(default_factory=dict)
    """Responses: the events of the reasoning items held until the item after them is known."""
    response_id: str | None = None
    """Responses: the id of the response the client was told of (the first round's ``created``):
    a later round's end names it too, as one response does (the SDKs check it)."""
    container: str | None = None
    """Anthropic: the container the response's code ran in (its end names it), which the next
    round goes on in."""

    def feed(self, event: bytes) -> bytes:
        data = _data(event)
        if self.api == "anthropic":
            return self._anthropic(event, data)
        if self.api == "responses":
            return self._responses(event, data)
        if self.api == "gemini":
            return self._gemini(event, data)
        return self._openai(event, data)

    def _responses(self, event: bytes, data: Any) -> bytes:
        """Responses events: per output item (``output_index``); a call's events are held (a
        function's, or the client's custom or built-in tool's: dropped if the response calls one
        of ours), and a reasoning item's until the item after it shows whether it came with
        calls; the others pass on at once (renumbered after the items earlier rounds sent)."""
        if not isinstance(data, dict):
            return event
        kind = str(data.get("type", ""))
        response = data.get("response") if isinstance(data.get("response"), dict) else None
        if kind in ("response.created", "response.in_progress"):
            if self.first_round and kind == "response.created" and response is not None:
                self.response_id = response.get("id")
            return event if self.first_round else b""
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            if response is not None and self.response_id and response.get("id") != self.response_id:
                renamed = dict(data, response={**response, "id": self.response_id})
                event = f"event: {kind}\ndata: {json.dumps(renamed)}\n\n".encode()
            self.held.append(event)
            return self._release_reasoning(calls=False)
        if "output_index" not in data:
            return event
        index = int(data["output_index"])
        item = data.get("item") if isinstance(data.get("item"), dict) else None
        if kind == "response.output_item.done" and item is not None:
            self.output[index] = item
        added = item.get("type") if kind == "response.output_item.added" and item is not None else None
        called = item is not None and added is not None and client_call(item)
        out = b""
        if added == "reasoning":
            self._reasoning[index] = []
        elif added is not None:
            out = self._release_reasoning(calls=called)
        if index in self._reasoning:
            self._reasoning[index].append(event)
            return out
        if added == "function_call" and item is not None:
            self._tools[index] = {"id": item.get("call_id", ""), "name": item.get("name", ""), "arguments": ""}
        if called:
            self._held_blocks.add(index)
        if kind == "response.output_item.done" and item is not None and index in self._tools:
            self._tools[index]["arguments"] = item.get("arguments") or self._tools[index]["arguments"]
        if index in self._held_blocks:
            if kind == "response.function_call_arguments.delta" and index in self._tools:
                self._tools[index]["arguments"] += data.get("delta", "")
            self.held.append(self._renumbered(event, data, index))
            return out
        if kind == "response.output_text.delta":
            self.text.append(str(data.get("delta", "")))
        if kind == "response.output_item.added":
            self.sent_blocks += 1
        return out + self._renumbered(event, data, index)

    def _release_reasoning(self, *, calls: bool) -> bytes:
        """The reasoning items held so far: before a call they stay with it (held: the
        client gets them only if none of the calls is ours; if one is, they go in the exchange:
        the API refuses a call sent without the reasoning it came with, and a reasoning item
        without the item after it); else they go to the client now."""
        pending, self._reasoning = self._reasoning, {}
        out: list[bytes] = []
        for index, events in pending.items():
            moved = [self._renumbered(e, d, index) for e in events if isinstance(d := _data(e), dict)]
            if calls:
                self._held_blocks.add(index)
                self.held.extend(moved)
            else:
                self.sent_blocks += 1
                out.extend(moved)
        return b"".join(out)

    def _renumbered(self, event: bytes, data: dict[str, Any], index: int) -> bytes:
        if not self.block_offset:
            return event
        moved = dict(data, output_index=index + self.block_offset)
        return f"event: {data['type']}\ndata: {json.dumps(moved)}\n\n".encode()

    def output_items(self) -> list[dict[str, Any]]:
        return [self.output[i] for i in sorted(self.output)]

    def _openai(self, event: bytes, data: Any) -> bytes:
        if data == "[DONE]":
            self.held.append(event)
            return b""
        if not isinstance(data, dict):
            return event
        choices = data.get("choices") or []
        delta = (choices[0].get("delta") or {}) if choices else {}
        if isinstance(delta.get("content"), str):
            self.text.append(delta["content"])
        calls = delta.get("tool_calls")
        if isinstance(delta.get("function_call"), dict):  # legacy function calling: one call, no id
            calls = [{"index": 0, "function": delta["function_call"]}]
        if calls or (choices and choices[0].get("finish_reason")) or not choices:
            for c in calls or []:
                t = self._tools.setdefault(int(c.get("index", 0)), {"id": "", "name": "", "arguments": ""})
                t["id"] = c.get("id") or t["id"]
                fn = c.get("function") or {}
                t["name"] = fn.get("name") or t["name"]
                t["arguments"] += fn.get("arguments") or ""
            if calls and delta.get("content"):  # text riding with the calls goes on now, the calls wait
                text_only = dict(data, choices=[dict(choices[0], delta={"content": delta["content"]})])
                calls_only = dict(
                    data, choices=[dict(choices[0], delta={k: v for k, v in delta.items() if k != "content"})]
                )
                self.held.append(f"data: {json.dumps(calls_only)}\n\n".encode())
                return f"data: {json.dumps(text_only)}\n\n".encode()
            self.held.append(event)
            return b""
        return event

    def _gemini(self, event: bytes, data: Any) -> bytes:
        """Gemini: each event a whole response of the parts since the last. A function call comes
        whole in one event: the parts of calls are held (with the rest of their event: its end,
        its usage), as is any event that ends the response (``finishReason``) or holds no
        candidate (usage alone); the other parts go on at once."""
        if not isinstance(data, dict) or "error" in data:
            return event
        envelope = data if self.enveloped else None
        data = data.get("response") if envelope is not None else data
        if not isinstance(data, dict):
            return event
        candidates = data.get("candidates")
        first = candidates[0] if isinstance(candidates, list) and candidates else None
        content = first.get("content") if isinstance(first, Mapping) else None
        parts = content.get("parts") if isinstance(content, Mapping) else None
        parts = [p for p in parts if isinstance(p, Mapping)] if isinstance(parts, list) else []
        calls = [p for p in parts if "functionCall" in p]
        # the calls' parts, and the code the model ran (sent on: an exchange keeps it too)
        self._parts.extend(dict(p) for p in parts if "functionCall" in p or _code_part(p))
        ends = not isinstance(first, Mapping) or bool(first.get("finishReason"))
        if not calls and not ends:
            return event
        if not calls or len(calls) == len(parts):
            self.held.append(event)
            return b""
        assert isinstance(first, Mapping) and isinstance(content, Mapping) and isinstance(candidates, list)
        now = [p for p in parts if "functionCall" not in p]

        def with_parts(ps: list[Mapping[str, Any]], rest: Mapping[str, Any]) -> bytes:
            candidate = {**rest, "content": {**content, "parts": ps}}
            answer = {**data, "candidates": [candidate, *candidates[1:]]}
            return f"data: {json.dumps(answer if envelope is None else {**envelope, 'response': answer})}\n\n".encode()

        self.held.append(with_parts(calls, first))
        # what goes on now ends nothing: the held event carries the end and the usage
        return with_parts(now, {k: v for k, v in first.items() if k not in ("finishReason", "finishMessage")})

    def _keep(self, kind: str, data: dict[str, Any], index: int) -> None:
        """Anthropic: put a block an exchange keeps together from its events (a thinking block's
        text and signature; a server tool call's input, in pieces; a server tool's result comes
        whole)."""
        block = data.get("content_block") or {}
        if kind == "content_block_start" and (block.get("type") in THINKING or server_block(block)):
            self.blocks[index] = dict(block)
        elif kind == "content_block_delta" and index in self.blocks:
            delta = data.get("delta") or {}
            kept = self.blocks[index]
            if delta.get("type") == "thinking_delta":
                kept["thinking"] = kept.get("thinking", "") + delta.get("thinking", "")
            elif delta.get("type") == "signature_delta":
                kept["signature"] = delta.get("signature", "")
            elif delta.get("type") == "input_json_delta":
                self._inputs.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "content_block_stop" and index in self._inputs:
            self.blocks[index]["input"] = _args("".join(self._inputs.pop(index)))

    def kept(self) -> list[dict[str, Any]] | None:
        """What of the reply an exchange keeps besides our calls: a Responses reply's items (the
        API wants a call with the reasoning and text it came with), an Anthropic reply's thinking
        and server tools' blocks, a Gemini reply's calls and code execution parts."""
        if self.api == "responses":  # every item (a later request's splice skips what the client has)
            return self.output_items()
        if self.api == "anthropic":
            return [self.blocks[i] for i in sorted(self.blocks)]
        if self.api == "gemini":  # the calls' parts, as they came (a signature with them), the code it ran
            return list(self._parts)
        return None

    def _anthropic(self, event: bytes, data: Any) -> bytes:
        if not isinstance(data, dict):
            return event
        kind = data.get("type")
        if kind == "message_start":
            return event if self.first_round else b""
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            index = int(data.get("index", 0))
            self._keep(kind, data, index)
            if kind == "content_block_start" and (data.get("content_block") or {}).get("type") == "tool_use":
                block = data["content_block"]
                self._tools[index] = {"id": block.get("id", ""), "name": block.get("name", ""), "arguments": ""}
                self._held_blocks.add(index)
            if index in self._held_blocks:
                delta = data.get("delta") or {}
                if delta.get("type") == "input_json_delta":
                    self._tools[index]["arguments"] += delta.get("partial_json", "")
                self.held.append(self._reindexed(event, data, index))
                return b""
            if (data.get("delta") or {}).get("type") == "text_delta":
                self.text.append(data["delta"].get("text", ""))
            if kind == "content_block_start":
                self.sent_blocks += 1
            return self._reindexed(event, data, index)
        if kind in ("message_delta", "message_stop"):
            self.container = container_of(data.get("delta")) or self.container
            self.held.append(event)
            return b""
        return event

    def _reindexed(self, event: bytes, data: dict[str, Any], index: int) -> bytes:
        """The event as it came, unless earlier rounds sent the client blocks before it."""
        if not self.block_offset:
            return event
        moved = dict(data, index=index + self.block_offset)
        return f"event: {data['type']}\ndata: {json.dumps(moved)}\n\n".encode()

    def calls(self) -> list[Call]:
        if self.api == "gemini":
            return _gemini_calls(self._parts)
        return [Call(t["id"], t["name"], _args(t["arguments"])) for _, t in sorted(self._tools.items())]
