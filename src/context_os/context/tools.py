"""The tools context_os gives the agent, as neutral JSON schemas, and their dispatch.

Adapters wrap these schemas in their harness's tool format and route calls to ``call_tool``.
Results are JSON strings so any harness can hand them to the model as tool output.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..errors import ContextOSError, InputError
from .session import Session

__all__ = ["TOOLS", "call_tool", "tool_names"]

_ID = {
    "type": "object",
    "properties": {"id": {"type": "string", "description": "Object id, e.g. toolcall:… or file:…"}},
    "required": ["id"],
    "additionalProperties": False,
}

TOOLS: list[dict[str, Any]] = [
    {
        "name": "activate",
        "description": "Load an object's full content into your context (e.g. a collapsed tool result).",
        "parameters": _ID,
    },
    {
        "name": "deactivate",
        "description": "Collapse an object to its one-line metadata to free context. Chat cannot be deactivated.",
        "parameters": _ID,
    },
    {
        "name": "pin",
        "description": "Keep an object's content in context: pinned objects are never collapsed automatically.",
        "parameters": _ID,
    },
    {"name": "unpin", "description": "Undo pin: the object follows the retention policy again.", "parameters": _ID},
]


def tool_names() -> set[str]:
    return {t["name"] for t in TOOLS}


def call_tool(session: Session, name: str, arguments: str | dict[str, Any]) -> str:
    """Run one of our tools for the agent; the result (or the error) as a JSON string."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        if not isinstance(args, dict) or not isinstance(args.get("id"), str):
            raise InputError(f'{name} takes {{"id": "<object id>"}}, got {arguments!r}')
        ops: dict[str, Callable[[str], dict[str, Any]]] = {
            "activate": session.activate,
            "deactivate": session.deactivate,
            "pin": session.pin,
            "unpin": session.unpin,
        }
        if name not in ops:
            raise InputError(f"unknown context_os tool {name!r}; known: {sorted(ops)}")
        result = ops[name](args["id"])
    except json.JSONDecodeError as e:
        result = {"error": f"arguments are not valid JSON: {e}"}
    except ContextOSError as e:
        result = {"error": str(e), "type": type(e).__name__}
    return json.dumps(result, ensure_ascii=False, sort_keys=True)
