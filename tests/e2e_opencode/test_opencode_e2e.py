"""End to end through the real OpenCode (``opencode run``, from npm) with a scripted model (the only
fake, tests/proxy/upstream.py) as an OpenAI-compatible provider: directly, so that the session
OpenCode exports (``opencode export``) can be checked against what it sent; and through ``ctxos
proxy`` (the real command). OpenCode, its read and edit tools, the proxy and the SQLite store are
real, on real files in a temp workspace. OpenCode is installed on first use (``npm ci`` of
``cli/package-lock.json``: the native binary ``opencode-ai`` ships for linux-x64, named directly,
since its other platforms' packages cannot be locked where the registry lacks them; run directly:
tests/helpers.py ``native_cli``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

from context_os.replay.transcripts import read_session, read_sessions
from context_os.store.sqlite import SqliteStore
from tests.helpers import APP, NativeCli, native_cli, provisioned
from tests.proxy.running import file_as_shown, only_session, replayed, scripted_proxy, verified_frames
from tests.proxy.upstream import ToolCall, call, upstream

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CLI = Path(__file__).resolve().parent / "cli"

FILES = 10
"""Reads of 400-line files before the edit: with OpenCode's own system prompt and tools the
conversation passes the 50,000 tokens context_os manages from."""


OFFLINE = {
    "OPENCODE_PURE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
}
"""OpenCode with nothing fetched (no plugins installed, no model list, no language server): the
test runs offline once OpenCode is installed; a request to anywhere but this machine fails."""


@pytest.fixture(scope="module")
def opencode() -> NativeCli:
    return provisioned(
        "OpenCode", lambda: native_cli(CLI, "opencode-linux-x64", "opencode-{platform}-{arch}", "bin/opencode")
    )


@pytest.fixture
def titles() -> Iterator[str]:
    """A model of its own for OpenCode's small model, which writes the session's title beside the
    first call (at once, so in no set order with it): its OpenAI base URL."""
    with upstream(replies=["A title"] * 4) as up:
        yield f"{up.url}/v1"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text(APP)
    (work / "notes.txt").write_text("f7 must return 'seven'\n")
    for n in range(FILES):
        (work / f"m{n}.txt").write_text(
            "".join(f"line {k} of m{n}: some text of the file to read\n" for k in range(400))
        )
    return work


def run_opencode(
    opencode: NativeCli,
    work: Path,
    model_url: str,
    titles: str,
    *args: str,
    out: Path | None = None,
    api: str = "@ai-sdk/openai-compatible",
    model: str = "m1",
) -> str:
    """``opencode ARGS`` in ``work``, its model ``model_url``'s ``model`` (a base URL ending in
    ``/v1``, spoken to through ``api``, an AI SDK provider OpenCode bundles), its data, config and
    cache in a home of its own; what it printed (into ``out``, if given: a file, as a user
    redirects ``opencode export``, whose output through a pipe ends at 64 KiB)."""
    home = work.parent / "home"
    provider = {"npm": "@ai-sdk/openai-compatible", "options": {"apiKey": "sk-e2e"}, "models": {"m1": {"name": "M1"}}}
    ours = {"npm": api, "name": "ctxos", "options": {"apiKey": "sk-e2e", "baseURL": model_url}}
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "ctxos": {**ours, "models": {model: {"name": model}}},
            "titles": {**provider, "name": "titles", "options": {"apiKey": "sk-e2e", "baseURL": titles}},
        },
        "model": f"ctxos/{model}",
        "small_model": "titles/m1",
        "autoupdate": False,
        "share": "disabled",
    }
    (work / "opencode.json").write_text(json.dumps(config))
    xdg = {f"XDG_{k}_HOME": str(home / v) for k, v in (("DATA", ".local/share"), ("CONFIG", ".config"),
                                                       ("CACHE", ".cache"), ("STATE", ".local/state"))}  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "NO_COLOR": "1", **xdg, **OFFLINE}
    with open(out, "w") if out is not None else nullcontext(subprocess.PIPE) as stdout:
        proc = subprocess.run(
            opencode.command(*args), cwd=work, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True,
            timeout=240, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout if out is None else out.read_text()


def exported(opencode: NativeCli, work: Path, model_url: str, titles: str) -> Path:
    """The one session OpenCode kept, as ``opencode export`` writes it, in a file."""
    listed = run_opencode(opencode, work, model_url, titles, "session", "list", "--format", "json")
    (session,) = json.loads(listed)
    out = work.parent / "export.json"
    run_opencode(opencode, work, model_url, titles, "export", session["id"], out=out)
    return out


def test_an_opencode_export_reads_as_the_conversation_opencode_sent(
    opencode: NativeCli, work: Path, titles: str
) -> None:
    """OpenCode reads app.py, fixes f7 with its edit tool and reads notes.txt: its exported
    session reads as the conversation it sent in its last request, text for text, then its
    answer, and so does its database; what ``opencode run --format json`` printed reads so but
    for the prompt, which it does not print; and the export replays with a verified frame per
    model call, the edit made with app.py's text in context."""
    replies: list[str | ToolCall] = [
        call("read", filePath=str(work / "app.py")),
        call("edit", filePath=str(work / "app.py"), oldString="    return 7\n", newString="    return 'seven'\n"),
        call("read", filePath=str(work / "notes.txt")),
        "Done: f7 returns 'seven'.",
    ]
    with upstream(replies=replies) as model:
        events = work.parent / "events.jsonl"
        run_opencode(opencode, work, f"{model.url}/v1", titles, "run", "--format", "json", "fix f7", out=events)
        requests = list(model.requests)
        export = exported(opencode, work, f"{model.url}/v1", titles)
    assert "Done: f7 returns 'seven'." in events.read_text()
    assert "    return 'seven'\n" in (work / "app.py").read_text()  # OpenCode's edit wrote it
    assert len(requests) == len(replies)

    read = read_session(export)
    assert read.format == "opencode" and read.tool_names == "opencode"
    assert read.cwd == str(work)
    system, *sent = requests[-1]["messages"]
    assert system["role"] == "system"  # OpenCode's, which it does not keep in the session
    assert _plain(read.messages) == [*_plain(sent), {"role": "assistant", "content": replies[-1]}]

    # OpenCode's database holds the same session
    database = work.parent / "home" / ".local" / "share" / "opencode" / "opencode.db"
    (kept,) = read_sessions(database)
    assert kept.messages == read.messages and kept.session_id == read.session_id
    # what it printed: all but the prompt
    printed = read_session(events)
    assert printed.format == "opencode" and printed.session_id == read.session_id
    assert printed.messages == read.messages[1:]
    assert replayed(events, work.parent / "events.db")["turns"] == len(requests) - 1  # the first call's input is gone

    summary = replayed(export, work.parent / "replay.db")
    assert summary["format"] == "opencode"
    assert summary["turns"] == summary["frames_verified"] == len(requests)
    assert summary["files"] == 2
    assert summary["edits_total"] == summary["edits_with_target_text_shown"] == 1
    assert summary["orphaned_tool_results"] == 0


