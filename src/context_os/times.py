"""Times as callers give them and as context_os shows them: UTC epoch milliseconds, parsed from
epoch milliseconds or ISO 8601 and printed as ISO 8601 with milliseconds.

Every time a user or a harness passes in (``ctxos objects inspect --as-of``, the JSON-RPC ``inspect``
method) goes through ``parse_time``, and every time shown goes through ``iso``, so the CLI and
the server accept the same forms and refuse the same ones, with the same ``InputError``.

**Range.** The years 0001 to 9999 UTC: epoch ms ``MIN_MS`` (0001-01-01T00:00:00.000Z) to
``MAX_MS`` (9999-12-31T23:59:59.999Z). Both stores hold every time in it (SQLite as a 64-bit
integer; XTDB as an ``#inst``, which this package writes as a four-digit-year ISO 8601 string),
and ISO 8601 without an expanded year writes exactly these. A time outside it is refused rather
than clamped: a clamped "as of" would silently answer a different question.

This module must never import anything from the package but ``errors``.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

from .errors import InputError

__all__ = ["MAX_MS", "MIN_MS", "display", "iso", "now_ms", "parse_time"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
MIN_MS = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // _MS
"""0001-01-01T00:00:00.000Z as epoch milliseconds (-62135596800000)."""
MAX_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) - _EPOCH) // _MS
"""9999-12-31T23:59:59.999Z as epoch milliseconds (253402300799999)."""

# ASCII digits only: str.isdigit() (and int()) also take '²', '٣', '３' and friends.
_EPOCH_MS = re.compile(r"-?[0-9]+")


def _shown(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 256:  # repr() refuses ints of > 4300 digits
        return f"(an integer of {value.bit_length()} bits)"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _in_range(ms: int, value: object, name: str) -> int:
    if not MIN_MS <= ms <= MAX_MS:
        raise InputError(f"{name} {_shown(value)} is outside the years 0001-9999 UTC (epoch ms {MIN_MS} to {MAX_MS})")
    return ms


def now_ms() -> int:
    """The current time as epoch milliseconds UTC."""
    return time.time_ns() // 1_000_000


def parse_time(value: str | int, name: str = "time") -> int:
    """Epoch milliseconds (an int, or a string of ASCII digits with an optional ``-``) or ISO 8601
    (``2026-11-22T10:00:00Z``; no offset means UTC; below a millisecond is cut) → epoch ms.

    Raises ``InputError`` naming ``name`` and the value for anything else, for non-ASCII digits,
    and for a time outside the years 0001-9999 UTC.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InputError(f"{name} must be epoch milliseconds or an ISO 8601 string, got {_shown(value)}")
    if isinstance(value, int):
        return _in_range(value, value, name)
    text = value.strip()
    if not text.isascii():
        raise InputError(
            f"{name} {_shown(value)} is neither ISO 8601 nor epoch milliseconds (it holds characters that are"
            " not ASCII; digits must be 0-9)"
        )
    if _EPOCH_MS.fullmatch(text):
        if len(text.lstrip("-")) > 19:  # int() of a long enough string is an error of its own
            raise InputError(
                f"{name} {_shown(value)} is outside the years 0001-9999 UTC (epoch ms {MIN_MS} to {MAX_MS})"
            )
        return _in_range(int(text), value, name)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"{name} {_shown(value)} is neither ISO 8601 (e.g. 2026-11-22T10:00:00Z) nor epoch milliseconds"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        ms = (dt - _EPOCH) // _MS  # integer arithmetic: a float timestamp loses milliseconds
    except OverflowError:  # pragma: no cover - aware datetimes subtract without overflow today
        raise InputError(f"{name} {_shown(value)} is outside the years 0001-9999 UTC") from None
    return _in_range(ms, value, name)


def iso(ms: int) -> str:
    """Epoch ms → ``2026-11-22T10:00:00.000Z`` (exact: integer arithmetic, four-digit year).

    Raises ``InputError`` for a time outside the years 0001-9999 UTC.
    """
    if isinstance(ms, bool) or not isinstance(ms, int):
        raise InputError(f"a time must be epoch milliseconds (int), got {_shown(ms)}")
    dt = _EPOCH + _in_range(ms, ms, "time") * _MS
    return (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
        f".{dt.microsecond // 1000:03d}Z"
    )


def display(ms: int) -> str:
    """``iso`` for showing a stored time: one outside the years 0001-9999 is shown as the number
    it is rather than refused."""
    try:
        return iso(ms)
    except InputError:
        return f"{ms} (epoch ms)"
