"""The agent's mesh tools, and its peers' messages in its session.

``MeshTools(session, agent)`` adds the agent's ``MeshSource`` to the session (consulted at every
turn: the newest messages, each a stored ``message`` object, the incoming ones active within the
budget, the rest as one line each in the metadata pool; past the history cap a message leaves
the session, never the store) and registers the seed's nine tools in a hook's registry
(``register(hook.registry)``), so every hook and ``ctxos serve`` offer them:

* ``mesh_list_peers``, ``mesh_send(peerId, message, autoReply?)``,
  ``mesh_broadcast(message, type?)``, ``mesh_discover``, ``mesh_prune``;
* ``memory_store(peerId, key, value, metadata?)``, ``memory_recall(peerId?, key?, limit?)``,
  ``memory_search(query, peerId?, nResults?)``, ``memory_keys(peerId)``.

Peers' requests reach the agent's loop through ``agent.next_request()`` (mesh/queue.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .tools import Tool, ToolRegistry, object_schema

if TYPE_CHECKING:
    from ..mesh.agent import MeshAgent
    from .session import Session
    from .sources import SourceFeed

__all__ = ["MESH_TOOL_NAMES", "MeshTools"]

MESH_BUDGET_TOKENS = 4000
"""What the mesh's messages and recalled memories may take in the active pool together."""


class MeshTools:
    """One session's view of a ``MeshAgent``, and the agent's tools over it."""

    def __init__(self, session: Session, agent: MeshAgent, *, budget_tokens: int = MESH_BUDGET_TOKENS):
        self.session = session
        self.agent = agent
        self.feed: SourceFeed = session.add_source(
            agent.source,
            budget_tokens=budget_tokens,
            active_score=0.5,
            max_items=agent.history_cap * 2,  # each request may bring its recalled memories
            every_turn=True,
            forget=True,
        )

    def register(self, registry: ToolRegistry) -> ToolRegistry:
        for name, description, schema, run in (
            ("mesh_list_peers", LIST_DESCRIPTION, object_schema({}, []), self.list_peers),
            ("mesh_send", SEND_DESCRIPTION, SEND_SCHEMA, self.send),
            ("mesh_broadcast", BROADCAST_DESCRIPTION, BROADCAST_SCHEMA, self.broadcast),
            ("mesh_discover", DISCOVER_DESCRIPTION, object_schema({}, []), self.discover),
            ("mesh_prune", PRUNE_DESCRIPTION, object_schema({}, []), self.prune),
            ("memory_store", STORE_DESCRIPTION, STORE_SCHEMA, self.memory_store),
            ("memory_recall", RECALL_DESCRIPTION, RECALL_SCHEMA, self.memory_recall),
            ("memory_search", SEARCH_DESCRIPTION, SEARCH_SCHEMA, self.memory_search),
            ("memory_keys", KEYS_DESCRIPTION, KEYS_SCHEMA, self.memory_keys),
        ):
            registry.register(Tool(name, description, schema, run))
        return registry

    # --- mesh --------------------------------------------------------------------------------------

    def list_peers(self) -> dict[str, Any]:
        peers = self.agent.peers()
        return {
            "self": {"peerId": self.agent.peer_id, "agentName": self.agent.name},
            "count": len(peers),
            "peers": peers,
        }

    def send(self, peerId: str, message: str, autoReply: bool = False) -> dict[str, Any]:  # noqa: N803 - the seed's names
        out = self.agent.send(peerId, message, auto_reply=autoReply)
        out["next"] = "the exchange is stored as message objects; memory_recall(peerId, key='exchange') finds it later"
        return out

    def broadcast(self, message: str, type: str = "announce") -> dict[str, Any]:
        return self.agent.broadcast(message, type)

    def discover(self) -> dict[str, Any]:
        return self.agent.discover()

    def prune(self) -> dict[str, Any]:
        return self.agent.prune()

    # --- memory ------------------------------------------------------------------------------------

    def memory_store(
        self,
        peerId: str,
        key: str,
        value: str,
        metadata: dict[str, Any] | None = None,  # noqa: N803
    ) -> dict[str, Any]:
        peerId = self.agent.peer_id_of(peerId)  # noqa: N806 - the seed's name
        known = self.agent.node.peer(peerId)
        entry = self.agent.memory.store_entry(
            peerId, key, value, peer_name=known.agent_name if known else None, metadata=metadata
        )
        return {"stored": entry.id, "peerId": peerId, "key": key, "chars": len(value)}

    def memory_recall(
        self,
        peerId: str | None = None,  # noqa: N803
        key: str | None = None,
        limit: int | None = None,
        fullText: bool = False,  # noqa: N803
    ) -> dict[str, Any]:
        peer = None if peerId is None else self.agent.peer_id_of(peerId)
        entries = self.agent.memory.get(peer, key, limit=limit, full_text=fullText)
        return {"count": len(entries), "entries": [e.public() for e in entries]}

    def memory_search(self, query: str, peerId: str | None = None, nResults: int | None = None) -> dict[str, Any]:  # noqa: N803
        if not isinstance(query, str) or not query.strip():
            raise InputError("memory_search: query is empty")
        memory = self.agent.memory
        entries = memory.search(query, peer=None if peerId is None else self.agent.peer_id_of(peerId), n=nResults)
        ranking = memory.recall.describe() if memory.recall is not None else "keyword (BM25) only"
        return {"query": query, "ranking": ranking, "count": len(entries), "results": [e.public() for e in entries]}

    def memory_keys(self, peerId: str) -> dict[str, Any]:  # noqa: N803
        peer = self.agent.peer_id_of(peerId)
        return {"peerId": peer, "keys": self.agent.memory.keys(peer)}


