"""``ctxos objects inspect|evict``: one object, by id or, for a file, by path: its versions,
hashes and state changes at any time, and erasing it (leaked secrets). ``ctxos inspect`` and
``ctxos evict`` stay for one release as deprecated aliases.

A path resolves to its file object below the CLI (``files.index.find_file_object``).

It never writes, but through ``context.evict`` (``evict --yes``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from ..context.evict import (
    KEPT_KINDS,
    evict,
    evictions,
    forget_paths,
    holding,
    kind_of,
    no_object,
    path_holds,
    refuse_kept,
)
from ..context.load import content_lines, object_states, unified_diff, version_row
from ..context.view import INDEX_KEY
from ..errors import ContextOSError, InputError, NotFound
from ..files.index import find_file_object
from ..store import Store, Version
from ..store.base import now_ms
from ..times import parse_time
from ._common import (
    TEXT,
    DeprecatedAlias,
    command_hint,
    emit_json,
    fails_cleanly,
    json_option,
    one_line,
    printable,
    stop_interrupted,
    store_from,
    table,
)


@click.group("objects")
def objects() -> None:
    """One object, by id or file path: inspect, evict."""


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
            lines.append(f"  v{n}: {one_line(str(f['path']))}" + (" (missing)" if f["missing"] else ""))
            last = key
    return lines


def _tx_at(store: Store, object_id: str, at: int, said: str) -> int:
    """The transaction as of which the store knew ``object_id`` as it did at transaction time
    ``at``: the newest of its own versions' transactions at or before then (other transactions
    change nothing of it). ``NotFound`` when none was."""
    txs = [v.tx_id for v in store.history(object_id, with_docs=False) if v.tx_time <= at]
    if not txs:
        if not store.history(object_id, with_docs=False):
            raise no_object(store, object_id)
        raise NotFound(f"{object_id} was not in the store yet at {said} (transaction time)")
    return max(txs)


@objects.command("inspect")
@click.argument("object_id", type=TEXT)
@click.option(
    "--as-of", "as_of", metavar="TIME", help="Show the version in force at this valid time (ISO 8601 or epoch ms)."
)
@click.option("--tx", "tx_id", type=int, metavar="TX_ID", help="…as the store knew it at this transaction.")
@click.option(
    "--tx-time",
    "tx_time",
    metavar="TIME",
    help="…as the store knew it at this time (transaction time: ISO 8601 or epoch ms).",
)
@click.option("--diff", nargs=2, type=int, metavar="V1 V2", help="Unified diff of the content of two versions.")
@click.option("--states", is_flag=True, help="With --json: print the state changes instead of the versions.")
@click.option("--content", "show_content", is_flag=True, help="Also print the content of the version shown.")
@json_option
@click.pass_context
@fails_cleanly
def inspect_cmd(
    ctx: click.Context,
    object_id: str,
    as_of: str | None,
    tx_id: int | None,
    tx_time: str | None,
    diff: tuple[int, int] | None,
    states: bool,
    show_content: bool,
    as_json: bool,
) -> None:
    """An object's versions, hashes and state changes, at any time."""
    if diff and (as_of is not None or tx_id is not None or tx_time is not None):  # one or the other, silently
        raise click.UsageError("--diff compares two versions by their numbers: it takes no --as-of, --tx or --tx-time")
    if tx_id is not None and tx_time is not None:
        raise click.UsageError("--tx and --tx-time both say as of when: give one")
    with store_from(ctx) as store:
        object_id = find_file_object(store, object_id)
        if tx_time is not None:
            tx_id = _tx_at(store, object_id, parse_time(tx_time, "--tx-time"), tx_time)
        if as_of is not None or tx_id is not None:
            vt = parse_time(as_of, "--as-of") if as_of is not None else None
            if tx_id is not None:  # asked the same of every store (an XTDB node says "out of sync")
                latest = store.latest_tx_id()
                if tx_id < 0 or latest is None or tx_id > latest:
                    newest = "none yet" if latest is None else f"the newest is {latest}"
                    raise InputError(f"--tx {tx_id} is no transaction of {store.url} (from 0; {newest})")
            v = store.get(object_id, vt, tx_id)
            if v is None:
                if not store.history(object_id, with_docs=False) and evictions(store, [object_id]):
                    # erased, not absent then: no version of it is left at any time
                    raise no_object(store, object_id)
                when = "now" if as_of is None else f"at {as_of}"
                raise NotFound(f"{object_id} did not exist {when}" + ("" if tx_id is None else f" as of tx {tx_id}"))
            # its number in the object's history (as the store knows it now), as the table says it
            n = next(
                (
                    k
                    for k, h in enumerate(store.history(object_id), 1)
                    if (h.valid_time, h.tx_id) == (v.valid_time, v.tx_id)
                ),
                0,
            )
            row = version_row(n, v)
            row["doc"] = v.doc
            if as_json:
                emit_json(row)
                return
            for k, val in row.items():
                if k != "doc":
                    click.echo(printable(f"{k:14} {val}"))
            if show_content:
                click.echo(printable("".join(content_lines(v.doc))))
            return
        versions = store.history(object_id, with_docs=True)
        if not versions:
            raise no_object(store, object_id)
        if diff:
            a, b = diff
            for n in (a, b):
                if not 1 <= n <= len(versions):
                    raise click.BadParameter(
                        f"version {n} of {object_id} does not exist (it has 1..{len(versions)})", param_hint="'--diff'"
                    )
            out = unified_diff(
                content_lines(versions[a - 1].doc),
                content_lines(versions[b - 1].doc),
                f"{object_id}@v{a}",
                f"{object_id}@v{b}",
            )
            if as_json:
                emit_json({"id": object_id, "from": a, "to": b, "diff": out})
            else:
                click.echo(printable(out) or "(no difference in content)")
            return
        rows = [version_row(n, v) | file_fields(v) for n, v in enumerate(versions, 1)]
        changes = object_states(store, object_id)
        if as_json:
            emit_json(changes if states else rows)
            return
        click.echo(f"{one_line(object_id)}: {len(rows)} version(s)")
        click.echo(
            table(
                [
                    [
                        r["version"],
                        r["valid_time"],
                        r["tx_time"],
                        r["tx_id"],
                        "deleted" if r["deleted"] else r["content_hash"][:19],
                        "" if r["deleted"] else r["meta_hash"][:19],
                        "" if r["deleted"] else r["object_hash"][:19],
                    ]
                    for r in rows
                ],
                ["v", "valid time", "tx time", "tx", "content hash", "meta hash", "object hash"],
                "rlllrll",
            )
        )
        paths = path_lines(versions)
        if paths:
            click.echo("\npaths (the id is kept across renames):")
            click.echo("\n".join(paths))
        if changes:
            click.echo(f"\nstate changes ({len(changes)}):")
            click.echo(
                table(
                    [
                        [
                            c["time"],
                            c["session"],
                            c["turn"],
                            c["state"] + (" pinned" if c["pinned"] else ""),
                            c["actor"],
                            c["reason"],
                        ]
                        for c in changes
                    ],
                    ["time", "session", "turn", "state", "by", "why"],
                    "llrlll",
                )
            )
        if show_content:
            click.echo(printable("".join(content_lines(versions[-1].doc))))


