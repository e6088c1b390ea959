"""A roll recorder fed by watches, as the benchmark feeds it on a real control plane, against
one fed by the simulator's store, on the same roll: both must tell the same story."""

from __future__ import annotations

from typing import Any

from bench.attached_world import roll_feed
from bench.rehearse import nodegroup, roll_and_record, scenario
from nodeops.controllers.cycling.resources import NODEGROUPS
from nodeops.demo.world import World, WorldOptions
from nodeops.kube.clientconfig import CLIENT_QPS
from nodeops.rehearse.rehearsal import OPERATOR_DEFAULTS, outcome
from nodeops.rehearse.timings import Workloads
from nodeops.rehearse.watch import RollRecorder
from nodeops.sim.cluster.apiclient import ApiClient
from nodeops.sim.warp import run


async def _roll_watched_twice() -> tuple[dict[str, Any], dict[str, Any]]:
    sc = scenario(4, 6, seed=0)
    world = World(
        WorldOptions(
            scenario=sc,
            time_scale=1.0,
            seed=0,
            controllers=False,
            settings=dict(OPERATOR_DEFAULTS),
            manager_qps=CLIENT_QPS,
        )
    )
    by_store = RollRecorder(world.sim.server, world.clock, Workloads(()))
    by_watch = RollRecorder(None, world.clock, Workloads(()))
    await world.start(wait_ready=120)
    feed = roll_feed(
        ApiClient(world.sim.server.url, world.sim.server.admin_token, component="feed"), by_watch
    )
    try:
        assert world.client is not None
        group = await world.client.create(NODEGROUPS, nodegroup(2))
        await feed.start()
        report = await roll_and_record(world, sc, group, by_store, also=[by_watch])
    finally:
        await feed.stop()
        await world.stop()
    names = {r["name"]: r["nodegroup"] for r in report["requests"]}
    requests = [{"spec": {"cycleSettings": {"drainDeadline": "5m"}}}]
    watched = outcome(by_watch, names, requests, {}).as_dict()
    return report, watched


def test_a_recorder_fed_by_watches_tells_the_roll_as_the_store_does() -> None:
    stored, watched = run(_roll_watched_twice(), work_takes_time=False)
    assert stored["predicted_seconds"] is not None
    assert watched["predicted_seconds"] == stored["predicted_seconds"]
    assert [
        (b["start_seconds"], b["end_seconds"], sorted(b["nodes"])) for b in watched["batches"]
    ] == [(b["start_seconds"], b["end_seconds"], sorted(b["nodes"])) for b in stored["batches"]]
    assert watched["budgets"] == stored["budgets"]
    assert any(b["budget"] == "shop/singleton" for b in stored["budgets"])
    assert watched["workloads"] == stored["workloads"]
    assert watched["pending"] == stored["pending"]
    assert len(stored["pending"]) == 2  # the pinned Deployment's pods, with the scheduler's reason
    assert all("didn't match" in p["reason"] for p in stored["pending"])
    assert watched["failures"] == stored["failures"]
