"""A session's context engine, as one facade: open or resume, ingest, assemble, agent operations.

``Session`` ties the parts of the context engine together for one agent session:

* ``Session.open`` takes the session's writer lease (lease.py) and resumes the session from the
  store (load.py) or starts it;
* ``sync`` takes in the harness's messages past the cursor (ingest.py);
* ``assemble`` starts a turn: evictions since the last turn (evict.py's tombstones), newer
  versions of what is shown, the retention policy's decisions (policy.py), one transaction of
  everything queued (persist.py), the render (view.py) and the frame that records it;
* ``show``, ``activate``, ``deactivate``, ``pin``, ``unpin``: what the agent's tools (tools.py)
  and the file tools do to an object's state, each change recorded.

The store is the truth; the view can always be rebuilt from it, which is how sessions resume and
how frames are re-rendered and verified. Harness formats never reach this module: adapters hand it
``Incoming`` messages and a way to hash the raw ones, and take back ``Rendered``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import (
    ContextOSError,
    InputError,
    LockedObject,
    NotFound,
    SessionBusy,
    StateError,
    StoreError,
    StoreUnavailable,
)
from ..objects import FrameContent
from ..scrub import RedactFunction, redactor
from ..sources.base import ObjectSource
from ..store.base import Evict, Store, Tx, Version, now_ms
from .entries import Entry, Incoming
from .ingest import Ingest, SyncReport
from .lease import DEFAULT_LEASE_MS, Lease
from .load import load_view
from .persist import PAGE_SIZE, SessionWriter, state_id
from .policy import Actor, RetentionPolicy, StateChange, fit_budget, horizon_due, plan_break, retention_due, used
from .sources import SourceFeed, consult
from .view import ObjInfo, Rendered, SessionView, own_text

__all__ = ["LOCKED_PREFIXES", "Assembly", "Session", "close_sessions", "shows_latest_file"]

log = logging.getLogger(__name__)

OBJECT_IDS_HINT = "use an id from the object list or a tool result stub"
"""Where a harness's model finds object ids (an entry point with other tools says its own)."""
HISTORY_HINT = "history(start, end) shows earlier messages"
"""How a harness's model sees earlier messages (an entry point without ``history`` says its own)."""
GIVE_BACK_S = 5.0
"""How long a session ended by an error (Ctrl-C, the store out of reach) waits for its store to
take its lease back before it goes on without (``Session.__exit__``)."""

LOCKED_PREFIXES = ("chat:", "session:", "frame:", "block:", "state:", "lease:", "tombstone:")

_SHORT_REF = re.compile(r"r(\d{1,18})")
"""A short ref; longer runs of digits name no entry (and ``int`` refuses thousands of them)."""
LINES_AT_ONCE = 200
"""The lines the ``lines`` tool shows when it is not given an end."""

FRAME_CHANGES = 200
"""A frame lists at most this many of the state changes since the previous one (it counts them
all): a first turn over a long history collapses thousands of tool results at once."""

MENTION_LIMIT = 2
"""A message naming more files of the active pool than this is a listing: no file counts as used."""

GONE_REASON = "the file is missing (deleted or moved away)"
"""Why the system takes a file out of the active pool once its newest version says it is missing
(``Session._check_newer``)."""


@dataclass
class Assembly:
    """One assembled context and the frame that records it."""

    turn: int
    rendered: Rendered
    frame_id: str
    tokens_full: int
    sync: SyncReport
    changes: list[StateChange] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.rendered.tokens


def _made(o: ObjInfo) -> str | None:
    """The hash of ``o``'s version shown, if the agent made it (an edit or a write, as the version
    says), else None."""
    return o.version[2] if o.version is not None and o.meta.get("cause") in ("edit", "write") else None


def _erased_shas(tombstones: Iterable[Version]) -> set[str]:
    """The hashes of the file bytes the evictions erased (context/evict.py writes them)."""
    return {str(sha) for t in tombstones for sha in ((t.doc or {}).get("content") or {}).get("shas") or ()}


def _erased_texts(tombstones: Iterable[Version]) -> set[str]:
    """The content hashes of the source items' texts the evictions erased (context/evict.py)."""
    return {str(h) for t in tombstones for h in ((t.doc or {}).get("content") or {}).get("content_hashes") or ()}


def _missing(o: ObjInfo) -> bool:
    """Whether ``o`` is a file whose newest version, newer than the one shown, says the file is
    missing: the text shown is the last one known, not the file's."""
    return o.kind == "file" and bool((o.newer or {}).get("missing"))


