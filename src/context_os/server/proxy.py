"""``ctxos proxy``: an OpenAI-, Anthropic- and Gemini-compatible HTTP proxy that puts context_os in
front of any agent that lets you set its base URL.

The agent sends its whole conversation, as it would to the provider. The proxy gives the messages
to the same hook the library uses (harness ``openai`` for ``/v1/chat/completions``, ``anthropic``
for ``/v1/messages``, ``openai`` for ``/v1/responses`` with its input items translated by
harness/responses.py and for the Gemini API's ``models/{model}:generateContent`` and
``:streamGenerateContent`` with its contents translated by harness/gemini.py, and for Google's
Code Assist API's, the same request in an envelope), sends the
*assembled* context upstream in the original request's place, and relays the reply unchanged: a
JSON body as it came, a stream chunk by chunk as it comes.
A Responses request that continues a conversation the provider keeps (``previous_response_id``)
is sent as the whole conversation, from the responses the proxy relayed (proxy_chains.py), and
managed as any other; one continuing a response the proxy does not know goes upstream as it came.

* **Sessions.** The ``X-Context-OS-Session`` header names one; without it the session is derived
  from the conversation's start (its system prompt and first user message, whatever the model),
  so a resumed conversation finds its session and two conversations stay apart.
* **Keys.** The client's ``Authorization`` / ``x-api-key`` headers go upstream as they came; they
  are never stored or logged.
* **Failing open.** If context_os fails on a request (a message it cannot read, a store that is
  down), the original messages go upstream instead, the failure is logged once per session, and
  the agent never sees an error of ours. If the upstream cannot be reached, the client gets an
  error in its API's own shape (OpenAI's ``{"error": …}``, Anthropic's ``{"type": "error", …}``,
  Google's ``{"error": {"code", "message", "status"}}``).
* **Security.** It listens on 127.0.0.1 only and refuses a request whose ``Host`` is not the
  loopback address it bound (DNS rebinding) or that carries a browser ``Origin``, and (on Linux)
  one over a connection of another user's process: naming a session gives its context.

This module never imports a harness SDK: it speaks the wire formats as JSON.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import httpx

from .. import __version__
from ..context.entries import Incoming
from ..context.ingest import cut_text
from ..context.session import Session, close_sessions
from ..context.source_tools import SourceTools
from ..errors import ConfigError
from ..files import FileTools, FileTracker, Trackers, Workspace
from ..harness import gemini
from ..harness.anthropic import without_cache_marks
from ..harness.codex_tools import named_cwd
from ..harness.registry import harness
from ..harness.responses import to_chat, to_items
from ..harness.toolnames import for_tools, preset
from ..harness.virtual_files import VirtualFiles
from ..hashing import HASH_PREFIX, hash_value, hashed
from ..store.base import Evict
from .protocol import CLOSE_WAIT
from .proxy_chains import RESPONSE_ENDS, Chains, Continuation, completed_response
from .proxy_tools import (
    MAX_ROUNDS,
    Call,
    Hidden,
    JsonArrayStream,
    OneCompletion,
    SequenceNumbers,
    StreamFilter,
    container_of,
    dialect,
    prefix_hash,
    splice,
    sse_events,
    with_sse,
)
from .proxy_workspace import AUTO, agent_directory
from .transports import (
    BODY_SECONDS,
    HEADER_SECONDS,
    MAX_CONNECTIONS,
    PEER_GONE,
    BoundedHTTPServer,
    DeadlineHandler,
    HttpGuard,
    bind,
    peer_user,
)

if TYPE_CHECKING:
    from ..harness.base import ContextHook
    from ..sources.recall import Recall
    from ..store.base import Store

__all__ = ["SESSION_HEADER", "STATUS_PATH", "Plan", "Proxy", "derive_session", "make_proxy_server", "upstream_origin"]

log = logging.getLogger("context_os.proxy")

SESSION_HEADER = "X-Context-OS-Session"
OFFERED = frozenset({"read", "activate", "deactivate", "pin", "unpin", "lines", "history", "recall"})
"""Our tools the model may be offered (never write, edit or the like: the agent's own do that)."""
Api = Literal["openai", "anthropic", "responses", "gemini", "code-assist"]
ROUTES: dict[str, Api] = {
    "/v1/chat/completions": "openai",
    "/chat/completions": "openai",
    "/v1/messages": "anthropic",
    "/v1/responses": "responses",
    "/responses": "responses",
}
GEMINI_ROUTE = re.compile(
    r"/(?:(?:v1|v1beta|v1alpha)|(?:v1|v1beta1)/projects/[^/]+/locations/[^/]+/publishers/google)"
    r"/models/[^/:]+:(?:generateContent|streamGenerateContent)"
)
"""The Gemini API's model calls (``models/{model}:generateContent``, ``:streamGenerateContent``),
on Vertex AI too (``projects/{project}/locations/{location}/publishers/google/models/…``); its
other endpoints (``countTokens``, ``embedContent``, the model list) go upstream untouched."""
GEMINI_ORIGIN = "https://generativelanguage.googleapis.com"
"""The Gemini API's origin: the Gemini upstream unless ``--gemini-upstream`` names another."""
CODE_ASSIST_ROUTE = re.compile(r"/v1internal:(?:generateContent|streamGenerateContent)")
"""Google's Code Assist API's model calls (Gemini CLI logged in with a Google account, at its
``CODE_ASSIST_ENDPOINT``): a Gemini request in an envelope of its own (``{"model", "project",
"user_prompt_id", "request": {...}}``), each answer in one too (``{"response": {...}, "traceId"}``).
Its other methods (``loadCodeAssist``, ``countTokens``, ...) go upstream untouched."""
CODE_ASSIST_ORIGIN = "https://cloudcode-pa.googleapis.com"
"""The Code Assist API's origin, unless ``--code-assist-upstream`` names another."""
STATUS_PATH = "/_context_os/status"
"""``GET`` here answers the proxy's own status (``Proxy.status``), not the upstream's: no
provider's API has a path that starts with ``/_context_os``."""
MAX_BODY = 64 * 1024 * 1024
"""The largest request body accepted (a long conversation with images stays well under)."""
IDLE_CLOSE_S = 3600.0
"""A conversation no request used for this long has its session closed when another opens
(``Proxy.idle_close_s``; ``ctxos proxy --idle-close-minutes``)."""
# never forwarded: they describe one hop, not the request
HOP_HEADERS = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "accept-encoding",
}


