"""Pi session files (JSON lines, format versions 1, 2 and 3), read the way Pi's session manager
reads them (``packages/coding-agent/src/core/session-manager.ts``).

* v1: entries in file order, no ids; a ``compaction`` names its first kept entry by index
  (``firstKeptEntryIndex``, the header is entry 0).
* v2/v3: entries form a tree by ``id``/``parentId``; the current branch is the path from the
  last entry (the leaf) to the root; a ``compaction`` names ``firstKeptEntryId``.
  ``custom_message`` and ``branch_summary`` entries are messages too (``custom``,
  ``branchSummary``; a branch summary only when its ``summary`` is not empty, as Pi's
  ``buildSessionContext`` adds it); v2's ``hookMessage`` role is v3's ``custom``.
* A ``context_edit`` (Pi 1.5) on the branch rewrites the message of the entry it targets as
  Pi's ``projectContextEntry`` does: a ``null`` replacement leaves it out (Pi omits a failed
  attempt so, with its tool results), else its ``content`` is the replacement's (a string as one
  text block for an assistant message or a tool result); the newest edit of an entry counts. The
  history is the one Pi rebuilds when it resumes the session: the calls before an edit are
  replayed with the edited message too.
* A line that is not JSON is skipped, as Pi's loader skips it (entry indexes count the entries
  read, as Pi's do).
* A message of a role Pi does not know is left out, as Pi's ``convertToLlm`` leaves it out of
  what the model is sent; a message whose ``content`` is null or missing is read as empty. Both
  are said in the transcript's notes (``_unusual``).

The messages are Pi ``AgentMessage`` dicts, uncompacted; the compactions are kept beside them.

This module reads files; it never touches a store or a session.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from ...errors import InputError
from ...harness.pi import AGENT_MESSAGE_ROLES
from .common import Compaction, Parsed, Transcript, iso_ms, line_numbers, text_field

__all__ = ["PI_ENTRY_TYPES", "read_pi"]

PI_ENTRY_TYPES = (
    "session",
    "message",
    "compaction",
    "model_change",
    "thinking_level_change",
    "custom_message",
    "branch_summary",
    "custom",
    "label",
    "session_info",
    "context_edit",
    "usage",
)
"""Entry types of a Pi session file."""


_CONTENT_ROLES = ("user", "assistant", "toolResult", "system", "custom")
"""The roles of Pi's messages that hold a ``content`` (a ``bashExecution`` holds its
``command`` and ``output``, a summary its ``summary``)."""


def _int(value: Any, where: str, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InputError(f"{where}: {name} must be an integer, got {value!r:.80}")


def _tokens(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _pi_message(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """The AgentMessage an entry contributes to the context, if any."""
    kind = entry.get("type")
    if kind == "message" and isinstance(entry.get("message"), dict):
        m = dict(entry["message"])
        if m.get("role") == "hookMessage":  # v2 name of v3's custom
            m["role"] = "custom"
        if not isinstance(m.get("role"), str) or m["role"] not in AGENT_MESSAGE_ROLES:
            return None  # Pi's convertToLlm sends no message of a role it does not know
        if m.get("content") is None and m["role"] in _CONTENT_ROLES:
            m["content"] = []
        return m
    if kind == "custom_message":
        return {
            "role": "custom",
            "customType": entry.get("customType"),
            "content": entry.get("content", ""),
            "display": entry.get("display", True),
            "timestamp": iso_ms(entry.get("timestamp")),
        }
    if kind == "branch_summary" and entry.get("summary"):  # Pi sends none for an empty summary
        return {
            "role": "branchSummary",
            "summary": entry["summary"],
            "fromId": entry.get("fromId"),
            "timestamp": iso_ms(entry.get("timestamp")),
        }
    return None


def _system_chars(message: Any) -> int:
    """What a compaction's system message (Pi 1.5's ``systemMessage``: the system prompt as it
    stood, which Pi sends before the summary) holds, in characters, as the Pi adapter counts a
    system message: its text and its prompt's sections."""
    if not isinstance(message, Mapping):
        return 0
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(b["text"] for b in content if isinstance(b, Mapping) and isinstance(b.get("text"), str))
    sections = message.get("sections")
    texts = [v for v in sections.values() if isinstance(v, str)] if isinstance(sections, Mapping) else []
    return len(content if isinstance(content, str) else "") + sum(map(len, texts))


