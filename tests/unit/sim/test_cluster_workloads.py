"""Workload controllers' decisions: replica math, rollouts, StatefulSet order, DaemonSet nodes."""

from __future__ import annotations

from typing import Any

import pytest

from nodeops.sim.cluster.daemonset import (
    CachedShouldRun,
    daemon_tolerations,
    daemonset_status,
    node_should_run,
    pin_to_node,
    plan_daemonset,
    target_node,
)
from nodeops.sim.cluster.deployment import (
    RSState,
    deployment_status,
    new_rs_target,
    old_rs_targets,
    surge_and_unavailable,
    template_matches,
)
from nodeops.sim.cluster.podcontrol import (
    Expectations,
    deletion_order,
    int_or_percent,
    is_available,
    merge_status,
)
from nodeops.sim.cluster.replicaset import pods_to_delete, replica_diff, replicaset_status
from nodeops.sim.cluster.statefulset import ordinal_of, plan_statefulset, statefulset_status

T0 = "2025-01-01T00:00:00Z"
T0_EPOCH = 1735689600.0


def pod(
    name: str,
    *,
    node: str | None = "n1",
    phase: str = "Running",
    ready: bool = True,
    ready_at: str = T0,
    created: str = T0,
    restarts: int = 0,
    deleting: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "creationTimestamp": created,
        "labels": labels or {},
    }
    if deleting:
        meta["deletionTimestamp"] = T0
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": meta,
        "spec": spec,
        "status": {
            "phase": phase,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": ready_at,
                }
            ],
            "containerStatuses": [{"name": "c", "restartCount": restarts}],
        },
    }


# -- ReplicaSet ---------------------------------------------------------------------------------


def test_replica_diff_is_bounded_by_burst() -> None:
    assert replica_diff(5, 2) == 3
    assert replica_diff(1, 4) == -3
    assert replica_diff(2000, 0, burst=500) == 500
    assert replica_diff(0, 2000, burst=500) == -500


def test_scale_down_picks_the_cheapest_pods_first() -> None:
    pods = [
        pod("old-ready", created="2025-01-01T00:00:00Z"),
        pod("new-ready", created="2025-01-01T00:05:00Z"),
        pod("unready", ready=False),
        pod("pending", phase="Pending", ready=False),
        pod("unscheduled", node=None, phase="Pending", ready=False),
        pod("crashy", restarts=5, ready_at="2025-01-01T00:00:00Z"),
    ]
    order = [p["metadata"]["name"] for p in deletion_order(pods)]
    assert order[:3] == ["unscheduled", "pending", "unready"]
    assert order.index("crashy") < order.index("old-ready")
    assert order.index("new-ready") < order.index("old-ready")
    assert [p["metadata"]["name"] for p in pods_to_delete(pods, 2)] == ["unscheduled", "pending"]
    assert pods_to_delete(pods, 0) == []


def test_replicaset_status_counts_active_ready_available() -> None:
    rs = {
        "metadata": {"generation": 3},
        "spec": {
            "minReadySeconds": 30,
            "template": {"metadata": {"labels": {"app": "a"}}},
        },
        "status": {"conditions": [{"type": "ReplicaFailure"}]},
    }
    pods = [
        pod("a", labels={"app": "a"}),
        pod("b", labels={"app": "a"}, ready_at="2025-01-01T00:00:20Z"),
        pod("c", labels={"app": "a"}, ready=False),
        pod("d", labels={"app": "a"}, deleting=True),
        pod("e", labels={}, phase="Succeeded"),
    ]
    st = replicaset_status(rs, pods, now=T0_EPOCH + 40)
    assert st == {
        "conditions": [{"type": "ReplicaFailure"}],
        "replicas": 3,
        "fullyLabeledReplicas": 3,
        "readyReplicas": 2,
        "availableReplicas": 1,
        "observedGeneration": 3,
    }


def test_merge_status_omits_zeros_but_keeps_replicas() -> None:
    st = merge_status(
        {"other": 1, "readyReplicas": 5}, ("readyReplicas",), {"replicas": 0, "readyReplicas": 0}
    )
    assert st == {"other": 1, "replicas": 0}


def test_is_available_waits_min_ready_seconds() -> None:
    p = pod("a")
    assert is_available(p, 0, T0_EPOCH)
    assert not is_available(p, 10, T0_EPOCH + 5)
    assert is_available(p, 10, T0_EPOCH + 10)
    assert not is_available(pod("b", ready=False), 0, T0_EPOCH)


@pytest.mark.parametrize(
    ("value", "total", "up", "expected"),
    [
        (None, 10, True, 3),
        ("25%", 10, True, 3),
        ("25%", 10, False, 2),
        (2, 10, False, 2),
        ("x", 4, True, 0),
    ],
)
def test_int_or_percent(value: Any, total: int, up: bool, expected: int) -> None:
    assert int_or_percent(value, total, round_up=up, default="25%") == expected


