"""Evicting a leaked secret reaches live sessions (context/evict.py), on every store.

Before: the secret was erased, then the next turn of the running session wrote it back (its view
held the text in memory). Now the evict leaves a tombstone; a running session drops the text at
its next turn and never writes or shows it again; a session opened later rebuilds an evicted
chat page from its tombstone; the file index does not take the evicted bytes in again.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from context_os import Session
from context_os.cli import cli
from context_os.context.evict import EVICTED_TEXT, evict, forget_paths, tombstone_id
from context_os.context.frames import EVICTED_BLOCK, frame_docs, get_frame, rerender, verify_frame
from context_os.context.policy import RetentionPolicy
from context_os.context.source_tools import SourceTools
from context_os.errors import NotFound
from context_os.files import FileTools, Workspace
from context_os.files.index import EVICTED_BYTES
from context_os.harness import OpenAIHook
from context_os.hashing import doc_hashes
from context_os.sources.recall import open_recall
from context_os.store import Store
from context_os.store.base import Evict
from context_os.store.sqlite import SqliteStore
from tests._reliability import Counts
from tests.helpers import EAGER, call, result, say, user

# no detector's shape (two characters at random: the entropy of "x7" * 8), so that only evict can
# take it out; a new one each run, so that a node the suite ran on before holds none of it
SECRET = "Zq8-leaked-value-" + "".join(random.choice("x7") for _ in range(16))


def _everywhere(store: Store) -> str:
    """Every version of every document, as text (what a reader of the store could find)."""
    return json.dumps([v.doc for cur in store.find() for v in store.history(cur.id, with_docs=True)], default=str)


def _on_disk(store: Store) -> bytes:
    if not isinstance(store, SqliteStore):
        return b""
    wal = store.path.with_name(store.path.name + "-wal")
    return store.path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def _text(context: list[dict]) -> str:
    return json.dumps(context)


def _count(reliability: Counts, store: Store, context: list[dict]) -> None:
    """One eviction for the reliability report: is the secret still in the store (documents or
    file bytes) or in the context built after it?"""
    reliability.add(
        "attack: evict from a live session",
        attempts=1,
        found_in_store=int(SECRET in _everywhere(store) or SECRET.encode() in _on_disk(store)),
        found_in_context=int(SECRET in _text(context)),
    )


def test_a_chat_message_evicted_from_a_live_session_stays_gone(store: Store, uid: str, reliability: Counts) -> None:
    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**EAGER))
    hook = OpenAIHook(s)
    msgs = [user(f"the deploy password is {SECRET}")]
    hook.transform_context(msgs)
    page = f"chat:{uid}:00000"
    evict(store, page)
    assert SECRET not in _everywhere(store)
    msgs += [say("noted"), user("go on")]
    context = hook.transform_context(msgs)  # the old code wrote the page back here
    _count(reliability, store, context)
    assert SECRET not in _everywhere(store) and SECRET.encode() not in _on_disk(store)
    assert SECRET not in _text(context) and EVICTED_TEXT in _text(context)
    assert "go on" in _text(context)
    msgs += [say("ok"), user("more")]
    hook.transform_context(msgs)
    assert SECRET not in _everywhere(store)
    assert verify_frame(store, get_frame(store, uid, s.view.turn)).ok
    s.close()
    # reopened: the page is its scrubbed form; the session carries on
    with Session.open(store, uid, redact=False) as again:
        hook = OpenAIHook(again)
        assert SECRET not in _text(hook.transform_context([*msgs, say("x"), user("y")]))
        assert verify_frame(store, get_frame(store, uid, again.view.turn)).ok


def test_frames_after_a_full_page_was_evicted_from_a_live_session_verify(store: Store, uid: str) -> None:
    # A frame names the full chat pages by one hash over theirs. After an evicted full page was
    # written back scrubbed, the session went on hashing the page it had before: no later frame
    # of the session ever verified again.
    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**EAGER))
    hook = OpenAIHook(s)
    msgs = [user(f"the deploy password is {SECRET}")]
    for n in range(12):
        msgs += [call(f"c{n}", "bash", command="ls"), result(f"c{n}", f"file{n}.txt")]
    hook.transform_context(msgs)
    evict(store, f"chat:{uid}:00000")
    msgs += [say("noted"), user("go on")]
    context = hook.transform_context(msgs)
    assert SECRET not in _text(context) and SECRET not in _everywhere(store)
    check = verify_frame(store, get_frame(store, uid, s.view.turn))
    assert check.ok, check.problems
    msgs += [say("ok"), user("more")]
    hook.transform_context(msgs)
    assert verify_frame(store, get_frame(store, uid, s.view.turn)).ok
    s.close()


def test_an_evicted_page_of_a_closed_session_comes_back_scrubbed(store: Store, uid: str, reliability: Counts) -> None:
    with Session.open(store, uid, redact=False) as s:
        hook = OpenAIHook(s)
        msgs = [user(f"key {SECRET}"), call("c1", "bash", command="ls"), result("c1", "a.txt")]
        hook.transform_context(msgs)
    evict(store, f"chat:{uid}:00000")
    with Session.open(store, uid, redact=False) as s:
        assert store.get(f"chat:{uid}:00000") is not None  # rewritten from the tombstone
        context = OpenAIHook(s).transform_context([*msgs, say("done"), user("next")])
        _count(reliability, store, context)
        text = _text(context)
        assert SECRET not in text and "a.txt" in text  # the tool call still pairs with its result
        assert SECRET not in _everywhere(store)
    # the first frame showed the page as it was: it re-renders scrubbed and fails, saying why
    first, second = frame_docs(store, uid)
    check = verify_frame(store, first)
    assert not check.ok and check.rendered is not None and SECRET not in str(check.rendered.history)
    assert any(f"static ref chat:{uid}:00000 " in p for p in check.problems), check.problems
    assert verify_frame(store, second).ok


def test_an_early_frame_re_renders_evicted_pages_as_they_stood_at_its_turn(store: Store, uid: str) -> None:
    """An evicted page comes back from its tombstone as it stood at the frame's basis: the
    tombstone holds the page's newest entries, and those of pages begun after the frame. Before,
    a frame of an early turn took them all: it was re-rendered with messages of later turns, and
    once a page between two evicted ones stayed (nothing to erase in it), it could not be
    re-rendered at all ("chat page 1 is missing or out of order") and counted as damage."""
    with Session.open(store, uid, redact=False) as s:
        hook = OpenAIHook(s)
        msgs = [user(f"key {SECRET}")]
        hook.transform_context(msgs)
        for n in range(24):  # 49 entries: pages 0, 1 and 2 full, page 3 begun
            command = f"login {SECRET}" if n == 18 else "ls"  # (a call's arguments are in its page)
            msgs += [call(f"c{n}", "bash", command=command), result(f"c{n}", f"file{n}.txt")]
            hook.transform_context(msgs)
    pages = {v.id[-1]: SECRET in json.dumps(v.doc) for v in store.find("chat", {"session": uid})}
    assert pages == {"0": True, "1": False, "2": True, "3": False}, pages
    for page in (0, 2):
        evict(store, f"chat:{uid}:{page:05d}", reason="leaked")
    frames = frame_docs(store, uid)
    assert len(frames) == 25
    for f in frames:  # each showed page 0: evicted since, none damaged, each re-rendered as it was
        check = verify_frame(store, f)
        assert check.evicted_only and check.evicted and check.rendered is not None, check.problems
        assert check.rendered.message_count == f["content"]["messages"], f["id"]
        assert SECRET not in str(check.rendered.history)
    with Session.open(store, uid, redact=False) as s:  # the session opens as it stands now
        assert [e["i"] for e in s.view.entries] == list(range(49))


def test_a_tool_output_evicted_from_a_live_session_is_shown_as_erased(
    store: Store, uid: str, reliability: Counts
) -> None:
    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**EAGER))
    hook = OpenAIHook(s)
    msgs = [user("show env"), call("c1", "bash", command="env"), result("c1", f"TOKEN={SECRET}")]
    assert SECRET in _text(hook.transform_context(msgs))
    oid = next(v.id for v in store.find("toolcall", {"session": uid}))
    evict(store, oid)
    msgs += [say("I see the token"), user("thanks")]
    context = hook.transform_context(msgs)
    _count(reliability, store, context)
    assert SECRET not in _text(context) and "erased from the store" in _text(context)
    assert SECRET not in _everywhere(store)
    changes = [v.doc["meta"] for v in s.state_changes(oid) if v.doc]
    assert changes[-1]["reason"] == "evicted from the store" and changes[-1]["actor"] == "user"
    assert store.get(tombstone_id(oid)).doc["meta"]["session"] == uid
    assert verify_frame(store, get_frame(store, uid, s.view.turn)).ok
    s.close()


def test_a_frame_that_showed_an_evicted_object_says_it_was_evicted(store: Store, uid: str) -> None:
    # It said only that a ref no longer resolved to its hash, or that a block was missing
    # ("evicted?"): the same words as for a damaged store.
    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**EAGER))
    hook = OpenAIHook(s)
    msgs = [user(f"key {SECRET}"), call("c1", "bash", command="env"), result("c1", f"TOKEN={SECRET}")]
    hook.transform_context(msgs)
    msgs += [say("ok"), user("next")]
    hook.transform_context(msgs)
    for n in range(2, 12):  # past the first page: the later frames name it among the sealed ones
        msgs += [call(f"c{n}", "bash", command="ls"), result(f"c{n}", f"file{n}.txt")]
    hook.transform_context([*msgs, say("done"), user("bye")])
    s.close()
    for oid in (f"toolcall:{uid}:c1", f"chat:{uid}:00000"):
        evict(store, oid, reason="leaked")
    named = []
    for f in frame_docs(store, uid):
        check = verify_frame(store, f)
        assert not check.ok
        named.append({p.split(" was evicted at ")[0] for p in check.problems if " was evicted at " in p})
        assert all("(leaked)" in p for p in check.problems if " was evicted at " in p)
    page, output = f"chat:{uid}:00000", f"toolcall:{uid}:c1"
    assert named[0] == named[1] == {page, output}  # the page as the last page, then as a sealed one
    assert page in named[2], named


def test_frames_that_showed_an_evicted_object_are_told_apart_from_damaged_ones(
    store: Store, uid: str, tmp_path: Path
) -> None:
    """A frame that showed what was evicted since cannot be re-rendered as it was: that is the
    eviction, not damage. ``check.evicted`` names what explains it (``evicted_only``), and
    ``frames verify`` / ``verify --frames`` count it apart and exit 0 (a health check stayed
    red for good after any eviction); anything else wrong in such a frame is still a failure."""
    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**EAGER))
    hook = OpenAIHook(s)
    msgs = [user("show env"), call("c1", "bash", command="env"), result("c1", f"TOKEN={SECRET}")]
    hook.transform_context(msgs)
    msgs += [say("ok"), user("next")]
    hook.transform_context(msgs)
    s.close()
    before = [verify_frame(store, f) for f in frame_docs(store, uid)]
    assert all(c.ok and not c.evicted for c in before)
    oid = f"toolcall:{uid}:c1"
    evict(store, oid, reason="leaked")
    after = [verify_frame(store, f) for f in frame_docs(store, uid)]
    assert [c.evicted for c in after] == [[oid], [oid]] and all(c.evicted_only for c in after), after
    # the frame document itself changed: damage, whatever it showed
    frame = dict(frame_docs(store, uid)[0])
    frame["content"] = {**frame["content"], "tokens": frame["content"]["tokens"] + 1}
    damaged = verify_frame(store, frame)
    assert not damaged.ok and damaged.evicted == [] and not damaged.evicted_only
    if isinstance(store, SqliteStore):
        cmd = [sys.executable, "-m", "context_os", "--store", str(store.path)]
        done = subprocess.run([*cmd, "frames", "verify", uid, "--json"], capture_output=True, text=True, timeout=120)
        report = json.loads(done.stdout)
        assert done.returncode == 0 and report["ok"] and (report["frames_verified"], report["frames_evicted"]) == (0, 2)
        assert report["frames"][0]["evicted"] == [oid] and not report["frames"][0]["ok"]
        text = subprocess.run([*cmd, "frames", "verify", uid], capture_output=True, text=True, timeout=120).stdout
        assert "EVICTED (it showed what was erased since" in text and "2 showed what was evicted since" in text
        whole = subprocess.run([*cmd, "verify", "--frames", "--json"], capture_output=True, text=True, timeout=120)
        report = json.loads(whole.stdout)
        assert whole.returncode == 0 and report["frames_failed"] == [] and len(report["frames_evicted"]) == 2


@pytest.mark.parametrize(
    "policy", [EAGER, {}], ids=["collapsed to a stub", "shown whole before the session is managed"]
)
def test_frames_that_showed_an_evicted_result_no_ref_names_are_evicted_not_damaged(
    store: Store, uid: str, policy: dict[str, Any]
) -> None:
    """A frame names no inactive tool result among its refs, yet its chat shows it: as a stub once
    collapsed, whole while the session passes through unmanaged. Evicting it changes what such a
    frame re-renders to; that is the eviction too (it was counted as damage)."""
    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**policy))
    hook = OpenAIHook(s)
    msgs = [user("show env"), call("c1", "bash", command="env"), result("c1", f"TOKEN={SECRET}")]
    for n in range(2, 8):  # the first result collapses (EAGER), or stays whole (passing through)
        hook.transform_context(msgs)
        msgs += [call(f"c{n}", "bash", command="ls"), result(f"c{n}", f"file{n}.txt")]
    hook.transform_context(msgs)
    s.close()
    oid = f"toolcall:{uid}:c1"
    assert all(oid not in {r["id"] for r in f["content"]["refs"]} for f in frame_docs(store, uid)[3:])
    evict(store, oid, reason="leaked")
    after = [verify_frame(store, f) for f in frame_docs(store, uid)]
    assert all(c.evicted == [oid] and c.evicted_only for c in after), [(c.frame_id, c.problems) for c in after]


def test_an_eviction_followed_by_a_write_of_the_session_is_still_taken_in(store: Store, uid: str) -> None:
    # A turn takes in evictions only when someone else wrote since the session's last write. A
    # write of its own in between (a pin, an activate, a file read between two model calls) made
    # it look as if nobody had: the next turn showed the evicted output again.
    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**EAGER))
    hook = OpenAIHook(s)
    msgs = [user("env"), call("c1", "bash", command="env"), result("c1", f"TOKEN={SECRET}")]
    msgs += [call("c2", "bash", command="ls"), result("c2", "a.txt")]
    assert SECRET in _text(hook.transform_context(msgs))
    evict(store, f"toolcall:{uid}:c1")  # as another process would
    hook.call_tool("pin", {"id": f"toolcall:{uid}:c2"})  # the session writes after it
    msgs += [say("ok"), user("next")]
    context = hook.transform_context(msgs)
    assert SECRET not in _text(context) and "erased from the store" in _text(context)
    assert SECRET not in _everywhere(store)
    s.close()


def test_lines_and_history_between_turns_do_not_serve_what_was_evicted(store: Store, uid: str) -> None:
    # A running session took in an eviction at its next turn only; until then ``lines`` and
    # ``history`` served the evicted text from memory, and the model got it back as a tool
    # output, which the next turn stored again.
    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**EAGER))
    hook = OpenAIHook(s)
    msgs = [user(f"the key is {SECRET}"), call("c1", "bash", command="env"), result("c1", f"TOKEN={SECRET}")]
    hook.transform_context(msgs)
    evict(store, f"toolcall:{uid}:c1")  # as another process would
    evict(store, f"chat:{uid}:00000")
    try:
        shown = hook.call_tool("lines", {"id": f"toolcall:{uid}:c1"})
    except NotFound as e:
        shown = str(e)
    assert SECRET not in shown
    assert SECRET not in hook.call_tool("history", {"start": 0, "end": 3})
    msgs += [call("c2", "lines", id=f"toolcall:{uid}:c1"), result("c2", shown), say("ok"), user("next")]
    assert SECRET not in _text(hook.transform_context(msgs))
    assert SECRET not in _everywhere(store)
    s.close()


def test_an_evicted_file_leaves_the_session_and_its_bytes_are_not_indexed_again(
    store: Store, uid: str, tmp_path: Path, reliability: Counts
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "conf.ini").write_text(f"[db]\nvalue = {SECRET}\n")
    ws = Workspace(root, redact_patterns={}, redact_generic=False)
    s = Session.open(store, uid, workspace=str(root), redact=False, policy=RetentionPolicy(**EAGER))
    tools = FileTools(s, ws)
    hook = OpenAIHook(s, files=tools)
    fid = json.loads(tools.call("read", {"path": "conf.ini"}))["id"]
    sha = store.doc(fid)["meta"]["sha"]
    msgs = [user("read the config")]
    assert SECRET in _text(hook.transform_context(msgs))
    evict(store, fid)
    msgs += [say("read it"), user("now what")]
    assert SECRET not in _text(hook.transform_context(msgs))
    assert fid not in s.view.objects
    # the session knows the erased bytes (a read while the store is out of reach withholds them)
    assert sha in s.erased and sha in Session.open(store, f"{uid}-other").erased
    again = json.loads(tools.call("read", {"path": "conf.ini"}))  # the same bytes: withheld
    assert again["id"] != fid and again["content_omitted"] == EVICTED_BYTES
    msgs += [say("again"), user("and?")]
    context = hook.transform_context(msgs)
    _count(reliability, store, context)
    assert SECRET not in _text(context) and SECRET not in _everywhere(store)
    (root / "conf.ini").write_text("[db]\nvalue = from-the-vault\n")
    fixed = json.loads(tools.call("read", {"path": "conf.ini"}))
    assert fixed["id"] == again["id"] and "content_omitted" not in fixed
    assert "from-the-vault" in _text(hook.transform_context([*msgs, say("ok"), user("fixed")]))
    s.close()


def test_a_recall_hit_that_quoted_an_evicted_object_goes_with_it(store: Store, uid: str, reliability: Counts) -> None:
    # Recall copies what it finds into the session: a recall object (``recall:<id>#<part>``)
    # holding the hit's text, and its preview in the object index. Evicting the object it quoted
    # left both in the store (and in every index block that listed the hit), and the running
    # session kept showing the hit.
    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**EAGER))
    hook = OpenAIHook(s)
    SourceTools(s, recall=open_recall(store, None)).register(hook.registry)
    # a name of this test's own: the same question asked by an earlier run on a node the suite
    # ran on before would be recalled in its place
    name = f"DEPLOY{uid}"
    msgs = [user("show env"), call("c1", "bash", command="env"), result("c1", f"{name}={SECRET}")]
    hook.transform_context(msgs)
    msgs += [say("done"), user(f"what was the {name} again?")]  # recalled at this message
    hook.transform_context(msgs)
    oid = f"toolcall:{uid}:c1"
    hits = [v.id for v in store.find("recall", {"object": oid})]
    assert hits, "the user message recalled the tool output"
    done = evict(store, oid)
    assert done["derived"] == hits
    assert SECRET not in _everywhere(store) and SECRET.encode() not in _on_disk(store)
    assert all(store.get(tombstone_id(h)) is not None for h in hits)
    msgs += [say("it is erased"), user("fine")]
    context = hook.transform_context(msgs)
    _count(reliability, store, context)
    assert SECRET not in _text(context) and not any(h in s.view.objects for h in hits)
    assert SECRET not in _everywhere(store)
    assert verify_frame(store, get_frame(store, uid, s.view.turn)).ok
    s.close()


def test_an_evicted_memory_index_is_not_stored_again_while_its_file_holds_it(tmp_path: Path) -> None:
    # A memory index is read from its file at every turn. Evicting its object broke the running
    # session: it took the text as stored already (what it last wrote), showed the object and
    # failed every turn after with NotFound; a session opened later stored the text again.
    from context_os.sources.memory import MemoryScopes

    index = tmp_path / "data" / "memory" / "MEMORY.md"
    index.parent.mkdir(parents=True)
    index.write_text(f"# Memory\n- the staging key is {SECRET}\n")
    store = SqliteStore(tmp_path / "s.db")

    def opened(sid: str) -> tuple[Session, OpenAIHook]:
        s = Session.open(store, sid, redact=False, policy=RetentionPolicy(**EAGER))
        SourceTools(s, memory=MemoryScopes(data_dir=tmp_path / "data"))
        return s, OpenAIHook(s)

    s, hook = opened("live")
    msgs = [user("hello")]
    assert SECRET in _text(hook.transform_context(msgs))
    evict(store, "memory:global:MEMORY.md")  # as another process would
    for n in range(2):
        context = hook.transform_context(msgs := [*msgs, say("ok"), user(f"after {n}")])
        assert SECRET not in _text(context) and f"after {n}" in _text(context)
    s.close()
    s, hook = opened("later")
    assert SECRET not in _text(hook.transform_context([user("hi")]))
    assert SECRET not in _everywhere(store) and SECRET.encode() not in _on_disk(store)
    index.write_text("# Memory\n- the staging key is in the vault\n")  # the file changed: shown again
    assert "in the vault" in _text(hook.transform_context([user("hi"), say("ok"), user("again")]))
    s.close()
    store.close()


def test_an_evicted_file_whose_name_held_a_secret_leaves_no_trace_of_it(store: Store, uid: str, tmp_path: Path) -> None:
    # The tombstone kept the evicted file's absolute path (to withhold its bytes if read again):
    # a secret in the file's name stayed in the store for good, even after the file was renamed.
    root = tmp_path / "ws"
    root.mkdir()
    leaked = root / f"{SECRET}.txt"
    leaked.write_text("notes\n")
    ws = Workspace(root, redact_patterns={}, redact_generic=False)
    s = Session.open(store, uid, workspace=str(root), redact=False, policy=RetentionPolicy(**EAGER))
    tools = FileTools(s, ws)
    hook = OpenAIHook(s, files=tools)
    fid = json.loads(tools.call("read", {"path": leaked.name}))["id"]
    hook.transform_context([user("read it")])
    evict(store, fid)
    again = json.loads(tools.call("read", {"path": leaked.name}))  # the same bytes, the same path: withheld
    assert again["content_omitted"] == EVICTED_BYTES
    evict(store, again["id"])
    leaked.rename(root / "notes.txt")
    hook.transform_context([user("read it"), say("ok"), user("renamed")])
    assert SECRET not in _everywhere(store) and SECRET.encode() not in _on_disk(store)
    s.close()


def _index_patched_over_a_secret_name(store: Store, uid: str, tmp_path: Path) -> tuple[Session, OpenAIHook, str, list]:
    """A session that read a file named after a secret among others, then unloaded it: the
    object index, already shown, gets a patch block whose diff lines name the file."""
    root = tmp_path / "ws"
    root.mkdir()
    names = [f"{SECRET}.txt", *(f"f{n}.txt" for n in range(12))]
    for name in names:
        (root / name).write_text(f"notes of {name}\n")
    ws = Workspace(root, redact_patterns={}, redact_generic=False)
    s = Session.open(store, uid, workspace=str(root), redact=False, policy=RetentionPolicy(manage_from_tokens=0))
    tools = FileTools(s, ws)
    hook = OpenAIHook(s, files=tools)
    fid = [json.loads(tools.call("read", {"path": name}))["id"] for name in names][0]
    msgs = [user("read them")]
    hook.transform_context(msgs := [*msgs, say("ok"), user("go on")])
    hook.call_tool("deactivate", {"id": fid})
    hook.transform_context(msgs := [*msgs, say("ok"), user("unloaded")])
    patches = [v.doc for v in store.find("block", {"object": "index"}) if "a patch of its block" in str(v.doc)]
    assert patches and SECRET in json.dumps(patches), "the index was patched, naming the file"
    return s, hook, fid, msgs


def test_evicting_an_object_takes_the_index_patches_that_named_it(store: Store, uid: str, tmp_path: Path) -> None:
    # Eviction took the object-index blocks whose lines read "- <id> ...", but a patch of the
    # index names an object in diff lines ("-- <id>", "+- <id>", " - <id>"): the patch block
    # that named an evicted file by its path (a secret in its name) stayed in the store.
    s, _, fid, _ = _index_patched_over_a_secret_name(store, uid, tmp_path)
    s.close()
    evict(store, fid)
    assert SECRET not in _everywhere(store) and SECRET.encode() not in _on_disk(store)


def test_a_live_session_shows_its_index_anew_after_an_eviction(store: Store, uid: str, tmp_path: Path) -> None:
    # The eviction takes the index blocks that named the object, but the running session kept
    # them in memory as its index's chain: its next turn showed them to the model again, wrote a
    # patch against them (naming the evicted file once more) and no later frame verified.
    s, hook, fid, msgs = _index_patched_over_a_secret_name(store, uid, tmp_path)
    evict(store, fid)  # as another process would
    for n in range(2):
        context = hook.transform_context(msgs := [*msgs, say("ok"), user(f"after {n}")])
        assert SECRET not in _text(context)
        check = verify_frame(store, get_frame(store, uid, s.view.turn))
        assert check.ok, check.problems
    assert SECRET not in _everywhere(store) and SECRET.encode() not in _on_disk(store)
    s.close()


def _old_file_tombstone(tmp_path: Path) -> tuple[SqliteStore, Workspace, Path, str]:
    """A store whose only copy of ``SECRET`` is in the path an evicted file's tombstone keeps, as
    the code before 2026-11-30 wrote it: (store, workspace, the file, the tombstone's id)."""
    from context_os.objects import TombstoneDoc
    from context_os.store.base import Evict, Put, next_valid_time

    root = tmp_path / "ws"
    root.mkdir()
    leaked = root / f"{SECRET}.txt"
    leaked.write_text("notes\n")
    store = SqliteStore(tmp_path / "s.db")
    ws = Workspace(root, redact_patterns={}, redact_generic=False)
    with Session.open(store, "old", workspace=str(root), redact=False) as s:
        tools = FileTools(s, ws)
        fid = json.loads(tools.call("read", {"path": leaked.name}))["id"]
        OpenAIHook(s, files=tools).transform_context([user("read it")])
    evict(store, fid)
    tomb = store.get(tombstone_id(fid))
    assert tomb is not None and tomb.doc is not None
    meta = {k: v for k, v in tomb.doc["meta"].items() if k != "path_key"} | {"abs_path": str(leaked.resolve())}
    store.submit([Evict(tomb.id)])  # as the code before 2026-11-30 wrote it
    store.submit([Put(TombstoneDoc(id=tomb.id, content=tomb.doc["content"], meta=meta).to_doc(), next_valid_time())])
    assert SECRET in _everywhere(store)
    return store, ws, leaked, tomb.id


def test_evict_containing_takes_a_secret_name_out_of_a_tombstone_written_before(tmp_path: Path) -> None:
    # Tombstones of files written before 2026-11-30 keep the file's absolute path; --containing
    # left them as "a session's own record": a secret in a file's name stayed in the store for good.
    from click.testing import CliRunner

    from context_os.cli import cli

    store, ws, leaked, tomb_id = _old_file_tombstone(tmp_path)
    listed = CliRunner().invoke(cli, ["--store", str(store.path), "objects", "evict", "--containing", "-"], SECRET)
    assert f"{tomb_id}: 1 version(s) (its file path: --yes writes it anew with the path's hash" in listed.output
    r = CliRunner().invoke(cli, ["--store", str(store.path), "objects", "evict", "--containing", "-", "--yes"], SECRET)
    assert r.exit_code == 0, r.output
    assert SECRET not in _everywhere(store) and SECRET.encode() not in _on_disk(store)
    with Session.open(store, "new", workspace=str(leaked.parent), redact=False) as s:  # its bytes are still withheld
        assert json.loads(FileTools(s, ws).call("read", {"path": leaked.name}))["content_omitted"] == EVICTED_BYTES
    store.close()


def test_ctrl_c_while_a_tombstone_is_written_anew_leaves_it_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The old tombstone is evicted, then its new form put, in two transactions: Ctrl-C while the
    # eviction rebuilt the file left no tombstone at all, and the file's evicted bytes were
    # indexed again by the next read.
    store, ws, leaked, tomb_id = _old_file_tombstone(tmp_path)
    fold_back = SqliteStore._fold_back_wal

    def ctrl_c(self: SqliteStore, conn: sqlite3.Connection) -> bool:
        signal.raise_signal(signal.SIGINT)  # as the terminal sends it: the handler runs now
        return fold_back(self, conn)

    monkeypatch.setattr(SqliteStore, "_fold_back_wal", ctrl_c)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            forget_paths(store, SECRET)
    finally:
        signal.signal(signal.SIGINT, before)
    monkeypatch.setattr(SqliteStore, "_fold_back_wal", fold_back)  # (undo() also drops the user dirs conftest isolates)
    tomb = store.get(tomb_id)
    assert tomb is not None and tomb.doc is not None, "the tombstone is gone"
    assert "path_key" in tomb.doc["meta"] and SECRET not in _everywhere(store)
    with Session.open(store, "new", workspace=str(leaked.parent), redact=False) as s:  # its bytes are still withheld
        assert json.loads(FileTools(s, ws).call("read", {"path": leaked.name}))["content_omitted"] == EVICTED_BYTES
    store.close()


def test_ctrl_c_while_evict_containing_writes_a_tombstone_anew_says_it_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `objects evict --containing TEXT --yes` whose only holder was a tombstone written before
    # 2026-11-30, cut short while its old form was evicted (the file being rebuilt): it said
    # "interrupted: nothing was erased", though the old form, the path and the secret in it,
    # was erased and the new one written. It says what it did, and what finishes the rebuild.
    store, _, _, tomb_id = _old_file_tombstone(tmp_path)
    store.close()
    fold_back = SqliteStore._fold_back_wal

    def ctrl_c(self: SqliteStore, conn: sqlite3.Connection) -> bool:
        signal.raise_signal(signal.SIGINT)  # as the terminal sends it: the handler runs now
        return fold_back(self, conn)

    args = ["--store", str(store.path), "objects", "evict", "--containing", "-", "--yes"]
    monkeypatch.setattr(SqliteStore, "_fold_back_wal", ctrl_c)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cut = CliRunner().invoke(cli, args, SECRET)
    finally:
        signal.signal(signal.SIGINT, before)
    monkeypatch.setattr(SqliteStore, "_fold_back_wal", fold_back)  # (undo() also drops the user dirs conftest isolates)
    assert cut.exit_code == 130, cut.output
    said = cut.stderr.strip()
    assert said.startswith(f"interrupted: {tomb_id} written anew with a hash of the file's path in place of"), said
    assert said.endswith(": the same command run again finishes the erasure"), said
    with SqliteStore(store.path) as again:
        tomb = again.get(tomb_id)
        assert tomb is not None and tomb.doc is not None and "abs_path" not in tomb.doc["meta"]
        assert SECRET not in _everywhere(again)
    done = CliRunner().invoke(cli, args, SECRET)
    assert done.exit_code == 0, done.output
    assert SECRET.encode() not in store.path.read_bytes()


def test_ctxos_evict_from_another_process_while_a_session_runs(tmp_path: Path, reliability: Counts) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    s = Session.open(store, "live", redact=False)
    hook = OpenAIHook(s)
    msgs = [user("hi"), call("c1", "bash", command="cat .env"), result("c1", f"SECRET={SECRET}")]
    hook.transform_context(msgs)
    oid = next(v.id for v in store.find("toolcall", {"session": "live"}))
    ctxos = str(Path(sys.executable).parent / "ctxos")
    done = subprocess.run(
        [ctxos, "--store", str(path), "evict", oid, "--yes", "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tombstone"] == tombstone_id(oid)
    msgs += [say("ok"), user("next")]
    context = hook.transform_context(msgs)
    _count(reliability, store, context)
    assert SECRET not in _text(context)
    s.close()
    store.close()
    assert SECRET.encode() not in path.read_bytes()


def test_ctxos_evict_containing_erases_every_copy_of_a_text(tmp_path: Path, reliability: Counts) -> None:
    # A secret is rarely in one object: the agent read it with ``lines``, printed it again with
    # bash, quoted it in its answer. Evicting the object it first came in left every copy, and a
    # user had no way to find them all short of reading the store.
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    s = Session.open(store, "live", redact=False)
    hook = OpenAIHook(s)
    msgs = [user("hi"), call("c1", "bash", command="cat .env"), result("c1", f"SECRET={SECRET}\nMODE=prod")]
    hook.transform_context(msgs)
    quoted = hook.call_tool("lines", {"id": "toolcall:live:c1", "start": 1, "end": 1})
    msgs += [call("c2", "lines", id="toolcall:live:c1", start=1, end=1), result("c2", quoted)]
    msgs += [call("c3", "bash", command="env | grep SECRET"), result("c3", f"SECRET={SECRET}")]
    msgs += [say(f"The secret is {SECRET}."), user("thanks")]
    hook.transform_context(msgs)
    holders = {"toolcall:live:c1", "toolcall:live:c2", "toolcall:live:c3", "chat:live:00000"}
    ctxos = [str(Path(sys.executable).parent / "ctxos"), "--store", str(path), "objects", "evict"]
    listed = subprocess.run([*ctxos, "--containing", "-", "--json"], input=SECRET, capture_output=True, text=True)
    assert listed.returncode == 1, listed.stderr
    found = json.loads(listed.stdout)
    assert holders <= {o["id"] for o in found["objects"]} and found["evicted"] is False
    assert SECRET not in listed.stdout + listed.stderr  # never echoed back
    done = subprocess.run(
        [*ctxos, "--containing", "-", "--yes", "--json"], input=SECRET, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert holders <= set(json.loads(done.stdout)["evicted_ids"])
    assert SECRET not in _everywhere(store) and SECRET.encode() not in _on_disk(store)
    msgs += [say("ok"), user("next")]
    context = hook.transform_context(msgs)
    _count(reliability, store, context)
    assert SECRET not in _text(context) and "next" in _text(context)
    s.close()
    store.close()
    assert SECRET.encode() not in path.read_bytes()
    again = subprocess.run([*ctxos, "--containing", "-", "--json"], input=SECRET, capture_output=True, text=True)
    assert again.returncode == 0 and json.loads(again.stdout)["objects"] == []  # nothing left
    rerun = subprocess.run([*ctxos, "--containing", "-", "--yes"], input=SECRET, capture_output=True, text=True)
    nothing = "No object holds the text: nothing to erase (the store's files were rebuilt without what was erased).\n"
    assert rerun.returncode == 0 and rerun.stdout == nothing


def test_evict_containing_finds_a_deleted_recall_copy_whose_query_held_the_text(tmp_path: Path) -> None:
    # A recall copy keeps the query that found it (meta.query: the user's message). Once its
    # origin was gone (a deleted memory topic file) it was deleted, and ``--containing`` looked
    # at the deleted objects whose *indexed text* held the text only: the copy's text did not, so
    # the message's secret stayed in its history, in the file, and a second run found nothing.
    from click.testing import CliRunner

    from context_os.cli import cli
    from context_os.sources.memory import MemoryScopes

    memory = tmp_path / "data" / "memory"
    memory.mkdir(parents=True)
    (memory / "MEMORY.md").write_text("# Memory\n- see deploy.md\n")
    topic = memory / "deploy.md"
    topic.write_text("# Deploy\n- the staging deploy uses the vault key, rotated weekly\n")
    store = SqliteStore(tmp_path / "s.db")
    s = Session.open(store, "live", redact=False, policy=RetentionPolicy(**EAGER))
    hook = OpenAIHook(s)
    SourceTools(s, recall=open_recall(store, None), memory=MemoryScopes(data_dir=tmp_path / "data"))
    msgs = [user("hello"), say("hi"), user(f"is the staging deploy vault key {SECRET}?")]
    hook.transform_context(msgs)
    copy = "recall:memory:global:deploy.md#L1-2"
    assert SECRET in store.doc(copy)["meta"]["query"]
    topic.unlink()
    hook.transform_context([*msgs, say("ok"), user("fine")])
    assert store.get(copy) is None and store.history(copy), "the copy was deleted, its history stays"
    args = ["--store", str(store.path), "objects", "evict", "--containing", "-", "--yes", "--json"]
    r = CliRunner().invoke(cli, args, SECRET)
    assert r.exit_code == 0, r.output
    assert copy in json.loads(r.output)["evicted_ids"]
    assert not store.history(copy) and SECRET.encode() not in _on_disk(store)
    s.close()
    store.close()


READER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN")
conn.execute("SELECT count(*) FROM versions").fetchall()  # holds this snapshot until told
print("reading", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


def test_an_eviction_a_reader_keeps_from_the_file_says_so(tmp_path: Path) -> None:
    # Another process reading an older snapshot of the file (a backup, a long report) keeps the
    # checkpoint after the eviction from folding the log back: the evicted bytes stay in the
    # file. The eviction used to wait the writers' whole busy timeout holding the write lock (a
    # running session's next turn failed with "database is locked") and then say nothing.
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    store.SCRUB_WAIT_S = 0.2
    s = Session.open(store, "live", redact=False)
    hook = OpenAIHook(s)
    msgs = [user("hi"), call("c1", "bash", command="cat .env"), result("c1", f"SECRET={SECRET}")]
    hook.transform_context(msgs)
    oid = next(v.id for v in store.find("toolcall", {"session": "live"}))
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "reading"
        done = evict(store, oid)
        assert done["evicted"] and done["left_in_files"]
        assert SECRET.encode() in _on_disk(store)  # what it reports
        assert SECRET not in _everywhere(store)
    finally:
        reader.communicate("done\n", timeout=60)
    assert reader.returncode == 0
    msgs += [say("ok"), user("next")]
    assert SECRET not in _text(hook.transform_context(msgs))  # the session writes on meanwhile
    s.close()
    store.close()  # the last process closing the store folds the log back
    assert SECRET.encode() not in _on_disk(store)
    again = SqliteStore(path)
    try:  # and with no reader in the way, an eviction leaves nothing behind
        hook = OpenAIHook(s := Session.open(again, "live", redact=False))
        hook.transform_context([*msgs, say("ok"), call("c2", "bash", command="env"), result("c2", f"K={SECRET}")])
        oid = next(v.id for v in again.find("toolcall", {"session": "live"}) if "c2" in v.id)
        assert not evict(again, oid)["left_in_files"]
        assert SECRET.encode() not in _on_disk(again)
        s.close()
    finally:
        again.close()


@pytest.mark.parametrize("how", ["id", "containing"])
def test_ctrl_c_while_an_eviction_rebuilds_the_file_says_what_is_left_and_what_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # Ctrl-C while `ctxos objects evict --yes` rebuilt the file (the eviction committed, the
    # rebuild not done) said only "interrupted": nothing told that the object was erased but its
    # bytes may still be in the file, and no command finished the erasure (the same one run again
    # said there was nothing left to erase and left the file as it was).
    path = tmp_path / "s.db"
    with SqliteStore(path) as store:
        hook = OpenAIHook(s := Session.open(store, "live", redact=False))
        hook.transform_context([user("hi"), call("c1", "bash", command="cat .env"), result("c1", f"K={SECRET}")])
        oid = next(v.id for v in store.find("toolcall", {"session": "live"}))
        s.close()
    keep = sqlite3.connect(path)  # another process's idle connection: a reader leaving folds nothing back
    keep.execute("SELECT count(*) FROM txs").fetchall()  # (a connection that never read is not counted)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    fold_back = SqliteStore._fold_back_wal

    def ctrl_c(self: SqliteStore, conn: sqlite3.Connection) -> bool:
        signal.raise_signal(signal.SIGINT)  # as the terminal sends it: the handler runs now
        return fold_back(self, conn)

    args = ["--store", str(path), "objects", "evict", *([oid] if how == "id" else ["--containing", "-"]), "--yes"]
    monkeypatch.setattr(SqliteStore, "_fold_back_wal", ctrl_c)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "reading"
        cut = CliRunner().invoke(cli, args, SECRET)
    finally:
        signal.signal(signal.SIGINT, before)
        reader.communicate("done\n", timeout=60)
    monkeypatch.setattr(SqliteStore, "_fold_back_wal", fold_back)  # (undo() also drops the user dirs conftest isolates)
    try:
        assert cut.exit_code == 130, cut.output
        said = cut.stderr.strip()
        assert said.startswith(f"interrupted: {oid} erased, but the erased bytes may still be in the files of"), said
        assert SECRET.encode() in path.read_bytes()  # what it says
        again = f"`ctxos --store {path} objects evict {oid} --yes`" if how == "id" else "the same command run again"
        assert said.endswith(f": {again} finishes the erasure"), said
        done = CliRunner().invoke(cli, args, SECRET)
        assert done.exit_code == 0, done.output
        assert SECRET.encode() not in path.read_bytes() + path.with_name("s.db-wal").read_bytes()
    finally:
        keep.close()


@pytest.mark.xtdb
def test_ctrl_c_in_an_eviction_on_xtdb_names_the_keyword_index_and_the_command_run_again_clears_it(
    xtdb_url: str, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C once the node took the eviction, before the keyword index beside the store heard of
    # it: the index kept the evicted text. The message named "the files of xtdb+http://…" as if
    # the node's, and the command it named, run again, said "the store's files were rebuilt"
    # and left the text in the index. It names the keyword index, and run again it drops it.
    from context_os.store import node_file, open_store
    from context_os.store.xtdb import XtdbStore

    # (not SECRET: other tests look for it everywhere on the shared node)
    oid, secret = f"toolcall:{uid}:c1", f"Kq7-cut-short-{uid}"
    with open_store(xtdb_url) as store:
        store.put({"id": oid, "kind": "toolcall", "content": f"K={secret}", "meta": {"session": uid}})
        assert oid in [h.id for h in store.text_search(secret)]  # (indexed now; others on the node may hold "cut")
    index = node_file("text-index", xtdb_url)

    def in_index() -> bool:
        wal = index.with_name(index.name + "-wal")
        return secret.encode() in index.read_bytes() + (wal.read_bytes() if wal.exists() else b"")

    assert in_index()
    submitted = XtdbStore._submitted

    def ctrl_c(self: XtdbStore, *args: Any, **kwargs: Any) -> Any:
        signal.raise_signal(signal.SIGINT)  # as the terminal sends it, once the node answered
        return submitted(self, *args, **kwargs)

    args = ["--store", xtdb_url, "objects", "evict", oid, "--yes"]
    monkeypatch.setattr(XtdbStore, "_submitted", ctrl_c)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cut = CliRunner().invoke(cli, args)
    finally:
        signal.signal(signal.SIGINT, before)
        monkeypatch.setattr(XtdbStore, "_submitted", submitted)  # (undo() would drop the test's own user dirs too)
    assert cut.exit_code == 130, cut.output
    said = cut.stderr.strip()
    assert said.startswith(f"interrupted: {oid} erased, but the erased bytes may still be in the files of"), said
    assert "on this machine (an SQLite store's file, an XTDB store's keyword index" in said, said
    assert in_index()  # what it says
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert not in_index()


def _shown_again(store: Store, uid: str, output: str, activated: int) -> None:
    """A session ``uid`` whose first tool output (``output``) collapsed with the next few, then the
    first ``activated`` of them were activated (blocks of the active pool): with two, the last two
    frames show them (a frame between), with one, the last frame."""
    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**EAGER))
    hook = OpenAIHook(s)
    msgs = [user("show env"), call("c1", "bash", command="env"), result("c1", output)]
    for n in range(2, 7):  # the first outputs collapse
        hook.transform_context(msgs)
        msgs += [call(f"c{n}", "bash", command="ls"), result(f"c{n}", f"file{n}.txt")]
    for n in range(1, activated + 1):
        hook.call_tool("activate", {"id": f"toolcall:{uid}:c{n}"})
    if activated > 1:
        hook.transform_context(msgs)
    hook.transform_context([*msgs, say("ok"), user("next")])
    s.close()


def _activated_then_evicted(store: Store, uid: str) -> str:
    """A session whose last two frames show two tool outputs in blocks of the active pool (the
    agent activated them), the first evicted since; its id."""
    _shown_again(store, uid, f"TOKEN={SECRET}", 2)
    oid = f"toolcall:{uid}:c1"
    assert SECRET in json.dumps(verify_frame(store, frame_docs(store, uid)[-1]).rendered.messages)
    evict(store, oid, reason="leaked")
    return oid


def test_a_frame_whose_block_was_evicted_re_renders_all_the_rest(store: Store, uid: str) -> None:
    """A frame that showed an evicted object in a block of its active pool re-rendered nothing:
    the missing block stopped the re-render, so ``frames show`` and the web view listed no
    messages, and nothing else of it was checked. Now everything else re-renders, the block shows
    as erased, and what could still be checked part by part is, and said."""
    oid = _activated_then_evicted(store, uid)
    frame = frame_docs(store, uid)[-1]
    check = verify_frame(store, frame)
    assert not check.ok and check.evicted_only and check.evicted == [oid], check.problems
    assert check.rendered is not None and check.basis is not None
    texts = [str(m.get("text")) for m in check.rendered.messages]
    assert texts[0] == "show env" and texts[-1] == "next" and len(texts) == frame["content"]["messages"]
    assert EVICTED_BLOCK in texts and SECRET not in json.dumps(check.rendered.messages)
    assert check.checked is not None and "cannot be checked" in check.checked
    refs = sum(1 for r in frame["content"]["refs"] if "sealed_pages" not in r)
    assert f"{refs - 1} of {refs} static refs" in check.checked
    with pytest.raises(NotFound, match="evicted"):  # exactly as it was: not any more
        rerender(store, frame)


def test_a_block_evicted_by_its_own_id_leaves_its_frames_evicted_not_damaged(store: Store, uid: str) -> None:
    """``objects evict block:…`` (or ``--containing``, for a block no object took along): its
    tombstone listed no block, so every frame that showed it failed as damaged (`block … is not in
    the store`, MISMATCH, exit 1) after an eviction made on purpose. Its tombstone names it now:
    those frames are marked as having shown what was evicted, and nothing else of them is excused."""
    # (not SECRET: the output stays on the shared node, where other tests look for SECRET everywhere)
    _shown_again(store, uid, f"TOKEN=block-{uid}", 1)
    frame = frame_docs(store, uid)[-1]
    shown = [b[1] for b in frame["content"]["blocks"] if store.doc(b[1])["meta"]["object"] == f"toolcall:{uid}:c1"]
    assert shown and verify_frame(store, frame).ok
    evict(store, shown[0], reason="leaked")
    check = verify_frame(store, frame)
    assert not check.ok and check.evicted_only and check.evicted == [shown[0]], check.problems
    assert check.checked is not None and "cannot be checked" in check.checked


@pytest.mark.parametrize("damage", ["an object it names", "a block it kept", "a block's text"])
def test_damage_beside_an_eviction_is_still_reported(store: Store, uid: str, damage: str) -> None:
    """A frame that showed what was evicted since was counted as evicted (no damage) whatever else
    of it changed: once a block it showed was missing nothing else was checked, and once a ref was
    evicted its blocks were not. They are now, and damage there fails it."""
    _activated_then_evicted(store, uid)
    frame = frame_docs(store, uid)[-1]
    assert verify_frame(store, frame).evicted_only
    kept = next(b for b in frame["content"]["blocks"] if store.doc(b[1]) is not None)
    if damage == "an object it names":  # erased behind the store's back: no tombstone says why
        store.submit([Evict(f"toolcall:{uid}:c6")])
        wrong = f"static ref toolcall:{uid}:c6 @ tx"
    elif damage == "a block it kept":
        store.submit([Evict(kept[1])])
        wrong = f"block {kept[1]} of {frame['id']} is not in the store"
    else:
        if not isinstance(store, SqliteStore):
            pytest.skip("changes a stored document in place: the SQLite file's row")
        doc = store.doc(kept[1])
        doc["content"] = doc["content"].replace("\n", "\n(changed)\n", 1)
        doc |= doc_hashes(doc)  # a consistent document: only the frame knows what it showed
        store._conn.execute(  # noqa: SLF001
            "UPDATE docs SET json = ? WHERE json LIKE ?", (json.dumps(doc), f'%"id":"{kept[1]}"%')
        )
        store._conn.commit()  # noqa: SLF001
        wrong = f"block {kept[1]} of {frame['id']} does not hash to {kept[2]}"
    check = verify_frame(store, frame)
    assert not check.ok and not check.evicted_only and check.evicted == [], check.problems
    assert any(p.startswith(wrong) for p in check.problems), check.problems


def _as_written_before_block_lists(store: Store, oid: str) -> int:
    """The tombstone of ``oid`` as context_os wrote it before tombstones listed the blocks they
    erased (a count only); that count."""
    from context_os.store.base import Put, next_valid_time

    tomb = store.doc(tombstone_id(oid))
    assert tomb is not None
    content = {k: v for k, v in tomb["content"].items() if k != "block_ids"}
    old = {**tomb, "content": content}
    store.submit([Put(old | doc_hashes(old), next_valid_time())])
    return int(content["blocks"])


@pytest.mark.parametrize("damage", ["deleted", "erased"])
def test_a_tombstone_without_its_block_list_excuses_no_more_than_it_erased(store: Store, uid: str, damage: str) -> None:
    """A tombstone written before tombstones listed the blocks they erased excused every missing
    block of every frame of its session, damage included. It now excuses only blocks the store
    erased (a deleted block's history is still there: not an eviction), no more of them than it
    says it erased, and the check says that it took them to be those."""
    from context_os.context.frames import verify_frames
    from context_os.store.base import Delete

    oid = _activated_then_evicted(store, uid)
    count = _as_written_before_block_lists(store, oid)
    frames = frame_docs(store, uid)
    checks = list(verify_frames(store, frames, jobs=1))
    lost = [c for c in checks if not c.ok]
    assert lost and all(c.evicted_only and c.evicted == [oid] for c in lost), [c.problems for c in lost]
    assert any("does not list the blocks it erased" in p for p in lost[-1].problems), lost[-1].problems
    kept = next(b for b in frames[-1]["content"]["blocks"] if store.doc(b[1]) is not None)
    # blocks the tombstone did not erase go missing behind the store's back: one deleted (its
    # history stays), or more of them erased than the tombstone says it erased
    more = [kept[1]]
    if damage == "erased":
        shown = {b[1] for f in frames for b in f["content"].get("blocks", [])}
        more = sorted(b for b in shown if store.doc(b) is not None)[: count + 1]
    store.submit([Delete(b) if damage == "deleted" else Evict(b) for b in more])
    checks = list(verify_frames(store, frames, jobs=1))
    assert any(not c.ok and not c.evicted_only for c in checks), [(c.frame_id, c.problems) for c in checks]


def test_a_check_of_many_frames_that_lost_blocks_reads_the_tombstones_once(
    store: Store, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each frame that lost a block read every tombstone of the store again to find which one
    erased it: on an XTDB node after many evictions a check crawled. A pass reads them once, and
    again only after the store took a transaction (an eviction meanwhile)."""
    from context_os.context.frames import verify_frames

    oid = _activated_then_evicted(store, uid)
    frames = frame_docs(store, uid)
    find, reads = store.find, []

    def counted(kind: str | None = None, where: Any = None, **kw: Any) -> Any:
        if kind == "tombstone" and not where:
            reads.append(kind)
        return find(kind, where, **kw)

    monkeypatch.setattr(store, "find", counted)
    checks = list(verify_frames(store, frames, jobs=1))
    losing = [c for c in checks if any(p.startswith("block ") for p in c.problems)]
    assert len(losing) >= 2 and all(c.evicted == [oid] for c in losing), [c.problems for c in checks]
    assert len(reads) == 1
    for check in verify_frames(store, frames, jobs=1):
        if check.frame_id == losing[0].frame_id:  # an eviction in the middle of a pass: read again
            evict(store, f"toolcall:{uid}:c2", reason="leaked too")
    assert len(reads) == 3


def test_damage_to_a_page_written_back_after_its_eviction_is_not_excused_by_it(store: Store, uid: str) -> None:
    """A chat page evicted from a live session is written back scrubbed, and later frames show
    that page. Its tombstone, written before those frames were, excused any later damage to the
    page: a frame that cannot have shown what the eviction erased was counted as evicted, not
    damaged. Only an eviction after a frame's basis explains what the frame lost."""
    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**EAGER))
    hook = OpenAIHook(s)
    msgs = [user(f"the deploy password is {SECRET}")]
    for n in range(12):
        msgs += [call(f"c{n}", "bash", command="ls"), result(f"c{n}", f"file{n}.txt")]
    hook.transform_context(msgs)
    evict(store, f"chat:{uid}:00000")
    msgs += [say("noted"), user("go on")]
    hook.transform_context(msgs)
    s.close()
    frame = get_frame(store, uid, s.view.turn)
    assert verify_frame(store, frame).ok
    store.submit([Evict(f"chat:{uid}:00000")])  # the page written back, erased behind the store's back
    check = verify_frame(store, frame)
    assert not check.ok and not check.evicted_only and check.evicted == [], check.problems


def test_an_eviction_after_a_frame_by_a_host_whose_clock_runs_behind_still_explains_it(
    store: Store, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An eviction in a transaction after a frame's explains what the frame lost, whatever the
    clock of the host that evicted said (hosts sharing a store agree to within a tenth of a
    lease, a minute): one 30 s behind wrote a tombstone whose time was before the frame's valid
    time, and the frame that showed the evicted output was counted as damaged."""
    import context_os.context.evict as evict_module

    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**EAGER))
    hook = OpenAIHook(s)
    msgs = [user("show env"), call("c1", "bash", command="env"), result("c1", f"TOKEN={SECRET}")]
    hook.transform_context(msgs)
    msgs += [say("ok"), user("next")]
    hook.transform_context(msgs)
    s.close()
    real = evict_module.now_ms
    monkeypatch.setattr(evict_module, "now_ms", lambda: real() - 30_000)
    oid = f"toolcall:{uid}:c1"
    evict(store, oid, reason="leaked")
    after = [verify_frame(store, f) for f in frame_docs(store, uid)]
    assert [c.evicted for c in after] == [[oid], [oid]] and all(c.evicted_only for c in after), [
        c.problems for c in after
    ]


class _EvictsDuringATurn:
    """A source that, when consulted at the given turn, evicts an object: another process's
    eviction landing while the turn assembles (after it looked at what others wrote, before it
    writes its frame)."""

    name = "evicts"

    def __init__(self, store: Store, oid: str, at_call: int):
        self.store, self.oid, self.at_call, self.calls = store, oid, at_call, 0

    def items(self, query: str, budget_tokens: int) -> list[Any]:
        self.calls += 1
        if self.calls == self.at_call:
            evict(self.store, self.oid, reason="leaked")
        return []


def test_an_eviction_that_lands_while_a_turn_assembles_explains_its_frame(store: Store, uid: str) -> None:
    # the frame shows what it read before the eviction, and is written after it: its check took
    # the erased output for damage (the eviction's transaction and time both before the frame's)
    s = Session.open(store, uid, redact=False, policy=RetentionPolicy(**EAGER))
    oid = f"toolcall:{uid}:c1"
    s.add_source(_EvictsDuringATurn(store, oid, at_call=2), every_turn=True)
    hook = OpenAIHook(s)
    msgs = [user("show env"), call("c1", "bash", command="env"), result("c1", f"TOKEN={SECRET}")]
    hook.transform_context(msgs)
    msgs += [say("ok"), user("next")]
    shown = hook.transform_context(msgs)  # assembled while the eviction lands
    assert SECRET in _text(shown)  # it read the output before the eviction: the model saw it
    later = hook.transform_context([*msgs, say("fine"), user("and now?")])
    assert SECRET not in _text(later)  # the next turn takes the eviction in
    s.close()
    checks = [verify_frame(store, f) for f in frame_docs(store, uid)]
    assert [c.evicted for c in checks[:2]] == [[oid], [oid]], [c.problems for c in checks]
    assert all(c.evicted_only for c in checks[:2]) and checks[2].ok, [c.problems for c in checks]


def test_a_block_taken_as_erased_by_an_old_tombstone_is_looked_up_once_a_pass(
    store: Store, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing block that a tombstone written before block lists is taken to have erased had
    its history read again for every frame that lost it (one request per frame and block on an
    XTDB node, where reading the tombstones once per pass was meant to keep a check of many such
    frames quick): a block taken in the pass is taken again without it."""
    from context_os.context.frames import verify_frames

    oid = _activated_then_evicted(store, uid)
    _as_written_before_block_lists(store, oid)
    frames = frame_docs(store, uid)
    history, asked = store.history, []

    def counted(id: str, *args: Any, **kw: Any) -> Any:
        if id.startswith("block:"):
            asked.append(id)
        return history(id, *args, **kw)

    monkeypatch.setattr(store, "history", counted)
    checks = list(verify_frames(store, frames, jobs=1))
    lost = [c for c in checks if not c.ok]
    assert len(lost) >= 2 and all(c.evicted_only and c.evicted == [oid] for c in lost), [c.problems for c in lost]
    assert asked and len(asked) == len(set(asked)), asked


def test_frames_checked_beside_a_tombstone_without_its_block_list_are_checked_in_one_process(
    store: Store, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tombstone written before tombstones listed their blocks is taken to have erased no more
    blocks in a check than its count; the worker processes of a large check each kept a count of
    their own, so that with eight of them it excused up to eight times as many missing blocks.
    Such a store's frames are checked in one process."""
    import context_os.context.frames as frames_module

    oid = _activated_then_evicted(store, uid)
    frames = frame_docs(store, uid)
    monkeypatch.setattr(frames_module, "PARALLEL_FROM", 1)
    _as_written_before_block_lists(store, oid)

    def no_pool(*args: Any, **kw: Any) -> Any:
        raise AssertionError("worker processes would each take the tombstone's count of blocks")

    monkeypatch.setattr(frames_module, "ProcessPoolExecutor", no_pool)
    checks = list(frames_module.verify_frames(store, frames, jobs=2))
    lost = [c for c in checks if not c.ok]
    assert lost and all(c.evicted_only and c.evicted == [oid] for c in lost), [c.problems for c in lost]
