"""Handing freed heap back to the operating system after a (re)list.

glibc keeps freed arenas mapped; after decoding a large list that would make the operator's
resident memory look like the peak forever, so the informer trims it where glibc offers it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable


def _release_free_memory() -> None:
    """Hand the decoded list pages' freed heap back to the OS after a (re)list.

    A list of 150,000 objects passes gigabytes of short-lived dicts through the allocator;
    without this the process keeps that peak as resident memory it will never use again.
    """
    if _malloc_trim is not None:
        _malloc_trim(0)


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    return trim if callable(trim) else None


_malloc_trim = _load_malloc_trim()
