"""The context strategies a user would pick instead of context_os, and the measures that compare them.

``bench/strategies.py`` replays one recorded session through each strategy, in one process, on the
same messages. A strategy is a pure function of the session's messages (plus, for compaction, the
compactions it already made): given the input of one model call (the first ``n`` messages), it
returns the messages it would send. Every strategy works on the neutral messages the harness
adapters make (``context_os.harness``), so tokens (chars/4 per message, ``msg_chars``) are counted
exactly as ``ctxos replay`` counts them. docs/strategies.md describes each strategy, its parameters
and its sources.

* ``FullHistory``: every message, as the harness recorded it.
* ``TrimLast``: LangChain's ``trim_messages(strategy="last", max_tokens=…, start_on="human",
  end_on=("human", "tool"), include_system=True, allow_partial=False)``.
* ``ClearToolResults``: Anthropic's ``clear_tool_uses_20250919`` context edit with its defaults
  (trigger 100,000 input tokens, keep 3 tool uses, ``clear_at_least`` none, tool inputs kept).
* ``PiCompaction``: Pi's auto-compaction (``contextWindow - reserveTokens`` threshold, keep about
  ``keepRecentTokens``, cut at a valid point, one summary of fixed length in place of the rest).

``measure`` computes, per strategy and call, the measures ``replay_transcript`` reports for
context_os (tokens, prefix stability, edits with their target's current content in view, stale
file views, orphaned tool results), with the file state tracked as ``VirtualFiles`` tracks it.
This module never touches a store and never calls a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from context_os.context.entries import Incoming, msg_chars
from context_os.harness.codex_tools import environment_cwd, shell_changes
from context_os.harness.file_ops import FileOp, edit_target, file_op
from context_os.harness.pi import COMPACTION_SUMMARY_PREFIX, COMPACTION_SUMMARY_SUFFIX
from context_os.harness.registry import harness
from context_os.harness.toolnames import ToolNames, preset
from context_os.harness.virtual_files import VirtualFile, file_key
from context_os.replay.run import requested_calls
from context_os.replay.transcripts import Transcript
from context_os.tokens import estimate_tokens

__all__ = [
    "CLEARED",
    "ClearToolResults",
    "FileTimeline",
    "FullHistory",
    "Measured",
    "PiCompaction",
    "Prepared",
    "Shown",
    "Strategy",
    "TrimLast",
    "find_cut_point",
    "measure",
    "prefix_tokens",
    "prepare",
    "trim_last",
    "unpaired",
]


# --- the session, as neutral messages ---------------------------------------------------------------


@dataclass
class Prepared:
    """A recorded session as the neutral messages a model call's input is made of."""

    name: str
    messages: list[Incoming]
    """The messages of the transcript its harness sends (``Adapter.sent``: Pi's ``excludeFromContext``
    bash runs and aborted or failed answers left out), in order, as its harness's adapter reads them."""
    tokens: list[int]
    """Per message: ``estimate_tokens(msg_chars(m))``, the estimate ``ctxos replay`` uses."""
    calls: list[int]
    """Per model call: where its input ends, ``messages[:n]`` (its answer's index, when it is sent:
    ``answers``)."""
    context_window: int
    """The context window of the session's model (Pi's threshold and the trimming budget use it)."""
    roles: ToolNames = field(default_factory=ToolNames)
    """Tool name → canonical role (read, write, edit, …); a tool whose role one of its arguments
    picks (``str_replace_editor``) is asked with the call's arguments (``roles.role``)."""
    origin: list[int] = field(default_factory=list)
    """Per message: its index in the transcript's messages."""
    root: str | None = None
    """The session's directory: a relative path names the file under it (``file_key``)."""
    prefix: list[int] = field(default_factory=list)
    """``prefix[n]`` = tokens of ``messages[:n]``."""
    answers: list[int | None] = field(default_factory=list)
    """Per model call: the index of its answer in ``messages``, None for an answer its harness sends
    no more (Pi's aborted or failed ones: their tool calls never ran)."""

    def __post_init__(self) -> None:
        self.prefix = [0]
        for t in self.tokens:
            self.prefix.append(self.prefix[-1] + t)


