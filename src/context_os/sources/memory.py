"""Markdown memory scopes as an object source: the ``MEMORY.md`` indexes the agent keeps.

A *scope* is a directory holding a ``MEMORY.md`` index, topic files (``<topic>.md``) beside it
and an ``archive/`` folder. ``MemoryScopes`` knows four:

* ``global``: ``<user data dir>/memory/`` (the base the default store uses), for this user in
  every workspace;
* ``project``: ``<workspace>/.context_os/memory/``, in the repository, shared with whoever
  shares it; used **only when the workspace is trusted**: ``trust_project=True``, or its root
  (or a folder above it) listed in ``<user data dir>/memory.json`` (``trust_workspace``). A
  repository cannot trust itself: nothing inside it is consulted for trust;
* ``pi-global`` (``$PI_CODING_AGENT_DIR`` or ``~/.pi/agent``, then ``memory/``) and
  ``pi-project`` (``<workspace>/.pi/memory/``, same trust rule): Pi's own scopes, read only
  when asked (``include_pi=True``, or ``"include_pi": true`` in ``memory.json``).

``items(query, budget_tokens)`` offers one ``memory`` item per scope in use whose index exists:
the first 200 lines or 8 KiB of ``MEMORY.md``, whichever is smaller, cut at a line boundary,
with a one-line note when something was left out. The text depends only on the file's bytes,
so it is byte-stable (same bytes, same hash) while the file is unchanged; the query changes
nothing. Topic files and ``archive/`` are never offered: topic files are ordinary files the
agent reads with its ``read`` tool. ``changed()`` says cheaply whether the next ``items()``
would differ; ``paths()`` names every index, for a file tracker to watch.

``remember(text, scope, topic)`` appends one fact as one bullet line, never rewriting a byte
that is there.

Files are opened relative to the opened scope directory and never through a symlink inside a
scope (``O_NOFOLLOW``): a repository cannot point its ``MEMORY.md`` at a file elsewhere on the
machine. This module must never import from ``context``, ``harness``, ``files`` or ``cli``, and
never let an ``OSError`` out: failures are ``InputError`` or ``ConfigError``.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import blake3

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

from ..errors import ConfigError, InputError
from ..hashing import unicode_problem
from .base import SourceItem

__all__ = [
    "MAX_INDEX_BYTES",
    "MAX_INDEX_LINES",
    "MAX_FACT_CHARS",
    "MemoryPassage",
    "MemoryScope",
    "MemoryScopes",
    "Remembered",
    "ScopeName",
    "holds_line",
    "listed_path",
    "settings_path",
    "trust_workspace",
    "trusted_root",
    "trusted_workspaces",
    "untrust_workspace",
]

MAX_INDEX_LINES = 200
"""At most this many lines of a ``MEMORY.md`` enter the context."""
MAX_INDEX_BYTES = 8 * 1024
"""At most this many bytes of a ``MEMORY.md`` enter the context."""
MAX_FACT_CHARS = 1000
"""A fact ``remember`` appends to an index is at most this long; longer ones belong in a topic."""

ScopeName = Literal["global", "project", "pi-global", "pi-project"]

INDEX = "MEMORY.md"
ARCHIVE = "archive"
_PROJECT_PARTS = (".context_os", "memory")
_PI_PROJECT_PARTS = (".pi", "memory")
_SETTINGS = "memory.json"
_CHUNK = 1 << 16
_TOPIC = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters a fact may not hold: C0 but tab (line breaks are folded first), DEL and C1
(U+009B is CSI, an escape sequence's start to a terminal showing the file; before 2026-12-02
``remember`` wrote them)."""
_BULLET = re.compile(r"\A[-*+](?:\s+|\Z)")

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_DIR = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
_READ = os.O_RDONLY | os.O_NONBLOCK | _O_NOFOLLOW | _O_CLOEXEC
_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC


@dataclass(frozen=True)
class MemoryScope:
    """What one look at one scope found."""

    scope: ScopeName
    id: str
    """The id of the item the index becomes: ``memory:global:MEMORY.md``,
    ``memory:project:<workspace tag>:MEMORY.md`` (project ids name their workspace, since one
    store serves many)."""
    dir: Path
    index: Path
    """The scope's ``MEMORY.md`` (it may not exist)."""
    used: bool
    """Offered to the context: configured, and for project scopes, the workspace is trusted."""
    exists: bool
    """``MEMORY.md`` exists (and is a regular file)."""
    bytes: int = 0
    lines: int | None = None
    """Lines of ``MEMORY.md``; None when it was not read (an unused scope is only ``stat``-ed)."""
    sha: str | None = None
    """``b3:`` blake3 of the bytes of ``MEMORY.md``, when read."""
    injected_bytes: int = 0
    """Bytes of ``MEMORY.md`` the item shows (the note about the rest not counted)."""
    injected_lines: int = 0
    capped: bool = False
    """The index is longer than the cap: the item shows the head and a note."""
    binary: bool = False
    """The index holds NUL bytes: not a text file, the item is a one-line note instead."""
    text: str | None = None
    """The item's text: the capped index (with the note), when read."""
    topics: int = 0
    """``*.md`` files beside ``MEMORY.md``."""
    archived: int = 0
    """Files anywhere below ``archive/`` (never offered)."""
    error: str | None = None
    """Why the scope could not be read (a symlink inside it, permission denied, …); such a
    scope offers nothing."""

    @property
    def folder(self) -> Path:
        """The folder the scope lives in (``.context_os/memory`` below it): for a project scope,
        the one ``ctxos memory trust --workspace`` must name to use it (the repository's root,
        for a workspace in one of its folders)."""
        return self.dir.parent.parent

    @property
    def meta(self) -> dict[str, Any]:
        """What the metadata pool shows of the item."""
        return {
            "name": f"{INDEX} ({self.scope})",
            "scope": self.scope,
            "path": str(self.index),
            "bytes": self.bytes,
            "injected_bytes": self.injected_bytes,
            "capped": self.capped,
            "lines": self.lines,
            "injected_lines": self.injected_lines,
            "sha": self.sha,
        } | ({"binary": True} if self.binary else {})


