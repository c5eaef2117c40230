"""Replay a recorded conversation through context_os, assembling the context at every model call.

A model call happened wherever the recording has an assistant message: its input was every
message before it. For each, the naive transcript (what the harness sent) is compared with
what context_os assembles, using the same token estimate on both sides.

``replay_transcript`` replays any session file ``transcripts.read_session`` reads (and the
bundled session of ``ctxos demo``), through its harness's hook (harness/registry.py), and keeps
the files the recorded tools read, wrote and edited as *virtual* file objects
(virtual_files.py: the recorded session's files are not on disk; their versions are recorded
from the transcript, valid time = the message's timestamp). It measures what ``ctxos replay``
reports: see docs/replay.md.

This module drives a session like a harness would; it never writes to the store itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..context.entries import ToolCall, msg_chars
from ..context.frames import frame_basis, frame_docs, frame_id, verify_frames
from ..context.ingest import check_incoming
from ..context.policy import RetentionPolicy
from ..context.session import Session
from ..errors import ContentTooLarge, InputError, MalformedMessage
from ..harness.base import Adapter, ContextHook
from ..harness.file_ops import edit_target
from ..harness.pairing import check_pairs
from ..harness.registry import harness
from ..harness.virtual_files import VirtualFiles
from ..hashing import hash_value
from ..tokens import estimate_tokens
from .transcripts import Transcript

__all__ = [
    "TranscriptReplay",
    "TranscriptRow",
    "adapter_calls",
    "replay_total",
    "replay_transcript",
    "requested_calls",
]


# --- replaying a session file ---------------------------------------------------------------------


@dataclass
class TranscriptRow:
    """One model call of a replayed session file."""

    turn: int
    message: int
    """Index of the assistant message this call produced."""
    messages: int
    tokens_full: int
    tokens_assembled: int
    tokens_prefix: int
    active: int
    changes: int
    orphaned: int


@dataclass
class TranscriptReplay:
    """What ``ctxos replay`` reports (docs/replay.md defines every field)."""

    file: str
    format: str
    session: str
    store: str
    turns: int = 0
    tokens_full: int = 0
    tokens_assembled: int = 0
    tokens_pi_compacted: int | None = None
    prefix_tokens: int = 0
    prefix_stability: float = 0.0
    orphaned_tool_results: int = 0
    frames: int = 0
    frames_checked: int = 0
    frames_verified: int = 0
    edits_total: int = 0
    edits_with_target_active: int = 0
    edits_with_target_text_shown: int = 0
    stale_file_views_full: int = 0
    stale_file_views_assembled: int = 0
    files: int = 0
    file_versions: int = 0
    seconds: float = 0.0
    seconds_verify: float = 0.0
    peak_rss_mb: float = 0.0
    rows: list[TranscriptRow] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("rows")
        d["ratio"] = round(self.tokens_assembled / self.tokens_full, 4) if self.tokens_full else None
        return d


def replay_total(results: list[TranscriptReplay], *, session: str) -> TranscriptReplay:
    """The measures of several replayed sessions (a file's main session and its sidechains or
    records) as one: counts and times summed, ``prefix_stability`` over the sum, the peak
    memory the highest; file, format and store the first's, ``session`` the one given."""
    first = results[0]
    total = TranscriptReplay(file=first.file, format=first.format, session=session, store=first.store)
    for f in fields(TranscriptReplay):
        values = [getattr(r, f.name) for r in results]
        if f.name in ("file", "format", "session", "store", "rows", "prefix_stability"):
            continue
        if f.name == "peak_rss_mb":
            total.peak_rss_mb = max(values)
        elif all(v is None for v in values):
            setattr(total, f.name, None)
        elif isinstance(values[0], float):
            setattr(total, f.name, round(sum(values), 3))
        else:
            setattr(total, f.name, sum(v for v in values if v is not None))
    total.prefix_stability = round(total.prefix_tokens / total.tokens_assembled, 4) if total.tokens_assembled else 0
    return total


def _peak_rss_mb() -> float:
    try:
        import resource

        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB
    except (ImportError, OSError):  # pragma: no cover - not Linux
        return 0.0


