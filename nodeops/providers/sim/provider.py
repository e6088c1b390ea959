"""`SimProvider`: node groups, load balancers and servers of the simulated cloud, behind the
provider protocols."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from nodeops.providers.base import (
    BaseProvider,
    LoadBalancerTarget,
    NodeGroup,
    Server,
    ServiceRef,
    TargetHealth,
)
from nodeops.providers.sim import loadbalancers, nodegroups, servers
from nodeops.providers.sim.api import NAME, SimApi
from nodeops.providers.sim.config import SimConfig

__all__ = ["SimProvider"]


class SimProvider(BaseProvider):
    """Node groups, load balancers and servers of the simulated cloud.

    Implements `NodeGroups`, `LoadBalancers`, `LoadBalancerDraining` and `Servers`.
    """

    name: ClassVar[str] = NAME
    Config: ClassVar[type[SimConfig]] = SimConfig

    def __init__(self, config: SimConfig) -> None:
        if not isinstance(config, SimConfig):
            raise TypeError(f"expected SimConfig, got {type(config).__name__}")
        self.config = config
        self.api = SimApi(config)

    async def close(self) -> None:
        await self.api.close()

    # NodeGroups

    async def describe_groups(self, names: Sequence[str]) -> list[NodeGroup]:
        return await nodegroups.describe_groups(self.api, names)

    async def detach_instance(self, group: str, instance_id: str) -> None:
        await nodegroups.detach_instance(self.api, group, instance_id)

    async def attach_instance(self, group: str, instance_id: str) -> None:
        await nodegroups.attach_instance(self.api, group, instance_id)

    async def terminate_instance(self, instance_id: str) -> None:
        await nodegroups.terminate_instance(self.api, instance_id)

    # LoadBalancers

    async def targets_of(
        self,
        instance_id: str,
        *,
        among: Sequence[LoadBalancerTarget] | None = None,
    ) -> list[LoadBalancerTarget]:
        return await loadbalancers.targets_of(self.api, instance_id, among=among)

    async def registrations(
        self, *, among: Sequence[LoadBalancerTarget] | None = None
    ) -> dict[str, list[LoadBalancerTarget]]:
        return await loadbalancers.registrations(self.api, among=among)

    async def deregister(self, target: LoadBalancerTarget, instance_id: str) -> None:
        await loadbalancers.deregister(self.api, target, instance_id)

    async def register(self, target: LoadBalancerTarget, instance_id: str) -> None:
        await loadbalancers.register(self.api, target, instance_id)

    async def targets_behind_services(
        self,
        services: Sequence[ServiceRef],
        *,
        cluster: str | None = None,
    ) -> dict[ServiceRef, list[LoadBalancerTarget]]:
        return await loadbalancers.targets_behind_services(self.api, services, cluster=cluster)

    # LoadBalancerDraining

    async def wait_drained(
        self, target: LoadBalancerTarget, instance_id: str, timeout: float
    ) -> None:
        await loadbalancers.wait_drained(self.api, target, instance_id, timeout)

    async def target_health(self, target: LoadBalancerTarget, instance_id: str) -> TargetHealth:
        return await loadbalancers.target_health(self.api, target, instance_id)

    # Servers

    async def find_server(self, node: Mapping[str, Any]) -> Server | None:
        return await servers.find_server(self.api, node)

    async def delete_server(self, server: Server) -> None:
        await self.terminate_instance(server.id)

    async def wait_deleted(self, server: Server, timeout: float) -> None:
        await servers.wait_deleted(self.api, server, timeout)
