"""The scheduler's pure decisions: requests, taints and tolerations, node affinity, fit and score.

Kept free of I/O so the same predicates serve the scheduler, the DaemonSet controller (which
decides which nodes should run a daemon pod) and unit tests, and so that they can be checked
against the rules kube-scheduler documents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The node predicates are shared with the operator's capacity check; named here too, as the
# simulator's loops have always read them.
from nodeops.common.nodematch import NO_EXECUTE as NO_EXECUTE
from nodeops.common.nodematch import NO_SCHEDULE as NO_SCHEDULE
from nodeops.common.nodematch import is_deleting as is_deleting
from nodeops.common.nodematch import node_matches_affinity as node_matches_affinity
from nodeops.common.nodematch import node_matches_term as node_matches_term
from nodeops.common.nodematch import tolerates as tolerates
from nodeops.common.nodematch import untolerated_taint as untolerated_taint
from nodeops.sim.cluster.quantity import cpu_millis, units

Obj = Mapping[str, Any]

TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_MEMORY_PRESSURE = "node.kubernetes.io/memory-pressure"
TAINT_DISK_PRESSURE = "node.kubernetes.io/disk-pressure"
TAINT_PID_PRESSURE = "node.kubernetes.io/pid-pressure"
TAINT_NETWORK_UNAVAILABLE = "node.kubernetes.io/network-unavailable"

PREFER_NO_SCHEDULE = "PreferNoSchedule"

DEFAULT_SCHEDULER = "default-scheduler"

# kube-scheduler scores pods without requests as if they asked for this much, so that such
# pods still spread instead of piling onto the first node.
NONZERO_CPU_MILLIS = 100
NONZERO_MEMORY = 200 * 1024 * 1024


# ---------------------------------------------------------------------------------------------
# Pods and requests


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _container_requests(container: Obj) -> dict[str, int]:
    res = container.get("resources") or {}
    # The API server defaults missing requests to the limits; do the same in case it did not.
    merged = dict(res.get("limits") or {})
    merged.update(res.get("requests") or {})
    out: dict[str, int] = {}
    for name, qty in merged.items():
        out[name] = cpu_millis(qty) if name == "cpu" else units(qty)
    return out


def _add_into(total: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        total[k] = total.get(k, 0) + v


def _max_into(total: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > total.get(k, 0):
            total[k] = v


def pod_requests(pod: Obj) -> dict[str, int]:
    """Effective requests: containers (plus sidecars) vs. the largest init container, plus overhead.

    CPU is in millicores; memory, ephemeral-storage and extended resources in units.
    """
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        _add_into(total, _container_requests(c))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        req = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            _add_into(sidecars, req)
            continue
        running = dict(sidecars)
        _add_into(running, req)
        _max_into(init_peak, running)
    _add_into(total, sidecars)
    _max_into(total, init_peak)
    for name, qty in (spec.get("overhead") or {}).items():
        _add_into(total, {name: cpu_millis(qty) if name == "cpu" else units(qty)})
    return {k: v for k, v in total.items() if v}


def nonzero_requests(requests: Mapping[str, int]) -> tuple[int, int]:
    """(cpu millis, memory) used for scoring: defaults stand in for missing requests."""
    return (
        requests.get("cpu") or NONZERO_CPU_MILLIS,
        requests.get("memory") or NONZERO_MEMORY,
    )


def node_allocatable(node: Obj) -> dict[str, int]:
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    out: dict[str, int] = {}
    for name, qty in alloc.items():
        try:
            out[name] = cpu_millis(qty) if name == "cpu" else units(qty)
        except ValueError:
            continue
    return out


# ---------------------------------------------------------------------------------------------
# Node conditions and taints


def node_condition(node: Obj, ctype: str) -> Obj | None:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def node_ready_status(node: Obj) -> str:
    """ "True", "False" or "Unknown" (also when the kubelet never reported)."""
    c = node_condition(node, "Ready")
    return str(c.get("status") or "Unknown") if c else "Unknown"


def node_is_ready(node: Obj) -> bool:
    return node_ready_status(node) == "True"


def node_taints(node: Obj) -> list[Obj]:
    return list((node.get("spec") or {}).get("taints") or [])


def effective_taints(node: Obj) -> list[Obj]:
    """The node's taints plus those the node lifecycle controller is bound to add.

    The controller taints an unready or cordoned node moments after the fact; treating the taint
    as present from the start keeps the scheduler from racing it, and lets pods that tolerate
    the taint (daemons) still land.
    """
    taints = node_taints(node)
    have = {(t.get("key"), t.get("effect")) for t in taints}
    extra: list[Obj] = []
    if (node.get("spec") or {}).get("unschedulable") and (
        TAINT_UNSCHEDULABLE,
        NO_SCHEDULE,
    ) not in have:
        extra.append({"key": TAINT_UNSCHEDULABLE, "effect": NO_SCHEDULE})
    ready = node_ready_status(node)
    if ready != "True":
        key = TAINT_UNREACHABLE if ready == "Unknown" else TAINT_NOT_READY
        if (key, NO_SCHEDULE) not in have:
            extra.append({"key": key, "effect": NO_SCHEDULE})
    return taints + extra if extra else taints


# ---------------------------------------------------------------------------------------------
# Fit and score


@dataclass(slots=True)
class NodeUsage:
    """What the pods assigned to a node request, for fit and for least-allocated scoring."""

    requested: dict[str, int] = field(default_factory=dict)
    pods: int = 0
    nonzero_cpu: int = 0
    nonzero_memory: int = 0

    def add(self, requests: Mapping[str, int]) -> None:
        _add_into(self.requested, requests)
        self.pods += 1
        cpu, mem = nonzero_requests(requests)
        self.nonzero_cpu += cpu
        self.nonzero_memory += mem

    def remove(self, requests: Mapping[str, int]) -> None:
        for k, v in requests.items():
            self.requested[k] = self.requested.get(k, 0) - v
        self.pods -= 1
        cpu, mem = nonzero_requests(requests)
        self.nonzero_cpu -= cpu
        self.nonzero_memory -= mem


def static_filter(pod: Obj, node: Obj, taints: Sequence[Obj] | None = None) -> str | None:
    """The checks that do not depend on other pods; the reason a node is rejected, or None.

    `taints` may pass the node's precomputed `effective_taints`.
    """
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    node_spec = node.get("spec") or {}
    if node_spec.get("unschedulable"):
        cordon = {"key": TAINT_UNSCHEDULABLE, "effect": NO_SCHEDULE}
        if not any(tolerates(t, cordon) for t in tolerations):
            return "node(s) were unschedulable"
    # kube-scheduler's filter order: NodeUnschedulable, TaintToleration, NodeAffinity.
    taint = untolerated_taint(effective_taints(node) if taints is None else taints, tolerations)
    if taint is not None:
        value = taint.get("value") or ""
        return f"node(s) had untolerated taint {{{taint.get('key')}: {value}}}"
    if not node_matches_affinity(spec, node):
        return "node(s) didn't match Pod's node affinity/selector"
    return None


def resource_filter(
    requests: Mapping[str, int], allocatable: Mapping[str, int], usage: NodeUsage
) -> str | None:
    """Does the pod fit what is left? Reason as kube-scheduler words it, or None."""
    max_pods = allocatable.get("pods")
    if max_pods is not None and usage.pods + 1 > max_pods:
        return "Too many pods"
    for name, want in requests.items():
        if name == "pods" or want <= 0:
            continue
        have = allocatable.get(name, 0)
        if usage.requested.get(name, 0) + want > have:
            return f"Insufficient {name}"
    return None


TAINT_TOLERATION_WEIGHT = 3
"""kube-scheduler's default weight of the TaintToleration score (NodeResourcesFit's is 1)."""


def intolerable_prefer_no_schedule(taints: Iterable[Obj], tolerations: Sequence[Obj]) -> int:
    """How many PreferNoSchedule taints of a node the pod does not tolerate (the count that
    kube-scheduler's TaintToleration score plugin ranks nodes by, fewer being better)."""
    return sum(
        1
        for taint in taints
        if taint.get("effect") == PREFER_NO_SCHEDULE
        and not any(tolerates(t, taint) for t in tolerations)
    )


def taint_toleration_scores(counts: Sequence[int]) -> list[float]:
    """0..100 per node, normalised as the plugin does: 100 for the fewest intolerable taints,
    falling linearly to 0 for the most (all 100 when no node has any)."""
    most = max(counts, default=0)
    if most == 0:
        return [100.0] * len(counts)
    return [100.0 * (1 - c / most) for c in counts]


def least_allocated_score(
    requests: Mapping[str, int], allocatable: Mapping[str, int], usage: NodeUsage
) -> float:
    """0..100: the share of cpu and memory left free after placing the pod (higher is better)."""
    cpu, mem = nonzero_requests(requests)
    score = 0.0
    for want, used, cap in (
        (cpu, usage.nonzero_cpu, allocatable.get("cpu", 0)),
        (mem, usage.nonzero_memory, allocatable.get("memory", 0)),
    ):
        if cap <= 0:
            continue
        free = cap - used - want
        score += max(0.0, free * 100.0 / cap)
    return score / 2


def _taint_set(node: Obj) -> set[tuple[Any, Any, Any]]:
    return {(t.get("key"), t.get("value"), t.get("effect")) for t in node_taints(node)}


def node_change_may_help(old: Obj | None, new: Obj) -> bool:
    """Could this node change let a pod that fit nowhere fit now? (kube's queueing hints.)

    Only changes for the better count: a node that gets cordoned, tainted or goes unready cannot
    make anything schedulable, and retrying every pending pod on each such event would cost
    pods x nodes checks for nothing.
    """
    if old is None:
        return True
    if (old.get("spec") or {}).get("unschedulable") and not (new.get("spec") or {}).get(
        "unschedulable"
    ):
        return True
    if _taint_set(old) - _taint_set(new):
        return True
    if node_ready_status(old) != "True" and node_ready_status(new) == "True":
        return True
    if (old.get("metadata") or {}).get("labels") != (new.get("metadata") or {}).get("labels"):
        return True
    before, after = node_allocatable(old), node_allocatable(new)
    return any(v > before.get(k, 0) for k, v in after.items())


def summarize_reasons(total_nodes: int, reasons: Mapping[str, int]) -> str:
    """The PodScheduled=False message, e.g. "0/3 nodes are available: 3 Insufficient cpu."."""
    if not reasons:
        return f"0/{total_nodes} nodes are available."
    # kube-scheduler sorts the "count reason" strings themselves (FitError.Error), so a count
    # of 1 comes before a count of 4, and 10 before 4.
    parts = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
    return f"0/{total_nodes} nodes are available: {parts}."
