"""The drain engine against the simulated cluster (kubelet, scheduler, controllers running).

Every test also runs a budget monitor built on the simulator's own write hook: it sees every
pod write the server makes and fails the test if any PodDisruptionBudget ever has fewer healthy
pods than it requires. Each behaviour a reconciler relies on runs twice (`mode`): through
`Drainer.drain` with its own watches, as `nodeops drain` does, and through `Drainer.step` pass
after pass over shared informers, as a controller does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodeops.drain.classify import UNMANAGED_FATAL
from nodeops.drain.engine import (
    Drainer,
    DrainError,
    DrainProgress,
    DrainTimeout,
    VolumeDetachTimeout,
)
from nodeops.drain.options import DrainOptions
from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.clock import Clock
from nodeops.kube.resources import (
    DAEMONSETS,
    DEPLOYMENTS,
    NODES,
    PDBS,
    PERSISTENTVOLUMES,
    PODS,
)

from .runner import run_drain
from .workload import (
    NS,
    bare_pod,
    create_on,
    deployment,
    pdb,
    pods_on,
    running,
    settle_pdb,
    wait_until,
)


async def test_drain_evicts_everything_and_cordons(cluster: Any, mode: str) -> None:
    _, client, _ = cluster
    await create_on(client, "node-0", deployment("web", 3))
    progress: list[DrainProgress] = []
    result = await run_drain(
        client, mode, "node-0", DrainOptions(timeout=60), on_progress=progress.append
    )
    node = await client.get(NODES, "node-0")
    assert node["spec"]["unschedulable"] is True
    assert await pods_on(client, "node-0") == []
    assert len(result.evicted) >= 3
    assert progress[0].message.startswith("Drain not completed yet (started at ")
    await running(client, "web", 3)  # replaced elsewhere


async def test_preflight_is_all_or_nothing_with_kubectl_words(cluster: Any, mode: str) -> None:
    _, client, _ = cluster
    await client.create(PODS, bare_pod("bare", "node-1"), NS)
    scratch = deployment(
        "scratch", 1, node="node-1", spec={"volumes": [{"name": "s", "emptyDir": {}}]}
    )
    await client.create(DEPLOYMENTS, scratch, NS)
    await running(client, "scratch", 1)
    (scratch_pod,) = await pods_on(client, "node-1", "app=scratch")
    scratch_ref = f"default/{scratch_pod['metadata']['name']}"
    with pytest.raises(DrainError) as info:
        await run_drain(client, mode, "node-1", DrainOptions(timeout=10))
    assert str(info.value) == (
        f"cannot delete {UNMANAGED_FATAL}: default/bare, cannot delete Pods with local storage "
        f"(use --delete-emptydir-data to override): {scratch_ref}"
    )
    assert len(await pods_on(client, "node-1")) == 2  # nothing was evicted

    result = await run_drain(
        client, mode, "node-1", DrainOptions(timeout=30, force=True, delete_emptydir_data=True)
    )
    assert sorted(result.warnings) == [
        "deleting Pods that declare no controller: default/bare",
        f"deleting Pods with local storage: {scratch_ref}",
    ]
    assert [p for p in await pods_on(client, "node-1") if p["metadata"]["name"] == "bare"] == []


async def test_daemonsets_mirror_pods_and_selectors(cluster: Any, mode: str) -> None:
    _, client, _ = cluster
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "c", "image": "agent:1"}]},
            },
        },
    }
    await client.create(DAEMONSETS, ds, NS)
    await running(client, "agent", 3)
    mirror = bare_pod(
        "static", "node-2", metadata={"annotations": {"kubernetes.io/config.mirror": "x"}}
    )
    await client.create(PODS, mirror, NS)
    with pytest.raises(
        DrainError,
        match=r"cannot delete DaemonSet-managed Pods \(use --ignore-daemonsets to ignore\): default/agent-",
    ):
        await run_drain(client, mode, "node-2", DrainOptions(timeout=10))
    result = await run_drain(
        client, mode, "node-2", DrainOptions(timeout=30, ignore_daemonsets=True)
    )
    assert {r.split("/")[1].split("-")[0] for r in result.skipped} == {"agent", "static"}
    assert result.warnings[0].startswith("ignoring DaemonSet-managed Pods: default/agent-")
    left = {p["metadata"]["name"].split("-")[0] for p in await pods_on(client, "node-2")}
    assert left == {"agent", "static"}

    # --evict-daemonsets: the node is tainted so the DaemonSet does not come back, then its
    # pod is stopped too.
    await run_drain(
        client,
        mode,
        "node-2",
        DrainOptions(timeout=30, ignore_daemonsets=True, evict_daemonsets=True),
    )
    node = await client.get(NODES, "node-2")
    assert any(t["key"] == "nodeops.dev/draining" for t in node["spec"]["taints"])
    await asyncio.sleep(0.5)
    assert [p["metadata"]["name"] for p in await pods_on(client, "node-2")] == ["static"]


async def test_pod_selector_dry_run_and_disable_eviction(cluster: Any, mode: str) -> None:
    _, client, _ = cluster
    await client.create(DEPLOYMENTS, deployment("a", 2, node="node-0"), NS)
    await client.create(DEPLOYMENTS, deployment("b", 2, node="node-0"), NS)
    await running(client, "a", 2)
    await running(client, "b", 2)
    before = {p["metadata"]["name"] for p in await pods_on(client, "node-0")}
    seen: list[str] = []
    for dry_run in ("client", "server"):
        seen.clear()
        result = await run_drain(
            client,
            mode,
            "node-0",
            DrainOptions(dry_run=dry_run, ignore_daemonsets=True, evict_daemonsets=True),
            on_evicting=lambda p: seen.append(p["metadata"]["name"]),
        )
        assert sorted(seen) == sorted(before) and len(result.evicted) == 4
        assert {p["metadata"]["name"] for p in await pods_on(client, "node-0")} == before
    node = await client.get(NODES, "node-0")
    assert not node["spec"].get("unschedulable")  # dry runs change nothing, taints included
    assert not any(t["key"] == "nodeops.dev/draining" for t in node["spec"].get("taints") or ())

    await run_drain(
        client,
        mode,
        "node-0",
        DrainOptions(timeout=30, pod_selector="app=a", disable_eviction=True),
    )
    left = await pods_on(client, "node-0", "app")
    assert {
        p["metadata"]["labels"]["app"] for p in left if not p["metadata"].get("deletionTimestamp")
    } == {"b"}


async def test_pdb_blocks_then_unblocks_as_replacements_become_ready(
    cluster: Any, mode: str
) -> None:
    _, client, monitor = cluster
    await create_on(client, "node-0", deployment("api", 4))
    await client.create(PDBS, pdb("api", "api", minAvailable=3), NS)
    monitor.watch("api", min_available=3)
    await settle_pdb(client, "api", 4)
    messages: list[str] = []
    await run_drain(
        client,
        mode,
        "node-0",
        DrainOptions(timeout=60),
        on_progress=lambda p: messages.append(p.message),
    )
    assert await pods_on(client, "node-0") == []
    # The drain waits for the budget instead of asking for evictions the server must refuse.
    assert any(
        ": waiting for PodDisruptionBudget default/api to allow a disruption" in m for m in messages
    ), messages
    assert monitor.evictions["api"] >= 4


async def test_multiple_pdbs_fail_without_retry(cluster: Any, mode: str) -> None:
    _, client, _ = cluster
    await client.create(DEPLOYMENTS, deployment("m", 1, node="node-0"), NS)
    await running(client, "m", 1)
    await client.create(PDBS, pdb("m1", "m", maxUnavailable=1), NS)
    await client.create(PDBS, pdb("m2", "m", maxUnavailable=1), NS)
    with pytest.raises(DrainError, match="more than one PodDisruptionBudget"):
        await run_drain(client, mode, "node-0", DrainOptions(timeout=20))


async def two_pods_no_budget_lets_go(client: Client, monitor: Any) -> None:
    """Two pods on node-0 under a budget that needs both of them: a drain waits until timeout."""
    await client.create(DEPLOYMENTS, deployment("t", 2, node="node-0"), NS)
    await running(client, "t", 2)
    await client.create(PDBS, pdb("t", "t", minAvailable=2), NS)
    monitor.watch("t", min_available=2)
    await settle_pdb(client, "t", 2)


async def test_timeout_reports_blocked_pods(cluster: Any, mode: str) -> None:
    _, client, monitor = cluster
    await two_pods_no_budget_lets_go(client, monitor)
    with pytest.raises(DrainTimeout) as info:
        await run_drain(client, mode, "node-0", DrainOptions(timeout=1.5))
    text = str(info.value)
    assert 'error when evicting pods/"t-' in text and "global timeout reached: 1.5s" in text
    assert len(await pods_on(client, "node-0")) == 2


async def test_a_drain_counts_its_waits_in_the_clusters_seconds(cluster: Any) -> None:
    """On a simulated cluster whose clock runs twenty times as fast, a timeout of 30 s is 30 of
    the cluster's seconds, as every timestamp the drain reads is: 1.5 s of the loop's timers,
    not 30 (a rehearsal's copy, on such a clock, would otherwise see every drain wait twenty
    times too long)."""
    sim, client, monitor = cluster
    await two_pods_no_budget_lets_go(client, monitor)
    clock = Clock(now=sim.clock.now, scale=sim.clock.time_scale)
    drainer = Drainer(client, DrainOptions(timeout=30), clock=clock)
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(DrainTimeout, match=r"global timeout reached: 30s"):
        await asyncio.wait_for(drainer.drain("node-0"), 20)
    assert loop.time() - began < 10


async def test_order_by_rules_labels_and_priorities(cluster: Any, mode: str) -> None:
    _, client, _ = cluster
    from nodeops.api.crd import all_crds
    from nodeops.kube.resources import CRDS, NODEDRAINRULES

    for crd in all_crds():
        await client.create(CRDS, crd)
    rule = {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeDrainRule",
        "metadata": {"name": "databases-last"},
        "spec": {
            "drain": {"behavior": "Drain", "order": 10},
            "pods": [{"selector": {"matchLabels": {"tier": "db"}}}],
        },
    }
    await client.create(NODEDRAINRULES, rule)
    await create_on(
        client,
        "node-0",
        deployment("db", 1, labels={"tier": "db"}),
        deployment("web", 2),
        deployment("proxy", 1, annotations={"node-detacher.variant.run/deletion-priority": "5"}),
        deployment("keep", 1, labels={"nodeops.dev/drain": "skip"}),
    )
    order: list[str] = []
    messages: list[str] = []
    await run_drain(
        client,
        mode,
        "node-0",
        DrainOptions(timeout=60),
        on_evicting=lambda p: order.append(p["metadata"]["labels"]["app"]),
        on_progress=lambda p: messages.append(p.message),
    )
    assert order == ["proxy", "web", "web", "db"]  # priority 5 (order -5), then 0, then rule 10
    assert any(
        "After above Pods have been removed from the Node, the following Pods will be evicted: default/db-"
        in m
        for m in messages
    )
    left = [p["metadata"]["labels"]["app"] for p in await pods_on(client, "node-0")]
    assert left == ["keep"]


async def test_wait_completed_pods_hold_the_drain_until_they_finish(
    cluster: Any, mode: str
) -> None:
    _, client, _ = cluster
    job = bare_pod(
        "job",
        "node-1",
        metadata={
            "labels": {"nodeops.dev/drain": "wait-completed"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "j",
                    "uid": "9",
                    "controller": True,
                }
            ],
        },
        spec={"restartPolicy": "Never"},
    )
    await client.create(PODS, job, NS)
    task = asyncio.create_task(run_drain(client, mode, "node-1", DrainOptions(timeout=30)))
    await asyncio.sleep(1.0)
    assert not task.done()
    await client.patch_status(PODS, "job", {"phase": "Succeeded"}, NS)
    await asyncio.wait_for(task, 20)
    names = [p["metadata"]["name"] for p in await pods_on(client, "node-1")]
    assert names == ["job"]  # completed pods are not evicted, and no longer hold the drain


async def test_crash_and_resume_continues_from_the_cluster(cluster: Any, mode: str) -> None:
    _, client, monitor = cluster
    await create_on(client, "node-0", deployment("r", 6))
    await client.create(PDBS, pdb("r", "r", maxUnavailable=1), NS)
    monitor.watch("r", min_available=5)
    await settle_pdb(client, "r", 6)
    started: list[str] = []

    def die_after_first_eviction(pod: dict[str, Any]) -> None:
        started.append(pod["metadata"]["name"])
        first.cancel()  # the process dies right after its first eviction was sent

    first = asyncio.create_task(
        run_drain(
            client, mode, "node-0", DrainOptions(timeout=60), on_evicting=die_after_first_eviction
        )
    )
    with pytest.raises(asyncio.CancelledError):
        await first
    assert started
    await run_drain(client, mode, "node-0", DrainOptions(timeout=60))
    assert await pods_on(client, "node-0") == []


async def test_wait_for_volumes_ignores_skipped_pods(cluster: Any, mode: str) -> None:
    _, client, _ = cluster
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv-data"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
        },
    }
    await client.create(PERSISTENTVOLUMES, pv)
    attached = {
        "status": {
            "volumesAttached": [
                {"name": "kubernetes.io/csi/ebs.csi.aws.com^vol-1", "devicePath": ""}
            ]
        }
    }
    await client.patch(NODES, "node-2", attached, subresource="status")
    drain = asyncio.create_task(
        run_drain(client, mode, "node-2", DrainOptions(timeout=30, wait_for_volumes=True))
    )
    await asyncio.sleep(1.0)
    assert not drain.done()
    await client.patch(NODES, "node-2", {"status": {"volumesAttached": None}}, subresource="status")
    await asyncio.wait_for(drain, 20)


async def test_the_drains_timeout_bounds_the_volume_wait_too(cluster: Any, mode: str) -> None:
    """`--timeout` counts from the drain's start through the volume wait, whatever
    `--volume-timeout` allows: a run and a pass apply both limits alike."""
    _, client, _ = cluster
    attached = {"status": {"volumesAttached": [{"name": "vol-stays", "devicePath": ""}]}}
    await client.patch(NODES, "node-2", attached, subresource="status")
    options = DrainOptions(timeout=1, wait_for_volumes=True, volume_timeout=600)
    with pytest.raises(VolumeDetachTimeout, match="vol-stays"):
        # The bound only keeps a broken drain from hanging the suite for its 600 s.
        await asyncio.wait_for(run_drain(client, mode, "node-2", options), 20)


async def test_step_reports_progress_without_waiting(cluster: Any) -> None:
    _, client, monitor = cluster
    await client.create(DEPLOYMENTS, deployment("s", 2, node="node-0"), NS)
    await running(client, "s", 2)
    await client.create(PDBS, pdb("s", "s", minAvailable=2), NS)
    monitor.watch("s", min_available=2)
    await settle_pdb(client, "s", 2)
    from nodeops.kube.objects import now

    progress = await Drainer(client, DrainOptions()).step("node-0", now())
    assert not progress.complete
    lines = progress.message.splitlines()
    assert lines[0].startswith("Drain not completed yet (started at ")
    assert lines[1].startswith("* Pods default/s-")
    # The budget has no room, so no eviction is sent; the report says what it waits for.
    assert lines[1].endswith(": waiting for PodDisruptionBudget default/s to allow a disruption")
    assert set(progress.blocking.values()) == {
        "waiting for PodDisruptionBudget default/s to allow a disruption"
    }
    assert monitor.evictions["s"] == 0


async def test_a_pass_names_the_budgets_holding_it_and_the_drainer_the_nodes_they_hold(
    cluster: Any,
) -> None:
    """A controller wakes a drain for a budget's change only if that budget held its last
    pass back: the pass names it, the Drainer keeps it until a later pass is no longer held
    (or the drain is stopped), and another budget's change names no node."""
    _, client, monitor = cluster
    await create_on(client, "node-0", deployment("h", 2))
    await running(client, "h", 2)
    await client.create(PDBS, pdb("h", "h", minAvailable=2), NS)
    await client.create(PDBS, pdb("other", "nothing-here", minAvailable=1), NS)
    monitor.watch("h", min_available=1)
    await settle_pdb(client, "h", 2)
    from nodeops.kube.objects import now

    drainer = Drainer(client, DrainOptions())
    started = now()
    progress = await drainer.step("node-0", started)
    assert progress.held_by == {(NS, "h")}
    assert drainer.nodes_held_by(NS, "h") == {"node-0"}
    assert drainer.nodes_held_by(NS, "other") == set()
    assert drainer.nodes_held_by("elsewhere", "h") == set()

    drainer.stopped("node-0")
    assert drainer.nodes_held_by(NS, "h") == set()
    await drainer.step("node-0", started)
    assert drainer.nodes_held_by(NS, "h") == {"node-0"}

    await client.patch(PDBS, "h", {"spec": {"minAvailable": 1}}, NS)
    await settle_pdb(client, "h", 2)

    async def drained() -> bool:
        return (await drainer.step("node-0", started)).complete

    await wait_until(drained)
    assert drainer.nodes_held_by(NS, "h") == set()


