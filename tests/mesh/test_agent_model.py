"""Two mesh agents (mesh/agent.py) against a model, driven by hypothesis: alice and bob, real nodes
on 127.0.0.1 writing into one store, send each other requests that the other's loop answers,
refuses or lets time out, broadcast, have one of their messages evicted, and restart (the same
identity, the same session; the other dials it again at once). Every text carries a marker of its
own. After each step, for each agent:

* the store holds each of its messages once, as the model says: its text, kind, direction, a
  request's status, a reply's error; nothing evicted (a copy of a broadcast gossiped to an agent
  that restarted is not stored again);
* ``messages()`` shows the newest of them (``history_cap``) in the order they were stored (an
  evicted one keeps its place until the agent restarts; a gossiped copy takes one); a restarted
  agent shows what it showed before;
* its memory of the other peer holds each exchange answered and each broadcast received, once.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from context_os.context.evict import evict
from context_os.errors import MeshError
from context_os.mesh.agent import MeshAgent
from context_os.mesh.node import MeshConfig
from context_os.store.base import Store
from context_os.store.sqlite import SqliteStore
from context_os.store.xtdb import XtdbStore
from tests.helpers import wait_for
from tests.mesh.conftest import link, messages_of
from tests.reliability._adversarial import FUZZ, examples

pytestmark = pytest.mark.timeout(900)

NAMES = ("alice", "bob")
CAP = 4
HOW = ["answer", "answer", "refuse", "ignore", "restart"]
"""What the receiver's loop does with a request: answers it, refuses it, lets it time out, or its
agent restarts holding it."""
ANSWER_WAIT = 1.0
"""How long an agent's loop has to answer (``MeshConfig.answer_timeout``): a request it lets be
times out after this."""

steps = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.sampled_from(NAMES), st.sampled_from(HOW)),
        st.tuples(st.just("broadcast"), st.sampled_from(NAMES), st.just("")),
        st.tuples(st.just("evict"), st.sampled_from(NAMES), st.integers(0, 7).map(str)),
        st.tuples(st.just("restart"), st.sampled_from(NAMES), st.just("")),
        st.tuples(st.just("stop"), st.sampled_from(NAMES), st.just("")),
    ),
    min_size=3,
    max_size=14,
)


@dataclass
class Msg:
    """A message as the model says it is stored."""

    id: str
    text: str
    kind: str
    direction: str
    status: str | None = None
    error: bool | None = None


class Model:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.uid = uuid.uuid4().hex[:8]
        self.seeds = {n: os.urandom(32) for n in NAMES}
        self.agents = {n: self.start(n) for n in NAMES}
        link(*self.agents.values())
        self.stored: dict[str, list[Msg]] = {n: [] for n in NAMES}
        """Each agent's messages in the order stored, evicted ones taken out."""
        self.shown: dict[str, deque[str]] = {n: deque(maxlen=CAP) for n in NAMES}
        """The ids each agent shows, evicted ones too until it restarts (the model of its history)."""
        self.evicted: set[str] = set()
        self.remembered: dict[str, list[str]] = {n: [] for n in NAMES}
        """What each agent's memory holds of the other, in any order."""
        self.down: set[str] = set()
        """The agents stopped (closed, not started again yet)."""
        self.unheard: set[str] = set()
        """Broadcasts sent while the other agent was down: gossip may give it one when it comes
        back within seconds, or not; stored once at most, and left out of the checks."""
        self.n = 0

    def start(self, name: str) -> MeshAgent:
        config = MeshConfig(f"{name}-{self.uid}", seed=self.seeds[name], answer_timeout=ANSWER_WAIT)
        return MeshAgent(self.store, config, session=f"{self.uid}-{name}", history_cap=CAP).start()

    def close(self) -> None:
        for a in self.agents.values():
            a.close()

    def link(self) -> None:
        if not self.down:
            link(*self.agents.values())

    def other(self, name: str) -> str:
        return NAMES[1 - NAMES.index(name)]

    def marker(self) -> str:
        self.n += 1
        return f"M{self.n}x"

    def record(self, name: str, msg: Msg) -> None:
        self.stored[name].append(msg)
        self.shown[name].append(msg.id)

    def by_text(self, name: str, text: str) -> dict[str, Any]:
        """The one stored message of ``name`` whose text is ``text``."""
        found = [d for d in self.docs(name) if d["content"] == text]
        assert len(found) == 1, (name, text, found)
        return found[0]

    def docs(self, name: str) -> list[dict[str, Any]]:
        return messages_of(self.store, self.agents[name])

    # -- steps

    def send(self, sender: str, how: str) -> None:
        to = self.other(sender)
        a, b, m = self.agents[sender], self.agents[to], self.marker()
        heard: list[Any] = []
        if sender in self.down:
            return
        if to in self.down:
            with pytest.raises(MeshError):
                a.send(b.peer_id, f"ask {m}", timeout=5)
            failed = self.by_text(sender, f"ask {m}")
            self.record(sender, Msg(failed["id"], f"ask {m}", "request", "out", "failed", True))
            return

        def ask() -> None:
            try:
                heard.append(a.send(b.peer_id, f"ask {m}", timeout=30))
            except MeshError as e:
                heard.append(e)

        asker = threading.Thread(target=ask)
        asker.start()
        req = None
        while req is None and asker.is_alive():
            req = b.next_request(timeout=0.1)
        if req is None:  # its time was up before the loop could take it (stored slowly: a busy node)
            how = "ignore"
        assert req is None or req.message == f"ask {m}", req
        got = wait_for(lambda: [d for d in self.docs(to) if d["content"] == f"ask {m}"], f"{to} to store {m}")
        answer = {"answer": f"ok {m}", "refuse": f"no {m}"}.get(how)
        if answer is not None:
            assert req is not None
            req.answer(answer, error=how == "refuse")
        elif how == "restart":  # what waits is answered as the agent stops, and stored so
            self.record(to, Msg(got[0]["id"], f"ask {m}", "request", "in", "failed"))
            self.restart(to)
        asker.join(30)
        assert not asker.is_alive() and len(heard) == 1, heard
        out = heard[0]
        assert isinstance(out, dict), out
        request, reply = out["objects"]
        if how in ("ignore", "restart"):
            said = "[timeout] no answer within" if how == "ignore" else "[error] the agent stopped"
            assert out["error"] and out["response"].startswith(said), out
            answer = out["response"]
        else:
            assert (out["response"], out["error"]) == (answer, how == "refuse"), out
        self.record(sender, Msg(request, f"ask {m}", "request", "out", "answered"))
        self.record(sender, Msg(reply, answer, "reply", "in", error=True if how != "answer" else None))
        if how == "restart":
            return
        status = {"answer": "answered", "refuse": "refused by the agent", "ignore": "timed out"}[how]
        self.record(to, Msg(got[0]["id"], f"ask {m}", "request", "in", status))
        if how != "ignore":
            mine = self.by_text(to, answer)
            self.record(to, Msg(mine["id"], answer, "reply", "out", error=True if how == "refuse" else None))
        if how == "answer":
            for n in (sender, to):
                self.remembered[n].append(f"[Request] ask {m}\n[Response] ok {m}")

    def broadcast(self, sender: str) -> None:
        to, m = self.other(sender), self.marker()
        if sender in self.down:
            return
        out = self.agents[sender].broadcast(f"news {m}", "event")
        self.record(sender, Msg(out["object"], f"news {m}", "broadcast", "out"))
        if to in self.down:
            self.unheard.add(f"news {m}")
            return
        got = wait_for(lambda: [d for d in self.docs(to) if d["content"] == f"news {m}"], f"{to} to hear {m}")
        self.record(to, Msg(got[0]["id"], f"news {m}", "broadcast", "in"))
        self.remembered[to].append(f"[event] news {m}")

    def evict(self, name: str, k: int) -> None:
        if not self.stored[name]:
            return
        msg = self.stored[name].pop(k % len(self.stored[name]))
        evict(self.store, msg.id)
        self.evicted.add(msg.id)

    def restart(self, name: str) -> None:
        self.agents[name].close()
        self.agents[name] = self.start(name)
        self.down.discard(name)
        self.link()
        self.shown[name] = deque((m.id for m in self.stored[name]), maxlen=CAP)

    def stop(self, name: str) -> None:
        self.agents[name].close()
        self.down.add(name)

    # -- the checks

    def check(self) -> None:
        for name in NAMES:
            agent, want = self.agents[name], {m.id: m for m in self.stored[name]}

            def held(name: str = name) -> dict[str, Msg]:
                docs = self.docs(name)
                gossiped = [d for d in docs if d["content"] in self.unheard and d["meta"]["direction"] == "in"]
                assert len(gossiped) == len({d["content"] for d in gossiped}), gossiped  # once at most
                return {d["id"]: _as_stored(d) for d in docs if d not in gossiped}

            settles(held, want)  # a status written after the answer went out (a timeout): off the network's thread
            # a gossiped copy takes a place in the window as any message does: the rest shown is
            # the newest of those the model shows (an evicted one keeps its place until a restart)
            messages = agent.messages()
            gossiped = {m["id"] for m in messages if m["text"] in self.unheard and m["direction"] == "in"}
            shown, model = [m["id"] for m in messages if m["id"] not in gossiped], list(self.shown[name])
            assert len(shown) == min(len(model), CAP - len(gossiped)), (name, messages)
            assert shown == model[len(model) - len(shown) :], (name, messages)
            other = self.agents[self.other(name)].peer_id

            def remembered(agent: MeshAgent = agent, other: str = other) -> list[str]:
                values = (e.value for e in agent.memory.get(other))
                return sorted(v for v in values if v.removeprefix("[event] ") not in self.unheard)

            settles(remembered, sorted(self.remembered[name]))  # a broadcast is remembered once it is stored


