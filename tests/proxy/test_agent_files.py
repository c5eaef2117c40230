"""The agent's own file tools through ``ctxos proxy``: what its reads, patches and edits show keeps
its files as versioned objects (as ``ctxos replay`` does from a transcript), so the provider sees
each file once, at its latest text, never a stale copy; told from the tools a request offers;
known again after the proxy restarts; off with ``tool_names="none"``. Real SDK clients, a real
SQLite store, the scripted provider of tests/proxy/upstream.py."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.errors import ConfigError
from context_os.harness.anthropic import CLEARED
from context_os.harness.openai import OpenAIHook
from context_os.harness.responses import to_chat, to_items
from context_os.server.proxy import Proxy, derive_session
from context_os.store.sqlite import SqliteStore
from tests.files.conftest import WATCHDOG_RACE_WARNING, latest_meta
from tests.helpers import wait_for
from tests.proxy.running import Running, file_as_shown, verified_frames
from tests.proxy.upstream import Upstream, call, upstream

pytestmark = pytest.mark.timeout(120)

CODEX_TOOLS = [
    {"type": "function", "name": "shell_command", "parameters": {"type": "object", "properties": {}}},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch."},
    {"type": "function", "name": "update_plan", "parameters": {"type": "object", "properties": {}}},
]
CLAUDE_TOOLS = [
    {"name": name, "description": name, "input_schema": {"type": "object", "properties": {}}}
    for name in ("Read", "Edit", "Write", "Bash", "Glob", "Grep", "TodoWrite")
]
FILES = 40
LINES = 200


def line(n: int, k: int) -> str:
    return f"line {k} of m{n}: value = {k * n + 7}"


def message(text: str, role: str = "user") -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def codex_reads(files: int = FILES) -> list[dict[str, Any]]:
    """Codex reading ``files`` files of 200 lines with ``sed -n`` (~60k tokens: managed)."""
    items = [message("<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"), message("fix the values")]
    for n in range(files):
        # asking for more lines than the file has: its end is known
        arguments = json.dumps({"command": f"sed -n '1,{LINES + 60}p' m{n}.py", "workdir": "/w"})
        items.append({"type": "function_call", "name": "shell_command", "arguments": arguments, "call_id": f"r{n}"})
        text = "\n".join(line(n, k) for k in range(1, LINES + 1))
        output = f"Exit code: 0\nWall time: 0 seconds\nOutput:\n{text}\n"
        items.append({"type": "function_call_output", "call_id": f"r{n}", "output": output})
    return items


def codex_patch(call_id: str, k: int, new: str) -> list[dict[str, Any]]:
    """Codex patching line ``k`` of m0.py to ``new``."""
    patch = f"*** Begin Patch\n*** Update File: m0.py\n@@\n-{line(0, k)}\n+{new}\n*** End Patch"
    return [
        {"type": "custom_tool_call", "status": "completed", "call_id": call_id, "name": "apply_patch", "input": patch},
        {
            "type": "custom_tool_call_output",
            "call_id": call_id,
            "output": "Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following files:\nM m0.py\n",
        },
    ]


def outside_calls(sent: list[Any]) -> str:
    """Everything that went upstream but the agent's own calls (a patch's text names the old line)."""
    return json.dumps([i for i in sent if i.get("type") not in ("custom_tool_call", "function_call")])


def test_codex_reads_and_patches_keep_its_files_as_objects(
    proxy: Running, up: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="context_os.proxy")
    items = [*codex_reads(), *codex_patch("p1", 5, "line 5 of m0: value = 99"), message("done?", "assistant")]
    items.append(message("run the tests"))
    proxy.openai().responses.create(model="m", input=items, tools=CODEX_TOOLS)  # type: ignore[arg-type]
    sent = up.requests[0]["input"]
    assert len(json.dumps(sent)) < 0.5 * len(json.dumps(items))
    # the patched file shows its new text once, whole; its old line is nowhere but in the patch
    m0 = file_as_shown(sent, "m0.py")[1].split("\n")
    assert m0 == [line(0, k) if k != 5 else "line 5 of m0: value = 99" for k in range(1, LINES + 1)]
    assert line(0, 5) not in outside_calls(sent)
    # the reads' outputs collapsed into their files; the newest files shown whole
    outputs = {i["call_id"]: i["output"] for i in sent if i.get("type") == "function_call_output"}
    assert all(o.startswith("[shell_command output, ") for o in outputs.values())
    assert file_as_shown(sent, f"m{FILES - 1}.py")[1].split("\n")[-1] == line(FILES - 1, LINES)
    sid = derive_session("responses", {"input": items})
    # which tools it went by is said once (-v)
    said = [r.getMessage() for r in caplog.records if "file tools" in r.getMessage()]
    assert said == [f"proxy: session {sid}: the agent's file tools kept as objects: apply_patch, shell_command"]
    assert verified_frames(proxy.store, sid) == 1
    files = [v for v in proxy.store.find("file", {"path": "m0.py"}) if v.doc]
    assert [(v.doc["meta"]["version"], v.doc["meta"]["virtual"]) for v in files] == [(2, True)]


def test_the_responses_apis_built_in_shell_and_apply_patch_keep_files_as_objects(proxy: Running, up: Upstream) -> None:
    """A client of the Responses API's built-in tools (the Agents SDK's shell and apply_patch, run
    by the client): their reads and patches keep its files as objects as Codex's own tools do; a
    patch whose output says ``failed`` changes nothing, a command that exited non-zero reads no file,
    and what a read's shell says on stderr (a locale warning) is no line of the file."""
    items: list[dict[str, Any]] = []
    warning = "bash: warning: setlocale: LC_ALL: cannot change locale (en_US.UTF-8)\n"
    for item in codex_reads():  # the same reads, through the built-in shell
        if item.get("type") == "function_call":
            command = json.loads(item["arguments"])["command"]
            action = {"commands": [command], "timeout_ms": 10_000}
            items.append({"type": "shell_call", "call_id": item["call_id"], "action": action, "status": "completed"})
        elif item.get("type") == "function_call_output":
            stdout = item["output"].split("Output:\n", 1)[1]
            chunk = {"stdout": stdout, "stderr": warning, "outcome": {"type": "exit", "exit_code": 0}}
            items.append({"type": "shell_call_output", "call_id": item["call_id"], "output": [chunk]})
        else:
            items.append(item)
    operation = {"type": "update_file", "path": "m0.py", "diff": f"@@\n-{line(0, 5)}\n+line 5 of m0: value = 99\n"}
    not_applied = {"type": "update_file", "path": "m0.py", "diff": f"@@\n-{line(0, 6)}\n+line 6 of m0: lost\n"}
    missing = {"commands": ["cat gone.py"]}
    failed = {
        "stdout": "",
        "stderr": "cat: gone.py: No such file or directory\n",
        "outcome": {"type": "exit", "exit_code": 1},
    }
    items += [
        {"type": "apply_patch_call", "call_id": "p1", "operation": operation, "status": "completed"},
        {"type": "apply_patch_call_output", "call_id": "p1", "status": "completed", "output": "Updated m0.py"},
        {"type": "apply_patch_call", "call_id": "p2", "operation": not_applied, "status": "completed"},
        {"type": "apply_patch_call_output", "call_id": "p2", "status": "failed", "output": "context not found"},
        {"type": "shell_call", "call_id": "c1", "action": missing, "status": "completed"},
        {"type": "shell_call_output", "call_id": "c1", "output": [failed]},
        message("run the tests"),
    ]
    tools = [{"type": "shell"}, {"type": "apply_patch"}]
    proxy.openai().responses.create(model="m", input=items, tools=tools)  # type: ignore[arg-type]
    assert proxy.proxy.counts["failed_open"] == 0
    sent = up.requests[0]["input"]
    m0 = file_as_shown(sent, "m0.py")[1].split("\n")
    assert m0 == [line(0, k) if k != 5 else "line 5 of m0: value = 99" for k in range(1, LINES + 1)]
    texts = [v.doc["content"] for n in range(FILES) for v in proxy.store.find("file", {"path": f"m{n}.py"}) if v.doc]
    assert len(texts) == FILES and not any("setlocale" in t for t in texts)
    outside = json.dumps([i for i in sent if i.get("type") not in ("shell_call", "apply_patch_call")])
    assert line(0, 5) not in outside
    reads = [i["output"] for i in sent if i.get("type") == "shell_call_output" and i["call_id"].startswith("r")]
    assert len(reads) == FILES and all(o[0]["stdout"].startswith("[shell output, ") for o in reads)
    assert proxy.store.find("file", {"path": "gone.py"}) == []
    assert verified_frames(proxy.store, derive_session("responses", {"input": items})) == 1


