"""End-to-end: every ``ctxos`` command against a real XTDB node, by ``--store`` and by ``CTXOS_STORE``.

The node is shared by the whole run, so the session id is unique per run and assertions about
the whole store (``status``, ``verify``) look only at what this module wrote.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from context_os.store import Put
from context_os.store.outbox import OutboxStore
from context_os.store.xtdb import XtdbStore
from context_os.times import display as tx_iso

pytestmark = pytest.mark.e2e

CTXOS = [str(Path(sys.executable).parent / "ctxos")]


def ctxos(
    *args: str, store: str | None = None, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    cmd = [*CTXOS, *(["--store", store] if store else []), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=500)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def demo(xtdb_url: str) -> tuple[str, str, dict[str, Any]]:
    """The bundled demo session recorded into XTDB: (store url, session id, demo summary).

    Recorded without the demo's own final verification: ``verify --frames`` below re-renders
    every frame the same way, and on XTDB that is the slow part (a find per frame and object).
    """
    sid = f"cli-{uuid.uuid4().hex[:10]}"
    out = json.loads(ctxos("demo", "--json", "--no-verify", "--session", sid, store=xtdb_url).stdout)
    return xtdb_url, sid, out


@pytest.mark.xtdb
def test_demo_on_xtdb_renders_what_sqlite_renders(demo: tuple[str, str, dict[str, Any]], tmp_path: Path) -> None:
    url, sid, out = demo
    assert out["store"] == url and out["session"] == sid
    assert out["turns"] == 88 == out["frames"] and out["orphaned_tool_results"] == 0
    assert out["tokens_assembled"] <= 0.40 * out["tokens_full"]
    # the same session on the embedded store: the same bytes every turn (rendering is a pure
    # function of the stored state, so both stores must hold the same state)
    db = str(tmp_path / "same.db")
    sqlite = json.loads(ctxos("demo", "--json", "--no-verify", "--session", sid, store=db).stdout)
    assert sqlite["per_turn"] == out["per_turn"]
    on_xtdb = json.loads(ctxos("frames", "list", sid, "--json", store=url).stdout)
    on_sqlite = json.loads(ctxos("frames", "list", sid, "--json", store=db).stdout)
    assert [r["rendered_hash"] for r in on_xtdb] == [r["rendered_hash"] for r in on_sqlite]
    assert [r["turn"] for r in on_xtdb] == list(range(1, 89))


@pytest.mark.xtdb
def test_frames_show_verify_and_objects_inspect(demo: tuple[str, str, dict[str, Any]]) -> None:
    url, sid, _ = demo
    frame = json.loads(ctxos("frames", "show", sid, "40", "--json", store=url).stdout)
    assert frame["ok"] and frame["problems"] == [] and frame["messages"][0]["role"] == "system"
    assert "verified" in ctxos("frames", "show", sid, "40", "--no-messages", store=url).stdout
    one = json.loads(ctxos("frames", "verify", sid, "40", "--json", store=url).stdout)
    assert one["ok"] and one["frames_checked"] == 1 and one["frames"][0]["rendered_hash"] == frame["rendered_hash"]
    versions = json.loads(ctxos("objects", "inspect", f"chat:{sid}:00000", "--json", store=url).stdout)
    assert len(versions) >= 2 and all(v["content_hash"].startswith("b3:") for v in versions)
    tx_ids = [v["tx_id"] for v in versions]
    assert tx_ids == sorted(tx_ids) and min(tx_ids) >= 0
    first = json.loads(
        ctxos(
            "objects", "inspect", f"session:{sid}", "--as-of", str(versions[0]["valid_time_ms"]), "--json", store=url
        ).stdout
    )
    assert first["object_hash"].startswith("b3:")
    early = json.loads(ctxos("frames", "show", sid, "10", "--json", store=url).stdout)
    tool = next(r for r in early["refs"] if r["id"].startswith("toolcall:"))
    changes = json.loads(ctxos("objects", "inspect", tool["id"], "--states", "--json", store=url).stdout)
    assert changes[-1]["actor"] == "policy" and changes[-1]["state"] == "inactive"
    diff = json.loads(ctxos("objects", "inspect", f"session:{sid}", "--diff", "1", "2", "--json", store=url).stdout)
    assert diff["diff"] == ""


@pytest.mark.xtdb
def test_verify_frames(demo: tuple[str, str, dict[str, Any]]) -> None:
    url, sid, _ = demo
    # the shared node also holds other tests' documents (some deliberately without hashes),
    # so the exit code speaks for all of them: judge this session's part
    proc = ctxos("verify", "--frames", "--json", store=url, check=False)
    assert proc.returncode in (0, 1) and proc.stdout.startswith("{"), proc.stderr
    report = json.loads(proc.stdout)
    assert [m for m in report["mismatches"] if sid in m["id"]] == []
    assert [f for f in report["frames_failed"] if sid in f["id"]] == []
    assert report["frames_verified"] >= 88


@pytest.mark.xtdb
def test_status_and_sessions(demo: tuple[str, str, dict[str, Any]]) -> None:
    url, sid, _ = demo
    status = json.loads(ctxos("status", "--json", store=url).stdout)
    assert status["store"] == url and status["backend"] == "xtdb" and status["reachable"] is True
    assert status["by_kind"]["frame"] >= 88 and "outbox" not in status["by_kind"]
    assert status["outbox"]["pending"] == 0
    assert status["xtdb.version/version"].startswith("1.")
    sessions = json.loads(ctxos("sessions", "list", "--json", store=url).stdout)
    assert {"session": sid, "harness": "openai", "turns": 88}.items() <= next(
        s for s in sessions if s["session"] == sid
    ).items()


@pytest.mark.xtdb
def test_a_password_in_the_store_url_is_sent_not_shown(demo: tuple[str, str, dict[str, Any]]) -> None:
    url, sid, _ = demo
    with_password = url.replace("://", "://bob:hunter2@", 1)  # the node takes any basic auth
    shown = url.replace("://", "://bob:***@", 1)
    proc = ctxos("status", store=with_password)
    assert "hunter2" not in proc.stdout + proc.stderr and shown in proc.stdout
    status = json.loads(ctxos("status", "--json", store=with_password).stdout)
    assert status["store"] == shown == status["url"] and status["reachable"] is True
    assert len(json.loads(ctxos("frames", "list", sid, "--json", store=with_password).stdout)) == 88


@pytest.mark.xtdb
def test_verify_says_xtdb_has_no_integrity_check_to_run(demo: tuple[str, str, dict[str, Any]]) -> None:
    url, sid, _ = demo
    proc = ctxos("verify", "--json", store=url, check=False)
    assert proc.returncode in (0, 1), proc.stderr  # the shared node holds other tests' documents
    report = json.loads(proc.stdout)
    # (another test's document, another client's, can be past what this store reads: damaged)
    assert report["integrity"] is None and [d for d in report["damaged"] if sid in d["id"]] == []
    assert "the backend has none that can be run from here" in ctxos("verify", store=url, check=False).stdout


@pytest.mark.xtdb
def test_a_document_another_client_nested_too_deeply_is_named_and_every_other_is_verified(
    demo: tuple[str, str, dict[str, Any]],
) -> None:
    """A document no store of ours can read (another client's, nested past what Python walks)
    failed the whole ``ctxos verify`` (a StoreError that was not damage it detects: its JSON an
    error, no report): one CI run's crash test read the shared node after another test wrote one.
    It is named as damaged, and the rest is checked."""
    import httpx

    url, sid, _ = demo
    base = url.replace("xtdb+", "", 1).split("?")[0]
    deep_id = f"deep-other:{uuid.uuid4().hex[:8]}"
    deep = "[" * 3_000 + "1" + "]" * 3_000

    def submitted(op: str) -> None:  # in EDN, as another client writes
        r = httpx.post(
            f"{base}/_xtdb/submit-tx",
            content=f"{{:tx-ops [{op}]}}".encode(),
            headers={"Content-Type": "application/edn", "Accept": "application/edn"},
            timeout=30,
        )
        assert r.status_code == 202, r.text
        tx = re.search(r":xtdb.api/tx-id (\d+)", r.text)
        assert tx is not None
        httpx.get(f"{base}/_xtdb/await-tx", params={"tx-id": tx[1]}, timeout=60).raise_for_status()

    submitted(f'[:xtdb.api/put {{:xt/id "{deep_id}" :kind "deep-other" :v {deep}}}]')
    try:
        proc = ctxos("verify", "--json", store=url, check=False)
        assert proc.returncode == 1 and proc.stdout.startswith("{"), proc.stderr
        report = json.loads(proc.stdout)
        [named] = [d for d in report["damaged"] if d["id"] == deep_id]
        assert "nested too deeply" in named["error"]
        assert report["documents"] > 88 and [m for m in report["mismatches"] if sid in m["id"]] == []
    finally:
        # the node is the whole run's: tests that read every document of it (tests/context/
        # test_evict.py) met this one and failed, when they ran after this file on its node
        submitted(f'[:xtdb.api/evict "{deep_id}"]')


@pytest.mark.xtdb
def test_a_password_in_the_store_url_is_not_printed_in_the_closing_hints(xtdb_url: str, tmp_path: Path) -> None:
    """``--store xtdb+http://user:pass@host``: the hints after a replay spelled the URL out,
    password and all, which ``status``, reports and errors mask."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    (tmp_path / "m.json").write_text(json.dumps(messages))
    url = xtdb_url.replace("xtdb+http://", "xtdb+http://bob:hunter2@", 1)
    sid = f"pw-{uuid.uuid4().hex[:10]}"
    proc = ctxos("replay", str(tmp_path / "m.json"), "--session", sid, store=url)
    (hint,) = [line for line in proc.stdout.splitlines() if line.startswith("see it turn by turn: ")]
    assert "hunter2" not in proc.stdout + proc.stderr and "bob:***@" in hint, hint


@pytest.mark.xtdb
def test_ctxos_store_environment_variable(demo: tuple[str, str, dict[str, Any]]) -> None:
    url, sid, _ = demo
    env = {"CTXOS_STORE": url}
    status = json.loads(ctxos("status", "--json", env=env).stdout)
    assert status["store"] == url and status["backend"] == "xtdb"
    rows = json.loads(ctxos("frames", "list", sid, "--json", env=env).stdout)
    assert len(rows) == 88
    frame = json.loads(ctxos("frames", "show", sid, "88", "--json", "--no-messages", env=env).stdout)
    assert frame["ok"]
    # --store wins over the environment
    assert (
        json.loads(ctxos("status", "--json", store=url, env={"CTXOS_STORE": "/nonexistent/x.db"}).stdout)["store"]
        == url
    )


def test_status_of_a_node_out_of_reach_shows_the_outbox(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"xtdb+http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once closed
    box = tmp_path / "outbox.db"
    inner = XtdbStore(url)
    inner.BACKOFF_S = 0.01
    with OutboxStore(inner, box) as store:
        tx = store.submit([Put({"id": "note:1", "kind": "note"})])
        assert tx.pending
    proc = ctxos("status", "--json", store=f"{url}?outbox={box}", check=False)
    assert proc.returncode == 1
    status = json.loads(proc.stdout)
    assert status["reachable"] is False and "cannot be reached" in status["error"]
    assert status["documents"] is status["sessions"] is status["by_kind"] is None  # not known, not 0
    assert status["outbox"] == {"path": str(box), "pending": 1, "oldest_accepted": tx.time, "blocked_by": None}
    text = ctxos("status", store=f"{url}?outbox={box}", check=False).stdout
    rows = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in text.splitlines() if "  " in line}
    assert rows["outbox.waiting since"].startswith(tx_iso(tx.time)) and "outbox.oldest accepted" not in rows


@pytest.mark.xtdb
def test_status_shows_the_size_of_a_nodes_index_in_mib(tmp_path: Path, xtdb_url: str) -> None:
    """A RocksDB node says the size of its index store (``xtdb.kv/size``) in bytes: shown as the
    other sizes are. ``xtdb_url`` is requested only so the test is skipped where no node can be had."""
    from tests._xtdb_node import START, STARTUP_TIMEOUT_S, STOP, _free_port

    port = _free_port()
    cmd = [str(START), "--port", str(port), "--config", "rocksdb", "--data-dir", str(tmp_path / "data")]
    started = subprocess.run(
        [*cmd, "--timeout", str(STARTUP_TIMEOUT_S)], capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S + 60
    )
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        url = started.stdout.strip().splitlines()[-1] + "?outbox=off"
        size = json.loads(ctxos("status", "--json", store=url).stdout)["xtdb.kv/size"]
        assert isinstance(size, int) and size > 0
        text = ctxos("status", store=url).stdout
        row = next(line for line in text.splitlines() if line.startswith("xtdb.kv/size"))
        # the index may have grown between the two calls: the form is what is checked
        assert re.fullmatch(r"[\d,]+ \(\d+\.\d MiB\)", row.split("  ", 1)[1].strip()), row
    finally:
        subprocess.run([str(STOP), "--port", str(port)], check=False, timeout=90, capture_output=True)


def test_status_of_a_url_where_a_web_server_answers_names_it_in_one_line(tmp_path: Path) -> None:
    import http.server
    import threading

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        url = f"xtdb+http://127.0.0.1:{web.server_address[1]}?outbox=off"
        proc = ctxos("status", "--json", store=url, check=False)
        text = ctxos("status", store=url, check=False)
    finally:
        web.shutdown()
        web.server_close()
    assert proc.returncode == text.returncode == 1 and "Traceback" not in proc.stderr + text.stderr
    status = json.loads(proc.stdout)
    assert status["reachable"] is True and status["answers_as_a_store"] is False
    assert "not an XTDB node's answer (text/html" in status["error"] and "<" not in status["error"]
    assert "answers as a store  no" in text.stdout


@pytest.mark.xtdb
def test_a_replay_whose_node_goes_away_names_the_append_that_goes_on(xtdb_url: str, monkeypatch) -> None:
    """The node lost after the 4th model call: the replay fails with the store's error, saying
    where it stopped and the ``--append`` run that goes on once the node answers; that run, on
    the node, replays the rest."""
    from click.testing import CliRunner

    from context_os.cli import cli
    from context_os.harness.virtual_files import VirtualFiles
    from tests._xtdb_node import CuttableProxy

    traj = Path(__file__).parents[2] / "bench/sessions/check/swe-agent/pydantic__pydantic.acb0f10f.pr_8316.traj"
    sid = f"gone-{uuid.uuid4().hex[:10]}"
    proxy = CuttableProxy(xtdb_url)
    observe, seen = VirtualFiles.observe, []

    def node_lost_at_call_4(self: VirtualFiles, session: Any, report: Any) -> None:
        seen.append(1)
        if len(seen) == 4:
            proxy.cut()
        observe(self, session, report)

    monkeypatch.setattr(VirtualFiles, "observe", node_lost_at_call_4)
    via = f"xtdb+http://127.0.0.1:{proxy.port}?outbox=off"
    try:
        cut = CliRunner().invoke(cli, ["--store", via, "replay", str(traj), "--session", sid, "--verify", "none"])
    finally:
        proxy.cut()
    assert cut.exit_code == 1, cut.output
    (error,) = [line for line in cut.output.splitlines() if line.startswith("Error: ")]
    assert re.match(r"Error: Store(Unavailable|Unreachable): XTDB node at http://127\.0\.0\.1:", error), error
    assert f"; the replay of session '{sid}' stopped after 3 model call(s): once the store answers, `" in error
    assert error.endswith(f" --store '{via}' replay {traj} --session {sid} --append` goes on from what it holds")
    monkeypatch.setattr(VirtualFiles, "observe", observe)
    # in this process, as the lease the cut replay could not give back is this process's
    again = CliRunner().invoke(cli, ["--store", xtdb_url, "replay", str(traj), "--session", sid, "--append", "--json"])
    assert again.exit_code == 0, again.output
    rest = json.loads(again.stdout)
    assert rest["frames"] == rest["frames_verified"] > rest["turns"] > 0


_HUNG_AT_CALL_4 = """
import sys
from context_os.cli import cli
from context_os.harness.virtual_files import VirtualFiles
from context_os.store.xtdb import XtdbStore
XtdbStore.__init__.__kwdefaults__["timeout"] = 3600.0  # a node that hangs holds each request this long
observe, seen = VirtualFiles.observe, []
def hung_at_call_4(self, session, report):
    seen.append(1)
    if len(seen) == 4:
        print("call 4", flush=True)
        sys.stdin.readline()  # the node hangs from here on
    observe(self, session, report)
VirtualFiles.observe = hung_at_call_4
cli(sys.argv[1:])
"""


@pytest.mark.xtdb
def test_ctrl_c_ends_a_replay_on_a_node_that_hangs_without_waiting_it_out(xtdb_url: str, tmp_path: Path) -> None:
    """Ctrl-C while a replayed model call waits on a node that hangs: the replay held the signal
    until the call was whole (the store's timeout, 30 s by default; here an hour), then waited 5 s
    for the lease's give-back and 10 s for the node to index what it wrote as it closed. It cuts
    the call after a short grace now, and waits on the node no more: exit 130 and the
    ``--append`` run named, which then makes every call not acknowledged, none lost."""
    import signal

    from tests._xtdb_node import CuttableProxy

    traj = Path(__file__).parents[2] / "bench/sessions/check/swe-agent/pydantic__pydantic.acb0f10f.pr_8316.traj"
    sid = f"hung-{uuid.uuid4().hex[:10]}"
    proxy = CuttableProxy(xtdb_url)
    args = [sys.executable, "-c", _HUNG_AT_CALL_4, "--store", proxy.url, "replay", str(traj), "--session", sid]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    with subprocess.Popen([*args, "--verify", "none"], env=env, text=True, **pipes) as child:
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline().strip() == "call 4"
            proxy.stall()
            child.stdin.write("go\n")
            child.stdin.flush()
            assert proxy.stalled.wait(120), "the replay asked the node nothing more"
            child.send_signal(signal.SIGINT)
            _, err = child.communicate(timeout=120)  # (a guard: before, it waited the hour out)
        finally:
            child.kill()
            proxy.cut()
    assert child.returncode == 130, err
    assert "the model call under way was not whole 2 s after the signal" in err, err
    assert f"--session {sid} --append` goes on from there" in err and "Traceback" not in err, err
    rest = json.loads(ctxos("replay", str(traj), "--session", sid, "--append", "--json", store=xtdb_url).stdout)
    whole = json.loads(ctxos("replay", str(traj), "--verify", "none", "--json", store=str(tmp_path / "w.db")).stdout)
    assert rest["frames"] == rest["frames_verified"] == whole["turns"] > rest["turns"] >= whole["turns"] - 4


def test_status_of_a_url_that_is_no_store_still_names_the_backend_and_the_outbox(tmp_path: Path) -> None:
    """A web server where the node should be, through the default outbox: the report says what
    the URL is meant to be (an XTDB node) and what waits for it, as for a node out of reach."""
    import http.server
    import threading

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        url = f"xtdb+http://127.0.0.1:{web.server_address[1]}"
        proc = ctxos("status", "--json", store=url, env={"XDG_DATA_HOME": str(tmp_path)}, check=False)
    finally:
        web.shutdown()
        web.server_close()
    assert proc.returncode == 1
    status = json.loads(proc.stdout)
    assert status["backend"] == "xtdb" and status["reachable"] is True and status["answers_as_a_store"] is False
    assert status["error"].startswith("StoreError: ") and "not an XTDB node's answer" in status["error"]
    assert status["outbox"]["pending"] == 0 and status["outbox"]["path"].startswith(str(tmp_path))


def _node_lost_at_frame(n: int, url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A ``CuttableProxy`` to the node at ``url`` that is cut while the ``n``-th frame is checked
    (in this process: checks run with ``--jobs 1``)."""
    import context_os.context.frames as frames_module
    from tests._xtdb_node import CuttableProxy

    proxy = CuttableProxy(url)
    verify, seen = frames_module.verify_frame, []

    def node_lost(*args: Any, **kwargs: Any) -> Any:
        seen.append(1)
        if len(seen) == n:
            proxy.cut()
        return verify(*args, **kwargs)

    monkeypatch.setattr(frames_module, "verify_frame", node_lost)
    return proxy


def _found_damage(stdout: str, as_json: bool) -> bool:
    """Whether a ``verify`` report says it found damage (mismatches, unreadable versions, the
    integrity check's problems, frames that failed)."""
    if as_json:
        r = json.loads(stdout)
        return bool(r["mismatches"] or r["damaged"] or r["integrity"] or r.get("frames_failed"))
    counts = re.search(r"([\d,]+) mismatch\(es\), ([\d,]+) unreadable", stdout)
    failed = re.search(r"frames: [\d,]+ verified, ([\d,]+) failed", stdout)
    problems = re.search(r"integrity check: ([\d,]+) problem", stdout)
    numbers = [*(counts.groups() if counts else ()), *(failed.groups() if failed else ())]
    return any(n != "0" for n in numbers) or problems is not None


@pytest.mark.xtdb
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
@pytest.mark.parametrize("command", ["frames verify", "verify --frames"])
def test_a_check_the_node_left_reports_what_it_checked_and_exits_3(
    demo: tuple[str, str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, command: str, as_json: bool
) -> None:
    """The node lost in the middle of a frame check: the check reported none of the frames it
    had checked (only the store's error), and exited 1, as it does for damage. Now it reports
    them, and how many it did not check, and exits 3; its JSON is the report with the error a
    failed command's JSON has."""
    from click.testing import CliRunner

    from context_os.cli import cli

    url, sid, _ = demo
    proxy = _node_lost_at_frame(4, url, monkeypatch)
    args = command.split() + ([sid] if command == "frames verify" else [])
    try:
        run = CliRunner().invoke(
            cli, ["--store", f"{proxy.url}?outbox=off", *args, "--jobs", "1", *(["--json"] if as_json else [])]
        )
    finally:
        proxy.cut()
    # (verify --frames checks the whole shared node, where other tests leave damage on purpose:
    # damage found before the outage keeps the exit status 1 of damage)
    damage_first = command != "frames verify" and _found_damage(run.stdout, as_json)
    assert run.exit_code == (1 if damage_first else 3), run.output
    assert re.match(r"Error: Store(Unavailable|Unreachable): ", run.stderr), run.stderr
    if not as_json:
        if command == "frames verify":
            assert f"session {sid}: 3 of 3 frame(s) verified" in run.stdout
            assert "85 of 88 frame(s) not checked: the store is out of reach" in run.stdout
        else:
            # (the node is shared: other tests' frames, some that showed what they evicted, are checked too)
            counts = re.search(r"frames: (\d+) verified, (\d+) failed(?:, (\d+) showed)?", run.stdout)
            assert counts and sum(int(n or 0) for n in counts.groups()) == 3, run.stdout
            assert re.search(r"cut short: the store is out of reach; none of the documents and [\d,]+ of", run.stdout)
        return
    report = json.loads(run.stdout)
    assert report["ok"] is False and report["error"]["exit_status"] == run.exit_code
    assert report["error"]["type"] in ("StoreUnavailable", "StoreUnreachable")
    if command == "frames verify":
        assert (report["frames_checked"], report["frames_verified"], report["frames_unchecked"]) == (3, 3, 85)
        assert [f["turn"] for f in report["frames"]] == [1, 2, 3]
    else:
        checked = report["frames_verified"] + len(report["frames_failed"]) + len(report["frames_evicted"])
        assert checked == 3 and report["frames_unchecked"] >= 85
        assert report["documents_unchecked"] == 0


def test_a_check_of_a_store_out_of_reach_exits_3_not_the_1_of_damage() -> None:
    """A check that could not start (the node down) exited 1, as one that found damage does."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"xtdb+http://127.0.0.1:{s.getsockname()[1]}?outbox=off"
    for args in (["frames", "verify", "s1"], ["verify", "--frames"], ["frames", "show", "s1", "1"]):
        proc = ctxos(*args, "--json", store=url, check=False)
        assert proc.returncode == 3, (args, proc.returncode, proc.stderr)
        error = json.loads(proc.stdout)["error"]
        assert error["type"] == "StoreUnreachable" and error["exit_status"] == 3, error
    # other commands keep the exit status 1 of any error
    assert ctxos("frames", "list", "s1", store=url, check=False).returncode == 1


@pytest.mark.xtdb
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_damage_found_before_the_node_left_keeps_the_exit_status_of_damage(
    xtdb_url: str, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    """A frame check that found damaged frames, then lost the node, exited 3, the status of an
    outage that says nothing is damaged: a script reading the status missed the damage."""
    from click.testing import CliRunner

    from context_os import Session
    from context_os.cli import cli
    from context_os.harness.openai import OpenAIHook
    from context_os.store import Evict, open_store

    sid = f"dmg-{uuid.uuid4().hex[:10]}"
    store = open_store(xtdb_url)
    try:
        with Session.open(store, sid, harness="openai") as session:
            hook, msgs = OpenAIHook(session), []
            for n in range(6):
                msgs += [{"role": "user", "content": f"question {n}"}]
                hook.transform_context(msgs)
                msgs += [{"role": "assistant", "content": f"answer {n}"}]
        store.submit([Evict(f"chat:{sid}:00000")])  # erased behind the store's back: no tombstone
        store.sync()
    finally:
        store.close()
    proxy = _node_lost_at_frame(4, xtdb_url, monkeypatch)
    try:
        run = CliRunner().invoke(
            cli,
            [
                "--store",
                f"{proxy.url}?outbox=off",
                "frames",
                "verify",
                sid,
                "--jobs",
                "1",
                *(["--json"] if as_json else []),
            ],
        )
    finally:
        proxy.cut()
    assert run.exit_code == 1, run.output
    if as_json:
        report = json.loads(run.stdout)
        assert (report["frames_checked"], report["frames_verified"], report["frames_unchecked"]) == (3, 0, 3)
        assert report["error"]["exit_status"] == 1 and report["error"]["type"] in (
            "StoreUnavailable",
            "StoreUnreachable",
        )
    else:
        assert f"session {sid}: 0 of 3 frame(s) verified" in run.stdout
        assert "3 of 6 frame(s) not checked: the store is out of reach" in run.stdout
