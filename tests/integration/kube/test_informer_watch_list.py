"""The informer's initial sync by watch-list: streamed where the server supports it, listed where
it does not, and the cache true to the server whatever happens to the stream.

A small HTTP server on loopback sits between the informer and the simulator. It forwards every
request, and plays what the simulator itself does not: a server without the WatchList feature
(kube-apiserver answers 422), one that answers a watch-list with a plain watch, and streams that
break or expire (410) in the middle of their initial events or after them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from nodeops.kube.client import Client
from nodeops.kube.informer import Informer
from nodeops.kube.resources import CONFIGMAPS
from nodeops.sim.server.app import SimServer
from tests.waiting import until

NS = "default"
EXPIRED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "too old resource version: 1 (2)",
    "reason": "Expired",
    "code": 410,
}
# What kube-apiserver 1.36 streams for a watch-list when its etcd cannot report watch progress
# (etcd 3.4.23, say): a 200 whose first event is this.
NO_PROGRESS = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "a watch stream was requested by the client but the required storage feature "
    "RequestWatchProgress is disabled",
    "reason": "InternalError",
    "code": 500,
}
REFUSED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": 'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
    "reason": "Invalid",
    "details": {"kind": "ListOptions", "group": "meta.k8s.io"},
    "code": 422,
}


class Proxy:
    """Forwards to the simulator; `requests` records each one as list, watch or watch-list."""

    def __init__(self, upstream: str, token: str) -> None:
        self.upstream = upstream
        self.headers = {"Authorization": f"Bearer {token}"}
        self.requests: list[str] = []
        # A server without WatchList: a watch-list is answered 422.
        self.refuse_watch_list = False
        # A server that ignores sendInitialEvents: a watch-list gets a plain watch from now on.
        self.plain_watch = False
        # A server whose storage cannot serve watch-lists: each one gets a 500 ERROR event.
        self.no_watch_progress = False
        # The next `break_watch_lists` watch-lists end after `break_after` objects: cut off
        # ("cut"), or with a 410 ERROR event ("expire").
        self.break_watch_lists = 0
        self.break_after = 0
        self.break_how = "cut"
        # When set, the next watch-list forwards nothing after its initial state until
        # `release` is set, then ends with a 410 ERROR event.
        self.hold_after_sync = False
        self.holding = asyncio.Event()
        self.release = asyncio.Event()
        self.url = ""
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None

    def kinds(self) -> list[str]:
        return [r for r in self.requests if r != "other"]

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        query = dict(request.query)
        watch_list = "sendInitialEvents" in query
        if not request.path.endswith("/configmaps"):
            kind = "other"
        elif query.get("watch") == "true":
            kind = "watch-list" if watch_list else "watch"
        else:
            kind = "list"
        self.requests.append(kind)
        if kind == "watch-list" and self.refuse_watch_list:
            return web.json_response(REFUSED, status=422)
        if kind == "watch-list" and self.no_watch_progress:
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            await resp.write(orjson.dumps({"type": "ERROR", "object": NO_PROGRESS}) + b"\n")
            await resp.write_eof()
            return resp
        if kind == "watch-list" and self.plain_watch:
            query["sendInitialEvents"] = "false"  # the simulator's way to a watch from now
        if kind not in ("watch", "watch-list"):
            async with self._session.request(
                request.method,
                self.upstream + request.path,
                params=query,
                data=await request.read(),
                headers={**self.headers, "Content-Type": request.content_type},
            ) as up:
                return web.Response(
                    body=await up.read(), status=up.status, content_type="application/json"
                )
        try:
            return await self._stream(request, query, kind == "watch-list" and not self.plain_watch)
        except ConnectionResetError:  # the informer went away (aiohttp's reset is one too)
            return web.Response()

    async def _stream(
        self, request: web.Request, query: dict[str, str], watch_list: bool
    ) -> web.StreamResponse:
        assert self._session is not None
        breaking = watch_list and self.break_watch_lists > 0
        if breaking:
            self.break_watch_lists -= 1
        holding = watch_list and self.hold_after_sync
        if holding:
            self.hold_after_sync = False
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        async with self._session.get(
            self.upstream + request.path,
            params=query,
            headers=self.headers,
            timeout=aiohttp.ClientTimeout(total=None),
        ) as up:
            if up.status != 200:
                return web.Response(
                    body=await up.read(), status=up.status, content_type="application/json"
                )
            await resp.prepare(request)
            objects = 0
            async for line in up.content:
                if not line.strip():
                    continue
                if breaking and objects == self.break_after:
                    return await self._break(request, resp)
                await resp.write(line)
                event = orjson.loads(line)
                if event["type"] != "BOOKMARK":
                    objects += 1
                elif holding and event["object"]["metadata"].get("annotations"):
                    self.holding.set()
                    await self.release.wait()
                    await resp.write(orjson.dumps({"type": "ERROR", "object": EXPIRED}) + b"\n")
                    await resp.write_eof()
                    return resp
        return resp

    async def _break(self, request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
        if self.break_how == "expire":
            await resp.write(orjson.dumps({"type": "ERROR", "object": EXPIRED}) + b"\n")
            await resp.write_eof()
        else:
            assert request.transport is not None
            request.transport.close()
        return resp


@pytest.fixture
async def proxy(sim: SimServer) -> AsyncIterator[Proxy]:
    p = Proxy(sim.url, sim.admin_token)
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


@pytest.fixture
async def via(proxy: Proxy) -> AsyncIterator[Client]:
    """A client that reaches the simulator through the proxy."""
    async with Client(proxy.url, qps=0, timeout=10) as c:
        yield c


class Seen:
    """What an informer's handlers were told, and whether it was synced when told."""

    def __init__(self, inf: Informer) -> None:
        self.adds: list[str] = []
        self.updates: list[str] = []
        self.deletes: list[str] = []
        self.added_while_synced: list[bool] = []
        self.inf = inf
        inf.add_handler(self._add, self._update, self._delete)

    def _add(self, obj: dict[str, Any]) -> None:
        self.adds.append(obj["metadata"]["name"])
        self.added_while_synced.append(self.inf.has_synced)

    def _update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        assert old["metadata"]["name"] == new["metadata"]["name"]
        self.updates.append(new["metadata"]["name"])

    def _delete(self, obj: dict[str, Any]) -> None:
        self.deletes.append(obj["metadata"]["name"])


