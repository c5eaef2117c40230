"""End to end through the real Pi CLI (``pi -p``) with the context_os extension (adapters/pi).

Only the model is scripted (model_server.py): Pi, its tools, the extension, ``ctxos serve`` and
the SQLite store are real, working on real files in a temp workspace. The Pi and Node they need
are provisioned by the ``pi`` fixture (conftest.py, provision.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from context_os.context.view import TAIL_OPEN
from context_os.store.sqlite import SqliteStore
from tests.helpers import stop_process

from .conftest import CTXOS, PiRun, Rpc, _setup, pi_print, pi_rpc, run_pi, texts
from .model_server import error, scripted_model, text, tool_call
from .provision import ADAPTER, PiInstall

pytestmark = pytest.mark.e2e

BUGGY = "def add(a, b):\n    return a - b\n\n\nprint(add(2, 3))\n"
FIXED = BUGGY.replace("a - b", "a + b")
PROMPT = "calc.py prints the wrong sum: fix it and check."

# read → edit (Pi 1.5's multi-edit form) → bash, then an output long enough to be collapsed by
# policy (3 turns old, over the 1,000-token batch) before the last call
SCRIPT = [
    tool_call("read", path="calc.py"),
    tool_call("edit", path="calc.py", edits=[{"oldText": "return a - b", "newText": "return a + b"}]),
    tool_call("bash", command="python3 calc.py"),
    tool_call("bash", command="seq 1 1500"),
    tool_call("bash", command="echo one"),
    tool_call("bash", command="echo two"),
    tool_call("bash", command="echo three"),
    text("Fixed: add() now adds; calc.py prints 5."),
]


def _joined(request: dict[str, Any]) -> str:
    return "\n".join(texts(request["messages"]))


def _tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


def _tool_output(request: dict[str, Any], call_id: str) -> str:
    found = [m for m in request["messages"] if m.get("role") == "tool" and m.get("tool_call_id") == call_id]
    assert len(found) == 1, f"expected one result for {call_id}, got {found}"
    return "\n".join(texts(found[0]["content"]))


def _tail(request: dict[str, Any]) -> str:
    """The text of the request's context_os blocks (the messages holding them)."""
    found = [m for m in request["messages"] if TAIL_OPEN in "\n".join(texts(m.get("content")))]
    assert found, f"expected {TAIL_OPEN} messages"
    return "\n".join(t for m in found for t in texts(m["content"]))


def _assert_task_done(run: PiRun) -> None:
    assert run.proc.returncode == 0, f"pi exited {run.proc.returncode}\n{run.proc.stdout}\n{run.proc.stderr}"
    assert run.model.errors == []
    assert len(run.requests) == len(SCRIPT), [_joined(r)[-300:] for r in run.requests]
    assert (run.workspace / "calc.py").read_text() == FIXED
    assert "Fixed: add() now adds" in run.proc.stdout


def _ctxos(*args: str, store: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CTXOS, "--store", f"sqlite:///{store}", *args], capture_output=True, text=True, timeout=120)


def _file_versions(store: Path, path: str) -> list[str | None]:
    with SqliteStore(store) as s:
        files = s.find("file", {"path": path})
        assert len(files) == 1, files
        return [v.doc["content"] for v in s.history(files[0].id, with_docs=True) if v.doc]


@pytest.fixture(scope="module")
def task(pi: PiInstall, tmp_path_factory: pytest.TempPathFactory) -> PiRun:
    """The scripted task, run once with context_os on, for the tests that read what it left. The
    task is far too small for a prompt-cache break to pay, so the policy takes every change when
    it is due (``CTXOS_POLICY``, the extension's policy setting): what it collapses shows."""
    env = {"CTXOS_POLICY": json.dumps({"cache_break_percent": None})}
    return run_pi(pi, tmp_path_factory.mktemp("pi-task"), PROMPT, SCRIPT, files={"calc.py": BUGGY}, env=env)


@pytest.fixture(scope="module")
def replay(task: PiRun, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """``ctxos replay`` of the session file Pi wrote in ``task``: its summary and its store."""
    store = tmp_path_factory.mktemp("pi-replay") / "replay.db"
    out = _ctxos("replay", str(task.session_file()), "--json", "--no-per-turn", store=store)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout), store


def test_pi_completes_the_task_with_context_os_on(task: PiRun) -> None:
    _assert_task_done(task)
    assert "context_os is off" not in task.proc.stderr, task.proc.stderr


def test_context_os_assembles_every_model_call(task: PiRun) -> None:
    first, *later = task.requests
    # our tools were offered from the first call on; `read` is ours: it reports, it does not dump
    assert {"read", "activate", "deactivate", "edit", "bash"} <= set(_tool_names(first))
    read_report = json.loads(_tool_output(later[0], "call_1"))
    assert read_report["path"] == "calc.py" and read_report["active"] == "activated"

    # the file's text reaches the model in context_os's block, which Pi never writes
    assert TAIL_OPEN not in _joined(first)
    assert "return a - b" in _tail(later[0])
    assert all(TAIL_OPEN in _joined(r) for r in later)

    # the long bash output was collapsed to a stub by policy before the last call; newer ones stay
    last = task.requests[-1]
    assert _tool_output(later[3], "call_4").startswith("1\n2\n3\n")
    assert _tool_output(last, "call_4").startswith("[bash output, ")
    assert _tool_output(last, "call_7") == "three\n"


