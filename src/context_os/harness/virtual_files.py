"""Virtual files: file objects for the files an agent's own tools touched, kept from what their
calls and results show alone, never read from a disk: a recorded session's (``ctxos replay``: the
files are not where the replay runs) or a live one's (``ctxos proxy``, or any hook's ``on_sync``:
the agent's files need not be on this machine).

``VirtualFiles.observe`` is a ``ContextHook`` ``on_sync`` callback: every new result of a read,
write or edit call (harness/file_ops.py reads it) updates what is known of its file, records a
version through the file index's virtual mode (files/index.py ``record_virtual``: the one writer
of file documents), shows the file active with the lines touched as its focus, and collapses the
tool result: its text is in the file object. It also answers the replay's measures: whether a
view of some file is stale, whether an edit's target was in context.

This module never writes to the store itself.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import blake3

from ..context.ingest import SyncReport
from ..context.session import Session
from ..context.view import ObjInfo, SessionView, active_text, own_text
from ..errors import ContextOSError, FileUnreadable
from ..store.base import Version
from .codex_tools import ShellChanges, environment_cwd, json_arguments, shell_changes
from .file_ops import PATH_KEYS, FileOp, file_op, written_keys
from .formatters import FormatterReport, formatter_report
from .responses import stdout_of
from .toolnames import ToolNames, preset

if TYPE_CHECKING:  # the files package (its watchdog tracker) is imported when a file is first recorded
    from ..files.file_tools import FileTools
    from ..files.index import Indexed

__all__ = ["VirtualFile", "VirtualFiles", "file_key"]


_DRIVE = re.compile(r"\A[A-Za-z]:[\\/]")
"""A Windows path (``c:\\Apps\\x.ts``, ``C:/Apps``): named with either separator, its drive in either case."""
UNKNOWN_TOOL_PATHS = (*PATH_KEYS, "notebook_path")
"""The arguments by which a call of a tool with no role names a file it may change (a notebook's
editor: ``notebook_path``)."""
_COPY_FAILED = re.compile(r"^(?:(?:\S*/)?(?:cp|mv): |fatal: )", re.M)
"""A ``cp``'s, ``mv``'s or git's complaint (``cp: cannot stat 'a': No such file or directory``,
``fatal: destination exists``): what it copied is not known."""


def _media(blocks: Any) -> bool:
    """Whether a tool output given as blocks (a tool-call object's ``blocks``) shows something other
    than text (an image, a document), or no block at all (a block the reader left out: Claude
    Code's PDF): then its text, if any, is not the text of a file it read."""
    content = blocks.get("content") if isinstance(blocks, Mapping) else None
    if not isinstance(content, list):
        return False
    return not content or any(not isinstance(b, Mapping) or b.get("type") != "text" for b in content)


def _windows(path: str) -> str:
    path = path.replace("\\", "/")
    return path[0].lower() + path[1:] if _DRIVE.match(path) else path


def file_key(path: str, root: str | None) -> str:
    """One name for one file, however a call names it: a relative path is taken under the
    session's directory ``root`` (when it is known: a shell read joined to an absolute working
    directory and a patch naming the path from the session's directory are the same file). A path
    in a home directory (``~/notes.md``, as Pi's tools and context_os's own expand it) is not
    under it: it stays as named (it was ``<root>/~/notes.md``, a file that never existed; a
    workspace on this machine expands it). In a session on Windows (its directory, or the path, has
    a drive) ``\\`` and ``/`` are one separator."""
    if _DRIVE.match(path) or (root and _DRIVE.match(root)):
        path, root = _windows(path), _windows(root) if root else root
        return posixpath.normpath(path if _DRIVE.match(path) or not root else posixpath.join(root, path))
    if root and not posixpath.isabs(path) and not path.startswith("~"):
        path = posixpath.join(root, path)
    return posixpath.normpath(path) if path else path


@dataclass
class VirtualFile:
    """What is known of one file of the session from its tools' calls: its lines (None where unknown)."""

    id: str
    path: str
    lines: list[str | None] | None = None
    """The file's lines, None for lines never read; None when nothing is known."""
    open_end: bool = False
    """Whether the file may go on past ``lines`` (known only from reads of line ranges)."""
    changes: int = 0
    """How often the file changed (writes, edits, a read that disagreed with what was known)."""
    version: int = 0
    latest: Version | None = None
    touches: list[tuple[int, int, int]] = field(default_factory=list)
    """(turn, first, last) 1-based file lines the tools read or changed, oldest first."""

    def text(self) -> str | None:
        """The content to store: the text, with one note line per run of lines never read."""
        if self.lines is None:
            return None
        out: list[str] = []
        gap_start = 0
        for n, line in enumerate(self.lines, 1):
            if line is None:
                gap_start = gap_start or n
                continue
            if gap_start:
                out.append(_gap_note(gap_start, n - 1))
                gap_start = 0
            out.append(line)
        if gap_start:
            out.append(_gap_note(gap_start, len(self.lines)))
        if self.open_end:
            out.append(f"[context_os: lines after {len(self.lines)} not read yet, if any]")
        return "\n".join(out)

    @classmethod
    def stored(cls, version: Version) -> VirtualFile:
        """The file as its stored version ``version`` says (a session that goes on after its
        process ended): its lines read back from ``text()``'s, whose notes stand for the lines
        never read; the content unknown if they do not add up to the lines it counted."""
        assert version.doc is not None
        meta = version.doc.get("meta") or {}
        vf = cls(version.id, meta.get("abs_path") or meta.get("path") or "", version=int(meta.get("version") or 0))
        vf.changes, vf.latest = int(meta.get("changes") or 0), version
        text = version.doc.get("content")
        if not isinstance(text, str):
            return vf
        rows = text.split("\n")
        readings = [(rows, False)]
        end = _OPEN_END.fullmatch(rows[-1])
        if end is not None:  # the note, or a file's own last line that reads like it
            readings.insert(0, (rows[:-1], True))
        for body, open_end in readings:
            lines = _unnoted(body)
            if len(lines) == meta.get("lines") and (not open_end or (end and int(end.group(1)) == len(lines))):
                vf.lines, vf.open_end = lines, open_end
                break
        return vf  # unknown if not the text of a virtual file as this module writes it

    def write(self, text: str, turn: int = 0) -> None:
        """The whole text, as a write set it."""
        self.lines = list(text.split("\n"))
        self.open_end = False
        self.changes += 1
        self.touches = [(turn, 1, len(self.lines))]

    def read(self, op: FileOp, turn: int = 0) -> None:
        """Learn the lines a read showed (a read that disagrees with what was known is a change)."""
        assert op.text is not None
        got = op.text.split("\n")
        first = op.first_line
        last = first + len(got) - 1
        if op.total_lines is not None:
            total = op.total_lines
        else:  # the file has at least the lines read
            total = max(last, len(self.lines)) if self.lines is not None else last
        if self.lines is not None and self.open_end and total > len(self.lines):
            self.lines.extend([None] * (total - len(self.lines)))  # the file goes on: more of it is known
        if self.lines is not None and len(self.lines) != total:
            self.lines = None  # the file changed length behind our back: what we knew no longer places
            self.changes += 1
        if self.lines is None:
            self.lines = [None] * total
            self.open_end = op.total_lines is None
        else:
            if any(self.lines[first - 1 + k] not in (None, line) for k, line in enumerate(got[: total - first + 1])):
                self.changes += 1  # changed outside the tools we saw (bash, another editor)
            if op.total_lines is not None:
                self.open_end = False
        for k, line in enumerate(got):
            if first - 1 + k < total:
                self.lines[first - 1 + k] = line
        self.touches.append((turn, first, min(total, first + len(got) - 1)))

    def edit(self, op: FileOp, turn: int = 0) -> None:
        """Apply an edit to the known text; one it cannot place leaves the content unknown."""
        self.changes += 1
        if self.lines is None:
            return
        if op.insert is not None:
            self._insert(op.insert, turn)
            return
        if not op.edits:  # an edit the call does not say how to apply
            self._forget()
            return
        if op.anchors is not None:
            self._patch(op, turn)
            return
        unknown = "\x00"  # never in an edit's text: a line never read cannot match
        text = "\n".join(unknown if line is None else line for line in self.lines)
        spans = []
        for old, new in op.edits:
            if not old or text.count(old) != 1:
                self._forget()
                return
            start = text.index(old)
            spans.append((start, start + len(old), new))
        spans.sort()
        if any(start_b < end_a for (_, end_a, _), (start_b, _, _) in zip(spans, spans[1:], strict=False)):
            self._forget()
            return
        for start, end, new in reversed(spans):
            first = text.count("\n", 0, start) + 1
            added = new.count("\n")
            shift = added - text.count("\n", start, end)
            text = text[:start] + new + text[end:]
            self._touched(turn, first, first + added, shift)
        self.lines = [None if line == unknown else line for line in text.split("\n")]

    def _patch(self, op: FileOp, turn: int) -> None:
        """Apply a Codex patch's hunks as its ``apply_patch`` does (``_hunk_spans``); one not found
        leaves the content unknown."""
        assert self.lines is not None and op.anchors is not None
        ends = op.ends or [False] * len(op.edits)
        spans = _hunk_spans(self.lines, op.edits, op.anchors, ends, open_end=self.open_end)
        if spans is None:
            self._forget()
            return
        for start, end, new_lines in reversed(spans):
            self.lines[start:end] = new_lines
            self._touched(turn, start + 1, start + max(1, len(new_lines)), len(new_lines) - (end - start))

    def _insert(self, insert: tuple[int, str], turn: int) -> None:
        assert self.lines is not None
        after, text = insert
        if (after < 0 and self.open_end) or after > len(self.lines):
            self._forget()  # the end, or the line, is not known
            return
        at = len(self.lines) if after < 0 else after
        new = text.split("\n")
        self.lines[at:at] = new
        self._touched(turn, at + 1, at + len(new), len(new), after=at)

    def _forget(self) -> None:
        """The content is no longer known (an edit that cannot be placed)."""
        self.lines, self.touches = None, []

    def _touched(self, turn: int, first: int, last: int, shift: int, *, after: int | None = None) -> None:
        """Lines ``first``-``last`` were just changed, moving the lines after ``after`` (default:
        after ``first``) by ``shift``: the earlier touches follow them."""
        at = first if after is None else after
        self.touches = [(t, a + shift if a > at else a, b + shift if b > at else b) for t, a, b in self.touches]
        self.touches.append((turn, first, last))

    def content_line_map(self) -> list[int]:
        """For each file line, its 1-based line in ``text()`` (a line never read: its note's line)."""
        out: list[int] = []
        k = 0
        previous_known = True
        for line in self.lines or ():
            if line is None:
                if previous_known:
                    k += 1
                previous_known = False
            else:
                k += 1
                previous_known = True
            out.append(k)
        return out


def _hunk_spans(
    lines: list[str | None],
    hunks: list[tuple[str, str]],
    anchors: list[str | None],
    ends: list[bool],
    *,
    open_end: bool,
) -> list[tuple[int, int, list[str]]] | None:
    """Where a Codex patch's hunks go, as its ``apply_patch`` finds them: in order, each looked for
    from the end of the one before (after its anchor line, if it names one), lines compared as
    ``_seek`` does; one marked ``*** End of File`` only where its old lines end the file; a hunk
    whose last old line is empty is looked for without it if not found with it; one with no old
    text adds at the end. (start, end, new lines) per hunk; None if one is not found."""
    spans: list[tuple[int, int, list[str]]] = []
    at = 0
    for (old, new), anchor, at_end in zip(hunks, anchors, ends, strict=True):
        if anchor is not None:
            found = _seek(lines, [anchor], at)
            if found is None:
                return None
            at = found + 1
        old_lines, new_lines = old.split("\n"), new.split("\n")
        if open_end and (not old or at_end):
            return None  # the end is not known
        if not old:
            spans.append((len(lines), len(lines), new_lines))
            continue
        found = _seek_end(lines, old_lines) if at_end else _seek(lines, old_lines, at)
        if found is None and len(old_lines) > 1 and old_lines[-1] == "":
            old_lines = old_lines[:-1]
            new_lines = new_lines[:-1] if new_lines[-1:] == [""] else new_lines
            found = _seek_end(lines, old_lines) if at_end else _seek(lines, old_lines, at)
        if found is None or (spans and found < spans[-1][1]):
            return None  # (found at the end, over the hunk before: Codex refuses overlapping hunks)
        spans.append((found, found + len(old_lines), new_lines))
        at = found + len(old_lines)
    return spans


def _seek(lines: list[str | None], pattern: list[str], start: int) -> int | None:
    """Where ``pattern`` first occurs in ``lines`` at or after ``start`` (Codex's
    ``seek_sequence``: exact lines, else equal without trailing spaces, else without surrounding
    ones, else also with typographic dashes, quotes and spaces as their ASCII ones; a line never
    read matches nothing); None if nowhere."""
    n = len(pattern)
    for loose in (str, str.rstrip, str.strip, _ascii_punctuation):
        want = [loose(p) for p in pattern]
        for i in range(start, len(lines) - n + 1):
            if all(line is not None and loose(line) == w for line, w in zip(lines[i : i + n], want, strict=True)):
                return i
    return None


_PUNCTUATION = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys("\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000", " "),
    }
)
"""Codex's last, most lenient comparison: these dashes, quotes and spaces as their ASCII ones."""


