"""Responses conversations the provider keeps (``previous_response_id``), kept by the proxy as well,
so that it can manage them.

A client of the Responses API may send only what is new (``input``) and name the response it
continues (``previous_response_id``); the provider then puts the earlier turns before it: that
response's own input, from the start of its chain, and its output. Such a request names a
conversation the proxy would otherwise not see, so it went upstream as it came, unmanaged.

Now the proxy keeps each response it relayed as a *link*: the response it continued (its
parent), the request's new input items, then the response's output items as the client got them.
A request continuing a response the proxy knows is sent as a client keeping its own history
would send it: the whole conversation as ``input`` (every link from the chain's start), no
``previous_response_id``; the proxy manages that as any other (``Proxy.prepare``). The response
is stored by the provider as always (``store`` passes as it came), under its own id, which the
client continues from next.

* **What is kept.** A response of a request with ``store: false`` is not (the provider keeps none
  either: such a chain cannot be continued). A chain's start is kept in memory, the newest per
  session; from its first continuation on, every link goes to the store too (a document
  ``proxy-response:<id>`` per response, its new items only), so a restarted proxy goes on with
  the chain. A link holding what the session's redactor would take out stays in memory only (it
  must go back as it came), as a failing store leaves it. A session closed as idle gives its
  links' memory back; they are read from the store again when the chain goes on.
* **What is not known** (a response relayed before the proxy started, one whose link was in
  memory only when the proxy restarted, a chain an eviction erased): the request goes upstream as
  it came, the provider holding the conversation, and the proxy says so once per response
  continued; nothing of that chain is kept from then on.
* **Evictions.** A link is stored text (a file's content a tool read, a recall's output): an
  eviction (``ctxos objects evict``) ends what the proxy knows of every chain: in memory, and in
  the store, where every version of every link written before it is erased (when the proxy next
  reads a chain, or a restarted one first does).

This module never touches the network; ``proxy.py`` calls it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..hashing import hashed
from ..store.base import Evict, Put, Store
from .proxy_tools import _data, sse_events

__all__ = ["CHAIN", "RESPONSE_ENDS", "Chains", "Continuation", "completed_response"]

log = logging.getLogger("context_os.proxy")

_UNKNOWN = 1_000

CHAIN = "proxy-response:"
"""The id prefix of the store documents that keep the links of a Responses chain (one per response)."""


@dataclass
class Continuation:
    """What a Responses request adds to a chain, noted by ``Chains.begin`` and kept by
    ``Chains.record`` once its response is relayed."""

    parent: str | None
    """The response it continues (``previous_response_id``); None for a chain's start."""
    items: list[Any]
    """The request's input items as it sent them (a string as one user message)."""
    session: str | None = None
    """The session it went to (set by ``Proxy.prepare``); None while not known."""
    unknown: bool = False
    """It continues a chain the proxy does not know: its response is only noted as one of it."""


@dataclass
class _Link:
    parent: str | None
    items: list[Any]
    session: str | None
    stored: bool = False


