"""Fixtures of the drain tests: a simulated cluster (with a budget referee), and the mode."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nodeops.kube.client import Client
from nodeops.sim.serve import SimCluster, SimOptions

from .budget_monitor import BudgetMonitor
from .runner import MODES


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[SimCluster, Client, BudgetMonitor]]:
    sim = SimCluster(SimOptions(nodes=3, instant=True, time_scale=20.0))
    monitor = BudgetMonitor(sim.server)
    await sim.start()
    client = Client(sim.server.url, token=sim.server.admin_token, qps=0)
    try:
        yield sim, client, monitor
    finally:
        await client.close()
        await sim.stop()
        monitor.assert_never_violated()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def realtime() -> AsyncIterator[tuple[SimCluster, Client]]:
    """A cluster on wall-clock time, for checks that compare deletion timestamps with now."""
    sim = SimCluster(SimOptions(nodes=2, instant=False, time_scale=1.0))
    await sim.start()
    client = Client(sim.server.url, token=sim.server.admin_token, qps=0)
    try:
        yield sim, client
    finally:
        await client.close()
        await sim.stop()
