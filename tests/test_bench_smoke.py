"""Every benchmark module that needs no XTDB node runs end to end in smoke mode
(``CTXOS_BENCH_SMOKE=1``: tiny sizes, numbers that mean nothing), writing its section into a
document of the test's own (``CTXOS_BENCH_DOC``): a change in the library that breaks a benchmark
shows here, not at the next ``make bench``. bench/stores.py, scale.py, session_ingest.py and
cluster.py start XTDB nodes and are left out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = ("core", "file_tracker", "harnesses", "mesh", "proxy", "recall", "redaction", "replay", "strategies", "ui")


def run(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``args`` run by this Python in the repository, with ``env`` over this process's environment
    (the smoke switch taken out of it: each test says its own)."""
    base = {k: v for k, v in os.environ.items() if k not in ("CTXOS_BENCH_SMOKE", "CTXOS_BENCH_DOC")}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=base | env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.parametrize("name", MODULES)
def test_a_benchmark_runs_end_to_end_in_smoke_mode(name: str, tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    done = run(["-m", f"bench.{name}"], {"CTXOS_BENCH_SMOKE": "1", "CTXOS_BENCH_DOC": str(doc)}, 300)
    said = (
        f"bench.{name} exited {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )
    # 0: its aims met, 1: one missed (smoke sizes miss some); an uncaught exception exits 1 too
    assert done.returncode in (0, 1), said
    assert "Traceback" not in done.stderr, said
    if any(line.startswith("bench: ") for line in done.stderr.splitlines()):
        return  # it left out data it could not read (../shared/data), and so wrote nothing
    assert doc.is_file(), said
    assert "\n## " in doc.read_text(), said


def test_sizes_are_full_unless_smoke_mode_is_on() -> None:
    code = "from bench._report import SMOKE, sized; print(SMOKE, sized(100, 1))"
    assert run(["-c", code], {}, 60).stdout.split() == ["False", "100"]
    assert run(["-c", code], {"CTXOS_BENCH_SMOKE": "1"}, 60).stdout.split() == ["True", "1"]
