"""Shared fixtures.

* Every test gets its own user data dir and no ``CTXOS_STORE`` (autouse), so nothing touches
  the developer's real store.
* ``store`` is parametrised over every backend: the conformance suite runs unchanged on the
  embedded SQLite store and on a real XTDB node. The XTDB node is shared by the whole run, so
  tests that use ``store`` must use ids from the ``uid`` fixture (unique per test).
* Under ``CI=true`` an XTDB node that cannot start fails the tests that need it; elsewhere they
  are skipped with the reason.
* Every document a session hands the SQLite store with its JSON already encoded (``Put.json``)
  is checked against the store's own encoding of it (autouse).
* ``reliability`` (from ``tests/_reliability.py``) counts what a test tried and what came of it,
  for the run's reliability report (docs/reliability.md).
* SIGTERM (a CI's time limit, ``kill``) ends the run as Ctrl-C does: fixtures are torn down, so
  the XTDB nodes and PostgreSQL servers they started are stopped, not left running. That holds
  where Python itself drops the interrupt (handled in a finalizer) and where pytest would leave a
  fixture out of its teardown (interrupted as it notes it).
* The OpenAI Agents SDK's tracing is off: a run would export its traces to OpenAI at exit.
"""

from __future__ import annotations

import ctypes
import gc
import inspect
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from context_os.cli._common import interrupt, interrupted, keep_interrupts
from context_os.store import Store
from context_os.store import sqlite as sqlite_store
from tests import _signals

pytest_plugins = ["tests._reliability"]

os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if threading.current_thread() is threading.main_thread():
        parallel = not hasattr(config, "workerinput") and config.getoption("numprocesses", None)
        signal.signal(signal.SIGTERM, _to_workers if parallel else _interrupted)
        keep_interrupts()  # (after pytest's own unraisable hook, which gets the rest)
        _signals.record_calls()
        _SIGNALS["state"] = _signals.state()  # (what the collection and the first test's fixtures find)


LONGEST_FIRST = (
    "tests/cluster/test_cluster.py",
    "tests/store/test_text_search_model.py",
    "tests/mesh/test_peers.py",
    "tests/cli/test_xtdb.py",
    "tests/e2e_pi/test_pi_e2e.py",
    "tests/adk/test_beside_adk.py",
    "tests/proxy/test_proxy.py",
    "tests/cli/test_cli.py",
    "tests/store/test_xtdb_start.py",
    "tests/e2e_opencode/test_opencode_e2e.py",
    "tests/ui/test_http.py",
    "tests/test_bench_smoke.py",
)
"""The test files that take longest (45 s to 3.5 minutes each in the clean-clone run of
2026-12-07 evening: the run's "slowest test files"), run first: a parallel run hands a worker a
file at a time, and a long file handed out last is run alone at the end while the other worker
waits. Only the order changes: a file missing here runs in its place."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))  # (stable)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The files that took longest (setup, call and teardown of their tests) and each worker's
    busy time: what ``LONGEST_FIRST`` is kept by, and how evenly a parallel run shared its work."""
    by_file: dict[str, float] = {}
    by_worker: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            name = report.nodeid.partition("::")[0]
            by_file[name] = by_file.get(name, 0.0) + report.duration
            worker = getattr(getattr(report, "node", None), "gateway", None)
            if worker is not None:
                by_worker[worker.id] = by_worker.get(worker.id, 0.0) + report.duration
    if not by_file:
        return
    terminalreporter.write_sep("=", "slowest test files")
    for name, secs in sorted(by_file.items(), key=lambda kv: -kv[1])[:15]:
        terminalreporter.write_line(f"{secs:8.1f}s {name}")
    if by_worker:
        busy = ", ".join(f"{worker} {secs:.0f}s" for worker, secs in sorted(by_worker.items()))
        terminalreporter.write_line(f"busy time by worker: {busy}")


def _interrupted(signum: int, frame: FrameType | None) -> None:
    if interrupted():  # a second one (a process group's, after the controller's): the teardown goes on
        return
    interrupt(signum, frame)


@pytest.hookimpl(trylast=True)  # after pytest's teardown of every fixture it knows to tear down
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """An interrupt (SIGTERM as Ctrl-C) between a fixture's ``yield`` and pytest's note of its
    teardown leaves the fixture's generator unfinished and unknown to the teardown: a node it
    started runs on after the run. Each such generator is closed here, which runs its
    ``finally``. (In a run that was not interrupted none is left.)"""
    if exitstatus != pytest.ExitCode.INTERRUPTED:
        return
    for left in [o for o in gc.get_objects() if inspect.isgenerator(o) and o.gi_code in _FIXTURES_SET_UP]:
        if left.gi_suspended:
            left.close()


