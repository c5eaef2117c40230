"""A context_os agent (py-libp2p) and a js-libp2p 3 peer (the seed's own stack, tests/mesh/js)
understand each other: direct messages both ways, broadcasts both ways, the same private network,
the same identity from the same seed.

Node and the js packages are provisioned like Pi's (scripts/node.sh, then ``npm ci`` in
tests/mesh/js when its packages are missing or differ from the lockfile); under CI=true a
failure to provision fails these tests, elsewhere it skips them.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_os.errors import MeshError
from context_os.mesh.agent import MeshAgent
from context_os.mesh.node import MeshConfig, MeshNode, rendezvous_key
from context_os.store.sqlite import SqliteStore
from tests.helpers import provisioning, self_signed_certificate, unavailable
from tests.mesh.conftest import Answerer, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "tests" / "mesh" / "js"


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}")
    return proc.stdout


def _installed_matches_lock() -> bool:
    lock = json.loads((JS / "package-lock.json").read_text())
    for name, entry in lock["packages"].items():
        if not name.startswith("node_modules/") or name.count("node_modules/") > 1:
            continue
        try:
            have = json.loads((JS / name / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            return False
        if have != entry.get("version"):
            return False
    return True


@pytest.fixture(scope="module")
def node_bin() -> Path:
    """A Node >= 22 with the js peer's packages installed."""
    try:
        with provisioning():
            out = _run(["bash", str(ROOT / "scripts" / "node.sh")], cwd=ROOT).strip()
            bin_dir = Path(out.splitlines()[-1])
            if not _installed_matches_lock():
                env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
                _run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS, env=env)
        return bin_dir
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:  # pragma: no cover - depends on the machine
        unavailable("the js-libp2p peer", e)


