"""How the test suite gets a real XTDB 1.x node (used by the ``xtdb_url`` fixture in conftest).

In order of preference:

1. ``$XTDB_URL`` (``http://host:port`` or ``xtdb+http://host:port``): a node someone runs;
2. a container of the official image, if a Docker engine answers (testcontainers);
3. ``xtdb/start --config memory`` on a free port, stopped again at exit (needs Java and, the
   first time, Maven Central).

Whatever cannot produce a node raises ``NodeUnavailable`` with the exact reason; conftest turns
that into a failure under ``CI=true`` and a skip elsewhere. Progress goes to stderr, because a
first start (Maven download, JVM warm-up) can take minutes.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import httpx

__all__ = ["IMAGE", "CuttableProxy", "NodeUnavailable", "all_corrections", "node", "run_clojure"]

ROOT = Path(__file__).resolve().parent.parent
START = ROOT / "xtdb" / "start"
STOP = ROOT / "xtdb" / "stop"
IMAGE = "ghcr.io/xtdb/xtdb-in-memory:1.24.5"
"""The official in-memory image (its docs: administration/installing.adoc, 1.x branch)."""
STARTUP_TIMEOUT_S = 300
"""For the JVM to answer (a warm start takes 3-11 s); Maven's first download and the one compile
of XTDB's Clojure come before it. The whole start must stay within pytest's per-test timeout (pyproject: 600 s)."""


class NodeUnavailable(Exception):
    """No XTDB node could be had; the message says exactly why."""


def _say(msg: str) -> None:
    print(f"[xtdb node] {msg}", file=sys.stderr, flush=True)


def _store_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if url.startswith("xtdb+"):
        return url
    if url.startswith(("http://", "https://")):
        return "xtdb+" + url
    raise NodeUnavailable(f"XTDB_URL={url!r} is not an http:// or xtdb+http:// URL")


def _answers(store_url: str) -> str | None:
    """None if the node answers /_xtdb/status, else why not."""
    try:
        r = httpx.get(
            store_url.removeprefix("xtdb+") + "/_xtdb/status", headers={"Accept": "application/edn"}, timeout=5
        )
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}"
    return None if r.status_code == 200 else f"HTTP {r.status_code}: {r.text[:200]}"


def _wait_ready(store_url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while (why := _answers(store_url)) is not None:
        if time.monotonic() > deadline:
            raise NodeUnavailable(f"no answer from {store_url} after {timeout_s:g} s: {why}")
        time.sleep(0.5)


def _docker_answers() -> str | None:
    """None if a Docker engine answers its ping, else why not.

    Asked over plain HTTP rather than through the docker SDK: quick when there is no engine (the
    common case here), and it leaves no half-open socket behind.
    """
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            path = host.removeprefix("unix://")
            if not Path(path).exists():
                return f"no Docker socket at {path}"
            with httpx.Client(transport=httpx.HTTPTransport(uds=path), timeout=3) as client:
                r = client.get("http://docker/_ping")
        elif host.startswith("tcp://") and not os.environ.get("DOCKER_TLS_VERIFY"):
            with httpx.Client(timeout=3) as client:
                r = client.get("http://" + host.removeprefix("tcp://") + "/_ping")
        else:
            return f"DOCKER_HOST={host} is not a plain unix:// or tcp:// address"
    except httpx.HTTPError as e:
        return f"Docker at {host} does not answer: {type(e).__name__}: {e}"
    return None if r.status_code == 200 else f"Docker at {host} answered HTTP {r.status_code}"


@contextmanager
def _container() -> Iterator[str]:
    from testcontainers.core.container import DockerContainer

    _say(f"starting {IMAGE} with testcontainers")
    container = DockerContainer(IMAGE).with_exposed_ports(3000)
    try:
        container.start()
        url = f"xtdb+http://{container.get_container_host_ip()}:{container.get_exposed_port(3000)}"
        _wait_ready(url, STARTUP_TIMEOUT_S)
    except NodeUnavailable:
        container.stop()
        raise
    except Exception as e:
        with suppress(Exception):  # it may never have started
            container.stop()
        raise NodeUnavailable(f"container {IMAGE} did not start: {type(e).__name__}: {e}") from e
    _say(f"container ready at {url}")
    try:
        yield url
    finally:
        container.stop()


DEFAULT_PORTS = "21000-28999"
"""Where the tests' nodes and PostgreSQLs go without ``$CTXOS_TEST_PORTS``, if the system's
ephemeral ports (``EPHEMERAL``) leave it alone: a port it gives for an outgoing connection (a
client's, a node's to PostgreSQL) can be taken between the check that it is free and the node's
bind. A cluster's first node failed so ("Address already in use") in a clean-clone run whose
ports were within Linux's 32768-60999."""
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _free_port() -> int:
    """A port nothing listens on now, for a node or a PostgreSQL of the tests' own: one of
    ``$CTXOS_TEST_PORTS`` (``LO-HI``, e.g. ``21000-21999``) when set, for a machine whose other
    work must keep its ports; else of ``DEFAULT_PORTS`` where it is outside the system's
    ephemeral ports; else any the system gives."""
    return _free_ports(1)


