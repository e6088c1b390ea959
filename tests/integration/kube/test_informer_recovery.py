"""Recovery of an informer from failures that pass: the cache moves again as soon as it can.

Each test makes any wait the old behaviour would have chosen far longer than the test's
bounded wait, so it fails without the behaviour instead of merely running slower.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.informer import Informer
from nodeops.kube.manager import Manager
from nodeops.kube.resources import CONFIGMAPS
from nodeops.sim.server.app import SimServer
from tests.waiting import until

NS = "default"


@pytest.fixture
async def informer(client: Client) -> AsyncIterator[Informer]:
    # Watches end every second, so a fault armed now meets the next watch soon.
    inf = Informer(client, CONFIGMAPS, watch_timeout=(1, 1))
    inf.start()
    await asyncio.wait_for(inf.wait_synced(), 10)
    try:
        yield inf
    finally:
        await inf.stop()


async def _failed(inf: Informer, times: int = 1) -> None:
    async def failed() -> bool:
        return inf.failures >= times

    await until(failed, what=f"{times} list/watch failures")


async def test_a_429_is_retried_after_its_retry_after_not_after_the_backoff(
    client: Client, sim: SimServer, informer: Informer
) -> None:
    informer.backoff.initial = 1000.0  # a backoff step would outlast the test
    sim.faults.update("error=429@watch/configmaps:retry-after=1")
    await _failed(informer)
    retry_in = informer.retry_in
    assert retry_in is not None and retry_in <= 1.0
    sim.faults.update("")
    await client.create(CONFIGMAPS, {"metadata": {"name": "after"}}, NS)

    async def shown() -> bool:
        return informer.get("after", NS) is not None

    await until(shown, what="the write in the cache after the Retry-After")
    assert informer.failures == 0


async def test_a_failure_after_a_recovery_starts_a_new_streak(
    sim: SimServer, informer: Informer
) -> None:
    informer.backoff.initial = 0.05
    informer.backoff.maximum = 1000.0
    sim.faults.update("error=500@watch/configmaps")
    await _failed(informer, 4)  # a streak of 0.05, 0.1, 0.2, 0.4 s (each up to twice that)
    sim.faults.update("")

    async def recovered() -> bool:
        return informer.failures == 0 and informer.retry_in is None

    await until(recovered, what="the watch running again")
    assert not informer.backoff.streak

    sim.faults.update("error=500@watch/configmaps")
    await _failed(informer)
    retry_in = informer.retry_in
    # The first step of a new streak, not the fifth step of the old one (0.8-1.6 s).
    assert retry_in is not None and retry_in <= 0.1


async def test_a_broken_watch_list_that_made_progress_is_retried_at_once(
    client: Client, sim: SimServer
) -> None:
    for i in range(10):
        await client.create(CONFIGMAPS, {"metadata": {"name": f"cm{i}"}}, NS)
    # Every watch (the watch-list's initial events included) ends after 4 events.
    sim.faults.update("watch-cut=events:4@configmaps")
    inf = Informer(client, CONFIGMAPS)
    inf.backoff.initial = 1000.0  # a backoff step would outlast the test
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        assert len(inf) == 10
        assert inf.synced_by == "list"  # after the watch-lists that kept breaking
    finally:
        await inf.stop()


@pytest.fixture
async def manager(client: Client) -> AsyncIterator[Manager]:
    mgr = Manager(client, metrics_addr="0", health_addr="0", read_your_writes_timeout=30)
    yield mgr
    await mgr.informers.stop()


async def test_a_write_waiting_on_a_broken_watch_fails_at_once_saying_why(
    client: Client, sim: SimServer, manager: Manager
) -> None:
    inf = manager.informers.informer(CONFIGMAPS)
    inf.watch_timeout = (1, 1)
    inf.backoff.initial = 1000.0  # the next attempt comes long after the write's 30 s
    manager.informers.start()
    assert await manager.informers.wait_synced(10)
    sim.faults.update("error=500@watch/configmaps")
    await _failed(inf)

    with pytest.raises(errors.CacheLagging, match="list/watch failed") as raised:
        await client.create(CONFIGMAPS, {"metadata": {"name": "w"}}, NS)
    assert "next attempt is in" in str(raised.value)


async def test_a_write_waits_through_a_short_retry_and_returns_visible(
    client: Client, sim: SimServer, manager: Manager
) -> None:
    inf = manager.informers.informer(CONFIGMAPS)
    inf.watch_timeout = (1, 1)
    inf.backoff.initial = 1000.0
    manager.informers.start()
    assert await manager.informers.wait_synced(10)
    sim.faults.update("error=429@watch/configmaps:retry-after=1")
    await _failed(inf)
    sim.faults.update("")
    await client.create(CONFIGMAPS, {"metadata": {"name": "w"}}, NS)
    assert inf.get("w", NS) is not None
