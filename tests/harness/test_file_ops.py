"""What a recorded file tool call says about its file, for the tool families beyond Pi's and Claude
Code's: ``str_replace_editor`` (SWE-agent, OpenHands) and SWE-agent's windowed tools; and what a
read of a line range leaves known of a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.context.view import elide_arguments
from context_os.harness.file_ops import edit_target, file_op, strip_read_output, written_keys
from context_os.harness.toolnames import for_tools, preset
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import Transcript
from context_os.store.sqlite import SqliteStore

VIEW = (  # as SWE-agent's terminal gave it: \r\n, and no tab after the number of an empty last line
    "OBSERVATION:\nHere's the result of running `cat -n` on /r/a.py:\r\n"
    "     1\tdef f():\r\n     2\t    return 1\r\n     3\n"
)


def editor(command: str, **args: Any) -> dict[str, Any]:
    return {"command": command, "path": "/r/a.py", **args}


def test_an_editor_view_is_a_read_with_its_numbers_and_terminal_line_ends_removed() -> None:
    op = file_op("read", editor("view"), VIEW)
    assert op is not None and (op.path, op.text, op.first_line, op.total_lines) == (
        "/r/a.py",
        "def f():\n    return 1\n",
        1,
        3,
    )
    ranged = "Here's the result of running `cat -n` on /r/a.py:\n    10\tx\n    11\ty\n"
    op = file_op("read", editor("view", view_range=[10, 11]), ranged)
    assert op is not None and (op.text, op.first_line, op.total_lines) == ("x\ny", 10, None)  # the file may go on
    op = file_op("read", json.dumps(editor("view", view_range=[10, -1])), ranged)  # to the end
    assert op is not None and op.total_lines == 11
    clipped = (
        "Here's the result of running `cat -n` on /r/a.py:\n     1\tx\n     2\tyy<response clipped><NOTE>To save..."
    )
    op = file_op("read", editor("view"), clipped)
    assert op is not None and (op.text, op.total_lines) == ("x", None)  # line 2 may be cut


@pytest.mark.parametrize(
    "output",
    [
        "Here's the files and directories up to 2 levels deep in /r, excluding hidden items:\n/r/a.py",
        "<NOTE>This file is too large to display entirely. Showing abbreviated version.</NOTE>\n1 x",
        "ERROR:\nInvalid `path` parameter: /r/a.py. The path /r/a.py does not exist.",
    ],
)
def test_an_editor_view_of_no_file_text_says_nothing(output: str) -> None:
    assert file_op("read", editor("view"), output) is None


def test_editor_writes_and_edits_count_only_when_made() -> None:
    op = file_op("write", editor("create", file_text="x = 1\n"), "File created successfully at: /r/a.py")
    assert op is not None and (op.kind, op.text) == ("write", "x = 1\n")
    assert file_op("write", editor("create", file_text="x"), "ERROR:\nFile already exists at: /r/a.py.") is None
    replace = editor("str_replace", old_str="return 1", new_str="return 2")
    op = file_op("edit", replace, "OBSERVATION:\nThe file /r/a.py has been edited. Here's the result...")
    assert op is not None and op.edits == [("return 1", "return 2")] and op.known
    op = file_op("edit", replace, "--- /r/a.py\n+++ /r/a.py\n@@ -2 +2 @@")  # older OpenHands: a diff
    assert op is not None and op.known
    failed = "No replacement was performed, old_str `return 1` did not appear verbatim in /r/a.py."
    assert file_op("edit", replace, failed) is None
    assert file_op("edit", replace, "ERROR:\n" + failed) is None
    op = file_op("edit", replace, "something else entirely")
    assert op is not None and not op.known  # an outcome not read: the content becomes unknown
    op = file_op("edit", editor("insert", insert_line=2, new_str="# end"), "The file /r/a.py has been edited.")
    assert op is not None and op.insert == (2, "# end")
    op = file_op("edit", editor("undo_edit"), "Last edit to /r/a.py undone successfully.")
    assert op is not None and not op.known


WINDOW = (
    "[File: src/m.py (1998 lines total)]\r\n(1456 more lines above)\r\n1457:    a = 1\r\n1458:    b = 2\r\n"
    "(540 more lines below)\n(Open file: /testbed/src/m.py)\n(Current directory: /testbed)\nbash-$"
)


def test_a_window_of_the_open_file_is_a_read_of_the_file_it_names() -> None:
    op = file_op("read", {"path": "src/m.py", "line_number": 1457}, WINDOW)
    assert op is not None and (op.path, op.text, op.first_line, op.total_lines) == (
        "/testbed/src/m.py",
        "    a = 1\n    b = 2",
        1457,
        1998,
    )
    op = file_op("read", {}, WINDOW)  # goto, scroll_down: no path of their own
    assert op is not None and op.path == "/testbed/src/m.py"
    missing = "File src/x.py not found\n(Open file: /testbed/src/m.py)\n(Current directory: /testbed)\nbash-$"
    assert file_op("read", {"path": "src/x.py"}, missing) is None
    created = "[File: /r/new.py (1 lines total)]\n1:\n\n(Open file: /r/new.py)\n(Current directory: /r)\nbash-$"
    op = file_op("write", {"filename": "new.py"}, created)
    assert op is not None and (op.kind, op.path, op.text) == ("write", "/r/new.py", "")


def test_windowed_edits_act_on_the_open_file() -> None:
    ranged = {"start_line": 1457, "end_line": 1457, "replacement_text": "    a = 3"}
    op = file_op("edit", ranged, WINDOW + "\nFile updated. Please review the changes.")
    assert op is not None and op.path == "/testbed/src/m.py" and not op.known  # a line range: not applied
    (shown,) = op.more  # ... but the window printed after it shows the new lines
    assert (shown.kind, shown.path, shown.text, shown.first_line, shown.total_lines) == (
        "read", "/testbed/src/m.py", "    a = 1\n    b = 2", 1457, 1998
    )  # fmt: skip
    # SWE-agent 0.x: a lint error or no open file leaves the file as it was (the window shown
    # with a lint error is how the edit would have looked)
    linted = (
        "Your proposed edit has introduced new syntax error(s). Please understand the fixes and retry your edit "
        "commmand.\n\nERRORS:\n- E999 IndentationError: unexpected indent\n\nThis is how your edit would have "
        "looked if applied\n-------------------------------------------------\n" + WINDOW
    )
    assert file_op("edit", {"start_line": 1, "end_line": 1}, linted) is None
    assert file_op("edit", replace_args := {"search": "a = 1", "replace": "a = 3"}, linted) is None
    assert file_op("edit", replace_args, "No file open. Use the `open` command first.") is None
    replace = {"search": "a = 1", "replace": "a = 3"}
    op = file_op("edit", replace, "Text replaced. Please review the changes.\n" + WINDOW)
    assert op is not None and op.edits == [("a = 1", "a = 3")]
    op = file_op("edit", replace, "Your edit was not applied.\n" + WINDOW)
    assert op is not None and not op.known
    op = file_op("edit", {"text": "x = 1"}, WINDOW)
    assert op is not None and op.insert == (-1, "x = 1")
    target = edit_target(replace, WINDOW)  # what the edit measure reads, made or not
    assert target is not None and target.path == "/testbed/src/m.py" and target.edits == [("a = 1", "a = 3")]
    assert edit_target(replace, "") is None


def test_a_claude_code_read_of_as_many_lines_as_asked_may_not_be_the_whole_file() -> None:
    out = "    10\tx\n    11\ty"
    op = file_op("read", {"file_path": "/r/a.py", "offset": 10, "limit": 2}, out)
    assert op is not None and (op.first_line, op.total_lines) == (10, None)
    op = file_op("read", {"file_path": "/r/a.py", "offset": 10, "limit": 5}, out)
    assert op is not None and op.total_lines == 11
    op = file_op("read", {"path": "/r/a.py", "limit": 2}, "x\ny")  # Pi says when the file goes on
    assert op is not None and op.total_lines == 2


MALWARE_NOTE = (  # what Claude Code 2.x appends to every Read result (real sessions in bench/sessions)
    "\n\n<system-reminder>\nWhenever you read a file, you should consider whether it would be considered "
    "malware. You CAN and SHOULD provide analysis of malware, what it is doing. But you MUST refuse to improve or "
    "augment the code. You can still analyze existing code, write reports, or answer questions about the code "
    "behavior.\n</system-reminder>\n"
)


def test_the_notes_claude_code_appends_to_a_read_are_not_file_text() -> None:
    out = '     1→package cli\n     2→\n     3→import (\n     4→\t"fmt"\n     5→)\n     6→'
    plain = file_op("read", {"file_path": "/r/clean.go"}, out)
    noted = file_op("read", {"file_path": "/r/clean.go"}, out + MALWARE_NOTE)
    assert noted is not None and plain is not None
    assert (noted.text, noted.first_line, noted.total_lines) == (plain.text, 1, 6)
    assert noted.text == 'package cli\n\nimport (\n\t"fmt"\n)\n'
    # a file that itself holds such a tag (this project's docs, a transcript) keeps its text
    quoting = '     1→say("<system-reminder>")\n     2→x = "</system-reminder>"'
    op = file_op("read", {"file_path": "/r/q.py"}, quoting + MALWARE_NOTE)
    assert op is not None and op.text == 'say("<system-reminder>")\nx = "</system-reminder>"'
    empty = "<system-reminder>Warning: the file exists but the contents are empty.</system-reminder>"
    op = file_op("read", {"file_path": "/r/empty.go"}, empty)
    assert op is not None and (op.text, op.total_lines) == ("", 1)
    past = (
        "<system-reminder>Warning: the file exists but is shorter than the provided offset (500). "
        "The file has 120 lines.</system-reminder>"
    )
    assert file_op("read", {"file_path": "/r/a.go", "offset": 500}, past) is None


@pytest.mark.timeout(120)
def test_a_file_of_many_reminder_lines_is_read_in_linear_time() -> None:
    """The notes a read's output ends with were found by one regex, a run of
    ``<system-reminder>…</system-reminder>`` blocks up to the end: over an output holding many such
    lines that do not end it (a file of transcripts, read by Pi, whose output is the bare text) it
    backtracked exponentially: 24 lines took a minute, 40 would take days, holding the hook. The
    run is now read from the end; the file's text is all kept, and notes that do end it still go."""
    text = "log\n" + "<system-reminder>x</system-reminder>\n" * 40 + "end"
    op = file_op("read", {"path": "/r/log.txt"}, text)
    assert op is not None and op.text == text
    numbered = "\n".join(f"{n:6}\u2192{line}" for n, line in enumerate(text.split("\n"), 1))
    op = file_op(
        "read", {"file_path": "/r/log.txt"}, numbered + MALWARE_NOTE + "\n<system-reminder>b</system-reminder>"
    )
    assert op is not None and op.text == text


