"""Gemini CLI session files (``~/.gemini/tmp/<project>/chats/session-*.json`` or ``.jsonl``), as
the OpenAI messages of the history Gemini CLI rebuilds when it resumes a session (gemini-cli,
``packages/core/src/services/chatRecordingService.ts`` ``loadConversationRecord`` and
``packages/core/src/utils/sessionUtils.ts`` ``convertSessionToClientHistory``).

* **The file.** Up to v0.38 one JSON object: ``{sessionId, projectHash, startTime, lastUpdated,
  messages: [...], summary?, directories?, kind?}``. From v0.39, JSON lines: a metadata line
  (``sessionId`` and ``projectHash``); a message (any object with a string ``id``), kept in an
  insertion-ordered map by id, so a message written again replaces its earlier copy in the earlier
  copy's place; ``{"$set": {...}}`` merges metadata, and with ``messages`` it is a checkpoint: the
  messages are those (from v0.44 a compressed history is saved so); ``{"$rewindTo": id}`` drops
  that message and every one after it (all of them if the id is not there). A file of JSON lines
  without a metadata line is not a session (Gemini CLI then tries the file as one JSON object).
* **The history.** ``info``, ``error`` and ``warning`` messages are not sent; a ``user`` message
  is not either if its text (a part that is not text written as ``[Function Response: x]``…) is
  empty or begins with ``/``, ``?`` or ``<hook_context>``. The session's context (its first
  message, ``<session_context>``: the date, the workspace's directories and files) is: Gemini
  CLI sends it at the head of every call, and a resume sends one made anew in its place. A ``gemini``
  message is one model turn, one model call: its ``content`` parts if they hold function calls or
  thoughts, else its text then a call per ``toolCalls`` entry; then a user turn of the calls'
  results (``toolCalls[].result``: its parts, a string as ``{output: ...}``, an object as is).
* **Results recorded twice.** From v0.44 Gemini CLI also writes each batch of results as a
  ``user`` message of ``functionResponse`` parts (gemini-cli issue #29365), so its own resume
  sends every result twice. A ``functionResponse`` whose call a ``toolCalls[].result`` answered
  already is that same result, and is not replayed again.
* **As OpenAI messages.** A model turn is an assistant message: its text parts joined, each
  ``functionCall`` a tool call (its ``args`` as JSON). Each ``functionResponse`` is a tool
  message answering its call by id (else by name), its text the response's ``output`` (or its
  ``error``, a failed call: ``is_error``), else the response as JSON; a user turn's text parts
  are a user message. Images and files (``inlineData``, ``fileData``) are not text and are left
  out. A call never answered is dropped from its message, a result for no call dropped.
* **Thoughts are left out.** Gemini CLI drops the thought parts of a reply before it keeps the
  reply in its history (``geminiChat``), so the model was never sent them again; only a resumed
  session puts the ``thoughts`` summaries back.

The session id is the metadata's ``sessionId``; the session's directory is read from what its
file tools printed (``Successfully modified file: /abs/path`` for a relative ``file_path``), or a
sub-agent's first workspace directory. A main session's sub-agents (``kind: "subagent"``) are
kept beside it in ``chats/<sessionId>/*.jsonl`` (or ``.json``): each is a session of its own,
after the main one, its ``label`` the sub-agent's session id (one whose file cannot be read, empty
or cut by a crash, is left out with a note). The tools map to roles by the
``gemini-cli`` preset (harness/toolnames.py).

This module reads files; it never touches a store or a session.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import InputError
from .common import MAX_SESSION_BYTES, Parsed, Transcript, json_type, load, pair_openai, shape

__all__ = ["GEMINI_TYPES", "is_gemini_line", "is_gemini_record", "read_gemini_cli"]

GEMINI_TYPES = ("user", "gemini", "info", "error", "warning")
"""The ``type`` of a Gemini CLI message."""

_NOT_SENT = ("info", "error", "warning")
_IGNORED_USER = ("/", "?", "<hook_context>")
"""How the user messages Gemini CLI does not send on resume begin (commands, help, context it
wrote itself: ``isIgnoredUserContent``) but for the session's context: a resume leaves the recorded
one out and makes it anew; before 2026-12-04 the replay left it out of every call, though the live
session sent it at the head of each, as the real 0.61.0's requests show."""
_WROTE = re.compile(
    r"\ASuccessfully (?:modified|overwrote|created and wrote to new) file: (?P<path>/[^\n]*?)"
    r"(?:(?: \(\d+ replacements?\))?\.(?=\s|\Z)| \(\d+ replacements?\)(?=\s|\Z)|(?=\s*\Z))"
)
"""What ``replace`` and ``write_file`` print on success: the file's absolute path, up to the
sentence's end (its count of replacements, its full stop) before the end or the notes Gemini CLI
joins to it (`` User modified the …``, `` Here is the updated code:``); a path may hold spaces
(before, it ended at the first: ``/work/my app/a.py`` read as ``/work/my``)."""


