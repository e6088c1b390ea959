"""What cycling needs to know about pods: which ones move when a node is drained, and which ones
the Wait method waits for."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nodeops.api.duration import parse_duration
from nodeops.controllers.cycling.keys import DO_NOT_DISRUPT
from nodeops.kube import objects as o

__all__ = [
    "UNJUDGED_FOR",
    "Protected",
    "awaiting_scheduler",
    "movable",
    "moving",
    "protected_pods",
    "turned_down",
]

Obj = Mapping[str, Any]


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _daemon(pod: Obj) -> bool:
    owner = o.controller_ref(pod)
    return owner is not None and owner.get("kind") == "DaemonSet"


def _mirror(pod: Obj) -> bool:
    return "kubernetes.io/config.mirror" in o.annotations_of(pod)


def movable(pod: Obj) -> bool:
    """A pod a drain moves to another node: not a DaemonSet or static pod, not finished, not
    already on its way out."""
    return not (_terminal(pod) or _daemon(pod) or _mirror(pod) or o.deletion_timestamp(pod))


def moving(pod: Obj) -> bool:
    """A pod on a node being drained that needs room elsewhere: what `movable` takes, and one
    already on its way out until it is gone, since its replacement may not be placed yet (and
    counted twice for those seconds is the safe side)."""
    return not (_terminal(pod) or _daemon(pod) or _mirror(pod))


UNJUDGED_FOR = timedelta(minutes=5)
"""How long a pod may wait for a scheduler's first verdict and still count as about to be
placed. A scheduler judges a new pod within seconds; one nobody has judged for this long
waits for a scheduler that is not there."""


def preempting(pod: Obj) -> bool:
    """Whether the scheduler made room for the pod by preempting others, and holds it there
    (`status.nominatedNodeName`) until they are gone. Never raises."""
    status = pod.get("status")
    return isinstance(status, Mapping) and bool(status.get("nominatedNodeName"))


def turned_down(pod: Obj) -> bool:
    """Whether a scheduler found no place for the pod (PodScheduled=False) and made none: a
    pod that preempts others is marked unschedulable too, but has its place. Never raises: an
    index function calls it."""
    if preempting(pod):
        return False
    for c in (pod.get("status") or {}).get("conditions") or ():
        if (
            isinstance(c, Mapping)
            and c.get("type") == "PodScheduled"
            and c.get("status") == "False"
        ):
            return True
    return False


def awaiting_scheduler(pod: Obj, now: datetime) -> bool:
    """An unbound pod about to take room: made less than `UNJUDGED_FOR` ago and not yet found
    unschedulable. One the scheduler has already turned down waits for something, maybe
    something the capacity check does not model (a volume, an extended resource), and may wait
    for ever; counting its room would hold a roll for nothing. One that preempted others is
    about to take the room they leave, however long they take."""
    if preempting(pod):
        return True
    if turned_down(pod):
        return False
    created = o.parse_time(o.meta(pod).get("creationTimestamp"))
    return created is None or now - created < UNJUDGED_FOR


@dataclass(frozen=True)
class Protected:
    """A pod the Wait method waits for, and until when (None: until it finishes)."""

    pod: str
    until: datetime | None


def _start(pod: Obj) -> datetime | None:
    status = pod.get("status") or {}
    return o.parse_time(status.get("startTime")) or o.parse_time(
        o.meta(pod).get("creationTimestamp")
    )


def _protection(pod: Obj, now: datetime) -> tuple[bool, datetime | None]:
    """Whether an annotation protects the pod now, and until when.

    `true` protects until the pod finishes. Karpenter's `karpenter.sh/do-not-disrupt` may
    instead hold a duration: the pod is protected for that long after it started.
    """
    annotations = o.annotations_of(pod)
    until: datetime | None = None
    protected = False
    for key in DO_NOT_DISRUPT:
        value = annotations.get(key)
        if value is None:
            continue
        if value == "true":
            return True, None
        try:
            seconds = parse_duration(value)
        except ValueError:
            continue  # "false" or garbage: not protected by this key
        started = _start(pod)
        if started is None:
            return True, None
        end = started + timedelta(seconds=seconds)
        if end > now:
            protected = True
            until = end if until is None else max(until, end)
    return protected, until


def protected_pods(
    pods: Iterable[Obj],
    *,
    now: datetime,
    ignore_namespaces: Sequence[str] = (),
    ignore_labels: Mapping[str, Sequence[str]] | None = None,
) -> list[Protected]:
    """The running pods the Wait method still waits for, minus the ignored ones."""
    out: list[Protected] = []
    ignored_ns = set(ignore_namespaces)
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        if o.namespace(pod) in ignored_ns:
            continue
        labels = o.labels(pod)
        if ignore_labels and any(labels.get(k) in vals for k, vals in ignore_labels.items()):
            continue
        protected, until = _protection(pod, now)
        if protected:
            out.append(Protected(o.ref(pod), until))
    return out
