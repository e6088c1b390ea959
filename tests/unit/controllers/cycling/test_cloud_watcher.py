"""The cloud poller: requests woken on change, unchanged groups kept as they were, and a poll
that slows while nothing changes and speeds up again when something does."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from dataclasses import replace

from nodeops.controllers.cycling.cloud import QUIET_STRETCH, CloudWatcher, Providers
from nodeops.kube.controller import Request
from nodeops.providers.base import Instance, Lifecycle, NodeGroup


def _group(*states: Lifecycle) -> NodeGroup:
    instances = [
        Instance(
            id=f"i-{n}",
            provider_id=f"aws:///eu-west-1a/i-{n}",
            zone="eu-west-1a",
            lifecycle_state=state,
            healthy=True,
            launch_version="lt-1/1",
            out_of_date=False,
        )
        for n, state in enumerate(states)
    ]
    return NodeGroup(
        name="workers", desired=len(instances), min=0, max=10, instances=instances,
        launch_version="lt-1/1",
    )  # fmt: skip


class Cloud:
    """A node group provider whose group the test changes; it counts and times each describe."""

    def __init__(self) -> None:
        self.group = _group(Lifecycle.IN_SERVICE, Lifecycle.PENDING)
        self.calls: list[float] = []
        self.called = asyncio.Event()

    async def until_calls(self, n: int) -> None:
        while len(self.calls) < n:
            self.called.clear()
            await self.called.wait()

    async def describe_groups(self, names: Sequence[str]) -> list[NodeGroup]:
        self.calls.append(time.monotonic())
        self.called.set()
        # A new object at every call, equal or not, as a provider decoding an answer makes.
        return [replace(self.group, instances=list(self.group.instances))]

    async def detach_instance(self, group: str, instance_id: str) -> None: ...
    async def attach_instance(self, group: str, instance_id: str) -> None: ...
    async def terminate_instance(self, instance_id: str) -> None: ...
    async def close(self) -> None: ...


def _gaps(calls: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(calls)]


async def test_an_unchanged_group_keeps_its_object_and_wakes_nobody() -> None:
    cloud = Cloud()
    woken: list[Request] = []
    watcher = CloudWatcher(Providers(lambda _: cloud, "sim"), on_change=woken.append)
    request = Request("roll", "nodeops-system")
    watcher.watch(request, "sim", ["workers"])
    first = (await watcher.describe("sim", ["workers"], max_age=0))["workers"]
    assert woken == [request]  # first seen
    again = (await watcher.describe("sim", ["workers"], max_age=0))["workers"]
    assert again is first
    assert woken == [request]
    cloud.group = _group(Lifecycle.IN_SERVICE, Lifecycle.IN_SERVICE)
    changed = (await watcher.describe("sim", ["workers"], max_age=0))["workers"]
    assert changed is not first and changed.instances[1].in_service
    assert woken == [request, request]


async def test_the_poll_stretches_while_nothing_changes_and_not_after_a_change() -> None:
    interval = 0.1
    cloud = Cloud()
    watcher = CloudWatcher(Providers(lambda _: cloud, "sim"), interval=interval)
    watcher.watch(Request("roll", "nodeops-system"), "sim", ["workers"])
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        await asyncio.wait_for(cloud.until_calls(6), 30)
        quiet = _gaps(cloud.calls)
        # A loaded machine only lengthens gaps: the lower bounds hold on any machine.
        assert all(gap >= QUIET_STRETCH * interval * 0.9 for gap in quiet[3:]), quiet
        # A change is polled at the interval again, so the next one is seen soon.
        cloud.group = _group(Lifecycle.IN_SERVICE, Lifecycle.IN_SERVICE)
        seen = len(cloud.calls)
        await asyncio.wait_for(cloud.until_calls(seen + 3), 30)
        after = _gaps(cloud.calls[seen:])
        assert after[0] < QUIET_STRETCH * interval * 0.9, after
    finally:
        stop.set()
        await task


def test_a_snapshot_ages_on_the_loops_clock() -> None:
    """A rehearsal's loop skips its idle waits: an answer ten simulated minutes old is stale
    there although hardly any wall time passed, so its age is read on the loop's clock."""
    from nodeops.sim import warp

    async def roll() -> int:
        cloud = Cloud()
        watcher = CloudWatcher(Providers(lambda _: cloud, "sim"), on_change=lambda _: None)
        await watcher.describe("sim", ["workers"], max_age=30)
        await watcher.describe("sim", ["workers"], max_age=30)  # fresh: not asked again
        await asyncio.sleep(600)  # skipped, not waited
        await watcher.describe("sim", ["workers"], max_age=30)
        return len(cloud.calls)

    started = time.monotonic()
    assert warp.run(roll()) == 2
    assert time.monotonic() - started < 30
