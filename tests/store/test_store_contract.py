"""The store contract (store/base.py), run unchanged on every backend.

XTDB 1.x is the reference: each test states an XTDB behaviour, and the SQLite store must show
the same. The XTDB node is shared by the whole run, so every id, kind and meta value here is
derived from ``uid``, tx ids are only compared with each other, and valid times are explicit
epoch milliseconds in the past (``T0 + n``). Where a test pins an XTDB behaviour we derived
from its source rather than saw on a node, a comment says so (marked "XTDB:").
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import pytest

from context_os.errors import StoreError
from context_os.hashing import MAX_DEPTH
from context_os.store import Delete, DocMemo, Evict, Match, Put, Store, Version, now_ms, open_store
from context_os.times import MAX_MS, MIN_MS

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def doc(id: str, n: int = 0, *, kind: str = "note", **meta: Any) -> dict[str, Any]:
    return {"id": id, "kind": kind, "content": f"v{n}", "meta": {"n": n, **meta}}


def ns(versions: list[Version]) -> list[int | None]:
    """The ``meta.n`` of each version (None for a deletion)."""
    return [None if v.doc is None else v.doc["meta"]["n"] for v in versions]


def n_at(store: Store, id: str, vt: int, tx_id: int | None = None) -> int | None:
    v = store.get(id, vt, tx_id)
    return None if v is None else v.doc["meta"]["n"] if v.doc else None


# -- documents ---------------------------------------------------------------------------------


def test_nested_document_round_trips(store: Store, uid: str) -> None:
    d: dict[str, Any] = {
        "id": f"{uid}-nested",
        "kind": "note",
        "content": 'héllo ✓ 日本語 🎉 "quoted" \\ back\nline\ttab \u0000 nul',
        "meta": {
            "int": 42,
            "neg": -7,
            "big": 2**53,
            "float": 1.5,
            "small": -2.5e-8,
            "t": True,
            "f": False,
            "none": None,
            "empty_s": "",
            "empty_l": [],
            "empty_m": {},
            "list": [1, "two", 3.25, None, [True, {"deep": ["er"]}]],
            "map": {"a": {"b": {"c": [1, 2, {"d": "é"}]}}},
        },
    }
    store.submit([Put(d, T0)])
    v = store.get(d["id"], T0)
    assert v is not None
    assert v.doc == d
    assert type(v.doc["meta"]["float"]) is float and type(v.doc["meta"]["int"]) is int


DEPTH = MAX_DEPTH - 1
"""The deepest a document's content may nest (the document itself one more level): deep enough to
need a walk of one frame a level on every store (Python's default limit: 1,000)."""


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_a_document_nested_past_max_depth_is_refused_as_not_json(store: Store, uid: str) -> None:
    """Nesting up to ``MAX_DEPTH`` levels round-trips on every store, and one more is refused,
    naming the document, as a ``StoreError`` (it was a bare ``RecursionError`` on both stores, and
    the XTDB store's from 500 levels, where the SQLite store took 990; then, until a fixed bound,
    as deep as the writing call's stack let it walk, which a deeper reader's did not)."""
    deep = {"id": f"{uid}-deep", "kind": f"deep-{uid}", "meta": {}, "content": _nested(DEPTH)}
    store.submit([Put(deep, T0)])
    got = store.get(deep["id"], T0)
    assert got is not None and got.doc == deep
    for depth in (DEPTH + 1, 1_200, 100_000):
        doc = {"id": f"{uid}-too-deep-{depth}", "kind": f"deep-{uid}", "meta": {}, "content": _nested(depth)}
        with pytest.raises(StoreError, match=f"{uid}-too-deep-{depth}.*nested too deeply"):
            store.submit([Put(doc, T0)])
        assert store.get(doc["id"]) is None


def test_keys_that_are_not_identifiers_round_trip(store: Store, uid: str) -> None:
    # JSON keys need not be valid EDN keywords; the XTDB backend must still keep them exactly.
    d: dict[str, Any] = {
        "id": f"{uid}-keys",
        "kind": "note",
        "meta": {"with space": 1, "ns/name": 2, ":colon": 3, "1leading-digit": 4, "ünï": 5, "": 6},
    }
    store.submit([Put(d, T0)])
    assert store.doc(d["id"], T0) == d


def test_unknown_id_has_nothing(store: Store, uid: str) -> None:
    assert store.get(f"{uid}-nope") is None
    assert store.doc(f"{uid}-nope") is None
    assert store.history(f"{uid}-nope") == []
    assert store.history(f"{uid}-nope", "desc") == []


# -- valid time --------------------------------------------------------------------------------


def test_put_at_valid_time_get_before_at_after(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    tx = store.submit([Put(doc(id, 1), T0 + 10)])
    assert store.get(id, T0 + 9) is None
    v = store.get(id, T0 + 10)
    assert v is not None and v.doc == doc(id, 1)
    assert (v.id, v.valid_time, v.tx_id, v.tx_time, v.deleted) == (id, T0 + 10, tx.id, tx.time, False)
    assert n_at(store, id, T0 + 1_000_000) == 1
    assert n_at(store, id, now_ms()) == 1
    assert store.doc(id) == doc(id, 1)


def test_retroactive_put_between_versions(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0 + 10)])
    store.submit([Put(doc(id, 3), T0 + 30)])
    store.submit([Put(doc(id, 2), T0 + 20)])
    assert [n_at(store, id, T0 + t) for t in (5, 10, 15, 20, 25, 30, 35)] == [None, 1, 1, 2, 2, 3, 3]
    assert ns(store.history(id)) == [1, 2, 3]


