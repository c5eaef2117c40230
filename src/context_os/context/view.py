"""The in-memory state of one session, and its deterministic rendering.

``SessionView`` is everything rendering depends on: the visible chat entries, the objects the
session knows with their states, and the turn counter. It is built two ways: incrementally by
``Session`` as messages arrive, and from the store as of any transaction by ``load_view``. Both
must render the same bytes; frames prove it.

Rendering keeps per-message *units* memoised, so a turn costs work proportional to what changed
(new messages, collapsed results, the active set), not to the length of the history.

This module never writes to the store.
"""

from __future__ import annotations

import bisect
import difflib
import json
import marshal
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import zip_longest
from typing import Any

import blake3

from ..errors import InputError
from ..hashing import HASH_PREFIX, canonical_json, hash_value
from ..times import iso
from ..tokens import estimate_tokens
from .entries import Entry, Msg, ToolCall, msg_chars
from .policy import RetentionPolicy

__all__ = [
    "LAYOUT",
    "arguments_text",
    "SENT_WHOLE",
    "ObjInfo",
    "Rendered",
    "SessionView",
    "Unit",
    "active_text",
    "focus_window",
    "horizon_text",
    "short_ref",
    "own_text",
    "sent_whole",
    "stub_text",
]

_CHECKPOINT = 64
_ELIDED_MEMO_SIZE = 4096
"""At most this many calls' elided arguments are remembered (then the memo starts over)."""
TAIL_OPEN = "<context_os>"
TAIL_CLOSE = "</context_os>"
INDEX_HEADER = "Objects in this session (activate(id) loads one, deactivate(id) unloads it):"


@dataclass
class ObjInfo:
    """What the session knows of one object (not the chat, not the session itself)."""

    id: str
    kind: str
    meta: dict[str, Any]
    content: Any = None
    """The text shown when active; None for a collapsed tool result of a managed session (its
    text stays in the store until it is activated again: ``Session._reload``), unless it shows
    its own text collapsed (``own_text``)."""
    state: str = "inactive"
    """active | inactive | absent."""
    pinned: bool = False
    collapsed: bool = False
    """Tool results only: the history slot shows a stub (one-way, keeps the history append-only)."""
    file_text: list[str] | None = None
    """Tool results only: the call showed a file's text (a read's result, a write's arguments),
    which a file object shows now, kept current; the keys of its arguments that hold that text
    (``""``: arguments that are not an object, whole). From layout 11, collapsed, it never shows
    its own text and those arguments are elided whatever their length: a text the file may no
    longer have (``Session.mark_file_text``). None: not such a call."""
    seq: int = 0
    """Order in which the session first saw the object (metadata pool order)."""
    since: int = 0
    """Turn of the latest use: an activation, a tool touching it, a new message naming it."""
    uses: float = 0.0
    """Its uses as of ``since``, each counting 1 at its turn and less every turn after (the active
    pool's order: ``policy.use_score``)."""
    version: tuple[int, int | None, str] | None = None
    """(valid_time, tx_id, object_hash) of the version shown; tx_id None while the transaction
    that writes it is being built (a frame in it names it so: ``frames.frame_basis``)."""
    entry: int | None = None
    """Tool results only: the chat entry that shows this output."""
    call_entry: int | None = None
    """Tool results only: the assistant entry that made the call."""
    newer: dict[str, Any] | None = None
    """A newer version than the one shown exists: ``{valid_time, tx_id, object_hash, version}``, and
    ``missing: True`` when that version records the file gone."""
    joined_at: int | None = None
    """Not for tool results: the chat entry from which on the history holds what brought it into
    the session (``Session.cause_at`` then); None: nothing recorded (a session written before
    2026-12-02). A rewrite of the history that drops every entry from there on takes it out
    again (``Session._undo_dropped``)."""
    active_at: int | None = None
    """The same for its latest activation (from inactive or absent; not by the policy)."""
    focus: list[list[int]] | None = None
    """Line ranges ``[first, last]`` (1-based, in the shown text) that the agent's tools last read or
    changed, most recent first: a long text shows these and the lines around them."""
    window: tuple[str, Any, tuple[int, int], str | None] | None = field(default=None, repr=False, compare=False)
    """The last ``focus_window`` of it: (the text, the focus, the limit, the window). A turn asks
    for the window of every file of the active pool several times (to size the pool, to plan its
    blocks, to render them), and it changes only with the text or the focus."""

    @property
    def tokens(self) -> int:
        return int(self.meta.get("tokens", 0))

    @property
    def in_history(self) -> bool:
        """Shown expanded in its place in the chat history."""
        return self.kind == "toolcall" and self.state == "active" and not self.collapsed

    @property
    def in_tail(self) -> bool:
        """Shown in the volatile active pool at the end."""
        return self.state == "active" and (self.kind != "toolcall" or self.collapsed)


@dataclass
class Unit:
    """The rendered messages of one chat entry (or of synthetic results), memoised."""

    entry: int | None
    msgs: list[Msg]
    hash: str
    tokens: int


def _unit(entry: int | None, msgs: list[Msg], memo: dict[bytes, tuple[str, int]] | None = None) -> Unit:
    if memo is None:
        return Unit(entry, msgs, hash_value(msgs), sum(estimate_tokens(msg_chars(m)) for m in msgs))
    # re-rendering many frames of one session meets the same units again: the canonical hash (slow,
    # pure Python) and the token count are computed once per distinct unit, found by a fast digest
    # of a serialisation that tells values apart (marshal's: equal messages built in another order
    # or sharing other strings may serialise otherwise, which only misses the memo)
    try:
        key = blake3.blake3(marshal.dumps(msgs)).digest()
    except ValueError:  # not plain data: not memoised
        return _unit(entry, msgs)
    known = memo.get(key)
    if known is None:
        known = memo[key] = (hash_value(msgs), sum(estimate_tokens(msg_chars(m)) for m in msgs))
    return Unit(entry, msgs, known[0], known[1])


LAYOUT = 13
"""How the current code renders (recorded in every frame as ``layout``): 1, a collapsed tool result
names its object id; 2, it names its short ref (``r<entry>``), in fewer tokens; 3, a collapsed
result whose text is no longer than its stub shows its text (``own_text``): collapsing it changes
nothing the model sees; 4, a managed session shows a tool result longer than the policy's
``result_view_chars`` clipped (``clip_result``); 5, an assistant message with nothing but its
reasoning (no text, no calls) keeps it past the thinking horizon (``sheds_reasoning``); 6, a
collapsed call's long list or object arguments are elided as its long strings are (a todo list
re-sent whole by each ``TodoWrite``: ``elide_arguments``); 7, a file whose focused line alone is
longer than its window (minified code, JSON on one line) shows that line's start, cut, with a note
(``focus_window``: before, the window held none of it); 8, a text that ends with a line break
has no line after it: a clipped result's note and a file's window count its lines as ``lines``
does (before, one more, and a window counted that empty line among those not shown); 9, a patch of
a block that shows the same version as before (it only gained or lost its ``stale`` mark, or its
window moved) says so, ``(still version 1; version 2 is newer)``, not ``(now version 1)``
(``_patch_text``); 10, that holds for a file whose path holds a double quote too (layout 9 read
a block's head up to the path's first quote, and said ``(now version 1)``); 11, a collapsed
result whose call showed a file's text (``ObjInfo.file_text``: a read's result, a write's
arguments) shows its stub, never its own text, with no preview of its first line, and its call's
arguments holding that text are elided whatever their length, its path kept (before, a short
file's read or write, and a read's first line in its stub, stayed in the history after the file
changed: a stale view of it); and an object whose text holds a closing tag (``</object``,
``</context_os``) ends with a mark of its own, derived from that text and named in its head
(``ends="</object:3fa9c1d2e4b5>"``; ``_end_mark``): before, such a text (an HTML or GTK ``.ui``
file, or one written to) showed as the end of its object, the rest as the user's words or as
other objects; a path (or name) in a block's head and in the object index is shown as the
inside of a JSON string (``shown_name``): a line break, a double quote or a backslash in it
escaped (before, a file named ``a<newline>b`` broke the head, and its index line, in two); 12, a
patch block keeps every changed line (``_patch_text``): before, the diff's lines starting ``---``
or ``+++`` were all dropped as its headers, also a removed Markdown rule ``---`` (``----``) or an
added ``++i``, and the patch sent did not apply to the block it patched; 13, a file's index line
counts the tokens activating it would show (``SessionView.index_tokens``): a file too large for the
active pool shows a window of ``file_view_chars``, and its line said the tokens of its whole text
(up to the workspace's cut, 25,000 tokens for a 400 kB file, where activating it shows some 3,000)."""


def shown_name(name: str, layout: int = LAYOUT) -> str:
    """An object's path or name as a block's head and the object index show it: from layout 11
    as the inside of a JSON string, so a name holding a line break or a quote shows as one line
    that cannot pass for another attribute or index line (``a\\nb``); before, as it is."""
    return json.dumps(name, ensure_ascii=False)[1:-1] if layout >= 11 else name


def short_ref(obj: ObjInfo) -> str | None:
    """A tool result's short ref, ``r<entry>`` (its chat entry): what a stub names, what
    ``activate`` takes besides the object id."""
    return f"r{obj.entry}" if obj.kind == "toolcall" and obj.entry is not None else None


def stub_text(obj: ObjInfo, layout: int = LAYOUT) -> str:
    """The text a collapsed tool result shows: what it was and how to get it back (from layout 3,
    its own text where that is no longer)."""
    stub = _stub(obj, layout)
    own = own_text(obj, layout, stub)
    return stub if own is None else own


def own_text(obj: ObjInfo, layout: int = LAYOUT, stub: str | None = None) -> str | None:
    """From layout 3, the text of a tool result no longer than its stub (an edit's confirmation,
    a quiet command): collapsed, it shows that text, not a stub; and, whatever its length, the
    text of one its harness sends whole all the same (``sent_whole``); else None. Its text must
    be in memory: ``Session`` never lets go of such a result's text. ``stub``: the stub, when the
    caller has built it already."""
    c = obj.content
    if obj.kind != "toolcall" or not isinstance(c, str):
        return None
    if sent_whole(obj):
        return c  # what goes out in its place, and so what is counted
    if layout < 3 or "blocks" in obj.meta:
        return None
    if layout >= 11 and obj.file_text is not None:
        return None  # a file's text, which the file object shows as it is now
    return c if len(c) <= len(stub if stub is not None else _stub(obj, layout)) else None


