"""Coding sessions drawn by hypothesis, for the property tests of sessions and frames: turns of
tool calls (outputs of a few lines to a few hundred, some huge), two calls at once, a call still
running when the model is called (its result comes with the next turn), file reads and edits
(Pi's ``read`` and ``edit``, which a session keeps as file objects), and talk."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.helpers import call, result, say, user

STEP = st.tuples(st.sampled_from(["call", "big", "read", "edit", "talk", "parallel", "pending"]), st.integers(0, 5))
"""One step of a turn: what it is, and a number that varies it (an output's size, a file)."""

SESSIONS = st.lists(st.lists(STEP, min_size=1, max_size=4), min_size=2, max_size=14)
"""A session: its turns, each the steps between two model calls."""

POLICIES: dict[str, dict[str, Any]] = {
    "eager": {"manage_from_tokens": 0, "cache_break_percent": None},
    "managed from 2,000 tokens": {"manage_from_tokens": 2000},
    "default": {},
    "short horizon": {"manage_from_tokens": 0, "history_max_tokens": 3000},
}
"""Retention settings a drawn session runs under: every rule due at once, the cache-break
controller from a small size, the defaults (a drawn session stays under what they manage, until
it edits a file it showed), a history horizon that a few turns pass."""


def messages(turns: list[list[tuple[str, int]]]) -> list[list[dict[str, Any]]]:
    """The OpenAI chat messages of each turn of ``turns``."""
    out, n = [], 0
    running: dict[str, Any] | None = None  # a call whose result comes with the next turn
    for steps in turns:
        turn: list[dict[str, Any]] = []
        if running is not None:
            turn.append(running)
            running = None
        for step, k in steps:
            n += 1
            if step == "pending" and running is None:  # (one at a time: another one is talk)
                turn.append(call(f"c{n}", "bash", command=f"sleep {k}"))
                running = result(f"c{n}", f"slept {k}")
                break  # the model is called while it runs
            if step == "parallel":
                calls = [call(f"c{n}{x}", "bash", command=f"grep {x}")["tool_calls"][0] for x in "ab"]
                turn.append({"role": "assistant", "content": None, "tool_calls": calls})
                turn += [result(f"c{n}{x}", f"match {x} {n}\n" * (3 + 20 * k)) for x in "ab"]
            elif step == "call":
                turn += [call(f"c{n}", "bash", command=f"ls {k}"), result(f"c{n}", f"out {n}\n" * (5 + 40 * k))]
            elif step == "big":
                turn += [call(f"c{n}", "bash", command="cat log"), result(f"c{n}", f"big {n}\n" * 3000)]
            elif step == "read":
                text = "".join(f"line {i} of f{k}, read at {n}\n" for i in range(60))
                turn += [call(f"c{n}", "read", path=f"src/f{k}.py"), result(f"c{n}", text)]
            elif step == "edit":
                edit = {"path": f"src/f{k}.py", "oldText": f"line 3 of f{k}", "newText": f"LINE 3 of f{k}"}
                turn += [call(f"c{n}", "edit", **edit), result(f"c{n}", "Successfully replaced text")]
            else:
                turn += [say(f"reply {n}"), user(f"question {n}")]
        out.append(turn)
    return out