def derive_session(api: Api, body: Mapping[str, Any]) -> str:
    """A conversation's session id from how it starts: ``proxy-`` and 16 hex digits of the hash
    of its API, system prompt and first user message (the model may change; the start does not;
    a cache breakpoint on it, which a client such as Claude Code moves on, is no part of it),
    with the key the client gives its conversation (Anthropic's ``metadata.user_id``, which
    Claude Code makes of its session id; a chat request's ``prompt_cache_key``) if it gives one.
    Two conversations without a key that start alike are told apart by their first reply
    (``Proxy._route``): the first to reply keeps this session.
    A Responses conversation: of its ``prompt_cache_key`` if it has one (Codex CLI's is its
    conversation id), else of its instructions and every item before the model's first (Codex's
    first user message is its environment, the same for every conversation in one directory).
    A Gemini conversation: of its system instruction and first user content (Gemini CLI's is its
    session context: the date and the workspace's files), told from another that starts alike
    by its first reply."""
    if api == "responses":
        key = body.get("prompt_cache_key")
        if isinstance(key, str) and key:
            start: Any = {"prompt_cache_key": key}
        else:
            found = body.get("input")
            items = [{"role": "user", "content": found}] if isinstance(found, str) else found
            items = items if isinstance(items, list) else []
            cut = next((k for k, i in enumerate(items) if isinstance(i, Mapping) and _produced(i)), len(items))
            start = {"instructions": body.get("instructions"), "items": items[:cut]}
        return f"proxy-{hash_value({'api': api, **start}).removeprefix(HASH_PREFIX)[:16]}"
    if api == "gemini":
        first_content = next((c for c in _contents(body) if c.get("role", "user") == "user"), None)
        begun_gemini = {"api": api, "system": body.get("systemInstruction"), "first": first_content}
        return f"proxy-{hash_value(begun_gemini).removeprefix(HASH_PREFIX)[:16]}"
    found = body.get("messages")
    messages: list[Any] = found if isinstance(found, list) else []
    system: Any = body.get("system")
    if api == "openai":
        system = [m for m in messages if isinstance(m, Mapping) and m.get("role") in ("system", "developer")]
    first = next((m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"), None)
    if first is not None:  # a cache breakpoint a client moves on is not part of the conversation
        first = without_cache_marks([first])[0][0]
    begun: dict[str, Any] = {"api": api, "system": system, "first": first}
    key = _client_key(api, body)
    if key is not None:
        begun["key"] = key
    digest = hash_value(begun).removeprefix(HASH_PREFIX)
    return f"proxy-{digest[:16]}"


def _client_key(api: Api, body: Mapping[str, Any]) -> str | None:
    """The key a client gives its conversation (Anthropic's ``metadata.user_id``, which Claude Code
    makes of its session id; a chat request's ``prompt_cache_key``), if any."""
    meta = body.get("metadata")
    key = meta.get("user_id") if api == "anthropic" and isinstance(meta, Mapping) else body.get("prompt_cache_key")
    return key if isinstance(key, str) and key else None


def _fork(begun: str, reply: str | None) -> str:
    """The session of a conversation that starts as ``begun``'s does but is not its: of its first
    reply (None: the first calls of such conversations, which hold nothing but that start)."""
    digest = hash_value({"started": begun, "reply": reply or ""}).removeprefix(HASH_PREFIX)
    return f"proxy-{digest[:16]}"


class AnotherConversation(Exception):
    """A request whose conversation starts as a session's but is not its (``Proxy._departing``):
    it goes to ``session``."""

    def __init__(self, session: str):
        super().__init__(session)
        self.session = session


class ProxyStopping(Exception):
    """The proxy stops (SIGTERM, Ctrl-C): a request is not sent upstream, an answer is cut."""


_CLAIM = "proxy-claim:"
"""The id prefix of the store documents that say which conversation claimed a start's session."""


_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,8}")
"""A chunk's size as chunked transfer coding writes it: hex digits only (``int(x, 16)`` takes a
sign too, and a negative size read the rest of the connection whatever ``MAX_BODY`` said)."""

_HIDDEN = "proxy-hidden:"
"""The id prefix of the store documents that keep a session's exchanges with our tools the client
never saw: a restarted proxy puts them back in their places as the one before did."""


def provider_clearing(body: Mapping[str, Any]) -> list[str]:
    """The context edits of an Anthropic request that have the provider clear tool results from
    what it was sent (``context_management.edits`` of type ``clear_tool_uses_*``), by type."""
    cm = body.get("context_management")
    edits = cm.get("edits") if isinstance(cm, Mapping) else None
    if not isinstance(edits, list):
        return []
    kinds = [e.get("type") for e in edits if isinstance(e, Mapping)]
    return [k for k in kinds if isinstance(k, str) and k.startswith("clear_tool_uses")]


def _contents(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A Gemini request's contents that are objects (none if ``contents`` is no list)."""
    found = body.get("contents")
    return [c for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []


def _first_reply(api: Api, body: Mapping[str, Any]) -> Any:
    """What the model first said in a request's conversation (``_said``), None before it said anything."""
    if api == "gemini":
        reply = next((c for c in _contents(body) if c.get("role") == "model"), None)
        parts = reply.get("parts") if reply is not None else None
        if not isinstance(parts, list):
            return None
        return [
            {k: p.get(k) for k in ("text", "functionCall")}
            for p in parts
            if isinstance(p, Mapping) and not p.get("thought") and ("text" in p or "functionCall" in p)
        ]
    messages = body.get("messages")
    said = messages if isinstance(messages, list) else []
    found = next((m for m in said if isinstance(m, Mapping) and m.get("role") == "assistant"), None)
    return None if found is None else _said(found)


def _said(reply: Mapping[str, Any]) -> Any:
    """What tells a model's reply apart, as a client sends it back: its text and its calls (not
    its reasoning, nor a cache breakpoint: a client may drop or move them later)."""
    content = reply.get("content")
    if isinstance(content, list):
        content = [
            {k: b.get(k) for k in ("type", "text", "id", "name", "input")}
            for b in content
            if isinstance(b, Mapping) and b.get("type") in ("text", "tool_use")
        ]
    calls = reply.get("tool_calls")
    return {"content": content, "calls": calls if isinstance(calls, list) else None}


def _produced(item: Mapping[str, Any]) -> bool:
    """Whether a Responses item is the model's (an assistant message, a call, reasoning)."""
    kind = item.get("type", "message")
    return item.get("role") == "assistant" if kind == "message" else not str(kind).endswith("_output")


def _one_choice(body: Mapping[str, Any]) -> bool:
    """A chat request for one choice (a Gemini one for one candidate): ours are offered only then.
    With ``n`` over 1 a round of ours would go on from the first choice alone, its answer given as
    every choice (and, streamed, mixed with the other choices' text of the round before)."""
    config = body.get("generationConfig")
    n = config.get("candidateCount") if isinstance(config, Mapping) else body.get("n")
    return not (isinstance(n, int) and not isinstance(n, bool) and n > 1)


def _key(api: Api) -> str:
    """Where a request's conversation is: ``input`` (responses), ``contents`` (Gemini) or ``messages``."""
    return {"responses": "input", "gemini": "contents"}.get(api, "messages")


def _client(plan: Plan) -> list[Any]:
    """The client's conversation (a Responses ``input`` string is one user message); ``ValueError``
    for one that is not a list (the request then goes upstream as it came, for the provider to
    refuse)."""
    found = plan.original.get(_key(plan.api))
    if isinstance(found, str) and plan.api == "responses":
        return [{"role": "user", "content": found}]
    if found is not None and not isinstance(found, list):
        raise ValueError(f"the request's {_key(plan.api)} is not a list")
    return list(found or [])


def error_body(api: Api, status: int, message: str) -> bytes:
    """An error in the client's API's own shape: a request the proxy refused (4xx) as the API
    names a bad request, an upstream out of reach (5xx) as a gateway's."""
    if api == "anthropic":
        if status < 500:
            kind = "request_too_large" if status == 413 else "invalid_request_error"
        else:
            kind = "overloaded_error" if status in (502, 503) else "api_error"
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    if api in ("gemini", "code-assist"):  # Google's shape: the code, and its gRPC status's name
        name = _GOOGLE_STATUS.get(status, "INVALID_ARGUMENT" if status < 500 else "INTERNAL")
        return json.dumps({"error": {"code": status, "message": message, "status": name}}).encode()
    kind = "invalid_request_error" if status < 500 else "upstream_error"
    return json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()


_GOOGLE_STATUS = {
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def stream_error(api: Api, status: int, raw: bytes) -> bytes:
    """An upstream's error answer as the event that ends a stream already begun (the client was
    sent the first round's events): in the API's own shape, so its SDK raises it."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        body = json.loads(error_body(api, status, raw.decode("utf-8", "replace")[:500] or f"HTTP {status}"))
    if api == "anthropic":
        return b"event: error\ndata: " + json.dumps(body).encode() + b"\n\n"
    if api == "responses":
        error = body["error"]
        event = {
            "type": "error",
            "code": error.get("code"),
            "message": error.get("message"),
            "param": None,
            "sequence_number": 0,  # the stream's own number (``SequenceNumbers``)
        }
        return b"event: error\ndata: " + json.dumps(event).encode() + b"\n\n"
    return b"data: " + json.dumps(body).encode() + b"\n\n"


@dataclass
class _Conversation:
    hook: ContextHook[Any]
    files: VirtualFiles
    """The agent's files, as its own tools' calls show them (harness/virtual_files.py)."""
    offered: set[str] | None = None
    """The client's tool names ``files`` last went by."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    warned: bool = False
    hidden: list[Hidden] = field(default_factory=list)
    """The exchanges with our tools the client never saw (proxy_tools.py)."""
    kept: list[tuple[int, str]] | None = None
    """Where the exchanges last kept in the store stood (``Proxy._keep_hidden``)."""
    evictions_seen: int = -1
    """The transaction of the newest eviction when the exchanges were last checked against them."""
    used: float = field(default_factory=time.monotonic)
    """When a request last took it or ran a round of it (``time.monotonic``): idle since then."""
    closed: bool = False
    """Closed for having been idle (``Proxy.idle_close_s``): a request that still holds it opens
    the session again."""
    said_clearing: bool = False
    """Whether the client's asking the provider to clear tool results itself was said."""
    tracked: Workspace | None = None
    """The workspace whose tracker it holds (``Trackers.release`` once it is closed)."""


@dataclass
class _Opening:
    """The lock that lets one request at a time open a session (``Proxy._conversation``), or an
    idle close close it, and how many hold it or wait for it: it leaves ``Proxy._opening`` with
    the last of them (a proxy serving a keyless client for days kept one per conversation)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0
    """Under ``Proxy._lock``."""


class _Reopen(Exception):
    """The conversation a request took was closed as idle meanwhile (``Proxy._close_idle``)."""


@dataclass
class Plan:
    """One client request, as the proxy will send it upstream."""

    api: Api
    body: dict[str, Any]
    """What goes upstream now."""
    original: dict[str, Any]
    """The request as the client sent it."""
    conversation: _Conversation | None = None
    """None: failing open (the original goes upstream, no tools of ours)."""
    ours: frozenset[str] = frozenset()
    """Our tools offered to the model in this request."""
    envelope: dict[str, Any] | None = None
    """A Code Assist request's envelope (the whole request as the client sent it): ``body`` goes
    upstream in it as its ``request``, and each answer's ``response`` is the Gemini answer."""
    went: Continuation | None = None
    """Responses: what the request adds to its chain, kept once its response is relayed
    (``Proxy.relayed``); None if nothing is (``store: false``, another API)."""
    container: str | None = None
    """Anthropic: the container an earlier round's code ran in (code execution), which this round
    goes on in unless the client named one: the files that code wrote are there."""

    def sent(self) -> dict[str, Any]:
        """What goes upstream: ``body``, in its envelope if it came in one."""
        body = (
            self.body
            if self.container is None or "container" in self.body
            else {**self.body, "container": self.container}
        )
        return body if self.envelope is None else dict(self.envelope, request=body)

    def upstream_api(self) -> Api:
        """Whose upstream it goes to."""
        return "code-assist" if self.envelope is not None else self.api


class Proxy:
    """What the HTTP layer asks for each request: the body to send upstream, and where."""

    def __init__(
        self,
        store: Store,
        upstream: str,
        *,
        anthropic_upstream: str | None = None,
        gemini_upstream: str | None = None,
        code_assist_upstream: str | None = None,
        timeout: float = 600.0,
        recall: Recall | None = None,
        workspace: str | Path | None = None,
        tool_names: str = "auto",
        track: bool = True,
        idle_close_s: float | None = IDLE_CLOSE_S,
    ):
        """``upstream``: the provider's origin (``https://api.openai.com``), the request's path is
        added to it; ``anthropic_upstream`` for ``/v1/messages`` if it is another one;
        ``gemini_upstream`` for the Gemini API (by default ``GEMINI_ORIGIN``),
        ``code_assist_upstream`` for Google's Code Assist API (``CODE_ASSIST_ORIGIN``). With
        ``recall``, the model is offered the ``recall`` tool too; with ``workspace`` (the agent's
        directory), ``read`` (files as versioned objects); ``"auto"``: each conversation's
        workspace is the directory its agent names in its first request, if this machine has it
        (``proxy_workspace``). ``tool_names``: which of the agent's
        tools read, write and edit files, whose calls keep its files as objects: ``auto`` (the
        preset that names most of the tools a request offers), a preset's name, or ``none``.
        ``track``: with a workspace, a watchdog tracker gives the files the agent touched a new
        version when they change on disk (a formatter, ``git checkout``, the user's editor).
        ``idle_close_s``: a conversation no request used for this long (never less than twice
        ``timeout``: a round of a request may wait that long) has its session closed when another
        opens (its memory given back, its lease too); its next request opens it again, as a
        restarted proxy would. None: every session stays open until ``close``."""
        self.idle_close_s = None if idle_close_s is None else max(idle_close_s, 2 * timeout)
        if tool_names not in ("auto", "none"):
            preset(tool_names)  # a ConfigError naming the presets
        self.store = store
        self.recall = recall
        self.auto_workspace = workspace == AUTO
        self.workspace = Workspace(workspace) if workspace is not None and not self.auto_workspace else None
        self.trackers = Trackers(store) if track and workspace is not None else None
        self.tool_names = tool_names
        self.upstreams: dict[Api, str] = {
            "openai": upstream_origin(upstream, "--upstream"),
            "anthropic": upstream_origin(
                anthropic_upstream or upstream, "--anthropic-upstream" if anthropic_upstream else "--upstream"
            ),
            "responses": upstream_origin(upstream, "--upstream"),
            "gemini": upstream_origin(gemini_upstream or GEMINI_ORIGIN, "--gemini-upstream"),
            "code-assist": upstream_origin(code_assist_upstream or CODE_ASSIST_ORIGIN, "--code-assist-upstream"),
        }
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0))
        self._lock = threading.Lock()
        self._conversations: dict[str, _Conversation] = {}
        self._claims: dict[str, str] = {}
        """Sessions of a conversation's start, by the hash of the first reply of the conversation
        that claimed each (kept in the store too: a restarted proxy knows them)."""
        self.counts = {
            "requests": 0,
            "assembled": 0,
            "failed_open": 0,
            "upstream_errors": 0,
            "tool_calls": 0,
            "continued": 0,
            "continued_unknown": 0,
        }
        """``continued``: Responses requests continuing a response the proxy kept (sent whole);
        ``continued_unknown``: continuing one it did not know (sent as they came)."""
        self.stopping = threading.Event()
        """Set by ``stop``: no request goes upstream any more, an answer being relayed is cut."""
        self._answers: set[httpx.Response] = set()
        """The upstream answers being relayed now (``stop`` closes them)."""
        self._cut: set[int] = set()
        """The answers ``stop`` cut (by ``id``): one that ends at its connection's end may seem whole."""
        self._busy = threading.Condition(self._lock)
        self._relaying = 0
        """Requests between their first upstream call and their client's last byte."""
        self._closed = False
        """Set by ``close``: no session is opened any more."""
        self._opening: dict[str, _Opening] = {}
        """The sessions being opened, each by one request (``_conversation``), or closed as idle."""
        self.chains = Chains(store, lambda: _newest_eviction(store))
        """The Responses chains relayed, for requests that continue one (``previous_response_id``)."""

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop relaying (SIGTERM, Ctrl-C): each answer still being relayed is cut, and its client
        told so in its API's shape (a stream ends with its API's error event, which the SDKs
        raise; an answer not yet begun is a 503), as a request that comes after gets too. Waits up
        to ``timeout`` seconds for those clients to be told; False if some were not."""
        self.stopping.set()
        with self._lock:
            answers = list(self._answers)
            self._cut.update(id(r) for r in answers)
        for resp in answers:
            _cut_off(resp)
        # and the requests still waiting for their answer to begin (a request not streamed waits
        # for the whole answer): their connections, which no answer names yet, are shut down too
        for stream in _pool_streams(self.client):
            _shut(stream)
        with self._busy:
            return self._busy.wait_for(lambda: self._relaying == 0, timeout)

    @contextmanager
    def relay(self, resp: httpx.Response) -> Iterator[httpx.Response]:
        """``resp`` (an upstream answer) while it is relayed: ``stop`` cuts it. ``ProxyStopping``
        once the proxy stops."""
        with self._lock:
            if self.stopping.is_set():
                raise ProxyStopping
            self._answers.add(resp)
        try:
            yield resp
        finally:
            with self._lock:
                self._answers.discard(resp)
                self._cut.discard(id(resp))

    def whole(self, resp: httpx.Response) -> None:
        """``ProxyStopping`` if ``stop`` cut ``resp``: what was read of it is not all of it, though
        an answer that ends with its connection reads as whole."""
        with self._lock:
            if id(resp) in self._cut:
                raise ProxyStopping

    @contextmanager
    def busy(self) -> Iterator[None]:
        """A request from its first upstream call to its client's last byte (``stop`` waits for
        them)."""
        with self._busy:
            self._relaying += 1
        try:
            yield
        finally:
            with self._busy:
                self._relaying -= 1
                self._busy.notify_all()

    def status(self) -> dict[str, Any]:
        """What ``GET /_context_os/status`` answers: the upstreams, the request counts, the
        sessions this proxy manages (the conversations it has seen since it started) and the file
        trackers of its workspace, with their latest errors."""
        with self._lock:
            conversations = list(self._conversations.items())
            counts = dict(self.counts)
        sessions = [
            {
                "session": sid,
                "harness": c.hook.session.harness,
                "turn": c.hook.session.view.turn,
                "workspace": c.hook.session.workspace,
            }
            for sid, c in conversations
        ]
        return {
            "version": __version__,
            "store": self.store.url,
            "upstreams": dict(self.upstreams),
            "workspace": AUTO if self.auto_workspace else str(self.workspace.root) if self.workspace else None,
            "counts": counts,
            "sessions": sessions,
            "trackers": self.trackers.status() if self.trackers is not None else [],
            "stopping": self.stopping.is_set(),
        }

    def close(self) -> None:
        """Close the upstream client, the trackers and the sessions (waited for at most
        ``CLOSE_WAIT`` seconds together, without the lock every request and the status take); a
        request that comes after goes upstream as it came, opening no session."""
        self.client.close()
        if self.trackers is not None:
            self.trackers.close()
        with self._lock:
            self._closed = True
            sessions = [c.hook.session for c in self._conversations.values()]
            self._conversations.clear()
        close_sessions(sessions, CLOSE_WAIT, "proxy: ")

    def _conversation(
        self,
        api: Api,
        session_id: str,
        started: str | None = None,
        *,
        keyless: bool = False,
        body: Mapping[str, Any] | None = None,
    ) -> _Conversation:
        """The conversation of ``session_id``; ``started``: the session its first call was recorded
        under, when that is another (one named by its start alone, before the model's first reply),
        whose exchanges with our tools it takes over. ``keyless``: a session named by how its
        conversation starts alone, which another conversation starting alike may reach
        (``_departing``). ``body``: the request, whose agent may name its directory (``--workspace
        auto``)."""
        name = "openai" if api in ("responses", "gemini") else api  # translated to chat messages
        with self._lock:
            if self._closed:  # its session would be opened after the others were closed, and stay open
                raise ProxyStopping
            found = self._taken(session_id)
            if found is not None:
                return found
        with self._opening_of(session_id) as opening:
            self._close_idle()
            # opened without the lock every request and the status take (a store that hangs holds
            # each write up to its timeout), once: a request of the same session waits for it
            # (after an open that failed, the requests waiting try again one at a time)
            with opening.lock:
                with self._lock:
                    found = self._taken(session_id)
                if found is not None:
                    return found
                ws = self._workspace_of(api, body, session_id)
                found = self._open(name, session_id, keyless=keyless, ws=ws)
                try:
                    if started is not None and found.hook.session.view.turn == 0:
                        self._take_first(started, found)
                    with self._lock:
                        if not self._closed:
                            self._conversations[session_id] = found
                            return found
                    raise ProxyStopping
                except BaseException:  # (its session's lease and its tracker, given back)
                    self._release(found)
                    found.hook.session.close()
                    raise

    def _take_first(self, started: str, found: _Conversation) -> None:
        """``found``, new, takes the exchanges with our tools of its first call, run under the
        session ``started`` (``_route``: the first to reply takes them): from that conversation
        when it is open, else from the store (closed as idle, or by a proxy that stopped, before
        the reply came)."""
        with self._opening_of(started) as opening, opening.lock:  # neither opened nor closed meanwhile
            with self._lock:
                first = self._conversations.get(started)
            if first is not None:
                with first.lock:
                    found.hidden, first.hidden = first.hidden, []
                    self._keep_hidden(first)
            elif not self._take_stored(started, found):
                return
            self._keep_hidden(found)

    def _take_stored(self, started: str, found: _Conversation) -> bool:
        """``_take_first`` from the store: whether there were exchanges, and they were taken (the
        store's copy emptied first, so that they are never sent in two conversations)."""
        taken = _stored_hidden(self.store, started, found.evictions_seen)
        if not taken:
            return False
        try:
            self.store.put(_hidden_doc(started, []))
        except Exception as e:  # noqa: BLE001 - the store may be down: they stay where they are
            sid = found.hook.session.id
            log.warning("proxy: session %s: its first call's exchanges with our tools are left: %s", sid, e)
            return False
        found.hidden = taken
        return True

    @contextmanager
    def _opening_of(self, session_id: str) -> Iterator[_Opening]:
        """The lock that opens or closes ``session_id``'s session, held for use (``_Opening``)."""
        with self._lock:
            opening = self._enter_opening(session_id)
        try:
            yield opening
        finally:
            with self._lock:
                self._leave_opening(session_id, opening)

    def _enter_opening(self, session_id: str) -> _Opening:
        """The opening lock of ``session_id``, counted as used until ``_leave_opening``; under ``_lock``."""
        opening = self._opening.setdefault(session_id, _Opening())
        opening.users += 1
        return opening

    def _leave_opening(self, session_id: str, opening: _Opening) -> None:
        """Done with it (``_enter_opening``): gone with its last user; under ``_lock``."""
        opening.users -= 1
        if opening.users == 0 and self._opening.get(session_id) is opening:
            del self._opening[session_id]

    def _taken(self, session_id: str) -> _Conversation | None:
        """The open conversation of ``session_id``, used now (not idle: ``_close_idle`` leaves
        it); under ``_lock``."""
        found = self._conversations.get(session_id)
        if found is not None:
            found.used = time.monotonic()
        return found

    def _close_idle(self) -> None:
        """Close the sessions of the conversations no request used for ``idle_close_s`` (a proxy
        that runs for days meets a conversation per task, and kept every one's session, with its
        view, in memory until it stopped). One whose lock a request holds is in use: kept. A
        request that took one just before it closed finds it ``closed`` and opens it again."""
        if self.idle_close_s is None:
            return
        idle_before = time.monotonic() - self.idle_close_s
        closing: dict[str, tuple[_Conversation, _Opening]] = {}  # by session id
        with self._lock:
            for sid, conv in list(self._conversations.items()):
                if conv.used >= idle_before or not conv.lock.acquire(blocking=False):
                    continue
                # a request of it meanwhile waits to open it again until its session is closed
                # (opened while the close gives its lease back, it would lose it)
                opening = self._enter_opening(sid)
                if not opening.lock.acquire(blocking=False):  # (not while it is open: kept all the same)
                    self._leave_opening(sid, opening)
                    conv.lock.release()
                    continue
                conv.closed = True
                conv.lock.release()
                del self._conversations[sid]
                closing[sid] = (conv, opening)
        if not closing:
            return
        log.info("proxy: closing %d session(s) idle for %g s", len(closing), self.idle_close_s)
        try:
            close_sessions([conv.hook.session for conv, _ in closing.values()], CLOSE_WAIT, "proxy: ")
        finally:
            for _, opening in closing.values():
                opening.lock.release()
            with self._lock:
                for sid, (_, opening) in closing.items():
                    self._leave_opening(sid, opening)
            for sid, (conv, _) in closing.items():
                self.chains.forget(sid)  # (what of them is stored is read again when they go on)
                self._release(conv)

    def _release(self, conv: _Conversation) -> None:
        """Give back the tracker ``conv`` holds: the last conversation of a workspace to close
        stops it (``Trackers.release``)."""
        tracked, conv.tracked = conv.tracked, None
        if tracked is not None and self.trackers is not None:
            self.trackers.release(tracked)

    def _workspace_of(self, api: Api, body: Mapping[str, Any] | None, session_id: str) -> Workspace | None:
        """The workspace of ``session_id``'s conversation, opened for ``body``: the proxy's, or with
        ``--workspace auto`` the directory the agent names (None if it names none this machine has)."""
        if not self.auto_workspace:
            return self.workspace
        found = agent_directory(api, body) if body is not None else None
        if found is None:
            log.info(
                "proxy: session %s: the agent names no directory of this machine: its files are kept as its "
                "tools show them",
                session_id,
            )
            return None
        log.info("proxy: session %s: the agent works in %s: its files there are read from the disk", session_id, found)
        return Workspace(found)

    def _open(self, name: str, session_id: str, *, keyless: bool, ws: Workspace | None) -> _Conversation:
        """A conversation of ``session_id``'s session, opened (``_conversation``) in workspace ``ws``."""
        session = Session.open(self.store, session_id, harness=name, workspace=str(ws.root) if ws else None)
        trackers, tracker = self.trackers, None
        try:
            if ws is not None and trackers is not None:
                tracker = trackers(ws)
            found = self._conversation_of(name, session, ws, tracker, keyless=keyless)
        except BaseException:  # (what it took, given back)
            if trackers is not None and tracker is not None:
                trackers.release(tracker.workspace)
            session.close()
            raise
        found.tracked = tracker.workspace if tracker is not None else None
        return found

    def _conversation_of(
        self, name: str, session: Session, ws: Workspace | None, tracker: FileTracker | None, *, keyless: bool
    ) -> _Conversation:
        """``_open``'s conversation of ``session``, just opened."""
        session.ingest.cut_over_cap = True  # the client cannot be asked to send less: managed, cut
        if keyless:
            session.ingest.on_rewrite = _departing(session)
        tools = FileTools(session, ws, tracker=tracker) if ws else None
        # the agent's files: from the disk under its workspace, else as its tools show them
        # without a workspace, a relative path is taken under the directory the agent names (its
        # system prompt's, in any agent's words): a relative read and an absolute edit are one file
        root = str(ws.root) if ws else None
        files = VirtualFiles(session, root=root, tool_names=None, disk=tools, find_root=named_cwd)
        hook = harness(name).hook(session, files=tools, on_sync=files.observe)
        if self.recall is not None:
            SourceTools(session, recall=self.recall, auto_recall=False).register(hook.registry)
        found = _Conversation(hook, files)
        found.evictions_seen = _newest_eviction(self.store)
        found.hidden = _stored_hidden(self.store, session.id, found.evictions_seen)  # a restarted proxy's
        found.kept = _places(found.hidden)
        return found

    def prepare(self, api: Api, headers: Mapping[str, str], body: dict[str, Any], *, tools: bool = True) -> Plan:
        """What to send upstream for a client's request: the assembled context in place of its
        messages (with the exchanges it did not see spliced back in), our tools beside its own
        (``tools``: if the request's answer can be read for their calls); on any failure of ours,
        the request as it came."""
        with self._lock:
            self.counts["requests"] += 1
            closed = self._closed
        if closed or self.stopping.is_set():
            return Plan(api, body, body)  # answered 503 (``ProxyStopping``), or a proxy closed: no session opened
        went: Continuation | None = None
        chained: str | None = None  # the session of the chain's start
        if api == "responses" and body.get("conversation") is not None:
            return Plan(api, body, body)  # the Conversations API's: the provider holds what came before
        if api == "responses":
            went, whole, chained = self.chains.begin(body)
            if body.get("previous_response_id") is not None:
                with self._lock:
                    self.counts["continued" if whole is not None else "continued_unknown"] += 1
                if whole is None:  # the provider holds a conversation the proxy does not know
                    return Plan(api, body, body, went=went)
                body = whole  # as a client keeping its history sends it
        named = next((v for k, v in headers.items() if k.lower() == SESSION_HEADER.lower()), None)
        conv: _Conversation | None = None
        session_id = named.strip() if named and named.strip() else "(its first message)"
        try:
            if not (named and named.strip()):
                # (hashes what the client sent: may refuse it)
                session_id = chained if chained is not None else derive_session(api, body)
            started = None
            # a conversation told from another that starts alike by its replies (``_route``): not a
            # Responses one, which has no claims (Codex sends its key; a remote compaction replaces
            # the replies with one item: it is the same conversation)
            keyless = not (named and named.strip()) and api != "responses" and _client_key(api, body) is None
            if not (named and named.strip()):
                session_id, started = self._route(api, body, session_id)
            for _ in range(MAX_FORKS):
                if went is not None:
                    went.session = session_id  # (its response is kept as this session's)
                conv = self._conversation(api, session_id, started, keyless=keyless, body=body)
                try:
                    plan = self._plan(Plan(api, body, body, conv, went=went), offer=tools and _one_choice(body))
                    break
                except AnotherConversation as other:  # it starts as this one does, and then differs
                    session_id, started, conv = other.session, None, None
                except _Reopen:  # closed as idle just after this request took it: opened again
                    conv = None
            else:
                raise RuntimeError(f"over {MAX_FORKS} conversations start as this one does")
        except Exception as e:
            self._failed(session_id, conv, e)
            return Plan(api, body, body, went=went)
        with self._lock:
            self.counts["assembled"] += 1
        return plan

    def relayed(self, plan: Plan, raw: bytes, *, streamed: bool) -> None:
        """The answer to ``plan``'s request was relayed whole (``raw``: its body, or the stream's
        events from its end): a Responses response is kept as its chain's link, for a request
        that continues it."""
        if plan.went is None:
            return
        response = completed_response(raw, streamed)
        if response is not None:
            conv = plan.conversation
            self.chains.record(plan.went, response, _clean(conv) if conv is not None else None)

    def _route(self, api: Api, body: Mapping[str, Any], begun: str) -> tuple[str, str | None]:
        """The session of a request whose conversation starts as ``begun`` names (its start, or
        its start and the client's key), and the session its first call went to when that is
        another. Without a key of the client's, two conversations can start alike (two runs of
        one task): the first whose model replied claims the session of that start, and a
        conversation whose first reply is another is a session of its own, its first call under
        one that holds nothing but the start, so that none is ever sent what another read."""
        if api == "responses" or _client_key(api, body) is not None:
            return begun, None
        reply = _first_reply(api, body)
        claimed = self._claimed(begun)
        if reply is None:
            return (begun, None) if claimed is None else (_fork(begun, None), None)
        mine = hash_value(reply)
        if claimed is None:
            claimed = self._claim(begun, mine)  # (another request may have claimed it since)
        return (begun, None) if claimed == mine else (_fork(begun, mine), _fork(begun, None))

    def _claimed(self, begun: str) -> str | None:
        """The first reply (its hash) of the conversation that claimed the session ``begun``."""
        with self._lock:
            if begun in self._claims:
                return self._claims[begun]
        doc = self.store.doc(f"{_CLAIM}{begun}")
        claim = doc.get("content") if doc is not None else None
        if isinstance(claim, str):
            with self._lock:
                self._claims[begun] = claim
            return claim
        return None

    def _claim(self, begun: str, reply: str) -> str:
        """Claim the session ``begun`` for the conversation whose first reply is ``reply``, unless
        one claimed it first (two whose first replies came at once: both had found it unclaimed,
        and the second's claim replaced the first's); the reply of the one that holds it."""
        with self._lock:
            held = self._claims.setdefault(begun, reply)
        if held == reply:
            self.store.put(
                hashed({"id": f"{_CLAIM}{begun}", "kind": "proxy_claim", "content": reply, "meta": {"session": begun}})
            )
        return held

    def _keep_hidden(self, conv: _Conversation) -> None:
        """Keep ``conv``'s exchanges with our tools in the store when they changed (under its lock).
        One holding what the session's redactor would take out (a secret the model repeated in
        its reasoning, which must go back as it came) is kept in memory only, as a failing store
        leaves them all: a restart then loses it, and the conversation goes on without it."""
        places = _places(conv.hidden)  # an exchange never changes: a new one is a new place
        if places == conv.kept:
            return
        clean = _clean(conv)
        rows = _rows([h for h in conv.hidden if clean(h.messages)])
        sid = conv.hook.session.id
        try:
            self.store.put(_hidden_doc(sid, rows))
        except Exception as e:  # noqa: BLE001 - the store may be down: the exchanges stay in memory
            log.warning("proxy: session %s: the exchanges with our tools are not kept in the store: %s", sid, e)
            return
        conv.kept = places

    def _forget_hidden(self, conv: _Conversation, newest: int) -> None:
        """An eviction reached the session: its exchanges with our tools (a ``lines`` or ``recall``
        output is stored text) leave memory and the store, every version of the document."""
        sid = conv.hook.session.id
        conv.hidden, conv.kept, conv.evictions_seen = [], [], newest
        try:
            self.store.submit([Evict(f"{_HIDDEN}{sid}")])
        except Exception as e:  # noqa: BLE001 - the store may be down: a restart checks again
            log.warning("proxy: session %s: the exchanges with our tools kept in the store stay there: %s", sid, e)
        log.info("proxy: session %s: an eviction dropped its exchanges with our tools", sid)

    def _failed(self, session_id: str, conv: _Conversation | None, e: Exception) -> None:
        """Fail open: count it, say it once per session."""
        with self._lock:
            self.counts["failed_open"] += 1
        if conv is None or not conv.warned:
            log.warning("proxy: session %s: context_os failed, the original messages go upstream: %s", session_id, e)
            if conv is not None:
                conv.warned = True

    def _plan(self, plan: Plan, *, offer: bool) -> Plan:
        """``plan`` with its body assembled anew (the hidden exchanges as they stand now); with
        ``offer``, our tools that do not clash with the client's offered."""
        conv = plan.conversation
        assert conv is not None
        d = dialect(plan.api, plan.original)
        client = _client(plan)
        theirs = d.tool_names(plan.original.get("tools")) | _functions(plan.original)
        with conv.lock:
            if conv.closed:  # idle long enough to be closed just before: its next request opens it again
                raise _Reopen(conv.hook.session.id)
            conv.used = time.monotonic()
            self._observe(conv, theirs)
            if not conv.said_clearing and (edits := provider_clearing(plan.original)):
                conv.said_clearing = True
                log.warning(
                    "proxy: session %s: the client asks the provider to clear tool results itself"
                    " (context_management: %s): the model is shown less than the frames record, which is"
                    " what context_os sent (it collapses old tool output already)",
                    conv.hook.session.id,
                    ", ".join(edits),
                )
            if conv.hidden and (newest := _newest_eviction(self.store)) > conv.evictions_seen:
                self._forget_hidden(conv, newest)  # they may hold copies of what was erased
            messages, hidden = splice(client, conv.hidden)
            ingest = conv.hook.session.ingest
            try:
                body = self._assemble(plan.api, conv.hook, dict(plan.original, **{_key(plan.api): messages}))
            except AnotherConversation:
                raise  # not this session's: its exchanges stay as they are
            finally:
                cuts, ingest.cuts = ingest.cuts, []
            conv.hidden = hidden
            self._keep_hidden(conv)  # one the client rewrote is dropped
            for at, size in cuts:
                log.warning(
                    "proxy: session %s: message %d is %s characters, over the %s one message keeps: the "
                    "provider is sent it cut to them, with a note",
                    conv.hook.session.id,
                    at,
                    f"{size:,}",
                    f"{ingest.view.policy.max_message_chars:,}",
                )
            schemas = (
                [t for t in conv.hook.registry.schemas if t["name"] in OFFERED and t["name"] not in theirs]
                if offer
                else []
            )
        if schemas:  # after the client's (a dialect the hook's adapter does not speak: its own)
            own = getattr(d, "definitions", None)
            ours = own(schemas) if own is not None else conv.hook.adapter.tool_definitions(schemas)
            body[d.TOOLS] = [*(plan.original.get(d.TOOLS) or []), *ours]
        return replace(plan, body=body, ours=frozenset(t["name"] for t in schemas))

    def _observe(self, conv: _Conversation, theirs: set[str]) -> None:
        """Which of the client's tools keep its files as objects, by the tools it offers now (a
        request offering none, a side request, changes nothing)."""
        if self.tool_names == "none" or not theirs or theirs == conv.offered:
            return
        conv.offered = theirs
        names = for_tools(theirs) if self.tool_names == "auto" else preset(self.tool_names).only(theirs)
        conv.files.names = names if names is not None and names.known() else None
        known = ", ".join(sorted(conv.files.names.known())) if conv.files.names is not None else "none"
        log.info("proxy: session %s: the agent's file tools kept as objects: %s", conv.hook.session.id, known)

    def run_ours(self, plan: Plan, calls: list[Call], text: str | None, output: list[Any] | None = None) -> None:
        """Run the model's calls of our tools; keep the exchange for the next upstream call
        (``output``: what of the reply the exchange keeps: a Responses reply's output items, an
        Anthropic reply's blocks, streamed its thinking and server tools' blocks)."""
        conv = plan.conversation
        assert conv is not None
        client = _client(plan)
        with conv.lock:
            if conv.closed:  # (a round waits at most twice the timeout, less than a conversation idles)
                raise _Reopen(conv.hook.session.id)
            conv.used = time.monotonic()
            results = [conv.hook.call_tool(c.name, c.arguments) for c in calls]
            exchange = dialect(plan.api, plan.original).exchange(text, calls, results, output)
            conv.hidden.append(Hidden(len(client), prefix_hash(client), exchange))
            self._keep_hidden(conv)
        with self._lock:
            self.counts["tool_calls"] += len(calls)

    def next_round(self, plan: Plan, *, last: bool) -> Plan:
        """The request again, with the exchanges so far (the last round offers none of ours)."""
        try:
            return self._plan(plan, offer=not last)
        except Exception as e:
            assert plan.conversation is not None
            self._failed(plan.conversation.hook.session.id, plan.conversation, e)
            with plan.conversation.lock:
                messages, _ = splice(_client(plan), plan.conversation.hidden)
            return replace(
                plan, body=dict(plan.original, **{_key(plan.api): messages}), conversation=None, ours=frozenset()
            )

    def _assemble(self, api: Api, hook: ContextHook[Any], body: dict[str, Any]) -> dict[str, Any]:
        if api == "responses":
            return dict(body, input=to_items(hook.transform_context(to_chat(body.get("input")))))
        if api == "gemini":
            system = body.get("systemInstruction")
            contents, system = gemini.to_contents(hook.transform_context(gemini.to_chat(body.get("contents"), system)))
            return dict(body, contents=contents) | ({"systemInstruction": system} if system is not None else {})
        h = harness(api)
        messages = h.decode(list(body.get("messages") or []))
        out = dict(body)
        if h.system_apart:
            request = hook.transform_request(messages, system=body.get("system"))  # type: ignore[attr-defined]
            out["messages"] = request["messages"]
            if "system" in request:
                out["system"] = request["system"]
        else:
            out["messages"] = h.encode(hook.transform_context(messages))
        return out

    def upstream_url(self, api: Api, path: str) -> str:
        base = self.upstreams[api]
        if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
            path = path[3:]  # a base URL that names the version (a provider's ".../openai/v1"), and a client's path too
        return base + path


_QUERY_KEY = re.compile(r"([?&]key=)[^&\s\"]*")


def _keyless(text: str) -> str:
    """``text`` (a request's path or line) without the API key a Gemini client may send in the
    query (``?key=…``): the proxy never logs a key."""
    return _QUERY_KEY.sub(r"\1[hidden]", text)


def _managed(path: str) -> Api | None:
    """The API of a request whose conversation the proxy manages, by its path; None for others."""
    route = path.split("?")[0].rstrip("/")
    if CODE_ASSIST_ROUTE.fullmatch(route):
        return "code-assist"
    return ROUTES.get(route) or ("gemini" if GEMINI_ROUTE.fullmatch(route) else None)


def _streamed(api: Api, path: str, body: Mapping[str, Any]) -> bool:
    """Whether a request asks for its answer streamed (Gemini: by its method, not its body)."""
    if api in ("gemini", "code-assist"):
        return urlsplit(path).path.endswith(":streamGenerateContent")
    return bool(body.get("stream"))


def _functions(body: Mapping[str, Any]) -> set[str]:
    """The names of a chat request's functions of legacy function calling (``functions``)."""
    found = body.get("functions")
    listed = found if isinstance(found, list) else []
    return {f["name"] for f in listed if isinstance(f, Mapping) and isinstance(f.get("name"), str)}


def _readable(api: Api, body: Mapping[str, Any]) -> bool:
    """Whether our tools may be offered by the shape of the answer asked for: not to a Gemini
    request for structured output (a JSON answer: Gemini CLI's checks on the side; Gemini refuses
    tools with it). (A chat request of legacy function calling gets ours as functions:
    ``legacy``; a Gemini stream asked for without ``alt=sse`` goes upstream with it:
    ``_json_array``.)"""
    if api != "gemini":
        return True
    config = body.get("generationConfig")
    config = config if isinstance(config, Mapping) else {}
    structured = config.get("responseMimeType") not in (None, "text/plain") or any(
        config.get(k) is not None for k in ("responseSchema", "responseJsonSchema")
    )
    return not structured


def _json_array(api: Api, path: str) -> bool:
    """Whether a stream is asked for as a JSON array: Gemini's without ``alt=sse``. The proxy,
    reading a model's calls in events only, asks for events and gives the client the array
    (``JsonArrayStream``)."""
    return api == "gemini" and "alt=sse" not in urlsplit(path).query.split("&")


def _provider(path: str, headers: Any) -> Api:
    """Whose API a request the proxy does not manage is for: Anthropic's for a path under
    ``/v1/messages`` (``count_tokens``, batches) or one carrying the ``anthropic-version`` header
    its SDKs and Claude Code always send; Gemini's for a path under ``/v1beta/`` or ``/v1alpha/``
    (or Vertex AI's ``/v1/projects/``), a model's method (``/v1/models/{model}:countTokens``) or
    one carrying Google's API key (``x-goog-api-key``, or ``key=`` in the query), else OpenAI's
    (``--anthropic-upstream`` gets the first, ``--gemini-upstream`` the second).
    ``headers``: the request's (``http.server``'s, whose names match in any case)."""
    route, _, query = path.partition("?")
    if route.startswith("/v1internal"):
        return "code-assist"
    if (
        route.startswith(("/v1beta/", "/v1alpha/", "/v1/projects/", "/v1beta1/projects/"))
        or re.fullmatch(r"/v1/models/[^/]+:\w+", route)
        or headers.get("x-goog-api-key") is not None
        or any(p.startswith("key=") for p in query.split("&"))
    ):
        return "gemini"
    if route.startswith(("/v1/messages/", "/messages/")) or headers.get("anthropic-version") is not None:
        return "anthropic"
    return "openai"


def upstream_origin(url: str, option: str) -> str:
    """An upstream's base URL, checked: http or https and a host (``ConfigError`` naming the
    option otherwise), without a trailing slash."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{option} must be an http(s) URL such as https://api.openai.com, got {url!r}")
    return url.rstrip("/")


class _ProxyServer(BoundedHTTPServer):
    guard: HttpGuard
    status_token: str | None = None
    users: frozenset[int] = frozenset()
    """The users whose processes it answers (with no token of its own, the proxy would otherwise
    answer any local process: another user's could name a session and be given its context)."""

    def busy(self) -> tuple[str, bytes]:
        # in OpenAI's shape (the API is not known before the request is read); both SDKs retry a 503
        return "application/json", error_body("openai", 503, "too many connections at once: retry when one is done")

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a kept-alive connection reset, an agent killed) is no error
        of the proxy's: one line at debug, not socketserver's traceback on stderr."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            log.debug("proxy: the client %s went away: %s", client_address, sys.exc_info()[1])
            return
        super().handle_error(request, client_address)


def make_proxy_server(
    proxy: Proxy,
    port: int = 0,
    host: str = "127.0.0.1",
    *,
    sock: socket.socket | None = None,
    max_connections: int = MAX_CONNECTIONS,
    header_seconds: float = HEADER_SECONDS,
    body_seconds: float = BODY_SECONDS,
    status_token: str | None = None,
    users: Collection[int] | None = None,
) -> BoundedHTTPServer:
    """The proxy's HTTP server, bound (not yet serving); on ``sock``, bound there already. It
    serves ``max_connections`` at once, and closes one whose request line and headers took over
    ``header_seconds`` to arrive, or its body ``body_seconds`` (as ``ctxos serve --http``).
    ``GET /_context_os/status`` answers only a request carrying ``Authorization: Bearer
    <status_token>`` (without a token, nobody: 404): it names sessions, which any local process
    could otherwise read and then name in a request of its own.
    It answers only processes of ``users`` (by default the user running it, and root, who can read
    its store anyway), where the kernel says whose a connection is (Linux): any other user's
    request is refused (403), as a session's id would give it that conversation's context."""
    server = bind(_ProxyServer, host, port, _handler(proxy), sock=sock)
    server.bound(max_connections, header_seconds, body_seconds)
    bound = server.server_address[1]
    # Host, Origin and JSON are checked; no token of its own: the provider's key is the credential
    server.guard = HttpGuard.for_address(host, int(bound), token=None)
    server.status_token = status_token
    server.users = frozenset({os.geteuid(), 0} if users is None else users)
    return server


def _handler(proxy: Proxy) -> type[DeadlineHandler]:
    class Handler(DeadlineHandler):
        protocol_version = "HTTP/1.1"
        server_version = "ctxos-proxy"

        def log_message(self, format: str, *args: Any) -> None:
            log.info("proxy: " + format, *(_keyless(a) if isinstance(a, str) else a for a in args))

        def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _refuse(self, api: Api, status: int, why: str) -> None:
            """Answer a refused request in its API's shape, having read (and dropped) its body: a
            socket closed with unread data is reset, and the client loses the answer."""
            with suppress(ValueError):  # not well formed: the connection closes, no more is read
                self._read_body()
            self.close_connection = True
            self._reply(status, error_body(api, status, why))

        def _read_body(self) -> bytes | None:
            """The request's body, by its ``Content-Length`` or chunked (as a client sends a body
            whose length it does not know in advance); None: over ``MAX_BODY`` (left unread).
            ``ValueError``: a length or a chunk that is not well formed."""
            if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
                length = int(self.headers.get("Content-Length") or 0)
                if length < 0:
                    raise ValueError(length)
                if length > MAX_BODY:
                    return None
                body = self.rfile.read(length)
                if len(body) < length:  # a client gone mid-send: what came is not what it sent
                    raise ValueError(f"the body ended after {len(body)} of {length} bytes")
                return body
            parts: list[bytes] = []
            size = 0
            while True:
                head = self.rfile.readline(1024).split(b";")[0].strip()  # a chunk's size, in hex
                if _CHUNK_SIZE.fullmatch(head) is None:
                    raise ValueError(head)
                n = int(head, 16)
                if n == 0:
                    break
                size += n
                if size > MAX_BODY:
                    return None
                chunk = self.rfile.read(n + 2)
                if len(chunk) != n + 2 or chunk[n:] != b"\r\n":
                    raise ValueError("a chunk shorter than its size, or not ended by CRLF")
                parts.append(chunk[:n])
            while self.rfile.readline(65536).strip():  # trailer fields, up to the blank line
                pass
            return b"".join(parts)

        def _admitted(self, api: Api) -> bool:
            """The guard's checks: a loopback Host (no DNS rebinding), no browser Origin, JSON;
            and a connection of one of the proxy's users."""
            refusal = self._other_user() or self.server.guard.refusal(self.command, self.headers)  # type: ignore[attr-defined]
            if refusal is not None:
                self._refuse(api, *refusal)
            return refusal is None

        def _other_user(self) -> tuple[int, str] | None:
            """(403, why) if another user's process made this connection, or one the kernel no
            longer lists a live process at the other end of (asked once for it)."""
            users: frozenset[int] = self.server.users  # type: ignore[attr-defined]
            if not hasattr(self, "_peer"):
                self._peer = peer_user(self.connection)
                if self._peer is not None and self._peer not in users:
                    who = "a closed socket" if self._peer == PEER_GONE else f"user {self._peer}"
                    log.warning("proxy: refused a connection of %s (it answers user %d)", who, os.geteuid())
            if self._peer is None or self._peer in users:
                return None
            if self._peer == PEER_GONE:  # (a closed socket's row names uid 0: not a user's to pass)
                return 403, "refused: the process at the other end of this connection has closed it"
            return 403, (
                f"refused: this proxy answers only the user that started it (uid {os.geteuid()}),"
                f" and this connection is user {self._peer}'s: start a proxy of your own (ctxos proxy)"
            )

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            # a model list and the like go upstream untouched
            api = _provider(self.path, self.headers)
            if not self._admitted(api):
                return
            if urlsplit(self.path).path.rstrip("/") == STATUS_PATH:  # the proxy's own, never upstream
                token: str | None = self.server.status_token  # type: ignore[attr-defined]
                scheme, _, given = self.headers.get("Authorization", "").strip().partition(" ")
                if token is None:
                    self._refuse(api, 404, "this proxy has no status token: its status is not served")
                elif scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
                    self._refuse(api, 401, "the status needs Authorization: Bearer <the proxy's status token>")
                else:
                    self._reply(200, json.dumps(proxy.status(), indent=1).encode())
                return
            self._upstream(api, lambda: self._forward(api, None))

        def do_DELETE(self) -> None:  # noqa: N802 - a stored response, a file: untouched
            api = _provider(self.path, self.headers)
            if self._admitted(api):
                self._upstream(api, lambda: self._forward(api, None, "DELETE"))

        def _not_allowed(self) -> None:
            """Any method but GET, POST and DELETE (HEAD, OPTIONS, PUT, made-up ones): 405 in the
            API's shape, the methods it takes in ``Allow``; a HEAD gets the headers alone."""
            api = _provider(self.path, self.headers)
            with suppress(ValueError):  # read (and drop) a body sent with it, as _refuse does
                self._read_body()
            self.close_connection = True
            body = error_body(api, 405, f"{self.command} is not a method the proxy takes (GET, POST, DELETE)")
            self.send_response(405)
            self.send_header("Allow", "GET, POST, DELETE")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_HEAD = do_OPTIONS = do_PUT = do_PATCH = _not_allowed  # noqa: N815

        def __getattr__(self, name: str) -> Any:
            # any other method (TRACE, made-up ones) the same way, not with http.server's 501 page
            if name.startswith("do_"):
                return self._not_allowed
            raise AttributeError(name)

        def do_POST(self) -> None:  # noqa: N802
            api = _managed(self.path)
            other = _provider(self.path, self.headers)  # the provider of a request we do not manage
            if not self._admitted(api or other):
                return
            try:
                raw = self._read_body()
            except ValueError:
                self.close_connection = True
                why = "the request's Content-Length or chunked body is not well formed"
                self._reply(400, error_body(api or other, 400, why))
                return
            if raw is None:
                self.close_connection = True
                self._reply(413, error_body(api or other, 413, f"request body over {MAX_BODY:,} bytes"))
                return
            if api is None:
                self._upstream(other, lambda: self._forward(other, raw))  # another endpoint: untouched
                return
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError):  # (nested past the decoder's depth)
                body = None
            if not isinstance(body, dict):
                self._reply(400, error_body(api, 400, "the request body is not a JSON object"))
                return
            headers = {k: v for k, v in self.headers.items()}
            if api == "code-assist":  # a Gemini request in an envelope: managed as one, sent in it
                inner = body.get("request")
                if not isinstance(inner, dict):
                    self._upstream(api, lambda: self._forward(api, raw))  # none in it: untouched
                    return
                plan = proxy.prepare("gemini", headers, inner, tools=_readable("gemini", inner))
                plan = replace(plan, envelope=body)
            else:
                plan = proxy.prepare(api, headers, body, tools=_readable(api, body))
            to = plan.upstream_api()
            if plan.ours:
                self._upstream(to, lambda: self._rounds(plan))
            else:
                self._upstream(to, lambda: self._forward(to, json.dumps(plan.sent()).encode(), plan=plan))

        def _upstream(self, api: Api, send: Callable[[], None]) -> None:
            """Run ``send``; an upstream that cannot be reached or is too slow is answered in the
            client's API's shape (before anything was sent; after, a stream ends with its API's
            error event, and any other answer with the connection)."""
            self._started = self._bodiless = self._chunked = False
            self._events: Callable[[bytes], None] | None = None  # a stream begun, at an event's end
            self._array: JsonArrayStream | None = None  # a Gemini stream given as a JSON array
            with proxy.busy():
                try:
                    if proxy.stopping.is_set():
                        raise ProxyStopping
                    self._send_upstream(api, send)
                except (BrokenPipeError, ConnectionResetError) as e:
                    self.close_connection = True  # the client went away mid-stream
                    log.debug("proxy: the client %s went away: %s", self.client_address, e)
                except Exception as e:
                    if not proxy.stopping.is_set():
                        raise
                    # the proxy stops: its upstream answer was closed under it (what that raises
                    # depends on where the read was), or it was not to be sent at all
                    self._stopped(api, e)

        def _send_upstream(self, api: Api, send: Callable[[], None]) -> None:
            try:
                send()
            except httpx.HTTPError as e:
                if proxy.stopping.is_set():
                    raise  # an answer the stop cut, not the upstream
                if self._started:
                    self._broke_off(api, e)
                elif isinstance(e, httpx.TimeoutException):
                    log.warning(
                        "proxy: the upstream %s did not answer in time (504 to the client)", proxy.upstreams[api]
                    )
                    self._reply(
                        504, error_body(api, 504, f"the upstream {proxy.upstreams[api]} did not answer in time")
                    )
                else:
                    log.warning(
                        "proxy: the upstream %s cannot be reached (502 to the client): %s", proxy.upstreams[api], e
                    )
                    self._reply(
                        502, error_body(api, 502, f"the upstream {proxy.upstreams[api]} cannot be reached: {e}")
                    )

        def _broke_off(self, api: Api, e: httpx.HTTPError) -> None:
            """The upstream broke off (or stalled in) an answer the client was being sent: a stream
            ends with its API's error event (which the SDKs raise), anything else with the
            connection; said on stderr either way."""
            late = isinstance(e, httpx.TimeoutException)
            status = 504 if late else 502
            why = (
                f"stopped answering for {proxy.client.timeout.read:g} s"
                if late
                else f"broke off its answer: {str(e) or type(e).__name__}"
            )
            log.warning("proxy: the upstream %s %s (the client's answer ends there)", proxy.upstreams[api], why)
            self._end_with(api, status, f"the upstream {proxy.upstreams[api]} {why}")

        def _stopped(self, api: Api, e: Exception) -> None:
            """The proxy stops (``Proxy.stop``) with this request's answer not relayed whole, or
            not yet sent upstream: a 503 in the API's shape if nothing was sent, else a stream ends
            with its API's error event (a client reading events would take a stream cut short
            for a whole one); said on stderr."""
            why = "the proxy stopped (SIGTERM or Ctrl-C) before the answer ended"
            log.warning("proxy: %s: %s (%s)", _keyless(self.path), why, str(e) or type(e).__name__)
            if not self._started:
                self.close_connection = True
                with suppress(OSError):
                    self._reply(503, error_body(api, 503, why))
                return
            self._end_with(api, 503, why)

        def _end_with(self, api: Api, status: int, why: str) -> None:
            """End an answer begun: a stream at an event's end with its API's error event saying
            ``why``, anything else with the connection."""
            self.close_connection = True
            if self._events is None:
                return
            try:
                self._events(stream_error(api, status, error_body(api, status, why)))
                self._end()
            except OSError:
                pass  # the client went away too

        def _upstream_headers(self) -> dict[str, str]:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            return {k: v for k, v in headers.items() if k.lower() != SESSION_HEADER.lower()}

        def _start(self, status: int, headers: Any, *, json_stream: bool = False) -> None:
            """Begin the client's answer with ``headers``, the upstream's (``json_stream``: a stream
            of events given as a JSON array, ``JsonArrayStream``: of Google's content type)."""
            self._started = True
            if status >= 400:
                with proxy._lock:
                    proxy.counts["upstream_errors"] += 1
            # the upstream's Date and Server, once each (send_response would add the proxy's too)
            self.log_request(status)
            self.send_response_only(status)
            left = {*HOP_HEADERS, "content-encoding", *(("content-type",) if json_stream else ())}
            for k, v in headers.multi_items():
                if k.lower() not in left:
                    self.send_header(k, v)
            if json_stream:
                self.send_header("Content-Type", "application/json; charset=UTF-8")
            if "date" not in headers:
                self.send_header("Date", self.date_time_string())
            if "server" not in headers:
                self.send_header("Server", self.version_string())
            # a 1xx, 204 or 304 answer has no body (RFC 9110 6.4.1): a chunk's end after it would be
            # read as the start of the next answer on the connection
            self._bodiless = status < 200 or status in (204, 304)
            # an HTTP/1.0 client knows no chunks: the body as it comes, its end the connection's
            self._chunked = not self._bodiless and self.request_version != "HTTP/1.0"
            if self._chunked:
                self.send_header("Transfer-Encoding", "chunked")
            elif not self._bodiless:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()

        def _chunk(self, data: bytes) -> None:
            if data and not self._bodiless:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data)
                self.wfile.flush()

        def _end(self) -> None:
            if self._array is not None and self._events is not None:  # the array a stream of events was
                self._chunk(self._array.end())
            if self._chunked:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _rounds(self, plan: Plan) -> None:
            """Upstream until the model answers without calling one of our tools."""
            d = dialect(plan.api, plan.original)
            streaming = _streamed(plan.api, self.path, plan.original)
            array = JsonArrayStream() if streaming and _json_array(plan.api, self.path) else None
            url = proxy.upstream_url(plan.upstream_api(), with_sse(self.path) if array else self.path)
            started = False
            offset = 0
            response_id: str | None = None
            # a stream of several rounds is one response to the client: a Responses stream's events
            # numbered as one response's, a chat stream's chunks one completion's
            one: Callable[[bytes], bytes] | None = array
            self._array = array
            if plan.api == "responses":
                one = SequenceNumbers()
            elif plan.api == "openai":
                one = OneCompletion()

            def send(chunk: bytes) -> None:
                self._chunk(one(chunk) if one is not None else chunk)

            for n in range(MAX_ROUNDS):
                last = n == MAX_ROUNDS - 1
                with (
                    proxy.client.stream("POST", url, headers=self._upstream_headers(), json=plan.sent()) as resp,
                    proxy.relay(resp),
                ):
                    if resp.status_code >= 400 or not streaming:
                        raw = resp.read()
                        proxy.whole(resp)
                        reply = _json_object(raw) if resp.status_code < 400 else None
                        if reply is not None and plan.envelope is not None:  # the answer in its envelope
                            reply = reply.get("response") if isinstance(reply.get("response"), dict) else {}
                        # no API's answer (a web page at the upstream's address): it goes back as it came
                        calls, message = d.calls(reply) if reply is not None else ([], {})
                        ours = [c for c in calls if c.name in plan.ours]
                        if not ours or last:
                            if started:  # an error after our rounds began: the stream says so, then ends
                                send(stream_error(plan.api, resp.status_code, raw))
                                self._end()
                                return
                            self._start(resp.status_code, resp.headers)
                            if resp.status_code < 400:  # (before the client has it: it may continue it)
                                proxy.relayed(plan, raw, streamed=False)
                            self._chunk(raw)
                            self._end()
                            return
                        self._check_client()  # gone while the model answered: no round more for it
                        proxy.run_ours(plan, ours, _text_of(plan.api, message), message.get("output"))
                        if plan.api == "anthropic":
                            plan = replace(plan, container=container_of(reply) or plan.container)
                    else:
                        if not started:
                            self._start(resp.status_code, resp.headers, json_stream=array is not None)
                            self._events = send  # whole events only: an error event may follow any
                            started = True
                        f = StreamFilter(
                            plan.api,
                            first_round=n == 0,
                            block_offset=offset,
                            response_id=response_id,
                            enveloped=plan.envelope is not None,
                        )
                        for event in sse_events(resp.iter_bytes()):
                            send(f.feed(event))
                        proxy.whole(resp)
                        response_id = f.response_id
                        ours = [c for c in f.calls() if c.name in plan.ours]
                        if not ours or last:
                            proxy.relayed(plan, b"".join(f.held), streamed=True)  # (its end is held)
                            for event in f.held:
                                send(event)
                            self._end()
                            return
                        self._check_client()
                        offset += f.sent_blocks
                        # the client has the text already: the exchange keeps our calls, with a
                        # Responses reply's items (spliced after the ones the client has, later) and
                        # an Anthropic reply's thinking, which its tool-use turn must start with, and
                        # its server tools' blocks (the model's next round reads what it searched)
                        proxy.run_ours(plan, ours, None, f.kept())
                        plan = replace(plan, container=f.container or plan.container)
                plan = proxy.next_round(plan, last=n + 1 == MAX_ROUNDS - 1)

        def _check_client(self) -> None:
            """Raise ``ConnectionResetError`` if the client closed its connection (an agent killed,
            an SDK's timeout): each round more is a model call billed for nobody. A client sends
            nothing while it waits for its answer, so anything readable is its end (or a next
            request pipelined, which is left to read)."""
            if not hasattr(select, "poll"):  # (Windows: not told; the answer's write finds it gone)
                return
            poll = select.poll()  # (not select's: no limit on the descriptor's number)
            poll.register(self.connection, select.POLLIN)
            try:
                # readable: a byte to peek at, or the end; the socket's timeout does not apply
                gone = bool(poll.poll(0)) and self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:  # reset
                gone = True
            if gone:
                raise ConnectionResetError("the client closed its connection before context_os's tools ran")

        def _forward(self, api: Api, raw: bytes | None, method: str | None = None, plan: Plan | None = None) -> None:
            """The request upstream as it is, the answer back as it comes. ``plan``'s answer (a
            Responses one kept as its chain's link) is kept as it goes and told to
            ``Proxy.relayed`` before the client has its end (a JSON body, a stream's last events),
            so that the client's next request, which may continue it, finds it."""
            method = method or ("POST" if raw is not None else "GET")
            url = proxy.upstream_url(api, self.path)
            with (
                proxy.client.stream(method, url, headers=self._upstream_headers(), content=raw) as resp,
                proxy.relay(resp),
            ):
                self._start(resp.status_code, resp.headers)
                streamed = resp.headers.get("content-type", "").startswith("text/event-stream")
                numbered = SequenceNumbers() if api == "responses" else None
                # the answer, kept whole when it is a response to keep; from its end on (its event
                # ending the stream, a JSON body's every part), held until it is kept
                kept: list[bytes] | None = (
                    [] if plan is not None and plan.went is not None and resp.status_code < 400 else None
                )
                held: list[bytes] = []
                tail = b""  # the end of what came before the part, where a mark may begin
                for part in resp.iter_bytes():
                    if kept is not None:
                        kept.append(part)
                        window = tail + part
                        tail = window[-_MARK_SPAN:]
                        if held or not streamed or any(m in window for m in _RESPONSE_ENDS):
                            held.append(part)
                            self._events = None
                            continue
                    self._chunk(part)
                    if numbered is not None:  # a Responses error event is numbered after the last event
                        numbered.follow(part)
                    # an error event may follow only a whole event
                    whole = streamed and part.replace(b"\r\n", b"\n").endswith(b"\n\n")
                    self._events = (lambda e, n=numbered: self._chunk(n(e) if n else e)) if whole else None
                proxy.whole(resp)
                if plan is not None and kept is not None:
                    proxy.relayed(plan, b"".join(kept), streamed=streamed)
                for part in held:
                    self._chunk(part)
                self._end()

    return Handler


