"""Pi (the pi-mono coding agent) messages: the adapter, and what Pi's file tools say about files.

Input is the list of ``AgentMessage`` objects (as JSON dicts) Pi hands an extension's ``context``
event, or that a Pi session file stores: roles ``user``, ``assistant``, ``toolResult``, the coding
agent's ``bashExecution``, ``custom``, ``branchSummary``, ``compactionSummary``, and the ``system``
messages of ``@earendil-works/pi-coding-agent`` 1.5.x. Output is what Pi's ``convertToLlm``
expects: the same roles, so an extension can return it from the ``context`` event.

* ``user``, ``assistant`` and ``system`` come back as they were (content blocks in order, thinking
  blocks with their signatures, usage, stop reason, timestamps) unless context_os changed them
  (elided call arguments); a ``toolResult`` comes back with its call id, tool name, error flag
  and text (or the stub of a collapsed result).
* ``bashExecution``, ``custom``, ``branchSummary`` and ``compactionSummary`` are taken in the form
  ``convertToLlm`` gives the model (a user message) and come back in that form;
  ``bashExecution`` with ``excludeFromContext`` is left out, as Pi leaves it out.
* Text blocks become the neutral text (several are joined with a newline and split back by
  their lengths); thinking is counted (``extra_chars``, as Pi's own token estimate counts it)
  and left off an assistant message past the session's thinking horizon (``drop_thinking``:
  the policy's ``keep_thinking_turns``); with an OpenAI Responses reasoning item, the message's
  other item ids go with it (``_without_item_ids``), its results named after its calls again.

A tool result's images (``extra["full"]``) are stored in its tool-call object and come back
while the result is shown in full; a result's ``details`` is Pi's UI data, never sent to the
model, and not kept.

What Pi's ``read``/``write``/``edit`` calls say about a file is read by harness/file_ops.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..context.entries import Incoming, Msg, ToolCall
from ..context.ingest import SyncReport
from ..context.session import Session
from ..errors import ContextOSError, MalformedMessage, StoreUnavailable
from ..tokens import CHARS_PER_TOKEN, image_tokens
from .base import Adapter, ContextHook, sorted_keys
from .pairing import CLOSES, SAYS, Pairing, Reading
from .toolnames import PI, tool_role

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..files.file_tools import FileTools

__all__ = [
    "COMPACTION_SUMMARY_PREFIX",
    "PI_PAIRING",
    "PiAdapter",
    "PiHook",
    "bash_execution_text",
    "convert_to_llm",
]

COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
)
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
BRANCH_SUMMARY_PREFIX = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
BRANCH_SUMMARY_SUFFIX = "</summary>"

_LLM_ROLES = {"user": "user", "assistant": "assistant", "toolResult": "tool", "system": "system"}
_CONVERTED = ("bashExecution", "custom", "branchSummary", "compactionSummary")
AGENT_MESSAGE_ROLES = frozenset([*_LLM_ROLES, *_CONVERTED])
"""The roles of the Pi messages the hook translates (Pi's ``convertToLlm`` drops any other)."""
_NEUTRAL_TO_PI = {"user": "user", "assistant": "assistant", "tool": "toolResult", "system": "system"}


def bash_execution_text(msg: Mapping[str, Any]) -> str:
    """The user-message text Pi's ``bashExecutionToText`` makes of a ``bashExecution``."""
    text = f"Ran `{msg.get('command', '')}`\n"
    output = msg.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    exit_code = msg.get("exitCode")
    if msg.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif exit_code is not None and exit_code != 0:
        text += f"\n\nCommand exited with code {exit_code}"
    if msg.get("truncated") and msg.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {msg['fullOutputPath']}]"
    return text


