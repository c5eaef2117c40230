"""Frames: the one read model of what was assembled, and the re-render check.

``frame_rows`` lists a session's frames (one ``FrameRow`` per turn, the same fields in the CLI,
JSON-RPC and Python); ``frame_docs`` gives the documents, ``get_frame`` one of them.
A frame names its valid time; its basis transaction is the one that wrote it, with the state it
shows (frames written before that name it, ``basis_tx_id``: ``frame_basis``). Rebuilding the
session view as of that point and rendering it must reproduce the recorded hash, and every static
ref must resolve to exactly the version it names (``verify_frame``; a ref written in the frame's
own transaction names none: ``ref_tx``). ``verify_frames`` checks many, in worker processes
when there are enough of them and the store can be opened by another process (``Store.reader``).

This module only reads the store.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..errors import NotFound, StoreCorrupt
from ..hashing import verify_doc
from ..store.base import DocMemo, Store, Version
from ..times import iso
from .evict import evictions
from .load import VersionMemo, is_int, load_view
from .view import LAYOUT, Rendered, SessionView, page_id, sealed_pages_hash

__all__ = [
    "EVICTED_BLOCK",
    "FrameCheck",
    "FrameMemo",
    "FrameRow",
    "frame_basis",
    "frame_docs",
    "frame_id",
    "frame_row",
    "frame_rows",
    "get_frame",
    "no_frames",
    "ref_tx",
    "rerender",
    "verify_frame",
    "verify_frames",
    "well_formed",
]


@dataclass(frozen=True)
class FrameRow:
    """One turn of a session as its frame recorded it."""

    turn: int
    frame_id: str
    valid_time: int
    """When the turn was assembled (epoch ms)."""
    time: str
    """``valid_time`` as ISO 8601 UTC."""
    tx_id: int
    """The transaction that wrote the frame."""
    tokens_full: int
    """What the full, unmanaged transcript would have sent."""
    tokens_assembled: int
    """What context_os sent."""
    messages: int
    active: int
    """Objects active in that turn."""
    rendered_hash: str
    pools: dict[str, int] | None = None
    """Tokens by pool (view.POOLS); None for frames written before they were recorded."""
    prefix_tokens: int | None = None
    """Tokens the previous turn sent too, as this one's prefix (a prompt cache's share)."""
    changes: int | None = None
    """Objects whose state changed since the previous turn."""
    horizon: int = 0
    """The first chat entry the history showed (the history horizon; 0: all of it)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def frame_docs(store: Store, session_id: str) -> list[dict[str, Any]]:
    """Every frame document of a session, in turn order (empty if it has none)."""
    return [v.doc for v in _frame_versions(store, session_id) if v.doc is not None]


def _frame_versions(store: Store, session_id: str) -> list[Version]:
    return sorted((v for v in store.find("frame", {"session": session_id}) if v.doc), key=lambda v: (_turn_of(v), v.id))


def _turn_of(v: Version) -> int:
    """The turn of a frame version: the one its document records, or, in a document damaged
    there, the one its id names (0 if that names none either): it still sorts in its place."""
    meta = (v.doc or {}).get("meta")
    turn = meta.get("turn") if isinstance(meta, dict) else None
    if isinstance(turn, int) and not isinstance(turn, bool):
        return turn
    tail = v.id.rsplit(":", 1)[-1]
    return int(tail) if tail.isascii() and tail.isdigit() else 0


def well_formed(frame: dict[str, Any], tx_id: int | None = None) -> dict[str, Any]:
    """``frame``, a stored frame document (``tx_id``: the transaction that wrote it, if known);
    ``StoreCorrupt`` naming it and what is wrong if it does not have the shape of a frame (a row
    changed by hand): the read models take its fields as they are."""
    malformed = _malformed(frame)
    if malformed:
        at = f" @ tx {tx_id}" if tx_id is not None else ""
        name = str(frame.get("id"))
        raise StoreCorrupt(
            f"{name}{at} is not a frame as context_os writes it: {malformed}"
            " (`ctxos frames verify` checks the frames, `ctxos verify` every document's hashes)",
            id=name,
            tx_id=tx_id,
        )
    return frame


def frame_id(session_id: str, turn: int) -> str:
    """The id of the frame of one turn."""
    return f"frame:{session_id}:{turn:06d}"