class JsPeer:
    """tests/mesh/js/peer.mjs in a subprocess: commands in, JSON lines out."""

    def __init__(self, node_bin: Path, *args: str, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(
            [str(node_bin / "node"), str(JS / "peer.mjs"), *args],
            cwd=JS,
            env={**os.environ, **(env or {})},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self.broadcasts: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stderr = threading.Thread(target=lambda: self.proc.stderr and self.proc.stderr.read(), daemon=True)
        self._stderr.start()
        ready = self.answers.get(timeout=60)
        assert "ready" in ready, ready
        self.peer_id: str = ready["ready"]["peerId"]
        self.addrs: list[str] = [a if "/p2p/" in a else f"{a}/p2p/{self.peer_id}" for a in ready["ready"]["addrs"]]
        self.addr: str = next(a for a in self.addrs if "/ws/" not in a)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            if "broadcast" in msg:
                self.broadcasts.append(msg["broadcast"])
            elif "request" in msg:
                self.requests.append(msg["request"])
            else:
                self.answers.put(msg)

    def do(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self.answers.get(timeout=60)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(10)
        self._stderr.join(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def js(node_bin: Path) -> Iterator[Any]:
    made: list[JsPeer] = []

    def make(*args: str, env: dict[str, str] | None = None) -> JsPeer:
        peer = JsPeer(node_bin, *args, env=env)
        made.append(peer)
        return peer

    yield make
    for peer in made:
        peer.close()


def test_direct_messages_and_broadcasts_both_ways(js: Any, tmp_path: Path) -> None:
    peer = js()
    with SqliteStore(tmp_path / "py.db") as store, MeshAgent(store, MeshConfig("py")) as agent:
        answers = Answerer(agent, lambda r: f"py read: {r.message}")
        try:
            assert agent.node.connect(peer.addr) == peer.peer_id
            # py -> js: the seed's framing and fields, answered and stored
            out = agent.send(peer.peer_id, "hello js")
            assert out["response"] == "[js] Received: hello js" and out["agentName"] == "js"
            # the peer prints what it received before it answers, but its stdout is read by a
            # thread of ours that may not have got there when the answer arrives over the network
            wait_for(lambda: peer.requests, "js to report the request", timeout=30)
            assert peer.requests[0]["fromPeerId"] == agent.peer_id and peer.requests[0]["fromAgent"] == "py"
            # js -> py: a request the agent's loop answers
            got = peer.do({"send": {"peer": agent.peer_id, "message": "hello py"}})
            assert got["ok"]["response"]["message"] == "py read: hello py"
            assert got["ok"]["response"]["fromPeerId"] == agent.peer_id and got["ok"]["response"]["error"] is False
            # broadcasts: the topic mesh forms across both stacks
            wait_for(lambda: peer.peer_id in agent.node.topic_peers(), "the js peer on the topic", timeout=30)
            wait_for(
                lambda: agent.peer_id in peer.do({"subscribers": True})["ok"]["subscribers"],
                "the py peer on the js topic",
                timeout=30,
            )
            agent.broadcast("from py to everyone", "event")
            wait_for(lambda: peer.broadcasts, "js to get the broadcast", timeout=30)
            assert peer.broadcasts[0]["message"] == "from py to everyone" and peer.broadcasts[0]["type"] == "event"
            wait_for(
                lambda: (
                    peer.do({"publish": "from js"})
                    and any(m["kind"] == "broadcast" and m["direction"] == "in" for m in agent.messages())
                ),
                "py to get a js broadcast",
                timeout=30,
            )
        finally:
            answers.stop()
        kinds = sorted((m["direction"], m["kind"]) for m in agent.messages())
        assert ("in", "request") in kinds and ("out", "reply") in kinds and ("in", "broadcast") in kinds
        assert agent.node.counts["rejected"] == 0


def test_the_same_private_network_key_works_across_and_another_does_not(js: Any, tmp_path: Path) -> None:
    key, other = os.urandom(32), os.urandom(32)
    inside, outside = js("--psk", key.hex()), js("--psk", other.hex())
    with MeshNode(MeshConfig("py", psk=key)) as node:
        assert node.connect(inside.addr) == inside.peer_id
        assert node.request(inside.peer_id, "in the club?").message == "[js] Received: in the club?"
        with pytest.raises(MeshError):
            node.connect(outside.addr, timeout=3)
        # and js dialling py: with the key it gets in, without it it does not
        assert inside.do({"send": {"peer": node.peer_id, "message": "x"}})["ok"]["response"]["error"] is False
        assert "error" in outside.do({"dial": node.addrs[0]})


def test_the_same_seed_is_the_same_peer_id_in_both(js: Any) -> None:
    seed = os.urandom(32)
    peer = js("--seed", seed.hex())
    assert MeshNode(MeshConfig("py", seed=seed)).peer_id == peer.peer_id


def test_websocket_connections_both_ways(js: Any, uid: str) -> None:
    """A js-libp2p peer listening on WebSocket is dialled there by a node that listens on TCP
    only; a node listening on WebSocket is dialled there by js. Requests go both ways over each."""
    peer = js("--ws")
    js_ws = next(a for a in peer.addrs if "/ws/" in a)
    with (
        MeshNode(MeshConfig(f"py-{uid}"), on_request=lambda p, r: f"py: {r.message}") as tcp_only,
        MeshNode(MeshConfig(f"pyws-{uid}", ws_port=0), on_request=lambda p, r: f"pyws: {r.message}") as listener,
    ):
        assert tcp_only.connect(js_ws) == peer.peer_id
        assert tcp_only.request(peer.peer_id, "over ws").message == "[js] Received: over ws"
        assert (
            peer.do({"send": {"peer": tcp_only.peer_id, "message": "back"}})["ok"]["response"]["message"] == "py: back"
        )
        py_ws = next(a for a in listener.addrs if "/ws/" in a)
        assert peer.do({"dial": py_ws})["ok"]["peer"] == listener.peer_id
        assert (
            peer.do({"send": {"peer": listener.peer_id, "message": "to ws"}})["ok"]["response"]["message"]
            == "pyws: to ws"
        )
        assert listener.request(peer.peer_id, "from ws").message == "[js] Received: from ws"


def test_js_dials_a_secure_websocket_with_the_certificate_node_trusts(js: Any, uid: str, tmp_path: Path) -> None:
    """js-libp2p's WebSocket transport dials our wss listener with Node's own TLS: verified
    against the CAs Node trusts (NODE_EXTRA_CA_CERTS adds the file); without it, refused."""
    cert, key = self_signed_certificate(tmp_path)
    config = MeshConfig(f"pywss-{uid}", ws_port=0, tls_cert=cert, tls_key=key)
    with MeshNode(config, on_request=lambda p, r: f"pywss: {r.message}") as listener:
        wss = next(a for a in listener.addrs if "/wss/" in a)
        untrusting = js()
        # (js-libp2p says only "Received network error or non-101 status code"; the peer below
        # differs from this one in the CA file alone)
        assert "error" in untrusting.do({"dial": wss})
        peer = js(env={"NODE_EXTRA_CA_CERTS": str(cert)})
        assert peer.do({"dial": wss})["ok"]["peer"] == listener.peer_id
        answer = peer.do({"send": {"peer": listener.peer_id, "message": "over wss"}})
        assert answer["ok"]["response"]["message"] == "pywss: over wss"
        assert listener.request(peer.peer_id, "and back").message == "[js] Received: and back"


def test_circuit_relays_work_across_both_ways(js: Any, uid: str) -> None:
    """js reserves a slot on a context_os relay and a context_os node reaches it through it; a
    context_os node reserves a slot on a js relay (@libp2p/circuit-relay-v2), told of it or
    finding it among its peers, and js reaches it."""
    with (
        MeshNode(MeshConfig(f"pyrelay-{uid}", relay_service=True)) as relay,
        MeshNode(MeshConfig(f"pycaller-{uid}")) as caller,
    ):
        hidden_js = js("--relay", relay.addrs[0])

        def js_relayed() -> str | None:
            return next((a for a in hidden_js.do({"addrs": True})["ok"]["addrs"] if "/p2p-circuit" in a), None)

        wait_for(js_relayed, "js's reservation on the context_os relay")
        assert caller.connect(f"{relay.addrs[0]}/p2p-circuit/p2p/{hidden_js.peer_id}") == hidden_js.peer_id
        assert caller.request(hidden_js.peer_id, "through py").message == "[js] Received: through py"

    js_relay = js("--relay-service")
    config = MeshConfig(f"pyhidden-{uid}", relays=(js_relay.addr,))
    with MeshNode(config, on_request=lambda p, r: f"py: {r.message}") as hidden:
        addr = wait_for(lambda: next(iter(hidden.relayed_addrs()), None), "the reservation on the js relay")
        caller_js = js()
        assert caller_js.do({"dial": addr})["ok"]["peer"] == hidden.peer_id
        answer = caller_js.do({"send": {"peer": hidden.peer_id, "message": "through js"}})
        assert answer["ok"]["response"]["message"] == "py: through js"
    # a node that knows no relay finds the js relay among its peers (identify lists its hop protocol)
    with MeshNode(MeshConfig(f"pyfinder-{uid}", auto_relays=1, bootstrap=(js_relay.addr,))) as finder:
        addr = wait_for(lambda: next(iter(finder.relayed_addrs()), None), "a reservation on the js relay it found")
        assert addr == f"{js_relay.addr}/p2p-circuit/p2p/{finder.peer_id}"
        assert js().do({"dial": addr})["ok"]["peer"] == finder.peer_id


def test_the_dht_is_shared_with_js_and_finds_peers_through_it(js: Any, uid: str) -> None:
    """A js-libp2p peer runs the DHT (@libp2p/kad-dht on py-libp2p's /ipfs/kad/1.0.0). Two nodes
    that know only the js peer, over WebSocket, find each other through it. js finds both as
    providers of the topic's rendezvous key, under the same key as its own announcement of the
    CID of those bytes (js's ``contentRouting.provide``)."""
    peer = js("--ws", "--dht")
    key = rendezvous_key("pi-broadcast")
    js_ws = next(a for a in peer.addrs if "/ws/" in a)
    joins: dict[str, Any] = {"dht": True, "dht_interval": 0.5, "bootstrap": (js_ws,)}
    with MeshNode(MeshConfig(f"a-{uid}", **joins)) as a, MeshNode(MeshConfig(f"b-{uid}", **joins)) as b:
        wait_for(
            lambda: b.peer_id in a.connected() and a.peer_id in b.connected(), "a and b through js's DHT", timeout=30
        )
        assert peer.do({"provide": key}) == {"ok": {"provided": True}}
        found = {p["peer"] for p in peer.do({"providers": key})["ok"]["providers"]}
        assert {a.peer_id, b.peer_id, peer.peer_id} <= found
        got: list[str] = []
        b.on_broadcast = lambda p, m: got.append(m.message)
        wait_for(lambda: b.peer_id in a.topic_peers(), "b in a's topic mesh")
        a.broadcast("met through js")
        wait_for(lambda: got == ["met through js"], "a's broadcast at b")