_RESPONSE_ENDS = tuple(e.encode() for e in RESPONSE_ENDS)
"""The events ``_forward`` holds from (a Responses stream's end, carrying its response)."""
_MARK_SPAN = max(len(m) for m in _RESPONSE_ENDS)


def _cut_off(resp: httpx.Response) -> None:
    """Wake the thread reading ``resp`` with an error (closing the response from another thread
    does not: its read goes on waiting): its socket shut down, the read ends."""
    _shut(resp.extensions.get("network_stream"))


def _shut(stream: Any) -> None:
    """Shut down the socket of an httpcore network stream (None, or one without a socket: nothing)."""
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _pool_streams(client: httpx.Client) -> list[Any]:
    """The network streams of the connections ``client`` holds, in use or idle (a request waiting
    for its answer's headers holds one that no response names yet)."""
    transports = [getattr(client, "_transport", None), *(getattr(client, "_mounts", None) or {}).values()]
    found = []
    for transport in transports:  # its own, and one per proxy (HTTPS_PROXY)
        pool = getattr(transport, "_pool", None)
        for conn in list(getattr(pool, "connections", None) or ()):
            inner = getattr(conn, "_connection", None)
            stream = getattr(inner, "_network_stream", None)
            if stream is not None:
                found.append(stream)
    return found


