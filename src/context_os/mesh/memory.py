"""Per-peer memory: what an agent keeps about each peer, in the store, found through recall.

The seed keeps it in a ChromaDB collection per agent; here every entry is a ``memory`` object in
the store (append-only: each ``store`` is a new object, nothing is overwritten), so it is
versioned, hashed, searchable by the same keyword index and vectors as everything else (``Recall``),
and survives restarts with the store. An entry's meta holds the peer, the key (``exchange``,
``broadcast``, or the agent's own: ``prefs``, ``decision``, …), its type and when it was stored;
its scope (``meta.session``) is ``mesh:<agent>:<peer>``, which is how a search is narrowed to one
peer.

The read-side limits are the seed's, in three presets (``MemoryLimits``): values cut to 10,000
characters, at most 50 entries a read, 5 search results, the latest exchange cut to 5,000, and
what is recalled for an incoming request capped at 50,000 characters altogether.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError, InputError
from ..objects import SourceDoc
from ..scrub import RedactFunction
from ..times import now_ms
from ..tokens import estimate_tokens

if TYPE_CHECKING:
    from ..sources.recall import Recall
    from ..store.base import Store

__all__ = ["MEMORY_PRESETS", "MemoryEntry", "MemoryLimits", "PeerMemory", "peer_scope"]

MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 100_000
"""The longest value stored (what is read back is cut to ``MemoryLimits.truncate``)."""
MAX_QUERY_CHARS = 10_000
"""The longest search query (a longer request is searched for by its beginning)."""
MAX_SEARCH_HITS = 400
"""A search looks at most this far down the ranking for entries that are not repeats."""


@dataclass(frozen=True)
class MemoryLimits:
    """How much one read may return (seed ``MemoryConfig``)."""

    truncate: int = 10_000
    """Each value is cut to this many characters (unless ``full_text``)."""
    max_entries: int = 50
    """At most this many entries per read, whatever the limit asked."""
    default_limit: int = 10
    exchange_truncate: int = 5_000
    """The latest exchange recalled for a request is cut to this."""
    budget: int = 50_000
    """What is recalled for one incoming request, altogether, in characters."""
    search_results: int = 5
    auto_results: int = 3
    """How many search results are recalled for an incoming request."""

    def __post_init__(self) -> None:
        for name in ("truncate", "max_entries", "default_limit", "exchange_truncate", "budget", "search_results"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"memory limit {name} must be a positive integer, got {value!r}")

    @classmethod
    def preset(cls, name: str, **overrides: int) -> MemoryLimits:
        """``small`` (32k-token models), ``medium`` (128k) or ``large`` (1M, the default)."""
        if name not in MEMORY_PRESETS:
            raise ConfigError(f"memory preset must be one of {', '.join(MEMORY_PRESETS)}, not {name!r}")
        return replace(MEMORY_PRESETS[name], **overrides)


MEMORY_PRESETS = {
    "small": MemoryLimits(truncate=2_000, max_entries=20, exchange_truncate=2_000, budget=12_000),
    "medium": MemoryLimits(truncate=5_000, max_entries=30, exchange_truncate=3_000, budget=25_000),
    "large": MemoryLimits(),
}

EntryType = Literal["explicit", "conversation_turn", "broadcast", "system"]


@dataclass(frozen=True)
class MemoryEntry:
    id: str
    """The ``memory`` object's id."""
    peer: str
    key: str
    value: str
    timestamp: int
    type: str
    truncated: bool = False
    score: float | None = None
    """Search only: the recall score (higher is better)."""
    metadata: Mapping[str, Any] | None = None

    def public(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "peerId": self.peer,
            "key": self.key,
            "value": self.value,
            "timestamp": self.timestamp,
            "type": self.type,
        }
        if self.truncated:
            out["truncated"] = True
        if self.score is not None:
            out["score"] = round(self.score, 4)
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out


def peer_scope(agent: str, peer: str) -> str:
    """The scope (``meta.session``) of an agent's memories of one peer."""
    return f"mesh:{agent}:{peer}"


