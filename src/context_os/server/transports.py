"""How JSON-RPC reaches the server: newline-delimited stdio, and HTTP on loopback behind a guard.

stdio: one request per line on stdin, one answer per line on stdout (the process that started
the server holds the pipes: no token needed). HTTP: ``POST /`` on 127.0.0.1, each request
checked by ``HttpGuard`` (token, Host, Origin, Content-Type) before its body is read; every
HTTP entry point of context_os uses the same guard.

This module must never write anything but responses to stdout: logs go to stderr.
"""

from __future__ import annotations

import errno
import hmac
import io
import ipaddress
import math
import os
import re
import secrets
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..signals import handling
from .protocol import INVALID_REQUEST, RpcError, RpcServer, encode, error_response, log

_S = TypeVar("_S", bound=ThreadingHTTPServer)

__all__ = [
    "TOKEN_HEADER",
    "BoundedHTTPServer",
    "DeadlineHandler",
    "HttpGuard",
    "StdioStop",
    "bind",
    "bind_error",
    "check_origin",
    "header_token",
    "listen_socket",
    "make_http_server",
    "new_token",
    "PEER_GONE",
    "peer_user",
    "read_token_file",
    "serve_http",
    "serve_stdio",
    "write_token_file",
]


def bind(
    server_class: type[_S],
    host: str,
    port: int,
    handler: type[BaseHTTPRequestHandler],
    *,
    port_option: str = "--port",
    sock: socket.socket | None = None,
) -> _S:
    """``server_class`` bound to ``host``:``port``; ``ConfigError`` saying why not (a port in use,
    one below 1024 without the right, an address this machine does not have), naming the command
    line's ``port_option`` that picks another. ``sock``: a socket ``listen_socket`` already bound
    there (a command takes its port before it opens or creates a store), served as it is."""
    if sock is not None:
        server = server_class(sock.getsockname()[:2], handler, bind_and_activate=False)
        server.socket.close()
        server.socket = sock
        server.server_address = sock.getsockname()
        server.server_name, server.server_port = str(server.server_address[0]), int(server.server_address[1])
        return server
    try:
        return server_class((host, port), handler)
    except OSError as e:
        raise bind_error(e, host, port, port_option) from None


def listen_socket(host: str, port: int, *, port_option: str = "--port", backlog: int = 2048) -> socket.socket:
    """A TCP socket listening on ``host``:``port`` (for servers that take a socket: uvicorn), or
    ``ConfigError`` saying why not, as ``bind``."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        raise bind_error(e, host, port, port_option) from None
    return sock


def bind_error(e: OSError, host: str, port: int, port_option: str = "--port") -> ConfigError:
    """Why a server could not listen on ``host``:``port``, and what to pass instead."""
    if e.errno == errno.EADDRINUSE:
        why = (
            f"port {port} on {host} is in use (another server already listens there):"
            f" pass {port_option} 0 for a free one"
        )
    elif e.errno == errno.EACCES:
        why = f"no permission to listen on port {port} on {host}: pass a port above 1023, or {port_option} 0"
    else:
        why = f"cannot listen on {host}:{port}: {e.strerror or e}"
    return ConfigError(why)


def _read_line(stream: IO[bytes], cap: int) -> tuple[bytes | None, bool]:
    """The next line without its newline, and whether it was over ``cap`` (then it is dropped,
    read through to its end without holding it). (None, False) at the end of the stream."""
    line = stream.readline(cap + 1)
    if not line:
        return None, False
    if len(line) > cap and not line.endswith(b"\n"):
        while True:
            chunk = stream.readline(1 << 20)
            if not chunk or chunk.endswith(b"\n"):
                return b"", True
    return line.rstrip(b"\r\n"), False


class StdioStop:
    """A stop asked of ``serve_stdio`` from a signal handler (SIGTERM): the request that runs is
    finished and answered, and no other is read. ``ask`` is safe to call at any point of the
    serving thread: it sets a flag, calls ``wake`` (the server's ``stop``: a request that only
    waits, ``mesh.next_request``, is answered at once) and puts an empty stream in place of
    stdin, so that a read waiting for the next line ends as at the end of input."""

    def __init__(self, stdin_fd: int | None = None, *, wake: Callable[[], None] | None = None):
        self.asked = False
        self._fd = stdin_fd
        self._wake = wake

    def ask(self) -> None:
        self.asked = True
        if self._wake is not None:
            self._wake()
        if self._fd is not None:
            empty = os.open(os.devnull, os.O_RDONLY)
            try:
                os.dup2(empty, self._fd)
            except OSError:
                pass
            finally:
                os.close(empty)

    @contextmanager
    def on_signal(self, signum: int = signal.SIGTERM) -> Iterator[StdioStop]:
        """While inside: ``signum`` asks this stop (in the main thread only; elsewhere nothing
        changes)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        with handling((signum,), lambda s, f: self.ask()):
            yield self


