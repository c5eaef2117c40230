"""The agent's file tools, bound to one session and one workspace.

``FileTools(session, workspace)`` registers into the session's tool registry (context/tools.py:
one dispatcher, ``registry.call(name, arguments) -> str``; ``call`` is the same), as neutral
JSON schemas (``FILE_TOOLS``):

* ``read(path)``: index the file (if new or changed) → metadata pool → activate. The result
  reports each step: ``indexed`` (``new`` | ``already indexed`` | ``new version``), ``pool``
  (``added`` | ``already in pool``), ``active`` (``activated`` | ``already active`` |
  ``refreshed`` | ``metadata only: <why>``). The text itself is shown in the active pool, not
  in the tool result, so it is in the context exactly once.
* ``activate(id)``, ``deactivate(id)``, ``pin(id)``, ``unpin(id)``: like the context tools, but
  ``id`` may also be a file path (``activate(path)`` is ``read(path)``).
* ``write``, ``edit`` (one ``oldText``→``newText`` replacement, or ``edits=[…]`` applied to the
  original text), ``ls``, ``find``, ``grep``: wrapped host tools. The file-system work is
  delegated to a host callable when one is given (``host={"edit": fn, …}``, each
  ``fn(arguments) -> output text``), else done by the reference implementations here; then the
  objects are updated: a written/edited file gets a new version with its diff and is shown
  active (actor ``agent``); every file ``ls``/``find``/``grep`` discovered is indexed metadata-only
  and enters the metadata pool inactive. When the store is out of reach after the change is made
  on disk, the result says so (``recorded: false``) rather than report the change as failed (a
  repeated edit could apply twice); the version is recorded when the store answers (the tracker,
  or the file's next read, edit or write). A ``read`` then returns the file's text in its result
  (``recorded: false``), not kept current.
* ``observe(command, output)``: for bash and other tools, best effort: paths named in the
  command or its output that are indexed files are re-checked (a new version if they changed,
  missing if they vanished, the same object if they were moved). Those changes are not shown:
  the session marks the files it shows as stale.
* ``after_tool(name, arguments, output)``: the same updates for a tool the host already ran.

Every result goes through the workspace's redactor before it is returned (the registry's
``post``).

This module never reads, writes, creates or lists a file of the workspace by its name: every
path is checked by ``Workspace.resolve`` and then opened again through ``Workspace.open`` /
``walk`` (relative to opened directories, refusing any symlink swapped in since the check), and
files are replaced atomically in the directory that was opened. The few looks at a name that
remain (``os.path.isfile`` in discovery and ``observe``, the parsing of host output) only pick
candidates; what gets recorded is what the index then opens. No ``OSError`` leaves a tool:
errors are typed.
"""

from __future__ import annotations

import bisect
import fnmatch
import json
import os
import re
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from itertools import islice
from pathlib import Path
from typing import Any

import regex

from ..context.session import Session, shows_latest_file
from ..context.tools import Tool, ToolRegistry, context_tools, object_schema
from ..errors import ContextOSError, FileUnreadable, InputError, StoreError, StoreUnavailable
from ..objects import KINDS
from ..store.base import Version
from ..tokens import estimate_tokens
from .index import EVICTED_BYTES, FileIndex, Indexed, file_meta_summary
from .tracker import FileTracker
from .workspace import Workspace

__all__ = ["FILE_TOOLS", "FileTools", "HostTool", "apply_edits"]

HostTool = Callable[[dict[str, Any]], str]
"""A host's own implementation of a tool: takes the call's arguments, returns its output text."""

_STR = {"type": "string"}
_INT = {"type": "integer", "minimum": 1}
_BOOL = {"type": "boolean"}
_EDIT_PAIR = {
    "type": "object",
    "properties": {
        "oldText": {"type": "string", "description": "Exact text to replace; must occur exactly once."},
        "newText": {"type": "string", "description": "The replacement."},
    },
    "required": ["oldText", "newText"],
    "additionalProperties": False,
}

FILE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "read",
        "description": (
            "Read a file: it becomes an object in your context, its text shown in the context_os block at the end "
            "(not in this result). Your own write and edit show its new version there; a change made any other way "
            "(a shell command, another program) only marks the block stale, until you read it again. The result "
            "reports indexing, pool and active status."
        ),
        "parameters": object_schema(
            {"path": {**_STR, "description": "File path, relative to the workspace."}}, ["path"]
        ),
    },
    {
        "name": "write",
        "description": "Create or overwrite a file with the given text (parent directories are created).",
        "parameters": object_schema({"path": _STR, "content": _STR}, ["path", "content"]),
    },
    {
        "name": "edit",
        "description": (
            "Replace exact text in a file: oldText must occur exactly once. For several changes at once pass "
            "edits=[{oldText, newText}, …], each matched against the original file, non-overlapping."
        ),
        "parameters": object_schema(
            {"path": _STR, "oldText": _STR, "newText": _STR, "edits": {"type": "array", "items": _EDIT_PAIR}},
            ["path"],
        ),
    },
    {
        "name": "ls",
        "description": "List a directory (directories end with /). Listed files become metadata-only objects.",
        "parameters": object_schema({"path": _STR, "limit": _INT}, []),
    },
    {
        "name": "find",
        "description": "Find files by glob pattern (e.g. '*.py', 'src/**/test_*.py', '*.{ts,tsx}') below path.",
        "parameters": object_schema({"pattern": _STR, "path": _STR, "limit": _INT}, ["pattern"]),
    },
    {
        "name": "grep",
        "description": "Search file contents for a regular expression (or literal text); prints path:line:text.",
        "parameters": object_schema(
            {"pattern": _STR, "path": _STR, "glob": _STR, "ignoreCase": _BOOL, "literal": _BOOL, "limit": _INT},
            ["pattern"],
        ),
    },
]
"""The file tools' neutral schemas. With them, the context tools (``activate``, ``deactivate``,
``pin``, ``unpin``: context/tools.py) also take a file path."""

_PATHS_TOO = " Takes an object id or a file path."

_TEXT_TOOLS = frozenset({"ls", "find", "grep"})
_ID_PREFIXES = tuple(f"{k}:" for k in KINDS)
_TOKEN_SPLIT = re.compile(r"[\s'\"`()\[\]{}<>|;&,=]+")
_GREP_LINE_NUMBER = re.compile(r"(?=[:-]\d+[:-])")
"""Where the path of a ``grep -n`` / ``rg`` line may end: before ``:12:`` (a match) or ``-12-``
(a context line), which a file name may hold too (``_posts/2024-01-15-hello.md:3:…``)."""
_SHORT_REF = re.compile(r"r\d+")
_PLACEHOLDER = re.compile(r"\[REDACTED:[^\]\s]*\]")
"""What the redactor puts where a secret was."""
_ID_LIKE = re.compile(r"[a-z]+:")
"""What an object id of a kind this does not know starts with (``nope:xyz``)."""
ID_HINT = "file:…, toolcall:…, recall:…, memory:…, message:…, or r12 for a tool result"
"""The ids an agent's tools take, a tool result's short ref (``r12``) among them, as collapsed
results name themselves."""


