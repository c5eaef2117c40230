"""What peers say to each other: the ``/pi-agent/0.1.0`` messages and their CBOR encoding.

A direct message is one request and one response on their own stream, each a CBOR map prefixed
by its length as an unsigned varint (what js-libp2p's ``lpStream`` writes, so a Pi agent on
js-libp2p and one on this library understand each other). A broadcast is one CBOR map published
on the GossipSub topic. The maps are the seed's ``AgentRequest``, ``AgentResponse`` and
``BroadcastMessage`` (camelCase keys on the wire).

Everything a peer sends is checked here, field by field, before anything else sees it: a bad map
is a ``WireError`` naming the field, answered with an error response, never half-used. This module
knows nothing of libp2p, trio, stores or sessions.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import hashing
from ..times import MAX_MS

__all__ = [
    "BROADCAST_TYPES",
    "MAX_MESSAGE_BYTES",
    "PROTOCOL",
    "AgentRequest",
    "AgentResponse",
    "Broadcast",
    "WireError",
    "broadcast_id",
    "decode_broadcast",
    "decode_request",
    "decode_response",
    "encode",
    "fit",
    "name_problem",
    "new_request_id",
    "unicode_problem",
]

PROTOCOL = "/pi-agent/0.1.0"
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""The largest CBOR body a peer may send (a length prefix above it is refused unread)."""
MAX_TEXT_CHARS = 1_000_000
"""The longest ``message`` text accepted."""


def unicode_problem(text: str) -> str | None:
    """Why ``text`` cannot be sent (CBOR text is UTF-8: ``hashing.unicode_problem``), or None."""
    problem = hashing.unicode_problem(text)
    return None if problem is None else f"it is {problem}"


def fit(text: str) -> str:
    """``text`` cut to ``MAX_TEXT_CHARS``, saying how much was cut: an answer the peer accepts."""
    if len(text) <= MAX_TEXT_CHARS:
        return text
    note = f"\n… [cut: {len(text):,} characters, peers accept {MAX_TEXT_CHARS:,}]"
    return text[: MAX_TEXT_CHARS - len(note)] + note


BROADCAST_TYPES = ("announce", "query", "response", "event")

BroadcastType = Literal["announce", "query", "response", "event"]


class WireError(ValueError):
    """A peer sent something that is not a valid message; says what was wrong."""


def new_request_id() -> str:
    return os.urandom(8).hex()


def broadcast_id(body: bytes) -> str:
    """The id of a broadcast: a hash of its encoded body (sender, timestamp, text, type), which
    the sender is told and every receiver computes alike; a copy of one has the same."""
    return hashlib.sha256(body).hexdigest()[:16]


@dataclass(frozen=True)
class AgentRequest:
    """A direct message to a peer, which answers with one ``AgentResponse``."""

    request_id: str
    from_agent: str
    from_peer: str
    timestamp: int
    """When the sender sent it, epoch ms (the sender's clock)."""
    message: str
    auto_reply: bool = False
    """Ask the receiver to answer at once with an acknowledgement, without its agent."""
    timeout_ms: int | None = None
    """How long the sender waits for the answer."""

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "protocol": PROTOCOL,
            "requestId": self.request_id,
            "fromAgent": self.from_agent,
            "fromPeerId": self.from_peer,
            "timestamp": self.timestamp,
            "message": self.message,
        }
        if self.auto_reply:
            out["autoReply"] = True
        if self.timeout_ms is not None:
            out["timeoutMs"] = self.timeout_ms
        return out


@dataclass(frozen=True)
class AgentResponse:
    """The answer to one ``AgentRequest``; ``error`` marks a refusal or a failure."""

    request_id: str | None
    from_agent: str
    from_peer: str
    timestamp: int
    message: str
    error: bool = False

    def wire(self) -> dict[str, Any]:
        return {
            "requestId": self.request_id,
            "fromAgent": self.from_agent,
            "fromPeerId": self.from_peer,
            "timestamp": self.timestamp,
            "message": self.message,
            "error": self.error,
        }


@dataclass(frozen=True)
class Broadcast:
    """A message to every peer on the topic."""

    from_agent: str
    from_peer: str
    timestamp: int
    message: str
    type: BroadcastType = "announce"
    message_id: str = field(default="", compare=False)
    """``broadcast_id`` of the body it came in (set by ``decode_broadcast``; not on the wire)."""

    def wire(self) -> dict[str, Any]:
        return {
            "fromAgent": self.from_agent,
            "fromPeerId": self.from_peer,
            "timestamp": self.timestamp,
            "message": self.message,
            "type": self.type,
        }


def encode(msg: AgentRequest | AgentResponse | Broadcast) -> bytes:
    """The CBOR body of a message (without the length prefix: the stream adds it)."""
    import cbor2  # the mesh extra's: this module imports without it (the CLI lists its choices)

    return cbor2.dumps(msg.wire())


