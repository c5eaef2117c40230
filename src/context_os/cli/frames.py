"""``ctxos frames list|show|verify|diff``: what the model saw, turn by turn, whether the store
still reproduces it, and what changed from one turn to another. The old verbs ``ctxos frames
SESSION`` and ``ctxos frame SESSION TURN`` stay for one release as deprecated aliases of
``frames list`` and ``frames show``.

It never writes: frames come from the one read model (context/frames.py)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from contextlib import closing
from typing import Any

import click

from ..context.frames import FrameCheck, frame_docs, frame_rows, get_frame, no_frames, verify_frame, verify_frames
from ..context.load import load_view
from ..context.timeline import FrameDiff, frame_diff
from ..context.view import arguments_text
from ..errors import StoreUnavailable
from ._common import (
    TEXT,
    DefaultGroup,
    DeprecatedAlias,
    checks_cleanly,
    counted,
    cut_short,
    echo_long,
    emit_json,
    fails_cleanly,
    jobs_option,
    json_option,
    one_line,
    printable,
    progress,
    store_from,
    table,
)


@click.group("frames", cls=DefaultGroup, default="list", legacy="SESSION")
def frames() -> None:
    """What the model was sent, turn by turn: list, show, verify, diff."""


@frames.command("list")
@click.argument("session_id", type=TEXT)
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
        if not rows:
            click.echo(f"session {session_id!r} has no frames yet: it made no model call")
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
            f"\n{counted(len(rows), 'turn')}; {sent:,} of {full:,} tokens sent ({100 * sent / max(1, full):.1f}%); "
            f"{known} objects known now"
        )


@frames.command("show")
@click.argument("session_id", type=TEXT)
@click.argument("turn", type=int)
@click.option("--messages/--no-messages", default=True, help="Print the re-rendered messages.")
@json_option
@click.pass_context
@checks_cleanly
def show_cmd(ctx: click.Context, session_id: str, turn: int, messages: bool, as_json: bool) -> None:
    """Re-render one turn's frame, print it and verify its hash."""
    with store_from(ctx) as store:
        frame = get_frame(store, session_id, turn)
        check = verify_frame(store, frame)
        msgs = check.rendered.messages if check.rendered else []
        # as recorded: in a damaged frame (the check says what is wrong), whatever it holds
        c = frame["content"] if isinstance(frame.get("content"), dict) else {}
        if as_json:
            emit_json(
                {
                    "frame_id": check.frame_id,
                    "ok": check.ok,
                    "recorded_hash": check.recorded_hash,
                    "rendered_hash": check.rendered_hash,
                    "problems": check.problems,
                    "evicted": check.evicted,
                    "checked": check.checked,
                    "tokens_assembled": c.get("tokens"),
                    "tokens_full": c.get("tokens_full"),
                    "basis_tx_id": check.basis,
                    "horizon": c.get("horizon", 0),
                    "thinking_horizon": c.get("thinking_horizon", 0),
                    "refs": check.refs,
                    "messages": msgs if messages else None,
                }
            )
        else:
            out: list[str] = []
            if messages:
                for k, m in enumerate(msgs):
                    out += _message_lines(k, m)
                out.append("")
            if horizon := c.get("horizon", 0):
                out.append(f"history horizon: chat entry {horizon} (the entries before it show as one note)")
            if thinking := c.get("thinking_horizon", 0):
                out.append(f"thinking horizon: chat entry {thinking} (assistant messages before it show no reasoning)")
            out += _check_lines(_verdict(turn, check))
            echo_long("\n".join(out))
        if not (check.ok or check.evicted_only):  # what was evicted since is no damage
            sys.exit(1)


