"""How long things take in this cluster, read from what it recorded rather than assumed.

A replacement's boot time comes from past rolls: a CycleNodeRequest keeps when its last batch's
scale-up started, and the nodes that registered after it say how long the cloud took. A pod's
start time comes from its own record: the Ready condition's transition against the pod's
creation, which covers image pulls, init containers and probes' initial delays as they are
here, not as a default would have them.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "PodStarts",
    "Workloads",
    "boot_seconds_from_history",
    "parse_time",
    "pod_start_seconds",
]

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


def _start_span(pod: Mapping[str, Any]) -> tuple[float, float] | None:
    """(created, first Ready) as POSIX seconds, when the pod's record still shows that first
    transition (no container restarted since, which would move the condition)."""
    status = pod.get("status") or {}
    if any(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or ()):
        return None
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            ready = parse_time(cond.get("lastTransitionTime"))
            if created is None or ready is None or ready < created:
                return None
            return created.timestamp(), ready.timestamp()
    return None


@dataclass
class PodStarts:
    """Per workload, how long its pods take from creation to Ready, and for the workloads
    whose every recorded start was made amid more starting pods than the roll will start at
    once (a cluster created or restored in one go), how crowded that was."""

    seconds: dict[str, float] = field(default_factory=dict)
    crowded: dict[str, dict[str, float]] = field(default_factory=dict)

    def notes(self) -> list[str]:
        if not self.crowded:
            return []
        worst = max(int(c["started_with"]) for c in self.crowded.values())
        limit = int(next(iter(self.crowded.values()))["roll_starts_at_most"])
        names = ", ".join(sorted(self.crowded))
        return [
            f"pod starts of {names} were read from pods that started together with up to "
            f"{worst} others, more than the {limit} this roll starts at once: the fastest "
            "tenth of them is taken, as the start a quieter cluster gives"
        ]


def pod_start_seconds(
    pods: Iterable[Mapping[str, Any]], workloads: Workloads, *, crowd_limit: int | None = None
) -> PodStarts:
    """Per workload, the median seconds its pods took from creation to Ready.

    A start made while thousands of other pods started too (a cluster created at once) says
    more about that crowd than about the workload, and a roll, which starts at most its batch's
    pods at once (`crowd_limit`), does not repeat it. So only the starts made amid at most
    `crowd_limit` others count; a workload that has none gets the fastest tenth of its starts,
    the pods served before the queue formed, and is named in `crowded`.
    """
    starts: list[tuple[str, float, float]] = []
    for pod in pods:
        key = workloads.of(pod)
        span = _start_span(pod)
        if key is not None and span is not None:
            starts.append((key, *span))
    out = PodStarts()
    if not starts:
        return out
    created = sorted(c for _, c, _ in starts)
    ready = sorted(r for _, _, r in starts)
    quiet: dict[str, list[float]] = {}
    crowded: dict[str, list[tuple[float, int]]] = {}
    for key, c, r in starts:
        # Pods that had begun and not yet finished starting when this one was created.
        others = bisect.bisect_right(created, c) - bisect.bisect_right(ready, c) - 1
        took = round(r - c, 3)  # timestamps carry microseconds at most
        if crowd_limit is None or others <= crowd_limit:
            quiet.setdefault(key, []).append(took)
        else:
            crowded.setdefault(key, []).append((took, others))
    for key, values in quiet.items():
        out.seconds[key] = float(statistics.median(values))
    for key, pairs in crowded.items():
        if key in quiet:
            continue
        values = sorted(v for v, _ in pairs)
        out.seconds[key] = values[len(values) // 10]
        out.crowded[key] = {
            "pods": len(values),
            "median_seconds": round(float(statistics.median(values)), 1),
            "started_with": max(n for _, n in pairs),
            "roll_starts_at_most": crowd_limit or 0,
        }
    return out


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