def prepare(transcript: Transcript, name: str, context_window: int) -> Prepared:
    """The neutral messages of ``transcript`` and its model calls, as ``replay_transcript`` sees them
    (``requested_calls``: every assistant message a model was asked for; its input is every message
    before it)."""
    adapter = harness(transcript.harness).adapter()  # Cline's, Roo Code's: Anthropic messages
    requested = set(requested_calls(transcript, adapter))
    messages: list[Incoming] = []
    origin: list[int] = []
    calls: list[int] = []
    answers: list[int | None] = []
    for k, m in enumerate(transcript.messages):
        sent = adapter.sent(m)
        if k in requested:
            calls.append(len(messages))  # a call, even one whose answer was aborted (Pi sends it no more)
            answers.append(len(messages) if sent else None)
        if not sent:
            continue
        translated = adapter.translate(m, k)
        pieces = translated if isinstance(translated, list) else [translated]
        messages.extend(pieces)
        origin.extend([k] * len(pieces))
    tokens = [estimate_tokens(msg_chars(m)) for m in messages]
    roles = preset(transcript.tool_names)
    # the session's directory, or (Codex's first rollouts) the one its environment message names,
    # as VirtualFiles learns it
    said = (environment_cwd(m.get("text") or "") for m in messages if m["role"] == "user")
    root = transcript.cwd or next((cwd for cwd in said if cwd), None)
    return Prepared(name, messages, tokens, calls, context_window, roles, origin, root, answers=answers)


# --- what a strategy sends ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Shown:
    """One message a strategy sends."""

    src: int
    """Index of the session message it shows; -1 for a message the strategy wrote (a summary)."""
    tokens: int
    key: tuple[str, int]
    """Identity for the prefix comparison: same key, same bytes."""
    cleared: bool = False
    """A tool result whose output was replaced by a placeholder."""


def _intact(s: Prepared, i: int) -> Shown:
    return Shown(i, s.tokens[i], ("m", i))


class Strategy(Protocol):
    name: str

    def context(self, s: Prepared, n: int) -> list[Shown]:
        """The messages sent for the call whose input is ``s.messages[:n]`` (calls come in order)."""
        ...


@dataclass
class FullHistory:
    """No management: every message, every tool result in full."""

    name: str = "full history"

    def context(self, s: Prepared, n: int) -> list[Shown]:
        return [_intact(s, i) for i in range(n)]


@dataclass
class TrimLast:
    """LangChain ``trim_messages(strategy="last")``: the longest run of newest whole messages whose
    tokens fit ``max_tokens`` (a leading system message kept and counted), shortened until its oldest
    message is a user message (``start_on="human"``), after dropping trailing messages that are not
    user or tool messages (``end_on``). If no user message fits, nothing but the system message is
    left, as in LangChain (``empty`` counts those calls)."""

    max_tokens: int
    start_on: tuple[str, ...] = ("user",)
    end_on: tuple[str, ...] = ("user", "tool")
    include_system: bool = True
    name: str = "trim last (LangChain)"
    empty: int = field(default=0, init=False)
    """Calls whose window kept no message but the system one."""

    def context(self, s: Prepared, n: int) -> list[Shown]:
        kept = trim_last(
            [m["role"] for m in s.messages[:n]],
            s.tokens[:n],
            self.max_tokens,
            start_on=self.start_on,
            end_on=self.end_on,
            include_system=self.include_system,
        )
        if not [i for i in kept if s.messages[i]["role"] != "system"]:
            self.empty += 1
        return [_intact(s, i) for i in kept]


def trim_last(
    roles: Sequence[str],
    tokens: Sequence[int],
    max_tokens: int,
    *,
    start_on: tuple[str, ...] = ("user",),
    end_on: tuple[str, ...] = ("user", "tool"),
    include_system: bool = True,
) -> list[int]:
    """Indices kept by ``trim_messages(strategy="last")`` over messages of these roles and token
    counts (``langchain_core.messages.utils._last_max_tokens``, ``allow_partial=False``)."""
    idx = list(range(len(roles)))
    while idx and roles[idx[-1]] not in end_on:
        idx.pop()
    system = idx.pop(0) if include_system and idx and roles[idx[0]] == "system" else None
    budget = max_tokens - (tokens[system] if system is not None else 0)
    newest_first = idx[::-1]
    fit, used = 0, 0
    for i in newest_first:
        if used + tokens[i] > budget:
            break
        used += tokens[i]
        fit += 1
    while fit > 0 and roles[newest_first[fit - 1]] not in start_on:
        fit -= 1
    kept = newest_first[:fit][::-1]
    return [system, *kept] if system is not None else kept


CLEARED = "[cleared]"
"""The placeholder LangChain's ``ClearToolUsesEdit`` (which mirrors Anthropic's edit) writes."""


