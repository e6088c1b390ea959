"""The order a bucket offers an event to its watchers: newest first, the same in every run."""

from __future__ import annotations

from nodeops.sim.server.store import Bucket, Entry, Filter, Watcher


def _entry(rv: int) -> Entry:
    return Entry(b'{"metadata":{"name":"p"}}', rv, "ns", "p", "uid", {}, {})


def test_watchers_are_offered_events_newest_first() -> None:
    bucket = Bucket(history_size=10)
    first, second, third = (Watcher(Filter(None, None, None), None, 100) for _ in range(3))
    for w in (first, second, third):
        bucket.watchers.add(w)
    assert list(bucket.watchers) == [third, second, first]
    bucket.put(_entry(2))
    assert [len(w.pending) for w in (first, second, third)] == [1, 1, 1]

    bucket.watchers.discard(second)
    bucket.watchers.add(first)  # already watching: keeps its place
    assert list(bucket.watchers) == [third, first]
    assert second not in bucket.watchers and len(bucket.watchers) == 2
    first.close()
    bucket.put(_entry(3))  # a closed watcher is dropped once offered the event
    assert list(bucket.watchers) == [third]
