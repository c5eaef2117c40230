"""The XTDB cluster: does a second node add write throughput?

A real cluster as ``xtdb/start --cluster`` runs it (a local PostgreSQL holding the transaction
log and documents, nodes with their own RocksDB indexes; tests/cluster/_cluster.py starts it).
The workload is bench/stores.py's batched ingest (documents of about 1 kB, 100 per transaction;
a writer is done once its node has indexed its last one, ``store.sync()``), first by one writer
through one node (the baseline, in the same run), then by two writers at once, each through its
own node. Aim: two nodes ingest ≥ 1.5× one.

During the one-writer rounds it also reads the CPU time of each of the node's threads (Linux
``/proc/<pid>/task``) and sorts it into request handling (the front end's HTTP threads), indexing
(XTDB's transaction threads and RocksDB's), the JIT compiler and the garbage collector: what a
document costs a node to take in and to index, and so what a second node could add even on a
machine of its own, since every node indexes every transaction.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from tests.cluster._cluster import XTDB, Cluster

from context_os.store import Put
from context_os.store.xtdb import XtdbStore

from ._report import command_line, pct, write_section
from .stores import BATCH, T0, _doc

DOCS = 6_000
WARM = 10_000
"""Documents written through each node before the rounds: the JIT compiler is still busy after 3,000."""
ROUNDS = 3
SMALL = 200
AIM = 1.5


def _cpu() -> tuple[int, int] | None:
    """The machine's busy and total CPU time so far (jiffies of /proc/stat), or None off Linux."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def _busy(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time that was busy between two ``_cpu()`` readings."""
    if before is None or after is None or after[1] == before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


THREAD_KINDS = (
    ("requests", ("context-os-xtdb-http",)),
    ("indexing", ("xtdb-tx", "rocksdb")),
    ("JIT", ("C1 Compiler", "C2 Compiler")),
    ("GC", ("GC ", "G1 ")),
)
"""How a node's threads are sorted, by the start of their name (``/proc/<pid>/task/<tid>/comm``,
cut to 15 characters by Linux); the rest is *other*."""


def _thread_kind(name: str) -> str:
    return next((kind for kind, starts in THREAD_KINDS if name.startswith(tuple(s[:15] for s in starts))), "other")


