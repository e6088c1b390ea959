"""Which pods left Pending a roll made: a replica taking its turn to wait is not one."""

from __future__ import annotations

from typing import Any

from nodeops.rehearse.timings import Workloads
from nodeops.rehearse.watch import RollRecorder
from nodeops.sim.clock import Clock

PODS = ("", "pods")


def pod(name: str, node: str = "", owner: str | None = "web-rs") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "shop"}
    if owner is not None:
        meta["ownerReferences"] = [
            {"kind": "ReplicaSet", "name": owner, "uid": owner, "controller": True}
        ]
    status: dict[str, Any] = {"phase": "Pending"}
    if not node:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu.",
            }
        ]
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


def test_a_replica_waiting_in_place_of_one_that_waited_before_is_not_the_rolls() -> None:
    rec = RollRecorder(None, Clock(monotonic=lambda: 0.0), Workloads(()))
    for body in (pod("web-a"), pod("web-b", "n1"), pod("db-0", "n1", owner="db-rs")):
        rec.observe(PODS, "ADDED", body)
    rec.start({})
    # The roll: web-a, Pending before, is placed on a new node; web-b and db-0 are evicted,
    # and their replacements find no room.
    rec.observe(PODS, "MODIFIED", pod("web-a", "n2"))
    for gone in (pod("web-b", "n1"), pod("db-0", "n1", owner="db-rs")):
        rec.observe(PODS, "DELETED", gone)
    for new in (pod("web-c"), pod("web-d"), pod("db-1", owner="db-rs"), pod("lone", owner=None)):
        rec.observe(PODS, "ADDED", new)
    before = {name: was for name, _, was, _ in rec.pending()}
    # One of web's two waits in place of web-a; the other, db's and the lone pod are new.
    assert before == {
        "shop/web-c": True,
        "shop/web-d": False,
        "shop/db-1": False,
        "shop/lone": False,
    }


def test_a_pod_pending_before_is_counted_first_for_its_workload() -> None:
    rec = RollRecorder(None, Clock(monotonic=lambda: 0.0), Workloads(()))
    rec.observe(PODS, "ADDED", pod("web-z"))
    rec.observe(PODS, "ADDED", pod("web-b", "n1"))
    rec.start({})
    rec.observe(PODS, "DELETED", pod("web-b", "n1"))
    rec.observe(PODS, "ADDED", pod("web-a"))
    # web-z still waits: it is the one that waited before, and web-a (first by name) is new.
    assert [(name, was) for name, _, was, _ in rec.pending()] == [
        ("shop/web-a", False),
        ("shop/web-z", True),
    ]


def test_a_victim_seen_only_as_it_goes_is_counted_preempted() -> None:
    """A watch may skip the update that marked a pod a victim: its deletion carries it."""
    rec = RollRecorder(None, Clock(monotonic=lambda: 0.0), Workloads(()))
    rec.observe(PODS, "ADDED", pod("web-a", "n1"))
    rec.observe(PODS, "ADDED", pod("lone", "n1", owner=None))
    rec.start({})
    victim = pod("web-a", "n1")
    victim["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    ]
    rec.observe(PODS, "DELETED", victim)
    evicted = pod("lone", "n1", owner=None)
    evicted["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    ]
    rec.observe(PODS, "DELETED", evicted)
    assert rec.preempted() == {"ReplicaSet/shop/web-rs": 1}
