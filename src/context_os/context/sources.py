"""Object sources in a session: what recall and memory put in front of the model.

A session consults each of its sources (``Session.add_source``) when a new user message arrives
(a recall source: the message is the query) or at every turn (a source that does not depend on
the query, like the memory index: it is re-read when its file changes). Each item a source
returns is stored as a versioned object of its own kind (``recall``, ``memory``, …) with its
provenance in ``meta`` (source, query, score, rank) and shown in the session: in the metadata
pool (inactive, one line), or in the active pool when it scores at or above the feed's bar and
fits its token budget (or always, pinned, for a pinned feed). The agent activates and
deactivates them like any object; frames record them like any object, so a frame shows what
recall put in front of the model at that turn.

An item whose text is unchanged keeps its object version (nothing is written) and its block in
place: recalling the same thing again costs no prompt-cache miss.

This module never reads files or indexes itself: sources do (``context_os.sources``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InputError, StoreUnavailable
from ..objects import SourceDoc
from ..sources.base import ObjectSource, SourceItem
from ..store.base import Delete, Op
from ..tokens import estimate_tokens

if TYPE_CHECKING:
    from .session import Session

__all__ = ["QUERY_CHARS", "SourceFeed", "consult", "lines_shown", "shown_whole", "store_item"]

QUERY_CHARS = 500
"""The query kept in an item's provenance is cut to this many characters."""


@dataclass(frozen=True)
class SourceFeed:
    """One source of a session, and how its items enter the pools."""

    source: ObjectSource
    budget_tokens: int = 1500
    """The tokens the source's items may take in the active pool together."""
    active_score: float | None = None
    """Items scoring at least this enter the active pool (within the budget); None: none do,
    every item enters the metadata pool only, for the agent to activate."""
    max_items: int = 5
    """At most this many items per consultation are shown at all."""
    pin: bool = False
    """Every item enters the active pool, pinned (the memory index), whatever its score."""
    every_turn: bool = False
    """Consult at every turn, with or without a new user message (a source that does not depend
    on the query, re-read when it changes); otherwise only when a new user message arrives."""
    forget: bool = False
    """With ``every_turn``: an item no longer offered leaves the session altogether (absent, not
    even a line in the metadata pool), as a capped history does; otherwise it is deactivated."""

    def __post_init__(self) -> None:
        if self.budget_tokens < 0 or self.max_items < 0:
            raise InputError("budget_tokens and max_items must be ≥ 0")
        if not getattr(self.source, "name", None):
            raise InputError("an object source needs a non-empty name (its items' provenance)")


def consult(session: Session, feeds: Sequence[SourceFeed], query: str | None) -> list[str]:
    """Ask every feed due now and show its items in ``session``; the ids shown, in order.

    ``query``: the newest user message since the last consultation (None: none came). An item a
    feed consulted at every turn no longer offers (a deleted ``MEMORY.md``) leaves the context.
    """
    shown: list[str] = []
    for feed in feeds:
        if query is None and not feed.every_turn:
            continue
        try:
            shown += _consult_feed(session, feed, query)
        except StoreUnavailable:
            # a source reading the store while it is out of reach (writes wait in an outbox): the
            # turn goes on without it (a query source waits for the next user message)
            continue
    return shown


def _consult_feed(session: Session, feed: SourceFeed, query: str | None) -> list[str]:
    """One feed's part of ``consult``."""
    shown: list[str] = []
    items = _eligible(session, feed.source.items(query or "", feed.budget_tokens))[: feed.max_items]
    used = 0
    for rank, item in enumerate(items):
        tokens = estimate_tokens(len(item.text))
        scores = feed.active_score is not None and item.score >= feed.active_score
        active = feed.pin or (scores and used + tokens <= feed.budget_tokens)
        used += tokens if active else 0
        wrote = False if item.stored else store_item(session, feed, item, rank, query)
        if wrote is None:
            continue  # evicted: its text stays out of the store and the context
        obj = session.view.objects.get(item.id)
        if obj is not None and obj.state == "active" and not active:
            continue  # recalled again, below the bar: what the agent (or an earlier query) chose stays
        want = "active" if active else "inactive"
        if feed.every_turn and not wrote and obj is not None and obj.state == want and obj.pinned == feed.pin:
            shown.append(item.id)
            continue  # read again, unchanged: nothing to show anew, nothing to record
        reason = f"{feed.source.name}: score {item.score:.3g}, rank {rank + 1}"
        session.show(item.id, state=want, actor="system", reason=reason)
        if feed.pin and not session.view.objects[item.id].pinned:
            session.pin(item.id, actor="system")
        shown.append(item.id)
    if feed.every_turn:
        offered = {item.id for item in items}
        ended = _end(session, feed, offered)
        for o in list(session.view.objects.values()):
            if o.meta.get("source") != feed.source.name or o.id in offered:
                continue
            if o.pinned:
                session.unpin(o.id, actor="system")
            if o.id in ended:
                session.drop(o.id, actor="system", reason=f"{feed.source.name}: its origin is gone (a deleted file)")
            elif feed.forget:
                session.drop(o.id, actor="system", reason=f"{feed.source.name} no longer offers it")
            elif o.state == "active":
                session.deactivate(o.id, actor="system", reason=f"{feed.source.name} no longer offers it")
    return shown