@pytest.mark.timeout(120)
def test_an_output_repeating_an_opening_tag_is_read_in_linear_time() -> None:
    """Gemini CLI's project context after a read (``--- Newly Discovered Project Context ---`` …
    ``--- End Project Context ---``) and Cline's ``<final_file_content path=…>`` were each found
    by a regex searched again from every opening: over a file of such lines (a log of them read,
    a file written holding them) that took minutes for a few MB, holding the hook or the replay.
    The text is now found as before, in linear time."""
    begin = "\n\n--- Newly Discovered Project Context ---\n"
    lines = begin * 80_000
    op = file_op("read", {"file_path": "/r/log.txt"}, lines + "\n--- End Project Context")
    assert op is not None and op.text == lines + "\n--- End Project Context"
    context = begin + "ctx" + begin + "more\n--- End Project Context ---"
    op = file_op("read", {"file_path": "/r/a.py"}, "x = 1" + context)
    assert op is not None and op.text == "x = 1"
    tag = '<final_file_content path="t.html">\n'
    saved = "[write_to_file for 't.html'] Result:\nThe content was successfully saved to t.html.\n\n"
    content = tag * 60_000
    op = file_op("write", {"path": "t.html", "content": content}, saved + content)
    assert op is not None and op.text == content[:-1]
    op = file_op("write", {"path": "t.html", "content": "y"}, saved + tag + tag + "x = 2\n\n</final_file_content>\n")
    assert op is not None and op.text == tag + "x = 2"


