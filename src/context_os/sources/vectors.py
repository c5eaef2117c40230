"""The vector half of recall: embeddings of every indexed text part, kept in a sidecar file, and
the worker that makes them off the hot path.

``VectorIndex`` follows the store's keyword index through ``Store.text_parts(after_seq)`` (each
distinct text of each part, once, in index order) and keeps, in its own SQLite file:

* ``vectors``: one vector per distinct text, keyed by the text's blake3: a text is embedded once,
  whichever object, part or version holds it (a chat page is rewritten on every append; its
  unchanged entries are never embedded again);
* ``heads``: for a text longer than the embedder reads (``max_chars``), the blake3 of what was
  embedded (its head) and the text it was embedded for: another text with the same head (a long
  file's next version, edited past its head) takes that vector instead of embedding the same
  input again;
* ``parts``: which (object id, part) had which text, first seen in which version (object hash);
* ``loose``: vectors of texts no stored part holds (the passages of memory files, read from disk
  at each search: ``loose_vectors``), by the text's blake3, with the day a search last used each;
  emptied by an eviction, and one no search used for ``LOOSE_KEEP_DAYS`` is dropped by a
  catch-up (an edited passage leaves its old text's vector behind);
* ``meta``: the embedder's name and dimension, and the cursor (the last ``seq`` taken in),
  written in the same transaction as the vectors, so a crash loses nothing and repeats nothing;
  the tombstones ``forget_evicted`` has looked at, and the ``generation`` each of its looks moves:
  another process then loads the file again, as what it holds in memory may have been dropped.

The file holds vectors and hashes, never text. Vectors of two models are never mixed: opening the
file with another embedder name or dimension drops every vector and starts again from seq 0
(``reindexed`` says so). Search scores its candidates exactly (numpy): every vector below
``GRAPH_FROM`` (50k), past it the nearest an in-memory HNSW graph (``usearch``) gives, which the
worker grows in the background (``grow_graph``); without ``usearch`` search stays exact.

Search answers what keyword search answers: parts of the versions in force at ``valid_time`` as
of ``tx_id``. The nearest vectors are only candidates; each is checked against ``Store.get`` (the
version in force must hold that very text in that part) before it becomes a hit with the static
ref of that version.

``catch_up`` embeds in small slices (``SLICE_TEXTS`` texts, ``SLICE_CHARS`` characters), each
committed with the cursor, and a search's own query goes ahead of the backlog: it waits for the
slice in progress at most. ``VectorIndexer`` runs ``catch_up`` in a thread: ``notify()`` never
blocks (a bounded queue of wake-ups; a full queue already means "there is work"), ``drain()``
waits until everything indexed before the call has its vector, ``close()`` stops it after the
slice in progress. This module never imports from ``context`` or ``harness``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import blake3
import numpy as np
import numpy.typing as npt

from ..errors import ConfigError, InputError, StoreClosed, StoreCorrupt, StoreError
from ..objects import index_parts
from ..store.base import Store, TextHit, TextPart, Version
from ..store.text_index import check_basis, check_kinds, session_of
from .embed import Embedder, Vectors, embed_texts

__all__ = ["VectorHit", "VectorIndex", "VectorIndexer", "text_key", "vector_status"]

log = logging.getLogger(__name__)

_ENTRY = re.compile(r"e(\d+)")
_PartRow = tuple[int, str, str, str, str, str | None, int | None, bytes]
"""A row of ``parts``: seq, id, kind, part, object hash, session, chat entry, text key."""
REBUILT_CHECK_S = 60.0
"""How often (at most) a catch-up checks whether the keyword index was rebuilt under it."""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vec BLOB NOT NULL, truncated INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS parts (
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL, kind TEXT NOT NULL, part TEXT NOT NULL,
    object_hash TEXT NOT NULL, session TEXT, entry INTEGER, key BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS parts_entry ON parts (session, entry) WHERE entry IS NOT NULL;
CREATE TABLE IF NOT EXISTS heads (head BLOB PRIMARY KEY, key BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS loose (key BLOB PRIMARY KEY, vec BLOB NOT NULL, seen INTEGER NOT NULL);
"""


