"""Sends notifications in the background, with retries, so a slow or failing endpoint never
holds a reconcile or a transition back.

A message is handed over only after the node's write that recorded it succeeded (so a failed
write never sends twice). Failures are retried with exponential backoff (honouring a server's
Retry-After) up to `max_attempts`, then dropped and counted; a template that cannot render is
not retried. The queue is bounded: when full, the oldest waiting message is dropped and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from dataclasses import dataclass

import structlog

from nodeops.controllers.maintenance.config import Instance
from nodeops.controllers.maintenance.metrics import NOTIFICATIONS
from nodeops.controllers.maintenance.plugins.base import ClusterView, Message
from nodeops.controllers.maintenance.templating import TemplateError

log = structlog.get_logger(__name__)


@dataclass
class _Item:
    instance: Instance
    message: Message
    attempt: int = 0


class NotificationSender:
    def __init__(
        self,
        cluster: ClusterView,
        *,
        workers: int = 4,
        max_attempts: int = 8,
        initial_backoff: float = 1.0,
        max_backoff: float = 300.0,
        max_queue: int = 10_000,
    ) -> None:
        self.cluster = cluster
        self.workers = workers
        self.max_attempts = max_attempts
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_queue = max_queue
        self._queue: deque[_Item] = deque()
        self._ready = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._busy = 0
        self.sent = 0
        self.failed = 0

    def submit(self, items: list[tuple[Instance, Message]]) -> None:
        for instance, message in items:
            self._put(_Item(instance, message))

    def _put(self, item: _Item) -> None:
        if len(self._queue) >= self.max_queue:
            dropped = self._queue.popleft()
            NOTIFICATIONS.labels(dropped.instance.name, "dropped").inc()
        self._queue.append(item)
        self._idle.clear()
        self._ready.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Work until `stop` is set (a manager runnable)."""
        for i in range(self.workers):
            task = asyncio.create_task(self._worker(), name=f"maintenance-notify:{i}")
            self._tasks.add(task)
        try:
            await stop.wait()
        finally:
            await self.close()

    async def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def wait_idle(self) -> None:
        """Until nothing is queued, in flight or waiting for a retry (for tests and shutdown)."""
        await self._idle.wait()

    def _check_idle(self) -> None:
        if not self._queue and not self._busy and not self._timers:
            self._idle.set()

    async def _worker(self) -> None:
        while True:
            while not self._queue:
                self._ready.clear()
                await self._ready.wait()
            item = self._queue.popleft()
            self._busy += 1
            try:
                await self._send(item)
            finally:
                self._busy -= 1
                self._check_idle()

    async def _send(self, item: _Item) -> None:
        name = item.instance.name
        item.attempt += 1
        try:
            await item.instance.plugin.send(item.message, self.cluster)
        except asyncio.CancelledError:
            raise
        except TemplateError as exc:
            self.failed += 1
            NOTIFICATIONS.labels(name, "failed").inc()
            log.error("notification cannot be rendered", instance=name, error=str(exc))
            return
        except Exception as exc:
            if item.attempt >= self.max_attempts:
                self.failed += 1
                NOTIFICATIONS.labels(name, "failed").inc()
                log.error(
                    "notification failed, giving up",
                    instance=name,
                    node=item.message.node,
                    attempts=item.attempt,
                    error=str(exc),
                )
                return
            NOTIFICATIONS.labels(name, "retried").inc()
            delay = min(self.max_backoff, self.initial_backoff * 2 ** (item.attempt - 1))
            hint = getattr(exc, "retry_after", None)
            if isinstance(hint, int | float) and hint > 0:
                delay = max(delay, min(float(hint), self.max_backoff))
            delay *= 1 + random.random() * 0.1
            log.warning(
                "notification failed, will retry",
                instance=name,
                node=item.message.node,
                attempt=item.attempt,
                retry_in=round(delay, 2),
                error=str(exc),
            )
            self._later(item, delay)
            return
        self.sent += 1
        NOTIFICATIONS.labels(name, "sent").inc()

    def _later(self, item: _Item, delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            self._put(item)

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)
