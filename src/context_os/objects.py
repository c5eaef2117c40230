"""Document models: the objects context_os keeps, and references to them.

A document is what the store holds: ``id`` (kind-prefixed string), ``kind``, ``content`` (the
default content field: what "active" loads into context), ``meta`` (what "inactive" shows) and
its three hashes (see hashing.py). Models here validate and build documents; the store itself
only ever sees plain JSON-able dicts, so no store knows these classes.

This module must never import from ``store``, ``context`` or ``harness``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .hashing import doc_hashes, encode_doc, hash_value

__all__ = [
    "INDEXED_KINDS",
    "KINDS",
    "FileMeta",
    "FrameContent",
    "StateContent",
    "StateMeta",
    "AnyDoc",
    "BlockDoc",
    "ChatDoc",
    "DocBase",
    "FileDoc",
    "FrameDoc",
    "LeaseDoc",
    "SessionDoc",
    "SourceDoc",
    "StateDoc",
    "StaticRef",
    "TombstoneDoc",
    "ToolcallDoc",
    "index_parts",
    "make_id",
    "parse_doc",
]

KINDS = (
    "session",
    "chat",
    "toolcall",
    "file",
    "frame",
    "block",
    "state",
    "lease",
    "tombstone",
    "memory",
    "message",
    "recall",
)


def make_id(kind: str, *parts: str | int) -> str:
    """A kind-prefixed id, e.g. ``make_id("toolcall", "s1", "call_9")`` → ``toolcall:s1:call_9``."""
    return ":".join([kind, *(str(p) for p in parts)])


class DocBase(BaseModel):
    """Fields every document has. Subclasses narrow ``kind``, ``content`` and ``meta``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """Kind-prefixed, stable across versions (``file:…`` keeps its id across renames)."""
    kind: str
    """The kind tag; also the id prefix."""
    content: Any = None
    """The default content field: what activating the object loads into context."""
    meta: dict[str, Any] = Field(default_factory=dict)
    """Metadata: what the metadata pool shows while the object is inactive."""

    def encode(
        self, content_json: tuple[bytes, bool] | None = None, content_stored: bytes | None = None
    ) -> tuple[dict[str, Any], bytes | None]:
        """``to_doc``, and the document's JSON exactly as a store writes it when it has one form
        (``hashing.encode_doc``: what ``Put.json`` carries). ``content_json``: the content's
        canonical JSON and whether the content is plain, when the caller has them;
        ``content_stored``: its JSON as a store writes it, when not plain and known."""
        return encode_doc(self.id, self.kind, self.content, self.meta, content_json, content_stored)

    def to_doc(self) -> dict[str, Any]:
        """The plain dict the store keeps, with its three hashes."""
        doc: dict[str, Any] = {"id": self.id, "kind": self.kind, "content": self.content, "meta": self.meta}
        doc.update(doc_hashes(doc))
        return doc


# --- typed meta: the fields each kind's documents carry (the store sees plain dicts) --------------


class FileMeta(TypedDict):
    """``meta`` of a ``file`` document (files/index.py writes it)."""

    path: str
    """Relative to the workspace root (POSIX separators), or absolute if outside."""
    abs_path: str
    workspace: str | None
    name: str
    version: int
    """1 for the first version, +1 for every new one."""
    indexed: Literal["content", "metadata"]
    """``content``: the text was read; ``metadata``: only stat (discovered, secret, too large)."""
    missing: bool
    cause: str
    """What recorded this version: read, write, edit, tracker, discovered, observed, …"""
    tokens: int
    size: NotRequired[int]
    mtime: NotRequired[int]
    inode: NotRequired[str]
    sha: NotRequired[str | None]
    """``b3:`` + blake3 of the bytes on disk (content mode only)."""
    binary: NotRequired[bool | None]
    mime: NotRequired[str]
    chars: NotRequired[int]
    lines: NotRequired[int]
    encoding: NotRequired[str | None]
    redacted: NotRequired[int]
    secret: NotRequired[bool]
    context_chars: NotRequired[int]
    """Shown in the active pool only up to this many characters (a large file)."""
    content_omitted: NotRequired[str | None]
    """Why there is no content (binary, secret, too large, missing, evicted bytes)."""
    diff: NotRequired[str | None]
    lines_added: NotRequired[int]
    lines_removed: NotRequired[int]
    renamed_from: NotRequired[str]
    missing_reason: NotRequired[str]
    last_inode: NotRequired[str]
    """On a missing version: the inode the file had when last seen (with ``last_size`` and
    ``last_mtime``), to know it again if it turns up at another path."""
    last_size: NotRequired[int | None]
    last_mtime: NotRequired[int | None]
    last_sha: NotRequired[str | None]
    """On a missing version: the hash of the bytes the file last had (a content-mode file): a
    file touched or rewritten with the same bytes, then moved, while nothing recorded its new
    stat, is known again by its inode and these bytes."""
    evicted_bytes: NotRequired[bool]
    """The file on disk still holds bytes that were evicted: indexed metadata-only until it changes."""
    virtual: NotRequired[bool]
    """A replay's file, known only from a recorded transcript (no file on disk)."""
    lines_known: NotRequired[int]
    changes: NotRequired[int]
    edits: NotRequired[int]


