"""The Gemini API's ``contents`` (and ``systemInstruction``) as chat-completions messages and back,
so that ``ctxos proxy`` manages a ``generateContent`` conversation (Gemini CLI's, a google-genai
client's) with the same OpenAI hook as a chat one.

``to_chat(contents, system_instruction)`` reads each content as the model and its client wrote
it:

* **The system instruction** (text parts) is a system message at the head.
* **A ``model`` content** is one assistant message: its text parts joined are the text, each
  ``functionCall`` part a tool call (its ``args`` as JSON). A call the API gave no ``id`` (Gemini
  models give none) gets one made of its place (``call_<content>_<part>``): it is never sent
  upstream. Thought parts, code the model ran and its results, and a part's ``thoughtSignature``
  are kept whole, in their places.
* **A ``user`` content** (or ``function``, the old role of results) is read part by part: each
  ``functionResponse`` a tool message answering its call (by ``id``, else the first call of its
  name not yet answered, else the first not yet answered), its text the response's ``output`` (or
  ``error``: a failed call, ``is_error``) if that is all it says, else the response as JSON; the
  other parts between them a user message (one text part: a string; else chat parts: text,
  an image's ``inlineData`` as a data URL, any other data or ``fileData`` as a file part).

Each message keeps what it came from in fields of its own (``ctxos_gemini``; the OpenAI adapter
keeps fields it does not interpret), so that ``to_contents`` gives back the very parts a message
came from when context_os left it as it was (a ``thoughtSignature`` included: Gemini 3 refuses a
call sent back without its signature), and parts rebuilt from what it sends when it changed it (a
collapsed output, an elided argument, a redacted text). The messages of one content go back as one
content.

A part of another kind in a user content, a response that answers no call or is no object, or a
content that is no object with a role and parts raises ``MalformedMessage``: the proxy then
forwards the request as it came.

This module only translates; it never touches a session or a store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import MalformedMessage
from ..tokens import value_chars

__all__ = [
    "CODE_PARTS",
    "KEPT",
    "Pending",
    "call_names",
    "content_groups",
    "group_content",
    "provider_chars",
    "read_content",
    "to_chat",
    "to_contents",
]

KEPT = "ctxos_gemini"
"""On every message: ``at``, the index of the content it came from (-1: the system instruction),
a user content's role (``role``), and what it keeps of it: a user message's parts (``parts``),
an assistant message's parts with each call's ``args`` left out (``parts``, a call's part naming
its tool call by ``call`` and, for a call that came without an object of arguments, ``no_args``:
``absent`` or ``null``), a tool message's part without its response (``part``) and how its
text stands for the response (``form``: ``output``, ``error`` or ``json``), the system
instruction (``content``)."""
_NO_ARGS = "no_args"
Pending = list[tuple[str, str | None, str]]
"""The calls of the newest model turn not yet answered: the id a tool call has, the API's id,
the tool's name."""
_USER_ROLES = ("user", "function")
_OPAQUE = ("thought", "executableCode", "codeExecutionResult", "inlineData", "fileData")
"""What a model part may be besides text and a call: kept whole, in its place."""


CODE_PARTS = ("executableCode", "codeExecutionResult")
"""The model's code execution parts (a tool the provider runs): its code, its output."""


def provider_chars(message: Mapping[str, Any]) -> int:
    """What the code execution parts of an assistant message (``to_chat``'s) put in front of the
    model: ``value_chars`` of each."""
    kept = message.get(KEPT)
    parts = kept.get("parts") if isinstance(kept, Mapping) else None
    if not isinstance(parts, list):
        return 0
    return sum(value_chars(p[f]) for p in parts if isinstance(p, Mapping) for f in CODE_PARTS if f in p)


def _is_text(part: Mapping[str, Any]) -> bool:
    return isinstance(part.get("text"), str) and not part.get("thought")


def _chat_part(part: Mapping[str, Any], k: int) -> dict[str, Any]:
    """A user part as a chat part (``_user_content``)."""
    if _is_text(part):
        return {"type": "text", "text": part["text"]}
    data = part.get("inlineData")
    if isinstance(data, Mapping) and isinstance(data.get("data"), str):
        mime = str(data.get("mimeType") or data.get("mime_type") or "application/octet-stream")  # (the SDK's)
        if mime.startswith("image/"):
            return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data['data']}"}}
        return {"type": "file", "file": {"inlineData": dict(data)}}
    if isinstance(part.get("fileData"), Mapping):
        return {"type": "file", "file": {"fileData": dict(part["fileData"])}}
    kinds = ", ".join(sorted(k for k in part if k != "thoughtSignature")) or "nothing"
    raise MalformedMessage(f"a user part context_os does not manage ({kinds})", index=k, field="parts")


