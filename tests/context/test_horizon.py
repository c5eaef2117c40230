"""The history horizon: once the conversation shown outgrows ``history_max_tokens``, its oldest part
leaves the context for one note (system messages stay, the user's words are repeated, the files
named are listed), tool results behind it collapse, the ``history`` tool shows what it hides, and
every frame still re-renders. Real stores (SQLite, and XTDB where marked), the real OpenAI hook."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from context_os import RetentionPolicy, Session
from context_os.context.evict import evict
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.view import (
    HORIZON_PATHS,
    HORIZON_USER_CHARS,
    HORIZON_USER_MESSAGES,
    horizon_text,
    page_id,
)
from context_os.errors import ConfigError
from context_os.harness.openai import OPENAI_PAIRING, OpenAIHook
from context_os.harness.pairing import pairing_problems
from context_os.store.base import Store
from tests.helpers import EAGER, call, result, say, user

SYSTEM = {"role": "system", "content": "You are a coding agent."}


def hook_for(store: Store, sid: str, **policy: Any) -> OpenAIHook:
    settings = {**EAGER, "history_max_tokens": 1_000, **policy}
    return OpenAIHook(Session.open(store, sid, harness="openai", policy=RetentionPolicy(**settings)))


def step(msgs: list[dict[str, Any]], n: int) -> None:
    """One round of the agent: a reply, a call naming a file, its short result."""
    msgs.append(say(f"Step {n}: looking at the next module, " + "reasoning " * 20))
    msgs.append(call(f"c{n}", "read", path=f"src/mod{n}.py"))
    msgs.append(result(f"c{n}", f"contents of mod{n}: " + "def f(): pass\n" * 10))


def drive(hook: OpenAIHook, rounds: int, msgs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A conversation of ``rounds`` rounds, the context assembled at each; returns the messages."""
    msgs = msgs if msgs is not None else [SYSTEM, user("Fix the parser bug in src/parser.py, please.")]
    for n in range(rounds):
        step(msgs, n)
        if n == rounds // 2:
            msgs.append(user("Also keep the public API as it is."))
        hook.transform_context(msgs)
    return msgs


def test_past_its_limit_the_oldest_conversation_leaves_for_one_note(store: Store, uid: str) -> None:
    hook = hook_for(store, uid)
    msgs = drive(hook, 40)
    out = hook.transform_context(msgs)
    view = hook.session.view
    assert view.horizon > 0 and view.conversation_tokens() <= 1_000
    assert out[0] == SYSTEM  # the system message stays where it was
    note = out[1]["content"]
    assert out[1]["role"] == "user" and note.startswith("<context_os>")
    assert f"The conversation before chat entry {view.horizon} is not shown here" in note
    assert "[1] Fix the parser bug in src/parser.py, please." in note  # the user's words, repeated
    assert "tool calls: read " in note and "newest first: src/mod" in note  # what happened, which files
    assert "Fix the parser bug" not in json.dumps(out[2:])  # the message itself is behind the horizon
    assert out[2]["role"] in ("user", "assistant")  # never a result cut off from its call
    assert not pairing_problems(OPENAI_PAIRING, out)
    assert "src/mod39.py" in json.dumps(out)  # the newest rounds are all there
    frames = frame_docs(store, uid)
    assert {f["content"].get("horizon", 0) for f in frames} > {0}
    assert all(verify_frame(store, f).ok for f in frames)  # frames before and after each move


def test_the_horizon_moves_seldom_and_each_move_sends_the_context_anew_once(store: Store, uid: str) -> None:
    hook = hook_for(store, uid)
    drive(hook, 60)
    frames = frame_docs(store, uid)
    horizons = [f["content"].get("horizon", 0) for f in frames]
    moves = [k for k in range(1, len(frames)) if horizons[k] != horizons[k - 1]]
    assert len(moves) >= 2 and horizons == sorted(horizons)
    assert all(b - a >= 3 for a, b in zip(moves, moves[1:], strict=False))  # by half the limit, not a message
    for k in moves:
        assert frames[k]["content"]["prefix_tokens"] == 0  # the whole context anew, once
        assert frames[k + 1]["content"]["prefix_tokens"] > 0 if k + 1 < len(frames) else True


def test_system_messages_larger_than_what_the_horizon_keeps_do_not_make_it_move_at_every_call(
    store: Store, uid: str
) -> None:
    # a Codex session sends its instructions and developer messages as system messages, 12k tokens
    # of them: counted as conversation, a horizon keeping half of its limit could keep nothing
    hook = hook_for(store, uid)
    big = [SYSTEM, {"role": "system", "content": "Project rules. " * 400}, user("Fix the parser bug, please.")]
    drive(hook, 60, big)
    horizons = [f["content"].get("horizon", 0) for f in frame_docs(store, uid)]
    moves = [k for k in range(1, len(horizons)) if horizons[k] != horizons[k - 1]]
    assert len(moves) >= 2 and all(b - a >= 3 for a, b in zip(moves, moves[1:], strict=False)), moves
    assert hook.session.view.conversation_tokens() <= 1_000


