"""The read model of sessions over time: the sessions a store holds, a session's turns a page at
a time, one turn's frame message by message (each tied to the object and version it shows), and
what changed between two turns.

``ctxos sessions``, the web view (server/ui) and JSON-RPC read sessions and frames through here
and context/frames.py; nothing else queries frames. A page of turns reads only the frames it
shows (by id), never every frame of a session.

This module only reads the store.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..errors import NotFound, StoreCorrupt
from ..hashing import canonical_json, hash_value
from ..store.base import DocMemo, Store, Version
from ..times import iso
from .entries import Msg
from .frames import FrameCheck, FrameMemo, FrameRow, frame_id, frame_row, get_frame, verify_frame, well_formed
from .load import session_meta
from .persist import PAGE_SIZE
from .view import INDEX_KEY, page_id

__all__ = [
    "FrameDiff",
    "FrameMessage",
    "SessionRow",
    "TurnRow",
    "frame_diff",
    "frame_messages",
    "session_page",
    "session_rows",
    "sessions_newest_first",
    "turn_count",
    "turn_rows",
    "version_at",
]


@dataclass(frozen=True)
class SessionRow:
    """One session as its document and its latest frame say."""

    session: str
    harness: str | None
    source: str | None
    """What recorded its messages when not the harness live (a replay: the transcript's format)."""
    turns: int
    messages: int
    """Messages taken in from the harness (the session's cursor)."""
    updated: str
    """When the session last wrote (ISO 8601 UTC)."""
    updated_ms: int
    tokens_full: int | None
    """At the latest turn: what the full, unmanaged transcript would have sent (None: no frame)."""
    tokens_assembled: int | None
    """At the latest turn: what context_os sent."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def session_rows(store: Store) -> list[SessionRow]:
    """Every session in the store, least recently updated first."""
    return [_session_row(store, v) for v in _sessions(store)]


def session_page(
    store: Store,
    start: int = 0,
    count: int | None = None,
    *,
    with_turns: bool = False,
    docs: DocMemo | None = None,
) -> tuple[int, list[SessionRow]]:
    """The sessions of the store most recently updated first (``with_turns``: only those with a
    turn): how many there are, and rows ``start`` to ``start + count - 1`` of them (``count``
    None: to the end). The session documents are listed in one query; only the rows returned
    read their latest frame. ``docs``: a memo of session documents kept from call to call (a
    caller that lists the sessions again and again: a session document that has not changed is
    not parsed again); left holding only the ones in force, not for concurrent use."""
    listed = _sessions(store, docs)
    if with_turns:
        listed = [v for v in listed if _turns(v) > 0]
    listed.reverse()
    end = None if count is None else start + count
    return len(listed), [_session_row(store, v) for v in listed[start:end]]


def sessions_newest_first(store: Store) -> Iterator[SessionRow]:
    """The sessions of the store most recently updated first, each row read (its latest frame)
    only when it is reached: a caller that stops early reads no more."""
    for v in reversed(_sessions(store)):
        yield _session_row(store, v)


def _sessions(store: Store, docs: DocMemo | None = None) -> list[Version]:
    """The session documents in force, least recently updated first (``docs``: see
    ``session_page``)."""
    found = [v for v in store.find("session", docs=docs) if v.doc is not None]
    if docs is not None:  # the versions no longer in force leave the memo
        live = {id(v.doc) for v in found}
        for key in [key for key, doc in docs.items() if id(doc) not in live]:
            del docs[key]
    return sorted(found, key=lambda v: (v.valid_time, v.id))


def _turns(v: Version) -> int:
    return int(session_meta(v).get("turn", 0))


def _session_row(store: Store, v: Version) -> SessionRow:
    """The row of the session document ``v``: it reads the session's latest frame
    (``StoreCorrupt`` if either was changed by hand out of the shape a session writes)."""
    assert v.doc is not None
    c, m = v.doc.get("content"), session_meta(v)
    if not isinstance(c, dict) or not isinstance(m.get("session"), str):
        raise StoreCorrupt(f"{v.id} @ tx {v.tx_id} is damaged: it names no session", id=v.id, tx_id=v.tx_id)
    turns = _turns(v)
    latest = store.get(frame_id(m["session"], turns)) if turns else None
    last = well_formed(latest.doc, latest.tx_id) if latest is not None and latest.doc is not None else None
    return SessionRow(
        session=m["session"],
        harness=c.get("harness"),
        source=c.get("source"),
        turns=turns,
        messages=int(m.get("cursor", 0)),
        updated=iso(v.valid_time),
        updated_ms=v.valid_time,
        tokens_full=last["content"]["tokens_full"] if last else None,
        tokens_assembled=last["content"]["tokens"] if last else None,
    )


def turn_count(store: Store, session_id: str) -> int:
    """How many turns (frames) ``session_id`` has; ``NotFound`` if there is no such session."""
    v = store.get(f"session:{session_id}")
    if v is None or v.doc is None:
        raise NotFound(f"no session {session_id!r} in {store.url}")
    return _turns(v)


@dataclass(frozen=True)
class TurnRow:
    """One turn for the timeline: its frame row, what was active and what changed state."""

    row: FrameRow
    active_ids: list[str]
    changes: list[dict[str, Any]]
    """Objects whose state changed since the previous turn (``FrameContent.changes``)."""

    def to_dict(self) -> dict[str, Any]:
        return {**self.row.to_dict(), "active_ids": self.active_ids, "changes": self.changes}


def turn_rows(store: Store, session_id: str, first: int, count: int) -> list[TurnRow]:
    """Turns ``first`` to ``first + count - 1`` of a session (turns count from 1), reading those
    frames only; a turn with no frame (evicted) is left out."""
    rows = []
    for turn in range(max(1, first), first + count):
        v = store.get(frame_id(session_id, turn))
        if v is None or v.doc is None:
            continue
        c = v.doc["content"]
        rows.append(TurnRow(frame_row(v), list(c["active"]), list(c.get("changes", []))))
    return rows


@dataclass(frozen=True)
class FrameMessage:
    """One message of a re-rendered frame and where it comes from."""

    index: int
    role: str
    text: str | None
    tool_calls: list[dict[str, Any]]
    tool_call_id: str | None
    origin: str
    """``history`` (a chat entry), ``block`` (an object's or the index's block of the volatile
    part) or ``synthetic`` (a result standing in for a call still running)."""
    pool: str
    """The pool it counts in (view.POOLS)."""
    object_id: str | None
    """The object it shows: a chat page, a tool call, a file, a source's item (None: the index)."""
    version: dict[str, Any] | None
    """The static ref (``id``, ``valid_time``, ``tx_id``, ``object_hash``) of the version shown,
    when the frame names it."""
    entry: int | None = None
    """For a history message: its chat entry."""


def frame_messages(
    store: Store, frame: dict[str, Any], check: FrameCheck, start: int = 0, stop: int | None = None
) -> tuple[int, list[FrameMessage]]:
    """How many messages ``check`` re-rendered from ``frame``, and those from ``start`` to
    ``stop`` (default: all), each tied to what it shows."""
    if check.rendered is None or check.view is None:
        return 0, []
    rendered, view = check.rendered, check.view
    c = frame["content"]
    refs = {r["id"]: r for r in check.refs if "sealed_pages" not in r}
    block_keys: dict[str, str] = {}
    for _, block_id, unit_hash in c.get("blocks", []):
        doc = store.doc(block_id)
        if doc is not None:
            block_keys[unit_hash] = doc["meta"]["object"]
    out: list[FrameMessage] = []
    index = 0
    stop = rendered.message_count if stop is None else stop

    def add(m: Msg, origin: str, pool: str, obj: str | None, entry: int | None = None) -> None:
        nonlocal index
        index += 1
        if not start <= index - 1 < stop:
            return
        version = refs.get(obj) if obj else None
        if obj and version is None:
            # a full chat page is named by the frame's aggregate ref, a tool result in the history
            # by the chat page: the view knows the version it rendered
            at = view.pages.get(int(obj.rsplit(":", 1)[1])) if obj.startswith("chat:") else None
            o = view.objects.get(obj)
            at = at or (o.version if o else None)
            if at:
                version = {"id": obj, "valid_time": at[0], "tx_id": at[1], "object_hash": at[2]}
        out.append(
            FrameMessage(
                index - 1,
                m["role"],
                m.get("text"),
                [dict(t) for t in m.get("tool_calls") or ()],
                m.get("tool_call_id"),
                origin,
                pool,
                obj,
                version,
                entry,
            )
        )

    def block(m: Msg, unit_hash: str) -> None:
        key = block_keys.get(unit_hash)
        if key is None:
            add(m, "synthetic", "chat", None)
            return
        add(m, "block", view.pool_of(key), None if key == INDEX_KEY else key)

    for unit in rendered.units:
        if index >= stop:
            break
        if index + len(unit.msgs) <= start:  # before the page: counted, not built
            index += len(unit.msgs)
            continue
        if unit.entry is None:
            for m in unit.msgs:
                block(m, unit.hash)
            continue
        e = view.entries[unit.entry]
        obj = e.get("object") if e["role"] == "tool" else page_id(view.session_id, unit.entry // PAGE_SIZE)
        for m in unit.msgs:
            add(m, "history", "chat", obj, unit.entry)
    for m in rendered.volatile:
        block(m, hash_value([m]))
    return rendered.message_count, out


@dataclass
class FrameDiff:
    """Turn ``b`` against turn ``a`` of one session."""

    session: str
    a: int
    b: int
    tokens: tuple[int, int]
    messages: tuple[int, int]
    prompt_bytes: tuple[int, int]
    """Each prompt's size as canonical JSON, one message per line (what ``first_byte`` counts in)."""
    first_byte: int | None
    """The first byte where the two prompts differ (None: they are the same, or ``rendered`` says
    one could not be re-rendered): where ``b`` stops repeating ``a`` (``a``'s size when ``b``
    extends it)."""
    first_message: int | None
    """The message of ``b`` that byte falls in (None also when ``b``'s prompt ends there:
    ``a_extends_b``)."""
    b_extends_a: bool
    """``a``'s prompt is a prefix of ``b``'s: a prompt cache keeps all of it."""
    rendered: tuple[bool, bool] = (True, True)
    """Whether each frame could be re-rendered (not: a version it showed was evicted, or is
    damaged). Unless both were, the prompts are not compared: no first byte, no hunks."""
    entered: list[dict[str, Any]] = field(default_factory=list)
    """Objects ``b`` shows that ``a`` did not (static refs)."""
    left: list[dict[str, Any]] = field(default_factory=list)
    """Objects ``a`` showed that ``b`` does not."""
    changed: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    """Objects both show at different versions: (ref in ``a``, ref in ``b``)."""
    activated: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)
    hunks: list[dict[str, Any]] = field(default_factory=list)
    """Messages that differ, as ``difflib`` opcodes over the two message lists: ``op``
    (``insert``, ``delete``, ``replace``), ``a`` and ``b`` (index ranges), and the messages."""
    checks: tuple[FrameCheck, FrameCheck] | None = None
    a_extends_b: bool = False
    """``b``'s prompt is a proper prefix of ``a``'s (``b`` the earlier turn): ``first_byte`` is
    where ``b``'s ends."""

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "checks"}
        d["verified"] = [c.ok for c in self.checks] if self.checks else None
        return d