def settles(get: Callable[[], Any], want: Any) -> None:
    """``get()`` comes to equal ``want`` within 5 s (else the assertion shows how they differ)."""
    deadline = time.monotonic() + 5
    while get() != want and time.monotonic() < deadline:
        time.sleep(0.01)
    assert get() == want


def _as_stored(d: dict[str, Any]) -> Msg:
    meta = d["meta"]
    error = bool(meta.get("error")) or None  # a reply's flag; a failed request's error, said
    return Msg(d["id"], d["content"], meta["kind"], meta["direction"], meta.get("status"), error)


def run(steps: list[tuple[str, str, str]], store: Store) -> None:
    model = Model(store)
    try:
        for what, name, arg in steps:
            if what == "send":
                model.send(name, arg)
            elif what == "broadcast":
                model.broadcast(name)
            elif what == "evict":
                model.evict(name, int(arg))
            elif what == "stop":
                model.stop(name)
            else:
                model.restart(name)
            model.check()
    finally:
        model.close()


@settings(FUZZ, max_examples=examples(12))
@given(steps=steps)
def test_two_agents_store_show_and_remember_their_messages_as_the_model_says(steps: list[tuple[str, str, str]]) -> None:
    with tempfile.TemporaryDirectory() as d, SqliteStore(Path(d) / "store.db") as store:
        run(steps, store)


@pytest.mark.xtdb
def test_two_agents_store_show_and_remember_their_messages_as_the_model_says_on_xtdb(
    xtdb_url: str, xtdb_sidecar: Path
) -> None:
    """As above, on a real XTDB node."""
    with XtdbStore(xtdb_url, text_index_path=xtdb_sidecar) as store:

        @settings(FUZZ, max_examples=examples(5))
        @given(steps=steps)
        def on_xtdb(steps: list[tuple[str, str, str]]) -> None:
            run(steps, store)

        on_xtdb()
