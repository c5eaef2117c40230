"""``ctxos frames show|diff|verify`` of a frame that showed what was evicted since: no damage
(exit status 0, as the exit table says), marked ``EVICTED``, the eviction named; damage beside it
still fails."""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.cli.test_cli import ctxos

pytestmark = pytest.mark.e2e

CALL = "toolcall:d1:toolu_012yuiPP1VAfh196GXaAmT8D"
"""A tool call of the demo's fifth turn, whose result later turns show collapsed."""


@pytest.fixture(scope="module")
def evicted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo session ``d1`` with ``CALL`` evicted since its frames were made."""
    db = tmp_path_factory.mktemp("frames") / "evicted.db"
    ctxos("demo", "--json", "--no-verify", "--session", "d1", store=db)
    ctxos("objects", "evict", CALL, "--yes", store=db)
    return db


def test_frames_show_and_diff_of_a_frame_that_showed_what_was_evicted_exit_0(evicted: Path) -> None:
    # before 2026-12-02 both exited 1, where `frames verify` of the same frame exits 0; the text
    # named the eviction nowhere, and `frames show --json` had no `evicted`
    verify = json.loads(ctxos("frames", "verify", "d1", "5", "--json", store=evicted).stdout)
    [row] = verify["frames"]
    assert row["evicted"] == [CALL] and verify["ok"] is True
    shown = ctxos("frames", "show", "d1", "5", "--no-messages", store=evicted, check=False)
    assert shown.returncode == 0, (shown.stdout, shown.stderr)
    assert "frame:d1:000005: EVICTED (it showed what was erased since; nothing else is wrong)" in shown.stdout
    assert f"  - {CALL} was evicted at " in shown.stdout and "MISMATCH" not in shown.stdout
    report = json.loads(ctxos("frames", "show", "d1", "5", "--no-messages", "--json", store=evicted).stdout)
    assert (report["ok"], report["evicted"]) == (False, [CALL])
    assert report["problems"] == row["problems"] and any(
        p.startswith(f"{CALL} was evicted at ") for p in row["problems"]
    )
    diff = ctxos("frames", "diff", "d1", "5", "6", store=evicted, check=False)
    assert diff.returncode == 0 and diff.stdout.count("EVICTED") == 2, (diff.stdout, diff.stderr)
    assert ctxos("frames", "diff", "d1", "6", "--json", store=evicted).returncode == 0


def test_a_frame_damaged_beside_what_was_evicted_still_fails_show_and_diff(evicted: Path, tmp_path: Path) -> None:
    db = tmp_path / "damaged.db"
    shutil.copyfile(evicted, db)
    with closing(sqlite3.connect(db)) as conn, conn:
        [(ref, text)] = conn.execute(
            "SELECT d.id, d.json FROM docs d JOIN versions v ON v.doc = d.id JOIN entities e ON e.eid = v.eid"
            " WHERE e.id = 'frame:d1:000005' ORDER BY v.tx_id DESC LIMIT 1"
        ).fetchall()
        frame = json.loads(text)
        frame["content"]["tokens"] += 1000
        conn.execute("UPDATE docs SET json = ? WHERE id = ?", (json.dumps(frame), ref))
    shown = ctxos("frames", "show", "d1", "5", "--no-messages", store=db, check=False)
    assert shown.returncode == 1 and "frame:d1:000005: MISMATCH" in shown.stdout, shown.stdout
    report = json.loads(ctxos("frames", "show", "d1", "5", "--no-messages", "--json", store=db, check=False).stdout)
    assert (report["ok"], report["evicted"]) == (False, [])
    assert ctxos("frames", "diff", "d1", "5", "6", store=db, check=False).returncode == 1
    assert ctxos("frames", "verify", "d1", "5", store=db, check=False).returncode == 1
