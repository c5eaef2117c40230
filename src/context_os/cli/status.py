"""``ctxos status`` and ``ctxos sessions``: where the store is, how big, what it holds."""

from __future__ import annotations

import sys
from collections import Counter

import click

from ..errors import StoreUnavailable
from ._common import emit_json, fails_cleanly, iso, json_option, store_from, table


@click.command("status")
@json_option
@click.pass_context
@fails_cleanly
def status_cmd(ctx: click.Context, as_json: bool) -> None:
    """Store location, size and counts of documents by kind (exit 1 if the store is out of reach)."""
    with store_from(ctx) as store:
        error = None
        try:
            kinds = Counter(v.doc["kind"] for v in store.find() if v.doc)
            latest = store.latest_tx()
        except StoreUnavailable as e:  # still say what is known locally (e.g. writes waiting to be sent)
            kinds, latest, error = Counter(), None, f"{type(e).__name__}: {e}"
        report = {
            "store": store.url,
            "backend": type(store).__name__,
            "reachable": error is None,
            "documents": sum(kinds.values()),
            "by_kind": dict(sorted(kinds.items())),
            "sessions": kinds.get("session", 0),
            "latest_tx": None if latest is None else {"id": latest.id, "time": iso(latest.time)},
            **store.stats(),
        }
        if error is not None:
            report["error"] = error
        if as_json:
            emit_json(report)
        else:
            for k, v in report.items():
                if k != "by_kind":
                    click.echo(f"{k:12} {v}")
            click.echo("by kind      " + (", ".join(f"{k} {n}" for k, n in report["by_kind"].items()) or "(empty)"))
        if error is not None:
            sys.exit(1)


@click.command("sessions")
@json_option
@click.pass_context
@fails_cleanly
def sessions_cmd(ctx: click.Context, as_json: bool) -> None:
    """List sessions: id, harness, turns, messages, last update."""
    with store_from(ctx) as store:
        rows = []
        for v in sorted(store.find("session"), key=lambda v: v.valid_time):
            if v.doc is None:
                continue
            c, m = v.doc["content"], v.doc["meta"]
            rows.append(
                {
                    "session": m["session"],
                    "harness": c.get("harness"),
                    "turns": m.get("turn", 0),
                    "messages": m.get("cursor", 0),
                    "updated": iso(v.valid_time),
                }
            )
        if as_json:
            emit_json(rows)
        elif rows:
            click.echo(
                table([list(r.values()) for r in rows], ["session", "harness", "turns", "messages", "updated"], "llrrl")
            )
        else:
            click.echo(f"no sessions in {store.url}")


def register(cli: click.Group) -> None:
    cli.add_command(status_cmd)
    cli.add_command(sessions_cmd)
