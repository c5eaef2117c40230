"""Periods a recall query names (sources/when.py): every form, relative ones from the reference
time, overlapping forms read once, impossible dates dropped."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import pytest

from context_os.sources.when import named_periods


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


REF = ms("2024-03-13T15:00:00")  # a Wednesday


def spans(query: str, ref: int = REF) -> list[tuple[str, str]]:
    def day(t: int) -> str:
        return datetime.fromtimestamp(t / 1000, UTC).strftime("%Y-%m-%d")

    return [(day(p.start), day(p.end - 1)) for p in named_periods(query, ref)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did Nate do on 25 May, 2022?", [("2022-05-25", "2022-05-25")]),
        ("what happened on the 9th of Oct. 2022", [("2022-10-09", "2022-10-09")]),
        ("How many tournaments had he won by July 10, 2022?", [("2022-07-10", "2022-07-10")]),
        ("the deploy of 2023-11-02 failed", [("2023-11-02", "2023-11-02")]),
        # a time as context_os prints it: the day (it named no period, or "in 2023" the year)
        ("what did the agent see at 2023-11-02T14:05:12.345Z?", [("2023-11-02", "2023-11-02")]),
        ("what failed in 2023-11-02T14:05", [("2023-11-02", "2023-11-02")]),
        ("What did John volunteer for in August 2023?", [("2023-08-01", "2023-08-31")]),
        ("the 2023-02 release notes", [("2023-02-01", "2023-02-28")]),
        ("sales in December, 2023", [("2023-12-01", "2023-12-31")]),
        ("what did we ship in 2022?", [("2022-01-01", "2022-12-31")]),
        ("the meeting on October 9", [("2023-10-09", "2023-10-09")]),  # the latest 9 October before REF
        ("the meeting on 2 March", [("2024-03-02", "2024-03-02")]),
        ("what did we do on May 2", [("2023-05-02", "2023-05-02")]),
        ("the 2 may 2023 release", [("2023-05-02", "2023-05-02")]),
        ("what broke today", [("2024-03-13", "2024-03-13")]),
        ("what did I ask yesterday", [("2024-03-12", "2024-03-12")]),
        ("decisions made this week", [("2024-03-11", "2024-03-17")]),
        ("the bug from last week", [("2024-03-04", "2024-03-10")]),
        ("last month's outage", [("2024-02-01", "2024-02-29")]),
        ("goals for this year", [("2024-01-01", "2024-12-31")]),
        ("three days ago", [("2024-03-10", "2024-03-10")]),
        ("2 weeks ago", [("2024-02-25", "2024-03-02")]),
        (
            "between 1 May 2023 and June 2023",
            [("2023-05-01", "2023-05-01"), ("2023-06-01", "2023-06-30")],
        ),
    ],
)
def test_forms(query: str, expected: list[tuple[str, str]]) -> None:
    assert spans(query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "the 2022 tests pass",  # a bare number is not a year
        "run it 3 times in May",  # no day, no year
        "on 31 June 2023 nothing happened",  # no such day
        "port 2022-99 is closed",  # no month 99
        "what did we decide",
        "at 10:30 on Monday",
        "there are 2 may be 3 of them",  # without a year, only a capitalised May is the month
    ],
)
def test_no_period(query: str) -> None:
    assert named_periods(query, REF) == []


def test_last_month_in_january_is_december_of_the_year_before() -> None:
    assert spans("last month", ms("2024-01-20T00:00:00")) == [("2023-12-01", "2023-12-31")]


@pytest.mark.parametrize("query", ["the 9999-12 plan", "in December 9999", "this month"])
def test_the_last_month_of_the_last_year_is_a_period(query: str) -> None:
    """December 9999 named no period: its end, the 1st of the month after, is no date."""
    assert spans(query, ms("9999-12-31T12:00:00")) == [("9999-12-01", "9999-12-31")]


def test_the_same_query_at_the_same_time_names_the_same_periods() -> None:
    assert named_periods("yesterday and on 1 May 2023", REF) == named_periods("yesterday and on 1 May 2023", REF)
    p = named_periods("on 1 May 2023", REF)[0]
    assert p.text == "1 May 2023" and p.holds(ms("2023-05-01T23:59:59")) and not p.holds(ms("2023-05-02T00:00:00"))


def test_a_pasted_log_is_read_in_one_pass_and_each_period_named_once() -> None:
    """A user message is a recall query: a pasted log of dated lines named as many periods as
    lines, each looked up among every span read before it (a 480 KB log of 43,000 lines took
    128 s), and the recall tool listed the same day 43,000 times. Counted in Python calls, not
    in seconds: the work grows with the lines, not with their square."""
    lines = [f"2026-11-{1 + i % 3:02d} 12:00:01,042 INFO request {i} served\n" for i in range(3_000)]
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        calls += 1

    sys.setprofile(count)
    try:
        found = named_periods("what failed in this log?\n" + "".join(lines), REF)
    finally:
        sys.setprofile(None)
    assert [(p.text, p.days) for p in found] == [(f"2026-11-0{d}", f"2026-11-0{d}") for d in (1, 2, 3)]
    assert calls < 50 * len(lines), calls
