"""Google's Agent Development Kit: a real ADK agent (``LlmAgent``, ``InMemoryRunner``, ADK's own
``Gemini`` model over google-genai) against the scripted model of tests/proxy/upstream.py (which
refuses a turn's calls sent back without their signature, as Gemini 3 does), with context_os
assembling what each call sends.

These run in the ADK venv (tests/adk/test_beside_adk.py makes it and runs them there): ADK pins
``watchdog<7``, which the dev venv's other packages do not allow beside it."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.models import Gemini
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import InMemoryRunner
from google.adk.tools import FunctionTool
from google.genai import types

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.files import FileTools, FileTracker, Workspace
from context_os.harness.adk import ContextOSPlugin, adk_tools, before_model
from context_os.harness.google_genai import GeminiHook
from context_os.store.sqlite import SqliteStore
from tests.helpers import eager_hook, hashed_per_call, stub_ref, wait_for
from tests.proxy.upstream import Upstream, call, reads, upstream
from tests.proxy.upstream import gemini_outputs as outputs

pytestmark = pytest.mark.timeout(120)

MODEL = "gemini-2.5-pro"
STUB = "[read_file output, "


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GOOGLE_API_KEY", "k")
    monkeypatch.delenv("GOOGLE_GENAI_USE_VERTEXAI", raising=False)
    yield


def read_file(path: str) -> dict[str, Any]:
    """Read a file."""
    return {"output": f"# {path}\n" + "x = 1\n" * 400}


def agent(hook: GeminiHook, up: Upstream, *, callback: bool = True, name: str = "coder") -> LlmAgent:
    return LlmAgent(
        name=name,
        model=Gemini(model=MODEL, base_url=up.url),
        instruction="You are a coding agent.",
        tools=[FunctionTool(read_file), *adk_tools(hook)],
        before_model_callback=before_model(hook) if callback else None,
    )


def run(
    root: LlmAgent, prompt: str = "fix the bug", plugins: list[BasePlugin] | None = None, *, sse: bool = False
) -> list[Any]:
    """One run of the agent to its answer (``sse``: the model's answers streamed): the events of
    ADK's session."""
    config = RunConfig(streaming_mode=StreamingMode.SSE if sse else StreamingMode.NONE)

    async def go() -> list[Any]:
        runner = InMemoryRunner(app=App(name="ctx", root_agent=root, plugins=plugins or []))
        session = await runner.session_service.create_session(app_name="ctx", user_id="u")
        message = types.Content(role="user", parts=[types.Part(text=prompt)])
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message, run_config=config):
            pass
        done = await runner.session_service.get_session(app_name="ctx", user_id="u", session_id=session.id)
        await runner.close()
        await root.model.api_client.aio.aclose()  # (ADK's model keeps its client for the loop)
        assert done is not None
        return list(done.events)

    return asyncio.run(go())


def test_an_agent_sends_stubs_for_old_outputs_and_its_session_keeps_the_real_ones(db: Any) -> None:
    hook = eager_hook(GeminiHook, db, "a1", "openai")
    with upstream(replies=[*reads(6), "done"]) as up:
        events = run(agent(hook, up))
    assert len(up.requests) == 7 and events[-1].content.parts[0].text == "done"
    sent = outputs(up.requests[-1])
    assert sent[0].startswith(STUB) and hook.session.resolve(stub_ref(sent[0]) or "")
    assert sent[-1].startswith("# m6.py")
    # our tools are offered beside the agent's own; the instruction stays in the request's config
    declared = [d["name"] for t in up.requests[-1]["tools"] for d in t.get("functionDeclarations", [])]
    assert "read_file" in declared and "activate" in declared
    assert "You are a coding agent." in json.dumps(up.requests[-1]["systemInstruction"])
    # ADK's session holds the real outputs: the model's view is the assembly's only
    kept = [p.function_response.response for e in events for p in e.content.parts if p.function_response]
    assert len(kept) == 6 and all(r["output"].startswith(f"# m{k}.py") for k, r in enumerate(kept, 1))
    frames = frame_docs(db, "a1")
    assert len(frames) == 7 and all(verify_frame(db, f).ok for f in frames)
    assert not hook.hook.last.sync.rewritten and hook.hook.last.tokens < hook.hook.last.tokens_full


