"""The ``cluster`` fixture: a real two-node XTDB cluster over PostgreSQL, one per test module; and
``postgres``: its PostgreSQL alone.

Under ``CI=true`` a cluster that cannot start fails the tests that need it; elsewhere they are
skipped with the reason. A test of the cluster that fails leaves the tails of the nodes' and
PostgreSQL's logs in its report (the nodes' logs go with them when they stop)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._xtdb_node import NodeUnavailable
from tests.cluster._cluster import Cluster
from tests.helpers import unavailable


def _postgres(root: Path) -> Cluster:
    try:
        return Cluster(root)
    except NodeUnavailable as e:  # pragma: no cover - depends on the machine
        unavailable("PostgreSQL for the XTDB cluster", e)


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """PostgreSQL alone, no node started (a test that runs nodes its own way)."""
    c = _postgres(tmp_path_factory.mktemp("postgres"))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = _postgres(tmp_path_factory.mktemp("cluster"))
    try:
        try:
            c.start_node()
            c.start_node()
        except NodeUnavailable as e:  # pragma: no cover - depends on the machine
            unavailable("the XTDB cluster", e)
        yield c
    finally:
        c.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"report_{report.when}", report)


@pytest.fixture(autouse=True)
def _logs_of_a_failed_test(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        for name in ("cluster", "postgres"):
            if name in request.fixturenames:
                sys.stderr.write(request.getfixturevalue(name).log_tails())
