"""Claude Code session files (JSON lines under ``~/.claude/projects/``): the main session and its
sub-agents' sidechains, each a transcript of Pi ``AgentMessage`` dicts.

Entries (``user``, ``assistant``, and ``progress``, ``system``, ``summary``,
``file-history-snapshot``... that are not messages) link by ``uuid``/``parentUuid``. A session is
the chain from its last message back to the root, as Claude Code resumes it, with what Claude
Code's own resume is known to lose put back, since the model saw it when the session ran:

* a compaction boundary (``system``/``compact_boundary``, no parent) is crossed by its
  ``logicalParentUuid``: the replay is uncompacted, so the summary message Claude Code sent after
  it (``isCompactSummary``) is left out;
* a link to an entry the file lacks (Claude Code sometimes loses one) continues at the entry
  written just before that has a ``uuid`` (a ``file-history-snapshot`` line has none: the chain
  stopped there), in a main session (a sidechain's first entry links into the main one);
* a link to an API error's note (``system``/``api_error``, written late, after the retried
  request's replies) continues at the message written last before the linking entry;
* the parts of a reply streamed as several entries (one ``message.id``) are one message, the
  results of its parallel tool calls follow it, and entries that branch off the chain only for
  that (below it) are kept; a copy of the history written when the session was resumed (new
  uuids, a root of its own, the same message ids and content) is not.

Tool results become Pi ``toolResult`` messages right after their call's message (one written
before the entry holding its call, as Claude Code 2.1 sometimes does, too); a call never
answered is dropped from its message, a result with no call is dropped. Assistant entries
Claude Code made up itself (``isApiErrorMessage``, model ``<synthetic>``) and entries shown in
the transcript only (``isVisibleInTranscriptOnly``) are not messages.

**Attachments** (a file named with @, the date, reminders) on the chain, with the text Claude
Code sent of them (``rendered``, written from 2.1.3xx), go where Claude Code sends them
(``_Builder``); a file whose attachments hold none of it gets a note.

**Sidechains.** Sub-agents (the Task tool, the compaction summariser) run their own
conversations: ``isSidechain: true`` entries in the main file (older releases), grouped by
``agentId`` or by the chain they form, and the files ``<session>/subagents/agent-*.jsonl``
beside it (newer releases), or, where neither holds them (2.1.37 to 2.1.49, as kept by tools
that copy the main file alone), the ``agent_progress`` entries that mirror each of their messages
into the main file. Each is a transcript of its own, ``label`` its agent id, after the main one.
A sub-agent file given alone is one session.

**Stream output.** ``claude -p --output-format stream-json`` (and the SDKs) write the session's
messages in the order they happened, with ``session_id`` and ``parent_tool_use_id`` but no
``parentUuid``: the main conversation is the messages without a parent tool use, each sub-agent's
those of its Task call.

This module reads files; it never touches a store or a session.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...errors import InputError
from .common import MAX_SESSION_BYTES, Parsed, Transcript, iso_ms, json_type, load, text_field

__all__ = ["CLAUDE_CODE_TYPES", "read_claude_code"]

CLAUDE_CODE_TYPES = ("summary", "file-history-snapshot", "queue-operation")
"""Entry types only Claude Code writes (its messages carry ``uuid``/``sessionId`` besides)."""
_REDACTED_THINKING = "[Reasoning redacted]"
"""The text of a ``redacted_thinking`` block as a Pi message holds it (pi-ai's Anthropic
provider: a ``thinking`` block, ``redacted``, its encrypted ``data`` the signature)."""


def _is_message(e: Mapping[str, Any]) -> bool:
    if e.get("type") not in ("user", "assistant") or not isinstance(e.get("message"), dict):
        return False
    if e["type"] == "assistant" and (e.get("isApiErrorMessage") or e["message"].get("model") == "<synthetic>"):
        return False
    return not (e.get("isCompactSummary") or e.get("isVisibleInTranscriptOnly"))


def _blocks(content: Any, where: str) -> list[Any]:
    """The content blocks of a message or tool result (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if content is None:
        return []
    if not isinstance(content, list):
        raise InputError(f"{where}: content must be a string or a list of blocks, not {json_type(content)}")
    return content


def _text(content: Any, where: str) -> list[dict[str, Any]]:
    blocks = []
    for b in _blocks(content, where):
        if isinstance(b, Mapping) and b.get("type") == "text":
            blocks.append({"type": "text", "text": str(b.get("text", ""))})
        elif isinstance(b, Mapping) and b.get("type") == "image":
            src = b.get("source")
            if not isinstance(src, Mapping):
                src = {}
            blocks.append({"type": "image", "data": src.get("data", ""), "mimeType": src.get("media_type", "")})
    return blocks


def _chain(leaf: dict[str, Any], pool: list[dict[str, Any]], *, main: bool) -> list[dict[str, Any]]:
    """The entries from ``leaf`` back to its root, leaf first (module docstring)."""
    by_uuid = {e["uuid"]: e for e in pool if isinstance(e.get("uuid"), str)}
    position = {id(e): k for k, e in enumerate(pool)}
    chain: list[dict[str, Any]] = []
    seen: set[int] = set()
    node: dict[str, Any] | None = leaf
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        chain.append(node)
        parent = node.get("parentUuid")
        if parent is None and node.get("type") == "system" and node.get("subtype") == "compact_boundary":
            parent = node.get("logicalParentUuid")
        if not isinstance(parent, str):
            break
        node = by_uuid.get(parent)
        if node is None and main:  # a lost link: the entry written just before (one that links)
            k = position[id(chain[-1])]
            node = next((e for e in reversed(pool[:k]) if isinstance(e.get("uuid"), str)), None)
        elif node is not None and main and node.get("type") == "system" and node.get("subtype") == "api_error":
            node = _after_retry(node, chain[-1], pool, position, by_uuid) or node
    return chain


def _after_retry(
    error: dict[str, Any],
    child: dict[str, Any],
    pool: list[dict[str, Any]],
    position: dict[int, int],
    by_uuid: dict[str, dict[str, Any]],
) -> dict[str, Any] | None:
    """Where the conversation went on when ``child`` links to an API error note: Claude Code
    retries the request (the retried reply links to the note's parent) but may write the note
    late, after the replies that followed, and link the next entry to it; those replies then
    fall off the chain though the model saw them. The message written last before ``child``, if
    it came after the note's parent (else there was no retry to skip: None)."""
    before = next((pool[j] for j in range(position[id(child)] - 1, -1, -1) if _is_message(pool[j])), None)
    parent = by_uuid.get(str(error.get("parentUuid")))
    if before is None or parent is None or position[id(before)] <= position[id(parent)]:
        return None
    return before


def _entry(where: str, e: Mapping[str, Any]) -> str:
    """Where an entry is, for an error: the file and the entry's uuid."""
    return f"{where}: entry {e.get('uuid')!r:.60}"


_CALL_ID, _RESULT_ID = "a tool_use block's id", "a tool_result block's tool_use_id"


def _key(value: Any, where: str, name: str) -> str | None:
    """An id that tells which entries go together (a reply's ``message.id``, a call's ``id``, a
    result's ``tool_use_id``): a string or none; ``InputError`` naming ``name`` for another type."""
    if value is None or isinstance(value, str):
        return value
    raise InputError(f"{where}: {name} must be a string, not {json_type(value)}")


def _conversation(pool: list[dict[str, Any]], where: str, *, main: bool) -> list[dict[str, Any]]:
    """The message entries of the session whose entries are ``pool`` (file order), in file order."""
    messages = [e for e in pool if _is_message(e)]
    if not messages:
        return []
    chain = _chain(messages[-1], pool, main=main)
    on_chain = {id(e) for e in chain}
    reply_of = {
        id(e): _key(e["message"].get("id"), _entry(where, e), "message.id")
        for e in messages
        if e["type"] == "assistant"
    }
    reply_ids = {reply_of[id(e)] for e in messages if id(e) in on_chain and id(e) in reply_of}
    reply_ids.discard(None)
    # a part of a reply on the chain that branched off it (its parallel calls) descends from the
    # chain (through entries of any type); a copy of the reply elsewhere (a resumed session's copied
    # history: the same message ids, new uuids, a root of its own) does not
    children: dict[str, list[dict[str, Any]]] = {}
    for e in pool:
        if isinstance(e.get("parentUuid"), str):
            children.setdefault(e["parentUuid"], []).append(e)
    below: set[int] = set()
    todo = [e["uuid"] for e in chain if isinstance(e.get("uuid"), str)]
    while todo:
        for child in children.pop(todo.pop(), ()):
            below.add(id(child))
            if isinstance(child.get("uuid"), str):
                todo.append(child["uuid"])
    parts = {id(e) for e in messages if id(e) in below and id(e) in reply_of and reply_of[id(e)] in reply_ids}
    if parts:  # ... nor does a copy written when the session was resumed: the same part as one on the chain
        copies = {_part_key(e) for e in chain if _is_message(e) and e["type"] == "assistant"}
        parts = {id(e) for e in messages if id(e) in parts and _part_key(e) not in copies}
    chosen = [e for e in messages if id(e) in on_chain or id(e) in parts]
    calls = {
        _key(b.get("id"), _entry(where, e), _CALL_ID)
        for e in chosen
        if e["type"] == "assistant" and isinstance(e["message"].get("content"), list)
        for b in e["message"]["content"]
        if isinstance(b, Mapping) and b.get("type") == "tool_use"
    }
    chosen_ids = {id(e) for e in chosen} | {id(e) for e in pool if id(e) in on_chain and _rendered(e) is not None}
    return [
        e
        for e in pool
        if id(e) in chosen_ids
        or (
            _is_message(e)
            and e["type"] == "user"
            and isinstance(e["message"].get("content"), list)
            and any(
                isinstance(b, Mapping)
                and b.get("type") == "tool_result"
                and _key(b.get("tool_use_id"), _entry(where, e), _RESULT_ID) in calls
                for b in e["message"]["content"]
            )
        )
    ]


def _rendered(e: Mapping[str, Any]) -> list[str] | None:
    """What an ``attachment`` entry showed the model, as Claude Code (2.1.3xx) records it beside
    the attachment (``rendered``: one ``{"content": text}`` per part); None for another entry, and
    for an attachment it sent nothing of (no ``rendered``: a session's context, a snapshot of the
    system prompt)."""
    if e.get("type") != "attachment" or not isinstance(e.get("rendered"), list):
        return None
    return [str(part["content"]) for part in e["rendered"] if isinstance(part, Mapping) and "content" in part]


def _part_key(e: Mapping[str, Any]) -> str:
    """What tells a part of a reply from another: its reply's id and its content."""
    return json.dumps([e["message"].get("id"), e["message"].get("content")], sort_keys=True, default=str)


class _Builder:
    """Pi messages from Claude Code message entries: a reply's parts merged, its tool results
    right after it, user text that arrived while its calls were running after those; the text
    of attachments where Claude Code sends it: after a tool result, at the end of the result's
    content; else before the user's text they follow (the last of them ending in a newline)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.messages: list[dict[str, Any]] = []
        self.names: dict[str, str] = {}
        self.reply: dict[str, Any] | None = None
        self.reply_id: Any = None
        self.calls: list[str] = []
        self.results: dict[str, dict[str, Any]] = {}
        self.held: list[dict[str, Any]] = []
        self.early: dict[str, dict[str, Any]] = {}
        """Results written before the entry of their call (Claude Code 2.1 sometimes writes a
        result a line before the part of the reply that holds its call; the links say the order)."""
        self.result: dict[str, Any] | None = None
        """The tool result the entry before was, which attachments that follow it join."""
        self.prompt: dict[str, Any] | None = None
        """The user message the entry before was (or made), which attachments that follow it precede."""
        self.attached: list[dict[str, Any]] = []
        """The text blocks of the attachments that precede ``prompt``'s own, as they came (the
        head of its content)."""

    def close(self) -> None:
        if self.reply is not None:
            answered = [c for c in self.calls if c in self.results]
            self.reply["content"] = [
                b for b in self.reply["content"] if b["type"] != "toolCall" or b["id"] in self.results
            ]
            self.reply["stopReason"] = "toolUse" if answered else "stop"
            self.messages.append(self.reply)
            self.messages.extend(self.results[c] for c in answered)
        self.messages.extend(self.held)
        self.reply, self.reply_id, self.calls, self.results, self.held = None, None, [], {}, []

    def attach(self, e: dict[str, Any], parts: list[str]) -> None:
        """An attachment's text, where Claude Code sends it (the class's docstring)."""
        if self.result is not None:
            content = self.result["content"]
            for text in parts:
                if content and content[-1]["type"] == "text":  # after the result's text, its end's blanks off
                    content[-1]["text"] = content[-1]["text"].rstrip() + "\n\n" + text
                else:
                    content.append({"type": "text", "text": text})
            return
        if self.prompt is None:  # nothing before it in this turn: a user message of its own
            self.close()
            self.prompt = {"role": "user", "content": [], "timestamp": iso_ms(e.get("timestamp"))}
            self.messages.append(self.prompt)
        own = self.prompt["content"][len(self.attached) :]
        self.attached += [{"type": "text", "text": text} for text in parts]
        attached = [dict(b) for b in self.attached]
        if attached and own:
            attached[-1]["text"] += "\n"
        self.prompt["content"] = attached + own

    def add(self, e: dict[str, Any]) -> None:
        parts = _rendered(e)
        if parts is not None:
            self.attach(e, parts)
            return
        self.result, self.prompt, self.attached = None, None, []
        msg = e["message"]
        ts = iso_ms(e.get("timestamp"))
        where = _entry(self.where, e)
        if e["type"] == "assistant":
            blocks: list[dict[str, Any]] = []
            for b in _blocks(msg.get("content"), where):
                if not isinstance(b, Mapping):
                    continue
                if b.get("type") == "text":
                    blocks.append({"type": "text", "text": str(b.get("text", ""))})
                elif b.get("type") == "thinking":
                    blocks.append(
                        {
                            "type": "thinking",
                            "thinking": str(b.get("thinking", "")),
                            "thinkingSignature": b.get("signature", ""),
                        }
                    )
                elif b.get("type") == "redacted_thinking":
                    # as pi-ai holds it: sent back with its encrypted data, counted by its note
                    blocks.append(
                        {
                            "type": "thinking",
                            "thinking": _REDACTED_THINKING,
                            "thinkingSignature": str(b.get("data", "")),
                            "redacted": True,
                        }
                    )
                elif b.get("type") == "tool_use":
                    call_id, name = str(_key(b.get("id"), where, _CALL_ID)), str(b.get("name"))
                    self.names[call_id] = name
                    args = b.get("input") if isinstance(b.get("input"), dict) else {}
                    blocks.append({"type": "toolCall", "id": call_id, "name": name, "arguments": args})
            mid = msg.get("id")
            if self.reply is None or mid is None or mid != self.reply_id:
                self.close()
                self.reply_id = mid
                self.reply = {
                    "role": "assistant",
                    "content": [],
                    "api": "anthropic-messages",
                    "provider": "anthropic",
                    "model": msg.get("model", ""),
                    "stopReason": "stop",
                    "timestamp": ts,
                }
            self.reply["content"].extend(blocks)  # the same reply, streamed as several entries
            new = [b["id"] for b in blocks if b["type"] == "toolCall"]
            self.calls += new
            for c in new:
                if c in self.early:
                    self.results[c] = {**self.early.pop(c), "toolName": self.names[c]}
            return
        rest = []
        for b in _blocks(msg.get("content"), where):
            if not (isinstance(b, Mapping) and b.get("type") == "tool_result"):
                rest.append(b)
                continue
            call_id = str(_key(b.get("tool_use_id"), where, _RESULT_ID))
            if (
                call_id in self.results
                or call_id in self.early
                or (call_id not in self.calls and call_id in self.names)
            ):
                continue  # no call open for it: Claude Code would not have sent it either
            self.result = (self.results if call_id in self.calls else self.early)[call_id] = {
                "role": "toolResult",
                "toolCallId": call_id,
                "toolName": self.names.get(call_id, ""),
                "content": _text(b.get("content"), where),
                "isError": bool(b.get("is_error", False)),
                "timestamp": ts,
            }
        text = _text(rest, where)
        if not text:
            return
        user = {"role": "user", "content": text, "timestamp": ts}
        self.result, self.prompt = None, user
        if self.reply is not None and any(c not in self.results for c in self.calls):
            self.held.append(user)  # arrived while the calls ran: after their results
        else:
            self.close()
            self.messages.append(user)


def _transcript(entries: list[dict[str, Any]], where: str, *, label: str | None, count: int) -> Transcript:
    builder = _Builder(where)
    for e in entries:
        builder.add(e)
    builder.close()
    session_id = next((s for e in entries if (s := text_field(e.get("sessionId") or e.get("session_id")))), None)
    cwd = next((c for e in entries if (c := text_field(e.get("cwd")))), None)
    return Transcript("claude-code", "pi", "claude-code", builder.messages, session_id, cwd, [], count, label=label)


def _is_stream(entries: list[dict[str, Any]]) -> bool:
    """Whether the lines are Claude Code's ``--output-format stream-json`` output (``claude -p``,
    the SDKs): its messages in the order they happened, ``session_id`` and ``parent_tool_use_id``
    on each, no ``parentUuid`` links."""
    return any("parent_tool_use_id" in e and "session_id" in e for e in entries) and not any(
        "parentUuid" in e for e in entries
    )


def _read_stream(entries: list[dict[str, Any]], where: str, count: int, *, sidechains: bool) -> list[Transcript]:
    """A stream-json output: the main conversation (``parent_tool_use_id`` null), then each
    sub-agent's (the messages of one Task call, ``label`` its tool use id). The prompt shows only
    if Claude Code replayed it (``--replay-user-messages``); an API error shown as a reply
    (``error``) is no message; the cwd is the ``init`` line's."""
    init = next((e for e in entries if e.get("type") == "system" and e.get("subtype") == "init"), {})
    threads: dict[str | None, list[dict[str, Any]]] = {}
    for e in entries:
        if _is_message(e) and not (e["type"] == "assistant" and e.get("error")):
            parent = e.get("parent_tool_use_id")
            threads.setdefault(parent if isinstance(parent, str) else None, []).append({**e, "cwd": init.get("cwd")})
    out = [_transcript(threads.pop(None, []), where, label=None, count=count)]
    if sidechains:
        out += [_transcript(group, where, label=call, count=len(group)) for call, group in threads.items()]
    return out


