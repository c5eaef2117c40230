"""``ctxos mcp``: context_os as an MCP server, for agents that speak the Model Context Protocol.

Built on the official ``mcp`` SDK's low-level server, so the tools are context_os's own registry
(one schema, one dispatcher: context/tools.py), not a second copy. An MCP client keeps its own
transcript: context_os does not assemble what its model sees. What it gets is the store: files
read as versioned objects (a later read says when the file changed), any object's history at any
time, every recorded frame of every session, recall over everything stored, and memory.

Tools: ``read(path)``, ``activate(id)`` (the object's content, as text), ``deactivate(id)``,
``lines(id, start?, end?)`` (lines of an object's text: what ``activate`` cut from a long one),
``inspect(id, as_of?)``, ``frames(session?, turn?)``, and with recall / memory on, ``recall`` and
``remember``. What the agent reads and activates is recorded in one session (``--session``), so
``ctxos frames`` and ``ctxos objects inspect`` show it like any other.

Resources: ``context-os://frame/{session}/{turn}`` (a recorded frame re-rendered from the store,
verified against its hash) and ``context-os://object/{id}@{version}`` (one version of an object,
by its 1-based number in the object's history, or ``latest``).

Tool failures (a bad argument, a path outside the workspace, an unknown id) come back as tool
results with ``isError`` (the model reads them); an unknown tool or resource is a protocol error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from ..context.frames import FrameRow, frame_rows, get_frame, verify_frame
from ..context.load import version_row
from ..context.session import HISTORY_HINT, OBJECT_IDS_HINT, Session
from ..context.source_tools import SourceTools
from ..context.timeline import session_page, sessions_newest_first, turn_rows
from ..context.tools import Tool, ToolRegistry, context_tools, object_schema
from ..errors import ContextOSError, InputError, NotFound, StateError
from ..files import FileTools, FileTracker, Workspace
from ..files.file_tools import ID_HINT
from ..times import parse_time
from .protocol import CLOSE_WAIT, when_done
from .transports import HEADER_SECONDS, MAX_CONNECTIONS

if TYPE_CHECKING:
    from ..sources.memory import MemoryScopes
    from ..sources.recall import Recall
    from ..store.base import Store

__all__ = ["FRAME_URI", "MAX_CONNECTIONS", "OBJECT_URI", "ContextOsMcp", "http_protocol"]

log = logging.getLogger("context_os.server.mcp")

FRAME_URI = "context-os://frame/{session}/{turn}"
OBJECT_URI = "context-os://object/{id}@{version}"
LISTED_FRAMES = 50
"""How many frames ``resources/list`` names (the newest; any other is read by its URI)."""
_ID_LIKE = re.compile(r"[a-z]+:")
"""What a document id starts with (``file:``, ``frame:``, ``session:``, …), where a path does not."""
_NUMBER = re.compile(r"[0-9]{1,18}")
"""A turn or version number in a resource URI: ASCII digits (``str.isdigit`` takes ``²`` and
``١`` too, which ``int`` refuses or reads), few enough for ``int`` and the store."""
LISTED_SESSIONS = 50
"""How many sessions ``frames`` without a session names (the most recently updated)."""
FRAMES_NEXT = "this session records what you read, no model calls: frames(session) lists a session's turns"
TEXT_LIMIT = 200_000
"""The most characters of one object ``read`` or ``activate`` returns (the rest: ``inspect``)."""
STOPPING = "the MCP server is stopping: this call was not run"


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, indent=1)


def _cut(text: str) -> tuple[str, str | None]:
    if len(text) <= TEXT_LIMIT:
        return text, None
    note = f"the first {TEXT_LIMIT:,} of {len(text):,} characters; lines(id, start, end) shows any lines"
    return text[:TEXT_LIMIT], note


class ContextOsMcp:
    """The tools and resources of one MCP server over ``store``, recording in one session."""

    def __init__(
        self,
        store: Store,
        *,
        session: str,
        workspace: str | Path | None = None,
        recall: Recall | None = None,
        memory: MemoryScopes | None = None,
        track: bool = True,
    ):
        """``track``: with a workspace, a watchdog tracker gives the files the agent touched a
        new version when they change on disk."""
        self.store = store
        ws = Workspace(workspace) if workspace is not None else None
        if ws is not None and memory is not None:
            # read reaches the memory scopes' topic files, as remember tells the model to read them
            ws = Workspace(ws.root, allow_outside=[d for d in memory.dirs() if not d.is_relative_to(ws.root)])
        _refuse_another_harness(store, session)
        self.session = Session.open(store, session, harness="mcp", workspace=str(ws.root) if ws else None)
        self.tracker = FileTracker(store, ws).start() if ws is not None and track else None
        self.files = FileTools(self.session, ws, tracker=self.tracker) if ws is not None else None
        self.sources = (
            SourceTools(self.session, recall=recall, memory=memory, auto_recall=False, assembled=False)
            if recall or memory
            else None
        )
        self.registry = self._registry()
        self._lock = threading.Lock()
        """The session has one writer: tool calls run one at a time."""
        self.closing = threading.Event()
        """Set when ``close`` begins: a tool call asked from then on is not run."""

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """Stop the tracker and close the session (its lease goes back), once the tool call that
        runs has finished (waiting at most ``wait`` seconds); a call asked meanwhile or later is
        not run, and answers an error saying so. Ctrl-C during that wait (asked again) ends the
        wait, not the clean-up: the session still closes (its lease would otherwise stay taken
        until it expires)."""
        self.closing.set()
        with when_done(self._lock, wait, "closing", "the tool call", log):
            if self.tracker is not None:
                self.tracker.stop()
            self.session.close()

    def _registry(self) -> ToolRegistry:
        """The tools, each of whose errors the model reads in terms of these tools (``_hints``)."""
        tools = ToolRegistry()
        recall = self.sources is not None and self.sources.recall_engine is not None
        hints = {
            HISTORY_HINT: "frames(session) shows what a session's model was shown"
            + (", recall(query) finds what was said" if recall else ""),
            OBJECT_IDS_HINT: "ids come from read, recall and inspect",
            ID_HINT: "file:…, recall:…, memory:…, message:…, toolcall:…",
        }
        for tool in self._tools():
            tools.register(tool.with_run(_in_terms_of(tool.run, hints)))
        return tools

    def _tools(self) -> ToolRegistry:
        mine = ToolRegistry()
        if self.files is not None:
            mine.register(Tool("read", READ_DESCRIPTION, READ_SCHEMA, self.read))
        mine.register(Tool("activate", ACTIVATE_DESCRIPTION, ID_SCHEMA, self.activate))
        mine.register(Tool("deactivate", DEACTIVATE_DESCRIPTION, ID_SCHEMA, self.deactivate))
        # the context tool (with a workspace, as the file tools have it: a path too), in words of
        # a client that has no context of ours (no collapsed results' refs, nothing it changes)
        lines = (self.files.registry if self.files is not None else context_tools(self.session))["lines"]
        named = {"type": "string", "description": "An object id, or a file path" if self.files else "An object id"}
        params = {**lines.parameters, "properties": {**lines.parameters["properties"], "id": named}}
        mine.register(replace(lines, description=LINES_DESCRIPTION, parameters=params))
        mine.register(Tool("inspect", INSPECT_DESCRIPTION, INSPECT_SCHEMA, self.inspect))
        mine.register(Tool("frames", FRAMES_DESCRIPTION, FRAMES_SCHEMA, self.frames))
        if self.sources is not None:
            theirs = self.sources.register(ToolRegistry())
            for tool in theirs:
                mine.register(tool)
        return mine

    def call(self, name: str, arguments: dict[str, Any] | None) -> tuple[str, bool]:
        """Run one tool: (output text, whether it is an error)."""
        with self._lock:
            if self.closing.is_set():  # the session is closed, or about to be: nothing is written
                return json.dumps({"error": STOPPING, "type": "StateError"}), True
            out = self.registry.call(name, arguments or {})
        try:
            parsed = json.loads(out)
        except ValueError:
            return out, False
        return out, isinstance(parsed, dict) and set(parsed) == {"error", "type"}

    # --- the tools --------------------------------------------------------------------------------

    def read(self, path: str) -> dict[str, Any]:
        assert self.files is not None
        out = self.files.read(path)
        if "id" in out:
            doc = self.store.doc(out["id"])
            content = doc.get("content") if doc else None
        else:  # the store out of reach: no object, the text is the result's own (``recorded: false``)
            content = out.pop("content", None)
        text, note = _cut(_text_of(content))
        out["text"] = text
        if note:
            out["cut"] = note
        # what a harness's active pool would show of a large file: an MCP client has no such pool
        shown = out.pop("context_chars", None)
        if "active pool" in str(out.get("note", "")):
            out.pop("note")
        if shown is not None and "id" not in out:  # not recorded: the text is the first ``shown``
            out["cut"] = (
                f"the first {shown:,} of {out.get('chars', 0):,} characters (read again once the store answers)"
            )
        return out

    def activate(self, id: str) -> dict[str, Any]:
        out = self.files.activate(id) if self.files is not None else self.session.activate(id)
        oid = out.get("id", id)
        obj = self.session.view.objects.get(oid)
        if obj is not None:
            text, note = _cut(_text_of(obj.content))
            out["kind"] = obj.kind
            out["text"] = text
            if note:
                out["cut"] = note
            latest = (self.store.doc(oid) or {}).get("meta") or {} if obj.kind == "file" else {}
            if latest.get("missing"):  # the text is what the session showed, no longer the file's
                shown = obj.meta.get("version", "?")
                out["version"] = shown
                out["missing"] = (
                    f"the file is missing on disk (deleted or moved away) since version {latest.get('version', '?')}: "
                    f"this text is version {shown}, the last it had; inspect(id) lists every version"
                )
        return out

    def deactivate(self, id: str) -> dict[str, Any]:
        return self.files.deactivate(id) if self.files is not None else self.session.deactivate(id)

    def inspect(self, id: str, as_of: str | int | None = None) -> dict[str, Any]:
        id = self._object_id(id)
        if as_of is not None:
            v = self.store.get(id, parse_time(as_of, "as_of"))
            if v is None or v.doc is None:
                raise NotFound(f"{id} did not exist at {as_of}")
            return {"id": id, "as_of": as_of, "version": version_row(0, v, with_doc=True)}
        versions = self.store.history(id, with_docs=True)
        if not versions:
            raise NotFound(f"no object {id!r}")
        return {
            "id": id,
            "versions": [version_row(n, v) for n, v in enumerate(versions, 1)],
            "resource": OBJECT_URI.format(id=quote(id, safe=":"), version="latest"),
        }

    def _object_id(self, id: str) -> str:
        """``id`` as given if it names a stored document (any kind: a frame, a session, …); with a
        workspace, a path read so far gives its file's id."""
        if self.files is None or _ID_LIKE.match(id) or self.store.history(id):
            return id
        return self.files.object_id(id)

    def frames(self, session: str | None = None, turn: int | None = None) -> dict[str, Any]:
        try:
            return self._frames(session, turn)
        except NotFound as e:
            if session is not None and self.store.doc(f"session:{session}") is None:
                e.to_model(f"no session {session!r} in this store: frames() lists the sessions that have frames")
            raise

    def _frames(self, session: str | None, turn: int | None) -> dict[str, Any]:
        sid = session or self.session.id
        if turn is None:
            if session is None and self.session.view.turn == 0:
                # this session records what the client reads, not model calls: name the ones
                # that have frames, or the default would only ever be an error
                return {"session": sid, "frames": [], "sessions": self._sessions_with_frames(), "next": FRAMES_NEXT}
            rows = [r.to_dict() for r in frame_rows(self.store, sid)]
            return {"session": sid, "frames": rows}
        frame = get_frame(self.store, sid, turn)
        check = verify_frame(self.store, frame)
        return {
            "session": sid,
            "turn": turn,
            "verified": check.ok,
            "problems": check.problems,
            "resource": FRAME_URI.format(session=quote(sid, safe=""), turn=turn),
        }

    def _sessions_with_frames(self) -> list[dict[str, Any]]:
        """The sessions of the store that recorded model calls, most recently updated first."""
        _, rows = session_page(self.store, 0, LISTED_SESSIONS, with_turns=True)
        keys = ("session", "harness", "turns", "updated", "tokens_full", "tokens_assembled")
        return [{k: r.to_dict()[k] for k in keys} for r in rows]

    # --- resources --------------------------------------------------------------------------------

    def resources(self) -> list[dict[str, Any]]:
        """The newest ``LISTED_FRAMES`` frames of the store, newest first (every other frame and
        object: through the templates). Only those frames are read: the latest turns of the
        sessions updated last."""
        rows: list[tuple[FrameRow, str]] = []  # (row, its session)
        for session in sessions_newest_first(self.store):
            if len(rows) >= LISTED_FRAMES and session.updated_ms < rows[LISTED_FRAMES - 1][0].valid_time:
                break  # every frame of this session and the ones before it is older
            first = max(1, session.turns - LISTED_FRAMES + 1)
            rows += [(t.row, session.session) for t in turn_rows(self.store, session.session, first, LISTED_FRAMES)]
            rows.sort(key=lambda x: (x[0].valid_time, x[0].tx_id), reverse=True)
        out = []
        for r, sid in rows[:LISTED_FRAMES]:
            out.append(
                {
                    "uri": FRAME_URI.format(session=quote(sid, safe=""), turn=r.turn),
                    "name": f"{sid} turn {r.turn}",
                    "description": f"{r.tokens_assembled:,} tokens, at {r.time}",
                }
            )
        return out

    def read_resource(self, uri: str) -> tuple[str, str]:
        """(mime type, text) of a resource; ``NotFound`` / ``InputError`` for a bad URI."""
        if uri.startswith("context-os://frame/"):
            rest = uri.removeprefix("context-os://frame/")
            session, sep, turn = rest.rpartition("/")
            if not sep or not _NUMBER.fullmatch(turn):
                raise InputError(f"{uri!r}: a frame is context-os://frame/SESSION/TURN")
            sid = unquote(session)
            if self.store.doc(f"session:{sid}") is None:  # (get_frame's error names a CLI command)
                raise NotFound(
                    f"{uri}: no session {sid!r} in this store: the frames tool lists the sessions that have frames"
                )
            check = verify_frame(self.store, get_frame(self.store, sid, int(turn)))
            if not check.ok or check.rendered is None:
                raise NotFound(f"{uri}: the frame does not verify: {'; '.join(check.problems)}")
            return "application/json", json.dumps(check.rendered.messages, ensure_ascii=False)
        if uri.startswith("context-os://object/"):
            rest = unquote(uri.removeprefix("context-os://object/"))
            oid, sep, which = rest.rpartition("@")
            if not sep or not oid:
                raise InputError(f"{uri!r}: an object is context-os://object/ID@VERSION (a number, or latest)")
            versions = [v for v in self.store.history(oid, with_docs=True) if v.doc is not None]
            if not versions:
                raise NotFound(f"no object {oid!r}")
            n = len(versions) if which == "latest" else int(which) if _NUMBER.fullmatch(which) else 0
            if not 1 <= n <= len(versions):
                raise NotFound(f"{oid} has versions 1 to {len(versions)} (or latest), not {which!r}")
            row = version_row(n, versions[n - 1], with_doc=True)
            return "application/json", json.dumps(row, ensure_ascii=False)
        raise NotFound(f"{uri!r} is not a context_os resource (context-os://frame/… or context-os://object/…)")


