"""Compact JSON bytes for objects that are kept a long time (caches, the simulator's store)."""

from __future__ import annotations

from typing import Any

import orjson


def dumps_exact(obj: Any) -> bytes:
    """`orjson.dumps(obj)` in an exactly-sized allocation.

    orjson grows its output buffer by doubling and returns it without giving the slack back to
    the allocator in a usable way: a 9.5 KB pod can sit in a 16 KB block. Kept by the hundred
    thousand, that costs about half again the JSON's size; one extra copy into a fresh
    allocation (about a microsecond) lets the next encode reuse the big buffer instead.
    """
    return bytes(memoryview(orjson.dumps(obj)))
