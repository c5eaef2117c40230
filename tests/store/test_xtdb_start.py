"""``xtdb/start`` as a script reads it: stdout the store URL, stderr only its own lines, no
terminal codes when it is not on a terminal (Maven's included), ``--help`` the help alone."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from context_os.store.xtdb import XtdbStore
from tests._xtdb_node import ROOT, STARTUP_TIMEOUT_S, _free_port, _free_ports
from tests.helpers import stop_process

pytestmark = pytest.mark.xtdb


def test_a_first_start_resolves_and_compiles_once_and_prints_no_terminal_codes(tmp_path: Path, xtdb_url: str) -> None:
    """A copy of xtdb/ without its cached classpath or compiled classes, so Maven runs (from
    ~/.m2) and the node's Clojure is compiled, their output piped; the second start does neither
    and its node runs from the compiled classes. ``xtdb_url`` is requested only so the test is
    skipped exactly where no node can be had."""
    xtdb = tmp_path / "xtdb"
    shutil.copytree(ROOT / "xtdb", xtdb, ignore=shutil.ignore_patterns("target", "data", ".classpath*"))
    port = _free_port()
    cmd = [str(xtdb / "start"), "--port", str(port), "--config", "memory", "--timeout", str(STARTUP_TIMEOUT_S)]
    runs: list[subprocess.CompletedProcess[str]] = []
    try:
        for _ in range(2):
            runs.append(subprocess.run(cmd, capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S + 240))
            assert runs[-1].returncode == 0, runs[-1].stderr[-3000:]
            classpath = _node_classpath(xtdb / "target" / f"xtdb-{port}.pid")
            subprocess.run([str(xtdb / "stop"), "--port", str(port)], capture_output=True, timeout=90, check=True)
    finally:
        subprocess.run([str(xtdb / "stop"), "--port", str(port)], capture_output=True, timeout=90, check=False)
    compiled = [d for d in (xtdb / "target").iterdir() if d.name.startswith("aot-classpath-")]
    assert [d.name for d in compiled if d.is_dir()] == [d.name for d in compiled], compiled  # no log of a failure
    assert len(compiled) == 1 and classpath.startswith(f"{compiled[0]}:{xtdb / 'src'}:"), classpath
    assert any((compiled[0] / "context_os").glob("xtdb_http__init.class"))  # the front end's, compiled
    first, second = (run.stderr for run in runs)
    assert "resolving XTDB's classpath with Maven" in first and "compiling XTDB's Clojure once" in first
    assert "Maven" not in second and "compiling" not in second, second
    for run in runs:
        assert run.stdout == f"xtdb+http://127.0.0.1:{port}\n"
        assert "\x1b" not in run.stderr, run.stderr
        assert all(line.startswith("xtdb/start: ") for line in run.stderr.splitlines()), run.stderr


def test_a_compile_that_fails_is_said_once_and_the_node_runs_from_source(tmp_path: Path, xtdb_url: str) -> None:
    """The node is started in the foreground and stopped once its JVM runs: its command line is
    what is checked (a node from source answers as every start did before the compile)."""
    xtdb = tmp_path / "xtdb"
    shutil.copytree(ROOT / "xtdb", xtdb, ignore=shutil.ignore_patterns("target", "data"))
    (xtdb / "target").mkdir()
    for resolved in (ROOT / "xtdb" / "target").glob(".classpath*.pom-sha256"):  # (no Maven)
        shutil.copy(resolved, xtdb / "target")
    (xtdb / "aot.clj").write_text('(throw (ex-info "no compile today" {}))\n')
    port = _free_port()
    pid_file = xtdb / "target" / f"xtdb-{port}.pid"

    def start(i: int) -> tuple[str, str]:
        """The classpath of the node a start ran, and what the start said."""
        err = tmp_path / f"err-{i}"
        with open(err, "wb") as out:
            proc = subprocess.Popen(
                [str(xtdb / "start"), "--port", str(port), "--config", "memory", "--foreground"], stderr=out
            )
        try:
            deadline = time.monotonic() + 120
            while not pid_file.exists() or not pid_file.read_text().strip():
                assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
                time.sleep(0.05)
            classpath = _node_classpath(pid_file)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        return classpath, err.read_text()

    classpath, said = start(0)
    (failed,) = (xtdb / "target").glob("aot-classpath-*.failed")
    assert f"compiling XTDB's Clojure failed (log: {failed}): the node runs from source" in said, said
    assert "no compile today" in failed.read_text()
    assert classpath.startswith(f"{xtdb / 'src'}:"), classpath  # nothing compiled on it
    assert not [p for p in (xtdb / "target").iterdir() if p.name.startswith("aot-") and p.is_dir()]
    classpath, said = start(1)  # the next start does not try again with the same classpath and source
    assert "compiling" not in said and classpath.startswith(f"{xtdb / 'src'}:"), said


def test_help_is_the_help_alone() -> None:
    run = subprocess.run([str(ROOT / "xtdb" / "start"), "--help"], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0
    assert run.stdout.startswith("Start a local XTDB 1.x node")
    assert run.stdout.rstrip().endswith("MAVEN (default mvn).") and "set -euo" not in run.stdout


def test_a_data_directory_that_cannot_be_made_is_refused_in_a_line_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    port = _free_port()
    run = subprocess.run(
        [str(ROOT / "xtdb" / "start"), "--port", str(port), "--data-dir", str(tmp_path / "a-file" / "data")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr == f"xtdb/start: cannot create the data directory {tmp_path}/a-file/data: Not a directory\n"


def test_a_cluster_whose_node_port_is_taken_starts_nothing(tmp_path: Path) -> None:
    """The second node's port held by another program: refused before PostgreSQL or the first
    node is started, so nothing is left running that the refusal would leave to stop."""
    port = _free_ports(3)  # the two nodes' and PostgreSQL's
    pg_port = port + 2
    script = ROOT / "xtdb"
    with socket.socket() as held:
        held.bind(("127.0.0.1", port + 1))
        held.listen()
        try:
            run = subprocess.run(
                [str(script / "start"), "--cluster", "2", "--port", str(port), "--pg-port", str(pg_port)]
                + ["--data-dir", str(tmp_path)],
                capture_output=True,
                text=True,
                timeout=STARTUP_TIMEOUT_S + 240,
            )
            made_postgres = (script / "target" / f"pg-{pg_port}").exists()
        finally:  # what an unchecked start left running
            subprocess.run([str(script / "stop"), "--port", str(port)], capture_output=True, timeout=90, check=False)
            subprocess.run(
                [str(script / "postgres"), "stop", "--port", str(pg_port)], capture_output=True, timeout=90, check=False
            )
            shutil.rmtree(script / "target" / f"pg-{pg_port}", ignore_errors=True)
    assert run.returncode == 1 and run.stdout == ""
    assert (
        run.stderr == f"xtdb/start: port {port + 1} on 127.0.0.1 is in use by another program; choose another --port\n"
    )
    assert not made_postgres
    assert list(tmp_path.iterdir()) == []  # nor the nodes' data directories (it made them)


def test_a_refused_start_makes_no_data_directory_and_leaves_no_lock(tmp_path: Path) -> None:
    """A start refused (its port held by another program) made its data directory all the same,
    and left its lock in xtdb/target/."""
    port = _free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        run = subprocess.run(
            [str(ROOT / "xtdb" / "start"), "--port", str(port), "--data-dir", str(tmp_path / "data")],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert run.returncode == 1 and "is in use by another program" in run.stderr, run.stderr
    assert not (tmp_path / "data").exists()
    assert not (ROOT / "xtdb" / "target" / f"xtdb-{port}.lock").exists()


def test_two_starts_on_one_port_at_once_start_one_node(xtdb_url: str) -> None:
    """Both print the URL; the second waits for the first and finds its node running, so
    ``xtdb/stop`` stops the one node there is and no JVM is left. ``xtdb_url`` is requested only so
    the test is skipped exactly where no node can be had."""
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("the processes left are found in /proc")
    port = _free_port()
    cmd = [str(ROOT / "xtdb" / "start"), "--port", str(port), "--config", "memory"]
    cmd += ["--timeout", str(STARTUP_TIMEOUT_S)]
    try:
        starts = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=STARTUP_TIMEOUT_S + 240) for p in starts]
    finally:
        stop = subprocess.run(
            [str(ROOT / "xtdb" / "stop"), "--port", str(port)], capture_output=True, text=True, timeout=90
        )
    assert [p.returncode for p in starts] == [0, 0], outs
    assert [out for out, _ in outs] == [f"xtdb+http://127.0.0.1:{port}\n"] * 2
    assert sum("already running" in err for _, err in outs) == 1, outs
    assert "stopped the node" in stop.stderr, stop.stderr
    assert not (ROOT / "xtdb" / "target" / f"xtdb-{port}.lock").exists()  # it stayed, one per port ever used
    tmp_dir = f"-Djava.io.tmpdir={ROOT / 'xtdb' / 'target' / f'tmp-{port}'}"
    left = [int(p.name) for p in Path("/proc").glob("[0-9]*") if tmp_dir in _cmdline(p)]
    for pid in left:  # not to leave it running after a failure
        os.kill(pid, signal.SIGTERM)
    assert left == [], "a node of the port is still running"


def test_a_start_that_fails_while_another_waits_leaves_one_lock_for_the_next_two(tmp_path: Path, xtdb_url: str) -> None:
    """Three starts on one port: the first fails while the second waits for its lock, and takes
    the lock file away; the second got the lock on that file, gone from the path, and a third
    made a new file, locked it at once and went on beside the second: two JVMs for one port.
    Now the third waits for the second and finds its node running. Maven, which each start runs
    while it holds the lock (a copy of xtdb/ without its cached classpath), is held at a gate the
    test opens: the first's fails, the second's waits until the third has either waited or run
    its own. ``xtdb_url`` is requested only so the test is skipped exactly where no node can be had."""
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("the processes left are found in /proc")
    mvn = shutil.which("mvn")
    if mvn is None:
        pytest.skip("no Maven to resolve the classpath with")
    xtdb = tmp_path / "xtdb"
    shutil.copytree(ROOT / "xtdb", xtdb, ignore=shutil.ignore_patterns("target", "data", ".classpath*"))
    _copy_compiled(xtdb)
    gate = tmp_path / "mvn-gate"
    gate.write_text(
        "#!/bin/sh\n"
        f'echo called >>"{tmp_path}/calls"\n'
        f'n=$(wc -l <"{tmp_path}/calls")\n'
        f'while [ ! -s "{tmp_path}/go-$n" ]; do sleep 0.05; done\n'
        f'[ "$(cat "{tmp_path}/go-$n")" = fail ] && exit 1\n'
        f'exec "{mvn}" "$@"\n'
    )
    gate.chmod(0o755)
    calls = tmp_path / "calls"

    def called() -> int:
        return len(calls.read_text().splitlines()) if calls.exists() else 0

    def said(i: int) -> str:
        return (tmp_path / f"err-{i}").read_text()

    port = _free_port()
    cmd = [str(xtdb / "start"), "--port", str(port), "--config", "memory", "--timeout", str(STARTUP_TIMEOUT_S)]
    env = {**os.environ, "MAVEN": str(gate)}
    starts: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        i = len(starts)
        with open(tmp_path / f"out-{i}", "wb") as out, open(tmp_path / f"err-{i}", "wb") as err:
            starts.append(subprocess.Popen(cmd, stdout=out, stderr=err, env=env))

    def until(done: Callable[[], bool]) -> None:
        while not done():
            assert all(p.poll() is None for p in starts[1:]), [said(i) for i in range(len(starts))]
            time.sleep(0.05)

    try:
        start()
        until(lambda: called() == 1)  # the first holds the lock, in Maven
        start()
        until(lambda: "waiting for it" in said(1))
        (tmp_path / "go-1").write_text("fail")
        assert starts[0].wait(timeout=60) == 1
        until(lambda: called() == 2)  # the second holds the lock, in Maven
        start()
        until(lambda: "waiting for it" in said(2) or called() == 3)
        for n in (2, 3):
            (tmp_path / f"go-{n}").write_text("go")
        codes = [p.wait(timeout=STARTUP_TIMEOUT_S + 240) for p in starts[1:]]
        outs = [(tmp_path / f"out-{i}").read_text() for i in (1, 2)]
    finally:
        for p in starts:
            if p.poll() is None:  # (a failure: not left running)
                p.kill()
                p.wait()
        stop = subprocess.run([str(xtdb / "stop"), "--port", str(port)], capture_output=True, text=True, timeout=90)
    tmp_dir = f"-Djava.io.tmpdir={xtdb / 'target' / f'tmp-{port}'}"
    left = [int(p.name) for p in Path("/proc").glob("[0-9]*") if tmp_dir in _cmdline(p)]
    for pid in left:  # not to leave it running after a failure
        os.kill(pid, signal.SIGTERM)
    assert "Maven could not resolve" in said(0)
    assert f"another xtdb/start is starting a node on port {port}: waiting for it" in said(2), said(2)
    assert called() == 2  # the third ran no Maven of its own: it waited, then the classpath was there
    assert codes == [0, 0], [said(1), said(2)]
    assert outs == [f"xtdb+http://127.0.0.1:{port}\n"] * 2
    assert "already running" in said(2), said(2)
    assert "stopped the node" in stop.stderr, stop.stderr
    assert left == [], "a node of the port is still running"


def _node_classpath(pid_file: Path) -> str:
    """The ``-cp`` of the node whose pid ``pid_file`` holds."""
    return _cmdline(Path(f"/proc/{pid_file.read_text().strip()}")).split(" -cp ")[1].split(" ")[0]


def _copy_compiled(xtdb: Path) -> None:
    """This checkout's compiled classes into the copy ``xtdb`` of its xtdb/, which finds them
    (the same classpath and source) instead of compiling its own."""
    for compiled in (ROOT / "xtdb" / "target").glob("aot-classpath-*"):
        if compiled.is_dir() and "." not in compiled.name:
            shutil.copytree(compiled, xtdb / "target" / compiled.name)


def _own_session_node(pid: str) -> bool:
    """Whether ``pid`` is a node's JVM that has left its start's session (``setsid``)."""
    if not pid.isdigit() or "xtdb.main" not in _cmdline(Path(f"/proc/{pid}")):
        return False
    try:
        return os.getsid(int(pid)) == int(pid)
    except ProcessLookupError:
        return False


class _HeldStart:
    """A start whose node is held stopped (SIGSTOP) while it starts, whatever the machine's speed,
    and the processes a test runs beside it (``track``): ``_held_start`` cleans them all up."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cmd = [str(ROOT / "xtdb" / "start"), "--port", str(port), "--config", "memory"]
        self.cmd += ["--timeout", str(STARTUP_TIMEOUT_S)]
        self.pid_file = ROOT / "xtdb" / "target" / f"xtdb-{port}.pid"
        self.start: subprocess.Popen[str] | None = None
        self.node_pid: int | None = None
        self.others: list[subprocess.Popen[str]] = []
        self.left: list[int] = []
        """Processes of the port's node still running after the cleanup (stopped then)."""
        self.stopped = ""
        """What the cleanup's ``xtdb/stop`` said."""

    def track(self, p: subprocess.Popen[str]) -> subprocess.Popen[str]:
        self.others.append(p)
        return p

    def second_start_waiting(self) -> tuple[subprocess.Popen[str], str]:
        """A start run again while the node starts: once it says it waits for that node (an old
        start launched a JVM of its own), with what it said so far."""
        second = self.track(subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        assert second.stderr is not None
        said = [second.stderr.readline()]
        while said[-1] and "waiting for it" not in said[-1]:
            said.append(second.stderr.readline())
        return second, "".join(said)

    def stop_while_held(self) -> str:
        """``xtdb/stop`` run while the node is held: the node goes on once the stop's SIGTERM waits
        for it (answering in the meantime, it would simply be running). What the stop said."""
        assert self.node_pid is not None
        stop = self.track(
            subprocess.Popen([str(ROOT / "xtdb" / "stop"), "--port", str(self.port)], stderr=subprocess.PIPE, text=True)
        )
        while not _term_pending(self.node_pid):
            assert stop.poll() is None, stop.communicate()
            time.sleep(0.05)
        os.kill(self.node_pid, signal.SIGCONT)
        return stop.communicate(timeout=90)[1]


@contextlib.contextmanager
def _held_start(*, cut_short: bool) -> Iterator[_HeldStart]:
    """An ``xtdb/start`` on a free port whose node is held stopped once it runs in a session of its
    own (before its exec the pid is the start's child; then ``setsid java …``, which names
    xtdb.main too but is still in the start's process group until it calls setsid(): killed with
    the start, the node was gone). ``cut_short``: the start is then killed (as a Ctrl-C that
    reaches bash while its curl waits on the stopped node is not acted on until curl ends),
    leaving its node starting. Afterwards the node goes on, every process still running is
    killed, ``xtdb/stop`` runs and what still runs of the port's node is stopped (``left``)."""
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("the processes left are found in /proc")
    held = _HeldStart(_free_port())
    pipe = subprocess.DEVNULL if cut_short else subprocess.PIPE
    try:
        held.start = start = subprocess.Popen(
            held.cmd, stdout=pipe, stderr=pipe, text=True, start_new_session=cut_short
        )
        while not (held.pid_file.exists() and _own_session_node(held.pid_file.read_text().strip())):
            assert start.poll() is None, ("the start ended before it launched its node", start.communicate())
            time.sleep(0.05)
        held.node_pid = int(held.pid_file.read_text())
        stop_process(held.node_pid)
        if cut_short:
            os.killpg(start.pid, signal.SIGKILL)
            start.wait(timeout=30)
        yield held
    finally:
        if held.node_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(held.node_pid, signal.SIGCONT)
        for p in held.others:
            if p.returncode is None:  # (a failure before its end: not left running, its pipes closed)
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.communicate()
        if held.start is not None and held.start.poll() is None:
            if cut_short:
                os.killpg(held.start.pid, signal.SIGKILL)
            else:
                held.start.kill()
            held.start.communicate()
        held.stopped = subprocess.run(
            [str(ROOT / "xtdb" / "stop"), "--port", str(held.port)], capture_output=True, text=True, timeout=90
        ).stderr
        tmp_dir = f"-Djava.io.tmpdir={ROOT / 'xtdb' / 'target' / f'tmp-{held.port}'}"
        held.left = [int(p.name) for p in Path("/proc").glob("[0-9]*") if tmp_dir in _cmdline(p)]
        for pid in held.left:  # not to leave it running after a failure
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def test_a_start_run_again_while_the_node_of_a_cut_short_start_starts_waits_for_it(xtdb_url: str) -> None:
    """A start cut short (Ctrl-C, killed) while its node starts leaves the node starting, in a session of
    its own; run again, it launched a second JVM, which lost the port to the first and exited,
    leaving the first running with no pid file: ``xtdb/stop`` then stopped nothing. Now the start
    waits for that node and hands it back. The node is held stopped (SIGSTOP) until the second
    start says it waits: started in the meantime, it is simply running, which proves nothing.
    ``xtdb_url`` is requested only so the test is skipped exactly where no node can be had."""
    with _held_start(cut_short=True) as held:
        second, said = held.second_start_waiting()
        assert held.node_pid is not None
        os.kill(held.node_pid, signal.SIGCONT)
        out, err = second.communicate(timeout=STARTUP_TIMEOUT_S + 240)
        err = said + err
        running = held.pid_file.read_text().strip() if held.pid_file.exists() else None
    port = held.port
    assert second.returncode == 0, err
    assert out == f"xtdb+http://127.0.0.1:{port}\n"
    assert f"the node on port {port} (pid {held.node_pid}) is starting: waiting for it" in err, err
    assert running == str(held.node_pid)  # the node of the first start, not a second one
    assert "stopped the node" in held.stopped, held.stopped
    assert held.left == [], "a node of the port is still running"


def _term_pending(pid: int) -> bool:
    """Whether SIGTERM waits to be delivered to ``pid`` (a stopped process gets it on SIGCONT)."""
    status = Path(f"/proc/{pid}/status").read_text()
    masks = [int(line.split()[1], 16) for line in status.splitlines() if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(m & (1 << (signal.SIGTERM - 1)) for m in masks)


def test_a_stop_while_the_node_starts_makes_the_start_say_it_was_stopped(xtdb_url: str) -> None:
    """``xtdb/stop`` while ``xtdb/start`` waited for its node to answer: the start said only that
    the node exited during startup, with the tail of a log the stop had removed (or, when the
    stop removed it first, exited 1 at the failed ``tail`` with no word at all). Now the start
    says the node was stopped by xtdb/stop, and the stop that it was still starting. The node is
    held stopped (SIGSTOP) until the stop's SIGTERM waits for it: answering in the meantime, it
    would simply be running. ``xtdb_url`` is requested only so the test is skipped exactly where
    no node can be had."""
    with _held_start(cut_short=False) as held:
        stopped = held.stop_while_held()
        assert held.start is not None
        out, err = held.start.communicate(timeout=90)
    port = held.port
    assert held.start.returncode == 1 and out == "", (out, err)
    assert err.rstrip().endswith(
        f"xtdb/start: the node was stopped by xtdb/stop --port {port} before it answered: XTDB did not start"
    ), err
    assert f"stopped the node on port {port} (pid {held.node_pid}), which was still starting" in stopped, stopped
    assert not any((ROOT / "xtdb" / "target" / f"xtdb-{port}.{ext}").exists() for ext in ("pid", "lock", "stopped"))
    assert held.left == [], "a node of the port is still running"


def test_a_stop_while_a_start_waits_for_a_cut_short_starts_node_is_not_undone(xtdb_url: str) -> None:
    """A start cut short leaves its node starting; a second start waits for it. ``xtdb/stop`` then
    stopped that node, and the waiting start, finding it gone, took the port for free and
    launched a node of its own: the stop was undone behind its back. Now that start says the node
    was stopped and starts none. ``xtdb_url`` is requested only so the test is skipped exactly
    where no node can be had."""
    with _held_start(cut_short=True) as held:
        second, said = held.second_start_waiting()
        stopped = held.stop_while_held()
        out, err = second.communicate(timeout=STARTUP_TIMEOUT_S + 240)
        err = said + err
    port = held.port
    assert second.returncode == 1 and out == "", (out, err)
    assert err.rstrip().endswith(
        f"xtdb/start: the node on port {port} (pid {held.node_pid}) was stopped by xtdb/stop --port {port} before it"
        " answered"
    ), err
    assert "which was still starting" in stopped, stopped
    assert held.left == [], "a node of the port is still running"


def test_a_node_on_an_ipv6_address_starts_and_its_url_is_one_a_store_opens(tmp_path: Path, xtdb_url: str) -> None:
    """``--host ::1``: the start asked ``http://::1:PORT`` whether the node answered, which is no
    URL, so it waited out its timeout and stopped the node; its URL now brackets the address.
    ``xtdb_url`` is requested only so the test is skipped exactly where no node can be had."""
    with socket.socket(socket.AF_INET6) as probe:
        try:
            probe.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
    port = _free_port()
    try:
        run = subprocess.run(
            [str(ROOT / "xtdb" / "start"), "--port", str(port), "--config", "memory", "--host", "::1"]
            + ["--timeout", str(STARTUP_TIMEOUT_S)],
            capture_output=True,
            text=True,
            timeout=STARTUP_TIMEOUT_S + 240,
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout == f"xtdb+http://[::1]:{port}\n"
        with XtdbStore(run.stdout.strip(), text_index_path=tmp_path / "text.db") as store:
            assert store.stats()["nodes"][0]["answers"] is True
    finally:
        subprocess.run([str(ROOT / "xtdb" / "stop"), "--port", str(port)], capture_output=True, timeout=90, check=False)


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_pg_host_with_cluster_is_refused(tmp_path: Path) -> None:
    """``--cluster`` starts its own PostgreSQL on this machine: a ``--pg-host`` beside it was
    silently ignored (the nodes used the local one)."""
    port = _free_ports(3)  # the two nodes' (``xtdb/stop --cluster 2`` stops both) and PostgreSQL's
    pg_port = port + 2
    script = ROOT / "xtdb"
    try:
        run = subprocess.run(
            [str(script / "start"), "--cluster", "2", "--port", str(port), "--pg-port", str(pg_port)]
            + ["--pg-host", "db.example", "--data-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=STARTUP_TIMEOUT_S + 240,
        )
    finally:  # what a start that took no notice of it left running
        subprocess.run(
            [str(script / "stop"), "--cluster", "2", "--port", str(port), "--pg-port", str(pg_port)],
            capture_output=True,
            timeout=120,
            check=False,
        )
        shutil.rmtree(script / "target" / f"pg-{pg_port}", ignore_errors=True)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.startswith("xtdb/start: --pg-host names the PostgreSQL of one cluster node"), run.stderr


def test_keep_on_failure_without_cluster_is_refused() -> None:
    """A single node that does not start is always stopped: the option would promise otherwise."""
    run = subprocess.run(
        [str(ROOT / "xtdb" / "start"), "--keep-on-failure", "--port", str(_free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.startswith("xtdb/start: --keep-on-failure is for --cluster"), run.stderr


@pytest.mark.parametrize("args", [["--cluster", "x"], ["--port", "abc"], ["--cluster", "2", "--pg-port", "5433x"]])
def test_stop_refuses_a_value_that_is_no_number(args: list[str]) -> None:
    """Not a default in its place (``--cluster x`` stopped the node on port 3000)."""
    run = subprocess.run([str(ROOT / "xtdb" / "stop"), *args], capture_output=True, text=True, timeout=30)
    assert run.returncode == 1
    assert run.stderr == f"xtdb/stop: {args[-2]} must be a number, got {args[-1]}\n"


def _node_lookalike(tmp_dir: Path, port: int) -> subprocess.Popen[bytes]:
    """A process whose command line is that of a node xtdb/start launched (``java ...
    -Djava.io.tmpdir=CHECKOUT/xtdb/target/tmp-PORT ... -m xtdb.main ... -e {...{:port PORT ...}}``):
    the JVM a stale pid file's pid now is, that of another node."""
    override = f'{{:context-os.xtdb-http/server {{:port {port} :host "127.0.0.1"}}}}'
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "-Xmx1g", f"-Djava.io.tmpdir={tmp_dir}"]
        + ["-cp", "src", "clojure.main", "-m", "xtdb.main", "-f", "memory.edn", "-e", override]
    )


def test_a_stale_pid_file_naming_another_nodes_jvm_is_not_taken_for_the_ports_node(
    tmp_path: Path, xtdb_url: str
) -> None:
    """A pid file left by a node that died, its pid reused by another node's JVM (of another
    port, or of another checkout): any process with ``xtdb.main`` in its command line was taken
    for the port's node, so ``xtdb/stop`` killed that other node and ``xtdb/start`` waited its
    whole timeout for it to answer on this port. A node is now recognized by its temporary
    directory (this checkout's ``xtdb/target/tmp-PORT``) and its port as well. ``xtdb_url`` is
    requested only so the test is skipped exactly where no node can be had."""
    # two ports in one call: two calls of _free_port may give the same port twice (a clean-clone CI
    # failed so, and the lookalikes it had started were left running into the next test)
    port = _free_ports(2)
    other = port + 1
    target = ROOT / "xtdb" / "target"
    pid_file = target / f"xtdb-{port}.pid"
    (target / f"tmp-{other}").mkdir(parents=True, exist_ok=True)
    (tmp_path / "xtdb" / "target" / f"tmp-{port}").mkdir(parents=True)
    (tmp_path / "xtdb" / "target" / f"tmp-{other}").mkdir(parents=True)
    lookalikes: list[subprocess.Popen[bytes]] = []
    stops = []
    stop = [str(ROOT / "xtdb" / "stop"), "--port", str(port)]
    try:
        lookalikes += [
            _node_lookalike(target / f"tmp-{other}", other),  # this checkout's node on another port
            _node_lookalike(tmp_path / "xtdb" / "target" / f"tmp-{port}", port),  # another checkout's, on this port
            _node_lookalike(tmp_path / "xtdb" / "target" / f"tmp-{other}", other),  # another checkout's
        ]
        for lookalike in lookalikes:
            pid_file.write_text(f"{lookalike.pid}\n")
            stops.append(subprocess.run(stop, capture_output=True, text=True, timeout=90))
        pid_file.write_text(f"{lookalikes[0].pid}\n")
        start = subprocess.run(
            [str(ROOT / "xtdb" / "start"), "--port", str(port), "--config", "memory", "--timeout", "3"],
            capture_output=True,
            text=True,
            timeout=240,
        )
        alive = [lookalike.poll() is None for lookalike in lookalikes]
    finally:
        for lookalike in lookalikes:
            lookalike.kill()
            lookalike.wait()
        subprocess.run(stop, capture_output=True, timeout=90, check=False)
        shutil.rmtree(target / f"tmp-{other}", ignore_errors=True)
        (target / f"xtdb-{port}.log").unlink(missing_ok=True)
    for lookalike, stopped in zip(lookalikes, stops, strict=True):
        assert stopped.returncode == 0
        assert stopped.stderr == f"xtdb/stop: the node on port {port} (pid {lookalike.pid}) is not running\n"
    assert alive == [True, True, True]
    # it started a node of its own (which --timeout 3 gives no time to answer), not waited for another's
    assert "is starting: waiting for it" not in start.stderr, start.stderr
    assert f"xtdb/start: starting XTDB (memory.edn, data: {target}) on http://127.0.0.1:{port} ..." in start.stderr


def test_a_foreground_node_that_dies_makes_its_start_exit_with_its_status(tmp_path: Path, xtdb_url: str) -> None:
    """``xtdb/start --foreground`` exited 0 when its node crashed (``wait || true``), so a
    supervisor took a crash for a stop. It now exits with the node's status: 137 for a node
    SIGKILLed (as the OOM killer does). ``xtdb_url`` is requested only so the test is skipped
    exactly where no node can be had."""
    port = _free_port()
    pid_file = ROOT / "xtdb" / "target" / f"xtdb-{port}.pid"
    with (
        (tmp_path / "stderr").open("w+") as err,
        subprocess.Popen(
            [str(ROOT / "xtdb" / "start"), "--port", str(port), "--config", "memory", "--foreground"]
            + ["--timeout", str(STARTUP_TIMEOUT_S)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        ) as start,
    ):
        try:
            assert start.stdout is not None
            url = start.stdout.readline()  # once the node answers
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGKILL)
            status = start.wait(timeout=60)
        finally:
            if start.poll() is None:
                start.terminate()
                start.wait(timeout=60)
            subprocess.run([str(ROOT / "xtdb" / "stop"), "--port", str(port)], capture_output=True, timeout=90)
        err.seek(0)
        stderr = err.read()
    assert url == f"xtdb+http://127.0.0.1:{port}\n", stderr[-3000:]
    assert status == 137, stderr[-3000:]
    said = f"xtdb/start: the node (pid {pid}) was killed by signal 9 (exit status 137)\n"
    assert stderr.endswith(said), stderr[-3000:]
    assert not pid_file.exists()
