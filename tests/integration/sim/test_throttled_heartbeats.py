"""A throttled kubelet at a fast clock: the server's Retry-After is waited in the cluster's time.

At 30x a kubelet that waited a 2 s Retry-After in wall seconds would stay silent for a simulated
minute, past its 40 s node grace, and the node lifecycle controller would mark a healthy node
Unknown: a roll under API faults would then see nodes flap that a real cluster keeps Ready.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nodeops.sim import objects
from nodeops.sim.clock import Clock
from nodeops.sim.cluster import ClusterLoops
from nodeops.sim.cluster.apiclient import NODES, ApiClient
from nodeops.sim.server.app import SimServer
from tests.waiting import until

NODE_NAMES = ("node-0", "node-1", "node-2")


def _ready(node: dict[str, object]) -> str:
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for c in conditions or []:
        if c.get("type") == "Ready":
            return str(c.get("status"))
    return ""


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[SimServer, ApiClient, Clock]]:
    clock = Clock(30.0)
    server = SimServer(clock=clock, bookmark_interval=0.2)
    await server.start()
    client = ApiClient(server.url, server.admin_token, component="test")
    loops = ClusterLoops(server.url, server.admin_token, clock, kubelet_start_seconds=0.5)
    try:
        for name in NODE_NAMES:
            node = objects.make_node(name, now=clock.now())
            await client.create(NODES, objects.for_create(node))
        await loops.start()
        yield server, client, clock
    finally:
        await loops.stop()
        await client.close()
        await server.stop()


async def test_nodes_stay_ready_while_their_lease_renewals_are_throttled(
    cluster: tuple[SimServer, ApiClient, Clock],
) -> None:
    server, client, clock = cluster

    async def all_ready() -> bool:
        nodes = (await client.list(NODES)).items
        return len(nodes) == len(NODE_NAMES) and all(_ready(n) == "True" for n in nodes)

    await until(all_ready, what="every node Ready")
    server.faults.update("error=429:0.3@update/leases:retry-after=2")
    started = clock.now()
    states: set[str] = set()

    async def two_graces_throttled() -> bool:
        states.update(_ready(n) for n in (await client.list(NODES)).items)
        waited = (clock.now() - started).total_seconds()
        return server.faults.counts()["error-429"] >= 6 and waited >= 80

    await until(two_graces_throttled, what="renewals throttled for two node graces")
    assert states == {"True"}
