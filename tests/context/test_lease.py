"""One writer per session, on every store: the session lease (context/lease.py).

Two writers of one session used to interleave their pages and leave frames that no longer
re-render. Now the second is refused with ``SessionBusy`` while the first holds the lease; a
lease left behind by a crash is taken over (at once on the same host, after it expires
elsewhere); a newer ``Session`` of a session in the same process revokes the older one.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.context.lease import lease_id
from context_os.context.load import load_view
from context_os.errors import SessionBusy, StoreCorrupt, StoreError
from context_os.harness import OpenAIHook
from context_os.objects import LeaseDoc
from context_os.store import Store
from context_os.store.base import Delete, Put, next_valid_time, now_ms
from context_os.store.sqlite import SqliteStore
from tests._reliability import Counts
from tests.helpers import coding_session, say, user

HOLD = """
import sys, time
from context_os import Session, open_store
s = Session.open(open_store(sys.argv[1]), sys.argv[2])
if sys.argv[3] == "close":
    s.close()
print("ready", flush=True)
time.sleep(600)
"""


def _holder(url: str, session_id: str, then: str = "hold") -> subprocess.Popen[str]:
    """A process that opens ``session_id`` (and closes it again with ``then="close"``), then sleeps."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, url, session_id, then], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", line + (proc.stderr.read() if proc.stderr else "")
    return proc


def _end(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    proc.send_signal(sig)
    proc.wait(timeout=30)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def test_a_second_process_is_refused_while_the_first_writes(store: Store, uid: str) -> None:
    proc = _holder(store.url, uid)
    try:
        with pytest.raises(SessionBusy, match=rf"pid {proc.pid} on ") as busy:
            Session.open(store, uid)
        # on this host a writer that ends leaves the session at once: nothing to wait out
        assert "stop it or wait for it to finish" in str(busy.value) and "expire" not in str(busy.value)
    finally:
        _end(proc)


def _in_new_pid_namespace() -> list[str] | None:
    """The command line prefix that runs a process in a PID namespace of its own (killed with its
    ``unshare``), as a container sharing this host's name runs; None where that is not allowed."""
    prefix = ["unshare", "--pid", "--kill-child", "--mount-proc"]
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=60).returncode == 0
    except OSError:
        return None
    return prefix if ok else None


def test_a_writer_in_another_pid_namespace_of_this_host_is_not_taken_for_a_crash(store: Store, uid: str) -> None:
    # A container sharing the host's name (`--network host`) has a PID namespace of its own: the
    # lease it held named a pid that, seen from the host, was none or another process's, and a
    # process of the host took the session over from the live writer, as from a crashed one.
    prefix = _in_new_pid_namespace()
    if prefix is None:
        pytest.skip("no PID namespace can be made here (unshare --pid needs root or user namespaces)")
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-c", HOLD, store.url, uid, "hold"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", line + (proc.stderr.read() if proc.stderr else "")
        with pytest.raises(SessionBusy, match="is being written by another process"):
            Session.open(store, uid)
    finally:
        _end(proc, signal.SIGKILL)  # (its child, the writer, with it)


def test_a_crashed_writer_leaves_nothing_in_the_way(store: Store, uid: str) -> None:
    proc = _holder(store.url, uid)
    _end(proc, signal.SIGKILL)
    with Session.open(store, uid) as s:  # same host, its pid gone: taken over at once
        OpenAIHook(s).transform_context([user("hi")])
        assert s.view.turn == 1


def test_a_crashed_writer_its_parent_has_not_reaped_leaves_nothing_in_the_way(store: Store, uid: str) -> None:
    # A supervisor that has not called wait() yet keeps its killed child as a zombie: signal 0
    # still finds the pid, and the lease was refused for its 10 minutes as if it still wrote.
    proc = _holder(store.url, uid)
    try:
        proc.send_signal(signal.SIGKILL)
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # dead, and left unreaped
        with Session.open(store, uid) as s:
            OpenAIHook(s).transform_context([user("hi")])
            assert s.view.turn == 1
    finally:
        _end(proc, signal.SIGKILL)