def frame_basis(store: Store, frame: dict[str, Any]) -> int:
    """The transaction whose store state ``frame`` was rendered from: the one that wrote the frame
    (with the turn's state), or, in frames written before turns took one transaction, the one it
    names (``basis_tx_id``)."""
    basis = frame["content"].get("basis_tx_id")
    if basis is not None:
        return int(basis)
    v = store.get(frame["id"])  # a frame is written once
    if v is None or v.doc is None:
        raise NotFound(f"{frame['id']} is not in {store.url}")
    return v.tx_id


def ref_tx(ref: dict[str, Any], basis: int) -> int:
    """The transaction of the version a static ref names: a version written with the frame names
    none, its transaction is the frame's basis."""
    tx = ref.get("tx_id")
    return basis if tx is None else int(tx)


def _ref_with_tx(ref: dict[str, Any], basis: int) -> dict[str, Any]:
    """A frame's ref with its transaction named (``ref_tx``); the chat pages' aggregate as it is."""
    return ref if "sealed_pages" in ref else {**ref, "tx_id": ref_tx(ref, basis)}


def frame_row(v: Version) -> FrameRow:
    """The row of one stored frame version (``StoreCorrupt`` if it is damaged: ``well_formed``)."""
    c = well_formed(v.doc or {}, v.tx_id)["content"]
    return FrameRow(
        turn=c["turn"],
        frame_id=v.id,
        valid_time=v.valid_time,
        time=iso(v.valid_time),
        tx_id=v.tx_id,
        tokens_full=c["tokens_full"],
        tokens_assembled=c["tokens"],
        messages=c["messages"],
        active=len(c["active"]),
        rendered_hash=c["rendered_hash"],
        pools=c.get("pools") or None,
        prefix_tokens=c.get("prefix_tokens"),
        changes=c.get("changes_total"),
        horizon=c.get("horizon", 0),
    )


def frame_rows(store: Store, session_id: str) -> list[FrameRow]:
    """One row per turn of ``session_id`` (none for a session that made no model call yet);
    ``NotFound`` if the store has no such session."""
    versions = _frame_versions(store, session_id)
    if not versions and store.doc(f"session:{session_id}") is None:
        raise no_frames(store, session_id, "")
    return [frame_row(v) for v in versions]


def no_frames(store: Store, session_id: str, said: str) -> NotFound:
    """``said`` of a session without frames, or, when the store has no such session, that."""
    if store.doc(f"session:{session_id}") is None:
        return NotFound(f"no session {session_id!r} in {store.url}: `ctxos sessions` lists the sessions it has")
    return NotFound(said)


@dataclass
class FrameCheck:
    """The outcome of re-rendering one frame."""

    frame_id: str
    ok: bool
    recorded_hash: str
    rendered_hash: str
    problems: list[str] = field(default_factory=list)
    rendered: Rendered | None = None
    view: SessionView | None = None
    """The session view the frame was re-rendered from (its entries and objects)."""
    basis: int | None = None
    """The transaction it was rendered from (``frame_basis``)."""
    refs: list[dict[str, Any]] = field(default_factory=list)
    """Its static refs, each naming its transaction (``ref_tx``)."""
    evicted: list[str] = field(default_factory=list)
    """What it showed and was evicted since (their tombstones say when and why), when that alone
    explains every problem: its hash cannot be checked, as what it showed was erased on purpose,
    and everything else in it checks (``evicted_only``)."""
    checked: str | None = None
    """When what it showed was evicted: its hash cannot be checked whole, and this says what was
    checked in its place (its static refs, chat pages and blocks, each against its own hash)."""

    @property
    def evicted_only(self) -> bool:
        """Not verified only because it showed what was evicted since: no sign of damage."""
        return not self.ok and bool(self.evicted)


def get_frame(store: Store, session_id: str, turn: int) -> dict[str, Any]:
    """The frame document of one turn; ``NotFound`` naming the turns the session has, if any."""
    doc = store.doc(frame_id(session_id, turn))
    if doc is None:
        turns = [_turn_of(v) for v in _frame_versions(store, session_id)]
        if not turns:
            raise no_frames(store, session_id, f"no frame for turn {turn}: session {session_id!r} has no frames")
        raise NotFound(f"no frame for turn {turn}: session {session_id!r} has turns {turns[0]}–{turns[-1]}")
    return doc


