"""Informers: a watched, indexed cache of one resource, shared by every controller that reads it.

Semantics are client-go's reflector and shared informer: the initial state streamed by a
watch-list that then goes on as the watch (a paginated list and a watch from its resourceVersion
where the server refuses watch-lists), bookmarks on; a random server timeout of 5-10 minutes and
a client read timeout so a dead connection cannot stall the cache; a relist on 410 Gone;
exponential backoff (0.8 s up to 30 s, with jitter) on errors; add/update/delete handlers with
old and new objects.

The cache keeps each object as compact JSON bytes after the transform, not as a dict: a Python
dict costs about five times the JSON it came from, and an operator watching every pod of a
150,000-pod cluster must not need gigabytes for it. Reads decode on access, which costs
microseconds per object; handlers receive the already-decoded objects of the watch events.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import random
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson
import structlog

from nodeops.common import jsonbytes, watchlines
from nodeops.common.gcpause import paused_gc
from nodeops.common.jsonbytes import dumps_exact
from nodeops.common.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from nodeops.kube import errors
from nodeops.kube.client import Client, EventLines
from nodeops.kube.metrics import (
    INFORMER_LIST_WATCH_FAILURES,
    INFORMER_LISTS,
    INFORMER_OBJECT_ERRORS,
    INFORMER_OBJECTS,
    INFORMER_WATCH_RESTARTS,
    READ_YOUR_WRITES_WAIT,
)
from nodeops.kube.resources import Resource

log = structlog.get_logger(__name__)

Obj = dict[str, Any]
Transform = Callable[[Obj], Obj]
IndexFunc = Callable[[Obj], Iterable[str]]
# Handlers are synchronous, like client-go's: they map events to work (enqueue keys), and must
# not block the informer. An exception in one is logged and does not stop the others.
AddHandler = Callable[[Obj], None]
UpdateHandler = Callable[[Obj, Obj], None]
DeleteHandler = Callable[[Obj], None]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# The annotation of the bookmark that ends a watch-list's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# Watch-lists broken in a row (each after some of its initial events) before one sync is done
# by a paginated list instead.
BROKEN_WATCH_LISTS = 3


def default_transform(obj: Obj) -> Obj:
    """Drop what no controller reads: managedFields and the last-applied annotation."""
    meta = obj.get("metadata")
    if meta:
        meta.pop("managedFields", None)
        ann = meta.get("annotations")
        if ann and LAST_APPLIED in ann:
            del ann[LAST_APPLIED]
    return obj


def metadata_projection(fields: Iterable[str] = ()) -> Transform:
    """A transform keeping `apiVersion`, `kind`, `metadata` and the named fields only.

    For watchers that need labels, owners and a few fields of objects that are large and many
    (pods at 150,000: `metadata_only=("spec.nodeName",)` keeps a pod at a tenth of its size).
    Fields are dotted paths; a field an object lacks is simply left out.
    """
    paths = []
    for f in fields:
        parts = tuple(f.split("."))
        if not f or any(not p for p in parts):
            raise ValueError(f"bad field path {f!r}: use dotted names such as spec.nodeName")
        if parts[0] in ("metadata", "apiVersion", "kind"):
            continue  # kept anyway
        paths.append(parts)

    def project(obj: Obj) -> Obj:
        out: Obj = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "metadata": obj.get("metadata") or {},
        }
        for path in paths:
            src: Any = obj
            for part in path:
                if not isinstance(src, dict) or part not in src:
                    break
                src = src[part]
            else:
                dst = out
                for part in path[:-1]:
                    dst = dst.setdefault(part, {})
                dst[path[-1]] = src
        return out

    return project


def _then(first: Transform | None, second: Transform) -> Transform:
    if first is None:
        return second

    def both(obj: Obj) -> Obj:
        return second(first(obj))

    return both


def object_key(obj: Obj) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects (client-go's MetaNamespaceKey)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def index_by_namespace(obj: Obj) -> list[str]:
    ns = (obj.get("metadata") or {}).get("namespace")
    return [ns] if ns else []


def index_pods_by_node(obj: Obj) -> list[str]:
    node = (obj.get("spec") or {}).get("nodeName")
    return [node] if node else []


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


@dataclass(slots=True)
class _Handlers:
    on_add: AddHandler | None = None
    on_update: UpdateHandler | None = None
    on_delete: DeleteHandler | None = None


@dataclass
class Backoff:
    """client-go's reflector backoff: 0.8 s doubling to 30 s, full jitter, reset when healthy."""

    initial: float = 0.8
    maximum: float = 30.0
    reset_after: float = 120.0
    _current: float = field(default=0.0, init=False)
    _last: float = field(default=0.0, init=False)

    def next(self, now: float) -> float:
        if self._current == 0.0 or now - self._last > self.reset_after:
            self._current = self.initial
        else:
            self._current = min(self.maximum, self._current * 2)
        self._last = now
        return self._current * (1 + random.random())


