"""The detacher with the AWS provider: the simulated cluster for Kubernetes, a moto server for
ELB (classic) and ELBv2 (target groups), and the operator in between, all over loopback.

Orderings are asserted from timestamps recorded by the servers' side of the wire (the proxy in
front of moto, a request log in the simulated API server), never from the operator's own words.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodeops.controllers.detacher import signals
from nodeops.drain.options import DAEMONSET_DRAIN_TAINT
from nodeops.kube import Client
from nodeops.kube.resources import DAEMONSETS, PODS
from nodeops.sim.serve import SimCluster, SimOptions
from tests.integration.detacher.harness import Cluster, Operator, RequestLog, install
from tests.integration.providers import test_aws_support as support
from tests.integration.providers.test_aws_support import Aws
from tests.waiting import until

aws = support.aws

NODES = ("worker-a", "worker-b", "worker-c")
CLB = "web-clb"
DEREGISTER = ("DeregisterTargets", "DeregisterInstancesFromLoadBalancer")
REGISTER = ("RegisterTargets", "RegisterInstancesWithLoadBalancer")

SCENARIO = """
seed: 7
timeScale: 10
nodes:
{nodes}
namespaces: [shop, edge]
workloads:
  - kind: Deployment
    name: web
    namespace: shop
    replicas: 2
    terminationGracePeriodSeconds: 2
    nodeSelector: {{pool: a}}
    annotations: {{node-detacher.variant.run/deletion-priority: "10"}}
  - kind: Deployment
    name: cache
    namespace: shop
    replicas: 1
    terminationGracePeriodSeconds: 2
    nodeSelector: {{pool: a}}
  - kind: DaemonSet
    name: agent
    namespace: kube-system
    containers: 1
    terminationGracePeriodSeconds: 2
  - kind: DaemonSet
    name: ingress
    namespace: edge
    containers: 1
    terminationGracePeriodSeconds: 30
    service: {{port: 80, type: NodePort}}
"""


@dataclass
class Env:
    aws: Aws
    sim: SimCluster
    client: Client
    cluster: Cluster
    log: RequestLog
    instances: dict[str, str]
    tg: str
    operators: list[Operator]

    async def operator(self, **settings: Any) -> Operator:
        settings.setdefault("drain_delete_emptydir_data", True)
        op = await Operator(self.sim.server.url, None, self.aws.make_provider(), **settings).start()
        self.operators.append(op)
        await until(op.running, what="the operator running")
        return op

    def registered(self, node: str) -> set[str]:
        """Where the node's instance is registered: the CLB name and/or the target group."""
        iid = self.instances[node]
        where = set()
        if iid in self.aws.world.classic_members(CLB):
            where.add(CLB)
        if (iid, 30080) in self.aws.world.registered(self.tg):
            where.add("tg:30080")
        return where

    async def pods_on(self, node: str) -> list[dict[str, Any]]:
        items, _ = await self.client.list(PODS, field_selector=f"spec.nodeName={node}")
        return items


@pytest.fixture
async def env(aws: Aws, tmp_path: Path) -> AsyncIterator[Env]:
    instances = {name: aws.world.run_instance()["InstanceId"] for name in (*NODES, "cp-1")}
    aws.world.classic_lb(CLB)
    aws.world.elb.register_instances_with_load_balancer(
        LoadBalancerName=CLB, Instances=[{"InstanceId": i} for i in instances.values()]
    )
    tg = aws.world.target_group("web-tg", port=30080)
    aws.world.elbv2.register_targets(
        TargetGroupArn=tg, Targets=[{"Id": instances[n], "Port": 30080} for n in NODES]
    )
    lines = []
    for name, pool in zip(NODES, "abc", strict=True):
        lines.append(
            f"  - name: {name}\n    providerID: aws:///us-east-1a/{instances[name]}\n"
            f"    labels: {{pool: {pool}}}"
        )
    lines.append(
        f"  - name: cp-1\n    providerID: aws:///us-east-1a/{instances['cp-1']}\n"
        "    roles: [control-plane]"
    )
    path = tmp_path / "cluster.yaml"
    path.write_text(SCENARIO.format(nodes="\n".join(lines)))
    sim = SimCluster(SimOptions(scenario=str(path)))
    log = RequestLog()
    log.attach(sim.server)
    await sim.start()
    client = Client(sim.server.url, qps=0, timeout=10)
    await install(client)
    env = Env(aws, sim, client, Cluster(client), log, instances, tg, [])
    try:
        await until(lambda: _settled(env), timeout=60, what="every pod running")
        yield env
    finally:
        for op in env.operators:
            await op.stop()
            await op.provider.close()  # type: ignore[attr-defined]
        await client.close()
        await sim.stop()