@dataclass
class FrameMemo:
    """What re-rendering many frames of one session shares, so that each is read and worked out
    once in a pass (``ctxos frames verify``, ``ctxos verify --frames``, a replay's check, a
    frame diff). Every part is keyed by what cannot change while the store keeps it: a message
    by its content (``units``: its canonical hash and tokens), a stored document by its content
    hash (``docs``, ``Store.find``), a block by its id, which names its text's hash
    (``blocks``), a version by the id, valid time and transaction that name it (``versions``: the
    objects a frame showed; ``refs``: the object hash a static ref resolves to). Use one per pass: an
    object evicted after it was read still shows here. The documents are shared, so readers
    must not change them."""

    units: dict[bytes, tuple[str, int]] = field(default_factory=dict)
    docs: DocMemo = field(default_factory=dict)
    blocks: dict[str, str] = field(default_factory=dict)
    versions: VersionMemo = field(default_factory=dict)
    refs: dict[tuple[str, int, int], str | None] = field(default_factory=dict)
    tombstones: TombstoneMemo = field(default_factory=lambda: TombstoneMemo())
    """Shared by the memos of one pass (``_Memos``): the tombstones, read again only once the
    store took a transaction since."""

    def block(self, store: Store, block_id: str) -> str | None:
        """The text of a block document (None: not in the store)."""
        text = self.blocks.get(block_id)
        if text is None:
            doc = store.doc(block_id)
            if doc is None:
                return None
            text = self.blocks[block_id] = str(doc["content"])
        return text

    def ref_hash(self, store: Store, id: str, valid_time: int, tx: int) -> str | None:
        """The object hash of the version of ``id`` in force at ``valid_time`` as of ``tx``."""
        key = (id, valid_time, tx)
        if key not in self.refs:  # the hash alone: a chat page's whole document is not kept for it
            v = self.versions[key] if key in self.versions else store.get(id, valid_time, tx)
            self.refs[key] = v.doc.get("object_hash") if v is not None and v.doc is not None else None
        return self.refs[key]


class TombstoneMemo:
    """The tombstones of a store as of its newest transaction, for the frames of one pass
    (``_blocks_evicted`` needs them for every frame that lost a block: on a node after many
    evictions, reading them all once per frame made the check crawl), and what each tombstone
    that does not list the blocks it erased is taken to have erased so far in the pass (no more
    than the count it keeps)."""

    def __init__(self) -> None:
        self.tx: int | None = None
        self.versions: list[Version] | None = None
        self.taken: dict[str, set[str]] = {}

    def read(self, store: Store) -> list[Version]:
        latest = store.latest_tx()  # the newest readable: what ``find`` reads
        tx = None if latest is None else latest.id
        if self.versions is None or tx != self.tx:
            self.tx, self.versions = tx, store.find("tombstone")
        return self.versions


def rerender(store: Store, frame: dict[str, Any], *, memo: FrameMemo | None = None) -> Rendered:
    """Render the frame's session exactly as it stood at the frame's basis (``memo``: one
    ``FrameMemo`` across the frames of a session reads and hashes what they share once);
    ``NotFound`` if a block it showed is not in the store (evicted), as it cannot be."""
    view, rendered, lost = _rerender(store, frame, frame_basis(store, frame), memo or FrameMemo())
    if lost:
        raise NotFound(f"block {lost[0]} of {frame['id']} is not in the store (evicted?)")
    return rendered


EVICTED_BLOCK = "[context_os: a block this frame showed here was erased from the store since]"
"""What a re-render shows in place of a block of the frame that is no longer in the store (an
eviction erases the blocks that showed what it erases)."""


def _rerender(
    store: Store, frame: dict[str, Any], basis: int, memo: FrameMemo
) -> tuple[SessionView, Rendered, list[str]]:
    """The frame re-rendered, with ``EVICTED_BLOCK`` in place of each block the store no longer
    has, and the ids of those blocks."""
    c = frame["content"]
    session = frame["meta"]["session"]
    view = load_view(
        store,
        session,
        valid_time=c["valid_time"],
        tx_id=basis,
        hash_memo=memo.units,
        docs=memo.docs,
        versions=memo.versions,
    )
    view.layout = c.get("layout", 1)
    view.managed = c.get("managed", True)
    view.horizon = c.get("horizon", 0)
    view.thinking_horizon = c.get("thinking_horizon", 0)
    blocks: list[tuple[int | None, str]] = []
    lost: list[str] = []
    for at, block_id, _ in c.get("blocks", []):
        text = memo.block(store, block_id)
        if text is None:
            lost.append(block_id)
            text = EVICTED_BLOCK
        blocks.append((at, text))
    return view, view.render(frame=c, blocks=blocks), lost


