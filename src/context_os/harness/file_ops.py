"""What a harness's file tool call says about its file: virtual_files.py keeps file objects from
it without the files on disk (a replay of a recorded session, the proxy's live ones).

``file_op(role, arguments, output)`` reads a ``read``/``write``/``edit`` call by its role (the
tool-name presets of harness/toolnames.py map a harness's names to roles) in three families:

* Pi's, Claude Code's and Gemini CLI's tools: ``path`` or ``file_path`` (Gemini CLI's first
  ``read_file``: ``absolute_path``); ``content``; ``oldText``/``newText`` (or Pi 1.5's ``edits``
  list of them) or ``old_string``/``new_string``; a read's output with Pi's continuation notes,
  ``cat -n`` line numbers, or Gemini CLI's note on a part of a file (``Status: Showing lines A-B
  of T total lines.``);
* ``str_replace_editor`` (SWE-agent, OpenHands), told apart by its ``command`` argument:
  ``view`` (with ``view_range``) prints ``Here's the result of running `cat -n` on PATH:`` and
  numbered lines, ``create`` writes ``file_text``, ``str_replace`` replaces ``old_str`` by
  ``new_str``, ``insert`` adds ``new_str`` after line ``insert_line``, ``undo_edit`` changes the
  file in a way the call does not say;
* SWE-agent's windowed tools, which act on the open file and print a window of it
  (``[File: PATH (N lines total)]``, lines ``N:text``, ``(Open file: PATH)`` after it; the
  cursors configurations' ``<<<<< START CURSOR >>>>>`` lines among them): the file is the one
  the output names;
* Codex CLI's ``apply_patch`` (its patch adds a file: a write; updates one: an edit by its hunks,
  context lines included; deletes or moves one: an edit the replay cannot follow; a patch of
  several files is an op for each, the others in the first's ``more``) and its shell commands
  that only print a file (``sed -n 'A,Bp' F``, ``head -n N F``, ``cat F``, ``nl -ba F | sed -n 'A,Bp'``:
  harness/codex_tools.py), whose output is read past Codex's header (``Exit code: 0``, ``Wall
  time: …``, ``Output:``, or the older ``{"output": …, "metadata": {"exit_code": 0}}``). A range
  read prints at most the lines it asks for: lines printed before them (a login shell's
  warnings, merged into the output) are not the file's;
* Cline's tools, whose results begin with their description (``[read_file for 'a.ts'] Result:``):
  ``read_file`` labels its lines ``N | `` and notes ``(File has T lines total.)``;
  ``write_to_file`` (``path`` or ``absolutePath``, ``content``) and ``replace_in_file``
  (``diff``: SEARCH/REPLACE blocks) show the whole file after them (``<final_file_content>``);
  one that failed, was denied or skipped says so and changed nothing. Roo Code's ``read_file``
  (``File: PATH``, lines labelled ``N | ``), ``apply_diff`` (SEARCH/REPLACE blocks) and
  ``insert_content`` (``line``, ``content``).

An edit the call does not say how to apply (a line-range edit, ``undo_edit``, OpenHands'
``edit_file``) is an ``edit`` with no replacements: the file's content becomes unknown, but for
the window of the new lines SWE-agent's windowed ``edit`` prints after it (a read, in the op's
``more``); one whose output says it was not applied (a lint error, no file open) is none.

This module only parses; it never touches a session or a store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .codex_tools import (
    Patch,
    PatchFile,
    ShellRead,
    call_patch,
    is_operation,
    json_arguments,
    parse_patch,
    shell_read,
)

__all__ = [
    "PATH_KEYS",
    "FileOp",
    "edit_target",
    "file_op",
    "search_replace_blocks",
    "strip_read_output",
    "written_keys",
]


_READ_TRAILER = re.compile(
    r"\n\n\[(?:Showing lines (?P<first>\d+)-(?P<last>\d+) of (?P<total>\d+)(?: \([^)\]]*\))?\. "
    r"Use offset=\d+ to continue\.?"
    r"|(?P<more>\d+) more lines in file\. Use offset=(?P<next>\d+) to continue\.?)\]\Z"
)
_READ_TRAILER_EARLIER = re.compile(
    r"\n\n\.\.\. \((?P<more>\d+) more lines not shown\. Use offset=(?P<next>\d+) to continue reading\)\Z"
)
"""The note an earlier Pi's ``read`` ended a part of a file with (``... (102 more lines not
shown. Use offset=31 to continue reading)``): taken for the file's last lines before 2026-12-02."""
_NUMBERED = re.compile(r"^ *(\d+)(?:\t|→)")
_NUMBER_ALONE = re.compile(r"^ *(\d+)$")
"""The last line of a numbered read of a file that ends with a newline, as Claude Code 2.1 prints
it (``121``: the tab after the number of the empty line dropped)."""
_OPEN_REMINDER, _CLOSE_REMINDER = "<system-reminder>", "</system-reminder>"


