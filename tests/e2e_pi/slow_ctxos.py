"""A ``CTXOS_CMD`` for the Pi tests: the real ``ctxos`` (this venv's), with the answer to the
``CTXOS_SLOW_WHICH``-th ``context.transform`` (default 2) held ``CTXOS_SLOW_HOLD`` seconds (default
20): a slow store or a slow assembly, as Pi sees it. Run as ``python slow_ctxos.py ARGS...``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HOLD_S = float(os.environ.get("CTXOS_SLOW_HOLD", "20"))
WHICH = int(os.environ.get("CTXOS_SLOW_WHICH", "2"))


def main() -> int:
    real = subprocess.Popen(
        [str(Path(sys.executable).parent / "ctxos"), *sys.argv[1:]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert real.stdin is not None and real.stdout is not None
    held: set[object] = set()
    transforms = 0

    def requests() -> None:
        nonlocal transforms
        assert real.stdin is not None
        for line in sys.stdin:
            request = json.loads(line)
            if request.get("method") == "context.transform":
                transforms += 1
                if transforms == WHICH:
                    held.add(request.get("id"))
            real.stdin.write(line)
            real.stdin.flush()
        real.stdin.close()

    threading.Thread(target=requests, daemon=True).start()
    for line in real.stdout:
        if json.loads(line).get("id") in held:
            time.sleep(HOLD_S)
        sys.stdout.write(line)
        sys.stdout.flush()
    return real.wait()


if __name__ == "__main__":
    sys.exit(main())
