"""Recording a node's step against the simulated API server: written before the step is taken,
and never over a node that changed since it was read."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from enum import StrEnum

import pytest

from nodeops.controllers.kit import NodeProgress, record_step
from nodeops.kube import Client, errors
from nodeops.kube import objects as o
from nodeops.kube.resources import NODES
from nodeops.sim.serve import SimCluster, SimOptions

KEY = "example.com/progress"
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Step(StrEnum):
    FIRST = "First"
    SECOND = "Second"


class Progress(NodeProgress[Step]):
    __slots__ = ()
    steps = Step
    first = Step.FIRST
    what = "a test record"


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    sim = SimCluster(SimOptions(nodes=1, instant=True))
    await sim.start()
    client = Client(sim.server.url, token=sim.server.admin_token, qps=0)
    try:
        yield client
    finally:
        await client.close()
        await sim.stop()


async def test_the_step_is_stored_on_the_node_and_a_stale_read_is_refused(
    client: Client,
) -> None:
    (node,), _ = await client.list(NODES)
    begun = Progress.begin(T0, cordoned=True)
    written, advanced = await record_step(client, node, KEY, begun, Step.SECOND, T0 + timedelta(1))
    assert advanced == Progress(Step.SECOND, T0, T0 + timedelta(1), cordoned=True)
    stored = await client.get(NODES, o.name(node))
    assert Progress.of_node(stored, KEY) == advanced
    assert o.resource_version(written) == o.resource_version(stored)

    # `node` is the read from before the write: its resourceVersion is stale.
    with pytest.raises(errors.Conflict):
        await record_step(client, node, KEY, advanced, Step.FIRST, T0 + timedelta(2))
    assert Progress.of_node(await client.get(NODES, o.name(node)), KEY) == advanced
