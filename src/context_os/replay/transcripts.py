"""Session files a replay reads, each read the way its own tool reads it: Pi session JSONL
(format versions 1, 2 and 3), Claude Code session JSONL (with its sub-agents' sidechains), Codex
CLI rollout JSONL, Gemini CLI session files (legacy JSON and JSON lines, with its sub-agents),
SWE-agent trajectories (1.x function calling and 0.x actions parsed from text), OpenHands event
streams (a saved event list, or an evaluation's ``output.jsonl`` of records), Cline's task
history (Anthropic messages whose tool results Cline wrote as text), OpenCode sessions (as
``opencode export`` writes them, its database with every session, or the events ``opencode run
--format json`` prints), a JSON list of OpenAI chat-completions or Anthropic messages, and a
JSON list of LangChain messages as ``messages_to_dict`` writes them (``FileChatMessageHistory``'s
file, an agent's state saved so; read with langchain-core), and the SQLite file an OpenAI Agents
SDK ``SQLiteSession`` keeps (every session in it).

``read_sessions(path)`` detects the format (``format=`` forces one) and returns every session the
file holds as a ``Transcript``: the main session first, then Claude Code's sidechains or Gemini
CLI's sub-agents (each with its agent id as ``label``), or one per OpenHands record (its instance
id as ``label``). ``read_session(path)`` is the first of them. A transcript holds the messages of
the session's current branch, uncompacted, in the harness format its adapter reads (Pi
``AgentMessage`` dicts for Pi and Claude Code, OpenAI message dicts for the others), plus the
compactions Pi recorded, so that a replay can also tell what Pi itself sent, and the lines of the
file skipped as not JSON.

The file is read once and parsed once (formats/common.py): as a JSON document or as JSON lines.
The format is detected from the parsed file, cheaply: a document by its shape, JSON lines by the
first line that tells (Pi's ``session`` header or entry types; Claude Code's ``uuid``,
``sessionId``, ``file-history-snapshot``...; Codex's ``session_meta``/``response_item`` lines
with a ``payload``, or the bare response items of its first files; Gemini CLI's metadata line
(``sessionId`` and ``projectHash``), ``$set`` or ``$rewindTo`` records; an OpenHands record's
``history``), so a file that starts with lines that tell nothing is still recognised. One per
format module: formats/pi.py, formats/claude_code.py, formats/codex.py, formats/gemini_cli.py,
formats/swe_agent.py, formats/mini_swe_agent.py, formats/openhands.py, formats/cline.py,
formats/opencode.py. A JSON
list of Anthropic messages is Cline's when a user message answers a ``tool_use`` of the message
before it in Cline's words (``[read_file for 'a.ts'] Result:``).

Only a regular file is read, up to ``MAX_SESSION_BYTES``; every refusal is a typed error
(``FileUnreadable``, ``InputError``) that names the file.

This module reads files; it never touches a store or a session.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InputError, MalformedMessage
from ..harness.toolnames import preset_for
from .formats.adk import is_adk_db, read_adk_db
from .formats.claude_code import CLAUDE_CODE_TYPES, read_claude_code
from .formats.cline import is_cline, read_cline
from .formats.codex import CODEX_ITEM_TYPES, CODEX_LINE_TYPES, read_codex
from .formats.common import (
    KNOWN_KINDS,
    MAX_SESSION_BYTES,
    Compaction,
    Parsed,
    Reader,
    Transcript,
    load,
    parse,
    read_text,
    shape,
)
from .formats.gemini_cli import is_gemini_line, is_gemini_record, read_gemini_cli
from .formats.mini_swe_agent import is_mini_swe_agent, read_mini_swe_agent
from .formats.openai_agents import AGENTS_TABLES, read_agents_db
from .formats.opencode import is_opencode_db, is_opencode_event, is_opencode_export, read_opencode, read_opencode_db
from .formats.openhands import is_v1_event, read_openhands
from .formats.pi import PI_ENTRY_TYPES, read_pi
from .formats.swe_agent import read_swe_agent

__all__ = [
    "FORMATS",
    "MAX_SESSION_BYTES",
    "Compaction",
    "Transcript",
    "demo_messages",
    "demo_transcript",
    "detect_format",
    "read_session",
    "read_sessions",
]

FORMATS = (
    "pi",
    "claude-code",
    "codex",
    "gemini-cli",
    "swe-agent",
    "mini-swe-agent",
    "openhands",
    "openai",
    "anthropic",
    "cline",
    "opencode",
    "langchain",
    "openai-agents",
    "adk",
)

_ANTHROPIC_BLOCKS = ("tool_use", "tool_result", "thinking", "redacted_thinking")
"""Content blocks only the Anthropic Messages API has: a list of messages holding one is that API's."""


