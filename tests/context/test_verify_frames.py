"""``verify_frames``: many frames checked in worker processes give the verdicts one process gives.

The workers open the store through ``Store.reader`` (a new interpreter each, never a fork) and
re-render their share of the frames; a verified frame, one that showed what was evicted since,
and one whose store was damaged must each come back as they do when this process checks them.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from context_os import Session
from context_os.context import frames as frames_module
from context_os.context import view as view_module
from context_os.context.evict import evict
from context_os.context.frames import FrameCheck, frame_docs, verify_frame, verify_frames
from context_os.context.policy import RetentionPolicy
from context_os.errors import StoreUnavailable
from context_os.harness import OpenAIHook
from context_os.store.sqlite import SqliteStore
from context_os.store.xtdb import XtdbStore
from tests._xtdb_node import CuttableProxy
from tests.helpers import EAGER, call, result, user


def _verdicts(checks: list[FrameCheck]) -> list[tuple[object, ...]]:
    return [(c.frame_id, c.ok, c.recorded_hash, c.rendered_hash, c.problems, c.evicted) for c in checks]


def _record(db: Path) -> None:
    """A session of 24 model calls; one tool output evicted after it was shown."""
    with SqliteStore(db) as store:
        hook = OpenAIHook(Session.open(store, "v", harness="openai", policy=RetentionPolicy(**EAGER)))
        msgs = [{"role": "system", "content": "You are a coding agent."}, user("fix the bug")]
        for n in range(24):
            msgs += [call(f"c{n}", command=f"cat f{n}.py"), result(f"c{n}", f"# f{n}\n" + f"line {n}\n" * 300)]
            hook.transform_context(msgs)
        hook.session.close()
        evict(store, "toolcall:v:c3", reason="a leaked key")


def test_workers_give_the_verdicts_of_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _record(db)
    # a damaged copy: the stored text of outputs changed behind the store's back (c1's among them,
    # shown by frames that show nothing evicted since, so their failure is damage)
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(db.read_bytes())
    wal = db.with_name(db.name + "-wal")
    if wal.exists():
        damaged.with_name(damaged.name + "-wal").write_bytes(wal.read_bytes())
    with closing(sqlite3.connect(damaged)) as conn, conn:  # `with conn` alone commits, never closes
        changed = conn.execute("UPDATE docs SET json = replace(json, '# f1', '# F1')").rowcount
    assert changed
    monkeypatch.setattr(frames_module, "PARALLEL_FROM", 1)  # 24 frames are enough to go to workers
    for path in (db, damaged):
        with SqliteStore(path) as store:
            docs = frame_docs(store, "v")
            here = list(verify_frames(store, docs, jobs=1))
            there = list(verify_frames(store, docs, jobs=2))
        assert len(here) == len(docs) == 24
        assert _verdicts(there) == _verdicts(here)
        assert all(c.rendered is not None for c in here)
        assert all(c.rendered is None and c.view is None for c in there)  # they came from the workers
        assert any(c.ok for c in here) and any(c.evicted for c in here)
        if path == damaged:
            assert any(not c.ok and not c.evicted for c in here)
        else:
            assert all(c.ok or c.evicted for c in here)


def _out_of_reach() -> SqliteStore:
    raise StoreUnavailable("the store went out of reach")


def test_a_store_a_worker_cannot_open_fails_the_check_as_it_failed_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that cannot open the store (a node gone out of reach) raises what it raised,
    which the commands say in one line; not a broken pool (a traceback)."""
    db = tmp_path / "s.db"
    _record(db)
    monkeypatch.setattr(frames_module, "PARALLEL_FROM", 1)
    monkeypatch.setattr(SqliteStore, "reader", lambda self: _out_of_reach)
    with SqliteStore(db) as store, pytest.raises(StoreUnavailable, match="out of reach"):
        list(verify_frames(store, frame_docs(store, "v"), jobs=2))


