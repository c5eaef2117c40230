"""The file tracker: keeps indexed files in sync with the disk, with a real watchdog observer.

Once a file is indexed (read, written, edited or discovered by the agent), a change on disk
becomes a new version of its object:

* content change → new version (valid from when it came: ``FileIndex``; unchanged bytes are a
  no-op, by hash: their new size, mtime and inode correct the stat of the version in force, so no
  later start reads them again); a change of times or mode only (``touch``, ``chmod``) is seen as
  it happens;
* a write through one hard link → a version of each tracked name of that file (also through a
  name nobody tracks, even one deleted or replaced right after the write);
* move/rename, also across directories → the same object with a new path;
* delete → a new version marked ``missing`` (no content), once the observer has reported the
  removal (``unreported_wait`` at most: a file found gone before its move is reported is not
  missing meanwhile); the history is kept; re-creation at the same path → a new version again;
* an editor's atomic save (write a temp file, rename it over the original; or rename the
  original away and write a new one) → one version, because events are debounced per object
  (``debounce``, default 50 ms; at most ``max_delay`` while events keep coming) and the disk is
  looked at only once they settle: the path that still holds the file wins;
* a file being written is looked at once its writer closes it, where the observer reports closes
  (inotify): a writer that truncates, then writes after a pause (a slow or descheduled process),
  makes one version, not an empty one and then the text (at most ``max_delay`` after its first
  event, so a file kept open and written to is still recorded); and what was read is recorded
  only when it looks settled (``_settled``: no event during the read, no change newer than the
  events seen, not emptied a moment ago), so a lagging observer does not make one either.

One recursive watch per root (the workspace root, and each allowed outside directory that holds
an indexed file) catches moves between any two directories below it, with one observer thread.
A directory made a moment before is watched only once the observer has seen its creation: what
happened below it until then is known by that creation, which has the tracked files below it
looked at (one deleted there), and by files arriving elsewhere with a tracked file's inode,
size and mtime (one moved out).
Events under ignored directories (``.git``, ``node_modules``, build output, …) are dropped unless
they concern an indexed file. After an inotify queue overflow, an observer error, or every
``rescan_interval`` seconds, every indexed file is ``stat``-ed again and the changed ones
re-indexed; ``start()`` does the same before it returns, so changes made while nothing was
watching are recorded before a session shows the files again.
A change the store cannot take (out of reach) is tried again every ``store_retry`` seconds (one
try for all such changes, not one each).

The tracker writes to the store from its own thread (through ``FileIndex``, whose compare-and-set
writes make it safe next to the file tools). It never touches a session: a session that shows an
older version marks it stale on its next turn and does not reload it by itself.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import stat
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import watchdog.events
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

from ..errors import ContextOSError, StoreUnavailable
from ..store.base import Store, Version
from .index import FileIndex, Indexed, file_key
from .workspace import FileSnapshot, Workspace

__all__ = ["FileTracker", "Trackers"]

log = logging.getLogger("context_os.files")
SAID = 256
"""How many distinct tracker messages are remembered as logged (``FileTracker._error``)."""

_ATTRIB: type[FileSystemEvent] | None = getattr(watchdog.events, "FileAttribEvent", None)
_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    *([_ATTRIB] if _ATTRIB else []),
    FileClosedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]
"""What the observer asks the kernel for: no open/access events (our own reads make those).
``FileAttribEvent``: a change of times or mode only (``touch``, ``chmod``, ``cp -p``), which
changes a metadata-only file's version and a content file's stat. watchdog 6 has no such event: it
reports one as a modification, which then waits for a close (up to ``max_delay``) as a write does."""

_WATCHDOG_LOGGERS = ("watchdog.observers.inotify_c", "watchdog.observers.inotify")
_RECENT_MAX = 2000


@dataclass(slots=True)
class _Rec:
    """What the tracker remembers of one indexed file (kept small: thousands of these)."""

    path: str
    missing: bool
    size: int | None
    mtime: int | None
    inode: str | None


def _rec_of(meta: dict[str, Any]) -> _Rec:
    return _Rec(
        str(meta["abs_path"]), bool(meta.get("missing")), meta.get("size"), meta.get("mtime"), meta.get("inode")
    )


def _reports_closes(observer: BaseObserver) -> bool:
    """Whether ``observer`` reports a writer closing a file (inotify does)."""
    try:
        from watchdog.observers.inotify import InotifyObserver
    except ImportError:  # not Linux
        return False
    return isinstance(observer, InotifyObserver)


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _differs(rec: _Rec, st: os.stat_result | None) -> bool:
    """Whether the path of ``rec``, ``lstat``-ed as ``st`` (None: nothing there), holds
    something else than what ``rec`` recorded."""
    if st is None or not stat.S_ISREG(st.st_mode):
        return not rec.missing
    if rec.missing:
        return True
    return (st.st_size, st.st_mtime_ns // 1_000_000, f"{st.st_dev}:{st.st_ino}") != (rec.size, rec.mtime, rec.inode)


def _holds_file(path: str) -> bool:
    """Whether ``path`` (resolved: no symlink in it) still names a regular file, not a symlink put
    in its place: the tools never open a file through one, so the file that was there is gone."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode) and os.path.realpath(path) == path
    except OSError:
        return False


