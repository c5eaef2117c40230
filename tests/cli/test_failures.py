"""``ctxos`` fails cleanly: bad files, bad times, bad store URLs, stores that do not exist and
stores that are damaged all end in one ``Error: <Type>: <message>`` line naming what was wrong
(or, for ``verify``, a report naming the damage), a non-zero exit status, and no traceback.
Through the console script in a subprocess, and ``CliRunner`` where many runs are needed."""

from __future__ import annotations

import json
import os
import pty
import random
import select
import shutil
import socket
import sqlite3
import subprocess
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from context_os.cli import cli
from context_os.hashing import encode_doc
from context_os.store import Delete, Put
from context_os.store.sqlite import SqliteStore
from tests._reliability import Counts
from tests.cli.test_cli import CTXOS, ctxos

pytestmark = pytest.mark.e2e

T0 = 1_700_000_000_000


def fails(proc: subprocess.CompletedProcess[str], error: str, *says: str) -> str:
    """Assert a clean failure: exit 1, one ``Error: <error>:`` line that says all of ``says``."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"Error: {error}: "), proc.stderr
    for s in says:
        assert s in proc.stderr, (s, proc.stderr)
    return proc.stderr


def refusal(proc: subprocess.CompletedProcess[str], error: str) -> dict[str, int]:
    """Whether ``proc`` failed as ``fails`` requires (exit 1, one ``Error: <error>:`` line, no
    traceback), as counts for the reliability report, taken before ``fails`` asserts it."""
    clean = proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stderr.startswith(f"Error: {error}: ")
    return {"refused_cleanly": int(clean), "failed_otherwise": int(not clean)}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real store file: the bundled demo session, recorded as session ``d1``."""
    db = tmp_path_factory.mktemp("fail") / "demo.db"
    ctxos("demo", "--json", "--no-verify", "--session", "d1", store=db)
    return db


# -- replay: only regular files, and only so many bytes (item 6) ---------------------------------


def test_replay_refuses_a_device_a_fifo_and_a_directory_at_once(tmp_path: Path, reliability: Counts) -> None:
    fifo = tmp_path / "session.fifo"
    os.mkfifo(fifo)  # no writer: opening it for reading would wait forever
    store = tmp_path / "never.db"
    for path, what in (("/dev/zero", "is a character device"), (fifo, "is a FIFO"), (tmp_path, "is a directory")):
        started = time.monotonic()
        proc = subprocess.run(
            [*CTXOS, "--store", str(store), "replay", str(path)], capture_output=True, text=True, timeout=60
        )
        took = time.monotonic() - started
        reliability.add(
            "attack: non-regular replay input",
            attempts=1,
            **refusal(proc, "FileUnreadable"),
            slow=int(took >= 30),
            store_created=int(store.exists()),
        )
        fails(proc, "FileUnreadable", str(path), what, "regular file")
        assert took < 30  # not a memory-growing read nor a hang, killed by the timeout
    assert not store.exists()  # the file is refused before the store is opened


def test_replay_reads_at_most_the_size_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    messages = [{"role": "user", "content": "x" * (2**20)}, {"role": "assistant", "content": "ok"}]
    big.write_text(json.dumps(messages))
    fails(
        ctxos("replay", str(big), "--max-file-mb", "1", store=tmp_path / "s.db", check=False),
        "InputError",
        str(big),
        "larger than 1,048,576 bytes",
        "--max-file-mb",
    )
    assert not (tmp_path / "s.db").exists()
    out = json.loads(ctxos("replay", str(big), "--max-file-mb", "2", "--json", store=tmp_path / "s.db").stdout)
    assert out["format"] == "openai"


def test_replay_refuses_a_message_over_the_size_cap_before_writing_anything(tmp_path: Path) -> None:
    """A message no session can hold (over ``RetentionPolicy.max_message_chars``) is named before
    the store is touched: the calls before it are not left behind as a half-made session."""
    over = tmp_path / "over.json"
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "x" * 2_000_001},
        {"role": "assistant", "content": "done"},
    ]
    over.write_text(json.dumps(messages))
    db = tmp_path / "s.db"
    fails(
        ctxos("replay", str(over), "--session", "big", store=db, check=False),
        "InputError",
        str(over),
        "message 2",
        "2,000,001 characters",
        "max_message_chars",
        "nothing was written",
    )
    assert not db.exists()


@pytest.mark.parametrize("session", ["", "a b", "a\tb"])
def test_replay_refuses_a_session_id_that_is_none_before_creating_a_store(tmp_path: Path, session: str) -> None:
    """An empty ``--session`` is not the default id, and one with spaces is refused as the input
    it is, before a store is created for it."""
    traj = Path(__file__).parents[2] / "bench/sessions/check/mini-swe-agent/github_issue.traj.json"
    db = tmp_path / "s.db"
    proc = ctxos("replay", str(traj), "--session", session, store=db, check=False)
    fails(proc, "InputError", f"--session {session!r}", "non-empty string without spaces")
    assert not db.exists()


