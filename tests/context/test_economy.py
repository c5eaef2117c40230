"""The context economy: blocks that change are patched in place of re-sent, a change that breaks
the prompt cache waits until the break pays, small sessions pass through unchanged, the active
pool keeps the files most recently used (a tool touching them, a message naming them), and
collapsed results name short refs. Real SQLite stores, the real OpenAI hook and file tools."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_os import RetentionPolicy, Session
from context_os.context.evict import evict
from context_os.context.frames import frame_docs, get_frame, verify_frame
from context_os.context.load import object_states
from context_os.context.policy import plan_break, retention_due
from context_os.context.view import (
    PATCH_MIN_TOKENS,
    TAIL_CLOSE,
    TAIL_OPEN,
    ObjInfo,
    _patch_text,
    _patched,
    active_text,
)
from context_os.errors import ConfigError, NotFound
from context_os.files import FileTools, Workspace
from context_os.harness.openai import OPENAI_PAIRING, OpenAIHook
from context_os.harness.pairing import pairing_problems
from context_os.objects import SourceDoc
from context_os.store.sqlite import SqliteStore
from tests.helpers import EAGER, apply_patch, call, result, say, shown_blocks, stub_ref, user


@pytest.fixture
def db(tmp_path: Path):
    s = SqliteStore(tmp_path / "s.db")
    yield s
    s.close()


def hook_for(store: SqliteStore, sid: str = "e1", **policy) -> OpenAIHook:
    """Managed from the first call; otherwise the default policy (prompt-cache aware)."""
    settings_ = {"manage_from_tokens": 0, **policy}
    return OpenAIHook(Session.open(store, sid, harness="openai", policy=RetentionPolicy(**settings_)))


def note(version: int, text: str, name: str = "notes") -> dict:
    return SourceDoc(id=f"memory:{name}", kind="memory", content=text, meta={"name": name, "version": version}).to_doc()


def texts(out: list[dict]) -> list[str]:
    return [str(m.get("content") or "") for m in out]


def lines(n: int, changed: dict[int, str] | None = None) -> str:
    return "\n".join((changed or {}).get(k, f"line {k:03d} of the plan, unchanged") for k in range(n))


# --- patches ---------------------------------------------------------------------------------------

block_lines = st.lists(
    st.sampled_from(["a", "b", "c", "", "x = 1", "@@ -1 +1 @@", " lead", "-dash", "+plus", "---", "--x", "++i", "+++"])
)


@settings(max_examples=300, deadline=None)
@given(old=block_lines, new=block_lines)
def test_a_patch_applied_to_what_the_blocks_showed_gives_the_new_text(old: list[str], new: list[str]) -> None:
    def block(body: list[str]) -> str:
        return "\n".join([TAIL_OPEN, "Active content:", '<object id="memory:x" kind="memory">', *body, TAIL_CLOSE])

    before, after = block(old), block(new)
    patch = _patch_text("memory:x", before, after, None)
    assert shown_blocks([before, patch])["memory:x"] == after
    assert _patched("memory:x", before, patch) == after  # what a resumed session reads its blocks as
    assert patch.startswith(TAIL_OPEN + "\nmemory:x changed: ") and patch.endswith(TAIL_CLOSE)


def test_a_block_that_only_became_stale_says_still_for_any_path_and_layout_9_re_renders_as_it_was() -> None:
    # layout 9 read a block's head up to the path's first quote: for `the "new" app.py` it said
    # "now version 1"; a frame of that layout re-renders what it showed, a new one says "still"
    def block(stale: str) -> str:
        head = f'<object id="file:a" kind="file" path="the "new" app.py" version="1"{stale}>'
        return "\n".join([TAIL_OPEN, "Active content:", head, "x = 1", "</object>", TAIL_CLOSE])

    obj = ObjInfo("file:a", "file", {"version": 1}, newer={"version": 2})
    before, after = block(""), block(' stale="true"')
    assert "(still version 1; version 2 is newer)" in _patch_text("file:a", before, after, obj)
    assert "(now version 1)" in _patch_text("file:a", before, after, obj, layout=9)


def test_a_removed_markdown_rule_stays_in_its_patch_and_layout_11_re_renders_as_it_was() -> None:
    # a diff's line "----" (a "---" removed) was dropped with the diff's "--- " header: the patch
    # sent did not apply to the block it patched; a frame of layout 11 re-renders what it sent
    def block(body: list[str]) -> str:
        return "\n".join([TAIL_OPEN, "Active content:", '<object id="memory:x" kind="memory">', *body, TAIL_CLOSE])

    before, after = block(["# plan", "", "---", "", "## WP3", "x"]), block(["# plan", "", "## WP3", "x"])
    patch = _patch_text("memory:x", before, after, None)
    assert "\n----\n" in patch and _patched("memory:x", before, patch) == after
    old = _patch_text("memory:x", before, after, None, layout=11)
    assert "\n----\n" not in old and _patched("memory:x", before, old) is None


def test_apply_patch_refuses_a_patch_of_another_text() -> None:
    with pytest.raises(AssertionError):
        apply_patch("a\nb\nc", ["@@ -2 +2 @@", "-z", "+y"])
    patch = "\n".join([TAIL_OPEN, "memory:x changed: a patch of its block above, the rest of it stands:"])
    assert _patched("memory:x", "a\nb\nc", "\n".join([patch, "@@ -2 +2 @@", "-z", "+y", TAIL_CLOSE])) is None


def test_a_changed_block_is_patched_at_the_end_and_everything_before_it_is_sent_again_as_it_was(db) -> None:
    db.put(note(1, lines(80)))
    hook = hook_for(db)
    hook.session.show("memory:notes")
    msgs = [user("plan it")]
    first = hook.transform_context(msgs)
    db.put(note(2, lines(80, {40: "line 040 of the plan, CHANGED"})))
    assert hook.session.show("memory:notes")["status"] == "updated"
    msgs += [say("ok"), user("go on")]
    second = hook.transform_context(msgs)
    patch = second[-2]["content"]  # the patch, then the index (which changed too)
    assert second[: len(first) - 1] == first[:-1]  # the note's block and all before it: sent as they were
    assert "memory:notes (now version 2) changed: a patch of its block above" in patch
    base = next(t for t in texts(first) if "memory:notes" in t and "Active content:" in t)
    assert "+line 040 of the plan, CHANGED" in patch and len(patch) < len(base) // 4
    shown = shown_blocks(texts(second))["memory:notes"]
    assert "line 040 of the plan, CHANGED" in shown and "line 040 of the plan, unchanged" not in shown
    assert not pairing_problems(OPENAI_PAIRING, second)
    # a frame names the blocks it showed; they are stored, so it re-renders exactly
    frame = frame_docs(db, hook.session.id)[-1]
    assert len(frame["content"]["blocks"]) >= 3 and frame["content"]["tail_layout"] == 2
    assert all(db.doc(block_id)["kind"] == "block" for _, block_id, _ in frame["content"]["blocks"])
    assert all(verify_frame(db, f).ok for f in frame_docs(db, hook.session.id))


def test_a_small_object_that_changed_is_shown_whole_where_a_patch_would_be_longer(db) -> None:
    db.put(note(1, "plan: a"))
    hook = hook_for(db)
    hook.session.show("memory:notes")
    msgs = [user("hi")]
    hook.transform_context(msgs)
    db.put(note(2, "plan: b"))
    hook.session.show("memory:notes")
    msgs += [say("ok"), user("and")]
    out = hook.transform_context(msgs)
    replaced = next(t for t in texts(out) if "memory:notes (now version 2) changed: this replaces" in t)
    assert "plan: b" in replaced and "@@" not in replaced
    assert "plan: b" in shown_blocks(texts(out))["memory:notes"]


def test_patches_that_outgrow_their_base_show_the_object_anew(db) -> None:
    db.put(note(1, lines(40)))
    hook = hook_for(db)
    hook.session.show("memory:notes")
    msgs = [user("hi")]
    hook.transform_context(msgs)
    for v in range(2, 12):  # each version rewrites a third of the lines: patches soon outweigh the base
        db.put(note(v, lines(40, {k: f"line {k:03d} rewritten in version {v}" for k in range(v % 3, 40, 3)})))
        hook.session.show("memory:notes")
        msgs += [say(f"v{v}"), user("next")]
        out = hook.transform_context(msgs)
    blocks = [t for t in texts(out) if t.startswith(TAIL_OPEN) and "memory:notes" in t.split("\n")[1 + 1][:40]]
    patches = [t for t in texts(out) if "memory:notes (now version" in t]
    assert len(blocks) + len(patches) < 10  # shown anew along the way, not ten patches deep
    shown = shown_blocks(texts(out))["memory:notes"]
    assert "rewritten in version 11" in shown and "rewritten in version 10" not in shown
    assert all(verify_frame(db, f).ok for f in frame_docs(db, hook.session.id))


# --- when a change that costs the cache is taken -----------------------------------------------------


def test_plan_break_takes_the_earliest_break_that_fits_the_allowance_and_pays() -> None:
    after = {0: 10_000, 5: 4_000, 8: 1_000, 10: 0}.__getitem__
    # nothing wants a break: the end
    assert plan_break([], 10, after, allowance=100_000, payback_calls=20) == 10
    # both pay and fit: the earliest
    assert plan_break([(5, 300), (8, 100)], 10, after, allowance=100_000, payback_calls=20) == 5
    # the allowance only fits the later one
    assert plan_break([(5, 300), (8, 100)], 10, after, allowance=2_000, payback_calls=20) == 8
    # it would fit but frees too little per call to pay back the tokens it re-sends
    assert plan_break([(5, 10)], 10, after, allowance=100_000, payback_calls=20) == 10
    # a break a chain forces anyway stands; one before it is weighed beyond it only
    assert plan_break([(5, 300)], 8, after, allowance=3_000, payback_calls=20) == 5
    # a change that re-sends nothing is taken even with the allowance spent
    assert plan_break([(10, 1)], 10, after, allowance=-500, payback_calls=20) == 10
    # what a break takes out is not re-sent: 4,000 stand from 5 on, 3,000 of them collapse
    assert plan_break([(5, 3_000)], 10, after, allowance=1_000, payback_calls=20) == 5
    assert plan_break([(5, 2_999)], 10, after, allowance=1_000, payback_calls=20) == 10
    # whatever the allowance: one that frees ten times what it re-sends
    assert plan_break([(5, 3_640)], 10, after, allowance=-500, payback_calls=20) == 5  # re-sends 360
    assert plan_break([(5, 3_630)], 10, after, allowance=-500, payback_calls=20) == 10  # re-sends 370


def test_a_due_collapse_waits_while_the_cache_is_worth_more_then_goes(db) -> None:
    hook = hook_for(db, keep_recent_results=10)
    msgs = [user("go"), call("c0", command="cat big"), result("c0", "first\n" + "x" * 8000)]
    hook.transform_context(msgs)
    for n in range(1, 5):
        msgs += [call(f"c{n}", command="ls"), result(f"c{n}", f"out {n}\n" + "y" * 1200)]
        out = hook.transform_context(msgs)
    big = hook.session.view.objects["toolcall:e1:c0"]
    assert not big.collapsed  # due by age, but collapsing it would send all that follows anew
    previous = out
    collapsed_at = None
    for n in range(5, 80):  # calls with little new: the cache has done its work, a break now pays
        msgs += [say(f"step {n}"), user("go on")]
        out = hook.transform_context(msgs)
        if big.collapsed and collapsed_at is None:
            collapsed_at = n
            kept = next(k for k, (a, b) in enumerate(zip(previous, out, strict=False)) if a != b)
            assert out[kept]["role"] == "tool" and stub_ref(out[kept]["content"]) is not None
        previous = out
    assert collapsed_at is not None and collapsed_at > 5
    reason = hook.session.state_changes("toolcall:e1:c0")[-1].doc["meta"]["reason"]
    assert reason.endswith("turns old")
    assert all(verify_frame(db, f).ok for f in frame_docs(db, hook.session.id))


def _live_and_resumed(db, calls: int, varied: bool) -> tuple[list[list[dict]], list[list[dict]]]:
    """What one session sends at each of ``calls`` calls, run through (``live``) and reopened
    after its 5th call (``resumed``): tool results of 1,200 characters (``varied``: 1,200-6,200,
    a user message every 9 calls), a note shown, a big first result that waits for a break."""
    db.put(note(1, lines(30)))

    def run(sid: str, reopen_after: int | None) -> list[list[dict]]:
        hook = hook_for(db, sid, keep_recent_results=10)
        hook.session.show("memory:notes")
        msgs = [user("go"), call("c0", command="cat big"), result("c0", "first\n" + "x" * 8000)]
        outs = [hook.transform_context(msgs)]
        for n in range(1, calls):
            size = 1200 + (n * 7919 % 5000 if varied else 0)
            msgs += [call(f"c{n}", command="ls"), result(f"c{n}", f"out {n}\n" + "y" * size)]
            if varied and n % 9 == 0:
                msgs.append(user(f"next step {n}"))
            if n == reopen_after:
                hook.session.close()
                hook = hook_for(db, sid, keep_recent_results=10)
            outs.append(hook.transform_context(msgs))
        hook.session.close()
        return outs

    live, resumed = run("live", None), run("resumed", 5)
    for k, (a, b) in enumerate(zip(live, resumed, strict=True)):
        assert json.dumps(a).replace('"toolcall:live:', '"toolcall:resumed:') == json.dumps(b), k
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "resumed"))
    return live, resumed


def test_a_resumed_session_sends_what_the_live_one_would_have(db) -> None:
    """A session reopened (a proxy or server restarted between two calls) keeps its blocks where
    its last frame showed them and knows what that frame sent: its next calls send what the
    session would have sent had it not stopped. Before, its first call showed every block anew at
    the end and, taking the whole context as not sent, every change waiting for a break that pays
    (a break looked free): the prompt cache was lost from the first block or waiting change on."""
    live, _ = _live_and_resumed(db, 12, varied=False)
    blocks = [k for k, m in enumerate(live[5]) if str(m.get("content")).startswith(TAIL_OPEN)]
    assert blocks and blocks[-1] < len(live[5]) - 2  # blocks stand among the history, not at its end
    assert not any(stub_ref(t) for t in texts(live[5]))  # the big result waits for a break that pays


def test_a_resumed_sessions_cache_allowance_goes_on_from_its_last_frame(db) -> None:
    """What the prompt cache's allowance counts (every token sent, those not a prefix) was the
    process's alone: a session reopened after its 5th call began from nothing and, 15 calls on,
    took a break the live session would not have yet. Its last frame records the totals."""
    _live_and_resumed(db, 30, varied=True)


def test_a_huge_result_collapses_when_due_even_with_the_allowance_spent(db) -> None:
    # a 30,000-token output is new content, sent uncached: the allowance is spent for a long time,
    # but collapsing it re-sends only the few small messages after it
    hook = hook_for(db, keep_recent_results=10)
    msgs = [user("go"), call("c0", command="cat huge.log"), result("c0", "x" * 120_000)]
    hook.transform_context(msgs)
    view = hook.session.view
    for n in range(1, 4):
        assert not view.objects["toolcall:e1:c0"].collapsed
        msgs += [call(f"c{n}", command="ls"), result(f"c{n}", f"out {n}")]
        out = hook.transform_context(msgs)
    assert view.policy.cache_break_percent * view.sent_total // 100 < view.uncached_total  # spent
    assert view.objects["toolcall:e1:c0"].collapsed  # 3 turns old: collapsed at once
    assert stub_ref(next(m["content"] for m in out if m.get("tool_call_id") == "c0")) is not None
    assert sum(len(t) for t in texts(out)) < 5_000
    assert all(verify_frame(db, f).ok for f in frame_docs(db, hook.session.id))


def test_a_change_that_sends_nothing_anew_is_taken_at_once(db) -> None:
    hook = hook_for(db, keep_recent_results=0)
    out = hook.transform_context([user("go"), call("c0", command="cat big"), result("c0", "x" * 8000)])
    assert stub_ref(out[-1]["content"] if out[-1]["role"] == "tool" else out[-2]["content"]) == "r2"


def test_without_a_prompt_cache_every_change_is_taken_when_due(db) -> None:
    hook = hook_for(db, keep_recent_results=10, cache_break_percent=None)
    msgs = [user("go"), call("c0", command="cat big"), result("c0", "first\n" + "x" * 8000)]
    for n in range(1, 4):
        hook.transform_context(msgs)
        msgs += [call(f"c{n}", command="ls"), result(f"c{n}", f"out {n}")]
    hook.transform_context(msgs)
    assert hook.session.view.objects["toolcall:e1:c0"].collapsed


def test_a_block_that_stood_at_the_end_counts_as_sent_when_history_follows_it(db) -> None:
    db.put(note(1, lines(30)))
    hook = hook_for(db)
    hook.session.show("memory:notes")
    msgs = [user("hi")]
    hook.transform_context(msgs)
    first = hook.last.rendered
    sent = len(first.units) + len(first.volatile)  # (its units are the view's: count them now)
    msgs += [say("ok"), user("more")]
    hook.transform_context(msgs)
    second = hook.last.rendered
    # the note's block and the index were the end of the last call: they are its prefix now
    assert second.stable_prefix == sent


# --- small sessions pass through -----------------------------------------------------------------------


def test_a_small_session_passes_through_unchanged_until_it_is_large(db) -> None:
    hook = OpenAIHook(Session.open(db, "small", harness="openai", policy=RetentionPolicy(manage_from_tokens=3_000)))
    msgs = [user("go")]
    for n in range(4):
        msgs += [call(f"c{n}", command="ls"), result(f"c{n}", f"out {n} " + "y" * 1_000)]
        assert hook.transform_context(msgs) == msgs  # as the harness sent it
    assert hook.session.managed_from is None
    assert frame_docs(db, "small")[-1]["content"]["managed"] is False
    # the policy's state changes are recorded, and say they show only once the session is managed
    collapsed = [c for c in object_states(db, "toolcall:small:c0") if c["state"] == "inactive"]
    assert collapsed and collapsed[0]["reason"].endswith("(shown so once the session is managed)")
    for n in range(4, 14):
        msgs += [call(f"c{n}", command="ls"), result(f"c{n}", f"out {n} " + "y" * 1_000)]
        out = hook.transform_context(msgs)
    assert hook.session.managed_from is not None and out != msgs
    assert any(stub_ref(m["content"]) for m in out if m["role"] == "tool")
    assert db.doc("session:small")["meta"]["managed_from"] == hook.session.managed_from
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "small"))


def test_a_shown_object_that_changes_ends_passing_through(db) -> None:
    db.put(note(1, "v1"))
    hook = OpenAIHook(Session.open(db, "s", harness="openai"))
    hook.session.show("memory:notes")
    msgs = [user("hi")]
    assert hook.transform_context(msgs) == msgs
    db.put(note(2, "v2"))
    hook.session.show("memory:notes")  # the harness's history would show v1 now
    msgs += [say("ok"), user("next")]
    out = hook.transform_context(msgs)
    assert hook.session.managed_from == 2 and "v2" in shown_blocks(texts(out))["memory:notes"]


def test_context_os_file_tools_manage_the_session_from_the_first_call(db, tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("print('hi')\n")
    session = Session.open(db, "f", harness="openai", workspace=str(tmp_path))
    tools = FileTools(session, Workspace(tmp_path))
    hook = OpenAIHook(session, files=tools)
    tools.call("read", {"path": "app.py"})  # our read reports; the text shows in a block only
    out = hook.transform_context([user("look")])
    assert "print('hi')" in "\n".join(texts(out)) and session.managed_from == 1


# --- the active pool ------------------------------------------------------------------------------


_POOL_STORES: list[SqliteStore] = []


@pytest.fixture(autouse=True)
def _close_pool_stores() -> Iterator[None]:
    """The stores ``_files`` opened for a test, closed after it."""
    yield
    while _POOL_STORES:
        _POOL_STORES.pop().close()


def _files(tmp_path: Path, n: int) -> FileTools:
    for k in range(n):
        body = "\n".join(f"value_{k}_{i} = {i}  # one line of module {k}, long enough" for i in range(60))
        (tmp_path / f"mod{k}.py").write_text(body + "\n")
    policy = RetentionPolicy(active_pool_tokens=2_500, **EAGER)  # a file shows in 790 tokens: three fit
    _POOL_STORES.append(SqliteStore(tmp_path / "pool.db"))
    session = Session.open(_POOL_STORES[-1], "p", harness="openai", policy=policy)
    return FileTools(session, Workspace(tmp_path))


def _state(session: Session, path: str) -> str:
    """The state of the file object at ``path``."""
    return next(o.state for o in session.view.objects.values() if o.meta.get("path") == path)


def _turns(tools: FileTools) -> Callable[[str], None]:
    """Turns of ``tools``' session through the OpenAI hook: in each, the agent says ``note`` and
    the user "next"."""
    hook = OpenAIHook(tools.session, files=tools)
    msgs = [user("read them, then fix each")]

    def turn(note: str) -> None:
        msgs.extend([say(note), user("next")])
        hook.transform_context(msgs)

    return turn


def _reopen(tools: FileTools, root: Path) -> tuple[Session, FileTools]:
    """``tools``' session closed and opened again from its store, with file tools of its own."""
    tools.session.close()
    resumed = Session.open(tools.session.store, tools.session.id, policy=tools.session.view.policy)
    return resumed, FileTools(resumed, Workspace(root))


