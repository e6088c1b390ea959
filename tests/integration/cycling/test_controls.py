"""Disruption controls beyond Cyclops: budgets and their windows across requests, the drain
deadline, the taint that makes each pod move once, and the capacity check before a batch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bench.placeholders import fill_with_placeholders
from nodeops.controllers.cycling.keys import CYCLE_TAINT, NODE_FINALIZER
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, NODEGROUPS
from nodeops.demo.world import World
from nodeops.kube.metrics import REGISTRY
from nodeops.kube.resources import DEPLOYMENTS, NODES, PODS
from tests.waiting import until

from .harness import (
    assert_clean,
    blocking_budget,
    children,
    nodes,
    on_write,
    request,
    scenario,
    wait_phase,
    world,
)

GROUP = ["workers-a"]


def nodegroup(name: str, budgets: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeGroup",
        "metadata": {"name": name},
        "spec": {
            "nodeGroupName": "workers-a",
            "nodeSelector": {"matchLabels": {"role": "worker"}},
            "cycleSettings": {"method": "Drain", "concurrency": 3},
            "budgets": budgets,
        },
    }


class _InReplacement:
    """The nodes being replaced, counted by the cluster rather than by any request: those that
    carry cycling's finalizer (from just before their instance is detached until the Node is
    deleted) in every write the server stores; `peak` is the most at once."""

    def __init__(self) -> None:
        self.held: set[str] = set()
        self.peak = 0

    def __call__(self, kind: str, node: dict[str, Any], prev: dict[str, Any] | None) -> None:
        del prev
        name = node["metadata"]["name"]
        if kind != "DELETED" and NODE_FINALIZER in (node["metadata"].get("finalizers") or ()):
            self.held.add(name)
        else:
            self.held.discard(name)
        self.peak = max(self.peak, len(self.held))


def count_nodes_in_replacement(w: World) -> _InReplacement:
    counter = _InReplacement()
    on_write(w, NODES, counter)
    return counter


async def test_a_nodegroup_budget_bounds_every_request() -> None:
    async with world(scenario(4)) as w:
        assert w.client is not None
        await w.client.create(NODEGROUPS, nodegroup("workers", [{"nodes": 1}]))
        await w.create_request(request("wide", GROUP, cycleSettings={"concurrency": 4}))
        peak = 0
        while True:
            obj = await w.request("wide")
            status = (obj or {}).get("status") or {}
            peak = max(peak, int((status.get("progress") or {}).get("inProgress") or 0))
            if status.get("phase") in ("Successful", "Failed"):
                break
            await asyncio.sleep(0.02)
        assert status["phase"] == "Successful"
        assert peak == 1
        assert status["progress"]["cycled"] == 4


async def test_a_request_budget_alone_bounds_its_concurrency() -> None:
    """No NodeGroup has a budget: the request's own (half of its group) keeps it to two nodes
    in replacement at a time, though its concurrency would take all four at once. Counted by
    the cluster, not the request: the nodes that carry cycling's finalizer (from just before
    their instance is detached until the Node is deleted) in every write the server stores."""
    async with world(scenario(4)) as w:
        replacing = count_nodes_in_replacement(w)
        await w.create_request(
            request("own", GROUP, cycleSettings={"concurrency": 4}, budgets=[{"nodes": "50%"}])
        )
        done = await wait_phase(w, "own", ("Successful", "Failed"))
        assert done["status"]["phase"] == "Successful", done["status"]
        assert done["status"]["progress"]["cycled"] == 4
        assert replacing.peak == 2


async def test_a_budget_window_stops_replacements_until_it_closes() -> None:
    async with world(scenario(2)) as w:
        assert w.client is not None
        # A window that is always open and allows nothing (say, business hours every hour).
        await w.client.create(
            NODEGROUPS,
            nodegroup("frozen", [{"nodes": 0, "schedule": "* * * * *", "duration": "1h"}]),
        )
        await w.create_request(request("patient", GROUP, budgets=[{"nodes": "50%"}]))

        async def blocked() -> Any:
            obj = await w.request("patient")
            for cond in (obj or {}).get("status", {}).get("conditions") or ():
                if cond["type"] == "Blocked" and cond["reason"] == "BudgetExhausted":
                    return cond
            return None

        cond = await until(blocked, timeout=60, what="the budget to block")
        assert "NodeGroup frozen budgets[0] allows 0 nodes" in cond["message"]
        assert (await w.request("patient") or {})["status"]["phase"] == "Initialised"
        assert await children(w, "patient") == []
        await w.client.delete(NODEGROUPS, "frozen")
        done = await wait_phase(w, "patient", "Successful")
        assert done["status"]["progress"]["cycled"] == 2


@pytest.mark.parametrize("action", ["Force", "Fail"])
async def test_the_drain_deadline(action: str) -> None:
    async with world(scenario(2, workloads=blocking_budget)) as w:
        assert w.client is not None
        pods, _ = await w.client.list(PODS, "shop", label_selector="app=api")
        held = {p["spec"]["nodeName"] for p in pods}
        assert held
        await w.create_request(
            request(
                "deadline",
                GROUP,
                cycleSettings={
                    "concurrency": 1,
                    "drainDeadline": "30s",
                    "onDrainDeadline": action,
                },
            )
        )
        if action == "Force":
            done = await wait_phase(w, "deadline", "Successful", timeout=120)
            assert done["status"]["progress"]["cycled"] == 2
            # Only a node the blocking budget's pods stand on needs forcing; the scheduler may
            # have put both on one node, whose neighbour then drains in the ordinary way.
            forced = {
                c["spec"]["nodeName"]
                for c in await children(w, "deadline")
                if c["status"].get("forced")
            }
            assert forced == held
            # Forcing is what it says: the blocking budget was not respected.
            assert any(v.budget == "shop/api" for v in w.record.violations)
        else:
            failed = await wait_phase(w, "deadline", "Failed", timeout=120)
            assert "not drained within its drain deadline 30s" in failed["status"]["message"]
            assert w.record.violations == []
            assert_clean(await nodes(w))


async def test_each_pod_moves_once() -> None:
    async with world(scenario(6, groups=1)) as w:
        assert w.client is not None
        pods, _ = await w.client.list(PODS, "shop")
        await w.create_request(request("once", GROUP, cycleSettings={"concurrency": 2}))
        tainted: set[str] = set()

        async def taints_seen() -> bool:
            for node in await nodes(w):
                if any(t["key"] == CYCLE_TAINT for t in node["spec"].get("taints") or ()):
                    tainted.add(node["metadata"]["name"])
            return len(tainted) >= 4

        await until(taints_seen, timeout=60, what="the nodes still to be replaced tainted")
        done = await wait_phase(w, "once", "Successful", timeout=180)
        moves = w.record.evictions / len(pods)
        assert moves <= 1.05, (w.record.evictions, len(pods))
        assert done["status"]["podMovesPerPod"] <= 1.05
        assert w.record.violations == []
        assert_clean(await nodes(w))


async def test_the_pod_moves_metric_counts_the_evictions_of_a_roll() -> None:
    """`nodeops_cycling_pod_moves_total` and `status.podMoves` say what a roll did to the
    workloads: as many moves as the simulator recorded evictions."""
    metric = "nodeops_cycling_pod_moves_total"
    async with world(scenario(3)) as w:
        before = REGISTRY.get_sample_value(metric) or 0.0
        await w.create_request(request("counted", GROUP, cycleSettings={"concurrency": 1}))
        done = await wait_phase(w, "counted", ("Successful", "Failed"))
        status = done["status"]
        assert status["phase"] == "Successful", status
        evictions = w.record.evictions
        assert evictions > 0
        assert (REGISTRY.get_sample_value(metric) or 0.0) - before == evictions
        assert status["podMoves"] == evictions
        assert status["podMovesPerPod"] == round(evictions / status["podsToMove"], 4)


async def blocked_for_capacity(w: World, name: str) -> dict[str, Any]:
    """The request's `Blocked` condition once the capacity check holds its batch."""

    async def condition() -> Any:
        obj = await w.request(name)
        for cond in (obj or {}).get("status", {}).get("conditions") or ():
            if cond["type"] == "Blocked" and cond["reason"] == "InsufficientCapacity":
                return cond
        return None

    return await until(condition, timeout=60, what="the capacity check to wait")


