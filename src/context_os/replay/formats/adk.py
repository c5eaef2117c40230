"""Google ADK sessions: the SQLite file ADK's ``SqliteSessionService`` keeps (``adk web`` and
``adk run`` keep theirs in ``<agent>/.adk/session.db``).

Its ``events`` table holds each session's events (``app_name``, ``user_id``, ``session_id``,
``timestamp``, ``event_data``: the event as JSON, its fields in snake_case); ``sessions`` lists
the sessions. An event's ``content`` is a Gemini content (``role``, ``parts``): the user's
messages, the model's replies with their function calls, the function responses. ADK builds
each model request from these, so they are read, in the order they were added, as the Gemini
contents they are: their parts' fields put in the API's camelCase (``function_call`` is
``functionCall``, ``thought_signature`` ``thoughtSignature``), then as the chat messages they
stand for (``gemini.to_chat``, as ``ctxos proxy`` and ``GeminiHook`` read Gemini's contents),
replayed through the OpenAI adapter. A streamed reply's partial events are left out (ADK keeps
only the final one in the session), as are events without content (state changes, transfers).
Every session of the file is read, each labelled with its id.

The agents' instructions are not in the file, so they are not replayed. In a session of several
agents, every agent's events are read as one conversation; ADK shows each agent the others'
turns as ``For context:`` user text, which is not rebuilt here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Set
from pathlib import Path
from typing import Any

from ...errors import InputError, MalformedMessage
from ...harness.gemini import KEPT, to_chat
from .common import JsonRows, Transcript, chat_session

__all__ = ["ADK_TABLES", "is_adk_db", "read_adk_db"]

ADK_TABLES = frozenset({"sessions", "events", "app_states", "user_states"})
"""The tables of ADK's session file (``SqliteSessionService``)."""

_PART_FIELDS = {
    "function_call": "functionCall",
    "function_response": "functionResponse",
    "thought_signature": "thoughtSignature",
    "inline_data": "inlineData",
    "file_data": "fileData",
    "executable_code": "executableCode",
    "code_execution_result": "codeExecutionResult",
    "video_metadata": "videoMetadata",
}
"""A part's fields as ADK's JSON names them, in the API's names (the rest are alike)."""
_DATA_FIELDS = {"mime_type": "mimeType", "file_uri": "fileUri", "display_name": "displayName"}
"""The fields of ``inline_data`` and ``file_data`` likewise (a call's ``args`` and a response's
``response`` are the agent's own: left as they are)."""


def is_adk_db(conn: sqlite3.Connection, tables: Set[str]) -> bool:
    """Whether the database open as ``conn``, holding ``tables``, is ADK's session file (its
    tables, and events kept as JSON in ``event_data``: the schema of ADK 1.2x on)."""
    return tables >= ADK_TABLES and "event_data" in {r[1] for r in conn.execute("PRAGMA table_info(events)")}


def read_adk_db(path: Path, conn: sqlite3.Connection, *, max_bytes: int, only: str | None = None) -> list[Transcript]:
    """Every session of ADK's session file open as ``conn`` (``only``: the one of that id), the
    JSON read held to ``max_bytes``."""
    try:
        keys = list(conn.execute("SELECT app_name, user_id, id FROM sessions ORDER BY create_time, id"))
        if only is not None:
            keys = [k for k in keys if k[2] == only]
            if not keys:
                raise InputError(f"{path}: no session {only!r} in this ADK session file")
        rows = JsonRows(path, max_bytes)
        out = []
        for app, user, sid in keys:
            events = rows.read(
                conn.execute(
                    "SELECT event_data FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?"
                    " ORDER BY timestamp, rowid",
                    (app, user, sid),
                ),
                f"session {sid!r}, event",
            )
            out.append(_transcript(path, str(sid), events))
    except sqlite3.Error as e:
        raise InputError(f"{path}: the ADK session file could not be read: {e}") from None
    return out


def _transcript(path: Path, sid: str, events: list[Any]) -> Transcript:
    contents: list[Any] = []
    at: list[int] = []  # the event each content came from
    for n, event in enumerate(events):
        if not isinstance(event, Mapping):
            raise InputError(f"{path}: session {sid!r}, event {n}: not a JSON object")
        content = event.get("content")
        if event.get("partial") or not isinstance(content, Mapping) or not content.get("parts"):
            continue
        contents.append(_api_content(content))
        at.append(n)
    try:
        messages = to_chat(contents)
    except MalformedMessage as e:
        where = f"event {at[e.index]}" if e.index is not None and e.index < len(at) else "its events"
        raise InputError(f"{path}: session {sid!r}, {where}: {e}") from None
    return chat_session("adk", path, sid, messages, len(events), (KEPT,))


def _api_content(content: Mapping[str, Any]) -> dict[str, Any]:
    parts = content.get("parts")
    return {
        "role": content.get("role") or "user",
        "parts": [_api_part(p) if isinstance(p, Mapping) else p for p in parts] if isinstance(parts, list) else parts,
    }


def _api_part(part: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in part.items():
        name = _PART_FIELDS.get(key, key)
        if name in ("inlineData", "fileData") and isinstance(value, Mapping):
            value = {_DATA_FIELDS.get(k, k): v for k, v in value.items()}
        out[name] = value
    return out
