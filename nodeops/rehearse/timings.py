"""How long things take in this cluster, read from what it recorded rather than assumed.

A replacement's boot time comes from past rolls: a CycleNodeRequest keeps when its last batch's
scale-up started, and the nodes that registered after it say how long the cloud took. A pod's
start time comes from its own record: the Ready condition's transition against the pod's
creation, which covers image pulls, init containers and probes' initial delays as they are
here, not as a default would have them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

__all__ = ["Workloads", "boot_seconds_from_history", "parse_time", "pod_start_seconds"]

Obj = dict[str, Any]


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class Workloads:
    """Which workload a pod belongs to: its controller, with a Deployment's ReplicaSets folded
    into the Deployment, so "web" is one line of the report however many revisions it has."""

    def __init__(self, replicasets: Iterable[Mapping[str, Any]]) -> None:
        self._deployment_of: dict[tuple[str, str], str] = {}
        for rs in replicasets:
            meta = rs.get("metadata") or {}
            owner = _controller(meta)
            if owner is not None and owner.get("kind") == "Deployment":
                self._deployment_of[(meta.get("namespace", ""), meta["name"])] = owner["name"]

    def add_replicaset(self, rs: Mapping[str, Any]) -> None:
        meta = rs.get("metadata") or {}
        owner = _controller(meta)
        if owner is not None and owner.get("kind") == "Deployment":
            self._deployment_of[(meta.get("namespace", ""), meta["name"])] = owner["name"]

    def of(self, pod: Mapping[str, Any]) -> str | None:
        """`Kind/namespace/name` of the pod's workload, None for a pod no controller owns."""
        meta = pod.get("metadata") or {}
        owner = _controller(meta)
        if owner is None:
            return None
        namespace = meta.get("namespace", "")
        kind, name = str(owner.get("kind")), str(owner.get("name"))
        if kind == "ReplicaSet":
            deployment = self._deployment_of.get((namespace, name))
            if deployment is not None:
                return f"Deployment/{namespace}/{deployment}"
        return f"{kind}/{namespace}/{name}"


def _controller(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return ref
    return None


def _ready_after(pod: Mapping[str, Any]) -> float | None:
    """Seconds from creation to the pod's first Ready, when its record still shows that first
    transition (no container restarted since, which would move the condition)."""
    status = pod.get("status") or {}
    if any(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or ()):
        return None
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            ready = parse_time(cond.get("lastTransitionTime"))
            if created is None or ready is None:
                return None
            seconds = (ready - created).total_seconds()
            return seconds if seconds >= 0 else None
    return None


def pod_start_seconds(pods: Iterable[Mapping[str, Any]], workloads: Workloads) -> dict[str, float]:
    """Per workload, the median seconds its pods took from creation to Ready."""
    seen: dict[str, list[float]] = {}
    for pod in pods:
        key = workloads.of(pod)
        after = _ready_after(pod)
        if key is not None and after is not None:
            seen.setdefault(key, []).append(after)
    return {key: float(statistics.median(values)) for key, values in seen.items()}


def boot_seconds_from_history(
    requests: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]
) -> float | None:
    """The median over past requests of the time from a request's last scale-up to the first
    node that registered after it; None when no request kept that record."""
    created = sorted(
        t
        for t in (parse_time((n.get("metadata") or {}).get("creationTimestamp")) for n in nodes)
        if t is not None
    )
    gaps: list[float] = []
    for request in requests:
        status = request.get("status") or {}
        started = parse_time(status.get("scaleUpStarted"))
        finished = parse_time(status.get("finishedTimestamp"))
        if started is None:
            continue
        after = [t for t in created if t > started and (finished is None or t <= finished)]
        if after:
            gaps.append((after[0] - started).total_seconds())
    return float(statistics.median(gaps)) if gaps else None
