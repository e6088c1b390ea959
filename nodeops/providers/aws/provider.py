"""`AwsProvider`: node groups, load balancers and servers on AWS, behind the provider protocols."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from nodeops.providers.aws import autoscaling, ec2, loadbalancers
from nodeops.providers.aws.api import AwsApi
from nodeops.providers.aws.config import AwsConfig
from nodeops.providers.base import (
    BaseProvider,
    LoadBalancerTarget,
    NodeGroup,
    Server,
    ServiceRef,
    TargetHealth,
)

__all__ = ["AwsProvider"]


class AwsProvider(BaseProvider):
    """Auto Scaling, EC2, ELB and ELBv2 through one aioboto3 session.

    Implements `NodeGroups`, `LoadBalancers`, `LoadBalancerDraining` and `Servers`. IAM actions
    it uses: autoscaling:DescribeAutoScalingGroups, DescribeAutoScalingInstances,
    DetachInstances, AttachInstances; ec2:DescribeInstances, TerminateInstances,
    DescribeLaunchTemplates; elasticloadbalancing:DescribeLoadBalancers,
    DescribeLoadBalancerAttributes, DescribeInstanceHealth, RegisterInstancesWithLoadBalancer,
    DeregisterInstancesFromLoadBalancer, DescribeTargetGroups, DescribeTargetHealth,
    RegisterTargets, DeregisterTargets, DescribeTags.
    """

    name: ClassVar[str] = "aws"
    Config: ClassVar[type[AwsConfig]] = AwsConfig

    def __init__(self, config: AwsConfig | None = None) -> None:
        self.config = config or AwsConfig()
        self.api = AwsApi(self.config, provider=self.name)

    async def close(self) -> None:
        await self.api.close()

    # NodeGroups

    async def describe_groups(self, names: Sequence[str]) -> list[NodeGroup]:
        return await autoscaling.describe_groups(self.api, names)

    async def detach_instance(self, group: str, instance_id: str) -> None:
        await autoscaling.detach_instance(self.api, group, instance_id)

    async def attach_instance(self, group: str, instance_id: str) -> None:
        await autoscaling.attach_instance(self.api, group, instance_id)

    async def terminate_instance(self, instance_id: str) -> None:
        await ec2.terminate_instance(self.api, instance_id)

    # LoadBalancers

    async def targets_of(
        self,
        instance_id: str,
        *,
        among: Sequence[LoadBalancerTarget] | None = None,
    ) -> list[LoadBalancerTarget]:
        found = await loadbalancers.targets_of(self.api, [instance_id], among=among)
        return found[instance_id]

    async def targets_of_many(
        self,
        instance_ids: Sequence[str],
        *,
        among: Sequence[LoadBalancerTarget] | None = None,
    ) -> dict[str, list[LoadBalancerTarget]]:
        """`targets_of` for several instances with one scan of the load balancers."""
        return await loadbalancers.targets_of(self.api, instance_ids, among=among)

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
        return await ec2.find_instance_for_node(self.api, node)

    async def delete_server(self, server: Server) -> None:
        await ec2.terminate_instance(self.api, server.id)

    async def wait_deleted(self, server: Server, timeout: float) -> None:
        await ec2.wait_terminated(self.api, server.id, timeout)
