"""The one exception tree of context_os.

Every error the library raises on purpose is a ``ContextOSError``. Backend exceptions
(sqlite3, HTTP, EDN parsing) are translated at the store boundary and never leak.

    ContextOSError
    ├── ConfigError              bad store URL, bad policy value, missing setting
    ├── EmbedderUnavailable      an embedder cannot embed (package missing, endpoint failing):
    │                            recall falls back to keywords alone
    ├── HashError                a stored document no longer matches its hashes
    ├── MeshError                the agent mesh could not do it: a peer unreachable or silent past
    │   │                        the deadline, a refused request, a node not running
    │   └── MeshUnavailable      the libp2p stack is not installed (the mesh extra)
    ├── StoreError               anything the store could not do
    │   ├── StoreUnavailable     the backend cannot be reached (connection refused, timeout)
    │   │   └── StoreUnreachable not even connected: nothing was sent, nothing changed
    │   ├── SchemaError          the store's schema is newer than this library
    │   ├── StoreCorrupt         stored data is damaged (a document that does not parse, a failed
    │   │                        integrity check); names the document version when known
    │   └── NotFound             no document with that id (at that time), or no store at that place
    ├── InputError               a harness message or argument we cannot accept
    │   ├── MalformedMessage     wrong shape / unknown role / bad field; names index and field
    │   ├── ContentTooLarge      a single field exceeds the configured cap
    │   ├── PathDenied           a path outside the workspace and its allow-list, or escaping it by symlink
    │   └── FileUnreadable       a named file cannot be read: missing, not a regular file, a symlink
    │                            loop, permission denied
    ├── StateError               an operation the context model forbids
    │   ├── LockedObject         deactivating a locked object (chat, system prompt)
    │   └── SessionBusy          another writer holds the session (one writer per session)
    └── InvalidOutput            an assembled context failed validation (a bug: please report)

This module must never import anything from the rest of the package.
"""

from __future__ import annotations

from typing import Self

__all__ = [
    "ConfigError",
    "ContentTooLarge",
    "ContextOSError",
    "EmbedderUnavailable",
    "FileUnreadable",
    "HashError",
    "InvalidOutput",
    "InputError",
    "LockedObject",
    "MalformedMessage",
    "MeshError",
    "MeshUnavailable",
    "NotFound",
    "PathDenied",
    "SchemaError",
    "SessionBusy",
    "StateError",
    "StoreCorrupt",
    "StoreError",
    "StoreUnavailable",
    "StoreUnreachable",
]


class ContextOSError(Exception):
    """Base of every error context_os raises on purpose."""

    for_model: str | None = None
    """What a model reads of this error when a tool it called raised it (None: the message), for
    a message whose hint is for a program or a user (a Python call, a command line): the same
    error with what the model can do instead, in terms of its tools."""

    def to_model(self, text: str) -> Self:
        """This error, read by a model as ``text`` (``for_model``)."""
        self.for_model = text
        return self


class ConfigError(ContextOSError):
    """A setting (store URL, policy value, environment variable) is invalid."""


class EmbedderUnavailable(ContextOSError):
    """An embedder could not embed: its package is missing, or its endpoint failed or answered
    something that is not embeddings. Recall then falls back to keywords alone."""


class HashError(ContextOSError):
    """A document's recorded hashes do not match its content."""


class MeshError(ContextOSError):
    """The agent mesh could not do it: a peer unreachable or silent past the deadline, a refused
    request, a node that is not running."""


class MeshUnavailable(MeshError):
    """The libp2p stack is not installed (the ``mesh`` extra: its message names the command)."""


class StoreError(ContextOSError):
    """The store could not carry out an operation."""


class StoreClosed(StoreError):
    """The store was closed by its owner: nothing more can be read or written through it (a
    background worker reading it stops)."""


class StoreUnavailable(StoreError):
    """The store backend cannot be reached."""


class StoreUnreachable(StoreUnavailable):
    """No connection to the backend could be opened: the request was never sent, so nothing
    changed (a write may safely wait and be sent later; see store/outbox.py)."""


class SchemaError(StoreError):
    """The on-disk schema is unknown to (newer than) this version of context_os."""


class StoreCorrupt(StoreError):
    """The store's data is damaged: a stored document no longer parses, a row points at nothing,
    the backend's own integrity check fails. ``id`` and ``tx_id`` name the document version
    when the damage is in one."""

    def __init__(self, message: str, *, id: str | None = None, tx_id: int | None = None):
        self.id = id
        self.tx_id = tx_id
        super().__init__(message)


class NotFound(StoreError):
    """No document with that id exists at the requested time; or there is no store where one was
    required to exist (``open_store(url, create=False)``)."""


class InputError(ContextOSError):
    """Input from a harness or a caller cannot be accepted."""


class MalformedMessage(InputError):
    """A harness message is malformed. ``index`` and ``field`` name the culprit."""

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None):
        self.index = index
        self.field = field
        where = []
        if index is not None:
            where.append(f"message {index}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class ContentTooLarge(MalformedMessage):
    """A single message field is larger than the configured cap."""


class PathDenied(InputError):
    """A path the workspace policy refuses: outside the workspace and its allow-list, directly or
    through a symlink."""


class FileUnreadable(InputError):
    """A named file cannot be read: it does not exist, is not a regular file (a directory, a FIFO,
    a device), sits behind a symlink loop, or reading it was refused by the OS."""


class StateError(ContextOSError):
    """The context model forbids this operation."""


class LockedObject(StateError):
    """The object is locked (e.g. the chat or the system prompt) and cannot be deactivated."""


class SessionBusy(StateError):
    """Another writer holds the session: another process that has it open, or a newer ``Session``
    of it in this process. One writer per session (context/lease.py)."""


class InvalidOutput(ContextOSError):
    """An assembled context failed validation (an orphaned tool call or result, a wrong end)."""