def _is_anthropic(messages: list[Any]) -> bool:
    """Whether a JSON list of messages is the Anthropic Messages API's (a dump of its ``messages``,
    as Cline and Roo Code keep their ``api_conversation_history.json``), not chat completions'."""
    if any(isinstance(m, Mapping) and (m.get("role") == "tool" or "tool_calls" in m) for m in messages):
        return False
    return any(
        isinstance(b, Mapping) and b.get("type") in _ANTHROPIC_BLOCKS
        for m in messages
        if isinstance(m, Mapping) and isinstance(m.get("content"), list)
        for b in m["content"]
    )


def _read_anthropic(parsed: Parsed, **_: Any) -> list[Transcript]:
    data = parsed.document if parsed.is_document else None
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        what = shape(data) if parsed.is_document else f"JSON lines ({len(parsed.rows)} objects)"
        raise InputError(f"{parsed.path}: {what}: expected a JSON list of Anthropic Messages API messages")
    names = {
        b["name"]
        for m in data
        for b in (m.get("content") if isinstance(m.get("content"), list) else ())
        if isinstance(b, Mapping) and b.get("type") == "tool_use" and isinstance(b.get("name"), str)
    }
    tools = preset_for(names) or "canonical"
    return parsed.stamp([Transcript("anthropic", "anthropic", tools, data, entries=len(data))])


_LANGCHAIN_TYPES = frozenset(
    ("system", "human", "ai", "tool", "chat", "function")
    + tuple(f"{k}MessageChunk" for k in ("AI", "Human", "System", "Tool", "Chat", "Function"))
)
"""The ``type`` of each LangChain message ``messages_to_dict`` writes (its ``data`` beside it)."""


def _is_langchain(doc: list[Any]) -> bool:
    """Whether a JSON list is LangChain messages as ``messages_to_dict`` writes them."""
    return bool(doc) and all(
        isinstance(e, Mapping) and e.get("type") in _LANGCHAIN_TYPES and isinstance(e.get("data"), Mapping) for e in doc
    )


def _read_langchain(parsed: Parsed, **_: Any) -> list[Transcript]:
    from ..harness.registry import harness  # (langchain-core is needed from here on, and imported here)

    data = parsed.document if parsed.is_document else None
    if not isinstance(data, list):
        what = shape(data) if parsed.is_document else f"JSON lines ({len(parsed.rows)} objects)"
        raise InputError(f"{parsed.path}: {what}: expected a JSON list of LangChain messages (messages_to_dict)")
    try:
        messages = harness("langchain").decode(data)
    except MalformedMessage as e:
        raise InputError(f"{parsed.path}: {e}") from None
    calls = [c for m in messages for c in getattr(m, "tool_calls", None) or ()]
    names = {c["name"] for c in calls if isinstance(c.get("name"), str)}
    tools = preset_for(names) or "canonical"
    return parsed.stamp([Transcript("langchain", "langchain", tools, messages, entries=len(data))])