def _reminders_start(output: str) -> int | None:
    """Where the notes Claude Code appends to what its Read tool shows start (since 2.0: one on
    malware after every read, a warning on an empty file or an offset past its end; not the
    file's text): the run of ``<system-reminder>…</system-reminder>`` blocks that ends the output,
    each at its start or after line breaks, read from the end (a regex of such a run backtracked
    exponentially over an output of many such lines that did not end it); None if none."""
    start = None
    end = _before_line_breaks(output, len(output))
    while output.endswith(_CLOSE_REMINDER, 0, end):
        body_end = end - len(_CLOSE_REMINDER)
        after = output.rfind(_CLOSE_REMINDER, 0, body_end)  # the block before ends there, if any
        opened = output.find(_OPEN_REMINDER, 0 if after < 0 else after + len(_CLOSE_REMINDER), body_end)
        while opened > 0 and output[opened - 1] != "\n":  # the first that starts a line
            opened = output.find(_OPEN_REMINDER, opened + 1, body_end)
        if opened < 0:
            break
        start = end = _before_line_breaks(output, opened)
    return start


def _before_line_breaks(text: str, at: int) -> int:
    """Where the run of line breaks that ends at ``at`` starts."""
    while at > 0 and text[at - 1] == "\n":
        at -= 1
    return at


# Gemini CLI's read_file
_GEMINI_PART = re.compile(
    r"\A\n?IMPORTANT: The file content has been truncated\.\n"
    r"Status: Showing lines (?P<first>\d+)-(?P<last>\d+) of (?P<total>\d+) total lines\.\n"
    r"Action: [^\n]*\n\n--- FILE CONTENT \(truncated\) ---\n"
    r"|\A\[File content truncated: showing lines (?P<first0>\d+)-(?P<last0>\d+) of (?P<total0>\d+) total lines\."
    r" Use offset/limit parameters to view more\.\]\n"
)
"""The note before a part of a file (since August 2025; before it, the bracketed one)."""
_GEMINI_CONTEXT = ("\n\n--- Newly Discovered Project Context ---\n", "\n--- End Project Context ---")
"""How project context (a ``GEMINI.md`` found near the file) appended after what was read begins
and ends."""
_GEMINI_NO_TEXT = (
    "<tool_output_masked>",
    "[File content partially truncated",
    "Binary content",
    "[SYSTEM: Binary content",
)
"""How an output begins that shows no file text: an old output Gemini CLI masked to save room,
lines cut at their length (the older note), an image or a PDF."""
_GEMINI_CUT_LINE = "... [truncated]"
"""How Gemini CLI ends a line it cut at 2,000 characters: what is shown is not the file's line."""

_NO_TEXT = ("[Line ", "Read image file", "Image read successfully", "PDF read successfully")
"""How a read's output begins that shows no file text: Pi's note on a line too long to show,
its image, OpenCode's image or PDF."""

# OpenCode's read
_OPENCODE_HEAD = re.compile(r"\A<path>[^\n]*</path>\n<type>(?P<type>[a-z]+)</type>\n")
_OPENCODE_TRAILER = re.compile(
    r"\((?:End of file - total (?P<total>\d+) lines"
    r"|Showing lines \d+-\d+ of (?P<of>\d+)\. Use offset=\d+ to continue\."
    r"|Output capped at [^\n]*?\. Showing lines \d+-\d+\. Use offset=\d+ to continue\.)\)\n</content>"
)
_OPENCODE_LINE = re.compile(r"(\d+): ")
_OPENCODE_CUT_LINE = re.compile(r"\.\.\. \(line truncated to \d+ chars\)\Z")

# Qwen Code's read_file (a Gemini CLI fork's)
_QWEN_PART = re.compile(
    r"\AShowing lines (?P<first>\d+)-(?P<last>\d+) of (?P<least>at least )?(?P<total>\d+) total lines\.\n\n---\n\n"
)
"""The note before a part of a file (the total may be a lower bound: ``_noted_part``)."""
_QWEN_UNCHANGED = re.compile(r"\A\[File [^\n]*? unchanged since last read in this session")
"""What it answers a read of a file it showed before, unchanged: no text of it."""

# str_replace_editor (Anthropic's text editor tool, as SWE-agent and OpenHands run it)
_EDITOR_COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
_OBSERVATION = re.compile(r"\A(?:OBSERVATION:\n)?")  # SWE-agent's prefix of every tool output
_EDITOR_LINE = re.compile(r"^ *(\d+)(?:\t|$)")  # a terminal drops the tab of an empty last line
_CAT_N = re.compile(r"\AHere's the result of running `cat -n` on (?P<path>.+?):\n")
_CLIPPED = "<response clipped>"
_EDITOR_FAILED = ("ERROR", "No replacement was performed", "Invalid", "File already exists")

# SWE-agent's windowed tools
_WINDOW = re.compile(r"^\[File: (?P<path>.+) \((?P<total>\d+) lines total\)\]$", re.MULTILINE)
_WINDOW_LINE = re.compile(r"(\d+):(.*)\Z", re.DOTALL)
_WINDOW_NOTE = re.compile(r"\(\d+ more lines (?:above|below)\)\Z")
_WINDOW_CURSORS = ("<<<<< START CURSOR >>>>>", "<<<<< END CURSOR >>>>>")
"""The lines SWE-agent 0.x's cursors configurations print around the selection in a window."""
_OPEN_FILE = re.compile(r"^\(Open file: (?P<path>[^\n]+)\)$", re.MULTILINE)
_WINDOW_EDITED = re.compile(r"^(?:File updated|Text replaced)\b", re.MULTILINE)
_WINDOW_REFUSED = re.compile(
    r"^(?:Your changes have NOT been applied|No file open\b|Your proposed edit has introduced new syntax error)",
    re.MULTILINE,
)
"""What SWE-agent's windowed ``edit`` prints when it leaves the file as it was (a lint error: the
window it shows then is how the edit *would* have looked; no file open)."""


