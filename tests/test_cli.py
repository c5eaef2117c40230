"""End-to-end through the ``ctxos`` console script, in a subprocess, on real store files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

CTXOS = [str(Path(sys.executable).parent / "ctxos")]


def ctxos(*args: str, store: Path | str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [*CTXOS, *(["--store", str(store)] if store else []), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy(), timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    db = tmp_path_factory.mktemp("cli") / "demo.db"
    out = json.loads(ctxos("demo", "--json", "--session", "d1", store=db).stdout)
    return db, out


def test_demo_meets_its_targets(demo):
    _, out = demo
    assert out["turns"] == 88 == out["frames"] == out["frames_verified"]
    assert out["orphaned_tool_results"] == 0
    assert out["tokens_assembled"] <= 0.40 * out["tokens_full"]
    assert sum(r["tokens_full"] for r in out["per_turn"]) == out["tokens_full"]
    assert sum(r["tokens_assembled"] for r in out["per_turn"]) == out["tokens_assembled"]


def test_demo_uses_the_user_data_dir_by_default(tmp_path):
    env_home = Path(os.environ["XDG_DATA_HOME"])
    ctxos("demo", "--json", "--no-verify")
    assert (env_home / "context_os" / "store.db").exists()


def test_frames_and_frame(demo):
    db, out = demo
    rows = json.loads(ctxos("frames", "d1", "--json", store=db).stdout)
    assert [r["turn"] for r in rows] == list(range(1, 89))
    assert [r["tokens_assembled"] for r in rows] == [r["tokens_assembled"] for r in out["per_turn"]]
    frame = json.loads(ctxos("frame", "d1", "40", "--json", store=db).stdout)
    assert frame["ok"] and frame["rendered_hash"] == rows[39]["rendered_hash"]
    assert frame["messages"][0]["role"] == "system"
    text = ctxos("frame", "d1", "40", "--no-messages", store=db).stdout
    assert "verified" in text


def test_inspect_lists_versions_with_hashes_and_state_changes(demo):
    db, _ = demo
    versions = json.loads(ctxos("inspect", "chat:d1:00000", "--json", store=db).stdout)
    assert len(versions) >= 2
    for v in versions:
        assert {"valid_time", "tx_time", "tx_id", "content_hash", "object_hash"} <= set(v)
        assert v["content_hash"].startswith("b3:")
    tx_ids = [v["tx_id"] for v in versions]
    assert tx_ids == sorted(tx_ids)
    tool = next(
        r
        for r in json.loads(ctxos("frame", "d1", "10", "--json", store=db).stdout)["refs"]
        if r["id"].startswith("toolcall:")
    )
    changes = json.loads(ctxos("inspect", tool["id"], "--states", "--json", store=db).stdout)
    assert changes[-1]["actor"] == "policy" and changes[-1]["state"] == "inactive"
    human = ctxos("inspect", tool["id"], store=db).stdout
    assert "state changes" in human and "policy" in human


def test_inspect_as_of_and_diff(demo):
    db, _ = demo
    versions = json.loads(ctxos("inspect", "session:d1", "--json", store=db).stdout)
    first = json.loads(ctxos("inspect", "session:d1", "--as-of", versions[0]["valid_time"], "--json", store=db).stdout)
    assert first["object_hash"] == versions[0]["object_hash"]
    diff = json.loads(ctxos("inspect", "session:d1", "--diff", "1", "2", "--json", store=db).stdout)
    assert diff["diff"] == ""  # the session's content (harness, workspace) does not change; its meta does
    page = ctxos("inspect", "chat:d1:00000", "--diff", "1", "2", store=db).stdout
    assert page.startswith("---") and "+" in page


def test_verify_reports_clean_then_catches_tampering(demo, tmp_path):
    db, _ = demo
    report = json.loads(ctxos("verify", "--json", store=db).stdout)
    assert report["mismatches"] == [] and report["versions_checked"] > report["documents"] > 0
    copy = tmp_path / "tampered.db"
    copy.write_bytes(db.read_bytes())
    wal = Path(str(db) + "-wal")
    if wal.exists():
        Path(str(copy) + "-wal").write_bytes(wal.read_bytes())
    import sqlite3

    conn = sqlite3.connect(copy)
    conn.execute("UPDATE docs SET json = replace(json, 'refactored', 'REFACTORED')")
    conn.commit()
    conn.close()
    proc = ctxos("verify", "--json", store=copy, check=False)
    assert proc.returncode == 1
    bad = json.loads(proc.stdout)["mismatches"]
    assert bad and all("content_hash" in b["fields"] for b in bad)


def test_verify_frames(demo):
    db, _ = demo
    report = json.loads(ctxos("verify", "--frames", "--json", store=db).stdout)
    assert report["frames_verified"] == 88 and report["frames_failed"] == []


def test_status_and_sessions(demo):
    db, _ = demo
    status = json.loads(ctxos("status", "--json", store=db).stdout)
    assert status["store"] == f"sqlite://{db}" and status["by_kind"]["frame"] == 88
    sessions = json.loads(ctxos("sessions", "--json", store=db).stdout)
    assert {"session": "d1", "harness": "openai", "turns": 88}.items() <= sessions[0].items()


def test_errors_are_one_line_and_exit_1(tmp_path):
    proc = ctxos("inspect", "file:nope", "--json", store=tmp_path / "e.db", check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("Error: NotFound:") and "Traceback" not in proc.stderr
    proc = ctxos("status", store="postgres://x", check=False)
    assert proc.returncode == 1 and "unknown store URL" in proc.stderr
