"""Kubelet and node lifecycle decisions: node status, taints, grace periods, pod status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodeops.sim.cluster import sim_annotations as ann
from nodeops.sim.cluster.kubelet import (
    kubelet_state,
    readiness_delay,
    started_at,
    termination_grace,
)
from nodeops.sim.cluster.nodelifecycle import desired_taints, unknown_conditions_patch
from nodeops.sim.cluster.nodestatus import node_status_patch
from nodeops.sim.cluster.podstatus import IPAllocator, completed_status, pod_ready, running_status

NOW = datetime(2025, 1, 1, 0, 10, tzinfo=UTC)
NOW_TEXT = "2025-01-01T00:10:00Z"


def node(
    *,
    ready: str | None = "True",
    heartbeat: str = "2025-01-01T00:09:00Z",
    unschedulable: bool = False,
    taints: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    pressure: str = "False",
) -> dict[str, Any]:
    conditions = []
    if ready is not None:
        conditions = [
            {"type": t, "status": pressure, "reason": r, "lastHeartbeatTime": heartbeat}
            for t, r in (
                ("MemoryPressure", "KubeletHasSufficientMemory"),
                ("DiskPressure", "KubeletHasNoDiskPressure"),
                ("PIDPressure", "KubeletHasSufficientPID"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": ready,
                "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
                "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }
        )
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "metadata": {"name": "n1", "annotations": annotations or {}, "resourceVersion": "7"},
        "spec": spec,
        "status": {"conditions": conditions, "capacity": {"cpu": "2"}, "nodeInfo": {"x": 1}},
    }


# -- node status ---------------------------------------------------------------------------------


def _patch(n: dict[str, Any], state: str = ann.KUBELET_RUNNING) -> dict[str, Any] | None:
    return node_status_patch(
        n, state=state, now=NOW, now_text=NOW_TEXT, report_seconds=300, node_ip="10.0.0.1"
    )


def test_node_status_is_posted_only_when_due() -> None:
    assert _patch(node()) is None
    stale = _patch(node(heartbeat="2025-01-01T00:04:00Z"))
    assert stale is not None
    ready = next(c for c in stale["status"]["conditions"] if c["type"] == "Ready")
    assert ready["lastHeartbeatTime"] == NOW_TEXT
    # Status unchanged: the transition time stays.
    assert ready["lastTransitionTime"] == "2025-01-01T00:00:00Z"


def test_node_status_follows_the_kubelet_state() -> None:
    patch = _patch(node(), ann.KUBELET_NOT_READY)
    assert patch is not None
    ready = next(c for c in patch["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "KubeletNotReady")
    assert ready["lastTransitionTime"] == NOW_TEXT
    unknown = _patch(node(ready="Unknown"))
    assert unknown is not None


def test_node_status_fills_in_what_a_bare_node_lacks() -> None:
    bare = {"metadata": {"name": "n1"}, "spec": {}, "status": {}}
    patch = _patch(bare)
    assert patch is not None
    st = patch["status"]
    assert st["capacity"]["pods"] == "110"
    assert st["nodeInfo"]["kubeletVersion"]
    assert {"type": "InternalIP", "address": "10.0.0.1"} in st["addresses"]


def test_kubelet_state_annotation() -> None:
    assert kubelet_state(node()) == ann.KUBELET_RUNNING
    stopped = node(annotations={ann.KUBELET_STATE: ann.KUBELET_STOPPED})
    assert kubelet_state(stopped) == ann.KUBELET_STOPPED
    assert kubelet_state(node(annotations={ann.KUBELET_STATE: "bogus"})) == ann.KUBELET_RUNNING


# -- lifecycle taints ----------------------------------------------------------------------------


def _keys(taints: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in taints}


def test_cordon_taint_mirrors_unschedulable() -> None:
    assert _keys(desired_taints(node(unschedulable=True), NOW_TEXT)) == {
        ("node.kubernetes.io/unschedulable", "NoSchedule")
    }
    cordon = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    assert desired_taints(node(taints=cordon), NOW_TEXT) == []


def test_health_taints_follow_ready() -> None:
    assert _keys(desired_taints(node(ready="False"), NOW_TEXT)) == {
        ("node.kubernetes.io/not-ready", "NoSchedule"),
        ("node.kubernetes.io/not-ready", "NoExecute"),
    }
    unknown = desired_taints(node(ready="Unknown"), NOW_TEXT)
    assert _keys(unknown) == {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    assert next(t for t in unknown if t["effect"] == "NoExecute")["timeAdded"] == NOW_TEXT
    pressured = desired_taints(node(pressure="True"), NOW_TEXT)
    assert ("node.kubernetes.io/memory-pressure", "NoSchedule") in _keys(pressured)


def test_foreign_taints_are_kept_and_unchanged_nodes_produce_identical_taints() -> None:
    mine = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    kept = desired_taints(node(taints=[mine], unschedulable=True), NOW_TEXT)
    assert kept[0] == mine
    assert desired_taints(node(taints=kept, unschedulable=True), "later") == kept


def test_unknown_conditions_keep_heartbeats_and_guard_with_resource_version() -> None:
    patch = unknown_conditions_patch(node(), NOW_TEXT)
    assert patch["metadata"]["resourceVersion"] == "7"
    ready = next(c for c in patch["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "Unknown"
    assert ready["reason"] == "NodeStatusUnknown"
    assert ready["lastHeartbeatTime"] == "2025-01-01T00:09:00Z"


# -- kubelet pod logic ---------------------------------------------------------------------------


def test_termination_grace_is_the_shorter_of_spec_and_delete() -> None:
    pod = {
        "metadata": {"deletionGracePeriodSeconds": 30},
        "spec": {"terminationGracePeriodSeconds": 60},
    }
    assert termination_grace(pod) == 30
    pod = {
        "metadata": {"deletionGracePeriodSeconds": 90},
        "spec": {"terminationGracePeriodSeconds": 60},
    }
    assert termination_grace(pod) == 60
    assert termination_grace({"metadata": {}, "spec": {}}) == 30


def test_readiness_delay_from_probes() -> None:
    pod = {
        "spec": {
            "containers": [
                {"readinessProbe": {"initialDelaySeconds": 5}},
                {"readinessProbe": {"initialDelaySeconds": 12}},
                {},
            ]
        }
    }
    assert readiness_delay(pod) == 12
    assert readiness_delay({"spec": {"containers": [{}]}}) == 0


def test_running_and_completed_status() -> None:
    pod: dict[str, Any] = {
        "metadata": {"uid": "u1"},
        "spec": {
            "containers": [{"name": "app", "image": "nginx:1.27"}],
            "initContainers": [{"name": "init", "image": "busybox"}],
        },
        "status": {"phase": "Pending"},
    }
    st = running_status(
        pod, now=NOW_TEXT, started_at=NOW_TEXT, ready=False, host_ip="10.0.0.1", pod_ip="10.1.0.2"
    )
    assert st["phase"] == "Running"
    assert st["podIPs"] == [{"ip": "10.1.0.2"}]
    assert st["containerStatuses"][0]["state"]["running"]["startedAt"] == NOW_TEXT
    assert st["containerStatuses"][0]["imageID"].startswith("nginx@sha256:")
    assert st["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    pod["status"] = st
    assert not pod_ready(pod)
    assert started_at(pod) == NOW_TEXT
    later = running_status(
        pod, now="later", started_at=NOW_TEXT, ready=True, host_ip="h", pod_ip="p"
    )
    conds = {c["type"]: c for c in later["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["lastTransitionTime"] == "later"
    assert conds["Initialized"]["lastTransitionTime"] == NOW_TEXT
    pod["status"] = later
    assert pod_ready(pod)
    done = completed_status(pod, now="end")
    assert done["phase"] == "Succeeded"
    term = done["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["startedAt"] == NOW_TEXT and term["finishedAt"] == "end"
    assert completed_status(pod, now="end", exit_code=2)["phase"] == "Failed"


def test_ip_allocator_uses_the_pod_cidr() -> None:
    alloc = IPAllocator("10.244.3.0/24", 0)
    assert [alloc.allocate() for _ in range(2)] == ["10.244.3.2", "10.244.3.3"]
    fallback = IPAllocator(None, 300)
    assert fallback.allocate() == "10.65.44.2"