def test_expectations_wait_for_the_cache() -> None:
    exp = Expectations()
    assert exp.satisfied("rs")
    exp.expect("rs", adds=2, deletes=[("default", "x")])
    assert not exp.satisfied("rs")
    exp.observe(None, pod("new1"), "rs")
    exp.observe(None, pod("new2"), "rs")
    assert not exp.satisfied("rs")
    exp.observe(pod("x"), pod("x", deleting=True), "rs")
    assert exp.satisfied("rs")
    stale = Expectations(ttl=0.0)
    stale.expect("rs", adds=1)
    assert stale.satisfied("rs")


# -- Deployment ---------------------------------------------------------------------------------


def deployment(replicas: int, strategy: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "d", "generation": 2},
        "spec": {
            "replicas": replicas,
            "strategy": strategy or {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": []}},
        },
    }


def test_surge_and_unavailable_defaults_and_rounding() -> None:
    assert surge_and_unavailable(deployment(10)) == (3, 2)
    assert surge_and_unavailable(deployment(1)) == (1, 0)
    zero = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}
    assert surge_and_unavailable(deployment(4, zero)) == (0, 1)
    assert surge_and_unavailable(deployment(4, {"type": "Recreate"})) == (0, 4)


def test_new_rs_grows_within_surge() -> None:
    old = [RSState("old", 10, 10)]
    assert new_rs_target(10, 3, RSState("new", 0, 0), old) == 3
    assert new_rs_target(10, 3, RSState("new", 3, 0), old) == 3  # total already 13
    assert new_rs_target(10, 3, RSState("new", 3, 3), [RSState("old", 5, 5)]) == 8
    assert new_rs_target(10, 3, RSState("new", 12, 12), []) == 10


def test_old_rs_scale_down_keeps_min_available() -> None:
    # 10 replicas, maxUnavailable 2: with the new RS at 3 but none available yet, only 2 old
    # pods may go.
    targets = old_rs_targets(10, 2, RSState("new", 3, 0), [RSState("old", 10, 10)])
    assert targets == {"old": 8}
    # The 4 unhealthy old pods go first (they cost no availability), then 1 more: 9 available
    # pods against a minimum of 8.
    targets = old_rs_targets(10, 2, RSState("new", 3, 3), [RSState("old", 10, 6)])
    assert targets == {"old": 5}
    assert old_rs_targets(10, 2, RSState("new", 10, 10), [RSState("old", 0, 0)]) == {}
    # Oldest first.
    targets = old_rs_targets(
        4,
        1,
        RSState("new", 4, 4),
        [RSState("b", 2, 2, created="2025-01-02"), RSState("a", 2, 2, created="2025-01-01")],
    )
    assert targets == {"a": 0, "b": 0}


def test_template_matches_ignores_the_hash_label() -> None:
    d = deployment(1)
    rs = {
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "d", "pod-template-hash": "abc"}},
                "spec": {"containers": []},
            }
        }
    }
    assert template_matches(rs, d)
    rs["spec"]["template"]["spec"] = {"containers": [{"name": "x"}]}
    assert not template_matches(rs, d)


def test_deployment_status_conditions() -> None:
    d = deployment(3)
    new_rs = {
        "metadata": {"name": "d-1"},
        "spec": {"replicas": 3},
        "status": {"replicas": 3, "readyReplicas": 3, "availableReplicas": 3},
    }
    st = deployment_status(d, new_rs, [new_rs], T0)
    assert st["replicas"] == 3 and st["updatedReplicas"] == 3 and st["availableReplicas"] == 3
    assert st["observedGeneration"] == 2
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Available"]["status"] == "True"
    assert conds["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert "unavailableReplicas" not in st
    d["status"] = st
    # Unchanged state keeps the condition timestamps.
    again = deployment_status(d, new_rs, [new_rs], "2025-01-02T00:00:00Z")
    assert again == st


# -- StatefulSet --------------------------------------------------------------------------------


def sts(replicas: int, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "db", "generation": 1}, "spec": {"replicas": replicas, **spec}}


def sts_pod(i: int, rev: str = "db-r1", **kw: Any) -> dict[str, Any]:
    return pod(f"db-{i}", labels={"controller-revision-hash": rev}, **kw)


def test_ordinal_of() -> None:
    assert ordinal_of("db-12", "db") == 12
    assert ordinal_of("db-x", "db") is None
    assert ordinal_of("web-1", "db") is None