MESH_TOOL_NAMES = (
    "mesh_list_peers",
    "mesh_send",
    "mesh_broadcast",
    "mesh_discover",
    "mesh_prune",
    "memory_store",
    "memory_recall",
    "memory_search",
    "memory_keys",
)

LIST_DESCRIPTION = (
    "List every known mesh peer: peer id, agent name, status (connected, disconnected, discovered, or announced: "
    "running on this machine, not dialled yet), addresses."
)
SEND_DESCRIPTION = (
    "Send a direct message to a peer agent and wait for its answer (up to 60 s). Use mesh_list_peers first for "
    "the peer id. autoReply asks the peer to acknowledge at once without its agent."
)
SEND_SCHEMA = object_schema(
    {
        "peerId": {
            "type": "string",
            "description": "The peer's id (12D3KooW…), or the name of an agent running on this machine",
        },
        "message": {"type": "string", "description": "What to say"},
        "autoReply": {"type": "boolean", "description": "Ask for an automatic acknowledgement"},
    },
    ["peerId", "message"],
)
BROADCAST_DESCRIPTION = "Publish a message to every peer on the mesh (GossipSub)."
BROADCAST_SCHEMA = object_schema(
    {
        "message": {"type": "string", "description": "What to announce"},
        "type": {"type": "string", "enum": ["announce", "query", "response", "event"], "description": "Its kind"},
    },
    ["message"],
)
DISCOVER_DESCRIPTION = (
    "Look for new peers (a search of the DHT, when the mesh runs one) and report the peers discovered in the"
    " last minute."
)
PRUNE_DESCRIPTION = "Remove every disconnected peer from the peer list."
STORE_DESCRIPTION = (
    "Remember a fact about a peer (a decision, a preference, a constraint) under a key; entries are appended, "
    "never overwritten. Save what matters after a meaningful exchange, not the raw conversation."
)
STORE_SCHEMA = object_schema(
    {
        "peerId": {"type": "string", "description": "The peer the fact is about: its id, or its agent name"},
        "key": {"type": "string", "description": "A category: prefs, decision, project_context, …"},
        "value": {"type": "string", "description": "The fact"},
        "metadata": {"type": "object", "description": "Extra text or number fields"},
    },
    ["peerId", "key", "value"],
)
RECALL_DESCRIPTION = (
    "Recall what you stored about a peer, by key, newest first (give peerId, key, or both). The latest exchange "
    "and the best matches are already recalled for each incoming request; use this for more."
)
RECALL_SCHEMA = object_schema(
    {
        "peerId": {"type": "string", "description": "The peer: its id, or its agent name"},
        "key": {"type": "string", "description": "The key (exchange, broadcast, or one you stored)"},
        "limit": {"type": "integer", "minimum": 1, "description": "How many entries (default 10, at most 50)"},
        "fullText": {"type": "boolean", "description": "Values uncut (default: cut to 10,000 characters)"},
    },
    [],
)
SEARCH_DESCRIPTION = (
    "Search every memory of every peer (or of one) by meaning and words, e.g. 'what did we decide about performance?'."
)
SEARCH_SCHEMA = object_schema(
    {
        "query": {"type": "string", "description": "What to look for"},
        "peerId": {"type": "string", "description": "Only this peer's memories (its id, or its agent name)"},
        "nResults": {"type": "integer", "minimum": 1, "description": "How many results (default 5)"},
    },
    ["query"],
)
KEYS_DESCRIPTION = "List the keys stored for a peer, with how many entries each holds."
KEYS_SCHEMA = object_schema(
    {"peerId": {"type": "string", "description": "The peer: its id, or its agent name"}}, ["peerId"]
)
