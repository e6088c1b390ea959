"""Go durations, clock times, weekdays and dates as the reference's config spells them."""

from __future__ import annotations

from datetime import time

import pytest

from nodeops.controllers.maintenance.durations import (
    format_duration,
    parse_clock,
    parse_duration,
    parse_month_day,
    parse_weekday,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("200ms", 0.2),
        ("60s", 60),
        ("8m", 480),
        ("24h", 86400),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("0", 0),
        (".5s", 0.5),
        ("1h1m1s1ms", 3661.001),
        (90, 90),
        ("300us", 0.0003),
    ],
)
def test_go_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5x", "h", "1h 30m", "-5s", "1d", True, None, [1]])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_duration() -> None:
    assert format_duration(480) == "8m0s"
    assert format_duration(5400) == "1h30m0s"
    assert format_duration(0.2) == "200ms"


def test_clock_weekday_date() -> None:
    assert parse_clock("09:05") == time(9, 5)
    for bad in ("24:00", "9", "09:60", 900):
        with pytest.raises(ValueError):
            parse_clock(bad)
    assert parse_weekday("Monday") == 0 and parse_weekday("sun") == 6
    with pytest.raises(ValueError):
        parse_weekday("funday")
    assert parse_month_day("Dec 24") == (12, 24)
    for bad in ("Feb 30", "24 Dec", "Dec", "Decem 1"):
        with pytest.raises(ValueError):
            parse_month_day(bad)
