"""The controller work queue: deduplicating, never handing one key to two workers at once.

Event handlers add keys far more often than reconciles can run, and a reconcile reads the latest
state from the cache anyway, so a key added several times before a worker takes it needs one
reconcile, not several. A key that changes while it is being reconciled must be reconciled again
afterwards, but not concurrently with itself, or two workers would race on the same object.
The queue therefore tracks three things, as client-go does: the FIFO of keys ready to hand out,
the *dirty* keys (needing a reconcile) and the *processing* keys (handed out, not yet `done`).
A key added while processing stays dirty and goes back on the FIFO when `done` is called.

On top of that sit delayed adds (`add_after`, for `RequeueAfter` and backoff) and rate-limited
adds (`add_rate_limited`, for errors). Delays are kept on one heap served by a single timer
handle that always targets the earliest deadline, so there is no task or timer per item and no
periodic polling.

The `workqueue_*` metrics have controller-runtime's names and client-go's meanings, but the hot
path only bumps plain counters; an updater publishes them every half second, the period at which
client-go refreshes its unfinished-work gauges anyway. Time comes from a `Clock`, so tests can
drive delays, backoffs and durations exactly with `FakeClock`.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar

from nodeops.common.looptime import loop_time
from nodeops.kube.metrics import (
    _QUEUE_BUCKETS,
    WORKQUEUE_ADDS,
    WORKQUEUE_DEPTH,
    WORKQUEUE_LONGEST_RUNNING,
    WORKQUEUE_QUEUE_DURATION,
    WORKQUEUE_RETRIES,
    WORKQUEUE_UNFINISHED_WORK,
    WORKQUEUE_WORK_DURATION,
)
from nodeops.kube.ratelimit import RateLimiter, default_controller_rate_limiter

__all__ = [
    "UNFINISHED_WORK_UPDATE_PERIOD",
    "Clock",
    "FakeClock",
    "LoopClock",
    "ShutDown",
    "Timer",
    "WorkQueue",
]

T = TypeVar("T", bound=Hashable)

#: How often metrics are published; client-go refreshes its unfinished-work gauges this often.
UNFINISHED_WORK_UPDATE_PERIOD = 0.5


class ShutDown(Exception):
    """The queue is shut down and has nothing left to hand out; the worker should exit."""


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Where the queue reads the time and schedules its timers."""

    def now(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer: ...


class LoopClock:
    """The running event loop's time and timers: one clock, whatever that loop's time is."""

    now = staticmethod(loop_time)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback)


class _FakeTimer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that moves only when told to, firing due timers synchronously in deadline order.

    Makes delays, backoffs and duration metrics exact in tests without sleeping.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._seq = 0
        self._timers: list[tuple[float, int, _FakeTimer]] = []

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = _FakeTimer(self._now + max(0.0, delay), callback)
        self._seq += 1
        heapq.heappush(self._timers, (timer.when, self._seq, timer))
        return timer

    def pending(self) -> int:
        """Timers scheduled and neither fired nor cancelled."""
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)

    def advance(self, seconds: float) -> None:
        """Move time forward, stopping at each due timer so it sees its own deadline as now."""
        target = self._now + seconds
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.callback()
        self._now = max(self._now, target)