@dataclass
class FileOp:
    """What one file tool call says about a file."""

    kind: str
    """``read``, ``write`` or ``edit``."""
    path: str
    text: str | None = None
    """read: the lines read (notes and line numbers removed); write: the whole content."""
    first_line: int = 1
    """read: the line number of the first line read."""
    total_lines: int | None = None
    """read: the file's line count, when the output says it or the read reached the end; None
    when the file has at least the lines read, maybe more (a read of a line range)."""
    edits: list[tuple[str, str]] = field(default_factory=list)
    """edit: (old text, new text) pairs, each matched against the file as it was."""
    anchors: list[str | None] | None = None
    """edit: set for a Codex patch's hunks: ``edits`` apply in order, each found after the one
    before it and after its anchor line (its ``@@`` header, if any), lines compared as Codex's
    ``apply_patch`` compares them (exactly, else ignoring trailing, else surrounding spaces)."""
    ends: list[bool] | None = None
    """edit: set when a Codex patch marks a hunk ``*** End of File``: per hunk, whether its old
    lines are the file's last (Codex looks for them there only)."""
    insert: tuple[int, str] | None = None
    """edit: text inserted after this line (0: at the top, -1: at the end) instead of ``edits``.
    An edit with neither changed the file in a way the call does not say."""
    more: list[FileOp] = field(default_factory=list)
    """What else the same call did, after this: to other files (a Codex patch of several files),
    or what it showed of this one after it (the window SWE-agent's windowed ``edit`` prints)."""

    @property
    def known(self) -> bool:
        """Whether an edit says how it changed the file."""
        return bool(self.edits) or self.insert is not None


def _without_gemini_context(output: str) -> str:
    """A Gemini CLI read's output without the project context after it: from the first beginning
    of one, when the output ends with the end of one. Found with two string searches: a regex
    ``begin.*end\\Z`` searched again from each begin in an output that repeats it, and took
    minutes over a few MB."""
    begin, end = _GEMINI_CONTEXT
    if not output.endswith(end):
        return output
    at = output.find(begin, 0, len(output) - len(end))
    return output if at < 0 else output[:at]


def strip_read_output(output: str, offset: int | None) -> tuple[str, int, int | None] | None:
    """(lines read, first line number, total lines or None) of a read tool's output: Pi's
    continuation notes removed, and ``cat -n`` style line numbers (``   12\\t`` or ``   12→``)
    removed when every line has them, counting up by one, and the notes Claude Code appends after
    them; Gemini CLI's note before a part of a file read for where it is, and its project context
    after it removed.
    None if the output is not file text (a note instead)."""
    opencode = _OPENCODE_HEAD.match(output)
    if opencode is not None:
        return _opencode_read(output, opencode)
    if _QWEN_UNCHANGED.match(output):
        return None
    qwen = _QWEN_PART.match(output)
    if qwen is not None:
        return _noted_part(output, qwen)
    output = _without_gemini_context(output)
    if output.startswith(_GEMINI_NO_TEXT):
        return None
    part = _GEMINI_PART.match(output)
    if part is not None:
        return _noted_part(output, part)
    first = max(1, offset or 1)
    total: int | None = None
    reminders = _reminders_start(output)
    if reminders is not None:
        if reminders == 0 and "shorter than the provided offset" in output:
            return None  # nothing of the file was shown
        output = output[:reminders]
    m = _READ_TRAILER.search(output) or _READ_TRAILER_EARLIER.search(output)
    body = output
    if m is not None:
        body = output[: m.start()]
        said = m.groupdict()
        total = int(said["total"]) if said.get("total") else int(said["next"]) - 1 + int(said["more"])
    elif output.startswith(_NO_TEXT):
        return None
    lines = body.split("\n")
    numbered = [_NUMBERED.match(line) for line in lines if line]
    bare = _NUMBER_ALONE.match(lines[-1]) if len(numbered) > 1 and numbered[-1] is None else None
    before = numbered[-2] if bare is not None else None
    if bare and before and all(numbered[:-1]) and int(bare.group(1)) == int(before.group(1)) + 1:
        numbered[-1] = bare  # the empty last line, its tab dropped
        lines[-1] += "\t"
    if numbered and all(numbered) and _consecutive([int(m.group(1)) for m in numbered if m is not None]):
        first = int(numbered[0].group(1)) if numbered[0] else first
        lines = [_NUMBERED.sub("", line, count=1) for line in lines]
        body = "\n".join(lines)
    if total is None:
        total = first + len(lines) - 1  # no note: the read reached the end of the file
    return body, first, total


def _consecutive(numbers: list[int]) -> bool:
    """Whether ``numbers`` count up by one, as a read's line numbers do: a file's own first
    column of numbers and a tab (a TSV of ids, read by a tool that prints the text as it is) does
    not, mostly, and is the file's text."""
    return numbers == list(range(numbers[0], numbers[0] + len(numbers)))


