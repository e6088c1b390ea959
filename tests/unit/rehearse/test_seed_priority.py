"""The copy gives each pod the priority it has in the live cluster, whatever class is the
default now."""

from __future__ import annotations

from typing import Any

from nodeops.rehearse.seed import Copied, StartTimes, copy_snapshot
from nodeops.rehearse.snapshot import Snapshot
from nodeops.rehearse.timings import Workloads
from nodeops.sim.clock import Clock
from nodeops.sim.cloud.cloud import SimCloud
from nodeops.sim.server.app import SimServer


def pod(name: str, priority: int, klass: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "pause"}], "priority": priority}
    if klass is not None:
        spec["priorityClassName"] = klass
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def copied_into_a_server(snapshot: Snapshot) -> tuple[SimServer, Copied]:
    """The snapshot as the rehearsal copies it, into a simulated API server of its own."""
    clock = Clock()
    server = SimServer(clock=clock)
    copied = copy_snapshot(
        server,
        SimCloud(clock),
        snapshot,
        boot_seconds=60,
        start_times=StartTimes(),
        workloads=Workloads(()),
    )
    return server, copied


def test_pods_made_before_a_default_class_keep_priority_zero() -> None:
    """`standard` became the cluster's default after `old` was made: `old` names no class
    and runs at 0, `new` was given `standard` by admission. In the copy both keep theirs,
    and `standard` is the default for the pods the roll makes."""
    standard = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "standard"},
        "value": 1000,
        "globalDefault": True,
    }
    snapshot = Snapshot(
        objects={
            "priorityclasses": [standard],
            "pods": [pod("old", 0, None), pod("new", 1000, "standard")],
        }
    )
    server, copied = copied_into_a_server(snapshot)
    assert copied.pods == 2
    rt = server.registry.lookup("", "v1", "pods")
    got = {
        name: server.registry.get(rt, "default", name)["spec"].get("priority")
        for name in ("old", "new")
    }
    assert got == {"old": 0, "new": 1000}
    made = server.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "later", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "pause"}]},
        }
    )
    assert (made["spec"]["priority"], made["spec"]["priorityClassName"]) == (1000, "standard")


def test_of_two_default_classes_the_lowest_stays_the_default() -> None:
    """A race between writers can leave two classes marked the default; kube's admission takes
    the one of the lowest value, and the copy, which allows one, keeps that one."""
    classes = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "globalDefault": True,
        }
        for name, value in (("high", 2000), ("low", 10))
    ]
    server, _ = copied_into_a_server(
        Snapshot(objects={"priorityclasses": classes, "pods": [pod("old", 0, None)]})
    )
    rt = server.registry.lookup("scheduling.k8s.io", "v1", "priorityclasses")
    marked = {n: server.registry.get(rt, "", n).get("globalDefault") for n in ("high", "low")}
    assert marked == {"high": False, "low": True}
