"""``ctxos files SESSION``: the files a session knows, with state and staleness.

It never writes: it shows the library's read models."""

from __future__ import annotations

from typing import Any

import click

from ..context.load import load_view
from ..context.session import shows_latest_file
from ..store import Store
from ._common import TEXT, emit_json, fails_cleanly, json_option, store_from, table


def session_files(store: Store, session_id: str) -> list[dict[str, Any]]:
    """Every file object the session knows: what it shows, what is latest, state, staleness."""
    view = load_view(store, session_id)
    rows = []
    for o in sorted(view.objects.values(), key=lambda o: o.seq):
        if o.kind != "file" or o.state == "absent":
            continue
        latest = store.get(o.id)
        doc = latest.doc if latest is not None else None
        lm = doc["meta"] if doc else {}
        shown = o.version[2] if o.version else None
        rows.append(
            {
                "id": o.id,
                "path": lm.get("path", o.meta.get("path")),
                "path_shown": o.meta.get("path"),
                "state": o.state,
                "pinned": o.pinned,
                "version_shown": o.meta.get("version"),
                "version_latest": lm.get("version"),
                # as the session judges it: the same bytes at the same path are not stale
                "stale": doc is not None and doc.get("object_hash") != shown and not shows_latest_file(o.meta, lm),
                "missing": bool(lm.get("missing")),
                "indexed": lm.get("indexed"),
                "tokens": o.tokens,
            }
        )
    return rows


@click.command("files")
@click.argument("session_id", type=TEXT)
@json_option
@click.pass_context
@fails_cleanly
def files_cmd(ctx: click.Context, session_id: str, as_json: bool) -> None:
    """Files a session knows: path, state, version shown vs latest."""
    with store_from(ctx) as store:
        rows = session_files(store, session_id)
        if as_json:
            emit_json(rows)
            return
        if not rows:
            click.echo(f"session {session_id} knows no files")
            return
        click.echo(
            table(
                [
                    [
                        r["id"],
                        r["path"],
                        r["state"] + (" pinned" if r["pinned"] else ""),
                        r["version_shown"],
                        r["version_latest"],
                        "stale" if r["stale"] else "",
                        "missing" if r["missing"] else "",
                        r["indexed"],
                        r["tokens"],
                    ]
                    for r in rows
                ],
                ["id", "path", "state", "shown", "latest", "stale", "missing", "indexed", "tokens"],
                "lllrrlllr",
            )
        )


def register(cli: click.Group) -> None:
    cli.add_command(files_cmd)
