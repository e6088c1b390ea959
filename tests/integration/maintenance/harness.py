"""The maintenance controller on the simulated cluster: real informers, client and controller."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodeops.controllers.maintenance.cluster import CacheView
from nodeops.controllers.maintenance.info import InfoStore
from nodeops.controllers.maintenance.keys import Keys
from nodeops.controllers.maintenance.reconciler import MaintenanceReconciler
from nodeops.controllers.maintenance.sender import NotificationSender
from nodeops.controllers.maintenance.source import ConfigSource
from nodeops.kube.client import Client
from nodeops.kube.controller import Controller
from nodeops.kube.events import EventRecorder
from nodeops.kube.informer import InformerFactory
from nodeops.kube.resources import NODES, PODS
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
            return node if labels.get(self.keys.state) == state else None

        return await until(check, timeout=timeout, what=f"{name} in {state}")


@contextlib.asynccontextmanager
async def harness(
    tmp_path: Path,
    config: str,
    *,
    nodes: int = 3,
    keys: Keys | None = None,
    pods: bool = False,
    http: Any = None,
    with_controllers: bool = True,
    sender_backoff: float = 0.05,
    setup: Callable[[SimCluster], None] | None = None,
) -> AsyncIterator[Harness]:
    path = tmp_path / "maintenance.yaml"
    path.write_text(config)
    sim = SimCluster(
        SimOptions(nodes=nodes, instant=True, time_scale=20.0, controllers=with_controllers)
    )
    await sim.start()
    client = Client(sim.server.url, token=sim.server.admin_token, qps=0)
    factory = InformerFactory(client)
    keys = keys or Keys()
    nodes_inf = factory.informer(NODES)
    pods_inf = factory.informer(PODS) if pods else None
    events = EventRecorder(client, "maintenance", "test")
    events.start()
    view = CacheView(client, nodes_inf, keys, pods=pods_inf, http=http, events=events)
    source = ConfigSource(path)
    source.load()
    sender = NotificationSender(view, initial_backoff=sender_backoff, max_backoff=0.5)
    clock = Clock()
    reconciler = MaintenanceReconciler(source, keys, view, sender, InfoStore(), clock=clock)
    controller = Controller("maintenance", reconciler)
    controller.watch(nodes_inf)
    factory.start()
    await factory.wait_synced(30)
    stop = asyncio.Event()
    sender_task = asyncio.create_task(sender.run(stop))
    controller.start()
    h = Harness(sim, client, reconciler, controller, sender, view, keys, source, clock)
    try:
        yield h
    finally:
        await controller.stop(2)
        stop.set()
        await sender_task
        await factory.stop()
        await events.stop()
        await view.close()
        await client.close()
        await sim.stop()
