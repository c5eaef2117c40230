"""Replaying session files: virtual file objects, the edit and staleness measures on sessions whose
answer is known, and ``ctxos replay --json`` end to end (on the real Pi session: the targets)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from context_os import RetentionPolicy, Session
from context_os.cli import cli
from context_os.cli import replay as replay_cli
from context_os.context.frames import frame_docs
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import Transcript, read_session
from tests.harness.pi_msgs import call, say, step, user
from tests.helpers import EAGER

DATA = Path(__file__).parent / "data"
REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "pi-sessions" / "before-compaction.jsonl"


def pi(messages: list[dict[str, Any]]) -> Transcript:
    return Transcript("pi-v3", "pi", "pi", messages, "t", "/repo")


def known_edits_session() -> list[dict[str, Any]]:
    """Four edits with a known answer: a.py (read just before: active, text in view), b.py (never
    read: not active), c.py (written, then 11 idle turns: deactivated with ``file_idle_turns=10``),
    d.py (lines 1-2 of 4 read, the edit changes line 4: active, but the replaced text was never
    seen)."""
    msgs = [user("go")]
    msgs += step("r1", "read", "alpha = 1\nbeta = 2\n", path="/repo/a.py")
    msgs += step(
        "e1",
        "edit",
        "Successfully replaced text in /repo/a.py.",
        path="/repo/a.py",
        oldText="beta = 2",
        newText="beta = 3",
    )
    msgs += step("e2", "edit", "Successfully replaced text in /repo/b.py.", path="/repo/b.py", oldText="x", newText="y")
    msgs += step("w1", "write", "Successfully wrote 6 bytes to /repo/c.py", path="/repo/c.py", content="c = 1\n")
    for n in range(11):
        msgs += step(f"b{n}", "bash", f"ok {n}", command="true")
    msgs += step(
        "e3", "edit", "Successfully replaced text in /repo/c.py.", path="/repo/c.py", oldText="c = 1", newText="c = 2"
    )
    msgs += step(
        "r2", "read", "one\ntwo\n\n[2 more lines in file. Use offset=3 to continue.]", path="/repo/d.py", limit=2
    )
    msgs += step(
        "e4", "edit", "Successfully replaced text in /repo/d.py.", path="/repo/d.py", oldText="four", newText="4"
    )
    msgs.append(say("done"))
    return msgs


def test_edits_with_target_active_on_a_session_with_a_known_answer(db) -> None:
    idle = RetentionPolicy(file_idle_turns=10, **EAGER)
    session = Session.open(db, "known", harness="pi", policy=idle)
    r = replay_transcript(pi(known_edits_session()), session)
    assert (r.edits_total, r.edits_with_target_active, r.edits_with_target_text_shown) == (4, 2, 1)
    # by default files stay active while the pool fits: c.py is still there when it is edited
    default = replay_transcript(pi(known_edits_session()), Session.open(db, "default", harness="pi"))
    assert (default.edits_total, default.edits_with_target_active, default.edits_with_target_text_shown) == (4, 3, 2)
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.frames_checked == r.frames == r.turns
    view = session.view
    a = next(o for o in view.objects.values() if o.kind == "file" and o.meta["path"] == "a.py")
    assert a.content == "alpha = 1\nbeta = 3\n" and a.meta["version"] == 2 and a.meta["virtual"] is True
    d = next(o for o in view.objects.values() if o.kind == "file" and o.meta["path"] == "d.py")
    # the edit's old text was never read: the version records the edit, the content is unknown
    assert d.content is None and "read it again" in d.meta["content_omitted"] and d.meta["version"] == 2
    versions = db.history(d.id, with_docs=True)
    assert versions[0].doc["content"] == "one\ntwo\n[context_os: lines 3-4 not read yet]"
    # valid time is the message's timestamp
    assert versions[0].valid_time < 1_800_000_000_000


def test_an_aborted_answers_edit_never_ran_and_is_not_counted(db) -> None:
    """Pi sends an aborted (or failed) answer no more, and its calls never ran: the replay still
    counts its model call, not its edit."""
    msgs = [user("go"), *step("r1", "read", "alpha = 1\n", path="/repo/a.py")]
    msgs.append({**call("e0", "edit", path="/repo/a.py", oldText="alpha", newText="omega"), "stopReason": "aborted"})
    msgs += [user("no, keep alpha; rename it in b.py instead")]
    msgs += step("e1", "edit", "Successfully replaced text in /repo/b.py.", path="/repo/b.py", oldText="x", newText="y")
    msgs.append(say("done"))
    r = replay_transcript(pi(msgs), Session.open(db, "aborted", harness="pi"))
    assert r.turns == 4  # the aborted answer's call happened
    assert r.edits_total == 1 and r.edits_with_target_active == 0  # b.py's edit only (never read)
    assert r.frames_verified == r.frames_checked == r.frames == r.turns


def test_an_answer_pi_never_asked_for_is_no_model_call(db) -> None:
    """A run aborted while a tool ran: Pi stops before the next call and writes an empty aborted
    answer in its place (no content, no usage, no time: as Pi 1.5.2 writes it). No model received
    that call, so the replay counts none for it (as the extension records no frame for it); an
    answer aborted while it streamed had its call."""
    msgs = [user("go"), *step("r1", "read", "alpha = 1\n", path="/repo/a.py")]
    msgs += step("b1", "bash", "Command aborted", command="sleep 30")
    usage = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0}
    never = {"role": "assistant", "content": [], "usage": usage, "stopReason": "aborted", "durationMs": 0}
    msgs.append({**never, "errorMessage": "This operation was aborted"})
    msgs += [user("carry on")]
    msgs.append({**never, "content": [{"type": "text", "text": "I was"}], "durationMs": 41})  # aborted mid-stream
    msgs += [user("go on"), say("done")]
    r = replay_transcript(pi(msgs), Session.open(db, "never-asked", harness="pi"))
    assert r.turns == 4  # the read, the bash, the answer aborted mid-stream, the last answer
    assert r.frames_verified == r.frames_checked == r.frames == r.turns


def test_file_results_collapse_at_once_and_the_file_shows_the_current_text(db) -> None:
    session = Session.open(db, "cur", harness="pi")
    msgs = [user("go")]
    msgs += step("r1", "read", "def f():\n    return 1\n", path="/repo/app.py")
    msgs += step(
        "e1",
        "edit",
        "Successfully replaced text in /repo/app.py.",
        path="/repo/app.py",
        oldText="return 1",
        newText="return 2",
    )
    msgs.append(say("done"))
    r = replay_transcript(pi(msgs), session, verify="all")
    last = frame_docs(session.store, session.id)[-1]
    assert r.stale_file_views_full == 1  # the naive transcript still shows `return 1` at the last call
    assert r.stale_file_views_assembled == 0
    tail = blocks(session)
    assert "return 2" in tail and "return 1" not in tail and 'path="app.py" version="2"' in tail
    stub = session.view.objects["toolcall:cur:r1"]
    assert stub.collapsed and stub.state == "inactive"
    reason = session.state_changes("toolcall:cur:r1")[-1].doc["meta"]["reason"]  # type: ignore[index]
    assert reason.startswith("its content is shown by file:")
    assert last["content"]["tokens"] < last["content"]["tokens_full"] + 200


def test_a_file_pis_bash_changed_is_not_shown_at_its_old_text(db) -> None:
    """Pi's agent changes files with bash too (``sed -i '' …``, ``mv``, a heredoc): only Codex's
    shells were followed, so a file Pi had read and then ``sed``-ed was shown at its old text as
    current, one a heredoc wrote not at all. Every harness's shell is followed now: the changed
    file's content is unknown until read again, the written one is at that text."""
    session = Session.open(db, "sh", harness="pi")
    msgs = [user("go")]
    msgs += step("r1", "read", "def greet():\n    return 'hi'\n", path="/repo/app.py")
    msgs += step("b1", "bash", "", command="cd /repo && sed -i '' 's/hi/hello/' app.py")
    msgs += step("b2", "bash", "", command="cat > /repo/notes.md <<'EOF'\n# Notes\ngreet says hello\nEOF")
    msgs.append(say("done"))
    r = replay_transcript(pi(msgs), session, verify="all")
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.turns
    files = {o.meta["path"]: o for o in session.view.objects.values() if o.kind == "file"}
    assert files["app.py"].content is None and files["app.py"].meta["version"] == 2
    assert files["notes.md"].content == "# Notes\ngreet says hello"
    assert "return 'hi'" not in blocks(session)


