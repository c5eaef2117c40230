"""Store backends behind one contract (base.py) and one URL scheme.

``open_store(url)`` picks the backend from the URL; nothing outside this package branches on
the backend. URLs: ``sqlite:///abs/path.db`` (or a bare path), ``xtdb+http://host:port``.
Default: ``$CTXOS_STORE``, else an SQLite file in the user data dir (XDG).

An XTDB store comes wrapped in an outbox (store/outbox.py), so writes accepted while the node
is out of reach are kept and sent later. Its file defaults to
``<user data dir>/outbox/<host>_<port>.db``; ``?outbox=/path/to/file.db`` moves it and
``?outbox=off`` turns it off (``xtdb+http://127.0.0.1:3000?outbox=off``). A user and password
in an XTDB URL (``xtdb+http://user:pass@host:3000``) are sent as HTTP basic auth.

An SQLite URL takes ``?mode=ro`` (read-only: reads work, every write raises ``StoreError``),
``?mode=rw`` (the store must exist) or ``?mode=rwc`` (the default: created if missing). A bare
path is a path, ``?`` and all. Unknown options are a ``ConfigError``, for both backends.

``Store.url`` and every message here show a URL with its password masked (``mask_url``).
"""

from __future__ import annotations

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
    "now_ms",
    "open_store",
]


def data_dir() -> Path:
    """The user data dir of context_os (``$XDG_DATA_HOME/context_os``, usually ``~/.local/share/context_os``)."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("context_os", appauthor=False))


def default_store_url() -> str:
    """``$CTXOS_STORE`` if set, else the embedded store in the user data dir."""
    env = os.environ.get("CTXOS_STORE")
    if env:
        return env
    return "sqlite://" + str((data_dir() / "store.db").absolute())


def default_outbox_path(url: str) -> Path:
    """``<user data dir>/outbox/<host>_<port>[_<path>].db`` for an XTDB URL (a URL naming
    several nodes: every ``<host>_<port>`` in turn)."""
    raw = url.removeprefix("xtdb+")
    scheme, _, rest = raw.partition("://")
    netloc, _, path = rest.partition("/")
    nodes = []
    for host in netloc.rpartition("@")[2].split(","):
        parts = urlsplit(f"{scheme}://{host}")
        nodes.append(f"{parts.hostname or 'localhost'}_{parts.port or (443 if scheme == 'https' else 80)}")
    name = "_".join(p for p in (*nodes, path.split("?", 1)[0].strip("/")) if p)
    return data_dir() / "outbox" / (re.sub(r"[^A-Za-z0-9.-]+", "_", name) + ".db")


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
    return OutboxStore(store, Path(outbox).expanduser().resolve() if outbox else default_outbox_path(base))


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    """Open the store at ``url`` (default: ``default_store_url()``).

    ``create=False``: the store must already exist, else ``NotFound`` (an SQLite file is then
    never created, nor its directory; an XTDB node is always there to be asked). Whether opening
    created the store says ``Store.created``.
    """
    url = url or default_store_url()
    if url.startswith("xtdb+http://") or url.startswith("xtdb+https://"):
        return _open_xtdb(url)
    from .sqlite import SqliteStore

    if url.startswith("sqlite://"):
        # the path is taken as written up to a "?" (no percent-decoding)
        path, _, query = url.removeprefix("sqlite://").partition("?")
        if not path.startswith("/"):
            raise ConfigError(f"sqlite store URL needs an absolute path (sqlite:///abs/path.db), got {mask_url(url)!r}")
        path = "/" + path.lstrip("/")  # sqlite:////abs/path.db, as SQLAlchemy writes it, is the same file
        mode = _options(url, query, {"mode": ("ro", "rw", "rwc")}).get("mode", "rwc")
        return SqliteStore(Path(path), create=create and mode == "rwc", read_only=mode == "ro")
    if "://" in url:
        raise ConfigError(
            f"unknown store URL {mask_url(url)!r}: use sqlite:///path/to/store.db or xtdb+http://127.0.0.1:3000"
        )
    return SqliteStore(Path(url).expanduser().resolve(), create=create)
