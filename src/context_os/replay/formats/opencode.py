"""OpenCode sessions as ``opencode export <sessionID>`` writes them (one JSON object:
``{"info": <session>, "messages": [{"info": <message>, "parts": [<part>, ...]}, ...]}``), as the
OpenAI messages OpenCode sends for them (opencode, ``packages/opencode/src/session/message-v2.ts``
``toModelMessages``, then the AI SDK's ``convertToModelMessages`` and its OpenAI-compatible
provider; checked against the requests of the real 1.18.33).

* **A model call is an assistant message.** OpenCode records each step of its loop (one model
  call: ``step-start`` … ``step-finish``) as an assistant message of its own; its ``text`` parts
  joined are the message's content and each ``tool`` part a tool call (``callID``, ``tool``, its
  ``state.input`` as JSON) answered right after it: a completed call by its ``state.output``, a
  failed one by its ``state.error`` (``is_error``; an interrupted one by the output it had, if it
  kept one), a call left ``pending`` or ``running`` by ``[Tool execution was interrupted]``. An
  assistant message that failed (``info.error``) is not sent again, unless it was aborted after
  it said or called something. ``reasoning`` parts are left out (the OpenAI-compatible provider
  does not send them back).
* **A user message** is its ``text`` parts that are not ``ignored`` (OpenCode's own notes, such
  as the text of a file named with ``@``, are ``synthetic`` text parts, and sent) and its ``file``
  parts that are not plain text or a directory (those are sent as the text parts beside them): an
  image as an ``image_url`` part, another file as a ``file`` part. One text part is the message's
  content; several are its parts. A ``subtask`` part says ``The following tool was executed by
  the user``.
* **Images a tool gave** (``state.attachments``: ``read`` of a picture or a PDF) follow the
  call's results as a user message, ``Attached image(s) from tool result:`` and the files, as
  OpenCode sends them to a provider whose tool results hold text only.
* **Uncompacted.** What OpenCode's own context management did is undone, as for Claude Code's
  compactions: a compaction (a user message with a ``compaction`` part, OpenCode's ``What did we
  do so far?``, and the summary it got, an assistant message with ``summary: true``) is left out,
  and an output OpenCode pruned (``state.time.compacted``; it then sends ``[Old tool result
  content cleared]``) is replayed as it came, which the export keeps.
* **Sub-agents.** A ``task`` call runs its sub-agent in a session of its own (its id in the
  call's ``metadata.sessionId``), which the export of the main session does not hold: a note
  names them (``opencode export <id>`` writes each).

The session id is ``info.id``, its directory ``info.directory``. The tools map to roles by the
``opencode`` preset (harness/toolnames.py).

This module reads files; it never touches a store or a session.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...errors import InputError
from .common import Parsed, Transcript, pair_openai, shape

__all__ = ["is_opencode_export", "read_opencode"]

INTERRUPTED = "[Tool execution was interrupted]"
ATTACHED = "Attached image(s) from tool result:"
SUBTASK = "The following tool was executed by the user"
_NOT_SENT_FILES = ("text/plain", "application/x-directory")
"""File parts OpenCode does not send as files: their text is in the text parts beside them."""
_MEDIA = ("image/", "application/pdf")


def is_opencode_export(doc: Any) -> bool:
    """Whether a JSON document is what ``opencode export`` writes: the session's ``info`` (an
    ``id``) and its ``messages``, each an ``info`` and its ``parts``."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("info"), Mapping):
        return False
    messages = doc.get("messages")
    return (
        isinstance(doc["info"].get("id"), str)
        and isinstance(messages, list)
        and all(isinstance(m, Mapping) and isinstance(m.get("info"), Mapping) for m in messages)
        and all(isinstance(m.get("parts"), list) for m in messages)
    )


