"""Retention policy: which tool results stay expanded, which files stay active, and when a
change that costs the prompt cache is worth it.

A *turn* is one model call (one ``transform_context`` call, one frame). A tool result stays
expanded while it is less than ``collapse_after_turns`` turns old and among the
``keep_recent_results`` newest; pins override. Files (objects of the active pool) stay active
while the pool fits ``active_pool_tokens``, the least used leaving first: each use (a tool that
touches a file, or a new message naming its path) counts 1, less by ``pool_use_decay_percent``
for every turn since, so what was used often and lately stays (``use_score``); an edit or a
write of a file brings back the next ``next_on_reading_list`` files read after it (the session
keeps the reading list: ``Session._follow_reading_list``); ``file_idle_turns`` optionally
deactivates idle ones too. An optional ``token_budget`` collapses
the least recently used unpinned active objects. Ties go to the object the session saw first
(its ``seq``), never to the id: live file ids are random, and a tie broken by them would decide
differently each run.

Collapsing a result in the middle of the history, or dropping a block that others follow,
changes the rendered input from that point on, which a provider's prompt cache then serves no
more: ``retention_due`` says what the rules want, and ``plan_break`` says from where the context
is sent anew this turn (only what stands after that point changes now; the rest waits until a
break pays: ``cache_break_percent``, ``break_payback_calls``). A session below
``manage_from_tokens`` is not managed at all (it passes through as the harness sent it).

The conversation itself (messages, call arguments, stubs) only grows: past
``history_max_tokens`` its oldest part goes behind a *history horizon* (``horizon_due``), one
note in its place, the newest ``history_keep_percent`` of that limit kept.

This module holds configuration and the decisions only, as typed ``StateChange`` values the
session applies. No store, no rendering: token counts come from functions it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, Protocol

from ..errors import ConfigError

__all__ = [
    "SURE_BREAK",
    "Actor",
    "RetentionPolicy",
    "Shown",
    "StateChange",
    "fit_budget",
    "horizon_due",
    "plan_break",
    "retention_due",
    "use_score",
    "used",
]

Actor = Literal["agent", "policy", "system", "user"]
"""Who changed an object's state: the agent (its tools), the retention policy, context_os itself
(a newer version, a history rewrite), or a user (an eviction)."""


MAX_SETTING = 1_000_000_000
"""The largest value of any retention setting (tokens, characters, turns, counts): a setting
above it is no setting a model's context could reach, and a number a store may not hold."""


