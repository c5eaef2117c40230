"""The test suite's own behaviour: a run stopped with SIGTERM still tears its fixtures down (the
XTDB nodes and PostgreSQL servers they start would otherwise stay running)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from contextlib import suppress
from pathlib import Path

import pytest

from tests import _signals
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("workers", [0, 2], ids=["serial", "two-workers"])
def test_sigterm_ends_a_run_as_ctrl_c_does_tearing_its_fixtures_down(tmp_path: Path, workers: int) -> None:
    """In a parallel run (``make test``'s) each worker tears its own fixtures down: the controller
    hands SIGTERM on to them."""
    (tmp_path / "test_long.py").write_text(
        textwrap.dedent(
            """
            import os
            import time
            from pathlib import Path

            import pytest

            HERE = Path(__file__).parent
            WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")


            @pytest.fixture(scope="session")
            def server():
                # as a fixture that starts a node stops it: interrupted before its yield too
                try:
                    (HERE / f"started-{WORKER}").touch()
                    yield
                finally:
                    (HERE / f"stopped-{WORKER}").touch()  # where a fixture stops its XTDB node


            def test_long(server):
                time.sleep(120)


            def test_longer(server):
                time.sleep(120)
            """
        )
    )
    run = _pytest(tmp_path, workers)
    try:
        wait_for(lambda: len(list(tmp_path.glob("started-*"))) == max(workers, 1), timeout=60)
        run.send_signal(signal.SIGTERM)
    except BaseException:
        _end(run)
        raise
    _assert_interrupted(tmp_path, run, _to_its_end(run, tmp_path))


def test_sigterm_handled_in_a_finalizer_still_ends_the_run(tmp_path: Path) -> None:
    """Python handles a signal where the main thread is: in a weakref's callback (as the import
    system's module locks have) or a ``__del__`` too, where a KeyboardInterrupt raised is printed
    and dropped. A CI's SIGTERM handled there was lost: the run went on (a run of 2026-12-05 slept
    out the rest of its test)."""
    (tmp_path / "test_long.py").write_text(
        textwrap.dedent(
            """
            import signal
            import time
            import weakref
            from pathlib import Path

            import pytest

            from tests import _signals

            HERE = Path(__file__).parent


            @pytest.fixture
            def server():
                try:
                    (HERE / "started-main").touch()
                    yield
                finally:
                    (HERE / "stopped-main").touch()


            class Lock:
                pass


            def test_long(server):
                (HERE / "signals").write_text(_signals.said())  # (said when it fails)
                lock = Lock()
                ref = weakref.ref(lock, lambda ref: signal.raise_signal(signal.SIGTERM))
                del lock  # its callback is where the signal is handled
                time.sleep(120)
            """
        )
    )
    run, out = _serial_run_to_its_end(tmp_path)
    _assert_interrupted(tmp_path, run, out)
    assert b"Exception ignored" not in out


def test_sigterm_before_pytest_notes_a_fixture_s_teardown_still_tears_it_down(tmp_path: Path) -> None:
    """A fixture's ``yield`` done and its teardown not yet noted by pytest (a few of the steps of
    a fixture's setup): interrupted there, pytest tears down what it has noted only, and the
    fixture's generator was left as it stood (a node it started, running on)."""
    (tmp_path / "test_long.py").write_text(
        textwrap.dedent(
            """
            import signal
            import sys
            import time
            from pathlib import Path

            import pytest

            HERE = Path(__file__).parent


            def interrupt_as_pytest_notes_a_teardown(frame, event, arg):
                # (on the session: the fixture's generator is noted on its definition before that)
                noting = event == "call" and frame.f_code.co_name == "addfinalizer"
                if noting and isinstance(frame.f_locals.get("self"), pytest.Session):
                    sys.settrace(None)
                    (HERE / "interrupted").touch()
                    signal.raise_signal(signal.SIGTERM)
                return None


            @pytest.fixture(scope="session")
            def server():
                try:
                    (HERE / "started-main").touch()
                    sys.settrace(interrupt_as_pytest_notes_a_teardown)
                    yield
                finally:
                    (HERE / "stopped-main").touch()


            def test_long(server):
                time.sleep(120)
            """
        )
    )
    run, out = _serial_run_to_its_end(tmp_path)
    assert (tmp_path / "interrupted").exists(), out.decode()
    _assert_interrupted(tmp_path, run, out)


