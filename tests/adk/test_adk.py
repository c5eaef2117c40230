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
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools import FunctionTool
from google.adk.tools.base_tool import BaseTool
from google.genai import types

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.policy import RetentionPolicy
from context_os.files import FileTools, FileTracker, Workspace
from context_os.harness.adk import ContextOSPlugin, Conversation, adk_tools, before_model
from context_os.harness.google_genai import GeminiHook
from context_os.store.sqlite import SqliteStore
from tests.helpers import EAGER, eager_hook, hashed_per_call, stub_ref, wait_for
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


def agent(
    hook: GeminiHook | None, up: Upstream, *, tools: list[BaseTool] | None = None, name: str = "coder"
) -> LlmAgent:
    """The agent: its own ``read_file`` and our tools, ``hook``'s (with its callback) or ``tools``."""
    return LlmAgent(
        name=name,
        model=Gemini(model=MODEL, base_url=up.url),
        instruction="You are a coding agent.",
        tools=[FunctionTool(read_file), *(adk_tools(hook) if hook else tools or [])],
        before_model_callback=before_model(hook) if hook else None,
    )


def run(
    root: LlmAgent,
    prompt: str = "fix the bug",
    plugins: list[BasePlugin] | None = None,
    *,
    sse: bool = False,
    turns: list[tuple[str, str]] | None = None,
) -> list[Any]:
    """One run of the agent to its answer in a new ADK session (``sse``: the model's answers
    streamed), or one for each of ``turns`` (ADK session, prompt: several sessions of one runner);
    the events of the last's ADK session."""
    config = RunConfig(streaming_mode=StreamingMode.SSE if sse else StreamingMode.NONE)

    async def go() -> list[Any]:
        service = InMemorySessionService()
        runner = Runner(app=App(name="ctx", root_agent=root, plugins=plugins or []), session_service=service)
        for sid, text in turns or [("", prompt)]:
            if not sid or await service.get_session(app_name="ctx", user_id="u", session_id=sid) is None:
                sid = (await service.create_session(app_name="ctx", user_id="u", session_id=sid or None)).id
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for _ in runner.run_async(user_id="u", session_id=sid, new_message=message, run_config=config):
                pass
        done = await service.get_session(app_name="ctx", user_id="u", session_id=sid)
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


def test_the_plugin_gives_a_conversation_a_session_assembled_as_the_callback_does(db: Any, tmp_path: Path) -> None:
    script = [*reads(5), call("activate", id="r2"), "done"]
    with upstream(replies=script) as one:
        run(agent(eager_hook(GeminiHook, db, "a1", "openai"), one))
    other = SqliteStore(tmp_path / "other.db")
    plugin = ContextOSPlugin(other, policy=RetentionPolicy(**EAGER))
    with upstream(replies=script) as two:
        run(agent(None, two, tools=plugin.tools()), plugins=[plugin], turns=[("s1", "fix the bug")])
    sid = Conversation("ctx", "u", "s1", "coder").session_id
    assert sid == "adk:ctx:u:s1:coder"
    sent = [json.loads(json.dumps(r["contents"]).replace(sid, "a1")) for r in two.requests]
    assert sent == [r["contents"] for r in one.requests]
    assert [r["tools"] for r in two.requests] == [r["tools"] for r in one.requests]  # our tools, declared alike
    frames = frame_docs(other, sid)
    assert len(frames) == 7 and all(verify_frame(other, f).ok for f in frames)
    assert plugin.hooks == {}  # (closed with its runner)
    other.close()


def test_each_adk_session_is_a_session_of_its_own_closed_for_another_and_resumed(db: Any) -> None:
    """``max_open=1``: a second ADK session's conversation closes the first's session; when the
    first comes back its session is resumed from the store, its old outputs still collapsed."""
    plugin = ContextOSPlugin(db, policy=RetentionPolicy(**EAGER), max_open=1)
    seen: list[list[str]] = []

    async def look(*, callback_context: Any, llm_request: Any) -> None:  # (after the plugin's)
        seen.append([c.session for c in plugin.hooks])

    script = [*reads(5), "done", *reads(2), "done", *reads(1), "done"]
    with upstream(replies=script) as up:
        coder = agent(None, up, tools=plugin.tools())
        coder.before_model_callback = look
        run(coder, plugins=[plugin], turns=[("s1", "fix the bug"), ("s2", "fix the docs"), ("s1", "now the tests")])
    assert seen == [["s1"]] * 6 + [["s2"]] * 3 + [["s1"]] * 2
    first, second = (outputs(up.requests[k]) for k in (8, 10))
    assert second[0].startswith(STUB) and "m1.py" in second[0] and len(second) == 6  # s1's, from the store
    assert all(o.startswith("# m") for o in first)  # s2's own, not s1's
    s1, s2 = (Conversation("ctx", "u", s, "coder").session_id for s in ("s1", "s2"))
    assert (len(frame_docs(db, s1)), len(frame_docs(db, s2))) == (8, 3)
    assert all(verify_frame(db, f).ok for f in frame_docs(db, s1))


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