def test_ordered_ready_creates_one_at_a_time() -> None:
    plan = plan_statefulset(sts(3), [], "db-r1")
    assert plan.create == [0]
    plan = plan_statefulset(sts(3), [sts_pod(0, ready=False)], "db-r1")
    assert plan.create == [] and plan.delete == []
    plan = plan_statefulset(sts(3), [sts_pod(0)], "db-r1")
    assert plan.create == [1]
    plan = plan_statefulset(sts(3, podManagementPolicy="Parallel"), [], "db-r1")
    assert plan.create == [0, 1, 2]


def test_deleted_ordinal_is_recreated_after_it_is_gone() -> None:
    pods = [sts_pod(0), sts_pod(1, deleting=True), sts_pod(2)]
    assert plan_statefulset(sts(3), pods, "db-r1").create == []
    pods = [sts_pod(0), sts_pod(2)]
    assert plan_statefulset(sts(3), pods, "db-r1").create == [1]
    pods = [sts_pod(0), sts_pod(1, phase="Failed", ready=False), sts_pod(2)]
    assert plan_statefulset(sts(3), pods, "db-r1").delete == ["db-1"]


def test_scale_down_from_the_highest_ordinal() -> None:
    pods = [sts_pod(i) for i in range(4)]
    assert plan_statefulset(sts(2), pods, "db-r1").delete == ["db-3"]
    pods[3] = sts_pod(3, deleting=True)
    assert plan_statefulset(sts(2), pods, "db-r1").delete == []


def test_rolling_update_replaces_the_highest_outdated_ordinal_above_partition() -> None:
    pods = [sts_pod(i, rev="db-r1") for i in range(3)]
    assert plan_statefulset(sts(3), pods, "db-r2").delete == ["db-2"]
    pods[2] = sts_pod(2, rev="db-r2")
    assert plan_statefulset(sts(3), pods, "db-r2").delete == ["db-1"]
    partitioned = sts(
        3, updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}
    )
    assert plan_statefulset(partitioned, pods, "db-r2").delete == []
    on_delete = sts(3, updateStrategy={"type": "OnDelete"})
    assert plan_statefulset(on_delete, pods, "db-r2").delete == []


def test_statefulset_status_revisions() -> None:
    s = sts(2)
    s["status"] = {"currentRevision": "db-r1"}
    pods = [sts_pod(0, rev="db-r1"), sts_pod(1, rev="db-r2", ready=False)]
    st = statefulset_status(s, pods, "db-r2", T0_EPOCH)
    assert st["replicas"] == 2 and st["readyReplicas"] == 1
    assert st["currentReplicas"] == 1 and st["updatedReplicas"] == 1
    assert st["currentRevision"] == "db-r1" and st["updateRevision"] == "db-r2"
    pods = [sts_pod(0, rev="db-r2"), sts_pod(1, rev="db-r2")]
    assert statefulset_status(s, pods, "db-r2", T0_EPOCH)["currentRevision"] == "db-r2"


# -- DaemonSet ----------------------------------------------------------------------------------


