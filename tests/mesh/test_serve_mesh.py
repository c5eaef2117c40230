"""``ctxos serve --mesh``: a harness that is not Python gets the mesh tools and the peers'
requests through JSON-RPC, with a real peer on the other side."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from context_os.context.mesh_tools import MESH_TOOL_NAMES
from context_os.mesh import registry
from context_os.mesh.agent import MeshAgent
from context_os.mesh.node import MeshConfig
from context_os.store.sqlite import SqliteStore
from tests.helpers import http_server, self_signed_certificate
from tests.mesh.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_a_served_agent_answers_a_peer_and_uses_the_mesh_tools(tmp_path: Path) -> None:
    with http_server(tmp_path, "--mesh", "bob", "--no-mesh-mdns", "--embedder", "none") as srv:
        bob = wait_for(lambda: registry.find(registry.default_dir(), "bob"), "bob in the local registry", timeout=60)
        opened = srv.rpc("session.open", session="s1", mesh=True)["result"]
        assert opened["sources"] == ["mesh:bob"]
        tools = {t["function"]["name"] for t in srv.rpc("tools.list", session="s1")["result"]}
        assert set(MESH_TOOL_NAMES) <= tools
        with SqliteStore(tmp_path / "alice.db") as store, MeshAgent(store, MeshConfig("alice")) as alice:
            alice.node.connect(bob.addrs[0])
            answer: dict[str, Any] = {}
            t = threading.Thread(target=lambda: answer.update(alice.send(bob.peer_id, "ready to merge?")))
            t.start()
            req = srv.rpc("mesh.next_request", timeout=10)["result"]["request"]
            assert req["message"] == "ready to merge?" and req["agentName"] == "alice"
            assert req["peerId"] == alice.peer_id and req["text"].startswith("[Request from alice")
            assert srv.rpc("mesh.next_request")["result"] == {"request": None}  # one at a time
            wrong = srv.rpc("mesh.answer", requestId="nope", text="x")
            assert "not the one the agent holds" in wrong["error"]["message"]
            done = srv.rpc("mesh.answer", requestId=req["requestId"], text="yes, CI is green")["result"]
            assert done == {"requestId": req["requestId"], "answered": True}
            t.join(30)
            assert answer["response"] == "yes, CI is green" and answer["error"] is False
            # the served agent's tools see alice and what was said
            out = srv.rpc("tools.call", session="s1", name="mesh_list_peers", arguments={})["result"]
            peers = json.loads(out["output"])["peers"]
            assert [p["agentName"] for p in peers] == ["alice"]
            out = srv.rpc(
                "tools.call", session="s1", name="memory_recall", arguments={"peerId": alice.peer_id, "key": "exchange"}
            )["result"]
            entries = json.loads(out["output"])["entries"]
            assert entries[0]["value"] == "[Request] ready to merge?\n[Response] yes, CI is green"
        status = srv.rpc("mesh.status")["result"]
        assert status["agentName"] == "bob" and status["requests"]["answered"] == 1
        assert status["bootstrapFailed"] == []  # it was told of no peer to dial
    # a server without --mesh refuses mesh sessions and methods, saying how to get them
    with http_server(tmp_path / "plain") as srv:
        refused = srv.rpc("session.open", session="s2", mesh=True)
        assert "--mesh NAME" in refused["error"]["message"]
        assert "--mesh NAME" in srv.rpc("mesh.status")["error"]["message"]
    assert registry.local_peers(registry.default_dir()) == []  # withdrawn when the server stopped


def test_a_served_send_that_was_answered_is_no_error_for_the_harness(tmp_path: Path) -> None:
    """``mesh_send``'s result carries the seed's ``"error": false``: ``tools.call`` reports it as
    a success (Pi shows ``is_error`` to the model), and a peer's refusal or a failure as an error."""
    with http_server(tmp_path, "--mesh", "bob", "--no-mesh-mdns", "--embedder", "none") as srv:
        bob = wait_for(lambda: registry.find(registry.default_dir(), "bob"), "bob in the local registry", timeout=60)
        srv.rpc("session.open", session="s1", mesh=True)
        with (
            SqliteStore(tmp_path / "alice.db") as store,
            MeshAgent(store, MeshConfig("alice"), auto_reply=True) as alice,
        ):
            alice.node.connect(bob.addrs[0])
            sent = srv.rpc(
                "tools.call", session="s1", name="mesh_send", arguments={"peerId": alice.peer_id, "message": "hi"}
            )["result"]
            out = json.loads(sent["output"])
            assert out["error"] is False and out["response"].startswith("[auto-response]")
            assert sent["is_error"] is False
        gone = srv.rpc(
            "tools.call", session="s1", name="mesh_send", arguments={"peerId": alice.peer_id, "message": "still there?"}
        )["result"]
        assert gone["is_error"] is True and json.loads(gone["output"])["type"] == "MeshError"


