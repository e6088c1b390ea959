"""When is a node going away, and which marks does the detacher leave on it.

A node is going away when something about to stop its pods or delete it has said so:

- `spec.unschedulable` (kubectl cordon / drain, draino, the termination handlers' cordon);
- the `ToBeDeletedByClusterAutoscaler` taint (a scale-down has picked it);
- a taint of aws-node-termination-handler (`aws-node-termination-handler/...`: spot
  interruption, rebalance recommendation, scheduled event, ASG lifecycle);
- the label `node.kubernetes.io/exclude-from-external-load-balancers` (Kubernetes' own way to
  say "no load balancer traffic"), unless the detacher set it itself;
- the annotation `nodeops.dev/detach` (anything but "false"), to detach on request;
- a taint of the configured list (`--detacher-taints`), by key or `prefix*`.

Any other taint (`dedicated=gpu:NoSchedule`, `node.kubernetes.io/not-ready`) is not a reason:
node-detacher detached on every taint it did not know, which takes healthy nodes out of their
load balancers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

__all__ = [
    "CA_TAINT",
    "CONDITION_TYPE",
    "DETACHING_ANNOTATION",
    "DETACH_ANNOTATION",
    "EXCLUDE_LABEL",
    "EXCLUDE_LABEL_VALUE",
    "NTH_TAINT_PREFIX",
    "going_away_reasons",
    "is_control_plane",
    "taint_matches",
]

CA_TAINT: Final = "ToBeDeletedByClusterAutoscaler"
NTH_TAINT_PREFIX: Final = "aws-node-termination-handler/"
EXCLUDE_LABEL: Final = "node.kubernetes.io/exclude-from-external-load-balancers"
EXCLUDE_LABEL_VALUE: Final = "nodeops-detacher"
"""The value the detacher writes, so that its own label is told apart from someone else's."""
DETACH_ANNOTATION: Final = "nodeops.dev/detach"
DETACHING_ANNOTATION: Final = "nodeops.dev/detaching"
"""On a node the detacher took out of its load balancers: when it started (RFC 3339)."""
CONDITION_TYPE: Final = "NodeDetached"
CONTROL_PLANE_LABELS: Final = (
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
)

# Reasons, as they appear in events, conditions and the attachment's status.
UNSCHEDULABLE: Final = "Unschedulable"
TO_BE_DELETED: Final = "ToBeDeletedByClusterAutoscaler"
TERMINATION_HANDLER: Final = "NodeTerminationHandler"
EXCLUDED: Final = "ExcludedFromExternalLoadBalancers"
REQUESTED: Final = "DetachRequested"
CONFIGURED_TAINT: Final = "ConfiguredTaint"
INGRESS_ROLLOUT: Final = "IngressPodTerminating"


def _meta(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return node.get("metadata") or {}


def _taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


def taint_matches(key: str, patterns: Iterable[str]) -> bool:
    """A taint key against `key` or `prefix*` patterns."""
    for pattern in patterns:
        if pattern.endswith("*"):
            if key.startswith(pattern[:-1]):
                return True
        elif key == pattern:
            return True
    return False


def is_control_plane(node: Mapping[str, Any]) -> bool:
    labels = _meta(node).get("labels") or {}
    if any(label in labels for label in CONTROL_PLANE_LABELS):
        return True
    return any(t.get("key") in CONTROL_PLANE_LABELS for t in _taints(node))


def going_away_reasons(
    node: Mapping[str, Any], *, taints: Sequence[str] = (), extra: Iterable[str] = ()
) -> list[str]:
    """Why the node is going away, in a fixed order; empty when it is not.

    `extra` adds reasons found elsewhere (a terminating ingress pod on the node).
    """
    reasons: list[str] = []
    if (node.get("spec") or {}).get("unschedulable"):
        reasons.append(UNSCHEDULABLE)
    keys = [str(t.get("key", "")) for t in _taints(node)]
    if CA_TAINT in keys:
        reasons.append(TO_BE_DELETED)
    if any(k.startswith(NTH_TAINT_PREFIX) for k in keys):
        reasons.append(TERMINATION_HANDLER)
    labels = _meta(node).get("labels") or {}
    if EXCLUDE_LABEL in labels and labels[EXCLUDE_LABEL] != EXCLUDE_LABEL_VALUE:
        reasons.append(EXCLUDED)
    annotations = _meta(node).get("annotations") or {}
    if DETACH_ANNOTATION in annotations and annotations[DETACH_ANNOTATION].lower() != "false":
        reasons.append(REQUESTED)
    if taints and any(taint_matches(k, taints) for k in keys):
        reasons.append(CONFIGURED_TAINT)
    reasons.extend(r for r in extra if r not in reasons)
    return reasons
