"""``ctxos verify``: the store's own integrity check, then re-hash every stored document version
(and optionally re-render frames). Damage is reported per document, never as a traceback."""

from __future__ import annotations

import sys
from contextlib import closing
from typing import Any

import click

from ..context.frames import verify_frames
from ..context.load import ended_ids
from ..errors import HashError, StoreCorrupt, StoreError, StoreUnavailable
from ..hashing import verify_doc
from ..store import Store, Version
from ._common import (
    checks_cleanly,
    cut_short,
    emit_json,
    jobs_option,
    json_option,
    one_line,
    printable,
    progress,
    store_from,
)


def _damage(e: StoreError, id: str, v: Version | None = None) -> dict[str, Any]:
    corrupt = e if isinstance(e, StoreCorrupt) else None
    return {
        "id": (corrupt.id if corrupt else None) or id,
        "tx_id": corrupt.tx_id if corrupt and corrupt.tx_id is not None else v.tx_id if v else None,
        "valid_time": v.valid_time if v else None,
        "error": str(e),
    }


def _versions(store: Store, id: str, damaged: list[dict[str, Any]]) -> tuple[list[Version], Version | None]:
    """``_read_versions``; a document the store cannot read for another reason than damage it
    detects (another client's, nested past what Python walks; an answer of the node's that is
    no EDN) goes to ``damaged`` as a whole: it failed the whole check (``ctxos verify`` of the
    shared XTDB node of a test run, before 2026-12-02)."""
    try:
        return _read_versions(store, id, damaged)
    except StoreUnavailable:
        raise
    except StoreError as e:
        damaged.append(_damage(e, id))
        return [], None


def _read_versions(store: Store, id: str, damaged: list[dict[str, Any]]) -> tuple[list[Version], Version | None]:
    """Every version of ``id`` with its document, those a later write of the same valid time
    corrected too (a frame as of an earlier transaction re-renders from them), and the one in
    force now (the newest of the latest valid time; None if it was deleted or cannot be read).
    One whose document cannot be read goes to ``damaged`` and the others are still returned
    (read one by one)."""
    try:
        every = store.history(id, with_docs=True, with_corrections=True)
    except StoreCorrupt:
        pass
    else:
        return [v for v in every if v.doc is not None], every[-1] if every and every[-1].doc is not None else None
    out = []
    try:
        listed = store.history(id, with_docs=False, with_corrections=True)
    except StoreCorrupt as e:
        damaged.append(_damage(e, id))
        return [], None
    current = None
    for v in listed:
        current = None
        if v.deleted:
            continue
        try:
            got = store.get(id, v.valid_time, v.tx_id)
        except StoreCorrupt as e:
            damaged.append(_damage(e, id, v))
            continue
        if got is not None:
            out.append(got)
            current = got
    return out, current


_UNHASHED_KINDS = ("proxy_claim", "proxy_hidden")
"""The proxy's bookkeeping, written without hashes until 2026-12-03: a version of these kinds
carrying none of the three is that, not damage (one that carries any is checked)."""


def _unhashed(doc: dict[str, Any]) -> bool:
    return doc.get("kind") in _UNHASHED_KINDS and not any(
        name in doc for name in ("content_hash", "meta_hash", "object_hash")
    )


def _hash_problems(doc: dict[str, Any]) -> list[str]:
    """The hash fields of ``doc`` that do not match; a document too damaged to hash at all has
    every one of them wrong."""
    if not isinstance(doc.get("id"), str) or not isinstance(doc.get("kind"), str):
        return ["id", "kind"]
    if _unhashed(doc):
        return []
    try:
        return verify_doc(doc)
    except HashError:
        return ["content_hash", "meta_hash", "object_hash"]


