"""The cache side of an informer: stored objects, indexes, handlers and read-your-writes waits.

The cache keeps each object as compact JSON bytes after the transform, not as a dict: a Python
dict costs about five times the JSON it came from. Reads decode on access.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson
import structlog

from nodeops.common import jsonbytes
from nodeops.common.jsonbytes import dumps_exact
from nodeops.common.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.indexers import IndexFunc, index_by_namespace, object_key
from nodeops.kube.metrics import (
    INFORMER_OBJECT_ERRORS,
)
from nodeops.kube.relistbackoff import Backoff
from nodeops.kube.resources import Resource
from nodeops.kube.transforms import (
    LAST_APPLIED,
    Obj,
    Transform,
    _then,
    default_transform,
    metadata_projection,
)

# Logged under the public module's name, which log filters and dashboards key on.
log = structlog.get_logger("nodeops.kube.informer")

# Handlers are synchronous, like client-go's: they map events to work (enqueue keys), and must
# not block the informer. An exception in one is logged and does not stop the others.
AddHandler = Callable[[Obj], None]
UpdateHandler = Callable[[Obj, Obj], None]
DeleteHandler = Callable[[Obj], None]


@dataclass(slots=True)
class _Handlers:
    on_add: AddHandler | None = None
    on_update: UpdateHandler | None = None
    on_delete: DeleteHandler | None = None


@dataclass(slots=True)
class _Waiter:
    """A wait for the cache to satisfy `condition`, given up at `deadline` (loop time)."""

    condition: Callable[[], bool]
    future: asyncio.Future[bool]
    deadline: float | None


class InformerCache:
    """The indexed object cache of an informer, its reads, handlers and waits on it.

    Separate from the list/watch loop (`nodeops.kube.listwatch.Informer`, its subclass) so
    that what readers may rely on (keys, indexes, sync state, waiting for a version) can be
    read without the network code that feeds it.
    """

    def __init__(
        self,
        client: Client,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = default_transform,
        metadata_only: bool | Iterable[str] = False,
        indexers: dict[str, IndexFunc] | None = None,
        page_size: int = 500,
        resync_period: float | None = None,
        watch_timeout: tuple[int, int] = (300, 600),
        watch_list: bool = True,
    ) -> None:
        if namespace and not resource.namespaced:
            raise ValueError(
                f"{resource.key} are cluster-scoped; an informer for them takes no namespace "
                f"({namespace!r})"
            )
        self.client = client
        self.resource = resource
        self.namespace = namespace or None
        self.label_selector = label_selector
        self.field_selector = field_selector
        if metadata_only is not False:
            fields: tuple[str, ...] = () if metadata_only is True else tuple(metadata_only)
            transform = _then(transform, metadata_projection(fields))
        self.transform = transform
        self._kind_json = jsonbytes.raw(resource.kind)
        self._api_version_json = jsonbytes.raw(resource.api_version)
        self.page_size = page_size
        self.resync_period = resync_period
        self.watch_timeout = watch_timeout
        self.watch_list = watch_list
        # Watch-lists in a row that broke after some of their initial events.
        self._broken_watch_lists = 0
        #: How the last sync went: "watch-list", or "list" (paged), where the server refused a
        #: watch-list or it failed; "" before the first.
        self.synced_by = ""
        self._items: dict[str, bytes] = {}
        self._indexers: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}
        self._index_values: dict[str, dict[str, tuple[str, ...]]] = {}
        self._handlers: list[_Handlers] = []
        self._synced = asyncio.Event()
        self._resource_version = ""
        self._waiters: list[_Waiter] = []
        # When the next list/watch attempt is due (loop time) while one is backing off.
        self._retry_at: float | None = None
        # Whether `run` has ended (stopped, or died): nothing will move the cache any more.
        self._ended = False
        # Since when (loop time) the synced cache has been behind: a failed list/watch or an
        # expired watch, until the next sync or watch is established.
        self._stale_since: float | None = None
        self._selectors: tuple[LabelSelector | None, FieldSelector | None] | None = None
        self.backoff = Backoff()
        self.last_error: BaseException | None = None
        # Consecutive failed list/watch attempts since the watch last delivered anything;
        # `problem()` reports the informer as failing from `unhealthy_after` on.
        self.failures = 0
        self.unhealthy_after = 3
        self._task: asyncio.Task[None] | None = None
        self._log = log.bind(resource=resource.key, namespace=namespace or "")
        if resource.namespaced:
            self.add_indexer("namespace", index_by_namespace)
        for name, fn in (indexers or {}).items():
            self.add_indexer(name, fn)

    # ------------------------------------------------------------------ setup

    def add_indexer(self, name: str, fn: IndexFunc) -> None:
        if name in self._indexers:
            return
        self._indexers[name] = fn
        index: dict[str, set[str]] = {}
        values: dict[str, tuple[str, ...]] = {}
        for key, raw in self._items.items():
            obj = orjson.loads(raw)
            try:
                vals = tuple(fn(obj))
            except Exception as exc:
                self._object_failed(f"indexer {name}", obj, exc)
                continue
            values[key] = vals
            for v in vals:
                index.setdefault(v, set()).add(key)
        self._indices[name] = index
        self._index_values[name] = values

    def add_handler(
        self,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> None:
        """Handlers added after sync are replayed the current objects as adds, as client-go."""
        handlers = _Handlers(on_add, on_update, on_delete)
        self._handlers.append(handlers)
        if self._synced.is_set() and on_add is not None:
            for raw in list(self._items.values()):
                _call(on_add, orjson.loads(raw))

    # ------------------------------------------------------------------ reads

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    @property
    def started(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The list/watch task once started (for supervision)."""
        return self._task

    def problem(self) -> str | None:
        """Why this cache cannot be trusted now, or None: for readiness checks.

        Not synced yet, its task ended, or list/watch failing again and again (a 403 after
        RBAC changed, a 404 after a CRD was removed): each makes the cache silently stale, so
        each is reported rather than served as if it were true.
        """
        name = self.resource.key + self._describe()
        if self._task is not None and self._task.done():
            return f"{name}: list/watch stopped"
        if self.failures >= self.unhealthy_after:
            return f"{name}: {self.failures} list/watch attempts failed in a row: {self.last_error}"
        if not self._synced.is_set():
            return f"{name}: not synced" + (f" ({self.last_error})" if self.last_error else "")
        return None

    def _recovered(self) -> None:
        if self.failures:
            self._log.info("list/watch recovered", after_failures=self.failures)
        self.failures = 0
        self.last_error = None
        self.backoff.reset()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    @property
    def resource_version(self) -> str:
        """The resourceVersion the cache is at: of the last list, event or bookmark seen."""
        return self._resource_version

    @resource_version.setter
    def resource_version(self, value: str) -> None:
        self._resource_version = value
        if self._waiters:
            self._wake_waiters()

    async def wait_until(self, condition: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until `condition()` holds, checked whenever the cache moves; False on timeout.

        Also False, early, when the cache cannot move in time: its list/watch failed and the
        next attempt comes after the deadline, or the informer stopped. `lag_reason()` then
        says why, so a caller reports the broken watch instead of sitting out its timeout.
        """
        if condition():
            return True
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        if self._hopeless(deadline):
            return condition()
        future: asyncio.Future[bool] = loop.create_future()
        waiter = _Waiter(condition, future, deadline)
        self._waiters.append(waiter)
        try:
            return await asyncio.wait_for(future, timeout) or condition()
        except TimeoutError:
            return condition()
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

    @property
    def retry_in(self) -> float | None:
        """Seconds until the next list/watch attempt while one is backing off, else None."""
        if self._retry_at is None:
            return None
        return max(0.0, self._retry_at - asyncio.get_running_loop().time())

    def lag_reason(self) -> str:
        """Why the cache is not moving now ("" when its watch is running)."""
        if self._ended:
            return "its list/watch has stopped"
        wait = self.retry_in
        if wait is not None:
            return f"its list/watch failed ({self.last_error}); the next attempt is in {wait:.1f}s"
        return ""

    def _hopeless(self, deadline: float | None) -> bool:
        """Whether nothing can move the cache before `deadline`."""
        if self._ended:
            return True
        return deadline is not None and self._retry_at is not None and self._retry_at > deadline

    def _wake_waiters(self) -> None:
        for waiter in list(self._waiters):
            future = waiter.future
            if future.done():
                continue
            try:
                ok = waiter.condition()
            except Exception as exc:  # a waiter's bug is its own, not the informer's
                future.set_exception(exc)
                continue
            if ok:
                future.set_result(True)

    def _release_hopeless_waiters(self) -> None:
        """After a failure (or a stop): end the waits that the next attempt comes too late for."""
        for waiter in list(self._waiters):
            if not waiter.future.done() and self._hopeless(waiter.deadline):
                waiter.future.set_result(False)

    def __len__(self) -> int:
        return len(self._items)

    def _check_synced(self) -> None:
        if not self._synced.is_set():
            raise errors.NotSynced(
                f"the informer of {self.resource.key}{self._describe()} has not synced yet"
            )

    def _describe(self) -> str:
        parts = []
        if self.namespace:
            parts.append(f"namespace={self.namespace}")
        if self.label_selector:
            parts.append(f"labels={self.label_selector}")
        if self.field_selector:
            parts.append(f"fields={self.field_selector}")
        return f" ({', '.join(parts)})" if parts else ""

    def key_for(self, name: str, namespace: str | None = None) -> str:
        """The cache key of an object, checking the namespace against the resource's scope."""
        if self.resource.namespaced:
            ns = namespace if namespace is not None else self.namespace
            if not ns:
                raise ValueError(
                    f"{self.resource.key} are namespaced: give the namespace of {name!r}"
                )
            return f"{ns}/{name}"
        if namespace:
            raise ValueError(
                f"{self.resource.key} are cluster-scoped; no namespace ({namespace!r}) applies"
            )
        return name

    def get(self, name: str, namespace: str | None = None) -> Obj | None:
        """The cached object, or None if it does not exist (as far as the synced cache knows)."""
        key = self.key_for(name, namespace)
        self._check_synced()
        raw = self._items.get(key)
        return orjson.loads(raw) if raw is not None else None

    def get_by_key(self, key: str) -> Obj | None:
        self._check_synced()
        raw = self._items.get(key)
        return orjson.loads(raw) if raw is not None else None

    def keys(self) -> list[str]:
        self._check_synced()
        return list(self._items)

    def objects(self, namespace: str | None = None) -> list[Obj]:
        if namespace and not self.resource.namespaced:
            raise ValueError(
                f"{self.resource.key} are cluster-scoped; no namespace ({namespace!r}) applies"
            )
        self._check_synced()
        if namespace is not None and self.resource.namespaced:
            return self.by_index("namespace", namespace)
        return [orjson.loads(raw) for raw in self._items.values()]

    def iter_raw(self) -> Iterator[bytes]:
        self._check_synced()
        return iter(list(self._items.values()))

    def by_index(self, index: str, value: str) -> list[Obj]:
        self._check_synced()
        keys = self._indices[index].get(value)
        if not keys:
            return []
        items = self._items
        return [orjson.loads(items[k]) for k in sorted(keys) if k in items]

    def index_keys(self, index: str, value: str) -> list[str]:
        self._check_synced()
        return sorted(self._indices[index].get(value) or ())

    def index_count(self, index: str, value: str, *, excluding: Iterable[str] = ()) -> int:
        """How many keys `index_keys` would return, less those in `excluding`: without
        sorting, copying or decoding the index's keys, which a count asked at every
        reconcile of a thousand-node roll would."""
        self._check_synced()
        keys = self._indices[index].get(value) or ()
        return len(keys) - sum(1 for k in set(excluding) if k in keys)

    def cache_bytes(self) -> int:
        return sum(len(raw) for raw in self._items.values())

    # ------------------------------------------------------------------ read-your-writes

    def would_hold(self, obj: Mapping[str, Any]) -> bool:
        """Whether `obj` belongs in this cache (namespace and selectors), or is cached now."""
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or None
        name = str(meta.get("name") or "")
        if self.namespace and ns != self.namespace:
            return False
        if (f"{ns}/{name}" if ns else name) in self._items:
            return True
        return self._selects(obj)

    def _selects(self, obj: Mapping[str, Any]) -> bool:
        labels, fields = self._parsed_selectors()
        if labels is not None and not labels.matches((obj.get("metadata") or {}).get("labels")):
            return False
        if fields is not None:
            values = {f: _field_value(obj, f) for f in fields.fields}
            if not fields.matches(values):
                return False
        return True

    def _parsed_selectors(self) -> tuple[LabelSelector | None, FieldSelector | None]:
        parsed = self._selectors
        if parsed is None:
            try:
                labels = parse_label_selector(self.label_selector) if self.label_selector else None
                fields = parse_field_selector(self.field_selector) if self.field_selector else None
            except SelectorError:
                labels, fields = None, None  # the server refuses it; nothing will be cached
            parsed = (labels, fields)
            self._selectors = parsed
        return parsed

    # ------------------------------------------------------------------ cache writes

    def _set_index(self, key: str, new_values: dict[str, tuple[str, ...]] | None) -> None:
        for name in self._indexers:
            values = self._index_values[name]
            new = new_values.get(name, ()) if new_values is not None else ()
            old = values.get(key, ())
            if old == new:
                continue  # most updates move no index entry
            index = self._indices[name]
            for v in old:
                bucket = index.get(v)
                if bucket is not None:
                    bucket.discard(key)
                    if not bucket:
                        del index[v]
            if new:
                values[key] = new
                for v in new:
                    index.setdefault(v, set()).add(key)
            else:
                del values[key]

    def _accept(
        self, obj: Obj, raw: memoryview | None = None, compact: bytes | None = None
    ) -> tuple[Obj, bytes, bytes | None] | None:
        """Transform, index and cache one object; returns it, its cached bytes and the bytes
        of the version it replaced.

        `raw` is the object's JSON exactly as the server sent it, when the watch event could be
        cut to it: without a transform it is what the cache keeps, saving an encode that would
        only give back equivalent bytes (kube-apiserver writes compact JSON already).
        `compact` is given when the transform was already done on the bytes (`obj` is their
        decoding): the cache keeps them as they are.

        A transform or an indexer that raises on one object (an indexer reading a field a
        pending pod lacks) must not take the whole cache down: the object is left as the cache
        had it, the failure is logged and counted in `nodeops_informer_object_errors_total`,
        and every other object goes on being served.
        """
        transform = self.transform
        if transform is not None and compact is None:
            try:
                obj = transform(obj)
            except Exception as exc:
                self._object_failed("transform", obj, exc)
                return None
        values: dict[str, tuple[str, ...]] = {}
        for name, fn in self._indexers.items():
            try:
                values[name] = tuple(fn(obj))
            except Exception as exc:
                self._object_failed(f"indexer {name}", obj, exc)
                return None
        key = object_key(obj)
        if compact is not None:
            new = compact
        elif raw is not None and transform is None:
            new = bytes(raw)
        else:
            new = dumps_exact(obj)
        items = self._items
        old = items.get(key)
        items[key] = new
        self._set_index(key, values)
        return obj, new, old

    def _compact(self, raw: memoryview | msgspec.Raw) -> bytes | None:
        """The cache's bytes for an object's JSON, with the default transform done on the bytes,
        or None where only decoding it whole can say (the caller then does that).

        Exactly what adding the kind (when missing), decoding, `default_transform` and encoding
        would give, without decoding the `managedFields` that the transform drops and the
        encoder would never see: the object and its metadata are split into members left
        undecoded, the dropped members are left out, and the rest joined as they came. A
        metadata that is not an object, or annotations that are neither an object nor empty,
        are left to the dict path, which reports them as it always has.
        """
        top = jsonbytes.members(raw)
        if top is None:
            return None
        changed = False
        if "kind" not in top:
            top["kind"] = self._kind_json
            top["apiVersion"] = self._api_version_json
            changed = True
        meta_json = top.get("metadata")
        if meta_json is not None:
            meta = jsonbytes.members(meta_json)
            if meta is None:
                return None
            dropped = meta.pop("managedFields", None) is not None
            ann_json = meta.get("annotations")
            if ann_json is not None:
                try:
                    ann = orjson.loads(memoryview(ann_json))
                except orjson.JSONDecodeError:
                    return None
                if isinstance(ann, dict):
                    if LAST_APPLIED in ann:
                        del ann[LAST_APPLIED]
                        meta["annotations"] = jsonbytes.raw(ann)
                        dropped = True
                elif ann:
                    return None
            if dropped:
                top["metadata"] = msgspec.Raw(jsonbytes.joined(meta))
                changed = True
        return jsonbytes.joined(top) if changed else bytes(raw)

    def _transformed_for_delete(self, obj: Obj) -> Obj:
        """A deleted object for handlers: transformed when possible, as it came otherwise."""
        if self.transform is None:
            return obj
        try:
            return self.transform(obj)
        except Exception as exc:
            self._object_failed("transform", obj, exc)
            return obj

    def _object_failed(self, stage: str, obj: Obj, exc: Exception) -> None:
        INFORMER_OBJECT_ERRORS.labels(self.resource.key, stage.partition(" ")[0]).inc()
        self._log.error(
            "object skipped: its " + stage + " failed",
            object=object_key(obj) if isinstance(obj, dict) else repr(obj)[:100],
            error=f"{type(exc).__name__}: {exc}",
        )

    def _remove(self, key: str) -> bytes | None:
        old = self._items.pop(key, None)
        self._set_index(key, None)
        return old

    def _dispatch_add(self, obj: Obj) -> None:
        for h in self._handlers:
            if h.on_add is not None:
                _call(h.on_add, obj)

    def _dispatch_update(self, old_raw: bytes, obj: Obj, old: Obj | None = None) -> None:
        wants_old = [h for h in self._handlers if h.on_update is not None]
        if not wants_old:
            return
        if old is None:
            old = orjson.loads(old_raw)
        for h in wants_old:
            assert h.on_update is not None
            _call(h.on_update, old, obj)

    def _dispatch_delete(self, obj: Obj) -> None:
        for h in self._handlers:
            if h.on_delete is not None:
                _call(h.on_delete, obj)


def _call(fn: Callable[..., None], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("informer event handler failed")


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    """An object's field as a field selector compares it: a string, "" when absent."""
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
