"""No lost writes: a durable local outbox in front of a store that can be out of reach.

``OutboxStore`` wraps a store (``open_store`` wraps every XTDB store in one) and is transparent
while the backend answers. When a submit cannot even connect (``StoreUnreachable``: nothing was
sent), the transaction is *accepted* into a local SQLite file instead, and sent later, in order
and exactly once. The semantics, also in docs/xtdb.md:

* **Valid times are fixed at accept time.** A put or delete without ``valid_from`` gets the
  accept time: the time XTDB would have used (its tx time) had it answered. Explicit times are
  kept. A late replay therefore moves nothing in valid time; only the tx time is later.
* **Matches are refused** while the backend is out of reach (``StoreUnavailable``, nothing is
  queued): a precondition can only be checked by the backend, and a queued compare-and-set
  that fails minutes later is a lost write nobody hears about. Evictions queue like puts.
* **The returned Tx is pending** (``Tx.pending``): its ``time`` is the accept time and its
  ``id`` a *provisional* id, a negative int unique to the write. Every read of this store
  accepts it as ``tx_id`` and resolves it to the transaction that carried the write, so static
  refs and frame bases recorded offline stay valid. Versions read back carry the real ids.
* **In order, exactly once.** Each transaction is sent as ``Match(marker, None)``,
  ``Put(marker)``, then its own operations, where the marker is the document ``outbox:<n>``
  (``n`` = minus the provisional id) at the accept time. If the process dies after the backend
  took a transaction but before the outbox forgot it, the next replay is aborted by the backend
  itself (the marker exists) and the real tx id is read from the marker. Markers stay: they
  are how provisional ids resolve. ``find`` without a kind leaves them out.
* **No stale reads.** Every read first sends what waits; if the backend is still out of reach,
  the read raises ``StoreUnavailable`` naming the outbox and its depth. A write while the
  outbox is not empty joins its end unless the backend answers (probed at most every
  ``PROBE_INTERVAL_S``, by a write or a read), so writes keep their order.
* A submit whose request may have reached the backend before the connection broke is never
  queued (it could land twice): it raises ``StoreUnavailable`` as without an outbox.

The file may be shared by the processes of one machine: SQLite serialises them, and a replay
holds the file's write lock while it sends each transaction, so two replays cannot interleave.

This module speaks the Store contract only: no backend details, nothing above the store.
"""

from __future__ import annotations

import functools
import heapq
import json
import logging
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from ..errors import HashError, SchemaError, StoreError, StoreUnavailable, StoreUnreachable
from ..hashing import canonical_json, doc_hashes
from .base import (
    Delete,
    DocMemo,
    Evict,
    Match,
    Op,
    Put,
    Store,
    TextHit,
    TextPart,
    Tx,
    Version,
    check_after_evict,
    check_time,
    now_ms,
)
from .text_index import SearchArgs

__all__ = ["MARKER_KIND", "OutboxStore"]

log = logging.getLogger(__name__)

MARKER_KIND = "outbox"
"""Kind (and id prefix) of the marker document each replayed transaction carries."""
_SCHEMA_VERSION = 1
_END_OF_TIME = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: a marker holds from its accept time on
_MAX_PROVISIONAL = 2**53 - 1  # provisional ids stay exact in JSON readers everywhere


def _marker_id(n: int) -> str:
    return f"{MARKER_KIND}:{n}"


def _marker(n: int, accepted: int, ops: int) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": _marker_id(n),
        "kind": MARKER_KIND,
        "content": {"accepted": accepted, "ops": ops},
        "meta": {"provisional_tx_id": -n},
    }
    doc.update(doc_hashes(doc))
    return doc


def _is_provisional(tx_id: Any) -> bool:
    return isinstance(tx_id, int) and not isinstance(tx_id, bool) and tx_id < 0


def _time(name: str, value: int | None) -> int | None:
    # what every backend refuses is refused here: accepted, it would be refused when sent, and
    # hold back every write after it (before 2026-12-02 a time past the year 9999 was so accepted)
    check_time(name, value)
    return value


def _id(value: Any) -> str:
    if not isinstance(value, str):
        raise StoreError(f"document ids are strings, got {value!r}")
    return value


