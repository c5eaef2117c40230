"""``ctxos``: inspect, verify and demo context_os stores.

One module per command group (``frames``, ``objects``, ``sessions``) or command; they share
helpers only through ``_common`` and never import each other. The old flat verbs (``frames
SESSION``, ``frame``, ``inspect``, ``evict``) are deprecated aliases, hidden from ``--help``,
kept for one release."""

from __future__ import annotations

import click

from . import (
    demo,
    files,
    frames,
    index,
    mcp,
    memory,
    mesh,
    objects,
    proxy,
    recall,
    replay,
    serve,
    sessions,
    status,
    ui,
    verify,
)


class _Ctxos(click.Group):
    """``--store URL`` is the group's option, taken anywhere on the command line: ``ctxos
    sessions --store URL`` as ``ctxos --store URL sessions``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        moved: list[str] = []
        rest: list[str] = []
        k = 0
        while k < len(args):
            arg = args[k]
            if arg == "--":
                rest += args[k:]
                break
            if arg == "--store" and k + 1 < len(args) and rest:
                moved += args[k : k + 2]
                k += 2
                continue
            if arg.startswith("--store=") and rest:
                moved.append(arg)
            else:
                rest.append(arg)
            k += 1
        return super().parse_args(ctx, moved + rest)


@click.group(
    cls=_Ctxos,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Deprecated aliases, kept for one release (see docs/cli.md): `ctxos frames SESSION`, "
    "`ctxos frame`, `ctxos inspect`, `ctxos evict`.",
)
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


for module in (
    sessions,
    frames,
    objects,
    files,
    memory,
    index,
    recall,
    mesh,
    replay,
    demo,
    verify,
    status,
    serve,
    mcp,
    proxy,
    ui,
):
    module.register(cli)


def main() -> None:
    cli(prog_name="ctxos")
