"""Records kept from watches when the API server is not the simulator's own.

`ClusterRecord` (and the rehearsal's roll recorder) normally see every write in the simulated
server's store; attached to another server they see what a watch delivers instead: every change
of the resources they follow, in order per resource, which is what their figures are made of.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nodeops.sim.cluster.apiclient import (
    DEPLOYMENTS,
    PDBS,
    PODS,
    RELISTED,
    ApiClient,
    Resource,
)
from nodeops.sim.record import ClusterRecord

__all__ = ["Observe", "RecordFeed", "WatchFeed"]

Key = tuple[str, str]
Observe = Callable[[Key, str, Mapping[str, Any]], None]
"""`observe(key, event, obj)`: one change; `key` is the resource's (group, plural), `event` the
watch event type (ADDED, MODIFIED, DELETED)."""


class WatchFeed:
    """Lists `resources` into `observe` (in that order, so later ones are judged against what
    the earlier ones hold), then keeps it current from watches until stopped. A watch that
    expired comes back as a full list: its objects are reported MODIFIED, and the ones it no
    longer holds, deleted in the gap, DELETED from the last copy seen."""

    def __init__(
        self,
        client: ApiClient,
        observe: Observe,
        resources: Sequence[Resource],
        *,
        label_selector: str | None = None,
        name: str = "feed",
    ) -> None:
        self.client = client
        self._observe = observe
        self._resources = tuple(resources)
        self._selector = label_selector
        self._name = name
        self._last: dict[Key, dict[Key, Mapping[str, Any]]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for resource in self._resources:
            listed = await self.client.list(resource, label_selector=self._selector)
            for obj in listed.items:
                self._report(resource, "ADDED", obj)
            self._tasks.append(
                asyncio.create_task(
                    self._follow(resource, listed.resource_version),
                    name=f"{self._name}-{resource.plural}",
                )
            )

    async def _follow(self, resource: Resource, resource_version: str) -> None:
        watch = self.client.watch(
            resource, resource_version=resource_version, label_selector=self._selector
        )
        async for event in watch:
            if event.type == RELISTED:
                items = event.items or []
                fresh = {_object_key(obj) for obj in items}
                for key, last in list(self._last.get(_resource_key(resource), {}).items()):
                    if key not in fresh:
                        self._report(resource, "DELETED", last)
                for obj in items:
                    self._report(resource, "MODIFIED", obj)
                continue
            self._report(resource, event.type, event.object)

    def _report(self, resource: Resource, event: str, obj: Mapping[str, Any]) -> None:
        kind = _resource_key(resource)
        last = self._last.setdefault(kind, {})
        if event == "DELETED":
            last.pop(_object_key(obj), None)
        else:
            last[_object_key(obj)] = obj
        self._observe(kind, event, obj)

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.client.close()


class RecordFeed(WatchFeed):
    """Budgets, pods and Deployments into a `ClusterRecord`."""

    def __init__(self, record: ClusterRecord, client_factory: Callable[[str], ApiClient]) -> None:
        super().__init__(
            client_factory("record"), record.observe, (PDBS, PODS, DEPLOYMENTS), name="record"
        )


def _resource_key(resource: Resource) -> Key:
    return (resource.group, resource.plural)


def _object_key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