def test_claude_code_reads_and_edits_through_the_anthropic_api(proxy: Running, up: Upstream) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the values"}]
    for n in range(FILES):
        use = {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {"file_path": f"/w/m{n}.py"}}
        numbered = "\n".join(f"{k:>6}\u2192{line(n, k)}" for k in range(1, LINES + 1))
        messages.append({"role": "assistant", "content": [use]})
        # a result's content as a string or as text blocks (Claude Code sends both)
        content: Any = numbered if n % 2 else [{"type": "text", "text": numbered}]
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": content}]}
        )
    # two edits in one message (parallel calls), their results in one user message
    edits = [
        {"file_path": f"/w/m{n}.py", "old_string": line(n, 9), "new_string": f"line 9 of m{n}: value = 4{n}"}
        for n in (0, 1)
    ]
    uses = [{"type": "tool_use", "id": f"toolu_e{n}", "name": "Edit", "input": e} for n, e in enumerate(edits)]
    messages.append({"role": "assistant", "content": uses})
    done = [
        {"type": "tool_result", "tool_use_id": f"toolu_e{n}", "content": f"The file /w/m{n}.py has been updated."}
        for n in (0, 1)
    ]
    messages.append({"role": "user", "content": done})
    messages.append({"role": "assistant", "content": "Edited."})
    messages.append({"role": "user", "content": "run the tests"})
    proxy.anthropic().messages.create(
        model="m",
        max_tokens=100,
        system="You are Claude Code.",
        messages=messages,
        tools=CLAUDE_TOOLS,  # type: ignore[arg-type]
    )
    sent = up.requests[0]["messages"]
    assert len(json.dumps(sent)) < 0.5 * len(json.dumps(messages))
    # what went upstream but the agent's calls: the edited line at its new text, never the old
    blocks = [b for m in sent if isinstance(m["content"], list) for b in m["content"] if b.get("type") != "tool_use"]
    text = json.dumps([*blocks, *(m["content"] for m in sent if isinstance(m["content"], str))])
    assert "line 9 of m0: value = 40" in text and line(0, 9) not in text
    assert "line 9 of m1: value = 41" in text and line(1, 9) not in text
    assert "[Read output, " in text and "/w/m0.py" in text


