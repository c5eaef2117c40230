"""Recall's ranking on every store (the real XTDB node included): the periods a query names are
matched against the times the store holds (a chat entry's harness time in its page, or a
version's valid time), by the same rules whatever the store."""

from __future__ import annotations

from datetime import UTC, datetime

from context_os import Session
from context_os.harness.pi import PiHook
from context_os.objects import SourceDoc
from context_os.sources.recall import Recall, RecallConfig
from context_os.store import Store
from context_os.times import now_ms


def at(date: str) -> int:
    return int(datetime.fromisoformat(date).replace(tzinfo=UTC).timestamp() * 1000)


def said(store: Store, session: str, when: int, texts: list[str]) -> None:
    """``texts`` as a Pi session whose messages carry their time (a minute apart from ``when``)."""
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


def test_what_was_said_in_a_period_the_query_names_comes_first(store: Store, uid: str) -> None:
    game = f"game{uid}"  # a word no other test's data holds (the XTDB node is shared)
    same = f"We played {game} at the convention."
    said(store, f"{uid}-a", at("2022-10-09"), [same, "Who won?"])
    said(store, f"{uid}-b", at("2023-08-14"), [same, "Who won this time?"])
    said(store, f"{uid}-c", at("2023-08-20"), [f"A long day: the train, the talks and a {game} box at the shop."])
    recall = Recall(store, config=RecallConfig(session_weight=0))
    plain = recall.search(f"played {game}", k=2).hits
    assert [h.session for h in plain] == [f"{uid}-a", f"{uid}-b"] and plain[0].score == plain[1].score  # a tie
    for when, session in (("on 9 October, 2022", "a"), ("in August 2023", "b"), ("on 2023-08-14", "b")):
        result = recall.search(f"Where was {game} played {when}?", k=10)
        hit = result.hits[0]
        assert (hit.session, hit.part) == (f"{uid}-{session}", "e0"), when
        assert hit.score == recall.config.bm25_weight * (1 + recall.config.time_weight)  # BM25's best + the period's
        assert len(result.periods) == 1
    ranked = [(h.session, h.part) for h in recall.search(f"Where was {game} played in August 2023?", k=10).hits]
    # c's entry, BM25's weakest, said then, still comes before a's reply (said in 2022)
    assert ranked.index((f"{uid}-c", "e0")) < ranked.index((f"{uid}-a", "e1"))
    off = Recall(store, config=RecallConfig(session_weight=0, time_weight=0))
    assert [h.session for h in off.search(f"{game} in August 2023", k=2).hits] == [f"{uid}-a", f"{uid}-b"]
    # a part without a harness time is placed by its version's valid time
    minutes = SourceDoc(id=f"memory:{uid}", kind="memory", content=f"{game} rematch minutes from the club.").to_doc()
    store.put(minutes, valid_from=at("2021-05-03"))
    assert recall.search(game, k=4).hits[0].id != f"memory:{uid}"
    assert recall.search(f"{game} in May 2021", k=4).hits[0].id == f"memory:{uid}"
    # a relative period counts from as_of
    ref = now_ms() + 1_000
    said(store, f"{uid}-d", ref - 86_400_000, [f"{game} is on the table again."])
    assert recall.search(game, k=1, as_of=ref).hits[0].session != f"{uid}-d"
    assert recall.search(f"{game} yesterday", k=1, as_of=ref).hits[0].session == f"{uid}-d"