async def test_a_batch_waits_until_its_pods_fit() -> None:
    async with world(scenario(1)) as w:
        assert w.client is not None
        (old,) = [n["metadata"]["name"] for n in await nodes(w)]
        # A pod only the old node can run: draining it would strand the pod Pending.
        await w.client.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "pinned", "namespace": "shop"},
                "spec": {
                    "nodeName": old,
                    "nodeSelector": {"kubernetes.io/hostname": old},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "busybox"}],
                },
            },
            "shop",
        )
        await w.create_request(request("fits", GROUP))

        cond = await blocked_for_capacity(w, "fits")
        assert "shop/pinned" in cond["message"]
        assert await children(w, "fits") == []
        await w.client.delete(PODS, "pinned", "shop", grace_period=0)
        await wait_phase(w, "fits", "Successful")


async def test_pods_one_a_node_wait_for_a_node_each() -> None:
    """Two pods that must not share a node, both on the one old node: the one new node can
    take one of them, so the batch waits, naming kube-scheduler's reason, until one is gone."""
    async with world(scenario(1)) as w:
        assert w.client is not None
        (old,) = [n["metadata"]["name"] for n in await nodes(w)]
        apart = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "apart"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
        for name in ("apart-0", "apart-1"):
            await w.client.create(
                PODS,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": "shop", "labels": {"app": "apart"}},
                    "spec": {
                        # Bound by hand: the rules hold the scheduler, not a pod's binding.
                        "nodeName": old,
                        "affinity": apart,
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "c", "image": "busybox"}],
                    },
                },
                "shop",
            )
        await w.create_request(request("apart", GROUP))

        cond = await blocked_for_capacity(w, "apart")
        assert "1 of " in cond["message"] and "shop/apart-" in cond["message"], cond
        assert "node(s) didn't match pod anti-affinity rules" in cond["message"], cond
        assert await children(w, "apart") == []
        await w.client.delete(PODS, "apart-1", "shop", grace_period=0)
        await wait_phase(w, "apart", "Successful")


