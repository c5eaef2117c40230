"""The baseline context strategies of bench/strategies.py (bench/_strategies.py), on small hand-built
Pi sessions: each must do what the harness or library it stands for does, or the comparison is unfair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench._sessions import BenchSession
from bench._strategies import (
    CLEARED,
    ClearToolResults,
    FullHistory,
    Measured,
    PiCompaction,
    Prepared,
    TrimLast,
    find_cut_point,
    measure,
    prefix_tokens,
    prepare,
    trim_last,
    unpaired,
)
from bench.strategies import run_session

from context_os import Session
from context_os.harness.pi import COMPACTION_SUMMARY_PREFIX, COMPACTION_SUMMARY_SUFFIX
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import Transcript, read_session
from context_os.store.sqlite import SqliteStore
from tests.harness import pi_msgs
from tests.harness.pi_msgs import call, say, user
from tests.replay import test_cline as cline
from tests.replay import test_codex as codex


def result(call_id: str, text: str, name: str = "bash") -> dict[str, Any]:
    return pi_msgs.result(call_id, name, text)


def session(messages: list[dict[str, Any]], window: int = 200_000) -> Prepared:
    return prepare(Transcript("pi-v3", "pi", "pi", messages), "test", window)


def tool_session(turns: int, results: int, size: int, *first: dict[str, Any]) -> Prepared:
    """``turns`` user prompts, each followed by ``results`` bash calls with ``size``-char outputs
    (after the messages ``first``)."""
    messages: list[dict[str, Any]] = list(first)
    for t in range(turns):
        messages.append(user(f"task {t}"))
        for r in range(results):
            messages += [call(f"c{t}.{r}", "bash", command=f"run {t} {r}"), result(f"c{t}.{r}", "x" * size)]
        messages.append(say(f"done {t}"))
    return session(messages)


def sent(s: Prepared, strategy: Any, n: int) -> list[dict[str, Any]]:
    return [s.messages[x.src] if x.src >= 0 else {"role": "user"} for x in strategy.context(s, n)]


# --- trimming --------------------------------------------------------------------------------------


def test_trim_last_keeps_the_newest_messages_that_fit_from_a_user_message() -> None:
    roles = ["user", "assistant", "tool", "user", "assistant", "tool", "assistant", "tool"]
    tokens = [10, 10, 50, 10, 10, 30, 10, 20]
    # 20+10+30+10 = 70 fits, +10 (the user message) = 80 fits, +50 does not
    assert trim_last(roles, tokens, 80) == [3, 4, 5, 6, 7]
    # 79: the user message no longer fits, and a window must start on one: the run shrinks to nothing
    assert trim_last(roles, tokens, 79) == []


def test_trim_last_keeps_the_system_message_and_counts_it() -> None:
    roles = ["system", "user", "assistant", "user", "assistant", "tool"]
    tokens = [40, 10, 10, 10, 10, 10]
    assert trim_last(roles, tokens, 70) == [0, 3, 4, 5]
    assert trim_last(roles, tokens, 200) == [0, 1, 2, 3, 4, 5]


def test_trim_last_drops_trailing_messages_that_are_not_user_or_tool() -> None:
    assert trim_last(["user", "assistant", "tool", "assistant"], [1, 1, 1, 1], 100) == [0, 1, 2]


@pytest.mark.parametrize("budget", [60, 200, 450, 1_000, 5_000])
def test_trimming_never_separates_a_tool_call_from_its_result(budget: int) -> None:
    s = tool_session(turns=6, results=4, size=300)
    trim = TrimLast(budget)
    for n in s.calls:
        messages = sent(s, trim, n)
        assert not unpaired(messages)
        assert not messages or messages[0]["role"] == "user"
        assert sum(s.tokens[x.src] for x in trim.context(s, n)) <= budget


def test_unpaired_finds_calls_without_results_and_results_without_calls() -> None:
    msgs = [
        {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]},
        {"role": "tool", "tool_call_id": "a"},
        {"role": "user"},
        {"role": "tool", "tool_call_id": "z"},
    ]
    assert unpaired(msgs) == {"call:b", "result:z"}


# --- tool-result clearing ----------------------------------------------------------------------------


def test_clearing_waits_for_the_trigger() -> None:
    s = tool_session(turns=1, results=6, size=400)
    clear = ClearToolResults(trigger=s.prefix[-1])
    assert all(not x.cleared for n in s.calls for x in clear.context(s, n))
    assert clear.triggered == 0


def test_clearing_keeps_exactly_the_three_newest_results_and_puts_placeholders() -> None:
    s = tool_session(turns=2, results=5, size=4_000)  # 10 results of 1,000 tokens
    clear = ClearToolResults(trigger=5_000)
    n = s.calls[-1]
    shown = clear.context(s, n)
    results = [x for x in shown if s.messages[x.src]["role"] == "tool"]
    assert len(results) == 10
    assert [x.cleared for x in results] == [True] * 7 + [False] * 3
    assert all(x.tokens == (len(CLEARED) + 3) // 4 for x in results[:7])
    assert all(x.tokens == 1_000 for x in results[7:])
    assert [x.src for x in shown] == list(range(n))  # placeholders in place: nothing removed, pairs kept
    assert not unpaired(sent(s, clear, n))
    assert sum(x.tokens for x in shown) < s.prefix[n]


def test_clearing_keeps_everything_when_there_are_three_results_or_fewer() -> None:
    s = tool_session(turns=1, results=3, size=4_000)
    assert not any(x.cleared for x in ClearToolResults(trigger=10).context(s, s.calls[-1]))


# --- Pi compaction -------------------------------------------------------------------------------------


def test_cut_point_keeps_about_keep_recent_tokens_and_never_cuts_at_a_tool_result() -> None:
    roles = ["user", "assistant", "tool", "assistant", "tool", "user", "assistant", "tool"]
    tokens = [5, 5, 100, 5, 100, 5, 5, 100]
    # from the end: 100, 105, 110 (reaches 110 at index 5, a user message)
    assert find_cut_point(roles, tokens, 0, 8, 110) == 5
    # 200 is reached at index 4, a tool result: the next valid cut point is 5
    assert find_cut_point(roles, tokens, 0, 8, 200) == 5
    # reached at index 2 (a tool result): cut at the assistant message 3, which keeps its result
    assert find_cut_point(roles, tokens, 0, 8, 300) == 3
    # never reached: keep from the first valid cut point of the range
    assert find_cut_point(roles, tokens, 0, 8, 10_000) == 0
    assert find_cut_point(roles, tokens, 2, 8, 10_000) == 3


def test_compaction_triggers_at_the_threshold_and_keeps_about_keep_recent_tokens() -> None:
    # 20 turns of 4 results of 1,000 tokens (about 4,030 tokens a turn)
    s = tool_session(turns=20, results=4, size=4_000)
    pi = PiCompaction(context_window=40_000, reserve_tokens=10_000, keep_recent_tokens=8_000)
    for n in s.calls:
        before = list(pi.compactions)
        shown = pi.context(s, n)
        sent_tokens = sum(x.tokens for x in shown)
        if len(pi.compactions) > len(before):
            end, first_kept, reason = pi.compactions[-1]
            assert reason == "threshold"
            assert s.messages[end]["role"] == "user"  # checked when the run ended, before the new prompt
            grown = s.prefix[end] - (s.prefix[before[-1][1]] - pi.summary_tokens if before else 0)
            assert grown > 30_000  # the context up to the prompt passed contextWindow - reserveTokens
            # about keepRecentTokens: the cut moves to the next valid point, at most one message away
            assert abs((s.prefix[end] - s.prefix[first_kept]) - 8_000) <= 1_100
            assert s.messages[first_kept]["role"] != "tool"
        else:
            assert sent_tokens <= 30_000 + 4_100  # never more than a turn past the threshold
        assert not unpaired(sent(s, pi, n))
    assert len(pi.compactions) >= 2
    # after a compaction a call sends the summary first, then the kept messages
    assert shown[0].src == -1
    assert [x.src for x in shown[1:]] == list(range(pi.compactions[-1][1], s.calls[-1]))


def test_compaction_waits_for_the_threshold() -> None:
    s = tool_session(turns=6, results=4, size=4_000)  # about 24k tokens in all
    pi = PiCompaction(context_window=40_000, reserve_tokens=10_000, keep_recent_tokens=8_000)
    for n in s.calls:
        assert [x.src for x in pi.context(s, n)] == list(range(n))
    assert pi.compactions == []


def test_compaction_on_overflow_inside_a_long_run() -> None:
    s = tool_session(turns=1, results=30, size=4_000)  # one prompt, 30k tokens of results
    pi = PiCompaction(context_window=20_000, reserve_tokens=5_000, keep_recent_tokens=4_000)
    for n in s.calls:
        assert sum(x.tokens for x in pi.context(s, n)) <= 20_000
    assert pi.compactions and {reason for _, _, reason in pi.compactions} == {"overflow"}


def test_compaction_keeps_the_system_prompt_first() -> None:
    """A session's system messages (an OpenAI-format session's prompt, Pi 1.5's prompt sections)
    are never compacted away: after a compaction they go first, then the summary; they were
    dropped with the messages before the cut, which made Pi compaction look cheaper than it is."""
    prompt = {"role": "system", "content": "You are a coding agent. " * 400}
    s = tool_session(20, 4, 4_000, prompt)
    pi = PiCompaction(context_window=40_000, reserve_tokens=10_000, keep_recent_tokens=8_000)
    shown = [pi.context(s, n) for n in s.calls][-1]
    assert pi.compactions and shown[0].src == 0 and shown[1].src == -1
    assert [x.src for x in shown[2:]] == list(range(pi.compactions[-1][1], s.calls[-1]))
    assert pi.view_tokens(s, s.calls[-1]) == sum(x.tokens for x in shown) and shown[0].tokens > 2_000


def test_compaction_summary_is_a_fixed_size_placeholder_in_pis_wrapper() -> None:
    pi = PiCompaction(context_window=1, summary_chars=4_000)
    wrapper = len(COMPACTION_SUMMARY_PREFIX) + len(COMPACTION_SUMMARY_SUFFIX)
    assert pi.summary_tokens == (4_000 + wrapper + 3) // 4


# --- measures ------------------------------------------------------------------------------------------


def test_prefix_tokens_counts_the_identical_leading_messages() -> None:
    assert prefix_tokens([], ["a", "b"], [3, 4]) == 0  # the first call has none
    assert prefix_tokens(["a", "b"], ["a", "b", "c"], [3, 4, 5]) == 7  # append-only: everything before
    assert prefix_tokens(["a", "b", "c"], ["a", "x", "c"], [3, 4, 5]) == 3  # stops at the first change
    assert prefix_tokens(["a", "b"], ["b", "a"], [3, 4]) == 0  # same messages, other positions


def test_full_history_prefix_stability_is_one_minus_new_over_total() -> None:
    s = tool_session(turns=2, results=3, size=400)
    m = measure(s, FullHistory())
    assert m.tokens == [s.prefix[n] for n in s.calls]
    new = [s.prefix[n] - s.prefix[p] for p, n in zip([0, *s.calls], s.calls, strict=False)]
    assert m.prefix == [t - d for t, d in zip(m.tokens, new, strict=True)]
    assert m.uncached == s.prefix[s.calls[-1]]


def test_clearing_breaks_the_prefix_where_it_clears() -> None:
    s = tool_session(turns=1, results=6, size=4_000)  # results of 1,000 tokens at messages 2, 4, …, 12
    clear = ClearToolResults(trigger=3_500)
    m = measure(s, clear)
    assert clear.triggered == 3  # from the 4th result on
    # the last call clears one more result, the 4th newest (message 6): the prefix ends before it,
    # the two results before it being placeholders in both calls
    assert m.prefix[-1] == s.prefix[6] - 2 * (1_000 - (len(CLEARED) + 3) // 4)


def test_edit_target_in_context_follows_the_latest_view_and_the_edits_since() -> None:
    path = "/repo/app.py"
    messages = [
        user("fix app.py"),
        call("r1", "read", path=path),
        result("r1", "a = 1\nb = 2", name="read"),
        call("e1", "edit", path=path, oldText="a = 1", newText="a = 3"),
        result("e1", "Successfully replaced text in /repo/app.py.", name="edit"),
        call("b1", "bash", command="make"),
        result("b1", "y" * 40_000),
        call("b2", "bash", command="make"),
        result("b2", "y" * 40_000),
        call("b3", "bash", command="make"),
        result("b3", "y" * 40_000),
        call("e2", "edit", path=path, oldText="b = 2", newText="b = 4"),
        result("e2", "Successfully replaced text in /repo/app.py.", name="edit"),
    ]
    s = session(messages)
    full = measure(s, FullHistory())
    assert (full.edits_total, full.edits_with_target) == (2, 2)
    # the read result was cleared before the second edit: its target's content is no longer in view
    cleared = measure(s, ClearToolResults(trigger=20_000))
    assert (cleared.edits_total, cleared.edits_with_target) == (2, 1)
    # the read, then an edit of the same file: the read shows the file as it was
    assert full.stale_views == sum(1 for n in s.calls if n > 4)


def edits_kept(reads: list[tuple[dict[str, Any], str]], edits: list[tuple[str, str]]) -> tuple[int, int]:
    """(edits, edits with their target in context) of full history over a session that reads
    /repo/app.py (each read's arguments and output), then edits it (old and new text)."""
    path = "/repo/app.py"
    messages = [user("fix app.py")]
    for k, (args, output) in enumerate(reads):
        messages += [call(f"r{k}", "read", **args), result(f"r{k}", output, name="read")]
    for k, (old, new) in enumerate(edits):
        messages += [
            call(f"e{k}", "edit", path=path, oldText=old, newText=new),
            result(f"e{k}", "Successfully replaced text in /repo/app.py.", name="edit"),
        ]
    m = measure(session(messages), FullHistory())
    return m.edits_total, m.edits_with_target


def test_an_edit_whose_old_text_was_never_read_leaves_the_content_unknown() -> None:
    assert edits_kept([({"path": "/repo/app.py"}, "a = 1")], [("zzz", "a = 3"), ("a = 1", "a = 2")]) == (2, 1)


def test_reads_of_line_ranges_add_up_for_every_strategy_as_for_context_os() -> None:
    """A read of as many lines as its limit leaves the file's length open: the next range adds to
    it (the replay's own ``VirtualFile``), so full history knows the file an edit spans."""
    ranges = [
        ({"file_path": "/repo/app.py", "offset": 1, "limit": 2}, "     1\ta = 1\n     2\tb = 2"),
        ({"file_path": "/repo/app.py", "offset": 3, "limit": 2}, "     3\tc = 3\n     4\td = 4"),
    ]
    assert edits_kept(ranges, [("b = 2\nc = 3", "b = 5"), ("a = 1\nb = 5\nd = 4", "a = 2")]) == (2, 2)


def test_a_tool_whose_argument_picks_its_role_counts_for_every_strategy() -> None:
    """``str_replace_editor`` (SWE-agent, OpenHands) views, creates and edits by its ``command``:
    the baselines count its edits and views as the replay does, asking the role with the call's
    arguments (a lookup by name alone finds no role, and no edit)."""

    def editor(call_id: str, **args: Any) -> dict[str, Any]:
        function = {"name": "str_replace_editor", "arguments": json.dumps(args)}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }

    def output(call_id: str, text: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call_id, "content": text}

    path = "/repo/app.py"
    messages = [
        {"role": "user", "content": "fix app.py"},
        editor("v1", command="view", path=path),
        output("v1", f"Here's the result of running `cat -n` on {path}:\n     1\ta = 1\n     2\tb = 2\n"),
        editor("e1", command="str_replace", path=path, old_str="a = 1", new_str="a = 3"),
        output("e1", f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet:"),
        editor("e2", command="str_replace", path=path, old_str="zzz", new_str="b = 4"),
        output("e2", f"The file {path} has been edited."),
        {"role": "assistant", "content": "done"},
    ]
    s = prepare(Transcript("swe-agent", "openai", "swe-agent", messages), "test", 200_000)
    full = measure(s, FullHistory())
    assert (full.edits_total, full.edits_with_target) == (2, 2)
    assert full.stale_views == 2  # the view, then an edit of the file: the calls after it


def test_an_edit_of_the_open_file_counts_for_every_strategy_as_for_context_os(tmp_path: Path) -> None:
    """SWE-agent's windowed ``edit`` names no file: it edits the open file, which its output names.
    The baselines read an edit's target from its output too, as the replay does (from the call
    alone it had no target, and full history kept none of its edit targets)."""

    def windowed(call_id: str, name: str, **args: Any) -> dict[str, Any]:
        function = {"name": name, "arguments": json.dumps(args)}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }

    def window(call_id: str, lines: list[str], said: str = "") -> dict[str, Any]:
        shown = "\n".join(f"{k}:{line}" for k, line in enumerate(lines, 1))
        prompt = "(Open file: /repo/app.py)\n(Current directory: /repo)\nbash-$"
        text = f"{said}[File: /repo/app.py ({len(lines)} lines total)]\n{shown}\n\n{prompt}"
        return {"role": "tool", "tool_call_id": call_id, "content": text}

    messages = [
        {"role": "user", "content": "fix app.py"},
        windowed("o1", "open", path="app.py"),
        window("o1", ["a = 1", "b = 2"]),
        windowed("e1", "edit", search="a = 1", replace="a = 3"),
        window("e1", ["a = 3", "b = 2"], said="Text replaced. Please review the changes.\n"),
        windowed("e2", "edit", search="b = 2", replace="b = 4"),
        window("e2", ["a = 3", "b = 4"], said="Text replaced. Please review the changes.\n"),
        {"role": "assistant", "content": "done"},
    ]
    t = Transcript("swe-agent", "openai", "swe-agent", messages, "t", "/repo")
    full = measure(prepare(t, "windowed", 200_000), FullHistory())
    with SqliteStore(tmp_path / "s.db") as store:
        r = replay_transcript(t, Session.open(store, "windowed", harness=t.harness, workspace=t.cwd), verify="none")
    assert (full.edits_total, full.edits_with_target) == (2, 2) == (r.edits_total, r.edits_with_target_active)