async def _settled(env: Env) -> bool:
    items, _ = await env.client.list(PODS)
    ready = [
        p
        for p in items
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    ]
    # web x2 + cache on worker-a, agent and ingress on every node that takes them.
    return len(ready) == len(items) and len(items) >= 3 + 2 * len(NODES)


def _pod_of(path: str) -> str:
    """`/api/v1/namespaces/shop/pods/web-abc/eviction` -> `web-abc`."""
    return path.rsplit("/", 2)[-2]


async def test_cordon_detaches_from_every_target_before_any_pod_is_evicted(env: Env) -> None:
    await env.operator(stop_pods=True, stop_daemonset_pods=True)
    before = {p["metadata"]["name"] for p in await env.pods_on("worker-a")}
    assert env.registered("worker-a") == {CLB, "tg:30080"}

    await env.cluster.cordon("worker-a")
    record = await env.cluster.wait_phase("worker-a", "Detached")
    await until(lambda: _stopped(env, "worker-a"), timeout=60, what="the pods of worker-a stopped")

    assert env.registered("worker-a") == set()
    assert env.registered("worker-b") == {CLB, "tg:30080"}
    deregistered = env.aws.proxy.calls(*DEREGISTER)
    assert {c.action for c in deregistered} == set(DEREGISTER)
    evicted = [e for e in env.log.evictions() if _pod_of(e.path) in before]
    assert evicted, "the detacher evicted the node's pods"
    # Every deregistration was answered before the first eviction reached the API server.
    assert max(c.answered for c in deregistered) < min(e.arrived for e in evicted)
    # In order: deletion-priority 10 (web) first, then the rest, DaemonSet pods last.
    groups = [
        [e for e in evicted if _pod_of(e.path).startswith(prefix)]
        for prefix in ("web-", "cache-", "agent-")
    ]
    assert all(groups), [len(g) for g in groups]
    for earlier, later in itertools.pairwise(groups):
        assert max(e.arrived for e in earlier) < min(e.arrived for e in later)
    node = await env.cluster.node("worker-a")
    assert any(t["key"] == DAEMONSET_DRAIN_TAINT for t in node["spec"]["taints"])
    record = await env.cluster.record("worker-a")
    assert record is not None and record["status"]["podsStoppedAt"]

    # Uncordon: registered again in exactly the recorded targets, marks gone, daemons back.
    env.aws.proxy.reset_counts()
    await env.cluster.cordon("worker-a", on=False)
    record = await env.cluster.wait_phase("worker-a", "Attached")
    assert env.registered("worker-a") == {CLB, "tg:30080"}
    assert [(t["type"], t.get("port"), t["state"]) for t in record["status"]["targets"]] == [
        ("classic", None, "Registered"),
        ("target-group", 30080, "Registered"),
    ]
    assert env.aws.proxy.requests["RegisterTargets"] == 1
    assert env.aws.proxy.requests["RegisterInstancesWithLoadBalancer"] == 1
    node = await env.cluster.node("worker-a")
    assert not any(t["key"] == DAEMONSET_DRAIN_TAINT for t in node["spec"].get("taints") or [])
    assert signals.EXCLUDE_LABEL not in node["metadata"]["labels"]
    await until(lambda: _has_pod(env, "worker-a", "agent-"), timeout=30, what="the agent back")


async def _stopped(env: Env, node: str) -> bool:
    record = await env.cluster.record(node)
    return bool(((record or {}).get("status") or {}).get("podsStoppedAt"))


async def _has_pod(env: Env, node: str, prefix: str) -> bool:
    return any(p["metadata"]["name"].startswith(prefix) for p in await env.pods_on(node))


async def test_cluster_autoscaler_taint_detaches_and_its_removal_attaches(env: Env) -> None:
    await env.operator(stop_pods=True)
    await env.cluster.taint("worker-b", signals.CA_TAINT)
    record = await env.cluster.wait_phase("worker-b", "Detached")
    assert record["status"]["reason"] == "ToBeDeletedByClusterAutoscaler"
    assert env.registered("worker-b") == set()
    # Its pods were stopped, which cordoned the node: the detacher recorded that it did.
    await until(lambda: _stopped(env, "worker-b"), timeout=60, what="pods stopped")
    record = await env.cluster.record("worker-b")
    assert record is not None and record["status"]["cordoned"] is True
    assert (await env.cluster.node("worker-b"))["spec"]["unschedulable"] is True

    # A cancelled scale-down removes the taint: back in, and no longer cordoned.
    await env.cluster.taint("worker-b", signals.CA_TAINT, on=False)
    await env.cluster.wait_phase("worker-b", "Attached")
    assert env.registered("worker-b") == {CLB, "tg:30080"}
    assert not (await env.cluster.node("worker-b"))["spec"].get("unschedulable")


