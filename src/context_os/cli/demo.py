"""``ctxos demo``: replay a bundled, real coding session through context_os and show the savings."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import click

from ..context.session import Session
from ..harness.replay import TurnRow, model_calls, replay_openai
from ._common import emit_json, fails_cleanly, json_option, progress, store_from, table


def demo_messages() -> list[dict[str, Any]]:
    """The bundled session: OpenAI-format messages of a real coding-agent session."""
    data = resources.files("context_os.data").joinpath("demo_session.json").read_text("utf-8")
    messages: list[dict[str, Any]] = json.loads(data)
    return messages


@click.command("demo")
@click.option("--session", "session_id", metavar="ID", help="Session id to record under (default: demo-<time>).")
@click.option("--no-verify", is_flag=True, help="Skip re-rendering every frame from the store at the end.")
@json_option
@click.pass_context
@fails_cleanly
def demo_cmd(ctx: click.Context, session_id: str | None, no_verify: bool, as_json: bool) -> None:
    """Replay a bundled multi-turn coding session (reads, edits, greps, long outputs) and compare
    the naive full transcript with what context_os assembles, turn by turn."""
    messages = demo_messages()
    session_id = session_id or "demo-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    calls = len(model_calls(messages))
    with store_from(ctx) as store:
        session = Session.open(store, session_id, harness="openai", workspace="/workspace/pi-mono")
        with progress(range(calls), length=calls, label="replaying", enabled=not as_json) as bar:
            it = iter(bar)

            def tick(_: TurnRow) -> None:
                next(it, None)

            result = replay_openai(messages, session, verify=not no_verify, on_turn=tick)
        summary = result.summary()
        if as_json:
            summary["per_turn"] = [r.__dict__ for r in result.rows]
            emit_json(summary)
        else:
            click.echo(
                table(
                    [
                        [
                            r.turn,
                            r.messages,
                            r.tokens_full,
                            r.tokens_assembled,
                            f"{100 * r.tokens_assembled / max(1, r.tokens_full):.0f}%",
                            r.active,
                            r.collapsed_now,
                        ]
                        for r in result.rows
                    ],
                    ["turn", "msgs", "full", "assembled", "%", "active", "collapsed"],
                    "rrrrrrr",
                )
            )
            pct = 100 * result.tokens_assembled / max(1, result.tokens_full)
            click.echo(
                f"\n{result.turns} model calls replayed in {result.seconds:.2f}s into {store.url}\n"
                f"tokens sent: {result.tokens_assembled:,} with context_os vs {result.tokens_full:,} "
                f"with the full transcript ({pct:.1f}%)\n"
                f"orphaned tool results: {result.orphaned_tool_results}; "
                f"frames verified: {result.frames_verified}/{result.frames}"
                + (" (skipped)" if no_verify else "")
                + f"\nsee it turn by turn: ctxos frames {session_id}; ctxos frame {session_id} {result.turns}"
            )
        if result.orphaned_tool_results or (not no_verify and result.frames_verified != result.frames):
            sys.exit(1)


def register(cli: click.Group) -> None:
    cli.add_command(demo_cmd)
