"""Per-peer memory (mesh/memory.py) on every store: append-only entries, newest first, keys,
search scoped to one peer through the stores' keyword index, the seed's limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from context_os.errors import ConfigError, InputError
from context_os.mesh.memory import MemoryLimits, PeerMemory
from context_os.sources.recall import open_recall
from context_os.store.base import Store


def test_entries_append_and_read_newest_first_per_peer_and_key(store: Store, uid: str) -> None:
    mem = PeerMemory(store, f"alice-{uid}")
    for i in range(3):
        mem.store_entry("peerB", "decision", f"decision {i}", peer_name="bob")
    mem.store_entry("peerB", "prefs", "short answers")
    mem.store_entry("peerC", "decision", "carol's call")
    assert [e.value for e in mem.get("peerB", "decision")] == ["decision 2", "decision 1", "decision 0"]
    assert [e.value for e in mem.get("peerB", "decision", limit=1)] == ["decision 2"]
    assert len(mem.get("peerB")) == 4 and len(mem.get(key="decision")) == 4
    assert mem.keys("peerB") == [{"key": "decision", "count": 3}, {"key": "prefs", "count": 1}]
    assert mem.count() == 5 and mem.count("peerC") == 1
    # another agent sharing the store sees none of it
    assert PeerMemory(store, f"other-{uid}").get("peerB") == []


def test_search_is_scoped_to_a_peer_and_to_the_agent(store: Store, uid: str) -> None:
    mem = PeerMemory(store, f"alice-{uid}")
    mem.store_entry("peerB", "decision", f"we picked postgres {uid} for the ledger")
    mem.store_entry("peerC", "decision", f"postgres {uid} is too heavy for the edge nodes")
    PeerMemory(store, f"mallory-{uid}").store_entry("peerB", "decision", f"postgres {uid} everywhere")
    everyone = mem.search(f"postgres {uid}")
    assert {e.peer for e in everyone} == {"peerB", "peerC"}
    only_b = mem.search(f"postgres {uid}", peer="peerB")
    assert [e.value for e in only_b] == [f"we picked postgres {uid} for the ledger"]
    assert mem.search(f"kubernetes {uid}xyz") == []


def test_what_is_recalled_for_a_request_keeps_to_the_budget(store: Store, uid: str) -> None:
    mem = PeerMemory(store, f"alice-{uid}", limits=MemoryLimits(budget=300, exchange_truncate=50))
    mem.store_entry("peerB", "exchange", "[Request] " + "x" * 500)
    mem.store_entry("peerB", "notes", f"deploys {uid} happen on fridays")
    text, taken = mem.recall_for("peerB", f"when do deploys {uid} happen?")
    assert text.startswith("[Memory of this peer]")
    assert len(text) <= 300 + len("[Memory of this peer]\n") + 10
    assert taken[0].key == "exchange" and len(taken[0].value) == 50  # the latest exchange, cut
    assert any(f"deploys {uid}" in e.value for e in taken)
    assert mem.recall_for("nobody", "anything") == ("", [])


def test_values_are_cut_on_read_unless_full_text(store: Store, uid: str) -> None:
    mem = PeerMemory(store, f"alice-{uid}", limits=MemoryLimits.preset("small"))
    mem.store_entry("peerB", "log", "y" * 5000)
    [cut] = mem.get("peerB", "log")
    assert cut.truncated and len(cut.value) == 2001
    [full] = mem.get("peerB", "log", full_text=True)
    assert not full.truncated and len(full.value) == 5000


def test_bad_arguments_are_refused(store: Store, uid: str) -> None:
    mem = PeerMemory(store, f"alice-{uid}")
    with pytest.raises(InputError, match="peerId, a key, or both"):
        mem.get()
    with pytest.raises(InputError, match="key must be non-empty"):
        mem.store_entry("peerB", " ", "v")
    with pytest.raises(InputError, match="metadata values"):
        mem.store_entry("peerB", "k", "v", metadata={"nested": {"a": 1}})
    with pytest.raises(InputError, match="limit must be a positive integer"):
        mem.get("peerB", limit=0)
    with pytest.raises(ConfigError, match="preset must be one of"):
        MemoryLimits.preset("huge")
    assert MemoryLimits.preset("medium", budget=9).budget == 9


@pytest.mark.parametrize("embedder", [None, "wordllama"])
def test_the_same_fact_from_two_peers_is_found_once_for_each(
    store: Store, uid: str, tmp_path: Path, embedder: str | None
) -> None:
    """Search through recall merged parts of the same text into one hit: two peers who told the
    agent the same thing came back as one entry, of one of them (who said it was lost). The same
    text told twice by one peer is still one entry (keyword search alone kept both)."""
    recall = open_recall(store, embedder, path=tmp_path / "v.vectors", background=False)
    try:
        mem = PeerMemory(store, f"alice-{uid}", recall=recall)
        mem.store_entry("peerB", "decision", f"we deploy {uid} on fridays")
        mem.store_entry("peerC", "decision", f"we deploy {uid} on fridays")
        mem.store_entry("peerC", "decision", f"we deploy {uid}  on fridays")  # said again: adds nothing
        mem.store_entry("peerC", "prefs", "short answers please")
        if recall.vectors is not None:
            recall.vectors.catch_up()
        found = mem.search(f"deploy {uid} fridays")
        assert sorted(e.peer for e in found if uid in e.value) == ["peerB", "peerC"], found
    finally:
        recall.close()


@pytest.mark.parametrize("embedder", [None, "wordllama"])
def test_one_peer_s_repeated_entry_does_not_crowd_out_the_others(
    store: Store, uid: str, tmp_path: Path, embedder: str | None
) -> None:
    """Search looked at the best ``4 n`` parts only: a broadcast heard 25 times filled them, one
    entry once its repeats were left out, and the other peers' entries were not found."""
    recall = open_recall(store, embedder, path=tmp_path / "v.vectors", background=False)
    try:
        mem = PeerMemory(store, f"alice-{uid}", recall=recall)
        for _ in range(25):
            mem.store_entry("peerB", "broadcast", f"[event] deploy freeze {uid} starts tonight at ten")
        mem.store_entry("peerC", "notes", f"the deploy freeze {uid} was moved")
        mem.store_entry("peerD", "notes", f"ask before any deploy {uid}")
        if recall.vectors is not None:
            recall.vectors.catch_up()
        found = mem.search(f"deploy freeze {uid} tonight ten", n=3)
        assert sorted(e.peer for e in found) == ["peerB", "peerC", "peerD"], found
    finally:
        recall.close()
