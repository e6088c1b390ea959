"""Storage with resourceVersions, watch history and watch fan-out.

Objects are kept as compact JSON bytes, not dicts: a 150,000-pod cluster then fits in memory
the size of its JSON, lists are served by joining bytes, and one encoded watch line is shared by
every watcher. Only the labels and selectable fields of each object are kept decoded, because
selectors read them on every list and watch.

The store is used from one event loop and never awaits inside a write, so every write is
atomic with respect to every other request, like a transaction in etcd.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson

from nodeops.common.jsonbytes import dumps_exact
from nodeops.common.selectors import FieldSelector, LabelSelector

Transform = Callable[[bytes], bytes]

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

_TYPE_PREFIX = {t: b'{"type":"' + t.encode() + b'","object":' for t in (ADDED, MODIFIED, DELETED)}


class Entry:
    """One stored version of an object."""

    __slots__ = ("fields", "labels", "name", "namespace", "raw", "rv", "uid")

    def __init__(
        self,
        raw: bytes,
        rv: int,
        namespace: str,
        name: str,
        uid: str,
        labels: dict[str, str],
        fields: dict[str, str],
    ) -> None:
        self.raw = raw
        self.rv = rv
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.labels = labels
        self.fields = fields

    def decode(self) -> dict[str, Any]:
        obj: dict[str, Any] = orjson.loads(self.raw)
        return obj


class WatchEvent:
    __slots__ = ("_decoded", "entry", "line", "prev", "rv", "type")

    def __init__(self, type_: str, entry: Entry, prev: Entry | None) -> None:
        self.type = type_
        self.entry = entry
        self.prev = prev
        self.rv = entry.rv
        self.line: bytes | None = None
        self._decoded: dict[str, Any] | None = None

    def decoded(self) -> dict[str, Any]:
        """The stored object, decoded once for all the write hooks that read it (and only
        while they run): read it, never change it."""
        if self._decoded is None:
            self._decoded = self.entry.decode()
        return self._decoded

    def encoded(self, type_: str, transform: Transform | None) -> bytes:
        if transform is None:
            if type_ == self.type:
                if self.line is None:
                    self.line = _TYPE_PREFIX[type_] + self.entry.raw + b"}\n"
                return self.line
            return _TYPE_PREFIX[type_] + self.entry.raw + b"}\n"
        return _TYPE_PREFIX[type_] + transform(self.entry.raw) + b"}\n"


class Filter:
    """Namespace + label + field selection shared by list and watch."""

    __slots__ = ("fields", "labels", "namespace")

    def __init__(
        self,
        namespace: str | None,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
    ) -> None:
        self.namespace = namespace
        self.labels = labels if labels is not None and not labels.empty else None
        self.fields = fields if fields is not None and not fields.empty else None

    def matches(self, e: Entry) -> bool:
        if self.namespace is not None and e.namespace != self.namespace:
            return False
        if self.labels is not None and not self.labels.matches(e.labels):
            return False
        return self.fields is None or self.fields.matches(e.fields)


class Watcher:
    """A watch stream's buffer; the HTTP layer drains it, the bucket fills it."""

    def __init__(self, flt: Filter, transform: Transform | None, max_pending: int) -> None:
        self.filter = flt
        self.transform = transform
        self.pending: deque[bytes] = deque()
        self.wake = asyncio.Event()
        self.closed = False
        self.overflowed = False
        self.max_pending = max_pending
        self.last_rv = 0
        # The highest resourceVersion whose event has been written to the connection, and
        # writers waiting for an event of theirs to get that far.
        self.sent_rv = 0
        self._sent_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._pending_rvs: deque[int] = deque()  # the resourceVersion of each pending line
        self.hold = 0.0  # an injected delay: writers do not wait for a watcher slowed on purpose

    def offer(self, ev: WatchEvent) -> None:
        if self.closed:
            return
        flt = self.filter
        now = flt.matches(ev.entry)
        if ev.type == MODIFIED and ev.prev is not None:
            before = flt.matches(ev.prev)
            if before and now:
                kind = MODIFIED
            elif before:
                kind = DELETED
            elif now:
                kind = ADDED
            else:
                return
        elif now:
            kind = ev.type
        else:
            return
        self.pending.append(ev.encoded(kind, self.transform))
        self._pending_rvs.append(ev.rv)
        self.last_rv = ev.rv
        if len(self.pending) > self.max_pending:
            # A consumer this far behind is cut off, as the apiserver's cacher does with a
            # slow watcher; the client resumes from its last resourceVersion.
            self.overflowed = True
            self.closed = True
        self.wake.set()

    def close(self) -> None:
        self.closed = True
        self.wake.set()
        self._wake_senders(all_of_them=True)

    def take(self, count: int | None = None) -> tuple[list[bytes], int]:
        """Take the first `count` pending lines (all by default) for writing, with the highest
        resourceVersion among them, for `mark_sent` once they are written."""
        n = len(self.pending) if count is None else min(count, len(self.pending))
        lines = [self.pending.popleft() for _ in range(n)]
        upto = max((self._pending_rvs.popleft() for _ in range(n)), default=0)
        return lines, upto

    def mark_sent(self, rv: int) -> None:
        """The lines up to `rv` are on the connection: release writers waiting for them."""
        if rv > self.sent_rv:
            self.sent_rv = rv
        self._wake_senders()

    def _wake_senders(self, *, all_of_them: bool = False) -> None:
        keep = []
        for rv, fut in self._sent_waiters:
            if all_of_them or rv <= self.sent_rv:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((rv, fut))
        self._sent_waiters = keep

    def wait_sent(self, rv: int) -> asyncio.Future[None] | None:
        """A future done once the event at `rv` (offered to this watcher) has been written;
        None when it already has been, or this watcher never got it."""
        if self.closed or self.last_rv < rv or self.sent_rv >= rv:
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sent_waiters.append((rv, fut))
        return fut


