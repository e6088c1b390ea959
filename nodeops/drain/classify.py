"""What to do with each pod of a node: kubectl drain's filters, then rules, labels, priorities.

Phase one is kubectl drain's filter chain in kubectl's order and with kubectl's words, so a
drain refused by kubectl is refused here with the same message. Phase two decides the behaviour
and order of the pods that would be drained: the pod label `nodeops.dev/drain` first, then the
first `NodeDrainRule` by name that matches the node and the pod, then node-detacher's
deletion-priority annotation (higher priority stops first), else Drain at order 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from nodeops.drain.options import (
    DELETION_PRIORITY_ANNOTATION,
    DRAIN_LABEL,
    DrainOptions,
)
from nodeops.kube import objects as o

Obj = dict[str, Any]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
DAEMONSET_FATAL = "DaemonSet-managed Pods (use --ignore-daemonsets to ignore)"
DAEMONSET_WARNING = "ignoring DaemonSet-managed Pods"
LOCAL_STORAGE_FATAL = "Pods with local storage (use --delete-emptydir-data to override)"
LOCAL_STORAGE_WARNING = "deleting Pods with local storage"
UNMANAGED_FATAL = "cannot delete Pods that declare no controller (use --force to override)"
UNMANAGED_WARNING = "deleting Pods that declare no controller"


class Behavior(StrEnum):
    DRAIN = "Drain"
    SKIP = "Skip"
    WAIT_COMPLETED = "WaitCompleted"


@dataclass(frozen=True)
class RuleView:
    """The parts of a NodeDrainRule the drain needs, whatever its source."""

    name: str
    behavior: Behavior
    order: int
    applies_to_node: Callable[[Mapping[str, str]], bool]
    applies_to_pod: Callable[[Mapping[str, str], Mapping[str, str]], bool]
    needs_namespace_labels: bool = False


@dataclass
class Decision:
    pod: Obj
    behavior: Behavior
    order: int = 0
    source: str = "default"
    warning: str = ""
    error: str = ""

    @property
    def ref(self) -> str:
        return o.ref(self.pod)


@dataclass
class Classification:
    decisions: list[Decision] = field(default_factory=list)

    @property
    def errors(self) -> list[Decision]:
        return [d for d in self.decisions if d.error]

    @property
    def ok(self) -> bool:
        return not self.errors

    def error_reasons(self) -> list[str]:
        """kubectl's pre-flight errors: `cannot delete <reason>: ns/a, ns/b`, one per reason."""
        return [
            f"cannot delete {reason}: {', '.join(refs)}"
            for reason, refs in _group(self.errors, lambda d: d.error).items()
        ]

    def error_message(self) -> str:
        return ", ".join(self.error_reasons())

    def warning_lines(self) -> list[str]:
        return [
            f"{reason}: {', '.join(refs)}"
            for reason, refs in _group(
                [d for d in self.decisions if d.warning], lambda d: d.warning
            ).items()
        ]

    def active(self) -> list[Decision]:
        """Pods the drain acts on or waits for: everything but Skip."""
        return [d for d in self.decisions if d.behavior is not Behavior.SKIP and not d.error]

    def skipped(self) -> list[Decision]:
        return [d for d in self.decisions if d.behavior is Behavior.SKIP]


