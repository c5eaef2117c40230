"""``ctxos demo``: replay a bundled, real coding session through context_os and show the savings.

Like every command module it never imports another command module and never writes to
the store but through the library (here: a replay)."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from ..replay import demo_transcript
from ._common import TEXT, command_hint, fails_cleanly, json_option, run_replay


@click.command("demo")
@click.option(
    "--session", "session_id", type=TEXT, metavar="ID", help="Session id to record under (default: demo-<time>)."
)
@click.option("--no-verify", is_flag=True, help="Skip re-rendering every frame from the store at the end.")
@json_option
@click.pass_context
@fails_cleanly
def demo_cmd(ctx: click.Context, session_id: str | None, no_verify: bool, as_json: bool) -> None:
    """Replay the bundled coding session and show the savings.

    A real multi-turn coding session (reads, edits, greps, long outputs): the naive full
    transcript against what context_os assembles, turn by turn; every frame re-rendered at the end."""
    session_id = run_replay(
        ctx,
        [demo_transcript()],
        "bundled demo session",
        session_id if session_id is not None else "demo-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f"),
        verify="none" if no_verify else "all",
        per_turn=True,
        as_json=as_json,
        named=session_id is not None,
    )
    if not as_json:
        click.echo(
            f"\nits timeline in a browser: {command_hint('ui', '--session', session_id)}\n"
            "  then open the address it prints (it carries the web view's token; Ctrl-C stops it)"
        )


def register(cli: click.Group) -> None:
    cli.add_command(demo_cmd)