def _metadata(value: Any) -> bool:
    """Whether a JSON object is a Gemini CLI session's metadata (its first line, or the legacy
    file itself)."""
    return isinstance(value, Mapping) and all(isinstance(value.get(k), str) for k in ("sessionId", "projectHash"))


def is_gemini_record(doc: Any) -> bool:
    """Whether a JSON document is a legacy Gemini CLI session file: metadata and a ``messages``
    list of Gemini CLI messages."""
    messages = doc.get("messages") if isinstance(doc, Mapping) else None
    return (
        _metadata(doc)
        and isinstance(messages, list)
        and all(isinstance(m, Mapping) and m.get("type") in GEMINI_TYPES for m in messages)
    )


def is_gemini_line(e: Mapping[str, Any]) -> bool:
    """Whether one JSON line tells a Gemini CLI session: its metadata line, a ``$set`` or
    ``$rewindTo`` record, or a ``gemini`` message."""
    return (
        _metadata(e)
        or isinstance(e.get("$set"), Mapping)
        or isinstance(e.get("$rewindTo"), str)
        or (e.get("type") == "gemini" and isinstance(e.get("id"), str) and "message" not in e)
    )


# --- the file: metadata and messages, as loadConversationRecord reads them ---------------------------


def _messages(parsed: Parsed) -> tuple[dict[str, Any], list[tuple[int, dict[str, Any]]]]:
    """The metadata and the messages (each with the line it was read from) of a Gemini CLI file,
    legacy JSON or JSON lines."""
    if parsed.is_document:
        doc = parsed.document
        if not is_gemini_record(doc):
            raise InputError(
                f"{parsed.path}: {shape(doc)}: not a Gemini CLI session "
                "(one JSON object with sessionId, projectHash and messages)"
            )
        return dict(doc), [(1, m) for m in doc["messages"]]  # a legacy file's list, as it is
    meta: dict[str, Any] = {}
    found = False
    by_id: dict[str, tuple[int, dict[str, Any]]] = {}  # in order; a copy written again keeps its place

    def add(messages: Any, line: int) -> None:
        for m in messages if isinstance(messages, list) else ():
            if isinstance(m, dict) and isinstance(m.get("id"), str):
                by_id[m["id"]] = (line, m)

    for n, row in parsed.rows:
        if isinstance(row.get("$rewindTo"), str):
            ids = list(by_id)
            cut = ids.index(row["$rewindTo"]) if row["$rewindTo"] in by_id else 0  # not there: all
            for key in ids[cut:]:
                del by_id[key]
        elif isinstance(row.get("id"), str):
            add([row], n)
        elif isinstance(row.get("$set"), Mapping):
            if isinstance(row["$set"].get("messages"), list):  # a checkpoint: the whole list again
                by_id.clear()
                add(row["$set"]["messages"], n)
            meta.update(row["$set"])
        elif _metadata(row):
            meta.update(row)
            found = True
            add(row.get("messages"), n)  # a legacy record written on one line
    if not found:
        raise InputError(
            f"{parsed.path}: {len(parsed.rows)} JSON lines but no metadata line (sessionId, projectHash): "
            "not a Gemini CLI session"
        )
    return meta, list(by_id.values())


# --- the history: convertSessionToClientHistory ---------------------------------------------------------


