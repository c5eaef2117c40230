"""Cline's task history (``tasks/<taskId>/api_conversation_history.json``: a JSON list of
Anthropic Messages API messages), as the messages Cline sends the model, with each tool's result
answering its call.

* **What Cline sends.** Every request sends the stored messages as they are
  (``src/core/api/transform/anthropic-format.ts`` ``sanitizeAnthropicMessages``,
  ``src/shared/messages/content.ts`` ``convertClineStorageToAnthropicMessage``): ``role`` and
  ``content`` only (the ``ts``, ``modelInfo`` and ``metrics`` Cline keeps beside them are not
  sent), each block without Cline's own fields (``call_id``, ``reasoning_details``, ``summary``,
  a ``signature`` on a block that is not thinking), a thinking block without a signature dropped.
* **Results as text.** With native tool calling the assistant's calls are ``tool_use`` blocks.
  Cline answers one with a ``tool_result`` block only when it learned the call's id from the
  stream under its ``call_id`` (``src/core/task/tools/utils/ToolResultUtils.ts``
  ``pushToolResult``: else the id is ``"cline"`` and the result is a plain ``text`` block);
  streams that carry no ``call_id`` (OpenAI-compatible providers, and Anthropic's own as Cline
  reads it) leave every result a text block in the next user message. Either way the result's
  text starts with the tool's description (each handler's ``getDescription``):
  ``[read_file for 'src/a.ts'] Result:``, ``[execute_command for 'npm test'] Result:``,
  ``[search_files for 'regex' in '*.ts'] Result:``, ``[attempt_completion] Result:``,
  ``[subagents] Result:``. A call not run says so in a text naming it: ``Skipping tool due to
  user rejecting a previous tool. [write_to_file for 'a.ts']``, ``Tool [name] was not executed
  because a tool has already been used in this message...``; a result that carries images or
  files is its blocks without the description (``<answer>`` of ``ask_followup_question``,
  ``<user_message>`` of ``plan_mode_respond``).
* **As the Anthropic adapter reads it.** Each such text answers the first call of the message
  before it still open whose name it names (else, for a description that names another, such as
  ``[subagents]`` for ``use_subagents``, the first call still open), and becomes a
  ``tool_result`` block of that call, its text as Cline sent it; results come first in the user
  message, in the order of the calls, then its other blocks. A call never answered (the task was
  interrupted, and resumed with a ``[TASK RESUMPTION]`` message) is dropped from its message.

Cline's own context management (its duplicate-read notices and the halves of the history it
truncates, kept in ``context_history.json``) is not replayed: the replay is uncompacted.

The session id is the task's (the file's directory, ``tasks/<taskId>/``); its directory is the
last one the session's ``environment_details`` name (``# Current Working Directory (DIR) Files``,
or the one a resumed task names: ``The current working directory is now 'DIR'``). The tools map
to roles by the ``cline`` preset (harness/toolnames.py).

This module reads files; it never touches a store or a session.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ...errors import InputError
from .common import Parsed, Transcript, json_type, shape

__all__ = ["is_cline", "read_cline", "result_name"]

_HEAD = re.compile(r"\A\[(?P<name>[A-Za-z_][\w-]*)(?:(?: for |: ).*?)?\] Result:", re.DOTALL)
"""A tool's result as Cline words it: its description, then `` Result:``."""
_NOT_RUN = re.compile(
    r"\A(?:Skipping tool due to user rejecting a previous tool\."
    r"|Tool was interrupted and not executed due to user rejecting a previous tool\.) \[(?P<name>[A-Za-z_][\w-]*)"
    r"|\ATool \[(?P<also>[A-Za-z_][\w-]*)\] was not executed because"
)
"""A call Cline did not run, named (``ToolExecutor.ts``, ``formatResponse.toolAlreadyUsed``)."""
_REPLIES = {"<answer>\n": ("ask_followup_question",), "<user_message>\n": ("plan_mode_respond", "act_mode_respond")}
"""The results that carry images or files, without a description: the user's reply to a question."""
_CLINE_FIELDS = ("call_id", "reasoning_details", "summary")
_CWD = re.compile(
    r"# Current Working Directory \((?P<dir>(?:(?!# Current Working Directory \()[^\n])+?)\) Files\n"
    r"|working directory is now '(?P<now>[^'\n]+)'"
)
"""Where Cline names its working directory (its environment details, a resumed task's note). A
directory's name never holds the heading: without that, every heading of a line repeating it (a
file read that holds them) was looked at up to the line's end, minutes over a few hundred kB."""


def result_name(text: str) -> str | None:
    """The tool a text block of a user message answers, as Cline words a result; None if it is
    not a result."""
    m = _HEAD.match(text) or _NOT_RUN.match(text)
    if m is not None:
        return m.group("name") or m.group("also")
    return None


def _blocks(m: Any) -> list[Any]:
    content = m.get("content") if isinstance(m, Mapping) else None
    return content if isinstance(content, list) else []


def _calls(m: Any) -> list[Mapping[str, Any]]:
    return [b for b in _blocks(m) if isinstance(b, Mapping) and b.get("type") == "tool_use"]


def _result_text(b: Any) -> str | None:
    """A block's text if it may be a result: a text block, or a ``tool_result`` of one text."""
    if not isinstance(b, Mapping):
        return None
    if b.get("type") == "text" and isinstance(b.get("text"), str):
        return str(b["text"])
    content = b.get("content") if b.get("type") == "tool_result" else None
    if isinstance(content, list) and content and isinstance(content[0], Mapping):
        content = content[0].get("text")
    return content if isinstance(content, str) else None


