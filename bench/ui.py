"""``ctxos ui``: whether a page costs what it shows, not what the session holds.

Three sessions in one SQLite store: the bundled demo (88 turns, 188 messages) and two synthetic
long ones of the same shape, 25,000 and 50,000 messages (100 and 200 turns, each turn collapsing
124 tool results). Every page is fetched over loopback HTTP from the real server; reported: the
median of repeated loads. Baselines measured in the same run:
- a timeline page of the 50,000-message session against the same page of the 25,000-message one
  (both show turns 1–100): flat if paging works (aim ≤ 1.2×); and against reading the frames it
  shows (``turn_rows``, what any view of them must read), reported;
- a frame page's first load against ``verify_frame`` on the same frame (what any verified view of
  it must do; aim ≤ 1.3×), and a later page of that frame against its first load (aim ≤ 0.1×).
"""

from __future__ import annotations

import functools
import statistics
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

from ._report import command_line, sized, write_section

REPEAT = sized(15, 2)
LONG = sized((25_000, 50_000), (1_000, 2_000))
"""The messages of the two long sessions."""
PER_TURN = sized(250, 20)
"""Messages a turn of a long session adds (``record_long``): the longer one has ``LONG[1] // PER_TURN`` turns."""
FLAT_AIM, FRAME_AIM, PAGE_AIM = 1.2, 1.3, 0.1


def timed(fn: Callable[[], object], repeat: int = REPEAT) -> float:
    """The median of ``repeat`` runs of ``fn``, in ms (after one run to warm up)."""
    fn()
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) * 1000)
    return statistics.median(runs)


def first_load(store: SqliteStore, path: str) -> float:
    """``path`` fetched from a fresh server (nothing kept from earlier loads), in ms."""
    server = make_ui_server(store, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        t = time.perf_counter()
        r = httpx.get(f"http://127.0.0.1:{server.server_address[1]}{path}", timeout=300)
        assert r.status_code == 200, (path, r.status_code)
        return (time.perf_counter() - t) * 1000
    finally:
        server.shutdown()
        server.server_close()


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        store = SqliteStore(Path(d) / "ui.db")
        t = time.perf_counter()
        record_demo(store, "demo")
        record_long(store, "long25", LONG[0], PER_TURN)
        record_long(store, "long50", LONG[1], PER_TURN)
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

                sessions = ("demo", "long25", "long50")
                rows: list[tuple[str, list[float], int]] = []
                for label, path in (
                    ("timeline, turns 1–100", "/session?id={s}"),
                    ("object: the first chat page", "/object?id=chat:{s}:00000"),
                    ("object: the session document (a version per write)", "/object?id=session:{s}"),
                ):
                    times = [timed(get(path.format(s=s))) for s in sessions]
                    rows.append((label, times, len(client.get(path.format(s="long50")).content)))
                reads = timed(lambda: turn_rows(store, "long50", 1, 100))
                flat = rows[0][1][2] / rows[0][1][1]
                frames: list[tuple[str, float, float, float, int]] = []
                for sid, turn, msgs in (("demo", 88, "188"), ("long50", LONG[1] // PER_TURN, f"{LONG[1]:,}")):
                    frame = get_frame(store, sid, turn)
                    bare = timed(functools.partial(verify_frame, store, frame), 3)
                    path = f"/frame?session={sid}&turn={turn}"
                    cold = statistics.median(first_load(store, path) for _ in range(3))
                    client.get(path)
                    later = timed(get(path + "&from=100"))
                    frames.append(
                        (f"{sid} turn {turn} ({msgs} messages)", bare, cold, later, len(client.get(path).content))
                    )
        finally:
            server.shutdown()
            server.server_close()
            store.close()
    frame_ratio = frames[1][2] / frames[1][1]
    page_ratio = frames[1][3] / frames[1][2]
    ok = flat <= FLAT_AIM and frame_ratio <= FRAME_AIM and page_ratio <= PAGE_AIM
    body = (
        f"Sessions recorded in {built:.0f} s; pages fetched over loopback from the real server, median of "
        f"{REPEAT} loads after one.\n\n"
        "| page | demo (188 messages) ms | 25,000 messages ms | 50,000 messages ms | 50k / 25k | 50k page size |\n"
        "|---|---|---|---|---|---|\n"
        + "".join(
            f"| {label} | {t[0]:.1f} | {t[1]:.1f} | {t[2]:.1f} | {t[2] / t[1]:.2f}× | {size / 1024:.0f} KiB |\n"
            for label, t, size in rows
        )
        + "\n| frame page | bare `verify_frame` ms | first load ms | first load / verify | next page ms | size |\n"
        "|---|---|---|---|---|---|\n"
        + "".join(
            f"| {f[0]} | {f[1]:.0f} | {f[2]:.0f} | {f[2] / f[1]:.2f}× | {f[3]:.1f} | {f[4] / 1024:.0f} KiB |\n"
            for f in frames
        )
        + f"\nAims: a timeline page of the 50,000-message session within {FLAT_AIM}× of the 25,000-message one's "
        f"(the same 100 turns shown): {'met' if flat <= FLAT_AIM else 'MISSED'} ({flat:.2f}×; reading its 100 "
        f"frames alone takes {reads:.1f} ms, {rows[0][1][2] / reads:.1f}× less than the page); a frame page's first "
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
    command_line(__doc__, main)