def test_a_store_no_other_process_can_open_is_checked_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store whose ``reader`` is None (one that lives in this process alone) is not given to
    workers: its frames are checked in this process, whatever ``jobs`` says."""
    db = tmp_path / "s.db"
    _record(db)
    monkeypatch.setattr(frames_module, "PARALLEL_FROM", 1)
    monkeypatch.setattr(SqliteStore, "reader", lambda self: None)
    with SqliteStore(db) as store:
        checks = list(verify_frames(store, frame_docs(store, "v"), jobs=4))
    assert len(checks) == 24 and all(c.rendered is not None for c in checks if c.ok)


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="no signal masks here")
def test_a_signal_handled_as_ctrl_c_is_blocked_leaves_the_mask_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python runs the handlers of the signals pending when a mask is set, in that call: one that
    raises there (Ctrl-C as the workers were started) raised before the check's ``try``, and
    SIGINT stayed blocked in this thread for good, and in every process it started after."""
    db = tmp_path / "s.db"
    _record(db)
    monkeypatch.setattr(frames_module, "PARALLEL_FROM", 1)
    real, raised = signal.pthread_sigmask, []

    def pending_ctrl_c(how: int, mask: object) -> set[signal.Signals]:
        previous = real(how, mask)  # type: ignore[arg-type]
        here = sys._getframe(1).f_globals["__name__"] == frames_module.__name__  # (not the resource tracker's)
        if here and signal.SIGINT in real(signal.SIG_BLOCK, ()) and signal.SIGINT not in previous and not raised:
            raised.append(1)
            raise KeyboardInterrupt  # as a handler run there raises: after the change
        return previous

    before = real(signal.SIG_BLOCK, ())
    monkeypatch.setattr(signal, "pthread_sigmask", pending_ctrl_c)
    with SqliteStore(db) as store, pytest.raises(KeyboardInterrupt):
        list(verify_frames(store, frame_docs(store, "v"), jobs=2))
    assert raised and real(signal.SIG_BLOCK, ()) == before


