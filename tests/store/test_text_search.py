"""The keyword index (``Store.text_search``, ``text_parts``, ``index_status``, ``rebuild_index``),
run unchanged on every backend: the SQLite store's own FTS5 tables and the XTDB store's sidecar.

The XTDB node is shared by the whole run: every searched word carries the test's ``uid`` (so no
other test's documents match), tx ids are only compared with each other, and valid times are
explicit and in the past (``T0 + n``).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import unicodedata
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from context_os.errors import InputError, StoreError
from context_os.hashing import doc_hashes
from context_os.objects import index_parts
from context_os.store import Evict, Match, Put, Store, TextHit, text_index
from context_os.store.sqlite import SqliteStore
from tests.helpers import unsplit_keyword_index

T0 = 1_700_000_000_000


def obj(id: str, kind: str, content: Any, **meta: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"id": id, "kind": kind, "content": content, "meta": meta}
    d.update(doc_hashes(d))
    return d


def page(session: str, n: int, *texts: str | None) -> dict[str, Any]:
    entries = [
        {"i": i, "role": "user" if i % 2 == 0 else "assistant", "text": t, "h": f"h{i}"} for i, t in enumerate(texts)
    ]
    return obj(f"chat:{session}:{n:05d}", "chat", entries, session=session, page=n)


def found(hits: list[TextHit]) -> list[tuple[str, str]]:
    return [(h.id, h.part) for h in hits]


def mine(hits: list[TextHit], uid: str) -> list[TextHit]:
    """The hits on this test's documents (other tests share the XTDB node)."""
    return [h for h in hits if uid in h.id]


def assert_is_version(store: Store, hit: TextHit) -> None:
    """A hit is a static ref: its version exists, carries that object hash and holds the text."""
    v = store.get(hit.id, hit.valid_time, hit.tx_id)
    assert v is not None and v.doc is not None
    assert (v.valid_time, v.tx_id, v.object_hash) == (hit.valid_time, hit.tx_id, hit.object_hash)
    assert (hit.part, hit.text) in index_parts(v.doc)


# -- what is found ---------------------------------------------------------------------------------


def test_chat_entries_are_found_with_their_part_and_session(store: Store, uid: str) -> None:
    s = f"s{uid}"
    store.put(page(s, 0, f"hello {uid}"), T0)
    store.put(page(s, 0, f"hello {uid}", None, f"the {uid} migration needs a zebra"), T0 + 1)
    hits = mine(store.text_search(f"zebra {uid}"), uid)
    assert found(hits) == [(f"chat:{s}:00000", "e2"), (f"chat:{s}:00000", "e0")]
    assert hits[0].score > hits[1].score > 0
    assert all(h.session == s and h.kind == "chat" for h in hits)
    assert hits[0].text == f"the {uid} migration needs a zebra"
    for h in hits:
        assert_is_version(store, h)
        assert h.valid_time == T0 + 1  # the page version in force holds both entries


def test_a_chat_entry_is_found_once_its_page_version_is_in_force(store: Store, uid: str) -> None:
    s = f"s{uid}"
    store.put(page(s, 0, "first"), T0)
    store.put(page(s, 0, "first", f"later {uid}"), T0 + 10)
    assert store.text_search(uid, valid_time=T0 + 5) == []
    assert found(store.text_search(uid, valid_time=T0 + 10)) == [(f"chat:{s}:00000", "e1")]


def test_tool_outputs_files_and_memories_are_found(store: Store, uid: str) -> None:
    call = obj(f"toolcall:s{uid}:c1", "toolcall", f"grep found {uid} in setup.py", name="bash", session=f"s{uid}")
    file = obj(f"file:{uid}", "file", f"def {uid}_helper():\n    return 1\n", path="a.py")
    memory = obj(f"memory:{uid}", "memory", f"the user prefers {uid} tabs")
    frame = obj(f"frame:s{uid}:1", "frame", {"note": f"{uid}"})
    store.submit([Put(call, T0), Put(file, T0), Put(memory, T0), Put(frame, T0)])
    hits = store.text_search(uid)
    assert sorted(found(hits)) == sorted([(call["id"], ""), (file["id"], ""), (memory["id"], "")])
    by_id = {h.id: h for h in hits}
    assert by_id[call["id"]].session == f"s{uid}" and by_id[call["id"]].kind == "toolcall"
    assert by_id[file["id"]].session is None and by_id[file["id"]].text == file["content"]
    for h in hits:
        assert_is_version(store, h)


def test_words_are_stemmed_and_case_folded(store: Store, uid: str) -> None:
    store.put(obj(f"file:{uid}", "file", f"Running the {uid.upper()} Tests"), T0)
    # other tests' documents on a shared node may hold "run" and "test": compare scores
    [alone] = store.text_search(uid)
    stemmed = store.text_search(f"run {uid} test")
    assert found(stemmed)[0] == (f"file:{uid}", "")
    assert stemmed[0].score > alone.score


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("Die Straße{uid} ist lang", "Straße{uid}"),  # casefolded, ß was "ss": another word to FTS5
        ("Die Straße{uid} ist lang", "STRAẞE{uid}"),
        ("une école{uid} ici", unicodedata.normalize("NFD", "école{uid}")),  # macOS writes NFD
        (unicodedata.normalize("NFD", "une école{uid} ici"), "école{uid}"),
        (unicodedata.normalize("NFD", "une école{uid} ici"), unicodedata.normalize("NFD", "ÉCOLE{uid}")),
        ("Tiếng Việt{uid}", unicodedata.normalize("NFD", "việt{uid}")),
        # unicode61's tables are Unicode 6.1's: what came since is a letter to it, as a private-use
        # glyph is, and it keeps them in the word; the query split there and found nothing
        ("the smoke\U0001f9ea{uid} ran", "smoke\U0001f9ea{uid}"),  # an emoji of Unicode 11
        ("كتب \u0628\u0898{uid}", "\u0628\u0898{uid}"),  # an Arabic mark of Unicode 14
        ("prompt \ue0a0{uid} $", "\ue0a0{uid}"),  # a Nerd Font glyph in a shell prompt
    ],
)
def test_a_word_is_found_whatever_its_unicode_form(store: Store, uid: str, text: str, query: str) -> None:
    store.put(obj(f"file:{uid}", "file", text.format(uid=uid)), T0)
    assert found(store.text_search(query.format(uid=uid))) == [(f"file:{uid}", "")]


