"""The simulator's own record of what a node operation did to the workloads.

A referee outside the operator under test: it sees every pod, node, PodDisruptionBudget and
Deployment write as the API server stores it (the store's write hooks), so its figures are true
whatever the operator believes. It records:

- budget violations: each time a pod stops being healthy (or goes away) while its budget then
  has fewer healthy pods than `desiredHealthy`, with the pod, the node and whether it was
  evicted;
- evictions through the Eviction API, the pod moves a node roll caused (a pod moved twice
  counts twice);
- the lowest ready share of every Deployment (`readyReplicas / replicas`);
- load-balanced requests: clients send `rate` requests per simulated second through each routed
  load balancer; a request fails when the load balancer has no target in service, when its
  target's node is not Ready (kube-proxy there is down), or when the Service behind it has no
  ready endpoint.

`start()` begins the record (earlier writes only set the scene), `stop()` ends the traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from nodeops.common.selectors import LabelSelector, label_selector_from_object
from nodeops.sim.clock import Clock
from nodeops.sim.cloud.model import TERMINATED
from nodeops.sim.cloud.state import CloudState
from nodeops.sim.cluster.pdb_status import pod_is_healthy
from nodeops.sim.server.app import SimServer
from nodeops.sim.server.store import WatchEvent

__all__ = ["ClusterRecord", "Violation"]

Key = tuple[str, str]

_PODS = ("", "pods")
_NODES = ("", "nodes")
_PDBS = ("policy", "poddisruptionbudgets")
_SERVICES = ("", "services")
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
class _Route:
    load_balancer: str
    service: Key
    rate: float
    sent: int = 0
    failed: int = 0


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


def _ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


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
    def __init__(self, server: SimServer, clock: Clock, cloud: CloudState | None = None) -> None:
        self.server = server
        self.clock = clock
        self.cloud = cloud
        self.recording = False
        self.violations: list[Violation] = []
        self.evictions = 0
        self.pods_deleted = 0
        self.lowest_ready: dict[str, float] = {}
        self._pods: dict[Key, _Pod] = {}
        self._nodes: dict[str, bool] = {}
        self._budgets: dict[Key, _Selection] = {}
        self._services: dict[Key, _Selection] = {}
        self._routes: list[_Route] = []
        self._evicted: set[Key] = set()
        self._task: asyncio.Task[None] | None = None
        self._seed()
        server.store.write_hooks.append(self._on_write)

    # -- setting up ----------------------------------------------------------------------------

    def _seed(self) -> None:
        store = self.server.store
        for entry in store.bucket(_NODES).entries():
            self._node(entry.decode())
        for key in (_PDBS, _SERVICES):
            for entry in store.bucket(key).entries():
                self._selection(key, entry.decode())
        for entry in store.bucket(_PODS).entries():
            self._pod(entry.decode(), deleted=False)

    def route(self, load_balancer: str, service: str, *, rate: float = 100.0) -> None:
        """Send `rate` requests per simulated second through `load_balancer` to the Service
        `namespace/name` behind it."""
        namespace, _, name = service.rpartition("/")
        self._routes.append(_Route(load_balancer, (namespace or "default", name), rate))

    def start(self, tick: float = 1.0) -> None:
        """Start recording (and the traffic, every `tick` simulated seconds)."""
        self.recording = True
        if self._routes and self._task is None:
            self._task = asyncio.create_task(self._traffic(tick), name="sim-record-traffic")

    async def stop(self) -> None:
        self.recording = False
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- results -------------------------------------------------------------------------------

    @property
    def requests_sent(self) -> int:
        return sum(r.sent for r in self._routes)

    @property
    def requests_failed(self) -> int:
        return sum(r.failed for r in self._routes)

    @property
    def min_ready_ratio(self) -> float:
        return min(self.lowest_ready.values(), default=1.0)

    def summary(self) -> dict[str, Any]:
        return {
            "pdb_violations": len(self.violations),
            "evictions": self.evictions,
            "min_ready_replicas_ratio": round(self.min_ready_ratio, 4),
            "requests_sent": self.requests_sent,
            "requests_failed": self.requests_failed,
        }

    # -- the write hook ------------------------------------------------------------------------

    def _on_write(self, key: Key, ev: WatchEvent) -> None:
        if key == _PODS:
            self._pod(orjson.loads(ev.entry.raw), deleted=ev.type == "DELETED")
        elif key == _NODES:
            node = orjson.loads(ev.entry.raw)
            if ev.type == "DELETED":
                self._nodes.pop(str(node["metadata"]["name"]), None)
            else:
                self._node(node)
        elif key in (_PDBS, _SERVICES):
            obj = orjson.loads(ev.entry.raw)
            table = self._budgets if key == _PDBS else self._services
            if ev.type == "DELETED":
                table.pop((obj["metadata"].get("namespace", ""), obj["metadata"]["name"]), None)
            else:
                self._selection(key, obj)
        elif key == _DEPLOYMENTS and self.recording and ev.type != "DELETED":
            self._deployment(orjson.loads(ev.entry.raw))

    def _node(self, node: Mapping[str, Any]) -> None:
        self._nodes[str(node["metadata"]["name"])] = _ready(node)

    def _selection(self, key: Key, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta["name"])
        spec = obj.get("spec") or {}
        if key == _PDBS:
            selector = label_selector_from_object(spec.get("selector"))
            status = obj.get("status") or {}
            min_available = spec.get("minAvailable")
            desired = status.get("desiredHealthy")
            if desired is None and isinstance(min_available, int):
                desired = min_available
            table = self._budgets
        else:
            if not spec.get("selector"):
                return
            selector = label_selector_from_object({"matchLabels": spec["selector"]})
            desired = 1
            table = self._services
        old = table.get((namespace, name))
        selection = _Selection(namespace, selector, int(desired or 0))
        if old is not None and old.selector == selector:
            selection.healthy = old.healthy
        else:
            selection.healthy = {
                pod_name
                for (ns, pod_name), pod in self._pods.items()
                if ns == namespace and pod.healthy and selector.matches(pod.labels)
            }
        table[(namespace, name)] = selection

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
        for table, judged in ((self._budgets, True), (self._services, False)):
            for (ns, name), selection in table.items():
                if ns != key[0]:
                    continue
                selected = healthy and selection.selector.matches(labels)
                was = key[1] in selection.healthy
                if selected:
                    selection.healthy.add(key[1])
                    continue
                selection.healthy.discard(key[1])
                if (
                    judged
                    and was
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

    # -- traffic -------------------------------------------------------------------------------

    async def _traffic(self, tick: float) -> None:
        counters = {id(r): itertools.count() for r in self._routes}
        carry = {id(r): 0.0 for r in self._routes}
        while True:
            await self.clock.sleep(tick)
            for route in self._routes:
                carry[id(route)] += route.rate * tick
                count = int(carry[id(route)])
                carry[id(route)] -= count
                if count:
                    self._send(route, count, counters[id(route)])

    def _send(self, route: _Route, count: int, counter: itertools.count[int]) -> None:
        targets = self._targets(route.load_balancer)
        service = self._services.get(route.service)
        endpoints = len(service.healthy) if service is not None else 0
        route.sent += count
        if not targets or endpoints == 0:
            route.failed += count
            return
        for _ in range(count):
            node = targets[next(counter) % len(targets)]
            if not self._nodes.get(node, False):
                route.failed += 1

    def _targets(self, load_balancer: str) -> list[str]:
        """Node names of the instances the load balancer sends new requests to."""
        if self.cloud is None:
            return []
        lb = self.cloud.load_balancers.get(load_balancer)
        if lb is None:
            return []
        out = []
        for registration in lb.registrations.values():
            if registration.draining:
                continue
            instance = self.cloud.instances.get(registration.instance_id)
            if instance is None or instance.lifecycle == TERMINATED or not instance.running:
                continue
            out.append(instance.node_name)
        return sorted(set(out))
