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
* text is passed through the redactor (API-key-shaped strings removed) before it is stored.

This module knows nothing of sessions or the store: it turns paths into checked ``Path`` objects
and files into ``FileSnapshot`` values.
"""

from __future__ import annotations

import errno
import fnmatch
import mimetypes
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import blake3

from ..errors import FileUnreadable, InputError, PathDenied
from .redact import Redactor

__all__ = [
    "DEFAULT_IGNORED_DIRS",
    "DEFAULT_SECRET_PATTERNS",
    "FileSnapshot",
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
    """``b3:`` + blake3 hex of the bytes on disk (content mode only)."""
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

    @property
    def mtime_ms(self) -> int:
        return self.mtime_ns // 1_000_000


def _under(path: str, root: str) -> bool:
    return path == root or root == os.sep or path.startswith(root + os.sep)


def _strerror(e: OSError) -> str:
    return e.strerror or str(e)


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
    ``redact_patterns``: name → regex for the redactor (None: the defaults; ``{}`` with
    ``redact_generic=False``: no redaction). ``secret_patterns``, ``ignored_dirs``: see the
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

        Raises ``PathDenied`` if it lies outside the workspace and its allow-list (checked before
        anything else, so a denied path never reveals whether it exists), ``FileUnreadable`` if
        ``must_exist`` and it does not exist or sits behind a symlink loop.
        """
        if not isinstance(path, str | os.PathLike):
            raise InputError(f"a path must be a string, got {type(path).__name__}")
        raw = os.path.expanduser(os.fspath(path))
        if not raw or "\x00" in raw:
            raise InputError(f"not a usable path: {path!r}")
        lexical = os.path.normpath(raw if os.path.isabs(raw) else os.path.join(self.root, raw))
        real = os.path.realpath(lexical)
        if self.root_of(real) is None:
            if self.root_of(lexical) is not None:
                raise PathDenied(
                    f"{os.fspath(path)!r} resolves through a symlink to {real}, outside the workspace {self.root}"
                )
            allowed = f" or the allowed directories {', '.join(map(str, self.allowed))}" if self.allowed else ""
            raise PathDenied(
                f"{os.fspath(path)!r} is outside the workspace {self.root}{allowed}"
                " (add its directory to Workspace(allow_outside=...) to allow it)"
            )
        if must_exist:
            try:
                os.path.realpath(lexical, strict=True)
            except OSError as e:
                raise self._unreadable(os.fspath(path), e) from None
        else:
            # the nearest existing ancestor must resolve cleanly (no symlink loop on the way)
            probe = real
            while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
                probe = os.path.dirname(probe)
            try:
                os.path.realpath(probe, strict=True)
            except OSError as e:
                raise self._unreadable(os.fspath(path), e) from None
        return Path(real)

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

    def is_ignored(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` lies inside an ignored directory (``.git``, ``node_modules``, …) of its root."""
        s = os.fspath(path)
        r = self.root_of(s)
        rel = os.path.relpath(s, r) if r is not None else s
        return any(part in self.ignored_dirs for part in Path(rel).parts[:-1])

    def walk(self, start: Path, *, limit: int | None = None) -> Iterator[tuple[Path, bool]]:
        """(path, is_dir) below ``start`` in sorted order, skipping ignored directories; symlinks
        are listed but never followed."""
        n = 0
        for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d not in self.ignored_dirs)
            here = Path(dirpath)
            for d in dirnames:
                yield here / d, True
                n += 1
            for f in sorted(filenames):
                yield here / f, False
                n += 1
            if limit is not None and n >= limit:
                return

    # --- files ----------------------------------------------------------------------------

    def _unreadable(self, shown: str, e: OSError) -> FileUnreadable:
        if e.errno == errno.ELOOP:
            return FileUnreadable(f"{shown!r}: symlink loop ({_strerror(e)})")
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return FileUnreadable(f"{shown!r}: no such file in the workspace {self.root}")
        if e.errno in (errno.EACCES, errno.EPERM):
            return FileUnreadable(f"{shown!r}: permission denied")
        return FileUnreadable(f"{shown!r}: cannot be read ({_strerror(e)})")

    def redact(self, text: str) -> tuple[str, int]:
        """``text`` with API-key-shaped strings removed, and how many were removed."""
        return self.redactor.redact(text)

    def snapshot(self, path: Path, *, read: bool = True) -> FileSnapshot:
        """Look at the file at the resolved ``path``: ``stat`` only, or also read, hash and decode it.

        A secret-looking file, or one above ``max_file_bytes``, is never read. Raises
        ``FileUnreadable`` for a missing file, a non-regular file (directory, FIFO, device: never
        opened blocking), a symlink swapped in, or a permission error.
        """
        shown = self.relpath(path)
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags)
        except OSError as e:
            raise self._unreadable(shown, e) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                what = (
                    "a directory"
                    if stat.S_ISDIR(st.st_mode)
                    else "a FIFO"
                    if stat.S_ISFIFO(st.st_mode)
                    else "a socket"
                    if stat.S_ISSOCK(st.st_mode)
                    else "a device"
                )
                raise FileUnreadable(f"{shown!r} is not a regular file: it is {what}")
            secret = self.is_secret(path)
            mime = mimetypes.guess_type(path.name, strict=False)[0]
            omitted = None
            if secret:
                omitted = "looks like a secret file (.env, keys, certificates): metadata only"
            elif not read:
                omitted = "not read yet: read(path) loads it"
            elif st.st_size > self.max_file_bytes:
                omitted = f"too large to store ({st.st_size:,} bytes; the cap is {self.max_file_bytes:,})"
            if omitted is not None:
                return FileSnapshot(
                    path,
                    st.st_size,
                    st.st_mtime_ns,
                    st.st_dev,
                    st.st_ino,
                    "metadata",
                    mime=mime or "application/octet-stream",
                    secret=secret,
                    omitted=omitted,
                )
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            data = b"".join(chunks)
        except OSError as e:
            raise self._unreadable(shown, e) from None
        finally:
            os.close(fd)
        return self._decode(path, st, data, mime)

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
                omitted=f"binary file ({len(data):,} bytes, {kind})",
            )
        text, redacted = self.redact(text)
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
        )