def _completion_log(doc: Any) -> bool:
    """Whether a JSON document is one logged model call: its ``messages`` and the ``response``
    (OpenHands' ``llm_completions``, LiteLLM's logs)."""
    response = doc.get("response") if isinstance(doc, Mapping) else None
    return isinstance(doc, Mapping) and isinstance(doc.get("messages"), list) and isinstance(response, Mapping)


def _logged_call(doc: Mapping[str, Any]) -> list[Any]:
    """A logged model call's messages, its reply last (the session up to that call and its answer)."""
    choices = doc["response"].get("choices")
    reply = (
        choices[0].get("message") if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else None
    )
    if not isinstance(reply, Mapping):
        return list(doc["messages"])
    kept = {k: v for k, v in reply.items() if k in ("role", "content", "tool_calls") and v is not None}
    return [*doc["messages"], {"role": "assistant", **kept}]


def _read_openai(parsed: Parsed, **_: Any) -> list[Transcript]:
    data = parsed.document if parsed.is_document else None
    one = parsed.rows[0][1] if not parsed.is_document and len(parsed.rows) == 1 else data
    if isinstance(one, Mapping) and _completion_log(one):
        data = _logged_call(one)
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        what = shape(data) if parsed.is_document else f"JSON lines ({len(parsed.rows)} objects)"
        raise InputError(f"{parsed.path}: {what}: expected a JSON list of message objects")
    names = {
        c["function"]["name"]
        for m in data
        for c in (m.get("tool_calls") if isinstance(m.get("tool_calls"), list) else ())
        if isinstance(c, Mapping)
        and isinstance(c.get("function"), Mapping)
        and isinstance(c["function"].get("name"), str)
    }  # the harness whose tools these are (str_replace_editor, execute_bash: OpenHands); else context_os's names
    tools = preset_for(names) or "canonical"
    return parsed.stamp([Transcript("openai", "openai", tools, data, entries=len(data))])


_READERS: Mapping[str, Reader] = {
    "pi": read_pi,
    "claude-code": read_claude_code,
    "codex": read_codex,
    "gemini-cli": read_gemini_cli,
    "swe-agent": read_swe_agent,
    "mini-swe-agent": read_mini_swe_agent,
    "openhands": read_openhands,
    "openai": _read_openai,
    "anthropic": _read_anthropic,
    "cline": read_cline,
    "opencode": read_opencode,
    "langchain": _read_langchain,
}


def _line_format(e: Mapping[str, Any]) -> str | None:
    """The format one JSON line tells, if it tells one."""
    kind = e.get("type")
    if is_gemini_line(e):  # before Claude Code: Gemini CLI's metadata line has a sessionId too
        return "gemini-cli"
    if kind == "session":
        return "pi"
    if is_opencode_event(e):  # before Claude Code's: its "text" lines
        return "opencode"
    if kind in CODEX_LINE_TYPES and isinstance(e.get("payload"), Mapping):
        return "codex"
    if kind in CODEX_ITEM_TYPES and "message" not in e and (kind != "message" or _bare_message(e)):
        return "codex"  # a bare response item (Codex's first rollout files)
    if isinstance(e.get("history"), list) or is_v1_event(e):
        return "openhands"
    if is_mini_swe_agent(e):  # written on one line
        return "mini-swe-agent"
    if _completion_log(e):
        return "openai"
    if kind in CLAUDE_CODE_TYPES or any(k in e for k in ("uuid", "parentUuid", "sessionId", "leafUuid")):
        return "claude-code"
    if kind in PI_ENTRY_TYPES and (kind != "message" or isinstance(e.get("message"), Mapping)):
        return "pi"
    if kind in ("user", "assistant") and isinstance(e.get("message"), dict):
        return "claude-code"
    return None


def _qwen_code(e: Mapping[str, Any]) -> bool:
    """A line of a Qwen Code session (``~/.qwen/projects/…/chats/*.jsonl``): Claude Code's envelope
    (``uuid``, ``parentUuid``, ``sessionId``) around a Gemini API message (``role``, ``parts``).
    Read as Claude Code's, it replayed calls of nothing."""
    message = e.get("message")
    return "uuid" in e and isinstance(message, Mapping) and isinstance(message.get("parts"), list)


