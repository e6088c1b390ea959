"""The simulated cloud through its HTTP API, in a whole simulated cluster on loopback.

Every wait is bounded and polls the API; the assertions about delays compare simulated
timestamps (a node's creationTimestamp against its instance's launch time), never wall time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nodeops.cli import build_parser
from nodeops.sim.objects import NODE_GROUP_LABEL
from nodeops.sim.serve import SimCluster, SimOptions
from tests.waiting import until

from .conftest import Api

TIME_SCALE = 200.0
BOOT_SECONDS = 30

SCENARIO = f"""
seed: 3
nodeGroups:
  - name: web
    size: 2
    zone: eu-west-1a
    launchVersion: "1"
    labels:
      workload: web
    taints:
      - key: dedicated
        value: web
        effect: NoSchedule
    bootSeconds: {BOOT_SECONDS}
  - name: batch
    size: 1
    zone: eu-west-1b
    bootSeconds: {BOOT_SECONDS}
  - name: slow
    size: 0
    zone: eu-west-1c
    bootSeconds: 86400
workloads:
  - kind: Deployment
    name: app
    replicas: 4
    nodeSelector:
      workload: web
    tolerations:
      - key: dedicated
        operator: Equal
        value: web
        effect: NoSchedule
loadBalancers:
  - name: web-tg
    type: target-group
    port: 8080
    nodeGroups: [web]
  - name: web-clb
    type: classic
    port: 80
    nodeGroups: [web]
