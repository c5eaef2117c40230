"""What a hostile local process or web page can do to ``ctxos serve``: nothing.

The HTTP transport answers only requests that carry the server's token, name the loopback
address it bound in ``Host``, come without a foreign ``Origin`` and are ``application/json``
(a web page's no-preflight "simple" POST is ``text/plain``). Sessions may use only the
workspaces whoever started the server granted, on every transport.
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import socket
import stat
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, TypeVar

import pytest

from context_os.errors import ConfigError
from context_os.server import HttpGuard, Server, make_http_server, read_token_file, transports
from context_os.server.transports import PEER_GONE, peer_user
from context_os.store.sqlite import SqliteStore
from tests._reliability import Counts
from tests.helpers import http_server, overfill

OPEN = b'{"jsonrpc": "2.0", "id": 1, "method": "session.open", "params": {"session": "evil"}}'
A = TypeVar("A", int, dict[str, Any])


class Hostile:
    """The hostile requests a test sends, by what is hostile about them, and how many were
    refused (an HTTP error status, or a JSON-RPC error or tool error), for the reliability report."""

    def __init__(self) -> None:
        self.refused: Counter[str] = Counter()
        self.sent = 0

    def __call__(self, reason: str, answer: A) -> A:
        self.sent += 1
        if isinstance(answer, int):
            self.refused[reason] += answer >= 400
        else:
            self.refused[reason] += "error" in answer or bool(answer.get("result", {}).get("is_error"))
        return answer

    def count(self, reliability: Counts, ran_anyway: int) -> None:
        """Add the requests sent since the last count, with ``ran_anyway``: the sessions they
        opened and the files they wrote all the same."""
        refused = {f"refused_{reason}": n for reason, n in self.refused.items()}
        reliability.add("attack: hostile HTTP request", attempts=self.sent, ran_anyway=ran_anyway, **refused)
        self.refused.clear()
        self.sent = 0


def _sessions(store_path: Path) -> list[str]:
    if not store_path.exists():
        return []
    with SqliteStore(store_path) as store:
        return [v.id for v in store.find("session")]


@pytest.mark.e2e
def test_a_web_page_post_is_refused_and_runs_nothing(tmp_path: Path, reliability: Counts):
    hostile = Hostile()
    with http_server(tmp_path) as srv:
        # what a page on any site can send without a preflight: text/plain, its own Origin and
        # (after DNS rebinding) its own Host; it cannot know the token
        page = {"Content-Type": "text/plain", "Origin": "http://evil.example", "Host": f"evil.example:{srv.port}"}
        assert hostile("web_page", srv.post(OPEN, headers=page, token=None)[0]) == 403
        assert hostile("host", srv.post(OPEN, headers={"Host": f"evil.example:{srv.port}"})[0]) == 403
        assert hostile("origin", srv.post(OPEN, headers={"Origin": "http://evil.example"})[0]) == 403
        assert hostile("origin", srv.post(OPEN, headers={"Origin": "null"})[0]) == 403
        assert hostile("content_type", srv.post(OPEN, headers={"Content-Type": "text/plain"})[0]) == 415
        assert hostile("content_type", srv.post(OPEN, headers={"Content-Type": None})[0]) == 415
        status, body = srv.post(OPEN, token=None)
        assert hostile("token", status) == 401 and "token" in json.loads(body)["error"]["message"]
        assert hostile("token", srv.post(OPEN, token="x" * 43)[0]) == 401
        assert hostile("token", srv.post(OPEN, headers={"Authorization": f"Basic {srv.token}"}, token=None)[0]) == 401
        assert hostile("token", srv.request("GET", b"", token=None)[0]) == 401
        options = srv.request("OPTIONS", b"", headers={"Origin": "http://evil.example"}, token=None)[0]
        assert hostile("origin", options) >= 400
        ran = _sessions(tmp_path / "s.db")
        hostile.count(reliability, ran_anyway=len(ran))
        assert ran == []
        # the same request, from a client that has the token
        assert "result" in srv.rpc("session.open", session="fine")
        status, _ = srv.post(
            OPEN, headers={"Host": f"localhost:{srv.port}", "Content-Type": "application/json; charset=utf-8"}
        )
        assert status == 200
    assert sorted(_sessions(tmp_path / "s.db")) == ["session:evil", "session:fine"]


@pytest.mark.e2e
def test_the_token_file_is_private_and_gone_at_exit(tmp_path: Path):
    with http_server(tmp_path) as srv:
        assert stat.S_IMODE(srv.token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(srv.token_file.parent.stat().st_mode) == 0o700
        assert len(read_token_file(srv.token_file)) >= 32
        token_file = srv.token_file
    assert not token_file.exists()
    with pytest.raises(ConfigError, match="cannot read the server token"):
        read_token_file(token_file)


def _raw(port: int, method: str, headers: list[tuple[str, str]], body: bytes = b"") -> tuple[int, Any, bytes]:
    """One request with exactly these headers (repeated ones included): status, headers, body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, "/", skip_host=True, skip_accept_encoding=True)
        for name, value in [*headers, ("Content-Length", str(len(body)))]:
            conn.putheader(name, value)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