@pytest.mark.parametrize(
    "system",
    [
        "You are Claude Code.\n<env>\nPrimary working directory: /w\nIs directory a git repo: Yes\n</env>",
        "You are an expert coding assistant.\nCurrent date: 2026-12-05\n<cwd>\n/w\n</cwd>",  # Pi's
    ],
)
def test_a_relative_read_and_an_absolute_edit_are_one_file(proxy: Running, up: Upstream, system: str) -> None:
    """Without a workspace, a relative path is taken under the directory the agent's system
    prompt names, in any agent's words (Claude Code's ``Primary working directory:``, Pi's
    ``<cwd>``): the file a read named ``m0.py`` is the one an edit names ``/w/m0.py``, and the
    read's copy shows the edited line. Before, only Codex's and OpenCode's words were read: two
    objects, the read's a stale copy beside the edit."""
    messages = _reads(under="")[:-1]
    edit = {"file_path": "/w/m0.py", "old_string": line(0, 9), "new_string": "line 9 of m0: value = 40"}
    messages.append(
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_e", "name": "Edit", "input": edit}]}
    )
    done = {"type": "tool_result", "tool_use_id": "toolu_e", "content": "The file /w/m0.py has been updated."}
    messages += [{"role": "user", "content": [done]}, {"role": "assistant", "content": "Edited."}]
    messages.append({"role": "user", "content": "run the tests"})
    client = proxy.anthropic()
    client.messages.create(model="m", max_tokens=100, system=system, messages=messages, tools=CLAUDE_TOOLS)  # type: ignore[arg-type]
    sent = up.requests[0]["messages"]
    blocks = [b for m in sent if isinstance(m["content"], list) for b in m["content"] if b.get("type") != "tool_use"]
    text = json.dumps([*blocks, *(m["content"] for m in sent if isinstance(m["content"], str))])
    assert "line 9 of m0: value = 40" in text and line(0, 9) not in text
    assert "/w/m0.py" in text