def test_results_behind_the_horizon_collapse_and_a_pinned_one_shows_in_the_active_pool(store: Store, uid: str) -> None:
    # results stay expanded long enough for the horizon to pass them (no age or rank collapses)
    hook = hook_for(store, uid, keep_recent_results=1_000, collapse_after_turns=1_000, history_max_tokens=1_000)
    msgs = [SYSTEM, user("go")]
    step(msgs, 0)
    hook.transform_context(msgs)
    pinned = hook.session.resolve("r4")
    hook.session.pin(pinned)
    drive(hook, 30, msgs)
    view = hook.session.view
    assert view.horizon > 4
    early = view.objects[hook.session.resolve("r7")]
    assert early.state == "inactive" and early.collapsed  # not "active" where nothing shows it
    assert view.objects[pinned].state == "active" and view.objects[pinned].in_tail
    out = hook.transform_context(msgs)
    blocks = [m["content"] for m in out if str(m.get("content")).startswith("<context_os>\nActive content:")]
    assert any(f'id="{pinned}"' in b and "contents of mod0" in b for b in blocks)
    reasons = [v.doc["meta"]["reason"] for v in hook.session.state_changes(early.id) if v.doc]
    assert reasons[-1] == "behind the history horizon"


def test_the_history_tool_shows_what_the_horizon_hides(store: Store, uid: str) -> None:
    hook = hook_for(store, uid)
    msgs = drive(hook, 40)
    horizon = hook.session.view.horizon
    shown = hook.call_tool("history", "{}")  # by default: the entries just before the horizon
    lines = shown.split("\n")
    assert lines[0].startswith(f"[{max(0, horizon - 40)}]") and f"[{horizon - 1}]" in shown
    assert f"[{horizon}]" not in shown
    first = hook.call_tool("history", {"start": 0, "end": 5})
    assert first.split("\n")[:2] == [
        "[0] system: You are a coding agent.",
        "[1] user: Fix the parser bug in src/parser.py, please.",
    ]
    assert '  call read {"path": "src/mod0.py"}' in first
    assert "[4] tool: [read output, " in first and 'activate("r4")' in first  # a stub: activate brings it back
    assert json.loads(hook.call_tool("activate", {"id": "r4"}))["status"] == "activated"
    out = hook.transform_context(msgs)
    assert "contents of mod0" in json.dumps(out)
    bad = json.loads(hook.call_tool("history", {"start": 9, "end": 3}))
    assert bad["type"] == "InputError" and "no entries from 9 to 3" in bad["error"]
    assert "No chat entries from 500 to 600" in hook.call_tool("history", {"start": 500, "end": 600})


def test_the_history_tool_goes_on_where_a_long_stretch_stops(store: Store, uid: str) -> None:
    hook = hook_for(store, uid)
    msgs = [SYSTEM, user("go")]
    for n in range(30):
        msgs += [say(f"reply {n} " + "word " * 1_000), user(f"next {n}")]
    hook.transform_context(msgs)
    shown = hook.call_tool("history", {"start": 0, "end": 50})
    last = shown.split("\n")[-1]
    assert last.startswith("(entries ") and "history(start=" in last
    resume = int(last.split("history(start=")[1].split(")")[0])
    assert f"[{resume}]" not in shown and hook.call_tool("history", {"start": resume}).startswith(f"[{resume}]")


def test_a_page_evicted_behind_the_horizon_leaves_its_note_too(store: Store, uid: str) -> None:
    hook = hook_for(store, uid)
    secret = "the customer is Ada Quillfeather of Norbury"  # evicted for privacy, say
    msgs = [SYSTEM, user(f"Fix the parser bug; {secret}")]
    drive(hook, 40, msgs)
    assert hook.session.view.horizon > 1 and secret in json.dumps(hook.transform_context(msgs))  # in the note
    evict(store, page_id(uid, 0))
    msgs.append(user("go on"))
    out = hook.transform_context(msgs)
    assert secret not in json.dumps(out) and "[1] [context_os: erased from the store]" in out[1]["content"]
    assert secret not in hook.call_tool("history", {"start": 0, "end": 3})


def test_a_resumed_session_keeps_its_horizon(store: Store, uid: str) -> None:
    hook = hook_for(store, uid)
    msgs = drive(hook, 40)
    before = hook.transform_context(msgs)
    horizon = hook.session.view.horizon
    hook.session.close()
    again = OpenAIHook(Session.open(store, uid, harness="openai"))
    assert again.session.view.horizon == horizon
    assert again.transform_context(msgs)[:3] == before[:3]  # the system message, the same note, what follows
    again.session.close()
    whole = OpenAIHook(
        Session.open(store, uid, harness="openai", policy=RetentionPolicy(**EAGER, history_max_tokens=None))
    )
    out = whole.transform_context(msgs)
    assert whole.session.view.horizon == 0 and out[1]["content"] == "Fix the parser bug in src/parser.py, please."
    assert all(verify_frame(store, f).ok for f in frame_docs(store, uid)[-3:])


