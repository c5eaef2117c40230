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
    (pytest-xdist) what each test added is also kept ``unsent`` until its report carries it to
    the controller, which sums every worker's into its own."""

    def __init__(self, seed: int, *, worker: bool = False) -> None:
        self.seed = seed
        self.checks: dict[str, dict[str, int]] = {}
        self.seconds: dict[str, float] = {}
        self.unsent: dict[str, Any] | None = {"checks": {}, "seconds": {}} if worker else None

    def add(self, check: str, **counts: int) -> None:
        _add(self.checks, check, counts)
        if self.unsent is not None:
            _add(self.unsent["checks"], check, counts)

    def timed(self, check: str, started: float) -> None:
        took = time.monotonic() - started
        self.seconds[check] = round(self.seconds.get(check, 0.0) + took, 1)
        if self.unsent is not None:
            self.unsent["seconds"][check] = self.unsent["seconds"].get(check, 0.0) + took

    def take_unsent(self) -> dict[str, Any] | None:
        """What was added since the last call (None if nothing), to send to the controller."""
        if self.unsent is None or not (self.unsent["checks"] or self.unsent["seconds"]):
            return None
        sent, self.unsent = self.unsent, {"checks": {}, "seconds": {}}
        return sent

    def merge(self, sent: dict[str, Any]) -> None:
        """A worker's ``take_unsent``, summed into these counts (the controller's)."""
        for check, counts in sent["checks"].items():
            _add(self.checks, check, counts)
        for check, took in sent["seconds"].items():
            self.seconds[check] = round(self.seconds.get(check, 0.0) + took, 1)


def _add(checks: dict[str, dict[str, int]], check: str, counts: dict[str, int]) -> None:
    row = checks.setdefault(check, {})
    for name, n in counts.items():
        row[name] = row.get(name, 0) + n


_COUNTS = pytest.StashKey[Counts]()


_PROPERTY = "reliability counts"
"""The name under which a worker's test report carries what the test added to the counts."""


def pytest_configure(config: pytest.Config) -> None:
    env = os.environ.get(SEED_ENV, "").strip()
    seed = int(env) if env else random.SystemRandom().randrange(2**32)
    worker = hasattr(config, "workerinput")
    if not worker:  # the workers of a parallel run, started after this, take the same seed
        os.environ[SEED_ENV] = str(seed)
    config.stash[_COUNTS] = Counts(seed, worker=worker)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    if call.when == "teardown":  # after the test's own fixtures, which may add too, are torn down
        sent = item.config.stash[_COUNTS].take_unsent()
        if sent is not None:
            outcome.get_result().user_properties.append((_PROPERTY, sent))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """In the controller of a parallel run: a worker's test report, with what the test added."""
    config = _CONTROLLER.get("config")
    if config is None or report.when != "teardown":
        return
    for name, value in report.user_properties:
        if name == _PROPERTY:
            config.stash[_COUNTS].merge(value)


_CONTROLLER: dict[str, pytest.Config] = {}
"""The run's config where reports of workers arrive (not in a worker, nor in a serial run)."""


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        _CONTROLLER["config"] = config


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