def test_retroactive_put_before_first_version(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    t1 = store.submit([Put(doc(id, 1), T0 + 10)])
    store.submit([Put(doc(id, 0), T0 + 5)])
    assert n_at(store, id, T0 + 7) == 0
    assert n_at(store, id, T0 + 12) == 1
    # the old transaction did not know the retroactive version
    assert n_at(store, id, T0 + 7, t1.id) is None


def test_range_put_over_existing_versions(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0 + 10)])
    t2 = store.submit([Put(doc(id, 2), T0 + 20)])
    t3 = store.submit([Put(doc(id, 9), T0 + 5, T0 + 30)])
    assert [n_at(store, id, T0 + t) for t in (4, 5, 10, 20, 29, 30, 40)] == [None, 9, 9, 9, 9, 2, 2]
    # XTDB writes the range doc at valid_from and again at every version start inside the
    # range, and re-asserts what held at valid_to there.
    hist = store.history(id)
    assert [(v.valid_time - T0, ns([v])[0]) for v in hist] == [(5, 9), (10, 9), (20, 9), (30, 2)]
    assert [v.tx_id for v in hist[:3]] == [t3.id] * 3
    # XTDB: the restored version at valid_to keeps the tx id (and tx time) of the version it
    # restores, not the range put's (xtdb.tx/put-delete-coords assocs the old entity-tx's vt).
    resumed = store.get(id, T0 + 30)
    assert resumed is not None
    assert (resumed.valid_time, resumed.tx_id, resumed.tx_time) == (T0 + 30, t2.id, t2.time)


def test_range_put_inside_one_version_resumes_it(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    t1 = store.submit([Put(doc(id, 1), T0 + 10)])
    store.submit([Put(doc(id, 5), T0 + 15, T0 + 20)])
    assert [n_at(store, id, T0 + t) for t in (12, 15, 19, 20, 100)] == [1, 5, 5, 1, 1]
    after = store.get(id, T0 + 20)
    assert after is not None and after.tx_id == t1.id


def test_range_put_on_nothing_ends_in_absence(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0 + 10, T0 + 20)])
    assert [n_at(store, id, T0 + t) for t in (9, 10, 19, 20, 30)] == [None, 1, 1, None, None]
    hist = store.history(id)
    assert [(v.valid_time - T0, v.deleted) for v in hist] == [(10, False), (20, True)]


def test_range_put_with_equal_bounds_writes_nothing(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0 + 10, T0 + 10)])
    assert store.get(id, T0 + 10) is None
    assert store.history(id) == []


def test_put_after_range_put_replaces_its_copies(store: Store, uid: str) -> None:
    # XTDB: a put without valid_to also overwrites the following rows that the same tx wrote
    # with the same doc (the copies a range put leaves at each boundary), so the new doc holds
    # until the next real change rather than until the next copy.
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0 + 10)])
    store.submit([Put(doc(id, 2), T0 + 20)])
    store.submit([Put(doc(id, 9), T0 + 5, T0 + 30)])
    store.submit([Put(doc(id, 7), T0 + 5)])
    assert [n_at(store, id, T0 + t) for t in (5, 10, 20, 29, 30)] == [7, 7, 7, 7, 2]


def test_put_after_range_delete_keeps_its_copies(store: Store, uid: str) -> None:
    # XTDB: ... but not over the copies of a deletion: its as-of read gives a deletion a nil
    # content hash and its history the nil-id hash, so the two never compare equal. The new
    # doc holds only until the deletion's next copy.
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0)])
    store.submit([Put(doc(id, 2), T0 + 10)])
    store.submit([Delete(id, T0 + 5, T0 + 20)])
    store.submit([Put(doc(id, 7), T0 + 7)])
    assert [n_at(store, id, T0 + t) for t in (0, 5, 7, 9, 10, 19, 20)] == [1, None, 7, 7, None, None, 2]


def test_range_put_without_valid_from_starts_at_tx_time(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    end = now_ms() + 3_600_000
    tx = store.submit([Put(doc(id, 1), None, end)])
    assert n_at(store, id, tx.time) == 1
    assert store.get(id, tx.time - 1) is None
    assert store.get(id, end) is None
    assert n_at(store, id, end - 1) == 1


# -- deletes -----------------------------------------------------------------------------------


def test_delete_ends_a_document(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0 + 10)])
    td = store.submit([Delete(id, T0 + 20)])
    assert n_at(store, id, T0 + 15) == 1
    assert store.get(id, T0 + 20) is None
    assert store.get(id) is None
    hist = store.history(id)
    assert [(v.valid_time - T0, v.deleted, v.doc is None) for v in hist] == [(10, False, False), (20, True, True)]
    assert hist[1].tx_id == td.id and hist[1].tx_time == td.time
    assert hist[1].object_hash is None


def test_delete_with_range_then_the_document_resumes(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0 + 10)])
    store.submit([Delete(id, T0 + 20, T0 + 30)])
    assert [n_at(store, id, T0 + t) for t in (15, 20, 25, 30, 40)] == [1, None, None, 1, 1]
    assert [(v.valid_time - T0, v.deleted) for v in store.history(id)] == [(10, False), (20, True), (30, False)]


def test_put_after_delete(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0 + 10)])
    store.submit([Delete(id, T0 + 20)])
    store.submit([Put(doc(id, 2), T0 + 30)])
    assert [n_at(store, id, T0 + t) for t in (15, 25, 35)] == [1, None, 2]


def test_delete_of_unknown_id_records_a_deletion(store: Store, uid: str) -> None:
    # XTDB: a delete writes its entity-tx whether or not the document existed.
    id = f"{uid}-ghost"
    store.submit([Delete(id, T0 + 10)])
    assert store.get(id, T0 + 10) is None
    assert [(v.valid_time - T0, v.deleted) for v in store.history(id)] == [(10, True)]


# -- transaction time --------------------------------------------------------------------------