def _opencode_read(output: str, head: re.Match[str]) -> tuple[str, int, int | None] | None:
    """(lines, first line, total or None) of what OpenCode's ``read`` showed of a file: its lines
    numbered ``N: `` between ``<content>`` and its note (``(End of file - total T lines)``, or a
    part's ``(Showing lines A-B of T. …)``; a part cut at 50 KB does not say the total), the
    reminders after ``</content>`` left out; None for a directory's entries, and for a file one
    of whose lines it cut at 2,000 characters (what is shown is not the file's line)."""
    start = head.end() + len("<content>\n")
    if head.group("type") != "file" or not output.startswith("<content>\n", head.end()):
        return None
    end = output.find("\n\n(", start)  # numbered lines never start with "(": the note
    note = _OPENCODE_TRAILER.match(output, end + 2) if end >= 0 else None
    if note is None:
        return None
    numbered = output[start:end].split("\n") if end > start else []
    found = [_OPENCODE_LINE.match(line) for line in numbered]
    if not all(found):
        return None
    numbers = [int(m.group(1)) for m in found if m is not None]
    if numbers and not _consecutive(numbers):
        return None
    lines = [line[m.end() :] for line, m in zip(numbered, found, strict=True) if m is not None]
    if any(_OPENCODE_CUT_LINE.search(line) for line in lines):
        return None
    total = note.group("total") or note.group("of")
    return "\n".join(lines), numbers[0] if numbers else 1, int(total) if total is not None else None


def _noted_part(output: str, note: re.Match[str]) -> tuple[str, int, int | None] | None:
    """(lines, first line, total) of a part of a file Gemini CLI's ``read_file`` (or Qwen Code's)
    showed after its note; the total None where the note gives a lower bound (``least``); None
    when it cut a line at its length (what is shown is not the file's line)."""
    body = output[note.end() :]
    if any(line.endswith(_GEMINI_CUT_LINE) for line in body.split("\n")):
        return None
    said = note.groupdict()  # (Gemini CLI's older note's groups: first0, total0)
    first, total = said["first"] or said["first0"], said["total"] or said["total0"]
    return body, int(first), None if said.get("least") else int(total)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _pairs(args: Mapping[str, Any], old: str, new: str) -> list[tuple[str, str]] | None:
    edits = args.get("edits")
    if isinstance(edits, list):
        out = []
        for e in edits:
            if not isinstance(e, Mapping) or not isinstance(e.get(old), str) or not isinstance(e.get(new), str):
                return None
            out.append((e[old], e[new]))
        return out
    if isinstance(args.get(old), str) and isinstance(args.get(new), str):
        return [(args[old], args[new])]
    return None


def _terminal(output: str) -> str:
    """A tool output as a terminal printed it (SWE-agent): ``\\r\\n`` line ends, an
    ``OBSERVATION:`` line first; as plain text."""
    return _OBSERVATION.sub("", output.replace("\r\n", "\n"), count=1)


@dataclass
class _Window:
    path: str
    text: str
    first: int
    total: int


def _window(output: str) -> _Window | None:
    """The window of a windowed tool's output: its file (the open file it names, else the
    window's header), its lines and where they are."""
    text = _terminal(output)
    m = _WINDOW.search(text)
    if m is None:
        return None
    opened = _OPEN_FILE.search(text, m.end())
    lines: list[str] = []
    first = 0
    for line in text[m.end() + 1 :].split("\n"):
        if line in _WINDOW_CURSORS:
            continue  # a mark between the file's lines, not one of them
        numbered = _WINDOW_LINE.match(line)
        if numbered is None:
            if _WINDOW_NOTE.match(line) and not lines:
                continue  # "(12 more lines above)"
            break
        n = int(numbered.group(1))
        if lines and n != first + len(lines):
            break
        first = first or n
        lines.append(numbered.group(2))
    if not lines:
        return None
    path = opened.group("path") if opened is not None else m.group("path")
    return _Window(path, "\n".join(lines), first, int(m.group("total")))


def _editor_view(output: str, args: Mapping[str, Any]) -> tuple[str, int, int | None] | None:
    """(lines, first line, total or None) of a ``str_replace_editor view`` of a file."""
    text = _terminal(output)
    m = _CAT_N.match(text)
    if m is None:
        return None  # a directory listing, a file too large to show, an error
    body = text[m.end() :]
    clipped = body.find(_CLIPPED)
    if clipped >= 0:
        body = body[:clipped].rsplit("\n", 1)[0]  # the last line shown may be cut
    elif body.endswith("\n"):
        body = body[:-1]  # the tool ends its output with a newline of its own
    lines = body.split("\n")
    numbered = [_EDITOR_LINE.match(line) for line in lines]
    if not lines or not all(numbered):
        return None
    first = int(numbered[0].group(1)) if numbered[0] else 1
    lines = [_EDITOR_LINE.sub("", line, count=1) for line in lines]
    view_range = args.get("view_range")
    to_end = not (isinstance(view_range, list) and len(view_range) == 2 and view_range[1] != -1)
    total = first + len(lines) - 1 if to_end and clipped < 0 else None
    return "\n".join(lines), first, total