def _sidechain_groups(side: list[dict[str, Any]]) -> list[tuple[str | None, list[dict[str, Any]]]]:
    """Sidechain entries by sub-agent: its ``agentId``, else the chain's root entry."""
    by_uuid = {e["uuid"]: e for e in side if isinstance(e.get("uuid"), str)}

    def key(e: dict[str, Any]) -> str:
        if isinstance(e.get("agentId"), str):
            return "agent:" + str(e["agentId"])
        seen: set[int] = set()
        while isinstance(e.get("parentUuid"), str) and e["parentUuid"] in by_uuid and id(e) not in seen:
            seen.add(id(e))
            e = by_uuid[e["parentUuid"]]
        return "root:" + str(e.get("uuid"))

    groups: dict[str, list[dict[str, Any]]] = {}
    for e in side:
        groups.setdefault(key(e), []).append(e)
    return [(k[len("agent:") :] if k.startswith("agent:") else None, g) for k, g in groups.items()]


def _progress_groups(entries: list[dict[str, Any]]) -> list[tuple[str | None, list[dict[str, Any]]]]:
    """Sub-agents' conversations as Claude Code 2.1.37 to 2.1.49 mirrored them into the main file,
    one ``progress`` entry (``agent_progress``) per message of theirs, by ``agentId``: the only
    copy where no sidechain or sub-agent file holds them. Each message follows the one before."""
    groups: dict[str, list[dict[str, Any]]] = {}
    seen: set[str] = set()
    for row in entries:
        data = row.get("data") if row.get("type") == "progress" else None
        if not isinstance(data, Mapping) or data.get("type") != "agent_progress":
            continue
        agent, msg = data.get("agentId"), data.get("message")
        if not isinstance(agent, str) or not isinstance(msg, Mapping) or not isinstance(msg.get("uuid"), str):
            continue
        if msg["uuid"] in seen:
            continue
        seen.add(msg["uuid"])
        group = groups.setdefault(agent, [])
        parent = group[-1]["uuid"] if group else None
        base: dict[str, Any] = {k: row[k] for k in ("sessionId", "cwd") if k in row}
        group.append({**base, **msg, "parentUuid": parent, "isSidechain": True, "agentId": agent})
    # one whose replies were not mirrored (its prompt alone) has no model call to replay
    return [(agent, group) for agent, group in groups.items() if any(e.get("type") == "assistant" for e in group)]


