"""Durations written the way Go's `time.ParseDuration` and `metav1.Duration` read them.

Cyclops manifests carry `cyclingTimeout: 10h2m1s` and `waitPeriod: 30s`; keeping Go's format is
what lets such a manifest work unchanged, and it is the format every Kubernetes user already
writes in flags and fields.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import AfterValidator, Field

__all__ = ["DURATION_PATTERN", "Duration", "format_duration", "parse_duration"]

_UNITS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART: Final = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")

DURATION_PATTERN: Final = r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"
"""What the API server accepts for a duration field; the parser below decides the value."""


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string (`1h30m`, `2.5s`, `300ms`, `0`); ValueError otherwise."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"invalid duration {text!r}")
    body = text
    sign = 1.0
    if body[0] in "+-":
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f"invalid duration {text!r}")
    total = 0.0
    pos = 0
    while pos < len(body):
        match = _PART.match(body, pos)
        if match is None or match.group(1) in ("", "."):
            raise ValueError(
                f'invalid duration "{text}": use a number and a unit (ns, us, ms, s, m, h), '
                'like "90s" or "1h30m"'
            )
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """Go's `Duration.String()` for whole seconds and up: `1h2m3s`, `45s`, `0s`."""
    whole = round(seconds)
    if whole == 0:
        return "0s" if seconds == 0 else f"{seconds * 1000:g}ms"
    sign = "-" if whole < 0 else ""
    whole = abs(whole)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    return f"{sign}{out}{secs}s"


def _check(value: str) -> str:
    parse_duration(value)
    return value


Duration = Annotated[
    str,
    Field(pattern=DURATION_PATTERN, json_schema_extra={"format": "duration"}),
    AfterValidator(_check),
]
"""A duration field: stored as written, parsed with `parse_duration` where it is used."""