@objects.command("evict")
@click.argument("object_id", type=TEXT, required=False)
@click.option(
    "--containing",
    type=TEXT,
    metavar="TEXT",
    help="Instead of one object: every object any version of which holds TEXT (a leaked key and"
    " every copy of it); '-' reads TEXT from stdin (asked for, not echoed, on a terminal), which keeps it"
    " out of the shell's history.",
)
@click.option("--yes", is_flag=True, help="Really erase it; without it nothing is changed.")
@json_option
@click.pass_context
@fails_cleanly
def evict_cmd(ctx: click.Context, object_id: str | None, containing: str | None, yes: bool, as_json: bool) -> None:
    """Erase an object, or all objects holding a text; needs --yes."""
    if (object_id is None) == (containing is None):
        raise click.UsageError("give an object id or path, or --containing TEXT (not both)")
    with store_from(ctx, upgrade=yes) as store:  # (without --yes it only reads)
        if containing is not None:
            _evict_containing(ctx, store, containing, yes, as_json)
            return
        assert object_id is not None
        oid = find_file_object(store, object_id)
        versions = store.history(oid, with_docs=True)
        if versions:  # a session's own record is refused before it is said what would be erased
            refuse_kept(oid, kind_of(oid, versions))
            _refuse_shown_block(store, oid, versions)
        if not versions:
            how = evictions(store, [oid]).get(oid) if yes else None
            if how is None:
                raise no_object(store, oid)
            _finish(ctx, store, oid, how, as_json)
            return
        result: dict[str, Any] = {"id": oid, "versions": len(versions), "evicted": False}
        if not yes:
            if as_json:
                emit_json(result)
            else:
                click.echo(
                    f"{one_line(oid)}: {len(versions)} version(s) would be erased, in every time. "
                    "Frames that showed it will no longer verify. Pass --yes to erase."
                )
            ctx.exit(1)
        since, after = now_ms(), store.latest_tx_id()
        try:
            result.update(evict(store, oid, reason="ctxos evict"))
        except KeyboardInterrupt:
            _cut_short(store, [], [oid], since, after, f"`{command_hint('objects', 'evict', oid, '--yes')}`")
        if as_json:
            emit_json(result)
        else:
            quoted = result["derived"]
            also = f", with the {len(quoted)} recall hit(s) that quoted it ({', '.join(quoted)})" if quoted else ""
            said = f"{oid}: {len(versions)} version(s) erased (tx {result['tx_id']}){also}; running sessions drop it"
            click.echo(printable(said) + " at their next turn. Frames that showed it no longer verify.")
        if result["left_in_files"]:
            _left_in_files(store)
            ctx.exit(1)


