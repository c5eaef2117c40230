"""mini-swe-agent trajectories (``*.traj.json``: one JSON object, ``trajectory_format``
``mini-swe-agent-1...``), as OpenAI chat messages.

``messages`` is the conversation as mini-swe-agent sent it: the system prompt, the task, then one
assistant message per model call and the environment's answer. Its last message, role ``exit``
(the submission), is mini-swe-agent's own record and was never sent. Fields the API does not take
(``extra``: the raw output, timestamps, the model's whole response) are left out.

* **2.x, tool calling:** assistant messages carry ``tool_calls`` of its one tool, ``bash``
  (``{"command": ...}``); ``tool`` messages answer them.
* **actions in text** (1.x, and 2.x's text mode): the assistant writes its command in one
  ```` ```bash ```` block (```` ```mswea_bash_command ```` in newer releases) and
  the next ``user`` message is the environment's answer, whatever it says
  (``<returncode>…</returncode>``, ``<output>…</output>``; a command that timed out: 1.x's
  ``The last command <command>…</command> timed out and has been killed…``, 2.x's
  ``<exception>…``). As SWE-agent 0.x's actions (swe_agent.py), the block becomes a ``bash``
  tool call (the rest of the reply its text) and the answer its result; a reply with no block,
  or more than one, is a message whose answer (a format error) is the user's.

Its shell commands read and change files (``cat``, ``sed -i``, a heredoc, a script): the
``swe-agent`` preset gives ``bash`` its role, and none of them is followed as a file's version.

This module reads files; it never touches a store or a session.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ...errors import InputError
from .common import Parsed, Transcript, json_type, openai_calls, pair_openai, shape

__all__ = ["is_mini_swe_agent", "read_mini_swe_agent"]

_ACTION = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.DOTALL)
_ROLES = ("system", "user", "assistant", "tool")


def is_mini_swe_agent(doc: Any) -> bool:
    """Whether a JSON document is a mini-swe-agent trajectory."""
    return (
        isinstance(doc, Mapping)
        and isinstance(doc.get("messages"), list)
        and str(doc.get("trajectory_format", "")).startswith("mini-swe-agent")
    )


def _content(value: Any) -> str:
    if isinstance(value, list):  # content parts
        return "\n".join(str(p.get("text", "")) for p in value if isinstance(p, Mapping) and p.get("type") == "text")
    return "" if value is None else str(value)


def _actions(text: str) -> tuple[list[str], str]:
    """The bash blocks of an assistant's text (as mini-swe-agent finds them) and the text without
    them. A block ends at a closing fence, so none ends past the last one: the regex runs on the
    text up to it. (Run on all of it, each opening fence with no closing one after it was looked
    for to the text's end: a text of many openers took 7.6 s at 72 kB, quadratic.)"""
    end = text.rfind("\n```")
    if end < 0:
        return [], text
    head = text[: end + 4]
    return _ACTION.findall(head), _ACTION.sub("", head) + text[end + 4 :]


def _messages(raw: list[Any], where: str) -> list[dict[str, Any]]:
    calling = any(isinstance(m, Mapping) and m.get("tool_calls") for m in raw)
    out: list[dict[str, Any]] = []
    waiting: str | None = None  # 1.x: the call the next observation answers
    for k, m in enumerate(raw):
        at = f"{where}: messages[{k}]"
        if not isinstance(m, Mapping):
            raise InputError(f"{at}: expected a message object, got {json_type(m)}")
        role, text = m.get("role"), _content(m.get("content"))
        if role == "exit":
            continue  # the submission, as mini-swe-agent records it: never sent
        if role not in _ROLES:
            raise InputError(f"{at}: unknown role {role!r} (expected system, user, assistant, tool or exit)")
        if role == "user" and waiting is not None:  # its result, whatever it says (a timeout's note)
            out.append({"role": "tool", "tool_call_id": waiting, "content": text})
        elif role == "assistant" and calling:
            msg: dict[str, Any] = {"role": "assistant", "content": text or None}
            if m.get("tool_calls"):
                msg["tool_calls"] = openai_calls(m["tool_calls"], at)
            out.append(msg)
        elif role == "assistant" and len((found := _actions(text))[0]) == 1:
            waiting = f"call_{k}"
            actions, thought = found[0], found[1].strip()
            function = {"name": "bash", "arguments": json.dumps({"command": actions[0]})}
            call = {"id": waiting, "type": "function", "function": function}
            out.append({"role": "assistant", "content": thought or None, "tool_calls": [call]})
            continue
        elif role == "tool":
            out.append({"role": "tool", "tool_call_id": str(m.get("tool_call_id")), "content": text})
        else:
            out.append({"role": role, "content": text})
        waiting = None
    return out


def read_mini_swe_agent(parsed: Parsed, **_: Any) -> list[Transcript]:
    """The session of a mini-swe-agent trajectory (one)."""
    doc = parsed.document if parsed.is_document else parsed.rows[0][1] if len(parsed.rows) == 1 else None
    where = str(parsed.path)
    if not is_mini_swe_agent(doc):
        what = shape(doc) if parsed.is_document else f"JSON lines ({len(parsed.rows)} objects)"
        raise InputError(f"{where}: {what}: not a mini-swe-agent trajectory (one JSON object with messages)")
    assert isinstance(doc, Mapping)
    messages = pair_openai(_messages(doc["messages"], where))
    instance = doc.get("instance_id")
    session_id = instance if isinstance(instance, str) and instance else parsed.path.name.split(".")[0]
    return parsed.stamp(
        [Transcript("mini-swe-agent", "openai", "swe-agent", messages, session_id, None, [], len(doc["messages"]))]
    )
