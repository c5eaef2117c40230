"""Private networks: the libp2p pre-shared key protector (PSK v1), as go, js and rust speak it.

With a key, every connection is encrypted with XSalsa20 under the shared 32-byte key before
anything else (Noise comes after): each side first sends a random 24-byte nonce, then its stream
XOR the key stream. A peer without the key cannot even start the handshake.

py-libp2p 0.8.1's own protector uses Salsa20 with an 8-byte nonce, which only talks to itself;
``install()`` puts this one in its place (XSalsa20 is HSalsa20 to derive a subkey from the first
16 nonce bytes, then Salsa20 with the last 8: checked against libsodium in the tests).

A key file is the format every libp2p implementation reads (``swarm.key``)::

    /key/swarm/psk/1.0.0/
    /base16/
    <64 hex digits>

Like ssh with a private key, a key file that other users may read (group or world permission
bits, on a file of one's own) is refused (``read_secret``): the identity seed and the swarm key
alike.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import struct
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = [
    "create_secret",
    "hsalsa20",
    "install",
    "new_swarm_key",
    "read_secret",
    "read_swarm_key",
    "write_swarm_key",
    "xsalsa20",
]

_M = 0xFFFFFFFF
_HEADER = "/key/swarm/psk/1.0.0/"
_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")


def _rotl(v: int, c: int) -> int:
    return ((v << c) & _M) | (v >> (32 - c))


def hsalsa20(key: bytes, nonce16: bytes) -> bytes:
    """The 32-byte subkey HSalsa20 derives from ``key`` and a 16-byte nonce."""
    c = struct.unpack("<4I", b"expand 32-byte k")
    k = struct.unpack("<8I", key)
    n = struct.unpack("<4I", nonce16)
    x = [c[0], k[0], k[1], k[2], k[3], c[1], n[0], n[1], n[2], n[3], c[2], k[4], k[5], k[6], k[7], c[3]]

    def qr(a: int, b: int, cc: int, d: int) -> None:
        x[b] ^= _rotl((x[a] + x[d]) & _M, 7)
        x[cc] ^= _rotl((x[b] + x[a]) & _M, 9)
        x[d] ^= _rotl((x[cc] + x[b]) & _M, 13)
        x[a] ^= _rotl((x[d] + x[cc]) & _M, 18)

    rounds = [(0, 4, 8, 12), (5, 9, 13, 1), (10, 14, 2, 6), (15, 3, 7, 11)]  # columns
    rounds += [(0, 1, 2, 3), (5, 6, 7, 4), (10, 11, 8, 9), (15, 12, 13, 14)]  # rows
    for _ in range(10):  # 20 rounds
        for a, b, cc, d in rounds:
            qr(a, b, cc, d)
    return struct.pack("<8I", x[0], x[5], x[10], x[15], x[6], x[7], x[8], x[9])


def xsalsa20(key: bytes, nonce24: bytes) -> Any:
    """An XSalsa20 cipher (``encrypt``/``decrypt`` XOR the key stream) for a 24-byte nonce."""
    from Crypto.Cipher import Salsa20

    return Salsa20.new(key=hsalsa20(key, nonce24[:16]), nonce=nonce24[16:])


def new_swarm_key() -> str:
    """The text of a new random swarm key file."""
    return f"{_HEADER}\n/base16/\n{os.urandom(32).hex()}\n"


def write_swarm_key(path: str | Path) -> Path:
    """Write a new swarm key to ``path``, readable by its owner only; a file there already is left
    alone (``ConfigError``: a key replaced would lock its group out)."""
    p = Path(path)
    try:
        create_secret(p, new_swarm_key().encode("ascii"), "swarm key")
    except FileExistsError:
        raise ConfigError(f"swarm key {p}: a file is there already; left as it is (its peers may use it)") from None
    return p


def create_secret(path: Path, data: bytes, what: str) -> None:
    """Write ``data`` to the new file ``path``, readable by its owner only, whole or not at all:
    written under another name (mkstemp: 0600), then linked into place, which fails if ``path``
    exists (``FileExistsError``, for the caller to decide). Created in place, a secret was empty
    for a moment (another process reading it at once read 0 bytes) and for good when the write
    failed (a full disk). ``ConfigError`` when it cannot be written."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise ConfigError(f"{what} {path}: cannot write it ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise
        except OSError:  # no hard links on this file system: created in place
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(data)
    except FileExistsError:
        raise
    except OSError as e:  # a full disk, a file size limit: nothing is left behind
        raise ConfigError(f"{what} {path}: cannot write it ({e.strerror or e})") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def read_secret(path: str | Path, what: str) -> bytes:
    """The bytes of a key file; ``ConfigError`` when it cannot be read, or when it is one's own
    and others may read it (as ssh refuses such a private key: the secret may have leaked, and
    nobody would know)."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            st = os.fstat(f.fileno())
            if os.name == "posix" and st.st_uid == os.getuid() and st.st_mode & 0o077:
                mode = stat.S_IMODE(st.st_mode)
                raise ConfigError(
                    f"{what} {p}: its permissions {mode:04o} let other users read it, and it is a "
                    f"secret: refused (chmod 600 {p})"
                )
            return f.read()
    except OSError as e:
        raise ConfigError(f"{what} {p}: cannot read it ({e.strerror or e})") from None


def read_swarm_key(path: str | Path) -> bytes:
    """The 32-byte key in a ``swarm.key`` file; ``ConfigError`` says what is wrong with it."""
    p = Path(path)
    raw = read_secret(p, "swarm key")
    try:
        lines = [line.strip() for line in raw.decode("utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError as e:
        raise ConfigError(f"swarm key {p}: cannot read it ({e})") from None
    if len(lines) != 3 or lines[0] != _HEADER:
        raise ConfigError(f"swarm key {p}: expected 3 lines, {_HEADER} then /base16/ then 64 hex digits")
    if lines[1] != "/base16/":
        raise ConfigError(f"swarm key {p}: only the /base16/ encoding is supported, not {lines[1]}")
    # exactly 64 hex digits, as go and js decode it (Python's fromhex also takes spaces between
    # bytes: a key that worked here was refused by every other implementation)
    if not _HEX_KEY.fullmatch(lines[2]):
        if re.fullmatch(r"[0-9a-fA-F]*", lines[2]) and len(lines[2]) % 2 == 0:
            raise ConfigError(f"swarm key {p}: the key is {len(lines[2]) // 2} bytes, not 32")
        raise ConfigError(f"swarm key {p}: the key line is not 64 hex digits")
    return bytes.fromhex(lines[2])


def install() -> None:
    """Make py-libp2p protect connections with spec PSK v1 (idempotent, process-wide: the
    library's own protector is not compatible with any other implementation)."""
    import libp2p.network.swarm as swarm
    from libp2p.network.connection.raw_connection import RawConnection

    if getattr(getattr(swarm, "new_protected_conn", None), "_context_os", False):
        return

    class PskConnection(RawConnection):
        """A raw connection whose bytes are XSalsa20 under the shared key."""

        def __init__(self, conn: Any, psk_hex: str):
            self._psk = bytes.fromhex(psk_hex)
            self._conn = conn
            self._reader: Any = None
            self._writer: Any = None

        async def write(self, data: bytes) -> None:
            if self._writer is None:
                nonce = os.urandom(24)
                self._writer = xsalsa20(self._psk, nonce)
                await self._conn.write(nonce + self._writer.encrypt(data))
                return
            await self._conn.write(self._writer.encrypt(data))

        async def read(self, n: int | None = None) -> bytes:
            if self._reader is None:
                nonce = b""
                while len(nonce) < 24:  # TCP may deliver the nonce in pieces
                    chunk = await self._conn.read(24 - len(nonce))
                    if not chunk:
                        raise ConnectionError("the peer closed before sending its private-network nonce")
                    nonce += chunk
                self._reader = xsalsa20(self._psk, nonce)
            data = await self._conn.read(n)
            return self._reader.decrypt(data) if data else b""

        async def close(self) -> None:
            await self._conn.close()

        def get_remote_address(self) -> Any:
            return self._conn.get_remote_address()

        # both asked of every new connection: one missing here (the connection type) left the
        # swarm without the connection's addresses, and identify then logged a warning on the
        # root logger for every connection a node with a private network took
        def get_transport_addresses(self) -> Any:
            return self._conn.get_transport_addresses()

        def get_connection_type(self) -> Any:
            return self._conn.get_connection_type()

    def protected(conn: Any, psk: str) -> PskConnection:
        return PskConnection(conn, psk)

    protected._context_os = True  # type: ignore[attr-defined]
    # the swarm calls the name it imported: replace that one
    setattr(swarm, "new_protected_conn", protected)  # noqa: B010