def test_the_pool_keeps_the_most_recently_used_files_within_its_budget(tmp_path: Path) -> None:
    tools = _files(tmp_path, 4)
    hook = OpenAIHook(tools.session, files=tools)
    msgs = [user("read them")]
    for k in range(4):
        tools.call("read", {"path": f"mod{k}.py"})
        msgs += [say(f"read {k}"), user("next")]
        hook.transform_context(msgs)
    states = {o.meta["path"]: o.state for o in tools.session.view.objects.values() if o.kind == "file"}
    assert states == {"mod0.py": "inactive", "mod1.py": "active", "mod2.py": "active", "mod3.py": "active"}
    reason = tools.session.state_changes(
        next(o.id for o in tools.session.view.objects.values() if o.meta.get("path") == "mod0.py")
    )[-1]
    # read once, four turns before: 0.8 ** 4
    assert reason.doc["meta"]["reason"] == "the active pool is over 2500 tokens (least used: 0.41)"


@pytest.mark.parametrize(("decay", "leaves"), [(80, "mod1.py"), (0, "mod0.py")])
def test_the_pool_keeps_what_was_used_often_lately_over_what_was_used_once(
    tmp_path: Path, decay: int, leaves: str
) -> None:
    tools = _files(tmp_path, 4)
    session = tools.session
    session.view.policy = RetentionPolicy(active_pool_tokens=2_500, pool_use_decay_percent=decay, **EAGER)
    hook = OpenAIHook(session, files=tools)
    msgs = [user("read them")]
    for k in (0, 0, 0, 1, 2, 3):  # mod0 three turns running, then each of the others once
        tools.call("read", {"path": f"mod{k}.py"})
        msgs += [say(f"read {k}"), user("next")]
        hook.transform_context(msgs)
    states = {o.meta["path"]: o.state for o in session.view.objects.values() if o.kind == "file"}
    # at the turn mod3 comes in, mod0's three uses (turns 0-2) count 2.44 x 0.8^4 = 1.0; mod1's one
    # (turn 3) 0.51, mod2's 0.64: mod1 leaves; least recently used first, mod0 would
    assert [p for p, st in sorted(states.items()) if st == "inactive"] == [leaves]
    mod0 = next(o for o in session.view.objects.values() if o.meta.get("path") == "mod0.py")
    if decay:
        assert mod0.uses == pytest.approx(1 + 0.8 + 0.64) and mod0.since == 2
        # the count is kept with the object's state: a reopened session ranks the same
        again = Session.open(session.store, session.id, policy=session.view.policy)
        assert again.view.objects[mod0.id].uses == mod0.uses
        again.close()