def _threads_cpu(pid: int) -> dict[tuple[str, str], int] | None:
    """CPU time (clock ticks) of each thread of process ``pid`` so far, by (thread id, name); None
    where /proc cannot tell."""
    out: dict[tuple[str, str], int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        out[(tid, name)] = int(fields[11]) + int(fields[12])  # utime + stime
    return out


def _split(before: dict[tuple[str, str], int] | None, after: dict[tuple[str, str], int] | None) -> dict[str, float]:
    """Seconds of CPU per kind of thread between two ``_threads_cpu`` readings."""
    if before is None or after is None:
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for key, ticks in after.items():
        kind = _thread_kind(key[1])
        out[kind] = out.get(kind, 0.0) + (ticks - before.get(key, 0)) / tick
    return out


def ingest(store: XtdbStore, prefix: str, lo: int, hi: int) -> None:
    for start in range(lo, hi, BATCH):
        store.submit([Put(_doc(i, prefix=prefix), T0 + i) for i in range(start, min(start + BATCH, hi))])
    store.sync()  # a submit of puts returns once the log has it: done when the node indexed them


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        cluster = Cluster(Path(d))
        try:
            first, second = (int(cluster.start_node().rsplit(":", 1)[1]) for _ in range(2))
            one, two = XtdbStore(cluster.url(first)), XtdbStore(cluster.url(second))
            pid = int((XTDB / "target" / f"xtdb-{first}.pid").read_text())
            ingest(one, "warm", 0, WARM)  # JIT and pools warm on both nodes
            ingest(two, "warm2", 0, WARM)
            single, double = [], []
            busy: dict[str, list[float]] = {"one": [], "two": []}
            split: dict[str, float] = {}
            for k in range(ROUNDS):
                cpu, threads, t = _cpu(), _threads_cpu(pid), time.perf_counter()
                ingest(one, f"one{k}", 0, DOCS)
                single.append(DOCS / (time.perf_counter() - t))
                if (share := _busy(cpu, _cpu())) is not None:
                    busy["one"].append(share)
                for kind, seconds in _split(threads, _threads_cpu(pid)).items():
                    split[kind] = split.get(kind, 0.0) + seconds
                writers = [
                    threading.Thread(target=ingest, args=(s, f"two{k}", lo, lo + DOCS // 2))
                    for s, lo in ((one, 0), (two, DOCS // 2))
                ]
                cpu, t = _cpu(), time.perf_counter()
                for w in writers:
                    w.start()
                for w in writers:
                    w.join()
                double.append(DOCS / (time.perf_counter() - t))
                if (share := _busy(cpu, _cpu())) is not None:
                    busy["two"].append(share)
            # a small transaction until it is readable: its latency through one node, and through
            # the other for what the first wrote (seen by polling the shared log)
            small: list[float] = []
            for i in range(SMALL):
                t = time.perf_counter()
                one.submit([Put(_doc(i * 5 + j, prefix="small"), T0 + i) for j in range(5)])
                one.sync()
                small.append(time.perf_counter() - t)
            seen: list[float] = []
            for i in range(SMALL // 4):
                tx = one.submit([Put(_doc(i, prefix="seen"), T0 + i)])
                t = time.perf_counter()
                two._await(tx.id)
                seen.append(time.perf_counter() - t)
            # every node indexed everything: the last document of each writer is on both
            for s in (one, two):
                s._await(max(one._seen_tx, two._seen_tx))
                assert s.get(f"toolcall:two{ROUNDS - 1}:{DOCS - 1}") is not None
            one.close()
            two.close()
        finally:
            cluster.stop()
    a, b = statistics.median(single), statistics.median(double)
    ok = b / a >= AIM
    cores = os.cpu_count() or 0
    load = (
        f" The machine's {cores} cores were busy {statistics.median(busy['one']):.0%} of the time with one writer "
        f"and {statistics.median(busy['two']):.0%} with two (`/proc/stat`, over each round): the second node's "
        "indexing has no idle core to run on."
        if busy["one"] and busy["two"]
        else ""
    )
    body = (
        f"{DOCS:,} documents of about 1 kB in transactions of {BATCH}, a writer done once its node indexed its "
        f"last one (`store.sync()`; a submit of puts returns once the log has it); median of {ROUNDS} "
        "rounds. A local PostgreSQL 15 and XTDB 1.24.3 nodes (JDBC log and documents, RocksDB indexes) on the "
        "same machine as the writers.\n\n"
        "| writers | docs/s |\n|---|---:|\n"
        f"| one, through one node | {a:,.0f} |\n| two at once, each through its own node | {b:,.0f} |\n\n"
        f"Aim: two nodes ≥ {AIM}× one: **{'met' if ok else 'MISSED'}** ({b / a:.2f}×). Every node indexes every "
        "transaction of the shared log, so a second node adds request handling, not indexing: on one machine "
        "of 2 cores, the nodes, PostgreSQL and the writers share the same cores. Until 2026-11-28 every submit "
        "was awaited (2026-11-27: one writer 1,213 docs/s, two 1,320, 1.09×); now a writer's next transaction "
        f"is built and logged while its node indexes the one before, and one node alone is that much faster.{load}\n\n"
        f"{SMALL} transactions of 5 documents through one "
        f"node, each until it is readable (submit, then `sync`): p50 {pct(small, 50) * 1000:.1f} ms, p95 {pct(small, 95) * 1000:.1f} ms. "
        f"A transaction written through one node, awaited on the other (which sees it by polling the shared "
        f"log, every 10 ms): p50 {pct(seen, 50) * 1000:.1f} ms, p95 {pct(seen, 95) * 1000:.1f} ms "
        "([xtdb.md](xtdb.md#the-transaction-log-wakes-its-own-indexer)).\n"
    )
    body += _split_text(split, ROUNDS * DOCS)
    write_section("XTDB cluster", body)
    print(body)
    return 0 if ok else 1


def _split_text(split: dict[str, float], docs: int) -> str:
    """What the node's threads spent per 1,000 documents in the one-writer rounds, and the bound it
    sets on what a second node adds."""
    if not split:
        return ""
    per = {kind: seconds * 1000 / docs * 1000 for kind, seconds in split.items()}  # ms per 1,000 docs
    kinds = [kind for kind, _ in THREAD_KINDS] + ["other"]
    rows = "".join(f"| {kind} | {per.get(kind, 0.0):.0f} |\n" for kind in kinds)
    s, i = per.get("requests", 0.0), per.get("indexing", 0.0)
    rest = s + sum(ms for kind, ms in per.items() if kind not in ("requests", "indexing"))
    return (
        "\nWhere the node's CPU went in the one-writer rounds (its threads' CPU time from `/proc`, in ms per "
        "1,000 documents; PostgreSQL and the writer are other processes):\n\n"
        f"| threads | CPU ms per 1,000 documents |\n|---|---:|\n{rows}\n"
        "Every node indexes every transaction of the shared log, so with two writers each through its own "
        "node, a node handles the requests of half the documents and indexes all of them. Where a node's CPU "
        "is what limits ingest (here), two nodes, each on a machine like this one of its own (PostgreSQL on a "
        "third), could ingest at most (requests + indexing) / (requests / 2 + indexing) = "
        f"**{_bound(s, i):.2f}×** what one does ({_bound(rest, i):.2f}× if the JIT, the collector and the rest "
        "all counted as requests): the aim of 1.5× needs a node to spend more on requests than twice what it "
        "spends on indexing. Where cores are to spare, a second node adds connections to write through, "
        "not indexing: both index every document.\n"
    )


def _bound(requests: float, indexing: float) -> float:
    """How much two nodes could ingest against one, each CPU-bound on a machine of its own."""
    return (requests + indexing) / (requests / 2 + indexing) if requests + indexing > 0 else 0.0


if __name__ == "__main__":
    command_line(__doc__, main)