def test_a_closed_session_may_be_opened_by_another_process_at_once(store: Store, uid: str) -> None:
    proc = _holder(store.url, uid, "close")
    try:
        with Session.open(store, uid) as s:
            OpenAIHook(s).transform_context([user("hi")])
    finally:
        _end(proc)


def _foreign_lease(store: Store, session_id: str, expires: int) -> None:
    content = {"holder": "elsewhere", "host": "another-host", "pid": 1, "started": None, "acquired": 0}
    doc = LeaseDoc(id=lease_id(session_id), content={**content, "expires": expires}, meta={"session": session_id})
    store.submit([Put(doc.to_doc(), next_valid_time())])


def test_another_hosts_lease_holds_until_it_expires(store: Store, uid: str) -> None:
    _foreign_lease(store, uid, now_ms() + 60_000)
    with pytest.raises(SessionBusy, match="another-host") as busy:
        Session.open(store, uid)
    assert "lease to expire" in str(busy.value)  # a writer elsewhere cannot be seen ending from here
    _foreign_lease(store, uid, now_ms() - 1)
    with Session.open(store, uid) as s:
        assert s.lease is not None and s.lease.expires > now_ms()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ({"holder": "elsewhere", "host": "another-host", "pid": 1, "expires": "tomorrow"}, "content.expires"),
        ({"holder": "elsewhere", "host": "another-host", "pid": 1}, "content.expires"),
        ("held", "it has no content"),
    ],
)
def test_a_damaged_lease_is_named_with_the_way_out(store: Store, uid: str, content: Any, problem: str) -> None:
    # A lease row changed by hand made Session.open raise a bare ValueError/TypeError/KeyError
    # from deep inside the lease check, naming neither the document nor what to do.
    doc = LeaseDoc(id=lease_id(uid), content={}, meta={"session": uid}).to_doc()
    doc["content"] = content
    store.submit([Put(doc, next_valid_time())])
    with pytest.raises(StoreCorrupt, match=rf"lease:{uid} @ tx \d+ is damaged: {problem}") as damaged:
        Session.open(store, uid)
    assert damaged.value.id == lease_id(uid)
    assert f"Delete('lease:{uid}')" in str(damaged.value)
    store.submit([Delete(lease_id(uid))])  # the way out the message gives
    with Session.open(store, uid) as s:
        OpenAIHook(s).transform_context([user("hi")])
        assert s.view.turn == 1


OPEN = """
import sys
from context_os import Session, open_store
try:
    Session.open(open_store(sys.argv[1]), sys.argv[2])
except Exception as e:
    print(type(e).__name__, e)
"""


def test_a_session_that_fails_to_open_gives_its_lease_back(store: Store, uid: str) -> None:
    # A session whose document is damaged: Session.open raised StoreCorrupt with the lease still
    # taken, so while this process ran (a server) every other process of the host was told the
    # session was being written, by this pid, for the lease's 10 minutes: not what is wrong.
    with Session.open(store, uid) as s:
        OpenAIHook(s).transform_context([user("hi")])
    doc = store.doc(f"session:{uid}")
    assert doc is not None
    good = {k: v for k, v in doc.items() if not k.endswith("_hash")}
    damaged = {**good, "meta": {**good["meta"], "turn": "1"}}  # a row changed by hand
    store.submit([Put(damaged, next_valid_time())])
    try:
        with pytest.raises(StoreCorrupt, match="meta.turn is not an integer"):
            Session.open(store, uid)
        other = subprocess.run(
            [sys.executable, "-c", OPEN, store.url, uid], capture_output=True, text=True, timeout=120
        )
        assert other.stdout.startswith("StoreCorrupt "), other.stdout + other.stderr
    finally:  # the shared node's other tests list every session: the row is put right again
        store.submit([Put(good, next_valid_time())])


def test_a_newer_session_object_in_the_same_process_revokes_the_older(store: Store, uid: str) -> None:
    old = Session.open(store, uid)
    old_hook = OpenAIHook(old)
    old_hook.transform_context([user("one")])
    new = Session.open(store, uid)
    with pytest.raises(SessionBusy, match="opened again in this process"):
        old_hook.transform_context([user("one"), say("two"), user("three")])
    hook = OpenAIHook(new)
    hook.transform_context([user("one"), say("two"), user("three")])
    assert new.view.turn == 2
    new.close()
    with pytest.raises(SessionBusy, match="closed"):
        hook.transform_context([user("one"), say("two"), user("three"), say("4"), user("5")])