def _unusual(entries: list[dict[str, Any]]) -> list[str]:
    """Notes on the messages of ``entries`` that ``_pi_message`` read otherwise than as written:
    left out (a role Pi does not know), or read as empty (no content)."""
    roles: Counter[str] = Counter()
    empty = 0
    for e in entries:
        m = e.get("message") if e.get("type") == "message" else None
        if not isinstance(m, dict):
            continue
        role = "custom" if m.get("role") == "hookMessage" else m.get("role")
        if not isinstance(role, str) or role not in AGENT_MESSAGE_ROLES:
            roles[repr(role)[:40]] += 1
        elif m.get("content") is None and role in _CONTENT_ROLES:
            empty += 1
    notes = []
    if roles:
        said = ", ".join(f"{r} ({n})" for r, n in roles.items())
        notes.append(
            f"{sum(roles.values())} message(s) of a role Pi does not know left out, as Pi's convertToLlm leaves"
            f" them out of what the model is sent: {said}"
        )
    if empty:
        notes.append(f"{empty} message(s) without content (null or missing) read as empty")
    return notes


def read_pi(parsed: Parsed, **_: Any) -> list[Transcript]:
    """The session of a Pi session file (one)."""
    p = parsed.path
    rows = parsed.lines("Pi")
    if not rows:
        raise InputError(f"{p}: empty session file")
    header = rows[0][1] if rows[0][1].get("type") == "session" else {}
    body = rows[1:] if header else rows
    version = _int(header.get("version", 1) or 1, f"{p}:{rows[0][0]}", "the session version")
    if version >= 2 or any("id" in e and "parentId" in e for _, e in body):
        # a tree of entries is version 2 on (a file without its header line says no more)
        return parsed.stamp([_read_pi_tree(parsed, header, body, max(version, 2))])
    messages: list[dict[str, Any]] = []
    first_message_at: dict[int, int] = {}  # entry index → index of the first message at or after it
    pending: list[tuple[int, int, dict[str, Any]]] = []
    for k, (n, e) in enumerate(body):
        entry_index = k + (1 if header else 0)  # firstKeptEntryIndex counts the header line
        first_message_at[entry_index] = len(messages)
        m = _pi_message(e)
        if m is not None:
            messages.append(m)
        elif e.get("type") == "compaction":
            pending.append((n, len(messages), e))
    compactions = [
        Compaction(
            at,
            first_message_at.get(_int(e.get("firstKeptEntryIndex", 0), f"{p}:{n}", "firstKeptEntryIndex"), at),
            str(e.get("summary", "")),
            _tokens(e.get("tokensBefore")),
            _system_chars(e.get("systemMessage")),
        )
        for n, at, e in pending
    ]
    out = Transcript(
        f"pi-v{version}",
        "pi",
        "pi",
        messages,
        text_field(header.get("id")),
        text_field(header.get("cwd")),
        compactions,
        len(rows),
    )
    out.notes.extend(_unusual([e for _, e in body]))
    return parsed.stamp([out])


def _read_pi_tree(
    parsed: Parsed, header: dict[str, Any], body: list[tuple[int, dict[str, Any]]], version: int
) -> Transcript:
    p = parsed.path
    by_id: dict[str, dict[str, Any]] = {}
    for n, e in body:
        if not isinstance(e.get("id"), str):
            raise InputError(f"{p}:{n}: a version {version} entry needs an id")
        by_id[e["id"]] = e
    session_id, cwd = text_field(header.get("id")), text_field(header.get("cwd"))
    if not body:
        return Transcript(f"pi-v{version}", "pi", "pi", [], session_id, cwd, [], 1)
    line_of = {e["id"]: n for n, e in body}
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    notes: list[str] = []
    node: dict[str, Any] | None = body[-1][1]  # the leaf: the last entry appended
    while node is not None:
        if node["id"] in seen:
            raise InputError(f"{p}: the entries' parentId links form a cycle at {node['id']!r}")
        seen.add(node["id"])
        path.append(node)
        parent = node.get("parentId")
        node = by_id.get(parent) if isinstance(parent, str) else None
        if node is None and isinstance(parent, str):
            node = _over_lost_entry(parsed, body, line_of[path[-1]["id"]], seen, notes)
    path.reverse()
    edits = _context_edits(line_of, path, notes)
    messages: list[dict[str, Any]] = []
    message_of: dict[str, int] = {}
    pending: list[tuple[int, dict[str, Any]]] = []
    edited = left_out = 0
    for e in path:
        message_of[e["id"]] = len(messages)
        m = _pi_message(e)
        if m is not None and e["id"] in edits:
            m = _edited(m, edits[e["id"]])
            edited += 1
            left_out += m is None
        if m is not None:
            messages.append(m)
        elif e.get("type") == "compaction":
            pending.append((len(messages), e))
    compactions = [
        Compaction(
            at,
            message_of.get(str(e.get("firstKeptEntryId")), at),
            str(e.get("summary", "")),
            _tokens(e.get("tokensBefore")),
            _system_chars(e.get("systemMessage")),
        )
        for at, e in pending
    ]
    out = Transcript(f"pi-v{version}", "pi", "pi", messages, session_id, cwd, compactions, len(body) + 1)
    out.inherited = _inherited(header, path)
    if out.inherited:
        out.info.append(
            f"forked from {header['parentSession']}: its first {out.inherited} messages are that session's, "
            "whose model calls are replayed with it, not here"
        )
    out.notes = notes + _unusual(path)
    if edited:
        out.info.append(
            f"{edited} message(s) edited by Pi's context edits ({left_out} left out), as Pi rebuilds the"
            " session: every call is replayed with them as edited"
        )
    return out


