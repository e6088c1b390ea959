"""The simulator's record of a roll, kept from watches when the API server is not its own.

`ClusterRecord` normally sees every write in the simulated server's store; attached to another
server it sees what a watch delivers instead: every change of budgets, pods and Deployments in
order per resource, which is what its figures are made of.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from nodeops.sim.cluster.apiclient import (
    DEPLOYMENTS,
    PDBS,
    PODS,
    RELISTED,
    ApiClient,
    Resource,
)
from nodeops.sim.record import ClusterRecord

__all__ = ["RecordFeed"]


class RecordFeed:
    """Lists budgets, pods and Deployments into `record` (in that order, so pods are judged
    against known budgets), then keeps it current from watches until stopped."""

    def __init__(self, record: ClusterRecord, client_factory: Callable[[str], ApiClient]) -> None:
        self.record = record
        self.client = client_factory("record")
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for resource in (PDBS, PODS, DEPLOYMENTS):
            listed = await self.client.list(resource)
            for obj in listed.items:
                self.record.observe((resource.group, resource.plural), "ADDED", obj)
            self._tasks.append(
                asyncio.create_task(
                    self._follow(resource, listed.resource_version),
                    name=f"record-{resource.plural}",
                )
            )

    async def _follow(self, resource: Resource, resource_version: str) -> None:
        key = (resource.group, resource.plural)
        async for event in self.client.watch(resource, resource_version=resource_version):
            if event.type == RELISTED:
                for obj in event.items or ():
                    self.record.observe(key, "MODIFIED", obj)
                continue
            self.record.observe(key, event.type, event.object)

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.client.close()