def test_claude_codes_clearing_of_old_results_changes_nothing_sent(tmp_path: Path) -> None:
    """Claude Code clears old tool results in its own history after a while (its microcompact:
    ``[Old tool result content cleared]``, or a ``<persisted-output>`` pointer): the conversation is
    not read again, what context_os sent before goes again (its collapsed results, its files, the
    exchange with our tool the client never saw), and the originals stay stored for ``activate``."""
    messages = _reads()
    ask = {"model": "m", "max_tokens": 100, "system": "You are Claude Code.", "tools": CLAUDE_TOOLS}
    with upstream(replies=[call("pin", id="r3"), "pinned", "ok"]) as up:
        running = Running(tmp_path, up)
        try:
            client = running.anthropic()
            client.messages.create(messages=messages, **ask)  # type: ignore[call-overload]
            said = [{"role": "assistant", "content": "pinned"}, {"role": "user", "content": "go on"}]
            client.messages.create(messages=[*_cleared(messages), *said], **ask)  # type: ignore[call-overload]
            before, after = up.requests[1]["messages"], up.requests[2]["messages"]
            sid = derive_session("anthropic", {"system": "You are Claude Code.", "messages": messages})
            assert running.store.doc(f"session:{sid}")["meta"].get("retired", []) == []  # nothing read again
            # the conversation as sent before, our pin's exchange in it, up to what came since
            ours = [m for m in before if not str(m["content"]).startswith("<context_os>")]
            assert after[: len(ours) - 1] == ours[:-1]
            assert any(b.get("name") == "pin" for m in after if isinstance(m["content"], list) for b in m["content"])
            assert CLEARED not in json.dumps(after)
            assert verified_frames(running.store, sid) == 3
        finally:
            running.close()


