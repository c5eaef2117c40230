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
* **Printed events.** What ``opencode run --format json`` prints (``step_start``, ``text``,
  ``tool_use``, ``step_finish``… lines, each with the ``part`` it is about) holds the replies'
  parts, which make the assistant messages as above; the prompt is not printed, so the first call
  is not replayed (a note says so).
* **Sub-agents.** A ``task`` call runs its sub-agent in a session of its own (its id in the
  call's ``metadata.sessionId``), which the export of the main session does not hold: a note
  names them (``opencode export <id>`` writes each).

The session id is ``info.id``, its directory ``info.directory``. The tools map to roles by the
``opencode`` preset (harness/toolnames.py).

**OpenCode's database** (``~/.local/share/opencode/opencode.db``, SQLite: the ``session``,
``message`` and ``part`` tables, each row's ``data`` the JSON an export shows, its ids in columns)
is read too, opened read-only: every session in it, each read as its export would be, labelled
with its id; a session's sub-agents (``parent_id``) after it (``sidechains``). ``only`` keeps one
session (by id) and its sub-agents.

This module reads files; it never touches a store or a session.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import InputError
from .common import MAX_SESSION_BYTES, Parsed, Transcript, pair_openai, shape

__all__ = ["is_opencode_db", "is_opencode_event", "is_opencode_export", "read_opencode", "read_opencode_db"]

SQLITE_MAGIC = b"SQLite format 3\x00"
_TABLES = {"session", "message", "part"}

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


EVENT_TYPES = ("step_start", "step_finish", "text", "reasoning", "tool_use", "error")
"""What ``opencode run --format json`` prints, one JSON object a line."""


def is_opencode_event(e: Mapping[str, Any]) -> bool:
    """Whether one JSON line is an event ``opencode run --format json`` printed: one of its types,
    its ``sessionID``, and (but for an error) the ``part`` it is about."""
    return (
        e.get("type") in EVENT_TYPES
        and isinstance(e.get("sessionID"), str)
        and (e["type"] == "error" or isinstance(e.get("part"), Mapping))
    )


def read_opencode(parsed: Parsed, **_: Any) -> list[Transcript]:
    """The session of an ``opencode export`` file, or of the events ``opencode run --format
    json`` printed."""
    doc = parsed.document if parsed.is_document else None
    if not parsed.is_document and any(is_opencode_event(e) for _, e in parsed.rows):
        return parsed.stamp([_printed(parsed)])
    if not is_opencode_export(doc):
        what = shape(doc) if parsed.is_document else f"JSON lines ({len(parsed.rows)} objects)"
        raise InputError(
            f"{parsed.path}: {what}: not an OpenCode session "
            "(one JSON object with info and messages, as `opencode export` writes it)"
        )
    assert isinstance(doc, Mapping)
    return parsed.stamp([_transcript(doc)])


def _printed(parsed: Parsed) -> Transcript:
    """The session of what ``opencode run --format json`` printed: the parts of its replies (each
    ``part`` with its ``messageID``, a reply's parts in the order printed), which make its
    assistant messages; the prompt and what OpenCode added to it are not printed, so the first
    call, whose input they are, has none, and is not replayed."""
    sid: str | None = None
    replies: dict[str, list[Mapping[str, Any]]] = {}
    for _, e in parsed.rows:
        part = e.get("part")
        if not is_opencode_event(e) or not isinstance(part, Mapping) or not isinstance(part.get("messageID"), str):
            continue
        sid = sid or e["sessionID"]
        replies.setdefault(part["messageID"], []).append(part)
    messages = [{"info": {"id": mid, "role": "assistant"}, "parts": parts} for mid, parts in replies.items()]
    transcript = _transcript({"info": {"id": sid}, "messages": messages})
    transcript.info.append(
        "what `opencode run --format json` printed leaves out the prompt: the first call, whose input it "
        "is, is not replayed (replay the session's export or OpenCode's database for it)"
    )
    return transcript


def _transcript(doc: Mapping[str, Any], label: str | None = None) -> Transcript:
    """The transcript of one session, in an export's shape."""
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
    transcript = Transcript("opencode", "openai", "opencode", messages, info["id"], directory, [], len(recorded), label)
    if compactions:
        transcript.info.append(
            f"{compactions} compaction(s) by OpenCode left out: the replay is uncompacted "
            "(every call sent what came before it, pruned outputs whole)"
        )
    subagents = _subagents(recorded)
    if subagents and label is None:
        transcript.info.append(
            f"{len(subagents)} sub-agent session(s) of its task calls are not in this export "
            f"(opencode export {subagents[0]} writes the first)"
        )
    return transcript


# --- OpenCode's database ------------------------------------------------------------------------


def is_opencode_db(path: Path) -> bool:
    """Whether ``path`` is a regular file that begins as SQLite databases do (OpenCode's is told
    from its tables when it is read)."""
    try:
        if not path.is_file():  # (a FIFO would block the open)
            return False
        with path.open("rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def read_opencode_db(
    path: Path, *, sidechains: bool = True, max_bytes: int = MAX_SESSION_BYTES, only: str | None = None
) -> list[Transcript]:
    """Every session of an OpenCode database (``only``: that session and its sub-agents), each
    labelled with its id, its sub-agents after it (``sidechains``); the JSON read held to
    ``max_bytes``."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise InputError(f"{path}: an SQLite file that cannot be opened: {e}") from None
    conn.row_factory = sqlite3.Row
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = _TABLES - tables
        if missing:
            raise InputError(
                f"{path}: an SQLite database without OpenCode's tables ({', '.join(sorted(missing))} "
                "missing): not an OpenCode database"
            )
        sessions = _sessions(conn, only, sidechains, path)
        budget = [max_bytes]
        out = [_transcript(_exported(conn, row, budget, path), label=row["id"]) for row in sessions]
    except sqlite3.Error as e:
        raise InputError(f"{path}: OpenCode's database could not be read: {e}") from None
    finally:
        conn.close()
    for t in out:
        t.source = str(path)
    return out


def _sessions(conn: sqlite3.Connection, only: str | None, sidechains: bool, path: Path) -> list[dict[str, Any]]:
    """The sessions to read, each followed by its sub-agents (``parent_id``), oldest first."""
    rows = [dict(r) for r in conn.execute("SELECT id, parent_id, directory FROM session ORDER BY time_created, id")]
    children: dict[str | None, list[dict[str, Any]]] = {}
    for r in rows:
        children.setdefault(r["parent_id"], []).append(r)
    known = {r["id"] for r in rows}
    tops = [r for r in rows if r["parent_id"] not in known]  # a sub-agent whose parent is gone stands alone
    if only is not None:
        tops = [r for r in rows if r["id"] == only]
        if not tops:
            raise InputError(f"{path}: no session {only!r} in this OpenCode database ({len(rows)} sessions)")
    out: list[dict[str, Any]] = []

    def add(row: dict[str, Any]) -> None:
        out.append(row)
        for child in children.get(row["id"], []) if sidechains else ():
            add(child)

    for r in tops:
        add(r)
    return out


def _exported(conn: sqlite3.Connection, session: Mapping[str, Any], budget: list[int], path: Path) -> dict[str, Any]:
    """One session as ``opencode export`` writes it: its messages in OpenCode's order (their
    creation time, then id), each with its parts (by id), each row's ``data`` with its ids."""
    sid = session["id"]

    def data(text: str, **ids: str) -> dict[str, Any]:
        budget[0] -= len(text)
        if budget[0] < 0:
            raise InputError(f"{path}: its sessions are larger than the limit for a session (--max-file-mb)")
        try:
            value = json.loads(text)
        except ValueError as e:
            raise InputError(f"{path}: session {sid}: a row's data is not JSON ({e})") from None
        return {**value, **ids} if isinstance(value, dict) else dict(ids)

    parts: dict[str, list[dict[str, Any]]] = {}
    query = "SELECT id, message_id, data FROM part WHERE session_id = ? ORDER BY message_id, id"
    for row in conn.execute(query, (sid,)):
        parts.setdefault(row["message_id"], []).append(
            data(row["data"], id=row["id"], sessionID=sid, messageID=row["message_id"])
        )
    query = "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id"
    messages = [
        {"info": data(row["data"], id=row["id"], sessionID=sid), "parts": parts.get(row["id"], [])}
        for row in conn.execute(query, (sid,))
    ]
    return {"info": {"id": sid, "directory": session["directory"]}, "messages": messages}
