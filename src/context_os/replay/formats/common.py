"""What every session file reader shares: the ``Transcript`` it makes, reading a file safely, and
parsing it once into a JSON document or JSON lines.

A session file is read whole, so only a regular file is read (a FIFO or a device such as
``/dev/zero`` is refused before anything is read, and opening never blocks), and only up to
``MAX_SESSION_BYTES`` (1 GiB; ``max_bytes=`` raises it). A gzip-compressed file (known by its
first bytes, whatever its name) is read as the text it holds, the limit applying to that text.

A file is a **JSON document** (one value: a SWE-agent trajectory, an OpenHands event list, an
OpenAI message list) or **JSON lines** (Pi, Claude Code, OpenHands ``output.jsonl``). It is
parsed once: the first line tells which, unless it is not JSON by itself, when the whole text is
tried as one document (a pretty-printed one). In JSON lines a line that is not JSON (two objects
on one line, a line cut short by a crash) is skipped and counted, as Pi's and Claude Code's own
loaders skip it; a line that is JSON but not an object is an error. Bytes that are not UTF-8 are
read as Node reads them (Pi, Claude Code, Gemini CLI and Cline read their files so), each bad
sequence as U+FFFD: a last line a crash cut inside a character is a line cut short like any
other, and a line that kept such bytes is said in a note.

This module reads files; it never touches a store or a session.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shlex
import stat
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ...errors import FileUnreadable, InputError
from ...harness.pi import COMPACTION_SUMMARY_PREFIX, COMPACTION_SUMMARY_SUFFIX
from ...harness.toolnames import preset_for
from ...tokens import estimate_tokens

__all__ = [
    "KNOWN_KINDS",
    "MAX_SESSION_BYTES",
    "SKIPPED_SHOWN",
    "Compaction",
    "JsonRows",
    "Parsed",
    "Reader",
    "Transcript",
    "chat_session",
    "iso_ms",
    "line_numbers",
    "load",
    "openai_calls",
    "pair_openai",
    "parse",
    "read_text",
    "shape",
    "text_field",
    "uploaded_dir",
]

MAX_SESSION_BYTES = 1 << 30
"""The largest session file read by default: 1 GiB (``read_session(..., max_bytes=)``,
``ctxos replay --max-file-mb``)."""

SKIPPED_SHOWN = 10
"""How many skipped line numbers a transcript names (it counts them all)."""


def line_numbers(lines: Sequence[int]) -> str:
    """The first ``SKIPPED_SHOWN`` of ``lines`` for a note (``3, 5, ...``)."""
    more = ", ..." if len(lines) > SKIPPED_SHOWN else ""
    return ", ".join(map(str, lines[:SKIPPED_SHOWN])) + more


KNOWN_KINDS = (
    "Pi, Claude Code, Codex CLI, Gemini CLI, SWE-agent, mini-swe-agent, OpenHands, Cline, OpenCode, "
    "OpenAI, Anthropic or LangChain messages"
)

# What a path is when it is not a regular file, for the error that refuses it.
_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_CHUNK = 1 << 24


@dataclass
class Compaction:
    """A compaction Pi recorded: from message ``at`` on, Pi sent the summary and the messages from
    ``first_kept`` on instead of everything before."""

    at: int
    """Index (in ``Transcript.messages``) of the first message after the compaction entry."""
    first_kept: int
    """Index of the first message Pi kept."""
    summary: str
    tokens_before: int | None = None
    system_chars: int = 0
    """The system message Pi (1.5) sends before the summary, in characters: the session's system
    prompt as it stood when it compacted (``systemMessage``); 0 when it recorded none."""


class JsonRows:
    """A database's rows of JSON text (an SQLite session file's items or events), read against one
    byte budget for the whole file, the limit of a session file (``--max-file-mb``)."""

    def __init__(self, path: Path, max_bytes: int):
        self.path = path
        self.left = max_bytes

    def read(self, rows: Iterable[tuple[str]], where: str) -> list[Any]:
        """Each row's JSON; ``where`` names one for an error, its number after it
        (``session 's1', event``)."""
        out: list[Any] = []
        for n, (text,) in enumerate(rows):
            self.left -= len(text)
            if self.left < 0:
                raise InputError(f"{self.path}: its sessions are larger than the limit for a session (--max-file-mb)")
            try:
                out.append(json.loads(text))
            except ValueError as e:
                raise InputError(f"{self.path}: {where} {n}: not JSON ({e})") from None
        return out


@dataclass
class Transcript:
    """One recorded session, ready to replay."""

    format: str
    """``pi-v1``, ``pi-v2``, ``pi-v3``, ``claude-code``, ``codex``, ``gemini-cli``, ``swe-agent``,
    ``swe-agent-text``, ``mini-swe-agent``, ``openhands``, ``cline``, ``opencode``, ``openai``,
    ``anthropic``, ``langchain``, ``openai-agents`` or ``adk``."""
    harness: str
    """The adapter its messages are for: ``pi``, ``openai``, ``anthropic`` or ``langchain``."""
    tool_names: str
    """The tool-name preset of its tools (``pi``, ``claude-code``, ``codex``, ``swe-agent``,
    ``openhands``, ``gemini-cli``, ``cline``, ``opencode``, ``canonical``)."""
    messages: list[Any]
    """Dicts for every harness but LangChain, whose messages are langchain-core's objects."""
    session_id: str | None = None
    cwd: str | None = None
    compactions: list[Compaction] = field(default_factory=list)
    entries: int = 0
    """Entries read from the file (lines, trajectory messages, events)."""
    label: str | None = None
    """What tells this session apart from the file's main one: a Claude Code sub-agent's id
    (``a93ccab``, ``acompact-70d8e7``), an OpenHands record's instance id; None for the main
    session. ``ctxos replay`` records it as ``<session>~<label>``."""
    source: str | None = None
    """The file it was read from."""
    skipped_lines: int = 0
    """Lines of that file skipped because they were not JSON (a crash cut one short)."""
    skipped_line_numbers: list[int] = field(default_factory=list)
    """The first ``SKIPPED_SHOWN`` of them, 1-based."""
    notes: list[str] = field(default_factory=list)
    """What the reader did that its harness's own loader would not, to say with the replay as a
    warning (a Pi branch joined over an entry lost on a line that is not JSON)."""
    info: list[str] = field(default_factory=list)
    """What a user should know of how the file was read, no problem: said as a note (a Pi
    session forked from another, whose first messages are that session's)."""
    inherited: int = 0
    """Leading messages copied from the session this one was forked or cloned from (a Pi
    ``parentSession``), or from the demonstrations SWE-agent put in its history: the input of its
    calls, but their own model calls were that session's, or none."""

    def compacted_tokens(self, tokens: list[int], calls: list[int]) -> int | None:
        """What the harness itself sent over the calls at message indexes ``calls``, given each
        message's tokens, where it compacted (Pi): at each call, the latest compaction's system
        message and summary, and the messages kept from it on. None when the session recorded no
        compaction."""
        if not self.compactions:
            return None
        upto = [0]
        for t in tokens:
            upto.append(upto[-1] + t)
        total = 0
        for k in calls:
            done = [c for c in self.compactions if c.at <= k]
            if not done:
                total += upto[k]
                continue
            c = done[-1]
            summary = COMPACTION_SUMMARY_PREFIX + c.summary + COMPACTION_SUMMARY_SUFFIX
            total += estimate_tokens(c.system_chars) + estimate_tokens(len(summary)) + upto[k] - upto[c.first_kept]
        return total


