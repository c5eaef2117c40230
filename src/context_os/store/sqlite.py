"""The embedded bitemporal store: one SQLite file with XTDB 1.x semantics.

This is the default backend. It keeps the same model XTDB 1.x keeps in its KV indexes, so the
conformance suite can hold both to one behaviour:

* ``versions``: one row per (entity, valid time, tx id) holding a document reference, or NULL
  for "no document" (a deletion). A read "as of" (vt, tx) takes the row with the greatest valid
  time <= vt among rows with tx id <= tx; ties on valid time go to the greatest tx id. The
  primary key is that lookup's index.
* ``docs``: document JSON, deduplicated by a blake3 hash of the serialised document (not by
  the document's own ``object_hash`` field: two documents may claim the same object hash and
  differ, and ``verify`` must be able to see that). The dedup key leads with the entity's key
  (``_dedup_key``; a document names its own id, so two entities never share one): the
  documents of new entities, most of a turn's, land on the last leaf of its index, not each on
  a leaf of its own.
* ``txs``: every transaction (id, time, committed), aborted ones included, as XTDB records them.
* ``attrs``: (attribute, value digest, entity) for the kind and every scalar value of an
  *indexed* ``meta`` key that any version of an entity ever had. ``find`` reads its candidates
  from here, then checks each candidate's version in force, so it never scans the history of
  unrelated documents.
* ``indexed_keys``: the ``meta`` keys ``attrs`` covers. A key is indexed the first time ``find``
  asks for it (every stored version is indexed then, under the write lock) and from then on by
  every put. Keys nobody searches by (previews, token counts, call ids) cost writes nothing:
  each indexed value is a random-order B-tree insert, which is most of what a small
  transaction costs in WAL mode.
* ``entities``: string id → integer key, to keep the version rows and indexes small.

Puts and deletes write the same rows XTDB's indexer (``xtdb.tx/put-delete-coords``) writes,
including its quirks, e.g. a range put restores what held at ``valid_to`` with the tx id of the
version it restores. Several processes may share one file: writes serialise on SQLite's write
lock (``BEGIN IMMEDIATE``) and tx ids are allocated inside that lock.

The keyword index (``text_parts``, ``text_fts``, ``text_meta``: see store/text_index.py) is
written in the same transaction as the versions it indexes; a write that finds it damaged drops
it and commits (``text_index.fts_step``): the index is derived, the write is not.

This module must never import from ``context``, ``harness`` or ``objects`` (what a document
contributes to the keyword index it learns from text_index only), and no sqlite3 exception may
leave it untranslated.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import blake3

from ..errors import (
    HashError,
    InputError,
    NotFound,
    SchemaError,
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreUnavailable,
)
from ..hashing import TOO_DEEP, canonical_json, json_problem
from ..times import iso
from . import text_index
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
    check_find,
    check_time,
    now_ms,
)

__all__ = ["SqliteStore"]

log = logging.getLogger(__name__)

# Bounds used instead of "no bound" so that every query keeps one prepared form.
_MIN = -(2**63)
_MAX = 2**63 - 1
# ``attrs`` names: the kind, and each meta key under a prefix.
_KIND_ATTR = "kind"
_META_ATTR = "meta:"
# How many entities have an attribute value, up to a cap: enough to pick the rarest criterion.
_COUNT_ATTR = "SELECT COUNT(*) FROM (SELECT 1 FROM attrs WHERE name = ? AND value = ? LIMIT ?)"
_FEW = 64
"""Candidates few enough that a lookup driven from them is cheap whatever the other criteria."""
_MANY = 1000
"""How far criteria none of which is rare are counted, to order them."""


def _rarest_first(
    conn: sqlite3.Connection, criteria: list[tuple[str, bytes]], by_kind: tuple[str, bytes] | None
) -> list[tuple[str, bytes]]:
    """``find``'s index criteria (``meta`` values, and the kind's) in the order its lookup takes
    them: from the rarest (a turn number narrows more than a session, a session more than a
    kind). Each is counted up to ``_FEW`` first: a rare one (under it) drives the lookup and the
    others, the kind last, only check its few candidates; only when none is rare are they counted
    up to ``_MANY`` to order them. A count reads up to its cap's index entries, which cost more
    than the lookup (a file tracker's six finds a file, each of one path, inode or key, were each
    counted to 1,000 until 2026-12-06; with the kind counted as well, 10,000 files took 1.8 times
    as long to index before that day)."""
    counts: dict[tuple[tuple[str, bytes], int], int] = {}

    def count(c: tuple[str, bytes], cap: int) -> int:
        if (c, cap) not in counts:
            counts[c, cap] = conn.execute(_COUNT_ATTR, (*c, cap)).fetchone()[0]
        return counts[c, cap]

    if len(criteria) > 1:
        rarest = min(criteria, key=lambda c: count(c, _FEW))
        if count(rarest, _FEW) < _FEW:
            criteria = [rarest, *(c for c in criteria if c is not rarest)]
        else:
            criteria = sorted(criteria, key=lambda c: count(c, _MANY))
    if by_kind is None:
        return criteria
    if not criteria:
        return [by_kind]
    if count(criteria[0], _FEW) < _FEW:
        return [*criteria, by_kind]
    return sorted([*criteria, by_kind], key=lambda c: count(c, _MANY))


# -- schema migrations -------------------------------------------------------------------------
#
# Ordered, named, recorded in the ``migrations`` table. Never edit a released migration: add a
# new one. A file that records a migration not listed here was written by a newer context_os.


def _m001_initial(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE txs (id INTEGER PRIMARY KEY, time INTEGER NOT NULL, committed INTEGER NOT NULL)")
    conn.execute("CREATE TABLE entities (eid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE)")
    conn.execute("CREATE TABLE docs (id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, json TEXT NOT NULL)")
    conn.execute(
        "CREATE TABLE versions (eid INTEGER NOT NULL, valid_time INTEGER NOT NULL, tx_id INTEGER NOT NULL,"
        " doc INTEGER, PRIMARY KEY (eid, valid_time, tx_id)) WITHOUT ROWID"
    )
    conn.execute(
        "CREATE TABLE attrs (name TEXT NOT NULL, value BLOB NOT NULL, eid INTEGER NOT NULL,"
        " PRIMARY KEY (name, value, eid)) WITHOUT ROWID"
    )


def _m002_indexed_keys(conn: sqlite3.Connection) -> None:
    # Files written before this migration indexed every meta key: all of them stay indexed.
    conn.execute("CREATE TABLE indexed_keys (name TEXT PRIMARY KEY) WITHOUT ROWID")
    conn.execute("INSERT INTO indexed_keys (name) SELECT DISTINCT name FROM attrs WHERE name != ?", (_KIND_ATTR,))


def _index_docs(conn: sqlite3.Connection, docs: Sequence[tuple[int, int, str]]) -> None:
    """Index stored documents ``(doc ref, entity key, json)`` (a migration, a rebuild)."""
    for _ref, eid, text in docs:
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            continue  # damaged: ``verify`` reports it; nothing to index
        if isinstance(doc, dict):
            text_index.add_parts(conn, eid, doc)


# Stored documents in doc order, each with the entity it belongs to (a doc carries its own id).
_DOCS_AFTER = (
    "SELECT d.id, e.eid, d.json FROM docs d JOIN entities e ON e.id = json_extract(d.json, '$.id')"
    " WHERE d.id > ? AND json_valid(d.json) AND json_extract(d.json, '$.kind') IN (SELECT value FROM json_each(?))"
    " ORDER BY d.id LIMIT ?"
)
_INDEXED_KINDS_JSON = json.dumps(list(text_index.INDEXED_KINDS))


def _m003_text_index(conn: sqlite3.Connection) -> None:
    # The keyword index, built at once for every document stored before it.
    text_index.create_tables(conn)
    last = 0
    while batch := conn.execute(_DOCS_AFTER, (last, _INDEXED_KINDS_JSON, 500)).fetchall():
        _index_docs(conn, batch)
        last = batch[-1][0]
    text_index.flush_fts(conn, force=True)


def _m004_fts_seq(conn: sqlite3.Connection) -> None:
    # Parts reach the FTS5 table in batches from here on: everything indexed so far is in it.
    if text_index.tables_present(conn):
        conn.execute(
            "INSERT OR IGNORE INTO text_meta (key, value) SELECT 'fts_seq', coalesce(max(seq), 0) FROM text_parts"
        )


def _m005_fts_high_water(conn: sqlite3.Connection) -> None:
    # An eviction's high-water row goes in the FTS5 table too: put there those written before.
    if text_index.tables_present(conn):
        text_index.index_high_water(conn)


_PAGE_SIZE = 2048
"""The page size of a store file this module creates (SQLite's default is 4096)."""
_EID_CACHE = 20_000
"""How many entities' eids a store remembers (a few MB); past it, it starts over."""


@dataclass
class _OwnWrites:
    """What a store's own transactions told it of the file: each entity's eid and the newest
    valid time of its rows, so that the next transaction need not read them. True only while the
    newest transaction is the one the store wrote last: another process may have written rows
    since, or evicted an entity (SQLite then hands its eid to the next entity created)."""

    eids: dict[str, int] = field(default_factory=dict)
    newest_vt: dict[int, int] = field(default_factory=dict)
    tx: int = -1

    def check(self, newest_tx: int | None) -> None:
        """Forget it all unless ``newest_tx`` (read under the write lock) is the store's own."""
        if newest_tx != self.tx or len(self.eids) > _EID_CACHE:
            self.eids, self.newest_vt = {}, {}

    def learn(self, writer: _TxWriter, tx_id: int, committed: bool) -> None:
        """Take in what transaction ``tx_id`` did (a failed match undid its ops: nothing)."""
        if committed:
            for doc_id, eid in writer.evicted.items():
                self.eids.pop(doc_id, None)
                self.newest_vt.pop(eid, None)
            self.eids.update(writer.eids)
            self.newest_vt.update(writer.newest_vt)
        self.tx = tx_id

    def forget(self) -> None:
        self.eids, self.newest_vt, self.tx = {}, {}, -1


MIGRATIONS: tuple[tuple[str, Callable[[sqlite3.Connection], None]], ...] = (
    ("m001_initial", _m001_initial),
    ("m002_indexed_keys", _m002_indexed_keys),
    ("m003_text_index", _m003_text_index),
    ("m004_fts_seq", _m004_fts_seq),
    ("m005_fts_high_water", _m005_fts_high_water),
)


def _migrations(uri: str) -> list[str] | None:
    """The migrations the store at ``uri`` records (``SqliteStore._marks``), None when it is no
    store or cannot be read."""
    try:
        with closing(sqlite3.connect(uri, uri=True, timeout=SqliteStore.FLUSH_WAIT_S, isolation_level=None)) as conn:
            conn.execute("BEGIN")  # one snapshot (ended by the close)
            return SqliteStore._marks(conn)[1]
    except sqlite3.Error:
        return None


_STORE_TABLES = frozenset({"migrations", "txs", "entities", "docs", "versions", "attrs"})
"""The tables of every store (``m001_initial``'s and the record of migrations): with its first
migration recorded first, what makes a file a context_os store (``SqliteStore._marks``)."""


# -- documents and attribute values ---------------------------------------------------------------


_IN_FORCE = (
    "(v.valid_time, v.tx_id) = (SELECT valid_time, tx_id FROM versions WHERE eid = c.eid"
    " AND valid_time <= ? AND tx_id <= ? ORDER BY valid_time DESC, tx_id DESC LIMIT 1)"
)
"""SQL: the row ``v`` of entity ``c`` is its version in force at a valid time, as of a transaction
(the two parameters): the latest valid time not after it, and of those the latest correction."""


class _Canonical(str):
    """A value ``find`` looks for that is not a string, as its canonical JSON (``_value_key``)."""


def _same_value(value: Any, wanted: str) -> bool:
    """Whether a meta value equals what ``find`` looks for: a string itself, or a ``_Canonical``."""
    if isinstance(wanted, _Canonical):
        return _value_key(value) == wanted
    return isinstance(value, str) and value == wanted


def _value_key(value: Any) -> str:
    """The canonical JSON of a value: how ``find`` compares meta values (``1 == 1.0 != true``)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is None or isinstance(value, bool | int):
        try:
            return json.dumps(value)
        except ValueError:  # an integer too long to write: canonical_json says so (HashError)
            pass
    return canonical_json(value).decode("utf-8")


def _indexed_value(value: Any) -> bytes | None:
    """The ``attrs`` value of a kind or meta value, or None if it is not indexed (not a scalar).

    A digest, not the value: the index stays small for long strings, and it never holds a
    plain copy of a value that ``Evict`` must be able to erase (B-tree interior pages keep
    copies of index keys that deleting the row does not touch). Equal digests only make a
    candidate: ``find`` compares the values themselves.
    """
    # A cheap injective tag per canonical value (what _value_key would give), not JSON: this
    # runs for every meta item of every put.
    if isinstance(value, str):
        key = b"s" + value.encode("utf-8")
    elif value is None:
        key = b"n"
    elif isinstance(value, bool):
        key = b"t" if value else b"f"
    elif isinstance(value, int):
        key = b"i%d" % value
    elif isinstance(value, float):
        if not math.isfinite(value):
            return None
        # canonical JSON writes integral floats as integers, so 1.0 finds 1
        key = b"i%d" % int(value) if value.is_integer() and abs(value) < 2**53 else b"f" + repr(value).encode()
    else:
        return None
    return blake3.blake3(key).digest(length=16)


def _doc_attrs(doc: Mapping[str, Any], keys: Container[str] | None = None) -> list[tuple[str, bytes]]:
    """The (attribute, value digest) pairs of a document that ``attrs`` indexes: the kind and the
    meta values whose attribute name is in ``keys`` (all of them if None)."""
    pairs: list[tuple[str, bytes]] = []
    kind = doc.get("kind")
    if isinstance(kind, str) and (ik := _indexed_value(kind)) is not None:
        pairs.append((_KIND_ATTR, ik))
    meta = doc.get("meta")
    if isinstance(meta, Mapping):
        for k, v in meta.items():
            if not isinstance(k, str) or (keys is not None and _META_ATTR + k not in keys):
                continue
            if (iv := _indexed_value(v)) is not None:
                pairs.append((_META_ATTR + k, iv))
    return pairs


@dataclass
class _PreparedDoc:
    json: str
    hash: bytes
    doc: Mapping[str, Any]


_CHECK_ENCODED = False
"""Whether ``Put.json`` is compared with the document's own encoding (the test suite sets it)."""


def _prepare_doc(doc: Mapping[str, Any], encoded: bytes | None = None) -> _PreparedDoc:
    if not isinstance(doc, Mapping):
        raise StoreError(f"a document must be a mapping, got {type(doc).__name__}")
    doc_id = doc.get("id")
    if not isinstance(doc_id, str):
        raise StoreError(f"a document needs a string 'id', got {doc_id!r}")
    if encoded is not None:  # the caller's encoding of it (Put.json): not encoded again
        text = encoded.decode("utf-8")
        if _CHECK_ENCODED and text != _exact_json(doc):
            raise StoreError(f"document {doc_id!r}: Put.json is not the document's JSON")
        return _PreparedDoc(text, blake3.blake3(encoded).digest(), doc)
    # what json.dumps would write all the same: a key that is not a string, as one (the document
    # read back would not be the one put)
    if (problem := json_problem(doc)) is not None:
        raise StoreError(f"document {doc_id!r} is not JSON: {problem}")
    try:
        text = _exact_json(doc)
        digest = blake3.blake3(text.encode("utf-8")).digest()
    except UnicodeEncodeError as e:
        raise StoreError(f"document {doc_id!r} holds text that is not Unicode: {e}") from e
    except RecursionError:
        raise StoreError(f"document {doc_id!r} is not JSON: {TOO_DEEP}") from None
    except (TypeError, ValueError) as e:
        try:
            canonical_json(doc)  # says what and where (an integer too long to write)
        except HashError as why:
            raise StoreError(f"document {doc_id!r} is not JSON: {why}") from e
        raise StoreError(f"document {doc_id!r} is not JSON: {e}") from e
    return _PreparedDoc(text, digest, doc)


def _dedup_key(eid: int, digest: bytes) -> bytes:
    """A document's key in ``docs``: its entity's key (8 bytes, big-endian: in the order entities
    were created), then the blake3 digest of its JSON. With the digest alone each insert went to a
    random leaf of the index, a page of its own in every commit (a turn's transaction wrote 8 such
    pages of its 37; 4 now). Files written before keep their digest-only keys: a document stored
    again after the upgrade gets a second row, which nothing reads differently."""
    return eid.to_bytes(8, "big") + digest


def _exact_json(value: Any) -> str:
    """The stored text of a document: sorted keys make it (and the dedup hash) independent of
    insertion order; floats keep their type (1.0 stays 1.0, XTDB compares types), so documents
    round-trip exactly; -0.0 is stored as 0.0, as XTDB does."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    if "-0.0" in text:  # a cheap test; only then walk the value
        text = json.dumps(_unsigned_zero(value), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text


def _unsigned_zero(value: Any) -> Any:
    if isinstance(value, float):
        return value + 0.0  # -0.0 + 0.0 == 0.0
    if isinstance(value, Mapping):
        return {k: _unsigned_zero(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_unsigned_zero(v) for v in value]
    return value


def _check_tx(name: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise StoreError(f"{name} must be a tx id (int), got {value!r}")


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back the transaction an error interrupted, unless SQLite did already: an I/O error or
    a full disk can end it (the ROLLBACK then failed with "no transaction is active", and that
    error, a plain StoreError, was raised instead of the one that says what happened)."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _op_id(op: Op) -> str:
    return op.doc["id"] if isinstance(op, Put) else op.id


def _load(text: str | None, id: str, tx_id: int, where: Path) -> dict[str, Any]:
    """A stored document; ``StoreCorrupt`` naming the version if its text no longer parses as a
    JSON object (or is missing altogether)."""
    problem = "its stored document is missing" if text is None else ""
    if text is not None:
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as e:
            problem = f"its stored document does not parse as JSON ({e})"
        else:
            if isinstance(doc, dict):
                return doc
            problem = f"its stored document is JSON but not an object ({type(doc).__name__})"
    raise StoreCorrupt(f"SQLite store {where}: {id!r} at tx {tx_id} is damaged: {problem}", id=id, tx_id=tx_id)


def _shown_time(ms: int) -> str:
    try:
        return iso(ms)
    except InputError:
        return f"{ms} ms"


# A version row while a transaction is being computed: (valid_time, tx_id, doc id or None).
_Row = tuple[int, int, int | None]


class _Checkpointer:
    """Folds a store's WAL back into its file from a thread of its own (``SqliteStore.CHECKPOINT_BYTES``).

    SQLite's own automatic checkpoint runs in the connection whose commit made the WAL reach its
    size: that commit returned only once ~20 MB were copied into the file and synced (50-70 ms
    in the one request of several hundred that met it: the proxy's p99). Here a commit that finds
    the WAL over the size wakes this thread, whose own connection copies what the WAL holds
    (``PASSIVE``: readers and writers go on meanwhile). What was committed while it copied is
    copied by the next commit itself (``finish``: a few frames, where the thread copied ~20 MB):
    the WAL starts over only when a write begins with all of it copied, which a thread racing a
    busy writer seldom sees (the WAL of a 50,000-message session grew to 1.4 GB so). The next
    write then starts the WAL over, its file cut to ``journal_size_limit``. A writer faster than
    the thread's copies (a disk slow to sync) finds the WAL past ``SqliteStore.WAL_MOST`` times
    the size: its commit then waits for the thread and copies the rest, so the WAL has a bound
    whatever the machine. The thread is started
    the first time it is needed (most stores never grow the WAL that far) and stopped by
    ``close``. ``lock`` is held while it works: an eviction's rebuild takes it, so that its own
    checkpoint does not find this one running (which would leave the evicted bytes in the WAL)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.runs = 0
        self.finish = False
        """Set once the thread copied what the WAL held: the next commit copies the rest."""
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def due(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ctxos-sqlite-checkpoint", daemon=True)
            self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self.finish and not self._stopping:
                    # The commit's copy has not run yet: it needs the lock, which a thread that
                    # went at once into another run (the WAL grew by a quarter while this one
                    # copied: a slow disk) would hold again and again, and the WAL never started over.
                    continue
                with self.lock:
                    if self._stopping:
                        return
                    try:
                        if conn is None:
                            conn = sqlite3.connect(self.path, isolation_level=None)
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                        self.runs += 1
                        self.finish = True
                    except sqlite3.Error as e:  # the next commit over the size tries again
                        log.debug("SQLite store %s: a checkpoint failed: %s", self.path, e)
        finally:
            if conn is not None:
                conn.close()

    def stop(self) -> None:
        """Stop the thread (a checkpoint it runs is finished first) and close its connection."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()


class SqliteStore(Store):
    """Bitemporal store in one SQLite file (WAL mode), shareable by several processes."""

    BUSY_TIMEOUT_S = 30.0
    """How long a writer waits for another process's write lock before giving up."""
    FLUSH_WAIT_S = 2.0
    """How long a search waits for another process's write lock to move the texts held back
    into the keyword index; past it, it matches them apart (``_flush_fts``)."""
    CHECKPOINT_BYTES = 20_000_000
    """A commit that finds the WAL larger than this has it folded back into the file, off the
    committing thread (``_Checkpointer``); SQLite's own checkpoint after 10,000 pages did the
    same in the commit that reached them."""
    WAL_MOST = 4
    """A commit that finds the WAL past this many times ``CHECKPOINT_BYTES`` (the checkpointer's
    thread copies slower than the writes come) waits for it and copies the rest itself."""
    SCRUB_WAIT_S = 10.0
    """How long an eviction waits for readers of older snapshots before it leaves the evicted
    bytes in the file (``Tx.left_in_files``). It holds the write lock meanwhile, so it stays well
    below ``BUSY_TIMEOUT_S``: a writer queued behind it waits, and never gives up because of it."""

    def __init__(self, path: Path, *, create: bool = True, read_only: bool = False) -> None:
        """Open the store in the file at ``path``. ``create=False``: the file must already hold a
        store (``NotFound`` otherwise; no directory or file is ever created). ``read_only``: open
        it read-only (implies ``create=False``); every write raises ``StoreError``."""
        self.path = Path(path).expanduser().absolute()
        self.read_only = read_only
        self._create = create and not read_only
        self.url = "sqlite://" + str(self.path) + ("?mode=ro" if read_only else "")
        self._lock = threading.RLock()
        # The newest tx time this process wrote: "now" for default read times never goes
        # behind it, so a put is visible at once even if the wall clock stepped back.
        self._last_tx_time = 0
        self._known_tx = -1  # newest tx id this process has seen: as-of reads up to it need no check
        # The indexed meta keys as last read. Keys are only ever added, so a key found here is
        # indexed; one missing may have been added by another process (re-read under the lock).
        self._indexed: frozenset[str] = frozenset()
        self._index_busy_until = 0.0
        """Until when (monotonic seconds) a find does not wait for the write lock to index a new
        meta key: another process kept it past ``FLUSH_WAIT_S`` for the last one that tried."""
        self._text_schema = (-1, False)  # (schema version, whether the keyword index is there)
        self._own = _OwnWrites()
        self._checkpointer = _Checkpointer(self.path)  # (a read-only store's never starts: it commits nothing)
        self._checkpoint_at = self.CHECKPOINT_BYTES
        self._conn: sqlite3.Connection | None = None
        self._conn = self._init_connection()

    # -- connection and schema ----------------------------------------------------------------

    def _init_connection(self) -> sqlite3.Connection:
        if self.path.is_dir():
            raise StoreUnavailable(f"cannot open the SQLite store {self.path}: it is a directory")
        if not self._create:
            if not self.path.exists():
                raise NotFound(f"no store at {self.url}: {self.path} does not exist")
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreUnavailable(
                    f"cannot create the directory for the SQLite store {self.path}: {e.strerror or e}"
                ) from e
            self.created = not self.path.exists()
        # Two processes opening a new file at once: the switch to WAL mode and the WAL recovery
        # can answer "locked" at once instead of waiting; that passes, so try again for a while.
        deadline = time.monotonic() + self.BUSY_TIMEOUT_S
        while True:
            try:
                return self._connect()
            except StoreUnavailable as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _connect(self) -> sqlite3.Connection:
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves (BEGIN IMMEDIATE for writes).
            # check_same_thread=False: file watchers write from their own thread; self._lock
            # serialises use of the one connection. The mode makes SQLite itself refuse to create
            # a file that must exist (no window between a check and the open).
            mode = "rwc" if self._create else "ro" if self.read_only else "rw"
            conn = sqlite3.connect(
                # the path's own bytes (a name that is not UTF-8 is a name all the same)
                f"file://{quote(os.fsencode(self.path))}?mode={mode}",
                uri=True,
                timeout=self.BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as e:
            raise StoreUnavailable(f"cannot open the SQLite store {self.path}: {e}") from e
        text_index.register(conn)
        try:
            with self._translate("open"):
                # before anything writes (even the journal mode): a file that is not ours is refused
                with self._read(conn):
                    tables, applied = self._marks(conn)
                if applied is None and (tables or not self._create):
                    self._refuse(tables)
                if not tables:
                    # A new file. A turn's transaction writes a few rows into many B-trees (each
                    # document's hash, entity, attributes, versions and text parts land on their
                    # own leaf), and a WAL commit writes every page it touched whole: 2 kB pages
                    # write half the bytes of SQLite's default 4 kB for the same leaves (the
                    # turn's store time -15% at 3,000 messages, reads the same: docs/benchmarks.md).
                    # Only before the first table: an existing file keeps its page size.
                    conn.execute(f"PRAGMA page_size={_PAGE_SIZE}")
                if not self.read_only:  # a store is put in WAL mode when it is created
                    conn.execute("PRAGMA journal_mode=WAL")
                # NORMAL is durable across application crashes in WAL mode; only an OS crash
                # can lose the last transactions, and it never corrupts the file.
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(f"PRAGMA busy_timeout={int(self.BUSY_TIMEOUT_S * 1000)}")
                # Checkpoints are where WAL mode pays for fsync: the WAL is folded back every
                # ~20 MB instead of every 4 MB, so a session's small transactions do not each pay
                # for one, and by a thread of the store's own, not in the commit that reached the
                # size (``_Checkpointer``); the WAL's file is then cut to 4 MB, not left at its most.
                conn.execute("PRAGMA wal_autocheckpoint=0")
                conn.execute(f"PRAGMA journal_size_limit={self.CHECKPOINT_BYTES // 5}")
                self._migrate(conn, applied or [])
                self._indexed = self._read_indexed(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _migrate(self, conn: sqlite3.Connection, applied: list[str]) -> None:
        known = [name for name, _ in MIGRATIONS]
        if applied == known:
            return  # the common case, and it needs no write lock
        if self.read_only:
            self._refuse_newer(applied, known)
            raise StoreError(
                f"the SQLite store {self.path} was written by an older context_os and needs its schema upgraded"
                f" ({', '.join(n for n in known if n not in applied)}): open it once without ?mode=ro (older"
                " releases refuse it from then on)"
            )
        conn.execute("BEGIN IMMEDIATE")
        try:
            # again under the write lock: another process may have created the store since
            tables, marked = self._marks(conn)
            if marked is None:
                if tables:
                    self._refuse(tables)
                conn.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at INTEGER)")
            applied = marked or []
            self._refuse_newer(applied, known)
            for name, migrate in MIGRATIONS:
                if name not in applied:
                    migrate(conn)
                    conn.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, now_ms()))
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    @staticmethod
    def upgrades(path: str | os.PathLike[str]) -> list[str]:
        """The schema migrations opening the store in the file at ``path`` to write would apply:
        those of this release that the older one that wrote it did not know (older releases refuse
        the file once they are applied). None for a current store; none either for a newer one, a
        file that is no store or one that cannot be read now (opening it says why). Read-only, in
        one snapshot: nothing is written, not even the journal mode, nor a ``-wal`` or ``-shm``
        file beside it (a read-only connection makes them and leaves them). What a program that
        only reads asks before it opens a store, so as not to upgrade it."""
        file = Path(path).expanduser().absolute()
        uri = f"file://{quote(os.fsencode(file))}?mode=ro"
        # the main file alone (immutable: nothing made beside it), unless a -wal is there (a
        # process has the store open): it may hold the newest migrations
        wal = Path(f"{file}-wal").exists()
        applied = _migrations(uri if wal else uri + "&immutable=1")
        known = [name for name, _ in MIGRATIONS]
        if applied is None or not set(applied) <= set(known):
            return []
        return [name for name in known if name not in applied]

    def _refuse_newer(self, applied: list[str], known: list[str]) -> None:
        unknown = [name for name in applied if name not in known]
        if unknown:
            raise SchemaError(
                f"the SQLite store {self.path} has schema migrations this version of context_os"
                f" does not know ({', '.join(unknown)}): it was written by a newer context_os"
            )

    @staticmethod
    def _marks(conn: sqlite3.Connection) -> tuple[list[str], list[str] | None]:
        """The file's tables, and the schema migrations it records if it is a context_os store,
        else None, read in the caller's transaction (one snapshot: read apart, a store another
        process created between the two reads looked like another application's database). A
        store is known by its own marks only: a ``migrations`` table with a ``name`` column whose
        first row is our first migration, and that migration's tables (before 2026-12-02 any
        ``migrations`` table would do: a TypeORM database was switched to WAL mode, then refused
        as written by a newer context_os)."""
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
        if not set(tables) >= _STORE_TABLES:
            return tables, None
        if "name" not in {r[1] for r in conn.execute("PRAGMA table_info(migrations)")}:
            return tables, None
        names = [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY rowid")]
        return tables, names if names[:1] == [MIGRATIONS[0][0]] else None

    def _refuse(self, tables: list[str]) -> None:
        """Refuse a file that is not a context_os store: one that must exist already (``NotFound``),
        or another application's database, to which a store's tables are never added."""
        shown = ", ".join(tables[:5]) + (", …" if len(tables) > 5 else "")
        if not self._create:
            held = "it has none of its tables" if not _STORE_TABLES & set(tables) else f"it has the tables {shown}"
            raise NotFound(f"no store at {self.url}: {self.path} is not a context_os store ({held})")
        raise StoreError(
            f"{self.path} is an SQLite database but not a context_os store (it has the tables {shown}):"
            " a store is only created in a new or empty file"
        )

    @staticmethod
    def _read_indexed(conn: sqlite3.Connection) -> frozenset[str]:
        return frozenset(r[0] for r in conn.execute("SELECT name FROM indexed_keys"))

    def _index_keys(self, conn: sqlite3.Connection, names: Sequence[str]) -> bool:
        """Start indexing the meta attributes ``names``: index every stored version's value for
        them, in one write transaction. False if the file cannot be written (a read-only store
        is searched without the index; ``find`` checks every candidate anyway), or while another
        process keeps its write lock past ``FLUSH_WAIT_S`` (a find waited ``BUSY_TIMEOUT_S``, then
        failed with "database is locked", before 2026-12-02): a later find indexes them. After
        such a wait, finds for ``FLUSH_WAIT_S`` x 15 try without waiting (an MCP read, five
        finds, waited five times, 10 s, before 2026-12-02)."""
        waited = time.monotonic() >= self._index_busy_until
        try:
            if not text_index.begin_within(conn, self.FLUSH_WAIT_S if waited else 0.0):
                if waited:
                    self._index_busy_until = time.monotonic() + self.FLUSH_WAIT_S * 15
                return False
            try:
                self._indexed = self._read_indexed(conn)
                for name in names:
                    if name not in self._indexed:
                        self._backfill(conn, name)
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        except sqlite3.OperationalError as e:
            if "readonly" in str(e):
                return False
            raise
        self._indexed = self._indexed.union(names)
        return True

    @staticmethod
    def _backfill(conn: sqlite3.Connection, name: str) -> None:
        """Index ``name`` for every version ever stored, and record it as indexed."""
        key = name[len(_META_ATTR) :]
        rows: set[tuple[str, bytes, int]] = set()
        # json_each reads the values in C. An integer past 64 bits comes back as a float (typed
        # 'integer' or 'real'), and a string holding a NUL ends there, whose digests only the
        # document's own parse gets right.
        scan = (
            "SELECT DISTINCT v.eid, d.id, j.type, j.atom, instr(d.json, '\\u0000') FROM versions v"
            " JOIN docs d ON d.id = v.doc, json_each(d.json, '$.meta') j WHERE j.key = ?"
        )
        if "\x00" in key:  # so does a key: the documents that may hold it, each read in Python
            scan = (
                "SELECT DISTINCT v.eid, d.id, NULL, NULL, 1 FROM versions v JOIN docs d ON d.id = v.doc"
                " WHERE instr(d.json, '\\u0000') AND ? IS NOT NULL"
            )
        for eid, doc_ref, jtype, atom, nul in conn.execute(scan, (key,)).fetchall():
            if jtype in ("array", "object"):
                continue  # not scalars: never indexed
            if jtype is None or jtype == "real" or (jtype == "integer" and not isinstance(atom, int)) or nul:
                meta = json.loads(conn.execute("SELECT json FROM docs WHERE id = ?", (doc_ref,)).fetchone()[0])
                meta = meta.get("meta") if isinstance(meta, dict) else None
                if not isinstance(meta, dict) or key not in meta or isinstance(meta[key], dict | list):
                    continue
                atom = meta[key]
            elif jtype in ("true", "false"):
                atom = jtype == "true"
            if (iv := _indexed_value(atom)) is not None:
                rows.add((name, iv, eid))
        conn.executemany("INSERT OR IGNORE INTO attrs (name, value, eid) VALUES (?, ?, ?)", rows)
        conn.execute("INSERT INTO indexed_keys (name) VALUES (?)", (name,))

    @contextmanager
    def _translate(self, action: str) -> Iterator[None]:
        """Turn sqlite3 errors into the library's own, naming the file and the action."""
        try:
            yield
        except UnicodeEncodeError as e:  # a lone surrogate in an id, a kind or a value
            raise StoreError(f"SQLite store {self.path}: {action} failed: text that is not Unicode ({e})") from e
        except OverflowError as e:  # a time or tx id past SQLite's 64-bit integers
            raise StoreError(f"SQLite store {self.path}: {action} failed: a number too large for it ({e})") from e
        except sqlite3.Error as e:
            msg = str(e)
            where = f"SQLite store {self.path}: {action} failed: {msg}"
            if "malformed" in msg or "Could not decode to UTF-8" in msg:
                # a damaged file: a page that does not parse, stored text that is not UTF-8
                raise StoreCorrupt(f"SQLite store {self.path} is damaged: {action} failed: {msg}") from e
            if isinstance(e, sqlite3.OperationalError) and any(
                s in msg for s in ("unable to open", "locked", "busy", "disk I/O")
            ):
                raise StoreUnavailable(where) from e
            if "file is not a database" in msg:
                raise StoreError(f"{self.path} is not an SQLite database ({action} failed)") from e
            if "readonly" in msg:
                raise StoreError(f"SQLite store {self.path} is read-only: {action} failed") from e
            raise StoreError(where) from e

    @contextmanager
    def _connection(self, action: str) -> Iterator[sqlite3.Connection]:
        with self._lock, self._translate(action):
            if self._conn is None:
                raise StoreClosed(f"SQLite store {self.path} is closed")
            yield self._conn

    @contextmanager
    def _read(self, conn: sqlite3.Connection) -> Iterator[None]:
        """One read snapshot across several statements."""
        conn.execute("BEGIN")
        try:
            yield
        finally:
            if conn.in_transaction:  # an I/O error may have ended it
                conn.execute("COMMIT")

    def _now(self) -> int:
        return max(now_ms(), self._last_tx_time)

    # -- writes --------------------------------------------------------------------------------

    def submit(self, ops: Sequence[Op]) -> Tx:
        # Everything that can fail on bad input fails here, before the write lock is taken.
        prepared: dict[int, _PreparedDoc] = {}
        expected: dict[int, bytes] = {}  # canonical JSON of each match's expected doc
        for i, op in enumerate(ops):
            if isinstance(op, Put):
                prepared[i] = _prepare_doc(op.doc, op.json)
                check_time("valid_from", op.valid_from)
                check_time("valid_to", op.valid_to)
            elif isinstance(op, Delete):
                check_time("valid_from", op.valid_from)
                check_time("valid_to", op.valid_to)
            elif isinstance(op, Match):
                check_time("valid_time", op.valid_time)
                if op.expected is not None:
                    try:
                        expected[i] = _exact_json(op.expected).encode("utf-8")
                    except (TypeError, ValueError) as e:
                        raise StoreError(f"match on {op.id!r}: the expected document is not JSON: {e}") from e
            elif not isinstance(op, Evict):
                raise StoreError(f"unknown transaction operation {op!r}")
            if not isinstance(_op_id(op), str):
                raise StoreError(f"document ids are strings, got {_op_id(op)!r}")
        check_after_evict(ops)

        with self._connection("submit") as conn:
            # a damaged index that ended the transaction (SQLite rolls some damage back whole) is
            # dropped in a transaction of its own, and the write made again without it
            writer, tx_id, tx_time, committed = text_index.write_past_damage(
                conn, lambda: self._write(conn, ops, prepared, expected)
            )
            self._own.learn(writer, tx_id, bool(committed))
            self._check_wal()
            self._last_tx_time = max(self._last_tx_time, tx_time)
            self._known_tx = max(self._known_tx, tx_id)
            left_in_files = False
            if committed and any(isinstance(op, Evict) for op in ops):
                # Evict exists for leaked secrets. Free pages and old page images in the WAL may
                # still hold copies of what was erased: rebuild the file without them, then fold
                # the WAL back and truncate it. Evictions are rare; writes do not pay for this.
                # The transaction has committed: if the file cannot be rebuilt now (another
                # process keeps the write lock past the busy timeout, the disk is too full for a
                # copy of the file), the eviction stands and says what it left (it used to raise,
                # as if nothing had been evicted).
                left_in_files = not self._scrub(conn)
        return Tx(tx_id, tx_time, bool(committed), left_in_files=left_in_files)

    def _write(
        self,
        conn: sqlite3.Connection,
        ops: Sequence[Op],
        prepared: Mapping[int, _PreparedDoc],
        expected: Mapping[int, bytes],
    ) -> tuple[_TxWriter, int, int, bool]:
        """Write ``ops`` in one transaction under the write lock: the writer, the tx id and time,
        and whether it committed (a failed match records the tx, not its ops)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            last = conn.execute("SELECT id, time FROM txs ORDER BY id DESC LIMIT 1").fetchone()
            tx_id = 1 if last is None else last[0] + 1
            # XTDB's tx time never goes backwards, even if the wall clock does.
            tx_time = now_ms() if last is None else max(now_ms(), last[1])
            if prepared:
                self._indexed = self._read_indexed(conn)
            # The keyword index is written here, in this transaction, unless it was dropped
            # (``rebuild_index`` brings it back, and reads scan meanwhile).
            text = any(isinstance(op, Put | Evict) for op in ops) and self._text_ready(conn)
            # only a failed match undoes the ops (the tx is then recorded, not committed)
            matches = any(isinstance(op, Match) for op in ops)
            if matches:
                conn.execute("SAVEPOINT ops")
            self._own.check(None if last is None else last[0])
            writer = _TxWriter(conn, tx_id, tx_time, self._indexed, text=text, own=self._own)
            committed = writer.run(ops, prepared, expected)
            if not committed:
                conn.execute("ROLLBACK TO ops")
            # (once a batch is pending; not once a damaged index was dropped on the way)
            elif writer.text and text_index.flush_held(conn) and writer.text_removed:
                # no evicted term may stay behind in an old segment
                text_index.fts_step(conn, lambda: text_index.purge(conn))
            if matches:
                conn.execute("RELEASE ops")
            conn.execute("INSERT INTO txs (id, time, committed) VALUES (?, ?, ?)", (tx_id, tx_time, committed))
            conn.execute("COMMIT")
        except BaseException:
            self._own.forget()
            _rollback(conn)
            raise
        return writer, tx_id, tx_time, committed

    def _check_wal(self) -> None:
        """After a commit: a WAL over ``CHECKPOINT_BYTES`` is folded back by the checkpointer's
        thread; while it still is (writes went on meanwhile), again once it grew by a quarter."""
        checkpointer = self._checkpointer
        try:
            size = os.stat(f"{self.path}-wal").st_size
        except OSError:
            return
        # Past ``WAL_MOST`` times the size, the writer outran the thread (a disk slower to sync
        # than the writes come): this commit waits for the thread's copy to end and copies the
        # rest itself, as SQLite's own checkpoint would, so the WAL has a bound.
        behind = size > self.WAL_MOST * self.CHECKPOINT_BYTES
        if (checkpointer.finish or behind) and checkpointer.lock.acquire(blocking=behind):
            try:  # what was committed while the thread copied the rest: the WAL can then start over
                checkpointer.finish = False
                assert self._conn is not None
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error as e:  # the transaction has committed: it stands, the WAL waits
                log.debug("SQLite store %s: a checkpoint failed: %s", self.path, e)
            finally:
                checkpointer.lock.release()
        if size <= self.CHECKPOINT_BYTES:
            self._checkpoint_at = self.CHECKPOINT_BYTES  # started over
        elif size > self._checkpoint_at:
            self._checkpoint_at = size + self.CHECKPOINT_BYTES // 4
            checkpointer.due()

    def scrub(self) -> bool:
        if self.read_only:
            raise StoreError(f"SQLite store {self.path} is read-only: its file cannot be rebuilt")
        with self._connection("rebuild") as conn:
            return self._scrub(conn)

    def _scrub(self, conn: sqlite3.Connection) -> bool:
        """Rebuild the file without the free pages that may hold what was evicted, then fold the
        WAL back; False if it could not (``_fold_back_wal``; or the rebuild failed: another process
        kept the write lock past the busy timeout, the disk is too full for a copy of the file)."""
        with self._checkpointer.lock:
            try:
                conn.execute("VACUUM")
                return self._fold_back_wal(conn)
            except sqlite3.OperationalError:
                _rollback(conn)
                return False

    def _fold_back_wal(self, conn: sqlite3.Connection) -> bool:
        """Copy the whole WAL into the file and truncate it; False if a reader of an older
        snapshot kept it from finishing within ``SCRUB_WAIT_S`` (the old pages are still there).
        The checkpoint waits for readers holding the write lock, so it must give up before a
        writer queued behind it does (which would fail that writer's turn)."""
        conn.execute(f"PRAGMA busy_timeout={int(self.SCRUB_WAIT_S * 1000)}")
        try:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            conn.execute(f"PRAGMA busy_timeout={int(self.BUSY_TIMEOUT_S * 1000)}")
        return not busy

    # -- reads ---------------------------------------------------------------------------------

    def _read_basis(self, valid_time: int | None, tx_id: int | None) -> tuple[int, int]:
        """The valid time and transaction a read is as of: now and the newest by default."""
        check_time("valid_time", valid_time)
        _check_tx("tx_id", tx_id)
        return self._now() if valid_time is None else valid_time, _MAX if tx_id is None else tx_id

    def _check_basis(self, conn: sqlite3.Connection, tx_id: int | None) -> None:
        """Reading as of a transaction that does not exist yet is an error, as on XTDB."""
        if tx_id is None or tx_id <= self._known_tx:
            return
        newest = conn.execute("SELECT max(id) FROM txs").fetchone()[0]
        if newest is not None:
            self._known_tx = max(self._known_tx, newest)
        if newest is None or tx_id > newest:
            raise StoreError(f"tx {tx_id} is past the newest transaction ({newest}) of {self.url}")

    def get(self, id: str, valid_time: int | None = None, tx_id: int | None = None) -> Version | None:
        vt, tx = self._read_basis(valid_time, tx_id)
        with self._connection("get") as conn:
            self._check_basis(conn, tx_id)
            row = conn.execute(
                "SELECT v.valid_time, v.tx_id, t.time, v.doc, d.json FROM entities e"
                " JOIN versions v ON v.eid = e.eid JOIN txs t ON t.id = v.tx_id"
                " LEFT JOIN docs d ON d.id = v.doc"
                " WHERE e.id = ? AND v.valid_time <= ? AND v.tx_id <= ?"
                " ORDER BY v.valid_time DESC, v.tx_id DESC LIMIT 1",
                (id, vt, tx),
            ).fetchone()
        if row is None or row[3] is None:
            return None  # never written, or deleted at that time
        return Version(id, row[0], row[1], row[2], _load(row[4], id, row[1], self.path))

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
        check_time("start_valid_time", start_valid_time)
        check_time("end_valid_time", end_valid_time)
        _check_tx("start_tx_id", start_tx_id)
        _check_tx("end_tx_id", end_tx_id)
        # As in XTDB, history is read from a db "now": it never shows valid times after now
        # (asc ends there, desc starts there) nor transactions after the latest.
        now = self._now()
        doc_col = "d.json" if with_docs else "NULL"
        join = " LEFT JOIN docs d ON d.id = v.doc" if with_docs else ""
        base = (
            f"SELECT v.valid_time, v.tx_id, t.time, v.doc, {doc_col} FROM entities e"
            f" JOIN versions v ON v.eid = e.eid JOIN txs t ON t.id = v.tx_id{join}"
        )
        if order == "asc":
            # starts inclusive, ends exclusive
            vt_lo = _MIN if start_valid_time is None else start_valid_time
            vt_hi = now + 1 if end_valid_time is None else min(end_valid_time, now + 1)
            tx_lo = _MIN if start_tx_id is None else start_tx_id
            tx_hi = _MAX if end_tx_id is None else end_tx_id
            sql = (
                base + " WHERE e.id = ? AND v.valid_time >= ? AND v.valid_time < ?"
                " AND v.tx_id >= ? AND v.tx_id < ? ORDER BY v.valid_time ASC, v.tx_id "
                + ("ASC" if with_corrections else "DESC")  # without: the first of a valid time stays
            )
            params = (id, vt_lo, vt_hi, tx_lo, tx_hi)
        else:
            # descending: the start is the upper bound (inclusive), the end the lower (exclusive)
            vt_hi = now if start_valid_time is None else min(start_valid_time, now)
            vt_lo = _MIN if end_valid_time is None else end_valid_time
            tx_hi = _MAX if start_tx_id is None else start_tx_id
            tx_lo = _MIN if end_tx_id is None else end_tx_id
            sql = (
                base + " WHERE e.id = ? AND v.valid_time <= ? AND v.valid_time > ?"
                " AND v.tx_id <= ? AND v.tx_id > ? ORDER BY v.valid_time DESC, v.tx_id DESC"
            )
            params = (id, vt_hi, vt_lo, tx_hi, tx_lo)
        with self._connection("history") as conn:
            rows = conn.execute(sql, params).fetchall()
        out: list[Version] = []
        last_vt: int | None = None
        for vt, tx, tx_time, doc_ref, text in rows:
            if vt == last_vt and not with_corrections:
                continue  # an older correction of the same valid time (rows come newest tx first)
            last_vt = vt
            doc = _load(text, id, tx, self.path) if with_docs and doc_ref is not None else None
            out.append(Version(id, vt, tx, tx_time, doc, deleted=doc_ref is None))
        return out

    def find(
        self,
        kind: str | None = None,
        where: Mapping[str, Any] | None = None,
        *,
        valid_time: int | None = None,
        tx_id: int | None = None,
        docs: DocMemo | None = None,
    ) -> list[Version]:
        where = check_find(kind, where)
        vt, tx = self._read_basis(valid_time, tx_id)
        with self._translate("find"):
            # a string equals a value's canonical JSON only if the value is that same string
            try:
                wanted = {k: v if isinstance(v, str) else _Canonical(_value_key(v)) for k, v in where.items()}
            except HashError as e:  # NaN, a key that is not a string, an integer too long to write
                raise StoreError(f"find: a where value cannot be compared: {e}") from e
            # Candidates come from the index: entities that ever had every indexable criterion.
            # A meta value usually narrows far more than the kind, so it drives the lookup.
            criteria = [(_META_ATTR + k, iv) for k, v in where.items() if (iv := _indexed_value(v)) is not None]
        with self._connection("find") as conn:
            self._check_basis(conn, tx_id)
            new = [name for name, _ in criteria if name not in self._indexed]
            if new and not self._index_keys(conn, new):
                criteria = [c for c in criteria if c[0] in self._indexed]
            by_kind = (_KIND_ATTR, ik) if kind is not None and (ik := _indexed_value(kind)) is not None else None
            if criteria or by_kind is not None:
                criteria = _rarest_first(conn, criteria, by_kind)
                first, *rest = criteria
                candidates = "SELECT a.eid FROM attrs a WHERE a.name = ? AND a.value = ?" + "".join(
                    " AND EXISTS (SELECT 1 FROM attrs b WHERE b.name = ? AND b.value = ? AND b.eid = a.eid)"
                    for _ in rest
                )
                params: list[Any] = [x for pair in (first, *rest) for x in pair]
            else:
                candidates = "SELECT eid FROM entities"
                params = []
            sql = (
                f"WITH c(eid) AS ({candidates})"
                " SELECT e.id, v.valid_time, v.tx_id, t.time, d.hash, {} FROM c"
                f" JOIN versions v ON v.eid = c.eid AND {_IN_FORCE}"
                " JOIN entities e ON e.eid = c.eid LEFT JOIN docs d ON d.id = v.doc JOIN txs t ON t.id = v.tx_id"
                " WHERE v.doc IS NOT NULL ORDER BY e.id"
            )
            if docs is None:
                rows = conn.execute(sql.format("d.json"), (*params, vt, tx)).fetchall()
            else:
                # A reader through a memo has read most of these documents before: their texts
                # are not copied out again, only the ones it has not parsed yet (one snapshot).
                with self._read(conn):
                    rows = conn.execute(sql.format("NULL"), (*params, vt, tx)).fetchall()
                    unknown = list({stored for *_, stored, _ in rows if stored not in docs})
                    texts = dict(self._doc_texts(conn, unknown))
                rows = [(*row[:5], texts.get(row[4])) for row in rows]
        out: list[Version] = []
        for doc_id, v_time, v_tx, tx_time, stored, text in rows:
            # a document's key in ``docs`` hashes its text (a row id can be used again after an evict)
            doc = docs.get(stored) if docs is not None else None
            if doc is None:
                doc = _load(text, doc_id, v_tx, self.path)
                if docs is not None:
                    docs[stored] = doc
            # The index says some version matched; check the version actually in force.
            if kind is not None and doc.get("kind") != kind:
                continue
            meta = doc.get("meta")
            if wanted and not (
                isinstance(meta, Mapping)
                and all(k in meta and _same_value(meta[k], want) for k, want in wanted.items())
            ):
                continue
            out.append(Version(doc_id, v_time, v_tx, tx_time, doc))
        return out

    def ids(self, *, valid_time: int | None = None, tx_id: int | None = None) -> list[str]:
        # the entities with a version in force, from the versions table alone: no document read
        vt, tx = self._read_basis(valid_time, tx_id)
        with self._connection("ids") as conn:
            self._check_basis(conn, tx_id)
            rows = conn.execute(
                f"SELECT c.id FROM entities c JOIN versions v ON v.eid = c.eid AND {_IN_FORCE}"
                " WHERE v.doc IS NOT NULL ORDER BY c.id",
                (vt, tx),
            ).fetchall()
        return [id for (id,) in rows]

    @staticmethod
    def _doc_texts(conn: sqlite3.Connection, hashes: list[bytes]) -> Iterator[tuple[bytes, str]]:
        """The stored texts of the documents with these hashes (in batches within SQLite's
        limit on parameters)."""
        for i in range(0, len(hashes), 500):
            batch = hashes[i : i + 500]
            yield from conn.execute(f"SELECT hash, json FROM docs WHERE hash IN ({','.join('?' * len(batch))})", batch)

    def count_kinds(self, *, valid_time: int | None = None, tx_id: int | None = None) -> dict[str | None, int]:
        # counted in SQL over each entity's version in force, no document parsed in Python but
        # those holding a NUL, where SQLite's JSON functions end a string (its kind may hold one)
        vt, tx = self._read_basis(valid_time, tx_id)
        with self._connection("count_kinds") as conn:
            self._check_basis(conn, tx_id)
            rows = conn.execute(
                "SELECT CASE WHEN instr(d.json, '\\u0000') THEN d.json"
                " WHEN json_type(d.json, '$.kind') = 'text' THEN json_extract(d.json, '$.kind') END AS k,"
                # (a document's whole text is its own group: it holds its id)
                " instr(d.json, '\\u0000') > 0, c.id, v.tx_id, count(*) FROM entities c"
                f" JOIN versions v ON v.eid = c.eid AND {_IN_FORCE} JOIN docs d ON d.id = v.doc GROUP BY k",
                (vt, tx),
            ).fetchall()
        counts: dict[str | None, int] = {}
        for k, whole, doc_id, doc_tx, n in rows:
            if whole:
                kind = _load(k, doc_id, doc_tx, self.path).get("kind")
                k = kind if isinstance(kind, str) else None
            counts[k] = counts.get(k, 0) + n
        return counts

    # -- the keyword index ----------------------------------------------------------------------

    def _text_search(self, args: text_index.SearchArgs) -> list[TextHit]:
        """Over the FTS5 index this file keeps with its versions; a scan when the index is
        missing, damaged or being rebuilt (``index_status`` says which)."""
        tx_id = args.tx_id
        vt, tx = self._read_basis(args.valid_time, tx_id)
        with self._connection("text search") as conn:
            self._check_basis(conn, tx_id)
            if args.match is None:
                return []
            try:
                if not self.read_only and self._text_ready(conn):
                    self._flush_fts(conn)
                with self._read(conn):
                    if self._text_ready(conn) and text_index.index_state(conn) == "ok":
                        return self._indexed_hits(conn, args, vt, tx)
            except text_index.FTS_ERRORS:
                pass  # a damaged index: answer by scanning, below; rebuild_index repairs it
        return text_index.scan_search(self, args)

    def _indexed_hits(self, conn: sqlite3.Connection, args: text_index.SearchArgs, vt: int, tx: int) -> list[TextHit]:
        # A candidate is a text some version of its entity had; it is a hit if the version in
        # force holds it. Checked on the stored document itself (read once per document), so
        # writes pay for no document → parts table.
        in_force: dict[int, tuple[int, int, int | None] | None] = {}
        doc_parts: dict[int, tuple[str, dict[str, str]]] = {}
        hits: list[TextHit] = []
        with closing(text_index.ranked(conn, args)) as candidates:
            for c in candidates:
                if c.eid not in in_force:
                    in_force[c.eid] = conn.execute(
                        "SELECT valid_time, tx_id, doc FROM versions WHERE eid = ? AND valid_time <= ? AND tx_id <= ?"
                        " ORDER BY valid_time DESC, tx_id DESC LIMIT 1",
                        (c.eid, vt, tx),
                    ).fetchone()
                row = in_force[c.eid]
                if row is None or (ref := row[2]) is None:
                    continue  # not in force then (not yet written, or deleted)
                v_time, v_tx = row[0], row[1]
                if ref not in doc_parts:
                    text = conn.execute("SELECT json FROM docs WHERE id = ?", (ref,)).fetchone()
                    doc = _load(None if text is None else text[0], c.id, v_tx, self.path)
                    doc_parts[ref] = (str(doc.get("object_hash") or ""), dict(text_index.index_parts(doc)))
                object_hash, parts = doc_parts[ref]
                if parts.get(c.part) != c.text:
                    continue  # another version's text
                hits.append(TextHit(c.id, c.kind, c.part, v_time, v_tx, object_hash, c.session, c.text, c.score))
                if len(hits) == args.k:
                    break
        return hits

    def _flush_fts(self, conn: sqlite3.Connection) -> None:
        """Move the parts still held back into the FTS5 table before a search reads it. When
        another process keeps the write lock past ``FLUSH_WAIT_S``, the search goes on without:
        it matches them in a temporary index of their own, as a read-only store does (it had
        waited ``BUSY_TIMEOUT_S``, then taken the lock's error for a damaged index and scanned
        every version without stemming: ``run test`` found nothing of "running the tests")."""
        done, top = text_index.fts_pending(conn)
        if top <= done:
            return
        if not text_index.begin_within(conn, self.FLUSH_WAIT_S):
            return  # matched apart (text_index.ranked)
        try:
            text_index.flush_fts(conn, force=True)
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def _text_ready(self, conn: sqlite3.Connection) -> bool:
        """Whether the keyword index's tables are all there (to write to; to read, its state
        must also be ok). Read again only when the schema changed (a drop, a rebuild)."""
        version = conn.execute("PRAGMA schema_version").fetchone()[0]
        if self._text_schema[0] != version:
            self._text_schema = (version, text_index.tables_present(conn))
        return self._text_schema[1]

    def _text_parts(self, after_seq: int, limit: int) -> list[TextPart]:
        with self._connection("text parts") as conn, self._read(conn):
            if not self._text_ready(conn):
                return []
            return text_index.parts_after(conn, after_seq, limit)

    def index_status(self) -> dict[str, Any]:
        checked = False
        with self._connection("index status") as conn:
            latest = conn.execute("SELECT max(id) FROM txs").fetchone()[0]
            state, problem = text_index.state_and_damage(conn)
            counts = {"parts": 0, "documents": 0, "last_seq": 0}
            if problem is None and state != "missing":
                try:
                    counts = text_index.index_counts(conn)
                    if not self.read_only:  # (a read-only store cannot run FTS5's check)
                        checked, problem = text_index.checked_problem(conn, self.FLUSH_WAIT_S)
                except text_index.FTS_ERRORS as e:
                    checked, problem = True, str(text_index.damaged_fts(e) or e)
                if problem is not None:
                    state = "corrupt"
        out: dict[str, Any] = {
            "backend": "sqlite-fts5",
            "state": state,
            **counts,
            "last_indexed_tx": latest if state == "ok" else None,
            "store_tx": latest,
            "lags": state != "ok",
            "search": "index" if state == "ok" else "scan",
            "tokenizer": text_index.TOKENIZER,
            "checked": checked,
        }
        if problem is not None:
            out["problem"] = problem
        return out

    REBUILD_BATCH = 500
    """Documents indexed per write transaction of ``rebuild_index`` (writers wait no longer)."""

    def rebuild_index(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Drop the keyword index and index every stored document again, in batches, each its
        own transaction (writers go on meanwhile, their writes indexed as usual). Searches scan
        until it is done. A rebuild cut short is resumed by the next one."""
        if self.read_only:
            raise StoreError(f"SQLite store {self.path} is read-only: the keyword index cannot be rebuilt")
        with self._connection("rebuild index") as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                resume = self._text_ready(conn) and text_index.index_state(conn) == "building"
                if resume:
                    try:
                        resume = text_index.fts_problem(conn) is None
                    except text_index.FTS_ERRORS:
                        resume = False
                if not resume:
                    text_index.renew_tables(conn, state="building")
                    text_index.set_meta(conn, "rebuild_after", 0)
                after = int(text_index.meta_value(conn, "rebuild_after") or 0)
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        while True:
            with self._connection("rebuild index") as conn:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    batch = conn.execute(_DOCS_AFTER, (after, _INDEXED_KINDS_JSON, self.REBUILD_BATCH)).fetchall()
                    if batch:
                        _index_docs(conn, batch)
                        text_index.flush_fts(conn, force=True)
                        after = batch[-1][0]
                        text_index.set_meta(conn, "rebuild_after", after)
                    else:
                        text_index.set_meta(conn, "state", "ok")
                        conn.execute("DELETE FROM text_meta WHERE key = 'rebuild_after'")
                    done, total = conn.execute(
                        "SELECT count(*) FILTER (WHERE id <= ?), count(*) FROM docs", (after,)
                    ).fetchone()
                    parts: int = conn.execute("SELECT count(*) FROM text_parts WHERE eid != 0").fetchone()[0]
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
            if progress is not None:
                progress(done if batch else total, total)
            if not batch:
                return parts

    def latest_tx(self) -> Tx | None:
        with self._connection("latest_tx") as conn:
            row = conn.execute("SELECT id, time, committed FROM txs ORDER BY id DESC LIMIT 1").fetchone()
        return None if row is None else Tx(row[0], row[1], bool(row[2]))

    def stats(self) -> dict[str, Any]:
        with self._connection("stats") as conn, self._read(conn):
            entities = conn.execute("SELECT COUNT(*) FROM entities").fetchone()[0]
            versions = conn.execute("SELECT COUNT(*) FROM versions").fetchone()[0]
            docs = conn.execute("SELECT COUNT(*) FROM docs").fetchone()[0]
            txs = conn.execute("SELECT COUNT(*) FROM txs").fetchone()[0]
        wal = self.path.with_name(self.path.name + "-wal")
        return {
            "backend": "sqlite",
            "path": str(self.path),
            "size_bytes": self.path.stat().st_size if self.path.exists() else 0,
            "wal_bytes": wal.stat().st_size if wal.exists() else 0,
            "entities": entities,
            "versions": versions,
            "distinct_docs": docs,  # document bodies stored, each once (versions share them)
            "txs": txs,
        }

    def check(self) -> list[str]:
        """SQLite's own ``PRAGMA integrity_check`` (pages, B-tree order, indexes matching their
        tables), then every stored version's document: it must exist and parse as a JSON object."""
        with self._connection("integrity check") as conn, self._read(conn):
            result = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
            problems = [] if result == ["ok"] else [f"integrity_check: {r}" for r in result]
            # ids as bytes: damaged text may not even be UTF-8
            damaged = conn.execute(
                "SELECT CAST(e.id AS BLOB), v.tx_id, v.valid_time, d.id IS NULL FROM versions v"
                " LEFT JOIN docs d ON d.id = v.doc LEFT JOIN entities e ON e.eid = v.eid"
                " WHERE v.doc IS NOT NULL"
                " AND (d.id IS NULL OR CASE WHEN json_valid(d.json) THEN json_type(d.json) != 'object' ELSE 1 END)"
                " ORDER BY v.eid, v.valid_time, v.tx_id"
            ).fetchall()
        for raw_id, tx_id, valid_time, missing in damaged:
            doc_id = "(unknown id)" if raw_id is None else repr(bytes(raw_id).decode("utf-8", "replace"))
            what = "is missing" if missing else "does not parse as a JSON object"
            problems.append(
                f"{doc_id} at tx {tx_id} (valid time {_shown_time(valid_time)}): its stored document {what}"
            )
        return problems

    def reader(self) -> Callable[[], Store]:
        # the file, read-only: every transaction committed is there for another process to read
        return functools.partial(SqliteStore, self.path, create=False, read_only=True)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._checkpointer.stop()  # first: the store's connection is to be the last one
                conn, self._conn = self._conn, None
                with self._translate("close"):
                    conn.close()


class _TxWriter:
    """Computes and writes the version rows of one transaction, op by op, as XTDB's indexer does.

    Each op sees the effects of the ops before it in the same transaction (XTDB indexes them
    into the same in-flight snapshot). Rows are buffered and written with one ``executemany``;
    the buffer is flushed before any op that must read an entity the buffer touches.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        tx_id: int,
        tx_time: int,
        indexed: frozenset[str],
        *,
        text: bool = False,
        own: _OwnWrites | None = None,
    ) -> None:
        self.conn = conn
        self.own = own or _OwnWrites()  # what the store's own last transactions told it
        # The newest valid time of the rows of each entity this tx wrote: a put at or after it
        # has nothing to read first.
        self.newest_vt: dict[int, int] = {}
        self.evicted: dict[str, int] = {}
        self.indexed = indexed
        self.text = text  # whether the keyword index is there to keep up to date
        self.text_removed = False  # an evict took parts out of it (its segments need a merge)
        self.tx_id = tx_id
        self.tx_time = tx_time
        self.eids: dict[str, int] = {}
        # Entities created by this tx and not yet written to: they have no rows to read.
        self.fresh: set[int] = set()
        self.pending: list[tuple[int, int, int, int | None]] = []
        self.pending_eids: set[int] = set()
        self.attrs: set[tuple[str, bytes, int]] = set()
        # Docs this tx inserted, per entity: a later op of the same tx may overwrite the row
        # that references one (same valid time), and an unreferenced doc must not linger
        # (it could be the very secret a later evict is meant to erase).
        self.new_docs: dict[int, list[int]] = {}
        self.writes: dict[int, int] = {}  # puts and deletes per entity in this tx

    def run(self, ops: Sequence[Op], prepared: Mapping[int, _PreparedDoc], expected: Mapping[int, bytes]) -> bool:
        """Apply ``ops``; False (and stop) at the first failed match."""
        self._resolve_ids(ops)
        for i, op in enumerate(ops):
            if self._empty_range(op):
                continue  # XTDB indexes nothing for it, so no doc, rows or entity here either
            if isinstance(op, Put):
                doc = prepared[i]
                eid = self._eid(op.doc["id"], create=True)
                assert eid is not None
                doc_ref = self._doc_ref(eid, doc)
                if self.text and doc_ref in self.new_docs.get(eid, ()):
                    # A document stored before has its parts already; of a new one (a chat page
                    # rewritten), only the texts this entity never had are indexed.
                    text_index.add_parts(self.conn, eid, doc.doc)
                self.attrs.update((name, value, eid) for name, value in _doc_attrs(doc.doc, self.indexed))
                self._put(eid, op.valid_from, op.valid_to, doc_ref)
            elif isinstance(op, Delete):
                eid = self._eid(op.id, create=True)
                assert eid is not None
                self._put(eid, op.valid_from, op.valid_to, None)
            elif isinstance(op, Match):
                if not self._matches(op, expected.get(i)):
                    return False
            else:
                self._evict(op.id)
        self._flush()
        self._drop_orphans()
        if self.attrs:
            self.conn.executemany("INSERT OR IGNORE INTO attrs (name, value, eid) VALUES (?, ?, ?)", self.attrs)
        return True

    def _empty_range(self, op: Op) -> bool:
        if not isinstance(op, Put | Delete) or op.valid_to is None:
            return False
        return op.valid_to == (self.tx_time if op.valid_from is None else op.valid_from)

    # -- ids and documents -------------------------------------------------------------------

    def _resolve_ids(self, ops: Sequence[Op]) -> None:
        """Look up (and create) every entity the ops write: the store's own last transaction
        left it most of their eids; a new one is created (its eid is the row's); the others
        (written by another process, or only matched) are read in one statement."""
        ids = {_op_id(op): None for op in ops}
        self.eids = {i: self.own.eids[i] for i in ids if i in self.own.eids}
        for op in ops:
            i = _op_id(op)
            if isinstance(op, Put | Delete) and i not in self.eids and not self._empty_range(op):
                cur = self.conn.execute("INSERT OR IGNORE INTO entities (id) VALUES (?)", (i,))
                if cur.rowcount == 1 and cur.lastrowid is not None:
                    self.eids[i] = cur.lastrowid
                    self.fresh.add(cur.lastrowid)
        unknown = [i for i in ids if i not in self.eids]
        # as parameters, not through json_each, whose strings end at a NUL (an id holding one was
        # not found: its new version failed on the unique id, a match on it failed)
        for n in range(0, len(unknown), 500):  # within SQLite's limit on parameters
            batch = unknown[n : n + 500]
            select = f"SELECT id, eid FROM entities WHERE id IN ({','.join('?' * len(batch))})"
            self.eids.update(self.conn.execute(select, batch).fetchall())

    def _eid(self, doc_id: str, *, create: bool) -> int | None:
        eid = self.eids.get(doc_id)
        if eid is None and create:  # only after an evict of the same id earlier in this tx
            eid = self.conn.execute("INSERT INTO entities (id) VALUES (?)", (doc_id,)).lastrowid
            assert eid is not None
            self.eids[doc_id] = eid
            self.fresh.add(eid)
        return eid

    def _doc_ref(self, eid: int, doc: _PreparedDoc) -> int:
        key = _dedup_key(eid, doc.hash)
        cur = self.conn.execute("INSERT OR IGNORE INTO docs (hash, json) VALUES (?, ?)", (key, doc.json))
        if cur.rowcount == 1 and cur.lastrowid is not None:
            self.new_docs.setdefault(eid, []).append(cur.lastrowid)
            return cur.lastrowid
        row = self.conn.execute("SELECT id FROM docs WHERE hash = ?", (key,)).fetchone()
        ref: int = row[0]
        return ref

    def _drop_orphans(self) -> None:
        """Delete docs this tx inserted that no row references any more."""
        for eid, refs in self.new_docs.items():
            if self.writes.get(eid, 0) < 2:
                continue  # a lone put's rows are all still there
            for ref in refs:
                used = "SELECT 1 FROM versions WHERE eid = ? AND doc = ? LIMIT 1"
                if self.conn.execute(used, (eid, ref)).fetchone() is None:
                    self.conn.execute("DELETE FROM docs WHERE id = ?", (ref,))

    # -- reading the state this tx builds on --------------------------------------------------

    def _flush(self) -> None:
        if self.pending:
            self.conn.executemany(
                "INSERT OR REPLACE INTO versions (eid, valid_time, tx_id, doc) VALUES (?, ?, ?, ?)",
                self.pending,
            )
            self.pending.clear()
            self.fresh -= self.pending_eids
            self.pending_eids.clear()

    def _newest(self, eid: int) -> int | None:
        """The newest valid time of ``eid``'s rows (None: it has none): as this tx left it, as
        the store's own last transaction did, or read."""
        if eid in self.newest_vt:
            return self.newest_vt[eid]
        if eid in self.fresh:
            return None  # created by this tx, and no put of this tx wrote it yet
        if eid in self.own.newest_vt:
            return self.own.newest_vt[eid]
        row = self.conn.execute("SELECT max(valid_time) FROM versions WHERE eid = ?", (eid,)).fetchone()
        return None if row[0] is None else int(row[0])

    def _readable(self, eid: int) -> bool:
        """Prepare to read ``eid``'s rows; False if it certainly has none."""
        if eid in self.pending_eids:
            self._flush()
            return True
        return eid not in self.fresh

    def _as_of(self, eid: int, vt: int) -> _Row | None:
        """The row in force at ``vt`` (every tx so far, this one included)."""
        if not self._readable(eid):
            return None
        row = self.conn.execute(
            "SELECT valid_time, tx_id, doc FROM versions WHERE eid = ? AND valid_time <= ?"
            " ORDER BY valid_time DESC, tx_id DESC LIMIT 1",
            (eid, vt),
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def _history(self, eid: int, vt: int, order: Literal["asc", "desc"]) -> Iterator[_Row]:
        """Latest-correction rows from ``vt`` (inclusive) onwards in ``order``, lazily."""
        if not self._readable(eid):
            return
        cmp, direction = (">=", "ASC") if order == "asc" else ("<=", "DESC")
        cur = self.conn.execute(
            f"SELECT valid_time, tx_id, doc FROM versions WHERE eid = ? AND valid_time {cmp} ?"
            f" ORDER BY valid_time {direction}, tx_id DESC",
            (eid, vt),
        )
        try:
            last_vt: int | None = None
            for row_vt, row_tx, row_doc in cur:
                if row_vt != last_vt:
                    last_vt = row_vt
                    yield (row_vt, row_tx, row_doc)
        finally:
            cur.close()

    # -- the operations ------------------------------------------------------------------------

    def _put(self, eid: int, valid_from: int | None, valid_to: int | None, doc_ref: int | None) -> None:
        """Rows for a put (``doc_ref``) or a delete (None), as ``xtdb.tx/put-delete-coords``."""
        start = self.tx_time if valid_from is None else valid_from
        newest = self._newest(eid)
        rows: list[_Row] = []
        if valid_to is not None:
            # Everything from valid_to back to (not including) start, newest first.
            before_end = list(self._history(eid, valid_to, "desc"))
            vts = [start] + [r[0] for r in before_end if r[0] > start]
            rows = [(v, self.tx_id, doc_ref) for v in vts if v != valid_to]
            if before_end:
                # What held at valid_to resumes there, keeping its original tx id (XTDB does
                # exactly this: it re-indexes the old entity-tx at the new valid time).
                _vt, old_tx, old_doc = before_end[0]
                rows.append((valid_to, old_tx, old_doc))
            else:
                rows.append((valid_to, self.tx_id, None))
        else:
            rows.append((start, self.tx_id, doc_ref))
            # with no row after start there is nothing the new doc continues into
            visible = None if newest is None or newest <= start else self._as_of(eid, start)
            if visible is not None and visible[2] is not None:
                # The visible version may continue past start as copies written by the same tx
                # (a range put writes one row per boundary): the new doc replaces those too,
                # so it holds until the next real change. Not for a visible deletion: XTDB
                # compares entity-txs, and its as-of read gives a deletion a nil content hash
                # where its history gives the nil-id hash, so they never compare equal.
                for row_vt, row_tx, row_doc in self._history(eid, start, "asc"):
                    if (row_tx, row_doc) != (visible[1], visible[2]):
                        break
                    if row_vt != start:
                        rows.append((row_vt, self.tx_id, doc_ref))
        self.pending.extend((eid, v, t, d) for v, t, d in rows)
        self.newest_vt[eid] = max([v for v, _, _ in rows] + ([] if newest is None else [newest]))
        self.writes[eid] = self.writes.get(eid, 0) + 1
        self.pending_eids.add(eid)

    def _matches(self, op: Match, expected: bytes | None) -> bool:
        """Whether the doc in force at the match's valid time is exactly ``expected`` (types
        included: XTDB does not match 1.0 against 1)."""
        eid = self._eid(op.id, create=False)
        row = None
        if eid is not None:
            row = self._as_of(eid, self.tx_time if op.valid_time is None else op.valid_time)
        if row is None or row[2] is None:
            return expected is None
        if expected is None:
            return False
        text = self.conn.execute("SELECT json FROM docs WHERE id = ?", (row[2],)).fetchone()[0]
        return bool(text.encode("utf-8") == expected)

    def _evict(self, doc_id: str) -> None:
        eid = self._eid(doc_id, create=False)
        if eid is None:
            return
        self._flush()
        referenced = "SELECT DISTINCT doc FROM versions WHERE eid = ? AND doc IS NOT NULL"
        refs = {r[0] for r in self.conn.execute(referenced, (eid,))} | set(self.new_docs.pop(eid, []))
        # A stored doc carries its own id, so its doc rows belong to this entity alone, and
        # its attrs can be recomputed from it rather than found by scanning the index.
        attrs = {a for a in self.attrs if a[2] == eid}
        for ref in refs:
            row = self.conn.execute("SELECT json FROM docs WHERE id = ?", (ref,)).fetchone()
            try:
                doc = json.loads(row[0]) if row is not None else None
            except (ValueError, RecursionError):
                doc = None
            if not isinstance(doc, dict):
                # damaged: its index rows cannot be computed from it, so find them by entity
                attrs.update(self.conn.execute("SELECT name, value, eid FROM attrs WHERE eid = ?", (eid,)))
                continue
            attrs.update((name, value, eid) for name, value in _doc_attrs(doc))
        self.conn.executemany("DELETE FROM attrs WHERE name = ? AND value = ? AND eid = ?", attrs)
        self.attrs -= attrs
        self.conn.execute("DELETE FROM versions WHERE eid = ?", (eid,))
        self.conn.executemany("DELETE FROM docs WHERE id = ?", [(r,) for r in refs])
        if self.text:
            removed = text_index.fts_step(self.conn, lambda: text_index.remove_entity(self.conn, eid))
            self.text_removed = self.text_removed or bool(removed)
            self.text = removed is not None  # a damaged index was dropped, every text with it
        self.conn.execute("DELETE FROM entities WHERE eid = ?", (eid,))
        del self.eids[doc_id]
        self.evicted[doc_id] = eid
        self.newest_vt.pop(eid, None)
        self.fresh.discard(eid)