class Session:
    """The context of one agent session, kept in a store."""

    def __init__(
        self,
        store: Store,
        view: SessionView,
        *,
        harness: str,
        workspace: str | None,
        created: int,
        source: str | None = None,
        redact: RedactFunction | None = None,
        lease: Lease | None = None,
        retired: list[list[int]] | None = None,
        last_vt: int = 0,
    ):
        self.store = store
        self.view = view
        self.harness = harness
        self.workspace = workspace
        self.created = created
        self.source = source
        """What recorded the messages, if not the harness live (a replay: the transcript's format)."""
        self.lease = lease
        """The session's writer lease (``Session.open`` takes it; None: this object never writes)."""
        self.give_back_s = GIVE_BACK_S
        """How long leaving a ``with`` block by an error waits for the store to take the lease
        back (``ctxos replay`` cut short on a store that stopped answering waits less)."""
        self.hooked = False
        """Whether a harness hook took this Session (a refused one then leaves its lease alone)."""
        self.retired: list[list[int]] = retired if retired is not None else []
        self.writer = SessionWriter(store, view, lease, header=self._header, last_vt=last_vt)
        self.ingest = Ingest(view, self.writer, redact=redact, retired=self.retired)
        self.managed_from: int | None = 0 if view.managed else None
        """The turn from which the session is managed (None: it still passes through unchanged)."""
        self._seen_from = len(view.entries)
        """Where the entries not yet looked at by a turn start (mentions, source queries)."""
        self._manage_next = False
        """Managed from the next turn on, whatever its size: an object the session showed got a
        new version, or its tools show text only in blocks (``manage``)."""
        self._looked: int | None = None
        self._evictions_at: int | None = None
        """The newest readable transaction when ``_take_in_evictions`` last read the tombstones."""
        """The store's newest transaction when ``_others_wrote`` last read it (None: it did not)."""
        self._seq = max((o.seq for o in view.objects.values() if o.kind != "toolcall"), default=0)
        self._reading: dict[str, str | None] = {
            o.id: _made(o)
            for o in sorted(view.objects.values(), key=lambda o: o.seq)
            if o.kind == "file" and o.content is not None
        }
        """The files this session read, in the order it first read them, each with the hash of the
        latest version of it the agent made since (None: it changed none; ``next_on_reading_list``;
        a resumed session starts from the files it shows whose text it has, in the order it first
        saw them, not a file only discovered, listed by ``ls`` or ``find``; a file whose version
        shown the agent made counts as changed)."""
        self.feeds: list[SourceFeed] = []
        """The object sources consulted at each turn (``add_source``)."""
        self.source_hashes: dict[str, dict[str, str]] = {}
        """Per source item: the object and content hashes of its version as this session last
        wrote or read it (context/sources.py: an unchanged item costs no store read)."""
        self.source_ended: set[str] = set()
        """Items whose source says their origin is gone (``ended()``) and whose object this
        session saw ended in the store: no store read for them at every turn."""
        # the tombstones (id, tx) this session has taken in: evictions it already reflects
        self._tombstones: set[tuple[str, int]] = set()
        self.erased: set[str] = set()
        """The hashes of the bytes of every evicted file, as of the last turn that read the store's
        tombstones: what a file read withholds while the store is out of reach (files/)."""
        self.erased_texts: set[str] = set()
        """The content hashes of every evicted source item's text (a memory index, a recall
        hit): a source that offers that text again (its file still holds it) is not stored or
        shown (context/sources.py)."""
        self.evicted: set[str] = set()
        """The ids of the objects evicted, as of the last turn that read the store's tombstones:
        a source that offers one of its stored objects (a mesh message) has it skipped
        (context/sources.py)."""
        self._between: list[StateChange] = []
        """Evictions taken in between two turns (``_take_in_evictions``), for the next turn's changes."""
        self._unchecked = False
        """A turn could not check for others' writes (the store was out of reach): the next turn
        that reaches it checks, whatever the newest transaction is (it may be this session's)."""
        self._released: list[ObjInfo] = [o for o in view.objects.values() if o.kind == "toolcall" and o.collapsed]
        """Collapsed tool results whose text may leave memory (``_release``)."""
        self._asked: set[str] = set()
        """Objects the agent or the user made active since the retention policy last ran: the
        active pool does not take them out before the model has seen them (``_retain``)."""
        self._answered = 0
        self._cause_from: int | None = None
        """The first entry the last sync took in, until its turn is assembled (``cause_at``)."""
        self._assembled: tuple[Assembly, int | None] | None = None
        """The last assembly of this process and the transaction the session had written after it."""
        self._resumed = view.turn > 0
        """A resumed session whose first call may be its last frame's again (``_again_resumed``)."""

    def _header(self) -> dict[str, Any]:
        content = {"harness": self.harness, "workspace": self.workspace, "created": self.created}
        if self.source is not None:
            content["source"] = self.source
        return {"content": content, "retired": self.retired, "managed_from": self.managed_from}

    # --- opening -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        store: Store,
        session_id: str,
        *,
        harness: str = "generic",
        workspace: str | None = None,
        policy: RetentionPolicy | None = None,
        redact: RedactFunction | bool | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        source: str | None = None,
    ) -> Session:
        """Resume ``session_id`` from the store, or start it, as its one writer. A resumed session
        keeps the ``harness`` it was recorded with, unless that was ``generic`` (not named); a hook
        of another harness refuses it and lends its lease out (``ContextHook``, ``lend``).

        Takes the session's lease first (context/lease.py): ``SessionBusy`` if another process
        writes it; a ``Session`` of it opened earlier in this process stops writing. ``close()``
        (or leaving a ``with`` block) gives it back; ``lease_ms`` is how long it lasts unused.

        Secrets are redacted from every message text, tool output and tool argument before
        anything is stored, by default with ``Redactor()`` (context_os/redact.py). ``redact``: a
        function ``text -> (text, count)`` to use instead (e.g. ``Workspace.redact``), or
        ``False`` to store text as it comes (None or True: the default). It must be pure: a
        short string it returned unchanged with a count of 0 is not passed to it again.
        ``source``: what recorded the messages, when not the harness live (``ctxos replay``: the
        transcript's format, e.g. ``claude-code``); kept in the session document, shown by
        ``ctxos sessions``.
        """
        scrub = redactor(redact)
        if not session_id or any(c.isspace() for c in session_id):
            raise InputError(f"session id must be a non-empty string without spaces, got {session_id!r}")
        if store.read_only:  # it said "submit failed", naming no reason a session writes
            raise StoreError(
                f"{store.url} is opened read-only: Session.open writes (it takes the session's lease and"
                " records every turn); read a session there with load_view or the ctxos read commands"
            )
        lease = Lease(store, session_id, ttl_ms=lease_ms)
        lease.acquire()  # before reading: nobody else writes it from here on
        try:
            current = store.get(f"session:{session_id}")
            if current is None or current.doc is None:
                policy = policy or RetentionPolicy()
                view = SessionView(session_id, policy, managed=not policy.manage_from_tokens)
                s = cls(
                    store,
                    view,
                    harness=harness,
                    workspace=workspace,
                    created=now_ms(),
                    source=source,
                    redact=scrub,
                    lease=lease,
                )
                s._know_tombstones(store.find("tombstone"))
                s.writer.queue_session_doc()
                s.writer.flush()
                return s
            view = load_view(store, session_id)
            doc = current.doc
            was = doc["content"].get("harness")
            s = cls(
                store,
                view,
                # a session recorded as generic (opened without its harness named) takes the one named now
                harness=harness if was in (None, "generic") else was,
                workspace=doc["content"].get("workspace", workspace),
                created=doc["content"].get("created", 0),
                source=doc["content"].get("source", source),
                redact=scrub,
                lease=lease,
                retired=[list(r) for r in doc["meta"].get("retired", [])],
                last_vt=current.valid_time,
            )
            s.managed_from = doc["meta"].get("managed_from", 0)
            s._know_tombstones(store.find("tombstone"))  # load_view reflects them
            s.writer.dirty_pages |= {p for p in range(-(-len(view.entries) // PAGE_SIZE)) if p not in view.pages}
            if policy is not None and policy != view.policy:
                view.policy = policy
                s.writer.queue_session_doc()
            if s.harness != was:
                s.writer.queue_session_doc()
            s.writer.flush()  # a changed policy, a page rebuilt from its tombstone; usually nothing
            # what others wrote since the session's states were recorded (a file changed while it
            # was closed) is checked at its first turn, whatever the newest transaction is then:
            # a write of its own before that turn (this open's, an activation between turns) made
            # it look like nothing else was written, and a newer version went unmarked
            s._unchecked = True
            s._resume()
            s._release()
            return s
        except StoreUnavailable:
            raise  # giving the lease back would wait on the store too: it expires (or goes with this process)
        except Exception:
            # the session could not be opened (a damaged document): its lease goes back, or no
            # other process of this host could open it while this one runs (a server)
            try:
                lease.release()
            except ContextOSError as e:
                log.info("session %s: its lease could not be given back after a failed open: %s", session_id, e)
            raise

    def _resume(self) -> None:
        """A resumed session goes on from its last frame, as the process that wrote it would
        have: the prompt cache's allowance from its totals (from nothing, every change waiting for
        it looked affordable sooner than it was), and its blocks where it showed them
        (``resume_blocks``; rebuilt at the end instead, the first call after a restart sent the
        context anew from the first of them). The blocks only when the session renders that
        frame as it stands (its hash); else they are shown anew."""
        view = self.view
        if view.turn == 0:
            return
        found = self.store.get(f"frame:{self.id}:{view.turn:06d}")
        c = found.doc["content"] if found is not None and found.doc is not None else {}
        if isinstance(c.get("sent_total"), int) and isinstance(c.get("uncached_total"), int):
            view.sent_total, view.uncached_total = c["sent_total"], c["uncached_total"]
        recorded = (c.get("tail_layout"), c.get("layout", 1), c.get("managed", True), c.get("horizon", 0))
        if not view.managed or recorded != (2, view.layout, True, view.horizon):
            return
        if c.get("thinking_horizon", 0) != view.thinking_horizon:
            return
        blocks: list[tuple[int | None, str, str]] = []
        for at, block_id, _ in c.get("blocks", []):
            doc = self.store.doc(block_id)
            if doc is None:  # (evicted since)
                return
            blocks.append((at, str(doc["meta"].get("object")), str(doc["content"])))
        rendered = view.render(frame=c, blocks=[(at, text) for at, _, text in blocks])
        if rendered.rendered_hash == c.get("rendered_hash"):
            view.resume_blocks(blocks)

    @property
    def id(self) -> str:
        return self.view.session_id

    def close(self) -> None:
        """Stop writing this session and give its lease back (another process may then open it).
        A lease another writer took once it expired is not this Session's to give back: a warning
        says so (it raised ``SessionBusy``, from a ``with`` block whose work had all been done)."""
        if self.lease is not None:
            try:
                self.lease.release()
            except SessionBusy as e:
                log.warning("session %s could not give its lease back: %s", self.id, e)
        try:  # its writes readable by every reader of the store, not only through this one
            self.store.sync()
        except StoreError as e:  # taken all the same (an XTDB node's log, an outbox): only slower to read
            log.warning("session %s closed before its store could confirm its last writes: %s", self.id, e)

    def lend(self) -> None:
        """Give the lease back while this Session does not write (another process may open the
        session meanwhile); its next write takes it again, or raises ``SessionBusy`` if another
        writer held the session since (what this Session holds in memory may be out of date)."""
        if self.lease is not None:
            self.lease.release(lend=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is None:
            self.close()
            return
        # the error that ended the block is the one to raise, not one of closing after it; and
        # closing waits at most ``give_back_s``: after Ctrl-C or an outage the store may hang (a node
        # that does not answer holds each request up to the store's timeout)
        failed: list[Exception] = []
        closed, gave_up = threading.Event(), threading.Event()

        def close() -> None:
            # whatever ends it, it ends here: an error raised in this thread would print its
            # traceback after the error that ended the block
            try:
                self.close()
            except Exception as e:  # the store still out of reach, or closed meanwhile; the lease taken
                failed.append(e)
                if gave_up.is_set():  # (the warning below said it could not; this says how it ended)
                    log.info("session %s: giving its lease back ended after the wait: %s", self.id, e)
            finally:
                closed.set()

        threading.Thread(target=close, name=f"ctxos-close-{self.id}", daemon=True).start()
        if not closed.wait(self.give_back_s):
            gave_up.set()
            why = f"the store did not answer within {self.give_back_s:g} s"
        elif failed:
            why = str(failed[0])
        else:
            return
        log.warning(
            "session %s could not give its lease back (a writer of this host takes it once this process"
            " ends; of another host, once it expires): %s",
            self.id,
            why,
        )

    # --- ingest and assembly -------------------------------------------------------------------

    def sync(
        self, count: int, hash_at: Callable[[int], str], translate: Callable[[int], Incoming], same: int | None = None
    ) -> SyncReport:
        """Take in the harness's message list: only what lies past the cursor is read; ``same``:
        how many of its first messages are, unchanged, those of the last sync, to have every
        other message before the cursor compared; None: the first, middle and last only
        (``Ingest.sync``). A rewrite that drops entries takes out what only they brought in
        (``_undo_dropped``)."""
        report = self.ingest.sync(count, hash_at, translate, same)
        entries = len(self.view.entries)
        self._cause_from = entries - report.new if report.new else None
        if report.gone:
            self._between += self._undo_dropped(report.gone, entries - report.new)
        return report

    @property
    def cause_at(self) -> int:
        """The chat entry from which on the history holds the cause of what is shown now: while
        a turn is taken in (an ``on_sync``, the sources, a message naming a file), the first
        entry its sync took in; between turns (a tool running), the next entry to come, the
        model's call of that tool."""
        return self._cause_from if self._cause_from is not None else len(self.view.entries)

    def _undo_dropped(self, gone: list[int], first_new: int) -> list[StateChange]:
        """Take out what only dropped entries brought in, as the harness's own history no longer
        shows it: ``gone``, the entries a rewrite retired, are dropped unless the rewritten list
        holds them again (the same message, by its hash: the recent messages a compaction keeps
        come back as new entries). An object joined or made active at entry ``at``
        (``ObjInfo.joined_at``, ``active_at``) keeps what it has while an entry from ``at`` on
        stays: one kept, or one that came back (its stamp then moves to that entry's new place).
        Else an activation goes (the object is inactive), and an object that joined there leaves
        the session (absent) unless the agent changed the file there (an edit or a write: the
        disk changed; it stays, inactive). Pinned objects stay as they are; a tool result whose
        own entry is gone is retired already (``Ingest._retire``)."""
        view = self.view
        back: dict[str, int] = {}
        for i in range(first_new, len(view.entries)):
            back.setdefault(view.entries[i]["h"], i)

        def moved(at: int | None) -> tuple[bool, int | None]:
            """Whether every entry from ``at`` on is dropped, and ``at`` as it stands after the rewrite."""
            if at is None or not gone[0] <= at <= gone[-1]:
                return False, at  # an entry from it on is kept, or none was retired
            for i in gone[bisect_left(gone, at) :]:
                if (j := back.get(view.entries[i]["h"])) is not None:
                    return False, j
            return True, None

        changes: list[StateChange] = []
        reason = "brought in by messages the harness's history no longer has"
        for o in sorted(view.objects.values(), key=lambda o: (o.seq, o.id)):
            if o.pinned:
                continue
            stamps, was = (o.active_at, o.joined_at), o.state
            unseen, o.active_at = moved(o.active_at)
            left, o.joined_at = moved(o.joined_at)
            if left and o.kind != "toolcall" and _made(o) is None and (unseen or was != "active"):
                view.set_state(o, state="absent")
                self.writer.record_state(o, "system", reason)
                view.remove_object(o.id)
                self._reading.pop(o.id, None)
                self._asked.discard(o.id)
                changes.append(StateChange(o.id, was, "absent", "system", reason))
            elif unseen and was == "active":
                changes.append(self._set(o, "inactive", "system", reason))
            elif (o.active_at, o.joined_at) != stamps:
                # what brought it in came back in new places (a compaction), or is gone while
                # what it is now is not: its record follows
                self.writer.record_state(o, "system", "history rewritten by the harness", change=False)
        return changes  # written with the turn, as the retired entries are

    def flush(self) -> Tx | None:
        """Write everything queued as one transaction."""
        return self.writer.flush()

    def assemble(self, sync: SyncReport | None = None) -> Assembly:
        """Start a new turn: take in evictions and newer versions, apply the policy, persist,
        render, and record the frame."""
        view = self.view
        # (the list ``_assemble`` takes, and extends with what it finds changed)
        before = (view.turn, view.sent_total, view.uncached_total, self._seen_from, self._between)
        try:
            assembly = self._assemble(sync)
            self._cause_from = None  # what comes next (tools running) is caused by the next entries
            return assembly
        except BaseException:
            # nothing of the turn reached the store: its retry is this turn again (the newest
            # result, which the model never saw, must not age by a try), the changes and the
            # entries it took in are the retry's to take, and the counts of what was sent stand
            view.turn, view.sent_total, view.uncached_total, self._seen_from, taken = before
            if taken is not self._between:
                self._between = taken + self._between
            raise

    def _assemble(self, sync: SyncReport | None) -> Assembly:
        view = self.view
        view.turn += 1
        threshold = view.policy.manage_from_tokens
        budget = view.policy.token_budget
        if not view.managed and (
            not threshold
            or self.ingest.full >= threshold
            or self._manage_next
            or (budget is not None and self.ingest.full > budget)
        ):
            # large enough that managing it pays (or must, to fit the budget), or a file it showed
            # changed (the harness's history shows a stale copy now): from here on for good (one
            # break of the cache)
            view.managed, self.managed_from = True, view.turn
            view.reset_render()
            self._released = [o for o in view.objects.values() if o.kind == "toolcall" and o.collapsed]
        self._manage_next = False  # asked for this turn, done: kept, a retry of it was never ``again``
        changes, self._between = self._between, []
        if self._others_wrote():  # (not while the store is out of reach: nothing new can be read)
            self._unchecked = self.writer.skipped = False
            self.writer.looked = self._readable()
            changes += self._apply_tombstones()
            changes += self._check_newer()
        new = view.entries[min(self._seen_from, len(view.entries)) :]
        self._seen_from = len(view.entries)
        self._consult_sources(new)
        self._note_mentions(new)
        changes += self._move_horizon()
        break_at = self._retain(changes)
        self.writer.queue_session_doc()
        # what others wrote after this (an eviction landing now) the frame shows as it was before
        seen = self.writer.seen if not self.writer.skipped and not self._unchecked else None
        # one transaction per turn: the state changes, the chat pages, the session document, the
        # frame and its new blocks; the frame's basis is that transaction (frames.frame_basis)
        vt = self.writer.stage()
        assert vt is not None
        try:
            rendered = view.render(commit=True, break_at=break_at)
            tokens_full = self.ingest.full
            changed, changes_total = self.writer.take_changes(FRAME_CHANGES)
            content: FrameContent = {
                "turn": view.turn,
                "valid_time": vt,
                "rendered_hash": rendered.rendered_hash,
                "tokens": rendered.tokens,
                "tokens_full": tokens_full,
                "messages": rendered.message_count,
                "active": [o.id for o in view.live()],
                "refs": rendered.refs,
                "tail_layout": 2,
                "blocks": view.block_refs or [],
                "layout": view.layout,
                "managed": view.managed,
                "horizon": view.horizon,
                "pools": rendered.pools or {},
                "prefix_tokens": rendered.prefix_tokens or 0,
                "sent_total": view.sent_total,
                "uncached_total": view.uncached_total,
                "changes": changed,
                "changes_total": changes_total,
            }
            if view.thinking_horizon:
                content["thinking_horizon"] = view.thinking_horizon
            if seen is not None and seen >= 0:  # (an outbox's provisional id says nothing)
                content["seen_tx"] = seen
            meta = {"session": self.id, "turn": view.turn, "tokens": rendered.tokens, "tokens_full": tokens_full}
            frame_id = self.writer.queue_frame(content, meta, rendered.new_blocks)
            self.writer.commit()
            self._release()
        except BaseException:
            # the render was taken as shown, but nothing of the turn reached the store: the next
            # turn renders (and writes its blocks) anew rather than build on a frame never written
            view.reset_render()
            raise
        assembly = Assembly(view.turn, rendered, frame_id, tokens_full, sync or SyncReport(0, False), changes)
        self._assembled = (assembly, self.writer.last_tx)
        return assembly

    def again(self, sync: SyncReport) -> Assembly | None:
        """The last assembly, when a call brings nothing new since it: no message (``sync``),
        nothing written by this session or by anyone else (a state change, an eviction, a newer
        version), nothing asked for. A harness that retries a model call (after a provider's 429
        or 5xx) sends the same messages again: a new turn for each try would age every result,
        and after a few tries collapse the newest before the model ever saw it. None: assemble."""
        resumed, self._resumed = self._resumed, False
        if sync.new or sync.rewritten or sync.retired:
            return None
        if self._assembled is None:
            return self._again_resumed(sync) if resumed else None
        last, tx = self._assembled
        if self.writer.queued or self._asked or self._manage_next or self.writer.last_tx != tx:
            return None
        return None if self._others_wrote() else last

    def _again_resumed(self, sync: SyncReport) -> Assembly | None:
        """The first call of a resumed session (a process restarted between a client's try and
        its retry), bringing nothing new: its last frame's assembly, when the session stands as
        it did then, nothing taken in since (an eviction, a newer version of what it shows) and
        the same context rendered from it, at the frame's places (the hash it recorded)."""
        view = self.view
        if self.writer.queued or self._asked or self._manage_next or self.feeds:
            return None
        found = self.store.get(f"frame:{self.id}:{view.turn:06d}")
        if found is None or found.doc is None:
            return None
        # the policy in force when the frame was made, as the session recorded it then: reopened
        # with another one, it decides anew (a horizon, the reasoning kept)
        then = self.store.get(f"session:{self.id}", found.valid_time, found.tx_id)
        if then is None or then.doc is None or then.doc["meta"].get("policy") != self.writer.policy_dict():
            return None
        frame = found.doc
        c = frame["content"]
        if (c.get("layout", 1), c.get("managed", True), c.get("horizon", 0)) != (
            view.layout,
            view.managed,
            view.horizon,
        ) or c.get("thinking_horizon", 0) != view.thinking_horizon:
            return None
        if self._others_wrote():  # what a turn would take in first: taken in, for the next turn
            self._unchecked = self.writer.skipped = False
            self.writer.looked = self._readable()
            self._between += self._apply_tombstones() + self._check_newer()
        if self._between or self._manage_next or self.writer.queued:
            return None
        # a state the session recorded after the frame (an activate, a pin, a file read between
        # the try and the restart) is not in the frame's blocks, which the render below takes as
        # they were: the same hash, and the change not shown. Only a new turn shows it.
        basis = int(c.get("basis_tx_id") or found.tx_id)  # (a frame is written once)
        if any(v.tx_id > basis for v in self.store.find("state", {"session": self.id})):
            return None
        blocks: list[tuple[int | None, str]] = []
        for at, block_id, _ in c.get("blocks", []):
            doc = self.store.doc(block_id)
            if doc is None:
                return None
            blocks.append((at, str(doc["content"])))
        rendered = view.render(frame=c, blocks=blocks)
        if rendered.rendered_hash != c.get("rendered_hash"):
            return None
        assembly = Assembly(view.turn, rendered, str(frame["id"]), int(c.get("tokens_full", 0)), sync)
        self._assembled = (assembly, self.writer.last_tx)
        return assembly

    def add_source(
        self,
        source: ObjectSource,
        *,
        budget_tokens: int = 1500,
        active_score: float | None = None,
        max_items: int = 5,
        pin: bool = False,
        every_turn: bool = False,
        forget: bool = False,
    ) -> SourceFeed:
        """Consult ``source`` from the next turn on (context/sources.py): at each new user
        message (the query), or at every turn with ``every_turn``; its items enter the metadata
        pool, or the active pool at or above ``active_score`` within ``budget_tokens``, or pinned
        with ``pin``; with ``forget``, an item no longer offered leaves the session. A session
        with a source is managed (its items show as blocks)."""
        feed = SourceFeed(source, budget_tokens, active_score, max_items, pin, every_turn, forget)
        self.feeds.append(feed)
        self.manage()
        return feed

    def _consult_sources(self, new: list[Entry]) -> None:
        """Ask the sources, with the newest user message among ``new`` as the query."""
        if not self.feeds:
            return
        asked = [(e["i"], t) for e in new if e["role"] == "user" and isinstance(t := e.get("text"), str)]
        query = asked[-1][1] if asked and asked[-1][1].strip() else None
        # what the query brings in is the asking message's: a rewind to before it takes it out
        with self.caused_by(asked[-1][0]) if query is not None else nullcontext():
            consult(self, self.feeds, query)

    def _note_mentions(self, new: list[Entry]) -> None:
        """Files of the active pool named in ``new`` (what came since the last turn) count as
        used (the least used leave the pool first: ``policy.use_score``): a user message naming
        one, a grep hit or a test failure naming its path. A message naming more than
        ``MENTION_LIMIT`` of them (a listing) says nothing of any."""
        view = self.view
        texts: list[str] = []
        asked: list[tuple[int, str]] = []
        for e in new:
            text = e.get("text")
            if e["role"] == "user" and isinstance(text, str):
                texts.append(text)
                asked.append((e["i"], text))
            elif e["role"] == "tool" and "object" in e:  # a tool's output is its object's content
                o = view.objects.get(e["object"])
                if o is not None and isinstance(o.content, str):
                    texts.append(o.content)
        if asked:  # a file the user names comes back (as the agent will read it anyway; not one gone)
            files = [
                o
                for o in view.metadata_pool()
                if o.kind == "file" and o.state == "inactive" and o.meta.get("path") and not _missing(o)
            ]
            for o in sorted(files, key=lambda o: o.seq):
                # (by the first message naming it: a rewind past that takes it out again)
                at = next((i for i, t in asked if str(o.meta["path"]) in t), None)
                if o.content is not None and at is not None:
                    with self.caused_by(at):
                        self._set(o, "active", "system", "named in the user's message")
        pool = [o for o in view.live() if o.in_tail and o.kind == "file" and o.meta.get("path")]
        if not texts or not pool:
            return
        named: set[str] = set()
        for text in texts:
            hits = [o.id for o in pool if str(o.meta["path"]) in text]
            if len(hits) <= MENTION_LIMIT:
                named.update(hits)
        for o in pool:
            if o.id in named and o.since != view.turn:
                used(o, view.turn, view.policy)
                self.writer.record_state(o, "system", "named in a new message")

    def _retain(self, changes: list[StateChange]) -> int | None:
        """Apply what the retention policy wants now (policy.py): a change that sends the context
        anew from its place waits until a break there pays (``plan_break``); the token budget
        does not wait. Returns where this turn's break stands (None: not managed)."""
        view, policy = self.view, self.view.policy
        due = retention_due(
            view.live,
            view.turn,
            policy,
            gain=view.collapse_gain,
            shown=view.shown_tokens,
            tokens=lambda: view.render().tokens,
            asked=self._asked,
        )
        self._asked = set()
        due = list({c.id: c for c in due}.values())
        keep = policy.keep_thinking_turns
        if keep is None and view.thinking_horizon:
            view.move_thinking_horizon(0)  # reopened without it: every message shows its reasoning
        thinking = view.thinking_due(keep) if view.managed and keep is not None else None
        break_at: int | None
        if not view.managed or policy.cache_break_percent is None:
            # not managed yet: nothing is shown collapsed; no prompt cache to keep: take it all
            if not view.managed:  # the state is the object's; the context shows it from management on
                due = [replace(c, reason=f"{c.reason} (shown so once the session is managed)") for c in due]
            for change in due:
                self._apply(change)
            changes += due
            break_at = 0 if view.managed else None
        else:
            forced, patched = view.chain_breaks()
            placed: list[tuple[int | None, StateChange, int]] = []
            for change in due:
                o = view.objects[change.id]
                gain = view.collapse_gain(o) if o.in_history else view.shown_tokens(o)
                placed.append((view.position_of(o), change, gain))
            candidates = [(pos, gain) for pos, _, gain in placed if pos is not None] + patched
            if thinking is not None:
                candidates.append((thinking[1], thinking[2]))
            allowance = policy.cache_break_percent * view.sent_total // 100 - view.uncached_total
            break_at = plan_break(candidates, forced, view.tokens_after, allowance, policy.break_payback_calls)
            for pos, change, _ in placed:
                if pos is None or pos >= break_at:
                    self._apply(change)
                    changes.append(change)
        if policy.token_budget is not None and view.managed:
            over = fit_budget(view.live, policy.token_budget, tokens=lambda: view.render().tokens, apply=self._apply)
            if over:
                changes += over
                break_at = 0  # what it changed may stand anywhere
        if thinking is not None and break_at is not None and thinking[1] >= break_at:
            view.move_thinking_horizon(thinking[0])  # re-sent from the break anyway, or worth it
        return break_at

    def _move_horizon(self) -> list[StateChange]:
        """Move the history horizon once the conversation shown outgrows ``history_max_tokens``
        (policy.py): its oldest part leaves the context for one note (``horizon_text`` in
        view.py), so that ``history_keep_percent`` of that stays. The context is sent anew from
        its start then, so it moves by half the limit at a time, not a message at a time. Tool
        results behind it collapse (a pinned one shows in the active pool instead). A session
        reopened with ``history_max_tokens=None`` shows its whole conversation again."""
        view = self.view
        if view.policy.history_max_tokens is None:
            if view.horizon:
                view.horizon = 0
                view.reset_render()
            return []
        if not view.managed:
            return []
        keep = horizon_due(view.conversation_tokens(), view.policy)
        to = view.horizon_for(keep) if keep is not None else None
        if to is None:
            return []
        changes = [
            self._set(o, "active" if o.pinned else "inactive", "policy", "behind the history horizon", collapsed=True)
            for o in view.live()
            if o.in_history and o.entry is not None and o.entry < to
        ]
        view.horizon = to
        view.reset_render()
        return changes

    def _apply(self, change: StateChange) -> None:
        self._set(self.view.objects[change.id], change.to, change.actor, change.reason, collapsed=change.collapsed)

    def _set(self, o: ObjInfo, state: str, actor: Actor, reason: str, *, collapsed: bool | None = None) -> StateChange:
        before = o.state
        if state == "active" and before != "active":
            if actor != "policy":
                o.active_at = self.cause_at
            self._reload(o)
            used(o, self.view.turn, self.view.policy)
            if actor in ("agent", "user") and not self._answered:
                self._asked.add(o.id)
        self.view.set_state(o, state=state, collapsed=collapsed)
        self.writer.record_state(o, actor, reason)
        if o.collapsed and o.state != "active":
            self._released.append(o)
        return StateChange(o.id, before, state, actor, reason, collapsed)

    @contextmanager
    def caused_by(self, entry: int) -> Iterator[None]:
        """What is shown inside was brought in by chat entry ``entry`` (an ``on_sync`` taking in
        the entries of a sync one at a time): a rewrite of the history that drops it, and every
        entry after it, takes that out again (``_undo_dropped``). Without it, what a sync brought
        in is stamped with the first entry that sync took in: a history taken in at once (a
        proxy's first request, a resumed recording) kept, after a rewind to one of its turns,
        the files its later turns had read."""
        before = self._cause_from
        self._cause_from = entry
        try:
            yield
        finally:
            self._cause_from = before

    @contextmanager
    def answered(self) -> Iterator[None]:
        """Shows made inside are of what the model saw already: a harness's history taken in at
        once (a proxy's first request, a resumed recording) holds reads the model answered since.
        The active pool keeps for the next call only what the agent asked for and has not seen."""
        self._answered += 1
        try:
            yield
        finally:
            self._answered -= 1

    def _release(self) -> None:
        """Collapsed tool results leave memory: the store has their text (``_reload`` brings one
        back). Only in a managed session (before, the history shows every result in full) and
        once their version is written."""
        if not self.view.managed:
            return
        waiting: list[ObjInfo] = []
        for o in self._released:
            if o.state == "active" or not o.collapsed or o.kind != "toolcall":
                continue
            if own_text(o, self.view.layout) is not None:
                continue  # it shows its own text collapsed: kept (no larger than a stub)
            if o.version is None or o.version[1] is None:
                waiting.append(o)
            else:
                o.content = None
        self._released = waiting

    def _reload(self, o: ObjInfo) -> None:
        """The text of a tool result ``_release`` let go, read back from its version."""
        if o.kind != "toolcall" or o.content is not None or o.version is None:
            return
        o.content = self._content(o)

    def _content(self, o: ObjInfo) -> Any:
        """``o``'s content: in memory, or read back from the version shown (a tool result
        ``_release`` let go; not kept)."""
        if o.content is not None or o.version is None:
            return o.content
        v = self.store.get(o.id, o.version[0], o.version[1])
        if v is None or v.doc is None:
            raise NotFound(f"{o.id} is no longer in the store (evicted?)")
        return v.doc.get("content")

    def _others_wrote(self) -> bool:
        """Whether anything but this session wrote since its last transaction (an eviction, a
        newer version of something it shows): if not, neither can have happened. False while the
        store is out of reach (its writes wait in an outbox): nothing it holds can be read before
        it answers again, so the turn goes on with what the session knows, without asking again
        (and the next turn that reaches it checks). Since is since what the session has seen
        (``SessionWriter.seen``): its own last transaction, or the newest its last checks read,
        whichever is later (its last transaction alone: a resumed session that answered a retry
        from its last frame, having checked and written nothing, made a turn of the next retry).
        The newest transaction is looked at even when the answer is known (nothing seen yet, or a
        write of its own came after another's): the checks that follow read up to it, and the
        turn's write after them knows it has seen it (unknown, that write took the other's
        transaction before it for one not seen, and the next call bringing nothing new made a
        turn of its own instead of answering as before)."""
        self._looked = None
        seen = self.writer.seen
        known = seen is None or self.writer.skipped
        try:
            latest = self.store.latest_tx_id()
        except StoreUnavailable:
            if known:
                return True  # (the checks meet the store out of reach, and say so)
            self._unchecked = True
            return False
        self._looked = latest
        return known or self._unchecked or latest != seen

    def _readable(self) -> int | None:
        """The newest transaction the turn's reads of what others wrote can read, of those the
        store named when the session looked (None: not known). The newest it names may not be
        readable yet (an XTDB node that has not indexed another client's): one the turn could not
        read is one it has not seen, and the next turn looks again."""
        if self._looked is None:
            return None
        try:
            readable = self.store.latest_tx()
        except StoreUnavailable:
            return None
        return None if readable is None else min(readable.id, self._looked)

    def _know_tombstones(self, tombstones: list[Version]) -> None:
        """At open: the evictions already made, which the view reflects (a new session shows none
        of their objects), and the file bytes they erased."""
        self._tombstones = {(t.id, t.tx_id) for t in tombstones}
        self.erased = _erased_shas(tombstones)
        self.erased_texts = _erased_texts(tombstones)
        self.evicted = {oid for t in tombstones if isinstance(oid := (t.doc or {}).get("meta", {}).get("object"), str)}

    def _take_in_evictions(self) -> None:
        """Before a tool shows stored text between two turns (``lines``, ``history``, ``activate``,
        whose text an MCP client gets in its result): an eviction made since the last turn leaves
        the view now, not at the next turn (a server without model calls has none), or the tool
        would hand the evicted text back to the model (and its output would store it again). The
        turn's own look at others' writes still happens (this one takes in tombstones only).

        The tombstones are read again only when the store took a transaction since they were
        last read here: after one eviction, a server without turns (MCP) would otherwise read
        every tombstone of the store at each tool call, for as long as it does not write."""
        if not self._others_wrote():
            return
        try:
            readable = self.store.latest_tx()
        except StoreUnavailable:
            return  # nothing can be read, nor evicted, while it is out of reach
        at = None if readable is None else readable.id if self._looked is None else min(readable.id, self._looked)
        if at is not None and at == self._evictions_at:
            return
        self._evictions_at = None  # until the tombstones were read as of ``at``
        self._between += self._apply_tombstones(read=lambda: setattr(self, "_evictions_at", at))

    def _apply_tombstones(self, read: Callable[[], None] | None = None) -> list[StateChange]:
        """Take in evictions made since the last turn (context/evict.py): the text of an evicted
        object leaves this session's view, so it is never shown or written again. ``read``: called
        once the tombstones were read."""
        changes: list[StateChange] = []
        try:
            tombstones = self.store.find("tombstone")
        except StoreUnavailable:
            # the store is out of reach (writes wait in an outbox): nothing can be evicted from it
            # meanwhile; what was evicted before is taken in when it answers again
            self._unchecked = True
            return changes
        if read is not None:
            read()
        for v in tombstones:
            if v.doc is None or (v.id, v.tx_id) in self._tombstones:
                continue
            self._tombstones.add((v.id, v.tx_id))
            self.erased |= _erased_shas([v])
            self.erased_texts |= _erased_texts([v])
            meta, content = v.doc["meta"], v.doc["content"]
            oid = meta.get("object")
            if isinstance(oid, str):
                self.source_hashes.pop(oid, None)  # the store no longer holds what it wrote of it
                self.evicted.add(oid)
            if meta.get("object_kind") == "chat" and meta.get("session") == self.id:
                self._scrub_page(oid, content)
                changes.append(StateChange(oid, "shown", "erased", "user", "evicted"))
            elif isinstance(oid, str) and oid in self.view.objects:
                obj = self.view.objects[oid]
                changes.append(StateChange(oid, obj.state, "absent", "user", "evicted"))
                self.view.set_state(obj, state="absent")
                self.writer.record_state(obj, "user", "evicted from the store")
                self.view.remove_object(oid)
                if obj.kind != "toolcall":  # the index listed it: its blocks went with it (evict.py)
                    self.view.show_index_anew()
        return changes

    def _scrub_page(self, page: str, tombstone: dict[str, Any]) -> None:
        """Replace an evicted chat page's entries by their scrubbed form (from its tombstone) and
        write that page: erasing first whatever this session wrote of it since the eviction."""
        entries = tombstone.get("entries") or []
        for e in entries:
            i = e["i"]
            if i < len(self.view.entries):
                self.view.entries[i] = e
                self.writer.forget_entry(i)
                self.view.refresh_entry(i)
        if any(e["i"] < self.view.horizon for e in entries):
            self.view.reset_render(entries_changed=True)  # the horizon's note repeats what the user said
        if isinstance(tombstone.get("page"), int):
            self.writer.dirty_pages.add(tombstone["page"])
        self.writer.submit([Evict(page)])

    def _check_newer(self) -> list[StateChange]:
        """Active objects whose store version moved on are marked stale (never reloaded here). An
        active file whose newest version says it is missing (deleted, or moved away unseen) leaves
        the active pool: its text is no longer the file's, and showing it on every call spends
        tokens on a file that does not exist. A pinned one stays (a pin outranks the system: its
        mark says the file is missing). An inactive object marked stale is looked at again, so its
        index line names the newest version, or says no more that a file is missing once it is
        back (it stays inactive: the tracker never loads anything into the context)."""
        changes: list[StateChange] = []
        marked = [o for o in self.view.metadata_pool() if o.state == "inactive" and o.newer]
        for o in [*self.view.live(), *marked]:
            if o.kind == "toolcall" or o.version is None or o.version[1] is None:
                continue  # (a version still waiting to be written is the newest)
            try:
                v = self.store.get(o.id)
            except StoreUnavailable:
                self._unchecked = True  # it went out of reach meanwhile: the next turn checks again
                break
            if v is None or v.doc is None or v.doc["object_hash"] == o.version[2]:
                continue
            if (v.valid_time, v.tx_id) <= (o.version[0], o.version[1]):
                continue
            newer = {
                "valid_time": v.valid_time,
                "tx_id": v.tx_id,
                "object_hash": v.doc["object_hash"],
                "version": v.doc.get("meta", {}).get("version"),
            }
            vm = v.doc.get("meta", {})
            same = o.kind == "file" and not vm.get("missing") and _same_bytes(o.meta, vm)
            if vm.get("missing"):
                newer["missing"] = True  # nothing to load: the model is told the file is gone
            elif same and vm.get("path") != o.meta.get("path"):
                newer["moved_to"] = vm.get("path")  # only moved: the agent needs the path, not the text
            elif same:
                # changed and changed back (git stash and pop, an edit undone): what it shows is
                # the file as it is, nothing to load
                if o.newer is not None:
                    o.newer = None
                    self.manage()  # (a managed session is already: a retry of this turn is this turn)
                    self.view.refresh_object(o)
                    self.writer.record_state(o, "system", "the file holds again the version shown")
                    changes.append(
                        StateChange(o.id, o.state, o.state, "system", "the file holds again the version shown")
                    )
                continue
            if newer != o.newer:
                o.newer = newer
                self.manage()
                if _missing(o) and o.state == "active" and not o.pinned:
                    changes.append(self._set(o, "inactive", "system", GONE_REASON))
                    continue
                self.view.refresh_object(o)
                self.writer.record_state(o, "system", "a newer version exists")
                changes.append(StateChange(o.id, o.state, o.state, "system", "a newer version exists"))
        return changes

    # --- agent / user operations ---------------------------------------------------------------

    def _latest(self, obj_id: str) -> Version:
        if obj_id.startswith(LOCKED_PREFIXES):
            if not obj_id.startswith((f"chat:{self.id}:", f"session:{self.id}")):
                raise LockedObject(
                    f"{obj_id} is context_os's own record (another session's chat, a frame, a state…), not an "
                    "object to load: recall finds what a chat said (as recall:… objects to activate)"
                )
            raise LockedObject(f"{obj_id} is locked: it is always part of the context")
        v = self.store.get(obj_id)
        if v is None or v.doc is None:
            raise NotFound(f"no object {obj_id!r}: {OBJECT_IDS_HINT}")
        return v

    def resolve(self, ref: str) -> str:
        """The object id ``ref`` names: an id, or a tool result's short ref (``r12``: the result in
        chat entry 12, as a collapsed stub names it)."""
        m = _SHORT_REF.fullmatch(ref)
        if m is not None:
            n = int(m.group(1))
            entry = self.view.entries[n] if n < len(self.view.entries) else None
            if entry is None or entry["role"] != "tool" or not entry.get("object"):
                raise NotFound(f"no tool result {ref!r} in this session")
            return str(entry["object"])
        return ref

    def _known(self, obj_id: str) -> ObjInfo:
        obj = self.view.objects.get(obj_id)
        if obj is not None:
            return obj
        return self._adopt(self._latest(obj_id))

    def _adopt(self, v: Version) -> ObjInfo:
        """Bring a stored object into this session's metadata pool (inactive)."""
        assert v.doc is not None
        self._seq += 1
        obj = ObjInfo(
            id=v.id,
            kind=v.doc["kind"],
            meta=v.doc.get("meta", {}),
            content=v.doc.get("content"),
            seq=self._seq,
            version=(v.valid_time, v.tx_id, v.doc["object_hash"]),
            joined_at=self.cause_at,
        )
        self.view.add_object(obj)
        self.writer.record_state(obj, "system", "added to the session")
        return obj

    def manage(self) -> None:
        """Manage the session from the next turn on, whatever its size (``manage_from_tokens``):
        what tools call whose results do not carry the text they read (it shows in a block)."""
        if not self.view.managed:
            self._manage_next = True

    def show(
        self,
        obj_id: str,
        *,
        version: Version | None = None,
        state: str = "active",
        actor: Actor = "agent",
        reason: str = "show",
        focus: list[list[int]] | None = None,
        changed: bool = True,
    ) -> dict[str, Any]:
        """Put a version of a stored object (default: the latest) in this session, active or
        inactive. What file tools call after indexing, reading or editing a file; showing an
        active object again counts as using it (``file_idle_turns``). ``focus``: the line ranges
        of its text the tool looked at, most recent first (``[]`` clears them, None keeps them).
        ``changed``: whether a new version changes text the one shown before had (the default);
        False when it only adds to it (a replay that learns more lines of a file). A session that
        still passes through unchanged is managed from the next turn on after a change (the
        harness's history shows a stale copy then), not after an addition."""
        if state not in ("active", "inactive"):
            raise StateError(f"state must be active or inactive, not {state!r}")
        v = version or self._latest(obj_id)
        assert v.doc is not None
        obj = self.view.objects.get(obj_id)
        status = "added" if obj is None else "unchanged"
        if obj is None:
            obj = self._adopt(v)
        elif obj.version is None or obj.version[2] != v.doc["object_hash"]:
            obj.meta, obj.content = v.doc.get("meta", {}), v.doc.get("content")
            obj.version, obj.newer = (v.valid_time, v.tx_id, v.doc["object_hash"]), None
            status = "updated"
            self._manage_next = self._manage_next or changed
        changed = status == "updated"
        if focus is not None and (focus or None) != obj.focus:
            obj.focus = [[int(a), int(b)] for a, b in focus] or None
            changed = True
        if obj.state != state:
            self._set(obj, state, actor, reason)
            status = "activated" if state == "active" else "deactivated"
        else:
            if state == "active" and obj.since != self.view.turn:
                used(obj, self.view.turn, self.view.policy)  # used again: the idle clock restarts
                changed = True
            if changed:
                self.view.refresh_object(obj)
                self.writer.record_state(obj, actor, reason)
        if obj.kind == "file":
            self._follow_reading_list(obj, read=reason == "read")
        self.writer.flush()
        return {"id": obj_id, "status": status, "version": obj.meta.get("version"), "tokens": self._tokens_said(obj)}

    def _tokens_said(self, obj: ObjInfo) -> int:
        """The tokens an answer to ``show``/``activate`` says ``obj`` takes: an active one's text as
        the active pool shows it (a window of a long file, an output's text without its images), an
        inactive one's as its index line says."""
        if obj.state == "active":
            return self.view.shown_tokens(obj)
        return self.view.index_tokens(obj)

    def _follow_reading_list(self, obj: ObjInfo, *, read: bool) -> None:
        """A file read joins the reading list; a version of one the agent made (an edit or a
        write, as the version says), shown for the first time, brings back the next
        ``next_on_reading_list`` files read after it that it has not changed, if they left the
        active pool."""
        if read and obj.id not in self._reading:
            self._reading[obj.id] = None
        made = _made(obj)
        if made is None or obj.id not in self._reading or self._reading[obj.id] == made:
            return
        self._reading[obj.id] = made
        ids = list(self._reading)
        after = [i for i in ids[ids.index(obj.id) + 1 :] if self._reading[i] is None]
        for oid in after[: self.view.policy.next_on_reading_list]:
            o = self.view.objects.get(oid)
            if o is not None and o.state == "inactive" and o.content is not None and not _missing(o):
                self._set(o, "active", "system", f"next on the reading list after {obj.id}")

    def activate(self, obj_id: str, *, actor: Actor = "agent", reason: str = "activate") -> dict[str, Any]:
        """Load an object's content into context (a collapsed tool result comes back at the end;
        an object known to have a newer version is loaded at it, an active one refreshed; a file
        gone from disk loads nothing, and the answer says so: ``_activate_missing``)."""
        self._take_in_evictions()  # a server without turns (MCP) shows what it activates
        obj_id = self.resolve(obj_id)
        obj = self._known(obj_id)
        if obj.kind == "file" and (_missing(obj) or obj.meta.get("missing")):
            return self._activate_missing(obj, actor, reason)
        if obj.state == "active" and obj.newer is not None:
            result = self.show(obj_id, actor=actor, reason="refresh to the newer version")
            return result | {"status": "refreshed"}
        if obj.state == "active":
            return {"id": obj_id, "status": "already active"}
        if obj.newer is not None:  # the index line says a newer version exists: that one is loaded
            self.show(obj_id, actor=actor, reason=reason)
            obj = self.view.objects[obj_id]
        else:
            self._set(obj, "active", actor, reason)
        self.writer.flush()
        out: dict[str, Any] = {"id": obj_id, "status": "activated", "tokens": self._tokens_said(obj)}
        pool = self.view.policy.active_pool_tokens
        # what it takes in the pool: its text as shown (a window of a long file; an output's text,
        # not its images, which its token count holds)
        if pool is not None and obj.in_tail and not obj.pinned and self.view.shown_tokens(obj) > pool:
            out["note"] = (
                f"larger than the active pool ({pool:,} tokens): shown in the next call, then collapsed again unless"
                f' pinned; lines(id="{obj_id}", start, end) shows any part'
            )
        elif obj.in_tail and self._has_images(obj):
            # the active pool is text: an output's images (counted in extra_chars) stay out of it
            out["note"] = "only its text is shown in the active pool, not its images: call the tool again to see them"
        return out

    def _activate_missing(self, obj: ObjInfo, actor: Actor, reason: str) -> dict[str, Any]:
        """``activate`` of a file the session knows as missing (the version it shows, or a newer
        one, says so): the store's newest version decides. Still missing: nothing is loaded (the
        last text known is not the file, and a missing version has none) and the answer says so,
        and where that last text is; back since: that version is shown, as a read would."""
        latest = self._latest(obj.id)
        assert latest.doc is not None
        meta = latest.doc.get("meta", {})
        if not meta.get("missing"):
            was = obj.state
            shown = self.show(obj.id, version=latest, actor=actor, reason=reason)
            return shown | {"status": "refreshed" if was == "active" else "activated"}
        why = meta.get("missing_reason") or "deleted or moved away"
        note = f"the file is missing ({why}; version {meta.get('version', '?')}): nothing to load"
        if _missing(obj):  # the text shown before it went missing is kept
            note += f"; lines(id) shows its text of version {obj.meta.get('version', '?')}, the last one known"
            if obj.state == "active":  # (pinned)
                note += ", which the context shows"
        return {
            "id": obj.id,
            "status": "already active" if obj.state == "active" else "missing",
            "version": obj.meta.get("version"),
            "note": note,
        }

    def _has_images(self, obj: ObjInfo) -> bool:
        """Whether a tool result came with images (its adapter counted them: ``extra_chars``)."""
        entries = self.view.entries
        return obj.entry is not None and obj.entry < len(entries) and bool(entries[obj.entry].get("extra_chars"))

    def deactivate(self, obj_id: str, *, actor: Actor = "agent", reason: str = "deactivate") -> dict[str, Any]:
        """Collapse an object to its metadata. Locked objects refuse."""
        obj_id = self.resolve(obj_id)
        if obj_id.startswith(LOCKED_PREFIXES):
            raise LockedObject(f"{obj_id} is locked: the chat and the session cannot be deactivated")
        obj = self._known(obj_id)
        if obj.state != "active":
            return {"id": obj_id, "status": "already inactive"}
        self._set(obj, "inactive", actor, reason, collapsed=obj.kind == "toolcall")
        self.writer.flush()
        return {"id": obj_id, "status": "deactivated", "tokens_freed": obj.tokens}

    def drop(self, obj_id: str, *, actor: Actor = "system", reason: str = "drop") -> dict[str, Any]:
        """Take an object out of the session altogether (absent: not even a line in the metadata
        pool); the store keeps it, ``show`` brings it back. Locked objects refuse."""
        obj_id = self.resolve(obj_id)
        if obj_id.startswith(LOCKED_PREFIXES):
            raise LockedObject(f"{obj_id} is locked: the chat and the session cannot be dropped")
        obj = self._known(obj_id)
        self.view.set_state(obj, state="absent")
        self.writer.record_state(obj, actor, reason)
        self.view.remove_object(obj_id)
        self.writer.flush()
        return {"id": obj_id, "status": "dropped"}

    def mark_file_text(self, obj_id: str, keys: Iterable[str] = ()) -> None:
        """Mark a tool result whose call showed a file's text (a read's result; a write's
        arguments, under ``keys``: ``""`` for arguments that are not an object) once a file object
        shows that file. From layout 11, collapsed, it shows its stub and those arguments are
        elided whatever their length: the file may change, its object is kept current, and the
        old text never stays in the history. Marked when the result arrives (the mark changes
        nothing it shows expanded), so no later turn changes an older message for it. Once only:
        a result marked already, or that is not a tool result here, is left as it is."""
        o = self.view.objects.get(obj_id)
        if o is None or o.kind != "toolcall" or o.file_text is not None:
            return
        o.file_text = list(dict.fromkeys(keys))
        self.view.refresh_object(o)
        self.writer.record_state(o, "system", "its call showed a file's text", change=False)

    def pin(self, obj_id: str, *, actor: Actor = "agent", pinned: bool = True) -> dict[str, Any]:
        """Pin (or unpin) an object: pinned objects are never collapsed by policy or budget."""
        obj_id = self.resolve(obj_id)
        obj = self._known(obj_id)
        if obj.pinned == pinned:
            return {"id": obj_id, "status": "already pinned" if pinned else "not pinned"}
        self.view.set_state(obj, pinned=pinned)
        self.writer.record_state(obj, actor, "pin" if pinned else "unpin")
        self.writer.flush()
        return {"id": obj_id, "status": "pinned" if pinned else "unpinned"}

    def unpin(self, obj_id: str, *, actor: Actor = "agent") -> dict[str, Any]:
        return self.pin(obj_id, actor=actor, pinned=False)

    def history(self, start: int | None = None, end: int | None = None) -> str:
        """Chat entries ``[start, end)`` as text (the ``history`` tool; ``SessionView.history_text``):
        by default the ones just before the history horizon."""
        self._take_in_evictions()
        return self.view.history_text(start, end)

    def lines(self, obj_id: str, start: int = 1, end: int | None = None, column: int = 1) -> str:
        """Lines ``start`` to ``end`` (1-based, both included; by default ``LINES_AT_ONCE`` lines) of
        an object's stored text, as the ``lines`` tool shows them: what a clipped tool result
        leaves out, or any part of a file version. At most the policy's ``result_view_chars`` at a
        time (the rest is named, to ask for next). ``column``: the character of line ``start`` to
        begin at (1-based), to page through a line longer than that (minified code, JSON on one
        line). Changes no state.

        An id is a dynamic ref: a file's lines are those of its latest version, also when the
        session still shows an older one (the header then names the version, so the model knows
        the lines are newer than its block)."""
        ref = obj_id
        self._take_in_evictions()
        obj_id = self.resolve(obj_id)
        if obj_id.startswith(LOCKED_PREFIXES):
            raise InputError(f"{ref} is context_os's own record, not text: {HISTORY_HINT}")
        obj = self.view.objects.get(obj_id)
        newer, note, omitted = "", "", None
        if obj is None or obj_id.startswith("file:"):
            latest = self._latest(obj_id)
            doc = latest.doc or {}
            text = doc.get("content")
            omitted = (doc.get("meta") or {}).get("content_omitted")
            # (a file holding the bytes shown at the path shown, its stat corrected since or changed
            # and changed back, is what the context shows: as the stale check judges it)
            if (
                obj is not None
                and obj.version is not None
                and obj.version[2] != doc.get("object_hash")
                and not (obj.kind == "file" and shows_latest_file(obj.meta, doc.get("meta") or {}))
            ):
                version = (doc.get("meta") or {}).get("version", "?")
                newer = f", version {version}"
                note = " (the context shows an older version: activate(id) loads this one)"
                if text is None:
                    why = (doc.get("meta") or {}).get("content_omitted", "no content")
                    text = self._content(obj)
                    if not isinstance(text, str):
                        raise InputError(f"{ref} has no text to show by lines: version {version} has none ({why})")
                    # nothing newer to show (the file is missing, or too large now): the lines of
                    # the version the context shows, which no other tool reaches any more
                    newer = f", version {obj.meta.get('version', '?')}"
                    note = f" (the version the context shows; version {version}, the latest, has no text: {why})"
        else:
            text = self._content(obj)
        if not isinstance(text, str):  # (why, if the version says: not read yet, binary, a secret…)
            raise InputError(f"{ref} has no text to show by lines" + (f": {omitted}" if omitted else ""))
        if start < 1 or (end is not None and end < start):
            got = f"start {start}" + ("" if end is None else f", end {end}")
            raise InputError(f"lines: start must be at least 1 and end at least start, got {got}")
        if column < 1:
            raise InputError(f"lines: column (the character of line start to begin at) must be 1 or more, got {column}")
        if text == "":  # no line at all (it said "lines 1-1 of 1")
            if start > 1:
                raise InputError(f"{ref} is empty: it has no lines; start is {start:,}")
            return f"[context_os: {ref}{newer}, empty: it has no lines{note}]"
        rows = text.split("\n")
        if len(rows) > 1 and rows[-1] == "":
            rows.pop()  # a text that ends with a line break has no line after it
        last = end if end is not None else start + LINES_AT_ONCE - 1
        if start > len(rows):
            raise InputError(f"{ref} has {len(rows):,} lines; start is {start:,}")
        if column > 1 and column > len(rows[start - 1]):
            raise InputError(f"line {start:,} of {ref} has {len(rows[start - 1]):,} characters; column is {column:,}")
        last = min(last, len(rows))
        limit = self.view.policy.result_view_chars
        out: list[str] = []
        used_chars, shown = 0, start - 1
        for row in rows[start - 1 : last]:
            skip = column - 1 if shown == start - 1 else 0  # (the first line from ``column``)
            part = row[skip:]
            if limit is not None and out and used_chars + len(part) + 1 > limit:
                break
            out.append(part if limit is None else part[:limit])
            if limit is not None and len(part) > limit:  # more of the line than a whole answer holds
                out.append(
                    f"[context_os: line {shown + 1:,} is cut: characters {skip + 1:,}-{skip + limit:,} of its"
                    f' {len(row):,} shown; lines(id="{ref}", start={shown + 1}, end={shown + 1},'
                    f" column={skip + limit + 1}) shows what follows]"
                )
            used_chars += len(part) + 1
            shown += 1
        where = "" if column == 1 else f" (line {start:,} from character {column:,})"
        head = f"[context_os: {ref}{newer}, lines {start:,}-{shown:,} of {len(rows):,}{where}{note}]"
        rest = (
            [f"[context_os: lines {shown + 1:,}-{last:,} not shown: at most {limit:,} characters at a time]"]
            if shown < last
            else []
        )
        return "\n".join([head, *out, *rest])

    def state_changes(self, obj_id: str) -> list[Version]:
        """Every recorded state change of an object in this session, oldest first."""
        return self.store.history(state_id(self.id, obj_id), with_docs=True)


def close_sessions(sessions: Iterable[Session], wait: float, who: str = "") -> list[str]:
    """Close every one of ``sessions`` at once, each in a thread of its own, and wait at most
    ``wait`` seconds for them all together: a store that hangs holds each close up to its timeout
    (30 s on a node by default), and one after the other a server with ten sessions took five
    minutes to stop. The ids of those not closed (a warning says so, ``who`` first: their leases
    expire, or are taken back by a writer of this host once this process ends)."""
    failed: dict[str, str] = {}
    threads: dict[str, threading.Thread] = {}

    def close(session: Session) -> None:
        try:
            session.close()
        except Exception as e:  # noqa: BLE001 - the store may be down: the lease then expires
            failed[session.id] = str(e)

    for session in sessions:
        threads[session.id] = t = threading.Thread(target=close, args=(session,), name=f"ctxos-close-{session.id}")
        t.daemon = True
        t.start()
    deadline = time.monotonic() + wait
    for t in threads.values():
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [sid for sid, t in threads.items() if t.is_alive()]
    # (a snapshot: a hung close may yet fail, from its thread, while this reads)
    failed_now = {sid: why for sid, why in list(failed.items()) if sid not in hung}
    for sid, why in failed_now.items():
        log.warning("%sclosing session %s: %s", who, sid, why)
    if hung:
        log.warning(
            "%s%d session(s) not closed within %g s, the store not answering: %s (their leases expire)",
            who,
            len(hung),
            wait,
            ", ".join(hung),
        )
    return [*failed_now, *hung]


def shows_latest_file(shown: Mapping[str, Any], latest: Mapping[str, Any]) -> bool:
    """Whether a session showing the file version with meta ``shown`` shows the file as it is,
    the store's latest version (meta ``latest``) being another: the same bytes at the same path
    (changed and changed back, or only its stat corrected: a ``touch``). Such a view is not stale."""
    return not latest.get("missing") and latest.get("path") == shown.get("path") and _same_bytes(shown, latest)


def _same_bytes(shown: Mapping[str, Any], latest: Mapping[str, Any]) -> bool:
    """Whether two versions of a file hold the same bytes: the same hash, or (metadata-only, not
    hashed) the same size and mtime."""
    if shown.get("sha") or latest.get("sha"):
        return bool(shown.get("sha") == latest.get("sha"))
    return shown.get("indexed") == latest.get("indexed") == "metadata" and (shown.get("size"), shown.get("mtime")) == (
        latest.get("size"),
        latest.get("mtime"),
    )