def _bare_message(e: Mapping[str, Any]) -> bool:
    """A Responses API ``message`` item: a role and a list of content parts (other exports write
    ``{"type": "message", "role", "text"}`` lines of their own)."""
    content = e.get("content")
    return "role" in e and isinstance(content, list) and all(isinstance(p, Mapping) and "type" in p for p in content)


def _is_event(value: Any) -> bool:
    """An OpenHands event (V1's too), or (OpenDevin, mid 2024) an [action, observation] pair of them."""
    if is_v1_event(value):
        return True
    if isinstance(value, list):
        return any(_is_event(e) for e in value if not isinstance(e, list))
    return isinstance(value, Mapping) and ("action" in value or "observation" in value) and "role" not in value


def _detect(parsed: Parsed) -> str:
    doc = parsed.document
    if parsed.is_document:
        if isinstance(doc, list):
            if doc and any(_is_event(e) for e in doc):
                return "openhands"
            if _is_anthropic(doc):
                return "cline" if is_cline(doc) else "anthropic"
            if _is_langchain(doc):
                return "langchain"
            if doc and all(isinstance(e, Mapping) for e in doc) and not any("role" in e for e in doc):
                raise InputError(f"{parsed.path}: {shape(doc)}: {_not_a_session(doc)}")
            return "openai"
        if isinstance(doc, dict):
            if is_gemini_record(doc):
                return "gemini-cli"
            if is_opencode_export(doc):
                return "opencode"
            history = doc.get("history")
            if isinstance(history, list) and any(_is_event(e) for e in history):
                return "openhands"
            if isinstance(history, list) or isinstance(doc.get("trajectory"), list):
                return "swe-agent"
            if is_mini_swe_agent(doc):
                return "mini-swe-agent"
            if _completion_log(doc):
                return "openai"
            if isinstance(doc.get("events"), list) and any(map(is_v1_event, doc["events"])):
                return "openhands"  # a V1 conversation directory
        raise InputError(f"{parsed.path}: {shape(doc)}: {_not_a_session(doc)}")
    for n, e in parsed.rows:
        if _qwen_code(e):
            raise InputError(
                f"{parsed.path}:{n}: a Qwen Code session (its messages Gemini API parts, not Claude Code's "
                "content): not a format ctxos replay reads yet"
            )
        fmt = _line_format(e)
        if fmt is not None:
            return fmt
    n, first = parsed.rows[0]
    what = shape(first) if len(parsed.rows) == 1 else f"{len(parsed.rows)} JSON lines, line {n} {shape(first)}"
    if any(e.get("type") in _CODEX_EXEC_EVENTS for _, e in parsed.rows):
        raise InputError(
            f"{parsed.path}: {what}: the events `codex exec --json` prints, which leave out what the model "
            "was sent: replay the rollout Codex wrote of the same run (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl)"
        )
    raise InputError(f"{parsed.path}: {what}: {_not_a_session(first if len(parsed.rows) == 1 else None)}")


def _not_a_session(doc: Any) -> str:
    """Why a JSON value is no session, for an error: where the session is, for a file its harness
    keeps beside it (Cline's ``ui_messages.json``, what its window shows: ``say``/``ask``
    messages, and ``task_metadata.json`` are in the task's directory with the history it sends,
    ``api_conversation_history.json``); else the kinds of files this reads."""
    if isinstance(doc, list) and doc and all(isinstance(e, Mapping) and e.get("type") in ("say", "ask") for e in doc):
        what = "Cline's ui_messages.json (what its window shows, not what the model was sent)"
    elif isinstance(doc, Mapping) and {"files_in_context", "model_usage"} <= doc.keys():
        what = "Cline's task_metadata.json"
    else:
        return f"not a session this reads ({KNOWN_KINDS})"
    return f"{what}, not the session: replay api_conversation_history.json beside it"