@pytest.mark.e2e
def test_an_allowed_origin_may_call_from_a_browser(tmp_path: Path):
    page = "http://127.0.0.1:5173"
    with http_server(tmp_path, "--allow-origin", page) as srv:
        ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
        host = ("Host", f"127.0.0.1:{srv.port}")
        # the preflight a browser sends before a JSON POST with a token: no token, no body
        preflight = [
            host,
            ("Origin", page),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "authorization, content-type"),
        ]
        status, headers, _ = _raw(srv.port, "OPTIONS", preflight)
        assert status == 204 and headers["Access-Control-Allow-Origin"] == page
        assert headers["Access-Control-Allow-Methods"] == "POST"
        assert {"authorization", "content-type"} <= {
            h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")
        }
        call = [host, ("Origin", page), ("Content-Type", "application/json"), ("Authorization", f"Bearer {srv.token}")]
        status, headers, body = _raw(srv.port, "POST", call, ping)
        assert status == 200 and headers["Access-Control-Allow-Origin"] == page and b"result" in body
        # another origin: refused, and its page may not read why
        other = [(k, "http://127.0.0.1:5174" if k == "Origin" else v) for k, v in call]
        status, headers, _ = _raw(srv.port, "POST", other, ping)
        assert status == 403 and "Access-Control-Allow-Origin" not in headers
        status, headers, _ = _raw(srv.port, "OPTIONS", [(k, v) for k, v in preflight if k != "Origin"])
        assert status == 405 and "Access-Control-Allow-Origin" not in headers
    with http_server(tmp_path / "none") as srv:
        preflight[0] = ("Host", f"127.0.0.1:{srv.port}")
        status, headers, body = _raw(srv.port, "OPTIONS", preflight)
        assert status == 403 and "--allow-origin" in json.loads(body)["error"]["message"]


@pytest.mark.e2e
def test_other_methods_and_odd_requests_get_a_json_rpc_error(tmp_path: Path, reliability: Counts):
    hostile = Hostile()
    with http_server(tmp_path) as srv:
        for method in ("GET", "PUT", "DELETE", "PATCH"):
            status, body = srv.request(method, b"")
            assert hostile("method", status) == 405 and method in json.loads(body)["error"]["message"]
        auth = [("Content-Type", "application/json"), ("Authorization", f"Bearer {srv.token}")]
        status, headers, body = _raw(srv.port, "HEAD", [("Host", f"127.0.0.1:{srv.port}"), *auth])
        assert hostile("method", status) == 405 and body == b"" and headers["Allow"] == "POST, OPTIONS"
        twice = [("Host", f"127.0.0.1:{srv.port}"), ("Host", "evil.example"), *auth]
        status, _, body = _raw(srv.port, "POST", twice, OPEN)
        assert hostile("host", status) == 400 and "more than one Host" in json.loads(body)["error"]["message"]
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        try:
            conn.putrequest("POST", "/", skip_accept_encoding=True)
            for name, value in [*auth, ("Content-Length", "-1")]:
                conn.putheader(name, value)
            conn.endheaders()
            resp = conn.getresponse()
            status, message = resp.status, json.loads(resp.read())["error"]["message"]
        finally:
            conn.close()
        assert hostile("length", status) == 400 and "-1" in message and "MiB" not in message
        ran = _sessions(tmp_path / "s.db")
        hostile.count(reliability, ran_anyway=len(ran))
        assert ran == []


