"""The thinking horizon: the reasoning a harness sends back with each assistant message (Pi's and
Claude Code's thinking blocks) stays on the newest ``keep_thinking_turns`` assistant messages that
have any; older ones render without it, at a cache break or when that pays. Real stores (SQLite,
and XTDB where marked), the real Pi hook."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from context_os import RetentionPolicy, Session
from context_os.context.frames import frame_docs, rerender, verify_frame
from context_os.harness.pi import PiHook
from context_os.store.base import Store
from tests.harness.pi_msgs import assistant, result, tool_call, user
from tests.helpers import EAGER

THOUGHT = "weighing the options for the parser " * 40


def thinking_call(n: int) -> dict[str, Any]:
    """An assistant message that thinks, says a word and calls a tool."""
    return assistant(
        {"type": "thinking", "thinking": f"thought {n}: {THOUGHT}", "thinkingSignature": f"sig{n}"},
        {"type": "text", "text": f"Reading part {n}."},
        tool_call(f"c{n}", "bash", command=f"cat part{n}.txt"),
    )


def drive(hook: PiHook, rounds: int) -> tuple[list[dict[str, Any]], list[Any]]:
    msgs: list[dict[str, Any]] = [user("Fix the parser.")]
    out: list[Any] = []
    for n in range(rounds):
        msgs += [thinking_call(n), result(f"c{n}", "bash", f"part {n}")]
        out = hook.transform_context(msgs)
    return msgs, out


def thoughts(out: list[Any]) -> list[str]:
    """The thinking texts an assistant message of the rendered context still carries, in order."""
    return [
        b["thinking"].split(":")[0]
        for m in out
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "thinking"
    ]


def test_only_the_newest_assistant_messages_keep_their_reasoning(store: Store, uid: str) -> None:
    policy = RetentionPolicy(**EAGER, keep_thinking_turns=2, history_max_tokens=None)
    hook = PiHook(Session.open(store, uid, harness="pi", policy=policy))
    msgs, out = drive(hook, 8)
    assert thoughts(out) == ["thought 6", "thought 7"]
    older = [m for m in out if m["role"] == "assistant"][:6]
    assert all(any(b.get("type") == "text" for b in m["content"]) for m in older)  # the words stay
    assert all(any(b.get("type") == "toolCall" for b in m["content"]) for m in older)  # and the calls
    assert hook.session.view.thinking_horizon == hook.session.view.entries[-2]["i"] - 2
    frames = frame_docs(store, uid)
    assert {f["content"].get("thinking_horizon", 0) for f in frames} > {0}
    assert all(verify_frame(store, f).ok for f in frames)
    # every message keeps it with the setting off, and the context is that much larger
    off = RetentionPolicy(**EAGER, keep_thinking_turns=None)
    whole = PiHook(Session.open(store, f"{uid}-all", harness="pi", policy=off))
    _, all_out = drive(whole, 8)
    assert thoughts(all_out) == [f"thought {n}" for n in range(8)]
    assert hook.last is not None and whole.last is not None
    assert hook.last.rendered.tokens < whole.last.rendered.tokens - 6 * len(THOUGHT) // 4 + 100


def test_a_resumed_session_keeps_its_thinking_horizon(store: Store, uid: str) -> None:
    policy = RetentionPolicy(**EAGER, keep_thinking_turns=1, history_max_tokens=None)
    hook = PiHook(Session.open(store, uid, harness="pi", policy=policy))
    msgs, out = drive(hook, 5)
    horizon = hook.session.view.thinking_horizon
    hook.session.close()
    again = PiHook(Session.open(store, uid, harness="pi", policy=policy))
    assert again.session.view.thinking_horizon == horizon > 0
    assert again.transform_context(msgs) == out
    assert all(verify_frame(store, f).ok for f in frame_docs(store, uid))


def test_with_a_prompt_cache_the_reasoning_leaves_re_sending_only_what_follows_it(store: Store, uid: str) -> None:
    """With a prompt cache to keep, clearing old reasoning sends the context anew from the first
    message it changes, so it goes when that pays: here each turn, as it re-sends only the last
    round; everything before stays a prefix of the previous call."""
    policy = RetentionPolicy(manage_from_tokens=0, keep_thinking_turns=1, history_max_tokens=None)
    hook = PiHook(Session.open(store, uid, harness="pi", policy=policy))
    msgs, out = drive(hook, 12)
    assert thoughts(out) == ["thought 11"]
    frames = frame_docs(store, uid)
    round_tokens = (len(THOUGHT) + 200) // 4
    assert all(f["content"]["tokens"] - f["content"]["prefix_tokens"] < 3 * round_tokens for f in frames[1:])
    assert all(verify_frame(store, f).ok for f in frames)


def test_a_session_that_passes_through_keeps_every_message_as_it_came(store: Store, uid: str) -> None:
    hook = PiHook(Session.open(store, uid, harness="pi", policy=RetentionPolicy(keep_thinking_turns=1)))
    msgs, out = drive(hook, 6)
    assert thoughts(out) == [f"thought {n}" for n in range(6)]  # under manage_from_tokens: unchanged
    assert hook.session.view.thinking_horizon == 0


def test_ctxos_frames_show_names_the_thinking_horizon(tmp_path: Path) -> None:
    from context_os.store.sqlite import SqliteStore

    db = tmp_path / "s.db"
    with SqliteStore(db) as store:
        policy = RetentionPolicy(**EAGER, history_max_tokens=None)
        hook = PiHook(Session.open(store, "t1", harness="pi", policy=policy))
        drive(hook, 5)
        horizon, turn = hook.session.view.thinking_horizon, hook.session.view.turn
        hook.session.close()
    ctxos = [str(Path(sys.executable).parent / "ctxos"), f"--store=sqlite:///{db}", "frames", "show", "t1", str(turn)]
    shown = json.loads(subprocess.run([*ctxos, "--json"], capture_output=True, text=True, check=True).stdout)
    assert shown["ok"] and shown["thinking_horizon"] == horizon > 0  # the default keeps two
    text = subprocess.run([*ctxos, "--no-messages"], capture_output=True, text=True, check=True).stdout
    assert f"thinking horizon: chat entry {horizon}" in text and "verified" in text


def test_a_session_reopened_without_the_setting_shows_every_message_s_reasoning_again(store: Store, uid: str) -> None:
    hook = PiHook(Session.open(store, uid, harness="pi", policy=RetentionPolicy(**EAGER, history_max_tokens=None)))
    msgs, out = drive(hook, 5)
    assert thoughts(out) == ["thought 3", "thought 4"]
    hook.session.close()
    off = RetentionPolicy(**EAGER, history_max_tokens=None, keep_thinking_turns=None)
    again = PiHook(Session.open(store, uid, harness="pi", policy=off))
    assert thoughts(again.transform_context(msgs)) == [f"thought {n}" for n in range(5)]
    assert again.session.view.thinking_horizon == 0
    assert all(verify_frame(store, f).ok for f in frame_docs(store, uid))


def test_a_message_of_nothing_but_reasoning_keeps_it(store: Store, uid: str) -> None:
    """Rendered without its reasoning, an assistant message with neither text nor calls would be
    empty, which the Anthropic API refuses (behind Pi too): it keeps its reasoning past the
    horizon (layout 5). A frame of layout 4 re-renders it the way it was rendered then, without."""
    policy = RetentionPolicy(**EAGER, keep_thinking_turns=1, history_max_tokens=None)
    hook = PiHook(Session.open(store, uid, harness="pi", policy=policy))
    alone = assistant({"type": "thinking", "thinking": f"alone: {THOUGHT}", "thinkingSignature": "s"})
    msgs: list[dict[str, Any]] = [user("Think first."), alone, user("Now fix it.")]
    for n in range(4):
        msgs += [thinking_call(n), result(f"c{n}", "bash", f"part {n}")]
        out = hook.transform_context(msgs)
    assert thoughts(out) == ["alone", "thought 3"]
    frame = frame_docs(store, uid)[-1]
    assert frame["content"]["layout"] >= 5 and verify_frame(store, frame).ok

    def dropped(layout: int) -> list[bool]:
        rendered = rerender(store, {**frame, "content": {**frame["content"], "layout": layout}})
        return [bool(m.get("drop_thinking")) for m in rendered.messages if m["role"] == "assistant"]

    assert dropped(5) == [False, True, True, True, False]
    assert dropped(4) == [True, True, True, True, False]