def _port_span() -> str:
    span = os.environ.get("CTXOS_TEST_PORTS", "").strip()
    if span:
        return span
    try:
        first, last = (int(n) for n in EPHEMERAL.read_text().split())
    except (OSError, ValueError):
        return ""  # not Linux: the ports the system gives
    lo, _, hi = DEFAULT_PORTS.partition("-")
    return DEFAULT_PORTS if int(hi) < first or int(lo) > last else ""


def _free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports nothing listens on now (``xtdb/start --cluster N
    --port P`` starts its nodes on P … P+N-1), from the same places as ``_free_port``: within the
    worker's own slice of the range, so that none of them is another worker's."""
    span = _port_span()
    if not span:
        for _ in range(200):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port: int = s.getsockname()[1]
            if port + count <= 65536 and all(_bindable(p) for p in range(port, port + count)):
                return port
        raise NodeUnavailable(f"no {count} consecutive free ports found")
    lo, dash, hi = span.partition("-")
    if not (dash and lo.strip().isdigit() and hi.strip().isdigit() and 0 < int(lo) <= int(hi) < 65536):
        raise NodeUnavailable(f"CTXOS_TEST_PORTS={span!r} is not a port range LO-HI")
    ports = _workers_share(list(range(int(lo), int(hi) + 1)))
    starts = ports[: len(ports) - count + 1]
    random.shuffle(starts)  # two calls before either port is taken should not get the same one
    for port in starts:
        if all(_bindable(p) for p in range(port, port + count)):
            return port
    raise NodeUnavailable(f"no {count} consecutive free ports in this run's share of the ports {span}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _workers_share(ports: list[int]) -> list[int]:
    """In a parallel run (pytest-xdist's workers ``gw0``, ``gw1``, …) each worker's own slice of
    ``ports``: two workers never pick one port at once, each before the other's node took it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "") or 1)
    if count <= 1 or not worker.removeprefix("gw").isdigit():
        return ports
    size = len(ports) // count
    if size < 1:
        raise NodeUnavailable(f"CTXOS_TEST_PORTS has {len(ports)} ports, fewer than the run's {count} workers")
    k = int(worker.removeprefix("gw")) % count
    return ports[k * size : (k + 1) * size]


@contextmanager
def _script_node() -> Iterator[str]:
    port = _free_port()
    cmd = [str(START), "--port", str(port), "--config", "memory", "--timeout", str(STARTUP_TIMEOUT_S)]
    _say(f"starting an in-memory node with {START.relative_to(ROOT)} on port {port} (the first run downloads XTDB)")
    started = time.monotonic()
    tail: deque[str] = deque(maxlen=40)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise NodeUnavailable(f"{START} could not run: {e}") from e

    def relay() -> None:  # live progress on stderr, and the last lines for the error message
        assert proc.stderr is not None
        for line in proc.stderr:
            sys.stderr.write(line)
            tail.append(line)

    relay_thread = threading.Thread(target=relay, daemon=True)
    relay_thread.start()
    try:
        rc = proc.wait(timeout=STARTUP_TIMEOUT_S + 240)
    except subprocess.TimeoutExpired as e:
        proc.kill()
        _stop(port)  # the node may be up, detached from the script we gave up on
        raise NodeUnavailable(f"{START} --port {port} did not finish within {e.timeout:g} s") from e
    except BaseException:  # a run stopped (SIGTERM, Ctrl-C) while the node started: stopped too
        proc.kill()
        _stop(port)
        raise
    finally:
        relay_thread.join(timeout=5)
    assert proc.stdout is not None
    out = proc.stdout.read().strip()
    proc.stdout.close()
    if proc.stderr is not None:
        proc.stderr.close()
    if rc != 0:
        raise NodeUnavailable(f"{START} --port {port} exited with {rc}:\n{''.join(tail)}")
    url = out.splitlines()[-1] if out else ""
    if not url.startswith("xtdb+http://"):
        _stop(port)
        raise NodeUnavailable(f"{START} printed no store URL: {out!r}")
    _say(f"node ready at {url} after {time.monotonic() - started:.0f} s")
    try:
        yield url
    finally:
        _stop(port)


def _stop(port: int) -> None:
    subprocess.run([str(STOP), "--port", str(port)], check=False, timeout=60)
    if _answers(f"xtdb+http://127.0.0.1:{port}") is None:
        _say(f"warning: the node on port {port} still answers after {STOP.relative_to(ROOT)}")


@contextmanager
def node() -> Iterator[str]:
    """A real XTDB 1.x node for the duration of the block, as an ``xtdb+http://`` URL."""
    env = os.environ.get("XTDB_URL", "").strip()
    if env:
        url = _store_url(env)
        _wait_ready(url, 30)
        _say(f"using XTDB_URL={env}")
        yield url
        return
    reasons: list[str] = []
    with ExitStack() as stack:
        found: str | None = None
        docker_why = _docker_answers()
        if docker_why is None:
            try:
                found = stack.enter_context(_container())
            except NodeUnavailable as e:
                reasons.append(str(e))
                _say(f"{e}; falling back to {START.relative_to(ROOT)}")
        else:
            reasons.append(f"no Docker engine ({docker_why})")
        if found is None:
            try:
                found = stack.enter_context(_script_node())
            except NodeUnavailable as e:
                raise NodeUnavailable("; ".join([*reasons, str(e)])) from e
        yield found


def all_corrections(url: str, id: str) -> list[tuple[int, int, str | None]]:
    """Every version a node holds for ``id``, corrections included: (valid time, tx id, object
    hash), in order. Read straight from the node, not through ``Store.history(...,
    with_corrections=True)``: the tests that call this check what the store code under test
    wrote (the outbox's replays, concurrent writers), so the check does not go through it."""
    from context_os.store.edn import Keyword
    from context_os.store.xtdb import _doc_from_edn, _ms, _read_edn

    r = httpx.get(
        url.removeprefix("xtdb+").partition("?")[0] + "/_xtdb/entity",
        params={
            "eid-edn": json.dumps(id),
            "history": "true",
            "sort-order": "asc",
            "with-corrections": "true",
            "with-docs": "true",
        },
        headers={"Accept": "application/edn"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    out = []
    for e in _read_edn(r.text):
        doc = e.get(Keyword("xtdb.api/doc"))
        vt, tx = e[Keyword("xtdb.api/valid-time")], e[Keyword("xtdb.api/tx-id")]
        out.append((_ms(vt), int(tx), None if doc is None else _doc_from_edn(doc).get("object_hash")))
    return out


def run_clojure(script: Path, *args: str, classpath: str = ".classpath") -> list[str]:
    """Run a Clojure check script on a node's classpath (``xtdb/.classpath``, or
    ``.classpath-cluster``: resolved by ``xtdb/start``, so start a node first) with our sources
    ahead of it; the last lines it printed. Raises ``NodeUnavailable`` without Java or classpath,
    AssertionError when the script fails."""
    cp_file = ROOT / "xtdb" / classpath
    java = shutil.which("java")
    if java is None or not cp_file.is_file():
        raise NodeUnavailable(f"the XTDB node's classpath: java={java}, {cp_file} missing (xtdb/start resolves it)")
    run = subprocess.run(
        [
            java,
            f"-Dlogback.configurationFile={ROOT / 'xtdb' / 'logback.xml'}",
            "-cp",
            f"{ROOT / 'xtdb' / 'src'}:{cp_file.read_text().strip()}",
            "clojure.main",
            str(script),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = run.stdout.strip().splitlines()[-3:]
    assert run.returncode == 0 and last and last[-1].startswith("ok "), (run.stdout[-3000:], run.stderr[-3000:])
    return last


def tcp_pipe(src: socket.socket, dst: socket.socket, gate: CuttableProxy | None = None) -> None:
    """Copy ``src`` to ``dst`` until either end goes; then both go, and ``src`` is closed (each
    socket is the source of one pipe, so both are closed once both pipes end: a socket left to
    the garbage collector warns, and under ``-W error`` fails whatever test runs then). ``gate``:
    the proxy whose ``stall`` holds what arrives (``CuttableProxy``)."""
    try:
        while data := src.recv(65536):
            if gate is not None and not gate.passing.is_set():
                gate.stalled.set()
                gate.passing.wait()
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        src.close()


class CuttableProxy:
    """A TCP proxy to the node of ``store_url`` (on a port of ``_free_port``) that ``cut`` ends at
    once: its port then refuses connections and every connection through it is closed, as when
    the node dies; ``drop``: the first connections are closed after reading their request, as a
    restarting node or a dying keep-alive connection does (``accepted`` counts them all);
    ``stall`` holds every byte that arrives until ``resume``, as a node that hangs (stopped,
    swapping, behind a dead link): connections stay open and nothing answers (``stalled`` is set
    once something was held). A real network fault, not a fake node."""

    def __init__(self, store_url: str, *, drop: int = 0) -> None:
        base = store_url.removeprefix("xtdb+").split("?", 1)[0]
        host, _, port = base.removeprefix("http://").partition(":")
        self.target = (host, int(port.split("/", 1)[0]))
        self.port = _free_port()
        self.sock = socket.create_server(("127.0.0.1", self.port))
        self.url = f"xtdb+http://127.0.0.1:{self.port}"
        self._conns: list[socket.socket] = []
        self.drop, self.accepted = drop, 0
        self.passing, self.stalled = threading.Event(), threading.Event()
        self.passing.set()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.accepted <= self.drop:
                conn.recv(65536)
                conn.close()
                continue
            upstream = socket.create_connection(self.target)
            self._conns += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=tcp_pipe, args=(a, b, self), daemon=True).start()

    def stall(self) -> None:
        self.passing.clear()

    def resume(self) -> None:
        self.passing.set()

    def cut(self) -> None:
        self.passing.set()  # (a stalled pipe then ends as the sockets close)
        with suppress(OSError):  # wakes the accept under way, which a close alone would not end
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for s in self._conns:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
