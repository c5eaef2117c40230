"""File tracker targets: write-to-store latency against the observer's own, and memory.

* latency: 500 edits on disk (round robin over 10 tracked files, one at a time). For each, the
  time from the write to the new version being committed in the store (p50/p95), and, measured
  in the same run on the same writes, the time to the first event of a bare watchdog handler on
  the same directory: the baseline the tracker cannot beat. Target: p95 ≤ 250 ms. The tracker
  waits ``debounce`` (50 ms) after the last event on purpose (one version per editor save), so
  the ratio is mostly that wait.
* memory: extra RSS (VmRSS from /proc) of indexing 5,000 files and tracking them with a started
  tracker, against the process before. Target: ≤ 100 MB.
"""

from __future__ import annotations

import inspect
import sys
import tempfile
import threading
import time
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from context_os.files import FileIndex, FileTracker, Workspace
from context_os.store.base import Version
from context_os.store.sqlite import SqliteStore

from ._report import command_line, pct, rss_mb, sized, write_section

EDITS = sized(500, 20)
FILES = 10
TRACKED = sized(5_000, 200)
P95_TARGET_MS = 250.0
RSS_TARGET_MB = 100.0
DEBOUNCE: float = inspect.signature(FileTracker).parameters["debounce"].default
"""The tracker's own default wait for quiet, which every latency here includes."""


class _Stamp(FileSystemEventHandler):
    """A bare handler: the time of the first event for the path it waits for."""

    def __init__(self) -> None:
        self.path = ""
        self.at = 0.0
        self.seen = threading.Event()

    def arm(self, path: str) -> None:
        self.path, self.at = path, 0.0
        self.seen.clear()

    def dispatch(self, event: FileSystemEvent) -> None:
        if not self.seen.is_set() and event.src_path == self.path:
            self.at = time.perf_counter()
            self.seen.set()


