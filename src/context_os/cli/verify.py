"""``ctxos verify``: re-hash every stored document version (and optionally re-render frames)."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..context.frames import verify_frame
from ..hashing import verify_doc
from ._common import emit_json, fails_cleanly, json_option, progress, store_from


@click.command("verify")
@click.option("--frames", "check_frames", is_flag=True, help="Also re-render every frame and check its hash.")
@json_option
@click.pass_context
@fails_cleanly
def verify_cmd(ctx: click.Context, check_frames: bool, as_json: bool) -> None:
    """Re-hash stored documents and report any that no longer match their hashes."""
    with store_from(ctx) as store:
        current = store.find()
        checked, frames_ok = 0, 0
        bad: list[dict[str, Any]] = []
        frames_bad: list[dict[str, Any]] = []
        with progress(current, length=len(current), label="verifying", enabled=not as_json) as bar:
            for cur in bar:
                for v in store.history(cur.id, with_docs=True):
                    if v.doc is None:
                        continue
                    checked += 1
                    wrong = verify_doc(v.doc)
                    if wrong:
                        bad.append({"id": v.id, "tx_id": v.tx_id, "valid_time": v.valid_time, "fields": wrong})
                if check_frames and cur.doc and cur.doc.get("kind") == "frame":
                    check = verify_frame(store, cur.doc)
                    if check.ok:
                        frames_ok += 1
                    else:
                        frames_bad.append({"id": cur.id, "problems": check.problems})
        report = {"store": store.url, "documents": len(current), "versions_checked": checked, "mismatches": bad}
        if check_frames:
            report |= {"frames_verified": frames_ok, "frames_failed": frames_bad}
        if as_json:
            emit_json(report)
        else:
            click.echo(
                f"{store.url}: {checked:,} versions of {len(current):,} documents re-hashed, {len(bad)} mismatch(es)"
            )
            for b in bad:
                click.echo(f"  - {b['id']} @ tx {b['tx_id']}: {', '.join(b['fields'])} do not match")
            if check_frames:
                click.echo(f"frames: {frames_ok} verified, {len(frames_bad)} failed")
                for f in frames_bad:
                    click.echo(f"  - {f['id']}: {'; '.join(f['problems'])}")
        if bad or frames_bad:
            sys.exit(1)


def register(cli: click.Group) -> None:
    cli.add_command(verify_cmd)