def check_transcript(transcript: Transcript, policy: RetentionPolicy | None = None) -> None:
    """``InputError`` naming the file and the message if the harness's adapter refuses one of the
    transcript's messages, or the session would (``check_incoming``: a field over ``policy``'s
    ``max_message_chars``...): before a session is written (a replay that stopped half-way would
    leave one)."""
    adapter = harness(transcript.harness).adapter()
    cap = (policy or RetentionPolicy()).max_message_chars
    where = transcript.source or "the transcript"
    for k, m in enumerate(transcript.messages):
        try:
            if adapter.sent(m):
                translated = adapter.translate(m, k)
                for piece in translated if isinstance(translated, list) else [translated]:
                    check_incoming(piece, k, cap)
        except ContentTooLarge as e:
            raise InputError(
                f"{where}: {e} (RetentionPolicy.max_message_chars): no session can hold it; nothing was written"
            ) from None
        except MalformedMessage as e:
            raise InputError(f"{where}: {e}") from None


def replay_transcript(
    transcript: Transcript,
    session: Session,
    *,
    file: str = "",
    verify: str = "all",
    jobs: int | None = None,
    on_turn: Callable[[TranscriptRow], None] | None = None,
    on_verify: Callable[[], None] | None = None,
) -> TranscriptReplay:
    """Assemble the context at every model call of ``transcript`` (each assistant message; its input
    is every message before it, uncompacted) and measure it. ``verify``: ``all`` re-renders every
    frame from the store, ``last`` only the last one, ``none`` none (``jobs``: worker processes that
    re-render them, ``verify_frames``; default one per CPU). A session that holds the
    first messages already (``ctxos replay --append``) goes on from the first call whose input
    it does not hold. ``on_turn`` is called after each call, ``on_verify`` after each frame checked."""
    started = time.perf_counter()
    files = VirtualFiles(session, root=transcript.cwd, tool_names=transcript.tool_names)
    hook = harness(transcript.harness).hook(session, on_sync=files.observe)
    adapter = hook.adapter
    messages = transcript.messages
    result = TranscriptReplay(file=file, format=transcript.format, session=session.id, store=session.store.url)
    calls = model_calls(transcript, hook)
    tokens: list[int] = []
    outputs: dict[str, str] = {}  # tool call id → its output (a windowed edit's file is named there)
    for k, m in enumerate(messages):
        if not adapter.sent(m):
            tokens.append(0)
            continue
        translated = adapter.translate(m, k)
        pieces = translated if isinstance(translated, list) else [translated]
        tokens.append(sum(estimate_tokens(msg_chars(p)) for p in pieces))
        for p in pieces:
            if p["role"] == "tool" and isinstance(p.get("tool_call_id"), str):
                outputs.setdefault(p["tool_call_id"], p["text"] or "")
    result.tokens_pi_compacted = transcript.compacted_tokens(tokens, calls)
    prev_keys: list[str] = []
    for k in calls:
        out = hook.transform_context(messages[:k])
        a = hook.last
        assert a is not None
        rendered = a.rendered
        # a message at the end is keyed as the block it becomes once history follows it
        keys = [u.hash for u in rendered.units] + [hash_value([m]) for m in rendered.volatile]
        sizes = [u.tokens for u in rendered.units] + [estimate_tokens(msg_chars(m)) for m in rendered.volatile]
        prefix = 0
        for key, old, size in zip(keys, prev_keys, sizes, strict=False):
            if key != old:
                break
            prefix += size
        prev_keys = keys
        problems, still_open = check_pairs(adapter.pairing, out)
        orphans = len(problems) + (1 if still_open else 0)
        # the calls of an answer its harness sends no more (Pi: aborted or failed) never ran
        for c in adapter_calls(adapter, messages[k], k) if adapter.sent(messages[k]) else ():
            if files.names is None or files.names.role(c["name"], c["arguments"]) != "edit":
                continue
            result.edits_total += 1
            op = edit_target(c["arguments"], outputs.get(c["id"], ""))
            if op is not None:
                active, shown = files.target_shown(op.path, op.edits)
                result.edits_with_target_active += active
                result.edits_with_target_text_shown += shown
        result.stale_file_views_full += files.stale_naive()
        result.stale_file_views_assembled += files.stale_assembled()
        row = TranscriptRow(
            turn=a.turn,
            message=k,
            messages=len(out),
            tokens_full=a.tokens_full,
            tokens_assembled=a.tokens,
            tokens_prefix=prefix,
            active=len(session.view.live()),
            changes=len(a.changes),
            orphaned=orphans,
        )
        result.rows.append(row)
        result.turns += 1
        result.tokens_full += row.tokens_full
        result.tokens_assembled += row.tokens_assembled
        result.prefix_tokens += prefix
        result.orphaned_tool_results += orphans
        if on_turn is not None:
            on_turn(row)
    result.prefix_stability = round(result.prefix_tokens / result.tokens_assembled, 4) if result.tokens_assembled else 0
    result.files = len(files.files)
    result.file_versions = sum(f.version for f in files.files.values())
    replayed = time.perf_counter()
    frames = frame_docs(session.store, session.id)
    result.frames = len(frames)
    checked = frames if verify == "all" else frames[-1:] if verify == "last" else []
    result.frames_checked = len(checked)
    with closing(verify_frames(session.store, checked, jobs=jobs)) as checks:  # (its workers stop with it)
        for check in checks:
            result.frames_verified += check.ok
            if on_verify is not None:
                on_verify()
    result.seconds_verify = round(time.perf_counter() - replayed, 3)
    result.seconds = round(time.perf_counter() - started, 3)
    result.peak_rss_mb = _peak_rss_mb()
    return result


