"""Stores: the same workload on the embedded SQLite store and on a real XTDB 1.x node.

* ingest: 5,000 documents (about 1 kB each) in transactions of 100; documents per second.
* as-of get: ``get(id, valid_time, tx_id)`` of random documents at random past bases; p50.
* history: ``history(id)`` (with documents) of one object with 1,000 versions; p50.

XTDB is reached as users reach it: ``open_store("xtdb+http://...")`` over HTTP/EDN, behind the
outbox, on an in-memory node this script starts with ``xtdb/start`` and stops again. The report
gives XTDB/SQLite ratios; the aim is batched ingest into XTDB of at least 1,000 documents/s
(the exit status says whether it was met).
"""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from context_os.hashing import doc_hashes
from context_os.store import Put, Store, open_store

from ._report import pct, write_section

ROOT = Path(__file__).resolve().parent.parent
DOCS, BATCH = 5_000, 100
VERSIONS = 1_000
GETS, HISTORIES = 500, 30
WARM_DOCS = 10_000
ROUNDS = 3
T0 = 1_700_000_000_000
INGEST_AIM = 1_000  # XTDB documents/s


def _doc(i: int, version: int = 0, prefix: str = "bench") -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": f"toolcall:{prefix}:{i}",
        "kind": "toolcall",
        "content": f"# output {i} v{version}\n" + "line of tool output\n" * 45,
        "meta": {"session": "bench", "turn": i // 10, "name": "bash", "chars": 900, "version": version},
    }
    d.update(doc_hashes(d))
    return d


def _timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def warm_up(store: Store) -> None:
    """Exercise every path first, so the JVM's JIT (and SQLite's page cache) are warm."""
    for lo in range(0, WARM_DOCS, BATCH):
        store.submit([Put(_doc(i, prefix="warm"), T0 + i) for i in range(lo, lo + BATCH)])
    for i in range(0, WARM_DOCS, 50):
        store.get(f"toolcall:warm:{i}", T0 + i)
        store.history(f"toolcall:warm:{i}")


def run(store: Store) -> dict[str, float]:
    """The workload on one store; seconds per operation and documents per second."""
    rng = random.Random(7)
    warm_up(store)
    # ingest: each document at its own valid time, in transactions of BATCH; the median of
    # ROUNDS rounds (new documents each), as the machine may be busy with something else
    rates, txs = [], []
    for k in range(ROUNDS):
        prefix = "bench" if k == 0 else f"bench{k}"
        t0 = time.perf_counter()
        round_txs = [
            store.submit([Put(_doc(i, prefix=prefix), T0 + i) for i in range(lo, lo + BATCH)])
            for lo in range(0, DOCS, BATCH)
        ]
        rates.append(DOCS / (time.perf_counter() - t0))
        assert all(tx.committed for tx in round_txs)
        txs = txs or round_txs
    ingest = pct(rates, 50)

    def one_get() -> None:
        i = rng.randrange(DOCS)
        tx = txs[rng.randrange(i // BATCH, len(txs))]  # a basis at or after the document's own tx
        v = store.get(f"toolcall:bench:{i}", T0 + i + rng.randrange(1_000), tx.id)
        assert v is not None and v.doc is not None

    gets = _timed(one_get, GETS)

    # one object with VERSIONS versions, written in transactions of BATCH
    hid = "toolcall:bench:0"
    for lo in range(0, VERSIONS, BATCH):
        store.submit([Put({**_doc(0, v), "id": hid}, T0 + 10 * v) for v in range(lo, lo + BATCH)])

    def one_history() -> None:
        assert len(store.history(hid)) == VERSIONS

    histories = _timed(one_history, HISTORIES)
    return {"ingest": ingest, "get_p50": pct(gets, 50), "get_p95": pct(gets, 95), "history_p50": pct(histories, 50)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main() -> int:
    port = _free_port()
    started = subprocess.run(
        [str(ROOT / "xtdb" / "start"), "--port", str(port), "--config", "memory"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if started.returncode != 0:
        print(f"xtdb/start failed:\n{started.stderr[-3000:]}", file=sys.stderr)
        return 1
    url = started.stdout.strip().splitlines()[-1]
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            with open_store(f"sqlite:///{tmp / 'bench.db'}") as s:
                sqlite = run(s)
            with open_store(f"{url}?outbox={tmp / 'outbox.db'}") as x:
                xtdb = run(x)
    finally:
        subprocess.run([str(ROOT / "xtdb" / "stop"), "--port", str(port)], check=False, timeout=90)

    def ms(v: float) -> str:
        return f"{v * 1e3:.2f} ms"

    for name, r in (("sqlite", sqlite), ("xtdb", xtdb)):
        print(
            f"{name}: ingest {r['ingest']:,.0f} docs/s, as-of get p50 {ms(r['get_p50'])}, "
            f"history({VERSIONS:,} versions) p50 {ms(r['history_p50'])}"
        )
    ok = xtdb["ingest"] >= INGEST_AIM
    body = f"""
The same workload on both stores in one run: the embedded SQLite store (a file in a temp dir)
and a real XTDB 1.24.5 node (in-memory, started by `xtdb/start`, reached over HTTP/EDN through
`open_store`, so behind the outbox). Documents are tool results of about 1 kB with hashes and
five meta attributes. Each store first takes {WARM_DOCS:,} other documents and some reads
(a fresh JVM runs the first thousands of documents about half as fast).

| | SQLite | XTDB | XTDB / SQLite |
|---|---:|---:|---:|
| batched ingest ({DOCS:,} docs, {BATCH} per tx; median of {ROUNDS} rounds) | {sqlite["ingest"]:,.0f} docs/s | {xtdb["ingest"]:,.0f} docs/s | {xtdb["ingest"] / sqlite["ingest"]:.2f}× |
| as-of `get(id, valid_time, tx_id)` p50 ({GETS} random) | {ms(sqlite["get_p50"])} | {ms(xtdb["get_p50"])} | {xtdb["get_p50"] / sqlite["get_p50"]:.1f}× |
| as-of `get` p95 | {ms(sqlite["get_p95"])} | {ms(xtdb["get_p95"])} | {xtdb["get_p95"] / sqlite["get_p95"]:.1f}× |
| `history` of {VERSIONS:,} versions p50 (with docs) | {ms(sqlite["history_p50"])} | {ms(xtdb["history_p50"])} | {xtdb["history_p50"] / sqlite["history_p50"]:.1f}× |

Aim: batched ingest into XTDB ≥ {INGEST_AIM:,} docs/s: **{"met" if ok else "MISSED"}**. XTDB pays
an HTTP round trip per call (and `submit` waits until the node has indexed the transaction; it
asks whether it committed only when it holds a match); a `get` is two calls (`entity-tx`, then `entity` at that version's
coordinates), so the embedded store answers far faster on one machine. A long history is
bound by parsing its EDN answer in Python (`edn_format`, a PLY parser: most of the time).
XTDB's case is elsewhere: one bitemporal store shared by many agents and machines, scaled out
by XTDB itself.
"""
    write_section("Stores: SQLite vs XTDB", body)
    print("targets met" if ok else "TARGET MISSED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
