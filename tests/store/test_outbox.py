"""The outbox (store/outbox.py) in front of an embedded store that goes out of reach and comes
back: what it accepts while the store is away, and what it refuses. No node is needed: the store
is a real SQLite file, out of reach while ``Outage.down`` says so (every call raises
``StoreUnreachable``, nothing sent, as a refused connection does). The outbox against a real XTDB
node is tests/store/test_xtdb_outbox.py."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, Literal

import pytest

from context_os.errors import StoreCorrupt, StoreError, StoreUnavailable, StoreUnreachable
from context_os.store import Delete, Put, Store
from context_os.store.base import Op, Tx, Version
from context_os.store.outbox import OutboxStore
from context_os.store.sqlite import SqliteStore

T0 = 1_700_000_000_000


class Outage(Store):
    """An embedded store that is out of reach while ``down``."""

    def __init__(self, inner: SqliteStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.down = False

    def _reach(self) -> None:
        if self.down:
            raise StoreUnreachable(f"{self.url} cannot be reached (a test's outage): nothing was sent")

    def submit(self, ops: Sequence[Op]) -> Tx:
        self._reach()
        return self.inner.submit(ops)

    def get(self, id: str, valid_time: int | None = None, tx_id: int | None = None) -> Version | None:
        self._reach()
        return self.inner.get(id, valid_time, tx_id)

    def _history(self, id: str, order: Literal["asc", "desc"], **bounds: Any) -> list[Version]:
        self._reach()
        return self.inner._history(id, order, **bounds)

    def find(self, *args: Any, **kwargs: Any) -> list[Version]:
        self._reach()
        return self.inner.find(*args, **kwargs)

    def ids(self, **basis: Any) -> list[str]:
        self._reach()
        return self.inner.ids(**basis)

    def latest_tx(self) -> Tx | None:
        self._reach()
        return self.inner.latest_tx()

    def reader(self) -> Callable[[], Store] | None:
        return None

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def outage(tmp_path: Path) -> Iterator[tuple[Outage, OutboxStore]]:
    backend = Outage(SqliteStore(tmp_path / "store.db"))
    with OutboxStore(backend, tmp_path / "outbox.db") as box:
        yield backend, box


def note(id: str, n: int = 0) -> dict[str, Any]:
    return {"id": id, "kind": "note", "content": f"v{n}", "meta": {"n": n}}


@pytest.mark.parametrize(
    "op",
    [
        Put(note("a"), valid_from=10**16),
        Put(note("a"), T0, valid_to=-(10**15)),
        Delete("a", valid_from=-(10**16)),
        Delete("a", T0, valid_to=253_402_300_800_000),  # 10000-01-01
    ],
)
def test_a_time_no_store_takes_is_refused_while_the_store_is_away(outage: tuple[Outage, OutboxStore], op: Op) -> None:
    """Before 2026-12-02 the outbox accepted it (a pending Tx), the store refused it once back,
    and it held back every write after it for good."""
    backend, box = outage
    with pytest.raises(StoreError, match="outside the years 0001-9999") as up:
        box.submit([op])  # the store itself refuses it
    backend.down = True
    with pytest.raises(StoreError, match="outside the years 0001-9999") as away:
        box.submit([Put(note("b"), T0), op])
    assert not isinstance(away.value, StoreUnavailable) and str(away.value) == str(up.value)
    assert box.depth() == 0
    assert box.submit([Put(note("b"), T0)]).pending
    backend.down = False
    assert box.doc("b", T0) == note("b") and box.depth() == 0


@pytest.mark.parametrize("probe_s", [3600.0, 0.0])
def test_a_write_behind_one_the_store_refused_is_refused_while_the_store_is_away(
    outage: tuple[Outage, OutboxStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, probe_s: float
) -> None:
    """A write the store refused stays first in the outbox and holds back those after it. While
    the store was out of reach, a write was accepted behind it all the same (within the probe
    interval without trying the store, ``probe_s`` 3600; past it, after trying, 0), and waited
    there for good, the submit saying nothing (before 2026-12-02)."""
    monkeypatch.setattr(OutboxStore, "PROBE_INTERVAL_S", probe_s)
    backend, box = outage
    backend.down = True
    assert box.submit([Put(note("a"), T0)]).pending
    # a row the store cannot take (written by a buggy older version): document ids are strings
    with closing(sqlite3.connect(tmp_path / "outbox.db")) as conn, conn:
        conn.execute(
            "UPDATE pending SET ops = ?", (json.dumps([{"op": "put", "doc": {"id": 7}, "from": T0, "to": None}]),)
        )
    backend.down = False
    with pytest.raises(StoreError, match="refused write .* holds back the writes after it"):
        box.get("a", T0)
    backend.down = True
    with pytest.raises(StoreUnavailable):
        box.get("a", T0)  # tried: the store is away (the probe interval starts)
    with pytest.raises(
        StoreError, match="string .id., got 7.*holds back the writes after it; this write was not accepted"
    ) as refused:
        box.submit([Put(note("b"), T0)])
    assert not isinstance(refused.value, StoreUnavailable)
    assert box.depth() == 1 and box.outbox_stats()["blocked_by"] is not None


def test_ids_leave_out_the_outbox_markers_as_find_does(outage: tuple[Outage, OutboxStore], tmp_path: Path) -> None:
    """``Store.ids`` through the outbox: the documents ``find()`` lists, never the markers that
    record which accepted writes were sent, and without reading the documents (one that no
    longer parses is listed: ``ctxos verify`` names it and checks every other)."""
    backend, box = outage
    box.submit([Put(note("b"), T0)])
    backend.down = True
    assert box.submit([Put(note("a"), T0)]).pending
    backend.down = False
    assert box.ids() == [v.id for v in box.find()] == ["a", "b"]
    assert len(backend.inner.ids()) > 2  # the marker of the write sent late is in the store
    with closing(sqlite3.connect(tmp_path / "store.db")) as conn, conn:
        conn.execute("UPDATE docs SET json = substr(json, 1, 20) WHERE json LIKE '%\"v0\"%' AND json LIKE '%\"b\"%'")
        assert conn.total_changes == 1
    with pytest.raises(StoreCorrupt):
        box.find()
    assert box.ids() == ["a", "b"]
