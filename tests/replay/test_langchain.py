"""LangChain message histories replayed: what a real ``create_agent`` run held, saved as
``messages_to_dict`` writes it (``FileChatMessageHistory``'s file), read back and replayed
through ``ctxos replay``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, messages_to_dict
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from context_os.errors import InputError
from context_os.replay.transcripts import detect_format, read_session
from tests.helpers import disk_tools, replayed

APP = "def f7():\n    return 7\n"


class ScriptedModel(BaseChatModel):
    """A fake LLM: reads app.py, edits it, answers."""

    calls: list[list[dict[str, Any]]] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        step = sum(isinstance(m, AIMessage) for m in messages)
        reply = AIMessage("Done.", tool_calls=self.calls[step]) if step < len(self.calls) else AIMessage("Done.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def agent_history(root: Path) -> list[BaseMessage]:
    """The messages of a real agent run that reads app.py and edits it, on disk."""
    (root / "app.py").write_text(APP)
    read, edit = (tool(f) for f in disk_tools(root))

    model = ScriptedModel(
        calls=[
            [{"name": "read", "args": {"path": "app.py"}, "id": "c1"}],
            [
                {
                    "name": "edit",
                    "args": {"path": "app.py", "oldText": "return 7", "newText": "return 'seven'"},
                    "id": "c2",
                }
            ],
        ]
    )
    agent = create_agent(model, [read, edit], system_prompt="You are a coding agent.")
    out = agent.invoke({"messages": [{"role": "user", "content": "fix f7"}]})
    return [*out["messages"]]


def test_a_saved_agent_history_replays_with_its_edit_made_on_the_file_shown(tmp_path: Path) -> None:
    history = agent_history(tmp_path)
    assert (tmp_path / "app.py").read_text() == "def f7():\n    return 'seven'\n"
    path = tmp_path / "history.json"
    path.write_text(json.dumps(messages_to_dict(history), indent=1))
    assert detect_format(path) == "langchain"
    t = read_session(path)
    assert (t.format, t.harness, len(t.messages)) == ("langchain", "langchain", len(history))
    result = replayed(path, tmp_path / "s.db")
    assert result["format"] == "langchain"
    assert result["turns"] == 3 == result["frames_verified"]  # each of the model's three replies
    assert result["edits_total"] == result["edits_with_target_active"] == 1
    assert result["file_versions"] == 2  # app.py as read, then as the edit left it


def test_a_list_that_is_not_langchain_messages_names_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text(json.dumps([{"type": "human", "data": {"content": "hi"}}, {"type": "ai", "data": {"content": 3}}]))
    with pytest.raises(InputError, match=r"h\.json: .*message 1"):
        read_session(path)
