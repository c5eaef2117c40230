"""context_os against the context strategies users pick instead, on the same recorded sessions, in one
process: full history, LangChain-style last-messages trimming, Anthropic's tool-result clearing and
Pi's summary compaction (``bench/_strategies.py``; docs/strategies.md describes each), and
context_os through ``replay_transcript`` with its default policy on a temporary SQLite store.

Every session of the tuning set and of the check set (``bench/_sessions.py``) is measured. Aims,
checked per session:

* every session: 0 orphaned tool results, prefix stability ≥ 0.90 (or, for a session so short
  that full history itself stays below that, no lower than full history's);
* sessions of ≥ 100 model calls: 0 calls showing a stale file view, tokens ≤ 25% of full history,
  ≥ 90% of edits with their target file in context (or full history's own share, when that is
  lower), and the fewest tokens of the strategies that keep that share of edit targets;
* sessions whose largest input stays under 50k tokens: cache-priced, no dearer than full history.

Exit status 1 if an aim is missed on any session (after every table is written). Writes the
"Strategies" section of docs/benchmarks.md and the plot docs/strategies.png.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from context_os import Session, open_store
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import Transcript

from ._report import DOC, against, command_line, write_section
from ._sessions import LONG, SETS, SMALL_TOKENS, BenchSession, agents, bench_sessions
from ._strategies import (
    ClearToolResults,
    FullHistory,
    Measured,
    PiCompaction,
    Prepared,
    TrimLast,
    measure,
    prepare,
    unpaired,
)

PLOT = DOC.with_name("strategies.png")
"""docs/strategies.png, beside the section that shows it."""

CONTEXT_WINDOWS = {"claude-opus-4-5": 200_000, "claude-sonnet-4-5": 200_000}
"""Context windows from Pi's model registry (packages/ai/src/models.generated.ts)."""
DEFAULT_CONTEXT_WINDOW = 200_000
"""For a session that does not name a known model (the demo session comes from a claude-opus-4-5 one)."""
RESERVE_TOKENS = 16_384
"""Pi's DEFAULT_COMPACTION_SETTINGS.reserveTokens; the trimming budget leaves the same room."""
EDIT_BAR = 0.90
PREFIX_BAR = 0.90
TOKEN_BAR = 0.25
CONTEXT_OS = "context_os"


@dataclass
class SessionRun:
    session: BenchSession
    prepared: Prepared
    results: list[Measured]
    notes: list[str]
    """Sentences for the section, under the session's heading."""

    @property
    def label(self) -> str:
        return self.session.name

    @property
    def ours(self) -> Measured:
        return self.results[-1]

    @property
    def full(self) -> Measured:
        return self.results[0]


def context_window(t: Transcript) -> int:
    models = [m.get("model") for m in t.messages if m.get("role") == "assistant" and m.get("model")]
    return CONTEXT_WINDOWS.get(str(models[-1]), DEFAULT_CONTEXT_WINDOW) if models else DEFAULT_CONTEXT_WINDOW


SESSION_ID = "bench"
"""The id every session replays under, each in a store of its own: a replay hashes its file ids
from the session id, so an id built from a session's place in the list gave its files other ids
whenever a session was added before it."""


def run_context_os(t: Transcript) -> tuple[Measured, int | None]:
    with tempfile.TemporaryDirectory() as d, open_store(f"sqlite:///{d}/strategies.db") as store:
        session = Session.open(store, SESSION_ID, harness=t.harness, workspace=t.cwd)
        r = replay_transcript(t, session, verify="none")
    m = Measured(
        CONTEXT_OS,
        tokens=[row.tokens_assembled for row in r.rows],
        prefix=[row.tokens_prefix for row in r.rows],
        edits_total=r.edits_total,
        edits_with_target=r.edits_with_target_active,
        edits_text_shown=r.edits_with_target_text_shown,
        stale_views=r.stale_file_views_assembled,
        orphaned=r.orphaned_tool_results,
        note="default `RetentionPolicy`",
    )
    return m, r.tokens_pi_compacted


