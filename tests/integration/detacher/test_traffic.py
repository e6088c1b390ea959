"""Requests through a load balancer while a node is drained: none lost with the detacher, some
lost without it.

The simulated cloud's load balancer sends requests to the nodes of an ingress DaemonSet behind a
NodePort Service with `externalTrafficPolicy: Local`, health-checking each node as AWS does.
The node is drained completely, DaemonSet pods included (as before a scale-down):

- with the detacher (stop_pods, stop_daemonset_pods): cordon; it takes the node out of the load
  balancer, waits out the deregistration delay, then stops the pods;
- without: the same drain by the drain engine at once; the load balancer learns of it only from
  its health checks, and requests sent to the node meanwhile fail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nodeops.controllers.detacher import signals
from nodeops.drain.engine import Drainer
from nodeops.drain.options import DAEMONSET_DRAIN_TAINT, DrainOptions
from nodeops.kube import Client
from nodeops.kube.resources import NODES, PODS, SERVICES
from nodeops.providers.registry import create_provider
from nodeops.providers.sim import SimProvider
from nodeops.sim.serve import SimCluster, SimOptions
from tests.integration.detacher.harness import Cluster, Operator, install
from tests.waiting import until

SCENARIO = """
seed: 9
timeScale: 10
nodeGroups:
  - name: web
    size: 3
    zone: eu-west-1a
    bootSeconds: 5
namespaces: [edge]
workloads:
  - kind: DaemonSet
    name: ingress
    namespace: edge
    containers: 1
    terminationGracePeriodSeconds: 3
    service: {port: 80, type: NodePort}
loadBalancers:
  - name: ingress-lb
    type: target-group
    port: 30080
    nodeGroups: [web]