def _user_content(parts: list[Mapping[str, Any]], k: int) -> Any:
    """A user message's content: one text part's text, else chat parts."""
    if len(parts) == 1 and _is_text(parts[0]):
        return parts[0]["text"]
    return [_chat_part(p, k) for p in parts]


def _response_text(response: Any) -> tuple[str, str]:
    """A function response as a tool message's text, and its form (``KEPT``)."""
    if isinstance(response, Mapping) and len(response) == 1:
        for form in ("output", "error"):
            if isinstance(response.get(form), str):
                return response[form], form
    return json.dumps(response, ensure_ascii=False), "json"


def _parts(content: Any, k: int) -> tuple[str, list[Mapping[str, Any]]]:
    if not isinstance(content, Mapping):
        raise MalformedMessage("a content must be an object", index=k)
    role = content.get("role", "user")
    parts = content.get("parts")
    if role not in (*_USER_ROLES, "model"):
        raise MalformedMessage(f"unknown role {role!r}", index=k, field="role")
    if not isinstance(parts, list) or not parts or not all(isinstance(p, Mapping) for p in parts):
        raise MalformedMessage("parts must be a list of objects, not empty", index=k, field="parts")
    return role, parts


def _system(instruction: Any) -> dict[str, Any]:
    """The system instruction (a content of text parts, or a string) as a system message."""
    parts = instruction.get("parts") if isinstance(instruction, Mapping) else None
    if isinstance(instruction, str):
        text = instruction
    elif isinstance(parts, list) and all(isinstance(p, Mapping) and _is_text(p) for p in parts):
        text = "\n".join(p["text"] for p in parts)
    else:
        raise MalformedMessage("systemInstruction must be text parts", field="systemInstruction")
    return {"role": "system", "content": text, KEPT: {"at": -1, "content": instruction}}


def to_chat(contents: Any, system_instruction: Any = None) -> list[dict[str, Any]]:
    """A request's ``contents`` and ``systemInstruction`` as chat messages (module docstring)."""
    if not isinstance(contents, list):
        raise MalformedMessage("contents must be a list", field="contents")
    out: list[dict[str, Any]] = [] if system_instruction is None else [_system(system_instruction)]
    pending: Pending = []
    for k, content in enumerate(contents):
        out.extend(read_content(content, k, pending))
    return out


def read_content(content: Any, k: int, pending: Pending) -> list[dict[str, Any]]:
    """The chat messages of ``contents[k]``, the calls before it not yet answered being
    ``pending`` (updated: ``to_chat`` a content at a time, for a reader that keeps what it read)."""
    role, parts = _parts(content, k)
    if role == "model":
        return [_assistant(parts, k, pending)]
    return _user_side(parts, k, role, pending)


def _user_side(parts: list[Mapping[str, Any]], k: int, role: str, pending: Pending) -> list[dict[str, Any]]:
    """A user content's messages: each response a tool message, the parts between them a user one."""
    out: list[dict[str, Any]] = []
    run: list[Mapping[str, Any]] = []
    for part in [*parts, None]:
        fr = part.get("functionResponse") if part is not None else None
        if part is not None and fr is None:
            run.append(part)
            continue
        if run:
            out.append({"role": "user", "content": _user_content(run, k), KEPT: {"at": k, "role": role, "parts": run}})
            run = []
        if part is not None:
            out.append(_tool(part, fr, k, role, pending))
    return out


