"""The workspace policy: which paths the agent's file tools may touch, and how files are read.

``Workspace(root)`` resolves every path the agent names against ``root``. By default a path
outside ``root``, or one that escapes it through a symlink, is refused with ``PathDenied``;
``allow_outside`` lists further directories that are allowed. Files are snapshotted here
(``snapshot``), which is where the content policy lives:

* **binary files** (a NUL byte, or text that is mostly not UTF-8) are metadata-only: size, mime
  type guess and a blake3 hash of the bytes, no content;
* **non-UTF-8 text** is decoded as UTF-8 with each undecodable sequence replaced by U+FFFD (never
  guessed as another encoding, so no silent mojibake); ``meta.encoding`` says how many were
  replaced, and ``edit`` refuses to rewrite such a file;
* **secret-looking files** (``.env``, ``*.pem``, ``*.key``, ``id_rsa``, …) are metadata-only
  unless ``allow_secrets=True``: their content and even its hash never reach the store;
* files above ``max_file_bytes`` are metadata-only; files above ``max_active_chars`` characters
  are stored whole but shown truncated in the active pool (``meta.context_chars``);
* text is passed through the redactor (secrets removed: ``context_os.redact``) before it is stored.
* a file whose path holds a secret (``keys/sk-proj-….txt``) is never indexed (``deny_secret_path``):
  the path would be stored and shown.

**How paths are opened.** A check on a path name and a later open of that name can see two
different files (a symlink swapped in between). So nothing here opens a path by name: ``open``
starts from the root's own directory descriptor and opens one component at a time relative to
the directory opened before it, never following a symlink (``O_NOFOLLOW``, ``dir_fd``); ``..``
is resolved lexically first, so it can never climb above the root. Every decision (regular
file? which inode? how big?) is taken on what was opened (``fstat`` of the descriptor).
Symlinks are followed only by ``resolve`` (and ``open(follow=True)``): a symlink's target,
read relative to the directory that holds it, is walked again from the root it lies in, and
refused with ``PathDenied`` if it lies in none. A resolved path is symlink-free, so everything
done with it afterwards (``snapshot``, ``OpenedPath.replace``, ``walk``) refuses any symlink it
meets. Files are written through a temporary file created in the already-opened directory,
then renamed over the name in that same directory.

This module knows nothing of sessions or the store: it turns paths into checked ``Path`` objects
and files into ``FileSnapshot`` values. It must never open, create or rename a file of the
workspace through a path name the kernel resolves (only relative to an opened directory), and
never let an ``OSError`` out: every failure is a ``PathDenied``, ``FileUnreadable`` or
``InputError``.
"""

from __future__ import annotations

import errno
import fnmatch
import mimetypes
import os
import secrets
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import blake3

from ..errors import FileUnreadable, InputError, PathDenied
from ..redact import Redactor

__all__ = [
    "DEFAULT_IGNORED_DIRS",
    "DEFAULT_SECRET_PATTERNS",
    "FileSnapshot",
    "OpenKind",
    "OpenedPath",
    "Workspace",
]

DEFAULT_IGNORED_DIRS: frozenset[str] = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".jj",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        "dist",
        "build",
        "target",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        ".gradle",
        ".idea",
    }
)
"""Directory names the tracker and the ls/find/grep walks skip (VCS, dependencies, build output)."""

DEFAULT_SECRET_PATTERNS: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.env",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.kdbx",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "*.ppk",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".pypirc",
    ".npmrc",
    ".git-credentials",
    "credentials",
    "credentials.json",
    "secrets.json",
    "secrets.yaml",
    "secrets.yml",
    "*.tfvars",
)
"""File-name globs (case-insensitive) treated as secrets: metadata-only unless allowed."""

_NOT_SECRET_SUFFIXES = (".example", ".sample", ".template", ".dist")
"""``.env.example`` and friends are templates, not secrets."""

_BINARY_REPLACED_SHARE = 0.3
"""Text with more than this share of undecodable sequences is treated as binary."""

SnapshotMode = Literal["content", "metadata"]

OpenKind = Literal["file", "dir", "entry"]
"""What ``Workspace.open`` opens at the end of a path: a regular ``file`` to read, a ``dir`` to
list, or only the ``entry`` (looked at with ``lstat``: to learn its type, or to write it)."""

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_TRAVERSE = getattr(os, "O_PATH", os.O_RDONLY) | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
"""A directory opened to pass through it (``O_PATH`` where there is one: search permission is
enough, as it is for a path name)."""
_LIST = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
_READ = os.O_RDONLY | os.O_NONBLOCK | _O_NOFOLLOW | _O_CLOEXEC
"""Never blocks on a FIFO (or waits for a device); fails on a symlink."""
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
_MAX_SYMLINKS = 40
"""Symlinks followed for one path before it counts as a loop (the kernel's own limit)."""
_RETRIES = 3
"""Attempts at a directory that vanishes between ``mkdir`` and ``open`` before giving up."""