def test_an_edit_brings_back_the_next_file_read_after_the_one_changed(tmp_path: Path) -> None:
    """Agents read several files, then change them one by one in that order: an edit of mod0
    brings back mod1 (read next, unchanged), which the pool had let go; not mod2 (one is the
    default), not a file changed already, and nothing with the setting at 0."""
    tools = _files(tmp_path, 5)
    session = tools.session
    turn = _turns(tools)

    def state(k: int) -> str:
        return _state(session, f"mod{k}.py")

    for k in range(5):
        tools.call("read", {"path": f"mod{k}.py"})
        turn(f"read {k}")
    assert [state(k) for k in range(5)] == ["inactive", "inactive", "active", "active", "active"]
    tools.call("edit", {"path": "mod0.py", "oldText": "value_0_1 = 1 ", "newText": "value_0_1 = 10 "})
    assert [state(k) for k in range(2)] == ["active", "active"]
    mod1 = next(o.id for o in session.view.objects.values() if o.meta.get("path") == "mod1.py")
    assert session.state_changes(mod1)[-1].doc["meta"]["reason"].startswith("next on the reading list after file:")
    turn("fixed 0")  # five files: the pool lets two go again
    gone = [k for k in range(5) if state(k) == "inactive"]
    assert 1 not in gone and len(gone) == 2
    tools.call("edit", {"path": "mod0.py", "oldText": "value_0_2 = 2 ", "newText": "value_0_2 = 20 "})
    # mod0 changed again: mod1, still the next unchanged one, is active; nothing else comes back
    assert [k for k in range(5) if state(k) == "inactive"] == gone
    turn("fixed 0 again")
    assert all(verify_frame(session.store, f).ok for f in frame_docs(session.store, session.id))

    (tmp_path / "off").mkdir()
    off = _files(tmp_path / "off", 5)
    off.session.view.policy = RetentionPolicy(active_pool_tokens=2_500, next_on_reading_list=0, **EAGER)
    off_hook = OpenAIHook(off.session, files=off)
    for k in range(5):
        off.call("read", {"path": f"mod{k}.py"})
        off_hook.transform_context([user("read"), say(f"read {k}"), user("next")])
    off.call("edit", {"path": "mod0.py", "oldText": "value_0_1 = 1 ", "newText": "value_0_1 = 10 "})
    states = {o.meta["path"]: o.state for o in off.session.view.objects.values() if o.kind == "file"}
    assert states["mod1.py"] == "inactive"


