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

from context_os.harness.anthropic import AnthropicAdapter
from context_os.harness.base import Adapter, _Seen
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
def test_the_kept_reading_sees_the_list_as_a_whole_reading_does(name: str, seed: int) -> None:
    make_adapter, make, change = CASES[name]
    adapter = make_adapter()
    rng = random.Random(seed)
    seen = _Seen()
    messages: list[Any] = []
    made = 0
    for _ in range(80):
        action = rng.random()
        if action < 0.55 or not messages:
            for _ in range(rng.randint(1, 3)):
                messages.append(make(rng, made))
                made += 1
        elif action < 0.75:
            change(rng, messages[-1])  # in place: the same object
        elif action < 0.9:
            del messages[len(messages) - rng.randint(1, min(3, len(messages))) :]
        else:
            messages = copy.deepcopy(messages)  # the list built anew, message by message
        assert reading(seen.layout(adapter, messages)) == reading(_Seen().layout(adapter, messages))
