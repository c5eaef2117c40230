"""OpenCode sessions as ``opencode export`` writes them, read as OpenCode sends them
(``toModelMessages``): user parts, replies and their calls' outcomes, failed replies, images a
tool gave, compactions and pruned outputs undone, sub-agents named; detection, refusals, its read
tool's output, and a replay end to end. (tests/e2e_opencode checks the reader against the
requests of the real OpenCode.)"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.errors import InputError
from context_os.harness.codex_tools import call_patch, environment_cwd
from context_os.harness.file_ops import file_op, strip_read_output
from context_os.harness.toolnames import for_tools, preset
from context_os.replay.formats.opencode import ATTACHED, INTERRUPTED, SUBTASK
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import detect_format, read_session, read_sessions
from context_os.store.base import Store
from tests.replay.test_formats import SESSIONS

SESSION = {"id": "ses_1", "slug": "misty-island", "directory": "/work", "title": "t", "version": "1.18.33"}
PNG = "data:image/png;base64,iVBORw0KGgo="


def user(mid: str, *parts: dict[str, Any]) -> dict[str, Any]:
    info = {"id": mid, "sessionID": "ses_1", "role": "user", "time": {"created": 1}, "agent": "build"}
    return {"info": info, "parts": list(parts)}


def reply(mid: str, *parts: dict[str, Any], **info: Any) -> dict[str, Any]:
    base = {"id": mid, "sessionID": "ses_1", "role": "assistant", "parentID": "m1", "modelID": "m", "providerID": "p"}
    return {"info": {**base, **info}, "parts": [{"type": "step-start"}, *parts, {"type": "step-finish"}]}


def text(t: str, **more: Any) -> dict[str, Any]:
    return {"type": "text", "text": t, **more}


def tool(call_id: str, name: str, args: dict[str, Any], status: str = "completed", **state: Any) -> dict[str, Any]:
    return {"type": "tool", "callID": call_id, "tool": name, "state": {"status": status, "input": args, **state}}


def read_output(path: str, lines: list[str], note: str | None = None) -> str:
    numbered = "\n".join(f"{n}: {line}" for n, line in enumerate(lines, 1))
    note = note or f"(End of file - total {len(lines)} lines)"
    return f"<path>{path}</path>\n<type>file</type>\n<content>\n{numbered}\n\n{note}\n</content>"


def export(tmp_path: Path, *messages: dict[str, Any]) -> Path:
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"info": SESSION, "messages": list(messages)}, indent=2))
    return path


def test_an_export_is_detected_and_read_as_opencode_sends_it(tmp_path: Path) -> None:
    path = export(
        tmp_path,
        user("m1", text("fix f7"), text("(a note OpenCode keeps)", ignored=True), text("")),
        reply(
            "m2",
            {"type": "reasoning", "text": "thinking", "time": {"start": 1}},
            text("Reading. "),
            text("Then editing."),
            tool("c1", "read", {"filePath": "/work/a.py"}, output=read_output("/work/a.py", ["x = 1"])),
        ),
        reply("m3", text("Done.")),
    )
    assert detect_format(path) == "opencode"
    t = read_session(path)
    assert (t.format, t.harness, t.tool_names) == ("opencode", "openai", "opencode")
    assert (t.session_id, t.cwd) == ("ses_1", "/work")
    assert t.entries == 3 and t.info == [] and t.notes == []
    assert t.messages == [
        {"role": "user", "content": "fix f7"},  # ignored and empty text parts are not sent
        {
            "role": "assistant",
            "content": "Reading. Then editing.",  # its text parts joined; its reasoning not sent back
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"filePath":"/work/a.py"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": read_output("/work/a.py", ["x = 1"])},
        {"role": "assistant", "content": "Done."},
    ]  # fmt: skip


def test_a_user_message_sends_its_synthetic_texts_its_images_and_files_but_not_plain_text_files(
    tmp_path: Path,
) -> None:
    named = {"type": "file", "mime": "text/plain", "url": "file:///work/a.py", "filename": "a.py"}
    image = {"type": "file", "mime": "image/png", "url": PNG, "filename": "shot.png"}
    pdf = {"type": "file", "mime": "application/pdf", "url": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}
    folder = {"type": "file", "mime": "application/x-directory", "url": "file:///work/src"}
    path = export(
        tmp_path,
        user("m1", text("look at @a.py"), text("Called the Read tool ...", synthetic=True), named, image, pdf, folder),
        user("m2", {"type": "subtask", "prompt": "p", "description": "d", "agent": "general"}),
        reply("m3", text("ok")),
    )
    (first, second, _) = read_session(path).messages
    assert first["content"] == [
        {"type": "text", "text": "look at @a.py"},
        {"type": "text", "text": "Called the Read tool ..."},
        {"type": "image_url", "image_url": {"url": PNG}},
        {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBE"}},
    ]
    assert second == {"role": "user", "content": SUBTASK}


INTERRUPTED_HALF = {"interrupted": True, "output": "half"}


def test_each_outcome_of_a_call_answers_it_as_opencode_does(tmp_path: Path) -> None:
    path = export(
        tmp_path,
        user("m1", text("go")),
        reply(
            "m2",
            tool("c1", "bash", {"command": "make"}, "error", error="Error: exit 2"),
            tool("c2", "bash", {"command": "sleep 9"}, "error", error="no", metadata=INTERRUPTED_HALF),
            tool("c3", "bash", {"command": "ls"}, "running", time={"start": 1}),
            tool("c4", "bash", {"command": "pwd"}, "pending", raw=""),
        ),
    )  # fmt: skip
    _, _, *results = read_session(path).messages
    assert results == [
        {"role": "tool", "tool_call_id": "c1", "content": "Error: exit 2", "is_error": True},
        {"role": "tool", "tool_call_id": "c2", "content": "half"},  # interrupted: what it had printed
        {"role": "tool", "tool_call_id": "c3", "content": INTERRUPTED, "is_error": True},
        {"role": "tool", "tool_call_id": "c4", "content": INTERRUPTED, "is_error": True},
    ]


def test_a_failed_reply_is_not_sent_again_unless_it_was_aborted_after_saying_something(tmp_path: Path) -> None:
    failed = {"name": "APIError", "data": {"message": "overloaded"}}
    aborted = {"name": "MessageAbortedError", "data": {"message": "stopped"}}
    path = export(
        tmp_path,
        user("m1", text("go")),
        reply("m2", text("partial"), error=failed),
        reply("m3", {"type": "reasoning", "text": "hm", "time": {"start": 1}}, error=aborted),
        reply("m4", text("kept"), error=aborted),
    )
    assert [m.get("content") for m in read_session(path).messages] == ["go", "kept"]


def test_images_a_tool_gave_follow_its_results_as_a_user_message(tmp_path: Path) -> None:
    shot = {"type": "file", "mime": "image/png", "url": PNG}
    read = tool("c1", "read", {"filePath": "/work/shot.png"}, output="Image read successfully", attachments=[shot])
    path = export(
        tmp_path,
        user("m1", text("what is in shot.png?")),
        reply("m2", read),
        reply("m3", text("A button.")),
    )  # fmt: skip
    messages = read_session(path).messages
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    image = {"type": "image_url", "image_url": {"url": PNG}}
    assert messages[3]["content"] == [{"type": "text", "text": ATTACHED}, image]
    # an image read is no file text
    assert file_op("read", {"filePath": "/work/shot.png"}, "Image read successfully") is None


def test_opencodes_compactions_and_pruned_outputs_are_undone(tmp_path: Path) -> None:
    output = read_output("/work/a.py", ["x = 1"])
    pruned = {"start": 1, "end": 2, "compacted": 3}
    path = export(
        tmp_path,
        user("m1", text("go")),
        reply("m2", tool("c1", "read", {"filePath": "/work/a.py"}, output=output, time=pruned)),
        user("m3", {"type": "compaction", "auto": True}),
        reply("m4", text("We read a.py."), summary=True, finish="stop"),
        user("m5", text("go on")),
        reply("m6", text("ok")),
    )  # fmt: skip
    t = read_session(path)
    assert [m.get("content") for m in t.messages] == ["go", None, output, "go on", "ok"]
    assert t.info == [
        "1 compaction(s) by OpenCode left out: the replay is uncompacted "
        "(every call sent what came before it, pruned outputs whole)"
    ]


def test_the_sub_agents_of_task_calls_are_named(tmp_path: Path) -> None:
    task = tool("c1", "task", {"prompt": "p"}, output="done", metadata={"sessionId": "ses_child"})
    t = read_session(export(tmp_path, user("m1", text("go")), reply("m2", task)))
    assert t.info == [
        "1 sub-agent session(s) of its task calls are not in this export (opencode export ses_child writes the first)"
    ]


def test_an_export_of_the_wrong_shape_says_what_it_is(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"info": SESSION, "messages": [{"info": {}, "parts": "x"}]}, indent=1))
    with pytest.raises(InputError, match="not an OpenCode session"):
        read_session(path, "opencode")
    # cut where a pipe stops taking the output of `opencode export`
    whole = json.dumps({"info": SESSION, "messages": [user("m1", text("x" * 70_000))]}, indent=2)
    path.write_bytes(whole.encode()[: 1 << 16])
    with pytest.raises(InputError, match=r"exactly 64 KiB.*opencode export ID > session\.json"):
        read_session(path)


def test_a_session_replays_with_its_edit_made_on_the_file_shown(tmp_path: Path, db: Store) -> None:
    app = ["def f7():", "    return 7"]
    edit = {"filePath": "/work/app.py", "oldString": "    return 7", "newString": "    return 'seven'"}
    path = export(
        tmp_path,
        user("m1", text("fix f7")),
        reply("m2", tool("c1", "read", {"filePath": "/work/app.py"}, output=read_output("/work/app.py", app))),
        reply("m3", tool("c2", "edit", edit, output="Edit applied successfully.")),
        reply("m4", text("Done.")),
    )
    t = read_session(path)
    result = replay_transcript(t, Session.open(db, "oc", harness=t.harness, workspace=t.cwd), verify="all")
    assert result.frames_verified == result.turns == 3
    assert result.edits_total == result.edits_with_target_text_shown == 1
    (f,) = db.find("file", {"path": "app.py"})
    versions = [v.doc["content"] for v in db.history(f.id, with_docs=True) if v.doc]
    assert versions == ["def f7():\n    return 7", "def f7():\n    return 'seven'"]


# --- OpenCode's tools ------------------------------------------------------------------------------


def test_opencodes_read_output_is_the_files_lines_and_where_they_are() -> None:
    whole = read_output("/w/a.py", ["a", "", "b"]) + "\n\n<system-reminder>\nAGENTS.md ...\n</system-reminder>"
    assert strip_read_output(whole, None) == ("a\n\nb", 1, 3)
    part = read_output("/w/a.py", ["a", "b"], "(Showing lines 1-2 of 90. Use offset=3 to continue.)")
    assert strip_read_output(part, None) == ("a\nb", 1, 90)
    later = part.replace("1: a\n2: b", "41: a\n42: b").replace("lines 1-2", "lines 41-42")
    assert strip_read_output(later, 41) == ("a\nb", 41, 90)
    capped = read_output("/w/a.py", ["a"], "(Output capped at 50 KB. Showing lines 1-1. Use offset=2 to continue.)")
    assert strip_read_output(capped, None) == ("a", 1, None)
    assert strip_read_output(read_output("/w/empty", []), None) == ("", 1, 0)
    cut = read_output("/w/min.js", ["x" * 2000 + "... (line truncated to 2000 chars)"])
    assert strip_read_output(cut, None) is None  # what is shown is not the file's line
    listing = "<path>/w</path>\n<type>directory</type>\n<entries>\na.py\nsrc/\n(2 entries)\n</entries>"
    assert strip_read_output(listing, None) is None
    op = file_op("read", {"filePath": "/w/a.py"}, whole)
    assert op is not None and (op.path, op.text, op.total_lines) == ("/w/a.py", "a\n\nb", 3)


def test_opencodes_write_edit_and_apply_patch_say_their_files() -> None:
    written = file_op("write", {"filePath": "/w/n.py", "content": "x = 1\n"}, "Wrote file successfully.")
    assert written is not None and (written.kind, written.path, written.text) == ("write", "/w/n.py", "x = 1\n")
    args = {"filePath": "/w/a.py", "oldString": "1", "newString": "2"}
    edited = file_op("edit", args, "Edit applied successfully.")
    assert edited is not None and (edited.path, edited.edits) == ("/w/a.py", [("1", "2")])
    multi = file_op("edit", {"filePath": "/w/a.py", "edits": [{"oldString": "a", "newString": "b"}]}, "ok")
    assert multi is not None and multi.edits == [("a", "b")]
    patch = "*** Begin Patch\n*** Add File: n.py\n+x\n*** End Patch"
    assert call_patch({"patchText": patch}) == patch
    assert preset("opencode").role("apply_patch", {"patchText": patch}) == "write"
    update = "*** Begin Patch\n*** Update File: a.py\n@@ def f():\n-    return 7\n+    return 8\n*** End Patch"
    patched = file_op("edit", {"patchText": update}, "Success. Updated the following files:\nM a.py")
    assert patched is not None and (patched.path, patched.edits) == ("a.py", [("    return 7", "    return 8")])


def test_the_proxy_knows_opencodes_tools_by_their_names() -> None:
    offered = ["bash", "edit", "glob", "grep", "read", "skill", "task", "todowrite", "webfetch", "write"]
    names = for_tools(offered)
    assert names is not None and names.role("glob") == "find" and names.role("read") == "read"
    assert names == preset("opencode").only(offered)
    # Pi's tools are still Pi's
    assert for_tools(["read", "bash", "edit", "write", "grep", "find", "ls"]) == preset("pi")


# --- OpenCode's database ----------------------------------------------------------------------------

SCHEMA = """
CREATE TABLE session (id text PRIMARY KEY, project_id text NOT NULL, parent_id text, slug text NOT NULL,
  directory text NOT NULL, title text NOT NULL, version text NOT NULL, time_created integer NOT NULL,
  time_updated integer NOT NULL);
