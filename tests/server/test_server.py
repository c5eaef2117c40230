"""The JSON-RPC server: ``ctxos serve`` as a real subprocess over pipes and HTTP, and the request
handler under a hypothesis fuzz (bad input always gets a JSON-RPC error and writes nothing)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from context_os import Session
from context_os.context.evict import evict
from context_os.context.frames import frame_rows
from context_os.context.lease import lease_id
from context_os.context.policy import RetentionPolicy
from context_os.errors import InputError
from context_os.harness.registry import NAMES
from context_os.server import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SESSION_NOT_OPEN,
    Server,
)
from context_os.store.sqlite import SqliteStore
from tests.files.conftest import WATCHDOG_RACE_WARNING, latest_meta
from tests.harness import pi_msgs
from tests.helpers import call, coding_session, ctrl_c_after, http_server, result, stub_ref, user, wait_for

CTXOS = str(Path(sys.executable).parent / "ctxos")


class Rpc:
    """``ctxos serve`` in a subprocess, spoken to over its stdin and stdout."""

    def __init__(self, store: Path, *args: str):
        self.proc = subprocess.Popen(
            [CTXOS, "--store", str(store), "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.next_id = 0

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), f"no answer; the server exited with {self.proc.poll()}"
        return json.loads(line)

    def __call__(self, method: str, **params: Any) -> Any:
        self.next_id += 1
        self.send_raw(
            json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}).encode() + b"\n"
        )
        answer = self.read()
        assert answer["id"] == self.next_id and answer["jsonrpc"] == "2.0"
        return answer

    def result(self, method: str, **params: Any) -> Any:
        answer = self(method, **params)
        assert "result" in answer, answer
        return answer["result"]

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=60)
        rest = (self.proc.stdout.read() if self.proc.stdout else b"").decode()
        assert rest == "", f"unexpected output after the last answer: {rest!r}"
        err = (self.proc.stderr.read() if self.proc.stderr else b"").decode()
        return code, err


@pytest.fixture
def rpc(tmp_path: Path) -> Iterator[Rpc]:
    r = Rpc(tmp_path / "s.db", "--stdio", "--max-request-mb", "1")
    yield r
    if r.proc.poll() is None:
        r.proc.kill()
        r.proc.wait()
    for stream in (r.proc.stdin, r.proc.stdout, r.proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()


pytestmark = pytest.mark.timeout(120)


@pytest.mark.e2e
def test_a_whole_session_over_stdio(rpc: Rpc):
    assert rpc.result("ping")["pong"] is True
    policy = {"collapse_after_turns": 2, "manage_from_tokens": 0, "cache_break_percent": None}
    opened = rpc.result("session.open", session="s1", harness="openai", policy=policy)
    assert opened["created"] and opened["turn"] == 0 and opened["policy"]["collapse_after_turns"] == 2
    msgs = coding_session(1)
    first = rpc.result("context.transform", session="s1", messages=msgs)
    assert first["turn"] == 1 and first["frame_id"] == "frame:s1:000001" and first["new"] == 4
    assert first["tokens_assembled"] <= first["tokens_full"]
    for n in range(1, 4):
        msgs += [call(f"c{n}"), result(f"c{n}", f"out {n}")]
        out = rpc.result("context.transform", session="s1", messages=msgs)
    texts = {m["tool_call_id"]: m["content"] for m in out["messages"] if m["role"] == "tool"}
    assert stub_ref(texts["c0"]) and texts["c3"] == "out 3"
    tools = rpc.result("tools.list", session="s1")
    assert {t["function"]["name"] for t in tools} == {"activate", "deactivate", "pin", "unpin", "lines", "history"}
    called = rpc.result("tools.call", session="s1", name="activate", arguments={"id": "toolcall:s1:c0"})
    assert json.loads(called["output"])["status"] == "activated" and not called["is_error"]
    missing = rpc.result("tools.call", session="s1", name="activate", arguments='{"id": "toolcall:s1:nope"}')
    assert missing["is_error"] and json.loads(missing["output"])["type"] == "NotFound"
    frames = rpc.result("frames.list", session="s1")
    assert [f["turn"] for f in frames] == [1, 2, 3, 4]
    rpc.result("session.open", session="quiet", harness="openai")  # no model call yet: no rows, no error
    assert rpc.result("frames.list", session="quiet") == []
    assert all(rpc.result("frame.verify", session="s1", turn=f["turn"])["ok"] for f in frames)
    versions = rpc.result("inspect", id="toolcall:s1:c0")["versions"]
    assert len(versions) == 1 and versions[0]["object_hash"].startswith("b3:")
    one = rpc.result("inspect", id="toolcall:s1:c0", as_of=versions[0]["valid_time"])["version"]
    assert one["doc"]["content"].startswith("line 0")
    assert rpc.result("session.close", session="s1") == {"session": "s1", "closed": True}
    code, err = rpc.close()
    assert code == 0, err


@pytest.mark.e2e
def test_sigterm_on_stdio_answers_the_request_that_runs_then_exits(tmp_path: Path):
    rpc = Rpc(tmp_path / "s.db", "--stdio", "-vv")
    assert rpc.proc.stderr is not None
    try:
        rpc.result("session.open", session="s1")
        # a long history: its transform runs for a while after the server logged its start
        history = [
            {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n} " * 500} for n in range(3001)
        ]
        request = {"jsonrpc": "2.0", "id": 7, "method": "context.transform"}
        rpc.send_raw(json.dumps({**request, "params": {"session": "s1", "messages": history}}).encode() + b"\n")
        while b"request 'context.transform'" not in (line := rpc.proc.stderr.readline()):
            assert line, "the server ended before it took the request"
        rpc.proc.send_signal(signal.SIGTERM)
        answer = rpc.read()
        assert answer["id"] == 7 and answer["result"]["new"] == 3001
        assert rpc.proc.wait(timeout=60) == 0
    finally:
        if rpc.proc.poll() is None:
            rpc.proc.kill()
            rpc.proc.wait()
        for stream in (rpc.proc.stdin, rpc.proc.stdout, rpc.proc.stderr):
            if stream is not None:
                stream.close()
    with SqliteStore(tmp_path / "s.db") as store:  # the turn was recorded, and the lease given back
        assert [f.turn for f in frame_rows(store, "s1")] == [1]
        assert Session.open(store, "s1").view.turn == 1


@pytest.mark.e2e
def test_anthropic_and_pydantic_ai_sessions_over_stdio(rpc: Rpc):
    rpc.result("session.open", session="a1", harness="anthropic")
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"c": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]},
    ]
    out = rpc.result("context.transform", session="a1", messages=msgs, system="Be careful.")
    assert out["system"] == "Be careful." and out["messages"] == msgs
    assert rpc.result("tools.list", session="a1")[0]["input_schema"]["required"] == ["id"]

    rpc.result("session.open", session="p1", harness="pydantic-ai")
    history = [
        {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "go"}]},
        {
            "kind": "response",
            "parts": [{"part_kind": "tool-call", "tool_name": "bash", "args": {"c": "ls"}, "tool_call_id": "t1"}],
        },
        {
            "kind": "request",
            "parts": [{"part_kind": "tool-return", "tool_name": "bash", "content": "a.py", "tool_call_id": "t1"}],
        },
    ]
    out = rpc.result("context.transform", session="p1", messages=history)
    assert [m["kind"] for m in out["messages"]] == ["request", "response", "request"]
    assert out["messages"][2]["parts"][0]["content"] == "a.py"
    bad = rpc("context.transform", session="p1", messages=[{"kind": "request", "parts": [{"part_kind": "nope"}]}])
    assert bad["error"]["code"] == -32001 and bad["error"]["data"]["index"] == 0
    assert rpc("context.transform", session="p1", messages=history, system="x")["error"]["code"] == INVALID_PARAMS
    assert rpc.close()[0] == 0


@pytest.mark.e2e
def test_bad_input_gets_errors_and_the_server_goes_on(rpc: Rpc):
    def raw(data: bytes) -> Any:
        rpc.send_raw(data + b"\n")
        return rpc.read()

    assert raw(b'{"jsonrpc": "2.0", "method": "ping", "id": 1')["error"]["code"] == PARSE_ERROR
    assert raw(b"\xff\xfe not utf-8")["error"]["code"] == PARSE_ERROR
    assert raw(b'{"jsonrpc": "2.0", "method": "ping", "id": NaN}')["error"]["code"] == PARSE_ERROR
    assert raw(b"[" * 100_000)["error"]["code"] == PARSE_ERROR
    assert raw(b"[]")["error"]["code"] == INVALID_REQUEST
    assert raw(b'"ping"')["error"]["code"] == INVALID_REQUEST
    assert raw(b'{"jsonrpc": "1.0", "method": "ping", "id": 3}') == {
        "jsonrpc": "2.0",
        "error": {"code": INVALID_REQUEST, "message": 'invalid request: "jsonrpc" must be "2.0"'},
        "id": 3,
    }
    assert raw(b'{"jsonrpc": "2.0", "method": "ping", "id": {"x": 1}}')["id"] is None
    huge = b'{"jsonrpc": "2.0", "method": "ping", "id": 9, "params": {"pad": "' + b"x" * 1_500_000 + b'"}}'
    too_big = raw(huge)
    assert too_big["error"]["code"] == INVALID_REQUEST and "1 MiB" in too_big["error"]["message"]
    assert rpc("nope")["error"]["code"] == METHOD_NOT_FOUND
    assert rpc("session.open", session=42)["error"]["code"] == INVALID_PARAMS
    assert rpc("session.open", session="s1", harness="emacs")["error"]["code"] == INVALID_PARAMS
    assert rpc("session.open", session="s1", unknown=1)["error"]["code"] == INVALID_PARAMS
    assert rpc("session.open", session="has space")["error"]["data"]["type"] == "InputError"
    assert rpc("session.open", session="s1", policy={"keep_recent_results": -1})["error"]["code"] == -32008
    assert rpc("context.transform", session="never", messages=[])["error"]["code"] == SESSION_NOT_OPEN
    rpc.result("session.open", session="s1")
    malformed = rpc("context.transform", session="s1", messages=[user("hi"), {"role": "tool", "content": "x"}])
    assert malformed["error"] == {
        "code": -32001,
        "message": "message 1, field 'tool_call_id': a tool message needs a tool_call_id string",
        "data": {"type": "MalformedMessage", "index": 1, "field": "tool_call_id"},
    }
    assert rpc("tools.call", session="s1", name="rm", arguments={})["error"]["code"] == INVALID_PARAMS
    assert rpc("inspect", id="toolcall:none")["error"]["code"] == -32002
    assert rpc("inspect", id="x", as_of="yesterday")["error"]["data"]["type"] == "InputError"
    # a transaction id is 0 or more; one before the object says so (it said "at now")
    assert rpc("inspect", id="session:s1", tx=-1)["error"]["code"] == INVALID_PARAMS
    before = rpc("inspect", id="session:s1", tx=0)["error"]
    assert before["code"] == -32002 and before["message"] == "session:s1 did not exist as of tx 0"
    assert rpc("frame.verify", session="s1", turn=99)["error"]["code"] == -32002
    assert rpc("frame.verify", session="s1", turn=True)["error"]["code"] == INVALID_PARAMS
    # notifications are never answered, not even their errors; a batch answers in one line
    rpc.send_raw(b'{"jsonrpc": "2.0", "method": "ping"}\n{"jsonrpc": "2.0", "method": "nope"}\n\n')
    batch = raw(b'[{"jsonrpc": "2.0", "method": "ping", "id": "a"}, {"jsonrpc": "2.0", "method": "ping"}, 5]')
    assert [a.get("id") for a in batch] == ["a", None] and batch[1]["error"]["code"] == INVALID_REQUEST
    assert rpc.result("ping")["pong"]
    code, err = rpc.close()
    assert code == 0
    assert "Traceback" not in err


@pytest.mark.e2e
def test_an_object_that_is_no_request_is_answered_even_without_an_id(rpc: Rpc):
    """JSON-RPC 2.0: a notification is a request without ``id``; an object with no ``"jsonrpc":
    "2.0"`` or no method name is no request at all, and is answered ``-32600`` with id null (it
    went unanswered, as if it had run, when it had no id)."""

    def raw(data: bytes) -> Any:
        rpc.send_raw(data + b"\n")
        return rpc.read()

    invalid = {"code": INVALID_REQUEST, "message": 'invalid request: "jsonrpc" must be "2.0"'}
    assert raw(b'{"method": "ping"}') == {"jsonrpc": "2.0", "error": invalid, "id": None}
    assert raw(b'{"foo": "boo"}')["error"] == invalid
    no_method = raw(b'{"jsonrpc": "2.0", "method": 1, "params": "bar"}')
    assert no_method["error"]["code"] == INVALID_REQUEST and no_method["id"] is None
    both = b'[{"jsonrpc": "2.0", "method": "ping"}, {"method": "ping"}, {"jsonrpc": "2.0", "method": "ping", "id": 7}]'
    batch = raw(both)
    assert [(a["id"], "error" in a) for a in batch] == [(None, True), (7, False)]
    # a well-formed notification is still never answered, not even its error
    rpc.send_raw(b'{"jsonrpc": "2.0", "method": "nope"}\n{"jsonrpc": "2.0", "method": "ping", "params": []}\n')
    assert rpc.result("ping")["pong"]
    assert rpc.close()[0] == 0


@pytest.mark.e2e
def test_http_on_loopback(tmp_path: Path):
    with http_server(tmp_path, "--max-request-mb", "1") as srv:
        status, body = srv.post(b'{"jsonrpc": "2.0", "method": "ping", "id": 1}')
        assert status == 200 and json.loads(body)["result"]["pong"]
        assert srv.post(b'{"jsonrpc": "2.0", "method": "ping"}') == (204, b"")
        status, body = srv.post(b"{broken")
        assert status == 200 and json.loads(body)["error"]["code"] == PARSE_ERROR
        status, body = srv.post(b" " * (1024 * 1024 + 1))
        assert status == 413 and json.loads(body)["error"]["code"] == INVALID_REQUEST
        status, _ = srv.request("GET", b"")
        assert status == 405
        # the endpoint is the path: a query string (a client's own marker) does not move it
        ping = b'{"jsonrpc": "2.0", "method": "ping", "id": 2}'
        for path in ("/rpc", "/rpc?client=x", "/?a=1"):
            status, body = srv.post(ping, path=path)
            assert status == 200 and json.loads(body)["result"]["pong"], (path, body)
        status, body = srv.post(ping, path="/other?rpc")
        assert status == 404 and "POST to / or /rpc" in json.loads(body)["error"]["message"]


@pytest.mark.e2e
def test_two_http_clients_on_one_session_the_second_is_refused_not_thrashing(tmp_path: Path):
    """Two clients of one HTTP server sending their own histories to one session: each call read
    as a rewrite of the other's, and the session's record was neither. A client that names itself
    (``client``) owns the session it opened: the other is refused, naming the session and its
    client, with nothing written."""
    mine = [user("client A: fix the bug")]
    theirs = [user("client B: write the docs")]
    with http_server(tmp_path) as srv:
        opened = srv.rpc("session.open", session="shared", client="A")["result"]
        assert opened["client"] == "A"
        assert srv.rpc("context.transform", session="shared", client="A", messages=mine)["result"]["new"] == 1
        refused = [
            srv.rpc("session.open", session="shared", client="B"),
            srv.rpc("context.transform", session="shared", client="B", messages=theirs),
            srv.rpc("context.transform", session="shared", messages=theirs),  # a client that names none
            srv.rpc("tools.call", session="shared", client="B", name="history", arguments={}),
        ]
        for answer in refused:
            err = answer["error"]
            assert err["code"] == -32007 and err["data"]["type"] == "SessionBusy", err
            assert "session 'shared' is open on this server for client 'A'" in err["message"]
        # client A goes on as if B had never called: no rewrite, one turn per call of its own
        assert srv.rpc("session.open", session="shared", client="A")["result"]["turn"] == 1
        mine += [{"role": "assistant", "content": "on it"}, user("go on")]
        out = srv.rpc("context.transform", session="shared", client="A", messages=mine)["result"]
        assert out["rewritten"] is False and out["new"] == 2 and out["turn"] == 2
        assert "client B" not in json.dumps(out["messages"])
        # once A closed it, B may take it (and its history reads as the rewrite it is)
        srv.rpc("session.close", session="shared")
        assert srv.rpc("session.open", session="shared", client="B")["result"]["client"] == "B"
        again = srv.rpc("context.transform", session="shared", client="B", messages=theirs)["result"]
        assert again["rewritten"] is True


# --- the handler, in process ------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    store = SqliteStore(tmp_path / "s.db")
    s = Server(store, max_request_bytes=64 * 1024)
    for sid, harness in (("s1", "openai"), ("a1", "anthropic"), ("p1", "pydantic-ai")):
        assert "result" in s.handle(
            {"jsonrpc": "2.0", "id": 0, "method": "session.open", "params": {"session": sid, "harness": harness}}
        )
    s.handle(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "context.transform",
            "params": {"session": "s1", "messages": coding_session(2)},
        }
    )
    yield s
    store.close()


def test_close_waits_for_the_call_that_runs_and_refuses_later_ones(server: Server, caplog: Any):
    # an HTTP client's call runs on its own thread, holding the server's lock: closing the sessions,
    # the trackers and recall under it would pull them from under that call
    running = threading.Lock()
    running.acquire()
    in_call = threading.Event()

    def a_call() -> None:
        with server._lock:
            in_call.set()
            running.acquire()  # until the test lets it finish

    caller = threading.Thread(target=a_call)
    caller.start()
    assert in_call.wait(10)
    closer = threading.Thread(target=server.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive() and set(server.sessions) == {"s1", "a1", "p1"}  # waits, closes nothing
    # a call asked meanwhile waits for the lock too: it is not run when it gets it
    queued: list[Any] = []
    asked = {"jsonrpc": "2.0", "id": 9, "method": "session.close", "params": {"session": "s1"}}
    queuing = threading.Thread(target=lambda: queued.append(server.handle(asked)))
    queuing.start()
    running.release()
    caller.join(10)
    closer.join(10)
    queuing.join(10)
    assert not closer.is_alive() and server.sessions == {}
    assert "the server is stopping" in queued[0]["error"]["message"], queued
    # a call asked after: refused, nothing run
    answer = server.handle({"jsonrpc": "2.0", "id": 1, "method": "session.open", "params": {"session": "s2"}})
    assert answer["error"]["code"] == -32007 and "the server is stopping" in answer["error"]["message"]
    assert "result" in server.handle({"jsonrpc": "2.0", "id": 2, "method": "status", "params": {}})


def test_close_gives_up_waiting_for_a_call_that_never_ends(tmp_path: Path, caplog: Any):
    with SqliteStore(tmp_path / "s.db") as store:
        s = Server(store)
        assert "result" in s.handle({"jsonrpc": "2.0", "id": 0, "method": "session.open", "params": {"session": "x"}})
        s._lock.acquire()  # a call stuck for good (a hung store)
        with caplog.at_level("WARNING", logger="context_os.server"):
            s.close(wait=0.2)
        assert s.sessions == {} and "stopping while the call still runs after 0.2 s" in caplog.text
        s._lock.release()


def test_ctrl_c_while_close_waits_for_a_call_still_closes_the_sessions(server: Server, caplog: Any):
    # a second Ctrl-C (or SIGTERM under serve --http) while close waits for the running call:
    # it escaped close, and the sessions, trackers and recall were never closed (their leases
    # stayed taken until they expired)
    server._lock.acquire()  # a call that runs on
    try:
        with ctrl_c_after(0.5), caplog.at_level("WARNING", logger="context_os.server"):
            server.close(wait=60)  # (interrupted well before)
    finally:
        server._lock.release()
    assert server.sessions == {} and "stopping at once, asked again" in caplog.text
    Session.open(server.store, "s1").close()  # its lease went back


@pytest.mark.xtdb
def test_close_on_a_hung_node_waits_once_for_all_its_sessions(tmp_path: Path, xtdb_url: str, uid: str, caplog: Any):
    # each session's close waits on a node that hangs up to the store's timeout: one after the
    # other, a server with ten sessions took minutes to stop; all at once, bounded by one wait
    from context_os.store.xtdb import XtdbStore
    from tests._xtdb_node import CuttableProxy

    relay = CuttableProxy(xtdb_url)
    store = XtdbStore(relay.url, timeout=3600, text_index_path=tmp_path / "index.db")
    try:
        s = Server(store)
        for n in range(3):
            params = {"session": f"{uid}-{n}", "harness": "openai"}
            assert "result" in s.handle({"jsonrpc": "2.0", "id": n, "method": "session.open", "params": params})
        relay.stall()
        closer = threading.Thread(target=s.close, kwargs={"wait": 1.0}, daemon=True)
        with caplog.at_level("WARNING"):
            closer.start()
            closer.join(60)  # (one by one, the three would hold it an hour each)
        assert not closer.is_alive() and s.sessions == {}
        said = [r.getMessage() for r in caplog.records if "not closed within" in r.getMessage()]
        assert said and "3 session(s) not closed within 1 s" in said[0], caplog.text
        assert all(f"{uid}-{n}" in said[0] for n in range(3))
    finally:
        relay.cut()
        store.close()


def test_session_open_refuses_another_harness_for_a_recorded_session(server: Server):
    answer = server.handle(
        {"jsonrpc": "2.0", "id": 1, "method": "session.open", "params": {"session": "s1", "harness": "anthropic"}}
    )
    assert answer["error"]["data"]["type"] == "StateError"


def test_a_workspace_path_no_system_call_takes_is_bad_input_not_an_internal_error(server: Server):
    before = server.store.latest_tx()
    params = {"session": "s9", "workspace": "\u0000"}
    answer = server.handle({"jsonrpc": "2.0", "id": 1, "method": "session.open", "params": params})
    assert answer["error"]["data"]["type"] == "InputError"
    assert server.store.latest_tx() == before


@pytest.mark.parametrize(
    ("as_of", "says"),
    [
        ("99999999999999999999999", "outside the years 0001-9999"),
        (10**30, "outside the years 0001-9999"),
        ("²³", "not ASCII"),
        ("yesterday", "neither ISO 8601"),
    ],
)
def test_an_as_of_that_is_no_time_is_input_error_as_in_the_cli(server: Server, as_of: str | int, says: str):
    params = {"id": "session:s1", "as_of": as_of}
    answer = server.handle({"jsonrpc": "2.0", "id": 1, "method": "inspect", "params": params})
    error = answer["error"]
    assert error["code"] == -32006 and error["data"]["type"] == "InputError", error
    assert error["message"].startswith("as_of ") and says in error["message"]
    ok = server.handle(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "inspect",
            "params": {"id": "session:s1", "as_of": "9999-12-31T23:59:59.999Z"},
        }
    )
    assert "result" in ok


def test_text_that_is_not_unicode_is_refused_and_the_session_goes_on(server: Server):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "\udc80"}}
    params = {"session": "a1", "messages": [{"role": "user", "content": [image]}]}
    before = server.store.latest_tx()
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "context.transform", "params": params}).encode()
    err = json.loads(server.handle_line(line) or b"")["error"]
    assert err["code"] == -32001 and err["data"] == {"type": "MalformedMessage", "index": 0, "field": "content"}
    assert server.store.latest_tx() == before
    params["messages"] = [user("fine")]
    assert "result" in server.handle({"jsonrpc": "2.0", "id": 2, "method": "context.transform", "params": params})


def test_an_answer_echoing_text_that_is_not_unicode_is_still_one_line_of_json(server: Server):
    out = server.handle_line(b'{"jsonrpc": "2.0", "method": "ping", "id": "\\udc80"}')
    assert out is not None and b"\n" not in out
    assert json.loads(out) == {"jsonrpc": "2.0", "result": {"pong": True, "version": "0.1.0"}, "id": "\udc80"}


def test_a_restarted_server_says_how_to_resume_a_session_the_store_holds(tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    store = SqliteStore(tmp_path / "s.db")
    first = Server(store, workspaces=[ws], track=False)
    opened = first.handle(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "session.open",
            "params": {"session": "r1", "harness": "anthropic", "workspace": str(ws)},
        }
    )
    assert "result" in opened, opened
    params = {"session": "r1", "messages": _chat("anthropic", ["fix it", "on it", "go on"])}
    assert "result" in first.handle({"jsonrpc": "2.0", "id": 2, "method": "context.transform", "params": params})
    first.close()  # the server stops; its client goes on with the history it holds

    again = Server(store, workspaces=[ws], track=False)
    err = again.handle({"jsonrpc": "2.0", "id": 3, "method": "context.transform", "params": params})["error"]
    assert err["code"] == SESSION_NOT_OPEN
    assert err["data"] == {
        "session": "r1",
        "stored": True,
        "open": {"session": "r1", "harness": "anthropic", "workspace": str(ws.resolve())},
    }
    assert "in the store but not open on this server" in err["message"] and "session.open" in err["message"]
    # what the error gives is what resumes it, and the history goes on where it was
    assert "result" in again.handle(
        {"jsonrpc": "2.0", "id": 4, "method": "session.open", "params": err["data"]["open"]}
    )
    out = again.handle({"jsonrpc": "2.0", "id": 5, "method": "context.transform", "params": params})["result"]
    assert out["new"] == 0 and out["rewritten"] is False
    never = again.handle({"jsonrpc": "2.0", "id": 6, "method": "tools.list", "params": {"session": "nope"}})["error"]
    assert never["data"] == {"session": "nope", "stored": False}
    assert "call session.open first" in never["message"]
    again.close()
    # a client that names itself is told to open it as itself: opened as the hint says, it writes it
    third = Server(store, workspaces=[ws], track=False)
    named = {**params, "client": "c-1"}
    err = third.handle({"jsonrpc": "2.0", "id": 7, "method": "context.transform", "params": named})["error"]
    assert err["data"]["open"] == {
        "session": "r1",
        "client": "c-1",
        "harness": "anthropic",
        "workspace": str(ws.resolve()),
    }
    assert "result" in third.handle(
        {"jsonrpc": "2.0", "id": 8, "method": "session.open", "params": err["data"]["open"]}
    )
    assert "result" in third.handle({"jsonrpc": "2.0", "id": 9, "method": "context.transform", "params": named})
    third.close()
    store.close()


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ({"token_budget": 10**30}, "token_budget must be at most 1,000,000,000 (or None)"),
        ({"max_message_chars": 2**63}, "max_message_chars must be at most 1,000,000,000, got"),
        ({"cache_break_percent": 1000}, "cache_break_percent must be 0-100, got 1000"),
        ({"keep_recent_results": -1}, "keep_recent_results must be a non-negative integer"),
        ({"collapse_after_turns": 2.5}, "collapse_after_turns must be a non-negative integer"),
    ],
)
def test_policy_values_out_of_bounds_are_refused_with_nothing_written(server: Server, policy: Any, says: str):
    before = server.store.latest_tx()
    for sid in ("fresh", "s1"):  # a new session, and a new policy for one open already
        params = {"session": sid, "policy": policy}
        err = server.handle({"jsonrpc": "2.0", "id": 1, "method": "session.open", "params": params})["error"]
        assert err["code"] == -32008 and err["data"]["type"] == "ConfigError", err
        assert says in err["message"]
    assert server.store.latest_tx() == before
    assert server.store.doc("session:fresh") is None
    # a policy a session recorded before the bounds were checked still loads as it was recorded
    assert RetentionPolicy.from_stored({"token_budget": 10**30}).token_budget == 10**30
    edge = {"token_budget": 1_000_000_000, "cache_break_percent": 100}
    assert "result" in server.handle(
        {"jsonrpc": "2.0", "id": 2, "method": "session.open", "params": {"session": "edge", "policy": edge}}
    )


def _chat(harness: str, texts: list[str]) -> list[dict[str, Any]]:
    """Alternating user and assistant text messages in ``harness``'s wire format."""
    if harness == "pydantic-ai":  # as pydantic-ai dumps them: with their times
        at = "2026-11-30T12:00:00Z"
        return [
            {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": t, "timestamp": at}]}
            if n % 2 == 0
            else {"kind": "response", "parts": [{"part_kind": "text", "content": t}], "timestamp": at}
            for n, t in enumerate(texts)
        ]
    if harness == "langchain":  # as messages_to_dict writes them
        return [{"type": "human" if n % 2 == 0 else "ai", "data": {"content": t}} for n, t in enumerate(texts)]
    return [{"role": "user" if n % 2 == 0 else "assistant", "content": t} for n, t in enumerate(texts)]


@pytest.mark.parametrize(
    ("sid", "harness"), [("s1", "openai"), ("a1", "anthropic"), ("p1", "pydantic-ai"), ("l1", "langchain")]
)
def test_a_message_changed_anywhere_in_the_history_is_a_rewrite(server: Server, sid: str, harness: str):
    texts = [f"message {n}" for n in range(13)]

    def transform(texts: list[str]) -> Any:
        params = {"session": f"{sid}-rw", "messages": _chat(harness, texts)}
        answer = server.handle({"jsonrpc": "2.0", "id": 1, "method": "context.transform", "params": params})
        assert "result" in answer, answer
        return answer["result"]

    server.handle(
        {"jsonrpc": "2.0", "id": 0, "method": "session.open", "params": {"session": f"{sid}-rw", "harness": harness}}
    )
    assert transform(texts)["new"] == 13
    # neither the first, the middle nor the last message: one the client edited in its own copy
    texts[3] = "message 3, as the client now holds it"
    got = transform([*texts, "message 13"])
    assert got["rewritten"] is True and got["new"] == 11
    assert "message 3, as the client now holds it" in json.dumps(got["messages"])
    again = transform([*texts, "message 13", "message 14"])
    assert again["rewritten"] is False and again["new"] == 1
    check = server.handle(
        {"jsonrpc": "2.0", "id": 2, "method": "frame.verify", "params": {"session": f"{sid}-rw", "turn": again["turn"]}}
    )
    assert check["result"]["ok"] is True


_SESSIONS = st.sampled_from(["s1", "a1", "p1"]) | st.sampled_from(["s1", "a1", "nope", ""]) | st.text(max_size=8)
_SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
)
_JSON = st.recursive(
    _SCALARS, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=12
)
_IDS = st.sampled_from(["c0", "c1", "t1", "x"]) | _JSON
_BLOCK = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_result", "tool_use", "image", "thinking", "bogus"])},
    optional={
        "text": st.text(max_size=20) | _JSON,
        "tool_use_id": _IDS,
        "id": _IDS,
        "name": st.sampled_from(["bash", ""]) | _JSON,
        "input": st.dictionaries(st.text(max_size=5), _JSON, max_size=2) | _JSON,
        "content": st.text(max_size=20)
        | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _JSON}))
        | _JSON,
        "is_error": st.booleans() | _JSON,
    },
)
_CALL = st.fixed_dictionaries(
    {"id": _IDS, "type": st.just("function"), "function": st.fixed_dictionaries({"name": _JSON, "arguments": _JSON})}
)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system", "developer", "wizard"]) | _JSON},
    optional={
        "content": st.text(max_size=30) | st.lists(_BLOCK, max_size=3) | _JSON,
        "tool_calls": st.lists(_CALL, max_size=2) | _JSON,
        "tool_call_id": _IDS,
        "context_os_system_param": st.booleans(),
        "name": _JSON,
    },
)
# well-formed conversations too, so that calls also succeed (and later ones find history)
_GOOD = st.sampled_from(
    [
        coding_session(1),
        [*coding_session(2), user("and now?")],
        [user("go"), call("c9"), result("c9", "done")],
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"c": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]},
        ],
    ]
)
_PART = st.fixed_dictionaries(
    {
        "part_kind": st.sampled_from(
            ["user-prompt", "system-prompt", "tool-return", "tool-call", "text", "thinking", "x"]
        )
    },
    optional={"content": _JSON, "tool_name": _JSON, "tool_call_id": _IDS, "args": _JSON, "outcome": _JSON},
)
_MODEL_MESSAGE = st.fixed_dictionaries(
    {"kind": st.sampled_from(["request", "response", "x"]), "parts": st.lists(_PART, max_size=3) | _JSON}
)
_MESSAGES = (
    _GOOD
    | st.lists(_MODEL_MESSAGE, max_size=4)
    | st.lists(_MESSAGE, max_size=5)
    | st.tuples(_GOOD, _MESSAGE).map(lambda t: [*t[0], t[1]])
    | _JSON
)
_PARAMS = {
    "session.open": st.fixed_dictionaries(
        {"session": _SESSIONS},
        optional={
            "harness": st.sampled_from(["openai", "anthropic", "pydantic-ai", "pi"]) | _JSON,
            "workspace": st.text(max_size=10) | _JSON,
            "policy": st.dictionaries(
                st.sampled_from(["keep_recent_results", "token_budget", "x"]), st.integers(-2, 5) | _JSON, max_size=2
            )
            | _JSON,
        },
    ),
    "context.transform": st.fixed_dictionaries(
        {"session": _SESSIONS, "messages": _MESSAGES}, optional={"system": st.text(max_size=10) | _JSON}
    ),
    "tools.call": st.fixed_dictionaries(
        {
            "session": _SESSIONS,
            "name": st.sampled_from(["activate", "deactivate", "pin", "unpin", "rm"]) | _JSON,
            "arguments": st.fixed_dictionaries(
                {"id": st.sampled_from(["toolcall:s1:c0", "chat:s1:00000", "session:s1", "nope"]) | _JSON}
            )
            | st.text(max_size=20)
            | _JSON,
        }
    ),
    "inspect": st.fixed_dictionaries(
        {"id": st.sampled_from(["toolcall:s1:c0", "session:s1", "nope"]) | _JSON},
        optional={"as_of": st.integers() | st.text(max_size=25) | _JSON, "tx": _JSON, "with_docs": _JSON},
    ),
    "frame.verify": st.fixed_dictionaries({"session": _SESSIONS, "turn": st.integers(-1, 3) | _JSON}),
    "tools.list": st.fixed_dictionaries({"session": _SESSIONS}),
    "frames.list": st.fixed_dictionaries({"session": _SESSIONS}),
    "session.close": st.fixed_dictionaries({"session": st.sampled_from(["nope", "x"]) | _JSON}),
    "ping": st.just({}),
}
_WELL_FORMED = st.sampled_from([*sorted(_PARAMS), *["context.transform"] * 4, "tools.call"]).flatmap(
    lambda m: st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0"),
            "method": st.just(m),
            "id": st.integers(0, 10**6) | st.text(max_size=5),
            "params": st.one_of(_PARAMS[m], _PARAMS[m], st.dictionaries(st.text(max_size=8), _JSON, max_size=3)),
        }
    )
)
_REQUEST = _WELL_FORMED | st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "1.0"]) | _JSON, "method": st.sampled_from(sorted(_PARAMS)) | _JSON},
    optional={"id": st.integers() | st.text(max_size=5) | _JSON, "params": _JSON},
)


