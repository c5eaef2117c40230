"""``ctxos serve``: the JSON-RPC server for harnesses that are not Python (see docs/protocol.md).

It only wires the server to its transports; it never prints to stdout (stdio is the protocol)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import ConfigError
from ..server import (
    MAX_REQUEST_BYTES,
    Server,
    make_http_server,
    serve_stdio,
    write_token_file,
)
from ..server.transports import StdioStop, check_origin, header_token, listen_socket
from ..sources.recall import open_recall
from ..store import data_dir
from ._common import (
    EXISTING_FILE,
    announce_created,
    embedder_option,
    fails_cleanly,
    ready_to_serve,
    rebuild_vectors_option,
    recall_embedder,
    serve_until_stopped,
    server_process,
    store_from,
    track_option,
)

if TYPE_CHECKING:
    from ..mesh.agent import MeshAgent
    from ..mesh.registry import LocalPeer
    from ..sources.recall import Recall
    from ..store.base import Store

TOKEN_ENV = "CTXOS_SERVE_TOKEN"
"""A token chosen by whoever starts the server (e.g. a supervisor), instead of a fresh one."""


def _origins(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Each ``--allow-origin`` as a browser sends it, refused before anything starts if none would."""
    try:
        return tuple(check_origin(v) for v in values)
    except ConfigError as e:
        raise click.BadParameter(str(e)) from None


