"""A scripted provider on 127.0.0.1 for the proxy tests: OpenAI chat completions and responses,
Anthropic messages and Gemini's generateContent, JSON or streamed, recording every request (body
and headers) it received. Only the model is fake: the proxy, the SDK clients and the HTTP in
between are real."""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.helpers import pairing_refused, serving


@dataclass(frozen=True)
class ToolCall:
    name: str
    args: dict[str, Any]
    say: str = ""
    """What the model says before its call (a preamble): a Responses message item, a chat
    completion's content."""
    patch: str = ""
    """Responses: the model calls the client's custom ``apply_patch`` tool (Codex's) with this
    input too, first, in the same response (parallel calls)."""


def call(name: str, **args: Any) -> ToolCall:
    return ToolCall(name, args)


def reads(n: int) -> list[ToolCall]:
    """``n`` calls of the agent's own ``read_file``, of ``m1.py`` to ``m<n>.py``."""
    return [call("read_file", path=f"m{k}.py") for k in range(1, n + 1)]


def gemini_outputs(body: dict[str, Any]) -> list[str]:
    """The ``output`` of every function response of a Gemini request, in order."""
    return [
        p["functionResponse"]["response"]["output"]
        for c in body["contents"]
        for p in c["parts"]
        if "functionResponse" in p
    ]