def _ascii_punctuation(line: str) -> str:
    return line.strip().translate(_PUNCTUATION)


def _seek_end(lines: list[str | None], pattern: list[str]) -> int | None:
    """Where ``pattern`` ends the file (Codex's ``seek_sequence`` at the end of file: the last
    lines only, compared as ``_seek`` does; the empty line after a final line break not counted
    if they do not end the file with it, as Codex splits a file without it); None if they do not."""
    last = len(lines) - 1 if lines and lines[-1] == "" else len(lines)
    for end in dict.fromkeys((len(lines), last)):
        if end >= len(pattern):
            found = _seek(lines[:end], pattern, end - len(pattern))
            if found is not None:
                return found
    return None


def _gap_note(first: int, last: int) -> str:
    return f"[context_os: lines {first}-{last} not read yet]"


def _unnoted(rows: list[str]) -> list[str | None]:
    """``text()``'s lines back to the file's: a note of lines never read stands for them."""
    lines: list[str | None] = []
    for row in rows:
        gap = _GAP.fullmatch(row)
        if gap is not None and int(gap.group(1)) == len(lines) + 1 <= int(gap.group(2)):
            lines.extend([None] * (int(gap.group(2)) - len(lines)))
        else:
            lines.append(row)
    return lines


_GAP = re.compile(r"\[context_os: lines (\d+)-(\d+) not read yet\]")
_OPEN_END = re.compile(r"\[context_os: lines after (\d+) not read yet, if any\]")


