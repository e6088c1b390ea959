"""Timestamps as epoch seconds, cached.

Status timestamps have second precision, so the many pods a controller looks at share a handful
of distinct values; parsing each string once keeps status computations over thousands of pods
from being dominated by datetime parsing.
"""

from __future__ import annotations

from functools import lru_cache

from nodeops.sim.clock import parse_time


@lru_cache(maxsize=8192)
def epoch(value: str) -> float:
    """Epoch seconds of a `Time`/`MicroTime` string as the API server writes them."""
    return parse_time(value).timestamp()