def test_the_plugin_leaves_the_agents_it_does_not_manage_alone(db: Any) -> None:
    plugin = ContextOSPlugin(db, policy=RetentionPolicy(**EAGER), agents={"planner"})
    with upstream(replies=[*reads(5), "done"]) as up:
        run(agent(None, up, tools=plugin.tools()), plugins=[plugin])
    assert all(o.startswith("# m") for o in outputs(up.requests[-1]))
    declared = [d["name"] for t in up.requests[-1]["tools"] for d in t.get("functionDeclarations", [])]
    assert declared == ["read_file"]  # our tools are not offered to it
    assert db.find("session") == []


def test_a_store_out_of_reach_sends_the_requests_as_they_came_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SqliteStore(tmp_path / "s.db")
    plugin = ContextOSPlugin(store)
    store.close()
    with upstream(replies=[*reads(3), "done"]) as up, caplog.at_level(logging.WARNING, "context_os.harness.adk"):
        events = run(agent(None, up, tools=plugin.tools()), plugins=[plugin])
    assert events[-1].content.parts[0].text == "done" and len(up.requests) == 4
    assert all(o.startswith("# m") for o in outputs(up.requests[-1]))
    said = [r.getMessage() for r in caplog.records if "as it came" in r.getMessage()]
    assert said == [f"context_os: a request went to the model as it came: SQLite store {store.path} is closed"]


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
    assert len(said) == 1 and "the requests of agent coder in ADK session " in said[0], said


def test_the_agent_reads_and_edits_through_our_file_tools_while_the_tracker_watches(tmp_path: Path) -> None:
    """The plugin's file tools (``files``: a conversation's, with a running tracker: watchdog's
    observer on the workspace): the agent reads a file, another program changes it (the tracker
    versions it), the agent reads it again and edits it; the model is shown the file as it is now."""
    (tmp_path / "ws").mkdir()
    app = tmp_path / "ws" / "app.py"
    app.write_text("def f():\n    return 1\n")
    ws = Workspace(tmp_path / "ws")
    with SqliteStore(tmp_path / "s.db") as store, FileTracker(store, ws, rescan_interval=None) as tracker:
        plugin = ContextOSPlugin(
            store, files=lambda s: FileTools(s, ws, tracker=tracker), redact=ws.redact, workspace=str(ws.root)
        )
        edit = call("edit", path="app.py", oldText="return 2", newText="return 3")
        with upstream(replies=[call("read", path="app.py"), call("read", path="app.py"), edit, "done"]) as up:
            root = agent(None, up, tools=plugin.tools())
            root.after_tool_callback = _changed_after_first_read(up, store, app)
            run(root, plugins=[plugin], turns=[("s1", "fix f")])
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
        (sid,) = [s.id.removeprefix("session:") for s in store.find("session")]
        assert sid == "adk:ctx:u:s1:coder" and store.get(f"session:{sid}").doc["content"]["workspace"] == str(ws.root)
        frames = frame_docs(store, sid)
        assert len(frames) == 4 and all(verify_frame(store, f).ok for f in frames)


def _changed_after_first_read(up: Upstream, store: SqliteStore, path: Path) -> Any:
    """An after-tool callback that, after the first call's tool ran (before the second request),
    writes ``path`` as another program would and waits until the tracker has recorded its second
    version."""

    async def callback(*, tool: Any, args: Any, tool_context: Any, tool_response: Any) -> None:
        if len(up.requests) == 1:
            path.write_text("def f():\n    return 2\n")
            (f,) = store.find("file", {"path": path.name})
            wait_for(lambda: len(store.history(f.id)) >= 2, "the tracker's version of app.py")
        return None

    return callback


def test_the_docs_blocks_build_agents_that_run(db: Any) -> None:
    """docs/adapters.md's ADK blocks (the docs test leaves them to this venv), run in order as a
    reader runs them, with ``store``, ``Session`` and ``my_tools`` theirs; the app and the agent
    they build then run against the scripted model."""
    from tests.test_docs import ALL, ROOT

    blocks = [b for b in ALL[ROOT / "docs" / "adapters.md"] if b.run_by == "tests/adk/test_adk.py"]
    assert len(blocks) == 2
    namespace: dict[str, Any] = {"Session": Session, "store": db, "my_tools": [FunctionTool(read_file)]}
    exec(blocks[0].compiled(), namespace)
    app, plugin = namespace["app"], namespace["plugin"]
    with upstream(replies=[*reads(4), "done"]) as up:
        app.root_agent.model = Gemini(model=MODEL, base_url=up.url)
        run(app.root_agent, plugins=app.plugins, turns=[("s1", "fix the bug")])
    exec(blocks[1].compiled(), namespace)
    with upstream(replies=[*reads(4), "done"]) as two:
        namespace["agent"].model = Gemini(model=MODEL, base_url=two.url)
        run(namespace["agent"])
    for up_, sid in ((up, Conversation("ctx", "u", "s1", "coder").session_id), (two, "adk-1")):
        declared = [d["name"] for t in up_.requests[-1]["tools"] for d in t.get("functionDeclarations", [])]
        assert "read_file" in declared and "activate" in declared
        frames = frame_docs(db, sid)  # (short sessions: sent as they are, recorded)
        assert len(frames) == 5 and all(verify_frame(db, f).ok for f in frames)
    assert plugin.hooks == {}