@dataclass(slots=True)
class _Sync:
    """A watch-list's initial state in progress: the keys it brought, how many events."""

    seen: set[str] = field(default_factory=set)
    events: int = 0
    done: bool = False


class _NoWatchList(errors.KubeError):
    """The server did not stream the initial state; `refused` if it never will for this
    resource (it answered with a plain watch), not just this time."""

    def __init__(self, message: str, *, refused: bool) -> None:
        super().__init__(message)
        self.refused = refused


class _IncompleteSync(errors.KubeError):
    """A watch-list ended before the bookmark that completes its initial state."""


class Informer:
    """List+watch of one resource (and optional selectors) into an indexed cache.

    Reads (`get`, `objects`, `by_index`, ...) raise `NotSynced` until the first list is in: an
    unsynced cache is not an empty one. A namespace given for a cluster-scoped resource, or
    none for a namespaced one, raises ValueError rather than answering "not found".
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
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
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
        """Wait until `condition()` holds, checked whenever the cache moves; False on timeout."""
        if condition():
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (condition, future)
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return condition()
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

    def _wake_waiters(self) -> None:
        for condition, future in list(self._waiters):
            if future.done():
                continue
            try:
                ok = condition()
            except Exception as exc:  # a waiter's bug is its own, not the informer's
                future.set_exception(exc)
                continue
            if ok:
                future.set_result(None)

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

    # ------------------------------------------------------------------ list / watch
    #
    # A sync (the first one, and each relist after 410 Gone) is a watch-list where the server
    # supports it: one watch with `sendInitialEvents=true` streams the objects as ADDED events
    # from the API server's watch cache, a BOOKMARK annotated `k8s.io/initial-events-end` says
    # the state is complete, and the same watch simply goes on. Where the server refuses it, the
    # sync is a paginated list followed by a watch from the list's resourceVersion. Either way,
    # objects are applied to the cache as they arrive (adds for new ones, updates for changed
    # ones) and those the sync did not see are deleted at its end, so a relist never empties a
    # cache that readers and waiters are using.
    #
    # Events are decoded in the groups the connection delivered them, with the cyclic garbage
    # collector paused (decoded JSON has no cycles; see `nodeops.common.gcpause`), and every
    # decoded object of a group is released before the collector is switched back on.

    async def _sync(self) -> AsyncGenerator[EventLines, None] | None:
        """Bring the cache to the server's current state; returns the watch to continue, if any."""
        INFORMER_LISTS.labels(self.resource.key).inc()
        refused = self.client.watch_list_refused.get(self.resource.key)
        if self.watch_list and refused is None and self._broken_watch_lists >= BROKEN_WATCH_LISTS:
            # Streams that keep breaking before their state is complete (a proxy that cuts long
            # responses, say) would never sync: short paged requests get through this time.
            self._log.warning(
                "watch-lists keep breaking; syncing by a paginated list this time",
                attempts=self._broken_watch_lists,
            )
        elif self.watch_list and refused is None:
            try:
                return await self._watch_list()
            except (errors.TooManyRequests, errors.Gone):
                raise  # retried as a watch-list: after a backoff, or at once for 410
            except (errors.ApiError, _NoWatchList) as exc:
                # As client-go: a watch-list the server answers with an error is replaced by a
                # paged list, so the informer makes progress whatever the server supports.
                # A refusal of the request itself (a server without WatchList answers 422
                # Invalid, or a plain watch instead) is remembered for the resource.
                if isinstance(exc, errors.BadRequest | errors.Invalid) or (
                    isinstance(exc, _NoWatchList) and exc.refused
                ):
                    self.client.watch_list_refused[self.resource.key] = str(exc)
                    self._log.warning(
                        "the API server refuses watch-list; syncing by paginated lists",
                        error=str(exc),
                    )
                elif isinstance(exc, errors.ApiError):
                    # The server answered the watch-list itself with an error: kube-apiserver
                    # does so (500, in an ERROR event) when its etcd cannot report watch
                    # progress (older than 3.4.31 / 3.5.13). It is tried again at the next
                    # sync, as client-go does, since the same code also means a passing fault.
                    self._log.warning(
                        "the API server answered a watch-list with an error; syncing by a "
                        "paginated list this time",
                        error=str(exc),
                        error_type=type(exc).__name__,
                    )
                else:
                    self._log.info(
                        "watch-list failed; syncing by a paginated list this time",
                        error=str(exc),
                        error_type=type(exc).__name__,
                    )
        await self._list()
        self.synced_by = "list"
        self._broken_watch_lists = 0
        self._mark_synced()
        return None

    async def _watch_list(self) -> AsyncGenerator[EventLines, None]:
        """Stream the initial state into the cache; returns the watch, open, at its end."""
        stream = self.client.watch_lines(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=random.randint(*self.watch_timeout),
            allow_bookmarks=True,
            send_initial_events=True,
        )
        sync = _Sync()
        try:
            async for batch in stream:
                with paused_gc:
                    self._apply_batch(batch, sync)
                if sync.done:
                    self._broken_watch_lists = 0
                    return stream
        except BaseException:
            await stream.aclose()
            if sync.events:
                self._broken_watch_lists += 1
            raise
        await stream.aclose()
        if sync.events:
            self._broken_watch_lists += 1
        if not sync.events:
            # client-go's "very short watch": nothing at all came; list instead this time.
            raise _NoWatchList("the watch-list ended without any event", refused=False)
        raise _IncompleteSync(
            f"watch-list of {self.resource.key}: the stream ended after {sync.events} events, "
            "before the end of the initial events"
        )

    def _open_watch(self) -> AsyncGenerator[EventLines, None]:
        return self.client.watch_lines(
            self.resource,
            self.namespace,
            resource_version=self.resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=random.randint(*self.watch_timeout),
            allow_bookmarks=True,
        )

    async def _follow(self, stream: AsyncGenerator[EventLines, None]) -> None:
        """Apply a watch's events until the server ends it."""
        async for batch in stream:
            with paused_gc:
                self._apply_batch(batch, None)
        INFORMER_OBJECTS.labels(self.resource.key).set(len(self._items))

    def _apply_batch(self, batch: EventLines, sync: _Sync | None) -> None:
        """Apply one group of event lines: to the sync in progress until it is done, then live.

        Runs without awaiting, so the decoded objects it makes are all gone when it returns.
        """
        key = self.resource.key
        on_bytes = self.transform is default_transform  # done on the bytes: see `_compact`
        for line in batch:
            obj: Any = None
            raw: memoryview | None = None
            compact: bytes | None = None
            found = watchlines.object_event(line)
            try:
                if found is not None:
                    etype, raw = found
                    if on_bytes:
                        compact = self._compact(raw)
                    try:
                        obj = orjson.loads(compact if compact is not None else raw)
                    except orjson.JSONDecodeError:
                        if compact is not None:
                            raise
                        raw = None  # not the object alone: decode the event whole
                if obj is None:
                    etype, obj = watchlines.decode(line, key)
            except orjson.JSONDecodeError as exc:
                raise errors.KubeError(f"watch {key}: an event is not JSON: {exc}") from exc
            if not isinstance(obj, dict):
                raise errors.KubeError(f"watch {key}: a {etype} event carries no object")
            if sync is not None and not sync.done:
                self._apply_initial(sync, etype, obj, raw, compact)
            else:
                self._apply_event(etype, obj, raw, compact)

    def _apply_event(
        self, etype: str, obj: Obj, raw: memoryview | None, compact: bytes | None = None
    ) -> None:
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if etype == "BOOKMARK":
            if rv:
                self.resource_version = rv
            if self.failures:
                self._recovered()
            return
        if "kind" not in obj:
            obj["kind"] = self.resource.kind
            obj["apiVersion"] = self.resource.api_version
            raw = None
        if etype in ("ADDED", "MODIFIED"):
            accepted = self._accept(obj, raw, compact)
            if accepted is not None and self._handlers:
                obj, _, old = accepted
                if old is None:
                    self._dispatch_add(obj)
                else:
                    self._dispatch_update(old, obj)
        elif etype == "DELETED":
            self._remove(object_key(obj))
            if self._handlers:
                self._dispatch_delete(self._transformed_for_delete(obj))
        if rv:
            self.resource_version = rv
        if self.failures:
            self._recovered()

    def _apply_initial(
        self,
        sync: _Sync,
        etype: str,
        obj: Obj,
        raw: memoryview | None,
        compact: bytes | None = None,
    ) -> None:
        """One event of a watch-list's initial state (or of what changed while it streamed)."""
        meta = obj.get("metadata") or {}
        if etype == "BOOKMARK":
            if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) != "true":
                # kube-apiserver sends no other bookmark before this one: the server answered
                # with a plain watch, which would never say when the state is complete.
                raise _NoWatchList(
                    "the server answered a watch-list with a plain watch", refused=True
                )
            self._finish_sync(sync.seen, meta.get("resourceVersion") or "")
            sync.done = True
            self.synced_by = "watch-list"
            self._recovered()
            self._mark_synced()
            return
        sync.events += 1
        if "kind" not in obj:
            obj["kind"] = self.resource.kind
            obj["apiVersion"] = self.resource.api_version
            raw = None
        key = object_key(obj)
        if etype in ("ADDED", "MODIFIED"):
            sync.seen.add(key)  # a skipped object keeps what the cache had
            accepted = self._accept(obj, raw, compact)
            if accepted is not None and self._handlers:
                self._dispatch_synced(*accepted)
        elif etype == "DELETED":
            sync.seen.discard(key)
            if self._remove(key) is not None and self._handlers:
                self._dispatch_delete(self._transformed_for_delete(obj))

    def _dispatch_synced(self, obj: Obj, new: bytes, old: bytes | None) -> None:
        """Handlers' view of an object a sync brought: new, changed, or (no call) the same."""
        if old is None:
            self._dispatch_add(obj)
        elif old != new:
            previous = orjson.loads(old)
            if (previous.get("metadata") or {}).get("resourceVersion") != (
                obj.get("metadata") or {}
            ).get("resourceVersion"):
                self._dispatch_update(old, obj, previous)

    def _finish_sync(self, seen: set[str], resource_version: str) -> None:
        """End a sync: what it did not see is gone from the server, and the cache is at its
        resourceVersion."""
        deletes = any(h.on_delete is not None for h in self._handlers)
        for key in [k for k in self._items if k not in seen]:
            old = self._remove(key)
            if old is not None and deletes:
                self._dispatch_delete(orjson.loads(old))
        if resource_version:
            self.resource_version = resource_version
        INFORMER_OBJECTS.labels(self.resource.key).set(len(self._items))
        _release_free_memory()

    def _mark_synced(self) -> None:
        if not self._synced.is_set():
            self._synced.set()
            self._log.debug("informer synced", objects=len(self._items), by=self.synced_by)

    async def _list(self) -> None:
        """Paginated list, applied page by page; the next page is fetched while this one is
        decoded, so the server's work on it overlaps ours."""
        seen: set[str] = set()
        rv = ""
        fetch: asyncio.Future[bytes] | None = asyncio.ensure_future(self._page(None))
        try:
            while fetch is not None:
                payload = await fetch
                fetch = None
                # The continue token is in the page's head: ask for the next page first.
                head = _list_head(payload)
                token = head.get("continue") if head is not None else None
                if token:
                    fetch = asyncio.ensure_future(self._page(token))
                with paused_gc:
                    meta = self._apply_page(payload, seen)
                del payload
                if meta.get("continue") != token:  # the head said otherwise: trust the page
                    if fetch is not None:
                        fetch.cancel()
                        fetch.add_done_callback(_retrieved)
                    token = meta.get("continue")
                    fetch = asyncio.ensure_future(self._page(token)) if token else None
                rv = meta.get("resourceVersion") or rv
        finally:
            if fetch is not None:
                fetch.cancel()
                fetch.add_done_callback(_retrieved)
        self._finish_sync(seen, rv)

    async def _page(self, token: str | None) -> bytes:
        return await self.client.list_page(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            limit=self.page_size,
            continue_token=token,
        )

    def _apply_page(self, payload: bytes, seen: set[str]) -> dict[str, Any]:
        """Apply one list page; returns its metadata. The decoded objects are gone on return.

        The page is split into its items undecoded, and each item decoded on its own, as a
        watch event is: decoding 500 objects at once costs two to four times as much per
        object (they outgrow the processor's caches) and holds them all at once.
        """
        split = jsonbytes.list_items(payload)
        if split is None:  # not a list as kube writes one: decode it whole
            page = orjson.loads(payload)
            for item in page.get("items") or ():
                self._apply_item(item, None, seen)
            whole: dict[str, Any] = page.get("metadata") or {}
            return whole
        top, items = split
        on_bytes = self.transform is default_transform  # done on the bytes: see `_compact`
        for raw in items:
            compact = self._compact(raw) if on_bytes else None
            item = orjson.loads(compact if compact is not None else memoryview(raw))
            self._apply_item(item, compact, seen)
        meta = orjson.loads(memoryview(top["metadata"])) if "metadata" in top else None
        if meta and not isinstance(meta, dict):
            raise errors.KubeError(
                f"list {self.resource.key}: the page's metadata is not an object"
            )
        return meta or {}

    def _apply_item(self, item: Any, compact: bytes | None, seen: set[str]) -> None:
        if "kind" not in item:
            item["kind"] = self.resource.kind
            item["apiVersion"] = self.resource.api_version
        seen.add(object_key(item))  # a skipped object keeps what the cache had
        accepted = self._accept(item, None, compact)
        if accepted is not None and self._handlers:
            self._dispatch_synced(*accepted)

    async def run(self) -> None:
        """List and watch until cancelled; never returns on errors, it backs off and retries."""
        loop = asyncio.get_running_loop()
        need_list = True
        resync = asyncio.create_task(self._resync_loop()) if self.resync_period else None
        try:
            while True:
                stream: AsyncGenerator[EventLines, None] | None = None
                try:
                    if need_list:
                        stream = await self._sync()
                        need_list = False
                    if stream is None:
                        stream = self._open_watch()
                    await self._follow(stream)
                    INFORMER_WATCH_RESTARTS.labels(self.resource.key, "timeout").inc()
                    self._recovered()
                except errors.Gone:
                    INFORMER_WATCH_RESTARTS.labels(self.resource.key, "expired").inc()
                    self._log.info(
                        "watch expired, relisting", resource_version=self.resource_version
                    )
                    need_list = True
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # Whatever went wrong (the API, the connection, a malformed event, a bug on
                    # our side), the cache must not freeze: back off, and relist unless it was
                    # only the connection.
                    self.last_error = exc
                    self.failures += 1
                    INFORMER_WATCH_RESTARTS.labels(self.resource.key, "error").inc()
                    INFORMER_LIST_WATCH_FAILURES.labels(self.resource.key, _error_kind(exc)).inc()
                    delay = self.backoff.next(loop.time())
                    expected = isinstance(exc, errors.KubeError | OSError)
                    self._log.warning(
                        "list/watch failed, retrying",
                        error=str(exc) or type(exc).__name__,
                        error_type=type(exc).__name__,
                        failures=self.failures,
                        retry_in=round(delay, 2),
                        exc_info=not expected,
                    )
                    if not expected or (
                        isinstance(exc, errors.ApiError) and exc.code in (400, 401, 403, 404)
                    ):
                        need_list = True
                    await asyncio.sleep(delay)
                finally:
                    if stream is not None:
                        await stream.aclose()
        finally:
            if resync is not None:
                resync.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await resync

    async def _resync_loop(self) -> None:
        assert self.resync_period is not None
        while True:
            await asyncio.sleep(self.resync_period)
            if not self._synced.is_set():
                continue
            for raw in list(self._items.values()):
                obj = orjson.loads(raw)
                for h in self._handlers:
                    if h.on_update is not None:
                        _call(h.on_update, obj, obj)

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name=f"informer:{self.resource.key}")
        return self._task

    async def stop(self) -> None:
        """Stop listing and watching; the cache keeps what it holds.

        A task that had already died is not re-raised here: its end was reported (and, under a
        manager, handled) when it happened.
        """
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            self._log.debug("stopped an informer that had failed", error=str(task.exception()))


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
        waits = [inf.wait_synced() for inf in self._informers.values()]
        if not waits:
            return True
        try:
            await asyncio.wait_for(asyncio.gather(*waits), timeout)
        except TimeoutError:
            return False
        return True

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
            raise errors.CacheLagging(
                f"{resource.key} {meta.get('name', '')!r} was written, but the cache did not show "
                f"the write within {self.read_your_writes_timeout}s"
            )


