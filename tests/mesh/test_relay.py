"""Circuit relay v2 between real py-libp2p peers: a peer that cannot be dialled reserves a slot on
a relay (``MeshConfig.relays``), and others reach it through the relay's node
(``relay_service``) at its ``/p2p-circuit`` address."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import pytest

from context_os.errors import ConfigError, MeshError
from context_os.mesh.node import MeshConfig, MeshNode, _free_port
from tests.mesh.conftest import wait_for

pytestmark = pytest.mark.timeout(120)

RELAYED: dict[str, Any] = {"hole_punch": False}
"""For the tests of the relay itself: connections through it stay relayed (no hole punching)."""


def _relayed(node: MeshNode) -> str:
    """The node's address through its relay, once the relay holds its reservation."""
    return wait_for(lambda: next(iter(node.relayed_addrs()), None), "the relay's reservation")


def _stop_listening(node: MeshNode) -> None:
    """The node takes no connection any more (as behind NAT); it can still dial out."""
    node._call(node._stop_listening, timeout=5, what="closing its listeners")


def test_a_peer_is_reached_through_its_relay_both_ways_and_on_the_topic(nodes: Any) -> None:
    relay = nodes("relay", relay_service=True)
    hidden = nodes("hidden", relays=(relay.addrs[0],), **RELAYED)
    addr = _relayed(hidden)
    assert addr == f"{relay.addrs[0]}/p2p-circuit/p2p/{hidden.peer_id}" and addr in hidden.addrs
    other = nodes("other", **RELAYED)
    assert other.connect(addr) == hidden.peer_id
    assert other.request(hidden.peer_id, "through the relay?").message == "hidden got through the relay?"
    assert hidden.request(other.peer_id, "and back?").message == "other got and back?"
    got: dict[str, list[str]] = {"hidden": [], "other": []}
    hidden.on_broadcast = lambda peer, b: got["hidden"].append(b.message)
    other.on_broadcast = lambda peer, b: got["other"].append(b.message)
    wait_for(lambda: hidden.peer_id in other.topic_peers() and other.peer_id in hidden.topic_peers(), "the topic")
    other.broadcast("to the hidden one")
    hidden.broadcast("from the hidden one")
    wait_for(lambda: got == {"hidden": ["to the hidden one"], "other": ["from the hidden one"]}, "both broadcasts")
    # the relay carries the connection: it is connected to both, and they never dialled each other
    assert {hidden.peer_id, other.peer_id} <= set(relay.connected())
    assert all("/p2p-circuit/" not in a for a in other.peer(hidden.peer_id).addrs if a != addr)
    assert other.peer(hidden.peer_id).relayed and hidden.peer(other.peer_id).relayed  # type: ignore[union-attr]
    assert other.peer(hidden.peer_id).public()["relayed"] is True  # type: ignore[union-attr]


def test_a_peer_nobody_can_dial_in_to_is_found_through_the_dht_and_reached_through_its_relay(nodes: Any) -> None:
    """Its addresses through its relays are its own: identify tells them, its DHT provider record
    holds them, and a peer that finds it there dials it through the relay when it cannot dial it
    directly (here: it stopped listening, as a peer behind NAT cannot be dialled)."""
    joins: dict[str, Any] = {"dht": True, "dht_interval": 0.5}
    relay = nodes("relay", relay_service=True, **joins)
    hidden = nodes("hidden", relays=(relay.addrs[0],), bootstrap=(relay.addrs[0],), **joins)
    addr = _relayed(hidden)

    _stop_listening(hidden)
    assert hidden.addrs == [addr]
    wait_for(lambda: hidden.dht_reached >= 2, "its announcement with only the relayed address")
    finder = nodes("finder", bootstrap=(relay.addrs[0],), **joins)
    wait_for(lambda: hidden.peer_id in finder.connected(), "the finder connected to it through the DHT")
    assert finder.request(hidden.peer_id, "found you").message == "hidden got found you"
    # (they may meet as the hidden one dials the finder: it can dial out) a peer whose only
    # address of it is the relayed one, as its record now gives it, dials it through the relay
    import multiaddr
    from libp2p.peer.id import ID
    from libp2p.peer.peerinfo import PeerInfo

    other = nodes("other")
    info = PeerInfo(ID.from_base58(hidden.peer_id), [multiaddr.Multiaddr(addr)])
    other._call(other._dial_info, info, timeout=15, what="dialling what the record gives")
    assert hidden.peer_id in other.connected()
    assert other.request(hidden.peer_id, "through its record").message == "hidden got through its record"