def _dir_id(path: str) -> tuple[int, int] | None:
    """(device, inode) of the directory at ``path``; None if there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def _parents(path: str) -> tuple[str, ...]:
    """Every directory above the absolute ``path``, up to ``/``."""
    parent = os.path.dirname(path)
    return () if parent == path else _dir_and_above(parent)


@functools.lru_cache(maxsize=4096)
def _dir_and_above(directory: str) -> tuple[str, ...]:
    """``directory`` and every directory above it (once per directory, not once per file in it:
    a start binds thousands of files of a few hundred directories)."""
    parent = os.path.dirname(directory)
    return (directory,) if parent == directory else (directory, *_dir_and_above(parent))


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + os.sep)


class _Handler(FileSystemEventHandler):
    def __init__(self, tracker: FileTracker):
        self.tracker = tracker

    def dispatch(self, event: FileSystemEvent) -> None:
        self.tracker._on_event(event)


class _OverflowSignal(logging.Handler):
    """watchdog handles an inotify queue overflow internally and only logs it: this turns that
    log record into a rescan request."""

    def __init__(self, tracker: FileTracker):
        super().__init__(logging.WARNING)
        self.tracker = tracker

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            self.tracker.request_rescan("inotify queue overflow")


class FileTracker:
    """Watches the indexed files of ``workspace`` and records their changes in ``store``.

    ``index``: share the ``FileIndex`` of the file tools (recommended: files they index are then
    tracked at once); by default the tracker makes its own. Use as a context manager, or call
    ``start()`` and ``stop()``.
    """

    def __init__(
        self,
        store: Store,
        workspace: Workspace,
        *,
        index: FileIndex | None = None,
        debounce: float = 0.05,
        max_delay: float = 0.5,
        rescan_interval: float | None = 30.0,
        health_interval: float = 1.0,
        missing_grace: float = 0.25,
        unreported_wait: float = 5.0,
        store_retry: float = 2.0,
    ):
        self.store = store
        self.workspace = workspace
        self.index = index if index is not None else FileIndex(store, workspace)
        self.debounce = debounce
        self.max_delay = max_delay
        self.rescan_interval = rescan_interval
        self.health_interval = health_interval
        self.missing_grace = missing_grace
        self.unreported_wait = unreported_wait
        """How long a file found gone waits for the event of its removal (its deletion or move, or
        its directory's) before it is recorded missing all the same (an event that never comes:
        a watch made too late). The observer may take that long to report a move on a loaded
        machine, and a file recorded missing meanwhile has a version that never was."""
        self.store_retry = store_retry
        """While the store is out of reach, how often a change not yet recorded is tried again."""
        self.stats: dict[str, int] = {"events": 0, "reconciled": 0, "versions": 0, "rescans": 0, "errors": 0}
        self.errors: deque[str] = deque(maxlen=100)
        """The latest problems (unreadable files, watch failures), newest last; each is logged
        too (``context_os.files``, a warning)."""
        self._said: OrderedDict[str, None] = OrderedDict()
        """The messages logged lately (at most ``SAID``), each logged once while it recurs."""
        self._said_lock = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._records: dict[str, _Rec] = {}
        # inode → the objects last seen with it: more than one are hard links to one file, which a
        # write through one name changes under every name (the kernel reports the name written)
        self._by_inode: dict[str, tuple[str, ...]] = {}  # (tuples: thousands of them, nearly all of one)
        self._by_path: dict[str, str] = {}
        # objects whose file had other names (hard links) when last looked at: a write through a
        # name nobody tracks that no longer leads to the file when its event is taken (deleted or
        # replaced right after the write) is looked for in these
        self._linked: set[str] = set()
        # every directory above a path of _by_path → how many such paths: a directory event
        # (rm -rf node_modules: one per directory) looks at the tracked files only below one of these
        self._dirs: dict[str, int] = {}
        self._pending: dict[str, tuple[float, float]] = {}
        self._hints: dict[str, str] = {}
        self._hinted: dict[str, str] = {}
        self._recent: OrderedDict[str, float] = OrderedDict()
        # (tracker thread) path of _recent → (monotonic time of the stat, (inode, size, mtime) of
        # the regular file it held, or None): each new file is stat-ed once, not once per file
        # that vanished meanwhile (a checkout that renamed a directory: thousands of each)
        self._recent_stat: dict[str, tuple[float, tuple[str, int, int] | None]] = {}
        # (tracker thread) objects found gone → (when, monotonic; whether their removal was
        # reported: ``_removed``, a move's hint): recorded missing ``missing_grace`` after, once
        # reported, else ``unreported_wait`` after
        self._gone: dict[str, tuple[float, bool]] = {}
        # objects whose deletion, or their directory's, an event reported (under ``_cond``)
        self._removed: set[str] = set()
        self._unrecorded: set[str] = set()  # changes the store could not take yet (tracker thread)
        self._store_back_at = 0.0  # (monotonic) until then the store is taken to be out of reach
        self._deferred: dict[str, float] = {}
        # wall-clock time (ns) of the newest event seen for each object: a file whose mtime is
        # later has changed again, and the events saying so are still on their way
        self._event_ns: dict[str, int] = {}
        # files modified and not yet closed by their writer, awaited where the observer reports a
        # writer's close (inotify's IN_CLOSE_WRITE; not FSEvents, kqueue or polling)
        self._writing: set[str] = set()
        # objects whose pending events are only attribute changes (touch, chmod): looked at only
        # if their size, mtime or inode changed (chmod -R must not read every tracked file)
        self._attrib_only: set[str] = set()
        self._sees_closes = False
        self._rescan_reason: str | None = None
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._observer: BaseObserver | None = None
        self._watch_lock = threading.Lock()
        self._watches: dict[str, ObservedWatch] = {}
        # root → (device, inode) of the directory its watch was made on: a watch follows its
        # directory when it is moved away (mv repo repo.bak), and the path then holds another
        self._watched_dirs: dict[str, tuple[int, int] | None] = {}
        self._gone_roots: set[str] = set()  # roots found deleted, said once each (under _watch_lock)
        self._handler = _Handler(self)
        self._overflow = _OverflowSignal(self)

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> FileTracker:
        """Load the indexed set, start watching, and record what changed while nobody watched
        (before returning)."""
        if self._thread is not None:
            return self
        self._stopping = False
        try:
            self.index.subscribe(self._note)
            for oid, meta in self.index.indexed_meta():  # (not the documents: their text, their diffs)
                if "abs_path" in meta:
                    self._note_meta(oid, meta, watch=False, look=False)
            self._observer = self._new_observer()
            for root in self._roots():
                self._ensure_watch(root, rescan=False)  # (the rescan below follows them)
            for name in _WATCHDOG_LOGGERS:
                logging.getLogger(name).addHandler(self._overflow)
            # in this thread, before returning: a context assembled right after start() must not
            # show as current a version the disk moved past while nothing watched (the watches
            # exist now, so what changes meanwhile is an event the tracker thread takes)
            try:
                self.rescan()
            except Exception as e:  # the store went away between indexed() and here: the thread retries
                self._error(f"tracker: {type(e).__name__}: {e}")
                self._rescan_reason = "start"
            thread = threading.Thread(target=self._run, name=f"ctxos-file-tracker:{self.workspace.root}", daemon=True)
            # before it runs: the thread tells by it that it is the tracker thread, running (a
            # file found gone gets its grace period, a read its check that the file looks settled)
            self._thread = thread
            thread.start()
        except BaseException:
            # Ctrl-C (or a failure) half-way: stop() could not undo a start that never returned,
            # and the observer would keep its watches and queue events nobody takes
            started, self._thread = self._thread, None
            if started is not None and started.is_alive():
                with self._cond:
                    self._stopping = True
                    self._cond.notify_all()
                started.join()
            self._release()
            raise
        return self

    def stop(self) -> None:
        """Stop watching; what changed on disk before the call is recorded first: the events
        taken are reconciled, then, the observer stopped, every tracked file is ``stat``-ed once
        (a change whose events were still on their way is recorded too, not left to the next
        ``start()``)."""
        thread = self._thread
        if thread is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        released = False
        try:
            thread.join()
            self._release()
            released = True
            try:
                self.rescan()
            except Exception as e:  # the store went away: the next start() records it
                self._error(f"tracker: {type(e).__name__}: {e}")
        finally:
            # cut short (Ctrl-C in the last rescan): stopped all the same, so a later start() starts
            # again (it did nothing while ``_thread`` stayed set); a thread still ending keeps it
            if not thread.is_alive():
                if not released:
                    self._release()
                with self._cond:  # what the last events left: nothing of it is due at the next start()
                    self._pending.clear()
                    self._hints.clear()
                    self._hinted.clear()
                    self._writing.clear()
                    self._attrib_only.clear()
                    self._gone.clear()
                    self._removed.clear()
                    self._deferred.clear()
                self._thread = None

    def _release(self) -> None:
        """Undo what ``start()`` set up: log handler, index listener, observer and watches."""
        for name in _WATCHDOG_LOGGERS:
            logging.getLogger(name).removeHandler(self._overflow)
        self.index.unsubscribe(self._note)
        observer, self._observer = self._observer, None
        with self._watch_lock:
            self._watches.clear()
        if observer is not None:
            observer.stop()
            observer.join()

    def __enter__(self) -> FileTracker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- public helpers ----------------------------------------------------------------------

    def tracked(self) -> dict[str, str]:
        """Object id → absolute path of every tracked file (missing ones included)."""
        with self._cond:
            return {oid: r.path for oid, r in self._records.items()}

    def request_rescan(self, reason: str) -> None:
        """Re-check every indexed file soon (from the tracker thread)."""
        with self._cond:
            self._rescan_reason = reason
            self._cond.notify_all()

    def settle(self, timeout: float = 5.0) -> bool:
        """Wait until no event waits to be reconciled; False on timeout. (Events still queued in
        the observer are not seen here: poll the store when you need a particular version.)"""
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._pending and not self._busy and self._rescan_reason is None, timeout
            )

    def rescan(self) -> int:
        """Re-check every tracked file now, in the caller's thread; the number of new versions."""
        return self._rescan(lost=True)

    def _rescan(self, *, lost: bool) -> int:
        """``lost``: events may have been lost (a start, a new or lost watch, an overflow, a
        caller's doubt), so a file found gone is not waited for its removal's event; the periodic
        rescan waits for it (its event may be on its way: a file moved a moment ago)."""
        with self._cond:
            items = list(self._records.items())
        looked = [(oid, rec, _lstat(rec.path)) for oid, rec in items]
        with self._cond:  # (whether each has other names now: ``_see_links``)
            for oid, rec, st in looked:
                if self._records.get(oid) is rec:
                    self._see_links(oid, rec, st)
        dirty = [oid for oid, rec, st in looked if _differs(rec, st)]
        self.stats["rescans"] += 1
        with self.index.restats_batched():  # same bytes under a new stat: a few transactions in all
            return sum(1 for oid in dirty if self._reconcile(oid, None, reported=lost))

    # --- the index tells us what is indexed -------------------------------------------------

    def _note(self, v: Version) -> None:
        """The index wrote version ``v``."""
        doc = v.doc
        if doc is None or doc.get("kind") != "file":
            return
        meta = doc["meta"]
        if meta.get("workspace") != str(self.workspace.root) or "abs_path" not in meta:
            return
        self._note_meta(v.id, meta)

    def _note_meta(self, oid: str, meta: dict[str, Any], *, watch: bool = True, look: bool = True) -> None:
        """File object ``oid`` of this workspace is as ``meta`` says (its ``abs_path``, ``missing``,
        ``size``, ``mtime``, ``inode``). ``look``: ``lstat`` it for its other names (``start``'s
        rescan does that)."""
        rec = _rec_of(meta)
        st = _lstat(rec.path) if look and not rec.missing else None
        with self._cond:
            if look:
                self._see_links(oid, rec, st)
            old = self._records.get(oid)
            if old is not None and old.path != rec.path and self._by_path.get(old.path) == oid:
                self._unbind(old.path)
            self._set_rec(oid, rec)
            holder = self._by_path.get(rec.path)
            if holder is None or holder == oid or not rec.missing:
                self._bind(rec.path, oid)
        if watch and self._observer is not None:
            root = self.workspace.root_of(rec.path)
            if root is not None:
                self._ensure_watch(root)

    def _set_rec(self, oid: str, rec: _Rec | None) -> None:
        """Remember (None: forget) what ``oid`` is (caller holds ``_cond``)."""
        old = self._records.pop(oid, None)
        if rec is None or rec.missing:
            self._linked.discard(oid)
        if old is not None and old.inode is not None and oid in (same := self._by_inode.get(old.inode, ())):
            rest = tuple(o for o in same if o != oid)
            if rest:
                self._by_inode[old.inode] = rest
            else:
                del self._by_inode[old.inode]
        if rec is None:
            return
        self._records[oid] = rec
        if rec.inode is not None and not rec.missing:
            same = self._by_inode.get(rec.inode, ())
            if oid not in same:
                self._by_inode[rec.inode] = (*same, oid)

    def _see_links(self, oid: str, rec: _Rec, st: os.stat_result | None) -> None:
        """Whether ``oid``'s file, ``lstat``-ed as ``st``, has other names (caller holds ``_cond``)."""
        if st is not None and st.st_nlink > 1 and not rec.missing and f"{st.st_dev}:{st.st_ino}" == rec.inode:
            self._linked.add(oid)
        else:
            self._linked.discard(oid)

    def _roots(self) -> set[Path]:
        with self._cond:
            paths = [r.path for r in self._records.values()]
        return {root for p in paths if (root := self.workspace.root_of(p)) is not None}

    # --- watching ------------------------------------------------------------------------------

    def _new_observer(self) -> BaseObserver:
        observer = Observer()
        self._sees_closes = _reports_closes(observer)
        observer.name = f"ctxos-watchdog:{self.workspace.root}"
        observer.start()
        return observer

    def _ensure_watch(self, root: Path, *, rescan: bool = True) -> None:
        """Watch ``root`` (recursively) if it is not watched yet; a new watch asks a rescan
        (unless ``rescan`` is False: the caller runs one), since what changed before the watch
        existed sent no event here: a new root's first file (its version is committed before
        the watch is scheduled, which walks every directory below it), a root that was gone, or
        a watch lost. Before, only a root come back asked one, and a change made while the
        watch was being set up waited for the periodic rescan (or for ever without one)."""
        key = str(root)
        with self._watch_lock:
            observer = self._observer
            if observer is None or key in self._watches:
                return
            if key in self._gone_roots and not root.is_dir():
                return  # said once already; the health check watches it when it is back
            try:
                self._watched_dirs[key] = _dir_id(key)  # (before: a directory swapped in meanwhile differs)
                self._watches[key] = observer.schedule(self._handler, key, recursive=True, event_filter=_EVENTS)
            except OSError as e:
                # e.g. the root is gone, or the inotify watch limit is reached: the periodic
                # rescan still catches changes, and the health check retries the watch
                self._error(f"cannot watch {key}: {e.strerror or e}")
                return
            self._gone_roots.discard(key)
        if rescan:
            self.request_rescan("new watch")

    def _check_health(self) -> None:
        """Restart a dead observer and re-create watches whose emitter stopped (root deleted) or
        whose root directory was moved away; a root that is gone is awaited (one stat each time)."""
        observer = self._observer
        if observer is None:
            return
        lost = False
        # the inotify reader thread of watchdog's Linux observer can die on its own (e.g. a warning
        # raised as an error under -W error) while the observer thread lives on
        reader = getattr(observer, "_inotify_fd", None)
        if not observer.is_alive() or (isinstance(reader, threading.Thread) and not reader.is_alive()):
            self._error("the watchdog observer stopped; restarting it")
            with contextlib.suppress(Exception):
                observer.stop()
            with self._watch_lock:
                self._watches.clear()
                self._observer = self._new_observer()
            lost = True
        else:
            dead = {e.watch for e in list(observer.emitters) if not e.is_alive()}
            with self._watch_lock:
                for key, watch in list(self._watches.items()):
                    # also a watch whose directory was moved away: its events name paths of
                    # another directory, and the one now at the root is watched by nobody
                    moved = _dir_id(key) != self._watched_dirs.get(key)
                    if moved or watch in dead or watch not in {e.watch for e in observer.emitters}:
                        del self._watches[key]
                        with contextlib.suppress(KeyError, RuntimeError):
                            observer.unschedule(watch)
                        lost = True
        rescan = lost
        for root in {r for r in self._roots() if str(r) not in self._watches}:
            key = str(root)
            if root.is_dir():
                self._ensure_watch(root)  # (a new watch asks its rescan)
                continue
            with self._watch_lock:  # (a caller's thread may watch it again meanwhile: it is back)
                gone = key not in self._watches and key not in self._gone_roots
                if gone:
                    self._gone_roots.add(key)
            if gone:
                # deleted or moved away (rm -rf of the checkout): one rescan records its files
                # missing, then one stat per health check waits for it to come back, where a
                # rescan of every tracked file each second would burn a core until it does
                self._error(
                    f"{key} is gone (deleted or moved away): its files are recorded missing;"
                    " watching again when it is back"
                )
                rescan = True
        if rescan:
            self.request_rescan("watch lost")

    # --- events (observer thread: keep it cheap) ----------------------------------------------

    def _on_event(self, event: FileSystemEvent) -> None:
        kind = event.event_type
        src = os.fsdecode(event.src_path)
        now = time.monotonic()
        untracked_write = created = False
        with self._cond:
            self.stats["events"] += 1
            marked = False
            if kind == "moved":
                dest = os.fsdecode(event.dest_path)
                if event.is_directory:
                    below = src in self._dirs or dest in self._dirs
                    # a file with a move pending is where that move took it, not at its recorded
                    # path (``mv a/x.py . && mv a b``: x.py is not in b)
                    recorded = [(p, o) for p, o in self._by_path.items() if o not in self._hints] if below else []
                    for path, oid in [*recorded, *self._hinted.items()]:
                        if _under(path, src):
                            marked |= self._hint(oid, dest + path[len(src) :], now)
                        elif _under(path, dest):
                            marked |= self._mark(oid, now, removed=True)
                else:
                    mover = self._by_path.get(src) or self._hinted.get(src)
                    if mover is not None:
                        marked |= self._hint(mover, dest, now)
                    target = self._by_path.get(dest)
                    if target is not None and target != mover:
                        marked |= self._mark(target, now, removed=True)
                    elif mover is None:
                        self._remember(dest, now)
            elif event.is_directory:
                # a deleted directory: everything below it is gone. A created one: the observer
                # has just added its watch (it does so before it reports the creation), and
                # what happened below it until then sent no event: a file made, read and then
                # deleted there a moment after ``mkdir`` was not recorded missing, for good
                # (without the periodic rescan). Looked at once, whatever it is now.
                for path, oid in list(self._by_path.items()) if src in self._dirs else ():
                    if _under(path, src):
                        marked |= self._mark(oid, now, removed=kind == "deleted")
            else:
                hit = self._by_path.get(src) or self._hinted.get(src)
                if hit is not None:
                    if kind == "modified":
                        self._writing.add(hit)
                    elif kind == "closed":
                        self._writing.discard(hit)
                    marked |= self._mark(hit, now, attrib=kind == "attrib", removed=kind == "deleted")
                    if kind in ("modified", "closed", "attrib"):
                        rec = self._records.get(hit)
                        # the same file under its other tracked names (hard links)
                        for other in self._by_inode.get(rec.inode, ()) if rec and rec.inode else ():
                            if other != hit:
                                marked |= self._mark(other, now, attrib=kind == "attrib")
                elif kind == "created":
                    self._remember(src, now)
                    created = True
                elif kind in ("closed", "attrib") or (
                    kind == "modified" and (not self._sees_closes or _ATTRIB is None)
                ):
                    # maybe another name of a tracked file (a hard link nobody tracks): the
                    # kernel reports a write, or a touch, under the name written only (a
                    # modification on watchdog 6, which reports a touch as one: no close follows)
                    untracked_write = True
            if marked:
                self._cond.notify_all()
        if created:
            self._on_untracked_name(src, now)
        if untracked_write:
            # (watchdog 6's modification, where closes are reported: looked at if its stat
            # changed, which a write's does too; its close is looked at as a write)
            self._on_untracked_write(src, now, attrib=kind == "attrib" or (kind == "modified" and self._sees_closes))

    def _named_too(self, st: os.stat_result | None) -> tuple[str, ...]:
        """The tracked objects of the file ``lstat``-ed as ``st`` at a name no tracked file has,
        when it has several names (``ln a.py b.py``); they are noted as having other names
        (caller holds ``_cond``)."""
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
            return ()
        oids = self._by_inode.get(f"{st.st_dev}:{st.st_ino}", ())
        for oid in oids:
            self._see_links(oid, self._records[oid], st)
        return oids

    def _on_untracked_name(self, path: str, now: float) -> None:
        """A file appeared at ``path``, which no tracked file has: maybe another name of tracked
        files (``_named_too``), or a tracked file moved there whose move from its path sent no
        event: moved out of a directory created a moment before, whose watch the observer had not
        added yet (``mkdir d && echo > d/e.txt``, the file read, ``mv d/e.txt x/``). Its arrival
        was all that was reported: before, it stayed recorded at the path it had left, for good.
        It is known by the inode, size and mtime a rename keeps (a new file reusing the inode of
        one deleted has another mtime). One ``stat``, outside the lock."""
        st = _lstat(path)
        with self._cond:
            if self._named_too(st) or st is None or not stat.S_ISREG(st.st_mode):
                return
            key = f"{st.st_dev}:{st.st_ino}"
            kept = (key, st.st_size, st.st_mtime_ns // 1_000_000)
            for oid in self._by_inode.get(key, ()):
                rec = self._records[oid]
                if rec.path != path and kept == (rec.inode, rec.size, rec.mtime):
                    self._hint(oid, path, now)
                    self._cond.notify_all()

    def _on_untracked_write(self, path: str, now: float, *, attrib: bool = False) -> None:
        """A writer closed ``path``, which no tracked file has (a modification, where closes are
        not reported; ``attrib``: its times or mode changed): if it is another name of tracked
        files (``ln a.py b.py``, b.py written in place or touched), each of them has changed.
        One ``stat``, outside the lock. A name that no longer leads to a tracked file may have
        been one when it was written (deleted, or replaced by another file, right after the
        write): each tracked file known to have other names is looked at again, by its stat
        (none, nearly always)."""
        st = _lstat(path)
        with self._cond:
            oids = self._named_too(st)
            # (else each known to have other names, by its stat: ``_reconcile``'s attribute look)
            looked = [(oid, attrib) for oid in oids] or [(oid, True) for oid in self._linked]
            marked = False
            for oid, only_stat in looked:
                marked |= self._mark(oid, now, attrib=only_stat)
            if marked:
                self._cond.notify_all()

    def _bind(self, path: str, oid: str) -> None:
        """``path`` holds ``oid`` (caller holds ``_cond``)."""
        if path not in self._by_path:
            for d in _parents(path):
                self._dirs[d] = self._dirs.get(d, 0) + 1
        self._by_path[path] = oid

    def _unbind(self, path: str) -> None:
        """``path`` holds no tracked file any more (caller holds ``_cond``)."""
        if self._by_path.pop(path, None) is not None:
            for d in _parents(path):
                if self._dirs[d] > 1:
                    self._dirs[d] -= 1
                else:
                    del self._dirs[d]

    def _remember(self, path: str, now: float) -> None:
        """A file appeared at an unindexed path: maybe an indexed file moved there unseen (into a
        directory created a moment ago, before its watch existed). Kept a few seconds."""
        self._recent[path] = now
        self._recent.move_to_end(path)
        while self._recent and (len(self._recent) > _RECENT_MAX or next(iter(self._recent.values())) < now - 10):
            self._recent.popitem(last=False)

    def _moved_unseen(self, rec: _Rec) -> str | None:
        """An unindexed path that appeared recently holding this very file (same inode, size and
        mtime: a rename keeps all three, a new file reusing the inode does not)."""
        if rec.inode is None:
            return None
        with self._cond:
            paths = list(self._recent.items())
        if len(self._recent_stat) > 2 * _RECENT_MAX:
            keep = dict(paths)
            self._recent_stat = {p: c for p, c in self._recent_stat.items() if p in keep}
        wanted = (rec.inode, rec.size, rec.mtime)
        for path, appeared in reversed(paths):
            cached = self._recent_stat.get(path)
            if cached is None or cached[0] < appeared:  # not stat-ed since it (last) appeared
                cached = self._recent_stat[path] = (time.monotonic(), file_key(path))
            # a match is looked at again: the file may have gone or changed since the cached stat
            if cached[1] == wanted and file_key(path) == wanted:
                return path
        return None

    def _mark(self, oid: str, now: float, *, attrib: bool = False, removed: bool = False) -> bool:
        """Look at ``oid`` once its events settle (caller holds ``_cond``). ``attrib``: the event
        changed its times or mode only; ``removed``: it reported the file's removal from its path
        (deleted, replaced, or its directory deleted or replaced)."""
        if removed:
            self._removed.add(oid)
        if not attrib:
            self._attrib_only.discard(oid)
        elif oid not in self._pending:
            self._attrib_only.add(oid)
        self._event_ns[oid] = time.time_ns()
        first = self._pending.get(oid, (now, now))[0]
        self._pending[oid] = (first, now)
        return True

    def _hint(self, oid: str, dest: str, now: float) -> bool:
        old = self._hints.get(oid)
        if old is not None:
            self._hinted.pop(old, None)
        self._hints[oid] = dest
        self._hinted[dest] = oid
        return self._mark(oid, now)

    # --- the tracker thread ----------------------------------------------------------------------

    def _due(self, now: float) -> tuple[list[str], float | None]:
        due, wake = [], None
        for oid, (first, last) in self._pending.items():
            if self._sees_closes and oid in self._writing:
                at = first + self.max_delay  # its writer still has it open: wait for the close
            else:
                at = min(last + self.debounce, first + self.max_delay)
            if at <= now:
                due.append(oid)
            else:
                wake = at if wake is None else min(wake, at)
        return due, wake

    def _run(self) -> None:
        next_health = time.monotonic() + self.health_interval
        next_rescan = None if self.rescan_interval is None else time.monotonic() + self.rescan_interval
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    due, wake = self._due(now)
                    periodic = next_rescan is not None and now >= next_rescan
                    if self._stopping:
                        due = list(self._pending)
                    if due or self._rescan_reason or periodic or now >= next_health or self._stopping:
                        break
                    deadlines = [t for t in (wake, next_health, next_rescan) if t is not None]
                    self._cond.wait(max(0.001, min(deadlines) - now))
                batch = [(oid, self._hints.pop(oid, None)) for oid in due]
                attrib_only = self._attrib_only.intersection(due)
                self._attrib_only.difference_update(due)
                self._writing.difference_update(due)
                for oid, hint in batch:
                    del self._pending[oid]
                    if hint is not None:
                        self._hinted.pop(hint, None)
                lost = self._rescan_reason is not None  # (asked for: events may have been lost)
                rescan = lost or periodic
                self._rescan_reason = None
                stopping = self._stopping
                self._busy = True
            try:
                # moves first: a file moved over another indexed file takes its path before
                # the other one is looked at
                for oid, hint in sorted(batch, key=lambda b: b[1] is None):
                    self._reconcile(oid, hint, attrib_only=oid in attrib_only)
                if rescan and not stopping:
                    self._rescan(lost=lost)
                    next_rescan = None if self.rescan_interval is None else time.monotonic() + self.rescan_interval
                if time.monotonic() >= next_health and not stopping:
                    self._check_health()
                    next_health = time.monotonic() + self.health_interval
            except Exception as e:  # the thread must survive anything (a store that is down, a bug)
                self._error(f"tracker: {type(e).__name__}: {e}")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
            if stopping:
                return

    def _reconcile(
        self, oid: str, hint: str | None, *, attrib_only: bool = False, reported: bool = False
    ) -> Indexed | None:
        """Look at the disk once and record what it shows for object ``oid``. ``attrib_only``:
        its events were only attribute changes, which matter only if they changed its stat.
        ``reported``: were it gone, do not wait for the event of its removal (a rescan after
        events were lost)."""
        with self._cond:
            rec = self._records.get(oid)
            holder = None if rec is None else self._by_path.get(rec.path)
            # (taken before the look: a removal reported after it is looked at again; never one
            # of an attribute change only, which a removal's event is not)
            if oid in self._removed:
                self._removed.discard(oid)
                reported = True
        if rec is None or (attrib_only and holder in (None, oid) and not _differs(rec, _lstat(rec.path))):
            return None
        self.stats["reconciled"] += 1
        target: str | None = None
        if holder in (None, oid) and _holds_file(rec.path):
            target = rec.path  # still (or again) there: an in-place or atomic save
        elif hint is not None and _holds_file(hint) and self.workspace.root_of(hint) is not None:
            target = hint  # moved
        elif not rec.missing:
            target = self._moved_unseen(rec)
            if target is None and self.running and not self._stopping:
                # gone: look once more a moment later, in case it reappears (a slow save) or
                # turns up elsewhere (its move event could not be paired); and not before its
                # removal was reported (``mv a/x.py . && mv a b``: a look at a/z.py for an
                # earlier write, before the observer reports the directory's move, finds it
                # gone, and a version would say it was missing before it is found at b/z.py)
                now = time.monotonic()
                since, was = self._gone.get(oid, (now, False))
                with self._cond:  # (a removal reported from now on comes after this look)
                    reported = reported or was or hint is not None or oid in self._removed
                    self._gone[oid] = (since, reported)
                    wait = since + (self.missing_grace if reported else self.unreported_wait) - now
                    if wait > 0 and oid not in self._pending:  # (an event since the look: looked at then)
                        self._postpone(oid, wait)  # (or sooner: the event of its removal)
                if wait > 0:
                    return None
        self._gone.pop(oid, None)
        if time.monotonic() < self._store_back_at:
            # the store was out of reach moments ago: one try every ``store_retry``, not one a file
            self._unrecorded_yet(oid, rec, "the store was out of reach moments ago")
            return None
        with self._cond:
            seen = self._event_ns.get(oid)
        try:
            result = self.index.refresh(
                oid,
                Path(target) if target else None,
                cause="tracker",
                reason="deleted or moved away on disk",
                settled=lambda snap: self._settled(oid, rec, snap, seen),
                record_stat=True,
                at=rec.path,
            )
        except StoreUnavailable as e:
            self._store_back_at = time.monotonic() + self.store_retry
            self._unrecorded_yet(oid, rec, str(e))
            return None
        except ContextOSError as e:
            if target is not None and not _holds_file(target):
                # gone since the look above (deleted or moved right after its change): no problem
                # to report; it is looked at again as a file found gone (its own events are on
                # their way, which a start's or a stop's rescan leaves to)
                if self.running and not self._stopping:
                    self._later(oid, 0.0)
                return None
            self._error(f"{rec.path}: {e}")
            return None
        self._unrecorded.discard(oid)
        if result is None:  # evicted from the store: stop tracking it
            with self._cond:
                self._set_rec(oid, None)
                self._event_ns.pop(oid, None)
                if self._by_path.get(rec.path) == oid:
                    self._unbind(rec.path)
            return None
        if result.status == "unsettled":
            self._later(oid, self.debounce)
            return None
        self._deferred.pop(oid, None)
        if result.status == "already indexed" and result.version.doc and _rec_of(result.version.doc["meta"]) != rec:
            # as another process's index recorded it (moved, gone, back): nothing was written here,
            # so ``_note`` heard of nothing, and the record must follow the store's, not stay behind
            self._note_meta(oid, result.version.doc["meta"])
        if result.status != "already indexed":
            self.stats["versions"] += 1
            return result
        # same bytes under a new mtime or inode (touch, sed -i matching nothing, a checkout
        # rewriting the file): no version, but the index corrected the stat of the version in
        # force (once settled, as a new version would be), and told ``_note``: what the next
        # rescan, and the next start(), compare with, so neither reads and hashes the file again
        return None

    def _unrecorded_yet(self, oid: str, rec: _Rec, why: str) -> None:
        """The store is out of reach (an XTDB node down): look at ``oid`` again when it may answer,
        so that the change is recorded moments after it does, not at the next rescan (nor never
        without one); said once per file. While stopping, it is left for the next ``start()``."""
        if oid not in self._unrecorded:
            self._unrecorded.add(oid)
            self._error(f"{rec.path}: not recorded yet, retrying every {self.store_retry:g} s: {why}")
        if not self._stopping:
            self._later(oid, max(0.0, self._store_back_at - time.monotonic()))

    def _later(self, oid: str, delay: float) -> None:
        """Look at ``oid`` again in ``delay`` seconds (unless new events come first)."""
        with self._cond:
            self._postpone(oid, delay)

    def _postpone(self, oid: str, delay: float) -> None:
        """``_later``, the caller holding ``_cond``."""
        later = time.monotonic() + delay
        first, last = self._pending.get(oid, (later, later))
        self._pending[oid] = (max(first, later), max(last, later))
        self._cond.notify_all()

    def _settled(self, oid: str, rec: _Rec, snap: FileSnapshot, seen: int | None) -> bool:
        """Whether what was just read of ``oid`` (about to become a new version) can be trusted
        not to be a write caught halfway. Not when:

        * an event for it came while it was read (a newer look is due anyway);
        * it changed after the newest event seen for it (the events of that change are still on
          their way: a writer that truncated, then paused, would be recorded empty);
        * it changed less than ``debounce`` ago (the events that woke us may be older than a
          write still in progress);
        * it is empty now, was not before (or was missing), and was emptied less than
          ``max_delay`` ago (a truncate whose write has not come yet; a file re-created, its text
          not written yet).

        Deferred for at most ``max_delay`` in a row, so a file written continuously is still
        recorded. Stopping, or a rescan outside the tracker thread, takes what is there."""
        if not self.running or self._stopping or threading.current_thread() is not self._thread:
            return True
        with self._cond:
            newer = self._event_ns.get(oid) != seen
        age = time.time_ns() - snap.mtime_ns
        # (a file recorded missing that reappears empty: created, its text not written yet)
        emptied = snap.size == 0 and (bool(rec.size) or rec.missing) and age < self.max_delay * 1e9
        now = time.monotonic()
        since = self._deferred.setdefault(oid, now)
        unsure = newer or (seen is not None and snap.mtime_ns > seen) or 0 <= age < self.debounce * 1e9 or emptied
        return not unsure or now - since >= self.max_delay

    def _error(self, message: str) -> None:
        """Keep ``message`` in ``errors`` and log it (a warning: what a server shows on stderr),
        unless it is one of the last ``SAID`` logged (a watch failing again at each health check,
        the watches of two roots failing in turn)."""
        self.stats["errors"] += 1
        self.errors.append(message)
        with self._said_lock:  # the tracker's thread, and a caller's (``track``)
            if message in self._said:
                self._said.move_to_end(message)
                return
            self._said[message] = None
            if len(self._said) > SAID:
                self._said.popitem(last=False)
        log.warning("file tracker of %s: %s", self.workspace.root, message)

    def status(self, errors: int = 10) -> dict[str, Any]:
        """What a server reports of this tracker: its workspace, whether it runs, how many files
        it tracks, its counts, and its latest ``errors`` problems (newest last)."""
        with self._cond:
            tracked = len(self._records)
        return {
            "workspace": str(self.workspace.root),
            "running": self.running,
            "tracked": tracked,
            "stats": dict(self.stats),
            "errors": list(self.errors)[-errors:] if errors > 0 else [],
        }

    def track(self, paths: Iterable[str | os.PathLike[str]]) -> list[Indexed]:
        """Index ``paths`` (content mode) so that they are tracked from now on."""
        return [self.index.index(self.workspace.resolve(p), read=True, cause="tracker") for p in paths]


class Trackers:
    """One running ``FileTracker`` per workspace, for a server whose sessions share workspaces
    (``ctxos serve``, ``ctxos proxy --workspace``, ``ctxos mcp --workspace``): the first session
    in a workspace starts its tracker, the later ones share it (and its index, so that a file any
    of their tools index is tracked at once); ``close()`` stops them all. Each taking of a tracker
    holds it; a server whose sessions end before it does (the proxy closes idle ones) gives each
    hold back (``release``), and the last one given back stops the tracker: a proxy meeting a new
    directory per task watched every one of them until it stopped. Thread-safe."""

    def __init__(self, store: Store, **options: Any):
        """``options``: passed to each ``FileTracker`` (``rescan_interval``, ``debounce``, …)."""
        self.store = store
        self.options = options
        self._lock = threading.Lock()
        self._running: dict[tuple[Path, tuple[Path, ...]], tuple[FileTracker, int]] = {}
        """Each workspace's running tracker and how many hold it."""
        # a workspace whose tracker is stopping: set once it stopped (a new one waits for it, so
        # that two trackers never record the same change)
        self._stopping: dict[tuple[Path, tuple[Path, ...]], threading.Event] = {}

    def __call__(self, workspace: Workspace) -> FileTracker:
        """The running tracker of ``workspace`` (its root and allowed outside directories), held
        until ``release(workspace)`` or ``close()``."""
        key = (workspace.root, workspace.allowed)
        while True:
            with self._lock:
                stopping = self._stopping.get(key)
                if stopping is None:
                    found, held = self._running.get(key) or (None, 0)
                    if found is None:
                        found = FileTracker(self.store, workspace, **self.options).start()
                    self._running[key] = (found, held + 1)
                    return found
            stopping.wait()

    def release(self, workspace: Workspace) -> None:
        """Give back one hold of ``workspace``'s tracker; the last one stops it (what it saw is
        recorded first, and a later start records what changed while nothing watched). A
        workspace holding none (``close()`` came first) is left alone."""
        key = (workspace.root, workspace.allowed)
        with self._lock:
            found = self._running.get(key)
            if found is None:
                return
            tracker, held = found
            if held > 1:
                self._running[key] = (tracker, held - 1)
                return
            del self._running[key]
            stopping = self._stopping[key] = threading.Event()
        try:
            tracker.stop()
        finally:
            with self._lock:
                del self._stopping[key]
            stopping.set()

    def running(self) -> list[FileTracker]:
        with self._lock:
            return [tracker for tracker, _ in self._running.values()]

    def status(self) -> list[dict[str, Any]]:
        """``FileTracker.status`` of each running tracker."""
        return [t.status() for t in self.running()]

    def close(self) -> None:
        """Stop every tracker (what they saw and did not record yet is recorded first)."""
        with self._lock:
            running, self._running = [tracker for tracker, _ in self._running.values()], {}
        for tracker in running:
            tracker.stop()
