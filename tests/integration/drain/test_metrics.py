"""What an SRE sees of a drain a PodDisruptionBudget blocks, scraped from the manager's registry:
the node's pods waiting on the budget and how long the drain has run, per controller; both go
once the budget lets the drain finish. Through `Drainer.step` in a controller (labelled, unnamed,
with the reconciling controller's name) and through `Drainer.drain` (named by its builder)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nodeops.drain.engine import Drainer
from nodeops.drain.options import DrainOptions
from nodeops.kube import Controller, Manager
from nodeops.kube import objects as o
from nodeops.kube.metrics import REGISTRY
from nodeops.kube.resources import NODES, PDBS
from tests.waiting import until

from .test_reconciler import LABEL, PROGRESS, NodeDrainReconciler, manager_running
from .workload import NS, create_on, deployment, pdb, pods_on, settle_pdb

WAITING = "nodeops_drain_pods_waiting_on_budget"
IN_PROGRESS = "nodeops_drain_in_progress"
OLDEST = "nodeops_drain_oldest_in_progress_seconds"
EVICTIONS = "nodeops_drain_evictions_total"


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


async def blocked_workload(client: Any) -> None:
    """Two pods on node-0 under a budget that allows no disruption."""
    await create_on(client, "node-0", deployment("db", 2))
    await client.create(PDBS, pdb("db", "db", minAvailable=2), NS)
    await settle_pdb(client, "db", 2)


async def test_a_drain_behind_a_budget_shows_its_waiting_pods_and_age_until_it_completes(
    cluster: Any,
) -> None:
    _, client, _ = cluster
    controller = "budget-metrics"
    await blocked_workload(client)
    evicted_before = sample(EVICTIONS, controller=controller, result="evicted") or 0.0
    manager = Manager(client, metrics_addr="0", health_addr="0")
    reconciler = NodeDrainReconciler(manager, DrainOptions())  # unnamed: the controller's name
    manager.add(Controller(controller, reconciler).for_(reconciler.nodes))
    async with manager_running(manager):
        await client.patch(NODES, "node-0", {"metadata": {"labels": {LABEL: "true"}}})

        async def waiting_and_aging() -> bool:
            age = sample(OLDEST, controller=controller)
            return (
                sample(WAITING, controller=controller, node="node-0") == 2
                and sample(IN_PROGRESS, controller=controller) == 1
                and age is not None
                and age > 0
            )

        await until(waiting_and_aging, timeout=60, what="two pods waiting and the drain aging")
        assert len(await pods_on(client, "node-0")) == 2  # the budget held: nothing evicted

        # The budget allows disruptions again: the drain finishes and its series go.
        await client.patch(PDBS, "db", {"spec": {"minAvailable": 0}}, NS)

        async def drained() -> bool:
            node = await client.get(NODES, "node-0")
            return o.annotations_of(node).get(PROGRESS, "").startswith("Drain completed")

        await until(drained, timeout=90, what="node-0 drained")
        assert sample(WAITING, controller=controller, node="node-0") is None
        assert sample(IN_PROGRESS, controller=controller) is None
        assert sample(OLDEST, controller=controller) is None
    # Both pods were evicted (one whose answer a pass stopped waiting for is not counted).
    evicted = (sample(EVICTIONS, controller=controller, result="evicted") or 0.0) - evicted_before
    assert 1 <= evicted <= 2


async def test_a_drain_to_completion_is_labelled_by_its_builder(cluster: Any) -> None:
    _, client, _ = cluster
    controller = "budget-metrics-cli"
    await blocked_workload(client)
    drainer = Drainer(client, DrainOptions(), controller=controller)
    task = asyncio.create_task(drainer.drain("node-0"))
    try:

        async def waiting() -> bool:
            return sample(WAITING, controller=controller, node="node-0") == 2

        await until(waiting, timeout=60, what="two pods waiting on the budget")
        assert sample(IN_PROGRESS, controller=controller) == 1
        await client.delete(PDBS, "db", NS)
        result = await asyncio.wait_for(task, 90)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    assert len(result.evicted) == 2
    assert sample(WAITING, controller=controller, node="node-0") is None
    assert sample(IN_PROGRESS, controller=controller) is None


async def test_evictions_are_counted_by_the_api_servers_answer(cluster: Any) -> None:
    """A 429 is a refusal by a budget (its pod waits on it), a 500 a failure (it does not);
    both are retried, and the pods evicted once the server lets them go."""
    sim, client, _ = cluster
    controller = "budget-metrics-answers"
    await create_on(client, "node-0", deployment("web", 2))
    drainer = Drainer(client, DrainOptions(), controller=controller)

    def count(result: str) -> float:
        return sample(EVICTIONS, controller=controller, result=result) or 0.0

    sim.server.faults.update("error=429@create/pods/eviction")
    task = asyncio.create_task(drainer.drain("node-0"))
    try:

        async def refused() -> bool:
            waiting = sample(WAITING, controller=controller, node="node-0")
            return count("refused") >= 2 and waiting == 2

        await until(refused, timeout=60, what="evictions refused, both pods waiting")
        sim.server.faults.update("error=500@create/pods/eviction")

        async def failed() -> bool:
            waiting = sample(WAITING, controller=controller, node="node-0")
            return count("failed") >= 2 and waiting == 0

        await until(failed, timeout=60, what="evictions failing, no pod waiting on a budget")
        sim.server.faults.update(None)
        result = await asyncio.wait_for(task, 90)
    finally:
        sim.server.faults.update(None)
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    assert len(result.evicted) == 2
    assert count("evicted") == 2
    assert sample(IN_PROGRESS, controller=controller) is None