@dataclass
class Upstream:
    replies: list[str | ToolCall | Callable[[dict[str, Any]], str | ToolCall]] = field(default_factory=list)
    """The n-th request is answered with the n-th text or tool call (then "ok"), or what the n-th
    function gives for the request (a model calls only the tools it is offered)."""
    status: int = 200
    """Answer every request with this status (an error body in the API's shape when not 200)."""
    errors: dict[int, int] = field(default_factory=dict)
    """The n-th request (from 1) answered with this status instead, its error body as above."""
    hold: threading.Event | None = None
    """When set, a stream sends its first chunk, then waits for this event before the rest."""
    gate: threading.Event | None = None
    """When set, an answer not streamed waits for this event before it is sent."""
    other_status: int = 200
    """The status of other endpoints' answers (``GET /v1/models``, ``DELETE``); 204 and 304 with no body."""
    cut: set[int] = field(default_factory=set)
    """The n-th request's stream (from 1) is reset after its first chunk: the connection breaks."""
    pages: dict[int, bytes] = field(default_factory=dict)
    """The n-th request (from 1) answered 200 with this body as ``text/html`` (a web server at
    the upstream's address, a captive portal: no API's answer)."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    """The requests of other endpoints it got (``GET /v1/models``, ``POST /v1/messages/count_tokens``)."""
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    """The path of each request of ``requests``, its query too."""
    crlf: bool = False
    """Streams its events' lines ended by CRLF (as some servers write them), each event sent as
    two chunks of the chunked coding cut between the CR and the LF of its last line's end (as an
    intermediary may cut a stream)."""
    reasoned: set[str] = field(default_factory=set)
    """Responses: the responses (by number) given with reasoning, whose items need it."""
    kept: dict[str, list[Any]] = field(default_factory=dict)
    """Responses: each response stored (``store`` not false) → its whole conversation, its input
    (after the one it continued, ``previous_response_id``) and its output: what a request that
    continues it stands after, as the provider keeps it (``as_read``)."""
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, body: dict[str, Any], headers: dict[str, str], path: str = "") -> str | ToolCall:
        with self.lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.paths.append(path)
            n = len(self.requests)
        reply = self.replies[n - 1] if n <= len(self.replies) else "ok"
        return reply(body) if callable(reply) else reply

    def as_read(self, body: dict[str, Any]) -> dict[str, Any]:
        """A Responses request as the provider reads it: after the conversation of the response it
        continues, one it kept (one it does not know, which tests name, as it came)."""
        before = self.kept.get(str(body.get("previous_response_id")))
        if before is None:
            return body
        given = body.get("input")
        given = [{"role": "user", "content": given}] if isinstance(given, str) else given or []
        return {**body, "input": [*before, *given]}


def _openai_chunks(reply: str | ToolCall, n: int, legacy: bool = False) -> Iterator[bytes]:
    """``legacy``: a call is a ``function_call`` (a request of ``functions``), its name first,
    its arguments in pieces after, as the API streams one."""
    base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": int(time.time()), "model": "m"}
    if isinstance(reply, ToolCall):
        args = json.dumps(reply.args)
        if legacy:
            deltas: list[dict[str, Any]] = [{"function_call": {"name": reply.name, "arguments": ""}}]
            deltas += [{"function_call": {"arguments": args[k : k + 8]}} for k in range(0, len(args), 8)]
        else:
            fn = {"name": reply.name, "arguments": args}
            deltas = [{"tool_calls": [{"index": 0, "id": f"call_{n}", "type": "function", "function": fn}]}]
        # the text first, with the role (as a model that says what it is about to do)
        deltas = [{"role": "assistant", "content": reply.say}, *deltas] if reply.say else deltas
        deltas[0] = {"role": "assistant", **deltas[0]}
        for delta in deltas:
            choice = {"index": 0, "delta": delta, "finish_reason": None}
            yield f"data: {json.dumps(base | {'choices': [choice]})}\n\n".encode()
        done = {"index": 0, "delta": {}, "finish_reason": "function_call" if legacy else "tool_calls"}
        yield f"data: {json.dumps(base | {'choices': [done]})}\n\n".encode()
        yield b"data: [DONE]\n\n"
        return
    text = reply
    words = text.split(" ")
    for i, w in enumerate(words):
        piece = w if i == 0 else " " + w
        delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        yield f"data: {json.dumps(base | {'choices': [choice]})}\n\n".encode()
    yield f"data: {json.dumps(base | {'choices': [{'index': 0, 'delta': {}, 'finish_reason': 'stop'}]})}\n\n".encode()
    yield b"data: [DONE]\n\n"


def _anthropic_events(reply: str | ToolCall, n: int, thinking: bool = False, search: bool = False) -> Iterator[bytes]:
    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps(data | {'type': kind})}\n\n".encode()

    usage = {"input_tokens": 10, "output_tokens": 5}
    message: dict[str, Any] = {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": "m", "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": usage}  # fmt: skip
    yield event("message_start", {"message": message})
    at = 0
    if thinking:  # as the API streams it: the text in deltas, then the signature
        block = thinking_block(n)
        yield event("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": ""}})
        for piece in (block["thinking"][:8], block["thinking"][8:]):
            yield event("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": piece}})
        yield event(
            "content_block_delta", {"index": 0, "delta": {"type": "signature_delta", "signature": block["signature"]}}
        )
        yield event("content_block_stop", {"index": 0})
        at = 1
    if search:  # as the API streams a server tool: its call's input in deltas, its result whole
        use, result = searched(n)
        yield event("content_block_start", {"index": at, "content_block": {**use, "input": {}}})
        delta = {"type": "input_json_delta", "partial_json": json.dumps(use["input"])}
        yield event("content_block_delta", {"index": at, "delta": delta})
        yield event("content_block_stop", {"index": at})
        yield event("content_block_start", {"index": at + 1, "content_block": result})
        yield event("content_block_stop", {"index": at + 1})
        at += 2
    if isinstance(reply, ToolCall):
        block = {"type": "tool_use", "id": f"toolu_{n}", "name": reply.name, "input": {}}
        yield event("content_block_start", {"index": at, "content_block": block})
        delta = {"type": "input_json_delta", "partial_json": json.dumps(reply.args)}
        yield event("content_block_delta", {"index": at, "delta": delta})
        yield event("content_block_stop", {"index": at})
        yield event(
            "message_delta",
            {"delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 5}},
        )
        yield event("message_stop", {})
        return
    text = reply
    yield event("content_block_start", {"index": at, "content_block": {"type": "text", "text": ""}})
    for i, w in enumerate(text.split(" ")):
        yield event(
            "content_block_delta", {"index": at, "delta": {"type": "text_delta", "text": w if i == 0 else " " + w}}
        )
    yield event("content_block_stop", {"index": at})
    yield event(
        "message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 5}}
    )
    yield event("message_stop", {})


def signature(n: int) -> str:
    """The signature of the n-th answer's call (opaque base64, as Gemini gives it)."""
    return base64.b64encode(f"signature of answer {n}".encode()).decode()


