"""The simulated cluster's loops against the real simulated API server over loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from nodeops.common.resources import PRIORITYCLASSES
from nodeops.sim import objects
from nodeops.sim.clock import Clock, parse_time
from nodeops.sim.cluster import ClusterLoops
from nodeops.sim.cluster import sim_annotations as ann
from nodeops.sim.cluster.apiclient import (
    DAEMONSETS,
    DEPLOYMENTS,
    LEASES,
    NODES,
    PDBS,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    ApiClient,
    Conflict,
    Forbidden,
    NotFound,
    TooManyRequests,
)
from nodeops.sim.cluster.podgc import QUARANTINE_SECONDS
from nodeops.sim.server.app import SimServer

T = TypeVar("T")
NS = "default"
TIME_SCALE = 100.0


async def until(
    check: Callable[[], Awaitable[T | None]], *, timeout: float = 10.0, what: str = "condition"
) -> T:
    """Poll `check` every few milliseconds until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: Any = None
    while True:
        last = await check()
        if last:
            return last
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")
        await asyncio.sleep(0.02)


class Cluster:
    def __init__(self, server: SimServer, client: ApiClient, loops: ClusterLoops) -> None:
        self.server = server
        self.client = client
        self.loops = loops

    async def add_node(self, name: str, **kw: Any) -> dict[str, Any]:
        node = objects.make_node(name, now=self.loops.clock.now(), **kw)
        return await self.client.create(NODES, objects.for_create(node))

    async def pods(self, selector: str | None = None) -> list[dict[str, Any]]:
        return (await self.client.list(PODS, NS, label_selector=selector)).items


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _template(app: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nginx:1.27",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
            **spec,
        },
    }


def deployment(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": _template(name),
            **spec,
        },
    }


def replicaset(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": _template(name),
        },
    }


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    clock = Clock(TIME_SCALE)
    server = SimServer(clock=clock, bookmark_interval=0.2)
    await server.start()
    client = ApiClient(server.url, server.admin_token, component="test")
    loops = ClusterLoops(server.url, server.admin_token, clock, kubelet_start_seconds=1.0)
    c = Cluster(server, client, loops)
    try:
        for i in range(3):
            await c.add_node(f"node-{i}")
        await loops.start()
        yield c
    finally:
        await loops.stop()
        await client.close()
        await server.stop()


async def test_deployment_pods_run_ready_and_spread(cluster: Cluster) -> None:
    await cluster.client.create(DEPLOYMENTS, deployment("web", 6), NS)

    async def all_ready() -> list[dict[str, Any]] | None:
        pods = await cluster.pods("app=web")
        ok = len(pods) == 6 and all(
            p["status"].get("phase") == "Running" and _ready(p) for p in pods
        )
        return pods if ok else None

    pods = await until(all_ready, what="6 running ready pods")
    per_node: dict[str, int] = {}
    for p in pods:
        per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
        assert p["status"]["podIP"]
        assert p["status"]["containerStatuses"][0]["ready"] is True
        owner = p["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "ReplicaSet" and owner["controller"] is True
        assert p["metadata"]["name"].startswith(owner["name"] + "-")
    assert per_node == {"node-0": 2, "node-1": 2, "node-2": 2}

    async def deployment_available() -> dict[str, Any] | None:
        d = await cluster.client.get(DEPLOYMENTS, "web", NS)
        st = d.get("status") or {}
        return d if st.get("availableReplicas") == 6 and st.get("updatedReplicas") == 6 else None

    d = await until(deployment_available, what="deployment status")
    assert d["status"]["observedGeneration"] == d["metadata"]["generation"]
    rs_list = (await cluster.client.list(REPLICASETS, NS)).items
    assert len(rs_list) == 1
    assert rs_list[0]["metadata"]["labels"]["pod-template-hash"]


async def test_deleted_pod_is_replaced(cluster: Cluster) -> None:
    await cluster.client.create(REPLICASETS, replicaset("api", 3), NS)

    async def three_ready() -> list[dict[str, Any]] | None:
        pods = [
            p for p in await cluster.pods("app=api") if not p["metadata"].get("deletionTimestamp")
        ]
        return pods if len(pods) == 3 and all(_ready(p) for p in pods) else None

    pods = await until(three_ready, what="3 ready pods")
    victim = pods[0]["metadata"]["name"]
    await cluster.client.delete(PODS, victim, NS)

    async def replaced() -> list[dict[str, Any]] | None:
        now = await three_ready()
        if now is None or victim in {p["metadata"]["name"] for p in now}:
            return None
        return now

    await until(replaced, what="replacement pod")

    async def rs_status() -> bool:
        rs = await cluster.client.get(REPLICASETS, "api", NS)
        st = rs.get("status") or {}
        return st.get("replicas") == 3 and st.get("readyReplicas") == 3

    await until(rs_status, what="replicaset status")


async def test_cordon_adds_and_uncordon_removes_the_taint(cluster: Cluster) -> None:
    await cluster.client.patch(NODES, "node-1", {"spec": {"unschedulable": True}})

    async def tainted() -> bool:
        node = await cluster.client.get(NODES, "node-1")
        return any(
            t["key"] == "node.kubernetes.io/unschedulable" and t["effect"] == "NoSchedule"
            for t in node["spec"].get("taints") or []
        )

    await until(tainted, what="unschedulable taint")
    await cluster.client.create(DEPLOYMENTS, deployment("web", 4), NS)

    async def placed() -> list[dict[str, Any]] | None:
        pods = await cluster.pods("app=web")
        return pods if len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods) else None

    for p in await until(placed, what="4 scheduled pods"):
        assert p["spec"]["nodeName"] != "node-1"
    await cluster.client.patch(NODES, "node-1", {"spec": {"unschedulable": None}})

    async def untainted() -> bool:
        return not await tainted()

    await until(untainted, what="taint removal")