def test_correction_at_same_valid_time_old_tx_sees_old_doc(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    t1 = store.submit([Put(doc(id, 1), T0 + 10)])
    t2 = store.submit([Put(doc(id, 2), T0 + 10)])
    assert n_at(store, id, T0 + 10) == 2
    assert n_at(store, id, T0 + 10, t1.id) == 1
    assert n_at(store, id, T0 + 10, t2.id) == 2
    old = store.get(id, T0 + 10, t1.id)
    assert old is not None and (old.tx_id, old.tx_time) == (t1.id, t1.time)
    # history shows only the latest correction of each valid time ...
    hist = store.history(id)
    assert [(v.valid_time, v.tx_id, ns([v])[0]) for v in hist] == [(T0 + 10, t2.id, 2)]
    # ... as known at the end of the tx bounds
    assert ns(store.history(id, end_tx_id=t2.id)) == [1]
    assert ns(store.history(id, "desc", start_tx_id=t1.id)) == [1]


def test_history_with_corrections_has_every_version_in_tx_order_within_a_valid_time(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    t1 = store.submit([Put(doc(id, 1), T0 + 10)])
    t2 = store.submit([Put(doc(id, 2), T0 + 10)])  # a correction of the same valid time
    t3 = store.submit([Put(doc(id, 3), T0 + 20)])
    t4 = store.submit([Put(doc(id, 4), T0 + 10)])  # and another, after a later valid time's
    rows = [(v.valid_time - T0, v.tx_id, ns([v])[0]) for v in store.history(id, with_corrections=True)]
    assert rows == [(10, t1.id, 1), (10, t2.id, 2), (10, t4.id, 4), (20, t3.id, 3)]
    desc = [(v.valid_time - T0, v.tx_id) for v in store.history(id, "desc", with_corrections=True)]
    assert desc == [(20, t3.id), (10, t4.id), (10, t2.id), (10, t1.id)]
    # the bounds as without corrections; without them, the latest correction of each valid time
    assert ns(store.history(id, end_tx_id=t3.id, with_corrections=True)) == [1, 2]
    assert ns(store.history(id, "desc", start_tx_id=t2.id, with_corrections=True)) == [2, 1]
    assert ns(store.history(id)) == [4, 3]
    bare = store.history(id, with_docs=False, with_corrections=True)
    assert [v.tx_id for v in bare] == [t1.id, t2.id, t4.id, t3.id] and all(v.doc is None for v in bare)


def test_tx_ids_increase_and_tx_time_does_not_go_back(store: Store, uid: str) -> None:
    txs = [store.submit([Put(doc(f"{uid}-{i}", i))]) for i in range(5)]
    assert all(b.id > a.id for a, b in zip(txs, txs[1:], strict=False))
    assert all(b.time >= a.time for a, b in zip(txs, txs[1:], strict=False))
    assert all(t.committed for t in txs)
    latest = store.latest_tx()
    assert latest is not None and latest.id >= txs[-1].id and latest.time >= txs[-1].time


def test_after_sync_another_client_of_the_backend_reads_the_write(store: Store, uid: str) -> None:
    tx = store.submit([Put(doc(uid, 1))])
    assert store.latest_tx_id() is not None and store.latest_tx_id() >= tx.id  # type: ignore[operator]
    store.sync()
    other = open_store(store.url)
    try:
        assert n_at(other, uid, tx.time) == 1
        latest = other.latest_tx()
        assert latest is not None and latest.id >= tx.id
    finally:
        other.close()


def test_an_id_and_a_meta_value_holding_a_nul_are_written_matched_and_found_by_another_client(
    store: Store, uid: str
) -> None:
    """A NUL (U+0000) is text like any other to XTDB. SQLite's JSON functions end a string there:
    another client of the file (the store opened again) could not write a new version of an id
    holding one (``UNIQUE constraint failed``), a match on it failed, and ``find`` by a meta value
    or a meta key holding one found nothing when the key was first searched after the write."""
    id, kind = f"{uid}-a\x00b", f"k{uid}"
    store.submit([Put(doc(id, 1, kind=kind, tag="x\x00y", **{"t\x00g": 1}), T0)])
    store.sync()
    other = open_store(store.url)
    try:
        other.submit([Put(doc(id, 2, kind=kind, tag="x\x00y", **{"t\x00g": 1}), T0 + 1)])
        assert other.submit([Match(id, doc(id, 2, kind=kind, tag="x\x00y", **{"t\x00g": 1}), T0 + 1)]).committed
        assert ns(other.find(kind, {"tag": "x\x00y"}, valid_time=T0 + 1)) == [2]
        assert ns(other.find(kind, {"tag": "x"}, valid_time=T0 + 1)) == []
        assert ns(other.find(kind, {"t\x00g": 1}, valid_time=T0 + 1)) == [2]  # a key holding one
        assert ns(other.history(id, "asc", with_docs=True)) == [1, 2]
    finally:
        other.close()


def test_default_valid_time_is_tx_time(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    before = now_ms()
    tx = store.submit([Put(doc(id, 1))])
    assert tx.time >= before - 1_000  # same machine, millisecond clock
    hist = store.history(id)
    assert [(v.valid_time, v.tx_id, v.tx_time) for v in hist] == [(tx.time, tx.id, tx.time)]
    assert store.get(id, tx.time - 1) is None
    assert n_at(store, id, tx.time) == 1
    assert store.doc(id) == doc(id, 1)


def test_delete_default_valid_time_is_tx_time(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0)])
    tx = store.submit([Delete(id)])
    assert store.get(id) is None
    assert n_at(store, id, tx.time - 1) == 1


def test_millisecond_precision_survives(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    vt = T0 + 123_457  # not a whole second
    store.submit([Put(doc(id, 1), vt), Put(doc(f"{uid}-b", 2), vt + 1)])
    assert store.get(id, vt - 1) is None
    v = store.get(id, vt)
    assert v is not None and v.valid_time == vt
    assert [h.valid_time for h in store.history(id)] == [vt]
    assert [h.valid_time for h in store.history(f"{uid}-b", "desc")] == [vt + 1]
    tx = store.submit([Put(doc(id, 2))])
    v = store.get(id)
    assert v is not None and v.valid_time == tx.time and v.tx_time == tx.time


def test_valid_times_at_the_limits_hold_and_past_them_are_refused(store: Store, uid: str) -> None:
    # times.py: both stores hold every time of the years 0001-9999 UTC and refuse any other. The
    # SQLite store wrote and read any 64-bit integer: a put one millisecond past the range
    # committed there (and was found), and the XTDB store refused it.
    id = f"{uid}-limits"
    store.submit([Put(doc(id, 1), MIN_MS, MAX_MS)])
    assert n_at(store, id, MIN_MS) == 1 and n_at(store, id, MAX_MS - 1) == 1
    assert store.get(id, MAX_MS) is None  # the range ends there (exclusive)
    before = store.latest_tx()
    for bad in (MIN_MS - 1, MAX_MS + 1):
        for ops in ([Put(doc(id, 2), bad)], [Put(doc(id, 2), T0, bad)], [Delete(id, bad)], [Match(id, None, bad)]):
            with pytest.raises(StoreError, match="outside the years"):
                store.submit(ops)
        with pytest.raises(StoreError, match="outside the years"):
            store.get(id, bad)
        with pytest.raises(StoreError, match="outside the years"):
            store.find("note", {"n": 1}, valid_time=bad)
        with pytest.raises(StoreError, match="outside the years"):
            store.history(id, start_valid_time=bad)
    assert store.latest_tx() == before


def test_a_valid_time_before_the_gregorian_calendar_reads_back_the_same_everywhere(store: Store, uid: str) -> None:
    # XTDB keeps an #inst as a java.util.Date, read and printed in the Julian calendar before
    # 1582-10-15: every #inst round-trips, but our front end's history gave each version its
    # Date's own epoch ms (two days before the time written in year 1, six in year 1000, ten
    # in 1582), so history disagreed with get, find and the SQLite store. (The days the Julian
    # calendar skips, 1582-10-05 to -14, XTDB reads as ten days later: no time of them is used.)
    times = [MIN_MS + 7, -30_605_126_400_000, -12_220_243_200_000, -12_219_206_400_000]  # 1, 1000, 1582-10-04, -16
    ids = [f"{uid}-cal{i}" for i in range(len(times))]
    store.submit([Put(doc(i, n), t) for n, (i, t) in enumerate(zip(ids, times, strict=True))])
    for i, t in zip(ids, times, strict=True):
        got = store.get(i, t)
        assert got is not None and got.valid_time == t and store.get(i, t - 1) is None
        assert [v.valid_time for v in store.history(i)] == [t]
        assert [v.valid_time for v in store.history(i, "desc", with_docs=False)] == [t]
        assert [v.valid_time for v in store.find("note", valid_time=t) if v.id == i] == [t]


def test_several_documents_in_one_transaction(store: Store, uid: str) -> None:
    tx = store.submit([Put(doc(f"{uid}-{i}", i), T0 + i) for i in range(50)])
    assert tx.committed
    for i in range(50):
        v = store.get(f"{uid}-{i}", T0 + 100)
        assert v is not None and v.tx_id == tx.id and v.valid_time == T0 + i and ns([v]) == [i]


# -- history -----------------------------------------------------------------------------------


@pytest.fixture
def three(store: Store, uid: str) -> tuple[str, list[int]]:
    """One id with versions 1, 2, 3 at T0+10, +20, +30 in three transactions."""
    id = f"{uid}-h"
    txs = [store.submit([Put(doc(id, n), T0 + 10 * n)]).id for n in (1, 2, 3)]
    return id, txs


def test_history_orders(store: Store, three: tuple[str, list[int]]) -> None:
    id, txs = three
    asc = store.history(id)
    assert ns(asc) == [1, 2, 3]
    assert [v.valid_time for v in asc] == [T0 + 10, T0 + 20, T0 + 30]
    assert [v.tx_id for v in asc] == txs
    assert all(v.id == id and not v.deleted for v in asc)
    desc = store.history(id, "desc")
    assert ns(desc) == [3, 2, 1]
    assert [v.tx_id for v in desc] == txs[::-1]


def test_history_without_docs(store: Store, three: tuple[str, list[int]]) -> None:
    id, txs = three
    store.submit([Delete(id, T0 + 40)])
    bare = store.history(id, with_docs=False)
    assert [(v.valid_time - T0, v.doc, v.deleted) for v in bare] == [
        (10, None, False),
        (20, None, False),
        (30, None, False),
        (40, None, True),
    ]
    assert [v.tx_id for v in bare[:3]] == txs


def test_history_valid_time_bounds(store: Store, three: tuple[str, list[int]]) -> None:
    id, _ = three
    # ascending: start inclusive, end exclusive
    assert ns(store.history(id, start_valid_time=T0 + 20)) == [2, 3]
    assert ns(store.history(id, start_valid_time=T0 + 21)) == [3]
    assert ns(store.history(id, end_valid_time=T0 + 30)) == [1, 2]
    assert ns(store.history(id, start_valid_time=T0 + 10, end_valid_time=T0 + 20)) == [1]
    # descending: starts at start_valid_time (inclusive) and goes back to end (exclusive)
    assert ns(store.history(id, "desc", start_valid_time=T0 + 20)) == [2, 1]
    assert ns(store.history(id, "desc", start_valid_time=T0 + 25)) == [2, 1]
    assert ns(store.history(id, "desc", end_valid_time=T0 + 10)) == [3, 2]
    assert ns(store.history(id, "desc", start_valid_time=T0 + 30, end_valid_time=T0 + 20)) == [3]


def test_history_tx_bounds(store: Store, three: tuple[str, list[int]]) -> None:
    id, (t1, t2, t3) = three
    # ascending: start_tx_id inclusive, end_tx_id exclusive
    assert ns(store.history(id, start_tx_id=t2)) == [2, 3]
    assert ns(store.history(id, end_tx_id=t3)) == [1, 2]
    assert ns(store.history(id, start_tx_id=t2, end_tx_id=t3)) == [2]
    # descending: start_tx_id is the newest tx included, end_tx_id the (excluded) oldest
    assert ns(store.history(id, "desc", start_tx_id=t2)) == [2, 1]
    assert ns(store.history(id, "desc", end_tx_id=t1)) == [3, 2]


def test_history_stops_at_now(store: Store, uid: str) -> None:
    # XTDB: history is read from a db at now: descending history starts at now and goes back,
    # ascending history ends at now (xtdb.query/with-history-bounds caps both at the db's valid
    # time), so a future-dated version is in neither, though get() at that future time sees it.
    id = f"{uid}-future"
    store.submit([Put(doc(id, 1), T0)])
    future = now_ms() + 3_600_000
    store.submit([Put(doc(id, 2), future)])
    assert ns(store.history(id, "desc")) == [1]
    assert ns(store.history(id, "desc", start_valid_time=future + 1)) == [1]
    assert ns(store.history(id)) == [1]
    assert ns(store.history(id, end_valid_time=future + 1)) == [1]
    assert n_at(store, id, future) == 2


# -- match -------------------------------------------------------------------------------------


def test_match_success_commits(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0)])
    tx = store.submit([Match(id, doc(id, 1)), Put(doc(id, 2), T0 + 1)])
    assert tx.committed
    assert n_at(store, id, T0 + 1) == 2