SENT_WHOLE = "sent_whole"
"""The key by which an adapter says that its harness sends a tool result whole, as it came, even
while the engine shows it collapsed (pydantic-ai's typed returns: a tool search's, a capability's
load, whose content pydantic-ai reads): ``True`` in the result's ``extra["full"]`` (its output as
the harness gave it, kept in its tool-call object). Such a result shows its whole text in its
place whatever its state (``own_text``), never clipped, its call's arguments never elided: the
context counts what goes out, and collapsing it frees nothing (until 2026-12-02 a collapsed one
counted as its one-line stub, though it went out whole)."""


def sent_whole(obj: ObjInfo) -> bool:
    """Whether the harness sends the tool result ``obj`` (and its call) whole whatever the engine
    shows (``SENT_WHOLE``)."""
    blocks = obj.meta.get("blocks")
    return isinstance(blocks, dict) and blocks.get(SENT_WHOLE) is True


def _stub(obj: ObjInfo, layout: int) -> str:
    m = obj.meta
    status = " (error)" if m.get("is_error") else ""
    if layout >= 11 and obj.file_text is not None:
        m = {**m, "preview": None}  # its first line is a file's, which may have changed since
    if layout >= 2 and (ref := short_ref(obj)) is not None:
        preview = (m.get("preview") or "")[:30]
        first = f' "{preview}"' if preview else ""
        return f'[{m.get("name", "tool")} output{status}, {obj.tokens} tokens, collapsed: activate("{ref}")]{first}'
    preview = (m.get("preview") or "")[:40]
    first = f' First line: "{preview}"' if preview else ""
    return (
        f"[context_os: output collapsed] {m.get('name', 'tool')} result{status}, {obj.tokens} tokens; "
        f'activate(id="{obj.id}") shows it.{first}'
    )


CLIP_HEAD_PERCENT = 40
"""Of a clipped tool result's characters, the share its first lines get; its last lines get the
rest (a command's end holds its errors and summary, its start what ran)."""


def clip_result(text: str, limit: int, handle: str, layout: int = LAYOUT) -> str | None:
    """A tool result of more than ``limit`` characters as it shows while expanded: its first lines
    within ``CLIP_HEAD_PERCENT`` of ``limit``, one note, its last lines within the rest (a line
    longer than its share is cut within itself); None if it fits. The note says what is left out
    and how to see it (the ``lines`` tool, with ``handle``, the result's ref). Pure: same input,
    same text. From layout 8, a last line break ends the last line (no empty line after it)."""
    if len(text) <= limit:
        return None
    head_chars = limit * CLIP_HEAD_PERCENT // 100
    tail_chars = limit - head_chars
    head_end = text.rfind("\n", 0, head_chars) + 1
    head_end = head_end if head_end > head_chars // 2 else head_chars  # a very long line: cut in it
    tail_start = text.find("\n", len(text) - tail_chars) + 1
    tail_start = tail_start if 0 < tail_start < len(text) - tail_chars // 2 else len(text) - tail_chars
    total = text.count("\n") + 1
    head_whole = head_end == 0 or text[head_end - 1] == "\n"  # the head ends at a line break
    tail_whole = text[tail_start - 1] == "\n"
    first_hidden = text.count("\n", 0, head_end) + 1
    tail_line = total - text.count("\n", tail_start)
    last_hidden = tail_line - 1 if tail_whole else tail_line
    if layout >= 8 and text.endswith("\n"):
        total -= 1  # the lines as the lines tool counts them (the tail's numbers stand: it ends later)
    note = (
        f"[context_os: {tail_start - head_end:,} of {len(text):,} characters not shown here "
        f"(lines {first_hidden:,}-{last_hidden:,} of {total:,}); "
        f'lines(id="{handle}", start={first_hidden}, end={min(last_hidden, first_hidden + 199)}) shows some of them]'
    )
    return text[:head_end] + ("" if head_whole else "\n") + note + "\n" + text[tail_start:]


def focus_window(text: str, focus: list[list[int]], limit: int, layout: int = LAYOUT) -> str | None:
    """The lines of ``text`` around ``focus`` (line ranges, most recent first) that fit in
    ``limit`` characters, with a note for each run of lines left out; None if it all fits.
    From layout 7, a focused line alone longer than ``limit`` shows its start, cut. From layout 8,
    a last line break ends the last line: no empty line after it is counted (or shown).

    The focused lines come first (most recent range first), then each range grows one line at a
    time on both sides until the next line no longer fits. Pure: same input, same window.
    """
    if len(text) <= limit:
        return None
    lines = text.split("\n")
    if layout >= 8 and len(lines) > 1 and lines[-1] == "":
        lines.pop()  # a text that ends with a line break has no line after it
    n = len(lines)
    shown = [False] * n
    used = 0
    ranges = [(max(1, a) - 1, min(n, b) - 1) for a, b in focus if max(1, a) <= min(n, b)] or [(0, 0)]
    for a, b in ranges:
        for j in range(a, b + 1):
            if not shown[j] and used + len(lines[j]) + 1 <= limit:
                shown[j] = True
                used += len(lines[j]) + 1
    cut: int | None = None
    if not used and layout >= 7:
        # the focused line alone is longer than the window (a minified file, JSON on one line):
        # its start, rather than a window of the lines around it and none of it
        cut = ranges[0][0]
        shown[cut] = True
        used = limit
    # each range has two sides that grow outwards; a side stops at the first line that does not fit
    sides = [[a, -1] for a, _ in ranges] + [[b, 1] for _, b in ranges]
    while sides:
        still = []
        for side in sides:
            j = side[0] + side[1]
            if not 0 <= j < n:
                continue
            if not shown[j]:
                if used + len(lines[j]) + 1 > limit:
                    continue
                shown[j] = True
                used += len(lines[j]) + 1
            side[0] = j
            still.append(side)
        sides = still
    count = sum(shown)
    out = [f"[context_os: showing {count:,} of {n:,} lines, around the ones last read or changed]"]
    gap = 0
    for j in range(n):
        if shown[j]:
            if gap:
                out.append(f"[context_os: {gap:,} lines not shown]")
                gap = 0
            if j == cut:
                out.append(lines[j][:limit])
                out.append(f"[context_os: line {j + 1:,} goes on: {limit:,} of its {len(lines[j]):,} characters shown]")
            else:
                out.append(lines[j])
        else:
            gap += 1
    if gap:
        out.append(f"[context_os: {gap:,} lines not shown]")
    return "\n".join(out)


def active_text(obj: ObjInfo, view_chars: int | None = None, layout: int = LAYOUT) -> str:
    """What the active pool shows of an object: its content, cut to ``meta.context_chars``
    characters when that is set (large files: the full text stays stored), or to a window of
    ``view_chars`` around its ``focus`` when it has one; or, when an object has no content and
    ``meta.content_omitted`` says why (binary, secret, missing file), that reason."""
    c = obj.content
    if c is None and obj.meta.get("content_omitted"):
        return f"[context_os: no content to show: {obj.meta['content_omitted']}]"
    if not isinstance(c, str):
        return canonical_json(c).decode()
    if obj.focus and view_chars is not None:
        memo = obj.window
        if memo is not None and memo[0] is c and memo[1] == obj.focus and memo[2] == (view_chars, layout):
            window = memo[3]
        else:
            window = focus_window(c, obj.focus, view_chars, layout)
            obj.window = (c, [list(r) for r in obj.focus], (view_chars, layout), window)
        if window is not None:
            return window
    limit = obj.meta.get("context_chars")
    if isinstance(limit, int) and not isinstance(limit, bool) and 0 <= limit < len(c):
        cut = c.rfind("\n", 0, limit) + 1
        cut = cut if cut > limit // 2 else limit  # end on a line break when one is near
        return (
            c[:cut] + f"\n[context_os: truncated for context: showing {cut:,} of {len(c):,} characters; "
            f"the full text is stored in {obj.id}]"
        )
    return c


INDEX_KEY = "index"
"""The key of the object index's chain of blocks (the others are keyed by object id)."""

POOLS = ("chat", "metadata", "active", "recall")
"""How a frame splits its tokens: the conversation as shown (tool results in place, whole or as
stubs, and any synthetic result), the object index, blocks of active objects, and blocks of
items from sources (any object that is neither a file nor a tool call)."""

PATCH_MIN_TOKENS = 256
"""A block's patches may always add up to this many tokens before it must be shown anew."""

PATCH_LIMIT = 0.5
"""Besides, a block's patches may add up to this share of its base block's tokens."""


def _user(text: str) -> Msg:
    return {"role": "user", "text": text}


@dataclass(frozen=True)
class _Block:
    """One block of the volatile part: where it stands (None: at the end, not placed yet)."""

    at: int | None
    unit: Unit


@dataclass(frozen=True)
class _Chain:
    """The blocks that show one object (or the index): its base block, then its patches."""

    key: str
    seq: int
    """Order among chains at one position: the order they were first shown in."""
    blocks: tuple[_Block, ...]
    shown: str
    """The text the blocks amount to (the base with every patch applied)."""
    base_tokens: int
    patch_tokens: int = 0

    @classmethod
    def new(cls, key: str, text: str, seq: int, memo: dict[bytes, tuple[str, int]] | None) -> _Chain:
        unit = _unit(None, [_user(text)], memo)
        return cls(key, seq, (_Block(None, unit),), text, unit.tokens)

    def with_patch(self, patch: str, text: str, tokens: int, memo: dict[bytes, tuple[str, int]] | None) -> _Chain:
        block = _Block(None, _unit(None, [_user(patch)], memo))
        return replace(self, blocks=(*self.blocks, block), shown=text, patch_tokens=self.patch_tokens + tokens)

    def placed(self, n: int, pending: bool) -> _Chain:
        """Blocks at the end take position ``n`` (unless calls wait for results there)."""
        if pending or all(b.at is not None for b in self.blocks):
            return self
        return replace(self, blocks=tuple(b if b.at is not None else _Block(n, b.unit) for b in self.blocks))