@dataclass(frozen=True)
class RetentionPolicy:
    """How long tool output stays in context, and how big the context may get."""

    keep_recent_results: int = 5
    """At most this many of the newest tool results stay expanded by policy."""
    collapse_after_turns: int = 3
    """A tool result collapses once it is this many turns old (0: collapse at once)."""
    elide_arguments_over_chars: int = 200
    """Once a tool result collapses, string arguments of its call longer than this collapse too
    (an edit's old and new text, a write's content): the file holds them, the chat keeps them."""
    collapse_batch_tokens: int = 0
    """If set, results due by age wait and collapse together once collapsing them frees this many
    tokens (their output and the long arguments of their calls) or the budget is near: each
    collapse rewrites the history from its position, which the model then reads uncached. 0:
    each collapses when due. Results beyond ``keep_recent_results`` collapse at once."""
    file_idle_turns: int | None = None
    """An active object shown in the active pool (a file) that no tool touched for this many turns
    is deactivated by policy (pinned ones stay); None keeps objects active until the budget."""
    file_view_chars: int | None = 12_000
    """An active object with a *focus* (the line ranges its harness's tools read or changed) shows
    at most this many characters of its text: the focused lines, then the lines around them."""
    result_view_chars: int | None = 64_000
    """A tool result longer than this (in characters) shows, while expanded in a managed session,
    its first and last lines within this many characters and one note between them: what is left
    out and how to see it (the ``lines`` tool). The whole output stays stored; collapsed, it is a
    stub as any other. Above what harnesses cut their own outputs to (Claude Code 30,000
    characters, Pi 50 kB): only output no harness cut is clipped. None: shown whole."""
    cache_break_percent: int | None = 8
    """Changes that send the context anew from their place (collapsing a result, dropping or
    renewing a block) are taken while the tokens sent uncached stay within this share of all the
    tokens sent: the rest of the time the context only grows at its end (a prompt cache keeps
    hitting). Over it, only what must change does (a block whose patches outgrow it), and a change
    that frees per call ten times what it re-sends (a huge result collapsing, with little after
    it: ``SURE_BREAK``). None: no prompt cache to keep (a local model, say): every change is
    taken when it is due."""
    break_payback_calls: int = 4
    """A change that sends the context anew is worth it when the tokens it frees per call add up,
    within this many calls, to the tokens it re-sends. At a prefix cache's prices the tokens
    freed were cache reads (0.1x) and the ones re-sent are cache writes (1.25x): in money, a
    break that frees a quarter of what it re-sends pays back in about 46 calls."""
    manage_from_tokens: int = 50_000
    """A session passes through unchanged (tool results as they came, nothing collapsed, no object
    blocks) until the full transcript reaches this many tokens, or a file it showed changes (the
    harness's history then shows a stale copy), then it is managed for good: a small session keeps
    its whole prompt cache. 0: managed from the first call."""
    active_pool_tokens: int | None = 8_000
    """If set, objects shown in the active pool (files) stay active while the pool fits in this many
    tokens; above it the least used unpinned ones are deactivated first (``use_score``)."""
    pool_use_decay_percent: int = 80
    """What a use of an object of the active pool still counts after each further turn, in
    percent: 80, a use three turns ago counts 0.51, and a file edited three times in the last
    five turns outranks one read once the turn before. 0: the least recently used leaves first."""
    next_on_reading_list: int = 1
    """When the agent edits or writes a file it read, the next this many files it read after that
    one (in the order it first read them) and has not changed since come back to the active pool:
    agents read several files, then change them one by one, mostly in the order they read them.
    0: none."""
    token_budget: int | None = None
    """If set, collapse least-recently-used unpinned active objects until the context fits."""
    history_max_tokens: int | None = 24_000
    """The history horizon: once the conversation shown (messages, call arguments, collapsed
    results' stubs; not the results still expanded, not the system messages, not the active
    pool) passes this many tokens,
    its oldest part leaves the context for one note that says what it held, repeats what the
    user said in it and how to see it again (the ``history`` tool), keeping the newest
    ``history_keep_percent`` of this. None: the whole conversation stays (a session reopened
    with None shows all of it again)."""
    history_keep_percent: int = 50
    """How much of ``history_max_tokens`` the horizon keeps when it moves (1-100): it moves
    seldom, by the rest at once, since each move sends the context anew from its start."""
    keep_thinking_turns: int | None = 2
    """The reasoning a harness sends back with each assistant message (Pi's, Claude Code's and
    the Anthropic API's thinking blocks, pydantic-ai's thinking parts; what the adapter counts in
    ``extra_chars``) stays on only the newest this many
    assistant messages that have any; older ones show without it (the thinking horizon), as
    Anthropic's own ``clear_thinking`` context edit does. It leaves at a break, or on its own when
    what it frees pays for what it re-sends (``plan_break``). None: every message keeps it. 0: none
    does, which the Anthropic API refuses while a tool-use turn with extended thinking goes on (the
    newest assistant message must keep its thinking): 1 is the least for it."""
    max_message_chars: int = 2_000_000
    """A single message field larger than this is refused (``ContentTooLarge``)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            can_be_off = "None" in str(f.type)
            if value is None and can_be_off:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(
                    f"retention policy: {f.name} must be a non-negative integer"
                    f"{' (or None)' if can_be_off else ''}, got {value!r}"
                )
            if value > MAX_SETTING:
                raise ConfigError(
                    f"retention policy: {f.name} must be at most {MAX_SETTING:,}"
                    f"{' (or None)' if can_be_off else ''}, got {value:,}"
                )
        for name in ("pool_use_decay_percent", "cache_break_percent"):
            value = getattr(self, name)
            if value is not None and value > 100:
                raise ConfigError(f"retention policy: {name} must be 0-100, got {value}")
        if self.result_view_chars is not None and self.result_view_chars < 1_000:
            raise ConfigError(
                f"retention policy: result_view_chars must be at least 1000 (or None), got {self.result_view_chars}"
            )
        if not 1 <= self.history_keep_percent <= 100:
            raise ConfigError(f"retention policy: history_keep_percent must be 1-100, got {self.history_keep_percent}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RetentionPolicy:
        """The policy of these settings (any left out: its default); ``ConfigError`` naming the
        first that is unknown, not an integer, or out of its bounds."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"retention policy: unknown setting(s) {sorted(unknown)}")
        return cls(**data)

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> RetentionPolicy:
        """The policy a session document recorded, as it was recorded: one stored before a bound
        was checked still loads (its frames re-render with it)."""
        try:
            return cls.from_dict(data)
        except ConfigError:
            if set(data) - {f.name for f in fields(cls)}:
                raise
            policy = cls()
            for name, value in data.items():
                object.__setattr__(policy, name, value)
            return policy

    def keeps_expanded(self, age_turns: int, rank_from_newest: int) -> bool:
        """Whether policy keeps a (not pinned, not agent-activated) tool result expanded."""
        return age_turns < self.collapse_after_turns and rank_from_newest < self.keep_recent_results


