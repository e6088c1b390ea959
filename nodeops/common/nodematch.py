"""kube-scheduler's node predicates that need no view of other pods: whether a pod tolerates a
node's taints (TaintToleration) and whether the node is one its node selector and required node
affinity allow (NodeAffinity).

One copy for the simulated scheduler and DaemonSet controller, and for the cycling controllers'
capacity check, which must agree with them on where a pod may go.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

__all__ = [
    "NO_EXECUTE",
    "NO_SCHEDULE",
    "is_deleting",
    "node_matches_affinity",
    "node_matches_term",
    "tolerates",
    "untolerated_taint",
]

Obj = Mapping[str, Any]

NO_SCHEDULE: Final = "NoSchedule"
NO_EXECUTE: Final = "NoExecute"


def is_deleting(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """Whether one toleration matches one taint (the rules of `Toleration.ToleratesTaint`)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    op = toleration.get("operator") or "Equal"
    if key:
        if key != taint.get("key"):
            return False
    elif op != "Exists":
        return False
    if op == "Exists":
        return True
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(
    taints: Iterable[Obj],
    tolerations: Sequence[Obj],
    effects: tuple[str, ...] = (NO_SCHEDULE, NO_EXECUTE),
) -> Obj | None:
    """The first taint with one of `effects` that no toleration matches, or None."""
    for taint in taints:
        if taint.get("effect") not in effects:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _match_requirement(req: Obj, value: str | None) -> bool:
    op = req.get("operator")
    values = req.get("values") or []
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_matches_term(term: Obj, node: Obj) -> bool:
    """A NodeSelectorTerm: all of its requirements; an empty term matches no node."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    for req in exprs:
        if not _match_requirement(req, labels.get(req.get("key"))):
            return False
    for req in fields:
        if req.get("key") != "metadata.name":
            return False
        if not _match_requirement(req, meta.get("name")):
            return False
    return True


def node_matches_affinity(pod_spec: Obj, node: Obj) -> bool:
    """spec.nodeSelector and required node affinity (any of the terms)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        return True
    return any(node_matches_term(t, node) for t in terms)
