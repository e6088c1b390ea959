"""Ingress DaemonSets: detach a node while its ingress pod is replaced.

An ingress controller run as a DaemonSet behind `externalTrafficPolicy: Local` is the node's
only endpoint: during a rolling update its old pod terminates before the new one is ready, and
the load balancer keeps sending requests until its health checks notice. So when a pod of a
configured DaemonSet starts terminating, its node is detached first; it is attached again once
a pod of that DaemonSet on the node is ready and none is terminating.

node-detacher meant to do this but the taint it set was one its own node controller ignored;
here the terminating pod itself is the reason, with nothing written in between.

The detacher's own stopping of a going node's DaemonSet pods (`--detacher-stop-daemonset-pods`)
is no rollout: those pods terminate because it evicts them, and none comes back while its
`nodeops.dev/draining` taint is on the node, which it lifts only when it attaches the node again.
Waiting for a ready ingress pod then would keep a node that is back (uncordoned) out for good.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["IngressView", "daemonset_of", "ingress_view", "rollout_holds"]


def daemonset_of(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the DaemonSet controlling the pod; None for any other pod."""
    meta = pod.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == "DaemonSet":
            return (str(meta.get("namespace") or ""), str(ref.get("name") or ""))
    return None


def _ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class IngressView:
    """The configured DaemonSets' pods on one node."""

    terminating: bool
    """A pod of one of them is terminating: detach now."""
    ready: bool
    """A pod of them is on the node, each of them that has one there has a ready one, and
    none terminates: a node detached for a rollout comes back. (Between the old pod's end and
    the new pod's creation there is no pod at all, which is not ready.)"""


def ingress_view(
    pods: Iterable[Mapping[str, Any]], daemonsets: Collection[tuple[str, str]]
) -> IngressView:
    if not daemonsets:
        return IngressView(terminating=False, ready=False)
    present: set[tuple[str, str]] = set()
    ready: set[tuple[str, str]] = set()
    terminating = False
    for pod in pods:
        owner = daemonset_of(pod)
        if owner is None or owner not in daemonsets or _finished(pod):
            continue
        present.add(owner)
        if _deleting(pod):
            terminating = True
        elif _ready(pod):
            ready.add(owner)
    return IngressView(
        terminating=terminating, ready=not terminating and bool(present) and present <= ready
    )


def rollout_holds(view: IngressView, *, rolling: bool, stopping_daemonset_pods: bool) -> bool:
    """Whether an ingress rollout keeps the node out of its load balancers: a pod of the
    DaemonSets terminates, or the node already left for a rollout (`rolling`) and no new pod is
    ready yet. Never while the detacher itself stops the node's DaemonSet pods (they terminate
    and stay away because of it, not of a rollout)."""
    if stopping_daemonset_pods:
        return False
    return view.terminating or (rolling and not view.ready)
