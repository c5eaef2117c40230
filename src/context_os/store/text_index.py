"""The keyword half of recall: an SQLite FTS5 index over the text parts of stored versions.

Both stores use this module. The SQLite store keeps the tables in its own file and writes them
in the transaction that writes the versions (search never lags the store). The XTDB store keeps
them in a sidecar file (``SidecarIndex``): a derived index, fed by its own writes once they have
landed and by a catch-up over the store contract, that it can always rebuild from the node.

What a document contributes is ``objects.index_parts``: the only place the store layer reads the
shape of a document (which kinds hold text, where a chat page keeps its entries).

Tables (``create_tables``):

* ``entities``: id ↔ integer key (the SQLite store's own table; a sidecar has its own).
* ``text_parts``: every distinct text each part of each entity ever had, once, with the seq that
  is its cursor for ``Store.text_parts``. A chat page rewritten on every append adds only its
  new entries here (an unchanged entry has the same (entity, part, text hash)).
* ``text_fts``: FTS5 over ``text_parts.text`` (external content: the text is stored once),
  tokenizer ``porter unicode61 remove_diacritics 2``, each run of CJK characters written as its
  character bigrams (``fts_text``; the view ``text_fts_src`` is the content FTS5 checks itself
  against, through the SQL function ``register`` adds to a connection). Parts enter it in batches
  (``FTS_BATCH``): FTS5 writes a segment per transaction and merges them as they pile up, so
  indexing a turn's few texts in each turn's transaction cost more than the text_parts rows
  themselves. A search first moves what is still pending into it (``flush_fts``), so it never
  misses a write; a store opened read-only reads the pending parts from a temporary index of
  their own instead.
* ``text_meta``: ``state`` (``ok``, or ``building`` while a rebuild runs), ``fts_seq`` (every
  part up to this seq is in ``text_fts``), ``damaged`` (why a write of the store dropped a damaged
  index: ``fts_step``) and the backend's bookkeeping (the sidecar's last indexed tx, a rebuild's
  cursor).

The index says which texts *some* version had. Whether the version in force at the asked
(valid time, tx) holds the text is checked on that version's document, read once per search
and document: the SQLite store reads it from its own tables, the sidecar with ``Store.get``.

This module never imports from ``context`` or ``harness``; no sqlite3 error leaves the public
``Store`` methods that use it untranslated (the callers translate).
"""

from __future__ import annotations

import functools
import heapq
import json
import logging
import math
import re
import sqlite3
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import blake3

from ..errors import InputError, StoreCorrupt, StoreError
from ..objects import INDEXED_KINDS, index_parts
from .base import Evict, Op, Put, TextHit, TextPart, Tx, now_ms

if TYPE_CHECKING:
    from .base import Store, Version

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = [
    "INDEXED_KINDS",
    "IndexDamaged",
    "TOKENIZER",
    "WORD",
    "Candidate",
    "SearchArgs",
    "SidecarIndex",
    "add_parts",
    "begin_within",
    "check_basis",
    "check_kinds",
    "check_search",
    "checked_problem",
    "create_tables",
    "find_words",
    "fts_text",
    "match_words",
    "register",
    "splits_cjk",
    "drop_damaged",
    "drop_tables",
    "dropped_damaged",
    "state_and_damage",
    "FTS_BATCH",
    "flush_fts",
    "flush_held",
    "fts_step",
    "fts_pending",
    "write_past_damage",
    "fts_problem",
    "index_counts",
    "index_high_water",
    "index_parts",
    "parts_after",
    "purge",
    "renew_tables",
    "ranked",
    "remove_entity",
    "scan_search",
    "session_of",
    "tables_present",
    "terms",
    "words",
]

TOKENIZER = "porter unicode61 remove_diacritics 2"
"""FTS5 tokenizer: Unicode words, case and diacritics folded, English stems (``tests`` finds
``test``): recall from LLM-written queries needs the stems more than exact forms."""
MAX_TERMS = 64
"""A query's distinct words beyond this are dropped (an LLM may pass a whole message)."""
_MARKS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
"""Combining diacritical marks: unicode61 keeps them in the token and folds them away
(``remove_diacritics``), so ``e`` + U+0301 (decomposed text, as macOS and some keyboards write
it) is one letter of ``école`` to it, where Python's ``\\w`` splits the word at the mark."""
WORD = re.compile(rf"[^\W_](?:[^\W_]|[{_MARKS}])*")
"""A word as unicode61 makes a token of it: letters and digits with their combining marks, "_"
separates. Where the two still differ (a mark unicode61 splits at), the word quoted is a phrase
of unicode61's tokens, in the order the text has them: it matches that word all the same. Where
unicode61 keeps in a token what this splits at, ``find_words`` asks the tokenizer."""
_IN_WORD = re.compile(rf"[^\W_]|[{_MARKS}]")
_STARTS, _JOINS = 1, 2
_TOKEN_CHARS: dict[str, int] = {}
"""What unicode61 does with a character ``WORD`` does not take (``_STARTS`` a token, ``_JOINS``
one), asked of SQLite once a character (``_tokenizer_chars``)."""
_TOKEN_CHARS_MAX = 100_000
TABLES = ("text_fts", "text_parts", "text_meta")
_CJK = (
    "\u1100-\u11ff\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029\u3031-\u3035\u3038-\u303c\u3040-\u309f\u30a1-\u30fa\u30fc-\u30ff"
    "\u3100-\u312f\u3130-\u318f\u31a0-\u31bf\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f"
    "\uac00-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)
"""Han, kana and Hangul: scripts written without spaces between words, which unicode61 makes one
token of a whole run of (a sentence), so that no word inside it could be found."""
_CJK_RUN = re.compile(f"[{_CJK}]+")
SPLIT_FN = "ctxos_fts_text"
"""The SQL function (``register``) the view ``text_fts_src`` writes each text through."""

FTS_BATCH = 1024
"""Parts held back from ``text_fts`` until this many are pending (``flush_fts``): one segment
per batch instead of one per transaction. Searches flush first, so they never miss one."""


# -- arguments ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchArgs:
    """``text_search``'s arguments, checked."""

    query: str
    match: str | None
    """The FTS5 query (``match_words``) for an index that holds CJK runs whole (``splits_cjk``),
    None when the query has no word at all."""
    words: tuple[str, ...]
    k: int

    @property
    def split_match(self) -> str | None:
        """The FTS5 query for an index that splits CJK runs (``fts_text``)."""
        return match_words(self.words)

    kinds: tuple[str, ...]
    session: str | None
    valid_time: int | None
    tx_id: int | None


def check_search(query: Any, k: Any, kinds: Any, session: Any, valid_time: Any, tx_id: Any) -> SearchArgs:
    """Check ``text_search``'s arguments (``InputError`` naming the bad one) and build the FTS5
    query: the query's words, each quoted, OR-ed, so no user or LLM text is ever FTS5 syntax."""
    if not isinstance(query, str):
        raise InputError(f"text_search: query must be a string, got {type(query).__name__}")
    if not query.strip():
        raise InputError("text_search: the query is empty: give at least one word to search for")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InputError(f"text_search: k must be a positive int, got {k!r}")
    wanted = check_kinds(kinds)
    if session is not None and not isinstance(session, str):
        raise InputError(f"text_search: session must be a session id (str), got {session!r}")
    try:
        (session or "").encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"text_search: session {session!r} is not valid Unicode text ({e.reason})") from None
    check_basis(valid_time, tx_id)
    words = query_words(query)[:MAX_TERMS]
    return SearchArgs(query, match_words(words, split=False), words, k, wanted, session, valid_time, tx_id)