async def test_graceful_deletion_takes_the_grace_period(cluster: Cluster) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "slow", "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 60,
            "containers": [{"name": "c", "image": "nginx:1.27"}],
        },
    }
    await cluster.client.create(PODS, pod, NS)

    async def running() -> bool:
        p = await cluster.client.get(PODS, "slow", NS)
        return p["status"].get("phase") == "Running"

    await until(running, what="pod running")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await cluster.client.delete(PODS, "slow", NS, grace_period_seconds=30)
    terminating = await cluster.client.get(PODS, "slow", NS)
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30

    async def gone() -> bool:
        try:
            await cluster.client.get(PODS, "slow", NS)
        except NotFound:
            return True
        return False

    await until(gone, what="pod removal")
    elapsed_sim = (loop.time() - started) * TIME_SCALE
    # The kubelet waited out the 30 s grace (not the pod's 60 s) before finishing the delete.
    assert elapsed_sim >= 29


async def test_daemonset_runs_everywhere_including_cordoned_nodes(cluster: Cluster) -> None:
    await cluster.client.patch(NODES, "node-2", {"spec": {"unschedulable": True}})
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": _template("agent")},
    }
    await cluster.client.create(DAEMONSETS, ds, NS)

    async def everywhere() -> list[dict[str, Any]] | None:
        pods = await cluster.pods("app=agent")
        nodes = sorted(p["spec"].get("nodeName") or "" for p in pods)
        ok = nodes == ["node-0", "node-1", "node-2"] and all(_ready(p) for p in pods)
        return pods if ok else None

    pods = await until(everywhere, what="a ready daemon pod per node")
    for p in pods:
        tolerations = p["spec"]["tolerations"]
        assert {
            "key": "node.kubernetes.io/unschedulable",
            "operator": "Exists",
            "effect": "NoSchedule",
        } in tolerations
        terms = p["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [p["spec"]["nodeName"]]

    async def ds_status() -> bool:
        st = (await cluster.client.get(DAEMONSETS, "agent", NS)).get("status") or {}
        return (
            st.get("desiredNumberScheduled") == 3
            and st.get("currentNumberScheduled") == 3
            and st.get("numberReady") == 3
            and st.get("numberAvailable") == 3
        )

    await until(ds_status, what="daemonset status")
    await cluster.add_node("node-3")

    async def on_new_node() -> bool:
        pods = await cluster.pods("app=agent")
        return any(p["spec"].get("nodeName") == "node-3" and _ready(p) for p in pods)

    await until(on_new_node, what="daemon pod on the new node")


async def test_a_drained_daemon_pod_comes_back_when_its_taint_is_lifted(cluster: Cluster) -> None:
    """As a drain that stops DaemonSet pods leaves it: node-1 cordoned and tainted with a
    NoSchedule taint the DaemonSet does not tolerate, its daemon pod deleted. No new pod is made
    for it; uncordoned and untainted, it gets one again (the node watch requeues the DaemonSet)."""
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "ingress", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "ingress"}},
            "template": _template("ingress"),
        },
    }
    await cluster.client.create(DAEMONSETS, ds, NS)

    async def on_node_1() -> list[dict[str, Any]]:
        return [
            p for p in await cluster.pods("app=ingress") if p["spec"].get("nodeName") == "node-1"
        ]

    (old,) = await until(lambda: _all_ready(on_node_1()), what="a ready daemon pod on node-1")
    await _drain_taint(cluster.client, "node-1", on=True)

    async def misscheduled(count: int) -> bool:
        st = (await cluster.client.get(DAEMONSETS, "ingress", NS)).get("status") or {}
        return st.get("desiredNumberScheduled") == 2 and st.get("numberMisscheduled") == count

    await until(lambda: misscheduled(1), what="node-1 no longer wanting a daemon pod")
    await cluster.client.delete(PODS, old["metadata"]["name"], NS)

    async def gone() -> bool:
        return not await on_node_1() and await misscheduled(0)

    # The status counts the pod gone only after a pass that saw it gone, and a pass creates
    # what it creates before it writes the status: no pod was made for node-1.
    await until(gone, what="the evicted pod gone")
    assert not await on_node_1()
    await _drain_taint(cluster.client, "node-1", on=False)
    (new,) = await until(lambda: _all_ready(on_node_1()), what="a new daemon pod on node-1")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]


