"""How a session's changes reach the store: queued, then written as one transaction.

``SessionWriter`` is the only code that writes a session's documents: its chat pages (fixed-size
pages of entries: appending a message rewrites one page, never the history), tool-call objects,
state changes (one version per object per transaction: the audit trail), the session document
and frames. Every write goes through ``submit``, which first checks the session's writer lease
(context/lease.py). Valid times come from ``next_valid_time``: now, never before the session's
previous write, never in the future.

This module never decides anything: the session (and its policy) decide, the writer persists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import SessionBusy
from ..hashing import json_forms
from ..objects import BlockDoc, ChatDoc, FrameContent, FrameDoc, SessionDoc, StateContent, StateDoc, StateMeta
from ..store.base import Op, Put, Store, Tx, next_valid_time
from .entries import Entry
from .lease import Lease
from .policy import Actor
from .view import ObjInfo, SessionView, page_id

__all__ = ["PAGE_SIZE", "SessionWriter", "state_id"]

PAGE_SIZE = 16
"""Chat entries per chat page: appending a message rewrites one page, never the history."""


def state_id(session_id: str, obj_id: str) -> str:
    """The id of the document whose versions are an object's state changes in a session."""
    return f"state:{session_id}:{obj_id}"


class SessionWriter:
    """Queues a session's documents and writes them as one transaction per ``flush``."""

    def __init__(
        self,
        store: Store,
        view: SessionView,
        lease: Lease | None,
        *,
        header: Callable[[], dict[str, Any]],
        last_vt: int = 0,
    ):
        """``header()`` gives the session document's ``content`` (harness, workspace, created)
        and the ``retired`` runs for its meta; ``last_vt`` is the valid time of its last write."""
        self.store = store
        self.view = view
        self.lease = lease
        self.header = header
        self.last_vt = last_vt
        self.last_tx: int | None = None
        """The id of the transaction this writer wrote last (None: none yet)."""
        self.skipped = False
        """Whether a transaction of this writer came after one it did not write (another writer's,
        an eviction say) since the session last looked (``Session._others_wrote``): its own
        ``last_tx`` alone would hide that one."""
        self.looked: int | None = None
        """The store's newest transaction the session could read when it last looked at what
        others wrote (``Session._readable``): one written before it is no transaction the session
        has not seen."""
        self.dirty_pages: set[int] = set()
        """Chat pages whose entries changed since the last flush."""
        self._ops: list[Op] = []
        self._pending: list[tuple[str, tuple[str, Any]]] = []
        self._queued_states: dict[str, int] = {}
        self._state_vts: dict[str, int] = {}
        self._entry_cache: dict[int, tuple[bytes, bool, bytes | None]] = {}
        """Canonical and stored JSON of the entries of pages still filling (``_entry_json``; a full
        page's are dropped)."""
        self._policy: tuple[Any, dict[str, Any]] | None = None
        self._vt: int | None = None
        """The valid time ``stage`` fixed for the transaction being built (None: not staged)."""
        self._changed: dict[str, dict[str, Any]] = {}
        """Objects whose state changed since the last frame: their state now, who changed it last
        and why (``take_changes``)."""

    # --- writing -------------------------------------------------------------------------------

    def submit(self, ops: list[Op]) -> Tx:
        """Every write of the session: only while it holds the session's lease."""
        if self.lease is None:
            raise SessionBusy(f"this Session of {self.view.session_id!r} was not opened to write (Session.open)")
        self.lease.check()
        return self.store.submit(ops)

    def queue(self, doc: dict[str, Any], target: tuple[str, Any], encoded: bytes | None = None) -> None:
        """Queue ``doc``; once written, ``target`` (``("obj", ObjInfo)``, ``("page", n)``,
        ``("session", None)``; ``("state" | "block" | "frame", None)``: nothing) learns the version it
        got. ``encoded``: its JSON as a store writes it, if known (``DocBase.encode``)."""
        self._ops.append(Put(doc, json=encoded))
        self._pending.append((doc["object_hash"], target))

    def record_state(self, obj: ObjInfo, actor: Actor, reason: str, *, change: bool = True) -> None:
        """Queue a state version of ``obj`` in this session: who changed it and why. ``change``:
        the frame's list of state changes names it (not for a mark its state is the same with)."""
        extra: dict[str, Any] = {}
        if obj.kind != "toolcall" and obj.version is not None:
            # the exact version shown, so a re-render loads it even after newer ones exist
            extra = {"shown": [obj.version[0], obj.version[1]], "newer": obj.newer}
            if obj.focus:
                extra["focus"] = obj.focus
        if obj.joined_at is not None:
            extra["joined_at"] = obj.joined_at
        if obj.active_at is not None:
            extra["active_at"] = obj.active_at
        view = self.view
        state = {"state": obj.state, "pinned": obj.pinned, "collapsed": obj.collapsed}
        content: StateContent = dict(state)  # type: ignore[assignment]
        if obj.file_text is not None:
            content["file_text"] = list(obj.file_text)
        meta: StateMeta = {
            "session": view.session_id,
            "object": obj.id,
            "actor": actor,
            "reason": reason,
            "turn": view.turn,
            "seq": obj.seq,
            "since": obj.since,
            "uses": obj.uses,
            **extra,  # type: ignore[typeddict-item]
        }
        doc, encoded = StateDoc(id=state_id(view.session_id, obj.id), content=dict(content), meta=dict(meta)).encode()
        if change:  # a frame's list of changes: the state (not the mark a result's file text has)
            self._changed.pop(obj.id, None)  # in the order of their last change
            self._changed[obj.id] = {**state, "actor": actor, "reason": reason}
        # one state version per object per transaction: the last one is what holds
        prior = self._queued_states.get(doc["id"])
        if prior is not None:
            self._ops[prior] = Put(doc, json=encoded)
            self._pending[prior] = (doc["object_hash"], ("state", None))
            return
        self._queued_states[doc["id"]] = len(self._ops)
        self.queue(doc, ("state", None), encoded)

    def take_changes(self, limit: int) -> tuple[list[dict[str, Any]], int]:
        """The objects whose state changed since the last call (at most ``limit``, in the order
        of their last change: ``id``, state, who and why) and how many there were; then none."""
        changes, self._changed = self._changed, {}
        return [{"id": k, **v} for k, v in list(changes.items())[:limit]], len(changes)

    def queue_session_doc(self) -> None:
        """Queue the session document: its cursor, turn, retired runs and policy as of now."""
        view = self.view
        head = self.header()
        doc, encoded = SessionDoc(
            id=f"session:{view.session_id}",
            content=head["content"],
            meta={
                "session": view.session_id,
                "cursor": len(view.visible),
                "entries": len(view.entries),
                "turn": view.turn,
                "retired": head["retired"],
                "managed_from": head["managed_from"],
                "horizon": view.horizon,
                **({"thinking_horizon": view.thinking_horizon} if view.thinking_horizon else {}),
                "policy": self.policy_dict(),
            },
        ).encode()
        self.queue(doc, ("session", None), encoded)

    def policy_dict(self) -> dict[str, Any]:
        """The session's policy as its document records it (built again only when replaced)."""
        policy = self.view.policy  # frozen: its dict is built again only when it is replaced
        if self._policy is None or self._policy[0] is not policy:
            self._policy = (policy, policy.to_dict())
        return self._policy[1]

    def forget_entry(self, i: int) -> None:
        """Entry ``i`` changed in place (scrubbed after an eviction): encode it again."""
        self._entry_cache.pop(i, None)

    def _next_vt(self) -> int:
        """The valid time of the next write: now, never before an earlier write of this session.

        Two writes of one document within the same millisecond share a valid time; the later is
        then a correction of the earlier (XTDB semantics): reads as of either transaction still
        see each version, which is what frames use. State changes are the audit trail, so each
        must stay visible in plain history: if one object's state changes twice within a
        millisecond (rare: an agent tool right after an assembly), the write waits it out. Never
        in the future (``next_valid_time``), so a read right after the write sees it.
        """
        # ``after`` is the newest valid time this write must follow: the session's last write may
        # share its millisecond, a state version may not
        after = max((self._state_vts.get(sid, -1) for sid in self._queued_states), default=-1)
        vt = next_valid_time(max(after, self.last_vt - 1))
        if len(self._state_vts) > 256:  # only a state written in this millisecond still matters
            self._state_vts = {sid: t for sid, t in self._state_vts.items() if t >= vt - 1}
        for sid in self._queued_states:
            self._state_vts[sid] = vt
        self.last_vt = vt
        return vt

    def _entry_json(self, e: Entry) -> tuple[bytes, bool, bytes | None]:
        """An entry's canonical JSON, whether the entry is plain, and its JSON as a store writes it
        (``hashing.json_forms``)."""
        cached = self._entry_cache.get(e["i"])
        if cached is None:
            cached = self._entry_cache[e["i"]] = json_forms(e)
        return cached

    def flush(self) -> Tx | None:
        """Write everything queued (and the dirty chat pages) as one transaction."""
        self.stage()
        return self.commit()

    @property
    def queued(self) -> bool:
        """Whether anything waits to be written (a page, a state, the session document)."""
        return bool(self._ops or self.dirty_pages)

    def stage(self) -> int | None:
        """Queue the dirty chat pages and fix the valid time of the next write: every queued
        document's target learns its version, its transaction still unknown (None) until
        ``commit``. What a frame written in the same transaction sees (``queue_frame``). The
        valid time, or None when nothing is queued."""
        view = self.view
        for page in sorted(self.dirty_pages):
            lo = page * PAGE_SIZE
            entries = view.entries[lo : lo + PAGE_SIZE]
            # a page's canonical JSON is its entries' canonical JSON joined: each entry is
            # encoded once, however often its page is rewritten
            encoded = [self._entry_json(e) for e in entries]
            content_json = (b"[" + b",".join(j for j, _, _ in encoded) + b"]", all(plain for _, plain, _ in encoded))
            stored = [j for _, _, j in encoded if j is not None]  # (the page's JSON when each has it)
            content_stored = b"[" + b",".join(stored) + b"]" if len(stored) == len(encoded) else None
            if len(entries) == PAGE_SIZE:  # a full page is written for the last time (but evictions)
                for e in entries:
                    self._entry_cache.pop(e["i"], None)
            doc, encoded_doc = ChatDoc.model_construct(
                id=page_id(view.session_id, page),
                kind="chat",
                content=list(entries),
                meta={"session": view.session_id, "page": page},
            ).encode(content_json, content_stored)
            self.queue(doc, ("page", page), encoded_doc)
        self.dirty_pages.clear()
        if not self._ops:
            return None
        if self._vt is None:
            self._vt = self._next_vt()
        self._settle(self._vt, None)
        return self._vt

    def commit(self) -> Tx | None:
        """Write what ``stage`` staged as one transaction; its targets learn the transaction."""
        if not self._ops:
            return None
        vt = self._vt if self._vt is not None else self._next_vt()
        ops = [Put(op.doc, vt, json=op.json) if isinstance(op, Put) else op for op in self._ops]
        queued, pending = self._ops, self._pending
        self._ops, self._pending, self._queued_states, self._vt = [], [], {}, None
        try:
            tx = self.submit(ops)
        except BaseException:
            # not written (or not known to be): what the session's later writes build on (pages,
            # objects, states, the session document) is queued again for the next flush; a frame
            # and its blocks record a context that was never shown, so they go
            for op, (object_hash, target) in zip(queued, pending, strict=True):
                if target[0] in ("frame", "block"):
                    continue
                if target[0] == "state":
                    self._queued_states[op.doc["id"]] = len(self._ops)  # type: ignore[union-attr]
                self._ops.append(op)
                self._pending.append((object_hash, target))
            raise
        self._settle(vt, tx.id, pending)
        seen = self.seen
        if seen is not None and min(tx.id, seen) >= 0 and tx.id != seen + 1:
            # (a gap no writer made costs one look; a provisional id, an outbox's, says nothing)
            self.skipped = True
        self.last_tx = tx.id
        return tx

    @property
    def seen(self) -> int | None:
        """The newest transaction of which the session knows what others wrote: its own last one
        (nothing else was written before it unseen, or ``skipped`` says so) or the one it last
        looked at, whichever is later (None: neither; the one it looked at when it wrote nothing
        yet, a resumed session that checked: before 2026-12-06, None then too)."""
        if self.last_tx is not None and self.looked is not None:
            return max(self.last_tx, self.looked)
        return self.looked if self.last_tx is None else self.last_tx

    def _settle(self, vt: int, tx_id: int | None, pending: list[tuple[str, tuple[str, Any]]] | None = None) -> None:
        view = self.view
        for object_hash, (what, target) in self._pending if pending is None else pending:
            version = (vt, tx_id, object_hash)
            if what == "obj":
                target.version = version
            elif what == "page":
                view.set_page(target, version)
            elif what == "session":
                view.session_version = version

    def queue_frame(self, content: FrameContent, meta: dict[str, Any], new_blocks: list[tuple[str, str, str]]) -> str:
        """Queue the frame of the current turn, with the blocks it shows for the first time (their
        texts: a frame re-renders from them), into the staged transaction: the frame is written
        with the state it shows, so its basis is its own transaction (``frames.frame_basis``).
        Its id."""
        view = self.view
        frame, encoded = FrameDoc(
            id=f"frame:{view.session_id}:{view.turn:06d}", content=dict(content), meta=meta
        ).encode()
        for block_id, key, text in new_blocks:
            block, block_json = BlockDoc(
                id=block_id, content=text, meta={"session": view.session_id, "object": key}
            ).encode()
            self.queue(block, ("block", None), block_json)
        self.queue(frame, ("frame", None), encoded)
        return str(frame["id"])
