"""The vCenter inventory as a source the reconciler reads: polled, never asked per node.

One property-collector call per interval gives every host's maintenance state and every VM's
host and power state. A failed poll drops the inventory (a stale view must not drive a shutdown
or a power-on), fails the readiness check with the reason, and is retried with exponential
backoff from one second up to the interval; the first good poll after that enqueues every node
again. `on_change` is called after each good poll that differs from the last.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Protocol

import structlog

from nodeops.controllers.esx.metrics import HOSTS_IN_MAINTENANCE, POLL_SECONDS, POLLS, READY
from nodeops.providers.base import ProviderError
from nodeops.providers.vsphere.inventory import Inventory

__all__ = ["InventoryPoller", "InventorySource"]

log = structlog.get_logger(__name__)


class InventorySource(Protocol):
    async def inventory(self) -> Inventory: ...


class InventoryPoller:
    def __init__(
        self,
        vcenter: InventorySource,
        *,
        interval: float,
        jitter: float = 0.1,
        min_backoff: float = 1.0,
    ) -> None:
        self.vcenter = vcenter
        self.interval = interval
        self.jitter = jitter
        self.min_backoff = min_backoff
        self.current: Inventory | None = None
        self.error: str | None = "vCenter not polled yet"
        self.on_change: Callable[[Inventory], None] | None = None
        self._failures = 0
        self._wake = asyncio.Event()

    def readiness(self) -> str | None:
        """The manager's readiness check: None while the last poll succeeded."""
        return self.error

    def poll_soon(self) -> None:
        """Poll now rather than at the end of the interval (after a power operation)."""
        self._wake.set()

    async def poll(self) -> Inventory | None:
        started = time.monotonic()
        try:
            inventory = await self.vcenter.inventory()
        except ProviderError as exc:
            self._failed(exc.code, str(exc))
            return None
        except Exception as exc:
            # A bug or an answer nobody foresaw: the same as a failed poll (the poller must
            # outlive it), with its traceback in the log.
            log.exception("vCenter poll failed unexpectedly")
            self._failed("Unexpected", f"{type(exc).__name__}: {exc}")
            return None
        finally:
            POLL_SECONDS.observe(time.monotonic() - started)
        POLLS.labels("ok").inc()
        READY.set(1)
        if self.error is not None and self._failures:
            log.info("vCenter answers again")
        self._failures = 0
        self.error = None
        changed = inventory != self.current
        self.current = inventory
        HOSTS_IN_MAINTENANCE.set(
            sum(1 for h in inventory.hosts.values() if h.maintenance == "true")
        )
        if changed and self.on_change is not None:
            self.on_change(inventory)
        return inventory

    def _failed(self, code: str, reason: str) -> None:
        POLLS.labels(code).inc()
        READY.set(0)
        self._failures += 1
        if self.error != reason:
            log.error("vCenter poll failed; acting on no node until it succeeds", error=reason)
        self.error = reason
        self.current = None

    def next_delay(self) -> float:
        if self._failures:
            return min(self.interval, self.min_backoff * 2 ** (self._failures - 1))
        return self.interval * (1 + random.uniform(0, self.jitter))

    async def run(self, stop: asyncio.Event) -> None:
        """The manager runnable: poll until stopped."""
        while not stop.is_set():
            await self.poll()
            self._wake.clear()
            waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
            try:
                await asyncio.wait(waits, timeout=self.next_delay(), return_when="FIRST_COMPLETED")
            finally:
                for w in waits:
                    w.cancel()
