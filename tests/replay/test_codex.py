"""Codex CLI rollout files, read the way Codex builds its model's input, and what its tools say
about files: ``apply_patch`` patches and shell commands that only print a file. The rollouts are
written here line by line in the shape Codex writes them (``codex-rs``'s rollout recorder)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_os import Session
from context_os.context.policy import RetentionPolicy
from context_os.context.view import own_text, sent_whole
from context_os.errors import InputError
from context_os.files.index import record_virtual
from context_os.harness.codex_tools import (
    ShellRead,
    call_patch,
    environment_cwd,
    parse_patch,
    shell_changes,
    shell_read,
)
from context_os.harness.file_ops import FileOp, edit_target, file_op
from context_os.harness.formatters import formatter_report
from context_os.harness.openai import OPENAI_PAIRING
from context_os.harness.pairing import check_pairs
from context_os.harness.toolnames import preset
from context_os.harness.virtual_files import VirtualFile
from context_os.replay.formats.codex import ABORTED
from context_os.replay.run import TranscriptReplay, replay_transcript
from context_os.replay.transcripts import detect_format, read_session
from context_os.store.sqlite import SqliteStore
from tests.cli.test_cli import ctxos
from tests.helpers import EAGER, png

NOISE = "/opt/homebrew/Library/Homebrew/cmd/shellenv.sh: line 18: /bin/ps: Operation not permitted"
"""What a login shell printed before every command's output in a real session (merged stderr)."""
HEAD = "Exit code: 0\nWall time: 0 seconds\nOutput:\n"
"""Codex's header of a ``shell_command`` output."""
UNIFIED = (
    "Chunk ID: cb9a2f\nWall time: 0.0010 seconds\nProcess exited with code 0\nOriginal token count: 6987\nOutput:\n"
)
"""Codex's header of an ``exec_command`` output (0.171, unified exec)."""
CUT = "Warning: truncated output (original token count: 6987)"


