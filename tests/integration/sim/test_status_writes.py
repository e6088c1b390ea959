"""A workload controller's status writes while its cache is behind its own last write.

The copy a rehearsal rolls reconciles a ReplicaSet again and again while its pods move; its
cache learns of the controller's own status write only when the watch event arrives. Written
against the stale cached object, the second write was refused (409) and the whole reconcile
queued again: a quarter of the ReplicaSet status writes of a 50-node rehearsal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodeops.common.resources import NAMESPACES, REPLICASETS
from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import ApiClient, Conflict
from nodeops.sim.cluster.podcontrol import WrittenStatuses, write_status
from nodeops.sim.server.app import SimServer

NS = "shop"


def _replicaset(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "app:1"}]},
            },
        },
    }


@pytest.fixture
async def client() -> AsyncIterator[ApiClient]:
    server = SimServer(clock=Clock(1.0))
    await server.start()
    api = ApiClient(server.url, server.admin_token, component="test")
    try:
        await api.create(NAMESPACES, {"metadata": {"name": NS}})
        yield api
    finally:
        await api.close()
        await server.stop()


async def test_a_second_write_against_the_stale_cache_goes_through(client: ApiClient) -> None:
    cached = await client.create(REPLICASETS, _replicaset("web"))
    written = WrittenStatuses()
    assert await write_status(client, REPLICASETS, cached, {"replicas": 2}, written)
    # The cache still shows the object as created: without the memory this write is refused.
    assert await write_status(client, REPLICASETS, cached, {"replicas": 3}, written)
    stored = await client.get(REPLICASETS, "web", NS)
    assert stored["status"] == {"replicas": 3}


async def test_without_the_memory_the_stale_write_is_refused(client: ApiClient) -> None:
    cached = await client.create(REPLICASETS, _replicaset("api"))
    assert await write_status(client, REPLICASETS, cached, {"replicas": 2})
    with pytest.raises(Conflict):
        await write_status(client, REPLICASETS, cached, {"replicas": 3})


async def test_a_status_already_written_is_not_written_again(client: ApiClient) -> None:
    cached = await client.create(REPLICASETS, _replicaset("db"))
    written = WrittenStatuses()
    assert await write_status(client, REPLICASETS, cached, {"replicas": 2}, written)
    rv = (await client.get(REPLICASETS, "db", NS))["metadata"]["resourceVersion"]
    assert not await write_status(client, REPLICASETS, cached, {"replicas": 2}, written)
    assert (await client.get(REPLICASETS, "db", NS))["metadata"]["resourceVersion"] == rv


async def test_another_writer_after_ours_still_conflicts(client: ApiClient) -> None:
    """The memory only stands in for the controller's own last write: a change made since by
    someone else is not papered over, the write is refused and the reconcile runs again."""
    cached = await client.create(REPLICASETS, _replicaset("cart"))
    written = WrittenStatuses()
    assert await write_status(client, REPLICASETS, cached, {"replicas": 2}, written)
    theirs = await client.get(REPLICASETS, "cart", NS)
    await client.update_status(REPLICASETS, {**theirs, "status": {"replicas": 1}})
    with pytest.raises(Conflict):
        await write_status(client, REPLICASETS, cached, {"replicas": 3}, written)


async def test_the_cache_catching_up_wins(client: ApiClient) -> None:
    cached = await client.create(REPLICASETS, _replicaset("pay"))
    written = WrittenStatuses()
    assert await write_status(client, REPLICASETS, cached, {"replicas": 2}, written)
    fresh = await client.get(REPLICASETS, "pay", NS)
    # Someone else's write the cache has already seen: newer than ours, so it is the base.
    fresh = await client.update_status(REPLICASETS, {**fresh, "status": {"replicas": 1}})
    assert written.newest(fresh) is fresh
    assert await write_status(client, REPLICASETS, fresh, {"replicas": 3}, written)