GREET = "def greet():\n    return 'hello'\n"


@pytest.mark.parametrize(
    ("command", "output", "texts"),
    [
        ("cd /repo && cp app.py app2.py", "", {"app.py": GREET, "app2.py": GREET}),
        ("mv /repo/app.py /repo/lib/", "", {"app.py": None, "lib/app.py": GREET}),
        # a copy that failed, or of a file not all known, leaves its destination unknown
        ("cp app.py app2.py", "cp: app.py: Permission denied", {"app.py": GREET}),
        ("cp notes.md notes2.md", "", {"app.py": GREET}),
        ("git mv app.py app3.py", "", {"app.py": None, "app3.py": GREET}),
        ("git mv app.py app3.py", "fatal: destination exists, source=app.py, destination=app3.py", {"app.py": None}),
    ],
)
def test_a_copy_shows_the_text_it_copied(db, command: str, output: str, texts: dict[str, str | None]) -> None:
    """A real Pi session ran ``cp …/main.ts …/main-new.ts`` and then edited the copy, unknown to
    the replay (every edit of it unplaced). A copy of a file whose whole text is known holds that
    text, with the edits made to the source before it; an edit of the copy is placed in it."""
    session = Session.open(db, "cp", harness="pi")
    msgs = [user("go")]
    msgs += step("r1", "read", "def greet():\n    return 'hi'\n", path="/repo/app.py")
    msgs += step("e1", "edit", "ok", path="/repo/app.py", oldText="'hi'", newText="'hello'")
    msgs += step("r2", "read", "d\n", path="/repo/notes.md", offset=4)
    msgs += step("b1", "bash", output, command=command, cwd="/repo")
    msgs.append(say("done"))
    r = replay_transcript(pi(msgs), session, verify="all")
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.turns
    files = {o.meta["path"]: o.content for o in session.view.objects.values() if o.kind == "file"}
    assert files.pop("notes.md") == "[context_os: lines 1-3 not read yet]\nd\n"
    assert files == texts


