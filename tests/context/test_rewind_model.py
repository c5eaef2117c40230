"""Histories that go back, drawn by hypothesis: a harness's message list grows by turns (talk,
tool calls with outputs small and large, file reads and edits, seen as files or not), one or
several turns per call, and between calls it may go back to an earlier turn and go on from there
(a rewind, Pi's ``/tree``, an edited prompt), have an earlier user message edited in place, or
send the same list again (a retry). Every message carries a marker of its own, so whatever of a
left branch is still shown can be found.

At every call:

* nothing of a message the list no longer holds is shown (not its text, nor its output collapsed
  or listed in the metadata pool, nor a file only it read): a session shows what the history it
  is given holds (a file the kept history read shows its text now, with the edits a left branch
  made: a rewind takes back the conversation, not the files);
* every user message and assistant text of the list is shown;
* below the size context_os manages from (the default policy on these small sessions), the
  context is the list, exactly (Anthropic's user messages that follow one another as one);
* the session closed and opened again, its new hook given the same list returns the same context.

And every frame verifies at the end.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from context_os import Session
from context_os.context.policy import RetentionPolicy
from context_os.harness import AnthropicHook, OpenAIHook, VirtualFiles
from context_os.store.sqlite import SqliteStore
from tests.context._drawn import POLICIES
from tests.helpers import assert_frames_verify, call, result, say, user
from tests.reliability._adversarial import FUZZ, examples

MARK = re.compile(r"\bM(\d+)x\b")
"""The marker of message ``n``: ``M<n>x``."""

STEP = st.one_of(
    st.tuples(st.sampled_from(["talk", "call", "big", "read", "edit"]), st.integers(0, 3)),
    st.tuples(st.just("rewind"), st.integers(0, 1000)),
    st.tuples(st.just("reword"), st.integers(0, 1000)),
    st.tuples(st.just("retry"), st.just(0)),
)
CALLS = st.lists(st.lists(STEP, min_size=1, max_size=3), min_size=2, max_size=12)


class History:
    """The harness's list, and the length of each turn boundary in it (where a rewind goes)."""

    def __init__(self) -> None:
        self.msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}, user("M0x start")]
        self.bounds = [len(self.msgs)]
        self.n = 0
        self.edits: list[tuple[int, int]] = []
        """(marker, file) of every edit made, on any branch."""

    def mark(self) -> str:
        self.n += 1
        return f"M{self.n}x"

    def step(self, what: str, k: int) -> None:
        if what == "rewind":
            keep = self.bounds[k % len(self.bounds)]
            del self.msgs[keep:]
            self.bounds = [b for b in self.bounds if b <= keep]
            self.msgs.append(user(f"{self.mark()} again from here"))
            return
        if what == "reword":
            users = [i for i, m in enumerate(self.msgs) if m["role"] == "user"]
            i = users[k % len(users)]
            self.msgs[i] = user(f"{self.mark()} edited: {self.msgs[i]['content']}")
            return
        if what == "retry":
            return
        m = self.mark()
        if what == "talk":
            self.msgs += [say(f"{m} reply"), user(f"{self.mark()} question {k}")]
        elif what == "call":
            self.msgs += [call(f"c{m}", "bash", command=f"ls {k}"), result(f"c{m}", f"{m} out\n" * (5 + 40 * k))]
        elif what == "big":
            self.msgs += [call(f"c{m}", "bash", command="cat log"), result(f"c{m}", f"{m} big\n" * 3000)]
        elif what == "read":
            text = "".join(f"{m} line {i} of f{k}\n" for i in range(60))
            self.msgs += [call(f"c{m}", "read", path=f"src/f{k}.py"), result(f"c{m}", text)]
        else:  # an edit of a line a read showed (of any read: an edit of text unknown leaves it unknown)
            self.edits.append((self.n, k))
            edit = {"path": f"src/f{k}.py", "oldText": " line 3 of ", "newText": f" line 3 ({m}) of "}
            self.msgs += [call(f"c{m}", "edit", **edit), result(f"c{m}", "Successfully replaced text")]
        self.bounds.append(len(self.msgs))

    def files(self) -> set[int]:
        """The files the list reads or edits."""
        return {
            int(m.group(1))
            for msg in self.msgs
            for c in msg.get("tool_calls") or ()
            if (m := re.search(r"src/f(\d)\.py", c["function"]["arguments"]))
        }