"""

FLOW = {
    "loadBalancer": "ingress-lb",
    "service": "edge/ingress",
    "requestsPerSecond": 30,
    "requestSeconds": 0.5,
    "healthCheck": {"intervalSeconds": 3, "healthyThreshold": 2, "unhealthyThreshold": 2},
}


class Traffic:
    def __init__(self, sim: SimCluster, session: aiohttp.ClientSession, client: Client) -> None:
        self.sim = sim
        self.session = session
        self.client = client
        self.url = f"{sim.server.url}/sim/cloud/traffic"

    async def flow(self) -> dict[str, Any]:
        async with self.session.get(f"{self.url}/ingress-lb") as resp:
            assert resp.status == 200
            return dict(await resp.json())

    async def start(self) -> None:
        async with self.session.post(self.url, json=FLOW) as resp:
            assert resp.status == 200, await resp.text()

    async def stop(self) -> dict[str, Any]:
        async with self.session.delete(f"{self.url}/ingress-lb") as resp:
            assert resp.status == 200
        await until(self._settled, timeout=30, what="requests in flight to finish")
        return await self.flow()

    async def _settled(self) -> bool:
        return (await self.flow())["inFlight"] == 0

    async def node(self) -> str:
        items, _ = await self.client.list(NODES)
        return str(sorted(n["metadata"]["name"] for n in items)[0])

    async def sent_to_others(self, node: str, more: int) -> None:
        start = await self.flow()
        before = sum(c["sent"] for n, c in start["nodes"].items() if n != node)

        async def enough() -> bool:
            now = await self.flow()
            return sum(c["sent"] for n, c in now["nodes"].items() if n != node) >= before + more

        await until(enough, timeout=60, what=f"{more} more requests to the other nodes")


@pytest.fixture
async def traffic(tmp_path: Path) -> AsyncIterator[Traffic]:
    path = tmp_path / "traffic.yaml"
    path.write_text(SCENARIO)
    sim = SimCluster(SimOptions(scenario=str(path)))
    await sim.start()
    client = Client(sim.server.url, qps=0, timeout=10)
    try:
        await install(client)
        await client.patch(
            SERVICES, "ingress", {"spec": {"externalTrafficPolicy": "Local"}}, "edge"
        )
        async with aiohttp.ClientSession() as session:
            async with session.patch(
                f"{sim.server.url}/sim/cloud/loadbalancers/ingress-lb",
                json={"deregistrationDelaySeconds": 5},
            ) as resp:
                assert resp.status == 200
            t = Traffic(sim, session, client)
            await until(lambda: _ingress_ready(client), timeout=60, what="ingress everywhere")
            await t.start()
            await until(lambda: _flowing(t), timeout=30, what="requests flowing")
            yield t
    finally:
        await client.close()
        await sim.stop()


async def _ingress_ready(client: Client) -> bool:
    pods, _ = await client.list(PODS, namespace="edge")
    ready = [
        p
        for p in pods
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    ]
    return len(ready) == 3


async def _flowing(t: Traffic) -> bool:
    flow = await t.flow()
    return flow["succeeded"] >= 30 and len(flow["nodes"]) == 3


async def test_no_request_is_lost_when_the_detacher_drains_the_node(traffic: Traffic) -> None:
    provider = create_provider("sim", {"url": traffic.sim.server.url, "poll_interval": 0.05})
    assert isinstance(provider, SimProvider)
    op = await Operator(
        traffic.sim.server.url,
        None,
        provider,
        stop_pods=True,
        stop_daemonset_pods=True,
        drain_delete_emptydir_data=True,
    ).start()
    try:
        await until(op.running, what="the operator running")
        node = await traffic.node()
        await Cluster(traffic.client).cordon(node)

        async def pods_stopped() -> bool:
            record = await Cluster(traffic.client).record(node)
            return bool(((record or {}).get("status") or {}).get("podsStoppedAt"))

        await until(pods_stopped, timeout=60, what="the node drained")
        await traffic.sent_to_others(node, 60)
        flow = await traffic.stop()
    finally:
        await op.stop()
        await provider.close()

    assert flow["failed"] == 0, flow
    assert flow["nodes"][node]["succeeded"] > 0


async def test_requests_are_lost_when_the_node_is_drained_without_it(traffic: Traffic) -> None:
    node = await traffic.node()
    options = DrainOptions(evict_daemonsets=True, delete_emptydir_data=True)
    await Drainer(traffic.client, options).drain(node)
    await traffic.sent_to_others(node, 60)
    flow = await traffic.stop()

    assert flow["nodes"][node]["failed"] > 0, flow
    assert all(c["failed"] == 0 for n, c in flow["nodes"].items() if n != node)


async def test_an_uncordoned_node_is_attached_again_after_its_ingress_pod_was_stopped(
    traffic: Traffic,
) -> None:
    """With ingress DaemonSets managed, the detacher's own stopping of the ingress pod on a
    cordoned node is no rollout: uncordoned, the node is attached again at once, its DaemonSet
    taint lifted so that the ingress pod comes back, and it takes requests again with none lost
    (the load balancer sends it nothing until its health checks pass)."""
    provider = create_provider("sim", {"url": traffic.sim.server.url, "poll_interval": 0.05})
    assert isinstance(provider, SimProvider)
    op = await Operator(
        traffic.sim.server.url,
        None,
        provider,
        stop_pods=True,
        stop_daemonset_pods=True,
        drain_delete_emptydir_data=True,
        manage_daemonset_pods=True,
        daemonsets=["edge/ingress"],
    ).start()
    cluster = Cluster(traffic.client)
    seen: set[str] = set()

    async def status(node: str) -> dict[str, Any]:
        record = await cluster.record(node)
        current = dict((record or {}).get("status") or {})
        if current.get("phase"):
            seen.add(f"{current['phase']}:{current.get('reason') or ''}")
        return current

    try:
        await until(op.running, what="the operator running")
        node = await traffic.node()
        await cluster.cordon(node)
        await until(
            lambda: _key(status(node), "podsStoppedAt"), timeout=60, what="the node drained"
        )
        await cluster.cordon(node, on=False)
        await until(
            lambda: _key(status(node), "phase", "Attached"),
            timeout=60,
            what="the node attached again",
        )
        taints = (await cluster.node(node))["spec"].get("taints") or []
        assert all(t["key"] != DAEMONSET_DRAIN_TAINT for t in taints), taints
        before = (await traffic.flow())["nodes"][node]["succeeded"]

        async def served_again() -> bool:
            return bool((await traffic.flow())["nodes"][node]["succeeded"] >= before + 30)

        await until(served_again, timeout=60, what="requests to the node again")
        flow = await traffic.stop()
    finally:
        await op.stop()
        await provider.close()

    assert not any(signals.INGRESS_ROLLOUT in s for s in seen), seen
    assert flow["failed"] == 0, flow


async def _key(current: Awaitable[dict[str, Any]], key: str, value: Any = None) -> bool:
    got = (await current).get(key)
    return bool(got) if value is None else bool(got == value)
