"""``ctxos sessions [list]``: the sessions a store holds. ``list`` is the default: ``ctxos
sessions`` alone (or with ``--json``) lists them.

It never writes."""

from __future__ import annotations

import click

from ..context.timeline import session_rows
from ._common import DefaultGroup, emit_json, fails_cleanly, json_option, store_from, table


@click.group("sessions", cls=DefaultGroup, default="list", bare_default=True)
def sessions() -> None:
    """The sessions in the store (alone: list them)."""


@sessions.command("list")
@json_option
@click.pass_context
@fails_cleanly
def list_cmd(ctx: click.Context, as_json: bool) -> None:
    """List sessions: harness, turns, messages, tokens, last update."""
    with store_from(ctx) as store:
        rows = [r.to_dict() for r in session_rows(store)]
        if as_json:
            emit_json(rows)
        elif rows:
            click.echo(
                table(
                    [
                        [
                            r["session"],
                            r["harness"] if r["source"] is None else f"{r['harness']} (replay of {r['source']})",
                            r["turns"],
                            r["messages"],
                            "" if r["tokens_full"] is None else f"{r['tokens_assembled']:,} / {r['tokens_full']:,}",
                            r["updated"],
                        ]
                        for r in rows
                    ],
                    ["session", "harness", "turns", "messages", "last turn: sent / full", "updated"],
                    "llrrrl",
                )
            )
        else:
            click.echo(f"no sessions in {store.url}")


def register(cli: click.Group) -> None:
    cli.add_command(sessions)
