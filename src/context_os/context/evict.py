"""Erasing an object whose history leaked a secret, everywhere, including running sessions.

``evict(store, id)`` erases every version of the object (``Evict``) and, in the same
transaction, writes its **tombstone** (``tombstone:<id>``): which object went, which session it
belonged to, and what a writer needs to carry on without it. The content is never in it.

The tombstone is what every writer checks before it writes something that may hold the text:

* a running ``Session`` reads the tombstones before every turn and drops the text from its
  view: an evicted tool output shows as erased, an evicted file object leaves the session, an
  evicted chat page is replaced by its *scrubbed* form (same messages, tool calls and ids, every
  text erased), which the session then writes in place of the page (erasing again whatever it
  wrote in the meantime). So a live session never writes the secret back, and never shows it
  to the model again;
* ``load_view`` rebuilds an evicted page from its tombstone, so a session still opens and its
  tool calls still pair;
* the file index does not index a file again while its bytes are the ones evicted (it records
  it metadata-only until the file changes).

The blocks that showed the object in rendered contexts (its text as the active pool showed it,
and patches of it) are evicted with it, as are the recall objects that quoted it (each with its
own tombstone) and the object-index blocks that listed either (a path, a recall hit's preview).
Frames that showed an evicted object no longer verify (nor re-render as they were): that is the
point; their check names the tombstone that explains each block they lost (``block_ids``).

This module writes tombstones and evictions only; it never reads or changes a session's view.
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError, NotFound
from ..objects import TombstoneDoc, path_key
from ..store.base import Evict, Put, Store, next_valid_time, now_ms
from ..times import iso
from .entries import Entry, ToolCall
from .load import ended_ids
from .view import INDEX_KEY

__all__ = [
    "EVICTED_TEXT",
    "KEPT_KINDS",
    "SOURCE_KINDS",
    "evict",
    "evictions",
    "forget_paths",
    "holding",
    "kind_of",
    "no_object",
    "path_holds",
    "refuse_kept",
    "scrub_entries",
    "tombstone_id",
]

EVICTED_TEXT = "[context_os: erased from the store]"
"""What an evicted chat message's text becomes."""


KEPT_KINDS = frozenset({"session", "lease", "state", "frame", "tombstone", "outbox"})
"""Kinds ``holding`` names but an eviction by text leaves: what a session needs to open (its
document, lease, states), its frames (hashes only), the tombstones that keep evictions in force
and the markers of transactions written while the store was away (they hold no text)."""


_KEPT_WHY = {
    "session": "a session's document (its harness, workspace, cursor, turn and policy): without it the"
    " session is listed nowhere while its chat, frames and objects stay, and the next open starts it again"
    " at turn 0 over them",
    "lease": "a session's lease (it lets one writer in at a time): without it a second process may write"
    " the session while the one holding it does",
    "state": "a session's record of its objects' states (what was active or pinned, by whom, why): without"
    " it the session no longer knows what it showed",
    "frame": "the record of what one model call was sent (its refs and hashes, none of the text): without it"
    " the turn has no frame to show or verify",
    "tombstone": "what keeps an eviction in force: without it a running session may write the evicted text"
    " back, and the file index take the evicted bytes in again",
    "outbox": "the marker of a transaction written while the store's node was away and sent when it was"
    " back (it tells the provisional transaction id that frames and refs of that time name as the real"
    " one): without it those frames and refs name a transaction nothing resolves",
}


def refuse_kept(obj_id: str, kind: object) -> None:
    """``InputError`` if ``obj_id`` (a document of ``kind``) is one of a session's own records
    (``KEPT_KINDS``): erased by id, it damaged the session it belongs to, and an eviction by text
    leaves it too. It holds no tool output or file text; the objects that do are what to evict."""
    if kind in KEPT_KINDS:
        raise InputError(
            f"{obj_id} cannot be evicted: it is {_KEPT_WHY[str(kind)]}. An eviction erases an object whose"
            " history leaked a secret (a tool output, a file, a chat page, a memory, a message); to erase a"
            " leaked text, evict the objects that hold it: `ctxos objects evict --containing TEXT` lists them"
            " (and the session's own records that hold it, which it leaves as this one). No command removes a"
            " whole session"
        )


