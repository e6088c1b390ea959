"""The capacity check before a batch: requests, taints, selectors, affinity, exclusions."""

from __future__ import annotations

from typing import Any

from nodeops.controllers.cycling.fit import check_fit


def node(
    name: str, cpu: str = "2", mem: str = "4Gi", pods: int = 110, **extra: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": extra.pop("labels", {"zone": "a"})},
        "spec": {
            "taints": extra.pop("taints", []),
            "unschedulable": extra.pop("unschedulable", False),
        },
        "status": {
            "allocatable": {"cpu": cpu, "memory": mem, "pods": str(pods)},
            "conditions": [{"type": "Ready", "status": extra.pop("ready", "True")}],
        },
    }


def no_pods(_: str) -> list[dict[str, Any]]:
    return []


def pod(
    name: str, node_name: str, cpu: str = "500m", mem: str = "512Mi", **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "nodeName": node_name,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}],
    }
    body.update(spec)
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "ownerReferences": [
                {"kind": "ReplicaSet", "controller": True, "name": "rs", "uid": "1"}
            ],
        },
        "spec": body,
        "status": {"phase": "Running"},
    }


def test_pods_fit_on_a_new_node() -> None:
    old = [pod(f"p{i}", "old") for i in range(3)]
    result = check_fit(old, [node("old"), node("new")], {"old": old}.get, exclude={"old"})
    assert result.fits and result.pods == 3


def test_not_enough_cpu_is_reported() -> None:
    old = [pod(f"p{i}", "old", cpu="1") for i in range(3)]
    existing = [pod("busy", "new", cpu="1")]
    result = check_fit(
        old, [node("old"), node("new")], {"old": old, "new": existing}.get, exclude={"old"}
    )
    assert not result.fits
    assert len(result.unplaced) == 2
    assert "do not fit" in result.message


def test_taints_selectors_and_affinity() -> None:
    tainted = node("tainted", taints=[{"key": "gpu", "effect": "NoSchedule"}])
    other_zone = node("b", labels={"zone": "b"})
    picky = pod("picky", "old", nodeSelector={"zone": "a"})
    result = check_fit([picky], [tainted, other_zone], no_pods, exclude={"old"})
    assert not result.fits
    tolerant = pod(
        "tolerant",
        "old",
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
    )
    assert check_fit([tolerant], [tainted, other_zone], no_pods, exclude={"old"}).fits


def test_not_ready_cordoned_and_excluded_nodes_do_not_count() -> None:
    p = [pod("p", "old")]
    nodes = [
        node("old"),
        node("nr", ready="False"),
        node("cordoned", unschedulable=True),
        node("draining"),
    ]
    assert not check_fit(p, nodes, no_pods, exclude={"old", "draining"}).fits


def test_daemonset_and_finished_pods_do_not_move() -> None:
    ds = pod("ds", "old")
    ds["metadata"]["ownerReferences"] = [
        {"kind": "DaemonSet", "controller": True, "name": "d", "uid": "2"}
    ]
    done = pod("done", "old")
    done["status"]["phase"] = "Succeeded"
    result = check_fit([ds, done], [node("old")], no_pods, exclude={"old"})
    assert result.fits and result.pods == 0


def test_only_the_nodes_the_first_fit_reaches_are_read() -> None:
    """A batch's pods usually fit on the first nodes with room: the check must not read the
    pods of every node of a large cluster for each batch."""
    old = [pod(f"p{i}", "old") for i in range(2)]
    asked: list[str] = []
    read: list[str] = []

    def pods_of(name: str) -> list[dict[str, Any]]:
        asked.append(name)
        return []

    def nodes() -> Any:
        for i in range(1000):
            read.append(f"n{i}")
            yield node(f"n{i}")

    result = check_fit(old, nodes(), pods_of, exclude={"old"})
    assert result.fits
    assert asked == ["n0"]
    assert len(read) == 1