@click.command("verify")
@click.option("--frames", "check_frames", is_flag=True, help="Also re-render every frame and check its hash.")
@jobs_option
@json_option
@click.pass_context
@checks_cleanly
def verify_cmd(ctx: click.Context, check_frames: bool, jobs: int | None, as_json: bool) -> None:
    """Check the whole store: integrity, then every version's hashes.

    Damage is reported per document (exit 1), never as a traceback."""
    with store_from(ctx) as store:
        try:
            integrity = store.check()
        except StoreCorrupt as e:
            integrity = [str(e)]
        damaged: list[dict[str, Any]] = []
        # every id in force, from where the store keeps them, no document read: one that does
        # not parse is named below as unreadable, and every other is checked all the same
        # (before 2026-12-02 such a document hid every other from the check, and every frame)
        listed_all = True
        try:
            current = store.ids()
        except StoreCorrupt as e:  # (a backend that cannot list its ids without reading documents)
            current, listed_all = [], False
            damaged.append(_damage(e, "(documents could not be listed)"))
        # and those no longer in force (a memory whose file was deleted): their versions are
        # stored all the same, and frames that showed them re-render from them
        try:
            ended = ended_ids(store, set(current))
        except StoreUnavailable:
            raise
        except StoreError as e:  # the keyword index that names them is damaged (`ctxos index rebuild`)
            ended = []
            damaged.append(
                {
                    "id": "(documents no longer in force could not be listed)",
                    "tx_id": None,
                    "valid_time": None,
                    "error": str(e),
                }
            )
        listed: list[tuple[str, bool]] = [(i, True) for i in current] + [(i, False) for i in ended]
        checked, frames_ok = 0, 0
        frames: list[dict[str, Any]] = []  # by id, so those of a session together
        bad: list[dict[str, Any]] = []
        frames_bad: list[dict[str, Any]] = []
        frames_evicted: list[dict[str, Any]] = []
        outage: StoreUnavailable | None = None  # what was checked before it is still reported
        documents_checked = 0
        try:
            with progress(listed, length=len(listed), label="verifying", enabled=not as_json) as bar:
                for id, in_force in bar:
                    before = len(damaged)
                    versions, now = _versions(store, id, damaged)
                    for v in versions:
                        checked += 1
                        wrong = _hash_problems(v.doc or {})
                        if wrong:
                            bad.append({"id": v.id, "tx_id": v.tx_id, "valid_time": v.valid_time, "fields": wrong})
                    documents_checked += 1
                    if not (check_frames and in_force):
                        continue
                    if now is not None and now.doc is not None:
                        if now.doc.get("kind") == "frame":
                            frames.append(now.doc)
                    elif id.startswith("frame:") and len(damaged) > before:
                        # a frame whose document in force cannot be read cannot be re-rendered
                        frames_bad.append(
                            {"id": id, "problems": [f"its document cannot be read: {damaged[-1]['error']}"]}
                        )
        except StoreUnavailable as e:
            outage = e
        frames_checked = 0
        if outage is None:
            with (
                closing(verify_frames(store, frames, jobs=jobs)) as checks,  # (its workers stop with it)
                progress(
                    checks, length=len(frames), label="checking frames", enabled=check_frames and not as_json
                ) as bar,
            ):
                try:
                    for check in bar:
                        frames_checked += 1
                        if check.ok:
                            frames_ok += 1
                        elif check.evicted:  # it showed what was erased on purpose since: no damage
                            frames_evicted.append(
                                {"id": check.frame_id, "evicted": check.evicted, "checked": check.checked}
                            )
                        else:
                            frames_bad.append({"id": check.frame_id, "problems": check.problems})
                except StoreUnavailable as e:
                    outage = e
        found_damage = bool(bad or damaged or integrity or frames_bad)  # before an outage: exit 1, not 3
        ok = not (found_damage or outage)
        report: dict[str, Any] = {
            "store": store.url,
            "documents": len(listed) if listed_all else None,
            "documents_unchecked": len(listed) - documents_checked if listed_all else None,
            "versions_checked": checked,
            "mismatches": bad,
            "damaged": damaged,
            "integrity": integrity,
            "ok": ok,
        }
        if check_frames:
            # frames are listed as their documents are checked: those not reached are not counted
            unchecked = len(frames) - frames_checked if listed_all and documents_checked == len(listed) else None
            report |= {
                "frames_verified": frames_ok,
                "frames_failed": frames_bad,
                "frames_evicted": frames_evicted,
                "frames_unchecked": unchecked,
            }
        if as_json:
            if outage is not None:
                raise cut_short(outage, report, damaged=found_damage)
            emit_json(report)
        else:
            of = f"{len(listed):,} documents" if listed_all else "the documents that could be listed"
            click.echo(
                f"{store.url}: {checked:,} versions of {of} re-hashed, {len(bad)} mismatch(es),"
                f" {len(damaged)} unreadable"
            )
            for b in bad:
                click.echo(f"  - {one_line(b['id'])} @ tx {b['tx_id']}: {', '.join(b['fields'])} do not match")
            for d in damaged:
                click.echo(f"  - {one_line(str(d['id']))} @ tx {d['tx_id']}: " + printable(str(d["error"])))
            if integrity is None:
                click.echo("integrity check: the backend has none that can be run from here")
            else:
                click.echo(f"integrity check: {len(integrity)} problem(s)" if integrity else "integrity check: ok")
                for p in integrity:  # a damaged (or made-up) file's names: anyone's text
                    click.echo(printable(f"  - {p}"))
            if check_frames:
                since = f", {len(frames_evicted)} showed what was evicted since" if frames_evicted else ""
                click.echo(f"frames: {frames_ok} verified, {len(frames_bad)} failed{since}")
                for f in frames_bad:
                    click.echo(f"  - {one_line(f['id'])}: " + printable("; ".join(f["problems"])))
            if outage is not None:
                left = report["documents_unchecked"]
                rest = (
                    "the documents not listed"
                    if left is None
                    else f"{left:,} of {len(listed):,} documents"
                    if left
                    else "none of the documents"
                )
                if check_frames:
                    frames_left = report["frames_unchecked"]
                    rest += (
                        f" and {frames_left:,} of {len(frames):,} frames"
                        if frames_left is not None
                        else ", nor any frame of those"
                    )
                click.echo(f"cut short: the store is out of reach; {rest} not checked")
                raise cut_short(outage, None, damaged=found_damage)
        if not ok:
            sys.exit(1)


def register(cli: click.Group) -> None:
    cli.add_command(verify_cmd)
