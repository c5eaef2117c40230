"""``ctxos replay FILE``: replay a recorded agent session (Pi, Claude Code, OpenAI messages) through
context_os and compare what it assembles with the full transcript, model call by model call."""

from __future__ import annotations

import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import click

from ..context.session import Session
from ..harness.formats import FORMATS, Transcript, read_session
from ..harness.replay import TranscriptRow, replay_transcript
from ._common import emit_json, fails_cleanly, json_option, progress, store_from, table


@click.command("replay")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), help="The file's format (default: detected from its content)."
)
@click.option("--session", "session_id", metavar="ID", help="Session id to record under (default: replay-<time>).")
@click.option(
    "--verify",
    type=click.Choice(["all", "last", "none"]),
    default="all",
    show_default=True,
    help="Frames to re-render from the store at the end and check against their hash.",
)
@click.option("--per-turn/--no-per-turn", default=True, help="Print (or, with --json, include) the per-call table.")
@json_option
@click.pass_context
@fails_cleanly
def replay_cmd(
    ctx: click.Context, file: Path, fmt: str | None, session_id: str | None, verify: str, per_turn: bool, as_json: bool
) -> None:
    """Replay a session file: at every model call, the context the harness sent (the full
    transcript, uncompacted) against the one context_os assembles, with the same token estimate."""
    transcript = read_session(file, fmt)
    run_replay(
        ctx,
        transcript,
        file.name,
        session_id or "replay-" + datetime.now(UTC).strftime("%y%m%d%H%M%S"),
        verify=verify,
        per_turn=per_turn,
        as_json=as_json,
        source=str(file),
    )


def run_replay(
    ctx: click.Context,
    transcript: Transcript,
    label: str,
    session_id: str,
    *,
    verify: str,
    per_turn: bool,
    as_json: bool,
    source: str = "",
) -> None:
    """Replay ``transcript`` into the store and report it (``ctxos replay`` and ``ctxos demo``);
    exit 1 if a tool result was orphaned or a checked frame did not verify."""
    calls = sum(1 for k, m in enumerate(transcript.messages) if k and m.get("role") == "assistant")
    with store_from(ctx) as store:
        session = Session.open(store, session_id, harness=transcript.harness, workspace=transcript.cwd)
        with progress(range(calls), length=calls, label="replaying", enabled=not as_json) as bar:
            it = iter(bar)

            def tick(_: TranscriptRow) -> None:
                next(it, None)

            result = replay_transcript(transcript, session, file=source, verify=verify, on_turn=tick)
        summary = result.summary()
        if as_json:
            if per_turn:
                summary["per_turn"] = [asdict(r) for r in result.rows]
            emit_json(summary)
        else:
            if per_turn:
                click.echo(
                    table(
                        [
                            [
                                r.turn,
                                r.messages,
                                r.tokens_full,
                                r.tokens_assembled,
                                f"{100 * r.tokens_assembled / max(1, r.tokens_full):.0f}%",
                                f"{100 * r.tokens_prefix / max(1, r.tokens_assembled):.0f}%",
                                r.active,
                                r.changes,
                            ]
                            for r in result.rows
                        ],
                        ["turn", "msgs", "full", "assembled", "%", "cached", "active", "changes"],
                        "rrrrrrrr",
                    )
                )
                click.echo("")
            pct = 100 * result.tokens_assembled / max(1, result.tokens_full)
            pi = (
                f" (Pi's own compaction sent {result.tokens_pi_compacted:,})"
                if result.tokens_pi_compacted is not None
                else ""
            )
            click.echo(
                f"{label} ({result.format}): {result.turns} model calls replayed in {result.seconds:.1f}s "
                f"(peak RSS {result.peak_rss_mb:.0f} MB) into {store.url}\n"
                f"tokens sent: {result.tokens_assembled:,} with context_os vs {result.tokens_full:,} with the full "
                f"transcript ({pct:.1f}%){pi}\n"
                f"prefix stability: {result.prefix_stability:.3f} (share of the tokens sent that repeat the "
                "previous call's prefix)\n"
                f"edits: {result.edits_with_target_active}/{result.edits_total} with the file's current content in "
                f"context ({result.edits_with_target_text_shown} with the replaced text in view); calls showing a "
                f"stale file view: {result.stale_file_views_full} full, {result.stale_file_views_assembled} "
                f"context_os\n"
                f"orphaned tool results: {result.orphaned_tool_results}; frames verified: "
                f"{result.frames_verified}/{result.frames_checked} checked of {result.frames}\n"
                f"see it turn by turn: ctxos frames {session_id}; ctxos frame {session_id} {result.turns}"
            )
        if result.orphaned_tool_results or result.frames_verified != result.frames_checked:
            sys.exit(1)


def register(cli: click.Group) -> None:
    cli.add_command(replay_cmd)
