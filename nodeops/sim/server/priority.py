"""PriorityClasses and kube-apiserver's Priority admission plugin.

A pod's `spec.priority` is what the scheduler preempts by and what a roll's capacity check
weighs, and kube-apiserver, not the pod's creator, writes it: from the PriorityClass the pod
names, else from the class marked `globalDefault`, else 0. Without it the simulator gave every
pod a ReplicaSet made priority 0, whatever its template's class said.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodeops.sim.server import errors

PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPTION_POLICIES = ("Never", PREEMPT_LOWER_PRIORITY)
SYSTEM_PRIORITY_PREFIX = "system-"
HIGHEST_USER_PRIORITY = 1_000_000_000

SYSTEM_PRIORITY_CLASSES: Mapping[str, tuple[int, str]] = {
    "system-node-critical": (
        2000001000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    "system-cluster-critical": (
        2000000000,
        "Used for system critical pods that must run in the cluster, but can be moved to "
        "another node if necessary.",
    ),
}
"""The classes kube-apiserver creates at start."""


def system_priority_classes() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "description": description,
            "preemptionPolicy": PREEMPT_LOWER_PRIORITY,
        }
        for name, (value, description) in SYSTEM_PRIORITY_CLASSES.items()
    ]


def _default_class(classes: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The `globalDefault` class; of several, the lowest, as kube picks."""
    defaults = [pc for pc in classes if pc.get("globalDefault")]
    return min(defaults, key=lambda pc: int(pc.get("value") or 0), default=None)


def admit_pod_priority(
    pod: dict[str, Any],
    lookup: Callable[[str], Mapping[str, Any] | None],
    all_classes: Callable[[], Iterable[Mapping[str, Any]]],
) -> None:
    """Resolve the pod's priority and preemption policy from its class, as the Priority
    plugin does on create; refuse what it refuses, in its words."""
    spec = pod.setdefault("spec", {})
    name = (pod.get("metadata") or {}).get("name", "")
    class_name = spec.get("priorityClassName") or ""
    if class_name:
        pc = lookup(class_name)
        if pc is None:
            raise _forbidden(name, f"no PriorityClass with name {class_name} was found")
    else:
        pc = _default_class(all_classes())
        if pc is not None:
            spec["priorityClassName"] = (pc.get("metadata") or {}).get("name", "")
    value = int(pc.get("value") or 0) if pc is not None else 0
    policy = (pc.get("preemptionPolicy") if pc is not None else None) or PREEMPT_LOWER_PRIORITY
    given = spec.get("priority")
    if given is not None and given != value:
        raise _forbidden(
            name,
            f"the integer value of priority ({given}) must not be provided in pod spec; "
            f"priority admission controller computed {value} from the given PriorityClass name",
        )
    spec["priority"] = value
    given_policy = spec.get("preemptionPolicy")
    if given_policy is not None and given_policy != policy:
        raise _forbidden(
            name,
            f"the string value of PreemptionPolicy ({given_policy}) must not be provided in "
            f"pod spec; priority admission controller computed {policy} from the given "
            "PriorityClass name",
        )
    spec["preemptionPolicy"] = policy


def _forbidden(pod: str, why: str) -> errors.ApiError:
    return errors.forbidden(f'pods "{pod}" is forbidden: {why}', {"name": pod, "kind": "pods"})


def check_one_default(pc: Mapping[str, Any], classes: Iterable[Mapping[str, Any]]) -> None:
    """The Priority plugin's rule for classes: only one may be the `globalDefault`."""
    if not pc.get("globalDefault"):
        return
    name = (pc.get("metadata") or {}).get("name")
    for other in classes:
        other_name = (other.get("metadata") or {}).get("name")
        if other.get("globalDefault") and other_name != name:
            raise errors.forbidden(
                f'priorityclasses.scheduling.k8s.io "{name}" is forbidden: PriorityClass '
                f"{other_name} is already marked as default. Only one default can exist",
                {"name": name, "group": "scheduling.k8s.io", "kind": "priorityclasses"},
            )