def test_a_file_the_shell_changed_is_followed_for_every_strategy_as_for_context_os(tmp_path: Path) -> None:
    """Codex changes files with the shell too: after ``sed -i`` the text a read showed is no longer
    the file's (a stale view from then on, and an edit made after it has no current text in
    view); a heredoc writes the file whole (an edit after it has). The baselines follow them as
    the replay does (they took the read as current to the end, and the heredoc's file as unknown)."""

    def both(name: str, *rows: dict[str, Any]) -> tuple[Measured, Any]:
        path = tmp_path / f"{name}.jsonl"
        lines = [*codex.session_start(name, "say hello"), *rows, codex.message("assistant", "Said hello.")]
        path.write_text("".join(json.dumps(e) + "\n" for e in lines))
        t = read_session(path)
        full = measure(prepare(t, name, 200_000), FullHistory())
        with SqliteStore(tmp_path / f"{name}.db") as store:
            r = replay_transcript(t, Session.open(store, name, harness=t.harness, workspace=t.cwd), verify="none")
        return full, r

    full, r = both(
        "sed",
        codex.shell("s1", "cat app.py"),
        codex.ran("s1", "def greet():\n    return 'hi'\n"),
        codex.shell("s2", "sed -i 's/hi/hello/' app.py"),
        codex.ran("s2", ""),
        codex.patch("p1", codex.UPDATE),
        codex.patched("p1", codex.success("app.py")),
    )
    assert (full.edits_total, full.edits_with_target) == (1, 0) == (r.edits_total, r.edits_with_target_active)
    assert full.stale_views == r.stale_file_views_full == 2  # the calls after the sed
    full, r = both(
        "heredoc",
        codex.shell("s1", "cat > notes.md <<'EOF'\n# Notes\ngreet says hi\nEOF"),
        codex.ran("s1", ""),
        codex.patch("p1", "*** Begin Patch\n*** Update File: notes.md\n@@\n-greet says hi\n+hello\n*** End Patch"),
        codex.patched("p1", codex.success("notes.md")),
    )
    assert (full.edits_total, full.edits_with_target) == (1, 1) == (r.edits_total, r.edits_with_target_active)
    assert full.stale_views == r.stale_file_views_full == 1  # the call after the patch: the heredoc's text is old