class FrameContent(TypedDict):
    """``content`` of a ``frame`` document: everything needed to re-render and verify one turn."""

    turn: int
    basis_tx_id: NotRequired[int]
    """Frames written before a turn took one transaction: the transaction whose store state the
    turn was rendered from. Absent: the frame's own (``frames.frame_basis``)."""
    valid_time: int
    rendered_hash: str
    tokens: int
    """Tokens assembled (``tokens_assembled`` in every read model)."""
    tokens_full: int
    messages: int
    active: list[str]
    refs: list[dict[str, Any]]
    """Static refs (id, valid time, tx id, object hash) of everything rendered; full chat pages as
    one aggregate ref (``sealed_pages``, ``pages_hash``). A version written in the frame's own
    transaction has tx id None (``frames.ref_tx``)."""
    tail_layout: NotRequired[int]
    """2: ``blocks`` names the block documents in order; 1: ``tail_at``; absent: one block."""
    blocks: NotRequired[list[list[Any]]]
    """``[position or None (the end), block id, hash of its message]`` of every block in order."""
    layout: NotRequired[int]
    """How it was rendered (view.LAYOUT); absent: 1."""
    managed: NotRequired[bool]
    """False: the session still passed through unchanged (policy ``manage_from_tokens``)."""
    horizon: NotRequired[int]
    """The first chat entry the history showed (the history horizon; absent: 0, none)."""
    thinking_horizon: NotRequired[int]
    """Assistant messages before this chat entry showed without their reasoning (absent: 0)."""
    tail_at: NotRequired[list[int | None]]
    pools: NotRequired[dict[str, int]]
    """Tokens by pool (``chat``, ``metadata``, ``active``, ``recall``; view.POOLS); absent in
    frames written before pools were recorded."""
    prefix_tokens: NotRequired[int]
    """Tokens the previous frame sent too, as the prefix of this one (a prompt cache's share)."""
    changes: NotRequired[list[dict[str, Any]]]
    """Objects whose state changed since the previous frame (at most 200, in the order of their
    last change): ``id``, ``state``, ``pinned``, ``collapsed``, and who (``actor``) and why
    (``reason``) changed it last."""
    changes_total: NotRequired[int]
    """How many objects changed state since the previous frame (``changes`` may list fewer)."""
    seen_tx: NotRequired[int]
    """The newest transaction of which the turn had read what others wrote (an eviction, a
    newer version), before it wrote this frame: one after it (an eviction landing while the
    turn assembled) the frame did not take in, and explains what it showed that is now erased.
    Absent in frames written before 2026-12-01 (then its basis stands for it)."""
    sent_total: NotRequired[int]
    """Tokens of every frame the session's process had sent since it opened the session, this
    one's included, as the prompt cache's allowance counts them (``cache_break_percent``); a
    reopened session goes on from its last frame's. Absent before 2026-12-01."""
    uncached_total: NotRequired[int]
    """Of ``sent_total``, the tokens that were not a prefix of the frame before."""


class StateContent(TypedDict):
    """``content`` of a ``state`` document: an object's state in a session."""

    state: Literal["active", "inactive", "absent"]
    pinned: bool
    collapsed: bool
    file_text: NotRequired[list[str]]
    """A tool result whose call showed a file's text: the keys of its arguments holding it
    (``view.ObjInfo.file_text``); absent for any other object."""


class StateMeta(TypedDict):
    """``meta`` of a ``state`` document: who changed it, why, when."""

    session: str
    object: str
    actor: Literal["agent", "policy", "system", "user"]
    reason: str
    turn: int
    seq: int
    since: int
    uses: NotRequired[float]
    """The object's uses as of ``since`` (``policy.use_score``; states written before it: 1)."""
    shown: NotRequired[list[int]]
    """``[valid_time, tx_id]`` of the exact version shown (not for tool results)."""
    newer: NotRequired[dict[str, Any] | None]
    focus: NotRequired[list[list[int]]]


class SessionDoc(DocBase):
    """One agent session. ``meta`` carries ``harness``, ``workspace``, ``cursor``, ``turn``."""

    kind: Literal["session"] = "session"


class ChatDoc(DocBase):
    """One page of a session's chat document: ``content`` is a list of chat entries.

    The chat is stored in fixed-size pages (``chat:<session>:<page>``) so that appending a
    message rewrites one page, not the whole history. Together the pages are the chat document.
    """

    kind: Literal["chat"] = "chat"
    content: list[dict[str, Any]] = Field(default_factory=list)


class ToolcallDoc(DocBase):
    """One tool call; ``content`` is the tool output, ``meta`` the call (name, arguments, turn)."""

    kind: Literal["toolcall"] = "toolcall"
    content: str | None = None


class FileDoc(DocBase):
    """One file the agent touched; ``content`` is its text (None for binary or missing files)."""

    kind: Literal["file"] = "file"
    content: str | None = None