def convert_to_llm(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """One AgentMessage as Pi's ``convertToLlm`` passes it to the model (None: left out)."""
    role = message.get("role")
    ts = message.get("timestamp", 0)
    if role == "bashExecution":
        if message.get("excludeFromContext"):
            return None
        return {"role": "user", "content": [{"type": "text", "text": bash_execution_text(message)}], "timestamp": ts}
    if role == "custom":
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        return {"role": "user", "content": blocks, "timestamp": ts}
    if role == "branchSummary":
        text = BRANCH_SUMMARY_PREFIX + str(message.get("summary", "")) + BRANCH_SUMMARY_SUFFIX
        return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}
    if role == "compactionSummary":
        text = COMPACTION_SUMMARY_PREFIX + str(message.get("summary", "")) + COMPACTION_SUMMARY_SUFFIX
        return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}
    return dict(message)


def _text_blocks(content: Any, index: int, *, allowed: tuple[str, ...]) -> tuple[str, list[dict[str, Any]]]:
    """(joined text, skeleton) of a content block list: text blocks keep everything but their
    text (and record its length), other allowed blocks are kept whole."""
    if not isinstance(content, list):
        raise MalformedMessage(
            f"content must be a list of blocks, not {type(content).__name__}", index=index, field="content"
        )
    texts: list[str] = []
    skeleton: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        if not isinstance(block, Mapping) or block.get("type") not in allowed:
            kind = block.get("type") if isinstance(block, Mapping) else type(block).__name__
            raise MalformedMessage(
                f"unsupported content block {kind!r} (expected one of {list(allowed)})",
                index=index,
                field=f"content[{j}]",
            )
        if block["type"] == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise MalformedMessage("a text block needs a text string", index=index, field=f"content[{j}].text")
            texts.append(text)
            skeleton.append({**{k: v for k, v in block.items() if k != "text"}, "_len": len(text)})
        else:
            skeleton.append(dict(block))
    return "\n".join(texts), skeleton


def _media_chars(blocks: list[dict[str, Any]]) -> int:
    """What the image blocks among ``blocks`` put in front of the model, in characters
    (``tokens.image_tokens``): an image by the size its base64 ``data`` gives, else at the most."""
    n = 0
    for b in blocks:
        if b.get("type") == "image":
            data = b.get("data")
            n += image_tokens(data if isinstance(data, str) else None) * CHARS_PER_TOKEN
    return n


