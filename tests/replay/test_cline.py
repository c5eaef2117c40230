"""Cline's task history (``api_conversation_history.json``), written by hand as Cline writes it
with native tool calls (``tool_use`` blocks answered by text blocks: ``[read_file for 'a.py']
Result:``): detection beside plain Anthropic lists, what Cline sends of each message, each result
paired with its call, its file tools' outputs read as file versions, and a session replayed end
to end with every frame verified."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.harness.anthropic import ANTHROPIC_PAIRING
from context_os.harness.file_ops import FileOp, edit_target, file_op, search_replace_blocks
from context_os.harness.pairing import check_pairs
from context_os.harness.toolnames import preset, preset_for
from context_os.harness.virtual_files import file_key
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import detect_format, read_session

CWD = "/work/app"
ENV = f"<environment_details>\n# Current Working Directory ({CWD}) Files\na.py\n</environment_details>"


def use(id: str, name: str, **input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": input, "call_id": id}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": [*blocks, text(ENV)], "ts": 1777073160794}


def reply(*blocks: dict[str, Any]) -> dict[str, Any]:
    info = {"modelId": "claude-sonnet-4-5", "providerId": "anthropic", "mode": "act"}
    return {"role": "assistant", "content": list(blocks), "modelInfo": info, "metrics": {}, "ts": 1777073173494}


def numbered(*lines: str) -> str:
    return "\n".join(f"{k} | {line}" for k, line in enumerate(lines, 1)) + f"\n\n(File has {len(lines)} lines total.)"


SAVED = (
    "The content was successfully saved to {path}.\n\nHere is the full, updated content of the file that was "
    'saved:\n\n<final_file_content path="{path}">\n{text}\n</final_file_content>\n\nIMPORTANT: For any future '
    "changes to this file, use the final_file_content shown above as your reference."
)
DIFF = "------- SEARCH\n    return 1\n=======\n    return 2\n+++++++ REPLACE"


def session() -> list[dict[str, Any]]:
    """A task: read a file, edit it, run its tests, finish."""
    return [
        user(text("<task>\nMake f return 2.\n</task>")),
        reply(text("Reading it."), use("toolu_1", "read_file", path="a.py")),
        user(text("[read_file for 'a.py'] Result:\n" + numbered("def f():", "    return 1"))),
        reply(use("toolu_2", "replace_in_file", path="a.py", diff=DIFF)),
        user(
            text("[replace_in_file for 'a.py'] Result:\n" + SAVED.format(path="a.py", text="def f():\n    return 2\n"))
        ),
        reply(use("toolu_3", "execute_command", command="pytest -q", requires_approval=False)),
        user(text("[execute_command for 'pytest -q'] Result:\nCommand executed.\nOutput:\n1 passed")),
        reply(use("toolu_4", "attempt_completion", result="f returns 2.")),
    ]


def write(path: Path, messages: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(messages, indent=2))
    return path


# --- detection ---------------------------------------------------------------------------------------


def test_a_cline_history_is_told_from_plain_anthropic_messages(tmp_path: Path) -> None:
    assert detect_format(write(tmp_path / "cline.json", session())) == "cline"
    plain = [
        {"role": "user", "content": "Read a.py"},
        {"role": "assistant", "content": [use("t1", "read_file", path="a.py")]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x = 1"}]},
        {"role": "assistant", "content": "Done."},
    ]
    assert detect_format(write(tmp_path / "plain.json", plain)) == "anthropic"
    # Cline's words, but answering no call of the message before: not Cline's
    quoted = [*plain[:3], {"role": "user", "content": [text("[read_file for 'a.py'] Result:\nx = 1")]}]
    assert detect_format(write(tmp_path / "quoted.json", [*quoted, plain[3]])) == "anthropic"
    other = [plain[0], plain[1], {"role": "user", "content": [text("[list_files for '.'] Result:\na.py")]}]
    assert detect_format(write(tmp_path / "other.json", other)) == "anthropic"


def test_results_cline_sent_as_tool_result_blocks_are_cline_s_too(tmp_path: Path) -> None:
    """Where Cline knew the call's id, its result is a ``tool_result`` block, worded the same."""
    messages = session()
    messages[2] = user({"type": "tool_result", "tool_use_id": "toolu_1", "content": messages[2]["content"][0]["text"]})
    t = read_session(write(tmp_path / "c.json", messages))
    assert t.format == "cline" and t.messages[2]["content"][0]["tool_use_id"] == "toolu_1"


