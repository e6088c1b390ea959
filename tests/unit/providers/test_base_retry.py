"""The shared retry loop: attempts, backoff bounds, deadline, classification."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from nodeops.providers.base import ProviderError
from nodeops.providers.retry import RetryPolicy, backoff_delay, call_with_retry


class Flaky:
    """Fails with the given exceptions in turn, then answers."""

    def __init__(self, *failures: BaseException, result: str = "ok") -> None:
        self.failures = list(failures)
        self.calls = 0
        self.result = result

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return self.result


class Transient(Exception):
    pass


def classify(exc: BaseException) -> ProviderError | None:
    if isinstance(exc, Transient):
        return ProviderError("Throttling", str(exc), retryable=True)
    if isinstance(exc, KeyError):
        return ProviderError("Invalid", str(exc), retryable=False)
    return None


FAST = RetryPolicy(max_attempts=5, base_delay=0.001, max_delay=0.01, timeout=5)


async def test_retries_retryable_errors_until_success() -> None:
    fn = Flaky(Transient("slow down"), Transient("slow down"))
    assert await call_with_retry(fn, operation="op", policy=FAST, classify=classify) == "ok"
    assert fn.calls == 3


async def test_gives_up_after_max_attempts_with_the_last_code() -> None:
    fn = Flaky(*[Transient(f"t{i}") for i in range(10)])
    with pytest.raises(ProviderError) as caught:
        await call_with_retry(fn, operation="ec2.op", policy=FAST, classify=classify)
    assert fn.calls == 5
    error = caught.value
    assert (error.code, error.retryable, error.operation) == ("Throttling", True, "ec2.op")
    assert error.message == "t4 (gave up after 5 attempts)"
    assert isinstance(error.__cause__, Transient)


async def test_non_retryable_errors_are_raised_at_once() -> None:
    fn = Flaky(KeyError("nope"))
    with pytest.raises(ProviderError) as caught:
        await call_with_retry(fn, operation="op", policy=FAST, classify=classify)
    assert fn.calls == 1
    assert (caught.value.code, caught.value.retryable) == ("Invalid", False)
    assert caught.value.operation == "op"


async def test_provider_errors_raised_by_the_call_are_taken_as_classified() -> None:
    fn = Flaky(ProviderError("IncorrectInstanceState", "pending", retryable=True))
    assert await call_with_retry(fn, operation="op", policy=FAST, classify=classify) == "ok"
    assert fn.calls == 2


async def test_unclassified_exceptions_propagate_untouched() -> None:
    fn = Flaky(ZeroDivisionError("bug"))
    with pytest.raises(ZeroDivisionError):
        await call_with_retry(fn, operation="op", policy=FAST, classify=classify)
    assert fn.calls == 1


async def test_a_hanging_attempt_times_out_and_is_retried() -> None:
    calls = 0

    async def hang_once() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(10)
        return "ok"

    policy = RetryPolicy(max_attempts=3, base_delay=0.001, attempt_timeout=0.05, timeout=5)
    assert (
        await call_with_retry(hang_once, operation="op", policy=policy, classify=classify) == "ok"
    )
    assert calls == 2


async def test_the_overall_timeout_bounds_the_call() -> None:
    async def hang() -> str:
        await asyncio.sleep(10)
        return "never"

    policy = RetryPolicy(max_attempts=100, base_delay=0.001, attempt_timeout=5, timeout=0.1)
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        await call_with_retry(hang, operation="op", policy=policy, classify=classify)
    assert time.monotonic() - started < 2
    assert caught.value.code == "Timeout"
    assert caught.value.retryable


def test_backoff_is_full_jitter_under_a_cap() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0)
    rng = random.Random(7)
    for retry in range(12):
        ceiling = min(4.0, 0.5 * 2**retry)
        samples = [backoff_delay(policy, retry, rng) for _ in range(200)]
        assert all(0 <= s <= ceiling for s in samples)
        # Spread over the whole window, not bunched at its top as in equal jitter.
        assert min(samples) < ceiling * 0.1
        assert max(samples) > ceiling * 0.9
