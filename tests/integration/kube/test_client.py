"""The client's guarded writes and retries, over real HTTP.

Guarded writes run against the simulated API server; retries against a tiny scripted aiohttp
server, because they are about what the client does with exact status codes and headers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from nodeops.kube import errors
from nodeops.kube.client import Client, RetryNotice
from nodeops.kube.metrics import REGISTRY
from nodeops.kube.resources import CONFIGMAPS, NODES

NS = "default"


async def _configmap(client: Client, name: str, **data: str) -> dict[str, Any]:
    return await client.create(CONFIGMAPS, {"metadata": {"name": name}, "data": data}, NS)


# ---------------------------------------------------------------------- guarded writes


@pytest.mark.parametrize("patch_type", ["merge", "strategic", "json"])
async def test_patch_guarded_by_resource_version(client: Client, patch_type: str) -> None:
    cm = await _configmap(client, "guarded", v="0")
    rv = cm["metadata"]["resourceVersion"]
    body: Any = (
        [{"op": "replace", "path": "/data/v", "value": "1"}]
        if patch_type == "json"
        else {"data": {"v": "1"}}
    )
    done = await client.patch(
        CONFIGMAPS, "guarded", body, NS, patch_type=patch_type, resource_version=rv
    )
    assert done["data"]["v"] == "1"
    # The same guard again is stale now: refused, and the object keeps the newer write.
    with pytest.raises(errors.Conflict):
        await client.patch(
            CONFIGMAPS, "guarded", body, NS, patch_type=patch_type, resource_version=rv
        )
    assert (await client.get(CONFIGMAPS, "guarded", NS))["metadata"]["resourceVersion"] == (
        done["metadata"]["resourceVersion"]
    )


async def test_patch_status_guarded_by_resource_version(client: Client) -> None:
    node = await client.create(NODES, {"metadata": {"name": "n-status"}})
    rv = node["metadata"]["resourceVersion"]
    await client.patch(NODES, "n-status", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(errors.Conflict):
        await client.patch_status(NODES, "n-status", {"phase": "Running"}, resource_version=rv)
    fresh = await client.get(NODES, "n-status")
    done = await client.patch_status(
        NODES,
        "n-status",
        {"conditions": [{"type": "Ready", "status": "True"}]},
        resource_version=fresh["metadata"]["resourceVersion"],
    )
    assert done["status"]["conditions"][0]["type"] == "Ready"


async def test_scope_mix_ups_raise_before_any_request(client: Client) -> None:
    with pytest.raises(ValueError, match="cluster-scoped"):
        await client.patch(NODES, "n", {"metadata": {}}, "default")
    with pytest.raises(ValueError, match="cluster-scoped"):
        await client.delete(NODES, "n", "default")


async def test_create_or_patch(client: Client) -> None:
    body = {"metadata": {"name": "cop", "labels": {"a": "1"}}, "data": {"k": "v"}}
    obj, op = await client.create_or_patch(CONFIGMAPS, body, NS)
    assert op == "created" and obj["data"] == {"k": "v"}
    same, op = await client.create_or_patch(CONFIGMAPS, body, NS)
    assert op == "unchanged"
    assert same["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    changed, op = await client.create_or_patch(
        CONFIGMAPS, {"metadata": {"name": "cop", "labels": {"a": None}}, "data": {"k": "w"}}, NS
    )
    assert op == "updated"
    assert changed["data"] == {"k": "w"} and "a" not in (changed["metadata"].get("labels") or {})


# ---------------------------------------------------------------------- retries


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Scripted:
    """A loopback HTTP server answering each request with the next scripted step."""

    def __init__(self) -> None:
        self.steps: list[Handler] = []
        self.seen: list[tuple[str, str, float]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.method, request.path, time.monotonic()))
        step = self.steps.pop(0) if self.steps else _ok
        return await step(request)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def _ok(request: web.Request) -> web.StreamResponse:
    return web.json_response({"kind": "ConfigMap", "metadata": {"name": "x"}})


def _status(code: int, retry_after: str | None = None, reason: str = "") -> Handler:
    async def answer(request: web.Request) -> web.StreamResponse:
        headers = {"Retry-After": retry_after} if retry_after is not None else None
        body = {"kind": "Status", "status": "Failure", "code": code, "reason": reason}
        return web.json_response(body, status=code, headers=headers)

    return answer


async def _reset(request: web.Request) -> web.StreamResponse:
    assert request.transport is not None
    request.transport.close()  # the connection drops before any answer
    return web.Response()


@pytest.fixture
async def scripted() -> AsyncIterator[Scripted]:
    server = Scripted()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def _retries(client: Client, method: str, code: str) -> float:
    labels = {"code": code, "verb": method, "host": client.host}
    return REGISTRY.get_sample_value("rest_client_request_retries_total", labels) or 0.0


async def test_get_honours_retry_after_then_succeeds(scripted: Scripted) -> None:
    scripted.steps = [_status(429, "0.3", "TooManyRequests"), _status(503), _reset]
    notices: list[RetryNotice] = []
    async with Client(scripted.url, qps=0, timeout=5, on_retry=notices.append) as client:
        got = await client.get(CONFIGMAPS, "x", NS)
    assert got["metadata"]["name"] == "x"
    assert len(scripted.seen) == 4
    # The 429 asked for 0.3 s, and the client waited at least that long.
    assert scripted.seen[1][2] - scripted.seen[0][2] >= 0.3
    # Each retry was told to the hook before it was sent: why, which attempt, how long after
    # (a connection reset on a kept-alive connection aiohttp sends again itself, unseen).
    path = f"/api/v1/namespaces/{NS}/configmaps/x"
    assert [(n.method, n.path, n.attempt) for n in notices[:2]] == [
        ("GET", path, 1),
        ("GET", path, 2),
    ]
    assert [type(n.error) for n in notices[:2]] == [errors.TooManyRequests, errors.ServerError]
    assert notices[0].delay == 0.3


async def test_idempotent_writes_are_retried(scripted: Scripted) -> None:
    scripted.steps = [_status(500), _status(504)]
    async with Client(scripted.url, qps=0, timeout=5) as client:
        await client.patch(CONFIGMAPS, "x", {"data": {"a": "b"}}, NS, resource_version="7")
        scripted.steps = [_status(429, "0")]
        await client.delete(CONFIGMAPS, "x", NS)
    assert [m for m, _, _ in scripted.seen] == ["PATCH", "PATCH", "PATCH", "DELETE", "DELETE"]


async def test_posts_and_unguarded_json_patches_are_not_retried(scripted: Scripted) -> None:
    async with Client(scripted.url, qps=0, timeout=5) as client:
        scripted.steps = [_ok, _status(429, "0", "TooManyRequests")]  # discovery, eviction
        with pytest.raises(errors.TooManyRequests):
            await client.evict("p", NS)  # a PodDisruptionBudget's refusal is the caller's
        scripted.steps = [_status(500)]
        with pytest.raises(errors.ServerError):
            await client.create(CONFIGMAPS, {"metadata": {"name": "x"}}, NS)
        scripted.steps = [_reset]
        with pytest.raises(errors.ConnectionFailed):
            await client.patch(
                CONFIGMAPS,
                "x",
                [{"op": "add", "path": "/metadata/finalizers/-", "value": "f"}],
                NS,
                patch_type="json",
            )
    methods = [m for m, _, _ in scripted.seen]
    assert methods == ["GET", "POST", "POST", "PATCH"]  # discovery, then one try each


async def test_a_throttled_create_is_sent_again_after_its_retry_after(scripted: Scripted) -> None:
    """A 429 is the server's "not now", given before serving: a create it refused never
    happened, so it is sent again (an eviction's 429 stays the caller's, above)."""
    scripted.steps = [_status(429, "0.2", "TooManyRequests")]
    async with Client(scripted.url, qps=0, timeout=5) as client:
        await client.create(CONFIGMAPS, {"metadata": {"name": "x"}}, NS)
    assert [m for m, _, _ in scripted.seen] == ["POST", "POST"]
    assert scripted.seen[1][2] - scripted.seen[0][2] >= 0.2


async def test_a_get_that_timed_out_is_sent_again(scripted: Scripted) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(2)
        return await _ok(request)

    scripted.steps = [slow]
    async with Client(scripted.url, qps=0, timeout=0.3) as client:
        got = await client.get(CONFIGMAPS, "x", NS)
        assert got["metadata"]["name"] == "x"
        scripted.steps = [slow]
        with pytest.raises(errors.RequestTimeout):  # a write that timed out may have happened
            await client.create(CONFIGMAPS, {"metadata": {"name": "x"}}, NS)
    assert [m for m, _, _ in scripted.seen] == ["GET", "GET", "POST"]


async def test_retries_are_bounded_and_long_retry_after_is_not_waited(scripted: Scripted) -> None:
    async with Client(scripted.url, qps=0, timeout=5, max_retries=2) as client:
        before = _retries(client, "GET", "503")
        scripted.steps = [_status(503, "0")] * 5
        with pytest.raises(errors.ServerError):
            await client.get(CONFIGMAPS, "x", NS)
        assert len(scripted.seen) == 3
        assert _retries(client, "GET", "503") - before == 2
        scripted.steps = [_status(429, "3600", "TooManyRequests")]
        with pytest.raises(errors.TooManyRequests) as caught:
            await client.get(CONFIGMAPS, "x", NS)
        assert caught.value.retry_after == 3600
    assert len(scripted.seen) == 4