CJK_TEXT = "我们修复了{uid}日本語の問題，还有한국어검색"
"""Chinese, Japanese and Korean, written without spaces between words: unicode61 makes one token
of each run, so that no word inside one was ever found."""


@pytest.mark.parametrize("query", ["修复", "日本語", "問題", "語の問", "한국어", "검색", "語", "日本語 unrelated"])
def test_a_word_inside_cjk_text_is_found(store: Store, uid: str, query: str) -> None:
    store.put(obj(f"file:{uid}", "file", CJK_TEXT.format(uid=uid)), T0)
    assert found(mine(store.text_search(query, k=100), uid)) == [(f"file:{uid}", "")]


@pytest.mark.parametrize("query", ["问题", "修理", "日本人", "한국인"])
def test_cjk_characters_not_next_to_each_other_in_the_text_are_no_word_of_it(
    store: Store, uid: str, query: str
) -> None:
    store.put(obj(f"file:{uid}", "file", CJK_TEXT.format(uid=uid)), T0)
    assert mine(store.text_search(query, k=100), uid) == []


def test_cjk_text_keeps_the_index_sound_through_edits_and_evictions(store: Store, uid: str) -> None:
    store.put(obj(f"file:{uid}", "file", CJK_TEXT.format(uid=uid)), T0)
    store.put(obj(f"file:{uid}b", "file", f"别的文件 {uid}"), T0)
    assert found(mine(store.text_search("文件", k=100), uid)) == [(f"file:{uid}b", "")]
    store.submit([Evict(f"file:{uid}b")])
    assert mine(store.text_search("文件", k=100), uid) == []
    assert found(mine(store.text_search("修复", k=100), uid)) == [(f"file:{uid}", "")]
    status = store.index_status()
    assert status["state"] == "ok" and status["splits_cjk"] is True


def test_more_matching_words_rank_higher(store: Store, uid: str) -> None:
    store.submit(
        [
            Put(obj(f"file:{uid}-1", "file", f"{uid} alpha{uid}"), T0),
            Put(obj(f"file:{uid}-2", "file", f"{uid} alpha{uid} beta{uid} gamma{uid}"), T0),
            Put(obj(f"file:{uid}-3", "file", f"{uid} unrelated words"), T0),
        ]
    )
    hits = store.text_search(f"{uid} alpha{uid} beta{uid} gamma{uid}", k=2)
    assert [h.id for h in hits] == [f"file:{uid}-2", f"file:{uid}-1"]


# -- bitemporal ------------------------------------------------------------------------------------


def test_an_edited_file_is_found_at_its_old_text_only_in_the_past(store: Store, uid: str) -> None:
    fid = f"file:{uid}"
    store.put(obj(fid, "file", f"alpha{uid} original text"), T0)
    store.put(obj(fid, "file", f"beta{uid} edited text"), T0 + 10)
    assert store.text_search(f"alpha{uid}") == []
    [new] = store.text_search(f"beta{uid}")
    assert new.valid_time == T0 + 10
    [old] = store.text_search(f"alpha{uid}", valid_time=T0 + 5)
    assert (old.valid_time, old.text) == (T0, f"alpha{uid} original text")
    assert_is_version(store, old)
    assert store.text_search(f"beta{uid}", valid_time=T0 + 5) == []
    assert store.text_search(f"alpha{uid}", valid_time=T0 - 1) == []


def test_as_of_a_transaction(store: Store, uid: str) -> None:
    fid = f"file:{uid}"
    tx1 = store.put(obj(fid, "file", f"alpha{uid}"), T0)
    tx2 = store.put(obj(fid, "file", f"beta{uid}"), T0)  # a correction of the same valid time
    assert found(store.text_search(f"alpha{uid}", valid_time=T0, tx_id=tx1.id)) == [(fid, "")]
    assert store.text_search(f"alpha{uid}", valid_time=T0, tx_id=tx2.id) == []
    assert store.text_search(f"alpha{uid}", valid_time=T0) == []
    assert store.text_search(f"beta{uid}", valid_time=T0, tx_id=tx1.id) == []
    [hit] = store.text_search(f"beta{uid}", valid_time=T0, tx_id=tx2.id)
    assert hit.tx_id == tx2.id


def test_as_of_a_transaction_past_the_newest_is_an_error(store: Store, uid: str) -> None:
    tx = store.put(obj(f"file:{uid}", "file", uid), T0)
    with pytest.raises(StoreError, match="past the newest"):
        store.text_search(uid, tx_id=tx.id + 1000)


def test_a_deleted_object_is_not_found(store: Store, uid: str) -> None:
    from context_os.store import Delete

    store.put(obj(f"memory:{uid}", "memory", f"remember {uid}"), T0)
    store.submit([Delete(f"memory:{uid}", T0 + 10)])
    assert store.text_search(uid) == []
    assert len(store.text_search(uid, valid_time=T0 + 5)) == 1


# -- filters ---------------------------------------------------------------------------------------


def test_kinds_and_session_filters(store: Store, uid: str) -> None:
    store.submit(
        [
            Put(page(f"a{uid}", 0, f"{uid} in chat a"), T0),
            Put(page(f"b{uid}", 0, f"{uid} in chat b"), T0),
            Put(obj(f"toolcall:a{uid}:c1", "toolcall", f"{uid} tool output", session=f"a{uid}"), T0),
            Put(obj(f"file:{uid}", "file", f"{uid} file"), T0),
        ]
    )
    assert {h.id for h in store.text_search(uid, kinds=["file"])} == {f"file:{uid}"}
    assert {h.kind for h in store.text_search(uid, kinds=["chat", "toolcall"])} == {"chat", "toolcall"}
    assert {h.id for h in store.text_search(uid, session=f"a{uid}")} == {f"chat:a{uid}:00000", f"toolcall:a{uid}:c1"}
    assert found(store.text_search(uid, session=f"b{uid}", kinds=["chat"])) == [(f"chat:b{uid}:00000", "e0")]
    assert store.text_search(uid, session=f"b{uid}", kinds=["toolcall"]) == []
    assert len(store.text_search(uid, k=2)) == 2