SOURCE_KINDS = frozenset({"memory", "recall"})
"""Kinds whose text a source brings in from outside the store (context/sources.py): their
tombstones keep the hashes of the evicted text (``content_hashes``), which is not stored again."""


def tombstone_id(obj_id: str) -> str:
    return f"tombstone:{obj_id}"


def _scrub_arguments(arguments: Any) -> Any:
    return "{}" if isinstance(arguments, str) else {}


def scrub_entries(entries: list[Entry]) -> list[Entry]:
    """Chat entries with everything that may hold text removed; roles, ids, tool calls and
    their pairing, the message hashes (the harness cursor) and token counts stay."""
    out: list[Entry] = []
    for e in entries:
        kept: Entry = {
            "i": e["i"],
            "role": e["role"],
            "h": e["h"],
            "text": None if e.get("text") is None else EVICTED_TEXT,
        }
        for key in ("ts", "ft", "tool_call_id", "object"):
            if key in e:
                kept[key] = e[key]
        calls = e.get("tool_calls")
        if calls:
            scrubbed: list[ToolCall] = []
            for c in calls:
                call = ToolCall(id=c["id"], name=c["name"], arguments=_scrub_arguments(c["arguments"]))
                if "object" in c:
                    call["object"] = c["object"]
                scrubbed.append(call)
            kept["tool_calls"] = scrubbed
        out.append(kept)
    return out


def evictions(store: Store, ids: list[str], *, since: int | None = None, after_tx: int | None = None) -> dict[str, str]:
    """Those of ``ids`` that were evicted (``since``: last evicted at or after that time, in ms,
    or in a transaction after ``after_tx``: the clock of the host that evicted may run behind),
    each with how its tombstone says it was: ``evicted at <time> (<reason>), in tx <n>``."""
    out: dict[str, str] = {}
    for oid in ids:
        tomb = store.get(tombstone_id(oid))
        if tomb is None or tomb.doc is None:
            continue
        content = tomb.doc.get("content") or {}
        when = content.get("evicted_at")
        before = since is not None and isinstance(when, int) and when < since
        if before and (after_tx is None or tomb.tx_id <= after_tx):
            continue  # written again after that eviction (a chat page scrubbed): not what it erased
        at = f" at {iso(when)}" if isinstance(when, int) else ""
        why = f" ({content['reason']})" if isinstance(content.get("reason"), str) else ""
        out[oid] = f"evicted{at}{why}, in tx {tomb.tx_id}"
    return out


def no_object(store: Store, object_id: str) -> NotFound:
    """``object_id`` is in no version of the store. ``chat:<session>``, which a frame's refs name
    for the chat pages it seals, is no object of its own: the error names the pages that are."""
    kind, _, session = object_id.partition(":")
    pages = sorted(v.id for v in store.find("chat", {"session": session})) if kind == "chat" and session else []
    if pages and object_id not in pages:
        return NotFound(
            f"no object {object_id!r} in {store.url}: the chat of session {session!r} is stored as {len(pages)} "
            f"page(s), {pages[0]} to {pages[-1]} (a frame's ref {{id: {object_id}, sealed_pages: N}} names the "
            "first N of them)"
        )
    how = evictions(store, [object_id]).get(object_id)
    if how is not None:
        return NotFound(f"no object {object_id!r} in {store.url}: it was {how}; nothing of it is left in the store")
    return NotFound(f"no object {object_id!r} in {store.url}")


def kind_of(obj_id: str, versions: list[Any]) -> str:
    """The kind of ``obj_id`` as its newest stored version says (``versions``: its history, with
    documents, in any order), else as its id's prefix does (every version deleted)."""
    docs = [v.doc for v in sorted(versions, key=lambda v: (v.valid_time, v.tx_id)) if v.doc is not None]
    kind = docs[-1].get("kind") if docs else None
    return kind if isinstance(kind, str) else obj_id.split(":", 1)[0]