def _check_sealed(view: SessionView, ref: dict[str, Any], basis: int) -> tuple[list[str], list[str]]:
    """The full pages a frame names by count and hash must be in the store as of its basis: the
    pages its re-render read there (``view.pages``: an evicted page, scrubbed from its tombstone,
    is not among them). What is wrong, and the pages it concerns."""
    hashes = []
    for page in range(ref["sealed_pages"]):
        got = view.pages.get(page)
        if got is None:
            missing = f"chat page {page} of {view.session_id} is missing as of tx {basis}"
            return [missing], [page_id(view.session_id, page)]
        hashes.append(got[2])
    if sealed_pages_hash(hashes) != ref["pages_hash"]:
        pages = [page_id(view.session_id, page) for page in range(ref["sealed_pages"])]
        wrong = f"the {ref['sealed_pages']} full chat pages of {view.session_id} do not hash to {ref['pages_hash']}"
        return [wrong], pages
    return [], []


def _evicted(
    store: Store, ids: list[str], since: int | None = None, basis: int | None = None
) -> tuple[list[str], list[str]]:
    """Those of ``ids`` that were evicted (their tombstones: context/evict.py; ``since``: at or
    after that time, a frame's, or in a transaction after its ``basis``, whatever the evicting
    host's clock said: an object evicted before it and written again since, as a chat page is,
    was not erased from what it showed), and why a frame that showed them no longer verifies:
    what it showed was erased, on purpose."""
    found = evictions(store, ids, since=since, after_tx=basis)
    why = [
        f"{oid} was {how}: this frame showed what was erased, so it can no longer be re-rendered as it was"
        for oid, how in found.items()
    ]
    return list(found), why


def _objects_gone(view: SessionView) -> list[str]:
    """The objects the chat entries it shows name (tool results, tool calls) that the view does not
    hold: evicted, or missing. Those behind the history horizon are not shown (one note stands
    for them, made of the entries alone): what was evicted of them changes nothing it renders."""
    named = []
    for i in view.visible:
        if i < view.horizon:
            continue
        e = view.entries[i]
        named += [e["object"]] if e.get("object") else []
        named += [c["object"] for c in e.get("tool_calls") or () if c.get("object")]
    return [oid for oid in dict.fromkeys(named) if oid not in view.objects]


def _is_ref(ref: Any) -> bool:
    """A static ref (``tx_id`` None: the frame's own transaction), or the full chat pages' one."""
    if not isinstance(ref, dict):
        return False
    if "sealed_pages" in ref:
        return is_int(ref["sealed_pages"]) and isinstance(ref.get("pages_hash"), str)
    return (
        isinstance(ref.get("id"), str)
        and is_int(ref.get("valid_time"))
        and (ref.get("tx_id") is None or is_int(ref.get("tx_id")))
        and isinstance(ref.get("object_hash"), str)
    )


def _is_block(block: Any) -> bool:
    """``[position or None, block id, hash]`` (``FrameContent.blocks``)."""
    return (
        isinstance(block, list)
        and len(block) == 3
        and (block[0] is None or is_int(block[0]))
        and isinstance(block[1], str)
        and isinstance(block[2], str)
    )


_FRAME_FIELDS: tuple[tuple[str, bool, Callable[[Any], bool], str], ...] = (
    # (field of content, required, check, what it must be): what reading and re-rendering a frame
    # takes as it is (``objects.FrameContent``)
    ("turn", True, is_int, "an integer"),
    ("valid_time", True, is_int, "an integer"),
    ("rendered_hash", True, lambda v: isinstance(v, str), "a string"),
    ("refs", True, lambda v: isinstance(v, list) and all(map(_is_ref, v)), "a list of static refs"),
    ("tokens", True, is_int, "an integer"),
    ("tokens_full", True, is_int, "an integer"),
    ("messages", True, is_int, "an integer"),
    ("active", True, lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v), "a list of ids"),
    ("blocks", False, lambda v: isinstance(v, list) and all(map(_is_block, v)), "a list of blocks"),
    ("tail_at", False, lambda v: isinstance(v, list) and all(p is None or is_int(p) for p in v), "a list of places"),
    ("basis_tx_id", False, is_int, "an integer"),
    ("seen_tx", False, is_int, "an integer"),
    ("layout", False, is_int, "an integer"),
    ("tail_layout", False, is_int, "an integer"),
    ("horizon", False, is_int, "an integer"),
    ("thinking_horizon", False, is_int, "an integer"),
    ("managed", False, lambda v: isinstance(v, bool), "true or false"),
)