async def test_termination_handler_taint_detaches_and_other_taints_do_not(env: Env) -> None:
    op = await env.operator()
    await env.cluster.taint("worker-c", "dedicated")
    await env.cluster.taint("worker-b", "node.kubernetes.io/out-of-service")
    await env.cluster.cordon("cp-1")  # control-plane nodes are skipped by default
    await env.cluster.taint("worker-a", "aws-node-termination-handler/spot-itn")
    record = await env.cluster.wait_phase("worker-a", "Detached")
    assert record["status"]["reason"] == "NodeTerminationHandler"
    await until(op.idle, what="the operator done with the other nodes")
    for node in ("worker-b", "worker-c", "cp-1"):
        assert env.registered(node) >= {CLB}, node
        assert await env.cluster.record(node) is None, node
    assert env.registered("worker-a") == set()
    deregistered = {c.param("Targets.member.1.Id") for c in env.aws.proxy.calls(DEREGISTER[0])}
    assert deregistered == {env.instances["worker-a"]}


async def test_a_crash_between_deregistrations_is_finished_by_the_next_operator(
    env: Env,
) -> None:
    # The classic load balancer goes first; the target group's deregistration never returns
    # to this operator.
    gate = env.aws.proxy.hold("DeregisterTargets")
    first = await env.operator()
    await env.cluster.cordon("worker-b")

    async def halfway() -> dict[str, Any] | None:
        record = await env.cluster.record("worker-b")
        states = [t["state"] for t in ((record or {}).get("status") or {}).get("targets") or []]
        # The first is deregistered (draining is read once every deregistration is sent).
        return record if states == ["Draining", "Deregistering"] else None

    record = await until(halfway, timeout=30, what="the first target left, the second started")
    assert record["status"]["phase"] == "Detaching"
    await first.crash()
    gate.set()

    await env.operator()
    record = await env.cluster.wait_phase("worker-b", "Detached")
    assert [t["state"] for t in record["status"]["targets"]] == ["Deregistered", "Deregistered"]
    assert env.registered("worker-b") == set()

    await env.cluster.cordon("worker-b", on=False)
    await env.cluster.wait_phase("worker-b", "Attached")
    assert env.registered("worker-b") == {CLB, "tg:30080"}


async def test_an_ingress_rollout_detaches_each_node_while_its_pod_is_replaced(
    env: Env,
) -> None:
    await env.operator(manage_daemonset_pods=True, daemonsets=["edge/ingress"])
    seen: dict[str, set[str]] = {n: set() for n in (*NODES, "cp-1")}
    old = {
        node: [
            p["metadata"]["name"]
            for p in await env.pods_on(node)
            if "ingress" in p["metadata"]["name"]
        ]
        for node in NODES
    }

    async def watch_records() -> bool:
        for node in seen:
            record = await env.cluster.record(node)
            status = (record or {}).get("status") or {}
            if status.get("phase"):
                seen[node].add(f"{status['phase']}:{status.get('reason') or ''}")
        return False

    ds = await env.client.get(DAEMONSETS, "ingress", "edge")
    template = ds["spec"]["template"]
    annotations = {**(template["metadata"].get("annotations") or {}), "rollout": "2"}
    await env.client.patch(
        DAEMONSETS,
        "ingress",
        {"spec": {"template": {"metadata": {"annotations": annotations}}}},
        "edge",
    )

    async def rolled() -> bool:
        await watch_records()
        current = await env.client.get(DAEMONSETS, "ingress", "edge")
        status = current.get("status") or {}
        desired = status.get("desiredNumberScheduled")
        return (
            status.get("updatedNumberScheduled") == desired
            and status.get("numberReady") == desired
            and all("Attached:" in seen[n] for n in NODES)
        )

    await until(rolled, timeout=120, what="the rollout done and every worker back")
    for node in NODES:
        assert "Detached:IngressPodTerminating" in seen[node] or (
            "Detaching:IngressPodTerminating" in seen[node]
        ), seen
        assert env.registered(node) == {CLB, "tg:30080"}, node
    # Each node had left both load balancers before its old ingress pod was gone (the kubelet's
    # final delete, at the end of the pod's grace period).
    for node in NODES:
        iid = env.instances[node]
        left = [
            c.answered
            for c in env.aws.proxy.calls(*DEREGISTER)
            if iid in (c.param("Targets.member.1.Id"), c.param("Instances.member.1.InstanceId"))
        ]
        (pod,) = old[node]
        gone = max(
            e.arrived
            for e in env.log.entries
            if e.method == "DELETE" and e.path == f"/api/v1/namespaces/edge/pods/{pod}"
        )
        assert len(left) == 2, node
        assert max(left) < gone, node
    assert not any(s.startswith("Detach") for s in seen["cp-1"])