def _check_text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{what} must be non-empty text")
    if len(value) > limit:
        raise InputError(f"{what} is {len(value):,} characters, more than {limit:,}")
    return value


class PeerMemory:
    """One agent's memories of its peers, in ``store``; searched with ``recall`` (keyword only
    without one)."""

    def __init__(
        self,
        store: Store,
        agent: str,
        *,
        recall: Recall | None = None,
        limits: MemoryLimits | None = None,
        redact: RedactFunction | None = None,
    ):
        """``redact``: what keeps secrets out of the values stored (``MeshAgent``'s)."""
        self.redact = redact
        self.store = store
        self.agent = agent
        self.recall = recall
        self.limits = limits or MemoryLimits()

    def store_entry(
        self,
        peer: str,
        key: str,
        value: str,
        *,
        type: EntryType = "explicit",
        peer_name: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> MemoryEntry:
        """Append one entry (the same peer and key may hold many: newest first when read)."""
        _check_text(peer, "memory: peerId", 128)
        _check_text(key, "memory: key", MAX_KEY_CHARS)
        _check_text(value, "memory: value", MAX_VALUE_CHARS)
        if self.redact is not None:
            value = self.redact(value)[0]
        extra = dict(metadata or {})
        for k, v in extra.items():
            if not isinstance(k, str) or not (isinstance(v, str | int | float | bool) or v is None):
                raise InputError(f"memory: metadata values must be text, numbers or booleans ({k!r} is not)")
        ts = now_ms()
        oid = f"memory:mesh:{self.agent}:{ts:x}{os.urandom(3).hex()}"
        meta: dict[str, Any] = {
            "session": peer_scope(self.agent, peer),
            "mesh_agent": self.agent,
            "peer": peer,
            "key": key,
            "type": type,
            "timestamp": ts,
            "name": f"{peer_name or peer[:16]} / {key}",
            "tokens": estimate_tokens(len(value)),
        }
        if peer_name:
            meta["peer_name"] = peer_name
        if extra:
            meta["metadata"] = extra
        self.store.put(SourceDoc(id=oid, kind="memory", content=value, meta=meta).to_doc())
        return MemoryEntry(oid, peer, key, value, ts, type, metadata=extra or None)

    def _entry(self, doc: Mapping[str, Any], full_text: bool, cut: int | None = None) -> MemoryEntry:
        meta = doc.get("meta", {})
        value = str(doc.get("content") or "")
        limit = cut or self.limits.truncate
        truncated = not full_text and len(value) > limit
        return MemoryEntry(
            doc["id"],
            str(meta.get("peer", "")),
            str(meta.get("key", "")),
            value[:limit] + "…" if truncated else value,
            int(meta.get("timestamp", 0)),
            str(meta.get("type", "explicit")),
            truncated,
            metadata=meta.get("metadata"),
        )

    def _limit(self, limit: int | None) -> int:
        if limit is None:
            return min(self.limits.default_limit, self.limits.max_entries)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InputError(f"memory: limit must be a positive integer, got {limit!r}")
        return min(limit, self.limits.max_entries)

    def get(
        self,
        peer: str | None = None,
        key: str | None = None,
        *,
        limit: int | None = None,
        full_text: bool = False,
    ) -> list[MemoryEntry]:
        """Entries for a peer, a key, or both, newest first (at most ``max_entries``)."""
        if not peer and not key:
            raise InputError("memory_recall: give a peerId, a key, or both")
        where: dict[str, Any] = {"mesh_agent": self.agent}
        if peer:
            where["peer"] = peer
        if key:
            where["key"] = key
        found = [v for v in self.store.find(kind="memory", where=where) if v.doc is not None]
        # newest first: by time, then by the store's own order (several in one millisecond)
        found.sort(key=lambda v: (v.doc["meta"].get("timestamp", 0), v.tx_id), reverse=True)  # type: ignore[index]
        return [self._entry(v.doc, full_text) for v in found[: self._limit(limit)]]  # type: ignore[arg-type]

    def keys(self, peer: str) -> list[dict[str, Any]]:
        """Every key stored for a peer, with how many entries each holds (most first)."""
        _check_text(peer, "memory_keys: peerId", 128)
        counts: dict[str, int] = {}
        for v in self.store.find(kind="memory", where={"mesh_agent": self.agent, "peer": peer}):
            if v.doc is not None:
                k = str(v.doc["meta"].get("key", ""))
                counts[k] = counts.get(k, 0) + 1
        return [{"key": k, "count": n} for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]

    def count(self, peer: str | None = None) -> int:
        where = {"mesh_agent": self.agent} | ({"peer": peer} if peer else {})
        return len(self.store.find(kind="memory", where=where))

    def search(
        self, query: str, *, peer: str | None = None, n: int | None = None, full_text: bool = False
    ) -> list[MemoryEntry]:
        """The entries that best match ``query`` (keyword and, with an embedder, meaning), of one
        peer or of all, best first."""
        _check_text(query, "memory_search: query", MAX_QUERY_CHARS)
        want = n if n is not None else self.limits.search_results
        if isinstance(want, bool) or not isinstance(want, int) or want < 1:
            raise InputError(f"memory_search: nResults must be a positive integer, got {n!r}")
        want = min(want, self.limits.max_entries)
        prefix = f"memory:mesh:{self.agent}:"
        scope = peer_scope(self.agent, peer) if peer else None
        out: list[MemoryEntry] = []
        seen: set[str] = set()
        said: set[tuple[str, str]] = set()
        k = want * 4
        while True:
            hits = self._hits(query, scope, k)
            for oid, score in hits:
                if not oid.startswith(prefix) or oid in seen:
                    continue  # another agent's memories, or another part of one already taken
                seen.add(oid)
                doc = self.store.doc(oid)
                if doc is None:
                    continue
                entry = self._entry(doc, full_text)
                # the same text again from the same peer (a broadcast repeated) adds nothing; from
                # another peer it does: who said it
                same = (entry.peer, " ".join(str(doc.get("content") or "").split()))
                if same in said:
                    continue
                said.add(same)
                out.append(replace(entry, score=float(score)))
                if len(out) >= want:
                    return out
            # repeats of one entry filled the window: look further, as far as search goes
            if len(hits) < k or k >= MAX_SEARCH_HITS:
                return out
            k = min(k * 4, MAX_SEARCH_HITS)

    def _hits(self, query: str, scope: str | None, k: int) -> list[tuple[str, float]]:
        """(object id, score) of the ``k`` best parts, best first; the search runs again from the
        start for a larger ``k`` (a fused ranking has no cursor)."""
        if self.recall is not None:
            # entries with the same text are kept apart: who said it is what an entry is about
            result = self.recall.search(query, k=k, kinds=["memory"], session=scope, distinct=False)
            return [(h.id, h.score) for h in result.hits]
        return [(h.id, h.score) for h in self.store.text_search(query, k=k, kinds=["memory"], session=scope)]

    def recall_for(self, peer: str, message: str) -> tuple[str, list[MemoryEntry]]:
        """What to put before a peer's request: the ``auto_results`` entries that best match it
        and the latest exchange with the peer, within ``budget`` characters; (text, entries)."""
        lim = self.limits
        parts: list[str] = []
        ids: list[str] = []
        taken: list[MemoryEntry] = []
        used = 0
        last = self.get(peer, "exchange", limit=1)
        query = message[:MAX_QUERY_CHARS]
        picked = [*self.search(query, peer=peer, n=lim.auto_results)] if query.strip() else []
        for entry in [*last, *picked]:
            if entry.id in ids:
                continue
            value = entry.value[: lim.exchange_truncate] if entry.key == "exchange" else entry.value
            line = f"- {entry.key}: {value}"
            if used + len(line) > lim.budget:
                break
            parts.append(line)
            ids.append(entry.id)
            taken.append(replace(entry, value=value))
            used += len(line)
        if not parts:
            return "", []
        return "[Memory of this peer]\n" + "\n".join(parts), taken
