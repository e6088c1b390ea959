"""When a node counts as going away, and when it does not."""

from __future__ import annotations

from typing import Any

import pytest

from nodeops.controllers.detacher import signals
from nodeops.controllers.detacher.ingress import ingress_view, rollout_holds


def node(
    *,
    unschedulable: bool = False,
    taints: list[str] = (),  # type: ignore[assignment]
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            "unschedulable": unschedulable,
            "taints": [{"key": k, "effect": "NoSchedule"} for k in taints],
        },
    }


@pytest.mark.parametrize(
    ("obj", "reasons"),
    [
        (node(), []),
        (node(unschedulable=True), ["Unschedulable"]),
        (node(taints=["ToBeDeletedByClusterAutoscaler"]), ["ToBeDeletedByClusterAutoscaler"]),
        (
            node(taints=["aws-node-termination-handler/spot-itn"]),
            ["NodeTerminationHandler"],
        ),
        (
            node(labels={signals.EXCLUDE_LABEL: "true"}),
            ["ExcludedFromExternalLoadBalancers"],
        ),
        (node(labels={signals.EXCLUDE_LABEL: ""}), ["ExcludedFromExternalLoadBalancers"]),
        (node(annotations={signals.DETACH_ANNOTATION: "true"}), ["DetachRequested"]),
        (node(annotations={signals.DETACH_ANNOTATION: "False"}), []),
        # node-detacher's bug: any other taint detached the node.
        (node(taints=["dedicated", "node.kubernetes.io/not-ready", "gpu"]), []),
        # Our own exclusion label is a consequence, not a reason.
        (node(labels={signals.EXCLUDE_LABEL: signals.EXCLUDE_LABEL_VALUE}), []),
        (
            node(unschedulable=True, taints=["ToBeDeletedByClusterAutoscaler"]),
            ["Unschedulable", "ToBeDeletedByClusterAutoscaler"],
        ),
    ],
)
def test_reasons(obj: dict[str, Any], reasons: list[str]) -> None:
    assert signals.going_away_reasons(obj) == reasons


def test_configured_taints_by_key_or_prefix() -> None:
    tainted = node(taints=["karpenter.sh/disrupted", "dedicated"])
    assert signals.going_away_reasons(tainted, taints=["karpenter.sh/disrupted"]) == [
        "ConfiguredTaint"
    ]
    assert signals.going_away_reasons(tainted, taints=["karpenter.sh/*"]) == ["ConfiguredTaint"]
    assert signals.going_away_reasons(tainted, taints=["karpenter.sh/other"]) == []
    assert signals.going_away_reasons(node(), extra=["IngressPodTerminating"]) == [
        "IngressPodTerminating"
    ]


def test_control_plane_by_label_or_taint() -> None:
    assert signals.is_control_plane(node(labels={"node-role.kubernetes.io/control-plane": ""}))
    assert signals.is_control_plane(node(taints=["node-role.kubernetes.io/master"]))
    assert not signals.is_control_plane(node(labels={"node-role.kubernetes.io/worker": ""}))


def pod(
    owner: str | None, *, ready: bool = True, deleting: bool = False, ns: str = "edge"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": ns, "name": f"{owner}-x"}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": "DaemonSet", "name": owner, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_ingress_view() -> None:
    ingress = {("edge", "contour")}
    assert ingress_view([pod("contour")], ingress) == ingress_view([pod("contour")], ingress)
    view = ingress_view([pod("contour"), pod("logs", deleting=True)], ingress)
    assert (view.terminating, view.ready) == (False, True)
    view = ingress_view([pod("contour", deleting=True)], ingress)
    assert (view.terminating, view.ready) == (True, False)
    # Old pod gone, new one not there yet: not ready.
    assert not ingress_view([], ingress).ready
    assert not ingress_view([pod("contour", ready=False)], ingress).ready
    # Another namespace's DaemonSet of that name is someone else's.
    assert not ingress_view([pod("contour", deleting=True, ns="other")], ingress).terminating
    assert not ingress_view([pod(None, deleting=True)], ingress).terminating
    assert not ingress_view([pod("contour", deleting=True)], set()).terminating


def test_a_rollout_holds_the_node_until_a_new_pod_is_ready() -> None:
    ingress = {("edge", "contour")}
    terminating = ingress_view([pod("contour", deleting=True)], ingress)
    gone = ingress_view([], ingress)
    back = ingress_view([pod("contour")], ingress)
    assert rollout_holds(terminating, rolling=False, stopping_daemonset_pods=False)
    # Between the old pod's end and the new pod's readiness a node out for a rollout stays out.
    assert rollout_holds(gone, rolling=True, stopping_daemonset_pods=False)
    assert not rollout_holds(gone, rolling=False, stopping_daemonset_pods=False)
    assert not rollout_holds(back, rolling=True, stopping_daemonset_pods=False)


def test_the_detachers_own_stopping_of_daemonset_pods_is_no_rollout() -> None:
    """Its DaemonSet taint keeps the ingress pod away until the node is attached again, so
    waiting for a ready one would keep an uncordoned node out for good."""
    ingress = {("edge", "contour")}
    terminating = ingress_view([pod("contour", deleting=True)], ingress)
    gone = ingress_view([], ingress)
    assert not rollout_holds(terminating, rolling=False, stopping_daemonset_pods=True)
    assert not rollout_holds(gone, rolling=True, stopping_daemonset_pods=True)