def _encoded(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


_LINES = (
    _WELL_FORMED.map(_encoded)
    | _WELL_FORMED.map(_encoded)
    | _REQUEST.map(_encoded)
    | st.lists(_REQUEST, min_size=0, max_size=3).map(_encoded)
    | _JSON.map(_encoded)
    | st.binary(max_size=200)
    | st.tuples(_REQUEST.map(_encoded), st.integers(min_value=0)).map(lambda t: t[0][: t[1] % max(1, len(t[0]))])
)


def _check_error(answer: Any) -> None:
    assert answer["jsonrpc"] == "2.0" and set(answer) == {"jsonrpc", "error", "id"}
    err = answer["error"]
    assert isinstance(err["code"], int) and isinstance(err["message"], str) and err["message"]
    assert err["code"] != INTERNAL_ERROR, err  # an internal error is a bug, whatever the input


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=_LINES)
def test_fuzz_bad_requests_always_get_a_json_rpc_error_and_never_write(server: Server, line: bytes):
    before = server.store.latest_tx()
    out = server.handle_line(line)
    if out is None:
        return  # notifications only
    assert b"\n" not in out
    answer = json.loads(out)
    answers = answer if isinstance(answer, list) else [answer]
    for a in answers:
        assert a["jsonrpc"] == "2.0" and ("result" in a) != ("error" in a)
        if "error" in a:
            _check_error(a)
        event(f"error {a['error']['code']}" if "error" in a else "result")
    if not isinstance(answer, list) and "error" in answer:
        assert server.store.latest_tx() == before, answer