async def test_pods_one_a_node_roll_onto_the_new_nodes() -> None:
    """The converse: one replica a node, two nodes a batch, two new nodes each time: each
    batch's pair fits on its pair of new nodes, and the roll ends with every replica running,
    each on its own node."""
    one_a_node = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "solo"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    solo = {
        "kind": "Deployment",
        "name": "solo",
        "namespace": "shop",
        "replicas": 4,
        "affinity": one_a_node,
        "terminationGracePeriodSeconds": 2,
    }
    async with world(scenario(4, workloads=lambda ws: [*ws, solo])) as w:
        assert w.client is not None
        held: list[str] = []

        def capacity(_: str, obj: dict[str, Any], __: dict[str, Any] | None) -> None:
            for cond in (obj.get("status") or {}).get("conditions") or ():
                if cond.get("reason") == "InsufficientCapacity" and cond["status"] == "True":
                    held.append(cond.get("message", ""))

        on_write(w, CYCLENODEREQUESTS, capacity)
        await w.create_request(request("solo", GROUP, cycleSettings={"concurrency": 2}))
        done = await wait_phase(w, "solo", ("Successful", "Failed"), timeout=180)
        assert done["status"]["phase"] == "Successful", done["status"]
        assert held == []

        async def placed() -> list[str] | None:
            pods, _ = await w.client.list(PODS, "shop", label_selector="app=solo")  # type: ignore[union-attr]
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            names = [p["spec"].get("nodeName") or "" for p in live]
            return names if len(names) == 4 and all(names) else None

        hosts = await until(placed, timeout=30, what="the four replicas placed")
        assert len(set(hosts)) == 4, hosts
        assert w.record.violations == []


async def test_a_budget_counts_the_nodes_of_every_request() -> None:
    """Two requests, one per cloud group, under one NodeGroup budget of one node: never more
    than one node of the two groups is being replaced at a time. Counted by the cluster, as
    the request budget's test counts: the nodes that carry cycling's finalizer in every write
    the server stores. (The requests' own `inProgress` counts, read one after the other,
    can each still show the node one has just finished as the other starts its own.)"""
    async with world(scenario(4, groups=2)) as w:
        assert w.client is not None
        replacing = count_nodes_in_replacement(w)
        shared = nodegroup("both", [{"nodes": 1}])
        shared["spec"]["nodeGroupsList"] = ["workers-b"]
        await w.client.create(NODEGROUPS, shared)
        for name, group in (("left", "workers-a"), ("right", "workers-b")):
            await w.create_request(request(name, [group], cycleSettings={"concurrency": 2}))
        for name in ("left", "right"):
            done = await wait_phase(w, name, ("Successful", "Failed"))
            assert done["status"]["phase"] == "Successful", done["status"]
            assert done["status"]["progress"]["cycled"] == 2
        assert replacing.peak == 1


@pytest.mark.parametrize("effect", ["Off", "NoSchedule"])
async def test_the_taint_of_nodes_still_to_be_replaced_is_configurable(effect: str) -> None:
    async with world(scenario(3)) as w:
        await w.create_request(
            request(
                "tainting",
                GROUP,
                cycleSettings={"concurrency": 1, "pendingNodeTaint": effect},
            )
        )
        seen: set[str] = set()
        while True:
            for node in await nodes(w):
                for taint in node["spec"].get("taints") or ():
                    if taint["key"] == CYCLE_TAINT:
                        seen.add(taint["effect"])
            status = (await w.request("tainting") or {}).get("status") or {}
            if status.get("phase") in ("Successful", "Failed"):
                break
            await asyncio.sleep(0.02)
        assert status["phase"] == "Successful"
        assert seen == (set() if effect == "Off" else {"NoSchedule"})
        assert_clean(await nodes(w))


