"""``finalize`` of the harnesses that merge messages (Anthropic: consecutive turns of one role;
pydantic-ai: consecutive requests, returns named after their calls) goes on from where the last
list it merged still holds: over lists that grow, change in the middle and lose their end, it
must give exactly what a merge of each list from scratch gives."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart

from context_os.harness.anthropic import merge_turns
from context_os.harness.base import MergeCache
from context_os.harness.pydantic_ai import merge_requests


def anthropic_message(rng: random.Random, n: int) -> dict[str, Any]:
    role = rng.choice(["user", "user", "assistant", "system"])
    if role == "user" and rng.random() < 0.5:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": f"out {n}"}]}
    return {"role": role, "content": [{"type": "text", "text": f"{role} {n}"}]}


def pydantic_message(rng: random.Random, n: int) -> Any:
    call = f"c{rng.randrange(6)}"  # ids repeat: a later call may reuse one under another name
    if rng.random() < 0.4:
        return ModelResponse(parts=[TextPart(f"r{n}"), ToolCallPart(rng.choice(["read", "bash"]), {}, call)])
    part = rng.choice(
        [
            UserPromptPart(f"u{n}"),
            ToolReturnPart(tool_name="", content=f"out {n}", tool_call_id=call),  # named by finalize
            ToolReturnPart(tool_name="grep", content=f"out {n}", tool_call_id=call),
        ]
    )
    return ModelRequest(parts=[part])


CASES: dict[str, tuple[Callable[..., list[Any]], Callable[[random.Random, int], Any]]] = {
    "anthropic": (merge_turns, anthropic_message),
    "pydantic-ai": (merge_requests, pydantic_message),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("seed", range(50))
def test_merging_on_from_the_last_list_gives_what_merging_it_whole_gives(name: str, seed: int) -> None:
    merge, make = CASES[name]
    rng = random.Random(seed)
    cache: MergeCache[Any] = MergeCache()
    messages: list[Any] = []
    made = 0
    for _ in range(60):
        action = rng.random()
        if action < 0.6 or not messages:  # the harness appends
            for _ in range(rng.randint(1, 4)):
                messages.append(make(rng, made))
                made += 1
        elif action < 0.8:  # a message in the middle is rendered anew (a new object)
            at = rng.randrange(len(messages))
            messages[at] = make(rng, made)
            made += 1
        else:  # the end is taken back
            del messages[rng.randrange(len(messages)) :]
        got = merge(list(messages), cache)
        cache.turn()
        assert got == merge(list(messages))


def test_a_merge_that_fails_half_way_leaves_the_last_list_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    import context_os.harness.anthropic as anthropic

    def turn(role: str, n: int) -> dict[str, Any]:
        return {"role": role, "content": [{"type": "text", "text": f"{role} {n}"}]}

    cache: MergeCache[Any] = MergeCache()
    # pairs of user messages: one turn out of two messages in
    messages = [turn(role, n) for n in range(20) for role in ("user", "user", "assistant")]
    merge_turns(messages, cache)
    cache.turn()
    # the same start, then one turn per message (runs start everywhere), then runs to merge
    broken = messages[:3] + [turn(("user", "assistant")[n % 2], 100 + n) for n in range(30)]
    broken += [turn("user", 200), turn("user", 201), turn("assistant", 202), turn("user", 203), turn("user", 204)]

    def fail(run: list[dict[str, Any]]) -> dict[str, Any]:
        raise RuntimeError("a merge that fails")

    monkeypatch.setattr(anthropic, "_merged", fail)
    with pytest.raises(RuntimeError):
        merge_turns(broken, cache)
    monkeypatch.undo()
    later = messages + [turn("user", 300)]
    assert merge_turns(later, cache) == merge_turns(later)
