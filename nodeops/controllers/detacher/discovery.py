"""Which load balancer targets a node's instance is registered in, without a scan per node.

A scale-down takes many nodes away at once. node-detacher asked every target group of the
region for its targets once per node (N+1 calls each time); here one scan answers for every
instance (`LoadBalancers.registrations`) and is reused for `ttl` seconds by every node.

A node missing from the scan may have been registered after it: the scan is then refreshed, but
not more often than every `miss_refresh` seconds, since an instance in no load balancer at all
is missing from every scan. Concurrent lookups share one refresh (single flight).

With `discovery=services` the candidates are the load balancers of the cluster's Services,
found by their tags and cached the same way, so only those are asked for their targets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nodeops.providers.base import LoadBalancers, LoadBalancerTarget, ServiceRef

__all__ = ["Inventory", "Snapshot", "service_refs"]

AmongKey = frozenset[tuple[str, str]] | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One scan: when it was taken (by the wall clock, comparable with status timestamps) and
    every registered instance's targets."""

    taken_at: float
    registrations: dict[str, list[LoadBalancerTarget]]
    monotonic: float


def _among_key(among: Sequence[LoadBalancerTarget] | None) -> AmongKey:
    return None if among is None else frozenset((t.kind, t.name) for t in among)


class Inventory:
    """TTL-cached scans of the provider's load balancers, shared by every node."""

    def __init__(
        self,
        provider: LoadBalancers,
        *,
        ttl: float,
        miss_refresh: float,
        cluster: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.provider = provider
        self.ttl = ttl
        self.miss_refresh = miss_refresh
        self.cluster = cluster
        self._clock = clock
        self._wall = wall
        self._scans: dict[AmongKey, Snapshot] = {}
        self._services: dict[frozenset[ServiceRef], tuple[float, list[LoadBalancerTarget]]] = {}
        self._locks: dict[Any, asyncio.Lock] = {}
        self.scans = 0
        """Scans made, for tests and metrics."""

    def _lock(self, key: Any) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def snapshot(
        self,
        among: Sequence[LoadBalancerTarget] | None,
        *,
        instance_id: str | None = None,
        newer_than: float | None = None,
    ) -> Snapshot:
        """A scan no older than the TTL; refreshed when `instance_id` is missing from it (at
        most every `miss_refresh` seconds) or when it is older than `newer_than` (wall clock)."""
        key = _among_key(among)
        if key is not None and not key:
            return Snapshot(self._wall(), {}, self._clock())
        async with self._lock(("scan", key)):
            current = self._scans.get(key)
            if current is None or self._stale(current, instance_id, newer_than):
                self.scans += 1
                started_wall, started = self._wall(), self._clock()
                found = await self.provider.registrations(among=among)
                current = self._scans[key] = Snapshot(started_wall, found, started)
            return current

    def _stale(self, snap: Snapshot, instance_id: str | None, newer_than: float | None) -> bool:
        age = self._clock() - snap.monotonic
        if age >= self.ttl:
            return True
        if newer_than is not None and snap.taken_at < newer_than:
            return True
        return (
            instance_id is not None
            and instance_id not in snap.registrations
            and age >= self.miss_refresh
        )

    async def targets_of(
        self,
        instance_id: str,
        among: Sequence[LoadBalancerTarget] | None,
        *,
        newer_than: float | None = None,
    ) -> tuple[list[LoadBalancerTarget], float]:
        """The instance's registrations and when the scan they come from was taken."""
        snap = await self.snapshot(among, instance_id=instance_id, newer_than=newer_than)
        return list(snap.registrations.get(instance_id, ())), snap.taken_at

    async def behind_services(self, services: Iterable[ServiceRef]) -> list[LoadBalancerTarget]:
        """The load balancers of the Services, from their tags, cached like scans."""
        wanted = frozenset(services)
        if not wanted:
            return []
        async with self._lock(("services", wanted)):
            cached = self._services.get(wanted)
            if cached is not None and self._clock() - cached[0] < self.ttl:
                return cached[1]
            started = self._clock()
            found = await self.provider.targets_behind_services(
                sorted(wanted, key=str), cluster=self.cluster
            )
            targets = sorted(
                {t for ts in found.values() for t in ts}, key=lambda t: (t.kind, t.name)
            )
            # Only the latest set of Services is worth keeping.
            self._services = {wanted: (started, targets)}
            return targets

    def forget(self) -> None:
        """Drop every cached scan (a registration changed through us)."""
        self._scans.clear()


def service_refs(services: Iterable[dict[str, Any]]) -> list[ServiceRef]:
    """Services whose load balancers may send traffic to nodes: LoadBalancer and NodePort."""
    refs = []
    for svc in services:
        if (svc.get("spec") or {}).get("type") not in ("LoadBalancer", "NodePort"):
            continue
        meta = svc.get("metadata") or {}
        refs.append(ServiceRef(str(meta.get("namespace", "")), str(meta.get("name", ""))))
    return sorted(refs, key=str)
