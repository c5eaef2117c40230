"""The local registry of mesh agents running on this machine, so that shell commands find them
without mDNS (``ctxos mesh peers|send|broadcast``).

An agent that wants to be found writes one small JSON file, ``<peer id>.json``, into a directory
(``default_dir()``: ``<user data dir>/mesh/peers``) when its node is up (``announce``) and removes
it when it stops (``withdraw``). The file holds the agent's name, its addresses (multiaddrs
ending in ``/p2p/<peer id>``), its process id and that process's start (``process_start``),
and when it announced itself. Files are written whole (a temporary file renamed into place) and
readable by their owner only (0600, in a 0700 directory). An entry whose process is gone (a
crash skips ``withdraw``), or whose pid another process has taken since, is dropped when read;
a file that does not parse is skipped and left alone.

The registry is a hint, not a guarantee: a listed agent may be frozen or no longer listening,
and only a dial says so. This module only reads and writes those files: it never starts a node,
never dials, never imports libp2p, and never touches the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from ..errors import InputError, MeshError
from ..store import data_dir
from ..times import now_ms

__all__ = [
    "AlreadyRunning",
    "LocalPeer",
    "alive",
    "announce",
    "default_dir",
    "find",
    "local_peers",
    "process_start",
    "running",
    "withdraw",
]

_PEER_ID = re.compile(r"[A-Za-z0-9]{1,128}")
"""What a peer id looks like (base58 or base32 text): also what makes it a safe file name."""


@dataclass(frozen=True)
class LocalPeer:
    """One agent announced in the registry."""

    peer_id: str
    agent_name: str
    addrs: tuple[str, ...]
    """Multiaddrs to dial, each ending in ``/p2p/<peer id>``."""
    pid: int
    """The process the agent runs in (alive when the registry was read)."""
    started: int
    """When it announced itself, epoch ms."""
    pid_started: int | None = None
    """When its process started (``process_start``; None where that cannot be read): the pid
    with it names one process, not another that took the pid since."""

    @property
    def live(self) -> bool:
        """Whether the process that announced it still runs."""
        return alive(self.pid, self.pid_started)

    @property
    def dial_addrs(self) -> list[str]:
        """``addrs``, each ending in the agent's ``/p2p/<id>`` (as a dial needs)."""
        return [a if "/p2p/" in a else f"{a}/p2p/{self.peer_id}" for a in self.addrs]

    def public(self) -> dict[str, Any]:
        return {
            "peerId": self.peer_id,
            "agentName": self.agent_name,
            "addresses": list(self.addrs),
            "pid": self.pid,
            "started": self.started,
        }


