from __future__ import annotations

import asyncio
import math

import pytest

from nodeops.kube.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    TokenBucket,
    default_controller_rate_limiter,
)


class ManualTime:
    """A clock for the limiters: a float that tests move by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# --- per-item exponential backoff -----------------------------------------------------------


def test_exponential_doubles_from_5ms_and_caps_at_1000s() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter()
    delays = [limiter.when("a") for _ in range(25)]
    assert delays[:3] == [0.005, 0.01, 0.02]
    for n, delay in enumerate(delays):
        assert delay == min(0.005 * 2**n, 1000.0)
    assert delays[17] == 655.36  # the last uncapped step
    assert delays[18:] == [1000.0] * 7
    assert limiter.num_requeues("a") == 25


def test_exponential_is_per_item_and_forget_resets() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter()
    assert [limiter.when("a") for _ in range(3)] == [0.005, 0.01, 0.02]
    assert limiter.when("b") == 0.005
    assert limiter.num_requeues("a") == 3
    assert limiter.num_requeues("b") == 1
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == 0.005
    assert limiter.num_requeues("b") == 1
    limiter.forget("never-seen")


def test_exponential_never_overflows() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(
        base_delay=1.0, max_delay=math.inf
    )
    delays = [limiter.when("a") for _ in range(1100)]
    assert delays[1023] == 2.0**1023
    assert delays[-1] == math.inf


def test_exponential_custom_numbers() -> None:
    limiter: ItemExponentialFailureRateLimiter[int] = ItemExponentialFailureRateLimiter(0.1, 0.5)
    assert [limiter.when(1) for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    with pytest.raises(ValueError):
        ItemExponentialFailureRateLimiter(-1.0, 1.0)


def test_fast_slow() -> None:
    limiter: ItemFastSlowRateLimiter[str] = ItemFastSlowRateLimiter(0.01, 5.0, 3)
    assert [limiter.when("a") for _ in range(5)] == [0.01, 0.01, 0.01, 5.0, 5.0]
    assert limiter.num_requeues("a") == 5
    limiter.forget("a")
    assert limiter.when("a") == 0.01


# --- overall token bucket -------------------------------------------------------------------


def test_bucket_allows_burst_of_100_then_10_per_second() -> None:
    clock = ManualTime()
    limiter: BucketRateLimiter[str] = BucketRateLimiter(clock=clock)
    assert [limiter.when(f"item-{i}") for i in range(100)] == [0.0] * 100
    # Tokens are reserved ahead: each further caller queues 1/10 s behind the previous one.
    assert [limiter.when("x") for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    # One second refills ten tokens; three of them pay off the reservations above.
    clock.now = 1.0
    assert [limiter.when("y") for _ in range(7)] == [0.0] * 7
    assert limiter.when("y") == pytest.approx(0.1)


def test_bucket_refill_is_capped_at_burst() -> None:
    clock = ManualTime()
    limiter: BucketRateLimiter[str] = BucketRateLimiter(clock=clock)
    for _ in range(100):
        limiter.when("a")
    clock.now = 3600.0
    assert [limiter.when("a") for _ in range(100)] == [0.0] * 100
    assert limiter.when("a") == pytest.approx(0.1)


def test_bucket_does_not_track_items() -> None:
    limiter: BucketRateLimiter[str] = BucketRateLimiter(clock=ManualTime())
    limiter.when("a")
    assert limiter.num_requeues("a") == 0
    limiter.forget("a")


# --- max of both ----------------------------------------------------------------------------


def test_max_of_takes_the_longer_delay_and_asks_every_limiter() -> None:
    clock = ManualTime()
    exponential: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter()
    bucket: BucketRateLimiter[str] = BucketRateLimiter(clock=clock)
    limiter = MaxOfRateLimiter(exponential, bucket)

    # While the bucket has tokens, the per-item backoff decides.
    assert limiter.when("a") == 0.005
    assert limiter.when("a") == 0.01
    for i in range(98):
        assert limiter.when(f"other-{i}") == 0.005
    # The bucket is now empty (100 tokens used): it decides for a fresh item...
    assert limiter.when("b") == pytest.approx(0.1)
    # ...and the exponential still counted "a" even when the bucket's answer won.
    clock.now = 100.0
    assert limiter.when("a") == 0.02
    assert limiter.num_requeues("a") == 3
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == 0.005


def test_max_of_needs_a_limiter() -> None:
    with pytest.raises(ValueError):
        MaxOfRateLimiter[str]()


def test_default_controller_rate_limiter_numbers() -> None:
    clock = ManualTime()
    limiter: MaxOfRateLimiter[str] = default_controller_rate_limiter(clock=clock)
    exponential, bucket = limiter.limiters
    assert isinstance(exponential, ItemExponentialFailureRateLimiter)
    assert (exponential.base_delay, exponential.max_delay) == (0.005, 1000.0)
    assert isinstance(bucket, BucketRateLimiter)
    assert (bucket.bucket.qps, bucket.bucket.burst) == (10.0, 100)

    # One item failing on and on, slowly enough that the bucket never runs dry.
    for n in range(20):
        clock.now += 2000.0
        assert limiter.when("a") == min(0.005 * 2**n, 1000.0)
    # Many items failing at once: the first 100 get their own backoff, then 10 per second.
    clock.now += 2000.0
    delays = [limiter.when(str(i)) for i in range(110)]
    assert delays[:100] == [0.005] * 100
    assert delays[100:] == pytest.approx([0.1 * k for k in range(1, 11)])


# --- the async token bucket -----------------------------------------------------------------


class SleepRecorder:
    """Stands in for asyncio.sleep: records the delay and moves the manual clock by it."""

    def __init__(self, clock: ManualTime, advance: bool = True) -> None:
        self.clock = clock
        self.advance = advance
        self.slept: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.slept.append(delay)
        if self.advance:
            self.clock.now += delay
        await asyncio.sleep(0)


async def test_token_bucket_acquire_burst_then_rate() -> None:
    clock = ManualTime()
    sleep = SleepRecorder(clock)
    bucket = TokenBucket(10, 100, clock=clock, sleep=sleep)
    waited = [await bucket.acquire() for _ in range(103)]
    assert waited[:100] == [0.0] * 100
    assert waited[100:] == pytest.approx([0.1, 0.1, 0.1])
    assert sleep.slept == pytest.approx([0.1, 0.1, 0.1])
    assert clock.now == pytest.approx(0.3)


async def test_token_bucket_spaces_concurrent_callers() -> None:
    clock = ManualTime()
    sleep = SleepRecorder(clock, advance=False)
    bucket = TokenBucket(5, 2, clock=clock, sleep=sleep)
    waited = await asyncio.gather(*(bucket.acquire() for _ in range(5)))
    assert waited == pytest.approx([0.0, 0.0, 0.2, 0.4, 0.6])


async def test_token_bucket_cancelled_waiter_returns_its_token() -> None:
    clock = ManualTime()
    blocked = asyncio.Event()

    async def sleep_forever(delay: float) -> None:
        blocked.set()
        await asyncio.Event().wait()

    bucket = TokenBucket(1, 1, clock=clock, sleep=sleep_forever)
    assert await bucket.acquire() == 0.0
    waiter = asyncio.create_task(bucket.acquire())
    await blocked.wait()
    assert bucket.tokens() == -1.0
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    # The abandoned reservation is undone: the next caller waits 1 s, not 2 s.
    assert bucket.tokens() == 0.0
    assert bucket.reserve() == 1.0


async def test_token_bucket_cancel_keeps_tokens_later_callers_rely_on() -> None:
    clock = ManualTime()
    sleeping: list[float] = []
    both_sleeping = asyncio.Event()

    async def sleep_forever(delay: float) -> None:
        sleeping.append(delay)
        if len(sleeping) == 2:
            both_sleeping.set()
        await asyncio.Event().wait()

    bucket = TokenBucket(1, 1, clock=clock, sleep=sleep_forever)
    bucket.reserve()
    first = asyncio.create_task(bucket.acquire())  # acts at t=1
    second = asyncio.create_task(bucket.acquire())  # acts at t=2, counting on the first
    await both_sleeping.wait()
    assert sleeping == [1.0, 2.0]
    first.cancel()
    second.cancel()
    await asyncio.gather(first, second, return_exceptions=True)
    # Cancelled latest-first would restore both; earliest-first restores only what is unclaimed.
    assert bucket.tokens() == pytest.approx(-1.0)


def test_token_bucket_try_acquire() -> None:
    clock = ManualTime()
    bucket = TokenBucket(10, 2, clock=clock)
    assert [bucket.try_acquire() for _ in range(3)] == [True, True, False]
    clock.now = 0.05
    assert not bucket.try_acquire()
    clock.now = 0.1
    assert bucket.try_acquire()
    assert not bucket.try_acquire()


async def test_token_bucket_without_limit() -> None:
    bucket = TokenBucket(math.inf, 0)
    assert [await bucket.acquire() for _ in range(1000)] == [0.0] * 1000
    assert bucket.try_acquire()


def test_token_bucket_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0, 10)
    with pytest.raises(ValueError):
        TokenBucket(10, 0)