def _tombstone(obj_id: str, latest: list[Any], reason: str, blocks: list[str]) -> dict[str, Any]:
    """The tombstone of ``obj_id``, whose versions (newest first) are ``latest``, evicted with
    ``blocks`` (block ids: a frame that showed one of them re-renders without it, and its check
    finds here why; an id is a hash of the block's text, which frames name anyway)."""
    docs = [v.doc for v in latest if v.doc is not None]
    doc: dict[str, Any] = docs[0] if docs else {"kind": obj_id.split(":", 1)[0], "meta": {}}
    meta: dict[str, Any] = doc.get("meta") or {}
    kind = str(doc.get("kind"))
    tomb_meta: dict[str, Any] = {"object": obj_id, "object_kind": kind}
    content: dict[str, Any] = {"evicted_at": now_ms(), "reason": reason, "versions": len(latest), "blocks": len(blocks)}
    content["block_ids"] = blocks
    if isinstance(meta.get("session"), str):
        tomb_meta["session"] = meta["session"]
    if kind == "chat":
        content["page"] = meta.get("page")
        content["entries"] = scrub_entries(doc.get("content") or [])
    if kind in SOURCE_KINDS:
        # the text of every evicted version: its source reads it again from outside the store (a
        # memory file, lines of one), and sessions do not store it again while it offers that text
        content["content_hashes"] = sorted({str(d["content_hash"]) for d in docs if d.get("content_hash")})
    if kind == "message":
        # the broadcasts it was (their ids, hashes of what was sent, and when): the agent that
        # received one does not store a copy that comes again (context_os/mesh/agent.py)
        content["broadcasts"] = {
            str(m["message_id"]): m.get("sent_at")
            for m in (d.get("meta") or {} for d in docs)
            if m.get("kind") == "broadcast" and m.get("message_id")
        }
    if kind == "file":
        # the bytes of every evicted version: the index will not take them in again
        content["shas"] = sorted({str(d["meta"]["sha"]) for d in docs if (d.get("meta") or {}).get("sha")})
        if isinstance(meta.get("abs_path"), str):
            tomb_meta["path_key"] = path_key(meta["abs_path"])  # not the path: it may hold the secret
    return TombstoneDoc(id=tombstone_id(obj_id), content=content, meta=tomb_meta).to_doc()


def _index_blocks(store: Store, ids: list[str]) -> list[str]:
    """The object-index blocks (``block:…`` of object ``index``) with a line for one of ``ids``:
    a line holds the object's path, or a recall hit's preview. A patch of the index (``_patch_text``
    in view.py) has them as diff lines: removed, added or kept (``-``, ``+``, `` `` before them)."""
    lines = tuple(f"\n{mark}- {i} " for i in ids for mark in ("", "-", "+", " "))
    return [
        v.id
        for v in store.find("block", {"object": INDEX_KEY})
        if v.doc is not None and isinstance(v.doc.get("content"), str) and any(x in v.doc["content"] for x in lines)
    ]


def evict(store: Store, obj_id: str, *, reason: str = "evicted") -> dict[str, Any]:
    """Erase every version of ``obj_id`` and leave its tombstone; returns what was done.

    What was made of its text goes with it, in the same transaction: the recall objects that
    quoted it (``recall:<id>#<part>``, each with its own tombstone, so running sessions drop them
    too), the blocks that showed it or them (their text, patches of it), and the object-index
    blocks that listed any of them (a path, a recall hit's preview)."""
    latest = store.history(obj_id, "desc", with_docs=True)
    if not latest:
        raise NotFound(f"no object {obj_id!r} in {store.url}")
    kind = kind_of(obj_id, latest)
    refuse_kept(obj_id, kind)
    gone = {obj_id: latest}
    for v in store.find("recall", {"object": obj_id}):
        if v.id not in gone and (versions := store.history(v.id, "desc", with_docs=True)):
            gone[v.id] = versions
    # the blocks that showed them (their text, or patches of it) in rendered contexts go with them
    shown = {g: sorted(v.id for v in store.find("block", {"object": g})) for g in gone}
    blocks = sorted({b for bs in shown.values() for b in bs})
    index_blocks = sorted(set(_index_blocks(store, list(gone))) - set(blocks))
    derived = sorted(g for g in gone if g != obj_id)
    tombs = [
        # a block evicted itself (by id, or by ``--containing`` when no object took it along) is
        # one its tombstone names: the frames that showed it are checked as frames that showed
        # what was evicted, not as damaged
        _tombstone(obj_id, latest, reason, sorted({*blocks, *index_blocks, *([obj_id] if kind == "block" else [])})),
        *(_tombstone(d, gone[d], f"{reason}: it quoted {obj_id}", shown[d]) for d in derived),
    ]
    valid = next_valid_time()
    tx = store.submit(
        [
            *(Evict(g) for g in gone),
            *(Evict(b) for b in [*blocks, *index_blocks]),
            *(Put(t, valid) for t in tombs),
        ]
    )
    return {
        "id": obj_id,
        "versions": len(latest),
        "blocks": len(blocks) + len(index_blocks),
        "derived": derived,
        "evicted": tx.committed,
        "tx_id": tx.id,
        "tombstone": tombs[0]["id"],
        "left_in_files": tx.left_in_files,
    }


