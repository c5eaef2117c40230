"""What only the SQLite store has: its file, its schema migrations, several processes, its errors.

The shared behaviour is in tests/store/test_store_contract.py; this file covers the embedded store's own
promises: migrations are recorded and refuse newer files, two processes writing one file lose
nothing, bad paths and bad input fail with clear typed errors, eviction leaves no copy behind.
"""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from context_os.errors import ConfigError, NotFound, SchemaError, StoreCorrupt, StoreError, StoreUnavailable
from context_os.store import Delete, Evict, Match, Put, Tx, open_store
from context_os.store import sqlite as sqlite_store
from context_os.store.sqlite import MIGRATIONS, SqliteStore
from tests.helpers import wait_for

T0 = 1_700_000_000_000


def doc(id: str, n: int = 0, **meta: Any) -> dict[str, Any]:
    return {"id": id, "kind": "note", "content": f"v{n}", "meta": {"n": n, **meta}}


def applied(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as conn, conn:
        return [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY rowid")]


# -- file and schema ---------------------------------------------------------------------------


def test_creates_parent_dirs_wal_file_and_url(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "store.db"
    s = SqliteStore(path)
    with s:
        assert s.url == f"sqlite://{path}"
        assert s.url.startswith("sqlite:///") and s.path.is_absolute()
        s.put(doc("a"))
    assert path.is_file()
    with closing(sqlite3.connect(path)) as conn, conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def page_size(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn, conn:
        size: int = conn.execute("PRAGMA page_size").fetchone()[0]
    return size


def test_a_new_file_has_2k_pages_and_an_older_file_keeps_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's one transaction touches a leaf in many B-trees, and a WAL commit writes each whole:
    new files use 2 kB pages. A file made with SQLite's default 4 kB (before 2026-11-28) keeps
    them and works."""
    with SqliteStore(tmp_path / "new.db") as s:
        s.submit([Put(doc("a"))])
    assert page_size(tmp_path / "new.db") == 2048
    old = tmp_path / "old.db"
    with monkeypatch.context() as m:
        m.setattr(sqlite_store, "_PAGE_SIZE", 4096)
        with SqliteStore(old) as s:
            s.submit([Put(doc("a", 1))])
    with SqliteStore(old) as s:
        s.submit([Put(doc("a", 2))])
        v = s.get("a")
        assert v is not None and v.doc is not None and v.doc["content"] == "v2"
    assert page_size(old) == 4096


def test_a_documents_own_json_is_written_as_given_and_checked_in_tests(tmp_path: Path) -> None:
    """``Put.json`` (a session's encoding of its document) is what the store writes; the test run
    compares it with the store's own encoding (conftest), so a wrong one is caught here."""
    d = doc("a", 1)
    good = json.dumps(d, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    with SqliteStore(tmp_path / "s.db") as s:
        s.submit([Put(d, json=good)])
        v = s.get("a")
        assert v is not None and v.doc == d
        with pytest.raises(StoreError, match="Put.json is not the document's JSON"):
            s.submit([Put(doc("b"), json=good)])
        assert s.get("b") is None


def test_open_store_url_gives_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteStore(path) as s:
        s.put(doc("a", 1), T0)
    with open_store(f"sqlite://{path}") as s2:
        assert isinstance(s2, SqliteStore)
        assert s2.doc("a", T0) == doc("a", 1)


def test_migrations_recorded_and_idempotent_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteStore(path) as s:
        tx = s.put(doc("a", 1), T0)
    names = [name for name, _ in MIGRATIONS]
    assert applied(path) == names
    for _ in range(2):
        with SqliteStore(path) as s:
            assert s.doc("a", T0) == doc("a", 1)
            assert s.latest_tx() == tx
    assert applied(path) == names


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    SqliteStore(path).close()
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("INSERT INTO migrations (name, applied_at) VALUES ('m999_from_the_future', 0)")
    with pytest.raises(SchemaError, match="m999_from_the_future") as e:
        SqliteStore(path)
    assert str(path) in str(e.value)


def test_upgrades_names_what_a_writing_open_would_apply_and_writes_nothing(tmp_path: Path) -> None:
    """What a command that only reads asks first, so as not to upgrade an older release's store
    (which that release refuses from then on)."""
    path = tmp_path / "store.db"
    with SqliteStore(path) as s:
        s.put(doc("a", 1), T0)
        assert SqliteStore.upgrades(path) == []  # (its -wal read too, while a process has it open)
    assert SqliteStore.upgrades(path) == []
    with closing(sqlite3.connect(path)) as conn, conn:  # as the release before m004 and m005 left it
        conn.execute("DELETE FROM migrations WHERE name IN ('m004_fts_seq', 'm005_fts_high_water')")
    before = path.read_bytes()
    assert SqliteStore.upgrades(path) == ["m004_fts_seq", "m005_fts_high_water"]
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["store.db"]
    with pytest.raises(StoreError, match=r"\(m004_fts_seq, m005_fts_high_water\): open it once without \?mode=ro"):
        SqliteStore(path, read_only=True)
    with SqliteStore(path) as s:  # a writing open applies them
        assert s.doc("a", T0) == doc("a", 1)
    assert SqliteStore.upgrades(path) == []
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("INSERT INTO migrations (name, applied_at) VALUES ('m999_from_the_future', 0)")
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE t (x)")
    # a newer store, another application's, none: opening it says why
    assert SqliteStore.upgrades(path) == SqliteStore.upgrades(other) == SqliteStore.upgrades(tmp_path / "none.db") == []
    assert not (tmp_path / "none.db").exists()


def test_stats(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "store.db") as s:
        s.submit([Put(doc("a", 1), T0), Put(doc("b", 1), T0)])
        s.put(doc("a", 2), T0 + 1)
        stats = s.stats()
    assert stats["path"] == str(tmp_path / "store.db")
    assert stats["size_bytes"] > 0
    assert (stats["entities"], stats["versions"], stats["txs"]) == (2, 3, 2)


def test_identical_documents_are_stored_once(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "store.db") as s:
        for vt in range(5):
            s.put(doc("a", 1), T0 + vt)
        assert (s.stats()["versions"], s.stats()["distinct_docs"]) == (5, 1)


def test_a_new_entitys_documents_are_keyed_after_every_older_ones(tmp_path: Path) -> None:
    # the dedup key leads with the entity (created in order), so a turn's new documents append
    # to the index instead of landing on random leaves; still one row per identical document
    with SqliteStore(tmp_path / "store.db") as s:
        for i in range(40):  # "a" first: the entity created first
            s.submit([Put(doc("a", i), T0 + i), Put(doc(f"e{i}", 1), T0)])
        s.put(doc("a", 3), T0 + 100)  # the same document as an earlier version of "a"
        assert s.stats()["distinct_docs"] == 80
    with closing(sqlite3.connect(tmp_path / "store.db")) as conn, conn:
        rows = conn.execute("SELECT hash, json_extract(json, '$.id') FROM docs ORDER BY hash").fetchall()
    conn.close()
    ids = [i for _, i in rows]
    assert ids == ["a"] * 40 + [f"e{i}" for i in range(40)]
    assert all(len(key) == 40 for key, _ in rows)


def entity_rows(path: Path) -> list[tuple[int, str]]:
    with closing(sqlite3.connect(path)) as conn, conn:
        rows = conn.execute("SELECT eid, id FROM entities ORDER BY eid").fetchall()
    conn.close()
    return rows


def test_an_entity_another_process_evicted_is_not_written_under_its_old_eid(tmp_path: Path) -> None:
    # A store remembers the eids its own transactions used; another process's evict deletes
    # an entity, and SQLite hands its eid (the highest) to the next entity created.
    path = tmp_path / "store.db"
    with SqliteStore(path) as a, SqliteStore(path) as b:
        a.put(doc("x", 1), T0)
        b.submit([Evict("x")])
        b.put(doc("y", 1), T0)  # takes the eid x had
        a.put(doc("x", 2), T0 + 1)
        assert a.doc("x", T0 + 1) == doc("x", 2)
        assert a.history("x") == b.history("x") and len(b.history("x")) == 1
        assert b.doc("y", T0) == doc("y", 1) and len(b.history("y")) == 1
        assert [i for _, i in entity_rows(path)] == ["y", "x"]


def test_an_entity_evicted_in_a_transaction_the_match_undid_keeps_its_eid(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteStore(path) as s:
        s.put(doc("x", 1), T0)
        before = entity_rows(path)
        tx = s.submit([Evict("x"), Put(doc("z", 1), T0), Match("nothing", {"id": "nothing"})])
        assert not tx.committed
        assert entity_rows(path) == before
        s.submit([Put(doc("x", 2), T0 + 1), Put(doc("z", 2), T0)])
        assert [len(s.history(i)) for i in ("x", "z")] == [2, 1]
        assert [i for _, i in entity_rows(path)] == ["x", "z"]


@pytest.mark.parametrize("writers", ["one", "two"])
def test_a_put_replaces_the_copies_a_range_put_left_after_it_whoever_wrote_them(tmp_path: Path, writers: str) -> None:
    # A store skips reading an entity's rows before a put at or after the newest valid time it
    # knows them to have; a range put writes copies at later boundaries, and another process
    # may have written them.
    path = tmp_path / "store.db"
    with SqliteStore(path) as a, SqliteStore(path) as b:
        other = a if writers == "one" else b
        a.put(doc("x", 0), T0)
        other.put(doc("x", 1), T0 + 200)
        other.put(doc("x", 2), T0 + 100, T0 + 300)  # rows at 100 and 200 (its copy), 300 resumes 1
        a.put(doc("x", 3), T0 + 150)  # replaces the copy at 200 too: holds until 300
        assert [a.doc("x", T0 + t) for t in (50, 120, 250, 350)] == [doc("x", n) for n in (0, 2, 3, 1)]


def test_docs_no_row_references_are_not_kept(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "store.db") as s:
        # the second put replaces the first one's row (same id, valid time and tx)
        s.submit([Put(doc("a", 1), T0), Put(doc("a", 2), T0), Delete("b", T0), Put(doc("b", 3), T0)])
        s.submit([Put(doc("a", 4), T0 + 5), Delete("a", T0 + 5)])
        s.submit([Put(doc("c", 5), T0, T0), Delete("d", T0, T0)])  # empty ranges write nothing
        assert (s.stats()["distinct_docs"], s.stats()["entities"]) == (2, 2)
        assert s.doc("a", T0) == doc("a", 2)
        assert s.doc("b", T0) == doc("b", 3)


# -- errors ------------------------------------------------------------------------------------


def test_path_under_a_file_is_a_clear_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(StoreUnavailable, match="cannot create the directory") as e:
        SqliteStore(blocker / "store.db")
    assert str(blocker / "store.db") in str(e.value)


def test_path_that_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        SqliteStore(tmp_path)


def test_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    path.write_bytes(b"this is not sqlite at all, just some bytes" * 100)
    with pytest.raises(StoreError, match="not an SQLite database"):
        SqliteStore(path)


def test_closed_store(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "store.db")
    s.close()
    s.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        s.get("a")


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"kind": "note"}, "needs a string 'id'"),
        ({"id": 7, "kind": "note"}, "needs a string 'id'"),
        ({"id": "x", "meta": {"v": float("nan")}}, "not JSON"),
        ({"id": "x", "meta": {"v": {1, 2}}}, "not JSON"),
    ],
)
def test_bad_document_is_refused_and_nothing_is_written(tmp_path: Path, bad: Any, message: str) -> None:
    with SqliteStore(tmp_path / "store.db") as s:
        with pytest.raises(StoreError, match=message):
            s.submit([Put(doc("ok"), T0), Put(bad, T0)])
        assert s.get("ok") is None
        assert s.latest_tx() is None
        assert s.put(doc("ok"), T0).committed  # and the write lock was not left held


def test_bad_valid_time_is_refused(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "store.db") as s, pytest.raises(StoreError, match="epoch milliseconds"):
        s.submit([Put(doc("a"), 1.5)])  # type: ignore[arg-type]


# -- the attribute index ------------------------------------------------------------------------


def indexed_keys(path: Path) -> set[str]:
    with closing(sqlite3.connect(path)) as conn, conn:
        return {r[0] for r in conn.execute("SELECT name FROM indexed_keys")}


def attr_rows(path: Path, name: str) -> int:
    with closing(sqlite3.connect(path)) as conn, conn:
        return int(conn.execute("SELECT COUNT(*) FROM attrs WHERE name = ?", (name,)).fetchone()[0])


# every scalar JSON type, an integral float (found by its int), an integer past 64 bits, and
# values that are never indexed (a list, a mapping)
VALUES: list[Any] = ["x", "", 7, -3, 1.5, 2.0, 2**70, True, False, None, [1, 2], {"a": 1}]


def test_a_meta_key_is_indexed_when_first_searched_for_every_version_ever_stored(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteStore(path) as s:
        for i, value in enumerate(VALUES):
            s.put({"id": f"d{i}", "kind": "note", "meta": {"v": value, "other": i}}, T0)
            s.put({"id": f"d{i}", "kind": "note", "meta": {"v": "later", "other": i}}, T0 + 10)
        assert indexed_keys(path) == set() and attr_rows(path, "meta:v") == 0  # writes index no meta key
        for i, value in enumerate(VALUES):
            assert [v.id for v in s.find("note", {"v": value}, valid_time=T0)] == [f"d{i}"], value
            assert s.find("note", {"v": value}, valid_time=T0 + 10) == []
        assert indexed_keys(path) == {"meta:v"}
        # 10 scalar values (2.0 and 2**70 included) as of T0, plus "later" for all 12 entities
        assert attr_rows(path, "meta:v") == 10 + 12
        assert [v.id for v in s.find("note", {"v": "later"})] == sorted(f"d{i}" for i in range(len(VALUES)))
        # from now on every put indexes it
        s.put({"id": "new", "kind": "note", "meta": {"v": 2**70}}, T0 + 20)
        assert attr_rows(path, "meta:v") == 10 + 12 + 1
        assert [v.id for v in s.find("note", {"v": 2**70})] == ["new"]
        assert "meta:other" not in indexed_keys(path)


def test_find_through_a_memo_reads_only_the_texts_it_lacks_in_batches(tmp_path: Path) -> None:
    # a reader through a memo (re-rendering every frame of a session) gets the same answer, the
    # memo's own document objects for what it read before, and the rest parsed, past the 500 a
    # batch of texts asks for at once
    with SqliteStore(tmp_path / "store.db") as s:
        s.submit([Put(doc(f"d{i:04}", i, tag="t"), T0) for i in range(1_203)])
        memo: dict[Any, dict[str, Any]] = {}
        first = s.find("note", {"tag": "t"}, docs=memo)
        assert first == s.find("note", {"tag": "t"}) and len(first) == len(memo) == 1_203
        s.put(doc("d0007", 70_000, tag="t"), T0 + 10)
        again = s.find("note", {"tag": "t"}, docs=memo)
        assert again == s.find("note", {"tag": "t"}) and len(memo) == 1_204
        assert again[8].doc is first[8].doc and again[7].doc is not first[7].doc
        assert again[7].doc is not None and again[7].doc["content"] == "v70000"


def test_find_by_a_rare_value_does_not_count_the_whole_kind(tmp_path: Path) -> None:
    # A file tracker asks, for each file it indexes, which file objects had its inode (twice:
    # present and missing ones). Each find counted the kind's index entries up to the cap of
    # 1,000 to order its criteria, which cost more than the lookup: 10,000 files took 1.8 times
    # as long to index. A value already rare drives the lookup without the kind counted; a
    # common one still has the kind counted, and the answers are the same either way. Each
    # criterion is counted to 64 first: with a rare one among them, none is counted to 1,000
    # (as a file tracker's six finds a file each were).
    with SqliteStore(tmp_path / "store.db") as s:
        s.submit([Put(doc(f"d{i:04}", i, inode=f"1:{i}", tag="t" if i % 2 else "u"), T0) for i in range(1_500)])
        s.find("note", {"inode": "1:7", "tag": "t"})  # (both keys indexed from here on)
        counted: list[tuple[str, int]] = []  # the attribute each count was of, and its cap
        s._conn.set_trace_callback(  # type: ignore[union-attr]
            lambda sql: (
                counted.append((sql.split("name = '")[1].split("'")[0], int(sql.split("LIMIT ")[1].split(")")[0])))
                if "COUNT(*)" in sql
                else None
            )
        )
        assert [v.id for v in s.find("note", {"inode": "1:7"})] == ["d0007"]
        assert counted == [("meta:inode", 64)]  # rare: the kind is not counted
        counted.clear()
        assert [v.id for v in s.find("note", {"inode": "1:7", "tag": "t"})] == ["d0007"]
        assert sorted(counted) == [("meta:inode", 64), ("meta:tag", 64)]
        counted.clear()
        assert len(s.find("note", {"tag": "t"})) == 750  # common: the kind is counted as well
        assert counted == [("meta:tag", 64), ("meta:tag", 1000), ("kind", 1000)]
        assert [v.id for v in s.find("note", {"tag": "t", "inode": "1:8"})] == []


def test_a_key_another_connection_starts_indexing_is_indexed_by_this_one_too(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteStore(path) as a, SqliteStore(path) as b:
        a.put({"id": "one", "kind": "note", "meta": {"tag": "t"}}, T0)
        assert [v.id for v in b.find("note", {"tag": "t"})] == ["one"]  # b starts indexing 'tag'
        a.put({"id": "two", "kind": "note", "meta": {"tag": "t"}}, T0)  # a has not searched for it
        assert [v.id for v in b.find("note", {"tag": "t"})] == ["one", "two"]
        assert attr_rows(path, "meta:tag") == 2


def test_a_store_that_cannot_be_written_is_searched_without_the_index(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteStore(path) as s:
        s.put({"id": "one", "kind": "note", "meta": {"tag": "t"}}, T0)
        s.put({"id": "two", "kind": "other", "meta": {"tag": "t"}}, T0)
    with SqliteStore(path) as s:
        assert s._conn is not None
        s._conn.execute("PRAGMA query_only = ON")
        assert [v.id for v in s.find("note", {"tag": "t"})] == ["one"]
        assert [v.id for v in s.find(None, {"tag": "t"})] == ["one", "two"]
    assert indexed_keys(path) == set()


def test_files_from_before_the_index_keys_migration_keep_every_key_indexed(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with SqliteStore(path) as s:
        s.put({"id": "one", "kind": "note", "meta": {"tag": "t", "n": 1}}, T0)
        assert s.find("note", {"tag": "t"})
    with closing(sqlite3.connect(path)) as conn, conn:  # make it the file an older context_os wrote
        conn.execute("DROP TABLE indexed_keys")
        conn.execute(
            "DELETE FROM migrations WHERE name IN"
            " ('m002_indexed_keys', 'm003_text_index', 'm004_fts_seq', 'm005_fts_high_water')"
        )
        for table in ("text_fts", "text_parts", "text_meta"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute("INSERT INTO attrs SELECT 'meta:n', value, eid FROM attrs WHERE name = 'meta:tag'")
    with SqliteStore(path) as s:
        assert applied(path) == [name for name, _ in MIGRATIONS]
        assert indexed_keys(path) == {"meta:tag", "meta:n"}
        s.put({"id": "two", "kind": "note", "meta": {"tag": "t", "n": 1}}, T0)
        assert attr_rows(path, "meta:n") == 2


# -- eviction ----------------------------------------------------------------------------------


def test_evict_leaves_no_copy_in_the_files(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    secret = "s3cr3t-7f0c1e9a"
    with SqliteStore(path) as s:
        # a large content (overflow pages), a small one, and a secret in an indexed meta value
        s.put({"id": "leak", "kind": "note", "content": (secret + "\n") * 2000, "meta": {"key": secret}}, T0)
        assert [v.id for v in s.find("note", {"key": secret}, valid_time=T0)] == ["leak"]  # now indexed
        s.put({"id": "leak", "kind": "note", "content": secret, "meta": {}}, T0 + 1)
        # overwritten within its own tx: no row references this doc any more
        s.submit([Put({"id": "leak", "kind": "note", "content": secret * 2}, T0 + 2), Put(doc("leak"), T0 + 2)])
        s.submit([Put(doc(f"other-{i}", i), T0) for i in range(200)])
        s.submit([Evict("leak")])
        assert s.stats()["distinct_docs"] == 200
        # while the store is still open, so the WAL file is there too
        files = [p for p in tmp_path.iterdir() if p.name.startswith("store.db")]
        assert secret.encode() not in b"".join(p.read_bytes() for p in files)


def _wal(path: Path) -> int:
    return Path(f"{path}-wal").stat().st_size


def test_the_wal_is_folded_back_by_a_thread_of_the_store_not_by_the_commit_that_filled_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite's automatic checkpoint ran in the commit whose WAL reached 10,000 pages: that commit
    # (a proxy's request, a harness's turn) waited 50-70 ms while ~20 MB were copied and synced.
    monkeypatch.setattr(SqliteStore, "CHECKPOINT_BYTES", 400_000)
    path = tmp_path / "s.db"
    with SqliteStore(path) as s:
        assert s._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0  # type: ignore[union-attr]
        checkpointer = s._checkpointer
        assert checkpointer is not None
        statements: list[str] = []
        s._conn.set_trace_callback(statements.append)  # type: ignore[union-attr]
        n = 0
        while _wal(path) <= 400_000:
            s.submit([Put(doc(f"d{n}", n) | {"content": f"{n} " * 2000}, T0)])
            n += 1
        wait_for(lambda: checkpointer.runs >= 1, "the checkpointer's first run")
        assert not any("checkpoint" in st.lower() for st in statements)  # none in the writer's
        s.put(doc("next"), T0)  # the next write starts the WAL over, its file cut to a fifth
        assert _wal(path) <= 400_000 // 5
        assert s.get(f"d{n - 1}", T0) is not None and s.stats()["distinct_docs"] == n + 1
        thread = checkpointer._thread
        assert thread is not None and thread.is_alive()
    assert not thread.is_alive()  # close stopped it, and the store's connection closed last:
    assert not Path(f"{path}-wal").exists()  # the WAL folded back and removed, as always
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_store_written_without_a_pause_keeps_its_wal_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The checkpointer's thread copied the WAL while the writer went on: the WAL starts over only
    # when a write begins with all of it copied, which it never was, and the WAL of a 50,000-message
    # session grew to 1.4 GB. The next commit now copies what came in meanwhile.
    monkeypatch.setattr(SqliteStore, "CHECKPOINT_BYTES", 400_000)
    path = tmp_path / "s.db"
    with SqliteStore(path) as s:
        largest = written = n = 0
        while written < 4_000_000:  # ten times the size, one commit after another
            content = f"{n} " * 1000
            s.submit([Put(doc(f"d{n}", n) | {"content": content}, T0)])
            written, n = written + len(content), n + 1
            largest = max(largest, _wal(path))
        assert s._checkpointer is not None and s._checkpointer.runs >= 1
        # Without the next commit's copy it grows to ~23 MB here. With it, 0.9-1.6 MB on 2 idle
        # cores, and still ~23 MB with both cores busy and the disk slow to sync (the thread went
        # into one run after another, and the commit's copy never got its turn). A commit past
        # WAL_MOST times the size now waits for the thread and copies the rest: a bound whatever
        # the machine (past it by one commit's pages at most).
        assert largest < (SqliteStore.WAL_MOST + 1) * 400_000, f"the WAL grew to {largest:,} bytes"
        assert s.get(f"d{n - 1}", T0) is not None


def test_an_eviction_rebuilds_the_file_while_the_checkpointer_is_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An eviction's rebuild ends in a checkpoint of its own, which found the checkpointer's
    # running and gave up: the evicted bytes stayed in the WAL. It waits for it instead.
    monkeypatch.setattr(SqliteStore, "CHECKPOINT_BYTES", 400_000)
    path, secret = tmp_path / "s.db", "s3cr3t-0b5e2d71"
    with SqliteStore(path) as s:
        s.put(doc("leak", secret=secret) | {"content": secret * 100}, T0)
        checkpointer = s._checkpointer
        assert checkpointer is not None
        with checkpointer.lock:  # a checkpoint runs (the thread holds this lock meanwhile)
            n = 0
            while checkpointer._thread is None:
                s.submit([Put(doc(f"d{n}", n) | {"content": f"{n} " * 2000}, T0)])
                n += 1
            done: list[Tx] = []
            evicting = threading.Thread(target=lambda: done.append(s.submit([Evict("leak")])))
            evicting.start()
            evicting.join(0.3)
            assert evicting.is_alive()  # waiting for the checkpoint to end
        evicting.join(30)
        assert done and done[0].committed and not done[0].left_in_files
        data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("s.db"))
        assert secret.encode() not in data


LOCK_HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
sys.stdin.readline()
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


def test_an_eviction_the_file_cannot_be_rebuilt_for_stands_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The eviction has committed when the file is rebuilt without its bytes (VACUUM). If another
    # process takes the write lock in between and keeps it past the busy timeout, the rebuild
    # fails: submit raised "database is locked" for an eviction that had happened.
    path = tmp_path / "s.db"
    monkeypatch.setattr(SqliteStore, "BUSY_TIMEOUT_S", 0.5)
    store = SqliteStore(path)
    store.put(doc("leak", secret="s3cr3t"), T0)
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    to_holder, from_holder = holder.stdin, holder.stdout
    assert to_holder is not None and from_holder is not None

    def lock_before_vacuum(statement: str) -> None:
        if statement == "VACUUM":
            to_holder.write("lock\n")
            to_holder.flush()
            assert from_holder.readline().strip() == "locked"

    try:
        store._conn.set_trace_callback(lock_before_vacuum)  # type: ignore[union-attr]
        tx = store.submit([Evict("leak")])
        store._conn.set_trace_callback(None)  # type: ignore[union-attr]
        assert tx.committed and tx.left_in_files
    finally:
        holder.communicate("done\n", timeout=60)
    assert store.get("leak", T0) is None and store.find("note", {"secret": "s3cr3t"}, valid_time=T0) == []
    assert store.latest_tx() == Tx(tx.id, tx.time)
    tx = store.submit([Put(doc("other"), T0), Evict("other")])  # the next eviction rebuilds it
    assert tx.committed and not tx.left_in_files
    store.close()


# -- concurrency -------------------------------------------------------------------------------


def _writer(path: str, name: str, txs: int, per_tx: int) -> list[int]:
    """Child process: ``txs`` transactions of ``per_tx`` puts each; returns the tx ids."""
    ids = []
    with SqliteStore(Path(path)) as s:
        for t in range(txs):
            tx = s.submit([Put(doc(f"{name}-{t}-{i}", i, writer=name), T0 + t) for i in range(per_tx)])
            assert tx.committed
            ids.append(tx.id)
    return ids


def test_two_processes_writing_one_file_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    txs, per_tx = 60, 20
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = [pool.apply_async(_writer, (str(path), name, txs, per_tx)) for name in ("p", "q")]
        tx_ids = [r.get(timeout=300) for r in results]
    all_ids = tx_ids[0] + tx_ids[1]
    assert len(set(all_ids)) == len(all_ids) == 2 * txs
    assert all(sorted(ids) == ids for ids in tx_ids)  # each writer saw its tx ids increase
    with SqliteStore(path) as s:
        latest = s.latest_tx()
        assert latest is not None and latest.id == max(all_ids) == 2 * txs
        for name in ("p", "q"):
            found = s.find("note", {"writer": name})
            assert len(found) == txs * per_tx
        assert s.doc("q-59-19", T0 + 100) == doc("q-59-19", 19, writer="q")
        assert s.stats()["versions"] == 2 * txs * per_tx


FULL_DISK_WRITER = """
import json, resource, signal, sys
from pathlib import Path
from context_os.store import Put
from context_os.store.sqlite import SqliteStore
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead
store = SqliteStore(Path(sys.argv[1]))
store.put({"id": "small", "kind": "note", "meta": {}}, 1)
wal = Path(sys.argv[1] + "-wal").stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (wal + 4096, resource.RLIM_INFINITY))
try:
    store.put({"id": "big", "kind": "note", "meta": {}, "content": "x" * 200_000}, 1)
except Exception as e:
    print(json.dumps([type(e).__name__, str(e)]))
else:
    print(json.dumps(None))
"""


def test_a_write_the_disk_has_no_room_for_says_so_and_writes_nothing(tmp_path: Path) -> None:
    # SQLite ends the transaction itself on such an I/O error; the ROLLBACK that followed then
    # failed, and its "cannot rollback - no transaction is active" (a plain StoreError) was raised
    # instead of the error that said what happened.
    path = tmp_path / "s.db"
    child = subprocess.run(
        [sys.executable, "-c", FULL_DISK_WRITER, str(path)], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr
    error = json.loads(child.stdout)
    assert error is not None and error[0] == "StoreUnavailable" and "disk I/O error" in error[1], error
    with SqliteStore(path) as s:
        assert s.latest_tx() is not None and s.latest_tx().id == 1  # type: ignore[union-attr]
        assert s.get("big", 1) is None and s.check() == []
        assert s.put(doc("after"), T0).committed


# -- opening: must exist, read-only, created (open_store) ------------------------------------------


def test_a_store_that_must_exist_is_never_created(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "dir" / "x.db"
    for url in (f"sqlite://{missing}", str(missing)):
        with pytest.raises(NotFound, match=f"no store at sqlite://{missing}"):
            open_store(url, create=False)
    for mode in ("rw", "ro"):  # the URL says so itself
        with pytest.raises(NotFound, match=f"no store at sqlite://{missing}"):
            open_store(f"sqlite://{missing}?mode={mode}")
    assert not (tmp_path / "no").exists()
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    before = other.read_bytes()
    with pytest.raises(NotFound, match="not a context_os store"):
        open_store(str(other), create=False)
    assert other.read_bytes() == before  # not even switched to WAL mode
    with pytest.raises(StoreError, match=r"is an SQLite database but not a context_os store \(it has the tables t\)"):
        open_store(str(other))  # nor made a store of by a command that creates one
    assert other.read_bytes() == before and not Path(f"{other}-wal").exists()
    empty = tmp_path / "empty.db"
    empty.touch()  # an empty file holds nothing to keep: it becomes a store
    with open_store(str(empty)) as s:
        assert s.latest_tx_id() is None


@pytest.mark.parametrize(
    "schema",
    [
        # TypeORM (and others) keep their own `migrations (id, timestamp, name)`
        [
            "CREATE TABLE migrations (id INTEGER PRIMARY KEY, timestamp INTEGER, name TEXT)",
            "INSERT INTO migrations (timestamp, name) VALUES (1, 'CreateUsers1600000000000')",
            "CREATE TABLE users (id)",
        ],
        # Laravel's has no `name` column at all
        [
            "CREATE TABLE migrations (id INTEGER PRIMARY KEY, migration TEXT, batch INT)",
            "INSERT INTO migrations (migration, batch) VALUES ('2014_10_12_create_users', 1)",
        ],
        # our names, without a store's tables
        [
            "CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at INTEGER)",
            "INSERT INTO migrations VALUES ('m001_initial', 0)",
        ],
    ],
)
def test_another_application_s_migrations_table_is_not_taken_for_a_store(tmp_path: Path, schema: list[str]) -> None:
    """Before 2026-12-02 any `migrations` table made a file a store: a TypeORM database was
    switched to WAL mode, then refused as "written by a newer context_os" (Laravel's: "no such
    column: name")."""
    path = tmp_path / "app.db"
    with closing(sqlite3.connect(path)) as conn, conn:
        for statement in schema:
            conn.execute(statement)
    before = path.read_bytes()
    with pytest.raises(StoreError, match=r"is an SQLite database but not a context_os store \(it has the tables mig"):
        SqliteStore(path)
    with pytest.raises(NotFound, match="is not a context_os store"):
        SqliteStore(path, read_only=True)
    with pytest.raises(NotFound, match="is not a context_os store"):
        SqliteStore(path, create=False)
    assert path.read_bytes() == before and not Path(f"{path}-wal").exists()


CREATOR = """
import sys
from pathlib import Path
from context_os.store.sqlite import SqliteStore
SqliteStore(Path(sys.argv[1])).close()
"""


def test_a_store_another_process_creates_while_this_one_opens_the_file_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes opening one new file at once: one read the file's tables before the other
    committed its schema, and the rest after, and took the store for another application's
    database (1 open in 100 failed with "not a context_os store"). The other process creates
    the store right after this one's first look at the file's tables."""
    path = tmp_path / "new.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")  # as the other leaves it before its schema is in
    created: list[subprocess.CompletedProcess[str]] = []
    looked = False

    def between_looks(statement: str) -> None:
        nonlocal looked
        if looked and not created:
            created.append(
                subprocess.run([sys.executable, "-c", CREATOR, str(path)], capture_output=True, text=True, timeout=120)
            )
        looked = looked or "sqlite_master" in statement

    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        if not created:
            conn.set_trace_callback(between_looks)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    with SqliteStore(path) as s:
        assert s.latest_tx() is None and s.submit([Put(doc("a"))]).committed
    monkeypatch.undo()
    assert created and created[0].returncode == 0, created and created[0].stderr
    assert applied(path) == [name for name, _ in MIGRATIONS]


def test_created_says_whether_opening_made_the_store(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    with open_store(str(path)) as s:
        assert s.created
    with open_store(str(path), create=False) as s:
        assert not s.created and s.url == f"sqlite://{path}"


def test_mode_ro_reads_and_refuses_every_write(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteStore(path) as s:
        s.put(doc("a", 1, tag="t"), T0)
    with open_store(f"sqlite://{path}?mode=ro") as ro:
        assert isinstance(ro, SqliteStore) and ro.read_only and ro.path == path
        assert ro.url == f"sqlite://{path}?mode=ro"
        assert ro.doc("a", T0) == doc("a", 1, tag="t")
        assert [v.id for v in ro.find("note", {"tag": "t"})] == ["a"]  # searched without the index
        for write in (lambda: ro.put(doc("b"), T0), lambda: ro.submit([Evict("a")])):
            with pytest.raises(StoreError, match="read-only"):
                write()
    with SqliteStore(path) as s:
        assert s.doc("b", T0) is None and s.doc("a", T0) is not None
    assert sorted(p.name for p in tmp_path.iterdir() if "mode" in p.name) == []


@pytest.mark.parametrize(
    ("query", "says"),
    [("mode=rox", "mode='rox' is not one of ro, rw, rwc"), ("cache=shared", "unknown option"), ("mode", "mode=''")],
)
def test_a_sqlite_url_refuses_options_it_does_not_know(tmp_path: Path, query: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        open_store(f"sqlite://{tmp_path / 'x.db'}?{query}")
    assert not (tmp_path / "x.db").exists()


def test_a_bare_path_is_a_path_question_mark_and_all(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "odd?mode=ro.db")) as s:
        assert s.path.name == "odd?mode=ro.db"


def test_the_default_store_in_a_user_data_dir_with_a_question_mark_is_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A home (or ``$XDG_DATA_HOME``) whose path holds a ``?``: the default store is the file in it,
    not a URL whose query is the rest of the path."""
    data = tmp_path / "me?mode=ro" / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    with open_store() as s:
        assert s.created and s.path == data / "context_os" / "store.db"
        s.put(doc("a"), T0)
    with open_store(create=False) as s:
        assert s.doc("a", T0) == doc("a")


def test_a_number_past_64_bits_is_a_store_error(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "store.db") as s:
        s.put(doc("a"), T0)
        with pytest.raises(StoreError, match="outside the years"):
            s.get("a", 10**30)


# -- damage --------------------------------------------------------------------------------------


def test_a_document_that_no_longer_parses_is_store_corrupt_naming_its_version(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteStore(path) as s:
        t1 = s.put(doc("a", 1), T0)
        s.put(doc("a", 2), T0 + 1)
        s.put(doc("b", 1), T0)
        assert s.check() == []
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute('UPDATE docs SET json = substr(json, 2) WHERE json LIKE \'%"v1"%"id":"a"%\'')
    conn.close()
    with SqliteStore(path) as s:
        for read in (lambda: s.get("a", T0), lambda: s.history("a"), lambda: s.find("note", valid_time=T0)):
            with pytest.raises(
                StoreCorrupt, match=r"'a' at tx \d+ is damaged: its stored document does not parse"
            ) as e:
                read()
            assert e.value.id == "a" and e.value.tx_id == t1.id
        assert s.doc("a", T0 + 1) == doc("a", 2)  # the other versions still read
        assert [v.doc is None for v in s.history("a", with_docs=False)] == [True, True]
        [problem] = s.check()
        assert problem.startswith(f"'a' at tx {t1.id} (valid time 2023-11-14T22:13:20.000Z)")
        s.submit([Evict("a")])  # a damaged document can still be erased
        assert s.history("a") == [] and s.check() == []


def test_a_version_whose_document_row_is_gone_is_store_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteStore(path) as s:
        s.put(doc("a", 1), T0)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM docs")
    conn.close()
    with SqliteStore(path) as s:
        with pytest.raises(StoreCorrupt, match="its stored document is missing"):
            s.get("a", T0)
        with pytest.raises(StoreCorrupt, match="missing"):
            s.find()  # not silently left out
        assert s.check() == ["'a' at tx 1 (valid time 2023-11-14T22:13:20.000Z): its stored document is missing"]


def test_check_runs_sqlites_integrity_check(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteStore(path) as s:
        s.submit([Put(doc(f"d{n}", n, tag=f"t{n}"), T0) for n in range(300)])
        s.find("note", {"tag": "t1"})  # index the key: attrs gets a page of its own
    with closing(sqlite3.connect(path)) as conn, conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = 'attrs' AND pagetype = 'leaf'")]
    conn.close()
    data = bytearray(path.read_bytes())
    data[pages[0] * page_size - 20] ^= 0xFF  # a byte of a key near the end of an index page
    path.write_bytes(data)
    with SqliteStore(path) as s:
        assert s.doc("d1", T0) == doc("d1", 1, tag="t1")  # reads carry on
        problems = s.check()
    assert problems and all(p.startswith("integrity_check: ") for p in problems)
    assert any("attrs" in p for p in problems), problems


def test_a_reader_never_writes(tmp_path: Path) -> None:
    """What ``SqliteStore.reader`` opens is the same file, read-only."""
    with SqliteStore(tmp_path / "s.db") as store:
        store.put({"id": "a", "kind": "note", "content": "x", "meta": {}})
        reader = store.reader()
    with reader() as other:
        assert other.read_only and other.doc("a") is not None
        with pytest.raises(StoreError, match="read-only"):
            other.put({"id": "b", "kind": "note", "content": "y", "meta": {}})