def serve_stdio(
    server: RpcServer,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
    *,
    stop: StdioStop | None = None,
) -> None:
    """Answer newline-delimited requests from ``stdin`` until it closes, or ``stop`` is asked
    (then the request that runs is answered first)."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    while stop is None or not stop.asked:
        line, too_long = _read_line(stdin, server.max_request_bytes)
        if line is None:
            return
        if too_long:
            answer: bytes | None = server.too_large()
        elif not line.strip():
            continue
        else:
            answer = server.handle_line(line)
        if answer is not None:
            try:
                stdout.write(answer + b"\n")
                stdout.flush()
            except BrokenPipeError:
                return


TOKEN_HEADER = "Authorization"
"""Requests carry ``Authorization: Bearer <token>``; the token is the server's, made at start."""


PEER_GONE = -1
"""``peer_user``: the kernel lists sockets, but no live one at the other end of this connection
(its process closed it: an orphaned socket's row names uid 0 and no inode), so nobody can be
said to own it."""


def peer_user(conn: socket.socket) -> int | None:
    """The user id of the process at the other end of a loopback TCP connection, from the
    kernel's socket table: the peer's end of the connection is a socket there, with its owner's
    uid, as identd answers. Asked of that one socket over netlink (``sock_diag``, as ``ss``
    does), else read from ``/proc/net/tcp`` or ``tcp6`` (a row per socket of the machine: 3 ms
    with a thousand, which every new connection of a busy proxy paid before its request was
    read). ``PEER_GONE`` when the table has no live socket for it (the peer closed its socket: a
    closed socket's row says uid 0, which must not pass for root); None where there is no such
    table (not Linux). Lets a server without a token of its own (the proxy) answer only its own
    user."""
    try:
        here, there = conn.getsockname(), conn.getpeername()
    except OSError:
        return PEER_GONE if _TABLES[0].exists() else None
    if not _TABLES[0].exists():
        return None
    # the peer's socket: its local address is our peer, its remote address is us; an IPv4 client
    # of an IPv6 socket (::ffff:127.0.0.1) is an IPv4 socket, or an IPv6 one as mapped
    places = _tables(conn, here)
    try:
        for _, family in places:
            found = _diag_user(family, there, here)
            if found is not None:
                return found
        return PEER_GONE
    except OSError:  # no netlink here (a sandbox): the tables
        pass
    wanted = [(table, (_proc_address(family, there), _proc_address(family, here))) for table, family in places]
    for table, pair in wanted:
        try:
            with table.open(encoding="ascii") as rows:
                next(rows, None)  # the header
                for row in rows:
                    fields = row.split()
                    if len(fields) > 9 and (fields[1], fields[2]) == pair and fields[9] != "0":
                        return int(fields[7])
        except OSError:
            continue
    return PEER_GONE


_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2