async def test_missing_node_is_not_found(cluster: Any, mode: str) -> None:
    _, client, _ = cluster
    with pytest.raises(errors.NotFound):
        await run_drain(client, mode, "nope", DrainOptions(timeout=10))


async def stop_kubelet(client: Client, node: str) -> None:
    """The node's kubelet stops finalising pods: terminating pods stay, as on a dead node."""
    patch = {"metadata": {"annotations": {"sim.nodeops.dev/kubelet": "NotReady"}}}
    await client.patch(NODES, node, patch)


async def test_grace_period_is_passed_to_evictions(realtime: Any, mode: str) -> None:
    _, client = realtime
    await client.create(DEPLOYMENTS, deployment("g", 1, node="node-0"), NS)
    await running(client, "g", 1)
    await stop_kubelet(client, "node-0")
    drain = asyncio.create_task(
        run_drain(client, mode, "node-0", DrainOptions(grace_period=7, timeout=30))
    )

    async def terminating() -> bool:
        pods = await pods_on(client, "node-0", "app=g")
        return bool(pods) and bool(pods[0]["metadata"].get("deletionTimestamp"))

    await wait_until(terminating)
    (pod,) = await pods_on(client, "node-0", "app=g")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 7
    drain.cancel()
    with pytest.raises(asyncio.CancelledError):
        await drain