def run_session(bs: BenchSession) -> SessionRun:
    t = bs.transcript
    label = bs.name
    window = context_window(t)
    s = prepare(t, label, window)
    trim = TrimLast(window - RESERVE_TOKENS)
    clear = ClearToolResults()
    compaction = PiCompaction(window, reserve_tokens=RESERVE_TOKENS)
    results = [measure(s, strategy) for strategy in (FullHistory(), trim, clear, compaction)]
    results[1].note = f"budget {trim.max_tokens:,}" + (
        f"; {trim.empty} calls kept no user message" if trim.empty else ""
    )
    results[2].note = f"applied on {clear.triggered} of {len(s.calls)} calls"
    reasons = [reason for _, _, reason in compaction.compactions]
    results[3].note = (
        f"{len(reasons)} compactions ({reasons.count('threshold')} at the threshold, "
        f"{reasons.count('overflow')} on overflow), summary {compaction.summary_tokens:,} tokens"
        if reasons
        else "no compaction"
    )
    ours, pi_recorded = run_context_os(t)
    results.append(ours)
    if len(ours.tokens) != len(s.calls):
        raise SystemExit(f"strategies: {label}: context_os replayed {len(ours.tokens)} calls, baselines {len(s.calls)}")
    notes = [f"{len(s.calls)} model calls; context window {window:,} tokens."]
    recorded = unpaired(s.messages)
    if recorded:
        open_calls = sum(p.startswith("call:") for p in recorded)
        lone_results = len(recorded) - open_calls
        notes.append(
            f"The recording itself has {open_calls} tool calls without results (runs the user aborted)"
            + (f" and {lone_results} results without calls" if lone_results else "")
            + ": they are in every input and count against no strategy."
        )
    idle = [m.strategy for m in results[1:4] if m.tokens == results[0].tokens]
    if idle:
        notes.append(
            f"{', '.join(idle)}: never engaged (the longest input is {results[0].peak:,} tokens), so identical to "
            "full history."
        )
    if pi_recorded is not None:
        pi_points = ", ".join(str(c.at) for c in t.compactions)
        simulated = ", ".join(str(s.origin[end]) for end, _, _ in compaction.compactions) or "none"
        notes.append(
            f"For reference, what Pi itself sent with the compactions it recorded: {pi_recorded:,} tokens "
            f"({pi_recorded / results[0].total:.1%} of full). Pi compacted before messages {pi_points}: its "
            "threshold compares the provider's reported usage (system prompt and tool definitions included, and "
            f"real tokens run higher than chars/4); the simulation, on chars/4, compacts before messages {simulated}."
        )
    return SessionRun(bs, s, results, notes)


@dataclass(frozen=True)
class Aim:
    name: str
    met: bool
    why: str
    """The numbers, said so that a missed aim explains itself."""


def prefix_bar(run: SessionRun) -> float:
    """0.90, or full history's own stability when that is lower (a session of a few calls)."""
    return min(PREFIX_BAR, run.full.prefix_stability)


def eligible_others(run: SessionRun) -> list[Measured]:
    """The other strategies that keep at least the bar's share of edit targets, fewest tokens first."""
    bar = edit_bar(run) - 1e-9
    return sorted((m for m in run.results[:-1] if m.edit_share >= bar), key=lambda m: m.total)


def edit_bar(run: SessionRun) -> float:
    """90%, or full history's own share when that is lower: an edit of a file the session never read
    or wrote has no target any strategy could show (a replay has no disk to read it from)."""
    return min(EDIT_BAR, run.full.edit_share)


def keeping(run: SessionRun) -> str:
    """The strategies compared on tokens, said: those keeping the session's edit bar."""
    bar = edit_bar(run)
    if bar >= EDIT_BAR - 1e-9:
        return f"keeping ≥ {EDIT_BAR:.0%} of edit targets"
    return f"keeping ≥ {bar:.1%} of edit targets (full history's ceiling)"