async def _drain_taint(client: ApiClient, name: str, *, on: bool) -> None:
    """Cordon and taint the node (or undo both), a guarded write redone on a conflict with the
    node lifecycle controller's own taint."""
    while True:
        node = await client.get(NODES, name)
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != "example.com/draining"]
        if on:
            taints.append({"key": "example.com/draining", "effect": "NoSchedule"})
        body = {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "spec": {"unschedulable": on or None, "taints": taints or None},
        }
        try:
            await client.patch(NODES, name, body)
            return
        except Conflict:
            continue


async def _all_ready(pods: Awaitable[list[dict[str, Any]]]) -> list[dict[str, Any]] | None:
    found = await pods
    return found if found and all(_ready(p) for p in found) else None


async def test_pdb_status_tracks_ready_pods(cluster: Cluster) -> None:
    await cluster.client.create(DEPLOYMENTS, deployment("db", 3), NS)
    pdb = objects.make_pdb("db", NS, selector={"app": "db"}, min_available=2)
    await cluster.client.create(PDBS, objects.for_create(pdb), NS)

    async def pdb_status(expect: dict[str, int]) -> bool:
        st = (await cluster.client.get(PDBS, "db", NS)).get("status") or {}
        return all(st.get(k) == v for k, v in expect.items())

    full = {"currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3, "disruptionsAllowed": 1}
    await until(lambda: pdb_status(full), what=f"pdb status {full}")
    pods = await cluster.pods("app=db")
    # An unready pod (a failing readiness probe) leaves the budget with no room.
    name = pods[0]["metadata"]["name"]
    await cluster.client.patch(PODS, name, {"metadata": {"annotations": {ann.READY: "false"}}}, NS)
    short = {"currentHealthy": 2, "disruptionsAllowed": 0}
    await until(lambda: pdb_status(short), what=f"pdb status {short}")
    await cluster.client.patch(PODS, name, {"metadata": {"annotations": {ann.READY: "true"}}}, NS)
    await until(lambda: pdb_status(full), what="pdb status back to full")


async def test_gc_background_deletes_dependents(cluster: Cluster) -> None:
    await cluster.client.create(REPLICASETS, replicaset("bg", 3), NS)

    async def three() -> bool:
        return len(await cluster.pods("app=bg")) == 3

    await until(three, what="3 pods")
    await cluster.client.delete(REPLICASETS, "bg", NS, propagation_policy="Background")

    async def none_left() -> bool:
        return not await cluster.pods("app=bg")

    await until(none_left, what="dependents deleted")


async def test_gc_foreground_holds_the_owner_until_pods_are_gone(cluster: Cluster) -> None:
    await cluster.client.create(REPLICASETS, replicaset("fg", 2), NS)

    async def two_ready() -> bool:
        pods = await cluster.pods("app=fg")
        return len(pods) == 2 and all(_ready(p) for p in pods)

    await until(two_ready, what="2 ready pods")
    await cluster.client.delete(REPLICASETS, "fg", NS, propagation_policy="Foreground")
    owner = await cluster.client.get(REPLICASETS, "fg", NS)
    assert owner["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in owner["metadata"]["finalizers"]

    seen_owner_with_terminating_pods = False

    async def owner_gone() -> bool:
        nonlocal seen_owner_with_terminating_pods
        pods = await cluster.pods("app=fg")
        try:
            await cluster.client.get(REPLICASETS, "fg", NS)
        except NotFound:
            assert not pods, "owner removed while its pods still exist"
            return True
        if pods and all(p["metadata"].get("deletionTimestamp") for p in pods):
            seen_owner_with_terminating_pods = True
        return False

    await until(owner_gone, what="owner removal")
    assert seen_owner_with_terminating_pods
    assert not await cluster.pods("app=fg")


async def test_gc_orphan_keeps_pods_and_drops_their_owner_reference(cluster: Cluster) -> None:
    await cluster.client.create(REPLICASETS, replicaset("orph", 2), NS)

    async def two() -> bool:
        return len(await cluster.pods("app=orph")) == 2

    await until(two, what="2 pods")
    await cluster.client.delete(REPLICASETS, "orph", NS, propagation_policy="Orphan")

    async def owner_gone() -> bool:
        try:
            await cluster.client.get(REPLICASETS, "orph", NS)
        except NotFound:
            return True
        return False

    await until(owner_gone, what="owner removal")
    pods = await cluster.pods("app=orph")
    assert len(pods) == 2
    assert all(not p["metadata"].get("ownerReferences") for p in pods)


async def test_statefulset_ordinals_and_recreation(cluster: Cluster) -> None:
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS},
        "spec": {
            "replicas": 3,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": _template("db"),
        },
    }
    await cluster.client.create(STATEFULSETS, sts, NS)

    async def ordinals() -> list[str] | None:
        pods = await cluster.pods("app=db")
        names = sorted(p["metadata"]["name"] for p in pods)
        ok = names == ["db-0", "db-1", "db-2"] and all(_ready(p) for p in pods)
        return names if ok else None

    await until(ordinals, what="db-0..2 ready")
    old = await cluster.client.get(PODS, "db-1", NS)
    await cluster.client.delete(PODS, "db-1", NS)

    async def recreated() -> bool:
        try:
            p = await cluster.client.get(PODS, "db-1", NS)
        except NotFound:
            return False
        return p["metadata"]["uid"] != old["metadata"]["uid"] and _ready(p)

    await until(recreated, what="db-1 recreated")

    async def sts_status() -> bool:
        st = (await cluster.client.get(STATEFULSETS, "db", NS)).get("status") or {}
        return st.get("readyReplicas") == 3 and st.get("replicas") == 3

    await until(sts_status, what="statefulset status")


