"""The scheduler's walk over the nodes skips those a pod's static checks rule out without
changing where it stops, what it picks, or where the next walk starts."""

from __future__ import annotations

import random
from typing import Any

from nodeops.sim.cluster.daemonset import pin_to_node
from nodeops.sim.cluster.scheduler import STATIC_FITS_KEPT, Scheduler, feasible_nodes_to_find
from nodeops.sim.cluster.scheduling import (
    TAINT_TOLERATION_WEIGHT,
    NodeUsage,
    effective_taints,
    intolerable_prefer_no_schedule,
    least_allocated_score,
    node_allocatable,
    pod_requests,
    resource_filter,
    static_filter,
    taint_toleration_scores,
)
from tests.unit.sim.test_cluster_scheduling import _scheduler, node, pod


def full_walk(sched: Scheduler, p: dict[str, Any], start: int) -> tuple[str | None, int]:
    """kube-scheduler's walk, node by node: the pick and how many nodes it looked at."""
    nodes = [sched._infos[n].node for n in sorted(sched._infos)]
    total = len(nodes)
    want = feasible_nodes_to_find(total)
    requests = pod_requests(p)
    tolerations = p["spec"].get("tolerations") or []
    candidates = []
    checked = total
    for i in range(total):
        n = nodes[(start + i) % total]
        name = n["metadata"]["name"]
        usage = sched._usage.get(name) or NodeUsage()
        alloc = node_allocatable(n)
        if static_filter(p, n) or resource_filter(requests, alloc, usage):
            continue
        prefer = [t for t in effective_taints(n) if t.get("effect") == "PreferNoSchedule"]
        candidates.append(
            (
                name,
                least_allocated_score(requests, alloc, usage),
                intolerable_prefer_no_schedule(prefer, tolerations),
                usage.pods,
            )
        )
        if len(candidates) >= want:
            checked = i + 1
            break
    best, best_score, best_pods = None, -1.0, 0
    for (name, fit, _, pods), taint in zip(
        candidates, taint_toleration_scores([c[2] for c in candidates]), strict=True
    ):
        score = fit + TAINT_TOLERATION_WEIGHT * taint
        if score > best_score or (score == best_score and pods < best_pods):
            best, best_score, best_pods = name, score, pods
    return best, checked


def test_the_walk_picks_and_rotates_as_a_walk_over_every_node() -> None:
    rng = random.Random(7)
    names = [f"n{i:03d}" for i in range(260)]
    sched = _scheduler([node(n, labels={"zone": rng.choice("ab")}) for n in names])
    kinds = [
        pod("web"),
        pod("zonal", node_selector={"zone": "a"}),
        pod("tolerant", tolerations=[{"operator": "Exists"}]),
        pod("big", cpu="3"),
    ]
    picks = 0
    version = 1
    for step in range(600):
        # A roll: nodes cordoned, tainted, relabelled and filled while pods are placed.
        for name in rng.sample(names, 3):
            version += 1
            changed = node(
                name,
                labels={"zone": rng.choice("ab")},
                unschedulable=rng.random() < 0.3,
                taints=[{"key": "k", "effect": rng.choice(["NoSchedule", "PreferNoSchedule"])}]
                if rng.random() < 0.2
                else None,
            )
            changed["metadata"]["resourceVersion"] = str(version)
            sched.nodes._upsert(changed)
        p = rng.choice(kinds)
        start = sched._next_start
        expected, checked = full_walk(sched, p, start % len(names))
        chosen, reasons = sched.select_node(p)
        assert chosen == expected, step
        assert sched._next_start == (start % len(names) + checked) % len(names), step
        if chosen is None:
            assert sum(reasons.values()) == len(names)
        else:
            picks += 1
            sched._account(("default", f"p{step}"), chosen, p)
    assert picks > 300
    cordoned = sum(1 for i in sched._infos.values() if i.node["spec"].get("unschedulable"))
    assert 40 < cordoned < 120


def test_a_pod_pinned_to_its_node_does_not_keep_a_class_for_ever() -> None:
    sched = _scheduler([node(f"n{i}") for i in range(50)])
    for i in range(STATIC_FITS_KEPT + 20):
        pinned = pod(f"ds-{i}")
        pin_to_node(pinned, f"n{i % 50}")
        chosen, _ = sched.select_node(pinned)
        assert chosen == f"n{i % 50}"
    assert len(sched._static_fit) == STATIC_FITS_KEPT
