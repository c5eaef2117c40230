"""Peers' requests, waiting for the agent's loop, first come first served, peers taking turns.

A request a peer sends (without ``autoReply``) is an answer the *agent* must give: the node
cannot answer it by itself. It waits here until the loop takes it (``next``), one at a time, and
its sender waits for ``answer`` up to the request's timeout (the seed's 60 s). ``next`` gives the
oldest request of the peer served longest ago (one peer's requests: oldest first). A request
still waiting when its time is up is answered ``[timeout]`` and skipped; past ``MAX_QUEUE``
waiting, a new one is refused at once (``[queue-full]``), unless another peer holds at least two
more places than its sender: then that peer's newest is refused instead (one peer cannot keep the
others out by filling the queue), and one whose sender stopped waiting is settled
``[given up]`` by the node, then skipped too. Each request's answer is a future the node awaits.

Thread-safe; knows nothing of libp2p, stores or sessions.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError, StateError
from . import wire

__all__ = ["GIVEN_UP_MARK", "MAX_QUEUE", "REQUEST_TIMEOUT", "PendingRequest", "RequestQueue", "settle"]

MAX_QUEUE = 50
REQUEST_TIMEOUT = 60.0
"""Seconds a request waits for its answer when it does not say (seed: 60 s)."""
CANCEL_POLL_S = 0.25
"""How often a ``next`` given ``cancel`` looks at it while it waits (a wake-up can be lost)."""

Reply = tuple[str, bool]
TIMEOUT_MARK = "[timeout]"
GIVEN_UP_MARK = "[given up]"
"""The answer of a request whose sender stopped waiting (the node saw its stream reset, or its
connection close): nobody receives it."""


_claims = threading.Lock()


def _claim(future: concurrent.futures.Future[Reply]) -> bool:
    """Make ``future`` running, the caller's to answer; False when it is answered, or another
    holds it already. (Looked at first, under one lock: ``set_running_or_notify_cancel`` logs
    at CRITICAL when it finds a future running or done.)"""
    with _claims:
        if future.running() or future.done():
            return False
        try:
            return future.set_running_or_notify_cancel()
        except RuntimeError:  # answered this moment without a claim (``close``, a full queue)
            return False


def settle(future: concurrent.futures.Future[Reply], reply: Reply) -> bool:
    """Answer ``future`` with ``reply`` (a timeout) unless it is answered, or its answer is being
    recorded (``PendingRequest.answer`` holds it: running); True when this did."""
    if not _claim(future):
        return False
    future.set_result(reply)
    return True


@dataclass(eq=False)
class PendingRequest:
    """One request from a peer, until answered."""

    peer: str
    peer_name: str
    request_id: str
    message: str
    """What the peer asked."""
    received_at: float
    """``time.monotonic()`` when it came."""
    deadline: float
    """``time.monotonic()`` when its sender stops waiting."""
    context: str = ""
    """What memory recalls of the peer for this request (empty: nothing)."""
    memories: list[str] = field(default_factory=list)
    """The ids of the memory objects behind ``context``."""
    object_id: str | None = None
    """The ``message`` object the request is stored as."""
    future: concurrent.futures.Future[Reply] = field(default_factory=concurrent.futures.Future)
    on_answer: Callable[[PendingRequest, str, bool], None] | None = None
    _answering: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _claimed: bool = field(default=False, init=False, repr=False)

    @property
    def text(self) -> str:
        """The user message a loop gives its model: who asks, and what. (A session with the
        mesh's tools shows what memory recalls of the peer as objects beside it.)"""
        return f"[Request from {self.peer_name} ({self.peer}), id {self.request_id}]\n{self.message}"

    @property
    def text_with_memory(self) -> str:
        """``text`` after what memory recalls of the peer: for a loop without a session."""
        return f"{self.context}\n\n{self.text}" if self.context else self.text

    @property
    def answered(self) -> bool:
        return self.future.done()

    def answer(self, text: str, *, error: bool = False) -> None:
        """Send ``text`` to the peer as the response; ``StateError`` if it was already answered
        (or timed out)."""
        if not isinstance(text, str):
            raise StateError("a request's answer must be text")
        if (problem := wire.unicode_problem(text)) is not None:  # refused before anything is recorded
            raise InputError(f"the answer to request {self.request_id} cannot be sent: {problem}")
        text = wire.fit(text)  # what the peer accepts, stored as sent
        with self._answering:
            if self.future.done():
                raise StateError(f"request {self.request_id} was already answered ({self.future.result()[0][:60]!r})")
            if not self._claimed:
                # taken from the timeouts first (``settle``): a deadline passing while the answer
                # was recorded (a slow store) sent the peer "[timeout]", and the store said answered
                self._claimed = _claim(self.future)
                if not self._claimed:  # a timeout took it this moment
                    raise StateError(f"request {self.request_id} timed out while it was being answered")
            if self.on_answer is not None:
                self.on_answer(self, text, error)  # recorded before the peer sees it (may be tried again)
            try:
                self.future.set_result((text, error))
            except concurrent.futures.InvalidStateError:  # given up on while it was recorded (``close``)
                raise StateError(f"request {self.request_id} timed out while it was being answered") from None

    def fail(self, why: str) -> None:
        """Answer with an error: the peer hears it at once."""
        self.answer(f"[error] {why}", error=True)


class RequestQueue:
    """FIFO of ``PendingRequest``; one of them is the agent's at a time."""

    def __init__(self, max_size: int = MAX_QUEUE):
        self.max_size = max_size
        self._items: collections.deque[PendingRequest] = collections.deque()
        self._active: PendingRequest | None = None
        self._cond = threading.Condition()
        self._turns = itertools.count()
        self._served: dict[str, int] = {}
        """When each peer was last handed a request (a turn number): the one served longest ago
        goes first."""
        self.counts = {"queued": 0, "answered": 0, "timed_out": 0, "given_up": 0, "refused": 0}
        self._closed_why: str | None = None

    def __len__(self) -> int:
        with self._cond:
            self._drop_expired()
            return len(self._items)

    def put(self, req: PendingRequest) -> bool:
        """Queue ``req``; False (and answered ``[queue-full]``) when ``max_size`` wait already,
        unless a peer holds at least two more of them than ``req``'s: its newest is refused."""
        full = (f"[queue-full] {self.max_size} requests are waiting; try again later", True)
        with self._cond:
            if self._closed_why is not None:  # (a request that came while the agent closed)
                req.future.set_result((f"[error] {self._closed_why}", True))
                return False
            self._drop_expired()
            if len(self._items) >= self.max_size:
                self.counts["refused"] += 1
                crowding = self._crowding(req.peer)
                if crowding is None or not settle(crowding.future, full):
                    req.future.set_result(full)
                    return False
                self._items.remove(crowding)
            req.future.add_done_callback(lambda _: self.wake())
            self._items.append(req)
            self.counts["queued"] += 1
            self._cond.notify_all()
            return True

    def _crowding(self, peer: str) -> PendingRequest | None:
        """The newest request of the peer holding the most places, when it holds at least two
        more than ``peer`` (giving one of them to ``peer`` leaves it no fewer)."""
        held = collections.Counter(r.peer for r in self._items)
        most, n = max(held.items(), key=lambda kv: kv[1])
        if n < held.get(peer, 0) + 2:
            return None
        return next(r for r in reversed(self._items) if r.peer == most)

    def wake(self) -> None:
        """Wake every ``next`` that waits (to look at its ``cancel`` again). Safe in a signal
        handler of the waiting thread: the lock is reentrant."""
        with self._cond:
            self._cond.notify_all()

    @staticmethod
    def expire(req: PendingRequest) -> bool:
        """Answer ``req`` with ``[timeout]`` if nobody has; True when this did."""
        waited = time.monotonic() - req.received_at
        return settle(req.future, (f"{TIMEOUT_MARK} no answer within {waited:.0f} s", True))

    def _settle(self, req: PendingRequest) -> None:
        text = req.future.result()[0]
        outcome = (
            "timed_out"
            if text.startswith(TIMEOUT_MARK)
            else "given_up"
            if text.startswith(GIVEN_UP_MARK)
            else "answered"
        )
        self.counts[outcome] += 1

    def _drop_expired(self) -> None:
        now = time.monotonic()
        for req in list(self._items):
            if req.deadline <= now:
                self.expire(req)
            if req.future.done():
                self._items.remove(req)
                self._settle(req)
        active = self._active
        if active is not None:
            if active.deadline <= now:
                self.expire(active)
            if active.future.done():
                self._settle(active)
                self._active = None

    @property
    def active(self) -> PendingRequest | None:
        """The request the agent holds and has not answered yet."""
        with self._cond:
            self._drop_expired()
            return self._active

    def next(self, timeout: float | None = 0.0, *, cancel: threading.Event | None = None) -> PendingRequest | None:
        """The oldest waiting request of the peer served longest ago, now the agent's; None if
        none comes within ``timeout`` seconds (None: wait for one) or while the agent still holds
        an unanswered one, or once ``cancel`` is set (set it, then ``wake()``: the wait ends at
        once)."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if cancel is not None and cancel.is_set():
                    return None
                self._drop_expired()
                if self._active is None and self._items:
                    # the oldest of the peer served longest ago (``min`` keeps the first of equals)
                    self._active = min(self._items, key=lambda r: self._served.get(r.peer, -1))
                    self._items.remove(self._active)
                    self._served[self._active.peer] = next(self._turns)
                    if len(self._served) > 4 * self.max_size:  # many peers came and went: forget them
                        present = {r.peer for r in self._items} | {self._active.peer}
                        self._served = {p: t for p, t in self._served.items() if p in present}
                    return self._active
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return None
                # (one being answered has no deadline left: its answer wakes this wait)
                waiting = [*self._items, *([self._active] if self._active else [])]
                soonest = min((r.deadline for r in waiting if not r.future.running()), default=None)
                if soonest is not None:
                    until = max(0.0, soonest - time.monotonic()) + 0.001
                    left = until if left is None else min(left, until)
                if cancel is not None:
                    # a signal handler in this very thread (SIGTERM on stdio) may set ``cancel`` and
                    # wake the condition between the check above and this wait: no waiter yet, the
                    # wake-up is lost, so the wait looks at ``cancel`` again every CANCEL_POLL_S
                    left = CANCEL_POLL_S if left is None else min(left, CANCEL_POLL_S)
                self._cond.wait(left)

    def close(self, why: str = "the agent stopped") -> None:
        """Answer every waiting request (and the active one) with an error, and every one put
        after (it waited for good, ``queued`` in the store: nothing takes it any more)."""
        with self._cond:
            self._closed_why = why
            for req in [*self._items, *([self._active] if self._active else [])]:
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    req.future.set_result((f"[error] {why}", True))
            self._items.clear()
            self._active = None
            self._cond.notify_all()

    def stats(self) -> dict[str, Any]:
        with self._cond:
            self._drop_expired()
            return {**self.counts, "waiting": len(self._items), "active": self._active is not None}