@dataclass
class ClearToolResults:
    """Anthropic's ``clear_tool_uses_20250919``, applied server-side to every request: when the
    request's input exceeds ``trigger`` tokens, every tool result but the ``keep`` most recent is
    replaced by a placeholder (the oldest first; with no ``clear_at_least``, all of them). Tool call
    inputs stay (``clear_tool_inputs: false``); no tool is excluded."""

    trigger: int = 100_000
    keep: int = 3
    placeholder: str = CLEARED
    name: str = "clear tool results (Anthropic)"
    triggered: int = field(default=0, init=False)
    """Calls on which the edit applied."""

    def context(self, s: Prepared, n: int) -> list[Shown]:
        if s.prefix[n] <= self.trigger:
            return [_intact(s, i) for i in range(n)]
        self.triggered += 1
        results = [i for i in range(n) if s.messages[i]["role"] == "tool"]
        clear = set(results[: max(0, len(results) - self.keep)])
        stub = estimate_tokens(len(self.placeholder))
        return [Shown(i, stub, ("c", i), cleared=True) if i in clear else _intact(s, i) for i in range(n)]


def find_cut_point(roles: Sequence[str], tokens: Sequence[int], start: int, end: int, keep_recent: int) -> int:
    """Pi's ``findCutPoint``: walking back from the newest message, the first valid cut point (any
    message but a tool result) at or after the message where the tokens reach ``keep_recent``;
    the first valid cut point if they never do (or if none lies after it); ``start`` if none."""
    cut_points = [i for i in range(start, end) if roles[i] != "tool"]
    if not cut_points:
        return start
    cut = cut_points[0]
    acc = 0
    for i in range(end - 1, start - 1, -1):
        acc += tokens[i]
        if acc >= keep_recent:
            cut = next((c for c in cut_points if c >= i), cut)
            break
    return cut


@dataclass
class PiCompaction:
    """Pi's auto-compaction (``packages/coding-agent/src/core/compaction/compaction.ts``).

    Pi checks the threshold when an agent run ends and before a prompt is sent
    (``contextTokens > contextWindow - reserveTokens``); here, before every call whose input has a
    new user message, on the context up to that message. A call whose input would exceed the whole
    window overflows; Pi then compacts and retries, so the retried call is the one counted. A
    compaction keeps the messages from the cut point (``findCutPoint`` over the messages since the
    previous compaction, ``keepRecentTokens``) and puts one summary message first, Pi's compaction
    summary text around a placeholder of ``summary_chars`` characters (no model runs here). The
    system messages before the cut stay first: no harness compacts its system prompt away (Pi
    1.5 keeps it as messages and sends it before the summary, its compaction's ``systemMessage``;
    a session of another harness opens with it)."""

    context_window: int
    reserve_tokens: int = 16_384
    keep_recent_tokens: int = 20_000
    summary_chars: int = 4_000
    name: str = "Pi compaction"
    compactions: list[tuple[int, int, str]] = field(default_factory=list, init=False)
    """(messages before the compaction, first kept message, "threshold" or "overflow")."""
    _seen: int = field(default=0, init=False, repr=False)

    @property
    def summary_tokens(self) -> int:
        return estimate_tokens(len(COMPACTION_SUMMARY_PREFIX) + self.summary_chars + len(COMPACTION_SUMMARY_SUFFIX))

    def view_tokens(self, s: Prepared, n: int) -> int:
        if not self.compactions:
            return s.prefix[n]
        first_kept = self.compactions[-1][1]
        prompt = sum(s.tokens[i] for i in _system(s, first_kept))
        return prompt + self.summary_tokens + s.prefix[n] - s.prefix[first_kept]

    def _compact(self, s: Prepared, end: int, reason: str) -> None:
        start = self.compactions[-1][0] if self.compactions else 0
        if end <= start:
            return  # nothing new since the last compaction (Pi's prepareCompaction returns undefined)
        roles = [m["role"] for m in s.messages]
        first_kept = find_cut_point(roles, s.tokens, start, end, self.keep_recent_tokens)
        self.compactions.append((end, first_kept, reason))

    def context(self, s: Prepared, n: int) -> list[Shown]:
        prompt = next((i for i in range(self._seen, n) if s.messages[i]["role"] == "user"), None)
        if prompt is not None and self.view_tokens(s, prompt) > self.context_window - self.reserve_tokens:
            self._compact(s, prompt, "threshold")
        if self.view_tokens(s, n) > self.context_window:
            self._compact(s, n, "overflow")
        self._seen = n
        if not self.compactions:
            return [_intact(s, i) for i in range(n)]
        first_kept = self.compactions[-1][1]
        summary = Shown(-1, self.summary_tokens, ("s", len(self.compactions)))
        system = [_intact(s, i) for i in _system(s, first_kept)]
        return [*system, summary, *(_intact(s, i) for i in range(first_kept, n))]


