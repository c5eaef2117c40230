"""Rebuilding a session's view from the store, as of any valid time and transaction.

``load_view`` is how a session resumes (``Session.open``) and how a frame is re-rendered and
verified (context/frames.py): the chat pages (an evicted page comes back scrubbed from its
tombstone), the tool-call objects of the session, and every other object the session showed,
each in the state and at the exact version its last recorded state change names.

This module only reads the store.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from ..errors import ConfigError, NotFound, StoreCorrupt
from ..store.base import DocMemo, Store, Version
from ..times import display, iso
from .entries import ROLES, Entry
from .persist import PAGE_SIZE
from .policy import RetentionPolicy
from .view import ObjInfo, SessionView, page_id

__all__ = [
    "VersionMemo",
    "content_lines",
    "ended_ids",
    "load_view",
    "memo_get",
    "object_state_page",
    "object_states",
    "session_meta",
    "unified_diff",
    "version_row",
]


def load_view(
    store: Store,
    session_id: str,
    *,
    valid_time: int | None = None,
    tx_id: int | None = None,
    hash_memo: dict[bytes, tuple[str, int]] | None = None,
    docs: DocMemo | None = None,
    versions: VersionMemo | None = None,
) -> SessionView:
    """Rebuild a session's view from the store, as of a valid time and a transaction
    (``hash_memo``: a unit-hash memo shared by many rebuilds, see ``SessionView.hash_memo``;
    ``docs``: parsed documents shared by them, ``DocMemo``: the view then shares them too, and
    must be read only; ``versions``: the exact versions they read, ``VersionMemo``)."""
    sv = store.get(f"session:{session_id}", valid_time, tx_id)
    if sv is None or sv.doc is None:
        raise NotFound(f"no session {session_id!r} in {store.url}" + (f" as of tx {tx_id}" if tx_id else ""))
    meta = session_meta(sv)
    try:
        policy = RetentionPolicy.from_stored(meta.get("policy", {}))
    except ConfigError as e:  # a setting this version does not know (a newer one wrote it), or a row edited
        raise _damaged(sv, f"its policy cannot be read ({e})") from e
    view = SessionView(
        session_id,
        policy,
        turn=meta.get("turn", 0),
        hash_memo=hash_memo,
        managed=meta.get("managed_from", 0) is not None,  # sessions from before it are managed
    )
    view.horizon = int(meta.get("horizon", 0))
    view.thinking_horizon = int(meta.get("thinking_horizon", 0))
    view.session_version = (sv.valid_time, sv.tx_id, sv.doc["object_hash"])
    chats = store.find("chat", {"session": session_id}, valid_time=valid_time, tx_id=tx_id, docs=docs)
    by_page: dict[int, list[Entry]] = {}
    for v in chats:
        if v.doc is not None:
            page = _page_number(v)
            by_page[page] = _page_entries(v)
            view.pages[page] = (v.valid_time, v.tx_id, v.doc["object_hash"])
    n_entries = int(meta.get("entries", 0))
    n_pages = -(-n_entries // PAGE_SIZE)
    if len(by_page) < n_pages:
        # an evicted page (context/evict.py) comes back scrubbed from its tombstone, as it stood at
        # the basis: a tombstone, written since, holds the page's newest entries, and pages the
        # session had not begun then (a frame re-rendered as of an early turn)
        for t in store.find("tombstone", {"session": session_id}):
            c = (t.doc or {}).get("content", {})
            page = c.get("page")
            if (t.doc or {}).get("meta", {}).get("object_kind") != "chat" or page in by_page:
                continue
            if isinstance(page, int) and page < n_pages:
                by_page[page] = [e for e in c["entries"] if e["i"] < n_entries]
    for page in range(max(n_pages, len(by_page))):
        got = by_page.get(page)
        if got is None or any(e["i"] != len(view.entries) + k for k, e in enumerate(got)):
            where = f"session {session_id!r}: chat page {page}"
            raise StoreCorrupt(f"{where} is missing or out of order", id=page_id(session_id, page))
        view.entries.extend(got)
    # the pages are the truth of what was ingested; the session doc says what was retired
    retired = {i for lo, hi in meta.get("retired", []) for i in range(lo, hi)}
    view.visible = [e["i"] for e in view.entries if e["i"] not in retired]
    entry_of = {e["object"]: e["i"] for e in view.entries if e.get("object") and e["role"] == "tool"}
    call_entry_of = {c["object"]: e["i"] for e in view.entries for c in e.get("tool_calls") or () if c.get("object")}
    states = {
        st.doc["meta"]["object"]: st.doc
        for st in store.find("state", {"session": session_id}, valid_time=valid_time, tx_id=tx_id, docs=docs)
        if st.doc is not None
    }
    for v in store.find("toolcall", {"session": session_id}, valid_time=valid_time, tx_id=tx_id, docs=docs):
        if v.doc is not None:
            view.add_object(_loaded(v, states.pop(v.id, None), entry_of.get(v.id), call_entry_of.get(v.id)))
    for oid, st in states.items():
        shown = st["meta"].get("shown")
        # the exact version the session showed, else the one in force at the basis
        if shown and versions is not None:
            found = memo_get(versions, store, oid, shown[0], shown[1])
        else:
            found = store.get(oid, shown[0], shown[1]) if shown else store.get(oid, valid_time, tx_id)
        if found is not None and found.doc is not None:
            view.add_object(_loaded(found, st, None, None))
    return view


def _damaged(v: Version, what: str) -> StoreCorrupt:
    return StoreCorrupt(
        f"{v.id} @ tx {v.tx_id} is damaged: {what} (`ctxos verify` re-hashes every document)", id=v.id, tx_id=v.tx_id
    )


def ended_ids(store: Store, in_force: set[str]) -> list[str]:
    """The ids of documents no longer in force (``in_force``: those ``Store.find`` lists) that
    the keyword index knows, every one it indexed: a memory whose file was deleted, the recall
    copies of it. Their versions stay stored, frames that showed them re-render from them, and
    only the index still names them. Sorted."""
    ids: set[str] = set()
    after = 0
    while parts := store.text_parts(after_seq=after, limit=1000):
        ids.update(p.id for p in parts)
        after = parts[-1].seq
    return sorted(ids - in_force)


def is_int(value: Any) -> bool:
    """An integer, not a bool (which Python counts as one): what a stored count or turn must be."""
    return isinstance(value, int) and not isinstance(value, bool)


def session_meta(v: Version) -> dict[str, Any]:
    """The meta of a session document, ``StoreCorrupt`` if what a view is rebuilt from (or a
    session's row lists) is not of the type the session wrote (a row changed by hand)."""
    meta = (v.doc or {}).get("meta")
    if not isinstance(meta, dict):
        raise _damaged(v, "it has no meta")
    for key in ("turn", "cursor", "entries", "horizon", "thinking_horizon"):
        if key in meta and not is_int(meta[key]):
            raise _damaged(v, f"meta.{key} is not an integer")
    retired = meta.get("retired", [])
    if not isinstance(retired, list) or not all(
        isinstance(r, list) and len(r) == 2 and all(map(is_int, r)) for r in retired
    ):
        raise _damaged(v, "meta.retired is not a list of entry ranges")
    if not isinstance(meta.get("policy", {}), dict):
        raise _damaged(v, "meta.policy is not an object")
    return meta


def _page_number(v: Version) -> int:
    meta = (v.doc or {}).get("meta")
    page = meta.get("page") if isinstance(meta, dict) else None
    if not isinstance(page, int) or isinstance(page, bool):
        raise _damaged(v, "meta.page is not an integer")
    return page


_OPTIONAL: dict[str, type] = {"object": str, "extra": dict}
"""What an optional field of a chat entry that a view takes as it is holds (``entries.Entry``)."""


def _entry_problem(e: Any) -> str | None:
    """What is wrong with a stored chat entry's shape (None: nothing): the fields a view reads
    and renders as they are."""
    if not isinstance(e, dict):
        return "it is not an object"
    if not is_int(e.get("i")):
        return "i is not an integer"
    if e.get("role") not in ROLES:
        return "role is not one of " + ", ".join(ROLES)
    if not (e.get("text") is None or isinstance(e.get("text"), str)):
        return "text is not a string"
    for key, kind in _OPTIONAL.items():
        if key in e and not isinstance(e[key], kind):
            return f"{key} is not {'a string' if kind is str else 'an object'}"
    calls = e.get("tool_calls")
    if calls is not None and not (
        isinstance(calls, list)
        and all(isinstance(c, dict) and "id" in c and isinstance(c.get("object", ""), str) for c in calls)
    ):
        return "tool_calls is not a list of calls"
    return None


def _page_entries(v: Version) -> list[Entry]:
    """The entries of a stored chat page, ``StoreCorrupt`` naming the first that is not of the
    shape a session writes (a row changed by hand)."""
    content = (v.doc or {}).get("content")
    if not isinstance(content, list):
        raise _damaged(v, "its content is not a list of chat entries")
    for k, e in enumerate(content):
        problem = _entry_problem(e)
        if problem:
            raise _damaged(v, f"its entry {k}: {problem}")
    return content


VersionMemo = dict[tuple[str, int, int], Version | None]
"""Versions read by the exact valid time and transaction that name them (what a frame shows), shared
by many rebuilds of one session (re-rendering its frames): as ``DocMemo``, read only."""


def memo_get(memo: VersionMemo, store: Store, id: str, valid_time: int, tx_id: int) -> Version | None:
    """``store.get(id, valid_time, tx_id)`` through ``memo``."""
    key = (id, valid_time, tx_id)
    if key not in memo:
        memo[key] = store.get(id, valid_time, tx_id)
    return memo[key]


def _loaded(v: Version, state: dict[str, Any] | None, entry: int | None, call_entry: int | None) -> ObjInfo:
    """An object as the store has it; a tool result without a state version is as it arrived."""
    assert v.doc is not None
    doc = v.doc
    meta = doc.get("meta", {})
    st: dict[str, Any]
    sm: dict[str, Any]
    if state is None:
        st, sm = (
            {"state": "active", "pinned": False, "collapsed": False},
            {"seq": entry or 0, "since": meta.get("turn", 0)},
        )
    else:
        st, sm = state["content"], state["meta"]
    return ObjInfo(
        id=v.id,
        kind=doc["kind"],
        meta=meta,
        content=doc.get("content"),
        state=st["state"],
        pinned=st["pinned"],
        collapsed=st["collapsed"],
        file_text=_keys(st.get("file_text")),
        seq=sm.get("seq", 0),
        since=sm.get("since", 0),
        uses=float(sm.get("uses", 1.0)),  # a state written before uses were kept: one, at ``since``
        version=(v.valid_time, v.tx_id, doc["object_hash"]),
        entry=entry,
        call_entry=call_entry,
        newer=sm.get("newer"),
        focus=sm.get("focus"),
        joined_at=sm.get("joined_at"),
        active_at=sm.get("active_at"),
    )


def _keys(value: Any) -> list[str] | None:
    """A state's ``file_text``: the argument keys holding a file's text (None: not such a call)."""
    return [k for k in value if isinstance(k, str)] if isinstance(value, list) else None


def version_row(n: int, v: Version, *, with_doc: bool = False) -> dict[str, Any]:
    """One version of an object as ``ctxos objects inspect`` and the MCP server show it: its
    1-based number in the object's history (0: not counted), times, transaction and hashes."""
    doc = v.doc or {}
    row: dict[str, Any] = {
        "version": n,
        "valid_time": display(v.valid_time),
        "valid_time_ms": v.valid_time,
        "tx_time": display(v.tx_time),
        "tx_id": v.tx_id,
        "deleted": v.deleted,
        "content_hash": doc.get("content_hash"),
        "meta_hash": doc.get("meta_hash"),
        "object_hash": doc.get("object_hash"),
    }
    if with_doc:
        row["doc"] = v.doc
    return row


def object_states(store: Store, obj_id: str) -> list[dict[str, Any]]:
    """Every recorded state change of ``obj_id``, in every session, oldest first."""
    return _state_rows(store, _state_heads(store, obj_id))


def object_state_page(store: Store, obj_id: str, start: int | None, page: int) -> tuple[int, int, list[dict[str, Any]]]:
    """One page of the recorded state changes of ``obj_id`` in every session, oldest first: how
    many there are, where the page starts and its changes. ``start`` None (or past the end): the
    last page; pages start at multiples of ``page``. The changes are listed without their
    documents; only the page's are read whole."""
    heads = _state_heads(store, obj_id)
    last = max(0, len(heads) - 1) // page * page
    first = last if start is None or start > last else start
    return len(heads), first, _state_rows(store, heads[first : first + page])


def _state_heads(store: Store, obj_id: str) -> list[tuple[int, int, str]]:
    """(valid time, tx, state document id) of every state change of ``obj_id``, oldest first."""
    return sorted(
        (v.valid_time, v.tx_id, current.id)
        for current in store.find("state", {"object": obj_id})
        for v in store.history(current.id, with_docs=False)
        if not v.deleted
    )


def _state_rows(store: Store, heads: list[tuple[int, int, str]]) -> list[dict[str, Any]]:
    rows = []
    for valid_time, tx_id, state_id in heads:
        v = store.get(state_id, valid_time, tx_id)
        if v is None or v.doc is None:
            continue
        c, m = v.doc["content"], v.doc["meta"]
        rows.append(
            {
                "time": iso(v.valid_time),
                "time_ms": v.valid_time,
                "tx_id": v.tx_id,
                "session": m["session"],
                "turn": m.get("turn"),
                "state": c["state"],
                "pinned": c["pinned"],
                "actor": m.get("actor"),
                "reason": m.get("reason"),
            }
        )
    return rows


def content_lines(doc: dict[str, Any] | None) -> list[str]:
    """A document's content as lines with their ends: text as it is, anything else as indented
    JSON (what ``unified_diff`` compares)."""
    if doc is None:
        return []
    c = doc.get("content")
    text = c if isinstance(c, str) else json.dumps(c, indent=2, ensure_ascii=False, sort_keys=True)
    # lines end at a line feed alone, as diff and patch read them (``str.splitlines`` also splits at
    # a form feed, U+2028 or a lone CR: a "No newline" marker in the middle of a hunk, refused by
    # patch, before 2026-12-02)
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def unified_diff(a: list[str], b: list[str], from_name: str, to_name: str) -> str:
    """``diff -u`` of two texts split with their line ends: a last line without one is followed
    by ``\\ No newline at end of file``, as diff and patch write it (difflib leaves it glued to
    the next line of the diff)."""
    out = []
    for line in difflib.unified_diff(a, b, from_name, to_name):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)
