"""The mesh beyond TCP on one network: WebSocket connections (``MeshConfig.ws_port``), secure
ones (``tls_cert``, ``tls_ca``) and discovery through a Kademlia DHT (``MeshConfig.dht``),
between real py-libp2p peers. Their interop with js-libp2p is in test_js_interop.py."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from context_os.errors import ConfigError, MeshError
from context_os.mesh.node import MeshConfig, MeshNode, _free_port, layers, rendezvous_key
from context_os.mesh.pnet import new_swarm_key, read_swarm_key
from tests.helpers import self_signed_certificate
from tests.mesh.conftest import wait_for

pytestmark = pytest.mark.timeout(120)


def _over_websocket(node: MeshNode, peer: str) -> bool:
    """Whether ``node``'s connection to ``peer`` runs over a WebSocket: under the muxer, the
    security and the private network lies py-libp2p's WebSocket connection."""
    from libp2p.peer.id import ID
    from libp2p.transport.websocket.connection import P2PWebSocketConnection

    (conn,) = node._network.get_connections_map()[ID.from_base58(peer)]
    return any(isinstance(x, P2PWebSocketConnection) for x in layers(conn))


def _talk_both_ways(client: MeshNode, server: MeshNode, how: str) -> None:
    """Requests both ways over the connection ``client`` dialled, and a broadcast of its."""
    assert (
        client.request(server.peer_id, f"over {how}?").message
        == f"{server.config.agent_name.split('-')[0]} got over {how}?"
    )
    assert (
        server.request(client.peer_id, "and back?").message == f"{client.config.agent_name.split('-')[0]} got and back?"
    )
    got: list[str] = []
    server.on_broadcast = lambda peer, b: got.append(b.message)
    wait_for(lambda: server.peer_id in client.topic_peers(), f"the topic mesh over {how}")
    client.broadcast(f"to all, over {how}")
    wait_for(lambda: got == [f"to all, over {how}"], f"the broadcast over {how}")


def test_peers_talk_over_websocket_both_ways(nodes: Any) -> None:
    ws_port = _free_port("127.0.0.1")
    server = nodes("server", ws_port=ws_port)
    ws = [a for a in server.addrs if "/ws/" in a]
    assert ws == [f"/ip4/127.0.0.1/tcp/{ws_port}/ws/p2p/{server.peer_id}"]
    assert len(server.addrs) == 2  # and TCP, on a port of its own
    client = nodes("client")  # listens on TCP only, dials WebSocket addresses all the same
    assert all("/ws/" not in a for a in client.addrs)
    assert client.connect(ws[0]) == server.peer_id
    assert _over_websocket(client, server.peer_id)
    _talk_both_ways(client, server, "ws")


def test_peers_talk_over_secure_websocket_with_a_certificate_they_trust(nodes: Any, tmp_path: Path) -> None:
    import trio

    cert, key = self_signed_certificate(tmp_path)
    server = nodes("server", ws_port=0, tls_cert=cert, tls_key=key)
    (wss,) = [a for a in server.addrs if "/wss/" in a]
    (tcp,) = [a for a in server.addrs if "/wss/" not in a]
    assert tcp.split("/tcp/")[1].split("/")[0] != wss.split("/tcp/")[1].split("/")[0]  # a port of its own
    client = nodes("client", tls_ca=cert)
    assert client.connect(wss) == server.peer_id
    (conn,) = client._network.get_connections_map().values()
    assert any(isinstance(x, trio.SSLStream) for x in layers(conn[0]))  # TLS under libp2p's own security
    _talk_both_ways(client, server, "wss")
    sockets = client._open_sockets()
    assert sockets  # found under the TLS stream: closed for sure when the node stops
    client.close()
    assert all(s.socket.fileno() == -1 for s in sockets)


def test_a_certificate_the_dialler_does_not_trust_is_refused_and_said(nodes: Any, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    cert, key = self_signed_certificate(tmp_path)
    other_ca, _ = self_signed_certificate(tmp_path / "other")
    server = nodes("server", ws_port=0, tls_cert=cert, tls_key=key)
    wss = next(a for a in server.addrs if "/wss/" in a)
    for dialler in (nodes("system-cas"), nodes("other-ca", tls_ca=other_ca)):
        with pytest.raises(MeshError, match=r"the peer's TLS certificate is not trusted \(self-signed certificate\)"):
            dialler.connect(wss, timeout=5)
        assert dialler.connected() == []
    assert server.connected() == []


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"ws_port": 0, "tls_cert": "c.pem"}, "a TLS certificate needs its key"),
        ({"ws_port": 0, "tls_key": "k.pem"}, "a TLS certificate needs its key"),
        ({"tls_cert": "c.pem", "tls_key": "k.pem"}, "give ws_port too"),
        ({"port": 4001, "ws_port": 4001, "tls_cert": "c.pem", "tls_key": "k.pem"}, "a port of its own"),
    ],
)
def test_a_tls_setting_without_what_it_needs_is_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MeshConfig("x", **config)