def aims(run: SessionRun) -> list[Aim]:
    """The aims that apply to this session, each with whether context_os met it."""
    ours, full = run.ours, run.full
    share = ours.total / full.total if full.total else 1.0
    stability, bar = against(ours.prefix_stability, prefix_bar(run))
    out = [
        Aim("orphans", ours.orphaned == 0, f"{ours.orphaned} orphaned tool results"),
        Aim(
            "prefix",
            ours.prefix_stability >= prefix_bar(run) - 1e-9,
            f"prefix stability {stability} (bar {bar})",
        ),
    ]
    if run.session.calls >= LONG:
        keeps = ours.edit_share >= edit_bar(run) - 1e-9
        beaten = [m for m in eligible_others(run) if m.total <= ours.total]
        ceiling = f", full history's ceiling {full.edit_share:.1%}" if full.edit_share < EDIT_BAR else ""
        out += [
            Aim("stale", ours.stale_views == 0, f"{ours.stale_views} calls with a stale file view"),
            Aim(
                "tokens",
                share <= TOKEN_BAR,
                f"{against(share, TOKEN_BAR, under=True, digits=1, percent=True)[0]} of full history's tokens "
                f"(bar {TOKEN_BAR:.0%})",
            ),
            Aim(
                "edits",
                keeps,
                f"{against(ours.edit_share, edit_bar(run), digits=1, percent=True)[0]} of edit targets in context "
                f"(bar {EDIT_BAR:.0%}{ceiling})",
            ),
            Aim(
                "fewest",
                keeps and not beaten,
                f"{beaten[0].strategy} sends {beaten[0].total:,} tokens with {beaten[0].edit_share:.1%} of edit "
                f"targets (context_os {ours.total:,})"
                if beaten
                else f"fewest tokens of the strategies {keeping(run)}"
                if keeps
                else f"context_os itself keeps {ours.edit_share:.1%} of edit targets",
            ),
        ]
    if full.peak < SMALL_TOKENS:
        cost = ours.cache_priced / full.cache_priced if full.cache_priced else 1.0
        out.append(Aim("small", cost <= 1.0 + 1e-9, f"cache-priced {cost:.1%} of full history's"))
    return out


def verdict(run: SessionRun) -> tuple[bool, str]:
    """Whether context_os met every aim that applies, and the sentence that says so, with the numbers."""
    found = aims(run)
    missed = [a for a in found if not a.met]
    if missed:
        return False, "**missed**: " + "; ".join(a.why for a in missed) + "."
    others = [m for m in eligible_others(run) if m.strategy != "full history"]
    others = [m for m in others if m.total != run.full.total]
    ours = run.ours
    runner = (
        f"; the next strategy {keeping(run)}, {others[0].strategy}, sends "
        f"{others[0].total:,} ({others[0].total / ours.total:.1f}×)"
        if others
        else ""
    )
    return True, "**met**: " + "; ".join(a.why for a in found) + runner + "."


