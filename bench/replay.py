"""``ctxos replay --json --verify all`` on every recorded session file of the tuning and check sets
(``bench/_sessions.py``), each in a child process (so time and peak RSS are the replay's own), and
in detail on the real Pi session of ``shared/data`` against its targets:

* ``tokens_assembled`` ≤ 25% of ``tokens_full`` (the naive transcript, uncompacted);
* ``prefix_stability`` ≥ 0.90 (share of the tokens sent that repeat the previous call's prefix);
* no orphaned tool results; no call showing a stale file view; every frame re-renders to its hash;
* ≥ 90% of edits with the target file's current content in context;
* the whole replay, every frame verified included, under a minute.

Per file, every frame of every session the file holds must verify, with no orphaned tool result.
Exit status 1 if a target is missed (after the section is written).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from context_os import Session, open_store
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import Transcript, demo_transcript, read_sessions
from context_os.sources.recall import Recall

from ._report import against, command_line, left_out, write_section
from ._sessions import LONG, SESSIONS, SETS, SHARED_PI, few, session_files, shared_pi


def run(path: Path, store: Path, *, verify: str = "all") -> dict[str, Any]:
    cmd = [sys.executable, "-c", "from context_os.cli import main; main()", "--store", f"sqlite:///{store}"]
    cmd += ["replay", "--json", "--no-per-turn", "--verify", verify, "--session", "bench", str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"replay: {path}: {done.stderr}")
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def replay(path: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        return run(path, Path(d) / "replay.db")


def pi_section(r: dict[str, Any]) -> tuple[bool, str]:
    ratio = r["tokens_assembled"] / r["tokens_full"]
    edits = r["edits_with_target_active"] / max(1, r["edits_total"])
    checks = {
        "tokens": ratio <= 0.25,
        "prefix": r["prefix_stability"] >= 0.90,
        "orphans": r["orphaned_tool_results"] == 0,
        "stale": r["stale_file_views_assembled"] == 0,
        "frames": r["frames_verified"] == r["frames"] == r["frames_checked"],
        "edits": edits >= 0.9,
        "time": r["seconds"] < 60,
    }

    def met(key: str) -> str:
        return "met" if checks[key] else "**MISSED**"

    # as many decimals as it takes for a value on the wrong side of its bar not to read as on it
    shown_ratio = against(ratio, 0.25, under=True, digits=1, percent=True)[0]
    shown_prefix = against(r["prefix_stability"], 0.90)[0]
    shown_edits = against(edits, 0.9, digits=1, percent=True)[0]
    pi_sent = r["tokens_pi_compacted"]  # None when the file records no compaction (a smoke run's slice)
    shown_pi = "none recorded" if pi_sent is None else f"{pi_sent:,} ({pi_sent / r['tokens_full']:.1%})"

    print(
        f"replay: {r['tokens_assembled']:,} / {r['tokens_full']:,} tokens = {ratio:.1%}, prefix stability "
        f"{r['prefix_stability']:.3f}, edits {r['edits_with_target_active']}/{r['edits_total']}, "
        f"frames {r['frames_verified']}/{r['frames']}, {r['seconds']:.1f}s, {r['peak_rss_mb']:.0f} MB"
    )
    body = f"""
### The real Pi session in detail

