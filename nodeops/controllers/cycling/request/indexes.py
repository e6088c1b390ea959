"""The informer indexes the cycling controllers read through, and the reads made of them.

A roll's events (every node's cordon, taints and readiness; every budget's change as pods
move) and its request's reconciles are each O(N) over a roll. Anything that decodes every
request, every CycleNodeStatus or every Node to answer one of them makes the roll O(N^2): a
request's status lists every node it replaces, and a request keeps its CycleNodeStatuses until
it ends. These indexes answer the same questions from keys kept up to date as the cache
changes, decoding only the objects that are the answer.

Index functions never raise: one that did would keep the object out of the cache altogether.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from nodeops.api.cycling import TERMINAL_PHASES
from nodeops.controllers.cycling.keys import (
    ANNOTATION_MANAGED,
    CYCLE_TAINT,
    SELECTED_LABEL,
    TERMINATE_LABEL,
)
from nodeops.controllers.cycling.pods import turned_down
from nodeops.kube import Informer, Request
from nodeops.kube import objects as o

__all__ = [
    "ACTIVE",
    "BY_ANNOTATED_FOR",
    "BY_ANTI_AFFINITY",
    "BY_LABEL",
    "BY_OWNER_MOVES",
    "BY_OWNER_STATE",
    "BY_QUEUED_FOR",
    "BY_SELECTED_FOR",
    "BY_STATE",
    "BY_UNBOUND",
    "BY_UNTAINTED_FOR",
    "MOVES_BITS",
    "REQUIRED",
    "UNBOUND",
    "annotated_for",
    "anti_affinity",
    "in_namespace",
    "label_pairs",
    "owner_moves",
    "owner_state",
    "owner_uid",
    "phase_of",
    "queued_for",
    "requests_of",
    "selected_for",
    "spec_node",
    "state",
    "states",
    "terminal_pod_moves",
    "unbound",
    "untainted_for",
]

Obj = Mapping[str, Any]

BY_STATE = "cycling-state"
"""CycleNodeRequests by `state`: the unfinished ones, for node and node group events."""

BY_OWNER_STATE = "cycling-owner-state"
"""CycleNodeStatuses by `owner_state`: a request's children still working, and its finished
ones counted without being read."""

BY_OWNER_MOVES = "cycling-owner-moves"
"""Finished CycleNodeStatuses by `owner_moves`: the pods they moved, summed without reading them."""

BY_ANNOTATED_FOR = "cycling-annotated-for"
"""Nodes by the request that gave them the scale-down-disabled annotation."""

BY_SELECTED_FOR = "cycling-selected-for"
"""Nodes by the request that selected them, in whatever state: what a request puts back."""

BY_QUEUED_FOR = "cycling-queued-for"
"""Nodes a request selected and has not yet handed to a CycleNodeStatus: its queue, counted
without reading a node."""

BY_UNTAINTED_FOR = "cycling-untainted-for"
"""The nodes of a request's queue that do not carry its taint yet: tainting the queue after
each batch's detach reads only these, not the whole queue."""

BY_ANTI_AFFINITY = "cycling-anti-affinity"
"""Pods with required pod anti-affinity (under `REQUIRED`): the capacity check holds every
batch to them, and finds them without reading every pod."""

BY_LABEL = "cycling-label"
"""Pods by each of their labels (`key=value`): the pods an inter-pod rule's selector can match,
read without decoding every pod of the cluster for each batch's capacity check."""

BY_UNBOUND = "cycling-unbound"
"""Pods the scheduler has still to place (under `UNBOUND`): the replacements of pods evicted
a moment ago among them. They take room on the nodes that stay before a batch's pods do, and
are found without reading every pod."""

ACTIVE = "active"
"""The state of an object whose phase is not terminal (none yet included)."""

REQUIRED = "required"
"""The `BY_ANTI_AFFINITY` value of a pod with required anti-affinity terms."""

UNBOUND = "unbound"
"""The `BY_UNBOUND` value of a pod the scheduler has still to place."""

MOVES_BITS = 63
"""`podsToMove` is an int64 the API server keeps at 0 or more."""