@pytest.mark.timeout(120)
def test_a_text_repeating_the_working_directory_heading_is_read_in_linear_time(tmp_path: Path) -> None:
    """The working directory was found by a regex that looked from each ``# Current Working
    Directory (`` heading to the end of its line: a user's text holding a long line of them (a
    log pasted into the task) took minutes to hours before the replay began. The directory is
    still the one Cline named."""
    messages = session()
    line = "# Current Working Directory (" * 20_000
    messages[0] = user(text(f"<task>\nWhy does the log say this?\n{line}\n</task>"))
    t = read_session(write(tmp_path / "c.json", messages))
    assert t.format == "cline" and t.cwd == CWD


# --- what Cline sends ---------------------------------------------------------------------------------


def test_each_result_answers_its_call_and_cline_s_own_fields_are_not_sent(tmp_path: Path) -> None:
    path = write(tmp_path / "tasks" / "1777073160794" / "api_conversation_history.json", session())
    t = read_session(path)
    assert (t.format, t.harness, t.tool_names) == ("cline", "anthropic", "cline")
    assert (t.session_id, t.cwd, t.entries) == ("1777073160794", CWD, 8)
    assert all(set(m) == {"role", "content"} for m in t.messages)  # no ts, modelInfo, metrics
    assert t.messages[1]["content"][1] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "read_file",
        "input": {"path": "a.py"},
    }
    first, env = t.messages[2]["content"]
    assert first == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "[read_file for 'a.py'] Result:\n" + numbered("def f():", "    return 1"),
    }
    assert env == text(ENV)
    assert check_pairs(ANTHROPIC_PAIRING, t.messages)[0] == []


def test_results_pair_by_name_then_order_and_come_first(tmp_path: Path) -> None:
    messages = [
        user(text("<task>\nLook around.\n</task>")),
        reply(
            use("c1", "list_files", path="src"),
            use("c2", "read_file", path="a.py"),
            use("c3", "use_subagents", prompt_1="Survey the tests"),
        ),
        {
            "role": "user",
            "content": [
                text("[read_file for 'a.py'] Result:\n" + numbered("x = 1")),
                text("[list_files for 'src'] Result:\nmain.py"),
                text("[subagents] Result:\nSubagent results:\nTotal: 1"),  # names no call: the first still open
                text("\n\n# TODO LIST UPDATE REQUIRED"),
            ],
        },
        reply(text("Done.")),
    ]
    t = read_session(write(tmp_path / "c.json", messages))
    content = t.messages[2]["content"]
    assert [b.get("tool_use_id") for b in content] == ["c1", "c2", "c3", None]
    assert content[0]["content"] == "[list_files for 'src'] Result:\nmain.py"
    assert content[3] == text("\n\n# TODO LIST UPDATE REQUIRED")


def test_a_call_cline_did_not_run_is_answered_by_what_it_said_and_one_never_answered_is_dropped(tmp_path: Path) -> None:
    skipped = "Skipping tool due to user rejecting a previous tool. [write_to_file for 'b.py']"
    messages = [
        user(text("<task>\nWrite two files.\n</task>")),
        reply(
            use("w1", "write_to_file", path="a.py", content="a\n"),
            use("w2", "write_to_file", path="b.py", content="b\n"),
        ),
        user(text("[write_to_file for 'a.py'] Result:\nThe user denied this operation."), text(skipped)),
        reply(text("Shall I?"), use("q1", "ask_followup_question", question="Which file?")),
        user(text("[TASK RESUMPTION] This task was interrupted 3 days ago.")),  # the question never answered
        reply(use("q2", "ask_followup_question", question="Which file?")),
        user(text("<answer>\nb.py\n</answer>"), {"type": "image", "source": {"type": "base64", "data": "AA"}}),
        reply(text("Thinking it over."), {"type": "thinking", "thinking": "no signature"}),
    ]
    t = read_session(write(tmp_path / "c.json", messages))
    assert [b["tool_use_id"] for b in t.messages[2]["content"][:2]] == ["w1", "w2"]
    assert t.messages[2]["content"][1]["content"] == skipped
    assert t.messages[3]["content"] == [text("Shall I?")]  # its call dropped
    assert t.messages[4]["content"][0]["type"] == "text"
    assert t.messages[6]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "q2",
        "content": "<answer>\nb.py\n</answer>",
    }
    assert t.messages[6]["content"][1]["type"] == "image"
    assert t.messages[7]["content"] == [text("Thinking it over.")]  # a thinking block without signature is not sent
    assert check_pairs(ANTHROPIC_PAIRING, t.messages)[0] == []


def test_the_session_directory_is_the_last_one_named(tmp_path: Path) -> None:
    moved = (
        "[TASK RESUMPTION] This task was interrupted 3 days ago. The current working directory is now 'c:/Apps/New'."
    )
    messages = [*session()[:3], {"role": "user", "content": [text(moved)]}, reply(text("Going on."))]
    assert read_session(write(tmp_path / "c.json", messages)).cwd == "c:/Apps/New"


# --- its file tools ---------------------------------------------------------------------------------