PATH_KEYS = ("path", "file_path", "absolute_path", "absolutePath", "filePath")
"""The arguments that name a call's file: ``path``, ``file_path``, (Gemini CLI's first
``read_file``) ``absolute_path``, (Cline's ``write_to_file`` and ``replace_in_file``)
``absolutePath``, (OpenCode's tools) ``filePath``; the first present counts."""


def _path(args: Mapping[str, Any]) -> Any:
    """The file a call names (``PATH_KEYS``)."""
    for key in PATH_KEYS:
        if key in args:
            return args[key]
    return None


def edit_target(arguments: Any, output: str = "") -> FileOp | None:
    """The file an edit call edits and the replacements it asks for, whether or not they were
    made: its ``path`` (or, for a windowed tool acting on the open file, the file its output
    names) and its old/new texts or insertion; None when neither the call nor its output names
    a file."""
    args = json_arguments(arguments)
    if args is None:
        return None
    path = _path(args)
    patch = _patch(args) if not isinstance(path, str) or not path else None
    patched = patch.files[0] if patch is not None else None  # an edit's target: the patch's first file
    if patched is not None:
        exact = patched.kind == "update" and not patched.move_to
        return FileOp("edit", patched.path, edits=list(patched.hunks) if exact else [])
    if not isinstance(path, str) or not path:
        window = _window(output) if output else None
        if window is None:
            return None
        path = window.path
    if args.get("command") == "str_replace" and isinstance(args.get("old_str"), str):
        return FileOp("edit", path, edits=[(args["old_str"], str(args.get("new_str") or ""))])
    if args.get("command") == "insert" and isinstance(args.get("new_str"), str):
        line = _int(args.get("insert_line"))
        return FileOp("edit", path, insert=(line, args["new_str"])) if line is not None and line >= 0 else None
    if "command" not in args and isinstance(args.get("text"), str):  # windowed insert
        line = _int(args.get("line"))
        return FileOp("edit", path, insert=(-1 if line is None else line, args["text"]))
    if isinstance(args.get("diff"), str):  # Cline's replace_in_file, Roo Code's apply_diff
        return FileOp("edit", path, edits=search_replace_blocks(args["diff"]) or [])
    line = _int(args.get("line"))
    if line is not None and line >= 0 and isinstance(args.get("content"), str):  # Roo Code's insert_content
        return FileOp("edit", path, insert=(-1 if line == 0 else line - 1, args["content"]))
    pairs = (
        _pairs(args, "oldText", "newText")
        or _pairs(args, "old_string", "new_string")
        or _pairs(args, "oldString", "newString")  # OpenCode's edit (and multiedit's edits)
        or _pairs(args, "search", "replace")  # windowed edit of the open file
    )
    return FileOp("edit", path, edits=pairs or [])


def written_keys(arguments: Any) -> list[str]:
    """The top-level keys of a write call's arguments that hold the text it wrote (what
    ``Session.mark_file_text`` elides): a write's ``content`` or ``file_text``, else the key of
    its patch (``input``, the built-in tool's ``diff``, a shell's ``command``), ``""`` for
    arguments that are no object (a freeform patch); none for a call whose text is in its output
    (a windowed create)."""
    args = json_arguments(arguments)
    if args is None:
        return [""] if isinstance(arguments, str) and call_patch(arguments) is not None else []
    keys = [k for k in ("content", "file_text") if isinstance(args.get(k), str)]
    if keys or call_patch(args) is None:
        return keys
    return [k for k in ("input", "diff", "command", "cmd") if k in args][:1]


def file_op(role: str | None, arguments: Any, output: str, *, is_error: bool = False) -> FileOp | None:
    """What a ``read``/``write``/``edit`` call and its output say about a file (module docstring
    for the argument names and outputs read); None for other tools, failed calls and outputs
    that are no file text."""
    if is_error or role not in ("read", "write", "edit"):
        return None
    args = json_arguments(arguments)
    if args is None or _CLINE_NOT_RUN.match(output):
        return None
    cline = _CLINE_HEAD.match(output)
    if cline is not None:
        return _cline_op(role, args, output[cline.end() :])
    if role == "read" and _is_roo(output):
        return _roo_read(output)
    editor = args.get("command") in _EDITOR_COMMANDS
    path = _path(args)
    operation = is_operation(args)  # the built-in apply_patch's: not failed (is_error), so applied
    if not editor and (not isinstance(path, str) or not path or operation):  # Codex's patches and shell reads
        patch = _patch(args) if role in ("write", "edit") else None
        if patch is not None:
            head, *others = [_patch_op(f, output, applied=operation or None) for f in patch.files]
            if head is not None:
                head.more = [op for op in others if op is not None]
            return head
        read = shell_read(args) if role == "read" else None
        if read is not None:
            return _shell_read_op(read, output)
    if role == "edit":
        return _edit(args, output, editor=editor)
    if role == "write":
        content = next((v for v in (args.get("file_text"), args.get("content")) if isinstance(v, str)), None)
        if content is not None and isinstance(path, str) and path:
            if editor and _first_line(output).startswith(_EDITOR_FAILED):
                return None  # not created (the file exists already, say)
            return FileOp("write", path, text=content)
        window = _window(output)  # a windowed create prints the new file
        if window is None or window.first != 1 or window.first + window.text.count("\n") != window.total:
            return None
        return FileOp("write", window.path, text=window.text)
    if editor:
        got = _editor_view(output, args) if isinstance(path, str) and path else None
        if got is None:
            return None
        body, first, total = got
        return FileOp("read", str(path), text=body, first_line=first, total_lines=total)
    if _terminal(output).startswith("[File: "):
        window = _window(output)
        if window is not None:
            return FileOp("read", window.path, text=window.text, first_line=window.first, total_lines=window.total)
    if not isinstance(path, str) or not path or _OPEN_FILE.search(output):
        return None  # no file named, or a windowed tool that printed no window (an error)
    offset, limit = _int(args.get("offset")), _int(args.get("limit"))
    got = strip_read_output(output, offset)
    if got is None:
        return None
    body, first, total = got
    if "file_path" in args and limit is not None and body.count("\n") + 1 >= limit and not _GEMINI_PART.match(output):
        total = None  # Claude Code read as many lines as asked for: the file may go on (Gemini CLI says)
    return FileOp("read", path, text=body, first_line=first, total_lines=total)