def _in_terms_of(run: Callable[..., Any], hints: dict[str, str]) -> Callable[..., Any]:
    """``run``, its errors read by the model with each hint of an agent's harness (a tool an MCP
    client does not have) replaced by what it can do (``ContextOSError.for_model``)."""

    def told(**args: Any) -> Any:
        try:
            return run(**args)
        except ContextOSError as e:
            text = said = e.for_model or str(e)
            for harness_hint, ours in hints.items():
                text = text.replace(harness_hint, ours)
            if text != said:
                e.to_model(text)
            raise

    return told


def _refuse_another_harness(store: Store, session: str) -> None:
    """``StateError`` if ``session`` is recorded by something else than an MCP server (an agent's
    harness, a Python caller): what the MCP client reads would be written into that agent's
    history, by a second writer, before anything is written."""
    stored = store.doc(f"session:{session}")
    if stored is None:
        return
    content, meta = stored.get("content") or {}, stored.get("meta") or {}
    was = content.get("harness")
    if was == "mcp":
        return
    turns = meta.get("turn", 0)
    raise StateError(
        f"session {session!r} is recorded by the {was or 'generic'} harness ({turns} model call"
        f"{'' if turns == 1 else 's'}), not by ctxos mcp: an MCP server records what its client reads in a "
        "session of its own, and would mix it into that agent's history. Give --session another id, or none "
        f"(one session per workspace); the frames tool shows that session (frames(session={session!r}))"
    )


