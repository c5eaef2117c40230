"""End to end through the real Claude Code CLI (``claude -p``, from npm) pointed at ``ctxos proxy``
(the real command) as its Anthropic API. Only the model is scripted (tests/proxy/upstream.py):
Claude Code, its Read and Edit tools, the proxy and the SQLite store are real, on real files in a
temp workspace. Claude Code is installed on first use (``npm ci`` of ``cli/package-lock.json``, then
the native binary it ships for this platform, run directly: tests/helpers.py ``native_cli``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from context_os.replay.formats.claude_code import read_claude_code
from context_os.replay.formats.common import load
from context_os.store.sqlite import SqliteStore
from tests.helpers import APP, NativeCli, native_cli, provisioned
from tests.proxy.running import file_as_shown, only_session, replayed, scripted_proxy, verified_frames
from tests.proxy.upstream import ToolCall, call, upstream

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CLI = Path(__file__).resolve().parent / "cli"
PACKAGE = "@anthropic-ai/claude-code"

FILES = 12
"""Reads of 400-line files before the edit: with Claude Code's own system prompt and tools the
conversation passes the 50,000 tokens context_os manages from."""
MODEL = "claude-sonnet-4-6"
"""Not a model Claude Code 2.1.332 retires: it warns of claude-sonnet-4-5's retirement on 2026-11-30."""


@pytest.fixture(scope="module")
def claude() -> NativeCli:
    return provisioned(
        "the Claude Code CLI", lambda: native_cli(CLI, PACKAGE, PACKAGE + "-{platform}-{arch}", "claude")
    )


def script(work: Path) -> list[str | ToolCall]:
    reads: list[str | ToolCall] = [call("Read", file_path=str(work / f"m{n}.txt")) for n in range(FILES)]
    edit = call("Edit", file_path=str(work / "app.py"), old_string="    return 7\n", new_string="    return 'seven'\n")
    # one of context_os's own tools, which the proxy runs (Claude Code never sees the call)
    pin = call("pin", id="r3")
    return [*reads, pin, call("Read", file_path=str(work / "app.py")), edit, "Done: f7 returns 'seven'."]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text(APP)
    for n in range(FILES):
        (work / f"m{n}.txt").write_text(
            "".join(f"line {k} of m{n}: some text of the file to read\n" for k in range(400))
        )
    return work