def _first_line(output: str) -> str:
    return _terminal(output).split("\n", 1)[0]


def _edit(args: Mapping[str, Any], output: str, *, editor: bool) -> FileOp | None:
    op = edit_target(args, output)
    if op is None:
        return None
    if editor:
        first = _first_line(output)
        if first.startswith(_EDITOR_FAILED) or "did not appear verbatim" in first:
            return None  # the file was left as it was
        # success: "The file PATH has been edited. ...", or (older OpenHands) a diff of the change
        if args.get("command") == "undo_edit" or not ("has been edited" in first or first.startswith("--- ")):
            return FileOp("edit", op.path)  # a change the call does not say, or an outcome we cannot read
        return op
    if "path" in args or "file_path" in args or "filePath" in args:
        return op  # Pi, Claude Code, Gemini CLI, OpenCode: a failed call says so (is_error)
    # a windowed tool acting on the open file: a replacement counts if the output says it was made
    text = _terminal(output)
    if _WINDOW_REFUSED.search(text):
        return None  # the file was left as it was
    if (op.edits and _WINDOW_EDITED.search(text)) or op.insert is not None:
        return op
    unknown = FileOp("edit", op.path)  # a line-range edit, or a replacement the output does not confirm
    window = _window(output)  # the file's new lines around the edit, as the tool printed them
    if window is not None and window.path == op.path:
        unknown.more = [FileOp("read", op.path, text=window.text, first_line=window.first, total_lines=window.total)]
    return unknown


# --- Cline -------------------------------------------------------------------------------------------

_CLINE_HEAD = re.compile(r"\A\[[A-Za-z_][\w-]* for '.*?'\] Result:\n?", re.DOTALL)
"""How Cline begins a file tool's result: the tool's description, ``[read_file for 'a.ts'] Result:``."""
_CLINE_NOT_RUN = re.compile(
    r"\A(?:Skipping tool due to user rejecting a previous tool\."
    r"|Tool was interrupted and not executed due to user rejecting a previous tool\.) \["
    r"|\ATool \[[\w-]+\] was not executed because"
)
"""What Cline answers a call it did not run with (after the user rejected one, or one call per message)."""
_CLINE_FAILED = (
    "The tool execution failed with the following error:",
    "The user denied this operation.",
    "(tool did not return anything)",
    "Error reading file",
    "Access to ",
)
"""How a Cline result begins that shows no file text, or says the file was left as it was (a
replace_in_file whose SEARCH block did not match: ``The tool execution failed ...`` and the
file as it was reverted to)."""
_CLINE_SEEN = re.compile(r"\A\[(?:File already read|DUPLICATE READ)\] [^\n]*\n")
"""The note before a file read again (ReadFileToolHandler.ts), then its lines."""
_CLINE_TOTAL = re.compile(
    r"\n\n\((?:File has (?P<total>\d+) lines total"
    r"|Showing lines \d+-\d+ of (?P<of>\d+) total\. Use start_line=\d+ to continue reading)\.\)\Z"
)
_CLINE_CUT = "\n\n---\n\n[FILE TRUNCATED:"
"""Where Cline cuts a file too large to show whole."""
_CLINE_LINE = re.compile(r"(\d+) \| ")
_CLINE_FINAL = (re.compile(r'<final_file_content path="[^"\n]*">\n'), "\n</final_file_content>")
"""How the file as a write or an edit left it (with the user's own changes and the editor's
formatting), which Cline shows after it, begins and ends."""

_SEARCH = re.compile(r"(?:-{3,}|<{3,}) SEARCH>?")
_DIVIDER = re.compile(r"={3,}")
_REPLACE = re.compile(r"(?:\+{3,}|>{3,}) REPLACE>?")
_START_LINE = re.compile(r":start_line:\s*\d+")