def _end(session: Session, feed: SourceFeed, offered: set[str]) -> set[str]:
    """The items ``feed``'s source says are gone (``ended()``: a deleted ``MEMORY.md``): their
    objects, and the ``recall`` copy a recall of them stored, end in the store from now on, so
    recall no longer finds what was deleted (a search ``as_of`` before still does), and this
    session's recall copies of them leave it, as do those of lines their file no longer holds
    (``_outdated``). A source without ``ended`` ends nothing."""
    ended = getattr(feed.source, "ended", None)
    gone = set(ended()) - offered if ended is not None else set()
    session.source_ended &= gone  # created again: the next deletion is ended again
    for id in sorted(gone - session.source_ended):
        v = session.store.get(id)
        own = v is not None and v.doc is not None and v.doc.get("meta", {}).get("source") == feed.source.name
        # what recalls of it stored: the stored index (part ""), and lines of the file as recall
        # read it from disk (parts "L<first>-<last>"); a topic file is never stored itself, but
        # the recall copies of its lines are
        copies = sorted(c.id for c in session.store.find("recall", {"object": id}) if c.doc is not None)
        ops: list[Op] = [*([Delete(id)] if own else []), *(Delete(c) for c in copies)]
        if ops:
            session.writer.submit(ops)
        for c in [id, *copies]:  # what the store no longer holds: a file restored is stored again
            session.source_hashes.pop(c, None)
        session.source_ended.add(id)
    moved = _outdated(session, feed)
    for o in list(session.view.objects.values()):  # this session's recall copies of them go too
        if o.kind == "recall" and (o.meta.get("object") in gone or o.id in moved):
            why = "its file no longer holds it there" if o.id in moved else "its origin is gone (a deleted file)"
            session.source_hashes.pop(o.id, None)
            session.drop(o.id, actor="system", reason=f"{feed.source.name}: {why}")
    return gone


def _outdated(session: Session, feed: SourceFeed) -> set[str]:
    """This session's recall copies of lines of memory files whose file no longer holds their
    text at their lines (``outdated()`` of ``feed``'s source: a fact edited, or moved by a line
    inserted above it), ended in the store too unless the version there is current (another
    session's, of the text those lines hold now). A copy's id names its lines: kept, the copy of
    a corrected fact stayed to activate with its old text, and a fact moved down came back under
    a second id beside the first."""
    outdated = getattr(feed.source, "outdated", None)
    if outdated is None:
        return set()
    copies = {
        o.id: (o.meta["object"], lines, o.content)
        for o in session.view.objects.values()
        if o.kind == "recall"
        and isinstance(o.meta.get("object"), str)
        and isinstance(o.content, str)
        and (lines := _lines(o.meta.get("lines"))) is not None
    }
    moved: set[str] = outdated(copies) if copies else set()
    stored = {c: session.store.get(c) for c in sorted(moved)}
    current = {
        c: (copies[c][0], copies[c][1], v.doc["content"])
        for c, v in stored.items()
        if v is not None and v.doc is not None and isinstance(v.doc.get("content"), str)
    }
    ends = outdated(current) if current else set()
    if ends:
        session.writer.submit([Delete(c) for c in sorted(ends)])
    return moved


def _lines(value: Any) -> tuple[int, int] | None:
    """A recall copy's ``lines`` meta (``[first, last]`` of a memory file), or None: not one."""
    if not isinstance(value, list) or len(value) != 2 or not all(type(n) is int for n in value):
        return None
    return value[0], value[1]