async def test_stuck_pods_are_skipped_or_force_deleted_only_when_asked(
    realtime: Any, mode: str
) -> None:
    _, client = realtime
    await client.create(DEPLOYMENTS, deployment("s", 1, node="node-0"), NS)
    await running(client, "s", 1)
    await stop_kubelet(client, "node-0")
    (pod,) = await pods_on(client, "node-0", "app=s")
    await client.delete(PODS, pod["metadata"]["name"], NS, grace_period=1)
    await asyncio.sleep(2.5)  # now more than a second past its deletion deadline

    # Without being asked, a stuck pod is waited for (and times out) ...
    with pytest.raises(DrainTimeout, match="to terminate: global timeout reached"):
        await run_drain(client, mode, "node-0", DrainOptions(timeout=1))
    # ... --skip-wait-for-delete-timeout leaves it, as kubectl does ...
    result = await run_drain(
        client, mode, "node-0", DrainOptions(timeout=10, skip_wait_for_delete_timeout=1)
    )
    assert result.skipped == [f"default/{pod['metadata']['name']}"]
    assert len(await pods_on(client, "node-0", "app=s")) == 1
    # ... and --force-delete-stuck deletes it with grace 0.
    await run_drain(
        client,
        mode,
        "node-0",
        DrainOptions(timeout=20, force_delete_stuck=True, stuck_slack_seconds=0.5),
    )
    remaining = [
        p
        for p in await pods_on(client, "node-0", "app=s")
        if p["metadata"]["uid"] == pod["metadata"]["uid"]
    ]
    assert remaining == []