_FIXTURES_SET_UP: set[object] = set()
"""The code of every fixture function this run has set up."""


def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> None:
    _FIXTURES_SET_UP.add(getattr(inspect.unwrap(fixturedef.func), "__code__", None))


def _to_workers(signum: int, frame: FrameType | None) -> None:
    """SIGTERM in the controller of a parallel run (pytest-xdist): handed to each worker, which
    ends as above, its fixtures torn down, and the run ends interrupted. (Interrupted itself, the
    controller would end its workers without their teardown: every node they started left
    running.) Where a process's children cannot be listed, the controller is interrupted."""
    try:
        tasks = Path("/proc/self/task").iterdir()
        workers = [int(pid) for task in tasks for pid in (task / "children").read_text().split()]
    except OSError:
        _interrupted(signum, frame)
        return
    for pid in workers:
        with suppress(ProcessLookupError):
            _to_main_thread(pid, signal.SIGTERM)


def _to_main_thread(pid: int, signum: int) -> None:
    """``signum`` sent to the main thread of process ``pid`` (Linux's ``tgkill``; elsewhere to the
    process). Sent to the process, the kernel may hand it to another thread (a worker's execnet
    threads: it does when the main thread already has a signal pending), whose Python handler then
    waits for the main thread's wait to end: a worker asleep in a test slept it out (a CI run's
    inner run outlived its 60 s so, 2026-12-06)."""
    tgkill = getattr(_LIBC, "tgkill", None)
    if tgkill is None or tgkill(pid, pid, signum) != 0:
        os.kill(pid, signum)


_LIBC = ctypes.CDLL(None, use_errno=True)


_SIGNALS: dict[str, Any] = {}
"""The signal state this process had once configured (``_signals_left_as_found``), and the last
test that found it unchanged."""


@pytest.fixture(autouse=True)
def _signals_left_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test leaves the worker's signals as it found them: blocked or ignored there, a signal is
    blocked or ignored in every process the tests after it start (a run of 2026-12-06 lost a
    SIGINT and a SIGTERM so, in two tests of one worker, each in a process of its own). A change
    made between two tests (a fixture of a wider scope) fails the test after it, naming both."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = _signals.state()
    first = _SIGNALS["state"]
    if before != first:
        _signals.restore(first)
        pytest.fail(
            f"the signals of this process changed after {_SIGNALS.get('last') or 'the run was configured'} (by a"
            f" fixture of a wider scope, the collection, or between the tests): {first} -> {before}; {_signals.calls()}"
        )
    yield
    after = _signals.state()
    _SIGNALS["last"] = request.node.nodeid
    if after != before:
        _signals.restore(before)  # (the tests after it run as they would have)
        pytest.fail(f"the test left the signals of this process changed: {before} -> {after}; {_signals.calls()}")


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.delenv("CTXOS_STORE", raising=False)


@pytest.fixture(autouse=True)
def _check_encoded_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "_CHECK_ENCODED", True)


@pytest.fixture(scope="session")
def xtdb_sidecar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One keyword-index sidecar for the XTDB stores of the run, as a user's persists from one
    session to the next: each store catches up on what was written since the one before. (A fresh
    sidecar per test caught up on the shared node's whole history, which grows with the run: the
    last tests searching on XTDB took 6-7 s each, 0.2-0.4 s alone.)"""
    return tmp_path_factory.mktemp("xtdb-sidecar") / "text-index.db"


@pytest.fixture
def uid() -> str:
    """A prefix unique to this test, for ids in stores shared across tests."""
    return uuid.uuid4().hex[:12]


@pytest.fixture(scope="session")
def xtdb_url() -> Iterator[str]:
    """URL of a real XTDB 1.x node: $XTDB_URL, else testcontainers, else xtdb/start script."""
    from tests._xtdb_node import NodeUnavailable, node
    from tests.helpers import unavailable

    try:
        with node() as url:
            yield url
    except NodeUnavailable as e:  # pragma: no cover - depends on the machine
        unavailable("an XTDB node", e)


@pytest.fixture(params=["sqlite", pytest.param("xtdb", marks=pytest.mark.xtdb)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A fresh-enough store of each backend (SQLite: a new file; XTDB: the shared node)."""
    s: Store
    if request.param == "sqlite":
        from context_os.store.sqlite import SqliteStore

        s = SqliteStore(tmp_path / "store.db")
    else:
        from context_os.store.xtdb import XtdbStore

        s = XtdbStore(request.getfixturevalue("xtdb_url"), text_index_path=request.getfixturevalue("xtdb_sidecar"))
    try:
        yield s
    finally:
        s.close()