def read_op(output: str, **args: Any) -> FileOp | None:
    return file_op("read", {"path": "a.py", **args}, output)


def test_a_read_is_its_lines_without_their_labels_and_notes() -> None:
    op = read_op("[read_file for 'a.py'] Result:\n" + numbered("def f():", "    return 1"))
    assert op is not None and (op.text, op.first_line, op.total_lines) == ("def f():\n    return 1", 1, 2)
    part = (
        "[read_file for 'a.py'] Result:\n5 | e\n6 | f\n\n"
        "(Showing lines 5-6 of 9 total. Use start_line=7 to continue reading.)"
    )
    op = read_op(part, start_line="5", end_line="6")
    assert op is not None and (op.text, op.first_line, op.total_lines) == ("e\nf", 5, 9)
    again = (
        "[read_file for 'a.py'] Result:\n[File already read] The file 'a.py' was already read earlier in this "
        "conversation. Returning content:\n"
    )
    op = read_op(again + numbered("x"))
    assert op is not None and (op.text, op.total_lines) == ("x", 1)
    # before line labels (2025): the text alone, to the end of the file
    op = read_op("[read_file for 'a.py'] Result:\nx = 1\ny = 2\n")
    assert op is not None and (op.text, op.first_line, op.total_lines) == ("x = 1\ny = 2", 1, 2)
    cut = (
        "[read_file for 'a.py'] Result:\n1 | x\n2 | y\n\n---\n\n"
        "[FILE TRUNCATED: This content is 2 MB but only the first 1 MB is shown.]"
    )
    op = read_op(cut)
    assert op is not None and (op.text, op.total_lines) == ("x\ny", None)


@pytest.mark.parametrize(
    "output",
    [
        "[read_file for 'a.py'] Result:\nThe tool execution failed with the following error:\n<error>\n"
        "Error reading file: ENOENT\n</error>",
        "[read_file for 'a.py'] Result:\nThe user denied this operation.",
        "[read_file for 'a.py'] Result:\n(tool did not return anything)",
        "[read_file for 'a.py'] Result:\n1 | x\n3 | y\n\n(File has 3 lines total.)",  # labels out of order
    ],
)
def test_a_read_that_shows_no_file_text_is_none(output: str) -> None:
    assert read_op(output) is None


def test_a_write_is_the_file_cline_shows_after_it() -> None:
    saved = SAVED.format(path="a.py", text="x = 1\n")
    op = file_op(
        "write",
        {"absolutePath": "/work/app/a.py", "content": "x=1\n"},
        "[write_to_file for '/work/app/a.py'] Result:\n" + saved,
    )
    assert op is not None and (op.kind, op.path, op.text) == ("write", "/work/app/a.py", "x = 1")  # as formatted
    op = file_op(
        "write",
        {"path": "a.py", "content": "x\n"},
        "[write_to_file for 'a.py'] Result:\nThe content was successfully saved to a.py.",
    )
    assert op is not None and op.text == "x"
    denied = "[write_to_file for 'a.py'] Result:\nThe user denied this operation. The file was not updated."
    assert file_op("write", {"path": "a.py", "content": "x\n"}, denied) is None
    skipped = "Skipping tool due to user rejecting a previous tool. [write_to_file for 'a.py']"
    assert file_op("write", {"path": "a.py", "content": "x\n"}, skipped) is None


def test_a_windows_file_s_line_breaks_are_read_as_its_read_shows_them() -> None:
    saved = SAVED.format(path="a.py", text="x = 1\r\ny = 2\r\n")
    op = file_op("write", {"path": "a.py", "content": "x = 1\ny = 2\n"}, "[write_to_file for 'a.py'] Result:\n" + saved)
    assert op is not None and op.text == "x = 1\ny = 2"
    op = file_op("edit", {"path": "a.py", "diff": DIFF}, "[replace_in_file for 'a.py'] Result:\n" + saved)
    assert op is not None and op.more[0].text == "x = 1\ny = 2"


def test_replace_in_file_blocks_are_old_new_pairs_in_both_marker_styles() -> None:
    assert search_replace_blocks(DIFF) == [("    return 1", "    return 2")]
    legacy = "<<<<<<< SEARCH\na\nb\n=======\nc\n>>>>>>> REPLACE\n<<<<<<< SEARCH\nd\n=======\n>>>>>>> REPLACE"
    assert search_replace_blocks(legacy) == [("a\nb", "c"), ("d\n", "")]  # a deletion takes its line break
    roo = "<<<<<<< SEARCH\n:start_line:3\n-------\nold\n=======\nnew\n>>>>>>> REPLACE"
    assert search_replace_blocks(roo) == [("old", "new")]
    assert search_replace_blocks("------- SEARCH\nx\n=======\ny") == [("x", "y")]  # Cline ends a block at the end
    assert search_replace_blocks("no blocks") is None
    op = edit_target({"absolutePath": "/w/a.py", "diff": DIFF})
    assert op is not None and (op.path, op.edits) == ("/w/a.py", [("    return 1", "    return 2")])


