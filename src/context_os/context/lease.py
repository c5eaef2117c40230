"""One writer per session: a lease document every session writer holds while it writes.

Two processes that write one session each keep their own view of it in memory; their writes
interleave page by page and the session's frames stop re-rendering. So ``Session.open`` takes
the session's lease (``lease:<session>``) with a compare-and-set on the lease document, and
every write of the session first checks that it still holds it:

* **Taking it.** Free (never taken, released, or expired), or held by a process of this host
  (and PID namespace: a container may share the host's name) that no longer runs (a crash: its
  pid is gone, or now belongs to a process started later), or held by this very process (the
  older ``Session`` object is then revoked: its next write raises): the lease is taken with
  ``Match`` on the lease document as read, so of two openers racing for it exactly one wins.
  Otherwise ``SessionBusy`` names the holder.
* **Keeping it.** A lease lasts ``ttl_ms`` (default 10 minutes) from its last renewal. A write
  renews it once less than half is left, with a plain put (nobody else may take a lease before it
  expires, so renewing one still running needs no check, and it can wait in an outbox); a write
  after it expired takes it again with ``Match`` on the holder's own last lease document, which
  fails, with ``SessionBusy``, if another writer took it meanwhile.
* **Giving it back.** ``Session.close`` releases it (``expires = 0``). A process that dies
  without closing leaves a lease that others of the host may take at once (its pid is gone)
  and other hosts once it expires: clocks of hosts sharing a store must agree to well within
  a tenth of the lease time.

This module decides and writes only lease documents; it never touches a session's view.
"""

from __future__ import annotations

import os
import socket
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from ..errors import SessionBusy, StoreCorrupt, StoreError, StoreUnreachable
from ..objects import LeaseDoc
from ..store.base import Match, Put, Store, Version, next_valid_time, now_ms

__all__ = ["DEFAULT_LEASE_MS", "Lease", "lease_id"]

DEFAULT_LEASE_MS = 10 * 60 * 1000
"""How long a session lease lasts without a write."""

_SAFETY = 10
"""A lease is renewed or re-taken while more than ``ttl / _SAFETY`` is left: margin for clock skew."""

MATCH_HORIZON_MS = 60_000
"""Compare-and-set checks the lease in force this far ahead of now: the newest version, even one
a host whose clock runs ahead wrote."""

# The leases this process holds, by holder id: a second ``Session.open`` of a session in the same
# process revokes the holder its lease document names instead of racing it, however each opened
# the store (two URLs of one SQLite file, ``a.db`` and ``sub/../a.db``, or of one node).
_LIVE: weakref.WeakValueDictionary[str, Lease] = weakref.WeakValueDictionary()