def test_the_model_activates_a_collapsed_output_through_our_tool(db: Any) -> None:
    hook = eager_hook(GeminiHook, db, "a1", "openai")
    with upstream(replies=[*reads(5), call("activate", id="r2"), "done"]) as up:
        run(agent(hook, up))
    after = up.requests[-1]
    assert json.loads(outputs(after)[-1])["status"] == "activated"
    assert "# m1.py" in json.dumps(after["contents"][-1])  # shown again, at the end


def test_a_call_reads_what_came_since_though_adk_copies_every_content(db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = eager_hook(GeminiHook, db, "a1", "openai")
    with upstream(replies=[*reads(10), "done"]) as up, hashed_per_call(hook.hook, monkeypatch) as counts:
        run(agent(hook, up))
    assert len(counts) == 11 and counts[-1] == counts[3] <= 5, counts


def test_the_plugin_assembles_as_the_callback_does(db: Any, tmp_path: Path) -> None:
    script = [*reads(5), call("activate", id="r2"), "done"]
    with upstream(replies=script) as one:
        run(agent(eager_hook(GeminiHook, db, "a1", "openai"), one))
    other = SqliteStore(tmp_path / "other.db")  # (the same session's name: the same ids)
    hook = eager_hook(GeminiHook, other, "a1", "openai")
    with upstream(replies=script) as two:
        run(agent(hook, two, callback=False), plugins=[ContextOSPlugin(hook)])
    assert [r["contents"] for r in two.requests] == [r["contents"] for r in one.requests]
    assert outputs(two.requests[-2])[0].startswith(STUB)
    other.close()


def test_streamed_answers_give_the_same_requests(db: Any, tmp_path: Path) -> None:
    script = [*reads(5), call("activate", id="r2"), "done"]
    with upstream(replies=script) as one:
        run(agent(eager_hook(GeminiHook, db, "a1", "openai"), one))
    other = SqliteStore(tmp_path / "other.db")  # (the same session's name: the same ids)
    with upstream(replies=script) as two:
        run(agent(eager_hook(GeminiHook, other, "a1", "openai"), two), sse=True)
    other.close()
    assert [r["contents"] for r in two.requests] == [r["contents"] for r in one.requests]
    assert len(two.requests) == 7 and outputs(two.requests[-2])[0].startswith(STUB)
    assert all(":streamGenerateContent?alt=sse" in p for p in two.paths)
    assert not any("stream" in p for p in one.paths)


def test_the_plugin_sends_another_agents_requests_as_they_came_saying_so_once(
    db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    hook = eager_hook(GeminiHook, db, "a1", "openai")
    with upstream(replies=[*reads(5), "done"]) as up, caplog.at_level(logging.WARNING, "context_os.harness.adk"):
        run(agent(hook, up, callback=False), plugins=[ContextOSPlugin(hook, agent="planner")])
    assert all(o.startswith("# m") for o in outputs(up.requests[-1]))
    assert frame_docs(db, "a1") == []
    said = [r.getMessage() for r in caplog.records if "as they came" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(
        "context_os: the hook manages the conversation of agent 'planner' (ADK session not seen yet); the"
        " requests of agent 'coder' in ADK session "
    )


def test_a_second_adk_session_is_not_mixed_into_the_hooks_conversation(
    db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """One hook is one conversation: the same agent run in a second ADK session (another user, a
    new chat) is sent as it came, not read as a rewrite of the first's history."""
    hook = eager_hook(GeminiHook, db, "a1", "openai")
    with upstream(replies=[*reads(5), "done", *reads(5), "done"]) as up:
        coder = agent(hook, up)
        run(coder)
        with caplog.at_level(logging.WARNING, "context_os.harness.adk"):
            run(coder, "now the docs")
    assert len(up.requests) == 12 and outputs(up.requests[5])[0].startswith(STUB)
    assert all(o.startswith("# m") for o in outputs(up.requests[-1]))  # the second, as it came
    assert len(frame_docs(db, "a1")) == 6 and not hook.hook.last.sync.rewritten
    said = [r.getMessage() for r in caplog.records if "as they came" in r.getMessage()]
    assert len(said) == 1 and "agent 'coder' in ADK session " in said[0], said


def test_the_agent_reads_and_edits_through_our_file_tools_while_the_tracker_watches(tmp_path: Path) -> None:
    """The hook's file tools as ADK tools, with a running tracker (watchdog's observer on the
    workspace): the agent reads a file, another program changes it (the tracker versions it),
    the agent reads it again and edits it; the model is shown the file as it is now."""
    (tmp_path / "ws").mkdir()
    app = tmp_path / "ws" / "app.py"
    app.write_text("def f():\n    return 1\n")
    ws = Workspace(tmp_path / "ws")
    with SqliteStore(tmp_path / "s.db") as store, FileTracker(store, ws, rescan_interval=None) as tracker:
        session = Session.open(store, "af", harness="openai", workspace=str(ws.root), redact=ws.redact)
        hook = GeminiHook(session, files=FileTools(session, ws, tracker=tracker))
        edit = call("edit", path="app.py", oldText="return 2", newText="return 3")
        with upstream(replies=[call("read", path="app.py"), call("read", path="app.py"), edit, "done"]) as up:
            root = agent(hook, up)
            root.before_model_callback = [_changed_after_first_read(up, store, app), before_model(hook)]
            run(root)
        assert app.read_text() == "def f():\n    return 3\n"
        # the tracker's version: the file shown is marked stale at once, its new text read again
        assert "version 2 is newer" in json.dumps(up.requests[1]["contents"])
        assert 'version=\\"2\\">\\ndef f():\\n    return 2' in json.dumps(up.requests[2]["contents"])
        # the model is shown the file as it is now, in place of what it was shown before
        shown = up.requests[-1]["contents"][-2]["parts"][0]["text"]
        assert "this replaces its block above" in shown and 'version="3">\ndef f():\n    return 3\n' in shown
        (f,) = store.find("file", {"path": "app.py"})
        assert [v.doc["content"] for v in store.history(f.id, with_docs=True) if v.doc] == [
            "def f():\n    return 1\n",
            "def f():\n    return 2\n",
            "def f():\n    return 3\n",
        ]
        for frame in frame_docs(store, "af"):
            assert verify_frame(store, frame).ok


def _changed_after_first_read(up: Upstream, store: SqliteStore, path: Path) -> Any:
    """A before-model callback that, before the second request, writes ``path`` as another
    program would and waits until the tracker has recorded its second version."""

    async def callback(*, callback_context: Any, llm_request: Any) -> None:
        if len(up.requests) == 1:
            path.write_text("def f():\n    return 2\n")
            (f,) = store.find("file", {"path": path.name})
            wait_for(lambda: len(store.history(f.id)) >= 2, "the tracker's version of app.py")
        return None

    return callback


def test_the_docs_snippet_builds_an_agent_that_runs(db: Any) -> None:
    """docs/adapters.md's ADK block (the docs test leaves it to this venv), run as a reader runs
    it, with ``store`` and ``my_tools`` theirs; its agent then runs against the scripted model."""
    from tests.test_docs import ALL, ROOT

    (block,) = [b for b in ALL[ROOT / "docs" / "adapters.md"] if b.run_by == "tests/adk/test_adk.py"]
    namespace: dict[str, Any] = {"Session": Session, "store": db, "my_tools": [FunctionTool(read_file)]}
    exec(block.compiled(), namespace)
    built: LlmAgent = namespace["agent"]
    with upstream(replies=[*reads(4), "done"]) as up:
        built.model = Gemini(model=MODEL, base_url=up.url)
        run(built)
    declared = [d["name"] for t in up.requests[-1]["tools"] for d in t.get("functionDeclarations", [])]
    assert "read_file" in declared and "activate" in declared
    frames = frame_docs(db, namespace["hook"].session.id)  # (a short session: sent as it is, recorded)
    assert len(frames) == 5 and all(verify_frame(db, f).ok for f in frames)