@dataclass(frozen=True)
class StateChange:
    """One decided change of an object's state in a session: what, to what, who and why."""

    id: str
    was: str
    """The state before: ``active``, ``inactive``, ``absent`` (or ``shown`` for a chat page)."""
    to: str
    actor: Actor
    reason: str
    collapsed: bool | None = None
    """For a tool result: whether its history slot shows a stub (None: unchanged)."""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "from": self.was, "to": self.to, "actor": self.actor, "reason": self.reason}


class Shown(Protocol):
    """What the policy reads of an object a session shows (``view.ObjInfo``)."""

    id: str
    kind: str
    state: str
    pinned: bool
    seq: int
    since: int
    uses: float
    entry: int | None
    meta: Mapping[str, Any]

    @property
    def in_history(self) -> bool: ...

    @property
    def in_tail(self) -> bool: ...


def retention_due(
    live: Callable[[], list[Any]],
    turn: int,
    policy: RetentionPolicy,
    *,
    gain: Callable[[Any], int],
    shown: Callable[[Any], int],
    tokens: Callable[[], int],
    asked: Collection[str] = (),
) -> list[StateChange]:
    """What the policy wants changed at the start of turn ``turn`` (none of it applied):
    ``live()``: the active objects (``Shown``); ``gain(o)``: the tokens collapsing a tool result
    frees; ``shown(o)``: the tokens an object of the active pool takes there; ``tokens()``: the
    size of the context as it would render now; ``asked``: the ids of objects the agent or the
    user made active since the policy last ran, which the active pool keeps for this turn (the
    model sees what it asked for at least once, even an object larger than the pool alone).

    Tool results beyond the ``keep_recent_results`` newest collapse; results due by age collapse
    (together, once they free ``collapse_batch_tokens`` or the budget is near); objects of the
    active pool idle for more than ``file_idle_turns`` are deactivated, and so are the least used
    ones (``use_score``) while the pool is over ``active_pool_tokens``. Which of these happen now
    is ``plan_break``'s to say: each sends the context again from where it stands.
    """
    changes: list[StateChange] = []

    def decide(o: Shown, reason: str, collapsed: bool | None) -> None:
        changes.append(StateChange(o.id, o.state, "inactive", "policy", reason, collapsed))

    fresh = sorted((o for o in live() if o.in_history and not o.pinned), key=lambda o: o.entry or 0, reverse=True)
    by_rank: list[Shown] = []
    by_age: list[tuple[Shown, int]] = []
    for rank, o in enumerate(fresh):
        age = turn - int(o.meta.get("turn", turn))
        if rank >= policy.keep_recent_results:
            by_rank.append(o)
        elif not policy.keeps_expanded(age, rank):
            by_age.append((o, age))
    for o in by_rank:
        decide(o, f"older than the {policy.keep_recent_results} newest results", True)
    # due by age only: collapsing rewrites the history from the first of them on (the model
    # reads all of it again, uncached), so with a batch size they wait to go together
    batch = sum(gain(o) for o, _ in by_age) if policy.collapse_batch_tokens else 0
    budget = policy.token_budget
    near_budget = budget is not None and tokens() > budget * 9 // 10
    if by_age and (batch >= policy.collapse_batch_tokens or near_budget):
        for o, age in by_age:
            decide(o, f"{age} turns old", True)
    if policy.file_idle_turns is not None:
        for o in live():
            idle = turn - o.since
            if o.in_tail and not o.pinned and idle > policy.file_idle_turns:
                decide(o, f"not used for {idle - 1} turns", None)
    pool = policy.active_pool_tokens
    if pool is not None:
        in_pool = [o for o in live() if o.in_tail]
        size = sum(shown(o) for o in in_pool)
        scored = [(use_score(o, turn, policy), o) for o in in_pool if not o.pinned and o.id not in asked]
        for score, o in sorted(scored, key=lambda so: (so[0], so[1].since, so[1].seq, so[1].id)):
            if size <= pool:
                break
            size -= shown(o)
            decide(o, f"the active pool is over {pool} tokens (least used: {score:.2f})", None)
    return changes


