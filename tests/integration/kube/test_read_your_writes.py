"""Read-your-writes: after a write through the manager's client returns, its caches show it.

The simulator holds watch events back (the `watch-delay` fault), so without the guarantee a
read right after a write would see the older version: the informer learns of the write late.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.manager import Manager
from nodeops.kube.resources import CONFIGMAPS
from nodeops.sim.server.app import SimServer
from tests.waiting import until

from .support import sample

NS = "default"


@pytest.fixture
async def manager(client: Client, sim: SimServer) -> AsyncIterator[Manager]:
    # Armed before the informers start, so their watches are the delayed ones.
    sim.faults.update("watch-delay=400ms@configmaps")
    mgr = Manager(client, metrics_addr="0", health_addr="0")
    yield mgr
    await mgr.informers.stop()


async def test_writes_are_visible_in_the_cache_when_they_return(
    client: Client, manager: Manager
) -> None:
    everything = manager.informers.informer(CONFIGMAPS)
    selected = manager.informers.informer(CONFIGMAPS, label_selector="app=a")
    manager.informers.start()
    assert await manager.informers.wait_synced(10)

    created = await client.create(
        CONFIGMAPS, {"metadata": {"name": "c", "labels": {"app": "a"}}, "data": {"v": "0"}}, NS
    )
    for inf in (everything, selected):
        cached = inf.get("c", NS)
        assert cached is not None
        assert cached["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    patched = await client.patch(
        CONFIGMAPS,
        "c",
        {"data": {"v": "1"}},
        NS,
        resource_version=created["metadata"]["resourceVersion"],
    )
    assert (everything.get("c", NS) or {})["data"] == {"v": "1"}
    assert (selected.get("c", NS) or {})["metadata"]["resourceVersion"] == (
        patched["metadata"]["resourceVersion"]
    )

    # Out of the selector: the selected cache has dropped it by the time the patch returns.
    await client.patch(CONFIGMAPS, "c", {"metadata": {"labels": {"app": "b"}}}, NS)
    assert selected.get("c", NS) is None
    assert (everything.get("c", NS) or {})["metadata"]["labels"] == {"app": "b"}

    # A delete answered with a Status: gone from the cache when the delete returns.
    await client.delete(CONFIGMAPS, "c", NS)
    assert everything.get("c", NS) is None

    # A finalizer holds the object: the delete returns it, and the cache shows the deletion.
    await client.create(CONFIGMAPS, {"metadata": {"name": "held", "finalizers": ["x/y"]}}, NS)
    await client.delete(CONFIGMAPS, "held", NS)
    assert (everything.get("held", NS) or {})["metadata"].get("deletionTimestamp")


async def test_a_cache_that_does_not_catch_up_fails_the_write_loudly(
    client: Client, sim: SimServer
) -> None:
    mgr = Manager(client, metrics_addr="0", health_addr="0", read_your_writes_timeout=0.5)
    cms = mgr.informers.informer(CONFIGMAPS)
    cms.watch_timeout = (1, 1)  # the server ends each watch after a second
    mgr.informers.start()
    try:
        assert await mgr.informers.wait_synced(10)
        # From the next watch on, events arrive long after the test.
        restarts = _watch_restarts()
        sim.faults.update("watch-delay=30s@configmaps")
        await until(lambda: _restarted_since(restarts), what="a new watch")
        with pytest.raises(errors.CacheLagging, match="configmaps 'late'"):
            await client.create(CONFIGMAPS, {"metadata": {"name": "late"}}, NS)
        # The write itself happened; only the cache is behind, as a write by anyone else is.
        assert (await client.get(CONFIGMAPS, "late", NS))["metadata"]["name"] == "late"
        async with Client(sim.url, token=sim.admin_token, qps=0) as other:
            await other.create(CONFIGMAPS, {"metadata": {"name": "theirs"}}, NS)
        assert cms.get("theirs", NS) is None  # nobody waited for that one
    finally:
        await mgr.informers.stop()


def _watch_restarts() -> float:
    return sample("nodeops_informer_watch_restarts_total", resource="configmaps", reason="timeout")


async def _restarted_since(count: float) -> bool:
    return _watch_restarts() > count
