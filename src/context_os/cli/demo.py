"""``ctxos demo``: replay a bundled, real coding session through context_os and show the savings."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import click

from ..harness.formats import Transcript
from ._common import fails_cleanly, json_option
from .replay import run_replay


def demo_messages() -> list[dict[str, Any]]:
    """The bundled session: OpenAI-format messages of a real coding-agent session."""
    data = resources.files("context_os.data").joinpath("demo_session.json").read_text("utf-8")
    messages: list[dict[str, Any]] = json.loads(data)
    return messages


def demo_transcript() -> Transcript:
    """The bundled session as a replayable transcript (its tools are Pi's read/edit/write/bash)."""
    messages = demo_messages()
    return Transcript("openai", "openai", "pi", messages, cwd="/workspace/pi-mono", entries=len(messages))


@click.command("demo")
@click.option("--session", "session_id", metavar="ID", help="Session id to record under (default: demo-<time>).")
@click.option("--no-verify", is_flag=True, help="Skip re-rendering every frame from the store at the end.")
@json_option
@click.pass_context
@fails_cleanly
def demo_cmd(ctx: click.Context, session_id: str | None, no_verify: bool, as_json: bool) -> None:
    """Replay a bundled multi-turn coding session (reads, edits, greps, long outputs) and compare
    the naive full transcript with what context_os assembles, turn by turn."""
    run_replay(
        ctx,
        demo_transcript(),
        "bundled demo session",
        session_id or "demo-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f"),
        verify="none" if no_verify else "all",
        per_turn=True,
        as_json=as_json,
    )


def register(cli: click.Group) -> None:
    cli.add_command(demo_cmd)
