"""The XTDB front end (xtdb/src) prints EDN with a printer of its own, for speed: its text must be
the one Clojure's ``pr-str`` writes, byte for byte, so that an answer is what it always was.

xtdb_front_end_edn_check.clj prints random values of every type (and the answers of a real
in-memory node) both ways in one JVM, on the node's own classpath, and names the first that
differs.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import unavailable

pytestmark = pytest.mark.xtdb

ROOT = Path(__file__).resolve().parents[2]
CHECK = Path(__file__).with_name("xtdb_front_end_edn_check.clj")


@pytest.mark.parametrize("seed", [1, 2])
def test_front_end_prints_edn_as_pr_str_does(xtdb_url: str, seed: int) -> None:
    # xtdb_url: the node's start resolved the classpath (xtdb/.classpath) this check runs on
    classpath = ROOT / "xtdb" / ".classpath"
    java = shutil.which("java")
    if java is None or not classpath.is_file():
        unavailable("the XTDB node's classpath (xtdb/start resolves it)", f"java={java}, {classpath} missing")
    run = subprocess.run(
        [
            java,
            f"-Dlogback.configurationFile={ROOT / 'xtdb' / 'logback.xml'}",
            "-cp",
            f"{ROOT / 'xtdb' / 'src'}:{classpath.read_text().strip()}",
            "clojure.main",
            str(CHECK),
            str(seed),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = run.stdout.strip().splitlines()[-3:]
    assert run.returncode == 0 and last and last[-1].startswith("ok "), (run.stdout[-3000:], run.stderr[-3000:])
    assert int(last[-1].split()[1]) > 3000  # the random values and the node's answers were all printed