_CODEX_EXEC_EVENTS = ("thread.started", "turn.started", "turn.completed", "item.started", "item.completed")
"""The events of ``codex exec --json``'s output."""


def detect_format(path: str | Path, *, max_bytes: int = MAX_SESSION_BYTES) -> str:
    """One of ``FORMATS`` (``pi``, ``claude-code``, ``codex``, ``gemini-cli``, ``swe-agent``,
    ``mini-swe-agent``, ``openhands``, ``openai``, ``anthropic``, ``cline``, ``opencode``,
    ``langchain``, ``openai-agents``, ``adk``), from the file's content."""
    p = Path(path)
    return _sqlite_format(p) or _detect(load(p, max_bytes))


def _sqlite_format(path: Path) -> str | None:
    """The format of an SQLite file: an Agents SDK session file or ADK's (told by their tables),
    else OpenCode's database (whose reader says what it lacks); None for a file that is no SQLite
    database."""
    if not is_opencode_db(path):  # (a regular file that begins as SQLite databases do)
        return None
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            adk = is_adk_db(conn, tables)
    except sqlite3.Error:
        return "opencode"
    return "openai-agents" if tables >= AGENTS_TABLES else "adk" if adk else "opencode"


_SQLITE_READERS = {"openai-agents": read_agents_db, "adk": read_adk_db}
"""The readers of the SQLite files of a format of their own (OpenCode's reads its own way)."""
_SQLITE_WHOSE = {"openai-agents": "an Agents SDK session file", "adk": "ADK's session file", "opencode": "OpenCode's?"}


def _read_sqlite(path: Path, format: str, max_bytes: int, only: str | None) -> list[Transcript]:
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise InputError(f"{path}: an SQLite file that cannot be opened: {e}") from None
    with closing(conn):
        return _SQLITE_READERS[format](path, conn, max_bytes=max_bytes, only=only)


def read_sessions(
    path: str | Path,
    format: str | None = None,
    *,
    max_bytes: int = MAX_SESSION_BYTES,
    sidechains: bool = True,
    only: str | None = None,
) -> list[Transcript]:
    """Every session a file holds (format detected unless given, one of ``FORMATS``): the main
    session first, then (``sidechains``) Claude Code's sub-agents, including those in
    ``<session>/subagents/`` beside the file, and Gemini CLI's in ``<sessionId>/`` beside it; one
    per OpenHands ``output.jsonl`` record; each session of an OpenCode database, its sub-agents
    after it. ``only``: the one whose label or session id it is (of an OpenCode database, with its
    sub-agents); ``InputError`` if there is none.

    ``FileUnreadable`` if it is missing or not a regular file, ``InputError`` if it (or a
    sub-agent's file) is larger than ``max_bytes`` or not a session in that format.
    """
    p = Path(path)
    if format is not None and format not in FORMATS:
        raise InputError(f"unknown format {format!r} (known: {', '.join(FORMATS)})")
    sqlite_format = _sqlite_format(p)
    if sqlite_format is not None:
        if format not in (None, sqlite_format):
            raise InputError(f"{p}: an SQLite database ({_SQLITE_WHOSE[sqlite_format]}), not a {format} session file")
        if sqlite_format in _SQLITE_READERS:
            return _read_sqlite(p, sqlite_format, max_bytes, only)
        return read_opencode_db(p, sidechains=sidechains, max_bytes=max_bytes, only=only)
    read = _read(p, format, max_bytes, sidechains)
    if only is None:
        return read
    kept = [t for t in read if only in (t.label, t.session_id)]
    if not kept:
        named = [str(t.label or t.session_id) for t in read]
        more = f", … ({len(named)} in all)" if len(named) > SHOWN_SESSIONS else ""
        raise InputError(f"{p}: no session {only!r} in this file (it holds {', '.join(named[:SHOWN_SESSIONS])}{more})")
    return kept


SHOWN_SESSIONS = 10
"""How many of a file's sessions an error names."""


