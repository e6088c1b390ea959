"""The simulated OpenStack cloud through the real `openstack` provider and openstacksdk.

Keystone authentication, the service catalog, Nova's version discovery, server lists, reads and
deletes all travel over HTTP to the simulator; the cluster side (replacement nodes registering,
deleted servers' nodes going away) is watched through the Kubernetes API.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nodeops.kube.client import Client
from nodeops.kube.resources import NODES
from nodeops.providers.base import ProviderError
from nodeops.providers.openstack import OpenStackConfig, OpenStackProvider
from nodeops.providers.retry import RetryPolicy
from nodeops.sim.openstack import NODEPOOL_LABEL, NodePool
from nodeops.sim.serve import SimCluster, SimOptions
from tests.waiting import until

pytestmark = [
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK50Warning"),
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK60Warning"),
]

FAST = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05, attempt_timeout=10, timeout=20)


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[SimCluster, Client]]:
    sim = SimCluster(
        SimOptions(
            nodes=0,
            instant=True,
            time_scale=50.0,
            kube_version="v1.32.1",
            openstack_pools=[
                NodePool(
                    "workers",
                    size=2,
                    kubelet_version="v1.31.4",
                    boot_seconds=30,
                    labels={"cloud.sap/maintenance-profile": "flatcar--kubelet"},
                )
            ],
        )
    )
    await sim.start()
    client = Client(sim.server.url, token=sim.server.admin_token, qps=0)
    try:
        yield sim, client
    finally:
        await client.close()
        await sim.stop()


def provider_for(sim: SimCluster, password: str | None = None) -> OpenStackProvider:
    creds = sim.openstack.credentials
    if password is not None:
        creds = dataclasses.replace(creds, password=password)
    conf = creds.cloudprovider_conf(sim.openstack.auth_url(sim.server.url))
    config = OpenStackConfig(
        cloudprovider_conf=Path("secret kube-system/cloud-config key cloudprovider.conf"),
        retry=FAST,
        poll_interval=0.02,
    )
    return OpenStackProvider.from_text(config, conf)


async def nodes(client: Client) -> list[dict[str, Any]]:
    items, _ = await client.list(NODES)
    return items


async def test_version_is_configurable(cluster: tuple[SimCluster, Client]) -> None:
    sim, client = cluster
    body = await client.request("GET", "/version")
    assert (body["gitVersion"], body["major"], body["minor"]) == ("v1.32.1", "1", "32")
    sim.server.set_kube_version("v1.33.0-rc.1")
    body = await client.request("GET", "/version")
    assert (body["gitVersion"], body["minor"]) == ("v1.33.0-rc.1", "33")
    with pytest.raises(ValueError):
        sim.server.set_kube_version("latest")


async def test_pool_nodes_look_like_kubernikus_nodes(cluster: tuple[SimCluster, Client]) -> None:
    _, client = cluster
    items = await nodes(client)
    assert len(items) == 2
    for node in items:
        assert node["metadata"]["name"].startswith("kks-workers-")
        assert node["spec"]["providerID"].startswith("openstack:///")
        assert node["metadata"]["labels"][NODEPOOL_LABEL] == "workers"
        assert node["metadata"]["labels"]["cloud.sap/maintenance-profile"] == "flatcar--kubelet"
        assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.31.4"
        assert node["status"]["nodeInfo"]["osImage"].startswith("Flatcar Container Linux")


async def test_deleted_server_is_replaced_by_a_node_with_the_new_kubelet(
    cluster: tuple[SimCluster, Client],
) -> None:
    sim, client = cluster
    first, second = await nodes(client)
    async with provider_for(sim) as provider:
        server = await provider.find_server(first)
        assert server is not None and server.name == first["metadata"]["name"]
        by_name = await provider.find_server({"metadata": {"name": second["metadata"]["name"]}})
        assert by_name is not None and f"openstack:///{by_name.id}" == second["spec"]["providerID"]

        sim.openstack.set_kubelet_version("workers", "v1.32.1")
        await provider.delete_server(server)
        await provider.delete_server(server)  # deleting a server being deleted is fine
        await provider.wait_deleted(server, timeout=20)
        assert await provider.find_server(first) is None

    async def replaced() -> list[tuple[str, str]] | None:
        current = {
            n["metadata"]["name"]: n["status"]["nodeInfo"]["kubeletVersion"]
            for n in await nodes(client)
        }
        if first["metadata"]["name"] in current or len(current) != 2:
            return None
        return sorted(current.items(), key=lambda kv: kv[1])

    listed = await until(replaced, timeout=30, what="the replacement node")
    assert [version for _, version in listed] == ["v1.31.4", "v1.32.1"]


async def test_wrong_password_is_refused(cluster: tuple[SimCluster, Client]) -> None:
    sim, client = cluster
    node = (await nodes(client))[0]
    async with provider_for(sim, password="wrong") as provider:
        with pytest.raises(ProviderError) as err:
            await provider.find_server(node)
    assert err.value.code == "401" and not err.value.retryable


async def test_cloud_faults_are_retried(cluster: tuple[SimCluster, Client]) -> None:
    sim, client = cluster
    node = (await nodes(client))[0]
    sim.server.faults.update("error=500:1@delete/openstack/servers")
    async with provider_for(sim) as provider:
        server = await provider.find_server(node)
        assert server is not None
        with pytest.raises(ProviderError) as err:
            await provider.delete_server(server)
        assert err.value.retryable
        sim.server.faults.update(None)
        await provider.delete_server(server)
    stats = sim.server.stats.snapshot()
    assert "openstack/servers" in str(stats)