def test_session_comes_from_the_id_when_meta_has_none(store: Store, uid: str) -> None:
    store.put(obj(f"toolcall:x{uid}:c9", "toolcall", f"{uid} output"), T0)
    [hit] = store.text_search(uid)
    assert hit.session == f"x{uid}"


# -- queries from users and models -----------------------------------------------------------------


@pytest.mark.parametrize(
    "noise",
    ['"', "'", "*", "(", ")", "AND", "OR", "NOT", "NEAR(", "-", ":", "^", "{", "}", "+", '"unbalanced', "col:umn"],
)
def test_query_syntax_characters_are_plain_text(store: Store, uid: str, noise: str) -> None:
    store.put(obj(f"file:{uid}", "file", f'say "{uid}" AND (stop)'), T0)
    # "AND", "col" ... are words too (other tests' files on a shared node may hold them)
    hits = store.text_search(f"{noise} {uid} {noise}")
    assert found(hits)[0] == (f"file:{uid}", "")
    assert [h for h in hits if uid in h.text] == hits[:1]


def test_a_query_without_words_finds_nothing(store: Store, uid: str) -> None:
    store.put(obj(f"file:{uid}", "file", f"{uid} ***"), T0)
    assert store.text_search('*** "" ()') == []


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_an_empty_query_is_an_input_error(store: Store, query: str) -> None:
    with pytest.raises(InputError, match="query is empty"):
        store.text_search(query)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kinds": ["file", "frame"]}, "kinds"),
        ({"kinds": ["nonsense"]}, "kinds"),
        ({"kinds": "file"}, "kinds"),
        ({"kinds": []}, "kinds is empty"),
        ({"valid_time": "2024-01-01"}, "valid_time"),
        ({"valid_time": 1.5}, "valid_time"),
        ({"tx_id": "3"}, "tx_id"),
        ({"k": 0}, "k"),
    ],
)
def test_bad_arguments_are_input_errors_naming_the_field(store: Store, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError, match=field):
        store.text_search("anything", **kwargs)


# -- writes ----------------------------------------------------------------------------------------


def test_evict_removes_every_hit_and_part(store: Store, uid: str) -> None:
    secret = f"sk{uid}leaked"
    mid = f"memory:{uid}"
    store.put(obj(mid, "memory", f"token {secret}"), T0)
    store.put(obj(mid, "memory", f"token {secret} again"), T0 + 1)
    assert len(store.text_search(secret, valid_time=T0)) == 1
    store.submit([Evict(mid)])
    assert store.text_search(secret) == []
    assert store.text_search(secret, valid_time=T0) == []
    assert not [p for p in all_parts(store) if p.id == mid]


def test_a_failed_match_indexes_nothing(store: Store, uid: str) -> None:
    fid = f"file:{uid}"
    store.put(obj(fid, "file", "before"), T0)
    tx = store.submit([Match(fid, obj(fid, "file", "something else")), Put(obj(fid, "file", f"after{uid}"), T0 + 1)])
    assert not tx.committed
    assert store.text_search(f"after{uid}") == []
    assert not [p for p in all_parts(store) if f"after{uid}" in p.text]


def all_parts(store: Store) -> list[Any]:
    out, after = [], 0
    while batch := store.text_parts(after, 500):
        out += batch
        after = batch[-1].seq
    return out


def test_text_parts_is_a_cursor_over_each_distinct_text_once(store: Store, uid: str) -> None:
    s = f"s{uid}"
    store.put(page(s, 0, f"one {uid}"), T0)
    store.put(page(s, 0, f"one {uid}", f"two {uid}"), T0 + 1)
    store.put(page(s, 0, f"one {uid}", f"two {uid}", f"three {uid}"), T0 + 2)
    store.put(obj(f"file:{uid}", "file", f"four {uid}"), T0)
    mine = [p for p in all_parts(store) if uid in p.text]
    assert [(p.id, p.part, p.text) for p in mine] == [
        (f"chat:{s}:00000", "e0", f"one {uid}"),
        (f"chat:{s}:00000", "e1", f"two {uid}"),
        (f"chat:{s}:00000", "e2", f"three {uid}"),
        (f"file:{uid}", "", f"four {uid}"),
    ]
    seqs = [p.seq for p in mine]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4
    assert all(p.object_hash.startswith("b3:") for p in mine)
    # resuming after a seq gives only what came after it
    rest = store.text_parts(seqs[1], 1000)
    assert [p.seq for p in rest if uid in p.text] == seqs[2:]
    assert len(store.text_parts(0, 2)) == 2
    with pytest.raises(InputError, match="after_seq"):
        store.text_parts(-1)


def test_a_seq_is_never_given_again_after_the_newest_parts_are_evicted(store: Store, uid: str) -> None:
    """An embedder's cursor may stand past the parts an eviction removed: what comes next must
    still come after it."""
    store.put(obj(f"memory:{uid}:a", "memory", f"first {uid}"), T0)
    store.put(obj(f"memory:{uid}:b", "memory", f"leaked {uid}"), T0)
    cursor = max(p.seq for p in all_parts(store))
    status = store.index_status()
    store.submit([Evict(f"memory:{uid}:b")])
    after = store.index_status()
    assert after["last_seq"] >= cursor and after["parts"] == status["parts"] - 1
    store.put(obj(f"memory:{uid}:c", "memory", f"later {uid}"), T0)
    new = [p for p in store.text_parts(cursor, 1000) if uid in p.text]
    assert [p.text for p in new] == [f"later {uid}"] and new[0].seq > cursor
    assert all(h.id != f"memory:{uid}:b" for h in store.text_search(f"leaked {uid}"))
    # the row that keeps the high-water mark is no damage: the index stays in use
    status = store.index_status()
    assert (status["state"], status["search"]) == ("ok", "index"), status.get("problem")


