"""Shared helpers: percentiles, RSS, and rewriting one section of docs/benchmarks.md."""

from __future__ import annotations

import os
import platform
import re
from datetime import UTC, datetime
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = (
    "# Benchmarks\n\n"
    "Every number here is written by a script in `bench/` (run `make bench`, or one module with\n"
    "`.venv/bin/python -m bench.<name>`). Each compares against a baseline measured in the same run,\n"
    "on the same machine; tests never assert times.\n"
)


def pct(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank) of ``values``."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, round(p / 100 * (len(s) - 1))))
    return s[k]


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


def write_section(title: str, body: str) -> None:
    """Replace (or append) the ``## title`` section of docs/benchmarks.md."""
    text = DOC.read_text() if DOC.exists() else HEADER
    stamp = f"_Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine()}._\n\n"
    section = f"## {title}\n\n{stamp}{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section + "\n", text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text.rstrip("\n") + "\n")
