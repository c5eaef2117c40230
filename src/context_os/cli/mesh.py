"""``ctxos mesh peers|send|broadcast|keygen``: the agents on the mesh, from the shell.

``peers`` lists the agents announced in the local registry (``mesh/registry.py``); with
``--scan`` it also listens for mDNS announcements for a while. ``send`` and ``broadcast`` start
a transient agent of their own (identity ``<user data dir>/mesh/ctxos-cli.seed``, whatever ``--as`` names it), dial,
send, print what came back and stop. That agent records what it sends and receives as
``message`` objects in the store, like any agent; it acknowledges a request a peer sends it at
once (``auto_reply``), as nobody is there to answer. Nothing here announces itself in the registry.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from ..errors import InputError, MeshError
from ..mesh import registry
from ..mesh.agent import MeshAgent
from ..mesh.node import MeshConfig, MeshNode, load_seed
from ..mesh.pnet import read_swarm_key, write_swarm_key
from ..mesh.wire import BROADCAST_TYPES
from ..store import Store
from ._common import EXISTING_FILE, emit_json, fails_cleanly, json_option, printable, store_from, table

CLI_AGENT = "ctxos-cli"
REQUEST_TIMEOUT = 60.0
"""Seconds ``send`` waits for the answer by default (the seed's request timeout)."""
DIAL_TIMEOUT = 10.0
"""The longest one dial may take."""
POLL = 0.05

as_option = click.option(
    "--as",
    "agent_name",
    default=CLI_AGENT,
    show_default=True,
    metavar="NAME",
    help="The agent name peers see.",
)
swarm_key_option = click.option(
    "--swarm-key",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="A private network's swarm.key, readable by its owner only (its peers refuse anyone without it).",
)


tls_ca_option = click.option(
    "--tls-ca",
    type=EXISTING_FILE,
    metavar="FILE",
    help="Trust the certificates in this PEM file, besides the system's, when dialling a wss address.",
)


def register(cli: click.Group) -> None:
    cli.add_command(mesh_group)


@click.group("mesh")
def mesh_group() -> None:
    """Agents on the mesh: list, message, broadcast, make a key."""


# -- keygen -----------------------------------------------------------------------------------------


@mesh_group.command("keygen")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@fails_cleanly
def keygen_cmd(file: Path, as_json: bool) -> None:
    """Write a new private network's swarm key to FILE (0600)."""
    path = write_swarm_key(file)
    if as_json:
        emit_json({"swarmKey": str(path)})
        return
    click.echo(
        f"wrote a new swarm key to {printable(str(path))}: give a copy to every agent of the group"
        " (ctxos serve --mesh-swarm-key FILE; ctxos mesh send|broadcast --swarm-key FILE)"
    )


# -- peers ------------------------------------------------------------------------------------------


@mesh_group.command("peers")
@click.option(
    "--scan",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Also listen for mDNS announcements this long and add the agents found.",
)
@click.option(
    "--connect",
    "connect",
    multiple=True,
    metavar="ADDR",
    help="Also dial the agent at this address (/ip4/…/p2p/<id>, TCP or WebSocket) and list it; repeatable.",
)
@click.option("--dht", is_flag=True, help="Also list the topic's agents the mesh's DHT knows, asked through them.")
@tls_ca_option
@json_option
@fails_cleanly
def peers_cmd(scan: float | None, connect: tuple[str, ...], dht: bool, tls_ca: Path | None, as_json: bool) -> None:
    """Agents running here (the local registry); --scan adds mDNS."""
    directory = registry.default_dir()
    rows: list[dict[str, Any]] = [{**p.public(), "source": "registry"} for p in registry.local_peers(directory)]
    failed: list[dict[str, Any]] = []
    if scan is not None or connect or dht:
        known = {r["peerId"] for r in rows}
        found, failed = _scan(scan, connect, dht, tls_ca)
        rows += [p for p in found if p["peerId"] not in known]
    if as_json:
        emit_json({"registry": str(directory), "scanned": scan, "peers": rows, "failed": failed})
        return
    for f in failed:
        click.echo(printable(f"could not reach {f['address']}: {f['error']}"), err=True)
    if not rows:
        more = f" and none answered mDNS within {scan:g} s" if scan is not None else ""
        more += " nor through the DHT" if dht else ""
        click.echo(f"no mesh agent is announced in {directory}{more}")
        return
    click.echo(
        table(
            [
                [r["agentName"] or "?", r["peerId"], r["pid"] or "", r["source"], ", ".join(_transport(r["addresses"]))]
                for r in rows
            ],
            ["agent", "peer id", "pid", "source", "addresses"],
            "llrll",
        )
    )


def _scan(
    seconds: float | None, connect: tuple[str, ...], dht: bool, tls_ca: Path | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The peers a node finds (its own id left out), each with its ``source``: those at the
    ``connect`` addresses, those a round of the DHT names (``dht``), those mDNS announces within
    ``seconds`` (with ``seconds``); and the addresses it could not dial."""
    node = MeshNode(replace(_config(CLI_AGENT, None, dht=dht, tls_ca=tls_ca), mdns=seconds is not None))
    node.start()
    sources: dict[str, str] = {}
    failed: list[dict[str, Any]] = []
    try:
        for addr in connect:
            try:
                sources[_dial(node, [addr], DIAL_TIMEOUT)] = "connect"
            except MeshError as e:
                failed.append({"address": addr, "error": str(e)})
        if seconds is not None:
            time.sleep(seconds)  # discovery is what this command waits for: there is no condition to poll
        if dht:
            known = {p.id for p in node.peers()}
            node.dht_round()
            sources.update({p.id: "dht" for p in node.peers() if p.id not in known})
        found = [p.public() for p in node.peers() if p.id != node.peer_id]
    finally:
        _close(node)
    # a peer that dialled this node meanwhile: mDNS's doing when it listened, the DHT's (a peer that
    # found this node's announcement) when it asked; otherwise not what was asked for
    other = "mdns" if seconds is not None else "dht" if dht else None
    rows = [
        {
            "peerId": p["peerId"],
            "agentName": p["agentName"],
            "addresses": p["addresses"],
            "pid": None,
            "started": None,
            "status": p["status"],
            "source": source,
        }
        for p in found
        if (source := sources.get(p["peerId"], other)) is not None
    ]
    return rows, failed


def _transport(addrs: list[str]) -> list[str]:
    """Addresses without their ``/p2p/<id>`` tail (the peer id has a column of its own)."""
    return [a.rsplit("/p2p/", 1)[0] for a in addrs]  # (a relayed one keeps its relay's id)


# -- send -------------------------------------------------------------------------------------------


@mesh_group.command("send")
@click.argument("peer", metavar="NAME|PEER_ID|MULTIADDR")
@click.argument("message")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=REQUEST_TIMEOUT,
    show_default=True,
    metavar="S",
    help="Seconds to wait for the answer.",
)
@click.option("--auto-reply", is_flag=True, help="Ask the peer to acknowledge at once, without its agent.")
@as_option
@swarm_key_option
@tls_ca_option
@json_option
@click.pass_context
@fails_cleanly
def send_cmd(
    ctx: click.Context,
    peer: str,
    message: str,
    timeout: float,
    auto_reply: bool,
    agent_name: str,
    swarm_key: Path | None,
    tls_ca: Path | None,
    as_json: bool,
) -> None:
    """Send one agent a message and print its answer.

    MESSAGE `-` reads it from stdin (a file, or more than a command line holds)."""
    message = _message(message, "send")
    addrs = _addresses(peer)
    config = _config(agent_name, swarm_key, tls_ca=tls_ca)
    with store_from(ctx, create=True) as store, _transient(store, config) as agent:
        peer_id = _dial(agent.node, addrs, min(timeout, DIAL_TIMEOUT))
        result = agent.send(peer_id, message, auto_reply=auto_reply, timeout=timeout)
    if as_json:
        emit_json(result)
    else:
        click.echo(printable(result["response"]))  # another agent's text
    if result["error"]:
        if not as_json:
            click.echo(f"{printable(result['agentName'])} ({peer_id}) answered with an error", err=True)
        ctx.exit(1)


def _message(message: str, command: str) -> str:
    """The text to send: ``message``, or stdin's for ``-``; ``InputError`` when it is empty."""
    if message == "-":
        message = sys.stdin.read()
    if not message.strip():
        raise InputError(f"mesh {command}: the message is empty")
    return message


def _addresses(peer: str) -> list[str]:
    """Where to dial ``peer``: the multiaddr itself, or the addresses of the registry's agent."""
    if peer.startswith("/"):
        if "/p2p/" not in peer:
            raise MeshError(f"mesh: {peer!r} has no /p2p/<peer id> part: the address of a peer ends with it")
        return [peer]
    directory = registry.default_dir()
    found = registry.find(directory, peer)
    if found is None:
        raise MeshError(
            f"mesh: no running agent named {peer!r} (nor with that peer id) in the local registry {directory}; "
            "`ctxos mesh peers` lists them, or give the peer's multiaddr (/ip4/…/tcp/…/p2p/<id>)"
        )
    return found.dial_addrs


def _dial(node: MeshNode, addrs: list[str], timeout: float) -> str:
    """Connect to the first of ``addrs`` that answers; its peer id. ``MeshError`` naming every
    address tried when none does."""
    if not addrs:
        raise MeshError("mesh: the agent announced no address to dial")
    failures = []
    for addr in addrs:
        try:
            return node.connect(addr, timeout=timeout)
        except MeshError as e:
            failures.append(str(e))
    raise MeshError("; ".join(failures) if len(failures) == 1 else "cannot reach the peer: " + "; ".join(failures))


# -- broadcast --------------------------------------------------------------------------------------


@mesh_group.command("broadcast")
@click.argument("message")
@click.option(
    "--type",
    "kind",
    type=click.Choice(BROADCAST_TYPES),
    default="announce",
    show_default=True,
    help="The kind of message.",
)
@click.option(
    "--wait",
    type=click.FloatRange(min=0, min_open=True),
    default=5.0,
    show_default=True,
    metavar="S",
    help="Seconds to wait for the dialled agents to join the topic.",
)
@click.option(
    "--connect",
    "connect",
    multiple=True,
    metavar="ADDR",
    help="Also dial the agent at this address (/ip4/…/p2p/<id>, TCP or WebSocket); repeatable.",
)
@click.option(
    "--dht",
    is_flag=True,
    help="Also find the topic's agents through the mesh's DHT, joined through the agents dialled.",
)
@as_option
@swarm_key_option
@tls_ca_option
@json_option
@click.pass_context
@fails_cleanly
def broadcast_cmd(
    ctx: click.Context,
    message: str,
    kind: str,
    wait: float,
    connect: tuple[str, ...],
    dht: bool,
    agent_name: str,
    swarm_key: Path | None,
    tls_ca: Path | None,
    as_json: bool,
) -> None:
    """Publish a message to the registry's agents and --connect ones.

    MESSAGE `-` reads it from stdin."""
    message = _message(message, "broadcast")
    directory = registry.default_dir()
    announced = registry.local_peers(directory)
    config = _config(agent_name, swarm_key, dht=dht, tls_ca=tls_ca)
    if not announced and not connect:  # nobody to dial: refused before a store is opened (or created)
        raise MeshError(
            f"mesh: no peer on the topic {config.topic!r}: no agent is announced in {directory}"
            " (`ctxos serve --mesh NAME` runs one; --connect ADDR dials one elsewhere)"
        )
    with store_from(ctx, create=True) as store, _transient(store, config) as agent:
        targets: list[tuple[list[str], dict[str, str | None]]] = [
            (p.dial_addrs, {"peerId": p.peer_id, "agentName": p.agent_name})
            for p in announced
            if p.peer_id != agent.peer_id  # (not another command of ours, with the same identity)
        ]
        targets += [([addr], {"peerId": None, "agentName": None, "address": addr}) for addr in connect]
        reached: list[str] = []
        failed: list[dict[str, Any]] = []
        for addrs, who in targets:
            try:
                reached.append(_dial(agent.node, addrs, min(wait, DIAL_TIMEOUT)))
            except MeshError as e:
                failed.append({**who, "error": str(e)})
        if dht and reached:
            # a round now, through the agents dialled: the providers it finds are dialled too
            agent.node.dht_round(timeout=wait)
            reached += [p.id for p in agent.node.peers() if p.id not in reached and p.id != agent.peer_id]
        if reached:
            # every agent dialled joins the topic's mesh within a heartbeat or two, unless it is
            # not subscribed to it: wait for them all, and settle for those there at the deadline
            deadline = time.monotonic() + wait
            while not set(reached) <= set(agent.node.topic_peers()) and time.monotonic() < deadline:
                time.sleep(POLL)
        if not agent.node.topic_peers():
            why = f"{len(reached)} agent(s) reached" if reached else f"no agent in {directory} could be reached"
            why += "".join(f"; {_who(f)}: {f['error']}" for f in failed)
            raise MeshError(f"mesh: no peer on the topic {agent.config.topic!r} within {wait:g} s ({why})")
        result = agent.broadcast(message, kind)  # close() lets it leave the node's queues
    result["dialled"] = reached
    result["failed"] = failed
    if as_json:
        emit_json(result)
        return
    for f in failed:
        click.echo(printable(f"could not reach {_who(f)}: {f['error']}"), err=True)
    click.echo(
        f"broadcast on {result['topic']}: {result['peersReached']} peer(s) reached (message {result['messageId']})"
    )


def _who(failure: dict[str, Any]) -> str:
    """An agent that could not be reached: its name and id from the registry, or the address."""
    return f"{failure['agentName']} ({failure['peerId']})" if failure["peerId"] else failure["address"]


# -- the transient agent ----------------------------------------------------------------------------


def _config(agent_name: str, swarm_key: Path | None, *, dht: bool = False, tls_ca: Path | None = None) -> MeshConfig:
    """How the CLI's transient node runs (read before anything is opened: a bad key or name
    fails first)."""
    return MeshConfig(
        agent_name,
        seed=load_seed(registry.identity_path(CLI_AGENT)),
        psk=read_swarm_key(swarm_key) if swarm_key is not None else None,
        dht=dht,
        tls_ca=tls_ca,
    )


@contextmanager
def _transient(store: Store, config: MeshConfig) -> Iterator[MeshAgent]:
    """A started agent that acknowledges requests itself, stopped on the way out."""
    agent = MeshAgent(store, config, auto_reply=True)
    try:
        agent.start()
        yield agent
    finally:
        _close(agent)


def _close(node: MeshAgent | MeshNode) -> None:
    """Stop ``node``; one that will not stop is only reported: what it did is already printed or
    raised, and its thread ends with the process."""
    try:
        node.close()
    except MeshError as e:
        click.echo(f"warning: {e}", err=True)
