"""Codex CLI session files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``), as the OpenAI
messages of what Codex sent its model: the ``response_item`` lines, which Codex keeps as its
history and sends as the input of every call (``codex-rs/core``, the rollout recorder and the
context manager).

* Each line is ``{"timestamp", "type", "payload"}``: ``session_meta`` (the session's ``id``,
  ``cwd`` and, in newer versions, ``base_instructions``: Codex's system prompt, a system message
  here; the first one, as Codex reads it: a forked thread's file holds its parent's after its
  own, with the parent's history), ``response_item`` (history), ``event_msg`` and
  ``turn_context`` (what the UI showed and each turn's settings: not sent, not read). Files of
  the first versions (mid 2025) hold the response items themselves, one per line, after a
  ``{"id", "timestamp", "instructions"}`` line.
* A ``message`` is a user, assistant or developer message (its ``input_text``/``output_text``
  parts joined; a user's with images, a pasted screenshot, keeps its parts: the
  images are counted as the model was sent them); ``function_call`` (``shell``, ``shell_command``, ``exec_command``,
  ``update_plan``, …), ``custom_tool_call`` (``apply_patch``, whose input is the patch: sent
  here as ``{"input": patch}``) and ``local_shell_call`` are tool calls; the assistant's message
  and the calls of one response make one assistant message. ``function_call_output`` and
  ``custom_tool_call_output`` answer a call by ``call_id``. A call never answered gets the output
  ``aborted``, as Codex gives it before its next request. The grouping into messages is the
  proxy's (harness/responses.py ``to_chat``), on the items with their texts joined.
* ``reasoning`` items are left out: Codex sends them back encrypted, and their size is not in the
  file; ``ghost_snapshot`` (an undo point), ``web_search_call`` and other items are not messages.
* A ``thread_rolled_back`` event (the user undid turns) drops the last ``num_turns`` user turns
  from the history, as Codex does: from the user message that began the first of them, with the
  context Codex sent just before it (developer messages, its ``<environment_context>``), on, but
  never the session's opening context, before its first turn. Like a Pi session's abandoned
  branch, the calls made in them are not replayed.
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

from ...errors import InputError, MalformedMessage
from ...harness.responses import for_replay, to_chat
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


def _content(content: Any) -> Any:
    """A message's or a tool output's content as replayed: its text, or, when it holds images,
    its text and image parts in order (joined, the images were left out of what the full side
    counts)."""
    if not isinstance(content, list) or not any(_image(p) for p in content):
        return _text(content)
    return [
        {"type": "input_text", "text": p["text"]} if not _image(p) else {**p}
        for p in content
        if _image(p) or (isinstance(p, Mapping) and isinstance(p.get("text"), str))
    ]


def _image(part: Any) -> bool:
    return (
        isinstance(part, Mapping)
        and part.get("type") == "input_image"
        and isinstance(part.get("image_url") or part.get("file_id"), str)
    )


def _sent(item: Mapping[str, Any]) -> dict[str, Any] | None:
    """An item as this reader replays it, in the shape ``to_chat`` reads (texts as strings, a
    local shell call as the function call it is); None for what is not sent as text."""
    kind = item.get("type", "message")
    if kind == "message":
        if item.get("role") not in ("user", "assistant", "developer", "system"):
            return None
        return {"type": "message", "role": item["role"], "content": _content(item.get("content"))}
    if kind == "local_shell_call":
        call_id = item.get("call_id", item.get("id"))
        arguments = json.dumps(item.get("action") or {})
        return {"type": "function_call", "call_id": call_id, "name": "local_shell", "arguments": arguments}
    if kind == "custom_tool_call":
        return {**item, "input": _text(item.get("input"))}
    if kind == "function_call":
        raw = item.get("arguments")
        return {**item, "arguments": raw if isinstance(raw, str) else json.dumps(raw if raw is not None else {})}
    if kind in _OUTPUTS:
        output = item.get("output")
        if isinstance(output, Mapping):
            return {**item, "output": _text(output.get("content")) or json.dumps(output)}
        return {**item, "output": _content(output)}  # an image (view_image) kept, and counted
    if kind in ("tool_search_call", "tool_search_output"):
        # Codex (0.140+) looks up tools it was not given at the start: a call of tool_search, its
        # output the tools found, which go upstream whole (the model calls them by those
        # definitions), as the proxy sends them (before 2026-12-05 the replay collapsed them)
        return dict(item)
    return None  # reasoning (encrypted), ghost snapshots, web searches


_CONTEXT = (
    "<environment_context>",
    "<user_instructions>",
    "<turn_aborted>",
    "<user_shell_command>",
    "<INSTRUCTIONS>",
    "# AGENTS.md instructions",
)
"""How the user messages Codex writes itself begin (its context, an interruption's note): no
user turns."""


def _is_context(item: Mapping[str, Any]) -> bool:
    """Whether an item is context Codex sent before a turn: a developer message, or a user
    message it wrote itself (``_CONTEXT``)."""
    if item.get("type") != "message":
        return False
    return item.get("role") == "developer" or (
        item.get("role") == "user" and str(item.get("content", "")).lstrip().startswith(_CONTEXT)
    )


def _rolled_back(items: list[tuple[int, dict[str, Any]]], turns: int) -> list[tuple[int, dict[str, Any]]]:
    """``items`` without their last ``turns`` user turns, as Codex's thread rollback drops them
    (``drop_last_n_user_turns``: from the user message that began the first of them, and the
    context it sent just before it, on; every turn when there are fewer). The session's opening
    context, before its first turn, stays: ``trim_pre_turn_context_updates`` never walks back
    past the first turn."""
    starts = [k for k, (_, i) in enumerate(items) if i.get("type") == "message" and i.get("role") == "user"]
    starts = [k for k in starts if not _is_context(items[k][1])]
    if turns <= 0 or not starts:
        return items
    cut = starts[max(len(starts) - turns, 0)]
    while cut > starts[0] and _is_context(items[cut - 1][1]):
        cut -= 1
    return items[:cut]


def _answered(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each call answered right after its message, as Codex sends them: a call never answered
    gets ``aborted`` (the last message's calls excepted: nothing came after it), an output for
    no open call is dropped."""
    out: list[dict[str, Any]] = []
    open_calls: list[str] = []

    def close() -> None:
        out.extend({"role": "tool", "tool_call_id": c, "content": ABORTED} for c in open_calls)
        open_calls.clear()

    for m in messages:
        if m["role"] == "tool":
            if m["tool_call_id"] in open_calls:
                open_calls.remove(m["tool_call_id"])
                out.append(m)
            continue
        close()
        open_calls.extend(c["id"] for c in m.get("tool_calls") or ())
        out.append(m)
    if out and out[-1]["role"] != "assistant":
        close()
    return out


def read_codex(parsed: Parsed, **_: Any) -> list[Transcript]:
    """The one session of a Codex rollout file."""
    where = str(parsed.path)
    rows = parsed.lines("Codex")
    items: list[tuple[int, dict[str, Any]]] = []  # (line, item as replayed)
    session_id: str | None = None
    cwd: str | None = None
    system: str | None = None
    metas = seen = 0
    for n, row in rows:
        kind = row.get("type")
        payload = row.get("payload")
        if kind in CODEX_LINE_TYPES:
            if not isinstance(payload, Mapping):
                raise InputError(f"{where}:{n}: a {kind} line needs a payload object, got {shape(payload)}")
            if kind == "session_meta":
                metas += 1
                if metas > 1:
                    continue  # a fork's file holds its parent's after its own: Codex takes the first
                session_id = payload["id"] if isinstance(payload.get("id"), str) else None
                cwd = payload["cwd"] if isinstance(payload.get("cwd"), str) else None
                base = payload.get("base_instructions")
                system = _text(base.get("text")) if isinstance(base, Mapping) else _text(base) or None
            elif kind == "turn_context" and cwd is None and isinstance(payload.get("cwd"), str):
                cwd = payload["cwd"]
            elif kind == "response_item":
                seen += 1
                items += [(n, sent)] if (sent := _sent(payload)) is not None else []
            elif kind == "event_msg" and payload.get("type") == "thread_rolled_back":
                turns = payload.get("num_turns")
                items = _rolled_back(items, turns if isinstance(turns, int) else 1)
        elif kind in CODEX_ITEM_TYPES:  # the first rollout files: the items themselves
            seen += 1
            items += [(n, sent)] if (sent := _sent(row)) is not None else []
        elif kind is None and n == rows[0][0] and isinstance(row.get("id"), str):
            session_id = row["id"]  # their first line: {"id", "timestamp", "instructions"}
            system = row["instructions"] if isinstance(row.get("instructions"), str) else None
    if not seen:
        raise InputError(f"{where}: {len(rows)} JSON lines but no response items: not a Codex session")
    try:
        chat = to_chat([item for _, item in items])
    except MalformedMessage as e:
        line = items[e.index][0] if e.index is not None else 0
        raise InputError(f"{where}:{line}: {e}") from None
    messages = _answered(for_replay(chat))
    if system:
        messages.insert(0, {"role": "system", "content": system})
    return parsed.stamp([Transcript("codex", "openai", "codex", messages, session_id, cwd, [], len(rows))])
