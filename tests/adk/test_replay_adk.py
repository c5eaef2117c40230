"""ADK sessions replayed: the session file a real ADK run wrote (``SqliteSessionService``, as
``adk web`` and ``adk run`` keep ``.adk/session.db``), read back and replayed through ``ctxos
replay``. Runs in the ADK venv (tests/adk/test_beside_adk.py)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.models import Gemini
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.tools import FunctionTool
from google.genai import types

from context_os.errors import InputError
from context_os.replay.transcripts import detect_format, read_session, read_sessions
from tests.helpers import disk_tools, replayed
from tests.proxy.upstream import call, upstream

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "k")
    monkeypatch.delenv("GOOGLE_GENAI_USE_VERTEXAI", raising=False)


def session_file(root: Path, *, sse: bool = False) -> tuple[Path, str]:
    """The session file of two real runs of an ADK agent in one session: one reads and edits
    app.py on disk, the next answers a question; and the session's id."""
    (root / "app.py").write_text("def f7():\n    return 7\n")
    read, edit = (FunctionTool(f) for f in disk_tools(root))
    db = root / ".adk" / "session.db"
    db.parent.mkdir()
    script = [
        call("read", path="app.py"),
        call("edit", path="app.py", oldText="return 7", newText="return 'seven'"),
        "Done: f7 returns 'seven'.",
        "Yes.",
    ]
    with upstream(replies=script) as up:
        model = Gemini(model="gemini-2.5-pro", base_url=up.url)
        agent = LlmAgent(name="coder", model=model, instruction="You are a coding agent.", tools=[read, edit])
        config = RunConfig(streaming_mode=StreamingMode.SSE if sse else StreamingMode.NONE)

        async def go() -> str:
            service = SqliteSessionService(db_path=str(db))
            runner = Runner(app=App(name="coder", root_agent=agent), session_service=service)
            session = await service.create_session(app_name="coder", user_id="u")
            for text in ("fix f7", "is it done?"):
                message = types.Content(role="user", parts=[types.Part(text=text)])
                async for _ in runner.run_async(
                    user_id="u", session_id=session.id, new_message=message, run_config=config
                ):
                    pass
            await runner.close()
            await model.api_client.aio.aclose()
            return str(session.id)

        sid = asyncio.run(go())
    return db, sid


@pytest.mark.parametrize("sse", [False, True], ids=["answers", "streamed"])
def test_a_session_file_replays_with_its_edit_made_on_the_file_shown(tmp_path: Path, sse: bool) -> None:
    db, sid = session_file(tmp_path, sse=sse)
    assert (tmp_path / "app.py").read_text() == "def f7():\n    return 'seven'\n"
    assert detect_format(db) == "adk"
    t = read_session(db)
    assert (t.format, t.harness, t.label, t.session_id) == ("adk", "openai", sid, sid)
    assert [m["role"] for m in t.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert t.messages[1]["tool_calls"][0]["function"]["name"] == "read"
    assert "return 7" in t.messages[2]["content"]  # the read's output, as the model was sent it
    result = replayed(db, tmp_path / "s.db")
    assert result["format"] == "adk"
    assert result["turns"] == 4 == result["frames_verified"]  # each of the model's four replies
    assert result["edits_total"] == result["edits_with_target_active"] == 1
    assert result["file_versions"] == 2


def test_every_session_of_the_file_is_read_and_only_picks_one(tmp_path: Path) -> None:
    db, sid = session_file(tmp_path)
    with sqlite3.connect(db) as conn:  # a second session, as the service writes one
        conn.execute(
            "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time)"
            " VALUES ('coder', 'u', 's2', '{}', 9e9, 9e9)"
        )
        conn.execute(
            "INSERT INTO events (id, app_name, user_id, session_id, invocation_id, timestamp, event_data)"
            " VALUES ('e1', 'coder', 'u', 's2', 'i1', 9e9, ?)",
            ('{"content": {"role": "user", "parts": [{"text": "hi"}]}, "author": "user"}',),
        )
    assert [t.label for t in read_sessions(db)] == [sid, "s2"]
    assert [t.label for t in read_sessions(db, only="s2")] == ["s2"]
    with pytest.raises(InputError, match="no session 'nope'"):
        read_sessions(db, only="nope")
    with pytest.raises(InputError, match="ADK's session file"):
        read_sessions(db, format="opencode")