def ran_code(n: int) -> list[dict[str, Any]]:
    """The code the scripted model runs first in its ``n``-th answer when the request offers
    Gemini's code execution tool: the code's part and its output's."""
    return [
        {"executableCode": {"language": "PYTHON", "code": f"print(sum(range({n * 100})))\n"}},
        {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": f"{sum(range(n * 100))}\n"}},
    ]


def _gemini_json(reply: str | ToolCall, n: int, ran: bool = False) -> dict[str, Any]:
    """A Gemini answer: a text, or a call (with a preamble if it says one) signed as Gemini 3 signs
    a turn's first call (its ``thoughtSignature``, which must come back with it); ``ran``: after
    running code."""
    parts: list[dict[str, Any]] = ran_code(n) if ran else []
    if isinstance(reply, ToolCall):
        parts += [{"text": reply.say}] if reply.say else []
        parts.append({"functionCall": {"name": reply.name, "args": reply.args}, "thoughtSignature": signature(n)})
    else:
        parts.append({"text": reply})
    usage = {"promptTokenCount": 100, "candidatesTokenCount": 5, "totalTokenCount": 105}
    candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "m", "responseId": f"resp-{n}"}


def _gemini_events(reply: str | ToolCall, n: int, ran: bool = False) -> Iterator[bytes]:
    """The same streamed (``alt=sse``): a text in two events, the second ending the answer; a call
    whole in one event after its preamble's, with the end; the code it ran first, in an event of
    its own."""
    whole = _gemini_json(reply, n, ran)
    candidate = whole["candidates"][0]
    code, parts = (
        (candidate["content"]["parts"][:2], candidate["content"]["parts"][2:])
        if ran
        else ([], candidate["content"]["parts"])
    )
    if isinstance(reply, ToolCall):
        pieces = [parts[:-1], parts[-1:]] if len(parts) > 1 else [parts]
    else:
        text = parts[0]["text"]
        pieces = [[{"text": text[: len(text) // 2]}], [{"text": text[len(text) // 2 :]}]]
    pieces = [code, *pieces] if code else pieces
    for k, piece in enumerate(pieces):
        last = k == len(pieces) - 1
        c = {"content": {"role": "model", "parts": piece}, "index": 0} | ({"finishReason": "STOP"} if last else {})
        event = {"candidates": [c], "modelVersion": "m", "responseId": f"resp-{n}"}
        yield (
            b"data: "
            + json.dumps(event | ({"usageMetadata": whole["usageMetadata"]} if last else {})).encode()
            + b"\r\n\r\n"
        )


def _openai_json(reply: str | ToolCall, n: int, legacy: bool = False) -> dict[str, Any]:
    """``legacy``: a call is the message's ``function_call`` (a request of ``functions``)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply if isinstance(reply, str) else reply.say or None}
    if isinstance(reply, ToolCall):
        fn = {"name": reply.name, "arguments": json.dumps(reply.args)}
        if legacy:
            message["function_call"] = fn
        else:
            message["tool_calls"] = [{"id": f"call_{n}", "type": "function", "function": fn}]
    finish = ("function_call" if legacy else "tool_calls") if isinstance(reply, ToolCall) else "stop"
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}  # fmt: skip


def thinking_block(n: int) -> dict[str, Any]:
    """The thinking block the scripted model gives its ``n``-th answer when the request enables
    extended thinking (its signature is what the provider checks it by)."""
    return {"type": "thinking", "thinking": f"Thinking about answer {n}.", "signature": f"sig-{n}-" + "A" * 20}


def searched(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The web search the scripted model makes first in its ``n``-th answer when the request
    offers Anthropic's web search tool: its ``server_tool_use`` block and its result, whose pages
    come encrypted (4,000 characters each, as a page's text would be)."""
    use = {"type": "server_tool_use", "id": f"srvtoolu_{n}", "name": "web_search", "input": {"query": f"query {n}"}}
    pages = [
        {
            "type": "web_search_result",
            "url": f"https://example.org/{n}/{k}",
            "title": f"Page {k} of search {n}",
            "encrypted_content": base64.b64encode(f"page {k} of search {n} ".encode() * 150).decode()[:4_000],
            "page_age": None,
        }  # fmt: skip
        for k in range(3)
    ]
    return use, {"type": "web_search_tool_result", "tool_use_id": use["id"], "content": pages}


def _runs_code(body: dict[str, Any]) -> bool:
    """Whether a request offers Anthropic's code execution tool (``code_execution_<date>``): its
    answer then names the container the code runs in (``container_<n>``), as the API's does."""
    tools = body.get("tools") or []
    return any(isinstance(t, dict) and str(t.get("type", "")).startswith("code_execution_") for t in tools)


def _searches(body: dict[str, Any]) -> bool:
    """Whether a request offers Anthropic's web search tool (a server tool: ``web_search_<date>``)."""
    tools = body.get("tools") or []
    return any(isinstance(t, dict) and str(t.get("type", "")).startswith("web_search_") for t in tools)


def _anthropic_json(reply: str | ToolCall, n: int, thinking: bool = False, search: bool = False) -> dict[str, Any]:
    content: list[dict[str, Any]] = [thinking_block(n)] if thinking else []
    if search:
        content += searched(n)
    if isinstance(reply, ToolCall):
        content.append({"type": "tool_use", "id": f"toolu_{n}", "name": reply.name, "input": reply.args})
    else:
        content.append({"type": "text", "text": reply})
    return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": "m", "content": content,
            "stop_reason": "tool_use" if isinstance(reply, ToolCall) else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5}}  # fmt: skip


def reasoning_item(n: int) -> dict[str, Any]:
    """The reasoning item the scripted model's ``n``-th response starts with when the request asks
    for reasoning (as a reasoning model's, with ``store: false``: encrypted)."""
    return {"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": f"gAAAA-enc-{n}"}


def served_items(n: int, tools: Any) -> list[dict[str, Any]]:
    """The items of the provider's own tools the scripted model's ``n``-th response starts with,
    after its reasoning, when the request offers them (Responses API): a web search
    (``web_search``), a remote MCP server's tools listed and one called (``mcp``), a tool search
    the provider runs (``tool_search``, finding a deferred tool)."""
    offered = {str(t.get("type")) for t in tools or () if isinstance(t, dict)}
    items: list[dict[str, Any]] = []
    if offered & {"web_search", "web_search_preview"}:
        items.append({"type": "web_search_call", "id": f"ws_{n}", "status": "completed",
                      "action": {"type": "search", "query": f"query {n}"}})  # fmt: skip
    if "mcp" in offered:
        schema = {"type": "object", "properties": {"q": {"type": "string"}}}
        items.append({"type": "mcp_list_tools", "id": f"mcpl_{n}", "server_label": "docs",
                      "tools": [{"name": "lookup", "input_schema": schema, "description": "Look it up."}]})  # fmt: skip
        items.append({"type": "mcp_call", "id": f"mcp_{n}", "server_label": "docs", "name": "lookup",
                      "arguments": json.dumps({"q": f"q{n}"}), "output": f"docs page {n} " * 200,
                      "status": "completed"})  # fmt: skip
    if "tool_search" in offered:
        found = [{"type": "function", "name": f"deferred_{n}", "description": "Found.", "parameters": {}}]
        items.append({"type": "tool_search_call", "id": f"tsc_{n}", "call_id": None, "execution": "server",
                      "status": "completed", "arguments": {"query": f"tools {n}"}})  # fmt: skip
        items.append({"type": "tool_search_output", "id": f"tso_{n}", "call_id": None, "execution": "server",
                      "status": "completed", "tools": found})  # fmt: skip
    return items


def _response_items(reply: str | ToolCall, n: int, reasoning: bool = False, tools: Any = None) -> list[dict[str, Any]]:
    def message(text: str, item_id: str) -> dict[str, Any]:
        return {"type": "message", "id": item_id, "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip

    first = [reasoning_item(n)] if reasoning else []
    first += served_items(n, tools)
    if isinstance(reply, str):
        return [*first, message(reply, f"msg_{n}")]
    fc = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": reply.name,
          "arguments": json.dumps(reply.args), "status": "completed"}  # fmt: skip
    if reply.patch:
        first.append({"type": "custom_tool_call", "id": f"ctc_{n}", "call_id": f"call_p{n}", "name": "apply_patch",
                      "input": reply.patch, "status": "completed"})  # fmt: skip
    return [*first, message(reply.say, f"msg_{n}"), fc] if reply.say else [*first, fc]


def _items_refused(items: Any, reasoned: set[str]) -> str | None:
    """What the Responses API says of input items a reasoning model's loop got wrong: an id twice,
    a reasoning item not followed by an item of its response, an item of a response that had
    reasoning sent without it; None: accepted."""
    if not isinstance(items, list):
        return None
    ids = [i["id"] for i in items if isinstance(i, dict) and isinstance(i.get("id"), str)]
    twice = next((i for i in ids if ids.count(i) > 1), None)
    if twice is not None:
        return f"Duplicate item found with id {twice}. Remove duplicate items from your input and try again."
    for k, item in enumerate(items):
        if not isinstance(item, dict) or item.get("type") != "reasoning" or "id" not in item:
            continue
        n = str(item.get("id", "")).removeprefix("rs_")
        after = items[k + 1] if k + 1 < len(items) and isinstance(items[k + 1], dict) else {}
        if not str(after.get("id", "")).endswith(f"_{n}") or after.get("type") == "reasoning":
            return f"Item '{item['id']}' of type 'reasoning' was provided without its required following item."
    for item in items:
        if not isinstance(item, dict):
            continue
        kind, item_id = item.get("type"), str(item.get("id", ""))
        if kind in ("function_call", "message") and item.get("role", "assistant") == "assistant" and "_" in item_id:
            n = item_id.split("_", 1)[1]
            if n in reasoned and f"rs_{n}" not in ids:
                return (
                    f"Item '{item_id}' of type '{kind}' was provided without its required 'reasoning' item: 'rs_{n}'."
                )
    return None


def _response_json(reply: str | ToolCall, n: int, reasoning: bool = False, tools: Any = None) -> dict[str, Any]:
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip
    return {"id": f"resp_{n}", "object": "response", "created_at": int(time.time()), "status": "completed",
            "model": "m", "output": _response_items(reply, n, reasoning, tools), "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "usage": usage}  # fmt: skip


def _response_events(reply: str | ToolCall, n: int, reasoning: bool = False, tools: Any = None) -> Iterator[bytes]:
    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps(data | {'type': kind})}\n\n".encode()

    done = _response_json(reply, n, reasoning, tools)
    seq = iter(range(1, 1000))
    yield event("response.created", {"response": done | {"status": "in_progress", "output": []}, "sequence_number": 0})
    for k, item in enumerate(done["output"]):
        calling = item["type"] in ("function_call", "custom_tool_call")
        argument = "input" if item["type"] == "custom_tool_call" else "arguments"
        if item["type"] not in ("message", "function_call", "custom_tool_call"):  # reasoning, the provider's tools
            started = item | {"encrypted_content": None} if item["type"] == "reasoning" else item
            yield event("response.output_item.added", {"output_index": k, "item": started,
                                                       "sequence_number": next(seq)})  # fmt: skip
            yield event("response.output_item.done", {"output_index": k, "item": item, "sequence_number": next(seq)})
            continue
        fresh: dict[str, Any] = {argument: ""} if calling else {"content": []}
        started = item | fresh | {"status": "in_progress"}
        yield event("response.output_item.added", {"output_index": k, "item": started, "sequence_number": next(seq)})
        if calling:
            delta = {"item_id": item["id"], "output_index": k, "delta": item[argument]}
            kind = "custom_tool_call_input" if argument == "input" else "function_call_arguments"
            yield event(f"response.{kind}.delta", delta | {"sequence_number": next(seq)})
        else:  # as the API streams a message: its part added, the text in deltas, both done
            part = item["content"][0]
            at = {"item_id": item["id"], "output_index": k, "content_index": 0}
            yield event("response.content_part.added", at | {"part": part | {"text": ""}, "sequence_number": next(seq)})
            for i, w in enumerate(part["text"].split(" ")):
                delta = at | {"delta": w if i == 0 else " " + w}
                yield event("response.output_text.delta", delta | {"sequence_number": next(seq)})
            yield event("response.output_text.done", at | {"text": part["text"], "sequence_number": next(seq)})
            yield event("response.content_part.done", at | {"part": part, "sequence_number": next(seq)})
        yield event("response.output_item.done", {"output_index": k, "item": item, "sequence_number": next(seq)})
    yield event("response.completed", {"response": done, "sequence_number": next(seq)})


def _thinking_refused(messages: list[dict[str, Any]]) -> str | None:
    """What the Messages API says of a request with extended thinking on whose last assistant
    message, answered by tool results, does not start with a thinking block, or holds one that is
    not a block the model gave (the API checks each one's signature); None: accepted."""
    for m in messages:
        blocks = m["content"] if m["role"] == "assistant" and isinstance(m["content"], list) else []
        for b in blocks:
            if b.get("type") == "thinking" and not b.get("signature", "").startswith("sig-"):
                return "Invalid `signature` in `thinking` block"
            if b.get("type") == "thinking" and b != thinking_block(int(b["signature"].split("-")[1])):
                return "Invalid `signature` in `thinking` block"
    last = next((k for k in range(len(messages) - 1, -1, -1) if messages[k]["role"] == "assistant"), None)
    if last is None or last == len(messages) - 1:
        return None
    blocks = messages[last]["content"] if isinstance(messages[last]["content"], list) else []
    if any(b.get("type") == "tool_use" for b in blocks) and (
        not blocks or blocks[0].get("type") not in ("thinking", "redacted_thinking")
    ):
        first = blocks[0].get("type") if blocks else "text"
        return (
            f"messages.{last}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. "
            "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
            "(preceeding the lastmost set of `tool_use` and `tool_result` blocks)."
        )
    return None


def _handler(up: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("x-request-id", "req-upstream-1")
            self.end_headers()
            self.wfile.write(body)

        def _other(self, answer: dict[str, Any]) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with up.lock:
                up.other.append(f"{self.command} {self.path}")
            if up.other_status in (204, 304):
                self.send_response(up.other_status)
                self.end_headers()
                return
            self._send(up.other_status, json.dumps(answer).encode())

        def _gemini(self, body: dict[str, Any], text: str | ToolCall, *, streamed: bool, enveloped: bool) -> None:
            n = len(up.requests)
            status = up.errors.get(n, up.status)
            refused = pairing_refused("gemini", body)
            if status != 200 or refused is not None:
                code, why = (status, "slow down") if status != 200 else (400, refused)
                name = "RESOURCE_EXHAUSTED" if code == 429 else "INVALID_ARGUMENT"
                self._send(code, json.dumps({"error": {"code": code, "message": why, "status": name}}).encode())
                return

            def answer(a: dict[str, Any]) -> dict[str, Any]:
                return {"response": a, "traceId": f"trace-{n}"} if enveloped else a

            ran = any(isinstance(t, dict) and "codeExecution" in t for t in body.get("tools") or ())
            if not streamed:
                self._send(200, json.dumps(answer(_gemini_json(text, n, ran))).encode())
                return
            sse = "alt=sse" in self.path.partition("?")[2].split("&")
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream" if sse else "application/json; charset=UTF-8")
            self.send_header("Connection", "close")
            self.end_headers()
            for k, event in enumerate(_gemini_events(text, n, ran)):
                if enveloped:
                    event = b"data: " + json.dumps(answer(json.loads(event[6:]))).encode() + b"\r\n\r\n"
                if not sse:  # a JSON array, each answer an element as it comes
                    event = (b",\r\n" if k else b"[") + json.dumps(json.loads(event[6:]), indent=2).encode()
                self.wfile.write(event)
                self.wfile.flush()
            if not sse:
                self.wfile.write(b"]")
            self.close_connection = True

        def do_GET(self) -> None:  # noqa: N802 - a model list, as either API gives it
            model = {"id": "m", "object": "model", "created": 0, "owned_by": "x", "type": "model",
                     "display_name": "M", "created_at": "2026-01-01T00:00:00Z"}  # fmt: skip
            self._other({"object": "list", "data": [model], "has_more": False, "first_id": "m", "last_id": "m"})

        def do_DELETE(self) -> None:  # noqa: N802
            self._other({"id": self.path.rsplit("/", 1)[-1], "object": "response", "deleted": True})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.startswith("/v1/messages/count_tokens"):
                self._other({"input_tokens": 7})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if ":countTokens" in self.path or self.path.startswith("/v1internal:loadCodeAssist"):
                with up.lock:
                    up.other.append(f"{self.command} {self.path}")
                self._send(200, json.dumps({"totalTokens": 7}).encode())
                return
            text = up.record(body, dict(self.headers.items()), self.path)
            if ":generateContent" in self.path or ":streamGenerateContent" in self.path:
                enveloped = self.path.startswith("/v1internal:")  # Code Assist: the request in an envelope
                self._gemini(
                    body["request"] if enveloped else body, text, streamed="stream" in self.path, enveloped=enveloped
                )
                return
            anthropic = self.path.startswith("/v1/messages")
            responses = self.path.startswith("/v1/responses")
            page = up.pages.get(len(up.requests))
            if page is not None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                return
            status = up.errors.get(len(up.requests), up.status)
            if status != 200:
                limited = (
                    {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
                    if anthropic
                    else {"error": {"message": "slow down", "type": "rate_limit_exceeded", "code": None}}
                )
                self._send(status, json.dumps(limited).encode())
                return
            n = len(up.requests)
            # extended thinking, or adaptive (the model thinks when it sees fit; this one always does)
            thinking = anthropic and (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
            search = anthropic and _searches(body)  # the model searches the web first, every answer
            reasoning = responses and bool(body.get("reasoning"))
            tools = body.get("tools")  # the provider's own among them run first (served_items)
            if reasoning:
                up.reasoned.add(str(n))
            api = "anthropic" if anthropic else "responses" if responses else "openai"
            legacy = api == "openai" and "functions" in body and not body.get("tools")  # function calling of 2023
            listed = responses or isinstance(body.get("messages"), list)
            if responses:
                body = up.as_read(body)
            refused = (
                ("messages: Input should be a valid list" if not listed else None)
                or pairing_refused(api, body)
                or (_thinking_refused(body["messages"]) if thinking else _items_refused(body.get("input"), up.reasoned))
            )
            if refused is not None:
                err: dict[str, Any] = {"type": "invalid_request_error", "message": refused}
                shaped = (
                    {"type": "error", "error": err} if anthropic else {"error": err | {"param": None, "code": None}}
                )
                self._send(400, json.dumps(shaped).encode())
                return
            if responses and body.get("store") is not False and isinstance(body.get("input"), list):
                up.kept[f"resp_{n}"] = [*body["input"], *_response_items(text, n, reasoning, tools)]
            if not body.get("stream"):
                if up.gate is not None:
                    up.gate.wait(30)
                if anthropic:
                    answered = _anthropic_json(text, n, thinking, search)
                    if _runs_code(body):
                        answered["container"] = {"id": f"container_{n}", "expires_at": "2026-12-05T13:00:00Z"}
                    self._send(200, json.dumps(answered).encode())
                    return
                answer = _response_json(text, n, reasoning, tools) if responses else _openai_json(text, n, legacy)
                self._send(200, json.dumps(answer).encode())
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            if up.crlf:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                if anthropic:
                    chunks = _anthropic_events(text, n, thinking, search)
                    if _runs_code(body):
                        chunks = _in_container(chunks, n)
                else:
                    chunks = (
                        _response_events(text, n, reasoning, tools) if responses else _openai_chunks(text, n, legacy)
                    )
                if up.crlf:
                    chunks = _crlf_chunks(chunks)
                for i, chunk in enumerate(chunks):
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    if i == 0 and up.hold is not None:
                        up.hold.wait(30)
                    if i == 0 and n in up.cut:  # reset (RST), not closed: the body is not whole
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        self.connection.close()
                        return
                if up.crlf:
                    self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading (a benchmark takes the first chunk only)
            self.close_connection = True

    return Handler


def _in_container(events: Iterator[bytes], n: int) -> Iterator[bytes]:
    """An Anthropic stream whose end (``message_delta``) names the container its code ran in."""
    for event in events:
        if event.startswith(b"event: message_delta\n"):
            data = json.loads(event.split(b"data: ", 1)[1])
            data["delta"]["container"] = {"id": f"container_{n}", "expires_at": "2026-12-05T13:00:00Z"}
            event = f"event: message_delta\ndata: {json.dumps(data)}\n\n".encode()
        yield event


def _crlf_chunks(events: Iterator[bytes]) -> Iterator[bytes]:
    """Events with their lines ended by CRLF, each as two chunks of the chunked coding cut between
    the CR and the LF of its last line's end."""
    for event in events:
        crlf = event.replace(b"\n", b"\r\n")
        for part in (crlf[:-1], crlf[-1:]):
            yield b"%x\r\n%s\r\n" % (len(part), part)


@contextmanager
def upstream(**kwargs: Any) -> Iterator[Upstream]:
    up = Upstream(**kwargs)
    with serving(_handler(up)) as up.url:
        yield up
