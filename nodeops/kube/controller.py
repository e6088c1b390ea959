"""Controllers: informer events become requests in a workqueue; workers reconcile them.

The result handling is controller-runtime's: an exception is retried with the rate limiter
(per-item exponential backoff), a `TerminalError` is not retried, `Result(requeue_after=...)`
schedules the next look, and a request is never reconciled by two workers at once. Reconcilers
are level-based: they receive only a name and read the current state themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import structlog

from nodeops.kube.errors import KubeError
from nodeops.kube.informer import Informer, Obj
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


class TerminalError(Exception):
    """A failure retrying cannot fix (bad input): logged and counted, never requeued."""


class Reconciler(Protocol):
    async def reconcile(self, request: Request) -> Result | None: ...


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


def to_self(obj: Obj) -> list[Request]:
    return [Request.for_object(obj)]


def to_controller_owner(kind: str, group: str = "") -> Mapper:
    """Map an object to its controlling owner of `kind` (controller-runtime's Owns)."""

    def mapper(obj: Obj) -> list[Request]:
        meta = obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or ():
            api_group = str(ref.get("apiVersion", "")).rpartition("/")[0]
            if ref.get("controller") and ref.get("kind") == kind and api_group == group:
                return [Request(ref["name"], meta.get("namespace") or None)]
        return []

    return mapper


# ---------------------------------------------------------------------- controller


class Controller:
    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        max_concurrent_reconciles: int = 1,
        reconcile_timeout: float | None = None,
        queue: WorkQueue[Request] | None = None,
    ) -> None:
        self.name = name
        self.reconciler = reconciler
        self.max_concurrent_reconciles = max(1, max_concurrent_reconciles)
        self.reconcile_timeout = reconcile_timeout
        self.queue: WorkQueue[Request] = queue or WorkQueue(name)
        self.informers: list[Informer] = []
        self._workers: list[asyncio.Task[None]] = []
        self._log = log.bind(controller=name)
        self._stopping = False
        self._active = 0
        for result in ("success", "error", "requeue", "requeue_after"):
            RECONCILE_TOTAL.labels(name, result).inc(0)
        RECONCILE_ERRORS.labels(name).inc(0)
        TERMINAL_RECONCILE_ERRORS.labels(name).inc(0)
        RECONCILE_PANICS.labels(name).inc(0)
        MAX_CONCURRENT_RECONCILES.labels(name).set(self.max_concurrent_reconciles)
        ACTIVE_WORKERS.labels(name).set(0)

    def watch(
        self,
        informer: Informer,
        mapper: Mapper = to_self,
        *,
        update_predicate: UpdatePredicate | None = None,
        on_create: bool = True,
        on_delete: bool = True,
    ) -> Controller:
        """Enqueue the requests `mapper` derives from each event of `informer`."""

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
        self.informers.append(informer)
        return self

    def owns(self, informer: Informer, owner_kind: str, owner_group: str = "") -> Controller:
        return self.watch(informer, to_controller_owner(owner_kind, owner_group))

    # ------------------------------------------------------------------ run

    def start(self) -> None:
        self._stopping = False
        for i in range(self.max_concurrent_reconciles):
            self._workers.append(
                asyncio.create_task(self._worker(), name=f"controller:{self.name}:{i}")
            )
        self._log.info("starting workers", workers=self.max_concurrent_reconciles)

    async def stop(self, drain_timeout: float = 10.0) -> None:
        """Stop taking work, let in-flight reconciles finish (bounded), then cancel."""
        self._stopping = True
        self.queue.shutdown()
        if self._workers:
            _, pending = await asyncio.wait(self._workers, timeout=drain_timeout)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._workers.clear()

    def cancel(self) -> None:
        """Stop at once: leadership was lost, nothing may act on the cluster any more."""
        self._stopping = True
        self.queue.shutdown()
        for task in self._workers:
            task.cancel()
        self._workers.clear()

    async def _worker(self) -> None:
        while True:
            try:
                req = await self.queue.get()
            except ShutDown:
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
        self._active += 1
        ACTIVE_WORKERS.labels(self.name).set(self._active)
        started = time.perf_counter()
        try:
            coro = self.reconciler.reconcile(req)
            if self.reconcile_timeout is not None:
                result = await asyncio.wait_for(coro, self.reconcile_timeout)
            else:
                result = await coro
        except TerminalError as exc:
            TERMINAL_RECONCILE_ERRORS.labels(self.name).inc()
            RECONCILE_ERRORS.labels(self.name).inc()
            RECONCILE_TOTAL.labels(self.name, "error").inc()
            self.queue.forget(req)
            bound.error("reconcile failed permanently", error=str(exc))
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            RECONCILE_TIMEOUTS.labels(self.name).inc()
            RECONCILE_ERRORS.labels(self.name).inc()
            RECONCILE_TOTAL.labels(self.name, "error").inc()
            if not self._stopping:
                self.queue.add_rate_limited(req)
            bound.error("reconcile timed out", timeout=self.reconcile_timeout)
        except Exception as exc:
            RECONCILE_ERRORS.labels(self.name).inc()
            RECONCILE_TOTAL.labels(self.name, "error").inc()
            if not isinstance(exc, KubeError):
                RECONCILE_PANICS.labels(self.name).inc()
            if not self._stopping:
                self.queue.add_rate_limited(req)
            bound.warning(
                "reconcile failed, will retry",
                error=str(exc) or type(exc).__name__,
                error_type=type(exc).__name__,
                retries=self.queue.num_requeues(req),
                exc_info=not isinstance(exc, KubeError),
            )
        else:
            self._handle_result(req, result)
        finally:
            RECONCILE_TIME.labels(self.name).observe(time.perf_counter() - started)
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