def test_a_peer_behind_a_relay_is_reached_again_and_again(nodes: Any, uid: str) -> None:
    # two bugs, one run in two each: a relayed connection that ended closed the socket to the
    # relay under it (the node looked for its socket through the stream it runs over), and the
    # relay closed the streams of the circuit opened last to the same peer when an earlier one
    # ended; each `ctxos mesh` command is a new node with one identity, as here
    relay = nodes("relay", relay_service=True)
    hidden = nodes("hidden", relays=(relay.addrs[0],), **RELAYED)
    addr = _relayed(hidden)
    seed = os.urandom(32)
    for i in range(8):
        with MeshNode(MeshConfig(f"caller-{uid}", seed=seed if i % 2 else None, **RELAYED)) as caller:
            assert caller.connect(addr, timeout=5) == hidden.peer_id
            assert caller.request(hidden.peer_id, f"call {i}", timeout=5).message == f"hidden got call {i}"
    assert hidden.relayed_addrs() == [addr]


def test_one_relayed_connection_ending_leaves_the_others_to_the_same_peer(nodes: Any) -> None:
    """Two agents reach one behind a relay; one leaves, the other's circuit goes on."""
    relay = nodes("relay", relay_service=True)
    hidden = nodes("hidden", relays=(relay.addrs[0],), **RELAYED)
    addr = _relayed(hidden)
    first, second = nodes("first", **RELAYED), nodes("second", **RELAYED)
    for other in (first, second):
        assert other.connect(addr) == hidden.peer_id
        assert other.request(hidden.peer_id, "in").message == "hidden got in"
    first.close()
    wait_for(lambda: first.peer_id not in hidden.connected(), "the first one gone")
    for i in range(3):
        assert second.request(hidden.peer_id, f"still {i}", timeout=5).message == f"hidden got still {i}"


def test_a_relayed_connection_is_made_direct_and_outlives_its_relay(nodes: Any) -> None:
    """Hole punching (DCUtR): a peer that takes no connection, reached through its relay, and
    the peer that reached it get a direct connection (here the hidden one dials out), which the
    relay's going leaves standing: requests and the topic go on."""
    relay = nodes("relay", relay_service=True)
    hidden = nodes("hidden", relays=(relay.addrs[0],))
    addr = _relayed(hidden)
    _stop_listening(hidden)
    assert hidden.addrs == [addr]
    other = nodes("other")
    assert other.connect(addr) == hidden.peer_id
    wait_for(lambda: hidden.peer_id in other.topic_peers() and other.peer_id in hidden.topic_peers(), "the topic")
    direct = wait_for(
        lambda: not other.peer(hidden.peer_id).relayed and not hidden.peer(other.peer_id).relayed,  # type: ignore[union-attr]
        "a direct connection",
        timeout=30,  # (up to three rounds of DCUtR, 2 s apart, on a busy machine)
    )
    assert direct
    relay.close()
    wait_for(lambda: hidden.peer_id not in relay.connected(), "the relay gone")
    assert other.request(hidden.peer_id, "directly?").message == "hidden got directly?"
    assert hidden.request(other.peer_id, "and back?").message == "other got and back?"
    got: list[str] = []
    other.on_broadcast = lambda peer, b: got.append(b.message)
    wait_for(lambda: other.peer_id in hidden.topic_peers(), "the topic on the direct connection")
    hidden.broadcast("after the relay")
    wait_for(lambda: got == ["after the relay"], "the broadcast")
    assert other.peer(hidden.peer_id).status == "connected"  # type: ignore[union-attr]


def test_without_hole_punching_a_relayed_connection_stays_relayed_and_ends_with_its_relay(nodes: Any) -> None:
    relay = nodes("relay", relay_service=True)
    hidden = nodes("hidden", relays=(relay.addrs[0],), **RELAYED)
    other = nodes("other", **RELAYED)
    assert other.connect(_relayed(hidden)) == hidden.peer_id
    time.sleep(5)  # with hole punching, it is direct within 2-3 s (the test above)
    assert other.peer(hidden.peer_id).relayed and hidden.peer(other.peer_id).relayed  # type: ignore[union-attr]
    relay.close()
    wait_for(lambda: other.peer(hidden.peer_id).status == "disconnected", "the connection gone with the relay")  # type: ignore[union-attr]


