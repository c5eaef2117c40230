"""The test suite's own behaviour: a run stopped with SIGTERM still tears its fixtures down (the
XTDB nodes and PostgreSQL servers they start would otherwise stay running)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parent.parent


def test_sigterm_ends_a_run_as_ctrl_c_does_tearing_its_fixtures_down(tmp_path: Path) -> None:
    (tmp_path / "test_long.py").write_text(
        textwrap.dedent(
            """
            import time
            from pathlib import Path

            import pytest

            HERE = Path(__file__).parent


            @pytest.fixture(scope="session")
            def server():
                (HERE / "started").touch()
                yield
                (HERE / "stopped").touch()  # where a fixture stops its XTDB node


            def test_long(server):
                time.sleep(120)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: (tmp_path / "started").exists(), timeout=60)
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=60)
    finally:
        run.kill()
    assert (tmp_path / "stopped").exists(), out.decode()
    assert run.returncode == 2 and b"KeyboardInterrupt" in out  # pytest's "interrupted"
