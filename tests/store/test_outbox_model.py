"""The outbox (store/outbox.py) against the reference model (tests/store/store_model.py), driven
by hypothesis: random transactions through an outbox in front of an embedded store that goes out
of reach and comes back (tests/store/test_outbox.py's ``Outage``: every call refused, nothing
sent), between reads. Whatever was accepted while it was away lands once, in the order it was
accepted, at the valid times it had then: every read once it is back (as of any transaction the
outbox returned, provisional ids too, at any valid time) agrees with the model that applied each
accepted transaction at once. A match is refused while the store is away and changes nothing.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from context_os.errors import StoreError, StoreUnavailable
from context_os.store import Delete, Evict, Match, Op, Put
from context_os.store.base import Version, check_after_evict
from context_os.store.outbox import OutboxStore
from context_os.store.sqlite import SqliteStore
from tests.reliability._adversarial import FUZZ, examples
from tests.store.store_model import StoreModel
from tests.store.test_outbox import Outage

IDS = ["a", "b"]
vts = st.integers(min_value=0, max_value=20)
opt_vts = st.none() | vts


def make_doc(id: str, n: int) -> dict[str, Any]:
    return {"id": id, "kind": "note", "meta": {"n": n}, "content": f"v{n}"}


docs = st.builds(make_doc, st.sampled_from(IDS), st.integers(0, 3))
ops = st.lists(
    st.one_of(
        st.builds(Put, docs, opt_vts, opt_vts),
        st.builds(Put, docs, opt_vts, opt_vts),
        st.builds(Delete, st.sampled_from(IDS), opt_vts, opt_vts),
        st.builds(Match, st.sampled_from(IDS), st.none() | docs, opt_vts),
        st.builds(Evict, st.sampled_from(IDS)),
    ),
    min_size=1,
    max_size=3,
)


def _row(v: Version | None) -> tuple[int, Any] | None:
    return None if v is None else (v.valid_time, None if v.deleted else v.doc)


class OutboxMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ctxos-outbox-model-"))
        self.backend = Outage(SqliteStore(self.dir / "store.db"))
        self.box = OutboxStore(self.backend, self.dir / "outbox.db")
        # another process of the machine: its own connections to the same store and outbox file,
        # the same outage; what one accepted, the other's reads send and resolve
        self.other_backend = Outage(SqliteStore(self.dir / "store.db"))
        self.other = OutboxStore(self.other_backend, self.dir / "outbox.db")
        self.model = StoreModel()
        self.returned: list[tuple[int, int]] = []
        """(the tx id the outbox returned, provisional or not; the model's tx id) of each write."""

    def teardown(self) -> None:
        self.backend.down = self.other_backend.down = False
        self.box.close()
        self.other.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(tx=ops, other=st.booleans())
    def submit(self, tx: list[Op], other: bool) -> None:
        box = self.other if other else self.box
        try:
            check_after_evict(tx)
        except StoreError:
            return  # refused by every store, outbox or not (tests/store/test_store_model.py)
        matches = any(isinstance(op, Match) for op in tx)
        if matches and self.backend.down:
            depth = box.depth()
            try:
                box.submit(tx)
            except StoreUnavailable:
                assert box.depth() == depth  # nothing queued
                return
            raise AssertionError("a match was taken while the store was out of reach")
        try:
            got = box.submit(tx)
        except StoreUnavailable:
            # a match behind writes still waiting, the store back but not probed yet: refused too
            assert matches and box.depth() > 0
            return
        assert got.pending == self.backend.down
        model_id = len(self.model.txs)
        assert got.committed == self.model.submit(tx, model_id, got.time)
        self.returned.append((got.id, model_id))

    @rule()
    def go_down(self) -> None:
        self.backend.down = self.other_backend.down = True

    @rule()
    def come_back(self) -> None:
        self.backend.down = self.other_backend.down = False

    @precondition(lambda self: self.returned)
    @rule(id=st.sampled_from(IDS), other=st.booleans(), data=st.data())
    def get_as_of(self, id: str, other: bool, data: st.DataObject) -> None:
        box = self.other if other else self.box
        times = [t for _, t, _ in self.model.txs]
        vt = data.draw(vts | st.integers(0, len(times) - 1).map(times.__getitem__), label="valid_time")
        tx_id, model_id = self.returned[data.draw(st.integers(0, len(self.returned) - 1), label="tx (index)")]
        if self.backend.down:
            try:
                box.get(id, vt, tx_id)
            except StoreUnavailable:
                return  # what waits cannot be sent, nor the store read
            raise AssertionError("a read answered while the store was out of reach")
        want = self.model.get(id, vt, model_id)
        assert _row(box.get(id, vt, tx_id)) == (None if want is None else (want[0], want[2]))
        assert box.depth() == 0  # a read sends what waits first, whichever process accepted it

    @invariant()
    def history_agrees_once_the_store_answers(self) -> None:
        if self.backend.down:
            return
        now = max([t for _, t, _ in self.model.txs], default=0) + 1
        for id in IDS:
            want = [(vt, d) for vt, _, d in self.model.history(id, "asc", now)]
            for box in (self.box, self.other):
                assert [(v.valid_time, None if v.deleted else v.doc) for v in box.history(id)] == want


def test_the_outbox_lands_every_accepted_write_once_in_order() -> None:
    steps = settings(FUZZ, max_examples=examples(100), stateful_step_count=25)
    run_state_machine_as_test(OutboxMachine, settings=steps)
