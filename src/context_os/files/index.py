"""File objects: one versioned ``file:…`` document per file, whose id survives renames.

This module is the only writer of file documents: ``FileIndex`` for files on disk (the file
tools and the tracker both go through it), ``record_virtual`` for files known only from a
recorded transcript (the replay's virtual files). A file gets a random id (``file:<uuid4 hex>``)
the first time it is indexed and keeps it through edits, renames and deletion; it is found by
path with ``store.find("file", {"abs_path": ...})``.

Two modes, recorded as ``meta.indexed``:

* ``content``: the file was read (``read``, ``write``, ``edit``): ``content`` is its text
  (``None`` for binary files), ``meta.sha`` the blake3 of its bytes; a new version only when that
  hash changes, so saving unchanged bytes is a no-op (the tracker corrects the stat of the
  version in force then: ``refresh(record_stat=True)``).
* ``metadata``: the file was only discovered (``ls``/``find``/``grep``), or it is a secret or too
  large: no content, no hash; a new version when its size or mtime changes. Reading it later
  switches it to ``content`` mode for good.

Valid time of a file's first version is its mtime (ms); of a later one, when the text came to
the path (``FileSnapshot.changed_ms``, the later of mtime and ctime: a backup restored keeps an old
mtime, a file moved over it brings one), never before the transaction that recorded the version
before (the disk held that one then) nor its valid time + 1 ms, so a file's history is always in
order; both clamped to now, and never in the future either (``next_valid_time`` waits the clock
out), so a read right after a write sees it. Renames and deletions happen "now". Writes are
compare-and-set (``Match`` on the version they replace), so two writers (the tools and the
tracker, or two processes) never record one change twice; a version that brings an object to a
path (a new file, a move) also claims the path (``file-claim:<path_key>``, compare-and-set too),
so two processes indexing one new file at once make one object of it, not two.

This module never touches a session: showing a version to the agent is the tools' job.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import stat
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from ..errors import InputError, NotFound, StoreError
from ..hashing import hashed
from ..objects import KINDS, FileDoc, path_key
from ..store.base import Match, Op, Put, Store, Tx, Version, next_valid_time, now_ms
from ..tokens import estimate_tokens
from .workspace import FileSnapshot, Workspace

__all__ = ["FileIndex", "Indexed", "IndexStatus", "file_key", "file_meta_summary", "find_file_object", "record_virtual"]

IndexStatus = Literal["new", "already indexed", "new version", "unsettled"]
"""``unsettled``: nothing was written, because the ``settled`` check given to ``refresh`` said the
file looked mid-write (only the file tracker asks)."""

EVICTED_BYTES = "these bytes were evicted from the store (ctxos objects evict): change the file to index it again"
"""Why a file whose bytes were evicted is indexed metadata-only."""

MATCH_HORIZON_MS = 60_000
"""The compare-and-set checks the version in force this far ahead of now: later than any valid
time a concurrent writer can have used, so a concurrent version is always seen."""

DIFF_MAX_INPUT_CHARS = 2_000_000
"""Above this many characters (old + new) no diff is computed (difflib is quadratic at worst)."""

_ATTEMPTS = 5

CLAIM = "file-claim:"
"""The id prefix of the documents that say which object a path was last brought to (``content``:
its id): each version that creates an object or moves one to a path replaces it, on the
condition that it is still as read before looking the path up."""


def claim_id(abs_path: str) -> str:
    """The id of the claim of ``abs_path``: its hash, never the path (which may hold a secret)."""
    return CLAIM + path_key(abs_path)


TRACKED_META = ("abs_path", "missing", "size", "mtime", "inode")
"""The meta fields the file tracker keeps of each file (``FileIndex.indexed_meta``)."""

RESTATS_PER_TX = 200
"""Stat corrections written together by ``restats_batched`` go in transactions of this many."""


@dataclass(frozen=True)
class Indexed:
    """The outcome of indexing one file."""

    id: str
    status: IndexStatus
    version: Version
    """The version now in force (with its document)."""
    changes: tuple[str, ...] = ()
    """What the new version changed: ``created``, ``content``, ``read``, ``path``, ``missing``,
    ``recreated``, ``stat``. Empty when nothing changed."""
    seen: tuple[int, int, str] | None = None
    """``already indexed`` after a look at the disk: the (size, mtime in ms, inode) it found, which
    can differ from the version's (a file touched, or rewritten with the same bytes)."""

    @property
    def meta(self) -> dict[str, Any]:
        assert self.version.doc is not None
        meta: dict[str, Any] = self.version.doc["meta"]
        return meta

    @property
    def content(self) -> str | None:
        assert self.version.doc is not None
        content: str | None = self.version.doc.get("content")
        return content


