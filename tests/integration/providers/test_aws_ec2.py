"""EC2 through the AWS provider: terminating, and finding and deleting the VM of a node."""

from __future__ import annotations

from typing import Any

import pytest

from nodeops.providers.base import ProviderError, ProviderIdError
from tests.integration.providers import test_aws_support as support
from tests.integration.providers.test_aws_support import Aws

aws = support.aws


def node(name: str, provider_id: str | None = None) -> dict[str, Any]:
    spec = {"providerID": provider_id} if provider_id is not None else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec}


async def test_terminate_is_idempotent(aws: Aws) -> None:
    instance = aws.world.run_instance()["InstanceId"]

    await aws.provider.terminate_instance(instance)
    await aws.provider.terminate_instance(instance)

    assert aws.world.state(instance) == "terminated"
    # Purged long ago, or never existed: equally gone.
    await aws.provider.terminate_instance("i-0123456789abcdef0")


async def test_terminate_rejects_what_is_not_an_instance_id(aws: Aws) -> None:
    with pytest.raises(ProviderError) as caught:
        await aws.provider.terminate_instance("fargate-ip-10-0-0-1")
    assert (caught.value.code, caught.value.retryable) == ("InvalidInstanceID.Malformed", False)
    assert aws.proxy.requests["TerminateInstances"] == 0


async def test_find_server_by_provider_id(aws: Aws) -> None:
    raw = aws.world.run_instance()
    zone = raw["Placement"]["AvailabilityZone"]
    provider_id = f"aws:///{zone}/{raw['InstanceId']}"

    server = await aws.provider.find_server(node("worker-1", provider_id))

    assert server is not None
    assert (server.id, server.name, server.status) == (raw["InstanceId"], "worker-1", "running")
    assert (server.provider_id, server.zone) == (provider_id, zone)


async def test_find_server_falls_back_to_the_private_dns_name(aws: Aws) -> None:
    raw = aws.world.run_instance()
    aws.world.run_instance()  # a neighbour that must not match

    server = await aws.provider.find_server(node(raw["PrivateDnsName"]))

    assert server is not None
    assert server.id == raw["InstanceId"]
    assert server.name == raw["PrivateDnsName"]


async def test_private_dns_fallback_can_be_switched_off(aws: Aws) -> None:
    raw = aws.world.run_instance()
    async with aws.make_provider(private_dns_fallback=False) as provider:
        assert await provider.find_server(node(raw["PrivateDnsName"])) is None
    assert aws.proxy.requests["DescribeInstances"] == 0


async def test_find_server_of_nodes_that_are_no_ec2_instance(aws: Aws) -> None:
    assert await aws.provider.find_server(node("n", "openstack:///8f9c-1234")) is None
    assert await aws.provider.find_server(node("n", "aws:///us-east-1a/fargate-ip-1")) is None
    assert await aws.provider.find_server(node("ip-10-9-9-9.ec2.internal")) is None
    # A providerID of an instance that was never there (or is purged) is simply not found.
    assert (
        await aws.provider.find_server(node("n", "aws:///us-east-1a/i-0123456789abcdef0")) is None
    )
    with pytest.raises(ProviderIdError):
        await aws.provider.find_server(node("n", "not a provider id"))


async def test_delete_server_and_wait_until_it_is_gone(aws: Aws) -> None:
    raw = aws.world.run_instance()
    the_node = node("worker", f"aws:///us-east-1a/{raw['InstanceId']}")
    server = await aws.provider.find_server(the_node)
    assert server is not None

    await aws.provider.delete_server(server)
    await aws.provider.wait_deleted(server, timeout=5)
    await aws.provider.delete_server(server)

    assert await aws.provider.find_server(the_node) is None
    assert aws.world.state(raw["InstanceId"]) == "terminated"


async def test_wait_deleted_times_out_on_a_live_instance(aws: Aws) -> None:
    raw = aws.world.run_instance()
    server = await aws.provider.find_server(node("w", f"aws:///us-east-1a/{raw['InstanceId']}"))
    assert server is not None

    with pytest.raises(ProviderError) as caught:
        await aws.provider.wait_deleted(server, timeout=0.2)

    assert (caught.value.code, caught.value.retryable) == ("Timeout", True)
    assert "still running" in caught.value.message


async def test_a_closed_provider_refuses_calls_and_reopens_nothing(aws: Aws) -> None:
    provider = aws.make_provider()
    await provider.terminate_instance("i-0123456789abcdef0")
    await provider.close()
    await provider.close()

    with pytest.raises(ProviderError) as caught:
        await provider.terminate_instance("i-0123456789abcdef0")

    assert (caught.value.code, caught.value.retryable) == ("Closed", False)
    assert aws.proxy.requests["TerminateInstances"] == 1