def apply_edits(text: str, edits: list[tuple[str, str]], shown_path: str) -> tuple[str, int]:
    """Apply exact replacements, each matched against the original ``text``: every ``oldText``
    must occur exactly once and the matches must not overlap. In a text with CRLF line breaks
    ``oldText`` is matched with every CRLF of both taken as ``\\n``, and a match takes whole
    CRLFs (one that began at the ``\\n`` of a CRLF left its ``\\r`` behind); ``newText``'s line
    breaks become CRLFs in a text whose every line break is one, and where ``oldText``'s ``\\n``
    matched a CRLF. Returns (new text, replacements)."""
    if not edits:
        raise InputError(f"edit {shown_path}: no edits given (pass oldText/newText or edits=[…])")
    crlf = "\r\n" in text
    # every line ends with CRLF (a Windows file): the lines an edit adds must too, not a bare LF
    all_crlf = crlf and text.count("\n") == text.count("\r\n")
    plain = text.replace("\r\n", "\n") if crlf else text
    # where each CRLF's "\n" is in ``plain``: a position there is as many characters further in
    # ``text`` as CRLFs come before it (a match starting at one starts at its "\r")
    lfs = [at - k for k, at in enumerate(m.start() for m in re.finditer("\r\n", text))] if crlf else []
    spans: list[tuple[int, int, str, int]] = []
    for n, (old, new) in enumerate(edits, 1):
        which = f" (edit {n} of {len(edits)})" if len(edits) > 1 else ""
        if not old:
            raise InputError(f"edit {shown_path}{which}: oldText is empty")
        wanted = old.replace("\r\n", "\n") if crlf else old
        count = plain.count(wanted)
        if count == 1:  # str.count skips overlapping occurrences: "}\n}" is twice in "}\n}\n}"
            count = _overlapping(plain, wanted)
        if count == 0:
            hint = (
                "; secret values are shown to you as [REDACTED:…] but are not redacted on disk: edit around them"
                if "[REDACTED:" in old
                else ""
            )
            raise InputError(
                f"edit {shown_path}{which}: oldText was not found in the file (it must match exactly, "
                f"including whitespace and indentation){hint}"
            )
        if count > 1:
            raise InputError(
                f"edit {shown_path}{which}: oldText occurs {count} times; include more surrounding "
                "lines so that it matches exactly once"
            )
        found = plain.index(wanted)
        start = found + bisect.bisect_left(lfs, found)
        end = found + len(wanted) + bisect.bisect_left(lfs, found + len(wanted))
        if all_crlf or text.count("\r\n", start, end) > old.count("\r\n"):
            new = _crlf(new)
        spans.append((start, end, new, n))
    spans.sort()
    for (_, end_a, _, a), (start_b, _, _, b) in zip(spans, spans[1:], strict=False):
        if start_b < end_a:
            raise InputError(f"edit {shown_path}: edits {min(a, b)} and {max(a, b)} overlap; merge them into one")
    out = text
    for start, end, new, _ in reversed(spans):
        out = out[:start] + new + out[end:]
    if out == text:
        raise InputError(f"edit {shown_path}: the edit changes nothing (newText equals oldText)")
    return out, len(spans)


def _overlapping(text: str, part: str) -> int:
    """How often ``part`` occurs in ``text``, overlapping occurrences too."""
    count, at = 0, text.find(part)
    while at >= 0:
        count, at = count + 1, text.find(part, at + 1)
    return count


def _crlf(text: str) -> str:
    """``text`` with every line break a CRLF (those it has already kept as they are)."""
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def _glob_automaton(pattern: str) -> Callable[[str], bool]:
    """Whether a whole relative path matches a path glob: ``**/`` any directories (none too),
    ``**`` anything (``/`` too), ``*`` anything in one name, ``?`` one character of a name,
    ``[…]`` one of a set (``[!…]`` or ``[^…]``: none of it; a ``[`` without its ``]`` is itself).
    It runs the glob as an automaton, every way of matching at once, one step per character of the
    path: a regex of it backtracked without end over a long path when ``**`` stood inside a name
    (``src/**a**a**a**a**b``, minutes for one path)."""
    steps: list[tuple[str, Any]] = []  # (kind, the character or set) per part of the glob
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            steps.append(("dirs", None))
            i += 3
        elif pattern.startswith("**", i):
            steps.append(("any", None))
            i += 2
        elif pattern[i] in "*?":
            steps.append(("name" if pattern[i] == "*" else "char", None))
            i += 1
        else:
            j = pattern.find("]", i + 1) if pattern[i] == "[" else -1
            body = pattern[i + 1 : j].replace("\\", "\\\\")
            body = "^" + body[1:] if body.startswith(("!", "^")) else body
            try:
                one = re.compile("[" + body + "]") if j > 0 else None
            except re.error:  # an empty set, a range backwards: the [ is itself
                one = None
            if one is not None:
                steps.append(("set", one))
                i = j + 1
            else:
                steps.append(("literal", pattern[i]))
                i += 1
    end = len(steps)

    def closure(states: set[int]) -> set[int]:
        # a state is the number of steps done; -k - 1 is inside step k's "**/" (a "/" ends it)
        todo = list(states)
        while todo:
            k = todo.pop()
            if 0 <= k < end and steps[k][0] in ("dirs", "any", "name") and k + 1 not in states:
                states.add(k + 1)
                todo.append(k + 1)
        return states

    def match(rel: str) -> bool:
        states = closure({0})
        for c in rel:
            after: set[int] = set()
            for k in states:
                if k < 0:  # inside a "**/": more of it, or its "/" ends it
                    after.add(k)
                    if c == "/":
                        after.add(-k)
                    continue
                if k == end:
                    continue
                kind, arg = steps[k]
                if kind == "dirs":
                    after.add(-k - 1)
                    if c == "/":
                        after.add(k + 1)
                elif kind == "any" or (kind == "name" and c != "/"):
                    after.add(k)
                elif (
                    (kind == "char" and c != "/")
                    or (kind == "set" and arg.match(c) is not None)
                    or (kind == "literal" and c == arg)
                ):
                    after.add(k + 1)
            if not after:
                return False
            states = closure(after)
        return end in states

    return match


def _glob_matcher(pattern: str) -> Callable[[str, str], bool]:
    """Whether a file matches a ``find`` pattern or a ``grep`` glob, given (its path relative to
    the directory searched, its name): a pattern without ``/`` matches the name, one with a ``/``
    the relative path (``**``: any directories; ``./*.py``: the files of the directory itself);
    ``{a,b}`` is either, as rg, fd and Claude Code's glob take it (``*.{ts,tsx}``)."""
    alternatives = _braces(pattern)
    if "/" in pattern:
        matchers = [_path_glob(_under_base(p)) for p in alternatives]
        return lambda rel, name: any(m(rel) for m in matchers)
    return lambda rel, name: any(fnmatch.fnmatchcase(name, p) for p in alternatives)


