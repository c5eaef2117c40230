"""Store backends behind one contract (base.py) and one URL scheme.

``open_store(url)`` picks the backend from the URL; nothing outside this package branches on
the backend. URLs: ``sqlite:///abs/path.db`` (or a bare path), ``xtdb+http://host:port``.
Default: ``$CTXOS_STORE``, else an SQLite file in the user data dir (XDG).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError
from .base import Delete, Evict, Match, Op, Put, Store, Tx, Version, now_ms

__all__ = [
    "Delete",
    "Evict",
    "Match",
    "Op",
    "Put",
    "Store",
    "Tx",
    "Version",
    "default_store_url",
    "now_ms",
    "open_store",
]


def default_store_url() -> str:
    """``$CTXOS_STORE`` if set, else the embedded store in the user data dir."""
    env = os.environ.get("CTXOS_STORE")
    if env:
        return env
    from platformdirs import user_data_dir

    return "sqlite:///" + str(Path(user_data_dir("context_os", appauthor=False)) / "store.db")


def open_store(url: str | None = None) -> Store:
    """Open the store at ``url`` (default: ``default_store_url()``)."""
    url = url or default_store_url()
    if url.startswith("xtdb+http://") or url.startswith("xtdb+https://"):
        from .xtdb import XtdbStore

        return XtdbStore(url)
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")
        if not path.startswith("/"):
            raise ConfigError(f"sqlite store URL needs an absolute path (sqlite:///abs/path.db), got {url!r}")
        from .sqlite import SqliteStore

        return SqliteStore(Path(path))
    if "://" in url:
        raise ConfigError(f"unknown store URL {url!r}: use sqlite:///path/to/store.db or xtdb+http://127.0.0.1:3000")
    from .sqlite import SqliteStore

    return SqliteStore(Path(url).expanduser().resolve())