@dataclass(frozen=True)
class FileSnapshot:
    """What one look at a file on disk found."""

    path: Path
    """The resolved absolute path."""
    size: int
    mtime_ns: int
    dev: int
    ino: int
    mode: SnapshotMode
    """``content``: the bytes were read and hashed; ``metadata``: only ``stat`` was taken."""
    sha: str | None = None
    """``b3:`` + blake3 hex of the bytes on disk (content mode only); of a text with secrets
    redacted, ``b3r:`` + that of the text as redacted: stored beside it, the hash of the bytes
    would let anyone holding the store test guesses of what was redacted."""
    text: str | None = None
    """The decoded, redacted text (content mode, text files only)."""
    binary: bool | None = None
    """None when the bytes were not read."""
    mime: str = "application/octet-stream"
    encoding: str | None = None
    replaced: int = 0
    """Undecodable UTF-8 sequences replaced by U+FFFD."""
    redacted: int = 0
    """Secret-shaped strings removed by the redactor."""
    secret: bool = False
    omitted: str | None = None
    """Why there is no text (binary, secret, too large, not read yet)."""
    ctime_ns: int = 0
    """The inode's change time: set by the kernel at any change of the file (its bytes, times,
    mode, names), never set back by a program."""

    @property
    def mtime_ms(self) -> int:
        return self.mtime_ns // 1_000_000

    @property
    def changed_ms(self) -> int:
        """When the file at this path last changed (ms): the later of its mtime and ctime. An
        mtime alone can be set back (``cp -p``, ``rsync -a``, ``tar x``, ``touch -d``: a backup
        restored keeps its old times) or be when the bytes were written at another path (``mv``
        over the file); the ctime is then the time of the restore or the move. (Where ``st_ctime``
        is the creation time, Windows, it is never later than the mtime.)"""
        return max(self.mtime_ns, self.ctime_ns) // 1_000_000