def _assistant(parts: list[Mapping[str, Any]], k: int, pending: Pending) -> dict[str, Any]:
    pending.clear()
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        fc = part.get("functionCall")
        if fc is not None:
            if not isinstance(fc, Mapping) or not isinstance(fc.get("name"), str):
                raise MalformedMessage("a functionCall needs a name", index=k, field="parts")
            api_id = fc.get("id") if isinstance(fc.get("id"), str) and fc.get("id") else None
            call_id = api_id or f"call_{k}_{j}"
            if any(c["id"] == call_id for c in calls):
                raise MalformedMessage(f"call id {call_id!r} twice in one turn", index=k, field="parts")
            arguments = json.dumps(fc.get("args") or {}, ensure_ascii=False)
            calls.append({"id": call_id, "type": "function", "function": {"name": fc["name"], "arguments": arguments}})
            pending.append((call_id, api_id, fc["name"]))
            shell = {**part, "functionCall": {f: v for f, v in fc.items() if f != "args"}, "call": call_id}
            if not isinstance(fc.get("args"), Mapping):  # none, or null: sent back so, not as {}
                shell[_NO_ARGS] = "null" if "args" in fc else "absent"
            kept.append(shell)
        elif _is_text(part):
            texts.append(part["text"])
            kept.append(dict(part))
        elif any(f in part for f in _OPAQUE):
            kept.append(dict(part))
        else:
            kinds = ", ".join(sorted(part)) or "nothing"
            raise MalformedMessage(f"a model part context_os does not manage ({kinds})", index=k, field="parts")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None, KEPT: {"at": k, "parts": kept}}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool(part: Mapping[str, Any], fr: Any, k: int, role: str, pending: Pending) -> dict[str, Any]:
    if not isinstance(fr, Mapping) or not isinstance(fr.get("name"), str):
        raise MalformedMessage("a functionResponse needs a name", index=k, field="parts")
    if not isinstance(fr.get("response"), Mapping):
        raise MalformedMessage("a functionResponse's response must be an object", index=k, field="parts")
    given = fr.get("id")
    answered = (
        next((c for c in pending if given and c[1] == given), None)
        or next((c for c in pending if c[2] == fr["name"]), None)
        or next(iter(pending), None)
    )
    if answered is None:
        raise MalformedMessage(f"a functionResponse of {fr['name']!r} answers no call", index=k, field="parts")
    pending.remove(answered)
    text, form = _response_text(fr.get("response"))
    kept = {**part, "functionResponse": {f: v for f, v in fr.items() if f != "response"}}
    message: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": answered[0],
        "content": text,
        KEPT: {"at": k, "role": role, "part": kept, "form": form},
    }
    if form == "error":
        message["is_error"] = True
    return message


def to_contents(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Any]:
    """Chat messages (as the OpenAI hook renders them) back as ``contents``, and the system
    instruction (None if there is no system message)."""
    groups, system = content_groups(messages)
    names = call_names(messages)
    contents = [c for g in groups if (c := group_content(g, names)) is not None]
    return contents, None if system is None else _system_back(system, _kept(system))


def content_groups(messages: list[dict[str, Any]]) -> tuple[list[list[dict[str, Any]]], dict[str, Any] | None]:
    """The messages that go back as one content each, in order (an assistant message alone; the
    messages of one user content together, a result context_os made with the results before it),
    and the system message."""
    groups: list[list[dict[str, Any]]] = []
    system = None
    answering = False  # the newest message is a tool message
    last: Any = None  # the ``at`` of the content the newest message came from
    for m in messages:
        role = m["role"]
        if role == "system":
            system = m
            continue
        if role == "assistant":
            groups.append([m])
            last, answering = None, False
            continue
        at = _kept(m).get("at")
        same = at is not None and at == last or at is None and role == "tool" and answering
        if groups and same and groups[-1][0]["role"] != "assistant":
            groups[-1].append(m)
        else:
            groups.append([m])
        last, answering = at, role == "tool"
    return groups, system