def identity_path(agent_name: str) -> Path:
    """Where the identity seed of an agent name lives on this machine (``mesh.node.load_seed``):
    ``<user data dir>/mesh/<name>.seed``; a name that is not a plain file name (``/``, spaces)
    gets 8 hex digits of its hash too, so two names never share one."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in agent_name)
    if safe != agent_name:
        safe += "-" + hashlib.blake2b(agent_name.encode(), digest_size=4).hexdigest()
    return data_dir() / "mesh" / f"{safe}.seed"


def default_dir() -> Path:
    """``<user data dir>/mesh/peers``: where agents on this machine announce themselves."""
    return data_dir() / "mesh" / "peers"


class AlreadyRunning(MeshError):
    """``announce(..., exclusive=True)``: a live process other than the caller announced this peer
    id (``peer``: its entry)."""

    def __init__(self, peer: LocalPeer) -> None:
        super().__init__(f"mesh registry: {peer.agent_name!r} ({peer.peer_id}) is announced already, by pid {peer.pid}")
        self.peer = peer


def announce(
    directory: str | Path,
    *,
    peer_id: str,
    agent_name: str,
    addrs: Iterable[str],
    pid: int | None = None,
    exclusive: bool = False,
) -> Path:
    """Write the entry of a running agent (``pid``: its process, default this one); its path,
    for ``withdraw``. An entry for the same peer id is replaced; with ``exclusive``, only one of
    ``pid`` or of a process that is gone: one a live process wrote is left alone and
    ``AlreadyRunning`` raised, decided in one step (two agents of one identity starting at once
    both saw no entry, and both ran)."""
    if not isinstance(peer_id, str) or not _PEER_ID.fullmatch(peer_id):
        raise InputError(f"mesh registry: {peer_id!r} is not a peer id")
    if not isinstance(agent_name, str) or not agent_name.strip():
        raise InputError("mesh registry: the agent name is empty")
    owner = os.getpid() if pid is None else pid
    entry: dict[str, Any] = {
        "peerId": peer_id,
        "agentName": agent_name,
        "addresses": [str(a) for a in addrs],
        "pid": owner,
        "started": now_ms(),
    }
    if (pid_started := process_start(owner)) is not None:
        entry["pidStarted"] = pid_started
    d = Path(directory)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = d / f"{peer_id}.json"
    # mkstemp makes the file 0600; its name does not end in .json, so readers never see it half written
    fd, tmp = tempfile.mkstemp(prefix=f".{peer_id}.", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True))
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            _claim(tmp, path, owner)
        else:
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return path


def _claim(tmp: str, path: Path, pid: int) -> None:
    """Put ``tmp`` at ``path`` unless a live process other than ``pid`` holds it: ``os.link``
    creates ``path`` only if it is missing; an entry there of ``pid``, or of a process that is
    gone, is replaced."""
    while True:
        try:
            os.link(tmp, path)
            return
        except FileExistsError:
            pass
        except OSError:  # no hard links on this file system: a plain replace
            os.replace(tmp, path)
            return
        held = _read(path)
        if held is not None and held.pid != pid and held.live:
            raise AlreadyRunning(held)
        if held is not None and held.pid == pid:
            os.replace(tmp, path)
            return
        withdraw(path, held.pid if held is not None else pid)  # gone, or no entry: then try again


def withdraw(path: str | Path, pid: int | None = None) -> None:
    """Remove an entry ``announce`` wrote for process ``pid`` (default: this one). Gone already,
    or announced since by another process (the same identity started again): left alone, even
    when that announce comes between this look at the entry and its removal."""
    p = Path(path)
    mine = os.getpid() if pid is None else pid
    entry = _read(p)
    if entry is not None and entry.pid != mine:
        return
    # Reading, then unlinking, removed an entry announced in between (a crashed agent's entry
    # withdrawn by a reader while the agent, started again, announced itself): the live agent was
    # no longer found. The file is moved aside in one step, then what was moved is looked at; an
    # entry of another process goes back, unless a newer one took its place meanwhile.
    aside = p.with_name(f".{p.stem}.{secrets.token_hex(6)}.withdrawn")
    try:
        os.rename(p, aside)
    except FileNotFoundError:
        return
    try:
        taken = _read(aside, p.name)
        if taken is not None and taken.pid != mine:
            try:
                os.link(aside, p)
            except FileExistsError:
                pass  # announced again since: the newer entry stays
            except OSError:  # no hard links here: a rename, which replaces a newer entry
                os.replace(aside, p)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(aside)


def running(directory: str | Path, peer_id: str) -> LocalPeer | None:
    """The live agent of another process announced with ``peer_id``, if there is one."""
    found = next((p for p in local_peers(directory) if p.peer_id == peer_id), None)
    return found if found is not None and found.pid != os.getpid() else None


def local_peers(directory: str | os.PathLike[str]) -> list[LocalPeer]:
    """The agents announced in ``directory`` whose process is alive, oldest first. Entries of
    dead processes are removed; files that are not entries are skipped."""
    d = Path(directory)
    if not d.is_dir():
        return []
    out: list[LocalPeer] = []
    for path in sorted(d.glob("*.json")):
        peer = _read(path)
        if peer is None:
            continue
        if not peer.live:  # gone, or its pid is another process's now (a container restarted)
            withdraw(path, peer.pid)
            continue
        out.append(peer)
    return sorted(out, key=lambda p: (p.started, p.peer_id))


def find(directory: str | os.PathLike[str], who: str) -> LocalPeer | None:
    """The live agent whose peer id, or else whose agent name, is ``who``; None if none is.
    ``MeshError`` when several agents have that name (it names them)."""
    peers = local_peers(directory)
    for p in peers:
        if p.peer_id == who:
            return p
    named = [p for p in peers if p.agent_name == who]
    if len(named) > 1:
        which = ", ".join(f"{p.peer_id} (pid {p.pid})" for p in named)
        raise MeshError(f"mesh: {len(named)} agents are named {who!r}: {which}; give a peer id instead")
    return named[0] if named else None


def _read(path: Path, file_name: str | None = None) -> LocalPeer | None:
    """The entry in ``path``, or None when it is not one (unreadable, not JSON, a field missing
    or of the wrong type, or a peer id that is not its file's name: ``file_name``, default the
    name of ``path``)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    peer_id, name, addrs, pid, started = (raw.get(k) for k in ("peerId", "agentName", "addresses", "pid", "started"))
    if not isinstance(peer_id, str) or (file_name or path.name) != f"{peer_id}.json" or not _PEER_ID.fullmatch(peer_id):
        return None
    if not isinstance(name, str) or not isinstance(addrs, list) or not all(isinstance(a, str) for a in addrs):
        return None
    # pid 0 and negative pids are process groups to os.kill, never one process
    if not _is_int(pid) or pid <= 0 or not _is_int(started):
        return None
    pid_started = raw.get("pidStarted")  # missing in entries written before 2026-12-01
    return LocalPeer(peer_id, name, tuple(addrs), pid, started, pid_started if _is_int(pid_started) else None)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (Linux ``/proc``), or None where
    that cannot be read: with its pid, it names one process for as long as the machine runs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        return int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, after the command's name
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int, started: int | None = None) -> bool:
    """Whether process ``pid`` exists (signal 0 checks without sending anything), and, given
    ``started`` (``process_start``), is the process that started then: not another that took
    its pid since (a container restarted after a kill runs its server under the same pid)."""
    if started is not None and (now := process_start(pid)) is not None and now != started:
        return False
    if os.name == "nt":  # there os.kill(pid, 0) would send CTRL_C_EVENT: trust the entry
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    except OSError:  # e.g. a pid beyond the system's range
        return False
    return True