def _refuse_shown_block(store: Store, oid: str, versions: list[Version]) -> None:
    """``InputError`` for a block (a piece of rendered context) whose object is still stored: its
    text is the object's, which a running session shows again (naming the block it erased: its
    next frames no longer verify), so erasing the block alone erases nothing. The object is what
    to evict; its blocks go with it. A block whose object is gone may go."""
    if kind_of(oid, versions) != "block":
        return
    shown = next((((v.doc or {}).get("meta") or {}).get("object") for v in reversed(versions) if v.doc), None)
    if shown == INDEX_KEY:  # the lines of the objects a session knows: rendered again from them
        raise InputError(
            f"{oid} is not evicted alone: it is a piece of a session's object index, made again from the"
            " objects it lists (a running session would show it again, and its next frames would not verify):"
            " evict the object whose line holds the text, or every object holding it with --containing TEXT"
        )
    if isinstance(shown, str) and store.history(shown, with_docs=False):
        raise InputError(
            f"{oid} is not evicted alone: it is a piece of rendered context showing {shown}, which still holds"
            f" its text (a running session would show it again, and its next frames would not verify): evict"
            f" {shown}, which takes its blocks with it, or every object holding the text with --containing TEXT"
        )


def _finish(ctx: click.Context, store: Store, oid: str, how: str, as_json: bool) -> None:
    """``evict ID --yes`` of an object evicted already: the store's files are rebuilt without what
    was erased (an eviction cut short by Ctrl-C, or a crash, after it committed may have left its
    bytes in them)."""
    left = not store.scrub()
    if as_json:
        emit_json({"id": oid, "versions": 0, "evicted": False, "evicted_before": how, "left_in_files": left})
    else:
        click.echo(printable(f"{oid}: already {how}; the store's files were rebuilt without what was erased."))
    if left:
        _left_in_files(store)
        ctx.exit(1)


def _cut_short(
    store: Store,
    erased: list[str],
    pending: list[str],
    since: int,
    after: int | None,
    again: str,
    rewritten: Sequence[str] = (),
) -> NoReturn:
    """Ctrl-C in an eviction: say what it erased and what finishes it, exit status 130. ``erased``:
    the objects evicted before; ``pending``: those it was evicting (their tombstones, written
    since ``since``/after tx ``after``, tell whether it committed); ``rewritten``: the tombstones
    written anew without their file's path (``forget_paths``), the old form evicted. An SQLite
    store's file is rebuilt after each eviction commits, an XTDB store's keyword index drops the
    text: cut short, the erased bytes may still be in them (``Store.scrub`` finishes it)."""
    try:
        erased = erased + list(evictions(store, pending, since=since, after_tx=after))
    except ContextOSError as e:
        said = f"\ninterrupted: whether it was erased could not be read ({e}); {again} finishes it"
        stop_interrupted(printable(said))
    if not erased and not rewritten:
        stop_interrupted("\ninterrupted: nothing was erased")
    done = [f"{_named(erased)} erased"] if erased else []
    if rewritten:
        done.append(f"{_named(rewritten)} written anew with a hash of the file's path in place of the path")
    stop_interrupted(
        printable(
            f"\ninterrupted: {'; '.join(done)}, but the erased bytes may still be in the files of {store.url} on"
            f" this machine (an SQLite store's file, an XTDB store's keyword index: they are rebuilt after an"
            f" eviction): {again} finishes the erasure"
        )
    )


def _named(ids: Sequence[str]) -> str:
    """Ids as a message names them: each, or how many when there are several."""
    return ", ".join(map(one_line, ids)) if len(ids) < 4 else f"{len(ids)} objects"


