"""The Pi adapter: every role to the neutral form and back, through a real session and store."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.policy import RetentionPolicy
from context_os.errors import MalformedMessage
from context_os.harness.file_ops import file_op, strip_read_output
from context_os.harness.pi import (
    COMPACTION_SUMMARY_PREFIX,
    PiAdapter,
    PiHook,
    bash_execution_text,
    convert_to_llm,
)
from context_os.store.sqlite import SqliteStore
from tests.harness.pi_msgs import assistant, call, result, say, step, tool_call, user
from tests.helpers import EAGER

IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}


@pytest.fixture
def db(tmp_path: Path):
    s = SqliteStore(tmp_path / "s.db")
    yield s
    s.close()


def neutral_and_back(message: dict[str, Any]) -> dict[str, Any]:
    """What the engine renders of an unchanged message: the translated fields, back to Pi."""
    a = PiAdapter()
    m = a.translate(copy.deepcopy(message), 0)
    msg: dict[str, Any] = {k: v for k, v in m.items() if k not in ("h", "ts")}
    return a.render_msg(msg)  # type: ignore[arg-type]


LLM_ROLES = [
    pytest.param(user("hello"), id="user-blocks"),
    pytest.param({"role": "user", "content": "plain string", "timestamp": 1}, id="user-string"),
    pytest.param(
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, IMAGE, {"type": "text", "text": "and this"}],
            "timestamp": 2,
        },
        id="user-text-image-text",
    ),
    pytest.param(
        assistant(
            {"type": "thinking", "thinking": "hmm", "thinkingSignature": "sig"},
            {"type": "text", "text": "Reading it.", "textSignature": "t"},
            tool_call("c1", "read", path="a.py", offset=3),
            {**tool_call("c2", "bash", command="ls"), "thoughtSignature": "x"},
        ),
        id="assistant-thinking-text-calls",
    ),
    pytest.param(assistant(stop="aborted") | {"errorMessage": "Request was aborted."}, id="assistant-empty-aborted"),
    pytest.param(result("c1", "read", "line 1\nline 2"), id="tool-result"),
    pytest.param(result("c1", "bash", "boom", error=True), id="tool-result-error"),
    pytest.param(
        result("c1", "read", "Read image file [image/png]")
        | {"content": [{"type": "text", "text": "Read image file [image/png]"}, IMAGE]},
        id="tool-result-image",
    ),
    pytest.param(
        {"role": "system", "content": "", "sections": {"preamble": "You are Pi."}, "toolsAdded": [], "timestamp": 3},
        id="system-1.5",
    ),
]


@pytest.mark.parametrize("message", LLM_ROLES)
def test_llm_roles_round_trip_exactly(message: dict[str, Any]) -> None:
    assert neutral_and_back(message) == message


CONVERTED = [
    pytest.param(
        {
            "role": "bashExecution",
            "command": "ls",
            "output": "a\nb\n",
            "exitCode": 2,
            "cancelled": False,
            "truncated": False,
            "timestamp": 4,
        },
        id="bash",
    ),
    pytest.param(
        {"role": "custom", "customType": "note", "content": "injected", "display": True, "timestamp": 5}, id="custom"
    ),
    pytest.param({"role": "branchSummary", "summary": "tried X", "fromId": "ab12", "timestamp": 6}, id="branch"),
    pytest.param({"role": "compactionSummary", "summary": "did Y", "tokensBefore": 9, "timestamp": 7}, id="compaction"),
]


@pytest.mark.parametrize("message", CONVERTED)
def test_coding_agent_roles_come_back_as_convert_to_llm_gives_them(message: dict[str, Any]) -> None:
    assert neutral_and_back(message) == convert_to_llm(message)


def test_convert_to_llm_texts_match_pi() -> None:
    bash = {
        "role": "bashExecution",
        "command": "make",
        "output": "",
        "exitCode": 0,
        "cancelled": True,
        "truncated": True,
    }
    assert bash_execution_text(bash) == "Ran `make`\n(no output)\n\n(command cancelled)"
    out = {
        "role": "bashExecution",
        "command": "x",
        "output": "o",
        "exitCode": 1,
        "truncated": True,
        "fullOutputPath": "/t",
    }
    assert (
        bash_execution_text(out)
        == "Ran `x`\n```\no\n```\n\nCommand exited with code 1\n\n[Output truncated. Full output: /t]"
    )
    summary = convert_to_llm({"role": "compactionSummary", "summary": "S", "timestamp": 1})
    assert summary is not None
    assert summary["content"][0]["text"] == COMPACTION_SUMMARY_PREFIX + "S\n</summary>"
    assert convert_to_llm({"role": "bashExecution", "command": "x", "output": "", "excludeFromContext": True}) is None


def test_thinking_is_counted_like_pi_counts_it() -> None:
    m = PiAdapter().translate(assistant({"type": "thinking", "thinking": "x" * 400}, {"type": "text", "text": "ok"}), 0)
    assert m["extra_chars"] == 400 and m["text"] == "ok"


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "wizard", "content": "x"}, "role"),
        ({"role": "toolResult", "content": [], "isError": False}, "toolCallId"),
        ({"role": "assistant", "content": [{"type": "toolCall", "id": "c", "arguments": {}}]}, "content[0]"),
        ({"role": "assistant", "content": [{"type": "video"}]}, "content[0]"),
        ({"role": "user", "content": 3}, "content"),
    ],
)
def test_malformed_messages_name_the_field(message: dict[str, Any], field: str) -> None:
    with pytest.raises(MalformedMessage) as e:
        PiAdapter().translate(message, 7)
    assert e.value.index == 7 and e.value.field == field


def test_the_hook_collapses_old_results_keeps_pairs_and_frames_verify(db) -> None:
    hook = PiHook(Session.open(db, "p1", harness="pi", policy=RetentionPolicy(**EAGER)))
    msgs: list[dict[str, Any]] = [user("go")]
    for n in range(5):
        msgs += step(f"c{n}", "bash", f"output {n}\n" + "x" * 2000, command=f"cat f{n}")
        out = hook.transform_context(msgs)
    results = {m["toolCallId"]: m for m in out if m["role"] == "toolResult"}
    assert results["c0"]["content"][0]["text"].startswith("[bash output, ")
    assert results["c0"]["toolName"] == "bash" and results["c0"]["isError"] is False
    assert results["c4"]["content"][0]["text"].startswith("output 4")
    assert out[-1]["role"] == "toolResult"  # no objects besides tool results: no context_os block
    assert out[1] == msgs[1]  # the assistant message, exactly as Pi stored it
    msgs.append(say("done"))
    msgs.append(
        {
            "role": "bashExecution",
            "command": "ls",
            "output": "",
            "exitCode": 0,
            "cancelled": False,
            "truncated": False,
            "excludeFromContext": True,
            "timestamp": 9,
        }
    )
    msgs.append(user("thanks"))
    out = hook.transform_context(msgs)
    assert out[-1] == msgs[-1]  # the excluded bash run is left out, as Pi leaves it out
    for f in frame_docs(hook.session.store, hook.session.id):
        assert verify_frame(db, f).ok


class CountingPi(PiAdapter):
    """The real adapter, counting the messages whose ``sent`` it was asked."""

    looked = 0

    def sent(self, message: dict[str, Any]) -> bool:
        self.looked += 1
        return super().sent(message)


def bash_run(command: str, output: str, *, excluded: bool = False) -> dict[str, Any]:
    return {
        "role": "bashExecution",
        "command": command,
        "output": output,
        "exitCode": 0,
        "cancelled": False,
        "truncated": False,
        "excludeFromContext": excluded,
        "timestamp": 9,
    }


def test_a_call_reads_only_what_came_since_the_last_one(db) -> None:
    """The harness appends to one list: a call looks at the new messages (and the last one
    again), not the whole list; a list built anew is read whole, and gives the same context."""
    adapter = CountingPi()
    hook = PiHook(Session.open(db, "p3", harness="pi", policy=RetentionPolicy(**EAGER)), adapter)
    msgs: list[dict[str, Any]] = [user("go")]
    for n in range(10):
        msgs += step(f"c{n}", "bash", f"output {n}", command=f"cat f{n}")
    hook.transform_context(msgs)
    assert adapter.looked == len(msgs) == 21
    msgs += step("c10", "bash", "output 10", command="cat f10")
    out = hook.transform_context(msgs)
    assert adapter.looked == 21 + 3
    again = hook.transform_context(copy.deepcopy(msgs))  # new objects, same messages
    assert adapter.looked == 24 + len(msgs) and again == out and not hook.last.sync.rewritten


def test_a_list_whose_last_message_was_taken_back_is_read_right(db) -> None:
    """The harness drops its last message (a retried turn), calls, then goes on: every message
    still in the list is in the context."""
    hook = PiHook(Session.open(db, "p5", harness="pi", policy=RetentionPolicy(**EAGER)))
    msgs = [user("go"), say("first answer"), user("more please")]
    hook.transform_context(msgs)
    msgs.pop()
    hook.transform_context(msgs)
    msgs.append(user("again"))
    out = hook.transform_context(msgs)
    assert out == msgs


def test_a_bash_run_left_out_after_it_was_sent_leaves_the_context(db) -> None:
    """``excludeFromContext`` set in place on the last message: it is read again, so the next
    call leaves it out, as Pi does."""
    hook = PiHook(Session.open(db, "p4", harness="pi", policy=RetentionPolicy(**EAGER)))
    msgs = [user("go"), bash_run("ls", "a.txt b.txt")]
    out = hook.transform_context(msgs)
    assert "a.txt b.txt" in str(out)
    msgs[-1]["excludeFromContext"] = True
    out = hook.transform_context(msgs)
    assert "a.txt b.txt" not in str(out) and out[-1] == msgs[0]


def test_an_unanswered_call_gets_a_synthetic_result(db) -> None:
    hook = PiHook(Session.open(db, "p2", harness="pi", policy=RetentionPolicy(**EAGER)))
    out = hook.transform_context([user("go"), call("c1", "bash", command="sleep 100")])
    assert out[2]["role"] == "toolResult" and out[2]["toolCallId"] == "c1"
    assert "No result was recorded" in out[2]["content"][0]["text"]


def test_read_outputs_lose_pis_notes_and_cat_n_numbers() -> None:
    assert strip_read_output("a\nb\n\n[5 more lines in file. Use offset=3 to continue.]", 1) == ("a\nb", 1, 7)
    assert strip_read_output("x\n\n[Showing lines 10-10 of 99 (50.0KB limit). Use offset=11 to continue]", 10) == (
        "x",
        10,
        99,
    )
    # an earlier Pi's note (a recorded session's: its line was taken for the file's last)
    earlier = "a\nb\n\n... (102 more lines not shown. Use offset=31 to continue reading)"
    assert strip_read_output(earlier, 29) == ("a\nb", 29, 132)
    assert strip_read_output("     4\tfoo\n     5→bar", None) == ("foo\nbar", 4, 5)
    assert strip_read_output("[Line 3 is 40KB, exceeds 30KB limit. Use bash: sed -n '3p' f]", 3) is None
    op = file_op("edit", {"path": "a", "edits": [{"oldText": "1", "newText": "2"}]}, "ok")
    assert op is not None and op.edits == [("1", "2")]
    assert file_op("edit", {"file_path": "a", "old_string": "1", "new_string": "2"}, "ok").edits == [("1", "2")]  # type: ignore[union-attr]
    assert file_op("read", {"path": "a"}, "text", is_error=True) is None
    assert file_op("bash", {"command": "cat a"}, "text") is None


@pytest.mark.parametrize("stop", ["aborted", "error"])
def test_an_aborted_or_failed_answer_is_not_what_the_model_sees(db, stop: str) -> None:
    """Pi keeps an answer the user aborted (or that failed) in its messages, but pi-ai never sends
    an assistant message that ended so: the context, and the frame that records it, leave it out
    too, so the frame is what the model was sent."""
    hook = PiHook(Session.open(db, "p6", harness="pi", policy=RetentionPolicy(**EAGER)))
    cut = {**assistant(stop=stop), "errorMessage": "Request was aborted"}
    msgs = [*step("c1", "bash", "Command aborted", command="sleep 5"), cut, user("go on")]
    msgs.insert(0, user("sleep"))
    out = hook.transform_context(msgs)
    assert out == [m for m in msgs if m is not cut]
    [frame] = frame_docs(db, "p6")
    assert frame["content"]["messages"] == 4 and verify_frame(db, frame).ok
    assert [hook.session.view.entries[i]["role"] for i in hook.session.view.visible] == [
        "user",
        "assistant",
        "tool",
        "user",
    ]


def test_images_count_in_what_the_context_costs_as_the_other_adapters_count_them(db) -> None:
    # a screenshot costs the model about width x height / 750 tokens (at most 1,600): a user's
    # image counts whole, a read result's while the result shows in full (its stub says so)
    import base64

    from tests.helpers import png

    def image(width: int, height: int) -> dict[str, Any]:
        return {"type": "image", "data": base64.b64encode(png(width, height)).decode(), "mimeType": "image/png"}

    hook = PiHook(Session.open(db, "p1", harness="pi", policy=RetentionPolicy(**EAGER)))
    msgs: list[dict[str, Any]] = [
        {**user("what is this"), "content": [{"type": "text", "text": "what is this"}, image(300, 250)]}
    ]
    hook.transform_context(msgs)
    assert hook.last.tokens_full == hook.last.tokens == 3 + 100  # the text, the image
    for n in range(4):
        msgs += step(f"s{n}", "read", "Read image file [image/png]", path=f"shot{n}.png")
        msgs[-1]["content"] = [{"type": "text", "text": "Read image file [image/png]"}, image(1000, 600)]
        out = hook.transform_context(msgs)
    assert hook.session.view.objects["toolcall:p1:s0"].tokens == 7 + 800  # the note, the image
    stub = next(m for m in out if m["role"] == "toolResult" and m["toolCallId"] == "s0")["content"][0]["text"]
    assert stub.startswith("[read output, 807 tokens, collapsed")
    assert hook.last.tokens_full > 4 * 800 > hook.last.tokens
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "p1"))
