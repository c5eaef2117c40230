"""The store contract: a bitemporal document store with XTDB 1.x semantics.

Documents are plain JSON-able dicts with a string ``id``, a ``kind`` and a ``meta`` mapping.
Every write happens in a transaction of operations (put, delete, match, evict); every read can
be asked "as of" a valid time and a transaction. Times are UTC epoch **milliseconds**
everywhere (XTDB's own precision).

Semantics (the conformance suite, tests/store/test_store_contract.py, pins each one against a real
XTDB node):

* ``Put(doc, valid_from, valid_to)``: without ``valid_to`` the document holds from
  ``valid_from`` (default: the tx time) until the next later version in valid time; with
  ``valid_to`` it replaces whatever held in ``[valid_from, valid_to)`` and what held at
  ``valid_to`` resumes there.
* ``Delete(id, valid_from, valid_to)``: the same, with "no document".
* ``Match(id, expected, valid_time)``: the transaction commits only if the document in force
  (at ``valid_time``, default the tx time) equals ``expected`` (``None``: no document).
* ``Evict(id)``: erases every version of the document, in every time. A put or match of the
  document after its evict in the same transaction is refused (``check_after_evict``).
* ``get(id, valid_time, tx_id)``: the version in force at that valid time as known at that tx.
* ``history(id, ...)``: the versions in valid-time order (``asc``/``desc``), latest correction
  of each valid time only, within the given bounds; descending history starts at the given
  valid time (default: now), as XTDB's does.
* ``find(kind, where, valid_time, tx_id)``: documents in force whose ``kind`` and ``meta``
  attributes equal the given values.
* Reading as of a ``tx_id`` past the newest transaction (``get``, ``find``) is an error
  (``StoreError``), not "now"; ``history``'s tx bounds are only bounds.
* Transaction ids are ints that increase with each transaction (XTDB's start at 0). A negative
  id is provisional: a write accepted while the backend was out of reach (``Tx.pending``).

This module must stay free of any backend detail; backends live beside it.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..errors import StoreError
from ..times import MAX_MS, MIN_MS, now_ms

if TYPE_CHECKING:
    from .text_index import SearchArgs

__all__ = [
    "Delete",
    "DocMemo",
    "Evict",
    "Match",
    "Op",
    "Put",
    "Store",
    "TextHit",
    "TextPart",
    "Tx",
    "Version",
    "check_after_evict",
    "check_time",
    "next_valid_time",
    "now_ms",
]


MAX_CLOCK_WAIT_MS = 1000
"""The longest ``next_valid_time`` waits for the clock to reach the time it must use."""


def next_valid_time(after: int | None = None, at: int | None = None) -> int:
    """The valid time for a version meant to hold from ``at`` (default: now) that must come after
    a version valid from ``after``: ``max(at, after + 1)``.

    A store reads "as of now" by default, and ``history`` stops at now (XTDB does), so a version
    whose valid time is still in the future is invisible to a read made right after the write:
    a file re-created within the millisecond of its deletion vanished from its own history. So
    when that time is ahead of the clock (two versions of one document within a millisecond),
    this waits until the clock reaches it (at most ``MAX_CLOCK_WAIT_MS``: further ahead, an
    earlier version came from a clock that runs ahead of ours, and waiting would not help).
    Every writer that means "now" takes its valid times from here. An ``at`` ahead of the clock
    (a transcript's timestamps from a clock that ran ahead: a replayed session's file versions)
    is taken as now: a version valid from later was missing from every read "as of now" (its
    file "no object" to ``ctxos objects inspect`` though frames showed it, before 2026-12-02).
    """
    now = now_ms()
    vt = now if at is None else min(at, now)
    if after is not None and vt <= after:
        vt = after + 1
    lag = vt - now_ms()
    if 0 < lag <= MAX_CLOCK_WAIT_MS:
        while (lag := vt - now_ms()) > 0:
            time.sleep(lag / 1000)
    return vt


@dataclass(frozen=True)
class Put:
    """Write ``doc`` for ``[valid_from, valid_to)`` (both optional)."""

    doc: Mapping[str, Any]
    valid_from: int | None = None
    valid_to: int | None = None
    json: bytes | None = field(default=None, compare=False, repr=False)
    """``doc`` as ``json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":"))``
    writes it, UTF-8, when the caller has it already (a session encodes each of its documents to
    hash it: ``DocBase.encode``). A store that keeps JSON may write it rather than encode ``doc``
    again; it must never say anything else than ``doc`` (the SQLite store checks it in tests)."""


@dataclass(frozen=True)
class Delete:
    """End the document's existence for ``[valid_from, valid_to)`` (both optional)."""

    id: str
    valid_from: int | None = None
    valid_to: int | None = None


