"""Work queues and supervision for the loops.

Loops are written like Kubernetes controllers: handlers enqueue keys, workers reconcile one key at
a time from the cache. The queue collapses repeated events for a key into one reconcile, never
runs the same key on two workers at once, and retries failures with per-key backoff, so a burst
of 10,000 pod events costs one reconcile per owner and a failing key never stalls the others.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import aiohttp

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import ApiError, Conflict, NotFound
from nodeops.sim.cluster.informer import Informer

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """A deduplicating queue: a key is queued at most once and processed by one worker at a time.

    A key added while it is being processed is queued again once `done` is called, so no
    event that arrived mid-reconcile is lost.
    """

    def __init__(self, clock: Clock, *, base_delay: float = 0.005, max_delay: float = 10.0) -> None:
        self._clock = clock
        self._queue: deque[K] = deque()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._wakeup = asyncio.Event()
        self._base_delay = base_delay
        self._max_delay = max_delay
        self.closed = False

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: K) -> None:
        if self.closed:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.append(key)
        self._wakeup.set()

    def add_after(self, key: K, sim_seconds: float) -> None:
        """Enqueue after a delay on the simulated clock; an earlier pending timer wins."""
        if sim_seconds <= 0:
            self.add(key)
            return
        self._add_later(key, self._clock.wall_seconds(sim_seconds))

    def add_rate_limited(self, key: K) -> None:
        """Enqueue after this key's exponential backoff (wall time: it protects the server)."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        delay = min(self._max_delay, self._base_delay * 2 ** min(n, 20))
        self._add_later(key, delay * random.uniform(0.9, 1.1))

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    def _add_later(self, key: K, wall: float) -> None:
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + wall
        existing = self._timers.get(key)
        if existing is not None:
            if existing.when() <= due:
                return
            existing.cancel()
        self._timers[key] = loop.call_at(due, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def get(self) -> K:
        while not self._queue:
            if self.closed:
                raise asyncio.CancelledError
            self._wakeup.clear()
            await self._wakeup.wait()
        key = self._queue.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def close(self) -> None:
        self.closed = True
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        self._wakeup.set()


class Controller(Generic[K]):
    """Workers draining a `WorkQueue` into `reconcile`.

    `reconcile` may return a delay in simulated seconds to look at the key again later (a grace
    period ending, minReadySeconds passing). Exceptions are logged and the key retried with
    backoff: a loop never dies because one object is odd.
    """

    name = "controller"

    def __init__(self, clock: Clock, *, workers: int = 4) -> None:
        self.clock = clock
        self.queue: WorkQueue[K] = WorkQueue(clock)
        self.workers = workers
        self.log = logging.getLogger(f"nodeops.sim.cluster.{self.name}")
        self._caches: list[Informer] = []

    def needs(self, *informers: Informer) -> None:
        """Caches that must be full before the first reconcile, like client-go's
        WaitForCacheSync: a ReplicaSet judged against an empty pod cache would double itself."""
        self._caches.extend(informers)

    async def reconcile(self, key: K) -> float | None:
        raise NotImplementedError

    async def run(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self._caches))
        await asyncio.gather(*(self._worker() for _ in range(self.workers)))

    def _worth_logging(self, key: K) -> bool:
        """The first failures of a key, then one in twenty: a key failing for minutes must not
        flood the log, nor go silent."""
        n = self.queue.failures(key)
        return n < 3 or n % 20 == 0

    async def _worker(self) -> None:
        queue = self.queue
        while True:
            key = await queue.get()
            try:
                again = await self.reconcile(key)
            except Conflict as exc:
                self.log.debug("%s: %s, retrying", key, exc)
                queue.add_rate_limited(key)
            except NotFound as exc:
                self.log.debug("%s: %s", key, exc)
                queue.forget(key)
            except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
                # The server said no or could not be reached: expected, worth a line, no trace.
                if self._worth_logging(key):
                    self.log.warning("%s: %s; retrying", key, exc)
                queue.add_rate_limited(key)
            except Exception:
                if self._worth_logging(key):
                    self.log.exception("%s: reconcile failed, retrying", key)
                queue.add_rate_limited(key)
            else:
                queue.forget(key)
                if again is not None:
                    queue.add_after(key, again)
            finally:
                queue.done(key)


async def supervise(name: str, factory: Callable[[], Awaitable[None]]) -> None:
    """Run a long-lived coroutine forever, logging and restarting it with backoff if it fails."""
    logger = logging.getLogger(f"nodeops.sim.cluster.{name}")
    failures = 0
    while True:
        try:
            await factory()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            failures += 1
            delay = min(10.0, 0.05 * 2 ** min(failures, 8)) * random.uniform(0.8, 1.2)
            logger.exception("%s failed; restarting in %.2fs", name, delay)
            await asyncio.sleep(delay)