async def test_events_on_the_node_and_blocked_pods(cluster: Any) -> None:
    _, client, monitor = cluster
    from nodeops.kube.events import EventRecorder
    from nodeops.kube.resources import EVENTS_CORE

    await client.create(DEPLOYMENTS, deployment("e", 2, node="node-0"), NS)
    await running(client, "e", 2)
    await client.create(PDBS, pdb("e", "e", minAvailable=2), NS)
    monitor.watch("e", min_available=2)
    await settle_pdb(client, "e", 2)
    recorder = EventRecorder(client, "nodeops-drain", "test")
    recorder.start()
    from nodeops.kube.objects import now

    drainer = Drainer(client, DrainOptions(), events=recorder)
    await drainer.step("node-0", now())
    await drainer.step("node-0", now())  # the same refusal again: folded into a series
    await recorder.stop()
    items, _ = await client.list(EVENTS_CORE, NS)
    blocked = [e for e in items if e.get("reason") == "EvictionBlocked"]
    assert {e["involvedObject"]["kind"] for e in blocked} == {"Pod"}
    assert len(blocked) == 2  # one per pod, repeats counted in the series
    assert all(
        e["message"] == "waiting for PodDisruptionBudget default/e to allow a disruption"
        for e in blocked
    )


async def test_step_over_shared_informers_lists_nothing_per_pass(cluster: Any) -> None:
    """A reconciler's passes read the manager's informers: after they have synced, a pass
    sends no list and opens no watch, only what it writes (and the node it cordons)."""
    sim, client, monitor = cluster
    from nodeops.drain.sources import SharedInformers
    from nodeops.kube.informer import InformerFactory
    from nodeops.kube.objects import now

    await client.create(DEPLOYMENTS, deployment("p", 2, node="node-0"), NS)
    await running(client, "p", 2)
    await client.create(PDBS, pdb("p", "p", minAvailable=2), NS)
    monitor.watch("p", min_available=2)
    await settle_pdb(client, "p", 2)
    factory = InformerFactory(client)
    options = DrainOptions()
    drainer = Drainer(client, options, sources=SharedInformers(factory, client))
    factory.start()
    try:
        started = now()
        first = await drainer.step("node-0", started)
        assert not first.complete
        sim.server.stats.reset()
        for _ in range(3):
            progress = await drainer.step("node-0", started)
            assert not progress.complete
    finally:
        await factory.stop()
    ours = sim.server.stats.snapshot()["by_agent"].get("nodeops") or {}
    verbs = {pair.split("/", 1)[0] for pair in ours.get("by_verb_resource") or {}}
    assert verbs <= {"get"}, ours["by_verb_resource"]
    assert monitor.evictions["p"] == 0
