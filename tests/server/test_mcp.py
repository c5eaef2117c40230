"""``ctxos mcp`` through the official MCP SDK's own client: over stdio (a real ``ctxos mcp``
subprocess) and over streamable HTTP (its token and Host checks)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from mcp import ClientSession, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

from context_os import Session
from context_os.cli import cli
from context_os.context.evict import evict
from context_os.context.tools import ToolRegistry
from context_os.errors import InputError, NotFound, PathDenied
from context_os.files import Workspace
from context_os.harness.openai import OpenAIHook
from context_os.server.mcp import TEXT_LIMIT, ContextOsMcp
from context_os.sources.memory import MemoryScopes
from context_os.sources.recall import Recall
from context_os.store.base import Op, Tx
from context_os.store.sqlite import SqliteStore
from tests.files.conftest import WATCHDOG_RACE_WARNING, latest_meta
from tests.helpers import ctrl_c_after, user, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CTXOS = str(Path(sys.executable).parent / "ctxos")


@asynccontextmanager
async def stdio(store: Path, workspace: Path, *args: str) -> Any:
    # the SDK passes a server only a few safe variables unless told: the test's own user
    # directories (tests/conftest.py) must reach it, or it writes the real user's memory
    params = StdioServerParameters(
        command=CTXOS,
        args=["--store", str(store), "mcp", "--workspace", str(workspace), "--embedder", "none", *args],
        env=dict(os.environ),
    )
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, name: str, args: dict[str, Any]) -> tuple[Any, bool]:
    r = await session.call_tool(name, args)
    text = r.content[0].text  # type: ignore[union-attr]
    try:
        return json.loads(text), r.is_error
    except ValueError:
        return text, r.is_error


def _repo(tmp_path: Path, name: str, text: str) -> Path:
    """A workspace holding one file."""
    ws = tmp_path / "repo"
    ws.mkdir()
    (ws / name).write_text(text)
    return ws


def test_the_tools_over_stdio(tmp_path: Path) -> None:
    ws = _repo(tmp_path, "calc.py", "def add(a, b):\n    return a - b\n")
    db = tmp_path / "s.db"
    # a session of another agent, with recorded frames
    with SqliteStore(db) as store:
        hook = OpenAIHook(Session.open(store, "agent-1", harness="openai"))
        sent = hook.transform_context([user("the sum in calc.py is wrong")])
        hook.session.close()

    async def main() -> None:
        async with stdio(db, ws) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert set(tools) == {"read", "activate", "deactivate", "lines", "inspect", "frames", "recall", "remember"}
            # the schemas are the registry's, not a copy
            with SqliteStore(tmp_path / "other.db") as other:
                app = ContextOsMcp(other, session="x", workspace=ws)
                ours = {t["name"]: t for t in app.registry.schemas}
                app.close()
            assert tools["read"].input_schema == ours["read"]["parameters"]
            assert tools["inspect"].description == ours["inspect"]["description"]
            # lines in a client's words: no collapsed result's ref ("r12"), no context of ours
            said = json.dumps([tools["lines"].description, tools["lines"].input_schema])
            assert "r12" not in said and "your context" not in said and "file path" in said

            first, err = await call(s, "read", {"path": "calc.py"})
            assert not err and first["text"].startswith("def add") and first["version"] == 1
            (ws / "calc.py").write_text("def add(a, b):\n    return a + b\n")
            second, _ = await call(s, "read", {"path": "calc.py"})
            assert second["version"] == 2 and "a + b" in second["text"] and second["id"] == first["id"]

            got, _ = await call(s, "activate", {"id": first["id"]})
            assert got["kind"] == "file" and "a + b" in got["text"]
            line, err = await call(s, "lines", {"id": first["id"], "start": 2, "end": 2})
            assert not err and line == f"[context_os: {first['id']}, lines 2-2 of 2]\n    return a + b"
            off, _ = await call(s, "deactivate", {"id": "calc.py"})
            assert off["status"] == "deactivated"

            history, _ = await call(s, "inspect", {"id": first["id"]})
            assert [v["version"] for v in history["versions"]] == [1, 2]
            # a file read so far by its path too, as activate and deactivate take it
            by_path, err = await call(s, "inspect", {"id": "calc.py"})
            assert not err and by_path["versions"] == history["versions"]
            shown, err = await call(s, "lines", {"id": "calc.py", "start": 2})
            assert not err and shown.splitlines()[1:] == ["    return a + b"], shown
            then, _ = await call(s, "inspect", {"id": first["id"], "as_of": history["versions"][0]["valid_time"]})
            assert "a - b" in then["version"]["doc"]["content"]
            as_ms, err = await call(s, "inspect", {"id": first["id"], "as_of": history["versions"][0]["valid_time_ms"]})
            assert not err and as_ms["version"] == then["version"]  # epoch ms, as the schema says

            # this session records reads, no model calls: without a session, frames names the
            # sessions that have frames (it was a NotFound for this one, the only default)
            own, err = await call(s, "frames", {})
            assert not err and own["frames"] == [] and "frames(session)" in own["next"]
            assert [(x["session"], x["turns"]) for x in own["sessions"]] == [("agent-1", 1)]
            frames, _ = await call(s, "frames", {"session": "agent-1"})
            assert [f["turn"] for f in frames["frames"]] == [1]
            one, _ = await call(s, "frames", {"session": "agent-1", "turn": 1})
            assert one["verified"] is True
            shown = await s.read_resource(one["resource"])
            messages = json.loads(shown.contents[0].text)  # type: ignore[union-attr]
            assert "the sum in calc.py is wrong" in json.dumps(messages) and len(messages) == len(sent)

            v1 = await s.read_resource(f"context-os://object/{first['id']}@1")
            assert "a - b" in json.loads(v1.contents[0].text)["doc"]["content"]  # type: ignore[union-attr]
            latest = await s.read_resource(history["resource"])
            assert "a + b" in json.loads(latest.contents[0].text)["doc"]["content"]  # type: ignore[union-attr]
            listed = [str(r.uri) for r in (await s.list_resources()).resources]
            assert listed == [one["resource"]]  # the store's newest frames

            found, _ = await call(s, "recall", {"query": "sum calc wrong"})
            assert found["hits"]
            kept, err = await call(s, "remember", {"text": "calc.py adds", "scope": "global"})
            assert not err and kept["appended"] == "- calc.py adds"
            written = Path(os.environ["XDG_DATA_HOME"]) / "context_os" / "memory" / "MEMORY.md"
            assert written.read_text().splitlines()[-1] == "- calc.py adds"  # the test's, not the user's
            # no memory index is put in an MCP client's context: the answer says where it is instead
            assert kept["next"] == f"recall finds it; read({str(written)!r}) shows the whole memory file"
            again, err = await call(s, "read", {"path": str(written)})
            assert not err and "- calc.py adds" in again["text"]

            # failures: the model reads them as tool errors; protocol misuse is an MCP error
            for name, args, says in [
                ("read", {"path": "../outside.txt"}, "outside the workspace"),
                ("read", {}, "path"),
                ("read", {"path": 3}, "path"),
                ("inspect", {"id": "file:nope"}, "no object"),
                ("frames", {"session": "agent-1", "turn": 9}, "9"),
                ("remember", {"text": "x", "scope": "team"}, "scope"),
            ]:
                out, err = await call(s, name, args)
                assert err and says in out["error"], (name, out)
            with pytest.raises(MCPError, match="unknown tool"):
                await s.call_tool("rm_rf", {})
            for uri in (
                "context-os://object/file:nope@1",
                f"context-os://object/{first['id']}@7",
                "file:///etc/passwd",
            ):
                with pytest.raises(MCPError):
                    await s.read_resource(uri)

    anyio.run(main)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stdio_stops_cleanly_on_a_signal_while_its_client_holds_the_pipes(tmp_path: Path, sig: int) -> None:
    """A supervisor (or Ctrl-C) stops the server while the client still holds stdin open."""
    cmd = [CTXOS, "--store", str(tmp_path / "s.db"), "mcp", "--workspace", str(tmp_path), "--embedder", "none"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        proc.stdin.write(json.dumps(init).encode() + b"\n")
        proc.stdin.flush()
        assert b'"result"' in proc.stdout.readline()  # serving
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert b"Aborted" not in err and b"Traceback" not in err


@contextmanager
def http_server(tmp_path: Path) -> Iterator[tuple[str, str, subprocess.Popen[bytes]]]:
    token_file = tmp_path / "token"
    cmd = [CTXOS, "--store", str(tmp_path / "s.db"), "mcp", "--workspace", str(tmp_path), "--embedder", "none"]
    proc = subprocess.Popen([*cmd, "--http", "0", "--token-file", str(token_file)], stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            m = re.search(rb"listening on (http://127\.0\.0\.1:\d+/mcp)", line)
            if m:
                break
        else:
            pytest.fail("ctxos mcp --http never said where it listens")
        yield m.group(1).decode(), token_file.read_text().strip(), proc
    finally:
        proc.terminate()
        proc.wait(30)
        assert proc.stderr is not None
        proc.stderr.close()
    assert not token_file.exists()  # removed at exit


def test_streamable_http_needs_the_token_and_a_loopback_host(tmp_path: Path) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    with http_server(tmp_path) as (url, token, _):

        async def main() -> None:
            headers = {"Authorization": f"Bearer {token}"}
            async with (
                httpx2.AsyncClient(headers=headers) as http,
                streamable_http_client(url, http_client=http) as streams,
                ClientSession(streams[0], streams[1]) as s,
            ):
                await s.initialize()
                names = {t.name for t in (await s.list_tools()).tools}
                assert {"read", "inspect", "frames"} <= names
            async with httpx2.AsyncClient() as http:
                init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
                accept = {"Accept": "application/json, text/event-stream"}
                assert (await http.post(url, json=init, headers=accept)).status_code == 401
                wrong = accept | {"Authorization": "Bearer nope"}
                assert (await http.post(url, json=init, headers=wrong)).status_code == 401
                for scheme in ("Basic", "Bearer" + token[:4]):  # only the token, after "Bearer "
                    other = accept | {"Authorization": f"{scheme} {token}"}
                    assert (await http.post(url, json=init, headers=other)).status_code == 401
                # the scheme in any case, as HTTP has it (a client sending "bearer" was refused)
                lower = accept | {"Authorization": f"bearer {token}", "Content-Type": "application/json"}
                assert (await http.post(url, json=init, headers=lower)).status_code != 401
                rebinding = accept | {"Authorization": f"Bearer {token}", "Host": "evil.example:80"}
                assert (await http.post(url, json=init, headers=rebinding)).status_code in (400, 403, 421)
                page = accept | {"Authorization": f"Bearer {token}", "Origin": "https://evil.example"}
                assert (await http.post(url, json=init, headers=page)).status_code in (400, 403)
                right = accept | {"Authorization": f"Bearer {token}"}
                plain = right | {"Content-Type": "text/plain"}
                assert (await http.post(url, content=json.dumps(init), headers=plain)).status_code in (400, 415)
                garbage = right | {"Content-Type": "application/json"}
                assert (await http.post(url, content=b"{not json", headers=garbage)).status_code == 400

        anyio.run(main)


@pytest.mark.parametrize(
    "token", ["p\u00e4sswort-long-enough-1234", " padded-token-long-enough-1 ", "ctl\x01-token-long-enough"]
)
def test_a_token_no_client_could_send_is_refused_before_anything_is_opened(tmp_path: Path, token: str) -> None:
    """``$CTXOS_MCP_TOKEN`` not in ASCII failed with a traceback writing the token file (after the
    store and the session were opened, and left its temporary file behind); with a space at
    either end, the server ran and refused every request (a client's header value is trimmed)."""
    token_file = tmp_path / "mcp" / "token"
    cmd = [CTXOS, "--store", str(tmp_path / "s.db"), "mcp", "--workspace", str(tmp_path), "--http", "0"]
    proc = subprocess.run(
        [*cmd, "--token-file", str(token_file)],
        env={**os.environ, "CTXOS_MCP_TOKEN": token},
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 1 and b"CTXOS_MCP_TOKEN" in proc.stderr and b"Traceback" not in proc.stderr
    assert not (tmp_path / "s.db").exists() and not token_file.parent.exists()


def test_streamable_http_closes_a_connection_whose_headers_never_finish(tmp_path: Path) -> None:
    """uvicorn waits for ever for a request's headers: a client that opens connections and never
    finishes them held a socket each, as many as it liked. They are due within a deadline now."""
    import socket
    import threading

    import uvicorn

    from context_os.server.mcp import http_app, http_protocol
    from context_os.server.transports import listen_socket

    with SqliteStore(tmp_path / "s.db") as store:
        app = ContextOsMcp(store, session="m", track=False)
        sock = listen_socket("127.0.0.1", 0)  # listening already: a connection waits for uvicorn
        port = sock.getsockname()[1]
        config = uvicorn.Config(http_app(app, "t" * 32), log_level="warning", lifespan="on", http=http_protocol(1.0))
        server = uvicorn.Server(config)
        serving = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        serving.start()
        try:
            head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            with socket.create_connection(("127.0.0.1", port), timeout=30) as slow:
                slow.sendall(head.encode())  # and never the rest
                assert slow.recv(65536) == b""  # closed, with nothing answered
            with socket.create_connection(("127.0.0.1", port), timeout=30) as whole:
                whole.sendall(f"{head}Content-Length: 2\r\nConnection: close\r\n\r\n{{}}".encode())
                answer = b""
                while chunk := whole.recv(65536):
                    answer += chunk
            assert answer.split()[1] == b"401"  # a whole request is answered (here: no token)
        finally:
            server.should_exit = True
            serving.join(timeout=30)
            app.close()


def test_the_help_names_every_tool_the_server_offers(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "s.db") as store:
        app = ContextOsMcp(store, session="s", workspace=tmp_path, recall=Recall(store), memory=MemoryScopes(tmp_path))
        offered = app.registry.names
        app.close()
    shown = CliRunner().invoke(cli, ["mcp", "--help"]).stdout
    listed = re.search(r"Tools: ([^.]*)\.", " ".join(shown.split()))
    assert listed is not None and set(listed.group(1).split(", ")) == offered


def test_a_registry_with_no_workspace_has_no_read(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "s.db") as store:
        app = ContextOsMcp(store, session="s")
        assert "read" not in app.registry.names and isinstance(app.registry, ToolRegistry)
        app.close()


@pytest.mark.filterwarnings(WATCHDOG_RACE_WARNING)
def test_a_file_read_that_changes_on_disk_gets_a_new_version_by_itself(tmp_path: Path) -> None:
    """With a workspace, a watchdog tracker runs: a file the agent read gets version 2 when it
    changes on disk, before anything reads it again; ``track=False`` runs none."""
    ws = _repo(tmp_path, "calc.py", "def add(a, b):\n    return a - b\n")
    with SqliteStore(tmp_path / "s.db") as store:
        app = ContextOsMcp(store, session="s", workspace=ws)
        first = app.read("calc.py")
        (ws / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        wait_for(lambda: latest_meta(store, first["id"])["version"] == 2, what="the tracker's version 2")
        assert "a + b" in str(store.doc(first["id"]))
        app.close()
        assert app.tracker is not None and not app.tracker.running
        untracked = ContextOsMcp(store, session="u", workspace=ws, track=False)
        assert untracked.tracker is None
        untracked.close()


def test_a_large_file_read_says_only_what_the_client_was_given(tmp_path: Path) -> None:
    """A read of a 300,051-character file said three things: 200,000 characters cut, 100,000
    characters in context, and the active pool's 12,000-character window, which an MCP client
    has none of."""
    ws = _repo(tmp_path, "big.txt", ("y" * 99 + "\n") * 3001)
    with SqliteStore(tmp_path / "s.db") as store:
        app = ContextOsMcp(store, session="s", workspace=ws, track=False)
        out = app.read("big.txt")
        assert len(out["text"]) == TEXT_LIMIT and out["cut"].startswith(f"the first {TEXT_LIMIT:,} of 300,100")
        assert "note" not in out and "context_chars" not in out
        app.close()


def test_activate_of_a_file_deleted_on_disk_says_its_text_is_an_old_version(tmp_path: Path) -> None:
    """activate returns an object's current content: of a file deleted since it was read, it gave
    the text last shown as if current (``already active``), saying nothing of the deletion."""
    ws = _repo(tmp_path, "calc.py", "v1\n")
    with SqliteStore(tmp_path / "s.db") as store:
        app = ContextOsMcp(store, session="s", workspace=ws)
        first = app.read("calc.py")
        (ws / "calc.py").unlink()
        wait_for(lambda: latest_meta(store, first["id"]).get("missing"), what="the tracker's deletion")
        got, err = app.call("activate", {"id": first["id"]})
        out = json.loads(got)
        assert not err and out["text"] == "v1\n" and out["version"] == 1
        assert out["missing"].startswith("the file is missing on disk (deleted or moved away) since version 2")
        (ws / "other.py").write_text("x\n")
        assert "missing" not in json.loads(app.call("activate", {"id": "other.py"})[0])
        app.close()


def test_a_read_while_another_process_holds_the_store_gives_the_text_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read while the store is locked past its busy timeout was an MCP protocol error
    (``'id'``: the file tools' result of a read that could not be recorded has no object id)."""
    import sqlite3

    monkeypatch.setattr(SqliteStore, "BUSY_TIMEOUT_S", 0.2)
    monkeypatch.setattr(SqliteStore, "FLUSH_WAIT_S", 0.2)
    ws = _repo(tmp_path, "new.txt", "fresh text\n")
    with SqliteStore(tmp_path / "s.db") as store:
        app = ContextOsMcp(store, session="s", workspace=ws, track=False)
        other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # another process writes meanwhile
        try:
            out, err = app.call("read", {"path": "new.txt"})
        finally:
            other.execute("COMMIT")
            other.close()
        got = json.loads(out)
        assert not err and got["recorded"] is False and got["text"] == "fresh text\n"
        assert "content" not in got and got["note"].startswith("not recorded:")
        again = json.loads(app.call("read", {"path": "new.txt"})[0])  # the store answers again
        assert again["id"].startswith("file:") and again["text"] == "fresh text\n"
        app.close()


def test_what_activate_cuts_from_a_long_text_lines_shows(tmp_path: Path) -> None:
    from context_os.objects import SourceDoc

    text = "\n".join(f"row {i:06d} " + "x" * 40 for i in range(10_000))  # 520,000 characters
    with SqliteStore(tmp_path / "s.db") as store:
        store.put(SourceDoc(id="memory:log", kind="memory", content=text, meta={"name": "log.md"}).to_doc())
        app = ContextOsMcp(store, session="s")
        got = json.loads(app.call("activate", {"id": "memory:log"})[0])
        assert len(got["text"]) == 200_000 and "lines(id, start, end)" in got["cut"]
        last, err = app.call("lines", {"id": "memory:log", "start": 9_999})
        assert not err and last.split("\n") == [
            "[context_os: memory:log, lines 9,999-10,000 of 10,000]",
            *text.split("\n")[-2:],
        ]
        app.close()


def test_a_second_server_on_one_workspace_records_in_a_session_of_its_own(tmp_path: Path) -> None:
    """Two MCP clients open on one repository (two editors, two windows) each start a ``ctxos
    mcp`` there. One writer per session: the second took the workspace's default session too, was
    refused (SessionBusy) and never started; now it records in ``<default>-2``, and says so."""
    ws = _repo(tmp_path, "a.py", "x = 1\n")
    db = tmp_path / "s.db"

    async def main() -> None:
        async with stdio(db, ws) as first, stdio(db, ws) as second:
            one, err1 = await call(first, "frames", {})
            two, err2 = await call(second, "frames", {})
            assert not err1 and not err2
            assert two["session"] == one["session"] + "-2"
            for s in (first, second):
                got, err = await call(s, "read", {"path": "a.py"})
                assert not err and got["text"] == "x = 1\n"
        async with stdio(db, ws) as again:  # both gone: the default is free again
            back, _ = await call(again, "frames", {})
            assert back["session"] == one["session"]

    anyio.run(main)


def test_tool_errors_tell_the_model_what_its_tools_can_do_not_python_calls(tmp_path: Path) -> None:
    """An error's hint for a Python caller or a harness's model (``Workspace(allow_outside=...)``,
    ``MemoryScopes(..., trust_project=True)``, ``history(start, end)``, ``ctxos sessions``) named
    nothing an MCP client's model can do: it reads the same error in terms of its own tools."""
    ws = tmp_path / "repo"
    ws.mkdir()
    (tmp_path / "outside.txt").write_text("no\n")
    db = tmp_path / "s.db"

    async def main() -> None:
        async with stdio(db, ws, "--session", "m") as s:
            tools = {t.name for t in (await s.list_tools()).tools}
            said: dict[str, str] = {}
            for name, args in [
                ("read", {"path": "../outside.txt"}),
                ("remember", {"text": "the build needs make", "scope": "project"}),
                ("lines", {"id": "chat:m"}),
                ("frames", {"session": "nobody"}),
                ("activate", {"id": "toolcall:m:nope"}),
            ]:
                out, err = await call(s, name, args)
                assert err, (name, out)
                said[name] = out["error"]
            for text in said.values():
                assert not re.search(r"\b[A-Z]\w*\(|in Python|history\(|ctxos sessions|object list|stub", text), text
                named = set(re.findall(r"\b([a-z]+)\(", text))
                assert named <= tools, (text, named - tools)
            assert "the file tools reach only the files inside it" in said["read"]
            assert 'remember it in the global scope (the scope argument "global")' in said["remember"]
            assert "frames(session)" in said["lines"] and "recall(query)" in said["lines"]
            assert "frames() lists the sessions that have frames" in said["frames"]
            assert "ids come from read, recall and inspect" in said["activate"]

    anyio.run(main)
    # a Python caller still reads what it can do in Python
    with pytest.raises(PathDenied, match=r"Workspace\(allow_outside=\.\.\.\)"):
        Workspace(ws).resolve("../outside.txt")


def test_mcp_refuses_to_record_in_a_session_an_agent_harness_writes(tmp_path: Path) -> None:
    """``--session`` naming an agent's session (written by its harness through a hook or ``ctxos
    serve``) would mix what the MCP client reads into that agent's history: refused at start,
    saying why and what to give instead, with nothing written."""
    ws = tmp_path / "repo"
    ws.mkdir()
    db = tmp_path / "s.db"
    with SqliteStore(db) as store:
        hook = OpenAIHook(Session.open(store, "agent-1", harness="openai"))
        hook.transform_context([user("fix the bug")])
        hook.session.close()
        before = store.latest_tx()
    done = subprocess.run(
        [CTXOS, "--store", str(db), "mcp", "--workspace", str(ws), "--session", "agent-1", "--embedder", "none"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and done.stdout == ""
    assert "session 'agent-1' is recorded by the openai harness (1 model call), not by ctxos mcp" in done.stderr
    assert "Give --session another id" in done.stderr
    with SqliteStore(db) as store:
        assert store.latest_tx() == before  # no lease taken, no state version written

    async def main() -> None:  # a session of its own (named, or the default) is served as before
        async with stdio(db, ws, "--session", "mine") as s:
            got, err = await call(s, "frames", {"session": "agent-1"})
            assert not err and [f["turn"] for f in got["frames"]] == [1]

    anyio.run(main)


def test_an_object_evicted_by_another_process_is_not_served_by_activate(tmp_path: Path) -> None:
    """An MCP server's session has no model calls, so no turns: what another process evicted
    (``ctxos objects evict``) stayed in its memory, and ``activate`` handed the text back."""
    from context_os.objects import SourceDoc

    secret = "Zq8-leaked-value-" + "x7" * 8
    with SqliteStore(tmp_path / "s.db") as store:
        store.put(SourceDoc(id="memory:leak", kind="memory", content=f"key {secret}", meta={"name": "m.md"}).to_doc())
        app = ContextOsMcp(store, session="s")
        assert secret in json.loads(app.call("activate", {"id": "memory:leak"})[0])["text"]
        app.call("deactivate", {"id": "memory:leak"})
        done = subprocess.run(
            [sys.executable, "-m", "context_os", "--store", str(tmp_path / "s.db"), "objects", "evict", "memory:leak",
             "--yes"], capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out, err = app.call("activate", {"id": "memory:leak"})
        assert err and secret not in out and "no object" in out
        lines, err = app.call("lines", {"id": "memory:leak"})
        assert err and secret not in lines
        app.close()


def test_after_an_eviction_tool_calls_read_the_tombstones_only_when_the_store_moved_on(tmp_path: Path) -> None:
    """A server without turns takes evictions in before each tool that shows stored text. After
    one eviction by another process it read every tombstone of the store at every call (it had
    written nothing since, so "someone else wrote" stayed true); now only once per transaction."""
    from context_os.objects import SourceDoc

    db = tmp_path / "s.db"
    with SqliteStore(db) as store:
        for name in ("a", "b"):
            store.put(SourceDoc(id=f"memory:{name}", kind="memory", content=f"{name} secret", meta={}).to_doc())
        app = ContextOsMcp(store, session="s", track=False)
        assert not app.call("activate", {"id": "memory:b"})[1]
        reads: list[str | None] = []
        find = store.find

        def counting_find(kind: str | None = None, *args: Any, **kwargs: Any) -> Any:
            reads.append(kind)
            return find(kind, *args, **kwargs)

        store.find = counting_find  # type: ignore[method-assign]
        with SqliteStore(db) as other:  # another process evicts something this session never showed
            evict(other, "memory:a")
        for _ in range(5):
            out, err = app.call("lines", {"id": "memory:b"})
            assert not err and "b secret" in out
        assert reads.count("tombstone") == 1
        with SqliteStore(db) as other:  # the next eviction is still taken in at the next call
            evict(other, "memory:b")
        out, err = app.call("lines", {"id": "memory:b"})
        assert err and "b secret" not in out
        assert reads.count("tombstone") == 2
        app.close()


def test_resources_name_the_newest_frames_of_the_store(tmp_path: Path) -> None:
    """``resources/list`` names the store's 50 newest frames, whichever sessions they are of:
    not 50 of each session."""
    with SqliteStore(tmp_path / "s.db") as store:
        for sid in ("a", "b"):
            with Session.open(store, sid, harness="openai") as session:
                hook, messages = OpenAIHook(session), []
                for k in range(30):
                    messages += [{"role": "user", "content": f"{sid} {k}"}]
                    hook.transform_context(messages)
                    messages += [{"role": "assistant", "content": "ok"}]
        app = ContextOsMcp(store, session="m")
        listed = [r["uri"] for r in app.resources()]
        app.close()
    newest = [f"context-os://frame/b/{t}" for t in range(30, 0, -1)] + [
        f"context-os://frame/a/{t}" for t in range(30, 10, -1)
    ]
    assert listed == newest


def test_a_resource_uri_whose_number_is_no_ascii_number_is_refused_not_a_traceback(tmp_path: Path) -> None:
    """A turn or version in a resource URI was taken when ``str.isdigit`` said so: ``²`` made
    ``int`` raise a ValueError (a traceback on stderr, a JSON-RPC error with code 0), ``١`` read as
    turn 1, and 5,000 digits were over ``int``'s limit. Only ASCII digits are a number now."""
    with SqliteStore(tmp_path / "s.db") as store:
        with Session.open(store, "a", harness="openai") as session:
            OpenAIHook(session).transform_context([user("hello")])
        app = ContextOsMcp(store, session="m")
        try:
            assert json.loads(app.read_resource("context-os://frame/a/1")[1])  # the frame is there
            # no such session: said in the client's terms (it named `ctxos sessions`, a command)
            with pytest.raises(NotFound, match="the frames tool lists the sessions") as missing:
                app.read_resource("context-os://frame/x/1")
            assert "ctxos" not in str(missing.value)
            for turn in ("\u00b2", "\u0661", "1" * 5000):
                with pytest.raises(InputError, match="SESSION/TURN"):
                    app.read_resource(f"context-os://frame/a/{turn}")
            assert json.loads(app.read_resource("context-os://object/session:a@1")[1])["version"] == 1
            for version in ("\u00b2", "\u0661", "1" * 5000):
                with pytest.raises(NotFound, match="has versions 1 to"):
                    app.read_resource(f"context-os://object/session:a@{version}")
        finally:
            app.close()


def test_read_reaches_the_global_topic_file_remember_says_to_read(tmp_path: Path) -> None:
    """``remember`` with a topic answers ``read('<user data dir>/memory/<topic>.md') shows the
    topic``; the MCP server's read refused that path as outside the workspace (``ctxos serve``
    gives its file tools the scopes' directories). Beside the scopes nothing more is reachable."""
    ws = tmp_path / "repo"
    ws.mkdir()
    with SqliteStore(tmp_path / "s.db") as store:
        app = ContextOsMcp(store, session="m", workspace=ws, memory=MemoryScopes(ws), track=False)
        try:
            kept, err = app.call("remember", {"text": "deploy with make ship", "scope": "global", "topic": "deploy"})
            assert not err, kept
            topic = json.loads(kept)["file"]
            assert f"read({topic!r})" in json.loads(kept)["next"]
            shown, err = app.call("read", {"path": topic})
            assert not err and json.loads(shown)["text"] == "- deploy with make ship\n", shown
            settings = Path(topic).parent.parent / "memory.json"  # the trusted workspaces: the user's only
            settings.write_text('{"trusted_workspaces": []}')
            refused, err = app.call("read", {"path": str(settings)})
            assert err and json.loads(refused)["type"] == "PathDenied"
        finally:
            app.close()


class _HeldStore(SqliteStore):
    """An SQLite store whose first write of a file object waits until the test lets it go (a tool
    call caught half-way); it records each write's first document id, in order."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.writing = threading.Event()
        self.go_on = threading.Event()
        self.written: list[str] = []

    def submit(self, ops: Sequence[Op]) -> Tx:
        ids = [op.doc["id"] for op in ops if getattr(op, "doc", None)]
        if any(i.startswith("file:") for i in ids) and not self.writing.is_set():
            self.writing.set()
            self.go_on.wait(60)
        tx = super().submit(ops)
        self.written.append(ids[0] if ids else "")
        return tx


def test_close_waits_for_the_tool_call_that_runs_and_refuses_later_ones(tmp_path: Path) -> None:
    """``close()`` (Ctrl-C, SIGTERM) while a tool call runs: the session was closed (its lease
    given back) under the call, which then wrote into it; a call asked after close ran too. Now
    close waits for the running call to finish, and a later call is an error that writes nothing."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("hello\n")
    (tmp_path / "ws" / "b.txt").write_text("later\n")
    store = _HeldStore(tmp_path / "s.db")
    try:
        app = ContextOsMcp(store, session="m", workspace=tmp_path / "ws", track=False)
        got: list[tuple[str, bool]] = []
        running = threading.Thread(target=lambda: got.append(app.call("read", {"path": "a.txt"})))
        running.start()
        assert store.writing.wait(60)  # the call is half-way through its writes
        closing = threading.Thread(target=app.close)
        closing.start()
        assert app.closing.wait(60)  # close has begun, and waits for the call
        store.go_on.set()
        running.join(60)
        closing.join(60)
        out, error = got[0]
        assert error is False and json.loads(out)["text"] == "hello\n"
        file_writes = [n for n, i in enumerate(store.written) if i.startswith("file:")]
        lease_writes = [n for n, i in enumerate(store.written) if i.startswith("lease:")]
        assert max(file_writes) < max(lease_writes), store.written  # the lease went back after the call's writes
        before = len(store.written)
        out, error = app.call("read", {"path": "b.txt"})
        assert error is True and "stopping" in json.loads(out)["error"]
        assert len(store.written) == before  # nothing written
    finally:
        store.go_on.set()
        store.close()


def test_ctrl_c_while_close_waits_for_a_call_still_gives_the_lease_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A second Ctrl-C while ``close()`` waits for the running tool call: it raised out of the
    wait and skipped the session's close, whose lease then stayed taken until it expired (another
    ``ctxos mcp`` could not record in the session meanwhile). Now it ends the wait only."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("hello\n")
    store = _HeldStore(tmp_path / "s.db")
    try:
        app = ContextOsMcp(store, session="m", workspace=tmp_path / "ws", track=False)
        running = threading.Thread(target=app.call, args=("read", {"path": "a.txt"}), daemon=True)
        running.start()
        assert store.writing.wait(60)  # the call is half-way through its writes, and stays there
        with ctrl_c_after(0.5), caplog.at_level("WARNING", logger="context_os"):
            app.close(wait=60)  # (interrupted well before)
        assert "closing at once, asked again" in caplog.text
        store.go_on.set()
        running.join(60)
        # the lease went back: another writer opens the session at once
        Session.open(store, "m", harness="mcp").close()
    finally:
        store.go_on.set()
        store.close()


@pytest.mark.filterwarnings(WATCHDOG_RACE_WARNING)
def test_a_file_trackers_errors_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The workspace of ``ctxos mcp`` deleted under it: its tracker said so only in a list no MCP
    user could read. Now it is a warning in the server's log (``ctxos mcp`` writes it to stderr,
    which MCP clients keep in their server logs)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("print('a')\n")
    with SqliteStore(tmp_path / "s.db") as store:
        app = ContextOsMcp(store, session="m", workspace=ws)
        try:
            assert app.call("read", {"path": "a.py"})[1] is False
            with caplog.at_level("WARNING", logger="context_os"):
                shutil.rmtree(ws)
                said = wait_for(
                    lambda: [r.getMessage() for r in caplog.records if "is gone" in r.getMessage()],
                    "the tracker's warning",
                )
            assert said[0].startswith(f"file tracker of {ws}: {ws} is gone (deleted or moved away)")
        finally:
            app.close()