def is_cline(messages: list[Any]) -> bool:
    """Whether a JSON list of Anthropic messages is Cline's: a user message after a message of
    ``tool_use`` blocks answers one of them in Cline's words (``[read_file for 'a.ts'] Result:``)."""
    for before, m in zip(messages, messages[1:], strict=False):
        names = {c["name"] for c in _calls(before) if isinstance(c.get("name"), str)}
        texts = [t for t in map(_result_text, _blocks(m)) if t is not None] if names else []
        if isinstance(m, Mapping) and m.get("role") == "user" and any(result_name(t) in names for t in texts):
            return True
    return False


def _clean(b: Any) -> Any:
    """A content block as Cline sends it: without its own fields."""
    if not isinstance(b, Mapping) or not any(k in b for k in (*_CLINE_FIELDS, "signature")):
        return b
    out = {k: v for k, v in b.items() if k not in _CLINE_FIELDS}
    if b.get("type") != "thinking":
        out.pop("signature", None)
    return out


def _sent(m: Mapping[str, Any]) -> dict[str, Any]:
    content = m.get("content")
    if isinstance(content, list):
        content = [
            _clean(b)
            for b in content
            if not (isinstance(b, Mapping) and b.get("type") == "thinking" and not b.get("signature"))
        ]
    return {"role": m.get("role"), "content": content}


def _answer(reply: dict[str, Any], m: dict[str, Any]) -> None:
    """Turn the texts of ``m`` that answer ``reply``'s calls into their ``tool_result`` blocks,
    first in ``m``, in the order of the calls; drop the calls left unanswered from ``reply``."""
    calls = _calls(reply)
    answered: dict[int, Any] = {}  # call index -> its result block
    rest: list[Any] = []
    for b in _blocks(m):
        if isinstance(b, Mapping) and b.get("type") == "tool_result":
            at = next((k for k, c in enumerate(calls) if c.get("id") == b.get("tool_use_id")), None)
            if at is not None and at not in answered:
                answered[at] = b
                continue
            rest.append(b)
            continue
        text = b.get("text") if isinstance(b, Mapping) and b.get("type") == "text" else None
        at = _answers(calls, answered, text) if isinstance(text, str) else None
        if at is None:
            rest.append(b)
            continue
        answered[at] = {"type": "tool_result", "tool_use_id": calls[at].get("id"), "content": text}
    m["content"] = [answered[k] for k in sorted(answered)] + rest
    kept = {id(c) for k, c in enumerate(calls) if k in answered}
    reply["content"] = [
        b for b in _blocks(reply) if not (isinstance(b, Mapping) and b.get("type") == "tool_use") or id(b) in kept
    ]


def _answers(calls: list[Mapping[str, Any]], answered: Mapping[int, Any], text: str) -> int | None:
    """The index of the open call a text answers, if it is a result."""
    open_calls = [k for k in range(len(calls)) if k not in answered]
    if not open_calls:
        return None
    name = result_name(text)
    if name is None:
        names = next((n for head, n in _REPLIES.items() if text.startswith(head)), ())
        return next((k for k in open_calls if calls[k].get("name") in names), None)
    return next((k for k in open_calls if calls[k].get("name") == name), open_calls[0])


def _messages(raw: list[Any], where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k, m in enumerate(raw):
        if not isinstance(m, Mapping) or m.get("role") not in ("user", "assistant"):
            what = repr(m.get("role")) if isinstance(m, Mapping) else json_type(m)
            raise InputError(f"{where}: message {k}: expected a user or assistant message, got {what}")
        for c in _calls(m):  # a call is answered by its name and its id
            for key in ("name", "id"):
                if not isinstance(c.get(key, ""), str):
                    found = json_type(c[key])
                    raise InputError(f"{where}: message {k}: a tool_use block's {key} must be a string, not {found}")
        sent = _sent(m)
        if sent["role"] == "user" and out and out[-1]["role"] == "assistant" and _calls(out[-1]):
            if not isinstance(sent["content"], list):
                sent["content"] = [{"type": "text", "text": str(sent["content"] or "")}]
            _answer(out[-1], sent)
        out.append(sent)
    return out


def _cwd(messages: list[dict[str, Any]]) -> str | None:
    """The last working directory the session's user messages name."""
    found = None
    for m in messages:
        if m["role"] != "user":
            continue
        for b in _blocks(m):
            text = b.get("text") if isinstance(b, Mapping) else None
            for hit in _CWD.finditer(text) if isinstance(text, str) else ():
                found = hit.group("dir") or hit.group("now")
    return found


def read_cline(parsed: Parsed, **_: Any) -> list[Transcript]:
    """The session of a Cline task history (one)."""
    data = parsed.document if parsed.is_document else None
    if not isinstance(data, list):
        what = shape(data) if parsed.is_document else f"JSON lines ({len(parsed.rows)} objects)"
        raise InputError(f"{parsed.path}: {what}: expected Cline's api_conversation_history.json (a JSON list)")
    messages = _messages(data, str(parsed.path))
    named = parsed.path.name == "api_conversation_history.json" and parsed.path.parent.name
    session_id = parsed.path.parent.name if named else parsed.path.stem
    transcript = Transcript("cline", "anthropic", "cline", messages, session_id, _cwd(messages), [], len(data))
    return parsed.stamp([transcript])
