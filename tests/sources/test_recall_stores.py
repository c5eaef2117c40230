"""Recall's ranking on every store (the real XTDB node included): the session prior and the
periods a query names read the same versions, by the same rules, whatever the store."""

from __future__ import annotations

from datetime import UTC, datetime

from context_os import Session
from context_os.harness.pi import PiHook
from context_os.sources.recall import Recall, RecallConfig
from context_os.store import Store


def at(date: str) -> int:
    return int(datetime.fromisoformat(date).replace(tzinfo=UTC).timestamp() * 1000)


def said(store: Store, session: str, when: int, texts: list[str]) -> None:
    messages = [
        {
            "role": "user" if k % 2 == 0 else "assistant",
            "content": [{"type": "text", "text": t}],
            "timestamp": when + 60_000 * k,
        }
        for k, t in enumerate(texts)
    ]
    with Session.open(store, session, harness="pi", redact=False) as s:
        PiHook(s).transform_context(messages)


def test_a_named_period_and_the_session_prior_rank_alike_on_every_store(store: Store, uid: str) -> None:
    word = f"game{uid}"  # a word no other test's data holds (the XTDB node is shared)
    said(store, f"{uid}-a", at("2022-10-09"), [f"We played {word} at the convention.", "Who won?"])
    said(store, f"{uid}-b", at("2023-08-14"), [f"We played {word} at the convention.", "Who won this time?"])
    said(store, f"{uid}-c", at("2023-08-20"), [f"A long day: the train, the talks and a {word} box at the shop."])
    recall = Recall(store, config=RecallConfig(session_weight=0))
    assert [h.session for h in recall.search(f"played {word}", k=2).hits] == [f"{uid}-a", f"{uid}-b"]
    result = recall.search(f"Where was {word} played in August 2023?", k=10)
    assert [p.text for p in result.periods] == ["August 2023"]
    ranked = [(h.session, h.part) for h in result.hits]
    # b's first entry, said then, first; c's, BM25's weakest, still above a's reply (said in 2022)
    assert ranked[:2] == [(f"{uid}-b", "e0"), (f"{uid}-a", "e0")]
    assert ranked.index((f"{uid}-c", "e0")) < ranked.index((f"{uid}-a", "e1"))
    hit = result.hits[0]
    assert hit.part == "e0" and hit.score == recall.config.bm25_weight * (1 + recall.config.time_weight)
    # the session prior: the session whose other entry matches too comes first
    said(store, f"{uid}-d", at("2024-01-02"), [f"{word} again?", f"Yes, {word} night."])
    prior = Recall(store).search(f"{word}", k=2).hits
    assert {h.session for h in prior} == {f"{uid}-d"}