def _encode(ops: Sequence[Op], accepted: int) -> str:
    """The transaction as JSON, valid times fixed; every input error is raised here, at accept."""
    out: list[dict[str, Any]] = []
    for op in ops:
        if isinstance(op, Put):
            if not isinstance(op.doc, Mapping):
                raise StoreError(f"a document must be a mapping, got {type(op.doc).__name__}")
            doc_id = _id(op.doc.get("id"))
            try:
                canonical_json(op.doc)  # JSON, string keys, no NaN: what every backend takes
            except HashError as e:
                raise StoreError(f"document {doc_id!r} cannot be stored: {e}") from e
            vf, vt = _time("valid_from", op.valid_from), _time("valid_to", op.valid_to)
            out.append({"op": "put", "doc": op.doc, "from": accepted if vf is None else vf, "to": vt})
        elif isinstance(op, Delete):
            vf, vt = _time("valid_from", op.valid_from), _time("valid_to", op.valid_to)
            out.append({"op": "delete", "id": _id(op.id), "from": accepted if vf is None else vf, "to": vt})
        elif isinstance(op, Evict):
            out.append({"op": "evict", "id": _id(op.id)})
        elif isinstance(op, Match):
            raise StoreUnavailable(
                f"a transaction with a match on {op.id!r} cannot wait in the outbox: only the store can check it"
            )
        else:
            raise StoreError(f"unknown transaction operation {op!r}")
    try:
        return json.dumps(out, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:  # canonical_json accepted it; this is a safety net
        raise StoreError(f"the transaction cannot be written to the outbox: {e}") from e


def _decode(text: str) -> list[Op]:
    ops: list[Op] = []
    for o in json.loads(text):
        if o["op"] == "put":
            ops.append(Put(o["doc"], o["from"], o["to"]))
        elif o["op"] == "delete":
            ops.append(Delete(o["id"], o["from"], o["to"]))
        else:
            ops.append(Evict(o["id"]))
    return ops


class OutboxStore(Store):
    """A store whose writes survive the backend being out of reach (see the module docstring)."""

    PROBE_INTERVAL_S = 2.0
    """While writes wait, how often a new write first tries to send them (reads always try; a
    failed try, a read's too, starts the interval)."""
    BUSY_TIMEOUT_MS = 60_000
    """How long to wait for another process that holds the outbox (it may be replaying)."""

    def __init__(self, inner: Store, path: Path, *, earlier: Sequence[Path] = ()) -> None:
        """``earlier``: other outbox files of the same backend (an earlier release named one per
        spelling of a node's URL): the writes waiting there join this outbox when it is first used."""
        self.inner = inner
        self.url = inner.url
        self.path = path
        self.earlier = [p for p in earlier if p != path]
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._resolved: dict[int, int] = {}
        self._next_probe = 0.0

    # -- the file ------------------------------------------------------------------------------

    def _db(self, *, create: bool) -> sqlite3.Connection | None:
        """The outbox connection; None if there is no file yet and ``create`` is false."""
        if self._conn is not None:
            return self._conn
        earlier = [p for p in self.earlier if p.exists()]
        if not create and not self.path.exists() and not earlier:
            return None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {self.BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")  # an accepted write survives a power cut
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > _SCHEMA_VERSION:
                conn.close()
                raise SchemaError(f"the outbox {self.path} has schema {version}, newer than this context_os")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS pending (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                " provisional INTEGER NOT NULL UNIQUE, accepted INTEGER NOT NULL, ops TEXT NOT NULL, error TEXT)"
            )
            conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
        except sqlite3.Error as e:
            raise StoreError(f"cannot open the outbox {self.path}: {e}") from e
        try:
            for old in earlier:
                self._take_in(conn, old)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _take_in(self, conn: sqlite3.Connection, old: Path) -> None:
        """Move the writes waiting in the outbox file ``old`` into this one, merged by accept time
        (each file's own order kept). Both files are locked meanwhile, so no replay of either runs.
        A crash between the two commits leaves a write in both: harmless, as its marker makes a
        second send a no-op (module docstring)."""
        try:
            src = sqlite3.connect(old, isolation_level=None, timeout=self.BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open the earlier outbox {old}: {e}") from e
        try:
            src.execute("BEGIN IMMEDIATE")
            has_table = src.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pending'").fetchone()
            cols = "provisional, accepted, ops, error"
            theirs = src.execute(f"SELECT {cols} FROM pending ORDER BY seq").fetchall() if has_table else []
            if theirs:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    ours = conn.execute(f"SELECT {cols} FROM pending ORDER BY seq").fetchall()
                    held = {row[0] for row in ours}
                    merged = heapq.merge(ours, [r for r in theirs if r[0] not in held], key=lambda row: row[1])
                    conn.execute("DELETE FROM pending")
                    conn.executemany(f"INSERT INTO pending ({cols}) VALUES (?, ?, ?, ?)", list(merged))
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                src.execute("DELETE FROM pending")
                log.info("took %d waiting write(s) from the outbox %s into %s", len(theirs), old, self.path)
            src.execute("COMMIT")
        except sqlite3.Error as e:
            raise StoreError(f"cannot take the writes waiting in the earlier outbox {old} into {self.path}: {e}") from e
        finally:
            src.close()

    def depth(self) -> int:
        """How many accepted transactions wait to be sent."""
        with self._lock:
            conn = self._db(create=False)
            if conn is None:
                return 0
            n: int = conn.execute("SELECT count(*) FROM pending").fetchone()[0]
            return n

    def outbox_stats(self) -> dict[str, Any]:
        """Where the outbox is and what waits in it (for ``ctxos status``)."""
        with self._lock:
            conn = self._db(create=False)
            if conn is None:
                row, blocked = None, None
            else:
                row = conn.execute("SELECT count(*), min(accepted) FROM pending").fetchone()
                blocked = conn.execute("SELECT error FROM pending ORDER BY seq LIMIT 1").fetchone()
        return {
            "path": str(self.path),
            "pending": row[0] if row else 0,
            "oldest_accepted": row[1] if row else None,
            "blocked_by": blocked[0] if blocked else None,
        }

    # -- accepting and replaying -----------------------------------------------------------------

    def _accept(self, ops: Sequence[Op], why: StoreUnavailable) -> Tx:
        accepted = now_ms()
        try:
            encoded = _encode(ops, accepted)
        except StoreUnavailable as e:
            raise StoreUnavailable(f"{why}; {e}") from why
        with self._lock:
            conn = self._db(create=True)
            assert conn is not None
            while True:
                n = secrets.randbelow(_MAX_PROVISIONAL) + 1
                try:
                    conn.execute(
                        "INSERT INTO pending (provisional, accepted, ops) VALUES (?, ?, ?)", (-n, accepted, encoded)
                    )
                    break
                except sqlite3.IntegrityError:
                    continue  # that provisional id is taken (vanishingly rare): draw another
                except sqlite3.Error as e:
                    raise StoreError(f"{why}; and the outbox {self.path} could not take the write: {e}") from e
        return Tx(-n, accepted, True, pending=True)

    def replay(self) -> int:
        """Send every waiting transaction, oldest first; returns how many were sent.

        Raises ``StoreUnavailable`` (``StoreUnreachable`` if nothing could be sent) while the
        backend is out of reach (new writes then join the outbox without trying for
        ``PROBE_INTERVAL_S``), and ``StoreError`` if it refuses a transaction: that one stays
        first in the outbox, with the reason, and holds back those after it.
        """
        sent, evicted = 0, False
        with self._lock:
            conn = self._db(create=False)
            if conn is None:
                return 0
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")  # one replayer at a time, across processes too
                except sqlite3.Error as e:
                    raise StoreError(f"the outbox {self.path} stayed locked by another process: {e}") from e
                row = None
                try:
                    row = conn.execute(
                        "SELECT seq, provisional, accepted, ops FROM pending ORDER BY seq LIMIT 1"
                    ).fetchone()
                    if row is None:
                        conn.execute("COMMIT")
                        if evicted:
                            self._scrub()
                        return sent
                    seq, provisional, accepted, ops = row
                    decoded = _decode(ops)
                    tx_id = self._send(provisional, accepted, decoded)
                    evicted = evicted or any(isinstance(op, Evict) for op in decoded)
                    self._forget(conn, seq)
                    conn.execute("COMMIT")
                except sqlite3.Error as e:
                    conn.execute("ROLLBACK")
                    raise StoreError(f"the outbox {self.path} failed: {e}") from e
                except BaseException as e:
                    conn.execute("ROLLBACK")
                    if isinstance(e, StoreUnavailable):  # a failed try: writes wait a while to try again
                        self._next_probe = time.monotonic() + self.PROBE_INTERVAL_S
                    elif isinstance(e, StoreError) and row is not None:
                        conn.execute("UPDATE pending SET error = ? WHERE seq = ?", (str(e), row[0]))
                    raise
                self._resolved[provisional] = tx_id
                sent += 1

    def _send(self, provisional: int, accepted: int, ops: list[Op]) -> int:
        """Send one waiting transaction; its real tx id, whether this call or an earlier one landed it."""
        n = -provisional
        marker = _marker(n, accepted, len(ops))
        try:
            tx = self.inner.submit([Match(marker["id"], None, accepted), Put(marker, accepted), *ops])
            if tx.committed:
                return tx.id
            # Aborted: the marker exists, so an earlier replay landed it (and died before forgetting).
            landed = self.inner.get(marker["id"], _END_OF_TIME)
        except StoreUnreachable as e:
            raise StoreUnreachable(f"{e}; {self._waiting()}") from e
        except StoreUnavailable as e:
            raise StoreUnavailable(f"{e}; {self._waiting()} (a repeat of this one is harmless)") from e
        except StoreError as e:
            raise StoreError(
                f"the store refused write {provisional} from the outbox {self.path} (accepted at {accepted}): {e};"
                " it stays there and holds back the writes after it"
            ) from e
        if landed is None:
            raise StoreError(f"write {provisional} from the outbox {self.path} was neither committed nor found")
        return landed.tx_id

    def _forget(self, conn: sqlite3.Connection, seq: int) -> None:
        conn.execute("DELETE FROM pending WHERE seq = ?", (seq,))

    def _scrub(self) -> bool:
        """After an eviction reached the node: the writes this file held before they were sent
        are deleted rows, whose bytes stay in its free pages and its log until they are written
        over. The evicted text may be among them, so the file is rebuilt and its log folded back
        and emptied (as an embedded store does for every eviction). A process that keeps the file
        busy meanwhile leaves them to the next eviction or ``scrub`` (a warning says so): False."""
        with self._lock:
            conn = self._db(create=False)
            if conn is None:
                return True
            try:
                conn.execute("VACUUM")
                busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.Error as e:
                busy, why = 1, str(e)
            else:
                why = "another process was reading it"
            if busy:
                log.warning(
                    "the outbox %s may still hold copies of writes sent before an eviction (%s): they go at the"
                    " next eviction, or when it is run again (ctxos objects evict ID --yes)",
                    self.path,
                    why,
                )
            return not busy

    def _refused(self) -> str | None:
        """Why the store refused the first write waiting here, if it did (it holds back the rest:
        before 2026-12-02 a write behind it was accepted while the store was out of reach, and
        waited there for good, the submit saying nothing)."""
        conn = self._db(create=False)
        row = None if conn is None else conn.execute("SELECT error FROM pending ORDER BY seq LIMIT 1").fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def _waiting(self) -> str:
        n = self.depth()
        return f"{n} accepted write(s) wait in the outbox {self.path} and will be sent, in order, when it answers"

    def _ready(self) -> None:
        """Before a read: nothing may wait in the outbox (a read must not miss accepted writes).
        When they cannot be sent (``replay`` starts the probe interval), writes join them without
        trying again: a turn that reads, then writes, asks an out-of-reach store once."""
        if self.depth():
            self.replay()

    def _tx(self, tx_id: int | None) -> int | None:
        """A tx id as the backend knows it: provisional ids resolve through their marker."""
        if tx_id is None or not _is_provisional(tx_id):
            return tx_id
        real = self._resolved.get(tx_id)
        if real is None:
            marker = self.inner.get(_marker_id(-tx_id), _END_OF_TIME)
            if marker is None:
                raise StoreError(
                    f"transaction {tx_id} is a write accepted while the store was out of reach that is not in the"
                    " store: it still waits in another outbox, or the id is wrong"
                )
            real = self._resolved[tx_id] = marker.tx_id
        return real

    # -- the contract ------------------------------------------------------------------------------

    def submit(self, ops: Sequence[Op]) -> Tx:
        ops = list(ops)
        check_after_evict(ops)  # before it is accepted: the store would refuse it when sent
        if self.depth():
            with self._lock:
                if self.depth():  # another thread may have sent them meanwhile
                    refused = self._refused()
                    # a match can only wait for the store, so it always tries it; so does a write
                    # behind one the store refused, which would wait behind it for good
                    if (
                        time.monotonic() < self._next_probe
                        and refused is None
                        and not any(isinstance(op, Match) for op in ops)
                    ):
                        return self._accept(ops, StoreUnavailable("the store was out of reach moments ago"))
                    try:
                        self.replay()
                    except StoreUnavailable as e:  # this write goes after the ones still waiting
                        if refused is not None:
                            raise StoreError(f"{refused}; this write was not accepted") from e
                        return self._accept(ops, e)
        try:
            tx = self.inner.submit(ops)
        except StoreUnreachable as e:
            self._next_probe = time.monotonic() + self.PROBE_INTERVAL_S
            return self._accept(ops, e)
        if tx.committed and any(isinstance(op, Evict) for op in ops):
            self._scrub()
        return tx

    def get(self, id: str, valid_time: int | None = None, tx_id: int | None = None) -> Version | None:
        self._ready()
        return self.inner.get(id, valid_time, self._tx(tx_id))

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
        self._ready()
        return self.inner.history(
            id,
            order,
            with_docs=with_docs,
            start_valid_time=start_valid_time,
            end_valid_time=end_valid_time,
            start_tx_id=self._tx(start_tx_id),
            end_tx_id=self._tx(end_tx_id),
            with_corrections=with_corrections,
        )

    def find(
        self,
        kind: str | None = None,
        where: Mapping[str, Any] | None = None,
        *,
        valid_time: int | None = None,
        tx_id: int | None = None,
        docs: DocMemo | None = None,
    ) -> list[Version]:
        self._ready()
        found = self.inner.find(kind, where, valid_time=valid_time, tx_id=self._tx(tx_id), docs=docs)
        if kind is None:
            found = [v for v in found if not (v.doc and v.doc.get("kind") == MARKER_KIND)]
        return found

    def find_meta(
        self,
        kind: str | None = None,
        where: Mapping[str, Any] | None = None,
        keys: Sequence[str] = (),
        *,
        valid_time: int | None = None,
        tx_id: int | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        if kind is None:  # the markers are left out, as ``find`` leaves them out
            return super().find_meta(kind, where, keys, valid_time=valid_time, tx_id=tx_id)
        self._ready()
        return self.inner.find_meta(kind, where, keys, valid_time=valid_time, tx_id=self._tx(tx_id))

    def ids(self, *, valid_time: int | None = None, tx_id: int | None = None) -> list[str]:
        self._ready()
        tx_id = self._tx(tx_id)
        markers = {id for id, _ in self.inner.find_meta(MARKER_KIND, valid_time=valid_time, tx_id=tx_id)}
        return [id for id in self.inner.ids(valid_time=valid_time, tx_id=tx_id) if id not in markers]

    def count_kinds(self, *, valid_time: int | None = None, tx_id: int | None = None) -> dict[str | None, int]:
        self._ready()
        counts = self.inner.count_kinds(valid_time=valid_time, tx_id=self._tx(tx_id))
        counts.pop(MARKER_KIND, None)  # as ``find`` leaves them out
        return counts

    def latest_tx(self) -> Tx | None:
        self._ready()
        return self.inner.latest_tx()

    def latest_tx_id(self) -> int | None:
        self._ready()
        return self.inner.latest_tx_id()

    def sync(self) -> None:
        self._ready()
        self.inner.sync()

    def stats(self) -> dict[str, Any]:
        """The backend's stats and the outbox's; when the backend is out of reach or is not a
        store, what is known here."""
        try:
            self._ready()
            out = dict(self.inner.stats())
        except StoreError as e:  # out of reach, or what answers is not the store (a web server, a wrong path)
            backend = type(self.inner).__name__.removesuffix("Store").lower()
            out = {"backend": backend, "url": self.url, "reachable": False, "error": str(e)}
            if not isinstance(e, StoreUnavailable):
                del out["reachable"]  # it answers, as something else
            node_states = getattr(self.inner, "node_states", None)  # a backend of several nodes: each one's
            if node_states is not None:
                out["nodes"] = node_states()
        out["outbox"] = self.outbox_stats()
        return out

    def check(self) -> list[str] | None:
        return self.inner.check()

    def scrub(self) -> bool:
        # the outbox's own file too: its rebuild after an eviction may have been cut short
        inner = self.inner.scrub()
        return self._scrub() and inner

    def _text_search(self, args: SearchArgs) -> list[TextHit]:
        self._ready()
        return self.inner.text_search(
            args.query,
            k=args.k,
            kinds=args.kinds,
            session=args.session,
            valid_time=args.valid_time,
            tx_id=self._tx(args.tx_id),
        )

    def _text_parts(self, after_seq: int, limit: int) -> list[TextPart]:
        return self.inner.text_parts(after_seq, limit)

    def index_status(self) -> dict[str, Any]:
        return self.inner.index_status()

    def rebuild_index(self, progress: Callable[[int, int], None] | None = None) -> int:
        return self.inner.rebuild_index(progress)

    def reader(self) -> Callable[[], Store] | None:
        inner = self.inner.reader()
        if inner is None or self.depth():
            return None  # what waits in the outbox is there for this process alone
        # through the same outbox file: the ids of writes it accepted while the backend was out of
        # reach resolve as here (its markers), and a read there, as every read behind this file,
        # first sends what waits in it by then (accepted since, by this process or another): a
        # reader must not miss an accepted write. It accepts nothing, as it submits nothing.
        return functools.partial(_outbox_reader, inner, self.path)

    def __enter__(self) -> OutboxStore:
        return self

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        self.inner.close()


def _outbox_reader(inner: Callable[[], Store], path: Path) -> OutboxStore:
    """``OutboxStore.reader``'s store: ``inner()`` behind the outbox file at ``path``."""
    return OutboxStore(inner(), path)