def test_an_index_an_eviction_left_reporting_damage_heals_when_opened(tmp_path: Path) -> None:
    """Until 2026-11-28 the high-water row an eviction writes stayed out of the FTS5 table, whose
    integrity check then took the index for damaged: a store written so is mended on open."""
    path = tmp_path / "s.db"
    with SqliteStore(path) as s:
        s.put(obj("memory:a", "memory", "first word"), T0)
        s.put(obj("memory:b", "memory", "leaked word"), T0)
        s.text_search("word")
        s.submit([Evict("memory:b")])
    conn = sqlite3.connect(path, isolation_level=None)  # as the code before left it
    text_index.register(conn)  # (the view FTS5 checks itself against calls it)
    conn.execute("INSERT INTO text_fts (text_fts, rowid, text) VALUES ('delete', 2, '')")
    conn.execute("DELETE FROM migrations WHERE name = 'm005_fts_high_water'")
    assert conn.execute("SELECT seq, eid FROM text_parts ORDER BY seq").fetchall() == [(1, 1), (2, 0)]
    assert text_index.fts_problem(conn) == "database disk image is malformed"
    conn.close()
    with SqliteStore(path) as s:
        status = s.index_status()
        assert (status["state"], status["search"]) == ("ok", "index"), status.get("problem")
        assert [h.id for h in s.text_search("word")] == ["memory:a"]


def test_index_status_reports_a_current_index(store: Store, uid: str) -> None:
    tx = store.put(obj(f"file:{uid}", "file", uid), T0)
    store.text_search(uid)
    status = store.index_status()
    assert status["state"] == "ok" and status["search"] == "index"
    assert status["last_indexed_tx"] == status["store_tx"] >= tx.id
    assert status["lags"] is False
    assert status["parts"] >= 1 and status["documents"] >= 1 and status["last_seq"] >= 1


def test_rebuild_index_restores_the_same_hits(store: Store, uid: str) -> None:
    store.put(page(f"s{uid}", 0, f"hello {uid}", f"bye {uid}"), T0)
    store.put(obj(f"file:{uid}", "file", f"old {uid}"), T0)
    store.put(obj(f"file:{uid}", "file", f"new {uid}"), T0 + 5)
    before = store.text_search(uid), mine(store.text_search(f"old {uid}", valid_time=T0 + 1), uid)
    ticks: list[tuple[int, int]] = []
    parts = store.rebuild_index(lambda done, total: ticks.append((done, total)))
    assert parts >= 4
    assert ticks and ticks[-1][0] == ticks[-1][1]
    after = store.text_search(uid), mine(store.text_search(f"old {uid}", valid_time=T0 + 1), uid)
    assert [found(h) for h in after] == [found(h) for h in before]
    assert store.index_status()["state"] == "ok"


# -- SQLite: one transaction, a migration, a dropped or damaged index -------------------------------


def test_sqlite_index_is_written_with_the_versions(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "s.db") as s:
        for n in range(5):
            tx = s.put(obj(f"file:{n}", "file", f"word{n}"), T0)
            assert found(s.text_search(f"word{n}")) == [(f"file:{n}", "")]
            status = s.index_status()
            assert status["last_indexed_tx"] == status["store_tx"] == tx.id


def test_sqlite_chat_rewrites_index_only_new_entries(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "s.db") as s:
        texts = [f"entry number {n}" for n in range(30)]
        for n in range(1, 31):
            s.put(page("s1", 0, *texts[:n]))
        conn = sqlite3.connect(tmp_path / "s.db")
        assert conn.execute("SELECT count(*) FROM text_parts").fetchone()[0] == 30
        conn.close()


def drop_index(path: Path) -> None:
    conn = sqlite3.connect(path)
    for table in ("text_fts", "text_parts", "text_meta"):
        conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.close()


def fill(s: Store) -> None:
    s.put(page("s1", 0, "the quick brown fox", "jumps over the lazy dog"), T0)
    s.put(obj("file:a", "file", "a quick test file"), T0)
    s.put(obj("file:a", "file", "rewritten entirely"), T0 + 10)
    s.put(obj("toolcall:s1:c1", "toolcall", "quick output"), T0)