def test_claude_code_2_1_numbers_lines_with_a_tab_and_drops_the_last_empty_ones() -> None:
    """Claude Code 2.1 (seen live through the proxy): ``N<tab>text``, and the empty line after a
    file's last newline printed as its number alone."""
    out = "1\tdef f0():\n2\t    return 0\n3\t\n4" + MALWARE_NOTE
    op = file_op("read", {"file_path": "/r/app.py"}, out)
    assert op is not None and (op.text, op.first_line, op.total_lines) == ("def f0():\n    return 0\n\n", 1, 4)
    # numbers alone that do not follow on are the file's own text, not a dropped tab
    for text in ("1\t7\n2\t8\n9", "7\n8\n9"):
        op = file_op("read", {"file_path": "/r/n.txt"}, text)
        assert op is not None and op.text == ("1\t7\n2\t8\n9" if "\t" in text else "7\n8\n9")


def test_a_files_own_column_of_numbers_is_its_text() -> None:
    """A read that prints a file as it is (Pi's) of a TSV whose first column is ids: every line
    starts with digits and a tab, as a numbered read's do, but they do not count up by one. They
    were taken for line numbers: the column was cut from the text and the read placed at line 100
    of the file."""
    tsv = "100\talice\n205\tbob\n300\tcarol"
    op = file_op("read", {"path": "/r/ids.tsv"}, tsv)
    assert op is not None and (op.text, op.first_line, op.total_lines) == (tsv, 1, 3)
    op = file_op(
        "read", {"file_path": "/r/ids.tsv"}, "".join(f"{n:6}\t{line}\n" for n, line in enumerate(tsv.split("\n"), 1))
    )
    assert op is not None and (op.text, op.first_line) == (tsv + "\n", 1)


