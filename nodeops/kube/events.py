"""Kubernetes Events (events.k8s.io/v1) about the objects nodeops acts on.

Recording never blocks or fails a reconcile: events go through a bounded queue to a background
sender. An event that cannot be recorded (the queue is full, the recorder has stopped, the API
refused it) is never dropped silently: it is counted in `nodeops_events_dropped_total{reason}`
and logged as a warning (at most every few seconds, with the running count). The manager owns the
recorder's lifecycle: `manager.events` is started before controllers and flushed after them. Repeats of the same event (same object, reason, action, type and note) are folded into
the first one's `series` instead of creating new objects, as client-go's event recorder does, so
a drain retrying every few seconds does not flood the namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from nodeops.common.looptime import loop_time
from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.metrics import EVENTS_DROPPED
from nodeops.kube.resources import EVENTS

log = structlog.get_logger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
_SERIES_WINDOW = 6 * 60.0  # a repeat within this many seconds joins the series
_MAX_NOTE = 1024
_DROP_LOG_INTERVAL = 5.0


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Series:
    name: str
    namespace: str
    count: int
    last_seen: float
    pending: bool = False


class EventRecorder:
    def __init__(
        self,
        client: Client,
        controller: str,
        instance: str,
        *,
        queue_size: int = 1000,
    ) -> None:
        self.client = client
        self.controller = controller
        self.instance = instance
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(queue_size)
        self._series: dict[tuple[str, ...], _Series] = {}
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.dropped = 0
        self._last_drop_log = -_DROP_LOG_INTERVAL

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start sending; events recorded before are queued and sent now."""
        self._stopped = False
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"events:{self.controller}")

    async def flush(self, timeout: float = 2.0) -> bool:
        """Wait until every queued event was sent (or failed); False on timeout."""
        if not self.running:
            return self._queue.empty()
        try:
            await asyncio.wait_for(self._queue.join(), timeout)
        except TimeoutError:
            return False
        return True

    async def stop(self, flush_timeout: float = 2.0) -> None:
        """Send what is queued (bounded), then stop; later events are counted as dropped."""
        self._stopped = True
        if self._task is None:
            self._drop_queued("stopped")
            return
        if not await self.flush(flush_timeout):
            log.warning("events not flushed in time", pending=self._queue.qsize())
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        self._drop_queued("stopped")

    def _drop_queued(self, reason: str) -> None:
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
            self._dropped(reason)

    def _dropped(self, reason: str, error: str = "") -> None:
        self.dropped += 1
        EVENTS_DROPPED.labels(reason).inc()
        now = loop_time()
        if now - self._last_drop_log >= _DROP_LOG_INTERVAL:
            self._last_drop_log = now
            log.warning(
                "event not recorded", reason=reason, error=error, dropped_total=self.dropped
            )

    def event(
        self,
        regarding: dict[str, Any],
        type_: str,
        reason: str,
        action: str,
        note: str,
    ) -> None:
        """Record an event about `regarding` (an object or an ObjectReference-like dict)."""
        ref = _reference(regarding)
        note = note[:_MAX_NOTE]
        key = (
            ref.get("uid", ""),
            ref.get("kind", ""),
            ref.get("name", ""),
            reason,
            action,
            type_,
            note,
        )
        now = loop_time()
        series = self._series.get(key)
        if series is not None and now - series.last_seen < _SERIES_WINDOW:
            series.count += 1
            series.last_seen = now
            if not series.pending:
                series.pending = True
                self._put(("series", key))
            return
        name = f"{ref.get('name', 'object')}.{time.time_ns():x}"
        namespace = ref.get("namespace") or "default"
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": _micro_now(),
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "note": note,
            "type": type_,
            "regarding": ref,
        }
        self._series[key] = _Series(name, namespace, 1, now)
        self._put(("create", body))
        if len(self._series) > 4096:
            cutoff = now - _SERIES_WINDOW
            for k in [k for k, s in self._series.items() if s.last_seen < cutoff]:
                del self._series[k]

    def _put(self, item: tuple[str, Any]) -> None:
        if self._stopped:
            self._dropped("stopped")
            return
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self._dropped("queue_full")

    async def _run(self) -> None:
        while True:
            kind, payload = await self._queue.get()
            try:
                if kind == "create":
                    assert isinstance(payload, dict)
                    await self.client.create(EVENTS, payload)
                else:
                    series = self._series.get(payload)
                    if series is not None:
                        series.pending = False
                        await self.client.patch(
                            EVENTS,
                            series.name,
                            {"series": {"count": series.count, "lastObservedTime": _micro_now()}},
                            series.namespace,
                        )
            except (errors.KubeError, OSError) as exc:
                self._dropped("api_error", str(exc))
            finally:
                self._queue.task_done()


def _reference(obj: dict[str, Any]) -> dict[str, Any]:
    if "metadata" not in obj:
        return dict(obj)
    meta = obj["metadata"]
    ref = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    if meta.get("resourceVersion"):
        ref["resourceVersion"] = meta["resourceVersion"]
    return ref
