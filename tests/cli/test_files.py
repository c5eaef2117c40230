"""``ctxos files``, ``ctxos objects inspect PATH`` and ``ctxos objects evict``, through the console
script; and the path → file object lookup beneath them (``files.index.find_file_object``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from context_os import Session
from context_os.context.evict import evict
from context_os.context.frames import frame_docs, get_frame, verify_frames
from context_os.errors import InputError, NotFound
from context_os.files import FileTools, FileTracker, Workspace
from context_os.files.index import find_file_object
from context_os.harness import OpenAIHook
from context_os.store.sqlite import SqliteStore
from tests.cli.test_cli import ctxos
from tests.helpers import say, user

pytestmark = pytest.mark.e2e


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "ws"
    r.mkdir()
    return r


@pytest.fixture
def db(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "store.db")  # closed by ``setup``, which hands the CLI its path


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
    gone = ctxos("files", "nope", store=store, check=False)
    assert gone.returncode == 1 and gone.stderr.startswith(f"Error: NotFound: no session 'nope' in sqlite://{store}")


def test_files_does_not_call_stale_a_file_that_holds_the_bytes_shown(root: Path, db: SqliteStore) -> None:
    """As the session judges it: a file changed and changed back (``git stash`` and ``pop``), or
    rewritten with the same bytes (its stat corrected by the tracker), is not stale; the session
    does not mark it. Before, ``ctxos files`` said stale for any other version in the store."""
    ws = Workspace(root)
    (root / "back.py").write_text("B = 1\n")
    (root / "touched.py").write_text("T = 1\n")
    session = Session.open(db, "s1", harness="openai")
    tools = FileTools(session, ws)
    back = tools.read("back.py")["id"]
    touched = tools.read("touched.py")["id"]
    for text in ("B = 2\n", "B = 1\n"):
        (root / "back.py").write_text(text)
        tools.observe("git stash; git stash pop", "back.py")
    (root / "touched.py.tmp").write_text("T = 1\n")
    os.replace(root / "touched.py.tmp", root / "touched.py")
    with FileTracker(db, ws, rescan_interval=None):  # its start() finds the new inode
        pass
    assert db.get(touched).doc["meta"]["inode"] != session.view.objects[touched].meta["inode"]
    db.close()
    rows = {r["id"]: r for r in json.loads(ctxos("files", "s1", "--json", store=db.path).stdout)}
    assert (rows[back]["version_shown"], rows[back]["version_latest"], rows[back]["stale"]) == (1, 3, False)
    assert (rows[touched]["version_shown"], rows[touched]["version_latest"], rows[touched]["stale"]) == (1, 1, False)


def test_inspect_resolves_a_path_and_shows_versions_across_renames(setup, root: Path) -> None:
    store, ids = setup
    for arg in (str(root / "renamed.txt"), "renamed.txt", str(root / "b.txt")):  # now, workspace-relative, old name
        rows = json.loads(ctxos("objects", "inspect", arg, "--json", store=store).stdout)
        assert [(r["version"], r["path"]) for r in rows] == [(1, "b.txt"), (2, "renamed.txt")], arg
    text = ctxos("objects", "inspect", "renamed.txt", store=store).stdout
    assert text.startswith(ids["b"]) and "v1: b.txt" in text and "v2: renamed.txt" in text
    diff = json.loads(ctxos("objects", "inspect", "src/a.py", "--diff", "1", "2", "--json", store=store).stdout)
    assert diff["id"] == ids["a"] and "+A = 2" in diff["diff"]
    missing = ctxos("objects", "inspect", "no/such/file.py", store=store, check=False)
    assert missing.returncode == 1 and missing.stderr.startswith("Error: NotFound: no object 'no/such/file.py'")


def test_a_path_with_a_newline_or_a_tab_keeps_its_row(root: Path, db: SqliteStore) -> None:
    """A file may be named with a newline and a tab (anyone's workspace): a table cell and a line
    of the path history show them as escapes, one row per file. Printed as they were, the row
    broke in two and the columns after it shifted; a state change's reason, which a caller
    writes, the same. --json keeps the text as it is."""
    name = "a\nb\tc.py"
    (root / name).write_text("X = 1\n")
    (root / "ok.py").write_text("Y = 1\n")
    session = Session.open(db, "s1", harness="openai")
    tools = FileTools(session, Workspace(root))
    odd = tools.read(name)["id"]
    plain = tools.read("ok.py")["id"]
    session.deactivate(plain, reason="first line\nsecond\tline")
    session.close()
    db.close()
    lines = ctxos("files", "s1", store=db.path).stdout.splitlines()
    assert len(lines) == 4, lines  # the header, its rule, a row per file
    assert lines[2].startswith(odd) and "a\\x0ab\\x09c.py" in lines[2] and lines[3].startswith(plain)
    assert lines[2].index("active") == lines[3].index("inactive")  # the columns line up
    text = ctxos("objects", "inspect", odd, store=db.path).stdout
    assert "  v1: a\\x0ab\\x09c.py\n" in text and "\t" not in text
    states = ctxos("objects", "inspect", plain, store=db.path).stdout
    assert "first line\\x0asecond\\x09line" in states and "\t" not in states
    rows = json.loads(ctxos("files", "s1", "--json", store=db.path).stdout)
    assert {r["path"] for r in rows} == {name, "ok.py"}


def test_evict_needs_yes_and_erases_every_version(setup) -> None:
    store, ids = setup
    dry = ctxos("objects", "evict", "src/a.py", "--json", store=store, check=False)
    assert dry.returncode == 1 and json.loads(dry.stdout) == {"id": ids["a"], "versions": 2, "evicted": False}
    assert len(json.loads(ctxos("objects", "inspect", ids["a"], "--json", store=store).stdout)) == 2
    done = json.loads(ctxos("objects", "evict", ids["a"], "--yes", "--json", store=store).stdout)
    assert done["evicted"] is True and done["versions"] == 2
    assert "no object" in ctxos("objects", "inspect", ids["a"], store=store, check=False).stderr
    assert b"A = 2" not in Path(store).read_bytes()


def test_inspect_as_of_a_time_or_tx_of_an_evicted_object_says_it_was_evicted(setup) -> None:
    """``objects inspect ID --as-of T`` (or ``--tx N``) of an object evicted since said it "did not
    exist" then, which it did: it was erased. It says so, as ``objects inspect ID`` does."""
    store, ids = setup
    tx = json.loads(ctxos("objects", "inspect", ids["a"], "--json", store=store).stdout)[0]["tx_id"]
    ctxos("objects", "evict", ids["a"], "--yes", store=store)
    for args in (["--tx", str(tx)], ["--as-of", "2026-12-01T00:00:00Z"], []):
        gone = ctxos("objects", "inspect", ids["a"], *args, store=store, check=False)
        assert gone.returncode == 1 and "it was evicted at " in gone.stderr, (args, gone.stderr)
        assert "did not exist" not in gone.stderr
    never = ctxos("objects", "inspect", ids["b"], "--tx", "0", store=store, check=False)
    assert never.returncode == 1 and f"{ids['b']} did not exist now as of tx 0" in never.stderr, never.stderr


def test_find_file_object_resolves_ids_paths_and_old_names(setup, root: Path, monkeypatch) -> None:
    store, ids = setup
    monkeypatch.chdir(root)
    with SqliteStore(store) as db:
        assert find_file_object(db, "file:whatever") == "file:whatever"  # an id is taken as it is
        assert find_file_object(db, "session:s1") == "session:s1"
        assert find_file_object(db, "renamed.txt") == ids["b"]  # relative to the current directory
        assert find_file_object(db, str(root / "b.txt")) == ids["b"]  # a name it had before the rename
        assert find_file_object(db, "src/a.py") == ids["a"]
        with pytest.raises(NotFound, match="no file object has or had that path"):
            find_file_object(db, "no/such/file.py")


def test_a_path_two_file_objects_had_needs_an_id(tmp_path: Path) -> None:
    db_path = tmp_path / "two.db"
    with SqliteStore(db_path) as db:
        for n in (1, 2):  # two workspaces, each with its own notes.txt
            meta = {"path": "notes.txt", "abs_path": f"/w{n}/notes.txt", "version": 1}
            db.put({"id": f"file:{n}", "kind": "file", "content": f"notes {n}", "meta": meta})
        with pytest.raises(InputError, match="names several file objects: file:1, file:2"):
            find_file_object(db, "notes.txt")
    proc = ctxos("objects", "inspect", "notes.txt", store=db_path, check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: InputError: 'notes.txt' names several file objects: file:1, file:2")
    # each candidate with how to name it: its absolute path, which names it alone
    said = "name one by its id or its absolute path: file:1 at /w1/notes.txt; file:2 at /w2/notes.txt\n"
    assert said in proc.stderr and proc.stderr.count("\n") == 1  # one line
    with SqliteStore(db_path) as db:
        assert find_file_object(db, "/w2/notes.txt") == "file:2"
        # a third, with the path of the first (a second replay of one project): its id only
        meta = {"path": "notes.txt", "abs_path": "/w1/notes.txt", "version": 1}
        db.put({"id": "file:3", "kind": "file", "content": "notes 3", "meta": meta})
        with pytest.raises(InputError) as e:
            find_file_object(db, "notes.txt")
    assert str(e.value).endswith(
        "file:1 at /w1/notes.txt (another of them has it too: name it by its id); file:2 at /w2/notes.txt;"
        " file:3 at /w1/notes.txt (another of them has it too: name it by its id)"
    )


def test_a_sessions_own_records_are_not_evicted_by_id(root: Path, db: SqliteStore) -> None:
    """``objects evict session:ID --yes`` (or a lease, the states, a frame, a tombstone) erased
    the record and exited 0: the session vanished from ``ctxos sessions`` while its chat, frames
    and objects stayed, and the next open started it again at turn 0 over them (a tombstone gone
    let the evicted text back). An eviction by text leaves them; by id they are refused, before
    anything is said to be erased, naming what to do instead."""
    (root / "a.py").write_text("A = 1\n")
    session = Session.open(db, "s1", harness="openai")
    hook = OpenAIHook(session)
    hook.transform_context([user("read a.py")])
    read = FileTools(session, Workspace(root)).read("a.py")["id"]
    session.close()
    evict(db, read)  # leaves its tombstone
    records = ["session:s1", "lease:s1", f"state:s1:{read}", "frame:s1:000001", f"tombstone:{read}"]
    before = {r: len(db.history(r)) for r in records}
    assert all(before.values()), before
    for oid in records:
        with pytest.raises(InputError, match=f"^{oid} cannot be evicted: it is .*--containing TEXT"):
            evict(db, oid)
    db.close()
    for oid in records:
        for yes in ([], ["--yes"]):
            refused = ctxos("objects", "evict", oid, *yes, "--json", store=db.path, check=False)
            error = json.loads(refused.stdout)["error"]
            assert (refused.returncode, error["type"]) == (1, "InputError"), (oid, yes, refused.stdout)
            assert error["message"].startswith(f"{oid} cannot be evicted"), error
    with SqliteStore(db.path) as again:
        assert {r: len(again.history(r)) for r in records} == before
    assert [r["session"] for r in json.loads(ctxos("sessions", "--json", store=db.path).stdout)] == ["s1"]


def test_an_outbox_marker_is_not_evicted_by_id(db: SqliteStore) -> None:
    """The marker a transaction written while the XTDB node was away carries (``outbox:<n>``, which
    tells the provisional tx id its frames name as the real one) was erased by id, and those frames
    then named a transaction nothing resolved. It holds no text: refused, as a session's records."""
    marker = {"id": "outbox:7", "kind": "outbox", "content": {"accepted": 1, "ops": 2}}
    db.put({**marker, "meta": {"provisional_tx_id": -7}})
    with pytest.raises(InputError, match="^outbox:7 cannot be evicted: it is the marker of a transaction"):
        evict(db, "outbox:7")
    assert len(db.history("outbox:7")) == 1


def test_a_block_whose_object_is_stored_is_not_evicted_alone(root: Path, db: SqliteStore) -> None:
    """A block is a piece of rendered context: the text of the object it shows (or the lines of
    a session's object index). ``objects evict block:…`` erased it and exited 0, while the object
    kept the text: a running session showed it again and named the block it no longer had, so
    every later frame failed ``frames verify`` as damaged. It is refused, naming the object."""
    (root / "a.py").write_text("A = 1\n")
    session = Session.open(db, "s1", harness="openai")
    hook = OpenAIHook(session, files=(tools := FileTools(session, Workspace(root))))
    fid = tools.read("a.py")["id"]
    msgs = [user("read a.py")]
    hook.transform_context(msgs)
    frame = get_frame(db, "s1", 1)
    blocks = {(db.doc(b[1]) or {}).get("meta", {}).get("object"): b[1] for b in frame["content"]["blocks"]}
    assert fid in blocks and "index" in blocks, blocks
    db.close()
    for shows, named in ((fid, f"showing {fid}, which still holds its text"), ("index", "object index")):
        refused = ctxos("objects", "evict", blocks[shows], "--yes", "--json", store=db.path, check=False)
        error = json.loads(refused.stdout)["error"]
        assert (refused.returncode, error["type"]) == (1, "InputError") and named in error["message"], error
    with SqliteStore(db.path) as again:
        assert all(again.doc(b) is not None for b in blocks.values())
        session = Session.open(again, "s1", harness="openai")
        hook = OpenAIHook(session, files=FileTools(session, Workspace(root)))
        hook.transform_context([*msgs, say("ok"), user("go on")])
        session.close()
        assert all(c.ok for c in verify_frames(again, frame_docs(again, "s1"), jobs=1))
    evicted = json.loads(ctxos("objects", "evict", fid, "--yes", "--json", store=db.path).stdout)
    assert evicted["evicted"] and evicted["blocks"] >= 1  # the object takes its blocks with it
