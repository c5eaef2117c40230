"""Keyword and vector search against the reference model (tests/store/store_model.py), driven by
hypothesis.

Random transactions of puts (with and without valid-time ranges), deletes, matches and evicts of
searchable objects (files, memories, chat pages, tool calls) whose texts are drawn from a few
words, written by two writers of one store. Searched at any valid time as of any transaction,
for any words, kinds and session, the store must find exactly the parts of the versions in force
then that hold one of the words, each with its version's coordinates: through its index (texts
held back from it or not, from a store opened read-only, after a rebuild) on the embedded store,
and through the sidecar index on an XTDB node. Vector search (sources/vectors.py, the real
WordLlama embedder) must answer the nearest of those parts, whatever the words, with their scores.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from context_os.errors import StoreError
from context_os.objects import INDEXED_KINDS, index_parts
from context_os.sources.embed import WordLlamaEmbedder
from context_os.sources.vectors import VectorIndex, text_key
from context_os.store import Delete, Evict, Match, Op, Put, Store, TextHit
from context_os.store.base import check_after_evict
from context_os.store.sqlite import SqliteStore
from context_os.store.text_index import session_of, words
from context_os.store.xtdb import XtdbStore
from tests.reliability._adversarial import FUZZ, examples
from tests.store.store_model import StoreModel

WORDS = ("amber", "birch", "cobalt", "delta")
"""Each its own stem, so the index's stemming and the model's plain words agree."""
SESSIONS = ("s1", "s2")
# one object of each searchable shape, two of one kind (so a kind filter keeps several)
NAMES = ("file:a", "file:b", "memory:m", "chat:s1:0", "toolcall:s2:c1")
vts = st.integers(min_value=0, max_value=20)
opt_vts = st.none() | vts
texts = st.lists(st.sampled_from((*WORDS, "zinc")), max_size=4)
"""A text's words (``zinc``, in no query; no word: the empty text, in no index)."""


def make_doc(name: str, a: str, b: str, session: str | None) -> dict[str, Any]:
    """A document of ``name``'s kind holding ``a`` and ``b`` where that kind keeps its texts."""
    kind = name.split(":", 1)[0]
    # (a chat page's or tool call's session is the one its id names, as context_os writes them)
    meta: dict[str, Any] = {} if session is None or kind in ("chat", "toolcall") else {"session": session}
    if kind == "chat":  # two entries (one of them may be empty: no part)
        return {"id": name, "kind": kind, "meta": meta, "content": [{"i": 0, "text": a}, {"i": 1, "text": b}]}
    if kind == "toolcall":  # the arguments and the output make one part
        return {"id": name, "kind": kind, "meta": {**meta, "arguments": a}, "content": b}
    return {"id": name, "kind": kind, "meta": meta, "content": f"{a}\n{b}" if b else a}


def _coords(h: TextHit) -> tuple[Any, ...]:
    """A hit as ``SearchMachine.expected`` lists a part: its version's coordinates and text."""
    return (h.id, h.kind, h.part, h.valid_time, h.tx_id, h.session, h.text)


