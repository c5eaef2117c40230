"""One agent on the mesh: its node, its messages as objects, its memory of peers, its request queue.

``MeshAgent`` runs a ``MeshNode`` and records everything that passes through it in the store:
every direct message, reply and broadcast, sent or received, is a ``message`` object (peer, agent
names, direction, kind, timestamps, the request id; a reply names the request it answers). A
message is written once it is complete: a request sent and answered is written with its reply
in one transaction; a request that failed is written with the failure; nothing is ever left
half-written. Each exchange and each broadcast also goes into the per-peer memory (``memory``),
which a later request from the same peer recalls.

Peers' requests wait in a queue (``queue``) for the agent's loop: ``next_request()`` gives the
oldest (peers taking turns), with what memory recalls of the peer; ``answer()`` sends the
response and records it.

``source`` is the ``ObjectSource`` that shows the messages to the model: the newest
``history_cap`` (seed: 200) of them; the cap applies to what is shown, never to what is stored.

This module never imports from ``context``: a session shows what the source offers
(context/mesh_tools.py).
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InputError, MeshError
from ..objects import SourceDoc
from ..scrub import RedactFunction, redactor
from ..sources.base import SourceItem
from ..store.base import Put
from ..times import now_ms
from ..tokens import estimate_tokens
from . import registry, wire
from .memory import MAX_VALUE_CHARS, MemoryLimits, PeerMemory
from .node import BROADCAST_MAX_AGE_S, MeshConfig, MeshNode, Reply
from .queue import GIVEN_UP_MARK, MAX_QUEUE, REQUEST_TIMEOUT, PendingRequest, RequestQueue, settle

if TYPE_CHECKING:
    from ..sources.recall import Recall
    from ..store.base import Store

__all__ = ["HISTORY_CAP", "MeshAgent", "MeshSource"]

log = logging.getLogger("context_os.mesh")

HISTORY_CAP = 200
"""Messages shown to the model at most (seed ``MAX_BROADCAST_HISTORY``); all are stored."""
SEND_ATTEMPTS = 2
RETRY_DELAY = 0.5
"""A send that could not reach its peer is tried once more after this many seconds (seed)."""
DISCOVER_WINDOW_MS = 60_000
"""``discover`` reports the peers found within this window."""
RECENT_ANSWERS = 64
"""Answers kept (with their requests' text, 4M characters at most, 600 s at most) for a peer
that asks again under the same request id: its first stream broke, and it tried again."""
RECENT_ANSWER_CHARS = 4_000_000
RECENT_ANSWER_SECONDS = 600.0
ORPHAN_AFTER_MS = 2 * 600_000 + 60_000
"""A request still ``queued`` this long after it came is held by no running agent (the longest
wait, 600 s, and as long again for an answer being recorded): failed at the next start."""


@dataclass(frozen=True)
class _Shown:
    """What the source offers of one message: its object id, text and index metadata."""

    id: str
    text: str
    meta: Mapping[str, Any]
    memories: tuple[tuple[str, str], ...] = ()
    """(id, text) of the memory objects recalled for a request."""


class MeshAgent:
    """An agent's presence on the mesh, recorded in ``store``."""

    def __init__(
        self,
        store: Store,
        config: MeshConfig,
        *,
        session: str | None = None,
        recall: Recall | None = None,
        limits: MemoryLimits | None = None,
        auto_reply: bool = False,
        history_cap: int = HISTORY_CAP,
        max_queue: int = MAX_QUEUE,
        local_registry: str | os.PathLike[str] | None = None,
        redact: RedactFunction | bool | None = None,
    ):
        """``session``: the session the messages belong to (their scope for recall; None: the
        agent's own scope ``mesh:<agent>``). ``auto_reply``: acknowledge every request at once
        instead of queueing it for the agent (a node nobody answers from, like the CLI's).
        ``local_registry``: the directory of the local registry (``registry.default_dir()``):
        ``send`` dials an agent announced there that it is not connected to, and takes its name
        for its peer id. ``redact``: what keeps secrets out of the messages and memories stored
        (a function ``text -> (text, count)``; by default ``Redactor().redact``, as a session's;
        False: nothing), what peers send and what the agent sends alike."""
        if history_cap < 1:
            raise InputError("history_cap must be at least 1")
        self.store = store
        self.config = config
        self.name = config.agent_name
        self.session = session
        self.scope = session or f"mesh:{self.name}"
        self.auto_reply = auto_reply
        self.history_cap = history_cap
        self.local_registry = local_registry
        self.redact = redactor(redact)
        self.memory = PeerMemory(store, self.name, recall=recall, limits=limits, redact=self.redact)
        self.queue = RequestQueue(max_queue)
        self.stopping = threading.Event()
        """Set by ``interrupt``: a ``send`` that waits for an answer gives up."""
        self._lock = threading.Lock()
        self._shown: collections.deque[_Shown] = collections.deque(maxlen=history_cap)
        self._showing = threading.Lock()
        """Held while messages are stored and shown, and while ``_shown`` is read: what is shown
        is in the order it was stored, and a message stored is shown to whoever looks next (a
        reader that saw it in the store found it missing from the session's context)."""
        self._seq = itertools.count()
        self._unanswered: dict[str, dict[str, Any]] = {}
        """Received requests the agent has not answered yet, by object id."""
        self._open: dict[tuple[str, str], PendingRequest] = {}
        """Received requests not answered yet, by (peer, request id): one asked again waits for
        the same answer (a sender tries again when its stream broke, under the same id)."""
        self._recent: collections.OrderedDict[tuple[str, str], tuple[str, float, Reply]] = collections.OrderedDict()
        """The newest answers, by (peer, request id): (the request's text, when, the answer)."""
        # bookkeeping writes that follow an event on the network thread (a request that timed
        # out) go through one worker, in order, so the network never waits for the store
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"mesh-writer-{self.name}")
        self._holder = {
            "holder_host": socket.gethostname(),
            "holder_pid": os.getpid(),
            "holder_started": registry.process_start(os.getpid()),
        }
        """The process holding the requests it queues (``_fail_orphans``), in their metadata."""
        self._orphans: dict[tuple[str, str], dict[str, Any]] = {}
        """The requests of this agent that failed when it stopped (closed, answering "the agent
        stopped"; killed: ``_fail_orphans`` marks them), by (peer, request id), of the last
        ``ORPHAN_AFTER_MS``: one its sender tries again (its stream broke as the agent stopped)
        is taken up under its object, not taken in as a second one."""
        self._heard: dict[str, int] = {}
        """The broadcasts this agent received (stored, or evicted since) that a peer may still send
        again, by id (``wire.broadcast_id``): when each was sent. A node remembers the broadcasts it
        has seen while it runs only: a copy that comes after a restart (GossipSub offers a peer
        that joins the last seconds' broadcasts; a peer may replay one it kept) is not stored
        again. One sent longer ago than a node takes (``BROADCAST_MAX_AGE_S``) is forgotten."""
        self._fail_orphans()
        self._load_shown()
        self._load_heard()
        self.node = MeshNode(config, on_request=self._on_request, on_broadcast=self._on_broadcast)
        self.source = MeshSource(self)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> MeshAgent:
        self.node.start()
        return self

    def interrupt(self) -> None:
        """Whoever uses the agent stops (a server's SIGTERM): what waits ends at once, a request
        waiting in ``next_request`` and a ``send`` waiting for its answer (failed, stored as
        such), and later sends fail at once. Safe in a signal handler."""
        self.stopping.set()
        self.queue.wake()

    def close(self) -> None:
        """Answer what still waits with an error, stop the node, finish the writes."""
        self.stopping.set()
        self.queue.close("the agent stopped")
        try:
            self.node.close()
        finally:
            self._writer.shutdown(wait=True)

    def __enter__(self) -> MeshAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def peer_id(self) -> str:
        return self.node.peer_id

    # --- messages as objects ---------------------------------------------------------------------

    def _load_shown(self) -> None:
        """The newest messages of this scope already stored (a restarted agent shows them again)."""
        found = self.store.find(kind="message", where={"mesh_agent": self.name, "session": self.scope})
        versions = sorted((v for v in found if v.doc is not None), key=lambda v: (v.doc["meta"].get("at", 0), v.tx_id))  # type: ignore[index]
        for d in [v.doc for v in versions[-self.history_cap :] if v.doc is not None]:
            self._shown.append(_Shown(d["id"], str(d.get("content") or ""), d["meta"]))

    def _load_heard(self) -> None:
        """The broadcasts of this scope received, stored or evicted, not too old to come again."""
        where = {"mesh_agent": self.name, "session": self.scope, "kind": "broadcast", "direction": "in"}
        for _, meta in self.store.find_meta("message", where, ("message_id", "sent_at")):
            self._hear(meta.get("message_id"), meta.get("sent_at"))
        prefix = f"message:{self.name}:"
        for v in self.store.find("tombstone", {"object_kind": "message", "session": self.scope}):
            if v.doc is not None and str(v.doc["meta"].get("object")).startswith(prefix):
                for message_id, sent_at in (v.doc["content"].get("broadcasts") or {}).items():
                    self._hear(message_id, sent_at)

    def _hear(self, message_id: object, sent_at: object) -> None:
        """Note a broadcast received (``_heard``); forget, now and then, those too old to come again."""
        if not isinstance(message_id, str) or not isinstance(sent_at, int):
            return
        since = now_ms() - BROADCAST_MAX_AGE_S * 1000
        if sent_at >= since:
            self._heard[message_id] = sent_at
        if len(self._heard) % 256 == 0:
            self._heard = {k: t for k, t in self._heard.items() if t >= since}

    def _fail_orphans(self) -> None:
        """Mark ``failed`` the requests this agent left ``queued`` when its process died without
        closing (SIGKILL, a crash): their senders heard the stream break, and nothing will ever
        answer them. One is an orphan when the process that held it is gone (it ran on this
        machine), or when it came longer ago than any agent holds a request (``ORPHAN_AFTER_MS``:
        another machine's process, or one written before requests named their holder). These and
        the requests failed as the agent last closed are noted in ``_orphans``."""
        now, host = now_ms(), self._holder["holder_host"]
        orphans = []
        for v in self.store.find(kind="message", where={"mesh_agent": self.name, "status": "queued"}):
            meta = v.doc["meta"] if v.doc is not None else {}
            if meta.get("direction") != "in" or meta.get("kind") != "request":
                continue
            pid, started = meta.get("holder_pid"), meta.get("holder_started")
            started = started if isinstance(started, int) else None
            if meta.get("holder_host") == host and isinstance(pid, int) and not registry.alive(pid, started):
                why = f"the agent stopped before answering it (its process {pid} is gone)"
            elif isinstance(meta.get("at"), int) and now - meta["at"] > ORPHAN_AFTER_MS:
                why = "the agent stopped before answering it"
            else:
                continue  # held by a process that runs, or may: it settles it itself
            assert v.doc is not None
            orphans.append(self._with_status(v.doc, "failed", error=why))
            if isinstance(meta.get("peer"), str) and isinstance(meta.get("request_id"), str):
                self._orphans[(meta["peer"], meta["request_id"])] = orphans[-1]
        if orphans:
            self.store.submit([Put(d) for d in orphans])
            log.info("mesh: %d request(s) %s left unanswered marked failed", len(orphans), self.name)
        # (failed as a closing agent answered "the agent stopped": its sender may not have heard
        # that answer, and try again too; their meta first: an agent's failed requests of every
        # day are many, its recent ones few)
        where = {"mesh_agent": self.name, "status": "failed", "direction": "in", "kind": "request"}
        for oid, meta in self.store.find_meta("message", where, ("at", "peer", "request_id")):
            peer, rid, at = meta.get("peer"), meta.get("request_id"), meta.get("at")
            if isinstance(peer, str) and isinstance(rid, str) and isinstance(at, int) and now - at <= ORPHAN_AFTER_MS:
                doc = self.store.doc(oid)
                if doc is not None and (peer, rid) not in self._orphans:
                    self._orphans[(peer, rid)] = doc

    def _message_doc(self, text: str, **meta: Any) -> dict[str, Any]:
        if self.redact is not None:
            text = self.redact(text)[0]  # a peer's text or the agent's: no secret is stored
        at = now_ms()
        # time, then a counter (the order within one millisecond), then randomness (another
        # process of the same agent name writing into the same store)
        oid = f"message:{self.name}:{at:x}{next(self._seq) % 0x10000:04x}{os.urandom(2).hex()}"
        peer_name = meta.get("peer_name") or (str(meta["peer"])[:16] if meta.get("peer") else "every peer")
        arrow = f"{peer_name} → {self.name}" if meta["direction"] == "in" else f"{self.name} → {peer_name}"
        full = {
            "session": self.scope,
            "source": f"mesh:{self.name}",
            "mesh_agent": self.name,
            "at": at,
            "name": f"{arrow}: {meta['kind']}",
            "tokens": estimate_tokens(len(text)),
            **{k: v for k, v in meta.items() if v is not None},
        }
        return SourceDoc(id=oid, kind="message", content=text, meta=full).to_doc()

    def _record(self, *docs: dict[str, Any], memories: tuple[tuple[str, str], ...] = ()) -> None:
        """Write ``docs`` in one transaction, then offer them to the session (a new version of a
        message shown already takes its place)."""
        with self._showing:
            self.store.submit([Put(d) for d in docs])
            for d in docs:
                known = next((i for i, s in enumerate(self._shown) if s.id == d["id"]), None)
                if known is None:
                    self._shown.append(_Shown(d["id"], d["content"], d["meta"], memories))
                else:
                    was = self._shown[known]
                    self._shown[known] = _Shown(was.id, was.text, d["meta"], was.memories)

    def _with_status(self, doc: Mapping[str, Any], status: str, **more: Any) -> dict[str, Any]:
        """The next version of a received request: the same message, its new status."""
        meta = dict(doc["meta"], status=status, **more)
        return SourceDoc(id=doc["id"], kind="message", content=doc["content"], meta=meta).to_doc()

    def _evicted(self, object_id: str) -> bool:
        """Whether the message ``object_id`` was evicted (its tombstone, context/evict.py): a
        version of it, or what it said, is not written again."""
        return self.store.doc(f"tombstone:{object_id}") is not None

    def _remember(self, peer: str, key: str, value: str, kind: str, peer_name: str | None) -> None:
        value = _cut(value, MAX_VALUE_CHARS)  # what is read back is cut far shorter anyway
        try:
            self.memory.store_entry(peer, key, value, type=kind, peer_name=peer_name)  # type: ignore[arg-type]
        except Exception as e:  # noqa: BLE001 - memory is a help: the message itself is stored
            log.warning("mesh: could not remember %s with %s: %s", key, peer, e)

    def messages(self) -> list[dict[str, Any]]:
        """The messages shown (newest last): id, text and metadata."""
        with self._showing:
            return [{"id": s.id, "text": s.text, **s.meta} for s in self._shown]

    # --- outgoing --------------------------------------------------------------------------------

    def _resolve(self, who: str) -> tuple[str, registry.LocalPeer | None]:
        """The peer id ``who`` names, and its entry in the local registry (None: not there), in
        one order for every tool: a peer id the node knows; else the local registry (its peer
        ids, then its agent names: agents of this user on this machine, authoritative); else the
        one peer that calls itself ``who`` (a connected one before one gone); else ``who`` as it
        is. ``MeshError`` when several agents or peers have the name (it names them). (A LAN
        peer calling itself a registered agent's name took that name in the memory tools.)"""
        if self.node.peer(who) is not None:
            if self.local_registry is None or who in self.node.connected():
                return who, None
            entry = registry.find(self.local_registry, who)
            return who, entry if entry is not None and entry.peer_id == who else None
        if self.local_registry is not None and (entry := registry.find(self.local_registry, who)) is not None:
            return entry.peer_id, entry
        named = [p for p in self.node.peers() if p.agent_name == who]
        named = [p for p in named if p.status == "connected"] or named
        if len(named) > 1:
            which = ", ".join(p.id for p in named)
            raise MeshError(f"mesh: {len(named)} peers are named {who!r}: {which}; give a peer id instead")
        return (named[0].id if named else who), None

    def peer_id_of(self, who: str) -> str:
        """The peer id ``who`` names (``_resolve``: ``send`` takes names the same way)."""
        return self._resolve(who)[0]

    def _dial_announced(self, who: str, timeout: float) -> str:
        """The peer id ``who`` names (``_resolve``), dialled at the addresses the local registry
        gives it when the node has no connection to it (without mDNS, or after it came back on
        another port)."""
        peer, entry = self._resolve(who)
        if entry is None or entry.peer_id == self.peer_id or peer in self.node.connected():
            return peer
        for addr in entry.dial_addrs:
            try:
                self.node.connect(addr, timeout=timeout)
                break
            except MeshError as e:  # the next address, or the request's own error
                log.info("mesh: %s (%s) announced at %s, not reachable: %s", entry.agent_name, peer, addr, e)
        return peer

    def send(
        self, peer: str, message: str, *, auto_reply: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Send ``message`` to ``peer`` and wait for the answer (``timeout`` seconds, default 60,
        in all); a peer that cannot be reached is tried once more after half a second, within
        what is left of the timeout. The request and
        the answer are stored together; a failure is stored with the request and raised as
        ``MeshError``."""
        _check_outgoing(message, "mesh_send")
        wait = REQUEST_TIMEOUT if timeout is None else timeout
        peer = self._dial_announced(peer, min(wait, self.node.config.call_timeout))
        known = self.node.peer(peer)
        peer_name = known.agent_name if known else None
        sent_at = now_ms()
        # one id for every try: a peer that had the request before the stream broke knows it
        # again, and answers it once (with a new id it queued and stored it a second time)
        rid = wire.new_request_id()
        # the timeout is the whole send's: a try again waits what is left (it waited the whole
        # timeout once more, and a send could take twice as long as it was given)
        deadline = time.monotonic() + wait
        error: MeshError | None = None
        for attempt in range(SEND_ATTEMPTS):
            left = wait if attempt == 0 else deadline - time.monotonic()
            try:
                resp = self.node.request(
                    peer, message, auto_reply=auto_reply, timeout=left, cancel=self.stopping, request_id=rid
                )
                error = None
                break
            except MeshError as e:
                error = e
                # a peer that stays silent is not tried again: it had its time; nor one that
                # answered with what is refused (node._request): it had the request, and was
                # asked twice
                said = str(e)
                if any(m in said for m in ("no answer within", " answered ")) or self.stopping.is_set():
                    break
                if attempt + 1 == SEND_ATTEMPTS or deadline - time.monotonic() <= RETRY_DELAY:
                    break
                if self.stopping.wait(RETRY_DELAY):
                    break
        if error is not None:
            self._record(
                self._message_doc(
                    message,
                    direction="out",
                    kind="request",
                    peer=peer,
                    peer_name=peer_name,
                    request_id=rid,
                    sent_at=sent_at,
                    status="failed",
                    error=str(error),
                )
            )
            raise error
        peer_name = resp.from_agent
        request = self._message_doc(
            message,
            direction="out",
            kind="request",
            peer=peer,
            peer_name=peer_name,
            request_id=rid,
            sent_at=sent_at,
            status="answered",
        )
        reply = self._message_doc(
            resp.message,
            direction="in",
            kind="reply",
            peer=peer,
            peer_name=peer_name,
            request_id=rid,
            in_reply_to=request["id"],
            sent_at=resp.timestamp,
            error=resp.error or None,
        )
        self._record(request, reply)
        if not resp.error:
            self._remember(peer, "exchange", _exchange(message, resp.message), "conversation_turn", peer_name)
        return {
            "peerId": peer,
            "agentName": peer_name,
            "requestId": rid,
            "response": resp.message,
            "error": resp.error,
            "objects": [request["id"], reply["id"]],
        }

    def broadcast(self, message: str, type: str = "announce") -> dict[str, Any]:
        """Publish ``message`` on the topic; stored as a sent broadcast."""
        _check_outgoing(message, "mesh_broadcast")
        result = self.node.broadcast(message, type)
        doc = self._message_doc(
            message,
            direction="out",
            kind="broadcast",
            type=type,
            peer=None,
            sent_at=now_ms(),
            message_id=result.message_id,
            reached=result.peers_reached,
        )
        self._record(doc)
        return {
            "topic": result.topic,
            "peersReached": result.peers_reached,
            "messageId": result.message_id,
            "object": doc["id"],
        }

    # --- incoming (on the node's worker threads) -------------------------------------------------

    def _on_request(
        self, peer: str, req: wire.AgentRequest
    ) -> str | Reply | concurrent.futures.Future[tuple[str, bool]]:
        key = (peer, req.request_id)
        timeout = min(self.config.answer_timeout, (req.timeout_ms or REQUEST_TIMEOUT * 1000) / 1000)
        with self._lock:
            # the same request again (its sender's stream broke, and it tried again): the same
            # answer, given once by the agent and stored once; not a second request
            again = self._open.get(key)
            if again is not None and again.message == req.message:
                return again.future
            known = self._recent.get(key)
            if (
                known is not None
                and known[0] == req.message
                and time.monotonic() - known[1] < RECENT_ANSWER_SECONDS
                and not known[2][0].startswith(GIVEN_UP_MARK)  # its sender came back later: a request again
            ):
                return known[2]
            # claimed under the same lock as the look above: a try again that comes while this
            # one is still taken in (memory recalled, the request stored) waits for its answer
            # (claimed only once taken in, two tries 13 ms apart were both queued, answered twice)
            now = time.monotonic()
            pending = PendingRequest(
                peer, req.from_agent, req.request_id, req.message, now, now + timeout, on_answer=self._answered
            )
            self._open[key] = pending
        try:
            if self.auto_reply or req.auto_reply:
                return self._answer_automatically(key, pending, req)
            return self._take_in(key, pending, req)
        except BaseException as e:  # the peer hears the failure at once, and so does a try again
            with self._lock:
                if self._open.get(key) is pending:
                    del self._open[key]
            settle(pending.future, (f"[error] handling failed: {e}", True))
            raise

    def _answer_automatically(self, key: tuple[str, str], pending: PendingRequest, req: wire.AgentRequest) -> str:
        """Acknowledge ``pending`` (it is in ``_open``) without the agent, stored with its answer."""
        text = wire.fit(f"[auto-response] Received: {req.message}")
        got = self._request_doc(pending.peer, req, "answered automatically")
        self._record(got, self._reply_doc(got, pending.peer, req.from_agent, req.request_id, text, False))
        settle(pending.future, (text, False))  # (unless a try again waiting on it timed out meanwhile)
        self._closed(key, pending)
        return text

    def _take_in(
        self, key: tuple[str, str], pending: PendingRequest, req: wire.AgentRequest
    ) -> concurrent.futures.Future[Reply]:
        """Recall memory for ``pending``, store it, queue it for the agent (it is in ``_open``)."""
        peer = pending.peer
        try:
            context, entries = self.memory.recall_for(peer, req.message)
        except Exception as e:  # noqa: BLE001 - the request goes on without what memory would add
            log.warning("mesh: recalling memory of %s failed: %s", peer, e)
            context, entries = "", []
        pending.context, pending.memories = context, [e.id for e in entries]
        doc = self._request_doc(peer, req, "queued", pending.memories)
        with self._lock:
            orphan = self._orphans.pop(key, None)
        if orphan is not None and orphan["content"] == doc["content"] and not self._evicted(orphan["id"]):
            # asked again after this agent was killed holding it (and failed it at its start):
            # the same request, a new version of its object, not a second object of one id
            doc = SourceDoc(id=orphan["id"], kind="message", content=doc["content"], meta=doc["meta"]).to_doc()
        pending.object_id = doc["id"]
        with self._lock:
            self._unanswered[doc["id"]] = doc
        # stored before it is queued: the agent's answer always follows its request
        try:
            self._record(doc, memories=tuple((e.id, e.value) for e in entries))
        except BaseException:
            with self._lock:
                self._unanswered.pop(doc["id"], None)
            raise
        self.queue.put(pending)  # a full queue answers "[queue-full]" at once: _settled stores it
        pending.future.add_done_callback(lambda f: self._settled(pending, doc))
        pending.future.add_done_callback(lambda f: self._closed(key, pending))
        return pending.future

    def _closed(self, key: tuple[str, str], pending: PendingRequest) -> None:
        """A received request is answered (by the agent, a timeout, a full queue): its answer
        is what the same request asked again gets."""
        with self._lock:
            if self._open.get(key) is pending:
                del self._open[key]
            self._keep_answer(key, pending.message, pending.future.result())

    def _keep_answer(self, key: tuple[str, str], message: str, reply: Reply) -> None:
        """(Under ``_lock``.) Keep ``reply`` for a retry of request ``key``, within the bounds."""
        self._recent[key] = (message, time.monotonic(), reply)
        self._recent.move_to_end(key)
        while len(self._recent) > RECENT_ANSWERS or (
            len(self._recent) > 1 and sum(len(m) + len(r[0]) for m, _, r in self._recent.values()) > RECENT_ANSWER_CHARS
        ):
            self._recent.popitem(last=False)

    def _request_doc(
        self, peer: str, req: wire.AgentRequest, status: str, memories: list[str] | None = None
    ) -> dict[str, Any]:
        return self._message_doc(
            req.message,
            direction="in",
            kind="request",
            peer=peer,
            peer_name=req.from_agent,
            request_id=req.request_id,
            sent_at=req.timestamp,
            status=status,
            memories=memories or None,
            # who holds it while it waits: a process killed before it could answer (SIGKILL) is
            # seen gone at the agent's next start, which marks the request failed
            **(self._holder if status == "queued" else {}),
        )

    def _reply_doc(
        self, request: Mapping[str, Any], peer: str, peer_name: str, rid: str, text: str, error: bool
    ) -> dict[str, Any]:
        return self._message_doc(
            text,
            direction="out",
            kind="reply",
            peer=peer,
            peer_name=peer_name,
            request_id=rid,
            in_reply_to=request["id"],
            sent_at=now_ms(),
            error=error or None,
        )

    def _answered(self, pending: PendingRequest, text: str, error: bool) -> None:
        """The agent's answer and its request's new status, stored together before the peer
        gets the answer (on the agent's thread)."""
        with self._lock:
            request = self._unanswered.get(pending.object_id or "")
        if request is None:
            return
        reply = self._reply_doc(request, pending.peer, pending.peer_name, pending.request_id, text, error)
        evicted = self._evicted(request["id"])
        status = [] if evicted else [self._with_status(request, "answered" if not error else "refused by the agent")]
        self._record(reply, *status)
        with self._lock:  # recorded: an answer tried again after a failed write is recorded too
            self._unanswered.pop(pending.object_id or "", None)
        if not error and not evicted:
            self._remember(
                pending.peer,
                "exchange",
                _exchange(pending.message, text),
                "conversation_turn",
                pending.peer_name,
            )

    def _settled(self, pending: PendingRequest, doc: dict[str, Any]) -> None:
        """The status of a request the agent did not answer (timed out, refused: the queue was
        full, the agent stopped), as a new version of its object, written off the network's
        thread. (An answer writes its own, with the reply.)"""
        with self._lock:
            if self._unanswered.pop(doc["id"], None) is None:
                return  # the agent answered: stored with its answer
        text, _ = pending.future.result()
        if text.startswith("[timeout]"):
            status = "timed out"
        elif text.startswith("[queue-full]"):
            status = "refused: queue full"
        elif text.startswith(GIVEN_UP_MARK):
            status = "given up by the sender"
        else:
            status = "failed"

        def write() -> None:
            try:
                if not self._evicted(doc["id"]):
                    self._record(self._with_status(doc, status))
            except Exception as e:  # noqa: BLE001 - the answer went out; only its status is not stored
                log.warning("mesh: could not store the status of request %s: %s", pending.request_id, e)

        try:
            self._writer.submit(write)
        except RuntimeError:  # shutting down: write here
            write()

    def _on_broadcast(self, peer: str, b: wire.Broadcast) -> None:
        """Store and remember a broadcast (one at a time, in the order they came), unless it is
        a copy of one received before (``_heard``)."""
        if b.message_id in self._heard:
            log.info("mesh: a broadcast from %s came again (%s): received before, not stored", peer, b.message_id)
            return
        doc = self._message_doc(
            b.message,
            direction="in",
            kind="broadcast",
            type=b.type,
            peer=peer,
            peer_name=b.from_agent,
            sent_at=b.timestamp,
            message_id=b.message_id or None,
        )
        self._record(doc)
        self._hear(b.message_id or None, b.timestamp)
        self._remember(peer, "broadcast", f"[{b.type}] {b.message}", "broadcast", b.from_agent)

    # --- for the agent's loop and tools ----------------------------------------------------------

    def next_request(
        self, timeout: float | None = 0.0, *, cancel: threading.Event | None = None
    ) -> PendingRequest | None:
        """The oldest request waiting for the agent (see ``RequestQueue.next``)."""
        return self.queue.next(timeout, cancel=cancel)

    def peers(self) -> list[dict[str, Any]]:
        """Every peer known (stale ones pruned first, as the seed does every 30 s), then, with a
        local registry, the agents announced there that the node does not know yet (status
        ``announced``); a known peer's name the registry has is filled in."""
        self.node.prune_stale()
        out = [p.public() for p in self.node.peers()]
        if self.local_registry is None:
            return out
        announced = {e.peer_id: e for e in registry.local_peers(self.local_registry) if e.peer_id != self.peer_id}
        for p in out:
            entry = announced.pop(p["peerId"], None)
            if entry is not None and p["agentName"] is None:
                p["agentName"] = entry.agent_name
        out += [
            {
                "peerId": e.peer_id,
                "agentName": e.agent_name,
                "status": "announced",
                "addresses": list(e.addrs),
                "discoveredAt": e.started,
                "connectedAt": None,
                "disconnectedAt": None,
            }
            for e in announced.values()
        ]
        return out

    def discover(self, window_ms: int = DISCOVER_WINDOW_MS) -> dict[str, Any]:
        """Look for peers now (a round of the DHT, when the node runs one), then the peers found
        in the last minute (mDNS, the DHT, bootstrap, or that reached us)."""
        searched = self.node.dht_round() if self.config.dht else None
        cutoff = now_ms() - window_ms
        recent = [p.public() for p in self.node.peers() if p.discovered_at >= cutoff]
        return {"peersFound": len(recent), "peers": recent, "mdns": self.config.mdns, "dhtSearched": searched}

    def prune(self) -> dict[str, Any]:
        return {"pruned": self.node.prune_disconnected(), "remaining": len(self.node.peers())}

    def status(self) -> dict[str, Any]:
        return {
            "agentName": self.name,
            "peerId": self.peer_id,
            "addresses": self.node.addrs,
            "topic": self.config.topic,
            "peers": len(self.node.peers()),
            "connected": len(self.node.connected()) if self.node.running else 0,
            "traffic": dict(self.node.counts),
            "requests": self.queue.stats(),
            "shown": len(self._shown),
            "reachability": self.node.reachability,
            "bootstrapFailed": list(self.node.bootstrap_failed),
            "dhtRounds": self.node.dht_rounds if self.config.dht else None,
        }


def _cut(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters, saying how long it was when it is cut."""
    if len(text) <= limit:
        return text
    note = f"\n… [cut: {len(text):,} characters]"
    return text[: limit - len(note)] + note


def _exchange(request: str, response: str) -> str:
    """An exchange as memory keeps it, each side cut so that both fit in one entry."""
    half = MAX_VALUE_CHARS // 2 - 20
    return f"[Request] {_cut(request, half)}\n[Response] {_cut(response, half)}"


def _check_outgoing(message: object, what: str) -> None:
    """Refuse, before it is sent or stored, a message no peer would accept."""
    if not isinstance(message, str) or not message.strip():
        raise InputError(f"{what}: message is empty")
    if len(message) > wire.MAX_TEXT_CHARS:
        raise InputError(
            f"{what}: the message is {len(message):,} characters; peers accept at most {wire.MAX_TEXT_CHARS:,}"
        )
    if (problem := wire.unicode_problem(message)) is not None:
        raise InputError(f"{what}: the message cannot be sent: {problem}")


class MeshSource:
    """The ``ObjectSource`` of an agent's messages: the newest ``history_cap`` of them, newest
    first, each already a stored object (``SourceItem.stored``), with the memory objects
    recalled for a request right after it. Broadcasts that came (score 1) and recalled memories
    (0.5) are meant for the active pool; the other messages (0.2) for the metadata pool."""

    def __init__(self, agent: MeshAgent):
        self.agent = agent
        self.name = f"mesh:{agent.name}"

    def items(self, query: str, budget_tokens: int) -> list[SourceItem]:
        with self.agent._showing:
            shown = list(self.agent._shown)
        out: list[SourceItem] = []
        for s in reversed(shown):
            # a broadcast that came is shown in full; the rest the agent has seen already (its
            # own messages, a tool's answer, a request its loop gives it as a user message)
            score = 1.0 if s.meta.get("direction") == "in" and s.meta.get("kind") == "broadcast" else 0.2
            out.append(SourceItem(s.id, "message", s.text, score, s.meta, stored=True))
            out.extend(SourceItem(m, "memory", text, 0.5, {}, stored=True) for m, text in s.memories)
        return out
