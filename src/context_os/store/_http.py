"""The XTDB store's HTTP client: HTTP/1.1 keep-alive connections to each node over the standard
library's ``http.client``.

Why not httpx, which the proxy and the embedders use: a small request to a local node took
0.31-0.40 ms through httpx, against 0.12-0.14 ms here on the same kept-alive connection
(docs/benchmarks.md, "Stores: SQLite vs XTDB"), and a session's turn sends two.
The store needs little of a general client: one method per request, bodies read whole, basic
auth, TLS with the system's certificates.

This module must never retry, follow a redirect or read proxy settings from the environment: the
store decides what is safe to send again (a submit that may have reached the node is not), and a
node is reached directly, as a database is.
"""

from __future__ import annotations

import base64
import http.client
import select
import socket
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import quote, urlencode, urlsplit

__all__ = ["Client", "ConnectFailed", "ConnectionLost", "HttpError", "Response", "TimedOut"]


class HttpError(Exception):
    """A request that got no answer (the subclasses say how far it went)."""


class ConnectFailed(HttpError):
    """No connection could be opened (refused, no such host, no answer in time, a TLS handshake
    that failed): nothing of the request was sent."""


class TimedOut(HttpError):
    """The request was sent and no answer came in time."""


class ConnectionLost(HttpError):
    """The connection broke during the request: it may have reached the server."""


@dataclass(frozen=True)
class Response:
    """An answer, its body read whole."""

    status_code: int
    headers: Mapping[str, str]
    """Names in lower case."""
    content: bytes
    method: str
    url: str
    """What was asked, without the query."""

    @cached_property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class _Origin:
    https: bool
    host: str
    port: int
    prefix: str
    """The base URL's path, quoted for the request line."""


class Client:
    """Requests to the nodes of one store, each on a connection of its own (thread-safe): an idle
    connection is kept per node (up to ``max_idle``) and used again unless the server closed it."""

    def __init__(
        self,
        *,
        timeout: float,
        connect_timeout: float,
        headers: Mapping[str, str],
        auth: tuple[str, str] | None = None,
        max_idle: int = 8,
    ) -> None:
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.headers = dict(headers)
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self.headers["Authorization"] = f"Basic {token}"
        self.max_idle = max_idle
        self._idle: dict[tuple[bool, str, int], list[http.client.HTTPConnection]] = {}
        """Idle connections by (https, host, port)."""
        self._origins: dict[str, _Origin] = {}
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None
        self._closed = False

    def request(
        self,
        method: str,
        base: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Response:
        """``method`` of ``base`` + ``path`` (``base``: ``http(s)://host:port[/prefix]``)."""
        origin = self._origin(base)
        target = origin.prefix + quote(path, safe="/%:@!$&'()*+,;=-._~")
        if params:
            target += "?" + urlencode(params)
        sent = dict(self.headers)
        if headers:
            sent.update(headers)
        conn, reused = self._connection(origin)
        try:
            # a connection of ours times out what the server owes it: the read
            conn.sock.settimeout(self.timeout if timeout is None else timeout)
            conn.request(method, target, body=content, headers=sent)
            r = conn.getresponse()
            body = r.read()
        except TimeoutError as e:
            conn.close()
            raise TimedOut(f"no answer in time: {e!r}") from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise ConnectionLost(f"connection {'kept from before ' if reused else ''}lost: {e!r}") from e
        if r.will_close:
            conn.close()
        else:
            self._put_back(origin, conn)
        headers = {k.lower(): v for k, v in r.getheaders()}
        return Response(r.status, headers, body, method, f"{base}{path}")

    def close(self) -> None:
        """Close every idle connection (one in use closes when its request ends)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for c in conns:
                c.close()

    def _origin(self, base: str) -> _Origin:
        origin = self._origins.get(base)
        if origin is None:
            parts = urlsplit(base)
            https = parts.scheme == "https"
            origin = _Origin(
                https,
                parts.hostname or "",
                parts.port or (443 if https else 80),
                quote(parts.path.rstrip("/"), safe="/%:@!$&'()*+,;=-._~"),
            )
            self._origins[base] = origin
        return origin

    def _connection(self, origin: _Origin) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection to ``origin`` the server has not closed, or a new one."""
        while True:
            with self._lock:
                idle = self._idle.get((origin.https, origin.host, origin.port))
                conn = idle.pop() if idle else None
            if conn is None:
                return self._connect(origin), False
            if conn.sock is not None and not _readable(conn.sock):
                return conn, True
            conn.close()  # closed by the server while idle (or it sent what nobody asked for)

    def _connect(self, origin: _Origin) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if origin.https:
            if self._tls is None:
                self._tls = ssl.create_default_context()
            conn = http.client.HTTPSConnection(
                origin.host, origin.port, timeout=self.connect_timeout, context=self._tls
            )
        else:
            conn = http.client.HTTPConnection(origin.host, origin.port, timeout=self.connect_timeout)
        try:
            conn.connect()
        except (OSError, ssl.SSLError) as e:
            conn.close()
            raise ConnectFailed(str(e) or repr(e)) from e
        return conn

    def _put_back(self, origin: _Origin, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault((origin.https, origin.host, origin.port), [])
            if not self._closed and len(idle) < self.max_idle:
                idle.append(conn)
                return
        conn.close()


def _readable(sock: socket.socket) -> bool:
    """Whether an idle connection has something to read: the server closed it (or broke the
    protocol); either way it is not to be used again."""
    if hasattr(select, "poll"):
        p = select.poll()
        p.register(sock, select.POLLIN)
        return bool(p.poll(0))
    return bool(select.select([sock], [], [], 0)[0])
