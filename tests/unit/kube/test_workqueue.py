from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import pytest
from prometheus_client.utils import floatToGoString

from nodeops.kube.metrics import REGISTRY, WORKQUEUE_QUEUE_DURATION
from nodeops.kube.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
)
from nodeops.kube.workqueue import (
    UNFINISHED_WORK_UPDATE_PERIOD,
    FakeClock,
    ShutDown,
    WorkQueue,
    _LocalHistogram,
)

_names = itertools.count()


def unique_name() -> str:
    """Metrics live in one process-wide registry, so each test's queue gets its own series."""
    return f"test-queue-{next(_names)}"


async def settle() -> None:
    """Let every ready task run until nothing is left to do right now."""
    for _ in range(20):
        await asyncio.sleep(0)


async def drain_now(queue: WorkQueue[Any]) -> list[Any]:
    """Take everything ready (which never waits), marking each done."""
    items = []
    while len(queue):
        item = await queue.get()
        items.append(item)
        queue.done(item)
    return items


# --- the basic queue ------------------------------------------------------------------------


async def test_fifo_order() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for item in "abcde":
        queue.add(item)
    assert len(queue) == 5
    assert [await queue.get() for _ in range(5)] == list("abcde")
    assert len(queue) == 0


async def test_adds_before_get_are_deduplicated() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for item in "abacab":
        queue.add(item)
    assert len(queue) == 3
    assert [await queue.get() for _ in range(3)] == ["a", "b", "c"]
    for item in "abc":
        queue.done(item)
    assert len(queue) == 0
    assert queue.processing == 0


async def test_item_being_processed_is_not_handed_out_again() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("a")
    assert len(queue) == 0  # held back until done
    second_worker = asyncio.create_task(queue.get())
    await settle()
    assert not second_worker.done()
    queue.done("a")
    assert await second_worker == "a"
    assert queue.processing == 1


async def test_adds_during_processing_coalesce_into_one_replay() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("b")
    assert await queue.get() == "a"
    for _ in range(3):
        queue.add("a")
    queue.done("a")
    # Replayed at the back, behind what was already waiting.
    assert [await queue.get() for _ in range(2)] == ["b", "a"]
    queue.done("a")
    queue.done("b")
    assert len(queue) == 0


async def test_done_without_get_does_nothing() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.done("a")  # not processing: must not push a second copy
    queue.done("zzz")
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    queue.done("a")
    assert len(queue) == 0


async def test_get_waits_for_an_add() -> None:
    queue: WorkQueue[int] = WorkQueue()
    getter = asyncio.create_task(queue.get())
    await settle()
    assert not getter.done()
    queue.add(7)
    assert await getter == 7


async def test_one_add_wakes_one_worker() -> None:
    queue: WorkQueue[int] = WorkQueue()
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await settle()
    queue.add(1)
    await settle()
    assert sum(getter.done() for getter in getters) == 1
    queue.add(2)
    queue.add(3)
    assert sorted(await asyncio.gather(*getters)) == [1, 2, 3]


async def test_cancelled_worker_passes_its_wakeup_on() -> None:
    queue: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await settle()
    queue.add("a")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it can take the item
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second == "a"
    assert queue.processing == 1


async def test_cancelled_waiting_worker_leaves_no_trace() -> None:
    queue: WorkQueue[str] = WorkQueue()
    getter = asyncio.create_task(queue.get())
    await settle()
    getter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await getter
    assert not queue._getters
    queue.add("a")
    assert await queue.get() == "a"


async def test_async_iteration_until_shutdown() -> None:
    queue: WorkQueue[int] = WorkQueue()
    seen = []

    async def worker() -> None:
        async for item in queue:
            seen.append(item)
            queue.done(item)

    task = asyncio.create_task(worker())
    for i in range(5):
        queue.add(i)
    await settle()
    queue.shutdown()
    await task
    assert seen == [0, 1, 2, 3, 4]


# --- shutdown -------------------------------------------------------------------------------


async def test_shutdown_wakes_idle_workers_with_shutdown() -> None:
    queue: WorkQueue[str] = WorkQueue()
    workers = [asyncio.create_task(queue.get()) for _ in range(3)]
    await settle()
    queue.shutdown()
    for worker in workers:
        with pytest.raises(ShutDown):
            await worker
    assert queue.shutting_down