def _object(value: Any, key: str) -> Mapping[str, Any]:
    """``value[key]`` if it is a JSON object, else an empty one."""
    found = value.get(key) if isinstance(value, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _parts(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [p for p in message["parts"] if isinstance(p, Mapping)]


def _file(part: Mapping[str, Any]) -> dict[str, Any] | None:
    """A file part as the OpenAI-compatible provider sends it: an image as ``image_url``, another
    file as ``file``; None for one with no URL."""
    url, mime = part.get("url"), part.get("mime")
    if not isinstance(url, str) or not isinstance(mime, str):
        return None
    if mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": url}}
    name = part.get("filename") if isinstance(part.get("filename"), str) else "file"
    return {"type": "file", "file": {"filename": name, "file_data": url}}


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A user message's content: its one text, or its parts."""
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    return parts


def _user(message: Mapping[str, Any]) -> dict[str, Any] | None:
    parts: list[dict[str, Any]] = []
    for p in _parts(message):
        kind = p.get("type")
        if kind == "text" and not p.get("ignored") and isinstance(p.get("text"), str) and p["text"]:
            parts.append({"type": "text", "text": p["text"]})
        elif kind == "file" and p.get("mime") not in _NOT_SENT_FILES and (f := _file(p)) is not None:
            parts.append(f)
        elif kind == "subtask":
            parts.append({"type": "text", "text": SUBTASK})
    return {"role": "user", "content": _content(parts)} if parts else None


def _sent(message: Mapping[str, Any]) -> bool:
    """Whether OpenCode sends an assistant message again: not one that failed, unless it was
    aborted after it said or called something."""
    error = message["info"].get("error")
    if not error:
        return True
    aborted = isinstance(error, Mapping) and error.get("name") == "MessageAbortedError"
    return aborted and any(p.get("type") not in ("step-start", "reasoning") for p in _parts(message))


def _result(part: Mapping[str, Any]) -> tuple[str, bool, list[dict[str, Any]]]:
    """(text, failed, media) of a tool part's outcome, as OpenCode answers the call."""
    state = _object(part, "state")
    status = state.get("status")
    if status == "completed":
        output = state.get("output")
        listed = state.get("attachments")
        attachments = listed if isinstance(listed, list) else []
        media = [
            f
            for a in attachments
            if isinstance(a, Mapping)
            and str(a.get("mime", "")).startswith(_MEDIA)
            and (f := _file({"mime": a.get("mime"), "url": a.get("url")})) is not None
        ]
        return (output if isinstance(output, str) else ""), False, media
    if status == "error":
        meta = _object(state, "metadata")
        if meta.get("interrupted") is True and isinstance(meta.get("output"), str):
            return meta["output"], False, []
        error = state.get("error")
        return (error if isinstance(error, str) else ""), True, []
    return INTERRUPTED, True, []


def _assistant(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An assistant message's OpenAI messages: the reply, its calls' results, the images they gave."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    media: list[dict[str, Any]] = []
    for p in _parts(message):
        if p.get("type") == "text" and isinstance(p.get("text"), str):
            texts.append(p["text"])
        elif p.get("type") == "tool" and isinstance(p.get("callID"), str) and isinstance(p.get("tool"), str):
            arguments = _object(_object(p, "state"), "input")
            fn = {"name": p["tool"], "arguments": json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))}
            calls.append({"id": p["callID"], "type": "function", "function": fn})
            text, failed, more = _result(p)
            result: dict[str, Any] = {"role": "tool", "tool_call_id": p["callID"], "content": text}
            if failed:
                result["is_error"] = True
            results.append(result)
            media += more
    if not texts and not calls:
        return []
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        reply["tool_calls"] = calls
    out = [reply, *results]
    if media:
        out.append({"role": "user", "content": [{"type": "text", "text": ATTACHED}, *media]})
    return out


def _compaction(message: Mapping[str, Any]) -> bool:
    """A message of a compaction: the request (a ``compaction`` part) or the summary it got."""
    info = message["info"]
    if info.get("role") == "assistant":
        return bool(info.get("summary"))
    return any(p.get("type") == "compaction" for p in _parts(message))


def _subagents(messages: list[Mapping[str, Any]]) -> list[str]:
    """The sessions of the sub-agents the session's ``task`` calls ran."""
    found: list[str] = []
    for m in messages:
        for p in _parts(m):
            meta = _object(_object(p, "state"), "metadata")
            if p.get("type") == "tool" and p.get("tool") == "task" and isinstance(meta.get("sessionId"), str):
                found.append(meta["sessionId"])
    return list(dict.fromkeys(found))


def read_opencode(parsed: Parsed, **_: Any) -> list[Transcript]:
    """The session of an ``opencode export`` file."""
    doc = parsed.document if parsed.is_document else None
    if not is_opencode_export(doc):
        what = shape(doc) if parsed.is_document else f"JSON lines ({len(parsed.rows)} objects)"
        raise InputError(
            f"{parsed.path}: {what}: not an OpenCode session "
            "(one JSON object with info and messages, as `opencode export` writes it)"
        )
    assert isinstance(doc, Mapping)
    recorded: list[Mapping[str, Any]] = list(doc["messages"])
    out: list[dict[str, Any]] = []
    compactions = 0
    for m in recorded:
        if _compaction(m):
            compactions += m["info"].get("role") == "user"
            continue
        role = m["info"].get("role")
        if role == "user":
            user = _user(m)
            out += [user] if user is not None else []
        elif role == "assistant" and _sent(m):
            out += _assistant(m)
    info = doc["info"]
    directory = info.get("directory") if isinstance(info.get("directory"), str) else None
    messages = pair_openai(out)
    transcript = Transcript("opencode", "openai", "opencode", messages, info["id"], directory, [], len(recorded))
    if compactions:
        transcript.info.append(
            f"{compactions} compaction(s) by OpenCode left out: the replay is uncompacted "
            "(every call sent what came before it, pruned outputs whole)"
        )
    subagents = _subagents(recorded)
    if subagents:
        transcript.info.append(
            f"{len(subagents)} sub-agent session(s) of its task calls are not in this export "
            f"(opencode export {subagents[0]} writes the first)"
        )
    return parsed.stamp([transcript])
