"""A pure-Python reference model of the store contract (XTDB 1.x semantics), for property tests.

Deliberately naive: every entity is a dict of ``(valid_time, tx_id) -> doc`` (``None`` for a
deletion) and every read is a scan, so the rules are easy to check against XTDB's indexer
(``xtdb.tx/put-delete-coords``) and its history bounds (``xtdb.query/with-history-bounds``).
Times and tx ids are given by the caller. This module must never import a backend.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from context_os.hashing import canonical_json
from context_os.store import Delete, Evict, Match, Op, Put

Doc = dict[str, Any]
# One version as the model reports it: (valid_time, tx_id, doc or None for a deletion).
Row = tuple[int, int, Doc | None]


@dataclass
class StoreModel:
    entities: dict[str, dict[tuple[int, int], Doc | None]] = field(default_factory=dict)
    txs: list[tuple[int, int, bool]] = field(default_factory=list)
    """(tx id, tx time, committed) in order."""

    # -- writes ----------------------------------------------------------------------------

    def submit(self, ops: Sequence[Op], tx_id: int, tx_time: int) -> bool:
        """Apply ``ops`` as one transaction; False (and no change) if a match fails."""
        staged = copy.deepcopy(self.entities)
        committed = True
        for op in ops:
            if isinstance(op, Put):
                self._write(staged, op.doc["id"], dict(op.doc), op.valid_from, op.valid_to, tx_id, tx_time)
            elif isinstance(op, Delete):
                self._write(staged, op.id, None, op.valid_from, op.valid_to, tx_id, tx_time)
            elif isinstance(op, Match):
                at = tx_time if op.valid_time is None else op.valid_time
                current = _in_force(staged.get(op.id, {}), at, tx_id)
                have = None if current is None else current[2]
                if not _exact(have, op.expected):
                    committed = False
                    break
            elif isinstance(op, Evict):
                staged.pop(op.id, None)
        if committed:
            self.entities = staged
        self.txs.append((tx_id, tx_time, committed))
        return committed

    @staticmethod
    def _write(
        staged: dict[str, dict[tuple[int, int], Doc | None]],
        id: str,
        doc: Doc | None,
        valid_from: int | None,
        valid_to: int | None,
        tx_id: int,
        tx_time: int,
    ) -> None:
        rows = staged.setdefault(id, {})
        start = tx_time if valid_from is None else valid_from
        if valid_to is not None:
            if start == valid_to:
                return
            # latest correction of each valid time <= valid_to, newest valid time first
            history = sorted(_latest(rows, lambda vt: vt <= valid_to), key=lambda r: -r[0])
            for vt in [start] + [r[0] for r in history if r[0] > start]:
                if vt != valid_to:
                    rows[(vt, tx_id)] = doc
            if history:
                # the version in force at valid_to resumes there, under its own tx id
                _old_vt, old_tx, old_doc = history[0]
                rows[(valid_to, old_tx)] = old_doc
            else:
                rows[(valid_to, tx_id)] = None
            return
        visible = _in_force(rows, start, tx_id)
        targets = [start]
        if visible is not None and visible[2] is not None:
            # copies of the visible version written by the same tx continue it: replace them too
            # (not for a deletion: XTDB's as-of and history reads disagree on its content hash)
            for vt, tx, d in sorted(_latest(rows, lambda vt: vt >= start)):
                if tx != visible[1] or not _same(d, visible[2]):
                    break
                targets.append(vt)
        for vt in targets:
            rows[(vt, tx_id)] = doc

    # -- reads -----------------------------------------------------------------------------

    def get(self, id: str, valid_time: int, tx_id: int) -> Row | None:
        row = _in_force(self.entities.get(id, {}), valid_time, tx_id)
        return None if row is None or row[2] is None else row

    def tx_time(self, tx_id: int) -> int:
        return next(t for i, t, _ in self.txs if i == tx_id)

    def history(
        self,
        id: str,
        order: Literal["asc", "desc"],
        now: int,
        start_valid_time: int | None = None,
        end_valid_time: int | None = None,
        start_tx_id: int | None = None,
        end_tx_id: int | None = None,
        with_corrections: bool = False,
    ) -> list[Row]:
        rows = self.entities.get(id, {})
        inf = float("inf")
        if order == "asc":
            lo_vt = -inf if start_valid_time is None else start_valid_time
            hi_vt = now + 1 if end_valid_time is None else min(end_valid_time, now + 1)
            lo_tx = -inf if start_tx_id is None else start_tx_id
            hi_tx = inf if end_tx_id is None else end_tx_id
            keep = [(vt, tx) for vt, tx in rows if lo_vt <= vt < hi_vt and lo_tx <= tx < hi_tx]
        else:
            hi_vt = now if start_valid_time is None else min(start_valid_time, now)
            lo_vt = -inf if end_valid_time is None else end_valid_time
            hi_tx = inf if start_tx_id is None else start_tx_id
            lo_tx = -inf if end_tx_id is None else end_tx_id
            keep = [(vt, tx) for vt, tx in rows if lo_vt < vt <= hi_vt and lo_tx < tx <= hi_tx]
        if with_corrections:  # every row, a valid time's in tx order, both in the history's direction
            return [(vt, tx, rows[(vt, tx)]) for vt, tx in sorted(keep, reverse=order == "desc")]
        best: dict[int, int] = {}
        for vt, tx in keep:
            best[vt] = max(tx, best.get(vt, tx))
        return [(vt, best[vt], rows[(vt, best[vt])]) for vt in sorted(best, reverse=order == "desc")]

    def find(
        self, kind: str | None, where: Mapping[str, Any] | None, valid_time: int, tx_id: int
    ) -> list[tuple[str, Row]]:
        out = []
        for id in sorted(self.entities):
            row = self.get(id, valid_time, tx_id)
            if row is None:
                continue
            doc = row[2]
            assert doc is not None
            if kind is not None and doc.get("kind") != kind:
                continue
            meta = doc.get("meta", {})
            if all(k in meta and _same(meta[k], v) for k, v in (where or {}).items()):
                out.append((id, row))
        return out


def _exact(a: Any, b: Any) -> bool:
    """Match compares documents type-strictly, as XTDB does (1.0 is not 1)."""
    if a is None or b is None:
        return a is None and b is None
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return canonical_json(a) == canonical_json(b)


def _in_force(rows: Mapping[tuple[int, int], Doc | None], valid_time: int, tx_id: int) -> Row | None:
    """Greatest valid time <= valid_time among rows with tx <= tx_id; ties to the greatest tx."""
    keys = [(vt, tx) for vt, tx in rows if vt <= valid_time and tx <= tx_id]
    if not keys:
        return None
    vt, tx = max(keys)
    return (vt, tx, rows[(vt, tx)])


def _latest(rows: Mapping[tuple[int, int], Doc | None], pred: Any) -> list[Row]:
    """The latest correction (greatest tx) of each valid time that satisfies ``pred``."""
    best: dict[int, int] = {}
    for vt, tx in rows:
        if pred(vt):
            best[vt] = max(tx, best.get(vt, tx))
    return [(vt, tx, rows[(vt, tx)]) for vt, tx in best.items()]
