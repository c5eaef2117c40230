"""``ctxos index status|rebuild``: the keyword index every store keeps for recall.

``status`` never writes. ``rebuild`` drops the index and builds it again from every stored
version (a progress bar on a terminal); it says whether the index was missing or damaged before.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..sources.recall import vector_path
from ..sources.vectors import vector_status
from ._common import cell, counted, emit_json, fails_cleanly, json_option, stop_interrupted, store_from, table


def register(cli: click.Group) -> None:
    cli.add_command(index_group)


@click.group("index")
def index_group() -> None:
    """The keyword index: status and rebuild."""


@index_group.command("status")
@json_option
@click.pass_context
@fails_cleanly
def status_cmd(ctx: click.Context, as_json: bool) -> None:
    """Parts indexed, whether the index is current, its state."""
    with store_from(ctx, upgrade=True) as store:  # it moves the held-back texts in first
        report: dict[str, Any] = {"store": store.url, **store.index_status()}
        # the vectors beside the store, if recall ever embedded any (read without the model)
        report["vectors"] = vector_status(vector_path(store), int(report.get("last_seq") or 0))
    if as_json:
        emit_json(report)
    else:
        click.echo(table(_rows(report), ["field", "value"]))
        if report.get("state") not in ("ok", "none"):
            click.echo(f"the index is {report['state']}: searches scan the store; `ctxos index rebuild` repairs it")
        elif report.get("splits_cjk") is False:
            click.echo(
                "the index was made before it split Chinese, Japanese and Korean text into words:"
                " `ctxos index rebuild` makes it again so that keyword search finds words inside such text"
            )


@index_group.command("rebuild")
@json_option
@click.pass_context
@fails_cleanly
def rebuild_cmd(ctx: click.Context, as_json: bool) -> None:
    """Drop the index and build it again from every stored version."""
    with store_from(ctx, upgrade=True) as store:
        before = store.index_status()
        bar: Any = None
        shown = sys.stderr.isatty()

        def progress(done: int, total: int) -> None:
            nonlocal bar
            if not shown:
                return
            if bar is None:
                bar = click.progressbar(length=max(total, 1), label="indexing", file=sys.stderr)
                bar.__enter__()
            bar.update(done - bar.pos)

        try:
            try:
                parts = store.rebuild_index(progress)
            finally:
                if bar is not None:
                    bar.__exit__(None, None, None)
        except KeyboardInterrupt:
            # each batch is its own transaction: the next rebuild goes on from the last one
            if store.index_status().get("state") == "building":
                said = (
                    "the index is half built, and searches scan the store until it is done;"
                    " `ctxos index rebuild` goes on from where it stopped"
                )
            else:
                said = "nothing was changed"
            stop_interrupted(f"\ninterrupted: {said}")
        after = store.index_status()
    was = before.get("state")
    repaired = was in ("missing", "corrupt", "building")
    report = {
        "store": store.url,
        "parts": parts,
        "state_before": was,
        "repaired": repaired,
        "state": after.get("state"),
        "problem_before": before.get("problem"),
    }
    if as_json:
        emit_json(report)
        return
    if repaired:
        what = {"missing": "was missing", "corrupt": "was damaged", "building": "was half built"}[str(was)]
        click.echo(f"the index {what}: repaired, {counted(parts, 'part')} indexed")
    else:
        click.echo(f"rebuilt the index: {counted(parts, 'part')} indexed")


def _rows(report: dict[str, Any], prefix: str = "") -> list[list[str]]:
    rows: list[list[str]] = []
    for key, value in report.items():
        if isinstance(value, dict):
            rows += _rows(value, prefix + key + ".")
        else:
            rows.append([prefix + key.replace("_", " "), cell(key, value)])
    return rows
