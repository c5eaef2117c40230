"""The agent's remember and recall tools (context/source_tools.py) through a real hook: what the
agent remembers shows in its context from the next turn, in every later session of the project."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.source_tools import SourceTools
from context_os.errors import InputError
from context_os.harness.openai import OpenAIHook
from context_os.sources.memory import MemoryScopes
from context_os.store.base import Store
from tests.helpers import blocks_text, call, result, say, user


def memory_hook(store: Store, sid: str, tmp_path: Path, *, trusted: bool = True) -> OpenAIHook:
    session = Session.open(store, sid, harness="openai", workspace=str(tmp_path / "repo"))
    memory = MemoryScopes(tmp_path / "repo", trust_project=trusted, data_dir=tmp_path / "data")
    hook = OpenAIHook(session)
    SourceTools(session, memory=memory).register(hook.registry)
    return hook


def test_a_remembered_fact_is_in_context_from_the_next_turn_and_in_the_next_session(
    store: Store, uid: str, tmp_path: Path
) -> None:
    (tmp_path / "repo").mkdir()
    hook = memory_hook(store, uid, tmp_path)
    assert {"remember"} <= {t["function"]["name"] for t in hook.tools}
    msgs = [user("we deploy with make release")]
    hook.transform_context(msgs)
    out = json.loads(hook.call_tool("remember", {"text": "deploy with make release"}))
    assert out["appended"] == "- deploy with make release" and out["scope"] == "project"
    msgs += [call("c1", "remember", text="deploy with make release"), result("c1", json.dumps(out)), say("noted")]
    text = blocks_text(hook.transform_context(msgs))
    assert "- deploy with make release" in text
    index = hook.session.view.objects[next(i for i in hook.session.view.objects if i.startswith("memory:project:"))]
    assert index.pinned and index.state == "active"
    assert all(verify_frame(store, f).ok for f in frame_docs(store, uid))
    hook.session.close()
    # a later session of the same project starts with it
    later = memory_hook(store, f"{uid}-2", tmp_path)
    assert "- deploy with make release" in blocks_text(later.transform_context([user("hello")]))


def test_remember_refuses_what_it_cannot_write(store: Store, uid: str, tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    hook = memory_hook(store, uid, tmp_path, trusted=False)
    hook.transform_context([user("hi")])
    out = json.loads(hook.call_tool("remember", {"text": "a fact"}))
    assert out["type"] == "InputError" and "not trusted" in out["error"]
    assert not (tmp_path / "repo" / ".context_os").exists()
    out = json.loads(hook.call_tool("remember", {"text": "a fact", "scope": "team"}))
    assert "scope must be" in out["error"]
    out = json.loads(hook.call_tool("remember", {"text": "x", "scope": "global", "topic": "../etc"}))
    assert out["type"] == "InputError" and "topic" in out["error"]
    out = json.loads(hook.call_tool("remember", {"text": "the user likes tabs", "scope": "global"}))
    assert out["appended"] == "- the user likes tabs"


def test_source_tools_need_a_source(store: Store, uid: str) -> None:
    with pytest.raises(InputError, match="recall engine, memory scopes, or both"):
        SourceTools(Session.open(store, uid))
