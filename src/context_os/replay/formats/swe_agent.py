"""SWE-agent trajectories (``.traj``: one JSON object), as OpenAI chat messages.

``history`` is the main agent's conversation as SWE-agent sent it (system prompt, demonstrations,
the task, then one assistant message per model call and the environment's answer):

* **1.x, function calling:** assistant messages carry ``tool_calls`` (``str_replace_editor``,
  ``bash``, ``submit``; or the windowed tools ``open``, ``edit``, ``insert``...), ``tool``
  messages answer them by ``tool_call_ids``; both are taken as they are (format ``swe-agent``).
* **0.x, actions parsed from text:** the assistant writes its action in its reply (``action``
  holds it) and the next ``user`` message is the environment's answer. The action becomes a tool
  call (format ``swe-agent-text``): the reply's text is its ``thought``, the call is the command
  (``open``, ``goto``, ``scroll_up``, ``scroll_down``, ``create``, ``edit A:B`` with its text up to
  ``end_of_edit``, ``search_file``, ``search_dir``, ``find_file``, ``submit``; in the cursors
  configurations ``set_cursors A B`` and ``edit`` without a range, which replaces the selection;
  any other command line is ``bash``), and the answer is its tool result.

Demonstrations SWE-agent put in the history (``put_demos_in_history``: a solved example's
messages, ``is_demo``) were sent with every call, but no model was called for their replies: the
history up to the last of them is ``Transcript.inherited``, the input of the calls after it.

Without a ``history``, the ``trajectory`` steps (``thought``/``response``, ``action``,
``observation``) make the same messages, without the prompts; a history with fewer replies than
the trajectory has steps (some 1.x runs leave the final ``submit`` out of it) gets the steps it
lacks, since the model was called for them. Content given as a list of blocks
is their text. The tools map to roles by the ``swe-agent`` preset (harness/toolnames.py).

This module reads files; it never touches a store or a session.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

from ...errors import InputError
from .common import Parsed, Transcript, json_type, openai_calls, pair_openai, shape, uploaded_dir

__all__ = ["read_swe_agent", "text_action"]

# the windowed commands of SWE-agent 0.x and their positional arguments
_COMMANDS: dict[str, tuple[str, ...]] = {
    "open": ("path", "line_number"),
    "goto": ("line_number",),
    "scroll_up": (),
    "scroll_down": (),
    "create": ("filename",),
    "search_dir": ("search_term", "dir"),
    "search_file": ("search_term", "file"),
    "find_file": ("file_name", "dir"),
    "submit": (),
    "set_cursors": ("start_line", "end_line"),  # the cursors configurations
}
_LINE_ARGS = ("line_number", "start_line", "end_line")
_EDIT = re.compile(r"edit(?: (\d+):(\d+))?\Z")  # without a range: the cursors' selection
_CURRENT_DIR = re.compile(r"^\(Current directory: (?P<dir>/[^\n]*)\)$", re.MULTILINE)


def text_action(action: str) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) of an action SWE-agent 0.x parsed from the model's text."""
    action = action.strip()
    first, _, rest = action.partition("\n")
    edit = _EDIT.match(first.strip())
    if edit is not None and (edit.group(1) is not None or rest.strip()):
        lines = rest.split("\n")
        if lines and lines[-1].strip() == "end_of_edit":
            lines.pop()
        span = {"start_line": int(edit.group(1)), "end_line": int(edit.group(2))} if edit.group(1) else {}
        return "edit", {**span, "replacement_text": "\n".join(lines)}
    try:
        words = shlex.split(first)
    except ValueError:
        words = first.split()
    if words and words[0] in _COMMANDS and not rest.strip():
        names = _COMMANDS[words[0]]
        args = {n: int(v) if n in _LINE_ARGS and v.isdigit() else v for n, v in zip(names, words[1:], strict=False)}
        return words[0], args
    return "bash", {"command": action}


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping) and b.get("type") == "text")
    raise InputError(f"{where}: content must be a string or a list of blocks, not {json_type(content)}")