def _patch_text(key: str, old: str, new: str, obj: ObjInfo | None, layout: int = LAYOUT) -> str:
    """A patch block: the lines that changed between what an object's blocks show (``old``) and
    what it is now (``new``), as a unified diff; or, when that is no shorter, its whole new text
    (both are blocks ``TAIL_OPEN``, a heading line, the body, ``TAIL_CLOSE``). The heading names
    the version the block shows now; from layout 9, one the blocks showed already as such
    (``still version``: what changed is its ``stale`` mark, or its window)."""
    diff = list(difflib.unified_diff(old.split("\n"), new.split("\n"), lineterm="", n=1))
    # from layout 12, its two header lines alone are left out: a changed line may start "--", "++"
    lines = diff[2:] if layout >= 12 else [ln for ln in diff if not ln.startswith(("---", "+++"))]
    if key == INDEX_KEY:
        what = "The object index"
    else:
        version = obj.meta.get("version") if obj is not None else None
        what = f"{key}" + (f" (now version {version})" if version else "")
        if version and layout >= 9 and _shown_version(old, layout) == str(version):
            newer = obj.newer if obj is not None else None
            is_newer = f"; version {newer.get('version', '?')} is newer" if newer else ""
            what = f"{key} (still version {version}{is_newer})"
    patch = "\n".join([TAIL_OPEN, f"{what} changed: a patch of its block above, the rest of it stands:", *lines])
    body = new.split("\n")[2:-1]  # the block's own text without its opening, heading and closing
    whole = "\n".join([TAIL_OPEN, f"{what} changed: this replaces its block above:", *body])
    return (whole if len(whole) <= len(patch) else patch) + "\n" + TAIL_CLOSE


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@$")
_REPLACES = " changed: this replaces its block above:"
_PATCHES = " changed: a patch of its block above, the rest of it stands:"


def _patched(key: str, old: str, patch: str) -> str | None:
    """What an object's blocks show once ``patch`` (a block ``_patch_text`` made against ``old``)
    follows them: the inverse of ``_patch_text``; None if ``patch`` is no such block of ``old``."""
    lines = patch.split("\n")
    if len(lines) < 3 or lines[0] != TAIL_OPEN or lines[-1] != TAIL_CLOSE:
        return None
    head, body = lines[1], lines[2:-1]
    if head.endswith(_REPLACES):
        heading = INDEX_HEADER if key == INDEX_KEY else "Active content:"
        return "\n".join([TAIL_OPEN, heading, *body, TAIL_CLOSE])
    if not head.endswith(_PATCHES):
        return None
    src, out, pos, i = old.split("\n"), [], 0, 0
    while i < len(body):
        m = _HUNK.match(body[i])
        if m is None:
            return None
        start, length = int(m.group(1)), int(m.group(2) or 1)
        begin = start - 1 if length else start
        if begin < pos:
            return None
        out.extend(src[pos:begin])
        pos, i = begin, i + 1
        while i < len(body) and not _HUNK.match(body[i]):
            tag, text = body[i][:1], body[i][1:]
            if tag in (" ", "-"):
                if pos >= len(src) or src[pos] != text:
                    return None
                pos += 1
            elif tag != "+":
                return None
            if tag in (" ", "+"):
                out.append(text)
            i += 1
    out.extend(src[pos:])
    return "\n".join(out)


_OBJECT_VERSION = re.compile(r'^<object id="[^"]*" kind="[^"]*"(?: path="[^\n]*?")? version="([^"]*)"', re.M)
"""An object block's head (``_object_lines``): a path is shown as it is, quotes and all (layout 10),
or escaped (``shown_name``: an escaped quote is never followed by `` version="``)."""
_OBJECT_VERSION_9 = re.compile(r'^<object id="[^"]*" kind="[^"]*"(?: path="[^"\n]*")? version="([^"]*)"', re.M)
"""How layout 9 read it: a path up to its first quote (a path holding one was not read)."""


def _shown_version(block: str, layout: int = LAYOUT) -> str | None:
    """The version an object's block text shows (its ``<object … version="N"``), None if none
    (layout 9 read no path holding a quote: ``_OBJECT_VERSION_9``)."""
    m = (_OBJECT_VERSION if layout >= 10 else _OBJECT_VERSION_9).search(block)
    return m.group(1) if m else None


_CLOSING = re.compile(r"</\s*(?:object|context_os)\b", re.IGNORECASE)
"""A closing tag of an object's block, or of the block itself, inside the text it shows."""


def _end_mark(body: list[str]) -> str:
    """How an object's block ends (layout 11): ``</object>``; for a text holding a closing tag of
    its own (an HTML or GTK ``.ui`` file, or a text written to look like the end of its block
    and then the user's words), a mark the text cannot hold, derived from it: the text's hash."""
    if not any(_CLOSING.search(part) for part in body):
        return "</object>"
    digest = blake3.blake3("\n".join(body).encode("utf-8", "surrogatepass")).hexdigest()
    return f"</object:{digest[:12]}>"


def _synthetic_result(call: ToolCall) -> Msg:
    return {
        "role": "tool",
        "text": "[context_os] No result was recorded for this call (it was interrupted or dropped).",
        "tool_call_id": call["id"],
    }


@dataclass
class Rendered:
    """One assembled context, neutral: history units with the blocks that stand among them,
    then the volatile part.

    The history units are the view's own memo, not a copy (a copy would cost every call time
    in proportion to the history): read them before the view renders again.
    """

    history: list[Unit]
    history_len: int
    spliced: list[tuple[int, Unit]]
    """Blocks standing among the history units: (history units before it, block), in order."""
    volatile: list[Msg]
    tokens: int
    rendered_hash: str
    refs: list[dict[str, Any]]
    stable_prefix: int = 0
    """How many leading units are unchanged since the previous committed render of the view."""
    message_count: int = 0
    """Messages in the rendering (history units, blocks and volatile part)."""
    new_blocks: list[tuple[str, str, str]] = field(default_factory=list)
    """Blocks this (committed) rendering shows for the first time: (block id, key, text), for
    the store: a frame names its blocks, and re-renders from them."""
    pools: dict[str, int] | None = None
    """A committed rendering's tokens by pool (``POOLS``); they add up to ``tokens``."""
    prefix_tokens: int | None = None
    """A committed rendering's tokens that the previous committed one sent too, as its prefix:
    what a provider's prompt cache could reuse."""
    render_no: int = 0
    """Of a committed render, how many the view committed (this one included): a caller keeping
    what it made of the previous one can tell that it was that one (``stable_prefix`` counts
    from it), not one another caller made."""

    @property
    def units(self) -> list[Unit]:
        """Every unit in order: history units and the blocks among them."""
        return self.units_from(0)

    def units_from(self, k: int) -> list[Unit]:
        """The units from position ``k`` on (positions count history units and blocks)."""
        j = 0
        while j < len(self.spliced) and self.spliced[j][0] + j < k:
            j += 1
        h = k - j
        out: list[Unit] = []
        for at, unit in self.spliced[j:]:
            out.extend(self.history[h:at])
            out.append(unit)
            h = max(h, at)
        out.extend(self.history[h : self.history_len])
        return out

    @property
    def messages(self) -> list[Msg]:
        out: list[Msg] = [m for u in self.units for m in u.msgs]
        out.extend(self.volatile)
        return out


class _TokenSums:
    """Tokens of the history units by position, as a Fenwick tree: a unit's tokens change in
    O(log n), and the tokens from any position on are known in O(log n), at any history length."""

    def __init__(self) -> None:
        self._tree: list[int] = [0]

    def append(self, tokens: int) -> None:
        i = len(self._tree)
        self._tree.append(0)
        # the new node covers (i - lowbit(i), i]: the sum of the nodes that tile that range
        total, j, low = tokens, i - 1, i - (i & -i)
        while j > low:
            total += self._tree[j]
            j -= j & -j
        self._tree[i] = total

    def add(self, pos: int, delta: int) -> None:
        i = pos + 1
        while i < len(self._tree):
            self._tree[i] += delta
            i += i & -i

    def before(self, pos: int) -> int:
        """Tokens of the units at positions ``< pos``."""
        total, i = 0, min(pos, len(self._tree) - 1)
        while i > 0:
            total += self._tree[i]
            i -= i & -i
        return total