@pytest.mark.parametrize(
    ("command", "unknown"),
    [
        ("cd /repo && git checkout -- .", {"app.py", "lib/util.py"}),  # the whole work tree
        ("git checkout -- lib", {"lib/util.py"}),  # a directory
        ("git stash", {"app.py", "lib/util.py"}),
        ("git checkout lib/util.py", {"lib/util.py"}),  # a path the session knows
        ("git checkout main", {"app.py", "lib/util.py"}),  # no such path: a branch (not /tmp's file)
        ("git restore --staged app.py", set()),  # the index only
        ("sed -i 's/X/Y/' lib/*.py", {"lib/util.py"}),  # a glob: the known files it matches
        ("sed -i 's/X/Y/' *.py", {"app.py"}),  # within one directory
    ],
)
def test_a_file_git_put_back_is_not_shown_at_its_old_text(db, command: str, unknown: set[str]) -> None:
    """A real Pi session read and edited files, then ran ``git checkout -- .``: every file was
    back at its committed text, shown at the edited one for the rest of the session. A file a git
    command may have changed is at a version whose content is unknown until read again."""
    session = Session.open(db, "git", harness="pi")
    msgs = [user("go")]
    msgs += step("r1", "read", "def greet():\n    return 'hi'\n", path="/repo/app.py")
    msgs += step("r2", "read", "X = 1\n", path="/repo/lib/util.py")
    msgs += step("w1", "write", "ok", path="/tmp/notes.md", content="# n\n")
    msgs += step("b1", "bash", "", command=command, cwd="/repo")
    msgs.append(say("done"))
    transcript = pi(msgs)
    r = replay_transcript(transcript, session, verify="all")
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.turns
    files = {o.meta["path"]: o for o in session.view.objects.values() if o.kind == "file"}
    assert {path for path, f in files.items() if f.content is None} == unknown
    assert all(files[p].meta["version"] == 2 for p in unknown)
    assert files["/tmp/notes.md"].content == "# n\n"  # outside the work tree
    if "app.py" in unknown:
        assert "return 'hi'" not in blocks(session)