def _text_call(call_id: str, action: str) -> dict[str, Any]:
    name, args = text_action(action)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _from_history(history: list[Any], where: str) -> tuple[list[dict[str, Any]], bool, int]:
    """(OpenAI messages, whether the model called tools itself, how many of the messages are the
    system prompt and the demonstrations: those up to the last ``is_demo`` one) of a ``history``."""
    calling = any(isinstance(m, Mapping) and m.get("tool_calls") for m in history)
    demos = max((k for k, m in enumerate(history) if isinstance(m, Mapping) and m.get("is_demo")), default=-1)
    inherited = 0
    out: list[dict[str, Any]] = []
    waiting: str | None = None  # 0.x: the call the next user message answers
    for k, m in enumerate(history):
        at = f"{where}: history[{k}]"
        if k == demos + 1:  # the task: no result of the last demonstration's action (0.x)
            inherited, waiting = len(out), None
        if not isinstance(m, Mapping):
            raise InputError(f"{at}: expected a message object, got {json_type(m)}")
        role, text = m.get("role"), _text(m.get("content"), at)
        if role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": text}
            action = m.get("action")
            if m.get("tool_calls"):
                msg["tool_calls"] = openai_calls(m["tool_calls"], at)
            elif not calling and isinstance(action, str) and action.strip():
                thought = m.get("thought")
                msg["content"] = thought if isinstance(thought, str) else text
                msg["tool_calls"] = [_text_call(f"call_{k}", action)]
                waiting = msg["tool_calls"][0]["id"]
                out.append(msg)
                continue
            out.append(msg)
        elif role == "tool":
            ids = m.get("tool_call_ids")
            ids = ids if isinstance(ids, list) else [m.get("tool_call_id")]
            out += [{"role": "tool", "tool_call_id": i, "content": text} for i in ids if isinstance(i, str)]
        elif role == "user" and waiting is not None:
            out.append({"role": "tool", "tool_call_id": waiting, "content": text})
        elif role in ("system", "user"):
            out.append({"role": role, "content": text})
        else:
            raise InputError(f"{at}: unknown role {role!r} (expected system, user, assistant or tool)")
        waiting = None
    return out, calling, inherited if demos < len(history) - 1 else len(out)


def _from_trajectory(steps: list[Any], where: str, start: int = 0) -> list[dict[str, Any]]:
    """The messages of ``steps``, the trajectory's from step ``start`` on."""
    out: list[dict[str, Any]] = []
    for k, s in enumerate(steps[start:], start):
        at = f"{where}: trajectory[{k}]"
        if not isinstance(s, Mapping):
            raise InputError(f"{at}: expected a step object, got {json_type(s)}")
        thought = s.get("thought") if isinstance(s.get("thought"), str) else _text(s.get("response"), at)
        action, observation = s.get("action"), _text(s.get("observation"), at)
        if isinstance(action, str) and action.strip():
            call = _text_call(f"call_{k}", action)
            out.append({"role": "assistant", "content": thought, "tool_calls": [call]})
            out.append({"role": "tool", "tool_call_id": call["id"], "content": observation})
        else:
            out.append({"role": "assistant", "content": thought})
            if observation:
                out.append({"role": "user", "content": observation})
    return out


def _cwd(messages: list[dict[str, Any]]) -> str | None:
    for m in messages:
        text = m.get("content")
        if m["role"] == "tool" and isinstance(text, str) and (found := _CURRENT_DIR.search(text)):
            return found.group("dir").rstrip("/") or None
    return next((d for m in messages if m["role"] == "user" and (d := uploaded_dir(str(m.get("content") or "")))), None)


def read_swe_agent(parsed: Parsed, **_: Any) -> list[Transcript]:
    """The main agent's session of a SWE-agent trajectory (one)."""
    doc = parsed.document if parsed.is_document else parsed.rows[0][1] if len(parsed.rows) == 1 else None
    where = str(parsed.path)
    if not isinstance(doc, dict):
        what = shape(doc) if parsed.is_document else f"JSON lines ({len(parsed.rows)} objects)"
        raise InputError(f"{where}: {what}: not a SWE-agent trajectory (one JSON object with a history)")
    history, steps = doc.get("history"), doc.get("trajectory")
    inherited = 0
    if isinstance(history, list) and history:
        messages, calling, inherited = _from_history(history, where)
        entries = len(history)
        replies = sum(
            1 for m in history if isinstance(m, Mapping) and m.get("role") == "assistant" and not m.get("is_demo")
        )
        if isinstance(steps, list) and len(steps) > replies:  # a last step history lacks: its call was made
            messages += _from_trajectory(steps, where, replies)
    elif isinstance(steps, list):
        messages, calling, entries = _from_trajectory(steps, where), False, len(steps)
    else:
        raise InputError(f"{where}: {shape(doc)}: not a SWE-agent trajectory (no history or trajectory list)")
    demos = {id(m) for m in messages[:inherited]}
    messages = pair_openai(messages)
    session_id = parsed.path.name.removesuffix(".traj").removesuffix(".json")
    fmt = "swe-agent" if calling else "swe-agent-text"
    inherited = sum(1 for m in messages if id(m) in demos)  # (pair_openai drops messages, never adds)
    # the demonstrations' directory is their task's
    out = Transcript(fmt, "openai", "swe-agent", messages, session_id, _cwd(messages[inherited:]), [], entries)
    out.inherited = inherited
    if demos:
        out.info.append(
            f"its first {out.inherited} messages are the system prompt and the demonstrations SWE-agent put in its "
            "history (put_demos_in_history): the input of its calls, whose own replies are no model calls of it"
        )
    return parsed.stamp([out])
