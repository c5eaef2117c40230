"""``ctxos serve``: the JSON-RPC server for harnesses that are not Python (see docs/protocol.md)."""

from __future__ import annotations

import logging
import sys
import threading

import click

from ..server import MAX_REQUEST_BYTES, Server, make_http_server, serve_stdio
from ._common import fails_cleanly, store_from


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
    "--max-request-mb",
    type=click.IntRange(1, 1024),
    default=MAX_REQUEST_BYTES // (1024 * 1024),
    show_default=True,
    help="Refuse requests larger than this many MiB.",
)
@click.option("-v", "--verbose", count=True, help="Log more to stderr (-v: each request, -vv: debug).")
@click.pass_context
@fails_cleanly
def serve_cmd(ctx: click.Context, stdio: bool, http_port: int | None, max_request_mb: int, verbose: int) -> None:
    """Serve JSON-RPC 2.0 on stdio and/or HTTP on 127.0.0.1; logs go to stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ctxos serve: %(levelname)s %(message)s"))
    logger = logging.getLogger("context_os")
    logger.addHandler(handler)
    logger.setLevel([logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)])
    use_stdio = stdio or http_port is None
    with store_from(ctx) as store:
        server = Server(store, max_request_bytes=max_request_mb * 1024 * 1024)
        httpd = None
        if http_port is not None:
            httpd = make_http_server(server, http_port)
            port = httpd.server_address[1]
            # the one line a supervisor may wait for (always printed, whatever the log level)
            print(f"ctxos serve: listening on http://127.0.0.1:{port}", file=sys.stderr, flush=True)
        try:
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
            if httpd is not None:
                httpd.server_close()


def register(cli: click.Group) -> None:
    cli.add_command(serve_cmd)