@pytest.mark.parametrize(
    ("command", "output", "unknown"),
    [
        ("black app.py", "reformatted /repo/app.py\nAll done!\n1 file reformatted.", {"app.py"}),
        ("cd /repo && black .", "reformatted app.py\nAll done!\n1 file reformatted.", {"app.py"}),
        ("gofmt -w /repo/app.py", "", {"app.py"}),  # silent: the file it names
        ("black app.py", "All done!\n1 file left unchanged.", set()),
        ("npx prettier --write .", "app.py 12ms (unchanged)\nlib/util.py 3ms\n", {"lib/util.py"}),
        # a count alone does not say which files: not taken on a guess
        ("npm run check", "> biome check --write .\nChecked 2 files in 3ms. Fixed 1 file.", set()),
    ],
)
def test_a_file_a_formatter_rewrote_is_not_shown_at_its_old_text(
    db, command: str, output: str, unknown: set[str]
) -> None:
    """A formatter run through the shell rewrites files in place: one the command or its output
    names is at a version whose content is unknown until read again."""
    session = Session.open(db, "fmt", harness="pi")
    msgs = [user("go")]
    msgs += step("r1", "read", "def greet( ):\n    return 'hi'\n", path="/repo/app.py")
    msgs += step("r2", "read", "X=1\n", path="/repo/lib/util.py")
    msgs += step("b1", "bash", output, command=command)
    msgs.append(say("done"))
    r = replay_transcript(pi(msgs), session, verify="all")
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.turns
    files = {o.meta["path"]: o for o in session.view.objects.values() if o.kind == "file"}
    assert {path for path, f in files.items() if f.content is None} == unknown


@pytest.mark.parametrize("layout", [10, 11])
def test_a_short_read_or_write_shows_no_old_text_once_its_file_changed(db, layout: int) -> None:
    """A read of a short file (its output no longer than a stub) and a short write, both
    collapsed at once (their file objects show the text), then each file edited. Layout 11 marks
    both calls as showing a file's text: the read's result shows its stub, without a preview of
    its first line, and the write's call its content elided, its path kept; no message holds the
    old texts. Layout 10 showed the read's text and the write's content as they were: the
    measure counts those calls (before, it counted only results still expanded: 0)."""
    session = Session.open(db, f"short{layout}", harness="pi")
    session.view.layout = layout
    msgs = [user("go")]
    msgs += step("r1", "read", "x = 1\n", path="/repo/a.py")
    msgs += step("w1", "write", "Successfully wrote 6 bytes to /repo/b.py", path="/repo/b.py", content="y = 1\n")
    msgs += step("e1", "edit", "Successfully replaced text in /repo/a.py.", path="/repo/a.py", oldText="x", newText="X")
    msgs += step("e2", "edit", "Successfully replaced text in /repo/b.py.", path="/repo/b.py", oldText="y", newText="Y")
    msgs.append(say("done"))
    r = replay_transcript(pi(msgs), session, verify="all")
    assert r.stale_file_views_full == 2 and r.frames_verified == r.frames == 5
    shown = session.view.render().messages
    texts = [json.dumps(m) for m in shown if m["role"] != "user"]  # the history (blocks show files as now)
    old = [t for t in texts if "x = 1" in t or "y = 1" in t]
    if layout == 10:
        assert r.stale_file_views_assembled == 2 and len(old) == 2  # the calls after each edit
        return
    assert r.stale_file_views_assembled == 0 and old == []
    write = next(m for m in shown if m.get("tool_calls") and m["tool_calls"][0]["id"] == "w1")
    assert write["tool_calls"][0]["arguments"] == {"path": "/repo/b.py", "content": '[6 chars elided: activate("r4")]'}
    read = next(m for m in shown if m.get("tool_call_id") == "r1")
    assert read["text"] == '[read output, 2 tokens, collapsed: activate("r2")]'
    assert "X = 1" in blocks(session) and "Y = 1" in blocks(session)