def test_a_resumed_reading_list_skips_files_only_listed(tmp_path: Path) -> None:
    """A resumed session rebuilds its reading list from the files it has text of: a file only
    listed (``ls``, metadata only) between two reads does not stand in for the next file read."""
    tools = _files(tmp_path, 5)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "listed.py").write_text("x = 1\n")
    turn = _turns(tools)
    for k in range(5):
        tools.call("read", {"path": f"mod{k}.py"})
        if k == 0:
            tools.call("ls", {"path": "sub"})
        turn(f"read {k}")
    resumed, again = _reopen(tools, tmp_path)

    assert [_state(resumed, f"mod{k}.py") for k in range(5)] == ["inactive", "inactive", "active", "active", "active"]
    assert resumed.view.objects[next(iter(resumed._reading))].meta["path"] == "mod0.py"
    again.call("edit", {"path": "mod0.py", "oldText": "value_0_1 = 1 ", "newText": "value_0_1 = 10 "})
    assert _state(resumed, "mod1.py") == "active" and _state(resumed, "sub/listed.py") == "inactive"
    resumed.close()


def test_a_resumed_reading_list_knows_the_files_the_agent_changed(tmp_path: Path) -> None:
    """A file the agent edited before the session closed is not "next on the reading list" after
    it reopens (the version it shows says the agent made it), as it was not before."""
    tools = _files(tmp_path, 8)
    turn = _turns(tools)
    for k in range(2):
        tools.call("read", {"path": f"mod{k}.py"})
        turn(f"read {k}")
    tools.call("edit", {"path": "mod1.py", "oldText": "value_1_1 = 1 ", "newText": "value_1_1 = 10 "})
    turn("edited 1")
    for k in range(2, 8):
        tools.call("read", {"path": f"mod{k}.py"})
        turn(f"read {k}")
    resumed, again = _reopen(tools, tmp_path)

    assert [_state(resumed, f"mod{k}.py") for k in range(3)] == ["inactive", "inactive", "inactive"]
    again.call("edit", {"path": "mod0.py", "oldText": "value_0_1 = 1 ", "newText": "value_0_1 = 10 "})
    assert _state(resumed, "mod2.py") == "active" and _state(resumed, "mod1.py") == "inactive"
    resumed.close()