def _malformed(frame: dict[str, Any]) -> str | None:
    """What is wrong with the shape of a frame document (one that context_os did not write, or a
    stored row changed by hand): the first field it needs and lacks, or that is not what
    context_os writes there; None if it has the shape of a frame."""
    content, meta = frame.get("content"), frame.get("meta")
    if not isinstance(meta, dict) or not isinstance(meta.get("session"), str):
        return "no meta.session"
    if not isinstance(content, dict):
        return "no content"
    for key, required, check, what in _FRAME_FIELDS:
        if key not in content:
            if required:
                return f"no content.{key}"
        elif not check(content[key]):
            return f"content.{key} is not {what}"
    return None


def verify_frame(
    store: Store,
    frame: dict[str, Any],
    *,
    memo: FrameMemo | None = None,
) -> FrameCheck:
    """Re-render ``frame`` and check its hash, its own document hashes and its static refs
    (``memo``: shared by the frames of a session, as for ``rerender``)."""
    problems = [f"frame document field {f} does not match" for f in verify_doc(frame)]
    malformed = _malformed(frame)
    if malformed:
        recorded = frame.get("content", {}).get("rendered_hash", "") if isinstance(frame.get("content"), dict) else ""
        return FrameCheck(str(frame.get("id")), False, str(recorded), "", [*problems, f"not a frame: {malformed}"])
    c = frame["content"]
    memo = memo or FrameMemo()
    try:
        basis = frame_basis(store, frame)
    except NotFound as e:  # the frame itself is no longer in the store: nothing to re-render it as of
        shown_gone, why = _evicted(store, [r["id"] for r in c["refs"] if "sealed_pages" not in r])
        explained = shown_gone if not problems else []
        return FrameCheck(
            frame["id"], False, c["rendered_hash"], "", [*problems, str(e), *why], refs=c["refs"], evicted=explained
        )
    try:
        view, rendered, lost = _rerender(store, frame, basis, memo)
    except NotFound as e:  # its session is not there as of its basis: nothing evicted explains that
        as_of = [_ref_with_tx(r, basis) for r in c["refs"]]
        return FrameCheck(frame["id"], False, c["rendered_hash"], "", [*problems, str(e)], refs=as_of)
    unexplained = bool(problems)  # the frame document's own hashes: nothing evicted explains them
    made = c["valid_time"] if isinstance(c["valid_time"], int) else None  # (evictions since explain it)
    # and those after what its turn had read of others' writes: one landing while it assembled
    seen = c.get("seen_tx")
    after = min(basis, seen) if isinstance(seen, int) and not isinstance(seen, bool) else basis
    wrong_hash = rendered.rendered_hash != c["rendered_hash"]
    if wrong_hash:
        problems.append(f"re-rendered hash {rendered.rendered_hash} != recorded {c['rendered_hash']}")
        if c.get("layout", 1) > LAYOUT:  # re-rendered the way this version renders its newest layout
            problems.append(
                f"it was rendered by a newer context_os (layout {c['layout']}; this one renders layouts"
                f" 1-{LAYOUT}): check it with that version"
            )
            unexplained = True
    refs: list[dict[str, Any]] = []
    gone: list[str] = []
    refs_ok = pages_ok = 0
    for ref in c["refs"]:
        if "sealed_pages" in ref:
            sealed, pages = _check_sealed(view, ref, basis)
            if sealed:
                evicted, why = _evicted(store, pages, made, after)
                problems += [*sealed, *why]
                unexplained = unexplained or not evicted
                gone += evicted
            else:
                pages_ok += ref["sealed_pages"]
            refs.append(ref)
            continue
        tx = ref_tx(ref, basis)
        refs.append(_ref_with_tx(ref, basis))
        if memo.ref_hash(store, ref["id"], ref["valid_time"], tx) != ref["object_hash"]:
            evicted, why = _evicted(store, [ref["id"]], made, after)
            problems += [f"static ref {ref['id']} @ tx {tx} does not resolve to {ref['object_hash']}", *why]
            unexplained = unexplained or not evicted
            gone += evicted
        else:
            refs_ok += 1
    if lost:
        problems += [f"block {block_id} of {frame['id']} is not in the store" for block_id in lost]
        # a block goes only with what it showed (an object, or the object index listing one)
        went, unnamed, guessed = _blocks_evicted(store, lost, after, frame, memo.tombstones)
        unexplained = unexplained or bool(unnamed)
        new = [oid for oid in dict.fromkeys(went.values()) if oid not in gone]
        problems += _evicted(store, new)[1]
        problems += [
            f"{len(blocks)} of the blocks of {frame['id']} that are not in the store are taken as erased by "
            f"{oid}'s eviction: its tombstone does not list the blocks it erased (written before tombstones "
            f"did), only that it erased {count}; no tombstone lists them and the store keeps no history of "
            "them, as after an eviction"
            for oid, (count, blocks) in guessed.items()
        ]
        gone += new
    if wrong_hash and not gone:
        # every ref resolves: the re-render differs by what was evicted (a block it showed, or a
        # result it showed collapsed, which is no ref), or by damage
        shown = [r["id"] for r in c["refs"] if "sealed_pages" not in r] + _objects_gone(view)
        gone, why = _evicted(store, shown, made, after)
        problems += why  # (a collapsed tool result evicted since is named nowhere else)
        unexplained = unexplained or not gone
        if not gone:  # then by damage: which stored document (looked for only now, a failure's cost)
            problems += _damaged(store, view, frame, basis, memo)
    checked = None
    if wrong_hash and gone:
        # the hash covers what was erased: each part that has its own hash is checked instead
        blocks_ok = 0
        for _, block_id, recorded in c.get("blocks", []):
            text = memo.block(store, block_id)
            if text is None:
                continue  # lost: said above
            if view.block_hash(text) == recorded:
                blocks_ok += 1
            else:
                problems.append(f"block {block_id} of {frame['id']} does not hash to {recorded}")
                unexplained = True
        named = sum(1 for r in c["refs"] if "sealed_pages" not in r)
        sealed_total = sum(r["sealed_pages"] for r in c["refs"] if "sealed_pages" in r)
        checked = (
            "its rendered hash covers what was erased and cannot be checked; checked part by part instead: "
            f"the frame document's hashes, {refs_ok} of {named} static refs, "
            f"{pages_ok} of {sealed_total} full chat pages, {blocks_ok} of {len(c.get('blocks', []))} blocks "
            "(each against the hash it recorded); what it showed of objects no ref names (collapsed tool "
            "results) has no hash of its own and is not checked"
        )
    return FrameCheck(
        frame["id"],
        not problems,
        c["rendered_hash"],
        rendered.rendered_hash,
        problems,
        rendered,
        view,
        basis,
        refs,
        evicted=[] if unexplained else list(dict.fromkeys(gone)),
        checked=checked,
    )


