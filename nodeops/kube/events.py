"""Kubernetes Events (events.k8s.io/v1) about the objects nodeops acts on.

Recording never blocks or fails a reconcile: events go through a bounded queue to a background
sender. Repeats of the same event (same object, reason, action, type and note) are folded into
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

from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.resources import EVENTS

log = structlog.get_logger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
_SERIES_WINDOW = 6 * 60.0  # a repeat within this many seconds joins the series
_MAX_NOTE = 1024


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
        self.dropped = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"events:{self.controller}")

    async def stop(self, flush_timeout: float = 2.0) -> None:
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), flush_timeout)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

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
        now = time.monotonic()
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
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self.dropped += 1

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
                log.debug("event not recorded", error=str(exc))
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