async def test_node_lease_and_dead_kubelet(cluster: Cluster) -> None:
    lease = await until(lambda: _get_or_none(cluster.client, "node-0"), what="node lease")
    assert lease["spec"]["holderIdentity"] == "node-0"
    assert lease["metadata"]["ownerReferences"][0]["kind"] == "Node"
    await cluster.client.patch(
        NODES, "node-0", {"metadata": {"annotations": {ann.KUBELET_STATE: ann.KUBELET_STOPPED}}}
    )

    async def unreachable() -> bool:
        node = await cluster.client.get(NODES, "node-0")
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        keys = {(t["key"], t["effect"]) for t in node["spec"].get("taints") or []}
        return (
            ready["status"] == "Unknown"
            and (
                "node.kubernetes.io/unreachable",
                "NoExecute",
            )
            in keys
        )

    await until(unreachable, what="node marked unreachable")
    await cluster.client.patch(
        NODES, "node-0", {"metadata": {"annotations": {ann.KUBELET_STATE: ann.KUBELET_RUNNING}}}
    )

    async def healthy_again() -> bool:
        node = await cluster.client.get(NODES, "node-0")
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        return ready["status"] == "True" and not node["spec"].get("taints")

    await until(healthy_again, what="node ready again")


async def test_pods_of_a_deleted_node_are_failed_then_removed_after_quarantine(
    cluster: Cluster,
) -> None:
    """kube-controller-manager's pod GC: 40 s of quarantine, then Failed + DisruptionTarget, then
    a force delete. Times are on the simulated clock (the server's timestamps), not wall time."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pinned", "namespace": NS},
        "spec": {"nodeName": "node-2", "containers": [{"name": "c", "image": "nginx:1.27"}]},
    }
    await cluster.client.create(PODS, pod, NS)

    async def running() -> dict[str, Any] | None:
        p = await cluster.client.get(PODS, "pinned", NS)
        return p if p["status"].get("phase") == "Running" else None

    before = await until(running, what="pod running")
    deleted_at = cluster.loops.clock.now()
    await cluster.client.delete(NODES, "node-2")

    events: list[tuple[str, dict[str, Any]]] = []
    watch = cluster.client.watch(
        PODS,
        NS,
        resource_version=before["metadata"]["resourceVersion"],
        field_selector="metadata.name=pinned",
    )
    try:
        async with asyncio.timeout(30):
            async for event in watch:
                events.append((event.type, event.object))
                if event.type == "DELETED":
                    break
    finally:
        await watch.aclose()
    assert [t for t, _ in events][-1] == "DELETED"
    failed = next(o for t, o in events if o["status"].get("phase") == "Failed")
    condition = next(c for c in failed["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert condition["status"] == "True"
    assert condition["reason"] == "DeletionByPodGC"
    assert condition["message"] == "PodGC: node no longer exists"
    # Not before the quarantine (timestamps have whole seconds, hence the second of slack).
    marked_at = parse_time(condition["lastTransitionTime"])
    assert marked_at >= deleted_at + timedelta(seconds=QUARANTINE_SECONDS - 1)
    # Every event before the Failed one left the pod running on its (gone) node.
    first_failed = next(
        i for i, (_, o) in enumerate(events) if o["status"].get("phase") == "Failed"
    )
    assert all(o["status"].get("phase") == "Running" for _, o in events[:first_failed])
    assert events[-1][1]["status"]["phase"] == "Failed"

    async def lease_gone() -> bool:
        try:
            await cluster.client.get(LEASES, "node-2", "kube-node-lease")
        except NotFound:
            return True
        return False

    await until(lease_gone, what="node lease collected")


async def test_pod_gc_spares_pods_of_a_node_that_comes_back(cluster: Cluster) -> None:
    """A node that reappears within the quarantine is no longer quarantined; its pods stay."""
    podgc = cluster.loops.podgc
    assert podgc is not None
    # A quarantine no slow machine can outlast while the node is away.
    podgc.quarantine = timedelta(hours=1)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kept", "namespace": NS},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "nginx:1.27"}]},
    }
    await cluster.client.create(PODS, pod, NS)
    node = await cluster.client.get(NODES, "node-1")
    await cluster.client.delete(NODES, "node-1")

    async def quarantined() -> bool:
        podgc.check()
        return "node-1" in podgc.quarantined

    await until(quarantined, what="node quarantined")
    await cluster.client.create(NODES, objects.for_create(node))

    async def released() -> bool:
        podgc.check()
        return "node-1" not in podgc.quarantined

    await until(released, what="quarantine lifted")
    p = await cluster.client.get(PODS, "kept", NS)
    assert p["status"].get("phase") != "Failed" and not p["metadata"].get("deletionTimestamp")


async def test_job_like_pod_completes(cluster: Cluster) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "batch", "namespace": NS, "annotations": {ann.RUN_SECONDS: "20"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]},
    }
    await cluster.client.create(PODS, pod, NS)

    async def succeeded() -> dict[str, Any] | None:
        p = await cluster.client.get(PODS, "batch", NS)
        return p if p["status"].get("phase") == "Succeeded" else None

    p = await until(succeeded, what="pod Succeeded")
    state = p["status"]["containerStatuses"][0]["state"]
    assert state["terminated"]["exitCode"] == 0
    assert state["terminated"]["reason"] == "Completed"


async def _get_or_none(client: ApiClient, name: str) -> dict[str, Any] | None:
    try:
        return await client.get(LEASES, name, "kube-node-lease")
    except NotFound:
        return None


async def test_loops_survive_server_faults() -> None:
    """500s, 429s, 409s on leases, cut watch streams and expired resumes: the loops retry."""
    clock = Clock(TIME_SCALE)
    faults = (
        "error=500:0.1@patch/pods; error=500:0.1@create/pods; error=429:0.05@*:retry-after=0;"
        " error=409:0.2@update/leases; watch-cut=events:5@*; watch-expire=0.3@pods"
    )
    server = SimServer(clock=clock, faults=faults, seed=7, bookmark_interval=0.2)
    await server.start()
    client = ApiClient(server.url, server.admin_token, component="test")
    loops = ClusterLoops(server.url, server.admin_token, clock, kubelet_start_seconds=1.0)
    c = Cluster(server, client, loops)
    try:
        for i in range(3):
            await c.add_node(f"node-{i}")
        await loops.start()
        await client.create(DEPLOYMENTS, deployment("web", 6), NS)

        async def six_ready() -> list[dict[str, Any]] | None:
            pods = [
                p for p in await c.pods("app=web") if not p["metadata"].get("deletionTimestamp")
            ]
            return pods if len(pods) == 6 and all(_ready(p) for p in pods) else None

        pods = await until(six_ready, timeout=20, what="6 ready pods despite faults")
        await client.delete(PODS, pods[0]["metadata"]["name"], NS)

        async def replaced() -> bool:
            now = await six_ready()
            return now is not None and pods[0]["metadata"]["name"] not in {
                p["metadata"]["name"] for p in now
            }

        await until(replaced, timeout=20, what="replacement despite faults")

        async def settled() -> bool:
            return len(await c.pods("app=web")) == 6

        await until(settled, timeout=20, what="exactly 6 pods")
    finally:
        await loops.stop()
        await client.close()
        await server.stop()


async def test_rolling_update_replaces_every_pod(cluster: Cluster) -> None:
    await cluster.client.create(DEPLOYMENTS, deployment("roll", 4), NS)

    async def rolled(image: str) -> bool:
        d = await cluster.client.get(DEPLOYMENTS, "roll", NS)
        st = d.get("status") or {}
        if st.get("observedGeneration") != d["metadata"]["generation"]:
            return False
        if not (
            st.get("updatedReplicas") == st.get("availableReplicas") == st.get("replicas") == 4
        ):
            return False
        pods = [
            p for p in await cluster.pods("app=roll") if not p["metadata"].get("deletionTimestamp")
        ]
        return len(pods) == 4 and all(p["spec"]["containers"][0]["image"] == image for p in pods)

    await until(lambda: rolled("nginx:1.27"), what="first rollout")
    patch = {
        "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}}}
    }
    await cluster.client.patch(DEPLOYMENTS, "roll", patch, NS, patch_type="strategic")
    await until(lambda: rolled("nginx:1.28"), timeout=20, what="second rollout")
    rs_list = (await cluster.client.list(REPLICASETS, NS, label_selector="app=roll")).items
    by_revision = {
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: rs for rs in rs_list
    }
    assert set(by_revision) == {"1", "2"}
    assert by_revision["1"]["spec"]["replicas"] == 0
    assert by_revision["2"]["spec"]["replicas"] == 4
    d = await cluster.client.get(DEPLOYMENTS, "roll", NS)
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"


async def test_eviction_respects_the_budget_until_the_replacement_is_ready(
    cluster: Cluster,
) -> None:
    guarded = deployment("guarded", 3)
    # Replacements take 20 simulated seconds to start, so the second eviction below cannot
    # race the first one's replacement.
    guarded["spec"]["template"]["metadata"]["annotations"] = {ann.START_SECONDS: "20"}
    await cluster.client.create(DEPLOYMENTS, guarded, NS)
    pdb = objects.make_pdb("guarded", NS, selector={"app": "guarded"}, min_available=3)
    await cluster.client.create(PDBS, objects.for_create(pdb), NS)

    async def allowed(n: int) -> bool:
        st = (await cluster.client.get(PDBS, "guarded", NS)).get("status") or {}
        return st.get("disruptionsAllowed") == n and st.get("currentHealthy") == 3

    await until(lambda: allowed(0), what="budget with no room")
    await cluster.client.patch(
        PDBS, "guarded", {"spec": {"minAvailable": 2}}, NS, patch_type="merge"
    )
    await until(lambda: allowed(1), what="budget with room for one")
    pods = await cluster.pods("app=guarded")
    await cluster.client.evict(pods[0]["metadata"]["name"], NS)
    with pytest.raises(TooManyRequests):
        await cluster.client.evict(pods[1]["metadata"]["name"], NS)
    # The replacement becomes ready, the budget has room again.
    await until(lambda: allowed(1), what="budget restored by the replacement")
    await cluster.client.evict(pods[1]["metadata"]["name"], NS)


async def test_instant_mode_skips_every_delay() -> None:
    # Real time: a 30 s grace period would outlast the timeout unless instant mode skips it.
    clock = Clock(1.0)
    server = SimServer(clock=clock, bookmark_interval=0.2)
    await server.start()
    client = ApiClient(server.url, server.admin_token, component="test")
    loops = ClusterLoops(server.url, server.admin_token, clock, instant=True)
    c = Cluster(server, client, loops)
    try:
        await c.add_node("node-0")
        await loops.start()
        probe = {"initialDelaySeconds": 60, "httpGet": {"path": "/", "port": 80}}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "quick", "namespace": NS},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27", "readinessProbe": probe}]},
        }
        await client.create(PODS, pod, NS)

        async def ready() -> bool:
            return _ready(await client.get(PODS, "quick", NS))

        await until(ready, timeout=5, what="instant readiness")
        await client.delete(PODS, "quick", NS, grace_period_seconds=30)

        async def gone() -> bool:
            try:
                await client.get(PODS, "quick", NS)
            except NotFound:
                return True
            return False

        await until(gone, timeout=5, what="instant termination")
    finally:
        await loops.stop()
        await client.close()
        await server.stop()


async def test_inter_pod_rules_hold_pods_and_say_why(cluster: Cluster) -> None:
    """The rules travel the whole way: in the pod's spec through the server, in the
    scheduler's cache of pods, and back as the PodScheduled message kube-scheduler writes."""
    solo = deployment("solo", 4)
    solo["spec"]["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "solo"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    await cluster.client.create(DEPLOYMENTS, solo, NS)

    async def three_running_one_refused() -> list[str] | None:
        pods = await cluster.pods("app=solo")
        running = {p["spec"].get("nodeName") for p in pods if _ready(p)}
        messages = [
            c.get("message", "")
            for p in pods
            for c in (p.get("status") or {}).get("conditions") or []
            if c.get("type") == "PodScheduled" and c.get("status") == "False"
        ]
        return messages if len(running) == 3 and messages else None

    messages = await until(three_running_one_refused, what="one pod per node, one refused")
    assert messages == [
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. preemption: "
        "0/3 nodes are available: 3 No preemption victims found for incoming pod."
    ]


# -- priority and preemption ------------------------------------------------------------------


def priority_class(name: str, value: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **spec,
    }


def _with_class(d: dict[str, Any], class_name: str, cpu: str) -> dict[str, Any]:
    spec = d["spec"]["template"]["spec"]
    spec["priorityClassName"] = class_name
    spec["containers"][0]["resources"]["requests"]["cpu"] = cpu
    return d


def _bare_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
    }