def _map(raw: bytes, what: str) -> Mapping[str, Any]:
    import cbor2

    if len(raw) > MAX_MESSAGE_BYTES:
        raise WireError(f"{what}: {len(raw):,} bytes, more than the {MAX_MESSAGE_BYTES:,} allowed")
    try:
        value = cbor2.loads(raw)
    except Exception as e:  # cbor2 raises several types for bad input; all mean "not CBOR"
        raise WireError(f"{what}: not CBOR ({e})") from None
    if not isinstance(value, Mapping):
        raise WireError(f"{what}: a CBOR map was expected, got {type(value).__name__}")
    return value


def name_problem(text: str) -> str | None:
    """What keeps ``text`` from being a name a peer goes by (an agent name, a peer or request
    id), or None. A session shows names inside the attributes of an object's header and on its
    line of the object index: a line break or a quote in one would let a peer write lines and
    attributes of its own there (``from="alice (…)"`` from another peer); an invisible format
    character would show one name as another (``ali\u200bce`` as ``alice``)."""
    bad = next((c for c in text if c == '"' or unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is None:
        return None
    return f"holds {bad!r}: one line of text without control or format characters or double quotes"


def _text(
    m: Mapping[str, Any], key: str, what: str, *, optional: bool = False, limit: int = 256, name: bool = True
) -> Any:
    value = m.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise WireError(f"{what}: {key!r} must be text, got {type(value).__name__}")
    if len(value) > limit:
        raise WireError(f"{what}: {key!r} is {len(value):,} characters, more than {limit:,}")
    if name and (problem := name_problem(value)) is not None:
        raise WireError(f"{what}: {key!r} {problem}")
    return value


def _short(value: Any) -> str:
    """A bad value as an error names it: its start, and its length when it is long (the error goes
    back to the peer and into the log)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an integer past the digits Python converts to text; deep nesting
        return f"an integer of {value.bit_length():,} bits" if isinstance(value, int) else type(value).__name__
    return text if len(text) <= 40 else f"{text[:30]}… ({len(text):,} characters)"


def _ms(m: Mapping[str, Any], key: str, what: str) -> int:
    value = m.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_MS:
        raise WireError(f"{what}: {key!r} must be epoch milliseconds, got {_short(value)}")
    return int(value)


def decode_request(raw: bytes) -> AgentRequest:
    what = "request"
    m = _map(raw, what)
    # the field is optional (a js peer sends it, not every peer does); another version's request
    # may mean something else by its fields: refused, not read as this version's
    version = m.get("protocol")
    if version is not None and version != PROTOCOL:
        raise WireError(f"{what}: 'protocol' is {_short(version)}; this agent speaks {PROTOCOL}")
    auto = m.get("autoReply", False)
    if not isinstance(auto, bool):
        raise WireError(f"{what}: 'autoReply' must be true or false, got {_short(auto)}")
    timeout = m.get("timeoutMs")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0):
        raise WireError(f"{what}: 'timeoutMs' must be a positive integer of milliseconds, got {_short(timeout)}")
    return AgentRequest(
        request_id=_text(m, "requestId", what, limit=128),
        from_agent=_text(m, "fromAgent", what),
        from_peer=_text(m, "fromPeerId", what),
        timestamp=_ms(m, "timestamp", what),
        message=_text(m, "message", what, limit=MAX_TEXT_CHARS, name=False),
        auto_reply=auto,
        # "wait as long as it takes": a bignum past what a float holds failed the receiver's arithmetic
        timeout_ms=None if timeout is None else min(timeout, MAX_MS),
    )


def decode_response(raw: bytes) -> AgentResponse:
    what = "response"
    m = _map(raw, what)
    error = m.get("error", False)
    if not isinstance(error, bool):
        raise WireError(f"{what}: 'error' must be true or false, got {_short(error)}")
    return AgentResponse(
        request_id=_text(m, "requestId", what, optional=True, limit=128),
        from_agent=_text(m, "fromAgent", what),
        from_peer=_text(m, "fromPeerId", what),
        timestamp=_ms(m, "timestamp", what),
        message=_text(m, "message", what, limit=MAX_TEXT_CHARS, name=False),
        error=error,
    )


def decode_broadcast(raw: bytes) -> Broadcast:
    what = "broadcast"
    m = _map(raw, what)
    kind = m.get("type", "announce")
    if kind not in BROADCAST_TYPES:
        raise WireError(f"{what}: 'type' must be one of {', '.join(BROADCAST_TYPES)}, got {_short(kind)}")
    return Broadcast(
        from_agent=_text(m, "fromAgent", what),
        from_peer=_text(m, "fromPeerId", what),
        timestamp=_ms(m, "timestamp", what),
        message=_text(m, "message", what, limit=MAX_TEXT_CHARS, name=False),
        type=kind,
        message_id=broadcast_id(raw),
    )