async def test_shutdown_hands_out_what_is_queued_then_raises_and_ignores_adds() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("b")
    queue.shutdown()
    queue.add("c")
    assert len(queue) == 2
    assert await queue.get() == "a"
    assert await queue.get() == "b"
    with pytest.raises(ShutDown):
        await queue.get()


async def test_shutdown_with_drain_waits_for_items_in_flight() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("b")
    await queue.get()
    await queue.get()
    drain = asyncio.create_task(queue.shutdown_with_drain())
    await settle()
    assert not drain.done()
    assert queue.shutting_down
    queue.done("a")
    await settle()
    assert not drain.done()
    queue.done("b")
    await settle()
    assert drain.done()
    await drain


async def test_shutdown_with_drain_returns_at_once_when_idle() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("queued-but-not-processing")
    await asyncio.wait_for(queue.shutdown_with_drain(), timeout=5)
    assert queue.shutting_down


async def test_plain_shutdown_releases_a_drain_in_progress() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    await queue.get()
    drain = asyncio.create_task(queue.shutdown_with_drain())
    await settle()
    assert not drain.done()
    queue.shutdown()
    await settle()
    assert drain.done()
    assert queue.processing == 1


# --- the concurrency guarantee --------------------------------------------------------------


async def test_no_key_is_processed_concurrently_and_no_add_is_lost() -> None:
    rng = random.Random(20240611)
    queue: WorkQueue[int] = WorkQueue()
    keys, adds, workers = 200, 50_000, 16
    tick = itertools.count()  # orders adds and processing starts on one timeline
    last_add: dict[int, int] = {}
    last_start: dict[int, int] = {}
    processed: dict[int, int] = dict.fromkeys(range(keys), 0)
    added: dict[int, int] = dict.fromkeys(range(keys), 0)
    active: set[int] = set()
    overlaps: list[int] = []
    max_active = 0

    async def worker() -> None:
        nonlocal max_active
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            if key in active:
                overlaps.append(key)
            active.add(key)
            max_active = max(max_active, len(active))
            last_start[key] = next(tick)
            processed[key] += 1
            for _ in range(rng.randrange(4)):
                await asyncio.sleep(0)
            active.discard(key)
            queue.done(key)

    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    for _ in range(adds):
        key = rng.randrange(keys)
        last_add[key] = next(tick)
        added[key] += 1
        queue.add(key)
        if rng.random() < 0.3:
            await asyncio.sleep(0)
    # Workers keep taking what is queued after shutdown, and a worker finishing a key that was
    # added meanwhile takes the replay itself, so this returns only once everything ran.
    queue.shutdown()
    await asyncio.gather(*tasks)
    assert len(queue) == 0
    assert queue.processing == 0

    assert overlaps == []
    assert max_active > 1  # the workers really did run side by side
    for key, add_tick in last_add.items():
        assert last_start[key] > add_tick, f"the last add of {key} was never processed"
    assert all(processed[key] <= added[key] for key in range(keys))
    assert sum(processed.values()) < adds  # some adds coalesced


# --- delayed adds ---------------------------------------------------------------------------


async def test_add_after_releases_items_at_their_deadlines_in_order() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("late", 5.0)
    queue.add_after("early-1", 2.0)
    queue.add_after("early-2", 2.0)
    queue.add_after("now", 0.0)
    queue.add_after("negative", -1.0)
    assert await drain_now(queue) == ["now", "negative"]
    assert queue.waiting == 3
    clock.advance(1.999)
    assert len(queue) == 0
    clock.advance(0.001)
    assert await drain_now(queue) == ["early-1", "early-2"]
    clock.advance(2.9)
    assert len(queue) == 0
    clock.advance(0.1)
    assert await drain_now(queue) == ["late"]
    assert queue.waiting == 0
    assert clock.pending() == 0


async def test_add_after_earlier_deadline_wins() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 10.0)
    queue.add_after("a", 3.0)  # earlier: replaces
    queue.add_after("a", 7.0)  # later: ignored
    assert queue.waiting == 1
    clock.advance(3.0)
    assert await drain_now(queue) == ["a"]
    clock.advance(10.0)
    assert len(queue) == 0
    assert queue.waiting == 0