@click.command("serve")
@click.option("--stdio", "stdio", is_flag=True, help="Answer newline-delimited JSON-RPC on stdin/stdout (default).")
@click.option(
    "--http",
    "http_port",
    type=click.IntRange(0, 65535),
    metavar="PORT",
    help="Also (or only) serve HTTP POST on 127.0.0.1:PORT (0: any free port).",
)
@click.option(
    "--workspace",
    "workspaces",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A directory sessions may use as their workspace (file tools, or a directory inside it); repeatable. "
    "Clients can open no other.",
)
@click.option(
    "--allow-origin",
    "origins",
    multiple=True,
    metavar="ORIGIN",
    callback=_origins,
    help="An HTTP Origin (e.g. http://127.0.0.1:5173) allowed to call the server; repeatable. Default: none.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the HTTP token (0600; default: <user data dir>/serve/http-PORT.token; removed at exit).",
)
@click.option(
    "--max-request-mb",
    type=click.IntRange(1, 1024),
    default=MAX_REQUEST_BYTES // (1024 * 1024),
    show_default=True,
    help="Refuse requests larger than this many MiB.",
)
@embedder_option
@rebuild_vectors_option
@track_option
@click.option(
    "--mesh",
    "mesh_name",
    metavar="NAME",
    help="Join the agent mesh as NAME (a stable peer id from <user data dir>/mesh/NAME.seed); sessions opened "
    "with mesh get the mesh tools. Needs context_os[mesh].",
)
@click.option("--mesh-host", default="127.0.0.1", show_default=True, help="The address the mesh peer listens on.")
@click.option("--mesh-port", type=click.IntRange(0, 65535), default=0, help="Its TCP port (default: any free one).")
@click.option(
    "--mesh-swarm-key",
    type=EXISTING_FILE,
    help="A swarm.key file (readable by its owner only): a private mesh only peers with the same key can join.",
)
@click.option(
    "--mesh-ws-port",
    type=click.IntRange(0, 65535),
    help="Also take WebSocket connections, on this port (0: any free one; the --mesh-port serves both).",
)
@click.option(
    "--mesh-tls-cert",
    type=EXISTING_FILE,
    help="Take secure WebSocket (wss) connections on --mesh-ws-port, with this PEM certificate (chain).",
)
@click.option(
    "--mesh-tls-key",
    type=EXISTING_FILE,
    help="The PEM private key of --mesh-tls-cert.",
)
@click.option(
    "--mesh-tls-ca",
    type=EXISTING_FILE,
    help="Trust the certificates in this PEM file, besides the system's, when dialling wss peers.",
)
@click.option("--mesh-mdns/--no-mesh-mdns", default=True, show_default=True, help="Discover peers by mDNS.")
@click.option(
    "--mesh-dht",
    is_flag=True,
    help="Discover the mesh's peers beyond the local network through a Kademlia DHT, joined through the "
    "--mesh-connect peers.",
)
@click.option(
    "--mesh-connect", multiple=True, metavar="ADDR", help="A peer to dial at start (/ip4/…/p2p/<id>); repeatable."
)
@click.option(
    "--mesh-relay",
    multiple=True,
    metavar="ADDR",
    help="Reserve a slot on the relay at ADDR and be reachable through it (behind NAT); repeatable.",
)
@click.option(
    "--mesh-relay-service",
    is_flag=True,
    help="Relay connections for peers that cannot be dialled (circuit relay v2).",
)
@click.option(
    "--mesh-auto-relays",
    type=click.IntRange(0, 8),
    default=0,
    show_default=True,
    metavar="N",
    help="Reserve a slot on up to N relays found among the connected peers (behind NAT, no relay's address known).",
)
@click.option(
    "--mesh-hole-punch/--no-mesh-hole-punch",
    default=True,
    show_default=True,
    help="Upgrade connections through a relay to direct ones when the peers can dial each other (DCUtR).",
)
@click.option(
    "--mesh-memory-preset",
    type=click.Choice(["small", "medium", "large"]),
    default="large",
    show_default=True,
    help="How much per-peer memory one read returns (the seed's presets for 32k, 128k, 1M-token models).",
)
@click.option("-v", "--verbose", count=True, help="Log more to stderr (-v: each request, -vv: debug).")
@click.pass_context
@fails_cleanly
def serve_cmd(
    ctx: click.Context,
    stdio: bool,
    http_port: int | None,
    workspaces: tuple[Path, ...],
    track: bool,
    origins: tuple[str, ...],
    token_file: Path | None,
    max_request_mb: int,
    embedder: str,
    rebuild_vectors: bool,
    mesh_name: str | None,
    mesh_host: str,
    mesh_port: int,
    mesh_swarm_key: Path | None,
    mesh_ws_port: int | None,
    mesh_tls_cert: Path | None,
    mesh_tls_key: Path | None,
    mesh_tls_ca: Path | None,
    mesh_mdns: bool,
    mesh_dht: bool,
    mesh_connect: tuple[str, ...],
    mesh_relay: tuple[str, ...],
    mesh_relay_service: bool,
    mesh_hole_punch: bool,
    mesh_auto_relays: int,
    mesh_memory_preset: str,
    verbose: int,
) -> None:
    """Serve JSON-RPC 2.0 to harnesses that are not Python.

    Newline-delimited on stdio and/or HTTP on 127.0.0.1; logs go to stderr.

    HTTP requests need the server's token ("Authorization: Bearer …", written to a 0600 file
    named on stderr), "Content-Type: application/json", a loopback Host and no foreign Origin.
    Clients may open sessions only in the --workspace directories."""
    if (mesh_tls_cert is None) != (mesh_tls_key is None):
        raise click.UsageError("--mesh-tls-cert and --mesh-tls-key go together")
    if mesh_tls_cert is not None and mesh_ws_port is None:
        raise click.UsageError("--mesh-tls-cert serves the WebSocket port: give --mesh-ws-port too")
    server_process("serve", verbose)
    use_stdio = stdio or http_port is None
    token = header_token(TOKEN_ENV)
    # the port is taken before the store is opened: a port in use creates no store
    sock = None if http_port is None else listen_socket("127.0.0.1", http_port, port_option="--http")
    with ExitStack() as stack:
        protocol_out = sys.stdout.buffer
        if use_stdio:
            # stdout carries the protocol alone: what a library prints (py-libp2p prints a line
            # when its WebSocket dial takes a proxy from the environment) goes to stderr
            stack.callback(setattr, sys, "stdout", sys.stdout)
            sys.stdout = sys.stderr
        written: Path | None = None
        if sock is not None:
            stack.callback(sock.close)
            # the token file too: one that cannot be written creates no store; it goes at exit
            port = sock.getsockname()[1]
            try:
                written = write_token_file(token_file or data_dir() / "serve" / f"http-{port}.token", token)
            except OSError as e:
                raise ConfigError(f"cannot write the token file: {e.strerror or e}") from None
            stack.callback(_remove, written)
        store = stack.enter_context(store_from(ctx, create=True, announce=False))
        chosen = recall_embedder(store, embedder, rebuild=rebuild_vectors)  # refused before anything starts
        mesh = recall = None
        if mesh_name is not None:
            # per-peer memory is searched by meaning too: the recall engine is made now, not at
            # the first session opened with recall
            recall = open_recall(store, chosen)
            mesh = stack.enter_context(
                _mesh_agent(
                    store, mesh_name, mesh_host, mesh_port, mesh_swarm_key, mesh_mdns, mesh_connect,
                    mesh_memory_preset, recall, ws_port=mesh_ws_port, dht=mesh_dht,
                    tls=(mesh_tls_cert, mesh_tls_key, mesh_tls_ca), relays=mesh_relay,
                    relay_service=mesh_relay_service, hole_punch=mesh_hole_punch, auto_relays=mesh_auto_relays,
                )
            )  # fmt: skip
        server = Server(
            store,
            workspaces=workspaces,
            max_request_bytes=max_request_mb * 1024 * 1024,
            embedder=chosen,
            mesh=mesh,
            recall=recall,
            track=track,
        )
        httpd = None
        if http_port is not None:
            host = "127.0.0.1"
            httpd = make_http_server(server, http_port, token=token, origins=origins, host=host, sock=sock)
        try:
            ready_to_serve()
            if httpd is not None:
                # the one line a supervisor may wait for (always printed, whatever the log level)
                print(
                    f"ctxos serve: listening on http://{host}:{port} (token in {written})", file=sys.stderr, flush=True
                )
            if mesh is not None:
                print(
                    f"ctxos serve: mesh peer {mesh.name} is {mesh.peer_id} at {', '.join(mesh.node.addrs)}",
                    file=sys.stderr,
                )
            announce_created(store)  # after the listening line, which stays the first
            if not use_stdio:
                assert httpd is not None
                serve_until_stopped(httpd)
                return
            if httpd is not None:
                threading.Thread(target=httpd.serve_forever, name="ctxos-http", daemon=True).start()
            # SIGTERM (a supervisor, the harness closing) lets the request that runs finish and
            # be answered (a mesh.next_request that waits: at once), then the server stops as at
            # the end of stdin
            with StdioStop(_stdin_fd(), wake=server.stop).on_signal() as stop:
                serve_stdio(server, stdout=protocol_out, stop=stop)
            if httpd is not None:
                httpd.shutdown()
        except KeyboardInterrupt:
            pass
        finally:
            server.close()
            if httpd is not None:
                httpd.server_close()