@dataclass
class Chains:
    """The links of the Responses chains this proxy relayed (module docstring)."""

    store: Store
    newest_eviction: Callable[[], int]
    """The transaction of the store's newest eviction, -1 for none."""
    _links: dict[str, _Link] = field(default_factory=dict)
    _starts: dict[str, str] = field(default_factory=dict)
    """By session: the id of its newest chain start not continued yet (older ones are let go)."""
    _evictions_seen: int = -1
    _unknown: dict[str, None] = field(default_factory=dict)
    """The newest responses of chains the proxy does not know (``_UNKNOWN`` at most), said once each."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self, body: Mapping[str, Any]) -> tuple[Continuation | None, dict[str, Any] | None, str | None]:
        """For a Responses request: what it adds to its chain (None: nothing is kept, ``store`` is
        false), the request as a client keeping its own history sends it (the whole conversation
        as ``input``: None when it continues no response, or one not known) and the session of
        the chain's start (None if it has none)."""
        parent = body.get("previous_response_id")
        keep = body.get("store") is not False
        if parent is None and not keep:
            return None, None, None  # (Codex's every request: its input is not even looked at)
        items = _items(body.get("input"))
        if parent is None:
            return (Continuation(None, items) if items is not None else None), None, None
        if not isinstance(parent, str) or items is None:
            return None, None, None  # the provider refuses it: as it came
        found = self._chain(parent)
        if found is None:
            with self._lock:
                said = parent in self._unknown
            if not said:
                log.warning(
                    "proxy: a Responses request continues %s, a response this proxy does not know (relayed before it"
                    " started, asked with store false, or erased): it goes upstream as it came, the provider holding"
                    " the conversation",
                    parent,
                )
            return (Continuation(parent, [], unknown=True) if keep else None), None, None
        earlier, session = found
        whole = {k: v for k, v in body.items() if k != "previous_response_id"}
        whole["input"] = [*earlier, *items]
        return (Continuation(parent, items) if keep else None), whole, session

    def record(
        self,
        went: Continuation,
        response: Mapping[str, Any],
        clean: Callable[[Any], bool] | None,
    ) -> None:
        """Keep the link of ``response`` (as the client got it: its ``id`` and ``output``) after the
        request ``went``; from a chain's first continuation on, in the store too, if ``clean``
        says its items hold nothing the session's redactor would take out (None: not known, kept
        in memory only)."""
        rid, output = response.get("id"), response.get("output")
        if not isinstance(rid, str) or not isinstance(output, list):
            return
        if went.parent is None and went.session is None:
            return  # a start of no session (its request failed before one was named): nothing bounds it
        link = _Link(went.parent, [*went.items, *output], went.session)
        with self._lock:
            if went.unknown:  # its next continuation is of the same chain: not said again
                self._unknown[rid] = None
                while len(self._unknown) > _UNKNOWN:
                    del self._unknown[next(iter(self._unknown))]
                return
            self._links[rid] = link
            if went.parent is None:  # a start: kept until the session's next one
                if went.session is not None:
                    older = self._starts.get(went.session)
                    self._starts[went.session] = rid
                    if older is not None and older != rid:
                        gone = self._links.get(older)
                        if gone is not None and not gone.stored:
                            del self._links[older]
                return
            chain = list(self._unstored(rid))
        self._keep(chain, clean)

    def forget(self, session: str) -> None:
        """A session closed as idle: its links leave memory (those kept in the store come back
        from it when the chain goes on)."""
        with self._lock:
            self._starts.pop(session, None)
            for rid in [r for r, link in self._links.items() if link.session == session]:
                del self._links[rid]

    def _chain(self, rid: str) -> tuple[list[Any], str | None] | None:
        """Every item of the chain up to ``rid``'s output, and the session of its start; None if a
        link is not known."""
        newest = self.newest_eviction()
        with self._lock:
            evicted = newest > self._evictions_seen
            if evicted:  # links are stored text: what the proxy knew ends here
                if self._links:
                    log.info("proxy: an eviction ends the %d Responses links this proxy knew", len(self._links))
                self._links.clear()
                self._starts.clear()
                self._evictions_seen = newest
        if evicted:
            stale = [Evict(v.id) for v in self.store.find("proxy_response") if v.tx_id < newest]
            if stale:
                self.store.submit(stale)
        parts: list[list[Any]] = []
        session: str | None = None
        seen: set[str] = set()
        at: str | None = rid
        while at is not None:
            if at in seen:
                return None  # a loop: no provider makes one
            seen.add(at)
            link = self._link(at, newest)
            if link is None:
                return None
            parts.append(link.items)
            session = link.session
            at = link.parent
        with self._lock:
            for sid, start in list(self._starts.items()):
                if start in seen:  # continued: no longer a start to let go
                    del self._starts[sid]
        return [item for part in reversed(parts) for item in part], session

    def _link(self, rid: str, newest_eviction: int) -> _Link | None:
        with self._lock:
            found = self._links.get(rid)
        if found is not None:
            return found
        kept = self.store.get(f"{CHAIN}{rid}")
        if kept is None or kept.doc is None:
            return None
        if newest_eviction > kept.tx_id:
            self.store.submit([Evict(kept.id)])
            return None
        content = kept.doc.get("content")
        if not isinstance(content, Mapping) or not isinstance(content.get("items"), list):
            return None
        parent = content.get("parent")
        session = kept.doc.get("meta", {}).get("session")
        link = _Link(
            parent if isinstance(parent, str) else None,
            list(content["items"]),
            session if isinstance(session, str) else None,
            stored=True,
        )
        with self._lock:
            self._links[rid] = link
        return link

    def _unstored(self, rid: str) -> Iterator[tuple[str, _Link]]:
        """The links of ``rid``'s chain, from ``rid`` back, not in the store yet (under the lock)."""
        at: str | None = rid
        seen: set[str] = set()
        while at is not None and at not in seen:
            seen.add(at)
            link = self._links.get(at)
            if link is None or link.stored:
                return
            yield at, link
            at = link.parent

    def _keep(self, chain: list[tuple[str, _Link]], clean: Callable[[Any], bool] | None) -> None:
        """Write links to the store in one transaction (those ``clean`` refuses stay in memory)."""
        docs = [(link, _doc(rid, link)) for rid, link in chain if clean is not None and clean(link.items)]
        if not docs:
            return
        try:
            self.store.submit([Put(doc) for _, doc in docs])
        except Exception as e:  # noqa: BLE001 - the store may be down: the links stay in memory
            log.warning("proxy: the links of a Responses chain are not kept in the store: %s", e)
            return
        with self._lock:
            for link, _ in docs:
                link.stored = True


_ENDED = ("completed", "incomplete")
"""The statuses of a response a client may continue (an ``incomplete`` one ran out of tokens)."""
RESPONSE_ENDS = tuple(f"response.{status}" for status in _ENDED)
"""The events that end such a response's stream, carrying the response."""


def completed_response(raw: bytes, streamed: bool) -> dict[str, Any] | None:
    """The response an answer of the Responses API gives: its JSON body, or a stream's
    ``response.completed`` (or ``response.incomplete``) event's ``response``; None for anything
    else (an error, a response that failed)."""
    if not streamed:
        try:
            found = json.loads(raw)
        except ValueError:
            return None
        return found if isinstance(found, dict) and found.get("status", "completed") in _ENDED else None
    response = None
    for event in sse_events(iter([raw])):
        data = _data(event)
        if isinstance(data, dict) and data.get("type") in RESPONSE_ENDS:
            found = data.get("response")
            response = found if isinstance(found, dict) else None
    return response


def _items(found: Any) -> list[Any] | None:
    """A request's ``input`` as items (a string as one user message); None for anything else."""
    if isinstance(found, str):
        return [{"role": "user", "content": found}]
    return list(found) if isinstance(found, list) else None


def _doc(rid: str, link: _Link) -> dict[str, Any]:
    return hashed(
        {
            "id": f"{CHAIN}{rid}",
            "kind": "proxy_response",
            "content": {"parent": link.parent, "items": link.items},
            "meta": {"session": link.session},
        }
    )