def run_stdio(app: ContextOsMcp) -> None:
    """Serve MCP on stdin/stdout until the client closes them, or a ``KeyboardInterrupt`` (Ctrl-C,
    or SIGTERM made one) stops the calling thread.

    The server runs in a thread of its own: an interrupt raised inside the SDK's event loop, at
    whatever point it stands (reading stdin in a worker thread, leaving a cancel scope), ends it
    with an error of its own; raised here, it only stops the wait, and the caller cleans up."""
    import threading

    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(app)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    failed: list[BaseException] = []
    done = threading.Event()

    def serve() -> None:
        try:
            anyio.run(main)
        except BaseException as e:  # handed to the caller's thread
            failed.append(e)
        finally:
            done.set()

    threading.Thread(target=serve, name="mcp-stdio", daemon=True).start()
    done.wait()
    if failed:
        raise failed[0]


def http_app(app: ContextOsMcp, token: str) -> Any:
    """The streamable HTTP app (path ``/mcp``): a request needs ``Authorization: Bearer <token>``
    and a loopback ``Host`` (the SDK's DNS-rebinding protection), and no browser ``Origin``."""
    import hmac

    from mcp.server.transport_security import TransportSecuritySettings

    inner = build_server(app).streamable_http_app(
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=[],
        )
    )
    expected = token.encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            # the scheme's name is case-insensitive (RFC 9110), as ctxos serve's guard takes it
            scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), expected):
                body = b'{"error": "missing or wrong bearer token (see the token file ctxos mcp named)"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await inner(scope, receive, send)

    return guarded


