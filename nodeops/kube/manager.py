"""The manager: runs informers, leader election and controllers in controller-runtime's order.

Probes and metrics come up first (so a stuck start is visible), then informers (caches warm in
every replica, leader or not), then leader election, then controllers. A stop request drains
in-flight reconciles (bounded) and releases the lease so a successor takes over at once; a lost
lease stops every controller immediately and makes `run` return non-zero, because another
replica may already be acting on the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Iterable
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from nodeops.kube.client import Client
from nodeops.kube.controller import Controller
from nodeops.kube.informer import InformerFactory
from nodeops.kube.leaderelection import LeaderElectionConfig, LeaderElector
from nodeops.kube.metrics import REGISTRY

log = structlog.get_logger(__name__)

EXIT_OK = 0
EXIT_LEADERSHIP_LOST = 1
EXIT_SYNC_FAILED = 3


def parse_addr(addr: str) -> tuple[str, int] | None:
    """`:8080`, `127.0.0.1:0`, or `0` / empty to disable (controller-runtime's convention)."""
    if addr in ("", "0"):
        return None
    host, _, port = addr.rpartition(":")
    return (host or "0.0.0.0", int(port))


class _HttpEndpoint:
    def __init__(self, app: web.Application, addr: tuple[str, int]) -> None:
        self.app = app
        self.addr = addr
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.addr[0], self.addr[1], reuse_address=True)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) if server is not None else None
        self.port = sockets[0].getsockname()[1] if sockets else self.addr[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class Manager:
    def __init__(
        self,
        client: Client,
        *,
        leader_election: LeaderElectionConfig | None = None,
        metrics_addr: str = ":8080",
        health_addr: str = ":8081",
        drain_timeout: float = 10.0,
        sync_timeout: float = 300.0,
    ) -> None:
        self.client = client
        self.informers = InformerFactory(client)
        self.controllers: list[Controller] = []
        self.leader_election = leader_election
        self.drain_timeout = drain_timeout
        self.sync_timeout = sync_timeout
        self.ready = False
        self.leading = asyncio.Event()
        self._stop = asyncio.Event()
        self._elector: LeaderElector | None = None
        self._endpoints: list[_HttpEndpoint] = []
        health = parse_addr(health_addr)
        metrics = parse_addr(metrics_addr)
        self.health_endpoint = _HttpEndpoint(self._health_app(), health) if health else None
        self.metrics_endpoint = _HttpEndpoint(self._metrics_app(), metrics) if metrics else None

    def add(self, *controllers: Controller) -> None:
        self.controllers.extend(controllers)

    def stop(self) -> None:
        """Ask `run` to finish gracefully (what SIGTERM does)."""
        self._stop.set()

    # ------------------------------------------------------------------ http

    def _health_app(self) -> web.Application:
        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def readyz(_: web.Request) -> web.Response:
            if self.ready:
                return web.Response(text="ok")
            return web.Response(text="informers not synced", status=503)

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        return app

    def _metrics_app(self) -> web.Application:
        async def metrics(_: web.Request) -> web.Response:
            body = generate_latest(REGISTRY)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        return app

    # ------------------------------------------------------------------ run

    async def run(self) -> int:
        endpoints = [e for e in (self.health_endpoint, self.metrics_endpoint) if e is not None]
        for endpoint in endpoints:
            await endpoint.start()
        self._endpoints = endpoints
        elector_task: asyncio.Task[None] | None = None
        try:
            self.informers.start()
            if not await self._wait(self.informers.wait_synced(self.sync_timeout)):
                return EXIT_OK
            if not self.informers.has_synced:
                log.error("caches did not sync", timeout=self.sync_timeout)
                return EXIT_SYNC_FAILED
            self.ready = True
            log.info("caches synced", informers=len(self.informers.informers()))
            if self.leader_election is not None:
                self._elector = LeaderElector(self.client, self.leader_election)
                elector_task = asyncio.create_task(self._elector.run(), name="leader-election")
                if not await self._wait(self._elector.wait_leading(), elector_task):
                    return await self._shutdown(elector_task, lost=elector_task.done())
            self.leading.set()
            for controller in self.controllers:
                controller.start()
            lost = not await self._wait(self._stop.wait(), elector_task)
            return await self._shutdown(elector_task, lost=lost and not self._stop.is_set())
        finally:
            await self.informers.stop()
            for endpoint in self._endpoints:
                await endpoint.stop()

    async def _wait(
        self, awaitable: Awaitable[Any], watch: asyncio.Task[None] | None = None
    ) -> bool:
        """Wait for `awaitable`; False when a stop was requested or `watch` ended first."""
        main: asyncio.Future[Any] = asyncio.ensure_future(awaitable)
        stop: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        waits: set[asyncio.Future[Any]] = {main, stop}
        if watch is not None:
            waits.add(watch)
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for fut in (main, stop):
                if not fut.done():
                    fut.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await fut
        return main in done and not self._stop.is_set()

    async def _shutdown(self, elector_task: asyncio.Task[None] | None, *, lost: bool) -> int:
        if lost:
            log.error("leader election lost, stopping all controllers")
            for controller in self.controllers:
                controller.cancel()
            if elector_task is not None:
                with contextlib.suppress(BaseException):
                    await elector_task
            return EXIT_LEADERSHIP_LOST
        log.info("stopping", drain_timeout=self.drain_timeout)
        await asyncio.gather(*(c.stop(self.drain_timeout) for c in self.controllers))
        if elector_task is not None:
            elector_task.cancel()  # the elector releases the lease on cancellation
            with contextlib.suppress(BaseException):
                await elector_task
        return EXIT_OK

    def controllers_named(self, names: Iterable[str]) -> list[Controller]:
        wanted = set(names)
        return [c for c in self.controllers if c.name in wanted]
