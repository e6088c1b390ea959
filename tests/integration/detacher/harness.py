"""The detacher's test ground: a simulated cluster, the operator run in-process, and helpers.

The operator is the real thing: a `Manager` with the detacher's controller, talking to the
simulated API server over loopback and to a cloud (the simulator's, or moto for AWS) through a
provider, exactly as `nodeops run --controllers detacher` wires it. Tests stop it gracefully, or
cancel it mid-flight to stand for a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from nodeops.api import all_crds
from nodeops.controllers.detacher.reconciler import ATTACHMENTS
from nodeops.controllers.detacher.settings import DetacherSettings
from nodeops.controllers.detacher.wiring import detacher_controller
from nodeops.kube import Client, Controller, Manager, errors
from nodeops.kube.resources import CRDS, NAMESPACES, NODES
from nodeops.providers.base import LoadBalancers
from tests.waiting import until

NAMESPACE = "nodeops-system"
FAST = {
    "draining_poll_seconds": 0.1,
    "sync_period": 2.0,
    "cache_seconds": 30.0,
    "miss_refresh_seconds": 0.5,
}


async def install(client: Client) -> None:
    """Our CRDs and the operator's namespace, as the manifests would."""
    for crd in all_crds():
        with contextlib.suppress(errors.AlreadyExists):
            await client.create(CRDS, crd)
    with contextlib.suppress(errors.AlreadyExists):
        await client.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})


class Operator:
    """One operator process: a manager running the detacher until stopped or "crashed"."""

    def __init__(
        self, url: str, token: str | None, provider: LoadBalancers, **settings: Any
    ) -> None:
        self.url = url
        self.token = token
        self.provider = provider
        self.settings = DetacherSettings(**{**FAST, **settings})
        self.client: Client | None = None
        self.manager: Manager | None = None
        self.task: asyncio.Task[int] | None = None
        self.controller: Controller | None = None

    async def start(self) -> Operator:
        self.client = Client(self.url, token=self.token, qps=0, timeout=10)
        self.manager = Manager(self.client, metrics_addr="0", health_addr="0")
        self.controller = detacher_controller(
            self.manager, self.provider, self.settings, namespace=NAMESPACE
        )
        self.manager.add(self.controller)
        self.task = asyncio.create_task(self.manager.run(), name="operator")
        return self

    async def running(self) -> bool:
        return self.manager is not None and self.manager.leading.is_set()

    async def idle(self) -> bool:
        """Nothing queued and nothing being reconciled (requeues with a delay do not count)."""
        assert self.controller is not None
        return len(self.controller.queue) == 0 and self.controller.queue.processing == 0

    async def stop(self) -> None:
        if self.manager is not None and self.task is not None and not self.task.done():
            self.manager.stop()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self.task, 30)
        if self.client is not None:
            await self.client.close()

    async def crash(self) -> None:
        """Cut the process short wherever it is, as kill -9 would: no graceful stop."""
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        if self.client is not None:
            await self.client.close()


class Cluster:
    """Reads and writes of the test itself, through its own client."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def node(self, name: str) -> dict[str, Any]:
        return await self.client.get(NODES, name)

    async def cordon(self, name: str, on: bool = True) -> None:
        await self.client.patch(NODES, name, {"spec": {"unschedulable": on or None}})

    async def taint(self, name: str, key: str, *, on: bool = True) -> None:
        node = await self.node(name)
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != key]
        if on:
            taints.append({"key": key, "effect": "NoSchedule"})
        await self.client.patch(
            NODES,
            name,
            {"spec": {"taints": taints or None}},
            resource_version=node["metadata"]["resourceVersion"],
        )

    async def record(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.client.get(ATTACHMENTS, name, NAMESPACE)
        except errors.NotFound:
            return None

    async def phase(self, name: str) -> str | None:
        record = await self.record(name)
        return ((record or {}).get("status") or {}).get("phase")

    async def wait_phase(self, name: str, phase: str, timeout: float = 30.0) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            record = await self.record(name)
            if ((record or {}).get("status") or {}).get("phase") == phase:
                return record
            return None

        found = await until(reached, timeout=timeout, what=f"{name} {phase}")
        assert found is not None
        return found


@dataclass(frozen=True)
class Logged:
    """One request as the server saw it: when it arrived and when it was answered."""

    arrived: float
    answered: float
    method: str
    path: str
    status: int


class RequestLog:
    """Records the simulator's requests (API and cloud) with monotonic times, to order events
    that different clients caused: an aiohttp middleware around the whole server."""

    def __init__(self) -> None:
        self.entries: list[Logged] = []

    def attach(self, server: Any) -> None:
        """Wrap `server.make_app` (before the server starts) so every request is logged."""
        make_app = server.make_app

        @web.middleware
        async def log(request: web.Request, handler: Any) -> web.StreamResponse:
            arrived = time.monotonic()
            status = 500
            try:
                response = await handler(request)
                status = response.status
                return response
            finally:
                if request.method != "GET":
                    self.entries.append(
                        Logged(arrived, time.monotonic(), request.method, request.path, status)
                    )

        def app() -> web.Application:
            made = make_app()
            made.middlewares.append(log)
            return made

        server.make_app = app

    def evictions(self) -> list[Logged]:
        return [e for e in self.entries if e.path.endswith("/eviction") and e.status < 300]

    def deregistrations(self) -> list[Logged]:
        return [
            e
            for e in self.entries
            if e.method == "DELETE" and "/sim/cloud/loadbalancers/" in e.path and e.status < 300
        ]