def test_match_compares_documents_not_their_key_order(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0)])
    expected = dict(reversed(list(doc(id, 1).items())))
    assert store.submit([Match(id, expected)]).committed


def test_match_failure_aborts_whole_transaction(store: Store, uid: str) -> None:
    id, other = f"{uid}-a", f"{uid}-b"
    t1 = store.submit([Put(doc(id, 1), T0)])
    tx = store.submit([Put(doc(other, 1), T0), Match(id, doc(id, 99)), Put(doc(id, 2), T0 + 1)])
    assert not tx.committed
    assert tx.id > t1.id and tx.time >= t1.time
    assert n_at(store, id, T0 + 1) == 1
    assert store.get(other, T0 + 1) is None
    assert store.history(other) == []
    assert [v.tx_id for v in store.history(id)] == [t1.id]
    latest = store.latest_tx()
    assert latest is not None and latest.id >= tx.id
    if latest.id == tx.id:  # nobody wrote since (the usual case): the latest says it aborted
        assert latest.committed is False
    # the store goes on normally after an aborted transaction
    t3 = store.submit([Put(doc(other, 3), T0)])
    assert t3.committed and t3.id > tx.id


def test_match_absent(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    # None expects no document: true before the first put ...
    assert store.submit([Match(id, None), Put(doc(id, 1), T0)]).committed
    # ... false once there is one ...
    assert not store.submit([Match(id, None), Put(doc(id, 2), T0)]).committed
    assert n_at(store, id, T0) == 1
    # ... and a deleted document is absent again
    store.submit([Delete(id)])
    assert store.submit([Match(id, None)]).committed
    assert not store.submit([Match(id, doc(id, 1))]).committed


def test_match_at_valid_time(store: Store, uid: str) -> None:
    id = f"{uid}-a"
    store.submit([Put(doc(id, 1), T0 + 10), Put(doc(id, 2), T0 + 20)])
    assert store.submit([Match(id, doc(id, 1), T0 + 15)]).committed
    assert not store.submit([Match(id, doc(id, 1), T0 + 25)]).committed
    assert store.submit([Match(id, None, T0 + 5)]).committed
    # without a valid time a match reads at the tx time: the latest version here
    assert store.submit([Match(id, doc(id, 2))]).committed


# -- evict -------------------------------------------------------------------------------------
#
# An Evict followed by a Put or Delete of the same id in one transaction is left unspecified:
# XTDB erases the later put's document too (it indexes every document of a tx before its ops)
# and keeps a version pointing at the erased document; the SQLite store applies them in order.


def test_evict_erases_all_history(store: Store, uid: str) -> None:
    id, kept = f"{uid}-secret", f"{uid}-kept"
    kind = f"k{uid}"
    store.submit([Put(doc(id, 1, kind=kind, token="s3cr3t"), T0 + 10), Put(doc(kept, 1, kind=kind), T0)])
    store.submit([Put(doc(id, 2, kind=kind, token="s3cr3t"), T0 + 20)])
    store.submit([Delete(id, T0 + 30)])
    tx = store.submit([Evict(id)])
    assert tx.committed
    for vt in (T0 + 10, T0 + 20, T0 + 30, None):
        assert store.get(id, vt) is None
    assert store.history(id) == []
    assert store.history(id, "desc") == []
    assert [v.id for v in store.find(kind, valid_time=T0 + 25)] == [kept]
    assert store.find(kind, {"token": "s3cr3t"}, valid_time=T0 + 25) == []
    # the id can be used again, with a fresh history
    store.submit([Put(doc(id, 3, kind=kind), T0 + 40)])
    assert ns(store.history(id)) == [3]
    assert n_at(store, kept, T0 + 50) == 1


def test_a_put_delete_or_match_after_an_evict_in_its_transaction_is_refused(store: Store, uid: str) -> None:
    # XTDB: the ops of a transaction read the index as it was before its evictions, so a match
    # after an evict compared with the evicted document, and a put after one was evicted with it
    # (get: nothing; history: a version whose document is an eviction tombstone). The SQLite store
    # applied both as written: the same transaction committed on one backend and aborted on the
    # other, a put was kept on one and lost on the other. A delete over a range of valid time
    # restored at its end, on XTDB, the evicted version (history: XTDB's placeholder of an evicted
    # document as a version; found by the store model test run on a node). Both refuse them now,
    # writing nothing.
    id = f"{uid}-evicted"
    store.submit([Put(doc(id, 1), T0)])
    before = store.latest_tx()
    ops = (Put(doc(id, 2), T0 + 5), Match(id, doc(id, 1), T0 + 3), Match(id, None, T0 + 3), Delete(id, T0 + 1, T0 + 9))
    for op in (*ops, Delete(id)):
        with pytest.raises(StoreError, match="evicts"):
            store.submit([Evict(id), op])
    assert store.latest_tx() == before
    assert n_at(store, id, T0 + 10) == 1
    # before the evict, and in the next transaction, they are what they always were
    assert store.submit([Match(id, doc(id, 1), T0 + 3), Put(doc(id, 3), T0 + 6), Evict(id)]).committed
    assert store.history(id) == []
    assert store.submit([Match(id, None, T0 + 3), Put(doc(id, 4), T0 + 5)]).committed
    assert ns(store.history(id)) == [4]


# -- find --------------------------------------------------------------------------------------


def test_find_by_kind_and_meta(store: Store, uid: str) -> None:
    kind, other_kind = f"k{uid}", f"j{uid}"
    s1, s2 = f"{uid}-s1", f"{uid}-s2"
    store.submit(
        [
            Put(doc(f"{uid}-a", 1, kind=kind, session=s1, turn=1), T0),
            Put(doc(f"{uid}-b", 2, kind=kind, session=s1, turn=2), T0),
            Put(doc(f"{uid}-c", 3, kind=kind, session=s2, turn=2), T0),
            Put(doc(f"{uid}-d", 4, kind=other_kind, session=s1, turn=2), T0),
        ]
    )

    def ids(**kw: Any) -> set[str]:
        return {v.id.removeprefix(f"{uid}-") for v in store.find(valid_time=T0 + 1, **kw)}

    assert ids(kind=kind) == {"a", "b", "c"}
    assert ids(kind=other_kind) == {"d"}
    assert ids(kind=kind, where={"session": s1}) == {"a", "b"}
    assert ids(where={"session": s1}) == {"a", "b", "d"}
    assert ids(kind=kind, where={"session": s1, "turn": 2}) == {"b"}
    assert ids(where={"session": s1, "turn": 2}) == {"b", "d"}
    assert ids(kind=kind, where={"session": f"{uid}-none"}) == set()
    assert ids(kind=f"x{uid}") == set()
    found = store.find(kind, {"session": s2}, valid_time=T0 + 1)
    assert len(found) == 1
    assert found[0].doc == doc(f"{uid}-c", 3, kind=kind, session=s2, turn=2)
    assert (found[0].valid_time, found[0].deleted) == (T0, False)


def test_find_as_of_valid_time_and_tx(store: Store, uid: str) -> None:
    kind, s1, s2 = f"k{uid}", f"{uid}-s1", f"{uid}-s2"
    id = f"{uid}-a"
    t1 = store.submit([Put(doc(id, 1, kind=kind, session=s1), T0 + 10)])
    t2 = store.submit([Put(doc(id, 2, kind=kind, session=s2), T0 + 20)])

    def found(where: dict[str, Any], vt: int, tx: int | None = None) -> list[int | None]:
        return ns(store.find(kind, where, valid_time=vt, tx_id=tx))

    assert found({"session": s1}, T0 + 5) == []
    assert found({"session": s1}, T0 + 15) == [1]
    assert found({"session": s1}, T0 + 25) == []
    assert found({"session": s2}, T0 + 25) == [2]
    # as of the first tx the move to s2 was not known yet
    assert found({"session": s1}, T0 + 25, t1.id) == [1]
    assert found({"session": s2}, T0 + 25, t1.id) == []
    assert found({"session": s2}, T0 + 25, t2.id) == [2]
    v = store.find(kind, {"session": s2}, valid_time=T0 + 25)[0]
    assert (v.valid_time, v.tx_id, v.tx_time) == (T0 + 20, t2.id, t2.time)


def test_find_skips_deleted_documents(store: Store, uid: str) -> None:
    kind = f"k{uid}"
    store.submit([Put(doc(f"{uid}-a", 1, kind=kind), T0), Put(doc(f"{uid}-b", 2, kind=kind), T0)])
    store.submit([Delete(f"{uid}-a", T0 + 10)])
    assert sorted(v.id for v in store.find(kind, valid_time=T0 + 5)) == [f"{uid}-a", f"{uid}-b"]
    assert ns(store.find(kind, valid_time=T0 + 15)) == [2]
    assert ns(store.find(kind)) == [2]


def test_find_through_a_memo_of_parsed_documents_answers_as_without_it(store: Store, uid: str) -> None:
    kind = f"k{uid}"
    parsed: DocMemo = {}

    def both(**kw: Any) -> list[tuple[str, int | None]]:
        plain = store.find(kind, valid_time=T0 + 100, **kw)
        memo = store.find(kind, valid_time=T0 + 100, docs=parsed, **kw)
        assert [(v.id, v.valid_time, v.tx_id, v.doc) for v in memo] == [
            (v.id, v.valid_time, v.tx_id, v.doc) for v in plain
        ]
        return [(v.id.removeprefix(f"{uid}-"), n) for v, n in zip(memo, ns(memo), strict=True)]

    store.submit([Put(doc(f"{uid}-a", 1, kind=kind, s="x"), T0), Put(doc(f"{uid}-b", 2, kind=kind, s="y"), T0)])
    assert both() == [("a", 1), ("b", 2)]
    assert both() == [("a", 1), ("b", 2)]  # now from the memo
    # the newest document is erased, and another entity's new document is stored in its place
    # (SQLite hands the highest row id out again)
    store.submit([Evict(f"{uid}-b")])
    store.submit([Put(doc(f"{uid}-c", 3, kind=kind, s="y"), T0)])
    assert both() == [("a", 1), ("c", 3)]
    store.submit([Put(doc(f"{uid}-a", 4, kind=kind, s="x"), T0 + 10)])
    assert both(where={"s": "x"}) == [("a", 4)]
    assert both(where={"s": "y"}) == [("c", 3)]


def test_documents_counted_by_kind_are_the_ones_find_lists(store: Store, uid: str) -> None:
    def counted(vt: int, tx: int) -> dict[str | None, int]:
        kinds = [v.doc.get("kind") if v.doc else None for v in store.find(valid_time=vt, tx_id=tx)]
        listed = Counter(k if isinstance(k, str) else None for k in kinds)
        got = store.count_kinds(valid_time=vt, tx_id=tx)
        assert got == dict(listed)
        return {k: n for k, n in got.items() if k is not None and k.endswith(uid)}

    a, b = f"a{uid}", f"b{uid}"
    t1 = store.submit(
        [
            Put(doc(f"{uid}-1", 1, kind=a), T0),
            Put(doc(f"{uid}-2", 2, kind=a), T0),
            Put(doc(f"{uid}-3", 3, kind=b), T0 + 50),  # in force from T0 + 50 only
            Put({"id": f"{uid}-4", "kind": 4, "meta": {}}, T0),  # another client's: no string kind
            Put({"id": f"{uid}-5", "meta": {}}, T0),
        ]
    )
    t2 = store.submit([Delete(f"{uid}-1", T0 + 10), Put(doc(f"{uid}-2", 5, kind=b), T0 + 10)])
    assert counted(T0 + 5, t1.id) == {a: 2}
    assert counted(T0 + 60, t1.id) == {a: 2, b: 1}
    assert counted(T0 + 5, t2.id) == {a: 2}
    assert counted(T0 + 60, t2.id) == {b: 2}
    assert store.count_kinds().get(b) == 2


def test_a_kind_holding_a_nul_is_counted_as_itself(store: Store, uid: str) -> None:
    """SQLite's JSON functions end a string at a NUL: the SQLite store counted the document under
    the kind cut there, which no document has."""
    kind = f"k{uid}\x00z"
    store.submit([Put(doc(f"{uid}-1", 1, kind=kind), T0), Put(doc(f"{uid}-2", 2, kind=kind, tag="\x00"), T0)])
    got = store.count_kinds(valid_time=T0)
    assert got.get(kind) == 2 and f"k{uid}" not in got


def test_find_matches_value_types_exactly(store: Store, uid: str) -> None:
    kind = f"k{uid}"
    store.submit(
        [
            Put(doc(f"{uid}-int", 1, kind=kind, flag=1), T0),
            Put(doc(f"{uid}-bool", 2, kind=kind, flag=True), T0),
            Put(doc(f"{uid}-str", 3, kind=kind, flag="1"), T0),
        ]
    )
    assert ns(store.find(kind, {"flag": 1}, valid_time=T0)) == [1]
    assert ns(store.find(kind, {"flag": True}, valid_time=T0)) == [2]
    assert ns(store.find(kind, {"flag": "1"}, valid_time=T0)) == [3]


def test_find_by_numbers_beyond_a_double_s_range(store: Store, uid: str) -> None:
    """Integers as long as JSON lets them be (one too big for a double among them) are stored,
    found and told apart; the XTDB store raised ``OverflowError`` making a double of one."""
    kind = f"k{uid}"
    huge = 10**400
    store.submit(
        [
            Put(doc(f"{uid}-huge", 1, kind=kind, size=huge), T0),
            Put(doc(f"{uid}-huger", 2, kind=kind, size=huge + 1), T0),
            Put(doc(f"{uid}-long", 3, kind=kind, size=2**63 + 5), T0),
            Put(doc(f"{uid}-big", 4, kind=kind, size=1e300), T0),
        ]
    )
    assert ns(store.find(kind, {"size": huge}, valid_time=T0)) == [1]
    assert ns(store.find(kind, {"size": -huge}, valid_time=T0)) == []
    assert ns(store.find(kind, {"size": 2**63 + 5}, valid_time=T0)) == [3]
    assert ns(store.find(kind, {"size": 1e300}, valid_time=T0)) == [4]
    assert store.find_meta(kind, {"size": huge + 1}, ("size",), valid_time=T0) == [(f"{uid}-huger", {"size": huge + 1})]


@pytest.mark.parametrize("where", ["meta", "content", "find"])
def test_an_integer_too_long_to_write_is_refused_as_a_store_error(store: Store, uid: str, where: str) -> None:
    """An integer of more digits than Python converts (``sys.get_int_max_str_digits()``) has no
    JSON to store or compare: both stores raised Python's own ``ValueError`` (XTDB on a put, both
    on a find), SQLite's put a message telling to raise the interpreter's limit. Now a
    ``StoreError`` naming it, and nothing is written."""
    huge = 10 ** (sys.get_int_max_str_digits() or 4300)  # one digit more than the limit
    kind = f"k{uid}"
    with pytest.raises(StoreError, match=rf"integer longer than {sys.get_int_max_str_digits()} digits"):
        if where == "find":
            store.find(kind, {"n": huge}, valid_time=T0)
        elif where == "meta":
            store.submit([Put(doc(f"{uid}-a", 1, kind=kind, size=huge), T0)])
        else:
            store.submit([Put({"id": f"{uid}-a", "kind": kind, "content": [1, {"n": -huge}]}, T0)])
    assert store.find(kind, valid_time=T0) == []


def test_a_where_value_with_no_json_form_is_a_store_error(store: Store, uid: str) -> None:
    """NaN, or a map with a key that is not a string, cannot be compared with what is stored: the
    XTDB store said so in a ``StoreError``, the SQLite store raised a ``HashError``."""
    for value in (float("nan"), {1: "one"}):
        with pytest.raises(StoreError, match="a where value cannot be compared"):
            store.find(f"k{uid}", {"n": value}, valid_time=T0)


@pytest.mark.parametrize(
    "bad",
    [
        {"meta": {1: "one"}},
        {"content": {"rows": [{True: "yes"}]}},
        {"content": {None: 0}},
    ],
)
def test_a_key_that_is_not_a_string_is_refused_and_nothing_is_written(
    store: Store, uid: str, bad: dict[str, Any]
) -> None:
    """JSON keys are strings: XTDB's store refused the document; SQLite's wrote the key as one
    (``1`` became ``"1"``, ``True`` ``"true"``), so the document read back was not the one put."""
    kind = f"k{uid}"
    with pytest.raises(StoreError, match="is not a string"):
        store.submit([Put(doc(f"{uid}-ok", 1, kind=kind), T0), Put({"id": f"{uid}-bad", "kind": kind, **bad}, T0)])
    assert store.find(kind, valid_time=T0) == []


def test_find_by_a_kind_or_key_that_is_not_a_string_is_refused(store: Store, uid: str) -> None:
    """XTDB's store said so; SQLite's raised ``TypeError`` for a key of ``where``, and found
    nothing for a kind or a ``find_meta`` key that is not a string."""
    with pytest.raises(StoreError, match="kind must be a string"):
        store.find(7, valid_time=T0)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="meta keys are strings"):
        store.find(f"k{uid}", {1: 2}, valid_time=T0)  # type: ignore[dict-item]
    with pytest.raises(StoreError, match="meta keys are strings"):
        store.find_meta(f"k{uid}", {}, (1,), valid_time=T0)  # type: ignore[arg-type]


