"""The clock that waits are measured on.

A wait is a timer of the running event loop, so a deadline for it must be on the loop's clock.
For an ordinary loop that is the monotonic clock; a loop that skips idle waits (a rehearsal's
simulated copy) moves its clock past them, and a deadline or an age kept on the monotonic clock
would then never arrive: a poll would spin, a snapshot of the cloud would stay fresh for ever.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["loop_time"]


def loop_time() -> float:
    """The running event loop's time, or the monotonic clock outside one."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()