def _diag_user(family: int, local: tuple[Any, ...], remote: tuple[Any, ...]) -> int | None:
    """The uid of the live TCP socket bound at ``local`` and connected to ``remote`` (``family``
    as ``_tables`` gives it), asked of the kernel over netlink (``inet_diag_req_v2`` for exactly
    that socket); None when there is none, or it is closed (no inode: an orphan). ``OSError`` when
    netlink cannot be asked."""
    af = socket.AF_INET if family == _MAPPED else family

    def packed(address: tuple[Any, ...]) -> bytes:
        host = str(address[0])
        raw = socket.inet_pton(af, host.removeprefix("::ffff:") if family == _MAPPED else host.split("%")[0])
        return raw.ljust(16, b"\0")

    sockid = (
        struct.pack("!HH", local[1], remote[1])
        + packed(local)
        + packed(remote)
        + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)  # any interface, no cookie
    )
    request = struct.pack("=BBBBI", af, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid  # every state
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(2)
        nl.sendto(
            struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0) + request, (0, 0)
        )
        answer = nl.recv(8192)
    if len(answer) < 20:
        raise OSError(f"a sock_diag answer of {len(answer)} bytes")
    kind = struct.unpack_from("=H", answer, 4)[0]
    if kind == _NLMSG_ERROR:
        code = -struct.unpack_from("=i", answer, 16)[0]
        if code == errno.ENOENT:
            return None
        raise OSError(code, os.strerror(code))
    if len(answer) < 16 + 72:
        raise OSError(f"a sock_diag answer of {len(answer)} bytes")
    uid, inode = struct.unpack_from("=II", answer, 16 + 64)  # inet_diag_msg's idiag_uid, idiag_inode
    return uid if inode else None


_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def _tables(conn: socket.socket, here: tuple[Any, ...]) -> list[tuple[Path, int]]:
    """Where the peer of ``conn`` (bound at ``here``) may be listed, and the family to write its
    addresses in there."""
    if conn.family != socket.AF_INET6:
        return [(_TABLES[0], socket.AF_INET)]
    if str(here[0]).lower().startswith("::ffff:"):
        return [(_TABLES[0], _MAPPED), (_TABLES[1], socket.AF_INET6)]
    return [(_TABLES[1], socket.AF_INET6)]


_MAPPED = -4
"""``_proc_address``: an IPv4-mapped IPv6 address written as the IPv4 address it maps."""


def _proc_address(family: int, address: tuple[Any, ...]) -> str:
    """``address`` as the kernel's socket table writes it: the address's 32-bit words in the
    machine's byte order, in hex, a colon, the port in hex (``0100007F:1F90``: 127.0.0.1:8080
    on a little-endian machine)."""
    if family == _MAPPED:
        packed = socket.inet_pton(socket.AF_INET6, address[0])[12:]
    else:
        packed = socket.inet_pton(family, address[0])
    words = "".join(f"{int.from_bytes(packed[k : k + 4], sys.byteorder):08X}" for k in range(0, len(packed), 4))
    return f"{words}:{address[1]:04X}"


def new_token() -> str:
    """A fresh secret token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def header_token(env: str) -> str:
    """The token an HTTP server asks clients for as ``Authorization: Bearer …``: ``$env``, or a
    fresh one. ``ConfigError`` for one no client could send and the server match: shorter than 16
    characters, not ASCII (the token file is ASCII: writing it failed with a traceback), a
    control character, or whitespace at either end (a client's header is trimmed: every request
    was refused)."""
    token = os.environ.get(env) or new_token()
    if len(token) < 16:
        raise ConfigError(f"${env} is too short to be a secret ({len(token)} characters; at least 16)")
    if not (token.isascii() and token.isprintable()) or token != token.strip():
        raise ConfigError(f"${env} must be printable ASCII with no space at either end (it is sent in an HTTP header)")
    return token


def write_token_file(path: Path, token: str) -> Path:
    """Store ``token`` at ``path`` readable by its owner only (0600, its directory 0700), replacing
    any stale file atomically; the file is never world- or group-readable, not even for a moment."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, token.encode("ascii") + b"\n")
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def read_token_file(path: str | Path) -> str:
    """The token a server wrote to ``path`` (for clients), or ConfigError saying why not."""
    try:
        text = Path(path).expanduser().read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the server token from {path}: {getattr(e, 'strerror', None) or e}") from None
    if not text:
        raise ConfigError(f"the token file {path} is empty")
    return text


_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#@\s]+")


