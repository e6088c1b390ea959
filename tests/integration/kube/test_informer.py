"""The informer's cache must equal the server's state whatever happens to its watches."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from nodeops.kube.client import Client
from nodeops.kube.errors import ApiError, NotSynced
from nodeops.kube.informer import Informer, InformerFactory, index_pods_by_node
from nodeops.kube.resources import CONFIGMAPS, NODES, PODS
from nodeops.sim.server.app import SimServer
from tests.waiting import until


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


@pytest.mark.parametrize("watch_list", [True, False], ids=["watch-list", "paged"])
async def test_sync_indexes_and_handlers(client: Client, sim: SimServer, watch_list: bool) -> None:
    for i in range(30):
        await client.create(PODS, _pod(f"p{i}", f"n{i % 3}"), "default")
    inf = Informer(
        client, PODS, indexers={"node": index_pods_by_node}, page_size=7, watch_list=watch_list
    )
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
    ("faults", "watch_list"),
    [
        ("watch-cut=events:3@configmaps", True),
        ("watch-cut=seconds:0.3@configmaps", True),
        ("watch-expire=1@configmaps; watch-cut=events:5@configmaps", True),
        ("watch-expire=1@configmaps; watch-cut=events:5@configmaps", False),
        ("error=500:0.05@*/configmaps; error=429:0.02@*/configmaps:retry-after=1", True),
    ],
)
async def test_cache_equals_server_under_faults(
    client: Client, sim: SimServer, faults: str, watch_list: bool
) -> None:
    inf = Informer(client, CONFIGMAPS, page_size=10, watch_list=watch_list)
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


async def test_reads_before_sync_raise_instead_of_answering_empty(
    client: Client, sim: SimServer
) -> None:
    await client.create(CONFIGMAPS, {"metadata": {"name": "exists"}}, "default")
    sim.faults.update("error=500@list,watch/configmaps")  # the first sync keeps failing
    inf = Informer(client, CONFIGMAPS)
    inf.backoff.initial = 0.01
    inf.start()
    try:
        for read in (
            lambda: inf.get("exists", "default"),
            lambda: inf.objects(),
            lambda: inf.by_index("namespace", "default"),
            lambda: inf.index_keys("namespace", "default"),
            lambda: inf.index_count("namespace", "default"),
            lambda: inf.keys(),
        ):
            with pytest.raises(NotSynced, match="configmaps"):
                read()
        sim.faults.update("")
        await asyncio.wait_for(inf.wait_synced(), 10)
        assert inf.get("exists", "default") is not None
        for name in ("second", "third"):
            await client.create(CONFIGMAPS, {"metadata": {"name": name}}, "default")

        async def three() -> bool:
            return len(inf.index_keys("namespace", "default")) == 3

        await until(three, timeout=10, what="three configmaps cached")
        assert inf.index_count("namespace", "default") == 3
        # Keys are namespace/name here; one to leave out twice and one not indexed count once.
        gone = ["default/second", "default/second", "default/none"]
        assert inf.index_count("namespace", "default", excluding=gone) == 2
        assert inf.index_count("namespace", "kube-system") == 0
    finally:
        await inf.stop()


async def test_scope_mix_ups_are_errors(client: Client, sim: SimServer) -> None:
    with pytest.raises(ValueError, match="cluster-scoped"):
        Informer(client, NODES, namespace="default")
    with pytest.raises(ValueError, match="cluster-scoped"):
        InformerFactory(client).informer(NODES, namespace="default")
    nodes, pods = Informer(client, NODES), Informer(client, PODS)
    for inf in (nodes, pods):
        inf.start()
    try:
        await asyncio.wait_for(asyncio.gather(nodes.wait_synced(), pods.wait_synced()), 10)
        with pytest.raises(ValueError, match="cluster-scoped"):
            nodes.get("n1", "default")
        with pytest.raises(ValueError, match="cluster-scoped"):
            nodes.objects("default")
        with pytest.raises(ValueError, match="namespaced"):
            pods.get("p1")
        assert pods.get("p1", "default") is None
    finally:
        await nodes.stop()
        await pods.stop()


def _tag(obj: dict[str, Any]) -> dict[str, Any]:
    obj.setdefault("metadata", {}).setdefault("annotations", {})["seen-by"] = "transform"
    return obj


@pytest.mark.parametrize("watch_list", [True, False], ids=["watch-list", "paged"])
async def test_factory_transform_and_metadata_only(
    client: Client, sim: SimServer, watch_list: bool
) -> None:
    for i in range(3):
        await client.create(PODS, _pod(f"p{i}", f"n{i}", {"app": "a"}), "default")
    factory = InformerFactory(client, watch_list=watch_list)
    full = factory.informer(PODS)
    slim = factory.informer(
        PODS, metadata_only=("spec.nodeName",), indexers={"node": index_pods_by_node}
    )
    tagged = factory.informer(PODS, transform=_tag)
    assert len({id(full), id(slim), id(tagged)}) == 3  # different views, different informers
    assert factory.informer(PODS, metadata_only=["spec.nodeName"]) is slim
    factory.start()
    try:
        assert await factory.wait_synced(10)
        pod = slim.get("p1", "default")
        assert pod is not None
        assert set(pod) == {"apiVersion", "kind", "metadata", "spec"}
        assert pod["spec"] == {"nodeName": "n1"}
        assert pod["metadata"]["labels"] == {"app": "a"}
        assert [p["metadata"]["name"] for p in slim.by_index("node", "n2")] == ["p2"]
        assert "containers" in (full.get("p1", "default") or {})["spec"]
        seen = tagged.get("p1", "default") or {}
        assert seen["metadata"]["annotations"]["seen-by"] == "transform"
        # An informer asked for once the factory runs is started and syncs.
        late = factory.informer(PODS, label_selector="app=a", metadata_only=True)
        await asyncio.wait_for(late.wait_synced(), 10)
        assert set(late.get("p0", "default") or {}) == {"apiVersion", "kind", "metadata"}
    finally:
        await factory.stop()


@pytest.mark.parametrize("watch_list", [True, False], ids=["watch-list", "paged"])
async def test_without_a_transform_objects_are_kept_whole(
    client: Client, sim: SimServer, watch_list: bool
) -> None:
    for i in range(3):
        await client.create(PODS, _pod(f"p{i}", "n1"), "default")
    inf = Informer(client, PODS, transform=None, watch_list=watch_list)
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        await client.create(PODS, _pod("late", "n1"), "default")
        await _converged(client, inf, PODS)
        for name in ("p1", "late"):
            assert inf.get(name, "default") == await client.get(PODS, name, "default")
    finally:
        await inf.stop()
