"""A real XTDB cluster for the tests: a local PostgreSQL (``xtdb/postgres``) holding the shared
transaction log and documents, and nodes (``xtdb/start --config xtdb/config/cluster.edn``), each
with its own RocksDB index, on free ports under a temporary directory. Nodes can be killed,
restarted and added; everything is stopped at the end."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests._xtdb_node import STARTUP_TIMEOUT_S, NodeUnavailable, _answers, _free_port

ROOT = Path(__file__).resolve().parents[2]
XTDB = ROOT / "xtdb"


def _run(*cmd: str, timeout: float) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NodeUnavailable(f"{' '.join(cmd)}: {e}") from e
    if done.returncode != 0:
        raise NodeUnavailable(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


class Cluster:
    """PostgreSQL and XTDB nodes sharing it."""

    def __init__(self, root: Path):
        self.root = root
        self.pg_port = _free_port()
        self.ports: list[int] = []
        # the database under xtdb/target (its default): as root it runs as the postgres user, who
        # cannot enter pytest's private temporary directories
        self.pg_data = XTDB / "target" / f"pg-{self.pg_port}"
        _run(str(XTDB / "postgres"), "start", "--port", str(self.pg_port), timeout=600)

    def start_node(self, port: int | None = None, config: Path | None = None) -> str:
        """Start a node (a new one on a free port, or the one that had ``port``; ``config``: a
        node configuration other than ``xtdb/config/cluster.edn``); its URL."""
        port = port or _free_port()
        url = _run(
            str(XTDB / "start"),
            "--port", str(port),
            "--config", str(config or XTDB / "config" / "cluster.edn"),
            "--pg-port", str(self.pg_port),
            "--data-dir", str(self.root / f"node-{port}"),
            "--timeout", str(STARTUP_TIMEOUT_S),
            timeout=STARTUP_TIMEOUT_S + 240,
        )  # fmt: skip
        if port not in self.ports:
            self.ports.append(port)
        return url.splitlines()[-1]

    def log_tails(self, lines: int = 80) -> str:
        """The last lines of each node's log and of PostgreSQL's (what a failed test leaves for
        the reader: ``xtdb/stop`` removes a node's log with it)."""
        logs = [XTDB / "target" / f"xtdb-{port}.log" for port in self.ports] + [self.pg_data / "server.log"]
        out = []
        for log in logs:
            try:
                tail = log.read_text(errors="replace").splitlines()[-lines:]
            except OSError as e:
                tail = [f"(cannot be read: {e})"]
            out.append(f"--- last {lines} lines of {log}\n" + "\n".join(tail))
        return "\n".join(out) + "\n"

    def stop_node(self, port: int) -> None:
        """Stop a node for good (it leaves ``ports``)."""
        subprocess.run([str(XTDB / "stop"), "--port", str(port)], check=False, timeout=90)
        self.ports.remove(port)

    def url(self, *ports: int) -> str:
        """One store URL naming these nodes (default: all), in that order."""
        return "xtdb+http://" + ",".join(f"127.0.0.1:{p}" for p in ports or self.ports)

    def kill(self, port: int) -> None:
        """SIGKILL a node: no shutdown hook, no clean close of its index."""
        pid_file = XTDB / "target" / f"xtdb-{port}.pid"
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        pid_file.unlink()
        deadline = time.monotonic() + 30
        while _answers(f"xtdb+http://127.0.0.1:{port}") is None and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop_postgres(self) -> None:
        _run(str(XTDB / "postgres"), "stop", "--port", str(self.pg_port), timeout=120)

    def start_postgres(self) -> None:
        _run(str(XTDB / "postgres"), "start", "--port", str(self.pg_port), timeout=120)

    def stop(self) -> None:
        for port in self.ports:
            subprocess.run([str(XTDB / "stop"), "--port", str(port)], check=False, timeout=90)
        subprocess.run([str(XTDB / "postgres"), "stop", "--port", str(self.pg_port)], check=False, timeout=90)
        shutil.rmtree(self.pg_data, ignore_errors=True)
