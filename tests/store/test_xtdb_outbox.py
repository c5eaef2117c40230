"""No lost writes: the outbox in front of a real XTDB node (store/outbox.py).

The headline test stops and restarts a persistent (RocksDB) node of its own in the middle of a
session's ingest through ``OpenAIHook``; the others use a port where nothing listens as the
node that is out of reach (a real refused connection), and the shared node to replay into.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.context.evict import evict
from context_os.context.frames import verify_frame
from context_os.errors import StoreError, StoreUnavailable, StoreUnreachable
from context_os.files import FileTools, FileTracker, Workspace
from context_os.files.index import EVICTED_BYTES
from context_os.harness.openai import OpenAIHook
from context_os.hashing import doc_hashes
from context_os.sources.recall import Recall
from context_os.store import Delete, Evict, Match, Op, Put, Tx, open_store
from context_os.store.outbox import MARKER_KIND, OutboxStore
from context_os.store.xtdb import XtdbStore
from tests._xtdb_node import START, STARTUP_TIMEOUT_S, STOP, _free_port, all_corrections
from tests.helpers import call, result, user, wait_for

pytestmark = pytest.mark.xtdb

T0 = 1_700_000_000_000


def _nowhere() -> str:
    """The URL of a node that is out of reach: nothing listens on that port."""
    return f"xtdb+http://127.0.0.1:{_free_port()}"


def _outbox(url: str, path: Path) -> OutboxStore:
    inner = XtdbStore(url, timeout=10)
    inner.BACKOFF_S = 0.01  # refused connections need no patience here
    return OutboxStore(inner, path)


def _doc(id: str, n: int) -> dict[str, Any]:
    d: dict[str, Any] = {"id": id, "kind": "note", "content": f"v{n}", "meta": {"n": n}}
    d.update(doc_hashes(d))
    return d


# -- offline semantics (no node needed to accept) ---------------------------------------------------


def test_writes_while_unreachable_are_accepted_and_reads_say_so(tmp_path: Path) -> None:
    with _outbox(_nowhere(), tmp_path / "outbox.db") as off:
        before = off.outbox_stats()
        assert before["pending"] == 0 and not (tmp_path / "outbox.db").exists()  # created on first need
        tx = off.submit([Put(_doc("note:a", 1))])
        assert tx.pending and tx.committed and tx.id < 0
        tx2 = off.submit([Delete("note:a", T0)])
        assert tx2.pending and tx2.id < 0 and tx2.id != tx.id
        assert off.depth() == 2
        # a read must not answer from a store that misses accepted writes
        with pytest.raises(StoreUnreachable, match=r"2 accepted write\(s\) wait in the outbox .*outbox\.db"):
            off.get("note:a")
        with pytest.raises(StoreUnavailable):
            off.find("note")
        with pytest.raises(StoreUnavailable):
            off.latest_tx()
        stats = off.stats()
        assert stats["reachable"] is False and stats["backend"] == "xtdb"
        assert stats["outbox"]["pending"] == 2 and stats["outbox"]["oldest_accepted"] == tx.time


def test_a_match_is_refused_offline_and_nothing_is_queued(tmp_path: Path) -> None:
    with _outbox(_nowhere(), tmp_path / "outbox.db") as off:
        with pytest.raises(StoreUnavailable, match="match on 'note:a' cannot wait in the outbox"):
            off.submit([Put(_doc("note:a", 1)), Match("note:a", None)])
        assert off.depth() == 0
        off.submit([Put(_doc("note:b", 1))])
        with pytest.raises(StoreUnavailable, match="match"):  # also once writes wait
            off.submit([Match("note:b", None)])
        assert off.depth() == 1


def test_bad_input_is_refused_at_accept_time(tmp_path: Path) -> None:
    with _outbox(_nowhere(), tmp_path / "outbox.db") as off:
        for ops in (
            [Put({"id": 1, "kind": "note"})],
            [Put({"id": "x", "v": float("nan")})],
            [Put({"id": "x", "meta": {1: "non-string key"}})],
            [Put({"id": "x"}, valid_from="yesterday")],  # type: ignore[arg-type]
            [Delete(2)],  # type: ignore[arg-type]
        ):
            with pytest.raises(StoreError) as e:
                off.submit(ops)
            assert not isinstance(e.value, StoreUnavailable)
        assert off.depth() == 0


def test_the_outbox_url_option(tmp_path: Path) -> None:
    url = _nowhere()
    box = tmp_path / "elsewhere.db"
    with open_store(f"{url}?outbox={box}") as s:
        assert isinstance(s, OutboxStore) and s.path == box and s.url == url
    with open_store(url) as s:
        assert isinstance(s, OutboxStore)
        port = url.rsplit(":", 1)[1]
        assert s.path.name == f"127.0.0.1_{port}.db" and s.path.parent.name == "outbox"
        assert "context_os" in s.path.parts  # the user data dir (an isolated tmp dir in tests)
    with pytest.raises(Exception, match="unknown option"):
        open_store(f"{url}?outbx=1")


def test_one_node_one_outbox_whichever_way_its_url_is_spelled() -> None:
    port = _free_port()
    same = [
        f"xtdb+http://127.0.0.1:{port}",
        f"xtdb+http://localhost:{port}",
        f"xtdb+http://127.0.0.1:{port}/",
        f"xtdb+http://LocalHost.:{port}//",
        f"xtdb+http://user:pw@localhost:{port}?outbox=",
    ]
    apart = [
        f"xtdb+http://127.0.0.2:{port}",  # another loopback address: another node may listen there
        f"xtdb+http://[::1]:{port}",  # so may one on IPv6 loopback
        f"xtdb+http://127.0.0.1:{port + 1}",
        f"xtdb+http://127.0.0.1:{port}/a/b",  # two paths behind one proxy
        f"xtdb+http://127.0.0.1:{port}/a_b",
        f"xtdb+http://127.0.0.1:{port}/a%2Fb",
        f"xtdb+http://node1:{port}",  # a name is not resolved: it may be a machine of its own
    ]
    paths = []
    for url in same + apart:
        with open_store(url) as s:
            assert isinstance(s, OutboxStore)
            paths.append(s.path)
    assert len(set(paths[: len(same)])) == 1 and paths[0].name == f"127.0.0.1_{port}.db"
    assert len(set(paths)) == 1 + len(apart)
    # a cluster's nodes in any order, and their loopback spellings, are one cluster
    a, b = f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"
    with (
        open_store(f"xtdb+http://{a},{b}") as one,
        open_store(f"xtdb+http://{b},{a.replace('127.0.0.1', 'localhost')}") as two,
    ):
        assert isinstance(one, OutboxStore) and isinstance(two, OutboxStore) and one.path == two.path


def test_writes_held_under_one_spelling_are_sent_when_another_opens_the_store(tmp_path: Path, xtdb_url: str) -> None:
    """``localhost`` while the node is down, ``127.0.0.1`` once it is back: the writes are sent,
    once; so are those an earlier release left in the file it named for ``localhost``.
    ``xtdb_url`` is requested only so the test is skipped exactly where no node can be had."""
    port = _free_port()
    first = {"id": "note:spelled-localhost", "kind": "note", "content": "held", "meta": {}}
    older = {"id": "note:earlier-release", "kind": "note", "content": "held before", "meta": {}}
    with open_store(f"xtdb+http://127.0.0.1:{port}") as probe:
        assert isinstance(probe, OutboxStore)
        earlier_file = probe.path.with_name(f"localhost_{port}.db")  # the name releases before gave it
    with _outbox(f"xtdb+http://localhost:{port}", earlier_file) as old:
        assert old.submit([Put(older | doc_hashes(older))]).pending
    with open_store(f"xtdb+http://localhost:{port}/") as off:
        assert isinstance(off, OutboxStore) and isinstance(off.inner, XtdbStore)
        off.inner.BACKOFF_S = 0.01
        assert off.submit([Put(first | doc_hashes(first))]).pending
        assert off.depth() == 2  # the earlier file's write joined, ahead of it (accepted first)
    url = _start_memory(port)
    try:
        with open_store(url) as on:
            assert url == f"xtdb+http://127.0.0.1:{port}"
            assert on.get(first["id"]) is not None and on.get(older["id"]) is not None
            assert isinstance(on, OutboxStore) and on.depth() == 0
        for doc in (first, older):
            assert len(all_corrections(url, doc["id"])) == 1
        with closing(sqlite3.connect(earlier_file)) as conn, conn:
            assert conn.execute("SELECT count(*) FROM pending").fetchone()[0] == 0
    finally:
        _stop(port)


# -- replay into the shared node ------------------------------------------------------------------


def test_replay_keeps_order_valid_times_and_resolves_provisional_ids(xtdb_url: str, tmp_path: Path, uid: str) -> None:
    box = tmp_path / "outbox.db"
    id, gone = f"note:{uid}", f"note:{uid}-gone"
    with _outbox(_nowhere(), box) as off:
        t1 = off.submit([Put(_doc(id, 1)), Put(_doc(gone, 1), T0)])  # no valid_from: fixed at accept time
        t2 = off.submit([Put(_doc(id, 2), t1.time)])  # a correction at the same valid time
        t3 = off.submit([Put(_doc(id, 3), t1.time + 5), Evict(gone)])
    with _outbox(xtdb_url, box) as on:
        assert on.depth() == 3
        v = on.get(id, t1.time + 1)  # a read sends what waits first
        assert on.depth() == 0
        assert v is not None and v.doc == _doc(id, 2) and v.valid_time == t1.time
        assert v.tx_time > t1.time  # XTDB learnt it later: only the tx time moved
        # provisional ids are accepted wherever a tx id is, and mean the transaction that carried the write
        v1 = on.get(id, t1.time, t1.id)
        assert v1 is not None and v1.doc == _doc(id, 1) and v1.tx_id >= 0
        assert [h.doc["meta"]["n"] for h in on.history(id, end_tx_id=t2.id) if h.doc] == [1]
        assert [h.doc["meta"]["n"] for h in on.history(id, start_tx_id=t2.id) if h.doc] == [2, 3]
        found = on.find("note", {"n": 2}, valid_time=t1.time, tx_id=t2.id)
        assert [f.id for f in found if f.id.startswith(f"note:{uid}")] == [id]
        assert on.get(id, t1.time + 5, t3.id) is not None
        assert on.history(gone) == []  # the eviction was replayed too
        # in order, once each: what XTDB holds, corrections included
        hashes = [h for _, _, h in all_corrections(xtdb_url, id)]
        assert hashes == [_doc(id, n)["object_hash"] for n in (1, 2, 3)]
        # the markers: one per replayed transaction, out of find() unless asked for
        for t in (t1, t2, t3):
            assert on.find(None, {"provisional_tx_id": t.id}) == []
            [marker] = on.find(MARKER_KIND, {"provisional_tx_id": t.id})
            assert marker.valid_time == t.time and marker.doc is not None
            assert marker.doc["content"] == {"accepted": t.time, "ops": 1 if t is t2 else 2}
    # another process (no cache) resolves them through the markers
    with _outbox(xtdb_url, tmp_path / "other.db") as other:
        v1 = other.get(id, t1.time, t1.id)
        assert v1 is not None and v1.doc == _doc(id, 1)
        with pytest.raises(StoreError, match="not in the store"):
            other.get(id, None, -12345)


def test_an_eviction_leaves_no_copy_of_what_waited_in_the_outbox(xtdb_url: str, tmp_path: Path, uid: str) -> None:
    # A write accepted while the node was down waits in the outbox file; once sent, its row was
    # deleted, but its bytes stayed in the file's free pages and its log: evicting the secret it
    # carried left a copy on this machine for good.
    box = tmp_path / "outbox.db"
    secret = f"sk{uid}offline"
    doc = {"id": f"note:{uid}", "kind": "note", "content": f"key {secret}", "meta": {}}
    with _outbox(_nowhere(), box) as off:
        assert off.submit([Put(doc | doc_hashes(doc))]).pending
    with _outbox(xtdb_url, box) as on:
        assert on.get(doc["id"]) is not None and on.depth() == 0  # sent
        assert on.submit([Evict(doc["id"])]).committed
        assert on.get(doc["id"]) is None
        data = b"".join(p.read_bytes() for p in tmp_path.glob("outbox.db*"))
        assert secret.encode() not in data
    data = b"".join(p.read_bytes() for p in tmp_path.glob("outbox.db*"))
    assert secret.encode() not in data
    # the eviction waited in the outbox too: sent after the write, then the file is scrubbed
    doc = {"id": f"note:{uid}-2", "kind": "note", "content": f"key {secret}2", "meta": {}}
    with _outbox(_nowhere(), box) as off:
        assert off.submit([Put(doc | doc_hashes(doc))]).pending and off.submit([Evict(doc["id"])]).pending
    with _outbox(xtdb_url, box) as on:
        assert on.get(doc["id"]) is None and on.depth() == 0
        assert secret.encode() not in b"".join(p.read_bytes() for p in tmp_path.glob("outbox.db*"))


def test_an_outbox_scrub_cut_short_is_done_by_the_store_s_scrub(
    xtdb_url: str, tmp_path: Path, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The outbox rebuilds its file after an eviction; cut short (Ctrl-C, a crash, a reader holding
    # the file), the sent write's bytes stayed there, and ``scrub`` (``ctxos objects evict ID`` run
    # again) rebuilt only the node's side: the copy waited for the next eviction.
    box = tmp_path / "outbox.db"
    secret = f"sk{uid}cutshort"
    doc = {"id": f"note:{uid}", "kind": "note", "content": f"key {secret}", "meta": {}}
    with _outbox(_nowhere(), box) as off:
        assert off.submit([Put(doc | doc_hashes(doc))]).pending

    def on_disk() -> bytes:
        return b"".join(p.read_bytes() for p in tmp_path.glob("outbox.db*"))

    with _outbox(xtdb_url, box) as on:
        assert on.get(doc["id"]) is not None and on.depth() == 0  # sent, its row deleted
        with monkeypatch.context() as m:
            m.setattr(OutboxStore, "_scrub", lambda self: True)  # the rebuild never ran
            assert on.submit([Evict(doc["id"])]).committed
        assert secret.encode() in on_disk()
        assert on.scrub() is True
        assert secret.encode() not in on_disk()


class _Crash(Exception):
    """The process dies here."""


def test_a_replay_that_dies_before_forgetting_sends_nothing_twice(
    xtdb_url: str, tmp_path: Path, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = tmp_path / "outbox.db"
    id = f"note:{uid}"
    with _outbox(_nowhere(), box) as off:
        t1 = off.submit([Put(_doc(id, 1), T0)])
        t2 = off.submit([Put(_doc(id, 2), T0)])  # a correction: a repeat of t1 after it would win

    def die(self: OutboxStore, conn: Any, seq: int) -> None:
        raise _Crash

    forget = OutboxStore._forget

    # XTDB takes the first transaction, then the process dies before the outbox forgets it
    with _outbox(xtdb_url, box) as dying:
        monkeypatch.setattr(OutboxStore, "_forget", die)
        with pytest.raises(_Crash):
            dying.replay()
        monkeypatch.setattr(OutboxStore, "_forget", forget)  # (undo() also drops the user dirs conftest isolates)
        assert dying.depth() == 2
    assert [h for _, _, h in all_corrections(xtdb_url, id)] == [_doc(id, 1)["object_hash"]]

    with _outbox(xtdb_url, box) as again:  # the next process replays everything that waits
        assert again.replay() == 2
        assert again.depth() == 0
        held = all_corrections(xtdb_url, id)
        assert [h for _, _, h in held] == [_doc(id, 1)["object_hash"], _doc(id, 2)["object_hash"]]
        assert again.doc(id, T0) == _doc(id, 2)
        # the provisional id of the write that landed before the crash names its real tx
        v1 = again.get(id, T0, t1.id)
        assert v1 is not None and v1.doc == _doc(id, 1) and v1.tx_id == held[0][1]
        v2 = again.get(id, T0, t2.id)
        assert v2 is not None and v2.tx_id == held[1][1]


def test_a_write_the_node_refuses_blocks_the_outbox_and_says_why(xtdb_url: str, tmp_path: Path, uid: str) -> None:
    box = tmp_path / "outbox.db"
    with _outbox(_nowhere(), box) as off:
        off.submit([Put(_doc(f"note:{uid}", 1), T0)])
    # a row the node cannot take (e.g. written by a buggy older version): XTDB ids are strings here
    conn = sqlite3.connect(box)
    with conn:
        conn.execute(
            "UPDATE pending SET ops = ?",
            (json.dumps([{"op": "put", "doc": {"id": 7, "kind": "note"}, "from": T0, "to": None}]),),
        )
    conn.close()
    with _outbox(xtdb_url, box) as on:
        with pytest.raises(StoreError, match="refused write .* holds back the writes after it"):
            on.get(f"note:{uid}")
        assert on.outbox_stats()["blocked_by"] is not None and on.depth() == 1
        with pytest.raises(StoreError, match="refused write"):
            on.submit([Put(_doc(f"note:{uid}-later", 1))])
        assert on.depth() == 1


# -- the headline: a session's ingest across a node restart ------------------------------------------


def _start(port: int, data_dir: Path) -> str:
    cmd = [str(START), "--port", str(port), "--config", "rocksdb", "--data-dir", str(data_dir)]
    try:
        proc = subprocess.run(
            [*cmd, "--timeout", str(STARTUP_TIMEOUT_S)], capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S + 60
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"{START} did not start a node: {e}")
    if proc.returncode != 0:
        pytest.fail(f"{START} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


def _start_memory(port: int) -> str:
    """An in-memory node of the test's own on ``port``."""
    proc = subprocess.run(
        [str(START), "--port", str(port), "--config", "memory", "--timeout", str(STARTUP_TIMEOUT_S)],
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT_S + 60,
    )
    if proc.returncode != 0:
        pytest.fail(f"{START} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


def _stop(port: int) -> None:
    subprocess.run([str(STOP), "--port", str(port)], check=False, timeout=90, capture_output=True)


@pytest.fixture
def rocksdb_node(tmp_path: Path, xtdb_url: str) -> Iterator[tuple[str, int, Path]]:
    """A persistent node of this test's own: (url, port, data dir). ``xtdb_url`` is requested
    only so the test is skipped exactly where no node can be had."""
    port, data = _free_port(), tmp_path / "xtdb-data"
    url = _start(port, data)
    try:
        yield url, port, data
    finally:
        _stop(port)


def _turn(n: int) -> list[dict[str, Any]]:
    msgs = [user(f"step {n}: look at module {n}")] if n % 3 == 0 else []
    return [*msgs, call(f"c{n}", "bash", command=f"cat m{n}.py"), result(f"c{n}", f"# module {n}\n" + "x = 1\n" * 200)]


def test_a_session_keeps_ingesting_across_a_node_restart(rocksdb_node: tuple[str, int, Path], tmp_path: Path) -> None:
    url, port, data = rocksdb_node
    store = open_store(f"{url}?outbox={tmp_path / 'outbox.db'}")
    assert isinstance(store, OutboxStore)
    assert isinstance(store.inner, XtdbStore)
    store.inner.BACKOFF_S = 0.01
    written: list[tuple[list[Op], Tx]] = []
    submit = store.submit

    def recording_submit(ops: Any) -> Tx:
        ops = list(ops)
        tx = submit(ops)
        written.append((ops, tx))
        return tx

    sid = f"restart-{uuid.uuid4().hex[:8]}"
    # a stored object the session shows (each turn asks the store for a newer version of it) and a
    # source that searches the store (at each user message): neither may fail a turn offline
    note = {"id": f"memory:{sid}", "kind": "memory", "content": "notes on every module", "meta": {"name": sid}}
    store.put(note | doc_hashes(note))
    # what the source finds (recall leaves out the note the session shows whole)
    found = {"id": f"memory:{sid}-2", "kind": "memory", "content": "the module map", "meta": {"name": f"{sid}-2"}}
    store.put(found | doc_hashes(found))
    store.submit = recording_submit  # type: ignore[method-assign]
    hook = OpenAIHook(Session.open(store, sid, harness="openai"))
    hook.session.show(note["id"])
    hook.session.add_source(Recall(store, kinds=["memory"]), active_score=0.0)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    frames: list[str] = []

    def step(n: int) -> None:
        msgs.extend(_turn(n))
        out = hook.transform_context(msgs)  # nothing may reach the harness but a valid context
        assert out[0]["role"] == "system" and hook.last is not None
        frames.append(hook.last.frame_id)

    for n in range(6):
        step(n)
    assert not any(tx.pending for _, tx in written)

    _stop(port)
    for n in range(6, 14):
        step(n)
    offline = [tx for _, tx in written if tx.pending]
    assert len(offline) == 8 and store.depth() == 8  # one transaction a turn: its writes and its frame
    assert hook.session.view.objects[note["id"]].state == "active"
    with pytest.raises(StoreUnavailable, match="8 accepted write"):
        store.get(f"session:{sid}")

    assert _start(port, data) == url  # the same node: same port, same RocksDB files
    for n in range(14, 18):
        step(n)
    store.latest_tx()  # any read sends what still waits
    assert store.depth() == 0 and store.outbox_stats()["pending"] == 0

    # every version is in XTDB exactly once, at its original valid time
    expected: dict[str, Counter[tuple[int, str]]] = {}
    recalled = 0
    for ops, tx in written:
        for op in ops:
            if isinstance(op, Match) and op.id.startswith("lease:"):
                continue  # taking the session's lease at open is compare-and-set, made while the node ran
            if isinstance(op, Put) and op.doc["kind"] == "recall":
                assert not tx.pending  # the source searches the store: it found nothing offline
                recalled += 1
                continue
            assert isinstance(op, Put) and op.valid_from is not None  # the session fixes its valid times
            expected.setdefault(op.doc["id"], Counter())[(op.valid_from, op.doc["object_hash"])] += 1
    kinds = Counter(id.split(":", 1)[0] for id in expected)
    assert kinds["chat"] >= 1 and kinds["toolcall"] == 18 and kinds["frame"] == 18 and recalled >= 1
    for id, want in expected.items():
        held = Counter((vt, h) for vt, _, h in all_corrections(url, id))
        assert held == want, id

    # what the session recorded offline (provisional tx ids in frames and refs) still verifies
    for frame_id in frames:
        frame = store.doc(frame_id)
        assert frame is not None
        check = verify_frame(store, frame)
        assert check.ok, (frame_id, check.problems)
    # frames written later name the offline turns' versions by their provisional tx ids
    refs = [r for f in frames if (d := store.doc(f)) for r in d["content"]["refs"]]
    assert sum(1 for r in refs if (r.get("tx_id") or 0) < 0) >= 4
    # and the session resumes from the store as if nothing had happened
    resumed = Session.open(store, sid, harness="openai")
    assert len(resumed.view.entries) == len(hook.session.view.entries)
    store.close()


def test_changes_made_while_the_node_is_down_are_reported_made_and_recorded_when_it_is_back(
    rocksdb_node: tuple[str, int, Path], tmp_path: Path
) -> None:
    """The file tools change the disk, then record the new version. With the node down the
    record cannot be made: the result says the change was made and not yet recorded, never that
    the edit failed (an agent told so would make it again, and an insertion would apply twice);
    a read gives the text in its result.
    The tracker tries what it could not record again every ``store_retry`` seconds, so both the
    edit and a change made outside the tools are recorded moments after the node is back (here
    with no periodic rescan at all)."""
    url, port, data = rocksdb_node
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    (root / "b.py").write_text("b = 1\n")
    store = open_store(f"{url}?outbox={tmp_path / 'outbox.db'}")
    store.inner.BACKOFF_S = 0.01  # type: ignore[attr-defined]
    ws = Workspace(root, max_active_chars=64)
    tracker = FileTracker(store, ws, rescan_interval=None, store_retry=0.2).start()
    try:
        session = Session.open(store, f"edit-{uuid.uuid4().hex[:8]}", harness="openai")
        tools = FileTools(session, ws, tracker=tracker)
        first = json.loads(tools.call("read", {"path": "a.py"}))
        assert first["indexed"] == "new"
        [b] = tracker.track([root / "b.py"])
        (root / "c.ini").write_text("token = erase-me\n")
        evict(store, json.loads(tools.call("read", {"path": "c.ini"}))["id"])
        session.assemble()  # a turn takes the eviction in
        _stop(port)
        edited = json.loads(tools.call("edit", {"path": "a.py", "oldText": "x = 1", "newText": "x = 1\ny = 2"}))
        assert "error" not in edited, edited
        assert edited["recorded"] is False and edited["replacements"] == 1 and edited["path"] == "a.py"
        assert "Do not make this change again" in edited["note"]
        assert (root / "a.py").read_text() == "x = 1\ny = 2\n"
        (root / "b.py").write_text("b = 2\n")
        # a read cannot make the file an object: its text comes in the result, said to be a copy
        offline = json.loads(tools.call("read", {"path": "a.py"}))
        assert offline["recorded"] is False and offline["content"] == "x = 1\ny = 2\n", offline
        assert "not kept current" in offline["note"]
        (root / "long.txt").write_text("z" * 100)  # capped as the active pool would show it
        long = json.loads(tools.call("read", {"path": "long.txt"}))
        assert long["content"] == "z" * 64 and long["chars"] == 100 and long["context_chars"] == 64
        # bytes evicted from the store are not shown offline either
        erased = json.loads(tools.call("read", {"path": "c.ini"}))
        assert erased["content_omitted"] == EVICTED_BYTES and "content" not in erased, erased
        wait_for(lambda: sum("b.py: not recorded yet" in e for e in tracker.errors) == 1, "the tracker tried b.py")

        assert _start(port, data) == url

        def newest(oid: str) -> Any:
            return next((v.doc["content"] for v in store.history(oid, "desc", with_docs=True) if v.doc), None)

        wait_for(lambda: newest(first["id"]) == "x = 1\ny = 2\n" and newest(b.id) == "b = 2\n", "both recorded")
        again = json.loads(tools.call("read", {"path": "a.py"}))
        assert again["indexed"] == "already indexed" and again["version"] == 2 and again["active"] == "refreshed"
        assert sum("not recorded yet" in e for e in tracker.errors) == 2  # said once for each file
    finally:
        tracker.stop()
        store.close()


def _get_elsewhere(reader: Any, id: str, valid_time: int, tx_id: int) -> dict[str, Any] | None:
    with reader() as other:
        v = other.get(id, valid_time, tx_id)
        return None if v is None else v.doc


def test_a_reader_s_read_sends_what_was_accepted_after_it_was_made(xtdb_url: str, tmp_path: Path, uid: str) -> None:
    """A reader made while nothing waits, then a write accepted into the outbox file (another
    process whose node was out of reach): the reader's read, in a worker process, sends it first,
    as every read behind the file does, and so reads it (its comment said a reader sends nothing)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    box, id = tmp_path / "outbox.db", f"note:{uid}"
    with _outbox(xtdb_url, box) as on:
        reader = on.reader()
        assert reader is not None
        with _outbox(_nowhere(), box) as off:
            t1 = off.submit([Put(_doc(id, 1))])
        assert t1.pending and on.depth() == 1
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            got = pool.submit(_get_elsewhere, reader, id, t1.time, t1.id).result(timeout=120)
        assert got == _doc(id, 1)
        assert on.depth() == 0
        v = on.get(id, t1.time)
        assert v is not None and v.doc == _doc(id, 1) and v.tx_id >= 0


def test_a_reader_in_another_process_resolves_provisional_ids_and_none_is_given_while_writes_wait(
    xtdb_url: str, tmp_path: Path, uid: str
) -> None:
    """``OutboxStore.reader``: while writes wait in the outbox, only this process can read them
    (None); once sent, a frame check in a worker process resolves a write's provisional id
    (through the markers) as this process does."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    box, id = tmp_path / "outbox.db", f"note:{uid}"
    with _outbox(_nowhere(), box) as off:
        t1 = off.submit([Put(_doc(id, 1))])
        assert t1.id < 0 and off.reader() is None
    with _outbox(xtdb_url, box) as on:
        assert on.reader() is None  # (still waiting: nothing has been read or written yet)
        on.sync()
        assert on.depth() == 0
        reader = on.reader()
        assert reader is not None
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            got = pool.submit(_get_elsewhere, reader, id, t1.time, t1.id).result(timeout=120)
        assert got == _doc(id, 1)
        assert on.depth() == 0 and box.exists()
