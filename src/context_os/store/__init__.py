"""Store backends behind one contract (base.py) and one URL scheme.

``open_store(url)`` picks the backend from the URL; nothing outside this package branches on
the backend. URLs: ``sqlite:///abs/path.db`` (or a bare path), ``xtdb+http://host:port``.
Default: ``$CTXOS_STORE``, else an SQLite file in the user data dir (XDG).

An XTDB store comes wrapped in an outbox (store/outbox.py), so writes accepted while the node
is out of reach are kept and sent later. Its file defaults to
``<user data dir>/outbox/<host>_<port>.db``, one per node whichever way the URL spells it
(``node_key``: ``localhost`` is ``127.0.0.1``); ``?outbox=/path/to/file.db`` moves it and
``?outbox=off`` turns it off (``xtdb+http://127.0.0.1:3000?outbox=off``). A user and password
in an XTDB URL (``xtdb+http://user:pass@host:3000``) are sent as HTTP basic auth.

An SQLite URL takes ``?mode=ro`` (read-only: reads work, every write raises ``StoreError``),
``?mode=rw`` (the store must exist) or ``?mode=rwc`` (the default: created if missing). A bare
path is a path, ``?`` and all. Unknown options are a ``ConfigError``, for both backends.

``Store.url`` and every message here show a URL with its password masked (``mask_url``).
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from ..errors import ConfigError
from .base import Delete, DocMemo, Evict, Match, Op, Put, Store, TextHit, TextPart, Tx, Version, now_ms

__all__ = [
    "Delete",
    "DocMemo",
    "Evict",
    "Match",
    "Op",
    "Put",
    "Store",
    "TextHit",
    "TextPart",
    "Tx",
    "Version",
    "data_dir",
    "default_outbox_path",
    "default_store_url",
    "mask_url",
    "node_file",
    "node_key",
    "now_ms",
    "open_store",
    "sqlite_location",
]


def data_dir() -> Path:
    """The user data dir of context_os (``$XDG_DATA_HOME/context_os``, usually ``~/.local/share/context_os``)."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("context_os", appauthor=False))


def _env_url() -> str | None:
    """``$CTXOS_STORE``, None if unset; ``ConfigError`` if set but empty (``CTXOS_STORE=$(cmd)``
    whose command printed nothing): a mistake, not a wish for the default store, as ``--store ''``."""
    env = os.environ.get("CTXOS_STORE")
    if env is not None and not env.strip():
        raise ConfigError(
            "CTXOS_STORE is set but empty: set it to a store URL (sqlite:///abs/path.db, a path, or"
            " xtdb+http://host:port), or unset it for the default store"
        )
    return env


def default_store_url() -> str:
    """``$CTXOS_STORE`` if set (``ConfigError`` if empty), else the embedded store in the user data dir."""
    env = _env_url()
    if env:
        return env
    return "sqlite://" + str((data_dir() / "store.db").absolute())


def _nodes(url: str) -> tuple[str, list[tuple[str, int]], str]:
    """An XTDB URL's scheme, its nodes as (host, port) as written (lower case; the default port
    filled in), and its path, without options or user info."""
    raw = url.removeprefix("xtdb+").split("?", 1)[0]
    scheme, _, rest = raw.partition("://")
    netloc, _, path = rest.partition("/")
    nodes = []
    for host in netloc.rpartition("@")[2].split(","):
        parts = urlsplit(f"{scheme}://{host}")
        nodes.append((parts.hostname or "localhost", parts.port or (443 if scheme == "https" else 80)))
    return scheme, nodes, path


def _host_key(host: str) -> str:
    """One spelling per host: ``localhost`` is 127.0.0.1 (where xtdb/start listens, and what it
    resolves to first), an IP address is written in its short form; any other name stays as
    written, since two names may well be two machines."""
    host = host.rstrip(".")
    if host == "localhost":
        return "127.0.0.1"
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host


def _safe(part: str) -> str:
    """``part`` in a file name: letters, digits, ``.`` and ``-`` as they are, any other byte as
    ``%XX``, so that two different parts never give one name (``_`` joins them)."""
    return re.sub(r"[^A-Za-z0-9.-]", lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), part)


def node_key(url: str) -> str:
    """The name of what context_os keeps for the XTDB node (or cluster) of ``url``: its outbox,
    keyword index and vectors, ``<host>_<port>[_<host>_<port>...][_<path>]``. Every spelling of one
    node gives the same key: ``localhost`` and ``127.0.0.1``, a trailing slash, an explicit
    default port, user info, options, upper case in the host, the order of a cluster's nodes.
    Another host, port or path gives another key."""
    _, nodes, path = _nodes(url)
    keys = sorted({(_host_key(host), port) for host, port in nodes})
    parts = [f"{_safe(host)}_{port}" for host, port in keys]
    if path.strip("/"):
        parts.append(_safe(path.strip("/")))
    return "_".join(parts)


def _earlier_keys(url: str) -> list[str]:
    """The names releases before ``node_key`` gave ``url``'s node, in any of its loopback
    spellings (they kept ``localhost`` and ``127.0.0.1`` apart). None at all when such a name
    stood for several nodes (it replaced ``/``, ``:`` and ``_`` alike: ``/a/b`` and ``/a_b``), as
    its file may hold another node's writes."""
    _, nodes, path = _nodes(url)
    if not all(re.fullmatch(r"[A-Za-z0-9.-]*", part) for part in (*(h for h, _ in nodes), path.strip("/"))):
        return []
    loopback = {"localhost", "127.0.0.1"}
    spellings = [nodes]
    if any(host in loopback for host, _ in nodes):
        spellings += [[(h if h not in loopback else alias, p) for h, p in nodes] for alias in sorted(loopback)]
    keys = []
    for spelling in spellings:
        name = "_".join(p for p in (*(f"{h}_{port}" for h, port in spelling), path.strip("/")) if p)
        key = re.sub(r"[^A-Za-z0-9.-]+", "_", name)
        if key not in keys and key != node_key(url):
            keys.append(key)
    return keys