def _parts(content: Any) -> list[Any]:
    """A message's content as a list of parts (``ensurePartArray``): a string is one text part."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"text": content}]
    if isinstance(content, list):
        return [{"text": p} if isinstance(p, str) else p for p in content]
    return [content]


def _part_string(part: Any) -> str:
    """A part as Gemini CLI writes it out to tell what a user message says (``partToString``,
    verbose): text as is, other parts as a short note."""
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        return ""
    if "thought" in part:
        return f"[Thought: {part['thought']}]"
    for key, note in (("functionCall", "Function Call"), ("functionResponse", "Function Response")):
        if isinstance(part.get(key), Mapping):
            return f"[{note}: {part[key].get('name')}]"
    for key in ("videoMetadata", "codeExecutionResult", "executableCode", "fileData", "inlineData"):
        if key in part:
            return f"[{key}]"
    text = part.get("text")
    return text if isinstance(text, str) else ""


def _sent_user(message: Mapping[str, Any]) -> bool:
    """Whether Gemini CLI sends a user message on resume (``isIgnoredUserContent``)."""
    text = "".join(_part_string(p) for p in _parts(message.get("content"))).strip()
    return bool(text) and not text.startswith(_IGNORED_USER)


def _model_parts(message: Mapping[str, Any]) -> list[Any]:
    """A gemini message's model turn: its content if that holds calls or thoughts (newer files),
    else a thought part per ``thoughts`` summary, its text and a call per ``toolCalls`` entry.
    (A turn of thoughts alone was a model call too.)"""
    parts = _parts(message.get("content"))
    if any(isinstance(p, Mapping) and (p.get("functionCall") or p.get("thought")) for p in parts):
        return parts
    thoughts = message.get("thoughts")
    thoughts = thoughts if isinstance(thoughts, list) else []
    summaries = [{"thought": True} for t in thoughts if isinstance(t, Mapping)]  # their text is not sent
    calls = [{"functionCall": {k: c.get(k) for k in ("id", "name", "args")}} for c in _tool_calls(message)]
    return summaries + parts + calls


def _tool_calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    calls = message.get("toolCalls")
    return [c for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else []


def _result_parts(message: Mapping[str, Any]) -> list[Any]:
    """The user turn of a gemini message's tool results, as Gemini CLI rebuilds it."""
    out: list[Any] = []
    for c in _tool_calls(message):
        result = c.get("result")
        if not result:
            continue
        if isinstance(result, str):
            # a call whose id is no string was given one (_assistant): its result answers it by name
            call_id = c.get("id") if isinstance(c.get("id"), str) else None
            response = {"id": call_id, "name": c.get("name"), "response": {"output": result}}
            out.append({"functionResponse": response})
        elif isinstance(result, list):
            out += _parts(result)
        else:
            out.append(result)
    return out


def _history(messages: list[tuple[int, dict[str, Any]]], where: str) -> list[tuple[str, list[Any]]]:
    """(role, parts) turns, ``model`` or ``user``, as Gemini CLI resumes the session; a result
    recorded both as a call's ``result`` and as a user message of its own is kept once."""
    turns: list[tuple[str, list[Any]]] = []
    answered: set[str] = set()  # call ids a toolCalls[].result answered
    for line, m in messages:
        kind = m.get("type")
        at = f"{where}:{line}: message {m.get('id')!r}"
        if kind not in GEMINI_TYPES:
            raise InputError(f"{at} has unknown type {kind!r} (expected {', '.join(GEMINI_TYPES)})")
        if kind in _NOT_SENT or (kind == "user" and not _sent_user(m)):
            continue
        if kind == "user":
            # v0.44+ writes the results again as a user message (gemini-cli #29365): the same results
            parts = [p for p in _parts(m.get("content")) if _response_id(p, at) not in answered]
            if parts:
                turns.append(("user", parts))
            continue
        model = _model_parts(m)
        if not model:
            continue
        turns.append(("model", model))
        results = _result_parts(m)
        answered.update(i for p in results if (i := _response_id(p, at)) is not None)
        if results:
            turns.append(("user", results))
    return turns


def _response_id(part: Any, at: str) -> str | None:
    """The id of the call a part answers, if it is a function response that names one (every
    function response the history keeps passes here: ``InputError`` for an id of another type)."""
    response = part.get("functionResponse") if isinstance(part, Mapping) else None
    call_id = response.get("id") if isinstance(response, Mapping) else None
    if call_id is None or isinstance(call_id, str):
        return call_id
    raise InputError(f"{at}: a functionResponse's id must be a string, not {json_type(call_id)}")


# --- as OpenAI messages ------------------------------------------------------------------------------------


def _text(parts: list[Any]) -> str:
    """The text of a turn's parts, thoughts left out."""
    texts = (p.get("text") for p in parts if isinstance(p, Mapping) and not p.get("thought"))
    return "".join(t for t in texts if isinstance(t, str))


def _output(response: Any) -> tuple[str, bool]:
    """(text, failed) of a function response: its ``output``, else its ``error``, else its JSON."""
    if isinstance(response, Mapping):
        if isinstance(response.get("output"), str):
            return response["output"], False
        if isinstance(response.get("error"), str):
            return response["error"], True
    return json.dumps(response, ensure_ascii=False), False


