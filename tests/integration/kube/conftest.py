"""Fixtures: the simulated API server and a runtime client talking to it over loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nodeops.kube.client import Client
from nodeops.sim.clock import Clock
from nodeops.sim.server.app import SimServer


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    srv = SimServer(clock=Clock(1.0), bookmark_interval=0.2)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def client(sim: SimServer) -> AsyncIterator[Client]:
    async with Client(sim.url, token=sim.admin_token, qps=0, timeout=10) as c:
        yield c
