"""The ``cluster`` fixture: a real two-node XTDB cluster over PostgreSQL, one per test module.

Under ``CI=true`` a cluster that cannot start fails the tests that need it; elsewhere they are
skipped with the reason."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests._xtdb_node import NodeUnavailable
from tests.cluster._cluster import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    try:
        c = Cluster(tmp_path_factory.mktemp("cluster"))
    except NodeUnavailable as e:  # pragma: no cover - depends on the machine
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL for the XTDB cluster could not start under CI=true: {e}")
        pytest.skip(f"PostgreSQL not available: {e}")
    try:
        try:
            c.start_node()
            c.start_node()
        except NodeUnavailable as e:  # pragma: no cover - depends on the machine
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"the XTDB cluster could not start under CI=true: {e}")
            pytest.skip(f"the XTDB cluster could not start: {e}")
        yield c
    finally:
        c.stop()
