"""The reliability report: counts that checks anywhere in the suite record, written once per run.

Registered as a plugin by ``tests/conftest.py``, so every test may take the session-scoped
``reliability`` fixture and ``add`` counts to a named check (``reliability.add("crash: sqlite",
kills=1)``): the reliability suite in ``tests/reliability/``, and the attack tests that live
beside their subjects (``reliability.add("attack: symlink swap (write)", attempts=400, ...)``).
At the end of the run the counts, the outcomes of the XTDB outage tests
(``tests/store/test_xtdb_outbox.py``, counted here rather than repeated) and the time each check took
are written as JSON to ``$CTXOS_RELIABILITY_REPORT``, else to
``.pytest_cache/d/reliability/report.json``, and printed in the terminal summary.
docs/reliability.md says what each count means. Counting never decides a test: the tests assert.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

REPORT_ENV = "CTXOS_RELIABILITY_REPORT"
SEED_ENV = "CTXOS_RELIABILITY_SEED"
OUTAGE_TESTS = "tests/store/test_xtdb_outbox.py"
SUITE = "tests/reliability/"
"""The reliability suite, whose tests' outcomes the report counts."""
TOTALS = ("kills", "inputs", "acknowledged_txs_checked", "versions_checked", "partial_txs", "data_lost")
"""Counts summed over all checks for the report's totals."""


class Counts:
    """Counts per check, summed over the tests that add to it. In a worker of a parallel run
    (pytest-xdist) what each test added is also counted ``unsent`` until its report carries it to
    the controller (``_Controller``), which sums every worker's into its own."""

    def __init__(self, seed: int, *, worker: bool = False) -> None:
        self.seed = seed
        self.checks: dict[str, dict[str, int]] = {}
        self.seconds: dict[str, float] = {}
        self.unsent = Counts(seed) if worker else None

    def add(self, check: str, **counts: int) -> None:
        row = self.checks.setdefault(check, {})
        for name, n in counts.items():
            row[name] = row.get(name, 0) + n
        if self.unsent is not None:
            self.unsent.add(check, **counts)

    def timed(self, check: str, started: float) -> None:
        self.took(check, time.monotonic() - started)

    def took(self, check: str, seconds: float) -> None:
        self.seconds[check] = round(self.seconds.get(check, 0.0) + seconds, 1)
        if self.unsent is not None:
            self.unsent.took(check, seconds)

    def take_unsent(self) -> dict[str, Any] | None:
        """What was counted since the last call, to send to the controller (None if nothing)."""
        if self.unsent is None or not (self.unsent.checks or self.unsent.seconds):
            return None
        sent = {"checks": self.unsent.checks, "seconds": self.unsent.seconds}
        self.unsent = Counts(self.seed)
        return sent

    def merge(self, sent: dict[str, Any]) -> None:
        """A worker's ``take_unsent``, summed into these counts (the controller's)."""
        for check, counts in sent["checks"].items():
            self.add(check, **counts)
        for check, seconds in sent["seconds"].items():
            self.took(check, seconds)


_COUNTS = pytest.StashKey[Counts]()


_PROPERTY = "reliability counts"
"""The name under which a worker's test report carries what the test added to the counts."""


class _Controller:
    """The plugin that sums, in the controller of a parallel run (or a serial run, whose reports
    carry nothing), what the workers' test reports carry."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            for name, value in report.user_properties:
                if name == _PROPERTY:
                    self.counts.merge(value)


def pytest_configure(config: pytest.Config) -> None:
    env = os.environ.get(SEED_ENV, "").strip()
    seed = int(env) if env else random.SystemRandom().randrange(2**32)
    worker = hasattr(config, "workerinput")
    config.stash[_COUNTS] = Counts(seed, worker=worker)
    if not worker:  # the workers of a parallel run, started after this, take the same seed
        os.environ[SEED_ENV] = str(seed)
        config.pluginmanager.register(_Controller(config.stash[_COUNTS]), "reliability-controller")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    if call.when == "teardown":  # after the test's own fixtures, which may add too, are torn down
        sent = item.config.stash[_COUNTS].take_unsent()
        if sent is not None:
            outcome.get_result().user_properties.append((_PROPERTY, sent))


@pytest.fixture(scope="session")
def reliability(pytestconfig: pytest.Config) -> Counts:
    return pytestconfig.stash[_COUNTS]


@pytest.fixture
def seed(reliability: Counts, request: pytest.FixtureRequest) -> Iterator[int]:
    """The run's seed (``$CTXOS_RELIABILITY_SEED``, else random), printed so a failure can be rerun."""
    print(f"\n{request.node.nodeid}: {SEED_ENV}={reliability.seed}")
    yield reliability.seed


def _outcomes(stats: dict[str, list[Any]], prefix: str) -> dict[str, int]:
    """Tests under ``prefix`` by outcome, as the terminal summary counts them."""
    out: dict[str, int] = {}
    for category in ("passed", "failed", "skipped", "error"):
        n = sum(1 for r in stats.get(category, []) if getattr(r, "nodeid", "").startswith(prefix))
        if n:
            out[category] = n
    return out


def _report(config: pytest.Config, stats: dict[str, list[Any]]) -> dict[str, Any] | None:
    counts = config.stash.get(_COUNTS, None)
    outage = _outcomes(stats, OUTAGE_TESTS)
    if counts is None or not (counts.checks or outage):
        return None
    totals = {
        name: sum(row.get(name, 0) for row in counts.checks.values())
        for name in TOTALS
        if any(name in row for row in counts.checks.values())
    }
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seed": counts.seed,
        "checks": counts.checks,
        "seconds": counts.seconds,
        "totals": totals,
        "outcomes": _outcomes(stats, SUITE),
        "xtdb_outage_tests": outage,
        "data_lost": totals.get("data_lost", 0),
    }


def _report_path(config: pytest.Config) -> Path | None:
    env = os.environ.get(REPORT_ENV, "").strip()
    if env:
        return Path(env)
    cache = getattr(config, "cache", None)
    return None if cache is None else Path(cache.mkdir("reliability")) / "report.json"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    report = _report(config, terminalreporter.stats)
    if report is None:
        return
    path = _report_path(config)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    tr = terminalreporter
    tr.write_sep("-", f"reliability report (seed {report['seed']})")
    for check, row in sorted(report["checks"].items()):
        secs = report["seconds"].get(check)
        took = f" [{secs:.1f} s]" if secs is not None else ""
        tr.write_line(f"{check}{took}: " + ", ".join(f"{k}={v}" for k, v in sorted(row.items())))
    if report["xtdb_outage_tests"]:
        tr.write_line(f"xtdb outage ({OUTAGE_TESTS}): {report['xtdb_outage_tests']}")
    if report["totals"]:
        tr.write_line("totals: " + ", ".join(f"{k}={v}" for k, v in report["totals"].items()))
    tr.write_line(f"data lost: {report['data_lost']}" + (f"; written to {path}" if path else ""))
