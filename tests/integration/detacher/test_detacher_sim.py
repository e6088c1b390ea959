"""The detacher against the simulated cluster and its cloud (the `sim` provider, over HTTP)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nodeops.controllers.detacher import signals
from nodeops.controllers.detacher.reconciler import ATTACHMENTS
from nodeops.kube import Client
from nodeops.kube.metrics import REGISTRY
from nodeops.kube.resources import NAMESPACES, NODES, SERVICES
from nodeops.providers.base import CLASSIC, TARGET_GROUP, LoadBalancerTarget
from nodeops.providers.registry import create_provider
from nodeops.providers.sim import SimProvider
from nodeops.sim.serve import SimCluster, SimOptions
from tests.integration.detacher.harness import Cluster, Operator, install
from tests.waiting import until

SCENARIO = """
seed: 3
timeScale: 10
nodeGroups:
  - name: web
    size: 3
    zone: eu-west-1a
    bootSeconds: 5
loadBalancers:
  - name: web-tg
    type: target-group
    port: 30080
    nodeGroups: [web]
  - name: web-clb
    type: classic
    port: 80
    nodeGroups: [web]
  - name: other-tg
    type: target-group
    port: 31000
    nodeGroups: [web]
"""

TG = LoadBalancerTarget(TARGET_GROUP, "web-tg", 30080)
CLB = LoadBalancerTarget(CLASSIC, "web-clb")
OTHER = LoadBalancerTarget(TARGET_GROUP, "other-tg", 31000)
ALL = [CLB, OTHER, TG]


class Env:
    def __init__(self, sim: SimCluster, client: Client, provider: SimProvider) -> None:
        self.sim = sim
        self.client = client
        self.provider = provider
        self.cluster = Cluster(client)
        self.operators: list[Operator] = []

    async def operator(self, **settings: Any) -> Operator:
        op = await Operator(self.sim.server.url, None, self.provider, **settings).start()
        self.operators.append(op)
        return op

    async def nodes(self) -> list[dict[str, Any]]:
        items, _ = await self.client.list(NODES)
        return sorted(items, key=lambda n: n["metadata"]["name"])

    def instance(self, node: dict[str, Any]) -> str:
        return str(node["spec"]["providerID"].rsplit("/", 1)[1])

    async def registered(self, instance: str) -> list[LoadBalancerTarget]:
        return (await self.provider.registrations()).get(instance, [])


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    path = tmp_path / "cluster.yaml"
    path.write_text(SCENARIO)
    sim = SimCluster(SimOptions(scenario=str(path)))
    await sim.start()
    provider = create_provider("sim", {"url": sim.server.url, "poll_interval": 0.05})
    assert isinstance(provider, SimProvider)
    async with aiohttp.ClientSession() as session:
        for lb in ("web-tg", "web-clb", "other-tg"):
            async with session.patch(
                f"{sim.server.url}/sim/cloud/loadbalancers/{lb}",
                json={"deregistrationDelaySeconds": 10},
            ) as resp:
                assert resp.status == 200
    client = Client(sim.server.url, qps=0, timeout=10)
    await install(client)
    env = Env(sim, client, provider)
    try:
        yield env
    finally:
        for op in env.operators:
            await op.stop()
        await client.close()
        await provider.close()
        await sim.stop()


async def test_cordon_detaches_and_uncordon_attaches_the_same_targets(env: Env) -> None:
    await env.operator()
    first, second, _ = await env.nodes()
    name, instance = first["metadata"]["name"], env.instance(first)
    assert await env.registered(instance) == ALL

    await env.cluster.cordon(name)
    record = await env.cluster.wait_phase(name, "Detached")

    assert await env.registered(instance) == []
    assert await env.registered(env.instance(second)) == ALL
    states = {
        (t["type"], t["name"], t.get("port")): t["state"] for t in record["status"]["targets"]
    }
    assert states == {
        ("classic", "web-clb", None): "Deregistered",
        ("target-group", "other-tg", 31000): "Deregistered",
        ("target-group", "web-tg", 30080): "Deregistered",
    }
    assert record["status"]["reason"] == "Unschedulable"
    node = await env.cluster.node(name)
    assert signals.DETACHING_ANNOTATION in node["metadata"]["annotations"]
    assert node["metadata"]["labels"][signals.EXCLUDE_LABEL] == signals.EXCLUDE_LABEL_VALUE
    condition = next(c for c in node["status"]["conditions"] if c["type"] == "NodeDetached")
    assert (condition["status"], condition["reason"]) == ("True", "Unschedulable")
    # The kubelet's own conditions are untouched by ours.
    assert any(c["type"] == "Ready" for c in node["status"]["conditions"])

    await env.cluster.cordon(name, on=False)
    await env.cluster.wait_phase(name, "Attached")
    assert await env.registered(instance) == ALL
    assert (
        REGISTRY.get_sample_value(
            "nodeops_detacher_target_calls_total", {"call": "register", "outcome": "ok"}
        )
        >= 3
    )
    node = await env.cluster.node(name)
    assert signals.DETACHING_ANNOTATION not in (node["metadata"].get("annotations") or {})
    assert signals.EXCLUDE_LABEL not in node["metadata"]["labels"]
    condition = next(c for c in node["status"]["conditions"] if c["type"] == "NodeDetached")
    assert condition["status"] == "False"


async def test_waits_for_the_deregistration_delay(env: Env) -> None:
    await env.operator()
    first = (await env.nodes())[0]
    name = first["metadata"]["name"]
    await env.cluster.cordon(name)

    async def draining() -> bool:
        record = await env.cluster.record(name)
        targets = ((record or {}).get("status") or {}).get("targets") or []
        return any(t["state"] == "Draining" for t in targets)

    await until(draining, timeout=30, what="a target draining")
    assert await env.cluster.phase(name) == "Detaching"
    await env.cluster.wait_phase(name, "Detached")


async def _faults(env: Env, spec: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.put(
            f"{env.sim.server.url}/sim/faults", json={"spec": spec, "seed": 1}
        ) as resp:
            assert resp.status == 200, await resp.text()


async def _deregistrations(env: Env) -> int:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{env.sim.server.url}/sim/requests") as resp:
            stats = await resp.json()
    return int(stats["by_verb_resource"].get("delete/cloud/targets", {}).get("requests", 0))


async def test_a_delayed_watch_never_detaches_a_node_that_stays(env: Env) -> None:
    """The operator learns of a cordon two seconds late, when it has long been undone: the
    API server is asked again before anything is deregistered, and nothing is."""
    await _faults(env, "watch-delay=2s@nodes")
    op = await env.operator()
    first = (await env.nodes())[0]
    name, instance = first["metadata"]["name"], env.instance(first)
    await until(op.running, what="the operator running")

    await env.cluster.cordon(name)
    await env.cluster.cordon(name, on=False)
    # The stale "cordoned" reaches the operator at ~2s, the correction at ~2s too; wait until
    # both have surely been seen, then some.
    assert await _node_seen_uncordoned(op, name)
    await until(op.idle, timeout=30, what="the operator done with both events")
    assert await _deregistrations(env) == 0
    assert await env.registered(instance) == ALL
    assert await env.cluster.record(name) is None

    # A cordon that stays is acted on, late but surely.
    await env.cluster.cordon(name)
    await env.cluster.wait_phase(name, "Detached", timeout=60)
    assert await env.registered(instance) == []


async def _node_seen_uncordoned(op: Operator, name: str) -> bool:
    """Wait until the operator's own cache has seen the cordon come and go."""
    assert op.manager is not None
    nodes = op.manager.informers.informer(NODES)
    saw: list[bool] = []

    async def cycled() -> bool:
        node = nodes.get(name)
        if node is None:
            return False
        cordoned = bool(node["spec"].get("unschedulable"))
        if not saw or saw[-1] != cordoned:
            saw.append(cordoned)
        return saw[-2:] == [True, False]

    return await until(cycled, timeout=30, what="the delayed cordon and uncordon seen")