async def test_add_after_ready_item_already_queued_is_deduplicated() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 1.0)
    queue.add("a")
    clock.advance(1.0)
    assert await drain_now(queue) == ["a"]


async def test_add_after_wakes_a_waiting_worker() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    worker = asyncio.create_task(queue.get())
    queue.add_after("a", 1.0)
    await settle()
    assert not worker.done()
    clock.advance(1.0)
    assert await worker == "a"


async def test_add_after_with_the_event_loop_clock() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("b", 0.02)
    queue.add_after("a", 0.01)
    first = await asyncio.wait_for(queue.get(), timeout=5)
    second = await asyncio.wait_for(queue.get(), timeout=5)
    assert (first, second) == ("a", "b")


async def test_shutdown_drops_delayed_items() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 1.0)
    queue.shutdown()
    queue.add_after("b", 1.0)
    assert queue.waiting == 0
    clock.advance(5.0)
    assert len(queue) == 0
    assert clock.pending() == 0


# --- rate-limited adds ----------------------------------------------------------------------


async def test_add_rate_limited_backs_off_exponentially_until_forgotten() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(rate_limiter=ItemExponentialFailureRateLimiter(), clock=clock)
    for expected in (0.005, 0.01, 0.02, 0.04):
        queue.add_rate_limited("a")
        clock.advance(expected * 0.9)
        assert len(queue) == 0
        clock.advance(expected * 0.2)
        assert await drain_now(queue) == ["a"]
    assert queue.num_requeues("a") == 4
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    queue.add_rate_limited("a")
    clock.advance(0.006)
    assert await drain_now(queue) == ["a"]


async def test_default_rate_limiter_is_controller_runtimes() -> None:
    clock = FakeClock()
    queue: WorkQueue[int] = WorkQueue(clock=clock)
    limiter = queue.rate_limiter
    assert isinstance(limiter, MaxOfRateLimiter)
    exponential, bucket = limiter.limiters
    assert isinstance(exponential, ItemExponentialFailureRateLimiter)
    assert (exponential.base_delay, exponential.max_delay) == (0.005, 1000.0)
    assert isinstance(bucket, BucketRateLimiter)
    assert (bucket.bucket.qps, bucket.bucket.burst) == (10.0, 100)
    # The bucket runs on the queue's clock: 110 failures at once, 100 soon, then 10 per second.
    for i in range(110):
        queue.add_rate_limited(i)
    clock.advance(0.005)
    assert len(queue) == 100
    clock.advance(0.5)
    assert len(queue) == 105
    clock.advance(0.5)
    assert len(queue) == 110


# --- metrics --------------------------------------------------------------------------------


def sample(metric: str, name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, {"name": name, "controller": name, **labels})


def bucket(metric: str, name: str, le: float) -> float | None:
    return sample(f"{metric}_bucket", name, le=floatToGoString(le))


BOUNDS = list(WORKQUEUE_QUEUE_DURATION._upper_bounds)