CREATE TABLE message (id text PRIMARY KEY, session_id text NOT NULL, time_created integer NOT NULL,
  time_updated integer NOT NULL, data text NOT NULL);
CREATE TABLE part (id text PRIMARY KEY, message_id text NOT NULL, session_id text NOT NULL,
  time_created integer NOT NULL, time_updated integer NOT NULL, data text NOT NULL);
"""
"""OpenCode 1.18's tables, as far as the reader reads them."""


def database(path: Path, sessions: dict[str, tuple[str | None, int, list[dict[str, Any]]]]) -> Path:
    """An OpenCode database of ``sessions``: id → (parent id, creation time, messages as an
    export writes them), each row's ``data`` its JSON without the ids, which are columns."""
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    for sid, (parent, created, messages) in sessions.items():
        conn.execute(
            "INSERT INTO session VALUES (?, 'p', ?, 's', '/work', 't', '1.18.33', ?, ?)",
            (sid, parent, created, created),
        )
        # created in order, but written (so stored) the other way round: OpenCode orders by time, then id
        for k, m in reversed(list(enumerate(messages))):
            info = {k2: v for k2, v in m["info"].items() if k2 not in ("id", "sessionID")}
            mid = f"{9 - k}-{sid}"  # ids that sort against the order of creation
            conn.execute("INSERT INTO message VALUES (?, ?, ?, 0, ?)", (mid, sid, created + k, json.dumps(info)))
            for n, p in reversed(list(enumerate(m["parts"]))):
                conn.execute(
                    "INSERT INTO part VALUES (?, ?, ?, 0, 0, ?)", (f"prt_{mid}_{n:02}", mid, sid, json.dumps(p))
                )
    conn.commit()
    conn.close()
    return path