def _holds(value: Any, text: str) -> bool:
    """Whether a string anywhere in the JSON value ``value`` contains ``text``."""
    if isinstance(value, str):
        return text in value
    if isinstance(value, dict):
        return any(_holds(k, text) or _holds(v, text) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds(v, text) for v in value)
    return False


def holding(store: Store, text: str) -> list[dict[str, Any]]:
    """Every object a version of which holds ``text`` in a string (its content, its meta, a tool
    call's arguments), in any valid and transaction time, corrected versions included:
    ``[{id, kind, versions}]`` (``versions``: how many hold it), sorted by id. The documents in
    force are read with their whole history, and so are the objects deleted since that the
    keyword index knows (every one it indexed: the text may be in a deleted version's meta, a
    recall copy's query, not in its indexed text). Reads every version of the store: for a
    leaked secret, not for a loop."""
    if not text:
        raise InputError("the text to look for is empty")
    ids = {v.id for v in store.find()}
    ids.update(ended_ids(store, ids))
    found: list[dict[str, Any]] = []
    for oid in sorted(ids):
        versions = store.history(oid, with_docs=True, with_corrections=True)
        held = [v for v in versions if v.doc is not None and _holds(v.doc, text)]
        if held:
            kind = held[-1].doc.get("kind") if held[-1].doc else None
            found.append({"id": oid, "kind": kind if isinstance(kind, str) else None, "versions": len(held)})
    return found


def path_holds(doc: dict[str, Any] | None, text: str) -> bool:
    """Whether ``doc`` is a file's tombstone written before 2026-11-30, which keeps the file's
    absolute path (``meta.abs_path``), and that path holds ``text`` (``forget_paths`` rewrites it)."""
    path = ((doc or {}).get("meta") or {}).get("abs_path")
    return isinstance(path, str) and text in path


def forget_paths(store: Store, text: str, done: list[str] | None = None) -> list[str]:
    """Tombstones of files written before 2026-11-30 keep the file's absolute path
    (``meta.abs_path``), which may hold a secret (a file named after a key): each whose path holds
    ``text`` is written anew with the path's hash (``path_key``) in its place, as tombstones are
    now, the old one evicted; returns their ids. The new one is put right after the eviction, in
    a transaction of its own (an eviction erases whatever the same transaction put). ``done``, if
    given, gets each id as soon as it is written anew: what a caller cut short (Ctrl-C while an
    SQLite store rebuilds its file) reports it did."""
    out: list[str] = [] if done is None else done
    for v in store.find("tombstone"):
        doc = v.doc or {}
        if not path_holds(doc, text):
            continue
        meta: dict[str, Any] = dict(doc["meta"])
        meta["path_key"] = path_key(meta.pop("abs_path"))
        tomb = TombstoneDoc(id=v.id, content=doc.get("content") or {}, meta=meta).to_doc()
        try:
            store.submit([Evict(v.id)])
        finally:
            # also when the eviction committed and then failed or was cut short (Ctrl-C while an
            # SQLite store rebuilds its file): without its tombstone the evicted object comes back
            if not store.history(v.id, with_docs=False):
                store.submit([Put(tomb, next_valid_time())])
                out.append(v.id)
    return out
