"""The loops' API client against the simulated API server: verbs, errors, lists, watches."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import (
    ADDED,
    DELETED,
    MODIFIED,
    NODES,
    PDBS,
    PODS,
    RELISTED,
    AlreadyExists,
    ApiClient,
    Conflict,
    Invalid,
    NotFound,
    Resource,
    TooManyRequests,
    WatchEvent,
)
from nodeops.sim.server.app import SimServer

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
NS = "default"


def cm(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def _client_for(server: SimServer) -> ApiClient:
    await server.start()
    return ApiClient(server.url, server.admin_token, component="test")


@pytest.fixture
async def api() -> AsyncIterator[ApiClient]:
    server = SimServer(clock=Clock(1.0), auth=True, bookmark_interval=0.1)
    client = await _client_for(server)
    try:
        yield client
    finally:
        await client.close()
        await server.stop()


async def test_crud_and_typed_errors(api: ApiClient) -> None:
    created = await api.create(CONFIGMAPS, cm("a", k="1"), NS)
    assert created["metadata"]["uid"]
    with pytest.raises(AlreadyExists) as exists:
        await api.create(CONFIGMAPS, cm("a"), NS)
    assert exists.value.code == 409 and exists.value.status["details"]["name"] == "a"
    got = await api.get(CONFIGMAPS, "a", NS)
    got["data"]["k"] = "2"
    updated = await api.update(CONFIGMAPS, got)
    assert updated["data"] == {"k": "2"}
    with pytest.raises(Conflict):
        await api.update(CONFIGMAPS, got)  # stale resourceVersion
    merged = await api.patch(CONFIGMAPS, "a", {"data": {"m": "3"}}, NS)
    assert merged["data"] == {"k": "2", "m": "3"}
    jsoned = await api.patch(
        CONFIGMAPS, "a", [{"op": "remove", "path": "/data/k"}], NS, patch_type="json"
    )
    assert jsoned["data"] == {"m": "3"}
    await api.delete(CONFIGMAPS, "a", NS)
    with pytest.raises(NotFound) as missing:
        await api.get(CONFIGMAPS, "a", NS)
    assert missing.value.reason == "NotFound"
    with pytest.raises(Invalid):
        await api.create(CONFIGMAPS, cm("Not_A_Name"), NS)


async def test_strategic_patch_merges_lists_by_key(api: ApiClient) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    await api.create(NODES, node)
    patch = {"status": {"conditions": [{"type": "DiskPressure", "status": "False"}]}}
    out = await api.patch(NODES, "n1", patch, patch_type="strategic", subresource="status")
    assert {c["type"] for c in out["status"]["conditions"]} == {"Ready", "DiskPressure"}


async def test_list_is_paginated(api: ApiClient) -> None:
    for i in range(23):
        await api.create(CONFIGMAPS, cm(f"cm-{i:02d}"), NS)
    result = await api.list(CONFIGMAPS, NS, limit=5)
    names = [o["metadata"]["name"] for o in result.items]
    assert len([n for n in names if n.startswith("cm-")]) == 23
    assert len(set(names)) == len(names)
    assert int(result.resource_version) > 0
    selected = await api.list(CONFIGMAPS, NS, field_selector="metadata.name=cm-07")
    assert [o["metadata"]["name"] for o in selected.items] == ["cm-07"]


async def _collect(it: AsyncIterator[WatchEvent], n: int, timeout: float = 5.0) -> list[WatchEvent]:
    out: list[WatchEvent] = []

    async def run() -> None:
        async for ev in it:
            out.append(ev)
            if len(out) >= n:
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def test_watch_delivers_events_and_follows_bookmarks(api: ApiClient) -> None:
    start = await api.list(CONFIGMAPS, NS)
    watch = api.watch(CONFIGMAPS, NS, resource_version=start.resource_version)
    try:
        collector = asyncio.create_task(_collect(watch, 3))
        await asyncio.sleep(0.05)
        await api.create(CONFIGMAPS, cm("w", a="1"), NS)
        await api.patch(CONFIGMAPS, "w", {"data": {"a": "2"}}, NS)
        await api.delete(CONFIGMAPS, "w", NS)
        events = await collector
        assert [e.type for e in events] == [ADDED, MODIFIED, DELETED]
        last = watch.resource_version
        # Writes elsewhere move the global resourceVersion; bookmarks carry it to this watch.
        await api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b"}})
        pending = asyncio.create_task(_collect(watch, 1, timeout=10))
        for _ in range(100):
            if int(watch.resource_version) > int(last):
                break
            await asyncio.sleep(0.02)
        assert int(watch.resource_version) > int(last)
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
    finally:
        await watch.aclose()


async def test_watch_relists_when_its_version_is_gone() -> None:
    server = SimServer(clock=Clock(1.0), history_size=5)
    api = await _client_for(server)
    try:
        start = await api.list(CONFIGMAPS, NS)
        for i in range(20):
            await api.create(CONFIGMAPS, cm(f"old-{i}"), NS)
        watch = api.watch(CONFIGMAPS, NS, resource_version=start.resource_version)
        try:
            (ev,) = await _collect(watch, 1)
            assert ev.type == RELISTED
            assert ev.items is not None
            assert len([o for o in ev.items if o["metadata"]["name"].startswith("old-")]) == 20
            collector = asyncio.create_task(_collect(watch, 1))
            await asyncio.sleep(0.05)
            await api.create(CONFIGMAPS, cm("new"), NS)
            (after,) = await collector
            assert (after.type, after.object["metadata"]["name"]) == (ADDED, "new")
        finally:
            await watch.aclose()
    finally:
        await api.close()
        await server.stop()


async def test_watch_resumes_after_the_stream_is_cut() -> None:
    server = SimServer(clock=Clock(1.0), faults="watch-cut=events:2@configmaps")
    api = await _client_for(server)
    try:
        start = await api.list(CONFIGMAPS, NS)
        watch = api.watch(CONFIGMAPS, NS, resource_version=start.resource_version)
        try:
            collector = asyncio.create_task(_collect(watch, 7))
            for i in range(7):
                await api.create(CONFIGMAPS, cm(f"c{i}"), NS)
            events = await collector
            assert [e.object["metadata"]["name"] for e in events] == [f"c{i}" for i in range(7)]
        finally:
            await watch.aclose()
    finally:
        await api.close()
        await server.stop()


async def test_throttling_is_retried_after_retry_after() -> None:
    server = SimServer(
        clock=Clock(1.0), faults="error=429:0.5@create/configmaps:retry-after=0", seed=3
    )
    api = await _client_for(server)
    try:
        for i in range(10):
            await api.create(CONFIGMAPS, cm(f"t{i}"), NS)
        assert len((await api.list(CONFIGMAPS, NS)).items) >= 10
    finally:
        await api.close()
        await server.stop()


async def test_binding_and_eviction(api: ApiClient) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]},
    }
    created = await api.create(PODS, pod, NS)
    await api.bind("p", NS, "node-a", created["metadata"]["uid"])
    assert (await api.get(PODS, "p", NS))["spec"]["nodeName"] == "node-a"
    with pytest.raises(Conflict):
        await api.bind("p", NS, "node-b")
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "x"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}},
    }
    await api.create(PDBS, pdb, NS)
    # A pending pod may be evicted regardless of budgets; a running one may not, as long as no
    # disruption controller has allowed anything. The client must surface that 429 instead of
    # retrying it as throttling.
    running = {"status": {"phase": "Running"}}
    await api.patch(PODS, "p", running, NS, subresource="status")
    with pytest.raises(TooManyRequests):
        await api.evict("p", NS)


async def test_user_agent_names_the_component(api: ApiClient) -> None:
    assert api.session.headers["User-Agent"] == "nodeops-sim/test"


async def test_the_clusters_own_writes_ask_for_no_json_field_validation() -> None:
    """Kube's components write protobuf, which has no unknown or duplicate fields to find; the
    simulator's loops write JSON, so they ask the server to skip looking (its work, not theirs)."""
    from aiohttp import web

    seen: list[tuple[str, str]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append((request.method, request.query.get("fieldValidation", "")))
        return web.json_response({"metadata": {"name": "a"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = ApiClient(f"http://127.0.0.1:{port}", component="test")
    try:
        await client.create(CONFIGMAPS, cm("a"), NS)
        await client.update(CONFIGMAPS, {**cm("a"), "metadata": {"name": "a", "namespace": NS}})
        await client.patch(CONFIGMAPS, "a", {"data": {"k": "v"}}, NS)
        await client.get(CONFIGMAPS, "a", NS)
    finally:
        await client.close()
        await runner.cleanup()
    assert seen == [("POST", "Ignore"), ("PUT", "Ignore"), ("PATCH", "Ignore"), ("GET", "")]
