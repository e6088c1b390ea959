"""Controllers: informer events become requests in a workqueue; workers reconcile them.

The result handling is controller-runtime's: an exception is retried with the rate limiter
(per-item exponential backoff), a `TerminalError` is not retried, `Result(requeue_after=...)`
schedules the next look, and a request is never reconciled by two workers at once. Reconcilers
are level-based: they receive only a name and read the current state themselves.

Sources are declared the way controller-runtime's builder declares them (`for_`, `owns`,
`watches`), so the controller knows which caches it reads: it waits for them to sync before
its first reconcile, because an unsynced cache answers "not found" for objects that exist.

Each reconcile gets a `ReconcileContext`. Its `stopping` event is set the moment the process is
told to stop or loses its lease, and `ensure_may_act` raises `Stopping` from then on; a
reconciler calls it right before every step it cannot take back (terminate an instance, delete
a VM), so nothing irreversible starts after SIGTERM or after another replica may have taken over.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from nodeops.kube.errors import CacheSyncTimeout, KubeError
from nodeops.kube.informer import Informer, Obj, wait_all_synced
from nodeops.kube.metrics import (
    ACTIVE_WORKERS,
    MAX_CONCURRENT_RECONCILES,
    RECONCILE_ERRORS,
    RECONCILE_PANICS,
    RECONCILE_TIME,
    RECONCILE_TIMEOUTS,
    RECONCILE_TOTAL,
    TERMINAL_RECONCILE_ERRORS,
)
from nodeops.kube.workqueue import ShutDown, WorkQueue

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Request:
    """What to reconcile: a name (and namespace). Never an object: state is read fresh."""

    name: str
    namespace: str | None = None

    @classmethod
    def for_object(cls, obj: Obj) -> Request:
        meta = obj.get("metadata") or {}
        return cls(meta.get("name", ""), meta.get("namespace") or None)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True, slots=True)
class Result:
    requeue: bool = False
    requeue_after: float | None = None


class ReconcileError(Exception):
    """A failure the reconciler expected (a drain blocked by a budget, a cloud call refused).

    Retried with backoff and counted as an error, but not as a panic: the panic counter is for
    bugs. Controllers derive their domain errors from it.
    """


class TerminalError(ReconcileError):
    """A failure retrying cannot fix (bad input): logged and counted, never requeued."""


class Stopping(Exception):
    """The reconciler may no longer act: the process is stopping or leadership is not held.

    Neither success nor error for the controller: the request is not requeued and nothing is
    counted as failed; the next leader picks the object up from what is stored in the cluster.
    """


def _always_leading() -> bool:
    return True


@dataclass(slots=True)
class ReconcileContext:
    """What a reconcile may know about its own run: whether it may still act on the cluster."""

    stopping: asyncio.Event
    controller: str = ""
    reconcile_id: str = ""
    leading: Callable[[], bool] = field(default=_always_leading)
    log: Any = None

    def may_act(self) -> bool:
        """False once the process is stopping, or when the lease is not (verifiably) held."""
        return not self.stopping.is_set() and self.leading()

    def ensure_may_act(self, action: str) -> None:
        """Raise `Stopping` unless `may_act()`; call it right before each irreversible step."""
        if self.stopping.is_set():
            raise Stopping(f"not starting {action}: stopping")
        if not self.leading():
            raise Stopping(f"not starting {action}: leadership is not held")


class Reconciler(Protocol):
    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None: ...


Mapper = Callable[[Obj], Iterable[Request]]
UpdatePredicate = Callable[[Obj, Obj], bool]


# ---------------------------------------------------------------------- predicates


def generation_changed(old: Obj, new: Obj) -> bool:
    return (old.get("metadata") or {}).get("generation") != (new.get("metadata") or {}).get(
        "generation"
    )


def labels_changed(old: Obj, new: Obj) -> bool:
    return (old.get("metadata") or {}).get("labels") != (new.get("metadata") or {}).get("labels")


def annotations_changed(old: Obj, new: Obj) -> bool:
    return (old.get("metadata") or {}).get("annotations") != (new.get("metadata") or {}).get(
        "annotations"
    )


def any_of(*predicates: UpdatePredicate) -> UpdatePredicate:
    def check(old: Obj, new: Obj) -> bool:
        return any(p(old, new) for p in predicates)

    return check


# ---------------------------------------------------------------------- mappers

# Built-in kinds that are cluster-scoped, so an owner reference to one maps to a request without
# a namespace even when the owned object is namespaced (a pod owned by its Node).
CLUSTER_SCOPED_KINDS: frozenset[tuple[str, str]] = frozenset(
    {
        ("", "Node"),
        ("", "Namespace"),
        ("", "PersistentVolume"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "VolumeAttachment"),
        ("storage.k8s.io", "CSINode"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("scheduling.k8s.io", "PriorityClass"),
    }
)


def to_self(obj: Obj) -> list[Request]:
    return [Request.for_object(obj)]


def to_controller_owner(kind: str, group: str = "", *, namespaced: bool | None = None) -> Mapper:
    """Map an object to its controlling owner of `kind` (controller-runtime's Owns).

    The request carries the child's namespace only when the owner is namespaced: a pod owned by
    a Node maps to the node, not to `namespace/node`. `namespaced=None` decides by the kind:
    the built-in cluster-scoped kinds are known, anything else is taken to be namespaced.
    """
    cluster_scoped = (
        not namespaced if namespaced is not None else (group, kind) in CLUSTER_SCOPED_KINDS
    )

    def mapper(obj: Obj) -> list[Request]:
        meta = obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or ():
            api_group = str(ref.get("apiVersion", "")).rpartition("/")[0]
            if ref.get("controller") and ref.get("kind") == kind and api_group == group:
                ns = None if cluster_scoped else (meta.get("namespace") or None)
                return [Request(ref["name"], ns)]
        return []

    return mapper


# ---------------------------------------------------------------------- controller


class Controller:
    """Reconciles the requests its sources produce, with at most N reconciles at once.

    Build it, declare its sources, hand it to a manager::

        Controller("widgets", reconciler, max_concurrent_reconciles=4)
            .for_(widgets)
            .owns(configmaps)
            .watches(nodes, node_to_widgets, update_predicate=labels_changed)

    A controller run on its own (tests) is started with `start()` and stopped with `stop()`.
    """

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        max_concurrent_reconciles: int = 1,
        reconcile_timeout: float | None = None,
        sync_timeout: float = 120.0,
        queue: WorkQueue[Request] | None = None,
    ) -> None:
        self.name = name
        self.reconciler = reconciler
        self.max_concurrent_reconciles = max(1, max_concurrent_reconciles)
        self.reconcile_timeout = reconcile_timeout
        self.sync_timeout = sync_timeout
        self.queue: WorkQueue[Request] = queue or WorkQueue(name)
        self.sources: list[Informer] = []
        self.stopping = asyncio.Event()
        self.leading: Callable[[], bool] = _always_leading
        self._primary: Informer | None = None
        self._task: asyncio.Task[None] | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._log = log.bind(controller=name)
        self._active = 0
        for result in ("success", "error", "requeue", "requeue_after"):
            RECONCILE_TOTAL.labels(name, result).inc(0)
        RECONCILE_ERRORS.labels(name).inc(0)
        TERMINAL_RECONCILE_ERRORS.labels(name).inc(0)
        RECONCILE_PANICS.labels(name).inc(0)
        RECONCILE_TIMEOUTS.labels(name).inc(0)
        MAX_CONCURRENT_RECONCILES.labels(name).set(self.max_concurrent_reconciles)
        ACTIVE_WORKERS.labels(name).set(0)

    # ------------------------------------------------------------------ sources

    def for_(
        self, informer: Informer, *, update_predicate: UpdatePredicate | None = None
    ) -> Controller:
        """The objects this controller reconciles: each event enqueues the object itself."""
        if self._primary is not None:
            raise ValueError(f"controller {self.name}: for_ was already given")
        self._primary = informer
        return self._source(informer, to_self, update_predicate, True, True)

    def owns(
        self,
        informer: Informer,
        owner_kind: str | None = None,
        owner_group: str | None = None,
        *,
        owner_namespaced: bool | None = None,
        update_predicate: UpdatePredicate | None = None,
    ) -> Controller:
        """Objects this controller creates: each event enqueues their controlling owner.

        The owner defaults to the `for_` resource (kind, group and scope), as in
        controller-runtime. For another owner kind the scope is looked up among the built-in
        kinds; pass `owner_namespaced` for a custom cluster-scoped owner.
        """
        primary = self._primary.resource if self._primary is not None else None
        if owner_kind is None:
            if primary is None:
                raise ValueError(
                    f"controller {self.name}: owns() without an owner kind needs for_() first"
                )
            owner_kind, owner_group = primary.kind, primary.group
        group = owner_group or ""
        if owner_namespaced is None and primary is not None:
            if (primary.kind, primary.group) == (owner_kind, group):
                owner_namespaced = primary.namespaced
        if owner_namespaced is None and (group, owner_kind) in CLUSTER_SCOPED_KINDS:
            owner_namespaced = False
        if owner_namespaced is None:
            owner_namespaced = informer.resource.namespaced
        mapper = to_controller_owner(owner_kind, group, namespaced=owner_namespaced)
        return self._source(informer, mapper, update_predicate, True, True)

    def watches(
        self,
        informer: Informer,
        mapper: Mapper,
        *,
        update_predicate: UpdatePredicate | None = None,
        on_create: bool = True,
        on_delete: bool = True,
    ) -> Controller:
        """Any other source: `mapper` turns each event's object into requests.

        On an update both the old and the new object are mapped (a pod moved from node a to
        node b concerns both nodes).
        """
        return self._source(informer, mapper, update_predicate, on_create, on_delete)

    def _source(
        self,
        informer: Informer,
        mapper: Mapper,
        update_predicate: UpdatePredicate | None,
        on_create: bool,
        on_delete: bool,
    ) -> Controller:
        def enqueue(obj: Obj) -> None:
            for req in mapper(obj):
                self.queue.add(req)

        def updated(old: Obj, new: Obj) -> None:
            if update_predicate is None or update_predicate(old, new):
                enqueue(new)
                if mapper is not to_self:
                    enqueue(old)

        informer.add_handler(
            on_add=enqueue if on_create else None,
            on_update=updated,
            on_delete=enqueue if on_delete else None,
        )
        if informer not in self.sources:
            self.sources.append(informer)
        return self

    # ------------------------------------------------------------------ run

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The controller's run task (sync wait, then workers) once started."""
        return self._task

    def start(self) -> asyncio.Task[None]:
        """Start: start sources not yet running, wait for their sync, then run the workers.

        The returned task ends when the workers do (after `stop`), or raises
        `CacheSyncTimeout` when the sources did not sync within `sync_timeout`.
        """
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"controller:{self.name}")
        return self._task

    async def wait_for_sources(self) -> None:
        """Return once every source has synced; raise `CacheSyncTimeout` naming the laggards."""
        for inf in self.sources:
            if not inf.started:
                inf.start()
        if not await wait_all_synced(self.sources, self.sync_timeout):
            laggards = [inf for inf in self.sources if not inf.has_synced]
            described = ", ".join(
                inf.resource.key + (f" ({inf.last_error})" if inf.last_error else "")
                for inf in laggards
            )
            raise CacheSyncTimeout(
                f"controller {self.name}: caches did not sync within {self.sync_timeout}s: "
                f"{described}"
            )

    async def _run(self) -> None:
        await self.wait_for_sources()
        if self.stopping.is_set():
            return
        self._workers = [t for t in self._workers if not t.done()]
        for i in range(self.max_concurrent_reconciles):
            self._workers.append(
                asyncio.create_task(self._worker(), name=f"controller:{self.name}:{i}")
            )
        self._log.info("starting workers", workers=self.max_concurrent_reconciles)
        try:
            await asyncio.gather(*self._workers)
        finally:
            for task in self._workers:
                task.cancel()

    def request_stop(self) -> None:
        """Stop handing out work now; in-flight reconciles see `ctx.stopping` set."""
        self.stopping.set()
        self.queue.shutdown()

    async def stop(self, drain_timeout: float = 10.0) -> None:
        """Stop taking work at once, let in-flight reconciles finish (bounded), then cancel."""
        self.request_stop()
        workers = [t for t in self._workers if not t.done()]
        if workers:
            _, pending = await asyncio.wait(workers, timeout=drain_timeout)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self._end_task()

    def cancel(self) -> None:
        """Stop at once: leadership was lost, nothing may act on the cluster any more."""
        self.request_stop()
        for task in self._workers:
            task.cancel()
        if self._task is not None:
            self._task.cancel()

    async def _end_task(self) -> None:
        task = self._task
        if task is None:
            return
        if not task.done():
            task.cancel()
        # A task that had died is not re-raised here: its end was reported when it happened.
        await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            self._log.debug("stopped a controller that had failed", error=str(task.exception()))
        self._workers.clear()

    async def _worker(self) -> None:
        while True:
            try:
                req = await self.queue.get()
            except ShutDown:
                return
            if self.stopping.is_set():
                # Queued work is not handed out once stopping: the next leader (or the next
                # start) reconciles it from what is stored.
                self.queue.done(req)
                return
            try:
                await self._process(req)
            finally:
                self.queue.done(req)

    async def _process(self, req: Request) -> None:
        reconcile_id = uuid.uuid4().hex[:12]
        bound = self._log.bind(object=str(req), reconcile_id=reconcile_id)
        structlog.contextvars.bind_contextvars(
            controller=self.name, object=str(req), reconcile_id=reconcile_id
        )
        ctx = ReconcileContext(
            stopping=self.stopping,
            controller=self.name,
            reconcile_id=reconcile_id,
            leading=self.leading,
            log=bound,
        )
        self._active += 1
        ACTIVE_WORKERS.labels(self.name).set(self._active)
        started = time.perf_counter()
        timed_out = False
        try:
            if self.reconcile_timeout is not None:
                async with asyncio.timeout(self.reconcile_timeout) as deadline:
                    try:
                        result = await self.reconciler.reconcile(req, ctx)
                    finally:
                        timed_out = deadline.expired()
            else:
                result = await self.reconciler.reconcile(req, ctx)
        except Stopping as exc:
            self.queue.forget(req)
            bound.info("reconcile stopped before acting", reason=str(exc))
        except TerminalError as exc:
            TERMINAL_RECONCILE_ERRORS.labels(self.name).inc()
            RECONCILE_ERRORS.labels(self.name).inc()
            RECONCILE_TOTAL.labels(self.name, "error").inc()
            self.queue.forget(req)
            bound.error("reconcile failed permanently", error=str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            RECONCILE_ERRORS.labels(self.name).inc()
            RECONCILE_TOTAL.labels(self.name, "error").inc()
            expected = isinstance(exc, KubeError | ReconcileError)
            if timed_out:
                RECONCILE_TIMEOUTS.labels(self.name).inc()
            elif not expected:
                RECONCILE_PANICS.labels(self.name).inc()
            if not self.stopping.is_set():
                self.queue.add_rate_limited(req)
            if timed_out:
                bound.error("reconcile timed out", timeout=self.reconcile_timeout)
            else:
                bound.warning(
                    "reconcile failed, will retry",
                    error=str(exc) or type(exc).__name__,
                    error_type=type(exc).__name__,
                    retries=self.queue.num_requeues(req),
                    exc_info=not expected,
                )
        else:
            self._handle_result(req, result)
        finally:
            took = time.perf_counter() - started
            RECONCILE_TIME.labels(self.name).observe(took)
            # At debug level, every reconcile and its duration: where a slow roll's time went.
            bound.debug("reconciled", seconds=round(took, 4))
            self._active -= 1
            ACTIVE_WORKERS.labels(self.name).set(self._active)
            structlog.contextvars.unbind_contextvars("controller", "object", "reconcile_id")

    def _handle_result(self, req: Request, result: Result | None) -> None:
        if result is not None and result.requeue_after:
            self.queue.forget(req)
            self.queue.add_after(req, result.requeue_after)
            RECONCILE_TOTAL.labels(self.name, "requeue_after").inc()
        elif result is not None and result.requeue:
            self.queue.add_rate_limited(req)
            RECONCILE_TOTAL.labels(self.name, "requeue").inc()
        else:
            self.queue.forget(req)
            RECONCILE_TOTAL.labels(self.name, "success").inc()
