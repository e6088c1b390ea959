"""Durations and clock times as the reference's configuration spells them.

Durations follow Go's `time.ParseDuration` (`90s`, `1h30m`, `1.5h`, `300ms`), because every
maintenance.yaml in use was written for it; plain numbers are taken as seconds (what YAML hands
over for `requeue: 60`). Clock times are `hh:mm` in UTC, weekdays are English names or their
three-letter abbreviations, and excluded dates are Go's `Jan 2` layout.
"""

from __future__ import annotations

import re
from datetime import time

from nodeops.api.duration import parse_duration as parse_go_duration

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def parse_duration(value: object) -> float:
    """Seconds in a Go duration string (or a bare number of seconds); ValueError if malformed
    or negative. The grammar is `nodeops.api.duration`'s, the one Go-duration parser."""
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"invalid duration {value!r}: must not be negative")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"invalid duration {value!r}")
    seconds = parse_go_duration(value.strip())
    if seconds < 0:
        raise ValueError(f'invalid duration "{value}": must not be negative')
    return seconds + 0.0  # never -0.0


def format_duration(seconds: float) -> str:
    """Go's spelling of a duration (`1h0m0s`, `8m0s`, `1.5s`), for messages and docs."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:g}ms"
    whole = int(seconds)
    frac = seconds - whole
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    secs = f"{s + frac:g}s"
    if h:
        return f"{h}h{m}m{secs}"
    if m:
        return f"{m}m{secs}"
    return secs


def parse_clock(value: object) -> time:
    """`hh:mm` (24 h) as a time of day; ValueError if malformed."""
    if not isinstance(value, str) or not re.fullmatch(r"\d{1,2}:\d{2}", value.strip()):
        raise ValueError(f'invalid time {value!r}: expected "hh:mm"')
    hh, mm = (int(p) for p in value.strip().split(":"))
    if hh > 23 or mm > 59:
        raise ValueError(f'invalid time "{value}": hours 0-23, minutes 0-59')
    return time(hh, mm)


def parse_weekday(value: object) -> int:
    """Monday = 0 ... Sunday = 6, from a name or its three-letter abbreviation."""
    if isinstance(value, str):
        text = value.strip().lower()
        for i, day in enumerate(WEEKDAYS):
            if text in (day, day[:3]):
                return i
    raise ValueError(f"invalid weekday {value!r}: expected one of {', '.join(WEEKDAYS)}")


def parse_month_day(value: object) -> tuple[int, int]:
    """`Dec 24` (Go's `Jan 2` layout) as (month, day)."""
    if isinstance(value, str):
        parts = value.split()
        if len(parts) == 2 and parts[0][:3].lower() in MONTHS and parts[1].isdigit():
            month = MONTHS.index(parts[0][:3].lower()) + 1
            day = int(parts[1])
            if (
                len(parts[0]) in (3, len(_full_month(month)))
                and 1 <= day <= _DAYS_IN_MONTH[month - 1]
            ):
                return month, day
    raise ValueError(f'invalid date {value!r}: expected a month and a day like "Dec 24"')


def _full_month(month: int) -> str:
    return (
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
    )[month - 1]