def chat_session(
    format: str, path: Path, sid: str, messages: list[dict[str, Any]], entries: int, kept: Sequence[str]
) -> Transcript:
    """One session of an SQLite session file (an Agents SDK's, ADK's) read as chat messages for the
    OpenAI adapter, labelled with its id: the ``kept`` fields its translation keeps to give the
    harness's own items back (the proxy's) dropped, as a replay sends messages; its tools named."""
    for m in messages:
        for key in kept:
            m.pop(key, None)
    names = {c["function"]["name"] for m in messages for c in m.get("tool_calls") or () if "function" in c}
    t = Transcript(format, "openai", preset_for(names) or "canonical", messages, sid, entries=entries)
    t.label, t.source = sid, str(path)
    return t


def read_text(path: Path, max_bytes: int = MAX_SESSION_BYTES) -> str:
    """The whole file as text (``_read_bytes``), in UTF-8 (a byte order mark before it left out;
    a file that is not UTF-8 refused)."""
    data = _read_bytes(path, max_bytes)
    _refuse_wide(path, data)
    try:
        return _utf8(data)
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None


def load(path: Path, max_bytes: int = MAX_SESSION_BYTES) -> Parsed:
    """The session file at ``path`` (``_read_bytes``) parsed (``parse``), its bytes that are not
    UTF-8 read as Node's ``utf8`` decoding reads them, each bad sequence as U+FFFD (Pi, Claude
    Code, Gemini CLI and Cline read their files so): a last line a crash cut inside a character
    is a line cut short, skipped, as one cut after an ASCII byte is; the lines read that held
    such bytes are ``Parsed.mended``."""
    data = _read_bytes(path, max_bytes)
    _refuse_wide(path, data)
    try:
        return parse(path, _utf8(data))
    except UnicodeDecodeError:
        pass
    parsed = parse(path, _utf8(data, "replace"))
    skipped = set(parsed.skipped)
    # numbered as parse numbers the text's lines: "\n" is never part of a bad sequence
    lines = enumerate(bytes(data).split(b"\n"), 1)
    parsed.mended = [n for n, line in lines if n not in skipped and not _is_utf8(line)]
    return parsed