def test_results_cleared_while_the_proxy_was_down_are_the_same_history(tmp_path: Path) -> None:
    """A proxy restarted after Claude Code cleared old results knows them from the store: the
    conversation is not read again (a resumed session's entries say what each message of results
    hashed to before clearing), and what goes upstream shows no clearing."""
    messages = _reads()
    ask = {"model": "m", "max_tokens": 100, "system": "You are Claude Code.", "tools": CLAUDE_TOOLS}
    sid = derive_session("anthropic", {"system": "You are Claude Code.", "messages": messages})
    with upstream(replies=["ok", "ok"]) as up:
        first = Running(tmp_path, up)
        try:
            first.anthropic().messages.create(messages=messages, **ask)  # type: ignore[call-overload]
        finally:
            first.close()
        second = Running(tmp_path, up)
        try:
            said = [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go on"}]
            second.anthropic().messages.create(messages=[*_cleared(messages), *said], **ask)  # type: ignore[call-overload]
            assert second.store.doc(f"session:{sid}")["meta"].get("retired", []) == []  # nothing read again
            assert CLEARED not in json.dumps(up.requests[1]["messages"])
            assert verified_frames(second.store, sid) == 2
        finally:
            second.close()


def _reads(under: str = "/w/") -> list[dict[str, Any]]:
    """A user's ask, then a Read of each file (its path ``under`` + its name) with its result,
    then the user again."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the values"}]
    for n in range(FILES):
        use = {"type": "tool_use", "id": f"toolu_read{n}", "name": "Read", "input": {"file_path": f"{under}m{n}.py"}}
        numbered = "\n".join(f"{k:>6}\u2192{line(n, k)}" for k in range(1, LINES + 1))
        messages.append({"role": "assistant", "content": [use]})
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_read{n}", "content": numbered}]}
        )
    messages.append({"role": "user", "content": "and now?"})
    return messages


def _cleared(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as Claude Code's microcompact leaves them: old tool results cleared, or saved
    to a file with a ``<persisted-output>`` pointer in their place; the newest six as they were."""
    cleared = json.loads(json.dumps(messages))
    for k, m in enumerate(cleared[:-6]):
        for b in m["content"] if isinstance(m["content"], list) else ():
            if b.get("type") == "tool_result":
                b["content"] = CLEARED if k % 3 else "<persisted-output>\nsaved to /tmp/r.txt"
    return cleared


def test_a_restarted_proxy_knows_the_files_again(tmp_path: Path) -> None:
    """The files' lines are read back from their stored versions: a patch after the restart
    applies to them (without them the file's content would be unknown and not shown)."""
    before = [*codex_reads(), message("read them", "assistant"), message("now fix m0")]
    after = [*before, *codex_patch("p1", 150, "line 150 of m0: fixed")]
    with upstream(replies=["ok", "ok"]) as up:
        first = Running(tmp_path, up)
        try:
            first.openai().responses.create(model="m", input=before, tools=CODEX_TOOLS)  # type: ignore[arg-type]
        finally:
            first.close()
        second = Running(tmp_path, up)
        try:
            second.openai().responses.create(model="m", input=after, tools=CODEX_TOOLS)  # type: ignore[arg-type]
            m0 = file_as_shown(up.requests[1]["input"], "m0.py")[1].split("\n")
            assert m0 == [line(0, k) if k != 150 else "line 150 of m0: fixed" for k in range(1, LINES + 1)]
            assert verified_frames(second.store, derive_session("responses", {"input": after})) == 2
        finally:
            second.close()


def test_with_tool_names_none_the_agents_tools_are_tool_outputs_only(tmp_path: Path) -> None:
    items = [*codex_reads(), *codex_patch("p1", 5, "line 5 of m0: value = 99"), message("run the tests")]
    with upstream(replies=["ok"]) as up:
        running = Running(tmp_path, up, tool_names="none")
        try:
            running.openai().responses.create(model="m", input=items, tools=CODEX_TOOLS)  # type: ignore[arg-type]
        finally:
            running.close()
    with SqliteStore(tmp_path / "check.db") as check:
        session = Session.open(check, derive_session("responses", {"input": items}), harness="openai")
        expected = to_items(OpenAIHook(session).transform_context(to_chat(items)))
    assert up.requests[0]["input"] == json.loads(json.dumps(expected))
    assert 'kind="file"' not in json.dumps(expected)
    with SqliteStore(tmp_path / "bad.db") as store, pytest.raises(ConfigError, match="unknown tool-name preset 'vim'"):
        Proxy(store, up.url, tool_names="vim")


@pytest.mark.filterwarnings(WATCHDOG_RACE_WARNING)
@pytest.mark.parametrize("named", [False, True], ids=["workspace", "auto"])
def test_with_a_workspace_the_agents_files_come_from_the_disk(tmp_path: Path, named: bool) -> None:
    """``--workspace``: a file under it that the agent's tools touch is the object context_os's
    own ``read`` shows (one object for one file), at the disk's text, so a change no tool call
    said (a formatter) shows too; a file outside it is kept as the calls show it. The proxy's
    tracker records a change no call touches (the user's editor): the next call shows it stale.
    ``--workspace auto`` (``named``): the same in the directory Claude Code names."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for n in range(FILES):
        (ws / f"m{n}.py").write_text("\n".join(line(n, k) for k in range(1, LINES + 1)) + "\n")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the values"}]

    def use(n: str, name: str, args: dict[str, Any], result: str) -> None:
        messages.append({"role": "assistant", "content": [{"type": "tool_use", "id": n, "name": name, "input": args}]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": n, "content": result}]})

    def numbered(text: str, lines: int = LINES) -> str:
        return "\n".join(f"{k:>6}\u2192{t}" for k, t in enumerate(text.split("\n")[:lines], 1))

    for n in range(FILES):
        use(f"toolu_{n}", "Read", {"file_path": f"{ws}/m{n}.py"}, numbered((ws / f"m{n}.py").read_text()))
    use("toolu_x", "Read", {"file_path": "/elsewhere/notes.txt"}, "     1\u2192a note\n     2\u2192another")
    with upstream(replies=["ok", "ok", "ok"]) as up:
        running = Running(tmp_path, up, workspace="auto" if named else ws)
        system = (
            f"You are Claude Code.\n<env>\nPrimary working directory: {ws}\n</env>" if named else "You are Claude Code."
        )
        try:
            client = running.anthropic()
            ask = {"model": "m", "max_tokens": 100, "system": system, "tools": CLAUDE_TOOLS}
            client.messages.create(messages=messages, **ask)  # type: ignore[call-overload]
            # then the agent's Edit changes m0.py on disk, a formatter m1.py (no call says so), and
            # the agent reads the top of m1.py again
            edited = (ws / "m0.py").read_text().replace(line(0, 9), "line 9 of m0: value = 40")
            (ws / "m0.py").write_text(edited)
            formatted = (ws / "m1.py").read_text().replace(line(1, 3), "line 3 of m1: formatted")
            (ws / "m1.py").write_text(formatted)
            edit = {"file_path": f"{ws}/m0.py", "old_string": line(0, 9), "new_string": "line 9 of m0: value = 40"}
            use("toolu_e", "Edit", edit, f"The file {ws}/m0.py has been updated.")
            use("toolu_r", "Read", {"file_path": f"{ws}/m1.py", "offset": 1, "limit": 5}, numbered(formatted, 5))
            client.messages.create(messages=messages, **ask)  # type: ignore[call-overload]
            sent = json.dumps(up.requests[1]["messages"])
            assert "read" in {t["name"] for t in up.requests[1]["tools"]}  # ours, beside Claude Code's Read
            [conv] = running.proxy._conversations.values()
            # one object for one file: the one context_os's read shows, at the disk's text
            ours = json.loads(conv.hook.call_tool("read", {"path": "m0.py"}))
            m0 = [v for v in running.store.find("file", {"abs_path": str(ws / "m0.py")}) if v.doc]
            assert [v.id for v in m0] == [ours["id"]] and not m0[0].doc["meta"].get("virtual")
            assert m0[0].doc["content"] == edited and "line 9 of m0: value = 40" in sent
            assert "line 3 of m1: formatted" in sent and line(1, 3) not in sent
            notes = [v for v in running.store.find("file", {"abs_path": "/elsewhere/notes.txt"}) if v.doc]
            assert [v.doc["meta"].get("virtual") for v in notes] == [True]
            # the user's editor changes the last file read, and no call says so: the proxy's
            # tracker records it, and the next call shows the file stale (its Read loads it)
            last = ws / f"m{FILES - 1}.py"
            last.write_text(last.read_text().replace(line(FILES - 1, 2), "line 2: from the editor"))
            [shown] = [v for v in running.store.find("file", {"abs_path": str(last)}) if v.doc]
            wait_for(lambda: latest_meta(running.store, shown.id)["cause"] == "tracker", what="the tracker's version")
            messages.append({"role": "assistant", "content": "Done."})
            messages.append({"role": "user", "content": "anything else?"})
            client.messages.create(messages=messages, **ask)  # type: ignore[call-overload]
            version = latest_meta(running.store, shown.id)["version"]
            third = json.dumps(up.requests[2]["messages"])
            assert f'stale=\\"version {version} is newer: activate(id) loads it\\"' in third
            assert re.search(rf"- {shown.id} file m{FILES - 1}\.py \d+ tokens v1 \(v{version} newer\) active", third)
            sid = derive_session("anthropic", {"system": system, "messages": messages})
            assert verified_frames(running.store, sid) == 3
        finally:
            running.close()
        assert running.proxy.trackers is not None and running.proxy.trackers.running() == []


def test_a_history_that_reads_a_file_deleted_since_shows_the_files_object_missing(tmp_path: Path) -> None:
    """A conversation the proxy takes in whole (a fork of one without a key, a new one that carries
    an old history) whose history reads a file of the workspace that is gone from the disk since:
    the file's object (the index knows it, recorded missing) stands for it, inactive, and the
    read's result is collapsed; nothing of the text it showed goes upstream. Before, the read was
    kept as a second object, virtual, active, showing the text of a file no longer there."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "m0.py").write_text("\n".join(line(0, k) for k in range(1, LINES + 1)) + "\n")
    numbered = "\n".join(f"{k:>6}\u2192{line(0, k)}" for k in range(1, LINES + 1))
    use = {"type": "tool_use", "id": "toolu_r", "name": "Read", "input": {"file_path": f"{ws}/m0.py"}}
    read = [
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_r", "content": numbered}]},
    ]
    ask = {"model": "m", "max_tokens": 100, "system": "You are Claude Code.", "tools": CLAUDE_TOOLS}
    with upstream(replies=["ok", "ok"]) as up:
        running = Running(tmp_path, up, workspace=ws)
        try:
            client = running.anthropic()
            client.messages.create(messages=[{"role": "user", "content": "fix the values"}, *read], **ask)  # type: ignore[call-overload]
            assert line(0, 9) not in json.dumps(up.requests[0]["messages"][1:2])  # (its object shows it)
            (ws / "m0.py").unlink()
            [m0] = [v for v in running.store.find("file", {"abs_path": str(ws / "m0.py")}) if v.doc]
            wait_for(lambda: latest_meta(running.store, m0.id).get("missing"), what="the deletion recorded")
            other = [{"role": "user", "content": "an old task"}, *read]
            other += [{"role": "assistant", "content": "Read."}, {"role": "user", "content": "go on"}]
            client.messages.create(messages=other, **ask)  # type: ignore[call-overload]
            assert line(0, 9) not in json.dumps(up.requests[1])
            files = [v for v in running.store.find("file", {"abs_path": str(ws / "m0.py")}) if v.doc]
            assert [v.id for v in files] == [m0.id]  # one object for one file: no virtual one beside it
        finally:
            running.close()
