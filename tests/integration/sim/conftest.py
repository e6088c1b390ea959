"""Fixtures: a real simulated API server on loopback and a raw HTTP client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from nodeops.sim.clock import Clock
from nodeops.sim.server.app import SimServer


class Api:
    """A thin HTTP client that returns (status, decoded body) so tests can assert on both."""

    def __init__(self, session: aiohttp.ClientSession, base: str, token: str | None) -> None:
        self.session = session
        self.base = base
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        token: str | None = None,
    ) -> tuple[int, Any]:
        h = dict(self.headers)
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        if headers:
            h.update(headers)
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else orjson.dumps(body)
            h["Content-Type"] = content_type
        async with self.session.request(
            method, self.base + path, data=data, params=params, headers=h
        ) as resp:
            raw = await resp.read()
            try:
                return resp.status, orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                return resp.status, raw.decode()

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return await self.call("GET", path, **kw)

    async def post(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        return await self.call("POST", path, body, **kw)

    async def put(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        return await self.call("PUT", path, body, **kw)

    async def patch(self, path: str, body: Any, kind: str = "merge", **kw: Any) -> tuple[int, Any]:
        ctype = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[kind]
        return await self.call("PATCH", path, body, content_type=ctype, **kw)

    async def delete(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.call("DELETE", path, body, **kw)

    async def watch(
        self, path: str, params: dict[str, str], max_events: int, timeout: float = 5.0
    ) -> list[dict[str, Any]]:
        """Collect up to `max_events` watch events (or until the stream ends)."""
        events: list[dict[str, Any]] = []
        q = {"watch": "true", **params}
        async with self.session.get(
            self.base + path,
            params=q,
            headers=self.headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            assert resp.status == 200, await resp.text()
            async for line in resp.content:
                if line.strip():
                    events.append(orjson.loads(line))
                    if len(events) >= max_events:
                        break
        return events


@pytest.fixture
async def server() -> AsyncIterator[SimServer]:
    srv = SimServer(clock=Clock(1.0), bookmark_interval=0.2)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def api(server: SimServer) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, server.url, server.admin_token)


def pod(name: str, labels: dict[str, str] | None = None, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "nginx:1.27"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}
