"""``ctxos ui``: the read-only web view of a store (server/ui), on 127.0.0.1."""

from __future__ import annotations

import html
import os
import shutil
import sys
import tempfile
import webbrowser
from pathlib import Path
from urllib.parse import quote

import click

from ..errors import ConfigError, NotFound
from ._common import fails_cleanly, serve_until_stopped, server_process, store_from

TOKEN_ENV = "CTXOS_UI_TOKEN"
"""A token chosen by whoever starts the web view, instead of a fresh one."""


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

    Read-only, on http://127.0.0.1:PORT (other Host headers are refused), for whoever has the
    address it prints: it carries a token (other local users and processes are refused; a fresh
    one each start, or $CTXOS_UI_TOKEN). Ctrl-C stops it. See docs/ui.md."""
    from ..server.transports import new_token
    from ..server.ui import make_ui_server

    token = os.environ.get(TOKEN_ENV) or new_token()
    if len(token) < 16 or not (token.isascii() and token.replace("-", "").replace("_", "").isalnum()):
        raise ConfigError(f"${TOKEN_ENV} must be at least 16 letters, digits, '-' or '_' (a secret in an address)")
    server_process("ui", verbose)
    with store_from(ctx) as store:
        if session_id and store.get(f"session:{session_id}") is None:
            raise NotFound(f"no session {session_id!r} in {store.url} (`ctxos sessions` lists them)")
        server = make_ui_server(store, port, token=token)
        bound = server.server_address[1]
        url = f"http://127.0.0.1:{bound}/"
        if session_id:
            url += f"session?id={quote(session_id, safe='')}&token={token}"
        else:
            url += f"?token={token}"
        print(f"ctxos ui: {store.url} on {url} (Ctrl-C stops it)", file=sys.stderr, flush=True)
        opened: list[Path] = []  # the browser started once it serves: a stop meanwhile is a clean one
        try:
            serve_until_stopped(server, then=(lambda: opened.append(_open_privately(url))) if open_browser else None)
        finally:
            for where in opened:
                shutil.rmtree(where, ignore_errors=True)


def _open_privately(url: str) -> Path:
    """Open ``url`` in the default browser without putting its token on a command line: the
    browser is started with a page in a directory only this user can read (removed when the web
    view stops), which sends it on to ``url``. Any local user can read a process's arguments
    (``ps``, ``/proc/PID/cmdline``), which is where ``webbrowser.open(url)`` puts the address."""
    where = Path(tempfile.mkdtemp(prefix="ctxos-ui-"))  # mode 0700
    page = where / "open.html"
    link = html.escape(url, quote=True)
    fd = os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(
            f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={link}">'
            f'<title>ctxos ui</title><p><a href="{link}">ctxos ui</a></p>\n'
        )
    webbrowser.open(page.as_uri())
    return where


def register(cli: click.Group) -> None:
    cli.add_command(ui_cmd)