def conversation(*said: str) -> list[dict[str, Any]]:
    return [user("m1", text(said[0])), *(reply(f"m{k + 2}", text(s)) for k, s in enumerate(said[1:]))]


def test_a_database_holds_every_session_each_read_as_its_export(tmp_path: Path) -> None:
    sessions: dict[str, tuple[str | None, int, list[dict[str, Any]]]] = {
        "ses_b": (None, 200, conversation("b?", "b.")),
        "ses_a": (None, 100, conversation("a?", "a.")),
        "ses_a_sub": ("ses_a", 150, conversation("sub?", "sub.")),
    }
    path = database(tmp_path / "opencode.db", sessions)
    assert detect_format(path) == "opencode"
    read = read_sessions(path)
    assert [(t.label, t.session_id, t.cwd) for t in read] == [
        ("ses_a", "ses_a", "/work"), ("ses_a_sub", "ses_a_sub", "/work"), ("ses_b", "ses_b", "/work"),
    ]  # fmt: skip
    assert [[m["content"] for m in t.messages] for t in read] == [["a?", "a."], ["sub?", "sub."], ["b?", "b."]]
    assert all(t.source == str(path) and t.format == "opencode" for t in read)
    # without sub-agents; one session, with its sub-agent's; a sub-agent alone
    assert [t.label for t in read_sessions(path, sidechains=False)] == ["ses_a", "ses_b"]
    assert [t.label for t in read_sessions(path, only="ses_a")] == ["ses_a", "ses_a_sub"]
    assert [t.label for t in read_sessions(path, only="ses_a_sub")] == ["ses_a_sub"]
    with pytest.raises(InputError, match="no session 'ses_c' in this OpenCode database \\(3 sessions\\)"):
        read_sessions(path, only="ses_c")
    with pytest.raises(InputError, match="an SQLite database \\(OpenCode's\\?\\), not a codex session file"):
        read_sessions(path, "codex")
    with pytest.raises(InputError, match="larger than the limit for a session"):
        read_sessions(path, max_bytes=100)


