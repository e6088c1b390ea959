"""The retry policy of a failing list/watch: backoff per failure streak and the failure label.

Separate from the loop so that the policy (0.8 s doubling to 30 s with jitter, at least the
server's `Retry-After`) is read, tested and tuned on its own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from nodeops.kube import errors


@dataclass
class Backoff:
    """Delays between the list/watch attempts of one failure streak.

    client-go's reflector shape (0.8 s doubling to 30 s, full jitter), but kept per streak: the
    streak ends as soon as a list completes or a watch is established, so an isolated failure
    after hours of health costs the first step, not whatever a two-minute window remembered.
    A `Retry-After` the server sent is waited as asked instead: it knows when it can serve.
    """

    initial: float = 0.8
    maximum: float = 30.0
    _current: float = field(default=0.0, init=False)

    def next(self, retry_after: float | None = None) -> float:
        self._current = (
            self.initial if self._current == 0.0 else min(self.maximum, self._current * 2)
        )
        if retry_after is not None and retry_after > 0:
            return retry_after
        return self._current * (1 + random.random())

    def reset(self) -> None:
        self._current = 0.0

    @property
    def streak(self) -> bool:
        """Whether a failure streak is under way (the next delay is not the first step)."""
        return self._current != 0.0


def _error_kind(exc: BaseException) -> str:
    """The `error` label of a failed list/watch: the HTTP code, or the exception's type."""
    if isinstance(exc, errors.ApiError):
        return str(exc.code)
    return type(exc).__name__
