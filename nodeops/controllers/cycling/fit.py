"""Will the pods of the next batch fit on the ready nodes? Checked before a batch is drained.

Draining a batch whose pods cannot be placed strands them Pending (and, with a budget, stalls
the drain). So before a batch is handed over for draining, its pods are packed, largest first,
onto the nodes they could run on: Ready, schedulable, not being replaced, with room for their
CPU, memory and pod count, whose taints they tolerate and whose labels match their node selector
and required node affinity; then, as kube-scheduler filters after the resource fit, held to
their `DoNotSchedule` topology spread and required pod affinity and anti-affinity (and to the
anti-affinity of the pods that stay), judged as the cluster will stand once the batch has
drained. The room of the pods of a negative priority (`SPARE_BELOW`, an autoscaler's
placeholders) counts as free for the others, since the scheduler preempts them for any of
those; its preemption of any other pod is not counted on. This is a conservative approximation
of the scheduler (first fit, no volumes): when it says no, cycling waits for more capacity
instead of guessing.
"""

from __future__ import annotations

import json
from collections.abc import (
    Callable,
    Collection,
    ItemsView,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any

from nodeops.common.interpod import InterPodCheck, PlacedPods, exact_label, pod_rules
from nodeops.common.nodematch import (
    NO_EXECUTE,
    NO_SCHEDULE,
    node_matches_affinity,
    untolerated_taint,
)
from nodeops.common.quantity import cpu_millis, units
from nodeops.controllers.cycling.pods import movable
from nodeops.controllers.cycling.pods import moving as needs_room
from nodeops.kube import objects as o

__all__ = [
    "SPARE_BELOW",
    "FitResult",
    "Neighbours",
    "check_fit",
    "neighbours",
    "node_is_ready",
    "pod_priority",
]

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


@dataclass
class _Room:
    """A node's room. `cpu`, `mem` and `pods` are what the pods of the default priority or
    above leave; the spare pods (`SPARE_BELOW`) on it, there already or placed by the check,
    are held apart: the scheduler preempts them for any pod that needs their room."""

    name: str
    node: Obj
    labels: Mapping[str, str]
    taints: list[Obj]
    cpu: int
    mem: int
    pods: int
    spare: list[tuple[int, int]] = field(default_factory=list)

    def free(self, preempting: bool) -> tuple[int, int, int]:
        """The room left for a pod: all of it but the spare pods' for one that preempts them,
        what they leave for one that does not."""
        if preempting:
            return self.cpu, self.mem, self.pods
        return (
            self.cpu - sum(c for c, _ in self.spare),
            self.mem - sum(m for _, m in self.spare),
            self.pods - len(self.spare),
        )

    def preempted(self) -> int:
        """How many of its spare pods lose their place to the pods put here: as the scheduler
        picks victims, all are taken away and each given back where room is left for it."""
        cpu, mem, pods, lost = self.cpu, self.mem, self.pods, 0
        for c, m in sorted(self.spare, reverse=True):
            if c <= cpu and m <= mem and pods >= 1:
                cpu, mem, pods = cpu - c, mem - m, pods - 1
            else:
                lost += 1
        return lost


@dataclass
class FitResult:
    fits: bool
    pods: int
    unplaced: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    moving: int = 0
    """Of `pods`, those other batches are moving now, placed before the batch's own."""
    waiting: int = 0
    """Pods the scheduler has still to place that were given room before all of `pods`; not
    counted in `pods`."""
    spare_unplaced: int = 0
    """Of `pods`, those of a negative priority (`SPARE_BELOW`) that found no room: they may
    wait, and the batch goes on without them."""
    preempted: int = 0
    """Pods of a negative priority on the ready nodes whose room the pods placed take: the
    scheduler preempts them, and they wait in turn. Not counted in `pods`."""

    @property
    def message(self) -> str:
        if self.fits:
            placed = self.pods - self.spare_unplaced
            text = (
                f"{placed} of {self.pods} pods fit on the ready nodes"
                if self.spare_unplaced
                else f"{self.pods} pods fit on the ready nodes"
            )
            if self.preempted:
                text += f", in the room of {self.preempted} of a negative priority"
            if self.spare_unplaced:
                text += f"; {self.spare_unplaced} of a negative priority may wait for room"
            return text
        first = self.unplaced[0]
        counted = []
        if self.moving:
            counted.append(f"with {self.moving} still on nodes other batches drain")
        if self.waiting:
            counted.append(f"after {self.waiting} Pending pods the scheduler places first")
        also = "".join(f"{c}; " for c in counted)
        return (
            f"{len(self.unplaced)} of {self.pods} pods do not fit on the ready nodes "
            f"({also}first: {first}: {self.reasons.get(first, 'no room')})"
        )


def _scheduling_taints(node: Obj) -> list[Obj]:
    return [
        t
        for t in (node.get("spec") or {}).get("taints") or ()
        if t.get("effect") in (NO_SCHEDULE, NO_EXECUTE)
    ]


def _room(node: Obj, pods_on_node: Iterable[Obj]) -> _Room:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    cpu, mem, count = cpu_millis(alloc.get("cpu")), units(alloc.get("memory")), 0
    spare: list[tuple[int, int]] = []
    for pod in pods_on_node:
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            continue
        if pod_priority(pod) < SPARE_BELOW:
            spare.append(_requests(pod))
            continue
        c, m = _requests(pod)
        cpu -= c
        mem -= m
        count += 1
    max_pods = units(alloc.get("pods")) if alloc.get("pods") is not None else 110
    return _Room(
        o.name(node),
        node,
        o.labels(node),
        _scheduling_taints(node),
        cpu,
        mem,
        max_pods - count,
        spare,
    )


@dataclass(frozen=True)
class _StayingNode:
    """A node that stays while the batch drains, as the inter-pod rules read it."""

    node: Obj
    labels: Mapping[str, str]
    taints: Sequence[Obj]


class _StayingNodes(Mapping[str, _StayingNode]):
    """The nodes that stay, each read when a rule first asks about it: a topology spread reads
    them all (they are its domains), pod affinity and anti-affinity only those their pods run
    on."""

    def __init__(self, names: Collection[str], read: Callable[[str], Obj | None]) -> None:
        self._names = names
        self._read = read
        self._views: dict[str, _StayingNode | None] = {}
        self._every: dict[str, _StayingNode] | None = None

    def _view(self, name: str) -> _StayingNode | None:
        if name not in self._views:
            node = self._read(name) if name in self._names else None
            self._views[name] = (
                None
                if node is None
                else _StayingNode(node, o.labels(node), _scheduling_taints(node))
            )
        return self._views[name]

    def _all(self) -> dict[str, _StayingNode]:
        """Every node, read once: each spread constraint of each pod walks them all."""
        if self._every is None:
            self._every = {n: v for n in self._names if (v := self._view(n)) is not None}
        return self._every

    def __getitem__(self, name: str) -> _StayingNode:
        view = self._view(name)
        if view is None:
            raise KeyError(name)
        return view

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def items(self) -> ItemsView[str, _StayingNode]:
        return self._all().items()


@dataclass
class Neighbours:
    """Where the pods that the batch's pods' inter-pod rules look at run, once the batch has
    drained: every node that stays (the domains of a topology spread), the pods on them that
    the rules select, and every pod on them with required anti-affinity (which keeps matching
    pods out of its topology whatever their own rules say). The pods the check places are added
    as it goes, so two replicas that must not share a node are not both put on the one new
    node."""

    nodes: Mapping[str, _StayingNode]
    placed: PlacedPods

    def check(self, pod: Obj) -> InterPodCheck | None:
        rules = pod_rules(pod)
        if not rules and not self.placed.anti_affinity:
            return None
        return InterPodCheck(pod, rules, self.nodes, self.placed, _namespace_labels)

    def place(self, pod: Obj, node: str) -> None:
        self.placed.add((o.namespace(pod), o.name(pod)), node, pod)


def _namespace_labels(namespace: str) -> Mapping[str, str]:
    """The label every namespace carries (since Kubernetes 1.21): the manager does not watch
    namespaces, so a namespace selector of a term matches by name only."""
    return {"kubernetes.io/metadata.name": namespace}


def neighbours(
    batch_pods: Sequence[Obj],
    staying: Collection[str],
    node_of: Callable[[str], Obj | None],
    pods_labelled: Callable[[str, str], Iterable[Obj]],
    every_pod: Callable[[], Iterable[Obj]],
    anti_affinity_pods: Iterable[Obj],
) -> Neighbours | None:
    """What `check_fit` needs to hold the batch's pods to their inter-pod rules, or None when
    no rule applies (no batch pod has one, no pod anywhere has required anti-affinity): then
    nothing beyond the nodes the first fit reaches is read.

    Only the pods the rules could select are read: those carrying a label each selector
    requires (`pods_labelled(key, value)`), or every pod for a selector that requires none."""
    anti = list(anti_affinity_pods)
    rules = [pod_rules(p) for p in batch_pods if movable(p)]
    if not anti and not any(rules):
        return None
    labels: set[tuple[str, str]] = set()
    everything = False
    for r in rules:
        for selector in (
            *(c.selector for c in r.spread),
            *(t.selector for t in (*r.affinity, *r.anti_affinity)),
        ):
            if selector.matches_nothing:
                continue
            exact = exact_label(selector)
            if exact is None:
                everything = True
            else:
                labels.add(exact)
    placed = PlacedPods()
    selected = (
        every_pod() if everything else (p for kv in sorted(labels) for p in pods_labelled(*kv))
    )
    for pod in (*selected, *anti):
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        # Placeholders count for no rule: the scheduler takes them away for a pod they keep
        # out, and a pod that needs one near may find it preempted for itself.
        if node in staying and not finished and pod_priority(pod) >= SPARE_BELOW:
            placed.add((o.namespace(pod), o.name(pod)), node, pod)
    return Neighbours(_StayingNodes(staying, node_of), placed)


def check_fit(
    batch_pods: Iterable[Obj],
    nodes: Iterable[Obj | None],
    pods_of: Callable[[str], Sequence[Obj] | None],
    *,
    exclude: Collection[str],
    neighbours: Neighbours | None = None,
    moving: Iterable[Obj] = (),
    waiting: Iterable[Obj] = (),
) -> FitResult:
    """Whether every movable pod of `batch_pods` fits on a Ready, schedulable node not in
    `exclude` (the batch itself, nodes being drained or replaced), given the pods already on
    each node (`pods_of(name)`), and, with `neighbours`, the pods' required inter-pod affinity,
    anti-affinity and `DoNotSchedule` topology spread.

    `moving`: the pods still on the nodes other batches are draining now, evicted ones
    included until they are gone (their replacements may not be placed yet). They need room
    on the same nodes and their drains began first, so they are placed first: a batch that
    fits only in room another batch's pods are about to take would leave pods Pending.

    Pods of a negative priority (`SPARE_BELOW`), of the batch or moving, need not fit: they
    are placed last, where room is left, and those that find none are counted in
    `spare_unplaced`, not refused.

    `waiting`: pods the scheduler has still to place (the replacements of pods evicted a
    moment ago among them). They exist already, so they take their room before anything a
    drain has yet to evict, except those of a lower priority than every pod that moves, which
    the scheduler would preempt for them. One that fits nowhere is Pending whatever the batch
    does and holds nothing; pods shaped alike are judged once, so that a burst of Pending pods
    of one workload does not make the check walk every node for each.

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
    # Once a walk without preemption has found no room on any node: the most any node has
    # without taking a placeholder's (it only shrinks from there), so that the pods after it
    # in a cluster full of placeholders do not walk every node twice each.
    unclaimed: list[tuple[int, int, int]] = []

    def room_at(i: int) -> _Room | None:
        while len(rooms) <= i:
            node = next(candidates, None)
            if node is None:
                return None
            rooms.append(_room(node, pods_of(o.name(node)) or ()))
        return rooms[i]

    def place(pod: Obj) -> str | None:
        """Room taken for `pod` on the first node that has it; else why none has. As the
        scheduler preempts only where no node has room: the room placeholders hold is taken
        only when no node has any other."""
        cpu, mem = _requests(pod)
        spec = pod.get("spec") or {}
        spare = pod_priority(pod) < SPARE_BELOW
        may_preempt = not spare and spec.get("preemptionPolicy") != "Never"
        tolerations = spec.get("tolerations") or ()
        interpod = neighbours.check(pod) if neighbours is not None else None
        why = (
            "no ready schedulable nodes" if room_at(0) is None else "not enough cpu, memory or pods"
        )
        for preempting in (False, True) if may_preempt else (False,):
            if preempting:
                # The first pass read every node: with no placeholder on any, nothing is left.
                if not any(r.spare for r in rooms):
                    break
                if not unclaimed:
                    free = [r.free(False) for r in rooms]
                    unclaimed.append(
                        (max(f[0] for f in free), max(f[1] for f in free), max(f[2] for f in free))
                    )
            elif may_preempt and unclaimed:
                most_cpu, most_mem, most_pods = unclaimed[0]
                if cpu > most_cpu or mem > most_mem or most_pods < 1:
                    continue
            i = 0
            while (room := room_at(i)) is not None:
                i += 1
                if not node_matches_affinity(spec, room.node):
                    why = "node selector or affinity matches no ready node with room"
                    continue
                if untolerated_taint(room.taints, tolerations) is not None:
                    why = "untolerated taints on the ready nodes with room"
                    continue
                free_cpu, free_mem, free_pods = room.free(preempting)
                if free_cpu < cpu or free_mem < mem or free_pods < 1:
                    continue
                if interpod is not None:
                    refused = interpod.reason(room.labels)
                    if refused is not None:
                        why = refused
                        continue
                if spare:
                    room.spare.append((cpu, mem))
                else:
                    room.cpu -= cpu
                    room.mem -= mem
                    room.pods -= 1
                if neighbours is not None:
                    neighbours.place(pod, room.name)
                return None
        return why

    first = sorted((p for p in moving if needs_room(p)), key=_requests, reverse=True)
    own = sorted((p for p in batch_pods if movable(p)), key=_requests, reverse=True)
    result = FitResult(True, len(first) + len(own), moving=len(first))
    spare = [p for p in (*first, *own) if pod_priority(p) < SPARE_BELOW]
    if spare:
        first = [p for p in first if pod_priority(p) >= SPARE_BELOW]
        own = [p for p in own if pod_priority(p) >= SPARE_BELOW]
    lowest = min((pod_priority(p) for p in (*first, *own)), default=0)
    queued = sorted(
        (p for p in waiting if needs_room(p) and pod_priority(p) >= lowest),
        key=_requests,
        reverse=True,
    )
    nowhere: set[Any] = set()
    for pod in queued:
        shape = _shape(pod)
        if shape is not None and shape in nowhere:
            continue
        if place(pod) is None:
            result.waiting += 1
        elif shape is not None:
            nowhere.add(shape)
    for pod in (*first, *own):
        why = place(pod)
        if why is not None:
            result.fits = False
            result.unplaced.append(o.ref(pod))
            result.reasons[o.ref(pod)] = why
    # Last, and only where room is left: placeholders must not take the room of pods that
    # need it, and one that finds none waits, as it would behind the scheduler's preemption.
    for pod in sorted(spare, key=_requests, reverse=True):
        if place(pod) is not None:
            result.spare_unplaced += 1
    result.preempted = sum(room.preempted() for room in rooms)
    return result


SPARE_BELOW = 0
"""Pods of a priority below the default one (0) are spare by the cluster's own word: the
placeholders that keep room for an autoscaler (its documented overprovisioning runs them at
-1), best-effort batch work. The scheduler preempts them for any pod of the default priority,
so a roll may leave them waiting for room, as the scheduler would; requiring them to fit
again held every batch of a cluster kept full of placeholders until the scale-up limit."""


def pod_priority(pod: Obj) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _shape(pod: Obj) -> Any:
    """What decides where `pod` may go, as a key: two pods with one shape fit in the same
    places, so once one fits nowhere the other does not either, as long as room only shrinks.
    None for a pod whose place pods placed later can open: one with required pod affinity
    (the pod it needs may come) or a `DoNotSchedule` spread (the smallest domain may grow)."""
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity") or {}
    if (affinity.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
        return None
    if any(
        c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
        for c in spec.get("topologySpreadConstraints") or ()
    ):
        return None
    return (
        o.namespace(pod),
        _requests(pod),
        pod_priority(pod) < SPARE_BELOW,
        spec.get("preemptionPolicy") == "Never",
        _key(o.labels(pod)),
        _key(spec.get("nodeSelector")),
        _key(affinity),
        _key(spec.get("tolerations")),
        _key(spec.get("topologySpreadConstraints")),
    )