def check_origin(origin: str) -> str:
    """``origin`` as a browser sends it in ``Origin`` (``scheme://host[:port]``, lower case, no
    trailing ``/``), or ``ConfigError`` saying why no browser ever sends it: a value that cannot
    match would leave the page it was meant for refused, with no word why."""
    value = origin.strip().rstrip("/").lower()
    if value == "*":
        raise ConfigError("origin '*' refused: name each origin allowed (e.g. http://127.0.0.1:5173)")
    if value == "null":
        raise ConfigError(
            "origin 'null' refused: browsers send it for file:// pages and sandboxed frames, which any page can open"
        )
    if not _ORIGIN.fullmatch(value):
        raise ConfigError(
            f"origin {origin!r} is not one a browser sends: give scheme://host[:port] with no path "
            "(e.g. http://127.0.0.1:5173)"
        )
    return value


class Headers(Protocol):
    """Request headers looked up by case-insensitive name (``http.server``'s, or any mapping's)."""

    def get(self, name: str, /) -> str | None: ...


@dataclass(frozen=True)
class HttpGuard:
    """Who may talk to an HTTP entry point on loopback: every context_os HTTP server (JSON-RPC,
    and any later one) checks each request with ``refusal`` before reading its body.

    A local web page can send a "simple" cross-origin POST (``text/plain``, no preflight) and a
    DNS-rebinding page can make its own host resolve to 127.0.0.1; any local process can connect.
    So: the ``Host`` header must name the loopback address the server bound (or ``localhost``)
    with its port; a request with an ``Origin`` header is refused unless that origin was allowed
    by whoever started the server; the body must be ``application/json``; and the request must
    carry the server's secret token (unless the server has none: a proxy, whose credential is the
    provider's key the client sends through). Checks run in that order, and the first that fails
    answers.
    """

    token: str | None
    hosts: frozenset[str]
    """Acceptable ``Host`` header values (lower case, with port)."""
    origins: frozenset[str] = frozenset()
    """Origins (``scheme://host[:port]``) allowed to send requests; none by default."""
    origin_hint: str | None = None
    """How an origin gets allowed, said when one is refused (None: it cannot be)."""

    @classmethod
    def for_address(
        cls, host: str, port: int, token: str | None, origins: Sequence[str] = (), *, origin_hint: str | None = None
    ) -> HttpGuard:
        shown = f"[{host}]" if ":" in host else host
        return cls(
            token,
            frozenset({f"{shown}:{port}".lower(), f"localhost:{port}"}),
            frozenset(check_origin(o) for o in origins),
            origin_hint,
        )

    def allows_origin(self, origin: str) -> bool:
        """Whether a request with this ``Origin`` header may be answered (and read by its page)."""
        return origin.rstrip("/").lower() in self.origins

    def refusal(self, method: str, headers: Headers) -> tuple[int, str] | None:
        """None if the request may proceed, else (HTTP status, why) to answer with. ``OPTIONS``
        is a browser's CORS preflight: it needs an allowed ``Origin`` and carries no token."""
        get_all = getattr(headers, "get_all", None)
        for name in ("Host", "Origin"):
            if get_all is not None and len(get_all(name) or ()) > 1:
                return 400, f"more than one {name} header"
        host = (headers.get("Host") or "").strip().lower()
        if host not in self.hosts:
            return 403, f"Host {host or '(none)'!r} refused: this server answers only {' or '.join(sorted(self.hosts))}"
        origin = headers.get("Origin")
        if origin is not None and not self.allows_origin(origin):
            hint = self.origin_hint or "this server answers no cross-origin request"
            return 403, f"Origin {origin!r} refused ({hint})"
        if method == "OPTIONS":
            return None if origin is not None else (405, "OPTIONS is a CORS preflight: it needs an Origin")
        if method == "POST":
            ctype = (headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                return 415, f"Content-Type {ctype or '(none)'!r} refused: send application/json"
        if self.token is None:
            return None
        scheme, _, given = (headers.get(TOKEN_HEADER) or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            return 401, "missing or wrong token: send Authorization: Bearer <the server's token>"
        return None


DISCARD_LIMIT = 64 * 1024 * 1024
"""The body of a refused request is read (and dropped) up to this size before the answer."""
MAX_CONNECTIONS = 64
"""HTTP connections served at once (each holds a thread); one more is answered 503 and closed."""
HEADER_SECONDS = 10.0
"""A request's line and headers must all arrive within this many seconds, however slowly they
trickle in (a client that never finishes them, many times over, would hold every thread); else
the connection is closed. A new connection's first request counts from the connection; a
kept-alive connection waits this long for its client's next request, and that request counts
from its first byte (as uvicorn's, ``mcp.http_protocol``): one begun late in the wait, its client
not knowing, had only the rest of the wait for its headers and was cut mid-request, until
2026-12-05."""
BODY_SECONDS = 60.0
"""A request's body must all arrive within this many seconds of its headers."""


ROOM_SECONDS = 1.0
"""How long a connection over ``max_connections`` waits for the one idle the longest, closed to
make room for it, to let its slot go."""


class _DeadlineSocket(io.RawIOBase):
    """A connection's reading side, each read bounded by one deadline for the whole of what is
    being read (``deadline``, monotonic seconds; None: the socket's own timeout per read).
    ``arrived``, while set, called when bytes came and before they are read: False if the
    connection was taken from the reader meanwhile (closed to make room for another), whose bytes
    are then dropped."""

    def __init__(self, sock: socket.socket, per_read: float | None, arrived: Callable[[], bool] | None = None):
        self.sock = sock
        self.per_read = per_read
        self.deadline: float | None = None
        self.arrived = arrived

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request took too long to arrive")
            self.sock.settimeout(left if self.per_read is None else min(left, self.per_read))
        if self.arrived is not None:
            # claimed while the bytes are still on the socket, never after taking them: a
            # connection is then either claimed or readable when another's ``_make_room`` looks
            # (taken first, a thread preempted before its claim lost its client's begun request)
            if not _readable(self.sock, self.sock.gettimeout()):
                raise TimeoutError("timed out")
            if not self.arrived():
                return 0
        return self.sock.recv_into(buffer)


def _gone(sock: socket.socket) -> bool:
    """Whether a connection's client closed it (or it is closed already)."""
    try:
        return _readable(sock, 0) and _closed_by_peer(sock)
    except (OSError, ValueError):
        return True


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether a readable socket's client closed it (its end came, nothing before it)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset


def _readable(sock: socket.socket, timeout: float | None) -> bool:
    """Whether ``sock`` has bytes (or its end) to read within ``timeout`` seconds (None: ever)."""
    poll = select.poll()
    poll.register(sock, select.POLLIN | select.POLLPRI)
    return bool(poll.poll(None if timeout is None else math.ceil(timeout * 1000)))


def make_http_server(
    server: RpcServer,
    port: int,
    *,
    token: str,
    origins: Sequence[str] = (),
    host: str = "127.0.0.1",
    sock: socket.socket | None = None,
    max_connections: int = MAX_CONNECTIONS,
    header_seconds: float = HEADER_SECONDS,
    body_seconds: float = BODY_SECONDS,
) -> ThreadingHTTPServer:
    """An HTTP server answering ``POST /`` with JSON-RPC, bound to loopback (or on ``sock``, bound
    there already: ``bind``), behind an ``HttpGuard`` for the address it bound (``token``,
    ``origins``: see ``HttpGuard``). It serves ``max_connections`` at once, and closes one whose
    request line and headers took over ``header_seconds`` to arrive, or its body ``body_seconds``."""
    if not _is_loopback(host):
        raise ConfigError(f"the JSON-RPC server binds to a loopback address only, not {host!r}")

    class Handler(DeadlineHandler):
        protocol_version = "HTTP/1.1"  # a client's next request may come on the same connection

        def _send(self, status: int, body: bytes | None, *, allow: str | None = None) -> None:
            try:
                self._write(status, body, allow=allow)
            except (BrokenPipeError, ConnectionResetError):  # the client hung up: no server error
                self.close_connection = True
                log.info("http client %s left before its answer (%d)", self.client_address[0], status)

        def _write(self, status: int, body: bytes | None, *, allow: str | None = None) -> None:
            self.send_response(status)
            if status == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="context_os"')
            if allow is not None:
                self.send_header("Allow", allow)
            origin = self.headers.get("Origin")
            if origin is not None and httpd.guard.allows_origin(origin):
                # a page of an origin the server's owner allowed may read the answer (CORS)
                self.send_header("Access-Control-Allow-Origin", origin)
                self.send_header("Vary", "Origin")
            if body is not None:
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
            else:
                self.send_header("Content-Length", "0")
            self.end_headers()
            if body is not None and self.command != "HEAD":
                self.wfile.write(body)

        def _refuse(self, status: int, why: str, *, body: bytes | None = None, allow: str | None = None) -> None:
            self.close_connection = True
            self._discard_body()
            self._send(status, body or encode(error_response(None, RpcError(INVALID_REQUEST, why))), allow=allow)

        def _discard_body(self) -> None:
            """Read what the client sends of a refused request before answering: a socket closed
            with unread data is reset, and the client loses the answer (or its send fails)."""
            try:
                left = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                return
            if left > DISCARD_LIMIT:
                return  # not worth reading: the client gets a reset
            while left > 0:
                chunk = self.rfile.read(min(left, 65536))
                if not chunk:
                    return
                left -= len(chunk)

        def _allowed(self, method: str) -> bool:
            refusal = httpd.guard.refusal(method, self.headers)
            if refusal is None:
                return True
            log.warning("http %s refused: %s", method, refusal[1])
            self._refuse(*refusal)
            return False

        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            if not self._allowed("POST"):
                return
            if urlsplit(self.path).path not in ("/", "/rpc"):  # a query string names no other endpoint
                self._refuse(404, "POST to / or /rpc")
                return
            if "Transfer-Encoding" in self.headers:
                # read by its Content-Length, a body sent in chunks would leave the rest on the
                # kept-alive connection, to be read as the next request
                self._refuse(411, "a body in chunks (Transfer-Encoding) is not read: send a Content-Length")
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self._refuse(411, "Content-Length needed")
                return
            if length < 0:
                self._refuse(400, f"Content-Length must be a number of bytes, not {length}")
                return
            if length > server.max_request_bytes:
                self._refuse(413, "too large", body=server.too_large(per_line=False))
                return
            try:
                body = self.rfile.read(length)
            except TimeoutError:
                body = b""  # it stopped sending (``timeout``): as if the body had ended there
            if len(body) < length:
                # a client gone (or stalled) mid-send: what came may even parse, but it is not the
                # request that was sent, and nothing of it is run
                self.close_connection = True
                log.warning("http POST refused: the body ended after %d of %d bytes", len(body), length)
                why = f"the body ended after {len(body)} of the {length} bytes of its Content-Length: nothing was run"
                self._send(400, encode(error_response(None, RpcError(INVALID_REQUEST, why))))
                return
            answer = server.handle_line(body)
            self._send(200 if answer is not None else 204, answer)

        def do_OPTIONS(self) -> None:  # noqa: N802 - http.server naming
            """A browser's CORS preflight, from an origin the server's owner allowed."""
            if not self._allowed("OPTIONS"):
                return
            self.close_connection = self.close_connection or self.declares_body()
            self.send_response(204)
            self.send_header("Access-Control-Allow-Origin", self.headers["Origin"])
            self.send_header("Access-Control-Allow-Methods", "POST")
            self.send_header("Access-Control-Allow-Headers", "Authorization, Content-Type")
            self.send_header("Access-Control-Max-Age", "600")
            self.send_header("Vary", "Origin")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _not_allowed(self) -> None:
            if self._allowed("GET"):  # the checks of a request without a body
                self._refuse(405, f"{self.command} refused: use POST with a JSON-RPC body", allow="POST, OPTIONS")

        do_GET = do_HEAD = do_PUT = do_DELETE = do_PATCH = _not_allowed  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http %s - " + format, self.client_address[0], *args)

    httpd = bind(_GuardedHTTPServer, host, port, Handler, port_option="--http", sock=sock)
    httpd.bound(max_connections, header_seconds, body_seconds)
    bound_host, bound_port = httpd.server_address[:2]
    httpd.guard = HttpGuard.for_address(
        str(bound_host), bound_port, token, origins, origin_hint="start the server with --allow-origin to allow one"
    )
    return httpd


class BoundedHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that serves at most ``max_connections`` at once with
    ``DeadlineHandler``'s deadlines: every context_os HTTP server built on ``http.server``
    (JSON-RPC, the web view, the proxy) is one. One more connection is given the place of the
    kept-alive connection idle the longest (waiting for its client's next request, none of it
    come), which is closed, as a server may close an idle one at any time; with none idle, it is
    answered 503 and closed at once. The limits are ``MAX_CONNECTIONS``, ``HEADER_SECONDS`` and
    ``BODY_SECONDS`` unless ``bound`` sets others."""

    daemon_threads = True
    slots: threading.BoundedSemaphore
    """One per connection being served."""
    max_connections: int
    header_seconds: float
    body_seconds: float

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.bound()
        self._idle: dict[DeadlineHandler, None] = {}
        """The kept-alive connections waiting for their client's next request, the oldest first."""
        self._serving: dict[Any, DeadlineHandler] = {}
        """The connections holding a slot, by socket (the idle ones among them; ``done``: their
        handler is finishing)."""
        self._idle_lock = threading.Lock()

    def bound(
        self,
        max_connections: int = MAX_CONNECTIONS,
        header_seconds: float = HEADER_SECONDS,
        body_seconds: float = BODY_SECONDS,
    ) -> None:
        """Set the limits (see ``MAX_CONNECTIONS``, ``HEADER_SECONDS``, ``BODY_SECONDS``)."""
        self.slots, self.max_connections = threading.BoundedSemaphore(max_connections), max_connections
        self.header_seconds, self.body_seconds = header_seconds, body_seconds

    busy_headers: tuple[tuple[str, str], ...] = ()
    """Further headers of that 503 answer (the web view's, which every answer of it carries)."""

    def busy(self) -> tuple[str, bytes]:
        """(content type, body) of the 503 answer to a connection over ``max_connections``."""
        why = "too many connections at once: retry when one of them is done"
        return "application/json", encode(error_response(None, RpcError(INVALID_REQUEST, why)))

    def waits(self, handler: DeadlineHandler) -> None:
        """``handler``'s connection waits for its client's next request: it may be closed to make
        room for another."""
        with self._idle_lock:
            self._idle[handler] = None

    def claims(self, handler: DeadlineHandler) -> bool:
        """``handler``'s client sent something: not idle any more. False if the connection was
        closed to make room for another before."""
        with self._idle_lock:
            if handler.given_up:
                return False
            self._idle.pop(handler, None)
            return True

    def arrives(self, handler: DeadlineHandler) -> None:
        """``handler``'s connection is being served."""
        with self._idle_lock:
            self._serving[handler.connection] = handler

    def leaves(self, handler: DeadlineHandler) -> None:
        """``handler``'s connection is done with: not idle, its slot about to be free."""
        with self._idle_lock:
            self._idle.pop(handler, None)
            handler.done = True

    def _make_room(self) -> bool:
        """Whether a slot is about to be free: a connection is done with (its client closed it,
        its handler is finishing), or the kept-alive connection idle the longest (one whose
        client has not begun its next request) was closed for it. A connection its client had
        just closed held its slot a moment longer, and the one after it was refused (503) though
        every connection would have been served: one clean-clone run in three, on a loaded machine,
        before 2026-12-04."""
        with self._idle_lock:
            if any(h.done or _gone(h.connection) for h in self._serving.values()):
                return True  # (finishing, or its client closed it after its answer: leaving)
            for handler in self._idle:
                try:  # a request arrived and not read yet: not idle
                    if _readable(handler.connection, 0):
                        continue
                except (OSError, ValueError):
                    continue  # closed already (``_gone`` said so above)
                del self._idle[handler]
                handler.given_up = True
                with suppress(OSError):
                    handler.connection.shutdown(socket.SHUT_RDWR)
                log.info("http connection from %s closed, idle: another needs its place", handler.client_address[0])
                return True
        return False

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False) and not (
            self._make_room() and self.slots.acquire(timeout=ROOM_SECONDS)
        ):
            log.warning("http connection from %s refused: %d served already", client_address[0], self.max_connections)
            ctype, body = self.busy()
            extra = "".join(f"{k}: {v}\r\n" for k, v in self.busy_headers)
            head = (
                f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: {ctype}\r\nRetry-After: 1\r\n{extra}"
                f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            with suppress(OSError):
                request.sendall(head.encode("ascii") + body)
                request.setblocking(False)
                while request.recv(65536):  # what came already: closed unread, the answer is reset
                    pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread could start: its slot is free again
            self.slots.release()
            raise
        # (an interrupt raised while the thread starts leaves the slot to the thread: released
        # twice, the semaphore's error would replace the interrupt, which socketserver swallows)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()
            with self._idle_lock:  # (after the release: one waiting for the slot gets it)
                self._serving.pop(request, None)


class DeadlineHandler(BaseHTTPRequestHandler):
    """A request handler of a ``BoundedHTTPServer``: a request's line and headers must all arrive
    within the server's ``header_seconds``, its body within ``body_seconds`` of them (not merely
    one byte a minute), else the connection is closed."""

    timeout = 60  # the longest one read may wait, and the one write of an answer
    disable_nagle_algorithm = True
    """Each write goes out at once (``TCP_NODELAY``). With Nagle's algorithm a small write waits
    while one before it is not acknowledged, and on a kept-alive connection the client delays its
    acknowledgement (40 ms on Linux): a stream's chunks (the proxy relays a model's tokens) came
    40-50 ms late at each such wait, from every connection's second request on, until 2026-12-05."""
    server: BoundedHTTPServer
    given_up = False
    """Its connection was closed, idle, to make room for another (``BoundedHTTPServer``)."""
    done = False
    """Its connection is done with: its slot is about to be free (``BoundedHTTPServer``)."""
    _answered = False
    _said_connection = False
    """The answer being written has a ``Connection`` header already (``end_headers``)."""
    _status = 0
    """The status of the answer being written."""

    def setup(self) -> None:
        super().setup()
        self.server.arrives(self)
        self._reading = _DeadlineSocket(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self._reading)

    def _claim(self) -> bool:
        """The first bytes of the next request came: not idle any more (``BoundedHTTPServer.claims``),
        and its headers have ``header_seconds`` from now; the reads after it need no claim (only a
        waiting connection is ever closed for another)."""
        self._reading.arrived = None
        self._reading.deadline = time.monotonic() + self.server.header_seconds
        return self.server.claims(self)

    def handle_one_request(self) -> None:
        self._reading.deadline = time.monotonic() + self.server.header_seconds
        if self._answered:  # kept alive, waiting for the client's next request
            self.server.waits(self)
            self._reading.arrived = self._claim
        super().handle_one_request()
        self._answered = True

    def finish(self) -> None:
        self.server.leaves(self)
        super().finish()

    def parse_request(self) -> bool:
        self.server.claims(self)  # (a request already read ahead, which no read announced)
        parsed = super().parse_request()
        self._reading.deadline = time.monotonic() + self.server.body_seconds  # the headers are in
        return parsed

    def declares_body(self) -> bool:
        """Whether the request says a body follows (a ``Content-Length`` above 0, or a
        ``Transfer-Encoding``). One its handler does not read is left on the connection, where the
        next request would be read from it: the connection is closed after the answer instead."""
        length = self.headers.get("Content-Length", "0").strip()
        return "Transfer-Encoding" in self.headers or length not in ("", "0")

    def send_header(self, keyword: str, value: str) -> None:
        if keyword.lower() == "connection":
            self._said_connection = True
        super().send_header(keyword, value)

    def end_headers(self) -> None:
        # an answer after which the connection closes says so (``Connection: close``), unless its
        # handler said it itself; not an interim one (``100 Continue``)
        if self.close_connection and not self._said_connection and self._status >= 200:
            self.send_header("Connection", "close")
        self._said_connection = False
        super().end_headers()

    def send_response_only(self, code: int, message: str | None = None) -> None:
        self._status = code
        # the answer is written with the socket's own timeout, not what the reading left of it
        # (``send_response`` comes here too; a relayed answer, the proxy's, comes here alone)
        self._reading.deadline = None
        self.connection.settimeout(self.timeout)
        super().send_response_only(code, message)


class _GuardedHTTPServer(BoundedHTTPServer):
    guard: HttpGuard


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def serve_http(server: RpcServer, port: int, *, token: str, host: str = "127.0.0.1") -> None:
    """Serve HTTP until interrupted."""
    httpd = make_http_server(server, port, token=token, host=host)
    log.info("listening on http://%s:%d", *httpd.server_address[:2])
    try:
        httpd.serve_forever()
    finally:
        httpd.server_close()