# -- times and store URLs (item 8) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("as_of", "says"),
    [
        ("99999999999999999999999", "outside the years 0001-9999"),
        ("²³", "not ASCII"),
        ("-99999999999999999", "outside the years 0001-9999"),
        ("10000-01-01T00:00:00Z", "neither ISO 8601"),
    ],
)
def test_an_as_of_that_is_no_time_is_an_input_error(demo: Path, as_of: str, says: str, reliability: Counts) -> None:
    proc = ctxos("objects", "inspect", "session:d1", "--as-of", as_of, store=demo, check=False)
    reliability.add("attack: bad --as-of or store URL", attempts=1, **refusal(proc, "InputError"))
    fails(proc, "InputError", "--as-of", says)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("xtdb+http://127.0.0.1:99999", "Port out of range"),
        ("xtdb+http://[::1", "Invalid IPv6 URL"),
        ("xtdb+http://:3000", "no host"),
        ("xtdb+http://127.0.0.1:port", "Port could not be cast"),
    ],
)
def test_a_malformed_xtdb_url_is_a_config_error_naming_it(url: str, says: str, reliability: Counts) -> None:
    proc = ctxos("status", store=url, check=False)
    reliability.add("attack: bad --as-of or store URL", attempts=1, **refusal(proc, "ConfigError"))
    fails(proc, "ConfigError", repr(url), says)


# -- store URLs: passwords, bare paths, options (item 9) ------------------------------------------


def test_a_password_in_a_store_url_is_never_printed(tmp_path: Path) -> None:
    url = "xtdb+http://bob:hunter2@127.0.0.1:1?outbx=1"
    err = fails(ctxos("status", store=url, check=False), "ConfigError", "bob:***@", "outbx")
    assert "hunter2" not in err
    err = fails(ctxos("status", store="postgres://bob:hunter2@db/x", check=False), "ConfigError", "unknown store URL")
    assert "hunter2" not in err and "bob:***@db" in err