class SearchMachine(RuleBasedStateMachine):
    """Writes and searches one store; ``open_store`` and ``prefix`` are set per backend."""

    open_store: Callable[[Path, str], Store]
    """A store in the directory, by the name of its writer (``store`` or ``other``)."""
    tag: Callable[[], str] = staticmethod(lambda: "")
    """A mark of the example's own, on a node every example writes to: its ids begin with it and
    its words end with it (digits: the stemmer leaves them be), so it finds no other's objects."""
    embedded = False

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ctxos-search-model-"))
        self.store = self.open_store(self.dir, "store")
        # a second writer, as another process would be: what one store remembers of its own
        # writes (texts held back from the index, the sidecar's last tx) must not hide another's
        self.other = self.open_store(self.dir, "other")
        mark = self.tag()
        self.pre = f"{mark}-" if mark else ""
        self.word = {w: f"{w}{mark}" for w in (*WORDS, "zinc")}
        self.model = StoreModel()
        self.tx_ids: list[int] = []

    def teardown(self) -> None:
        self.store.close()
        self.other.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def id(self, name: str) -> str:
        kind, rest = name.split(":", 1)
        return f"{kind}:{self.pre}{rest}"

    def text(self, drawn: list[str]) -> str:
        return " ".join(self.word.get(w, w) for w in drawn)

    @rule(data=st.data(), other=st.booleans())
    def submit(self, data: st.DataObject, other: bool) -> None:
        tx: list[Op] = []
        for _ in range(data.draw(st.integers(1, 3), label="ops")):
            name = data.draw(st.sampled_from(NAMES), label="object")
            op = data.draw(st.sampled_from(["put", "put", "delete", "match", "evict"]), label="op")
            doc = make_doc(
                self.id(name),
                self.text(data.draw(texts, label="a")),
                self.text(data.draw(texts, label="b")),
                data.draw(st.none() | st.sampled_from([f"{self.pre}{s}" for s in SESSIONS]), label="meta.session"),
            )
            if op == "put":
                tx.append(Put(doc, data.draw(opt_vts, label="from"), data.draw(opt_vts, label="to")))
            elif op == "delete":
                tx.append(Delete(doc["id"], data.draw(opt_vts, label="from"), data.draw(opt_vts, label="to")))
            elif op == "match":
                tx.append(Match(doc["id"], data.draw(st.none() | st.just(doc), label="expected"), data.draw(opt_vts)))
            else:
                tx.append(Evict(doc["id"]))
        store = self.other if other else self.store
        try:
            check_after_evict(tx)
        except StoreError:  # a put or match after an evict: refused, nothing written
            return
        got = store.submit(tx)
        assert got.committed == self.model.submit(tx, got.id, got.time)
        self.tx_ids.append(got.id)

    def expected(self, found: set[str], kinds: tuple[str, ...], session: str | None, vt: int, tx: int) -> set[Any]:
        """Every part of a version in force at (vt, tx) that holds one of the words ``found``."""
        want = set()
        for id in self.model.entities:
            row = self.model.get(id, vt, tx)
            if row is None or row[2] is None:
                continue
            v_time, v_tx, doc = row
            if doc["kind"] not in kinds or (session is not None and session_of(doc) != session):
                continue
            for part, text in index_parts(doc):
                if found & set(words(text)):
                    want.add((id, doc["kind"], part, v_time, v_tx, session_of(doc), text))
        return want

    @precondition(lambda self: self.tx_ids)
    @rule(
        query=st.lists(st.sampled_from((*WORDS, "zinc", "nowhere")), min_size=1, max_size=3, unique=True),
        k=st.integers(1, 12),
        kinds=st.none() | st.lists(st.sampled_from(["file", "memory", "chat", "toolcall"]), min_size=1, unique=True),
        session=st.none() | st.sampled_from(SESSIONS),
        searcher=st.sampled_from(["store", "other", "read-only"]),
        data=st.data(),
    )
    def search(
        self,
        query: list[str],
        k: int,
        kinds: list[str] | None,
        session: str | None,
        searcher: str,
        data: st.DataObject,
    ) -> None:
        vt, tx = self.basis(data)
        sid = None if session is None else f"{self.pre}{session}"
        query = [self.word.get(w, w) for w in query]
        if searcher == "read-only" and self.embedded:
            with SqliteStore(self.dir / "store.db", read_only=True) as ro:
                got = ro.text_search(" ".join(query), k=k, kinds=kinds, session=sid, valid_time=vt, tx_id=tx)
        else:
            store = self.other if searcher == "other" else self.store
            got = store.text_search(" ".join(query), k=k, kinds=kinds, session=sid, valid_time=vt, tx_id=tx)
        want = self.expected(set(query), tuple(kinds or INDEXED_KINDS), sid, vt, tx)
        self.check(got, want, k)

    def basis(self, data: st.DataObject) -> tuple[int, int]:
        """A valid time and a transaction to search at, drawn as indexes: a node's tx ids and
        times differ from one run of an example to the next."""
        times = [t for _, t, _ in self.model.txs]
        vt = data.draw(vts | st.integers(0, len(times) - 1).map(times.__getitem__), label="valid_time")
        return vt, self.tx_ids[data.draw(st.integers(0, len(self.tx_ids) - 1), label="tx (index)")]

    @staticmethod
    def check(got: list[TextHit], want: set[Any], k: int) -> None:
        found = [_coords(h) for h in got]
        assert len(found) == len(set(found)), f"a part found twice: {found}"
        assert set(found) <= want, f"found what is not in force then: {set(found) - want}"
        assert len(found) == min(k, len(want)), f"missed: {want - set(found)}"
        scores = [h.score for h in got]
        assert scores == sorted(scores, reverse=True), "hits out of rank order"

    @rule(which=st.sampled_from(["store", "other"]))
    def rebuild(self, which: str) -> None:
        (self.other if which == "other" else self.store).rebuild_index()

    @invariant()
    def index_is_current(self) -> None:
        status = self.store.index_status()
        # (a sidecar is made by the first search or write that needs it)
        assert status["state"] in ("ok",) if self.embedded else ("ok", "missing"), status
        assert "problem" not in status, status