_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32LE"),
    (b"\x00\x00\xfe\xff", "UTF-32BE"),
    (b"\xff\xfe", "UTF-16LE"),
    (b"\xfe\xff", "UTF-16BE"),
)


def _refuse_wide(path: Path, data: bytes | bytearray) -> None:
    """``InputError`` for a file in UTF-16 or UTF-32 (PowerShell's ``>`` writes UTF-16): read as
    UTF-8 with its bad bytes replaced, every line was a line that is not JSON, and the replay
    said the file held no session. Told by its byte order mark, or, without one, by a first
    line whose every other byte is NUL (JSON starts with ASCII)."""
    head = bytes(data[:512])
    found = next((name for bom, name in _WIDE_BOMS if head.startswith(bom)), None)
    if found is None and len(head) >= 4:
        if head[1:8:2] == b"\0" * len(head[1:8:2]) and head[0:8:2].isascii() and b"\0" not in head[0:8:2]:
            found = "UTF-16LE"
        elif head[0:8:2] == b"\0" * len(head[0:8:2]) and b"\0" not in head[1:8:2]:
            found = "UTF-16BE"
    if found is not None:
        # with its byte order mark, iconv's UTF-16 reads the order from it and leaves it out
        source = found[:6] if any(head.startswith(bom) for bom, _ in _WIDE_BOMS) else found
        raise InputError(
            f"{path}: the file is {found} text, not UTF-8: convert it first, e.g."
            f" iconv -f {source} -t UTF-8 {shlex.quote(str(path))} > session.jsonl"
        )


def _utf8(data: bytes | bytearray, errors: str = "strict") -> str:
    # a byte order mark an editor put first is no part of the first line (it made Pi's header,
    # an OpenHands record, a Codex session_meta a line that is not JSON, skipped)
    return data.decode("utf-8", errors).removeprefix("\ufeff")


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _read_bytes(path: Path, max_bytes: int = MAX_SESSION_BYTES) -> bytes | bytearray:
    """The whole file: a regular file of at most ``max_bytes`` bytes (a gzip file's text).

    Opened without blocking (opening a FIFO that has no writer would wait forever), then checked
    on the open descriptor, so what is read is what was checked.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise FileUnreadable(f"cannot read {path}: {e.strerror or e}") from None
    too_large = (
        f"{path} is larger than {max_bytes:,} bytes, the limit for a session file"
        " (raise it with max_bytes=, or `ctxos replay --max-file-mb`)"
    )
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = next((name for test, name in _NOT_REGULAR if test(st.st_mode)), "not a regular file")
            also = (
                " (or an OpenHands V1 conversation directory: base_state.json and events/event-*.json)"
                if stat.S_ISDIR(st.st_mode)
                else ""
            )
            raise FileUnreadable(f"{path} is {what}: a session file must be a regular file{also}")
        if st.st_size > max_bytes:
            raise InputError(too_large)
        f = open(fd, "rb", buffering=0)  # noqa: SIM115 - closed by the with below
    except BaseException:
        os.close(fd)
        raise
    with f:
        data = bytearray()
        try:
            # at most max_bytes + 1, in chunks: the file may grow while it is read
            while len(data) <= max_bytes and (chunk := f.read(min(_CHUNK, max_bytes + 1 - len(data)))):
                data += chunk
        except OSError as e:
            raise FileUnreadable(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > max_bytes:
        raise InputError(too_large)
    return _gunzip(path, data, max_bytes, too_large) if data[:2] == _GZIP_MAGIC else data


_GZIP_MAGIC = b"\x1f\x8b"


def _gunzip(path: Path, data: bytearray, max_bytes: int, too_large: str) -> bytes:
    """The text a gzip file holds (every member, as ``gzip -d`` gives it), at most ``max_bytes``:
    a small file that inflates past the limit is refused as it inflates, not after."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            out = f.read(max_bytes + 1)  # inflates only as far as that
    except EOFError:
        raise InputError(f"{path}: a gzip file cut short") from None
    except (OSError, zlib.error) as e:
        raise InputError(f"{path}: not a readable gzip file ({e})") from None
    if len(out) > max_bytes:
        raise InputError(too_large)
    return out


