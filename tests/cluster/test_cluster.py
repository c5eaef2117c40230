"""XTDB's production topology, run for real: two nodes (and then a third) sharing a JDBC
transaction log and document store in PostgreSQL, each with its own RocksDB index.

The tests of one module share one cluster and run in order: the later ones kill a node, restart
it and add another."""

from __future__ import annotations

import threading

import pytest

from context_os.context.frames import frame_docs, verify_frame
from context_os.errors import StoreUnavailable
from context_os.store.base import Put
from context_os.store.xtdb import XtdbStore
from tests.cluster._cluster import Cluster
from tests.ui.recorded import record_demo

pytestmark = pytest.mark.cluster


def _doc(i: int, run: str) -> dict[str, object]:
    from context_os.hashing import doc_hashes

    doc: dict[str, object] = {"id": f"memory:{run}-{i}", "kind": "memory", "content": f"note {i}", "meta": {"run": run}}
    return doc | doc_hashes(doc)


def test_sessions_writing_through_two_nodes_see_each_other(cluster: Cluster, uid: str) -> None:
    one, two = (XtdbStore(cluster.url(p)) for p in cluster.ports[:2])
    try:
        record_demo(one, f"{uid}-a", 30)  # an agent's session through the first node
        record_demo(two, f"{uid}-b", 30)  # another's through the second
        for store in (one, two):
            latest = max(one._seen_tx, two._seen_tx)
            store._await(latest)  # indexed from the shared log (await-tx)
            for sid in (f"{uid}-a", f"{uid}-b"):
                docs = frame_docs(store, sid)
                assert len(docs) > 5
                assert all(verify_frame(store, d).ok for d in docs), (store.base, sid)
        assert [d["object_hash"] for d in frame_docs(one, f"{uid}-b")] == [
            d["object_hash"] for d in frame_docs(two, f"{uid}-b")
        ]
    finally:
        one.close()
        two.close()


def test_a_killed_node_loses_no_acknowledged_write_and_the_store_fails_over(cluster: Cluster, uid: str) -> None:
    first, second = cluster.ports[:2]
    store = XtdbStore(cluster.url(first, second))
    acknowledged: list[int] = []
    doubtful: list[int] = []  # in flight when the node died: landed or not, never half
    killed = threading.Event()
    try:
        for i in range(120):
            if i == 40:
                threading.Thread(target=lambda: (cluster.kill(first), killed.set()), daemon=True).start()
            try:
                store.submit([Put(_doc(i, uid))])
                acknowledged.append(i)
            except StoreUnavailable:
                doubtful.append(i)
        assert killed.wait(60)
        assert store.base.endswith(f":{second}")  # it went on with the other node
        assert len(acknowledged) >= 115 and len(doubtful) <= 5, (len(acknowledged), doubtful)
        for i in acknowledged:
            v = store.get(f"memory:{uid}-{i}")
            assert v is not None and v.doc == _doc(i, uid), i
    finally:
        store.close()


def test_a_restarted_and_a_fresh_node_catch_up_from_the_log(cluster: Cluster, uid: str) -> None:
    first, second = cluster.ports[:2]
    cluster.start_node(first)  # killed by the test before (SIGKILL: its index was not closed)
    third = int(cluster.start_node().rsplit(":", 1)[1])  # an empty index: everything from the log
    stores = [XtdbStore(cluster.url(p)) for p in (first, second, third)]
    try:
        latest = stores[1].latest_tx()
        assert latest is not None
        for s in stores:
            s._await(latest.id)
        # the same as-of answers, with the same hashes, on every node
        sessions = sorted({d["meta"]["session"] for d in (v.doc for v in stores[1].find("frame")) if d})
        assert sessions
        for sid in sessions:
            hashes = [[(d["id"], d["object_hash"]) for d in frame_docs(s, sid)] for s in stores]
            assert hashes[0] == hashes[1] == hashes[2], sid
        for tx in (latest.id // 3, latest.id // 2, latest.id):
            answers = [
                sorted((v.id, v.doc["object_hash"] if v.doc else None) for v in s.find("frame", tx_id=tx))
                for s in stores
            ]
            assert answers[0] == answers[1] == answers[2], tx
        frame = frame_docs(stores[2], sessions[0])[-1]
        assert verify_frame(stores[2], frame).ok
    finally:
        for s in stores:
            s.close()
