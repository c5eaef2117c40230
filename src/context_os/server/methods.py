"""The JSON-RPC methods: sessions, context assembly, tools, inspection, frames.

    session.open     {session, client?, harness?, workspace?, policy?}   → session state
    session.close    {session}                                  → forget it here, release its lease
    context.transform {session, client?, messages, system?}     → {messages, turn, tokens_assembled, ...}
    tools.list       {session}                                  → our tools, harness format
    tools.call       {session, client?, name, arguments}        → {output, is_error}
    inspect          {id, as_of?, tx?, with_docs?}              → versions
    frames.list      {session}                                  → one row per turn
    frame.verify     {session, turn}                            → the re-render check
    ping             {}                                         → {pong, version}
    status           {}                                         → open sessions, file trackers

Harnesses come from the one registry (harness/registry.py), frames from the one read model
(context/frames.py), tools from each session's one registry. A call that fails never leaves a
partial write behind: every method validates before it writes. Sessions may use only the
workspaces the server was started with. A session opened by a client that names itself
(``client``) is written by that client only: another is refused (``SessionBusy``).
"""

from __future__ import annotations

import json
import marshal
import operator
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import field_validator

from .. import __version__
from ..context.frames import frame_rows, get_frame, verify_frame
from ..context.mesh_tools import MeshTools
from ..context.policy import RetentionPolicy
from ..context.session import Session, close_sessions
from ..context.source_tools import SourceTools
from ..errors import ContextOSError, MalformedMessage, NotFound, PathDenied, SessionBusy, StateError
from ..files import FileTools, Trackers, Workspace
from ..harness.anthropic import AnthropicHook
from ..harness.base import ContextHook, renamed
from ..harness.registry import NAMES, Harness, harness
from ..sources.memory import MemoryScopes
from ..sources.recall import Recall, open_recall
from ..store.base import Store, Version
from ..times import parse_time
from .protocol import (
    CLOSE_WAIT,
    INVALID_PARAMS,
    MAX_REQUEST_BYTES,
    SESSION_NOT_OPEN,
    NoParams,
    Params,
    RpcError,
    RpcServer,
    log,
)

if TYPE_CHECKING:
    from ..mesh.agent import MeshAgent
    from ..sources.embed import Embedder

__all__ = ["Server"]


class _SessionParams(Params):
    session: str


def _a_client(value: str | None) -> str | None:
    if value is not None and not 0 < len(value) <= 200:
        raise ValueError("client must be a name of 1 to 200 characters (one per client: a random id, say)")
    return value


class _OpenParams(Params):
    session: str
    client: str | None = None
    harness: str = "openai"
    workspace: str | None = None
    policy: dict[str, Any] | None = None
    recall: bool = False
    memory: bool = False
    mesh: bool = False
    cut: bool = False
    """A message text over the policy's ``max_message_chars`` is cut to it, with a note, rather
    than refused: a client that cannot send less (Pi's whole conversation at every call)."""

    _client = field_validator("client")(_a_client)

    @field_validator("harness")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in NAMES:
            raise ValueError(f"unknown harness {name!r}; known: {', '.join(NAMES)}")
        return name


class _TransformParams(Params):
    session: str
    client: str | None = None
    messages: list[Any]
    system: str | list[dict[str, Any]] | None = None
    _client = field_validator("client")(_a_client)


class _CallParams(Params):
    session: str
    client: str | None = None
    name: str
    arguments: dict[str, Any] | str = {}
    _client = field_validator("client")(_a_client)


