"""The simulator's own record of what a node operation did to the workloads.

A referee outside the operator under test: it sees every pod, node, PodDisruptionBudget and
Deployment write as the API server stores it (the store's write hooks), so its figures are true
whatever the operator believes. It records:

- budget violations: each time a pod stops being healthy (or goes away) while its budget then
  has fewer healthy pods than `desiredHealthy`, with the pod, the node and whether it was
  evicted;
- evictions through the Eviction API, the pod moves a node roll caused (a pod moved twice
  counts twice);
- the lowest ready share of every Deployment (`readyReplicas / replicas`).

Requests through load balancers are the simulated cloud's traffic flows
(`nodeops.sim.cloud.traffic`). `start()` begins the record: earlier writes only set the scene.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeops.common.selectors import LabelSelector, label_selector_from_object
from nodeops.sim.clock import Clock
from nodeops.sim.cluster.pdb_status import pod_is_healthy
from nodeops.sim.server.app import SimServer
from nodeops.sim.server.store import WatchEvent

__all__ = ["ClusterRecord", "Violation"]

Key = tuple[str, str]

_PODS = ("", "pods")
_PDBS = ("policy", "poddisruptionbudgets")
_DEPLOYMENTS = ("apps", "deployments")


@dataclass(frozen=True)
class Violation:
    budget: str
    pod: str
    node: str
    healthy: int
    desired: int
    evicted: bool
    at: float


@dataclass
class _Selection:
    """Pods of a namespace selected by a budget or a Service, and which of them are healthy."""

    namespace: str
    selector: LabelSelector
    desired: int = 0
    healthy: set[str] = field(default_factory=set)


@dataclass
class _Pod:
    namespace: str
    labels: Mapping[str, str]
    healthy: bool
    node: str


def _healthy(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return pod_is_healthy(pod)


def _evicted(pod: Mapping[str, Any]) -> bool:
    """Evicted through the Eviction API; pods the pod GC or the taint manager delete carry a
    DisruptionTarget condition too, with another reason, and are not moves a drain made."""
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(
        c.get("type") == "DisruptionTarget"
        and c.get("status") == "True"
        and c.get("reason") == "EvictionByEvictionAPI"
        for c in conditions
    )


class ClusterRecord:
    """Fed by the store's write hooks of `server`, or, with no server (a simulator attached to
    another API server), by `observe` from watches of that server."""

    def __init__(self, server: SimServer | None, clock: Clock) -> None:
        self.server = server
        self.clock = clock
        self.recording = False
        self.violations: list[Violation] = []
        self.evictions = 0
        self.pods_deleted = 0
        self.lowest_ready: dict[str, float] = {}
        self._pods: dict[Key, _Pod] = {}
        self._budgets: dict[Key, _Selection] = {}
        self._evicted: set[Key] = set()
        if server is not None:
            self._seed()
            server.store.write_hooks.append(self._on_write)

    # -- setting up ----------------------------------------------------------------------------

    def _seed(self) -> None:
        assert self.server is not None
        store = self.server.store
        for entry in store.bucket(_PDBS).entries():
            self._budget(entry.decode())
        for entry in store.bucket(_PODS).entries():
            self._pod(entry.decode(), deleted=False)

    def start(self) -> None:
        """Start recording."""
        self.recording = True

    async def stop(self) -> None:
        self.recording = False

    # -- results -------------------------------------------------------------------------------

    @property
    def min_ready_ratio(self) -> float:
        return min(self.lowest_ready.values(), default=1.0)

    def summary(self) -> dict[str, Any]:
        return {
            "pdb_violations": len(self.violations),
            "evictions": self.evictions,
            "min_ready_replicas_ratio": round(self.min_ready_ratio, 4),
        }

    # -- the write hook ------------------------------------------------------------------------

    def _on_write(self, key: Key, ev: WatchEvent) -> None:
        if key in (_PODS, _PDBS, _DEPLOYMENTS):
            self.observe(key, ev.type, ev.decoded())

    def observe(self, key: Key, event: str, obj: Mapping[str, Any]) -> None:
        """One stored change of a pod, PodDisruptionBudget or Deployment (`key` is its
        (group, plural)); `event` is the watch event type."""
        if key == _PODS:
            self._pod(obj, deleted=event == "DELETED")
        elif key == _PDBS:
            if event == "DELETED":
                meta = obj["metadata"]
                self._budgets.pop((meta.get("namespace", ""), meta["name"]), None)
            else:
                self._budget(obj)
        elif key == _DEPLOYMENTS and self.recording and event != "DELETED":
            self._deployment(obj)

    def _budget(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta["name"])
        spec = obj.get("spec") or {}
        selector = label_selector_from_object(spec.get("selector"))
        min_available = spec.get("minAvailable")
        desired = (obj.get("status") or {}).get("desiredHealthy")
        if desired is None and isinstance(min_available, int):
            desired = min_available
        old = self._budgets.get((namespace, name))
        selection = _Selection(namespace, selector, int(desired or 0))
        if old is not None and old.selector == selector:
            selection.healthy = old.healthy
        else:
            selection.healthy = {
                pod_name
                for (ns, pod_name), pod in self._pods.items()
                if ns == namespace and pod.healthy and selector.matches(pod.labels)
            }
        self._budgets[(namespace, name)] = selection

    def _pod(self, pod: Mapping[str, Any], *, deleted: bool) -> None:
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta["name"]))
        labels = meta.get("labels") or {}
        healthy = not deleted and _healthy(pod)
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        before = self._pods.get(key)
        evicted = _evicted(pod)
        if evicted and key not in self._evicted:
            self._evicted.add(key)
            if self.recording:
                self.evictions += 1
        if deleted:
            self._pods.pop(key, None)
            self._evicted.discard(key)
            if self.recording:
                self.pods_deleted += 1
        else:
            self._pods[key] = _Pod(key[0], labels, healthy, node)
        for (ns, name), selection in self._budgets.items():
            if ns != key[0]:
                continue
            selected = healthy and selection.selector.matches(labels)
            was = key[1] in selection.healthy
            if selected:
                selection.healthy.add(key[1])
                continue
            selection.healthy.discard(key[1])
            if (
                was
                and self.recording
                and before is not None
                and len(selection.healthy) < selection.desired
            ):
                self.violations.append(
                    Violation(
                        budget=f"{ns}/{name}",
                        pod=f"{key[0]}/{key[1]}",
                        node=node,
                        healthy=len(selection.healthy),
                        desired=selection.desired,
                        evicted=evicted,
                        at=self.clock.now().timestamp(),
                    )
                )

    def _deployment(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        replicas = int((obj.get("spec") or {}).get("replicas") or 0)
        if replicas <= 0:
            return
        ready = int((obj.get("status") or {}).get("readyReplicas") or 0)
        name = f"{meta.get('namespace', '')}/{meta['name']}"
        ratio = min(1.0, ready / replicas)
        self.lowest_ready[name] = min(self.lowest_ready.get(name, 1.0), ratio)
