"""The test suite's own behaviour: a run stopped with SIGTERM still tears its fixtures down (the
XTDB nodes and PostgreSQL servers they start would otherwise stay running)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider"),
            *(("-n", str(workers)) if workers else ("-p", "no:xdist")),
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # started as a CI runner starts it, in the background of a script: SIGINT ignored (the
        # controller's own interrupt of its workers is a SIGINT, so it tore nothing down there)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        wait_for(lambda: len(list(tmp_path.glob("started-*"))) == max(workers, 1), timeout=60)
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=60)
    finally:
        run.kill()
    started = sorted(p.name.removeprefix("started-") for p in tmp_path.glob("started-*"))
    assert sorted(p.name.removeprefix("stopped-") for p in tmp_path.glob("stopped-*")) == started, out.decode()
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
