"""`Drainer.step` inside a real controller: a manager, its shared informers, requeues.

The reconciler drains every node labelled `example.nodeops.dev/drain=true`, keeping when the
drain started in an annotation (so a restarted controller resumes with the same start) and
requeueing until the pass reports complete. Two nodes are drained at once under one
PodDisruptionBudget that spans both: one `SharedInformers` serves both reconciles, so its budget
tokens are shared and no eviction is ever refused. The same holds for two controllers of one
manager, each draining its own node: `SharedInformers.for_manager` gives both the same tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from nodeops.drain.engine import Drainer
from nodeops.drain.options import DrainOptions
from nodeops.drain.sources import SharedInformers
from nodeops.kube import Controller, Manager, ReconcileContext, Request, Result
from nodeops.kube import objects as o
from nodeops.kube.resources import NODES, PDBS
from tests.waiting import until

from .workload import (
    NS,
    create_on,
    deployment,
    pdb,
    pods_on,
    running,
    settle_pdb,
)

LABEL = "example.nodeops.dev/drain"
STARTED = "example.nodeops.dev/drain-started"
PROGRESS = "example.nodeops.dev/drain-progress"


class NodeDrainReconciler:
    """Drains labelled nodes, one `step` per reconcile."""

    def __init__(self, manager: Manager, options: DrainOptions, label: str = LABEL) -> None:
        self.label = label
        self.client = manager.client
        self.nodes = manager.informers.informer(NODES)
        sources = SharedInformers.for_manager(manager)
        self.drainer = Drainer(manager.client, options, sources=sources, events=manager.events)
        self.passes = 0

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        node = self.nodes.get(request.name)
        if node is None or o.labels(node).get(self.label) != "true":
            return None
        started = o.parse_time(o.annotations_of(node).get(STARTED))
        if started is None:
            # Intent first: the start is stored before anything is done to the node.
            started = o.now()
            patch = {"metadata": {"annotations": {STARTED: o.format_time(started)}}}
            await self.client.patch(
                NODES, request.name, patch, resource_version=o.meta(node)["resourceVersion"]
            )
        ctx.ensure_may_act(f"drain node {request.name}")
        progress = await self.drainer.step(request.name, started)
        self.passes += 1
        summary = progress.message.splitlines()[0]
        if o.annotations_of(node).get(PROGRESS) != summary:
            patch = {"metadata": {"annotations": {PROGRESS: summary}}}
            await self.client.patch(NODES, request.name, patch)
        return None if progress.complete else Result(requeue_after=0.2)


@contextlib.asynccontextmanager
async def manager_running(manager: Manager) -> AsyncIterator[None]:
    task = asyncio.create_task(manager.run())
    try:
        yield
    finally:
        manager.stop()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 30)


async def test_a_controller_drains_two_nodes_at_once_under_one_budget(cluster: Any) -> None:
    sim, client, monitor = cluster
    await create_on(client, "node-0", deployment("a", 3, labels={"tier": "web"}))
    await create_on(client, "node-1", deployment("b", 3, labels={"tier": "web"}))
    web = pdb("web", "a", maxUnavailable=1)
    web["spec"]["selector"] = {"matchLabels": {"tier": "web"}}
    await client.create(PDBS, web, NS)
    await settle_pdb(client, "web", 6)
    for app in ("a", "b"):
        monitor.watch(app, min_available=2)  # a and b together must keep 5 of 6: each >= 2
    manager = Manager(client, metrics_addr="0", health_addr="0")
    reconciler = NodeDrainReconciler(manager, DrainOptions())
    manager.add(
        Controller("node-drain", reconciler, max_concurrent_reconciles=2).for_(reconciler.nodes)
    )
    sim.server.stats.reset()
    async with manager_running(manager):
        for name in ("node-0", "node-1"):
            await client.patch(NODES, name, {"metadata": {"labels": {LABEL: "true"}}})

        async def both_drained() -> bool:
            nodes = [await client.get(NODES, n) for n in ("node-0", "node-1")]
            return all(
                o.annotations_of(n).get(PROGRESS, "").startswith("Drain completed") for n in nodes
            )

        await until(both_drained, timeout=90, what="both nodes drained")
    for name in ("node-0", "node-1"):
        assert await pods_on(client, name) == []
        node = await client.get(NODES, name)
        assert node["spec"]["unschedulable"] is True
    await running(client, "a", 3)
    await running(client, "b", 3)
    refused = (sim.server.stats.snapshot()["by_code"].get("429") or {}).get("requests", 0)
    assert refused == 0
    assert reconciler.passes >= 2


async def test_two_controllers_of_one_manager_share_the_budget_tokens(cluster: Any) -> None:
    """Two controllers, each with its own `Drainer` made from `SharedInformers.for_manager`,
    drain a node each under one budget that allows a single disruption: had each its own
    tokens, both would spend the one disruption at once and the server would refuse one."""
    sim, client, monitor = cluster
    await create_on(client, "node-0", deployment("a", 3, labels={"tier": "web"}))
    await create_on(client, "node-1", deployment("b", 3, labels={"tier": "web"}))
    web = pdb("web", "a", maxUnavailable=1)
    web["spec"]["selector"] = {"matchLabels": {"tier": "web"}}
    await client.create(PDBS, web, NS)
    await settle_pdb(client, "web", 6)
    monitor.watch("web", min_available=5, label="tier")  # never two of the six down at once
    manager = Manager(client, metrics_addr="0", health_addr="0")
    first = NodeDrainReconciler(manager, DrainOptions(), label="example.nodeops.dev/first")
    second = NodeDrainReconciler(manager, DrainOptions(), label="example.nodeops.dev/second")
    assert first.drainer.sources is second.drainer.sources
    manager.add(Controller("first", first).for_(first.nodes))
    manager.add(Controller("second", second).for_(second.nodes))
    sim.server.stats.reset()
    async with manager_running(manager):
        # One write labels both nodes for their controllers, so both drains start together.
        await asyncio.gather(
            client.patch(NODES, "node-0", {"metadata": {"labels": {first.label: "true"}}}),
            client.patch(NODES, "node-1", {"metadata": {"labels": {second.label: "true"}}}),
        )

        async def both_drained() -> bool:
            nodes = [await client.get(NODES, n) for n in ("node-0", "node-1")]
            return all(
                o.annotations_of(n).get(PROGRESS, "").startswith("Drain completed") for n in nodes
            )

        await until(both_drained, timeout=90, what="both nodes drained")
    for name in ("node-0", "node-1"):
        assert await pods_on(client, name) == []
    await running(client, "a", 3)
    await running(client, "b", 3)
    assert monitor.evictions["web"] == 6
    refused = (sim.server.stats.snapshot()["by_code"].get("429") or {}).get("requests", 0)
    assert refused == 0