def test_tls_files_that_cannot_serve_are_refused_before_the_node_starts(tmp_path: Path) -> None:
    cert, key = self_signed_certificate(tmp_path)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cases = [
        ({"tls_cert": tmp_path / "gone.pem", "tls_key": key}, "gone.pem and key .*: cannot be read"),
        ({"tls_cert": junk, "tls_key": key}, "not a PEM certificate and its key"),
        ({"tls_cert": key, "tls_key": cert}, "not a PEM certificate and its key"),
        ({"tls_ca": junk}, "TLS CA file .*junk.pem: no PEM certificate in it"),
        ({"tls_ca": tmp_path / "gone.pem"}, "TLS CA file .*gone.pem: cannot be read"),
    ]
    for config, message in cases:
        with pytest.raises(ConfigError, match=message):
            MeshNode(MeshConfig("x", ws_port=0, **config))


def test_tcp_and_websocket_share_one_port_when_asked(nodes: Any) -> None:
    port = _free_port("127.0.0.1")
    node = nodes("both", port=port, ws_port=port)
    assert sorted(node.addrs) == sorted(
        [f"/ip4/127.0.0.1/tcp/{port}/p2p/{node.peer_id}", f"/ip4/127.0.0.1/tcp/{port}/ws/p2p/{node.peer_id}"]
    )
    for addr in node.addrs:
        other = nodes("dialer")
        assert other.connect(addr) == node.peer_id
        assert _over_websocket(other, node.peer_id) == ("/ws/" in addr)
        assert other.request(node.peer_id, "which way?").message == "both got which way?"


def test_a_private_network_holds_over_websocket_and_logs_nothing(
    nodes: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The private network's protector wraps WebSocket connections as TCP ones. It also answers
    the connection type the swarm asks of every connection: without it the swarm kept no
    addresses for the connection, and py-libp2p's identify logged a warning on the root logger
    for every connection a node with a private network took."""
    for name in ("swarm.key", "other.key"):
        (tmp_path / name).write_text(new_swarm_key())
        (tmp_path / name).chmod(0o600)
    key, other = read_swarm_key(tmp_path / "swarm.key"), read_swarm_key(tmp_path / "other.key")
    caplog.set_level(logging.WARNING)
    server = nodes("server", ws_port=_free_port("127.0.0.1"), psk=key)
    member = nodes("member", psk=key)
    for addr in server.addrs:  # TCP, then WebSocket, from two members
        dialer = member if "/ws/" not in addr else nodes("member2", psk=key)
        assert dialer.connect(addr) == server.peer_id
        assert dialer.request(server.peer_id, "in?").message == "server got in?"
    ws = next(a for a in server.addrs if "/ws/" in a)
    for outsider in (nodes("stranger", psk=other), nodes("open")):
        with pytest.raises(MeshError):
            outsider.connect(ws, timeout=3)
    assert [r.getMessage() for r in caplog.records if r.name == "root"] == []


def test_the_dht_finds_the_topics_peers_beyond_the_bootstrap_peer(nodes: Any) -> None:
    """Three peers that each know only the first find each other through the DHT; a peer on
    another topic is no topic peer of theirs (the DHT's own queries may connect to it: it is a
    DHT server like them), and a peer without the DHT is never dialled."""
    hub = nodes("hub", dht=True, dht_interval=0.5)
    joins = dict(dht=True, dht_interval=0.5, bootstrap=(hub.addrs[0],))
    b, c = nodes("b", **joins), nodes("c", **joins, ws_port=0)
    elsewhere = nodes("elsewhere", **joins, topic="another-topic")
    quiet = nodes("quiet", bootstrap=(hub.addrs[0],))
    wait_for(lambda: c.peer_id in b.connected() and b.peer_id in c.connected(), "b and c through the DHT", timeout=30)
    wait_for(lambda: min(n.dht_rounds for n in (b, c, elsewhere)) >= 3, "three rounds each", timeout=30)
    for node in (b, c):
        assert elsewhere.peer_id not in node.topic_peers() and quiet.peer_id not in node.connected()
    assert elsewhere.topic_peers() == [] and quiet.connected() == [hub.peer_id]
    # what the DHT found is a topic peer like any other: a broadcast goes to it directly
    got: list[str] = []
    c.on_broadcast = lambda peer, m: got.append(m.message)
    wait_for(lambda: c.peer_id in b.topic_peers(), "c in b's topic mesh")
    b.broadcast("found you")
    wait_for(lambda: got == ["found you"], "b's broadcast at c")
    found = b.peer(c.peer_id)
    assert found is not None and found.status == "connected"


def test_without_the_dht_the_peers_of_a_bootstrap_peer_stay_unknown(nodes: Any) -> None:
    """What the DHT test shows is the DHT's doing: the same three peers without it."""
    hub = nodes("hub")
    b, c = nodes("b", bootstrap=(hub.addrs[0],)), nodes("c", bootstrap=(hub.addrs[0],))
    wait_for(lambda: b.peer_id in hub.connected() and c.peer_id in hub.connected(), "both at the hub")
    assert hub.dht_rounds == 0 and c.peer_id not in b.connected() and b.peer(c.peer_id) is None


def test_the_rendezvous_key_is_the_topics_sha256_multihash() -> None:
    import hashlib

    key = rendezvous_key("pi-broadcast")
    assert key == "1220" + hashlib.sha256(b"/context_os/mesh/pi-broadcast").hexdigest()
    assert rendezvous_key("other") != key


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"ws_port": 70000}, "ws_port 70000 is not a TCP port"),
        ({"ws_port": -1}, "ws_port -1 is not a TCP port"),
        ({"port": True}, "port True is not a TCP port"),
        ({"dht_interval": 0}, "dht_interval must be positive"),
    ],
)
def test_bad_websocket_and_dht_settings_are_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MeshConfig("x", **config)