def test_a_bare_path_creates_a_store_and_says_so(tmp_path: Path) -> None:
    first = subprocess.run(
        [*CTXOS, "--store", "foo", "demo", "--json", "--no-verify"], capture_output=True, text=True, cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    assert f"created a new store at sqlite://{tmp_path / 'foo'}" in first.stderr
    assert json.loads(first.stdout)["store"] == f"sqlite://{tmp_path / 'foo'}"
    again = subprocess.run(
        [*CTXOS, "--store", "foo", "demo", "--json", "--no-verify"], capture_output=True, text=True, cwd=tmp_path
    )
    assert again.returncode == 0 and "created" not in again.stderr


def test_the_help_and_errors_name_the_sqlite_url_with_an_absolute_path(tmp_path: Path) -> None:
    """``--help`` said ``sqlite:///path.db``, which a reader (and SQLAlchemy) takes for
    ``path.db`` here: it is ``/path.db``, a store at the root. The help and the errors that show
    the form now name an absolute path, and the help says how a relative one is given."""
    shown = " ".join(ctxos("--help").stdout.split())  # (click wraps the option's help)
    assert "sqlite:///abs/path.db (an absolute path: sqlite:///x.db is /x.db), a path (x.db, here)" in shown
    assert "sqlite:///path.db" not in shown
    empty = ctxos("--store", "", "sessions", check=False)
    assert empty.returncode == 1 and "give sqlite:///abs/path.db, a path, or" in empty.stderr, empty.stderr
    here = subprocess.run([*CTXOS, "--store", "x.db", "sessions"], cwd=tmp_path, capture_output=True, text=True)
    assert here.returncode == 1 and f"no store at sqlite://{tmp_path}/x.db:" in here.stderr  # a bare path: here


def test_a_sqlite_url_opens_read_only_and_refuses_unknown_options(demo: Path, tmp_path: Path) -> None:
    ro = f"sqlite://{demo}?mode=ro"
    sessions = json.loads(ctxos("sessions", "--json", store=ro).stdout)
    assert [s["session"] for s in sessions] == ["d1"]
    assert json.loads(ctxos("status", "--json", store=ro).stdout)["store"] == ro
    fails(ctxos("objects", "evict", "chat:d1:00000", "--yes", store=ro, check=False), "StoreError", "read-only")
    assert json.loads(ctxos("objects", "inspect", "chat:d1:00000", "--json", store=demo).stdout)  # still there
    assert not list(demo.parent.glob("*mode*"))  # "?mode=ro" never becomes part of a file name
    fails(ctxos("sessions", store=f"sqlite://{demo}?mode=rox", check=False), "ConfigError", "mode='rox'")
    fails(ctxos("sessions", store=f"sqlite://{demo}?nolock=1", check=False), "ConfigError", "unknown option", "nolock")
    fails(
        ctxos("demo", "--no-verify", store=f"sqlite://{tmp_path / 'new.db'}?mode=rw", check=False),
        "NotFound",
        "no store at",
    )
    assert not (tmp_path / "new.db").exists()


# -- read-only commands never create a store (item 11) --------------------------------------------


READ_ONLY = [
    ["sessions"],
    ["sessions", "list"],
    ["status"],
    ["frames", "list", "s1"],
    ["frames", "show", "s1", "1"],
    ["frames", "verify", "s1"],
    ["objects", "inspect", "session:s1"],
    ["objects", "evict", "session:s1", "--yes"],
    ["files", "s1"],
    ["verify"],
]


def test_a_store_whose_path_is_not_utf8_is_created_and_read(tmp_path: Path) -> None:
    """A store in a directory whose name is not UTF-8 (a Latin-1 home directory): its path's own
    bytes are opened (the SQLite URI percent-encoded them as text, which failed with a traceback)."""
    db = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9/s.db")
    proc = subprocess.run(
        [*CTXOS, "--store", db, "demo", "--session", "d1", "--no-verify", "--json"], capture_output=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / os.fsdecode(b"caf\xe9") / "s.db").is_file()
    listed = subprocess.run([*CTXOS, "--store", db, "sessions", "--json"], capture_output=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert [r["session"] for r in json.loads(listed.stdout)] == ["d1"]
    # its URL in JSON is valid UTF-8 (escaped), and names the path's own bytes
    status = subprocess.run([*CTXOS, "--store", db, "status", "--json"], capture_output=True, timeout=60)
    assert os.fsencode(json.loads(status.stdout)["store"].removeprefix("sqlite://")) == os.fsencode(db)


def test_a_terminal_in_another_encoding_gets_escapes_not_a_traceback(demo: Path) -> None:
    """Stdout in Latin-1 (as a Latin-1 locale makes it): an arrow in a session's text was a
    ``UnicodeEncodeError`` traceback; it is shown escaped, and JSON is escaped JSON."""
    latin1 = {**os.environ, "PYTHONIOENCODING": "latin-1"}
    args = [*CTXOS, "--store", str(demo), "frames", "show", "d1", "88"]
    text = subprocess.run(args, capture_output=True, env=latin1, timeout=120)
    assert text.returncode == 0 and b"Traceback" not in text.stderr, text.stderr
    assert "\\u2192" in text.stdout.decode("latin-1")
    as_json = subprocess.run([*args, "--json"], capture_output=True, env=latin1, timeout=120)
    utf8 = subprocess.run([*args, "--json"], capture_output=True, timeout=120)
    assert json.loads(as_json.stdout.decode("latin-1")) == json.loads(utf8.stdout)
    assert "\u2192" in json.dumps(json.loads(utf8.stdout), ensure_ascii=False)  # it has what Latin-1 lacks


BAD = os.fsdecode(b"caf\xe9")
"""An argument typed in a Latin-1 terminal: its byte \\xe9 is not UTF-8."""


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["frames", "list", BAD], "'SESSION_ID'"),
        (["objects", "inspect", BAD, "--json"], "'OBJECT_ID'"),
        (["files", BAD], "'SESSION_ID'"),
        (["recall", "x", "--session", BAD], "'--session'"),
        (["replay", "FILE", "--session", BAD], "'--session'"),
    ],
    ids=["frames-list", "objects-inspect", "files", "recall-session", "replay-session"],
)
def test_an_argument_that_is_not_utf8_is_a_usage_error_naming_it(
    demo: Path, tmp_path: Path, args: list[str], names: str
) -> None:
    """It reached the store (``StoreError: … get failed: text that is not Unicode``, a replay's
    new store made first) or the embedder (a traceback)."""
    db = tmp_path / "new.db" if "replay" in args else demo
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]))
    args = [str(chat) if a == "FILE" else a for a in args]
    proc = subprocess.run([*CTXOS, "--store", str(db), *args], capture_output=True, timeout=120)
    said = proc.stderr.decode("utf-8", "backslashreplace")
    assert proc.returncode == 2, said
    assert f"Error: Invalid value for {names}: 'caf\\udce9' is not UTF-8 text" in said and "Traceback" not in said
    assert db.exists() == (db == demo)


@pytest.mark.parametrize("args", READ_ONLY, ids=" ".join)
def test_a_read_only_command_says_there_is_no_store_and_creates_nothing(
    tmp_path: Path, args: list[str], reliability: Counts
) -> None:
    missing = tmp_path / "nonexistent" / "dir" / "x.db"
    for store in (f"sqlite://{missing}", str(missing)):
        proc = ctxos(*args, store=store, check=False)
        reliability.add(
            "attack: read-only command on a missing store",
            attempts=1,
            **refusal(proc, "NotFound"),
            store_created=int((tmp_path / "nonexistent").exists()),
        )
        fails(proc, "NotFound", f"no store at sqlite://{missing}", "`ctxos demo` or `ctxos replay FILE` creates one")
        assert not (tmp_path / "nonexistent").exists()