def lease_id(session_id: str) -> str:
    return f"lease:{session_id}"


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from the state on (Linux), or None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may contain spaces: count after it
    return stat.rsplit(")", 1)[-1].split()


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, Linux), or None if unknown."""
    fields = _proc_stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _pid_namespace() -> str | None:
    """This process's PID namespace (Linux: ``pid:[4026531836]``), or None if unknown. Processes
    of one host name in two namespaces (a container sharing the host's name, ``--network host``)
    cannot see each other's pids."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _running(pid: int, started: str | None) -> bool:
    """Whether process ``pid`` of this host still runs and is the one that took the lease."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    except OSError:
        return True
    fields = _proc_stat(pid)
    if fields and fields[0] in ("Z", "X"):
        # dead, only not yet reaped by its parent (a supervisor that has not called wait):
        # it writes nothing any more, though signal 0 still finds its pid
        return False
    now_started = fields[19] if fields is not None and len(fields) > 19 else None
    return started is None or now_started is None or now_started == started


@dataclass
class _Holder:
    id: str
    host: str
    pid: int
    started: str | None
    pidns: str | None

    @classmethod
    def this_process(cls) -> _Holder:
        pid = os.getpid()
        return cls(uuid.uuid4().hex, socket.gethostname(), pid, _process_start(pid), _pid_namespace())

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def _readable(v: Version, session_id: str) -> dict[str, Any]:
    """The lease document of version ``v``; ``StoreCorrupt`` naming it if who holds the session
    and until when cannot be read from it (a row changed by hand), with the way out: nothing tells
    whether its writer still runs, so only the user can free the session."""
    assert v.doc is not None
    content = v.doc.get("content")
    if not isinstance(content, dict):
        problem = "it has no content"
    elif not isinstance(content.get("expires"), int) or isinstance(content["expires"], bool):
        problem = "content.expires is not an integer"
    else:
        return v.doc
    raise StoreCorrupt(
        f"{v.id} @ tx {v.tx_id} is damaged: {problem}, so who writes session {session_id!r} cannot be told"
        " (`ctxos verify` re-hashes every document). Once no process writes the session, delete the lease"
        f" (`store.submit([Delete({v.id!r})])`, Delete from context_os.store.base) and open it again",
        id=v.id,
        tx_id=v.tx_id,
    )


class Lease:
    """The lease one ``Session`` object holds on its session in ``store``."""

    def __init__(self, store: Store, session_id: str, *, ttl_ms: int = DEFAULT_LEASE_MS):
        if ttl_ms < 1000:
            raise StoreError(f"a session lease must last at least 1000 ms, not {ttl_ms}")
        self.store = store
        self.session_id = session_id
        self.ttl_ms = ttl_ms
        self.holder = _Holder.this_process()
        self._doc: dict[str, Any] | None = None
        """The lease document as this holder last wrote it (None: not held)."""
        self._revoked: str | None = None
        self._lent: dict[str, Any] | None = None
        """The lease document this holder gave back with ``release(lend=True)``: the next write
        takes the lease again if it is still that one (nobody held the session meanwhile)."""

    @property
    def id(self) -> str:
        return lease_id(self.session_id)

    @property
    def expires(self) -> int:
        return int(self._doc["content"]["expires"]) if self._doc else 0

    def _new_doc(self, now: int, acquired: int | None = None) -> dict[str, Any]:
        h = self.holder
        return LeaseDoc(
            id=self.id,
            content={
                "holder": h.id,
                "host": h.host,
                "pid": h.pid,
                "started": h.started,
                "pidns": h.pidns,
                "acquired": acquired or now,
                "expires": now + self.ttl_ms,
            },
            meta={"session": self.session_id},
        ).to_doc()

    def _refusal(self, current: dict[str, Any], now: int) -> str | None:
        """Why the lease document ``current`` cannot be taken over now, or None if it can."""
        c = current["content"]
        if c.get("holder") == self.holder.id or int(c.get("expires", 0)) <= now:
            return None
        pid, host = c.get("pid"), c.get("host")
        # its pid means a process here only in this PID namespace (a lease written before leases
        # named theirs: as this one's); in another, a live writer's pid may be none here, or another's
        here = host == self.holder.host and c.get("pidns", self.holder.pidns) == self.holder.pidns
        if here and isinstance(pid, int):
            if pid == self.holder.pid:
                return None  # this process: the older holder is revoked
            if not _running(pid, c.get("started")):
                return None  # crashed without releasing
        if here:  # alive here: it leaves the session the moment it ends
            return (
                f"session {self.session_id!r} is being written by another process (pid {pid} on {host}, this"
                " host); only one writer at a time: stop it or wait for it to finish (the session is free"
                " the moment it ends)"
            )
        left = (int(c["expires"]) - now + 999) // 1000
        return (
            f"session {self.session_id!r} is being written by another process (pid {pid} on {host}); "
            f"only one writer at a time: wait for it to finish, or for its lease to expire ({left} s "
            "without a write; whether it still runs cannot be seen from this host)"
        )

    def acquire(self) -> None:
        """Take the lease, or raise ``SessionBusy`` naming who holds it."""
        current = self.store.get(self.id)
        now = now_ms()
        if current is not None and current.doc is not None:
            why = self._refusal(_readable(current, self.session_id), now)
            if why is not None:
                raise SessionBusy(why)
        doc = self._new_doc(now)
        expected = None if current is None else current.doc
        tx = self.store.submit([Match(self.id, expected, now + MATCH_HORIZON_MS), Put(doc, next_valid_time())])
        if not tx.committed:
            raise SessionBusy(f"session {self.session_id!r} was opened by another writer at the same moment")
        self._doc = doc
        older = _LIVE.get(str(current.doc["content"].get("holder"))) if current and current.doc else None
        if older is not None and older is not self:
            older._revoked = "it was opened again in this process: use the newer Session"
        _LIVE[self.holder.id] = self

    def check(self) -> None:
        """Before a write: raise ``SessionBusy`` unless this holder still holds the lease;
        renew it when less than half of it is left (take it again if it expired)."""
        if self._revoked is not None:
            raise SessionBusy(f"this Session of {self.session_id!r} no longer writes: {self._revoked}")
        if self._doc is None:
            if self._lent is None:
                raise SessionBusy(f"this Session of {self.session_id!r} is closed")
            self._take_back()
            return
        now = now_ms()
        left = self.expires - now
        if left > self.ttl_ms // 2:
            return
        self._write(self._new_doc(now, acquired=self._doc["content"]["acquired"]), now)

    def _write(self, doc: dict[str, Any], now: int) -> None:
        """Replace this holder's lease document: a plain put while the lease surely still runs
        (nobody else may take it; it can wait in an outbox), else compare-and-set."""
        assert self._doc is not None
        if self.expires - now > self.ttl_ms // _SAFETY:
            self.store.submit([Put(doc, next_valid_time())])
        else:
            match = Match(self.id, self._doc, now + MATCH_HORIZON_MS)
            if not self.store.submit([match, Put(doc, next_valid_time())]).committed:
                self._revoked = "another writer took the session while this one was idle past its lease"
                raise SessionBusy(f"this Session of {self.session_id!r} no longer writes: {self._revoked}")
        self._doc = doc

    def release(self, *, lend: bool = False) -> None:
        """Give the lease back (others may take it at once). Harmless when not held. ``lend``:
        the next write takes it again, if nobody held it meanwhile (else ``SessionBusy``: this
        holder's view of the session may be out of date); lent again, it stays lent."""
        lent = self._lent if lend else None
        try:
            if self._doc is not None and self._revoked is None:
                c = self._doc["content"]
                self._write(
                    LeaseDoc(id=self.id, content={**c, "expires": 0}, meta=self._doc["meta"]).to_doc(), now_ms()
                )
                lent = self._doc if lend else None
        finally:
            self._doc, self._lent = None, lent
            if _LIVE.get(self.holder.id) is self:
                del _LIVE[self.holder.id]

    def _take_back(self) -> None:
        """Take the lease lent with ``release(lend=True)`` again: with ``Match`` on the document
        it was given back as, which fails if any writer held it since."""
        assert self._lent is not None
        now = now_ms()
        doc = self._new_doc(now)
        match = Match(self.id, self._lent, now + MATCH_HORIZON_MS)
        try:
            tx = self.store.submit([match, Put(doc, next_valid_time())])
        except StoreUnreachable:
            raise  # nothing was sent: still lent, the next write takes it back
        except BaseException:
            self._lent = None  # it may have landed, or not: this Session writes no more
            raise
        self._lent = None
        if not tx.committed:
            self._revoked = "another writer held the session after this one gave it back: open it again"
            raise SessionBusy(f"this Session of {self.session_id!r} no longer writes: {self._revoked}")
        self._doc = doc
        _LIVE[self.holder.id] = self