def read_claude_code(
    parsed: Parsed, *, sidechains: bool = True, max_bytes: int = MAX_SESSION_BYTES, **_: Any
) -> list[Transcript]:
    """The main session of a Claude Code file, then (``sidechains``) each sub-agent's."""
    where = str(parsed.path)
    rows = parsed.lines("Claude Code")
    entries = [e for _, e in rows]
    if _is_stream(entries):
        return parsed.stamp(_read_stream(entries, where, len(rows), sidechains=sidechains))
    pool = [e for e in entries if not e.get("isSidechain")]
    side = [e for e in entries if e.get("isSidechain")]
    groups = _sidechain_groups(side)
    out: list[Transcript] = []
    if any(_is_message(e) for e in pool):
        out.append(_transcript(_conversation(pool, where, main=True), where, label=None, count=len(rows)))
    elif groups:  # a sub-agent's own file: its sidechain is the session
        own = groups.pop(0)[1]
        out.append(_transcript(_conversation(own, where, main=False), where, label=None, count=len(rows)))
    else:
        out.append(_transcript([], where, label=None, count=len(rows)))
    parsed.stamp(out)
    out[0].notes += _unrendered(entries)
    if not sidechains:
        return out
    files, unread = _sidechain_files(parsed, max_bytes)
    out[0].notes += unread
    named = {t.label for t in files}
    known = {agent for agent, _ in groups}
    groups += [(agent, group) for agent, group in _progress_groups(entries) if agent not in known]
    for n, (agent, group) in enumerate(groups, 1):
        label = agent or f"sidechain-{n}"
        if label not in named:
            out += parsed.stamp(
                [_transcript(_conversation(group, where, main=False), where, label=label, count=len(group))]
            )
    return out + files