@dataclass
class OpenedPath:
    """A path as ``Workspace.open`` opened it: the directory that holds it and, for the ``file``
    and ``dir`` kinds, the entry itself. The descriptors are closed when the ``with`` ends."""

    path: Path
    """The absolute path that was opened; every component was opened as what it is, none
    through a symlink."""
    name: str
    """The last component (empty for a root)."""
    dir_fd: int | None
    """The opened directory holding ``name`` (None for a root, or below a missing directory)."""
    fd: int | None
    """The opened entry: read-only for ``file``, listable for ``dir``; None for ``entry``."""
    st: os.stat_result | None
    """``fstat`` of ``fd``, or for ``entry`` the ``lstat`` of ``name`` in ``dir_fd``; None when
    nothing is there."""
    shown: str
    """How error messages name the path."""

    def read(self, limit: int | None = None) -> bytes:
        """All bytes of the opened file; with ``limit``, at most ``limit + 1`` of them (more than
        ``limit`` says the file holds more: one that grows while it is read, past the size its
        ``fstat`` had, is never read without end)."""
        if self.fd is None:
            raise FileUnreadable(f"{self.shown!r} was not opened for reading")
        chunks: list[bytes] = []
        want = None if limit is None else limit + 1
        got = 0
        try:
            while want is None or got < want:
                chunk = os.read(self.fd, 1 << 20 if want is None else min(1 << 20, want - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except OSError as e:
            raise FileUnreadable(f"{self.shown!r}: cannot be read ({_strerror(e)})") from None
        return b"".join(chunks)

    def replace(self, data: bytes, *, same_file: bool = False) -> None:
        """Make ``data`` the content of this entry.

        The bytes go to a new temporary file created in the opened directory (with the owner,
        group and mode of the file they replace, setuid and setgid bits too, else ``0o666`` less
        the umask), are flushed to disk, and the temporary file is renamed over ``name`` in that
        same directory: no reader and no crash sees half a file, and nothing is ever written
        through a symlink. Refused, with nothing written, if the user may not write the file
        (a rename over it needs only the directory's permission), if ``name`` holds a symlink or a
        non-regular file by then, or, with ``same_file``, no longer the very file that was opened
        (a concurrent change would be lost).
        """
        if self.dir_fd is None or not self.name:
            raise InputError(f"{self.shown!r}: not a file that can be written")
        old = self.st if self.st is not None and stat.S_ISREG(self.st.st_mode) else None
        if old is not None and not self._may_write(old):
            raise InputError(
                f"{self.shown!r} is read-only ({stat.filemode(old.st_mode)}); nothing was written. If it is"
                " meant to change, make it writable first (chmod u+w)"
            )
        tmp = _temp_name(self.name)
        try:
            fd = os.open(tmp, _CREATE, 0o600 if old is not None else 0o666, dir_fd=self.dir_fd)
        except OSError as e:
            raise InputError(f"{self.shown!r}: cannot be written ({_strerror(e)})") from None
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if old is not None:  # after the write, which clears a setuid bit set before it
                    _keep_owner_and_mode(fd, old)
                os.fsync(fd)  # the bytes are on disk before the name points at them
            finally:
                os.close(fd)
            self._check_target(same_file, old)
            os.replace(tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        except BaseException as e:
            with suppress(OSError):
                os.unlink(tmp, dir_fd=self.dir_fd)
            if isinstance(e, OSError):
                raise InputError(f"{self.shown!r}: cannot be written ({_strerror(e)})") from None
            raise

    def _may_write(self, st: os.stat_result) -> bool:
        """Whether the user may write the regular file ``name`` (``st``: its stat) in place, as an
        editor would. Root may write any file, but one without a write bit for anyone (generated
        code, a vendored copy, a lock file: ``chmod a-w``) is refused to it too, as it is to
        every other user."""
        assert self.dir_fd is not None
        if os.geteuid() == 0:
            return bool(st.st_mode & 0o222)
        effective = os.access in os.supports_effective_ids
        return os.access(self.name, os.W_OK, dir_fd=self.dir_fd, effective_ids=effective)

    def _check_target(self, same_file: bool, old: os.stat_result | None) -> None:
        """What ``name`` holds just before the rename: never a symlink, a directory, a FIFO."""
        assert self.dir_fd is not None
        try:
            now: os.stat_result | None = os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if now is not None and stat.S_ISLNK(now.st_mode):
            raise PathDenied(
                f"{self.shown!r} was replaced by a symlink while it was being written; nothing is written through it"
            )
        if now is not None and not stat.S_ISREG(now.st_mode):
            raise InputError(
                f"{self.shown!r} is not a regular file (it is {_kind_of(now.st_mode)}); nothing was written"
            )
        if same_file and (now is None or old is None or _identity(now) != _identity(old)):
            raise InputError(
                f"{self.shown!r} changed on disk while it was being edited; nothing was written (read it again)"
            )


@dataclass(frozen=True)
class _How:
    """What one ``Workspace._walk`` is for."""

    kind: OpenKind
    follow: bool
    create: bool = False
    missing_ok: bool = False


def _under(path: str, root: str) -> bool:
    return path == root or root == os.sep or path.startswith(root + os.sep)


def _strerror(e: OSError) -> str:
    return e.strerror or str(e)


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _temp_name(name: str) -> str:
    """The name of a temporary file written beside ``name``: a dot, at most 64 bytes of
    ``name`` (no character cut), a random part: 83 bytes at most. Cut at 64 characters, a name of
    251 bytes (62 emoji) made one longer than any file system takes, and the write failed."""
    stem, size = "", 0
    for c in name:
        size += len(c.encode("utf-8", "surrogatepass"))  # (an undecodable byte: 1, counted 3)
        if size > 64:
            break
        stem += c
    return f".{stem}.{secrets.token_hex(6)}.tmp"


def _escaped(name: str) -> str:
    """``name`` with each byte that is not UTF-8 written as its escape (``caf\\xe9.txt``), as the
    file tools list it; any other lone surrogate as its own (``\\ud800``)."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _keep_owner_and_mode(fd: int, old: os.stat_result) -> None:
    """Give the file open at ``fd`` the owner, group and mode of ``old`` where the user may: only
    root gives a file away, and a user may give it a group of their own. A setuid or setgid bit
    is kept only with the owner or group it grants: under another it would grant another."""
    if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.fchown(fd, old.st_uid, old.st_gid)
        except OSError:
            with suppress(OSError):
                os.fchown(fd, -1, old.st_gid)
    mode = stat.S_IMODE(old.st_mode)  # a chown clears the setuid and setgid bits: set after it
    now = os.fstat(fd)
    if now.st_uid != old.st_uid:
        mode &= ~stat.S_ISUID
    if now.st_gid != old.st_gid:
        mode &= ~stat.S_ISGID
    os.fchmod(fd, mode)


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def _readlink(name: str, dir_fd: int) -> str | None:
    """The target of the symlink ``name`` in the opened directory; None if it is not one (now)."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def _realpath(path: str) -> str:
    """Where ``path`` outside every root leads, to see whether it comes back in (through an alias
    of a root): only ever a hint, since the walk from the root decides. A symlink swapped while
    it is being resolved can make ``realpath`` itself fail: then ``path`` as it is."""
    try:
        return os.path.realpath(path)
    except OSError:
        return path


def _utf16(data: bytes) -> bool:
    """Whether ``data`` is UTF-16 text, as its byte order mark says (Windows tools write it: a
    SQL Server script, a ``.reg`` file, PowerShell 5's ``>``) and the rest confirms."""
    if not data.startswith((b"\xff\xfe", b"\xfe\xff")) or data.startswith(b"\xff\xfe\x00\x00"):
        return False  # (that one is UTF-32's)
    try:
        return "\x00" not in data.decode("utf-16")
    except UnicodeDecodeError:
        return False


def _close(opened: OpenedPath) -> None:
    for fd in (opened.fd, opened.dir_fd):
        if fd is not None:
            os.close(fd)


def _normalized(path: str) -> str:
    """``path`` without ``.``, ``..`` and doubled separators, lexically (POSIX keeps a leading
    ``//``; nothing here gives it a meaning)."""
    path = os.path.normpath(path)
    return os.sep + path.lstrip(os.sep) if path.startswith(os.sep * 2) else path


def _real_path(path: str | os.PathLike[str]) -> str:
    """``path`` with ``~`` expanded and symlinks resolved; a path no system call takes (a NUL
    byte in it) is refused as bad input."""
    try:
        return os.path.realpath(os.path.expanduser(os.fspath(path)))
    except ValueError as e:  # embedded null byte
        raise InputError(f"workspace path {os.fspath(path)!r} is not a valid path: {e}") from None


class Workspace:
    """Path policy and file reading for one workspace root.

    ``allow_outside``: further directories the tools may touch. ``allow_secrets``: read secret-
    looking files like any other. ``max_active_chars``: longer texts are shown truncated in the
    active pool (stored whole). ``max_file_bytes``: larger files are metadata-only.
    ``redact_patterns``: name → regex redacted besides what the default detectors find;
    ``redact_generic=False``: without the contextual detectors (``Redactor``; ``self.redactor`` may
    be replaced, ``Redactor.off()`` redacts nothing). ``secret_patterns``, ``ignored_dirs``: see the
    module constants.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        allow_outside: Iterable[str | os.PathLike[str]] = (),
        allow_secrets: bool = False,
        max_active_chars: int = 100_000,
        max_file_bytes: int = 8 * 1024 * 1024,
        redact_patterns: Mapping[str, str] | None = None,
        redact_generic: bool = True,
        secret_patterns: Sequence[str] = DEFAULT_SECRET_PATTERNS,
        ignored_dirs: Iterable[str] = DEFAULT_IGNORED_DIRS,
    ):
        real = _real_path(root)
        if not os.path.isdir(real):
            raise InputError(f"workspace root {os.fspath(root)!r} is not a directory")
        if max_active_chars < 1 or max_file_bytes < 1:
            raise InputError("max_active_chars and max_file_bytes must be positive")
        self.root = Path(real)
        self.allowed: tuple[Path, ...] = tuple(Path(_real_path(p)) for p in allow_outside)
        self.allow_secrets = allow_secrets
        self.max_active_chars = max_active_chars
        self.max_file_bytes = max_file_bytes
        self.secret_patterns = tuple(p.lower() for p in secret_patterns)
        self.ignored_dirs = frozenset(ignored_dirs)
        self.redactor = Redactor(redact_patterns, generic=redact_generic)

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    # --- paths --------------------------------------------------------------------------

    @property
    def roots(self) -> tuple[Path, ...]:
        """The workspace root, then every allowed outside directory."""
        return (self.root, *self.allowed)

    def root_of(self, path: str | os.PathLike[str]) -> Path | None:
        """The root (workspace or allowed directory) that contains the resolved ``path``."""
        s = os.fspath(path)
        for r in self.roots:
            if _under(s, str(r)):
                return r
        return None

    def resolve(self, path: str | os.PathLike[str], *, must_exist: bool = True) -> Path:
        """The absolute, symlink-free path of ``path`` (relative paths are relative to the root).

        Walked like ``open(follow=True)``: a symlink on the way is followed when its target
        lies inside the workspace or an allowed directory. Raises ``PathDenied`` if the path lies
        outside them (checked before anything else, so a denied path never reveals whether it
        exists) or leads out of them through a symlink, ``FileUnreadable`` if ``must_exist`` and
        it does not exist, or (always) if it sits behind a symlink loop. The answer is a name:
        whatever is done with it later opens it again, refusing symlinks.
        """
        target = self._start(path)
        opened = self._walk(target, os.fspath(path), _How("entry", follow=True, missing_ok=not must_exist))
        _close(opened)
        return opened.path

    @contextmanager
    def open(
        self,
        path: str | os.PathLike[str],
        *,
        kind: OpenKind = "file",
        follow: bool = False,
        create_parents: bool = False,
        missing_ok: bool = False,
    ) -> Iterator[OpenedPath]:
        """Open ``path`` from the directory of its root down, one component at a time, each
        relative to the directory opened before it and none through a symlink; yield what was
        opened (its descriptors are closed afterwards).

        ``kind``: ``file`` opens a regular file read-only (anything else is ``FileUnreadable``;
        a FIFO never blocks); ``dir`` a directory to list; ``entry`` only looks at the last
        component (``lstat``), which is what a write needs. ``follow``: a symlink met on the way
        is followed when its target (read relative to the directory holding it) lies inside
        the workspace or an allowed directory, else refused with ``PathDenied``; without
        ``follow``, which suits a path ``resolve`` returned, any symlink is refused with
        ``PathDenied`` (one that appeared after the check is exactly what must not be
        followed). ``create_parents`` (``entry``): missing directories on the way are created.
        ``missing_ok`` (``entry``): a missing entry gives ``st=None`` instead of an error.
        """
        target = self._start(path)
        opened = self._walk(
            target, self.relpath(target), _How(kind, follow=follow, create=create_parents, missing_ok=missing_ok)
        )
        try:
            yield opened
        finally:
            _close(opened)

    def _start(self, path: str | os.PathLike[str]) -> str:
        """The absolute, lexically normalized ``path``, under one of the roots; ``PathDenied``
        before any look at the disk if it is not, unless it only names a root through an alias
        (``/tmp/ws`` for ``/private/tmp/ws``)."""
        if not isinstance(path, str | os.PathLike):
            raise InputError(f"a path must be a string, got {type(path).__name__}")
        raw = os.fspath(path)
        if not isinstance(raw, str) or not raw or "\x00" in raw:
            raise InputError(f"not a usable path: {path!r}")
        try:
            raw = os.path.expanduser(raw)
            os.fsencode(raw)
        except (UnicodeError, ValueError):
            raise InputError(f"not a usable path: {path!r} (no file system name can hold it)") from None
        lexical = _normalized(raw if os.path.isabs(raw) else os.path.join(self.root, raw))
        if self.root_of(lexical) is None:
            real = _realpath(lexical)
            if self.root_of(real) is None:
                outside = f"{os.fspath(path)!r} is outside the workspace {self.root}{self._allowed_note()}"
                raise PathDenied(f"{outside} (add its directory to Workspace(allow_outside=...) to allow it)").to_model(
                    f"{outside}: the file tools reach only the files inside it"
                )
            lexical = real
        return lexical

    def _allowed_note(self) -> str:
        return f" or the allowed directories {', '.join(map(str, self.allowed))}" if self.allowed else ""

    def _walk(self, target: str, shown: str, how: _How) -> OpenedPath:
        """Open the normalized absolute ``target``; each symlink followed restarts the walk at
        the root its target lies in."""
        for _ in range(_MAX_SYMLINKS + 1):
            root = self.root_of(target)
            if root is None:
                real = _realpath(target)  # maybe back in through an alias of a root
                root = self.root_of(real)
                if root is None:
                    raise PathDenied(
                        f"{shown!r} resolves through a symlink to {real}, outside the workspace {self.root}"
                        f"{self._allowed_note()}"
                    )
                target = real
            rel = os.path.relpath(target, root)
            got = self._descend(root, [] if rel == "." else rel.split(os.sep), shown, how)
            if isinstance(got, OpenedPath):
                return got
            target = _normalized(got)
        raise FileUnreadable(f"{shown!r}: symlink loop (more than {_MAX_SYMLINKS} symlinks on the way)")

    def _descend(self, root: Path, parts: list[str], shown: str, how: _How) -> OpenedPath | str:
        """One walk from ``root`` down ``parts``: what was opened, or, when a symlink is to be
        followed, the absolute path it leads to (with the rest of ``parts``)."""
        fds: list[int] = []
        result: OpenedPath | str | None = None
        try:
            fds.append(os.open(root, _LIST if how.kind == "dir" and not parts else _TRAVERSE))
            if not parts:
                st = os.fstat(fds[0])
                if how.kind == "file":
                    raise FileUnreadable(f"{shown!r} is not a regular file: it is a directory")
                result = OpenedPath(root, "", None, fds[0] if how.kind == "dir" else None, st, shown)
                return result
            cur = str(root)
            for i, part in enumerate(parts[:-1]):
                step = self._enter(fds[-1], cur, part, shown, how)
                if isinstance(step, str):
                    result = os.path.join(step, *parts[i + 1 :])
                    return result
                if step is None:  # a directory on the way is missing, and that is allowed
                    result = OpenedPath(Path(cur, *parts[i:]), parts[-1], None, None, None, shown)
                    return result
                os.close(fds.pop())
                fds.append(step)
                cur = os.path.join(cur, part)
            dir_fd, name = fds[-1], parts[-1]
            if how.kind == "entry":
                try:
                    lst: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    if not how.missing_ok:
                        raise
                    lst = None
                if lst is not None and stat.S_ISLNK(lst.st_mode):
                    result = self._symlink(dir_fd, cur, name, shown, how)
                else:
                    result = OpenedPath(Path(cur, name), name, dir_fd, None, lst, shown)
                return result
            try:
                fds.append(os.open(name, _READ if how.kind == "file" else _LIST, dir_fd=dir_fd))
            except OSError as e:
                if _readlink(name, dir_fd) is not None:
                    result = self._symlink(dir_fd, cur, name, shown, how)
                    return result
                if how.kind == "dir" and e.errno == errno.ENOTDIR:
                    raise FileUnreadable(f"{shown!r} is not a directory") from None
                raise
            st = os.fstat(fds[-1])
            if how.kind == "file" and not stat.S_ISREG(st.st_mode):
                raise FileUnreadable(f"{shown!r} is not a regular file: it is {_kind_of(st.st_mode)}")
            result = OpenedPath(Path(cur, name), name, dir_fd, fds[-1], st, shown)
            return result
        except OSError as e:
            raise self._unreadable(shown, e) from None
        finally:
            kept = (result.dir_fd, result.fd) if isinstance(result, OpenedPath) else ()
            for fd in fds:
                if fd not in kept:
                    os.close(fd)

    def _enter(self, dir_fd: int, cur: str, part: str, shown: str, how: _How) -> int | str | None:
        """Open the directory ``part`` of ``dir_fd`` (creating it if allowed): its descriptor,
        or where the symlink there leads, or None if it is missing and that is allowed."""
        for _ in range(_RETRIES):
            try:
                return os.open(part, _TRAVERSE, dir_fd=dir_fd)
            except OSError as e:
                if _readlink(part, dir_fd) is not None:
                    return self._symlink(dir_fd, cur, part, shown, how)
                if e.errno != errno.ENOENT or not (how.create or how.missing_ok):
                    raise
                if not how.create:
                    return None
            try:
                os.mkdir(part, 0o777, dir_fd=dir_fd)
            except FileExistsError:
                pass  # created meanwhile by someone else: open that one
            except OSError as e:
                where = self.relpath(os.path.join(cur, part))
                raise InputError(f"{shown!r}: cannot create the directory {where} ({_strerror(e)})") from None
        raise FileUnreadable(f"{shown!r}: {self.relpath(os.path.join(cur, part))} keeps changing while it is opened")

    def _symlink(self, dir_fd: int, cur: str, name: str, shown: str, how: _How) -> str:
        """Where the symlink ``name`` in ``dir_fd`` (at ``cur``) leads, to be walked from a root
        again; ``PathDenied`` if symlinks are not followed on this walk."""
        link = _readlink(name, dir_fd)
        here = os.path.join(cur, name)
        if link is None:  # it stopped being a symlink in between: walk the same path again
            return here
        if not how.follow:
            raise PathDenied(
                f"{shown!r}: {self.relpath(here)} is a symlink (to {link}) where the checked path had none;"
                " nothing is opened through it"
            )
        return os.path.join(cur, link)

    def relpath(self, path: str | os.PathLike[str]) -> str:
        """``path`` relative to the workspace root (POSIX separators), or absolute if outside."""
        s = os.fspath(path)
        root = str(self.root)
        if s == root:
            return "."
        if _under(s, root):
            return Path(os.path.relpath(s, root)).as_posix()
        return s

    def is_secret(self, path: str | os.PathLike[str]) -> bool:
        """Whether the file name looks like a secret (and secrets are not allowed)."""
        if self.allow_secrets:
            return False
        name = os.path.basename(os.fspath(path)).lower()
        if name.endswith(_NOT_SECRET_SUFFIXES):
            return False
        return any(fnmatch.fnmatchcase(name, p) for p in self.secret_patterns)

    def secret_in_path(self, path: str | os.PathLike[str]) -> str | None:
        """``path`` (relative to its root) with its secrets redacted, if the redactor finds one in
        it (``keys/sk-proj-….txt``); else None. Such a file is never indexed: its path would be
        stored, and shown, as the object's ``meta.path``."""
        shown, n = self.redact(self.relpath(path))
        return shown if n else None

    def deny_secret_path(self, path: str | os.PathLike[str]) -> None:
        """``PathDenied`` if the redactor finds a secret in ``path`` (``secret_in_path``); the
        message shows the path redacted."""
        shown = self.secret_in_path(path)
        if shown is not None:
            raise PathDenied(
                f"{shown!r}: the file's path holds a secret; it is not indexed (its path would be stored"
                " and shown) and no file tool reads or writes it: rename it"
            )

    @staticmethod
    def recordable(path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` is text a store can hold: a name that is not valid UTF-8 comes from the
        file system as lone surrogates (``os.fsdecode``), which have no UTF-8 form."""
        try:
            os.fspath(path).encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True

    def deny_unrecordable(self, path: str | os.PathLike[str]) -> None:
        """``PathDenied`` if no file object can be made of the file at ``path``: its path holds a
        secret (``deny_secret_path``), or is not valid UTF-8 (``recordable``). Checked before
        anything is read or written: a write to such a path changed the disk, then failed."""
        self.deny_secret_path(path)
        if not self.recordable(path):
            raise PathDenied(
                f"'{_escaped(self.relpath(path))}': the file's path is not valid UTF-8; it is not indexed (no store"
                " holds such a path) and no file tool reads or writes it: rename it"
            )

    def is_ignored(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` lies inside an ignored directory (``.git``, ``node_modules``, …) of its root."""
        s = os.fspath(path)
        r = self.root_of(s)
        rel = os.path.relpath(s, r) if r is not None else s
        return any(part in self.ignored_dirs for part in Path(rel).parts[:-1])

    def walk(self, start: str | os.PathLike[str], *, limit: int | None = None) -> Iterator[tuple[Path, bool]]:
        """(path, is_dir) below the directory ``start`` in sorted order (each directory's
        subdirectories, then its files, then each subdirectory in turn), skipping ignored
        directories. Every directory is opened relative to its parent's descriptor; a symlink is
        listed as an entry (``is_dir`` False) and never followed. ``FileUnreadable`` if
        ``start`` is not a directory; a directory that cannot be listed is skipped."""
        n = 0
        with self.open(start, kind="dir") as top:
            assert top.fd is not None
            # depth first: one (descriptor, path, subdirectories not entered yet) per level
            levels: list[tuple[int, Path, Iterator[str]]] = []
            try:
                fd, here = os.dup(top.fd), top.path
                while fd >= 0:
                    dirs, files = self._list(fd)
                    levels.append((fd, here, iter(dirs)))
                    for d in dirs:
                        yield here / d, True
                    for f in files:
                        yield here / f, False
                    n += len(dirs) + len(files)
                    if limit is not None and n >= limit:
                        return
                    fd = -1
                    while levels and fd < 0:
                        parent, parent_path, pending = levels[-1]
                        name = next(pending, None)
                        if name is None:
                            os.close(levels.pop()[0])
                            continue
                        try:
                            fd = os.open(name, _LIST, dir_fd=parent)
                        except OSError:
                            continue  # gone, or swapped for a symlink since it was listed
                        here = parent_path / name
            except OSError as e:
                raise self._unreadable(top.shown, e) from None
            finally:
                for level in levels:
                    os.close(level[0])

    def _list(self, dir_fd: int) -> tuple[list[str], list[str]]:
        """(subdirectories not ignored, other entries) of an opened directory, each sorted."""
        dirs: list[str] = []
        others: list[str] = []
        try:
            with os.scandir(dir_fd) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                    if not is_dir:
                        others.append(entry.name)
                    elif entry.name not in self.ignored_dirs:
                        dirs.append(entry.name)
        except OSError:
            return [], []
        return sorted(dirs), sorted(others)

    # --- files ----------------------------------------------------------------------------

    def _unreadable(self, shown: str, e: OSError) -> FileUnreadable:
        if e.errno == errno.ELOOP:
            return FileUnreadable(f"{shown!r}: symlink loop ({_strerror(e)})")
        if e.errno == errno.ENOENT:
            return FileUnreadable(f"{shown!r}: no such file in the workspace {self.root}")
        if e.errno == errno.ENOTDIR:
            return FileUnreadable(
                f"{shown!r}: no such file in the workspace {self.root} (a part of the path is a file)"
            )
        if e.errno in (errno.EACCES, errno.EPERM):
            return FileUnreadable(f"{shown!r}: permission denied")
        return FileUnreadable(f"{shown!r}: cannot be read ({_strerror(e)})")

    def redact(self, text: str) -> tuple[str, int]:
        """``text`` with secrets removed, and how many were removed."""
        return self.redactor.redact(text)

    def snapshot(self, path: str | os.PathLike[str], *, read: bool = True) -> FileSnapshot:
        """Look at the file at the resolved ``path``: ``stat`` only, or also read, hash and decode it.

        A secret-looking file, or one above ``max_file_bytes``, is never read. Raises
        ``FileUnreadable`` for a missing file, a non-regular file (directory, FIFO, device: never
        opened blocking) or a permission error, ``PathDenied`` for a symlink anywhere on the
        path (a resolved path has none: it was swapped in since).
        """
        with self.open(path) as opened:
            return self.look(opened, read=read)[0]

    def look(self, opened: OpenedPath, *, read: bool = True) -> tuple[FileSnapshot, bytes | None]:
        """``snapshot`` of a file already opened (``open(kind="file")``), with the bytes it read
        (None when it read none): the inode and mtime are those of the open descriptor after the
        read, the size that of the bytes read."""
        st, path = opened.st, opened.path
        if st is None or opened.fd is None or not stat.S_ISREG(st.st_mode):
            raise FileUnreadable(f"{opened.shown!r} is not a regular file opened for reading")
        secret = self.is_secret(path)
        mime = mimetypes.guess_type(path.name, strict=False)[0]
        omitted = None
        size = st.st_size
        if secret:
            omitted = "looks like a secret file (.env, keys, certificates): metadata only"
        elif size > self.max_file_bytes:
            # before "not read yet": no read would load it, and a look that does not read (the
            # tracker's, activate's) must not record that one would, as a new version
            omitted = f"too large to store ({size:,} bytes; the cap is {self.max_file_bytes:,})"
        elif not read:
            omitted = "not read yet: read(path) loads it"
        if omitted is None:
            # at most one byte over the cap: a file that grew past it since the fstat (a log being
            # written) is too large all the same, and one that keeps growing is not read for ever
            data = opened.read(limit=self.max_file_bytes)
            # the mtime recorded is the one after the read: a write that landed while (or just
            # before) the bytes were read then shows as a change newer than them, never an older one
            with suppress(OSError):
                st = os.fstat(opened.fd)
            if len(data) <= self.max_file_bytes:
                return self._decode(path, st, data, mime), data
            size = max(st.st_size, len(data))
            omitted = f"too large to store ({size:,} bytes; the cap is {self.max_file_bytes:,})"
        snap = FileSnapshot(
            path,
            size,
            st.st_mtime_ns,
            st.st_dev,
            st.st_ino,
            "metadata",
            mime=mime or "application/octet-stream",
            secret=secret,
            omitted=omitted,
            ctime_ns=st.st_ctime_ns,
        )
        return snap, None

    def _decode(self, path: Path, st: os.stat_result, data: bytes, mime: str | None) -> FileSnapshot:
        sha = "b3:" + blake3.blake3(data).hexdigest()
        text: str | None = None
        replaced = 0
        if b"\x00" not in data:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = data.decode("utf-8", errors="replace")
                replaced = text.count("\ufffd") - data.count("\ufffd".encode())
                if replaced > _BINARY_REPLACED_SHARE * len(text):
                    text = None
        if text is None:
            kind = mime or "application/octet-stream"
            omitted = f"binary file ({len(data):,} bytes, {kind})"
            if _utf16(data):  # "binary" would tell the agent there is no text to convert
                omitted = f"UTF-16 text ({len(data):,} bytes, {kind}): only UTF-8 text is read"
            return FileSnapshot(
                path,
                len(data),
                st.st_mtime_ns,
                st.st_dev,
                st.st_ino,
                "content",
                sha=sha,
                binary=True,
                mime=kind,
                omitted=omitted,
                ctime_ns=st.st_ctime_ns,
            )
        text, redacted = self.redact(text)
        if redacted:
            sha = "b3r:" + blake3.blake3(text.encode("utf-8")).hexdigest()
        encoding = "utf-8" if not replaced else f"utf-8 ({replaced} undecodable sequences replaced with U+FFFD)"
        return FileSnapshot(
            path,
            len(data),
            st.st_mtime_ns,
            st.st_dev,
            st.st_ino,
            "content",
            sha=sha,
            text=text,
            binary=False,
            mime=mime or "text/plain",
            encoding=encoding,
            replaced=replaced,
            redacted=redacted,
            ctime_ns=st.st_ctime_ns,
        )