def phase_of(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def state(obj: Obj) -> str:
    """`ACTIVE` until the phase is terminal, then the phase (Successful or Failed)."""
    p = phase_of(obj)
    return p if p in TERMINAL_PHASES else ACTIVE


def states(obj: Obj) -> list[str]:
    return [state(obj)]


def _owner(obj: Obj) -> str:
    owner = o.controller_ref(obj)
    return str(owner["uid"]) if owner and owner.get("uid") else ""


def owner_uid(obj: Obj) -> list[str]:
    """The controller's uid, for an object with a controller."""
    uid = _owner(obj)
    return [uid] if uid else []


def owner_state(obj: Obj) -> list[str]:
    """`<controller uid>/<state>`, for an object with a controller."""
    uid = _owner(obj)
    return [f"{uid}/{state(obj)}"] if uid else []


def owner_moves(obj: Obj) -> list[str]:
    """`<controller uid>/<bit>` for each bit set in a finished child's `podsToMove`.

    A finished child's pods moved are summed over its request's children as the count of each
    bit's bucket times its weight, so no child is read for it. Children still working are
    read anyway, and have no entry; a value the schema would refuse counts as none."""
    uid = _owner(obj)
    if not uid or phase_of(obj) not in TERMINAL_PHASES:
        return []
    moves = (obj.get("status") or {}).get("podsToMove")
    if not isinstance(moves, int) or isinstance(moves, bool) or moves <= 0:
        return []
    return [
        f"{uid}/{bit}" for bit in range(min(moves.bit_length(), MOVES_BITS)) if moves >> bit & 1
    ]


def terminal_pod_moves(children: Informer, owner_uid: str) -> int:
    """The `podsToMove` of the owner's finished children, summed from `BY_OWNER_MOVES`."""
    return sum(
        len(children.index_keys(BY_OWNER_MOVES, f"{owner_uid}/{bit}")) << bit
        for bit in range(MOVES_BITS)
    )


def spec_node(obj: Obj) -> list[str]:
    """The node a pod runs on, or a CycleNodeStatus replaces."""
    node = (obj.get("spec") or {}).get("nodeName")
    return [str(node)] if node else []


def unbound(obj: Obj) -> list[str]:
    """`UNBOUND` for a pod the scheduler will place: on no node yet, not finished, not on its
    way out, held back by no scheduling gate (a gated pod waits for someone else, maybe for
    long, and reserving room for it could hold a roll for nothing), and not yet turned down
    by the scheduler (unless it preempted others to make room). A pod it turned down leaves
    the index, so a backlog of thousands of unschedulable pods is not read at every batch."""
    spec = obj.get("spec") or {}
    if spec.get("nodeName") or spec.get("schedulingGates"):
        return []
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return []
    if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed") or turned_down(obj):
        return []
    return [UNBOUND]


def anti_affinity(obj: Obj) -> list[str]:
    """`REQUIRED` for a pod with required pod anti-affinity terms."""
    anti = ((obj.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {}
    return [REQUIRED] if anti.get("requiredDuringSchedulingIgnoredDuringExecution") else []


def label_pairs(obj: Obj) -> list[str]:
    """`key=value` for each of the object's labels, interned: the cache keeps each pod's
    values, and the replicas of a workload share theirs."""
    return [sys.intern(f"{k}={v}") for k, v in o.labels(obj).items()]


def annotated_for(obj: Obj) -> list[str]:
    """The request named by the node's managed-annotation marker, if any."""
    value = o.annotations_of(obj).get(ANNOTATION_MANAGED)
    return [value] if isinstance(value, str) and value else []


def selected_for(obj: Obj) -> list[str]:
    """The request named by the node's selection label, if any."""
    value = o.labels(obj).get(SELECTED_LABEL)
    return [value] if isinstance(value, str) and value else []


def queued_for(obj: Obj) -> list[str]:
    """The request whose queue the node is in: selected by it, not handed to a CycleNodeStatus
    (the terminate label goes on with the handover), not being deleted."""
    if TERMINATE_LABEL in o.labels(obj) or o.deletion_timestamp(obj) is not None:
        return []
    return selected_for(obj)


def untainted_for(obj: Obj) -> list[str]:
    """The request whose queue the node is in, while the node lacks that request's taint."""
    queue = queued_for(obj)
    taints = (obj.get("spec") or {}).get("taints") or ()
    if queue and any(
        isinstance(t, Mapping) and t.get("key") == CYCLE_TAINT and t.get("value") == queue[0]
        for t in taints
    ):
        return []
    return queue


def in_namespace(keys: list[str], namespace: str) -> list[str]:
    """The cache keys (`namespace/name`) of objects in `namespace`, in their order."""
    prefix = f"{namespace}/"
    return [k for k in keys if k.startswith(prefix)]


def requests_of(keys: list[str]) -> list[Request]:
    """Reconcile requests for namespaced cache keys, without reading the objects."""
    out = []
    for key in keys:
        namespace, _, name = key.partition("/")
        out.append(Request(name, namespace))
    return out