def _damaged(store: Store, view: SessionView, frame: dict[str, Any], basis: int, memo: FrameMemo) -> list[str]:
    """The stored documents a re-render of ``frame`` read that no longer hash to what was written
    (a row changed in place): its static refs' versions and the objects of its view (a tool result
    it showed, which no ref names), and its blocks, each against the hash the frame recorded. A
    mismatch said only that the re-rendered hash differed, not where."""
    versions: dict[tuple[str, int, int | None], None] = {}
    for ref in frame["content"]["refs"]:
        if "sealed_pages" not in ref:
            versions[(ref["id"], ref["valid_time"], ref_tx(ref, basis))] = None
    for o in view.objects.values():
        if o.version is not None:
            versions[(o.id, o.version[0], o.version[1])] = None
    out = []
    for oid, vt, tx in versions:
        v = store.get(oid, vt, tx)
        if v is not None and v.doc is not None and (fields := verify_doc(v.doc)):
            out.append(
                f"{oid} as of tx {v.tx_id}: its stored document no longer hashes to what was written"
                f" ({', '.join(fields)}): changed in the store since (`ctxos verify` checks every document)"
            )
    for _, block_id, recorded in frame["content"].get("blocks", []):
        text = memo.block(store, block_id)
        if text is not None and view.block_hash(text) != recorded:
            out.append(f"block {block_id} of {frame['id']} does not hash to {recorded}: changed in the store since")
    return out