def _today() -> int:
    """The day (since the epoch, UTC) a search that used a passage's vector marks it with."""
    return int(time.time() // 86_400)


def text_key(text: str) -> bytes:
    """What a vector is keyed by: the blake3 of the part's text (16 bytes)."""
    return blake3.blake3(text.encode("utf-8", "surrogatepass")).digest(16)


@dataclass(frozen=True)
class VectorHit(TextHit):
    """One vector-search hit: a part of the version in force; ``score`` is its cosine similarity
    to the query, in [-1, 1]."""

    truncated: bool
    """The text was longer than the embedder reads: its vector stands for its head only."""


class _Matrix:
    """Vectors and parts in memory, append-only between re-indexes (search reads a prefix)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.vecs = np.zeros((1024, dim), dtype=np.float32)
        self.n_vecs = 0
        self.row_of: dict[bytes, int] = {}
        self.head_of: dict[bytes, bytes] = {}
        """The ``text_key`` of a cut text's head → the key of the text whose vector it made."""
        self.truncated: list[bool] = []
        self.part_row = np.zeros(1024, dtype=np.int64)
        self.part_kind = np.zeros(1024, dtype=np.int16)
        self.part_session = np.zeros(1024, dtype=np.int64)
        self.n_parts = 0
        self.parts: list[tuple[str, str, str, bytes]] = []  # id, kind, part, key
        self.kinds: dict[str, int] = {}
        self.sessions: dict[str, int] = {}

    def add_vector(self, key: bytes, vec: Vectors, truncated: bool) -> None:
        if self.n_vecs == len(self.vecs):
            self.vecs = np.concatenate([self.vecs, np.zeros_like(self.vecs)])
        self.vecs[self.n_vecs] = vec
        self.row_of[key] = self.n_vecs
        self.truncated.append(truncated)
        self.n_vecs += 1

    def made_from(self, head: bytes) -> int | None:
        """The row of the vector embedded from the input whose ``text_key`` is ``head`` (a whole
        text, or a cut text's head), if there is one."""
        row = self.row_of.get(head)
        if row is None and (key := self.head_of.get(head)) is not None:
            row = self.row_of.get(key)
        return row

    def add_part(self, id: str, kind: str, part: str, session: str | None, key: bytes) -> None:
        if self.n_parts == len(self.part_row):
            grow = len(self.part_row)
            self.part_row = np.concatenate([self.part_row, np.zeros(grow, dtype=np.int64)])
            self.part_kind = np.concatenate([self.part_kind, np.zeros(grow, dtype=np.int16)])
            self.part_session = np.concatenate([self.part_session, np.zeros(grow, dtype=np.int64)])
        i = self.n_parts
        self.part_row[i] = self.row_of[key]
        self.part_kind[i] = self.kinds.setdefault(kind, len(self.kinds))
        self.part_session[i] = -1 if session is None else self.sessions.setdefault(session, len(self.sessions))
        self.parts.append((id, kind, part, key))
        self.n_parts += 1


@functools.cache
def _usearch() -> Any:
    """The ``usearch.index`` module, or None when it is not installed (search stays exact);
    looked for once (a failed import is tried again at every call otherwise)."""
    try:
        from usearch import index
    except ImportError:
        return None
    return index


class _Graph:
    """An HNSW graph over the vectors of one ``_Matrix`` (its rows are the graph's keys), grown
    in the order the rows were added, one thread at a time. It holds them quantized to 8 bits:
    it only picks candidates, whose scores search computes from the matrix (on 100k WordLlama
    vectors, i8 against f32: built in 11 s instead of 24, searched in 0.8 ms instead of 1.2, 81 MB
    instead of 145, and the same 99% of the exact nearest found)."""

    def __init__(self, matrix: _Matrix) -> None:
        self.matrix = matrix
        self.rows = 0
        self.lock = threading.Lock()
        self.index = _usearch().Index(
            ndim=matrix.dim, metric="cos", dtype="i8", connectivity=16, expansion_add=128, expansion_search=64
        )


@dataclass(frozen=True)
class _Near:
    """The candidates the graph gave a search: rows of ``matrix``; ``complete`` when they are
    every row it holds."""

    matrix: _Matrix
    rows: npt.NDArray[np.int64]
    complete: bool


class VectorIndex:
    """Embeddings of a store's indexed parts, in a sidecar SQLite file at ``path``.

    ``path`` is a file of its own (e.g. ``<store>.vectors``; ``":memory:"`` for a throwaway one).
    Safe to share between threads: one writer (``catch_up``) and any number of searches."""

    BATCH = 256
    """Parts read from ``Store.text_parts`` at a time."""

    SLICE_TEXTS = 16
    SLICE_CHARS = 4_000
    """A slice, the texts embedded in one call and committed in one transaction, holds at most
    ``SLICE_TEXTS`` new texts and ``SLICE_CHARS`` characters of them (each counted up to the
    embedder's ``max_chars``; a longer first text is a slice of its own). A query waits for the
    slice in progress, and a stop waits for it too: the default embedder takes about a second for
    two parts of 2,000 characters, and some 0.2 s for 16 chat messages."""

    BUSY_TIMEOUT_S = 5.0
    """How long a write waits for another process's write lock (SQLite's default)."""
    LOOSE_WAIT_S = 0.2
    """How long a search waits for it to write the vectors of memory passages it embedded
    (``_save_loose``): past it, they are written by a later search."""

    LOOSE_KEEP_DAYS = 30
    """A memory passage's vector that no search used for this many days is dropped by the next
    catch-up: an edited passage left its old text's vector in the file for good (searches embed
    a passage again if it comes back)."""

    GRAPH_FROM = 50_000
    """Vectors from which search asks an HNSW graph for candidates instead of scoring every
    vector (docs/recall.md: at 100k, 0.8 ms against 3.4 ms, 99% of the exact nearest found)."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        path: str | Path,
        *,
        graph_from: int | None = GRAPH_FROM,
        read_only: bool = False,
    ) -> None:
        """``graph_from``: build an HNSW graph (``usearch``, in the ``vectors`` extra) once this
        many vectors are held, in the background worker (``grow_graph``); None: always exact.
        ``read_only``: search what the file holds, never write it (``catch_up`` raises
        ``StoreError``); a file of another model is a ``ConfigError`` instead of being dropped."""
        self.read_only = read_only
        self.store = store
        self.embedder = embedder
        self.path = str(path)
        self.graph_from = graph_from
        self._graph: _Graph | None = None
        self.reindexed: str | None = None
        """Set when the file held vectors of another model or dimension, which were dropped."""
        self.last_error: str | None = None
        """What the last failed ``catch_up`` (in the worker) said."""
        self._lock = threading.RLock()
        self._write = threading.Lock()
        self._queries: dict[str, Vectors] = {}  # the last query vectors, oldest first
        self._loose: dict[bytes, Vectors] = {}  # vectors of texts no stored part holds (loose_vectors)
        self._unsaved: dict[bytes, Vectors] = {}  # those to write, or to mark used today (``_save_loose``)
        self._marked: dict[bytes, int] = {}  # the day this process last marked each of them used
        self._pruned = -1  # the day this process last dropped the unused ones (``_prune_loose``)
        # queries embedding now: catch_up starts no slice while one waits (they go first)
        self._asking = 0
        self._turn = threading.Condition()
        self._rebuilt_check = -REBUILT_CHECK_S
        self._generation: str | None = None  # ``meta.generation`` as this process last loaded the file
        try:
            if read_only:
                self._db = sqlite3.connect(
                    _read_only_uri(self.path), uri=True, check_same_thread=False, isolation_level=None
                )
            else:
                self._db = sqlite3.connect(
                    self.path, timeout=self.BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
                )
        except sqlite3.DatabaseError as e:
            raise StoreCorrupt(f"vector index {self.path}: {e}") from e
        try:
            if not read_only:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(_SCHEMA)
                self._mark_older_loose()
            self._check_model()
            self._m = self._load()
        except BaseException as e:
            self._db.close()  # refused (another model's file, a damaged one): nothing holds it open
            if isinstance(e, sqlite3.DatabaseError):
                raise StoreCorrupt(f"vector index {self.path}: {e}") from e
            raise

    # -- the file -----------------------------------------------------------------------------

    def _mark_older_loose(self) -> None:
        """A file written before passages' vectors were marked with the day they were used: its
        ``loose`` table gets the column, each row marked today (none was dropped at once)."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(loose)")}
        if "seen" not in columns:
            self._db.execute(f"ALTER TABLE loose ADD COLUMN seen INTEGER NOT NULL DEFAULT {_today()}")

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _taken_over(self) -> str | None:
        """What the file says now when another process opened it with another embedder since this
        one did (``ctxos recall --rebuild-vectors`` beside a running server: it dropped every
        vector and started again with its own), else None. Then this one writes nothing more into
        it and takes nothing in from it: its vectors were of another model, and had been mixed in
        (a file of dimension 128 holding vectors of 256, which no process could load again), its
        cursor moved past what the other had still to embed."""
        name, dim = self._meta("embedder"), self._meta("dim")
        if (name, dim) == (self.embedder.name, str(self.embedder.dim)):
            return None
        return (
            f"vector index {self.path} was re-indexed by another process with {name} (dim {dim}); this one "
            f"embeds with {self.embedder.name} (dim {self.embedder.dim}) and writes no more into it: "
            "open it again with that embedder"
        )

    def _check_model(self) -> None:
        name, dim = self._meta("embedder"), self._meta("dim")
        want_name, want_dim = self.embedder.name, str(self.embedder.dim)
        if (name, dim) == (want_name, want_dim):
            return
        if self.read_only:
            raise ConfigError(
                f"vector index {self.path} holds vectors of {name} (dim {dim}), not of {want_name}"
                f" (dim {want_dim}), and it is read-only: they cannot be made again"
            )
        self._db.execute("BEGIN IMMEDIATE")
        if name is not None:
            self.reindexed = (
                f"vector index {self.path} was built with {name} (dim {dim}); the embedder is now "
                f"{want_name} (dim {want_dim}): its vectors were dropped and every part is embedded again"
            )
            log.warning(self.reindexed)
        self._db.execute("DELETE FROM vectors")
        self._db.execute("DELETE FROM parts")
        self._db.execute("DELETE FROM heads")
        self._db.execute("DELETE FROM loose")
        self._db.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            [("embedder", want_name), ("dim", want_dim), ("cursor", "0")],
        )
        self._db.execute("COMMIT")

    def _load(self) -> _Matrix:
        self._synced = self.cursor
        self._built = self._meta("built")
        self._generation = self._meta("generation")
        m = _Matrix(self.embedder.dim)
        for key, vec, truncated in self._db.execute("SELECT key, vec, truncated FROM vectors"):
            m.add_vector(key, np.frombuffer(vec, dtype=np.float32), bool(truncated))
        rows = self._db.execute("SELECT seq, id, kind, part, session, key FROM parts ORDER BY seq").fetchall()
        orphans = [seq for seq, *_, key in rows if bytes(key) not in m.row_of]
        if orphans and self._mend(orphans):
            rows = [r for r in rows if r[0] < orphans[0]]  # the walk takes the rest in again
        for _, id, kind, part, session, key in rows:
            if bytes(key) in m.row_of:
                m.add_part(id, kind, part, session, bytes(key))
        if self._has_heads():
            for head, key in self._db.execute("SELECT head, key FROM heads"):
                if bytes(key) in m.row_of:
                    m.head_of[bytes(head)] = bytes(key)
        return m

    def _mend(self, orphans: Sequence[int]) -> bool:
        """Parts whose vector the file does not hold: a process of a release before 2026-12-02
        committed them after another's ``forget_evicted`` had dropped their text's vector (it still
        held the vector in memory), and every later open of the file failed with a KeyError. They
        are dropped and the cursor goes back before the first, so that a catch-up walks again from
        there: what a stored part still holds is embedded again, an evicted text is not (its part
        is gone from the keyword index). Whether it could (not on a read-only file: they are left
        out of search there)."""
        log.warning(
            "vector index %s: %d part(s) had no vector (written beside another process's eviction):%s",
            self.path,
            len(orphans),
            " left out of search (the file is read-only)" if self.read_only else " dropped, and embedded again",
        )
        if self.read_only or self._db.in_transaction:
            return False
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(
                "DELETE FROM parts WHERE seq = ? AND key NOT IN (SELECT key FROM vectors)", [(s,) for s in orphans]
            )
            back = str(orphans[0] - 1)
            self._db.execute(
                "UPDATE meta SET value = ? WHERE key = 'cursor' AND CAST(value AS INTEGER) > ?", (back, back)
            )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._synced = self.cursor
        return True

    def _reload(self) -> None:
        """Load the file again after an eviction (``forget_evicted``, here or in another process):
        what this process holds in memory may be what was dropped, the passages' vectors too."""
        self._forget_loose()
        self._m = self._load()

    def _forget_loose(self) -> None:
        """Forget the passages' vectors held in memory: made from texts that may be an evicted
        one, they are never written now (searches embed them again)."""
        self._loose.clear()
        self._unsaved.clear()
        self._marked.clear()

    def _stale(self) -> bool:
        """Whether another process's ``forget_evicted`` dropped rows of the file since this one
        loaded it (``meta.generation`` moved)."""
        return self._meta("generation") != self._generation

    def _has_heads(self) -> bool:
        """Whether the file keeps heads: one written before them, opened read-only, does not."""
        return bool(self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'heads'").fetchone())

    def _head(self, text: str) -> bytes:
        """The ``text_key`` of what the embedder reads of ``text``: its first ``max_chars``."""
        cut = self.embedder.max_chars
        return text_key(text[:cut] if len(text) > cut else text)

    @property
    def cursor(self) -> int:
        """The last ``Store.text_parts`` seq taken in."""
        with self._lock:
            return int(self._meta("cursor") or 0)

    def counts(self) -> dict[str, int | str | None]:
        """Sizes for status lines: vectors, parts, cursor, the store's last seq, pending parts."""
        last = int(self.store.index_status().get("last_seq") or 0)
        with self._lock:
            cursor = self.cursor
            return {
                "embedder": self.embedder.name,
                "dim": self.embedder.dim,
                "vectors": self._m.n_vecs,
                "parts": self._m.n_parts,
                "cursor": cursor,
                "store_last_seq": last,
                "pending": max(0, last - cursor),
            }

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> VectorIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- indexing -----------------------------------------------------------------------------

    def _absorb(self) -> None:
        """Take into memory the parts and vectors another process (``ctxos recall``, a second
        server) committed to this sidecar since this one last did: the cursor is shared, so
        without this a long-running process went on from it and never searched what the other
        embedded, until it was restarted. Each slice commits its rows with the cursor, so the
        rows up to the cursor are all there."""
        with self._lock:
            if self._taken_over() is not None:
                return  # its rows are another model's: this one searches what it holds
            if self._stale():
                # another process's forget_evicted dropped rows: this one may hold their vectors
                # (a catch-up went on from them, writing parts whose vector the file no longer had)
                self._reload()
                return
            if self._meta("built") != self._built:
                # the keyword index was rebuilt and another process walked it again (its parts
                # are numbered anew): what this one holds says nothing of the new numbers
                self._m = self._load()
                return
            now = self.cursor
            if now <= self._synced:
                self._synced = min(self._synced, now)  # moved back (a rebuild): walked again from there
                return
            rows = self._db.execute(
                "SELECT p.id, p.kind, p.part, p.session, p.key, v.vec, v.truncated FROM parts p"
                " JOIN vectors v ON v.key = p.key WHERE p.seq > ? AND p.seq <= ? ORDER BY p.seq",
                (self._synced, now),
            ).fetchall()
            for id, kind, part, session, key, vec, truncated in rows:
                key = bytes(key)
                if key not in self._m.row_of:
                    self._m.add_vector(key, np.frombuffer(vec, dtype=np.float32), bool(truncated))
                self._m.add_part(id, kind, part, session, key)
            heads = (
                self._db.execute(
                    "SELECT h.head, h.key FROM heads h JOIN parts p ON p.key = h.key WHERE p.seq > ? AND p.seq <= ?",
                    (self._synced, now),
                ).fetchall()
                if self._has_heads()
                else []
            )
            for head, key in heads:
                self._m.head_of.setdefault(bytes(head), bytes(key))
            self._synced = now

    def catch_up(self, max_parts: int | None = None, *, stop: Callable[[], bool] | None = None) -> int:
        """Embed the parts indexed since the cursor (at most ``max_parts``); how many were taken
        in. Each slice (``SLICE_TEXTS``, ``SLICE_CHARS``) is one transaction with the cursor, so a
        crash resumes where it stopped. ``stop`` is asked before every slice: when it says True,
        catch_up returns (what is left is taken in by the next). A query being embedded is let
        go first: no slice starts while one waits."""
        if self.read_only:
            raise StoreError(f"vector index {self.path} is read-only: nothing can be embedded into it")
        taken = 0
        with self._write:
            with self._lock:
                if (other := self._taken_over()) is not None:
                    raise ConfigError(other)
            self.forget_evicted()
            self._prune_loose()
            if time.monotonic() - self._rebuilt_check >= REBUILT_CHECK_S:
                # the keyword index may have been rebuilt (its seqs start again): then walk it
                # again; texts already embedded are found by their key, not embedded twice.
                # index_status runs the index's integrity check: not at every catch-up
                self._rebuilt_check = time.monotonic()
                status = self.store.index_status()
                built = None if status.get("built_time") is None else str(status["built_time"])
                seen = self._meta("built")
                # rebuilt since the cursor was taken: its seqs say nothing now, even when there are
                # as many parts as before (without ``built_time``, an index from before it: fewer parts)
                again = seen != built if seen is not None else int(status.get("last_seq") or 0) < self.cursor
                with self._lock:
                    if again:
                        self._db.execute("UPDATE meta SET value = '0' WHERE key = 'cursor'")
                    if built is not None and built != seen:
                        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('built', ?)", (built,))
            while max_parts is None or taken < max_parts:
                self._absorb()  # from what this process holds: rows another committed since are in memory
                limit = self.BATCH if max_parts is None else min(self.BATCH, max_parts - taken)
                batch = self.store.text_parts(after_seq=self._synced, limit=limit)
                if not batch:
                    break
                for piece in self._slices(batch):
                    if stop is not None and stop():
                        return taken
                    with self._turn:
                        self._turn.wait_for(lambda: self._asking == 0)
                    behind = self._take(piece)
                    taken += len(piece)
                    if behind:
                        break  # another process embedded past this batch: take in its rows, go on after them
        return taken

    def _slices(self, batch: Sequence[TextPart]) -> Iterator[Sequence[TextPart]]:
        """``batch`` cut into runs of parts whose new texts make at most ``SLICE_TEXTS`` texts and
        ``SLICE_CHARS`` characters (a text already embedded, or earlier in the batch, costs nothing;
        so does a long one whose head was)."""
        with self._lock:
            known = set(self._m.row_of) | set(self._m.head_of)
        start = texts = chars = 0
        for i, p in enumerate(batch):
            key = text_key(p.text)
            if key in known:
                continue
            known.add(key)
            head = self._head(p.text)
            if head != key:
                if head in known:
                    continue
                known.add(head)
            size = min(len(p.text), self.embedder.max_chars)
            if texts and (texts == self.SLICE_TEXTS or chars + size > self.SLICE_CHARS):
                yield batch[start:i]
                start, texts, chars = i, 0, 0
            texts += 1
            chars += size
        if start < len(batch):
            yield batch[start:]

    def forget_evicted(self) -> int:
        """Drop the vectors of what was evicted since the last look (``ctxos objects evict``
        leaves a tombstone): the evicted object's parts, the chat entries its eviction scrubbed,
        every vector no part uses any more, and the vectors of memory files' passages (embedded
        again when searched: the file may have held the text too). A vector is not the text, but it is derived from
        it: a leaked secret leaves no trace here either. How many parts were dropped.

        The parts are read under the file's write lock, and the look moves ``meta.generation``:
        a slice another process was embedding meanwhile commits after this, and its ``_take``
        leaves out what was evicted since (before 2026-12-02 it committed the evicted object's
        part and vector after this had looked, and nothing dropped them again)."""
        tombstones = [t.doc for t in self.store.find("tombstone") if t.doc is not None]
        with self._lock:
            if {d["id"] for d in tombstones} <= set(json.loads(self._meta("tombstones") or "[]")):
                return 0
            self._db.execute("BEGIN IMMEDIATE")
            try:
                seen = set(json.loads(self._meta("tombstones") or "[]"))  # another process may have looked
                new = [d for d in tombstones if d["id"] not in seen]
                drop, loose = self._evicted_rows(new)
                if loose:
                    self._db.execute("DELETE FROM loose")
                self._db.executemany("DELETE FROM parts WHERE seq = ?", [(seq,) for seq in drop])
                self._db.execute("DELETE FROM vectors WHERE key NOT IN (SELECT key FROM parts)")
                self._db.execute("DELETE FROM heads WHERE key NOT IN (SELECT key FROM vectors)")
                self._db.executemany(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                    [
                        ("tombstones", json.dumps(sorted(seen | {d["id"] for d in new}))),
                        ("generation", str(int(self._meta("generation") or 0) + bool(new))),
                    ],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            if drop or loose:
                # no copy of a dropped vector stays in the file, nor in its log's old page images
                self._db.execute("VACUUM")
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            self._reload()
        return len(drop)

    def _evicted_rows(self, tombstones: Sequence[dict[str, Any]]) -> tuple[list[int], bool]:
        """Within the write transaction: the seqs of the parts ``tombstones`` erased (their
        objects', and the chat entries their evictions scrubbed from the pages of their sessions),
        and whether there are passages' vectors to drop (those of memory files are kept by text
        alone, no part names them: which held the evicted text is not known, so all go, and
        searches embed them again)."""
        if not tombstones:
            return [], False
        ids = {str(d["meta"].get("object")) for d in tombstones}
        sessions = {d["meta"]["session"] for d in tombstones if d["meta"].get("session")}
        rows = self._db.execute("SELECT seq, id, kind, session, key FROM parts").fetchall()
        drop = [seq for seq, id, _, _, _ in rows if id in ids]
        pages: dict[str, set[bytes]] = {}
        for seq, id, kind, session, key in rows:
            if kind == "chat" and session in sessions and id not in ids:
                if id not in pages:
                    doc = self.store.doc(id)
                    pages[id] = {text_key(t) for _, t in index_parts(doc)} if doc is not None else set()
                if key not in pages[id]:
                    drop.append(seq)  # an entry the eviction scrubbed from the page
        loose = self._has_table("loose") and self._db.execute("SELECT 1 FROM loose LIMIT 1").fetchone() is not None
        return drop, loose

    def _take(self, batch: Sequence[TextPart]) -> bool:
        """Embed ``batch`` and commit it with the cursor; whether the shared cursor was already
        past it (another process embedded further meanwhile: the cursor stays where it was).

        The vector of every text the batch's parts have is written with them, those this process
        held already too (one another process's ``forget_evicted`` dropped meanwhile comes back
        for a part that still has its text), and when one did, the parts whose objects were
        evicted since the batch was read are left out."""
        keys = [text_key(p.text) for p in batch]
        with self._lock:
            known = set(self._m.row_of)
            held = {  # the vectors this process holds of the batch's texts
                key: (self._m.vecs[self._m.row_of[key]].copy(), self._m.truncated[self._m.row_of[key]])
                for key in set(keys) & known
            }
            made: dict[
                bytes, tuple[Vectors, bool]
            ] = {}  # a new text's key → the vector already made from its input (a cut text's head)
            for key, p in zip(keys, batch, strict=True):
                if key not in known and key not in made:
                    row = self._m.made_from(self._head(p.text))
                    if row is not None:
                        made[key] = (self._m.vecs[row].copy(), len(p.text) > self.embedder.max_chars)
        todo: dict[bytes, str] = {}  # the texts to embed, one per distinct input
        inputs: dict[bytes, bytes] = {}  # what is embedded (its head's key) → the text it is embedded for
        same: dict[bytes, tuple[bytes, bool]] = {}  # a new text's key → the text embedded for the same input, cut?
        cuts: list[tuple[bytes, bytes]] = []  # (head, key) of each cut text embedded here
        for key, p in zip(keys, batch, strict=True):
            if key in known or key in made or key in todo or key in same:
                continue
            head = self._head(p.text)
            if head in inputs:
                same[key] = (inputs[head], len(p.text) > self.embedder.max_chars)
                continue
            inputs[head] = key
            todo[key] = p.text
            if head != key:
                cuts.append((head, key))
        embedded = embed_texts(self.embedder, list(todo.values()))
        new = list(zip(todo, embedded.vectors, embedded.truncated, strict=True))
        vec_of = {key: vec for key, vec, _ in new}
        new += [(key, vec, cut) for key, (vec, cut) in made.items()]
        new += [(key, vec_of[first], cut) for key, (first, cut) in same.items()]
        new += [(key, vec, cut) for key, (vec, cut) in held.items()]
        rows: list[_PartRow] = []
        for p, key in zip(batch, keys, strict=True):
            m = _ENTRY.fullmatch(p.part) if p.kind == "chat" else None
            session = session_of({"id": p.id, "kind": p.kind})
            rows.append((p.seq, p.id, p.kind, p.part, p.object_hash, session, int(m[1]) if m else None, key))
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if (other := self._taken_over()) is not None:  # since this catch-up began
                    raise ConfigError(other)
                stale = self._stale()
                if stale:  # an eviction since this process loaded the file: the batch is read again
                    rows = self._still_stored(rows)
                    used = {r[7] for r in rows}
                    new = [n for n in new if n[0] in used]
                    cuts = [c for c in cuts if c[1] in used]
                self._db.executemany(
                    "INSERT OR IGNORE INTO vectors (key, vec, truncated) VALUES (?, ?, ?)",
                    [(key, vec.tobytes(), int(cut)) for key, vec, cut in new],
                )
                self._db.executemany("INSERT OR IGNORE INTO heads (head, key) VALUES (?, ?)", cuts)
                self._db.executemany("INSERT OR REPLACE INTO parts VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
                # never back: another process may have committed further since this batch was read
                # (the shared cursor went back to this slice's end, counted its parts as not
                # embedded, and this one embedded again what the other had)
                ahead = int(self._meta("cursor") or 0)
                last = batch[-1].seq
                if ahead < last:
                    self._db.execute("UPDATE meta SET value = ? WHERE key = 'cursor'", (str(last),))
                self._db.execute("COMMIT")
                self._synced = last
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            if stale:
                self._reload()
                return ahead > last
            matrix = self._m  # (a search may have loaded it again meanwhile: it lacks what this one held)
            for key, vec, cut in new:
                if key not in matrix.row_of:
                    matrix.add_vector(key, vec, cut)
            for head, key in cuts:
                matrix.head_of.setdefault(head, key)
            for r in rows:
                matrix.add_part(r[1], r[2], r[3], r[5], r[7])
        return ahead > last

    def _still_stored(self, rows: list[_PartRow]) -> list[_PartRow]:
        """Of a slice's rows, those whose part the store still holds: another process's
        ``forget_evicted`` looked at an eviction while this one was embedding the slice, and an
        evicted object's parts are gone from the keyword index (the seqs of a slice are never
        given to another part)."""
        first, last = rows[0][0], rows[-1][0]
        there = {(p.seq, p.id, p.part) for p in self.store.text_parts(after_seq=first - 1, limit=len(rows))}
        kept = [r for r in rows if (r[0], r[1], r[3]) in there]
        if len(kept) < len(rows):
            log.info(
                "vector index %s: left out %d part(s) evicted while seqs %d-%d were embedded",
                self.path,
                len(rows) - len(kept),
                first,
                last,
            )
        return kept

    # -- the graph (HNSW) ---------------------------------------------------------------------

    def grow_graph(self, rows: int = 1024) -> int:
        """Add up to ``rows`` vectors to the HNSW graph that search uses once the index holds
        ``graph_from`` vectors (and ``usearch`` is installed); how many were added (0: nothing to
        do). The worker calls it between catch-ups; a new matrix (after an eviction or a new
        model) starts a new graph, and search is exact until the graph covers ``graph_from``."""
        if self.graph_from is None or _usearch() is None:
            return 0
        with self._lock:
            m = self._m
            if m.n_vecs < self.graph_from:
                return 0
            graph = self._graph
            if graph is None or graph.matrix is not m:
                graph = self._graph = _Graph(m)
            lo, hi = graph.rows, min(m.n_vecs, graph.rows + rows)
            block = m.vecs[lo:hi].copy()  # the matrix may grow (a new array) while the graph does
        if hi <= lo:
            return 0
        with graph.lock:
            if graph.rows != lo:  # another caller added these
                return 0
            graph.index.add(np.arange(lo, hi, dtype=np.int64), block, threads=1)
            graph.rows = hi
        return hi - lo

    def _graph_rows(self, query: Vectors, want: int) -> _Near | None:
        """The rows a search looks at: the graph's ``want`` nearest and every row added since
        the graph last grew, or None (no graph yet: every row)."""
        with self._lock:
            graph, m = self._graph, self._m
            if graph is None or graph.matrix is not m or self.graph_from is None or graph.rows < self.graph_from:
                return None
            n_vecs = m.n_vecs
        with graph.lock:
            covered = graph.rows
            found = graph.index.search(query, min(want, covered))
        keys = np.asarray(found.keys, dtype=np.int64)
        keys = keys[(keys >= 0) & (keys < covered)]
        rows = np.concatenate([keys, np.arange(covered, n_vecs, dtype=np.int64)])
        return _Near(m, rows, complete=want >= covered)

    @property
    def graph_rows(self) -> int:
        """How many vectors the HNSW graph holds (0: none; search is exact)."""
        with self._lock:
            graph = self._graph
            return graph.rows if graph is not None and graph.matrix is self._m else 0

    # -- search -------------------------------------------------------------------------------

    def embed_query(self, query: str) -> Vectors:
        """The query's vector (``query=True``: asymmetric models embed queries apart)."""
        if not isinstance(query, str) or not query.strip():
            raise InputError("vector search: the query is empty: give some text to search for")
        with self._lock:
            vec = self._queries.get(query)
        if vec is None:
            # a model may take a few hundred ms: a session asks the same query more than once.
            # While it is embedded, catch_up starts no slice: the query waits for one at most
            with self._turn:
                self._asking += 1
            try:
                vec = embed_texts(self.embedder, [query], query=True).vectors[0]
            finally:
                with self._turn:
                    self._asking -= 1
                    self._turn.notify_all()
            with self._lock:
                if len(self._queries) >= 256:
                    self._queries.pop(next(iter(self._queries)))
                self._queries[query] = vec
        return vec

    def loose_vectors(self, texts: Sequence[str], *, embed: int | None = None) -> list[Vectors | None]:
        """The vectors of ``texts`` that are no stored part (the passages of memory files, read
        from disk at each search), each keyed by its ``text_key``: a stored part's vector when one
        has this very text, else one kept in the file's ``loose`` table (in memory only when the
        file is read-only); of those missing, the first ``embed`` (None: all) are embedded now,
        the rest are None. So a text is embedded once, and a search over unchanged files embeds
        nothing. Embedding goes ahead of the backlog, as a query does."""
        keys = [text_key(t) for t in texts]
        out: list[Vectors | None] = [None] * len(texts)
        wanted: dict[bytes, list[int]] = {}
        with self._lock:
            for i, key in enumerate(keys):
                row = self._m.row_of.get(key)
                vec = self._m.vecs[row] if row is not None else self._loose.get(key)
                if vec is not None:
                    out[i] = vec
                else:
                    wanted.setdefault(key, []).append(i)
            if wanted and self._has_table("loose") and self._taken_over() is None:  # another process may have made them
                missing = list(wanted)
                for n in range(0, len(missing), 500):
                    chunk = missing[n : n + 500]
                    marks = ",".join("?" * len(chunk))
                    for key, blob in self._db.execute(f"SELECT key, vec FROM loose WHERE key IN ({marks})", chunk):
                        vec = np.frombuffer(blob, dtype=np.float32)
                        self._loose[bytes(key)] = vec
                        for i in wanted.pop(bytes(key)):
                            out[i] = vec
        todo = list(wanted)[: len(wanted) if embed is None else max(0, embed)]
        if not todo:
            with self._lock:
                self._mark_used(keys, out)
                self._save_loose()  # what an earlier search could not write, the marks of today
            return out
        with self._turn:
            self._asking += 1
        try:
            made = embed_texts(self.embedder, [texts[wanted[key][0]] for key in todo]).vectors
        finally:
            with self._turn:
                self._asking -= 1
                self._turn.notify_all()
        with self._lock:
            for key, vec in zip(todo, made, strict=True):
                self._loose[key] = vec
                if not self.read_only:
                    self._unsaved[key] = vec
                for i in wanted[key]:
                    out[i] = vec
            self._mark_used(keys, out)
            self._save_loose()
        return out

    def _mark_used(self, keys: Sequence[bytes], vecs: Sequence[Vectors | None]) -> None:
        """Have ``_save_loose`` mark the passages' vectors a search used with today (once a day
        each in a process); a stored part's vector is not a passage's."""
        if self.read_only:
            return
        today = _today()
        for key, vec in zip(keys, vecs, strict=True):
            if vec is not None and self._marked.get(key) != today and key not in self._m.row_of:
                self._unsaved[key] = vec

    def _save_loose(self) -> None:
        """Write the passages' vectors this process made and has not written yet, waiting at most
        ``LOOSE_WAIT_S`` for another process's write lock (a catch-up's slice, an eviction's
        rebuild of the file): past it they stay in memory, searched all the same, and a later
        search writes them. A search had waited 5 s, then raised SQLite's "database is locked"
        out of the recall tool, and out of the turn of a session recalling at each message."""
        if not self._unsaved:
            return
        self._db.execute(f"PRAGMA busy_timeout={int(self.LOOSE_WAIT_S * 1000)}")
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                return
            raise
        finally:
            self._db.execute(f"PRAGMA busy_timeout={int(self.BUSY_TIMEOUT_S * 1000)}")
        try:
            self._write_loose()
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _write_loose(self) -> None:
        """Within a write transaction: write the passages' vectors held (``_unsaved``), each marked
        used today (one another process dropped meanwhile comes back). Not after another process's
        eviction: they may be of the evicted text, which its ``forget_evicted`` dropped from the
        file, and are forgotten here too (searches embed them again)."""
        if self._stale():
            self._forget_loose()
            return
        today = _today()
        if self._taken_over() is None:  # else they are kept in memory only
            self._db.executemany(
                "INSERT INTO loose (key, vec, seen) VALUES (?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET seen = excluded.seen",
                [(key, vec.tobytes(), today) for key, vec in self._unsaved.items()],
            )
        self._marked.update(dict.fromkeys(self._unsaved, today))
        self._unsaved.clear()

    def _prune_loose(self) -> int:
        """Drop the passages' vectors that no search used for ``LOOSE_KEEP_DAYS`` (at most once a
        day in a process; those this process holds but has not written are written first, so
        none used today goes); how many."""
        today = _today()
        cutoff = today - self.LOOSE_KEEP_DAYS
        with self._lock:
            if self._pruned == today or not self._has_table("loose"):
                return 0
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._write_loose()
                dropped = self._db.execute("DELETE FROM loose WHERE seen < ?", (cutoff,)).rowcount
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            for key in [k for k, day in self._marked.items() if day < cutoff]:
                del self._marked[key]
                self._loose.pop(key, None)
            self._pruned = today
        if dropped:
            log.info(
                "vector index %s: dropped %d memory passage vector(s) no search used for %d days",
                self.path,
                dropped,
                self.LOOSE_KEEP_DAYS,
            )
        return dropped

    def _has_table(self, name: str) -> bool:
        """Whether the file has table ``name`` (one written by an older release, opened read-only,
        may not)."""
        row = self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
        return row is not None

    def search(
        self,
        query: str,
        *,
        k: int = 20,
        kinds: Sequence[str] | None = None,
        session: str | None = None,
        valid_time: int | None = None,
        tx_id: int | None = None,
    ) -> list[VectorHit]:
        """The ``k`` parts nearest to ``query`` among the versions in force at ``valid_time`` as
        of ``tx_id`` (the same filter as ``Store.text_search``), best first."""
        return self.search_vector(
            self.embed_query(query), k=k, kinds=kinds, session=session, valid_time=valid_time, tx_id=tx_id
        )

    def search_vector(
        self,
        vector: Vectors,
        *,
        k: int = 20,
        kinds: Sequence[str] | None = None,
        session: str | None = None,
        valid_time: int | None = None,
        tx_id: int | None = None,
    ) -> list[VectorHit]:
        """``search`` with the query already embedded."""
        wanted = check_kinds(kinds)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise InputError(f"vector search: k must be a positive int, got {k!r}")
        check_basis(valid_time, tx_id)
        query = np.asarray(vector, dtype=np.float32)
        self._absorb()  # what another process embedded since: searched too
        near = self._graph_rows(query, _candidates(k))
        hits = self._search(query, near, k, wanted, session, valid_time, tx_id)
        if near is not None and not near.complete and len(hits) < k:
            # the graph's nearest were not enough once filtered and checked: every vector, exactly
            hits = self._search(query, None, k, wanted, session, valid_time, tx_id)
        return hits

    def _search(
        self,
        query: Vectors,
        near: _Near | None,
        k: int,
        wanted: tuple[str, ...],
        session: str | None,
        valid_time: int | None,
        tx_id: int | None,
    ) -> list[VectorHit]:
        """The search itself, over every vector (``near`` None, or of another matrix than the
        one searched) or over the graph's candidates."""
        with self._lock:
            m = self._m
            n = m.n_parts
            if n == 0:
                return []
            if near is None or near.matrix is not m:
                sims_by_text = m.vecs[: m.n_vecs] @ query
            else:
                sims_by_text = np.full(m.n_vecs, -np.inf, dtype=np.float32)
                sims_by_text[near.rows] = m.vecs[near.rows] @ query  # exact scores for the candidates
            sims = sims_by_text[m.part_row[:n]]
            mask = np.isin(m.part_kind[:n], [m.kinds[kd] for kd in wanted if kd in m.kinds])
            if session is not None:
                code = m.sessions.get(session, -2)
                mask &= (m.part_session[:n] == code) | (m.part_session[:n] == -1)
            parts = m.parts
            truncated = m.truncated
            row_of = m.row_of
        sims = np.where(mask, sims, -np.inf)
        hits: list[VectorHit] = []
        seen: set[tuple[str, str]] = set()
        versions: dict[str, tuple[Version, dict[str, str], str | None] | None] = {}
        for i in _best_first(sims, _candidates(k)):
            if len(hits) == k:
                break
            id, kind, part, key = parts[i]
            if (id, part) in seen:
                continue
            hit = self._verify(id, part, key, versions, valid_time, tx_id, session)
            if hit is None:
                continue
            seen.add((id, part))
            v, text, sess = hit
            hits.append(
                VectorHit(
                    id,
                    kind,
                    part,
                    v.valid_time,
                    v.tx_id,
                    v.object_hash or "",
                    sess,
                    text,
                    float(sims[i]),
                    truncated[row_of[key]],
                )
            )
        return hits

    def _verify(
        self,
        id: str,
        part: str,
        key: bytes,
        versions: dict[str, tuple[Version, dict[str, str], str | None] | None],
        valid_time: int | None,
        tx_id: int | None,
        session: str | None,
    ) -> tuple[Version, str, str | None] | None:
        """The version in force and the part's text, if that version holds this very text."""
        if id not in versions:
            # a chat page holds many candidates: its parts are read once per search
            got = self.store.get(id, valid_time, tx_id)
            versions[id] = (
                None if got is None or got.doc is None else (got, dict(index_parts(got.doc)), session_of(got.doc))
            )
        held = versions[id]
        if held is None:
            return None
        v, parts, sess = held
        text = parts.get(part)
        if text is None or text_key(text) != key:
            return None
        if session is not None and sess != session:
            return None
        return v, text, sess

    def vector_of(self, key: bytes) -> Vectors | None:
        """The stored vector of the text whose ``text_key`` is ``key``, if it has one."""
        with self._lock:
            row = self._m.row_of.get(key)
            return None if row is None else self._m.vecs[row].copy()

    def entry_parts(self, session: str, entry: int) -> list[tuple[str, str]]:
        """The (id, part) pairs that ever held chat entry ``entry`` of ``session``."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT id, part FROM parts WHERE session = ? AND entry = ?", (session, entry)
            ).fetchall()
        return [(str(a), str(b)) for a, b in rows]

    def resolve(
        self, id: str, part: str, *, valid_time: int | None = None, tx_id: int | None = None
    ) -> tuple[Version, str, str | None] | None:
        """The version of ``id`` in force and the text of ``part`` in it, with its session."""
        v = self.store.get(id, valid_time, tx_id)
        if v is None or v.doc is None:
            return None
        text = dict(index_parts(v.doc)).get(part)
        return None if text is None else (v, text, session_of(v.doc))


def _candidates(k: int) -> int:
    """How many of the nearest a search for ``k`` hits looks at first: some are filtered out,
    or no longer in force."""
    return 4 * k + 64


def _best_first(sims: Vectors, first: int) -> Iterator[int]:
    """The indices of the finite ``sims``, highest first, ties in index order (as a stable sort
    of the whole array gives them), sorting only as many as are asked for: the best ``first``
    (and whatever ties with the last of them), then twice as many, and so on. At 100k parts a
    search needs the best few dozen; sorting all of them took most of its time."""
    finite_at = np.isfinite(sims)
    sims = np.where(finite_at, sims, -np.inf)  # a NaN would sort above everything
    done = 0
    finite = int(finite_at.sum())
    while done < finite:
        take = min(finite, max(first, 2 * done))
        # every index scoring at least the take-th best, so no tie is cut at the boundary
        bar = np.partition(sims, len(sims) - take)[len(sims) - take]
        chosen = np.flatnonzero(sims >= bar)
        order = chosen[np.lexsort((chosen, -sims[chosen]))]
        yield from (int(i) for i in order[done:])
        done = len(order)


def _read_only_uri(path: str | Path) -> str:
    """SQLite's URI of the file at ``path``, read-only: ``#``, ``?`` and ``%`` in a folder's name
    are escaped, else they would start the fragment or the query, or decode to another name (a
    folder ``a#b``: SQLite opened, and created read-write, the file ``a``)."""
    return f"file:{quote(str(path))}?mode=ro"


def vector_status(path: str | Path, last_seq: int) -> dict[str, Any] | None:
    """What a vector sidecar holds, read without loading its embedder: ``embedder``, ``dim``,
    ``vectors``, ``cursor`` and ``pending`` (parts of the keyword index, up to ``last_seq``, not
    embedded yet); None when there is no sidecar at ``path``."""
    if not Path(path).is_file():
        return None
    try:
        db = sqlite3.connect(_read_only_uri(path), uri=True)
        try:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            (count,) = db.execute("SELECT count(*) FROM vectors").fetchone()
        finally:
            db.close()
    except sqlite3.DatabaseError as e:
        return {"path": str(path), "error": f"unreadable: {e}"}
    cursor = int(meta.get("cursor") or 0)
    return {
        "path": str(path),
        "embedder": meta.get("embedder"),
        "dim": int(meta["dim"]) if meta.get("dim") else None,
        "vectors": count,
        "cursor": cursor,
        "pending": max(0, last_seq - cursor),
    }


class _Drain:
    """A ``drain()`` waiting in the worker's queue: ``ok`` once everything before it is embedded."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False


class VectorIndexer:
    """A thread that keeps a ``VectorIndex`` caught up with its store.

    Writers call ``notify()`` after they write (it never waits: the queue of wake-ups is bounded,
    and a full queue already means the worker will look). The worker takes in what is new at most
    every ``interval_s`` seconds, so a burst of writes becomes a few large batches instead of
    one small transaction per write competing with the writer for the store and the CPU.
    ``poll_s`` also wakes it that often, for writes made by other processes. ``drain()`` returns
    once every part indexed before the call has its vector, at once, whatever the interval (tests
    and shutdown use it; never a sleep). ``close()`` stops the thread once the slice it is
    embedding is committed (``VectorIndex.SLICE_TEXTS``), however large the backlog; whatever is
    left is taken in by the next ``catch_up``, from the persisted cursor. It waits for that slice
    ``CLOSE_WAIT_S`` at most (a slice takes seconds on a loaded machine, and a server's shutdown
    waited for it): past that the worker is left to commit it and end by itself, closing the
    index when its owner asked for that; a process that exits first drops the slice whole (its
    transaction never began) and the next ``catch_up`` embeds it again."""

    CLOSE_WAIT_S = 2.0

    def __init__(
        self, index: VectorIndex, *, queue_size: int = 16, interval_s: float = 0.5, poll_s: float | None = 5.0
    ) -> None:
        self.index = index
        self.interval_s = interval_s
        self.poll_s = poll_s
        self._queue: queue.Queue[_Drain | None] = queue.Queue(maxsize=queue_size)
        self._stop = threading.Event()
        self._ending = threading.Lock()  # the worker's end and ``close(close_index=True)``, in turn
        self._ended = False
        self._close_index = False
        self._thread = threading.Thread(target=self._run, name="context_os-vectors", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """There is something new to embed. Never blocks."""
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until everything indexed before this call is embedded; False if ``timeout``
        seconds passed first, the embedder failed (``index.last_error`` says why) or the worker
        was stopped first."""
        if self._stop.is_set():
            return False
        waiter = _Drain()
        try:
            self._queue.put(waiter, timeout=timeout)
        except queue.Full:
            return False
        # a worker that ended meanwhile (stopped, its store closed) answers no waiter left behind
        deadline = None if timeout is None else time.monotonic() + timeout
        while not waiter.done.wait(0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))):
            if not self._thread.is_alive() or (deadline is not None and time.monotonic() >= deadline):
                return False
        return waiter.ok

    def close(self, timeout: float | None = CLOSE_WAIT_S, *, close_index: bool = False) -> bool:
        """Stop the worker: it finishes the slice it is embedding (committed, so the next
        ``catch_up`` goes on after it) and starts no other. Waits ``timeout`` seconds at most
        (None: until it ends); whether it ended. With ``close_index`` the index is closed once
        the worker is done with it: here, or by the worker as it ends."""
        with self._ending:
            self._close_index = self._close_index or close_index
            ended = self._ended
        if ended and close_index:
            self.index.close()
        self._stop.set()
        with contextlib.suppress(queue.Full):  # a full queue wakes it as well
            self._queue.put_nowait(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.info(
                "vector index %s: the slice being embedded is left to finish after %ss (the next catch-up "
                "embeds it again if the process ends first)",
                self.index.path,
                timeout,
            )
            return False
        return True

    def _next(self, timeout: float | None) -> _Drain | None:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            while True:  # a drain that was never reached fails at once instead of waiting forever
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item.done.set()
            with self._ending:
                self._ended = True
                close_index = self._close_index
            if close_index:  # its owner asked, and did not wait for the slice in progress
                self.index.close()

    def _loop(self) -> None:
        last = float("-inf")
        stopping = self._stop.is_set
        while not stopping():
            item = self._next(self.poll_s)
            # a plain wake-up waits out the interval, gathering more; a drain or a stop does not
            while item is None and not stopping() and (wait := last + self.interval_s - time.monotonic()) > 0:
                item = self._next(wait)
            if stopping():
                if item is not None:
                    item.done.set()
                return
            try:
                self.index.catch_up(stop=stopping)
                if self.index.last_error is not None:
                    log.info("vector index %s: catching up again", self.index.path)
                self.index.last_error = None
            except StoreClosed as e:  # its owner closed the store: nothing more will come to embed
                log.debug("vector index %s: the store was closed; the worker stops", self.index.path)
                self.index.last_error = f"{type(e).__name__}: {e}"
                self._stop.set()
                if item is not None:
                    item.done.set()  # not ok: nothing more was embedded
                return
            except Exception as e:  # the worker must outlive a failing embedder; drain reports it
                error, self.index.last_error = self.index.last_error, f"{type(e).__name__}: {e}"
                if self.index.last_error != error:  # once, not at every poll while it lasts (a closed store)
                    log.warning("vector index %s: catching up failed: %s", self.index.path, self.index.last_error)
            last = time.monotonic()
            if item is not None:
                item.ok = self.index.last_error is None and not stopping()
                item.done.set()
            # the graph grows a block at a time while nothing else waits (12 s for 100k vectors)
            while self._queue.empty() and not stopping() and self._grow():
                pass

    def _grow(self) -> int:
        try:
            return self.index.grow_graph()
        except Exception as e:  # a graph that cannot grow leaves search exact
            log.warning("vector index %s: the HNSW graph stopped growing: %s", self.index.path, e)
            self.index.graph_from = None
            return 0