def _group(decisions: Iterable[Decision], key: Callable[[Decision], str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for d in decisions:
        groups.setdefault(key(d), []).append(d.ref)
    return groups


def is_finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def has_local_storage(pod: Mapping[str, Any]) -> bool:
    return any("emptyDir" in v for v in (pod.get("spec") or {}).get("volumes") or ())


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    ctrl = o.controller_ref(pod)
    return ctrl is not None and ctrl.get("kind") == "DaemonSet"


def daemonset_of(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    ctrl = o.controller_ref(pod)
    if ctrl is None or ctrl.get("kind") != "DaemonSet":
        return None
    return (o.namespace(pod), str(ctrl.get("name", "")))


def label_behavior(pod: Mapping[str, Any]) -> Behavior | None:
    """The `nodeops.dev/drain` label, matched case-insensitively like Cluster API's."""
    value = o.labels(pod).get(DRAIN_LABEL)
    if value is None:
        return None
    v = value.strip().lower().replace("-", "")
    if v == "skip":
        return Behavior.SKIP
    if v == "waitcompleted":
        return Behavior.WAIT_COMPLETED
    return None


def deletion_priority(pod: Mapping[str, Any]) -> int | None:
    value = o.annotations_of(pod).get(DELETION_PRIORITY_ANNOTATION)
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def classify(
    pods: Sequence[Obj],
    *,
    node: Mapping[str, Any],
    options: DrainOptions,
    now: datetime,
    daemonsets: Mapping[tuple[str, str], str | None] | None = None,
    rules: Sequence[RuleView] = (),
    namespace_labels: Callable[[str], Mapping[str, str]] | None = None,
) -> Classification:
    """Decide every pod. `daemonsets` maps (namespace, name) to None when the DaemonSet
    exists, else the error text of looking it up (kubectl reports that text verbatim)."""
    daemonsets = daemonsets or {}
    node_labels = o.labels(node)
    node_rules = [r for r in sorted(rules, key=lambda r: r.name) if r.applies_to_node(node_labels)]
    out = Classification()
    for pod in sorted(pods, key=lambda p: (o.namespace(p), o.name(p))):
        decision = _kubectl_filters(pod, options, now, daemonsets)
        if decision.behavior is Behavior.DRAIN and not decision.error and options.respect_rules:
            _phase_two(decision, node_rules, namespace_labels)
        out.decisions.append(decision)
    return out


def _kubectl_filters(
    pod: Obj,
    options: DrainOptions,
    now: datetime,
    daemonsets: Mapping[tuple[str, str], str | None],
) -> Decision:
    d = Decision(pod, Behavior.DRAIN)
    # 1. skipDeletedFilter
    deleted = o.deletion_timestamp(pod)
    if (
        options.skip_wait_for_delete_timeout > 0
        and deleted is not None
        and now - deleted > timedelta(seconds=options.skip_wait_for_delete_timeout)
    ):
        d.behavior = Behavior.SKIP
        d.source = "deleted"
        return d
    # 2. daemonSetFilter
    ds = daemonset_of(pod)
    if ds is not None and not is_finished(pod):
        lookup_error = daemonsets.get(ds)
        if lookup_error is not None:
            if options.force and "not found" in lookup_error:
                d.warning = lookup_error
            else:
                d.error = lookup_error
                return d
        elif options.evict_daemonsets:
            d.source = "daemonset"
        elif not options.ignore_daemonsets:
            d.error = DAEMONSET_FATAL
            return d
        else:
            d.behavior = Behavior.SKIP
            d.source = "daemonset"
            d.warning = DAEMONSET_WARNING
            return d
    # 3. mirrorPodFilter
    if MIRROR_ANNOTATION in o.annotations_of(pod):
        d.behavior = Behavior.SKIP
        d.source = "mirror"
        return d
    # 4. localStorageFilter
    if has_local_storage(pod) and not is_finished(pod):
        if not options.delete_emptydir_data:
            d.error = LOCAL_STORAGE_FATAL
            return d
        d.warning = LOCAL_STORAGE_WARNING
    # 5. unreplicatedFilter
    if not is_finished(pod) and o.controller_ref(pod) is None:
        if not options.force:
            d.error = UNMANAGED_FATAL
            return d
        d.warning = UNMANAGED_WARNING
    return d


def _phase_two(
    d: Decision,
    rules: Sequence[RuleView],
    namespace_labels: Callable[[str], Mapping[str, str]] | None,
) -> None:
    labelled = label_behavior(d.pod)
    if labelled is not None:
        d.behavior = labelled
        d.order = 0
        d.source = "label"
        return
    pod_labels = o.labels(d.pod)
    for rule in rules:
        ns_labels: Mapping[str, str] = {}
        if rule.needs_namespace_labels and namespace_labels is not None:
            ns_labels = namespace_labels(o.namespace(d.pod))
        if rule.applies_to_pod(pod_labels, ns_labels):
            d.behavior = rule.behavior
            d.order = rule.order if rule.behavior is Behavior.DRAIN else 0
            d.source = f"rule:{rule.name}"
            return
    priority = deletion_priority(d.pod)
    if priority is not None:
        # node-detacher stops higher priorities first; lower orders go first here.
        d.order = -priority
        d.source = "priority"