def _scheduled_false(pod: dict[str, Any]) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message"))
    return None


async def test_priority_comes_from_the_class_and_an_unknown_class_is_refused(
    cluster: Cluster,
) -> None:
    """The Priority admission plugin writes a pod's priority from its class, as kube-apiserver
    does, so the pods a ReplicaSet makes carry their template's class's value."""
    classes = (await cluster.client.list(PRIORITYCLASSES)).items
    assert {c["metadata"]["name"]: c["value"] for c in classes} == {
        "system-node-critical": 2000001000,
        "system-cluster-critical": 2000000000,
    }
    await cluster.client.create(PRIORITYCLASSES, priority_class("high", 1000))
    await cluster.client.create(DEPLOYMENTS, _with_class(deployment("web", 2), "high", "100m"), NS)

    async def made() -> list[dict[str, Any]] | None:
        pods = await cluster.pods("app=web")
        return pods if len(pods) == 2 else None

    for p in await until(made, what="two pods"):
        assert p["spec"]["priority"] == 1000
        assert p["spec"]["preemptionPolicy"] == "PreemptLowerPriority"
    bad = _bare_pod("stray")
    bad["spec"]["priorityClassName"] = "nosuch"
    with pytest.raises(Forbidden) as refused:
        await cluster.client.create(PODS, bad, NS)
    assert 'pods "stray" is forbidden: no PriorityClass with name nosuch was found' in str(
        refused.value
    )
    await cluster.client.create(PRIORITYCLASSES, priority_class("normal", 10, globalDefault=True))
    created = await cluster.client.create(PODS, _bare_pod("plain"), NS)
    assert (created["spec"]["priorityClassName"], created["spec"]["priority"]) == ("normal", 10)


