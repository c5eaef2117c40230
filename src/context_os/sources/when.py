"""Periods of time a recall query names ("on 9 October, 2022", "in August 2023", "yesterday"),
as UTC epoch-millisecond ranges, so that recall can prefer what was said then.

A query names a period in one of these forms (English, case-insensitive):

* a day: ``9 October 2022``, ``9th Oct, 2022``, ``October 9, 2022``, ``Oct. 9th 2022``,
  ``2022-10-09`` (also with a time after it: ``2022-10-09T14:05:12Z``); a day without a year
  (``on October 9``) is the latest such day on or before the reference time (then May must be
  capitalised: "2 may be" names no day);
* a month: ``October 2022``, ``Oct 2022``, ``2022-10``;
* a year, after ``in``, ``during``, ``of`` or ``since`` (a bare number is too often something
  else): ``in 2022``;
* relative to the reference time (the search's ``as_of``, or now): ``today``, ``yesterday``,
  ``this``/``last`` ``week``/``month``/``year`` (weeks start on Monday), ``N days``/``weeks`` ``ago``.

Days are UTC days, like every time context_os shows. Nothing here reads the store or the clock:
the reference time is given, so the same query at the same ``as_of`` names the same periods.

This module must never import from the package but ``times``.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from ..times import MAX_MS, MIN_MS, iso

__all__ = ["LISTED", "Period", "listed", "named_periods"]

_MONTH_NAMES = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTHS = {name: n for n, full in enumerate(_MONTH_NAMES, 1) for name in (full, full[:3])} | {"sept": 9}
_MONTH = rf"({'|'.join(_MONTH_NAMES)}|{'|'.join(sorted({m[:3] for m in _MONTH_NAMES} | {'sept'}, reverse=True))})\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{4})"

_FORMS: list[tuple[str, re.Pattern[str]]] = [
    # a time may follow the day (ISO 8601, as context_os prints times: ``2022-10-09T14:05:12.345Z``)
    ("iso-day", re.compile(rf"\b{_YEAR}-(\d{{2}})-(\d{{2}})(?:\b|(?=[Tt]\d))")),
    ("iso-month", re.compile(rf"\b{_YEAR}-(\d{{2}})\b(?!-)")),
    ("day-month-year", re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I)),
    ("month-day-year", re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I)),
    ("month-year", re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.I)),
    ("day-month", re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}(?![\w.])", re.I)),
    ("month-day", re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?!:)", re.I)),
    ("year", re.compile(rf"\b(?:in|during|of|since)\s+{_YEAR}\b", re.I)),
    ("relative", re.compile(r"\b(today|yesterday|(?:this|last)\s+(?:week|month|year))\b", re.I)),
    ("ago", re.compile(r"\b(\d{1,3}|a|an|one|two|three|four|five|six|seven)\s+(days?|weeks?)\s+ago\b", re.I)),
]
_COUNTS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
_DAY_MS = 86_400_000


@dataclass(frozen=True)
class Period:
    """``[start, end)`` in UTC epoch ms, and the words of the query that named it."""

    start: int
    end: int
    text: str

    def holds(self, ms: int) -> bool:
        return self.start <= ms < self.end

    @property
    def days(self) -> str:
        """The UTC days it covers: ``2022-10-09``, or ``2023-08-01 to 2023-08-31``."""
        first, last = iso(self.start)[:10], iso(self.end - 1)[:10]
        return first if first == last else f"{first} to {last}"


def _ms(d: date) -> int:
    return int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp() * 1000)


def _days(first: date, last: date, text: str) -> Period:
    return Period(_ms(first), _ms(last) + _DAY_MS, text)


def _month(year: int, month: int, text: str) -> Period:
    # to its last day, not to the 1st of the next month: December 9999 has none
    return _days(date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1]), text)


def _latest(month: int, day: int, ref: date) -> date:
    """The latest ``month``/``day`` on or before ``ref`` (a date without a year)."""
    for year in range(ref.year, ref.year - 8, -1):  # 29 February waits up to 8 years (1896 → 1904)
        try:
            d = date(year, month, day)
        except ValueError:
            continue
        if d <= ref:
            return d
    raise ValueError(f"no {month}/{day} before {ref}")


def _period(form: str, m: re.Match[str], ref: date) -> Period | None:
    g, text = m.groups(), m.group(0)
    if form == "iso-day":
        return _days(d := date(int(g[0]), int(g[1]), int(g[2])), d, text)
    if form == "iso-month":
        return _month(int(g[0]), int(g[1]), text)
    if form == "day-month-year":
        return _days(d := date(int(g[2]), _MONTHS[g[1].lower()], int(g[0])), d, text)
    if form == "month-day-year":
        return _days(d := date(int(g[2]), _MONTHS[g[0].lower()], int(g[1])), d, text)
    if form == "month-year":
        return _month(int(g[1]), _MONTHS[g[0].lower()], text)
    if form in ("day-month", "month-day") and "may" in (g[0], g[1]):
        return None  # "2 may be" is no date: without a year, the month May must be written May
    if form == "day-month":
        return _days(d := _latest(_MONTHS[g[1].lower()], int(g[0]), ref), d, text)
    if form == "month-day":
        return _days(d := _latest(_MONTHS[g[0].lower()], int(g[1]), ref), d, text)
    if form == "year":
        return _days(date(int(g[0]), 1, 1), date(int(g[0]), 12, 31), text)
    if form == "ago":
        n = _COUNTS.get(g[0].lower()) or int(g[0])
        back = timedelta(days=n * (7 if g[1].lower().startswith("week") else 1))
        # "three days ago" is that day; "two weeks ago" is the week around that day
        if back.days % 7 == 0 and g[1].lower().startswith("week"):
            return _days(ref - back - timedelta(days=3), ref - back + timedelta(days=3), text)
        return _days(d := ref - back, d, text)
    words = " ".join(g[0].lower().split())
    if words == "today":
        return _days(ref, ref, text)
    if words == "yesterday":
        return _days(d := ref - timedelta(days=1), d, text)
    this, unit = words.split()
    if unit == "week":
        monday = ref - timedelta(days=ref.weekday()) - timedelta(days=7 if this == "last" else 0)
        return _days(monday, monday + timedelta(days=6), text)
    if unit == "month":
        if this == "this":
            return _month(ref.year, ref.month, text)
        return _month(ref.year - (ref.month == 1), (ref.month - 2) % 12 + 1, text)
    year = ref.year - (this == "last")
    return _days(date(year, 1, 1), date(year, 12, 31), text)


LISTED = 10
"""Periods a search lists one by one (``listed``): a pasted log dated over two years named 700,
each listed to the model (28 KB of its context) and printed by ``ctxos recall``."""


def listed(periods: list[Period], at_most: int = LISTED) -> tuple[list[Period], tuple[int, str] | None]:
    """The first ``at_most`` of ``periods``, and how many others there are with the days they
    fall within (``Period.days``), or None when there are none."""
    rest = periods[at_most:]
    if not rest:
        return periods, None
    return periods[:at_most], (len(rest), Period(min(p.start for p in rest), max(p.end for p in rest), "").days)


def named_periods(query: str, reference_ms: int) -> list[Period]:
    """The periods ``query`` names, in the order of its words, each once (by its first words);
    relative ones ("yesterday") count from ``reference_ms``. Words already read as part of a
    longer form are not read again ("9 October 2022" is one day, not also October 2022); an
    impossible date ("31 June 2023") is no period."""
    ref = datetime.fromtimestamp(min(max(reference_ms, MIN_MS), MAX_MS) / 1000, UTC).date()
    found: list[tuple[int, Period]] = []
    # which characters a form already read, one byte each: looking a match up among the spans
    # taken before cost each match all the others (a pasted log of 43,000 dated lines took 128 s)
    taken = bytearray(len(query))
    for form, pattern in _FORMS:
        for m in pattern.finditer(query):
            start, end = m.span()
            if taken.find(1, start, end) != -1:
                continue
            try:
                period = _period(form, m, ref)
            except (ValueError, OverflowError):
                period = None
            taken[start:end] = b"\x01" * (end - start)
            if period is not None:
                found.append((start, period))
    # each period once, named by its first words: a log's every line dated the same day is one
    seen: set[tuple[int, int]] = set()
    periods = []
    for _, p in sorted(found, key=lambda x: x[0]):
        if (p.start, p.end) not in seen:
            seen.add((p.start, p.end))
            periods.append(p)
    return periods
