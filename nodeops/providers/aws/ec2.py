"""EC2 instances: find the instance of a node, terminate it, wait until it is gone.

Instances are looked up with an `instance-id` filter rather than `InstanceIds`: with IDs, one
purged or mistyped ID fails the whole call with InvalidInstanceID.NotFound (a pitfall of
Cyclops's existence check), while a filter simply leaves unknown IDs out.

A node without `spec.providerID` (the cloud controller has not set it yet, or none runs) is
matched by its name against the instances' private DNS names, which is the node name the AWS
kubelet registers with by default (`ip-10-0-0-1.ec2.internal`, or the resource name
`i-0abc.region.compute.internal`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from nodeops.common.looptime import loop_time
from nodeops.providers.aws.api import AwsApi
from nodeops.providers.base import (
    ProviderError,
    Server,
    node_name,
    node_provider_id,
)

__all__ = [
    "describe_instances",
    "find_instance_for_node",
    "is_instance_id",
    "provider_id_of",
    "terminate_instance",
    "wait_terminated",
]

_INSTANCE_ID_RE: Final = re.compile(r"i-[0-9a-f]{8}(?:[0-9a-f]{9})?")
_FILTER_VALUES: Final = 200
_GONE: Final = frozenset({"terminated"})


def is_instance_id(value: str) -> bool:
    return _INSTANCE_ID_RE.fullmatch(value) is not None


def provider_id_of(zone: str | None, instance_id: str) -> str:
    """The `spec.providerID` the AWS cloud provider gives the node of an instance."""
    return f"aws:///{zone or ''}/{instance_id}"


def _server(raw: Mapping[str, Any], name: str | None = None) -> Server:
    zone = (raw.get("Placement") or {}).get("AvailabilityZone")
    return Server(
        id=raw["InstanceId"],
        name=name or raw.get("PrivateDnsName") or raw["InstanceId"],
        status=str((raw.get("State") or {}).get("Name", "unknown")),
        provider_id=provider_id_of(zone, raw["InstanceId"]),
        zone=zone,
    )


async def _instances(api: AwsApi, filters: list[dict[str, Any]]) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []
    async for page in api.pages("ec2", "describe_instances", Filters=filters, MaxResults=1000):
        for reservation in page.get("Reservations", ()):
            found.extend(reservation.get("Instances", ()))
    return found


async def describe_instances(api: AwsApi, instance_ids: Sequence[str]) -> dict[str, Server]:
    """The instances that exist among `instance_ids`, terminated ones included, by ID."""
    ids = list(dict.fromkeys(instance_ids))
    found: dict[str, Server] = {}
    for start in range(0, len(ids), _FILTER_VALUES):
        chunk = ids[start : start + _FILTER_VALUES]
        for raw in await _instances(api, [{"Name": "instance-id", "Values": chunk}]):
            found[raw["InstanceId"]] = _server(raw)
    return found


async def terminate_instance(api: AwsApi, instance_id: str) -> None:
    """Terminate; an instance that is already terminated or purged is a success."""
    if not is_instance_id(instance_id):
        raise ProviderError(
            "InvalidInstanceID.Malformed",
            f"{instance_id!r} is not an EC2 instance ID",
            retryable=False,
            operation="ec2.terminate_instances",
        )
    try:
        await api.call("ec2", "terminate_instances", InstanceIds=[instance_id])
    except ProviderError as exc:
        if exc.code != "InvalidInstanceID.NotFound":
            raise


async def find_instance_for_node(api: AwsApi, node: Mapping[str, Any]) -> Server | None:
    """The live instance behind a Node object, or None (gone, or not an EC2 node)."""
    provider_id = node_provider_id(node)
    name = node_name(node)
    if provider_id is not None:
        if provider_id.scheme != "aws" or not is_instance_id(provider_id.id):
            # Another cloud's node, or an AWS node that is no instance (Fargate).
            return None
        found = await describe_instances(api, [provider_id.id])
        server = found.get(provider_id.id)
        if server is None or server.status in _GONE:
            return None
        return Server(server.id, name, server.status, server.provider_id, server.zone)
    if not api.config.private_dns_fallback:
        return None
    filters: list[dict[str, Any]] = [
        {"Name": "private-dns-name", "Values": [name]},
        {
            "Name": "instance-state-name",
            "Values": ["pending", "running", "shutting-down", "stopping", "stopped"],
        },
    ]
    if api.config.vpc_id:
        filters.append({"Name": "vpc-id", "Values": [api.config.vpc_id]})
    matches = await _instances(api, filters)
    if not matches:
        return None
    if len(matches) > 1:
        ids = ", ".join(sorted(m["InstanceId"] for m in matches))
        raise ProviderError(
            "AmbiguousNode",
            f"node {name} has no providerID and its name is the private DNS name of several "
            f"instances ({ids}); set providers.aws.vpc_id",
            retryable=False,
            operation="ec2.describe_instances",
        )
    return _server(matches[0], name)


async def wait_terminated(api: AwsApi, instance_id: str, timeout: float) -> None:
    """Poll until the instance is terminated or purged."""
    deadline = loop_time() + timeout
    while True:
        found = await describe_instances(api, [instance_id])
        server = found.get(instance_id)
        if server is None or server.status in _GONE:
            return
        remaining = deadline - loop_time()
        if remaining <= 0:
            raise ProviderError(
                "Timeout",
                f"instance {instance_id} is still {server.status} after {timeout:.0f}s",
                retryable=True,
                operation="ec2.describe_instances",
            )
        await asyncio.sleep(min(api.config.poll_interval, remaining))