def test_a_websocket_port_another_listens_on_is_refused(nodes: Any) -> None:
    first = nodes("first", ws_port=_free_port("127.0.0.1"))
    taken = int(next(a for a in first.addrs if "/ws/" in a).split("/tcp/")[1].split("/")[0])
    with pytest.raises(ConfigError, match=f"port {taken} on 127.0.0.1 is in use"):
        MeshNode(MeshConfig("second", ws_port=taken)).start()


def test_at_the_default_interval_peers_that_start_together_find_each_other_before_it_ends(nodes: Any) -> None:
    """A node's first round comes at start, before its bootstrap peers are dialled: its routing
    table is empty, and it tries again within a second rather than an interval (30 s) later.
    Before, two peers joining through a third met only at their second round, 30 s on."""
    assert MeshConfig("x").dht_interval == 30.0
    hub = nodes("hub", dht=True)
    b = nodes("b", dht=True, bootstrap=(hub.addrs[0],))
    c = nodes("c", dht=True, bootstrap=(hub.addrs[0],))
    wait_for(lambda: c.peer_id in b.connected(), "b and c through the DHT", timeout=15)


def test_mesh_discover_searches_the_dht_now(nodes: Any, tmp_path: Path, uid: str) -> None:
    """The seed's ``mesh_discover`` scans for new peers: with the DHT it runs a round at once
    rather than at the next interval (an hour here), and reports what is known then."""
    from context_os.mesh.agent import MeshAgent
    from context_os.store.sqlite import SqliteStore

    hub = nodes("hub", dht=True, dht_interval=3600)
    config = MeshConfig(f"seeker-{uid}", dht=True, dht_interval=3600, bootstrap=(hub.addrs[0],))
    with SqliteStore(tmp_path / "s.db") as store, MeshAgent(store, config) as seeker:
        wait_for(lambda: seeker.node.dht_rounds >= 1 and hub.peer_id in seeker.node.connected(), "a round")
        rounds = seeker.node.dht_rounds
        out = seeker.discover()
        assert out["dhtSearched"] is True and seeker.node.dht_rounds >= rounds + 1
        assert hub.peer_id in {p["peerId"] for p in out["peers"]}
        rounds = seeker.node.dht_rounds
        assert seeker.node.dht_round(timeout=10) and seeker.node.dht_rounds >= rounds + 1
    plain = nodes("plain")
    assert plain.dht_round() is False
    with SqliteStore(tmp_path / "p.db") as store, MeshAgent(store, MeshConfig(f"nodht-{uid}")) as agent:
        assert agent.discover()["dhtSearched"] is None