def _system(s: Prepared, upto: int) -> list[int]:
    """The system messages among the first ``upto``."""
    return [i for i in range(upto) if s.messages[i]["role"] == "system"]


# --- files: what the session knew, and what a context shows ------------------------------------------


@dataclass(frozen=True)
class FileEvent:
    """A read, write or edit of a file, from the session's tool calls and results."""

    path: str
    kind: str
    at: int
    """Index of the tool result that reports it: the event is in every input longer than ``at``."""
    src: int
    """The message whose text shows it: a read's result; a write's or an edit's call (its arguments)."""
    changes: int
    """The file's change count after it (a write, an edit, a read that disagreed with what was known)."""
    known: bool
    """Whether the file's content is known after it (an edit whose old text was never read: no)."""


@dataclass
class _FileNow:
    changes: int = 0
    known: bool = False
    base: int | None = None
    """The message showing the latest read or write."""
    edits: list[int] = field(default_factory=list)
    """The messages showing the edits since then."""


def _shell_ops(arguments: Any, known: Mapping[str, Any], root: str | None) -> list[FileOp]:
    """What a shell call did to files, as ``VirtualFiles`` follows it: a heredoc's file written
    whole, and a file ``known`` that the command changed in a way its text does not say
    (``sed -i``, a redirection, ``mv``...), its content unknown until it is read again."""
    changes = shell_changes(arguments)
    ops = [FileOp("write", path, text=text) for path, text in changes.written]
    return ops + [FileOp("edit", path) for path in changes.changed if file_key(path, root) in known]


class FileTimeline:
    """The file events of a session, and the state of each file at a call (calls come in order)."""

    def __init__(self, s: Prepared):
        self.events: list[FileEvent] = []
        calls: dict[str, tuple[str, Any, int]] = {}
        lines: dict[str, VirtualFile] = {}  # what the replay knows of each file, kept as it keeps it
        for i, m in enumerate(s.messages):
            for c in m.get("tool_calls") or ():
                calls[c["id"]] = (c["name"], c["arguments"], i)
            if m["role"] != "tool":
                continue
            name, args, at_call = calls.get(m.get("tool_call_id", ""), ("", {}, -1))
            role = s.roles.role(name, args)
            first = file_op(role, args, m.get("text") or "", is_error=bool(m.get("is_error")))
            ops = [first, *first.more] if first is not None else []  # a patch of several files: each
            if first is None and role == "bash" and s.roles.by_content.get(name) == "shell":
                ops = _shell_ops(args, lines, s.root)
            for op in ops:
                op = replace(op, path=file_key(op.path, s.root))
                f = lines.setdefault(op.path, VirtualFile(op.path, op.path))
                if op.kind == "read":
                    f.read(op)
                    src = i
                elif op.kind == "write":
                    assert op.text is not None
                    f.write(op.text)
                    src = at_call
                else:
                    f.edit(op)
                    src = at_call
                self.events.append(FileEvent(op.path, op.kind, i, src, f.changes, f.lines is not None))
        self.now: dict[str, _FileNow] = {}
        self.views: list[FileEvent] = []
        self._next = 0

    def advance(self, n: int) -> None:
        """Take in every event of ``messages[:n]``."""
        while self._next < len(self.events) and self.events[self._next].at < n:
            e = self.events[self._next]
            self._next += 1
            f = self.now.setdefault(e.path, _FileNow())
            f.changes, f.known = e.changes, e.known
            if e.kind == "edit":
                f.edits.append(e.src)
            else:
                f.base, f.edits = e.src, []
                self.views.append(e)

    def current_in_view(self, path: str, intact: set[int]) -> bool:
        """Whether ``intact`` (the messages sent, tool output not cleared) shows the file's current
        content: it is known, its latest read or write is shown, and so is every edit since."""
        f = self.now.get(path)
        if f is None or not f.known or f.base is None or f.base not in intact:
            return False
        return all(e in intact for e in f.edits)

    def stale_in_view(self, intact: set[int]) -> bool:
        """Whether ``intact`` shows some file as an older read or write than its latest state."""
        return any(v.src in intact and v.changes < self.now[v.path].changes for v in self.views)


# --- measures ----------------------------------------------------------------------------------------


def prefix_tokens(prev_keys: Sequence[Any], keys: Sequence[Any], sizes: Sequence[int]) -> int:
    """Tokens of the leading messages of a call identical (same key, same position) to the previous
    call's, up to the first that differs: ``replay_transcript``'s ``tokens_prefix``."""
    prefix = 0
    for key, old, size in zip(keys, prev_keys, sizes, strict=False):
        if key != old:
            break
        prefix += size
    return prefix