def test_the_node_tells_when_a_relay_takes_or_loses_its_reservation(nodes: Any, uid: str) -> None:
    relay = nodes("relay", relay_service=True)
    seen: list[list[str]] = []
    hidden = MeshNode(MeshConfig(f"hidden-{uid}", relays=(relay.addrs[0],)))
    hidden.on_addrs = lambda: seen.append(hidden.addrs)
    with hidden:
        addr = _relayed(hidden)
        wait_for(lambda: seen and addr in seen[-1], "told of the relayed address")
        relay.close()
        wait_for(lambda: addr not in seen[-1], "told the relayed address is gone")
        assert seen[-1] == hidden.addrs and all("/p2p-circuit" not in a for a in seen[-1])


def test_a_peer_finds_a_relay_among_its_peers_and_another_when_it_is_lost(nodes: Any) -> None:
    """``auto_relays``: no relay's address given; of the peers it meets, it reserves a slot on
    the one that relays (not the plain one), and on the next when that one goes."""
    relay, plain = nodes("relay", relay_service=True), nodes("plain")
    hidden = nodes("hidden", auto_relays=1, bootstrap=(plain.addrs[0], relay.addrs[0]), **RELAYED)
    _stop_listening(hidden)  # (else the relay dials it back, and it needs none: the test below)
    addr = _relayed(hidden)
    assert hidden.reachability == "private"
    assert addr == f"{relay.addrs[0]}/p2p-circuit/p2p/{hidden.peer_id}" and hidden.relayed_addrs() == [addr]
    other = nodes("other", **RELAYED)
    assert other.connect(addr) == hidden.peer_id
    assert other.request(hidden.peer_id, "found it?").message == "hidden got found it?"
    second = nodes("second", relay_service=True)
    hidden.connect(second.addrs[0])
    time.sleep(2.5)  # two looks for relays (RELAY_CHECK_S)
    assert hidden.relayed_addrs() == [addr]  # one is what it was asked for
    relay.close()
    again = wait_for(lambda: next((a for a in hidden.relayed_addrs() if a != addr), None), "the second relay's")
    assert again == f"{second.addrs[0]}/p2p-circuit/p2p/{hidden.peer_id}" and hidden.relayed_addrs() == [again]
    assert nodes("third", **RELAYED).connect(again) == hidden.peer_id


def test_a_peer_its_relays_can_dial_back_takes_no_slot_until_it_cannot_be_dialled(nodes: Any) -> None:
    """AutoNAT: a relay dials the peer back at its addresses; while it can, the peer has no use
    for a relay and reserves none, and once it takes no connection it reserves one."""
    relay = nodes("relay", relay_service=True)
    hidden = nodes("hidden", auto_relays=1, bootstrap=(relay.addrs[0],), **RELAYED)
    wait_for(lambda: hidden.reachability == "public", "the relay's answer")
    time.sleep(2.5)  # two looks for relays (RELAY_CHECK_S)
    assert hidden.relayed_addrs() == []
    _stop_listening(hidden)
    addr = _relayed(hidden)
    assert hidden.reachability == "private" and hidden.addrs == [addr]


def test_a_relay_dials_a_peer_back_on_a_connection_of_its_own(nodes: Any) -> None:
    """py-libp2p's AutoNAT server dials back through ``host.connect``, which returns at once for
    a peer connected (as the one asking always is): every address was said reachable. The
    relay's dials a new connection: a closed port is not."""
    import multiaddr
    from libp2p.host.autonat.autonat import AutoNATService
    from libp2p.host.autonat.pb.autonat_pb2 import Message
    from libp2p.peer.id import ID

    relay, peer = nodes("relay", relay_service=True), nodes("peer")
    peer.connect(relay.addrs[0])
    closed = multiaddr.Multiaddr(f"/ip4/127.0.0.1/tcp/{_free_port('127.0.0.1')}").to_bytes()
    listening = multiaddr.Multiaddr(peer.addrs[0]).to_bytes()

    async def ask(addr: bytes) -> int:
        client = AutoNATService(peer._host, serve=False)
        status, _ = await client.query_server(ID.from_base58(relay.peer_id), [addr], timeout=10)
        return status

    assert peer._call(ask, closed, timeout=15, what="asking") == Message.E_DIAL_ERROR
    assert peer._call(ask, listening, timeout=15, what="asking") == Message.OK
    wait_for(lambda: len(relay._network.get_connections(ID.from_base58(peer.peer_id))) == 1, "the dial back closed")