def test_reads_of_line_ranges_add_up_and_an_insertion_is_applied(tmp_path: Path) -> None:
    def call(k: int, **args: Any) -> dict[str, Any]:
        return {
            "id": f"c{k}",
            "type": "function",
            "function": {"name": "str_replace_editor", "arguments": json.dumps(args)},
        }

    def view(first: int, lines: list[str]) -> str:
        numbered = "\n".join(f"{first + k:6}\t{line}" for k, line in enumerate(lines))
        return f"Here's the result of running `cat -n` on /r/a.py:\n{numbered}\n"

    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    steps = [
        (call(1, command="view", path="/r/a.py", view_range=[1, 2]), view(1, ["one", "two"])),
        (call(2, command="view", path="/r/a.py", view_range=[3, 4]), view(3, ["three", "four"])),
        (call(3, command="insert", path="/r/a.py", insert_line=1, new_str="1.5"), "The file /r/a.py has been edited."),
    ]
    for c, out in steps:
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [c]},
            {"role": "tool", "tool_call_id": c["id"], "content": out},
        ]
    messages.append({"role": "assistant", "content": "done"})
    store = SqliteStore(tmp_path / "s.db")
    try:
        session = Session.open(store, "ranges", harness="openai", workspace="/r")
        r = replay_transcript(Transcript("swe-agent", "openai", "swe-agent", messages, cwd="/r"), session)
        assert r.orphaned_tool_results == 0 and r.stale_file_views_full == 1  # the views before the insertion
        (f,) = [o for o in session.view.objects.values() if o.kind == "file"]
        assert f.content == "one\n1.5\ntwo\nthree\nfour\n[context_os: lines after 5 not read yet, if any]"
    finally:
        store.close()


PATCH = "*** Begin Patch\n*** Add File: a.py\n+x = 1\n*** End Patch"