class _InspectParams(Params):
    id: str
    as_of: str | int | None = None
    tx: int | None = None
    with_docs: bool = False

    @field_validator("tx")
    @classmethod
    def _a_transaction(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError("tx must be a transaction id (0 or more)")
        return value


class _NextRequestParams(Params):
    timeout: float = 0.0

    @field_validator("timeout")
    @classmethod
    def _bounded(cls, value: float) -> float:
        if not 0 <= value <= 30:
            raise ValueError("timeout must be 0 to 30 seconds (poll again for longer)")
        return value


class _AnswerParams(Params):
    requestId: str  # noqa: N815 - the wire's name
    text: str
    error: bool = False


class _VerifyParams(Params):
    session: str
    turn: int


def _version_row(v: Version, with_doc: bool) -> dict[str, Any]:
    doc = v.doc or {}
    row: dict[str, Any] = {
        "valid_time": v.valid_time,
        "tx_id": v.tx_id,
        "tx_time": v.tx_time,
        "deleted": v.deleted,
        "content_hash": doc.get("content_hash"),
        "meta_hash": doc.get("meta_hash"),
        "object_hash": doc.get("object_hash"),
    }
    if with_doc:
        row["doc"] = v.doc
    return row


_PACKING = 2
"""``marshal``'s format 2: a list's bytes are its length, then its items' bytes one after the
other, each the same wherever it stands (no back-references, which later formats make), and each
value's type is in them: ``true``, ``1`` and ``1.0`` (one value to Python's ``==``) pack apart."""
_LIST_HEAD = 5
"""The bytes of a packed list before its first item's (a type byte, the length)."""


@dataclass
class _Open:
    """One open session: its harness and hook."""

    harness: Harness
    hook: ContextHook[Any]
    client: str | None = None
    """The client that opened it (``session.open {client}``): the one that may write it."""
    tracked: Workspace | None = None
    """The workspace whose file tracker it holds, given back when it is closed or opened anew."""
    wire: list[Any] = field(default_factory=list)
    """The messages of the last ``context.transform``, as JSON, and what they decoded to: a
    message that comes again equal (the client's history, sent whole every time) is passed to
    the hook as the same object, which the hook knows it took in already (``decode``)."""
    packed: bytes = marshal.dumps([], _PACKING)
    """``wire`` packed (``_PACKING``)."""
    decoded: list[Any] = field(default_factory=list)

    def decode(self, messages: list[Any]) -> list[Any]:
        """The harness's messages for ``messages``: the unchanged first ones are the objects of
        the last call, only the others are decoded (and hashed, and compared by the hook)."""
        try:
            packed = marshal.dumps(messages, _PACKING)
        except ValueError:  # over marshal's 2,000 levels: JSON may nest deeper (Python 3.13 parses it)
            raise RecursionError("nested too deeply") from None
        same = _equal_prefix(messages, packed, self.wire, self.packed)
        try:
            decoded = self.decoded[:same] + self.harness.decode(messages[same:])
        except MalformedMessage as e:
            raise renamed(e, None if e.index is None else e.index + same, e.field) from None
        self.wire, self.packed, self.decoded = messages, packed, decoded
        return decoded


def _equal_prefix(a: list[Any], packed_a: bytes, b: list[Any], packed_b: bytes) -> int:
    """How many of the first messages of ``a`` and ``b`` (packed: ``_PACKING``) are the same JSON
    values, type for type: a message changed only from ``true`` to ``1`` is a change (one from
    ``1`` to ``1.0`` is decoded again too, and the hook finds its hash unchanged: the store hashes
    integral floats as integers).
    A history that goes on from the last call's whole, the usual case, is one comparison of their
    bytes (the items' bytes follow one another: the one's begin with the other's exactly when its
    first items are the other's); else Python's ``==`` finds the first that differs, and the
    equal ones before are checked type for type."""
    if packed_a.startswith(memoryview(packed_b)[_LIST_HEAD:], _LIST_HEAD):
        return len(b)
    if all(map(operator.eq, a, b)):
        same = min(len(a), len(b))
    else:
        same = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    if marshal.dumps(a[:same], _PACKING) == marshal.dumps(b[:same], _PACKING):
        return same
    return next(
        i
        for i, (x, y) in enumerate(zip(a, b, strict=False))
        if marshal.dumps(x, _PACKING) != marshal.dumps(y, _PACKING)
    )


def _busy(session_id: str, holder: str | None, client: str | None) -> SessionBusy:
    """Another client of this server writes ``session_id``: each of two clients sending its own
    history would read as a rewrite of the other's, at every call."""
    held = f"client {holder!r}" if holder is not None else "a client that gave no client name"
    you = f"client {client!r}" if client is not None else "a client that gives no client name"
    return SessionBusy(
        f"session {session_id!r} is open on this server for {held}, not for {you}: a session has one writer. "
        "Open a session of your own (another session id), or, if that client is gone, session.close "
        f'{{"session": {json.dumps(session_id)}}} first; each client names itself with the client parameter of '
        "session.open, context.transform and tools.call"
    )


class Server(RpcServer):
    """Answers JSON-RPC requests against one store."""

    def __init__(
        self,
        store: Store,
        *,
        workspaces: Sequence[str | os.PathLike[str]] = (),
        max_request_bytes: int = MAX_REQUEST_BYTES,
        embedder: str | Embedder | None = "auto",
        mesh: MeshAgent | None = None,
        recall: Recall | None = None,
        track: bool = True,
    ):
        """``track``: a watchdog tracker runs for each workspace a session opens (one per
        workspace, shared): files the agent touched get a new version when they change on disk,
        which the session marks stale. ``embedder``: what recall embeds with (``open_recall``;
        None: keyword only), for the sessions opened with ``recall``; the recall engine is made
        for the first of them.
        ``mesh``: the agent's started mesh peer, for the sessions opened with ``mesh`` (the
        server does not close it: whoever started it does). ``recall``: a recall engine made
        already (the mesh's memory searches with it); the server closes it."""
        self.store = store
        self.mesh = mesh
        self.embedder = embedder
        self.recall: Recall | None = recall
        self.workspaces: tuple[Path, ...] = tuple(Workspace(w).root for w in workspaces)
        """The directories sessions may use as their workspace (or a directory inside one): fixed
        by whoever starts the server, never by a client."""
        self.sessions: dict[str, _Open] = {}
        self.trackers = Trackers(store) if track else None
        self.stopping = threading.Event()
        """Set by ``stop``: a ``mesh.next_request`` that waits answers at once."""
        super().__init__(
            {
                "session.open": (_OpenParams, self._session_open),
                "session.close": (_SessionParams, self._session_close),
                "context.transform": (_TransformParams, self._transform),
                "tools.list": (_SessionParams, self._tools_list),
                "tools.call": (_CallParams, self._tools_call),
                "inspect": (_InspectParams, self._inspect),
                "frames.list": (_SessionParams, self._frames_list),
                "frame.verify": (_VerifyParams, self._frame_verify),
                "ping": (NoParams, self._ping),
                "status": (NoParams, self._status),
                "mesh.status": (NoParams, self._mesh_status),
                "mesh.next_request": (_NextRequestParams, self._mesh_next_request),
                "mesh.answer": (_AnswerParams, self._mesh_answer),
            },
            max_request_bytes=max_request_bytes,
            # its wait (up to 30 s) is on the mesh's own queue: other clients' calls go on meanwhile
            unlocked=frozenset({"mesh.next_request", "status"}),
        )

    # -- methods ---------------------------------------------------------------------------------

    def _open(self, session_id: str) -> _Open:
        found = self.sessions.get(session_id)
        if found is None:
            raise self._not_open(session_id)
        return found

    def _writer(self, session_id: str, client: str | None) -> _Open:
        """The open session, to write, if ``client`` is the one that opened it (None: a client
        that gave no name)."""
        found = self.sessions.get(session_id)
        if found is None:
            raise self._not_open(session_id, client)
        if client != found.client:
            raise _busy(session_id, found.client, client)
        return found

    def _not_open(self, session_id: str, client: str | None = None) -> RpcError:
        """Why a session method cannot run: the session is not open on this server. One the store
        holds was opened before (this server restarted, or closed it): the error says so, and
        gives what ``session.open`` takes to resume it (``data.open``; with the ``client`` the
        call named, which the session must be opened for to be written by it), since only the
        client knows the sources (recall, memory, mesh) it opened it with."""
        try:
            stored = self.store.doc(f"session:{session_id}")
        except ContextOSError:
            stored = None
        if stored is None:
            return RpcError(
                SESSION_NOT_OPEN,
                f"session {session_id!r} is not open on this server: call session.open first",
                {"session": session_id, "stored": False},
            )
        content = stored.get("content") or {}
        params: dict[str, Any] = {"session": session_id}
        if client is not None:
            params["client"] = client
        if content.get("harness") in NAMES:
            params["harness"] = content["harness"]
        if content.get("workspace"):
            params["workspace"] = content["workspace"]
        return RpcError(
            SESSION_NOT_OPEN,
            f"session {session_id!r} is in the store but not open on this server (it was restarted, or the "
            f"session was closed): call session.open {json.dumps(params)} again, with the recall, memory and "
            "mesh options you opened it with, then repeat this call",
            {"session": session_id, "stored": True, "open": params},
        )

    def _granted(self, workspace: str) -> Workspace:
        """The workspace a client asked for, if it is one the server was started with (or lies
        inside one); the client never widens what the server's owner granted."""
        ws = Workspace(workspace)
        if not any(ws.root == root or root in ws.root.parents for root in self.workspaces):
            granted = ", ".join(map(str, self.workspaces)) or "none"
            raise PathDenied(
                f"workspace {workspace!r} was not granted to this server (granted: {granted}); "
                "whoever starts it grants directories with --workspace DIR"
            )
        return ws

    def _session_open(self, p: _OpenParams) -> dict[str, Any]:
        # everything that can refuse does so before Session.open writes
        policy = RetentionPolicy.from_dict(p.policy) if p.policy is not None else None
        ws = self._granted(p.workspace) if p.workspace else None
        stored = self.store.doc(f"session:{p.session}")
        if stored is not None:
            was = stored["content"].get("harness")
            if was not in (None, "generic", p.harness):
                raise StateError(f"session {p.session!r} was recorded with harness {was!r}, not {p.harness!r}")
        if p.mesh and self.mesh is None:
            raise StateError("this server runs no mesh agent: start it with ctxos serve --mesh NAME")
        current = self.sessions.get(p.session)
        if current is not None and current.client != p.client:
            raise _busy(p.session, current.client, p.client)
        if current is not None and current.harness.name != p.harness:
            raise StateError(f"session {p.session!r} is open with harness {current.harness.name!r}")
        if current is None or policy is not None:
            # every session redacts secrets; with a workspace, with the workspace's redactor, and
            # the file tools (read, write, edit, ls, find, grep)
            session = Session.open(
                self.store,
                p.session,
                harness=p.harness,
                workspace=str(ws.root) if ws else None,
                policy=policy,
                redact=ws.redact if ws else True,
            )
            h = harness(p.harness)
            # memory: the global scope, and the project scope of a workspace the user trusted
            # (never on the client's word); the file tools may read its topic files
            memory = MemoryScopes(ws.root if ws else None) if p.memory else None
            if ws is not None and memory is not None:
                ws = Workspace(ws.root, allow_outside=[d for d in memory.dirs() if not d.is_relative_to(ws.root)])
            tracker = self.trackers(ws) if self.trackers is not None and ws is not None else None
            tracked = tracker.workspace if tracker is not None else None
            try:
                files = FileTools(session, ws, tracker=tracker) if ws else None
                hook = h.hook(session, files=files)
                hook.every_message = True  # a client sends its whole history at every call: a change anywhere is seen
                if p.recall or p.memory:
                    if p.recall and self.recall is None:
                        self.recall = open_recall(self.store, self.embedder)
                    recall = self.recall if p.recall else None
                    SourceTools(session, recall=recall, memory=memory).register(hook.registry)
                if p.mesh and self.mesh is not None:
                    MeshTools(session, self.mesh).register(hook.registry)
            except BaseException:  # (what it took, given back: the tracker's hold, the session's lease)
                self._release(tracked)
                session.close()
                raise
            replaced = current
            current = self.sessions[p.session] = _Open(h, hook, p.client, tracked)
            if replaced is not None:  # (its Session revoked by the new one's lease)
                self._release(replaced.tracked)
        s = current.hook.session
        s.ingest.cut_over_cap = p.cut
        return {
            "session": s.id,
            "client": current.client,
            "harness": current.harness.name,
            "workspace": s.workspace,
            "turn": s.view.turn,
            "messages": len(s.view.visible),
            "created": stored is None,
            "policy": s.view.policy.to_dict(),
            "sources": [f.source.name for f in s.feeds],
        }

    def _the_mesh(self) -> MeshAgent:
        if self.mesh is None:
            raise StateError("this server runs no mesh agent: start it with ctxos serve --mesh NAME")
        return self.mesh

    def _mesh_status(self, p: NoParams) -> dict[str, Any]:
        return self._the_mesh().status()

    def _mesh_next_request(self, p: _NextRequestParams) -> dict[str, Any]:
        """The oldest request from a peer, now the agent's to answer (null: none waits; with
        ``stopping``: the server stops, ask no more)."""
        req = self._the_mesh().next_request(timeout=p.timeout, cancel=self.stopping)
        if req is None:
            return {"request": None, "stopping": True} if self.stopping.is_set() else {"request": None}
        return {
            "request": {
                "requestId": req.request_id,
                "peerId": req.peer,
                "agentName": req.peer_name,
                "message": req.message,
                "text": req.text,
                "memory": req.context,
                "object": req.object_id,
                "secondsLeft": round(max(0.0, req.deadline - time.monotonic()), 1),
            }
        }

    def _mesh_answer(self, p: _AnswerParams) -> dict[str, Any]:
        req = self._the_mesh().queue.active
        if req is None or req.request_id != p.requestId:
            raise StateError(
                f"request {p.requestId!r} is not the one the agent holds (answered, timed out, given up by its "
                "sender, or never taken with mesh.next_request)"
            )
        req.answer(p.text, error=p.error)
        return {"requestId": p.requestId, "answered": True}

    def _session_close(self, p: _SessionParams) -> dict[str, Any]:
        found = self.sessions.pop(p.session, None)
        if found is not None:
            found.hook.session.close()  # another process may open it now
            self._release(found.tracked)
        return {"session": p.session, "closed": found is not None}

    def _release(self, tracked: Workspace | None) -> None:
        """Give back a session's hold of its workspace's tracker: the last session of a
        workspace to close stops it (``Trackers.release``)."""
        if tracked is not None and self.trackers is not None:
            self.trackers.release(tracked)

    def stop(self) -> None:
        """The server stops (SIGTERM): the waits that run (``mesh.next_request``, up to 30 s, and
        a ``mesh_send`` tool call waiting for a peer's answer, up to 60 s) end at once, and no
        other begins. Safe in a signal handler of the serving thread."""
        self.stopping.set()
        if self.mesh is not None:
            self.mesh.interrupt()

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """Close every open session (their leases go back), the recall engine and the file
        trackers, once the call that runs (another HTTP client's) has finished: waited for at most
        ``wait`` seconds, and at most as long for the sessions (all at once: a store that hangs);
        a call asked meanwhile or later answers that the server is stopping. The store stays open."""
        self.stop()
        with self.quiesced(wait):
            if self.trackers is not None:
                self.trackers.close()
            if self.recall is not None:
                self.recall.close()
                self.recall = None
            close_sessions([o.hook.session for o in self.sessions.values()], wait)
            self.sessions.clear()

    def _transform(self, p: _TransformParams) -> dict[str, Any]:
        o = self._writer(p.session, p.client)
        messages = o.decode(p.messages)
        result: dict[str, Any] = {}
        if o.harness.system_apart:
            assert isinstance(o.hook, AnthropicHook)
            request = o.hook.transform_request(messages, system=p.system)
            result["messages"] = request["messages"]
            if "system" in request:
                result["system"] = request["system"]
        elif p.system is not None:
            raise RpcError(
                INVALID_PARAMS,
                f"invalid params: system: only the anthropic harness takes a separate system prompt; "
                f"for {o.harness.name} put it in messages",
            )
        else:
            result["messages"] = o.harness.encode(o.hook.transform_context(messages))
        ingest = o.hook.session.ingest
        cut, ingest.cuts = ingest.cuts, []
        for at, size in cut:
            log.warning(
                "session %s: message %d is %s characters, over the %s one message keeps: held cut to them, with a note",
                p.session,
                at,
                f"{size:,}",
                f"{ingest.view.policy.max_message_chars:,}",
            )
        a = o.hook.last
        assert a is not None
        result.update(
            turn=a.turn,
            tokens_assembled=a.tokens,
            tokens_full=a.tokens_full,
            frame_id=a.frame_id,
            new=a.sync.new,
            rewritten=a.sync.rewritten,
        )
        return result

    def _tools_list(self, p: _SessionParams) -> list[Any]:
        o = self._open(p.session)
        return o.harness.tool_json(o.hook.tools)

    def _tools_call(self, p: _CallParams) -> dict[str, Any]:
        o = self._writer(p.session, p.client)
        if not o.hook.handles(p.name):
            raise RpcError(
                INVALID_PARAMS, f"invalid params: name: {p.name!r} is not a context_os tool (see tools.list)"
            )
        output = o.hook.call_tool(p.name, p.arguments)
        try:
            parsed = json.loads(output)
        except ValueError:
            parsed = None
        # a failure is ``{"error": "…", "type": …}``; a mesh answer carries the seed's
        # ``"error": false`` when the peer answered and ``true`` when it refused
        return {"output": output, "is_error": isinstance(parsed, dict) and bool(parsed.get("error"))}

    def _inspect(self, p: _InspectParams) -> dict[str, Any]:
        if p.as_of is not None or p.tx is not None:
            # parsed as the CLI parses it: InputError (its own code) if it is not a time
            vt = parse_time(p.as_of, "as_of") if p.as_of is not None else None
            v = self.store.get(p.id, vt, p.tx)
            if v is None:
                when = [f"at {p.as_of}"] if p.as_of is not None else []
                known = [f"as of tx {p.tx}"] if p.tx is not None else []
                raise NotFound(" ".join([p.id, "did not exist", *when, *known]))
            return {"id": p.id, "version": _version_row(v, True)}
        versions = self.store.history(p.id, with_docs=True)
        if not versions:
            raise NotFound(f"no object {p.id!r}")
        return {"id": p.id, "versions": [_version_row(v, p.with_docs) for v in versions]}

    def _frames_list(self, p: _SessionParams) -> list[dict[str, Any]]:
        return [r.to_dict() for r in frame_rows(self.store, p.session)]

    def _frame_verify(self, p: _VerifyParams) -> dict[str, Any]:
        check = verify_frame(self.store, get_frame(self.store, p.session, p.turn))
        return {
            "frame_id": check.frame_id,
            "ok": check.ok,
            "recorded_hash": check.recorded_hash,
            "rendered_hash": check.rendered_hash,
            "problems": check.problems,
            "evicted": check.evicted,
            "checked": check.checked,
        }

    def _ping(self, p: NoParams) -> dict[str, Any]:
        return {"pong": True, "version": __version__}

    def _status(self, p: NoParams) -> dict[str, Any]:
        """The sessions open on this server and the file trackers of their workspaces (with their
        latest errors: a watch that failed, a workspace gone)."""
        sessions = [
            {
                "session": sid,
                "client": o.client,
                "harness": o.harness.name,
                "workspace": o.hook.session.workspace,
                "turn": o.hook.session.view.turn,
            }
            for sid, o in list(self.sessions.items())
        ]
        return {
            "version": __version__,
            "store": self.store.url,
            "sessions": sessions,
            "trackers": self.trackers.status() if self.trackers is not None else [],
            "mesh": self.mesh.name if self.mesh is not None else None,
            "stopping": self.stopping.is_set(),
        }
