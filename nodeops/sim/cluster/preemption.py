"""kube-scheduler's preemption (the DefaultPreemption plugin), for the simulated scheduler.

A pod that fits nowhere may take the place of pods of a lower priority. Without it the
simulator left a rolled workload's pods Pending behind low-priority pods (the placeholder
pods that keep spare room for an autoscaler, batch work) that a real cluster would have
preempted, so a roll or a rehearsal of one on the simulator failed where a real one goes on.

The rules are kube-scheduler's (`pkg/scheduler/framework/preemption`): only nodes whose
refusal preemption can resolve are candidates; on each, every pod of a lower priority is
taken away and, if the pod then fits, as many as can be are given back, the most important
first and those whose budget would be broken before the others; of the candidates, the node
that breaks the fewest budgets wins, then the one whose most important victim matters least,
then the smallest sum of priorities, the fewest victims, the latest-started victims. A node
refused for the pod's anti-affinity, another pod's anti-affinity or a spread's skew is one
preemption can help: its pods are taken away and given back as for room, the inter-pod rules
judged without those that are gone. What is simpler here: every node is a candidate
(kube-scheduler stops after a sample of them), and a node the inter-pod rules let the pod
onto now is judged on its resources alone (a victim that a required affinity counts on is
not kept for it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nodeops.common.interpod import AFFINITY, SPREAD_MISSING_LABEL
from nodeops.common.selectors.labels import LabelSelector, label_selector_from_object
from nodeops.sim.cluster.apiclient import Obj
from nodeops.sim.cluster.informer import Key, key_of
from nodeops.sim.cluster.scheduling import NodeUsage, resource_filter, summarize_reasons
from nodeops.sim.cluster.timeutil import epoch

PREEMPT_NEVER = "Never"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NOT_ELIGIBLE_POLICY = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."

DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"

_UNRESOLVABLE_PREFIXES = (
    "node(s) were unschedulable",
    "node(s) had untolerated taint",
    "node(s) didn't match Pod's node affinity/selector",
    AFFINITY,
    SPREAD_MISSING_LABEL,
)
"""Refusals kube-scheduler marks UnschedulableAndUnresolvable: taking pods away cannot help."""


def priority(pod: Obj) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) else 0


def may_preempt(pod: Obj) -> bool:
    return (pod.get("spec") or {}).get("preemptionPolicy") != PREEMPT_NEVER


def nominated_node(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("nominatedNodeName") or "")


def started(pod: Obj) -> float:
    """When the pod started (its creation if it has not): the later, the less important."""
    status = pod.get("status") or {}
    at = status.get("startTime") or (pod.get("metadata") or {}).get("creationTimestamp")
    return epoch(at) if isinstance(at, str) and at else 0.0


def unresolvable(reason: str) -> bool:
    return reason.startswith(_UNRESOLVABLE_PREFIXES)


def no_fit_message(total_nodes: int, reasons: Mapping[str, int], preemption: str | None) -> str:
    """kube-scheduler's PodScheduled=False message: why no node fits and, unless preemption
    made room (None), what preemption found."""
    message = summarize_reasons(total_nodes, reasons)
    if preemption is None:
        return message
    # From v1.34 the dynamic-resources plugin puts "no new claims to deallocate, " ahead of
    # preemption's words; the simulator answers as v1.31, where that plugin is off.
    return f"{message} preemption: {preemption}"


def nothing_to_preempt(total_nodes: int, reasons: Mapping[str, int]) -> str:
    """Preemption's words when no node had victims to offer: per node, whether taking pods
    away could have helped at all."""
    hopeless = sum(n for r, n in reasons.items() if unresolvable(r))
    return summarize_reasons(
        total_nodes,
        {
            reason: count
            for reason, count in ((NOT_HELPFUL, hopeless), (NO_VICTIMS, total_nodes - hopeless))
            if count
        },
    )


@dataclass(frozen=True)
class Victim:
    key: Key
    pod: Obj
    requests: Mapping[str, int]
    priority: int
    started: float

    @property
    def deleting(self) -> bool:
        return bool((self.pod.get("metadata") or {}).get("deletionTimestamp"))


def victim(pod: Obj, requests: Mapping[str, int]) -> Victim:
    return Victim(key_of(pod), pod, requests, priority(pod), started(pod))


@dataclass
class Candidate:
    node: str
    victims: list[Victim] = field(default_factory=list)
    broken_budgets: int = 0


class Budgets:
    """The budgets of the cluster as preemption weighs them: by their `disruptionsAllowed`,
    not yet spent on the pods kube already counts as disrupted."""

    def __init__(self, pdbs: Iterable[Obj]) -> None:
        self._budgets: list[tuple[str, LabelSelector, int, frozenset[str]]] = []
        for pdb in pdbs:
            try:
                selector = label_selector_from_object((pdb.get("spec") or {}).get("selector"))
            except ValueError:
                continue
            if selector.empty or selector.matches_nothing:
                continue
            status = pdb.get("status") or {}
            self._budgets.append(
                (
                    (pdb.get("metadata") or {}).get("namespace") or "",
                    selector,
                    int(status.get("disruptionsAllowed") or 0),
                    frozenset(status.get("disruptedPods") or ()),
                )
            )

    def split(self, pods: Sequence[Victim]) -> tuple[list[Victim], list[Victim]]:
        """(those whose going would break a budget, the others), each in the given order."""
        allowed = [b[2] for b in self._budgets]
        breaking: list[Victim] = []
        others: list[Victim] = []
        for v in pods:
            meta = v.pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            broken = False
            if labels:
                for i, (namespace, selector, _, disrupted) in enumerate(self._budgets):
                    if namespace != v.key[0] or not selector.matches(labels):
                        continue
                    if v.key[1] in disrupted:
                        continue
                    allowed[i] -= 1
                    if allowed[i] < 0:
                        broken = True
            (breaking if broken else others).append(v)
        return breaking, others


def select_victims(
    node: str,
    requests: Mapping[str, int],
    allocatable: Mapping[str, int],
    usage: NodeUsage,
    lower: Sequence[Victim],
    budgets: Budgets,
    rules_pass_without: Callable[[Sequence[Victim]], bool] | None = None,
) -> Candidate | None:
    """The fewest pods of `lower` (all of a lower priority than the pod, on `node`, whose
    pods use `usage`) whose going lets a pod of `requests` fit; None if all of them going
    would not be enough. `rules_pass_without(gone)`: whether the pod's inter-pod rules let it
    onto the node once the pods `gone` are, for a node they refuse it now."""
    left = NodeUsage(dict(usage.requested), usage.pods, usage.nonzero_cpu, usage.nonzero_memory)
    for v in lower:
        left.remove(v.requests)
    if resource_filter(requests, allocatable, left) is not None:
        return None
    if rules_pass_without is not None and not rules_pass_without(lower):
        return None
    ordered = sorted(lower, key=lambda v: (-v.priority, v.started))
    breaking, others = budgets.split(ordered)
    sequence = [(v, True) for v in breaking] + [(v, False) for v in others]
    chosen = Candidate(node)
    for i, (v, breaks) in enumerate(sequence):
        # Given back, while those not yet weighed stay away, as kube-scheduler reprieves.
        left.add(v.requests)
        if resource_filter(requests, allocatable, left) is None and (
            rules_pass_without is None
            or rules_pass_without([*chosen.victims, *(w for w, _ in sequence[i + 1 :])])
        ):
            continue
        left.remove(v.requests)
        chosen.victims.append(v)
        chosen.broken_budgets += breaks
    return chosen


def _importance(c: Candidate) -> tuple[int, int, int, int, float]:
    """Smaller is a better place to preempt on, in the order kube-scheduler ranks them."""
    top = max(v.priority for v in c.victims) if c.victims else -(2**31)
    # kube-scheduler offsets each priority by 2^31 so that the sum of negative ones ranks.
    total = sum(v.priority + 2**31 for v in c.victims)
    latest_of_top = min((v.started for v in c.victims if v.priority == top), default=0.0)
    return (c.broken_budgets, top, total, len(c.victims), -latest_of_top)


def pick(candidates: Sequence[Candidate]) -> Candidate:
    """The candidate kube-scheduler would preempt on (the first of equals)."""
    return min(candidates, key=_importance)