@dataclass(frozen=True)
class Remembered:
    """What ``remember`` wrote, and where."""

    scope: Literal["global", "project"]
    path: Path
    """The file the fact was appended to (``MEMORY.md`` or the topic file)."""
    line: str
    """The line appended (``- <fact>``, without its newline)."""
    pointer: str | None = None
    """The pointer line appended to ``MEMORY.md`` the first time a topic was used."""
    index: Path | None = None
    """The scope's ``MEMORY.md`` (where a pointer went)."""


# -- settings: the user's list of trusted workspaces -------------------------------------------


def _default_data_dir() -> Path:
    from ..store import data_dir

    return data_dir()


def settings_path(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<user data dir>/memory.json``: the trusted workspace roots and ``include_pi``. It lies
    beside the global scope, not in it, so an agent allowed to edit its memory cannot trust a
    workspace."""
    return Path(data_dir if data_dir is not None else _default_data_dir()) / _SETTINGS


def _load_settings(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a JSON object, found {type(value).__name__}")
    roots = value.get("trusted_workspaces", [])
    if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
        raise ConfigError(f"{path}: trusted_workspaces must be a list of paths")
    if not isinstance(value.get("include_pi", False), bool):
        raise ConfigError(f"{path}: include_pi must be true or false")
    return value


def _save_settings(path: Path, value: dict[str, Any]) -> None:
    data = (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with suppress(OSError):
            tmp.unlink()
        raise ConfigError(f"{path}: cannot be written ({e.strerror or e})") from None


def _root(workspace: str | os.PathLike[str]) -> Path:
    try:
        real = os.path.realpath(os.path.expanduser(os.fspath(workspace)))
    except ValueError as e:  # a NUL byte
        raise InputError(f"workspace path {os.fspath(workspace)!r} is not a valid path: {e}") from None
    if not os.path.isdir(real):
        raise InputError(f"workspace {os.fspath(workspace)!r} is not a directory")
    return Path(real)


def _absolute(workspace: str | os.PathLike[str]) -> str:
    """A path that may no longer exist, absolute and normalised (symlinks of what is left resolved)."""
    try:
        return os.path.realpath(os.path.abspath(os.path.expanduser(os.fspath(workspace))))
    except ValueError:  # a NUL byte
        return ""


def _home() -> Path | None:
    """The user's home directory, resolved; None when there is none to be found."""
    try:
        return Path.home().resolve()
    except (RuntimeError, OSError):
        return None


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def trusted_workspaces(data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The workspace roots the user trusts (a workspace inside one is trusted too)."""
    out = []
    for p in _load_settings(settings_path(data_dir)).get("trusted_workspaces", []):
        expanded = os.path.expanduser(p)
        if os.path.isabs(expanded):  # a relative entry would depend on the current directory
            out.append(Path(os.path.realpath(expanded)))
    return out


def trust_workspace(workspace: str | os.PathLike[str], *, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Add the workspace's resolved root to the trusted list (once); returns that root."""
    root = _root(workspace)
    path = settings_path(data_dir)
    settings = _load_settings(path)
    roots = list(settings.get("trusted_workspaces", []))
    if str(root) not in roots:
        settings["trusted_workspaces"] = [*roots, str(root)]
        _save_settings(path, settings)
    return root


def listed_path(workspace: str | os.PathLike[str]) -> Path:
    """The path the trusted list names ``workspace`` by: its resolved root; for a workspace
    deleted since, its path as given, made absolute (a directory made there again is the same
    workspace)."""
    try:
        return _root(workspace)
    except InputError:
        gone = _absolute(workspace)
        if not gone:
            raise
        return Path(gone)


def trusted_root(workspace: str | os.PathLike[str], *, data_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The listed root that trusts ``workspace`` (it lies at or below it; one deleted since, by
    ``listed_path``), None when none does."""
    path = listed_path(workspace)
    return next((root for root in trusted_workspaces(data_dir) if _within(path, root)), None)


def untrust_workspace(workspace: str | os.PathLike[str], *, data_dir: str | os.PathLike[str] | None = None) -> bool:
    """Remove the workspace's resolved root from the trusted list; whether it was listed. A
    folder above it that is listed still trusts it (``trusted_root``). A workspace deleted since
    is untrusted by its path as given (``listed_path``), so that a later directory there is not
    trusted."""
    root = listed_path(workspace)
    path = settings_path(data_dir)
    settings = _load_settings(path)
    roots = list(settings.get("trusted_workspaces", []))
    if str(root) not in roots:
        return False
    settings["trusted_workspaces"] = [r for r in roots if r != str(root)]
    _save_settings(path, settings)
    return True


# -- opening files inside a scope --------------------------------------------------------------


def _strerror(e: OSError) -> str:
    return e.strerror or str(e)


def _open_scope_dir(base: Path, parts: tuple[str, ...], create: bool) -> int | None:
    fd = -1
    try:
        if create:
            base.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(base, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        except FileNotFoundError:
            return None
        for part in parts:
            try:
                nxt = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                with suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                nxt = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except OSError as e:
        if fd >= 0:
            os.close(fd)
        where = base.joinpath(*parts)
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise InputError(
                f"{where}: a part of it is a symlink or not a directory; memory is not read or written through it"
            ) from None
        raise InputError(f"{where}: {_strerror(e)}") from None


@contextmanager
def _scope_dir(base: Path, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int | None]:
    """The scope directory ``base/parts…`` opened: ``base`` by its name, each part relative to
    the one before and never through a symlink. None if it is missing (and not ``create``)."""
    fd = _open_scope_dir(base, parts, create)
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _open_file(dir_fd: int, name: str, shown: Path) -> int | None:
    """``name`` in the opened directory, opened to read; None if it is missing. A symlink or a
    non-regular file is an ``InputError``."""
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"{shown} is a symlink; memory is not read through symlinks") from None
        raise InputError(f"{shown}: cannot be read ({_strerror(e)})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{shown} is not a regular file")
    return fd


@dataclass(frozen=True)
class _Read:
    size: int
    lines: int
    sha: str
    head: bytes
    """The first ``max_bytes + 1`` bytes (enough to decide the cut)."""
    ends_newline: bool
    binary: bool


def _read(fd: int, keep: int) -> _Read:
    """Stream the file once: its size, line count, hash and first ``keep`` bytes."""
    h = blake3.blake3()
    head = bytearray()
    size = newlines = 0
    last = b""
    binary = False
    while chunk := os.read(fd, _CHUNK):
        h.update(chunk)
        if len(head) < keep:
            head += chunk[: keep - len(head)]
        size += len(chunk)
        newlines += chunk.count(b"\n")
        binary = binary or b"\x00" in chunk
        last = chunk[-1:]
    ends = last == b"\n"
    lines = newlines + (1 if size and not ends else 0)
    return _Read(size, lines, "b3:" + h.hexdigest(), bytes(head), ends, binary)


def _cut(r: _Read, max_lines: int, max_bytes: int) -> bytes | None:
    """The injected part of the index, or None when all of it fits."""
    if r.size <= max_bytes and r.lines <= max_lines:
        return None
    head, end = r.head[:max_bytes], 0
    for _ in range(max_lines):  # complete lines only: a line is what ends in "\n" (a lone "\r" is not one)
        nl = head.find(b"\n", end)
        if nl < 0:
            break
        end = nl + 1
    return head[:end]


def _count(dir_fd: int) -> tuple[int, int]:
    """(topic files, archived files) of an opened scope directory; neither is ever opened."""
    topics = archived = 0
    with os.scandir(dir_fd) as entries:
        for e in entries:
            if e.name != INDEX and e.name.endswith(".md") and e.is_file(follow_symlinks=False):
                topics += 1
    try:
        fd = os.open(ARCHIVE, _DIR, dir_fd=dir_fd)
    except OSError:
        return topics, 0
    stack = [fd]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as entries:
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        with suppress(OSError):
                            stack.append(os.open(e.name, _DIR, dir_fd=d))
                    else:
                        archived += 1
        finally:
            os.close(d)
    return topics, archived


# -- passages: every memory file, for recall ------------------------------------------------------

PASSAGE_LINES = 6
"""A passage of a memory file holds at most this many lines (a paragraph or a run of facts)."""
PASSAGE_CHARS = 1200
"""… and at most this many characters (a longer line is a passage of its own)."""
MAX_FILE_BYTES = 1 << 20
"""Of a memory file, recall reads at most its first MiB."""
_HEADING = re.compile(r"\s{0,3}#{1,6}\s")


@dataclass(frozen=True)
class MemoryPassage:
    """A few lines of one memory file (``MEMORY.md`` or a topic file), as recall searches them."""

    id: str
    """``memory:<scope>:<file>`` (``memory:project:<tag>:<file>`` for project scopes): for
    ``MEMORY.md`` the id of the item the index becomes."""
    scope: ScopeName
    path: Path
    start: int
    """First line, 1-based."""
    end: int
    """Last line, inclusive."""
    text: str
    sha: str
    """``b3:`` blake3 of the whole file's bytes."""
    mtime_ms: int

    @property
    def part(self) -> str:
        """``L<start>-<end>``."""
        return f"L{self.start}-{self.end}"


def _passages(text: str) -> Iterator[tuple[int, int, str]]:
    """(first line, last line, text) of each passage: paragraphs (blank lines and headings start a
    new one) of at most ``PASSAGE_LINES`` lines and ``PASSAGE_CHARS`` characters. Lines end at
    line feeds, as ``read``, git and editors count them (``str.splitlines`` also ends one at a
    form feed or a U+2028 pasted into a fact: the lines a hit named were off)."""
    lines: list[str] = []
    start = 0

    def flush() -> Iterator[tuple[int, int, str]]:
        if lines:
            yield start, start + len(lines) - 1, "\n".join(lines)
            lines.clear()

    for n, row in enumerate(text.split("\n"), 1):
        line = row.removesuffix("\r")
        if not line.strip():
            yield from flush()
            continue
        size = sum(len(x) + 1 for x in lines)
        if _HEADING.match(line) or len(lines) >= PASSAGE_LINES or size + len(line) > PASSAGE_CHARS:
            yield from flush()
        if not lines:
            start = n
        lines.append(line)
    yield from flush()


def _files(dir_fd: int) -> list[str]:
    """The memory files of an opened scope directory: ``MEMORY.md`` first, then the topic files
    by name (regular files only, never through a symlink; ``archive/`` is not looked in). A name
    that is not valid UTF-8 (``caf\xe9.md`` from a Latin-1 archive) is left out: it would name
    each of its passages, and every object recall stored of one failed to hash (the turn of each
    user message that recalled it failed, and the agent's recall with it)."""
    names = []
    with os.scandir(dir_fd) as entries:
        for e in entries:
            if e.name.endswith(".md") and unicode_problem(e.name) is None and e.is_file(follow_symlinks=False):
                names.append(e.name)
    return sorted(names, key=lambda n: (n != INDEX, n))


_REDACTED = re.compile(r"\[REDACTED:[^\]\s]*\]")
"""What a session's redactor puts in place of a secret (``redact.Redactor``)."""


def holds_line(lines: set[str], line: str) -> bool:
    """Whether a memory file's ``lines`` hold a recall copy's ``line``, a secret the session
    redacted in it standing for any text: the copy of a line holding a password had been taken
    for a line edited away, and left out while its file still held it (recall's search, a
    session's check of its copies: ``MemoryScopes.outdated``)."""
    if line in lines:
        return True
    pieces = _REDACTED.split(line)
    return len(pieces) > 1 and any(_fits(pieces, x) for x in lines)


def _fits(pieces: list[str], line: str) -> bool:
    """Whether ``line`` is ``pieces`` in order with some text (a redacted secret) between each
    two: each piece placed leftmost, which finds a fit whenever there is one (a regular
    expression with a wildcard per secret backtracked for minutes over a line of many words)."""
    first, *middle, last = pieces
    if not line.startswith(first) or not line.endswith(last):
        return False
    at, end = len(first), len(line) - len(last)
    for piece in middle:
        found = line.find(piece, at + 1, end - 1)
        if found < 0:
            return False
        at = found + len(piece)
    return end > at


# -- the scopes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Where:
    scope: ScopeName
    id: str
    base: Path
    parts: tuple[str, ...]
    used: bool
    project: bool

    @property
    def dir(self) -> Path:
        return self.base.joinpath(*self.parts)


_SETTLED_NS = 3_000_000_000
"""A memory file whose last change is older than this when it is read is kept until its stamp
changes (a file system's times are at worst 2 s apart: FAT's)."""


class MemoryScopes:
    """The memory scopes of one workspace, as an ``ObjectSource`` named ``memory``.

    ``workspace``: the workspace root (None: global scopes only). ``trust_project``: True uses
    the project scopes, False never does, None (the default) uses them when the workspace lies
    in a root of ``trusted_workspaces()``. ``include_pi``: also Pi's scopes (None: the
    ``include_pi`` setting of ``memory.json``, off by default). ``data_dir``: the user data dir
    (default: the store's, ``context_os.store.data_dir()``). ``pi_agent_dir``: Pi's agent dir
    (default ``$PI_CODING_AGENT_DIR``, else ``~/.pi/agent``). ``max_lines``, ``max_bytes``: the
    per-scope cap.
    """

    name = "memory"

    def __init__(
        self,
        workspace: str | os.PathLike[str] | None = None,
        *,
        trust_project: bool | None = None,
        include_pi: bool | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        pi_agent_dir: str | os.PathLike[str] | None = None,
        max_lines: int = MAX_INDEX_LINES,
        max_bytes: int = MAX_INDEX_BYTES,
    ):
        if max_lines < 1 or max_bytes < 1:
            raise ConfigError(f"memory caps must be positive (max_lines={max_lines}, max_bytes={max_bytes})")
        self.workspace = _root(workspace) if workspace is not None else None
        self.trust_project = trust_project
        self.include_pi = include_pi
        self.data_dir = Path(data_dir) if data_dir is not None else _default_data_dir()
        if pi_agent_dir is None:
            pi_agent_dir = os.environ.get("PI_CODING_AGENT_DIR") or Path("~/.pi/agent").expanduser()
        self.pi_agent_dir = Path(pi_agent_dir).expanduser()
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self._seen: tuple[tuple[str, str | None], ...] | None = None
        self._ended: list[str] = []
        self._read_files: dict[tuple[str, str], tuple[tuple[int, int, int, int], list[MemoryPassage], bool]] = {}
        self._topics: set[str] = set()
        """Ids of the topic files seen (``memory:<scope>:<file>``), to say which are gone."""
        self._topics_ended: set[str] = set()
        """(scope prefix, file name) → (inode, size, mtime, ctime) as last read, its passages."""

    # -- trust and configuration

    @property
    def settings_path(self) -> Path:
        return settings_path(self.data_dir)

    def trusted_by(self) -> str | None:
        """Why the workspace is trusted: ``option`` (``trust_project=True``), the trusted root
        from ``memory.json`` it lies in, or None (not trusted, or no workspace)."""
        if self.workspace is None or self.trust_project is False:
            return None
        if self.trust_project:
            return "option"
        root = trusted_root(self.workspace, data_dir=self.data_dir)
        return None if root is None else str(root)

    @property
    def trusted(self) -> bool:
        return self.trusted_by() is not None

    def pi_enabled(self) -> bool:
        if self.include_pi is not None:
            return self.include_pi
        return bool(_load_settings(self.settings_path).get("include_pi", False))

    def _where(self) -> list[_Where]:
        """Every scope configured, in the order they enter the context (general to specific)."""
        pi = self.pi_enabled()
        out = [_Where("global", f"memory:global:{INDEX}", self.data_dir / "memory", (), True, False)]
        if pi:
            out.append(_Where("pi-global", f"memory:pi-global:{INDEX}", self.pi_agent_dir / "memory", (), True, False))
        if self.workspace is not None:
            trusted = self.trusted
            projects: list[tuple[ScopeName, tuple[str, ...]]] = [
                ("project", _PROJECT_PARTS),
                ("pi-project", _PI_PROJECT_PARTS),
            ]
            for scope, parts in projects:
                if scope == "pi-project" and not pi:
                    continue
                base = self._project_base(parts, trusted)
                tag = blake3.blake3(str(base).encode("utf-8")).hexdigest()[:16]
                out.append(_Where(scope, f"memory:{scope}:{tag}:{INDEX}", base, parts, trusted, True))
        return out

    def _project_base(self, parts: tuple[str, ...], trusted: bool) -> Path:
        """Where a project scope lives for a workspace that may be a folder of a repository: the
        nearest folder from the workspace up to the repository's root (the nearest holding
        ``.git``) that has the scope's folder, else the highest of them trusted (the repository's
        root when it is), else the workspace. Folders above the workspace count only when they
        are trusted themselves (listed, or the caller's ``trust_project=True``); an untrusted
        workspace's scope is only looked at, never read."""
        ws = self.workspace
        assert ws is not None
        # a home directory kept in git (dotfiles) is no repository of the projects below it
        home = _home()
        above_home = set() if home is None else {home, *home.parents}
        repo = next(
            (d for d in (ws, *ws.parents) if (d == ws or d not in above_home) and os.path.lexists(d / ".git")), None
        )
        chain = [ws] if repo is None else [d for d in (ws, *ws.parents) if _within(d, repo)]
        if trusted and self.trust_project is not True:
            roots = trusted_workspaces(self.data_dir)
            chain = [d for d in chain if any(_within(d, r) for r in roots)] or [ws]
        return next((d for d in chain if os.path.lexists(d.joinpath(*parts))), chain[-1])

    # -- reading

    def scopes(self) -> list[MemoryScope]:
        """A fresh look at every configured scope, used or not. An unused (untrusted) scope is
        only ``stat``-ed: its text is never read."""
        return [self._look(w) for w in self._where()]

    def _look(self, w: _Where) -> MemoryScope:
        index = w.dir / INDEX
        none = MemoryScope(scope=w.scope, id=w.id, dir=w.dir, index=index, used=w.used, exists=False)
        try:
            with _scope_dir(w.base, w.parts) as dir_fd:
                if dir_fd is None:
                    return none
                topics, archived = _count(dir_fd)
                fd = _open_file(dir_fd, INDEX, index)
                if fd is None:
                    return replace(none, topics=topics, archived=archived)
                try:
                    if not w.used:
                        size = os.fstat(fd).st_size
                        return replace(none, exists=True, bytes=size, topics=topics, archived=archived)
                    r = _read(fd, self.max_bytes + 1)
                finally:
                    os.close(fd)
        except InputError as e:
            return replace(none, error=str(e))
        except OSError as e:
            return replace(none, error=f"{w.dir}: {_strerror(e)}")
        text, injected, capped = self._text(w, index, r)
        return replace(
            none,
            exists=True,
            bytes=r.size,
            lines=r.lines,
            sha=r.sha,
            injected_bytes=len(injected),
            injected_lines=injected.count(b"\n") + (1 if injected and not injected.endswith(b"\n") else 0),
            capped=capped,
            binary=r.binary,
            text=text,
            topics=topics,
            archived=archived,
        )

    def _shown(self, w: _Where, index: Path) -> str:
        """How the note names the index for the read tool: relative to the workspace if inside."""
        if w.project and self.workspace is not None and _within(index, self.workspace):
            return index.relative_to(self.workspace).as_posix()
        return str(index)

    def _text(self, w: _Where, index: Path, r: _Read) -> tuple[str, bytes, bool]:
        """(item text, injected bytes of the file, capped)."""
        shown = self._shown(w, index)
        if r.binary:
            return f"[memory: {shown} is not a text file ({r.size:,} bytes); nothing of it is shown]\n", b"", False
        head = _cut(r, self.max_lines, self.max_bytes)
        if head is None:
            return r.head.decode("utf-8", errors="replace"), r.head, False
        n = head.count(b"\n")
        note = (
            f"[memory: {INDEX} is longer than the {self.max_lines}-line / {self.max_bytes:,}-byte cap: shown are "
            f"its first {n} of {r.lines:,} lines ({len(head):,} of {r.size:,} bytes); read the whole file with "
            f"read({shown!r}), and the topic files beside it the same way]\n"
        )
        return head.decode("utf-8", errors="replace") + note, head, True

    def items(self, query: str, budget_tokens: int) -> list[SourceItem]:
        """One ``memory`` item per used scope whose ``MEMORY.md`` exists and holds more than
        whitespace, general scopes first;
        score 1.0 whatever the query. The caps bound them (about 2k tokens per scope), so
        ``budget_tokens`` drops nothing: items that came and went with the budget would break
        the prompt cache every turn."""
        looked = self.scopes()
        self._seen = self._fingerprint(looked)
        # an index emptied of every fact says nothing: no item (an empty block), ended as deleted
        blank = {s.id for s in looked if s.text is not None and not s.text.strip()}
        self._ended = [s.id for s in looked if s.used and (not s.exists or s.id in blank) and s.error is None]
        self._ended += self._topics_gone(looked)
        return [
            SourceItem(id=s.id, kind="memory", text=s.text, score=1.0, meta=s.meta)
            for s in looked
            if s.used and s.text is not None and s.id not in blank
        ]

    def ended(self) -> list[str]:
        """The ids of used scopes whose ``MEMORY.md`` did not exist, or held only whitespace, at
        the last ``items()`` (it was deleted or emptied, or never written), and of topic files
        (``memory:<scope>:<file>``, as recall names their lines) seen before that were gone then: a
        session ends their objects and the recall copies of them in the store, so recall stops
        finding a deleted memory. A scope that could not be read (an error) is not ended, nor one
        no longer used (an untrusted project's memory is not shown, not deleted)."""
        return list(self._ended)

    def _topics_gone(self, looked: list[MemoryScope]) -> list[str]:
        """The topic files of the scopes read now (used, no error) that an earlier look saw and
        this one does not: deleted, or moved to ``archive/``."""
        now: set[str] = set()
        read: set[str] = set()
        for w, s in zip(self._where(), looked, strict=True):
            if not w.used or s.error is not None:
                continue
            prefix = w.id[: -len(INDEX)]
            try:
                with _scope_dir(w.base, w.parts) as dir_fd:
                    names = _files(dir_fd) if dir_fd is not None else []
            except (InputError, OSError):
                continue
            read.add(prefix)
            now.update(prefix + n for n in names if n != INDEX)
        gone = {t for t in self._topics if t.startswith(tuple(read)) and t not in now}
        self._topics = (self._topics - gone) | now
        self._topics_ended = (self._topics_ended - now) | gone
        return sorted(self._topics_ended)

    @staticmethod
    def _fingerprint(looked: list[MemoryScope]) -> tuple[tuple[str, str | None], ...]:
        return tuple((s.id, s.sha) for s in looked if s.used)

    def fingerprint(self) -> tuple[tuple[str, str | None], ...]:
        """(item id, ``b3:`` hash of ``MEMORY.md`` or None) of every used scope: equal
        fingerprints give equal items. Reads each index once (they are small by design)."""
        return self._fingerprint(self.scopes())

    def changed(self) -> bool:
        """Whether ``items()`` would now differ from what the last ``items()`` or ``changed()``
        saw (always True the first time): an index edited, created or deleted, or the workspace
        trusted or untrusted since. A ``touch`` that changes no byte is no change."""
        now = self.fingerprint()
        changed, self._seen = now != self._seen, now
        return changed

    def id_prefixes(self) -> list[str]:
        """``memory:<scope>:`` (``memory:project:<tag>:``) of every used scope: the ids its
        ``passages`` and the stored copies of its index (``items``) begin with."""
        return [w.id[: -len(INDEX)] for w in self._where() if w.used]

    def passages(self) -> list[MemoryPassage]:
        """Every memory file of every used scope (``MEMORY.md`` whole, past the cap, and each
        topic file; never ``archive/``) as it is on disk now, in passages of a few lines: what
        recall searches of memory. Read as ``items`` reads, never through a symlink; a file with
        NUL bytes is skipped, of a larger one the first ``MAX_FILE_BYTES``; a scope that cannot
        be read gives nothing. Nothing is written. A file whose inode, size and modification and
        change times are those of the last call is not read again: its passages are kept (unless
        it had changed less than ``_SETTLED_NS`` before that call read it: an edit in the same tick of
        the file system's clock would keep its stamp)."""
        out: list[MemoryPassage] = []
        seen: set[tuple[str, str]] = set()
        for w in self._where():
            if not w.used:
                continue
            prefix = w.id[: -len(INDEX)]
            try:
                with _scope_dir(w.base, w.parts) as dir_fd:
                    if dir_fd is None:
                        continue
                    for name in _files(dir_fd):
                        out.extend(self._file_passages(dir_fd, w, prefix, name, seen))
            except (InputError, OSError):
                continue
        # what was not seen now (a file deleted, a scope no longer used) leaves the cache
        for key in set(self._read_files) - seen:
            del self._read_files[key]
        return out

    def _file_passages(
        self, dir_fd: int, w: _Where, prefix: str, name: str, seen: set[tuple[str, str]]
    ) -> list[MemoryPassage]:
        """The passages of one memory file: read and cut again only when its size, inode or
        times changed since the last look (``passages`` runs at every search: a folder of 500
        topic files was read whole each time)."""
        path = w.dir / name
        key = (prefix, name)
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return []
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cached = self._read_files.get(key)
        if cached is not None and cached[0] == stamp and cached[2] and stat.S_ISREG(st.st_mode):
            seen.add(key)
            return cached[1]
        try:
            fd = _open_file(dir_fd, name, path)
        except InputError:
            return []  # a symlink, or no regular file: not read
        if fd is None:
            return []
        try:
            fst = os.fstat(fd)
            r = _read(fd, MAX_FILE_BYTES)
        finally:
            os.close(fd)
        found: list[MemoryPassage] = []
        if not r.binary:
            text = r.head.decode("utf-8", errors="replace")
            mtime = fst.st_mtime_ns // 1_000_000
            found = [
                MemoryPassage(prefix + name, w.scope, path, start, end, chunk, r.sha, mtime)
                for start, end, chunk in _passages(text)
            ]
        seen.add(key)
        if cached is not None and cached[1] == found:
            found = cached[1]  # the same bytes read again: the same passages
        # stamped as it was opened: a write while it was read changes the stamp, and is read next
        # time; but a write in the same tick of the file system's clock as the last change before
        # the read (whole seconds on HFS+ or FAT, a kernel tick elsewhere) keeps the stamp: a file
        # changed that recently is read again at the next call, until its stamp is older
        settled = time.time_ns() - max(fst.st_mtime_ns, fst.st_ctime_ns) >= _SETTLED_NS
        self._read_files[key] = ((fst.st_ino, fst.st_size, fst.st_mtime_ns, fst.st_ctime_ns), found, settled)
        return found

    def outdated(self, copies: Mapping[str, tuple[str, Sequence[int], str]]) -> set[str]:
        """Of recall copies of memory files' lines (copy id → the file's id, ``memory:<scope>:<file>``,
        the copy's first and last line, and its text as stored), those whose file no longer
        holds their text at those lines: a fact edited or deleted, or moved by a line inserted
        above it (recall finds it at its new lines, under another id). A secret the session
        redacted in the copy stands for whatever the file's line holds there. Only files of the
        scopes used now are judged (another workspace's copy, or one of a scope that cannot be
        read or is no longer trusted, is not outdated); a file gone or no longer read (a symlink,
        NUL bytes) holds nothing. Files are read as ``passages`` reads them (unchanged ones not
        read again); nothing is written."""
        files: dict[str, dict[int, str]] = {}
        for w in self._where():
            prefix = w.id[: -len(INDEX)]
            names = {f[len(prefix) :] for f, _, _ in copies.values() if f.startswith(prefix)}
            if not w.used or not names:
                continue
            try:
                with _scope_dir(w.base, w.parts) as dir_fd:
                    listed = set(_files(dir_fd)) if dir_fd is not None else set()
                    for name in names:
                        found: list[MemoryPassage] = []
                        if dir_fd is not None and name in listed:
                            found = self._file_passages(dir_fd, w, prefix, name, set())
                        files[prefix + name] = {
                            n: line for p in found for n, line in enumerate(p.text.split("\n"), p.start)
                        }
            except (InputError, OSError):
                continue
        out = set()
        for copy, (file, (first, last), text) in copies.items():
            now = files.get(file)
            if now is None:
                continue
            held = {line.strip() for n, line in now.items() if first <= n <= last}
            want = [x.strip() for x in text.split("\n") if x.strip()]
            if not want or not all(holds_line(held, x) for x in want):
                out.add(copy)
        return out

    def paths(self) -> list[Path]:
        """The ``MEMORY.md`` of every used scope, whether it exists yet or not: what a file
        tracker watches to notice an edit."""
        return [w.dir / INDEX for w in self._where() if w.used]

    def dirs(self) -> list[Path]:
        """The directory of every used scope (for a read tool's allow-list: topic files are read
        from there)."""
        return [w.dir for w in self._where() if w.used]

    # -- writing

    def remember(
        self, text: str, scope: Literal["global", "project"] = "project", topic: str | None = None
    ) -> Remembered:
        """Append one fact to the scope's ``MEMORY.md``, or to ``<topic>.md`` (then a pointer
        ``- [topic](topic.md)`` goes to ``MEMORY.md`` the first time the index has none).

        The fact becomes one bullet line ``- <text>``: multi-line text is folded into one line
        (each line stripped, blank ones dropped, joined by spaces), a leading bullet marker is
        dropped. Empty text, control characters, a fact over ``MAX_FACT_CHARS`` for the index,
        a topic name that is not a plain file name (a path separator, ``..``, a leading dot,
        ``MEMORY``, ``archive``), the project scope of an untrusted workspace, and a file to
        append to that is no text file (NUL bytes, UTF-16) are refused with ``InputError``, with
        nothing written. Existing bytes are never rewritten: the file is opened for appending,
        the line written in one ``write`` and synced to disk. The scope directory is created on
        first use.
        """
        if scope not in ("global", "project"):
            raise InputError(f"remember: scope must be 'global' or 'project', not {scope!r}")
        fact = _fold(text)
        name = _topic_file(topic) if topic is not None else None
        if name is None and len(fact) > MAX_FACT_CHARS:
            raise InputError(
                f"remember: the fact is {len(fact):,} characters; the index takes at most {MAX_FACT_CHARS:,} "
                "per fact: put the detail in a topic (the topic argument, --topic) and keep the index line short"
            )
        w = next((w for w in self._where() if w.scope == scope), None)
        if w is None:
            raise InputError("remember: no workspace was given, so there is no project scope; use the global scope")
        if not w.used:
            untrusted = (
                f"remember: the workspace {self.workspace} is not trusted, so its project memory is not used and "
                "not written"
            )
            raise InputError(
                f"{untrusted}; trust it with `ctxos memory trust --workspace {w.base}` (in Python, "
                "MemoryScopes(..., trust_project=True)), or remember it in the global scope (the scope argument "
                '"global", --scope global)'
            ).to_model(
                f'{untrusted}: remember it in the global scope (the scope argument "global"); only the user can '
                f"trust the workspace (ctxos memory trust --workspace {w.base})"
            )
        line = f"- {fact}"
        index = w.dir / INDEX
        with _scope_dir(w.base, w.parts, create=True) as dir_fd, _writing(dir_fd):
            assert dir_fd is not None
            if name is None:
                _append(dir_fd, INDEX, index, line)
                return Remembered(scope, index, line, index=index)
            # the index read first: one that is no text file refuses the fact, nothing written
            pointer = None if _has_pointer(dir_fd, index, name) else f"- [{name[:-3]}]({name})"
            _append(dir_fd, name, w.dir / name, line)
            if pointer is not None:
                _append(dir_fd, INDEX, index, pointer)
            return Remembered(scope, w.dir / name, line, pointer=pointer, index=index)


def _fold(text: str) -> str:
    if not isinstance(text, str):
        raise InputError(f"remember: text must be a string, not {type(text).__name__}")
    fact = " ".join(part.strip() for part in text.splitlines() if part.strip())
    fact = _BULLET.sub("", fact)
    if not fact:
        raise InputError("remember: the text is empty; give one fact to remember")
    if _CONTROL.search(fact):
        raise InputError("remember: the text contains control characters; give plain text")
    try:
        fact.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"remember: the text is not valid Unicode ({e.reason} at position {e.start})") from None
    return fact


def _topic_file(topic: str) -> str:
    name = topic[:-3] if topic.endswith(".md") else topic
    if not _TOPIC.fullmatch(name) or ".." in name or name.upper() == "MEMORY" or name.lower() == ARCHIVE:
        raise InputError(
            f"remember: topic {topic!r} is not a plain name: use ASCII letters and digits, '.', '_' and '-' (at "
            "most 64, starting with a letter or digit; no path separators or '..'; not MEMORY or archive); the "
            "fact itself may be in any language"
        )
    return name + ".md"


def _has_pointer(dir_fd: int, index: Path, name: str) -> bool:
    """Whether the index points to the topic file ``name``; ``InputError`` when it is no text
    file (``_refuse_binary``)."""
    fd = _open_file(dir_fd, INDEX, index)
    if fd is None:
        return False
    try:
        data = _pread_all(fd, os.fstat(fd).st_size)
    except OSError as e:
        raise InputError(f"{index}: cannot be read ({_strerror(e)})") from None
    finally:
        os.close(fd)
    _refuse_binary(data, index)
    return f"]({name})".encode() in data


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _refuse_binary(data: bytes, shown: Path) -> None:
    """Refuse to append to a file that is no text file: NUL bytes (memory calls it binary and
    shows nothing of it) or a UTF-16 byte order mark (Windows Notepad's "Unicode"). A UTF-8 line
    appended was never shown, and the user's file mixed two encodings (before 2026-12-02)."""
    if b"\x00" in data or data.startswith(_UTF16_BOMS):
        raise InputError(
            f"{shown} is not a text file (it holds NUL bytes, or is UTF-16): nothing was written; save it as UTF-8"
        )


def _pread_all(fd: int, size: int) -> bytes:
    """The first ``size`` bytes of an opened file (fewer if it is shorter now)."""
    chunks, at = [], 0
    while at < size and (chunk := os.pread(fd, min(_CHUNK, size - at), at)):
        chunks.append(chunk)
        at += len(chunk)
    return b"".join(chunks)


@contextmanager
def _writing(dir_fd: int | None) -> Iterator[None]:
    """The scope's write lock (an exclusive ``flock`` on its opened directory), held while one
    fact is written: another process's append, seen half-way, made the next one start with a
    newline (a blank line), and two could each add a topic's pointer to the index."""
    if dir_fd is None or fcntl is None:  # (no flock on Windows: appends there are not serialised)
        yield
        return
    fcntl.flock(dir_fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(dir_fd, fcntl.LOCK_UN)


def _append(dir_fd: int, name: str, shown: Path, line: str) -> None:
    """Append ``line`` and a newline to ``name`` in the opened directory (created if missing;
    never through a symlink), after a newline if the file does not end with one; a file that is
    no text file is refused (``_refuse_binary``)."""
    try:
        fd = os.open(name, _APPEND, 0o666, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"{shown} is a symlink; memory is not written through symlinks") from None
        raise InputError(f"{shown}: cannot be written ({_strerror(e)})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{shown} is not a regular file; nothing was written")
        there = _pread_all(fd, st.st_size)
        _refuse_binary(there, shown)
        data = (line + "\n").encode("utf-8")
        if there and not there.endswith(b"\n"):
            data = b"\n" + data
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as e:
        raise InputError(f"{shown}: cannot be written ({_strerror(e)})") from None
    finally:
        os.close(fd)
