"""Replaying recorded agent sessions through context_os (``ctxos replay``, ``ctxos demo``).

    transcripts.py    session files (Pi, Claude Code, Codex CLI, Gemini CLI, SWE-agent, OpenHands,
                      OpenAI) → ``Transcript``s
    formats/          one reader per format, and the parse they share
    run.py            the replay loop and its measures (``replay_transcript``)

Sits above ``harness`` (it drives a session through a harness's hook, like the harness would)
and ``files``; the recorded session's files are kept as harness/virtual_files.py keeps a live
agent's; nothing below imports it.

It never writes to the store itself: the session and the file index do.
"""

from .run import TranscriptReplay, TranscriptRow, replay_total, replay_transcript
from .transcripts import (
    FORMATS,
    MAX_SESSION_BYTES,
    Compaction,
    Transcript,
    demo_messages,
    demo_transcript,
    detect_format,
    read_session,
    read_sessions,
)

__all__ = [
    "FORMATS",
    "MAX_SESSION_BYTES",
    "Compaction",
    "Transcript",
    "TranscriptReplay",
    "TranscriptRow",
    "demo_messages",
    "demo_transcript",
    "detect_format",
    "read_session",
    "read_sessions",
    "replay_total",
    "replay_transcript",
]
