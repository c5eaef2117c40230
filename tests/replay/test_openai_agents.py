"""OpenAI Agents SDK sessions replayed: the SQLite file a real ``Runner`` run with a
``SQLiteSession`` wrote, read back and replayed through ``ctxos replay``."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, ModelResponse, RunConfig, Runner, SQLiteSession, Usage, function_tool
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from context_os.errors import InputError
from context_os.harness.responses import sent_whole
from context_os.replay.transcripts import detect_format, read_session, read_sessions
from tests.helpers import disk_tools, replayed


class ScriptedModel(Model):
    """A fake LLM: reads app.py, edits it, answers."""

    def __init__(self, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.calls = calls

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        step = sum(1 for i in input if isinstance(i, dict) and i.get("type") == "function_call")
        if step < len(self.calls):
            name, arguments = self.calls[step]
            call = ResponseFunctionToolCall(
                type="function_call", call_id=f"c{step}", name=name, arguments=json.dumps(arguments), id=f"fc{step}"
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text="Done.", annotations=[])
        answer = ResponseOutputMessage(type="message", id="m", role="assistant", status="completed", content=[text])
        return ModelResponse(output=[answer], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def session_file(root: Path) -> Path:
    """The session file of two real runs of an agent: one reads and edits app.py, on disk; the
    next, in the same session, answers a question."""
    (root / "app.py").write_text("def f7():\n    return 7\n")
    read, edit = (function_tool(f) for f in disk_tools(root))

    db = root / "agents.db"
    calls = [
        ("read", {"path": "app.py"}),
        ("edit", {"path": "app.py", "oldText": "return 7", "newText": "return 'seven'"}),
    ]
    agent = Agent(name="coder", instructions="You are a coding agent.", model=ScriptedModel(calls), tools=[read, edit])
    config = RunConfig(tracing_disabled=True)
    session = SQLiteSession("s1", str(db))
    asyncio.run(Runner.run(agent, "fix f7", session=session, run_config=config))
    asyncio.run(Runner.run(agent, "is it done?", session=session, run_config=config))
    session.close()
    return db


def test_a_session_file_replays_with_its_edit_made_on_the_file_shown(tmp_path: Path) -> None:
    db = session_file(tmp_path)
    assert (tmp_path / "app.py").read_text() == "def f7():\n    return 'seven'\n"
    assert detect_format(db) == "openai-agents"
    t = read_session(db)
    assert (t.format, t.harness, t.label) == ("openai-agents", "openai", "s1")
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
    result = replayed(db, tmp_path / "s.db")
    assert result["format"] == "openai-agents"
    assert result["turns"] == 4 == result["frames_verified"]  # each of the model's four replies
    assert result["edits_total"] == result["edits_with_target_active"] == 1
    assert result["file_versions"] == 2


def test_every_session_of_the_file_is_read_and_only_picks_one(tmp_path: Path) -> None:
    db = session_file(tmp_path)
    with sqlite3.connect(db) as conn:  # a second session, as another SQLiteSession("s2", db) writes
        conn.execute("INSERT INTO agent_sessions (session_id) VALUES ('s2')")
        conn.execute(
            "INSERT INTO agent_messages (session_id, message_data) VALUES ('s2', ?)",
            (json.dumps({"role": "user", "content": "hi"}),),
        )
    assert [t.label for t in read_sessions(db)] == ["s1", "s2"]
    assert [t.label for t in read_sessions(db, only="s2")] == ["s2"]
    with pytest.raises(InputError, match="no session 'nope'"):
        read_sessions(db, only="nope")
    with pytest.raises(InputError, match="an Agents SDK session file"):
        read_sessions(db, format="opencode")


def test_a_computer_use_session_replays_its_screenshots_whole_as_the_proxy_sends_them(tmp_path: Path) -> None:
    """A ``ComputerTool`` loop kept by a ``SQLiteSession``: each screenshot goes upstream whole (the
    API takes nothing else as a computer call's output), through the proxy and so in a replay,
    which dropped what told the adapter so and counted an old screenshot as a collapsed stub."""
    from tests.proxy.test_responses_items import computer_use

    db = tmp_path / "agents.db"
    session = SQLiteSession("cu", str(db))
    asyncio.run(session.add_items(computer_use(12)))  # type: ignore[arg-type]
    session.close()
    t = read_session(db)
    shots = [m for m in t.messages if m["role"] == "tool" and sent_whole(m)]
    assert len(shots) == 12 and all(isinstance(m["content"], list) for m in shots)
    assert not any(sent_whole(m) for m in t.messages if m["role"] == "tool" and m not in shots)
    result = replayed(db, tmp_path / "s.db")
    assert result["turns"] == result["frames_verified"] > 0