async def test_services_discovery_and_static_targets_leave_only_those(env: Env) -> None:
    """discovery=services: the load balancers tagged for a NodePort Service, plus a static
    target; a load balancer neither names keeps the node."""
    tags = {"kubernetes.io/service-name": "shop/web", "kubernetes.io/cluster/c1": "owned"}
    async with aiohttp.ClientSession() as session:
        async with session.patch(
            f"{env.sim.server.url}/sim/cloud/loadbalancers/web-tg", json={"tags": tags}
        ) as resp:
            assert resp.status == 200
    await env.client.create(NAMESPACES, {"metadata": {"name": "shop"}})
    service = {
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80}]},
    }
    await env.client.create(SERVICES, service, "shop")
    await env.operator(discovery="services", cluster_name="c1", static_targets=["classic:web-clb"])
    first = (await env.nodes())[0]
    name, instance = first["metadata"]["name"], env.instance(first)

    await env.cluster.cordon(name)
    record = await env.cluster.wait_phase(name, "Detached")

    assert await env.registered(instance) == [OTHER]
    assert [(t["type"], t["name"], t.get("source")) for t in record["spec"]["targets"]] == [
        ("classic", "web-clb", "Static"),
        ("target-group", "web-tg", "Discovered"),
    ]
    await env.cluster.cordon(name, on=False)
    await env.cluster.wait_phase(name, "Attached")
    assert await env.registered(instance) == ALL


async def test_a_deleted_node_takes_its_record_along(env: Env) -> None:
    op = await env.operator()
    name = (await env.nodes())[2]["metadata"]["name"]
    await env.cluster.cordon(name)
    await env.cluster.wait_phase(name, "Detached")
    await env.client.delete(NODES, name)

    async def gone() -> bool:
        return await env.cluster.record(name) is None

    await until(gone, timeout=30, what="the record removed")
    await until(op.idle, what="the operator idle")


async def test_an_invalid_record_is_reported_naming_the_field(env: Env) -> None:
    await env.operator()
    name = (await env.nodes())[1]["metadata"]["name"]
    body = {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "LoadBalancerAttachment",
        "metadata": {"name": name, "namespace": "nodeops-system"},
        "spec": {
            "nodeName": name,
            "targets": [{"type": "classic", "name": "a"}, {"type": "classic", "name": "a"}],
        },
    }
    await env.client.create(ATTACHMENTS, body, "nodeops-system")
    record = await env.cluster.wait_phase(name, "Invalid")
    assert record["status"]["message"] == (
        "invalid: spec.targets[1]: Duplicate value: same as spec.targets[0]"
    )
    # Nothing is done to the node meanwhile: a cordon does not detach it.
    await env.cluster.cordon(name)
    first = (await env.nodes())[1]
    assert await env.registered(env.instance(first)) == ALL
