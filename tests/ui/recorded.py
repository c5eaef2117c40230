"""Sessions recorded for the web view's tests, its screenshots and its benchmark: the bundled
coding session replayed, and a long synthetic one (50,000 messages) for paging."""

from __future__ import annotations

import dataclasses
from typing import Any

from context_os import RetentionPolicy, Session
from context_os.harness import OpenAIHook
from context_os.replay import demo_transcript
from context_os.replay.run import replay_transcript
from context_os.store import Store


def record_demo(store: Store, session_id: str, messages: int | None = None) -> str:
    """Replay the bundled session (its first ``messages`` only, if given) into ``store``."""
    t = demo_transcript()
    if messages is not None:
        t = dataclasses.replace(t, messages=t.messages[:messages])
    with Session.open(store, session_id, harness=t.harness, workspace=t.cwd) as session:
        replay_transcript(t, session, verify="none")
    return session_id


def record_long(store: Store, session_id: str, messages: int = 50_000, per_turn: int = 250) -> str:
    """A session of ``messages`` messages: a user message and ``per_turn`` tool calls and results
    per turn (each turn collapses the last one's results). No history horizon: the last frame
    shows every message."""
    with Session.open(store, session_id, policy=RetentionPolicy(history_max_tokens=None)) as session:
        hook = OpenAIHook(session)
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a test agent."}]
        k = 0
        while len(msgs) < messages:
            msgs.append({"role": "user", "content": f"step {k}: look at item {k}"})
            for j in range(per_turn // 2 - 1):
                cid = f"call_{k}_{j}"
                call = {"id": cid, "type": "function", "function": {"name": "bash", "arguments": '{"command":"ls"}'}}
                msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
                msgs.append({"role": "tool", "tool_call_id": cid, "content": f"output {k}.{j} " + "lorem ipsum " * 40})
            hook.transform_context(msgs)
            msgs.append({"role": "assistant", "content": f"done with {k}"})
            k += 1
    return session_id