async def _make(client: Client, count: int) -> None:
    for i in range(count):
        await client.create(
            CONFIGMAPS, {"metadata": {"name": f"cm{i:02d}"}, "data": {"i": "0"}}, NS
        )


async def _server_state(client: Client) -> dict[str, str]:
    items, _ = await client.list(CONFIGMAPS, NS)
    return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}


def _cache_state(inf: Informer) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in inf.objects()}


async def _converged(client: Client, inf: Informer) -> None:
    async def same() -> bool:
        return inf.has_synced and await _server_state(client) == _cache_state(inf)

    await until(same, what="the cache to equal the server")


async def _requested(proxy: Proxy, kinds: list[str]) -> None:
    """Wait until the proxy has seen these requests, in this order, and no others."""

    async def seen() -> bool:
        return len(proxy.kinds()) >= len(kinds)

    await until(seen, what=f"requests {kinds}")
    assert proxy.kinds() == kinds


def _informer(client: Client) -> Informer:
    inf = Informer(client, CONFIGMAPS, namespace=NS)
    inf.backoff.initial = 0.01
    inf.backoff.maximum = 0.05
    return inf


async def test_the_initial_state_is_streamed_and_the_same_watch_goes_on(
    client: Client, via: Client, proxy: Proxy
) -> None:
    await _make(client, 25)
    inf = _informer(via)
    seen = Seen(inf)
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        assert len(inf) == 25 and sorted(seen.adds) == [f"cm{i:02d}" for i in range(25)]
        assert not any(seen.added_while_synced)  # synced only once the state was complete
        await client.patch(CONFIGMAPS, "cm03", {"data": {"i": "1"}}, NS)
        await client.delete(CONFIGMAPS, "cm04", NS)
        await client.create(CONFIGMAPS, {"metadata": {"name": "late"}}, NS)
        await _converged(client, inf)
        assert seen.updates == ["cm03"] and seen.deletes == ["cm04"] and seen.adds[-1] == "late"
        assert proxy.kinds() == ["watch-list"]  # no list, and no second watch
        assert not via.watch_list_refused
        assert inf.synced_by == "watch-list"
    finally:
        await inf.stop()


async def test_a_server_without_watch_list_is_listed_and_remembered(
    client: Client, via: Client, proxy: Proxy
) -> None:
    await _make(client, 12)
    proxy.refuse_watch_list = True
    inf = _informer(via)
    inf.page_size = 5
    seen = Seen(inf)
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        assert len(inf) == 12 and len(seen.adds) == 12
        await _requested(proxy, ["watch-list", "list", "list", "list", "watch"])
        await client.create(CONFIGMAPS, {"metadata": {"name": "late"}}, NS)
        await _converged(client, inf)
        assert proxy.kinds() == ["watch-list", "list", "list", "list", "watch"]
        assert "sendInitialEvents is forbidden" in via.watch_list_refused["configmaps"]
        assert inf.failures == 0  # a refusal is not a failure
        # Another informer of the resource does not ask again.
        other = _informer(via)
        other.label_selector = "app=none"
        other.start()
        try:
            await asyncio.wait_for(other.wait_synced(), 10)
            await _requested(
                proxy, ["watch-list", "list", "list", "list", "watch", "list", "watch"]
            )
        finally:
            await other.stop()
    finally:
        await inf.stop()


