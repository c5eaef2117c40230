"""Retention policy: which tool results stay expanded, and the token budget.

A *turn* is one model call (one ``transform_context`` call, one frame). Defaults follow the
design: a tool result stays expanded while it is less than ``collapse_after_turns`` turns old
and among the ``keep_recent_results`` newest; pins override; an optional ``token_budget``
collapses the least recently used unpinned active objects first, ties broken by id.

Collapsing a result in the middle of the history changes the rendered input from that point on,
which breaks a provider's prompt cache there; ``collapse_batch_tokens`` makes results that are
due only by age collapse together. Files (and other objects shown in
the active pool) stay active while the agent uses them: ``file_idle_turns`` after the last tool
that touched them; an object whose harness reports the lines it looked at shows at most
``file_view_chars`` characters around them.

This module holds configuration and pure decisions only: no store, no rendering.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import ConfigError

__all__ = ["RetentionPolicy"]


@dataclass(frozen=True)
class RetentionPolicy:
    """How long tool output stays in context, and how big the context may get."""

    keep_recent_results: int = 5
    """At most this many of the newest tool results stay expanded by policy."""
    collapse_after_turns: int = 3
    """A tool result collapses once it is this many turns old (0: collapse at once)."""
    elide_arguments_over_chars: int = 400
    """Once a tool result collapses, string arguments of its call longer than this collapse too
    (an edit's old and new text, a write's content): the file holds them, the chat keeps them."""
    collapse_batch_tokens: int = 0
    """If set, results due by age wait and collapse together once collapsing them frees this many
    tokens (their output and the long arguments of their calls) or the budget is near: each
    collapse rewrites the history from its position, which the model then reads uncached. 0:
    each collapses when due. Results beyond ``keep_recent_results`` collapse at once."""
    file_idle_turns: int | None = 10
    """An active object shown in the active pool (a file) that no tool touched for this many turns
    is deactivated by policy (pinned ones stay); None keeps objects active until the budget."""
    file_view_chars: int | None = 16_000
    """An active object with a *focus* (the line ranges its harness's tools read or changed) shows
    at most this many characters of its text: the focused lines, then the lines around them."""
    token_budget: int | None = None
    """If set, collapse least-recently-used unpinned active objects until the context fits."""
    max_message_chars: int = 2_000_000
    """A single message field larger than this is refused (``ContentTooLarge``)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ConfigError(f"retention policy: {f.name} must be a non-negative integer, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RetentionPolicy:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"retention policy: unknown setting(s) {sorted(unknown)}")
        return cls(**data)

    def keeps_expanded(self, age_turns: int, rank_from_newest: int) -> bool:
        """Whether policy keeps a (not pinned, not agent-activated) tool result expanded."""
        return age_turns < self.collapse_after_turns and rank_from_newest < self.keep_recent_results