def test_find_meta_gives_the_fields_of_what_find_finds(store: Store, uid: str) -> None:
    """``find_meta``: the ids ``find`` gives, in its order, each with only the meta fields asked
    for that it has (the XTDB store pulls those alone, not the documents)."""
    kind, other = f"k{uid}", f"j{uid}"
    t1 = store.submit(
        [
            Put(doc(f"{uid}-a", 1, kind=kind, ws="w", size=10, missing=False, path="a.py"), T0),
            Put(doc(f"{uid}-b", 2, kind=kind, ws="w", missing=True, path="b.py"), T0),  # no size
            Put(doc(f"{uid}-c", 3, kind=kind, ws="v", size=30, path="c.py"), T0),
            Put(doc(f"{uid}-d", 4, kind=other, ws="w", size=40, path="d.py"), T0),
            Put(doc(f"{uid}-e", 5, kind=kind, ws=1, size=50, path="e.py"), T0),
            Put(doc(f"{uid}-f", 6, kind=kind, ws=True, size=60, path="f.py"), T0),
        ]
    )
    store.submit([Put(doc(f"{uid}-a", 7, kind=kind, ws="v", size=11, path="a.py"), T0 + 10)])
    keys = ("path", "size", "missing", "absent")

    def projected(kind: str | None, where: dict[str, Any], vt: int, tx: int | None = None) -> list[Any]:
        return [
            (v.id, {k: v.doc["meta"][k] for k in keys if k in v.doc["meta"]})
            for v in store.find(kind, where, valid_time=vt, tx_id=tx)
            if v.doc
        ]

    for k, where in [(kind, {"ws": "w"}), (kind, {"ws": "v"}), (None, {"ws": "w"}), (kind, {"ws": 1}), (kind, {})]:
        for vt, tx in [(T0 + 5, None), (T0 + 15, None), (T0 + 15, t1.id)]:
            got = store.find_meta(k, where, keys, valid_time=vt, tx_id=tx)
            assert got == projected(k, where, vt, tx), (k, where, vt, tx)
    assert store.find_meta(kind, {"ws": "w"}, ("size", "missing"), valid_time=T0 + 5) == [
        (f"{uid}-a", {"size": 10, "missing": False}),
        (f"{uid}-b", {"missing": True}),
    ]
    assert store.find_meta(kind, {"ws": True}, (), valid_time=T0 + 5) == [(f"{uid}-f", {})]


