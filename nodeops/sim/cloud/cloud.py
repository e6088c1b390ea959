"""`SimCloud`: the simulated cloud's state, HTTP API and loop, started and stopped together."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from nodeops.sim.clock import Clock
from nodeops.sim.cloud.loop import CloudLoop
from nodeops.sim.cloud.model import CloudSettings, LoadBalancerKind, SimLoadBalancer, SimNodeGroup
from nodeops.sim.cloud.routes import cloud_routes
from nodeops.sim.cloud.state import CloudState
from nodeops.sim.cloud.traffic import TrafficSimulator
from nodeops.sim.cloud.traffic_routes import traffic_routes
from nodeops.sim.cluster.apiclient import ApiClient
from nodeops.sim.objects import NODE_GROUP_LABEL
from nodeops.sim.scenario import NodeGroup as NodeGroupSpec
from nodeops.sim.scenario import Scenario
from nodeops.sim.server.accounting import RequestStats
from nodeops.sim.server.faults import FaultInjector

__all__ = ["SimCloud"]

Obj = dict[str, Any]


class SimCloud:
    """Node groups, instances and load balancers on the simulator's clock.

    Built before the API server starts (its routes must be in the server's application), filled
    from a scenario, then started with the server's URL so instances can register their nodes:

        cloud = SimCloud(clock, faults=server.faults, stats=server.stats, token=server.admin_token)
        cloud.add_scenario(scenario)
        server.extra_routes.extend(cloud.routes())
        await server.start()
        ...create the scenario's objects, passing group nodes through cloud.adopt()...
        await cloud.start(server.url, server.admin_token)
    """

    def __init__(
        self,
        clock: Clock,
        *,
        settings: CloudSettings | None = None,
        faults: FaultInjector | None = None,
        stats: RequestStats | None = None,
        token: str | None = None,
        seed: int = 0,
    ) -> None:
        self.clock = clock
        self.settings = settings or CloudSettings()
        self.state = CloudState(self.settings, self._now, random.Random(seed))
        self.faults = faults or FaultInjector()
        self.stats = stats or RequestStats()
        self.token = token
        self.loop: CloudLoop | None = None
        self.traffic = TrafficSimulator(self.state, clock)
        self._client: ApiClient | None = None
        self._task: asyncio.Task[None] | None = None

    def _now(self) -> float:
        return self.clock.now().timestamp()

    # -- building ------------------------------------------------------------------------------

    def add_group(
        self,
        spec: NodeGroupSpec,
        *,
        desired: int | None = None,
        min_size: int = 0,
        max_size: int | None = None,
    ) -> SimNodeGroup:
        return self.state.add_group(spec, desired=desired, min_size=min_size, max_size=max_size)

    def add_load_balancer(
        self,
        name: str,
        kind: LoadBalancerKind,
        port: int,
        node_groups: Sequence[str],
        *,
        deregistration_delay: float | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> SimLoadBalancer:
        return self.state.add_load_balancer(
            name, kind, port, node_groups, deregistration_delay=deregistration_delay, tags=tags
        )

    def add_scenario(self, scenario: Scenario) -> None:
        """The scenario's node groups (desired = size) and load balancers, still empty: its
        group nodes join them through `adopt` as they are created."""
        for spec in scenario.node_groups:
            self.add_group(spec)
        for lb in scenario.load_balancers:
            self.add_load_balancer(lb.name, lb.type, lb.port, lb.node_groups)

    def group_of(self, node: Mapping[str, Any]) -> str | None:
        """The cloud group a Node object belongs to, by its node group label."""
        labels = (node.get("metadata") or {}).get("labels") or {}
        group = labels.get(NODE_GROUP_LABEL)
        return group if group in self.state.groups else None

    def adopt(self, group: str, node: Mapping[str, Any]) -> Obj:
        """An InService instance for a node that exists from the start; the node to create."""
        return self.state.adopt(group, node)

    def admit(self, node: Mapping[str, Any]) -> Obj:
        """A node created with the cluster: adopted when it is a group's, else its address is
        kept out of launches. Returns the node to create."""
        group = self.group_of(node)
        if group is not None:
            return self.adopt(group, node)
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP" and address.get("address"):
                self.state.reserve_ip(str(address["address"]))
        return dict(node)

    def initial_nodes(self, group: str, count: int) -> list[Obj]:
        """`count` InService instances of `group`; their nodes, to be created as they are."""
        return self.state.initial_nodes(group, count, now_text=self.clock.timestamp())

    def routes(self) -> list[web.RouteDef]:
        return [
            *cloud_routes(self.state, faults=self.faults, stats=self.stats, token=self.token),
            *traffic_routes(self.traffic, token=self.token),
        ]

    # -- running -------------------------------------------------------------------------------

    async def start(
        self,
        api_url: str,
        api_token: str | None = None,
        ca_pem: bytes | None = None,
        *,
        client: ApiClient | None = None,
        owns: Callable[[Obj], bool] | None = None,
    ) -> None:
        """Start booting, terminating and keeping capacity against the API server at `api_url`.

        `client` (closed on stop) and `owns` are for a cloud attached to another cluster."""
        if self._task is not None:
            raise RuntimeError("already started")
        self._client = client or ApiClient(
            api_url, api_token, component="cloud", ca_pem=ca_pem, time_scale=self.clock.time_scale
        )
        self.loop = CloudLoop(self.state, self.clock, self._client, owns=owns)
        self._task = asyncio.create_task(self.loop.run(), name="sim-cloud")
        await self.traffic.start(self._client)

    async def stop(self) -> None:
        await self.traffic.stop()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._client is not None:
            await self._client.close()
            self._client = None
