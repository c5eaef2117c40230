"""``ctxos ui``: the read-only web view of a store (server/ui), on 127.0.0.1."""

from __future__ import annotations

import sys
import webbrowser
from urllib.parse import quote

import click

from ..errors import NotFound
from ._common import fails_cleanly, serve_until_stopped, server_process, store_from


@click.command("ui")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8766, show_default=True, help="The port on 127.0.0.1 (0: any)."
)
@click.option(
    "--session", "session_id", metavar="ID", help="Print this session's timeline address (with --open, open it)."
)
@click.option("--open", "open_browser", is_flag=True, help="Open the page in the default browser.")
@click.option("-v", "--verbose", count=True, help="Log more to stderr (-v: each request).")
@click.pass_context
@fails_cleanly
def ui_cmd(ctx: click.Context, port: int, session_id: str | None, open_browser: bool, verbose: int) -> None:
    """A read-only web view of sessions, frames, diffs and objects.

    Read-only, on http://127.0.0.1:PORT (other Host headers are refused); Ctrl-C stops it.
    See docs/ui.md."""
    from ..server.ui import make_ui_server

    server_process("ui", verbose)
    with store_from(ctx) as store:
        if session_id and store.get(f"session:{session_id}") is None:
            raise NotFound(f"no session {session_id!r} in {store.url} (`ctxos sessions` lists them)")
        server = make_ui_server(store, port)
        bound = server.server_address[1]
        url = f"http://127.0.0.1:{bound}/"
        if session_id:
            url += f"session?id={quote(session_id, safe='')}"
        print(f"ctxos ui: {store.url} on {url} (Ctrl-C stops it)", file=sys.stderr, flush=True)
        if open_browser:
            webbrowser.open(url)
        serve_until_stopped(server)


def register(cli: click.Group) -> None:
    cli.add_command(ui_cmd)