MAX_FORKS = 16
"""How many conversations that start alike (and differ after) a request is tried against."""


def _departing(session: Session) -> Callable[[int, int, Callable[[int], str], Callable[[int], Incoming]], None]:
    """What a keyless session's ingest calls when a request's messages no longer start with its
    history (``Ingest.on_rewrite``). A client rewriting its own conversation changes what it
    gave (an old tool output elided or cleared in place), not what the model said (its text
    and calls: a reasoning block dropped is no change), and keeps the newest message the session
    holds; anything else is another conversation that started alike (two runs of one task whose
    first replies were the same, then one read another file): another session
    (``AnotherConversation``), named by where and how it first differs, the same at each of its
    requests; one holding only the start of the history (another run, behind), by its length."""

    def check(start: int, count: int, hash_at: Callable[[int], str], translate: Callable[[int], Incoming]) -> None:
        view = session.view
        if not view.visible:
            return
        if start >= count:  # all of it held, and less than the session holds
            raise AnotherConversation(_fork(session.id, f"{count}:"))
        # what the model said, in the places the session holds it, is what the client sends there:
        # every reply, not the first that differs only (another run may differ first in what its
        # tools gave, then in what its model said about it)
        for k in range(start, min(count, len(view.visible))):
            held = view.entries[view.visible[k]]
            said = held["role"] != "assistant" or hash_at(k) == held["h"]
            if not said and not _same_reply(held, _as_held(session, translate(k))):
                raise AnotherConversation(_fork(session.id, f"{start}:{hash_at(start)}"))
        newest = view.entries[view.visible[-1]]["h"]
        if any(hash_at(k) == newest for k in range(count - 1, start - 1, -1)):
            return  # its own history, rewritten
        raise AnotherConversation(_fork(session.id, f"{start}:{hash_at(start)}"))

    return check