def _path_glob(pattern: str) -> Callable[[str], bool]:
    """Whether a relative path matches a glob with ``/``, as ``_glob_automaton`` says, segment by
    segment when every ``**`` is a whole segment (the regex of ``**/**/**/…/x`` or
    ``src/*a*a*a*a*b`` backtracked for minutes on one path, holding the session): each segment as
    ``fnmatch`` matches a name (without backtracking), ``**`` as any directories between, or at
    the end as anything below (one segment or more). A ``**`` inside a segment (``src/**.py``)
    goes to the automaton."""
    parts = pattern.split("/")
    if any("**" in part and part != "**" for part in parts):
        return _glob_automaton(pattern)
    parts = [part for k, part in enumerate(parts) if not (part == "**" and k and parts[k - 1] == "**")]
    # fnmatch takes [!a] for a set's complement, and [^a] as ^ or a; _glob_automaton both as [!a]
    rxs = [None if part == "**" else re.compile(fnmatch.translate(part.replace("[^", "[!"))) for part in parts]

    def match(rel: str) -> bool:
        segments = rel.split("/")
        reach = [True] + [False] * len(segments)  # reach[j]: the parts so far match segments[:j]
        for k, rx in enumerate(rxs):
            if rx is None:  # any segments (below the last part: at least one)
                at_least = 1 if k == len(rxs) - 1 else 0
                first = next((j for j, r in enumerate(reach) if r), None)
                if first is None:
                    return False
                reach = [j >= first + at_least for j in range(len(reach))]
            else:
                reach = [False] + [reach[j] and rx.match(segments[j]) is not None for j in range(len(segments))]
        return reach[-1]

    return match


def _braces(pattern: str, limit: int = 256, steps: int = 1024) -> list[str]:
    """``pattern`` once per alternative of its ``{a,b}`` groups (nested ones too; at most
    ``limit``); a brace without a closing one or a comma inside is itself. The groups are taken
    one at a time from a stack, at most ``steps`` of them (a recursion per group overflowed
    Python's stack on a pattern of a thousand groups, a ``RecursionError`` out of the tool); a
    pattern past that is itself."""
    out: list[str] = []
    todo = [pattern]
    while todo and len(out) < limit:
        current = todo.pop()
        group = _brace_group(current)
        if group is None:
            out.append(current)
            continue
        steps -= 1
        if steps < 0:
            return [pattern]
        start, commas, end = group
        bounds = [start, *commas, end]
        alternatives = [
            current[:start] + current[a + 1 : b] + current[end + 1 :] for a, b in zip(bounds, bounds[1:], strict=False)
        ]
        todo += reversed(alternatives)  # the first alternative's expansions first, as written
    return out


def _brace_group(pattern: str) -> tuple[int, list[int], int] | None:
    """(start, its commas, end) of the first ``{…}`` group of ``pattern`` with a comma directly
    inside; None if there is none (a brace without its closing one ends the search)."""
    start = pattern.find("{")
    while start >= 0:
        depth, commas, end = 0, [], -1
        for k in range(start, len(pattern)):
            if pattern[k] == "{":
                depth += 1
            elif pattern[k] == "}":
                depth -= 1
                if depth == 0:
                    end = k
                    break
            elif pattern[k] == "," and depth == 1:
                commas.append(k)
        if end < 0:
            return None
        if commas:
            return start, commas, end
        start = pattern.find("{", end + 1)
    return None


_BINARY_SNIFF = 8192
"""How much of a file's start ``grep`` reads to know it is binary (a NUL in it): only that much
of a binary file is read."""