def _read(p: Path, format: str | None, max_bytes: int, sidechains: bool) -> list[Transcript]:
    conversation = _conversation_dir(p, max_bytes)
    parsed = parse(p, conversation) if conversation is not None else load(p, max_bytes)
    if format in _LISTS:  # a JSON list of messages reads as either API's: which one is it?
        try:
            found: str | None = _detect(parsed)
        except InputError:
            found = None
        if found in _LISTS and _LISTS[format] != _LISTS[found]:
            raise InputError(f"{p}: a list of {_LISTS[found]} messages, not {_LISTS[format]}'s: it reads as {found}")
    if format is None:
        return _READERS[_detect(parsed)](parsed, sidechains=sidechains, max_bytes=max_bytes)
    # the format asked for may not be the file's: a refusal, or no message, says which it reads as
    try:
        read = _READERS[format](parsed, sidechains=sidechains, max_bytes=max_bytes)
    except InputError as e:
        raise InputError(f"{e}{_reads_as(parsed, format)}") from None
    if not any(t.messages for t in read):
        raise InputError(f"{p}: read as {format}, it holds no messages{_reads_as(parsed, format)}")
    return read


def _reads_as(parsed: Any, format: str) -> str:
    """`` (it reads as X)`` when the file's own format, detected, is another than ``format``."""
    try:
        detected: str | None = _detect(parsed)
    except InputError:
        detected = None
    return f" (it reads as {detected})" if detected not in (None, format) else ""


_LISTS = {"openai": "OpenAI", "anthropic": "Anthropic", "cline": "Anthropic"}
"""The formats of a JSON list of messages, by whose API's messages they are (Cline's are
Anthropic's): read as the other API's, such a list reads as nonsense rather than nothing."""


def _conversation_dir(path: Path, max_bytes: int) -> str | None:
    """An OpenHands V1 conversation directory (``base_state.json``, ``events/event-*.json``, or
    the ``events`` directory itself) as one JSON document, ``{"state", "events"}``, its files read
    with the checks of any session file and their bytes held to ``max_bytes`` together; None for
    anything else (a directory that is not one is refused as a file would be). A link to one is
    followed, as a link to a session file is."""
    if not path.is_dir():
        return None
    events = path / "events" if (path / "events").is_dir() else path
    files = sorted(events.glob("event-*.json"))
    if not files:
        return None
    budget = max_bytes
    state = path / "base_state.json"
    parsed: list[Any] = []
    for f in [state, *files] if state.is_file() else files:
        if budget <= 0:
            raise InputError(f"{path}: its events are larger than {max_bytes:,} bytes, the limit for a session")
        text = read_text(f, budget)
        budget -= len(text.encode("utf-8", "surrogatepass"))
        try:
            parsed.append(json.loads(text))
        except (ValueError, RecursionError) as e:
            raise InputError(f"{f}: not JSON ({e})") from None
    doc = {"state": parsed.pop(0) if state.is_file() else {}, "events": parsed}
    return json.dumps(doc, indent=1)  # a document (one line would read as JSON lines)


def read_session(path: str | Path, format: str | None = None, *, max_bytes: int = MAX_SESSION_BYTES) -> Transcript:
    """The file's first session (``read_sessions``): its main session, its first record."""
    return read_sessions(path, format, max_bytes=max_bytes, sidechains=False)[0]


def demo_messages() -> list[dict[str, Any]]:
    """The bundled session (``ctxos demo``): OpenAI-format messages of a real coding-agent session."""
    data = resources.files("context_os.data").joinpath("demo_session.json").read_text("utf-8")
    messages: list[dict[str, Any]] = json.loads(data)
    return messages


def demo_transcript() -> Transcript:
    """The bundled session as a replayable transcript (its tools are Pi's read/edit/write/bash)."""
    messages = demo_messages()
    return Transcript("openai", "openai", "pi", messages, cwd="/workspace/pi-mono", entries=len(messages))