def _unrendered(entries: list[dict[str, Any]]) -> list[str]:
    """A note when the file's ``attachment`` entries hold none of the text Claude Code sent of
    them (``rendered``, which its releases before 2.1.3xx do not write): what they added to the
    turns (a file named with @, a changed file's diff, reminders) is not counted."""
    attached = [e for e in entries if e.get("type") == "attachment"]
    if not attached or any("rendered" in e for e in attached):
        return []
    kinds = sorted({str(a.get("type")) for e in attached if isinstance(a := e.get("attachment"), Mapping)})
    n = len(attached)
    what, verb = (f"{n:,} attachment entries", "hold") if n > 1 else ("1 attachment entry", "holds")
    listed = ", ".join(kinds[:6]) + (", ..." if len(kinds) > 6 else "")
    return [
        f"{what} ({listed}) {verb} no text as Claude Code sent it (the release that wrote the file records"
        " none): what they added to the turns is not counted"
    ]


def _sidechain_files(parsed: Parsed, max_bytes: int) -> tuple[list[Transcript], list[str]]:
    """The sub-agents' files of a main session file ``<dir>/<session>.jsonl`` (or ``.jsonl.gz``):
    ``<dir>/<session>/subagents/agent-*.jsonl`` (or ``.jsonl.gz``), by name; and what was wrong
    with those that could not be read (left out: one sub-agent's file left empty or cut by a
    crash takes nothing from the main session and the others)."""
    name = parsed.path.name.removesuffix(".gz")
    if not name.endswith(".jsonl"):
        return [], []
    folder = parsed.path.with_name(name.removesuffix(".jsonl")) / "subagents"
    if not folder.is_dir():
        return [], []
    out: list[Transcript] = []
    unread: list[str] = []
    found = {p.name.removesuffix(".gz"): p for p in sorted(folder.glob("agent-*.jsonl.gz"))}
    found.update({p.name: p for p in folder.glob("agent-*.jsonl")})  # a plain copy before a compressed one
    for path in (found[name] for name in sorted(found)):
        try:
            sub = load(path, max_bytes)
            (t,) = read_claude_code(sub, sidechains=False)
        except InputError as e:
            unread.append(f"a sub-agent's file was left out: {e}")
            continue
        agent = next((a for _, e in sub.lines("Claude Code") if isinstance(a := e.get("agentId"), str) and a), None)
        t.label = agent or path.name.removesuffix(".gz").removesuffix(".jsonl").removeprefix("agent-")
        out.append(t)
    return out, unread