class _Bad:
    """A line that is not JSON, and why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _value(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError as e:
        return _Bad(str(e))
    except RecursionError:
        return _Bad("nested too deeply to read")
    return _whole_characters(value) if _SURROGATE_ESCAPE.search(text) else value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A UTF-16 surrogate escaped in a JSON string (a pair of them is one character)."""
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _whole_characters(value: Any) -> Any:
    """``value`` with every UTF-16 surrogate left alone in its strings (an escape of half a pair:
    a JavaScript tool cut a string inside an emoji, and ``JSON.stringify`` wrote the half as
    ``\\ud83d``) as U+FFFD, which a text can hold: such a string was refused by the adapter
    (``not valid Unicode text``), and with it the whole session, though the harness read it."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_whole_characters(v) for v in value]
    if isinstance(value, dict):
        return {_whole_characters(k): _whole_characters(v) for k, v in value.items()}
    return value


_NO_DOCUMENT = object()


@dataclass
class Parsed:
    """A session file parsed once: a JSON document, or JSON lines (objects, by line number)."""

    path: Path
    document: Any = _NO_DOCUMENT
    rows: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    """JSON lines that were not JSON, skipped."""
    mended: list[int] = field(default_factory=list)
    """Lines read, not skipped, that held bytes that are not UTF-8 (read as U+FFFD)."""
    _said: bool = field(default=False, repr=False)

    @property
    def is_document(self) -> bool:
        return self.document is not _NO_DOCUMENT

    def lines(self, kind: str) -> list[tuple[int, dict[str, Any]]]:
        """The objects of a JSON-lines format (``kind`` names it in the error); a document that is
        one object counts as one line."""
        if not self.is_document:
            return self.rows
        if isinstance(self.document, dict):
            return [(1, self.document)]
        raise InputError(f"{self.path}: {shape(self.document)}: not a {kind} session (JSON lines)")

    def stamp(self, transcripts: list[Transcript]) -> list[Transcript]:
        """Name this file and its skipped lines on transcripts read from it, and its mended lines
        in a note on the first of them (once: not again for each sidechain or record)."""
        for t in transcripts:
            t.source = str(self.path)
            t.skipped_lines = len(self.skipped)
            t.skipped_line_numbers = self.skipped[:SKIPPED_SHOWN]
        if self.mended and transcripts and not self._said:
            self._said = True
            transcripts[0].notes.append(
                f"{len(self.mended)} line(s) held bytes that are not UTF-8 (line {line_numbers(self.mended)}): "
                "read as U+FFFD, as Node's utf8 decoding reads them"
            )
        return transcripts


Reader = Callable[..., list[Transcript]]
"""A format's reader: ``(parsed, *, sidechains, max_bytes) -> [Transcript, ...]``."""


def _document_shaped(value: dict[str, Any]) -> bool:
    """A one-line object that is a whole session (a trajectory, an OpenHands record), not a line."""
    return isinstance(value.get("history"), list) or isinstance(value.get("trajectory"), list)