def node_file(folder: str, url: str) -> Path:
    """``<user data dir>/<folder>/<node_key>.db``: a file of what context_os keeps for the node of
    ``url`` (its keyword index, its vectors), or the one an earlier release named for this
    spelling of it when only that one exists (a cache must not be made again for a new name)."""
    path = data_dir() / folder / f"{node_key(url)}.db"
    if not path.exists():
        for key in _earlier_keys(url):
            if (earlier := path.with_name(f"{key}.db")).exists():
                return earlier
    return path


def default_outbox_path(url: str) -> Path:
    """``<user data dir>/outbox/<host>_<port>[_<path>].db`` for an XTDB URL (a URL naming
    several nodes: every ``<host>_<port>`` in turn): one file per node, whichever way the URL
    spells it (``node_key``)."""
    return data_dir() / "outbox" / f"{node_key(url)}.db"


def _earlier_outbox_paths(url: str) -> list[Path]:
    """The outbox files releases before ``node_key`` named for ``url``'s node (``localhost`` and
    ``127.0.0.1`` had a file each): an outbox takes in the writes waiting there."""
    return [default_outbox_path(url).with_name(f"{key}.db") for key in _earlier_keys(url)]


def mask_url(url: str) -> str:
    """``url`` with the password of its user info masked (``user:***@``; a user info without a
    password is masked whole, as it may be a token): for error messages and displays."""

    def mask(m: re.Match[str]) -> str:
        user, colon, _ = m.group(2).partition(":")
        return m.group(1) + (f"{user}:***@" if colon else "***@")

    return re.sub(r"\A([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)@", mask, url)


def _options(url: str, query: str, known: dict[str, tuple[str, ...] | None]) -> dict[str, str]:
    """The ``?key=value`` options of a store URL (the last of repeated ones); ``ConfigError`` for
    an option not in ``known`` or a value not in its allowed values (None: any value)."""
    params = parse_qs(query, keep_blank_values=True)
    unknown = set(params) - set(known)
    if unknown:
        raise ConfigError(
            f"unknown option(s) {sorted(unknown)} in store URL {mask_url(url)!r} (known: {', '.join(known)})"
        )
    options = {k: v[-1] for k, v in params.items()}
    for key, value in options.items():
        allowed = known[key]
        if allowed is not None and value not in allowed:
            raise ConfigError(f"store URL {mask_url(url)!r}: {key}={value!r} is not one of {', '.join(allowed)}")
    return options


def _open_xtdb(url: str) -> Store:
    from .outbox import OutboxStore
    from .xtdb import XtdbStore

    base, _, query = url.partition("?")
    outbox = _options(url, query, {"outbox": None}).get("outbox", "")
    store = XtdbStore(base)
    if outbox.lower() in ("off", "none", "false", "0"):
        return store
    if outbox:
        return OutboxStore(store, Path(outbox).expanduser().resolve())
    return OutboxStore(store, default_outbox_path(base), earlier=_earlier_outbox_paths(base))


def sqlite_location(url: str | None = None) -> tuple[Path, str] | None:
    """The SQLite file ``url`` names (default: ``default_store_url()``'s, ``CTXOS_STORE`` first)
    and its mode (``ro``, ``rw``, ``rwc``); None for an XTDB node. ``ConfigError`` for a URL no
    store is at."""
    if url is not None and not url.strip():  # `--store ''`: a mistake, not a wish for the default
        raise ConfigError("the store URL is empty: give sqlite:///abs/path.db, a path, or xtdb+http://host:port")
    url = url or _env_url()
    if url and (url.startswith("xtdb+http://") or url.startswith("xtdb+https://")):
        return None
    if not url:
        # the file itself, not its URL: a "?" in the user data dir's path would start a query
        return (data_dir() / "store.db").absolute(), "rwc"
    if url.startswith("sqlite://"):
        # the path is taken as written up to a "?" (no percent-decoding)
        path, _, query = url.removeprefix("sqlite://").partition("?")
        if not path.startswith("/"):
            raise ConfigError(f"sqlite store URL needs an absolute path (sqlite:///abs/path.db), got {mask_url(url)!r}")
        path = "/" + path.lstrip("/")  # sqlite:////abs/path.db, as SQLAlchemy writes it, is the same file
        return Path(path), _options(url, query, {"mode": ("ro", "rw", "rwc")}).get("mode", "rwc")
    if "://" in url:
        raise ConfigError(
            f"unknown store URL {mask_url(url)!r}: use sqlite:///path/to/store.db or xtdb+http://127.0.0.1:3000"
        )
    return Path(url).expanduser().resolve(), "rwc"


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    """Open the store at ``url`` (default: ``default_store_url()``).

    ``create=False``: the store must already exist, else ``NotFound`` (an SQLite file is then
    never created, nor its directory; an XTDB node is always there to be asked). Whether opening
    created the store says ``Store.created``.
    """
    location = sqlite_location(url)
    if location is None:
        return _open_xtdb(url or _env_url() or "")
    from .sqlite import SqliteStore

    path, mode = location
    return SqliteStore(path, create=create and mode == "rwc", read_only=mode == "ro")
