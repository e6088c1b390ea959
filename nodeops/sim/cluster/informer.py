"""List+watch caches shared by the loops.

With 150,000 pods a cache per loop would hold the cluster several times over and every loop would
relist at start, so one `Informer` per resource is shared: loops read the cache, keep their own
small indexes through handlers, and write through the API.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable

from nodeops.sim.cluster.apiclient import (
    DELETED,
    PODS,
    RELISTED,
    ApiClient,
    Obj,
    Resource,
    paused_gc,
)

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped objects."""

Handler = Callable[[Obj | None, Obj | None], None]
"""Called with (old, new): old is None for an add, new is None for a delete."""

IndexFunc = Callable[[Obj], Iterable[str]]


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


Transform = Callable[[Obj], Obj]


def _slim(obj: Obj, resource: Resource) -> Obj:
    """Drop managedFields, which nothing in the loops reads and which nearly double a pod's
    size, and restore kind/apiVersion, which list items leave out but owner references need."""
    meta = obj.get("metadata")
    if meta and "managedFields" in meta:
        del meta["managedFields"]
    if "kind" not in obj:
        obj["kind"] = resource.kind
        obj["apiVersion"] = resource.api_version
    return obj


_POD_SPEC_FIELDS = frozenset(
    {
        "affinity",
        "containers",
        "hostNetwork",
        "initContainers",
        "nodeName",
        "nodeSelector",
        "overhead",
        "preemptionPolicy",
        "priority",
        "restartPolicy",
        "schedulerName",
        "terminationGracePeriodSeconds",
        "tolerations",
        "topologySpreadConstraints",
    }
)
_CONTAINER_FIELDS = frozenset({"image", "name", "readinessProbe", "resources", "restartPolicy"})
_CONTAINER_STATUS_FIELDS = frozenset({"name", "ready", "restartCount", "started", "state"})


def slim_pod(pod: Obj) -> Obj:
    """Keep what the loops read of a pod (scheduling, readiness, ownership, termination).

    150,000 cached pods are the simulator's largest memory cost; env, volumes, mounts, probes
    other than readiness, and status details are half of each pod and no loop reads them. No
    loop writes a cached pod back whole (only patches), so nothing is lost on the server.
    """
    spec = pod.get("spec")
    if spec:
        slim_spec = {k: v for k, v in spec.items() if k in _POD_SPEC_FIELDS}
        for key in ("containers", "initContainers"):
            if key in slim_spec:
                slim_spec[key] = [
                    {k: v for k, v in c.items() if k in _CONTAINER_FIELDS} for c in slim_spec[key]
                ]
        pod["spec"] = slim_spec
    status = pod.get("status")
    if status:
        for key in ("containerStatuses", "initContainerStatuses"):
            if key in status:
                status[key] = [
                    {k: v for k, v in c.items() if k in _CONTAINER_STATUS_FIELDS}
                    for c in status[key]
                ]
    return pod