async def test_a_watch_list_the_server_answers_with_an_error_is_replaced_by_a_list(
    client: Client, via: Client, proxy: Proxy
) -> None:
    """kube-apiserver on an etcd without watch progress answers each watch-list 200 with a 500
    ERROR event: the informer syncs by a paged list, says how it synced, and (as client-go)
    asks again at its next sync, since a 500 may also be a passing fault."""
    await _make(client, 4)
    proxy.no_watch_progress = True
    inf = _informer(via)
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        assert len(inf) == 4 and inf.synced_by == "list"
        await _requested(proxy, ["watch-list", "list", "watch"])
        assert not via.watch_list_refused
        assert inf.failures == 0
    finally:
        await inf.stop()


async def test_a_server_answering_with_a_plain_watch_is_listed_and_remembered(
    client: Client, via: Client, proxy: Proxy
) -> None:
    await _make(client, 3)
    proxy.plain_watch = True  # its bookmarks never say the initial state is complete
    inf = _informer(via)
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        assert len(inf) == 3
        await _requested(proxy, ["watch-list", "list", "watch"])
        assert "plain watch" in via.watch_list_refused["configmaps"]
    finally:
        await inf.stop()


@pytest.mark.parametrize("how", ["cut", "expire"])
async def test_a_watch_list_broken_during_its_initial_events_is_streamed_again(
    client: Client, via: Client, proxy: Proxy, how: str
) -> None:
    await _make(client, 25)
    proxy.break_watch_lists, proxy.break_after, proxy.break_how = 1, 10, how
    inf = _informer(via)
    seen = Seen(inf)
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        assert len(inf) == 25
        # The ten objects of the broken stream are not told twice, and nothing was synced early.
        assert sorted(seen.adds) == [f"cm{i:02d}" for i in range(25)]
        assert not any(seen.added_while_synced) and not seen.updates and not seen.deletes
        assert proxy.kinds() == ["watch-list", "watch-list"]
        assert not via.watch_list_refused
    finally:
        await inf.stop()


async def test_watch_lists_broken_again_and_again_give_way_to_a_paged_list(
    client: Client, via: Client, proxy: Proxy
) -> None:
    await _make(client, 8)
    proxy.break_watch_lists, proxy.break_after = 100, 3
    inf = _informer(via)
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        assert len(inf) == 8
        await _requested(proxy, ["watch-list", "watch-list", "watch-list", "list", "watch"])
        assert not via.watch_list_refused  # the server can; the way to it could not this time
    finally:
        await inf.stop()


async def test_410_after_the_initial_state_relists_with_adds_updates_and_deletes(
    client: Client, via: Client, proxy: Proxy
) -> None:
    await _make(client, 6)
    proxy.hold_after_sync = True
    inf = _informer(via)
    seen = Seen(inf)
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        await asyncio.wait_for(proxy.holding.wait(), 10)
        # While the informer hears nothing: one object changes, one goes, one comes.
        await client.patch(CONFIGMAPS, "cm01", {"data": {"i": "1"}}, NS)
        await client.delete(CONFIGMAPS, "cm02", NS)
        await client.create(CONFIGMAPS, {"metadata": {"name": "new"}}, NS)
        assert "cm02" in _cache_state(inf)
        proxy.release.set()  # the stream ends with 410 Expired
        await _converged(client, inf)
        assert seen.updates == ["cm01"] and seen.deletes == ["cm02"]
        assert seen.adds.count("new") == 1 and len(seen.adds) == 7
        assert proxy.kinds() == ["watch-list", "watch-list"]
    finally:
        await inf.stop()


async def test_a_label_selector_applies_to_the_streamed_state(
    client: Client, via: Client, proxy: Proxy
) -> None:
    for i, app in enumerate(["a", "b", "a"]):
        await client.create(CONFIGMAPS, {"metadata": {"name": f"s{i}", "labels": {"app": app}}}, NS)
    inf = _informer(via)
    inf.label_selector = "app=a"
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        assert sorted(_cache_state(inf)) == ["s0", "s2"]
        await client.patch(CONFIGMAPS, "s0", {"metadata": {"labels": {"app": "b"}}}, NS)

        async def left() -> bool:
            return sorted(_cache_state(inf)) == ["s2"]

        await until(left, what="the object that stopped matching to leave the cache")
        assert proxy.kinds() == ["watch-list"]
    finally:
        await inf.stop()