def _eligible(session: Session, items: list[SourceItem]) -> list[SourceItem]:
    """Items worth showing: not this session's own chat (it is in the history already), nor a
    memory index its context shows whole (``shown_whole``), nor a stored object evicted since its
    source took it (a mesh agent's message: the agent still offers it)."""
    out = []
    for item in items:
        if item.stored and item.id in session.evicted:
            continue
        obj = str(item.meta.get("object", ""))
        if item.meta.get("session") == session.id and obj.startswith("chat:"):
            continue
        ref, kind = item.meta.get("ref"), str(item.meta.get("object_kind"))
        if isinstance(ref, dict) and shown_whole(session, obj, kind, ref.get("object_hash")):
            continue
        lines = item.meta.get("lines")
        if isinstance(ref, dict) and isinstance(lines, list) and lines_shown(session, obj, lines, ref.get("sha")):
            continue
        out.append(item)
    return out


def lines_shown(session: Session, obj_id: str, lines: Sequence[int], sha: Any) -> bool:
    """Whether lines of a memory file recall read from disk (``RecallHit.path``) are in the memory
    index the active pool shows: the same file, unchanged since (its hash), within the head shown."""
    o = session.view.objects.get(obj_id)
    if o is None or o.state != "active" or o.version is None or len(lines) != 2:
        return False
    v = session.store.get(obj_id)
    meta = (v.doc or {}).get("meta", {}) if v is not None and v.object_hash == o.version[2] else {}
    shown = meta.get("injected_lines")
    return sha is not None and meta.get("sha") == sha and isinstance(shown, int) and lines[1] <= shown


def shown_whole(session: Session, obj_id: str, kind: str, object_hash: Any) -> bool:
    """Whether the session's active pool shows this very version of a ``memory`` object whole (a
    memory index, pinned): a recall hit of it would offer again, as a second copy, text the
    model has in front of it. A file may show a window of itself only: it is recalled."""
    if kind != "memory":
        return False
    o = session.view.objects.get(obj_id)
    return o is not None and o.state == "active" and o.version is not None and o.version[2] == object_hash


INDEX_PREVIEW_CHARS = 60
"""How much of a recall hit's text its line in the object index shows."""


def preview(text: str, chars: int) -> str:
    """A text's first words on one line, at most ``chars`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= chars else line[: chars - 1] + "…"


def store_item(session: Session, feed: SourceFeed, item: SourceItem, rank: int, query: str | None) -> bool | None:
    """Write the item as a version of its object, unless the store already holds it (for a feed
    read at every turn: this very document; for a query: this text); True when it wrote one.
    What the session last wrote or read of each item (``Session.source_hashes``) spares a store
    read for an item that did not change. None: its text was evicted (``Session.erased_texts``),
    and its source still offers it (the memory file holds it yet): neither stored nor to be shown."""
    text = item.text
    redact = session.ingest.redact
    if redact is not None:
        text = redact(text)[0]  # a memory file is the user's text: secrets stay out
    meta: dict[str, Any] = dict(item.meta)
    meta.update(source=feed.source.name, score=round(float(item.score), 6), rank=rank + 1)
    meta.setdefault("tokens", estimate_tokens(len(text)))  # what activating it costs, in the object index
    if item.kind == "recall" and "object" in meta:  # a stored part: how it begins shows there, to judge it by
        meta.setdefault("preview", preview(text, INDEX_PREVIEW_CHARS))
    if query is not None and not feed.every_turn:
        # the recall tool's query is the model's argument (a user message, the user's), stored
        # before its call is ingested and redacted: redacted here whole, then cut
        meta["query"] = (query if redact is None else redact(query)[0])[:QUERY_CHARS]
    elif redact is not None and isinstance(meta.get("query"), str):
        meta["query"] = redact(meta["query"])[0]  # (the item's own)
    try:
        doc = SourceDoc(id=item.id, kind=item.kind, content=text, meta=meta).to_doc()  # type: ignore[arg-type]
    except ValueError as e:
        raise InputError(f"source {feed.source.name!r} returned an item that is not a valid object: {e}") from None
    if doc["content_hash"] in session.erased_texts:
        return None
    # a new query's provenance alone makes no new version: its version (and its block) stay
    same = "object_hash" if feed.every_turn else "content_hash"
    known = session.source_hashes.get(item.id)
    if known is not None and known[same] == doc[same] and item.id in session.view.objects:
        # trusted for an item the session still shows: one it dropped may have been ended in the
        # store since (its file deleted, then restored with the same text): showing it failed
        return False
    latest = session.store.get(item.id)
    if latest is not None and latest.doc is not None and latest.doc[same] == doc[same]:
        session.source_hashes[item.id] = {k: latest.doc[k] for k in ("object_hash", "content_hash")}
        return False
    session.store.put(doc)
    session.source_hashes[item.id] = {k: doc[k] for k in ("object_hash", "content_hash")}
    return True
