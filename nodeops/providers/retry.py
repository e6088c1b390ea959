"""One retry loop for every provider: exponential backoff with full jitter under a deadline.

Cloud SDKs retry on their own, each with different defaults (botocore: 3 or 5 attempts, openstack:
none); providers switch those off and call through `call_with_retry`, so every cloud call has the
same attempt budget, the same backoff, one overall timeout, and surfaces as `ProviderError`.

Full jitter (sleep uniformly in [0, min(cap, base * 2**attempt)]) spreads the retries of many
reconcilers that were throttled at the same moment, which plain exponential backoff would keep
in lock-step.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog
from prometheus_client import Counter
from pydantic import BaseModel, ConfigDict, Field

from nodeops.common.looptime import loop_time
from nodeops.kube.metrics import REGISTRY
from nodeops.providers.base import ProviderError

__all__ = ["Classifier", "RetryPolicy", "backoff_delay", "call_with_retry"]

T = TypeVar("T")

Classifier = Callable[[BaseException], ProviderError | None]
"""Turns an SDK exception into a `ProviderError` (deciding `retryable`), or None to let it
propagate untouched (a programming error is not a cloud failure)."""

_log = structlog.get_logger("nodeops.providers")

PROVIDER_CALLS = Counter(
    "nodeops_provider_calls_total",
    "Cloud API calls made by providers, by outcome (ok or the error code), retries included.",
    ["provider", "operation", "outcome"],
    registry=REGISTRY,
)
PROVIDER_RETRIES = Counter(
    "nodeops_provider_retries_total",
    "Cloud API calls that were retried, by the error code that caused the retry.",
    ["provider", "operation", "code"],
    registry=REGISTRY,
)


class RetryPolicy(BaseModel):
    """Attempt budget of one provider call; a block of each provider's configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=8, ge=1, description="Tries per call, the first included.")
    base_delay: float = Field(default=0.2, gt=0, description="Backoff before the second try (s).")
    max_delay: float = Field(default=20.0, gt=0, description="Cap of one backoff sleep (s).")
    attempt_timeout: float = Field(default=30.0, gt=0, description="Limit of one try (s).")
    timeout: float = Field(default=120.0, gt=0, description="Limit of the call, retries included.")


def backoff_delay(policy: RetryPolicy, retry: int, rng: random.Random | None = None) -> float:
    """Sleep before retry number `retry` (0 for the first retry): full jitter."""
    ceiling = min(policy.max_delay, policy.base_delay * (2**retry))
    return (rng or random).uniform(0.0, ceiling)


async def call_with_retry(
    fn: Callable[[], Awaitable[T]],
    *,
    operation: str,
    policy: RetryPolicy,
    classify: Classifier,
    provider: str = "",
    rng: random.Random | None = None,
) -> T:
    """Await `fn()` until it succeeds, fails for good, or the policy runs out.

    `fn` is called afresh for every attempt. Exceptions are classified into `ProviderError`;
    non-retryable ones are raised at once, retryable ones after the last attempt or when the next
    sleep would pass the deadline. A `ProviderError` raised by `fn` itself is taken as classified.
    """
    deadline = loop_time() + policy.timeout
    attempt = 0
    while True:
        attempt += 1
        remaining = deadline - loop_time()
        try:
            async with asyncio.timeout(min(policy.attempt_timeout, max(remaining, 0.0))):
                result = await fn()
        except TimeoutError:
            error = ProviderError(
                "Timeout",
                f"no answer within {min(policy.attempt_timeout, remaining):.1f}s",
                retryable=True,
                operation=operation,
            )
        except ProviderError as exc:
            error = exc
        except Exception as exc:
            classified = classify(exc)
            if classified is None:
                PROVIDER_CALLS.labels(provider, operation, type(exc).__name__).inc()
                raise
            error = classified
            error.__cause__ = exc
        else:
            PROVIDER_CALLS.labels(provider, operation, "ok").inc()
            return result

        if error.operation is None:
            cause = error.__cause__
            error = ProviderError(
                error.code, error.message, retryable=error.retryable, operation=operation
            )
            error.__cause__ = cause
        PROVIDER_CALLS.labels(provider, operation, error.code).inc()
        if not error.retryable:
            raise error
        delay = backoff_delay(policy, attempt - 1, rng)
        if attempt >= policy.max_attempts or loop_time() + delay >= deadline:
            raise _exhausted(error, attempt, operation) from error.__cause__
        PROVIDER_RETRIES.labels(provider, operation, error.code).inc()
        _log.info(
            "provider call retried",
            provider=provider,
            operation=operation,
            code=error.code,
            attempt=attempt,
            delay=round(delay, 3),
        )
        await asyncio.sleep(delay)


def _exhausted(error: ProviderError, attempts: int, operation: str) -> ProviderError:
    """The last error, still retryable: the call may work on the next reconcile."""
    noun = "attempt" if attempts == 1 else "attempts"
    return ProviderError(
        error.code,
        f"{error.message} (gave up after {attempts} {noun})",
        retryable=True,
        operation=error.operation or operation,
    )
