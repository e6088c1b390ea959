"""Counts of the pods each owner controls, kept current from pod events.

A ReplicaSet's status is a handful of counts over its pods (active, fully labelled, ready,
available). Recounting them from the cache on every reconcile costs the owner's replica count per
pod event, so a roll of a cluster whose big Deployment has thousands of replicas spends its time
recounting. kube-controller-manager pays the same (it lists the owner's pods per sync); the
simulator must not, because it also has to run the operator it serves. Here each pod event moves
the counts of its owner by one pod, and a reconcile reads them in time independent of the
replica count.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from nodeops.sim.cluster.apiclient import Obj
from nodeops.sim.cluster.indexes import controller_uid
from nodeops.sim.cluster.informer import Informer, Key, key_of
from nodeops.sim.cluster.podcontrol import is_active, ready_since
from nodeops.sim.cluster.podstatus import pod_ready

__all__ = ["OwnedCounts", "PodTally", "counts_of", "pod_tally"]


class _Facts(NamedTuple):
    """What the counts need of one pod, read once per pod version."""

    owner: str
    active: bool
    ready: bool
    since: float | None
    labels: frozenset[tuple[str, str]]


def _read_facts(owner: str, pod: Mapping[str, Any]) -> _Facts:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return _Facts(
        owner, is_active(pod), pod_ready(pod), ready_since(pod), frozenset(labels.items())
    )


def _insert(values: list[float], value: float) -> None:
    bisect.insort(values, value)


def _remove(values: list[float], value: float) -> None:
    i = bisect.bisect_left(values, value)
    if i < len(values) and values[i] == value:
        del values[i]


def _count_at_most(values: list[float], limit: float, min_ready: float) -> int:
    """How many `since` in sorted `values` have `since + min_ready <= limit`, computed with
    the very float arithmetic of `is_available` (the test is monotonic in `since`)."""
    i = bisect.bisect_right(values, limit - min_ready)
    n = len(values)
    while i < n and values[i] + min_ready <= limit:
        i += 1
    while i > 0 and not values[i - 1] + min_ready <= limit:
        i -= 1
    return i


class OwnedCounts:
    """The counts of the pods one owner controls (terminal and deleting ones included, as
    `OwnerController.owned_pods` returns them)."""

    __slots__ = ("_labelled", "_since_active", "_since_all", "active", "pods", "ready")

    def __init__(self) -> None:
        self.pods = 0
        self.active = 0
        self.ready = 0
        """Active pods whose Ready condition is True."""
        self._labelled: Counter[frozenset[tuple[str, str]]] = Counter()
        """Active pods by their label set: owners' pods share a few sets at most."""
        self._since_active: list[float] = []
        self._since_all: list[float] = []

    def _apply(self, facts: _Facts, sign: int) -> None:
        self.pods += sign
        change = _insert if sign > 0 else _remove
        if facts.since is not None:
            change(self._since_all, facts.since)
        if not facts.active:
            return
        self.active += sign
        if facts.ready:
            self.ready += sign
        self._labelled[facts.labels] += sign
        if self._labelled[facts.labels] <= 0:
            del self._labelled[facts.labels]
        if facts.since is not None:
            change(self._since_active, facts.since)

    def copy(self) -> OwnedCounts:
        """The counts as they are now, no longer following events."""
        out = OwnedCounts()
        out.pods, out.active, out.ready = self.pods, self.active, self.ready
        out._labelled = Counter(self._labelled)
        out._since_active = list(self._since_active)
        out._since_all = list(self._since_all)
        return out

    def fully_labelled(self, template_labels: Mapping[str, Any]) -> int:
        """Active pods carrying every label of the template."""
        wanted = set(template_labels.items())
        return sum(n for labels, n in self._labelled.items() if wanted <= labels)

    def available(self, min_ready_seconds: float, now: float) -> int:
        """Active pods ready for at least `min_ready_seconds` (`is_available`)."""
        if min_ready_seconds <= 0:
            return len(self._since_active)
        return _count_at_most(self._since_active, now, min_ready_seconds)

    def available_after(self, min_ready_seconds: float, now: float) -> float | None:
        """`podcontrol.available_after` over the owner's pods, active or not."""
        if min_ready_seconds <= 0:
            return None
        i = _count_at_most(self._since_all, now, min_ready_seconds)
        if i >= len(self._since_all):
            return None
        return self._since_all[i] + min_ready_seconds - now + 0.01


_EMPTY = OwnedCounts()


def counts_of(pods: Iterable[Mapping[str, Any]]) -> OwnedCounts:
    """The counts of a list of pods, as a tally would keep them."""
    counts = OwnedCounts()
    for pod in pods:
        counts._apply(_read_facts("", pod), +1)
    return counts


class PodTally:
    """Per controller uid, the counts of the pods it controls; one per pod informer."""

    def __init__(self, pods: Informer) -> None:
        self._facts: dict[Key, _Facts] = {}
        self._owners: dict[str, OwnedCounts] = {}
        pods.add_handler(self._on_pod)

    def of(self, owner_uid: str) -> OwnedCounts:
        return self._owners.get(owner_uid) or _EMPTY

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        key = key_of(obj)
        before = self._facts.pop(key, None)
        if before is not None:
            counts = self._owners[before.owner]
            counts._apply(before, -1)
            if counts.pods <= 0:
                del self._owners[before.owner]
        if new is None:
            return
        owner = next(iter(controller_uid(new)), None)
        if owner is None:
            return
        facts = self._facts[key] = _read_facts(owner, new)
        after = self._owners.get(owner)
        if after is None:
            after = self._owners[owner] = OwnedCounts()
        after._apply(facts, +1)


def pod_tally(pods: Informer) -> PodTally:
    """The tally of a pod informer, shared by every controller that reads it."""
    tally = pods.shared.get(PodTally)
    if tally is None:
        tally = pods.shared[PodTally] = PodTally(pods)
    assert isinstance(tally, PodTally)
    return tally