@contextmanager
def granted(tmp_path: Path, **options: Any) -> Iterator[tuple[Server, Path, Callable[..., Any]]]:
    """An in-process server over a fresh store, granted the workspace ``tmp_path/ws``, and a call
    of a method that must succeed (its result); the server closed after."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with SqliteStore(tmp_path / "s.db") as store:
        server = Server(store, workspaces=[ws], **options)

        def rpc(method: str, **params: Any) -> Any:
            answer = server.handle({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            assert "result" in answer, answer
            return answer["result"]

        try:
            yield server, ws, rpc
        finally:
            server.close()


@pytest.mark.parametrize("harness", NAMES)
def test_every_harness_gets_the_file_tools_over_json_rpc(tmp_path: Path, harness: str):
    """Each harness's session with a granted workspace offers and runs the file tools (pydantic-ai
    used to get none: the harness list was kept in several places)."""
    with granted(tmp_path) as (_, ws, rpc):
        (ws / "app.py").write_text("print('hi')\n")
        rpc("session.open", session="s", harness=harness, workspace=str(ws))
        tools = rpc("tools.list", session="s")
        names = {t.get("name") or t.get("function", {}).get("name") for t in tools}
        assert {"read", "write", "edit", "ls", "find", "grep", "activate", "deactivate"} <= names
        out = rpc("tools.call", session="s", name="read", arguments={"path": "app.py"})
        assert not out["is_error"] and json.loads(out["output"])["active"] == "activated"


@pytest.mark.filterwarnings(WATCHDOG_RACE_WARNING)
def test_a_file_the_agent_read_that_changes_on_disk_gets_a_version_the_session_marks_stale(tmp_path: Path):
    """``ctxos serve`` runs a watchdog tracker for each workspace its sessions open (one for all
    the sessions in it): a file the agent read that changes on disk (a formatter, the user's
    editor) gets version 2, which the session marks stale, and ``activate`` loads it."""
    with granted(tmp_path) as (server, ws, rpc):
        (ws / "app.py").write_text("print('v1')\n")

        def tail(messages: list[dict[str, Any]]) -> str:
            out = rpc("context.transform", session="s", messages=messages)["messages"]
            return "\n".join(m["content"] for m in out if str(m["content"]).startswith("<context_os>"))

        rpc("session.open", session="s", harness="openai", workspace=str(ws))
        rpc("session.open", session="t", harness="openai", workspace=str(ws))
        assert server.trackers is not None and len(server.trackers.running()) == 1  # one per workspace
        read = json.loads(rpc("tools.call", session="s", name="read", arguments={"path": "app.py"})["output"])
        messages = [{"role": "user", "content": "fix app.py"}, call("c1", "read", path="app.py"), result("c1", "...")]
        assert "print('v1')" in tail(messages)
        (ws / "app.py").write_text("print('v2 from the disk')\n")
        wait_for(lambda: latest_meta(server.store, read["id"])["version"] == 2, what="the tracker's version 2")
        messages += [{"role": "assistant", "content": "Looking."}, user("go on")]
        shown = tail(messages)
        assert 'stale="version 2 is newer: activate(id) loads it"' in shown and "v2 from the disk" not in shown
        rpc("tools.call", session="s", name="activate", arguments={"id": read["id"]})
        assert "v2 from the disk" in tail(messages)
    assert server.trackers.running() == []  # stopped with the server


@pytest.mark.e2e
def test_recall_and_remember_over_stdio(tmp_path: Path):
    """A session opened with recall and memory gets both tools; what another session said is
    found, and a remembered fact is in the next call's context (the global scope: no workspace)."""
    rpc = Rpc(tmp_path / "s.db", "--stdio", "--embedder", "none")
    try:
        rpc.result("session.open", session="a", harness="openai")
        rpc.result(
            "context.transform",
            session="a",
            messages=[user("ci"), call("c1", command="pytest"), result("c1", "FAILED test_lease_renewal")],
        )
        opened = rpc.result("session.open", session="b", harness="openai", recall=True, memory=True)
        assert opened["sources"] == ["memory", "recall"]
        tools = {t["function"]["name"] for t in rpc.result("tools.list", session="b")}
        assert {"recall", "remember", "activate"} <= tools
        found = rpc.result("tools.call", session="b", name="recall", arguments={"query": "lease renewal"})
        hits = json.loads(found["output"])["hits"]
        assert not found["is_error"] and hits[0]["object"] == "toolcall:a:c1"
        said = rpc.result(
            "tools.call", session="b", name="remember", arguments={"text": "tests need make test", "scope": "global"}
        )
        assert json.loads(said["output"])["appended"] == "- tests need make test"
        out = rpc.result("context.transform", session="b", messages=[user("hello")])
        assert any("- tests need make test" in str(m.get("content")) for m in out["messages"])
        code, err = rpc.close()
        assert code == 0, err
    finally:
        if rpc.proc.poll() is None:
            rpc.proc.kill()
            rpc.proc.wait()
        for stream in (rpc.proc.stdin, rpc.proc.stdout, rpc.proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()


def test_a_memory_session_reads_its_global_topic_files(tmp_path: Path) -> None:
    """The global memory scope lies outside the workspace: a session opened with memory may read
    the topic files it wrote there, and nothing else outside the workspace."""
    with granted(tmp_path, embedder=None) as (_, ws, rpc):
        rpc("session.open", session="m", workspace=str(ws), memory=True)
        args = {"text": "release with make release", "scope": "global", "topic": "deploy"}
        wrote = json.loads(rpc("tools.call", session="m", name="remember", arguments=args)["output"])
        topic = wrote["file"]
        assert Path(topic).parent != ws and topic.endswith("deploy.md")
        read = rpc("tools.call", session="m", name="read", arguments={"path": topic})
        assert not read["is_error"], read["output"]
        outside = rpc("tools.call", session="m", name="read", arguments={"path": str(tmp_path / "s.db")})
        assert outside["is_error"] and json.loads(outside["output"])["type"] == "PathDenied"


def test_a_forked_pi_session_shows_the_files_its_inherited_reads_name(tmp_path: Path):
    """A Pi session forked or cloned from another carries that session's read results, which are
    context_os's reports (the file's text showed only in the other session's blocks): the new
    session shows the files they name, or the model would see 'activated' and no text. The
    session that made the read keeps its own choices (a file it deactivated stays so)."""

    def tail(session: str, messages: list[dict[str, Any]]) -> str:
        out = rpc("context.transform", session=session, messages=messages)["messages"]
        texts = [b["text"] for m in out if isinstance(m["content"], list) for b in m["content"] if "text" in b]
        return "\n".join(t for t in texts if t.startswith("<context_os>"))

    with granted(tmp_path) as (_, ws, rpc):
        (ws / "app.py").write_text("print('the text of app.py')\n")
        rpc("session.open", session="a", harness="pi", workspace=str(ws))
        report = rpc("tools.call", session="a", name="read", arguments={"path": "app.py"})["output"]
        read = {**pi_msgs.result("c1", "read", report), "details": {"contextOs": True}}
        messages = [pi_msgs.user("look at app.py"), pi_msgs.call("c1", "read", path="app.py"), read]
        assert "the text of app.py" in tail("a", messages)
        rpc("tools.call", session="a", name="deactivate", arguments={"id": "app.py"})
        messages += [pi_msgs.say("Seen it."), pi_msgs.user("go on")]
        assert "the text of app.py" not in tail("a", messages)

        rpc("session.open", session="fork", harness="pi", workspace=str(ws))
        assert "the text of app.py" in tail("fork", [*messages, pi_msgs.user("in the fork")])


def test_a_pi_session_resumed_into_another_store_reads_the_files_its_reports_name(tmp_path: Path):
    """A Pi session resumed with a store that never held it carries read reports whose file ids
    that store does not know: the files they name are read again by path (or the model would see
    'activated' and no text); a file id the store evicted (a leaked secret) is not read again."""

    def tail(rpc: Callable[..., Any], session: str, messages: list[dict[str, Any]]) -> str:
        out = rpc("context.transform", session=session, messages=messages)["messages"]
        texts = [b["text"] for m in out if isinstance(m["content"], list) for b in m["content"] if "text" in b]
        return "\n".join(t for t in texts if t.startswith("<context_os>"))

    def resumed(report: str) -> list[dict[str, Any]]:
        read = {**pi_msgs.result("c1", "read", report), "details": {"contextOs": True}}
        return [pi_msgs.user("look at app.py"), pi_msgs.call("c1", "read", path="app.py"), read, pi_msgs.user("go on")]

    (tmp_path / "a").mkdir()
    with granted(tmp_path / "a") as (_, ws, rpc):
        (ws / "app.py").write_text("print('the text of app.py')\n")
        rpc("session.open", session="s", harness="pi", workspace=str(ws))
        elsewhere = rpc("tools.call", session="s", name="read", arguments={"path": "app.py"})["output"]
    (tmp_path / "b").mkdir()
    with granted(tmp_path / "b") as (server, ws, rpc):
        (ws / "app.py").write_text("print('the text of app.py')\n")
        rpc("session.open", session="s", harness="pi", workspace=str(ws))
        assert "the text of app.py" in tail(rpc, "s", resumed(elsewhere))

        rpc("session.open", session="t", harness="pi", workspace=str(ws))
        here = rpc("tools.call", session="t", name="read", arguments={"path": "app.py"})["output"]
        evict(server.store, json.loads(here)["id"])
        rpc("session.open", session="u", harness="pi", workspace=str(ws))
        assert "the text of app.py" not in tail(rpc, "u", resumed(here))


def test_frame_verify_tells_a_frame_that_showed_an_evicted_object_from_a_damaged_one(server: Server):
    """It said ``ok: false`` and the problems alone: a harness could not tell an eviction (no
    damage) from damage, as ``ctxos frames verify`` does."""
    evict(server.store, "toolcall:s1:c0", reason="leaked")
    params = {"session": "s1", "turn": 1}
    answer = server.handle({"jsonrpc": "2.0", "id": 1, "method": "frame.verify", "params": params})["result"]
    assert not answer["ok"] and answer["evicted"] == ["toolcall:s1:c0"], answer
    assert "cannot be checked" in answer["checked"]


@pytest.mark.parametrize(("was", "now"), [(True, 1), (False, 0), (1, True), (True, 1.0)])
def test_a_value_changed_only_in_its_json_type_is_a_rewrite(server: Server, was: Any, now: Any):
    """A client that changed a tool call's argument from ``true`` to ``1`` in its history:
    Python's ``==`` takes them for one value, and the change was not taken in; the frame kept
    showing the old argument, which the store hashes apart from the new one. (``1`` and ``1.0``
    the store hashes alike: no rewrite, ``test_an_integral_float_for_an_integer_is_no_rewrite``.)"""

    def history(flag: Any, more: int) -> list[dict[str, Any]]:
        call = {"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "ls", "all": flag}}
        result = {"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}
        return [
            {"role": "user", "content": "list the files"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
            *({"role": "assistant" if n % 2 == 0 else "user", "content": f"more {n}"} for n in range(more)),
        ]

    def transform(messages: list[dict[str, Any]]) -> Any:
        # over the wire, as a client sends it: the values' JSON types are what the text says
        line = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "context.transform",
                "params": {"session": "a1", "messages": messages},
            }
        )
        answer = json.loads(server.handle_line(line.encode()) or b"null")
        assert "result" in answer, answer
        return answer["result"]

    assert transform(history(was, 1))["rewritten"] is False
    got = transform(history(now, 2))
    assert got["rewritten"] is True and got["new"] == 4  # the call, and all after it
    sent = [
        b for m in got["messages"] if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_use"
    ]
    assert json.dumps(sent[0]["input"], sort_keys=True) == json.dumps({"cmd": "ls", "all": now}, sort_keys=True)
    assert transform(history(now, 3))["rewritten"] is False  # and then as before: what is new only


def test_an_integral_float_for_an_integer_is_no_rewrite(server: Server):
    """``1`` and ``1.0`` are one value to the store's hashing (integral floats are written as
    integers): a client that now sends ``1.0`` rewrote nothing, as before."""
    base = [{"role": "user", "content": "go"}]

    def transform(n: Any, more: int) -> Any:
        call = {"type": "tool_use", "id": "t1", "name": "bash", "input": {"n": n}}
        messages = [*base, {"role": "assistant", "content": [call]}]
        messages += [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]
        messages += [{"role": "assistant" if k % 2 == 0 else "user", "content": f"more {k}"} for k in range(more)]
        line = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "context.transform",
                "params": {"session": "a1", "messages": messages},
            }
        )
        return json.loads(server.handle_line(line.encode()) or b"null")["result"]

    assert transform(1, 1)["new"] == 4
    got = transform(1.0, 2)
    assert got["rewritten"] is False and got["new"] == 1


