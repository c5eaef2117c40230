"""``ctxos status``: where the store is, how big, what it holds.

It never writes, and never shows a store URL's password."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import click

from ..errors import StoreError, StoreUnavailable
from ._common import cell, emit_json, fails_cleanly, iso, json_option, store_from, table


@click.command("status")
@json_option
@click.pass_context
@fails_cleanly
def status_cmd(ctx: click.Context, as_json: bool) -> None:
    """Store location, size and documents by kind.

    A store out of reach still gets a report (reachable: false, what it holds unknown) and exit
    status 1."""
    with store_from(ctx) as store:
        error, reachable = None, True
        try:
            # a store may hold documents context_os did not write (a shared XTDB node): no kind is a kind
            kinds = Counter({"(none)" if k is None else k: n for k, n in store.count_kinds().items()})
            latest = store.latest_tx()
        except StoreError as e:  # still say what is known locally (e.g. writes waiting to be sent)
            kinds, latest, error = Counter(), None, f"{type(e).__name__}: {e}"
            # out of reach, or something answers that is not the store asked for (a web server)
            reachable = not isinstance(e, StoreUnavailable)
        report = {
            "store": store.url,
            "backend": type(store).__name__,
            "reachable": error is None or reachable,
            "answers_as_a_store": error is None,
            # out of reach, what the store holds is not known: null, not 0
            "documents": sum(kinds.values()) if error is None else None,
            "by_kind": dict(sorted(kinds.items())) if error is None else None,
            "sessions": kinds.get("session", 0) if error is None else None,
            "latest_tx": None if latest is None else {"id": latest.id, "time": iso(latest.time)},
            **_stats(store),
        }
        if error is not None:
            report["error"] = error
        if as_json:
            emit_json(report)
        else:
            click.echo(table(_rows(report), ["field", "value"]))
        if error is not None:
            sys.exit(1)


def _stats(store: Any) -> dict[str, Any]:
    """What the store says of itself; nothing when it cannot say (it is not one). A node's
    indexed transaction has its time in ISO 8601, as ``latest_tx`` has."""
    try:
        stats = dict(store.stats())
    except StoreError:
        return {}
    for node in stats.get("nodes") or ():
        if isinstance(node.get("indexed_tx"), dict):
            node["indexed_tx"] = {**node["indexed_tx"], "time": iso(node["indexed_tx"]["time"])}
    return stats


_LABELS = {"oldest_accepted": "waiting since"}
"""Fields whose name, spaced out, reads badly as a label (the JSON keys stay as they are)."""


def _rows(report: dict[str, Any], prefix: str = "") -> list[list[str]]:
    """The report as (field, value) rows: nested objects as dotted fields (``outbox.pending``),
    except the short ones (kinds, the latest transaction), which stay on one line."""
    rows: list[list[str]] = []
    for key, value in report.items():
        name = prefix + _LABELS.get(key, key.replace("_", " "))
        if key == "nodes" and isinstance(value, list):
            rows += [[f"node {node.get('url')}", _node_line(node)] for node in value if isinstance(node, dict)]
        elif isinstance(value, dict) and key not in ("by_kind", "latest_tx"):
            rows += _rows(value, name + ".")
        else:
            rows.append([name, cell(key, value)])
    return rows


def _node_line(node: dict[str, Any]) -> str:
    """One node of a store (``XtdbStore.node_states``) on one line: whether it answers, the newest
    transaction it indexed, the newest in its log, how far behind it is."""
    if not node.get("answers"):
        return f"down ({node.get('error')})"
    indexed = node.get("indexed_tx")
    parts = ["answers" + (" (requests go here)" if node.get("current") else "")]
    parts.append("indexed nothing yet" if indexed is None else f"indexed tx {indexed['id']:,} ({indexed['time']})")
    if node.get("log_tx_id") is not None:
        parts.append(f"log tx {node['log_tx_id']:,}")
    lag = node.get("lag_ms")
    parts.append("lag unknown" if lag is None else f"lag {lag / 1000:,.1f} s" if lag >= 1000 else f"lag {lag} ms")
    if node.get("error"):
        parts.append(str(node["error"]))
    return "; ".join(parts)


def register(cli: click.Group) -> None:
    cli.add_command(status_cmd)
