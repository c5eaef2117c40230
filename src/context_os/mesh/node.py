"""One agent's libp2p peer, behind a synchronous API.

``MeshNode`` is a real libp2p host (py-libp2p): TCP, Noise, yamux, identify, GossipSub on one
topic, the ``/pi-agent/0.1.0`` request/response protocol (``wire``), optional mDNS discovery and
an optional private-network key (``pnet``), with a stable identity when given a 32-byte seed.

py-libp2p runs on trio; this library is synchronous. One daemon thread per node runs the trio
loop; every call from another thread crosses into it with a deadline of its own (a peer that
stops answering gives no error at all, only a deadline does) and comes back as a value or a
``MeshError``. What peers send reaches the callbacks given to the node on worker threads, so a
slow callback never holds up the network (and is abandoned at shutdown).

What 0.8.1 needs set differently, and why (measured; docs/mesh.md):

* every dial waits a fixed 250 ms "happy eyeballs" delay before it starts: set to 0 (a
  process-wide module value of py-libp2p; nothing else in the process depends on it);
* its default security and muxer options also offer plaintext and mplex: only Noise and yamux;
* its private-network protector speaks no other implementation's protocol: ``pnet.install``;
* GossipSub's eclipse protection wants peers on three distinct IP addresses (never true on one
  machine) and its spam protection allows 10 messages a second per topic: off, and 100
  (``broadcast_rate``), and it counts messages, not bytes: each peer's broadcasts are held to a
  byte budget too (``broadcast_bytes_rate``; all peers' together ``broadcast_bytes_rate_total``);
  direct requests have no such limit at all, and a stream that sends nothing is held until this
  node's read deadline: one peer may open ``open_requests`` at once and ``request_rate`` a
  second, all together ``open_requests_total``, past which a stream is
  reset unread; a response a peer does not take (its window shut, its socket full) is given
  ``HANDLER_WRITE_SECONDS``, then the connection is closed;
* a stream reset with data unread on it stays in its connection's table until a sweep 60 to 90 s
  later: what is left on a stream this node resets is read off (``_discard``); and a stream
  whose opening is cancelled midway is lost or reset with its negotiation unread: a request's
  stream is opened uncancelled (``_open_stream``);
* a publish comes back to its own sender; failed dials are refused for 60 s (cleared before an
  explicit dial); ``Pubsub`` starts a cache thread it never stops (stopped at close); a
  subscription drops what comes past 32 waiting (a burst from one connection): 1,000; its message
  counter starts at the time in seconds, so a node restarted with the same identity within a
  second repeats ids its peers drop as seen: nanoseconds; a publish only queues the message for
  each peer and drops it past 32 queued, so a broadcast waits for room (not for a peer whose
  queue stays full for ``QUEUE_STALL_SECONDS``: its copy is dropped) and ``close`` lets the
  queues drain first;
* its mDNS registration blocks the network thread while zeroconf probes (1.5 s and more):
  made on a worker thread (``_run_mdns``);
* its auto-connector dials every known peer until 150 connections are open (redials of peers
  that are leaving, sockets left open when this node stops mid-dial): off;
* its AutoNAT server dials the peer asking back through ``host.connect``, which returns at once
  for a peer connected (as the one asking is): every peer was found reachable. A relay here
  dials a connection of its own (``_autonat_server``);
* it logs to the ``libp2p`` logger at ERROR for events a caller already gets as an exception:
  that logger gets a ``NullHandler`` and does not propagate (``quiet_libp2p``).

This module knows nothing of stores, sessions or the agent's tools (``agent`` does).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import errno
import hashlib
import logging
import re
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from .._install import install_hint
from ..errors import ConfigError, InputError, MeshError, MeshUnavailable
from ..times import now_ms
from . import wire
from .queue import GIVEN_UP_MARK, settle

__all__ = [
    "BroadcastResult",
    "MeshConfig",
    "MeshNode",
    "MeshPeer",
    "Reply",
    "load_seed",
    "quiet_libp2p",
    "rendezvous_key",
]

log = logging.getLogger("context_os.mesh")

STALE_PEER_SECONDS = 60.0
"""A peer disconnected this long is dropped by ``prune_stale`` (the seed's time-based prune)."""
HANDLER_READ_SECONDS = 30.0
"""An inbound stream that sends no complete request within this is reset."""
HANDLER_WRITE_SECONDS = 30.0
"""A peer that has not taken its response within this (its flow-control window shut, its
process frozen) is hung up on: the stream is reset and the connection closed."""
REQUEST_TIMEOUT_MAX_MS = 600_000
"""The longest a request may ask its receiver to work on it."""
CANCEL_POLL_S = 0.25
"""How often a call with a cancel looks at it (the setter may be a signal handler: no wake-up)."""
CLOSING_WAIT_S = 2.0
"""How long a dial waits for the closed connections to its peer to leave the swarm's list."""
ANSWERS_OUT_S = 2.0
"""How long a node that stops waits for the answers it has to go out (those not given yet: none)."""
INBOX_SIZE = 1000
"""Broadcasts waiting for the callback; past it the newest are dropped (and counted)."""
GIVEN_UP_GRACE = 5.0
"""A request whose sender stopped waiting (its stream reset, its connection gone) is given up
after this, unless the same request came again meanwhile (a sender whose connection broke
tries again after half a second, under the same id)."""
LIMIT_LOG_SECONDS = 10.0
"""A peer held to the request limits is logged once in this many seconds (a flood, not a line
for each stream refused)."""
QUEUE_STALL_SECONDS = 2.0
"""A peer whose outbound queue stays full this long while a broadcast waits for room (it takes
nothing: its process frozen, its link dead) is waited for no more: its copy of each broadcast
is dropped (``counts["dropped_out"]``) until its queue has room again. (Every broadcast waited
for it, and failed at its deadline, for every peer.)"""

Reply = tuple[str, bool]
"""What answers a request: the text, and whether it is an error."""
RequestCallback = Callable[[str, wire.AgentRequest], "str | Reply | concurrent.futures.Future[Reply]"]
BroadcastCallback = Callable[[str, wire.Broadcast], None]


def quiet_libp2p() -> None:
    """Keep py-libp2p's own log lines (errors a caller already gets as exceptions) off stderr."""
    lg = logging.getLogger("libp2p")
    if not any(isinstance(h, logging.NullHandler) for h in lg.handlers):
        lg.addHandler(logging.NullHandler())
    lg.propagate = False


def load_seed(path: str | Path, *, create: bool = True) -> bytes:
    """The 32-byte identity seed in ``path``, created (mode 0600) when missing and ``create``:
    the same seed gives the same peer id, here and in js-libp2p. A seed other users may read is
    refused (``pnet.read_secret``: it is the peer's private key)."""
    import os

    from .pnet import create_secret, read_secret

    p = Path(path).expanduser()
    if p.exists():
        seed = read_secret(p, "identity seed")
        if len(seed) != 32:
            raise ConfigError(f"identity seed {p} must hold exactly 32 bytes, it holds {len(seed)}")
        return seed
    if not create:
        raise ConfigError(f"identity seed {p} does not exist")
    seed = os.urandom(32)
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        create_secret(p, seed, "identity seed")  # (whole or not at all)
    except FileExistsError:  # another process made it first: use theirs
        return load_seed(p, create=False)
    return seed


@dataclass(frozen=True)
class MeshConfig:
    """How one node runs."""

    agent_name: str
    """The name peers see (travels in every message: identify's agent version is process-wide)."""
    host: str = "127.0.0.1"
    """The address to listen on; ``0.0.0.0`` to be reachable from the local network."""
    port: int = 0
    """The TCP port; 0 picks a free one."""
    seed: bytes | None = None
    """32 bytes: a stable identity (``load_seed``); None: a new peer id at each start."""
    psk: bytes | None = None
    """32 bytes: a private network (``pnet.read_swarm_key``); peers without it cannot connect."""
    topic: str = "pi-broadcast"
    ws_port: int | None = None
    """Also listen for WebSocket connections on this port (0 picks a free one); None: TCP only."""
    tls_cert: str | Path | None = None
    """A PEM certificate (or chain) file: the WebSocket listener (``ws_port``) speaks TLS, at a
    ``/tls/ws`` address (secure WebSockets, the ones a browser on an https page may dial), with
    ``tls_key``."""
    tls_key: str | Path | None = None
    """The PEM private key file of ``tls_cert``."""
    tls_ca: str | Path | None = None
    """A PEM file of certificates to trust, besides the system's, when dialling a ``/tls/ws`` or
    ``/wss`` address (a peer whose certificate is self-signed, or from a CA of your own)."""
    mdns: bool = False
    """Discover peers on the local network by mDNS (and dial them)."""
    dht: bool = False
    """Discover the topic's peers beyond the local network through a Kademlia DHT (and dial
    them): the node joins the DHT through the peers it is connected to (its ``bootstrap``
    peers), announces itself there as a provider of the topic's rendezvous key
    (``rendezvous_key``) and dials the other providers, every ``dht_interval`` seconds."""
    dht_interval: float = 30.0
    """Seconds between two rounds of the DHT's announce and look-up (the first comes at start;
    after a round whose announcement no peer took, ``DHT_RETRY_S``)."""
    bootstrap: tuple[str, ...] = ()
    """Multiaddrs (with ``/p2p/<id>``) to dial at start."""
    relay_service: bool = False
    """Relay connections for other peers (circuit relay v2's hop, limits ``RELAY_LIMITS``): a
    peer that cannot be dialled (behind NAT, a firewall) reserves a slot here, and others reach
    it through this node at ``<this node's address>/p2p-circuit/p2p/<its id>``."""
    relays: tuple[str, ...] = ()
    """Relays (multiaddrs with ``/p2p/<id>`` of nodes with ``relay_service``) to reserve a slot on,
    kept while the node runs (a relay lost is dialled again): the node is then reachable through
    each at ``<relay>/p2p-circuit/p2p/<its id>``, among its ``addrs``."""
    auto_relays: int = 0
    """Besides ``relays``, reserve a slot on up to this many relays found among the peers the
    node is connected to (a peer whose identify lists circuit relay v2's hop protocol: a
    ``relay_service`` node met through ``bootstrap``, mDNS or the DHT), as a peer behind NAT does
    that knows no relay's address (AutoRelay). One lost, or refusing, is replaced by another
    found; it is tried again after ``RELAY_RETRY_S[1]``. None is kept while the relays asked can
    dial the node back (AutoNAT: ``MeshNode.reachability``)."""
    hole_punch: bool = True
    """Upgrade a connection through a relay to a direct one (DCUtR, "hole punching"): the two
    peers tell each other their addresses over the relayed connection and dial each other at
    once, which passes most NATs (a peer that can dial out reaches one that takes connections);
    new streams take the direct connection, and the relayed one is closed a minute later. It
    stays relayed when no dial gets through (``MeshPeer.relayed``)."""
    call_timeout: float = 10.0
    """The deadline of a connect or a broadcast, seconds."""
    broadcast_rate: float = 100.0
    """Broadcasts per second the topic may bring in; more are dropped (GossipSub's spam
    protection: a flooding peer cannot fill the store and the context)."""
    broadcast_bytes_rate: float = 100_000.0
    """Bytes a second of broadcasts one peer may bring in (a token bucket holding
    ``broadcast_bytes_burst``, full at first); a broadcast past it is dropped unread
    (``counts["over_budget"]``, logged). Within ``broadcast_rate``, one peer's large broadcasts
    filled the store at tens of MB a second."""
    broadcast_bytes_burst: int = wire.MAX_MESSAGE_BYTES
    """The bytes of broadcasts one peer may send at once (the bucket's size: one broadcast of
    the largest size by default; a larger broadcast is never taken)."""
    broadcast_bytes_rate_total: float = 1_000_000.0
    """Bytes a second of broadcasts all peers together may bring in (a bucket as each peer's,
    holding ``broadcast_bytes_burst_total``): a peer id costs nothing to make, and many
    identities, each within its own budget, had none together."""
    broadcast_bytes_burst_total: int = 4 * wire.MAX_MESSAGE_BYTES
    """The bytes of broadcasts all peers together may send at once (at least
    ``broadcast_bytes_burst``)."""
    request_rate: float = 100.0
    """Direct requests per second one peer may send (as ``broadcast_rate`` for broadcasts); past
    it a request's stream is reset unread (``counts["limited"]``)."""
    open_requests: int = 100
    """Direct requests one peer may have open at once (sent, read or not, and not yet answered:
    a stream that sends nothing is held until the read deadline, 30 s); past it the same."""
    open_requests_total: int = 1000
    """Direct requests all peers together may have open at once; past it the same (a peer id
    costs nothing to make: many identities each within ``open_requests`` were unbounded)."""
    answer_timeout: float = 60.0
    """How long a peer's request waits for this agent's answer at most (seed: 60 s), seconds;
    less when the request itself asks for less."""

    def __post_init__(self) -> None:
        if not isinstance(self.agent_name, str) or not self.agent_name.strip() or len(self.agent_name) > 128:
            raise ConfigError("mesh: the agent name must be 1 to 128 characters")
        if (problem := wire.name_problem(self.agent_name)) is not None:  # peers would refuse its messages
            raise ConfigError(f"mesh: the agent name {self.agent_name!r} {problem}")
        if self.seed is not None and len(self.seed) != 32:
            raise ConfigError(f"mesh: the identity seed must be 32 bytes, not {len(self.seed)}")
        if self.psk is not None and len(self.psk) != 32:
            raise ConfigError(f"mesh: the private-network key must be 32 bytes, not {len(self.psk)}")
        for name, port in (("port", self.port), ("ws_port", self.ws_port)):
            if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535):
                raise ConfigError(f"mesh: {name} {port!r} is not a TCP port")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("mesh: a TLS certificate needs its key, and a key its certificate")
        if self.tls_cert is not None and self.ws_port is None:
            raise ConfigError("mesh: a TLS certificate is for the WebSocket listener: give ws_port too")
        if self.tls_cert is not None and self.ws_port == self.port != 0:
            raise ConfigError("mesh: a secure WebSocket needs a port of its own (only a plain one shares the TCP port)")
        if not self.dht_interval > 0:
            raise ConfigError("mesh: dht_interval must be positive")
        for relay in self.relays:
            if "/p2p/" not in relay or "/p2p-circuit" in relay:
                raise ConfigError(f"mesh: relay {relay!r} is not a relay's address (/ip4/…/tcp/…/p2p/<id>)")
        n = self.auto_relays
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 8:
            raise ConfigError(f"mesh: auto_relays {self.auto_relays!r} is not a number of relays from 0 to 8")
        if not self.topic:
            raise ConfigError("mesh: the broadcast topic is empty")
        if not self.broadcast_bytes_rate > 0 or self.broadcast_bytes_burst < 1:
            raise ConfigError("mesh: broadcast_bytes_rate and broadcast_bytes_burst must be positive")
        if not self.broadcast_bytes_rate_total > 0 or self.broadcast_bytes_burst_total < self.broadcast_bytes_burst:
            raise ConfigError(
                "mesh: broadcast_bytes_rate_total must be positive, broadcast_bytes_burst_total at least"
                f" broadcast_bytes_burst ({self.broadcast_bytes_burst})"
            )
        if not self.request_rate > 0 or self.open_requests < 1 or self.open_requests_total < 1:
            raise ConfigError("mesh: request_rate must be positive, open_requests and open_requests_total at least 1")
        if not 0 < self.answer_timeout <= REQUEST_TIMEOUT_MAX_MS / 1000 or self.call_timeout <= 0:
            raise ConfigError("mesh: timeouts must be positive (answer_timeout at most 600 s)")


