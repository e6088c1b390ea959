"""The state of a drain at one moment, and its report in Cluster API's words.

A plan is derived from the cluster as it stands (the pods on the node, their deletion state) and
what the drain remembers of its own attempts (the latest refusal of each eviction). It is never
stored: a drain interrupted and started again derives the same plan from the same cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from nodeops.drain.classify import Behavior, Classification, Decision, is_finished
from nodeops.kube import objects as o

_LIST_LIMIT = 3
_FAILURE_LIMIT = 5
PDB_PREFIX = "Cannot evict pod as it would violate the pod's disruption budget."
BUDGET_WAIT_PREFIX = "waiting for PodDisruptionBudget "


def budget_wait(namespace: str, name: str) -> str:
    """Why a pod is not being evicted yet: its budget allows no disruption right now."""
    return f"{BUDGET_WAIT_PREFIX}{namespace}/{name} to allow a disruption"


@dataclass
class Plan:
    evict_now: list[Decision] = field(default_factory=list)
    evict_later: list[Decision] = field(default_factory=list)
    wait_completed_now: list[Decision] = field(default_factory=list)
    wait_completed_later: list[Decision] = field(default_factory=list)
    terminating: list[Decision] = field(default_factory=list)
    skipped: list[Decision] = field(default_factory=list)
    min_order: int | None = None

    @property
    def complete(self) -> bool:
        return not (
            self.evict_now
            or self.evict_later
            or self.wait_completed_now
            or self.wait_completed_later
            or self.terminating
        )

    @property
    def pending(self) -> list[Decision]:
        return (
            self.terminating
            + self.evict_now
            + self.evict_later
            + self.wait_completed_now
            + self.wait_completed_later
        )


def make_plan(classification: Classification) -> Plan:
    """Cluster API's buckets: only the lowest order still present is worked on."""
    plan = Plan(skipped=classification.skipped())
    active = [
        d
        for d in classification.active()
        # A pod that waits for completion and has completed no longer holds the drain back.
        if not (d.behavior is Behavior.WAIT_COMPLETED and is_finished(d.pod))
    ]
    if not active:
        return plan
    plan.min_order = min(d.order for d in active)
    for d in active:
        deleting = o.deletion_timestamp(d.pod) is not None
        now = d.order == plan.min_order
        if d.behavior is Behavior.WAIT_COMPLETED:
            (plan.wait_completed_now if now else plan.wait_completed_later).append(d)
        elif deleting:
            plan.terminating.append(d)
        elif now:
            plan.evict_now.append(d)
        else:
            plan.evict_later.append(d)
    # What comes later is listed (and, dry run, evicted) in the order it will go.
    plan.evict_later.sort(key=lambda d: (d.order, d.ref))
    plan.wait_completed_later.sort(key=lambda d: (d.order, d.ref))
    return plan


def _names(decisions: Sequence[Decision]) -> str:
    refs = [d.ref for d in decisions]
    text = ", ".join(refs[:_LIST_LIMIT])
    if len(refs) > _LIST_LIMIT:
        text += f", ... ({len(refs) - _LIST_LIMIT} more)"
    return text


def _pods(decisions: Sequence[Decision]) -> str:
    return ("Pod " if len(decisions) == 1 else "Pods ") + _names(decisions)


def failure_text(message: str) -> str:
    """How a refused eviction reads in the report (Cluster API's wording)."""
    if message.startswith(BUDGET_WAIT_PREFIX):
        return message
    if message.startswith(PDB_PREFIX):
        return "cannot evict pod" + message[len("Cannot evict pod") :]
    return f"failed to evict Pod, {message}"


def report(
    plan: Plan,
    *,
    started_at: datetime,
    failures: Mapping[str, str],
) -> str:
    """The "Drain not completed yet" message, refreshed as the drain advances."""
    if plan.complete:
        return f"Drain completed (started at {o.format_time(started_at)})"
    lines = [f"Drain not completed yet (started at {o.format_time(started_at)}):"]
    if plan.terminating:
        lines.append(
            f"* {_pods(plan.terminating)}: deletionTimestamp set, but still not removed from "
            "the Node"
        )
    by_reason: dict[str, list[Decision]] = {}
    waiting_eviction: list[Decision] = []
    for d in plan.evict_now:
        reason = failures.get(d.ref)
        if reason is None:
            waiting_eviction.append(d)
        else:
            by_reason.setdefault(failure_text(reason), []).append(d)
    reasons = sorted(by_reason.items())
    for text, decisions in reasons[:_FAILURE_LIMIT]:
        lines.append(f"* {_pods(decisions)}: {text}")
    others = sum(len(ds) for _, ds in reasons[_FAILURE_LIMIT:])
    if others:
        lines.append(f"* {others} Pod{'s' if others > 1 else ''} with other issues")
    if waiting_eviction:
        lines.append(f"* {_pods(waiting_eviction)}: eviction in progress")
    if plan.wait_completed_now:
        lines.append(f"* {_pods(plan.wait_completed_now)}: waiting for completion")
    if plan.evict_later:
        lines.append(
            "After above Pods have been removed from the Node, the following Pods will be "
            f"evicted: {_names(plan.evict_later)}"
        )
    if plan.wait_completed_later:
        lines.append(
            "After above Pods have been removed from the Node, waiting for the following Pods "
            f"to complete without eviction: {_names(plan.wait_completed_later)}"
        )
    return "\n".join(lines)