def test_sqlite_rebuild_after_dropping_the_index(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SqliteStore(path) as s:
        fill(s)
        before = found(s.text_search("quick")), found(s.text_search("quick", valid_time=T0 + 1))
    drop_index(path)
    with SqliteStore(path) as s:
        status = s.index_status()
        assert (status["state"], status["search"], status["lags"]) == ("missing", "scan", True)
        # without the index: a scan, same answers
        assert found(s.text_search("quick")) == before[0]
        s.put(obj("memory:m", "memory", "quick memo"), T0)  # writes go on without it
        assert s.rebuild_index() == 6
        assert s.index_status()["state"] == "ok"
        assert set(found(s.text_search("quick"))) == {("memory:m", ""), *before[0]}
        assert set(found(s.text_search("quick", valid_time=T0 + 1))) == {("memory:m", ""), *before[1]}
        assert ("file:a", "") in before[1] and ("file:a", "") not in before[0]  # the old file text


@pytest.mark.parametrize(
    ("text", "query", "hits"),
    [
        ("Die Straße ist lang, une école", "STRAẞE", [("file:a", "")]),
        ("Die Straße ist lang, une école", unicodedata.normalize("NFD", "École"), [("file:a", "")]),
        ("我们修复了日本語の問題", "問題", [("file:a", "")]),  # a word inside CJK text
        ("我们修复了日本語の問題", "问题", []),
    ],
)
def test_sqlite_the_scan_finds_a_word_whatever_its_unicode_form_or_script(
    tmp_path: Path, text: str, query: str, hits: list[tuple[str, str]]
) -> None:
    path = tmp_path / "s.db"
    with SqliteStore(path) as s:
        s.put(obj("file:a", "file", text), T0)
    drop_index(path)
    with SqliteStore(path) as s:
        assert s.index_status()["search"] == "scan"
        assert found(s.text_search(query)) == hits


GARBLED = {
    "malformed": bytes.fromhex("cd072cd8be6f9f62ac4c09c2"),
    "out-of-memory": bytes.fromhex("b2b725541252f10e4ee8b3fb"),
}
"""Structure records a bad sector could leave: one SQLite finds malformed, one whose garbled
size has SQLite run out of memory reading it (``MemoryError``: 2 in 150 random records did, which
made these tests fail one run in five when they garbled the record at random)."""


def damage_fts(path: Path, garbled: str) -> None:
    """Garble the FTS5 table's structure record, as a bad sector would."""
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE text_fts_data SET block = ? WHERE id = 10", (GARBLED[garbled],))


@pytest.mark.parametrize("damage", ["segments gone", *GARBLED])
def test_sqlite_damaged_index_falls_back_to_a_scan_and_rebuild_repairs_it(tmp_path: Path, damage: str) -> None:
    """Searches scan a damaged index and its status says so; before 2026-12-04 an index whose
    damage has SQLite run out of memory failed both (``MemoryError``)."""
    path = tmp_path / "s.db"
    with SqliteStore(path) as s:
        fill(s)
        expected = set(found(s.text_search("quick")))
    if damage in GARBLED:
        damage_fts(path, damage)
    else:
        with closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("DELETE FROM text_fts_data WHERE id > 1")  # the FTS5 segments
    with SqliteStore(path) as s:
        status = s.index_status()
        assert (status["state"], status["search"]) == ("corrupt", "scan")
        assert status["problem"]
        assert set(found(s.text_search("quick"))) == expected
        s.rebuild_index()
        assert s.index_status()["state"] == "ok"
        assert set(found(s.text_search("quick"))) == expected


def test_sqlite_an_interrupted_rebuild_is_resumed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SqliteStore(path) as s:
        for n in range(12):
            s.put(obj(f"file:{n}", "file", f"common word{n}"), T0)
        s.REBUILD_BATCH = 5

        def crash(done: int, total: int) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            s.rebuild_index(crash)
        assert s.index_status()["state"] == "building"
        assert s.index_status()["search"] == "scan"
        assert len(s.text_search("common", k=50)) == 12  # scanning meanwhile
        assert s.rebuild_index() == 12
        assert len(s.text_search("common", k=50)) == 12
        assert s.index_status()["state"] == "ok"


def test_sqlite_migration_indexes_a_store_written_before_the_index(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SqliteStore(path) as s:
        fill(s)
        expected = found(s.text_search("quick"))
    drop_index(path)
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM migrations WHERE name IN ('m003_text_index', 'm004_fts_seq')")
    conn.commit()
    conn.close()
    with SqliteStore(path) as s:
        assert s.index_status()["state"] == "ok"
        assert found(s.text_search("quick")) == expected


def test_sqlite_evicted_text_leaves_no_trace_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    secret = "sk" + "9f3a7c" * 4
    with SqliteStore(path) as s:
        for n in range(20):  # several FTS5 segments
            s.put(obj(f"file:{n}", "file", f"filler text {n}"), T0)
        s.put(obj("memory:leak", "memory", f"the key is {secret}"), T0)
        s.put(obj("file:x", "file", "more filler"), T0)
        s.submit([Evict("memory:leak")])
        assert s.text_search(secret) == []
    data = path.read_bytes()
    wal = path.with_name(path.name + "-wal")
    data += wal.read_bytes() if wal.exists() else b""
    assert secret.encode() not in data
    assert secret.lower().encode() not in data


def test_sqlite_read_only_store_searches(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SqliteStore(path) as s:
        fill(s)
        expected = found(s.text_search("quick"))
    with SqliteStore(path, read_only=True) as s:
        assert found(s.text_search("quick")) == expected
        assert s.index_status()["state"] == "ok"
        with pytest.raises(StoreError, match="read-only"):
            s.rebuild_index()


# -- XTDB: the sidecar keeps up with other writers -------------------------------------------------


@pytest.mark.xtdb
def test_xtdb_sidecar_catches_up_with_another_writer(xtdb_url: str, tmp_path: Path, uid: str) -> None:
    from context_os.store.xtdb import XtdbStore

    with (
        XtdbStore(xtdb_url, text_index_path=tmp_path / "a.db") as a,
        XtdbStore(xtdb_url, text_index_path=tmp_path / "b.db") as b,
    ):
        b.text_search("warm up")  # b's index is current, then a writes behind its back
        a.put(obj(f"file:{uid}", "file", f"first{uid}"), T0)
        a.put(obj(f"file:{uid}", "file", f"second{uid}"), T0 + 10)
        a.sync()  # readable by other clients once the node indexed them (puts return before)
        assert b.index_status()["lags"] is True
        assert found(b.text_search(f"second{uid}")) == [(f"file:{uid}", "")]
        [old] = b.text_search(f"first{uid}", valid_time=T0 + 1)
        assert old.valid_time == T0
        assert b.index_status()["lags"] is False
        a.submit([Evict(f"file:{uid}")])
        assert b.text_search(uid) == []  # b still holds the text, never shows it


@pytest.mark.xtdb
def test_xtdb_sidecar_catches_up_with_versions_another_writer_no_longer_has_in_force(
    xtdb_url: str, tmp_path: Path, uid: str
) -> None:
    """The catch-up listed what to read by ``find`` (in force now): a version put, then deleted
    or corrected before this process looked, never reached its sidecar, and a search as of the
    time it was in force found nothing (the search model test found it). It reads the ids put
    since in the node's log now, and every version of them, corrections too."""
    from context_os.store import Delete
    from context_os.store.xtdb import XtdbStore

    gone, fixed = f"file:{uid}-gone", f"file:{uid}-fixed"
    with (
        XtdbStore(xtdb_url, text_index_path=tmp_path / "a.db") as a,
        XtdbStore(xtdb_url, text_index_path=tmp_path / "b.db") as b,
    ):
        b.text_search("warm up")  # b's index is current, then a writes behind its back
        put = a.put(obj(gone, "file", f"deleted{uid}"), T0)
        a.submit([Delete(gone, T0)])
        first = a.put(obj(fixed, "file", f"typo{uid}"), T0)
        a.put(obj(fixed, "file", f"fixed{uid}"), T0)  # a correction: the same valid time
        a.sync()
        assert found(b.text_search(f"deleted{uid}", valid_time=T0, tx_id=put.id)) == [(gone, "")]
        assert found(b.text_search(f"typo{uid}", valid_time=T0, tx_id=first.id)) == [(fixed, "")]
        assert b.text_search(f"deleted{uid} typo{uid}", valid_time=T0) == []  # not in force now


@pytest.mark.xtdb
def test_xtdb_sidecar_drops_evicted_text_from_its_file(xtdb_url: str, tmp_path: Path, uid: str) -> None:
    from context_os.store.xtdb import XtdbStore

    secret = f"sk{uid}secret"
    path = tmp_path / "idx.db"
    with XtdbStore(xtdb_url, text_index_path=path) as s:
        s.text_search("warm up")
        s.put(obj(f"memory:{uid}", "memory", f"key {secret}"), T0)
        assert len(s.text_search(secret)) == 1
        s.submit([Evict(f"memory:{uid}")])
        assert s.text_search(secret) == []
    data = b"".join(p.read_bytes() for p in tmp_path.glob("idx.db*"))
    assert secret.encode() not in data


@pytest.mark.xtdb
def test_xtdb_sidecar_drops_the_text_another_writer_evicted(xtdb_url: str, tmp_path: Path, uid: str) -> None:
    # ``ctxos objects evict`` on another machine (or with another sidecar) erased the object on
    # the node; this machine's sidecar kept its text in its file for good (searches only hid it).
    from context_os.context.evict import evict
    from context_os.store.xtdb import XtdbStore

    secret = f"sk{uid}elsewhere"
    with (
        XtdbStore(xtdb_url, text_index_path=tmp_path / "here.db") as here,
        XtdbStore(xtdb_url, text_index_path=tmp_path / "there.db") as there,
    ):
        here.put(obj(f"toolcall:{uid}:c1", "toolcall", f"TOKEN={secret}"), T0)
        here.sync()
        assert len(here.text_search(secret)) == 1
        evict(there, f"toolcall:{uid}:c1")
        there.sync()
        assert here.text_search(secret) == []  # catches up, and drops what the tombstone names
        data = b"".join(p.read_bytes() for p in tmp_path.glob("here.db*"))
        assert secret.encode() not in data


@pytest.mark.xtdb
def test_xtdb_sidecar_holds_back_own_writes_and_a_process_that_dies_loses_none(
    xtdb_url: str, tmp_path: Path, uid: str
) -> None:
    from context_os.store.xtdb import XtdbStore

    path = tmp_path / "idx.db"

    def held(word: str) -> bool:
        with closing(sqlite3.connect(path)) as c, c:
            return c.execute("SELECT count(*) FROM text_parts WHERE text LIKE ?", (f"%{word}%",)).fetchone()[0] == 0

    a = XtdbStore(xtdb_url, text_index_path=path)
    a.text_search("warm up")
    doc = obj(f"file:{uid}", "file", f"written{uid}")
    a.put(doc, T0)
    doc["content"] = f"changed{uid}"  # a caller's later change is not what was written
    for n in range(3):
        a.put(obj(f"file:{uid}:{n}", "file", f"held{uid} {n}"), T0)
    assert held(f"held{uid}")  # not in the file yet
    a.sync()
    # the process dies here: what it held back is read from the node by the next one
    with XtdbStore(xtdb_url, text_index_path=path) as b:
        assert sorted(h.id for h in b.text_search(f"held{uid}", k=10)) == [f"file:{uid}:{n}" for n in range(3)]
    assert not held(f"held{uid}")
    # a process that lives on writes what it held back when it closes: each text once
    a.close()
    with XtdbStore(xtdb_url, text_index_path=path) as c:
        assert found(c.text_search(f"written{uid}")) == [(f"file:{uid}", "")]
        assert c.text_search(f"changed{uid}") == []
        with closing(sqlite3.connect(path)) as conn, conn:
            (n,) = conn.execute("SELECT count(*) FROM text_parts WHERE text LIKE ?", (f"%held{uid}%",)).fetchone()
        assert n == 3


def test_texts_wait_for_a_batch_but_a_search_never_misses_them(store: Store, uid: str) -> None:
    for n in range(3):
        store.put(obj(f"file:{uid}:{n}", "file", f"pending{uid} text {n}"), T0)
    assert store.index_status()["pending"] >= 3  # not in the FTS5 table yet
    hits = mine(store.text_search(f"pending{uid}", k=10), uid)
    assert sorted(h.id for h in hits) == [f"file:{uid}:{n}" for n in range(3)]
    assert store.index_status()["pending"] == 0  # the search moved them in
    store.put(obj(f"file:{uid}:x", "file", f"pending{uid} more"), T0)
    store.submit([Evict(f"file:{uid}:x")])  # evicted while still held back
    assert [h.id for h in mine(store.text_search(f"pending{uid}", k=10), uid)] != []
    assert f"file:{uid}:x" not in {h.id for h in store.text_search(f"pending{uid}", k=10)}


def test_sqlite_a_batch_of_texts_reaches_the_index_with_its_write(tmp_path: Path) -> None:
    from context_os.store.text_index import FTS_BATCH

    with SqliteStore(tmp_path / "s.db") as s:
        for n in range(FTS_BATCH + 5):
            s.put(obj(f"file:{n}", "file", f"batched text {n}"), T0)
        status = s.index_status()
        assert status["parts"] == FTS_BATCH + 5 and status["pending"] < FTS_BATCH


def test_sqlite_a_read_only_reader_finds_what_a_writer_holds_back(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SqliteStore(path) as writer:
        writer.put(obj("file:a", "file", "alpha indexed text"), T0)
        writer.text_search("alpha")  # in the FTS5 table now
        writer.put(obj("file:b", "file", "alpha waiting text"), T0)
        writer.put(obj("file:c", "file", "alpha waiting, alpha again"), T0)
        assert writer.index_status()["pending"] == 2
        with SqliteStore(path, read_only=True) as reader:
            hits = reader.text_search("alpha", k=10)
            assert sorted(h.id for h in hits) == ["file:a", "file:b", "file:c"]
            assert hits[0].id == "file:c"  # two matches rank first among the held back
            assert reader.text_search("waiting", k=10)[0].id in ("file:b", "file:c")
        assert writer.index_status()["pending"] == 2  # a reader does not write
    with SqliteStore(path) as s:
        assert s.index_status()["pending"] == 2  # opening and closing writes nothing either
        assert len(s.text_search("alpha", k=10)) == 3
        assert s.index_status()["pending"] == 0


LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


def test_sqlite_a_search_while_another_process_holds_the_write_lock_finds_every_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search moves the texts held back into the index first; while another process kept the
    write lock past the busy timeout, the lock's error was taken for a damaged index and the
    search scanned every version, without stems: "run test" found nothing of "running the
    tests". It matches the held-back texts apart, as a read-only store does."""
    path = tmp_path / "s.db"
    monkeypatch.setattr(SqliteStore, "BUSY_TIMEOUT_S", 0.5)
    monkeypatch.setattr(SqliteStore, "FLUSH_WAIT_S", 0.2, raising=False)
    with SqliteStore(path) as s:
        s.put(obj("file:a", "file", "running the tests once"), T0)
        s.text_search("tests")  # in the FTS5 table now
        s.put(obj("file:b", "file", "running the tests twice"), T0)
        holder = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            assert sorted(found(s.text_search("run test"))) == [("file:a", ""), ("file:b", "")]
        finally:
            holder.communicate("done\n", timeout=60)
        assert s.index_status()["pending"] == 1  # moved by the next search that gets the lock
        assert sorted(found(s.text_search("run test"))) == [("file:a", ""), ("file:b", "")]
        assert s.index_status()["pending"] == 0


@pytest.mark.parametrize("garbled", list(GARBLED))
@pytest.mark.parametrize("open_again", [False, True])
def test_sqlite_a_damaged_index_is_dropped_by_the_write_that_finds_it_and_the_write_commits(
    tmp_path: Path, open_again: bool, garbled: str
) -> None:
    """Writes go on without a damaged index: before 2026-12-02 every write with a batch of parts
    to move into it failed ("database disk image is malformed"), and so did every eviction, in a
    process that had the FTS5 table open already (``open_again`` False: SQLite then ends the
    whole transaction) and in one opening it after the damage; before 2026-12-04, on an index
    whose damage has SQLite run out of memory, too."""
    path = tmp_path / "s.db"
    secret = "sk" + "7d2e9b" * 4
    with SqliteStore(path) as s:
        s.put(obj("memory:leak", "memory", f"the key is {secret}"), T0)
        s.put(obj("memory:keep", "memory", "a quick note"), T0)
        s.text_search("quick")  # in the FTS5 table
        if not open_again:
            damage_fts(path, garbled)
            s.submit([Evict("memory:leak")])
    if open_again:
        damage_fts(path, garbled)
    with SqliteStore(path) as s:
        if open_again:
            assert s.submit([Evict("memory:leak")]).committed
        tx = s.submit([Put(obj(f"file:{n}", "file", f"quick text {n}"), T0) for n in range(text_index.FTS_BATCH)])
        assert tx.committed and s.get("file:7", T0) is not None
        status = s.index_status()
        assert (status["state"], status["search"]) == ("corrupt", "scan")
        assert "a write found it damaged and dropped it" in status["problem"]
        assert len(s.text_search("quick", k=2000)) == text_index.FTS_BATCH + 1  # scanned
        assert s.text_search(secret) == []
        s.rebuild_index()
        status = s.index_status()
        assert (status["state"], status["search"], status.get("problem")) == ("ok", "index", None)
        assert len(s.text_search("quick", k=2000)) == text_index.FTS_BATCH + 1
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("s.db"))
    assert secret.encode() not in data


@pytest.mark.xtdb
@pytest.mark.parametrize("garbled", list(GARBLED))
@pytest.mark.parametrize("open_again", [False, True])
def test_xtdb_a_damaged_sidecar_index_is_dropped_by_the_write_that_finds_it_and_the_write_commits(
    xtdb_url: str, tmp_path: Path, uid: str, open_again: bool, garbled: str
) -> None:
    """The same for the sidecar index an XTDB store keeps: before 2026-12-02 an eviction the node
    took failed on this machine (the sidecar could not drop the text, which stayed in its file),
    and every batch of held-back texts failed to go in, the index lagging for good."""
    from context_os.store.xtdb import XtdbStore

    path = tmp_path / "idx.db"
    secret = "sk" + uid * 2
    leak = f"memory:{uid}:leak"
    with XtdbStore(xtdb_url, text_index_path=path) as s:
        s.put(obj(leak, "memory", f"the key is {secret}"), T0)
        s.put(obj(f"memory:{uid}:keep", "memory", f"a quick note {uid}"), T0)
        assert found(mine(s.text_search(f"quick {uid}"), uid)) == [(f"memory:{uid}:keep", "")]  # in the FTS5 table
        if not open_again:
            damage_fts(path, garbled)
            assert s.submit([Evict(leak)]).committed
    if open_again:
        damage_fts(path, garbled)
    with XtdbStore(xtdb_url, text_index_path=path) as s:
        if open_again:
            assert s.submit([Evict(leak)]).committed
        texts = [f"quick text {uid} {n}" for n in range(text_index.FTS_BATCH)]  # a batch of parts to move in
        assert s.submit([Put(page(uid, 0, *texts), T0)]).committed
        status = s.index_status()
        assert (status["state"], status["search"]) == ("corrupt", "scan")
        assert "a write found it damaged and dropped it" in status["problem"]
        assert len(mine(s.text_search(f"quick {uid}", k=2000), uid)) == text_index.FTS_BATCH + 1  # scanned
        assert s.text_search(secret) == []
    with XtdbStore(xtdb_url, text_index_path=path) as s:
        assert s.index_status()["state"] == "corrupt"  # until rebuilt
        s.rebuild_index()
        status = s.index_status()
        assert (status["state"], status["search"], status.get("problem")) == ("ok", "index", None)
        assert len(mine(s.text_search(f"quick {uid}", k=2000), uid)) == text_index.FTS_BATCH + 1
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("idx.db"))
    assert secret.encode() not in data


def test_sqlite_index_status_while_another_process_writes_is_not_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FTS5's integrity check moves the held-back parts in first, a write: begun without the
    lock, it failed at once with "database is locked" whenever another process wrote, and the
    status said ``corrupt`` (58 of 200 times beside a session writing turns, before 2026-12-02).
    It waits for the lock a while, then says it did not check."""
    path = tmp_path / "s.db"
    monkeypatch.setattr(SqliteStore, "FLUSH_WAIT_S", 0.2)
    with SqliteStore(path) as s:
        fill(s)
        holder = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            status = s.index_status()
        finally:
            holder.communicate("done\n", timeout=60)
        assert (status["state"], status["search"], status.get("checked")) == ("ok", "index", False), status.get(
            "problem"
        )
        status = s.index_status()  # the lock given back: checked
        assert (status["state"], status.get("checked")) == ("ok", True)


def test_a_sidecar_index_s_status_while_another_process_writes_it_is_not_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for the sidecar index an XTDB store keeps (here beside an embedded store)."""
    monkeypatch.setattr(text_index.SidecarIndex, "SEARCH_WAIT_S", 0.2)
    with SqliteStore(tmp_path / "s.db") as s:
        fill(s)
        sidecar = text_index.SidecarIndex(tmp_path / "idx.db", s)
        try:
            assert sidecar.catch_up() > 0
            holder = subprocess.Popen(
                [sys.executable, "-c", LOCK_HOLDER, str(tmp_path / "idx.db")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
                status = sidecar.status()
            finally:
                holder.communicate("done\n", timeout=60)
            assert (status["state"], status.get("checked")) == ("ok", False), status.get("problem")
            status = sidecar.status()
            assert (status["state"], status.get("checked")) == ("ok", True)
        finally:
            sidecar.close()


def test_sqlite_a_find_by_a_key_not_indexed_yet_while_another_process_writes_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first find by a meta key indexes it, under the write lock: while another process
    kept the lock, the find waited 30 s, then failed with "database is locked" (before
    2026-12-02). It waits a while, then finds without the index; the finds after it do not wait
    again (an MCP read, five finds, waited five times); a later find indexes it."""
    from context_os.store import text_index

    path = tmp_path / "s.db"
    monkeypatch.setattr(SqliteStore, "FLUSH_WAIT_S", 0.2)
    monkeypatch.setattr(SqliteStore, "BUSY_TIMEOUT_S", 5.0)  # (what the find waited, shorter)
    waits: list[float] = []
    begin_within = text_index.begin_within

    def spied(conn: Any, seconds: float) -> bool:
        waits.append(seconds)
        return begin_within(conn, seconds)

    monkeypatch.setattr(text_index, "begin_within", spied)
    with SqliteStore(path) as s:
        fill(s)
        s.put(obj("memory:m", "memory", "a note", topic="deploy"), T0)
        holder = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            assert [v.id for v in s.find("memory", {"topic": "deploy"}, valid_time=T0)] == ["memory:m"]
            assert [v.id for v in s.find(None, {"topic": "deploy"}, valid_time=T0)] == ["memory:m"]
        finally:
            holder.communicate("done\n", timeout=60)
        assert waits == [0.2, 0.0]
        assert "meta:topic" not in s._indexed
        assert [v.id for v in s.find("memory", {"topic": "deploy"}, valid_time=T0)] == ["memory:m"]
        assert "meta:topic" in s._indexed


@pytest.mark.xtdb
def test_xtdb_a_search_while_another_process_holds_the_sidecar_s_write_lock_answers(
    xtdb_url: str, tmp_path: Path, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search brings the sidecar up to date first (another writer's texts, its own held
    back); while another process kept the file's write lock, it waited 60 s, then took the
    lock's error for a damaged index and scanned every version, without stems: "frobnicate
    widget" found nothing of "frobnicating the widgets". It searches what the file holds; the
    next search finds the rest."""
    from context_os.store.text_index import SidecarIndex
    from context_os.store.xtdb import XtdbStore

    monkeypatch.setattr(SidecarIndex, "SEARCH_WAIT_S", 0.2, raising=False)
    path = tmp_path / "idx.db"
    with XtdbStore(xtdb_url, text_index_path=path) as s, XtdbStore(xtdb_url, text_index_path=tmp_path / "w.db") as w:
        s.put(obj(f"file:{uid}:a", "file", f"frobnicating the widgets once {uid}"), T0)
        s.sync()
        assert found(mine(s.text_search("frobnicate widget"), uid)) == [(f"file:{uid}:a", "")]  # in the file now
        w.put(obj(f"file:{uid}:b", "file", f"frobnicating the widgets twice {uid}"), T0)  # another writer
        w.sync()
        holder = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            assert found(mine(s.text_search("frobnicate widget"), uid)) == [(f"file:{uid}:a", "")]
        finally:
            holder.communicate("done\n", timeout=120)
        assert sorted(found(mine(s.text_search("frobnicate widget"), uid))) == [
            (f"file:{uid}:a", ""),
            (f"file:{uid}:b", ""),
        ]
        assert s.index_status()["lags"] is False


def test_sqlite_an_index_from_before_cjk_was_split_keeps_working_until_rebuilt(tmp_path: Path) -> None:
    """An index made before 2026-12-03 holds a CJK run as one token: it goes on as it was (its
    checks pass, its other words are found, an eviction deletes what it holds) and says so,
    until ``rebuild_index`` makes it anew."""
    path = tmp_path / "s.db"
    with SqliteStore(path) as s:
        s.put(obj("file:a", "file", "我们修复了日本語の問題 and a quick fix"), T0)
        s.put(obj("file:b", "file", "别的文件 quick"), T0)
        s.text_search("quick")
    unsplit_keyword_index(path)
    with SqliteStore(path) as s:
        status = s.index_status()
        assert (status["state"], status["splits_cjk"]) == ("ok", False)  # FTS5's own check passes
        assert sorted(found(s.text_search("quick"))) == [("file:a", ""), ("file:b", "")]
        assert s.text_search("修复") == []
        s.submit([Evict("file:b")])
        assert found(s.text_search("quick")) == [("file:a", "")]
        assert s.index_status()["state"] == "ok"
        s.rebuild_index()
        status = s.index_status()
        assert (status["state"], status["splits_cjk"]) == ("ok", True)
        assert found(s.text_search("修复")) == [("file:a", "")]


def test_sqlite_an_index_from_before_the_batches_keeps_each_text_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SqliteStore(path) as s:
        fill(s)
        s.text_search("quick")  # everything in the FTS5 table, as an older context_os left it
        expected = found(s.text_search("quick", k=50))
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM migrations WHERE name = 'm004_fts_seq'")
    conn.execute("DELETE FROM text_meta WHERE key = 'fts_seq'")
    conn.commit()
    conn.close()
    with SqliteStore(path) as s:
        s.put(obj("file:new", "file", "a quick new text"), T0)
        hits = found(s.text_search("quick", k=50))
        assert hits == sorted(set(hits), key=hits.index)  # no text twice
        assert set(hits) == set(expected) | {("file:new", "")}
        assert s.index_status()["state"] == "ok"  # FTS5's own integrity check passes