def test_files_are_named_under_the_directory_codex_said_as_for_context_os(tmp_path: Path) -> None:
    """A rollout of Codex's first versions records no directory but in its environment message:
    the replay names files under that one (a read run in /work/app and a patch of ``notes.txt``
    are one file), and so do the baselines (they kept two files, and the edit had no target)."""
    env = "<environment_context>\n  <cwd>/work/app</cwd>\n</environment_context>"
    args = json.dumps({"command": ["bash", "-lc", "cat notes.txt"], "workdir": "/work/app"})
    output = json.dumps({"output": "one\ntwo\n", "metadata": {"exit_code": 0, "duration_seconds": 0.1}})
    fix = "*** Begin Patch\n*** Update File: notes.txt\n@@\n-two\n+three\n*** End Patch"
    rows = [
        {"id": "old-1", "timestamp": "2025-05-01T10:00:00.000Z", "instructions": None},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": env}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix my notes"}]},
        {"type": "function_call", "name": "shell", "arguments": args, "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": output},
        {"type": "custom_tool_call", "status": "completed", "call_id": "p1", "name": "apply_patch", "input": fix},
        {"type": "custom_tool_call_output", "call_id": "p1", "output": codex.success("notes.txt")},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed."}]},
    ]
    path = tmp_path / "rollout-old.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in rows))
    t = read_session(path)
    assert t.cwd is None
    full = measure(prepare(t, "old", 200_000), FullHistory())
    with SqliteStore(tmp_path / "s.db") as store:
        r = replay_transcript(t, Session.open(store, "old", harness=t.harness), verify="none")
    assert (full.edits_total, full.edits_with_target) == (1, 1) == (r.edits_total, r.edits_with_target_active)


