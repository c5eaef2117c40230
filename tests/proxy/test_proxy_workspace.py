"""``ctxos proxy --workspace auto``: each conversation's workspace is the directory its agent
names, each agent its own way (the phrasings below are the real CLIs'), when this machine has it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.context.lease import lease_id
from context_os.server.proxy import Proxy
from context_os.server.proxy_workspace import agent_directory
from context_os.store.sqlite import SqliteStore
from tests.helpers import wait_for
from tests.proxy.running import Running, proxy_command
from tests.proxy.upstream import upstream


def _said(api: str, where: str, text: str) -> dict[str, Any]:
    """A request whose system prompt (``system``) or first message (``first``) says ``text``."""
    if api == "anthropic":
        first = [{"role": "user", "content": [{"type": "text", "text": text}]}]
        return (
            {"system": [{"type": "text", "text": text}], "messages": []} if where == "system" else {"messages": first}
        )
    if api == "responses":
        if where == "system":
            return {"instructions": text, "input": "hi"}
        return {"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]}
    if api == "gemini":
        if where == "system":
            return {"systemInstruction": {"parts": [{"text": text}]}, "contents": []}
        return {"contents": [{"role": "user", "parts": [{"text": text}]}]}
    return {"messages": [{"role": "system" if where == "system" else "user", "content": text}]}


AGENTS = {
    "claude code": ("anthropic", "system", "<env>\nWorking directory: {d}\nIs directory a git repo: No\n</env>"),
    "claude code 2.1": (
        "anthropic",
        "system",
        "# Environment\n - Primary working directory: {d}\n - Is a git repository",
    ),
    "opencode": ("anthropic", "system", "<env>\n  Working directory: {d}\n  Is directory a git repo: no\n</env>"),
    "pi": ("openai", "system", "You are an expert coding assistant.\n</docs>\n\n<cwd>\n{d}\n</cwd>"),
    "pi before": ("openai", "system", "You are an expert coding assistant.\nCurrent working directory: {d}"),
    "codex": ("responses", "first", "<environment_context>\n  <cwd>{d}</cwd>\n  <shell>bash</shell>"),
    "gemini cli": ("gemini", "first", "This is the Gemini CLI.\n- **Workspace Directories:**\n  - {d}\n- **Directory"),
    "qwen code": ("openai", "first", "My operating system is: linux\nI'm currently working in the directory: {d}\n"),
}


@pytest.mark.parametrize("agent", list(AGENTS))
def test_each_agent_names_its_directory_its_own_way(tmp_path: Path, agent: str) -> None:
    api, where, said = AGENTS[agent]
    assert agent_directory(api, _said(api, where, said.format(d=tmp_path))) == tmp_path.resolve()


def test_only_a_directory_of_this_machine_that_may_be_watched_is_taken(tmp_path: Path) -> None:
    """Not the root, nor the home directory itself (a tracker would watch all under them), nor a
    relative path, a path this machine lacks, a file; and only what the agent says before the
    model's first turn: a directory named later (in a tool's output) is not its own."""
    (tmp_path / "f.txt").write_text("x")
    for named in ("/", os.path.expanduser("~"), "relative/dir", str(tmp_path / "gone"), str(tmp_path / "f.txt")):
        assert agent_directory("openai", _said("openai", "system", f"Working directory: {named}")) is None
    late = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}]
    late.append({"role": "user", "content": f"Working directory: {tmp_path}"})
    assert agent_directory("openai", {"messages": late}) is None
    # however many messages of its own the agent sends first (Codex: its permissions, AGENTS.md,
    # then its environment); none after a tool's output
    setup: list[Any] = [{"type": "message", "role": "developer", "content": "permissions"}] * 4
    setup.append(_said("responses", "first", f"<environment_context>\n  <cwd>{tmp_path}</cwd>")["input"][0])
    assert agent_directory("responses", {"input": setup}) == tmp_path.resolve()
    setup.insert(0, {"type": "function_call_output", "call_id": "c", "output": "x"})
    assert agent_directory("responses", {"input": setup}) is None


def test_each_conversation_works_in_the_directory_its_agent_names(tmp_path: Path) -> None:
    """Two agents in two directories through one proxy: each conversation's files in its own
    directory, tracked by a tracker of its own (context_os's ``read`` offered beside the agent's
    tools); an agent that names none is served as without a workspace."""
    dirs = [tmp_path / "one", tmp_path / "two"]
    for d in dirs:
        d.mkdir()
    with upstream(replies=["ok"] * 3) as up:
        running = Running(tmp_path, up, workspace="auto")
        try:
            client = running.anthropic()
            for k, d in enumerate(dirs):
                system = f"You are Claude Code.\n<env>\nWorking directory: {d}\n</env>"
                client.messages.create(
                    model="m", max_tokens=10, system=system, messages=[{"role": "user", "content": f"task {k}"}]
                )
            client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "no directory"}])
            offered = [{t["name"] for t in r.get("tools") or ()} for r in up.requests]
            assert ["read" in names for names in offered] == [True, True, False]
            status = running.proxy.status()
            assert status["workspace"] == "auto"
            assert sorted(t["workspace"] for t in status["trackers"]) == [str(d.resolve()) for d in dirs]
            roots = sorted(str(c["workspace"]) for c in status["sessions"])  # each session's own
            assert roots == sorted(["None", *(str(d.resolve()) for d in dirs)])
        finally:
            running.close()


def test_the_proxy_command_takes_auto(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with upstream(replies=["fine"]) as up, proxy_command(tmp_path / "c.db", up.url, None, "--workspace", "auto") as url:
        import anthropic

        client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="k", max_retries=0)
        system = f"<env>\nWorking directory: {work}\n</env>"
        got = client.messages.create(
            model="m", max_tokens=10, system=system, messages=[{"role": "user", "content": "x"}]
        )
        assert got.content[0].text == "fine"  # type: ignore[union-attr]
        assert "read" in {t["name"] for t in up.requests[0]["tools"]}


def test_a_directory_is_watched_while_a_conversation_in_it_is_open(tmp_path: Path) -> None:
    """With ``--workspace auto`` each directory an agent named got a tracker that ran until the
    proxy stopped: one running for days, meeting a directory per task, watched every one of them
    (an inotify watch for each directory below each). Now the last conversation of a directory
    to close as idle stops its tracker; a conversation in it that comes again starts one, which
    records first what changed on the disk meanwhile. Two conversations of one directory share
    its tracker until both are closed."""
    one, two = tmp_path / "one", tmp_path / "two"
    for d in (one, two):
        d.mkdir()
    (two / "notes.txt").write_text("first\n")

    def request(d: Path, task: str, *more: dict[str, Any]) -> dict[str, Any]:
        body = _said("anthropic", "system", f"<env>\nWorking directory: {d}\n</env>")
        return dict(body, model="m", max_tokens=10, messages=[{"role": "user", "content": task}, *more])

    def watched() -> list[str]:
        return sorted(t["workspace"] for t in proxy.status()["trackers"])

    def idle(*plans: Any) -> None:
        for plan in plans:
            wait_for(lambda plan=plan: time.monotonic() - plan.conversation.used > 0.2, "a conversation to idle")

    with SqliteStore(tmp_path / "p.db") as store:
        proxy = Proxy(store, "http://127.0.0.1:9", timeout=0.05, idle_close_s=0.1, workspace="auto")
        try:
            a = proxy.prepare("anthropic", {}, request(two, "task a"))
            b = proxy.prepare("anthropic", {}, request(two, "task b"))
            assert a.conversation is not None and b.conversation is not None
            assert a.conversation is not b.conversation
            assert watched() == [str(two.resolve())]
            tracker = next(t for t in proxy.trackers.running())  # type: ignore[union-attr]
            (indexed,) = tracker.track([two / "notes.txt"])
            idle(a)
            with b.conversation.lock:  # b in use: a closes, the tracker b holds runs on
                c = proxy.prepare("anthropic", {}, request(one, "task c"))
            assert a.conversation.closed and not b.conversation.closed
            assert watched() == sorted([str(one.resolve()), str(two.resolve())])
            idle(b, c)
            d = proxy.prepare(
                "anthropic", {}, {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "none"}]}
            )
            assert b.conversation.closed and c.conversation.closed and d.conversation is not None
            assert watched() == [] and not tracker.running
            (two / "notes.txt").write_text("second, while nothing watched\n")
            again = proxy.prepare(
                "anthropic",
                {},
                request(two, "task a", {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go on"}),
            )
            assert again.conversation is not None and not again.conversation.closed
            assert watched() == [str(two.resolve())]
            now = store.get(indexed.id)
            assert now is not None and now.doc["content"] == "second, while nothing watched\n"
        finally:
            proxy.close()
        assert watched() == []


def test_a_conversation_that_fails_to_open_gives_back_its_session_and_tracker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the session was opened (its hook, its file tools) left the session's lease
    taken and its workspace's tracker running until the proxy stopped; the request went upstream
    as it came. Now both are given back: the tracker stops, another writer may open the session."""
    work = tmp_path / "work"
    work.mkdir()
    body = dict(_said("anthropic", "system", f"<env>\nWorking directory: {work}\n</env>"), model="m", max_tokens=10)
    body["messages"] = [{"role": "user", "content": "task"}]

    opened: list[str] = []

    def broken(self: Proxy, name: str, session: Session, *args: Any, **kwargs: Any) -> Any:
        opened.append(session.id)
        raise RuntimeError("the hook could not be made")

    with SqliteStore(tmp_path / "p.db") as store:
        proxy = Proxy(store, "http://127.0.0.1:9", timeout=0.05, workspace="auto")
        try:
            with monkeypatch.context() as patched:
                patched.setattr(Proxy, "_conversation_of", broken)
                plan = proxy.prepare("anthropic", {}, body)
            assert plan.conversation is None and plan.body is plan.original
            assert proxy.counts["failed_open"] == 1 and proxy.status()["trackers"] == []
            (sid,) = opened
            assert store.doc(lease_id(sid))["content"]["expires"] == 0  # its lease is free
            plan = proxy.prepare("anthropic", {}, body)  # and the next request opens it
            assert plan.conversation is not None and plan.conversation.hook.session.id == sid
            assert [t["workspace"] for t in proxy.status()["trackers"]] == [str(work.resolve())]
        finally:
            proxy.close()