async def test_metrics_follow_client_go() -> None:
    name = unique_name()
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(name, clock=clock)

    queue.add("a")
    queue.add("a")
    queue.add("b")
    queue.flush_metrics()
    assert sample("workqueue_adds_total", name) == 2
    assert sample("workqueue_depth", name, priority="") == 2

    clock.advance(2.0)
    assert await queue.get() == "a"
    clock.advance(UNFINISHED_WORK_UPDATE_PERIOD)  # the updater publishes on its own
    assert sample("workqueue_depth", name, priority="") == 1
    assert sample("workqueue_queue_duration_seconds_count", name) == 1
    assert sample("workqueue_queue_duration_seconds_sum", name) == 2.0
    assert bucket("workqueue_queue_duration_seconds", name, BOUNDS[8]) == 0  # le 1 s
    assert bucket("workqueue_queue_duration_seconds", name, BOUNDS[9]) == 1  # le 10 s
    assert sample("workqueue_unfinished_work_seconds", name) == 0.5
    assert sample("workqueue_longest_running_processor_seconds", name) == 0.5

    assert await queue.get() == "b"
    clock.advance(0.5)
    assert sample("workqueue_unfinished_work_seconds", name) == 1.5  # 1.0 for a + 0.5 for b
    assert sample("workqueue_longest_running_processor_seconds", name) == 1.0

    queue.add("a")  # while processing: counted and dirty, but not queued
    queue.done("a")
    clock.advance(0.5)
    assert sample("workqueue_adds_total", name) == 3
    assert sample("workqueue_depth", name, priority="") == 1
    assert sample("workqueue_work_duration_seconds_count", name) == 1
    assert sample("workqueue_work_duration_seconds_sum", name) == 1.0
    assert bucket("workqueue_work_duration_seconds", name, BOUNDS[7]) == 0  # le 0.1 s
    assert bucket("workqueue_work_duration_seconds", name, BOUNDS[8]) == 1  # le 1 s
    assert bucket("workqueue_work_duration_seconds", name, float("inf")) == 1
    assert sample("workqueue_unfinished_work_seconds", name) == 1.0  # b alone
    assert sample("workqueue_longest_running_processor_seconds", name) == 1.0

    assert await queue.get() == "a"
    queue.done("a")
    queue.done("b")
    clock.advance(0.5)
    assert sample("workqueue_queue_duration_seconds_count", name) == 3
    assert sample("workqueue_work_duration_seconds_count", name) == 3
    assert sample("workqueue_depth", name, priority="") == 0
    assert sample("workqueue_unfinished_work_seconds", name) == 0
    assert sample("workqueue_longest_running_processor_seconds", name) == 0


async def test_retries_count_every_add_after() -> None:
    name = unique_name()
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(name, clock=clock)
    queue.add_after("a", 1.0)
    queue.add_after("a", 2.0)  # ignored deadline, still a retry
    queue.add_after("b", 0)
    queue.add_rate_limited("c")
    queue.flush_metrics()
    assert sample("workqueue_retries_total", name) == 4
    assert sample("workqueue_adds_total", name) == 1
    clock.advance(1.0)
    assert sample("workqueue_adds_total", name) == 3
    queue.shutdown()
    queue.add_after("d", 1.0)
    queue.flush_metrics()
    assert sample("workqueue_retries_total", name) == 4


async def test_metrics_are_published_at_shutdown_and_the_updater_stops() -> None:
    name = unique_name()
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(name, clock=clock)
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("b")
    queue.done("a")
    queue.shutdown()
    assert sample("workqueue_adds_total", name) == 2
    assert sample("workqueue_work_duration_seconds_count", name) == 1
    clock.advance(UNFINISHED_WORK_UPDATE_PERIOD)
    assert clock.pending() == 0
    # What was queued is still handed out; the updater runs again while it is processed.
    assert await queue.get() == "b"
    assert clock.pending() == 1
    clock.advance(1.0)
    queue.done("b")
    clock.advance(UNFINISHED_WORK_UPDATE_PERIOD)
    assert sample("workqueue_work_duration_seconds_count", name) == 2
    assert clock.pending() == 0


def test_named_queue_can_be_filled_before_the_loop_runs() -> None:
    name = unique_name()
    queue: WorkQueue[str] = WorkQueue(name)
    queue.add("a")
    queue.flush_metrics()
    assert sample("workqueue_adds_total", name) == 1


async def test_unnamed_queue_reports_nothing() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    await queue.get()
    queue.done("a")
    queue.add_after("a", 0)
    queue.flush_metrics()
    assert sample("workqueue_adds_total", "") is None
    assert sample("workqueue_depth", "", priority="") is None


class RecordingChild:
    """A histogram child without prometheus_client's internals."""

    def __init__(self) -> None:
        self.observed: list[float] = []

    def observe(self, amount: float) -> None:
        self.observed.append(amount)


def test_local_histogram_falls_back_to_observe_with_exact_counts_and_sum() -> None:
    child = RecordingChild()
    histogram = _LocalHistogram(child, (0.1, 1.0, 10.0))
    for amount in (0.05, 0.5, 0.7, 5.0, 50.0):
        bucket_index = next(i for i, bound in enumerate(histogram.bounds) if amount <= bound)
        histogram.counts[bucket_index] += 1
        histogram.sums[bucket_index] += amount
    assert histogram.flush() == 5
    assert sorted(child.observed) == pytest.approx([0.05, 0.6, 0.6, 5.0, 50.0])
    assert sum(child.observed) == pytest.approx(56.25)
    assert histogram.flush() == 0