def test_the_parts_of_a_message_keep_their_order_and_ids(tmp_path: Path) -> None:
    edit = {"filePath": "/work/a.py", "oldString": "1", "newString": "2"}
    messages = [
        user("m1", text("go")),
        reply("m2", text("Editing."), tool("c1", "edit", edit, output="Edit applied successfully.")),
    ]
    path = database(tmp_path / "opencode.db", {"ses_1": (None, 1, messages)})
    exported = export(tmp_path, *messages)
    assert read_sessions(path)[0].messages == read_session(exported).messages


def test_another_sqlite_file_is_refused_saying_why(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE session (id text)")
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match="without OpenCode's tables \\(message, part missing\\)"):
        read_sessions(path)


def test_only_picks_one_session_of_any_file_holding_several() -> None:
    records = SESSIONS / "check" / "openhands" / "multi_swe_bench.examples.output.jsonl"
    first, *others = read_sessions(records)
    assert others and [t.label for t in read_sessions(records, only=first.label)] == [first.label]
    with pytest.raises(InputError, match="no session 'nope' in this file \\(it holds "):
        read_sessions(records, only="nope")


def test_the_directory_opencodes_system_prompt_names_is_the_sessions() -> None:
    prompt = "You are opencode...\n<env>\n  Working directory: /work/app\n  Workspace root folder: /\n</env>\nSkills"
    assert environment_cwd(prompt) == "/work/app"
    assert environment_cwd("<env>\n  Working directory: relative\n</env>") is None
    assert environment_cwd("Working directory: /work/app") is None  # not in the env block


