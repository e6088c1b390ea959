"""The shared informer factory and its read-your-writes hook on the client's writes.

One informer per resource, namespace, selectors and projection, so controllers reading the
same objects share one watch and one cache.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.indexers import IndexFunc
from nodeops.kube.listwatch import Informer
from nodeops.kube.metrics import (
    READ_YOUR_WRITES_WAIT,
)
from nodeops.kube.resources import Resource
from nodeops.kube.syncwait import _gone, _reached, wait_all_synced
from nodeops.kube.transforms import Transform, default_transform


@dataclass(frozen=True, slots=True)
class InformerKey:
    """What makes two informers different: what they list and watch, and what they keep.

    A transform is compared by identity: pass a module-level function, not a fresh lambda, or
    every call makes a new informer. `projection` is None for whole objects, else the fields a
    metadata-only informer keeps.
    """

    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    transform: Transform | None = None
    projection: frozenset[str] | None = None


class InformerFactory:
    """One shared informer per resource + namespace + selectors + projection.

    Informers asked for after `start` are started at once. With `read_your_writes`, the
    factory watches its client's writes: a write returns only once every started informer that
    holds (or will hold) the written object shows that version or a newer one, so a reconcile
    never reads the version it has just replaced. See docs/library.md for why this waits for the
    watch rather than feeding written objects into the cache. `watch_list=False` makes its
    informers sync by paginated lists even where the server could stream the state.
    """

    def __init__(
        self,
        client: Client,
        *,
        transform: Transform | None = default_transform,
        read_your_writes: bool = False,
        read_your_writes_timeout: float = 30.0,
        watch_list: bool = True,
    ) -> None:
        self.client = client
        self.transform = transform
        self.watch_list = watch_list
        self.read_your_writes_timeout = read_your_writes_timeout
        self._informers: dict[InformerKey, Informer] = {}
        self._started = False
        # Called with each informer the factory starts (the manager supervises them).
        self.on_start: list[Callable[[Informer], None]] = []
        if read_your_writes:
            client.write_observers.append(self)

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        transform: Transform | None = None,
        metadata_only: bool | Iterable[str] = False,
    ) -> Informer:
        """The shared informer for these arguments, made (and started, if running) on first use.

        `transform` replaces the factory's default (which drops managedFields); `metadata_only`
        keeps only metadata and the fields named (True: metadata alone). Indexers are added to
        the shared informer, so two users asking with different indexers both get theirs.
        """
        if namespace and not resource.namespaced:
            raise ValueError(
                f"{resource.key} are cluster-scoped; an informer for them takes no namespace "
                f"({namespace!r})"
            )
        projection: frozenset[str] | None = None
        if metadata_only is not False:
            projection = frozenset() if metadata_only is True else frozenset(metadata_only)
        key = InformerKey(
            resource,
            namespace or None,
            label_selector or None,
            field_selector or None,
            transform,
            projection,
        )
        inf = self._informers.get(key)
        if inf is None:
            inf = Informer(
                self.client,
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                transform=transform if transform is not None else self.transform,
                metadata_only=sorted(projection) if projection is not None else False,
                watch_list=self.watch_list,
            )
            self._informers[key] = inf
            if self._started:
                self._start(inf)
        for name, fn in (indexers or {}).items():
            inf.add_indexer(name, fn)
        return inf

    def informers(self) -> list[Informer]:
        return list(self._informers.values())

    @property
    def started(self) -> bool:
        return self._started

    def start(self) -> None:
        self._started = True
        for inf in self._informers.values():
            self._start(inf)

    def _start(self, inf: Informer) -> None:
        if inf.started:
            return
        inf.start()
        for hook in self.on_start:
            hook(inf)

    async def wait_synced(self, timeout: float | None = None) -> bool:
        return await wait_all_synced(self._informers.values(), timeout)

    @property
    def has_synced(self) -> bool:
        return all(inf.has_synced for inf in self._informers.values())

    async def stop(self) -> None:
        await asyncio.gather(*(inf.stop() for inf in self._informers.values()))
        self._started = False

    # ------------------------------------------------------------------ read-your-writes

    async def written(self, resource: Resource, namespace: str | None, result: Any) -> None:
        """Hold a write until the informers that hold its object show it (a `WriteObserver`).

        The wait is for the watch, not for a timer: a write answered with resourceVersion N
        is visible once an informer's own resourceVersion reaches N (every event and bookmark
        moves it). A delete answered with a `Status` (the object is gone at once) is visible once
        the object, by its uid, has left the cache.
        """
        if not isinstance(result, dict):
            return
        informers = [
            inf
            for key, inf in self._informers.items()
            if key.resource == resource and inf.started and inf.has_synced
        ]
        if not informers:
            return
        waits: list[tuple[Informer, Callable[[], bool]]] = []
        if result.get("kind") == "Status":
            details = result.get("details") or {}
            name, uid = str(details.get("name") or ""), details.get("uid")
            if not name:
                return
            key = f"{namespace}/{name}" if namespace and resource.namespaced else name
            for inf in informers:
                waits.append((inf, _gone(inf, key, uid)))
        else:
            meta = result.get("metadata") or {}
            try:
                wanted = int(meta.get("resourceVersion") or "")
            except ValueError:
                return  # not an etcd-style counter: versions cannot be compared
            for inf in informers:
                if inf.would_hold(result):
                    waits.append((inf, _reached(inf, wanted)))
        if not waits:
            return
        started = time.perf_counter()
        results = await asyncio.gather(
            *(inf.wait_until(cond, self.read_your_writes_timeout) for inf, cond in waits)
        )
        READ_YOUR_WRITES_WAIT.labels(resource.key).observe(time.perf_counter() - started)
        if not all(results):
            meta = result.get("metadata") or result.get("details") or {}
            reasons = sorted(
                {
                    why
                    for (inf, _), ok in zip(waits, results, strict=True)
                    if not ok and (why := inf.lag_reason())
                }
            )
            raise errors.CacheLagging(
                f"{resource.key} {meta.get('name', '')!r} was written, but the cache "
                + (
                    f"cannot show the write in time: {'; '.join(reasons)}"
                    if reasons
                    else f"did not show the write within {self.read_your_writes_timeout}s"
                )
            )
