"""Objects loaded before the simulated cluster's control loops start (`SimOptions.populate`):
what a rehearsal's copy of a live cluster is loaded through."""

from __future__ import annotations

import asyncio
from typing import Any

from nodeops.sim import objects
from nodeops.sim.serve import SimCluster, SimOptions

REPLICAS = 150


def _load(sim: SimCluster) -> None:
    now = sim.clock.timestamp()
    rs = sim.server.create(objects.make_replicaset("web", "default", replicas=REPLICAS, now=now))
    for i in range(REPLICAS):
        pod = objects.make_pod(f"web-{i}", "default", node_name=f"node-{i % 2}", owner=rs, now=now)
        sim.server.create(pod)


def _ready_replicas(sim: SimCluster) -> int:
    entry = sim.server.store.bucket(("apps", "replicasets")).get("default", "web")
    status: dict[str, Any] = (entry.decode() if entry is not None else {}).get("status") or {}
    return int(status.get("readyReplicas") or 0)


async def test_what_is_loaded_before_the_loops_start_is_listed_not_raced() -> None:
    """A ReplicaSet and its pods loaded before the loops start are what the loops list as they
    come up: its controller makes and deletes no pod. (Created once the loops run, the
    ReplicaSet can reach its controller before its pods do, and the pods are made again.)"""
    sim = SimCluster(SimOptions(nodes=2, time_scale=20.0, populate=_load))
    await sim.start()
    try:
        for _ in range(300):
            if _ready_replicas(sim) == REPLICAS:
                break
            await asyncio.sleep(0.05)
        assert _ready_replicas(sim) == REPLICAS
        calls = sim.server.stats.snapshot()["by_agent"]["nodeops-sim"]["by_verb_resource"]
        assert "create/pods" not in calls and "delete/pods" not in calls, calls
    finally:
        await sim.stop()
