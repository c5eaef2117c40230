"""The mesh's request queue (mesh/queue.py) against a model, driven by hypothesis: requests of
three peers put with random deadlines into a small queue, taken by the agent's loop (``next``),
answered (the active one, or one still waiting), given up on by their senders, the clock moved
on, the queue closed. The model says which request ``next`` hands over (the oldest of the peer
served longest ago), which ``put`` refuses or which it crowds out (the newest of a peer holding
at least two more places than the sender), what each sender hears, and the counts ``stats``
gives; the queue must agree at every step. The clock is the test's: nothing sleeps."""

from __future__ import annotations

import types
from collections import Counter
from dataclasses import dataclass
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from context_os.errors import StateError
from context_os.mesh import queue as queue_module
from context_os.mesh.queue import GIVEN_UP_MARK, TIMEOUT_MARK, PendingRequest, RequestQueue, settle
from tests.reliability._adversarial import FUZZ, examples

PEERS = ["p1", "p2", "p3"]
SIZE = 4


@dataclass
class Req:
    real: PendingRequest
    peer: str
    deadline: float
    heard: str | None = None
    """What the model says its sender heard (the start of the reply), None: nothing yet."""


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0
        self.patch = pytest.MonkeyPatch()
        self.patch.setattr(queue_module, "time", types.SimpleNamespace(monotonic=lambda: self.now))
        self.q = RequestQueue(max_size=SIZE)
        self.waiting: list[Req] = []
        self.active: Req | None = None
        self.served: dict[str, int] = {}
        self.turn = 0
        self.n = 0
        self.closed = False
        self.all: list[Req] = []
        self.counts = {"queued": 0, "answered": 0, "timed_out": 0, "given_up": 0, "refused": 0}

    def teardown(self) -> None:
        self.patch.undo()

    # -- the model

    def settle_model(self, r: Req, heard: str) -> bool:
        if r.heard is None:
            r.heard = heard
            return True
        return False

    def drop_expired(self) -> None:
        """What every call of the queue does first: a request past its deadline hears
        ``[timeout]``; every one answered leaves the queue and is counted."""
        for r in [*self.waiting, *([self.active] if self.active else [])]:
            if r.deadline <= self.now:
                self.settle_model(r, TIMEOUT_MARK)
        for r in [*self.waiting, *([self.active] if self.active else [])]:
            if r.heard is not None:
                outcome = {TIMEOUT_MARK: "timed_out", GIVEN_UP_MARK: "given_up"}.get(r.heard, "answered")
                self.counts[outcome] += 1
                if r is self.active:
                    self.active = None
                else:
                    self.waiting.remove(r)

    # -- rules

    @rule(peer=st.sampled_from(PEERS), ttl=st.integers(1, 20))
    def put(self, peer: str, ttl: int) -> None:
        self.n += 1
        real = PendingRequest(peer, peer, f"r{self.n}", f"{peer} asks {self.n}", self.now, self.now + ttl)
        r = Req(real, peer, self.now + ttl)
        self.all.append(r)
        got = self.q.put(real)
        if self.closed:
            r.heard = "[error]"
            assert got is False
            return
        self.drop_expired()
        if len(self.waiting) >= SIZE:
            self.counts["refused"] += 1
            held = Counter(w.peer for w in self.waiting)
            most, n = max(held.items(), key=lambda kv: kv[1])
            crowding = None if n < held.get(peer, 0) + 2 else [w for w in self.waiting if w.peer == most][-1]
            if crowding is None:
                r.heard = "[queue-full]"
                assert got is False
                return
            assert crowding.heard is None
            crowding.heard = "[queue-full]"
            self.waiting.remove(crowding)
        self.waiting.append(r)
        self.counts["queued"] += 1
        assert got is True

    @rule()
    def next(self) -> None:
        got = self.q.next(0.0)
        if self.closed:
            assert got is None
            return
        self.drop_expired()
        want = None
        if self.active is None and self.waiting:
            want = min(self.waiting, key=lambda w: self.served.get(w.peer, -1))
            self.waiting.remove(want)
            self.active = want
            self.served[want.peer] = self.turn
            self.turn += 1
        assert got is (None if want is None else want.real)

    @rule(k=st.integers(0, SIZE), text=st.sampled_from(["done", "[error] no"]))
    def answer(self, k: int, text: str) -> None:
        """The loop answers the request it holds, or (k > 0) one still waiting (a reply sent by
        id); one already answered is refused."""
        pending = [*([self.active] if self.active else []), *self.waiting]
        r = pending[k % len(pending)] if pending else (self.all[k % len(self.all)] if self.all else None)
        if r is None:
            return
        if r.heard is None:
            r.real.answer(text)
            r.heard = text
        else:
            with pytest.raises(StateError):
                r.real.answer(text)

    @precondition(lambda self: bool(self.waiting) or self.active is not None)
    @rule(k=st.integers(0, SIZE))
    def give_up(self, k: int) -> None:
        """The sender stopped waiting: the node settles its request ``[given up]``."""
        pending = [*([self.active] if self.active else []), *self.waiting]
        r = pending[k % len(pending)]
        assert settle(r.real.future, (f"{GIVEN_UP_MARK} the peer left", True)) == (r.heard is None)
        self.settle_model(r, GIVEN_UP_MARK)

    @rule(dt=st.sampled_from([0.5, 1, 3, 10]))
    def wait(self, dt: float) -> None:
        self.now += dt

    @rule()
    def close(self) -> None:
        self.q.close()
        if not self.closed:
            for r in [*self.waiting, *([self.active] if self.active else [])]:
                self.settle_model(r, "[error]")
        self.waiting, self.active, self.closed = [], None, True

    # -- checks

    @invariant()
    def every_sender_hears_what_the_model_says(self) -> None:
        for r in self.all:
            if r.heard is None:
                assert not r.real.future.done(), (r.real.request_id, r.real.future.result())
            else:
                assert r.real.future.done(), r.real.request_id
                assert r.real.future.result()[0].startswith(r.heard), (r.real.request_id, r.heard)

    @rule()
    def stats(self) -> None:
        got = self.q.stats()
        if not self.closed:
            self.drop_expired()
        want: dict[str, Any] = {**self.counts, "waiting": len(self.waiting), "active": self.active is not None}
        if self.closed:
            got = {k: v for k, v in got.items() if k in ("waiting", "active")}
            want = {"waiting": 0, "active": False}
        assert got == want
        assert len(self.q) == len(self.waiting)
        assert self.q.active is (None if self.active is None else self.active.real)


def test_the_request_queue_agrees_with_the_model() -> None:
    steps = settings(FUZZ, max_examples=examples(300), stateful_step_count=40)
    run_state_machine_as_test(QueueMachine, settings=steps)