def search_replace_blocks(diff: str) -> list[tuple[str, str]] | None:
    """The (old, new) texts of SEARCH/REPLACE blocks: Cline's ``replace_in_file`` (``------- SEARCH``,
    ``=======``, ``+++++++ REPLACE``; before it ``<<<<<<< SEARCH`` and ``>>>>>>> REPLACE``), and Roo
    Code's ``apply_diff`` (its ``:start_line:N`` and ``-------`` lines after SEARCH left out).
    Each text is its lines without the last line break (a file's text is compared so); one that
    deletes keeps it. None when the diff holds no whole block."""
    pairs: list[tuple[str, str]] = []
    old: list[str] | None = None
    new: list[str] | None = None
    roo = False
    for line in diff.replace("\r\n", "\n").split("\n"):
        if old is None:
            if _SEARCH.fullmatch(line):
                old, new, roo = [], None, False
            continue
        if new is None:
            if _DIVIDER.fullmatch(line):
                new = []
            elif not old and _START_LINE.fullmatch(line):
                roo = True
            elif roo and not old and line == "-------":
                roo = False
            else:
                old.append(line)
            continue
        if _REPLACE.fullmatch(line):
            pairs.append(_block(old, new))
            old = new = None
            continue
        new.append(line)
    if old is not None and new is not None:  # the last block's REPLACE line never came: Cline ends it there
        pairs.append(_block(old, new))
    return pairs or None


def _block(old: list[str], new: list[str]) -> tuple[str, str]:
    before, after = "\n".join(old), "\n".join(new)
    return (before + "\n", after) if old and not new else (before, after)


def _no_last_break(text: str) -> str:
    """A file's text as Cline's read shows it: its lines, without the line break after the last
    (``\r\n`` or ``\n``: the read splits lines at either)."""
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text


def _cline_op(role: str, args: Mapping[str, Any], body: str) -> FileOp | None:
    """What a Cline file tool's result (past its description) says about its file."""
    path = _path(args)
    if not isinstance(path, str) or not path or body.startswith(_CLINE_FAILED):
        return None
    if role == "read":
        return _cline_read(path, body)
    final = _cline_final(body)
    # the file's own line breaks (\r\n on Windows), where its read splits lines at \r?\n
    text = _no_last_break(final.replace("\r\n", "\n")) if final is not None else None
    if role == "write":
        content = text if text is not None else args.get("content")
        return FileOp("write", path, text=_no_last_break(content)) if isinstance(content, str) else None
    op = edit_target(args) or FileOp("edit", path)
    if text is not None:  # the whole file after the edit
        op.more = [FileOp("read", path, text=text, total_lines=text.count("\n") + 1)]
    return op


def _cline_final(body: str) -> str | None:
    """The text of the first ``<final_file_content>`` that is closed. Its end is looked for once:
    a lazy regex from the tag to the end looked again from every tag in a result that repeats it
    unclosed (a file of such tags written), minutes over a few MB."""
    begin, end = _CLINE_FINAL
    found = begin.search(body)
    if found is None:
        return None
    close = body.find(end, found.end())
    # a later tag's end is after this one's, so it finds no end either
    return None if close < 0 else body[found.end() : close]


def _cline_read(path: str, body: str) -> FileOp | None:
    """The lines Cline's ``read_file`` showed: ``N | `` before each, then ``(File has T lines
    total.)``, or ``(Showing lines A-B of T total. ...)`` for a part; before those line labels
    (2025), the file's text alone."""
    seen = _CLINE_SEEN.match(body)
    body = body[seen.end() :] if seen is not None else body
    total: int | None = None
    cut = body.find(_CLINE_CUT)
    note = _CLINE_TOTAL.search(body) if cut < 0 else None
    if cut >= 0:
        body = body[:cut]
    elif note is not None:
        body = body[: note.start()]
        total = int(note.group("total") or note.group("of"))
    lines = body.split("\n")
    numbered = [_CLINE_LINE.match(line) for line in lines]
    first = 1
    if all(numbered):
        first = int(numbered[0].group(1))  # type: ignore[union-attr]
        if [int(m.group(1)) for m in numbered] != list(range(first, first + len(lines))):  # type: ignore[union-attr]
            return None
        lines = [line[m.end() :] for line, m in zip(lines, numbered, strict=True)]  # type: ignore[union-attr]
    elif note is not None:
        return None  # a note on lines it did not label: not a read this knows
    else:
        lines = _no_last_break(body).split("\n")
        total = None if cut >= 0 else len(lines)
    return FileOp("read", path, text="\n".join(lines), first_line=first, total_lines=total)


_ROO_FILE = re.compile(r"File: (?P<path>[^\n]+)\n")
_ROO_PART = re.compile(
    r"IMPORTANT: File content truncated\.\n\tStatus: Showing lines (?P<first>\d+)-(?P<last>\d+) of (?P<total>\d+)"
    r" total lines\.\n\t[^\n]*\n\t\n\t"
)
_ROO_LINE = re.compile(r" *(\d+) \| ")
_ROO_CUT_LINE = 2000
"""Roo Code's ``read_file`` cuts a longer line to this many characters, ``...`` last."""


def _is_roo(output: str) -> bool:
    """Whether a read's output is Roo Code's: ``File: PATH``, then its lines (or the note on a part
    of the file), or its note on a file it did not show (an error, a denial, an empty or binary file)."""
    m = _ROO_FILE.match(output)
    rest = output[m.end() :] if m is not None else ""
    notes = ("Error: ", "Note: ", "Status: ", "Binary file", "IMPORTANT: File content truncated.")
    return m is not None and (rest.startswith(notes) or _ROO_LINE.match(rest) is not None)


