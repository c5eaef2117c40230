"""``ctxos mcp``: context_os as an MCP server (server/mcp.py), on stdio or streamable HTTP.

On stdio it never prints to stdout (stdio is the protocol); logs go to stderr."""

from __future__ import annotations

import hashlib
import socket
import sys
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import click

from .._install import install_hint
from ..errors import ConfigError, SessionBusy
from ..server.transports import header_token, listen_socket
from ..store import data_dir
from ._common import (
    embedder_option,
    fails_cleanly,
    ready_to_serve,
    rebuild_vectors_option,
    recall_embedder,
    server_process,
    store_from,
    track_option,
)

TOKEN_ENV = "CTXOS_MCP_TOKEN"
"""A token chosen by whoever starts the HTTP server, instead of a fresh one."""


def default_session(workspace: Path) -> str:
    """One session per workspace: ``mcp-<dir name>-<8 hex of its path>`` (stable across runs)."""
    digest = hashlib.blake2b(str(workspace).encode(), digest_size=4).hexdigest()
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in workspace.name)[:40] or "root"
    return f"mcp-{name}-{digest}"


@click.command("mcp")
@click.option(
    "--workspace",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The directory read() may read (default: the current directory).",
)
@click.option(
    "--session", "session_id", metavar="ID", help="The session that records what is read (default: one per workspace)."
)
@click.option("--recall/--no-recall", default=True, show_default=True, help="Offer recall over everything stored.")
@click.option("--memory/--no-memory", default=True, show_default=True, help="Offer remember (the memory scopes).")
@embedder_option
@rebuild_vectors_option
@track_option
@click.option(
    "--http",
    "http_port",
    type=click.IntRange(0, 65535),
    metavar="PORT",
    help="Serve streamable HTTP on 127.0.0.1:PORT (path /mcp, bearer token) instead of stdio.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the HTTP token (0600; default: <user data dir>/mcp/http-PORT.token; removed at exit).",
)
@click.option("-v", "--verbose", count=True, help="Log more to stderr.")
@click.pass_context
@fails_cleanly
def mcp_cmd(
    ctx: click.Context,
    workspace: Path | None,
    session_id: str | None,
    recall: bool,
    memory: bool,
    embedder: str,
    rebuild_vectors: bool,
    track: bool,
    http_port: int | None,
    token_file: Path | None,
    verbose: int,
) -> None:
    """Serve context_os to MCP clients, on stdio or streamable HTTP.

    Tools: read, activate, deactivate, lines, inspect, frames, recall, remember.

    Tools and resources (context-os://frame/SESSION/TURN, context-os://object/ID@VERSION) are
    described in docs/mcp.md. Stdio by default; with --http, streamable HTTP on 127.0.0.1 behind
    a bearer token (written to a 0600 file named on stderr) and a loopback Host check."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigError(f"ctxos mcp needs the MCP SDK: {install_hint('mcp')}") from None
    from ..server.mcp import run_stdio
    from ..sources.memory import MemoryScopes
    from ..sources.recall import open_recall

    server_process("mcp", verbose)
    root = (workspace or Path.cwd()).resolve()
    token = None if http_port is None else header_token(TOKEN_ENV)  # refused before anything is opened
    # listening before the store and the session are opened: a port in use records nothing
    sock = None if http_port is None else listen_socket("127.0.0.1", http_port, port_option="--http")
    with ExitStack() as stack:
        if sock is not None:
            stack.callback(sock.close)
        store = stack.enter_context(store_from(ctx, create=True, announce=True))
        engine = open_recall(store, recall_embedder(store, embedder, rebuild=rebuild_vectors)) if recall else None
        app = _open_app(
            store,
            session_id,
            root,
            recall=engine,
            memory=MemoryScopes(root) if memory else None,
            track=track,
        )
        ready_to_serve()
        try:
            if sock is None:
                with suppress(KeyboardInterrupt):  # Ctrl-C, or SIGTERM (made one by server_process)
                    run_stdio(app)
            else:
                assert token is not None
                _serve_http(app, sock, token, token_file)
        finally:
            app.close()
            if engine is not None:
                engine.close()


SESSION_TRIES = 20
"""How many sessions of one workspace ``ctxos mcp`` tries (its default, then ``-2``, ``-3``, …)."""


def _open_app(store: Any, session_id: str | None, root: Path, **kwargs: Any) -> Any:
    """The MCP app recording in ``session_id``; without one, in the workspace's default session,
    or, while other ``ctxos mcp`` servers (other clients open on the same workspace) write that,
    in the first of ``<default>-2``, ``-3``, … no other writes (one writer per session)."""
    from ..server.mcp import ContextOsMcp

    if session_id is not None:
        return ContextOsMcp(store, session=session_id, workspace=root, **kwargs)
    base = default_session(root)
    busy: SessionBusy | None = None
    for name in [base, *(f"{base}-{n}" for n in range(2, SESSION_TRIES + 1))]:
        try:
            app = ContextOsMcp(store, session=name, workspace=root, **kwargs)
        except SessionBusy as e:
            busy = e
            continue
        if name != base:
            print(f"ctxos mcp: {base} is in use by another server; recording in {name}", file=sys.stderr, flush=True)
        return app
    assert busy is not None
    raise busy


def _serve_http(app: Any, sock: socket.socket, token: str, token_file: Path | None) -> None:
    import uvicorn

    from ..server import write_token_file
    from ..server.mcp import MAX_CONNECTIONS, http_app, http_protocol

    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        http_app(app, token),
        host="127.0.0.1",
        port=bound,
        log_level="warning",
        lifespan="on",
        http=http_protocol(),  # a request's headers are due within HEADER_SECONDS
        limit_concurrency=MAX_CONNECTIONS,  # more connections at once are answered 503
    )
    server = uvicorn.Server(config)
    written = write_token_file(token_file or data_dir() / "mcp" / f"http-{bound}.token", token)
    try:
        print(f"ctxos mcp: listening on http://127.0.0.1:{bound}/mcp (token in {written})", file=sys.stderr, flush=True)
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        with suppress(OSError):
            written.unlink()


def register(cli: click.Group) -> None:
    cli.add_command(mcp_cmd)