@dataclass(frozen=True)
class Match:
    """Precondition: the document in force at ``valid_time`` equals ``expected`` (None: absent)."""

    id: str
    expected: Mapping[str, Any] | None
    valid_time: int | None = None


@dataclass(frozen=True)
class Evict:
    """Erase every version of the document (for leaked secrets)."""

    id: str


Op = Put | Delete | Match | Evict


def check_time(name: str, value: int | None) -> None:
    """A valid time must be epoch ms within the years 0001-9999 UTC (times.py), as on XTDB, whose
    client refuses any other (SQLite would store or read it as any other integer); every store
    and the outbox check it (``StoreError``) before they take a write or a read."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise StoreError(f"{name} must be epoch milliseconds (int), got {value!r}")
    if value is not None and not MIN_MS <= value <= MAX_MS:
        raise StoreError(f"{name} {value} is outside the years 0001-9999 UTC (epoch ms {MIN_MS} to {MAX_MS})")


def check_find(kind: str | None, where: Mapping[str, Any] | None, keys: Sequence[str] = ()) -> dict[str, Any]:
    """``where`` as a dict once a ``find``'s (or ``find_meta``'s) arguments are checked: ``kind``
    a string or None, every meta key named a string (``StoreError`` else)."""
    if kind is not None and not isinstance(kind, str):
        raise StoreError(f"kind must be a string, got {kind!r}")
    where = dict(where or {})
    if not all(isinstance(k, str) for k in [*where, *keys]):
        raise StoreError(f"find: meta keys are strings, got {[*where, *keys]!r}")
    return where


def check_after_evict(ops: Sequence[Op]) -> None:
    """Refuse a transaction that puts, deletes or matches a document after evicting it
    (``StoreError``).

    XTDB 1.x applies none as written: the ops of a transaction read the index as it was before
    the transaction's evictions, so such a match compares with the evicted document, the put is
    erased with it when the transaction commits (its document evicted, its version left in the
    history without one), and a delete over a range of valid time restores at the range's end
    the evicted version it saw there (the history then holds XTDB's placeholder of an evicted
    document as a version). No store can keep the contract for them, so every backend refuses
    them before writing anything. Put, delete and match before the evict, or in the next
    transaction."""
    evicted: set[str] = set()
    for op in ops:
        if isinstance(op, Evict):
            evicted.add(op.id)
        elif evicted and isinstance(op, Put | Delete | Match):
            op_id = (
                op.id if isinstance(op, Delete | Match) else op.doc.get("id") if isinstance(op.doc, Mapping) else None
            )
            if op_id in evicted:
                what = {Put: "puts", Delete: "deletes", Match: "matches"}[type(op)]
                raise StoreError(
                    f"a transaction that evicts {op_id!r} {what} it afterwards: XTDB would not apply that;"
                    " write it in the next transaction"
                )


@dataclass(frozen=True)
class Tx:
    """A submitted transaction: its id, its time, and whether it committed."""

    id: int
    time: int
    committed: bool = True
    pending: bool = False
    """Accepted but not yet in the store (an outbox holds it while the backend is out of reach):
    ``id`` is then a provisional negative id, which this store's reads accept as ``tx_id`` once
    the write has landed, and ``time`` is the accept time."""
    left_in_files: bool = False
    """An ``Evict`` committed, but the store could not yet erase the evicted bytes from its own
    files (SQLite: another process kept reading an older snapshot of the file). Reads no longer
    return them; the file is rid of them once that reader is done and the write-ahead log is
    folded back (the next eviction, or the last process closing the store). SQLite also says so
    when the file could not be rebuilt without them at all (another process held the write lock
    past the busy timeout, the disk had no room for the copy): the next eviction rebuilds it."""


@dataclass(frozen=True)
class Version:
    """One version of one document as the store knows it."""

    id: str
    valid_time: int
    """Start of the version's validity (epoch ms)."""
    tx_id: int
    tx_time: int
    doc: dict[str, Any] | None = field(default=None, compare=False)
    """The document; ``None`` for a deletion, or when fetched without docs."""
    deleted: bool = False
    """True when this version records that the document does not exist."""

    @property
    def object_hash(self) -> str | None:
        return None if self.doc is None else self.doc.get("object_hash")

    @property
    def content_hash(self) -> str | None:
        return None if self.doc is None else self.doc.get("content_hash")


