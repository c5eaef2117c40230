"""Core targets: the demo's token savings, assembly cost vs history length, ingest rate.

* demo: ``tokens_assembled`` ≤ 40% of ``tokens_full``, no orphaned tool results, every frame
  verifies.
* assembly: synthetic sessions of 100 and 1,000 turns with the same active set; the per-turn
  cost of the last 50 turns of each must not differ by more than 2× (it should follow the
  active set, not the history).
* ingest: messages per second through ``Session.sync`` + one transaction per turn, against a
  bare SQLite loop inserting the same documents in the same batches.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from context_os import RetentionPolicy, Session
from context_os.harness.openai import OpenAIAdapter, OpenAIHook
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import demo_transcript
from context_os.store.sqlite import SqliteStore

from ._report import bare_sqlite_rate, command_line, pct, sized, write_section

SHORT, LONG = sized(100, 10), sized(1000, 30)
"""The turns of the two synthetic sessions whose assembly cost is compared."""
INGEST_TURNS = sized(2000, 50)


def synthetic_turn(n: int, output_chars: int = 1500) -> list[dict[str, Any]]:
    """One agent step: a tool call and its output; a user message every 10 steps."""
    msgs: list[dict[str, Any]] = []
    if n % 10 == 0:
        msgs.append({"role": "user", "content": f"step {n}: keep going, check module {n % 37}"})
    msgs.append(
        {
            "role": "assistant",
            "content": f"Looking at part {n}.",
            "tool_calls": [
                {
                    "id": f"c{n}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": f"cat m{n}.py"})},
                }
            ],
        }
    )
    msgs.append(
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"# module {n}\n" + ("y = x + 1\n" * (output_chars // 10))}
    )
    return msgs


def run_demo(tmp: Path) -> dict[str, Any]:
    with SqliteStore(tmp / "demo.db") as store:
        session = Session.open(store, "bench-demo", harness="openai")
        r = replay_transcript(demo_transcript(), session)
    return r.summary()


def assembly_times(tmp: Path, turns: int) -> list[float]:
    """Seconds per ``transform_context`` call over a synthetic session of ``turns`` turns."""
    with SqliteStore(tmp / f"assembly-{turns}.db") as store:
        # managed from the first turn, so both lengths time the same work (with the default
        # manage_from_tokens, the 100-turn session, ~40k tokens, would pass through unmanaged)
        policy = RetentionPolicy(manage_from_tokens=0)
        hook = OpenAIHook(Session.open(store, f"a{turns}", harness="openai", policy=policy))
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
        times = []
        for n in range(turns):
            msgs.extend(synthetic_turn(n))
            t0 = time.perf_counter()
            hook.transform_context(msgs)
            times.append(time.perf_counter() - t0)
    return times


def ingest_rate(tmp: Path, turns: int) -> tuple[float, float, int, tuple[float, float, float]]:
    """(messages/s through the library, messages/s of the bare SQLite loop, messages, and seconds
    per turn: taking its messages in (``Session.sync``), writing its transaction (``flush``), the
    bare loop's)."""
    batches = [synthetic_turn(n) for n in range(turns)]
    total = sum(len(b) for b in batches)
    adapter = OpenAIAdapter()
    tmp.mkdir(parents=True, exist_ok=True)
    with SqliteStore(tmp / "ingest.db") as store:
        session = Session.open(store, "ingest", harness="openai", policy=RetentionPolicy())
        msgs: list[dict[str, Any]] = []
        taking = writing = 0.0
        t0 = time.perf_counter()
        for batch in batches:
            msgs.extend(batch)
            t1 = time.perf_counter()
            session.sync(len(msgs), lambda k: adapter.hash_message(msgs[k]), lambda k: adapter.translate(msgs[k], k))
            t2 = time.perf_counter()
            session.flush()
            taking, writing = taking + t2 - t1, writing + time.perf_counter() - t2
        lib = total / (time.perf_counter() - t0)
    # the baseline: the same messages as JSON rows, one transaction per turn, nothing else
    bare = bare_sqlite_rate(tmp / "bare.db", batches)
    return lib, bare, total, (taking / turns, writing / turns, total / bare / turns)


def verdict(met: bool) -> str:
    return "met" if met else "**MISSED**"


def _split_text(split: tuple[float, float, float] | None) -> str:
    """Where a turn's time went in the median round, against the bare loop's turn."""
    if split is None:
        return ""
    taking, writing, bare = (s * 1e6 for s in split)
    return (
        f"Where a turn's time went (median round): {taking + writing:,.0f} µs, of which taking its messages in"
        f" (translating, redacting, hashing them: `Session.sync`) {taking:,.0f} µs and writing its"
        f" transaction (`flush`) {writing:,.0f} µs; the bare loop's turn {bare:,.0f} µs.\n\n"
    )


def section(
    demo: dict[str, Any],
    short: list[float],
    long_: list[float],
    rounds: list[tuple[float, float, int]],
    split: tuple[float, float, float] | None = None,
) -> tuple[str, bool]:
    """The section's text, and whether every target and aim was met, from this run's demo summary,
    seconds per call of the 100- and 1,000-turn sessions, ingest rounds sorted by rate, and the
    median round's seconds per turn (taking messages in, the transaction, the bare loop's turn)."""
    tail_s, tail_l = short[-50:], long_[-50:]
    ratio = pct(tail_l, 50) / pct(tail_s, 50)
    lib, bare, n = rounds[len(rounds) // 2]
    spread = f"{rounds[0][0]:,.0f}–{rounds[-1][0]:,.0f}"
    demo_ok = demo["ratio"] <= 0.40 and demo["orphaned_tool_results"] == 0 and demo["frames_verified"] == demo["frames"]
    flat, fast, ingest = ratio <= 2.0, pct(tail_l, 50) < 0.005, lib >= 2000
    body = f"""
### Demo session (`ctxos demo`)

| turns | tokens_full | tokens_assembled | ratio | target | orphaned | frames verified |
|---:|---:|---:|---:|---:|---:|---:|
| {demo["turns"]} | {demo["tokens_full"]:,} | {demo["tokens_assembled"]:,} | {demo["ratio"]:.1%} | ≤ 40% | {demo["orphaned_tool_results"]} | {demo["frames_verified"]}/{demo["frames"]} |

Target (≤ 40% of the tokens, no orphaned tool result, every frame verified): {verdict(demo_ok)}.

### Assembly cost vs history length (embedded store)

Synthetic sessions (a tool call with a 1.5k-char output per turn, a user message every 10
turns), same policy (managed from the first turn), so the same active set. Time per
`transform_context` call, which includes ingest, policy, the frame and the one transaction that
writes the turn.

| session | p50 all turns | p95 all turns | p50 last 50 | p95 last 50 |
|---|---:|---:|---:|---:|
| 100 turns | {pct(short, 50) * 1e3:.2f} ms | {pct(short, 95) * 1e3:.2f} ms | {pct(tail_s, 50) * 1e3:.2f} ms | {pct(tail_s, 95) * 1e3:.2f} ms |
| 1,000 turns | {pct(long_, 50) * 1e3:.2f} ms | {pct(long_, 95) * 1e3:.2f} ms | {pct(tail_l, 50) * 1e3:.2f} ms | {pct(tail_l, 95) * 1e3:.2f} ms |

Ratio of the last-50-turn p50s, 1,000 vs 100 turns: **{ratio:.2f}×** (target ≤ 2×: {verdict(flat)}; aim p50 < 5 ms
at 1,000 turns: {verdict(fast)}).

### Incremental ingest (embedded store)

{n:,} messages in per-turn batches through `Session.sync` + one transaction per turn (hashes,
chat pages, tool-call and state documents, session cursor), against a bare SQLite loop inserting
the same messages as JSON rows in the same batches:

| | messages/s |
|---|---:|
| context_os (median of 3 rounds; range {spread}) | {lib:,.0f} |
| bare SQLite loop | {bare:,.0f} |
| ratio | {lib / bare:.2f}× |

Target ≥ 2,000 messages/s: {verdict(ingest)}.

{_split_text(split)}Each turn writes a handful of documents, their version rows, and index
rows for the meta keys that are searched by (session, object, path; see
[bitemporal.md](bitemporal.md#reads)); keys nobody searches by are not indexed on the embedded
store. [Where the time goes](#where-the-time-of-embedded-ingest-goes) has a profile.
"""
    return body, demo_ok and flat and fast and ingest


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        demo = run_demo(tmp)
        print(
            f"demo: {demo['tokens_assembled']:,} / {demo['tokens_full']:,} tokens = {demo['ratio']:.1%}, "
            f"orphans {demo['orphaned_tool_results']}, frames {demo['frames_verified']}/{demo['frames']}"
        )
        short, long_ = assembly_times(tmp, SHORT), assembly_times(tmp, LONG)
        tail_s, tail_l = short[-50:], long_[-50:]
        ratio = pct(tail_l, 50) / pct(tail_s, 50)
        print(
            f"assembly p50 last 50 turns: 100 turns {pct(tail_s, 50) * 1e3:.2f} ms, "
            f"1000 turns {pct(tail_l, 50) * 1e3:.2f} ms, ratio {ratio:.2f}x"
        )
        # disk noise on a shared VM moves single rounds by ±15%: the median of three, each against
        # its own bare baseline from the same round
        measured = sorted((ingest_rate(tmp / f"r{i}", INGEST_TURNS) for i in range(3)), key=lambda r: r[0])
        rounds = [(lib, bare, n) for lib, bare, n, _ in measured]
        lib, bare, n = rounds[1]
        spread = f"{rounds[0][0]:,.0f}–{rounds[2][0]:,.0f}"
        print(
            f"ingest: {lib:,.0f} msg/s (median of 3, range {spread}) vs bare SQLite {bare:,.0f} msg/s "
            f"({lib / bare:.2f}x of bare), {n} messages"
        )
    body, ok = section(demo, short, long_, rounds, measured[1][3])
    write_section("Core", body)
    print("targets met" if ok else "TARGET MISSED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    command_line(__doc__, main)
