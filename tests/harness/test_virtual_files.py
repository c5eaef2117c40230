"""``VirtualFiles`` on a live hook: an OpenAI loop whose agent reads and edits files with tools of
its own keeps them as file objects (the example of docs/adapters.md), on a real SQLite store with
the openai SDK's message types."""

from __future__ import annotations

import json
from pathlib import Path

from openai.types.chat import ChatCompletionMessageParam

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.policy import RetentionPolicy
from context_os.files import FileTools, Workspace
from context_os.harness import OpenAIHook, VirtualFiles
from context_os.harness.toolnames import preset
from context_os.store.sqlite import SqliteStore


def call(n: int, name: str, **args: object) -> list[ChatCompletionMessageParam]:
    fn = {"name": name, "arguments": json.dumps(args)}
    return [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{n}", "type": "function", "function": fn}]}]


TEXT = "\n".join(f"line {k} of app.py" for k in range(1, 301))


def read_then(path: str, key: str = "path") -> list[ChatCompletionMessageParam]:
    """The task, then the agent's read of app.py (``read_file`` naming it by ``key``) and its text."""
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "change line 7"},
        *call(1, "read_file", **{key: path}),
        {"role": "tool", "tool_call_id": "c1", "content": TEXT},
    ]


def test_an_agents_own_read_and_edit_keep_the_file_current(tmp_path: Path) -> None:
    messages: list[ChatCompletionMessageParam] = [
        *read_then("app.py"),
        *call(2, "edit", path="/repo/app.py", oldText="line 7 of app.py", newText="line seven"),
        {"role": "tool", "tool_call_id": "c2", "content": "Successfully replaced text in app.py."},
    ]
    with SqliteStore(tmp_path / "s.db") as store:
        session = Session.open(store, "s1", harness="openai", policy=RetentionPolicy(manage_from_tokens=0))
        files = VirtualFiles(session, root="/repo", tool_names=preset("canonical").extend({"read_file": "read"}))
        hook = OpenAIHook(session, on_sync=files.observe)
        out = json.dumps(hook.transform_context(messages))
        # the file once, at its edited text: the read's output collapsed into it, no stale line 7
        assert "line seven" in out and "line 7 of app.py" not in out.replace(json.dumps(messages[4])[1:-1], "")
        assert out.count("line 123 of app.py") == 1
        [obj] = [o for o in session.view.objects.values() if o.kind == "file"]
        assert (obj.meta["path"], obj.meta["version"], obj.state) == ("app.py", 2, "active")
        assert all(verify_frame(store, f).ok for f in frame_docs(store, "s1"))
        session.close()
        # the session goes on in another process: its file is known again, the next edit applies
        again = Session.open(store, "s1", harness="openai", policy=RetentionPolicy(manage_from_tokens=0))
        files = VirtualFiles(again, root=None, tool_names=preset("canonical").extend({"read_file": "read"}))
        more = [
            *call(3, "edit", path="app.py", oldText="line 300 of app.py", newText="the end"),
            {"role": "tool", "tool_call_id": "c3", "content": "Successfully replaced text in app.py."},
        ]
        out = json.dumps(OpenAIHook(again, on_sync=files.observe).transform_context([*messages, *more]))
        assert files.root == "/repo" and "line seven" in out and "the end" in out
        [obj] = [o for o in again.view.objects.values() if o.kind == "file"]
        assert (obj.meta["version"], obj.content.count("\n")) == (3, 299)
        again.close()


def test_a_file_in_the_home_directory_is_not_under_the_session_directory(tmp_path: Path, monkeypatch) -> None:
    """Pi's tools (and context_os's own) expand ``~/notes.md``; it was taken under the session's
    directory, ``/repo/~/notes.md``, a file that never existed: with the agent's files on this
    machine it was not found on disk and was kept as the calls showed it. It stays ``~/notes.md``,
    and a workspace on this machine expands it to the file it is."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.md").write_text("todo: ship\n")
    monkeypatch.setenv("HOME", str(home))
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "what is left?"},
        *call(1, "read", path="~/notes.md"),
        {"role": "tool", "tool_call_id": "c1", "content": "todo: ship\n"},
    ]
    with SqliteStore(tmp_path / "s.db") as store:
        session = Session.open(store, "s1", harness="openai", policy=RetentionPolicy(manage_from_tokens=0))
        files = VirtualFiles(session, root="/repo", tool_names="canonical")
        OpenAIHook(session, on_sync=files.observe).transform_context(messages)
        [obj] = [o for o in session.view.objects.values() if o.kind == "file"]
        assert (obj.meta["path"], obj.meta["abs_path"], obj.content) == ("~/notes.md", "~/notes.md", "todo: ship\n")
        session.close()
        live = Session.open(store, "s2", harness="openai", policy=RetentionPolicy(manage_from_tokens=0))
        disk = FileTools(live, Workspace(home))
        files = VirtualFiles(live, root=str(home / "repo"), tool_names="canonical", disk=disk)
        OpenAIHook(live, on_sync=files.observe).transform_context(messages)
        [obj] = [o for o in live.view.objects.values() if o.kind == "file"]
        assert (obj.meta["abs_path"], obj.content) == (str(home / "notes.md"), "todo: ship\n")
        live.close()


def test_a_tool_with_no_role_that_names_a_known_file_leaves_its_content_unknown(tmp_path: Path) -> None:
    """An editor the preset does not know (Qwen Code's edit, when taken for Gemini CLI's tools; a
    notebook's) may have changed the file it names: its object is no longer shown at the old text
    (the proxy showed it so); a failed call of it changed nothing."""
    messages: list[ChatCompletionMessageParam] = [
        *read_then("/repo/app.py", "file_path"),
        *call(2, "my_editor", file_path="/repo/app.py", line=7, text="line seven"),
        {"role": "tool", "tool_call_id": "c2", "content": "done"},
    ]
    failed: list[ChatCompletionMessageParam] = [
        *call(3, "read_file", file_path="/repo/app.py"),
        {"role": "tool", "tool_call_id": "c3", "content": TEXT.replace("line 7 of", "line seven of")},
        *call(4, "my_editor", file_path="app.py", line=8, text="line eight"),
        {"role": "tool", "tool_call_id": "c4", "content": "Error: no such line", "is_error": True},
    ]
    with SqliteStore(tmp_path / "s.db") as store:
        session = Session.open(store, "s1", harness="openai", policy=RetentionPolicy(manage_from_tokens=0))
        files = VirtualFiles(session, root="/repo", tool_names=preset("gemini-cli"))
        hook = OpenAIHook(session, on_sync=files.observe)
        hook.transform_context(messages)
        [obj] = [o for o in session.view.objects.values() if o.kind == "file"]
        assert obj.meta["version"] == 2 and obj.state != "active"  # its content unknown: not shown
        assert "line 7 of app.py" not in json.dumps(hook.transform_context(messages))
        out = json.dumps(hook.transform_context([*messages, *failed]))
        [obj] = [o for o in session.view.objects.values() if o.kind == "file"]
        assert obj.meta["version"] == 3 and obj.state == "active" and "line seven of app.py" in out
        session.close()
