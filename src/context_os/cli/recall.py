"""``ctxos recall QUERY``: search everything the store holds, as the agent's recall tool does.

Hybrid (BM25 + vectors) when an embedder is installed (``context_os[vectors]``), keyword only
otherwise, and the output says which. Vectors live beside the store (``<store>.vectors``); parts
not embedded yet are embedded first, with a progress bar on a terminal (``--embed-for`` bounds
that, the rest found by keyword only; ``--embedder none`` skips it). Vectors made by another
embedder are dropped only with ``--rebuild-vectors``; on a read-only store (``?mode=ro``) nothing
is embedded, the vectors there are searched as they are. Of the store's own file it writes the
keyword index only: a search first moves the texts the index holds back into its FTS5 table; no
document, no version. A command that writes, it upgrades a store of an older release.
Memory files (those of the global scope and of ``--workspace``'s trusted project scope) are read
as they are now, whole, and a hit names the file and its lines.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from .. import times
from ..errors import ConfigError, EmbedderUnavailable
from ..sources.memory import MemoryScopes
from ..sources.recall import Recall, RecallResult, check_search, open_recall
from ..sources.when import listed
from ..store import Store
from ._common import (
    TEXT,
    counted,
    embedder_option,
    emit_json,
    fails_cleanly,
    iso,
    json_option,
    progress,
    rebuild_vectors_option,
    recall_embedder,
    stop_interrupted,
    store_from,
    table,
)

PREVIEW = 70
CATCH_UP_BATCH = 32
"""Parts embedded between two looks at the clock and the progress bar."""


def register(cli: click.Group) -> None:
    cli.add_command(recall_cmd)


@click.command("recall")
@click.argument("query", type=TEXT)
@click.option("-k", "--k", "k", type=click.IntRange(min=1), default=10, show_default=True, help="How many hits.")
@click.option(
    "--kinds", type=TEXT, help="Only these kinds, comma-separated (chat, toolcall, file, memory, message, recall)."
)
@click.option("--session", "session_id", type=TEXT, metavar="ID", help="Only this session's objects.")
@click.option("--as-of", "as_of", metavar="TIME", help="What was valid and known then (ISO 8601 or epoch ms).")
@click.option(
    "--workspace",
    "-w",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=".",
    show_default=True,
    help="Whose memory files to search as they are now: the global scope's and, once trusted, this"
    " workspace's project scope's.",
)
@embedder_option
@click.option(
    "--embed-for",
    "embed_for",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Embed parts not embedded yet for at most this long, then search (those left by keyword only;"
    " the next recall goes on from there). Default: all of them first.",
)
@rebuild_vectors_option
@json_option
@click.pass_context
@fails_cleanly
def recall_cmd(
    ctx: click.Context,
    query: str,
    k: int,
    kinds: str | None,
    session_id: str | None,
    as_of: str | None,
    workspace: Path,
    embedder: str,
    embed_for: float | None,
    rebuild_vectors: bool,
    as_json: bool,
) -> None:
    """Search past messages, tool outputs, files and memories."""
    wanted = [x.strip() for x in kinds.split(",") if x.strip()] if kinds else None
    valid_time = times.parse_time(as_of, "--as-of") if as_of is not None else None  # named as given
    check_search(query, k=k, kinds=wanted, as_of=valid_time)  # before anything is loaded or embedded
    memory, unread = None, None
    try:
        memory = MemoryScopes(workspace)
        memory.id_prefixes()  # reads memory.json: a broken one is said, not fatal
    except ConfigError as e:
        memory, unread = None, f"memory files not searched: {e}"
    with store_from(ctx, upgrade=True) as store:
        recall = open_recall(store, recall_embedder(store, embedder, rebuild=rebuild_vectors), background=False)
        try:
            left = 0
            if recall.vectors is not None and not recall.vectors.read_only:
                left = _catch_up(recall.vectors, quiet=as_json, seconds=embed_for)
            if embed_for is None:
                _embed_memory(recall, memory, quiet=as_json)
                recall.memory_embed = None  # every memory passage not embedded yet, as every part
            result = recall.search(query, k=k, kinds=wanted, session=session_id, as_of=valid_time, memory=memory)
            paths = _paths(store, result)
        finally:
            recall.close()
    if unread:
        result.note = unread if result.note is None else f"{result.note}; {unread}"
    if left:
        unembedded = f"{counted(left, 'part')} not embedded yet: found by keyword only"
        result.note = unembedded if result.note is None else f"{result.note}; {unembedded}"
    if as_json:
        emit_json(_report(result, paths))
        return
    click.echo(f"{result.mode}: {counted(len(result.hits), 'hit')}" + (f" ({result.note})" if result.note else ""))
    each, more = listed(result.periods)
    for p in each:
        click.echo(f"the query names {p.text!r}: {p.days} (what was said then ranks higher)")
    if more is not None:
        click.echo(f"the query names {more[0]:,} more periods: {more[1]} (what was said then ranks higher)")
    if result.hits:
        head = ["#", "kind", "id", "part", "score", "bm25", "vector", "session or path", "text"]
        click.echo(table(_rows(result, paths), head))


def _embed_memory(recall: Recall, memory: MemoryScopes | None, *, quiet: bool) -> None:
    """Embed the memory files' passages that have no vector yet, a slice at a time, with a
    progress bar on a terminal: each slice is kept as it is done, so Ctrl-C keeps what was
    embedded (the search embedded them all at once: no progress, and an interrupt lost them)."""
    if memory is None or recall.vectors is None:
        return
    vectors = recall.vectors
    try:
        texts = recall.unembedded_passages(memory)
    except ConfigError:  # a memory.json it cannot read: the search says so
        return
    if not texts:
        return
    if len(texts) > CATCH_UP_BATCH and not sys.stderr.isatty() and not quiet:
        click.echo(f"embedding {counted(len(texts), 'memory passage')} not embedded yet before searching", err=True)
    done = 0
    try:
        with progress(range(0), length=len(texts), label="embedding memory", enabled=not quiet) as bar:
            for n in range(0, len(texts), CATCH_UP_BATCH):
                part = texts[n : n + CATCH_UP_BATCH]
                vectors.loose_vectors(part)
                done += len(part)
                bar.update(len(part))
    except EmbedderUnavailable:
        return  # the search embeds none either, and says so: by keyword
    except KeyboardInterrupt:
        stop_interrupted(
            f"\ninterrupted: {done:,} of {counted(len(texts), 'memory passage')} embedded, kept beside the store;"
            " the next `ctxos recall` goes on from there (--embed-for SECONDS bounds it, --embedder none searches now)"
        )


def _catch_up(vectors: Any, *, quiet: bool, seconds: float | None) -> int:
    """Embed what the store holds that the vectors do not, for at most ``seconds`` (None: all of
    it), with a progress bar on a terminal and one line on stderr otherwise; how many of the parts
    pending at the start are left, by how far the cursor moved (not asked again: ``counts``
    checks the index)."""
    # what was evicted since leaves the sidecar now, even when nothing is left to embed (a
    # catch-up does it first, but none runs then): its vectors are derived from the erased text
    vectors.forget_evicted()
    pending = int(vectors.counts()["pending"] or 0)
    if not pending:
        return 0
    deadline = None if seconds is None else time.monotonic() + seconds
    start = vectors.cursor
    stopped = caught_up = False

    def late() -> bool:
        nonlocal stopped
        stopped = deadline is not None and time.monotonic() >= deadline
        return stopped

    def batches() -> Iterator[int]:
        nonlocal caught_up
        # small batches: the clock and the progress bar are looked at between them
        while deadline is None or time.monotonic() < deadline:
            # the deadline is looked at before every slice too: a batch of long parts takes
            # a minute on a busy machine, far past what --embed-for allowed
            done = vectors.catch_up(max_parts=CATCH_UP_BATCH, stop=late)
            if not done:
                # nothing taken: all embedded, with what arrived meanwhile; or the deadline
                # passed before the first slice (the catch-up's own looks took that long)
                caught_up = not stopped
                return
            yield done

    if pending > CATCH_UP_BATCH and not sys.stderr.isatty():
        bound = "" if seconds is None else f" for at most {seconds:g} s"
        click.echo(
            f"embedding {counted(pending, 'part')} not embedded yet{bound} before searching, with"
            f" {vectors.embedder.name} (--embed-for SECONDS bounds it, --embedder none searches by keyword only)",
            err=True,
        )
    try:
        with progress(range(0), length=pending, label="embedding", enabled=not quiet) as bar:
            for done in batches():
                bar.update(done)  # (parts: iterating the batches moved it one step a batch)
    except KeyboardInterrupt:
        # each slice commits with the cursor: what was embedded stays, the next recall goes on.
        # Counted by the cursor: a batch cut short returned no count, its slices were committed
        done = min(pending, max(0, vectors.cursor - start))
        stop_interrupted(
            f"\ninterrupted: {done:,} of {counted(pending, 'part')} embedded, kept beside the store; the next"
            " `ctxos recall` goes on from there (--embed-for SECONDS bounds it, --embedder none searches now)"
        )
    # what was embedded, by the cursor: a slice counts once committed, whatever stopped the rest
    return 0 if caught_up else max(0, pending - max(0, vectors.cursor - start))


def _paths(store: Store, result: RecallResult) -> dict[str, str]:
    """The path of each hit of a file (or a memory file), as the version it was found in names it."""
    out: dict[str, str] = {}
    for h in result.hits:
        if h.path is not None:  # lines of a memory file as it is now
            out[h.id] = h.path
        elif h.session is None and h.id not in out:
            v = store.get(h.id, h.ref.get("valid_time"), h.ref.get("tx_id"))
            path = (v.doc or {}).get("meta", {}).get("path") if v is not None else None
            if isinstance(path, str):
                out[h.id] = path
    return out


def _report(result: RecallResult, paths: dict[str, str]) -> dict[str, Any]:
    return {
        "query": result.query,
        "mode": result.mode,
        "note": result.note,
        "periods": [{"text": p.text, "start": times.iso(p.start), "end": times.iso(p.end)} for p in result.periods],
        "hits": [
            {
                "rank": h.rank,
                "id": h.id,
                "kind": h.kind,
                "part": h.part,
                "session": h.session,
                "path": paths.get(h.id),
                "score": h.score,
                # to 6 places, as the fused score is (the rest is float noise: 3.7040498637065924)
                "bm25": {"score": _places(h.bm25_score), "rank": h.bm25_rank},
                "vector": {"score": _places(h.vector_score), "rank": h.vector_rank},
                "same_text": h.same_text,
                "lines": list(h.lines) if h.lines else None,
                "ref": {**h.ref, "valid_time_iso" if h.path is None else "mtime_iso": iso(h.valid_time)},
                "text": h.text,
            }
            for h in result.hits
        ],
        "timings_ms": result.timings_ms,
    }


def _places(score: float | None) -> float | None:
    return None if score is None else round(score, 6)


def _rank(score: float | None, rank: int | None) -> str:
    return "" if rank is None or score is None else f"{rank} ({score:.2f})"


def _rows(result: RecallResult, paths: dict[str, str]) -> list[list[Any]]:
    rows = []
    for h in result.hits:
        line = " ".join(h.text.split())
        if h.same_text:  # the other parts with this very text, left out
            line = f"(+{h.same_text} same) {line}"
        rows.append(
            [
                h.rank,
                h.kind,
                h.id,
                h.part,
                f"{h.score:.3f}",
                _rank(h.bm25_score, h.bm25_rank),
                _rank(h.vector_score, h.vector_rank),
                h.session or paths.get(h.id, ""),
                line if len(line) <= PREVIEW else line[: PREVIEW - 1] + "…",
            ]
        )
    return rows