def check_kinds(kinds: Any) -> tuple[str, ...]:
    """``kinds`` checked against the searchable kinds (``InputError`` naming ``kinds``, also when
    empty), without repeats; None: every searchable kind. Keyword and vector search take the same."""
    if kinds is None:
        return INDEXED_KINDS
    if isinstance(kinds, str) or not isinstance(kinds, Sequence | set | frozenset):
        raise InputError(f"kinds must be a list of kinds, got {kinds!r}")
    if not kinds:
        # a model passes [] for "any": it searched no kind at all and answered "no hit"
        raise InputError("kinds is empty: name the kinds to search, or leave kinds out to search every kind")
    unknown = [kd for kd in kinds if kd not in INDEXED_KINDS]
    if unknown:
        raise InputError(
            f"kinds holds {', '.join(map(repr, unknown))}, which is not a searchable kind"
            f" (searchable: {', '.join(INDEXED_KINDS)})"
        )
    return tuple(dict.fromkeys(kinds))


def find_words(text: str) -> list[str]:
    """The words of ``text`` as written, where the tokenizer has them: ``WORD``'s, and a
    character ``WORD`` splits at is part of the word when unicode61 keeps it in a token. Its
    tables are Unicode 6.1's: a character assigned since (an emoji of 2015 on, a newer script's
    mark) is a letter to it, and so is a private-use one, so ``smoke🧪fix`` is one token; split
    here, the query looked for ``smoke`` and ``fix``, which no text holds, and found nothing."""
    if text.isascii():
        return WORD.findall(text)
    odd = [
        c
        for c in set(text)
        if not c.isascii() and not c.isspace() and not "\ud800" <= c <= "\udfff" and not _IN_WORD.match(c)
    ]
    said = _tokenizer_chars(odd) if odd else {}
    starts = "".join(sorted(c for c, f in said.items() if f & _STARTS))
    joins = "".join(sorted(c for c, f in said.items() if f == _JOINS))
    return (_word_with(starts, joins) if starts or joins else WORD).findall(text)


def _tokenizer_chars(chars: Sequence[str]) -> dict[str, int]:
    """What unicode61 does with each of ``chars``: alone it makes a token (``_STARTS``), between
    two letters it keeps them one token (``_JOINS``). Asked of the SQLite the index uses, so the
    answer is its tables' whichever Unicode Python's are."""
    said = {c: f for c in chars if (f := _TOKEN_CHARS.get(c)) is not None}
    new = [c for c in chars if c not in said]
    if new:
        conn = sqlite3.connect(":memory:")
        try:
            conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{TOKENIZER}')")
            conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
            rows = [(2 * i + n, text) for i, c in enumerate(new) for n, text in ((1, c), (2, f"a{c}a"))]
            conn.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", rows)
            tokens = Counter(doc for (doc,) in conn.execute("SELECT doc FROM v"))
        finally:
            conn.close()
        for i, c in enumerate(new):
            said[c] = (_STARTS if tokens[2 * i + 1] == 1 else 0) | (_JOINS if tokens[2 * i + 2] == 1 else 0)
        if len(_TOKEN_CHARS) + len(new) > _TOKEN_CHARS_MAX:
            _TOKEN_CHARS.clear()  # (bounded: a text of every code point would keep a million)
        _TOKEN_CHARS.update((c, said[c]) for c in new)
    return said


@functools.lru_cache(maxsize=256)
def _word_with(starts: str, joins: str) -> re.Pattern[str]:
    """``WORD`` with ``starts`` taken as letters and ``joins`` as marks."""
    letter = rf"[^\W_]|[{re.escape(starts)}]" if starts else r"[^\W_]"
    return re.compile(rf"(?:{letter})(?:{letter}|[{_MARKS}{re.escape(joins)}])*")


def fts_text(text: str) -> str:
    """What ``text_fts`` indexes of a text: the text, each run of CJK characters (``_CJK``)
    written as its overlapping character bigrams and then its last character, apart from the
    letters around it (``日本語の`` is ``日本 本語 語の の``): every character starts one token, so a
    word of any length inside the run is a phrase of bigrams (``match_words``). Other text is
    left as it is."""
    if text.isascii() or _CJK_RUN.search(text) is None:
        return text
    return _CJK_RUN.sub(lambda m: f" {' '.join(_bigrams(m[0]) + [m[0][-1]])} ", text)


def _bigrams(run: str) -> list[str]:
    return [run[i : i + 2] for i in range(len(run) - 1)]


def _query_form(word: str) -> tuple[str, bool]:
    """A query word as the tokens of ``fts_text`` it stands for, and whether the last is a
    prefix: a CJK run of two or more characters is its bigrams (consecutive in the text where
    the run stands in it), of one character the token it starts (a prefix: ``日`` is the start of
    ``日本``, or a run's last character)."""
    parts: list[str] = []
    prefix = False
    pos = 0
    for m in _CJK_RUN.finditer(word):
        parts.append(word[pos : m.start()])
        run = m[0]
        parts.extend(_bigrams(run) if len(run) > 1 else [run])
        prefix, pos = len(run) == 1 and m.end() == len(word), m.end()
    parts.append(word[pos:])
    return " ".join(p for p in parts if p), prefix


def match_words(words: Sequence[str], *, split: bool = True) -> str | None:
    """The FTS5 query of ``words`` (``query_words``): each a quoted phrase, OR-ed, so no user or
    LLM text is ever FTS5 syntax; with ``split``, of the tokens ``fts_text`` makes (an index made
    before 2026-12-03 holds a CJK run whole: ``splits_cjk``). None: no word."""
    if not words:
        return None
    phrases = []
    for w in words:
        form, prefix = _query_form(w) if split else (w, False)
        phrases.append(f'"{form}"' + (" *" if prefix else ""))
    return " OR ".join(phrases)


