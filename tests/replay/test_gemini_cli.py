"""Gemini CLI session files, read as Gemini CLI loads them (``loadConversationRecord``: legacy
JSON, JSON lines with ``$set`` checkpoints, ``$rewindTo`` and messages written again) and rebuilds
the model's history on resume (``convertSessionToClientHistory``), each tool result once though
v0.44+ records it twice; detection, sub-agents, its read_file's notes, and a real session
(``data/gemini-cli``) replayed end to end."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.errors import InputError
from context_os.harness.file_ops import file_op
from context_os.harness.openai import OPENAI_PAIRING
from context_os.harness.pairing import check_pairs
from context_os.harness.toolnames import preset
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import Transcript, detect_format, read_session, read_sessions
from tests.replay.test_formats import calls

REAL = Path(__file__).parent / "data" / "gemini-cli" / "aim-matrix-flash.json.gz"
META = {"sessionId": "s-1", "projectHash": "ab12", "startTime": "2026-06-07T12:00:00.000Z", "kind": "main"}


def roles(t: Transcript) -> list[str]:
    return [m["role"] for m in t.messages]


def write_lines(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def user(id: str, content: Any) -> dict[str, Any]:
    return {"id": id, "timestamp": "2026-06-07T12:00:01.000Z", "type": "user", "content": content}


def gemini(id: str, content: Any = "", calls: list[dict[str, Any]] | None = None, **more: Any) -> dict[str, Any]:
    m = {"id": id, "timestamp": "2026-06-07T12:00:02.000Z", "type": "gemini", "content": content, **more}
    if calls is not None:
        m["toolCalls"] = calls
    return m


def call(id: str, name: str, args: dict[str, Any], result: Any = None, status: str = "success") -> dict[str, Any]:
    c: dict[str, Any] = {"id": id, "name": name, "args": args, "status": status}
    if result is not None:
        c["result"] = result
    return c


def response(id: str, name: str, **body: str) -> dict[str, Any]:
    return {"functionResponse": {"id": id, "name": name, "response": body}}


# -- a real session ----------------------------------------------------------------------------------


def test_a_real_legacy_session_is_read_as_gemini_cli_resumes_it() -> None:
    assert detect_format(REAL) == "gemini-cli"
    t = read_session(REAL)
    assert (t.format, t.harness, t.tool_names) == ("gemini-cli", "openai", "gemini-cli")
    assert t.session_id == "1f244a80-47f8-46f3-b289-71e6220f6304"
    assert t.cwd == "/home/kingb/aim_benchmarks/django_matrix_flash"  # from replace's "Successfully modified file:"
    # 87 messages: 4 info and 2 error are not sent; the 79 gemini messages are 79 model calls
    assert (t.entries, calls(t)) == (87, 79)
    assert roles(t)[:3] == ["user", "user", "assistant"]  # the first "hello" got an API error, no reply
    results = collections.Counter(m["tool_call_id"] for m in t.messages if m["role"] == "tool")
    assert sum(results.values()) == 78 and max(results.values()) == 1
    assert not check_pairs(OPENAI_PAIRING, t.messages)[0]


def test_a_real_session_replays_with_every_frame_verified_and_its_edits_counted(db) -> None:
    (t,) = read_sessions(REAL)
    r = replay_transcript(t, Session.open(db, "gem", harness=t.harness, workspace=t.cwd), verify="all")
    assert (r.turns, r.orphaned_tool_results) == (79, 0)
    assert r.frames_verified == r.frames_checked == r.frames == 79
    assert r.edits_total == 9  # its replace calls
    assert r.edits_with_target_active >= 7 and r.stale_file_views_assembled == 0
    assert r.tokens_assembled < r.tokens_full


# -- what is sent: the resume rules ---------------------------------------------------------------------


def test_a_legacy_file_drops_what_resume_does_not_send(tmp_path: Path) -> None:
    doc = {
        **META,
        "messages": [
            {"id": "i", "type": "info", "content": "Model set to gemini-3-flash"},
            user("c", "/model set x"),  # a command
            {"id": "e", "type": "error", "content": "Usage: /model set <model-name>"},
            user("h", "?"),
            user("x", [{"text": "<session_context>\nThis is the Gemini CLI."}]),
            user("u", "fix the bug"),
            gemini(
                "g1",
                "Looking.",
                [call("r1", "read_file", {"file_path": "a.py"}, "x = 1\n")],  # a string result
                thoughts=[{"subject": "Plan", "description": "read a.py first", "timestamp": "t"}],
            ),
            {"id": "w", "type": "warning", "content": "careful"},
            gemini("g2", "", thoughts=[{"subject": "Hmm", "description": "thinking only", "timestamp": "t"}]),
            gemini("g3", "Done."),
        ],
    }
    p = tmp_path / "session-2026-06-07T12-00-s1.json"
    p.write_text(json.dumps(doc, indent=2))
    t = read_session(p)
    assert t.format == "gemini-cli" and calls(t) == 3  # a reply of thoughts alone was a call too
    assert roles(t) == ["user", "user", "assistant", "tool", "assistant", "assistant"]
    # the session's context is sent at the head of every call (a resume sends one made anew)
    assert [m["content"] for m in t.messages[:2]] == ["<session_context>\nThis is the Gemini CLI.", "fix the bug"]
    assert t.messages[2]["content"] == "Looking."  # the thought summary is not sent
    assert t.messages[2]["tool_calls"][0]["function"] == {"name": "read_file", "arguments": '{"file_path": "a.py"}'}
    assert t.messages[3] == {"role": "tool", "tool_call_id": "r1", "content": "x = 1\n"}
    assert t.messages[4]["content"] is None and "tool_calls" not in t.messages[4]


def test_a_failed_call_is_an_error_result_and_an_unanswered_call_is_dropped(tmp_path: Path) -> None:
    failed = response("e1", "replace", error="Failed to edit, 0 occurrences found for old_string in a.py.")
    records = [
        META,
        user("u", "go"),
        gemini(
            "g1",
            calls=[
                call("e1", "replace", {"file_path": "a.py", "old_string": "x", "new_string": "y"}, [failed], "error"),
                call("c1", "run_shell_command", {"command": "sleep 99"}, status="cancelled"),  # no result
            ],
        ),
        user("u2", "ok"),
        gemini("g2", "Bye."),
    ]
    t = read_session(write_lines(tmp_path / "s.jsonl", records))
    assert roles(t) == ["user", "assistant", "tool", "user", "assistant"]
    assert [c["id"] for c in t.messages[1]["tool_calls"]] == ["e1"]
    assert t.messages[2]["is_error"] is True and t.messages[2]["content"].startswith("Failed to edit")


def test_content_with_function_calls_is_the_turn_as_it_is(tmp_path: Path) -> None:
    parts = [
        {"thought": True, "text": "**Plan** look"},
        {"text": "Listing."},
        {"functionCall": {"id": "l1", "name": "list_directory", "args": {"dir_path": "."}}},
    ]
    records = [
        META,
        user("u", "go"),
        gemini(
            "g1",
            parts,
            [call("l1", "list_directory", {"dir_path": "."}, [response("l1", "list_directory", output="a.py")])],
        ),
    ]
    t = read_session(write_lines(tmp_path / "s.jsonl", records))
    assert roles(t) == ["user", "assistant", "tool"]
    assert t.messages[1]["content"] == "Listing." and len(t.messages[1]["tool_calls"]) == 1


# -- the file: JSON lines as loadConversationRecord reads them --------------------------------------------


def test_a_message_written_again_keeps_its_place_and_its_last_copy(tmp_path: Path) -> None:
    records = [
        META,
        {"$set": {"messages": [], "lastUpdated": "t"}},
        user("u", "go"),
        gemini("g1", "", thoughts=[{"subject": "s", "description": "d", "timestamp": "t"}]),  # while it streamed
        {"$set": {"lastUpdated": "t2"}},
        gemini(
            "g1",
            "Reading.",
            [call("r1", "read_file", {"file_path": "a.py"}, [response("r1", "read_file", output="a")])],
        ),
        user("u2", "thanks"),
        gemini("g2", "You're welcome."),
    ]
    t = read_session(write_lines(tmp_path / "s.jsonl", records))
    assert roles(t) == ["user", "assistant", "tool", "user", "assistant"]
    assert t.messages[1]["content"] == "Reading." and t.entries == len(records)


def test_a_checkpoint_replaces_every_message_before_it(tmp_path: Path) -> None:
    records = [
        META,
        user("u1", "first task"),
        gemini("g1", "Done one."),
        {"$set": {"messages": [user("s", "<state_snapshot>summary</state_snapshot>"), gemini("g0", "Got it.")]}},
        user("u2", "second task"),
        gemini("g2", "Done two."),
    ]
    t = read_session(write_lines(tmp_path / "s.jsonl", records))
    assert [m["content"] for m in t.messages] == [
        "<state_snapshot>summary</state_snapshot>",
        "Got it.",
        "second task",
        "Done two.",
    ]


@pytest.mark.parametrize(("to", "left"), [("u2", ["first", "One."]), ("missing", [])])
def test_a_rewind_drops_its_message_and_every_one_after_it(tmp_path: Path, to: str, left: list[str]) -> None:
    records = [META, user("u1", "first"), gemini("g1", "One."), user("u2", "second"), gemini("g2", "Two.")]
    records += [{"$rewindTo": to}]
    t = read_session(write_lines(tmp_path / "s.jsonl", records))
    assert [m["content"] for m in t.messages] == left


def test_a_result_recorded_twice_is_replayed_once(tmp_path: Path) -> None:
    """v0.44+ records each batch of results as a user message too (gemini-cli #29365)."""
    r1 = response("r1", "read_file", output="x = 1")
    r2 = response("r2", "read_file", output="y = 2")
    records = [
        META,
        user("u", "read both"),
        gemini("g1", calls=[call("r1", "read_file", {"file_path": "a.py"}, [r1])]),
        user("d1", [r1]),  # the same result again
        gemini("g2", calls=[call("r2", "read_file", {"file_path": "b.py"})]),  # its result only in the user message
        user("d2", [r2]),
        gemini("g3", "Both read."),
    ]
    t = read_session(write_lines(tmp_path / "s.jsonl", records))
    assert roles(t) == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [m["tool_call_id"] for m in t.messages if m["role"] == "tool"] == ["r1", "r2"]


# -- detection and the wrong shape ----------------------------------------------------------------------------


def test_detected_by_its_metadata_line_or_a_set_record_not_as_claude_code(tmp_path: Path) -> None:
    assert detect_format(write_lines(tmp_path / "a.jsonl", [META, user("u", "hi")])) == "gemini-cli"
    assert detect_format(write_lines(tmp_path / "b.jsonl", [{"$set": {"lastUpdated": "t"}}, META])) == "gemini-cli"
    claude = {"type": "user", "sessionId": "x", "uuid": "u1", "message": {"role": "user", "content": "hi"}}
    assert detect_format(write_lines(tmp_path / "c.jsonl", [claude])) == "claude-code"


def test_json_lines_without_a_metadata_line_are_refused(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "s.jsonl", [{"$set": {"lastUpdated": "t"}}, gemini("g", "hi")])
    with pytest.raises(InputError, match=r"s\.jsonl: 2 JSON lines but no metadata line .*not a Gemini CLI session"):
        read_session(p)


def test_a_document_of_another_shape_is_named_for_what_it_holds(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"sessionId": "s", "messages": [{"type": "user"}]}, indent=2))
    with pytest.raises(InputError, match=r"one JSON object with keys \['messages', 'sessionId'\]: not a session"):
        read_session(p)
    with pytest.raises(InputError, match=r"\['messages', 'sessionId'\]: not a Gemini CLI session"):
        read_session(p, "gemini-cli")