class WorkQueue(Generic[T]):
    """A deduplicating, delaying, rate-limiting work queue of hashable keys.

    Workers loop on `item = await queue.get()` ... `queue.done(item)` (or `async for item in
    queue`, still calling `done`). Every item handed out must be given back with `done`, or its
    key is never handed out again.

    With a non-empty `name`, the queue reports the `workqueue_*` metrics with `name` and
    `controller` both set to it, published every `UNFINISHED_WORK_UPDATE_PERIOD` seconds (or on
    `flush_metrics`); an unnamed queue reports nothing, which keeps throwaway queues out of the
    metrics. `add`, `done` and `shutdown` are plain functions, so event handlers can
    call them without awaiting; `add_after` and `get` need the running event loop (unless the
    clock is a `FakeClock`).
    """

    def __init__(
        self,
        name: str = "",
        *,
        rate_limiter: RateLimiter[T] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self._clock: Clock = clock if clock is not None else LoopClock()
        self._now = self._clock.now
        self.rate_limiter: RateLimiter[T] = (
            rate_limiter
            if rate_limiter is not None
            else default_controller_rate_limiter(clock=self._now)
        )
        self._queue: deque[T] = deque()
        # Values are when the key became dirty / when processing started, for the metrics.
        self._dirty: dict[T, float] = {}
        self._processing: dict[T, float] = {}
        self._getters: deque[asyncio.Future[None]] = deque()
        self._shutting_down = False
        self._drain = False
        self._drained = asyncio.Event()
        # Delayed adds: heap of (ready_at, seq, item); `_waiting` holds each item's earliest
        # deadline, so an entry whose deadline no longer matches is stale and skipped.
        self._heap: list[tuple[float, int, T]] = []
        self._waiting: dict[T, float] = {}
        self._seq = 0
        self._timer: Timer | None = None
        self._timer_at = 0.0
        self._metered = bool(name)
        self._updater: Timer | None = None
        # Metrics are counted locally and published by the updater (see `flush_metrics`).
        self._n_retries = 0
        self._flushed_depth = 0
        if self._metered:
            self._m_depth = WORKQUEUE_DEPTH.labels(name, name, "")
            self._m_adds = WORKQUEUE_ADDS.labels(name, name)
            self._m_unfinished = WORKQUEUE_UNFINISHED_WORK.labels(name, name)
            self._m_longest = WORKQUEUE_LONGEST_RUNNING.labels(name, name)
            self._m_retries = WORKQUEUE_RETRIES.labels(name, name)
            self._queue_duration = _LocalHistogram(
                WORKQUEUE_QUEUE_DURATION.labels(name, name), _QUEUE_BUCKETS
            )
            self._work_duration = _LocalHistogram(
                WORKQUEUE_WORK_DURATION.labels(name, name), _QUEUE_BUCKETS
            )

    # --- core queue --------------------------------------------------------------------------

    def add(self, item: T) -> None:
        """Mark `item` as needing processing; a no-op if it already does or on shutdown."""
        if self._shutting_down or item in self._dirty:
            return
        if self._metered:
            self._dirty[item] = self._now()
            if self._updater is None:
                self._start_updater()
        else:
            self._dirty[item] = 0.0
        if item in self._processing:
            # `done` puts it back; pushing now would let a second worker take it.
            return
        self._queue.append(item)
        if self._getters:
            self._wake_one()

    async def get(self) -> T:
        """The next item, waiting for one; raises `ShutDown` once shut down and empty.

        Items still queued at shutdown are handed out, so workers can finish them if they keep
        going; they stop when `get` raises.
        """
        queue = self._queue
        while not queue:
            if self._shutting_down:
                raise ShutDown
            await self._wait()
        item = queue.popleft()
        added = self._dirty.pop(item)
        if self._metered:
            now = self._now()
            self._processing[item] = now
            waited = now - added
            histogram = self._queue_duration
            bucket = bisect_left(histogram.bounds, waited)
            histogram.counts[bucket] += 1
            histogram.sums[bucket] += waited
            if self._updater is None:
                self._start_updater()
        else:
            self._processing[item] = 0.0
        return item

    def done(self, item: T) -> None:
        """Finish processing `item`; if it was added meanwhile, it goes back on the queue.

        Calling it for an item that is not being processed does nothing: pushing the item
        again could put a key on the queue twice.
        """
        try:
            started = self._processing.pop(item)
        except KeyError:
            return
        if self._metered:
            worked = self._now() - started
            histogram = self._work_duration
            bucket = bisect_left(histogram.bounds, worked)
            histogram.counts[bucket] += 1
            histogram.sums[bucket] += worked
        if item in self._dirty:
            self._queue.append(item)
            if self._getters:
                self._wake_one()
        elif self._drain and not self._processing:
            self._drained.set()

    def __len__(self) -> int:
        """Items ready to be handed out (not those processing or waiting on a delay)."""
        return len(self._queue)

    def __aiter__(self) -> WorkQueue[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.get()
        except ShutDown:
            raise StopAsyncIteration from None

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    @property
    def processing(self) -> int:
        """Items handed out and not yet `done`."""
        return len(self._processing)

    @property
    def waiting(self) -> int:
        """Items waiting for a delay to pass before they are added."""
        return len(self._waiting)

    def shutdown(self) -> None:
        """Stop accepting items and make idle workers' `get` raise `ShutDown`.

        Delayed items not yet due are dropped. Also releases `shutdown_with_drain` waiters:
        shutting down without draining overrides a drain in progress.
        """
        self._drain = False
        self._shut()
        self._drained.set()

    async def shutdown_with_drain(self) -> None:
        """Shut down, then wait until every item handed out has been `done`."""
        self._drain = True
        self._shut()
        if self._processing:
            await self._drained.wait()

    def _shut(self) -> None:
        self._shutting_down = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heap.clear()
        self._waiting.clear()
        self.flush_metrics()
        getters = self._getters
        while getters:
            future = getters.popleft()
            if not future.done():
                future.set_result(None)

    async def _wait(self) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._getters.append(future)
        try:
            await future
        except BaseException:
            future.cancel()
            try:
                self._getters.remove(future)
            except ValueError:
                pass
            # Woken for an item, but cancelled before taking it: pass the wake-up on, or the
            # item would sit there with another worker waiting.
            if self._queue and not future.cancelled():
                self._wake_one()
            raise

    def _wake_one(self) -> None:
        getters = self._getters
        while getters:
            future = getters.popleft()
            if not future.done():
                future.set_result(None)
                return

    # --- delays and rate limiting ------------------------------------------------------------

    def add_after(self, item: T, delay: float) -> None:
        """Add `item` once `delay` seconds have passed (now, if `delay <= 0`).

        If the item is already waiting, the earlier of the two deadlines wins: a later request
        must not postpone a retry already promised sooner. Counts as a retry in the metrics.
        """
        if self._shutting_down:
            return
        if self._metered:
            self._n_retries += 1
        if delay <= 0:
            self.add(item)
            return
        ready_at = self._now() + delay
        current = self._waiting.get(item)
        if current is not None and current <= ready_at:
            return
        self._waiting[item] = ready_at
        self._seq += 1
        heapq.heappush(self._heap, (ready_at, self._seq, item))
        if self._timer is None or ready_at < self._timer_at:
            self._arm(ready_at)

    def add_rate_limited(self, item: T) -> None:
        """Add `item` after the rate limiter's delay; each call counts as one more failure."""
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Reset `item`'s backoff, after it was processed successfully."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self.rate_limiter.num_requeues(item)

    def _arm(self, ready_at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = ready_at
        self._timer = self._clock.call_later(ready_at - self._now(), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        heap = self._heap
        waiting = self._waiting
        now = self._now()
        while heap:
            ready_at, _, item = heap[0]
            if waiting.get(item) != ready_at:
                heapq.heappop(heap)  # superseded by an earlier deadline
            elif ready_at <= now:
                heapq.heappop(heap)
                del waiting[item]
                self.add(item)
            else:
                self._arm(ready_at)
                return

    # --- metrics -----------------------------------------------------------------------------

    def flush_metrics(self) -> None:
        """Publish what the metrics counted since the last flush, and refresh the gauges.

        The hot path only bumps plain local counters: a prometheus_client update takes a lock
        and costs about as much as a whole add/get/done cycle, and there are several per item.
        The updater flushes every `UNFINISHED_WORK_UPDATE_PERIOD` seconds and at shutdown, far
        more often than anything scrapes, so published figures are never meaningfully stale.
        """
        if not self._metered:
            return
        depth = len(self._dirty)
        gets = self._queue_duration.flush()
        # Every counted add made a key dirty, and only a get makes it clean again, so the adds
        # are the gets plus the growth of the dirty set; depth counts dirty keys, as client-go's
        # (incremented on add, decremented on get) does.
        adds = gets + depth - self._flushed_depth
        self._flushed_depth = depth
        if adds:
            self._m_adds.inc(adds)
        if self._n_retries:
            self._m_retries.inc(self._n_retries)
            self._n_retries = 0
        self._m_depth.set(depth)
        self._work_duration.flush()
        # A stuck reconcile never calls `done`, so it never reaches the work duration
        # histogram; these two gauges are what make it visible.
        now = self._now()
        total = 0.0
        longest = 0.0
        for started in self._processing.values():
            age = now - started
            total += age
            if age > longest:
                longest = age
        self._m_unfinished.set(total)
        self._m_longest.set(longest)

    def _start_updater(self) -> None:
        try:
            self._updater = self._clock.call_later(UNFINISHED_WORK_UPDATE_PERIOD, self._update)
        except RuntimeError:
            pass  # added to before the event loop runs; the next add or get starts it

    def _update(self) -> None:
        self._updater = None
        self.flush_metrics()
        if not (self._shutting_down and not self._processing):
            self._start_updater()


class _LocalHistogram:
    """Counts observations per bucket locally; `flush` adds them to a prometheus histogram.

    The queue bumps `counts` and `sums` itself (a method call would cost as much as the
    bookkeeping). prometheus_client has no public bulk update, so `flush` adds to the child's
    bucket and sum values directly; should those internals change shape, it replays each
    bucket's mean through `observe` instead, which keeps bucket counts and the sum exact.
    """

    __slots__ = ("_bucket_values", "_child", "_sum_value", "bounds", "counts", "sums")

    def __init__(self, child: Any, buckets: tuple[float, ...]) -> None:
        self._child = child
        bounds = getattr(child, "_upper_bounds", None)
        values = getattr(child, "_buckets", None)
        sum_value = getattr(child, "_sum", None)
        if (
            isinstance(bounds, list)
            and isinstance(values, list)
            and len(bounds) == len(values)
            and all(callable(getattr(value, "inc", None)) for value in values)
            and callable(getattr(sum_value, "inc", None))
        ):
            self.bounds: list[float] = list(bounds)
            self._bucket_values: list[Any] | None = values
            self._sum_value: Any = sum_value
        else:
            self.bounds = [*buckets, math.inf]
            self._bucket_values = None
            self._sum_value = None
        self.counts = [0] * len(self.bounds)
        self.sums = [0.0] * len(self.bounds)

    def flush(self) -> int:
        """Publish and reset; returns the number of observations published."""
        counts = self.counts
        sums = self.sums
        published = 0
        total = 0.0
        for i, count in enumerate(counts):
            if not count:
                continue
            published += count
            if self._bucket_values is not None:
                self._bucket_values[i].inc(count)
                total += sums[i]
            else:
                mean = min(sums[i] / count, self.bounds[i])
                for _ in range(count):
                    self._child.observe(mean)
            counts[i] = 0
            sums[i] = 0.0
        if published and self._sum_value is not None:
            self._sum_value.inc(total)
        return published