def _plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as compared: a reply with calls and no text has no content (OpenCode sends ``""``)."""
    return [{**m, "content": m["content"] or None} if m["role"] == "assistant" else m for m in messages]


PATCH = "*** Begin Patch\n*** Update File: app.py\n@@ def f7():\n-    return 7\n+    return 'seven'\n*** End Patch"


@pytest.mark.parametrize(
    ("api", "model"),
    [("@ai-sdk/openai-compatible", "m1"), ("@ai-sdk/anthropic", "m1"), ("@ai-sdk/openai-compatible", "gpt-5")],
)
def test_opencodes_own_read_and_edit_through_the_proxy_keep_the_file_as_an_object_equal_to_the_disk(
    opencode: NativeCli, work: Path, titles: str, tmp_path: Path, api: str, model: str
) -> None:
    """OpenCode reads ten files, the model pins one of them with context_os's own tool (run by the
    proxy), then OpenCode reads and edits app.py with its own tools: the provider is then shown
    app.py as a file object at the text the edit left on disk; the reads' outputs collapsed into
    their files; every frame verified. Through chat completions (an OpenAI-compatible provider)
    and Anthropic's Messages API (OpenCode's provider for Claude models); a GPT model edits with
    OpenCode's apply_patch, whose path is relative to the directory OpenCode's system prompt names."""
    reads = [call("read", filePath=str(work / f"m{n}.txt")) for n in range(FILES)]
    edit = call("edit", filePath=str(work / "app.py"), oldString="    return 7\n", newString="    return 'seven'\n")
    if model.startswith("gpt-"):  # OpenCode offers these apply_patch in place of edit and write
        edit = call("apply_patch", patchText=PATCH)
    script = [*reads, call("pin", id="r3"), call("read", filePath=str(work / "app.py")), edit, "Done."]
    with scripted_proxy(tmp_path, script) as proxied:
        printed = run_opencode(opencode, work, proxied.url, titles, "run", "fix f7", api=api, model=model)
        requests = list(proxied.up.requests)
        export = exported(opencode, work, proxied.url, titles)
    assert "Done." in printed
    on_disk = (work / "app.py").read_text()
    assert "    return 'seven'\n" in on_disk
    assert len(requests) == FILES + 4  # one per model call of OpenCode's, and our pin's round
    last = requests[-1]["messages"]
    # the file as the model is shown it after the edit (its block, and the patch after it that
    # keeps the block in place for the prompt cache): the disk's text, its line numbers read off
    # (OpenCode's read does not say whether the file ends with a line break, which its edit keeps
    # and its apply_patch writes); its path under the directory OpenCode's system prompt names, so
    # that a read of /…/work/app.py and a patch of app.py are one file
    after = on_disk if model.startswith("gpt-") else on_disk.removesuffix("\n")
    assert file_as_shown(last, "app.py") == (2, after)
    # the reads' outputs collapsed: their text is in the file objects, in no output
    outputs = _outputs(last)
    assert not any("def f7():" in o or "line 7 of m" in o for o in outputs)
    assert sum(o.startswith("[read output, ") for o in outputs) == FILES + 1
    with SqliteStore(proxied.store) as s:
        assert verified_frames(s, only_session(s)) == len(requests)

    # the export replays as OpenCode's own tools read it (OpenCode never saw our round)
    summary = replayed(export, tmp_path / "replay.db")
    assert summary["turns"] == summary["frames_verified"] == FILES + 3
    assert summary["files"] == FILES + 1
    assert summary["edits_total"] == summary["edits_with_target_text_shown"] == 1
    assert summary["stale_file_views_full"] > 0 and summary["stale_file_views_assembled"] == 0
    with SqliteStore(tmp_path / "replay.db") as s:
        (app,) = s.find("file", {"path": "app.py"})
        versions = [v.doc["content"] for v in s.history(app.id, with_docs=True) if v.doc]
    assert versions == [APP.removesuffix("\n"), after]


def _outputs(messages: list[dict[str, Any]]) -> list[str]:
    """The tool outputs among messages, chat completions' (tool messages) or Anthropic's
    (``tool_result`` blocks, their text)."""
    found = [str(m["content"]) for m in messages if m["role"] == "tool"]
    blocks = [b for m in messages if isinstance(m["content"], list) for b in m["content"]]
    for b in blocks:
        if b.get("type") == "tool_result":
            content = b["content"]
            found.append(content if isinstance(content, str) else "".join(p.get("text", "") for p in content))
    return found


def test_a_sub_agents_session_is_replayed_from_opencodes_database(opencode: NativeCli, work: Path, titles: str) -> None:
    """OpenCode's task tool runs a sub-agent in a session of its own, which the export of the
    main session does not hold (a note names it) and OpenCode's database does: replayed from the
    database, the main session and then its sub-agent's, each with a verified frame per call."""
    task = call("task", description="read the notes", prompt="What do the notes say?", subagent_type="general")
    replies: list[str | ToolCall] = [
        task,
        call("read", filePath=str(work / "notes.txt")),
        "The notes say f7 must return 'seven'.",
        "Done: the notes say f7 must return 'seven'.",
    ]
    with upstream(replies=replies) as model:
        printed = run_opencode(opencode, work, f"{model.url}/v1", titles, "run", "what do the notes say?")
        requests = list(model.requests)
    assert "Done: the notes say" in printed
    assert len(requests) == len(replies)

    database = work.parent / "home" / ".local" / "share" / "opencode" / "opencode.db"
    main, sub = read_sessions(database)
    assert (main.label, sub.label) == (main.session_id, sub.session_id)
    # each as OpenCode sent it: the sub-agent's last call (the third), the main session's (the fourth)
    assert _plain(sub.messages) == [*_plain(requests[2]["messages"][1:]), {"role": "assistant", "content": replies[2]}]
    assert _plain(main.messages) == [*_plain(requests[3]["messages"][1:]), {"role": "assistant", "content": replies[3]}]
    assert f'<task id="{sub.session_id}" state="completed">' in main.messages[2]["content"]

    summary = replayed(database, work.parent / "replay.db")
    assert summary["format"] == "opencode"
    assert [(s["label"], s["turns"], s["frames_verified"]) for s in summary["sessions"]] == [
        (main.session_id, 2, 2),
        (sub.session_id, 2, 2),
    ]
    # one session of the database: the main one brings its sub-agent's
    picked = replayed(database, work.parent / "picked.db", "--only", main.session_id, "--no-per-turn")
    assert [s["label"] for s in picked["sessions"]] == [main.session_id, sub.session_id]
    alone = replayed(database, work.parent / "alone.db", "--only", sub.session_id, "--no-per-turn")
    assert alone["turns"] == 2 and [s["label"] for s in alone["sessions"]] == [sub.session_id]

    # the export of the main session names the sub-agent's, which it does not hold
    listed = json.loads(run_opencode(opencode, work, f"{model.url}/v1", titles, "session", "list", "--format", "json"))
    assert [s["id"] for s in listed] == [main.session_id]
    export = work.parent / "main.json"
    run_opencode(opencode, work, f"{model.url}/v1", titles, "export", main.session_id, out=export)
    (note,) = read_session(export).info
    assert note.startswith("1 sub-agent session(s) of its task calls are not in this export")
    assert f"(opencode export {sub.session_id} writes the first)" in note


def test_with_workspace_auto_the_directory_opencode_names_is_its_workspace(
    opencode: NativeCli, work: Path, titles: str, tmp_path: Path
) -> None:
    """``ctxos proxy --workspace auto``: the proxy reads the directory OpenCode works in from its
    system prompt, so its files there are read from the disk and tracked, as with ``--workspace``
    naming it."""
    script: list[str | ToolCall] = [call("read", filePath=str(work / "app.py")), "Done."]
    with scripted_proxy(tmp_path, script, "--workspace", "auto") as proxied:
        printed = run_opencode(opencode, work, proxied.url, titles, "run", "read app.py")
        requests = list(proxied.up.requests)
    assert "Done." in printed and len(requests) == 2
    with SqliteStore(proxied.store) as s:
        (app,) = [v for v in s.find("file", {"abs_path": str(work.resolve() / "app.py")}) if v.doc]
        assert not app.doc["meta"].get("virtual") and app.doc["content"] == APP  # from the disk