def test_a_message_of_an_unknown_type_is_named_with_its_line(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "s.jsonl", [META, user("u", "hi"), {"id": "m", "type": "robot", "content": "x"}])
    with pytest.raises(InputError, match=r"s\.jsonl:3: message 'm' has unknown type 'robot'"):
        read_session(p)


# -- sub-agents ------------------------------------------------------------------------------------------------


def test_sub_agents_beside_the_file_are_sessions_of_their_own(tmp_path: Path) -> None:
    main = write_lines(tmp_path / "session-2026-06-07T12-00-s-1.jsonl", [META, user("u", "go"), gemini("g", "Ok.")])
    (tmp_path / "s-1").mkdir()
    sub_meta = {**META, "sessionId": "sub-7", "kind": "subagent", "directories": ["/work/app"]}
    write_lines(tmp_path / "s-1" / "sub-7.jsonl", [sub_meta, user("u", "look around"), gemini("g", "Seen.")])
    main_t, sub = read_sessions(main)
    assert (main_t.label, sub.label, sub.session_id, sub.cwd) == (None, "sub-7", "sub-7", "/work/app")
    assert calls(sub) == 1
    assert len(read_sessions(main, sidechains=False)) == 1


@pytest.mark.parametrize(("name", "text"), [("sub-8.jsonl", ""), ("sub-8.json", '{"sessionId": "sub-8", "mess')])
def test_a_sub_agents_file_that_cannot_be_read_is_left_out_with_a_note(tmp_path: Path, name: str, text: str) -> None:
    # one sub-agent's file left empty or cut by a crash refused the whole read: the main session
    # and every other sub-agent with it
    main = write_lines(tmp_path / "session-2026-06-07T12-00-s-1.jsonl", [META, user("u", "go"), gemini("g", "Ok.")])
    (tmp_path / "s-1").mkdir()
    sub_meta = {**META, "sessionId": "sub-7", "kind": "subagent"}
    write_lines(tmp_path / "s-1" / "sub-7.jsonl", [sub_meta, user("u", "look around"), gemini("g", "Seen.")])
    (tmp_path / "s-1" / name).write_text(text)
    main_t, sub = read_sessions(main)
    assert (main_t.label, sub.label, calls(main_t), calls(sub)) == (None, "sub-7", 1, 1)
    (note,) = main_t.notes
    assert note.startswith(f"a sub-agent's file was left out: {tmp_path / 's-1' / name}: ")


