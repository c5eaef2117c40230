"""``ctxos verify`` on a store where one document no longer parses: it is named as unreadable,
and every other document, and every frame, is still checked and counted."""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import ctxos

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled demo session, recorded as session ``d1`` (88 frames)."""
    db = tmp_path_factory.mktemp("verify") / "demo.db"
    ctxos("demo", "--json", "--no-verify", "--session", "d1", store=db)
    return db


def _newest_row(conn: sqlite3.Connection, id: str) -> int:
    row: int = conn.execute(
        "SELECT v.doc FROM versions v JOIN entities e ON e.eid = v.eid WHERE e.id = ? ORDER BY v.tx_id DESC LIMIT 1",
        (id,),
    ).fetchone()[0]
    return row


def _counts(conn: sqlite3.Connection) -> tuple[int, int]:
    """Documents and stored versions (but deletions) of the store, counted in SQL."""
    docs = conn.execute("SELECT count(*) FROM entities").fetchone()[0]
    versions = conn.execute("SELECT count(*) FROM versions WHERE doc IS NOT NULL").fetchone()[0]
    return docs, versions


def _verify(db: Path) -> dict[str, Any]:
    proc = ctxos("verify", "--frames", "--json", "--jobs", "1", store=db, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr)
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def test_one_unreadable_document_hides_no_other_document_nor_any_frame(demo: Path, tmp_path: Path) -> None:
    # Before 2026-12-02 the newest version of session:d1 cut short made the listing of the
    # documents in force fail: 227 versions of 108 documents re-hashed, "frames: 0 verified, 0
    # failed", documents_unchecked 0 and frames_unchecked 0, and frame 50's damage unreported.
    db = tmp_path / "cut.db"
    shutil.copyfile(demo, db)
    with closing(sqlite3.connect(db)) as conn, conn:
        ref = _newest_row(conn, "frame:d1:000050")
        frame = json.loads(conn.execute("SELECT json FROM docs WHERE id = ?", (ref,)).fetchone()[0])
        frame["content"]["tokens"] += 1000
        conn.execute("UPDATE docs SET json = ? WHERE id = ?", (json.dumps(frame), ref))
        conn.execute("UPDATE docs SET json = substr(json, 1, 50) WHERE id = ?", (_newest_row(conn, "session:d1"),))
        documents, versions = _counts(conn)
    report = _verify(db)
    assert (report["documents"], report["documents_unchecked"]) == (documents, 0), report
    [unreadable] = report["damaged"]
    assert unreadable["id"] == "session:d1" and "does not parse" in unreadable["error"]
    assert report["versions_checked"] == versions - 1  # every version but the one cut short
    assert [(m["id"], m["fields"]) for m in report["mismatches"]] == [
        ("frame:d1:000050", ["content_hash", "object_hash"])
    ]
    # every frame checked: frame 50 fails on its own hashes, the last one on the session row it
    # re-renders from, and the other 86 verify
    failed = {f["id"]: f["problems"] for f in report["frames_failed"]}
    assert sorted(failed) == ["frame:d1:000050", "frame:d1:000088"], failed
    assert "cannot be re-rendered" in failed["frame:d1:000088"][0] and "session:d1" in failed["frame:d1:000088"][0]
    assert (report["frames_verified"], report["frames_evicted"], report["frames_unchecked"]) == (86, [], 0)
    text = ctxos("verify", "--frames", "--jobs", "1", store=db, check=False).stdout
    assert f"{versions - 1:,} versions of {documents:,} documents re-hashed, 1 mismatch(es), 1 unreadable" in text
    assert "frames: 86 verified, 2 failed" in text


def test_a_frame_whose_own_document_does_not_parse_is_a_failed_frame(demo: Path, tmp_path: Path) -> None:
    db = tmp_path / "frame.db"
    shutil.copyfile(demo, db)
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE docs SET json = substr(json, 1, 50) WHERE id = ?", (_newest_row(conn, "frame:d1:000060"),))
        documents, versions = _counts(conn)
    report = _verify(db)
    assert (report["documents"], report["documents_unchecked"], report["versions_checked"]) == (
        documents,
        0,
        versions - 1,
    )
    assert [d["id"] for d in report["damaged"]] == ["frame:d1:000060"] and report["mismatches"] == []
    [failed] = report["frames_failed"]
    assert failed["id"] == "frame:d1:000060" and failed["problems"][0].startswith("its document cannot be read: ")
    assert (report["frames_verified"], report["frames_unchecked"]) == (87, 0)