RACK = "example.com/rack"


def _racked(replicas: int) -> dict[str, Any]:
    """Pods that run only on racked nodes (a label set by hand, which new nodes lack), one a
    node."""
    labels = {"app": "racked"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "racked", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {RACK: "yes"},
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "labelSelector": {"matchLabels": labels},
                                    "topologyKey": "kubernetes.io/hostname",
                                }
                            ]
                        }
                    },
                    "containers": [{"name": "c", "image": "busybox"}],
                },
            },
        },
    }


async def _racked_pods(w: World) -> list[dict[str, Any]]:
    """The racked pods not on their way out."""
    assert w.client is not None
    items, _ = await w.client.list(PODS, "default", label_selector="app=racked")
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


async def _waiting_racked_pod(w: World, name: str, **spec: Any) -> None:
    """A bare racked pod, made before the roll, that no scheduler has placed."""
    assert w.client is not None
    template = _racked(1)["spec"]["template"]
    template["metadata"]["name"] = name
    template["spec"].update(spec)
    await w.client.create(PODS, {"apiVersion": "v1", "kind": "Pod", **template}, "default")


async def test_two_requests_never_count_on_the_same_room() -> None:
    """One racked node stays, with room for one racked pod; each request replaces one racked
    node. Either batch fits alone, not both: the second to be checked waits for the first's
    pods, and gives up at the scale-up limit rather than leave a pod Pending."""
    async with world(scenario(4, groups=2), settings={"scale_up_limit": 120.0}) as w:
        assert w.client is not None
        by_group: dict[str, list[str]] = {}
        for n in sorted(await nodes(w), key=lambda n: n["metadata"]["name"]):
            group = n["metadata"]["labels"]["eks.amazonaws.com/nodegroup"]
            by_group.setdefault(group, []).append(n["metadata"]["name"])
        (a0, a1), (b0, _) = by_group["workers-a"], by_group["workers-b"]
        for name in (a0, b0):
            await w.client.patch(NODES, name, {"metadata": {"labels": {RACK: "yes"}}})
        await w.client.create(DEPLOYMENTS, _racked(2), "default")

        async def placed() -> list[str] | None:
            hosts = sorted(p["spec"].get("nodeName") or "" for p in await _racked_pods(w))
            return hosts if hosts == sorted((a0, b0)) else None

        await until(placed, timeout=30, what="the racked pods on a0 and b0")
        # The one racked node that stays: room for one racked pod.
        await w.client.patch(NODES, a1, {"metadata": {"labels": {RACK: "yes"}}})
        for name, group, node in (("left", "workers-a", a0), ("right", "workers-b", b0)):
            body = request(name, [group], cycleSettings={"concurrency": 1})
            body["spec"]["nodeNames"] = [node]
            await w.create_request(body)
        ended = {}
        for name in ("left", "right"):
            done = await wait_phase(w, name, ("Successful", "Failed"), timeout=120)
            ended[name] = done["status"]
        assert sorted(s["phase"] for s in ended.values()) == ["Failed", "Successful"], ended
        failed = next(s for s in ended.values() if s["phase"] == "Failed")
        assert "waiting for capacity" in failed["message"], failed["message"]
        # Both racked pods run: the one moved on the node that stays, the other where it was.

        async def both_run() -> list[str] | None:
            hosts = sorted(p["spec"].get("nodeName") or "" for p in await _racked_pods(w))
            return hosts if len(hosts) == 2 and "" not in hosts and a1 in hosts else None

        await until(both_run, timeout=20, what="both racked pods placed")