@pytest.mark.e2e
def test_a_client_cannot_choose_a_workspace_the_server_was_not_given(tmp_path: Path, reliability: Counts):
    hostile = Hostile()
    granted, home = tmp_path / "project", tmp_path / "home"
    (granted / "src").mkdir(parents=True)
    home.mkdir()
    (home / ".bashrc").write_text("# mine\n")
    (granted / "escape").symlink_to(home)
    with http_server(tmp_path, "--workspace", str(granted)) as srv:
        for ws in (str(home), "/", str(granted / "escape"), str(granted / ".." / "home")):
            err = hostile("workspace", srv.rpc("session.open", session="s", workspace=ws))["error"]
            assert err["data"]["type"] == "PathDenied" and "not granted" in err["message"], ws
        write = {"path": ".bashrc", "content": "x"}
        assert "error" in hostile("workspace", srv.rpc("tools.call", session="s", name="write", arguments=write))
        ran = _sessions(tmp_path / "s.db")
        hostile.count(reliability, ran_anyway=len(ran))
        assert ran == []
        opened = srv.rpc("session.open", session="s", workspace=str(granted / "src"))["result"]
        assert opened["workspace"] == str((granted / "src").resolve())
        write = {"path": "../../home/.bashrc", "content": "x"}
        out = hostile("workspace", srv.rpc("tools.call", session="s", name="write", arguments=write))
        assert out["result"]["is_error"] and "outside the workspace" in out["result"]["output"]
    written = (home / ".bashrc").read_text() != "# mine\n"
    hostile.count(reliability, ran_anyway=int(written))
    assert not written


def test_without_granted_workspaces_no_session_gets_files(tmp_path: Path):
    with SqliteStore(tmp_path / "s.db") as store:
        server = Server(store)
        answer = server.handle(
            {"jsonrpc": "2.0", "id": 1, "method": "session.open", "params": {"session": "s", "workspace": "/"}}
        )
        assert answer["error"]["data"]["type"] == "PathDenied" and "granted: none" in answer["error"]["message"]
        assert store.latest_tx() is None
        ok = server.handle({"jsonrpc": "2.0", "id": 2, "method": "session.open", "params": {"session": "s"}})
        assert ok["result"]["workspace"] is None


def test_the_guard_in_isolation():
    guard = HttpGuard.for_address("127.0.0.1", 8123, "t" * 40)
    good = {"Host": "127.0.0.1:8123", "Content-Type": "application/json", "Authorization": "Bearer " + "t" * 40}
    assert guard.refusal("POST", good) is None
    assert guard.refusal("POST", {**good, "Host": "127.0.0.1:8124"}) is not None  # another port
    assert guard.refusal("POST", {**good, "Host": "127.0.0.1"}) is not None
    assert guard.refusal("POST", {**good, "Authorization": "Bearer " + "t" * 39}) is not None
    assert guard.refusal("POST", {k: v for k, v in good.items() if k != "Host"}) is not None
    v6 = HttpGuard.for_address("::1", 9, "t" * 40)
    assert v6.refusal("POST", {**good, "Host": "[::1]:9"}) is None


def test_the_server_refuses_to_bind_beyond_loopback(tmp_path: Path):
    from context_os.server import make_http_server

    with SqliteStore(tmp_path / "s.db") as store, pytest.raises(ConfigError, match="loopback"):
        make_http_server(Server(store), 0, token="t" * 40, host="0.0.0.0")


