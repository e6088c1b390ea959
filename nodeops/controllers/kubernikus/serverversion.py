"""The API server's version, fetched from `/version` and kept fresh.

Every node is compared with this one value, so it is fetched once per `intervals.requeue`
rather than once per node and reconcile (the reference asks the API server on every reconcile,
with two new clients each time). When it changes (a control-plane upgrade), `on_change` is
called so every node is looked at again at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from nodeops.controllers.kubernikus.version import KubeVersion, VersionError, parse_version
from nodeops.kube import errors
from nodeops.kube.client import Client

__all__ = ["ServerVersion"]

log = structlog.get_logger(__name__)


class ServerVersion:
    def __init__(
        self,
        client: Client,
        *,
        interval: float,
        on_change: Callable[[KubeVersion], None] | None = None,
    ) -> None:
        self.client = client
        self.interval = interval
        self.on_change = on_change
        self.current: KubeVersion | None = None

    async def refresh(self) -> KubeVersion | None:
        """Fetch `/version` once; keeps the last known version when the call fails."""
        try:
            body = await self.client.request("GET", "/version", timeout=30)
            found = parse_version(str((body or {}).get("gitVersion", "")))
        except (errors.KubeError, VersionError) as exc:
            log.warning("API server version unknown; kubelet drift labels wait", error=str(exc))
            return self.current
        if found != self.current:
            previous, self.current = self.current, found
            log.info("API server version", version=str(found), previous=str(previous or ""))
            if self.on_change is not None:
                self.on_change(found)
        return self.current

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh every `interval` until `stop` is set (a manager runnable)."""
        while not stop.is_set():
            await self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