@dataclass(frozen=True)
class TextHit:
    """One keyword-search hit: a part of one stored version (``Store.text_search``)."""

    id: str
    """The object's id."""
    kind: str
    part: str
    """Where in the document the text stands: ``""`` for the whole content (a file version, a tool
    output, a memory), ``"e<i>"`` for chat entry ``i`` (a chat page holds many messages)."""
    valid_time: int
    tx_id: int
    object_hash: str
    """With ``valid_time`` and ``tx_id``: the static ref of the version the text comes from."""
    session: str | None
    text: str
    """The indexed text of the part (previews, MMR, embedding)."""
    score: float
    """BM25 relevance, higher is better (comparable within one query); vector and fused hits
    (sources/) carry their own score here."""

    @property
    def ref(self) -> dict[str, Any]:
        """The static ref of the version the text comes from."""
        return {"id": self.id, "valid_time": self.valid_time, "tx_id": self.tx_id, "object_hash": self.object_hash}


@dataclass(frozen=True)
class TextPart:
    """One indexed part, in index order (``Store.text_parts``): what an embedder catches up on."""

    seq: int
    """Increasing with every part indexed: a cursor to resume from."""
    id: str
    kind: str
    part: str
    object_hash: str
    text: str


DocMemo = dict[Any, dict[str, Any]]
"""Parsed documents a caller shares across many ``find`` calls on one store (``find(docs=...)``),
keyed as the store likes: a document read before is returned as the same object, not parsed again.
For readers that go over the same versions many times (verifying every frame of a session). The
documents are shared: whoever reads through a memo must not change them."""


