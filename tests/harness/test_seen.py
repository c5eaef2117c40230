"""The hook's kept reading of the harness list (``_Seen``: what came since the last call, plus the
last message again) must see each list exactly as reading it whole does, for everything a
harness does to its list: append, change its last message in place, take messages back from the
end (a retried turn), build the list anew. Pi filters messages (``excludeFromContext``),
Anthropic splits them (tool results in one user message): both kinds of bookkeeping."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import pytest

from context_os.harness import base
from context_os.harness.anthropic import AnthropicAdapter
from context_os.harness.base import WINDOW, Adapter, _Seen
from context_os.harness.pi import PiAdapter


def pi_message(rng: random.Random, n: int) -> dict[str, Any]:
    if rng.random() < 0.4:
        return {
            "role": "bashExecution",
            "command": f"ls {n}",
            "output": f"out {n}",
            "exitCode": 0,
            "cancelled": False,
            "truncated": False,
            "timestamp": n,
            "excludeFromContext": rng.random() < 0.5,
        }
    return {"role": "user", "content": f"u{n}", "timestamp": n}


def pi_change(rng: random.Random, m: dict[str, Any]) -> None:
    if m["role"] == "bashExecution":
        m["excludeFromContext"] = not m["excludeFromContext"]
    else:
        m["content"] += " (edited)"


def anthropic_message(rng: random.Random, n: int) -> dict[str, Any]:
    if rng.random() < 0.5:
        results = [
            {"type": "tool_result", "tool_use_id": f"t{n}.{j}", "content": "out"} for j in range(rng.randint(1, 3))
        ]
        text = [{"type": "text", "text": f"and {n}"}] if rng.random() < 0.3 else []
        return {"role": "user", "content": results + text}
    return {"role": rng.choice(["user", "assistant"]), "content": f"m{n}"}


def anthropic_change(rng: random.Random, m: dict[str, Any]) -> None:
    if isinstance(m["content"], list):  # a result added to the last user message, as a harness may
        m["content"].insert(0, {"type": "tool_result", "tool_use_id": f"late{rng.random()}", "content": "x"})
    else:
        m["content"] += " (edited)"


CASES: dict[str, tuple[Callable[[], Adapter[Any]], Callable[..., Any], Callable[..., None]]] = {
    "pi": (PiAdapter, pi_message, pi_change),
    "anthropic": (AnthropicAdapter, anthropic_message, anthropic_change),
}


def reading(layout: Any) -> tuple[list[Any], list[int], int]:
    return list(layout.messages), list(layout.starts), layout.total


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("every", [False, True])
def test_the_kept_reading_sees_the_list_as_a_whole_reading_does(
    name: str, seed: int, every: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``every``: each message read before is compared (``ContextHook.every_message``), and one
    replaced anywhere is seen; else the first, the middle and the newest ``WINDOW`` are (a list
    appended to, cut at its end by no more than that, or built anew is seen either way). The
    window is made short here, so that these lists outgrow it."""
    monkeypatch.setattr(base, "WINDOW", 4)
    make_adapter, make, change = CASES[name]
    adapter = make_adapter()
    rng = random.Random(seed)
    seen = _Seen()
    messages: list[Any] = []
    made = 0
    for _ in range(80 if not every else 60):
        action = rng.random()
        if action < 0.55 or not messages:
            for _ in range(rng.randint(1, 3)):
                messages.append(make(rng, made))
                made += 1
        elif action < 0.75:
            change(rng, messages[-1])  # in place: the same object
        elif action < 0.85:
            del messages[len(messages) - rng.randint(1, min(3, len(messages))) :]
        elif action < 0.9 or not every:
            messages = copy.deepcopy(messages)  # the list built anew, message by message
        else:  # one message anywhere replaced by an edited copy
            k = rng.randrange(len(messages))
            messages[k] = copy.deepcopy(messages[k])
            change(rng, messages[k])
        got = seen.layout(adapter, messages, every=every)
        assert reading(got) == reading(_Seen().layout(adapter, messages, every=every))


def test_a_long_list_is_compared_at_its_first_middle_and_newest_messages_only() -> None:
    """Without ``every``, a call compares a bounded number of the messages read before, whatever
    the list's length (it compared, and copied, all of them before 2026-12-04)."""
    adapter = AnthropicAdapter()
    rng = random.Random(1)
    messages = [anthropic_message(rng, n) for n in range(5_000)]
    seen: _Seen[Any] = _Seen()
    seen.layout(adapter, messages)
    assert len(seen.marks) == WINDOW + 2
    assert [i for i, _ in seen.marks[:2]] == [0, 4_999 // 2]
    assert seen.marks[-1][0] == 4_998  # the last message is read again at every call
    seen.layout(adapter, messages, every=True)
    assert len(seen.marks) == 4_999