def test_ids_are_the_ids_find_lists(store: Store, uid: str) -> None:
    """``ids``: the ids of what ``find()`` lists, in its order, at any basis (a version ended by a
    deletion or by its range left out, a corrected one listed once), without the documents. The
    XTDB node is shared: only this test's ids are compared."""
    kind, other = f"k{uid}", f"j{uid}"
    t1 = store.submit(
        [
            Put(doc(f"{uid}-b", 1, kind=kind), T0),
            Put(doc(f"{uid}-a", 2, kind=other), T0),
            Put(doc(f"{uid}-c", 3, kind=kind), T0, T0 + 10),  # ends at T0 + 10
            Put(doc(f"{uid}-d", 4, kind=kind), T0 + 5),
        ]
    )
    t2 = store.submit([Delete(f"{uid}-b", T0 + 20), Put(doc(f"{uid}-a", 5, kind=other), T0)])  # a correction

    def mine(ids: list[str]) -> list[str]:
        return [i for i in ids if i.startswith(uid)]

    for vt in (T0 - 1, T0, T0 + 5, T0 + 15, T0 + 25):
        for tx in (t1.id, t2.id, None):
            found = sorted(v.id for k in (kind, other) for v in store.find(k, valid_time=vt, tx_id=tx))
            assert mine(store.ids(valid_time=vt, tx_id=tx)) == found, (vt, tx)
    assert mine(store.ids(valid_time=T0 + 5)) == [f"{uid}-a", f"{uid}-b", f"{uid}-c", f"{uid}-d"]
    assert mine(store.ids()) == [f"{uid}-a", f"{uid}-d"]
    every = store.ids()
    assert every == sorted(every) and len(every) == len(set(every))


# -- another process ---------------------------------------------------------------------------


def _read_elsewhere(reader: Any, id: str, valid_time: int, tx_id: int) -> dict[str, Any] | None:
    """In a child process: the document ``reader()``'s store has."""
    with reader() as other:
        v = other.get(id, valid_time, tx_id)
        return None if v is None else v.doc


def test_a_reader_opens_the_store_in_another_process(store: Store, uid: str) -> None:
    """``Store.reader``: what frame checks in worker processes open; it reads what was committed,
    as of any transaction, in a new interpreter (not a fork of this one)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    t1 = store.submit([Put(doc(f"{uid}-r", 1), T0)])
    store.submit([Put(doc(f"{uid}-r", 2), T0)])
    reader = store.reader()
    assert reader is not None
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        first = pool.submit(_read_elsewhere, reader, f"{uid}-r", T0, t1.id).result(timeout=120)
        latest = pool.submit(_read_elsewhere, reader, f"{uid}-r", T0, store.latest_tx_id()).result(timeout=120)
    assert first == doc(f"{uid}-r", 1) and latest == doc(f"{uid}-r", 2)