def file_meta_summary(meta: dict[str, Any]) -> dict[str, Any]:
    """The few meta fields a tool result reports about a file version."""
    keys = (
        "path",
        "version",
        "size",
        "tokens",
        "missing",
        "binary",
        "mime",
        "encoding",
        "redacted",
        "secret",
        "context_chars",
        "content_omitted",
        "lines_added",
        "lines_removed",
    )
    return {k: meta[k] for k in keys if meta.get(k) not in (None, False, 0) or k in ("path", "version")}


def _rows(text: str) -> list[str]:
    """``text``'s lines, each with its line break: split at line feeds only, as ``lines``, git and
    editors count them (``str.splitlines`` also splits at a form feed, a lone CR, U+2028…, which
    put the hunks' line numbers off and a "No newline at end of file" inside the diff)."""
    rows = [row + "\n" for row in text.split("\n")]
    rows[-1] = rows[-1][:-1]
    return rows if rows[-1] else rows[:-1]


def _diff(old: str, new: str, old_path: str, new_path: str, cap: int) -> tuple[str | None, int, int, str | None]:
    """(unified diff capped to ``cap`` chars, lines added, lines removed, why omitted)."""
    if len(old) + len(new) > DIFF_MAX_INPUT_CHARS:
        return None, 0, 0, "the file is too large for a diff"
    lines = list(difflib.unified_diff(_rows(old), _rows(new), f"a/{old_path}", f"b/{new_path}", n=3))
    added = sum(1 for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    text = "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines)
    if len(text) > cap:
        text = text[:cap] + f"\n[... diff truncated: {len(text) - cap:,} more characters]\n"
    return text, added, removed, None


def record_virtual(
    store: Store,
    obj_id: str,
    *,
    abs_path: str,
    root: str | None,
    text: str | None,
    version: int,
    cause: str,
    omitted: str | None = None,
    extra: Mapping[str, Any] | None = None,
    at: int | None = None,
    after: int | None = None,
) -> Version:
    """The virtual mode of the file index: a version of a file that is not on disk (a recorded
    session's file, known only from its transcript; ``meta.virtual``). ``text`` is what is known
    of it (None: nothing usable, ``omitted`` says why); valid from ``at`` (the message's time,
    default now), after ``after`` (the previous version's valid time). Returns the version."""
    rel = abs_path[len(root) + 1 :] if root and abs_path.startswith(root + "/") else abs_path
    meta: dict[str, Any] = {
        "path": rel,
        "abs_path": abs_path,
        "workspace": root,
        "name": abs_path.rsplit("/", 1)[-1],
        "version": version,
        "indexed": "content",
        "virtual": True,
        "cause": cause,
        "missing": False,
        **(extra or {}),
    }
    if text is not None:
        meta.update(chars=len(text), tokens=estimate_tokens(len(text)))
    else:
        meta.update(tokens=0, content_omitted=omitted)
    vt = next_valid_time(after, at=at)
    doc, encoded = FileDoc(id=obj_id, content=text, meta=meta).encode()
    tx = store.submit([Put(doc, vt, json=encoded)])
    return Version(obj_id, vt, tx.id, tx.time, doc)


def _regular(path: str) -> bool:
    """Whether ``path`` names a regular file (not a symlink to one)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def file_key(path: str) -> tuple[str, int, int] | None:
    """(inode as ``dev:ino``, size, mtime in ms) of the regular file at ``path``: what a file
    moved elsewhere is known again by (``meta.inode``, ``size``, ``mtime``); None if there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return f"{st.st_dev}:{st.st_ino}", st.st_size, st.st_mtime_ns // 1_000_000


class FileIndex:
    """Creates and updates file objects in ``store`` for files of ``workspace``. Thread-safe."""

    def __init__(self, store: Store, workspace: Workspace, *, max_diff_chars: int = 4000):
        self.store = store
        self.workspace = workspace
        self.max_diff_chars = max_diff_chars
        self._lock = threading.RLock()
        self._listeners: list[Callable[[Version], None]] = []
        self._local = threading.local()  # .restats: the stat corrections queued by this thread

    # --- listeners -------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[Version], None]) -> None:
        """Call ``listener(version)`` after every file version this index writes."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[Version], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    # --- reads -----------------------------------------------------------------------------

    def lookup(self, path: str | Path) -> Version | None:
        """The file object at the resolved absolute ``path`` (a present one before a missing one);
        None for a path no store holds (not valid UTF-8), of which there is none."""
        if not self.workspace.recordable(path):
            return None
        hits = [v for v in self.store.find("file", {"abs_path": str(path)}) if v.doc]
        if not hits:
            return None
        hits.sort(key=lambda v: (bool(v.doc and v.doc["meta"].get("missing")), -v.valid_time, v.id))
        return hits[0]

    def latest(self, obj_id: str) -> Version | None:
        v = self.store.get(obj_id)
        return v if v is not None and v.doc is not None else None

    def indexed(self) -> list[Version]:
        """Every file object of this workspace, missing ones included."""
        where = {"workspace": str(self.workspace.root)}
        return [v for v in self.store.find("file", where) if v.doc]

    def indexed_meta(self, keys: tuple[str, ...] = TRACKED_META) -> list[tuple[str, dict[str, Any]]]:
        """(id, those ``keys`` of its meta) of every file object of this workspace, missing ones
        included: ``indexed`` without reading each document whole (their text, their diff)."""
        return self.store.find_meta("file", {"workspace": str(self.workspace.root)}, keys)

    # --- writes ----------------------------------------------------------------------------

    def index(self, path: Path, *, read: bool, cause: str) -> Indexed:
        """Index the file at the resolved ``path``: create its object, or record a new version
        if it changed. ``read``: load its content (else metadata only, unless the object is
        already in content mode). Raises ``FileUnreadable`` if the file cannot be read,
        ``PathDenied`` if its path cannot be recorded (``Workspace.deny_unrecordable``)."""
        self.workspace.deny_unrecordable(path)  # (before a lookup: no store takes a path not UTF-8)
        with self._lock:
            for _ in range(_ATTEMPTS):
                prev, claim = self.lookup(path), None
                if prev is None:
                    # a new object, or one moved here: the path's claim read before looking again,
                    # so that another process's object made since changes what the write matches
                    claim = self.store.get(claim_id(str(path)))
                    prev = self.lookup(path)
                result = self._update(
                    prev if prev is not None else self._moved_here(path),
                    path,
                    read=read,
                    cause=cause,
                    claim=(claim,) if prev is None else None,
                )
                if result is not None:
                    return result
        raise StoreError(f"{path}: the file object kept changing under a concurrent writer")

    def _moved_here(self, path: Path) -> Version | None:
        """The object of an indexed file that was moved to the unindexed ``path`` before a
        tracker recorded the move (a read of the new name right after ``mv``): same inode as
        recorded, the same size and mtime or, where they differ (a ``touch`` or a same-bytes
        rewrite in place that no tracker saw), the same bytes, and its own path no longer holding
        that inode. Else None: a new file. Without this the file became a second object, and the
        move, once the tracker saw it, marked the object just read missing (\"replaced by\" the
        first). An object recorded missing since is found by the inode, size, mtime and bytes it
        last had (``meta.last_inode``…): a file moved while no tracker ran, whose old path the
        next ``start()`` found empty."""
        key = file_key(str(path))
        if key is None:
            return None
        inode, seen = key[0], key[1:]
        # a present object, or one recorded missing since (a tracker's start found its path empty:
        # the move was made while none ran), by what it was when last seen
        present = [
            (v, (v.doc["meta"].get("size"), v.doc["meta"].get("mtime")), v.doc["meta"].get("sha"))
            for v in self.store.find("file", {"inode": inode})
            if v.doc and not v.doc["meta"].get("missing")
        ]
        gone = [
            (v, (v.doc["meta"].get("last_size"), v.doc["meta"].get("last_mtime")), self._last_sha(v))
            for v in self.store.find("file", {"last_inode": inode})
            if v.doc and v.doc["meta"].get("missing")
        ]
        sha: str | None = None  # of the bytes at ``path``, read only if a stat differs
        for v, was, had in [*present, *gone]:
            meta = v.doc["meta"] if v.doc else {}
            if meta.get("workspace") is None:
                continue
            try:
                old = os.stat(str(meta["abs_path"]))
            except OSError:
                old = None
            if old is not None and f"{old.st_dev}:{old.st_ino}" == inode:
                continue  # its own path still holds this file: ``path`` is another name of it (a hard link)
            if was != seen:
                # touched, or rewritten in place with the same bytes, where nothing recorded the
                # new stat (no tracker ran): the same inode holding the same bytes is that file;
                # but no bytes identify nothing (``rm a/__init__.py; touch b/__init__.py``: the
                # file system gives the new empty file the freed inode)
                if had is None or not seen[0]:
                    continue
                if sha is None:
                    try:
                        sha = self.workspace.snapshot(path, read=True).sha or ""
                    except InputError:  # unreadable, or denied: the caller's own look says why
                        return None
                if sha != had:
                    continue
            return v  # its own path is empty, or holds another file now (replaced after the move)
        return None

    def _last_sha(self, missing: Version) -> str | None:
        """The hash of the bytes a missing object last had: ``meta.last_sha``, or (a missing
        version written before it was kept) that of its latest version that had one."""
        meta = missing.doc["meta"] if missing.doc else {}
        if meta.get("last_sha") is not None:
            return str(meta["last_sha"])
        for v in reversed(self.store.history(missing.id, with_docs=True)):
            vm = (v.doc or {}).get("meta") or {}
            if not vm.get("missing"):
                sha = vm.get("sha")
                return None if sha is None else str(sha)
        return None

    def refresh(
        self,
        obj_id: str,
        path: Path | None,
        *,
        cause: str,
        reason: str = "deleted",
        settled: Callable[[FileSnapshot], bool] | None = None,
        record_stat: bool = False,
        at: str | None = None,
    ) -> Indexed | None:
        """Bring ``obj_id`` in line with the file now at ``path`` (its old path, or the one it
        was moved to), or mark it missing when ``path`` is None. None if the object is gone
        from the store (evicted). ``settled`` sees what was read before a new version is written:
        False leaves the object as it is (status ``unsettled``). ``record_stat``: the same bytes
        found under another size, mtime or inode (``touch``, a same-bytes rewrite) correct the
        stat of the version in force (``_restat``), after the same ``settled`` check. ``at``: the
        path where the caller last knew the object (a tracker's record); if the store has it at
        another path since (another process's index moved it: ``mv a b`` then a read of ``b``
        there), what the caller saw at ``at`` is not this object's, and the object is looked at
        where the store has it (before, a tracker in the other process marked it missing, or
        moved it back to ``a`` when a new file was made there)."""
        with self._lock:
            for _ in range(_ATTEMPTS):
                prev = self.latest(obj_id)
                if prev is None:
                    return None
                here = (prev.doc or {}).get("meta", {}).get("abs_path")
                if at is not None and here is not None and here != at and (path is None or str(path) != here):
                    path = Path(here) if _regular(here) else None
                if path is not None and self.workspace.secret_in_path(path) is not None:
                    # moved to a name that holds a secret: that name is never recorded
                    path, reason = None, "moved to a path that holds a secret"
                elif path is not None and not self.workspace.recordable(path):
                    # no store takes the name (a write of it failed: the object stayed current
                    # at the path it had left, until a rescan found that empty)
                    path, reason = None, "moved to a path that is not valid UTF-8"
                result = (
                    self._missing(prev, cause=cause, reason=reason)
                    if path is None
                    else self._update(prev, path, read=False, cause=cause, settled=settled, record_stat=record_stat)
                )
                if result is not None:
                    return result
        raise StoreError(f"{obj_id}: the file object kept changing under a concurrent writer")

    def _evicted_shas(self, path: Path) -> set[str]:
        """The hashes of the bytes of file objects at ``path`` that were evicted (context/evict.py)."""
        tombstones = [
            *self.store.find("tombstone", {"path_key": path_key(str(path))}),
            *self.store.find("tombstone", {"abs_path": str(path)}),  # written before 2026-11-30
        ]
        return {sha for t in tombstones for sha in (t.doc or {}).get("content", {}).get("shas", ())}

    def _differs(self, pm: dict[str, Any], snap: FileSnapshot) -> bool:
        if pm.get("indexed") != snap.mode or pm.get("content_omitted") != snap.omitted:
            return True
        if snap.mode == "content":
            return bool(pm.get("sha") != snap.sha)
        return bool((pm.get("size"), pm.get("mtime")) != (snap.size, snap.mtime_ms))

    def _update(
        self,
        prev: Version | None,
        path: Path,
        *,
        read: bool,
        cause: str,
        settled: Callable[[FileSnapshot], bool] | None = None,
        record_stat: bool = False,
        claim: tuple[Version | None] | None = None,
    ) -> Indexed | None:
        """Record ``prev`` (None: a new object) as the file now at ``path``; None if another writer
        wrote first (the caller reads again). ``claim``: the path's claim as read before the
        lookup that found ``prev`` (None: read here, when a version brings the object to it)."""
        self.workspace.deny_secret_path(path)
        pm: dict[str, Any] = prev.doc["meta"] if prev is not None and prev.doc else {}
        # everything recorded below is what this one open found (path, inode, size, mtime, bytes):
        # nothing is looked at by name again, so nothing can disagree with it
        # (bytes withheld as evicted are read again too: only their hash says whether they are
        # still the ones evicted; a look by stat alone recorded "not read yet: read(path) loads
        # it", which no read would do, as a new version)
        snap = self.workspace.snapshot(
            path, read=read or pm.get("indexed") == "content" or bool(pm.get("evicted_bytes"))
        )
        # only a new object, or one already withheld, can be evicted bytes: no lookup otherwise
        withheld = False
        if (prev is None or pm.get("evicted_bytes")) and snap.sha is not None:
            withheld = snap.sha in self._evicted_shas(snap.path)
        if withheld:
            snap = replace(snap, mode="metadata", text=None, sha=None, binary=None, omitted=EVICTED_BYTES)
        moved = prev is not None and pm.get("abs_path") != str(snap.path)
        if prev is not None and not pm.get("missing") and not moved and not self._differs(pm, snap):
            seen = (snap.size, snap.mtime_ms, f"{snap.dev}:{snap.ino}")
            if not record_stat or seen == (pm.get("size"), pm.get("mtime"), pm.get("inode")):
                return Indexed(prev.id, "already indexed", prev, seen=seen)
            if settled is not None and not settled(snap):
                return Indexed(prev.id, "unsettled", prev)
            queued: list[tuple[Version, tuple[int, int, str]]] | None = getattr(self._local, "restats", None)
            if queued is not None:
                queued.append((prev, seen))
                return Indexed(prev.id, "already indexed", prev, seen=seen)
            return self._restat(prev, seen)
        if prev is not None and settled is not None and not settled(snap):
            return Indexed(prev.id, "unsettled", prev)
        changes: list[str] = []
        if prev is None:
            changes.append("created")
        else:
            if pm.get("missing"):
                changes.append("recreated")
            if moved:
                changes.append("path")
            if pm.get("indexed") != snap.mode:
                changes.append("read" if snap.mode == "content" else "stat")
            elif snap.mode == "content" and pm.get("sha") != snap.sha:
                changes.append("content")
            elif snap.mode == "metadata" and not pm.get("missing") and self._differs(pm, snap):
                changes.append("stat")
        meta = self._meta(snap, version=int(pm.get("version", 0)) + 1, cause=cause)
        if withheld:
            meta["evicted_bytes"] = True
        if moved:
            meta["renamed_from"] = pm.get("path")
        old_text = prev.doc.get("content") if prev is not None and prev.doc else None
        if isinstance(old_text, str) and snap.text is not None and old_text != snap.text:
            diff, added, removed, why = _diff(
                old_text, snap.text, str(pm.get("path")), meta["path"], self.max_diff_chars
            )
            meta.update(diff=diff, lines_added=added, lines_removed=removed)
            if why:
                meta["diff_omitted"] = why
        now = now_ms()
        content_fact = prev is None or "content" in changes or "stat" in changes or "recreated" in changes
        # a file's text is valid from its mtime, as first seen; a later version from when it came
        # to the path since the store saw the one before there (``changed_ms``, its ctime too): a
        # backup restored keeps its old mtime (``cp -p``, ``rsync -a``, ``tar x``), ``mv`` brings
        # that of where the bytes were written, and the text was made valid from before the store
        # last saw the old one (when the agent was shown it): reads as of then gave the new one.
        # So a version comes after that sight as after the version before (``next_valid_time``
        # waits for the next millisecond when the sight was in this one: before 2026-12-07 it was
        # valid from that very millisecond), unless the store's clock runs ahead of ours by more
        # than a tick: that is not waited out, the version is valid from now.
        came = snap.mtime_ms if prev is None else snap.changed_ms
        base = min(came, now) if content_fact else now
        after = None if prev is None else prev.valid_time
        if prev is not None and prev.tx_time <= now + 1:
            after = max(prev.valid_time, prev.tx_time)
        elif prev is not None:
            base = now
        vt = next_valid_time(after, at=base)
        obj_id = prev.id if prev is not None else "file:" + uuid.uuid4().hex
        doc, encoded = FileDoc(id=obj_id, content=snap.text, meta=meta).encode()  # (the store writes it)
        ops: list[Op] = []
        if prev is not None:
            assert prev.doc is not None
            ops.append(Match(obj_id, prev.doc, valid_time=now + MATCH_HORIZON_MS))
        if moved and claim is None:
            # the path's claim read before the look below: an object another process makes there
            # meanwhile fails this write (read after, the move took the path from it unseen)
            claim = (self.store.get(claim_id(str(snap.path))),)
        if moved:
            # moved over a path another object holds: that file is gone (replaced), history kept
            for other in self.store.find("file", {"abs_path": str(snap.path)}):
                if other.id != obj_id and other.doc and not other.doc["meta"].get("missing"):
                    gone = self._missing_doc(other, cause=cause, reason=f"replaced by {obj_id}")
                    ops += [
                        Match(other.id, other.doc, valid_time=now + MATCH_HORIZON_MS),
                        Put(gone, next_valid_time(other.valid_time)),
                    ]
        ops.append(Put(doc, vt, json=encoded))
        if prev is None or moved:  # brought to this path: claim it (a concurrent creator's write fails)
            cid = claim_id(str(snap.path))
            held = claim[0] if claim is not None else self.store.get(cid)
            claim_doc = hashed({"id": cid, "kind": "file_claim", "content": obj_id, "meta": {}})
            ops += [Match(cid, held.doc if held is not None else None), Put(claim_doc)]
        return self._commit(ops, obj_id, doc, vt, "new" if prev is None else "new version", tuple(changes))

    @contextlib.contextmanager
    def restats_batched(self) -> Iterator[None]:
        """The stat corrections this thread makes meanwhile (``refresh(record_stat=True)``) are
        written at the end, ``RESTATS_PER_TX`` to a transaction: a rescan that finds a checkout's
        worth of files rewritten with the same bytes writes a few transactions, not one a file.
        Nothing is written if the block raises (the next rescan finds the same)."""
        queued: list[tuple[Version, tuple[int, int, str]]] = []
        outer = getattr(self._local, "restats", None)
        self._local.restats = queued if outer is None else outer
        try:
            yield
        finally:
            self._local.restats = outer
        if outer is None:
            for i in range(0, len(queued), RESTATS_PER_TX):
                self._commit_restats(queued[i : i + RESTATS_PER_TX])

    def _commit_restats(self, queued: list[tuple[Version, tuple[int, int, str]]]) -> None:
        with self._lock:
            ops: list[Op] = []
            for prev, seen in queued:
                ops += self._restat_ops(prev, seen)[0]
            tx = self.store.submit(ops)
            if tx.committed:
                self._notify(ops, tx)
                return
            for prev, seen in queued:  # one changed meanwhile: each on its own, if still as read
                now = self.latest(prev.id)
                if now is not None and now.doc == prev.doc:
                    self._restat(now, seen)

    def _restat_ops(self, prev: Version, seen: tuple[int, int, str]) -> tuple[list[Op], dict[str, Any]]:
        assert prev.doc is not None
        size, mtime, inode = seen
        meta = {**prev.doc["meta"], "size": size, "mtime": mtime, "inode": inode}
        doc = FileDoc(id=prev.id, content=prev.doc.get("content"), meta=meta).to_doc()
        return [Match(prev.id, prev.doc, valid_time=now_ms() + MATCH_HORIZON_MS), Put(doc, prev.valid_time)], doc

    def _restat(self, prev: Version, seen: tuple[int, int, str]) -> Indexed | None:
        """The version in force holds the bytes on disk, under another size, mtime or inode (a
        ``touch``, a same-bytes rewrite): correct its stat in place, a write at its own valid time
        (no new version: same version number, same text; reads as of an earlier transaction, as
        frames make, still see the stat it had). What the store says of the file is then what a
        tracker's next ``start()`` compares the disk with (it does not read the file again) and
        what a move made while no tracker ran is known by (``_moved_here``)."""
        ops, doc = self._restat_ops(prev, seen)
        done = self._commit(ops, prev.id, doc, prev.valid_time, "already indexed", ())
        return None if done is None else replace(done, seen=seen)

    def _meta(self, snap: FileSnapshot, *, version: int, cause: str) -> dict[str, Any]:
        ws = self.workspace
        text = snap.text
        meta: dict[str, Any] = {
            "path": ws.relpath(snap.path),
            "abs_path": str(snap.path),
            "workspace": str(ws.root),
            "name": snap.path.name,
            "size": snap.size,
            "mtime": snap.mtime_ms,
            "inode": f"{snap.dev}:{snap.ino}",
            "version": version,
            "indexed": snap.mode,
            "sha": snap.sha,
            "binary": snap.binary,
            "mime": snap.mime,
            "missing": False,
            "cause": cause,
        }
        if text is not None:
            shown = min(len(text), ws.max_active_chars)
            meta.update(
                chars=len(text),
                lines=text.count("\n") + (0 if text.endswith("\n") or not text else 1),
                tokens=estimate_tokens(shown),
                encoding=snap.encoding,
            )
            if shown < len(text):
                meta.update(context_chars=shown, truncated_for_context=True)
            if snap.redacted:
                meta["redacted"] = snap.redacted
        else:
            not_read = snap.mode == "metadata" and not snap.secret and snap.size <= ws.max_file_bytes
            meta.update(tokens=estimate_tokens(snap.size) if not_read else 0, content_omitted=snap.omitted)
        if snap.secret:
            meta["secret"] = True
        return meta

    def _missing_doc(self, prev: Version, *, cause: str, reason: str) -> dict[str, Any]:
        assert prev.doc is not None
        pm = prev.doc["meta"]
        keep = ("path", "abs_path", "workspace", "name", "mime", "indexed", "secret")
        meta = {k: pm[k] for k in keep if k in pm}
        if pm.get("inode") is not None:
            # what the file was when last seen, to know it again if it turns up at another path
            meta.update(
                last_inode=pm["inode"], last_size=pm.get("size"), last_mtime=pm.get("mtime"), last_sha=pm.get("sha")
            )
        elif pm.get("last_inode") is not None:
            meta.update({k: pm.get(k) for k in ("last_inode", "last_size", "last_mtime", "last_sha")})
        meta.update(
            version=int(pm.get("version", 0)) + 1,
            missing=True,
            missing_reason=reason,
            cause=cause,
            tokens=0,
            sha=None,
            content_omitted=f"the file is missing ({reason}); its earlier versions are kept",
        )
        return FileDoc(id=prev.id, content=None, meta=meta).to_doc()

    def _missing(self, prev: Version, *, cause: str, reason: str) -> Indexed | None:
        assert prev.doc is not None
        if prev.doc["meta"].get("missing"):
            return Indexed(prev.id, "already indexed", prev)
        doc = self._missing_doc(prev, cause=cause, reason=reason)
        vt = next_valid_time(prev.valid_time)
        ops: list[Op] = [Match(prev.id, prev.doc, valid_time=now_ms() + MATCH_HORIZON_MS), Put(doc, vt)]
        return self._commit(ops, prev.id, doc, vt, "new version", ("missing",))

    def _commit(
        self, ops: list[Op], obj_id: str, doc: dict[str, Any], vt: int, status: IndexStatus, changes: tuple[str, ...]
    ) -> Indexed | None:
        tx = self.store.submit(ops)
        if not tx.committed:
            return None  # someone else wrote first: the caller re-reads and tries again
        self._notify(ops, tx)
        return Indexed(obj_id, status, Version(obj_id, vt, tx.id, tx.time, doc), changes)

    def _notify(self, ops: list[Op], tx: Tx) -> None:
        """Tell the listeners of every version ``ops`` wrote in ``tx``."""
        written = [
            Version(op.doc["id"], op.valid_from or tx.time, tx.id, tx.time, dict(op.doc))
            for op in ops
            if isinstance(op, Put) and op.doc.get("kind") == "file"  # (not a path's claim)
        ]
        for v in written:
            for listener in list(self._listeners):
                listener(v)


def find_file_object(store: Store, path_or_id: str) -> str:
    """The object ``path_or_id`` names: an object id (``file:…``, ``chat:…``, any kind) as it is,
    whether or not it exists; else the id of the file object at that path.

    A path is tried as a file (relative to the current directory, symlinks resolved), then as a
    workspace-relative path, then against every earlier path of every file object (a file that
    was renamed since). ``NotFound`` if no file object has or had that path; ``InputError`` if
    several did (the caller must pass an id)."""
    if path_or_id.startswith(tuple(f"{k}:" for k in KINDS)):
        return path_or_id
    absolute = os.path.realpath(os.path.expanduser(path_or_id))
    ids = {v.id for v in store.find("file", {"abs_path": absolute})}
    if not ids:
        ids = {v.id for v in store.find("file", {"path": path_or_id})}
    if not ids:
        for current in store.find("file"):
            for v in store.history(current.id, with_docs=True):
                meta = (v.doc or {}).get("meta", {})
                if meta.get("abs_path") == absolute or meta.get("path") == path_or_id:
                    ids.add(current.id)
                    break
    if not ids:
        raise NotFound(
            f"no object {path_or_id!r} in {store.url}: not an object id, and no file object has or had that path"
        )
    if len(ids) > 1:
        raise InputError(_several(store, path_or_id, sorted(ids)))
    return ids.pop()


def _several(store: Store, path: str, ids: list[str]) -> str:
    """What to say of a path several file objects have or had, on one line (a failed command's
    line): each, and how to name it (its absolute path where no other of them has it, else its
    id only)."""
    where: dict[str, str | None] = {}
    for obj_id in ids:
        doc = store.doc(obj_id)
        abs_path = ((doc or {}).get("meta") or {}).get("abs_path")
        where[obj_id] = abs_path if isinstance(abs_path, str) else None
    held = Counter(where.values())
    each = [
        f"{obj_id} "
        + (
            "(no path now)"
            if abs_path is None
            else f"at {abs_path}"
            if held[abs_path] == 1
            else f"at {abs_path} (another of them has it too: name it by its id)"
        )
        for obj_id, abs_path in where.items()
    ]
    return (
        f"{path!r} names several file objects: {', '.join(ids)} (one per workspace or session that"
        f" recorded it); name one by its id or its absolute path: {'; '.join(each)}"
    )