def _prompt_lines(messages: list[Msg]) -> list[bytes]:
    return [canonical_json(m) + b"\n" for m in messages]


def frame_diff(
    store: Store,
    session_id: str,
    a: int,
    b: int,
    *,
    max_hunks: int = 50,
    check: Callable[[dict[str, Any]], FrameCheck] | None = None,
) -> FrameDiff:
    """What changed from turn ``a`` to turn ``b``: both frames re-rendered and verified (by
    ``check``, e.g. one that keeps what it verified; default ``verify_frame``); ``StoreCorrupt``
    if either frame document is damaged in its shape (``well_formed``)."""
    fa, fb = (well_formed(get_frame(store, session_id, turn)) for turn in (a, b))
    if check is None:
        memo = FrameMemo()
        ca, cb = (verify_frame(store, f, memo=memo) for f in (fa, fb))
    else:
        ca, cb = check(fa), check(fb)
    ma = ca.rendered.messages if ca.rendered else []
    mb = cb.rendered.messages if cb.rendered else []
    rendered = (ca.rendered is not None, cb.rendered is not None)
    comparable = all(rendered)  # a frame not re-rendered has no prompt to compare
    la, lb = _prompt_lines(ma), _prompt_lines(mb)
    first_byte: int | None = None
    first_message: int | None = None
    offset = 0
    for k in range(max(len(la), len(lb)) if comparable else 0):
        x, y = (la[k] if k < len(la) else b""), (lb[k] if k < len(lb) else b"")
        if x != y:
            n = 0
            while n < min(len(x), len(y)) and x[n] == y[n]:
                n += 1
            # a message of b, unless b ended before it (b's prompt is all of a's start)
            first_byte, first_message = offset + n, k if k < len(lb) else None
            break
        offset += len(x)
    size_a, size_b = sum(map(len, la)), sum(map(len, lb))
    extends = comparable and (first_byte is None or first_byte == size_a)
    a_extends = comparable and first_byte is not None and first_message is None
    refs_a, refs_b = _named(ca), _named(cb)
    act_a, act_b = fa["content"]["active"], fb["content"]["active"]
    diff = FrameDiff(
        session_id,
        a,
        b,
        (fa["content"]["tokens"], fb["content"]["tokens"]),
        (len(ma), len(mb)),
        (size_a, size_b),
        first_byte,
        first_message,
        extends,
        rendered,
        entered=[refs_b[i] for i in sorted(refs_b.keys() - refs_a.keys())],
        left=[refs_a[i] for i in sorted(refs_a.keys() - refs_b.keys())],
        changed=[
            (refs_a[i], refs_b[i])
            for i in sorted(refs_a.keys() & refs_b.keys())
            if refs_a[i]["object_hash"] != refs_b[i]["object_hash"]
        ],
        activated=[i for i in act_b if i not in set(act_a)],
        deactivated=[i for i in act_a if i not in set(act_b)],
        checks=(ca, cb),
        a_extends_b=a_extends,
    )
    # the common head and tail are cut first: difflib then only sees what changed
    head = first_message if first_message is not None else min(len(la), len(lb))
    tail = 0
    while tail < min(len(la), len(lb)) - head and la[-1 - tail] == lb[-1 - tail]:
        tail += 1
    matcher = difflib.SequenceMatcher(None, la[head : len(la) - tail], lb[head : len(lb) - tail], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes() if comparable else ():
        if op == "equal":
            continue
        if len(diff.hunks) == max_hunks:
            break
        diff.hunks.append(
            {
                "op": op,
                "a": [head + i1, head + i2],
                "b": [head + j1, head + j2],
                "removed": ma[head + i1 : head + i2],
                "added": mb[head + j1 : head + j2],
            }
        )
    return diff


def _named(check: FrameCheck) -> dict[str, dict[str, Any]]:
    """The versions a frame names, by id: its static refs, and the full chat pages it names by
    count and hash each as its own (from the view it was re-rendered from): a page that filled
    between two frames was said to have left the context."""
    named: dict[str, dict[str, Any]] = {}
    for ref in check.refs:
        if "sealed_pages" not in ref:
            named[ref["id"]] = ref
        elif check.view is not None:
            for page in range(ref["sealed_pages"]):
                version = check.view.pages.get(page)
                if version is not None:  # (a page missing fails the frame's check: said there)
                    vt, tx, object_hash = version
                    pid = page_id(check.view.session_id, page)
                    named[pid] = {"id": pid, "valid_time": vt, "tx_id": tx, "object_hash": object_hash}
    return named


def version_at(store: Store, obj_id: str, versions: list[Version], valid_time: int | None, tx_id: int | None) -> int:
    """The 1-based number in ``versions`` (an object's history) of the version in force at
    ``valid_time`` as of ``tx_id``; 0 if none was."""
    v = store.get(obj_id, valid_time, tx_id)
    if v is None:
        return 0
    for n, h in enumerate(versions, 1):
        if (h.valid_time, h.tx_id) == (v.valid_time, v.tx_id):
            return n
    return 0