def test_served_agents_without_mdns_reach_each_other_through_the_local_registry(tmp_path: Path) -> None:
    """Two ``ctxos serve --mesh`` agents on one machine, mDNS off and never dialled: ``mesh_send``
    finds the other in the local registry, by name or by peer id."""
    flags = ("--no-mesh-mdns", "--embedder", "none")
    with (
        http_server(tmp_path / "a", "--mesh", "alice", *flags) as alice,
        http_server(tmp_path / "b", "--mesh", "bob", *flags) as bob,
    ):
        entry = wait_for(lambda: registry.find(registry.default_dir(), "bob"), "bob in the local registry", timeout=60)
        alice.rpc("session.open", session="s1", mesh=True)

        def listed() -> list[tuple[str, str | None, str]]:
            out = alice.rpc("tools.call", session="s1", name="mesh_list_peers", arguments={})["result"]
            return [(p["peerId"], p["agentName"], p["status"]) for p in json.loads(out["output"])["peers"]]

        assert listed() == [(entry.peer_id, "bob", "announced")]  # never dialled, found in the registry
        for who in ("bob", entry.peer_id):
            args = {"peerId": who, "message": "hi", "autoReply": True}
            sent = alice.rpc("tools.call", session="s1", name="mesh_send", arguments=args)["result"]
            out = json.loads(sent["output"])
            assert out.get("response") == "[auto-response] Received: hi", out
            assert out["peerId"] == entry.peer_id and out["agentName"] == "bob"
        assert bob.rpc("mesh.status")["result"]["traffic"]["requests_in"] == 2
        assert listed() == [(entry.peer_id, "bob", "connected")]
        # a name nobody has announced is still an error the model reads
        gone = alice.rpc("tools.call", session="s1", name="mesh_send", arguments={"peerId": "carol", "message": "hi"})[
            "result"
        ]
        assert gone["is_error"] is True