def test_what_opencode_run_printed_reads_as_its_replies_without_the_prompt(tmp_path: Path) -> None:
    def event(kind: str, part: dict[str, Any]) -> str:
        return json.dumps({"type": kind, "timestamp": 1, "sessionID": "ses_1", "part": part}) + "\n"

    read = tool("c1", "read", {"filePath": "/work/a.py"}, output=read_output("/work/a.py", ["x = 1"]))
    lines = [
        event("step_start", {"type": "step-start", "messageID": "m2"}),
        event("tool_use", {**read, "messageID": "m2"}),
        event("step_finish", {"type": "step-finish", "reason": "tool-calls", "messageID": "m2"}),
        json.dumps({"type": "error", "timestamp": 2, "sessionID": "ses_1", "error": {"name": "APIError"}}) + "\n",
        event("step_start", {"type": "step-start", "messageID": "m3"}),
        event("text", {"type": "text", "text": "x is 1.", "messageID": "m3"}),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(lines))
    assert detect_format(path) == "opencode"
    t = read_session(path)
    assert (t.format, t.session_id, t.entries) == ("opencode", "ses_1", 2)
    assert [m["role"] for m in t.messages] == ["assistant", "tool", "assistant"]
    assert t.messages[2]["content"] == "x is 1."
    assert t.info == [
        "what `opencode run --format json` printed leaves out the prompt: the first call, whose input it is, "
        "is not replayed (replay the session's export or OpenCode's database for it)"
    ]
