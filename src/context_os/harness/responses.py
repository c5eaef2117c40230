"""The OpenAI Responses API's ``input`` items as chat-completions messages and back, so that
``ctxos proxy`` manages a Responses conversation (Codex CLI's, the Agents SDK's) with the same
OpenAI hook as a chat one, and a Codex rollout replays as the messages its items stand for
(replay/formats/codex.py).

``to_chat(input)`` groups the items the way the model produced them: a ``message`` of the user,
system or developer is a message; the assistant's ``message``, ``function_call`` and
``custom_tool_call`` items of one response (and the ``reasoning`` items among them, opaque and
encrypted) make one assistant message, the calls its tool calls (a custom tool's ``input`` as
``{"input": …}``; the built-in tools the client runs, ``local_shell_call``, ``shell_call`` and
``apply_patch_call``, as calls of ``local_shell``, ``shell`` and ``apply_patch`` whose arguments
are the item's ``action`` or ``operation``), with the items no output answers (the provider's
own tools' items: a web search, a remote MCP server's tools and calls; the ``compaction`` item,
encrypted, that ``/v1/responses/compact`` returns for the history it compacted) kept whole among
them; the outputs (``function_call_output``, ``custom_tool_call_output``, and those of the
built-in tools: a shell's chunks of stdout and stderr as one text, the tools a tool search
found) are tool messages (an output of parts that holds images or files, as Codex's
``view_image`` gives, as chat parts). The items a client adds for the responses after them (a
reasoning effort's change, tools made available, a request to compact) are developer messages
without text.
Each message keeps what it came from in fields of its own (``ctxos_item``, ``ctxos_items``:
the OpenAI adapter keeps fields it does not interpret), so ``to_items`` gives back the very
items a message came from when context_os left it as it was, and items rebuilt from what it
sends when it changed it (a collapsed output, an elided argument, a redacted text). Reasoning
items stay with the response they belong to, in their place.

A computer-use call is a call of ``computer`` (its action or batched actions the arguments) and
its screenshot an image part of its output; both go back as they came, whatever context_os
shows (the API takes nothing but a screenshot as that call's output). An item of another type
(an item reference) cannot be managed here: ``to_chat`` raises ``MalformedMessage``, and the
proxy forwards the request as it came.

This module only translates; it never touches a session or a store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import MalformedMessage
from ..tokens import CHARS_PER_TOKEN, image_tokens, value_chars

__all__ = [
    "BUILT_IN_TOOLS",
    "CALLS",
    "ITEM",
    "ITEMS",
    "OUTPUTS",
    "WHOLE_OUTPUTS",
    "client_call",
    "for_replay",
    "provider_chars",
    "provider_item",
    "sent_whole",
    "stdout_of",
    "to_chat",
    "to_items",
]

ITEM = "ctxos_item"
"""On a user, system, developer or tool message: the item it came from (an output's without its
``output``, which is the message's content)."""
ITEMS = "ctxos_items"
"""On an assistant message: its response's items in order; a call's without its arguments
(``ctxos_call`` names it), the reasoning items whole."""
_CALL = "ctxos_call"
_JOIN = "\n\n"
"""Between the texts of a response's several assistant messages (a preamble, then an answer)."""
_ROLES = ("user", "system", "developer")
_CALLS = {"function_call": "arguments", "custom_tool_call": "input"}
_BUILT_IN = {
    "local_shell_call": ("local_shell", "action"),
    "shell_call": ("shell", "action"),
    "apply_patch_call": ("apply_patch", "operation"),
    "tool_search_call": ("tool_search", "arguments"),
}
"""The built-in tools a client runs itself: item type → (the call's name as a tool call, the
field holding its arguments, an object). A tool search the client runs (``"execution":
"client"``; Codex looks up the tools of its apps and MCP servers so) is one of them; one the
provider runs is its own tool's (``_OPAQUE``)."""
_WHOLE_CALLS = {"computer_call": "computer"}
"""Calls the client runs that go upstream as they came, as their outputs do (``WHOLE_OUTPUTS``): a
computer-use call (its ``action``, or its batched ``actions``, are its arguments)."""
BUILT_IN_TOOLS = frozenset(name for name, _ in _BUILT_IN.values())
"""The built-in tools a client runs itself, as a request offers them (``{"type": "shell"}``) and
as their calls are named here."""
CALLS = frozenset({*_CALLS, *_BUILT_IN, *_WHOLE_CALLS})
"""The item types of the calls a client runs itself, each answered by an output item: a
function's, a custom tool's (Codex's ``apply_patch``), a built-in tool's."""
_LISTS = ("command", "commands")
"""Fields of a built-in call's arguments that must stay lists of strings (an argv, a shell's
commands): elided by context_os, the note is the list's one string."""
OUTPUTS = {
    "function_call_output": "call_id",
    "custom_tool_call_output": "call_id",
    "shell_call_output": "call_id",
    "apply_patch_call_output": "call_id",
    "local_shell_call_output": "id",
    "tool_search_output": "call_id",
    "computer_call_output": "call_id",
}
"""The output items (a tool's result), by type: the field naming the call they answer."""
WHOLE_OUTPUTS = frozenset({"tool_search_output", "computer_call_output"})
"""Output items that go upstream whole whatever context_os shows of them (the OpenAI adapter tells
the engine so, ``view.SENT_WHOLE``, which then counts them whole): the tools a tool search found,
by whose definitions there the model calls them; a computer-use call's screenshot, which the API
takes as the only output of that call (a stub of text cannot stand in its place)."""
_STREAMS = ("stdout", "stderr")
_CHUNKS = "ctxos_chunks"
"""On a ``shell_call_output``'s tool message: its chunks, each text's length in place of the text."""
_PROVIDER_TOOLS = (
    "web_search_call",
    "file_search_call",
    "code_interpreter_call",
    "mcp_list_tools",
    "mcp_call",
    "mcp_approval_request",
    "mcp_approval_response",
    "program",
    "program_output",
)
"""The provider's own tools' items, which the model reads as they are: a web or file search, the
code interpreter's code and output, a remote MCP server's tools listed and called (and the
client's approval of a call it asked for, which stands in the response, after its request),
a program of programmatic tool calling and its result."""
_OPAQUE = ("reasoning", "compaction", "image_generation_call", *_PROVIDER_TOOLS)
"""Items of the model's that no output of the client's answers (its reasoning, the provider's
own tools' items, the encrypted history a remote compaction returns in place of the turns it
compacted): kept whole, in their place among the items of the response they are in."""
_SERVED = ("tool_search_call", "tool_search_output")
"""Items that are the provider's own (``_OPAQUE``) when it ran them (``"execution": "server"``),
a call and its output otherwise."""
_DEVELOPER = ("configuration_update", "additional_tools", "compaction_trigger")
"""Items the client adds for the responses after them, neither a message nor a response's: a
reasoning effort from then on (Codex sends one when its effort changes), tools made available
from then on, a request to compact (the last item). Each is a developer message without text
that goes back as it came; as a system message, no history horizon hides it."""


def _served(item: Mapping[str, Any]) -> bool:
    """Whether an item is the provider's own: one kept whole among its response's items
    (``_OPAQUE``), or a tool search it ran (``_SERVED``)."""
    kind = item.get("type")
    return kind in _OPAQUE or (kind in _SERVED and item.get("execution") == "server")


def sent_whole(message: Mapping[str, Any]) -> bool:
    """Whether a message of ``to_chat``'s stands for an output item that goes upstream whole,
    whatever context_os shows (``WHOLE_OUTPUTS``: the tools a tool search found, a screenshot)."""
    item = message.get(ITEM)
    return isinstance(item, Mapping) and item.get("type") in WHOLE_OUTPUTS


def for_replay(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``to_chat``'s messages as a replay sends them: without the items kept to give them back
    (``ITEM``, ``ITEMS``), but where one tells the adapter that its output goes whole
    (``sent_whole``: the proxy sends it so, and a replay counts what the proxy would send)."""
    for m in messages:
        if not sent_whole(m):
            m.pop(ITEM, None)
        m.pop(ITEMS, None)
    return messages


def client_call(item: Mapping[str, Any]) -> bool:
    """Whether an item is a call the client runs (``CALLS``; not a tool search the provider ran)."""
    return item.get("type") in CALLS and not _served(item)


def provider_item(item: Mapping[str, Any]) -> bool:
    """Whether an item is one the provider wrote in a response and a client keeps as it came: its
    reasoning, its text, its own tools' items (not a call the client runs, nor its output)."""
    if item.get("type") == "message":
        return item.get("role") == "assistant"
    return _served(item)


def provider_chars(message: Mapping[str, Any]) -> int:
    """What the provider's own tools' items of an assistant message (``to_chat``'s) put in front
    of the model: ``value_chars`` of each (a web search's action, a file search's results, the code
    interpreter's code and output, an MCP server's tools and a call's output); an image
    generation's image (its ``result``, base64) as the image it is (``image_tokens``, in
    characters). Of a developer message of an item (``_DEVELOPER``): that item's, the tools it
    adds above all."""
    item = message.get(ITEM)
    if isinstance(item, Mapping) and item.get("type") in _DEVELOPER:
        return value_chars(item)
    items = message.get(ITEMS)
    if not isinstance(items, list):
        return 0
    n = 0
    for i in items:
        if not isinstance(i, Mapping):
            continue
        if i.get("type") in _PROVIDER_TOOLS:
            n += value_chars(i)
        elif i.get("type") == "image_generation_call" and isinstance(i.get("result"), str) and i["result"]:
            n += image_tokens(i["result"]) * CHARS_PER_TOKEN
    return n


def _parts_text(content: Any, k: int) -> str:
    """The text of an assistant message's content (a string, or its text parts joined)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise MalformedMessage("content must be a string or a list of parts", index=k, field="content")
    texts = []
    for part in content:
        if not isinstance(part, Mapping) or part.get("type") not in ("output_text", "input_text", "refusal"):
            raise MalformedMessage("an assistant message part context_os does not manage", index=k, field="content")
        texts.append(str(part.get("text", part.get("refusal", ""))))
    return "".join(texts)


def _chat_content(content: Any, k: int) -> Any:
    """A user, system or developer message's content as chat content: a string as it is, parts
    as chat parts (``input_text`` → ``text``, ``input_image`` → ``image_url``, ``input_file`` →
    ``file``), every field kept."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise MalformedMessage("content must be a string or a list of parts", index=k, field="content")
    out: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
        elif kind == "input_image" and isinstance(part.get("image_url") or part.get("file_id"), str):
            # by its URL or an uploaded file's id (no chat form: kept beside an empty URL)
            image = {"url": part.get("image_url") or ""}
            image |= {k: part[k] for k in ("detail", "file_id") if k in part}
            out.append({"type": "image_url", "image_url": image})
        elif kind == "input_file":
            out.append({"type": "file", "file": {k: v for k, v in part.items() if k != "type"}})
        else:
            raise MalformedMessage(f"a {kind!r} part context_os does not manage", index=k, field="content")
    return out


def _items_content(content: Any, role: str) -> Any:
    """Chat content back as Responses content (a string stays one)."""
    if not isinstance(content, list):
        return "" if content is None else content
    text_type = "output_text" if role == "assistant" else "input_text"
    out = []
    for part in content:
        if part.get("type") == "image_url":
            image = part["image_url"]
            back = {"type": "input_image"} | ({"image_url": image["url"]} if image.get("url") else {})
            out.append(back | {k: image[k] for k in ("detail", "file_id") if k in image})
        elif part.get("type") == "file":
            out.append({"type": "input_file", **part["file"]})
        else:
            out.append({"type": text_type, "text": part.get("text", "")})
    return out


def _output_content(output: Any, k: int) -> Any:
    """A tool output as the tool message's content: its text; an output of text parts joined;
    one holding images or files (Codex's ``view_image``: ``input_text`` and ``input_image``
    parts) as chat parts, which the OpenAI hook shows as they came while the output shows whole."""
    if isinstance(output, str):
        return output
    if isinstance(output, list) and all(isinstance(p, Mapping) and p.get("type") == "input_text" for p in output):
        return "".join(str(p.get("text", "")) for p in output)
    if isinstance(output, list):
        return _chat_content(output, k)
    raise MalformedMessage("a tool output must be a string or a list of parts", index=k, field="output")


def _call(kind: str, item: Mapping[str, Any], k: int) -> tuple[str, str, str]:
    """A call item's tool name, the field of its arguments, and its arguments as a tool call's."""
    if not isinstance(item.get("call_id"), str):
        raise MalformedMessage(f"a {kind} needs a call_id", index=k)
    if kind in _WHOLE_CALLS:  # its item goes as it came: nothing is taken out of it
        moves = {f: item[f] for f in ("action", "actions") if f in item}
        if not moves:
            raise MalformedMessage(f"a {kind} needs an action or actions", index=k, field="action")
        return _WHOLE_CALLS[kind], "", json.dumps(moves)
    if kind in _BUILT_IN:
        name, payload = _BUILT_IN[kind]
        if not isinstance(item.get(payload), Mapping):
            raise MalformedMessage(f"a {kind}'s {payload} must be an object", index=k, field=payload)
        return name, payload, json.dumps(item[payload])
    payload = _CALLS[kind]
    value = item.get(payload)
    if not isinstance(item.get("name"), str):
        raise MalformedMessage(f"a {kind} needs a name", index=k, field="name")
    if not isinstance(value, str):
        raise MalformedMessage(f"a {kind}'s {payload} must be a string", index=k, field=payload)
    return item["name"], payload, value if kind == "function_call" else json.dumps({"input": value})


def _output(kind: str, output: Any, k: int) -> tuple[Any, dict[str, Any]]:
    """An output item's ``output`` as the tool message's content, and what its item keeps of it
    besides (a shell's chunks without their texts: their outcomes and the texts' lengths)."""
    if kind == "apply_patch_call_output" and output is None:
        return "", {}
    if kind == "tool_search_output":  # the tools found (its item keeps them: they go whole)
        if not isinstance(output, list):
            raise MalformedMessage("a tool_search_output's tools must be a list", index=k, field="tools")
        return json.dumps(output, ensure_ascii=False), {}
    if kind == "computer_call_output":  # the screenshot, as the image part it is (its item keeps it)
        if not isinstance(output, Mapping) or output.get("type") != "computer_screenshot":
            raise MalformedMessage("a computer_call_output's output must be a computer_screenshot", index=k)
        image = {"url": output.get("image_url") or ""} | ({"file_id": output["file_id"]} if "file_id" in output else {})
        return [{"type": "image_url", "image_url": image}], {}
    if kind != "shell_call_output":
        return _output_content(output, k), {}
    if not isinstance(output, list) or not all(isinstance(c, Mapping) for c in output):
        raise MalformedMessage("a shell_call_output's output must be a list of chunks", index=k, field="output")
    texts = [c.get(f) or "" for c in output for f in _STREAMS]
    if not all(isinstance(t, str) for t in texts):
        raise MalformedMessage("a shell output chunk's stdout and stderr must be text", index=k, field="output")
    chunks = [{**c, **{f: len(c.get(f) or "") for f in _STREAMS}} for c in output]
    return "".join(texts), {_CHUNKS: chunks}


def _failed(item: Mapping[str, Any]) -> bool:
    """Whether a built-in tool's output says its call failed: a patch not applied, a shell
    command that exited non-zero or timed out (what is read of files goes by it)."""
    if item.get("type") == "apply_patch_call_output":
        return item.get("status") == "failed"
    if item.get("type") != "shell_call_output":
        return False
    outcomes = [c.get("outcome") for c in item.get("output") or ()]
    return any(isinstance(o, Mapping) and (o.get("type") == "timeout" or o.get("exit_code")) for o in outcomes)


def _shell_output(text: str, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A shell's chunks again: as they came if ``text`` is their texts' length, else one chunk
    of ``text`` with the last one's outcome (collapsed or redacted by context_os)."""
    if sum(c[f] for c in chunks for f in _STREAMS) == len(text):
        out, at = [], 0
        for c in chunks:
            chunk = dict(c)
            for f in _STREAMS:
                chunk[f], at = text[at : at + c[f]], at + c[f]
            out.append(chunk)
        return out
    last = chunks[-1] if chunks else {"outcome": {"type": "exit", "exit_code": 0}}
    return [{**last, "stdout": text, "stderr": ""}]


def stdout_of(text: str, extra: Mapping[str, Any] | None) -> str:
    """What a tool message's chunks printed to stdout, if it came from a built-in shell's output
    (its ``extra`` holds the item, which holds its chunks' lengths), else ``text``: a shell's
    warnings on stderr are no part of a file it printed. A text whose length is not the chunks'
    (redacted) stays whole."""
    item = (extra or {}).get(ITEM)
    chunks = item.get(_CHUNKS) if isinstance(item, Mapping) else None
    if not isinstance(chunks, list) or not all(
        isinstance(c, Mapping) and all(isinstance(c.get(f), int) for f in _STREAMS) for c in chunks
    ):
        return text
    return "".join(c["stdout"] for c in _shell_output(text, chunks))  # whole when the lengths do not add up


def to_chat(input: Any) -> list[dict[str, Any]]:
    """A Responses ``input`` (a string, or a list of items) as chat messages (module docstring)."""
    if isinstance(input, str):
        return [{"role": "user", "content": input}]
    if not isinstance(input, list):
        raise MalformedMessage("input must be a string or a list of items", field="input")
    out: list[dict[str, Any]] = []
    reply: dict[str, Any] | None = None  # the assistant message of the response being read

    def response() -> dict[str, Any]:
        nonlocal reply
        if reply is None:
            reply = {"role": "assistant", "content": None, ITEMS: []}
            out.append(reply)
        return reply

    for k, item in enumerate(input):
        if not isinstance(item, Mapping):
            raise MalformedMessage("an input item must be an object", index=k)
        kind = item.get("type", "message")
        if _served(item):  # reasoning, the provider's own tools' items: kept whole among its response's
            response()[ITEMS].append(dict(item))
        elif kind == "message" and item.get("role") == "assistant":
            r = response()
            text = _parts_text(item.get("content"), k)
            r["content"] = text if r["content"] is None else r["content"] + _JOIN + text
            r[ITEMS].append(dict(item))
        elif kind == "message":
            role = item.get("role")
            if role not in _ROLES:
                raise MalformedMessage(f"unknown role {role!r}", index=k, field="role")
            reply = None
            out.append({"role": role, "content": _chat_content(item.get("content"), k), ITEM: dict(item)})
        elif kind in CALLS:
            name, payload, arguments = _call(kind, item, k)
            call = {"id": item["call_id"], "type": "function", "function": {"name": name, "arguments": arguments}}
            r = response()
            if any(c["id"] == item["call_id"] for c in r.get("tool_calls") or ()):
                raise MalformedMessage(f"call_id {item['call_id']!r} twice in one response", index=k)
            r.setdefault("tool_calls", []).append(call)
            r[ITEMS].append({**{f: v for f, v in item.items() if f != payload}, _CALL: item["call_id"]})
        elif kind in OUTPUTS:
            id_field = OUTPUTS[kind]
            if not isinstance(item.get(id_field), str):
                raise MalformedMessage(f"a {kind} needs a {id_field}", index=k)
            reply = None
            text, kept = _output(kind, item.get("tools" if kind == "tool_search_output" else "output"), k)
            whole = kind in WHOLE_OUTPUTS  # (its item keeps all of it: it goes as it came)
            shell = dict(item) if whole else {**{f: v for f, v in item.items() if f != "output"}, **kept}
            message = {"role": "tool", "tool_call_id": item[id_field], "content": text, ITEM: shell}
            if _failed(item):
                message["is_error"] = True
            out.append(message)
        elif kind in _DEVELOPER:
            reply = None
            out.append({"role": "developer", "content": "", ITEM: dict(item)})
        else:
            raise MalformedMessage(f"an input item of type {kind!r} context_os does not manage", index=k, field="type")
    return out


def to_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages (as the OpenAI hook renders them) back as Responses input items."""
    out: list[dict[str, Any]] = []
    kinds: dict[str, str] = {}  # call id → the type of its call item
    for m in messages:
        role = m["role"]
        if role == "assistant":
            items = _response_items(m)
            kinds.update((i["call_id"], i["type"]) for i in items if i.get("type") in CALLS and "call_id" in i)
            out.extend(items)
        elif role == "tool":
            content = m.get("content")
            if sent_whole(m):
                out.append(dict(m[ITEM]))  # as it came, collapsed or not (the tools found, a screenshot)
                continue
            if isinstance(content, list) and isinstance(m.get(ITEM), Mapping):  # images shown whole: as they came
                out.append({**m[ITEM], "output": _items_content(content, "user")})
                continue
            text = content if isinstance(content, str) else json.dumps(content)
            if m.get(ITEM) is None:  # an output context_os made (a call left unanswered)
                out.append(_made_output(kinds.get(m.get("tool_call_id", ""), "function_call"), m, text))
                continue
            shell = dict(m[ITEM])
            chunks = shell.pop(_CHUNKS, None)
            if shell.get("type") == "shell_call_output":
                out.append({**shell, "output": _shell_output(text, chunks or [])})
            elif shell.get("type") == "apply_patch_call_output" and not text:
                out.append(shell)  # its output is optional
            else:
                out.append({**shell, "output": text})
        else:
            item = m.get(ITEM)
            content = m.get("content")
            if isinstance(item, Mapping) and (item.get("type") in _DEVELOPER or _same_content(item, content)):
                out.append(dict(item))  # as it came (an item for later responses has no text to change)
            else:
                out.append({"type": "message", "role": role, "content": _items_content(content, role)})
    return out


def _made_output(call: str, m: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The output item, of its call's kind, of a result context_os made for a call the client
    left unanswered (``text`` says so): a custom tool's or a built-in tool's output is of its own
    type (a ``function_call_output`` is refused for them), a failed one where it has a status."""
    call_id = m.get("tool_call_id", "")
    if call == "shell_call":
        failed = {"stdout": "", "stderr": text, "outcome": {"type": "exit", "exit_code": 1}}
        return {"type": "shell_call_output", "call_id": call_id, "output": [failed]}
    if call == "local_shell_call":
        return {"type": "local_shell_call_output", "id": call_id, "output": text}
    if call == "apply_patch_call":
        return {"type": "apply_patch_call_output", "call_id": call_id, "status": "failed", "output": text}
    if call == "tool_search_call":  # its output is the tools found: none
        return {"type": "tool_search_output", "call_id": call_id, "execution": "client", "tools": []}
    if call == "computer_call":  # its output is a screenshot: none was taken
        return {"type": "computer_call_output", "call_id": call_id, "output": {"type": "computer_screenshot"}}
    kind = "custom_tool_call_output" if call == "custom_tool_call" else "function_call_output"
    return {"type": kind, "call_id": call_id, "output": text}


def _same_content(item: Mapping[str, Any], content: Any) -> bool:
    try:
        return bool(_chat_content(item.get("content"), 0) == content)
    except MalformedMessage:
        return False


def _response_items(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One assistant message's items: its response's items in their order, each as it came if
    context_os left it unchanged, else rebuilt; calls and text it added after them."""
    calls = {c["id"]: c for c in m.get("tool_calls") or ()}
    content = m.get("content")
    text = content if isinstance(content, str) else None
    items = list(m.get(ITEMS) or ())
    said_before = [_said(i) for i in items if _CALL not in i and i.get("type", "message") == "message"]
    unchanged = bool(said_before) and None not in said_before and _JOIN.join(map(str, said_before)) == text
    out: list[dict[str, Any]] = []
    placed: set[str] = set()
    said = False
    for item in items:
        call_id = item.get(_CALL)
        if call_id is not None:
            call = calls.get(call_id)
            if call is None:
                continue  # context_os dropped it (it is not in what the model sees)
            placed.add(call_id)
            shell = {f: v for f, v in item.items() if f != _CALL}
            out.append(_call_item(shell, call))
        elif item.get("type", "message") == "message":
            if unchanged:
                out.append(dict(item))  # the response's messages as they came
            elif text and not said:
                out.append({"type": "message", "role": "assistant", "content": text})  # the text as sent now
            said = said or bool(text)
        else:
            out.append(dict(item))  # reasoning: opaque, in its place
    if text and not said:
        out.append({"type": "message", "role": "assistant", "content": text})
    out.extend(_call_item({"type": "function_call"}, c) for c in calls.values() if c["id"] not in placed)
    return out


def _built_in_arguments(arguments: str) -> dict[str, Any]:
    """A built-in call's ``action`` or ``operation`` from its arguments as context_os sends them:
    an argv or a list of commands that context_os elided becomes the list of its note."""
    try:
        value = json.loads(arguments)
    except ValueError:
        value = arguments
    if not isinstance(value, dict):
        return {"note": str(value)}
    return {f: [v] if f in _LISTS and isinstance(v, str) else v for f, v in value.items()}


def _said(item: Mapping[str, Any]) -> str | None:
    """What an assistant message item says (None: not text this reads)."""
    try:
        return _parts_text(item.get("content"), 0)
    except MalformedMessage:
        return None


def _call_item(shell: Mapping[str, Any], call: Mapping[str, Any]) -> dict[str, Any]:
    if shell.get("type") in _WHOLE_CALLS:
        return dict(shell)  # as it came (its output goes so too)
    fn = call["function"]
    built_in = _BUILT_IN.get(shell.get("type", ""))
    if built_in is not None:
        return {**shell, "call_id": call["id"], built_in[1]: _built_in_arguments(fn["arguments"])}
    item = {**shell, "call_id": call["id"], "name": fn["name"]}
    if shell.get("type") == "custom_tool_call":
        try:
            value = json.loads(fn["arguments"])
        except ValueError:
            value = None  # elided by context_os: its note is the input now
        exact = isinstance(value, Mapping) and isinstance(value.get("input"), str)
        item["input"] = value["input"] if exact else fn["arguments"]
    else:
        item["arguments"] = fn["arguments"]
    return item