def test_a_second_agent_of_the_same_name_is_refused_and_the_first_stays_announced(tmp_path: Path) -> None:
    """One name is one identity (its seed): a second ``ctxos serve --mesh bob`` would put two
    nodes of one peer id on the mesh, and, stopping, withdraw the first's registry entry."""
    with http_server(tmp_path / "a", "--mesh", "bob", "--no-mesh-mdns", "--embedder", "none"):
        first = wait_for(lambda: registry.find(registry.default_dir(), "bob"), "bob in the local registry", timeout=60)
        ctxos = [str(Path(sys.executable).parent / "ctxos"), "--store", str(tmp_path / "b.db")]
        second = subprocess.run(
            [*ctxos, "serve", "--mesh", "bob", "--no-mesh-mdns", "--embedder", "none"],
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert f"an agent named 'bob' already runs here with this identity (pid {first.pid}" in second.stderr
        assert registry.find(registry.default_dir(), "bob") == first


def test_a_long_poll_for_a_peers_request_holds_up_no_other_call(tmp_path: Path) -> None:
    """``mesh.next_request`` may wait up to 30 s for a request: meanwhile the server answers its
    other clients (a harness assembling its context, another session), as it did not before:
    the wait held the server's one lock, and every call queued behind it."""
    with http_server(tmp_path, "--mesh", "bob", "--no-mesh-mdns", "--embedder", "none") as srv:
        bob = wait_for(lambda: registry.find(registry.default_dir(), "bob"), "bob in the local registry", timeout=60)
        srv.rpc("session.open", session="s1")
        polled: dict[str, Any] = {}
        poll = threading.Thread(target=lambda: polled.update(srv.rpc("mesh.next_request", timeout=30)))
        poll.start()
        time.sleep(0.5)  # the poll is waiting now (it waits 30 s, or for the request sent below)
        for n in range(1, 4):
            sent = srv.rpc("context.transform", session="s1", messages=[{"role": "user", "content": f"go {n}"}])
            assert sent["result"]["turn"] == n
        assert poll.is_alive() and not polled  # answered while the poll still waits
        with SqliteStore(tmp_path / "alice.db") as store, MeshAgent(store, MeshConfig("alice")) as alice:
            alice.node.connect(bob.addrs[0])
            answer: dict[str, Any] = {}
            asked = threading.Thread(target=lambda: answer.update(alice.send(bob.peer_id, "ready?")))
            asked.start()
            poll.join(30)
            req = polled["result"]["request"]
            assert req is not None and req["message"] == "ready?"  # the waiting poll got it
            srv.rpc("mesh.answer", requestId=req["requestId"], text="yes")
            asked.join(30)
            assert answer["response"] == "yes"


@contextmanager
def _bob_on_stdio(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Callable[..., None]]]:
    """``ctxos serve --mesh bob`` over its pipes (logging every request on stderr), and a function
    sending it a request (id, method, params); killed after the test if it is still running."""
    ctxos = [str(Path(sys.executable).parent / "ctxos"), "--store", str(tmp_path / "s.db")]
    proc = subprocess.Popen(
        [*ctxos, "serve", "--mesh", "bob", "--no-mesh-mdns", "--embedder", "none", "-vv"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def send(rid: int, method: str, **params: Any) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode() + b"\n")
        proc.stdin.flush()

    try:
        yield proc, send
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_sigterm_on_stdio_answers_a_waiting_next_request_at_once(tmp_path: Path) -> None:
    """SIGTERM while ``mesh.next_request`` waits on stdio (up to 30 s for a peer's request): the
    wait is answered at once (``{"request": null, "stopping": true}``) and the server exits. It
    waited out the whole timeout before, and a supervisor's stop took 30 s."""
    with _bob_on_stdio(tmp_path) as (proc, send):
        assert proc.stderr is not None
        send(1, "mesh.next_request", timeout=30)
        while b"request 'mesh.next_request'" not in (line := proc.stderr.readline()):
            assert line, "the server ended before it took the request"
        proc.send_signal(signal.SIGTERM)
        # (the poll's own 30 s are not waited for: an answer that came only then fails here)
        out, _ = proc.communicate(timeout=20)
        assert json.loads(out) == {"jsonrpc": "2.0", "result": {"request": None, "stopping": True}, "id": 1}
        assert proc.returncode == 0
    assert registry.local_peers(registry.default_dir()) == []  # withdrawn as it stopped


def test_sigterm_on_stdio_ends_a_mesh_send_waiting_for_a_silent_peer(tmp_path: Path) -> None:
    """SIGTERM while a ``mesh_send`` tool call waits for a peer that never answers (up to 60 s):
    the send gives up at once, its call is answered, and the server exits. It waited out the 60 s
    before."""
    with _bob_on_stdio(tmp_path) as (proc, send):
        assert proc.stdout is not None
        bob = wait_for(lambda: registry.find(registry.default_dir(), "bob"), "bob in the local registry", timeout=60)
        with SqliteStore(tmp_path / "alice.db") as store, MeshAgent(store, MeshConfig("alice")) as alice:
            alice.node.connect(bob.addrs[0])  # alice takes requests and never answers them
            send(1, "session.open", session="s1", mesh=True)
            assert "result" in json.loads(proc.stdout.readline())
            call = {"peerId": alice.peer_id, "message": "still there?"}
            send(2, "tools.call", session="s1", name="mesh_send", arguments=call)
            wait_for(lambda: len(alice.queue) > 0, "the request at alice", timeout=30)
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=20)  # (not the send's 60 s)
        answer = json.loads(out)
        assert answer["id"] == 2 and "stopping" in json.dumps(answer), answer
        assert proc.returncode == 0


