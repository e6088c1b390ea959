"""Rate limiters for requeues, and a token bucket for client-side request pacing.

A failing object must back off on its own, so one broken object does not slow the others; yet
the controller as a whole must also retry at a bounded rate, or a mass failure (an API server
outage, a bad rollout) turns every worker into a retry loop against the API server. The default
controller limiter therefore takes the larger of a per-item exponential backoff and a shared
token bucket, the same numbers controller-runtime uses: 5 ms doubling up to 1000 s, and
10 requests per second with a burst of 100.

The token bucket reserves tokens ahead of time (like golang.org/x/time/rate): a caller that finds
the bucket empty is told exactly when its token will exist, so concurrent callers are spaced out
evenly instead of all waking at once when the bucket refills.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, Protocol, TypeVar

from nodeops.common.looptime import loop_time

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "ItemFastSlowRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "TokenBucket",
    "default_controller_rate_limiter",
]

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)

DEFAULT_BASE_DELAY = 0.005
DEFAULT_MAX_DELAY = 1000.0
DEFAULT_QPS = 10.0
DEFAULT_BURST = 100


class RateLimiter(Protocol[T_contra]):
    """Decides how long an item waits before it is retried."""

    def when(self, item: T_contra) -> float:
        """Seconds to wait before the next retry of `item`; counts as one more failure."""
        ...

    def forget(self, item: T_contra) -> None:
        """Stop tracking `item`: its next failure starts the backoff from scratch."""
        ...

    def num_requeues(self, item: T_contra) -> int:
        """How many failures of `item` are being remembered."""
        ...


class ItemExponentialFailureRateLimiter(Generic[T]):
    """`base_delay * 2**failures`, capped at `max_delay`, tracked per item.

    The count goes up on every `when`, not on every success or failure the caller sees, because
    the caller asks exactly once per retry it schedules.
    """

    def __init__(
        self, base_delay: float = DEFAULT_BASE_DELAY, max_delay: float = DEFAULT_MAX_DELAY
    ) -> None:
        if base_delay < 0 or max_delay < 0:
            raise ValueError("delays must not be negative")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        try:
            # ldexp scales by a power of two exactly, so the figures are the documented ones.
            delay = math.ldexp(self.base_delay, failures)
        except OverflowError:
            return self.max_delay
        return min(delay, self.max_delay)

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        return self._failures.get(item, 0)


class ItemFastSlowRateLimiter(Generic[T]):
    """Retries quickly for the first `max_fast_attempts`, then slowly, per item.

    Suits failures expected to clear after a short while (a cache catching up) but not worth
    hammering if they do not.
    """

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        self.fast_delay = fast_delay
        self.slow_delay = slow_delay
        self.max_fast_attempts = max_fast_attempts
        self._attempts: dict[T, int] = {}

    def when(self, item: T) -> float:
        attempts = self._attempts.get(item, 0) + 1
        self._attempts[item] = attempts
        return self.fast_delay if attempts <= self.max_fast_attempts else self.slow_delay

    def forget(self, item: T) -> None:
        self._attempts.pop(item, None)

    def num_requeues(self, item: T) -> int:
        return self._attempts.get(item, 0)


class TokenBucket:
    """A token bucket of `qps` tokens per second holding at most `burst` tokens.

    It starts full. `reserve` always succeeds and returns how long the caller must wait for its
    token; the balance may go negative, which is what queues later callers behind earlier ones.
    `qps=math.inf` disables limiting.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = loop_time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not qps > 0:
            raise ValueError("qps must be positive (math.inf for no limit)")
        if burst < 1 and qps != math.inf:
            raise ValueError("burst must be at least 1")
        self.qps = float(qps)
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()
        # When the latest reservation may act; needed to undo a reservation correctly.
        self._last_event = self._last

    def _tokens_at(self, now: float) -> float:
        elapsed = max(0.0, now - self._last)
        return min(self._tokens + elapsed * self.qps, float(self.burst))

    def tokens(self) -> float:
        """Tokens available now; negative while callers are queued for future tokens."""
        if self.qps == math.inf:
            return float(self.burst)
        return self._tokens_at(self._clock())

    def reserve(self) -> float:
        """Take one token, now or in the future; returns the seconds until it is usable."""
        if self.qps == math.inf:
            return 0.0
        now = self._clock()
        tokens = self._tokens_at(now) - 1.0
        delay = -tokens / self.qps if tokens < 0 else 0.0
        self._last = now
        self._tokens = tokens
        self._last_event = now + delay
        return delay

    def try_acquire(self) -> bool:
        """Take a token only if one is available right now; never queues."""
        if self.qps == math.inf:
            return True
        now = self._clock()
        tokens = self._tokens_at(now)
        if tokens < 1.0:
            return False
        self._last = now
        self._tokens = tokens - 1.0
        self._last_event = now
        return True

    async def acquire(self) -> float:
        """Wait for a token; returns the seconds waited (0.0 when one was available).

        A caller cancelled while waiting gives its token back, as far as no later reservation
        already counts on it, so abandoned requests do not slow down the ones that remain.
        """
        delay = self.reserve()
        if delay <= 0:
            return 0.0
        time_to_act = self._last_event
        try:
            await self._sleep(delay)
        except asyncio.CancelledError:
            self._cancel(time_to_act)
            raise
        return delay

    def _cancel(self, time_to_act: float) -> None:
        now = self._clock()
        if time_to_act <= now:
            return
        # Tokens reserved after this one were computed against its debt; only the part of the
        # token nobody later depends on can be returned.
        restore = 1.0 - (self._last_event - time_to_act) * self.qps
        if restore <= 0:
            return
        self._tokens = min(self._tokens_at(now) + restore, float(self.burst))
        self._last = now
        if time_to_act == self._last_event:
            previous = time_to_act - 1.0 / self.qps
            if previous >= now:
                self._last_event = previous


class BucketRateLimiter(Generic[T]):
    """One token bucket shared by all items: bounds the overall retry rate, not any one item's."""

    def __init__(
        self,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        *,
        clock: Callable[[], float] = loop_time,
    ) -> None:
        self.bucket = TokenBucket(qps, burst, clock=clock)

    def when(self, item: T) -> float:
        return self.bucket.reserve()

    def forget(self, item: T) -> None:
        """Nothing to forget: the bucket does not track items."""

    def num_requeues(self, item: T) -> int:
        return 0


class MaxOfRateLimiter(Generic[T]):
    """Waits for the longest of several limiters; every limiter sees every call.

    Every limiter must be asked on each `when`, even when another one already answers with a
    longer delay, or the per-item counts and the bucket would drift from what really happened.
    """

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        if not limiters:
            raise ValueError("at least one limiter is needed")
        self.limiters = limiters

    def when(self, item: T) -> float:
        return max([limiter.when(item) for limiter in self.limiters])

    def forget(self, item: T) -> None:
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return max(limiter.num_requeues(item) for limiter in self.limiters)


def default_controller_rate_limiter(
    *, clock: Callable[[], float] = loop_time
) -> MaxOfRateLimiter[T]:
    """controller-runtime's classic default: per-item 5 ms..1000 s, overall 10 qps burst 100."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter[T](DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY),
        BucketRateLimiter[T](DEFAULT_QPS, DEFAULT_BURST, clock=clock),
    )