def _serial_run_to_its_end(tests: Path) -> tuple[subprocess.Popen[bytes], bytes]:
    run = _pytest(tests, 0)
    return run, _to_its_end(run, tests)


def _to_its_end(run: subprocess.Popen[bytes], tests: Path) -> bytes:
    """What ``run`` printed once it ended; failed, with it, when it did not in 60 s."""
    try:
        out, _ = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        out = _end(run)
        said = (tests / "signals").read_text() if (tests / "signals").exists() else ""
        here = _signals.said()
        pytest.fail(f"the run was not over in 60 s ({said or 'its signals unknown'}; here {here}):\n{out.decode()}")
    return out


def _end(run: subprocess.Popen[bytes]) -> bytes:
    """``run`` and its workers killed (their own process group), and what it printed: nothing of
    it left running, nor its pipe open, for a later test to be warned of."""
    with suppress(ProcessLookupError):
        os.killpg(run.pid, signal.SIGKILL)
    return run.communicate()[0]


def _pytest(tests: Path, workers: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider"),
            *(("-n", str(workers)) if workers else ("-p", "no:xdist")),
            str(tests),
        ],
        cwd=tests,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # started as a CI runner starts it, in the background of a script: SIGINT ignored (the
        # controller's own interrupt of its workers is a SIGINT, so it tore nothing down there)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        start_new_session=True,  # (its workers in its process group: ``_end`` ends them all)
    )


def _assert_interrupted(tests: Path, run: subprocess.Popen[bytes], out: bytes) -> None:
    started = sorted(p.name.removeprefix("started-") for p in tests.glob("started-*"))
    assert started and sorted(p.name.removeprefix("stopped-") for p in tests.glob("stopped-*")) == started, out.decode()
    assert run.returncode == 2 and (b"KeyboardInterrupt" in out or b"keyboard-interrupt" in out)  # interrupted


def test_the_suite_s_own_ports_are_none_the_system_gives_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nodes and PostgreSQLs the tests start took a port the system gives (or one of the
    ``CTXOS_TEST_PORTS`` of a run, 46000-46999 here): within the ephemeral ports, of which an
    outgoing connection can take one between the check that it is free and the node's bind (a
    cluster's first node: "Address already in use"). Without ``CTXOS_TEST_PORTS`` they now come
    from a range the system does not give out, where it has one to tell."""
    from tests import _xtdb_node as nodes

    monkeypatch.delenv("CTXOS_TEST_PORTS", raising=False)
    if not nodes.EPHEMERAL.exists():
        pytest.skip("the system says no ephemeral port range (not Linux): its own ports are taken")
    first, last = (int(n) for n in nodes.EPHEMERAL.read_text().split())
    port = nodes._free_ports(3)
    lo, hi = (int(n) for n in nodes.DEFAULT_PORTS.split("-"))
    assert all(lo <= p <= hi and not first <= p <= last for p in range(port, port + 3))
    # a system whose ephemeral ports cover that range: the ports it gives, as before
    covering = tmp_path / "ip_local_port_range"
    covering.write_text(f"{lo - 1}\t{hi + 1}\n")
    monkeypatch.setattr(nodes, "EPHEMERAL", covering)
    assert nodes._port_span() == ""
    monkeypatch.setenv("CTXOS_TEST_PORTS", "41000-41999")
    assert nodes._port_span() == "41000-41999" and 41000 <= nodes._free_ports(2) <= 41998
