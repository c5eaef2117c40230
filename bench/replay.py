"""Replay of a real Pi session (``shared/data/pi-sessions/before-compaction.jsonl``) with the
library's default policy, against its targets:

* ``tokens_assembled`` ≤ 25% of ``tokens_full`` (the naive transcript, uncompacted);
* ``prefix_stability`` ≥ 0.85 (share of the tokens sent that repeat the previous call's prefix);
* no orphaned tool results; every frame re-renders to its hash;
* ≥ 90% of edits with the target file's current content in context;
* the whole replay, every frame verified included, under a minute (time and peak RSS reported).

Runs ``ctxos replay --json`` in a child process, so peak RSS is the replay's own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ._report import write_section

SESSION = Path(__file__).resolve().parents[2] / "shared" / "data" / "pi-sessions" / "before-compaction.jsonl"


def run(path: Path, store: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-c", "from context_os.cli import main; main()", "--store", f"sqlite:///{store}"]
    cmd += ["replay", "--json", "--no-per-turn", "--session", "bench-pi", str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(done.stderr)
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def main() -> int:
    if not SESSION.exists():
        print(f"replay: {SESSION} not found, skipped", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory() as d:
        r = run(SESSION, Path(d) / "replay.db")
    ratio = r["tokens_assembled"] / r["tokens_full"]
    edits = r["edits_with_target_active"] / max(1, r["edits_total"])
    checks = {
        "tokens": ratio <= 0.25,
        "prefix": r["prefix_stability"] >= 0.85,
        "orphans": r["orphaned_tool_results"] == 0,
        "frames": r["frames_verified"] == r["frames"] == r["frames_checked"],
        "edits": edits >= 0.9,
        "time": r["seconds"] < 60,
    }
    ok = all(checks.values())

    def met(key: str) -> str:
        return "met" if checks[key] else "**MISSED**"

    print(
        f"replay: {r['tokens_assembled']:,} / {r['tokens_full']:,} tokens = {ratio:.1%}, prefix stability "
        f"{r['prefix_stability']:.3f}, edits {r['edits_with_target_active']}/{r['edits_total']}, "
        f"frames {r['frames_verified']}/{r['frames']}, {r['seconds']:.1f}s, {r['peak_rss_mb']:.0f} MB"
    )
    body = f"""
`ctxos replay` of `before-compaction.jsonl`: a real session of the Pi coding agent (format v1,
990 messages, {r["turns"]} model calls, 2 compactions; from the pi-mono repository, MIT). Every
model call is replayed with its uncompacted input, with the library's default `RetentionPolicy`;
files are virtual file objects recorded from the transcript. Tokens are chars/4 (Pi's estimate)
on both sides. Definitions: [replay.md](replay.md).

| measure | value | target |
|---|---:|---|
| model calls | {r["turns"]} | |
| `tokens_full` (naive transcript) | {r["tokens_full"]:,} | |
| what Pi's own compaction sent | {r["tokens_pi_compacted"]:,} ({r["tokens_pi_compacted"] / r["tokens_full"]:.1%}) | (reference) |
| `tokens_assembled` | {r["tokens_assembled"]:,} ({ratio:.1%}) | ≤ 25%: {met("tokens")} |
| `prefix_stability` | {r["prefix_stability"]:.3f} | ≥ 0.85: {met("prefix")} |
| `orphaned_tool_results` | {r["orphaned_tool_results"]} | 0: {met("orphans")} |
| frames verified / checked / written | {r["frames_verified"]} / {r["frames_checked"]} / {r["frames"]} | all: {met("frames")} |
| `edits_with_target_active` / `edits_total` | {r["edits_with_target_active"]} / {r["edits_total"]} ({edits:.1%}) | ≥ 90%: {met("edits")} |
| edits whose replaced text was in view | {r["edits_with_target_text_shown"]} | |
| calls showing a stale file view: full / context_os | {r["stale_file_views_full"]} / {r["stale_file_views_assembled"]} | |
| file objects / versions | {r["files"]} / {r["file_versions"]} | |
| time (replay + verifying every frame) | {r["seconds"]:.1f} s ({r["seconds_verify"]:.1f} s verifying) | < 60 s: {met("time")} |
| peak RSS | {r["peak_rss_mb"]:.0f} MB | |
"""
    write_section("Replay of a real Pi session", body)
    print("targets met" if ok else "TARGET MISSED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