def test_a_newer_session_object_revokes_the_older_whatever_path_named_the_store(tmp_path: Path) -> None:
    """The older ``Session`` was found by the store's URL: a process that opened one SQLite file
    as ``s.db`` and as ``sub/../s.db`` had two writers of one session, each appending its own turn
    to the same pages (the second's frame 2 replaced by the first's). The lease document names the
    holder the newer one takes it from, and that one is revoked."""
    (tmp_path / "sub").mkdir()
    first, second = SqliteStore(tmp_path / "s.db"), SqliteStore(tmp_path / "sub" / ".." / "s.db")
    assert first.url != second.url
    try:
        old_hook = OpenAIHook(Session.open(first, "s"))
        old_hook.transform_context([user("one")])
        hook = OpenAIHook(Session.open(second, "s"))
        hook.transform_context([user("one"), say("two"), user("three")])
        with pytest.raises(SessionBusy, match="opened again in this process"):
            old_hook.transform_context([user("one"), say("2"), user("3")])
        assert [e["text"] for e in load_view(first, "s").entries] == ["one", "two", "three"]
        hook.session.close()
    finally:
        first.close()
        second.close()


def test_a_lease_is_renewed_by_writing_and_retaken_after_idling(store: Store, uid: str) -> None:
    s = Session.open(store, uid, lease_ms=1000)
    assert s.lease is not None
    hook = OpenAIHook(s)
    messages = coding_session(1)
    first = s.lease.expires
    time.sleep(0.6)  # past half the lease: the next write renews it
    hook.transform_context(messages)
    assert s.lease.expires >= first + 500
    time.sleep(1.1)  # expired, nobody took it: taken again
    messages.append(say("done"))
    hook.transform_context(messages)
    assert s.lease.expires > now_ms()
    time.sleep(1.1)
    _foreign_lease(store, uid, now_ms() + 60_000)  # expired, and another writer took it
    messages.append(user("again"))
    with pytest.raises(SessionBusy, match="idle past its lease"):
        hook.transform_context(messages)


