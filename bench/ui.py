"""``ctxos ui``: whether a 50,000-message session pages and stays responsive.

Two sessions in one SQLite store: the bundled demo (88 turns, 188 messages) and a synthetic long
one (50,000 messages over 200 turns, each turn collapsing 124 tool results). Every page is
fetched over loopback HTTP from the real server; reported: the median of repeated loads, for
both sessions. Baselines, measured in the same run on the long session: a timeline page against
reading the frames it shows (``turn_rows`` for those 100 turns, what any view of them must
read); a frame page's first load against ``verify_frame`` on the same frame (what any verified
view of it must do); a later page of that frame against its first load.
Aims (long session): a timeline page within 2× of its reads, a frame page's first load within
1.3× of its verification, a later page of it within 0.1× of the first load.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from tests.ui.recorded import record_demo, record_long

from context_os.context.frames import get_frame, verify_frame
from context_os.context.timeline import turn_rows
from context_os.server.ui import make_ui_server
from context_os.store.sqlite import SqliteStore

from ._report import write_section

REPEAT = 7
TIMELINE_AIM, FRAME_AIM, PAGE_AIM = 2.0, 1.3, 0.1


def timed(fn: Callable[[], object], repeat: int = REPEAT) -> float:
    """The median of ``repeat`` runs of ``fn``, in ms."""
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) * 1000)
    return statistics.median(runs)


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        store = SqliteStore(Path(d) / "ui.db")
        t = time.perf_counter()
        record_demo(store, "demo")
        record_long(store, "long")
        built = time.perf_counter() - t
        server = make_ui_server(store, 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{server.server_address[1]}", timeout=300) as client:

                def get(path: str) -> Callable[[], object]:
                    def fetch() -> object:
                        r = client.get(path)
                        assert r.status_code == 200, (path, r.status_code)
                        return r

                    return fetch

                rows: list[tuple[str, float, float, int]] = []
                ratios: dict[str, float] = {}
                for label, demo_path, long_path in (
                    ("sessions", "/", "/"),
                    ("timeline, first page", "/session?id=demo", "/session?id=long"),
                    ("timeline, last page", "/session?id=demo&turn=88", "/session?id=long&from=101"),
                    ("object (a chat page)", "/object?id=chat:demo:00000", "/object?id=chat:long:00000"),
                ):
                    a, b = timed(get(demo_path)), timed(get(long_path))
                    size = len(client.get(long_path).content)
                    rows.append((label, a, b, size))
                    ratios[label] = b / a
                reads = max(
                    timed(lambda: turn_rows(store, "long", 1, 100)), timed(lambda: turn_rows(store, "long", 101, 100))
                )
                pages = max(timed(get("/session?id=long")), timed(get("/session?id=long&from=101")))
                frames: list[tuple[str, float, float, float, int]] = []
                for sid, turn, msgs in (("demo", 88, "188"), ("long", 200, "50,000")):
                    frame = get_frame(store, sid, turn)
                    bare = timed(lambda frame=frame: verify_frame(store, frame), 3)
                    # a fresh server for each first load: the first load is the one that re-renders
                    cold_runs = []
                    for _ in range(3):
                        fresh = make_ui_server(store, 0)
                        threading.Thread(target=fresh.serve_forever, daemon=True).start()
                        url = f"http://127.0.0.1:{fresh.server_address[1]}/frame?session={sid}&turn={turn}"
                        cold_runs.append(timed(lambda url=url: httpx.get(url, timeout=300), 1))
                        fresh.shutdown()
                        fresh.server_close()
                    cold = statistics.median(cold_runs)
                    later = timed(get(f"/frame?session={sid}&turn={turn}&from=100"))
                    size = len(client.get(f"/frame?session={sid}&turn={turn}").content)
                    frames.append((f"{sid} turn {turn} ({msgs} messages)", bare, cold, later, size))
        finally:
            server.shutdown()
            server.server_close()
            store.close()
    timeline = pages / reads
    frame_ratio = frames[1][2] / frames[1][1]
    page_ratio = frames[1][3] / frames[1][2]
    ok = timeline <= TIMELINE_AIM and frame_ratio <= FRAME_AIM and page_ratio <= PAGE_AIM
    body = (
        f"Both sessions recorded in {built:.0f} s; pages fetched over loopback from the real server, "
        f"median of {REPEAT} loads.\n\n"
        "| page | demo (88 turns, 188 messages) ms | long (200 turns, 50,000 messages) ms | long / demo | long page size |\n"
        "|---|---|---|---|---|\n"
        + "".join(f"| {r[0]} | {r[1]:.1f} | {r[2]:.1f} | {r[2] / r[1]:.2f}× | {r[3] / 1024:.0f} KiB |\n" for r in rows)
        + "\n| frame page | bare `verify_frame` ms | first load ms | first load / verify | next page ms | size |\n"
        "|---|---|---|---|---|---|\n"
        + "".join(
            f"| {f[0]} | {f[1]:.0f} | {f[2]:.0f} | {f[2] / f[1]:.2f}× | {f[3]:.1f} | {f[4] / 1024:.0f} KiB |\n"
            for f in frames
        )
        + f"\nAims, on the long session: a timeline page within {TIMELINE_AIM:.0f}× of reading its 100 frames "
        f"({reads:.1f} ms): {'met' if timeline <= TIMELINE_AIM else 'MISSED'} ({timeline:.2f}×); a frame page's first "
        f"load within {FRAME_AIM}× of verifying the frame: {'met' if frame_ratio <= FRAME_AIM else 'MISSED'} "
        f"({frame_ratio:.2f}×); its next page within {PAGE_AIM}× of the first load: "
        f"{'met' if page_ratio <= PAGE_AIM else 'MISSED'} ({page_ratio:.3f}×). A 50,000-message frame costs its "
        "re-render and verification (every message hashed again) once; its pages then come from memory. On the "
        "demo a frame page costs mostly its HTML (188 messages, whole file texts among them).\n"
    )
    write_section("Web view", body)
    print(body)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
