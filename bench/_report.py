"""Shared helpers: percentiles, RSS, and rewriting one section of docs/benchmarks.md."""

from __future__ import annotations

import atexit
import json
import os
import platform
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")

SMOKE: bool = os.environ.get("CTXOS_BENCH_SMOKE") == "1"
"""Smoke mode (``CTXOS_BENCH_SMOKE=1``): every module runs its every part on tiny sizes (``sized``),
in seconds, so that a test can see it still runs end to end; its numbers mean nothing."""
DOC = Path(os.environ.get("CTXOS_BENCH_DOC") or Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md")
"""The file whose sections the modules rewrite: docs/benchmarks.md, or ``$CTXOS_BENCH_DOC``."""
DATA = Path(os.environ.get("CTXOS_BENCH_DATA") or Path(__file__).resolve().parent.parent.parent / "shared" / "data")
"""The real data the benchmarks read from beside the repository and never copy (the real Pi session,
LoCoMo): ``../shared/data``, or ``$CTXOS_BENCH_DATA``."""
LEFT_OUT: list[str] = []
"""What this run could not read: a run that left something out rewrites no section of DOC."""
HEADER = (
    "# Benchmarks\n\n"
    "Every number here is written by a script in `bench/` (run `make bench`, or one module with\n"
    "`.venv/bin/python -m bench.<name>`; `--help` says what one measures). Each compares against a baseline measured in the same run,\n"
    "on the same machine; tests never assert times. The real Pi session and LoCoMo are read from\n"
    "`../shared/data` beside the repository (or `$CTXOS_BENCH_DATA`); a run that cannot read them\n"
    "prints what it measured and leaves this file as it is.\n"
)


def sized(full: T, smoke: T) -> T:
    """``smoke`` in smoke mode (``SMOKE``), else ``full``: a benchmark's size, its message count or
    its rounds."""
    return smoke if SMOKE else full


def head(path: Path, lines: int | None) -> Path:
    """``path``, or with ``lines`` a copy of its first ``lines`` lines under the same name in a
    temporary directory removed at exit (a slice of a real session for a smoke run); ``path`` too
    when it is not there (the caller says what it leaves out)."""
    if lines is None or not path.is_file():
        return path
    folder = Path(tempfile.mkdtemp(prefix="ctxos-bench-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    with path.open(encoding="utf-8") as f:
        text = "".join(line for _, line in zip(range(lines), f, strict=False))
    (folder / path.name).write_text(text, encoding="utf-8")
    return folder / path.name


def command_line(doc: str | None, main: Callable[[], int], argv: list[str] | None = None) -> NoReturn:
    """A benchmark module's command line (``python -m bench.NAME``): ``-h``/``--help`` prints its
    docstring (what it measures and which section of docs/benchmarks.md it rewrites) and runs
    nothing; any other argument is refused (exit 2: a run takes none); else it runs, exit
    ``main()``'s status."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["-h"], ["--help"]):
        print((doc or "").strip())
        sys.exit(0)
    if args:
        print(f"bench: takes no arguments, got {' '.join(args)} (--help says what it measures)", file=sys.stderr)
        sys.exit(2)
    sys.exit(main())


def pct(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank) of ``values``."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, round(p / 100 * (len(s) - 1))))
    return s[k]


def against(
    value: float, bar: float, *, under: bool = False, digits: int = 3, percent: bool = False
) -> tuple[str, str]:
    """``value`` and ``bar`` written to ``digits`` decimals (of a percentage, with ``percent``), or
    to as many more as it takes for a value on the wrong side of the bar not to read as equal to it
    (0.8998 against 0.9000, not 0.900 against 0.900). The aim is met at or over the bar, or at or
    under it with ``under``."""
    scale = 100 if percent else 1
    missed = value > bar + 1e-9 if under else value < bar - 1e-9
    for d in range(digits, digits + 4):
        shown, limit = f"{value * scale:.{d}f}", f"{bar * scale:.{d}f}"
        if not missed or shown != limit:
            break
    return (f"{shown}%", f"{limit}%") if percent else (shown, limit)


def rss_mb() -> float:
    """Resident set size of this process in MB, from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def machine() -> str:
    return (
        f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores, {platform.machine()}"
    )


def left_out(what: str) -> None:
    """Say on stderr that this run leaves ``what`` out (an input it cannot read): its sections are
    then printed as usual, and docs/benchmarks.md is left as it is (``write_section``)."""
    LEFT_OUT.append(what)
    print(f"bench: {what} (put the data at {DATA}, or set CTXOS_BENCH_DATA)", file=sys.stderr)


def write_section(title: str, body: str) -> None:
    """Replace (or append) the ``## title`` section of docs/benchmarks.md (``DOC``); not when this run left
    an input out (the section would lose what the docs quote from it)."""
    if LEFT_OUT:
        print(
            f"bench: docs/benchmarks.md not rewritten, its '## {title}' kept: this run left out " + "; ".join(LEFT_OUT),
            file=sys.stderr,
        )
        return
    text = DOC.read_text() if DOC.exists() else HEADER
    stamp = f"_Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine()}._\n\n"
    section = f"## {title}\n\n{stamp}{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section + "\n", text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text.rstrip("\n") + "\n")


def floor_rates(batches: list[list[dict[str, Any]]]) -> dict[str, float]:
    """Messages per second of two things every ingest must do, alone, over the same messages: the
    default redaction of every text a message carries (its content and its tool calls'
    arguments), and the blake3 hash of its canonical JSON (the harness's prefix check). What
    they cost bounds how close any ingest that does them can come to the bare loop."""
    from context_os.hashing import hash_value
    from context_os.redact import Redactor

    redact = Redactor().redact
    msgs = [m for batch in batches for m in batch]
    texts = [t for m in msgs for t in _texts(m)]
    t0 = time.perf_counter()
    for t in texts:
        redact(t)
    redaction = time.perf_counter() - t0
    t0 = time.perf_counter()
    for m in msgs:
        hash_value(m)
    hashing = time.perf_counter() - t0
    return {"redact_rate": len(msgs) / redaction, "hash_rate": len(msgs) / hashing}


def _texts(m: dict[str, Any]) -> list[str]:
    out = [m["content"]] if isinstance(m.get("content"), str) else []
    return out + [c["function"]["arguments"] for c in m.get("tool_calls") or ()]


def bare_sqlite_rate(path: Path, batches: list[list[dict[str, Any]]]) -> float:
    """Messages per second of the baseline ingest: the same messages as JSON rows in a bare SQLite
    table (WAL, synchronous=NORMAL, as the embedded store), one transaction per batch."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, session TEXT, doc TEXT)")
    t0 = time.perf_counter()
    for batch in batches:
        with conn:
            conn.executemany("INSERT INTO m (session, doc) VALUES (?, ?)", [("s", json.dumps(m)) for m in batch])
    rate = sum(len(b) for b in batches) / (time.perf_counter() - t0)
    conn.close()
    return rate
