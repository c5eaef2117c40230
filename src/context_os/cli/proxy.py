"""``ctxos proxy``: the OpenAI/Anthropic/Gemini-compatible proxy (server/proxy.py)."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from ..errors import ConfigError
from ..harness.toolnames import PRESETS
from ..server.proxy_workspace import AUTO
from ..server.transports import MAX_CONNECTIONS
from ._common import (
    announce_created,
    embedder_option,
    fails_cleanly,
    ready_to_serve,
    rebuild_vectors_option,
    recall_embedder,
    serve_until_stopped,
    server_process,
    store_from,
    track_option,
)


class _WorkspaceParam(click.Path):
    """``--workspace``: an existing directory, or ``auto``."""

    def __init__(self) -> None:
        super().__init__(exists=True, file_okay=False, path_type=Path)
        self.name = "directory"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value if value == AUTO else super().convert(value, param, ctx)


@click.command("proxy")
@click.option(
    "--upstream",
    required=True,
    metavar="URL",
    help="The provider's origin, e.g. https://api.openai.com (the request's path /v1/… is added to it).",
)
@click.option("--anthropic-upstream", metavar="URL", help="Another origin for /v1/messages (default: --upstream).")
@click.option(
    "--gemini-upstream",
    metavar="URL",
    help="The origin for the Gemini API (/v1beta/models/…) [default: https://generativelanguage.googleapis.com].",
)
@click.option(
    "--code-assist-upstream",
    metavar="URL",
    help="The origin for Google's Code Assist API (/v1internal:…; Gemini CLI logged in with a Google account) "
    "[default: https://cloudcode-pa.googleapis.com].",
)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8787, show_default=True, help="The port on 127.0.0.1 (0: any)."
)
@click.option(
    "--timeout",
    type=click.FloatRange(1, 3600),
    default=600,
    show_default=True,
    help="Seconds the upstream may send nothing: before its answer starts, or between two parts of a stream.",
)
@click.option("--recall/--no-recall", default=True, show_default=True, help="Offer the model the recall tool.")
@click.option(
    "--workspace",
    type=_WorkspaceParam(),
    metavar="DIR|auto",
    help="The agent's directory: its files read from the disk and tracked, and the model offered read (files "
    "as versioned objects) too; auto: each conversation's own, the directory its agent names (Claude Code, "
    "Codex, Gemini CLI, Pi, OpenCode, Qwen Code), when this machine has it.",
)
@click.option(
    "--tool-names",
    type=click.Choice(["auto", "none", *PRESETS]),
    default="auto",
    show_default=True,
    help="Which of the agent's tools read, write and edit files (their calls keep its files as objects): "
    "auto tells the harness from the tools a request offers; none keeps them as tool outputs only.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 4096),
    default=MAX_CONNECTIONS,
    show_default=True,
    help="Connections served at once (a thread each): one more takes the place of a kept-alive one "
    "idle the longest, or is answered 503 when none is idle.",
)
@click.option(
    "--idle-close-minutes",
    type=click.IntRange(0, 525_600),
    default=60,
    show_default=True,
    help="Close the session of a conversation no request used for this long (its memory given back; "
    "its next request opens it again); never less than twice --timeout; 0: never.",
)
@embedder_option
@rebuild_vectors_option
@track_option
@click.option("-v", "--verbose", count=True, help="Log more to stderr (-v: each request).")
@click.pass_context
@fails_cleanly
def proxy_cmd(
    ctx: click.Context,
    upstream: str,
    anthropic_upstream: str | None,
    gemini_upstream: str | None,
    code_assist_upstream: str | None,
    port: int,
    timeout: float,
    recall: bool,
    workspace: Path | str | None,
    tool_names: str,
    max_connections: int,
    idle_close_minutes: int,
    embedder: str,
    rebuild_vectors: bool,
    track: bool,
    verbose: int,
) -> None:
    """An OpenAI/Anthropic/Gemini-compatible proxy for any agent.

    Point the agent's base URL at http://127.0.0.1:PORT/v1 (OpenAI chat completions or
    responses: Codex CLI) or http://127.0.0.1:PORT (Anthropic; Gemini: Gemini CLI's
    GOOGLE_GEMINI_BASE_URL, or CODE_ASSIST_ENDPOINT logged in with a Google account); its API key
    goes upstream untouched. Each conversation is a
    session (X-Context-OS-Session names one); the context sent upstream is the assembled one.
    See docs/proxy.md."""
    from ..server.proxy import Proxy, make_proxy_server, upstream_origin
    from ..server.transports import listen_socket, new_token, write_token_file
    from ..sources.recall import open_recall
    from ..store import data_dir

    server_process("proxy", verbose)
    # what can refuse the start is checked before the store is opened: a refused start creates none
    upstream_origin(upstream, "--upstream")
    if anthropic_upstream is not None:
        upstream_origin(anthropic_upstream, "--anthropic-upstream")
    if gemini_upstream is not None:
        upstream_origin(gemini_upstream, "--gemini-upstream")
    if code_assist_upstream is not None:
        upstream_origin(code_assist_upstream, "--code-assist-upstream")
    sock = listen_socket("127.0.0.1", port)
    with ExitStack() as stack:
        stack.callback(sock.close)
        # the status's token, readable by this user only: the status names sessions, which another
        # local user could otherwise read and name in a request of their own; it goes at exit
        status_token = new_token()
        try:
            token_file = write_token_file(data_dir() / "proxy" / f"status-{sock.getsockname()[1]}.token", status_token)
        except OSError as e:
            raise ConfigError(f"cannot write the status token file: {e.strerror or e}") from None
        stack.callback(token_file.unlink, missing_ok=True)
        store = stack.enter_context(store_from(ctx, create=True, announce=False))
        engine = open_recall(store, recall_embedder(store, embedder, rebuild=rebuild_vectors)) if recall else None
        proxy = Proxy(
            store,
            upstream,
            anthropic_upstream=anthropic_upstream,
            gemini_upstream=gemini_upstream,
            code_assist_upstream=code_assist_upstream,
            timeout=timeout,
            recall=engine,
            workspace=workspace,
            tool_names=tool_names,
            track=track,
            idle_close_s=idle_close_minutes * 60.0 or None,
        )
        server = make_proxy_server(proxy, port, sock=sock, status_token=status_token, max_connections=max_connections)
        bound = server.server_address[1]
        try:  # from here on, a stop (SIGTERM, Ctrl-C) at any point is a clean one
            ready_to_serve()  # before the line a supervisor waits for: connections wait in the backlog
            print(
                f"ctxos proxy: listening on http://127.0.0.1:{bound} (OpenAI base URL http://127.0.0.1:{bound}/v1, "
                f"Anthropic and Gemini base URL http://127.0.0.1:{bound}) -> {upstream} (status token in {token_file})",
                file=sys.stderr,
                flush=True,
            )
            announce_created(store)  # after the listening line, which stays the first
            serve_until_stopped(server)
        except KeyboardInterrupt:
            pass  # stopped before it began serving (a supervisor that read the line)
        finally:
            server.server_close()
            # answers being relayed are cut, their clients told so in their API's shape
            proxy.stop()
            proxy.close()
            if engine is not None:
                engine.close()


def register(cli: click.Group) -> None:
    cli.add_command(proxy_cmd)
