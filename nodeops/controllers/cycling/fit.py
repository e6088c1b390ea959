"""Will the pods of the next batch fit on the ready nodes? Checked before a batch is drained.

Draining a batch whose pods cannot be placed strands them Pending (and, with a budget, stalls
the drain). So before a batch is handed over for draining, its pods are packed, largest first,
onto the nodes they could run on: Ready, schedulable, not being replaced, with room for their
CPU, memory and pod count, whose taints they tolerate and whose labels match their node selector
and required node affinity. This is a conservative approximation of the scheduler (no
inter-pod affinity, spread constraints or volumes): when it says no, cycling waits for more
capacity instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeops.common.quantity import cpu_millis, units
from nodeops.controllers.cycling.pods import movable
from nodeops.kube import objects as o

__all__ = ["FitResult", "check_fit", "node_is_ready"]

Obj = Mapping[str, Any]


def node_is_ready(node: Obj) -> bool:
    cond = o.condition(node, "Ready")
    return cond is not None and cond.get("status") == "True"


def _requests(pod: Obj) -> tuple[int, int]:
    """(millicores, bytes) the scheduler reserves: the larger of the sum of containers and the
    largest init container, plus the pod overhead."""
    spec = pod.get("spec") or {}
    cpu = mem = 0
    for c in spec.get("containers") or ():
        req = (c.get("resources") or {}).get("requests") or {}
        cpu += cpu_millis(req.get("cpu"))
        mem += units(req.get("memory"))
    for c in spec.get("initContainers") or ():
        req = (c.get("resources") or {}).get("requests") or {}
        cpu = max(cpu, cpu_millis(req.get("cpu")))
        mem = max(mem, units(req.get("memory")))
    overhead = spec.get("overhead") or {}
    return cpu + cpu_millis(overhead.get("cpu")), mem + units(overhead.get("memory"))


def _tolerates(tolerations: Sequence[Obj], taint: Obj) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def _match_expression(labels: Mapping[str, str], expr: Obj) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator"), expr.get("values") or []
    value = labels.get(key)
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _affinity_allows(pod: Obj, labels: Mapping[str, str]) -> bool:
    spec = pod.get("spec") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    if not required:
        return True
    # Terms are ORed; a term's expressions are ANDed (matchFields are not evaluated).
    return any(
        all(_match_expression(labels, e) for e in term.get("matchExpressions") or ())
        for term in required
    )


@dataclass
class _Room:
    name: str
    labels: Mapping[str, str]
    taints: list[Obj]
    cpu: int
    mem: int
    pods: int


@dataclass
class FitResult:
    fits: bool
    pods: int
    unplaced: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def message(self) -> str:
        if self.fits:
            return f"{self.pods} pods fit on the ready nodes"
        first = self.unplaced[0]
        return (
            f"{len(self.unplaced)} of {self.pods} pods do not fit on the ready nodes "
            f"(first: {first}: {self.reasons.get(first, 'no room')})"
        )


def _room(node: Obj, pods_on_node: Iterable[Obj]) -> _Room:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    cpu, mem, count = cpu_millis(alloc.get("cpu")), units(alloc.get("memory")), 0
    for pod in pods_on_node:
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            continue
        c, m = _requests(pod)
        cpu -= c
        mem -= m
        count += 1
    max_pods = units(alloc.get("pods")) if alloc.get("pods") is not None else 110
    taints = [
        t
        for t in (node.get("spec") or {}).get("taints") or ()
        if t.get("effect") in ("NoSchedule", "NoExecute")
    ]
    return _Room(o.name(node), o.labels(node), taints, cpu, mem, max_pods - count)


def check_fit(
    batch_pods: Iterable[Obj],
    nodes: Iterable[Obj | None],
    pods_of: Callable[[str], Sequence[Obj] | None],
    *,
    exclude: Collection[str],
) -> FitResult:
    """Whether every movable pod of `batch_pods` fits on a Ready, schedulable node not in
    `exclude` (the batch itself, nodes being drained or replaced), given the pods already on
    each node (`pods_of(name)`).

    First fit, with each node's room worked out only when the search reaches it: a batch's
    pods usually fit on the first few nodes, and reading every pod of a 1,000-node cluster per
    batch would make the check grow with the cluster, not with the batch. `nodes` may be lazy
    for the same reason."""
    candidates = (
        n
        for n in nodes
        if n is not None
        and o.name(n) not in exclude
        and node_is_ready(n)
        and not (n.get("spec") or {}).get("unschedulable")
        and o.deletion_timestamp(n) is None
    )
    rooms: list[_Room] = []

    def room_at(i: int) -> _Room | None:
        while len(rooms) <= i:
            node = next(candidates, None)
            if node is None:
                return None
            rooms.append(_room(node, pods_of(o.name(node)) or ()))
        return rooms[i]

    todo = sorted((p for p in batch_pods if movable(p)), key=lambda p: _requests(p), reverse=True)
    result = FitResult(True, len(todo))
    for pod in todo:
        cpu, mem = _requests(pod)
        tolerations = (pod.get("spec") or {}).get("tolerations") or ()
        why = (
            "no ready schedulable nodes" if room_at(0) is None else "not enough cpu, memory or pods"
        )
        placed = False
        i = 0
        while (room := room_at(i)) is not None:
            i += 1
            if not _affinity_allows(pod, room.labels):
                why = "node selector or affinity matches no ready node with room"
                continue
            if any(not _tolerates(tolerations, t) for t in room.taints):
                why = "untolerated taints on the ready nodes with room"
                continue
            if room.cpu >= cpu and room.mem >= mem and room.pods >= 1:
                room.cpu -= cpu
                room.mem -= mem
                room.pods -= 1
                placed = True
                break
        if not placed:
            result.fits = False
            result.unplaced.append(o.ref(pod))
            result.reasons[o.ref(pod)] = why
    return result