def summary(runs: list[SessionRun]) -> str:
    """One row per session of a set: context_os against full history, and which aims it met."""
    rows = [
        "| session | agent | calls | peak input | tokens vs full | prefix (full's) | cache-priced vs full "
        "| edits with target in context | stale | orphaned | best other keeping the edit bar | aims |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for run in runs:
        ours, full = run.ours, run.full
        others = [m for m in eligible_others(run) if m.strategy != "full history" and m.total != full.total]
        best = f"{others[0].strategy}: {others[0].total / full.total:.1%}" if others else "none"
        found = aims(run)
        marks = ", ".join(a.name if a.met else f"**{a.name} missed**" for a in found)
        rows.append(
            f"| {run.label} | {run.session.kind} | {run.session.calls} | {full.peak:,} "
            f"| {ours.total / full.total:.1%} | {against(ours.prefix_stability, prefix_bar(run))[0]} "
            f"({full.prefix_stability:.3f}) "
            f"| {ours.cache_priced / full.cache_priced:.1%} "
            f"| {ours.edits_with_target} / {ours.edits_total}{_text_shown(ours)} | {ours.stale_views} "
            f"| {ours.orphaned} | {best} "
            f"| {marks} |"
        )
    return "\n".join(rows)


def _text_shown(m: Measured) -> str:
    """The stricter count beside the edits with their target in context, where it was measured."""
    return "" if m.edits_text_shown is None or not m.edits_total else f" ({m.edits_text_shown} with its text)"


def table(run: SessionRun) -> str:
    full = run.results[0].total
    rows = [
        "| strategy | input tokens Σ | vs full | peak / call | prefix stability | not a prefix Σ | cache-priced vs full "
        "| edits with target in context | calls with a stale file view | orphaned | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for m in run.results:
        name = f"**{m.strategy}**" if m.strategy == CONTEXT_OS else m.strategy
        rows.append(
            f"| {name} | {m.total:,} | {m.total / full:.1%} | {m.peak:,} | {m.prefix_stability:.3f} | {m.uncached:,} "
            f"| {m.cache_priced / run.results[0].cache_priced:.1%} "
            f"| {m.edits_with_target} / {m.edits_total} ({m.edit_share:.1%}) | {m.stale_views} | {m.orphaned} | {m.note} |"
        )
    return "\n".join(rows)


COLORS = {
    "full history": "#7f7f7f",
    "trim last (LangChain)": "#1f77b4",
    "clear tool results (Anthropic)": "#ff7f0e",
    "Pi compaction": "#2ca02c",
    CONTEXT_OS: "#d62728",
}


def plot(runs: list[SessionRun], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main = runs[0]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1.4, 1]})
    for m in main.results:
        left.plot(
            range(1, len(m.tokens) + 1),
            [t / 1000 for t in m.tokens],
            label=m.strategy,
            color=COLORS.get(m.strategy),
            lw=1.6 if m.strategy == CONTEXT_OS else 1.0,
        )
    left.set_title(f"tokens sent per model call: {main.label}", fontsize=9)
    left.set_xlabel("model call")
    left.set_ylabel("k tokens (chars/4)")
    left.legend(fontsize=8, loc="upper left")
    markers = "os^Dv<>Ph"
    for k, run in enumerate(runs):
        full = run.results[0].total
        for j, m in enumerate(run.results):
            # strategies that never engaged sit on full history's point: drawn largest first, they show as rings
            size = 30 + 45 * (len(run.results) - 1 - j)
            right.scatter(
                100 * m.total / full,
                100 * m.edit_share,
                color=COLORS.get(m.strategy),
                marker=markers[k % len(markers)],
                s=size,
            )
        right.scatter(
            [],
            [],
            color="#555",
            marker=markers[k % len(markers)],
            label=f"{run.session.set}: {Path(run.label).name[:24]}",
        )
    right.axhline(100 * EDIT_BAR, color="#999", ls="--", lw=0.8)
    right.set_title("total tokens vs edit targets in context", fontsize=10)
    right.set_xlabel("input tokens Σ, % of full history")
    right.set_ylabel("edits with target in context, %")
    right.legend(fontsize=6, loc="lower right", title="session", title_fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def run_set(which: str) -> list[SessionRun]:
    runs: list[SessionRun] = []
    for bs in bench_sessions(which):
        runs.append(run_session(bs))
        run = runs[-1]
        ok, text = verdict(run)
        print(f"strategies: {which}: {run.label}: {run.session.calls} calls", flush=True)
        if run.session.calls >= LONG:
            for m in run.results:
                print(
                    f"  {m.strategy:32} {m.total:>12,} tokens  peak {m.peak:>8,}  prefix {m.prefix_stability:.3f}  "
                    f"uncached {m.uncached:>10,}  edits {m.edits_with_target:>3}/{m.edits_total:<3} "
                    f"({m.edit_share:6.1%})  stale {m.stale_views:>4}  orphaned {m.orphaned}"
                )
        print("  " + text.replace("**", ""), flush=True)
    return runs


def intro(sessions: list[BenchSession]) -> list[str]:
    """The section's first paragraphs: what is measured, on which agents' sessions, and the aims."""
    return [
        "context_os against the strategies users would otherwise pick, replayed in one process on the same "
        "recorded sessions (every assistant message a model was asked for is one model call; its input is every message before it). "
        "Tokens are chars/4 per message, as everywhere in these benchmarks. What each strategy does, its "
        "parameters and where they come from: [strategies.md](strategies.md). context_os runs through "
        "`replay_transcript` (as `ctxos replay`) with its default policy on a temporary SQLite store.",
        f"The sessions are real recorded runs of {agents(sessions)}, split into a **tuning "
        "set** (the default policy was chosen on it) and a **check set** (measured only after a change is fixed, "
        "never used to choose one); where each comes from: `bench/sessions/README.md`. A Claude Code file brings "
        "its sub-agents (`#label`), an OpenHands `output.jsonl` one session per record (`#instance`).",
        "Columns: *prefix stability* is Σ (tokens of the leading messages identical to the previous call's) / "
        "Σ tokens sent, the definition of [replay.md](replay.md#measures---json); *not a prefix*: Σ of the "
        "tokens of each call that are not (what a prefix cache cannot serve); *cache-priced*: the input priced "
        "as a provider's prefix cache bills it, the shared prefix at 0.1× and the rest at 1.25× (Anthropic's "
        "cache-read and cache-write multipliers), against full history priced the same way; "
        "*edits with target in context*: "
        "for context_os, the file object active at its latest version (in brackets in the summaries: of "
        "those, the edits whose replaced text is in what the file shows, its window of a long file; an edit "
        "by line numbers or that replaces no text counts as not shown); for the others, the file's latest read "
        "result or write and every edit since are in the messages sent (tool output not cleared); *stale file "
        "view*: the messages sent show some file as read or written before a later change; *orphaned*: pairing "
        "problems the strategy made (a tool call sent without its result, a result without its call), not "
        "those the recording itself has.",
        f"Aims, per session: every session 0 orphans and prefix stability ≥ {PREFIX_BAR:.2f} (or full history's "
        "own, when a session is too short for that: *prefix*); sessions of "
        f"≥ {LONG} calls: 0 calls with a stale file view (*stale*), tokens ≤ {TOKEN_BAR:.0%} of full history "
        f"(*tokens*), ≥ {EDIT_BAR:.0%} of edit targets in context (*edits*; where full history itself keeps fewer, "
        "because the agent edits files the session never read or wrote, its share is the ceiling, said in the "
        f"row), and the fewest tokens of the strategies that keep that share (*fewest*); "
        f"sessions whose largest input stays under {SMALL_TOKENS // 1000}k tokens: cache-priced no dearer than "
        "full history (*small*).",
    ]


def main() -> int:
    by_set = {which: run_set(which) for which in SETS}
    parts = intro([run.session for runs in by_set.values() for run in runs])
    met_all = True
    for which, runs in by_set.items():
        verdicts = [verdict(run) for run in runs]
        missed = [run.label for run, (ok, _) in zip(runs, verdicts, strict=True) if not ok]
        met_all = met_all and not missed
        parts.append(
            f"### The {which} set: {len(runs)} sessions\n\n{summary(runs)}\n\n"
            + (
                f"Every aim met on every session of the {which} set."
                if not missed
                else f"Aims missed on {len(missed)} of {len(runs)} sessions: {', '.join(missed)}."
            )
        )
        for run, (_, text) in zip(runs, verdicts, strict=True):
            if run.session.calls < LONG:
                continue
            head = f"#### {which}: {run.label}\n\n" + " ".join(run.notes)
            parts.append(f"{head}\n\n{table(run)}\n\nAims: {text}")
    long_runs = [run for runs in by_set.values() for run in runs if run.session.calls >= LONG]
    if long_runs:
        plot(long_runs, PLOT)
        parts.append(
            "![Tokens per call for each strategy on the first session, and total tokens against edit targets "
            "in context on every session of ≥ 100 calls](strategies.png)"
        )
    write_section("Strategies", "\n\n".join(parts))
    print("strategies: every aim met" if met_all else "strategies: AIM MISSED", file=sys.stderr)
    return 0 if met_all else 1


if __name__ == "__main__":
    command_line(__doc__, main)