def _roo_read(output: str) -> FileOp | None:
    """The lines of one file Roo Code's ``read_file`` showed: ``File: PATH``, a note on a part of
    a file, then its lines labelled ``N | `` (numbers padded to one width); None when it is not
    that (several files, a line cut at its length)."""
    head = _ROO_FILE.match(output)
    if head is None:
        return None
    body = output[head.end() :]
    part = _ROO_PART.match(body)
    body = body[part.end() :] if part is not None else body
    lines = body.split("\n")
    labels = [_ROO_LINE.match(line) for line in lines]
    if not all(labels):
        return None
    numbers = [int(m.group(1)) for m in labels]  # type: ignore[union-attr]
    if numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        return None
    text = [line[m.end() :] for line, m in zip(lines, labels, strict=True)]  # type: ignore[union-attr]
    if any(len(line) == _ROO_CUT_LINE and line.endswith("...") for line in text):
        return None
    total = int(part.group("total")) if part is not None else numbers[0] + len(text) - 1
    return FileOp("read", head.group("path"), text="\n".join(text), first_line=numbers[0], total_lines=total)


# --- Codex CLI ---------------------------------------------------------------------------------------

_CODEX_HEADER = re.compile(
    r"\A(?:(?:Exit code|Wall time|Total output lines|Chunk ID|Original token count|Process exited with code)"
    r"\b[^\n]*\n)+Output:\n"
)
_CODEX_EXIT = re.compile(r"^(?:Exit code:|Process exited with code) (-?\d+)$", re.MULTILINE)
_CODEX_CUT = re.compile(
    r"\[\.\.\. omitted \d+ of \d+ lines \.\.\.\]|…\d+ (?:tokens|chars) truncated…|^Warning: truncated output\b",
    re.MULTILINE,
)
_CODEX_NUMBERED = re.compile(r"^ *(\d+)\t")


def _patch(args: Mapping[str, Any]) -> Patch | None:
    """A call's Codex patch, if the call carries one."""
    text = call_patch(args)
    return parse_patch(text) if text is not None else None


def codex_output(output: str) -> tuple[str, int | None]:
    """(what the command printed, its exit code if the output says it) of a Codex tool output."""
    if output.startswith("{"):
        try:
            value = json.loads(output)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, Mapping) and isinstance(value.get("output"), str):
            meta = value.get("metadata")
            code = meta.get("exit_code") if isinstance(meta, Mapping) else None
            return value["output"], _int(code)
    exit_code: int | None = None
    header = _CODEX_HEADER.match(output)
    while header is not None:  # a patch run through exec_command: the patch's header inside the shell's
        found = _CODEX_EXIT.search(header.group(0))
        exit_code = int(found.group(1)) if found is not None else exit_code
        output = output[header.end() :]
        header = _CODEX_HEADER.match(output)
    return output, exit_code


def _patch_op(patched: PatchFile, output: str, applied: bool | None = None) -> FileOp | None:
    """What a Codex patch did to one of its files; None if Codex did not apply it (``applied``:
    said by the harness, else told from the output)."""
    text, code = codex_output(output)
    if applied is None:
        applied = text.lstrip().startswith("Success.") or code == 0
    if not applied:
        return None  # "apply_patch verification failed: ...": the files are as they were
    if patched.kind == "add":
        return FileOp("write", patched.path, text="\n".join(patched.lines))
    if patched.kind == "update" and not patched.move_to:
        ends = list(patched.ends) if any(patched.ends) else None
        return FileOp("edit", patched.path, edits=list(patched.hunks), anchors=list(patched.anchors), ends=ends)
    return FileOp("edit", patched.path)  # deleted or moved: what is there now is not known


def _shell_read_op(read: ShellRead, output: str) -> FileOp | None:
    """The lines a Codex shell read printed; None if its output is no file text."""
    text, code = codex_output(output)
    if not text or (code is not None and code != 0) or _CODEX_CUT.search(text):
        return None
    lines = text[:-1].split("\n") if text.endswith("\n") else text.split("\n")
    first = read.first
    if read.numbered:
        start = next((k for k, line in enumerate(lines) if _CODEX_NUMBERED.match(line)), None)
        if start is None or not all(_CODEX_NUMBERED.match(line) for line in lines[start:]):
            return None
        lines = lines[start:]
        numbers = [int(_CODEX_NUMBERED.match(line).group(1)) for line in lines]  # type: ignore[union-attr]
        if numbers != list(range(numbers[0], numbers[0] + len(numbers))):
            return None
        first = numbers[0]
        lines = [_CODEX_NUMBERED.sub("", line, count=1) for line in lines]
    asked = read.last - read.first + 1 if read.last is not None else None
    if asked is not None and len(lines) > asked:
        lines = lines[len(lines) - asked :]  # printed before the file's lines: not the file
    ended = asked is None or len(lines) < asked
    total = first + len(lines) - 1 if ended else None
    return FileOp("read", read.path, text="\n".join(lines), first_line=first, total_lines=total)
