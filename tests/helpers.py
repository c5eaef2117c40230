"""Builders for OpenAI-format conversations used across tests."""

from __future__ import annotations

import json
from typing import Any


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def call(call_id: str, name: str = "bash", **args: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}],
    }


def result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def coding_session(steps: int, output_chars: int = 4000) -> list[dict[str, Any]]:
    """system, user, then ``steps`` x (tool call, long result); no final answer."""
    msgs = [{"role": "system", "content": "You are a coding agent."}, user("fix the bug")]
    for n in range(steps):
        msgs.append(call(f"c{n}", "bash", command=f"cat file{n}.py"))
        msgs.append(result(f"c{n}", f"line {n}\n" + ("x" * output_chars)))
    return msgs


def blocks_text(out: list[dict[str, Any]]) -> str:
    """The context_os blocks (one per active object, then the object index) of an OpenAI-format
    context, joined: where each block stands depends on when it last changed."""
    return "\n".join(
        m["content"] for m in out if m["role"] == "user" and str(m.get("content", "")).startswith("<context_os>")
    )