@pytest.mark.parametrize(
    ("arguments", "keys"),
    [
        ({"path": "a.py", "content": "x = 1\n"}, ["content"]),
        ('{"path": "a.py", "content": ""}', ["content"]),  # an empty file written: its text too
        ({"command": "create", "path": "a.py", "file_text": "x"}, ["file_text"]),
        ({"input": PATCH}, ["input"]),
        ({"command": ["apply_patch", PATCH]}, ["command"]),
        (PATCH, [""]),  # a freeform patch: the arguments whole
        ({"command": "create a.py"}, []),  # a windowed create: its output holds the text
        ("not json", []),
    ],
)
def test_written_keys_name_the_arguments_holding_a_writes_text(arguments: Any, keys: list[str]) -> None:
    assert written_keys(arguments) == keys


@pytest.mark.parametrize(
    ("arguments", "keys", "shown"),
    [
        (
            {"path": "a.py", "content": "x"},
            ["content"],
            {"path": "a.py", "content": '[1 chars elided: activate("r2")]'},
        ),
        ({"path": "a.py", "content": ""}, ["content"], {"path": "a.py", "content": '[0 chars elided: activate("r2")]'}),
        (
            '{"path": "a.py", "content": "x"}',
            ["content"],
            '{"path": "a.py", "content": "[1 chars elided: activate(\\"r2\\")]"}',
        ),
        (PATCH, [""], json.dumps({"_elided": f'[{len(PATCH)} chars elided: activate("r2")]'})),
        ({"path": "a.py", "content": "x"}, [], {"path": "a.py", "content": "x"}),  # no file text: as it was
        ("[1, 2]", ["content"], "[1, 2]"),  # a JSON value that is no object: no key to elide
    ],
)
def test_a_file_texts_arguments_are_elided_whatever_their_length(arguments: Any, keys: list[str], shown: Any) -> None:
    assert elide_arguments(arguments, "r2", 200, keys=keys) == shown


# --- Qwen Code (its tools as the real 0.24.4 offers them and answers, through the proxy) ----------

QWEN_TOOLS = [
    "agent", "edit", "get_goal", "glob", "grep_search", "list_agents", "notebook_edit", "read_file",
    "run_shell_command", "skill", "tool_call", "tool_search", "update_goal", "write_file",
]  # fmt: skip


def test_qwen_codes_tools_are_told_from_gemini_clis_by_its_edit() -> None:
    """Qwen Code offers Gemini CLI's tools but for its ``edit``: taken for Gemini CLI's, its edits
    had no role, and the proxy went on showing an edited file at its old text."""
    names = for_tools(QWEN_TOOLS)
    assert names == preset("qwen-code").only(QWEN_TOOLS) and names.role("edit") == "edit"
    gemini = ["read_file", "write_file", "replace", "run_shell_command", "grep_search", "glob", "list_directory"]
    assert for_tools(gemini) == preset("gemini-cli").only(gemini)
    args = {"file_path": "/w/app.py", "old_string": "    return 7\n", "new_string": "    return 'seven'\n"}
    said = "The file: /w/app.py has been updated. Showing lines 19-27 of 121 from the edited file:\n\n---\n\ndef f6():"
    op = file_op("edit", args, said)
    assert op is not None and (op.path, op.edits) == ("/w/app.py", [("    return 7\n", "    return 'seven'\n")])


def test_qwen_codes_read_of_a_part_says_where_it_is_and_a_read_again_shows_nothing() -> None:
    args = {"file_path": "/w/a.py", "offset": 2, "limit": 2}
    part = file_op("read", args, "Showing lines 3-4 of 90 total lines.\n\n---\n\nc\nd")
    assert part is not None and (part.text, part.first_line) == ("c\nd", 3)
    assert strip_read_output("Showing lines 3-4 of at least 90 total lines.\n\n---\n\nc\nd", 2) == ("c\nd", 3, None)
    again = "[File a.py unchanged since last read in this session \u2014 the full content was provided earlier in this"
    assert file_op("read", {"file_path": "/w/a.py"}, again + " conversation.]") is None
    assert file_op("read", {"file_path": "/w/a.py"}, "def f():\n    return 1\n") is not None  # a whole file, as is