def _sqlite(dir: Path, _writer: str) -> Store:
    return SqliteStore(dir / "store.db")


class SqliteSearch(SearchMachine):
    open_store = staticmethod(_sqlite)
    embedded = True


def test_sqlite_keyword_search_finds_exactly_the_parts_in_force() -> None:
    run_state_machine_as_test(SqliteSearch, settings=settings(FUZZ, max_examples=examples(100), stateful_step_count=25))


_examples = itertools.count()


@pytest.mark.parametrize("sidecars", ["one sidecar", "a sidecar each"])
def test_xtdb_keyword_search_finds_exactly_the_parts_in_force(
    xtdb_url: str, xtdb_sidecar: Path, uid: str, sidecars: str, tmp_path: Path
) -> None:
    def on_node(_dir: Path, writer: str) -> Store:
        # one file: two processes of one user on one node; a file each: two users (or machines),
        # each sidecar catching up on what the other wrote. The files outlive the examples (each
        # example's words and ids are its own), as a user's do, the run's own among them: built
        # from scratch, a sidecar reads what is in force on the whole shared node (a fresh one
        # per example made the test run past its timeout in a whole run), and holds the texts
        # of versions in force then and of every version written since (SidecarIndex._catch_up)
        alone = sidecars == "a sidecar each" and writer == "other"
        return XtdbStore(xtdb_url, text_index_path=tmp_path / "other.db" if alone else xtdb_sidecar)

    class XtdbSearch(SearchMachine):
        open_store = staticmethod(on_node)
        tag = staticmethod(lambda: f"{uid}{next(_examples)}")

        @precondition(lambda self: False)  # from scratch: what was in force then (above)
        @rule()
        def rebuild(self) -> None:
            raise AssertionError

    run_state_machine_as_test(XtdbSearch, settings=settings(FUZZ, max_examples=examples(25), stateful_step_count=15))


class VectorSearch(SqliteSearch):
    """Vector search (sources/vectors.py) over the same histories: the index follows the keyword
    index's parts; a search answers the ``k`` parts nearest the query among the versions in force
    then, as keyword search filters them, each with its version's coordinates."""

    embedder: Any

    def __init__(self) -> None:
        super().__init__()
        self.vectors = VectorIndex(self.store, self.embedder, self.dir / "vectors.db")

    def teardown(self) -> None:
        self.vectors.close()
        super().teardown()

    @precondition(lambda self: self.tx_ids)
    @rule(
        query=st.lists(st.sampled_from((*WORDS, "zinc")), min_size=1, max_size=3),
        k=st.integers(1, 12),
        kinds=st.none() | st.lists(st.sampled_from(["file", "memory", "chat", "toolcall"]), min_size=1, unique=True),
        session=st.none() | st.sampled_from(SESSIONS),
        data=st.data(),
    )
    def vector_search(
        self, query: list[str], k: int, kinds: list[str] | None, session: str | None, data: st.DataObject
    ) -> None:
        vt, tx = self.basis(data)
        self.vectors.catch_up()
        q = self.vectors.embed_query(" ".join(query))
        got = self.vectors.search_vector(q, k=k, kinds=kinds, session=session, valid_time=vt, tx_id=tx)
        # every part of a version in force then (of the kinds and session), with its score
        parts = self.expected({*WORDS, "zinc"}, tuple(kinds or INDEXED_KINDS), session, vt, tx)
        vectors = {hit: self.vectors.vector_of(text_key(hit[-1])) for hit in parts}
        assert all(vec is not None for vec in vectors.values()), "a part in force without a vector"
        want = {hit: float(np.dot(q, vec)) for hit, vec in vectors.items() if vec is not None}
        self.check(got, set(want), k)
        chosen = [_coords(h) for h in got]
        for c, h in zip(chosen, got, strict=True):
            assert abs(want[c] - h.score) < 1e-5, (c, want[c], h.score)
        if got:  # the nearest: nothing left out scores above the last taken
            assert all(s <= got[-1].score + 1e-5 for hit, s in want.items() if hit not in chosen)


def test_vector_search_finds_the_nearest_parts_in_force() -> None:
    VectorSearch.embedder = WordLlamaEmbedder()
    run_state_machine_as_test(VectorSearch, settings=settings(FUZZ, max_examples=examples(60), stateful_step_count=20))