def register(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL function ``SPLIT_FN`` (``fts_text``) that the view ``text_fts_src``
    calls: FTS5 reads it to check the index against its content (``fts_problem``)."""
    conn.create_function(SPLIT_FN, 1, _sql_fts_text, deterministic=True)


def _sql_fts_text(text: Any) -> Any:
    return fts_text(text) if isinstance(text, str) else text


def splits_cjk(conn: sqlite3.Connection) -> bool:
    """Whether the index writes CJK runs as bigrams (``fts_text``): every index made since
    2026-12-03; one made before holds them whole until ``rebuild_index`` makes it again."""
    return bool(meta_value(conn, "split") == 1)


def query_words(query: str) -> tuple[str, ...]:
    """The distinct words of a query (``find_words``; case aside), in order, each as first
    written: what a keyword search looks for (the first ``MAX_TERMS`` of them). Their case is
    left to the tokenizer, which folds the text's the same way: folded here (``casefold``),
    ``ß`` became ``ss`` and ``ﬁ`` ``fi``, words no text holds to it (a search for "Straße" found
    nothing)."""
    first: dict[str, str] = {}
    for w in find_words(query):
        first.setdefault(w.lower(), w)
    return tuple(first.values())


def words(text: str) -> list[str]:
    """The words of ``text`` (``find_words``), composed (NFC) and in lower case, a CJK run as
    its bigrams (``fts_text``): for comparing words without the tokenizer (a decomposed
    ``école`` is the composed one)."""
    return [w.lower() for w in find_words(fts_text(unicodedata.normalize("NFC", text)))]


def terms(texts: Sequence[str], *, words: int = 0) -> list[set[str]]:
    """The terms ``TOKENIZER`` makes of each of ``texts`` (stemmed, case and diacritics folded,
    CJK runs split by ``fts_text``): what a keyword search matches of them. The first ``words``
    are query words, taken as a search takes them (a CJK run as its bigrams alone)."""
    made = [_query_form(t)[0] if k < words else fts_text(t) for k, t in enumerate(texts)]
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{TOKENIZER}')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        conn.executemany("INSERT INTO t(rowid, x) VALUES (?, ?)", [(k + 1, text) for k, text in enumerate(made)])
        out: list[set[str]] = [set() for _ in texts]
        for doc, term in conn.execute("SELECT doc, term FROM v"):
            out[doc - 1].add(term)
        return out
    finally:
        conn.close()


def check_basis(valid_time: Any, tx_id: Any) -> None:
    """``InputError`` naming ``valid_time`` or ``tx_id`` when one is given and is not an int."""
    for name, value in (("valid_time", valid_time), ("tx_id", tx_id)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            what = "epoch ms" if name == "valid_time" else "a tx id"
            raise InputError(f"{name} must be an int ({what}), got {value!r}")


def session_of(doc: Mapping[str, Any]) -> str | None:
    """The session an object belongs to: ``meta.session``, else the ``<session>`` of a
    ``chat:<session>:<page>`` or ``toolcall:<session>:<call>`` id; None for files and memories
    without one."""
    meta = doc.get("meta")
    if isinstance(meta, Mapping) and isinstance(meta.get("session"), str):
        return str(meta["session"])
    doc_id, kind = doc.get("id"), doc.get("kind")
    if kind in ("chat", "toolcall") and isinstance(doc_id, str):
        # the session id may itself hold ":"; the page number and call id come last
        body = doc_id.removeprefix(f"{kind}:")
        session, sep, _ = body.rpartition(":")
        if sep and session:
            return session
    return None


def _text_key(text: str) -> bytes:
    return blake3.blake3(text.encode("utf-8", "surrogatepass")).digest(length=16)


@functools.lru_cache(maxsize=64)  # two pages' entries (``context.persist.PAGE_SIZE``) and more
def _entry_key(text: str) -> bytes:
    """``_text_key`` of a chat entry's text, remembered for the next writes of its page: a page is
    written again at every turn with the same entries but one or a few, each of whose texts was
    hashed again only to be found held already."""
    return _text_key(text)


# -- the tables -----------------------------------------------------------------------------------


def create_tables(conn: sqlite3.Connection, *, state: str = "ok") -> None:
    """Create the index tables (empty), in the caller's transaction."""
    conn.execute(
        "CREATE TABLE text_parts (seq INTEGER PRIMARY KEY, eid INTEGER NOT NULL, part TEXT NOT NULL,"
        " hash BLOB NOT NULL, kind TEXT NOT NULL, session TEXT, object_hash TEXT NOT NULL, text TEXT NOT NULL,"
        " UNIQUE (eid, part, hash))"
    )
    conn.execute("DROP VIEW IF EXISTS text_fts_src")
    conn.execute(f"CREATE VIEW text_fts_src AS SELECT seq, {SPLIT_FN}(text) AS text FROM text_parts")
    conn.execute(
        f"CREATE VIRTUAL TABLE text_fts USING fts5(text, content='text_fts_src', content_rowid='seq',"
        f" tokenize='{TOKENIZER}')"
    )
    conn.execute("CREATE TABLE text_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID")
    # ``built``: when these tables were made (epoch ms; ``built_time`` in the status): a rebuild
    # numbers every part again from 1, and an embedder's cursor learns so from it (sources/vectors.py)
    # ``split``: CJK runs go in as bigrams (``fts_text``, ``splits_cjk``)
    conn.execute(
        "INSERT INTO text_meta (key, value) VALUES ('state', ?), ('fts_seq', 0), ('built', ?), ('split', 1)",
        (state, now_ms()),
    )


def renew_tables(conn: sqlite3.Connection, *, state: str = "ok") -> None:
    """Drop the index tables and create them empty (a rebuild), in the caller's transaction. The
    seqs go on from the newest the dropped tables gave (a high-water row, as ``remove_entity``
    leaves): an embedder's cursor (sources/vectors.py) stays good, and walks the parts indexed
    again as new ones (its texts found by their keys, never embedded twice). Numbered from 1
    again, every text indexed again below its cursor was left out of vector search until its
    next look at ``built`` (a minute); tables that cannot be read (damaged) start from 1."""
    try:
        (top,) = conn.execute("SELECT max(seq) FROM text_parts").fetchone()
    except FTS_ERRORS:
        top = None
    drop_tables(conn)
    create_tables(conn, state=state)
    if isinstance(top, int) and top > 0:
        _hold_seq(conn, top, 0)


def _hold_seq(conn: sqlite3.Connection, top: int, done: int) -> None:
    """Keep ``top`` as the newest seq given: a row of no entity (eid 0, no text) holds it."""
    conn.execute(
        "INSERT OR REPLACE INTO text_parts (seq, eid, part, hash, kind, session, object_hash, text)"
        " VALUES (?, 0, '', x'', '', NULL, '', '')",
        (top,),
    )
    if top <= done:  # past the flushed seqs it goes in with the next flush
        conn.execute("INSERT INTO text_fts (rowid, text) VALUES (?, '')", (top,))


def drop_tables(conn: sqlite3.Connection) -> None:
    """Drop the index tables, whatever state they are in, in the caller's transaction."""
    for name in TABLES:
        if name == "text_fts":
            _drop_fts(conn)
        else:
            conn.execute(f"DROP TABLE IF EXISTS {name}")
    conn.execute("DROP VIEW IF EXISTS text_fts_src")


def _drop_fts(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("DROP TABLE IF EXISTS text_fts")
    except FTS_ERRORS:
        # a damaged FTS5 table may refuse DROP: remove its shadow tables and its entry
        _drop_damaged_fts(conn)


_GARBLED = "out of memory reading it (a size in a damaged index asks for more than there is)"
FTS_ERRORS = (sqlite3.DatabaseError, MemoryError)
"""What reading or writing a damaged FTS5 index raises (``damaged_fts``): a read that gets one
answers by scanning."""


def damaged_fts(e: BaseException) -> sqlite3.DatabaseError | None:
    """The damage an error of an FTS5 read or write says the index has, or None: SQLite finds
    its pages malformed (``SQLITE_CORRUPT``), or runs out of memory, which a garbled size in its
    structure record makes it do (``SQLITE_NOMEM``, Python's ``MemoryError``: 2 in 150 garbled
    records, which failed the write before 2026-12-04). The index is derived from the store: on
    a real shortage of memory, dropping it (``rebuild_index`` makes it again) costs only that."""
    if isinstance(e, MemoryError):
        return sqlite3.DatabaseError(_GARBLED)
    if isinstance(e, sqlite3.DatabaseError) and e.sqlite_errorcode & 0xFF == sqlite3.SQLITE_CORRUPT:
        return e
    return None


def fts_step(conn: sqlite3.Connection, step: Callable[[], T]) -> T | None:
    """``step()``, a write of ``text_fts`` within a write of the store, in a savepoint: what it
    returned, or None when the table is damaged (SQLite finds its pages malformed). A damaged
    index is no reason to refuse the write (before 2026-12-02 every write with a batch of parts
    to move in failed, and so did every eviction): the step is rolled back, the index dropped
    (``drop_damaged``) and the write goes on without it. When the step cannot be rolled back
    alone (SQLite ended the transaction, or the savepoint with a failed release), ``IndexDamaged``:
    the caller rolls the write back, and ``write_past_damage`` drops the index in a transaction of
    its own and makes the write again."""
    conn.execute("SAVEPOINT fts_step")
    try:
        done = step()
        conn.execute("RELEASE fts_step")  # (where FTS5 writes what it held back in memory)
    except FTS_ERRORS as e:
        damage = damaged_fts(e)
        if damage is None:
            raise  # the caller rolls the whole transaction back
        try:
            conn.execute("ROLLBACK TO fts_step")
            conn.execute("RELEASE fts_step")
        except FTS_ERRORS:
            raise IndexDamaged(f"the keyword index is damaged: {damage}") from damage
        drop_damaged(conn, damage)
        return None
    return done


class IndexDamaged(StoreCorrupt):
    """The keyword index is damaged, and SQLite ended the transaction of the write that found it
    (``fts_step``)."""


def write_past_damage(conn: sqlite3.Connection, write: Callable[[], T]) -> T:
    """``write()``, a write transaction of its own on ``conn`` whose writes of ``text_fts`` are
    ``fts_step``s (it rolls itself back on an error). When one found the index damaged and SQLite
    ended the transaction (``IndexDamaged``), the index is dropped in a transaction of its own
    and ``write()`` made again: it finds the index's tables gone and writes without them. Both
    stores write so: the SQLite store's writes, the sidecar's."""
    try:
        return write()
    except IndexDamaged as e:
        conn.execute("BEGIN IMMEDIATE")
        try:
            drop_damaged(conn, e.__cause__ or e)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # an I/O error may have ended it
                conn.execute("ROLLBACK")
            raise
        return write()


def drop_damaged(conn: sqlite3.Connection, error: BaseException) -> None:
    """Drop a damaged index in the caller's transaction: ``text_fts`` and ``text_parts``, every
    text it held (an evicted text must stay in neither, and the damaged table can no longer be
    told what to delete), keeping in ``text_meta`` why (``dropped_damaged``): the state reads
    ``corrupt``, searches scan, writes go on without the index, and ``rebuild_index`` makes it
    again."""
    log.warning("the keyword index is damaged (%s): dropped; searches scan until it is rebuilt", error)
    _drop_fts(conn)
    conn.execute("DROP TABLE IF EXISTS text_parts")
    set_meta(conn, "damaged", str(error))


def dropped_damaged(conn: sqlite3.Connection) -> str | None:
    """What a write that dropped the damaged index (``drop_damaged``) said of it, if one did."""
    listed = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'text_meta'").fetchone()
    value = meta_value(conn, "damaged") if listed else None
    return None if value is None else str(value)


def state_and_damage(conn: sqlite3.Connection) -> tuple[str, str | None]:
    """(``index_state``, None), but (``corrupt``, what was found) for an index a write dropped
    as damaged (``drop_damaged``): so it stays until ``rebuild_index`` makes it again."""
    state = index_state(conn)
    if state == "missing" and (damage := dropped_damaged(conn)) is not None:
        return "corrupt", f"{damage} (a write found it damaged and dropped it)"
    return state, None


def _drop_damaged_fts(conn: sqlite3.Connection) -> None:
    for shadow in ("data", "idx", "content", "docsize", "config"):
        conn.execute(f"DROP TABLE IF EXISTS text_fts_{shadow}")
    conn.execute("PRAGMA writable_schema=ON")
    try:
        conn.execute("DELETE FROM sqlite_master WHERE name = 'text_fts'")
    finally:
        conn.execute("PRAGMA writable_schema=OFF")
    # the connection's parsed schema still lists the table: make every connection read it again
    version = conn.execute("PRAGMA schema_version").fetchone()[0]
    conn.execute(f"PRAGMA schema_version={int(version) + 1}")


def tables_present(conn: sqlite3.Connection) -> bool:
    """Whether every index table exists."""
    listed = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (SELECT value FROM json_each(?))"
    return {r[0] for r in conn.execute(listed, (json.dumps(TABLES),))} == set(TABLES)


def index_state(conn: sqlite3.Connection) -> str:
    """``missing`` (some table is gone), or the recorded state (``ok``, ``building``)."""
    if not tables_present(conn):
        return "missing"
    row = conn.execute("SELECT value FROM text_meta WHERE key = 'state'").fetchone()
    return "missing" if row is None else str(row[0])


def meta_value(conn: sqlite3.Connection, key: str) -> Any:
    row = conn.execute("SELECT value FROM text_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def set_meta(conn: sqlite3.Connection, key: str, value: Any) -> None:
    conn.execute("INSERT OR REPLACE INTO text_meta (key, value) VALUES (?, ?)", (key, value))


def clear_meta(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("DELETE FROM text_meta WHERE key = ?", (key,))


def fts_problem(conn: sqlite3.Connection) -> str | None:
    """What FTS5's own integrity check finds wrong with the index (None: nothing). Runs over the
    whole index; a store opened read-only cannot run it and reports None.

    The check compares ``text_fts`` with its content table, ``text_parts``, which also holds the
    parts not moved into ``text_fts`` yet (``flush_fts``): they are moved first, inside a
    savepoint that is rolled back, so the check sees the index as a search would and changes
    nothing."""
    try:
        conn.execute("SAVEPOINT fts_check")
    except sqlite3.DatabaseError as e:
        return None if "readonly" in str(e) else str(e)
    try:
        flush_fts(conn, force=True)
        conn.execute("INSERT INTO text_fts (text_fts, rank) VALUES ('integrity-check', 1)")
    except FTS_ERRORS as e:
        return None if "readonly" in str(e) else str(damaged_fts(e) or e)
    finally:
        with suppress(*FTS_ERRORS):  # an error that ended the transaction took it along
            conn.execute("ROLLBACK TO fts_check")
            conn.execute("RELEASE fts_check")
    return None


def begin_within(conn: sqlite3.Connection, seconds: float) -> bool:
    """``BEGIN IMMEDIATE``, waiting at most ``seconds`` for another process's write lock (the
    connection's own busy timeout is restored after): False if it kept the lock longer."""
    (before,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute(f"PRAGMA busy_timeout={int(seconds * 1000)}")
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as e:
        if "locked" in str(e) or "busy" in str(e):
            return False
        raise
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(before)}")
    return True


def checked_problem(conn: sqlite3.Connection, wait_s: float) -> tuple[bool, str | None]:
    """``fts_problem`` under the file's write lock, waited for at most ``wait_s``: (whether the
    check ran, what it found). The check moves the held-back parts in first, a write: begun
    without the lock, it failed at once with "database is locked" whenever another process was
    writing, which was reported as damage (``index_status`` said ``corrupt``, 58 of 200 times
    beside a session writing turns, before 2026-12-02). While another process keeps the lock
    longer, the check does not run."""
    if not begin_within(conn, wait_s):
        return False, None
    try:
        return True, fts_problem(conn)
    finally:
        if conn.in_transaction:  # an I/O error may have ended it
            conn.execute("ROLLBACK")


def add_parts(conn: sqlite3.Connection, eid: int, doc: Mapping[str, Any]) -> int:
    """Add the parts of ``doc`` (a version of entity ``eid``) that this entity never had (a
    rewritten chat page adds its new entries only) to ``text_parts``; how many were new. They
    reach ``text_fts`` with the next ``flush_fts``."""
    return add_rows(conn, eid, part_rows(doc))


PartRow = tuple[str, bytes, str, str | None, str, str]
"""A part as ``text_parts`` holds it, without its entity: (part, hash, kind, session,
object_hash, text)."""


def part_rows(doc: Mapping[str, Any]) -> list[PartRow]:
    """The parts of ``doc`` as rows of ``text_parts`` (``add_rows``)."""
    parts = index_parts(doc)
    if not parts:
        return []
    kind = str(doc.get("kind"))
    session = session_of(doc)
    object_hash = str(doc.get("object_hash") or "")
    key = _entry_key if kind == "chat" else _text_key
    return [(part, key(text), kind, session, object_hash, text) for part, text in parts]


def add_rows(conn: sqlite3.Connection, eid: int, parts: Sequence[PartRow]) -> int:
    """``add_parts`` of rows made before (``part_rows``)."""
    if not parts:
        return 0
    rows = [(eid, *p) for p in parts]
    if len(rows) > 1:
        # a chat page is written again at every turn with one or a few new entries: what this
        # entity already has is read in one query rather than refused one insert at a time
        had = set(conn.execute("SELECT part, hash FROM text_parts WHERE eid = ?", (eid,)))
        rows = [r for r in rows if (r[1], r[2]) not in had]
    cur = conn.executemany(
        "INSERT OR IGNORE INTO text_parts (eid, part, hash, kind, session, object_hash, text)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    return max(cur.rowcount, 0)


def fts_seq(conn: sqlite3.Connection) -> int:
    """The seq up to which every part is in ``text_fts``. An index from before parts were held
    back has no such mark: all its parts went in with their writes."""
    value = meta_value(conn, "fts_seq")
    if value is not None:
        return int(value)
    (top,) = conn.execute("SELECT coalesce(max(seq), 0) FROM text_parts").fetchone()
    return int(top)


def fts_pending(conn: sqlite3.Connection) -> tuple[int, int]:
    """(``fts_seq``, the newest seq): the parts between are not in ``text_fts`` yet."""
    (top,) = conn.execute("SELECT coalesce(max(seq), 0) FROM text_parts").fetchone()
    return fts_seq(conn), int(top)


def flush_held(conn: sqlite3.Connection) -> bool:
    """``flush_fts`` within a write of the store: once ``FTS_BATCH`` parts are pending, moved in
    as a ``fts_step``; False if that found the index damaged and dropped it."""
    done, top = fts_pending(conn)
    return top - done < FTS_BATCH or fts_step(conn, lambda: flush_fts(conn)) is not None


def flush_fts(conn: sqlite3.Connection, *, force: bool = False) -> int:
    """Move the pending parts into ``text_fts``, in the caller's write transaction: all of them
    with ``force`` (before a search), else only once ``FTS_BATCH`` are pending; how many."""
    done, top = fts_pending(conn)
    if top - done < (1 if force else FTS_BATCH):
        return 0
    # a high-water row (``remove_entity``) goes in too: its empty text indexes no term, but FTS5
    # counts every row of its content table (its integrity check reports a row it lacks as damage)
    text = f"{SPLIT_FN}(text)" if splits_cjk(conn) else "text"
    cur = conn.execute(f"INSERT INTO text_fts (rowid, text) SELECT seq, {text} FROM text_parts WHERE seq > ?", (done,))
    set_meta(conn, "fts_seq", top)
    return max(cur.rowcount, 0)


def remove_entity(conn: sqlite3.Connection, eid: int) -> int:
    """Remove every part of entity ``eid`` from the index; how many. The caller then runs
    ``purge`` so that no copy of the text stays in the FTS5 segments either."""
    done = fts_seq(conn)
    rows = conn.execute("SELECT seq, text FROM text_parts WHERE eid = ?", (eid,)).fetchall()
    (top,) = conn.execute("SELECT max(seq) FROM text_parts").fetchone()
    # only what reached text_fts is deleted from it (FTS5 must be told the exact text it holds)
    split = fts_text if splits_cjk(conn) else str
    indexed = [(seq, split(text)) for seq, text in rows if seq <= done]
    conn.executemany("INSERT INTO text_fts (text_fts, rowid, text) VALUES ('delete', ?, ?)", indexed)
    conn.execute("DELETE FROM text_parts WHERE eid = ?", (eid,))
    (now,) = conn.execute("SELECT max(seq) FROM text_parts").fetchone()
    if top is not None and (now is None or now < top):
        # seq never goes back (an embedder's cursor may stand past the parts just removed): a
        # row of no entity (eid 0, no text) holds the high-water mark
        _hold_seq(conn, top, done)
    return len(rows)


def index_high_water(conn: sqlite3.Connection) -> int:
    """Put in ``text_fts`` the high-water rows (``remove_entity``) an eviction left out of it before
    they went in with the rest (until 2026-11-28): FTS5's integrity check took each for damage, so
    the index of every store that had evicted its newest part reported itself corrupt and
    searches scanned. How many. An index damaged otherwise is left as it is (``fts_problem``
    reports it, ``rebuild_index`` mends it)."""
    conn.execute("SAVEPOINT high_water")
    try:
        rows = conn.execute(
            "SELECT seq FROM text_parts WHERE eid = 0 AND seq <= ? AND seq NOT IN (SELECT id FROM text_fts_docsize)",
            (fts_seq(conn),),
        ).fetchall()
        conn.executemany("INSERT INTO text_fts (rowid, text) VALUES (?, '')", rows)
    except FTS_ERRORS:
        conn.execute("ROLLBACK TO high_water")
        rows = []
    conn.execute("RELEASE high_water")
    return len(rows)


def purge(conn: sqlite3.Connection) -> None:
    """Merge the FTS5 segments into one: a delete only adds a tombstone in a newer segment, and
    the older segment keeps the evicted terms until merged. Costs a pass over the index; only
    evictions need it."""
    conn.execute("INSERT INTO text_fts (text_fts) VALUES ('optimize')")


@dataclass(frozen=True)
class Candidate:
    """A part whose text matches, in rank order: not yet known to be in force."""

    seq: int
    eid: int
    id: str
    part: str
    kind: str
    session: str | None
    text: str
    score: float


def ranked(conn: sqlite3.Connection, args: SearchArgs) -> Generator[Candidate]:
    """Matching parts, best first (BM25), of the wanted kinds and session, lazily. The caller
    flushes first (``flush_fts``); what is still pending (a store opened read-only) is matched in
    a temporary index of its own and merged by score."""
    done, top = fts_pending(conn)
    indexed = _ranked(conn, "text_fts", args)
    if top <= done:
        return indexed
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.pending_fts USING fts5(text, tokenize='{TOKENIZER}')")
    conn.execute("DELETE FROM temp.pending_fts")
    split = splits_cjk(conn)
    pending = conn.execute("SELECT seq, text FROM text_parts WHERE seq > ? AND eid != 0", (done,)).fetchall()
    conn.executemany(
        "INSERT INTO temp.pending_fts (rowid, text) VALUES (?, ?)",
        [(seq, fts_text(text) if split else text) for seq, text in pending],
    )
    return _merged(indexed, _ranked(conn, "temp.pending_fts", args))


def _merged(*streams: Generator[Candidate]) -> Generator[Candidate]:
    """Ranked streams as one, best first; closing it closes them (their cursors)."""
    try:
        yield from heapq.merge(*streams, key=lambda c: -c.score)
    finally:
        for stream in streams:
            stream.close()


def _ranked(conn: sqlite3.Connection, table: str, args: SearchArgs) -> Generator[Candidate]:
    name = table.rsplit(".", 1)[-1]
    sql = (
        f"SELECT p.seq, p.eid, e.id, p.part, p.kind, p.session, p.text, f.rank FROM {table} f"
        " JOIN text_parts p ON p.seq = f.rowid JOIN entities e ON e.eid = p.eid"
        f" WHERE {name} MATCH ? AND p.kind IN (SELECT value FROM json_each(?))"
    )
    params: list[Any] = [args.split_match if splits_cjk(conn) else args.match, _json_list(args.kinds)]
    if args.session is not None:
        sql += " AND p.session = ?"
        params.append(args.session)
    cur = conn.execute(sql + " ORDER BY f.rank", params)
    try:
        for seq, eid, doc_id, part, kind, session, text, rank in cur:
            yield Candidate(seq, eid, doc_id, part, kind, session, text, -float(rank))
    finally:
        cur.close()


def _json_list(values: Sequence[str]) -> str:
    return json.dumps(list(values))


def parts_after(conn: sqlite3.Connection, after_seq: int, limit: int) -> list[TextPart]:
    rows = conn.execute(
        "SELECT p.seq, e.id, p.kind, p.part, p.object_hash, p.text FROM text_parts p"
        " JOIN entities e ON e.eid = p.eid WHERE p.seq > ? ORDER BY p.seq LIMIT ?",
        (after_seq, limit),
    ).fetchall()
    return [TextPart(*r) for r in rows]


def check_cursor(after_seq: Any, limit: Any) -> None:
    if not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < 0:
        raise InputError(f"text_parts: after_seq must be an int >= 0, got {after_seq!r}")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InputError(f"text_parts: limit must be a positive int, got {limit!r}")


def index_counts(conn: sqlite3.Connection) -> dict[str, Any]:
    done = fts_seq(conn)
    parts, documents, last_seq, pending = conn.execute(
        "SELECT count(*) FILTER (WHERE eid != 0), count(DISTINCT eid) FILTER (WHERE eid != 0),"
        " coalesce(max(seq), 0), count(*) FILTER (WHERE eid != 0 AND seq > ?) FROM text_parts",
        (done,),
    ).fetchone()
    built = meta_value(conn, "built")  # None: tables made before it was recorded (2026-11-30)
    return {
        "parts": parts,
        "documents": documents,
        "last_seq": last_seq,
        "pending": pending,
        "built_time": built,
        "splits_cjk": splits_cjk(conn),  # False: made before 2026-12-03, CJK words not found
    }


# -- without an index: a scan ---------------------------------------------------------------------


def scan_search(store: Store, args: SearchArgs) -> list[TextHit]:
    """``text_search`` without an index: BM25 (k1 1.2, b 0.75, no stemming) over the parts of
    every version in force, read through ``find``. Slow on a large store; always correct."""
    if args.match is None:
        return []
    vt = now_ms() if args.valid_time is None else args.valid_time
    parts: list[tuple[Version, str, str, Counter[str], int]] = []
    for kind in args.kinds:
        for v in store.find(kind, valid_time=vt, tx_id=args.tx_id):
            if v.doc is None or (args.session is not None and session_of(v.doc) != args.session):
                continue
            for part, text in index_parts(v.doc):
                found = words(text)
                parts.append((v, part, text, Counter(found), len(found)))
    if not parts:
        return []
    n = len(parts)
    avg = sum(p[4] for p in parts) / n
    wanted = list(dict.fromkeys(w for word in args.words for w in words(word)))  # as ``words`` of the texts
    df = {w: sum(1 for p in parts if w in p[3]) for w in wanted}
    scored: list[tuple[float, int]] = []
    for i, (_v, _part, _text, tf, length) in enumerate(parts):
        score = 0.0
        for w in wanted:
            f = tf.get(w, 0)
            if f:
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                score += idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * length / (avg or 1)))
        if score > 0:
            scored.append((score, i))
    scored.sort(key=lambda s: (-s[0], s[1]))
    hits = []
    for score, i in scored[: args.k]:
        v, part, text, _tf, _len = parts[i]
        assert v.doc is not None
        hits.append(
            TextHit(
                v.id,
                str(v.doc.get("kind")),
                part,
                v.valid_time,
                v.tx_id,
                str(v.object_hash or ""),
                session_of(v.doc),
                text,
                score,
            )
        )
    return hits


def _start_over(conn: sqlite3.Connection) -> None:
    """A sidecar's tables made empty (``renew_tables``), for the next catch-up to build from
    scratch (``scratch``: it reads what is in force, not the log), in the caller's transaction."""
    renew_tables(conn)
    conn.execute("DELETE FROM entities")
    set_meta(conn, "last_tx", -1)
    set_meta(conn, "scratch", 1)


# -- a sidecar index for a store that cannot hold one ----------------------------------------------


class SidecarIndex:
    """The index in a local SQLite file beside a remote store (the XTDB store's).

    * Own writes are indexed after they land (``note_write``); an eviction removes the id's parts.
    * ``catch_up`` (before every search) indexes what other writers added: the history, since
      the last indexed tx, of every document of a searchable kind in force now. A version only
      a later transaction wrote into an entity's past while its current version stayed older, or
      the history of an entity deleted since, is not seen by it: ``rebuild`` reads everything.
    * A search checks each candidate against the version in force (``Store.get`` at the pinned
      valid time and tx): the index may hold more than is in force, never shows it.
    * ``last_tx`` in ``text_meta``: the newest tx up to which every write is indexed.
    * A write of the file that finds the FTS5 table damaged drops the index and goes on without
      it (``write_past_damage``, as the SQLite store's writes): the status says ``corrupt`` and
      why, searches scan, and ``rebuild`` makes it again.
    """

    VERIFY_WORKERS = 8
    BUSY_TIMEOUT_S = 60.0
    """How long a write waits for another process's write lock on the file."""
    SEARCH_WAIT_S = 2.0
    """How long a search waits for it to bring the file up to date first (this process's writes
    held back, other writers' since); past it, it searches what the file holds (``search``)."""
    NOTE_BATCH = 32
    """Transactions of this process held back (``note_write``) before they are written in one
    SQLite transaction: each turn of a session on XTDB wrote the index's file in a transaction of
    its own, 150-200 µs of wall time here, against 45-60 µs a turn in batches."""

    def __init__(self, path: Path, store: Store) -> None:
        self.path = path
        self.store = store
        self._lock = threading.RLock()
        self._noted: list[tuple[Tx, list[tuple[str, list[PartRow]] | str]]] = []
        """Transactions ``note_write`` holds back: each put's id and parts, each evicted id."""
        self._conn: sqlite3.Connection | None = None
        self._pool: ThreadPoolExecutor | None = None

    # -- the file -----------------------------------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=self.BUSY_TIMEOUT_S
                )
                register(conn)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS entities (eid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE)"
                    )
                    state = index_state(conn)
                    if state == "missing" and dropped_damaged(conn) is None:  # (one dropped stays so: ``rebuild``)
                        _start_over(conn)
                    elif state != "missing" and meta_value(conn, "fts_seq") is None:  # before parts were held back
                        set_meta(conn, "fts_seq", fts_seq(conn))
                    if index_state(conn) == "ok":
                        index_high_water(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:  # an I/O error may have ended it
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise StoreError(f"the text index {self.path} cannot be opened: {e}") from e
            self._conn = conn
        return self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._db()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # an I/O error may have ended it
                conn.execute("ROLLBACK")
            raise

    def _writing(self, write: Callable[[sqlite3.Connection, bool], T]) -> T:
        """``write(conn, text)`` in a transaction of the file's own, ``text`` whether the index's
        tables are there to write (not once a write dropped them as damaged: its writes of
        ``text_fts`` are ``fts_step``s, made again without them if SQLite ended the transaction)."""

        def once() -> T:
            with self._write() as conn:
                return write(conn, tables_present(conn))

        return write_past_damage(self._db(), once)

    def _eid(self, conn: sqlite3.Connection, doc_id: str) -> int:
        conn.execute("INSERT OR IGNORE INTO entities (id) VALUES (?)", (doc_id,))
        eid: int = conn.execute("SELECT eid FROM entities WHERE id = ?", (doc_id,)).fetchone()[0]
        return eid

    def _forget(self, conn: sqlite3.Connection, doc_id: str, text: bool) -> int | None:
        """Remove what the index holds of ``doc_id`` (evicted): how many parts; None if that found
        the index damaged and dropped it, every text with it (``text``: whether it is there)."""
        row = conn.execute("SELECT eid FROM entities WHERE id = ?", (doc_id,)).fetchone()
        if row is None:
            return 0
        removed = fts_step(conn, lambda: remove_entity(conn, row[0])) if text else 0
        conn.execute("DELETE FROM entities WHERE eid = ?", (row[0],))
        return removed

    def _purged(self, conn: sqlite3.Connection, text: bool, removed: bool) -> bool:
        """After evictions (``_forget``): the FTS5 segments merged if a text was removed
        (``purge``); whether the file is to be scrubbed (``_scrub``): a text was removed, or the
        index is gone, its pages free but not overwritten."""
        if text and removed:
            text = fts_step(conn, lambda: purge(conn)) is not None
        return removed or not text

    def _scrub(self) -> None:
        """Free pages and the WAL's old page images still hold an evicted text: rebuild the file
        without them, waited for as any write (a search's short wait aside)."""
        with self._waiting(self.BUSY_TIMEOUT_S) as conn:
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def last_tx(self) -> int:
        with self._lock:
            value = meta_value(self._db(), "last_tx")
        return -1 if value is None else int(value)

    # -- keeping up ---------------------------------------------------------------------------

    def note_write(self, tx: Tx, ops: Sequence[Op]) -> None:
        """Index a transaction of this process once it has landed (committed or not): held
        back with others (``NOTE_BATCH``), an eviction at once (its text must leave the file).
        What is held back is written before anything reads the index (a search, ``parts``,
        ``status``) and at ``close``; a process that dies before lost nothing the catch-up does
        not find again, as ``last_tx`` only moved over what was written."""
        # the parts as they are now: a caller may change a document it wrote
        rows = [
            (op.doc["id"], part_rows(op.doc)) if isinstance(op, Put) else op.id
            for op in ops
            if isinstance(op, Evict) or (isinstance(op, Put) and isinstance(op.doc.get("id"), str))
        ]
        with self._lock:
            self._noted.append((tx, rows))
            if any(isinstance(op, Evict) for op in ops):
                self._write_noted(strict=True)
            elif len(self._noted) >= self.NOTE_BATCH:
                self._write_noted(strict=False)

    def _write_noted(self, *, strict: bool) -> None:
        """Write the transactions ``note_write`` held back, in one SQLite transaction. Unless
        ``strict`` (an eviction's, whose failure the store reports), a failure only leaves them
        to the catch-up: the index lags, the next search reads them from the store."""
        noted, self._noted = self._noted, []
        if not noted:
            return

        def write(conn: sqlite3.Connection, text: bool) -> bool:
            """Whether the file is to be scrubbed of an evicted text."""
            evicted = removed = False
            for tx, written in noted:
                if tx.committed:
                    for w in written:
                        if isinstance(w, str):  # an eviction
                            gone = self._forget(conn, w, text)
                            evicted, removed, text = True, removed or bool(gone), text and gone is not None
                        elif w[1] and text:
                            add_rows(conn, self._eid(conn, w[0]), w[1])
                # Advance only over a gap-free run: a tx another writer slipped in before
                # this one is left to the catch-up.
                advance = "UPDATE text_meta SET value = ? WHERE key = 'last_tx' AND value = ?"
                conn.execute(advance, (tx.id, tx.id - 1))
            text = text and flush_held(conn)  # once a batch is pending
            return evicted and self._purged(conn, text, removed)

        try:
            if self._writing(write):
                self._scrub()
        except (sqlite3.Error, StoreError):
            if strict:
                raise
            log.debug("the keyword index %s lags: its catch-up will read what failed", self.path, exc_info=True)

    def catch_up(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Index what the store holds past the last indexed tx; how many parts were added."""
        return self._catch_up(progress)[0]

    def _catch_up(self, progress: Callable[[int, int], None] | None = None) -> tuple[int, Tx | None]:
        with self._lock:
            self._write_noted(strict=False)
            latest = self.store.latest_tx()
            last = self.last_tx()
            if latest is None and tables_present(self._db()) and meta_value(self._db(), "scratch") is not None:
                with self._write() as conn:  # nothing on the node: what comes is all new
                    clear_meta(conn, "scratch")
            if latest is None or latest.id == last or not tables_present(self._db()):
                return 0, latest  # (an index dropped as damaged is read again by ``rebuild``)
            if latest.id < last:  # a new node behind the same address: start again
                with self._write() as conn:
                    _start_over(conn)
                last = -1
            self._forget_evicted(last, latest.id)
            # what was put since, in force now or not (put, then deleted or put over: a search as
            # of a time it was in force finds it), read from the log where the store can (XTDB).
            # Building from scratch, what is in force with a newer version: the whole log with
            # every document would be 32 MB of EDN for 3,400 transactions; an index built so
            # holds what was in force then and every version written since
            put_ids = getattr(self.store, "put_ids", None)
            if put_ids is not None and meta_value(self._db(), "scratch") is None:
                todo = sorted(put_ids(last, latest.id, INDEXED_KINDS))
            else:
                todo = [
                    v.id for kind in INDEXED_KINDS for v in self.store.find(kind, tx_id=latest.id) if v.tx_id > last
                ]
            added = 0
            for n, doc_id in enumerate(todo):
                # every version written since, those corrected since too (a search as of a
                # transaction before the correction finds the text it had then)
                versions = self.store.history(
                    doc_id, with_docs=True, start_tx_id=last + 1, end_tx_id=latest.id + 1, with_corrections=True
                )
                new = self._writing(functools.partial(self._add_history, doc_id, versions))
                if new is None:
                    return added, latest  # dropped as damaged: ``rebuild`` reads everything again
                added += new
                if progress is not None:
                    progress(n + 1, len(todo))
            with self._write() as conn:
                conn.execute("UPDATE text_meta SET value = ? WHERE key = 'last_tx' AND value = ?", (latest.id, last))
                clear_meta(conn, "scratch")
            return added, latest

    def _add_history(
        self, doc_id: str, versions: Sequence[Version], conn: sqlite3.Connection, text: bool
    ) -> int | None:
        """Add the parts of ``versions`` of ``doc_id`` (``_writing``): how many were new; None if
        the index is not there, or was found damaged and dropped."""
        if not text:
            return None
        eid = self._eid(conn, doc_id)
        added = sum(add_parts(conn, eid, v.doc) for v in versions if v.doc is not None)
        return added if flush_held(conn) else None  # (once a batch is pending)

    def _forget_evicted(self, last: int, latest: int) -> None:
        """Drop the text of what another writer evicted after tx ``last``: an eviction made
        through ``ctxos objects evict`` (context/evict.py) leaves a tombstone naming each object
        it erased, in its own transaction. Without this the text stayed in this file for good
        (searches never showed it: no version holds it)."""
        gone = [
            str(t.doc["meta"]["object"])
            for t in self.store.find("tombstone", tx_id=latest)
            if t.tx_id > last and t.doc is not None and isinstance((t.doc.get("meta") or {}).get("object"), str)
        ]
        if not gone:
            return

        def write(conn: sqlite3.Connection, text: bool) -> bool:
            removed = False
            for oid in gone:
                n = self._forget(conn, oid, text)
                removed, text = removed or bool(n), text and n is not None
            return self._purged(conn, text, removed)

        if self._writing(write):
            self._scrub()

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Drop the index and read everything again; how many parts it holds then."""
        with self._lock:
            self._noted.clear()  # read again with everything else
            with self._write() as conn:
                _start_over(conn)
            self.catch_up(progress)
            return int(index_counts(self._db())["parts"])

    # -- reading ------------------------------------------------------------------------------

    @contextmanager
    def _waiting(self, seconds: float) -> Iterator[sqlite3.Connection]:
        """The file's connection, its writes waiting at most ``seconds`` for another process's
        write lock meanwhile."""
        conn = self._db()
        (before,) = conn.execute("PRAGMA busy_timeout").fetchone()
        conn.execute(f"PRAGMA busy_timeout={int(seconds * 1000)}")
        try:
            yield conn
        finally:
            conn.execute(f"PRAGMA busy_timeout={int(before)}")

    def _up_to_date(self) -> Tx | None:
        """Bring the file up to date for a search, and the node's newest transaction. While
        another process keeps the write lock past ``SEARCH_WAIT_S`` (its catch-up, a rebuild, an
        eviction compacting the file), what the file holds is searched: what was written since
        is found by the next search (before, a search waited 60 s, then took the lock's error for
        a damaged index and scanned every version without stems: "run test" found nothing of
        "running the tests"). Texts held back from the FTS5 table are matched apart (``ranked``)."""
        with self._lock, self._waiting(self.SEARCH_WAIT_S) as conn:
            try:
                _, latest = self._catch_up()
                if not tables_present(conn):
                    return latest  # dropped as damaged (``search`` says so)
                done, top = fts_pending(conn)
                if top > done:
                    with self._write() as held:
                        flush_fts(held, force=True)
                return latest
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
                log.debug("the keyword index %s is being written by another process: searched as it is", self.path)
                return self.store.latest_tx()

    def search(self, args: SearchArgs) -> list[TextHit] | None:
        """The hits of a search; None while the index is dropped as damaged (the caller scans)."""
        latest = self._up_to_date()
        if args.tx_id is not None and (latest is None or args.tx_id > latest.id):
            newest = None if latest is None else latest.id
            raise StoreError(f"tx {args.tx_id} is past the newest transaction ({newest}) of {self.store.url}")
        with self._lock:
            if not tables_present(self._db()):
                return None
        if args.match is None or latest is None:
            return []
        # One basis for every check: the same (valid time, tx) whatever lands meanwhile.
        vt = now_ms() if args.valid_time is None else args.valid_time
        tx = latest.id if args.tx_id is None else args.tx_id
        hits: list[TextHit] = []
        in_force: dict[str, Version | None] = {}
        batch = max(2 * args.k, 32)
        with self._lock:
            candidates = ranked(self._db(), args)
            while len(hits) < args.k:
                chunk = [c for _, c in zip(range(batch), candidates, strict=False)]
                if not chunk:
                    break
                ids = [i for i in dict.fromkeys(c.id for c in chunk) if i not in in_force]
                for doc_id, v in zip(ids, self._map(lambda i: self.store.get(i, vt, tx), ids), strict=True):
                    in_force[doc_id] = v
                for c in chunk:
                    v = in_force[c.id]
                    if v is None or v.doc is None or (c.part, c.text) not in index_parts(v.doc):
                        continue
                    hits.append(
                        TextHit(
                            c.id,
                            c.kind,
                            c.part,
                            v.valid_time,
                            v.tx_id,
                            str(v.object_hash or ""),
                            c.session,
                            c.text,
                            c.score,
                        )
                    )
                    if len(hits) == args.k:
                        break
        return hits

    def _map(self, fn: Callable[[str], Version | None], items: list[str]) -> list[Version | None]:
        if len(items) <= 1:
            return [fn(i) for i in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.VERIFY_WORKERS, thread_name_prefix="ctxos-text")
        return list(self._pool.map(fn, items))

    def parts(self, after_seq: int, limit: int) -> list[TextPart]:
        self.catch_up()
        with self._lock:
            conn = self._db()
            return parts_after(conn, after_seq, limit) if tables_present(conn) else []

    def status(self) -> dict[str, Any]:
        with self._lock:
            self._write_noted(strict=False)
            exists = self.path.exists()
            conn = self._db()
            state, problem = state_and_damage(conn)
            checked = False
            if state == "ok":
                checked, problem = checked_problem(conn, self.SEARCH_WAIT_S)
                state = "ok" if problem is None else "corrupt"
            counts = index_counts(conn) if tables_present(conn) else {"parts": 0, "documents": 0, "last_seq": 0}
            last = self.last_tx()
        latest = self.store.latest_tx()
        out: dict[str, Any] = {
            "backend": "fts5-sidecar",
            "path": str(self.path),
            "state": state if exists else "missing",
            **counts,
            "last_indexed_tx": None if last < 0 else last,
            "store_tx": None if latest is None else latest.id,
            "lags": latest is not None and last < latest.id,
            "search": "index" if state == "ok" else "scan",
            "tokenizer": TOKENIZER,
            "checked": checked,
        }
        if state == "corrupt":
            out["problem"] = problem
        return out

    def close(self) -> None:
        with self._lock:
            self._write_noted(strict=False)
            pool, self._pool = self._pool, None
            conn, self._conn = self._conn, None
        if pool is not None:
            pool.shutdown(wait=True)
        if conn is not None:
            conn.close()