def _shows_text(view: SessionView, obj: ObjInfo, kind: str) -> bool:
    """Whether the history shows the file text a ``read`` or ``write`` call ``obj`` showed:
    expanded, its result and call whole; collapsed, a read's result shown as its own text, or a
    write's arguments holding its text shown as they were (none elided). Behind the history
    horizon an entry shows only in its note, which holds no file text."""
    if obj.in_history:
        return True
    if obj.state == "absent" or obj.entry is None or obj.call_entry is None or obj.call_entry < view.horizon:
        return False
    call = view.call_of(obj)
    if call is None:
        return False
    if kind == "write" and written_keys(call["arguments"]):
        # its text is in its arguments (a write's result says it wrote it)
        return bool(view.call_arguments(call) == call["arguments"])
    return obj.entry >= view.horizon and own_text(obj, view.layout) is not None  # a read, a windowed create


class VirtualFiles:
    """File objects for the files a session's tools touched, recorded from their calls and results.

    ``observe(session, report)`` is a ``ContextHook`` ``on_sync`` callback: for every new result
    of a read, write or edit call it updates what is known of the file (reads add lines, and a
    read of a line range leaves the file's end open; writes replace the text; edits and
    insertions are applied to the known text; an edit whose old text is not in it, or that does
    not say how it changed the file, leaves the content unknown), stores a new version of its
    ``file:`` object when its content changed (valid time: the result's timestamp), shows it
    active in the session with the lines touched as its focus, and collapses the tool result at
    once: its text is in the file object. An ``observe`` that raised part way (the store out of
    reach while it records a version) is handed the same entries again by its hook: what it
    applied of them is skipped, the rest applied then.
    """

    def __init__(
        self,
        session: Session,
        *,
        root: str | None,
        tool_names: Mapping[str, str] | str | None = "pi",
        disk: FileTools | None = None,
        find_root: Callable[[str], str | None] = environment_cwd,
    ):
        """``disk``: the file tools of the agent's workspace, when its files are on this machine:
        a file under it is shown as the object ``disk`` keeps of it (read from the disk, the one
        context_os's ``read`` shows too), not as a virtual one. ``find_root``: how the session's
        directory is read from its user and system messages when ``root`` is not given (the
        first that names one wins): by default Codex's environment message and OpenCode's
        ``<env>`` block (``codex_tools.environment_cwd``); the proxy reads any agent's words
        (``codex_tools.named_cwd``)."""
        self.session = session
        self.disk = disk
        self.find_root = find_root
        self.root = root.rstrip("/") if root else None
        self.names: ToolNames | None = (
            preset(tool_names)
            if isinstance(tool_names, str)
            else tool_names
            if isinstance(tool_names, ToolNames) or tool_names is None
            else ToolNames(tool_names)
        )
        """Which of the harness's tools read, write and edit (None: none known yet, nothing is
        observed); the proxy sets it from the tools a request offers."""
        self.files: dict[str, VirtualFile] = {}
        self.views: dict[str, tuple[str, int, str]] = {}
        """Tool-call object id → (file path, change count, ``read`` or ``write``) of each read or
        write that showed file text (the object id, not the call id: a harness may reuse a call
        id)."""
        self.min_view: dict[str, int] = {}
        """Per file, the change count of the oldest view the naive transcript shows."""
        self._calls: dict[str, tuple[str, Any]] = {}
        self._last_vt = 0
        self._observed = 0
        """The entries (``Entry["i"]``) below this are observed: a report handed over again (its
        ``observe`` raised part way, ``ContextHook`` hands its entries over again) skips them."""
        self._partial: tuple[int, int, Callable[[], VirtualFile] | None] = (-1, 0, None)
        """The entry whose observing raised part way: its ``i``, how many of its operations are
        applied, and the step that shows the file of the next one if that one is recorded."""
        for obj in session.view.objects.values():  # a session that goes on: its files as stored
            latest = session.store.get(obj.id) if obj.kind == "file" and obj.meta.get("virtual") else None
            if latest is not None and latest.doc is not None:
                vf = VirtualFile.stored(latest)
                self.files[vf.path] = vf
                self._last_vt = max(self._last_vt, latest.valid_time)
                self.root = self.root or latest.doc["meta"].get("workspace")  # learned before, stored with them

    def observe(self, session: Session, report: SyncReport) -> None:
        view = session.view
        start = len(view.visible) - report.new
        # what came before the model's last answer among them it has seen (a history taken in at once)
        answer = max(
            (p for p in range(start, len(view.visible)) if view.entries[view.visible[p]]["role"] == "assistant"),
            default=start,
        )
        for p in range(start, len(view.visible)):
            e = view.entries[view.visible[p]]
            if e["i"] < self._observed:
                continue  # observed at a call whose observe raised after it (ContextHook hands it over again)
            with session.caused_by(e["i"]), session.answered() if p < answer else nullcontext():
                self._observe(e, view.objects)
            self._observed = e["i"] + 1

    def _observe(self, e: Mapping[str, Any], objects: Mapping[str, Any]) -> None:
        """Take in one chat entry: a call's name and arguments, a result's file operations, each
        applied once: one applied when the entry was handed over before (its observing raised
        after it) is skipped; one recorded then whose file was not shown yet is shown."""
        i = e["i"]
        done, unshown = self._partial[1:] if self._partial[0] == i else (0, None)
        for k, (op, ts, result_id) in enumerate(self._ops(e, objects)):
            if k < done:
                continue
            show = unshown if k == done and unshown is not None else self._record(op, ts, result_id)
            self._partial = (i, k, show)
            show()
            self._partial = (i, k + 1, None)
        if e["role"] == "tool":
            self._calls.pop(e.get("tool_call_id", ""), None)  # answered: forgotten

    def _ops(self, e: Mapping[str, Any], objects: Mapping[str, Any]) -> Iterator[tuple[FileOp, int | None, str | None]]:
        """The file operations of one chat entry in order, each with its valid time and the
        result it collapses: a result's read, write or edit (and the call's other files), or what
        its shell command wrote. Each is taken once the ones before it are applied."""
        for c in e.get("tool_calls") or ():
            self._calls[c["id"]] = (c["name"], c["arguments"])
        if e["role"] in ("user", "system") and self.root is None:
            # Codex's environment message, OpenCode's system prompt (any agent's, as the proxy
            # reads it): when nobody said it
            self.root = self.find_root(e.get("text") or "")
        if e["role"] != "tool":
            return
        name, args = self._calls.get(e.get("tool_call_id", ""), ("", {}))
        obj = objects.get(e.get("object", ""))
        if obj is None:
            return
        if (e.get("extra") or {}).get("ours") or self.names is None:
            return  # our own tool's report (context_os's read): it holds no file text
        output = stdout_of(obj.content, e.get("extra")) if isinstance(obj.content, str) else ""
        role = self.names.role(name, args)
        if role == "read" and _media(obj.meta.get("blocks")):
            return  # a read of an image or a PDF (Claude Code's Read): its text is none of the file's
        op = file_op(role, args, output, is_error=bool(obj.meta.get("is_error")))
        ts = e.get("ts")
        if op is not None:
            if any(o.kind in ("read", "write") for o in (op, *op.more)):
                # its text is a file object's from now on: collapsed, it never shows (layout 11)
                self.session.mark_file_text(obj.id, [] if op.kind == "read" else written_keys(args))
            yield op, ts, obj.id
            for other in op.more:  # the call's other files (a patch of several)
                yield other, ts, None
        elif role == "bash":  # every harness's shell (Pi's bash, Claude Code's Bash, Codex's shells...)
            yield from self._shell_wrote(args, ts, output)
        elif role is None and not obj.meta.get("is_error"):
            # a tool the harness's preset gives no role (an editor it does not know, a notebook's)
            # that names a known file may have changed it: unknown until read again, never shown wrong
            for key in self._named(args):
                yield FileOp("edit", key), ts, None

    def _named(self, args: Any) -> list[str]:
        """The known files a call's arguments name (``UNKNOWN_TOOL_PATHS``, top level)."""
        args = json_arguments(args)
        if args is None:
            return []
        paths = [v for k in UNKNOWN_TOOL_PATHS if isinstance(v := args.get(k), str) and v]
        keys = [file_key(p, self.root) for p in paths]
        return [k for k in dict.fromkeys(keys) if k in self.files]

    def _shell_wrote(self, args: Any, ts: int | None, output: str = "") -> Iterator[tuple[FileOp, int | None, None]]:
        """What a shell command wrote: a file a heredoc wrote whole is at that text; a known file
        it changed in a way its text does not say (``sed -i``, a redirection, ``mv``...) is at a
        version whose content is unknown until it is read again (else its last text would show as
        current). A file's text is kept as a Codex shell read prints it and a patch adds it:
        without its last line break (with it, the heredoc's file read back whole disagreed by one
        line, as if changed elsewhere)."""
        changes = shell_changes(args, output)
        for path, text in changes.written:
            yield FileOp("write", path, text=text.removesuffix("\n")), ts, None
        done: set[str] = set()
        failed = _COPY_FAILED.search(output) is not None
        for source, target in changes.copies:
            copied = None if failed else self._whole(source)
            if copied is not None:  # cp A B: B holds A's text (each looked for once the ones before are applied)
                yield FileOp("write", target, text=copied), ts, None
            elif (key := file_key(target, self.root)) in self.files and key not in done:
                done.add(key)
                yield FileOp("edit", key), ts, None
        for key in self._shell_changed(changes, output):  # (each looked for once the ones before are applied)
            if key not in done:
                done.add(key)
                yield FileOp("edit", key), ts, None

    def _whole(self, path: str) -> str | None:
        """The whole text of the known file at ``path``; None where any of it is not known."""
        vf = self.files.get(file_key(path, self.root))
        if vf is None or vf.lines is None or vf.open_end or None in vf.lines:
            return None
        return "\n".join(line for line in vf.lines if line is not None)

    def _shell_changed(self, changes: ShellChanges, output: str) -> Iterator[str]:
        """The known files ``changes`` says a shell call changed: those it names, those below what
        git put back (``git checkout X``: paths if X names any, else a branch: the work tree),
        those a glob matches, those a formatter rewrote."""
        yield from (k for p in changes.changed if (k := file_key(p, self.root)) in self.files)
        trees = list(changes.trees) + [k for g in changes.globs for k in self._matching(g)]
        for paths, work_tree in changes.either:
            trees += [p for p in paths if self._below(p)] or [work_tree]
        for tree in trees:
            yield from self._below(tree)
        yield from self._formatted(changes, formatter_report(output))

    def _formatted(self, changes: ShellChanges, report: FormatterReport | None) -> list[str]:
        """The known files a formatter the call ran rewrote, as far as the call says which: those
        its output names (Black's ``reformatted PATH``, Prettier's ``PATH 12ms``), else those its
        command names (``gofmt -w a.go``, ``black a.py``) unless its output says it rewrote none.
        A count alone (Biome's ``Fixed 2 files.``, ``1 file reformatted``) says not which of the
        files below a directory: not followed (a file is not taken for changed on a guess)."""
        if report is not None and report.paths:
            where = changes.directory or "."
            paths = [p if posixpath.isabs(p) else posixpath.join(where, p) for p in report.paths]
        elif report is None or report.fixed > 0:
            paths = changes.formatted
        else:
            return []
        return [k for p in paths if (k := file_key(p, self.root)) in self.files]

    def _matching(self, glob: str) -> list[str]:
        """The files known here that the shell glob ``glob`` names (``core/*.ts``: a ``*`` within
        one directory)."""
        parts = file_key(glob, self.root).split("/")
        return [
            k for k in self.files if len(ks := k.split("/")) == len(parts) and all(map(fnmatch.fnmatchcase, ks, parts))
        ]

    def _below(self, path: str) -> list[str]:
        """The files known here that ``path`` names: itself, or every one below it (a directory)."""
        key = file_key(path, self.root)
        if key in self.files:
            return [key]
        if key == ".":
            return [k for k in self.files if not posixpath.isabs(k) and not k.startswith("~")]
        prefix = key.rstrip("/") + "/"
        return [k for k in self.files if k.startswith(prefix)]

    def apply(self, op: FileOp, ts: int | None, result_id: str | None = None) -> VirtualFile:
        """Record what ``op`` says about its file and show the file; collapse ``result_id``."""
        return self._record(op, ts, result_id)()

    def _record(self, op: FileOp, ts: int | None, result_id: str | None) -> Callable[[], VirtualFile]:
        """Record what ``op`` says about its file; return the step that shows the file and
        collapses ``result_id`` (it may run again: what it did stands). What is known of the file
        changes once its version is recorded: an operation whose recording raised (the store out
        of reach) leaves it as it was, to be applied again (applied twice, an edit would not be
        found in the text it made, and the file's content would be lost)."""
        op = replace(op, path=file_key(op.path, self.root))
        known = self.files.get(op.path)
        if known is None:
            key = blake3.blake3(f"{self.session.id}\0{op.path}".encode()).hexdigest()[:16]
            vf = VirtualFile("file:" + key, op.path)
        else:  # a copy: its lines change in place
            vf = replace(known, lines=None if known.lines is None else list(known.lines), touches=list(known.touches))
        before, changes = vf.text(), vf.changes
        turn = self.session.view.turn
        if op.kind == "read":
            assert op.text is not None
            vf.read(op, turn)
            cause, reason = "read", "read"
        elif op.kind == "write":
            assert op.text is not None
            vf.write(op.text, turn)
            cause, reason = "write", "written"
        else:
            vf.edit(op, turn)
            cause, reason = "edit", "edited"
        after = vf.text()
        on_disk = self._on_disk(op.path, cause)
        if on_disk is not None:
            self.files[op.path] = vf
            return partial(self._show_disk, on_disk, vf, self._focus(vf, turn, stored=False), reason, result_id)
        if vf.latest is None or after != before or op.kind != "read":
            self._store(vf, ts, cause, op)
        self.files[op.path] = vf
        if op.kind in ("read", "write"):
            if result_id is not None:
                self.views[result_id] = (op.path, vf.changes, op.kind)
            self.min_view[op.path] = min(self.min_view.get(op.path, vf.changes), vf.changes)
        latest = vf.latest
        assert latest is not None
        focus = self._focus(vf, turn)
        state = "active" if after is not None else "inactive"
        # a read that only adds lines leaves what the history showed of the file true
        changed = vf.changes != changes
        collapsed = f"its content is shown by {vf.id} version {vf.version}"

        def show() -> VirtualFile:
            self.session.show(
                vf.id, version=latest, state=state, actor="agent", reason=reason, focus=focus, changed=changed
            )
            self._collapse(result_id, after is not None, collapsed)
            return vf

        return show

    def _on_disk(self, path: str, cause: str) -> Indexed | None:
        """The file at ``path`` as the workspace's index records it now; None without a workspace
        or for a path outside it, or a file it cannot read there (then it is kept virtual). A file
        the index knows that is gone from the disk is its object, recorded missing: not a second
        object, virtual, showing what the tools showed of a file no longer there (a history that
        reads or edits a file deleted since, taken in anew: a proxy's fork of a conversation, a
        session resumed)."""
        if self.disk is None:
            return None
        try:
            real = self.disk.workspace.resolve(path, must_exist=False)
        except ContextOSError:
            return None  # outside the workspace, or not a path it allows
        index = self.disk.index
        try:
            return index.index(real, read=True, cause=cause)
        except FileUnreadable:
            known = None if os.path.lexists(real) else index.lookup(real)
            return None if known is None else index.refresh(known.id, None, cause=cause)

    def _show_disk(
        self, idx: Indexed, vf: VirtualFile, focus: list[list[int]], reason: str, result_id: str | None
    ) -> VirtualFile:
        """Show the disk's version of a file a tool touched, its lines touched in focus (a file's
        own line numbers: the disk's text has no notes); collapse the result that showed it."""
        state = "active" if idx.content is not None else "inactive"
        self.session.show(idx.id, version=idx.version, state=state, actor="agent", reason=reason, focus=focus)
        # (a file gone from the disk since: what the result showed is no more, as its object says)
        gone = bool(idx.meta.get("missing"))
        self._collapse(result_id, idx.content is not None or gone, f"its content is shown by {idx.id}")
        return vf

    def _collapse(self, result_id: str | None, shown: bool, reason: str) -> None:
        """Collapse the tool result whose text a file object now shows."""
        if result_id is None or not shown:
            return
        obj = self.session.view.objects.get(result_id)
        if obj is not None and obj.in_history and not obj.pinned:
            self.session.deactivate(result_id, actor="policy", reason=reason)

    def _focus(self, vf: VirtualFile, turn: int, *, stored: bool = True) -> list[list[int]]:
        """The lines touched lately, newest first, as lines of the stored text (``stored``), or
        as the file's own (the disk's text)."""
        idle = self.session.view.policy.file_idle_turns
        recent = [t for t in vf.touches if idle is None or turn - t[0] <= idle][-8:]
        vf.touches = recent
        if vf.lines is None:
            return []
        where = vf.content_line_map() if stored else list(range(1, len(vf.lines) + 1))
        n = len(where)
        # a write or a whole-file read says nothing about where the agent works, narrower ones do
        narrow = [t for t in recent if (t[2] - t[1] + 1) * 2 <= n] or recent[-1:]
        out: list[list[int]] = []
        for _, a, b in reversed(narrow):
            a, b = max(1, min(a, n)), max(1, min(b, n))
            if n and [where[a - 1], where[b - 1]] not in out:
                out.append([where[a - 1], where[b - 1]])
        return out

    def _store(self, vf: VirtualFile, ts: int | None, cause: str, op: FileOp) -> None:
        from ..files.index import record_virtual

        text = vf.text()
        vf.version += 1
        extra: dict[str, Any] = {"changes": vf.changes}
        if vf.lines is not None:
            known = sum(1 for line in vf.lines if line is not None)
            extra["lines"] = len(vf.lines)
            if known < len(vf.lines):
                extra["lines_known"] = known
        if op.kind == "edit":
            extra["edits"] = len(op.edits) or (1 if op.insert is not None else 0)
        vf.latest = record_virtual(
            self.session.store,
            vf.id,
            abs_path=vf.path,
            root=self.root,
            text=text,
            version=vf.version,
            cause=cause,
            omitted="an edit not applicable to the part of the file read so far: read it again",
            extra=extra,
            at=ts or None,
            after=max(self._last_vt, vf.latest.valid_time if vf.latest else -1),
        )
        self._last_vt = vf.latest.valid_time

    def stale_naive(self) -> bool:
        """Whether the naive transcript so far shows some file at an older state than its latest."""
        return any(self.files[p].changes > c for p, c in self.min_view.items())

    def stale_assembled(self) -> bool:
        """Whether the assembled context shows some file at an older state than its latest: a read
        or write call still showing the text it read or wrote after the file changed (expanded;
        or collapsed, a result as its own text or a call's arguments not elided: layouts before
        11 showed a short one so), or a file object not at its latest version.
        While the session passes through unchanged, what the harness itself shows."""
        view = self.session.view
        if not view.managed:
            return self.stale_naive()
        for oid, (path, changes, kind) in self.views.items():
            if changes < self.files[path].changes:
                obj = view.objects.get(oid)
                if obj is not None and _shows_text(view, obj, kind):
                    return True
        for vf in self.files.values():
            obj = view.objects.get(vf.id)
            shown = obj.version if obj is not None and obj.in_tail else None
            latest = vf.latest.doc if vf.latest is not None else None
            if shown is not None and latest is not None and shown[2] != latest["object_hash"]:
                return True
        return False

    def target_shown(self, path: str, edits: list[tuple[str, str]]) -> tuple[bool, bool]:
        """(the file is active at its latest version, the edits' old texts are all in what it shows;
        an edit with none, an insertion or a line range, shows none).
        While the session passes through unchanged, the harness's own context shows a file's current
        content when it is known and was read or written (every edit since is in it too)."""
        path = file_key(path, self.root)
        vf = self.files.get(path)
        view = self.session.view
        if not view.managed:
            text = vf.text() if vf is not None and path in self.min_view else None
            return text is not None, text is not None and bool(edits) and all(old in text for old, _ in edits)
        obj = view.objects.get(vf.id) if vf is not None else None
        if vf is None or obj is None or not obj.in_tail or vf.latest is None or obj.version is None:
            return False, False
        assert vf.latest.doc is not None
        if obj.version[2] != vf.latest.doc["object_hash"] or obj.content is None:
            return False, False
        shown = active_text(obj, view.policy.file_view_chars, view.layout)
        return True, bool(edits) and all(old in shown for old, _ in edits)