def _assistant(parts: list[Any], turn: int) -> dict[str, Any]:
    calls = []
    for k, p in enumerate(parts):
        call = p.get("functionCall") if isinstance(p, Mapping) else None
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            continue
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else f"call_{turn}_{k}"
        arguments = json.dumps(call.get("args") if call.get("args") is not None else {}, ensure_ascii=False)
        calls.append({"id": call_id, "type": "function", "function": {"name": call["name"], "arguments": arguments}})
    message: dict[str, Any] = {"role": "assistant", "content": _text(parts) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _user(parts: list[Any], reply: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A user turn's messages: a tool message per function response (answering its call by id,
    else the first call of that name not answered yet), then its text, if any, as a user message."""
    calls = [(c["id"], c["function"]["name"]) for c in (reply or {}).get("tool_calls") or ()]
    taken: set[str] = set()
    out: list[dict[str, Any]] = []
    for p in parts:
        response = p.get("functionResponse") if isinstance(p, Mapping) else None
        if not isinstance(response, Mapping):
            continue
        call_id = response.get("id")
        if call_id not in {i for i, _ in calls}:
            call_id = next((i for i, name in calls if name == response.get("name") and i not in taken), call_id)
        text, failed = _output(response.get("response"))
        message: dict[str, Any] = {"role": "tool", "tool_call_id": str(call_id), "content": text}
        if failed:
            message["is_error"] = True
        taken.add(str(call_id))
        out.append(message)
    text = _text(parts)
    if text:
        out.append({"role": "user", "content": text})
    return out


def _openai(turns: list[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    reply: dict[str, Any] | None = None
    for k, (role, parts) in enumerate(turns):
        if role == "model":
            reply = _assistant(parts, k)
            out.append(reply)
        else:
            out += _user(parts, reply)
            reply = None
    return pair_openai(out)


def _cwd(messages: list[dict[str, Any]]) -> str | None:
    """The session's directory, from a file tool's success message naming the absolute path of a
    file its call named relatively."""
    paths = {
        c["id"]: args.get("file_path")
        for m in messages
        for c in m.get("tool_calls") or ()
        if c["function"]["name"] in ("replace", "write_file")
        and isinstance(args := json.loads(c["function"]["arguments"]), Mapping)
    }
    for m in messages:
        path = paths.get(m.get("tool_call_id") or "")
        found = _WROTE.match(m.get("content") or "") if m["role"] == "tool" else None
        if not isinstance(path, str) or found is None or posixpath.isabs(path):
            continue
        relative = posixpath.normpath(path)
        absolute = found.group("path")
        if absolute.endswith("/" + relative):
            return absolute[: -len(relative) - 1] or "/"
    return None


# --- the reader ------------------------------------------------------------------------------------------


def _transcript(parsed: Parsed, label: str | None = None) -> Transcript:
    where = str(parsed.path)
    meta, recorded = _messages(parsed)
    messages = _openai(_history(recorded, where))
    directories = meta.get("directories")
    cwd = _cwd(messages)
    if cwd is None and isinstance(directories, list) and directories and isinstance(directories[0], str):
        cwd = directories[0]  # a sub-agent's workspace directories, its own first
    session_id = meta.get("sessionId")
    entries = len(recorded) if parsed.is_document else len(parsed.rows)
    transcript = Transcript("gemini-cli", "openai", "gemini-cli", messages, session_id, cwd, [], entries, label)
    return parsed.stamp([transcript])[0]


def read_gemini_cli(
    parsed: Parsed, *, sidechains: bool = True, max_bytes: int = MAX_SESSION_BYTES, **_: Any
) -> list[Transcript]:
    """The session of a Gemini CLI file, then (``sidechains``) its sub-agents' sessions, from
    ``<sessionId>/*.json(l)`` beside the file."""
    main = _transcript(parsed)
    if not sidechains or main.session_id is None:
        return [main]
    subagents, unread = _subagents(parsed.path, main.session_id, max_bytes)
    main.notes += unread
    return [main, *subagents]


def _subagents(path: Path, session_id: str, max_bytes: int) -> tuple[list[Transcript], list[str]]:
    """The sub-agents of the session ``session_id`` kept beside its file, by name; and what was
    wrong with those that could not be read (left out: one sub-agent's file left empty or cut by
    a crash takes nothing from the main session and the others)."""
    folder = path.parent / session_id
    if not folder.is_dir() or folder.is_symlink():
        return [], []
    files: dict[str, Path] = {}
    for p in sorted(folder.iterdir()):
        name = p.name.removesuffix(".gz")
        if p.is_file() and name.endswith((".json", ".jsonl")):
            files.setdefault(name.rsplit(".", 1)[0], p)
            if name.endswith(".jsonl"):  # a legacy file resumed was written again as JSON lines
                files[name.rsplit(".", 1)[0]] = p
    out: list[Transcript] = []
    unread: list[str] = []
    for sub in files.values():
        try:
            t = _transcript(load(sub, max_bytes))
        except InputError as e:
            unread.append(f"a sub-agent's file was left out: {e}")
            continue
        t.label = t.session_id or sub.name.split(".")[0]
        out.append(t)
    return out, unread
