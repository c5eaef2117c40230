"""ADK's session file read without google-adk: a file in its schema (``SqliteSessionService``'s
tables) made here, its events as ADK writes them (snake_case JSON, as the real run of
tests/adk/test_replay_adk.py wrote them). The real run's file is replayed there, in the ADK venv."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from context_os.errors import InputError
from context_os.replay.transcripts import detect_format, read_session

SCHEMA = """
CREATE TABLE app_states (app_name TEXT PRIMARY KEY, state TEXT NOT NULL, update_time REAL NOT NULL);
CREATE TABLE user_states (app_name TEXT NOT NULL, user_id TEXT NOT NULL, state TEXT NOT NULL,
    update_time REAL NOT NULL, PRIMARY KEY (app_name, user_id));
CREATE TABLE sessions (app_name TEXT NOT NULL, user_id TEXT NOT NULL, id TEXT NOT NULL, state TEXT NOT NULL,
    create_time REAL NOT NULL, update_time REAL NOT NULL, PRIMARY KEY (app_name, user_id, id));
CREATE TABLE events (id TEXT NOT NULL, app_name TEXT NOT NULL, user_id TEXT NOT NULL, session_id TEXT NOT NULL,
    invocation_id TEXT NOT NULL, timestamp REAL NOT NULL, event_data TEXT NOT NULL,
    PRIMARY KEY (app_name, user_id, session_id, id));
"""

CALL = {"function_call": {"id": "adk-1", "name": "read_file", "args": {"path": "a.py"}}, "thought_signature": "c2ln"}
IMAGE = {"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgo="}}
EVENTS: list[Any] = [
    {"author": "user", "content": {"role": "user", "parts": [{"text": "fix it"}]}},
    {"author": "coder", "partial": True, "content": {"role": "model", "parts": [{"text": "Let me"}]}},
    {
        "author": "coder",
        "content": {"role": "model", "parts": [{"text": "Let me look."}, CALL]},
    },
    {
        "author": "coder",
        "content": {
            "role": "user",
            "parts": [{"function_response": {"id": "adk-1", "name": "read_file", "response": {"output": "x = 1\n"}}}],
        },
    },
    {"author": "coder", "actions": {"state_delta": {"k": 1}}},  # no content: a state change
    {
        "author": "user",
        "content": {"role": "user", "parts": [{"text": "and this"}, IMAGE]},
    },
    {"author": "coder", "content": {"role": "model", "parts": [{"text": "Done."}]}},
]  # fmt: skip


def session_file(root: Path, events: list[Any], rows: list[str] | None = None) -> Path:
    db = root / "session.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(SCHEMA)
        conn.execute("INSERT INTO sessions VALUES ('app', 'u', 's1', '{}', 1.0, 1.0)")
        for n, text in enumerate(rows if rows is not None else [json.dumps(e) for e in events]):
            conn.execute("INSERT INTO events VALUES (?, 'app', 'u', 's1', 'i', ?, ?)", (f"e{n}", 2.0 + n, text))
    conn.close()
    return db


def test_events_are_read_as_the_gemini_contents_they_hold(tmp_path: Path) -> None:
    db = session_file(tmp_path, EVENTS)
    assert detect_format(db) == "adk"
    t = read_session(db)
    assert (t.format, t.harness, t.label, t.entries) == ("adk", "openai", "s1", 7)
    assert [m["role"] for m in t.messages] == ["user", "assistant", "tool", "user", "assistant"]
    reply = t.messages[1]
    assert reply["content"] == "Let me look."  # the partial event before it left out
    assert reply["tool_calls"][0]["function"] == {"name": "read_file", "arguments": '{"path": "a.py"}'}
    assert t.messages[2]["tool_call_id"] == reply["tool_calls"][0]["id"] and t.messages[2]["content"] == "x = 1\n"
    image = [p for p in t.messages[3]["content"] if p.get("type") == "image_url"]  # inline_data, read as the API's
    assert len(image) == 1 and image[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert all("ctxos_gemini" not in m for m in t.messages)


def test_what_it_cannot_read_is_named_by_session_and_event(tmp_path: Path) -> None:
    db = session_file(tmp_path, [], rows=[json.dumps(EVENTS[0]), "{not json"])
    with pytest.raises(InputError, match=r"session 's1', event 1: not JSON"):
        read_session(db)
    (tmp_path / "session.db").unlink()
    orphan = {"content": {"role": "user", "parts": [{"function_response": {"name": "f", "response": {"output": "x"}}}]}}
    db = session_file(tmp_path, [EVENTS[0], EVENTS[4], orphan])
    with pytest.raises(InputError, match=r"session 's1', event 2: "):
        read_session(db)