def test_a_supervisor_may_choose_the_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CTXOS_SERVE_TOKEN", "s" * 40)
    with http_server(tmp_path) as srv:
        assert srv.token == "s" * 40
        assert srv.post(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}')[0] == 200
    monkeypatch.setenv("CTXOS_SERVE_TOKEN", "short")
    env = {**os.environ}
    import subprocess
    import sys

    ctxos = str(Path(sys.executable).parent / "ctxos")
    proc = subprocess.run(
        [ctxos, "--store", str(tmp_path / "s.db"), "serve", "--http", "0"], env=env, capture_output=True, timeout=60
    )
    assert proc.returncode == 1 and b"too short" in proc.stderr and b"Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "token", ["p\u00e4sswort-long-enough-1234", " padded-token-long-enough-1 ", "ctl\x01-token-long-enough"]
)
def test_a_serve_token_no_client_could_send_is_refused_before_anything_is_opened(tmp_path: Path, token: str):
    """``$CTXOS_SERVE_TOKEN`` not in ASCII failed with a traceback writing the token file; with a
    space at either end the server ran and refused every request (a header's value is trimmed)."""
    import subprocess
    import sys

    ctxos = str(Path(sys.executable).parent / "ctxos")
    token_file = tmp_path / "serve" / "token"
    proc = subprocess.run(
        [ctxos, "--store", str(tmp_path / "s.db"), "serve", "--http", "0", "--token-file", str(token_file)],
        env={**os.environ, "CTXOS_SERVE_TOKEN": token},
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 1 and b"CTXOS_SERVE_TOKEN" in proc.stderr and b"Traceback" not in proc.stderr
    assert not (tmp_path / "s.db").exists() and not token_file.parent.exists()


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("*", "name each origin"),
        ("null", "file:// pages"),
        ("127.0.0.1:5173", "scheme://host[:port]"),
        ("http://127.0.0.1:5173/app", "no path"),
        ("", "scheme://host[:port]"),
    ],
)
def test_an_origin_no_browser_sends_is_refused_at_start(tmp_path: Path, given: str, why: str):
    """``--allow-origin`` takes an origin as a browser sends it: a value that can never match
    (a wildcard, no scheme, a path) was taken silently, and the page it was meant for was then
    refused with a hint to pass the very option already given."""
    from click.testing import CliRunner

    from context_os.cli import cli

    db = tmp_path / "s.db"
    r = CliRunner().invoke(cli, ["--store", str(db), "serve", "--allow-origin", given], input="")
    assert r.exit_code == 2 and why in r.output and "--allow-origin" in r.output, r.output
    assert not db.exists()  # refused before anything started
    with pytest.raises(ConfigError, match="origin"):
        HttpGuard.for_address("127.0.0.1", 8123, "t" * 40, [given])
    # what a browser sends is taken, in any case, with or without a trailing slash
    guard = HttpGuard.for_address("127.0.0.1", 8123, "t" * 40, ["HTTP://127.0.0.1:5173/"])
    assert guard.allows_origin("http://127.0.0.1:5173") and not guard.allows_origin("http://127.0.0.1:5174")