def test_a_served_agent_takes_websocket_connections_and_runs_the_dht(tmp_path: Path) -> None:
    """``--mesh-ws-port`` and ``--mesh-dht``: two agents that know only the served one, one of
    them over WebSocket, find each other through its DHT."""
    args = ("--mesh", "bob", "--no-mesh-mdns", "--mesh-ws-port", "0", "--mesh-dht", "--embedder", "none")
    with http_server(tmp_path, *args) as srv:
        bob = wait_for(lambda: registry.find(registry.default_dir(), "bob"), "bob in the local registry", timeout=60)
        ws = [a for a in bob.addrs if "/ws/" in a]
        assert len(ws) == 1 and len(bob.addrs) == 2
        joins: dict[str, Any] = {"dht": True, "dht_interval": 0.5}
        with (
            SqliteStore(tmp_path / "peers.db") as store,
            MeshAgent(store, MeshConfig("alice", bootstrap=(ws[0],), **joins)) as alice,
            MeshAgent(store, MeshConfig("carol", bootstrap=(bob.addrs[0],), **joins)) as carol,
        ):
            wait_for(lambda: carol.peer_id in alice.node.connected(), "alice and carol through bob's DHT", timeout=30)
            status = srv.rpc("mesh.status")["result"]
            assert status["dhtRounds"] >= 1 and sorted(status["addresses"]) == sorted(bob.addrs)
    with http_server(tmp_path / "plain", "--mesh", "dave", "--no-mesh-mdns", "--embedder", "none") as srv:
        wait_for(lambda: registry.find(registry.default_dir(), "dave"), "dave in the local registry", timeout=60)
        assert srv.rpc("mesh.status")["result"]["dhtRounds"] is None  # no DHT without --mesh-dht


def test_a_served_agent_takes_and_makes_secure_websocket_connections(tmp_path: Path) -> None:
    """``--mesh-tls-cert`` and ``--mesh-tls-key`` serve wss on ``--mesh-ws-port``; with
    ``--mesh-tls-ca`` the agent dials a peer whose certificate that file vouches for."""
    cert, key = self_signed_certificate(tmp_path)
    tls: dict[str, Any] = {"tls_cert": cert, "tls_key": key}
    with (
        SqliteStore(tmp_path / "peers.db") as store,
        MeshAgent(store, MeshConfig("alice", ws_port=0, **tls)) as alice,
        MeshAgent(store, MeshConfig("carol", tls_ca=cert)) as carol,
    ):
        alice_wss = next(a for a in alice.node.addrs if "/wss/" in a)
        args = ("--mesh", "bob", "--no-mesh-mdns", "--mesh-ws-port", "0", "--embedder", "none")
        tls_args = ("--mesh-tls-cert", str(cert), "--mesh-tls-key", str(key), "--mesh-tls-ca", str(cert))
        with http_server(tmp_path / "bob", *args, *tls_args, "--mesh-connect", alice_wss) as srv:
            bob = wait_for(lambda: registry.find(registry.default_dir(), "bob"), "bob announced", timeout=60)
            assert srv.rpc("mesh.status")["result"]["bootstrapFailed"] == []
            wait_for(lambda: bob.peer_id in alice.node.connected(), "bob's wss dial to alice")
            (bob_wss,) = [a for a in bob.addrs if "/wss/" in a]
            assert carol.node.connect(bob_wss) == bob.peer_id  # bob's own listener speaks TLS