def test_reading_more_of_a_file_keeps_a_small_session_passing_through(db) -> None:
    """A second read that only adds lines makes a new version of the file object, but nothing the
    harness showed is stale: the session still passes through. A read that disagrees with what was
    read before (the file changed behind the tools) ends that."""
    session = Session.open(db, "more", harness="pi")
    msgs = [user("go")]
    msgs += step(
        "r1", "read", "one\ntwo\n\n[2 more lines in file. Use offset=3 to continue.]", path="/repo/d.py", limit=2
    )
    msgs += step("r2", "read", "three\nfour", path="/repo/d.py", offset=3)
    msgs.append(say("read"))
    r = replay_transcript(pi(msgs), session)
    d = next(o for o in session.view.objects.values() if o.kind == "file")
    assert d.meta["version"] == 2 and d.content == "one\ntwo\nthree\nfour"
    assert session.managed_from is None and r.tokens_assembled == r.tokens_full
    msgs += step("r3", "read", "one\nTWO\nthree\nfour", path="/repo/d.py")
    msgs.append(say("changed"))
    again = Session.open(db, "changed", harness="pi")
    replay_transcript(pi(msgs), again)
    assert again.managed_from == 5  # the call that first sees the third read


def test_a_reused_call_id_is_judged_by_its_own_result(db) -> None:
    """A harness that reuses a call id (SWE-agent does) gets each result as its own object; the
    read's view is the second object's, collapsed when the file shows it, so the later edit leaves no
    call showing the old text. Keyed by the call id, the first object was checked instead."""
    session = Session.open(db, "reuse", harness="pi", policy=RetentionPolicy(**EAGER))
    msgs = [user("go")]
    msgs += step("c1", "bash", "ok", command="true")
    msgs += step("c1", "read", "def f():\n    return 1\n", path="/repo/app.py")
    msgs += step("e1", "edit", "ok", path="/repo/app.py", oldText="return 1", newText="return 2")
    msgs.append(say("done"))
    r = replay_transcript(pi(msgs), session, verify="all")
    assert r.orphaned_tool_results == 0 and r.stale_file_views_full == 1
    assert r.stale_file_views_assembled == 0
    read = next(o for o in session.view.objects.values() if o.id.startswith("toolcall:reuse:c1~"))
    assert read.collapsed and "return 2" in blocks(session)


def test_a_large_file_shows_a_window_around_the_lines_touched(db) -> None:
    session = Session.open(db, "win", harness="pi")
    body = "\n".join(f"line {n:04d} " + "x" * 60 for n in range(1, 801))
    msgs = [user("go")]
    msgs += step("w1", "write", "ok", path="/repo/big.txt", content=body)
    msgs += step("e1", "edit", "ok", path="/repo/big.txt", oldText="line 0700 ", newText="LINE 0700 ")
    msgs.append(say("done"))
    replay_transcript(pi(msgs), session, verify="all")
    tail = blocks(session)
    assert "LINE 0700" in tail and "line 0001" not in tail and "lines not shown]" in tail
    assert len(tail) < session.view.policy.file_view_chars + 2000  # type: ignore[operator]


