"""The local registry (mesh/registry.py) on a real directory with real processes: a withdraw
never removes an entry another process announced in the meantime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from context_os.mesh import registry

PEER = "12D3KooWTwin"
ANNOUNCER = """
import sys
from context_os.mesh import registry
registry.announce(sys.argv[1], peer_id=sys.argv[2], agent_name="twin", addrs=["/ip4/127.0.0.1/tcp/1"])
print("announced", flush=True)
sys.stdin.read()  # stays alive (its entry is live) until the test closes its stdin
"""


@pytest.fixture
def restarted(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """Processes started by the test, each an agent of identity ``PEER`` announcing itself."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        p.communicate(timeout=30)  # closes its stdin: it exits


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait(30)
    return proc.pid


def _announcer(tmp_path: Path) -> subprocess.Popen[str]:
    """Another process that announces ``PEER`` in ``tmp_path`` and stays (until its stdin closes)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", ANNOUNCER, str(tmp_path), PEER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": ":".join(sys.path)},
    )
    assert proc.stdout is not None and proc.stdout.readline() == "announced\n"
    return proc


def test_a_withdraw_racing_an_announce_leaves_the_new_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restarted: list[subprocess.Popen[str]]
) -> None:
    """An agent crashed and left its entry; ``ctxos mesh peers`` read it, saw its process dead and
    withdrew it, while the agent, started again, announced itself under the same peer id. The
    withdraw read the old entry, then unlinked the file: the new one, so the live agent was no
    longer found by ``ctxos mesh send``."""
    dead = _dead_pid()
    stale = registry.announce(tmp_path, peer_id=PEER, agent_name="twin", addrs=[], pid=dead)
    real_read = registry._read

    def read_then_restart(path: Path, file_name: str | None = None) -> registry.LocalPeer | None:
        entry = real_read(path, file_name)
        if not restarted:  # right after the withdraw's first look: the agent comes back
            restarted.append(_announcer(tmp_path))
        return entry

    monkeypatch.setattr(registry, "_read", read_then_restart)
    registry.withdraw(stale, dead)
    monkeypatch.undo()
    [live] = registry.local_peers(tmp_path)
    assert live.pid == restarted[0].pid and live.peer_id == PEER
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{PEER}.json"]  # nothing left aside


def test_an_exclusive_announce_refuses_an_identity_a_live_process_announced(
    tmp_path: Path, restarted: list[subprocess.Popen[str]]
) -> None:
    """Two ``ctxos serve --mesh bob`` started at once both looked for a running bob, found none,
    and both announced (the second replacing the first): two nodes of one identity. The announce
    itself now decides, in one step: the second is refused, naming the first."""
    proc = _announcer(tmp_path)
    restarted.append(proc)
    with pytest.raises(registry.AlreadyRunning, match=f"pid {proc.pid}") as refused:
        registry.announce(tmp_path, peer_id=PEER, agent_name="twin", addrs=[], exclusive=True)
    assert refused.value.peer.pid == proc.pid
    [live] = registry.local_peers(tmp_path)
    assert live.pid == proc.pid  # the first one's entry, untouched
    # an entry of a process that is gone, or of this one, is replaced
    other = "12D3KooWOther"
    registry.announce(tmp_path, peer_id=other, agent_name="other", addrs=[], pid=_dead_pid())
    mine = registry.announce(tmp_path, peer_id=other, agent_name="other", addrs=["/ip4/1.2.3.4/tcp/5"], exclusive=True)
    again = registry.announce(tmp_path, peer_id=other, agent_name="other", addrs=[], exclusive=True)
    assert mine == again and registry.find(tmp_path, "other") is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{PEER}.json", f"{other}.json"])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process start times from /proc")
def test_a_pid_another_process_took_since_is_not_alive() -> None:
    # a container restarted after a kill runs its server under the pid of the one killed: by
    # the pid alone, the process that held the killed one's requests was still running
    started = registry.process_start(os.getpid())
    assert isinstance(started, int)
    assert registry.alive(os.getpid()) and registry.alive(os.getpid(), started)
    assert not registry.alive(os.getpid(), started + 1)


def _unshare_works() -> bool:
    try:
        tried = subprocess.run(["unshare", "-Urpf", "--mount-proc", "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return tried.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare (user and pid namespaces) for a reused pid")
def test_an_agent_whose_pid_another_process_took_is_not_listed(tmp_path: Path) -> None:
    """An agent ran in a container (its own pid namespace: pid 1) that was killed; the next
    container's ``ctxos mesh peers``, sharing the data dir, runs as pid 1 too. By the pid alone
    the dead agent was alive: listed, and dialled by ``ctxos mesh send``, for good."""
    env = {**os.environ, "PYTHONPATH": ":".join(sys.path), "XDG_DATA_HOME": str(tmp_path)}
    container = ["unshare", "-Urpf", "--mount-proc", sys.executable]
    killed = """
import json
import os
from context_os.mesh import registry
registry.announce(registry.default_dir(), peer_id="12D3KooWGone", agent_name="gone", addrs=["/ip4/127.0.0.1/tcp/9"])
print(os.getpid(), flush=True)
os.kill(os.getpid(), 9)
"""
    first = subprocess.run([*container, "-c", killed], env=env, capture_output=True, text=True, timeout=60)
    assert first.stdout == "1\n", first.stderr  # it was pid 1, and left its entry
    peers = subprocess.run(
        [*container, "-m", "context_os", "mesh", "peers", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert peers.returncode == 0, peers.stderr
    assert json.loads(peers.stdout)["peers"] == []
    assert list((tmp_path / "context_os" / "mesh" / "peers").glob("*.json")) == []  # and its entry is removed