class Store(ABC):
    """A bitemporal document store. Small on purpose: every backend implements exactly this."""

    url: str
    """Where the store lives, as a ``--store`` URL, with any password masked (``user:***@``): safe
    to print or log."""
    created: bool = False
    """True if opening this store created it (a new, empty SQLite file)."""
    read_only: bool = False
    """True if every write raises (an SQLite store opened with ``?mode=ro``): what is derived from
    it (recall's vector sidecar) is not written either."""

    @abstractmethod
    def submit(self, ops: Sequence[Op]) -> Tx:
        """Run ``ops`` as one atomic transaction and return it once it is written and readable
        through this store (through others as well on the embedded store; on XTDB, once the node
        has indexed it: ``sync``).

        A failed ``Match`` leaves the store unchanged and returns a ``Tx`` with
        ``committed=False`` (XTDB records such transactions too).
        """

    @abstractmethod
    def get(self, id: str, valid_time: int | None = None, tx_id: int | None = None) -> Version | None:
        """The version of ``id`` in force at ``valid_time`` (default now) as of ``tx_id``."""

    def history(
        self,
        id: str,
        order: Literal["asc", "desc"] = "asc",
        *,
        with_docs: bool = True,
        start_valid_time: int | None = None,
        end_valid_time: int | None = None,
        start_tx_id: int | None = None,
        end_tx_id: int | None = None,
        with_corrections: bool = False,
    ) -> list[Version]:
        """Versions of ``id`` in valid-time order; starts inclusive, ends exclusive. A valid time
        written more than once shows its latest correction only (the version in force now);
        ``with_corrections=True``: every version, the corrected ones too, those of one valid time
        in transaction order in the history's direction (``asc``: oldest first), as XTDB's
        ``with-corrections``: what a check of every stored version reads."""
        if order not in ("asc", "desc"):
            raise StoreError(f"history order must be 'asc' or 'desc', got {order!r}")
        return self._history(
            id,
            order,
            with_docs=with_docs,
            start_valid_time=start_valid_time,
            end_valid_time=end_valid_time,
            start_tx_id=start_tx_id,
            end_tx_id=end_tx_id,
            with_corrections=with_corrections,
        )

    @abstractmethod
    def _history(
        self,
        id: str,
        order: Literal["asc", "desc"],
        *,
        with_docs: bool,
        start_valid_time: int | None,
        end_valid_time: int | None,
        start_tx_id: int | None,
        end_tx_id: int | None,
        with_corrections: bool,
    ) -> list[Version]:
        """``history`` once its arguments are checked: what each backend implements."""

    @abstractmethod
    def find(
        self,
        kind: str | None = None,
        where: Mapping[str, Any] | None = None,
        *,
        valid_time: int | None = None,
        tx_id: int | None = None,
        docs: DocMemo | None = None,
    ) -> list[Version]:
        """Documents in force whose ``kind`` and ``meta`` attributes equal the given values.
        ``docs``: a memo of parsed documents to read through (``DocMemo``); a backend may ignore
        it, and the answer is the same either way."""

    def find_meta(
        self,
        kind: str | None = None,
        where: Mapping[str, Any] | None = None,
        keys: Sequence[str] = (),
        *,
        valid_time: int | None = None,
        tx_id: int | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        """``(id, {key: meta[key]})`` of each document ``find(kind, where)`` gives, in its order,
        with only those of ``keys`` that its meta has: for a caller that needs a few meta fields of
        many documents, not the documents (a backend may read less than whole documents for it:
        the XTDB store pulls those attributes alone, not the contents)."""
        check_find(kind, where, keys)
        out: list[tuple[str, dict[str, Any]]] = []
        for v in self.find(kind, where, valid_time=valid_time, tx_id=tx_id):
            meta = v.doc.get("meta") if v.doc is not None else None
            out.append((v.id, {k: meta[k] for k in keys if k in meta} if isinstance(meta, Mapping) else {}))
        return out

    def ids(self, *, valid_time: int | None = None, tx_id: int | None = None) -> list[str]:
        """The ids of the documents ``find()`` lists (in force at ``valid_time`` as of
        ``tx_id``), in its order, without reading the documents: one whose stored version no
        longer parses is listed too, so a caller that reads each on its own (``ctxos verify``)
        can name it and still read every other. This default lists them by ``find_meta``; a
        backend whose ``find_meta`` reads whole documents lists them where they are stored."""
        return [id for id, _ in self.find_meta(valid_time=valid_time, tx_id=tx_id)]

    @abstractmethod
    def latest_tx(self) -> Tx | None:
        """The newest committed-or-not transaction, or None for an empty store."""

    def latest_tx_id(self) -> int | None:
        """The id of the newest transaction the backend took, readable yet or not (None: none):
        what a session compares with its own last write to learn whether anyone else wrote,
        without waiting for its own writes to become readable. Default: ``latest_tx``'s."""
        tx = self.latest_tx()
        return None if tx is None else tx.id

    def sync(self) -> None:
        """Return once every write this store acknowledged is readable by every reader of the
        backend, not only through this store (XTDB: indexed by the node; ``close`` does it too).
        The embedded store has nothing to wait for."""
        return None

    def count_kinds(self, *, valid_time: int | None = None, tx_id: int | None = None) -> dict[str | None, int]:
        """How many documents are in force, by ``kind`` (None: a document whose kind is not a
        string, another client's), as ``find()`` would list them: for ``ctxos status``. This
        default lists them all; a backend counts them where they are stored."""
        counts: dict[str | None, int] = {}
        for v in self.find(valid_time=valid_time, tx_id=tx_id):
            kind = v.doc.get("kind") if v.doc else None
            key = kind if isinstance(kind, str) else None
            counts[key] = counts.get(key, 0) + 1
        return counts

    def stats(self) -> dict[str, Any]:
        """Backend-specific sizes and counts for ``ctxos status``."""
        return {}

    def scrub(self) -> bool:
        """Erase from the backend's files what evictions left in them (an SQLite store rebuilds
        its file after every eviction; one cut short by Ctrl-C or a crash leaves that to this):
        True if nothing evicted is left in them. A backend that erases as it evicts has nothing
        to do."""
        return True

    def check(self) -> list[str] | None:
        """Problems the backend's own integrity check finds (empty: none), for ``ctxos verify``;
        None if the backend has no such check that can be run from here."""
        return None

    # Keyword recall. A backend with an index implements ``_text_search`` and ``_text_parts`` and
    # overrides the other two; these defaults are what a store without one can still answer (a
    # scan), so every store can be searched.

    def text_search(
        self,
        query: str,
        *,
        k: int = 20,
        kinds: Sequence[str] | None = None,
        session: str | None = None,
        valid_time: int | None = None,
        tx_id: int | None = None,
    ) -> list[TextHit]:
        """The ``k`` indexed parts that best match ``query`` (BM25, best first) among the
        versions in force at ``valid_time`` (default now) as of ``tx_id`` (default the latest).

        ``query`` is plain text: its words are searched for (any of them; more of them, and
        rarer ones, rank higher), never read as query syntax. ``kinds`` narrows to some of the
        searchable kinds (``objects.INDEXED_KINDS``), ``session`` to one session's objects.
        ``InputError`` names a bad argument (an empty query, an unknown kind, a valid time that
        is not epoch ms); a query without any word finds nothing.
        """
        from .text_index import check_search

        return self._text_search(check_search(query, k, kinds, session, valid_time, tx_id))

    def _text_search(self, args: SearchArgs) -> list[TextHit]:
        """``text_search`` once its arguments are checked. This default scans every version in
        force (``find``): correct, and slow on a large store."""
        from .text_index import scan_search

        return scan_search(self, args)

    def text_parts(self, after_seq: int = 0, limit: int = 1000) -> list[TextPart]:
        """At most ``limit`` indexed parts with ``seq > after_seq``, in index order: each distinct
        (id, part, text) once, so an embedder can resume from the last ``seq`` it saw."""
        from .text_index import check_cursor

        check_cursor(after_seq, limit)
        return self._text_parts(after_seq, limit)

    def _text_parts(self, after_seq: int, limit: int) -> list[TextPart]:
        """``text_parts`` once its arguments are checked. A store without an index has none."""
        return []

    def index_status(self) -> dict[str, Any]:
        """The keyword index: ``backend``, ``state`` (``ok``, ``missing``, ``corrupt``,
        ``building``, ``none``), ``parts``, ``documents``, ``last_seq``, ``last_indexed_tx``,
        ``store_tx``, ``lags`` (whether search may miss the newest writes) and ``search``
        (``index``, or ``scan`` when searches fall back to scanning)."""
        latest = self.latest_tx()
        return {
            "backend": "none",
            "state": "none",
            "parts": 0,
            "documents": 0,
            "last_seq": 0,
            "last_indexed_tx": None,
            "store_tx": None if latest is None else latest.id,
            "lags": False,
            "search": "scan",
        }

    def rebuild_index(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Build the keyword index again from every stored version; the number of parts it then
        holds. ``progress(done, total)`` is called as it goes. Safe to run again after a crash."""
        return 0

    def reader(self) -> Callable[[], Store] | None:
        """How another process opens this store to read it: a picklable callable that opens it
        there (only to read: nothing it opens writes unless asked to, but for sending what waits
        in an outbox before a read, as every read behind one does), or None where no other
        process can read what this store holds (it lives in this process alone, or holds writes
        it has not passed on). Frame checks run in worker processes through it
        (``context.frames.verify_frames``)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, most backends need it
        """Release connections and files."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Conveniences built only on the abstract methods above.

    def put(self, doc: Mapping[str, Any], valid_from: int | None = None, valid_to: int | None = None) -> Tx:
        """Submit a single put."""
        return self.submit([Put(doc, valid_from, valid_to)])

    def doc(self, id: str, valid_time: int | None = None, tx_id: int | None = None) -> dict[str, Any] | None:
        """The document in force, or None."""
        v = self.get(id, valid_time, tx_id)
        return None if v is None else v.doc

    def iter_versions(self, kind: str | None = None) -> Iterator[Version]:
        """Every version (with docs) of every document currently known, for ``verify``."""
        for current in self.find(kind):
            yield from self.history(current.id, with_docs=True)