def _reached(inf: Informer, wanted: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return int(inf.resource_version or 0) >= wanted
        except ValueError:
            return True

    return check


def _gone(inf: Informer, key: str, uid: str | None) -> Callable[[], bool]:
    def check() -> bool:
        raw = inf._items.get(key)
        if raw is None:
            return True
        return bool(uid) and (orjson.loads(raw).get("metadata") or {}).get("uid") != uid

    return check


def _error_kind(exc: BaseException) -> str:
    """The `error` label of a failed list/watch: the HTTP code, or the exception's type."""
    if isinstance(exc, errors.ApiError):
        return str(exc.code)
    return type(exc).__name__


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


def _list_head(payload: bytes) -> dict[str, Any] | None:
    """A list page's `metadata` from the bytes before its items, or None if they are not there.

    kube-apiserver writes `{"kind":..,"apiVersion":..,"metadata":{..},"items":[..]}`. The head
    closed with one brace decodes only if the `,"items":` found is a member of the top-level
    object (at any other depth one brace cannot close what is open), so a head that decodes is
    the page's own, and one that does not falls back to decoding the page first.
    """
    end = payload.find(b',"items":')
    if end < 0:
        return None
    try:
        head = orjson.loads(payload[:end] + b"}")
    except orjson.JSONDecodeError:
        return None
    meta = head.get("metadata") if isinstance(head, dict) else None
    return meta if isinstance(meta, dict) else None


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Done-callback of an abandoned prefetch: its error, if any, is not worth reporting."""
    if not task.cancelled():
        task.exception()


def _release_free_memory() -> None:
    """Hand the decoded list pages' freed heap back to the OS after a (re)list.

    A list of 150,000 objects passes gigabytes of short-lived dicts through the allocator;
    without this the process keeps that peak as resident memory it will never use again.
    """
    if _malloc_trim is not None:
        _malloc_trim(0)


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    return trim if callable(trim) else None


_malloc_trim = _load_malloc_trim()


def _call(fn: Callable[..., None], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("informer event handler failed")