@dataclass
class MeshPeer:
    """What the node knows of one peer (kept across disconnects, until pruned)."""

    id: str
    addrs: list[str] = field(default_factory=list)
    status: Literal["discovered", "connected", "disconnected"] = "discovered"
    agent_name: str | None = None
    """Learnt from the peer's messages."""
    discovered_at: int = 0
    connected_at: int | None = None
    disconnected_at: int | None = None
    relayed: bool = False
    """Connected through relays only (no direct connection, or not yet: ``hole_punch``)."""

    def public(self) -> dict[str, Any]:
        return {
            "peerId": self.id,
            "agentName": self.agent_name,
            "status": self.status,
            "addresses": list(self.addrs),
            "discoveredAt": self.discovered_at,
            "connectedAt": self.connected_at,
            "disconnectedAt": self.disconnected_at,
            "relayed": self.relayed,
        }


@dataclass(frozen=True)
class BroadcastResult:
    topic: str
    peers_reached: int
    """Peers of the topic's mesh the publish went to directly."""
    message_id: str


RELAY_LIMITS = {"duration": 3600, "data": 1 << 30, "max_circuit_conns": 64, "max_reservations": 32}
"""What a relay (``relay_service``) gives: a relayed connection lasts at most an hour and carries at
most 1 GiB; at most 64 relayed connections and 32 reservations at once (py-libp2p also holds each
IP address to 8 reservations and 16 connections)."""
RELAY_STATUS = {
    200: "the relay refused the reservation",
    201: "the relay is at its limits",
    202: "the relay does not allow it",
    203: "the relay could not reach the peer",
    204: "the peer holds no reservation on that node (is it the peer's relay, and a relay?)",
}
"""What circuit relay v2's failure codes mean, in the words a refused dial is said in."""
RELAY_RETRY_S = (1.0, 30.0)
"""How soon a relay that could not be reached, or refused the reservation, is tried again: the
first wait, doubled each time up to the second."""
RELAY_CHECK_S = 1.0
"""How often the connection to each relay is looked at (one lost is dialled again)."""
AUTONAT_RECHECK_S = 300.0
"""How long a peer's answer to "dial me back" (AutoNAT) stands before it is asked again."""
AUTONAT_DIAL_S = 5.0
"""How long a relay dialling a peer back (AutoNAT) tries one of its addresses."""

DHT_RETRY_S = 1.0
"""How soon a node whose last DHT round reached no peer tries another (``MeshConfig.dht``)."""

DHT_PROVIDERS = 100
"""The most providers of the topic's key one DHT look-up returns."""
DHT_ASK = 20
"""The DHT peers a look-up asks at each of its two hops (Kademlia's k)."""

BROADCAST_SEEN_S = 3600
"""How long a node remembers the broadcasts it has seen (by sender and sequence number), to drop
another copy of one (py-libp2p's default, 120 s, let any peer replay a signed broadcast it had
kept once that time had passed: stored and shown again as new)."""

BROADCAST_MAX_AGE_S = 3000
"""A broadcast sent (by its own signed timestamp) longer ago than this is refused: a copy of one
past ``BROADCAST_SEEN_S`` is no longer remembered, and is refused so. 10 minutes less than that,
for peers whose clocks disagree; a peer whose clock is 50 minutes behind has its broadcasts refused."""

BROADCAST_MAX_BYTES = 1024 * 1024 - 1024
"""The largest broadcast body: py-libp2p's GossipSub (as go's and js's by default) drops an RPC
past 1 MiB when it sends it and when it reads it; 1 KiB is left for the envelope (sender, seqno,
topic, signature)."""