def test_the_pool_breaks_a_tie_by_the_order_the_files_came_not_by_their_ids() -> None:
    # two files read in the same turn, once each: the same use score. Live file ids are random
    # (uuid4), so a tie broken by id would let a different file go from run to run
    def pool(ids: tuple[str, str]) -> list[str]:
        files = [
            ObjInfo(id=oid, kind="file", meta={}, state="active", seq=seq, since=3, uses=1.0)
            for seq, oid in enumerate(ids)
        ]
        due = retention_due(
            lambda: files,
            4,
            RetentionPolicy(active_pool_tokens=1_000),
            gain=lambda o: 0,
            shown=lambda o: 600,
            tokens=lambda: 1_200,
        )
        return [c.id for c in due]

    assert pool(("file:ffff", "file:0000")) == ["file:ffff"]  # the first seen goes, whatever its id
    assert pool(("file:0000", "file:ffff")) == ["file:0000"]


def test_a_pool_use_decay_over_100_percent_is_refused() -> None:
    with pytest.raises(ConfigError, match="pool_use_decay_percent must be 0-100"):
        RetentionPolicy(pool_use_decay_percent=101)


def test_none_is_refused_for_a_setting_that_cannot_be_off(db: SqliteStore) -> None:
    """``keep_recent_results=None`` (a JSON-RPC client's ``null``) was taken, and the session's
    first turn with a tool result raised a ``TypeError`` from the policy: only the settings whose
    table entry says "none: ..." may be None, the others are a ``ConfigError`` naming them."""
    for name in ("keep_recent_results", "collapse_after_turns", "manage_from_tokens", "break_payback_calls"):
        with pytest.raises(ConfigError, match=f"{name} must be a non-negative integer, got None"):
            RetentionPolicy(**{name: None})
    with pytest.raises(ConfigError, match="history_keep_percent must be a non-negative integer, got None"):
        RetentionPolicy.from_dict({"history_keep_percent": None})
    off = {"active_pool_tokens": None, "cache_break_percent": None, "history_max_tokens": None}
    hook = hook_for(db, **off, keep_thinking_turns=None, file_view_chars=None, result_view_chars=None)
    msgs = [user("go"), call("c1"), result("c1", "x" * 400), say("done"), user("again")]
    assert texts(hook.transform_context(msgs))[-1] == "again"