def latency(tmp: Path) -> tuple[list[float], list[float]]:
    """(tracker write→committed seconds, bare observer write→first event seconds), per edit."""
    root = tmp / "lat"
    root.mkdir()
    paths = [root / f"f{n}.txt" for n in range(FILES)]
    for p in paths:
        p.write_text("0\n")
    committed: dict[str, float] = {}
    done = threading.Event()
    waiting = {"id": "", "version": 0}

    def on_version(v: Version) -> None:
        if v.doc is not None and v.id == waiting["id"] and v.doc["meta"]["version"] >= waiting["version"]:
            committed[v.id] = time.perf_counter()
            done.set()

    ws = Workspace(root)
    with SqliteStore(tmp / "lat.db") as store:
        index = FileIndex(store, ws)
        ids = [index.index(ws.resolve(p.name), read=True, cause="read").id for p in paths]
        bare = _Stamp()
        observer = Observer()
        observer.schedule(bare, str(root.resolve()), recursive=True)
        observer.start()
        tracker = FileTracker(store, ws, index=index, rescan_interval=None, debounce=DEBOUNCE).start()
        index.subscribe(on_version)
        tracker.settle(10)
        time.sleep(0.2)
        tracked, raw = [], []
        try:
            for n in range(EDITS):
                k = n % FILES
                path, oid = paths[k], ids[k]
                waiting.update(id=oid, version=n // FILES + 2)
                done.clear()
                bare.arm(str(path.resolve()))
                t0 = time.perf_counter()
                path.write_text(f"edit {n}\n")
                if not done.wait(10) or not bare.seen.wait(10):
                    raise RuntimeError(f"edit {n} of {path.name} was not recorded within 10 s")
                tracked.append(committed[oid] - t0)
                raw.append(bare.at - t0)
        finally:
            index.unsubscribe(on_version)
            tracker.stop()
            observer.stop()
            observer.join()
        for oid in ids:  # every edit is one version, and the store holds the last text
            assert len(store.history(oid)) == EDITS // FILES + 1, oid
    return tracked, raw


def memory(tmp: Path) -> tuple[float, float, float, float]:
    """(RSS before, after indexing, after the tracker started, seconds to index) for TRACKED files."""
    root = tmp / "mem"
    for d in range(50):
        (root / f"d{d:02d}").mkdir(parents=True)
    files = [root / f"d{n % 50:02d}" / f"file{n:05d}.py" for n in range(TRACKED)]
    for n, p in enumerate(files):
        p.write_text(f"# module {n}\n" + "x = 1\n" * 30)
    ws = Workspace(root)
    with SqliteStore(tmp / "mem.db") as store:
        before = rss_mb()
        index = FileIndex(store, ws)
        t0 = time.perf_counter()
        for p in files:
            index.index(p, read=True, cause="read")
        seconds = time.perf_counter() - t0
        indexed = rss_mb()
        tracker = FileTracker(store, ws, index=index, rescan_interval=None, debounce=DEBOUNCE).start()
        try:
            tracker.settle(60)
            assert len(tracker.tracked()) == TRACKED
            files[0].write_text("changed\n")
            deadline = time.monotonic() + 10
            while store.doc(index.lookup(files[0]).id)["content"] != "changed\n":  # type: ignore[index, union-attr]
                if time.monotonic() > deadline:
                    raise RuntimeError("the tracker missed an edit with 5,000 files tracked")
                time.sleep(0.01)
            after = rss_mb()
        finally:
            tracker.stop()
    return before, indexed, after, seconds


def section(
    tracked: list[float], raw: list[float], rss: tuple[float, float, float], seconds: float, debounce: float
) -> tuple[str, bool]:
    """The section's text, and whether both targets were met: seconds from each write to its
    version (``tracked``) and to the bare handler's first event (``raw``), the RSS before, after
    indexing and with the tracker running, the seconds indexing took, and the tracker's debounce."""
    t50, t95, r50, r95 = (pct(tracked, 50) * 1e3, pct(tracked, 95) * 1e3, pct(raw, 50) * 1e3, pct(raw, 95) * 1e3)
    before, indexed, after = rss
    extra = after - before
    ok = t95 <= P95_TARGET_MS and extra <= RSS_TARGET_MB
    body = f"""
### Write → new version visible (embedded store)

{len(tracked)} edits (round robin over {FILES} tracked files, one at a time), each timed from the
write to the commit of its new version, and, in the same run on the same writes, to the first
event of a bare watchdog handler watching the same directory. The tracker waits {debounce * 1e3:.0f} ms of quiet
per file on purpose (`debounce`), so that an editor's save is one version.

| | p50 | p95 |
|---|---:|---:|
| tracker: write → version committed | {t50:.1f} ms | {t95:.1f} ms |
| bare watchdog handler: write → first event | {r50:.2f} ms | {r95:.2f} ms |
| tracker minus its {debounce * 1e3:.0f} ms debounce | {t50 - debounce * 1e3:.1f} ms | {t95 - debounce * 1e3:.1f} ms |
| ratio tracker / bare | {t50 / max(r50, 1e-6):.0f}× | {t95 / max(r95, 1e-6):.0f}× |

Target p95 ≤ {P95_TARGET_MS:.0f} ms: **{"met" if t95 <= P95_TARGET_MS else "MISSED"}**.

### Memory with {TRACKED:,} tracked files

VmRSS of the process before, after indexing {TRACKED:,} small files ({seconds:.1f} s through
`FileIndex`, one transaction each), and with a started tracker holding all of them (one
recursive watch over 50 directories) after it recorded an edit:

| | RSS | extra |
|---|---:|---:|
| before | {before:.1f} MB | |
| after indexing | {indexed:.1f} MB | +{indexed - before:.1f} MB |
| tracker running | {after:.1f} MB | +{extra:.1f} MB |

Target ≤ {RSS_TARGET_MB:.0f} MB extra: **{"met" if extra <= RSS_TARGET_MB else "MISSED"}**.
"""
    return body, ok


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        tracked, raw = latency(tmp)
        before, indexed, after, seconds = memory(tmp)
    t50, t95, r50, r95 = (pct(tracked, 50) * 1e3, pct(tracked, 95) * 1e3, pct(raw, 50) * 1e3, pct(raw, 95) * 1e3)
    extra = after - before
    print(f"write → committed version: p50 {t50:.1f} ms, p95 {t95:.1f} ms over {len(tracked)} edits")
    print(f"bare watchdog handler:     p50 {r50:.2f} ms, p95 {r95:.2f} ms (ratio p95 {t95 / max(r95, 1e-6):.0f}x)")
    print(
        f"RSS: {before:.1f} MB before, +{indexed - before:.1f} MB after indexing {TRACKED:,} files "
        f"({seconds:.1f} s), +{extra:.1f} MB with the tracker running"
    )
    body, ok = section(tracked, raw, (before, indexed, after), seconds, DEBOUNCE)
    write_section("File tracker", body)
    print("targets met" if ok else "TARGET MISSED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    command_line(__doc__, main)
