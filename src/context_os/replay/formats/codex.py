"""Codex CLI session files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``), as the OpenAI
messages of what Codex sent its model: the ``response_item`` lines, which Codex keeps as its
history and sends as the input of every call (``codex-rs/core``, the rollout recorder and the
context manager).

* Each line is ``{"timestamp", "type", "payload"}``: ``session_meta`` (the session's ``id``,
  ``cwd`` and, in newer versions, ``base_instructions``: Codex's system prompt, a system message
  here), ``response_item`` (history), ``event_msg`` and ``turn_context`` (what the UI showed and
  each turn's settings: not sent, not read). Files of the first versions (mid 2025) hold the
  response items themselves, one per line, after a ``{"id", "timestamp", "instructions"}`` line.
* A ``message`` is a user, assistant or developer message (its ``input_text``/``output_text``
  parts joined); ``function_call`` (``shell``, ``shell_command``, ``exec_command``,
  ``update_plan``, …), ``custom_tool_call`` (``apply_patch``, whose input is the patch: sent
  here as ``{"input": patch}``) and ``local_shell_call`` are tool calls; the assistant's message
  and the calls of one response make one assistant message. ``function_call_output`` and
  ``custom_tool_call_output`` answer a call by ``call_id``. A call never answered gets the output
  ``aborted``, as Codex gives it before its next request.
* ``reasoning`` items are left out: Codex sends them back encrypted, and their size is not in the
  file; ``ghost_snapshot`` (an undo point), ``web_search_call`` and other items are not messages.
* A ``compacted`` line (Codex's ``/compact``) is not modelled: the messages are the whole
  uncompacted history, as for every format, and what Codex itself sent after it is not measured.

A line that is not JSON is skipped and counted, as for every JSON-lines format. The tools map to
roles by the ``codex`` preset (harness/toolnames.py): a shell command that only prints a file is
a read, ``apply_patch`` a write or an edit (harness/codex_tools.py).

This module reads files; it never touches a store or a session.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...errors import InputError
from .common import Parsed, Transcript, shape

__all__ = ["CODEX_LINE_TYPES", "CODEX_ITEM_TYPES", "read_codex"]

CODEX_LINE_TYPES = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
"""The ``type`` of a line of a Codex rollout file (each with a ``payload``)."""
CODEX_ITEM_TYPES = (
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "web_search_call",
    "ghost_snapshot",
)
"""Response item types; lines of the first rollout files are these items themselves."""

_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")
ABORTED = "aborted"
"""The output Codex gives a call that was never answered (an interrupted turn)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    return ""


def _call(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    """An OpenAI tool call of a call item."""
    call_id = item.get("call_id", item.get("id"))
    if not isinstance(call_id, str) or not call_id:
        raise InputError(f"{where}: a {item.get('type')} needs a call_id")
    kind = item["type"]
    name: Any
    if kind == "local_shell_call":
        name, arguments = "local_shell", json.dumps(item.get("action") or {})
    elif kind == "custom_tool_call":
        name, arguments = item.get("name"), json.dumps({"input": _text(item.get("input"))})
    else:
        name, raw = item.get("name"), item.get("arguments")
        arguments = raw if isinstance(raw, str) else json.dumps(raw if raw is not None else {})
    if not isinstance(name, str) or not name:
        raise InputError(f"{where}: a {kind} needs a name")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class _History:
    """Response items in, OpenAI messages out (module docstring)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.open: list[str] = []  # calls of the latest assistant message not answered yet
        self.answered: set[str] = set()

    def _reply(self) -> dict[str, Any]:
        """The assistant message the next assistant item belongs to (a new one after anything else)."""
        last = self.messages[-1] if self.messages else None
        if last is None or last["role"] != "assistant":
            self._close()
            last = {"role": "assistant", "content": None}
            self.messages.append(last)
        return last

    def _close(self) -> None:
        """Answer the calls left open with Codex's ``aborted``."""
        for call_id in self.open:
            if call_id not in self.answered:
                self.messages.append({"role": "tool", "tool_call_id": call_id, "content": ABORTED})
        self.open = []

    def add(self, item: Mapping[str, Any], where: str) -> None:
        kind = item.get("type")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "developer", "system"):
                return
            text = _text(item.get("content"))
            if role == "assistant":
                reply = self._reply()
                reply["content"] = f"{reply['content']}\n\n{text}" if reply["content"] else text
                return
            self._close()
            self.messages.append({"role": role, "content": text})
        elif kind in _CALLS:
            call = _call(item, where)
            self._reply().setdefault("tool_calls", []).append(call)
            self.open.append(call["id"])
        elif kind in _OUTPUTS:
            call_id = item.get("call_id")
            if call_id not in self.open or call_id in self.answered:
                return  # an output for no open call: Codex drops it from its input
            output = item.get("output")
            self.answered.add(call_id)
            text = output if isinstance(output, str) else _text(output) if isinstance(output, list) else ""
            if isinstance(output, Mapping):
                text = _text(output.get("content")) or json.dumps(output)
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def done(self) -> list[dict[str, Any]]:
        if self.messages and self.messages[-1]["role"] == "assistant":
            return self.messages  # the last response: its calls had no answer yet
        self._close()
        return self.messages


def read_codex(parsed: Parsed, **_: Any) -> list[Transcript]:
    """The one session of a Codex rollout file."""
    where = str(parsed.path)
    rows = parsed.lines("Codex")
    history = _History()
    session_id: str | None = None
    cwd: str | None = None
    system: str | None = None
    items = 0
    for n, row in rows:
        kind = row.get("type")
        payload = row.get("payload")
        if kind in CODEX_LINE_TYPES:
            if not isinstance(payload, Mapping):
                raise InputError(f"{where}:{n}: a {kind} line needs a payload object, got {shape(payload)}")
            if kind == "session_meta":
                session_id = payload["id"] if isinstance(payload.get("id"), str) else session_id
                cwd = payload["cwd"] if isinstance(payload.get("cwd"), str) else cwd
                base = payload.get("base_instructions")
                system = _text(base.get("text")) if isinstance(base, Mapping) else _text(base) or None
            elif kind == "turn_context" and cwd is None and isinstance(payload.get("cwd"), str):
                cwd = payload["cwd"]
            elif kind == "response_item":
                items += 1
                history.add(payload, f"{where}:{n}")
        elif kind in CODEX_ITEM_TYPES:  # the first rollout files: the items themselves
            items += 1
            history.add(row, f"{where}:{n}")
        elif kind is None and n == rows[0][0] and isinstance(row.get("id"), str):
            session_id = row["id"]  # their first line: {"id", "timestamp", "instructions"}
            system = row["instructions"] if isinstance(row.get("instructions"), str) else None
    if not items:
        raise InputError(f"{where}: {len(rows)} JSON lines but no response items: not a Codex session")
    messages = history.done()
    if system:
        messages.insert(0, {"role": "system", "content": system})
    return parsed.stamp([Transcript("codex", "openai", "codex", messages, session_id, cwd, [], len(rows))])