def test_a_relay_that_restarts_takes_the_reservation_again(nodes: Any, uid: str) -> None:
    """The reservation is gone with the relay's node; the peer dials the relay again and
    reserves anew when it is back (at the same address and identity)."""
    seed = os.urandom(32)
    port = _free_port("127.0.0.1")
    relay = MeshNode(MeshConfig(f"relay-{uid}", relay_service=True, seed=seed, port=port)).start()
    relay_addr = relay.addrs[0]
    hidden = nodes("hidden", relays=(relay_addr,))
    addr = _relayed(hidden)
    relay.close()
    wait_for(lambda: hidden.relayed_addrs() == [], "the reservation gone with the relay")
    with MeshNode(MeshConfig(f"relay-{uid}", relay_service=True, seed=seed, port=port)) as again:
        assert _relayed(hidden) == addr
        other = nodes("other")
        assert other.connect(addr) == hidden.peer_id
        assert other.request(hidden.peer_id, "again?").message == "hidden got again?"
        assert again.connected()  # (closed by the with: the node is gone before the fixture's)


def test_a_reservation_dropped_while_the_relay_stays_connected_is_made_again(
    nodes: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="context_os.mesh")
    relay = nodes("relay", relay_service=True)
    hidden = nodes("hidden", relays=(relay.addrs[0],))
    addr = _relayed(hidden)

    async def expire() -> None:  # as py-libp2p drops a reservation that expired unrenewed
        hidden._relay_transport._reservations.clear()

    hidden._call(expire, timeout=5, what="dropping the reservation")
    said = f"mesh: relay {relay.addrs[0]} lost, or its reservation; reserving again"
    wait_for(lambda: any(r.getMessage() == said for r in caplog.records), "the reservation made again")
    assert _relayed(hidden) == addr
    other = nodes("other")
    assert other.connect(addr) == hidden.peer_id


def test_a_node_that_is_no_relay_takes_no_reservation_and_a_dial_through_it_says_why(
    nodes: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="context_os.mesh")
    plain = nodes("plain")
    hidden = nodes("hidden", relays=(plain.addrs[0],))
    said = f"mesh: relay {plain.addrs[0]} took no reservation"
    wait_for(lambda: any(r.getMessage().startswith(said) for r in caplog.records), "the refusal said")
    assert hidden.relayed_addrs() == []
    other = nodes("other")
    with pytest.raises(MeshError, match=r"the node before /p2p-circuit is no relay"):
        other.connect(f"{plain.addrs[0]}/p2p-circuit/p2p/{hidden.peer_id}", timeout=5)
    relay = nodes("relay", relay_service=True)  # a relay the peer holds no reservation on
    with pytest.raises(MeshError, match=r"holds no reservation on that node .*\(circuit relay status 204\)"):
        other.connect(f"{relay.addrs[0]}/p2p-circuit/p2p/{hidden.peer_id}", timeout=5)


@pytest.mark.parametrize("relay", ["/ip4/127.0.0.1/tcp/4001", "/ip4/1.2.3.4/tcp/1/p2p/12D3KooWA/p2p-circuit"])
def test_a_relay_that_is_no_relays_address_is_refused(relay: str) -> None:
    with pytest.raises(ConfigError, match="is not a relay's address"):
        MeshConfig("x", relays=(relay,))


@pytest.mark.parametrize("n", [-1, 9, True, 1.5])
def test_a_number_of_relays_to_find_out_of_range_is_refused(n: Any) -> None:
    with pytest.raises(ConfigError, match=f"auto_relays {n!r} is not a number of relays from 0 to 8"):
        MeshConfig("x", auto_relays=n)