class FrameDoc(DocBase):
    """One assembled context: static refs of what was rendered, token counts, rendered hash."""

    kind: Literal["frame"] = "frame"
    content: dict[str, Any]


class BlockDoc(DocBase):
    """The text of one block of a rendered context (``block:<session>:<hash>``): an object as the
    active pool showed it, a patch of it, or the object index. ``meta.object`` names the object
    (``index`` for the index); frames name their blocks, and re-render from them."""

    kind: Literal["block"] = "block"
    content: str


class StateDoc(DocBase):
    """The state of one object in one session; every version is one recorded state change.

    ``content`` = ``{"state": "active"|"inactive"|"absent", "pinned": bool}``;
    ``meta`` = ``{"session", "object", "actor", "reason", "turn"}``.
    """

    kind: Literal["state"] = "state"
    content: dict[str, Any]


class LeaseDoc(DocBase):
    """Which writer holds a session (``lease:<session>``): ``content`` = ``{"holder", "host",
    "pid", "started", "pidns", "acquired", "expires"}`` (``expires`` 0: released; ``pidns``, the
    holder's PID namespace, absent before 2026-12-01). See context/lease.py."""

    kind: Literal["lease"] = "lease"
    content: dict[str, Any]


def path_key(abs_path: str) -> str:
    """What a tombstone of a file keeps of its absolute path (``meta.path_key``): its hash, so
    the file index finds the tombstones of a path without the path itself, which may hold the
    secret that was evicted (a file named after a key)."""
    return hash_value("path:" + abs_path)


class TombstoneDoc(DocBase):
    """What is left of an evicted object (``tombstone:<id>``): ``meta`` = ``{"object",
    "object_kind", "session"?, "path_key"?}`` (tombstones written before 2026-11-30 have
    ``abs_path`` instead); ``content`` = when and why, and what writers need to carry on without
    it (a chat page's scrubbed entries, an evicted file's hashes). Never the evicted content, nor
    the path. See context/evict.py."""

    kind: Literal["tombstone"] = "tombstone"
    content: dict[str, Any]


class SourceDoc(DocBase):
    """An item contributed by an object source (memory, mesh message, …), with provenance."""

    kind: Literal["memory", "message", "recall"]
    content: str | None = None


AnyDoc = Annotated[
    SessionDoc | ChatDoc | ToolcallDoc | FileDoc | FrameDoc | BlockDoc | StateDoc | LeaseDoc | TombstoneDoc | SourceDoc,
    Field(discriminator="kind"),
]
_any_doc: TypeAdapter[Any] = TypeAdapter(AnyDoc)


def parse_doc(doc: dict[str, Any]) -> DocBase:
    """Validate a stored dict into its typed model (hash fields are dropped, not checked)."""
    fields = {k: doc[k] for k in ("id", "kind", "content", "meta") if k in doc}
    parsed: DocBase = _any_doc.validate_python(fields)
    return parsed


class StaticRef(BaseModel):
    """Exactly one version of one object: id + valid time + tx id + object hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """The object's id (a dynamic ref is just this)."""
    valid_time: int
    """Valid time of the version, epoch milliseconds UTC."""
    tx_id: int
    """Transaction that wrote the version."""
    object_hash: str
    """The version's object hash, so the ref can be verified."""


INDEXED_KINDS = ("chat", "toolcall", "file", "memory", "message", "recall")
"""The kinds whose text the stores' keyword index holds (``index_parts``); never frames, blocks,
states, leases, tombstones or sessions: they hold bookkeeping, or text indexed elsewhere."""


def index_parts(doc: Any) -> list[tuple[str, str]]:
    """The ``(part, text)`` pairs of a stored document that keyword (and vector) recall index.

    * ``chat`` pages: one part per entry with text, ``"e<i>"`` where ``i`` is the entry's ``i``;
    * ``toolcall``: ``""`` = the tool output, with the call's arguments when ``meta`` has them;
    * ``file``, ``memory``, ``message``, ``recall``: ``""`` = the content;
    * any other kind, a deletion, or a document that is not of its kind's shape: nothing.

    Pure and total: it reads plain stored dicts (no validation) and never raises, because the
    stores call it on every version they write or rebuild from.
    """
    if not isinstance(doc, dict):
        return []
    kind, content = doc.get("kind"), doc.get("content")
    if kind == "chat":
        parts: list[tuple[str, str]] = []
        for entry in content if isinstance(content, list) else ():
            if not isinstance(entry, dict):
                continue
            i, text = entry.get("i"), entry.get("text")
            if isinstance(i, int) and not isinstance(i, bool) and isinstance(text, str) and text.strip():
                parts.append((f"e{i}", text))
        return parts
    if kind == "toolcall":
        meta = doc.get("meta")
        args = meta.get("arguments") if isinstance(meta, dict) else None
        texts = [t for t in (args if isinstance(args, str) else None, content) if isinstance(t, str) and t.strip()]
        return [("", "\n".join(texts))] if texts else []
    if kind in INDEXED_KINDS and isinstance(content, str) and content.strip():
        return [("", content)]
    return []
