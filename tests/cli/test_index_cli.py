"""``ctxos index status|rebuild`` through the real command tree (CliRunner), on real store files."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from context_os.cli import cli
from context_os.cli.index import register
from context_os.hashing import doc_hashes
from context_os.store.sqlite import SqliteStore
from tests.helpers import unsplit_keyword_index

pytestmark = pytest.mark.e2e

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def ctxos() -> click.Group:
    """The ``ctxos`` group with the index commands (a copy: the real group is left as it is)."""
    group = click.Group(cli.name, commands=dict(cli.commands), params=cli.params, callback=cli.callback)
    register(group)
    return group


def run(group: click.Group, db: Path, *args: str) -> Result:
    return CliRunner().invoke(group, ["--store", str(db), "index", *args])


def obj(id: str, kind: str, content: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"id": id, "kind": kind, "content": content, "meta": {}}
    d.update(doc_hashes(d))
    return d


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    with SqliteStore(path) as s:
        s.put(obj("file:a", "file", "the quick brown fox"), T0)
        s.put(obj("memory:m", "memory", "a quick memo"), T0)
        s.put(obj("frame:x", "frame", {"not": "indexed"}), T0)
    return path


def test_status_json(ctxos: click.Group, db: Path) -> None:
    r = run(ctxos, db, "status", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["store"] == f"sqlite://{db}"
    assert (report["state"], report["parts"], report["documents"], report["lags"]) == ("ok", 2, 2, False)
    assert report["last_indexed_tx"] == report["store_tx"] == 3


def test_status_table(ctxos: click.Group, db: Path) -> None:
    r = run(ctxos, db, "status")
    assert r.exit_code == 0, r.output
    assert "state" in r.stdout and "ok" in r.stdout and "parts" in r.stdout
    assert "rebuild" not in r.stdout


def test_status_says_an_index_from_before_cjk_was_split_wants_a_rebuild(ctxos: click.Group, db: Path) -> None:
    unsplit_keyword_index(db)
    r = run(ctxos, db, "status")
    assert r.exit_code == 0, r.output
    assert "Chinese, Japanese and Korean" in r.stdout and "`ctxos index rebuild`" in r.stdout
    assert json.loads(run(ctxos, db, "status", "--json").stdout)["splits_cjk"] is False
    assert run(ctxos, db, "rebuild").exit_code == 0
    assert json.loads(run(ctxos, db, "status", "--json").stdout)["splits_cjk"] is True
    assert "Chinese" not in run(ctxos, db, "status").stdout


def test_rebuild_repairs_a_missing_index(ctxos: click.Group, db: Path) -> None:
    conn = sqlite3.connect(db)
    for table in ("text_fts", "text_parts", "text_meta"):
        conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.close()
    r = run(ctxos, db, "status")
    assert "the index is missing" in r.stdout and "ctxos index rebuild" in r.stdout
    r = run(ctxos, db, "rebuild")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "the index was missing: repaired, 2 parts indexed"
    assert json.loads(run(ctxos, db, "status", "--json").stdout)["state"] == "ok"
    with SqliteStore(db) as s:
        assert {h.id for h in s.text_search("quick")} == {"file:a", "memory:m"}


def test_rebuild_repairs_a_damaged_index_json(ctxos: click.Group, db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM text_fts_data WHERE id > 1")
    conn.commit()
    conn.close()
    assert json.loads(run(ctxos, db, "status", "--json").stdout)["state"] == "corrupt"
    r = run(ctxos, db, "rebuild", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert (report["state_before"], report["repaired"], report["state"], report["parts"]) == ("corrupt", True, "ok", 2)
    assert report["problem_before"]


def test_rebuild_of_a_sound_index(ctxos: click.Group, db: Path) -> None:
    r = run(ctxos, db, "rebuild")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "rebuilt the index: 2 parts indexed"


def test_rebuild_of_one_part_says_one_part(ctxos: click.Group, tmp_path: Path) -> None:
    path = tmp_path / "one.db"
    with SqliteStore(path) as s:
        s.put(obj("file:a", "file", "the quick brown fox"), T0)
    r = run(ctxos, path, "rebuild")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "rebuilt the index: 1 part indexed"  # (it said "1 parts")


def test_an_interrupted_rebuild_says_what_it_left_and_the_next_one_finishes(
    ctxos: click.Group, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = SqliteStore.rebuild_index

    def interrupted(self: SqliteStore, progress: Any = None) -> int:
        def ctrl_c(done: int, total: int) -> None:  # Ctrl-C once the first batch is in
            raise KeyboardInterrupt

        return real(self, ctrl_c)

    monkeypatch.setattr(SqliteStore, "REBUILD_BATCH", 1)
    monkeypatch.setattr(SqliteStore, "rebuild_index", interrupted)
    r = run(ctxos, db, "rebuild")
    assert r.exit_code == 130, r.output
    assert "interrupted: the index is half built" in r.stderr and "goes on from where it stopped" in r.stderr
    assert json.loads(run(ctxos, db, "status", "--json").stdout)["state"] == "building"
    # a script reading stdout gets JSON, saying the same (the ``ctxos`` group itself reads ``--json``)
    r = CliRunner().invoke(cli, ["--store", str(db), "index", "rebuild", "--json"])
    error = json.loads(r.stdout)["error"]
    assert (r.exit_code, error["type"], error["exit_status"]) == (130, "Interrupted", 130)
    assert error["message"].startswith("interrupted: the index is half built")
    monkeypatch.setattr(SqliteStore, "rebuild_index", real)
    r = run(ctxos, db, "rebuild")
    assert r.exit_code == 0 and r.stdout.strip() == "the index was half built: repaired, 2 parts indexed"


def test_a_store_that_does_not_exist_fails_cleanly(ctxos: click.Group, tmp_path: Path) -> None:
    r = run(ctxos, tmp_path / "nope.db", "status")
    assert r.exit_code == 1
    assert "NotFound" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "nope.db").exists()