def line(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": "2026-11-29T10:00:00.000Z", "type": kind, "payload": payload}


def item(payload: dict[str, Any]) -> dict[str, Any]:
    return line("response_item", payload)


def message(role: str, text: str) -> dict[str, Any]:
    part = "output_text" if role == "assistant" else "input_text"
    return item({"type": "message", "role": role, "content": [{"type": part, "text": text}]})


def shell(call_id: str, command: str) -> dict[str, Any]:
    arguments = json.dumps({"command": command, "workdir": ".", "timeout_ms": 120000})
    return item({"type": "function_call", "name": "shell_command", "arguments": arguments, "call_id": call_id})


def ran(call_id: str, printed: str, code: int = 0) -> dict[str, Any]:
    output = f"Exit code: {code}\nWall time: 0 seconds\nOutput:\n{printed}"
    return item({"type": "function_call_output", "call_id": call_id, "output": output})


def patch(call_id: str, text: str) -> dict[str, Any]:
    return item(
        {"type": "custom_tool_call", "status": "completed", "call_id": call_id, "name": "apply_patch", "input": text}
    )


def patched(call_id: str, output: str) -> dict[str, Any]:
    return item({"type": "custom_tool_call_output", "call_id": call_id, "output": output})


def success(path: str, letter: str = "M") -> str:
    out = f"Success. Updated the following files:\n{letter} {path}\n"
    return json.dumps({"output": out, "metadata": {"exit_code": 0, "duration_seconds": 0.0}})


ADD = "*** Begin Patch\n*** Add File: app.py\n+import sys\n+def greet():\n+    return 'hi'\n+\n+print(greet())\n"
ADD += "*** End Patch"
UPDATE = (
    "*** Begin Patch\n*** Update File: app.py\n@@\n def greet():\n-    return 'hi'\n+    return 'hello'\n*** End Patch"
)
MISSED = "*** Begin Patch\n*** Update File: app.py\n@@\n-    return 'nope'\n+    return 'x'\n*** End Patch"


def rollout_lines() -> list[dict[str, Any]]:
    """A short session in every shape a rollout takes (also a base of the formats fuzzer)."""
    return [
        line(
            "session_meta",
            {
                "id": "cx-1",
                "cwd": "/work/app",
                "originator": "codex_cli_rs",
                "cli_version": "0.60.1",
                "base_instructions": {"text": "You are Codex."},
            },
        ),
        message("developer", "<permissions instructions>workspace-write</permissions instructions>"),
        message("user", "<environment_context>\n  <cwd>/work/app</cwd>\n</environment_context>"),
        line("event_msg", {"type": "user_message", "message": "add a greeting", "images": []}),
        line("turn_context", {"cwd": "/work/app", "model": "gpt-5.1-codex-max"}),
        message("user", "add a greeting"),
        item({"type": "reasoning", "summary": [], "content": None, "encrypted_content": "gAAAA..."}),
        patch("p1", ADD),
        patched("p1", success("app.py", "A")),
        item({"type": "ghost_snapshot", "ghost_commit": {"id": "4a64dbe", "parent": None}}),
        shell("s1", "sed -n '1,3p' app.py"),
        ran("s1", f"{NOISE}\nimport sys\ndef greet():\n    return 'hi'\n"),
        message("assistant", "Now the greeting."),
        patch("p2", UPDATE),
        patched("p2", success("app.py")),
        patch("p3", MISSED),
        patched("p3", "apply_patch verification failed: Failed to find expected lines in app.py:\n    return 'nope'"),
        shell("s2", "nl -ba app.py | sed -n '2,3p'"),
        shell("s3", "make test"),
        ran("s2", f"{NOISE}\n     2\tdef greet():\n     3\t    return 'hello'\n"),
        ran("s3", "make: *** No rule to make target 'test'.  Stop.\n", code=2),
        item({"type": "function_call", "name": "update_plan", "arguments": '{"plan": []}', "call_id": "u1"}),
        line("event_msg", {"type": "turn_aborted", "reason": "interrupted"}),
        message("user", "thanks"),
        message("assistant", "Done: greet() says hello."),
    ]


def rollout(path: Path) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in rollout_lines()))
    return path


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` written to ``path``, one JSON line each."""
    path.write_text("".join(json.dumps(e) + "\n" for e in rows))
    return path


def _replayed(db: Any, path: Path) -> tuple[Session, TranscriptReplay]:
    """The rollout at ``path`` replayed into a new session ``codex``, every frame verified."""
    t = read_session(path)
    session = Session.open(db, "codex", harness=t.harness, workspace=t.cwd)
    return session, replay_transcript(t, session, verify="all")


def test_a_rollout_is_codexs_history_as_openai_messages(tmp_path: Path) -> None:
    path = rollout(tmp_path / "rollout-2026-11-29T10-00-00-cx-1.jsonl")
    assert detect_format(path) == "codex"
    t = read_session(path)
    assert (t.format, t.harness, t.tool_names, t.session_id, t.cwd) == ("codex", "openai", "codex", "cx-1", "/work/app")
    roles = [m["role"] for m in t.messages]
    assert roles == [
        "system", "developer", "user", "user",
        "assistant", "tool",  # the added file (the reasoning item is not sent as text)
        "assistant", "tool",  # the read (the ghost snapshot is no message)
        "assistant", "tool",  # the assistant's text and its call: one message
        "assistant", "tool",
        "assistant", "tool", "tool",  # two calls of one response, then their outputs
        "assistant", "tool",  # update_plan, never answered: Codex's "aborted"
        "user", "assistant",
    ]  # fmt: skip
    assert t.messages[0]["content"] == "You are Codex."
    assert t.messages[8]["content"] == "Now the greeting."
    assert [c["function"]["name"] for c in t.messages[12]["tool_calls"]] == ["shell_command", "shell_command"]
    assert json.loads(t.messages[4]["tool_calls"][0]["function"]["arguments"]) == {"input": ADD}
    assert t.messages[16] == {"role": "tool", "tool_call_id": "u1", "content": ABORTED}
    assert not check_pairs(OPENAI_PAIRING, t.messages)[0]


def test_a_forked_rollout_is_the_fork_s_session_with_its_parent_s_history(tmp_path: Path) -> None:
    """A forked thread's file starts with its own ``session_meta``, then holds its parent's
    (with the parent's history): Codex takes the first; the reader took the last, so the fork
    replayed with its parent's id, directory and system prompt."""
    parent = rollout_lines()
    fork = line(
        "session_meta",
        {"id": "cx-2", "forked_from_id": "cx-1", "cwd": "/work/fork", "base_instructions": {"text": "You fork."}},
    )
    path = tmp_path / "rollout-2026-11-29T11-00-00-cx-2.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in [fork, *parent, message("user", "and now?")]))
    t = read_session(path)
    assert (t.session_id, t.cwd, t.messages[0]["content"]) == ("cx-2", "/work/fork", "You fork.")
    assert t.messages[1:] == read_session(rollout(tmp_path / "parent.jsonl")).messages[1:] + [
        {"role": "user", "content": "and now?"}
    ]


def test_a_replayed_rollout_keeps_the_file_its_patches_and_reads_show(db, tmp_path: Path) -> None:
    t = read_session(rollout(tmp_path / "r.jsonl"))
    session = Session.open(db, "codex", harness=t.harness, workspace=t.cwd)
    r = replay_transcript(t, session, verify="all")
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.frames == r.turns == 7
    # two edits (the one that failed counts as an edit the agent made), each with its file in context
    assert (r.edits_total, r.edits_with_target_active, r.files) == (2, 2, 1)
    assert r.stale_file_views_assembled == 0
    (f,) = [o for o in session.view.objects.values() if o.kind == "file"]
    # the read agreed with the write (the shell's warning line is not the file's), the failed patch changed nothing
    assert f.content == "import sys\ndef greet():\n    return 'hello'\n\nprint(greet())"
    assert r.file_versions == 2  # added, updated: the reads and the failed patch add no version


def session_start(sid: str, ask: str) -> list[dict[str, Any]]:
    """A rollout's first lines: its session (in /work/app) and the user's ask."""
    meta = {"id": sid, "cwd": "/work/app", "base_instructions": {"text": "You are Codex."}}
    return [line("session_meta", meta), message("user", ask)]


def test_a_shell_command_that_writes_a_file_is_followed(db, tmp_path: Path) -> None:
    """Codex sometimes changes a file with the shell: a file ``sed -i`` (or a redirection, ``mv``)
    changed is no longer shown at its old text (its content unknown until read again); one a
    heredoc wrote is at that text."""
    rows = session_start("cx-3", "say hello") + [
        shell("s1", "cat app.py"),
        ran("s1", "def greet():\n    return 'hi'\n"),
        shell("s2", "sed -i 's/hi/hello/' app.py && echo done"),
        ran("s2", "done\n"),
        shell("s3", "cat > notes.md <<'EOF'\n# Notes\ngreet says hello\nEOF"),
        ran("s3", ""),
        message("assistant", "Said hello."),
    ]
    session, r = _replayed(db, _jsonl(tmp_path / "r.jsonl", rows))
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.turns == 4
    files = {o.meta["path"]: o for o in session.view.objects.values() if o.kind == "file"}
    assert files["notes.md"].content == "# Notes\ngreet says hello"  # as a read shows it, and a patch adds it
    assert files["app.py"].content is None  # changed by sed: its old text is not shown as current
    assert "return 'hi'" not in json.dumps(hook_free_blocks(session))


def test_a_file_a_heredoc_wrote_read_back_whole_is_unchanged(db, tmp_path: Path) -> None:
    """A heredoc's file was kept with its last line break as an empty last line, where a Codex
    shell read (and a patch's added file) keeps a file without it: ``cat`` of the file just
    written disagreed by one line, was recorded as a change made elsewhere (a second version) and
    the write's view counted stale. Both now keep the text alike."""
    rows = session_start("cx-4", "take notes") + [
        shell("s1", "cat > notes.md <<'EOF'\n# Notes\nhello\nEOF"),
        ran("s1", ""),
        message("assistant", "Wrote them."),
        message("user", "show them"),
        shell("s2", "cat notes.md"),
        ran("s2", "# Notes\nhello\n"),
        message("assistant", "Shown."),
    ]
    session, r = _replayed(db, _jsonl(tmp_path / "r.jsonl", rows))
    assert r.frames_verified == r.turns == 4
    assert (r.file_versions, r.stale_file_views_full, r.stale_file_views_assembled) == (1, 0, 0)
    (notes,) = [o for o in session.view.objects.values() if o.kind == "file"]
    assert (notes.content, notes.meta["changes"]) == ("# Notes\nhello", 1)


def test_an_image_the_user_sent_is_counted(db, tmp_path: Path) -> None:
    """A user message's ``input_image`` (a pasted screenshot) was left out when
    its text parts were joined: the full side of every later call counted no image, though the
    model was sent it each time. It is kept as the image part it is, and counted."""
    shot = "data:image/png;base64," + base64.b64encode(png(750, 400)).decode()
    ask = [{"type": "input_text", "text": "what is wrong here?"}, {"type": "input_image", "image_url": shot}]
    rows = session_start("cx-5", "look") + [
        item({"type": "message", "role": "user", "content": ask}),
        message("assistant", "The button overlaps."),
    ]
    path = tmp_path / "r.jsonl"
    _jsonl(path, rows)
    t = read_session(path)
    assert t.messages[-2]["content"][1] == {"type": "image_url", "image_url": {"url": shot}}
    session = Session.open(db, "codex", harness=t.harness, workspace=t.cwd)
    r = replay_transcript(t, session, verify="all")
    assert r.frames_verified == r.turns == 1
    assert r.tokens_full >= 400 and r.tokens_assembled >= 400  # 750 × 400 pixels: 400 tokens


def test_an_image_a_tool_gave_is_counted(db, tmp_path: Path) -> None:
    """Codex's ``view_image`` answers with the image (an ``input_image`` part of its output):
    its text parts were joined and the image dropped. It is kept, and counted."""
    shot = "data:image/png;base64," + base64.b64encode(png(750, 400)).decode()
    output = [{"type": "input_text", "text": "shot.png"}, {"type": "input_image", "image_url": shot}]
    rows = session_start("cx-6", "look at shot.png") + [
        item({"type": "function_call", "name": "view_image", "arguments": '{"path":"shot.png"}', "call_id": "v1"}),
        item({"type": "function_call_output", "call_id": "v1", "output": output}),
        message("assistant", "The button overlaps."),
    ]
    path = tmp_path / "r.jsonl"
    _jsonl(path, rows)
    t = read_session(path)
    assert t.messages[-2]["content"] == [
        {"type": "text", "text": "shot.png"},
        {"type": "image_url", "image_url": {"url": shot}},
    ]
    session = Session.open(db, "codex", harness=t.harness, workspace=t.cwd)
    r = replay_transcript(t, session, verify="all")
    assert r.frames_verified == r.turns == 2
    assert r.tokens_full >= 400 and r.tokens_assembled >= 400  # the second call was sent the image


def hook_free_blocks(session: Session) -> list[str]:
    """The texts of the blocks the session's latest render shows (its active files)."""
    rendered = session.view.render()
    return [m.get("text") or "" for _, u in rendered.spliced for m in u.msgs]


def test_a_patch_of_several_files_changes_each(db, tmp_path: Path) -> None:
    """Every file a patch updates, adds or deletes is followed, not only its first: a file read
    before and patched second must not be shown at its old text."""
    both = (
        "*** Begin Patch\n*** Update File: a.py\n@@\n-a = 1\n+a = 2\n"
        "*** Update File: /work/app/b.py\n@@\n-b = 1\n+b = 2\n"
        "*** Add File: c.py\n+c = 3\n*** Delete File: d.py\n*** End Patch"
    )
    rows = session_start("cx-2", "bump a and b") + [
        shell("s1", "cat a.py"),
        ran("s1", "a = 1\n"),
        shell("s2", "cat b.py"),
        ran("s2", "b = 1\n"),
        shell("s3", "cat d.py"),
        ran("s3", "d = 4\n"),
        patch("p1", both),
        patched("p1", success("a.py")),
        message("assistant", "Bumped."),
    ]
    op = file_op("edit", {"input": both}, success("a.py"))
    assert op is not None and [(o.kind, o.path) for o in [op, *op.more]] == [
        ("edit", "a.py"), ("edit", "/work/app/b.py"), ("write", "c.py"), ("edit", "d.py")
    ]  # fmt: skip
    path = tmp_path / "rollout-several.jsonl"
    _jsonl(path, rows)
    t = read_session(path)
    session = Session.open(db, "several", harness=t.harness, workspace=t.cwd)
    r = replay_transcript(t, session, verify="all")
    assert (r.stale_file_views_assembled, r.frames_verified, r.files) == (0, r.frames, 4)
    files = {o.meta["path"]: o for o in session.view.objects.values() if o.kind == "file"}
    assert {p: f.content for p, f in files.items()} == {"a.py": "a = 2", "b.py": "b = 2", "c.py": "c = 3", "d.py": None}
    assert files["d.py"].state == "inactive"  # deleted: what is there is not known


def test_the_first_rollout_files_hold_bare_items(db, tmp_path: Path) -> None:
    args = json.dumps({"command": ["bash", "-lc", "cat notes.txt"], "workdir": "/work/app"})
    output = json.dumps({"output": "one\ntwo\n", "metadata": {"exit_code": 0, "duration_seconds": 0.1}})
    rows = [
        {"id": "old-1", "timestamp": "2025-05-01T10:00:00.000Z", "instructions": None},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read my notes"}]},
        {"record_type": "state"},
        {"type": "function_call", "name": "shell", "arguments": args, "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": output},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "They say one, two."}]},
    ]
    path = tmp_path / "rollout-old.jsonl"
    _jsonl(path, rows)
    assert detect_format(path) == "codex"
    t = read_session(path)
    assert (t.session_id, [m["role"] for m in t.messages]) == ("old-1", ["user", "assistant", "tool", "assistant"])
    session = Session.open(db, "old", harness=t.harness, workspace="/work/app")
    r = replay_transcript(t, session, verify="all")
    assert (r.files, r.frames_verified) == (1, 2)
    (f,) = [o for o in session.view.objects.values() if o.kind == "file"]
    assert (f.meta["path"], f.content) == ("/work/app/notes.txt", "one\ntwo")  # no cwd recorded: as the call named it


def test_lines_of_another_tools_export_are_no_bare_items(tmp_path: Path) -> None:
    # a sanitised export of a Claude Code session: message lines with a "text", not Codex's items
    rows = [
        {"type": "sanitization_notice", "source": "Claude Code session"},
        {"type": "message", "role": "user", "timestamp": "2026-04-30T07:14:25.414Z", "text": "make a landing page"},
        {"type": "message", "role": "assistant", "timestamp": "2026-04-30T07:14:30.000Z", "text": "done"},
    ]
    path = tmp_path / "export.jsonl"
    _jsonl(path, rows)
    with pytest.raises(InputError):
        read_session(path)


def test_a_tool_search_is_a_call_whose_output_is_the_tools_found(tmp_path: Path) -> None:
    found = [{"type": "function", "name": "get_issue", "description": "Fetch one issue", "parameters": {}}]
    rows = [
        line("session_meta", {"id": "ts", "cwd": "/w"}),
        message("user", "list the open issues"),
        item(
            {
                "type": "tool_search_call",
                "call_id": "s1",
                "status": "completed",
                "execution": "client",
                "arguments": {"query": "GitHub issues", "limit": 8},
            }
        ),
        item(
            {
                "type": "tool_search_output",
                "call_id": "s1",
                "status": "completed",
                "execution": "client",
                "tools": found,
            }
        ),
        message("assistant", "There are none."),
    ]
    path = tmp_path / "rollout.jsonl"
    _jsonl(path, rows)
    t = read_session(path)
    assert [m["role"] for m in t.messages] == ["user", "assistant", "tool", "assistant"]
    (call,) = t.messages[1]["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == (
        "tool_search",
        {"query": "GitHub issues", "limit": 8},
    )
    assert json.loads(t.messages[2]["content"]) == found and t.messages[2]["tool_call_id"] == "s1"


def test_the_tools_a_tool_search_found_are_replayed_whole_as_the_proxy_sends_them(db, tmp_path: Path) -> None:
    """The replay read a tool search as a call of a function whose output collapses like any
    other, where the proxy sends the tools found upstream whole (the model calls them by those
    definitions): a replay counted less than what went out. Now both read it the same way."""
    found = [
        {"type": "function", "name": f"issue_{k}", "description": "Fetch one issue " + "d" * 300, "parameters": {}}
        for k in range(12)
    ]
    search = {"call_id": "ts1", "status": "completed", "execution": "client"}
    rows = session_start("cx-ts", "triage the issues") + [
        item({"type": "tool_search_call", **search, "arguments": {"query": "issues", "limit": 12}}),
        item({"type": "tool_search_output", **search, "tools": found}),
    ]
    for k in range(30):
        rows += [shell(f"s{k}", f"cat f{k}.txt"), ran(f"s{k}", f"line {k}\n" * 400)]
    rows.append(message("assistant", "Done."))
    t = read_session(_jsonl(tmp_path / "r.jsonl", rows))
    session = Session.open(db, "codex", harness=t.harness, workspace=t.cwd, policy=RetentionPolicy(**EAGER))
    r = replay_transcript(t, session, verify="all")
    assert r.frames_verified == r.turns
    objects = session.view.objects
    assert sent_whole(objects["toolcall:codex:ts1"])
    assert own_text(objects["toolcall:codex:ts1"], session.view.layout) == json.dumps(found)
    assert sum(o.state != "active" for k, o in objects.items() if k.startswith("toolcall:codex:s")) > 20


def test_a_codex_line_without_its_payload_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"timestamp": "t", "type": "response_item", "payload": "x"}) + "\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:1: a response_item line needs a payload object"):
        read_session(path, "codex")
    path.write_text(json.dumps(line("session_meta", {"id": "x"})) + "\n")
    with pytest.raises(InputError, match="no response items: not a Codex session"):
        read_session(path)


@pytest.mark.parametrize("turns", [1, 5])
def test_a_thread_rollback_drops_the_turns_it_undid(tmp_path: Path, turns: int) -> None:
    """Codex's rollback (the user undid the last turns: ``thread_rolled_back``) drops them from
    the history, with the context Codex sent just before them, which it sends again with the next
    turn; the calls made in them are an abandoned branch (as in a Pi session), not replayed. The
    session's opening context, before its first turn, stays whatever was undone: codex-rs's
    ``trim_pre_turn_context_updates`` never walks back past the first turn (undoing it took the
    developer message and the environment with it)."""
    first = rollout_lines()[:9]  # the session's context, "add a greeting", a patch
    update = message("user", "<environment_context>\n  <cwd>/work/app/web</cwd>\n</environment_context>")
    second = [update, message("user", "now in French"), message("assistant", "Bonjour.")]
    again = [
        line("event_msg", {"type": "thread_rolled_back", "num_turns": turns}),
        update,  # the context the rollback took, sent again
        message("user", "now in German"),
        message("assistant", "Hallo."),
    ]
    t = read_session(_jsonl(tmp_path / "rollout.jsonl", [*first, *second, *again]))
    opening = [
        ("system", "You are Codex."),
        ("developer", "<permissions instructions>workspace-write</permissions instructions>"),
        ("user", "<environment_context>\n  <cwd>/work/app</cwd>\n</environment_context>"),
    ]
    kept = [("user", "add a greeting"), ("assistant", None), ("tool", success("app.py", "A"))]
    assert [(m["role"], m["content"]) for m in t.messages] == [
        *opening,
        *(kept if turns == 1 else []),
        ("user", "<environment_context>\n  <cwd>/work/app/web</cwd>\n</environment_context>"),
        ("user", "now in German"),
        ("assistant", "Hallo."),
    ]


# -- what a call says about a file ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "read"),
    [
        ("sed -n '1,200p' app.js", ShellRead("app.js", 1, 200)),
        ("sed -n 40p src/a.py", ShellRead("src/a.py", 40, 40)),
        ("sed -n '5,$p' a.py", ShellRead("a.py", 5, None)),
        ("head -n 20 README.md", ShellRead("README.md", 1, 20)),
        ("head -5 README.md", ShellRead("README.md", 1, 5)),
        ("head README.md", ShellRead("README.md", 1, 10)),
        ("cat app.js", ShellRead("app.js")),
        ("cat -n app.js", ShellRead("app.js", numbered=True)),
        ("nl -ba app.js | sed -n '40,80p'", ShellRead("app.js", 40, 80, numbered=True)),
        ("cat a.js b.js", None),
        ("cat *.js", None),
        ("cat $FILE", None),
        ("sed -n '1,20p' a.js && make", None),
        ("sed -i 's/a/b/' a.js", None),
        ("rg -n foo app.js", None),
        ("head -n 5 a.js | tail -n 2", None),
        ("cat a.js > b.js", None),
        ("sed -n '1,2p' 'unterminated", None),
        ("sed -n '1,20p' a.js\nmake", None),
        # a home directory the transcript does not name: was read as <workdir>/~/notes.md
        ("cat ~/notes.md", None),
        ("sed -n '1,20p' ~/.bashrc", None),
    ],
)
def test_a_shell_command_is_a_read_only_when_it_only_prints_one_file(command: str, read: ShellRead | None) -> None:
    assert shell_read({"command": command}) == read


@pytest.mark.parametrize(
    ("command", "changed", "written"),
    [
        ("sed -i 's/a/b/' app.py", ["/w/app.py"], []),
        ("sed -i.bak -e s/a/b/ -e s/c/d/ a.py b.py", ["/w/a.py", "/w/b.py"], []),
        ("perl -pi -e 's/x/y/' x.py", ["/w/x.py"], []),
        ("echo hi > out.txt && cat out.txt", ["/w/out.txt"], []),
        ("make 2>/dev/null | tee log.txt", ["/w/log.txt"], []),
        ("mv a.py b.py", ["/w/a.py"], []),  # b.py: a copy of a.py (below)
        ("cp a.py b.py", [], []),
        ("cp -r a b.py && mv a.py x y/ && cp a.py src", ["/w/b.py", "/w/a.py", "/w/x", "/w/y", "/w/src"], []),
        ("rm -f c.py", [], []),  # a deleted file keeps its last text
        ("FOO=1 sed -i s/a/b/ z.py", ["/w/z.py"], []),
        ("cat > new.py <<'EOF'\nprint(1)\nEOF", [], [("/w/new.py", "print(1)\n")]),
        ("sed -n '1,5p' f.py", [], []),
        ("python fix.py", [], []),  # what a script writes is not in its command
        ("grep x *.py > 'unclosed", [], []),
        # not <workdir>/~/x.txt, a file that never existed
        ("cat > ~/x.txt <<'EOF'\nhi\nEOF", [], []),
        ("sed -i s/a/b/ ~/x.txt a.py", ["/w/a.py"], []),
        # a heredoc's body is skipped, not the script after it: these changes went unseen
        ("cat > a.py <<'EOF'\nx = 2\nEOF\npython a.py", ["/w/a.py"], []),
        ("python - <<'EOF'\nprint('x')\nsed -i s/a/b/ x.py\nEOF\nsed -i s/a/b/ c.py", ["/w/c.py"], []),
        ("cat <<-EOF > d.py\n\tx\n\tEOF\ncp x.py e.py >> log", ["/w/d.py", "/w/log"], []),
        ("cat <<- 'EOF' > d.py\n\t\n\tcp y.py x.py\n\tEOF\ncp x.py e", ["/w/d.py", "/w/e"], []),
        ('echo "a << b" > f.py', ["/w/f.py"], []),
        # a cd's directory holds for the commands after it (a real Pi session's sed after a cd
        # changed <root>/main-new.ts, unseen: its file shown at its old text for 92 calls)
        ("cd /p/src && sed -i '' 's|a|b|g' main-new.ts", ["/p/src/main-new.ts"], []),  # BSD's -i ''
        ("cd sub && sed -i s/a/b/ f.py; cd ..; echo x > g.txt", ["/w/sub/f.py", "/w/g.txt"], []),
        ("cd sub\nsed -i.bak s/a/b/ f.py", ["/w/sub/f.py"], []),
        ("cd -P ../lib && tee x.py", ["/lib/x.py"], []),
        # where the script goes is not said: only absolute paths are known after it
        ("cd $D && sed -i s/a/b/ f.py /abs/x.py", ["/abs/x.py"], []),
        ("cd ~/r && echo > a.py", [], []),
        ("(cd sub && sed -i s/a/b/ f.py); echo > g.py", [], []),
        # a descriptor's number and a duplication are no files; >| and >& F write F
        ("sed -i s/a/b/ x.py 2>&1 | tee -a log.txt 2>/dev/null", ["/w/x.py", "/w/log.txt"], []),
        ("make >& build.log; make >&2; cmd >| out.txt", ["/w/build.log", "/w/out.txt"], []),
        # a substitution whose pattern has a line break cannot match: sed reads a line at a time
        # (a real Pi session's; its agent said "That won't work due to newlines")
        ("sed -i '' 's/x;\\n\\t\\tthis.y/z/g' m.ts", [], []),
        ("sed -z -i 's/a\\nb/c/' m.ts && sed -i -e N -e 's/a\\nb/c/' n.ts", ["/w/m.ts", "/w/n.ts"], []),
        # a package manager adding or removing a package writes its manifest where it runs
        ("cd assets && npm install highlight.js", ["/w/assets/package.json", "/w/assets/package-lock.json"], []),
        ("npm install && go get x.io/y", ["/w/go.mod", "/w/go.sum"], []),  # npm install alone: none
    ],
)
def test_what_a_shell_command_may_have_written(command: str, changed: list[str], written: list[Any]) -> None:
    got = shell_changes({"command": command, "workdir": "/w"}, "go: added x.io/y v1.2.0\n")
    assert (got.changed, got.written) == (changed, written)


@pytest.mark.parametrize(
    ("command", "output", "trees"),
    [
        ("git pull", "Already up to date.\n", []),
        (
            "git pull --rebase origin main",
            "Updating a..b\nFast-forward\n src/app.py | 4 ++--\n README.md  | 1 +\n",
            ["/w/src/app.py", "/w/README.md"],
        ),
        ("cd /r && git merge x", " img.png | Bin 0 -> 12 bytes\n", ["/r/img.png"]),
        ("git pull", "Fast-forward\n .../deep/path/app.ts | 2 +-\n", ["/w"]),  # abbreviated: not said
        ("git pull", "Fast-forward\n {a => b}/x.py | 0\n", ["/w"]),  # renamed: not said
        ("git pull", "fatal: not a git repository\n", ["/w"]),
    ],
)
def test_what_git_pull_or_merge_says_it_changed(command: str, output: str, trees: list[str]) -> None:
    assert shell_changes({"command": command, "workdir": "/w"}, output).trees == trees


@pytest.mark.parametrize(
    ("command", "copies", "changed"),
    [
        ("cp a.py b.py", [("/w/a.py", "/w/b.py")], []),
        ("mv -f a.py lib/", [("/w/a.py", "/w/lib/a.py")], ["/w/a.py"]),
        ("cd /p/src && cp -p main.ts main-new.ts", [("/p/src/main.ts", "/p/src/main-new.ts")], []),
        ("cp Makefile Makefile.bak -v", [("/w/Makefile", "/w/Makefile.bak")], []),
        # the copy first, then what changed it
        ("cp a.py b.py && sed -i s/x/y/ b.py", [("/w/a.py", "/w/b.py")], ["/w/b.py"]),
        # its source changed before it: what it copied is not known
        ("sed -i s/x/y/ a.py && cp a.py b.py", [], ["/w/a.py", "/w/b.py"]),
        # maybe a directory, several sources, -r, -t, -n, a glob, a home directory: as before
        (
            "cp a.py src; cp a.py b.py c/; cp -R d e.py; cp -t d a.py; cp -n a.py f.py",
            [],
            ["/w/src", "/w/c", "/w/e.py", "/w/d/a.py", "/w/f.py"],
        ),
        ("cp *.py g.py; cp a.py ~/h.py", [], ["/w/g.py"]),
        # git mv moves as mv does (in git -C's directory); its dry run moves nothing; -k may not move
        (
            "git mv -v a.py b.py; git -C lib mv c.py d/",
            [("/w/a.py", "/w/b.py"), ("/w/lib/c.py", "/w/lib/d/c.py")],
            ["/w/a.py", "/w/lib/c.py"],
        ),
        ("git mv -n a.py b.py; git mv -k c.py e.py", [], ["/w/c.py", "/w/e.py"]),
    ],
)
def test_a_copy_of_one_file_says_what_its_copy_holds(command: str, copies: list[Any], changed: list[str]) -> None:
    """A real Pi session ran ``cp …/main.ts …/main-new.ts`` and then edited the copy: the copy was
    unknown, so none of its edits could be placed."""
    got = shell_changes({"command": command, "workdir": "/w"})
    assert (got.copies, got.changed) == (copies, changed)


def test_go_says_what_it_added_and_is_taken_at_its_word() -> None:
    assert shell_changes({"command": "go mod tidy 2>&1"}, "").changed == []
    said = "go: finding module for package x.io/y\ngo: found x.io/y in x.io/y v1.2.0\n"
    assert shell_changes({"command": "go mod tidy 2>&1"}, said).changed == ["go.mod", "go.sum"]


def test_a_glob_the_shell_expands_is_kept_to_be_matched() -> None:
    """A real Pi session's ``sed -i '' … core/*.ts cli/*.ts`` changed two files it had shown:
    the glob was dropped as a path the script does not say."""
    got = shell_changes({"command": "cd /r/src && sed -i '' 's|a|b|g' core/*.ts cli/[ab]*.ts $F"})
    assert (got.changed, got.globs) == ([], ["/r/src/core/*.ts", "/r/src/cli/[ab]*.ts"])


@pytest.mark.parametrize(
    ("command", "trees", "either"),
    [
        # what git puts back: the paths it names (a directory: every file below it)
        ("git checkout -- .", ["/w"], []),
        ("git checkout HEAD~1 -- a.py lib/", ["/w/a.py", "/w/lib"], []),
        ("git restore a.py && git restore --staged b.py", ["/w/a.py"], []),  # --staged: the index only
        ("git restore -SW c.py", ["/w/c.py"], []),
        ("git checkout --theirs CHANGELOG.md", ["/w/CHANGELOG.md"], []),
        ("git stash push -m wip -- a.py", ["/w/a.py"], []),
        ("git checkout -- 'src/*.py'", ["/w/src"], []),  # a glob: the directory before it
        # the whole work tree: the call's directory, where an absolute cd went, git -C's
        ("git stash && make && git stash pop", ["/w"], []),
        ("cd sub && git reset --hard HEAD", ["/w"], []),
        ("cd /Users/x/pi && git checkout -- . && rm -rf old", ["/Users/x/pi"], []),
        ("git -C lib pull --rebase origin main", ["/w/lib"], []),
        ("git checkout -b fix origin/main", ["/w"], []),
        ("git apply /tmp/fix.diff", ["/w"], []),
        ("git rebase --abort; git merge x; git cherry-pick y", ["/w"], []),
        # a branch or a path: decided by what the session knows
        ("git checkout main", [], [(["/w/main"], "/w")]),
        ("git checkout - && git switch -c new", [], [(["/w/-"], "/w")]),
        # nothing in the work tree changes
        ("git status && git diff && git add . && git commit -m x", [], []),
        ("git checkout -b feature", [], []),
        ("git reset HEAD~1 && git reset -- a.py", [], []),
        ("git stash list; git apply --check fix.diff", [], []),
        ("git rm -f gone.py; git clean -fd", [], []),  # deleted, as rm: not followed
        ("cd $R && git pull", [], []),  # where is not said
    ],
)
def test_what_a_git_command_may_have_put_back(command: str, trees: list[str], either: list[Any]) -> None:
    """A real Pi session's ``git checkout -- .`` put back the files it had edited: they stayed
    shown at their edited text for the rest of the session."""
    got = shell_changes({"command": command, "workdir": "/w"})
    assert (got.trees, got.either) == (trees, either)
    assert shell_changes({"command": "git mv a.py lib b.py"}).changed == ["a.py", "lib", "b.py"]


@pytest.mark.parametrize(
    ("command", "formatted"),
    [
        ("black app.py", ["/w/app.py"]),
        ("cd sub && python -m black .", ["/w/sub"]),
        ("ruff format src && ruff check --fix", ["/w/src", "/w"]),
        ("npx -y prettier --write 'src/**/*.ts'", ["/w/src"]),
        ("biome check --write . && tsgo --noEmit", ["/w"]),
        ("gofmt -w main.go; cargo fmt; mix format", ["/w/main.go", "/w"]),
        ("uv run isort a.py", ["/w/a.py"]),
        # a formatter that only reports writes nothing
        ("black --check . && ruff check . && prettier -c . && biome check . && gofmt -l . && cargo fmt --check", []),
        ("npm run check", []),  # what it runs is in its output, not its command
    ],
)
def test_what_a_formatter_run_from_a_shell_rewrites(command: str, formatted: list[str]) -> None:
    assert shell_changes({"command": command, "workdir": "/w"}).formatted == formatted


@pytest.mark.parametrize(
    ("output", "fixed", "paths"),
    [
        ("reformatted /w/a.py\n\nAll done! \u2728\n1 file reformatted, 2 files left unchanged.", 1, ["/w/a.py"]),
        ("All done!\n3 files left unchanged.", 0, []),
        ("Checked 231 files in 130ms. Fixed 2 files.\nChecked 36 files in 42ms. No fixes applied.", 2, []),
        ("Formatted 1 file in 2ms. Fixed 1 file.", 1, []),  # one line, two ways of saying it
        ("Found 3 errors (3 fixed, 0 remaining).", 3, []),
        ("src/a.ts 45ms\nsrc/b.ts 3ms (unchanged)\n", 1, ["src/a.ts"]),
        ("Fixing /w/b.py\n", 1, ["/w/b.py"]),
        ("Fixing permissions...\n", None, []),  # no formatter's line
        (" \u2713 src/a.test.ts (3 tests) 12ms\nok  pkg 0.1s", None, []),  # a test runner's
    ],
)
def test_what_a_formatters_output_says_it_rewrote(output: str, fixed: int | None, paths: list[str]) -> None:
    report = formatter_report(output)
    assert (report.fixed if report else None, report.paths if report else []) == (fixed, paths)


def test_shell_reads_take_every_shape_of_codex_shell_call() -> None:
    assert shell_read({"command": ["bash", "-lc", "cat a.py"], "workdir": "/w"}) == ShellRead("/w/a.py")
    assert shell_read({"cmd": "head -n 3 a.py", "workdir": "sub"}) == ShellRead("sub/a.py", 1, 3)
    assert shell_read({"command": ["cat", "a.py"]}) == ShellRead("a.py")
    assert shell_read('{"command": "cat a.py"}') == ShellRead("a.py")
    assert shell_read({"command": 3}) is None and shell_read("not json") is None


def test_codex_tools_play_their_roles_by_what_the_call_does() -> None:
    names = preset("codex")
    assert names.role("shell_command", {"command": "sed -n '1,9p' a.py"}) == "read"
    assert names.role("shell_command", {"command": "make"}) == "bash"
    assert names.role("apply_patch", {"input": ADD}) == "write"
    assert names.role("apply_patch", {"input": UPDATE}) == "edit"
    assert names.role("apply_patch", {"input": "not a patch"}) is None
    heredoc = f"apply_patch <<'PATCH'\n{UPDATE}\nPATCH"
    assert names.role("shell_command", {"command": heredoc}) == "edit"
    assert names.role("update_plan", {"plan": []}) is None


def _said_hey_in_sub(db: Any, tmp_path: Path, rows: list[dict[str, Any]]) -> None:
    """``rows`` replayed: sub/app.py, read and then patched twice, is the one file, shown at its
    last text ("hey"), in three versions; every frame verified, no result orphaned."""
    session, r = _replayed(db, _jsonl(tmp_path / "r.jsonl", rows))
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.turns
    (f,) = [o for o in session.view.objects.values() if o.kind == "file"]
    assert (f.meta["path"], f.content) == ("sub/app.py", "def greet():\n    return 'hey'")
    assert r.file_versions == 3


def test_a_patch_run_after_cd_or_spelt_applypatch_changes_its_file(db, tmp_path: Path) -> None:
    """Codex applies ``cd DIR && apply_patch <<'EOF'`` in DIR, and takes ``applypatch`` for
    ``apply_patch`` (codex-rs ``apply-patch/src/invocation.rs``): neither was read as a patch,
    and the file it changed stayed shown at its old text."""
    hey = "*** Begin Patch\n*** Update File: sub/app.py\n@@\n-    return 'hello'\n+    return 'hey'\n*** End Patch"
    rows = session_start("cx-cd", "say hello") + [
        shell("s1", "cat sub/app.py"),
        ran("s1", "def greet():\n    return 'hi'\n"),
        shell("s2", f"cd sub && apply_patch <<'EOF'\n{UPDATE}\nEOF"),
        ran("s2", "Success. Updated the following files:\nM app.py\n"),
        shell("s3", f"applypatch <<'EOF'\n{hey}\nEOF"),
        ran("s3", "Success. Updated the following files:\nM sub/app.py\n"),
        message("assistant", "Said hey."),
    ]
    _said_hey_in_sub(db, tmp_path, rows)


@pytest.mark.parametrize(
    ("arguments", "paths"),
    [
        ({"command": ["applypatch", UPDATE]}, ["app.py"]),
        ({"command": ["bash", "-lc", f"applypatch <<EOF\n{UPDATE}\nEOF"]}, ["app.py"]),
        # the cd's directory is joined to the call's, as codex-rs joins it to the call's cwd
        ({"command": f"cd sub && apply_patch <<'EOF'\n{UPDATE}\nEOF", "workdir": "/w"}, ["/w/sub/app.py"]),
        ({"command": f"cd 'my dir'&&applypatch <<'EOF'\n{UPDATE}\nEOF"}, ["my dir/app.py"]),
        ({"command": f'cd "../lib" && apply_patch <<EOF\n{UPDATE}\nEOF', "workdir": "/w/app"}, ["/w/lib/app.py"]),
        ({"command": f"cd /abs && apply_patch <<'EOF'\n{ADD.replace('app.py', '/x/new.py')}\nEOF"}, ["/x/new.py"]),
        # anything more than one cd before it, or after it, is a shell command like any other (so for Codex)
        ({"command": f"cd a && cd b && apply_patch <<'EOF'\n{UPDATE}\nEOF"}, None),
        ({"command": f"cd sub && apply_patch <<'EOF'\n{UPDATE}\nEOF\necho done"}, None),
        ({"command": f"cd sub || apply_patch <<'EOF'\n{UPDATE}\nEOF"}, None),
        ({"command": f"cd ~/x && apply_patch <<'EOF'\n{UPDATE}\nEOF"}, None),  # a home the transcript does not name
        ({"command": f"cd $D && apply_patch <<'EOF'\n{UPDATE}\nEOF"}, None),
        ({"command": ["patch", UPDATE]}, None),
    ],
)  # fmt: skip
def test_a_shell_patch_is_found_in_each_form_codex_runs(arguments: dict[str, Any], paths: list[str] | None) -> None:
    text = call_patch(arguments)
    patch = parse_patch(text) if text is not None else None
    assert (None if patch is None else [f.path for f in patch.files]) == paths


def test_a_shell_patch_s_paths_are_under_the_call_s_workdir(db, tmp_path: Path) -> None:
    """Codex applies a shell call's patch in the call's ``workdir`` (joined with a ``cd DIR``'s,
    which alone was): a patch of ``app.py`` run in ``sub`` changed ``app.py`` at the root, and
    ``sub/app.py`` stayed shown at its old text."""

    def in_sub(call_id: str, command: Any) -> dict[str, Any]:
        arguments = json.dumps({"command": command, "workdir": "/work/app/sub"})
        return item({"type": "function_call", "name": "shell", "arguments": arguments, "call_id": call_id})

    hey = "*** Begin Patch\n*** Update File: app.py\n@@\n-    return 'hello'\n+    return 'hey'\n*** End Patch"
    rows = session_start("cx-wd", "say hello") + [
        shell("s1", "cat sub/app.py"),
        ran("s1", "def greet():\n    return 'hi'\n"),
        in_sub("s2", ["bash", "-lc", f"apply_patch <<'EOF'\n{UPDATE}\nEOF"]),
        ran("s2", "Success. Updated the following files:\nM app.py\n"),
        in_sub("s3", ["apply_patch", hey]),
        ran("s3", "Success. Updated the following files:\nM app.py\n"),
        message("assistant", "Said hey."),
    ]
    _said_hey_in_sub(db, tmp_path, rows)


@pytest.mark.parametrize(
    ("arguments", "paths"),
    [
        ({"command": ["bash", "-lc", f"apply_patch <<'EOF'\n{UPDATE}\nEOF"], "workdir": "/w/sub"}, ["/w/sub/app.py"]),
        ({"command": ["applypatch", UPDATE], "workdir": "/w/sub"}, ["/w/sub/app.py"]),
        ({"command": f"cd ../lib && apply_patch <<'EOF'\n{UPDATE}\nEOF", "workdir": "/w/sub"}, ["/w/lib/app.py"]),
        ({"command": ["apply_patch", ADD.replace("app.py", "/x/new.py")], "workdir": "/w"}, ["/x/new.py"]),
        ({"command": ["apply_patch", UPDATE], "workdir": "."}, ["app.py"]),
        ({"command": ["apply_patch", UPDATE]}, ["app.py"]),  # no workdir: the session's directory
    ],
)  # fmt: skip
def test_a_shell_patch_is_applied_in_the_call_s_workdir(arguments: dict[str, Any], paths: list[str]) -> None:
    text = call_patch(arguments)
    patch = parse_patch(text) if text is not None else None
    assert patch is not None and [f.path for f in patch.files] == paths


def test_a_patch_is_read_hunk_by_hunk_with_its_context() -> None:
    text = (
        "*** Begin Patch\n*** Update File: a.py\n@@ def f():\n a = 1\n-b = 2\n+b = 3\n\n c = 4\n"
        "@@\n-x\n+y\n*** End of File\n*** Delete File: old.py\n*** End Patch"
    )
    p = parse_patch(text)
    assert p is not None
    assert [(f.kind, f.path) for f in p.files] == [("update", "a.py"), ("delete", "old.py")]
    assert p.files[0].hunks == [("a = 1\nb = 2\n\nc = 4", "a = 1\nb = 3\n\nc = 4"), ("x", "y")]
    assert parse_patch("diff --git a/x b/x") is None
    assert edit_target({"input": text}) == FileOp("edit", "a.py", edits=p.files[0].hunks)


@pytest.mark.parametrize(
    ("command", "output", "op"),
    [
        # a range read prints at most its lines: what came before them is not the file
        ("sed -n '1,2p' a.py", f"{HEAD}{NOISE}\na\nb\n", ("a\nb", 1, None)),
        # fewer lines than asked: the file ends there
        ("sed -n '3,9p' a.py", f"{HEAD}c\nd\n", ("c\nd", 3, 4)),
        ("nl -ba a.py | sed -n '2,3p'", f"{HEAD}{NOISE}\n     2\tb\n     3\tc\n", ("b\nc", 2, None)),
        ("cat a.py", json.dumps({"output": "a\nb\n", "metadata": {"exit_code": 0}}), ("a\nb", 1, 2)),
        ("cat a.py", "Exit code: 1\nWall time: 0 seconds\nOutput:\ncat: a.py: No such file or directory\n", None),
        ("cat a.py", HEAD, None),
        ("cat a.py", "Exit code: 0\nTotal output lines: 900\nOutput:\na\n[... omitted 800 of 900 lines ...]\n", None),
        # Codex 0.171's unified exec: its header, and an output cut in the middle (seen live through the proxy)
        ("cat a.py", f"{UNIFIED}a\nb\n", ("a\nb", 1, 2)),
        ("cat a.py", f"{UNIFIED}{CUT}\nTotal output lines: 701\n\na\n", None),
        ("cat a.py", f"{UNIFIED}a\nline 127: some text of the fil\u202617890 chars truncated\u2026line 575\n", None),
    ],
)  # fmt: skip
def test_a_shell_read_is_read_past_codexs_header(
    command: str, output: str, op: tuple[str, int, int | None] | None
) -> None:
    args = {"command": command, "workdir": "."}
    got = file_op(preset("codex").role("shell_command", args), args, output)
    assert (None if got is None else (got.text, got.first_line, got.total_lines)) == op


def test_the_session_directory_is_read_from_codexs_environment_message() -> None:
    """What relative paths are under when nobody said it (the proxy sees no session_meta)."""
    assert environment_cwd("<environment_context>\n  <cwd>/work/app/</cwd>\n  <shell>zsh</shell>") == "/work/app"
    assert environment_cwd("  <environment_context><cwd>/</cwd></environment_context>") == "/"
    assert environment_cwd("<environment_context>\n  <cwd>relative</cwd>") is None
    assert environment_cwd("please look at <environment_context><cwd>/x</cwd>") is None  # not the message


def test_a_patch_changes_its_file_only_when_codex_applied_it() -> None:
    assert file_op("write", {"input": ADD}, success("app.py", "A")) == FileOp(
        "write", "app.py", text="import sys\ndef greet():\n    return 'hi'\n\nprint(greet())"
    )
    assert file_op("edit", {"input": UPDATE}, success("app.py")) == FileOp(
        "edit", "app.py", edits=[("def greet():\n    return 'hi'", "def greet():\n    return 'hello'")], anchors=[None]
    )
    assert file_op("edit", {"input": MISSED}, "apply_patch verification failed: Failed to find expected lines") is None
    deleted = "*** Begin Patch\n*** Delete File: app.py\n*** End Patch"
    assert file_op("edit", {"input": deleted}, success("app.py", "D")) == FileOp("edit", "app.py")


def test_hunks_apply_in_order_after_their_anchor_as_codex_applies_them() -> None:
    """A hunk is looked for from the end of the one before and after its ``@@`` line: the same
    text earlier in the file is not it (matched alone, anywhere, it is ambiguous); lines compare
    without trailing spaces when they do not compare exactly."""
    vf = VirtualFile("file:x", "a.py")
    vf.write("def f():\n    return 1\n\ndef g():\n    return 1\n\ndef h():\n    return 1   ")
    text = (
        "*** Begin Patch\n*** Update File: a.py\n@@ def g():\n-    return 1\n+    return 2\n"
        "@@\n def h():\n-    return 1\n+    return 3\n*** End Patch"
    )
    op = file_op("edit", {"input": text}, success("a.py"))
    assert op is not None and op.anchors == ["def g():", None]
    vf.edit(op)
    assert vf.text() == "def f():\n    return 1\n\ndef g():\n    return 2\n\ndef h():\n    return 3"
    # a hunk not found after the one before it: the content is no longer known
    vf.edit(FileOp("edit", "a.py", edits=[("    return 3", "x"), ("    return 2", "y")], anchors=[None, None]))
    assert vf.text() is None


def test_a_hunk_marked_end_of_file_changes_the_last_lines_as_codex_does() -> None:
    """``*** End of File`` ends a hunk, and Codex's ``apply_patch`` looks for its old lines at the
    file's end only (``seek_sequence`` with ``eof``). Before, the marker was skipped: the hunk
    changed the first lines like them (the file shown changed where Codex did not change it), and
    a blank line after the marker joined the hunk as an empty line of the file."""
    vf = VirtualFile("file:x", "a.py")
    vf.write("def f():\n    return 1\n\ndef g():\n    return 1\n")
    text = "*** Begin Patch\n*** Update File: a.py\n@@\n-    return 1\n+    return 2\n*** End of File\n\n*** End Patch"
    op = file_op("edit", {"input": text}, success("a.py"))
    assert op is not None
    vf.edit(op)
    assert vf.text() == "def f():\n    return 1\n\ndef g():\n    return 2\n"
    # old lines that do not end the file: not where Codex applied it, the content is unknown
    op = file_op("edit", {"input": text.replace("-    return 1", "-def f():")}, success("a.py"))
    assert op is not None
    vf.edit(op)
    assert vf.text() is None


def test_a_hunk_written_with_ascii_punctuation_finds_typographic_lines_as_codex_does() -> None:
    """Codex's ``seek_sequence`` tries last with dashes, quotes and odd spaces as their ASCII ones:
    a model that writes ``--`` and ``"`` for a file's em dash and curly quotes still patches it.
    Before, such a hunk was not found here, and the file's content was forgotten (shown unknown)."""
    vf = VirtualFile("file:x", "notes.md")
    vf.write("# Plan \u2014 draft\nsay \u201chi\u201d\u00a0now\nend")
    text = '*** Begin Patch\n*** Update File: notes.md\n@@\n-say "hi" now\n+say "hello" now\n*** End Patch'
    op = file_op("edit", {"input": text}, success("notes.md"))
    assert op is not None
    vf.edit(op)
    assert vf.text() == '# Plan \u2014 draft\nsay "hello" now\nend'


def test_a_patch_with_crlf_line_breaks_adds_no_carriage_returns() -> None:
    """Codex reads a patch's lines as Rust's ``str::lines`` does: a CR before each line break is no
    part of the line. Before, every added line kept it: the file shown held ``\\r`` at each line
    end that Codex did not write, and its next read counted as a change made outside the tools."""
    vf = VirtualFile("file:x", "a.py")
    vf.write("a = 1\nb = 2")
    text = "*** Begin Patch\r\n*** Update File: a.py\r\n@@\r\n a = 1\r\n-b = 2\r\n+b = 3\r\n*** End Patch\r\n"
    op = file_op("edit", {"input": text}, success("a.py"))
    assert op is not None and op.path == "a.py"
    vf.edit(op)
    assert vf.text() == "a = 1\nb = 3"
    added = parse_patch("*** Begin Patch\r\n*** Add File: c.py\r\n+c = 1\r\n+d = 2\r\n*** End Patch")
    assert added is not None and added.files[0].lines == ["c = 1", "d = 2"]


def test_ctxos_replay_detects_a_rollout_and_measures_it(tmp_path: Path) -> None:
    """Through the real command: the format is told from the file, and ``--json`` reports it."""
    path = rollout(tmp_path / "rollout-2026-11-29T10-00-00-cx-1.jsonl")
    out = json.loads(ctxos("replay", str(path), "--json", store=tmp_path / "s.db").stdout)
    assert (out["format"], out["turns"], out["frames_verified"], out["orphaned_tool_results"]) == ("codex", 7, 7, 0)
    assert (out["edits_total"], out["edits_with_target_active"], out["files"]) == (2, 2, 1)


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(
        st.one_of(st.none(), st.sampled_from(["", "x", "[context_os: lines 1-1 not read yet]"])),
        min_size=1,
        max_size=12,
    ),
    open_end=st.booleans(),
)
def test_a_file_reads_back_from_its_stored_text(tmp_path_factory, lines: list[str | None], open_end: bool) -> None:
    """A session that goes on after its process ended (the proxy restarted) knows its files again
    from their stored versions: the lines read, the runs never read, whether the end is known;
    a text that cannot be read back unambiguously leaves the content unknown, never wrong."""
    db = tmp_path_factory.mktemp("stored") / "s.db"
    with SqliteStore(db) as store:
        vf = VirtualFile("file:x", "/w/a.py", lines=list(lines), open_end=open_end, version=3)
        vf.changes = 2
        text = vf.text()
        assert text is not None
        version = record_virtual(
            store,
            vf.id,
            abs_path=vf.path,
            root="/w",
            text=text,
            version=3,
            cause="read",
            extra={"changes": 2, "lines": len(lines)},
        )
        back = VirtualFile.stored(version)
        assert (back.id, back.path, back.version, back.changes, back.latest) == (vf.id, vf.path, 3, 2, version)
        if not any(line is not None and line.startswith("[context_os:") for line in lines):
            assert (back.lines, back.open_end) == (vf.lines, vf.open_end)  # no line reads like a note
        elif back.lines is not None:  # a line that reads like a note may come back as not read: never as other text
            assert len(back.lines) == len(lines)
            assert all(
                b == a or (b is None and a.startswith("[context_os:")) for a, b in zip(lines, back.lines, strict=True)
            )


@settings(max_examples=300, deadline=None)
@given(
    command=st.one_of(st.text(max_size=80), st.sampled_from(["sed -n '1,2p' a", "nl -ba a | sed -n '1,2p'", "cat a"])),
    patch_text=st.one_of(st.text(max_size=200), st.builds(lambda s: "*** Begin Patch\n" + s, st.text(max_size=200))),
    output=st.text(max_size=200),
)
def test_any_command_patch_or_output_is_read_or_refused_never_raises(
    command: str, patch_text: str, output: str
) -> None:
    names = preset("codex")
    for args in ({"command": command, "workdir": "."}, {"command": ["bash", "-lc", command]}, {"input": patch_text}):
        for name in ("shell_command", "apply_patch"):
            got = file_op(names.role(name, args), args, output)
            assert got is None or got.kind in ("read", "write", "edit")
            if got is not None and got.kind == "edit":
                VirtualFile("file:x", got.path, lines=["a", None, "b"]).edit(got)
