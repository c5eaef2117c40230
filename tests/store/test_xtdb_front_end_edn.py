"""The XTDB front end (xtdb/src) prints EDN with a printer of its own and reads request bodies with
a reader of its own, for speed: its text must be the one Clojure's ``pr-str`` writes, byte for
byte, so that an answer is what it always was, and what it reads the value clojure.edn reads, of
the same classes, so that a document is stored (and hashed) as it always was.

xtdb_front_end_edn_check.clj prints random values of every type (and the answers of a real
in-memory node) both ways in one JVM, on the node's own classpath, reads each text with both
readers, and texts written for the reader's edges, and names the first that differs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._xtdb_node import NodeUnavailable, run_clojure
from tests.helpers import unavailable

pytestmark = pytest.mark.xtdb

CHECK = Path(__file__).with_name("xtdb_front_end_edn_check.clj")


@pytest.mark.parametrize("seed", [1, 2])
def test_front_end_prints_and_reads_edn_as_clojure_does(xtdb_url: str, seed: int) -> None:
    # xtdb_url: the node's start resolved the classpath this check runs on
    try:
        last = run_clojure(CHECK, str(seed))
    except NodeUnavailable as e:
        unavailable("the XTDB node's classpath", e)
    assert int(last[-1].split()[1]) > 3000  # the random values and the node's answers were all printed
