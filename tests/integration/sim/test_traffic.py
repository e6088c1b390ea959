"""Simulated traffic through a load balancer to NodePort backends, over the cloud's HTTP API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nodeops.sim.serve import SimCluster, SimOptions
from tests.waiting import until

SCENARIO = """
seed: 5
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
    terminationGracePeriodSeconds: 5
    service:
      port: 80
      type: NodePort
loadBalancers:
  - name: ingress-lb
    type: target-group
    port: 30080
    nodeGroups: [web]
"""


class Sim:
    def __init__(self, cluster: SimCluster, session: aiohttp.ClientSession) -> None:
        self.cluster = cluster
        self.session = session
        self.url = cluster.server.url

    async def call(
        self, method: str, path: str, body: Any = None, *, status: int = 200, **kw: Any
    ) -> Any:
        headers = kw.pop("headers", None)
        async with self.session.request(
            method, self.url + path, json=body, headers=headers, **kw
        ) as resp:
            data = await resp.json()
            assert resp.status == status, (resp.status, data)
            return data

    async def flow(self) -> dict[str, Any]:
        return dict(await self.call("GET", "/sim/cloud/traffic/ingress-lb"))

    async def ingress_pod(self, node: str) -> dict[str, Any] | None:
        pods = await self.call(
            "GET",
            "/api/v1/namespaces/edge/pods",
            params={"fieldSelector": f"spec.nodeName={node}"},
        )
        live = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
        return live[0] if live else None

    async def ready_everywhere(self) -> bool:
        nodes = await self.call("GET", "/api/v1/nodes")
        for node in nodes["items"]:
            pod = await self.ingress_pod(node["metadata"]["name"])
            conditions = {
                c["type"]: c["status"] for c in (pod or {}).get("status", {}).get("conditions", [])
            }
            if conditions.get("Ready") != "True":
                return False
        return True


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Sim]:
    path = tmp_path / "traffic.yaml"
    path.write_text(SCENARIO)
    cluster = SimCluster(SimOptions(scenario=str(path)))
    await cluster.start()
    try:
        async with aiohttp.ClientSession() as session:
            sim = Sim(cluster, session)
            await sim.call(
                "PATCH",
                "/api/v1/namespaces/edge/services/ingress",
                {"spec": {"externalTrafficPolicy": "Local"}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            await until(sim.ready_everywhere, timeout=30, what="an ingress pod ready on every node")
            yield sim
    finally:
        await cluster.stop()


FLOW = {
    "loadBalancer": "ingress-lb",
    "service": "edge/ingress",
    "requestsPerSecond": 30,
    "requestSeconds": 0.5,
    "healthCheck": {"intervalSeconds": 2, "healthyThreshold": 2, "unhealthyThreshold": 2},
}


async def _settled(sim: Sim, count: int) -> dict[str, Any]:
    async def enough() -> dict[str, Any] | None:
        flow = await sim.flow()
        return flow if flow["succeeded"] >= count else None

    return await until(enough, timeout=30, what=f"{count} requests through")


async def test_requests_are_spread_over_healthy_targets_and_recorded(sim: Sim) -> None:
    started = await sim.call("POST", "/sim/cloud/traffic", FLOW)
    assert started["service"] == "edge/ingress"
    await sim.call("POST", "/sim/cloud/traffic", FLOW, status=409)
    flow = await _settled(sim, 60)
    assert flow["failed"] == 0
    assert len(flow["nodes"]) == 3
    assert {t["health"] for t in flow["targets"]} == {"healthy"}
    records = await sim.call("GET", "/sim/cloud/traffic/ingress-lb/requests", params={"limit": "5"})
    assert len(records["requests"]) == 5
    done = [r for r in records["requests"] if r["outcome"] == "succeeded"]
    assert all(
        r["pod"].startswith("edge/ingress-") and r["completedAt"] > r["sentAt"] for r in done
    )

    stopped = await sim.call("DELETE", "/sim/cloud/traffic/ingress-lb")
    assert stopped["stoppedAt"] is not None
    await until(lambda: _no_in_flight(sim), what="requests in flight to finish")
    after = await sim.flow()
    assert after["sent"] == after["succeeded"] + after["failed"]


async def _no_in_flight(sim: Sim) -> bool:
    return (await sim.flow())["inFlight"] == 0


@pytest.mark.parametrize(
    "body",
    [
        {"loadBalancer": "nope", "service": "edge/ingress"},
        {"loadBalancer": "ingress-lb", "service": "ingress"},
        {"loadBalancer": "ingress-lb", "service": "edge/ingress", "requestsPerSecond": 0},
        {"loadBalancer": "ingress-lb", "service": "edge/ingress", "healthCheck": {"x": 1}},
    ],
)
async def test_bad_flows_are_refused(sim: Sim, body: dict[str, Any]) -> None:
    status = 404 if body["loadBalancer"] == "nope" else 400
    refused = await sim.call("POST", "/sim/cloud/traffic", body, status=status)
    assert refused["code"] in ("LoadBalancerNotFound", "ValidationError")


async def test_a_pod_stopping_under_the_load_balancer_fails_requests(sim: Sim) -> None:
    """Without a deregistration first, the load balancer keeps sending to a node whose local
    endpoint went away until its health checks notice, and requests in flight to the pod fail."""
    await sim.call("POST", "/sim/cloud/traffic", {**FLOW, "requestSeconds": 1.0})
    await _settled(sim, 30)
    node = (await sim.call("GET", "/api/v1/nodes"))["items"][0]["metadata"]["name"]
    pod = await sim.ingress_pod(node)
    assert pod is not None
    await sim.call(
        "DELETE",
        f"/api/v1/namespaces/edge/pods/{pod['metadata']['name']}",
        {"gracePeriodSeconds": 0},
    )

    async def failed() -> list[dict[str, Any]]:
        found = await sim.call(
            "GET",
            "/sim/cloud/traffic/ingress-lb/requests",
            params={"outcome": "failed", "node": node},
        )
        reasons = {r["reason"] for r in found["requests"]}
        wanted = {"the pod stopped with the request in flight", "no endpoint on the node"}
        return found["requests"] if wanted <= reasons else []

    await until(failed, timeout=30, what="requests failing on the node")
    flow = await sim.flow()
    assert set(flow["nodes"]) == {
        n["metadata"]["name"] for n in (await sim.call("GET", "/api/v1/nodes"))["items"]
    }
    assert flow["nodes"][node]["failed"] > 0
    # The other nodes never fail.
    assert all(c["failed"] == 0 for name, c in flow["nodes"].items() if name != node)


async def test_deregistering_first_loses_no_request(sim: Sim) -> None:
    """Deregister, wait out the deregistration delay, then stop the pod: nothing fails."""
    await sim.call(
        "PATCH", "/sim/cloud/loadbalancers/ingress-lb", {"deregistrationDelaySeconds": 3}
    )
    await sim.call("POST", "/sim/cloud/traffic", FLOW)
    await _settled(sim, 30)
    node = (await sim.call("GET", "/api/v1/nodes"))["items"][1]["metadata"]["name"]
    instance = (await sim.call("GET", "/sim/cloud/instances", params={"privateDnsName": node}))[
        "instances"
    ][0]["instanceId"]
    await sim.call("DELETE", f"/sim/cloud/loadbalancers/ingress-lb/targets/{instance}")

    async def drained() -> bool:
        targets = await sim.call(
            "GET", "/sim/cloud/loadbalancers/ingress-lb/targets", params={"instanceId": instance}
        )
        return not targets["targets"]

    await until(drained, timeout=30, what="the deregistration delay to pass")
    last = (await sim.flow())["nodes"][node]["lastSentAt"]
    pod = await sim.ingress_pod(node)
    assert pod is not None
    await sim.call(
        "DELETE",
        f"/api/v1/namespaces/edge/pods/{pod['metadata']['name']}",
        {"gracePeriodSeconds": 0},
    )
    await until(lambda: _sent_after(sim, 60), what="more requests to the other nodes")
    flow = await sim.flow()
    assert flow["failed"] == 0
    # Nothing was sent to the node once it was deregistered.
    assert flow["nodes"][node]["lastSentAt"] == last


async def _sent_after(sim: Sim, more: int) -> bool:
    flow = await sim.flow()
    return bool(flow["succeeded"] >= 30 + more)


async def test_the_load_balancer_reports_what_its_health_checks_say(sim: Sim) -> None:
    """As a target group's DescribeTargetHealth does: once a flow's checks run, a target is
    `initial` until they pass, and `unhealthy` once its node has no ready endpoint (Local)."""

    async def states() -> dict[str, str]:
        data = await sim.call("GET", "/sim/cloud/loadbalancers/ingress-lb/targets")
        return {t["instanceId"]: t["state"] for t in data["targets"]}

    # Nothing checks the targets yet: in service means healthy.
    assert set((await states()).values()) == {"healthy"}
    await sim.call("POST", "/sim/cloud/traffic", FLOW)
    assert set((await states()).values()) == {"initial"}
    await until(
        lambda: _all(states, "healthy"), timeout=30, what="the targets to pass their checks"
    )
    flow = await sim.flow()
    node = next(iter(flow["nodes"]))
    pod = await sim.ingress_pod(node)
    assert pod is not None
    # The node's endpoint goes (its DaemonSet no longer runs there): the checks notice.
    await sim.call(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"spec": {"taints": [{"key": "off", "effect": "NoExecute"}]}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    await until(lambda: _any(states, "unhealthy"), timeout=30, what="a target judged unhealthy")


async def _all(states: Any, value: str) -> bool:
    return set((await states()).values()) == {value}


async def _any(states: Any, value: str) -> bool:
    return value in (await states()).values()