class MeshNode:
    """A libp2p peer with a synchronous API; ``start()`` it (or use ``with``), ``close()`` it."""

    def __init__(
        self,
        config: MeshConfig,
        *,
        on_request: RequestCallback | None = None,
        on_broadcast: BroadcastCallback | None = None,
    ):
        """``on_request(peer_id, request)`` answers every request (one asking for an automatic
        reply too: ``request.auto_reply``): a text, a (text, is_error) pair, or a future of one
        (the node waits for it up to the request's timeout, and for one running then, whose
        answer is being made or recorded, up to as long again); an exception answers with an error
        at once. Without it every request is acknowledged automatically. ``on_broadcast(peer_id, broadcast)`` sees every
        broadcast from another peer. Both run on worker threads."""
        try:
            import cbor2  # noqa: F401
            import libp2p  # noqa: F401
            import trio  # noqa: F401
        except ImportError as e:
            raise MeshUnavailable(f"the agent mesh needs py-libp2p: {install_hint('mesh')} ({e})") from None
        self.config = config
        self.on_request = on_request
        self.on_broadcast = on_broadcast
        self.on_addrs: Callable[[], None] | None = None
        """Called (on a worker thread) when the node's addresses change: a relay took its
        reservation, or it was lost. ``addrs`` has them (read there: of two calls at once, each
        reads the newest)."""
        self._lock = threading.Lock()
        self._peers: dict[str, MeshPeer] = {}
        self.counts = {
            "requests_in": 0,
            "requests_out": 0,
            "broadcasts_in": 0,
            "broadcasts_out": 0,
            "rejected": 0,
            "dropped": 0,
            "dropped_out": 0,
            "over_budget": 0,
            "limited": 0,
        }
        """What passed through the node (``rejected``: malformed or spoofed input; ``dropped``:
        broadcasts that came past ``INBOX_SIZE`` waiting; ``dropped_out``: copies of this node's
        broadcasts not given to a peer that takes nothing, ``QUEUE_STALL_SECONDS``; ``over_budget``:
        broadcasts dropped unread past their sender's ``broadcast_bytes_rate`` or all peers'
        ``broadcast_bytes_rate_total``; ``limited``:
        requests refused unread, past a peer's ``request_rate`` or ``open_requests``)."""
        self._open_in: dict[str, int] = {}
        """Inbound requests open now, by peer (read and written on the network thread only)."""
        self._open_total = 0
        """Their sum (network thread)."""
        self._recent_in: dict[str, collections.deque[float]] = {}
        """When each peer's admitted requests came within the last second (network thread)."""
        self._limit_logged: dict[str, float] = {}
        self._budgets: dict[str, tuple[float, float]] = {}
        """Each peer's byte budget for broadcasts: (bytes left, when), monotonic seconds (the
        pump's task only)."""
        self._budget_logged: dict[str, float] = {}
        self._budget_total: tuple[float, float] | None = None
        """The byte budget of all peers' broadcasts together, as each peer's (None: full)."""
        self._stalled: dict[Any, int] = {}
        """Peers whose outbound queue stayed full (``QUEUE_STALL_SECONDS``), each with how many
        broadcasts it was not given since (network thread)."""
        self._waiting: dict[concurrent.futures.Future[Reply], int] = {}
        """How many streams wait for each answer (a request asked again waits on the first's)
        (network thread)."""
        self._answering = 0
        """Requests read and not yet answered: waiting for their answer, or writing it (network
        thread)."""
        self.bootstrap_failed: list[dict[str, str]] = []
        """The bootstrap peers ``start`` could not dial: ``{"address", "error"}`` each."""
        self._token: Any = None
        self._stop: Any = None
        self._nursery: Any = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._sockets: list[Any] = []
        """The TCP streams of this node's connections (closed at shutdown whatever else happened)."""
        self._init_host()

    def _init_host(self) -> None:
        import multiaddr
        from libp2p import new_host
        from libp2p.crypto.ed25519 import create_new_key_pair
        from libp2p.crypto.x25519 import create_new_key_pair as new_x25519
        from libp2p.custom_types import TProtocol
        from libp2p.identity_utils import create_identity_from_seed
        from libp2p.network import swarm
        from libp2p.pubsub import pubsub as pubsub_module
        from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, GossipSub
        from libp2p.pubsub.pubsub import Pubsub
        from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_ID
        from libp2p.security.noise.transport import Transport as Noise
        from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_ID
        from libp2p.stream_muxer.yamux.yamux import Yamux
        from libp2p.transport.websocket.transport import WebsocketTransport

        from . import pnet

        quiet_libp2p()
        swarm._HAPPY_EYEBALLS_DELAY = 0.0
        # a burst of broadcasts read off one connection is pushed to the subscription without a
        # pause: past 32 waiting they were dropped (read when the subscription is made)
        pubsub_module.SUBSCRIPTION_CHANNEL_SIZE = max(pubsub_module.SUBSCRIPTION_CHANNEL_SIZE, INBOX_SIZE)
        cfg = self.config
        if cfg.psk is not None:
            pnet.install()
        key_pair = create_identity_from_seed(cfg.seed) if cfg.seed is not None else create_new_key_pair()
        self._listen = [multiaddr.Multiaddr(f"/ip4/{cfg.host}/tcp/{cfg.port}")]
        if cfg.ws_port is not None:
            ws, ws_port = "ws", cfg.ws_port
            if cfg.tls_cert is not None:
                # a port the TCP listener shares (both 0 are one) sorts a WebSocket from libp2p's
                # own by its first bytes, which TLS hides: a secure one gets a port of its own
                ws, ws_port = "tls/ws", cfg.ws_port or _free_port(cfg.host)
            self._listen.append(multiaddr.Multiaddr(f"/ip4/{cfg.host}/tcp/{ws_port}/{ws}"))
        tls_server, tls_client = _tls_contexts(cfg)
        self._host = new_host(
            key_pair=key_pair,
            sec_opt={NOISE_ID: Noise(key_pair, noise_privkey=new_x25519().private_key)},
            muxer_opt={TProtocol(YAMUX_ID): Yamux},
            listen_addrs=self._listen,
            psk=cfg.psk.hex() if cfg.psk is not None else None,
            enable_mDNS=cfg.mdns,
            tls_client_config=tls_client,
            tls_server_config=tls_server,
        )
        self._router = GossipSub(
            protocols=[PROTOCOL_ID_V11, PROTOCOL_ID],
            degree=6,
            degree_low=4,
            degree_high=12,
            heartbeat_initial_delay=0.1,
            heartbeat_interval=1,
            spam_protection_enabled=True,
            max_messages_per_topic_per_second=cfg.broadcast_rate,
            eclipse_protection_enabled=False,
        )
        # mDNS is started by this node, its registration off the network thread (``_run_mdns``)
        host: Any = self._host
        self._mdns: Any = host.mDNS
        host.mDNS = None
        self._pubsub = Pubsub(self._host, self._router, seen_ttl=BROADCAST_SEEN_S)
        # message ids are the sender and a counter that starts at the time in seconds: a node
        # restarted with the same identity within a second sent ids its peers had seen, and they
        # dropped its broadcasts as duplicates (go-libp2p starts at nanoseconds)
        self._pubsub.counter = time.time_ns()
        network: Any = self._host.get_network()  # its swarm: more than the interface types
        self._network: Any = network
        # a node dials WebSocket addresses whether or not it listens on one (the swarm only
        # builds the transports its listen addresses name)
        if not any(isinstance(t, WebsocketTransport) for t in network.transport_manager.get_transports()):
            network.transport_manager.add_transport(WebsocketTransport(network.upgrader, tls_client_config=tls_client))
        # its auto-connector dials every peer the peer store knows until 150 connections are open:
        # redials of peers that are leaving, sockets left open when this node stops mid-dial. This
        # node dials what it discovers and what it is told to, nothing else.
        network.auto_connector.maybe_connect = _no_auto_dial
        network.set_stream_handler(_ends_its_stream_only(network.common_stream_handler))
        self.peer_id = str(self._host.get_id())
        self._dht: Any = None
        if cfg.dht:
            from libp2p.kad_dht import DHTMode, KadDHT

            self._dht = KadDHT(self._host, DHTMode.SERVER)
        self._relay_transport: Any = None
        self._auto_relays: dict[str, str] = {}
        """The relays found (``MeshConfig.auto_relays``) the node keeps a reservation on, or is
        taking one on: their peer ids and the addresses it dialled them at."""
        self.dht_rounds = 0
        """Rounds of the DHT's announce and look-up done (``MeshConfig.dht``)."""
        self.dht_reached = 0
        """Those of them whose announcement a peer of the DHT took."""
        self.reachability: Literal["unknown", "public", "private"] = "unknown"
        """Whether peers can dial this node (AutoNAT; found with ``MeshConfig.auto_relays``):
        ``public`` when more of the relays asked dialled it back than failed to, ``private``
        when more failed, or when it takes no connection at all (it listens on nothing but its
        relays), ``unknown`` until a relay answers."""

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 15.0) -> MeshNode:
        """Listen, subscribe to the topic, dial the bootstrap peers; ``MeshError`` if it cannot."""
        if self._thread is not None:
            raise MeshError("mesh: this node was already started (a node starts once)")
        for port in {self.config.port, self.config.ws_port or 0} - {0}:
            _check_port_free(self.config.host, port)
        self._thread = threading.Thread(target=self._run, name=f"mesh-{self.config.agent_name}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise MeshError(f"mesh: the node did not start within {timeout:g} s")
        if self._error is not None:
            err = self._error
            raise MeshError(f"mesh: the node could not start: {_describe(err)}") from err
        for addr in self.config.bootstrap:
            try:
                self.connect(addr)
            except MeshError as e:
                log.warning("mesh: bootstrap peer %s: %s", addr, e)
                self.bootstrap_failed.append({"address": addr, "error": str(e).removeprefix("mesh: ")})
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Stop the node: close its connections, leave the topic, end its thread."""
        import trio

        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        if self._token is not None and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._stop.set)
        thread.join(timeout)
        if thread.is_alive():
            raise MeshError(f"mesh: the node did not stop within {timeout:g} s")

    def __enter__(self) -> MeshNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._ready.is_set() and self._error is None

    def _run(self) -> None:
        import trio

        try:
            trio.run(self._main)
        except BaseException as e:  # noqa: BLE001 - reported by start(), or logged when it comes later
            self._error = e
            if self._ready.is_set():
                log.error("mesh: the node stopped: %s", _describe(e))
        finally:
            self._ready.set()

    async def _main(self) -> None:
        import trio
        from libp2p.custom_types import TProtocol
        from libp2p.tools.anyio_service import background_trio_service

        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        self._discovery = trio.CancelScope()
        self._relaying = trio.CancelScope()
        self._dht_wake = trio.Event()
        host = self._host
        host.set_stream_handler(TProtocol(wire.PROTOCOL), self._handle_stream)
        self._network.register_notifee(_Notifee(self))
        discovered = self._watch_mdns() if self.config.mdns else None
        inbox_send, inbox_receive = trio.open_memory_channel[tuple[str, wire.Broadcast]](INBOX_SIZE)
        self._inbox = inbox_send
        try:
            async with (
                host.run(self._listen),
                background_trio_service(self._pubsub),
                background_trio_service(self._router),
                trio.open_nursery() as nursery,
            ):
                self._nursery = nursery
                await self._pubsub.wait_until_ready()
                subscription = await self._pubsub.subscribe(self.config.topic)
                nursery.start_soon(self._pump_broadcasts, subscription)
                nursery.start_soon(self._deliver_broadcasts, inbox_receive)
                if self._mdns is not None:
                    nursery.start_soon(self._run_mdns, self._mdns)
                if self._dht is not None:
                    nursery.start_soon(self._run_dht, self._dht)
                await nursery.start(self._run_relay)
                self._ready.set()
                await self._stop.wait()
                await self._hang_up()
                nursery.cancel_scope.cancel()
        finally:
            if discovered is not None:
                from libp2p.discovery.events.peerDiscovery import peerDiscovery

                peerDiscovery.unregister_peer_discovered_handler(discovered)
            self._pubsub.seen_messages.stop()  # its thread is not stopped by Pubsub itself
            # a node stopped by an error did not hang up: its connections' sockets stayed open
            # until it was garbage (closed already when it did)
            _close_sockets(self._open_sockets())

    async def _hang_up(self) -> None:
        """Let the answers given and the broadcasts still queued for peers go out, then close
        every connection (leaving the host does not close the ones this node dialled: their
        sockets would stay open until the node is garbage)."""
        import trio

        self._discovery.cancel()  # the DHT's rounds dial peers: none while the node hangs up
        self._relaying.cancel()  # (nor the relays)
        # the answers given as the node stops (its agent answers what still waits: "the agent
        # stopped") are written, and read by their senders, before the listeners close: closing
        # one ends the connections it took in at once (py-libp2p runs them in its nursery), and
        # a sender cut off tried again, and the agent restarted took the same request in again
        with trio.move_on_after(ANSWERS_OUT_S):
            while self._answering > sum(n for fut, n in self._waiting.items() if not fut.done()) or self._unread():
                await trio.sleep(0.005)
        # the broadcasts still queued go out before the listeners close too: over a connection a
        # peer made, they were cut off with it
        with trio.move_on_after(1):  # a publish only queues its message for each peer's sender
            while any(len(q) for q in self._pubsub.peer_queues.values()):
                await trio.sleep(0.005)
            await trio.sleep(0.05)  # the last one taken off a queue is being written
        # nor is a connection taken in meanwhile: one a peer made as this node left outlived the
        # connections closed below, and held up the peer's view of it (``_renew_topic_stream``)
        await self._stop_listening()
        sockets = self._open_sockets()
        with trio.move_on_after(2):
            for pid in list(self._host.get_connected_peers()):
                with contextlib.suppress(Exception):  # already closing
                    await self._network.close_peer(pid)
        # what a busy or failing close left open (py-libp2p logs and goes on), and what was
        # connected meanwhile: closed here, or the socket stays open until the node is garbage
        _close_sockets(sockets + self._open_sockets())

    def _unread(self) -> bool:
        """Whether a peer has yet to read an answer of this node: on a stream it opened, this
        node's side is closed (the answer written) and the peer's not yet (it closes once it has
        read the answer)."""
        conns = [c for cs in self._network.get_connections_map().values() for c in cs]
        return any(
            getattr(s, "is_initiator", None) is False
            and getattr(s, "send_closed", None)
            and getattr(s, "recv_closed", None) is False
            and not getattr(s, "reset_received", False)
            for c in conns
            for s in list(getattr(c.muxed_conn, "streams", {}).values())
        )

    async def _stop_listening(self) -> None:
        """Close every listener: the node takes no connection any more. Each is taken out of the
        network's list before it closes: identify asks those listed for their addresses at any
        time, and a closed one's socket has none (EBADF; the error stopped the node)."""
        for addr, listener in list(self._network.listeners.items()):
            self._network.listeners.pop(addr, None)
            with contextlib.suppress(Exception):
                await listener.close()

    def _renew_topic_stream(self, peer: Any) -> None:
        """Open the topic's stream to ``peer`` again when the one py-libp2p holds runs on a
        connection that closed while another to the peer stays open. py-libp2p forgets a peer's
        stream only with its last connection, and says hello (this node's subscriptions) only on
        a new stream: over the connection left, the peer never learnt this node was on the topic,
        and what was published to it went nowhere. (Two connections to one peer: both dialled at
        once, through the DHT or mDNS; or an agent that left, and a command with its identity
        connecting again before the agent saw the first connection close.)"""
        pubsub = self._pubsub
        stream = pubsub.peers.get(peer)
        if stream is None or not stream.muxed_conn.is_closed:
            return
        if all(c.muxed_conn.is_closed for c in self._network.get_connections(peer)):
            return  # its last connection: pubsub forgets the peer itself
        del pubsub.peers[peer]  # (the subscriptions it told stay: they came on its own stream)
        queue = pubsub.peer_queues.pop(peer, None)
        if queue is not None:
            queue.close()  # its sender ends
        pubsub._schedule_peer_stream_retry(peer)

    def _open_sockets(self) -> list[Any]:
        """The sockets of this node's connections, and of every WebSocket connection it dialled
        (the WebSocket transport keeps them all, failed ones too: a private network's handshake
        refused)."""
        conns = [conn for conns in self._network.get_connections_map().values() for conn in conns]
        for transport in self._network.transport_manager.get_transports():
            conns += list(getattr(transport, "_connections", {}).values())
        return [sock for conn in conns if (sock := _tcp_stream(conn)) is not None] + self._sockets

    async def _run_mdns(self, mdns: Any) -> None:
        """Announce this node by mDNS, then keep the discoveries fresh until the node stops.
        zeroconf's registration probes the network first (1.5 s, 3-5 s on a busy machine): made
        by py-libp2p in the network thread, it held up the whole node meanwhile (``start`` waited
        for it; no peer was heard); here it runs on a worker thread, and so does the goodbye."""
        import trio

        try:
            await trio.to_thread.run_sync(mdns.broadcaster.register)  # (stop waits for it)
            await mdns._cleanup_loop()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(mdns.stop)

    def _watch_mdns(self) -> Callable[[Any], None]:
        """Dial every peer mDNS discovers (the listener only fills the peer store)."""
        from libp2p.discovery.events.peerDiscovery import peerDiscovery

        me = self._host.get_id()

        def discovered(info: Any) -> None:  # on zeroconf's thread
            if info.peer_id == me:
                return
            self._note(str(info.peer_id), fresh_addrs=[str(a) for a in info.addrs])
            with contextlib.suppress(Exception):  # the node is stopping
                self._token.run_sync_soon(self._spawn, self._dial_info, info)

        peerDiscovery.register_peer_discovered_handler(discovered)
        return discovered

    async def _run_relay(self, task_status: Any) -> None:
        """Circuit relay v2 on this node: it takes relayed connections (``stop``) and dials
        ``/p2p-circuit`` addresses always, relays for others with ``relay_service`` (``hop``),
        keeps a reservation on each of its ``relays``, and upgrades relayed connections to direct
        ones (``hole_punch``)."""
        import multiaddr
        import trio
        from libp2p.relay.circuit_v2.config import RelayConfig, RelayRole
        from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol
        from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
        from libp2p.relay.circuit_v2.resources import RelayLimits
        from libp2p.relay.circuit_v2.transport import CircuitV2Transport
        from libp2p.tools.anyio_service import background_trio_service

        hop = self.config.relay_service
        if hop:  # a relay tells peers whether it can dial them back (AutoNAT; its handler: registered now)
            _autonat_server()(self._host)
        limits = RelayLimits(**RELAY_LIMITS)
        protocol = _relay_protocol(CircuitV2Protocol)(self._host, limits=limits, allow_hop=hop)  # (handlers: at run)
        roles = RelayRole.STOP | RelayRole.CLIENT | RelayRole.HOP if hop else RelayRole.STOP | RelayRole.CLIENT
        async with contextlib.AsyncExitStack() as services:
            await services.enter_async_context(background_trio_service(protocol))
            if self.config.hole_punch:  # (it looks at the connections every 2 s, and upgrades relayed ones)
                await services.enter_async_context(background_trio_service(DCUtRProtocol(self._host)))
            relays = await services.enter_async_context(trio.open_nursery())
            self._relay_transport = CircuitV2Transport(self._host, protocol, RelayConfig(roles=roles, limits=limits))
            # the addresses through the relays are this node's like those it listens on: identify
            # tells peers of them, the DHT's provider records hold them (py-libp2p's addrs_factory
            # cannot say them: it cuts an address at its first /p2p/, the relay's)
            host: Any = self._host
            listening = host.get_addrs
            host.get_addrs = lambda: listening() + [multiaddr.Multiaddr(a) for a in self.relayed_addrs()]
            task_status.started()
            with self._relaying:  # (cancelled first when the node stops, with the DHT's dials)
                for addr in self.config.relays:
                    relays.start_soon(self._keep_reservation, addr, relays)
                if self.config.auto_relays:
                    relays.start_soon(self._check_reachability)
                    relays.start_soon(self._find_relays, relays)
                await trio.sleep_forever()

    async def _keep_reservation(self, addr: str, nursery: Any, *, again: bool = True) -> None:
        """Dial the relay at ``addr`` and reserve a slot on it; again when the connection to it
        or the reservation is lost, or after a wait when it could not be reached or refused
        (``RELAY_RETRY_S``). Without ``again``, return then instead. py-libp2p renews a
        reservation before it expires."""
        import multiaddr
        import trio
        from libp2p.peer.peerinfo import info_from_p2p_addr
        from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP

        info = info_from_p2p_addr(multiaddr.Multiaddr(addr))
        wait = RELAY_RETRY_S[0]
        while True:
            try:
                with trio.fail_after(self.config.call_timeout):
                    await self._host.connect(info)
                    stream = await self._host.new_stream(info.peer_id, [HOP])
                    reserved = await self._relay_transport.reserve(stream, info.peer_id, nursery)
                    with contextlib.suppress(Exception):
                        await stream.close()
            except Exception as e:  # noqa: BLE001 - tried again below
                log.info("mesh: relay %s: %s", addr, _describe(e))
                reserved = False
            if not reserved:
                if not again:
                    log.info("mesh: relay %s took no reservation", addr)
                    return
                log.warning("mesh: relay %s took no reservation; trying again in %g s", addr, wait)
                await trio.sleep(wait)
                wait = min(2 * wait, RELAY_RETRY_S[1])
                continue
            nursery.start_soon(self._tell_addrs)
            wait = RELAY_RETRY_S[0]
            held = self._relay_transport._reservations  # (py-libp2p drops one that expired unrenewed)
            while self._network.get_connections(info.peer_id) and info.peer_id in held:
                await trio.sleep(RELAY_CHECK_S)
            held.pop(info.peer_id, None)
            nursery.start_soon(self._tell_addrs)
            if not again:
                log.info("mesh: relay %s lost, or its reservation", addr)
                return
            log.info("mesh: relay %s lost, or its reservation; reserving again", addr)

    async def _find_relays(self, nursery: Any) -> None:
        """Keep a reservation on ``auto_relays`` relays among the peers connected (not through a
        relay: a relay reached through another is no help), each looked for every
        ``RELAY_CHECK_S``; one that refused or was lost is passed over for ``RELAY_RETRY_S[1]``.
        None while peers can dial this node (``reachability``): those held are let go."""
        import trio
        from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP

        named = {addr.rsplit("/p2p/", 1)[1] for addr in self.config.relays}
        passed_over: dict[str, float] = {}
        let_go: set[str] = set()  # (not passed over: taken again as soon as it is needed)

        async def keep(peer: str, addr: str) -> None:
            try:
                await self._keep_reservation(addr, nursery, again=False)
            finally:
                del self._auto_relays[peer]
                if peer not in let_go:
                    passed_over[peer] = trio.current_time() + RELAY_RETRY_S[1]
                let_go.discard(peer)

        def address(pid: Any) -> str | None:
            """Where to dial the relay ``pid`` (None: it is no relay, or one of no use)."""
            store = self._host.get_peerstore()
            try:
                if _relayed(self._network, pid) or not store.supports_protocols(pid, [HOP]):
                    return None
                addrs = [a for a in store.addrs(pid) if "/p2p-circuit" not in str(a)]
            except Exception:  # noqa: BLE001 - gone from the peer store meanwhile (its addresses expired)
                return None
            return str(_to_peer(addrs[0], pid)) if addrs else None

        while True:
            now = trio.current_time()
            if self.reachability == "public":  # let go: their keeping ends, and py-libp2p's renewal
                held = self._relay_transport._reservations
                now_let_go = {p for p in list(self._auto_relays) if held.pop(_peer_id(p), None) is not None}
                let_go.update(now_let_go)
                if now_let_go:
                    log.info("mesh: peers can dial this node (AutoNAT): it lets go of the relays it found")
            for pid in self._host.get_connected_peers():
                peer = str(pid)
                if len(self._auto_relays) >= self.config.auto_relays or self.reachability == "public":
                    break
                if peer in named or peer in self._auto_relays or passed_over.get(peer, 0) > now:
                    continue
                if (addr := address(pid)) is not None:
                    log.info("mesh: found a relay: %s", addr)
                    self._auto_relays[peer] = addr
                    nursery.start_soon(keep, peer, addr)
            await trio.sleep(RELAY_CHECK_S)

    async def _check_reachability(self) -> None:
        """AutoNAT's client: ask each relay connected (directly) to dial this node back at its
        own addresses, again after ``AUTONAT_RECHECK_S``, and keep ``reachability`` to what
        the relays still connected said. A relay refusing (no address of the node is at the IP
        it sees it come from) says nothing."""
        import math

        import trio
        from libp2p.host.autonat.autonat import AUTONAT_PROTOCOL_ID, AutoNATService
        from libp2p.host.autonat.pb.autonat_pb2 import Message

        client = AutoNATService(self._host, serve=False)  # type: ignore[arg-type]
        store = self._host.get_peerstore()
        said: dict[str, bool] = {}
        asked: dict[str, float] = {}
        while True:
            own = [a.to_bytes() for a in self._host.get_addrs() if "/p2p-circuit" not in str(a)]
            for pid in list(self._host.get_connected_peers()):
                peer = str(pid)
                if not own or asked.get(peer, -math.inf) + AUTONAT_RECHECK_S > trio.current_time():
                    continue
                if _relayed(self._network, pid) or not store.supports_protocols(pid, [AUTONAT_PROTOCOL_ID]):
                    continue
                asked[peer] = trio.current_time()
                try:
                    status, _ = await client.query_server(pid, own, timeout=self.config.call_timeout)
                except Exception as e:  # noqa: BLE001 - no answer: nothing said
                    log.debug("mesh: AutoNAT: %s did not answer: %s", peer, _describe(e))
                    continue
                if status in (Message.OK, Message.E_DIAL_ERROR):
                    said[peer] = status == Message.OK
            live = {str(p) for p in self._host.get_connected_peers()}
            yes = sum(1 for p, ok in said.items() if ok and p in live)
            no = sum(1 for p, ok in said.items() if not ok and p in live)
            was = self.reachability
            if not own:  # it takes no connection at all
                self.reachability = "private"
            else:
                self.reachability = "public" if yes > no else "private" if no > yes else "unknown"
            if self.reachability != was:
                log.info(
                    "mesh: reachability %s (AutoNAT: %d relays dialled it back, %d could not)",
                    self.reachability,
                    yes,
                    no,
                )
            await trio.sleep(RELAY_CHECK_S)

    async def _tell_addrs(self) -> None:
        if self.on_addrs is not None:
            try:
                await _to_thread(self.on_addrs)
            except Exception as e:  # noqa: BLE001 - the node goes on; whoever listens said why
                log.warning("mesh: telling of the node's new addresses failed: %s", _describe(e))

    async def _run_dht(self, dht: Any) -> None:
        """Run the DHT, and a round of it every ``dht_interval`` s (``_dht_round``); a round that
        reached no peer (the first comes before the bootstrap peers are dialled, or identify has
        not told yet that they speak the DHT) is tried again within a second, not a whole
        interval later; ``dht_round`` asks for one at once."""
        import trio
        from libp2p.tools.anyio_service import background_trio_service

        key = bytes.fromhex(rendezvous_key(self.config.topic))
        with self._discovery:  # cancelled first when the node stops, its dials with it
            async with background_trio_service(dht), trio.open_nursery() as dials:
                while True:
                    reached = await self._dht_round(dht, key, dials)
                    self.dht_rounds += 1
                    self.dht_reached += reached
                    wait = self.config.dht_interval if reached else min(DHT_RETRY_S, self.config.dht_interval)
                    with trio.move_on_after(wait):
                        await self._dht_wake.wait()
                    self._dht_wake = trio.Event()

    async def _dht_round(self, dht: Any, key: bytes, dials: Any) -> bool:
        """Put the peers this node is connected to that speak the DHT in its routing table (the
        bootstrap peers are its way in), announce this node as a provider of ``key``, and dial
        the other providers found (in ``dials``); whether a peer took the announcement."""
        import trio
        from libp2p.kad_dht.common import PROTOCOL_ID as KAD

        reached = False
        with trio.move_on_after(3 * self.config.call_timeout):  # (its provide, then two hops)
            try:
                for pid in self._host.get_connected_peers():
                    if _speaks(self._host, pid, KAD):  # (a peer identify has not told of yet: next round)
                        await dht.add_peer(pid)
                reached = bool(await dht.provide(key.hex()))  # (True once a peer took the record)
                found = await self._providers(dht, key)
            except Exception as e:  # noqa: BLE001 - a round that failed is tried again next time
                log.info("mesh: DHT round failed: %s", _describe(e))
                return reached
            me, connected = self._host.get_id(), set(self._host.get_connected_peers())
            for info in found:
                if info.peer_id != me and info.peer_id not in connected and info.addrs:
                    self._note(str(info.peer_id), fresh_addrs=[str(a) for a in info.addrs])
                    dials.start_soon(self._dial_info, info)
        return reached

    async def _providers(self, dht: Any, key: bytes) -> list[Any]:
        """The providers of ``key``: the records this node holds, and those its closest DHT peers
        hold, asked each time, with one more hop to the closer peers they name. (py-libp2p's own
        ``find_providers`` answers from this node's records alone once it holds any, and a node
        that announced itself holds its own: it never asked the network again.)"""
        import trio

        store = dht.provider_store
        found = {p.peer_id: p for p in store.get_providers(key)}
        asked: set[Any] = {self._host.get_id()}
        closer: list[Any] = []

        async def ask(pid: Any) -> None:
            with trio.move_on_after(self.config.call_timeout), contextlib.suppress(Exception):
                providers, nearer = await store._get_providers_from_peer_with_closers(pid, key)
                for p in providers:
                    found.setdefault(p.peer_id, p)
                closer.extend(nearer)

        for hop in (dht.routing_table.find_local_closest_peers(key, DHT_ASK), closer):
            todo = [pid for pid in dict.fromkeys(hop) if pid not in asked][:DHT_ASK]
            asked.update(todo)
            async with trio.open_nursery() as nursery:
                for pid in todo:
                    nursery.start_soon(ask, pid)
        return list(found.values())[:DHT_PROVIDERS]

    def dht_round(self, timeout: float | None = None) -> bool:
        """Run a round of the DHT's announce and look-up now rather than at its interval, and
        wait until one reaches a peer of the DHT (a round that reaches none, as when identify has
        not yet told that a peer just dialled speaks the DHT, is tried again every
        ``DHT_RETRY_S``), at most ``timeout`` (the node's ``call_timeout`` by default). The
        providers it found are dialled and listed by ``peers()`` (as discovered, then
        connected). False when the node runs no DHT, or no round reached a peer in time."""
        if self._dht is None or not self.running:
            return False
        before = self.dht_reached
        with contextlib.suppress(Exception):  # the node is stopping
            self._token.run_sync_soon(lambda: self._dht_wake.set())
        deadline = time.monotonic() + (timeout if timeout is not None else self.config.call_timeout)
        while self.dht_reached == before and time.monotonic() < deadline and self.running:
            time.sleep(0.01)
        return self.dht_reached > before

    def _spawn(self, afn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(afn, *args)

    async def _dial_info(self, info: Any) -> None:
        import trio

        try:
            with trio.fail_after(self.config.call_timeout):
                await self._dial(info)
        except Exception as e:  # noqa: BLE001 - a discovered peer that cannot be dialled stays "discovered"
            log.info("mesh: discovered peer %s not reachable: %s", info.peer_id, _describe(e))

    async def _dial(self, info: Any) -> None:
        """Connect to the peer of ``info`` unless connected: at its direct addresses through the
        swarm, then at each relayed one through the relay transport (py-libp2p's swarm dials no
        relayed address itself); the last failure is raised."""
        import trio
        from libp2p.peer.peerinfo import PeerInfo

        self._network.unblock_peer(info.peer_id)
        if any(not c.is_closed for c in self._network.get_connections(info.peer_id)):
            return
        # a connection the peer closed stays listed a moment (while its close is handled), and
        # py-libp2p's connect takes a listed one as connected: a peer restarted with its identity
        # and dialled at once was never dialled, and stayed out of the topic mesh
        with trio.move_on_after(CLOSING_WAIT_S):
            while self._network.get_connections(info.peer_id):
                await trio.sleep(0.01)
        self._forget_addrs(info.peer_id)
        direct = [a for a in info.addrs if "/p2p-circuit" not in str(a)]
        targets: list[Any] = [PeerInfo(info.peer_id, direct)] if direct else []
        targets += [_to_peer(a, info.peer_id) for a in info.addrs if "/p2p-circuit" in str(a)]
        failure: Exception | None = None
        for target in targets:
            try:
                if isinstance(target, PeerInfo):
                    await self._host.connect(target)
                else:
                    await self._relay_transport.dial(target)
                return
            except Exception as e:  # noqa: BLE001 - the next address, or raised below
                failure = e
        if failure is not None:
            raise failure

    def _forget_addrs(self, pid: Any) -> None:
        """Drop the addresses the peer store holds for ``pid`` before dialling it at new ones.

        py-libp2p dials one address per transport, the first it was given: a peer that came back
        on another port (killed and restarted with the same seed) would be dialled at its old,
        dead address for as long as the peer store keeps it, and never reached."""
        self._host.get_peerstore().clear_addrs(pid)

    # --- the registry ----------------------------------------------------------------------------

    def _note(self, peer: str, **changes: Any) -> MeshPeer:
        now = now_ms()
        with self._lock:
            p = self._peers.get(peer)
            if p is None:
                p = self._peers[peer] = MeshPeer(peer, discovered_at=now)
            for key, value in changes.items():
                if key == "addrs":
                    p.addrs = list(dict.fromkeys([*value, *p.addrs]))
                elif key == "fresh_addrs":  # where the peer is now (explicit dial, discovery)
                    p.addrs = list(dict.fromkeys(value))
                elif value is not None:
                    setattr(p, key, value)
            return replace(p, addrs=list(p.addrs))

    def peers(self) -> list[MeshPeer]:
        """Every peer known, connected first, then by when it was discovered."""
        with self._lock:
            out = [replace(p, addrs=list(p.addrs)) for p in self._peers.values()]
        return sorted(out, key=lambda p: (p.status != "connected", p.discovered_at, p.id))

    def peer(self, peer_id: str) -> MeshPeer | None:
        with self._lock:
            p = self._peers.get(peer_id)
            return None if p is None else replace(p, addrs=list(p.addrs))

    def prune_stale(self, ttl: float = STALE_PEER_SECONDS) -> int:
        """Drop peers disconnected for ``ttl`` seconds, and a disconnected peer whose agent name
        a connected peer now has (the same agent restarted with a new id); how many."""
        cutoff = now_ms() - int(ttl * 1000)
        with self._lock:
            live_names = {p.agent_name for p in self._peers.values() if p.status == "connected" and p.agent_name}
            gone = [
                p.id
                for p in self._peers.values()
                if p.status != "connected"
                and (
                    (p.disconnected_at is not None and p.disconnected_at <= cutoff)
                    or (p.agent_name is not None and p.agent_name in live_names)
                )
            ]
            for pid in gone:
                del self._peers[pid]
        return len(gone)

    def prune_disconnected(self) -> int:
        """Drop every peer that is not connected now; how many."""
        with self._lock:
            gone = [p.id for p in self._peers.values() if p.status != "connected"]
            for pid in gone:
                del self._peers[pid]
        return len(gone)

    # --- calls into the node ---------------------------------------------------------------------

    def _call(
        self,
        afn: Callable[..., Awaitable[Any]],
        *args: Any,
        timeout: float,
        what: str,
        cancel: threading.Event | None = None,
    ) -> Any:
        """``afn(*args)`` on the node's network thread, waited for at most ``timeout`` seconds, or
        until ``cancel`` is set (looked at every ``CANCEL_POLL_S`` seconds): ``MeshError`` then."""
        import trio

        if not self.running:
            raise MeshError(f"mesh: {what}: the node is not running")

        async def cancellable() -> Any:
            assert cancel is not None
            done: list[Any] = []
            failed: list[Exception] = []
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    try:
                        done.append(await afn(*args))
                    except Exception as e:  # raised as it is, not in the nursery's ExceptionGroup
                        failed.append(e)
                    nursery.cancel_scope.cancel()

                async def watch() -> None:
                    while not cancel.is_set():
                        await trio.sleep(CANCEL_POLL_S)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(run)
                nursery.start_soon(watch)
            if failed:
                raise failed[0]
            if not done:
                raise MeshError(f"mesh: {what}: given up: this agent is stopping")
            return done[0]

        async def bounded() -> Any:
            with trio.fail_after(timeout):
                return await (afn(*args) if cancel is None else cancellable())

        try:
            return trio.from_thread.run(bounded, trio_token=self._token)
        except trio.TooSlowError:
            raise MeshError(f"mesh: {what}: no answer within {timeout:g} s") from None
        except trio.RunFinishedError:
            raise MeshError(f"mesh: {what}: the node stopped") from None
        except MeshError:
            raise
        except Exception as e:
            raise MeshError(f"mesh: {what}: {_describe(e)}") from e

    @property
    def addrs(self) -> list[str]:
        """The addresses peers dial, each ending in ``/p2p/<peer id>``; none before the node
        starts or once it stopped (its listeners are closed)."""
        if not self.running:
            return []
        return [str(a) for a in self._host.get_addrs()]  # (with those through its relays)

    def relayed_addrs(self) -> list[str]:
        """This node's addresses through the relays that hold a reservation of it now (``relays``,
        then those found: ``auto_relays``)."""
        transport = self._relay_transport
        if transport is None:
            return []
        held = {str(p) for p in transport._reservations}
        connected = {str(p) for p in self._host.get_connected_peers()}
        relays = [*self.config.relays, *dict(self._auto_relays).values()]
        return [
            f"{addr}/p2p-circuit/p2p/{self.peer_id}"
            for addr in dict.fromkeys(relays)
            if (relay := addr.rsplit("/p2p/", 1)[1]) in held and relay in connected
        ]

    def connect(self, addr: str, timeout: float | None = None) -> str:
        """Dial a peer at a multiaddr ending in ``/p2p/<id>``; its peer id."""
        import multiaddr
        from libp2p.peer.peerinfo import info_from_p2p_addr

        try:
            info = info_from_p2p_addr(multiaddr.Multiaddr(addr))
        except Exception as e:  # noqa: BLE001 - multiaddr raises several types for bad text
            raise MeshError(f"mesh: {addr!r} is not a peer address (/ip4/…/tcp/…/p2p/<id>): {e}") from None

        self._note(str(info.peer_id), fresh_addrs=[str(a) for a in info.addrs])
        try:
            self._call(self._dial, info, timeout=timeout or self.config.call_timeout, what=f"connect to {addr}")
        except MeshError as e:
            why = _refusal(addr, e)
            if why is None:
                raise
            raise MeshError(f"mesh: connect to {addr}: {why}") from e
        return str(info.peer_id)

    def connected(self) -> list[str]:
        """The peer ids with an open connection now, as the registry holds them (it follows the
        network's connect and disconnect events), so that ``peers()`` and ``discover()`` list
        every peer this says is connected. (The swarm lists a connection a moment before it
        tells anyone of it: read from there, a peer could be connected and not yet known.)"""
        if not self.running:
            return []
        with self._lock:
            return sorted(p.id for p in self._peers.values() if p.status == "connected")

    def topic_peers(self) -> list[str]:
        """The peers this node's topic mesh holds now (who a broadcast goes to directly)."""
        return sorted(str(p) for p in self._router.mesh.get(self.config.topic, set()))

    def request(
        self,
        peer_id: str,
        message: str,
        *,
        auto_reply: bool = False,
        timeout: float = 60.0,
        cancel: threading.Event | None = None,
        request_id: str | None = None,
    ) -> wire.AgentResponse:
        """Send ``message`` to a peer and wait up to ``timeout`` seconds for its response (which
        may be an error response: ``.error``), or until ``cancel`` is set. ``MeshError`` when
        there is none; ``InputError`` when ``peer_id`` is not a peer id, or is this node's.
        ``request_id``: the id of a request tried again (the peer knows it: it answers it once);
        None: a new one."""
        from libp2p.peer.id import ID

        # a mistake in the input, not a failure of the mesh: the agent neither stores nor retries it
        try:
            pid = ID.from_base58(peer_id) if peer_id.strip() else None
        except Exception:  # noqa: BLE001 - base58 and multihash errors alike
            pid = None
        if pid is None:
            raise InputError(
                f"mesh: {peer_id!r} is neither a peer id (12D3KooW…) nor the name of an agent in the local registry"
                " or of a peer this node knows: mesh_list_peers lists them"
            )
        if peer_id == self.peer_id:
            raise InputError("mesh: a node cannot send a request to itself")
        req = wire.AgentRequest(
            request_id=request_id or wire.new_request_id(),
            from_agent=self.config.agent_name,
            from_peer=self.peer_id,
            timestamp=now_ms(),
            message=message,
            auto_reply=auto_reply,
            # at least 1 ms, at most what a receiver waits (``--timeout inf``: int() of it failed)
            timeout_ms=max(1, int(min(timeout * 1000, REQUEST_TIMEOUT_MAX_MS))),
        )
        with self._lock:
            self.counts["requests_out"] += 1
        what = f"request to {peer_id}"
        return self._call(self._request, pid, req, timeout=timeout, what=what, cancel=cancel)  # type: ignore[no-any-return]

    async def _request(self, pid: Any, req: wire.AgentRequest) -> wire.AgentResponse:
        import trio
        from libp2p.io.msgio import VarIntLengthMsgReadWriter

        self._network.unblock_peer(pid)
        stream = await self._open_stream(pid)
        try:
            rw = VarIntLengthMsgReadWriter(stream, max_msg_size=wire.MAX_MESSAGE_BYTES)
            await rw.write_msg(wire.encode(req))
            raw = await rw.read_msg()
        except BaseException:
            # shielded: the call's own scope is cancelled on a timeout or a stop, and the reset
            # in it would be too (the stream then stayed open on both peers)
            with trio.CancelScope(deadline=trio.current_time() + 1, shield=True):
                await _discard(stream)
            raise
        await stream.close()
        try:
            resp = wire.decode_response(raw)
        except wire.WireError as e:
            self._reject(str(pid), str(e))
            raise MeshError(f"mesh: {pid} answered with something that is not a response: {e}") from None
        if resp.from_peer != str(pid):
            self._reject(str(pid), f"response claims to come from {resp.from_peer}")
            raise MeshError(f"mesh: {pid} answered in the name of another peer ({resp.from_peer})")
        if resp.request_id is not None and resp.request_id != req.request_id:
            # (the sender files the exchange under its request's id: another would mix two)
            self._reject(str(pid), f"response names request {resp.request_id}, not {req.request_id}")
            raise MeshError(f"mesh: {pid} answered another request ({resp.request_id}, not {req.request_id})")
        self._note(str(pid), agent_name=resp.from_agent)
        return resp

    async def _open_stream(self, pid: Any) -> Any:
        """A new request stream to ``pid``, opened in the node's nursery: its opening is never
        cancelled midway. py-libp2p cancelled once the stream exists and before it hands it back
        loses it, open on both sides; cancelled while it negotiates the protocol, it resets the
        stream with the negotiation unread on the peer's side, where yamux then keeps it for 60 to
        90 s. (A request's deadline or stop passed there on a busy machine.) A stream opened for a
        request given up meanwhile is discarded once it is open."""
        import trio
        from libp2p.custom_types import TProtocol

        opened: dict[str, Any] = {}
        done = trio.Event()

        async def open_stream() -> None:
            try:
                opened["stream"] = await self._host.new_stream(pid, [TProtocol(wire.PROTOCOL)])
            except Exception as e:  # noqa: BLE001 - the request's to raise, if it still waits
                opened["error"] = e
            finally:
                done.set()
            if "given up" in opened and "stream" in opened:
                with trio.move_on_after(1):
                    await _discard(opened["stream"])

        self._nursery.start_soon(open_stream)
        try:
            await done.wait()
        except BaseException:
            # whichever of the two comes second discards the stream: here, once it is open
            opened["given up"] = True
            if "stream" in opened:
                with trio.CancelScope(deadline=trio.current_time() + 1, shield=True):
                    await _discard(opened["stream"])
            raise
        if "stream" not in opened:  # (its opening failed, or was cancelled: the node stops)
            raise opened.get("error") or MeshError("mesh: the node stopped while a request's stream opened")
        return opened["stream"]

    def broadcast(self, message: str, type: str = "announce") -> BroadcastResult:
        """Publish ``message`` to every peer on the topic."""
        if type not in wire.BROADCAST_TYPES:
            raise MeshError(f"mesh: broadcast type must be one of {', '.join(wire.BROADCAST_TYPES)}, not {type!r}")
        body = wire.encode(
            wire.Broadcast(self.config.agent_name, self.peer_id, now_ms(), message, type)  # type: ignore[arg-type]
        )
        if len(body) > BROADCAST_MAX_BYTES:
            # GossipSub drops an RPC past 1 MiB on both sides, unsaid: refused here, not lost
            raise InputError(
                f"mesh_broadcast: the message is {len(body):,} bytes encoded; a broadcast carries at most"
                f" {BROADCAST_MAX_BYTES:,} (send it to each peer with mesh_send)"
            )
        reached = len(self.topic_peers())
        self._call(self._publish, body, timeout=self.config.call_timeout, what="broadcast")
        with self._lock:
            self.counts["broadcasts_out"] += 1
        return BroadcastResult(self.config.topic, reached, wire.broadcast_id(body))

    async def _publish(self, body: bytes) -> None:
        """Publish once every peer's outbound queue has room: py-libp2p drops what comes past 32
        queued for a peer (a burst on a busy machine lost broadcasts); here a burst waits. Not
        for a peer whose queue stays full (``QUEUE_STALL_SECONDS``): that peer alone loses its
        copy, counted, and is not waited for again until its queue has room."""
        import trio
        from libp2p.pubsub.rpc_queue import OutBoundQueueSize

        queues = self._pubsub.peer_queues
        for peer in list(self._stalled):  # one that took something since is waited for again
            if peer not in queues or len(queues[peer]) < OutBoundQueueSize:
                log.info("mesh: %s takes broadcasts again (%d not given to it)", peer, self._stalled.pop(peer))
        stall = min(QUEUE_STALL_SECONDS, self.config.call_timeout / 2)
        full_since: dict[Any, float] = {}
        while True:
            now = trio.current_time()
            full = {p for p, q in queues.items() if len(q) >= OutBoundQueueSize and p not in self._stalled}
            full_since = {p: full_since.get(p, now) for p in full}
            for peer in [p for p in full if now - full_since[p] >= stall]:
                log.warning("mesh: %s took no broadcast for %g s: its copies are dropped until it does", peer, stall)
                self._stalled[peer] = 0
                full.discard(peer)
            if not full:
                break
            await trio.sleep(0.001)
        subscribed = self._pubsub.peer_topics.get(self.config.topic, set())
        skipped = [p for p in self._stalled if p in subscribed and len(queues.get(p, ())) >= OutBoundQueueSize]
        await self._pubsub.publish(self.config.topic, body)
        for peer in skipped:  # (py-libp2p drops what a full queue is given)
            self._stalled[peer] += 1
        if skipped:
            with self._lock:
                self.counts["dropped_out"] += len(skipped)

    # --- what peers send -------------------------------------------------------------------------

    def _reject(self, peer: str, why: str) -> None:
        with self._lock:
            self.counts["rejected"] += 1
        log.warning("mesh: rejected a message from %s: %s", peer, why)

    def _admit(self, peer: str, now: float) -> bool:
        """Whether a new request of ``peer`` is within its limits at ``now`` (monotonic seconds;
        then counted as open: its handler calls ``_release``). A sliding second, as GossipSub's
        limit for broadcasts."""
        if len(self._recent_in) > 1024:  # many peers, each gone quiet: forget them
            for quiet in [
                p for p, r in self._recent_in.items() if p not in self._open_in and (not r or r[-1] <= now - 1.0)
            ]:
                del self._recent_in[quiet]
        recent = self._recent_in.setdefault(peer, collections.deque())
        while recent and recent[0] <= now - 1.0:
            recent.popleft()
        open_now = self._open_in.get(peer, 0)
        if (
            open_now >= self.config.open_requests
            or len(recent) >= self.config.request_rate
            or self._open_total >= self.config.open_requests_total
        ):
            with self._lock:
                self.counts["limited"] += 1
            if now - self._limit_logged.get(peer, -LIMIT_LOG_SECONDS) >= LIMIT_LOG_SECONDS:
                self._limit_logged[peer] = now
                log.warning(
                    "mesh: refusing requests from %s: %d open, %d in the last second, %d open from all"
                    " peers (limits %d, %g, %d)",
                    peer,
                    open_now,
                    len(recent),
                    self._open_total,
                    self.config.open_requests,
                    self.config.request_rate,
                    self.config.open_requests_total,
                )
            return False
        recent.append(now)
        self._open_in[peer] = open_now + 1
        self._open_total += 1
        return True

    def _spend(self, peer: str, size: int, now: float) -> bool:
        """Whether a broadcast of ``size`` bytes from ``peer`` is within its byte budget and that
        of all peers together at ``now`` (monotonic seconds; then taken from both): token buckets
        of ``broadcast_bytes_burst`` bytes, refilled at ``broadcast_bytes_rate`` a second, and of
        ``broadcast_bytes_burst_total``, refilled at ``broadcast_bytes_rate_total``."""
        cfg = self.config
        rate, burst = cfg.broadcast_bytes_rate, cfg.broadcast_bytes_burst
        if len(self._budgets) > 1024:  # many peers: forget those whose bucket is full again
            for p in [p for p, (left, at) in self._budgets.items() if left + (now - at) * rate >= burst]:
                del self._budgets[p]
                self._budget_logged.pop(p, None)
        left, at = self._budgets.get(peer, (burst, now))
        left = min(burst, left + (now - at) * rate)
        all_left, all_at = self._budget_total or (cfg.broadcast_bytes_burst_total, now)
        all_left = min(cfg.broadcast_bytes_burst_total, all_left + (now - all_at) * cfg.broadcast_bytes_rate_total)
        if size <= left and size <= all_left:
            self._budgets[peer], self._budget_total = (left - size, now), (all_left - size, now)
            return True
        self._budgets[peer], self._budget_total = (left, now), (all_left, now)
        with self._lock:
            self.counts["over_budget"] += 1
        whose = peer if size > left else ""  # ("": all peers', logged once for all)
        if now - self._budget_logged.get(whose, -LIMIT_LOG_SECONDS) >= LIMIT_LOG_SECONDS:
            self._budget_logged[whose] = now
            budget = (rate, burst) if whose else (cfg.broadcast_bytes_rate_total, cfg.broadcast_bytes_burst_total)
            log.warning(
                "mesh: dropping broadcasts from %s: %d bytes, past %s (%g bytes a second, %d at once)",
                peer,
                size,
                "its budget" if whose else "the budget of all peers together",
                *budget,
            )
        return False

    def _release(self, peer: str, now: float) -> None:
        if peer in self._open_in:
            self._open_total -= 1
        left = self._open_in.get(peer, 1) - 1
        if left > 0:
            self._open_in[peer] = left
            return
        # a peer with nothing open and nothing in the last second is forgotten
        self._open_in.pop(peer, None)
        recent = self._recent_in.get(peer)
        if recent is not None and (not recent or recent[-1] <= now - 1.0):
            del self._recent_in[peer]
        self._limit_logged.pop(peer, None)

    async def _handle_stream(self, stream: Any) -> None:
        import trio

        peer = str(stream.muxed_conn.peer_id)
        if not self._admit(peer, time.monotonic()):
            # reset unread: reading it is what a flood costs (up to 4 MiB and 30 s a stream)
            with trio.move_on_after(1):
                await _discard(stream)
            return
        try:
            await self._serve_stream(peer, stream)
        finally:
            self._release(peer, time.monotonic())

    async def _serve_stream(self, peer: str, stream: Any) -> None:
        import trio
        from libp2p.io.msgio import VarIntLengthMsgReadWriter

        rw = VarIntLengthMsgReadWriter(stream, max_msg_size=wire.MAX_MESSAGE_BYTES)
        try:
            with trio.fail_after(HANDLER_READ_SECONDS):
                raw = await rw.read_msg()
            self._answering += 1
            try:
                resp = await self._answer(peer, raw, stream)
                # a peer that does not read (its yamux window shut, its process stopped) held this
                # write, and the request's place in its limits, for as long as the node ran: the
                # writes of one connection queue behind one socket, which a frozen peer never drains
                with trio.move_on_after(HANDLER_WRITE_SECONDS) as writing:
                    await rw.write_msg(wire.encode(resp))
                    await stream.close()
            finally:
                self._answering -= 1
            # a write cut off mid-frame leaves the connection unreadable, and what other streams
            # queued behind it stays stuck: the connection goes (the peer dials again when back)
            sock = _tcp_stream(stream.muxed_conn) if writing.cancelled_caught else None
            if sock is not None and sock.socket.fileno() != -1:
                log.warning("mesh: %s took no response within %g s: hung up", peer, HANDLER_WRITE_SECONDS)
                with contextlib.suppress(Exception):
                    sock.socket.close()
        except Exception as e:  # noqa: BLE001 - the stream broke or the peer went silent: nothing to answer
            log.info("mesh: stream from %s ended early: %s", peer, _describe(e))
            with trio.move_on_after(1):
                await _discard(stream)

    def _response(self, request_id: str | None, text: str, error: bool) -> wire.AgentResponse:
        return wire.AgentResponse(request_id, self.config.agent_name, self.peer_id, now_ms(), text, error)

    async def _answer(self, peer: str, raw: bytes, stream: Any = None) -> wire.AgentResponse:

        try:
            req = wire.decode_request(raw)
        except wire.WireError as e:
            self._reject(peer, str(e))
            return self._response(None, f"malformed request: {e}", True)
        if req.from_peer != peer:
            self._reject(peer, f"request claims to come from {req.from_peer}")
            return self._response(req.request_id, "refused: fromPeerId is not the peer that sent it", True)
        with self._lock:
            self.counts["requests_in"] += 1
        self._note(peer, agent_name=req.from_agent)
        callback = self.on_request
        if callback is None:
            return self._response(req.request_id, wire.fit(f"[auto-response] Received: {req.message}"), False)
        wait = min(req.timeout_ms or REQUEST_TIMEOUT_MAX_MS, REQUEST_TIMEOUT_MAX_MS) / 1000
        wait = min(wait, self.config.answer_timeout)
        try:
            result = await _to_thread(callback, peer, req)
            if isinstance(result, concurrent.futures.Future):
                result = await self._wait_future(result, wait, stream)
        except Exception as e:  # noqa: BLE001 - the sender hears of it at once, not after its timeout
            log.warning("mesh: handling a request from %s failed: %s", peer, _describe(e))
            return self._response(req.request_id, f"handling failed: {_describe(e)}", True)
        text, error = result if isinstance(result, tuple) else (result, False)
        return self._response(req.request_id, wire.fit(str(text)), bool(error))

    async def _wait_future(self, fut: concurrent.futures.Future[Reply], timeout: float, stream: Any = None) -> Reply:
        """The answer ``fut`` gives within ``timeout``, else ``[timeout]``. While it waits, the
        request's ``stream`` is watched: a sender that stops waiting (it reset the stream: timed
        out, cancelled; its connection went: it stopped) gives the same request a moment to come
        again (``GIVEN_UP_GRACE``: a sender whose connection broke tries again under the same
        id, and waits on ``fut`` too), then ``fut`` is settled ``[given up]``, so that the request
        is not handed to the agent for nobody (it waited until its timeout)."""
        import trio

        done, woke = trio.Event(), trio.Event()
        token = self._token
        gone = False

        def answered() -> None:
            done.set()
            woke.set()

        def wake(_: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(answered)

        async def watch() -> None:
            nonlocal gone
            if await _sender_gone(stream):
                gone = True
                woke.set()

        fut.add_done_callback(wake)
        end = trio.current_time() + timeout
        self._waiting[fut] = self._waiting.get(fut, 0) + 1
        try:
            async with trio.open_nursery() as watching:
                if stream is not None:
                    watching.start_soon(watch)
                with trio.move_on_at(end):
                    await woke.wait()
                watching.cancel_scope.cancel()
        finally:
            if self._waiting[fut] > 1:
                self._waiting[fut] -= 1
            else:
                del self._waiting[fut]
        if gone and not fut.done():
            with trio.move_on_at(min(end, trio.current_time() + GIVEN_UP_GRACE)):
                await done.wait()
            # (not asked again meanwhile; and its time not up: a sender whose own deadline
            # passed, a moment before this node's, timed out, as the request says below)
            if not fut.done() and fut not in self._waiting and trio.current_time() < end:
                settle(fut, (f"{GIVEN_UP_MARK} its sender stopped waiting for the answer", True))
            if fut.done() or fut in self._waiting:
                # nobody reads what this stream is given now: the same request asked again is
                # answered on its own stream
                return fut.result() if fut.done() else (f"{GIVEN_UP_MARK} its sender stopped waiting", True)
        late = (f"[timeout] no answer within {timeout:g} s", True)
        # the answer is "[timeout]" now, an answer that comes later finds it taken; unless one
        # came in time and is being recorded (the future runs: a slow store), which goes out once
        # it is, given as long again
        if not fut.done() and not settle(fut, late):
            with trio.move_on_after(timeout):
                await done.wait()
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                fut.set_result(late)
        return fut.result()

    async def _pump_broadcasts(self, subscription: Any) -> None:
        """Take broadcasts off the subscription at once (py-libp2p drops past 32 waiting)."""
        import trio
        from libp2p.peer.id import ID

        me = self._host.get_id().to_bytes()
        async for msg in subscription:
            if msg.from_id == me:
                continue  # our own publish, delivered back to us
            peer = str(ID(msg.from_id))
            if not self._spend(peer, len(msg.data), time.monotonic()):
                continue  # dropped unread: decoding and storing it is what a flood costs
            try:
                b = wire.decode_broadcast(msg.data)
            except wire.WireError as e:
                self._reject(peer, str(e))
                continue
            if b.from_peer != peer:
                self._reject(peer, f"broadcast claims to come from {b.from_peer}")
                continue
            age_s = time.time() - b.timestamp / 1000
            if age_s > BROADCAST_MAX_AGE_S:  # a copy kept past what this node remembers: a replay
                self._reject(peer, f"broadcast sent {age_s:,.0f} s ago, older than the {BROADCAST_MAX_AGE_S} s taken")
                continue
            with self._lock:
                self.counts["broadcasts_in"] += 1
            self._note(peer, agent_name=b.from_agent)
            try:
                self._inbox.send_nowait((peer, b))
            except trio.WouldBlock:
                with self._lock:
                    self.counts["dropped"] += 1
                log.warning("mesh: dropped a broadcast from %s: %d wait already", peer, INBOX_SIZE)

    async def _deliver_broadcasts(self, inbox: Any) -> None:

        async for peer, b in inbox:
            if self.on_broadcast is None:
                continue
            try:
                await _to_thread(self.on_broadcast, peer, b)
            except Exception as e:  # noqa: BLE001 - one bad callback must not stop the next broadcasts
                log.warning("mesh: handling a broadcast from %s failed: %s", peer, _describe(e))


class _Notifee:
    """Keeps the registry's connected / disconnected status (py-libp2p network events)."""

    def __init__(self, node: MeshNode):
        self.node = node

    async def opened_stream(self, network: Any, stream: Any) -> None:
        pass

    async def closed_stream(self, network: Any, stream: Any) -> None:
        pass

    async def connected(self, network: Any, conn: Any) -> None:
        sock = _tcp_stream(conn)
        if sock is not None:  # kept to be closed for sure (a connection's own close may not)
            self.node._sockets = [s for s in self.node._sockets if s.socket.fileno() != -1] + [sock]
        peer = conn.muxed_conn.peer_id
        addrs = [str(a) for a in network.peerstore.addrs(peer)] if _has_addrs(network, peer) else []
        relayed = _relayed(network, peer)
        self.node._note(str(peer), status="connected", connected_at=now_ms(), addrs=addrs, relayed=relayed)
        self.node._renew_topic_stream(peer)

    async def disconnected(self, network: Any, conn: Any) -> None:
        # a connection the other side ended is dropped by the swarm, its socket left open (a file
        # descriptor per disconnect, for as long as the node runs): close it
        sock = _tcp_stream(conn)
        if sock is not None:
            with contextlib.suppress(Exception):
                sock.socket.close()
        peer = conn.muxed_conn.peer_id
        if not network.get_connections(peer):  # its last connection
            self.node._note(str(peer), status="disconnected", disconnected_at=now_ms())
        else:
            self.node._note(str(peer), relayed=_relayed(network, peer))
            self.node._renew_topic_stream(peer)

    async def listen(self, network: Any, multiaddr: Any) -> None:
        pass

    async def listen_close(self, network: Any, multiaddr: Any) -> None:
        pass


def _relayed(network: Any, peer: Any) -> bool:
    """Whether every open connection to ``peer`` runs through a relay (``/p2p-circuit``)."""

    def through_relay(conn: Any) -> bool:
        try:
            return any("/p2p-circuit" in str(a) for a in conn.get_transport_addresses())
        except Exception:  # noqa: BLE001 - a connection closing: not one that counts
            return False

    conns = network.get_connections(peer)
    return bool(conns) and all(through_relay(c) for c in conns)


def _tls_contexts(config: MeshConfig) -> tuple[ssl.SSLContext | None, ssl.SSLContext]:
    """The TLS contexts of the WebSocket transport: the listener's (None without a certificate)
    and the one ``/tls/ws`` dials verify peers with (the system's CAs and ``tls_ca``)."""
    server = None
    if config.tls_cert is not None:
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        pair = f"TLS certificate {config.tls_cert} and key {config.tls_key}"
        with _tls_file(pair, "not a PEM certificate and its key"):
            server.load_cert_chain(config.tls_cert, config.tls_key)
    client = ssl.create_default_context()
    if config.tls_ca is not None:
        with _tls_file(f"TLS CA file {config.tls_ca}", "no PEM certificate in it"):
            client.load_verify_locations(config.tls_ca)
    return server, client


@contextlib.contextmanager
def _tls_file(what: str, wrong: str) -> Iterator[None]:
    """``ConfigError`` naming ``what`` when it cannot be read, or says ``wrong`` when it is not
    what TLS takes."""
    try:
        yield
    except ssl.SSLError as e:
        raise ConfigError(f"mesh: {what}: {wrong} ({e.reason or e})") from None
    except OSError as e:
        raise ConfigError(f"mesh: {what}: cannot be read ({e.strerror or e})") from None


def rendezvous_key(topic: str) -> str:
    """The DHT key under which a topic's peers announce themselves: the hex multihash (sha2-256)
    of ``/context_os/mesh/<topic>``, the key of the CIDv1 (raw) of those bytes, as js-libp2p's
    ``contentRouting.provide`` would announce it."""
    return "1220" + hashlib.sha256(f"/context_os/mesh/{topic}".encode()).hexdigest()


def _check_port_free(host: str, port: int) -> None:
    """``ConfigError`` when another socket listens on ``host:port``. py-libp2p listens with
    SO_REUSEPORT (for hole punching), so a second node on a taken port would start, and the
    kernel would share the connections meant for the first between the two."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # a connection of an agent that just stopped, in TIME_WAIT, holds no listener: without
        # SO_REUSEADDR it made the port look taken for a minute after a restart
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"mesh: port {port} on {host} is in use (another process listens there): pass another "
                    "port, or 0 for a free one"
                ) from None
            raise ConfigError(f"mesh: cannot listen on {host}:{port}: {e.strerror or e}") from None


def _peer_id(peer: str) -> Any:
    from libp2p.peer.id import ID

    return ID.from_base58(peer)


def _autonat_server() -> type:
    """py-libp2p's AutoNAT service, dialling a peer back on a connection of its own: py-libp2p's
    own dials through ``host.connect``, which returns at once when the peer is connected (as it
    always is, having asked), so it found every peer reachable."""
    import trio
    from libp2p.host.autonat.autonat import AutoNATService
    from multiaddr import Multiaddr

    class Server(AutoNATService):
        async def _try_dial(self, peer_id: Any, addrs: list[bytes]) -> bytes | None:
            for addr in addrs:
                try:
                    with trio.fail_after(AUTONAT_DIAL_S):
                        conn = await self.host.get_network().dial_addr(Multiaddr(addr), peer_id)
                except Exception:  # noqa: BLE001 - not at this address
                    continue
                with contextlib.suppress(Exception):
                    await conn.close()
                return bytes(addr)
            return None

    return Server


def _relay_protocol(base: type) -> type:
    """py-libp2p's circuit relay, each circuit closing its own streams when it ends.

    py-libp2p keeps a circuit's streams under the peers' ids, and a circuit that ended closed the
    streams found under them: those of the last circuit opened from the same peer or to it (a
    peer reached through the relay again, as its last circuit ended). Here each relaying
    direction is given a key no entry is under, and closes its circuit's own two streams."""

    class _Key:
        def __init__(self, peer: Any):
            self.peer = peer

        def __str__(self) -> str:
            return str(self.peer)

    class Relay(base):  # type: ignore[misc]
        async def _relay_data(
            self, src: Any, dst: Any, peer: Any, deadline: Any = None, circuit_data_limit: Any = None
        ) -> None:
            try:
                await super()._relay_data(src, dst, _Key(peer), deadline, circuit_data_limit)
            finally:
                for key, streams in list(self._active_relays.items()):
                    if any(x is src or x is dst for x in streams):
                        del self._active_relays[key]
                await self._close_stream(src)
                await self._close_stream(dst)

    return Relay


def _to_peer(addr: Any, peer: Any) -> Any:
    """``addr`` ending in ``/p2p/<peer>``: a peer store may hold a relayed address without it."""
    import multiaddr

    text = str(addr)
    return addr if text.endswith(f"/p2p/{peer}") else multiaddr.Multiaddr(f"{text}/p2p/{peer}")


def _free_port(host: str) -> int:
    """A TCP port nothing listens on at ``host`` now."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _refusal(addr: str, e: MeshError) -> str | None:
    """Why a dial of ``addr`` was refused, in words, when py-libp2p's own do not say: a relay
    that is none or refused the circuit, a TLS certificate not trusted."""
    if "/p2p-circuit/" in addr and "Could not open stream to relay" in str(e):
        return (
            "the node before /p2p-circuit is no relay (it runs no relay service: relay_service,"
            " --mesh-relay-service), or cannot be reached"
        )
    relay = re.search(r"Relay connection failed with status (\d+)", str(e))
    if relay is not None:
        return f"{RELAY_STATUS.get(int(relay[1]), 'the relay refused')} (circuit relay status {relay[1]})"
    untrusted = _untrusted(e)
    if untrusted is not None:
        return (
            f"the peer's TLS certificate is not trusted ({untrusted.verify_message});"
            " trust the CA that signed it with tls_ca (--tls-ca FILE)"
        )
    return None


def _untrusted(e: BaseException | None) -> ssl.SSLCertVerificationError | None:
    """The certificate a TLS dial refused, somewhere in what py-libp2p raised (a cause, a
    context, one of a group's or of its ``MultiError``'s)."""
    seen: set[int] = set()
    todo = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, ssl.SSLCertVerificationError):
            return x
        todo += [x.__cause__, x.__context__, *getattr(x, "exceptions", ()), *(getattr(x, "errors", None) or ())]
    return None


def _has_addrs(network: Any, peer: Any) -> bool:
    try:
        return bool(network.peerstore.addrs(peer))
    except Exception:  # noqa: BLE001 - PeerStoreError for a peer without addresses
        return False


def _speaks(host: Any, peer: Any, protocol: str) -> bool:
    """Whether identify told that ``peer`` speaks ``protocol`` (False while it has not)."""
    try:
        return protocol in host.get_peerstore().get_protocols(peer)
    except Exception:  # noqa: BLE001 - PeerStoreError for a peer identify has not reached
        return False


async def _no_auto_dial() -> None:
    return None


def _close_sockets(streams: list[Any]) -> None:
    """Close the socket under each of ``streams`` (``_open_sockets``); one closed already, or
    failing to close, is passed over."""
    for stream in streams:
        with contextlib.suppress(Exception):
            stream.socket.close()


class _StreamFailures:
    """The warnings of streams whose handler failed, per peer: its first ``FIRST`` as they come,
    then one every ``EVERY_S`` at most, which counts the ones left out (logged at debug level). A
    peer that makes streams fail on purpose would fill the log otherwise. ``PEERS`` peers are
    remembered, the least recent forgotten first."""

    FIRST = 3
    EVERY_S = 60.0
    PEERS = 1024

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._peers: dict[str, tuple[int, float, int]] = {}
        """peer → (its failures, when the last warning was, failures left out since)."""

    def failed(self, peer: str, protocol: str, why: str) -> None:
        now = self._clock()
        failures, warned, left_out = self._peers.pop(peer, (0, now, 0))
        failures += 1
        if failures <= self.FIRST:
            log.warning("mesh: a stream from %s (%s) failed: %s", peer, protocol, why)
            warned = now
        elif now - warned >= self.EVERY_S:
            log.warning(
                "mesh: a stream from %s (%s) failed: %s (and %d more of its streams in the last %.0f s, not logged)",
                peer,
                protocol,
                why,
                left_out,
                now - warned,
            )
            warned, left_out = now, 0
        else:
            log.debug("mesh: a stream from %s (%s) failed: %s", peer, protocol, why)
            left_out += 1
        self._peers[peer] = (failures, warned, left_out)  # (the most recent last)
        if len(self._peers) > self.PEERS:
            del self._peers[next(iter(self._peers))]


def _ends_its_stream_only(handle: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
    """The swarm's handler of each stream a peer opens (``handle``: the host's, which picks the
    protocol's), made so that an error in it ends that stream only. py-libp2p runs it in the
    connection's nursery: an error raised there (its identify asking a closing listener for its
    address did) ended the connection's tasks, then the swarm's, and the whole node stopped. A
    cancellation still goes through (not an ``Exception``). Each failure is logged
    (``_StreamFailures``)."""
    failures = _StreamFailures()

    async def handled(stream: Any) -> None:
        try:
            await handle(stream)
        except Exception as e:  # noqa: BLE001 - logged; the stream is reset, the node goes on
            try:
                peer, protocol = stream.muxed_conn.peer_id, stream.get_protocol()
            except Exception:  # noqa: BLE001 - only for the log line
                peer, protocol = "?", None
            failures.failed(str(peer), str(protocol or "no protocol"), _describe(e))
            with contextlib.suppress(Exception):
                await stream.reset()

    return handled


def layers(conn: Any) -> Iterator[Any]:
    """A swarm connection and each one under it: muxer, security, private network, raw, a
    WebSocket connection and its own stream, TLS, down to the socket's (at most 12). A relayed
    connection ends at the stream it runs over: that stream's connection, to the relay, is not
    its (before, a relayed connection that ended closed the socket to the relay under it)."""
    x = conn
    for _ in range(12):
        if x is None:
            return
        yield x
        if hasattr(x, "muxed_stream"):  # a libp2p stream: a relayed connection's carrier
            return
        x = next((getattr(x, n) for n in _UNDER if hasattr(x, n)), None)


_UNDER = ("muxed_conn", "secured_conn", "conn", "_conn", "stream", "_ws_connection", "_stream", "transport_stream")
"""The attributes that lead from a connection to the one under it, down to the socket."""


def _tcp_stream(conn: Any) -> Any:
    """The trio TCP stream under a swarm connection."""
    import trio

    return next((x for x in layers(conn) if isinstance(x, trio.SocketStream)), None)


async def _discard(stream: Any) -> None:
    """Reset ``stream`` and drop what came on it unread. py-libp2p's yamux keeps a reset stream
    that holds unread data in its connection's table, for a reader, until a sweep 60 to 90 s
    later; nothing reads a stream this node reset, so an answer that came as its request was
    given up (a timeout a moment before the peer's own, a stop) left the stream open that long."""
    with contextlib.suppress(Exception):  # (may be broken already)
        await stream.reset()
    muxed: Any = getattr(stream, "muxed_stream", None)
    # a closed yamux stream is read without waiting: what is left, its entry dropped once all
    # is taken, then an error
    with contextlib.suppress(Exception):
        while getattr(muxed, "closed", False) and await muxed.read():
            pass


async def _sender_gone(stream: Any) -> bool:
    """Wait until the sender of a request read whole stops waiting for its answer: True when it
    reset the stream or its connection closed; False when it only closed its side for writing
    (it still reads) or sent more than its request."""
    try:
        await stream.read(1)
    except Exception:  # noqa: BLE001 - a reset, an end of stream, a connection gone: told apart below
        conn = stream.muxed_conn
        shutting = getattr(conn, "event_shutting_down", None)
        reset = bool(getattr(getattr(stream, "muxed_stream", None), "reset_received", False))
        return reset or bool(getattr(conn, "is_closed", False)) or (shutting is not None and shutting.is_set())
    return False


async def _to_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn`` on a worker thread, abandoned (not waited for) if the node stops meanwhile."""
    import trio

    run: Any = trio.to_thread.run_sync  # the installed trio stubs predate abandon_on_cancel
    return await run(fn, *args, abandon_on_cancel=True)


def _describe(e: BaseException) -> str:
    """An exception as one line: trio wraps concurrent failures in groups; name what is inside."""
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(_describe(x) for x in e.exceptions)
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