_SPAWNS = """
import json, os, signal, sys
from multiprocessing import util
from pathlib import Path
from context_os.context import frames
from context_os.store.sqlite import SqliteStore
spawnv, spawned = util.spawnv_passfds, []
def recorded(path, args, passfds):
    tracker = any(b"resource_tracker" in os.fsencode(arg) for arg in args)
    spawned.append(("tracker" if tracker else "worker", signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, ())))
    return spawnv(path, args, passfds)
util.spawnv_passfds = recorded
frames.PARALLEL_FROM = 1
with SqliteStore(Path(sys.argv[1])) as store:
    assert len(list(frames.verify_frames(store, frames.frame_docs(store, "v"), jobs=2))) == 24
print(json.dumps({"spawned": spawned, "blocked": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, ()))}))
"""


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="no signal masks here")
def test_every_worker_starts_with_ctrl_c_blocked_in_a_process_that_started_none_before(tmp_path: Path) -> None:
    """multiprocessing's resource tracker unblocks SIGINT and SIGTERM once it runs, whatever they
    were: started by a worker's spawn, the workers after it would start with Ctrl-C unblocked (one
    meanwhile prints its traceback). The pool's locks start it, before the workers. In a process
    of its own: the tracker is started once per process."""
    db = tmp_path / "s.db"
    _record(db)
    src = str(Path(frames_module.__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", _SPAWNS, str(db)], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    said = json.loads(run.stdout)
    assert said["spawned"] == [["tracker", True], ["worker", True], ["worker", True]]
    assert said["blocked"] == []  # and the mask as it was once done


_KILLED_PARENT = """
import multiprocessing, os, signal, sys
from pathlib import Path
from context_os.context import frames
from context_os.store.sqlite import SqliteStore
frames.PARALLEL_FROM = 1
store = SqliteStore(Path(sys.argv[1]))
checks = frames.verify_frames(store, frames.frame_docs(store, "v"), jobs=2)
next(checks)
print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has exited


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_the_workers_exit_when_the_process_that_started_them_dies(tmp_path: Path) -> None:
    """A parent killed (SIGKILL, or SIGTERM where nothing catches it) runs no clean-up: its
    workers must not stay behind, holding the store open and the terminal's output."""
    db = tmp_path / "s.db"
    _record(db)
    src = str(Path(frames_module.__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    # (its output is read up to the line it prints, not to its end: workers left would hold it open)
    with subprocess.Popen([sys.executable, "-c", _KILLED_PARENT, str(db)], env=env, stdout=subprocess.PIPE) as child:
        assert child.stdout is not None
        workers = [int(p) for p in child.stdout.readline().split()]
        assert child.wait(timeout=120) == -signal.SIGKILL
    assert len(workers) == 2
    deadline = time.monotonic() + 15
    while any(map(_running, workers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in workers if _running(pid)]
    for pid in left:  # (not to leave them running when it fails)
        os.kill(pid, signal.SIGKILL)
    assert not left, "the workers outlived the process that started them"


def test_a_result_evicted_behind_the_horizon_explains_no_frame_that_did_not_show_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame whose history horizon had passed a tool result showed one note for it, made of the
    chat entries alone: that result evicted since changes nothing it renders, so a frame of those
    that re-renders otherwise (here every stub rendered another way, as a render change would) is
    damaged, not "evicted"."""
    with SqliteStore(tmp_path / "s.db") as store:
        policy = RetentionPolicy(**EAGER, history_max_tokens=400)
        hook = OpenAIHook(Session.open(store, "h", redact=False, policy=policy))
        msgs = [user("show env"), call("c1", command="env"), result("c1", "TOKEN=abc\n" * 50)]
        for n in range(2, 20):
            hook.transform_context(msgs)
            msgs += [user(f"next {n} " + "w " * 40), call(f"c{n}", command=f"ls {n}"), result(f"c{n}", "f.txt\n" * 30)]
        hook.session.close()
        evict(store, "toolcall:h:c1", reason="a leaked key")
        behind = [f for f in frame_docs(store, "h") if f["content"].get("horizon", 0) > 2]  # c1's result: entry 2
        assert behind
        assert all(verify_frame(store, f).ok for f in behind)  # it showed nothing of c1: untouched
        stub = view_module.stub_text
        monkeypatch.setattr(view_module, "stub_text", lambda obj, layout: stub(obj, layout) + " (rendered otherwise)")
        checks = [verify_frame(store, f) for f in behind]
    assert all(not c.ok and c.evicted == [] for c in checks), [(c.frame_id, c.evicted) for c in checks]


_INTERRUPTED = """
import faulthandler, signal, sys
faulthandler.register(signal.SIGUSR1, all_threads=True)  # where it waits, should it not end
# Ctrl-C as a terminal's foreground process has it: started from a background run (nohup, a CI
# job), this process inherits SIGINT ignored, Python then installs no handler, and the SIGINT
# the test sends was lost (the check waited on the hung node for good)
signal.signal(signal.SIGINT, signal.default_int_handler)
from context_os.context import frames
from context_os.store.xtdb import XtdbStore
frames.PARALLEL_FROM, frames.CHUNK = 1, 1
store = XtdbStore(sys.argv[1], timeout=3600, text_index_path=sys.argv[2])
docs = frames.frame_docs(store, sys.argv[3])
print(len(docs), flush=True)
sys.stdin.readline()  # the node hangs from here on
try:
    list(frames.verify_frames(store, docs, jobs=2))
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.xtdb
def test_ctrl_c_stops_a_check_whose_workers_wait_on_a_node_that_hangs(tmp_path: Path, xtdb_url: str, uid: str) -> None:
    """Ctrl-C while the workers wait on a node that does not answer ends the check then (as it
    does a check in one process), not once each worker's request has timed out and its chunk is
    done (a minute and more at the store's timeout)."""
    sid = f"hang-{uid}"
    with XtdbStore(xtdb_url, text_index_path=tmp_path / "index.db") as store:
        hook = OpenAIHook(Session.open(store, sid, harness="openai", policy=RetentionPolicy(**EAGER)))
        msgs = [{"role": "system", "content": "You are a coding agent."}, user("fix the bug")]
        for n in range(6):
            msgs += [call(f"c{n}", command=f"cat f{n}.py"), result(f"c{n}", f"line {n}\n" * 50)]
            hook.transform_context(msgs)
        hook.session.close()
    relay = CuttableProxy(xtdb_url)
    src = str(Path(frames_module.__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-c", _INTERRUPTED, relay.url, str(tmp_path / "index.db"), sid]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    with subprocess.Popen(args, env=env, text=True, **pipes) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "6"
            relay.stall()
            child.stdin.write("go\n")
            child.stdin.flush()
            assert relay.stalled.wait(120), "no worker asked the node anything"
            child.send_signal(signal.SIGINT)
            # the node still hangs: the check must end without it
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.send_signal(signal.SIGUSR1)  # every thread's stack, to stderr
                try:
                    child.communicate(timeout=10)  # (it will not end: this collects the dump)
                except subprocess.TimeoutExpired:
                    child.kill()
                _, err = child.communicate(timeout=30)
                raise AssertionError(f"Ctrl-C did not end the check; where it waited:\n{err[-6000:]}") from None
            assert child.returncode == 0, child.stderr.read() if child.stderr else ""
            assert child.stdout.read().strip() == "interrupted"
        finally:
            child.kill()
            relay.cut()


_FAILED_OVER = """
import sys
from pathlib import Path
from context_os.context import frames
from context_os.store.xtdb import XtdbStore
frames.PARALLEL_FROM = 1
with XtdbStore(sys.argv[1], text_index_path=Path(sys.argv[2])) as store:
    docs = frames.frame_docs(store, sys.argv[3])
    print("listed", flush=True)
    sys.stdin.readline()
    checks = list(frames.verify_frames(store, docs, jobs=2))
print(sum(c.ok for c in checks), len(checks), flush=True)
"""


@pytest.mark.xtdb
@pytest.mark.parametrize("when", ["before the check", "once the workers run"])
def test_a_node_down_is_said_once_not_once_per_worker(tmp_path: Path, xtdb_url: str, uid: str, when: str) -> None:
    """A store URL naming several nodes, the first down: the check said that it went on with the
    next one once here and once more in every worker (each found out again), or, when it went
    down once the workers ran, once in every worker. Once now."""
    sid = f"down-{uid}"
    with XtdbStore(xtdb_url, text_index_path=tmp_path / "index.db") as store:
        hook = OpenAIHook(Session.open(store, sid, harness="openai", policy=RetentionPolicy(**EAGER)))
        msgs = [{"role": "system", "content": "You are a coding agent."}, user("fix the bug")]
        for n in range(frames_module.CHUNK + 2):  # a chunk for each of 2 workers
            msgs += [call(f"c{n}", command=f"cat f{n}.py"), result(f"c{n}", f"line {n}\n" * 20)]
            hook.transform_context(msgs)
        hook.session.close()
    relay = CuttableProxy(xtdb_url)  # the first node, which goes down
    if when == "before the check":
        relay.cut()
    down = relay.url.removeprefix("xtdb+")
    url = f"{relay.url},{xtdb_url.removeprefix('xtdb+http://')}"
    src = str(Path(frames_module.__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-c", _FAILED_OVER, url, str(tmp_path / "index.db"), sid]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    with subprocess.Popen(args, env=env, text=True, **pipes) as child:
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline().strip() == "listed"
            relay.cut()  # (already, before the check)
            out, err = child.communicate("go\n", timeout=300)
        finally:
            child.kill()
            relay.cut()
    assert child.returncode == 0, err
    n = frames_module.CHUNK + 2
    assert out.split() == [str(n), str(n)], (out, err)
    said = [line for line in err.splitlines() if "cannot be reached" in line]
    assert said == [f"XTDB node at {down} cannot be reached: going on with {xtdb_url.removeprefix('xtdb+')}"]


_CUT_SHORT = """
import sys
from pathlib import Path
from context_os.context import frames
from context_os.errors import StoreUnavailable
from context_os.store.xtdb import XtdbStore
frames.PARALLEL_FROM = 1
with XtdbStore(sys.argv[1], text_index_path=Path(sys.argv[2])) as store:
    docs = frames.frame_docs(store, sys.argv[3])
    print("listed", flush=True)
    sys.stdin.readline()
    try:
        list(frames.verify_frames(store, docs, jobs=2))
    except StoreUnavailable:
        print("out of reach", flush=True)
"""


@pytest.mark.xtdb
def test_what_a_worker_said_before_an_outage_ended_its_chunk_is_said(tmp_path: Path, xtdb_url: str, uid: str) -> None:
    """A worker logs as it goes (a node down, the check going on with the next); its lines came
    back with its chunk's checks, so when the chunk failed (the next node went out of reach too)
    they were lost with it, and the check said only the last error. They are said now."""
    sid = f"cut-{uid}"
    with XtdbStore(xtdb_url, text_index_path=tmp_path / "index.db") as store:
        hook = OpenAIHook(Session.open(store, sid, harness="openai", policy=RetentionPolicy(**EAGER)))
        msgs = [{"role": "system", "content": "You are a coding agent."}, user("fix the bug")]
        for n in range(4):
            msgs += [call(f"c{n}", command=f"cat f{n}.py"), result(f"c{n}", f"line {n}\n" * 20)]
            hook.transform_context(msgs)
        hook.session.close()
    first, second = CuttableProxy(xtdb_url), CuttableProxy(xtdb_url)
    url = f"{first.url},{second.url.removeprefix('xtdb+http://')}"
    src = str(Path(frames_module.__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-c", _CUT_SHORT, url, str(tmp_path / "index.db"), sid]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    with subprocess.Popen(args, env=env, text=True, **pipes) as child:
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline().strip() == "listed"
            first.cut()  # the worker finds the first node down and goes on with the second,
            second.stall()  # which hangs, then goes down too
            child.stdin.write("go\n")
            child.stdin.flush()
            assert second.stalled.wait(120), "no worker went on with the second node"
            second.cut()
            out, err = child.communicate(timeout=300)
        finally:
            child.kill()
            first.cut()
            second.cut()
    assert child.returncode == 0 and out.strip() == "out of reach", (out, err)
    down = first.url.removeprefix("xtdb+")
    assert f"XTDB node at {down} cannot be reached: going on with" in err, err


@pytest.mark.parametrize("field", ["session", "basis"])
def test_a_frame_naming_a_session_not_there_at_its_basis_is_a_failed_check(tmp_path: Path, field: str) -> None:
    """A frame document changed behind the store's back so that its session is not found as of
    its basis (another session named, an earlier basis): a check that failed, beside the others'
    verdicts. Once a missing block no longer stopped the re-render, the session's ``NotFound``
    escaped ``verify_frame`` and ended the whole pass (``ctxos frames verify``, ``ctxos verify
    --frames``) with no verdict for any frame."""
    db = tmp_path / "s.db"
    with SqliteStore(db) as store:
        hook = OpenAIHook(Session.open(store, "v", harness="openai"))
        hook.transform_context([user("fix the bug")])
        hook.transform_context([user("fix the bug"), {"role": "assistant", "content": "ok"}, user("go")])
        hook.session.close()
        docs = [json.loads(json.dumps(d)) for d in frame_docs(store, "v")]
        if field == "session":
            docs[0]["meta"]["session"] = "not-there"
        else:
            docs[0]["content"]["basis_tx_id"] = 0
        checks = list(verify_frames(store, docs, jobs=1))
    assert [c.ok for c in checks] == [False, True]
    assert not checks[0].evicted and any("no session" in p for p in checks[0].problems), checks[0].problems
    assert any("does not match" in p for p in checks[0].problems)  # its own hashes say it was changed


def test_a_frame_of_a_newer_layout_that_does_not_re_render_says_so(tmp_path: Path) -> None:
    """A frame written by a newer context_os sharing the store (its ``layout`` past
    ``view.LAYOUT``) is re-rendered the way this version renders; when that does not give its
    hash, the check said only that the hashes differ, as of damage. It says the frame needs that
    version. Its document is the newer writer's own (its hashes verify), the frame before it still
    verifies, and one of the newer layout that re-renders to its hash all the same verifies."""
    from context_os.objects import FrameDoc

    with SqliteStore(tmp_path / "s.db") as store:
        hook = OpenAIHook(Session.open(store, "v", harness="openai"))
        hook.transform_context([user("fix the bug")])
        hook.transform_context([user("fix the bug"), {"role": "assistant", "content": "ok"}, user("go")])
        hook.session.close()
        first, second = frame_docs(store, "v")
        layout = view_module.LAYOUT + 1

        def newer(rendered_hash: str) -> dict:
            c = {**second["content"], "layout": layout, "rendered_hash": rendered_hash}
            return FrameDoc(id=second["id"], content=c, meta=second["meta"]).to_doc()

        same = newer(second["content"]["rendered_hash"])
        other = newer("b3:" + "0" * 64)  # what the newer version rendered differently
        checks = [verify_frame(store, first), verify_frame(store, same), verify_frame(store, other)]
    assert checks[0].ok and checks[1].ok and not checks[2].ok and not checks[2].evicted
    assert checks[2].problems[0].startswith("re-rendered hash ")
    assert checks[2].problems[1].startswith(f"it was rendered by a newer context_os (layout {layout};")