def parse(path: Path, text: str) -> Parsed:
    """``text`` (the file at ``path``) as a JSON document or JSON lines, each line parsed once."""
    numbered = [(n, line) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
    # "\n" only: str.splitlines() would also split inside JSON strings at U+2028, U+0085..., which
    # JSON writers (JavaScript's JSON.stringify among them) leave unescaped
    if not numbered:
        raise InputError(f"{path}: empty session file")
    n0, line0 = numbered[0]
    first = _value(line0)
    if isinstance(first, _Bad):
        head = line0.lstrip()[:1]
        if head in ("[", "{"):  # maybe one document over several lines
            whole = _value(text)
            if not isinstance(whole, _Bad):
                return Parsed(path, document=whole)
            if head == "[" or line0.strip() == "{":  # a line of "{" alone begins a document, no JSON line
                raise InputError(f"{path}: not JSON ({whole.reason}){_cut_by_a_pipe(text)}")
    elif len(numbered) == 1 and (not isinstance(first, dict) or _document_shaped(first)):
        return Parsed(path, document=first)
    parsed = Parsed(path)
    for n, line in numbered:
        value = first if n == n0 else _value(line)
        if isinstance(value, _Bad):
            parsed.skipped.append(n)
            continue
        if not isinstance(value, dict):
            raise InputError(f"{path}:{n}: expected a JSON object per line, got {json_type(value)}")
        parsed.rows.append((n, value))
    if not parsed.rows:
        why = first.reason if isinstance(first, _Bad) else ""
        raise InputError(f"{path}: not JSON, neither a JSON document nor JSON lines (line {n0}: {why})")
    return parsed


def _cut_by_a_pipe(text: str) -> str:
    """What to say of a document that ends after exactly 64 KiB: ``opencode export`` (1.18) stops
    writing there when its output goes through a pipe."""
    if len(text.encode("utf-8", "surrogatepass")) != 1 << 16:
        return ""
    return (
        ": it ends after exactly 64 KiB, where a program that exits before its output drained stops "
        "writing to a pipe (`opencode export` does): write it to a file (`opencode export ID > session.json`)"
    )


def json_type(value: Any) -> str:
    """A JSON value's type as JSON names it, for an error: ``object``, ``list``, ``string``,
    ``number``, ``boolean``, ``null`` (not Python's ``dict``, ``str``, ``NoneType``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "list"
    return "object" if isinstance(value, Mapping) else type(value).__name__


def shape(value: Any) -> str:
    """What a JSON value is, for an error: ``one JSON object with keys [...]``, ``a JSON list of
    3 items``..."""
    if isinstance(value, dict):
        keys = sorted(str(k) for k in value)
        listed = ", ".join(repr(k) for k in keys[:12]) + (", ..." if len(keys) > 12 else "")
        return f"one JSON object with keys [{listed}]"
    if isinstance(value, list):
        kinds = sorted({json_type(v) for v in value})
        return f"a JSON list of {len(value)} items ({', '.join(kinds) or 'empty'})"
    return f"one JSON {json_type(value)}"


def text_field(value: Any) -> str | None:
    """A text field of the file, or None if it is missing or not text."""
    return value if isinstance(value, str) else None


def iso_ms(value: Any) -> int:
    """An ISO 8601 time of the file as epoch ms (0 if it is none)."""
    if isinstance(value, str):
        try:
            return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        except (ValueError, OverflowError, OSError):  # not a time, or one the platform cannot place
            return 0
    return 0


_UPLOADED = re.compile(r"<uploaded_files>\s*\n(?P<dir>/[^\n]*?)\s*\n</uploaded_files>")


def uploaded_dir(text: str) -> str | None:
    """The repository directory a SWE-bench style task names (``<uploaded_files>/testbed</...>``)."""
    m = _UPLOADED.search(text)
    return m.group("dir").rstrip("/") or None if m else None


def openai_calls(value: Any, where: str) -> list[dict[str, Any]]:
    """A recorded message's ``tool_calls`` as chat-completions calls (arguments as a JSON string);
    ``InputError`` naming ``where`` for a call without an id or a function name."""
    if not isinstance(value, list):
        raise InputError(f"{where}: tool_calls must be a list, not {json_type(value)}")
    out = []
    for j, c in enumerate(value):
        fn = c.get("function") if isinstance(c, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(c.get("id"), str) or not isinstance(fn.get("name"), str):
            raise InputError(f"{where}: tool_calls[{j}] needs an id and a function name")
        args = fn.get("arguments")
        if not isinstance(args, str):
            args = json.dumps(args if args is not None else {})
        out.append({"id": c["id"], "type": "function", "function": {"name": fn["name"], "arguments": args}})
    return out


def pair_openai(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages with every tool call answered right after its message and every result
    answering one: a result with no open call is dropped, a call never answered is dropped from
    its message (as OpenHands drops both before it calls the model); the last message keeps its
    calls (nothing came after it)."""
    out: list[dict[str, Any]] = []
    reply: dict[str, Any] | None = None
    answered: set[str] = set()

    def settle() -> None:
        if reply is not None and reply.get("tool_calls"):
            kept = [c for c in reply["tool_calls"] if c["id"] in answered]
            if kept:
                reply["tool_calls"] = kept
            else:
                del reply["tool_calls"]

    for m in messages:
        if m["role"] == "tool":
            calls = {c["id"] for c in (reply or {}).get("tool_calls") or ()}
            if m.get("tool_call_id") in calls and m["tool_call_id"] not in answered:
                answered.add(m["tool_call_id"])
                out.append(m)
            continue
        settle()
        reply, answered = (m, set()) if m["role"] == "assistant" else (None, set())
        out.append(m)
    return out