_EDITABLE = ("user", "assistant", "toolResult", "custom")
"""The roles whose content a context edit replaces (Pi's ``projectContextEntry``)."""


def _context_edits(
    line_of: Mapping[str, int], path: list[dict[str, Any]], notes: list[str]
) -> dict[str, dict[str, Any] | None]:
    """The newest ``context_edit`` replacement of each entry on the branch it names (None: left
    out). An edit whose replacement Pi would have refused to write (no ``content`` string or list)
    is not applied, and said."""
    edits: dict[str, dict[str, Any] | None] = {}
    bad: list[int] = []
    for e in path:
        if e.get("type") != "context_edit" or not isinstance(e.get("targetId"), str):
            continue
        replacement = e.get("replacement")
        if replacement is not None and not (
            isinstance(replacement, dict) and isinstance(replacement.get("content"), str | list)
        ):
            bad.append(line_of[e["id"]])
            continue
        edits[e["targetId"]] = replacement
    if bad:
        notes.append(
            f"{len(bad)} context edit(s) without a replacement Pi reads (null, or a content string or list) not"
            f" applied: line {line_numbers(bad)}"
        )
    return edits


def _edited(m: dict[str, Any], replacement: dict[str, Any] | None) -> dict[str, Any] | None:
    """A message as a context edit leaves it (None: left out)."""
    if replacement is None:
        return None
    if m.get("role") not in _EDITABLE:
        return m
    content = replacement["content"]
    if m["role"] in ("assistant", "toolResult") and isinstance(content, str):
        content = [{"type": "text", "text": content}]
    return {**m, "content": content}


def _inherited(header: Mapping[str, Any], path: list[dict[str, Any]]) -> int:
    """How many of the branch's first messages a fork or clone copied from its parent session
    (``parentSession`` in its header): Pi copies the parent's entries, as they were written
    before the fork's header, into the new file."""
    if not isinstance(header.get("parentSession"), str):
        return 0
    forked_at = iso_ms(header.get("timestamp"))
    copied = 0
    for e in path:
        if not 0 < iso_ms(e.get("timestamp")) < forked_at:
            break
        copied += 1
    return sum(1 for e in path[:copied] if _pi_message(e) is not None)


def _over_lost_entry(
    parsed: Parsed, body: list[tuple[int, dict[str, Any]]], line: int, seen: set[str], notes: list[str]
) -> dict[str, Any] | None:
    """The entry to go on from when the entry on ``line`` names a parent that is not in the file
    because its line was skipped (not JSON: a crash, a redaction that broke an escape): the entry
    appended before that line, the lost one's parent in a session that went on from it (Pi
    appends each entry to the branch it is on). None when no skipped line comes before.

    Pi's own loader stops the branch there on resume; the replay goes on, so that what the model
    was sent before the lost entry is replayed too, and says so (``notes``)."""
    lost = max((k for k in parsed.skipped if k < line), default=None)
    if lost is None:
        return None
    before = [(n, e) for n, e in body if n < lost and e["id"] not in seen]
    if not before:
        return None
    n, entry = before[-1]
    notes.append(
        f"line {lost} is not JSON: the entry on line {line} names its lost entry as parent; the branch goes on "
        f"from the entry on line {n}, as the session was recorded (Pi's own loader stops the branch there)"
    )
    return entry
