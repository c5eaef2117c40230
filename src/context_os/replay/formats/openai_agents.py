"""OpenAI Agents SDK sessions: the SQLite file its ``SQLiteSession(session_id, db_path)`` keeps.

Its ``agent_messages`` table holds each session's items (``session_id``, ``message_data``: one
Responses API input item as JSON), in the order its runs added them; ``agent_sessions`` lists the
sessions. A run's model input is the session's items so far and its new ones, so the items are a
history as any Responses conversation: read as the chat messages they stand for
(``responses.to_chat``: a response's items one assistant message, its calls tool calls, each
output a tool message), as ``ctxos proxy`` and the SDK's input filter read them, and replayed
through the OpenAI adapter. Every session of the file is read, each labelled with its id (the
file holds what the runs added, not the agent's instructions, which are not replayed).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ...errors import InputError, MalformedMessage
from ...harness.responses import for_replay, to_chat
from .common import JsonRows, Transcript, chat_session

__all__ = ["AGENTS_TABLES", "read_agents_db"]

AGENTS_TABLES = frozenset({"agent_sessions", "agent_messages"})
"""The tables of an Agents SDK session file (``SQLiteSession``'s defaults)."""


def read_agents_db(
    path: Path, conn: sqlite3.Connection, *, max_bytes: int, only: str | None = None
) -> list[Transcript]:
    """Every session of an Agents SDK session file open as ``conn`` (``only``: that one), the
    JSON read held to ``max_bytes``."""
    try:
        ids = [r[0] for r in conn.execute("SELECT session_id FROM agent_sessions ORDER BY created_at, session_id")]
        if only is not None:
            if only not in ids:
                raise InputError(f"{path}: no session {only!r} in this Agents SDK session file ({len(ids)} sessions)")
            ids = [only]
        rows = JsonRows(path, max_bytes)
        out = []
        for sid in ids:
            items = rows.read(
                conn.execute("SELECT message_data FROM agent_messages WHERE session_id = ? ORDER BY id", (sid,)),
                f"session {sid!r}, item",
            )
            out.append(_transcript(path, str(sid), items))
    except sqlite3.Error as e:
        raise InputError(f"{path}: the Agents SDK session file could not be read: {e}") from None
    return out


def _transcript(path: Path, sid: str, items: list[Any]) -> Transcript:
    try:
        messages = for_replay(to_chat(items))
    except MalformedMessage as e:
        raise InputError(f"{path}: session {sid!r}, item {e.index}: {e}") from None
    return chat_session("openai-agents", path, sid, messages, len(items), ())
