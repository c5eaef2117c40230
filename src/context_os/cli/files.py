"""``ctxos files SESSION``: the files a session knows, with state and staleness; and the
path → file object resolution ``ctxos inspect PATH`` and ``ctxos evict PATH`` use."""

from __future__ import annotations

import os
from typing import Any

import click

from ..context.session import load_view
from ..objects import KINDS
from ..store import Store, Version
from ._common import emit_json, fails_cleanly, json_option, store_from, table

_ID_PREFIXES = tuple(f"{k}:" for k in KINDS)


def object_arg(store: Store, arg: str) -> str:
    """``arg`` if it is an object id; else the id of the file object at that path.

    A path is tried as a file (relative to the current directory, symlinks resolved), then as a
    workspace-relative path, then against every earlier path of every file object (a file that
    was renamed since). An unknown path is returned unchanged (the caller reports "no object").
    """
    if arg.startswith(_ID_PREFIXES):
        return arg
    absolute = os.path.realpath(os.path.expanduser(arg))
    ids = {v.id for v in store.find("file", {"abs_path": absolute})}
    if not ids:
        ids = {v.id for v in store.find("file", {"path": arg})}
    if not ids:
        for current in store.find("file"):
            for v in store.history(current.id, with_docs=True):
                meta = (v.doc or {}).get("meta", {})
                if meta.get("abs_path") == absolute or meta.get("path") == arg:
                    ids.add(current.id)
                    break
    if len(ids) > 1:
        raise click.ClickException(f"{arg!r} names several file objects: {', '.join(sorted(ids))}; pass an id")
    return ids.pop() if ids else arg


def file_fields(v: Version) -> dict[str, Any]:
    """Path and missing flag of a file version (empty for other kinds), for version tables."""
    doc = v.doc or {}
    if doc.get("kind") != "file":
        return {}
    meta = doc.get("meta", {})
    return {"path": meta.get("path"), "missing": bool(meta.get("missing"))}


def path_lines(versions: list[Version]) -> list[str]:
    """One line per file version where the path or presence changed: the file's path history."""
    lines: list[str] = []
    last: tuple[Any, Any] | None = None
    for n, v in enumerate(versions, 1):
        f = file_fields(v)
        if not f:
            return []
        key = (f["path"], f["missing"])
        if key != last:
            lines.append(f"  v{n}: {f['path']}" + (" (missing)" if f["missing"] else ""))
            last = key
    return lines


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
                "stale": doc is not None and doc.get("object_hash") != shown,
                "missing": bool(lm.get("missing")),
                "indexed": lm.get("indexed"),
                "tokens": o.tokens,
            }
        )
    return rows


@click.command("files")
@click.argument("session_id")
@json_option
@click.pass_context
@fails_cleanly
def files_cmd(ctx: click.Context, session_id: str, as_json: bool) -> None:
    """Files a session knows: path, state, version shown vs latest (stale), missing."""
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
