"""``ctxos replay FILE``: replay a recorded agent session (Pi, Claude Code, Codex CLI, Gemini CLI,
SWE-agent, OpenHands, OpenAI messages) through context_os and compare what it assembles with the
full transcript, model call by model call. A file holding several sessions (Claude Code's and
Gemini CLI's sub-agents, OpenHands records) replays each as its own session.

It never writes to the store but through the session the replay drives."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from ..replay import FORMATS, MAX_SESSION_BYTES, read_sessions
from ._common import TEXT, fails_cleanly, jobs_option, json_option, run_replay


@click.command("replay")
# a plain path: read_sessions refuses what is not a readable regular file, with a typed error
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), help="The file's format (default: detected from its content)."
)
@click.option(
    "--session",
    "session_id",
    type=TEXT,
    metavar="ID",
    help="Session id to record under (default: replay-<time>, then -2, -3, … if taken); a sidechain or record goes"
    " under ID~<its label>.",
)
@click.option(
    "--only",
    type=TEXT,
    metavar="ID",
    help="Of a file holding several sessions, replay only the one with this id or label (an OpenCode"
    " database's session with its sub-agents, a sidechain, an OpenHands record).",
)
@click.option(
    "--verify",
    type=click.Choice(["all", "last", "none"]),
    default="all",
    show_default=True,
    help="Frames to re-render from the store at the end and check against their hash.",
)
@jobs_option
@click.option("--per-turn/--no-per-turn", default=True, help="Print (or, with --json, include) the per-call table.")
@click.option(
    "--append",
    is_flag=True,
    help="Add to the session if it already exists (its messages past what it holds); without it, refuse.",
)
@click.option(
    "--max-file-mb",
    type=click.IntRange(1),
    default=MAX_SESSION_BYTES // 2**20,
    show_default=True,
    help="Refuse session files larger than this many MiB.",
)
@json_option
@click.pass_context
@fails_cleanly
def replay_cmd(
    ctx: click.Context,
    file: Path,
    fmt: str | None,
    session_id: str | None,
    only: str | None,
    verify: str,
    jobs: int | None,
    per_turn: bool,
    append: bool,
    max_file_mb: int,
    as_json: bool,
) -> None:
    """Replay a recorded session file and measure every model call.

    At every model call, the context the harness sent (the full transcript, uncompacted) against
    the one context_os assembles, with the same token estimate. Formats: Pi, Claude Code (its
    sub-agents' sidechains replayed after it, each as its own session), Codex CLI rollouts, Gemini
    CLI sessions (its sub-agents too), SWE-agent and mini-swe-agent trajectories, OpenHands event
    streams (each record of an output.jsonl its own session), Cline task histories, OpenCode
    sessions (`opencode export ID > session.json`, or its database, each session its own), OpenAI or
    Anthropic messages."""
    transcripts = read_sessions(file, fmt, max_bytes=max_file_mb * 2**20, only=only)
    run_replay(
        ctx,
        transcripts,
        file.name,
        session_id if session_id is not None else "replay-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S"),
        verify=verify,
        jobs=jobs,
        per_turn=per_turn,
        as_json=as_json,
        append=append,
        named=session_id is not None,
        file=str(file),
    )


def register(cli: click.Group) -> None:
    cli.add_command(replay_cmd)