def test_claude_codes_own_read_and_edit_keep_the_file_as_an_object_equal_to_the_disk(
    claude: NativeCli, work: Path, tmp_path: Path
) -> None:
    """Claude Code (thinking on, as it runs) reads twelve files, the model pins one of
    them with context_os's own tool (run by the proxy), then Claude Code reads and edits app.py
    with its own Edit tool: the provider is then shown app.py once, as a file object at the text the edit left on disk,
    never the old line; the reads' outputs collapsed into their files; every frame verified."""
    home = tmp_path / "home"
    home.mkdir()
    with scripted_proxy(tmp_path, script(work)) as proxied:
        env = _env(home, proxied.url.removesuffix("/v1"))
        proc = subprocess.run(
            claude.command(
                "-p", "fix f7 in app.py", "--permission-mode", "acceptEdits", "--model", MODEL,
                "--output-format", "stream-json", "--verbose",
            ),
            cwd=work, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Done: f7 returns 'seven'." in proc.stdout
    on_disk = (work / "app.py").read_text()
    assert "    return 'seven'\n" in on_disk  # Claude Code's Edit wrote the file itself
    requests = list(proxied.up.requests)
    assert len(requests) == FILES + 4  # one per model call of Claude Code's, and our pin's round
    # Claude Code runs with thinking on (adaptive with this model): our pin's round went back
    # starting with the thinking block the model gave with its call
    assert all(r["thinking"]["type"] in ("enabled", "adaptive") for r in requests)
    ours = requests[FILES + 1]["messages"][-2]["content"]
    assert [b["type"] for b in ours] == ["thinking", "tool_use"] and ours[1]["name"] == "pin"
    last = requests[-1]["messages"]
    # the file as the model is shown it after the edit: the disk's text, its line numbers read off
    assert file_as_shown(last, "app.py") == (2, on_disk)  # under the directory Claude Code names
    # never the old line but in Claude Code's own Edit call and in the file's block of version 1,
    # which context_os's patch after it changes (the block stays in place for the prompt cache)
    blocks = [b for m in last if isinstance(m["content"], list) for b in m["content"] if b.get("type") != "tool_use"]
    texts = [b["text"] for b in blocks if b.get("type") == "text"] + [
        m["content"] for m in last if isinstance(m["content"], str)
    ]
    stale = [t for t in texts if "    return 7\n" in t]
    assert all('path="app.py" version="1"' in t for t in stale)
    assert not stale or any("(now version 2) changed" in t and "+    return 'seven'" in t for t in texts)
    assert "    return 7\\n" not in json.dumps([b for b in blocks if b.get("type") != "text"])
    # the reads' outputs collapsed at once: their text is in the file objects
    reads = {b["id"] for m in last if isinstance(m["content"], list) for b in m["content"] if b.get("name") == "Read"}
    results = [b for b in blocks if b.get("type") == "tool_result" and b["tool_use_id"] in reads]
    assert len(results) == FILES + 1 and all(str(r["content"]).startswith("[Read output, ") for r in results)
    with SqliteStore(proxied.store) as s:
        assert verified_frames(s, only_session(s)) == len(requests)

    # the transcript Claude Code wrote of this session replays as Claude Code's own tools read it
    (transcript,) = (home / ".claude" / "projects").glob("*/*.jsonl")
    summary = replayed(transcript, tmp_path / "replay.db")
    assert summary["format"] == "claude-code"
    assert summary["turns"] == summary["frames_verified"] == FILES + 3  # Claude Code never saw our round
    assert summary["files"] == FILES + 1
    assert summary["edits_total"] == summary["edits_with_target_text_shown"] == 1
    assert summary["stale_file_views_full"] > 0 and summary["stale_file_views_assembled"] == 0
    assert summary["orphaned_tool_results"] == 0
    # and so does what it printed of it (stream-json, as `claude -p` and the SDKs give it)
    streamed = tmp_path / "stream.jsonl"
    streamed.write_text(proc.stdout)
    printed = replayed(streamed, tmp_path / "stream.db")
    # every call but the first, whose input (the prompt) `claude -p` does not print
    assert printed["format"] == "claude-code" and printed["turns"] == printed["frames_verified"] == FILES + 2
    assert printed["edits_total"] == printed["edits_with_target_text_shown"] == 1
    assert printed["orphaned_tool_results"] == 0 and printed["stale_file_views_assembled"] == 0
    with SqliteStore(tmp_path / "replay.db") as s:
        (app,) = s.find("file", {"path": "app.py"})
        versions = [v.doc["content"] for v in s.history(app.id, with_docs=True) if v.doc]
    assert versions == [APP, on_disk]  # as read (its line numbers off), then as edited


def test_the_replay_reads_claude_codes_attachments_as_claude_code_sends_them(
    claude: NativeCli, work: Path, tmp_path: Path
) -> None:
    """Claude Code 2.1.3xx writes what it adds to a turn (a file named with @, its environment,
    the date, reminders) as ``attachment`` entries with the text it sent (``rendered``). Two runs
    of one session (the second resumes it with ``-c``): the conversation the replay reads from
    the transcript is, text for text, what Claude Code sent in its last request, and then its
    reply."""
    home = tmp_path / "home"
    home.mkdir()
    first = [
        call("Read", file_path=str(work / "app.py")),
        call("Edit", file_path=str(work / "app.py"), old_string="    return 7\n", new_string="    return 'seven'\n"),
        "Done: f7 returns 'seven'.",
    ]
    second = [call("Read", file_path=str(work / "m1.txt")), "Read m1 again."]
    with upstream(replies=[*first, *second]) as up:  # one upstream: the replies' ids go on across runs
        for args in (["look at @m0.txt, then fix f7 in app.py"], ["-c", "now read m1.txt"]):
            proc = subprocess.run(
                claude.command(*args[:-1], "-p", args[-1], "--permission-mode", "acceptEdits", "--model", MODEL),
                cwd=work, env=_env(home, up.url), capture_output=True, text=True, timeout=240,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr[-3000:]
        requests = list(up.requests)
    assert len(requests) == len(first) + len(second)
    (transcript,) = (home / ".claude" / "projects").glob("*/*.jsonl")
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    attached = [e["attachment"]["type"] for e in lines if e.get("type") == "attachment" and e.get("rendered")]
    assert {"file", "date"} <= set(attached)  # the @-named file, and what every turn gets
    (read,) = read_claude_code(load(transcript, 10**8))
    sent = _request_text(requests[-1]["messages"])
    assert _pi_text(read.messages) == [*sent, ("text", "Read m1 again.")]
    # the @-named file's text reached the model in the first user message, before the prompt
    first_user = [t for _, t in sent[: sent.index(("text", "look at @m0.txt, then fix f7 in app.py"))]]
    assert any("line 399 of m0" in t for t in first_user)


def _env(home: Path, url: str) -> dict[str, str]:
    """Claude Code's environment: a home of its own, the API at ``url``."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-ant-e2e",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def _request_text(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The text of an Anthropic request's messages in order (text, calls, results; no thinking)."""
    out = []
    for m in messages:
        content = m["content"]
        for b in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            if b["type"] == "text":
                out.append(("text", b["text"]))
            elif b["type"] == "tool_use":
                out.append(("call", json.dumps([b["name"], b["input"]], sort_keys=True)))
            elif b["type"] == "tool_result":
                result = b.get("content") or ""
                out.append(("result", result if isinstance(result, str) else "".join(x["text"] for x in result)))
    return out


def _pi_text(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The same of the Pi messages a reader gives."""
    out = []
    for m in messages:
        if m["role"] == "toolResult":
            out.append(("result", "".join(b["text"] for b in m["content"] if b["type"] == "text")))
            continue
        for b in m["content"]:
            if b["type"] == "text":
                out.append(("text", b["text"]))
            elif b["type"] == "toolCall":
                out.append(("call", json.dumps([b["name"], b["arguments"]], sort_keys=True)))
    return out


def test_with_workspace_auto_the_directory_claude_code_names_is_its_workspace(
    claude: NativeCli, work: Path, tmp_path: Path
) -> None:
    """``ctxos proxy --workspace auto``: the proxy reads the directory Claude Code works in from
    its own system prompt, so its files there are read from the disk and tracked (context_os's
    ``read`` offered beside its tools), as with ``--workspace`` naming it."""
    home = tmp_path / "home"
    home.mkdir()
    replies: list[str | ToolCall] = [call("Read", file_path=str(work / "app.py")), "Read it."]
    with scripted_proxy(tmp_path, replies, "--workspace", "auto") as proxied:
        env = _env(home, proxied.url.removesuffix("/v1"))
        proc = subprocess.run(
            claude.command("-p", "read app.py", "--model", MODEL),
            cwd=work, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    requests = list(proxied.up.requests)
    assert len(requests) == 2 and all("read" in {t["name"] for t in r["tools"]} for r in requests)
    with SqliteStore(proxied.store) as s:
        (app,) = [v for v in s.find("file", {"abs_path": str(work.resolve() / "app.py")}) if v.doc]
        assert not app.doc["meta"].get("virtual") and app.doc["content"] == APP  # from the disk
