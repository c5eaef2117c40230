"""The recorded sessions the economy benchmarks run on, split into the tuning set and the check set
(``bench/sessions/README.md``: the policy may be tuned on the first, never on the second).

Each file is read with ``read_sessions`` the way ``ctxos replay`` reads it, so a Claude Code file
brings its sub-agents (from the file and from ``<session>/subagents/`` beside it) and an OpenHands
``output.jsonl`` one session per record. The real Pi session in ``shared/data`` and the bundled
demo session belong to the tuning set.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from context_os.harness.registry import harness
from context_os.replay.run import requested_calls
from context_os.replay.transcripts import Transcript, demo_transcript, read_sessions

from ._report import DATA, head, left_out, sized

ROOT = Path(__file__).resolve().parent.parent
SESSIONS = ROOT / "bench" / "sessions"
SHARED_PI = DATA / "pi-sessions" / "before-compaction.jsonl"
SHARED_PI_LINES = sized(None, 250)
"""The lines of the real Pi session a run reads: all, or in smoke mode the first 250 (118 model
calls: still a session held to the economy aims)."""
SETS = ("tuning", "check")
SUFFIXES = (".jsonl", ".json", ".traj")
"""A session file's suffixes, each also gzip-compressed (``.jsonl.gz``)."""
LONG = 100
"""Sessions of at least this many model calls are held to the economy aims."""
SMALL_TOKENS = 50_000
"""Sessions whose largest input stays under this many tokens must cost no more than full history."""
AGENTS = {
    "pi": "Pi",
    "claude-code": "Claude Code",
    "gemini-cli": "Gemini CLI",
    "swe-agent": "SWE-agent",
    "mini-swe-agent": "mini-swe-agent",
    "openhands": "OpenHands",
}
"""The agents' names, by the folder their sessions are in."""


def agents(sessions: list[BenchSession]) -> str:
    """The agents that recorded ``sessions`` (the demo session aside), named in ``AGENTS``' order."""
    kinds = {s.kind for s in sessions} - {"demo"}
    names = [name for kind, name in AGENTS.items() if kind in kinds] + sorted(kinds - AGENTS.keys())
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)


@dataclass(frozen=True)
class BenchSession:
    set: str
    kind: str
    """The agent that recorded it: its folder under bench/sessions/<set>/ (``AGENTS``), or demo."""
    name: str
    """Its file under bench/sessions/<set>/ (or shared/data, or ``ctxos demo``), with ``#label``
    for a sub-agent or an OpenHands record."""
    path: Path | None
    transcript: Transcript

    @property
    def calls(self) -> int:
        return len(requested_calls(self.transcript, harness(self.transcript.harness).adapter()))


def is_session_file(path: Path) -> bool:
    """Whether ``path`` is named as a session file (``SUFFIXES``, maybe gzip-compressed)."""
    return path.name.removesuffix(".gz").endswith(SUFFIXES)


def session_files(which: str, sessions: Path = SESSIONS) -> list[Path]:
    """The session files of one set (in ``sessions``); sub-agents' files are read with their main
    session's file."""
    base = sessions / which
    return sorted(p for p in base.rglob("*") if is_session_file(p) and "subagents" not in p.relative_to(base).parts)


@functools.cache
def shared_pi() -> Path:
    """The file of the real Pi session a run reads: ``SHARED_PI``, or in smoke mode a temporary
    copy of its first ``SHARED_PI_LINES`` lines."""
    return head(SHARED_PI, SHARED_PI_LINES)


def few(files: list[Path]) -> list[Path]:
    """``files``, or in smoke mode the smallest of them (a run that only has to go through every step)."""
    return sized(files, sorted(files, key=lambda p: p.stat().st_size)[:1])


def bench_sessions(which: str) -> list[BenchSession]:
    """Every session of the set ``which`` ("tuning" or "check"), in a fixed order."""
    if which not in SETS:
        raise ValueError(f"unknown set {which!r} (known: {', '.join(SETS)})")
    out: list[BenchSession] = []
    if which == "tuning":
        if SHARED_PI.exists():
            t = read_sessions(shared_pi())[0]
            out.append(BenchSession(which, "pi", "shared: pi-sessions/before-compaction.jsonl", SHARED_PI, t))
        else:
            left_out(f"{SHARED_PI} not found: the real Pi session is left out")
        out.append(BenchSession(which, "demo", "`ctxos demo` session", None, demo_transcript()))
    for path in few(session_files(which)):
        rel = path.relative_to(SESSIONS / which)
        for t in read_sessions(path):
            name = str(rel) if t.label is None else f"{rel}#{t.label}"
            out.append(BenchSession(which, rel.parts[0], name, path, t))
    return out