_GREP_LINE_SECONDS = 50e-6
"""What ``grep``'s time bound grows by per line searched: ten times what an ordinary pattern takes."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _listed(name: str) -> str:
    """A path as ``ls``/``find``/``grep`` list it: a name holding a line break or another control
    character as a JSON string (``"a\\nb.txt"``, which the agent can pass back as a path), not
    as two lines that look like two files."""
    return json.dumps(name, ensure_ascii=False) if _CONTROL.search(name) else name


def _around(line: str, start: int, end: int, width: int = 500) -> str:
    """A ``grep`` hit's line (redacted already), at most ``width`` characters of it and the
    placeholders the cuts fall in: from its start, or, when the match (``start``-``end``) lies
    past that, from a little before the match; a cut says where (the first ``width`` characters
    alone hid a match further in a minified file's one line)."""
    if len(line) <= width:
        return line
    at = 0 if end <= width else _unsplit(line, max(0, min(start - 100, len(line) - width)))
    stop = _unsplit(line, at + width, forward=True)
    head = f"[… from character {at + 1:,}] " if at else ""
    rest = len(line) - stop
    return head + line[at:stop] + (f" [… {rest:,} more characters]" if rest > 0 else "")


def _unsplit(text: str, cut: int, *, forward: bool = False) -> int:
    """``cut``, or, where it falls inside a redaction placeholder of ``text``, the placeholder's
    start (``forward``: its end): a cut never shows half of one."""
    begin = text.rfind("[REDACTED:", 0, cut + len("[REDACTED:") - 1)  # the last one starting before the cut
    if begin < 0:
        return cut
    whole = _PLACEHOLDER.match(text, begin)
    if whole is None or whole.end() <= cut:
        return cut
    return whole.end() if forward else begin


def _redacted_hit(line: str, start: int, end: int, secrets: list[tuple[int, int, str]]) -> tuple[str, int, int]:
    """``line`` with its ``secrets`` (as ``Redactor.find`` gives them) replaced by their
    placeholders, and where the match ``start``-``end`` lies in that: a match end inside a
    secret is at its placeholder's start or end."""
    placeholders = [f"[REDACTED:{name}]" for _, _, name in secrets]

    def where(pos: int, after: bool) -> int:
        shift = 0
        for (s, e, _), placeholder in zip(secrets, placeholders, strict=True):
            if e <= pos:
                shift += e - s - len(placeholder)
            elif s < pos:
                return s - shift + (len(placeholder) if after else 0)
            else:
                break
        return pos - shift

    parts: list[str] = []
    pos = 0
    for (s, e, _), placeholder in zip(secrets, placeholders, strict=True):
        parts += [line[pos:s], placeholder]
        pos = e
    parts.append(line[pos:])
    return "".join(parts), where(start, False), where(end, True)


def _under_base(pattern: str) -> str:
    """A path glob as it is matched, relative to the directory searched: ``./src/*.py`` and
    ``/src/*.py`` are ``src/*.py`` (the ``./`` that ``find .`` prints matched no relative path)."""
    while pattern.startswith("./"):
        pattern = pattern[2:].lstrip("/")
    return pattern.lstrip("/")


def _cap(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, never inside a placeholder; redact it first
    (``FileTools._capped``): a secret the cut split is not recognised after."""
    if len(text) <= limit:
        return text
    cut = _unsplit(text, limit)
    return text[:cut] + f"\n[... output truncated: {len(text) - cut:,} more characters]"


def _utf8(text: str, what: str) -> bytes:
    """``text`` as UTF-8; text no file can hold (a lone surrogate from a JSON escape) is bad input."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"{what}: the text is not valid Unicode ({e.reason} at position {e.start})") from None


def _is_dir(st: os.stat_result | None) -> bool:
    return st is not None and stat.S_ISDIR(st.st_mode)


class FileTools:
    """File tools for the agent of ``session`` in ``workspace``.

    ``tracker``: a running ``FileTracker`` to share its index with (files the tools index are then
    tracked at once); or ``index``: a ``FileIndex`` to share. ``host``: the host's own
    implementations of ``write``/``edit``/``ls``/``find``/``grep``. ``max_discovered``: at most
    this many files per ls/find/grep call enter the metadata pool. ``grep_seconds``: how long one
    ``grep``'s pattern may take over all the lines it searches (and 50 µs more a line) before the
    call fails as too slow.
    """

    def __init__(
        self,
        session: Session,
        workspace: Workspace,
        *,
        index: FileIndex | None = None,
        tracker: FileTracker | None = None,
        host: Mapping[str, HostTool] | None = None,
        max_discovered: int = 100,
        max_output_chars: int = 50_000,
        grep_seconds: float = 5.0,
    ):
        if not isinstance(workspace, Workspace):  # a path: it failed at the first tool call
            raise TypeError(
                f"FileTools takes a Workspace, got {type(workspace).__name__} {workspace!r}:"
                f" FileTools(session, Workspace({str(workspace)!r}))"
            )
        self.session = session
        self.workspace = workspace
        self.tracker = tracker
        self.index = index or (tracker.index if tracker is not None else FileIndex(session.store, workspace))
        self.host = dict(host or {})
        self.max_discovered = max_discovered
        self.max_output_chars = max_output_chars
        self.grep_seconds = grep_seconds
        self.registry = self._registry()
        """The one registry of this session's tools: the context tools and the file tools."""
        session.manage()  # a read's result reports; the text it read shows in a block only

    # --- dispatch ------------------------------------------------------------------------------

    def _registry(self) -> ToolRegistry:
        """The session's context tools, taking paths too, and the file tools; outputs redacted."""
        registry = context_tools(self.session)
        registry.post = lambda text: self.workspace.redact(text)[0]
        for name in ("activate", "deactivate", "pin", "unpin", "lines"):
            tool = registry[name]
            registry.register(tool.with_run(getattr(self, name), description=tool.description + _PATHS_TOO))
        for schema in FILE_TOOLS:
            registry.register(
                Tool(schema["name"], schema["description"], schema["parameters"], getattr(self, schema["name"]))
            )
        return registry

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return self.registry.schemas

    def names(self) -> frozenset[str]:
        return self.registry.names

    def call(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """Run one tool for the agent (``ToolRegistry.call``): ls/find/grep return their listing
        text, the others a JSON object; errors come back as ``{"error": …, "type": …}``."""
        return self.registry.call(name, arguments)

    def _host(self, name: str, args: dict[str, Any]) -> str:
        """Run the host's own implementation of a tool; its failure becomes a clean tool error."""
        try:
            return str(self.host[name](args))
        except ContextOSError:
            raise
        except Exception as e:
            raise ContextOSError(f"{name}: the host tool failed: {type(e).__name__}: {e}") from e

    # --- reading and context state -------------------------------------------------------------

    def _show(self, idx: Indexed, *, reason: str, focus: list[list[int]] | None = None) -> str:
        """Show the indexed version in the session (active if it has content); the active status.
        ``focus``: as ``Session.show`` takes it (None keeps the one it has)."""
        obj = self.session.view.objects.get(idx.id)
        assert idx.version.doc is not None
        if idx.content is None:
            self.session.show(idx.id, version=idx.version, state="inactive", actor="agent", reason=reason)
            return f"metadata only: {idx.meta.get('content_omitted', 'no content')}"
        same = obj is not None and obj.version is not None and obj.version[2] == idx.version.doc["object_hash"]
        if obj is not None and not same:
            # the version shown, its stat corrected since (a touch, a same-bytes rewrite): the same
            # version of the same bytes at the same path, nothing refreshed
            same = obj.meta.get("version") == idx.meta.get("version") and shows_latest_file(obj.meta, idx.meta)
        was_active = obj is not None and obj.state == "active"
        self.session.show(idx.id, version=idx.version, state="active", actor="agent", reason=reason, focus=focus)
        if was_active:
            return "already active" if same else "refreshed"
        return "activated"

    def _result(self, idx: Indexed, **extra: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"id": idx.id, **file_meta_summary(idx.meta), "indexed": idx.status}
        if idx.status != "new version":  # a diff's counts say what this call found changed
            out.pop("lines_added", None)
            out.pop("lines_removed", None)
        out.update(extra)
        if idx.meta.get("context_chars") and "note" not in out:
            out["note"] = (
                f"the active pool shows the first {idx.meta['context_chars']:,} of "
                f'{idx.meta.get("chars", 0):,} characters; lines("{idx.id}", start, end) shows any other part'
            )
        return out

    def read(self, path: str) -> dict[str, Any]:
        """Index → metadata pool → activate; each step's status. With the store out of reach,
        the text comes in the result instead (``_read_unrecorded``)."""
        real = self.workspace.resolve(path)
        try:
            idx = self.index.index(real, read=True, cause="read")
        except StoreUnavailable as e:
            return self._read_unrecorded(real, e)
        pool = "already in pool" if idx.id in self.session.view.objects else "added"
        top = self._top_window(idx.id, idx.version.doc or {})
        active = self._show(idx, reason="read", focus=top)
        extra: dict[str, Any] = {"pool": pool, "active": active}
        if top is not None:
            extra["note"] = (
                f"too large to show whole in the active pool (at most {self.session.view.policy.active_pool_tokens:,} "
                f"tokens): it shows the first {self.session.view.policy.file_view_chars:,} characters; "
                f'lines(id="{idx.id}", start, end) shows any other part'
            )
        return self._result(idx, **extra)

    def _top_window(self, obj_id: str, doc: Mapping[str, Any]) -> list[list[int]] | None:
        """The focus for a file read whole: None (it shows whole), unless its whole text would not
        fit the active pool on its own, which would take it out on the next turn and leave the
        agent a report of a file it never sees: then line 1, so that the pool shows the window of
        ``file_view_chars`` from its top. A file that has a focus (an edit's lines) keeps it.
        ``doc``: the document of the version to show."""
        policy = self.session.view.policy
        obj = self.session.view.objects.get(obj_id)
        content = doc.get("content")
        if policy.active_pool_tokens is None or policy.file_view_chars is None or not isinstance(content, str):
            return None
        if obj is not None and obj.focus:
            return None
        limit = doc["meta"].get("context_chars")
        chars = min(len(content), limit) if isinstance(limit, int) and not isinstance(limit, bool) else len(content)
        if chars <= policy.file_view_chars or estimate_tokens(chars) <= policy.active_pool_tokens:
            return None
        return [[1, 1]]

    def _read_unrecorded(self, real: Path, why: StoreUnavailable) -> dict[str, Any]:
        """A read while the store is out of reach: the file cannot become an object, so its text
        (as the active pool would show it: redacted, capped) is the result itself, said to be a
        copy that is not kept current. An error would leave the agent blind until the store is
        back."""
        snap = self.workspace.snapshot(real, read=True)
        out: dict[str, Any] = {"path": self.workspace.relpath(real), "recorded": False}
        if snap.sha in self.session.erased:  # evicted bytes stay withheld (as of the last turn)
            out["content_omitted"] = EVICTED_BYTES
        elif snap.text is None:
            out["content_omitted"] = snap.omitted
        else:
            limit = self.workspace.max_active_chars
            out.update(chars=len(snap.text), content=snap.text[:limit])
            if len(snap.text) > limit:
                out["context_chars"] = limit
        shown = (
            " The text is in this result, not in your context's files, and is not kept current:"
            if "content" in out
            else ""
        )
        out["note"] = f"not recorded: {why}.{shown} read the file again once the store answers."
        return out

    def _is_id(self, value: str) -> bool:
        return value.startswith(_ID_PREFIXES) or _SHORT_REF.fullmatch(value) is not None

    def object_id(self, id_or_path: str) -> str:
        """``id_or_path`` if it is an object id, else the id of the file at that path (read so
        far); ``InputError`` if it is neither."""
        if self._is_id(id_or_path):
            return id_or_path
        real = self.workspace.resolve(id_or_path, must_exist=False)
        v = self.index.lookup(real)
        if v is None:
            raise InputError(
                f"{id_or_path!r} is neither an object id ({ID_HINT}) nor the path of a file read so far: "
                "read(path) indexes a file"
            )
        return v.id

    def activate(self, id: str) -> dict[str, Any]:
        """Activate an object; a path is read (indexed if new or changed, then activated)."""
        if not self._is_id(id):
            try:
                return self.read(id)
            except FileUnreadable as e:
                if _ID_LIKE.match(id) is None:
                    raise
                raise FileUnreadable(f"{id!r} is neither an object id ({ID_HINT}) nor a file: {e}") from None
        if id.startswith("file:"):
            v = self._on_disk(self.index.latest(id))
            if v is not None and v.doc is not None and v.doc["meta"].get("missing"):
                return self.session.activate(id)  # nothing to load, and a pinned one stays as it is
            if v is not None and v.doc is not None and v.doc.get("content") is None:
                self.session.show(id, version=v, state="inactive", actor="agent", reason="activate")
                return {"id": id, "status": f"metadata only: {v.doc['meta'].get('content_omitted', 'no content')}"}
            # an id is a dynamic ref: its latest version, not the one the session showed last
            obj = self.session.view.objects.get(id)
            shown_hash = None if obj is None or obj.version is None else obj.version[2]
            if v is not None and v.doc is not None:
                newer = obj is not None and shown_hash != v.doc["object_hash"]
                top = self._top_window(id, v.doc)  # as read
                if newer or top is not None:
                    was_active = obj is not None and obj.state == "active"
                    shown = self.session.show(id, version=v, actor="agent", reason="activate", focus=top)
                    status = ("refreshed" if newer else "already active") if was_active else "activated"
                    return shown | {"status": status}
        return self.session.activate(id)

    def _on_disk(self, v: Version | None) -> Version | None:
        """The version of file object ``v`` that matches the disk, recorded if the file changed
        since ``v`` (as ``read`` does): the store knows a change only once a tracker saw it, and
        never without one. A file of another workspace, gone, or unreadable: ``v`` as it is."""
        if v is None or v.doc is None:
            return v
        meta = v.doc["meta"]
        path = meta.get("abs_path")
        if meta.get("missing") or meta.get("virtual") or not path or self.workspace.root_of(path) is None:
            return v
        try:
            idx = self.index.refresh(v.id, Path(path), cause="read")
        except ContextOSError:  # gone or unreadable now: the tracker records that
            return v
        return v if idx is None else idx.version

    def deactivate(self, id: str) -> dict[str, Any]:
        return self.session.deactivate(self.object_id(id))

    def pin(self, id: str) -> dict[str, Any]:
        return self.session.pin(self.object_id(id))

    def unpin(self, id: str) -> dict[str, Any]:
        return self.session.unpin(self.object_id(id))

    def lines(self, id: str, start: int = 1, end: int | None = None, column: int = 1) -> str:
        """``Session.lines`` of an object, or of a file by its path: its latest version, recorded
        first if the file changed on disk since (as ``activate`` does)."""
        obj_id = self.object_id(id)
        if obj_id.startswith("file:"):
            self._on_disk(self.index.latest(obj_id))
        return self.session.lines(obj_id, start, end, column)

    # --- write / edit -------------------------------------------------------------------------

    def _after_change(self, real: Path, *, cause: str, reason: str, **extra: Any) -> dict[str, Any]:
        """Record and show the new version of the file the agent's tool changed. The change is on
        disk already: an error would tell the agent it failed, and the same change made again
        could apply twice; so whatever fails now is said in the result (``recorded: false``)."""
        try:
            idx = self.index.index(real, read=True, cause=cause)
        except ContextOSError as e:
            if isinstance(e, StoreUnavailable):
                why = (
                    f"not recorded yet: {e}. It is recorded when the store answers (the file tracker, or the"
                    " file's next read, edit or write); your context may show its earlier text until then."
                )
            else:
                why = f"not recorded: {e.for_model or e}. Your context may show its earlier text."
            return {
                "path": self.workspace.relpath(real),
                **extra,
                "recorded": False,
                "note": f"changed on disk, but its new version is {why} Do not make this change again.",
                "type": type(e).__name__,  # (for a caller: ``StoreUnavailable`` is worth a retry)
            }
        try:
            active = self._show(idx, reason=reason)
        except StoreError as e:
            active = f"not shown ({e}): activate(id) shows it"
        out = self._result(idx, active=active, **extra)
        if idx.meta.get("diff"):
            out["diff"] = idx.meta["diff"]
        return out

    def _sha(self, real: Path) -> str | None:
        """The hash of the bytes of the file at ``real`` now; None if it has none (unreadable,
        not a file, too large to read)."""
        try:
            return self.workspace.snapshot(real, read=True).sha
        except ContextOSError:
            return None

    def _record_before_change(self, real: Path) -> None:
        """A change on disk that no tracker recorded yet (the user's) is recorded as its own
        version before the agent's change: else the agent's version, and the diff its result
        reports, held it as the agent's own. Best effort: with the store out of reach the change
        goes on, and its result says it is not recorded yet (``_after_change``)."""
        with suppress(ContextOSError):
            self._on_disk(self.index.lookup(real))

    def write(self, path: str, content: str) -> dict[str, Any]:
        """Create or overwrite a text file, then record and show its new version."""
        if path.endswith("/"):  # (the slash went in resolving: `d/` created a file named d)
            raise InputError(f"write {path}: a path ending with / names a directory; write takes a file's path")
        real = self.workspace.resolve(path, must_exist=False)
        self.workspace.deny_unrecordable(real)  # before anything is written: it could not be recorded
        data = _utf8(content, f"write {path}")
        self._deny_lost_secrets(real, content, path)
        self._record_before_change(real)
        host_out = None
        if "write" in self.host:
            with self.workspace.open(real, kind="entry", missing_ok=True) as entry:
                existed = entry.st is not None
                if entry.st is not None and not stat.S_ISREG(entry.st.st_mode):
                    raise InputError(f"write {path}: it exists and is not a regular file")
            host_out = self._host("write", {"path": path, "content": content})
        else:
            # opened again without following symlinks (there were none when it was resolved):
            # the new file is created in the directory that was opened, never through a link
            with self.workspace.open(real, kind="entry", create_parents=True, missing_ok=True) as entry:
                existed = entry.st is not None
                if entry.st is not None and not stat.S_ISREG(entry.st.st_mode):
                    raise InputError(f"write {path}: it exists and is not a regular file")
                entry.replace(data)
        extra: dict[str, Any] = {"status": "overwritten" if existed else "created", "bytes": len(data)}
        if host_out:
            extra["output"] = self._capped(host_out, 2000)
        return self._after_change(real, cause="write", reason="written", **extra)

    def _deny_lost_secrets(self, real: Path, content: str, path: str) -> None:
        """``InputError`` if writing ``content`` over the file at ``real`` would put a redaction
        placeholder (``[REDACTED:github-token]``) where the file holds a secret: the agent is
        shown the file redacted and may write it back so, whole. The file's own literal
        placeholders (a redactor's tests) may be written back; a new file loses nothing. The
        bytes are read whatever the content policy says of the file: a secret-looking file
        (``.env``), whose text no tool reads, is what the agent sees redacted in a command's
        output; they are redacted here only to compare, never kept. A file too large to read
        cannot tell, and takes no placeholder."""
        wanted = Counter(_PLACEHOLDER.findall(content))
        if not wanted:
            return
        cap = self.workspace.max_file_bytes
        try:
            with self.workspace.open(real) as opened:
                size = opened.st.st_size if opened.st is not None else 0
                data = b"" if size > cap else opened.read(limit=cap)
                size = max(size, len(data))  # (grown past the cap since its fstat: too large all the same)
        except FileUnreadable:  # no file there (yet), or none that can be read: nothing to lose
            return
        if size > cap:
            raise InputError(
                f"write {path}: the content holds {', '.join(sorted(wanted))}, and the file on disk is too large"
                f" ({size:,} bytes; the cap is {cap:,}) to read and tell whether that stands for a secret it"
                " holds: the write could replace the secret with the placeholder. Nothing was written"
            )
        raw = data.decode("utf-8", errors="replace")
        shown, found = self.workspace.redact(raw)
        if not found:
            return
        # a placeholder the agent can have been shown for this file (``shown``), more often than
        # the file holds it literally
        lost = sorted(p for p, n in wanted.items() if n > raw.count(p) and p in shown)
        if lost:
            how = (
                "ask the user to change it (the tools neither read nor edit a secret-looking file)"
                if self.workspace.is_secret(real)
                else "change the file with edit, around the lines that hold secrets"
            )
            raise InputError(
                f"write {path}: the content holds {', '.join(lost)}, which stands for a secret the file on disk"
                " holds (you are shown secrets redacted; the file keeps them): the write would replace the"
                f" secret with the placeholder. Nothing was written; {how}"
            )

    def edit(
        self,
        path: str,
        oldText: str | None = None,
        newText: str | None = None,
        edits: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Exact replacement(s) in a text file, then record and show its new version with the diff."""
        real = self.workspace.resolve(path)
        self.workspace.deny_unrecordable(real)  # before anything is written: it could not be recorded
        if edits is not None and (oldText is not None or newText is not None):
            raise InputError(f"edit {path}: pass either oldText/newText or edits=[…], not both")
        if edits is None:
            if oldText is None or newText is None:
                raise InputError(f"edit {path}: oldText and newText are both required")
            pairs = [(oldText, newText)]
        else:
            pairs = []
            for n, e in enumerate(edits, 1):
                if (
                    not isinstance(e, dict)
                    or not isinstance(e.get("oldText"), str)
                    or not isinstance(e.get("newText"), str)
                ):
                    raise InputError(f"edit {path}: edits[{n - 1}] needs string oldText and newText")
                pairs.append((e["oldText"], e["newText"]))
        self._record_before_change(real)
        host_out = None
        if "edit" in self.host:
            args: dict[str, Any] = {"path": path}
            args.update({"edits": edits} if edits is not None else {"oldText": oldText, "newText": newText})
            before = self._sha(real)
            host_out = self._host("edit", args)
            if before is not None and self._sha(real) == before:
                # a host tool that answers a failed edit with text (not raising): the file is as
                # it was, and the result must not say "edited"
                said = self._capped(host_out, 2000)
                raise InputError(f"edit {path}: the file was not changed; the edit tool said: {said}")
            count = len(pairs)
        else:
            shown = self.workspace.relpath(real)
            # one open for both: the bytes read, the checks and the rewrite are of the same file,
            # and the new text replaces it in the directory that was opened
            with self.workspace.open(real) as opened:
                snap, data = self.workspace.look(opened, read=True)
                if snap.text is None or data is None:
                    raise InputError(f"edit {shown}: not a text file the edit tool can change ({snap.omitted})")
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    raise InputError(f"edit {shown}: the file is not valid UTF-8; edit refuses to rewrite it") from None
                new, count = apply_edits(text, pairs, shown)
                opened.replace(_utf8(new, f"edit {shown}"), same_file=True)
        extra: dict[str, Any] = {"status": "edited", "replacements": count}
        if host_out:
            extra["output"] = self._capped(host_out, 2000)
        return self._after_change(real, cause="edit", reason="edited", **extra)

    # --- ls / find / grep -------------------------------------------------------------------------

    def _discover(self, paths: Iterable[Path]) -> str:
        """Index discovered files metadata-only and put them in the metadata pool; a note."""
        seen: set[Path] = set()
        added = skipped = 0
        for p in paths:
            try:
                real = self.workspace.resolve(p)
            except ContextOSError:
                continue
            if real in seen or not os.path.isfile(real):
                continue
            seen.add(real)
            # the cap is on new objects: counted on the files named, a second `ls` of a directory
            # of 150 looked at the 100 it had added already and never added the other 50
            if added >= self.max_discovered or len(seen) > 10 * self.max_discovered:
                skipped += 1
                continue
            try:
                idx = self.index.index(real, read=False, cause="discovered")
            except ContextOSError:
                continue
            if idx.id not in self.session.view.objects:
                self.session.show(idx.id, version=idx.version, state="inactive", actor="agent", reason="discovered")
                added += 1
        if not added and not skipped:
            return ""
        note = f"\n[context_os: {added} new file object(s) in your object list"
        if skipped:
            note += f"; {skipped} more not added (at most {self.max_discovered} new per call)"
        return note + "; read(path) loads one]"

    def _capped(self, text: str, limit: int) -> str:
        """``text`` redacted, then cut to ``limit`` (``_cap``): cut first, a secret the cut split
        was no longer recognised by the redaction every result goes through, and its part before
        the cut was shown and stored."""
        return _cap(self.workspace.redact(text)[0], limit)

    def _finish(self, text: str, discovered: Iterable[Path]) -> str:
        return self._capped(text, self.max_output_chars) + self._discover(discovered)

    def _found_in_output(self, name: str, base: Path, output: str) -> list[Path]:
        """The file paths an ls/find/grep output names (relative to the searched ``base``)."""
        if os.path.isfile(base):
            base = base.parent
        found: list[Path] = []
        for line in output.splitlines():
            line = line.strip()
            if not line or line.startswith("["):
                continue
            if name == "grep":
                # the first place the path may end where a file is (at most 10 tried), else the first
                ends = [m.start() for m in islice(_GREP_LINE_NUMBER.finditer(line, 1), 10)]
                paths = [self._grep_path(line[:end], base) for end in ends]
                if paths:
                    found.append(next((p for p in paths if os.path.lexists(p)), paths[0]))
                continue
            if line.endswith("/"):
                continue
            p = Path(line)
            found.append(p if p.is_absolute() else base / p)
        return found

    def _grep_path(self, named: str, base: Path) -> Path:
        """The path a grep line names: rg/grep print paths relative to the cwd (the workspace
        root) when given a directory."""
        p = Path(named)
        if p.is_absolute():
            return p
        return self.workspace.root / p if os.path.lexists(self.workspace.root / p) else base / p

    def ls(self, path: str = ".", limit: int = 500) -> str:
        """List a directory (dirs end with ``/``), sorted by name."""
        real = self.workspace.resolve(path)
        if "ls" in self.host:
            out = self._host("ls", {"path": path, "limit": limit})
            return self._finish(out, self._found_in_output("ls", real, out))
        with self.workspace.open(real, kind="entry") as entry:
            if not _is_dir(entry.st):
                return self._finish(self.workspace.relpath(real), [real])
        with self.workspace.open(real, kind="dir") as opened:
            assert opened.fd is not None
            try:
                with os.scandir(opened.fd) as it:
                    # a symlink is listed as what it is, never followed
                    entries = sorted(
                        ((e.name, e.is_dir(follow_symlinks=False)) for e in it), key=lambda e: (e[0].lower(), e[0])
                    )
            except OSError as e:
                raise FileUnreadable(f"ls {path}: {e.strerror or e}") from None
        lines: list[str] = []
        files: list[Path] = []
        for name, is_dir in entries[:limit]:
            lines.append(_listed(name + ("/" if is_dir else "")))
            if not is_dir:
                files.append(real / name)
        if len(entries) > limit:
            lines.append(f"[... {len(entries) - limit} more entries; raise limit to see them]")
        return self._finish("\n".join(lines) if lines else "(empty directory)", files)

    def find(self, pattern: str, path: str = ".", limit: int = 1000) -> str:
        """Files (and directories, ending with /) below ``path`` whose name — or, for a pattern
        with ``/``, whose path relative to ``path`` — matches the glob."""
        real = self.workspace.resolve(path)
        if "find" in self.host:
            out = self._host("find", {"pattern": pattern, "path": path, "limit": limit})
            return self._finish(out, self._found_in_output("find", real, out))
        with self.workspace.open(real, kind="entry") as entry:
            if not _is_dir(entry.st):
                raise InputError(f"find: {path!r} is not a directory")
        matches = _glob_matcher(pattern)
        lines: list[str] = []
        files: list[Path] = []
        more = 0
        for p, is_dir in self.workspace.walk(real):
            rel = p.relative_to(real).as_posix()
            if not matches(rel, p.name):
                continue
            if len(lines) >= limit:
                more += 1
                continue
            lines.append(_listed(rel + ("/" if is_dir else "")))
            if not is_dir:
                files.append(p)
        lines.sort()
        if more:
            lines.append(f"[... {more} more matches; raise limit or narrow the pattern]")
        return self._finish("\n".join(lines) if lines else f"(no files match {pattern!r})", files)

    def grep(
        self,
        pattern: str,
        path: str = ".",
        glob: str | None = None,
        ignoreCase: bool = False,
        literal: bool = False,
        limit: int = 100,
    ) -> str:
        """Lines matching ``pattern`` as ``path:line:text`` (paths relative to the workspace).
        Binary files, secret-looking files and files over the size cap are skipped (the last two
        counted in a note, those over the cap named)."""
        real = self.workspace.resolve(path)
        if "grep" in self.host:
            out = self._host(
                "grep",
                {
                    "pattern": pattern,
                    "path": path,
                    "glob": glob,
                    "ignoreCase": ignoreCase,
                    "literal": literal,
                    "limit": limit,
                },
            )
            return self._finish(out, self._found_in_output("grep", real, out))
        try:
            rx = regex.compile(re.escape(pattern) if literal else pattern, regex.IGNORECASE if ignoreCase else 0)
        except regex.error as e:
            raise InputError(f"grep: not a valid regular expression ({e}); pass literal=true to search text") from None
        except RecursionError:  # the parser's own depth: ((((…)))) hundreds deep
            raise InputError(
                "grep: the regular expression is nested too deeply to compile; pass literal=true to search text"
            ) from None
        # A pattern that backtracks without end ((\w+\s?)+$ on a long line) ran for hours, holding
        # the session: the time every line's search takes is counted, and its sum is bounded by
        # grep_seconds and a little more per line searched (an ordinary pattern takes a few µs a
        # line: a search of a million lines is not refused).
        allowed = self.grep_seconds
        in_glob = _glob_matcher(glob) if glob else None
        with self.workspace.open(real, kind="entry") as entry:
            in_dir = _is_dir(entry.st)
        candidates = self.workspace.walk(real) if in_dir else [(real, False)]
        lines: list[str] = []
        files: list[Path] = []
        secrets = 0
        too_large: list[str] = []
        cap = self.workspace.max_file_bytes
        more = False  # a match past the limit: said, else "stopped at" told of matches there were not
        for p, is_dir in candidates:
            if is_dir:
                continue
            if in_glob is not None and not in_glob(p.relative_to(real).as_posix() if in_dir else p.name, p.name):
                continue
            try:
                # a symlink is followed only to a file inside the workspace (or an allowed
                # directory): one out of it, or anything not a regular file, is skipped
                with self.workspace.open(p, follow=True) as opened:
                    target = opened.path
                    if self.workspace.is_secret(target):
                        secrets += 1
                        continue
                    assert opened.st is not None
                    # its start first: a NUL there is a binary file, not read further (a tree of
                    # images and wheels was read whole, up to the cap each, at every search)
                    start = min(_BINARY_SNIFF, cap)
                    data = b"" if opened.st.st_size > cap else opened.read(limit=start)
                    if len(data) > start and start < cap and b"\x00" not in data[:_BINARY_SNIFF]:
                        # (a file that grew past the cap since: skipped too, never read without end)
                        data += opened.read(limit=cap - len(data))
                    size = max(opened.st.st_size, len(data))
            except ContextOSError:
                continue
            if size > cap:
                too_large.append(self.workspace.relpath(p))
                continue
            if b"\x00" in data[:_BINARY_SNIFF]:
                continue
            shown = _listed(self.workspace.relpath(p))
            hit = False
            text = data.decode("utf-8", errors="replace")
            # lines split at "\n" only, as `lines` and grep number them (not at a form feed or U+2028)
            for n, line in enumerate(text[:-1].split("\n") if text.endswith("\n") else text.split("\n"), 1):
                line = line.removesuffix("\r")
                allowed += _GREP_LINE_SECONDS
                started = time.monotonic()
                try:
                    if allowed <= 0:
                        raise TimeoutError
                    found = rx.search(line, timeout=allowed)
                except TimeoutError:
                    raise InputError(
                        f"grep: the pattern {pattern!r} is too slow: its search took over {self.grep_seconds:g}s"
                        f" (stopped at {shown}:{n}); nested repetition such as (\\w+\\s?)+ backtracks without"
                        " end on a line it does not match: simplify it, narrow path or glob, or pass literal=true"
                    ) from None
                allowed -= time.monotonic() - started
                if found is None:
                    continue
                if len(lines) >= limit:
                    more = True
                    break
                hit = True
                # redacted whole before it is cut: a secret the cut split was not recognised
                spans = self.workspace.redactor.find(line)
                hit_line, start, end = _redacted_hit(line, found.start(), found.end(), spans)
                lines.append(f"{shown}:{n}:{_around(hit_line, start, end)}")
            if hit:
                files.append(target)
            if more:
                lines.append(f"[... stopped at {limit} matches; raise limit or narrow the search]")
                break
        if not lines:
            lines.append(f"(no matches for {pattern!r})")
        if secrets:
            lines.append(f"[{secrets} secret-looking file(s) not searched]")
        if too_large:  # else a search of a large log answered "no matches", which it did not know
            names = ", ".join(too_large[:5]) + (f" and {len(too_large) - 5} more" if len(too_large) > 5 else "")
            lines.append(f"[{len(too_large)} file(s) over the size cap ({cap:,} bytes) not searched: {names}]")
        return self._finish("\n".join(lines), files)

    # --- tools the host ran ------------------------------------------------------------------

    def observe(self, command: str | None, output: str | None) -> list[dict[str, Any]]:
        """Re-check indexed files named in a command or its output (bash and other tools).

        Best effort: at most 200 distinct path-like tokens are looked at. A file that vanished
        while another named path now holds the same inode is recorded as moved there. Returns
        one ``{id, path, indexed, changes}`` per object that got a new version.
        """
        text = f"{command or ''}\n{(output or '')[:200_000]}"
        tokens: list[str] = []
        for tok in _TOKEN_SPLIT.split(text):
            tok = tok.rstrip(".:")
            if tok and ("/" in tok or "." in tok.lstrip(".")) and len(tok) < 4096 and tok not in tokens:
                tokens.append(tok)
            if len(tokens) >= 200:
                break
        known = self.tracker.tracked() if self.tracker is not None else None
        known_paths = set(known.values()) if known is not None else None
        objects: dict[str, tuple[dict[str, Any], Path]] = {}
        fresh: dict[tuple[Any, ...], Path] = {}  # (inode, size, mtime) → an unindexed file named
        fresh_inodes: dict[str, Path] = {}  # inode → an unindexed file named
        for tok in tokens:
            try:
                real = self.workspace.resolve(tok, must_exist=False)
            except ContextOSError:
                continue
            v = None if known_paths is not None and str(real) not in known_paths else self.index.lookup(real)
            if v is not None and v.doc is not None:
                objects[v.id] = (v.doc["meta"], real)
                continue
            try:
                st = os.stat(real)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                fresh[(f"{st.st_dev}:{st.st_ino}", st.st_size, st.st_mtime_ns // 1_000_000)] = real
                fresh_inodes[f"{st.st_dev}:{st.st_ino}"] = real
        changed = []
        for oid, (meta, real) in objects.items():
            # a vanished file that another named path now holds, unchanged: it was moved there
            moved = fresh.get((meta.get("inode"), meta.get("size"), meta.get("mtime")))
            if moved is None and not os.path.isfile(real) and meta.get("sha"):
                moved = self._same_bytes(fresh_inodes.get(str(meta.get("inode"))), meta["sha"])
            target: Path | None = real if os.path.isfile(real) else moved
            try:
                idx = self.index.refresh(oid, target, cause="observed", reason="gone after a command")
            except ContextOSError:
                continue
            if idx is not None and idx.status != "already indexed":
                changed.append(
                    {
                        "id": oid,
                        "path": idx.meta.get("path"),
                        "indexed": idx.status,
                        "changes": list(idx.changes),
                        "version": idx.meta.get("version"),
                    }
                )
        return changed

    def _same_bytes(self, path: Path | None, sha: str) -> Path | None:
        """``path`` if the file there holds the bytes of hash ``sha`` (a vanished file's inode at a
        new name under another mtime: touched, or rewritten in place with the same bytes, then
        moved). Not an empty file: no bytes identify nothing (an empty file deleted, another
        made, which the file system gives the freed inode)."""
        if path is None:
            return None
        try:
            snap = self.workspace.snapshot(path, read=True)
            return path if snap.size and snap.sha == sha else None
        except ContextOSError:
            return None

    def after_tool(self, name: str, arguments: Mapping[str, Any] | str, output: str) -> dict[str, Any]:
        """Update objects after the host ran a tool itself (wrapped tools) or any other tool
        (observed). Returns what was updated."""
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        except json.JSONDecodeError:
            args = {}
        if not isinstance(args, dict):
            args = {}
        try:
            if name in ("write", "edit") and isinstance(args.get("path"), str):
                real = self.workspace.resolve(args["path"])
                return self._after_change(real, cause=name, reason="written" if name == "write" else "edited")
            if name in _TEXT_TOOLS:
                base = self.workspace.resolve(args.get("path") or ".")
                note = self._discover(self._found_in_output(name, base, output))
                return {"tool": name, "discovered": note.strip()}
        except ContextOSError as e:
            return {"error": e.for_model or str(e), "type": type(e).__name__}
        command = args.get("command") if isinstance(args.get("command"), str) else json.dumps(args)
        return {"tool": name, "observed": self.observe(command, output)}
