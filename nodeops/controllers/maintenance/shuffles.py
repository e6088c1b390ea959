"""Pod shuffle metrics: which workloads lose a pod when a node enters maintenance.

Counted at the moment the transition to in-maintenance is committed, from the pods then on the
node (so pods the drain evicts later are counted too). `owner` is `<kind>/<namespace>/<name>`
(Deployment for pods of a Deployment's ReplicaSet); per replica divides by the owner's replica
count then (DaemonSets: ready pods), skipping owners with no replicas.
"""

from __future__ import annotations

from typing import Any

import structlog

from nodeops.controllers.maintenance.metrics import POD_SHUFFLES, POD_SHUFFLES_PER_REPLICA
from nodeops.controllers.maintenance.plugins.base import ClusterView
from nodeops.kube import errors
from nodeops.kube.resources import DAEMONSETS, DEPLOYMENTS, REPLICASETS, STATEFULSETS

log = structlog.get_logger(__name__)
Obj = dict[str, Any]
_KINDS = {
    "ReplicaSet": REPLICASETS,
    "Deployment": DEPLOYMENTS,
    "StatefulSet": STATEFULSETS,
    "DaemonSet": DAEMONSETS,
}


def _controller(obj: Obj) -> Obj | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return dict(ref)
    return None


def _replicas(kind: str, obj: Obj) -> float:
    if kind == "DaemonSet":
        return float((obj.get("status") or {}).get("numberReady") or 0)
    value = (obj.get("spec") or {}).get("replicas")
    return float(1 if value is None else value)


async def record_shuffles(cluster: ClusterView, node_name: str, profile: str) -> int:
    pods = await cluster.pods_on_node(node_name)
    counted = 0
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        ref = _controller(pod)
        if ref is None or ref.get("kind") not in _KINDS:
            continue
        ns = (pod.get("metadata") or {}).get("namespace") or ""
        kind, name = str(ref["kind"]), str(ref.get("name", ""))
        try:
            owner = await cluster.client.get(_KINDS[kind], name, ns)
            if kind == "ReplicaSet":
                top = _controller(owner)
                if top is not None and top.get("kind") == "Deployment":
                    kind, name = "Deployment", str(top.get("name", ""))
                    owner = await cluster.client.get(DEPLOYMENTS, name, ns)
        except errors.KubeError as exc:
            log.info("shuffle owner not found", pod=name, error=str(exc))
            continue
        label = f"{kind.lower()}/{ns}/{name}"
        POD_SHUFFLES.labels(label, profile).inc()
        replicas = _replicas(kind, owner)
        if replicas > 0:
            POD_SHUFFLES_PER_REPLICA.labels(label, profile).inc(1 / replicas)
        counted += 1
    return counted
