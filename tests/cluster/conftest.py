"""The ``cluster`` fixture: a real two-node XTDB cluster over PostgreSQL, one per test module.

Under ``CI=true`` a cluster that cannot start fails the tests that need it; elsewhere they are
skipped with the reason."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._xtdb_node import NodeUnavailable
from tests.cluster._cluster import Cluster
from tests.helpers import unavailable


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    try:
        c = Cluster(tmp_path_factory.mktemp("cluster"))
    except NodeUnavailable as e:  # pragma: no cover - depends on the machine
        unavailable("PostgreSQL for the XTDB cluster", e)
    try:
        try:
            c.start_node()
            c.start_node()
        except NodeUnavailable as e:  # pragma: no cover - depends on the machine
            unavailable("the XTDB cluster", e)
        yield c
    finally:
        c.stop()
