"""`SimOpenStack`: the simulated OpenStack cloud's state, Keystone + Nova API and loop together."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from typing import Any

from aiohttp import web

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import ApiClient
from nodeops.sim.openstack.loop import NovaLoop
from nodeops.sim.openstack.model import Credentials, NodePool, OpenStackSettings
from nodeops.sim.openstack.routes import OPENSTACK_PREFIX, openstack_routes
from nodeops.sim.openstack.state import NovaState
from nodeops.sim.openstack.views import node_object
from nodeops.sim.server.accounting import RequestStats
from nodeops.sim.server.faults import FaultInjector

__all__ = ["SimOpenStack"]

Obj = dict[str, Any]


class SimOpenStack:
    """Kubernikus-style node pools of Nova servers on the simulator's clock.

    Its routes join the API server's before it starts; its pools' first nodes are created with
    the cluster; then it runs against the API server:

        openstack = SimOpenStack(clock, faults=server.faults, stats=server.stats)
        openstack.add_pool(NodePool("workers", size=3, kubelet_version="v1.31.4"))
        server.extra_routes.extend(openstack.routes())
        await server.start()
        for node in openstack.initial_nodes(): server.create(node)
        await openstack.start(server.url, server.admin_token, server.ca_pem)

    `auth_url(server.url)` and `credentials.cloudprovider_conf(...)` give what a cluster's
    `cloud-config` Secret would hold.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        credentials: Credentials | None = None,
        settings: OpenStackSettings | None = None,
        faults: FaultInjector | None = None,
        stats: RequestStats | None = None,
        cluster: str = "kks",
        seed: int = 0,
    ) -> None:
        self.clock = clock
        self.credentials = credentials or Credentials()
        self.settings = settings or OpenStackSettings()
        self.rng = random.Random(seed)
        self.state = NovaState(self.settings, self._now, self.rng, cluster=cluster)
        self.faults = faults or FaultInjector()
        self.stats = stats or RequestStats()
        self.loop: NovaLoop | None = None
        self._client: ApiClient | None = None
        self._task: asyncio.Task[None] | None = None

    def _now(self) -> float:
        return self.clock.now().timestamp()

    @staticmethod
    def auth_url(api_url: str) -> str:
        """Keystone's URL on the simulator at `api_url`."""
        return f"{api_url.rstrip('/')}{OPENSTACK_PREFIX}/v3"

    def add_pool(self, pool: NodePool) -> NodePool:
        return self.state.add_pool(pool)

    def set_kubelet_version(self, pool: str, version: str) -> None:
        """Servers launched from now on run `version` (Kubernikus' cluster upgrade)."""
        self.state.update_pool(pool, kubelet_version=version)

    def initial_nodes(self) -> list[Obj]:
        """Every pool filled with ACTIVE servers; their Nodes, to be created with the cluster."""
        nodes = []
        now = self.clock.timestamp()
        for pool in self.state.pools.values():
            for server in self.state.initial_servers(pool.name):
                nodes.append(node_object(server, pool, rng=self.rng, now=now))
        return nodes

    def routes(self) -> list[web.RouteDef]:
        return openstack_routes(self.state, self.credentials, faults=self.faults, stats=self.stats)

    async def start(
        self,
        api_url: str,
        api_token: str | None = None,
        ca_pem: bytes | None = None,
        *,
        client: ApiClient | None = None,
        owns: Callable[[Obj], bool] | None = None,
    ) -> None:
        """`client` (closed on stop) and `owns` are for a cloud attached to another cluster."""
        if self._task is not None:
            raise RuntimeError("already started")
        self._client = client or ApiClient(api_url, api_token, component="openstack", ca_pem=ca_pem)
        self.loop = NovaLoop(self.state, self.clock, self._client, self.rng, owns=owns)
        self._task = asyncio.create_task(self.loop.run(), name="sim-openstack")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._client is not None:
            await self._client.close()
            self._client = None
