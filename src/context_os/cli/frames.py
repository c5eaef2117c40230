"""``ctxos frames list|show|verify``: what the model saw, turn by turn, and whether the store
still reproduces it. The old verbs ``ctxos frames SESSION`` and ``ctxos frame SESSION TURN``
stay for one release as deprecated aliases of ``frames list`` and ``frames show``.

It never writes: frames come from the one read model (context/frames.py)."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..context.frames import FrameCheck, FrameMemo, frame_docs, frame_rows, get_frame, no_frames, verify_frame
from ..context.load import load_view
from ..context.view import arguments_text
from ..errors import StoreCorrupt
from ._common import (
    DefaultGroup,
    DeprecatedAlias,
    echo_long,
    emit_json,
    fails_cleanly,
    json_option,
    progress,
    store_from,
    table,
)


@click.group("frames", cls=DefaultGroup, default="list", legacy="SESSION")
def frames() -> None:
    """What the model was sent, turn by turn: list, show, verify."""


@frames.command("list")
@click.argument("session_id")
@json_option
@click.pass_context
@fails_cleanly
def list_cmd(ctx: click.Context, session_id: str, as_json: bool) -> None:
    """One row per turn: tokens full vs assembled, active objects."""
    with store_from(ctx) as store:
        rows = [r.to_dict() for r in frame_rows(store, session_id)]
        if as_json:
            emit_json(rows)
            return
        view = load_view(store, session_id)  # for the line under the table: what it knows now
        known = sum(1 for o in view.objects.values() if o.state != "absent")
        click.echo(
            table(
                [
                    [
                        r["turn"],
                        r["time"],
                        r["tokens_full"],
                        r["tokens_assembled"],
                        f"{100 * r['tokens_assembled'] / max(1, r['tokens_full']):.0f}%",
                        r["messages"],
                        r["active"],
                    ]
                    for r in rows
                ],
                ["turn", "time", "full", "assembled", "%", "msgs", "active"],
                "rlrrrrr",
            )
        )
        full = sum(r["tokens_full"] for r in rows)
        sent = sum(r["tokens_assembled"] for r in rows)
        click.echo(
            f"\n{len(rows)} turns; {sent:,} of {full:,} tokens sent ({100 * sent / max(1, full):.1f}%); "
            f"{known} objects known now"
        )


@frames.command("show")
@click.argument("session_id")
@click.argument("turn", type=int)
@click.option("--messages/--no-messages", default=True, help="Print the re-rendered messages.")
@json_option
@click.pass_context
@fails_cleanly
def show_cmd(ctx: click.Context, session_id: str, turn: int, messages: bool, as_json: bool) -> None:
    """Re-render one turn's frame, print it and verify its hash."""
    with store_from(ctx) as store:
        frame = get_frame(store, session_id, turn)
        check = verify_frame(store, frame)
        msgs = check.rendered.messages if check.rendered else []
        if as_json:
            emit_json(
                {
                    "frame_id": check.frame_id,
                    "ok": check.ok,
                    "recorded_hash": check.recorded_hash,
                    "rendered_hash": check.rendered_hash,
                    "problems": check.problems,
                    "tokens_assembled": frame["content"]["tokens"],
                    "tokens_full": frame["content"]["tokens_full"],
                    "basis_tx_id": check.basis,
                    "horizon": frame["content"].get("horizon", 0),
                    "thinking_horizon": frame["content"].get("thinking_horizon", 0),
                    "refs": check.refs,
                    "messages": msgs if messages else None,
                }
            )
        else:
            out: list[str] = []
            if messages:
                for k, m in enumerate(msgs):
                    head = f"[{k}] {m['role']}"
                    if m.get("tool_call_id"):
                        head += f" ({m['tool_call_id']})"
                    out.append(click.style(head, bold=True))
                    if text := m.get("text"):
                        out.append(text)
                    out += [f"  → {c['name']}({arguments_text(c['arguments'])})" for c in m.get("tool_calls") or ()]
                out.append("")
            if horizon := frame["content"].get("horizon", 0):
                out.append(f"history horizon: chat entry {horizon} (the entries before it show as one note)")
            if thinking := frame["content"].get("thinking_horizon", 0):
                out.append(f"thinking horizon: chat entry {thinking} (assistant messages before it show no reasoning)")
            out += _check_lines(_verdict(turn, check))
            echo_long("\n".join(out))
        if not check.ok:
            sys.exit(1)


@frames.command("verify")
@click.argument("session_id")
@click.argument("turn", type=int, required=False)
@json_option
@click.pass_context
@fails_cleanly
def verify_cmd(ctx: click.Context, session_id: str, turn: int | None, as_json: bool) -> None:
    """Re-render every frame of a session (or one) and check it."""
    with store_from(ctx) as store:
        if turn is not None:
            docs = [get_frame(store, session_id, turn)]
        else:
            docs = frame_docs(store, session_id)
            if not docs:
                raise no_frames(store, session_id, f"no frames for session {session_id!r} in {store.url}")
        memo = FrameMemo()  # what the frames share is read and hashed once
        rows: list[dict[str, Any]] = []
        with progress(docs, length=len(docs), label="verifying", enabled=not as_json) as bar:
            for doc in bar:
                c = doc["content"]
                try:
                    rows.append(_verdict(c["turn"], verify_frame(store, doc, memo=memo)))
                except StoreCorrupt as e:  # a damaged version is this frame's failure, not the command's
                    failed = FrameCheck(doc["id"], False, c["rendered_hash"], "", [f"cannot be re-rendered: {e}"])
                    rows.append(_verdict(c["turn"], failed) | {"rendered_hash": None})  # nothing was rendered
        verified = sum(1 for r in rows if r["ok"])
        ok = verified == len(rows)
        if as_json:
            emit_json(
                {
                    "session": session_id,
                    "store": store.url,
                    "ok": ok,
                    "frames_checked": len(rows),
                    "frames_verified": verified,
                    "frames": rows,
                }
            )
        else:
            for r in rows:
                if not r["ok"] or turn is not None:
                    click.echo("\n".join(_check_lines(r)))
            click.echo(f"session {session_id}: {verified} of {len(rows)} frame(s) verified")
        if not ok:
            sys.exit(1)


def _verdict(turn: int, check: FrameCheck) -> dict[str, Any]:
    """One frame's check as ``frames verify --json`` lists it."""
    return {
        "turn": turn,
        "frame_id": check.frame_id,
        "ok": check.ok,
        "recorded_hash": check.recorded_hash,
        "rendered_hash": check.rendered_hash,
        "problems": check.problems,
    }


def _check_lines(verdict: dict[str, Any]) -> list[str]:
    """A frame's verdict and recorded hash, then one line per problem."""
    status = click.style("verified", fg="green") if verdict["ok"] else click.style("MISMATCH", fg="red")
    return [f"{verdict['frame_id']}: {status}  {verdict['recorded_hash']}", *(f"  - {p}" for p in verdict["problems"])]


def register(cli: click.Group) -> None:
    cli.add_command(frames)
    cli.add_command(DeprecatedAlias("frame", show_cmd, use="frames show"))