@pytest.mark.e2e
@pytest.mark.filterwarnings(WATCHDOG_RACE_WARNING)
def test_a_file_trackers_errors_reach_the_servers_log_and_its_status(tmp_path: Path):
    """A workspace deleted under the server (its tracker records its files missing and waits for
    it to come back): the tracker said so in a list no user of ``ctxos serve`` could read. Now it
    is a warning on the server's stderr, and the ``status`` method lists each tracker with its
    latest errors, beside the sessions open."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("print('a')\n")
    with http_server(tmp_path, "--workspace", str(ws)) as srv:
        assert srv.proc.stderr is not None
        srv.rpc("session.open", session="s1", workspace=str(ws), client="c1")
        read = srv.rpc("tools.call", session="s1", client="c1", name="read", arguments={"path": "a.py"})
        assert read["result"]["is_error"] is False
        status = srv.rpc("status")["result"]
        assert status["sessions"] == [
            {"session": "s1", "client": "c1", "harness": "openai", "workspace": str(ws), "turn": 0}
        ]
        [tracker] = status["trackers"]
        assert tracker["workspace"] == str(ws) and tracker["running"] is True and tracker["errors"] == []
        shutil.rmtree(ws)
        gone = wait_for(
            lambda: [e for t in srv.rpc("status")["result"]["trackers"] for e in t["errors"] if "is gone" in e],
            "the tracker's error in the status",
        )
        assert gone == [
            f"{ws} is gone (deleted or moved away): its files are recorded missing; watching again when it is back"
        ]
        while b"is gone" not in (line := srv.proc.stderr.readline()):
            assert line, "the server's log never said the workspace is gone"
        assert line.decode().startswith(f"ctxos serve: WARNING file tracker of {ws}: {ws} is gone")


def test_messages_nested_deeper_than_marshal_packs_are_bad_input_not_an_internal_error(server: Server):
    # Python 3.13's JSON parser takes 2,500 levels; the history's packing (marshal) stops at 2,000
    deep: Any = "x"
    for _ in range(2500):
        deep = [deep]
    msgs = [*coding_session(2), {"role": "user", "content": "hi", "extra": deep}]
    params = {"session": "s1", "messages": msgs}
    answer = server.handle({"jsonrpc": "2.0", "id": 1, "method": "context.transform", "params": params})
    assert answer["error"]["code"] == INVALID_PARAMS and "nested too deeply" in answer["error"]["message"]
    params = {"session": "s1", "messages": [*coding_session(2), user("and on")]}
    assert "result" in server.handle({"jsonrpc": "2.0", "id": 2, "method": "context.transform", "params": params})


def test_a_session_opened_with_cut_holds_a_message_over_the_cap_cut(rpc: Rpc):
    """A client that cannot send less (the Pi extension: the whole conversation at every call)
    opens its session with ``cut``: a message over ``max_message_chars`` is held cut to it, with
    a note, and said on stderr; without ``cut`` it is refused (-32005), as before."""
    policy = {"max_message_chars": 1000, "manage_from_tokens": 0}
    long = "log line\n" * 500
    rpc.result("session.open", session="plain", policy=policy)
    refused = rpc("context.transform", session="plain", messages=[user(long)])
    assert refused["error"]["code"] == -32005, refused
    rpc.result("session.open", session="cut", policy=policy, cut=True)
    out = rpc.result("context.transform", session="cut", messages=[user(long)])
    sent = json.dumps(out["messages"])
    assert "[cut by context_os: 4,500 characters" in sent and long not in sent
    again = rpc.result("context.transform", session="cut", messages=[user(long), call("c1", command="ls")])
    assert again["new"] == 1 and not again["rewritten"]  # the message held cut is the one sent whole
    code, err = rpc.close()
    assert code == 0
    assert err.count("message 0 is 4,500 characters, over the 1,000 one message keeps") == 1, err


@pytest.mark.filterwarnings(WATCHDOG_RACE_WARNING)
def test_a_workspace_is_watched_while_a_session_in_it_is_open(tmp_path: Path):
    """``session.close`` gave back the session's lease but not its workspace's file tracker, which
    ran until the server stopped. Now each open session holds its workspace's tracker, and the
    last one to close (or to be opened anew, with a policy) gives it back and stops it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with SqliteStore(tmp_path / "s.db") as store:
        server = Server(store, workspaces=[ws], embedder=None)
        try:

            def watched() -> list[str]:
                return [t["workspace"] for t in server.call("status", {})["trackers"]]

            for sid in ("a", "b"):
                server.call("session.open", {"session": sid, "workspace": str(ws)})
            assert watched() == [str(ws.resolve())]
            server.call("session.open", {"session": "a", "workspace": str(ws), "policy": {"collapse_after_turns": 3}})
            server.call("session.close", {"session": "b"})
            assert watched() == [str(ws.resolve())]  # a holds it, once (its first hold given back)
            server.call("session.close", {"session": "a"})
            assert watched() == []
            server.call("session.open", {"session": "a", "workspace": str(ws)})
            assert watched() == [str(ws.resolve())]
        finally:
            server.close()
        assert server.trackers is not None and server.trackers.running() == []


@pytest.mark.filterwarnings(WATCHDOG_RACE_WARNING)
def test_a_session_that_fails_to_open_gives_back_its_workspaces_tracker(tmp_path: Path):
    """A ``session.open`` that failed after taking its workspace's tracker (here: recall with an
    embedder this machine does not know) kept the tracker running until the server stopped, and
    its session's lease taken. Both are given back when the open fails."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with SqliteStore(tmp_path / "s.db") as store:
        server = Server(store, workspaces=[ws], embedder="no-such-embedder")
        try:
            with pytest.raises(InputError, match="no-such-embedder"):
                server.call("session.open", {"session": "a", "workspace": str(ws), "recall": True})
            assert server.call("status", {})["trackers"] == []
            assert server.sessions == {}
            assert store.doc(lease_id("a"))["content"]["expires"] == 0  # the lease was given back
        finally:
            server.close()
