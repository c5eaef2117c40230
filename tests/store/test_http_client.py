"""The XTDB store's HTTP client (store/_http.py) against a real local server: keep-alive, a
connection the server closed while idle, and how far a failed request went."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from context_os.store import _http
from tests.helpers import self_signed_certificate


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, str, bytes, int]] = []
    """(method, path, Authorization, body, client port) of each request."""

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append((self.command, self.path, self.headers.get("Authorization", ""), body, self.client_address[1]))
        if self.path.startswith("/slow"):
            time.sleep(1.0)
        if self.path.startswith("/drop"):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        out = b"{:ok true}"
        self.send_response(200)
        self.send_header("Content-Type", "application/edn")
        self.send_header("Content-Length", str(len(out)))
        if self.path.startswith("/close"):
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(out)
        if self.path.startswith("/idle-close"):
            self.close_connection = True  # without saying so

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    _Handler.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _base(srv: ThreadingHTTPServer, prefix: str = "") -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}{prefix}"


def _client(**kw: object) -> _http.Client:
    return _http.Client(timeout=5.0, connect_timeout=2.0, headers={"Accept": "application/edn"}, **kw)  # type: ignore[arg-type]


def test_requests_share_one_connection_and_carry_path_query_body_and_auth(server: ThreadingHTTPServer) -> None:
    c = _client(auth=("ann", "pa:ss"))
    r = c.request("GET", _base(server, "/pre"), "/_xtdb/entity", params={"eid-edn": '"a b"', "tx-id": "3"})
    assert (r.status_code, r.headers["content-type"], r.text) == (200, "application/edn", "{:ok true}")
    assert r.url == _base(server, "/pre") + "/_xtdb/entity"
    c.request("POST", _base(server), "/_xtdb/submit-tx", content=b"{:tx-ops []}")
    (m1, p1, a1, _, port1), (m2, p2, _, b2, port2) = _Handler.seen
    assert (m1, p1) == ("GET", "/pre/_xtdb/entity?eid-edn=%22a+b%22&tx-id=3")
    assert a1 == "Basic YW5uOnBhOnNz"  # ann:pa:ss
    assert (m2, p2, b2) == ("POST", "/_xtdb/submit-tx", b"{:tx-ops []}")
    assert port1 == port2  # kept alive
    c.close()


def test_a_connection_the_server_closed_while_idle_is_not_used_again(server: ThreadingHTTPServer) -> None:
    c = _client()
    c.request("GET", _base(server), "/close")  # the server says it closes: not kept
    c.request("GET", _base(server), "/idle-close")  # kept, and closed by the server after (as at its idle timeout)
    kept = _Handler.seen[-1][4]
    time.sleep(0.2)
    r = c.request("POST", _base(server), "/b", content=b"x")  # a submit must not meet the dead connection
    assert r.status_code == 200
    assert _Handler.seen[-1][4] != kept
    assert [s[1] for s in _Handler.seen] == ["/close", "/idle-close", "/b"]
    c.close()


def test_a_refused_connection_sent_nothing() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(_http.ConnectFailed):
            _client().request("POST", f"http://127.0.0.1:{port}", "/_xtdb/submit-tx", content=b"x")


def test_no_answer_in_time_and_a_broken_connection_are_told_apart(server: ThreadingHTTPServer) -> None:
    c = _client()
    with pytest.raises(_http.TimedOut):
        c.request("GET", _base(server), "/slow", timeout=0.2)
    with pytest.raises(_http.ConnectionLost) as e:
        c.request("POST", _base(server), "/drop", content=b"x")
    assert not isinstance(e.value, _http.ConnectFailed)
    assert c.request("GET", _base(server), "/a").status_code == 200  # a new connection after both
    c.close()


def test_https_checks_the_certificate_against_the_system_s_or_ssl_cert_file(
    server: ThreadingHTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed_certificate(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    base = f"https://127.0.0.1:{server.server_address[1]}"
    with pytest.raises(_http.ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
        _client().request("GET", base, "/a")  # a certificate nobody vouches for: nothing sent
    assert _Handler.seen == []
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    c = _client(auth=("ann", "pw"))
    assert c.request("GET", base, "/a").status_code == 200
    assert _Handler.seen[-1][:3] == ("GET", "/a", "Basic YW5uOnB3")
    c.close()


def test_the_reader_of_a_store_with_a_password_shows_it_masked(tmp_path: Path) -> None:
    """What worker processes open the store with carries the credentials, never in its repr."""
    import pickle

    from context_os.store.xtdb import XtdbStore

    store = XtdbStore("xtdb+http://alice:s3cret-pw@127.0.0.1:9", text_index_path=tmp_path / "t.db")
    reader = store.reader()
    again = pickle.loads(pickle.dumps(reader))  # (as a worker process gets it)
    assert "s3cret-pw" not in repr(reader) and "s3cret-pw" not in repr(again)
    assert "alice:***@127.0.0.1:9" in repr(again)
    opened = again()
    assert opened.url == store.url and opened._auth == store._auth  # the credentials themselves go along