def test_a_read_only_command_refuses_a_file_that_is_no_store_and_leaves_it_alone(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    before = other.read_bytes()
    said = fails(ctxos("sessions", store=other, check=False), "NotFound", "not a context_os store")
    assert "creates one" not in said  # no command makes a store of another application's database
    assert other.read_bytes() == before
    traj = Path(__file__).parents[2] / "bench/sessions/check/swe-agent/pydicom__pydicom-1458.traj"
    for create in (["demo", "--no-verify"], ["replay", str(traj)]):
        fails(ctxos(*create, store=other, check=False), "StoreError", "not a context_os store (it has the tables t)")
        assert other.read_bytes() == before


def older_store(demo: Path, dst: Path) -> Path:
    """A copy of ``demo`` as the release before ``m005_fts_high_water`` left it (that release
    opens the file while the migration is not recorded, and refuses it once it is)."""
    copy_store(demo, dst)
    with closing(sqlite3.connect(dst)) as conn, conn:
        conn.execute("DELETE FROM migrations WHERE name = 'm005_fts_high_water'")
    return dst


def applied(path: Path) -> list[str]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY rowid")]


READS = [args for args in READ_ONLY if "--yes" not in args] + [
    ["objects", "evict", "session:s1"],
    ["ui", "--port", "0"],
]
"""The commands that only read (``objects evict`` without ``--yes`` says what it would erase)."""


@pytest.mark.parametrize("args", READS, ids=" ".join)
def test_a_command_that_only_reads_refuses_an_older_release_s_store_and_leaves_it_alone(
    demo: Path, tmp_path: Path, args: list[str]
) -> None:
    """Before 2026-12-02 ``ctxos sessions`` (every command) upgraded an older release's store
    without a word, and that release then refused the file."""
    db = older_store(demo, tmp_path / "older.db")
    before = db.read_bytes()
    cmd = [*CTXOS, "--store", str(db), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    fails(
        proc,
        "StoreError",
        "written by an older context_os",
        "(m005_fts_high_water)",
        f"`ctxos {' '.join(args[:2] if args[0] in ('frames', 'objects') else args[:1])}",
        "`ctxos index status`, or any command that writes",
        "older releases of context_os refuse the file from then on",
    )
    assert db.read_bytes() == before and "m005_fts_high_water" not in applied(db)


def test_a_command_that_writes_upgrades_an_older_release_s_store(demo: Path, tmp_path: Path) -> None:
    db = older_store(demo, tmp_path / "older.db")
    assert json.loads(ctxos("index", "status", "--json", store=db).stdout)["state"] == "ok"
    assert applied(db)[-1] == "m005_fts_high_water"
    assert [s["session"] for s in json.loads(ctxos("sessions", "--json", store=db).stdout)] == ["d1"]
    # a read-only URL never upgrades: opening it says how, and that older releases refuse it after
    fails(
        ctxos("sessions", store=f"sqlite://{older_store(demo, tmp_path / 'o2.db')}?mode=ro", check=False),
        "StoreError",
        "open it once without ?mode=ro (older releases refuse it from then on)",
    )


# -- verify: the store's own integrity check, damage per document (item 7) ------------------------


def copy_store(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    assert not Path(f"{src}-wal").exists()  # the demo closed its store: everything is in the file
    return dst


def failed_verify(store: Path) -> dict[str, Any]:
    """``ctxos verify --json`` on a damaged store: exit 1, no traceback, the report."""
    proc = ctxos("verify", "--json", store=store, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def integrity(path: Path) -> list[str]:
    """SQLite's own verdict on a copy of ``path`` (the copy: checking must not change the file)."""
    probe = path.with_name(path.name + ".probe")
    shutil.copyfile(path, probe)
    try:
        conn = sqlite3.connect(probe)
        try:
            return [r[0] for r in conn.execute("PRAGMA integrity_check")]
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        return [str(e)]
    finally:
        probe.unlink()


def test_verify_names_a_document_whose_json_no_longer_parses(demo: Path, tmp_path: Path) -> None:
    damaged = copy_store(demo, tmp_path / "json.db")
    # the session document of a turn from the fifth on that no later write corrected (two turns in
    # one millisecond share a valid time), which that turn's frame re-renders from:
    # "id"}"session:d1", the same length, and its JSON text no longer parses. Found by SQL: where
    # a row's bytes lie in the file, and which stale copies free pages keep, is SQLite's affair.
    conn = sqlite3.connect(damaged)
    try:
        [(ref, text)] = conn.execute(
            "SELECT d.id, d.json FROM docs d JOIN versions v ON v.doc = d.id JOIN entities e ON e.eid = v.eid"
            " WHERE e.id = 'session:d1' AND json_extract(d.json, '$.meta.turn') >= 5 AND NOT EXISTS"
            " (SELECT 1 FROM versions w WHERE w.eid = v.eid AND w.valid_time = v.valid_time AND w.tx_id > v.tx_id)"
            " ORDER BY json_extract(d.json, '$.meta.turn') LIMIT 1"
        ).fetchall()
        damage = text.replace('"id":"session:d1"', '"id"}"session:d1"')
        conn.execute("UPDATE docs SET json = ? WHERE id = ?", (damage, ref))
        conn.commit()
    finally:
        conn.close()
    report = failed_verify(damaged)
    assert report["ok"] is False and len(report["damaged"]) == 1, report
    [bad] = report["damaged"]
    assert bad["id"] == "session:d1" and isinstance(bad["tx_id"], int) and "does not parse as JSON" in bad["error"]
    assert any("'session:d1' at tx" in p for p in report["integrity"])
    assert report["versions_checked"] > 500  # every other version was still checked
    # anywhere else, reading the damaged version is a typed store error, not a JSONDecodeError
    fails(ctxos("objects", "inspect", "session:d1", store=damaged, check=False), "StoreCorrupt", "session:d1")
    # frames verify: the frame that needs the damaged version fails, named; every other one is checked
    proc = ctxos("frames", "verify", "d1", "--json", store=damaged, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    [failed] = [f for f in report["frames"] if not f["ok"]]
    assert failed["rendered_hash"] is None and "cannot be re-rendered" in failed["problems"][0]
    assert "session:d1" in failed["problems"][0] and report["frames_verified"] == 87


def test_verify_rehashes_a_version_a_later_write_of_the_same_valid_time_corrected(tmp_path: Path) -> None:
    # two writes of one document within a millisecond share a valid time: the later corrects the
    # earlier, which plain history no longer shows, but a read as of the earlier tx (a frame's
    # re-render) still does: verify must check it too
    path = tmp_path / "corrected.db"
    store = SqliteStore(path)
    try:
        t1 = store.submit([Put(encode_doc("note:a", "note", {"n": 1}, {})[0], 1_700_000_000_000)])
        store.submit([Put(encode_doc("note:a", "note", {"n": 2}, {})[0], 1_700_000_000_000)])
    finally:
        store.close()
    conn = sqlite3.connect(path)
    try:  # the first version's content changes under its hashes
        conn.execute("UPDATE docs SET json = replace(json, '\"n\":1', '\"n\":7') WHERE json LIKE '%\"n\":1%'")
        assert conn.total_changes == 1
        conn.commit()
    finally:
        conn.close()
    report = failed_verify(path)
    assert report["versions_checked"] == 2 and report["damaged"] == [], report
    assert [(m["id"], m["tx_id"]) for m in report["mismatches"]] == [("note:a", t1.id)]
    assert "content_hash" in report["mismatches"][0]["fields"]


def test_verify_rehashes_the_versions_of_a_document_no_longer_in_force(tmp_path: Path) -> None:
    # A memory whose file was deleted ends in the store (a deletion, context/sources.py), as do
    # the recall copies of it: verify listed the documents in force only, so damage to every
    # version of them (which frames that showed them re-render from) went unreported: "0
    # versions of 0 documents re-hashed", exit 0.
    path = tmp_path / "ended.db"
    with SqliteStore(path) as store:
        put = store.submit([Put(encode_doc("memory:m1", "memory", "the key is in the vault", {"source": "memory"})[0])])
        store.submit([Delete("memory:m1")])
        assert store.find() == []
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE docs SET json = replace(json, 'vault', 'VAULT') WHERE json LIKE '%vault%'")
        assert conn.total_changes == 1
    report = failed_verify(path)
    assert (report["documents"], report["versions_checked"], report["damaged"]) == (1, 1, []), report
    assert [(m["id"], m["tx_id"]) for m in report["mismatches"]] == [("memory:m1", put.id)]


def test_verify_runs_the_databases_integrity_check(demo: Path, tmp_path: Path) -> None:
    with closing(sqlite3.connect(demo)) as conn, conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = 'attrs' AND pagetype = 'leaf'")]
    conn.close()
    # a byte near the end of a leaf page of the attribute index: inside its last cells
    for page in pages:
        damaged = copy_store(demo, tmp_path / "index.db")
        data = bytearray(damaged.read_bytes())
        data[page * page_size - 20] ^= 0xFF
        damaged.write_bytes(data)
        if integrity(damaged) != ["ok"]:
            break
    else:
        pytest.fail("no flip in the attribute index broke it")
    report = failed_verify(damaged)
    assert report["mismatches"] == [] and report["ok"] is False
    assert any("integrity_check" in p and "attrs" in p for p in report["integrity"]), report["integrity"]
    assert "integrity check: 1 problem(s)" in ctxos("verify", store=damaged, check=False).stdout


def test_verify_on_random_byte_flips_fails_cleanly_and_never_reports_damage_as_clean(
    demo: Path, tmp_path: Path, reliability: Counts
) -> None:
    rng = random.Random(20261124)
    original = demo.read_bytes()
    runner = CliRunner()
    outcomes: dict[str, int] = {}
    for n in range(20):
        damaged = tmp_path / f"flip{n}.db"
        data = bytearray(original)
        for _ in range(1 + n % 3):
            data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
        damaged.write_bytes(data)
        sqlite_says = integrity(damaged)
        result = runner.invoke(cli, ["--store", str(damaged), "verify", "--json"])
        outcome = "clean" if result.exit_code == 0 else "report" if result.stdout.startswith("{") else "error"
        untyped = not (result.exception is None or isinstance(result.exception, SystemExit))
        reliability.add(
            "attack: damaged store (verify)",
            attempts=1,
            damage_reported=int(outcome == "report"),
            store_errors=int(outcome == "error" and result.stderr.startswith("Error: Store")),
            clean=int(outcome == "clean"),
            # SQLite's own check found damage, and verify said all was well
            damage_called_clean=int(outcome == "clean" and sqlite_says != ["ok"]),
            untyped_errors=int(untyped or "Traceback" in result.output),
        )
        # never an untyped error: a report, or one "Error: <Type>:" line (ClickException → exit 1)
        assert not untyped, (n, result.exception)
        assert "Traceback" not in result.output
        if sqlite_says != ["ok"]:
            assert result.exit_code != 0, (n, sqlite_says, result.output)
        if outcome == "error":
            assert result.stderr.startswith("Error: Store"), result.stderr
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("report", 0) >= 10, outcomes  # most flips land in documents: reported per document


# -- status, objects inspect --diff, frames show (item 12) -----------------------------------------


def test_status_counts_documents_without_a_kind(tmp_path: Path) -> None:
    """A store may hold documents context_os did not write (a shared XTDB node): status counted
    them by ``doc["kind"]`` and crashed with a KeyError."""
    db = tmp_path / "s.db"
    with SqliteStore(db) as s:
        s.put({"id": "theirs", "content": "x"}, 1_000)
        s.put({"id": "odd", "kind": ["a"]}, 1_000)
        s.put({"id": "note:1", "kind": "note"}, 1_000)
    report = json.loads(ctxos("status", "--json", store=db).stdout)
    assert report["by_kind"] == {"(none)": 2, "note": 1} and report["documents"] == 3


def test_status_is_an_aligned_two_column_table(demo: Path) -> None:
    lines = ctxos("status", store=demo).stdout.splitlines()
    assert lines[0].split() == ["field", "value"] and set(lines[1]) == {"-", " "}
    value_column = lines[1].index("  -") + 2
    rows = {line[:value_column].strip(): line[value_column:] for line in lines[2:]}
    assert rows["store"] == f"sqlite://{demo}" and rows["reachable"] == "yes"
    assert rows["by kind"].startswith("block ") and "frame 88" in rows["by kind"]
    assert rows["latest tx"].startswith("id ") and "{" not in rows["latest tx"]
    assert rows["size bytes"].endswith("MiB)") and "," in rows["size bytes"]
    report = json.loads(ctxos("status", "--json", store=demo).stdout)  # the JSON keeps its shape
    assert {"store", "backend", "reachable", "documents", "by_kind", "sessions", "latest_tx", "size_bytes"} <= set(
        report
    )
    assert set(report["latest_tx"]) == {"id", "time"}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("one\ntwo", "one\nthree"),
        # lines end at a line feed alone: a form feed, U+2028 or a lone CR inside a line split it
        # (str.splitlines), the "No newline" marker in the middle of a hunk, which patch refused
        ("section\x0cone\ntwo\n", "section\x0cone\nthree\n"),
        ("var s = 'a\u2028b';\nx\n", "var s = 'a\u2028b';\ny\n"),
        ("a\rb\r\nx\r\n", "a\rb\r\ny\r\n"),
    ],
)
def test_inspect_diff_is_the_diff_patch_applies(tmp_path: Path, old: str, new: str) -> None:
    db = tmp_path / "notes.db"
    with SqliteStore(db) as store:
        for n, text in enumerate([old, new]):
            store.put({"id": "file:n", "kind": "file", "content": text, "meta": {"path": "n.txt"}}, T0 + n)
    out = ctxos("objects", "inspect", "file:n", "--diff", "1", "2", store=db).stdout
    if not old.endswith("\n"):
        assert out.endswith("-two\n\\ No newline at end of file\n+three\n\\ No newline at end of file\n\n")
    diff = json.loads(ctxos("objects", "inspect", "file:n", "--diff", "1", "2", "--json", store=db).stdout)["diff"]
    assert diff.count("@@") == 2 and (old.endswith("\n") or diff.count("No newline") == 2)
    (tmp_path / "n.txt").write_bytes(old.encode())
    patched = subprocess.run(  # patch(1) applies it as diff(1) would have written it
        ["patch", "-s", "-o", "-", str(tmp_path / "n.txt")], input=diff.encode(), capture_output=True
    )
    assert patched.stdout.decode() == new, patched.stderr


def test_a_frame_out_of_range_names_the_range(demo: Path) -> None:
    for command in ("show", "verify"):
        fails(ctxos("frames", command, "d1", "999", store=demo, check=False), "NotFound", "session 'd1' has turns 1–88")
        fails(ctxos("frames", command, "nope", "1", store=demo, check=False), "NotFound", "no session 'nope' in ")
    fails(ctxos("frames", "verify", "nope", store=demo, check=False), "NotFound", "no session 'nope' in ")
    fails(ctxos("frames", "list", "nope", store=demo, check=False), "NotFound", "`ctxos sessions` lists the sessions")


def run_on_a_terminal(args: list[str], env: dict[str, Any]) -> tuple[int, str]:
    """Run ``args`` with stdin and stdout on a pseudo-terminal; (exit status, what it printed)."""
    main, tty = pty.openpty()
    proc = subprocess.Popen(args, stdin=tty, stdout=tty, stderr=subprocess.DEVNULL, env=env)
    os.close(tty)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    return proc.wait(timeout=60), out.decode("utf-8", "replace")


def test_evict_containing_dash_on_a_terminal_asks_for_the_text_and_does_not_echo_it(tmp_path: Path) -> None:
    """``objects evict --containing -`` typed at a terminal read stdin to its end with no prompt:
    the command seemed to hang, and the secret typed showed on the screen. It asks, without echo,
    and one line (Enter) ends the text."""
    secret = "Zq8-leaked-" + "k9" * 8
    messages = [{"role": "user", "content": f"the key is {secret}"}, {"role": "assistant", "content": "ok"}]
    (tmp_path / "m.json").write_text(json.dumps(messages))
    db = tmp_path / "s.db"
    ctxos("replay", str(tmp_path / "m.json"), "--session", "k", "--verify", "none", store=db)
    main, tty = pty.openpty()
    proc = subprocess.Popen(
        [*CTXOS, "--store", str(db), "objects", "evict", "--containing", "-"], stdin=tty, stdout=tty, stderr=tty
    )
    os.close(tty)
    out = b""

    def read_until(done: Callable[[bytes], bool]) -> None:
        nonlocal out
        deadline = time.monotonic() + 60
        while not done(out) and time.monotonic() < deadline:
            if select.select([main], [], [], 1)[0]:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # EIO: the other side closed
                    return
                if not chunk:
                    return
                out += chunk

    try:
        read_until(lambda got: b"The text to look for" in got)
        assert b"The text to look for (not shown; Enter ends it)" in out, out
        os.write(main, secret.encode() + b"\n")
        read_until(lambda got: False)  # to the end
        assert proc.wait(timeout=60) == 1  # listed, not erased (no --yes)
    finally:
        proc.kill()
        proc.wait()
        os.close(main)
    shown = out.decode("utf-8", "replace")
    assert "object(s) hold the text:" in shown and "Pass --yes to erase them" in shown, shown
    assert secret not in shown  # not echoed as typed, nor printed


def test_long_frame_output_goes_through_the_pager_only_on_a_terminal(demo: Path, tmp_path: Path) -> None:
    paged = tmp_path / "paged.txt"
    env = {**os.environ, "PAGER": f"sh -c 'cat > {paged}'", "LINES": "24", "COLUMNS": "80"}
    code, shown = run_on_a_terminal([*CTXOS, "--store", str(demo), "frames", "show", "d1", "40"], env)
    assert code == 0
    assert paged.exists() and "frame:d1:000040" in paged.read_text() and "verified" in paged.read_text()
    assert "frame:d1:000040" not in shown  # it went to the pager, not straight to the terminal
    paged.unlink()
    code, shown = run_on_a_terminal([*CTXOS, "--store", str(demo), "frames", "show", "d1", "40", "--no-messages"], env)
    assert code == 0 and not paged.exists() and "verified" in shown  # short: printed as is
    piped = subprocess.run(
        [*CTXOS, "--store", str(demo), "frames", "show", "d1", "40"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert piped.returncode == 0 and not paged.exists() and "verified" in piped.stdout
    as_json = subprocess.run(
        [*CTXOS, "--store", str(demo), "frames", "show", "d1", "40", "--json"], capture_output=True, text=True, env=env
    )
    assert json.loads(as_json.stdout)["ok"] and not paged.exists()


@pytest.mark.parametrize(
    "args",
    [("verify",), ("frames", "list", "d1"), ("sessions", "--json"), ("--help",)],
    ids=["verify", "frames-list", "sessions-json", "help"],
)
def test_a_reader_that_stops_reading_ends_the_command_quietly_with_141(demo: Path, args: tuple[str, ...]) -> None:
    """``ctxos verify | head -1``: the reader is gone before the output is whole. Not the 1 of
    damage found (a clean store read as damaged in a ``pipefail`` script), nor a traceback: 141,
    as a shell reports a process SIGPIPE ended, and nothing on stderr."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write is refused
    with os.fdopen(write, "wb") as gone:
        proc = subprocess.run(
            [*CTXOS, "--store", str(demo), *args], stdout=gone, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert (proc.returncode, proc.stderr) == (141, "")


def test_an_error_whose_json_the_reader_does_not_take_is_still_said_on_stderr(demo: Path) -> None:
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "wb") as gone:
        args = [*CTXOS, "--store", str(demo), "objects", "inspect", "x.py", "--json"]
        proc = subprocess.run(args, stdout=gone, stderr=subprocess.PIPE, text=True, timeout=120)
    fails(proc, "NotFound", "no object 'x.py'")


@pytest.mark.parametrize("args", [("verify",), ("sessions", "--json")], ids=["verify", "sessions-json"])
def test_output_a_full_disk_refuses_is_one_line_not_a_traceback(demo: Path, args: tuple[str, ...]) -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [*CTXOS, "--store", str(demo), *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    fails(proc, "OSError", "stdout refused the output (No space left on device)")
    assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "args",
    [
        ("ui", "--port"),
        ("proxy", "--upstream", "http://127.0.0.1:9", "--port"),
        ("serve", "--http"),
        ("mcp", "--no-recall", "--http"),
    ],
    ids=["ui", "proxy", "serve", "mcp"],
)
def test_a_port_in_use_is_one_line(tmp_path: Path, args: tuple[str, ...]) -> None:
    """The servers' fixed default ports are often taken (another ``ctxos ui`` still running):
    one line naming the option that picks a free port, and nothing recorded."""
    db = tmp_path / "s.db"
    SqliteStore(db).close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = ctxos(*args, str(port), store=db, check=False)
    fails(proc, "ConfigError", f"port {port} on 127.0.0.1 is in use", f"pass {args[-1]} 0 for a free one")
    with SqliteStore(db) as store:
        assert store.find("session") == []


@pytest.mark.parametrize(
    "args",
    [
        ("proxy", "--upstream", "http://127.0.0.1:9", "--port"),
        ("serve", "--http"),
        ("mcp", "--no-recall", "--http"),
    ],
    ids=["proxy", "serve", "mcp"],
)
def test_a_server_refused_at_start_creates_no_store(tmp_path: Path, args: tuple[str, ...]) -> None:
    """A port in use, or an upstream that is no http(s) URL, refuses the start before the store
    is opened: a missing store is not left behind, created without a word."""
    db = tmp_path / "new.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = ctxos(*args, str(port), store=db, check=False)
    fails(proc, "ConfigError", f"port {port} on 127.0.0.1 is in use")
    assert not db.exists()
    if args[0] == "proxy":
        proc = ctxos("proxy", "--upstream", "ftp://x", "--port", "0", store=db, check=False)
        fails(proc, "ConfigError", "--upstream must be an http(s) URL")
        proc = ctxos(
            "proxy", "--upstream", "http://x", "--anthropic-upstream", "x", "--port", "0", store=db, check=False
        )
        fails(proc, "ConfigError", "--anthropic-upstream must be an http(s) URL")
        assert not db.exists()


def test_serve_with_a_token_file_it_cannot_write_creates_no_store(tmp_path: Path) -> None:
    """The token file is written once the port is taken, before the store is opened: a path it
    cannot be written at refuses the start with no store left behind."""
    db, blocker = tmp_path / "new.db", tmp_path / "a-file"
    blocker.write_text("")
    proc = ctxos("serve", "--http", "0", "--token-file", str(blocker / "token"), store=db, check=False)
    fails(proc, "ConfigError", "cannot write the token file")
    assert not db.exists()


def test_a_replay_that_cannot_be_read_writes_nothing(tmp_path: Path) -> None:
    """A file read in the wrong format (no messages), or holding a message the harness's adapter
    refuses: one error naming the file, and no session (no store) left behind."""
    db = tmp_path / "s.db"
    traj = Path(__file__).parents[2] / "bench/sessions/check/swe-agent/pydicom__pydicom-1458.traj"
    proc = ctxos("replay", str(traj), "--format", "pi", store=db, check=False)
    fails(proc, "InputError", f"{traj}: read as pi, it holds no messages (it reads as swe-agent)")
    bad = tmp_path / "list.json"
    bad.write_text('[{"role": "user", "content": "hi"}, {"foo": 1}]')
    proc = ctxos("replay", str(bad), store=db, check=False)
    fails(proc, "InputError", f"{bad}: message 1, field 'role': unknown role None")
    assert not db.exists()


def test_ui_for_a_session_the_store_does_not_have(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    SqliteStore(db).close()
    fails(ctxos("ui", "--session", "nope", "--port", "0", store=db, check=False), "NotFound", "no session 'nope'")


def test_counts_of_one_read_as_one(tmp_path: Path) -> None:
    """'1 turns;' in frames list, 'bm25: 1 hits' in recall."""
    from context_os import Session
    from context_os.cli._common import counted
    from context_os.harness.openai import OpenAIHook

    assert [counted(n, "hit") for n in (0, 1, 2, 1200)] == ["0 hits", "1 hit", "2 hits", "1,200 hits"]
    db = tmp_path / "s.db"
    with SqliteStore(db) as store:
        hook = OpenAIHook(Session.open(store, "one", harness="openai"))
        hook.transform_context([{"role": "user", "content": "say a word about zebras"}])
        hook.session.close()
    assert "\n1 turn; " in ctxos("frames", "list", "one", store=db).stdout
    assert ctxos("recall", "zebras", "--embedder", "none", store=db).stdout.startswith("bm25: 1 hit ")