def model_calls(transcript: Transcript, hook: ContextHook[Any]) -> list[int]:
    """The messages of ``transcript`` whose model call a replay into ``hook``'s session makes:
    each assistant message a model was asked for, but those it inherited (a fork's copy of its
    parent, SWE-agent's demonstrations) and those whose input the session holds already
    (``--append``)."""
    session, messages = hook.session, transcript.messages
    calls = requested_calls(transcript, hook.adapter)
    if session.view.visible:  # a session that goes on: the calls whose input it holds are done
        held = hook.held(messages)
        # but the call of a replay killed after its messages were written, before its frame was
        calls = [k for k in calls if k > held or (k == held and _unframed(session))]
    return calls


def requested_calls(transcript: Transcript, adapter: Adapter[Any]) -> list[int]:
    """The messages of ``transcript`` that a model was asked for (``adapter`` reads its messages):
    every assistant message except a leading one, one its harness wrote without a call
    (``Adapter.requested``) and one of the messages it inherited (``Transcript.inherited``: a
    fork's copy of its parent, the parent's calls; SWE-agent's demonstrations). The strategy
    bench compares the other strategies on the same calls."""
    return [
        k
        for k, m in enumerate(transcript.messages)
        if _assistant(adapter, m, k)
        and k > 0
        and adapter.requested(m)
        and k >= transcript.inherited  # a fork's copy of its parent (the parent's calls), demonstrations
    ]


def _assistant(adapter: Adapter[Any], message: Any, index: int) -> bool:
    """Whether a harness message is the model's: a dict by its ``role``; an object (LangChain's
    messages) by what its adapter makes of it."""
    if isinstance(message, Mapping):
        return message.get("role") == "assistant"
    try:
        translated = adapter.translate(message, index)
    except MalformedMessage:
        return False
    return any(p["role"] == "assistant" for p in (translated if isinstance(translated, list) else [translated]))


def _unframed(session: Session) -> bool:
    """Whether the session holds messages its last frame did not see (a replay killed within a
    call: its messages and file versions are written as they are read, its frame at its end)."""
    store, sid = session.store, session.id
    frame = store.doc(frame_id(sid, session.view.turn)) if session.view.turn else None
    if frame is None:
        return bool(session.view.visible)
    seen = store.get(f"session:{sid}", tx_id=frame_basis(store, frame))
    return seen is None or seen.doc is None or seen.doc["meta"].get("cursor", 0) < len(session.view.visible)


def adapter_calls(adapter: Adapter[Any], message: Any, index: int) -> list[ToolCall]:
    """The tool calls of one harness message, neutral."""
    translated = adapter.translate(message, index)
    out: list[ToolCall] = []
    for m in translated if isinstance(translated, list) else [translated]:
        out.extend(m.get("tool_calls") or ())
    return out