`before-compaction.jsonl`: a real session of the Pi coding agent (format v1, 990 messages,
{r["turns"]} model calls, 2 compactions; from the pi-mono repository, MIT; tuning set). Every model
call is replayed with its uncompacted input, with the library's default `RetentionPolicy`; files
are virtual file objects recorded from the transcript. Tokens are chars/4 (Pi's estimate) on both
sides. Definitions: [replay.md](replay.md).

| measure | value | target |
|---|---:|---|
| model calls | {r["turns"]} | |
| `tokens_full` (naive transcript) | {r["tokens_full"]:,} | |
| what Pi's own compaction sent | {shown_pi} | (reference) |
| `tokens_assembled` | {r["tokens_assembled"]:,} ({shown_ratio}) | ≤ 25%: {met("tokens")} |
| `prefix_stability` | {shown_prefix} | ≥ 0.90: {met("prefix")} |
| `orphaned_tool_results` | {r["orphaned_tool_results"]} | 0: {met("orphans")} |
| calls showing a stale file view: full / context_os | {r["stale_file_views_full"]} / {r["stale_file_views_assembled"]} | 0: {met("stale")} |
| frames verified / checked / written | {r["frames_verified"]} / {r["frames_checked"]} / {r["frames"]} | all: {met("frames")} |
| `edits_with_target_active` / `edits_total` | {r["edits_with_target_active"]} / {r["edits_total"]} ({shown_edits}) | ≥ 90%: {met("edits")} |
| edits whose replaced text was in view | {r["edits_with_target_text_shown"]} | |
| file objects / versions | {r["files"]} / {r["file_versions"]} | |
| time (replay + verifying every frame) | {r["seconds"]:.1f} s ({r["seconds_verify"]:.1f} s verifying) | < 60 s: {met("time")} |
| peak RSS | {r["peak_rss_mb"]:.0f} MB | |
"""
    return all(checks.values()), body


def neighbours() -> tuple[list[Transcript], str]:
    """The sessions the store holds before the recall replay, and what they are, said for the
    section: the demo and the sessions of the tuning set's first Claude Code files (those of
    ``tuning/claude-code/`` itself, with their sub-agents; not the ones of ``entire/``)."""
    files = few([f for f in session_files("tuning") if f.parent == SESSIONS / "tuning" / "claude-code"])
    others = [demo_transcript()] + [t for f in files for t in read_sessions(f)]
    said = (
        f"the demo and the {len(others) - 1} sessions of the {len(files)} Claude Code files of "
        "`bench/sessions/tuning/claude-code/`, sub-agents included"
    )
    return others, said


def with_recall(path: Path, plain: dict[str, Any]) -> tuple[bool, str]:
    """The session replayed again with recall on, in a store that already holds other sessions
    (``neighbours``): auto recall at each user message, its hits in the object index (keyword
    recall: what a store without an embedder does). Its figures must hold: prefix stability ≥
    0.90, tokens ≤ 25% of full history, ≥ 90% of edit targets, every frame verified, no orphan."""
    with tempfile.TemporaryDirectory() as d, open_store(f"sqlite:///{d}/recall.db") as store:
        others, said = neighbours()
        for k, t in enumerate(others):
            with Session.open(store, f"other-{k}", harness=t.harness, workspace=t.cwd) as s:
                replay_transcript(t, s, verify="none")
        t = read_sessions(path)[0]
        with Session.open(store, "bench-recall", harness=t.harness, workspace=t.cwd) as session:
            session.add_source(Recall(store))
            r = replay_transcript(t, session, verify="all")
            recalled = sum(1 for o in session.view.objects.values() if o.kind == "recall")
    ratio = r.tokens_assembled / r.tokens_full
    base = plain["tokens_assembled"] / plain["tokens_full"]
    ok = (
        r.prefix_stability >= 0.90
        and ratio <= 0.25
        and r.edits_with_target_active >= 0.9 * r.edits_total
        and r.frames_verified == r.frames == r.frames_checked
        and r.orphaned_tool_results == 0
    )
    print(
        f"replay with recall: {ratio:.1%} (without {base:.1%}), prefix {r.prefix_stability:.3f}, "
        f"edits {r.edits_with_target_active}/{r.edits_total}, {recalled} recalled objects, "
        f"frames {r.frames_verified}/{r.frames}"
    )
    body = f"""### The real Pi session with recall on

The same replay in a store that already holds {len(others)} other sessions ({said}),
with a keyword `Recall` source consulted at each user message (its
hits enter the object index, one line each; the agent activates what it wants). Aim: the figures
hold.