# -- read_file's output ------------------------------------------------------------------------------------------


def test_a_part_of_a_file_is_read_where_gemini_cli_says_it_is() -> None:
    names = preset("gemini-cli")
    out = (
        "\nIMPORTANT: The file content has been truncated.\n"
        "Status: Showing lines 3-4 of 9 total lines.\n"
        "Action: To read more of the file, you can use the 'start_line' and 'end_line' parameters in a "
        "subsequent 'read_file' call. For example, to read the next section of the file, use start_line: 5.\n\n"
        "--- FILE CONTENT (truncated) ---\nc = 3\nd = 4"
    )
    args = {"file_path": "a.py", "start_line": 3, "end_line": 4}
    op = file_op(names.role("read_file"), args, out)
    assert op is not None and (op.text, op.first_line, op.total_lines) == ("c = 3\nd = 4", 3, 9)
    old = "[File content truncated: showing lines 11-12 of 40 total lines. Use offset/limit parameters to view more.]"
    old += "\nk\nl"  # before August 2025
    op = file_op("read", {"absolute_path": "/r/a.py", "offset": 10, "limit": 2}, old)
    assert op is not None and (op.path, op.text, op.first_line, op.total_lines) == ("/r/a.py", "k\nl", 11, 40)
    masked = (
        "<tool_output_masked>\n{...}\nOutput too large. Full output available at: /tmp/x.txt\n</tool_output_masked>"
    )
    assert file_op("read", args, masked) is None
    assert file_op("read", args, "Binary content provided (1 item(s)).") is None
    assert names.role("replace") == "edit" and names.role("write_file") == "write"