def _blocks_evicted(
    store: Store, lost: list[str], after: int, frame: dict[str, Any], tombstones: TombstoneMemo
) -> tuple[dict[str, str], list[str], dict[str, tuple[int, list[str]]]]:
    """Of the blocks of ``frame`` the store no longer has: those an eviction in a transaction
    after ``after`` erased (the frame's basis, or what its turn had read before: ``seen_tx``) (block
    id: the object its tombstone names), the others, and the blocks taken as erased by a
    tombstone that does not list them (object: the count it keeps, those blocks).

    A tombstone lists the blocks it erased (``block_ids``). One written before tombstones did
    keeps only their count: it may explain a block of the frame's session, or of an object the
    frame names, that the store erased (no history of it left: a deleted or damaged block keeps
    its history), and no more of them in the pass than that count (``TombstoneMemo.taken``)."""
    went: dict[str, str] = {}
    older: list[tuple[str, int]] = []
    named = {r["id"] for r in frame["content"]["refs"]}
    for v in tombstones.read(store):
        doc = v.doc or {}
        content, meta = doc.get("content") or {}, doc.get("meta") or {}
        oid = meta.get("object")
        if v.tx_id <= after or not isinstance(oid, str):
            continue
        if isinstance(content.get("block_ids"), list):
            went |= {b: oid for b in content["block_ids"] if b in lost}
        elif content.get("blocks") and (meta.get("session") == frame["meta"]["session"] or oid in named):
            older.append((oid, int(content["blocks"])))
    unnamed = [b for b in lost if b not in went]
    guessed: dict[str, tuple[int, list[str]]] = {}
    if older:
        for b in unnamed:
            # a block taken earlier in the pass was looked up then (one request per frame and
            # block on a node, for every frame that lost it, otherwise)
            before = any(b in tombstones.taken.get(oid, ()) for oid, _ in older)
            if not before and store.history(b, with_docs=False):
                continue  # still has a history: deleted or damaged, not evicted
            for oid, count in older:
                taken = tombstones.taken.setdefault(oid, set())
                if b in taken or len(taken) < count:
                    taken.add(b)
                    went[b] = oid
                    guessed.setdefault(oid, (count, []))[1].append(b)
                    break
        unnamed = [b for b in unnamed if b not in went]
    return went, unnamed, guessed


PARALLEL_FROM = 128
"""``verify_frames`` of fewer frames runs in this process: starting a worker (a new interpreter
importing context_os) costs about what re-rendering 50-100 frames of a long session does."""
CHUNK = 16
"""Frames a worker takes at a time: its ``FrameMemo`` serves the frames of one chunk, and of the
next it takes of the same session."""


def default_jobs() -> int:
    """The worker processes ``verify_frames`` uses by default: one per CPU this process may run
    on, at most 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


def verify_frames(
    store: Store, frames: Sequence[dict[str, Any]], *, jobs: int | None = None
) -> Generator[FrameCheck, None, None]:
    """``verify_frame`` of each of ``frames`` (in order, those of one session together), one
    ``FrameMemo`` per session; a frame whose versions are damaged (``StoreCorrupt``) fails as
    "cannot be re-rendered". With ``jobs`` > 1 (default: ``default_jobs()``) and at least
    ``PARALLEL_FROM`` frames, ``jobs`` worker processes re-render them, each opening the store
    through ``store.reader()`` (a store only this process can open is checked here); their checks
    carry no ``rendered`` nor ``view``. Frames checked by workers read what the store has committed:
    the same as this process reads once it has written (``Store.submit``). A caller that may stop
    early closes the generator (``contextlib.closing``): the workers stop with it."""
    jobs = default_jobs() if jobs is None else jobs
    parallel = jobs > 1 and len(frames) >= PARALLEL_FROM and not _counted_tombstones(store)
    reader = store.reader() if parallel else None
    if reader is None:
        yield from _check_all(store, frames)
        return
    chunks = [frames[i : i + CHUNK] for i in range(0, len(frames), CHUNK)]
    # a new interpreter, not a fork: this process may run threads (a lease's, a file tracker's)
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(min(jobs, len(chunks)), mp_context=ctx, initializer=_start_worker, initargs=(reader,))
    done = False
    try:
        # the workers start (at the submits) with Ctrl-C blocked, until they ignore it: one that
        # came while a new interpreter started would print its traceback (a signal meanwhile
        # reaches this process once unblocked). The mask is read before it is set: a handler
        # that raises as it is set (Python runs the ones pending there) left SIGINT blocked for
        # good, and every process started after with it.
        masked = hasattr(signal, "pthread_sigmask")
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, ()) if masked else set()
        try:
            if masked:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask | {signal.SIGINT})
            results = pool.map(_worker_checks, chunks)
        finally:
            if masked:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        said: set[tuple[str, int, str]] = set()

        def say(logged: Iterable[tuple[str, int, str]]) -> None:
            for line in logged:  # what the workers logged, each said once however many said it
                if line not in said:
                    said.add(line)
                    logging.getLogger(line[0]).log(line[1], "%s", line[2])

        try:
            for checks, logged in results:
                say(logged)
                yield from checks
        except Exception as e:  # a chunk that failed (the store out of reach): what it logged first too
            say(getattr(e, "logged", ()))
            raise
        done = True
    finally:
        if not done:  # an error, Ctrl-C or a caller that stopped: the workers' checks are not wanted
            _stop_workers(pool)
        pool.shutdown(wait=True, cancel_futures=True)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End the workers of ``pool`` now, in the middle of their chunks: one may be waiting on a
    store that does not answer (a node that hangs: up to the store's timeout per request), and
    they only read (a reader's outbox sends a write at most once, however it is cut short)."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        terminate()
        return
    for process in list((pool._processes or {}).values()):
        process.terminate()


def _counted_tombstones(store: Store) -> bool:
    """Whether a tombstone of ``store`` keeps only the count of the blocks it erased (written
    before tombstones listed them): the frames are then checked in this process, whose one
    ``TombstoneMemo`` takes no more blocks as erased by it than that count (workers of their own
    would each take as many)."""
    for v in store.find("tombstone"):
        content = (v.doc or {}).get("content")
        if isinstance(content, dict) and not isinstance(content.get("block_ids"), list) and content.get("blocks"):
            return True
    return False


class _Memos:
    """The ``FrameMemo`` of the session whose frames are being checked: started anew when the
    frames (ordered by session) move on to another."""

    def __init__(self) -> None:
        self.session: object = None
        self.memo = FrameMemo()

    def of(self, frame: dict[str, Any]) -> FrameMemo:
        meta = frame.get("meta")
        session = meta.get("session") if isinstance(meta, dict) else None
        if session != self.session:
            self.session, self.memo = session, FrameMemo(tombstones=self.memo.tombstones)
        return self.memo


def _check_all(store: Store, frames: Iterable[dict[str, Any]]) -> Iterator[FrameCheck]:
    memos = _Memos()
    for frame in frames:
        yield _check_one(store, frame, memos)


def _check_one(store: Store, frame: dict[str, Any], memos: _Memos) -> FrameCheck:
    """``verify_frame`` with its session's memo; a damaged version is this frame's failure, not
    the pass's."""
    try:
        return verify_frame(store, frame, memo=memos.of(frame))
    except StoreCorrupt as e:
        content = frame.get("content")
        recorded = content.get("rendered_hash", "") if isinstance(content, dict) else ""
        return FrameCheck(str(frame.get("id")), False, str(recorded), "", [f"cannot be re-rendered: {e}"])


