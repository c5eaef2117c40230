"""A tool result longer than the policy's ``result_view_chars`` shows clipped (its first and last
lines, one note), the ``lines`` tool shows the rest, and frames re-render the clipped view."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from context_os import RetentionPolicy, Session
from context_os.context.frames import frame_docs, rerender, verify_frame
from context_os.context.tools import context_tools
from context_os.context.view import CLIP_HEAD_PERCENT, clip_result
from context_os.errors import ConfigError
from context_os.harness.openai import OpenAIHook
from context_os.store.sqlite import SqliteStore
from tests.helpers import EAGER, call, result, user

LOG = "\n".join(f"[INFO] test {i:05d} passed in {i % 7}.{i % 10} s" for i in range(1, 5001))
"""A long build log: 5,000 lines, about 190,000 characters."""


@pytest.fixture
def db(tmp_path: Path) -> SqliteStore:
    s = SqliteStore(tmp_path / "s.db")
    yield s
    s.close()


def hook_for(store: SqliteStore, **policy: object) -> OpenAIHook:
    return OpenAIHook(Session.open(store, "s1", harness="openai", policy=RetentionPolicy(**{**EAGER, **policy})))


def tool_texts(out: list[dict]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in out if m["role"] == "tool"}


def test_a_long_text_keeps_its_first_and_last_lines_and_names_what_is_left_out() -> None:
    shown = clip_result(LOG, 10_000, "r2")
    assert shown is not None and len(shown) < 10_300
    head, note, tail = shown.split("\n[context_os: ")[0], shown.split("\n")[0], shown.rsplit("\n", 1)[1]
    assert LOG.startswith(head + "\n") and note == "[INFO] test 00001 passed in 1.1 s"
    assert LOG.endswith("\n" + tail) and tail == "[INFO] test 05000 passed in 2.0 s"
    m = re.search(r"\(lines ([\d,]+)-([\d,]+) of 5,000\); lines\(id=\"r2\", start=(\d+), end=(\d+)\)", shown)
    assert m is not None
    first, last = int(m[1].replace(",", "")), int(m[2].replace(",", ""))
    lines = LOG.split("\n")
    shown_lines = shown.split("\n")
    # exactly the lines before ``first`` and after ``last`` are shown, each whole
    assert shown_lines[: first - 1] == lines[: first - 1] and shown_lines[first:] == lines[last:]
    assert (int(m[3]), int(m[4])) == (first, first + 199)
    assert len(head) <= 10_000 * CLIP_HEAD_PERCENT // 100 < len(head) + len(lines[first - 1]) + 1
    assert clip_result(LOG, len(LOG), "r2") is None  # it fits: not clipped


def test_one_huge_line_is_cut_within_itself() -> None:
    text = "x" * 50_000
    shown = clip_result(text, 2_000, "r4")
    assert shown is not None
    head, note, tail = shown.split("\n")
    assert head == "x" * 800 and tail == "x" * 1_200
    assert note.startswith("[context_os: 48,000 of 50,000 characters not shown here (lines 1-1 of 1)")


def test_a_managed_session_clips_a_huge_result_and_lines_shows_the_rest(db: SqliteStore) -> None:
    hook = hook_for(db, result_view_chars=20_000, collapse_after_turns=2)
    msgs = [user("run the tests"), call("c1", command="mvn test"), result("c1", LOG)]
    out = hook.transform_context(msgs)
    shown = tool_texts(out)["c1"]
    assert len(shown) < 20_400 and 'lines(id="r2"' in shown
    frame = frame_docs(db, "s1")[-1]["content"]
    assert frame["tokens"] < 6_000  # the clipped view, not the ~47,000 tokens of the log
    # the rest is a tool call away; lines are numbered as the note says
    tools = context_tools(hook.session)
    part = tools.call("lines", json.dumps({"id": "r2", "start": 2500, "end": 2502}))
    assert part.split("\n") == [
        "[context_os: r2, lines 2,500-2,502 of 5,000]",
        *LOG.split("\n")[2499:2502],
    ]
    # at most result_view_chars at a time: the rest is named
    many = tools.call("lines", json.dumps({"id": "r2", "start": 1, "end": 5000}))
    assert len(many) < 20_200 and many.endswith("not shown: at most 20,000 characters at a time]")
    # it collapses as any result; lines reads it back from the store once it left memory
    for n in range(2, 5):
        msgs += [call(f"c{n}", command="ls"), result(f"c{n}", f"out {n}")]
        out = hook.transform_context(msgs)
    assert tool_texts(out)["c1"].startswith("[bash output, ")
    assert hook.session.view.objects["toolcall:s1:c1"].content is None
    assert tools.call("lines", '{"id": "r2", "start": 5000}') == "\n".join(
        ["[context_os: r2, lines 5,000-5,000 of 5,000]", LOG.split("\n")[-1]]
    )
    # activated again, it shows clipped in the active pool too
    assert hook.session.activate("r2")["status"] == "activated"
    out = hook.transform_context(msgs)
    block = next(m["content"] for m in out if m["role"] == "user" and 'id="toolcall:s1:c1"' in m["content"])
    assert 'lines(id="r2"' in block and 20_000 < len(block) < 21_000
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "s1"))


def test_lines_refuses_what_it_cannot_show(db: SqliteStore) -> None:
    hook = hook_for(db)
    hook.transform_context([user("go"), call("c1", command="ls"), result("c1", "a\nb\n")])
    tools = context_tools(hook.session)

    def error(args: dict) -> str:
        return json.loads(tools.call("lines", json.dumps(args)))["error"]

    # a text that ends with a line break has no empty line after it
    assert tools.call("lines", '{"id": "r2", "end": 9}') == "[context_os: r2, lines 1-2 of 2]\na\nb"
    assert error({"id": "r2", "start": 3}) == "r2 has 2 lines; start is 3"
    assert error({"id": "r2", "start": -5}).endswith("start must be at least 1 and end at least start, got start -5")
    assert error({"id": "r2", "start": 2, "end": 1}).endswith("got start 2, end 1")
    assert "not text" in error({"id": "chat:s1:0"})
    assert "no tool result" in error({"id": "r9"})


def test_a_result_under_the_limit_or_an_unmanaged_session_shows_whole(db: SqliteStore) -> None:
    hook = OpenAIHook(Session.open(db, "s1", harness="openai"))  # defaults: passes through below 50k tokens
    out = hook.transform_context([user("go"), call("c1", command="cat"), result("c1", LOG[:60_000])])
    assert tool_texts(out)["c1"] == LOG[:60_000]
    hook = OpenAIHook(Session.open(db, "s2", harness="openai", policy=RetentionPolicy(**EAGER, result_view_chars=None)))
    out = hook.transform_context([user("go"), call("c1", command="cat"), result("c1", LOG)])
    assert tool_texts(out)["c1"] == LOG


def test_a_frame_of_an_earlier_layout_re_renders_the_result_whole(db: SqliteStore) -> None:
    hook = hook_for(db, result_view_chars=20_000)
    hook.transform_context([user("go"), call("c1", command="mvn test"), result("c1", LOG)])
    frame = frame_docs(db, "s1")[-1]
    assert frame["content"]["layout"] >= 4 and verify_frame(db, frame).ok
    old = rerender(db, {**frame, "content": {**frame["content"], "layout": 3}})
    assert LOG in [m.get("text") for m in old.messages]


def test_the_limit_is_checked() -> None:
    with pytest.raises(ConfigError, match="result_view_chars must be at least 1000"):
        RetentionPolicy(result_view_chars=10)


def test_a_result_given_in_blocks_shows_clipped_text_not_its_blocks(db: SqliteStore) -> None:
    """An Anthropic tool_result whose content is a list of blocks (text and an image) keeps them to
    show the output as it came; clipped, it shows the clipped text alone (the blocks hold it all)."""
    from context_os.harness.anthropic import AnthropicHook

    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    use = {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "mvn test"}}

    def shown(sid: str, text: str) -> dict:
        policy = RetentionPolicy(**EAGER, result_view_chars=20_000)
        hook = AnthropicHook(Session.open(db, sid, harness="anthropic", policy=policy))
        blocks = [{"type": "text", "text": text}, png]
        out = hook.transform_context(
            [
                {"role": "user", "content": "run the tests"},
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": blocks}]},
            ]
        )
        return next(
            b for m in out if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_result"
        )

    clipped = shown("a1", LOG)
    assert isinstance(clipped["content"], str) and len(clipped["content"]) < 20_400
    assert 'lines(id="r2"' in clipped["content"] and clipped["content"].endswith(LOG[-200:])
    assert shown("a2", LOG[:5_000])["content"] == [{"type": "text", "text": LOG[:5_000]}, png]  # as it came


def test_a_result_that_ends_with_a_line_break_has_as_many_lines_as_lines_says(db: SqliteStore) -> None:
    """A command's output ends with a line break: the note counts its lines as the ``lines`` tool
    does (5,000, not 5,001: from layout 8), and a frame of layout 7 re-renders its count as it was."""
    hook = hook_for(db, result_view_chars=20_000)
    out = hook.transform_context([user("run the tests"), call("c1", command="mvn test"), result("c1", LOG + "\n")])
    assert "(lines " in tool_texts(out)["c1"] and " of 5,000); " in tool_texts(out)["c1"]
    head = context_tools(hook.session).call("lines", json.dumps({"id": "r2", "start": 5000}))
    assert head.startswith("[context_os: r2, lines 5,000-5,000 of 5,000]")
    old = clip_result(LOG + "\n", 20_000, "r2", 7)
    assert old is not None and " of 5,001); " in old  # what a frame of layout 7 showed
    (frame,) = frame_docs(db, "s1")
    assert frame["content"]["layout"] >= 8 and verify_frame(db, frame).ok