@pytest.mark.parametrize(
    "output",
    [
        "Successfully modified file: /work/my app/src/a b.py (1 replacements).",
        "Successfully modified file: /work/my app/src/a b.py (2 replacements). User modified the `new_string` to: y",
        "Successfully overwrote file: /work/my app/src/a b.py.",
        "Successfully created and wrote to new file: /work/my app/src/a b.py. User modified the `content` to: z",
    ],
)
def test_the_session_directory_may_hold_spaces(tmp_path: Path, output: str) -> None:
    """The session's directory is told from a file tool's message naming, absolutely, a file its
    call named relatively; the path ended at its first space, so a directory with one
    (``/work/my app``) was not found, and the session's relative paths had no directory."""
    name = "replace" if "modified" in output else "write_file"
    records = [
        META,
        user("u", "rename x"),
        gemini("g1", calls=[call("e1", name, {"file_path": "src/a b.py"}, [response("e1", name, output=output)])]),
        gemini("g2", "Done."),
    ]
    (t,) = read_sessions(write_lines(tmp_path / "s.jsonl", records))
    assert t.cwd == "/work/my app"


def test_an_edit_after_a_read_has_its_file_in_context(db, tmp_path: Path) -> None:
    records = [
        META,
        user("u", "rename x"),
        gemini(
            "g1",
            calls=[call("r1", "read_file", {"file_path": "a.py"}, [response("r1", "read_file", output="x = 1\n")])],
        ),
        gemini(
            "g2",
            calls=[
                call(
                    "e1",
                    "replace",
                    {"file_path": "a.py", "old_string": "x = 1", "new_string": "y = 1"},
                    [response("e1", "replace", output="Successfully modified file: /work/app/a.py (1 replacements).")],
                )
            ],
        ),
        gemini("g3", "Renamed."),
    ]
    (t,) = read_sessions(write_lines(tmp_path / "s.jsonl", records))
    assert t.cwd == "/work/app"
    r = replay_transcript(t, Session.open(db, "edit", harness=t.harness, workspace=t.cwd))
    assert (r.turns, r.edits_total, r.edits_with_target_active, r.edits_with_target_text_shown) == (3, 1, 1, 1)
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.frames == 3
    (f,) = [o for o in Session.open(db, "edit").view.objects.values() if o.kind == "file"]
    assert f.content == "y = 1\n"
