"""Never a silent dead cache: bad objects are skipped, any list/watch failure is retried, a cache
that keeps failing fails readiness, and a task that dies is restarted or stops the process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from nodeops.kube import (
    EXIT_FAILED,
    Client,
    Controller,
    Manager,
    ReconcileContext,
    Request,
    Result,
    errors,
)
from nodeops.kube.informer import Informer
from nodeops.kube.resources import CONFIGMAPS, PODS
from nodeops.sim.server.app import SimServer
from tests.integration.kube.support import running, sample
from tests.waiting import until

NS = "default"


# ---------------------------------------------------------------------- one bad object


def _by_app(pod: dict[str, Any]) -> list[str]:
    return [pod["metadata"]["labels"]["app"]]  # raises for a pod without the label


def _no_poison(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["metadata"]["name"].startswith("poison"):
        raise ValueError("cannot transform this one")
    return obj


def _pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "x:1"}]},
    }


async def test_a_bad_object_is_skipped_not_fatal(client: Client, sim: SimServer) -> None:
    await client.create(PODS, _pod("good", {"app": "a"}), NS)
    await client.create(PODS, _pod("unlabelled", {}), NS)
    await client.create(PODS, _pod("poison-1", {"app": "a"}), NS)
    inf = Informer(client, PODS, transform=_no_poison, indexers={"app": _by_app})
    before_idx = sample("nodeops_informer_object_errors_total", resource="pods", stage="indexer")
    before_tr = sample("nodeops_informer_object_errors_total", resource="pods", stage="transform")
    inf.start()
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        assert [p["metadata"]["name"] for p in inf.by_index("app", "a")] == ["good"]
        # Events after the bad ones are still served: the cache is alive.
        await client.create(PODS, _pod("poison-2", {"app": "a"}), NS)
        await client.create(PODS, _pod("later", {"app": "b"}), NS)
        await until(lambda: _cached(inf, "later"), what="an object after the bad ones")
        assert inf.get("poison-2", NS) is None and inf.started
        idx = sample("nodeops_informer_object_errors_total", resource="pods", stage="indexer")
        tr = sample("nodeops_informer_object_errors_total", resource="pods", stage="transform")
        assert idx - before_idx == 1 and tr - before_tr == 2
    finally:
        await inf.stop()


async def _cached(inf: Informer, name: str) -> bool:
    return inf.has_synced and inf.get(name, NS) is not None


# ---------------------------------------------------------------------- malformed streams


_WATCH_LIST_REFUSED = {
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


class FakeApi:
    """Serves configmaps: lists from `items`, watches from the scripted `watches` (one each).

    Like a kube-apiserver without the WatchList feature it refuses a watch-list, so informers
    list and then watch.
    """

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = [_cm("a", 1)]
        self.rv = 1
        self.watches: list[list[bytes]] = []
        self.lists = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.endswith("/truncated"):
            resp = web.StreamResponse(headers={"Content-Length": "100"})
            await resp.prepare(request)
            await resp.write(b'{"kind":')
            assert request.transport is not None
            request.transport.close()
            return resp
        if request.query.get("sendInitialEvents"):
            # A server without WatchList refuses the request, as kube-apiserver does.
            return web.json_response(_WATCH_LIST_REFUSED, status=422)
        if request.query.get("watch") != "true":
            self.lists += 1
            body = {
                "kind": "ConfigMapList",
                "metadata": {"resourceVersion": str(self.rv)},
                "items": self.items,
            }
            return web.json_response(body)
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for line in self.watches.pop(0) if self.watches else []:
            await resp.write(line + b"\n")
        await asyncio.sleep(30)  # then hold the stream open, as a quiet watch does
        return resp

    async def start(self) -> None:
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


def _cm(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "resourceVersion": str(rv)}}


def _event(kind: str, obj: Any) -> bytes:
    return orjson.dumps({"type": kind, "object": obj})


@pytest.fixture
async def fake() -> AsyncIterator[FakeApi]:
    api = FakeApi()
    await api.start()
    try:
        yield api
    finally:
        await api.stop()


@pytest.mark.parametrize(
    "poison",
    [
        _event("ADDED", [1, 2]),  # an object that is not an object
        b'{"type": "ADDED", "object": {"metadata": ',  # not JSON at all
        _event("ADDED", {"metadata": {"name": "x", "namespace": NS, "labels": "oops"}}),
    ],
)
async def test_a_malformed_watch_event_does_not_stop_the_cache(
    fake: FakeApi, poison: bytes
) -> None:
    def by_label(obj: dict[str, Any]) -> list[str]:
        return list((obj["metadata"].get("labels") or {}).keys())

    good = _event("ADDED", _cm("b", 3))
    # A broken stream is dropped and watched again; a bad object is skipped within the stream.
    fake.watches = [[poison, good], [good]]
    async with Client(fake.url, qps=0, timeout=5) as client:
        inf = Informer(client, CONFIGMAPS, indexers={"labels": by_label})
        inf.backoff.initial = 0.01
        inf.start()
        try:
            await until(lambda: _cached(inf, "b"), what="the event after the bad one")
            assert inf.started and fake.lists >= 1
            assert inf.failures == 0  # the watch delivered again: healthy
        finally:
            await inf.stop()


async def test_a_broken_response_is_a_kube_error(fake: FakeApi) -> None:
    async with Client(fake.url, qps=0, timeout=5, max_retries=0) as client:
        with pytest.raises(errors.ConnectionFailed):
            await client.request("GET", "/truncated")


# ---------------------------------------------------------------------- readiness


async def _readyz(http: aiohttp.ClientSession, manager: Manager) -> int:
    assert manager.health_endpoint is not None
    if not manager.health_endpoint.port:
        return 0  # not serving yet
    async with http.get(f"http://127.0.0.1:{manager.health_endpoint.port}/readyz") as resp:
        return resp.status


async def test_a_cache_that_keeps_failing_fails_readiness(client: Client, sim: SimServer) -> None:
    """The controller keeps retrying, as client-go does, but a list/watch that keeps failing is
    counted and fails readiness until it works again."""
    code = "500"
    manager = Manager(client, metrics_addr="0", health_addr="127.0.0.1:0")
    inf = manager.informers.informer(CONFIGMAPS)
    inf.backoff.initial = 0.02
    inf.backoff.maximum = 0.1
    before = sample("nodeops_informer_list_watch_failures_total", resource="configmaps", error=code)
    sim.faults.update("watch-cut=seconds:0.2@configmaps")  # watches end often, harmlessly
    async with running(manager), aiohttp.ClientSession() as http:

        async def ready() -> bool:
            return await _readyz(http, manager) == 200

        async def unready() -> bool:
            return await _readyz(http, manager) == 500

        await until(ready, what="ready")
        # From now on every list and watch of configmaps fails.
        sim.faults.update(f"error={code}@list,watch/configmaps; watch-cut=seconds:0.2@configmaps")
        await until(unready, what="readiness to fail")
        failures = sample(
            "nodeops_informer_list_watch_failures_total", resource="configmaps", error=code
        )
        assert failures - before >= inf.unhealthy_after
        assert "configmaps" in (inf.problem() or "")
        # Still retried: the failures go on being counted while it fails.
        await until(lambda: _more_failures(code, failures), what="list/watch still being retried")
        sim.faults.update("watch-cut=seconds:0.2@configmaps")
        await until(ready, what="readiness to recover")


RBAC = "/apis/rbac.authorization.k8s.io/v1/namespaces/default"


async def test_a_cache_that_lost_its_permission_fails_readiness_until_it_is_back() -> None:
    """The permanent case: the operator's RoleBinding is removed (403 on every list and watch).
    It is retried, counted under 403 and fails readiness; once the binding is back, it heals."""
    sim = SimServer(rbac=True, bookmark_interval=0.2, faults="watch-cut=seconds:0.2@configmaps")
    await sim.start()
    admin = Client(sim.url, token=sim.admin_token, qps=0, timeout=10)
    role = {
        "metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]}],
    }
    binding = {
        "metadata": {"name": "operator-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": NS}],
    }
    try:
        await admin.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts",
                            body={"metadata": {"name": "operator"}})  # fmt: skip
        token = (
            await admin.request(
                "POST",
                f"/api/v1/namespaces/{NS}/serviceaccounts/operator/token",
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"},
            )
        )["status"]["token"]
        await admin.request("POST", f"{RBAC}/roles", body=role)
        await admin.request("POST", f"{RBAC}/rolebindings", body=binding)
        async with Client(sim.url, token=token, qps=0, timeout=10) as client:
            manager = Manager(client, metrics_addr="0", health_addr="127.0.0.1:0")
            inf = manager.informers.informer(CONFIGMAPS, namespace=NS)
            inf.backoff.initial = 0.02
            inf.backoff.maximum = 0.1
            before = sample(
                "nodeops_informer_list_watch_failures_total", resource="configmaps", error="403"
            )
            async with running(manager), aiohttp.ClientSession() as http:

                async def ready() -> bool:
                    return await _readyz(http, manager) == 200

                async def unready() -> bool:
                    return await _readyz(http, manager) == 500

                await until(ready, what="ready")
                await admin.request("DELETE", f"{RBAC}/rolebindings/operator-reads")
                await until(unready, what="readiness to fail")
                assert "forbidden" in (inf.problem() or "")
                failures = sample(
                    "nodeops_informer_list_watch_failures_total", resource="configmaps", error="403"
                )
                assert failures - before >= inf.unhealthy_after
                await until(lambda: _more_failures("403", failures), what="retried still")
                await admin.request("POST", f"{RBAC}/rolebindings", body=binding)
                await until(ready, what="readiness to recover")
    finally:
        await admin.close()
        await sim.stop()


async def _more_failures(code: str, than: float) -> bool:
    now = sample("nodeops_informer_list_watch_failures_total", resource="configmaps", error=code)
    return now > than


# ---------------------------------------------------------------------- supervision


class Counting:
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        self.seen.append(request.name)
        return None


async def test_dead_informers_and_controllers_are_restarted(client: Client, sim: SimServer) -> None:
    manager = Manager(client, metrics_addr="0", health_addr="127.0.0.1:0", restart_backoff=2)
    inf = manager.informers.informer(CONFIGMAPS)
    rec = Counting()
    ctl = Controller("revived", rec).for_(inf)
    manager.add(ctl)
    died = sample("nodeops_manager_task_failures_total", kind="informer", name="configmaps")
    async with running(manager) as task, aiohttp.ClientSession() as http:

        async def ready() -> bool:
            return await _readyz(http, manager) == 200

        async def unready() -> bool:
            return await _readyz(http, manager) == 500

        await until(ready, what="ready")
        assert inf.task is not None and ctl.task is not None
        inf.task.cancel()  # the cache's task dies under everyone's feet
        ctl.task.cancel()  # and so do the controller's workers
        await until(unready, what="readiness to show the dead tasks")
        await until(ready, timeout=30, what="the restarts")
        await client.create(CONFIGMAPS, {"metadata": {"name": "after"}}, NS)
        await until(lambda: _has(rec.seen, "after"), what="a reconcile after the restarts")
        assert not task.done()
    assert (
        sample("nodeops_manager_task_failures_total", kind="informer", name="configmaps")
        == died + 1
    )


async def _has(items: list[str], item: str) -> bool:
    return item in items


async def test_a_task_that_keeps_dying_stops_the_process(client: Client, sim: SimServer) -> None:
    manager = Manager(
        client, metrics_addr="0", health_addr="0", restart_limit=2, restart_backoff=0.01
    )
    attempts: list[int] = []

    async def crashing(stop: asyncio.Event) -> None:
        attempts.append(1)
        raise RuntimeError("the cloud poller crashed")

    manager.add_runnable(crashing, name="poller")
    assert await asyncio.wait_for(manager.run(), 30) == EXIT_FAILED
    assert len(attempts) == 3  # the first run and two restarts


async def test_a_runnable_that_recovers_keeps_the_process(client: Client, sim: SimServer) -> None:
    manager = Manager(client, metrics_addr="0", health_addr="0", restart_backoff=0.01)
    attempts: list[int] = []
    serving = asyncio.Event()

    async def flaky(stop: asyncio.Event) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("the cloud API hiccuped")
        serving.set()
        await stop.wait()

    manager.add_runnable(flaky, name="flaky")
    async with running(manager) as task:
        await asyncio.wait_for(serving.wait(), 15)
        manager.stop()
        assert await asyncio.wait_for(task, 15) == 0