def anthropic(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same history as Anthropic Messages (its system prompt is a parameter, left out)."""
    out: list[dict[str, Any]] = []
    for m in msgs:
        if m["role"] == "user":
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "tool":
            out.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}],
                }
            )
        elif m["role"] == "assistant" and m.get("tool_calls"):
            uses = [
                {
                    "type": "tool_use",
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "input": json.loads(c["function"]["arguments"]),
                }
                for c in m["tool_calls"]
            ]
            out.append({"role": "assistant", "content": uses})
        elif m["role"] == "assistant":
            out.append({"role": "assistant", "content": [{"type": "text", "text": m["content"]}]})
    return out


def merged(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic Messages with the user messages that follow one another as one (the API takes
    them so; the hook sends them so)."""
    out: list[dict[str, Any]] = []
    for m in msgs:
        blocks = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]
        if out and m["role"] == "user" and out[-1]["role"] == "user":
            before = out[-1]["content"]
            out[-1] = {
                "role": "user",
                "content": [*([{"type": "text", "text": before}] if isinstance(before, str) else before), *blocks],
            }
        else:
            out.append(m)
    return out


def markers(value: Any) -> set[int]:
    return {int(x) for x in MARK.findall(json.dumps(value))}


def texts(msgs: list[dict[str, Any]]) -> list[str]:
    """The user messages and assistant texts, in order."""
    return [m["content"] for m in msgs if m["role"] in ("user", "assistant") and isinstance(m.get("content"), str)]


@settings(FUZZ, max_examples=examples(120))
@given(
    calls=CALLS,
    policy=st.sampled_from(sorted(POLICIES)),
    files=st.booleans(),
    harness=st.sampled_from(["openai", "anthropic"]),
    data=st.data(),
)
def test_a_history_that_goes_back_shows_what_it_holds_and_nothing_it_left(
    calls: list[list[tuple[str, int]]], policy: str, files: bool, harness: str, data: st.DataObject
) -> None:
    """``files``: the reads and edits are file objects (``VirtualFiles``), else tool outputs;
    ``harness``: the history as OpenAI chat messages or as Anthropic Messages."""
    hook_class: type[OpenAIHook] | type[AnthropicHook] = OpenAIHook if harness == "openai" else AnthropicHook
    shape = (lambda msgs: msgs) if harness == "openai" else anthropic
    sent = (lambda msgs: msgs) if harness == "openai" else lambda msgs: merged(anthropic(msgs))
    with tempfile.TemporaryDirectory() as tmp, SqliteStore(Path(tmp) / "s.db") as db:
        options = POLICIES[policy]
        session = Session.open(db, "s", redact=False, harness=harness, policy=RetentionPolicy(**options))
        h = History()

        def hook_of(session: Session) -> OpenAIHook | AnthropicHook:
            observe = VirtualFiles(session, root="/repo", tool_names="canonical").observe if files else None
            return hook_class(session, on_sync=observe)

        hook = hook_of(session)
        try:
            for steps in calls:
                reopen = data.draw(st.booleans(), label="opened again after this call")
                for what, k in steps:
                    h.step(what, k)
                out = hook.transform_context(shape(h.msgs))
                held = markers(h.msgs)
                if files:  # a file the list still reads shows its text now, a left branch's edits in it
                    held |= {n for n, k in h.edits if k in h.files()}
                assert markers(out) <= held, sorted(markers(out) - held)
                shown = json.dumps(out)
                for text in texts(h.msgs):
                    assert json.dumps(text)[1:-1] in shown, text
                if policy == "default" and not files:
                    assert out == sent(h.msgs)
                if reopen:
                    session.close()
                    session = Session.open(db, "s", redact=False, harness=harness)
                    hook = hook_of(session)
                    assert hook.transform_context(shape(h.msgs)) == out
        finally:
            session.close()
        assert_frames_verify(db, "s")