def _left_in_files(store: Store) -> None:
    click.echo(
        f"Warning: the erased bytes are still in the files of {store.url}: another process kept reading "
        "an older snapshot of it. They go once it is done and the store's log is folded back (the next "
        "eviction, or the last process closing the store).",
        err=True,
    )


def _text_from_stdin() -> str:
    """``--containing -``: the text, from stdin. On a terminal it is asked for and not echoed (a
    secret, typed or pasted; Ctrl-C or Ctrl-D at the prompt stops the command): a bare read of
    stdin waited there with no word of what for, until Ctrl-D, and showed the secret as typed."""
    if not sys.stdin.isatty():
        return sys.stdin.read().removesuffix("\n").removesuffix("\r")
    try:
        text: str = click.prompt(
            "The text to look for (not shown; Enter ends it)", default="", show_default=False, hide_input=True, err=True
        )
    except click.Abort:
        raise KeyboardInterrupt from None
    return text


def _evict_containing(ctx: click.Context, store: Store, text: str, yes: bool, as_json: bool) -> None:
    """``evict --containing TEXT``: every object holding ``text``, listed, then erased with --yes.
    The text itself is never printed."""
    if text == "-":
        text = _text_from_stdin()
    if not text.strip():
        raise InputError("--containing: the text to look for is empty")
    found = holding(store, text)
    kept = [o for o in found if o["kind"] in KEPT_KINDS]
    if not yes:
        if as_json:
            emit_json({"objects": found, "kept": kept, "evicted": False})
        else:
            click.echo(f"{len(found)} object(s) hold the text" + (":" if found else "."))
            for o in found:
                if o["kind"] == "tombstone" and path_holds(store.doc(o["id"]), text):
                    left = " (its file path: --yes writes it anew with the path's hash in its place)"
                else:
                    left = " (kept: a session's own record)" if o in kept else ""
                click.echo(f"  {one_line(o['id'])}: {o['versions']} version(s){left}")
            if found:
                click.echo("Pass --yes to erase them, in every time. Frames that showed them will no longer verify.")
        ctx.exit(1 if found else 0)
    evicted: list[str] = []
    rewritten: list[str] = []
    left_in_files = False
    since, after, pending = now_ms(), store.latest_tx_id(), []
    try:
        # objects before blocks: an object takes the blocks that showed it with it
        for o in sorted((o for o in found if o not in kept), key=lambda o: (o["kind"] == "block", o["id"])):
            if o["id"] in evicted or not store.history(o["id"], with_docs=False):
                continue  # gone with an object evicted before it
            pending = [o["id"]]
            done = evict(store, o["id"], reason="ctxos evict --containing")
            evicted += [o["id"], *done["derived"]]
            left_in_files = left_in_files or bool(done["left_in_files"])
            pending = []
        # a file's tombstone written before 2026-11-30 keeps its path: the path's hash takes its place
        forget_paths(store, text, rewritten)
    except KeyboardInterrupt:
        _cut_short(store, evicted, pending, since, after, "the same command run again", rewritten)
    if not evicted and not rewritten:
        # nothing left to erase: a run of it cut short after its last eviction committed may
        # have left the erased bytes in the files
        left_in_files = not store.scrub()
    remaining = holding(store, text)
    if as_json:
        emit_json(
            {
                "objects": found,
                "kept": kept,
                "evicted": True,
                "evicted_ids": evicted,
                "tombstones_rewritten": rewritten,
                "remaining": remaining,
                "left_in_files": left_in_files,
            }
        )
    elif not found:
        click.echo(
            "No object holds the text: nothing to erase (the store's files were rebuilt without what was erased)."
        )
    else:
        click.echo(
            f"{len(evicted)} object(s) erased, with the blocks that showed them; running sessions drop them at"
            " their next turn. Frames that showed them no longer verify."
        )
        for t in rewritten:
            click.echo(f"  {one_line(t)}: written anew with a hash of the file's path in place of the path")
        for o in remaining:
            held = f"  still held by {one_line(o['id'])} ({o['versions']} version(s))"
            click.echo(f"{held}: a session's own record, kept")
    if left_in_files:
        _left_in_files(store)
    if remaining or left_in_files:
        ctx.exit(1)


def register(cli: click.Group) -> None:
    cli.add_command(objects)
    cli.add_command(DeprecatedAlias("inspect", inspect_cmd, use="objects inspect"))
    cli.add_command(DeprecatedAlias("evict", evict_cmd, use="objects evict"))