"""


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Cloud:
    """The cluster and a client for both its Kubernetes and its cloud API."""

    def __init__(self, cluster: SimCluster, api: Api) -> None:
        self.cluster = cluster
        self.api = api

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, data = await self.api.call(method, path, body, **kw)
        assert status == 200, (status, data)
        return data

    async def group(self, name: str) -> dict[str, Any]:
        return dict(await self.ok("GET", f"/sim/cloud/nodegroups/{name}"))

    async def instance(self, iid: str) -> dict[str, Any]:
        return dict(await self.ok("GET", f"/sim/cloud/instances/{iid}"))

    async def members(self, group: str) -> dict[str, str]:
        return {
            i["instanceId"]: i["lifecycleState"] for i in (await self.group(group))["instances"]
        }

    async def targets(self, lb: str) -> dict[tuple[str, int], str]:
        data = await self.ok("GET", f"/sim/cloud/loadbalancers/{lb}/targets")
        return {(t["instanceId"], t["port"]): t["state"] for t in data["targets"]}

    async def nodes(self) -> dict[str, dict[str, Any]]:
        data = await self.ok("GET", "/api/v1/nodes")
        return {n["spec"].get("providerID", ""): n for n in data["items"]}

    async def node_of(self, iid: str) -> dict[str, Any] | None:
        instance = await self.instance(iid)
        return (await self.nodes()).get(instance["providerId"])

    async def pods_on(self, node: str) -> list[str]:
        data = await self.ok(
            "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node}"}
        )
        return [p["metadata"]["name"] for p in data["items"]]


@pytest.fixture
async def cloud(tmp_path: Path) -> AsyncIterator[Cloud]:
    path = tmp_path / "cloud.yaml"
    path.write_text(SCENARIO)
    cluster = SimCluster(SimOptions(scenario=str(path), time_scale=TIME_SCALE))
    await cluster.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield Cloud(cluster, Api(session, cluster.server.url, cluster.server.admin_token))
    finally:
        await cluster.stop()


async def test_scenario_groups_start_in_service_with_their_nodes(cloud: Cloud) -> None:
    data = await cloud.ok("GET", "/sim/cloud/nodegroups", params={"names": "batch,web,nope"})
    assert [g["name"] for g in data["nodeGroups"]] == ["batch", "web"]
    web = await cloud.group("web")
    assert (web["desiredCapacity"], web["minSize"], web["maxSize"]) == (2, 0, 4)
    assert await cloud.members("web") == {"sim-web-0": "InService", "sim-web-1": "InService"}
    nodes = await cloud.nodes()
    for instance in web["instances"]:
        node = nodes[instance["providerId"]]
        assert instance["providerId"] == f"sim:///web/{instance['instanceId']}"
        assert node["metadata"]["name"] == instance["privateDnsName"]
        assert node["metadata"]["labels"][NODE_GROUP_LABEL] == "web"
    assert await cloud.targets("web-tg") == {
        ("sim-web-0", 8080): "healthy",
        ("sim-web-1", 8080): "healthy",
    }
    assert set(await cloud.targets("web-clb")) == {("sim-web-0", 80), ("sim-web-1", 80)}


async def test_boot_delay_then_node_with_provider_id_labels_and_taints(cloud: Cloud) -> None:
    group = await cloud.ok("PATCH", "/sim/cloud/nodegroups/web", {"desiredCapacity": 3})
    assert group["desiredCapacity"] == 3

    async def booted() -> dict[str, Any] | None:
        instance = await cloud.instance("sim-web-2")
        return instance if instance["lifecycleState"] == "InService" else None

    instance = await until(booted, what="the new instance in service")
    assert instance["launchVersion"] == "1" and instance["zone"] == "eu-west-1a"
    node = await cloud.node_of("sim-web-2")
    assert node is not None
    assert node["spec"]["providerID"] == "sim:///web/sim-web-2"
    assert node["metadata"]["name"] == instance["privateDnsName"]
    labels = node["metadata"]["labels"]
    assert labels["workload"] == "web" and labels[NODE_GROUP_LABEL] == "web"
    assert labels["topology.kubernetes.io/zone"] == "eu-west-1a"
    assert {"key": "dedicated", "value": "web", "effect": "NoSchedule"} in node["spec"]["taints"]
    # The kubelet registered the node once the machine had booted, on the simulated clock.
    booted_after = _time(node["metadata"]["creationTimestamp"]) - _time(instance["launchTime"])
    assert booted_after.total_seconds() >= BOOT_SECONDS - 1
    # In service, it joins the group's load balancers.
    assert (await cloud.targets("web-tg"))[("sim-web-2", 8080)] == "healthy"


async def test_detach_launches_a_replacement_and_keeps_desired(cloud: Cloud) -> None:
    web_node = await cloud.node_of("sim-web-0")
    assert web_node is not None
    data = await cloud.ok(
        "POST", "/sim/cloud/nodegroups/web/detach", {"instanceIds": ["sim-web-0"]}
    )
    assert data["instances"][0]["lifecycleState"] == "Detaching"
    assert (await cloud.group("web"))["desiredCapacity"] == 2
    # Detaching deregisters it from the group's load balancers at once.
    assert (await cloud.targets("web-tg"))[("sim-web-0", 8080)] == "draining"

    async def replaced() -> bool:
        return await cloud.members("web") == {
            "sim-web-1": "InService",
            "sim-web-2": "InService",
        }

    await until(replaced, what="the replacement in service and the detached one gone")
    detached = await cloud.instance("sim-web-0")
    assert detached["nodeGroup"] is None and detached["lifecycleState"] == "Detached"
    assert detached["state"] == "running" and detached["providerId"] == "sim:///web/sim-web-0"
    assert await cloud.node_of("sim-web-0") is not None  # the machine runs on
    assert (await cloud.group("web"))["desiredCapacity"] == 2

    status, error = await cloud.api.post(
        "/sim/cloud/nodegroups/web/detach", {"instanceIds": ["sim-web-0"]}
    )
    assert (status, error["code"]) == (400, "ValidationError")


async def test_detach_with_decrement_and_of_a_pending_instance(cloud: Cloud) -> None:
    await cloud.ok(
        "POST",
        "/sim/cloud/nodegroups/web/detach",
        {"instanceIds": ["sim-web-1"], "shouldDecrementDesiredCapacity": True},
    )
    assert (await cloud.group("web"))["desiredCapacity"] == 1

    async def left() -> bool:
        return await cloud.members("web") == {"sim-web-0": "InService"}

    await until(left, what="the instance detached without a replacement")
    await cloud.ok("PATCH", "/sim/cloud/nodegroups/web", {"minSize": 1})
    status, error = await cloud.api.post(
        "/sim/cloud/nodegroups/web/detach",
        {"instanceIds": ["sim-web-0"], "shouldDecrementDesiredCapacity": True},
    )
    assert (status, error["code"]) == (400, "ValidationError")
    assert "minimum size 1" in error["message"]

    # The slow group's machines take a simulated day to boot.
    await cloud.ok("PATCH", "/sim/cloud/nodegroups/slow", {"desiredCapacity": 1})
    await until(lambda: _lifecycle(cloud, "sim-slow-0", "Pending"), what="a pending instance")
    status, error = await cloud.api.post(
        "/sim/cloud/nodegroups/slow/detach", {"instanceIds": ["sim-slow-0"]}
    )
    assert (status, error["code"]) == (409, "IncorrectInstanceState")


async def test_attach_raises_desired_within_max(cloud: Cloud) -> None:
    await cloud.ok("POST", "/sim/cloud/nodegroups/web/detach", {"instanceIds": ["sim-web-0"]})

    async def detached() -> bool:
        return (await cloud.instance("sim-web-0"))["lifecycleState"] == "Detached"

    await until(detached, what="the instance detached")
    data = await cloud.ok(
        "POST", "/sim/cloud/nodegroups/web/attach", {"instanceIds": ["sim-web-0"]}
    )
    assert data["instances"][0]["lifecycleState"] == "InService"
    web = await cloud.group("web")
    assert web["desiredCapacity"] == 3
    assert "sim-web-0" in {i["instanceId"] for i in web["instances"]}
    # Back in the group, it is back behind the group's load balancers.
    assert (await cloud.targets("web-tg"))[("sim-web-0", 8080)] == "healthy"
    # Attaching an attached instance changes nothing.
    await cloud.ok("POST", "/sim/cloud/nodegroups/web/attach", {"instanceIds": ["sim-web-0"]})
    assert (await cloud.group("web"))["desiredCapacity"] == 3

    status, error = await cloud.api.post(
        "/sim/cloud/nodegroups/batch/attach", {"instanceIds": ["sim-web-0"]}
    )
    assert (status, error["code"]) == (400, "InstanceInOtherGroup")

    await cloud.ok("PATCH", "/sim/cloud/nodegroups/web", {"maxSize": 3})
    await cloud.ok("POST", "/sim/cloud/nodegroups/web/detach", {"instanceIds": ["sim-web-1"]})
    await until(
        lambda: _lifecycle(cloud, "sim-web-1", "Detached"), what="the second instance detached"
    )
    status, error = await cloud.api.post(
        "/sim/cloud/nodegroups/web/attach", {"instanceIds": ["sim-web-1"]}
    )
    assert (status, error["code"]) == (400, "ValidationError")
    assert "maximum size 3" in error["message"]


async def _lifecycle(cloud: Cloud, iid: str, state: str) -> bool:
    return (await cloud.instance(iid))["lifecycleState"] == state


async def test_terminate_makes_the_node_not_ready_then_removes_it_and_its_pods(
    cloud: Cloud,
) -> None:
    cloud.cluster.cloud.settings.shutdown_seconds = 300  # 1.5 s of wall time to see NotReady
    node = await cloud.node_of("sim-web-0")
    assert node is not None
    name = node["metadata"]["name"]
    await until(lambda: cloud.pods_on(name), what="pods on the node")

    data = await cloud.ok("DELETE", "/sim/cloud/instances/sim-web-0")
    assert (data["lifecycleState"], data["state"]) == ("Terminating", "shutting-down")
    assert (await cloud.targets("web-tg"))[("sim-web-0", 8080)] == "draining"
    # Terminating an instance that is terminating is fine.
    await cloud.ok("DELETE", "/sim/cloud/instances/sim-web-0")

    async def not_ready() -> bool:
        current = await cloud.node_of("sim-web-0")
        conditions = {c["type"]: c["status"] for c in (current or {})["status"]["conditions"]}
        return conditions.get("Ready") == "False"

    await until(not_ready, what="the node NotReady")

    async def node_gone() -> bool:
        return await cloud.node_of("sim-web-0") is None

    await until(node_gone, what="the node deleted")

    async def pods_gone() -> bool:
        return not await cloud.pods_on(name)

    await until(pods_gone, what="the node's pods removed")
    instance = await cloud.instance("sim-web-0")
    assert (instance["lifecycleState"], instance["state"]) == ("Terminated", "terminated")
    assert instance["nodeGroup"] is None and instance["terminateTime"]
    # The group replaced it without changing its desired capacity.
    await until(
        lambda: _lifecycle(cloud, "sim-web-2", "InService"), what="the replacement in service"
    )
    web = await cloud.group("web")
    assert web["desiredCapacity"] == 2
    assert {i["instanceId"] for i in web["instances"]} == {"sim-web-1", "sim-web-2"}

    status, error = await cloud.api.delete("/sim/cloud/instances/sim-nope-0")
    assert (status, error["code"]) == (404, "InstanceNotFound")


async def test_new_launch_version_makes_instances_out_of_date(cloud: Cloud) -> None:
    await cloud.ok("PATCH", "/sim/cloud/nodegroups/web", {"launchVersion": "2"})
    web = await cloud.group("web")
    assert web["launchVersion"] == "2"
    assert {i["instanceId"]: i["outOfDate"] for i in web["instances"]} == {
        "sim-web-0": True,
        "sim-web-1": True,
    }
    await cloud.ok("PATCH", "/sim/cloud/nodegroups/web", {"desiredCapacity": 3})
    await until(
        lambda: _lifecycle(cloud, "sim-web-2", "InService"), what="a new instance in service"
    )
    new = await cloud.instance("sim-web-2")
    assert (new["launchVersion"], new["outOfDate"]) == ("2", False)

    # Scaling in takes out-of-date instances first and never a protected one.
    await cloud.ok("PATCH", "/sim/cloud/instances/sim-web-0", {"protectedFromScaleIn": True})
    await cloud.ok("PATCH", "/sim/cloud/nodegroups/web", {"desiredCapacity": 2})

    async def scaled_in() -> bool:
        return (await cloud.instance("sim-web-1"))["state"] in ("shutting-down", "terminated")

    await until(scaled_in, what="the unprotected out-of-date instance terminated")
    assert (await cloud.instance("sim-web-0"))["state"] == "running"
    assert (await cloud.instance("sim-web-2"))["state"] == "running"

    status, error = await cloud.api.patch("/sim/cloud/nodegroups/web", {"desiredCapacity": 9})
    assert (status, error["code"]) == (400, "ValidationError")


async def test_load_balancer_registration_and_draining(cloud: Cloud) -> None:
    lb = await cloud.ok(
        "PATCH", "/sim/cloud/loadbalancers/web-tg", {"deregistrationDelaySeconds": 100}
    )
    assert lb["deregistrationDelaySeconds"] == 100

    data = await cloud.ok("DELETE", "/sim/cloud/loadbalancers/web-tg/targets/sim-web-1")
    assert [t["state"] for t in data["targets"]] == ["draining"]
    # Deregistering a draining target again changes nothing.
    data = await cloud.ok("DELETE", "/sim/cloud/loadbalancers/web-tg/targets/sim-web-1")
    assert data["targets"] == []

    async def drained() -> bool:
        return ("sim-web-1", 8080) not in await cloud.targets("web-tg")

    await until(drained, what="the deregistration delay over")
    status, error = await cloud.api.delete("/sim/cloud/loadbalancers/web-tg/targets/sim-web-1")
    assert (status, error["code"]) == (404, "TargetNotFound")

    # Registering per port, and again (a no-op); re-registering cancels draining.
    target = await cloud.ok(
        "POST", "/sim/cloud/loadbalancers/web-tg/targets", {"instanceId": "sim-web-1"}
    )
    assert (target["port"], target["state"]) == (8080, "healthy")
    await cloud.ok(
        "POST", "/sim/cloud/loadbalancers/web-tg/targets", {"instanceId": "sim-web-1", "port": 9090}
    )
    await cloud.ok(
        "POST", "/sim/cloud/loadbalancers/web-tg/targets", {"instanceId": "sim-web-1", "port": 9090}
    )
    await cloud.ok(
        "DELETE", "/sim/cloud/loadbalancers/web-tg/targets/sim-web-1", params={"port": "9090"}
    )
    await cloud.ok(
        "POST", "/sim/cloud/loadbalancers/web-tg/targets", {"instanceId": "sim-web-1", "port": 9090}
    )
    targets = await cloud.targets("web-tg")
    assert targets[("sim-web-1", 8080)] == targets[("sim-web-1", 9090)] == "healthy"
    found = await cloud.ok("GET", "/sim/cloud/loadbalancers", params={"instanceId": "sim-web-1"})
    by_lb = {lb["name"]: [t["port"] for t in lb["targets"]] for lb in found["loadBalancers"]}
    assert by_lb == {"web-tg": [8080, 9090], "web-clb": [80]}

    # A classic load balancer registers instances on its own port only.
    status, error = await cloud.api.post(
        "/sim/cloud/loadbalancers/web-clb/targets", {"instanceId": "sim-web-1", "port": 81}
    )
    assert (status, error["code"]) == (400, "ValidationError")
    status, error = await cloud.api.post(
        "/sim/cloud/loadbalancers/web-tg/targets", {"instanceId": "sim-nope-1"}
    )
    assert (status, error["code"]) == (400, "InvalidTarget")
    status, error = await cloud.api.get("/sim/cloud/loadbalancers/nope/targets")
    assert (status, error["code"]) == (404, "LoadBalancerNotFound")


async def test_faults_and_accounting_cover_the_cloud(cloud: Cloud) -> None:
    await cloud.ok("DELETE", "/sim/requests")
    status, _ = await cloud.api.put("/sim/faults", "error=500@*/cloud/*")
    assert status == 200
    status, error = await cloud.api.get("/sim/cloud/nodegroups")
    assert (status, error["code"]) == (500, "InternalError")
    status, _ = await cloud.api.get("/api/v1/nodes")
    assert status == 200  # the Kubernetes API is not a cloud resource

    spec = "error=429@list/cloud/instances:retry-after=2; error=409@delete/cloud/instances"
    await cloud.api.put("/sim/faults", spec)
    async with cloud.api.session.get(cloud.cluster.server.url + "/sim/cloud/instances") as resp:
        assert resp.status == 429 and resp.headers["Retry-After"] == "2"
        assert (await resp.json())["code"] == "Throttling"
    status, error = await cloud.api.delete("/sim/cloud/instances/sim-web-0")
    assert (status, error["code"]) == (409, "ResourceContention")
    assert (await cloud.instance("sim-web-0"))["state"] == "running"
    faults = await cloud.ok("GET", "/sim/faults")
    assert faults["counts"]["error-429"] == 1 and faults["counts"]["error-409"] == 1

    await cloud.api.put("/sim/faults", "")
    await cloud.ok("GET", "/sim/cloud/nodegroups")
    stats = await cloud.ok("GET", "/sim/requests")
    pairs = stats["by_verb_resource"]
    assert pairs["list/cloud/nodegroups"]["requests"] == 2
    assert pairs["list/cloud/instances"]["requests"] == 1
    assert pairs["delete/cloud/instances"]["requests"] == 1
    assert stats["by_code"]["500"]["requests"] == 1


async def test_a_booted_instance_waits_for_the_api_server_to_take_its_node(cloud: Cloud) -> None:
    await cloud.api.put("/sim/faults", "error=500@create/nodes")
    await cloud.ok("PATCH", "/sim/cloud/nodegroups/batch", {"desiredCapacity": 2})

    async def refused() -> bool:
        faults = await cloud.ok("GET", "/sim/faults")
        return bool(faults["counts"]["error-500"] >= 2)

    await until(refused, what="node registrations refused")
    assert (await cloud.instance("sim-batch-1"))["lifecycleState"] == "Pending"
    await cloud.api.put("/sim/faults", "")
    await until(lambda: _lifecycle(cloud, "sim-batch-1", "InService"), what="the retried boot")
    assert await cloud.node_of("sim-batch-1") is not None


async def test_cloud_api_needs_the_token_when_the_simulator_does(tmp_path: Path) -> None:
    path = tmp_path / "cloud.yaml"
    path.write_text(SCENARIO)
    # Plain HTTP: this is about tokens, and these clients are not given the simulator's CA.
    cluster = SimCluster(
        SimOptions(scenario=str(path), time_scale=TIME_SCALE, auth=True, tls=False)
    )
    await cluster.start()
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, cluster.server.url, None)
            status, error = await api.get("/sim/cloud/nodegroups")
            assert (status, error["code"]) == (401, "Unauthorized")
            status, _ = await api.get("/sim/cloud/nodegroups", token="wrong")
            assert status == 401
            status, data = await api.get("/sim/cloud/nodegroups", token=cluster.server.admin_token)
            assert status == 200 and len(data["nodeGroups"]) == 3
            # The cloud registers booted nodes with the admin token.
            await api.patch(
                "/sim/cloud/nodegroups/batch",
                {"desiredCapacity": 2},
                token=cluster.server.admin_token,
            )

            async def booted() -> bool:
                _, nodes = await api.get("/api/v1/nodes", token=cluster.server.admin_token)
                ids = {n["spec"].get("providerID") for n in nodes["items"]}
                return "sim:///batch/sim-batch-1" in ids

            await until(booted, what="the new node registered")
    finally:
        await cluster.stop()


async def test_node_groups_without_a_scenario() -> None:
    args = build_parser().parse_args(["sim", "serve", "--node-groups", "2", "--nodes", "2"])
    assert args.node_groups == 2
    cluster = SimCluster(SimOptions(nodes=2, node_groups=2, pods_per_node=1, time_scale=TIME_SCALE))
    await cluster.start()
    try:
        async with aiohttp.ClientSession() as session:
            cloud = Cloud(cluster, Api(session, cluster.server.url, None))
            data = await cloud.ok("GET", "/sim/cloud/nodegroups")
            assert [(g["name"], g["desiredCapacity"]) for g in data["nodeGroups"]] == [
                ("group-0", 2),
                ("group-1", 2),
            ]
            nodes = await cloud.nodes()
            assert set(nodes) == {
                f"sim:///group-{g}/sim-group-{g}-{i}" for g in range(2) for i in range(2)
            }
            for node in nodes.values():
                assert len(await cloud.pods_on(node["metadata"]["name"])) == 1
    finally:
        await cluster.stop()