def run_cli(*args: str, store: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-c",
        "from context_os.cli import main; main()",
        "--store",
        f"sqlite:///{store}",
        "replay",
        "--json",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["branch-v3.jsonl", "claude-code.jsonl", "openai.json"])
def test_ctxos_replay_reads_every_format(tmp_path: Path, name: str) -> None:
    out = run_cli(str(DATA / name), store=tmp_path / "s.db")
    assert out["turns"] >= 2 and out["orphaned_tool_results"] == 0
    assert out["frames_verified"] == out["frames_checked"] == out["frames"] == out["turns"]
    assert out["edits_total"] == out["edits_with_target_active"] == 1
    assert len(out["per_turn"]) == out["turns"]
    if name == "branch-v3.jsonl":
        assert out["tokens_pi_compacted"] is not None


def test_replays_in_the_same_second_each_get_a_default_id_of_their_own(tmp_path: Path, monkeypatch) -> None:
    """The default id names the second; a second replay within it takes the next free one
    instead of refusing a session the user never named. One the user names is still refused."""

    class Frozen(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Frozen:
            return cls(2026, 11, 29, 14, 27, 21, tzinfo=tz)

    monkeypatch.setattr(replay_cli, "datetime", Frozen)
    runner, url = CliRunner(), f"sqlite:///{tmp_path / 's.db'}"

    def replay(*args: str) -> Any:
        return runner.invoke(
            cli, ["--store", url, "replay", "--json", "--no-per-turn", str(DATA / "claude-code.jsonl"), *args]
        )

    ids = []
    for _ in range(3):
        done = replay()
        assert done.exit_code == 0, done.output
        ids.append(json.loads(done.stdout)["session"])
    assert ids == ["replay-20261129T142721", "replay-20261129T142721-2", "replay-20261129T142721-3"]
    named = replay("--session", "replay-20261129T142721")
    assert named.exit_code == 1 and "already exists" in named.output


@pytest.mark.e2e
@pytest.mark.slow
def test_ctxos_replay_of_the_real_pi_session_meets_the_targets(tmp_path: Path) -> None:
    if not REAL.exists():  # pragma: no cover - the shared data sits beside the repository
        pytest.skip(f"the real Pi session is not at {REAL}")
    out = run_cli(str(REAL), "--no-per-turn", "--session", "replay-target", store=tmp_path / "s.db")
    assert out["turns"] == 484
    assert 100_000_000 < out["tokens_full"] < 103_000_000  # the "about 102M"
    assert out["tokens_assembled"] <= 0.25 * out["tokens_full"]
    assert out["prefix_stability"] >= 0.90
    assert out["orphaned_tool_results"] == 0
    assert out["frames_verified"] == out["frames_checked"] == out["frames"] == 484
    assert out["edits_with_target_active"] >= 0.9 * out["edits_total"] and out["edits_total"] == 124
    assert out["stale_file_views_assembled"] == 0 < out["stale_file_views_full"]
    assert out["tokens_pi_compacted"] < out["tokens_full"]


def test_the_real_session_reads_with_its_compactions() -> None:
    if not REAL.exists():  # pragma: no cover
        pytest.skip(f"the real Pi session is not at {REAL}")
    assert len(read_session(REAL).compactions) == 2


def blocks(session: Session) -> str:
    """The context_os blocks the session would show now, joined."""
    texts = (m["text"] or "" for m in session.view.render().messages)
    return "\n".join(t for t in texts if t.startswith("<context_os>"))


def test_a_forked_pi_session_replays_its_own_calls_only(db, tmp_path: Path) -> None:
    """A Pi session forked or cloned from another (``parentSession`` in its header) starts with a
    copy of that session's entries, written before the fork: their model calls were the parent's
    (and its replay's). The fork's replay counts its own calls, each given the whole branch."""
    lines: list[dict[str, Any]] = [
        {"type": "session", "version": 3, "id": "fork", "timestamp": "2026-11-30T10:00:05.000Z", "cwd": "/repo"},
    ]
    parent_id = None

    def entry(at: str, message: dict[str, Any]) -> None:
        nonlocal parent_id
        n = f"e{len(lines)}"
        lines.append({"type": "message", "id": n, "parentId": parent_id, "timestamp": at, "message": message})
        parent_id = n

    lines[0]["parentSession"] = "/sessions/parent.jsonl"
    pi_call = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}}
    entry("2026-11-30T10:00:00.000Z", {"role": "user", "content": [{"type": "text", "text": "go"}]})
    entry("2026-11-30T10:00:01.000Z", {"role": "assistant", "content": [pi_call], "stopReason": "toolUse"})
    entry(
        "2026-11-30T10:00:02.000Z",
        {"role": "toolResult", "toolCallId": "c1", "toolName": "bash", "content": [{"type": "text", "text": "a.py"}]},
    )
    entry("2026-11-30T10:00:03.000Z", {"role": "assistant", "content": [{"type": "text", "text": "one file"}]})
    entry("2026-11-30T10:00:06.000Z", {"role": "user", "content": [{"type": "text", "text": "in the fork"}]})
    entry("2026-11-30T10:00:07.000Z", {"role": "assistant", "content": [{"type": "text", "text": "forked"}]})
    path = tmp_path / "fork.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    transcript = read_session(path)
    r = replay_transcript(transcript, Session.open(db, "fork", harness="pi"))
    assert r.turns == 1  # the fork's one call; the parent's two were the parent's
    assert r.rows[0].messages == 5  # the whole branch before it
    assert r.frames_verified == r.frames == 1
    assert any("forked" in note for note in transcript.info) and not transcript.notes
    # said as a note, not a warning: nothing is wrong with the file
    run = CliRunner().invoke(cli, ["--store", str(tmp_path / "cli.db"), "replay", str(path), "--verify", "none"])
    assert run.exit_code == 0, run.output
    assert f"note: {path}: forked from /sessions/parent.jsonl" in run.stderr and "warning" not in run.stderr


