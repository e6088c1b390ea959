"""The informer's cache must equal the server's state whatever happens to its watches."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from nodeops.kube.client import Client
from nodeops.kube.errors import ApiError
from nodeops.kube.informer import Informer, index_pods_by_node
from nodeops.kube.resources import CONFIGMAPS, PODS
from nodeops.sim.server.app import SimServer


def _pod(name: str, node: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": labels or {},
            "managedFields": [{"manager": "x", "operation": "Update"}],
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx:1.27"}]},
    }


async def _server_state(client: Client, res: Any) -> dict[str, str]:
    items, _ = await client.list(res)
    return {
        f"{i['metadata'].get('namespace')}/{i['metadata']['name']}": i["metadata"][
            "resourceVersion"
        ]
        for i in items
    }


def _cache_state(inf: Informer) -> dict[str, str]:
    return {
        f"{o['metadata'].get('namespace')}/{o['metadata']['name']}": o["metadata"][
            "resourceVersion"
        ]
        for o in inf.objects()
    }


async def _converged(client: Client, inf: Informer, res: Any, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            server = await _server_state(client, res)
        except ApiError:
            server = None
        if server is not None and server == _cache_state(inf):
            return
        if asyncio.get_running_loop().time() > deadline:
            assert server == _cache_state(inf)
        await asyncio.sleep(0.05)


async def test_sync_indexes_and_handlers(client: Client, sim: SimServer) -> None:
    for i in range(30):
        await client.create(PODS, _pod(f"p{i}", f"n{i % 3}"), "default")
    inf = Informer(client, PODS, indexers={"node": index_pods_by_node}, page_size=7)
    adds: list[str] = []
    updates: list[tuple[str, str]] = []
    deletes: list[str] = []
    inf.add_handler(
        on_add=lambda o: adds.append(o["metadata"]["name"]),
        on_update=lambda old, new: updates.append(
            (old["metadata"]["labels"].get("v", ""), new["metadata"]["labels"].get("v", ""))
        ),
        on_delete=lambda o: deletes.append(o["metadata"]["name"]),
    )
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        assert len(inf) == 30 and len(adds) == 30
        assert {p["metadata"]["name"] for p in inf.by_index("node", "n1")} == {
            f"p{i}" for i in range(30) if i % 3 == 1
        }
        cached = inf.get("p0", "default")
        assert cached is not None and "managedFields" not in cached["metadata"]
        await client.patch(PODS, "p0", {"metadata": {"labels": {"v": "2"}}}, "default")
        await client.delete(PODS, "p1", "default", grace_period=0)
        await _converged(client, inf, PODS)
        assert ("", "2") in updates and "p1" in deletes
        assert "p1" not in {p["metadata"]["name"] for p in inf.by_index("node", "n1")}
    finally:
        await inf.stop()


@pytest.mark.parametrize(
    "faults",
    [
        "watch-cut=events:3@configmaps",
        "watch-cut=seconds:0.3@configmaps",
        "watch-expire=1@configmaps; watch-cut=events:5@configmaps",
        "error=500:0.05@*/configmaps; error=429:0.02@*/configmaps:retry-after=1",
    ],
)
async def test_cache_equals_server_under_faults(
    client: Client, sim: SimServer, faults: str
) -> None:
    inf = Informer(client, CONFIGMAPS, page_size=10)
    inf.backoff.initial = 0.01
    inf.backoff.maximum = 0.1
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        sim.faults.update(faults, seed=7)
        rng = random.Random(3)
        names = [f"cm{i}" for i in range(40)]
        for step in range(300):
            name = rng.choice(names)
            try:
                if rng.random() < 0.5:
                    await client.create(
                        CONFIGMAPS,
                        {"metadata": {"name": name}, "data": {"s": str(step)}},
                        "default",
                    )
                elif rng.random() < 0.7:
                    await client.patch(CONFIGMAPS, name, {"data": {"s": str(step)}}, "default")
                else:
                    await client.delete(CONFIGMAPS, name, "default")
            except ApiError:
                pass  # conflicts, missing objects and injected errors are all expected here
        sim.faults.update("")
        await _converged(client, inf, CONFIGMAPS)
    finally:
        await inf.stop()