def http_protocol(header_seconds: float = HEADER_SECONDS) -> type:
    """uvicorn's HTTP/1.1 protocol, closing a connection whose request line and headers are not
    all in within ``header_seconds`` of their first byte (uvicorn waits for ever: a client that
    never finishes its headers, many times over, would hold a socket each). For
    ``uvicorn.Config(http=...)``."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        _headers_due: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._await_headers()

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:  # a request (the next one, on a kept connection) starts
                self._await_headers()
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE and self._headers_due is not None:
                self._headers_due.cancel()
                self._headers_due = None

        def connection_lost(self, exc: Exception | None) -> None:
            if self._headers_due is not None:
                self._headers_due.cancel()
                self._headers_due = None
            super().connection_lost(exc)

        def _await_headers(self) -> None:
            if self._headers_due is None:
                self._headers_due = self.loop.call_later(header_seconds, self._headers_overdue)

        def _headers_overdue(self) -> None:
            self._headers_due = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline


def build_server(app: ContextOsMcp) -> Any:
    """The SDK's low-level server, answering with ``app``."""
    import anyio
    from mcp import MCPError
    from mcp import types as t
    from mcp.server.lowlevel import Server

    from .. import __version__

    async def list_tools(ctx: Any, params: Any) -> t.ListToolsResult:
        return t.ListToolsResult(
            tools=[
                t.Tool(name=s["name"], description=s["description"], input_schema=s["parameters"])
                for s in app.registry.schemas
            ]
        )

    async def call_tool(ctx: Any, params: t.CallToolRequestParams) -> t.CallToolResult:
        if not app.registry.handles(params.name):
            known = ", ".join(sorted(app.registry.names))
            raise MCPError(t.INVALID_PARAMS, f"unknown tool {params.name!r}; tools: {known}")
        text, error = await anyio.to_thread.run_sync(app.call, params.name, params.arguments)
        return t.CallToolResult(content=[t.TextContent(type="text", text=text)], is_error=error)

    async def list_resources(ctx: Any, params: Any) -> t.ListResourcesResult:
        rows = await anyio.to_thread.run_sync(app.resources)
        return t.ListResourcesResult(resources=[t.Resource(mime_type="application/json", **r) for r in rows])

    async def list_templates(ctx: Any, params: Any) -> t.ListResourceTemplatesResult:
        return t.ListResourceTemplatesResult(
            resource_templates=[
                t.ResourceTemplate(
                    name="frame",
                    uri_template=FRAME_URI,
                    description="What the model saw at one turn of a session, re-rendered and verified",
                    mime_type="application/json",
                ),
                t.ResourceTemplate(
                    name="object",
                    uri_template=OBJECT_URI,
                    description="One version of an object (1-based, or latest), with its hashes",
                    mime_type="application/json",
                ),
            ]
        )

    async def read_resource(ctx: Any, params: t.ReadResourceRequestParams) -> t.ReadResourceResult:
        uri = str(params.uri)
        try:
            mime, text = await anyio.to_thread.run_sync(app.read_resource, uri)
        except NotFound as e:
            raise MCPError(-32002, str(e)) from None  # the spec's "resource not found"
        except ContextOSError as e:
            raise MCPError(t.INVALID_PARAMS, str(e)) from None
        return t.ReadResourceResult(contents=[t.TextResourceContents(uri=uri, mime_type=mime, text=text)])

    return Server(
        "context_os",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


INSTRUCTIONS = (
    "context_os keeps what you read and what any agent's model saw as versioned objects in a bitemporal store. "
    "read(path) gives a file's text and its object id and version; a later read says whether it changed. "
    "inspect(id) lists an object's versions; frames(session) lists what a model was shown at each turn; recall "
    "searches everything stored."
)
READ_DESCRIPTION = (
    "Read a file of the workspace: its text, its object id and version (a new version whenever the file changed "
    "since it was last read)."
)
READ_SCHEMA = object_schema(
    {"path": {"type": "string", "description": "The file, relative to the workspace"}}, ["path"]
)
ACTIVATE_DESCRIPTION = (
    "Get an object's current content by its id (file:…, toolcall:…, recall:…, memory:…, message:…) or a file's "
    "path, and record that you use it."
)
LINES_DESCRIPTION = (
    "Show lines of an object's stored text (a file version, a tool output, a memory, a message), by id or file "
    "path: start to end (200 lines by default); column shows the rest of a line too long to show at once."
)
DEACTIVATE_DESCRIPTION = "Record that you no longer need an object (by id or path); it stays stored."
ID_SCHEMA = object_schema({"id": {"type": "string", "description": "An object id, or a file path"}}, ["id"])
INSPECT_DESCRIPTION = (
    "An object's versions (valid time, transaction, hash), or with as_of (ISO 8601 or epoch ms) the version that "
    "held then, in full."
)
INSPECT_SCHEMA = object_schema(
    {
        "id": {"type": "string", "description": "The object id, or the path of a file read so far"},
        "as_of": {"type": ["string", "integer"], "description": "A past time: the version valid then"},
    },
    ["id"],
)
FRAMES_DESCRIPTION = (
    "What a model was shown: one row per turn of a session (tokens, messages, active objects); with turn, that "
    "frame checked against its hash and its resource URI to read it."
)
FRAMES_SCHEMA = object_schema(
    {
        "session": {
            "type": "string",
            "description": "A session id (default: this MCP session; while it has no frames, the sessions that have)",
        },
        "turn": {"type": "integer", "minimum": 1, "description": "One turn"},
    },
    [],
)