class Informer:
    """A cache of one resource kept current by list+watch, with indexes and event handlers.

    Handlers run synchronously on the watch task and must only do cheap bookkeeping (enqueue
    keys); any API call belongs in a worker. Cached objects are shared: never mutate them.
    """

    def __init__(
        self,
        client: ApiClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.transform = transform
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.store: dict[Key, Obj] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self._handlers: list[Handler] = []
        self._index_funcs: dict[str, IndexFunc] = {}
        self._indexes: dict[str, dict[str, set[Key]]] = {}
        self._indexed_values: dict[str, dict[Key, tuple[str, ...]]] = {}
        self.shared: dict[type, object] = {}
        """Derived state kept from this cache's events (a tally), one per type, created by
        the first loop that needs it and shared by all."""

    # -- reading --------------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.store.get((namespace, name))

    def items(self) -> Iterable[Obj]:
        return self.store.values()

    def __len__(self) -> int:
        return len(self.store)

    def add_index(self, name: str, func: IndexFunc) -> None:
        """Register an index (once per name: loops share them); cached objects are indexed now."""
        if name in self._index_funcs:
            return
        self._index_funcs[name] = func
        self._indexes[name] = {}
        self._indexed_values[name] = {}
        for key, obj in self.store.items():
            self._index_one(name, func, key, obj)

    def index_keys(self, index: str, value: str) -> set[Key]:
        return self._indexes[index].get(value) or set()

    def by_index(self, index: str, value: str) -> list[Obj]:
        keys = self._indexes[index].get(value)
        if not keys:
            return []
        store = self.store
        return [store[k] for k in keys if k in store]

    def index_values(self, index: str) -> Iterable[str]:
        return self._indexes[index].keys()

    def add_handler(self, handler: Handler, *, replay: bool = True) -> None:
        """Add a handler; with `replay`, it first sees every cached object as an add."""
        self._handlers.append(handler)
        if replay:
            for obj in list(self.store.values()):
                self._call(handler, None, obj)

    async def wait_synced(self, within: float | None = None) -> None:
        await asyncio.wait_for(self.synced.wait(), within)

    # -- the loop -------------------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch forever; a fatal watch error (403, 404) restarts with a fresh list."""
        failures = 0
        while True:
            try:
                with paused_gc:
                    result = await self.client.list(
                        self.resource,
                        self.namespace,
                        label_selector=self.label_selector,
                        field_selector=self.field_selector,
                    )
                    self._replace(result.items)
                self.resource_version = result.resource_version
                self.synced.set()
                failures = 0
                watch = self.client.watch(
                    self.resource,
                    self.namespace,
                    resource_version=result.resource_version,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                )
                try:
                    async for ev in watch:
                        if ev.type == RELISTED:
                            with paused_gc:
                                self._replace(ev.items or [])
                        elif ev.type == DELETED:
                            self._delete(ev.object)
                        else:
                            self._upsert(ev.object)
                        self.resource_version = watch.resource_version
                finally:
                    await watch.aclose()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                delay = min(10.0, 0.1 * 2 ** min(failures, 7)) * random.uniform(0.8, 1.2)
                log.warning("informer %s: %s; retrying in %.1fs", self.resource.plural, exc, delay)
                await asyncio.sleep(delay)

    # -- cache maintenance ----------------------------------------------------------------------

    def _replace(self, items: list[Obj]) -> None:
        """Swap in a full list, turning the difference into add/update/delete events."""
        seen: set[Key] = set()
        for obj in items:
            seen.add(key_of(obj))
            self._upsert(obj)
        for key in [k for k in self.store if k not in seen]:
            self._delete(self.store[key])

    def _upsert(self, obj: Obj) -> None:
        obj = _slim(obj, self.resource)
        if self.transform is not None:
            obj = self.transform(obj)
        key = key_of(obj)
        old = self.store.get(key)
        if old is not None:
            old_rv = (old.get("metadata") or {}).get("resourceVersion")
            if old_rv == (obj.get("metadata") or {}).get("resourceVersion"):
                return
        self.store[key] = obj
        self._reindex(key, obj)
        for h in self._handlers:
            self._call(h, old, obj)

    def _delete(self, obj: Obj) -> None:
        key = key_of(obj)
        old = self.store.pop(key, None)
        if old is None:
            return
        self._unindex(key)
        final = old
        if obj.get("metadata"):
            final = _slim(obj, self.resource)
            if self.transform is not None:
                final = self.transform(final)
        for h in self._handlers:
            self._call(h, final, None)

    def _call(self, handler: Handler, old: Obj | None, new: Obj | None) -> None:
        try:
            handler(old, new)
        except Exception:
            log.exception("informer %s: handler failed", self.resource.plural)

    def _index_one(self, name: str, func: IndexFunc, key: Key, obj: Obj) -> None:
        try:
            values = tuple(func(obj))
        except Exception:
            log.exception("informer %s: index %s failed", self.resource.plural, name)
            values = ()
        index = self._indexes[name]
        for v in values:
            index.setdefault(v, set()).add(key)
        if values:
            self._indexed_values[name][key] = values

    def _reindex(self, key: Key, obj: Obj) -> None:
        if not self._index_funcs:
            return
        self._unindex(key)
        for name, func in self._index_funcs.items():
            self._index_one(name, func, key, obj)

    def _unindex(self, key: Key) -> None:
        for name, values_of in self._indexed_values.items():
            values = values_of.pop(key, None)
            if not values:
                continue
            index = self._indexes[name]
            for v in values:
                keys = index.get(v)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[v]


class InformerSet:
    """One informer per resource (and scope), created on first use and run as tasks.

    Pods are cached slimmed (`slim_pod`).
    """

    def __init__(self, client: ApiClient) -> None:
        self.client = client
        self._informers: dict[tuple[Resource, str | None], Informer] = {}
        self._tasks: dict[tuple[Resource, str | None], asyncio.Task[None]] = {}
        self._started = False

    def get(self, resource: Resource, namespace: str | None = None) -> Informer:
        key = (resource, namespace)
        inf = self._informers.get(key)
        if inf is None:
            transform = slim_pod if resource == PODS else None
            inf = self._informers[key] = Informer(
                self.client, resource, namespace=namespace, transform=transform
            )
            if self._started:
                self._start(key, inf)
        return inf

    def _start(self, key: tuple[Resource, str | None], inf: Informer) -> None:
        self._tasks[key] = asyncio.create_task(inf.run(), name=f"informer-{key[0].plural}")

    async def discard(self, resource: Resource, namespace: str | None = None) -> None:
        """Stop and forget an informer (its resource is no longer served)."""
        key = (resource, namespace)
        self._informers.pop(key, None)
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def all(self) -> list[Informer]:
        return list(self._informers.values())

    def start(self) -> None:
        self._started = True
        for key, inf in self._informers.items():
            self._start(key, inf)

    async def wait_synced(self, within: float | None = None) -> None:
        await asyncio.wait_for(
            asyncio.gather(*(i.synced.wait() for i in self._informers.values())), within
        )

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
