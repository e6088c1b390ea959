"""One scan serves every node; a miss refreshes it, but not in a loop."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from nodeops.controllers.detacher.discovery import Inventory, service_refs
from nodeops.providers.base import CLASSIC, TARGET_GROUP, LoadBalancerTarget, ServiceRef

CLB = LoadBalancerTarget(CLASSIC, "web")
TG = LoadBalancerTarget(TARGET_GROUP, "arn:tg", 30080)


class Cloud:
    """Just enough of a LoadBalancers provider: a registration table and call counts."""

    def __init__(self) -> None:
        self.table: dict[str, list[LoadBalancerTarget]] = {"i-1": [CLB, TG], "i-2": [TG]}
        self.scans = 0
        self.service_lookups = 0
        self.gate: asyncio.Event | None = None

    async def registrations(
        self, *, among: Sequence[LoadBalancerTarget] | None = None
    ) -> dict[str, list[LoadBalancerTarget]]:
        self.scans += 1
        if self.gate is not None:
            await self.gate.wait()
        names = None if among is None else {(t.kind, t.name) for t in among}
        return {
            iid: [t for t in ts if names is None or (t.kind, t.name) in names]
            for iid, ts in self.table.items()
        }

    async def targets_behind_services(
        self, services: Sequence[ServiceRef], *, cluster: str | None = None
    ) -> dict[ServiceRef, list[LoadBalancerTarget]]:
        self.service_lookups += 1
        return {s: [LoadBalancerTarget(TARGET_GROUP, "arn:tg")] for s in services}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def inventory(cloud: Cloud, clock: Clock) -> Inventory:
    return Inventory(cloud, ttl=60, miss_refresh=5, clock=clock, wall=clock)  # type: ignore[arg-type]


async def test_one_scan_serves_every_node_until_it_expires() -> None:
    cloud, clock = Cloud(), Clock()
    inv = inventory(cloud, clock)
    assert (await inv.targets_of("i-1", None))[0] == [CLB, TG]
    assert (await inv.targets_of("i-2", None))[0] == [TG]
    assert cloud.scans == 1
    clock.now += 61
    await inv.targets_of("i-1", None)
    assert cloud.scans == 2


async def test_a_miss_refreshes_but_not_more_often_than_miss_refresh() -> None:
    cloud, clock = Cloud(), Clock()
    inv = inventory(cloud, clock)
    await inv.targets_of("i-1", None)
    cloud.table["i-3"] = [CLB]
    clock.now += 1
    assert (await inv.targets_of("i-3", None))[0] == []  # too young to refresh for a miss
    clock.now += 5
    assert (await inv.targets_of("i-3", None))[0] == [CLB]
    assert cloud.scans == 2
    # An instance registered nowhere does not cause a scan on every lookup.
    for _ in range(10):
        await inv.targets_of("i-none", None)
    assert cloud.scans == 2


async def test_newer_than_forces_a_scan_taken_after_a_change() -> None:
    cloud, clock = Cloud(), Clock()
    inv = inventory(cloud, clock)
    _, taken = await inv.targets_of("i-1", None)
    clock.now += 2
    cloud.table["i-1"] = [CLB]
    assert (await inv.targets_of("i-1", None, newer_than=taken + 1))[0] == [CLB]


async def test_concurrent_lookups_share_one_scan() -> None:
    cloud, clock = Cloud(), Clock()
    cloud.gate = asyncio.Event()
    inv = inventory(cloud, clock)
    lookups = [asyncio.create_task(inv.targets_of(f"i-{n}", None)) for n in (1, 2, 1, 2)]
    await asyncio.sleep(0.01)
    cloud.gate.set()
    results = await asyncio.gather(*lookups)
    assert [r[0] for r in results] == [[CLB, TG], [TG], [CLB, TG], [TG]]
    assert cloud.scans == 1


async def test_narrowed_scans_are_cached_apart_and_empty_ones_cost_nothing() -> None:
    cloud, clock = Cloud(), Clock()
    inv = inventory(cloud, clock)
    assert (await inv.targets_of("i-1", [CLB]))[0] == [CLB]
    assert (await inv.targets_of("i-1", None))[0] == [CLB, TG]
    assert (await inv.targets_of("i-1", []))[0] == []
    assert cloud.scans == 2


async def test_service_lookups_are_cached() -> None:
    cloud, clock = Cloud(), Clock()
    inv = inventory(cloud, clock)
    web = ServiceRef("shop", "web")
    assert await inv.behind_services([web]) == [LoadBalancerTarget(TARGET_GROUP, "arn:tg")]
    await inv.behind_services([web])
    assert cloud.service_lookups == 1
    assert await inv.behind_services([]) == []
    clock.now += 61
    await inv.behind_services([web])
    assert cloud.service_lookups == 2


def test_service_refs_keep_load_balanced_types() -> None:
    services = [
        {"metadata": {"namespace": "a", "name": "lb"}, "spec": {"type": "LoadBalancer"}},
        {"metadata": {"namespace": "a", "name": "np"}, "spec": {"type": "NodePort"}},
        {"metadata": {"namespace": "a", "name": "ip"}, "spec": {"type": "ClusterIP"}},
    ]
    assert service_refs(services) == [ServiceRef("a", "lb"), ServiceRef("a", "np")]