def test_the_store_holds_the_file_and_a_verified_frame_per_call(task: PiRun) -> None:
    assert _file_versions(task.store, "calc.py")[0] == BUGGY
    session = task.session_id()
    frames = json.loads(_ctxos("frames", session, "--json", store=task.store).stdout)
    assert [f["turn"] for f in frames] == list(range(1, len(SCRIPT) + 1))
    verify = _ctxos("verify", "--frames", "--json", store=task.store)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["frames_verified"] == len(SCRIPT)


def test_an_edit_makes_a_new_version_shown_in_the_tail(task: PiRun) -> None:
    assert _file_versions(task.store, "calc.py")[-1] == FIXED
    tail = _tail(task.requests[2])  # the call right after the edit
    assert "return a + b" in tail and "return a - b" not in tail


def test_pi_session_file_replays(replay: tuple[dict[str, Any], Path]) -> None:
    summary, _ = replay
    assert summary["format"].startswith("pi")
    assert summary["turns"] == len(SCRIPT)
    assert summary["frames"] == summary["frames_verified"] == len(SCRIPT)
    assert summary["orphaned_tool_results"] == 0
    assert summary["files"] == 1
    assert summary["edits_total"] == 1


def test_an_attempt_pi_retried_is_left_out_of_the_replay_as_pi_leaves_it_out(pi: PiInstall, tmp_path: Path) -> None:
    """Pi 1.5 keeps an attempt that failed and was retried (an overloaded provider) in its session
    file, and a ``context_edit`` there leaves it out of every call after it; the replay kept it."""
    overloaded = "The server is overloaded, please try again"
    script = [error(503, overloaded), tool_call("read", path="calc.py"), text("It subtracts.")]
    run = run_pi(pi, tmp_path, "What does calc.py do?", script, files={"calc.py": BUGGY})
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    assert run.model.errors == [] and len(run.requests) == 3
    assert len(run.requests[1]["messages"]) == len(run.requests[0]["messages"])  # the retry: the same call
    entries = [json.loads(line) for line in run.session_file().read_text().splitlines()]
    failed = [e for e in entries if e["type"] == "message" and e["message"].get("stopReason") == "error"]
    edits = [e for e in entries if e["type"] == "context_edit"]
    assert len(failed) == 1 and overloaded in failed[0]["message"]["errorMessage"]
    assert [(e["targetId"], e["replacement"]) for e in edits] == [(failed[0]["id"], None)]

    out = _ctxos("replay", str(run.session_file()), "--json", "--per-turn", store=tmp_path / "replay.db")
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout)
    assert summary["turns"] == summary["frames_verified"] == 2  # the calls that answered
    # the system prompt and the user's; then the call and its result
    assert [row["messages"] for row in summary["per_turn"]] == [2, 4]
    info = [said for session in summary["sessions"] for said in session["info"]]
    assert any("1 message(s) edited by Pi's context edits (1 left out)" in said for said in info), info


def test_replay_takes_no_context_os_report_for_file_text(replay: tuple[dict[str, Any], Path]) -> None:
    # with context_os on, the file's text never was in Pi's session (it was in the context_os
    # block): the replay may not know it, but must not make it up
    _, store = replay
    assert all(v in (None, BUGGY, FIXED) for v in _file_versions(store, "calc.py"))


@pytest.mark.parametrize(
    ("ctxos", "timeout_ms", "reason"),
    [
        pytest.param("false", None, "ctxos exited with code 1", id="exits-at-once"),
        pytest.param(
            "ctxos-not-installed-here",
            None,
            "ctxos-not-installed-here is not on PATH: set CTXOS_CMD to the ctxos to run",
            id="not-on-path",
        ),
        pytest.param(
            f"'{sys.executable}' -c 'import time; time.sleep(60)'",
            "1500",
            "ctxos did not answer session.open within 1500 ms",
            id="never-answers",
        ),
    ],
)
def test_pi_works_on_when_ctxos_fails(
    pi: PiInstall, tmp_path: Path, ctxos: str, timeout_ms: str | None, reason: str
) -> None:
    env = {"CTXOS_TIMEOUT_MS": timeout_ms} if timeout_ms else {}
    run = run_pi(pi, tmp_path, PROMPT, SCRIPT, files={"calc.py": BUGGY}, ctxos=ctxos, env=env)
    _assert_task_done(run)

    # said once, with the reason, on stderr (print mode has no UI to notify)
    assert run.proc.stderr.count("context_os is off") == 1, run.proc.stderr
    assert reason in run.proc.stderr
    assert "Pi carries on with its own context" in run.proc.stderr

    # Pi's own context went to the model: Pi's read returned the text, no context_os block, and
    # the tools only context_os can answer were withdrawn before the first call
    assert _tool_output(run.requests[1], "call_1").startswith(BUGGY.rstrip("\n"))
    assert not any(TAIL_OPEN in _joined(r) for r in run.requests)
    for request in run.requests:
        names = _tool_names(request)
        assert "read" in names and "activate" not in names and "deactivate" not in names
    assert not run.store.exists()


