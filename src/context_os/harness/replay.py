"""Replay a recorded conversation through context_os, assembling the context at every model call.

A model call happened wherever the recording has an assistant message: its input was every
message before it. For each, the naive transcript (what the harness sent) is compared with
what context_os assembles, using the same token estimate on both sides.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..context.frames import verify_frame
from ..context.session import Session
from .openai import OpenAIHook, pairing_problems

__all__ = ["ReplayResult", "TurnRow", "model_calls", "replay_openai"]


@dataclass
class TurnRow:
    turn: int
    messages: int
    tokens_full: int
    tokens_assembled: int
    active: int
    collapsed_now: int
    orphaned: int


@dataclass
class ReplayResult:
    session: str
    store: str
    turns: int = 0
    tokens_full: int = 0
    tokens_assembled: int = 0
    orphaned_tool_results: int = 0
    frames: int = 0
    frames_verified: int = 0
    seconds: float = 0.0
    rows: list[TurnRow] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("rows")
        d["ratio"] = round(self.tokens_assembled / self.tokens_full, 4) if self.tokens_full else None
        return d


def model_calls(messages: Sequence[dict[str, Any]]) -> list[int]:
    """Indices of the assistant messages: each is a model call whose input preceded it."""
    return [k for k, m in enumerate(messages) if m.get("role") == "assistant" and k > 0]


def replay_openai(
    messages: Sequence[dict[str, Any]],
    session: Session,
    *,
    verify: bool = True,
    on_turn: Callable[[TurnRow], None] | None = None,
) -> ReplayResult:
    """Run the hook at every model call of ``messages``; optionally re-verify every frame."""
    hook = OpenAIHook(session)
    result = ReplayResult(session=session.id, store=session.store.url)
    started = time.perf_counter()
    for k in model_calls(messages):
        out = hook.transform_context(messages[:k])
        assembly = hook.last
        assert assembly is not None
        orphans = len(pairing_problems(out))
        row = TurnRow(
            turn=assembly.turn,
            messages=len(out),
            tokens_full=assembly.tokens_full,
            tokens_assembled=assembly.tokens,
            active=len(session.view.live()),
            collapsed_now=len(assembly.changes),
            orphaned=orphans,
        )
        result.rows.append(row)
        result.turns += 1
        result.tokens_full += row.tokens_full
        result.tokens_assembled += row.tokens_assembled
        result.orphaned_tool_results += orphans
        if on_turn:
            on_turn(row)
    frames = session.frames()
    result.frames = len(frames)
    if verify:
        result.frames_verified = sum(verify_frame(session.store, f).ok for f in frames)
    result.seconds = round(time.perf_counter() - started, 3)
    return result