def use_score(o: Shown, turn: int, policy: RetentionPolicy) -> float:
    """How much an object of the active pool is used, as of turn ``turn``: its uses, each counting 1
    at its turn and ``pool_use_decay_percent`` less for every turn since (``o.uses`` holds them as
    of ``o.since``, the turn of the latest). With 0 only the latest use counts, and only in its
    own turn: the pool is then least recently used first (ties by the turn of the latest use,
    then the order the session first saw them: deterministic, whatever the ids)."""
    age = turn - o.since
    return o.uses if age <= 0 else o.uses * (policy.pool_use_decay_percent / 100) ** age


def used(o: Any, turn: int, policy: RetentionPolicy) -> None:
    """``o`` (a ``Shown`` whose ``since`` and ``uses`` can be set: the session's ``ObjInfo``) is
    used at turn ``turn``: its uses as of then, one more (``use_score``); a second use in one turn
    counts once."""
    if o.since != turn or not o.uses:
        o.uses = round(use_score(o, turn, policy) + 1.0, 4)
        o.since = turn


def fit_budget(
    live: Callable[[], list[Any]],
    budget: int,
    *,
    tokens: Callable[[], int],
    apply: Callable[[StateChange], None],
) -> list[StateChange]:
    """Collapse or deactivate the least recently used unpinned objects (ties by the order the
    session first saw them: deterministic, whatever the ids) until the context fits ``budget``
    tokens; each change is applied as soon as it is decided, since the next depends on it."""
    changes: list[StateChange] = []
    total = tokens()
    for o in sorted((o for o in live() if not o.pinned), key=lambda o: (o.since, o.seq, o.id)):
        if total <= budget:
            break
        change = StateChange(o.id, o.state, "inactive", "policy", f"token budget {budget}", o.kind == "toolcall")
        apply(change)
        changes.append(change)
        total = tokens()
    return changes


def horizon_due(conversation_tokens: int, policy: RetentionPolicy) -> int | None:
    """Whether the history horizon moves now: the tokens of conversation it keeps after it if so
    (``history_keep_percent`` of ``history_max_tokens``), None if the conversation shown
    (``conversation_tokens``: the history without the results still expanded) is within the
    limit, or there is none."""
    limit = policy.history_max_tokens
    if limit is None or conversation_tokens <= limit:
        return None
    return limit * policy.history_keep_percent // 100


SURE_BREAK = 10
"""A break that frees, per call, this many times the tokens it re-sends is taken whatever the
cache-break allowance (``plan_break``)."""


def plan_break(
    candidates: list[tuple[int, int]],
    forced_at: int,
    tokens_after: Callable[[int], int],
    allowance: int,
    payback_calls: int,
) -> int:
    """Where the context is sent anew this turn (a history position; everything from there on
    is re-sent, uncached): ``forced_at`` unless an earlier break pays.

    ``candidates``: (position, tokens per call it frees) of every change that would send the
    context anew from its position. A break at ``q`` makes every candidate at or after ``q`` free
    to take. What it re-sends beyond ``forced_at`` is what stands from ``q`` on, less what the
    changes it takes out free (a collapsed result is not re-sent, its stub is). It is taken when
    that fits the ``allowance`` (the cache-break tokens still allowed, see
    ``cache_break_percent``; one that re-sends nothing is always allowed) and what it frees per
    call pays it back within ``payback_calls`` calls, or, whatever the allowance, when it frees
    per call at least ``SURE_BREAK`` times what it re-sends: at a prefix cache's prices (reads
    0.1×, writes 1.25×) that pays back within two calls. Of those, the earliest (it frees the
    most).
    """
    base = tokens_after(forced_at)
    best = forced_at
    for q in sorted({q for q, _ in candidates if q < forced_at}, reverse=True):
        extra = tokens_after(q) - base - sum(g for p, g in candidates if q <= p < forced_at)
        freed = sum(g for p, g in candidates if p >= q)
        if (extra <= max(allowance, 0) and freed * payback_calls >= extra) or freed >= SURE_BREAK * extra:
            best = q
    return best