def call_names(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Each tool call's tool, by the call's id (a result context_os made is named by it)."""
    return {
        c["id"]: c["function"]["name"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()
    }


def group_content(group: list[dict[str, Any]], names: Mapping[str, str]) -> dict[str, Any] | None:
    """One group of ``content_groups`` as its content (None: an assistant message left with no part)."""
    first = group[0]
    if first["role"] == "assistant":
        parts = _model_parts(first, _kept(first))
        return {"role": "model", "parts": parts} if parts else None
    out: list[dict[str, Any]] = []
    for m in group:
        out.extend([_response_part(m, _kept(m), names)] if m["role"] == "tool" else _user_parts(m, _kept(m)))
    return {"role": _role_of(_kept(first)), "parts": out}


def _kept(m: Mapping[str, Any]) -> Mapping[str, Any]:
    found = m.get(KEPT)
    return found if isinstance(found, dict) else {}  # (JSON's: no Mapping ABC to ask, at every message)


def _role_of(kept: Mapping[str, Any]) -> str:
    return "function" if kept.get("role") == "function" else "user"


def _system_back(m: Mapping[str, Any], kept: Mapping[str, Any]) -> Any:
    original = kept.get("content")
    content = m.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if original is not None and _system(original)["content"] == text:
        return original
    return {"parts": [{"text": text}]}


def _user_parts(m: Mapping[str, Any], kept: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A user message's parts: as they came if its content is what they say, else rebuilt."""
    content = m.get("content")
    original = kept.get("parts")
    if isinstance(original, list):
        try:
            if _user_content(original, 0) == content:
                return [dict(p) for p in original]
        except MalformedMessage:
            pass
    if not isinstance(content, list):
        return [{"text": "" if content is None else str(content)}]
    out: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "image_url":
            url = str(part["image_url"].get("url", ""))
            head, _, data = url.partition(",")
            mime = head.removeprefix("data:").removesuffix(";base64") or "image/png"
            out.append({"inlineData": {"mimeType": mime, "data": data}} if data else {"fileData": {"fileUri": url}})
        elif part.get("type") == "file" and isinstance(part.get("file"), Mapping):
            out.append(dict(part["file"]))
        else:
            out.append({"text": str(part.get("text", ""))})
    return out


def _response_part(m: Mapping[str, Any], kept: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """A tool message's ``functionResponse`` part: its response as it stands now in its form."""
    content = m.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    part = kept.get("part")
    if not isinstance(part, Mapping):  # a result context_os made (a call left unanswered)
        name = names.get(str(m.get("tool_call_id")), "")
        return {"functionResponse": {"name": name, "response": {"error" if m.get("is_error") else "output": text}}}
    form = kept.get("form")
    if form == "json":
        try:
            response = json.loads(text)
        except ValueError:
            response = None
        if not isinstance(response, dict):  # collapsed or redacted: its text is the output
            response = {"output": text}
    else:
        response = {str(form): text}
    fr = dict(part["functionResponse"])
    return {**part, "functionResponse": {**fr, "response": response}}


def _model_parts(m: Mapping[str, Any], kept: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One assistant message's parts: its content's parts in their order, each as it came if
    context_os left it unchanged, else rebuilt; a text and calls it added after them."""
    calls = {c["id"]: c for c in m.get("tool_calls") or ()}
    content = m.get("content")
    text = content if isinstance(content, str) else ""
    parts = [p for p in kept.get("parts") or () if isinstance(p, Mapping)]
    unchanged = "".join(p["text"] for p in parts if "call" not in p and _is_text(p)) == text
    out: list[dict[str, Any]] = []
    placed: set[str] = set()
    said = False
    for part in parts:
        call_id = part.get("call")
        if call_id is not None:
            call = calls.get(call_id)
            if call is None:
                continue  # context_os dropped it (it is not in what the model sees)
            placed.add(call_id)
            shell = {f: v for f, v in part.items() if f not in ("call", _NO_ARGS)}
            out.append(_call_part(shell, call, part.get(_NO_ARGS)))
        elif _is_text(part):
            if unchanged:
                out.append(dict(part))
            elif text and not said:  # the text as sent now, in the first text's place (its signature kept)
                out.append({**part, "text": text})
            said = said or bool(text)
        else:
            out.append(dict(part))  # a thought, code the model ran: opaque, in its place
    if text and not said and not unchanged:
        out.append({"text": text})
    out.extend(_call_part({}, c) for c in calls.values() if c["id"] not in placed)
    return out


def _call_part(shell: Mapping[str, Any], call: Mapping[str, Any], no_args: str | None = None) -> dict[str, Any]:
    """A ``functionCall`` part with the call's arguments as context_os sends them (elided, an
    object still: ``{"_elided": …}`` for arguments that were no object). A call that came with
    no ``args`` (``no_args`` "absent") or ``"args": null`` ("null") goes back so while they are
    still none."""
    fn = call["function"]
    try:
        args = json.loads(fn["arguments"])
    except ValueError:
        args = None
    if not isinstance(args, dict):
        args = {"_elided": fn["arguments"]}
    fc = {**(shell.get("functionCall") or {}), "name": fn["name"]}
    if args or no_args is None:
        fc["args"] = args
    elif no_args == "null":
        fc["args"] = None
    return {**shell, "functionCall": fc}
