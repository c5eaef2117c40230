"""The agent mesh on loopback: round trips, what one peer absorbs into its store, error replies.

* round trip: a direct message answered at once, p50/p99 over sequential requests, three ways in
  the same run: a bare py-libp2p echo (two hosts in one trio loop, the same varint CBOR framing:
  the baseline), ``MeshNode.request`` (the synchronous API: a thread crossing each way), and
  ``MeshAgent.send`` (each request and answer stored as ``message`` objects on both sides and the
  exchange remembered for the peer).
* absorption: direct messages (auto-replied, so the agent's loop is not measured) sent from two
  peers at once, 8 in flight each, and broadcasts from one: messages per second the receiving peer stores, against
  the same traffic to a peer that stores nothing.
* WebSocket and relays: ``MeshNode.request`` round trips over a WebSocket connection, plain and
  over TLS (``wss``, a self-signed certificate the sender trusts), through a circuit relay, and
  dialled through one then made direct by hole punching, beside TCP's.
* DHT discovery: how soon two peers that know only a third find each other through the DHT.
* error reply: a request whose handling fails is answered with an error; p99 must stay within
  100 ms (the seed's aim), and is shown against the plain round trip.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.helpers import self_signed_certificate

from context_os.mesh import wire
from context_os.mesh.agent import MeshAgent
from context_os.mesh.node import MeshConfig, MeshNode
from context_os.store.sqlite import SqliteStore
from context_os.times import now_ms

from ._report import command_line, pct, sized, write_section

ROUND_TRIPS = sized(300, 20)
SENDER_THREADS = 8
"""Requests each sender keeps in flight at once."""
ABSORB_DIRECT = sized(640, 2 * SENDER_THREADS * 2)
"""Direct messages, sent by two peers each with ``SENDER_THREADS`` threads."""
ABSORB_BROADCASTS = sized(300, 20)
DHT_RUNS = sized(5, 2)
ERROR_AIM_MS = 100.0
OFF = 1e6
"""A request or broadcast rate no run here reaches: the limit off."""


def bare_echo_round_trips(n: int) -> list[float]:
    """Two py-libp2p hosts in one trio loop, Noise + yamux, one stream per request: no threads."""
    import multiaddr
    import trio
    from libp2p import new_host
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.crypto.x25519 import create_new_key_pair as new_x25519
    from libp2p.custom_types import TProtocol
    from libp2p.io.msgio import VarIntLengthMsgReadWriter
    from libp2p.network import swarm
    from libp2p.peer.peerinfo import info_from_p2p_addr
    from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_ID
    from libp2p.security.noise.transport import Transport as Noise
    from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_ID
    from libp2p.stream_muxer.yamux.yamux import Yamux

    swarm._HAPPY_EYEBALLS_DELAY = 0.0
    proto = TProtocol(wire.PROTOCOL)

    def host() -> Any:
        kp = create_new_key_pair()
        return new_host(
            key_pair=kp,
            sec_opt={NOISE_ID: Noise(kp, noise_privkey=new_x25519().private_key)},
            muxer_opt={TProtocol(YAMUX_ID): Yamux},
            listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")],
        )

    async def echo(stream: Any) -> None:
        rw = VarIntLengthMsgReadWriter(stream, max_msg_size=wire.MAX_MESSAGE_BYTES)
        req = wire.decode_request(await rw.read_msg())
        resp = wire.AgentResponse(req.request_id, "b", "p", now_ms(), req.message)
        await rw.write_msg(wire.encode(resp))
        await stream.close()

    times: list[float] = []

    async def main() -> None:
        a, b = host(), host()
        b.set_stream_handler(proto, echo)
        listen = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")
        async with a.run([listen]), b.run([listen]):
            await a.connect(info_from_p2p_addr(b.get_addrs()[0]))
            req = wire.AgentRequest("r", "a", str(a.get_id()), now_ms(), "ping")
            for _ in range(n):
                t = time.perf_counter()
                stream = await a.new_stream(b.get_id(), [proto])
                rw = VarIntLengthMsgReadWriter(stream, max_msg_size=wire.MAX_MESSAGE_BYTES)
                await rw.write_msg(wire.encode(req))
                wire.decode_response(await rw.read_msg())
                await stream.close()
                times.append((time.perf_counter() - t) * 1000)

    trio.run(main)
    return times


def timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def node_round_trips(transport: str, tmp: Path) -> list[float]:
    """``MeshNode.request`` round trips over ``transport``: ``tcp``, ``ws``, ``wss`` (the
    receiver listening on a WebSocket port of its own, the sender dialling it there) or
    ``relay`` (TCP through a third node, the receiver's relay, hole punching off) or ``punched``
    (dialled through the relay, then made direct by hole punching)."""
    tls: dict[str, Any] = {}
    if transport == "wss":
        cert, key = self_signed_certificate(tmp)
        tls = {"tls_cert": cert, "tls_key": key}
    relayed = transport in ("relay", "punched")
    relay = MeshNode(MeshConfig("relay", relay_service=True)).start() if relayed else None
    relays = (relay.addrs[0],) if relay is not None else ()
    punch = transport != "relay"
    a = MeshNode(MeshConfig("a", tls_ca=tls.get("tls_cert"), hole_punch=punch)).start()
    ws_port = 0 if transport in ("ws", "wss") else None
    b = MeshNode(MeshConfig("b", request_rate=OFF, ws_port=ws_port, relays=relays, hole_punch=punch, **tls)).start()
    try:
        if relay is not None:
            wait("the relay's reservation", lambda: b.relayed_addrs())
            a.connect(b.relayed_addrs()[0])
            if punch:
                wait("a direct connection", lambda: not a.peer(b.peer_id).relayed)  # type: ignore[union-attr]
        else:
            a.connect(next(x for x in b.addrs if x.split("/")[5] == ("p2p" if transport == "tcp" else transport)))
        return timed(lambda: a.request(b.peer_id, "ping"), ROUND_TRIPS)
    finally:
        a.close()
        b.close()
        if relay is not None:
            relay.close()


def dht_meetings(runs: int) -> list[float]:
    """Seconds from the last of three peers started (two that know only the first, all with the
    DHT at its default interval) until the two are connected."""
    took = []
    for _ in range(runs):
        hub = MeshNode(MeshConfig("hub", dht=True)).start()
        b = MeshNode(MeshConfig("b", dht=True, bootstrap=(hub.addrs[0],))).start()
        c = MeshNode(MeshConfig("c", dht=True, bootstrap=(hub.addrs[0],))).start()
        t0 = time.perf_counter()
        wait("the DHT's peers to meet", lambda b=b, c=c: c.peer_id in b.connected(), timeout=60)
        took.append(time.perf_counter() - t0)
        for node in (c, b, hub):
            node.close()
    return took


def wait(what: str, check: Any, timeout: float = 120, state: Any = None) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise SystemExit(f"bench.mesh: timed out waiting for {what} ({state() if state else ''})")
        time.sleep(0.005)


def answer_all(agent: MeshAgent, stop: threading.Event) -> None:
    while not stop.is_set():
        req = agent.next_request(timeout=0.05)
        if req is not None:
            req.answer("pong")


def absorb(tmp: Path, stored: bool) -> dict[str, float]:
    """Messages per second a peer takes in: direct (two senders at once), then broadcasts."""
    store = SqliteStore(tmp / f"absorb-{stored}.db")
    if stored:
        receiver: Any = MeshAgent(
            store, MeshConfig("receiver", broadcast_rate=OFF, request_rate=OFF), auto_reply=True
        ).start()
        node = receiver.node
        direct_done = lambda: receiver.node.counts["requests_in"] >= ABSORB_DIRECT  # noqa: E731
    else:
        got = {"broadcasts": 0}

        def count(peer: str, b: wire.Broadcast) -> None:
            got["broadcasts"] += 1

        receiver = node = MeshNode(
            MeshConfig("receiver", broadcast_rate=OFF, request_rate=OFF), on_broadcast=count
        ).start()
        direct_done = lambda: node.counts["requests_in"] >= ABSORB_DIRECT  # noqa: E731
    senders = [MeshNode(MeshConfig(f"sender{i}", broadcast_rate=OFF)).start() for i in range(2)]
    try:
        for s in senders:
            s.connect(node.addrs[0])
        wait(
            "the topic mesh, both ways",
            lambda: all(node.peer_id in s.topic_peers() and s.peer_id in node.topic_peers() for s in senders),
        )
        t = time.perf_counter()
        per_thread = ABSORB_DIRECT // (len(senders) * SENDER_THREADS)
        threads = [
            threading.Thread(
                target=lambda s=s: [s.request(node.peer_id, f"m{i}", auto_reply=True) for i in range(per_thread)]
            )
            for s in senders
            for _ in range(SENDER_THREADS)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wait("every direct message", direct_done)
        direct = ABSORB_DIRECT / (time.perf_counter() - t)
        t = time.perf_counter()
        for i in range(ABSORB_BROADCASTS):
            senders[0].broadcast(f"b{i}", "event")
        if stored:
            wait(
                "every broadcast received",
                lambda: receiver.node.counts["broadcasts_in"] >= ABSORB_BROADCASTS,
                state=lambda: receiver.node.counts,
            )
            wait(
                "every broadcast stored",
                lambda: (
                    len(store.find(kind="message", where={"mesh_agent": "receiver", "kind": "broadcast"}))
                    >= ABSORB_BROADCASTS
                ),
            )
        else:
            wait("every broadcast", lambda: got["broadcasts"] >= ABSORB_BROADCASTS)
        broadcasts = ABSORB_BROADCASTS / (time.perf_counter() - t)
        dropped = node.counts["dropped"]
    finally:
        for s in senders:
            s.close()
        receiver.close()
        store.close()
    return {"direct": direct, "broadcasts": broadcasts, "dropped": dropped}


def main() -> int:
    logging.getLogger("context_os.mesh").setLevel(logging.ERROR)  # the failing handler's warnings
    print("mesh: round trips", flush=True)
    bare = bare_echo_round_trips(ROUND_TRIPS)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        node_rt = node_round_trips("tcp", tmp)
        ws_rt = node_round_trips("ws", tmp)
        wss_rt = node_round_trips("wss", tmp)
        relay_rt = node_round_trips("relay", tmp)
        punched_rt = node_round_trips("punched", tmp)

        sa, sb = SqliteStore(tmp / "a.db"), SqliteStore(tmp / "b.db")
        alice = MeshAgent(sa, MeshConfig("alice")).start()
        bob = MeshAgent(sb, MeshConfig("bob", request_rate=OFF)).start()
        stop = threading.Event()
        loop = threading.Thread(target=answer_all, args=(bob, stop), daemon=True)
        loop.start()
        alice.node.connect(bob.node.addrs[0])
        agent_rt = timed(lambda: alice.send(bob.peer_id, "ping"), ROUND_TRIPS)
        stop.set()
        loop.join()
        stored_a = len(sa.find(kind="message", where={"mesh_agent": "alice"}))
        stored_b = len(sb.find(kind="message", where={"mesh_agent": "bob"}))
        alice.close()
        bob.close()

        def broken(peer: str, req: wire.AgentRequest) -> str:
            raise RuntimeError("handling failed")

        a = MeshNode(MeshConfig("a")).start()
        b = MeshNode(MeshConfig("b", request_rate=OFF), on_request=broken).start()
        a.connect(b.addrs[0])
        errors = timed(lambda: a.request(b.peer_id, "ping"), ROUND_TRIPS)
        a.close()
        b.close()

        print("mesh: DHT discovery", flush=True)
        meetings = dht_meetings(DHT_RUNS)

        print("mesh: absorption", flush=True)
        plain = absorb(tmp, stored=False)
        kept = absorb(tmp, stored=True)

    p = {
        name: (pct(v, 50), pct(v, 99))
        for name, v in (
            ("bare", bare),
            ("node", node_rt),
            ("ws", ws_rt),
            ("wss", wss_rt),
            ("relay", relay_rt),
            ("punched", punched_rt),
            ("agent", agent_rt),
        )
    }
    err50, err99 = pct(errors, 50), pct(errors, 99)
    error_ok = err99 <= ERROR_AIM_MS
    body = (
        f"Loopback, {ROUND_TRIPS} sequential requests each, the receiver's request rate limit off (100 a"
        " second by default, which a loop of round trips passes); py-libp2p 0.8.1 (TCP, Noise, yamux).\n\n"
        "| direct message round trip | p50 ms | p99 ms | p50 vs bare echo |\n|---|---|---|---|\n"
        f"| bare py-libp2p echo, one trio loop (baseline) | {p['bare'][0]:.2f} | {p['bare'][1]:.2f} | 1.00× |\n"
        f"| `MeshNode.request` (synchronous API) | {p['node'][0]:.2f} | {p['node'][1]:.2f} | "
        f"{p['node'][0] / p['bare'][0]:.2f}× |\n"
        f"| `MeshNode.request` over WebSocket | {p['ws'][0]:.2f} | {p['ws'][1]:.2f} | "
        f"{p['ws'][0] / p['bare'][0]:.2f}× |\n"
        f"| `MeshNode.request` over WebSocket with TLS (wss) | {p['wss'][0]:.2f} | {p['wss'][1]:.2f} | "
        f"{p['wss'][0] / p['bare'][0]:.2f}× |\n"
        f"| `MeshNode.request` through a relay (circuit relay v2, TCP both legs) | {p['relay'][0]:.2f} | "
        f"{p['relay'][1]:.2f} | {p['relay'][0] / p['bare'][0]:.2f}× |\n"
        f"| `MeshNode.request` dialled through a relay, then made direct (hole punching) | {p['punched'][0]:.2f} | "
        f"{p['punched'][1]:.2f} | {p['punched'][0] / p['bare'][0]:.2f}× |\n"
        f"| `MeshAgent.send`, stored both sides + memory | {p['agent'][0]:.2f} | {p['agent'][1]:.2f} | "
        f"{p['agent'][0] / p['bare'][0]:.2f}× |\n\n"
        f"Over WebSocket a round trip takes {p['ws'][0] / p['node'][0]:.2f}× one over TCP (p50), and"
        f" {p['wss'][0] / p['node'][0]:.2f}× over WebSocket with TLS (TLS under libp2p's own Noise); through a"
        f" relay, {p['relay'][0] / p['node'][0]:.2f}× (two legs, and the relay's copying between them), and"
        f" {p['punched'][0] / p['node'][0]:.2f}× once hole punching made the connection direct.\n\n"
        f"DHT discovery: two peers that know only a third, all three started at once with the DHT at its"
        f" default interval ({MeshConfig('x').dht_interval:g} s), were connected {min(meetings):.2f}-"
        f"{max(meetings):.2f} s after the last one started (median {pct(meetings, 50):.2f} s,"
        f" {len(meetings)} runs).\n\n"
        f"`MeshAgent.send` stored {stored_a:,} message objects on the sender and {stored_b:,} on the receiver "
        f"({ROUND_TRIPS} requests, {ROUND_TRIPS} answers each side).\n\n"
        "| one peer absorbs | messages/s, stored | messages/s, not stored | stored vs not |\n|---|---|---|---|\n"
        f"| direct, auto-replied, 2 senders × {SENDER_THREADS} in flight ({ABSORB_DIRECT}; rate limit off) | {kept['direct']:,.0f} | "
        f"{plain['direct']:,.0f} | {kept['direct'] / plain['direct']:.2f}× |\n"
        f"| broadcasts from 1 sender ({ABSORB_BROADCASTS}; stored with a memory entry each; rate limit off) | "
        f"{kept['broadcasts']:,.0f} | {plain['broadcasts']:,.0f} | {kept['broadcasts'] / plain['broadcasts']:.2f}× |\n\n"
        f"Broadcasts dropped by a full inbox: {kept['dropped']:.0f} stored, {plain['dropped']:.0f} not stored.\n\n"
        f"A request whose handling fails is answered with an error in p50 {err50:.2f} ms, p99 {err99:.2f} ms "
        f"({err50 / p['node'][0]:.2f}× a plain round trip); aim: within {ERROR_AIM_MS:.0f} ms: "
        f"{'met' if error_ok else 'MISSED'}.\n"
    )
    write_section("Mesh", body)
    print(body)
    return 0 if error_ok else 1


if __name__ == "__main__":
    command_line(__doc__, main)