def _fill(skeleton: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The blocks of ``skeleton`` with their texts cut back out of ``text`` (all of it in the first
    text block if the lengths no longer add up, e.g. after redaction)."""
    lens = [b["_len"] for b in skeleton if b.get("type") == "text" and isinstance(b.get("_len"), int)]
    fits = sum(lens) + max(0, len(lens) - 1) == len(text)
    out: list[dict[str, Any]] = []
    pos, first = 0, True
    for b in skeleton:
        if b.get("type") != "text":
            out.append(b)
            continue
        block = {k: v for k, v in b.items() if k != "_len"}
        if fits:
            n = int(b.get("_len", 0))
            block["text"] = text[pos : pos + n]
            pos += n + 1
        else:
            block["text"] = text if first else ""
        first = False
        out.append(block)
    return out


def _call_part(call_id: Any) -> Any:
    """A tool call id without the OpenAI Responses item id pi-ai joins to it (``call_…|fc_…``):
    the part a result answers, as pi-ai sends it (``toolCallId.split("|")``)."""
    return call_id.split("|", 1)[0] if isinstance(call_id, str) else call_id


def _pairing(m: Mapping[str, Any]) -> Reading:
    """A ``toolResult`` answers one call; any other message closes the calls still open (each
    call is answered by the tool results right after its assistant message). Ids are read
    without their item ids (``_call_part``): a result is renamed after its call in ``finalize``,
    once the call lost its item id with its reasoning (``PiAdapter.render_msg``)."""
    role = m.get("role")
    if role == "toolResult":
        return Reading(True, (_call_part(m.get("toolCallId")),))
    if role != "assistant":
        return CLOSES
    calls = [
        _call_part(b.get("id"))
        for b in m.get("content") or ()
        if isinstance(b, Mapping) and b.get("type") == "toolCall"
    ]
    return Reading(False, opened=calls, is_response=True) if calls else SAYS


def _reasoning_item(block: Mapping[str, Any]) -> bool:
    """Whether a thinking block carries an OpenAI Responses reasoning item (pi-ai keeps the item,
    JSON, as its ``thinkingSignature`` and sends it back as it is)."""
    signature = block.get("thinkingSignature")
    if not isinstance(signature, str) or not signature.startswith("{"):
        return False
    try:
        item = json.loads(signature)
    except (ValueError, RecursionError):
        return False
    return isinstance(item, dict) and item.get("type") == "reasoning"


def _without_item_ids(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An assistant message's blocks without the Responses item ids that pi-ai sends back with
    them (a call's ``|fc_…``, a text's ``textSignature``): OpenAI refuses an item by id without
    the reasoning item it followed (400 "Item 'fc_…' of type 'function_call' was provided
    without its required 'reasoning' item"); without an id, it is sent as new input."""
    out = []
    for b in blocks:
        if b.get("type") == "toolCall" and isinstance(b.get("id"), str):
            b = {**b, "id": _call_part(b["id"])}
        elif b.get("type") == "text" and "textSignature" in b:
            b = {k: v for k, v in b.items() if k != "textSignature"}
        out.append(b)
    return out


PI_PAIRING: Pairing[Mapping[str, Any]] = Pairing(_pairing)
"""How the messages Pi sends its model pair tool calls with results."""


class PiAdapter(Adapter[dict[str, Any]]):
    """Translates Pi ``AgentMessage`` dicts (the coding agent's roles included)."""

    name = "pi"
    pairing = PI_PAIRING

    _renames = False
    """Whether ``render_msg`` has rendered a call without its item id: ``finalize`` then names
    its results after it (until then it has nothing to do, and reads nothing)."""

    def sent(self, message: dict[str, Any]) -> bool:
        return not isinstance(message, Mapping) or in_context(message)

    def requested(self, message: dict[str, Any]) -> bool:
        return not isinstance(message, Mapping) or not never_requested(message)

    def translate(self, message: dict[str, Any], index: int) -> Incoming:
        if not isinstance(message, Mapping):
            raise MalformedMessage(f"a message must be an object, not {type(message).__name__}", index=index)
        role = message.get("role")
        if role in _CONVERTED:
            converted = convert_to_llm(message)
            if converted is None:
                raise MalformedMessage(
                    "a bashExecution excluded from context cannot be translated (PiHook leaves it out)",
                    index=index,
                    field="excludeFromContext",
                )
            message = converted
            role = "user"
        if not isinstance(role, str) or role not in _LLM_ROLES:
            raise MalformedMessage(
                f"unknown role {role!r} (expected one of {sorted([*_LLM_ROLES, *_CONVERTED])})",
                index=index,
                field="role",
            )
        if role == "assistant":
            return self._assistant(message, index)
        if role == "toolResult":
            return self._result(message, index)
        content = message.get("content")
        pi = {k: v for k, v in message.items() if k not in ("role", "content")}
        extra: dict[str, Any] = {"pi": pi} if pi else {}
        allowed = ("text",) if role == "system" else ("text", "image")
        if isinstance(content, str):
            text = content
        else:
            text, skeleton = _text_blocks(content, index, allowed=allowed)
            extra["content"] = skeleton
        m: Incoming = {"role": _LLM_ROLES[role], "text": text, "h": ""}  # type: ignore[typeddict-item]
        if media := _media_chars(extra.get("content") or []):
            m["extra_chars"] = media
        if role == "system":
            sections = message.get("sections")
            if isinstance(sections, Mapping):
                m["extra_chars"] = sum(len(v) for v in sections.values() if isinstance(v, str))
        self._ts(m, message)
        if extra:
            m["extra"] = extra
        return m

    def _ts(self, m: Incoming, message: Mapping[str, Any]) -> None:
        ts = message.get("timestamp")
        if isinstance(ts, int) and not isinstance(ts, bool):
            m["ts"] = ts

    def _assistant(self, message: Mapping[str, Any], index: int) -> Incoming:
        content = message.get("content")
        text, skeleton = _text_blocks(content, index, allowed=("text", "thinking", "toolCall"))
        calls: list[ToolCall] = []
        thinking = 0
        for j, block in enumerate(skeleton):
            if block["type"] == "thinking":
                thinking += len(str(block.get("thinking") or ""))
            elif block["type"] == "toolCall":
                call_id, name, args = block.get("id"), block.get("name"), block.get("arguments", {})
                if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                    raise MalformedMessage("a toolCall needs an id and a name", index=index, field=f"content[{j}]")
                if not isinstance(args, Mapping):
                    raise MalformedMessage(
                        "toolCall arguments must be an object", index=index, field=f"content[{j}].arguments"
                    )
                calls.append(
                    {
                        "id": call_id,
                        "name": name,
                        "arguments": sorted_keys(dict(args), index=index, field=f"content[{j}].arguments"),
                    }
                )
                skeleton[j] = {k: v for k, v in block.items() if k not in ("name", "arguments")}
        pi = {k: v for k, v in message.items() if k not in ("role", "content")}
        m: Incoming = {"role": "assistant", "text": text or None, "h": ""}
        if calls:
            m["tool_calls"] = calls
        if thinking:
            m["extra_chars"] = thinking
        m["extra"] = {"pi": pi, "content": skeleton}
        self._ts(m, message)
        return m

    def _result(self, message: Mapping[str, Any], index: int) -> Incoming:
        call_id = message.get("toolCallId")
        if not isinstance(call_id, str) or not call_id:
            raise MalformedMessage("a toolResult needs a toolCallId string", index=index, field="toolCallId")
        content = message.get("content", [])
        skeleton: list[dict[str, Any]] | None = None
        if isinstance(content, str):
            text = content
        else:
            text, skeleton = _text_blocks(content, index, allowed=("text", "image"))
        is_error = message.get("isError", False)
        if not isinstance(is_error, bool):
            raise MalformedMessage("isError must be a boolean", index=index, field="isError")
        m: Incoming = {"role": "tool", "text": text, "tool_call_id": call_id, "h": ""}
        if isinstance(message.get("toolName"), str):
            m["tool_name"] = message["toolName"]
        if is_error:
            m["is_error"] = True
        self._ts(m, message)
        # the output's text lives in the toolcall object; images, or several text blocks, are kept
        # as ``full`` (shown only with the whole output); ``details`` is Pi's UI data, never sent
        # to the model, and is not kept
        extra: dict[str, Any] = {}
        if isinstance(message.get("timestamp"), int):
            extra["pi"] = {"timestamp": message["timestamp"]}
        if skeleton is not None and [b.get("type") for b in skeleton] != ["text"]:
            extra["full"] = {"content": skeleton}
            if media := _media_chars(skeleton):
                m["extra_chars"] = media  # its images: counted while the result shows in full
        details = message.get("details")
        if isinstance(details, Mapping) and details.get("contextOs") is True:
            extra["ours"] = True  # our own tool's report (the Pi extension's read): no file text
        if extra:
            m["extra"] = extra
        return m

    def render_msg(self, msg: Msg) -> dict[str, Any]:
        extra = msg.get("extra") or {}
        pi = dict(extra.get("pi") or {})
        role = _NEUTRAL_TO_PI[msg["role"]]
        text = msg["text"] or ""
        if role == "toolResult":
            full = extra.get("full")
            blocks = [{"type": "text", "text": text}]
            if isinstance(full, Mapping) and isinstance(full.get("content"), list):
                blocks = _fill(list(full["content"]), text)
            out: dict[str, Any] = {
                "role": "toolResult",
                "toolCallId": msg.get("tool_call_id", ""),
                "toolName": msg.get("tool_name", ""),
                "content": blocks,
                "isError": bool(msg.get("is_error", False)),
            }
            out["timestamp"] = pi.get("timestamp", 0)
            return out
        skeleton = extra.get("content")
        content: Any
        if role == "assistant":
            calls = {c["id"]: c for c in msg.get("tool_calls") or ()}
            blocks = _fill(list(skeleton or []), text) if skeleton is not None else []
            if msg.get("drop_thinking"):  # past the session's thinking horizon
                dropped = [b for b in blocks if b.get("type") == "thinking"]
                blocks = [b for b in blocks if b.get("type") != "thinking"]
                if any(_reasoning_item(b) for b in dropped):
                    blocks = _without_item_ids(blocks)
                    calls = {_call_part(k): c for k, c in calls.items()}
                    self._renames = True
            if skeleton is None and text:
                blocks = [{"type": "text", "text": text}]
            content = []
            for b in blocks:
                if b.get("type") == "toolCall" and b.get("id") in calls:
                    c = calls.pop(b["id"])
                    content.append({"type": "toolCall", "id": b["id"], "name": c["name"], "arguments": c["arguments"]})
                    content[-1].update({k: v for k, v in b.items() if k not in ("type", "id")})
                else:
                    content.append(b)
            content += [
                {"type": "toolCall", "id": call_id, "name": c["name"], "arguments": c["arguments"]}
                for call_id, c in calls.items()
            ]
            out = {"role": "assistant", "content": content}
        elif skeleton is not None:
            out = {"role": role, "content": _fill(list(skeleton), text)}
        elif "pi" in extra or role == "system":
            out = {"role": role, "content": text}
        else:  # a message context_os made (the context_os block, a note)
            out = {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 0}
        out.update(pi)
        return out

    def finalize(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _answers_renamed(messages) if self._renames else messages

    def tool_definitions(self, tools: list[dict[str, Any]]) -> list[Any]:
        return [{"name": t["name"], "description": t["description"], "parameters": t["parameters"]} for t in tools]


def _answers_renamed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each tool result named as its call is: a call rendered without its
    item id (``call_…``) is answered by ``call_…``, not by the ``call_…|fc_…`` its result keeps
    (pi-ai pairs them by the whole id, and would add a result of its own for the call). Results
    renamed are copies; the list is changed in place."""
    calls: Any = ()  # the ids of the last assistant message's calls, read when a result needs them
    last: Mapping[str, Any] | None = None
    for k, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant":
            last, calls = m, None
        elif role != "toolResult":
            last, calls = None, ()
        elif isinstance(call_id := m.get("toolCallId"), str) and "|" in call_id and last is not None:
            if calls is None:
                calls = {b.get("id") for b in last.get("content") or () if isinstance(b, Mapping)}
            if call_id not in calls and _call_part(call_id) in calls:
                messages[k] = {**m, "toolCallId": _call_part(call_id)}
    return messages


def in_context(message: Mapping[str, Any]) -> bool:
    """Whether Pi sends ``message`` to the model at all: not a ``!!`` bash run
    (``excludeFromContext``), nor an assistant message that ended in an error or was aborted
    (pi-ai's ``transformMessages`` skips those, whatever the context holds)."""
    role = message.get("role")
    if role == "bashExecution":
        return not message.get("excludeFromContext")
    return not (role == "assistant" and message.get("stopReason") in ("error", "aborted"))


def never_requested(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is the empty answer Pi writes when a run was aborted before its next
    model call went out (Esc while a tool ran): aborted, nothing in it, no tokens used and no time
    taken. No model received that call. (An answer aborted while it streamed took time.)"""
    if message.get("role") != "assistant" or message.get("stopReason") != "aborted":
        return False
    if message.get("durationMs") != 0:
        return False
    usage = message.get("usage")
    if isinstance(usage, Mapping) and usage.get("totalTokens"):
        return False
    content = message.get("content")
    blocks = content if isinstance(content, list) else [content] if content else []
    return all(isinstance(b, Mapping) and b.get("type") == "text" and not b.get("text") for b in blocks)


class PiHook(ContextHook[dict[str, Any]]):
    """``transform_context`` for Pi's ``context`` event: AgentMessages in, AgentMessages out."""

    adapter_class = PiAdapter


def host_tool_observer(
    files: FileTools, names: Mapping[str, str] | None = None
) -> Callable[[Session, SyncReport], None]:
    """An ``on_sync`` for harnesses that run file tools themselves (Pi's edit, write, ls, find,
    grep, bash): after each new tool result, the file objects it touched are brought up to date
    from the disk, so the next context shows the new version instead of a stale one. A change it
    could not record for the store being out of reach raises ``StoreUnavailable``: the hook hands
    the result over again at its next call (a result observed already is skipped)."""
    names = names or PI
    calls: dict[str, tuple[str, Any]] = {}
    observed = 0
    """The entries (``Entry["i"]``) below this are observed (``files`` is of one session)."""

    def observe(session: Session, report: SyncReport) -> None:
        nonlocal observed
        view = session.view
        for i in view.visible[len(view.visible) - report.new :]:
            if i < observed:
                continue  # observed at a call whose observe raised after it
            e = view.entries[i]
            for c in e.get("tool_calls") or ():
                calls[c["id"]] = (c["name"], c["arguments"])
            if e["role"] == "tool":
                with session.caused_by(i):
                    _observe_result(session, files, names, e, calls.get(e.get("tool_call_id", ""), ("", {})))
                calls.pop(e.get("tool_call_id", ""), None)  # answered: forgotten
            observed = i + 1

    return observe


def _observe_result(
    session: Session, files: FileTools, names: Mapping[str, str], e: Mapping[str, Any], call: tuple[str, Any]
) -> None:
    """Bring the file objects a host tool's result touched up to date (``host_tool_observer``)."""
    name, args = call
    role = tool_role(name, names, args)
    obj = session.view.objects.get(e.get("object", ""))
    if obj is None or obj.meta.get("is_error"):
        return  # failed calls changed nothing
    if (e.get("extra") or {}).get("ours"):
        if role == "read":
            _inherited_read(session, files, obj.content)
        return
    if role in (None, "read"):
        return  # reads go through our read tool
    output = obj.content if isinstance(obj.content, str) else ""
    done = files.after_tool(role, args, output)
    if done.get("type") == "StoreUnavailable":  # raised: the hook hands this entry over again
        raise StoreUnavailable(str(done.get("error") or done.get("note")))
    # a change not recorded for another reason (the file unreadable now) is the next read's (the
    # file was indexed again to learn which, one more busy timeout, before 2026-12-02)


def _inherited_read(session: Session, files: FileTools, report: Any) -> None:
    """Our read's report, in a history this session did not make (a Pi session forked or cloned
    from another, whose reads another context_os session answered, or one resumed with a store
    that never held it): the report names the file but holds none of its text, which only that
    session showed. The file it names joins this session active, at its version on the disk, as
    the read would have made it; a file this session knows already (its own read, or one it
    deactivated since) is left as it is. A file id the store never knew (another store's) is read
    again by the report's path; one it evicted is not."""
    try:
        found = json.loads(report) if isinstance(report, str) else None
    except json.JSONDecodeError:
        return
    if not isinstance(found, dict):
        return
    file_id = found.get("id")
    if not isinstance(file_id, str) or not file_id.startswith("file:") or file_id in session.view.objects:
        return
    # gone from the store (evicted), unreadable: the report is all there is; seen by the model in
    # the session it came from: not an ask the active pool must keep for the next call; the store
    # out of reach: the hook hands the report over again at its next call
    with session.answered():
        try:
            if _unknown_here(session, file_id):
                path = found.get("path")
                if isinstance(path, str):
                    known = files.index.lookup(files.workspace.resolve(path, must_exist=False))
                    if known is None or known.id not in session.view.objects:
                        read = files.read(path)
                        if read.get("recorded") is False:  # (the store out of reach: its text in the result)
                            raise StoreUnavailable(f"{path}: {read.get('note')}")
                return
            files.activate(file_id)
        except StoreUnavailable:
            raise
        except ContextOSError:
            pass


def _unknown_here(session: Session, file_id: str) -> bool:
    """Whether the store holds nothing of ``file_id``: no version, and no tombstone (an eviction)."""
    from ..context.evict import tombstone_id

    store = session.store
    return store.get(file_id) is None and store.get(tombstone_id(file_id)) is None