def test_a_setting_the_extension_cannot_read_is_named_not_ignored(pi: PiInstall, tmp_path: Path) -> None:
    """A timeout that is not a number of milliseconds, or an on/off setting that is neither, is
    named on stderr with what the extension does instead; the usual words for on and off work,
    and context_os stays on."""
    env = {"CTXOS_TIMEOUT_MS": "5s", "CTXOS_RECALL": "true", "CTXOS_MEMORY": "maybe"}
    script = [tool_call("read", path="calc.py"), text("Read.")]
    run = run_pi(pi, tmp_path, PROMPT, script, files={"calc.py": BUGGY}, env=env)
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    assert run.model.errors == [] and len(run.requests) == 2
    said = run.proc.stderr
    assert "context_os is off" not in said, said
    assert "CTXOS_TIMEOUT_MS='5s' is not a whole number of milliseconds: using 30000" in said, said
    assert "CTXOS_MEMORY='maybe' is neither 1 (on) nor 0 (off): remember stays off" in said, said
    assert "CTXOS_RECALL" not in said, said
    names = _tool_names(run.requests[0])
    assert "recall" in names and "remember" not in names and "activate" in names
    assert "return a - b" in _tail(run.requests[1])


def _kill_ctxos_serving(store: Path) -> int:
    """SIGKILL the ``ctxos serve`` this test's Pi started (found by its unique store URL); how many."""
    marker = f"CTXOS_STORE=sqlite:///{store}".encode()
    killed = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        if b"serve\0--stdio" in cmdline and marker in environ.split(b"\0"):
            os.kill(int(proc.name), signal.SIGKILL)
            killed += 1
    return killed


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the ctxos process through /proc")
def test_pi_works_on_when_ctxos_dies_mid_session(pi: PiInstall, tmp_path: Path) -> None:
    killed: list[int] = []

    def kill_after_two_calls(n: int) -> None:
        if n == 3:  # the third call was assembled by context_os; the fourth will find it dead
            killed.append(_kill_ctxos_serving(tmp_path / "store.db"))

    run = run_pi(pi, tmp_path, PROMPT, SCRIPT, files={"calc.py": BUGGY}, on_request=kill_after_two_calls)
    assert killed == [1]
    _assert_task_done(run)
    assert run.proc.stderr.count("context_os is off") == 1, run.proc.stderr
    assert "context_os is off: ctxos was killed by SIGKILL. Pi carries on" in run.proc.stderr
    assert all(TAIL_OPEN in _joined(r) for r in run.requests[1:3])
    assert not any(TAIL_OPEN in _joined(r) for r in run.requests[3:])
    assert "activate" in _tool_names(run.requests[2])
    assert "activate" not in _tool_names(run.requests[-1])
    # the file read while context_os was on is not lost with it: its read result, context_os's
    # report, goes to the model as what Pi's read gives now (the edited file)
    assert "return a + b" not in _tool_output(run.requests[2], "call_1")
    assert _tool_output(run.requests[-1], "call_1").startswith(FIXED.rstrip("\n"))


