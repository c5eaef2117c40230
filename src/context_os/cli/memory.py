"""``ctxos memory [show|trust|untrust|remember]``: the markdown memory scopes of a workspace.
``show`` is the default: ``ctxos memory`` alone (or with ``--workspace``, ``--json``) shows one
row per scope.

``show`` never writes. ``trust``/``untrust`` edit only the user's list of trusted workspaces
(``<user data dir>/memory.json``); ``remember`` only appends one line (and maybe a pointer) to a
memory file."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..sources.memory import (
    MemoryScope,
    MemoryScopes,
    listed_path,
    trust_workspace,
    trusted_root,
    untrust_workspace,
)
from ._common import DefaultGroup, emit_json, fails_cleanly, json_option, printable, table

_DIRECTORY = click.Path(file_okay=False, path_type=Path)

workspace_option = click.option(
    "--workspace",
    "-w",
    type=_DIRECTORY,
    default=".",
    show_default=True,
    help="The workspace (repository) root.",
)


def workspace_argument(command: Callable[..., None]) -> Callable[..., None]:
    """The workspace as an optional argument too (``ctxos memory trust ~/src/app``, as ``direnv
    allow`` and ``mise trust`` take theirs), or ``--workspace``; both, naming two, is a usage
    error. The command gets ``workspace``, default the current directory."""

    @click.argument("path", required=False, type=_DIRECTORY)
    @click.option(
        "--workspace",
        "-w",
        type=_DIRECTORY,
        default=None,
        help="The workspace (repository) root, as PATH.  [default: .]",
    )
    @functools.wraps(command)
    def run(path: Path | None, workspace: Path | None, **kwargs: Any) -> None:
        if path is not None and workspace is not None and path.absolute() != workspace.absolute():
            raise click.UsageError(f"two workspaces named: PATH {path} and --workspace {workspace}")
        command(workspace=path or workspace or Path("."), **kwargs)

    return run


@click.group("memory", cls=DefaultGroup, default="show", bare_default=True)
def memory() -> None:
    """Markdown memory scopes (alone: show them)."""


def _row(s: MemoryScope) -> dict[str, Any]:
    return {
        "scope": s.scope,
        "id": s.id,
        "path": str(s.index),
        "exists": s.exists,
        "used": s.used,
        "bytes": s.bytes,
        "lines": s.lines,
        "injected_bytes": s.injected_bytes,
        "injected_lines": s.injected_lines,
        "capped": s.capped,
        "binary": s.binary,
        "topics": s.topics,
        "archived": s.archived,
        "error": s.error,
    }


@memory.command("show")
@workspace_argument
@click.option("--pi/--no-pi", "include_pi", default=None, help="Include Pi's scopes (default: memory.json).")
@json_option
@fails_cleanly
def show_cmd(workspace: Path, include_pi: bool | None, as_json: bool) -> None:
    """One row per scope: path, trust, size, what enters the context."""
    mem = MemoryScopes(workspace, include_pi=include_pi)
    by = mem.trusted_by()
    rows = [_row(s) for s in mem.scopes()]
    report = {
        "workspace": str(mem.workspace),
        "trusted": by is not None,
        "trusted_by": by,
        "settings": str(mem.settings_path),
        "max_lines": mem.max_lines,
        "max_bytes": mem.max_bytes,
        "scopes": rows,
    }
    if as_json:
        emit_json(report)
        return
    why = {None: "no", "option": "yes"}.get(by, f"yes (listed: {by})")
    click.echo(f"workspace: {mem.workspace}\ntrusted: {why}  (list: {mem.settings_path})\n")
    click.echo(
        table(
            [
                [
                    r["scope"],
                    "yes" if r["used"] else "no (untrusted)",
                    "yes" if r["exists"] else "no",
                    f"{r['bytes']:,}",
                    "-" if r["lines"] is None else f"{r['lines']:,}",
                    f"{r['injected_bytes']:,}" + (" capped" if r["capped"] else " binary" if r["binary"] else ""),
                    r["topics"],
                    r["archived"],
                    r["path"],
                ]
                for r in rows
            ],
            ["scope", "used", "exists", "bytes", "lines", "injected", "topics", "archived", "path"],
            "llllrrrrl",
        )
    )
    for r in rows:
        if r["error"]:
            click.echo(printable(f"\n{r['scope']}: not read: {r['error']}"))
        elif r["binary"]:
            click.echo(
                f"\n{r['scope']}: MEMORY.md is not a text file (it holds NUL bytes): nothing of it enters the "
                "context, only a note saying so"
            )
        elif r["capped"]:
            click.echo(
                f"\n{r['scope']}: MEMORY.md is over the cap ({mem.max_lines} lines / {mem.max_bytes:,} bytes): only "
                "its head enters the context; move detail to topic files or archive/"
            )
    unused = [s for s in mem.scopes() if s.scope.endswith("project") and s.exists and not s.used]
    if by is None and unused:  # (the folder it lives in: a repository's root, for one of its folders)
        click.echo(f"\nproject memory exists but is not used: `ctxos memory trust -w {unused[0].folder}` uses it")


@memory.command("trust")
@workspace_argument
@json_option
@fails_cleanly
def trust_cmd(workspace: Path, as_json: bool) -> None:
    """Trust a workspace: its project memory enters the context."""
    root = trust_workspace(workspace)
    if as_json:
        emit_json({"workspace": str(root), "trusted": True})
    else:
        click.echo(f"trusted {root}: its .context_os/memory/MEMORY.md enters the context")


@memory.command("untrust")
@workspace_argument
@json_option
@fails_cleanly
def untrust_cmd(workspace: Path, as_json: bool) -> None:
    """Stop trusting a workspace, even one deleted.

    A workspace listed as trusted is taken off the list whether or not its directory still
    exists: a clone made at its path later is not trusted with it."""
    # not through MemoryScopes, which refuses a directory that is gone: a workspace deleted since
    # stayed trusted, and a clone made at its path later was trusted with it
    removed = untrust_workspace(workspace)
    where, still = listed_path(workspace), trusted_root(workspace)
    if as_json:
        emit_json({"workspace": str(where), "removed": removed, "trusted": still is not None})
        return
    click.echo(f"{'removed' if removed else 'not listed'}: {where}")
    if still is not None:
        click.echo(f"still trusted: it lies inside the listed {still}")


@memory.command("remember")
@click.argument("text")
@click.option(
    "--scope", type=click.Choice(["project", "global"]), default="project", show_default=True, help="Where to write."
)
@click.option("--topic", help="Append to <topic>.md instead (and point to it from MEMORY.md once).")
@workspace_option
@json_option
@fails_cleanly
def remember_cmd(text: str, scope: str, topic: str | None, workspace: Path, as_json: bool) -> None:
    """Append one fact to a scope's MEMORY.md (or a topic file)."""
    got = MemoryScopes(workspace).remember(text, "global" if scope == "global" else "project", topic)
    if as_json:
        emit_json(
            {
                "scope": got.scope,
                "path": str(got.path),
                "line": got.line,
                "pointer": got.pointer,
                "index": str(got.index) if got.index else None,
            }
        )
        return
    click.echo(printable(f"{got.path}: {got.line}"))
    if got.pointer:
        click.echo(printable(f"{got.index}: {got.pointer}"))


def register(cli: click.Group) -> None:
    cli.add_command(memory)