_worker: tuple[Store, _Memos] | None = None
"""In a worker process of ``verify_frames``: its store, opened at its first chunk, and its memos."""
_reader: Callable[[], Store] | None = None
"""In a worker process: how it opens the store, at its first chunk (``_worker_checks``)."""


class _Kept(logging.Handler):
    """In a worker: what context_os logs, kept for the parent to say (``_worker_checks``): each
    worker meets the same node down, and it is said once, not once per worker."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.name, record.levelno, record.getMessage()))


_kept = _Kept()


def _start_worker(reader: Callable[[], Store]) -> None:
    global _reader
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    logging.getLogger("context_os").addHandler(_kept)
    parent = multiprocessing.parent_process()
    if parent is not None:  # a parent that dies without shutting the pool (SIGKILL, SIGTERM) leaves none behind
        threading.Thread(target=_exit_with, args=(parent.sentinel,), name="ctxos-parent-watch", daemon=True).start()
    # the store is opened with the first chunk, not here: an error opening it (a node out of
    # reach) comes back as that chunk's, as it is; one raised here would break the pool
    _reader = reader


def _exit_with(sentinel: int) -> None:
    """In a worker: exit once the process that started it is gone (its sentinel is ready then)."""
    multiprocessing.connection.wait([sentinel])
    os._exit(1)


def _worker_checks(frames: Sequence[dict[str, Any]]) -> tuple[list[FrameCheck], list[tuple[str, int, str]]]:
    """The checks of a chunk, and what was logged meanwhile (logger, level, message)."""
    global _worker
    try:
        if _worker is None:
            assert _reader is not None
            _worker = (_reader(), _Memos())
        store, memos = _worker
        # what a check carries besides its verdict stays here: a view is the whole session
        return [replace(_check_one(store, frame, memos), rendered=None, view=None) for frame in frames], _kept.lines
    except Exception as e:  # (the store out of reach): what was logged before goes with it to the parent
        e.logged = _kept.lines  # type: ignore[attr-defined]
        raise
    finally:
        _kept.lines = []