| measure | without recall | with recall | aim |
|---|---:|---:|---|
| tokens vs full | {base:.1%} | {ratio:.1%} | ≤ 25% |
| prefix stability | {plain["prefix_stability"]:.3f} | {r.prefix_stability:.3f} | ≥ 0.90 |
| edits with target active | {plain["edits_with_target_active"]} / {plain["edits_total"]} | {r.edits_with_target_active} / {r.edits_total} | ≥ 90% |
| recall objects in the session | 0 | {recalled} | |
| frames verified | {plain["frames_verified"]} / {plain["frames"]} | {r.frames_verified} / {r.frames} | all |

Aims: {"met" if ok else "**MISSED**"}."""
    return ok, body


def files_section(rows: list[tuple[str, Path, dict[str, Any]]]) -> tuple[bool, str]:
    """One row per session file: what ``ctxos replay --json --verify all`` said of it."""
    lines = [
        "| set | file | sessions | calls | tokens vs full | prefix | edits with target active | stale views: "
        "full / context_os | orphaned | frames verified | skipped lines | time | peak RSS |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ok = True
    for which, path, r in rows:
        verified = r["frames_verified"] == r["frames_checked"] == r["frames"]
        long_stale = any(s["turns"] >= LONG and s["stale_file_views_assembled"] for s in r["sessions"])
        good = verified and r["orphaned_tool_results"] == 0 and not long_stale
        ok = ok and good
        name = str(path.relative_to(SESSIONS / which)) if path.is_relative_to(SESSIONS) else f"shared: {path.name}"
        lines.append(
            f"| {which} | {'' if good else '**'}{name}{'' if good else '**'} | {len(r['sessions'])} | {r['turns']} "
            f"| {r['tokens_assembled'] / r['tokens_full']:.1%} | {r['prefix_stability']:.3f} "
            f"| {r['edits_with_target_active']} / {r['edits_total']} "
            f"| {r['stale_file_views_full']} / {r['stale_file_views_assembled']} | {r['orphaned_tool_results']} "
            f"| {r['frames_verified']} / {r['frames']} | {r['skipped_lines']} | {r['seconds']:.1f} s "
            f"| {r['peak_rss_mb']:.0f} MB |"
        )
    body = (
        "### Every recorded session file\n\n"
        "`ctxos replay FILE --json --verify all` on every session file of the tuning and check sets "
        "(`bench/sessions/README.md`), each in a child process on a fresh SQLite store. A file's row sums "
        "every session it holds (a Claude Code file's sub-agents, an OpenHands file's records). Target per "
        "file: every frame verified, no orphaned tool result, no stale file view on a session of "
        f"≥ {LONG} calls (a file in **bold** misses one). The economy aims per session are in the "
        "*Strategies* section.\n\n" + "\n".join(lines)
    )
    return ok, body


def main() -> int:
    parts: list[str] = []
    ok = True
    rows: list[tuple[str, Path, dict[str, Any]]] = []
    pi: dict[str, Any] | None = None
    for which in SETS:
        files = ([shared_pi()] if which == "tuning" and SHARED_PI.exists() else []) + few(session_files(which))
        for path in files:
            r = replay(path)
            print(
                f"replay: {which}: {path.name}: {r['turns']} calls, {r['tokens_assembled'] / r['tokens_full']:.1%}, "
                f"prefix {r['prefix_stability']:.3f}, frames {r['frames_verified']}/{r['frames']}, "
                f"{r['seconds']:.1f}s",
                flush=True,
            )
            rows.append((which, path, r))
            if path == shared_pi():
                pi = r
    if pi is not None:
        pi_ok, body = pi_section(pi)
        ok = ok and pi_ok
        parts.append(body)
        recall_ok, body = with_recall(shared_pi(), pi)
        ok = ok and recall_ok
        parts.append(body)
    else:
        left_out(f"{SHARED_PI} not found: the detailed table is left out")
    files_ok, body = files_section(rows)
    ok = ok and files_ok
    parts.append(body)
    write_section("Replay of real sessions", "\n\n".join(p.strip() for p in parts))
    print("targets met" if ok else "TARGET MISSED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    command_line(__doc__, main)
