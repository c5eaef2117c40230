"""Run every benchmark module in turn (``python -m bench``): each measures its part and rewrites
its own section of docs/benchmarks.md. ``python -m bench.NAME --help`` says what one measures.
Exit status 1 if any module missed a target. With ``CTXOS_BENCH_SMOKE=1`` every module runs on tiny
sizes (a few seconds each, numbers that mean nothing: tests/test_bench_smoke.py runs them so, to
see that each still runs end to end). ``CTXOS_BENCH_DOC=PATH`` has the sections written into
``PATH`` instead of docs/benchmarks.md (and the strategies plot beside it)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

from ._report import command_line


def main() -> int:
    failed = []
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        print(f"== bench.{info.name}", flush=True)
        module = importlib.import_module(f"bench.{info.name}")
        if module.main() != 0:
            failed.append(info.name)
    if failed:
        print(f"targets missed in: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


command_line(__doc__, main)