def test_an_edit_is_its_blocks_then_the_file_as_cline_shows_it() -> None:
    output = "[replace_in_file for 'a.py'] Result:\n" + SAVED.format(path="a.py", text="def f():\n    return 2\n")
    op = file_op("edit", {"path": "a.py", "diff": DIFF}, output)
    assert op is not None and op.edits == [("    return 1", "    return 2")]
    (after,) = op.more
    assert (after.kind, after.text, after.first_line, after.total_lines) == ("read", "def f():\n    return 2", 1, 2)


def test_a_failed_edit_changes_nothing() -> None:
    failed = (
        "[replace_in_file for 'a.py'] Result:\nThe tool execution failed with the following error:\n<error>\n"
        "The SEARCH block:\n    return 1\n...does not match anything in the file.\n\nThis is likely because the SEARCH "
        "block content doesn't match exactly with what's in the file...\n\nThe file was reverted to its original "
        'state:\n\n<file_content path="a.py">\ndef f():\n    return 3\n</file_content>\n</error>'
    )
    assert file_op("edit", {"path": "a.py", "diff": DIFF}, failed) is None
    denied = (
        "[replace_in_file for 'a.py'] Result:\nThe user denied this operation. The file was not updated, and "
        "maintains its original contents."
    )
    assert file_op("edit", {"path": "a.py", "diff": DIFF}, denied) is None


def test_roo_code_s_insert_content_inserts_before_its_line() -> None:
    op = edit_target({"path": "a.py", "line": 2, "content": "y"})
    assert op is not None and op.insert == (1, "y")
    op = edit_target({"path": "a.py", "line": 0, "content": "z"})
    assert op is not None and op.insert == (-1, "z")


def test_the_cline_preset_and_windows_paths() -> None:
    names = preset("cline")
    assert [names.role(n) for n in ("read_file", "write_to_file", "replace_in_file", "execute_command")] == [
        "read",
        "write",
        "edit",
        "bash",
    ]
    assert (names.role("search_files"), names.role("list_files"), names.role("apply_diff")) == ("grep", "ls", "edit")
    assert names.role("attempt_completion") is None
    assert preset_for({"read_file", "write_to_file", "replace_in_file"}) == "cline"
    # a Windows session names one file with either separator, relative or not
    assert file_key("src\\a.ts", "c:/Apps/M") == file_key("C:\\Apps\\M\\src\\a.ts", "c:/Apps/M") == "c:/Apps/M/src/a.ts"
    assert file_key("src/a.ts", "/work") == "/work/src/a.ts"


# --- end to end ---------------------------------------------------------------------------------------


def test_a_session_replays_with_the_edited_file_in_context_and_every_frame_verified(tmp_path: Path, db) -> None:
    t = read_session(write(tmp_path / "c.json", session()))
    r = replay_transcript(t, Session.open(db, "cline", harness=t.harness, workspace=t.cwd), verify="all")
    assert (r.turns, r.frames, r.frames_verified, r.orphaned_tool_results) == (4, 4, 4, 0)
    assert (r.edits_total, r.edits_with_target_active, r.edits_with_target_text_shown) == (1, 1, 1)
    assert (r.files, r.stale_file_views_assembled) == (1, 0)
    (f,) = [o for o in Session.open(db, "cline").view.objects.values() if o.kind == "file"]
    assert f.content == "def f():\n    return 2"
    assert f.meta["path"] == "/work/app/a.py" or f.meta.get("abs_path") == "/work/app/a.py"


def test_roo_code_s_read_is_its_lines_without_their_labels() -> None:
    op = file_op("read", {"path": "a.py"}, "File: a.py\n 9 | i\n10 | j")
    assert op is not None and (op.path, op.text, op.first_line, op.total_lines) == ("a.py", "i\nj", 9, 10)
    part = (
        "File: a.py\nIMPORTANT: File content truncated.\n\tStatus: Showing lines 1-2 of 5 total lines.\n"
        "\tTo read more: Use the read_file tool with offset=3 and limit=2.\n\t\n\t1 | a\n2 | b"
    )
    op = file_op("read", {"path": "a.py", "limit": 2}, part)
    assert op is not None and (op.text, op.total_lines) == ("a\nb", 5)
    for note in ("File: a.py\nError: Error reading file: ENOENT", "File: a.py\nNote: File is empty"):
        assert file_op("read", {"path": "a.py"}, note) is None
    assert file_op("read", {"path": "a.py"}, "File: a.py\n1 | " + "x" * 1997 + "...") is None  # a line cut short
