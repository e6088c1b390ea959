"""The loop under both simulated clouds: run what falls due, retry what failed, sleep until next.

A simulated cloud keeps its machines in a state object with deadlines on the simulator's clock
(boots, terminations, Node deletions) and mirrors them into the cluster over HTTP. That mirroring
can fail like any API call (faults injected, a server restarting); a failed action is retried
`retry_seconds` later on the simulator's clock, and the machine stays where it was meanwhile, as a
real machine whose kubelet cannot reach the API server would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Container
from typing import Protocol, TypeVar

from nodeops.sim.clock import Clock

__all__ = ["Clockwork"]

log = logging.getLogger(__name__)

_MIN_WALL_SLEEP = 0.005  # keeps a very fast clock from turning retries into a busy loop


class _Settings(Protocol):
    @property
    def retry_seconds(self) -> float: ...


class _State(Protocol):
    @property
    def settings(self) -> _Settings: ...

    def subscribe(self, listener: Callable[[], None]) -> None: ...

    def next_due(self) -> float | None: ...


class _Machine(Protocol):
    @property
    def id(self) -> str: ...


M = TypeVar("M", bound=_Machine)


class Clockwork:
    """Subclasses say what one pass does (`step`) and run each action through `attempt`."""

    #: How the logs name this cloud.
    name = "simulated cloud"

    def __init__(self, state: _State, clock: Clock) -> None:
        self.clock = clock
        self._due = state.next_due
        self._settings = state.settings
        self._wake = asyncio.Event()
        self._retry_at: dict[tuple[str, str], float] = {}
        self._failures: dict[tuple[str, str], int] = {}
        state.subscribe(self._wake.set)

    async def run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: step failed", self.name)
            await self._sleep()

    async def step(self) -> None:
        raise NotImplementedError

    async def attempt(self, what: str, machine: M, action: Callable[[M], Awaitable[None]]) -> None:
        """`action(machine)`, unless it failed a moment ago and its retry is not due yet."""
        key = (what, machine.id)
        now = self.clock.now().timestamp()
        if self._retry_at.get(key, now) > now:
            return
        try:
            await action(machine)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._retry_at[key] = now + self._settings.retry_seconds
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            # A fault spec can fail every call; say so, without a line per retry.
            if failures <= 3 or failures % 50 == 0:
                log.warning(
                    "%s: %s of %s failed (%d times), will retry: %s",
                    self.name,
                    what,
                    machine.id,
                    failures,
                    exc,
                )
        else:
            self._retry_at.pop(key, None)
            self._failures.pop(key, None)

    def forget_all_but(self, alive: Container[str]) -> None:
        """Drop the pending retries of machines that are gone."""
        for key in [k for k in self._retry_at if k[1] not in alive]:
            self._retry_at.pop(key, None)
            self._failures.pop(key, None)

    async def _sleep(self) -> None:
        now = self.clock.now().timestamp()
        deadlines = [d for d in (self._due(), *self._retry_at.values()) if d is not None]
        timeout = None
        if deadlines:
            timeout = max(_MIN_WALL_SLEEP, self.clock.wall_seconds(min(deadlines) - now))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