def test_a_file_of_a_transcript_from_a_clock_ahead_is_found_as_of_now(db, tmp_path: Path) -> None:
    """A Pi session whose clock ran an hour ahead of this one: its file versions took their
    messages' times as valid times, in the future, and every read "as of now" missed them
    (``ctxos objects inspect`` of a file its frames showed: "no object"). A time ahead of the
    clock is taken as now."""
    from datetime import UTC, timedelta

    from context_os.files.index import find_file_object

    rows = [json.loads(line) for line in (DATA / "branch-v3.jsonl").read_text().splitlines()]
    shift = datetime.now(UTC) + timedelta(hours=1) - datetime.fromisoformat(rows[0]["timestamp"])
    for row in rows:
        row["timestamp"] = (datetime.fromisoformat(row["timestamp"]) + shift).isoformat()
        if isinstance(row.get("message"), dict) and isinstance(row["message"].get("timestamp"), int):
            row["message"]["timestamp"] += int(shift.total_seconds() * 1000)
    ahead = tmp_path / "ahead.jsonl"
    ahead.write_text("".join(json.dumps(row) + "\n" for row in rows))
    t = read_session(ahead)
    session = Session.open(db, "ahead", harness=t.harness, workspace=t.cwd)
    r = replay_transcript(t, session, verify="all")
    assert r.frames_verified == r.turns and r.file_versions > 0
    found = find_file_object(db, "/repo/app.py")
    assert db.history(found) != []
