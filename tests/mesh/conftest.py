"""Real mesh peers for the tests: each a ``MeshAgent`` on 127.0.0.1 (a free port), closed after
the test. libp2p is imported here unconditionally: without it these tests fail, never skip."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import libp2p  # noqa: F401 - the stack under test: missing, the tests fail
import pytest

from context_os.mesh.agent import MeshAgent
from context_os.mesh.node import MeshConfig, MeshNode
from context_os.store.base import Store
from tests.helpers import wait_for

AgentFactory = Callable[..., MeshAgent]


@pytest.fixture
def agents(store: Store, uid: str) -> Iterator[AgentFactory]:
    """Make started agents named ``<name>-<uid>`` (names are scopes in a shared store)."""
    made: list[MeshAgent] = []

    def make(name: str, *, session: str | None = None, **kwargs: Any) -> MeshAgent:
        config_args = {
            k: kwargs.pop(k)
            for k in ("seed", "psk", "mdns", "topic", "port", "answer_timeout", "broadcast_rate")
            if k in kwargs
        }
        agent = MeshAgent(store, MeshConfig(f"{name}-{uid}", **config_args), session=session, **kwargs)
        made.append(agent)
        return agent.start()

    yield make
    for agent in made:
        agent.close()


@pytest.fixture
def nodes(uid: str) -> Iterator[Any]:
    """Make started nodes named ``<name>-<uid>`` that answer a request with ``<name> got
    <message>``, closed after the test (the last made first)."""
    made: list[MeshNode] = []

    def make(name: str, **config: Any) -> MeshNode:
        node = MeshNode(MeshConfig(f"{name}-{uid}", **config), on_request=lambda peer, req: f"{name} got {req.message}")
        made.append(node)
        return node.start()

    yield make
    for node in reversed(made):
        node.close()


def messages_of(store: Store, agent: MeshAgent) -> list[dict[str, Any]]:
    """Every message ``agent`` stored, in the order stored (by ``at``, then id)."""
    docs = [v.doc for v in store.find(kind="message", where={"mesh_agent": agent.name}) if v.doc is not None]
    return sorted(docs, key=lambda d: (d["meta"]["at"], d["id"]))


def link(*agents: MeshAgent) -> None:
    """Connect every agent to every other and wait until the topic mesh holds them all."""
    for i, a in enumerate(agents):
        for b in agents[i + 1 :]:
            a.node.connect(b.node.addrs[0])
    for a in agents:
        others = {b.peer_id for b in agents if b is not a}
        wait_for(lambda a=a, others=others: others <= set(a.node.topic_peers()), f"{a.name}'s topic mesh")


class Answerer:
    """An agent's loop in a thread: takes each request, answers with ``reply(request)``."""

    def __init__(self, agent: MeshAgent, reply: Callable[[Any], str]):
        self.agent, self.reply = agent, reply
        self.seen: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            req = self.agent.next_request(timeout=0.05)
            if req is not None:
                self.seen.append(req)
                req.answer(self.reply(req))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