def test_a_small_session_and_a_policy_without_a_horizon_keep_the_whole_conversation(store: Store, uid: str) -> None:
    small = OpenAIHook(Session.open(store, uid, harness="openai", policy=RetentionPolicy(history_max_tokens=500)))
    drive(small, 8)  # under manage_from_tokens: passes through unchanged, horizon and all
    assert small.session.view.horizon == 0
    whole = hook_for(store, uid + "-whole", history_max_tokens=None)
    msgs = drive(whole, 40)
    assert whole.session.view.horizon == 0
    assert "Fix the parser bug" in json.dumps(whole.transform_context(msgs))


def test_the_keep_share_is_a_percentage() -> None:
    for bad in (0, 101):
        with pytest.raises(ConfigError, match="history_keep_percent must be 1-100"):
            RetentionPolicy(history_keep_percent=bad)


def test_the_note_repeats_the_first_and_newest_user_messages_clipped_and_the_newest_files() -> None:
    hidden: list[Any] = [{"i": 0, "role": "system", "text": "sys", "h": ""}]
    for k in range(1, 21):
        hidden.append({"i": 2 * k - 1, "role": "user", "text": f"ask {k} " + "x" * (2_000 if k == 20 else 0), "h": ""})
        args = json.dumps({"file_path": f"f{k}.py"}) if k % 2 else {"path": f"f{k}.py"}  # JSON text or an object
        hidden.append(
            {
                "i": 2 * k,
                "role": "assistant",
                "text": None,
                "h": "",
                "tool_calls": [{"id": f"c{k}", "name": "Edit", "arguments": args}],
            }
        )
    hidden += [
        {
            "i": 41 + k,
            "role": "assistant",
            "text": None,
            "h": "",
            "tool_calls": [{"id": f"d{k}", "name": "Read", "arguments": {"path": f"g{k}.py"}}],
        }
        for k in range(HORIZON_PATHS)
    ]
    text = horizon_text(hidden, 100)
    assert "It holds 20 user messages, 50 assistant messages and 0 tool results; tool calls: Read 30, Edit 20." in text
    files = text.split("Files its tool calls named, newest first: ")[1].split("\n")[0]
    assert files.startswith(f"g{HORIZON_PATHS - 1}.py, ") and files.endswith(" and 20 more.")
    said = [ln for ln in text.split("\n") if ln.startswith("[")]
    assert said[0] == "[1] ask 1 " and len(said) == HORIZON_USER_MESSAGES
    assert f"({20 - HORIZON_USER_MESSAGES} user messages between these: history shows them)" in text
    assert said[-1].startswith("[39] ask 20 ") and said[-1].endswith(" … (507 more characters)")
    assert len(said[-1]) < HORIZON_USER_CHARS + 60


@pytest.mark.e2e
def test_ctxos_frames_show_names_the_horizon_and_verifies_the_frame(tmp_path: Path) -> None:
    from context_os.store.sqlite import SqliteStore

    db = tmp_path / "s.db"
    with SqliteStore(db) as store:
        hook = hook_for(store, "h1")
        drive(hook, 40)
        horizon, turn = hook.session.view.horizon, hook.session.view.turn
        hook.session.close()
    ctxos = [str(Path(sys.executable).parent / "ctxos"), f"--store=sqlite:///{db}", "frames", "show", "h1", str(turn)]
    shown = json.loads(subprocess.run([*ctxos, "--json"], capture_output=True, text=True, check=True).stdout)
    assert shown["ok"] and shown["horizon"] == horizon > 0
    assert shown["messages"][1]["text"].startswith("<context_os>\nThe conversation before chat entry")
    text = subprocess.run([*ctxos, "--no-messages"], capture_output=True, text=True, check=True).stdout
    assert f"history horizon: chat entry {horizon}" in text and "verified" in text


def test_a_history_the_harness_rewrites_under_the_horizon_renders_from_what_it_kept(store: Store, uid: str) -> None:
    hook = hook_for(store, uid)
    msgs = drive(hook, 40)
    horizon = hook.session.view.horizon
    # the harness compacts: its first messages stay, a summary replaces the rest
    kept = msgs[:5]
    rewritten = [*kept, user("Summary of the work so far: mod0 to mod39 read."), say("Carrying on.")]
    out = hook.transform_context(rewritten)
    assert not pairing_problems(OPENAI_PAIRING, out)
    view = hook.session.view
    assert view.horizon == horizon  # an entry number: the entries it counts are the ones still visible
    note = out[1]["content"]
    assert "It holds 1 user message, 2 assistant messages and 1 tool result; tool calls: read 1." in note
    assert [m["content"] for m in out[-2:]] == ["Summary of the work so far: mod0 to mod39 read.", "Carrying on."]
    assert all(verify_frame(store, f).ok for f in frame_docs(store, uid))
    drive(hook, 40, rewritten)  # and it moves on from there
    assert hook.session.view.horizon > horizon
    assert all(verify_frame(store, f).ok for f in frame_docs(store, uid)[-5:])