def _as_held(session: Session, m: Incoming) -> Incoming:
    """A message given as the session would hold it: cut to the cap as ``Ingest`` cuts it, with the
    secrets its redactor takes out taken out (a reply that repeated a key is held without it)."""
    ingest = session.ingest
    m = dict(m)  # type: ignore[assignment]
    cap = ingest.view.policy.max_message_chars
    text = m.get("text")
    if ingest.cut_over_cap and isinstance(text, str) and len(text) > cap:
        m["text"] = cut_text(text, cap)
    return ingest._scrub(m)[0]


def _same_reply(held: Mapping[str, Any], given: Mapping[str, Any]) -> bool:
    """Whether a message given is the model's reply the session holds: its role, text and calls,
    compared as JSON (Python's ``==`` takes ``true`` for ``1`` and ``1.0`` for ``1`` in a call's
    parsed arguments: two replies that differ there are two conversations)."""

    def said(m: Mapping[str, Any]) -> str:
        calls = [(c.get("id"), c.get("name"), c.get("arguments")) for c in m.get("tool_calls") or ()]
        return json.dumps([m.get("role"), m.get("text"), calls], sort_keys=True, default=repr)

    return said(held) == said(given)


def _hidden_doc(session_id: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The document that keeps ``session_id``'s exchanges with our tools (``_rows``) in the store."""
    return hashed(
        {"id": f"{_HIDDEN}{session_id}", "kind": "proxy_hidden", "content": rows, "meta": {"session": session_id}}
    )


def _stored_hidden(store: Store, session_id: str, newest_eviction: int) -> list[Hidden]:
    """The exchanges with our tools a proxy kept for ``session_id`` (``Proxy._keep_hidden``);
    none, and the document erased, when an eviction (the newest's transaction:
    ``newest_eviction``) came after it was written (they may hold copies of what was erased: a
    ``lines`` or ``recall`` output is stored text)."""
    kept = store.get(f"{_HIDDEN}{session_id}")
    if kept is None or kept.doc is None:
        return []
    if newest_eviction > kept.tx_id:
        store.submit([Evict(kept.id)])
        return []
    rows = kept.doc.get("content")
    return [
        Hidden(r["at"], r["prefix"], list(r["messages"]))
        for r in rows or []
        if isinstance(r, Mapping) and isinstance(r.get("at"), int) and isinstance(r.get("messages"), list)
    ]


def _newest_eviction(store: Store) -> int:
    """The transaction of the store's newest eviction (its tombstone), -1 for none."""
    return max((t.tx_id for t in store.find("tombstone")), default=-1)


def _places(hidden: list[Hidden]) -> list[tuple[int, str]]:
    """Where a conversation's exchanges with our tools stand (a new one is a new place)."""
    return [(h.at, h.prefix) for h in hidden]


def _rows(hidden: list[Hidden]) -> list[dict[str, Any]]:
    """Exchanges with our tools as the store keeps them."""
    return [{"at": h.at, "prefix": h.prefix, "messages": h.messages} for h in hidden]


def _clean(conv: _Conversation) -> Callable[[Any], bool]:
    """Whether a JSON value holds nothing ``conv``'s session's redactor would take out (what
    holds something must go back as it came, so it is kept in memory only, never stored)."""
    redact = conv.hook.session.ingest.redact
    return lambda value: redact is None or not any(redact(t)[1] for t in _strings(value))


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    """An upstream's answer read as a JSON object; None if it is not one."""
    try:
        found = json.loads(raw)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _text_of(api: Api, message: Mapping[str, Any]) -> str | None:
    """The text of an assistant message (what the model said beside its calls)."""
    if api == "responses":
        parts = [p for i in message.get("output") or [] if i.get("type") == "message" for p in i.get("content") or []]
        return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "output_text") or None
    if api == "openai":
        content = message.get("content")
        return content if isinstance(content, str) and content else None
    if api == "gemini":
        parts = message.get("parts") or []
        return "".join(p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")) or None
    texts = [
        b.get("text", "") for b in message.get("content") or [] if isinstance(b, Mapping) and b.get("type") == "text"
    ]
    return "".join(texts) or None