def test_extension_typechecks_against_the_installed_pi(pi: PiInstall) -> None:
    tsc = ADAPTER / "node_modules" / "typescript" / "bin" / "tsc"
    proc = subprocess.run(
        [str(pi.node_bin / "node"), str(tsc), "--noEmit", "-p", str(ADAPTER)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_recall_and_remember_through_pi(pi: PiInstall, tmp_path: Path) -> None:
    """With CTXOS_RECALL and CTXOS_MEMORY, Pi offers recall and remember; what the agent remembers
    is in its context at the next call, and recall finds it in the store (not the session's own
    messages, which its context shows: "the sum in calc.py is wrong" is left out)."""
    script = [
        tool_call("remember", text="calc.py is checked with python3 calc.py", scope="global"),
        tool_call("recall", query="wrong sum, checked with python3", k=3),
        text("Noted."),
    ]
    env = {"CTXOS_RECALL": "1", "CTXOS_MEMORY": "1", "CTXOS_POLICY": json.dumps({"cache_break_percent": None})}
    run = run_pi(pi, tmp_path, PROMPT, script, files={"calc.py": BUGGY}, env=env)
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    assert run.model.errors == [] and len(run.requests) == 3
    assert {"recall", "remember", "activate"} <= set(_tool_names(run.requests[0]))
    assert "- calc.py is checked with python3 calc.py" in _tail(run.requests[1])
    found = json.loads(_tool_output(run.requests[2], "call_2"))
    assert found["hits"] and "checked with python3" in found["hits"][0]["preview"]
    assert all(h["kind"] != "chat" for h in found["hits"]), found["hits"]
    memory = tmp_path / "xdg-data" / "context_os" / "memory" / "MEMORY.md"
    assert memory.read_text() == "- calc.py is checked with python3 calc.py\n"


def test_mesh_tools_through_pi(pi: PiInstall, tmp_path: Path) -> None:
    """With CTXOS_MESH, Pi's agent is a mesh peer: it lists a Python peer, sends it a message and
    gets its answer, all through the extension and ``ctxos serve --mesh``; the tools Pi offers the
    model are the ones ctxos defines (the extension's copies of the schemas have not drifted)."""
    from context_os.context.mesh_tools import MESH_TOOL_NAMES, MeshTools
    from context_os.context.tools import ToolRegistry
    from context_os.mesh.agent import MeshAgent
    from context_os.mesh.node import MeshConfig
    from tests.mesh.conftest import Answerer

    with SqliteStore(tmp_path / "bob.db") as bob_store, MeshAgent(bob_store, MeshConfig("bob")) as bob:
        answers = Answerer(bob, lambda r: f"bob here: {r.message.upper()}")
        try:
            script = [
                tool_call("mesh_list_peers"),
                tool_call("mesh_send", peerId=bob.peer_id, message="is main green?"),
                text("Bob says main is green."),
            ]
            env = {
                "CTXOS_MESH": "alice",
                "CTXOS_MESH_ARGS": f"--no-mesh-mdns --mesh-connect {bob.node.addrs[0]}",
                "CTXOS_POLICY": json.dumps({"cache_break_percent": None}),
            }
            (tmp_path / "pi").mkdir()
            run = run_pi(pi, tmp_path / "pi", PROMPT, script, files={"calc.py": BUGGY}, env=env)
        finally:
            answers.stop()
        assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
        assert run.model.errors == [] and len(run.requests) == 3
        offered = {t["function"]["name"]: t["function"] for t in run.requests[0]["tools"]}
        registry = MeshTools.__new__(MeshTools).register(ToolRegistry())  # the schemas only: no session needed
        ours = {s["name"]: s for s in registry.schemas}
        for name in MESH_TOOL_NAMES:
            assert offered[name]["parameters"] == ours[name]["parameters"], name
            assert offered[name]["description"] == ours[name]["description"], name
        peers = json.loads(_tool_output(run.requests[1], "call_1"))["peers"]
        assert [(p["peerId"], p["status"]) for p in peers] == [(bob.peer_id, "connected")]
        sent = json.loads(_tool_output(run.requests[2], "call_2"))
        assert sent["response"] == "bob here: IS MAIN GREEN?" and sent["agentName"] == "bob"
        # both agents stored the exchange
        assert [r.message for r in answers.seen] == ["is main green?"]
        with SqliteStore(run.store) as alice_store:
            kinds = sorted(v.doc["meta"]["kind"] for v in alice_store.find("message", {"mesh_agent": "alice"}) if v.doc)
        assert kinds == ["reply", "request"]


def test_a_mesh_peer_pi_could_not_dial_at_start_is_said(pi: PiInstall, tmp_path: Path) -> None:
    """A CTXOS_MESH_ARGS peer that is no address, or that nothing answers at, leaves the agent
    alone on the mesh: the extension says so at session start (ctxos serve's stderr never reaches
    the user), and context_os stays on with its mesh tools."""
    from tests._xtdb_node import _free_port

    nobody = f"/ip4/127.0.0.1/tcp/{_free_port()}/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
    env = {"CTXOS_MESH": "alice", "CTXOS_MESH_ARGS": f"--no-mesh-mdns --mesh-connect nonsense --mesh-connect {nobody}"}
    run = run_pi(pi, tmp_path, PROMPT, [text("Alone.")], files={"calc.py": BUGGY}, env=env)
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    said = run.proc.stderr
    assert "context_os is off" not in said, said
    lines = [line for line in said.splitlines() if line.startswith("context_os: mesh: could not connect to")]
    assert len(lines) == 2, said
    assert "'nonsense' is not a peer address" in lines[0]
    assert nobody in lines[1]
    assert "mesh_send" in _tool_names(run.requests[0])


def test_a_peers_request_is_a_turn_of_the_pi_agent(pi: PiInstall, tmp_path: Path) -> None:
    """A Pi agent on the mesh (RPC mode: long-lived, idle) takes a peer's request as a user
    message, and what its run ends with goes back to the peer as the answer."""
    from context_os.mesh.agent import MeshAgent
    from context_os.mesh.node import MeshConfig
    from context_os.store.sqlite import SqliteStore

    with SqliteStore(tmp_path / "bob.db") as bob_store, MeshAgent(bob_store, MeshConfig("bob")) as bob:
        env = {"CTXOS_MESH": "alice", "CTXOS_MESH_ARGS": f"--no-mesh-mdns --mesh-connect {bob.node.addrs[0]}"}
        (tmp_path / "pi").mkdir()
        script = [text("alice: calc.py adds now, tests pass")]
        with pi_rpc(pi, tmp_path / "pi", script, files={"calc.py": FIXED}, env=env) as (proc, model, store):
            deadline = time.monotonic() + 60
            while not bob.node.connected():  # alice dials bob when Pi starts its ctxos
                assert proc.poll() is None and time.monotonic() < deadline, "alice never connected"
                time.sleep(0.05)
            [alice] = bob.node.connected()
            out = bob.send(alice, "is calc.py fixed?", timeout=60)
            assert proc.poll() is None
        assert out["error"] is False and out["response"] == "alice: calc.py adds now, tests pass"
        assert out["agentName"] == "alice"
        # the model was given the request as the user message
        assert "is calc.py fixed?" in _joined(model.requests[0])
        with SqliteStore(store) as alice_store:
            got = {
                (v.doc["meta"]["direction"], v.doc["meta"]["kind"]): v.doc
                for v in alice_store.find("message", {"mesh_agent": "alice"})
                if v.doc
            }
        assert got[("in", "request")]["content"] == "is calc.py fixed?"
        assert got[("in", "request")]["meta"]["status"] == "answered"
        assert got[("out", "reply")]["meta"]["in_reply_to"] == got[("in", "request")]["id"]


def test_a_run_aborted_while_a_tool_runs_records_no_frame_for_a_call_never_made(pi: PiInstall, tmp_path: Path) -> None:
    """``abort`` (Esc in the TUI) while bash runs: Pi fires ``context`` for the next call before
    it stops, with the run's signal aborted, and makes no call; the extension records no frame for
    it, so the session's frames are the calls the model received, each verified."""
    script = [tool_call("read", path="calc.py"), tool_call("bash", command="touch started; sleep 30"), text("On it.")]
    events: list[dict[str, Any]] = []
    with pi_rpc(pi, tmp_path, script, files={"calc.py": BUGGY}, events=events) as (proc, model, store):
        rpc = Rpc(proc, events)
        rpc.send(type="prompt", message="read calc.py, then run the slow check")
        rpc.wait_for("bash started", lambda: (tmp_path / "workspace" / "started").exists())
        rpc.send(type="abort")
        rpc.wait_for("the aborted run's end", lambda: rpc.count("agent_end") == 1)
        rpc.send(type="prompt", message="carry on")
        rpc.wait_for("the call after the abort", lambda: len(model.requests) == 3)
    assert model.errors == []
    assert "Command aborted" in _joined(model.requests[2])
    with SqliteStore(store) as s:
        sessions = {d["meta"]["session"] for d in (v.doc for v in s.find("frame")) if d}
    [session] = sessions
    frames = json.loads(_ctxos("frames", "list", session, "--json", store=store).stdout)
    assert [f["turn"] for f in frames] == [1, 2, 3], frames
    verify = _ctxos("frames", "verify", session, "--json", store=store)
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.parametrize("auto", [False, True], ids=["", "workspace-auto"])
def test_pi_through_the_proxy(pi: PiInstall, tmp_path: Path, auto: bool) -> None:
    """Pi, with no extension, configured with ``ctxos proxy`` as its OpenAI-compatible provider:
    it does the task, and every model call went through context_os as a verified frame. With
    ``--workspace auto`` (``auto``) the proxy reads the directory Pi works in from its system
    prompt: calc.py is the file on the disk there."""
    import threading

    from context_os.context.frames import frame_docs, verify_frame
    from context_os.server.proxy import Proxy, make_proxy_server

    store = SqliteStore(tmp_path / "proxy.db")
    servers: list[Any] = []

    def through_proxy(model_url: str) -> str:
        proxy = Proxy(store, model_url.removesuffix("/v1"), workspace="auto" if auto else None)
        server = make_proxy_server(proxy, 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append((server, proxy))
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    (tmp_path / "pi").mkdir()
    try:
        run = run_pi(pi, tmp_path / "pi", PROMPT, SCRIPT, files={"calc.py": BUGGY}, provider=through_proxy)
    finally:
        for server, proxy in servers:
            server.shutdown()
            server.server_close()
            proxy.close()
    _assert_task_done(run)
    sessions = {d["meta"]["session"] for d in (v.doc for v in store.find("frame")) if d}
    assert len(sessions) == 1  # one conversation, one session, found again at every call
    frames = frame_docs(store, sessions.pop())
    assert len(frames) == len(SCRIPT) and all(verify_frame(store, f).ok for f in frames)
    calc = [v for v in store.find("file") if v.doc and v.doc["meta"].get("path") == "calc.py"]
    assert [bool(v.doc["meta"].get("virtual")) for v in calc if v.doc] == [not auto]
    store.close()


def _png() -> bytes:
    """A 1×1 PNG."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def test_an_image_read_reaches_a_model_that_takes_images(pi: PiInstall, tmp_path: Path) -> None:
    """context_os keeps an image as metadata only; its read report would leave the model without
    the picture, so the extension lets Pi's own read answer, which gives it as an image."""
    script = [tool_call("read", path="dot.png"), text("A green dot.")]
    run = run_pi(pi, tmp_path, "What is in dot.png?", script, files={"dot.png": _png()}, model_input=["text", "image"])
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    assert run.model.errors == [] and len(run.requests) == 2
    sent = json.dumps(run.requests[1]["messages"])
    assert "data:image/png;base64," in sent, sent[-1500:]
    assert "content_omitted" not in sent


def test_a_read_of_an_at_path_is_context_oss_as_pis_own_read_takes_it(pi: PiInstall, tmp_path: Path) -> None:
    """Pi's tools drop a leading "@" (files are mentioned so in its editor): context_os refused
    "@calc.py", Pi's own read answered, and the file never became an object."""
    script = [tool_call("read", path="@calc.py"), text("Read it.")]
    run = run_pi(pi, tmp_path, "Read calc.py", script, files={"calc.py": BUGGY})
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    assert _file_versions(run.store, "calc.py") == [BUGGY]
    assert "def add" in _tail(run.requests[1])


def _pi_print(pi: PiInstall, workspace: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``pi -p ARGS`` in ``workspace``, run to its end; it must exit 0."""
    proc = pi_print(pi, workspace, env, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_a_forked_session_shows_the_file_its_parent_read(pi: PiInstall, tmp_path: Path) -> None:
    """``pi --fork`` starts a new session with its parent's messages, whose read result is
    context_os's report (the text showed in the parent's blocks only): the fork's context_os
    session shows that file, or the model would see "activated" and no text."""
    script = [tool_call("read", path="calc.py"), text("Read it."), text("add subtracts.")]
    with scripted_model(script) as (model, base_url):
        workspace, agent_dir, _, env, options = _setup(pi, tmp_path, base_url, {"calc.py": BUGGY}, CTXOS, None)

        def pi_print(*args: str) -> None:
            proc = _pi_print(pi, workspace, env, *args)
            assert "context_os is off" not in proc.stderr, proc.stdout + proc.stderr

        pi_print(*options, "read calc.py")
        [parent] = sorted((agent_dir / "sessions").rglob("*.jsonl"))
        pi_print("--fork", str(parent), *options, "what does add do?")
    assert model.errors == [] and len(model.requests) == 3
    assert len(list((agent_dir / "sessions").rglob("*.jsonl"))) == 2
    assert _tool_output(model.requests[2], "call_1").startswith('{"active"')  # the parent's report
    assert "return a - b" in _tail(model.requests[2])
    # the fork's file holds a copy of its parent's entries: its replay counts its own call only
    [fork] = [f for f in (agent_dir / "sessions").rglob("*.jsonl") if f != parent]
    out = _ctxos("replay", str(fork), "--json", "--no-per-turn", store=tmp_path / "replay.db")
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout)
    assert summary["turns"] == summary["frames_verified"] == 1, summary


def test_a_session_resumed_into_another_store_shows_the_file_it_read(pi: PiInstall, tmp_path: Path) -> None:
    """``pi -c`` with CTXOS_STORE pointing at a store that never held the session (a new store, one
    on another machine, a wiped one): its read result is context_os's report, whose file id that
    store does not know; the new context_os session reads the file the report names, or the model
    would see "activated" and no text."""
    script = [tool_call("read", path="calc.py"), text("Read it."), text("add subtracts.")]
    with scripted_model(script) as (model, base_url):
        workspace, agent_dir, _, env, options = _setup(pi, tmp_path, base_url, {"calc.py": BUGGY}, CTXOS, None)
        for args, store in (([], "store.db"), (["-c"], "other.db")):
            run_env = {**env, "CTXOS_STORE": f"sqlite:///{tmp_path / store}"}
            proc = _pi_print(pi, workspace, run_env, *args, *options, "go")
            assert "context_os is off" not in proc.stderr, proc.stdout + proc.stderr
    assert model.errors == [] and len(model.requests) == 3
    assert len(list((agent_dir / "sessions").rglob("*.jsonl"))) == 1
    assert _tool_output(model.requests[2], "call_1").startswith('{"active"')  # the first store's report
    assert "return a - b" in _tail(model.requests[2])


def test_a_session_resumed_with_context_os_off_keeps_the_files_it_read(pi: PiInstall, tmp_path: Path) -> None:
    """Resumed with the store out of reach, Pi sends its own context: the reports of context_os's
    read in it become Pi's reads of those files, so the model still has them; a file context_os
    withheld (a secret) stays withheld."""
    from tests._xtdb_node import _free_port

    secret = "sk-proj-" + "a1B2c3D4e5" * 5
    script = [tool_call("read", path="calc.py"), tool_call("read", path=".env"), text("Read."), text("Still here.")]
    with scripted_model(script) as (model, base_url):
        files = {"calc.py": BUGGY, ".env": f"OPENAI_API_KEY={secret}\n"}
        workspace, _, _, env, options = _setup(pi, tmp_path, base_url, files, CTXOS, None)

        def pi_print(*args: str, store: str | None = None) -> str:
            return _pi_print(pi, workspace, env if store is None else {**env, "CTXOS_STORE": store}, *args).stderr

        assert "context_os is off" not in pi_print(*options, "read calc.py and .env")
        port = _free_port()  # nothing listens there: the store cannot be reached
        said = pi_print("-c", *options, "what does add do?", store=f"xtdb+http://127.0.0.1:{port}")
    assert "context_os is off" in said and "cannot be reached" in said
    assert model.errors == [] and len(model.requests) == 4
    last = model.requests[3]
    assert TAIL_OPEN not in _joined(last)
    assert _tool_output(last, "call_1").startswith(BUGGY.rstrip("\n"))
    assert '"content_omitted"' in _tool_output(last, "call_2") and secret not in _joined(last)


def _noise_png(width: int, height: int) -> bytes:
    """A PNG of random pixels (stored, not compressed: as large as its pixels)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + os.urandom(width * 3) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 0)) + chunk(b"IEND", b"")


def test_a_conversation_over_32_mib_stays_managed(pi: PiInstall, tmp_path: Path) -> None:
    """Pi sends the whole conversation at every model call: one past ``ctxos serve``'s default cap
    on a request (32 MiB; here eight screenshots of 4.3 MB each, as base64, under Pi's own limit
    for one image) must not turn context_os off."""
    shots = {f"shot{n}.png": _noise_png(1100, 1000) for n in range(8)}
    script = [tool_call("read", path="calc.py"), text("The screenshots show nothing wrong.")]
    with scripted_model(script) as (model, base_url):
        files: dict[str, str | bytes] = {"calc.py": BUGGY, **shots}
        workspace, _, _, env, options = _setup(pi, tmp_path, base_url, files, CTXOS, None, ["text", "image"])
        proc = _pi_print(pi, workspace, env, *options, *(f"@{name}" for name in shots), "What is wrong here?")
    assert "context_os is off" not in proc.stderr, proc.stderr[-2000:]
    assert model.errors == [] and len(model.requests) == 2
    assert len(json.dumps(model.requests[1]["messages"])) > 32 * 1024 * 1024
    assert "return a - b" in _tail(model.requests[1])  # assembled by context_os: its read report


def test_a_message_over_the_cap_is_sent_cut_and_context_os_stays_on(pi: PiInstall, tmp_path: Path) -> None:
    """A user message over ``max_message_chars`` (2,000,000 characters: here a 3 MB log given as
    ``@file``) was refused by ctxos (ContentTooLarge), and context_os went off for the session;
    Pi cannot send less, so the session holds it cut, with a note, and the model is sent that."""
    line = "2026-12-01T10:00:00 worker-3 INFO processed batch 1234 in 17 ms\n"
    log = line * (3_000_000 // len(line) + 1)
    with scripted_model([text("The log is fine.")]) as (model, base_url):
        workspace, _, _, env, options = _setup(pi, tmp_path, base_url, {"app.log": log}, CTXOS, None)
        proc = _pi_print(pi, workspace, env, *options, "@app.log", "Is anything wrong in this log?")
    assert "context_os is off" not in proc.stderr, proc.stderr[-2000:]
    assert model.errors == [] and len(model.requests) == 1
    sent = _joined(model.requests[0])
    # (the message is the log in Pi's file block, which names the file's path: a few hundred more)
    cut = re.search(r"\[cut by context_os: ([\d,]+) characters, a message keeps at most 2,000,000\]", sent)
    assert cut is not None and len(log) < int(cut.group(1).replace(",", "")) < len(log) + 1000
    assert len(sent) < len(log)


# --- aborts, a slow or hung ctxos, and a ctxos gone between calls ---------------------------------

SLOW_CTXOS = f"'{sys.executable}' '{Path(__file__).parent / 'slow_ctxos.py'}'"
HOLD_S = 20


def _ctxos_serving(store: Path) -> list[int]:
    """The pids of the ``ctxos serve`` processes this test's Pi started (by their unique store URL)."""
    marker = f"CTXOS_STORE=sqlite:///{store}".encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if b"serve\0--stdio" in (proc / "cmdline").read_bytes() and marker in (proc / "environ").read_bytes().split(
                b"\0"
            ):
                found.append(int(proc.name))
        except OSError:
            continue  # gone, or not ours to read
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the ctxos process through /proc")
def test_an_abort_while_ctxos_assembles_takes_effect_at_once_and_context_os_stays_on(
    pi: PiInstall, tmp_path: Path
) -> None:
    """Esc (``abort``) while ctxos takes 20 s over a call's context: the run ends at once, not
    when ctxos answers; the answer, when it comes, is dropped, and context_os stays on for the
    next call. (Before 2026-12-02 the abort waited for the answer, or for CTXOS_TIMEOUT_MS and
    then turned context_os off.)"""
    script = [tool_call("read", path="calc.py"), text("Never sent."), text("Carried on.")]
    events: list[dict[str, Any]] = []
    env = {"CTXOS_SLOW_HOLD": str(HOLD_S), "CTXOS_SLOW_WHICH": "2", "CTXOS_TIMEOUT_MS": "60000"}
    with pi_rpc(pi, tmp_path, script, files={"calc.py": BUGGY}, env=env, events=events, ctxos=SLOW_CTXOS) as (
        proc,
        model,
        _,
    ):
        rpc = Rpc(proc, events)
        rpc.send(type="prompt", message="read calc.py")
        rpc.wait_for("the read", lambda: rpc.count("tool_execution_end") == 1)
        time.sleep(1)  # the second context.transform is sent, its answer held
        rpc.send(type="abort")
        took = rpc.wait_for("the aborted run's end", lambda: rpc.count("agent_end") == 1, timeout=HOLD_S / 2)
        assert took < HOLD_S / 2 and len(model.requests) == 1
        rpc.send(type="prompt", message="carry on")
        rpc.wait_for("the next run's end", lambda: rpc.count("agent_end") == 2, timeout=HOLD_S + 40)
    assert model.errors == [] and len(model.requests) == 2
    assert not any("context_os is off" in n for n in rpc.notices()), rpc.notices()
    assert "return a - b" in _tail(model.requests[1])


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the ctxos process through /proc")
def test_an_abort_while_ctxos_hangs_takes_effect_at_once_and_the_hung_ctxos_is_killed_at_exit(
    pi: PiInstall, tmp_path: Path
) -> None:
    """ctxos hangs (stopped, as on a store lock that never comes free) before a call: Esc ends the
    run at once, not after CTXOS_TIMEOUT_MS; and when Pi quits, the ctxos that ignores its closed
    stdin and SIGTERM gets SIGKILL 2 s later, not left behind. (Before 2026-12-02 the abort waited
    the whole timeout and turned context_os off, and the stopped ctxos outlived Pi.)"""
    stopped: list[int] = []

    def stop_ctxos(n: int) -> None:
        if n == 2:  # ctxos answered the second call's context; the third finds it stopped
            stopped.extend(_ctxos_serving(tmp_path / "store.db"))
            for pid in stopped:
                stop_process(pid)

    script = [tool_call("read", path="calc.py"), tool_call("bash", command="echo hi"), text("Never sent.")]
    events: list[dict[str, Any]] = []
    env = {"CTXOS_TIMEOUT_MS": "60000"}
    try:
        with pi_rpc(pi, tmp_path, script, files={"calc.py": BUGGY}, env=env, events=events, on_request=stop_ctxos) as (
            proc,
            model,
            _,
        ):
            rpc = Rpc(proc, events)
            rpc.send(type="prompt", message="go")
            rpc.wait_for("the bash call", lambda: rpc.count("tool_execution_end") == 2)
            time.sleep(0.5)  # the third context.transform is sent to the stopped ctxos
            rpc.send(type="abort")
            took = rpc.wait_for("the aborted run's end", lambda: rpc.count("agent_end") == 1, timeout=30)
            assert took < 30 and len(model.requests) == 2
        # pi_rpc closed Pi's stdin and waited for it to exit (at most 30 s)
        assert proc.returncode is not None
        assert stopped and not any(_alive(pid) for pid in stopped), stopped
        assert not any("context_os is off" in n for n in rpc.notices()), rpc.notices()
    finally:
        for pid in stopped:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the ctxos process through /proc")
def test_sigterm_to_pi_while_ctxos_hangs_ends_pi_and_ctxos(pi: PiInstall, tmp_path: Path) -> None:
    """SIGTERM to Pi (a process manager stopping it) while ctxos hangs over a call: Pi ends its
    run at once and quits, killing ctxos (SIGTERM, then SIGKILL); before 2026-12-02 it waited for
    CTXOS_TIMEOUT_MS (here 60 s) first."""
    stopped: list[int] = []

    def stop_ctxos(n: int) -> None:
        if n == 1:
            stopped.extend(_ctxos_serving(tmp_path / "store.db"))
            for pid in stopped:
                stop_process(pid)

    events: list[dict[str, Any]] = []
    script = [tool_call("bash", command="echo hi"), text("Never sent.")]
    try:
        with pi_rpc(
            pi, tmp_path, script, files={}, env={"CTXOS_TIMEOUT_MS": "60000"}, events=events, on_request=stop_ctxos
        ) as (
            proc,
            model,
            _,
        ):
            rpc = Rpc(proc, events)
            rpc.send(type="prompt", message="go")
            rpc.wait_for("the bash call", lambda: rpc.count("tool_execution_end") == 1)
            time.sleep(0.5)  # the second context.transform is sent to the stopped ctxos
            proc.send_signal(signal.SIGTERM)
            start = time.monotonic()
            proc.wait(timeout=30)
            assert time.monotonic() - start < 30 and proc.returncode == 143
            assert len(model.requests) == 1
        assert stopped and not any(_alive(pid) for pid in stopped), stopped
    finally:
        for pid in stopped:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_timeout_past_what_node_can_wait_is_capped_and_said(pi: PiInstall, tmp_path: Path) -> None:
    """CTXOS_TIMEOUT_MS over 2^31-1 made Node's timer fire at once: every call timed out and
    context_os went off (before 2026-12-02); it is now capped there, and said."""
    script = [tool_call("read", path="calc.py"), text("Read.")]
    run = run_pi(pi, tmp_path, PROMPT, script, files={"calc.py": BUGGY}, env={"CTXOS_TIMEOUT_MS": "99999999999"})
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    assert "context_os is off" not in run.proc.stderr, run.proc.stderr
    assert "CTXOS_TIMEOUT_MS='99999999999' is over 2147483647 ms" in run.proc.stderr, run.proc.stderr
    assert len(run.requests) == 2 and "return a - b" in _tail(run.requests[1])


def test_a_lone_surrogate_in_a_message_does_not_turn_context_os_off(pi: PiInstall, tmp_path: Path) -> None:
    """A prompt holding half of a surrogate pair (a cut emoji) cannot be UTF-8: ctxos refused the
    whole request and context_os went off for the session (before 2026-12-02). It goes as U+FFFD."""
    script = [tool_call("read", path="calc.py"), text("Read.")]
    events: list[dict[str, Any]] = []
    with pi_rpc(pi, tmp_path, script, files={"calc.py": BUGGY}, events=events) as (proc, model, _):
        rpc = Rpc(proc, events)
        rpc.send(type="prompt", message="read calc.py \ud83d please")
        rpc.wait_for("the run's end", lambda: rpc.count("agent_end") == 1)
    assert model.errors == [] and len(model.requests) == 2
    assert not any("context_os is off" in n for n in rpc.notices()), rpc.notices()
    assert "return a - b" in _tail(model.requests[1])
    assert "read calc.py \ufffd please" in _joined(model.requests[1])


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the ctxos process through /proc")
def test_ctxos_killed_while_pi_is_idle_turns_context_os_off_at_once(pi: PiInstall, tmp_path: Path) -> None:
    """ctxos killed between runs: context_os goes off then, naming the signal, so the next call
    is not offered tools only ctxos could answer. (Before 2026-12-02 it went off at that call's
    context, after its tools were settled, and the reason was ctxos's last log line.)"""
    script = [tool_call("read", path="calc.py"), text("Read."), text("Again.")]
    events: list[dict[str, Any]] = []
    with pi_rpc(pi, tmp_path, script, files={"calc.py": BUGGY}, events=events) as (proc, model, store):
        rpc = Rpc(proc, events)
        rpc.send(type="prompt", message="read calc.py")
        rpc.wait_for("the first run's end", lambda: rpc.count("agent_end") == 1)
        assert _kill_ctxos_serving(store) == 1
        rpc.wait_for("context_os off", lambda: any("context_os is off" in n for n in rpc.notices()), timeout=10)
        rpc.send(type="prompt", message="again")
        rpc.wait_for("the second run's end", lambda: rpc.count("agent_end") == 2)
    assert rpc.notices() == ["context_os is off: ctxos was killed by SIGKILL. Pi carries on with its own context."]
    assert model.errors == [] and len(model.requests) == 3
    assert "activate" in _tool_names(model.requests[1])
    assert "activate" not in _tool_names(model.requests[2])
    assert TAIL_OPEN not in _joined(model.requests[2])
    assert _tool_output(model.requests[2], "call_1").startswith(BUGGY.rstrip("\n"))