def test_a_session_whose_lease_another_writer_took_after_it_expired_closes_with_a_warning(
    store: Store, uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Leaving the `with` block of a Session idle past its lease, taken since by another writer,
    # raised SessionBusy from close(), its work all done: its give-back found the other writer's
    # lease. There is nothing to give back: a warning says so, the other writer's lease stays,
    # and this Session writes no more.
    with Session.open(store, uid, lease_ms=1000) as s:
        hook = OpenAIHook(s)
        hook.transform_context([user("hi")])
        time.sleep(1.1)
        _foreign_lease(store, uid, now_ms() + 60_000)
    held = store.doc(lease_id(uid))
    assert held is not None and held["content"]["host"] == "another-host" and held["content"]["expires"] > now_ms()
    said = [r.getMessage() for r in caplog.records if "could not give its lease back" in r.getMessage()]
    assert len(said) == 1 and "idle past its lease" in said[0], said
    with pytest.raises(SessionBusy, match="idle past its lease"):
        hook.transform_context([user("hi"), say("ok"), user("more")])


def test_leases_need_a_sensible_length(store: Store, uid: str) -> None:
    with pytest.raises(StoreError, match="at least 1000 ms"):
        Session.open(store, uid, lease_ms=10)


@pytest.mark.e2e
def test_two_replays_of_one_session_at_once(tmp_path: Path, reliability: Counts) -> None:
    """The issue's case: two `ctxos replay --session same` into one store at once. One wins, the
    other is refused with a clear error, and every frame of the session verifies."""
    ctxos = str(Path(sys.executable).parent / "ctxos")
    demo = Path(__file__).resolve().parents[2] / "src" / "context_os" / "data" / "demo_session.json"
    store = f"sqlite:///{tmp_path / 's.db'}"
    cmd = [ctxos, "--store", store, "replay", str(demo), "--session", "same", "--verify", "none", "--no-per-turn"]
    env = {**os.environ, "COLUMNS": "200"}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in "ab"]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    refused = [err for p, (_, err) in zip(procs, outs, strict=True) if p.returncode != 0]
    check = "attack: two replays of one session"
    reliability.add(
        check,
        attempts=len(procs),
        finished=codes.count(0),
        # refused as busy while the other writes, or as existing if it started once the other had begun
        refused_busy=sum("SessionBusy" in err and "Traceback" not in err for err in refused),
        refused_existing=sum("already exists" in err and "Traceback" not in err for err in refused),
    )
    assert codes == [0, 1], outs
    assert ("SessionBusy" in refused[0] or "already exists" in refused[0]) and "Traceback" not in refused[0]
    verify = subprocess.run(
        [ctxos, "--store", store, "verify", "--frames"], capture_output=True, text=True, timeout=300
    )
    frames = re.search(r"(\d+) verified, (\d+) failed", verify.stdout)
    reliability.add(
        check,
        frames_verified=int(frames[1]) if frames else 0,
        frames_failed=int(frames[2]) if frames else 0,
        verify_failed=int(verify.returncode != 0),
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "88 verified, 0 failed" in verify.stdout
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 1 and "already exists" in again.stderr and "--append" in again.stderr
    appended = subprocess.run([*cmd, "--append"], capture_output=True, text=True, timeout=300, env=env)
    assert appended.returncode == 0, appended.stderr


@pytest.mark.xtdb
def test_a_session_ended_by_ctrl_c_on_a_hung_node_does_not_wait_the_store_out(
    tmp_path: Path, xtdb_url: str, uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Ctrl-C while the node hangs: the session's ``with`` block gave its lease back before the
    KeyboardInterrupt went on, waiting on the node up to the store's timeout (30 s by default;
    here an hour, which the test would not outlast). It waits ``GIVE_BACK_S`` and says so."""
    import threading

    from context_os.context import session as session_module
    from context_os.store.xtdb import XtdbStore
    from tests._xtdb_node import CuttableProxy

    relay = CuttableProxy(xtdb_url)
    store = XtdbStore(relay.url, timeout=3600, text_index_path=tmp_path / "index.db")
    ended = threading.Event()

    def interrupted_session() -> None:
        try:
            with Session.open(store, uid) as session:
                OpenAIHook(session).transform_context(coding_session(1))
                relay.stall()
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            ended.set()

    try:
        threading.Thread(target=interrupted_session, daemon=True).start()
        assert ended.wait(10 * session_module.GIVE_BACK_S + 60), "the lease's give-back waited on the hung node"
        assert relay.stalled.is_set()  # it did ask the node
        said = [r.getMessage() for r in caplog.records if "could not give its lease back" in r.getMessage()]
        assert said and f"the store did not answer within {session_module.GIVE_BACK_S:g} s" in said[0]
    finally:
        relay.cut()
        store.close()


def test_a_session_left_by_an_error_after_its_lease_was_taken_ends_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leaving the ``with`` block by an error gives the lease back in a thread of its own (it
    must not wait the store out): a lease that expired and was taken by another writer meanwhile
    made that thread raise ``SessionBusy``, a ``StateError``, not the ``StoreError`` it caught,
    and Python printed its traceback after the error the user saw. One warning line now."""
    import threading

    from context_os.store.sqlite import SqliteStore

    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    store = SqliteStore(tmp_path / "s.db")
    with pytest.raises(KeyboardInterrupt), Session.open(store, "s1", lease_ms=1000) as session:
        OpenAIHook(session).transform_context(coding_session(1))
        time.sleep(1.1)  # the lease expires (its length, not a wait on the code)
        _foreign_lease(store, "s1", now_ms() + 60_000)  # and another writer takes it
        raise KeyboardInterrupt
    for thread in threading.enumerate():
        if thread.name == "ctxos-close-s1":
            thread.join()
    assert raised == []
    said = [r.getMessage() for r in caplog.records if "could not give its lease back" in r.getMessage()]
    assert len(said) == 1 and "idle past its lease" in said[0]
    store.close()


def test_a_hook_that_refuses_a_session_of_another_harness_gives_its_lease_back(store: Store, uid: str) -> None:
    """A hook refuses a session recorded with another harness (its history is in another
    format); the session kept the lease until the process ended, and every other process was
    refused the session meanwhile. The lease is given back; the session's own hook takes it again
    at its first write, unless another writer held the session since (its view may be stale)."""
    from context_os.errors import StateError
    from context_os.harness.pi import PiHook
    from tests.harness.pi_msgs import user as pi_user

    Session.open(store, uid, harness="pi").close()
    session = Session.open(store, uid, harness="openai")
    with pytest.raises(StateError, match="recorded with harness 'pi'"):
        OpenAIHook(session)
    _end(_holder(store.url, uid, "close"))  # another process opens it at once
    with pytest.raises(SessionBusy, match="another writer held the session after this one gave it back"):
        PiHook(session).transform_context([pi_user("hi")])
    with Session.open(store, uid) as s:
        with pytest.raises(StateError):
            OpenAIHook(s)
        PiHook(s).transform_context([pi_user("hi")])  # nobody held it meanwhile: taken back
        assert s.view.turn == 1


def test_a_session_refused_by_two_hooks_in_turn_is_still_taken_back(store: Store, uid: str) -> None:
    """A program that tries the hooks of several harnesses on one Session lends its lease at each
    refusal: the second lend, with the lease already given back, forgot the lent lease, and the
    session's own hook then found it closed (SessionBusy) though nobody else had held it."""
    from context_os.errors import StateError
    from context_os.harness.pi import PiHook
    from tests.harness.pi_msgs import user as pi_user

    Session.open(store, uid, harness="pi").close()
    with Session.open(store, uid) as s:
        for _ in range(2):
            with pytest.raises(StateError):
                OpenAIHook(s)
        PiHook(s).transform_context([pi_user("hi")])  # nobody held it meanwhile: taken back
        assert s.view.turn == 1


def test_a_refused_hook_leaves_the_lease_of_a_session_its_own_hook_uses(store: Store, uid: str) -> None:
    """A hook of another harness built on a Session its own hook already took is refused with no
    side effect: lending the lease then let another process open the session from under the
    working hook, which died with SessionBusy at its next write."""
    from context_os.errors import StateError
    from context_os.harness.pi import PiHook
    from tests.harness.pi_msgs import user as pi_user

    Session.open(store, uid, harness="pi").close()
    with Session.open(store, uid) as s:
        hook = PiHook(s)
        history = [pi_user("hi")]
        hook.transform_context(history)
        with pytest.raises(StateError):
            OpenAIHook(s)
        # the lease is still held: another process is refused
        other = subprocess.run(
            [sys.executable, "-c", HOLD.replace("time.sleep(600)", ""), store.url, uid, "close"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert other.returncode != 0 and "SessionBusy" in other.stderr, other.stdout + other.stderr
        history.append(pi_user("and again"))
        hook.transform_context(history)
        assert s.view.turn == 2


def test_a_lent_lease_is_taken_back_at_the_write_after_one_the_store_did_not_take(
    store: Store, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first write after a lend takes the lease back; when the store could not be reached
    for it (nothing sent), the Session forgot the lent lease and every later write found the
    Session closed, though nobody else held the session: the next write takes it back."""
    from context_os.errors import StateError, StoreUnreachable
    from context_os.harness.pi import PiHook
    from tests.harness.pi_msgs import user as pi_user

    Session.open(store, uid, harness="pi").close()
    with Session.open(store, uid) as s:
        with pytest.raises(StateError):
            OpenAIHook(s)
        submit = store.submit

        def unreachable(ops: object) -> object:
            monkeypatch.setattr(store, "submit", submit)
            raise StoreUnreachable("the node cannot be reached (a test)")

        monkeypatch.setattr(store, "submit", unreachable)
        with pytest.raises(StoreUnreachable):
            s.lease.check()  # (what every write of the session does first)
        PiHook(s).transform_context([pi_user("hi")])  # the store answers again: taken back
        assert s.view.turn == 1