async def test_a_pod_still_to_be_placed_keeps_its_room() -> None:
    """One racked node stays, with room for one racked pod, and a racked pod made earlier is
    still waiting for its scheduler. The batch's racked pod would fit alone: the batch waits,
    and gives up at the scale-up limit rather than take the room the waiting pod needs."""
    async with world(scenario(4), settings={"scale_up_limit": 120.0}) as w:
        assert w.client is not None
        a0, a1 = sorted(n["metadata"]["name"] for n in await nodes(w))[:2]
        await w.client.patch(NODES, a0, {"metadata": {"labels": {RACK: "yes"}}})
        await w.client.create(DEPLOYMENTS, _racked(1), "default")

        async def on_a0() -> bool:
            return [p["spec"].get("nodeName") for p in await _racked_pods(w)] == [a0]

        await until(on_a0, timeout=30, what="the racked pod on a0")
        await w.client.patch(NODES, a1, {"metadata": {"labels": {RACK: "yes"}}})
        # Made before the roll, not yet placed: a scheduler of its own stands for one that
        # has not come round to it.
        await _waiting_racked_pod(w, "late", schedulerName="later")
        body = request("held", GROUP, cycleSettings={"concurrency": 1})
        body["spec"]["nodeNames"] = [a0]
        await w.create_request(body)
        done = await wait_phase(w, "held", ("Successful", "Failed"), timeout=120)
        status = done["status"]
        assert status["phase"] == "Failed", status
        assert "waiting for capacity" in status["message"], status["message"]
        assert "after 1 Pending pods the scheduler places first" in status["message"]
        # The room was real: placed by hand, the waiting pod runs on the node that stays.
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "late"},
            "target": {"kind": "Node", "name": a1},
        }
        await w.client.request("POST", PODS.path("default", "late", "binding"), body=binding)

        async def both_run() -> bool:
            return sorted(p["spec"].get("nodeName") or "" for p in await _racked_pods(w)) == sorted(
                (a0, a1)
            )

        await until(both_run, timeout=20, what="both racked pods placed")


async def test_a_pod_the_scheduler_turned_down_holds_nothing() -> None:
    """As above, but the waiting racked pod asks for a resource no node has, which the
    capacity check does not model and the scheduler turns down: it may wait for ever, so it
    holds no room, and the roll goes on."""
    async with world(scenario(4), settings={"scale_up_limit": 120.0}) as w:
        assert w.client is not None
        a0, a1 = sorted(n["metadata"]["name"] for n in await nodes(w))[:2]
        for name in (a0, a1):
            await w.client.patch(NODES, name, {"metadata": {"labels": {RACK: "yes"}}})
        await w.client.create(DEPLOYMENTS, _racked(1), "default")
        want = {"example.com/gpu": "1"}
        container = {"name": "c", "image": "busybox"}
        gpu = {**container, "resources": {"requests": want, "limits": want}}
        await _waiting_racked_pod(w, "gpu", containers=[gpu])

        async def turned_down() -> bool:
            assert w.client is not None
            pod = await w.client.get(PODS, "gpu", "default")
            conditions = (pod.get("status") or {}).get("conditions") or []
            return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)

        await until(turned_down, timeout=30, what="the gpu pod turned down")

        async def racked_on() -> str:
            running = [
                p["spec"].get("nodeName") or ""
                for p in await _racked_pods(w)
                if p["metadata"]["name"] != "gpu"
            ]
            return running[0] if len(running) == 1 else ""

        async def placed() -> str | None:
            return await racked_on() or None

        home = await until(placed, timeout=30, what="the racked pod placed")
        assert home in (a0, a1)
        other = a1 if home == a0 else a0
        body = request("goes-on", GROUP, cycleSettings={"concurrency": 1})
        body["spec"]["nodeNames"] = [home]
        await w.create_request(body)
        done = await wait_phase(w, "goes-on", ("Successful", "Failed"), timeout=120)
        assert done["status"]["phase"] == "Successful", done["status"]

        async def moved() -> bool:
            return await racked_on() == other

        await until(moved, timeout=20, what="the racked pod on the node that stays")
        assert not (await w.client.get(PODS, "gpu", "default"))["spec"].get("nodeName")


@pytest.mark.parametrize("waiting", [4, 12])
async def test_a_cluster_kept_full_of_placeholders_is_rolled(waiting: int) -> None:
    """Placeholder pods of priority -1, as an autoscaler's overprovisioning runs them, fill
    every node's spare room, and more wait. The new nodes' room goes to the waiting ones as
    soon as they are Ready. With a few waiting, the batches' own placeholders cannot all be
    placed again: the roll goes on without them (they wait, as the scheduler's preemption
    would leave them). With a crowd waiting, the new nodes are full of placeholders when the
    batch is checked: their room is the batch's all the same, since the scheduler preempts
    them. Either used to hold every batch until the scale-up limit."""
    async with world(scenario(4), settings={"scale_up_limit": 120.0}) as w:
        assert w.client is not None
        await fill_with_placeholders(w, waiting=waiting)
        await w.create_request(request("roll", GROUP, cycleSettings={"concurrency": 2}))
        done = await wait_phase(w, "roll", ("Successful", "Failed"), timeout=240)
        assert done["status"]["phase"] == "Successful", done["status"].get("message")
        # Every pod that is not a placeholder runs.
        pods, _ = await w.client.list(PODS)
        waiting = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]
        assert all(name.startswith("headroom-") for name in waiting), waiting