@pytest.mark.parametrize("hole_punch", [True, False])
def test_a_served_agent_relays_for_another_that_reserves_a_slot_on_it(tmp_path: Path, hole_punch: bool) -> None:
    """``--mesh-relay-service`` on one served agent, ``--mesh-relay ADDR`` on another: the second
    is reached through the first at the address its status gives; the connection is then made
    direct, unless ``--no-mesh-hole-punch``. With ``--mesh-auto-relays``, the relay also tells the
    second that it can dial it (AutoNAT)."""
    plain = ("--no-mesh-mdns", "--embedder", "none")
    with http_server(tmp_path / "bob", "--mesh", "bob", "--mesh-relay-service", *plain):
        bob = wait_for(lambda: registry.find(registry.default_dir(), "bob"), "bob announced", timeout=60)
        how = ("--mesh-relay", bob.addrs[0])
        if not hole_punch:  # (and relays to find, to run both in one: bob, a relay, dials carol back)
            how += ("--no-mesh-hole-punch", "--mesh-auto-relays", "1")
        with http_server(tmp_path / "carol", "--mesh", "carol", *how, *plain) as carol:

            def relayed() -> str | None:
                addrs = carol.rpc("mesh.status")["result"]["addresses"]
                return next((a for a in addrs if "/p2p-circuit/" in a), None)

            addr = wait_for(relayed, "carol's address through bob", timeout=30)
            assert addr.startswith(f"{bob.addrs[0]}/p2p-circuit/p2p/")
            # the local registry's entry gets the address too (it was written before the reservation)
            wait_for(
                lambda: addr in registry.find(registry.default_dir(), "carol").addrs, "the entry's relayed address"
            )  # type: ignore[union-attr]
            if not hole_punch:
                wait_for(lambda: carol.rpc("mesh.status")["result"]["reachability"] == "public", "AutoNAT's answer")
            dave_config = MeshConfig("dave", hole_punch=hole_punch)
            with SqliteStore(tmp_path / "dave.db") as store, MeshAgent(store, dave_config) as dave:
                carol_id = dave.node.connect(addr)
                assert dave.node.request(carol_id, "through bob", auto_reply=True).message == (
                    "[auto-response] Received: through bob"
                )
                if hole_punch:
                    wait_for(lambda: not dave.node.peer(carol_id).relayed, "a direct connection", timeout=30)  # type: ignore[union-attr]
                else:
                    time.sleep(5)  # with hole punching, it is direct within 2-3 s
                    assert dave.node.peer(carol_id).relayed  # type: ignore[union-attr]


def test_tls_options_without_what_they_need_are_usage_errors(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from context_os.cli import cli

    cert, key = self_signed_certificate(tmp_path)
    base = ["--store", str(tmp_path / "s.db"), "serve", "--mesh", "bob", "--embedder", "none"]
    for args, said in (
        (["--mesh-tls-cert", str(cert), "--mesh-ws-port", "0"], "--mesh-tls-cert and --mesh-tls-key go together"),
        (["--mesh-tls-key", str(key), "--mesh-ws-port", "0"], "--mesh-tls-cert and --mesh-tls-key go together"),
        (["--mesh-tls-cert", str(cert), "--mesh-tls-key", str(key)], "give --mesh-ws-port too"),
    ):
        r = CliRunner().invoke(cli, [*base, *args])
        assert r.exit_code == 2 and said in r.output, r.output
    assert not (tmp_path / "s.db").exists()


def test_what_a_library_prints_stays_off_the_stdio_protocol(tmp_path: Path) -> None:
    """py-libp2p prints a line to stdout when its WebSocket dial takes a proxy from the
    environment. On stdio, stdout is the protocol: that line came before the first answer, and a
    client read it as a malformed response. It goes to stderr now."""
    with (
        SqliteStore(tmp_path / "alice.db") as store,
        MeshAgent(store, MeshConfig("alice", ws_port=0)) as alice,
    ):
        ws = next(a for a in alice.node.addrs if "/ws/" in a)
        ctxos = [str(Path(sys.executable).parent / "ctxos"), "--store", str(tmp_path / "s.db")]
        # a proxy nobody listens on: the dial fails, after py-libp2p has said it found it
        env = {**os.environ, "HTTP_PROXY": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
        env.pop("NO_PROXY", None), env.pop("no_proxy", None)
        proc = subprocess.run(
            [*ctxos, "serve", "--mesh", "bob", "--no-mesh-mdns", "--embedder", "none", "--mesh-connect", ws],
            input=b'{"jsonrpc": "2.0", "id": 1, "method": "mesh.status"}\n',
            capture_output=True,
            env=env,
            timeout=60,
        )
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"proxy" in proc.stderr.lower()  # what py-libp2p printed, on stderr
    (line,) = proc.stdout.decode().splitlines()
    status = json.loads(line)["result"]
    assert status["agentName"] == "bob" and [f["address"] for f in status["bootstrapFailed"]] == [ws]
