"""Concurrency: two processes write to one store at once (one SQLite file; one XTDB node).

Each writer (``_worker writer``) writes versions of its own id, of an id both write, of both in
one transaction, and increments a shared counter with compare-and-set (``Match`` + ``Put``,
retried when the match fails). Every write has a valid time of its own, so each is a version of
its own in history. Afterwards, per id, the history holds exactly the acknowledged versions
(same valid times, same hashes, same content: none lost, none doubled), every acknowledged
transaction reads back as of itself, no transaction id was handed out twice, and the counter
equals the number of committed increments (no lost update).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from context_os.store import Store, open_store
from tests._xtdb_node import all_corrections
from tests.reliability.conftest import Counts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
WRITERS = 2


def _run_writers(url: str, prefix: str, txs: int, seed: int, tmp_path: Path) -> list[dict[str, Any]]:
    """Start the writers (``txs`` transactions each), wait for all; the acknowledgements of all."""
    procs = []
    go = time.time() + 1.5  # they start writing together, once both have started up
    for i in range(WRITERS):
        args = ["--store", url, "--prefix", prefix, "--name", f"w{i}", "--index", str(i), "--start-at", str(go)]
        args += ["--writers", str(WRITERS), "--n", str(txs), "--seed", str(seed)]
        # output to files, not pipes: a writer blocked on a full pipe would stop writing concurrently
        with (tmp_path / f"w{i}.out").open("wb") as out, (tmp_path / f"w{i}.log").open("wb") as err:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.reliability._worker", "writer", *args],
                    cwd=ROOT,
                    stdout=out,
                    stderr=err,
                )
            )
    acks = []
    for i, proc in enumerate(procs):
        assert proc.wait(timeout=240) == 0, (tmp_path / f"w{i}.log").read_text()[-3000:]
        lines = [json.loads(x) for x in (tmp_path / f"w{i}.out").read_text().splitlines()]
        assert lines[-1] == {"done": f"w{i}"}
        acks += [line | {"writer": i} for line in lines if "ack" in line]
    return acks


def _check(store: Store, acks: list[dict[str, Any]], prefix: str, counts: Counts, check: str) -> None:
    tx_ids = [a["ack"] for a in acks]
    assert len(set(tx_ids)) == len(tx_ids), "a transaction id was acknowledged twice"
    # the writers really wrote at the same time: their transactions interleave
    order = [a["writer"] for a in sorted(acks, key=lambda a: a["ack"])]
    switches = sum(1 for x, y in zip(order, order[1:], strict=False) if x != y)
    assert switches >= 10, f"the writers hardly overlapped ({switches} switches)"
    # every transaction the store holds since the first was acknowledged to exactly one writer
    newest = store.latest_tx()
    assert newest is not None and newest.id == max(tx_ids)
    assert sorted(tx_ids) == list(range(min(tx_ids), newest.id + 1)), "a transaction nobody acknowledged"

    expected: dict[str, list[tuple[int, str, Any, int]]] = {}
    increments = []
    lost = 0
    for a in acks:
        for op in a["ops"]:
            if op[0] != "put":
                continue
            _, id, vt, object_hash, content = op
            if vt is None:  # a counter increment, at the tx time
                if a["committed"]:
                    increments.append((a["ack"], content["value"]))
                continue
            expected.setdefault(id, []).append((vt, object_hash, content, a["ack"]))
            v = store.get(id, vt, a["ack"])
            lost += v is None or v.object_hash != object_hash or v.tx_id != a["ack"]

    versions = 0
    for id, want in expected.items():
        held = [(v.valid_time, v.object_hash, v.doc["content"] if v.doc else None, v.tx_id) for v in store.history(id)]
        assert held == sorted(want), f"{id}: history differs from what was acknowledged"
        if store.url.startswith("xtdb"):
            raw = all_corrections(store.url, id)
            assert Counter((vt, h) for vt, _, h in raw) == Counter((vt, h) for vt, h, _, _ in want), id
        versions += len(held)

    # the counter: each committed increment read the value before it, so the values are 1..n
    counter = store.get(f"note:{prefix}:counter")
    n = len(increments)
    assert sorted(value for _, value in increments) == list(range(1, n + 1)), "a lost or doubled increment"
    assert n == 0 or (counter is not None and counter.doc is not None and counter.doc["content"]["value"] == n)
    for tx_id, value in increments:
        v = store.get(f"note:{prefix}:counter", None, tx_id)
        lost += v is None or v.doc is None or v.doc["content"]["value"] != value
    aborted = sum(1 for a in acks if not a["committed"])
    counts.add(
        check,
        processes=WRITERS,
        interleavings=switches,
        acknowledged_txs_checked=len(acks),
        versions_checked=versions + n,
        cas_increments=n,
        cas_retries=aborted,
        data_lost=lost,
    )
    assert lost == 0


def test_two_processes_write_one_sqlite_file(tmp_path: Path, seed: int, reliability: Counts) -> None:
    started = time.monotonic()
    url = "sqlite://" + str(tmp_path / "store.db")
    acks = _run_writers(url, "c", 1000, seed, tmp_path)
    with open_store(url) as store:
        _check(store, acks, "c", reliability, "concurrency: sqlite")
    reliability.timed("concurrency: sqlite", started)


@pytest.mark.xtdb
def test_two_processes_write_one_xtdb_node(xtdb_url: str, tmp_path: Path, seed: int, reliability: Counts) -> None:
    started = time.monotonic()
    url, prefix = f"{xtdb_url}?outbox=off", uuid.uuid4().hex[:10]
    acks = _run_writers(url, prefix, 300, seed, tmp_path)
    with open_store(url) as store:
        _check(store, acks, prefix, reliability, "concurrency: xtdb")
    reliability.timed("concurrency: xtdb", started)