CACHE_READ = 0.1
CACHE_WRITE = 1.25


@dataclass
class Measured:
    """One strategy on one session."""

    strategy: str
    tokens: list[int] = field(default_factory=list)
    """Per call: tokens sent."""
    prefix: list[int] = field(default_factory=list)
    """Per call: tokens of the prefix shared with the previous call."""
    edits_total: int = 0
    edits_with_target: int = 0
    edits_text_shown: int | None = None
    """Of the edits with their target in context, those whose replaced text is in what the file
    shows (context_os's window of a long file; None: not measured for this strategy)."""
    stale_views: int = 0
    """Calls showing some file at an older state than the latest the session knew."""
    orphaned: int = 0
    """Pairing problems the strategy made (a call sent without its result, a result without its call)."""
    note: str = ""

    @property
    def total(self) -> int:
        return sum(self.tokens)

    @property
    def peak(self) -> int:
        return max(self.tokens, default=0)

    @property
    def prefix_stability(self) -> float:
        return sum(self.prefix) / self.total if self.total else 0.0

    @property
    def uncached(self) -> int:
        """Tokens sent that are not a prefix of the previous call's (what a prefix cache cannot serve)."""
        return self.total - sum(self.prefix)

    @property
    def cache_priced(self) -> float:
        """Input priced as with a provider's prefix cache, in base-input-token units: the prefix
        shared with the previous call read from cache (0.1×), the rest written to it (1.25×);
        Anthropic's prompt-caching multipliers (5-minute cache)."""
        return CACHE_READ * sum(self.prefix) + CACHE_WRITE * self.uncached

    @property
    def edit_share(self) -> float:
        return self.edits_with_target / self.edits_total if self.edits_total else 1.0


def unpaired(messages: Sequence[Mapping[str, Any]]) -> set[str]:
    """The pairing problems of a message list, as ``check_pairs`` finds them, by tool call id:
    ``call:ID`` for a call not answered right after its assistant message, ``result:ID`` for a
    result with no open call."""
    out: set[str] = set()
    open_calls: set[str] = set()
    for m in messages:
        if m["role"] == "tool":
            call_id = m.get("tool_call_id", "")
            if call_id not in open_calls:
                out.add("result:" + call_id)
            open_calls.discard(call_id)
            continue
        out.update("call:" + c for c in open_calls)
        open_calls = {c["id"] for c in m.get("tool_calls") or ()} if m["role"] == "assistant" else set()
    out.update("call:" + c for c in open_calls)
    return out


def _edit_paths(s: Prepared, n: int, outputs: Mapping[str, str]) -> list[str | None]:
    """For each edit call of the assistant message ``n``: its target path (None if unreadable),
    from the call or, for a windowed tool acting on the open file, from its output."""
    out: list[str | None] = []
    for c in s.messages[n].get("tool_calls") or ():
        if s.roles.role(c["name"], c["arguments"]) == "edit":
            op = edit_target(c["arguments"], outputs.get(c["id"], ""))
            out.append(file_key(op.path, s.root) if op is not None else None)
    return out


def measure(s: Prepared, strategy: Strategy) -> Measured:
    """Run ``strategy`` over every call of ``s`` and measure what it sent."""
    files = FileTimeline(s)
    outputs: dict[str, str] = {}  # tool call id → its output, as the replay keeps them
    for m in s.messages:
        if m["role"] == "tool" and isinstance(m.get("tool_call_id"), str):
            outputs.setdefault(m["tool_call_id"], m.get("text") or "")
    result = Measured(strategy.name)
    prev_keys: list[tuple[str, int]] = []
    for n, answer in zip(s.calls, s.answers, strict=True):
        shown = strategy.context(s, n)
        keys = [x.key for x in shown]
        sizes = [x.tokens for x in shown]
        result.tokens.append(sum(sizes))
        result.prefix.append(prefix_tokens(prev_keys, keys, sizes))
        prev_keys = keys
        sent = [s.messages[x.src] if x.src >= 0 else {"role": "user"} for x in shown]
        # the recording's own problems (a run the user aborted leaves calls without results) are in
        # every input; a strategy answers only for those it makes
        result.orphaned += len(unpaired(sent) - unpaired(s.messages[:n]))
        intact = {x.src for x in shown if x.src >= 0 and not x.cleared}
        files.advance(n)
        # the calls of an answer its harness sends no more never ran: no edit
        for path in _edit_paths(s, answer, outputs) if answer is not None else ():
            result.edits_total += 1
            result.edits_with_target += path is not None and files.current_in_view(path, intact)
        result.stale_views += files.stale_in_view(intact)
    return result