@frames.command("verify")
@click.argument("session_id", type=TEXT)
@click.argument("turn", type=int, required=False)
@jobs_option
@json_option
@click.pass_context
@checks_cleanly
def verify_cmd(ctx: click.Context, session_id: str, turn: int | None, jobs: int | None, as_json: bool) -> None:
    """Re-render every frame of a session (or one) and check it."""
    with store_from(ctx) as store:
        if turn is not None:
            docs = [get_frame(store, session_id, turn)]
        else:
            docs = frame_docs(store, session_id)
            if not docs:
                raise no_frames(store, session_id, f"no frames for session {session_id!r} in {store.url}")
        rows: list[dict[str, Any]] = []
        outage: StoreUnavailable | None = None
        # closed on the way out, Ctrl-C included: its worker processes stop with it
        with closing(verify_frames(store, docs, jobs=jobs)) as checks:
            pairs = zip(docs, checks, strict=True)
            with progress(pairs, length=len(docs), label="verifying", enabled=not as_json) as bar:
                try:
                    for doc, check in bar:
                        rows.append(_verdict(_turn(doc), check))
                except StoreUnavailable as e:  # what was checked before it is still reported
                    outage = e
        verified = sum(1 for r in rows if r["ok"])
        evicted = sum(1 for r in rows if not r["ok"] and r["evicted"])
        # a frame that showed what was evicted since is no damage
        ok = verified + evicted == len(rows) and outage is None
        report = {
            "session": session_id,
            "store": store.url,
            "ok": ok,
            "frames_checked": len(rows),
            "frames_verified": verified,
            "frames_evicted": evicted,
            "frames_unchecked": len(docs) - len(rows),
            "frames": rows,
        }
        if not as_json:
            for r in rows:
                if not r["ok"] or turn is not None:
                    click.echo("\n".join(_check_lines(r)))
            since = f", {evicted} showed what was evicted since (not checkable)" if evicted else ""
            click.echo(f"session {session_id}: {verified} of {len(rows)} frame(s) verified{since}")
            if outage is not None:
                click.echo(f"{len(docs) - len(rows)} of {len(docs)} frame(s) not checked: the store is out of reach")
        if outage is not None:
            raise cut_short(outage, report if as_json else None, damaged=verified + evicted < len(rows))
        if as_json:
            emit_json(report)
        if not ok:
            sys.exit(1)


@frames.command("diff")
@click.argument("session_id", type=TEXT)
@click.argument("a", type=click.IntRange(min=1), metavar="A")
@click.argument("b", type=click.IntRange(min=1), metavar="[B]", required=False)
@click.option(
    "--max-hunks",
    type=click.IntRange(min=0),
    default=50,
    show_default=True,
    help="Show at most this many runs of differing messages.",
)
@json_option
@click.pass_context
@checks_cleanly
def diff_cmd(ctx: click.Context, session_id: str, a: int, b: int | None, max_hunks: int, as_json: bool) -> None:
    """What changed from turn A to B (alone: from the turn before A)."""
    if b is None:
        if a == 1:
            raise click.UsageError("turn 1 has no turn before it: name two turns, `frames diff SESSION A B`")
        a, b = a - 1, a
    with store_from(ctx) as store:
        diff = frame_diff(store, session_id, a, b, max_hunks=max_hunks + 1)  # one more: were any left out?
        cut = len(diff.hunks) > max_hunks
        del diff.hunks[max_hunks:]
        # a frame that showed what was evicted since is no damage, as in `frames verify`
        ok = diff.checks is not None and all(c.ok or c.evicted_only for c in diff.checks)
        if as_json:
            emit_json({**diff.to_dict(), "hunks_cut": cut})
        else:
            echo_long("\n".join(_diff_lines(diff, cut)))
        if not ok:
            sys.exit(1)


