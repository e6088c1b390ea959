"""The informer's backoff: per failure streak, and the server's Retry-After as asked."""

from __future__ import annotations

from nodeops.kube.informer import Backoff


def test_delays_double_within_a_streak_up_to_the_maximum() -> None:
    backoff = Backoff(initial=1.0, maximum=4.0)
    delays = [backoff.next() for _ in range(5)]
    for delay, step in zip(delays, [1.0, 2.0, 4.0, 4.0, 4.0], strict=True):
        assert step <= delay <= 2 * step  # full jitter on top of the step


def test_a_new_streak_starts_at_the_first_step() -> None:
    backoff = Backoff(initial=1.0, maximum=30.0)
    for _ in range(6):
        backoff.next()
    assert backoff.streak
    backoff.reset()
    assert not backoff.streak
    assert 1.0 <= backoff.next() <= 2.0


def test_retry_after_is_waited_as_asked_and_still_counts_in_the_streak() -> None:
    backoff = Backoff(initial=1.0, maximum=30.0)
    assert backoff.next(retry_after=7.0) == 7.0
    assert backoff.next(retry_after=0.5) == 0.5  # shorter than the streak's step: as asked
    assert 4.0 <= backoff.next() <= 8.0  # the third failure of the streak
    assert 8.0 <= backoff.next(retry_after=0) <= 16.0  # "0" asks nothing: the streak decides
