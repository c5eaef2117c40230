"""The agent's ``recall`` and ``remember`` tools, and the sources behind them.

``SourceTools(session, recall=..., memory=...)`` adds the sources to the session (the memory
index pinned and re-read when it changes; recall consulted at each new user message, its hits
entering the metadata pool) and registers the tools in a hook's registry
(``register(hook.registry)``), so every hook and ``ctxos serve`` offer them:

* ``recall(query, k?, kinds?, session?, as_of?)``: search everything the store holds (chat
  messages, tool outputs, file versions, memories, every session); each hit becomes a ``recall``
  object in the metadata pool the agent can ``activate``; the output lists them, best first,
  with their scores per stream and a one-line preview, and says each step's status.
* ``remember(text, scope?, topic?)``: append one fact to a memory scope (never rewriting it); the
  index in context shows it from the next turn on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..sources.base import SourceItem
from ..sources.recall import RECALL_TOOL, Recall, RecallHit, hit_item, query_words_found
from ..sources.when import listed
from ..times import iso, parse_time
from .sources import SourceFeed, lines_shown, preview, shown_whole, store_item
from .tools import Tool, ToolRegistry, object_schema

if TYPE_CHECKING:
    from ..sources.memory import MemoryScopes
    from .session import Session

__all__ = ["PREVIEW_CHARS", "SourceTools"]

PREVIEW_CHARS = 160
_QUERY_ECHO = 500
"""A query longer than this is said back by its first this many characters and its length."""


def _preview(text: str) -> str:
    return preview(text, PREVIEW_CHARS)


class SourceTools:
    """The recall and memory sources of one session, and the agent's tools over them."""

    def __init__(
        self,
        session: Session,
        *,
        recall: Recall | None = None,
        memory: MemoryScopes | None = None,
        auto_recall: bool = True,
        recall_active_score: float | None = None,
        max_k: int = 20,
        assembled: bool = True,
    ):
        """``auto_recall``: consult ``recall`` at each new user message (hits enter the metadata
        pool; at or above ``recall_active_score``, the active pool). ``max_k``: the most hits one
        ``recall`` call returns. ``assembled``: whether context_os assembles the model's context
        (not an MCP client's: what ``remember`` says comes next tells the model so)."""
        if recall is None and memory is None:
            raise InputError("SourceTools needs a recall engine, memory scopes, or both")
        self.session = session
        self.recall_engine = recall
        self.memory = memory
        self.max_k = max_k
        self.assembled = assembled
        self.feeds: list[SourceFeed] = []
        if memory is not None:
            self.feeds.append(session.add_source(memory, pin=True, every_turn=True))
        if recall is not None and auto_recall:
            # each user message searches the memory files too, as the recall tool does
            source = _SessionRecall(recall, session, memory)
            self.feeds.append(session.add_source(source, active_score=recall_active_score))
        if self.feeds:  # what they show every turn is objects, which only a managed session renders
            session.manage()

    def register(self, registry: ToolRegistry) -> ToolRegistry:
        """Add ``recall`` (with a recall engine) and ``remember`` (with memory) to ``registry``."""
        if self.recall_engine is not None:
            schema = {**RECALL_SCHEMA, "properties": {**RECALL_SCHEMA["properties"]}}
            schema["properties"]["k"] = {**schema["properties"]["k"], "maximum": self.max_k}
            registry.register(Tool(RECALL_TOOL, RECALL_DESCRIPTION, schema, self.recall))
        if self.memory is not None:
            registry.register(Tool("remember", REMEMBER_DESCRIPTION, REMEMBER_SCHEMA, self.remember))
        return registry

    # --- the tools -----------------------------------------------------------------------------

    def recall(
        self,
        query: str,
        k: int = 5,
        kinds: list[str] | None = None,
        session: str | None = None,
        as_of: str | int | None = None,
    ) -> dict[str, Any]:
        """Search; each hit enters the metadata pool as a ``recall`` object; each step's status."""
        engine = self.recall_engine
        assert engine is not None
        if not isinstance(query, str) or not query.strip():
            raise InputError("recall: query is empty; say what to look for")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.max_k:
            raise InputError(f"recall: k must be an integer from 1 to {self.max_k}, got {k!r}")
        valid_time = parse_time(as_of, "as_of") if as_of is not None else None
        # found past what the context shows: a conversation of a dozen entries on the topic took
        # every place of the k + 10 asked for, and the answer was "no hit: try other words"
        result = engine.search(
            query, k=k, kinds=kinds, session=session, as_of=valid_time, memory=self.memory, leave_out=self._in_view
        )
        found = result.hits
        if found:  # its hits are objects, which only a managed session shows: managed from now on
            self.session.manage()
        hits = []
        feed = SourceFeed(engine)
        redact = self.session.ingest.redact
        worded = False  # whether any hit holds a word of the query
        for rank, item in enumerate(hit_item(h, query, result.mode) for h in found):
            if store_item(self.session, feed, item, rank, query) is None:
                continue  # its text was evicted: not stored again, not shown
            # the text as stored (redacted): a memory file is read from disk as it is, and this
            # output goes to the model as it is (an MCP client's), preview and all
            text = item.text if redact is None else redact(item.text)[0]
            added = item.id not in self.session.view.objects
            self.session.show(
                item.id,
                state=self.session.view.objects[item.id].state if not added else "inactive",
                actor="agent",
                reason=f"recall: score {item.score:.3g}, rank {rank + 1}",
            )
            meta = item.meta
            hit: dict[str, Any] = {
                "id": item.id,
                "object": meta.get("object"),
                "kind": meta.get("object_kind", item.kind),
                "score": round(item.score, 4),
                "preview": _preview(text),
                "pool": "added" if added else "already in pool",
            }
            for key in ("part", "session", "bm25_rank", "vector_rank", "same_text", "path", "lines"):
                if meta.get(key) not in (None, ""):
                    hit[key] = meta[key]
            if isinstance(meta.get("valid_time"), int):
                hit["valid_time"] = iso(meta["valid_time"])
            found_words, words = query_words_found(query, text)
            if words:
                hit["query_words"] = f"{found_words} of {words}"
                worded = worded or found_words > 0
            hits.append(hit)
        said = query if len(query) <= _QUERY_ECHO else f"{query[:_QUERY_ECHO]}… ({len(query):,} characters)"
        out: dict[str, Any] = {"query": said, "ranking": engine.describe(), "hits": hits}
        notes = [result.note] if result.note else []
        if hits and not worded and any("query_words" in h for h in hits):
            # scores rank the hits against each other: the best of unrelated ones still scores high
            notes.append("no hit holds a word of the query: they are only near it in meaning, maybe not about it")
        if notes:
            out["note"] = "; ".join(notes)
        if result.periods:
            each, more = listed(result.periods)
            out["periods"] = [f"{p.text} ({p.days}, ranked higher)" for p in each]
            if more is not None:  # a pasted log names a period a dated line: they are not each worth a line
                out["periods"].append(f"{more[0]:,} more ({more[1]}, ranked higher)")
        if as_of is not None and valid_time is not None:
            out["as_of"] = iso(valid_time)
        out["next"] = "activate(id) loads a hit's full text" if hits else "no hit: try other words"
        return out

    def _in_view(self, hit: RecallHit) -> bool:
        """Whether a hit is this session's own chat still in its context (from the history
        horizon on: the user's message that asked, the replies since), or a memory index its
        active pool shows whole: no news to the model. What went behind the horizon is recalled
        as any other part."""
        view = self.session.view
        if hit.path is not None:
            return self._in_pinned_index(hit)
        if shown_whole(self.session, hit.id, hit.kind, hit.object_hash):
            return True  # the memory index in context, this very version
        if hit.session != self.session.id or not hit.id.startswith("chat:") or not hit.part.startswith("e"):
            return False
        try:
            return int(hit.part[1:]) >= view.horizon
        except ValueError:
            return False

    def _in_pinned_index(self, hit: RecallHit) -> bool:
        """Whether lines of a memory file the recall read from disk are in the memory index the
        active pool shows (``lines_shown``)."""
        return hit.lines is not None and lines_shown(self.session, hit.id, hit.lines, hit.object_hash)

    def remember(self, text: str, scope: str = "project", topic: str | None = None) -> dict[str, Any]:
        """Append one fact to a memory scope; the index in context shows it from the next turn."""
        memory = self.memory
        assert memory is not None
        if scope not in ("global", "project"):
            raise InputError(f"remember: scope must be 'global' or 'project', not {scope!r}")
        done = memory.remember(text, scope, topic)  # type: ignore[arg-type]
        out: dict[str, Any] = {"scope": done.scope, "file": str(done.path), "appended": done.line}
        if done.pointer is not None:
            out["index"] = f"pointer added to {done.index}: {done.pointer}"
        if topic is not None:
            out["next"] = f"read({str(done.path)!r}) shows the topic; the index points to it"
        elif self.assembled:
            out["next"] = "the memory index in your context shows it from the next turn"
        else:  # an MCP client's context is its own: no index is put in it
            out["next"] = f"recall finds it; read({str(done.path)!r}) shows the whole memory file"
        return out


