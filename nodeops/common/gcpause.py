"""Keeping the cyclic garbage collector out of decoding and caching large JSON bodies."""

from __future__ import annotations

import gc


class _GCPause:
    """Pause the cyclic garbage collector while large JSON bodies are decoded and cached.

    Decoding a list of 150,000 pods allocates tens of millions of containers; every few hundred
    thousand of them the collector traverses everything already cached, so a sync spent more time
    collecting than decoding (quadratic in the cache's size). Decoded JSON has no reference
    cycles, so pausing finds nothing uncollected; reference counting frees what is dropped.
    Nested pauses (several caches decoding, one inside the other) share one. Use it around code
    that does not await, so no unrelated task runs with the collector off.
    """

    def __init__(self) -> None:
        self._depth = 0
        self._was_enabled = False

    def __enter__(self) -> None:
        if self._depth == 0:
            self._was_enabled = gc.isenabled()
            gc.disable()
        self._depth += 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._was_enabled:
            gc.enable()


#: The one process-wide pause: `with paused_gc: ...`.
paused_gc = _GCPause()
