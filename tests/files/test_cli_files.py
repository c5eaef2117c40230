"""``ctxos files``, ``ctxos inspect PATH`` and ``ctxos evict``, through the console script."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from context_os import Session
from context_os.files import FileTools, Workspace
from context_os.store.sqlite import SqliteStore
from tests.test_cli import ctxos

pytestmark = pytest.mark.e2e


@pytest.fixture
def setup(root: Path, db: SqliteStore) -> tuple[Path, dict[str, str]]:
    """A session that read two files, one of which then changed and one was renamed."""
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("A = 1\n")
    (root / "b.txt").write_text("b\n")
    session = Session.open(db, "s1", harness="openai")
    tools = FileTools(session, Workspace(root))
    a = tools.read("src/a.py")["id"]
    b = tools.read("b.txt")["id"]
    tools.deactivate("b.txt")
    (root / "src" / "a.py").write_text("A = 2\n")
    tools.observe("sed -i s/1/2/ src/a.py", "")
    os.rename(root / "b.txt", root / "renamed.txt")
    tools.observe("mv b.txt renamed.txt", "")
    db.close()
    return db.path, {"a": a, "b": b}


def test_files_lists_state_and_staleness(setup) -> None:
    store, ids = setup
    rows = {r["id"]: r for r in json.loads(ctxos("files", "s1", "--json", store=store).stdout)}
    a, b = rows[ids["a"]], rows[ids["b"]]
    assert (a["path"], a["state"], a["version_shown"], a["version_latest"], a["stale"]) == (
        "src/a.py",
        "active",
        1,
        2,
        True,
    )
    assert (b["path"], b["path_shown"], b["state"], b["stale"]) == ("renamed.txt", "b.txt", "inactive", True)
    text = ctxos("files", "s1", store=store).stdout
    assert "src/a.py" in text and "stale" in text
    assert "NotFound" in ctxos("files", "nope", store=store, check=False).stderr


def test_inspect_resolves_a_path_and_shows_versions_across_renames(setup, root: Path) -> None:
    store, ids = setup
    for arg in (str(root / "renamed.txt"), "renamed.txt", str(root / "b.txt")):  # now, workspace-relative, old name
        rows = json.loads(ctxos("inspect", arg, "--json", store=store).stdout)
        assert [(r["version"], r["path"]) for r in rows] == [(1, "b.txt"), (2, "renamed.txt")], arg
    text = ctxos("inspect", "renamed.txt", store=store).stdout
    assert text.startswith(ids["b"]) and "v1: b.txt" in text and "v2: renamed.txt" in text
    diff = json.loads(ctxos("inspect", "src/a.py", "--diff", "1", "2", "--json", store=store).stdout)
    assert diff["id"] == ids["a"] and "+A = 2" in diff["diff"]
    assert "no object" in ctxos("inspect", "no/such/file.py", store=store, check=False).stderr


def test_evict_needs_yes_and_erases_every_version(setup) -> None:
    store, ids = setup
    dry = ctxos("evict", "src/a.py", "--json", store=store, check=False)
    assert dry.returncode == 1 and json.loads(dry.stdout) == {"id": ids["a"], "versions": 2, "evicted": False}
    assert len(json.loads(ctxos("inspect", ids["a"], "--json", store=store).stdout)) == 2
    done = json.loads(ctxos("evict", ids["a"], "--yes", "--json", store=store).stdout)
    assert done["evicted"] is True and done["versions"] == 2
    assert "no object" in ctxos("inspect", ids["a"], store=store, check=False).stderr
    assert b"A = 2" not in Path(store).read_bytes()
