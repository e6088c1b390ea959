"""The disruption controller's bookkeeping: budget membership and controller scales."""

from __future__ import annotations

from typing import Any

from nodeops.sim.cluster.pdb_status import ControllerScale

from .disruption_fixture import disruption_controller


def _obj(kind: str, name: str, uid: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1"}
    meta.update(extra.pop("meta", {}))
    return {"kind": kind, "metadata": meta, **extra}


def test_members_follow_labels_and_budgets_are_queued() -> None:
    dc, infs = disruption_controller()
    pods, pdbs = infs["pods"], infs["poddisruptionbudgets"]
    pods._upsert(_obj("Pod", "a", "pa", meta={"labels": {"app": "x"}}))
    pdbs._upsert(
        _obj(
            "PodDisruptionBudget", "budget", "b1", spec={"selector": {"matchLabels": {"app": "x"}}}
        )
    )
    assert dc._members[("ns", "budget")].names() == {"a"}
    pods._upsert(_obj("Pod", "b", "pb", meta={"labels": {"app": "x"}, "resourceVersion": "2"}))
    pods._upsert(_obj("Pod", "c", "pc", meta={"labels": {"app": "y"}, "resourceVersion": "2"}))
    assert dc._members[("ns", "budget")].names() == {"a", "b"}
    pods._upsert(_obj("Pod", "a", "pa", meta={"labels": {"app": "z"}, "resourceVersion": "3"}))
    assert dc._members[("ns", "budget")].names() == {"b"}
    pods._delete(_obj("Pod", "b", "pb"))
    assert dc._members[("ns", "budget")].names() == set()
    assert len(dc.queue) == 1


def test_scale_of_resolves_deployments_above_replicasets() -> None:
    dc, infs = disruption_controller()
    infs["deployments"]._upsert(_obj("Deployment", "d", "ud", spec={"replicas": 5}))
    dref = {"kind": "Deployment", "uid": "ud", "controller": True}
    infs["replicasets"]._upsert(
        _obj("ReplicaSet", "d-1", "urs", meta={"ownerReferences": [dref]}, spec={"replicas": 2})
    )
    infs["replicasets"]._upsert(_obj("ReplicaSet", "solo", "usolo", spec={"replicas": 3}))
    infs["statefulsets"]._upsert(_obj("StatefulSet", "s", "us", spec={"replicas": 4}))
    assert dc.scale_of({"kind": "ReplicaSet", "uid": "urs"}) == ControllerScale("ud", 5)
    assert dc.scale_of({"kind": "ReplicaSet", "uid": "usolo"}) == 3
    assert dc.scale_of({"kind": "StatefulSet", "uid": "us"}) == 4
    assert dc.scale_of({"kind": "DaemonSet", "uid": "x"}) is None
    assert dc.scale_of({"kind": "ReplicaSet", "uid": "missing"}) is None
