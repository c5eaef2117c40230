"""The ``ObjectSource`` protocol: how recall sources contribute objects to a session.

A source (vector or keyword recall over the store, markdown memory scopes, agent-mesh messages)
is asked, with the current query (the latest user message, or an explicit ``recall`` call) and
a token budget, for scored items. Each item becomes a versioned object of its own kind with its
provenance (source, query, score, rank) and enters the session's metadata pool, or, above a
relevance bar and within the budget, the active pool (DESIGN.md §4, "Sources").

The protocol and the simplest source (``TextSource``) live here; the recall and memory sources
beside it. No source module may import from ``context``, ``harness`` or ``files``: a source reads
what it reads and returns items, the session decides what they become (context/sources.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["ObjectSource", "SourceItem", "TextSource"]


@dataclass(frozen=True)
class SourceItem:
    """One item a source offers for a query."""

    id: str
    """The id of the object the item becomes, kind-prefixed (``memory:…``, ``message:…``)."""
    kind: str
    """The object kind (``memory``, ``recall``, ``message``)."""
    text: str
    score: float
    """Relevance to the query, higher is better; comparable within one source."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """What the metadata pool shows of the item (name, path, peer, time, …)."""
    stored: bool = False
    """The item is an object the source has written itself (a mesh message): the session shows
    the store's latest version of it and writes nothing."""


class ObjectSource(Protocol):
    """Something that answers a query with scored items."""

    name: str
    """Stable name recorded as the items' provenance."""

    def items(self, query: str, budget_tokens: int) -> list[SourceItem]:
        """The items for ``query``, best first, together within about ``budget_tokens``."""
        ...

    # Optional: ``ended() -> list[str]``, the ids of items it offered whose origin is gone for good
    # (a deleted ``MEMORY.md``); a session consulting it at every turn ends their objects in the
    # store (context/sources.py). A source without it ends nothing.


class TextSource:
    """The simplest source: a fixed set of texts, scored by the share of the query's words each
    holds (case-insensitive). Used in tests and examples; real recall is ``sources.recall``."""

    def __init__(self, name: str, texts: Mapping[str, str], *, kind: str = "recall"):
        self.name = name
        self.kind = kind
        self.texts = dict(texts)
        """Item id → text."""

    def items(self, query: str, budget_tokens: int) -> list[SourceItem]:
        words = {w for w in query.lower().split() if w.isalnum()}
        scored = []
        for id, text in self.texts.items():
            have = set(text.lower().split())
            score = len(words & have) / len(words) if words else 0.0
            if score > 0:
                scored.append(SourceItem(id, self.kind, text, score, {"name": id.split(":")[-1]}))
        return sorted(scored, key=lambda i: (-i.score, i.id))