class Watchers:
    """A bucket's watchers, offered each event newest first, in the same order in every run.

    kube's cacher dispatches an event to its watchers in no set order. A set here would order
    them by where they sit in memory, so which of two writers reacting to one event wins a
    race (an eviction and the disruption controller, both writing the budget's status) would
    change from run to run, and a rehearsal, whose work takes no time, could predict two
    timelines for one cluster. Newest first, the clients that came last (the operator) hear
    before the cluster's own controllers, which watch from the start, and evictions under one
    budget meet the disruption controller's writes and retry as they do when the roll runs in
    real time.
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[Watcher, None] = {}

    def add(self, watcher: Watcher) -> None:
        self._items[watcher] = None

    def discard(self, watcher: Watcher) -> None:
        self._items.pop(watcher, None)

    def __iter__(self) -> Iterator[Watcher]:
        return reversed(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, watcher: object) -> bool:
        return watcher in self._items


class Bucket:
    """All objects of one storage key (group + plural), their history and their watchers."""

    def __init__(self, history_size: int) -> None:
        self.by_ns: dict[str, dict[str, Entry]] = {}
        self.count = 0
        self.history: deque[WatchEvent] = deque()
        self.history_size = history_size
        # Highest resourceVersion whose event is no longer in `history`: a watch must start
        # at or after it.
        self.compacted_rv = 0
        self.watchers = Watchers()
        self._sorted: list[tuple[str, str]] | None = None

    def get(self, namespace: str, name: str) -> Entry | None:
        ns = self.by_ns.get(namespace)
        return ns.get(name) if ns is not None else None

    def entries(self, namespace: str | None = None) -> Iterator[Entry]:
        if namespace is not None:
            yield from (self.by_ns.get(namespace) or {}).values()
            return
        for ns in self.by_ns.values():
            yield from ns.values()

    def sorted_keys(self) -> list[tuple[str, str]]:
        if self._sorted is None:
            self._sorted = sorted((ns, n) for ns, names in self.by_ns.items() for n in names)
        return self._sorted

    def _record(self, ev: WatchEvent) -> None:
        self.history.append(ev)
        if len(self.history) > self.history_size:
            self.compacted_rv = self.history.popleft().rv
        dead: list[Watcher] = []
        for w in self.watchers:  # the dead are discarded below, not while iterating
            w.offer(ev)
            if w.closed:
                dead.append(w)
        for w in dead:
            self.watchers.discard(w)

    def put(self, entry: Entry) -> WatchEvent:
        ns = self.by_ns.setdefault(entry.namespace, {})
        prev = ns.get(entry.name)
        ns[entry.name] = entry
        if prev is None:
            self.count += 1
            self._sorted = None
            ev = WatchEvent(ADDED, entry, None)
        else:
            ev = WatchEvent(MODIFIED, entry, prev)
        self._record(ev)
        return ev

    def remove(self, final: Entry) -> WatchEvent:
        ns = self.by_ns.get(final.namespace) or {}
        ns.pop(final.name, None)
        if not ns:
            self.by_ns.pop(final.namespace, None)
        self.count -= 1
        self._sorted = None
        ev = WatchEvent(DELETED, final, None)
        self._record(ev)
        return ev

    async def wait_sent(self, rv: int, timeout: float) -> None:
        """Wait until every watcher that was offered the event at `rv` has written it out.

        kube-apiserver writes a PodDisruptionBudget's status to etcd, and its cacher sends the
        watch event, while the eviction that wrote it is still deleting the pod; by the time the
        eviction's answer leaves, watchers have had the event for milliseconds. A writer that
        must keep that order waits here. A watcher that has not taken the event within
        `timeout` (a stalled consumer) is not waited for any longer.
        """
        futures = [
            f for w in list(self.watchers) if not w.hold and (f := w.wait_sent(rv)) is not None
        ]
        if futures:
            await asyncio.wait(futures, timeout=timeout)

    def events_since(self, rv: int) -> list[WatchEvent] | None:
        """Events after `rv`, or None when they are no longer all retained."""
        if rv < self.compacted_rv:
            return None
        hist = self.history
        if not hist or hist[-1].rv <= rv:
            return []
        # History is ordered by rv: find the first event after rv from the right, since
        # resumes are usually recent.
        lo, hi = 0, len(hist)
        while lo < hi:
            mid = (lo + hi) // 2
            if hist[mid].rv <= rv:
                lo = mid + 1
            else:
                hi = mid
        return [hist[i] for i in range(lo, len(hist))]


class Store:
    """The cluster's state: one global resourceVersion counter over all buckets, like etcd."""

    def __init__(self, history_size: int = 20_000, watcher_buffer: int = 1_000_000) -> None:
        self.rv = 1
        self.history_size = history_size
        self.watcher_buffer = watcher_buffer
        self.buckets: dict[tuple[str, str], Bucket] = {}
        self.write_hooks: list[Callable[[tuple[str, str], WatchEvent], None]] = []

    def bucket(self, key: tuple[str, str]) -> Bucket:
        b = self.buckets.get(key)
        if b is None:
            b = self.buckets[key] = Bucket(self.history_size)
        return b

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _entry(
        self, obj: dict[str, Any], fields: Callable[[Mapping[str, Any]], dict[str, str]]
    ) -> Entry:
        rv = self.next_rv()
        meta = obj["metadata"]
        meta["resourceVersion"] = str(rv)
        return Entry(
            dumps_exact(obj),
            rv,
            meta.get("namespace") or "",
            meta["name"],
            meta.get("uid", ""),
            dict(meta.get("labels") or {}),
            fields(obj),
        )

    def write(
        self,
        key: tuple[str, str],
        obj: dict[str, Any],
        fields: Callable[[Mapping[str, Any]], dict[str, str]],
    ) -> Entry:
        """Store `obj` at a new resourceVersion (written into the object) and notify watchers."""
        entry = self._entry(obj, fields)
        self._notify(key, self.bucket(key).put(entry))
        return entry

    def delete(
        self,
        key: tuple[str, str],
        obj: dict[str, Any],
        fields: Callable[[Mapping[str, Any]], dict[str, str]],
    ) -> Entry:
        """Remove the object; the DELETED event carries its final state at a new version."""
        entry = self._entry(obj, fields)
        self._notify(key, self.bucket(key).remove(entry))
        return entry

    def _notify(self, key: tuple[str, str], ev: WatchEvent) -> None:
        for hook in self.write_hooks:
            hook(key, ev)
        ev._decoded = None  # the history keeps events: not their decoded copies

    def load(
        self,
        key: tuple[str, str],
        raw_objects: list[bytes],
        fields: Callable[[Mapping[str, Any]], dict[str, str]],
    ) -> None:
        """Bulk-load pre-encoded objects without watch events (benchmarks, big scenarios)."""
        b = self.bucket(key)
        for raw in raw_objects:
            entry = self._entry(orjson.loads(raw), fields)
            ns = b.by_ns.setdefault(entry.namespace, {})
            if entry.name not in ns:
                b.count += 1
            ns[entry.name] = entry
        b._sorted = None
        b.compacted_rv = self.rv
