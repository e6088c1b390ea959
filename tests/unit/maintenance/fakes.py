"""An in-memory ClusterView for unit tests of checks and triggers that read only nodes/pods."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nodeops.controllers.maintenance.keys import Keys
from nodeops.controllers.maintenance.plugins.base import PluginContext

Obj = dict[str, Any]
NOW = datetime(2026, 7, 1, 10, 0, tzinfo=UTC)  # a Wednesday


@dataclass
class MemoryCluster:
    node_list: list[Obj] = field(default_factory=list)
    pods: dict[str, list[Obj]] = field(default_factory=dict)
    keys: Keys = field(default_factory=Keys)

    @property
    def client(self) -> Any:
        raise AssertionError("not used by this check")

    @property
    def events(self) -> None:
        return None

    @property
    def http(self) -> Any:
        raise AssertionError("not used by this check")

    def nodes(self) -> list[Obj]:
        return self.node_list

    def nodes_in_state(self, state: str) -> list[Obj]:
        return [
            n
            for n in self.node_list
            if n["metadata"].get("labels", {}).get(self.keys.state) == state
        ]

    def node_count(self) -> int:
        return len(self.node_list)

    async def pods_on_node(self, node_name: str) -> list[Obj]:
        return self.pods.get(node_name, [])

    def drainer(self, options: Any) -> Any:
        raise AssertionError("not used")


def node(name: str, labels: dict[str, str] | None = None, **extra: Any) -> Obj:
    meta: Obj = {"name": name, "labels": dict(labels or {})}
    if "annotations" in extra:
        meta["annotations"] = extra.pop("annotations")
    return {"metadata": meta, **extra}


def context(
    target: Obj,
    cluster: MemoryCluster | None = None,
    *,
    profile: str = "p",
    state: str = "operational",
    now: datetime = NOW,
    transition: datetime = NOW,
) -> PluginContext:
    cluster = cluster or MemoryCluster([target])
    return PluginContext(
        node=target,
        original=target,
        profile=profile,
        state=state,
        transition=transition,
        in_maintenance=False,
        now=now,
        keys=cluster.keys,
        cluster=cluster,
    )