def node(
    name: str,
    *,
    taints: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def test_a_nodes_answer_is_kept_until_the_node_changes() -> None:
    answers = CachedShouldRun({})
    plain = {**node("a"), "metadata": {"name": "a", "resourceVersion": "1"}}
    assert answers(plain) == (True, True)
    tainted = {
        **node("a", taints=[{"key": "gpu", "effect": "NoExecute"}]),
        "metadata": {"name": "a", "resourceVersion": "2"},
    }
    assert answers(tainted) == (False, False)
    # Without a resourceVersion nothing says the node is unchanged: it is asked again.
    assert answers(node("a")) == (True, True)
    answers(node("b"))
    answers.keep_only(["b"])
    assert len(answers) == 1


def test_daemon_tolerations_cover_cordon_and_node_problems() -> None:
    tolerations = daemon_tolerations({"tolerations": [{"key": "custom", "operator": "Exists"}]})
    keys = {(t["key"], t["effect"]) for t in tolerations if t.get("effect")}
    assert ("node.kubernetes.io/unschedulable", "NoSchedule") in keys
    assert ("node.kubernetes.io/not-ready", "NoExecute") in keys
    assert ("node.kubernetes.io/unreachable", "NoExecute") in keys
    assert ("node.kubernetes.io/memory-pressure", "NoSchedule") in keys
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") not in keys
    host = daemon_tolerations({"hostNetwork": True})
    assert any(t["key"] == "node.kubernetes.io/network-unavailable" for t in host)
    assert tolerations[0] == {"key": "custom", "operator": "Exists"}


def test_node_should_run() -> None:
    cordoned = node(
        "c",
        unschedulable=True,
        taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
    )
    assert node_should_run({}, cordoned) == (True, True)
    assert node_should_run({}, node("t", taints=[{"key": "gpu", "effect": "NoSchedule"}])) == (
        False,
        True,
    )
    assert node_should_run({}, node("x", taints=[{"key": "gpu", "effect": "NoExecute"}])) == (
        False,
        False,
    )
    assert node_should_run({"nodeSelector": {"role": "edge"}}, node("plain")) == (False, False)
    assert node_should_run(
        {"nodeSelector": {"role": "edge"}}, node("e", labels={"role": "edge"})
    ) == (True, True)


def test_pin_to_node_and_target_node() -> None:
    p: dict[str, Any] = {"spec": {"affinity": {"podAntiAffinity": {"x": 1}}}}
    pin_to_node(p, "n9")
    assert p["spec"]["affinity"]["podAntiAffinity"] == {"x": 1}
    assert target_node(p) == "n9"
    assert target_node({"spec": {"nodeName": "n3"}}) == "n3"
    assert target_node({"spec": {}}) is None


def ds_pod(name: str, node_name: str, rev: str = "r1", **kw: Any) -> dict[str, Any]:
    p = pod(name, node=node_name, labels={"controller-revision-hash": rev}, **kw)
    return p


def test_plan_daemonset() -> None:
    ds = {"metadata": {"generation": 1}, "spec": {"template": {"spec": {}}}}
    nodes = [node("a"), node("b"), node("c", taints=[{"key": "k", "effect": "NoExecute"}])]
    pods = [
        ds_pod("pa", "a"),
        ds_pod("pa2", "a", created="2025-01-01T00:01:00Z"),
        ds_pod("pc", "c"),
        ds_pod("gone", ""),
    ]
    pin_to_node(pods[3], "deleted-node")
    plan = plan_daemonset(ds, nodes, pods, "r1", T0_EPOCH)
    assert plan.create == ["b"]
    assert sorted(p["metadata"]["name"] for p in plan.delete) == ["gone", "pa2", "pc"]


def test_daemonset_rolling_update_respects_max_unavailable() -> None:
    ds = {
        "metadata": {},
        "spec": {
            "template": {"spec": {}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        },
    }
    nodes = [node("a"), node("b"), node("c")]
    pods = [
        ds_pod("pa", "a", rev="old"),
        ds_pod("pb", "b", rev="old"),
        ds_pod("pc", "c", rev="old", ready=False),
    ]
    plan = plan_daemonset(ds, nodes, pods, "new", T0_EPOCH)
    # The unready outdated pod costs nothing to replace; it already uses the one unavailable slot.
    assert [p["metadata"]["name"] for p in plan.delete] == ["pc"]
    status = daemonset_status(ds, nodes, pods, "new", T0_EPOCH)
    assert status["desiredNumberScheduled"] == 3
    assert status["currentNumberScheduled"] == 3
    assert status["numberReady"] == 2
    assert status["numberUnavailable"] == 1
    assert status["numberMisscheduled"] == 0
    assert "updatedNumberScheduled" not in status


def test_daemonset_replaces_a_stopped_pod_once_its_node_takes_daemon_pods_again() -> None:
    """As kube-controller-manager: a pod evicted under a NoSchedule taint the DaemonSet does not
    tolerate (a drain's) is not replaced until the taint is lifted; a pod still terminating
    blocks its replacement, a finished one being deleted (held by a finalizer) does not
    (`getNodesToDaemonPods(includeDeletedTerminal=false)`), nor does it count in the status."""
    ds = {"metadata": {"generation": 1}, "spec": {"template": {"spec": {}}}}
    drain_taint = [{"key": "example.com/draining", "effect": "NoSchedule"}]
    assert plan_daemonset(ds, [node("a", taints=drain_taint)], [], "r1", T0_EPOCH).create == []
    assert plan_daemonset(ds, [node("a", unschedulable=True)], [], "r1", T0_EPOCH).create == ["a"]

    terminating = ds_pod("old", "a", deleting=True)
    finished = ds_pod("old", "a", deleting=True, phase="Failed", ready=False)
    assert plan_daemonset(ds, [node("a")], [terminating], "r1", T0_EPOCH).create == []
    plan = plan_daemonset(ds, [node("a")], [finished], "r1", T0_EPOCH)
    assert (plan.create, plan.delete) == (["a"], [])
    status = daemonset_status(ds, [node("a")], [finished], "r1", T0_EPOCH)
    assert (status["desiredNumberScheduled"], status["currentNumberScheduled"]) == (1, 0)
    failed = ds_pod("failed", "a", phase="Failed", ready=False)
    status = daemonset_status(ds, [node("a")], [failed], "r1", T0_EPOCH)
    assert status["currentNumberScheduled"] == 1  # until the controller deletes it