def test_an_answer_pi_sends_no_more_makes_no_edit_for_any_strategy() -> None:
    """A failed answer (an overloaded provider) is a model call whose calls never ran, and Pi sends
    it no more: its retry follows it. The baselines counted the retry's edit twice, once for each
    call (the failed one had no message of its own to show and took the next one's)."""
    messages = [user("go"), call("r1", "read", path="/repo/a.py"), result("r1", "alpha = 1\n", name="read")]
    messages.append({**call("e0", "edit", path="/repo/a.py", oldText="alpha", newText="beta"), "stopReason": "error"})
    messages += [call("e1", "edit", path="/repo/a.py", oldText="alpha = 1", newText="alpha = 2")]
    messages += [result("e1", "Successfully replaced text in /repo/a.py.", name="edit"), say("done")]
    s = session(messages)
    assert len(s.calls) == 4  # the read, the failed answer, its retry, the last answer
    full = measure(s, FullHistory())
    assert (full.edits_total, full.edits_with_target) == (1, 1)


# --- the session as the replay reads it ----------------------------------------------------------------


def test_anthropic_messages_are_read_as_the_replay_reads_them(tmp_path: Path) -> None:
    """Cline's and Roo Code's histories are Anthropic messages (``tool_use`` and ``tool_result``
    blocks): the baselines read them through the Anthropic adapter, as the replay does, so full
    history sends what the replay's full transcript counts, tool calls and results included (read
    as chat completions, every call and result was lost: no edit, a fraction of the tokens)."""
    t = read_session(cline.write(tmp_path / "c.json", cline.session()))
    s = prepare(t, "cline", 200_000)
    full = measure(s, FullHistory())
    with SqliteStore(tmp_path / "s.db") as store:
        r = replay_transcript(t, Session.open(store, "cline", harness=t.harness, workspace=t.cwd), verify="none")
    assert full.tokens == [row.tokens_full for row in r.rows]
    assert (full.edits_total, full.edits_with_target) == (1, 1) == (r.edits_total, r.edits_with_target_active)
    assert unpaired(s.messages) == {"call:toolu_4"}  # every call answered but the last, which ends the task


def test_the_baselines_make_the_replays_model_calls() -> None:
    """No model call for the empty answer Pi writes when a run is aborted between calls, nor for the
    messages a fork copied from its parent (their calls were the parent's): not for context_os, not
    for the baselines either (they counted one call per assistant message, and the bench stopped:
    "context_os replayed 3 calls, baselines 5")."""
    usage = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0}
    never = {"role": "assistant", "content": [], "usage": usage, "stopReason": "aborted", "durationMs": 0}
    messages = [user("from the parent"), say("the parent's answer"), user("go")]
    messages += [call("b1", "bash", command="sleep 30"), result("b1", "Command aborted")]
    messages += [never, user("carry on"), say("done"), user("thanks"), say("you are welcome")]
    t = Transcript("pi-v3", "pi", "pi", messages, "fork", "/repo", inherited=2)
    bs = BenchSession("check", "pi", "fork.jsonl", None, t)
    run = run_session(bs)
    assert bs.calls == len(run.prepared.calls) == 3  # the bash call, "done", "you are welcome"
    assert [m.tokens for m in run.results[:1]] == [[run.prepared.prefix[n] for n in run.prepared.calls]]
    assert all(len(m.tokens) == 3 for m in run.results)