def test_a_file_too_large_for_the_pool_shows_a_window_of_its_top_and_stays(tmp_path: Path) -> None:
    """A file whose whole text alone is over ``active_pool_tokens`` (a 48 KB module against the
    default 8,000) used to leave the pool on the turn after it was read: the agent had a report
    saying "activated" and never saw the file, and activating it again did the same. It shows the
    window of ``file_view_chars`` from its top instead, stays, and ``lines`` shows the rest."""
    body = "".join(f"def func_{i}(x):\n    return x * {i}  # a comment to make the line longer\n" for i in range(600))
    (tmp_path / "big.py").write_text(body)
    _POOL_STORES.append(SqliteStore(tmp_path / "big.db"))
    session = Session.open(_POOL_STORES[-1], "b", harness="openai", policy=RetentionPolicy(**EAGER))
    tools = FileTools(session, Workspace(tmp_path))
    report = json.loads(tools.call("read", {"path": "big.py"}))
    assert report["active"] == "activated" and f'lines(id="{report["id"]}"' in report["note"]
    turn = _turns(tools)
    turn("read it")
    turn("looked at it")
    assert _state(session, "big.py") == "active"
    shown = session.view.shown_text(session.view.objects[report["id"]])
    assert shown.startswith("[context_os: showing ") and "def func_0(x)" in shown and "func_599" not in shown
    assert session.view.shown_tokens(session.view.objects[report["id"]]) <= session.view.policy.active_pool_tokens
    assert "func_599" in tools.call("lines", {"id": report["id"], "start": 1199, "end": 1200})
    # a file that fits shows whole, as before
    (tmp_path / "small.py").write_text("X = 1\n")
    tools.call("read", {"path": "small.py"})
    turn("read the small one")
    small = next(o for o in session.view.objects.values() if o.meta.get("path") == "small.py")
    assert session.view.shown_text(small) == "X = 1\n"
    # activated by its id in a session that never read it (a forked Pi session): the same window
    other = FileTools(
        Session.open(session.store, "b2", harness="openai", policy=RetentionPolicy(**EAGER)), tools.workspace
    )
    assert other.activate(report["id"])["status"] == "activated"
    again = _turns(other)
    again("activated it")
    again("looked at it")
    assert _state(other.session, "big.py") == "active"
    assert other.session.view.shown_text(other.session.view.objects[report["id"]]).startswith("[context_os: showing ")


