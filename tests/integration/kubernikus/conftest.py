"""A simulated Kubernikus cluster (API server, kubelets, scheduler, controllers, and node pools
behind a simulated Keystone + Nova) and the kubernikus controller run by a real manager.

The controller gets its OpenStack credentials from a `cloud-config` Secret, as in a Kubernikus
cluster, and deletes servers through the real `openstack` provider over HTTP.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nodeops.controllers import SetupContext
from nodeops.controllers.kubernikus import PLUGIN, KubernikusSettings
from nodeops.kube import Client, Manager
from nodeops.kube.resources import EVENTS, NODES, SECRETS
from nodeops.sim.openstack import NodePool
from nodeops.sim.serve import SimCluster, SimOptions
from tests.waiting import until

NEW = "v1.32.1"
OLD = "v1.31.4"
TIME_SCALE = 20.0

CONFIG = """\
intervals:
  requeue: 2s
  podDeletion:
    period: 250ms
    timeout: 5m
  podEviction:
    period: 250ms
    timeout: {eviction_timeout}
    force: false
cloudProviderSecret:
  name: cloud-config
  namespace: kube-system
removeNode: {remove_node}
"""


@dataclass
class Running:
    manager: Manager
    task: asyncio.Task[int]
    client: Client

    async def stop(self) -> None:
        self.manager.stop()
        try:
            await asyncio.wait_for(self.task, 30)
        finally:
            await self.client.close()

    async def crash(self) -> None:
        """End the process at once, as kill -9 would: every reconcile is cut off wherever it
        is, nothing is finished or cleaned up in the cluster."""
        for controller in self.manager.controllers:
            controller.cancel()
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        for controller in self.manager.controllers:
            with contextlib.suppress(BaseException):
                await controller.stop(0)
        await self.client.close()


@dataclass
class Env:
    sim: SimCluster
    client: Client
    tmp: Path
    running: list[Running] = field(default_factory=list)

    def config_file(self, *, remove_node: bool = True, eviction_timeout: str = "5m") -> Path:
        path = self.tmp / "kubernikus.yaml"
        path.write_text(
            CONFIG.format(remove_node=str(remove_node).lower(), eviction_timeout=eviction_timeout)
        )
        return path

    async def start(self, **settings: Any) -> Running:
        if "config" not in settings:
            settings["config"] = self.config_file()
        client = Client(self.sim.server.url, token=self.sim.server.admin_token, qps=0)
        manager = Manager(client, metrics_addr="0", health_addr="0")
        await PLUGIN.setup(
            SetupContext(manager=manager, namespace="nodeops-system"),
            KubernikusSettings(**settings),
        )
        task = asyncio.create_task(manager.run())
        run = Running(manager, task, client)
        self.running.append(run)
        return run

    async def nodes(self) -> dict[str, dict[str, Any]]:
        items, _ = await self.client.list(NODES)
        return {n["metadata"]["name"]: n for n in items}

    async def node(self, name: str) -> dict[str, Any] | None:
        return await self.client.get_or_none(NODES, name)

    async def label(self, name: str, key: str, value: str | None) -> None:
        await self.client.patch(NODES, name, {"metadata": {"labels": {key: value}}})

    async def events(self, node: str) -> list[str]:
        items, _ = await self.client.list(EVENTS, "default")
        return [
            f"{e.get('reason')}: {e.get('note')}"
            for e in items
            if (e.get("regarding") or {}).get("name") == node
        ]

    async def wait(
        self, check: Callable[[], Awaitable[Any]], what: str, timeout: float = 60.0
    ) -> Any:
        return await until(check, timeout=timeout, what=what)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    sim = SimCluster(
        SimOptions(
            nodes=0,
            instant=True,
            time_scale=TIME_SCALE,
            kube_version=NEW,
            openstack_pools=[
                NodePool(
                    "workers",
                    size=3,
                    kubelet_version=NEW,
                    initial_kubelet_version=OLD,
                    boot_seconds=20,
                )
            ],
        )
    )
    await sim.start()
    client = Client(sim.server.url, token=sim.server.admin_token, qps=0, user_agent="test/1")
    conf = sim.openstack.credentials.cloudprovider_conf(sim.openstack.auth_url(sim.server.url))
    await client.create(
        SECRETS,
        {
            "metadata": {"name": "cloud-config", "namespace": "kube-system"},
            "data": {"cloudprovider.conf": base64.b64encode(conf.encode()).decode()},
        },
        "kube-system",
    )
    environment = Env(sim, client, tmp_path)
    try:
        yield environment
    finally:
        for run in environment.running:
            if not run.task.done():
                await run.crash()
        await client.close()
        await sim.stop()