@pytest.mark.e2e
def test_a_body_cut_short_of_its_content_length_runs_nothing(tmp_path: Path):
    """A client gone mid-send (or one that announced more than it sent): what came may even be a
    whole request, but it is not the one sent. It was run (a session opened, 200) before; now it
    is refused, and a client that hangs up before its answer leaves no traceback in the log."""
    with http_server(tmp_path) as srv:
        head = (
            f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {srv.token}\r\nContent-Length: {len(OPEN) + 100}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
            sock.sendall(head + OPEN)
            sock.shutdown(socket.SHUT_WR)  # the rest never comes
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        status, _, body = answer.partition(b"\r\n\r\n")
        assert status.split()[1] == b"400", answer
        assert f"ended after {len(OPEN)} of the {len(OPEN) + 100} bytes" in json.loads(body)["error"]["message"]
        for _ in range(3):  # gone before the answer
            with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
                sock.sendall(head + b"{")
        assert srv.post(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}')[0] == 200
        srv.proc.terminate()
        _, err = srv.proc.communicate(timeout=30)
    assert _sessions(tmp_path / "s.db") == []
    assert b"Traceback" not in err and err.count(b"the body ended after") == 4, err.decode()


def test_connections_that_never_finish_their_headers_are_bounded_and_closed(tmp_path: Path):
    """Slowloris: each connection holds a thread while it sends its headers; they were unbounded
    in number, and each read could wait 60 s (a byte a minute held one for ever). Now at most
    ``max_connections`` are served at once (one more is answered 503 at once), and a request whose
    headers are not all in within ``header_seconds`` has its connection closed."""
    store = SqliteStore(tmp_path / "s.db")
    server = Server(store, track=False)
    token = "t" * 32
    httpd = make_http_server(server, 0, token=token, max_connections=4, header_seconds=1.0)
    serving = threading.Thread(target=httpd.serve_forever, daemon=True)
    serving.start()
    port = httpd.server_address[1]
    try:
        # each slow one is closed once its headers are overdue, with nothing run
        head, body = overfill(port, f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n")
        assert head.split()[1] == b"503", head
        assert "too many connections" in json.loads(body)["error"]["message"]
        status, _, got = _raw(
            port,
            "POST",
            [("Host", f"127.0.0.1:{port}"), ("Content-Type", "application/json"), ("Authorization", f"Bearer {token}")],
            b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
        )
        assert status == 200 and json.loads(got)["result"]["pong"] is True
    finally:
        httpd.shutdown()
        httpd.server_close()
        server.close()
        store.close()


@pytest.mark.parametrize("slow", ["finishing", "answering"])
@pytest.mark.parametrize("keep_alive", [True, False])
def test_a_connection_done_with_makes_room_for_the_next_one(tmp_path: Path, keep_alive: bool, slow: str) -> None:
    """A connection its client is done with (closed after its answer, kept alive or not) holds its
    slot until its thread lets it go, a moment on a loaded machine (here half a second, while the
    thread finishes the connection or before it gets there): the connection that then finds every
    slot taken waits for that one instead of being refused (it was answered 503 at once, one
    clean-clone run in three of the proxy's own test of this, whose status request came just
    before). One more, with none done with, is still refused."""
    store = SqliteStore(tmp_path / "s.db")
    server = Server(store, track=False)
    token = "t" * 32
    httpd = make_http_server(server, 0, token=token, max_connections=2, header_seconds=1.0)
    handler = httpd.RequestHandlerClass

    class SlowToLetGo(handler):  # type: ignore[misc, valid-type]
        def handle(self) -> None:
            super().handle()
            if slow == "answering":
                time.sleep(0.5)  # answered (and, kept alive, its client's end read): not finishing yet

        def finish(self) -> None:
            super().finish()
            if slow == "finishing":
                time.sleep(0.5)  # before socketserver shuts the connection and frees its slot

    httpd.RequestHandlerClass = SlowToLetGo
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    try:
        headers = [("Host", f"127.0.0.1:{port}"), ("Content-Type", "application/json")]
        headers += [("Authorization", f"Bearer {token}"), *([] if keep_alive else [("Connection", "close")])]
        status, _, _ = _raw(port, "POST", headers, b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}')
        assert status == 200
        # two slow connections: the first takes the free slot, the second the one let go
        head, body = overfill(port, f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n", slots=2)
        assert head.split()[1] == b"503", head
        assert "too many connections" in json.loads(body)["error"]["message"]
    finally:
        httpd.shutdown()
        httpd.server_close()
        server.close()
        store.close()


@pytest.mark.parametrize("asked", ["netlink", "tables"])
def test_peer_user_is_the_connecting_process_user(asked: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the kernel's socket table names the owner of the other end, IPv4, IPv6 and an IPv4 client
    # of an IPv6 socket alike; once that end is closed, nobody (its row then says uid 0: no root).
    # Asked over netlink, or where that cannot be asked (a sandbox), read from /proc/net/tcp*
    linux = Path("/proc/net/tcp").exists()
    if asked == "tables":

        def no_netlink(*args: object) -> None:
            raise OSError(errno.EPROTONOSUPPORT, "no netlink here")

        monkeypatch.setattr(transports, "_diag_user", no_netlink)
    for family, host, connect_to in (
        (socket.AF_INET, "127.0.0.1", "127.0.0.1"),
        (socket.AF_INET6, "::1", "::1"),
        (socket.AF_INET6, "::", "127.0.0.1"),
    ):
        with socket.socket(family) as server:
            try:
                server.bind((host, 0))
            except OSError:  # no IPv6 here
                continue
            server.listen()
            with socket.create_connection((connect_to, server.getsockname()[1])) as client:
                conn, _ = server.accept()
                with conn:
                    assert peer_user(conn) == (os.geteuid() if linux else None), (host, connect_to)
                    client.close()
                    assert peer_user(conn) == (PEER_GONE if linux else None), (host, connect_to)


@pytest.mark.parametrize("kind", ["http", "proxy", "ui"])
def test_every_server_writes_without_waiting_for_acknowledgements(tmp_path: Path, kind: str) -> None:
    """Nagle's algorithm holds a small write while one before it is unacknowledged, and a client
    on a kept-alive connection delays its acknowledgements: a proxied stream's chunks came 40-50
    ms late from each connection's second request on. Every server's connections are
    ``TCP_NODELAY``."""
    import httpx

    from context_os.server.proxy import Proxy, make_proxy_server
    from context_os.server.ui.app import make_ui_server

    store = SqliteStore(tmp_path / "s.db")
    rpc = Server(store, track=False) if kind == "http" else None
    proxy = Proxy(store, "http://127.0.0.1:9") if kind == "proxy" else None
    if rpc is not None:
        httpd = make_http_server(rpc, 0, token="t" * 32)
    elif proxy is not None:
        httpd = make_proxy_server(proxy, 0)
    else:
        httpd = make_ui_server(store, 0)
    nodelay: list[int] = []
    arrives = httpd.arrives

    def arrived(handler: Any) -> None:  # (once the handler has set its connection up)
        nodelay.append(handler.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        arrives(handler)

    httpd.arrives = arrived  # type: ignore[method-assign]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    try:
        with httpx.Client() as client:
            client.get(f"http://127.0.0.1:{port}/")  # any answer
        assert len(nodelay) == 1 and nodelay[0] != 0
    finally:
        httpd.shutdown()
        httpd.server_close()
        if rpc is not None:
            rpc.close()
        if proxy is not None:
            proxy.close()
        store.close()


def _answers(sock: socket.socket, patience: float = 30) -> bytes:
    """What the server sends on ``sock`` until it closes it (or ``patience`` seconds pass after
    the last that came: it kept it open, said by ``<still open>`` at the end)."""
    sock.settimeout(patience)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except TimeoutError:
        got += b"<still open>"
    return got


def test_requests_go_on_one_kept_alive_connection_and_a_body_left_unread_closes_it(tmp_path: Path) -> None:
    """``serve --http`` answers HTTP/1.1, so a client's calls go on one connection (each was
    answered HTTP/1.0 and its connection closed until 2026-12-06). A body the server does not
    read by its ``Content-Length`` would then stay on the connection and be read as the next
    request, one the client never sent as such: a body in chunks is refused, a preflight
    that carries one is answered and its connection closed, and what followed is never run."""
    store = SqliteStore(tmp_path / "s.db")
    server = Server(store, track=False)
    token, page = "t" * 32, "http://127.0.0.1:5173"
    httpd = make_http_server(server, 0, token=token, origins=[page])
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        socks = []
        for n in range(3):
            conn.request("POST", "/", body=json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping"}), headers=auth)
            r = conn.getresponse()
            assert (r.status, r.version, json.loads(r.read())["id"]) == (200, 11, n)
            socks.append(conn.sock)
        assert socks[0] is not None and socks == [socks[0]] * 3  # never closed, never reopened
        conn.close()

        smuggled = (
            f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(OPEN)}\r\n\r\n"
        ).encode() + OPEN
        chunked = f"{len(b'{}'):x}\r\n{{}}\r\n0\r\n\r\n".encode()
        for request in (
            # chunked, with a Content-Length that covers its chunks only
            f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nContent-Length: {len(chunked)}\r\n\r\n",
            f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        ):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(request.encode() + chunked + smuggled)
                answer = _answers(sock)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 411 ") and b"\r\nConnection: close" in head, answer
            assert "Transfer-Encoding" in json.loads(body)["error"]["message"]
        preflight = (
            f"OPTIONS / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: {page}\r\n"
            "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization\r\n"
            f"Content-Length: {len(smuggled)}\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(preflight.encode() + smuggled)
            answer = _answers(sock)
        assert answer.startswith(b"HTTP/1.1 204 ") and answer.count(b"HTTP/1.1 ") == 1, answer
        assert b"\r\nConnection: close" in answer and answer.endswith(b"\r\n\r\n"), answer
        # without a body, a preflight's connection is kept for the request after it
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(preflight.replace(f"{len(smuggled)}", "0").encode())
            answer = _answers(sock, patience=1)  # (the server closes an idle one after 10 s)
        assert answer.startswith(b"HTTP/1.1 204 ") and answer.endswith(b"<still open>"), answer
    finally:
        httpd.shutdown()
        httpd.server_close()
        server.close()
        store.close()
    assert _sessions(tmp_path / "s.db") == []  # nothing smuggled was run
