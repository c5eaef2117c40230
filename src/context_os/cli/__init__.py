"""``ctxos``: inspect, verify and demo context_os stores. One module per command group."""

from __future__ import annotations

import click

from . import demo, evict, files, frames, inspect, replay, serve, status, verify


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    envvar="CTXOS_STORE",
    metavar="URL",
    help="Store URL: sqlite:///path.db or xtdb+http://127.0.0.1:3000 (default: $CTXOS_STORE, else the user data dir).",
)
@click.version_option(package_name="context_os")
@click.pass_context
def cli(ctx: click.Context, store: str | None) -> None:
    """context_os: what your agent sees, as versioned objects in a bitemporal store."""
    ctx.ensure_object(dict)
    ctx.obj["store"] = store


for module in (inspect, frames, verify, demo, replay, status, files, evict, serve):
    module.register(cli)


def main() -> None:
    cli(prog_name="ctxos")