async def test_a_pod_that_fits_nowhere_preempts_lower_priority_pods(cluster: Cluster) -> None:
    """Placeholder pods of a low priority fill every node; a pod of a higher priority takes the
    place of one of them, as kube-scheduler's preemption does: the victim is deleted, the
    preemptor bound to the node it ran on once it is gone, and the
    victim's replacement, now with no room anywhere, says why in kube-scheduler's words."""
    await cluster.client.create(PRIORITYCLASSES, priority_class("placeholder", -10))
    await cluster.client.create(PRIORITYCLASSES, priority_class("serving", 1000))
    await cluster.client.create(
        DEPLOYMENTS, _with_class(deployment("balloon", 3), "placeholder", "1500m"), NS
    )

    async def spread() -> list[dict[str, Any]] | None:
        pods = await cluster.pods("app=balloon")
        nodes = {p["spec"].get("nodeName") for p in pods if _ready(p)}
        return pods if len(nodes) == 3 else None

    before = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in await until(spread)}
    await cluster.client.create(DEPLOYMENTS, _with_class(deployment("web", 1), "serving", "1"), NS)

    async def web_running() -> dict[str, Any] | None:
        pods = await cluster.pods("app=web")
        return pods[0] if pods and _ready(pods[0]) else None

    web = await until(web_running, what="the preemptor running", timeout=20)
    gone = [name for name, node in before.items() if node == web["spec"]["nodeName"]]
    assert len(gone) == 1
    with pytest.raises(NotFound):
        await cluster.client.get(PODS, gone[0], NS)

    async def replacement_refused() -> str | None:
        pods = await cluster.pods("app=balloon")
        messages = [m for p in pods if (m := _scheduled_false(p)) is not None]
        return messages[0] if len(pods) == 3 and messages else None

    message = await until(replacement_refused, what="the victim's replacement Pending")
    assert message == (
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: "
        "3 No preemption victims found for incoming pod."
    )


