"""The simulator's clock: simulated time runs `time_scale` times faster than wall time.

Everything in the simulated cluster (timestamps the server writes, kubelet grace periods, cloud
boot delays, PDB disrupted-pod expiry) reads this one clock, so a one-hour node roll can run in
seconds while every timestamp stays mutually consistent.

It reads the running event loop's time, so on a loop that skips idle waits (`nodeops.sim.warp`)
simulated time skips with it; on an ordinary loop that is the monotonic clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from nodeops.common.looptime import loop_time

__all__ = ["Clock", "parse_time"]


class Clock:
    def __init__(
        self,
        time_scale: float = 1.0,
        start: datetime | None = None,
        monotonic: Callable[[], float] = loop_time,
    ) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        self.time_scale = time_scale
        self._start_sim = start or datetime.now(UTC)
        self._monotonic = monotonic
        self._start_mono = monotonic()

    @property
    def origin(self) -> datetime:
        """When the simulated and the wall clock agreed: simulated time runs from here."""
        return self._start_sim

    def now(self) -> datetime:
        elapsed = (self._monotonic() - self._start_mono) * self.time_scale
        return self._start_sim + timedelta(seconds=elapsed)

    def timestamp(self) -> str:
        """RFC 3339 with second precision, the format of `metadata.creationTimestamp`."""
        return self.now().strftime("%Y-%m-%dT%H:%M:%SZ")

    def micro_timestamp(self) -> str:
        """RFC 3339 with microseconds, the format of `MicroTime` fields (leases, events)."""
        return self.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def wall_seconds(self, sim_seconds: float) -> float:
        return sim_seconds / self.time_scale

    async def sleep(self, sim_seconds: float) -> None:
        await asyncio.sleep(max(0.0, sim_seconds) / self.time_scale)


def parse_time(value: str) -> datetime:
    """Parse `Time` and `MicroTime` strings as the API server writes them."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
