"""Session leases (context/lease.py) against a model, driven by hypothesis: writers of one session
on two hosts (two processes of this host, one of them opening the session twice, and one of
another host; each process with its own registry of the leases it holds) take the lease, write
(``check``), give it back, and die; the clock moves on (the test's clock: nothing sleeps). The
model holds the lease document as the last successful writer left it.

* ``acquire`` succeeds exactly when the lease is free: never taken, given back, expired, held by
  the same process, or by a process of this host that no longer runs;
* a writer whose lease was taken over (it expired, or its process opened the session again) is
  refused at its next write, and never writes while another holds the lease: of two writers that
  passed ``check``, the older one's lease had expired, or its process was this host's and gone,
  or the same;
* a writer holding the lease writes on (``check`` renews it) and gives it back; one that lent it
  (``release(lend=True)``) takes it back at its next write exactly when nobody wrote the lease
  since.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from context_os.context import lease as lease_module
from context_os.context.lease import Lease, _Holder
from context_os.errors import SessionBusy
from context_os.store.sqlite import SqliteStore
from tests.reliability._adversarial import FUZZ, examples

TTL = 10_000
WRITERS = [("here", 101), ("here", 102), ("here", 101), ("there", 201)]
"""(host, pid) of each writer: the first and third are one process (a second ``Session.open``)."""
_ids = itertools.count()


@dataclass
class Doc:
    """The lease document in force, as the model has it."""

    writer: int
    expires: int


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = time.time_ns() // 1_000_000
        self.dead: set[int] = set()
        self.live: dict[tuple[str, int], weakref.WeakValueDictionary[str, Lease]] = {}
        self.patch = pytest.MonkeyPatch()
        self.patch.setattr(lease_module, "_LIVE", lease_module._LIVE)  # (restored at the end)
        self.patch.setattr(lease_module, "now_ms", lambda: self.now)
        self.patch.setattr(lease_module, "_running", lambda pid, started: pid not in self.dead)
        self.dir = Path(tempfile.mkdtemp(prefix="ctxos-lease-model-"))
        self.store = SqliteStore(self.dir / "s.db")
        self.sid = f"s{next(_ids)}"
        self.writers = [self.lease(n) for n in range(len(WRITERS))]
        self.doc: Doc | None = None
        self.holding: set[int] = set()
        """Writers whose last acquire or write succeeded and who have not given it back since."""
        self.written = 0
        """How many times a writer wrote the lease document."""
        self.lent: dict[int, int] = {}
        """Writers that gave the lease back lent (``release(lend=True)``): ``written`` then."""

    def teardown(self) -> None:
        self.patch.undo()
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def lease(self, n: int) -> Lease:
        """A new ``Lease`` of writer ``n`` (what ``Session.open`` makes)."""
        host, pid = WRITERS[n]
        w = Lease(self.store, self.sid, ttl_ms=TTL)
        w.holder = _Holder(w.holder.id, host, pid, "1", "pid:[1]")
        return w

    def alive(self, n: int) -> bool:
        """Whether writer ``n``'s process runs; if so, the lease module is made its process's (the
        leases each process holds are its own)."""
        if WRITERS[n] not in self.live:
            self.live[WRITERS[n]] = weakref.WeakValueDictionary()
        lease_module._LIVE = self.live[WRITERS[n]]
        return WRITERS[n][1] not in self.dead

    def free_for(self, n: int) -> bool:
        """Whether writer ``n`` may take the lease now (``Lease._refusal``)."""
        d = self.doc
        if d is None or d.writer == n or d.expires <= self.now:
            return True
        host, pid = WRITERS[d.writer]
        return host == WRITERS[n][0] and (pid == WRITERS[n][1] or pid in self.dead)

    def took(self, n: int) -> None:
        """Writer ``n`` holds the lease now: whoever held it before had lost it."""
        for other in self.holding - {n}:
            host, pid = WRITERS[other]
            assert self.writers[other].expires <= self.now or (
                host == WRITERS[n][0] and (pid in self.dead or pid == WRITERS[n][1])
            ), f"writer {n} took the lease while writer {other} held it"
        self.holding = {n}
        self.doc = Doc(n, self.writers[n].expires)

    @rule(n=st.integers(0, len(WRITERS) - 1))
    def acquire(self, n: int) -> None:
        if not self.alive(n):
            return
        expected = self.free_for(n)
        self.holding.discard(n)  # (its old Session, if any, is dropped: a new one opens)
        self.lent.pop(n, None)
        self.writers[n] = self.lease(n)
        try:
            self.writers[n].acquire()
        except SessionBusy:
            assert not expected, f"writer {n} was refused a free lease"
            return
        assert expected, f"writer {n} took a lease that was not free"
        self.written += 1
        self.took(n)

    @rule(n=st.integers(0, len(WRITERS) - 1))
    def write(self, n: int) -> None:
        if not self.alive(n):
            return
        w = self.writers[n]
        mine = self.doc is not None and self.doc.writer == n and n in self.holding
        lent = self.lent.pop(n, None)
        if lent is not None:  # taken back if nobody wrote the lease since it was given back
            mine = lent == self.written
        before = w.expires
        try:
            w.check()
        except SessionBusy:
            assert not mine, f"writer {n} holds the lease (or lent it, untouched since) but was refused"
            self.holding.discard(n)
            return
        assert mine, f"writer {n} wrote without holding the lease"
        self.written += w.expires != before
        self.took(n)

    @rule(n=st.integers(0, len(WRITERS) - 1), lend=st.booleans())
    def release(self, n: int, lend: bool) -> None:
        """``lend``: as a session between two turns of a hook that gives it back (the next write
        takes it back if nobody held it meanwhile)."""
        if not self.alive(n):
            return
        mine = self.doc is not None and self.doc.writer == n and n in self.holding
        try:
            self.writers[n].release(lend=lend)
        except SessionBusy:
            assert not mine, f"writer {n} could not give back the lease it holds"
            self.holding.discard(n)
            if not lend:
                self.lent.pop(n, None)
            return
        if mine:
            assert self.doc is not None
            self.doc.expires = 0
            self.written += 1
            if lend:
                self.lent[n] = self.written
        if not lend:
            self.lent.pop(n, None)
        self.holding.discard(n)

    @precondition(lambda self: len(self.dead) < 2)
    @rule(n=st.integers(0, len(WRITERS) - 1))
    def die(self, n: int) -> None:
        """The writer's process ends without giving the lease back (a crash)."""
        self.dead.add(WRITERS[n][1])
        self.holding -= {k for k, (_, pid) in enumerate(WRITERS) if pid == WRITERS[n][1]}

    @rule(ms=st.sampled_from([1_000, 6_000, 11_000]))
    def wait(self, ms: int) -> None:
        self.now += ms


def test_session_leases_agree_with_the_model() -> None:
    steps = settings(FUZZ, max_examples=examples(400), stateful_step_count=30)
    run_state_machine_as_test(LeaseMachine, settings=steps)