def _diff_lines(diff: FrameDiff, cut: bool) -> list[str]:
    """``frames diff`` for people: the web view's diff page as text."""
    a, b = diff.a, diff.b
    out = []
    for turn, check in zip((a, b), diff.checks or (), strict=True):
        out += _check_lines(_verdict(turn, check))
    (ta, tb), (ma, mb), (size_a, size_b) = diff.tokens, diff.messages, diff.prompt_bytes
    shown = [f"{n:,}" if ok else "-" for n, ok in zip((ma, mb), diff.rendered, strict=True)]
    out.append(f"turn {a} → turn {b}: tokens {ta:,} → {tb:,}; messages {shown[0]} → {shown[1]}")
    if not all(diff.rendered):
        lost = " and ".join(f"turn {t}" for t, ok in zip((a, b), diff.rendered, strict=True) if not ok)
        out.append(f"prompt: not compared: {lost} could not be re-rendered from the store (above)")
        return out + [f"{name} ({len(ids)}):" + "".join(f"\n  {i}" for i in ids) for name, ids in _groups(diff)]
    if diff.first_byte is None:
        out.append(f"prompt: the two prompts are byte for byte the same ({size_a:,} bytes)")
    elif diff.b_extends_a:
        out.append(
            f"prompt: turn {b} repeats all {size_a:,} bytes of turn {a} and adds {size_b - size_a:,}: "
            "a prompt cache keeps all of it"
        )
    elif diff.a_extends_b:
        out.append(
            f"prompt: turn {a} repeats all {size_b:,} bytes of turn {b} and adds {size_a - size_b:,}:"
            f" turn {b}'s prompt is the start of turn {a}'s"
        )
    else:
        share = 100 * diff.first_byte / max(1, size_b)
        out.append(
            f"prompt: the prompts part at byte {diff.first_byte:,} of {size_a:,} (in message [{diff.first_message}]): "
            f"{share:.1f}% of turn {b}'s prompt is turn {a}'s prefix"
        )
    out.append("  (bytes of each prompt as canonical JSON, one message per line)")
    for name, ids in _groups(diff):
        out.append(f"{name} ({len(ids)}):" + "".join(f"\n  {i}" for i in ids))
    if not cut:
        out.append(f"\nmessages that differ: {len(diff.hunks)} run(s) of them")
    elif diff.hunks:
        out.append(
            f"\nmessages that differ: the first {len(diff.hunks)} run(s) of them, more left out"
            " (--max-hunks N shows more)"
        )
    else:
        out.append("\nmessages that differ: none shown here, some do (--max-hunks N shows the first N)")
    for h in diff.hunks:
        (a1, a2), (b1, b2) = h["a"], h["b"]
        out.append(click.style(f"@@ {h['op']}: turn {a} [{a1}–{a2}) → turn {b} [{b1}–{b2})", fg="cyan"))
        for k, m in enumerate(h["removed"], a1):
            out += _message_lines(k, m, "-")
        for k, m in enumerate(h["added"], b1):
            out += _message_lines(k, m, "+")
    return out


def _groups(diff: FrameDiff) -> list[tuple[str, list[str]]]:
    """The objects that changed between the two turns, by how (an id holds a tool call's id,
    which may hold a newline: one line each all the same)."""
    return [
        ("entered", [one_line(r["id"]) for r in diff.entered]),
        ("left", [one_line(r["id"]) for r in diff.left]),
        ("new version", [f"{one_line(y['id'])} (tx {x['tx_id']} → {y['tx_id']})" for x, y in diff.changed]),
        ("activated", [one_line(i) for i in diff.activated]),
        ("deactivated", [one_line(i) for i in diff.deactivated]),
    ]


def _message_lines(k: int, m: Mapping[str, Any], mark: str = "") -> list[str]:
    """One rendered message as ``frames show`` prints it; ``mark`` (``-``, ``+``) before its head.
    What the message holds is printed ``printable``: any of it may come from a tool's output."""
    head = f"{mark}[{k}] {one_line(m['role'])}"
    if m.get("tool_call_id"):
        head += f" ({one_line(m['tool_call_id'])})"
    color = {"-": "red", "+": "green"}.get(mark)
    out = [click.style(head, bold=True, fg=color)]
    if text := m.get("text"):
        out.append(printable(text))
    out += [printable(f"  → {c['name']}({arguments_text(c['arguments'])})") for c in m.get("tool_calls") or ()]
    return out


def _turn(frame: Mapping[str, Any]) -> Any:
    """The turn a frame document names (a damaged one's, whatever it holds there, or None)."""
    content = frame.get("content")
    return content.get("turn") if isinstance(content, dict) else None


def _verdict(turn: int, check: FrameCheck) -> dict[str, Any]:
    """One frame's check as ``frames verify --json`` lists it."""
    return {
        "turn": turn,
        "frame_id": check.frame_id,
        "ok": check.ok,
        "recorded_hash": check.recorded_hash,
        "rendered_hash": check.rendered_hash or None,  # none: it could not be re-rendered
        "problems": check.problems,
        "evicted": check.evicted,
        "checked": check.checked,
    }


def _check_lines(verdict: dict[str, Any]) -> list[str]:
    """A frame's verdict and recorded hash, then one line per problem."""
    if verdict["ok"]:
        status = click.style("verified", fg="green")
    elif verdict.get("evicted"):
        status = click.style("EVICTED", fg="yellow") + " (it showed what was erased since; nothing else is wrong)"
    else:
        status = click.style("MISMATCH", fg="red")
    checked = [f"  {printable(verdict['checked'])}"] if verdict.get("checked") else []
    head = f"{printable(verdict['frame_id'])}: {status}  {verdict['recorded_hash']}"
    return [head, *(f"  - {printable(p)}" for p in verdict["problems"]), *checked]


def register(cli: click.Group) -> None:
    cli.add_command(frames)
    cli.add_command(DeprecatedAlias("frame", show_cmd, use="frames show"))
