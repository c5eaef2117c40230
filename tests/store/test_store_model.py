"""The stores against the reference model (tests/store/store_model.py), driven by hypothesis: the
embedded store, and an XTDB node through two clients.

Random transactions of puts (with and without ranges), deletes, matches and evicts over a few
ids and a small valid-time range, so that retroactive writes, corrections and range restores
collide often. After each step the store and the model must agree on reads at any valid time
as of any earlier transaction, on history in both orders and bounds, and on find.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from context_os.errors import StoreError
from context_os.store import Delete, DocMemo, Evict, Match, Op, Put, Store, Tx, Version, now_ms
from context_os.store.base import check_after_evict
from context_os.store.sqlite import SqliteStore
from context_os.store.xtdb import XtdbStore
from tests.reliability._adversarial import FUZZ, examples
from tests.store.store_model import Row, StoreModel

IDS = ["a", "b", "c"]
KINDS = ["k", "j"]
vts = st.integers(min_value=0, max_value=20)
opt_vts = st.none() | vts
ids = st.sampled_from(IDS)


def make_doc(id: str, n: int) -> dict[str, Any]:
    return {"id": id, "kind": KINDS[n % 2], "meta": {"n": n, "tag": "t" if n < 2 else "u"}, "content": [n]}


docs = st.builds(make_doc, ids, st.integers(0, 3))
puts = st.builds(Put, docs, opt_vts, opt_vts)
deletes = st.builds(Delete, ids, opt_vts, opt_vts)
matches = st.builds(Match, ids, st.none() | docs, opt_vts)
evicts = st.builds(Evict, ids)
# puts twice: the richest op, so the most frequent
ops = st.lists(st.one_of(puts, puts, deletes, matches, evicts), min_size=0, max_size=4)


def as_row(v: Version) -> Row:
    return (v.valid_time, v.tx_id, None if v.deleted else v.doc)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="ctxos-model-")
        self.store = SqliteStore(Path(self.dir) / "store.db")
        # a second writer of the same file, as another process would be: what a store remembers
        # of its own writes must not outlive another's
        self.other = SqliteStore(Path(self.dir) / "store.db")
        self.model = StoreModel()
        self.tx_ids: list[int] = []
        # one memo of parsed documents for every find that draws it, across writes and evicts
        self.parsed: DocMemo = {}

    def teardown(self) -> None:
        self.store.close()
        self.other.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def now(self) -> int:
        return max(now_ms(), *(t for _, t, _ in self.model.txs)) if self.model.txs else now_ms()

    def query_vts(self) -> st.SearchStrategy[int]:
        return vts | st.sampled_from([t for _, t, _ in self.model.txs] or [0])

    @rule(tx=ops, other=st.booleans())
    def submit(self, tx: list[Op], other: bool) -> None:
        store = self.other if other else self.store
        try:
            check_after_evict(tx)
        except StoreError:  # refused by every store (a put or match after an evict): nothing written
            with pytest.raises(StoreError, match="evicts"):
                store.submit(tx)
            return
        got = store.submit(tx)
        if self.tx_ids:
            assert got.id > self.tx_ids[-1]
            assert got.time >= self.model.txs[-1][1]
        committed = self.model.submit(tx, got.id, got.time)
        assert got.committed == committed
        self.tx_ids.append(got.id)

    @precondition(lambda self: self.tx_ids)
    @rule(id=ids, data=st.data())
    def get_as_of(self, id: str, data: st.DataObject) -> None:
        vt = data.draw(self.query_vts(), label="valid_time")
        tx = data.draw(st.sampled_from(self.tx_ids), label="tx_id")
        got = self.store.get(id, vt, tx)
        want = self.model.get(id, vt, tx)
        assert (None if got is None else as_row(got)) == want
        if got is not None:
            assert got.tx_time == self.model.tx_time(got.tx_id)

    @precondition(lambda self: self.tx_ids)
    @rule(
        id=ids,
        order=st.sampled_from(["asc", "desc"]),
        start_vt=opt_vts,
        end_vt=opt_vts,
        with_docs=st.booleans(),
        with_corrections=st.booleans(),
        data=st.data(),
    )
    def history(
        self,
        id: str,
        order: Any,
        start_vt: int | None,
        end_vt: int | None,
        with_docs: bool,
        with_corrections: bool,
        data: st.DataObject,
    ) -> None:
        start_tx = data.draw(st.none() | st.sampled_from(self.tx_ids), label="start_tx_id")
        end_tx = data.draw(st.none() | st.sampled_from(self.tx_ids), label="end_tx_id")
        got = self.store.history(
            id,
            order,
            with_docs=with_docs,
            start_valid_time=start_vt,
            end_valid_time=end_vt,
            start_tx_id=start_tx,
            end_tx_id=end_tx,
            with_corrections=with_corrections,
        )
        want = self.model.history(id, order, self.now(), start_vt, end_vt, start_tx, end_tx, with_corrections)
        if with_docs:
            assert [as_row(v) for v in got] == want
        else:
            assert [(v.valid_time, v.tx_id, v.deleted) for v in got] == [(vt, tx, d is None) for vt, tx, d in want]
            assert all(v.doc is None for v in got)

    @precondition(lambda self: self.tx_ids)
    @rule(
        kind=st.none() | st.sampled_from(KINDS),
        tag=st.none() | st.sampled_from(["t", "u"]),
        memo=st.booleans(),
        data=st.data(),
    )
    def find(self, kind: str | None, tag: str | None, memo: bool, data: st.DataObject) -> None:
        vt = data.draw(self.query_vts(), label="valid_time")
        tx = data.draw(st.sampled_from(self.tx_ids), label="tx_id")
        where = None if tag is None else {"tag": tag}
        got = self.store.find(kind, where, valid_time=vt, tx_id=tx, docs=self.parsed if memo else None)
        assert [(v.id, as_row(v)) for v in got] == self.model.find(kind, where, vt, tx)

    @invariant()
    def full_history_agrees(self) -> None:
        for id in IDS:
            got = [as_row(v) for v in self.store.history(id)]
            assert got == self.model.history(id, "asc", self.now())


StoreMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreModel = StoreMachine.TestCase


class _Own(Store):
    """An XTDB store as one example's own: its ids written with a prefix, and read back without
    it; what other examples and tests wrote on the shared node is not seen."""

    def __init__(self, inner: XtdbStore, pre: str) -> None:
        self.inner, self.pre, self.url = inner, pre, inner.url

    def _doc(self, doc: Any) -> Any:
        return None if doc is None else {**doc, "id": self.pre + doc["id"]}

    def _back(self, v: Version) -> Version:
        doc = None if v.doc is None else {**v.doc, "id": v.doc["id"].removeprefix(self.pre)}
        return Version(v.id.removeprefix(self.pre), v.valid_time, v.tx_id, v.tx_time, doc, deleted=v.deleted)

    def _op(self, op: Op) -> Op:
        if isinstance(op, Put):
            return Put(self._doc(op.doc), op.valid_from, op.valid_to)
        if isinstance(op, Delete):
            return Delete(self.pre + op.id, op.valid_from, op.valid_to)
        if isinstance(op, Match):
            return Match(self.pre + op.id, self._doc(op.expected), op.valid_time)
        assert isinstance(op, Evict)
        return Evict(self.pre + op.id)

    def submit(self, ops: Sequence[Op]) -> Tx:
        return self.inner.submit([self._op(op) for op in ops])

    def get(self, id: str, valid_time: int | None = None, tx_id: int | None = None) -> Version | None:
        v = self.inner.get(self.pre + id, valid_time, tx_id)
        return None if v is None else self._back(v)

    def _history(self, id: str, order: Literal["asc", "desc"], **bounds: Any) -> list[Version]:
        return [self._back(v) for v in self.inner._history(self.pre + id, order, **bounds)]

    def find(self, *args: Any, **kwargs: Any) -> list[Version]:
        return [self._back(v) for v in self.inner.find(*args, **kwargs) if v.id.startswith(self.pre)]

    def latest_tx(self) -> Tx | None:
        return self.inner.latest_tx()

    def close(self) -> None:
        self.inner.close()


_examples = itertools.count()


def test_an_xtdb_node_agrees_with_the_model(xtdb_url: str, uid: str) -> None:
    """The same machine on a real node, through two clients (``other``: another process's)."""

    class XtdbMachine(StoreMachine):
        def __init__(self) -> None:
            super().__init__()
            self.store.close()
            self.other.close()
            pre = f"{uid}-{next(_examples)}-"
            sidecar = Path(self.dir) / "text.db"
            self.store = _Own(XtdbStore(xtdb_url, text_index_path=sidecar), pre)
            self.other = _Own(XtdbStore(xtdb_url, text_index_path=sidecar), pre)

        @rule(tx=ops, other=st.booleans())
        def submit(self, tx: list[Op], other: bool) -> None:
            super().submit(tx, other)
            if self.tx_ids:
                # a client reads another's writes once the node has indexed them (XTDB reads what
                # it has indexed): reading as of the other's transaction waits for it
                for store in (self.store, self.other):
                    store.get(IDS[0], tx_id=self.tx_ids[-1])

    run_state_machine_as_test(XtdbMachine, settings=settings(FUZZ, max_examples=examples(30), stateful_step_count=20))