@dataclass
class SessionView:
    """Render-relevant state of one session. Mutated only by ``Session`` (and ``load_view``)."""

    session_id: str
    policy: RetentionPolicy = field(default_factory=RetentionPolicy)
    turn: int = 0
    entries: list[Entry] = field(default_factory=list)
    visible: list[int] = field(default_factory=list)
    """Entry indices currently visible, in order: position k is harness message k."""
    objects: dict[str, ObjInfo] = field(default_factory=dict)
    pages: dict[int, tuple[int, int | None, str]] = field(default_factory=dict)
    """Chat page number → (valid_time, tx_id, object_hash) of its current version (tx_id: as
    ``ObjInfo.version``)."""
    session_version: tuple[int, int | None, str] | None = None
    layout: int = LAYOUT
    """How to render (``LAYOUT``); a frame re-renders with the layout it recorded."""
    managed: bool = True
    """False while the session passes through unchanged (small so far, see the policy's
    ``manage_from_tokens``): tool results show as they came, no argument is elided, no object
    block is added. Turned on once for good; a frame records which it was."""
    hash_memo: dict[bytes, tuple[str, int]] | None = field(default=None, repr=False)
    """Unit hashes and tokens by a digest of their messages, shared by views that re-render many
    frames of one session."""
    horizon: int = 0
    """The history horizon: the first chat entry the history shows. The visible entries before it
    (system messages excepted) show as one note, ``horizon_text`` (0: none; ``Session`` moves it,
    a frame re-renders with the one it recorded)."""
    thinking_horizon: int = 0
    """Assistant messages before this chat entry show without the reasoning the harness sends back
    with them (``extra_chars``: thinking blocks the adapter counted), which they carry from it on (0: all carry
    it; ``Session`` moves it, keeping the policy's ``keep_thinking_turns`` newest; a frame
    re-renders with the one it recorded)."""

    # memo of the rendering; derived, rebuilt on demand
    _units: list[Unit] = field(default_factory=list, repr=False)
    _unit_of: dict[int, int] = field(default_factory=dict, repr=False)
    _open: tuple[int, list[ToolCall], set[str]] | None = field(default=None, repr=False)
    _built_upto: int = field(default=0, repr=False)
    _hist_tokens: int = field(default=0, repr=False)
    _hist_system: int = field(default=0, repr=False)
    """Of ``_hist_tokens``, those of system messages (``conversation_tokens`` leaves them out)."""
    _sums: _TokenSums = field(default_factory=_TokenSums, repr=False)
    sent_total: int = field(default=0, repr=False)
    """Tokens of every committed render since the view was built (for the cache-break allowance)."""
    renders: int = field(default=0, repr=False)
    """Committed renders since the view was built (``Rendered.render_no``)."""
    uncached_total: int = field(default=0, repr=False)
    """Of those, the tokens that were not a prefix of the previous committed render."""
    _hist_msgs: int = field(default=0, repr=False)
    _dirty_from: int = field(default=0, repr=False)
    _prev_count: int = field(default=0, repr=False)
    _checkpoints: list[Any] = field(default_factory=list, repr=False)
    """Hasher states: entry i has been fed units [0, _CHECKPOINT * (i + 1))."""
    _sealed: _SealedPages | None = field(default=None, repr=False)
    _last_page: tuple[int, int] = field(default=(0, -1), repr=False)
    _chains: dict[str, _Chain] = field(default_factory=dict, repr=False)
    """Tail layout 2: per object (and the index), the blocks that show it, as committed."""
    _chain_seq: int = field(default=0, repr=False)
    block_refs: list[list[Any]] | None = field(default=None, repr=False)
    """Of the last committed render (tail layout 2): ``[position or None, block id, object hash]``
    of every block in order (what a frame records as ``blocks``)."""
    _prev_spliced: list[tuple[int, str]] = field(default_factory=list, repr=False)
    # indexes over ``objects`` so a turn never scans every tool result ever seen
    _live: set[str] = field(default_factory=set, repr=False)
    _indexed: dict[str, ObjInfo] = field(default_factory=dict, repr=False)
    _behind: _Behind | None = field(default=None, repr=False)
    """What the horizon's note says of the entries behind it, as of its last move."""
    _reasoning: list[int] = field(default_factory=list, repr=False)
    """Chat entries of the history built so far whose reasoning can leave (``sheds_reasoning``), in order."""
    _elided_memo: dict[str, tuple[Any, tuple[int, tuple[str, ...], str, int], Any]] = field(
        default_factory=dict, repr=False
    )
    """Per collapsed call's object: (its arguments, how they were elided: the limit, the keys, the
    handle and the layout, the elided arguments); the policy weighs a collapse at every turn."""

    # --- objects -----------------------------------------------------------------------------

    def add_object(self, o: ObjInfo) -> None:
        self.objects[o.id] = o
        if o.kind != "toolcall":
            self._indexed[o.id] = o
        if o.state == "active":
            self._live.add(o.id)

    def set_state(
        self, o: ObjInfo, *, state: str | None = None, pinned: bool | None = None, collapsed: bool | None = None
    ) -> None:
        """Change an object's state and keep the memoised rendering in step."""
        if state is not None:
            o.state = state
        if pinned is not None:
            o.pinned = pinned
        if collapsed is not None:
            o.collapsed = collapsed
        if o.state == "active":
            self._live.add(o.id)
        else:
            self._live.discard(o.id)
        self.refresh_object(o)

    def remove_object(self, obj_id: str) -> ObjInfo | None:
        """Drop an object from the session (it was evicted): its slots re-render without it."""
        o = self.objects.pop(obj_id, None)
        if o is not None:
            self._live.discard(obj_id)
            self._indexed.pop(obj_id, None)
            self.refresh_object(o)
        return o

    def show_index_anew(self) -> None:
        """The next render shows the object index as one new block (not as a patch of its blocks
        so far): after an eviction, those blocks are gone from the store and their text, which
        named the evicted object, must not be shown or patched against again."""
        self._chains.pop(INDEX_KEY, None)

    def refresh_object(self, o: ObjInfo) -> None:
        """Re-render what shows ``o`` after its content or metadata changed."""
        for i in (o.entry, o.call_entry):
            if i is not None:
                self.refresh_entry(i)

    def live(self) -> list[ObjInfo]:
        """Active objects, in id order."""
        return [self.objects[i] for i in sorted(self._live)]

    # --- history units -------------------------------------------------------------------

    def reset_render(self, *, entries_changed: bool = False) -> None:
        """Forget the memo (after a history rewrite); the next render rebuilds it.
        ``entries_changed``: entries were changed in place (scrubbed after an eviction)."""
        if entries_changed:
            self._behind = None
        self._units, self._unit_of, self._open, self._built_upto = [], {}, None, 0
        self._reasoning = []
        self._hist_tokens = self._hist_msgs = self._hist_system = 0
        self._sums = _TokenSums()
        self._dirty_from, self._prev_count, self._checkpoints = 0, 0, []
        self._prev_spliced, self._chains = [], {}

    def _append_unit(self, unit: Unit) -> None:
        if unit.entry is not None:
            self._unit_of[unit.entry] = len(self._units)
        self._units.append(unit)
        self._hist_tokens += unit.tokens
        if unit.entry is not None and self.entries[unit.entry]["role"] == "system":
            self._hist_system += unit.tokens
        self._sums.append(unit.tokens)
        self._hist_msgs += len(unit.msgs)

    def _close_open(self) -> None:
        """Results that never came for the open assistant message get synthetic ones."""
        if self._open is not None:
            _, calls, pending = self._open
            missing = [c for c in calls if c["id"] in pending]
            if missing:
                self._append_unit(_unit(None, [_synthetic_result(c) for c in missing], self.hash_memo))
            self._open = None

    def _tool_msgs(self, e: Entry, paired: bool) -> list[Msg]:
        obj = self.objects.get(e.get("object", ""))
        clipped = None
        # shown as it came: expanded, or passed through, or sent whole by its harness anyway (in
        # the same bytes either way: collapsing it changes nothing that goes out)
        shown = obj is not None and (
            obj.in_history or not self.managed or (sent_whole(obj) and isinstance(obj.content, str))
        )
        if obj is None:  # a result whose object was evicted
            text = "[context_os] This tool output was erased from the store."
        elif shown:
            clipped = self.clipped_result(obj) if self.managed else None
            text = clipped if clipped is not None else obj.content if isinstance(obj.content, str) else ""
        else:
            text = stub_text(obj, self.layout)
        # the output as it came (images, blocks) shows only with the whole text: not collapsed, not clipped
        whole = shown and clipped is None
        if paired:
            msg: Msg = {"role": "tool", "text": text, "tool_call_id": e.get("tool_call_id", "")}
            if obj is not None:  # harnesses that name results (Pi, Gemini) need these back
                msg["tool_name"] = str(obj.meta.get("name", "tool"))
                if obj.meta.get("is_error"):
                    msg["is_error"] = True
            extra = dict(e.get("extra") or {})
            if obj is None or not whole:
                extra.pop("full", None)
            elif "blocks" in obj.meta:
                extra["full"] = obj.meta["blocks"]
                if e.get("extra_chars"):  # what its blocks (images) cost
                    msg["extra_chars"] = e["extra_chars"]
            if extra:
                msg["extra"] = extra
            return [msg]
        return [{"role": "user", "text": f"[context_os] Tool result whose call is no longer shown: {text}"}]

    def result_text(self, obj: ObjInfo) -> str:
        """The text a tool result of a managed session shows expanded: its output, clipped past
        the policy's ``result_view_chars`` (from layout 4)."""
        clipped = self.clipped_result(obj)
        if clipped is not None:
            return clipped
        return obj.content if isinstance(obj.content, str) else ""

    def clipped_result(self, obj: ObjInfo) -> str | None:
        """``clip_result`` of a tool result's text under this view's policy and layout; None when
        it shows whole."""
        limit = self.policy.result_view_chars
        if limit is None or self.layout < 4 or not isinstance(obj.content, str) or sent_whole(obj):
            return None
        return clip_result(obj.content, limit, self._handle(obj), self.layout)

    def _call_args(self, c: ToolCall) -> Any:
        """A collapsed call's long argument values collapse with its result (unless its harness
        sends it whole all the same: ``sent_whole``)."""
        obj = self.objects.get(c.get("object", ""))
        if obj is None or obj.in_history or obj.pinned or not self.managed or sent_whole(obj):
            return c["arguments"]
        return self._elided(c["arguments"], obj)

    def _elided(self, arguments: Any, obj: ObjInfo) -> Any:
        """``elide_arguments`` of a collapsed call as this view's layout renders them."""
        keys = tuple(obj.file_text or ()) if self.layout >= 11 else ()
        how = (self.policy.elide_arguments_over_chars, keys, self._handle(obj), self.layout)
        memo = self._elided_memo.get(obj.id)
        if memo is not None and memo[0] is arguments and memo[1] == how:
            return memo[2]  # (read only, as the arguments of a call shown whole are)
        elided = elide_arguments(arguments, how[2], how[0], lists=self.layout >= 6, keys=keys)
        if len(self._elided_memo) >= _ELIDED_MEMO_SIZE:
            self._elided_memo.clear()
        self._elided_memo[obj.id] = (arguments, how, elided)
        return elided

    def call_arguments(self, c: ToolCall) -> Any:
        """A call's arguments as this view shows them (a collapsed call's long values elided)."""
        return self._call_args(c)

    def _handle(self, obj: ObjInfo) -> str:
        """What a note names to get ``obj`` back: its short ref (layout 2), else its id."""
        return (short_ref(obj) if self.layout >= 2 else None) or obj.id

    def _entry_msgs(self, e: Entry) -> list[Msg]:
        msg: Msg = {"role": e["role"], "text": e.get("text")}
        if e.get("tool_calls"):
            msg["tool_calls"] = [
                {"id": c["id"], "name": c["name"], "arguments": self._call_args(c)} for c in e["tool_calls"]
            ]
        if e.get("extra"):
            msg["extra"] = e["extra"]
        if e.get("extra_chars"):
            if e["i"] < self.thinking_horizon and self.sheds_reasoning(e):
                msg["drop_thinking"] = True  # the adapter renders it without its reasoning
            else:
                msg["extra_chars"] = e["extra_chars"]
        if e.get("block_chars"):
            msg["block_chars"] = e["block_chars"]
        return [msg]

    def sheds_reasoning(self, e: Entry) -> bool:
        """Whether an entry's reasoning (``extra_chars``) leaves it past the thinking horizon: an
        assistant message's, and from layout 5 only one with text or calls besides (rendered
        without it, one holding nothing else would be empty, which the Anthropic API refuses)."""
        return (
            e["role"] == "assistant"
            and bool(e.get("extra_chars"))
            and (self.layout < 5 or bool(e.get("text") or e.get("tool_calls")))
        )

    def _build(self) -> None:
        """Extend the memo with entries made visible since the last render."""
        if self._built_upto == 0 and self.horizon:
            self._build_horizon()
        for pos in range(self._built_upto, len(self.visible)):
            e = self.entries[self.visible[pos]]
            if e["role"] == "tool":
                call_id = e.get("tool_call_id", "")
                paired = self._open is not None and call_id in self._open[2]
                if paired:
                    assert self._open is not None
                    self._open[2].discard(call_id)
                else:
                    # a result that answers no open call is shown as a note: the calls still open
                    # get their synthetic results before it, or they would be cut off from them
                    self._close_open()
                self._append_unit(_unit(e["i"], self._tool_msgs(e, paired), self.hash_memo))
                continue
            self._close_open()
            self._append_unit(_unit(e["i"], self._entry_msgs(e), self.hash_memo))
            if self.sheds_reasoning(e):
                self._reasoning.append(e["i"])
            if e["role"] == "assistant" and e.get("tool_calls"):
                calls = e["tool_calls"]
                self._open = (e["i"], calls, {c["id"] for c in calls})
        self._built_upto = len(self.visible)

    def _build_horizon(self) -> None:
        """The memo starts with the entries behind the horizon: their system messages as they
        are, then one note in place of the rest (``horizon_text``)."""
        cut = bisect.bisect_left(self.visible, self.horizon)
        if cut == 0:
            return
        behind = self._behind
        if behind is None or behind.cut > cut or (behind.cut and self.visible[behind.cut - 1] != behind.last):
            behind = _Behind()  # first built, or the history was rewritten under it
        behind.extend(self.entries[i] for i in self.visible[behind.cut : cut])
        behind.cut, behind.last = cut, self.visible[cut - 1]
        self._behind = behind
        for e in behind.system:
            self._append_unit(_unit(e["i"], self._entry_msgs(e), self.hash_memo))
        self._append_unit(_unit(None, [_user(behind.text(self.horizon))], self.hash_memo))
        self._built_upto = cut

    def conversation_tokens(self) -> int:
        """Tokens of the conversation as it renders now: the history (the horizon's note
        included) without the tool results still expanded in it, which come and go, nor its
        system messages, which no horizon hides (a Codex session's instructions and developer
        messages, 12k tokens: counted, a horizon that kept 12k could keep nothing and moved at
        every call)."""
        self._build()
        return self._hist_tokens - self._hist_system - sum(self._units[pos].tokens for pos in self._expanded_units())

    def _expanded_units(self) -> list[int]:
        """History positions of the tool results shown expanded."""
        units = (self._unit_of.get(o.entry) for o in self.live() if o.in_history and o.entry is not None)
        return [p for p in units if p is not None]

    def horizon_for(self, keep_tokens: int) -> int | None:
        """Where the horizon would move so that at most ``keep_tokens`` of conversation (as
        ``conversation_tokens`` counts it) stand after it: the first chat entry it would show, or
        None if it would not move. It stands before a user or assistant message (never between a
        call and its results, never at a system message)."""
        self._build()
        skip = set(self._expanded_units())
        kept, pos = 0, len(self._units)
        while pos > 0:
            unit = self._units[pos - 1]
            system = unit.entry is not None and self.entries[unit.entry]["role"] == "system"
            tokens = 0 if pos - 1 in skip or system else unit.tokens
            if kept + tokens > keep_tokens:
                break
            kept += tokens
            pos -= 1
        for unit in self._units[pos:]:
            e = self.entries[unit.entry] if unit.entry is not None else None
            if e is not None and e["role"] in ("user", "assistant") and e["i"] > self.horizon:
                return e["i"]
        return None

    def history_text(self, start: int | None = None, end: int | None = None) -> str:
        """Visible chat entries from ``start`` to ``end`` (exclusive) as text, what the ``history``
        tool shows: each message with its entry number, a call's long arguments elided, a tool
        result as its stub (``activate`` loads it). By default the entries just before the horizon
        (or the newest); at most ``HISTORY_ENTRIES`` entries and ``HISTORY_CHARS`` characters, the
        last line saying where to go on."""
        if end is None:
            end = self.horizon or len(self.entries)
        if start is None:
            start = max(0, end - HISTORY_ENTRIES)
        if start < 0 or end < start:
            raise InputError(f"history: no entries from {start} to {end} (this session has {len(self.entries)})")
        first = bisect.bisect_left(self.visible, start)
        upto = bisect.bisect_left(self.visible, end, lo=first)
        out: list[str] = []
        size, pos = 0, first
        while pos < upto and len(out) < HISTORY_ENTRIES:
            text = _entry_line(self.entries[self.visible[pos]], self.objects, self.policy.elide_arguments_over_chars)
            if out and size + len(text) > HISTORY_CHARS:
                break
            out.append(text)
            size += len(text) + 1
            pos += 1
        if not out:
            return f"No chat entries from {start} to {end} (this session has {len(self.entries)})."
        if pos < upto:
            resume = self.visible[pos]
            out.append(f"(entries {resume} to {end - 1} not shown here: history(start={resume}) goes on)")
        return "\n".join(out)

    def thinking_due(self, keep: int) -> tuple[int, int, int] | None:
        """Where the thinking horizon would move so that only the ``keep`` newest assistant
        messages with reasoning keep it: (the new horizon, the history position of the first
        message it changes, the tokens it frees per call), or None if it would not move."""
        self._build()
        r = self._reasoning
        if len(r) <= keep:
            return None
        to = r[-keep] if keep else r[-1] + 1
        changed = self._passed(to)
        if not changed:
            return None
        freed = sum(estimate_tokens(int(self.entries[i].get("extra_chars") or 0)) for i in changed)
        return to, self._unit_of[changed[0]], freed

    def move_thinking_horizon(self, to: int) -> None:
        """Move the thinking horizon to ``to`` (back to 0: every message shows its reasoning
        again): the messages it passes render anew."""
        self._build()
        changed = self._passed(to)
        self.thinking_horizon = to
        for i in changed:
            self.refresh_entry(i)

    def _passed(self, to: int) -> list[int]:
        """The built messages with reasoning between the thinking horizon and ``to`` (either way)."""
        low, high = sorted((self.thinking_horizon, to))
        r = self._reasoning
        return r[bisect.bisect_left(r, low) : bisect.bisect_left(r, high)]

    def refresh_entry(self, entry_index: int) -> None:
        """Re-render one entry (a tool result, or the call that made it) after a state change."""
        pos = self._unit_of.get(entry_index)
        if pos is None:
            return
        old = self._units[pos]
        e = self.entries[entry_index]
        msgs = self._tool_msgs(e, paired=old.msgs[0]["role"] == "tool") if e["role"] == "tool" else self._entry_msgs(e)
        new = _unit(entry_index, msgs, self.hash_memo)
        if new.hash != old.hash:  # the same bytes again (a state change that shows the same): unchanged
            self._dirty_from = min(self._dirty_from, pos)
        self._units[pos] = new
        self._hist_tokens += new.tokens - old.tokens
        if e["role"] == "system":
            self._hist_system += new.tokens - old.tokens
        self._sums.add(pos, new.tokens - old.tokens)
        self._hist_msgs += len(new.msgs) - len(old.msgs)

    def index_tokens(self, o: ObjInfo) -> int:
        """The tokens ``o``'s index line says activating it costs (from layout 13): those of its
        text, or, for a file too large for the active pool on its own (as ``FileTools`` decides,
        a read or an ``activate`` showing a window from its top) or with lines in focus, the
        window of ``file_view_chars`` the pool shows."""
        policy = self.policy
        view = policy.file_view_chars
        if self.layout < 13 or o.kind != "file" or view is None:
            return o.tokens
        chars, limit = o.meta.get("chars"), o.meta.get("context_chars")
        if not isinstance(chars, int) or isinstance(chars, bool):
            return o.tokens
        if isinstance(limit, int) and not isinstance(limit, bool):
            chars = min(chars, limit)
        pool = policy.active_pool_tokens
        if chars <= view or not (o.focus or (pool is not None and estimate_tokens(chars) > pool)):
            return o.tokens
        return min(o.tokens, estimate_tokens(view))

    def shown_tokens(self, o: ObjInfo) -> int:
        """Tokens ``o`` takes in the active pool (its text as shown: a window of a long file)."""
        return estimate_tokens(len(self.shown_text(o)))

    def shown_text(self, o: ObjInfo) -> str:
        """What the active pool shows of ``o``: ``active_text``, a tool result clipped as in the
        history (``result_text``)."""
        if o.kind == "toolcall" and isinstance(o.content, str):
            return self.result_text(o)
        return active_text(o, self.policy.file_view_chars, self.layout)

    def collapse_gain(self, o: ObjInfo) -> int:
        """Tokens collapsing the tool result ``o`` frees: its output as shown (clipped, if long), and
        the long arguments of its call that collapse with it; none if its harness sends it whole
        all the same (``sent_whole``)."""
        if sent_whole(o):
            return 0
        clipped = self.clipped_result(o)
        gain = o.tokens if clipped is None else estimate_tokens(len(clipped))
        call = self.call_of(o)
        if call is not None:
            before = msg_chars({"role": "assistant", "text": None, "tool_calls": [call]})
            elided = self._elided(call["arguments"], o)
            after = msg_chars({"role": "assistant", "text": None, "tool_calls": [{**call, "arguments": elided}]})
            gain += estimate_tokens(max(0, before - after))
        return gain

    # --- the volatile part -------------------------------------------------------------------

    def block_id(self, unit: Unit) -> str:
        """The id of the document that holds a block's text (one per distinct text)."""
        return f"block:{self.session_id}:{unit.hash.removeprefix(HASH_PREFIX)[:32]}"

    def block_hash(self, text: str) -> str:
        """The hash of a block showing ``text``, as a frame records it with the block's id."""
        return _unit(None, [_user(text)], self.hash_memo).hash

    def metadata_pool(self) -> list[ObjInfo]:
        return sorted((o for o in self._indexed.values() if o.state != "absent"), key=lambda o: o.seq)

    def active_pool(self) -> list[ObjInfo]:
        return sorted((o for o in self.live() if o.in_tail), key=lambda o: (o.since, o.seq))

    def _tail(self) -> list[Msg]:
        meta = self.metadata_pool()
        active = self.active_pool()
        if not meta and not active:
            return []
        lines = [TAIL_OPEN]
        if meta:
            lines.append(INDEX_HEADER)
            lines.extend(_index_line(o, self.layout, self.index_tokens(o)) for o in meta)
        if active:
            lines.append("Active content:")
            for o in active:
                lines.extend(self._object_lines(o))
        lines.append(TAIL_CLOSE)
        return [{"role": "user", "text": "\n".join(lines)}]

    def _tail_blocks(self) -> list[Msg]:
        """The volatile part as blocks that change independently: one per active object, then the
        object index, which changes most often (see ``render`` for where each one stands)."""
        blocks: list[Msg] = []
        for o in self.active_pool():
            lines = [TAIL_OPEN, "Active content:", *self._object_lines(o), TAIL_CLOSE]
            blocks.append({"role": "user", "text": "\n".join(lines)})
        meta = self.metadata_pool()
        if meta:
            lines = [
                TAIL_OPEN,
                INDEX_HEADER,
                *(_index_line(o, self.layout, self.index_tokens(o)) for o in meta),
                TAIL_CLOSE,
            ]
            blocks.append({"role": "user", "text": "\n".join(lines)})
        return blocks

    def _object_lines(self, o: ObjInfo) -> list[str]:
        attrs = f'id="{o.id}" kind="{o.kind}"'
        if o.meta.get("path"):
            attrs += f' path="{shown_name(str(o.meta["path"]), self.layout)}"'
        if o.meta.get("version"):
            attrs += f' version="{o.meta["version"]}"'
        if o.newer and o.newer.get("missing"):
            attrs += (
                f' stale="version {o.newer.get("version", "?")} is newer: the file is missing (deleted or moved away)"'
            )
        elif o.newer and o.newer.get("moved_to"):
            attrs += (
                f' stale="version {o.newer.get("version", "?")} is newer:'
                f' moved to {shown_name(str(o.newer["moved_to"]), self.layout)}, same text"'
            )
        elif o.newer:
            attrs += f' stale="version {o.newer.get("version", "?")} is newer: activate(id) loads it"'
        if o.kind == "message":
            attrs += _message_attrs(o.meta)
        body: list[str] = []
        call = self.call_of(o)
        if call is not None:
            body.append(f"call: {call['name']} {arguments_text(call['arguments'])}")
            body.append("output:")
        body.append(self.shown_text(o))
        end = _end_mark(body) if self.layout >= 11 else "</object>"
        if end != "</object>":
            attrs += f' ends="{end}"'
        return [f"<object {attrs}>", *body, end]

    def call_of(self, o: ObjInfo) -> ToolCall | None:
        """The call whose result the tool result ``o`` is (None: not a tool result, or no call)."""
        if o.kind != "toolcall" or o.call_entry is None:
            return None
        for c in self.entries[o.call_entry].get("tool_calls") or ():
            if c.get("object") == o.id:
                return c
        return None

    def _block_texts(self) -> list[tuple[str, str]]:
        """(key, text) of every block the volatile part shows now: one per object of the active
        pool (key: its id), then the object index (key ``INDEX_KEY``)."""
        out = [
            (o.id, "\n".join([TAIL_OPEN, "Active content:", *self._object_lines(o), TAIL_CLOSE]))
            for o in self.active_pool()
        ]
        meta = self.metadata_pool()
        if meta:
            index = [_index_line(o, self.layout, self.index_tokens(o)) for o in meta]
            out.append((INDEX_KEY, "\n".join([TAIL_OPEN, INDEX_HEADER, *index, TAIL_CLOSE])))
        return out

    def _plan_chains(self, n: int, pending: bool, break_at: int | None = None) -> tuple[dict[str, _Chain], int]:
        """The chains the volatile part would show now, from the committed ones, and the earliest
        position a chain must be shown anew from (``n``: none must).

        An unchanged object keeps its blocks where they stand; a changed one gets a patch block
        at the end (the lines that changed, against what its blocks show); a new one gets a block
        at the end. A chain is shown anew (one block at the end in place of its base and patches)
        when its base stands at or after ``break_at`` (the context is sent anew from there anyway:
        it costs no cache) or when its patches would outweigh its base (``PATCH_LIMIT``). A block
        at the end while calls wait for results (``pending``) floats: it is placed when it is
        shown with nothing waiting (their results come right there)."""
        planned: dict[str, _Chain] = {}
        seq, forced = self._chain_seq, n
        for key, text in self._block_texts():
            chain = self._chains.get(key)
            base_at = n if chain is None or chain.blocks[0].at is None else chain.blocks[0].at
            free = (
                chain is not None
                and break_at is not None
                and base_at >= break_at
                and (len(chain.blocks) > 1 or chain.shown != text)
            )
            if chain is not None and chain.shown == text and not free:
                planned[key] = chain.placed(n, pending)
                continue
            if chain is not None and not free:
                patch = _patch_text(key, chain.shown, text, self.objects.get(key), self.layout)
                patch_tokens = estimate_tokens(len(patch))
                if chain.patch_tokens + patch_tokens <= PATCH_MIN_TOKENS + PATCH_LIMIT * chain.base_tokens:
                    planned[key] = chain.with_patch(patch, text, patch_tokens, self.hash_memo).placed(n, pending)
                    continue
                forced = min(forced, base_at)
            seq += 1
            planned[key] = _Chain.new(key, text, seq, self.hash_memo).placed(n, pending)
        return planned, forced

    def resume_blocks(self, blocks: list[tuple[int | None, str, str]]) -> bool:
        """Take the volatile part of the last committed rendering back, as a session resumed from
        the store has it (its blocks, each ``(position or None, key, text)`` as its last frame
        recorded them): its blocks then stay where they stand, as they would have in the process
        that showed them, and a change costs what it would have cost there (``tokens_after``).
        The view must render that frame as it is now (``Session.open`` checks its hash). False,
        changing nothing, if the blocks are not what this code's chains make."""
        self._build()
        n = len(self._units)
        pending = self._open is not None and bool(self._open[2])
        chains: dict[str, _Chain] = {}
        seq = 0
        for at, key, text in blocks:
            block = _Block(at if at is not None or pending else n, _unit(None, [_user(text)], self.hash_memo))
            chain = chains.get(key)
            if chain is None:
                seq += 1
                chains[key] = _Chain(key, seq, (block,), text, block.unit.tokens)
                continue
            shown = _patched(key, chain.shown, text)
            if shown is None:
                return False
            tokens = chain.patch_tokens + estimate_tokens(len(text))
            chains[key] = replace(chain, blocks=(*chain.blocks, block), shown=shown, patch_tokens=tokens)
        self._chains, self._chain_seq = chains, seq
        self._dirty_from = self._prev_count = n
        placed = sorted(
            ((b.at if b.at is not None else n, c.seq, j), b) for c in chains.values() for j, b in enumerate(c.blocks)
        )
        # (as ``render`` leaves them: the blocks among the history, then those placed at its end)
        fixed = [(key[0], b.unit.hash) for key, b in placed if key[0] < n or (b.at is not None and not pending)]
        self._prev_spliced = fixed
        self.block_refs = [
            [None if b.at is None or b.at >= n else b.at, self.block_id(b.unit), b.unit.hash] for _, b in placed
        ]
        return True

    def position_of(self, o: ObjInfo) -> int | None:
        """Where the context shows ``o`` now, as a history position: a tool result's place in the
        history, or where the base block of an object of the active pool stands (``n``: at the
        end); None if it is not shown."""
        self._build()
        if o.in_history and o.entry is not None:
            return self._unit_of.get(o.entry)
        chain = self._chains.get(o.id)
        if chain is not None:
            at = chain.blocks[0].at
            return len(self._units) if at is None else at
        return None

    def tokens_after(self, pos: int) -> int:
        """Tokens the last committed rendering showed from history position ``pos`` on (history
        units and blocks): what a change there sends again, uncached. History that came since is
        not counted: it is sent uncached anyway."""
        self._build()
        n, sent = len(self._units), min(self._prev_count, len(self._units))
        blocks = sum(
            b.unit.tokens for c in self._chains.values() for b in c.blocks if (n if b.at is None else b.at) >= pos
        )
        history = self._sums.before(sent) - self._sums.before(pos) if pos < sent else 0
        return history + blocks

    def chain_breaks(self) -> tuple[int, list[tuple[int, int]]]:
        """Before a render: the earliest position a chain must be shown anew from (``n``: none
        must), and the (position, tokens its patches take) of every chain with patches."""
        self._build()
        n = len(self._units)
        _, forced = self._plan_chains(n, False)
        patched = [
            (n if c.blocks[0].at is None else c.blocks[0].at, c.patch_tokens)
            for c in self._chains.values()
            if c.patch_tokens
        ]
        return forced, patched

    # --- whole rendering -------------------------------------------------------------------

    def render(
        self,
        *,
        commit: bool = False,
        frame: Mapping[str, Any] | None = None,
        blocks: list[tuple[int | None, str]] | None = None,
        break_at: int | None = None,
    ) -> Rendered:
        """The context for the current state. Pure: same state, same bytes, same hash.

        The volatile part is a list of blocks (one per active object, then the object index). A
        block stays where it was first shown, so the calls after it find it in the provider's
        prefix cache; what changes is added at the end as a patch (``_plan_chains``).
        ``commit=True``: this rendering is the one shown (the session's ``assemble``): blocks keep
        their places and the next ``stable_prefix`` counts from it; other renders only look.
        ``frame`` (with ``blocks``: the texts of its blocks, loaded from the store, at the
        positions it recorded): the content of a recorded frame, to re-render it exactly; frames
        of earlier layouts re-render their own way (``tail_at``, or one block at the end).
        """
        self._build()
        n = len(self._units)
        synthetic: list[Msg] = []
        if self._open is not None and self._open[2]:
            # the last assistant message still waits for results: keep the output valid
            synthetic = [_synthetic_result(c) for c in self._open[1] if c["id"] in self._open[2]]
        placed: list[tuple[int, Unit]] = []  # (history position, block), in order
        end_fixed: list[tuple[int, str]] = []  # blocks at the end that have their place there
        chains: dict[str, _Chain] | None = None
        if frame is not None and "blocks" in frame:
            for at, text in blocks or []:
                placed.append((n if at is None else min(at, n), _unit(None, [_user(text)], self.hash_memo)))
        elif frame is not None:
            old = self._tail() if "tail_layout" not in frame else self._tail_blocks() if self.managed else []
            places = [None] if "tail_layout" not in frame else (frame.get("tail_at") or [])
            for k, m in enumerate(old):
                recorded = places[k] if k < len(places) else None
                placed.append((n if recorded is None else min(recorded, n), _unit(None, [m], self.hash_memo)))
        elif self.managed:
            # blocks go at the end of the history; before a reply the harness ends it with for the
            # model to go on with (a prefill, a turn the provider paused), which must stay last
            last = self._units[-1].msgs if n and not synthetic else []
            end = n - 1 if last and last[-1]["role"] == "assistant" else n
            chains, _ = self._plan_chains(end, bool(synthetic), break_at)
            order = sorted(
                ((b.at if b.at is not None else end, c.seq, j), b)
                for c in chains.values()
                for j, b in enumerate(c.blocks)
            )
            placed = [(key[0], b.unit) for key, b in order]
            if not synthetic:
                # blocks placed at the end stand there on the next call too, with the same bytes
                for key, b in order:
                    if key[0] == n:
                        if b.at is None:
                            break
                        end_fixed.append((n, b.unit.hash))
        spliced: list[tuple[int, int, Unit]] = []  # (history position, block order, block)
        volatile = list(synthetic)
        for k, (at, unit) in enumerate(placed):
            if at < n:
                spliced.append((at, k, unit))
            else:
                volatile.extend(unit.msgs)
        spliced.sort(key=lambda b: (b[0], b[1]))
        stable_h = min(self._dirty_from, self._prev_count)
        hasher = self._hasher_upto(stable_h)
        for at, _, unit in spliced:
            hasher.update(f"@{at}:{unit.hash}\n".encode())
        for m in volatile:
            hasher.update(hash_value(m).encode())
            hasher.update(b"\n")
        stable = self._stable_prefix(stable_h, [(at, u.hash) for at, _, u in spliced])
        tokens = self._hist_tokens + sum(u.tokens for *_, u in spliced)
        volatile_tokens = sum(estimate_tokens(msg_chars(m)) for m in volatile)
        tokens += volatile_tokens
        new_blocks: list[tuple[str, str, str]] = []
        if commit:
            self._dirty_from = self._prev_count = n
            self._prev_spliced = [(at, u.hash) for at, _, u in spliced] + end_fixed
            if chains is not None:
                shown = {b.unit.hash for c in self._chains.values() for b in c.blocks}
                new_blocks = [
                    (self.block_id(b.unit), key, str(b.unit.msgs[0]["text"]))
                    for key, c in chains.items()
                    for b in c.blocks
                    if b.unit.hash not in shown
                ]
                self._chains = chains
                self._chain_seq = max((c.seq for c in chains.values()), default=self._chain_seq)
                self.block_refs = [[at if at < n else None, self.block_id(u), u.hash] for at, u in placed]
        rendered = Rendered(
            self._units,
            n,
            [(at, unit) for at, _, unit in spliced],
            volatile,
            tokens,
            "b3:" + hasher.hexdigest(),
            self.static_refs(),
            stable,
            self._hist_msgs + len(spliced) + len(volatile),
            new_blocks,
        )
        if commit:
            self.renders += 1
            rendered.render_no = self.renders
            uncached = sum(u.tokens for u in rendered.units_from(stable)) + volatile_tokens
            self.sent_total += tokens
            self.uncached_total += uncached
            rendered.prefix_tokens = tokens - uncached
            rendered.pools = self._pool_tokens(tokens, chains)
        return rendered

    def pool_of(self, key: str) -> str:
        """The pool a block counts in, by its chain's key (an object id or ``INDEX_KEY``)."""
        if key == INDEX_KEY:
            return "metadata"
        o = self.objects.get(key)
        return "active" if o is None or o.kind in ("file", "toolcall") else "recall"

    def _pool_tokens(self, tokens: int, chains: dict[str, _Chain] | None) -> dict[str, int]:
        """``tokens`` split by pool: each chain of blocks by its key, the rest is the chat."""
        pools = dict.fromkeys(POOLS, 0)
        for key, chain in (chains or {}).items():
            pools[self.pool_of(key)] += sum(b.unit.tokens for b in chain.blocks)
        pools["chat"] = tokens - pools["metadata"] - pools["active"] - pools["recall"]
        return pools

    def _stable_prefix(self, stable_h: int, spliced: list[tuple[int, str]]) -> int:
        """How many leading units of this rendering the last committed one had too, given the
        first history unit that changed (``stable_h``) and where the blocks stand now and stood."""
        cut = stable_h + sum(1 for at, _ in spliced if at <= stable_h)
        for j, (now, before) in enumerate(zip_longest(spliced, self._prev_spliced)):
            if now != before:
                first = min(b[0] for b in (now, before) if b is not None)
                cut = min(cut, first + j)
                break
        return min(cut, self._prev_count + len(self._prev_spliced))

    def _hasher_upto(self, stable: int) -> Any:
        """A blake3 hasher fed with every unit hash, resumed from the checkpoint (one every
        ``_CHECKPOINT`` units) at or before the first unit that changed."""
        del self._checkpoints[stable // _CHECKPOINT :]  # those fed a unit that changed
        start = _CHECKPOINT * len(self._checkpoints)
        hasher = self._checkpoints[-1].copy() if self._checkpoints else blake3.blake3()
        units, pos = self._units, start
        while pos < len(units):  # a checkpoint's units at a time, in one update
            if pos == _CHECKPOINT * (len(self._checkpoints) + 1):
                self._checkpoints.append(hasher.copy())
            end = min(len(units), _CHECKPOINT * (len(self._checkpoints) + 1))
            hasher.update("".join([f"{u.hash}\n" for u in units[pos:end]]).encode())
            pos = end
        return hasher

    def set_page(self, page: int, version: tuple[int, int | None, str]) -> None:
        """Record the version of chat page ``page`` now stored. A full page is written again only
        when it was evicted (and comes back scrubbed): the full pages' hash is then computed anew,
        or every later frame would name the page as it was before."""
        if self._sealed is not None and page < len(self._sealed.hashes) and self._sealed.hashes[page] != version[2]:
            self._sealed = None
        self.pages[page] = version

    def _sealed_ref(self, count: int) -> dict[str, Any]:
        """One ref for the full pages before the last: they never change once full, so a frame
        names them by count and a hash over their object hashes instead of one ref each."""
        if self._sealed is None or count < len(self._sealed.hashes):
            self._sealed = _SealedPages()
        pages_hash = self._sealed.extend(
            [self.pages.get(p, _EVICTED_PAGE)[2] for p in range(len(self._sealed.hashes), count)]
        )
        return {"id": f"chat:{self.session_id}", "sealed_pages": count, "pages_hash": pages_hash}

    def static_refs(self) -> list[dict[str, Any]]:
        """Static refs of every stored version the rendering draws on, in a stable order."""
        refs: list[dict[str, Any]] = []
        if self.session_version:
            refs.append(_ref(f"session:{self.session_id}", self.session_version))
        # pages are only ever added: their greatest number changes only when their count does
        count, last = self._last_page
        if count != len(self.pages):
            # a page more, the next one (how sessions grow): no need to look at them all
            grown = len(self.pages) == count + 1 and last + 1 in self.pages
            self._last_page = (len(self.pages), last + 1 if grown else max(self.pages, default=-1))
        last = self._last_page[1]
        if last > 0:
            refs.append(self._sealed_ref(last))
        if last >= 0:
            refs.append(_ref(page_id(self.session_id, last), self.pages.get(last, _EVICTED_PAGE)))
        shown = {o.id: o for o in self.live()}
        shown.update((o.id, o) for o in self.metadata_pool())
        for o in sorted(shown.values(), key=lambda o: o.id):
            if o.version:
                refs.append(_ref(o.id, o.version))
        return refs


def arguments_text(arguments: Any) -> str:
    """A call's arguments as text: a JSON string as it came, an object as JSON (its characters
    as they are, keys sorted: object arguments come back from the store with sorted keys, and a
    re-render must match)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def elide_arguments(arguments: Any, obj_id: str, limit: int, *, lists: bool = True, keys: Iterable[str] = ()) -> Any:
    """Replace string values longer than ``limit`` in a call's arguments by a short note, and
    with ``lists`` (layout 6) a list or object value whose compact JSON is longer than that too
    (a todo list, a batch of edits): no part of it is worth its tokens once the result collapsed.
    The values of ``keys`` (top-level keys; ``""``: arguments that are not a JSON object, whole)
    are elided whatever their length: a file's text (layout 11, ``ObjInfo.file_text``).

    JSON-string arguments (OpenAI) stay JSON strings that parse; object arguments stay objects
    with the same keys. Arguments that are not a JSON object are left alone unless they are
    themselves too long (or ``keys`` names them).
    """
    always = frozenset(keys)

    def note(value: str) -> str:
        if not obj_id.startswith("toolcall:"):  # a short ref (layout 2)
            return f'[{len(value):,} chars elided: activate("{obj_id}")]'
        return f'[context_os: {len(value):,} chars elided; activate(id="{obj_id}") shows the full call]'

    def whole(v: Any) -> Any:  # an empty text too: the file may not be empty now
        return note(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, separators=(",", ":")))

    def walk(v: Any, top: bool = False) -> Any:
        if isinstance(v, str):
            return note(v) if len(v) > limit else v
        if lists and not top and isinstance(v, dict | list):
            # whole or elided: nothing in a value within the limit is over it
            text = json.dumps(v, ensure_ascii=False, separators=(",", ":"))
            return note(text) if len(text) > limit else v
        if isinstance(v, dict):
            if top and always:
                return {k: whole(x) if k in always else walk(x) for k, x in v.items()}
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    if isinstance(arguments, str):
        if len(arguments) <= limit and not always:
            return arguments
        try:
            parsed = json.loads(arguments)
        except ValueError:
            if len(arguments) <= limit and "" not in always:
                return arguments
            return json.dumps({"_elided": note(arguments)})
        if not isinstance(parsed, dict) and len(arguments) <= limit:
            return arguments  # a JSON value that is no object: no keys to elide
        return json.dumps(walk(parsed, top=True), ensure_ascii=False)
    if not isinstance(arguments, dict) and "" in always:
        return whole(arguments)
    return walk(arguments, top=True)


def sealed_pages_hash(object_hashes: list[str]) -> str:
    """The hash a frame records for a session's full chat pages, in page order."""
    return hash_value(object_hashes)


class _SealedPages:
    """``sealed_pages_hash`` kept up to date as pages fill, without hashing them all again: the
    canonical JSON of a list of hash strings is ``["h1","h2",…]``, fed to blake3 as it grows."""

    def __init__(self) -> None:
        self.hashes: list[str] = []
        self._hasher = blake3.blake3(b"[")

    def extend(self, hashes: list[str]) -> str:
        for h in hashes:
            self._hasher.update(canonical_json(h) if not self.hashes else b"," + canonical_json(h))
            self.hashes.append(h)
        final = self._hasher.copy()
        final.update(b"]")
        return HASH_PREFIX + final.hexdigest()


def page_id(session_id: str, page: int) -> str:
    return f"chat:{session_id}:{page:05d}"


_EVICTED_PAGE: tuple[int, int | None, str] = (0, None, "evicted")
"""The version a chat page evicted from the store stands as in refs: ``load_view`` brings its
entries back scrubbed from the tombstone, and no version of it names what a frame showed (so the
frame fails verification, naming the page, instead of failing to render)."""


def _ref(id: str, version: tuple[int, int | None, str]) -> dict[str, Any]:
    return {"id": id, "valid_time": version[0], "tx_id": version[1], "object_hash": version[2]}


def _message_attrs(m: Mapping[str, Any]) -> str:
    """Where a mesh message comes from (or goes to), what it is, when it was sent."""
    peer = m.get("peer")
    who = f"{m.get('peer_name') or '?'} ({peer})" if peer else "every peer"
    attrs = f' {"from" if m.get("direction") == "in" else "to"}="{who}" message="{m.get("kind", "?")}"'
    if m.get("type"):
        attrs += f' type="{m["type"]}"'
    if m.get("request_id"):
        attrs += f' request="{m["request_id"]}"'
    if m.get("in_reply_to"):
        attrs += f' reply_to="{m["in_reply_to"]}"'
    if isinstance(m.get("sent_at"), int):
        attrs += f' sent="{iso(m["sent_at"])}"'
    if m.get("error"):
        attrs += ' error="true"'
    return attrs


HISTORY_ENTRIES = 40
"""The ``history`` tool shows at most this many entries at a time."""
HISTORY_CHARS = 16_000
"""... and at most this many characters."""


def _entry_line(e: Entry, objects: Mapping[str, ObjInfo], elide_over: int) -> str:
    """One chat entry as the ``history`` tool shows it."""
    head = f"[{e['i']}] {e['role']}"
    if e["role"] == "tool":
        obj = objects.get(e.get("object", ""))
        if obj is None:
            shown = "[this tool output was erased from the store]"
        else:  # a result sent whole shows in its place, whole: here, its stub says how to see it
            shown = _stub(obj, LAYOUT) if sent_whole(obj) else stub_text(obj)
        return f"{head}: {shown}"
    parts = [f"{head}: {_clip(str(e['text']), HISTORY_CHARS)}" if e.get("text") else head]
    for c in e.get("tool_calls") or ():
        obj = objects.get(c.get("object", ""))
        handle = (short_ref(obj) if obj is not None else None) or c.get("object", "")
        keys = (obj.file_text or ()) if obj is not None else ()
        elided = elide_arguments(c["arguments"], handle, elide_over, keys=keys)
        parts.append(f"  call {c['name']} {arguments_text(elided)}")
    return "\n".join(parts)


HORIZON_USER_CHARS = 1_500
"""A user message behind the horizon shows at most this many characters in its note."""
HORIZON_USER_MESSAGES = 8
"""The note shows the first user message behind the horizon and the newest ones, this many in all."""
HORIZON_PATHS = 30
"""The note names at most this many files (the newest its tool calls named)."""
_PATH_KEYS = ("path", "file_path", "filePath", "filename", "notebook_path")


def _call_path(arguments: Any) -> str | None:
    """The file a tool call names, by the argument names file tools use (a harness-neutral guess)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    for key in _PATH_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and 0 < len(value) <= 300:
            return value
    return None


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}" + ("" if n == 1 else "s")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]} … ({len(text) - limit:,} more characters)"


@dataclass
class _Behind:
    """What the horizon's note says of the entries behind it, kept as the horizon moves: a move
    reads only the entries it passes (counting them all again at every move costs a long
    session a pass over its whole history each time)."""

    cut: int = 0
    """Visible positions taken in."""
    last: int = -1
    """The entry at position ``cut - 1`` (a history rewritten by the harness no longer has it there)."""
    roles: Counter[str] = field(default_factory=Counter)
    tools: Counter[str] = field(default_factory=Counter)
    paths: dict[str, None] = field(default_factory=dict)
    """Files the tool calls named, by their latest mention, oldest first."""
    said: list[Entry] = field(default_factory=list)
    system: list[Entry] = field(default_factory=list)

    def extend(self, entries: Iterable[Entry]) -> _Behind:
        for e in entries:
            self.roles[e["role"]] += 1
            if e["role"] == "system":
                self.system.append(e)
            elif e["role"] == "user" and (e.get("text") or "").strip():
                self.said.append(e)
            for c in e.get("tool_calls") or ():
                self.tools[c["name"]] += 1
                path = _call_path(c["arguments"])
                if path is not None:
                    self.paths.pop(path, None)
                    self.paths[path] = None
        return self

    def text(self, horizon: int) -> str:
        """The note (``horizon_text``). Its wording is part of how frames render: a change to it
        needs a new ``LAYOUT`` (frames of the old one must still re-render the old way)."""
        roles, tools, said = self.roles, self.tools, self.said
        lines = [
            TAIL_OPEN,
            f"The conversation before chat entry {horizon} is not shown here: history(start, end) shows any part "
            'of it (a tool result as a one-line stub: activate("r<entry>") loads one).',
            f"It holds {_count(roles['user'], 'user message')}, {_count(roles['assistant'], 'assistant message')} "
            f"and {_count(roles['tool'], 'tool result')}"
            + (f"; tool calls: {', '.join(f'{name} {n}' for name, n in tools.most_common())}." if tools else "."),
        ]
        if self.paths:
            named = list(reversed(self.paths))
            more = f" and {len(named) - HORIZON_PATHS} more" if len(named) > HORIZON_PATHS else ""
            lines.append(f"Files its tool calls named, newest first: {', '.join(named[:HORIZON_PATHS])}{more}.")
        if said:
            shown = said if len(said) <= HORIZON_USER_MESSAGES else [said[0], *said[1 - HORIZON_USER_MESSAGES :]]
            lines.append("What the user said in it:")
            for k, e in enumerate(shown):
                if k == 1 and len(shown) < len(said):
                    lines.append(
                        f"({_count(len(said) - len(shown), 'user message')} between these: history shows them)"
                    )
                lines.append(f"[{e['i']}] {_clip(str(e['text']), HORIZON_USER_CHARS)}")
        lines.append(TAIL_CLOSE)
        return "\n".join(lines)


def horizon_text(hidden: list[Entry], horizon: int) -> str:
    """The note that stands for the history behind the horizon (``hidden``: its entries, in order):
    how to see it again, what it held (messages, tool calls by name, the files they named, newest
    first) and what the user said in it (the first message and the newest, each clipped)."""
    return _Behind().extend(hidden).text(horizon)


def _index_line(o: ObjInfo, layout: int = LAYOUT, tokens: int | None = None) -> str:
    """``o``'s line in the object index; ``tokens``: what activating it costs (default ``o.tokens``)."""
    name = o.meta.get("path") or o.meta.get("name") or ""
    parts = [f"- {o.id}", o.kind]
    if name:
        parts.append(shown_name(str(name), layout))
    parts.append(f"{o.tokens if tokens is None else tokens} tokens")
    if o.kind == "recall" and isinstance(o.meta.get("preview"), str):  # hits stored since it was written
        parts.append(json.dumps(o.meta["preview"], ensure_ascii=False))
    if o.meta.get("version"):
        parts.append(f"v{o.meta['version']}")
    if o.newer:
        gone = (
            ": missing"
            if o.newer.get("missing")
            else f": moved to {shown_name(str(o.newer['moved_to']), layout)}"
            if o.newer.get("moved_to")
            else ""
        )
        parts.append(f"(v{o.newer.get('version', '?')} newer{gone})")
    if o.meta.get("missing"):
        parts.append("missing")
    parts.append("pinned" if o.pinned else o.state)
    return " ".join(parts)
