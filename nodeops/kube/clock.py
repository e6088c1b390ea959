"""A clock that may run faster than the wall clock, for everything one process measures.

In a cluster this is the wall clock. A simulated cluster runs its clock faster than wall time
(a 20-minute scale-up limit passes in a minute), and a controller must agree with it about how
long a node took to boot or a drain has run: `now()` is the cluster's time, and `wall()` turns a
wait in that time into the seconds of the event loop a timer needs. The drain, below the
controllers, measures its waits and deadlines with the same clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

__all__ = ["Clock"]


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Clock:
    now: Callable[[], datetime] = field(default=_utc_now)
    """The current time in the cluster's clock (timezone-aware)."""
    scale: float = 1.0
    """How many cluster seconds pass per wall second."""

    def wall(self, seconds: float) -> float:
        """Wall seconds for `seconds` of cluster time."""
        return max(0.0, seconds) / self.scale

    def since(self, then: datetime | None) -> float:
        """Cluster seconds since `then` (0 when unknown)."""
        if then is None:
            return 0.0
        return (self.now() - then).total_seconds()

    def after(self, seconds: float) -> datetime:
        return self.now() + timedelta(seconds=seconds)

    @classmethod
    def scaled(cls, scale: float, origin: datetime | None = None) -> Clock:
        """A clock running `scale` times as fast as the wall clock since `origin`.

        A simulated cluster's clock agreed with the wall clock when it started (its origin);
        given that origin, processes started at different times agree on the simulated time,
        so a restarted manager reads the timestamps its predecessor wrote correctly.
        """
        if scale == 1.0:
            return cls()
        start = origin or _utc_now()

        def now() -> datetime:
            return start + (_utc_now() - start) * scale

        return cls(now=now, scale=scale)