async def test_the_victim_is_marked_before_it_goes(cluster: Cluster) -> None:
    """The victim carries the DisruptionTarget condition kube-scheduler writes while its grace
    period runs, and the preemptor waits, nominated, until it is gone."""
    await cluster.client.create(PRIORITYCLASSES, priority_class("placeholder", -10))
    await cluster.client.create(PRIORITYCLASSES, priority_class("serving", 1000))
    balloon = _with_class(deployment("balloon", 3), "placeholder", "1500m")
    # A long grace period keeps the victim in sight, marked and terminating.
    balloon["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 3000
    await cluster.client.create(DEPLOYMENTS, balloon, NS)

    async def three_ready() -> bool:
        return sum(_ready(p) for p in await cluster.pods("app=balloon")) == 3

    await until(three_ready)
    await cluster.client.create(DEPLOYMENTS, _with_class(deployment("web", 1), "serving", "1"), NS)

    async def marked_and_going() -> dict[str, Any] | None:
        for p in await cluster.pods("app=balloon"):
            for c in (p.get("status") or {}).get("conditions") or []:
                if c.get("type") == "DisruptionTarget" and p["metadata"].get("deletionTimestamp"):
                    return p
        return None

    victim = await until(marked_and_going, what="a marked victim on its way out")
    condition = next(
        c for c in victim["status"]["conditions"] if c.get("type") == "DisruptionTarget"
    )
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True",
        "PreemptionByScheduler",
        "default-scheduler: preempting to accommodate a higher priority pod",
    )

    async def web_nominated() -> dict[str, Any] | None:
        pods = await cluster.pods("app=web")
        return pods[0] if pods and pods[0]["status"].get("nominatedNodeName") else None

    web = await until(web_nominated, what="the preemptor nominated")
    assert web["status"]["nominatedNodeName"] == victim["spec"]["nodeName"]
    assert not web["spec"].get("nodeName"), "bound while its victim still runs"


async def test_a_pod_that_may_not_preempt_waits(cluster: Cluster) -> None:
    await cluster.client.create(PRIORITYCLASSES, priority_class("placeholder", -10))
    await cluster.client.create(
        PRIORITYCLASSES, priority_class("polite", 1000, preemptionPolicy="Never")
    )
    await cluster.client.create(
        DEPLOYMENTS, _with_class(deployment("balloon", 3), "placeholder", "1500m"), NS
    )

    async def three_ready() -> bool:
        return sum(_ready(p) for p in await cluster.pods("app=balloon")) == 3

    await until(three_ready)
    await cluster.client.create(DEPLOYMENTS, _with_class(deployment("web", 1), "polite", "1"), NS)

    async def refused() -> str | None:
        pods = await cluster.pods("app=web")
        return _scheduled_false(pods[0]) if pods else None

    assert await until(refused) == (
        "0/3 nodes are available: 3 Insufficient cpu. preemption: not eligible due to "
        "preemptionPolicy=Never."
    )
    assert sum(_ready(p) for p in await cluster.pods("app=balloon")) == 3