def test_a_file_named_in_new_output_counts_as_used_but_a_listing_does_not(tmp_path: Path) -> None:
    tools = _files(tmp_path, 4)
    session = tools.session
    hook = OpenAIHook(session, files=tools)
    msgs = [user("read them")]
    for k in range(3):
        tools.call("read", {"path": f"mod{k}.py"})
        msgs += [say(f"read {k}"), user("next")]
        hook.transform_context(msgs)
    # a test failure names mod0.py: it is used again, so mod1.py is the least recently used now
    msgs += [call("t1", command="pytest"), result("t1", "FAILED mod0.py::test_value - assert 1 == 2")]
    hook.transform_context(msgs)
    # a listing names them all: it says nothing of any
    msgs += [call("t2", command="ls"), result("t2", "mod0.py\nmod1.py\nmod2.py\nmod3.py")]
    hook.transform_context(msgs)
    tools.call("read", {"path": "mod3.py"})
    msgs += [say("read 3"), user("next")]
    hook.transform_context(msgs)
    states = {o.meta["path"]: o.state for o in session.view.objects.values() if o.kind == "file"}
    assert states == {"mod0.py": "active", "mod1.py": "inactive", "mod2.py": "active", "mod3.py": "active"}


def test_a_file_the_user_names_comes_back_into_the_pool(tmp_path: Path) -> None:
    tools = _files(tmp_path, 1)
    session = tools.session
    hook = OpenAIHook(session, files=tools)
    fid = json.loads(tools.call("read", {"path": "mod0.py"}))["id"]
    msgs = [user("read it")]
    hook.transform_context(msgs)
    session.deactivate(fid)
    msgs += [say("done"), user("now look at mod0.py again")]
    out = hook.transform_context(msgs)
    assert session.view.objects[fid].state == "active"
    assert session.state_changes(fid)[-1].doc["meta"]["reason"] == "named in the user's message"
    assert "value_0_59 = 59" in shown_blocks(texts(out))[fid]


# --- short refs -------------------------------------------------------------------------------------------


def test_a_collapsed_result_names_a_short_ref_that_the_tools_take(db) -> None:
    hook = hook_for(db, keep_recent_results=1, cache_break_percent=None)
    msgs = [user("go"), call("c0", command="cat a"), result("c0", "alpha\n" + "a" * 2_000)]
    msgs += [call("c1", command="cat b"), result("c1", "beta")]
    out = hook.transform_context(msgs)
    stub = next(m["content"] for m in out if m.get("tool_call_id") == "c0")
    assert stub_ref(stub) == "r2" and stub.endswith('collapsed: activate("r2")] "alpha"')
    assert hook.session.resolve("r2") == "toolcall:e1:c0"
    assert json.loads(hook.call_tool("activate", {"id": "r2"}))["status"] == "activated"
    with pytest.raises(NotFound, match="no tool result 'r1'"):
        hook.session.resolve("r1")  # entry 1 is the assistant's call


# --- eviction -------------------------------------------------------------------------------------------