class _SessionRecall:
    """``recall`` as the object source of one session: reading that session's memory files
    (``Recall.items(memory=...)``; a recall engine may serve many sessions), and finding its hits
    past what the session does not show of them (``sources._eligible``): its own chat (the
    user's message and the conversation before it took every place, and recall at each user
    message offered nothing once a conversation had a dozen entries on its topic), and the lines
    of the memory index its context shows (an index of many facts on the topic did the same)."""

    name = Recall.name

    def __init__(self, recall: Recall, session: Session, memory: MemoryScopes | None) -> None:
        self.recall, self.session, self.memory = recall, session, memory

    def items(self, query: str, budget_tokens: int) -> list[SourceItem]:
        return self.recall.items(query, budget_tokens, memory=self.memory, leave_out=self._not_shown)

    def _not_shown(self, hit: RecallHit) -> bool:
        if hit.session == self.session.id and hit.id.startswith("chat:"):
            return True
        if hit.lines is not None:
            return lines_shown(self.session, hit.id, hit.lines, hit.object_hash)
        return shown_whole(self.session, hit.id, hit.kind, hit.object_hash)


RECALL_DESCRIPTION = (
    "Search everything context_os has stored (past messages, tool outputs, file versions, memories, other "
    "sessions) for what matters now. Hits enter your object index; activate(id) loads one. as_of (ISO 8601 or "
    "epoch ms) searches what was true then."
)
RECALL_SCHEMA = object_schema(
    {
        "query": {"type": "string", "description": "What to look for, in words"},
        "k": {"type": "integer", "description": "How many hits (default 5)", "minimum": 1},
        "kinds": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Only these object kinds (chat, toolcall, file, memory, message; recall: what"
            " earlier recalls brought in)",
        },
        "session": {"type": "string", "description": "Only this session's objects"},
        "as_of": {
            "type": ["string", "integer"],
            "description": "A past time, ISO 8601 or epoch ms: search what was valid and known then",
        },
    },
    ["query"],
)
REMEMBER_DESCRIPTION = (
    "Remember one fact for later sessions: appended as a line to the memory index (or to a topic file), never "
    "rewriting what is there. Keep it short and self-contained."
)
REMEMBER_SCHEMA = object_schema(
    {
        "text": {"type": "string", "description": "The fact, one line"},
        "scope": {
            "type": "string",
            "enum": ["project", "global"],
            "description": "project: this repository (default); global: every project of this user",
        },
        "topic": {"type": "string", "description": "A topic file name (e.g. deploy) for detail"},
    },
    ["text"],
)
