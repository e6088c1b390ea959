"""The maintenance controller on the simulated cluster: real informers, client and controller."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodeops.controllers.kit import Clock as KitClock
from nodeops.controllers.maintenance import MaintenanceSettings
from nodeops.controllers.maintenance.cluster import CacheView
from nodeops.controllers.maintenance.keys import Keys
from nodeops.controllers.maintenance.reconciler import MaintenanceReconciler
from nodeops.controllers.maintenance.sender import NotificationSender
from nodeops.controllers.maintenance.source import ConfigSource
from nodeops.controllers.maintenance.wiring import build
from nodeops.kube.client import Client
from nodeops.kube.controller import Controller
from nodeops.kube.manager import Manager
from nodeops.kube.resources import NODES
from nodeops.sim.serve import SimCluster, SimOptions
from tests.waiting import until


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Harness:
    sim: SimCluster
    client: Client
    reconciler: MaintenanceReconciler
    controller: Controller
    sender: NotificationSender
    view: CacheView
    keys: Keys
    source: ConfigSource
    clock: Clock

    async def node(self, name: str) -> dict[str, Any]:
        return await self.client.get(NODES, name)

    async def patch_node(self, name: str, body: dict[str, Any]) -> None:
        await self.client.patch(NODES, name, body)

    async def label(self, name: str, **labels: str | None) -> None:
        await self.patch_node(name, {"metadata": {"labels": labels}})

    async def annotate(self, name: str, annotations: dict[str, str | None]) -> None:
        await self.patch_node(name, {"metadata": {"annotations": annotations}})

    def poke(self, *names: str) -> None:
        from nodeops.kube.controller import Request

        for n in names:
            self.controller.queue.add(Request(n))

    async def events(self, reason: str) -> list[dict[str, Any]]:
        from nodeops.kube.resources import EVENTS

        items, _ = await self.client.list(EVENTS)
        return [e for e in items if e.get("reason") == reason]

    async def wait_state(self, name: str, state: str, timeout: float = 20.0) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            self.poke(name)
            node = await self.node(name)
            labels = (node.get("metadata") or {}).get("labels") or {}
            info = self.reconciler.info.get(name) or {}
            # The write is visible before the reconcile that made it has finished: wait for both.
            done = labels.get(self.keys.state) == state and info.get("state") == state
            return node if done else None

        found = await until(check, timeout=timeout, what=f"{name} in {state}")
        assert found is not None  # `until` returns a truthy value only
        return found


@contextlib.asynccontextmanager
async def harness(
    tmp_path: Path,
    config: str,
    *,
    nodes: int = 3,
    keys: Keys | None = None,
    pods: bool = False,
    http: Any = None,
    sender_backoff: float = 0.05,
    sim: SimCluster | None = None,
) -> AsyncIterator[Harness]:
    """The controller as `nodeops run --controllers maintenance` wires it, on a simulator."""
    path = tmp_path / "maintenance.yaml"
    path.write_text(config)
    own_sim = sim is None
    if sim is None:
        sim = SimCluster(SimOptions(nodes=nodes, instant=True, time_scale=20.0))
        await sim.start()
    client = Client(sim.server.url, token=sim.server.admin_token, qps=0)
    keys = keys or Keys()
    settings = MaintenanceSettings(
        config=str(path),
        compat="sapcc" if keys.prefix == "cloud.sap/" else None,
        key_prefix=keys.prefix,
        api_addr="0",
        reload_interval=0.2,
    )
    manager = Manager(client, metrics_addr="0", health_addr="0", drain_timeout=2)
    clock = Clock()
    parts = build(manager, settings, clock=KitClock(now=clock))
    if http is not None:
        parts.view._http = http
    parts.sender.initial_backoff = sender_backoff
    parts.sender.max_backoff = 0.5
    task = asyncio.create_task(manager.run())
    await until(lambda: _ready(parts), what="controller running", timeout=30)
    h = Harness(
        sim, client, parts.reconciler, parts.controller, parts.sender, parts.view, keys,
        parts.source, clock,
    )  # fmt: skip
    try:
        yield h
    finally:
        manager.stop()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 30)
        if http is not None:
            parts.view._http = None
        await parts.view.close()
        await client.close()
        if own_sim:
            await sim.stop()


async def _ready(parts: Any) -> bool:
    return parts.nodes.has_synced and bool(parts.controller._workers)