def test_evicting_an_object_evicts_the_blocks_that_showed_it(db) -> None:
    db.put(note(1, "the secret plan"))
    hook = hook_for(db)
    hook.session.show("memory:notes")
    msgs = [user("hi")]
    hook.transform_context(msgs)
    blocks = [v.id for v in db.find("block", {"object": "memory:notes"})]
    assert blocks
    done = evict(db, "memory:notes")
    # (and the object-index block that listed it)
    assert done["blocks"] == len(blocks) + 1 and all(db.doc(b) is None for b in blocks)
    check = verify_frame(db, get_frame(db, "e1", 1))  # a frame that showed it no longer verifies
    assert not check.ok and any("is not in the store" in p for p in check.problems)
    assert any("memory:notes was evicted at " in p for p in check.problems) and check.evicted == ["memory:notes"]
    msgs += [say("ok"), user("again")]
    out = hook.transform_context(msgs)
    assert "the secret plan" not in "\n".join(texts(out))
    assert verify_frame(db, get_frame(db, "e1", 2)).ok


def test_block_ids_are_per_session_and_text(db) -> None:
    db.put(note(1, "shared"))
    a, b = hook_for(db, "a"), hook_for(db, "b")
    for hook in (a, b):
        hook.session.show("memory:notes")
        hook.transform_context([user("hi")])
    ids = {v.id for v in db.find("block", {"object": "memory:notes"})}
    assert {i.split(":")[1] for i in ids} == {"a", "b"}
    assert PATCH_MIN_TOKENS > 0


def test_a_files_window_follows_its_focus_and_its_text() -> None:
    """The window of a long file is kept between asks (a turn asks several times), and made
    anew when the focus changes, even in place, or the text does."""
    text = "\n".join(f"line {i}" for i in range(1, 2001))
    o = ObjInfo("file:w", "file", {}, content=text, state="active", focus=[[10, 12]])
    first = active_text(o, 2000)
    assert "\nline 10\n" in first and "line 1500" not in first
    assert active_text(o, 2000) is first
    o.focus[0][:] = [1500, 1502]
    moved = active_text(o, 2000)
    assert "\nline 1500\n" in moved and "\nline 10\n" not in moved
    o.content = text.replace("line 1501\n", "LINE 1501\n")
    assert "LINE 1501" in active_text(o, 2000)
    assert active_text(o, 100_000) == o.content  # it all fits: no window


def test_a_frame_of_layout_6_shows_a_long_line_as_it_did() -> None:
    """A focused line alone longer than the window shows its start, cut, from layout 7; a frame of
    layout 6 re-renders the window it recorded then (the lines around it, none of that line), and
    the window memo tells the two apart."""
    o = ObjInfo("file:m", "file", {}, content="var a=1;" * 5_000 + "\nend", state="active", focus=[[1, 1]])
    old = active_text(o, 2000, 6)
    assert "var a=1;" not in old and old.endswith("\nend")
    new = active_text(o, 2000)
    assert "var a=1;" * 250 in new and "line 1 goes on: 2,000 of its 40,000 characters shown" in new
    assert active_text(o, 2000, 6) == old


def test_a_files_window_counts_its_lines_as_the_lines_tool_does() -> None:
    """A file that ends with a line break has no line after it: its window says "of 100 lines"
    and counts the lines left out after the window without an empty last one (from layout 8; a
    frame of layout 7 re-renders the count it showed)."""
    text = "".join(f"line {i} " + "x" * 50 + "\n" for i in range(1, 101))
    o = ObjInfo("file:n", "file", {}, content=text, state="active", focus=[[50, 50]])
    window = active_text(o, 1000).split("\n")
    assert window[0].startswith("[context_os: showing 16 of 100 lines")
    hidden = sum(int(m[1]) for m in re.finditer(r"\[context_os: (\d+) lines not shown\]", "\n".join(window)))
    assert sum(line.startswith("line ") for line in window) == 16 and hidden == 100 - 16
    assert window[-1] == "[context_os: 43 lines not shown]"
    old = active_text(o, 1000, 7).split("\n")
    assert old[0].startswith("[context_os: showing 16 of 101 lines") and old[-1] == "[context_os: 44 lines not shown]"


def test_an_object_the_agent_activates_is_shown_to_the_model_even_when_larger_than_the_pool(db) -> None:
    """The pool takes out the least used of its objects while over budget; one the agent made
    active since the last call has not been seen yet: it stays for that call (it said "activated")."""
    big = "\n".join(f"row {k:05d}: a line of a long build log that the agent asks to see again" for k in range(700))
    policy = RetentionPolicy(**EAGER, active_pool_tokens=2_000, keep_recent_results=1, collapse_after_turns=0)
    hook = OpenAIHook(Session.open(db, "big", harness="openai", policy=policy))
    msgs = [user("build it"), call("c1", cmd="make"), result("c1", big), say("it failed"), user("and now?")]
    msgs += [call("c2", cmd="ls"), result("c2", "src tests")]
    out = hook.transform_context(msgs)
    ref = next(r for r in map(stub_ref, texts(out)) if r)  # the build log collapsed to a stub
    status = hook.session.activate(ref)
    assert status["status"] == "activated" and status["tokens"] > 2_000
    assert status["note"].startswith("larger than the active pool (2,000 tokens): shown in the next call")
    msgs += [say("let me see the log again"), user("go on")]
    out = hook.transform_context(msgs)
    assert "row 00699" in "\n".join(texts(out))  # the model sees what it asked for
    obj = hook.session.view.objects[hook.session.resolve(ref)]
    assert obj.state == "active"
    msgs += [say("seen"), user("next")]
    hook.transform_context(msgs)  # seen once: the pool's budget applies to it again
    assert obj.state == "inactive"
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "big"))