def _stdin_fd() -> int | None:
    try:
        return sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _remove(path: Path) -> None:
    """The token file, at exit (a stop at any point, SIGTERM and Ctrl-C included)."""
    with suppress(OSError):
        path.unlink()


@contextmanager
def _mesh_agent(
    store: Store,
    name: str,
    host: str,
    port: int,
    swarm_key: Path | None,
    mdns: bool,
    connect: tuple[str, ...],
    preset: str,
    recall: Recall,
    *,
    ws_port: int | None = None,
    dht: bool = False,
    tls: tuple[Path | None, Path | None, Path | None] = (None, None, None),
    relays: tuple[str, ...] = (),
    relay_service: bool = False,
    hole_punch: bool = True,
    auto_relays: int = 0,
) -> Iterator[MeshAgent]:
    """The server's mesh peer, started, announced in the local registry while it runs."""
    from ..mesh import registry
    from ..mesh.agent import MeshAgent
    from ..mesh.memory import MemoryLimits
    from ..mesh.node import MeshConfig, load_seed
    from ..mesh.pnet import read_swarm_key

    config = MeshConfig(
        name,
        host=host,
        port=port,
        seed=load_seed(registry.identity_path(name)),
        psk=read_swarm_key(swarm_key) if swarm_key is not None else None,
        mdns=mdns,
        ws_port=ws_port,
        dht=dht,
        bootstrap=connect,
        tls_cert=tls[0],
        tls_key=tls[1],
        tls_ca=tls[2],
        relays=relays,
        relay_service=relay_service,
        hole_punch=hole_punch,
        auto_relays=auto_relays,
    )
    agent = MeshAgent(
        store, config, recall=recall, limits=MemoryLimits.preset(preset), local_registry=registry.default_dir()
    )
    other = registry.running(registry.default_dir(), agent.peer_id)
    if other is not None:  # two nodes of one identity: peers would reach either of them
        agent.close()
        raise _twice(name, other)
    # the entry follows the node's addresses (a relay's reservation made or lost), written under
    # one lock with the first and the withdrawal: a late one never brings back an entry withdrawn
    entry: Path | None = None
    lock = threading.Lock()

    def announce(exclusive: bool = False) -> None:
        nonlocal entry
        with lock:
            if entry is not None or exclusive:
                entry = registry.announce(
                    registry.default_dir(),
                    peer_id=agent.peer_id,
                    agent_name=name,
                    addrs=agent.node.addrs,
                    exclusive=exclusive,
                )

    agent.node.on_addrs = announce
    agent.start()
    try:
        try:
            # in one step with the look for another: two started at once both passed the check above
            announce(exclusive=True)
        except registry.AlreadyRunning as e:
            raise _twice(name, e.peer) from None
        try:
            yield agent
        finally:
            with lock:
                assert entry is not None
                registry.withdraw(entry)
                entry = None
    finally:
        agent.close()


def _twice(name: str, other: LocalPeer) -> ConfigError:
    return ConfigError(
        f"mesh: an agent named {name!r} already runs here with this identity (pid {other.pid}, "
        f"{', '.join(other.addrs)}): give this one another --mesh name"
    )


def register(cli: click.Group) -> None:
    cli.add_command(serve_cmd)
