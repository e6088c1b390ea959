"""The manager and its controllers against the simulated API server: sources, shutdown, lease
loss, runnables, probes, events and the reconcile-result metrics."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest

from nodeops.kube import (
    EXIT_LEADERSHIP_LOST,
    EXIT_OK,
    EXIT_SYNC_FAILED,
    Client,
    Controller,
    KubeError,
    LeaderElectionConfig,
    Manager,
    ReconcileContext,
    ReconcileError,
    Request,
    Resource,
    Result,
    Stopping,
    owner_reference,
)
from nodeops.kube.errors import Conflict
from nodeops.kube.resources import CONFIGMAPS, EVENTS, LEASES, NODES, PODS, SECRETS
from nodeops.sim.server.app import SimServer
from tests.integration.kube.support import running, sample
from tests.waiting import until

NS = "default"


async def _create(client: Client, name: str, res: Resource = CONFIGMAPS) -> dict[str, Any]:
    return await client.create(res, {"metadata": {"name": name}}, NS)


# ---------------------------------------------------------------------- stop


class Blocking:
    """Blocks in reconcile until released, reporting what its context says meanwhile."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.calls: list[str] = []
        self.saw_stopping: list[bool] = []
        self.could_act: list[bool] = []
        self.stopped_by: list[str] = []

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        self.calls.append(request.name)
        self.entered.set()
        await self.release.wait()
        self.saw_stopping.append(ctx.stopping.is_set())
        self.could_act.append(ctx.may_act())
        try:
            ctx.ensure_may_act(f"terminate {request.name}")
        except Stopping as exc:
            self.stopped_by.append(str(exc))
            raise
        return None


async def test_stop_signals_in_flight_reconciles_and_drops_queued_work(
    client: Client, sim: SimServer
) -> None:
    manager = Manager(client, metrics_addr="0", health_addr="0", drain_timeout=30)
    rec = Blocking()
    ctl = Controller("stopper", rec).for_(manager.informers.informer(CONFIGMAPS))
    manager.add(ctl)
    for name in ("a", "b", "c"):
        await _create(client, name)
    errors_before = sample("controller_runtime_reconcile_errors_total", controller="stopper")
    async with running(manager) as task:
        await asyncio.wait_for(rec.entered.wait(), 15)
        manager.stop()
        # The reconcile in flight is told at once, before it finishes.
        assert ctl.stopping.is_set()
        rec.release.set()
        assert await asyncio.wait_for(task, 15) == EXIT_OK
    assert len(rec.calls) == 1  # "b" and "c" stayed queued and were not handed out
    assert rec.saw_stopping == [True] and rec.could_act == [False]
    assert rec.stopped_by and "stopping" in rec.stopped_by[0]
    # Stopping is neither success nor error.
    assert sample("controller_runtime_reconcile_errors_total", controller="stopper") == (
        errors_before
    )
    assert sample("controller_runtime_reconcile_panics_total", controller="stopper") == 0


async def test_a_lease_lost_while_draining_cancels_at_once(client: Client, sim: SimServer) -> None:
    election = LeaderElectionConfig(
        namespace=NS,
        name="drain-lease",
        identity="me",
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.2,
    )
    manager = Manager(
        client, leader_election=election, metrics_addr="0", health_addr="0", drain_timeout=120
    )
    cancelled = asyncio.Event()

    class Stuck:
        async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return None

    manager.add(Controller("stuck", Stuck()).for_(manager.informers.informer(CONFIGMAPS)))
    await _create(client, "x")
    async with running(manager) as task:
        await until(lambda: _active("stuck"), what="a reconcile in flight")
        assert manager.may_act()
        manager.stop()
        # Another replica takes the lease while we drain a reconcile that would take minutes;
        # our renewals may write it between its read and its write, so it tries again, as a
        # replica's elector would.
        for _ in range(20):
            lease = await client.get(LEASES, "drain-lease", NS)
            lease["spec"]["holderIdentity"] = "thief"
            try:
                await client.replace(LEASES, lease)
                break
            except Conflict:
                continue
        else:
            raise AssertionError("the lease could not be taken in 20 tries")
        assert await asyncio.wait_for(task, 15) == EXIT_LEADERSHIP_LOST
    assert cancelled.is_set()
    assert not manager.may_act()


async def _active(controller: str) -> bool:
    return sample("controller_runtime_active_workers", controller=controller) > 0


# ---------------------------------------------------------------------- sources


async def test_no_reconcile_before_every_source_synced(client: Client, sim: SimServer) -> None:
    await _create(client, "cm")
    await _create(client, "cm", SECRETS)
    sim.faults.update("error=500@list,watch/secrets")  # the second source cannot sync for now
    manager = Manager(client, metrics_addr="0", health_addr="0")
    configmaps = manager.informers.informer(CONFIGMAPS)
    secrets = manager.informers.informer(SECRETS)
    secrets.backoff.initial = 0.05
    seen: list[dict[str, Any] | None] = []

    class ReadsBoth:
        async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
            seen.append(secrets.get(request.name, request.namespace))
            return None

    def secret_to_configmap(obj: dict[str, Any]) -> list[Request]:
        return [Request.for_object(obj)]

    ctl = (
        Controller("both", ReadsBoth())
        .for_(configmaps)
        .watches(secrets, secret_to_configmap, on_create=False)
    )
    # Started on its own (not through the manager's cache wait): it waits for its sources.
    manager.informers.start()
    task = ctl.start()
    try:
        await asyncio.sleep(0.5)
        assert seen == []  # configmaps synced long ago, but secrets have not
        sim.faults.update("")
        await until(lambda: _len(seen), what="a reconcile")
        assert seen[0] is not None  # the secret was there to read: the view was true
    finally:
        await ctl.stop()
        await manager.informers.stop()
    assert task.done()


async def _len(items: list[Any]) -> int:
    return len(items)


async def test_sources_that_never_sync_stop_the_manager(client: Client, sim: SimServer) -> None:
    missing = Resource("example.com", "v1", "widgets", "Widget", True)  # not served: 404
    manager = Manager(client, metrics_addr="0", health_addr="0", sync_timeout=1)

    class Never:
        async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
            raise AssertionError("must not run")

    manager.add(Controller("widgets", Never()).for_(manager.informers.informer(missing)))
    assert await asyncio.wait_for(manager.run(), 30) == EXIT_SYNC_FAILED


async def test_informers_and_controllers_added_while_running(
    client: Client, sim: SimServer
) -> None:
    await _create(client, "late")
    manager = Manager(client, metrics_addr="0", health_addr="0")
    reconciled: list[str] = []

    class Records:
        async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
            reconciled.append(request.name)
            return None

    async def add_later(stop: asyncio.Event) -> None:
        # Created after run() started: the manager starts it and the controller waits for it.
        secrets = manager.informers.informer(SECRETS)
        manager.add(Controller("late", Records()).for_(secrets))

    await _create(client, "late", SECRETS)
    manager.add_runnable(add_later, name="adder", needs_leader=True)
    async with running(manager):
        await until(lambda: _len(reconciled), what="the late controller's reconcile")
    assert reconciled == ["late"]


# ---------------------------------------------------------------------- runnables and probes


async def test_runnables_probes_and_events(client: Client, sim: SimServer) -> None:
    election = LeaderElectionConfig(
        namespace=NS,
        name="run-lease",
        identity="me",
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.2,
    )
    # Someone else holds the lease for now: only runnables without leadership may run.
    await client.create(
        LEASES,
        {
            "metadata": {"name": "run-lease"},
            "spec": {"holderIdentity": "other", "leaseDurationSeconds": 3},
        },
        NS,
    )
    manager = Manager(client, leader_election=election, metrics_addr="0", health_addr="127.0.0.1:0")
    manager.informers.informer(CONFIGMAPS)
    started: list[str] = []
    stopped: list[str] = []
    leading_when_started: dict[str, bool] = {}
    gate: dict[str, str | None] = {"reason": "warming up"}

    def runnable(name: str) -> Any:
        async def run(stop: asyncio.Event) -> None:
            started.append(name)
            leading_when_started[name] = manager.leading.is_set()
            await stop.wait()
            stopped.append(name)

        return run

    manager.add_runnable(runnable("api"), name="api", needs_leader=False)
    manager.add_runnable(runnable("poller"), name="poller")
    manager.add_readiness_check("warm", lambda: gate["reason"])
    manager.add_health_check("alive", lambda: None)
    with pytest.raises(ValueError):
        manager.add_readiness_check("warm", lambda: None)

    async with running(manager) as task:
        await until(lambda: _has(started, "api"), what="the runnable without leadership")
        assert manager.health_endpoint is not None
        url = f"http://127.0.0.1:{manager.health_endpoint.port}"
        assert started == ["api"] and leading_when_started["api"] is False
        async with aiohttp.ClientSession() as http:
            assert await _probe(http, url + "/healthz") == (200, "ok")
            code, body = await _probe(http, url + "/readyz")
            assert code == 500
            assert "[-]warm failed: reason withheld" in body and "[+]informers ok" in body
            assert await _probe(http, url + "/readyz?exclude=warm") == (200, "ok")
            assert (await _probe(http, url + "/readyz/warm"))[0] == 500
            gate["reason"] = None
            assert await _probe(http, url + "/readyz") == (200, "ok")
        # The other holder's lease runs out; we lead, and the leader's runnable starts.
        await until(lambda: _has(started, "poller"), timeout=20, what="leadership")
        assert leading_when_started["poller"] is True
        manager.events.event(
            await _create(client, "evented"),
            "Normal",
            "Tested",
            "Test",
            "an event through the manager's recorder",
        )
        manager.stop()
        assert await asyncio.wait_for(task, 15) == EXIT_OK
    assert sorted(stopped) == ["api", "poller"]
    # The recorder was flushed before the manager returned ...
    items, _ = await client.list(EVENTS, NS)
    assert any(e.get("reason") == "Tested" for e in items)
    # ... and is stopped now: a late event is counted as dropped, not lost silently.
    before = sample("nodeops_events_dropped_total", reason="stopped")
    manager.events.event({"metadata": {"name": "x", "namespace": NS}}, "Normal", "Late", "T", "n")
    assert sample("nodeops_events_dropped_total", reason="stopped") == before + 1


async def _has(items: list[str], item: str) -> bool:
    return item in items


async def _probe(http: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with http.get(url) as resp:
        return resp.status, await resp.text()


# ---------------------------------------------------------------------- reconcile results


class Mixed:
    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        if request.name == "domain":
            raise ReconcileError("drain blocked by a budget")
        if request.name == "api":
            raise KubeError("the API server went away")
        if request.name == "bug":
            raise KeyError("status")
        if request.name == "stop":
            raise Stopping("not now")
        return None


async def test_only_unexpected_exceptions_count_as_panics(client: Client, sim: SimServer) -> None:
    manager = Manager(client, metrics_addr="0", health_addr="0")
    ctl = Controller("mixed", Mixed()).for_(manager.informers.informer(CONFIGMAPS))
    manager.add(ctl)
    for name in ("domain", "api", "bug", "stop"):
        await _create(client, name)

    async def each_failed_twice() -> bool:
        return all(ctl.queue.num_requeues(Request(n, NS)) >= 2 for n in ("domain", "api", "bug"))

    async with running(manager):
        await until(each_failed_twice, what="retries of every failing reconcile")
    panics = sample("controller_runtime_reconcile_panics_total", controller="mixed")
    errors_ = sample("controller_runtime_reconcile_errors_total", controller="mixed")
    assert panics >= 2  # the KeyError, every time
    assert errors_ >= 6
    # Every error beyond the bug's is a domain or API error, not a panic.
    bug_attempts = ctl.queue.num_requeues(Request("bug", NS))
    assert panics <= bug_attempts + 1
    assert ctl.queue.num_requeues(Request("stop", NS)) == 0  # Stopping is not retried


async def test_may_act_turns_false_when_the_lease_is_not_renewed_in_time(
    client: Client, sim: SimServer
) -> None:
    election = LeaderElectionConfig(
        namespace=NS,
        name="slow-lease",
        identity="me",
        lease_duration=1.5,
        renew_deadline=1,
        retry_period=0.2,
    )
    manager = Manager(client, leader_election=election, metrics_addr="0", health_addr="0")
    verdicts: list[tuple[bool, bool]] = []

    class Hog:
        async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
            before = ctx.may_act()
            # A step that holds the event loop longer than the lease: no renewal could run, so
            # another replica may lead by now, whatever this process last heard.
            time.sleep(election.lease_duration + 0.2)  # noqa: ASYNC251 (blocking is the point)
            verdicts.append((before, ctx.may_act()))
            with pytest.raises(Stopping, match="leadership"):
                ctx.ensure_may_act("delete the VM")
            return None

    manager.add(Controller("hog", Hog()).for_(manager.informers.informer(CONFIGMAPS)))
    await _create(client, "hog")
    async with running(manager):
        await until(lambda: _len(verdicts), what="the reconcile")
    assert verdicts == [(True, False)]


async def test_owned_objects_map_to_their_owner_in_its_scope(
    client: Client, sim: SimServer
) -> None:
    manager = Manager(client, metrics_addr="0", health_addr="0")
    seen: list[Request] = []

    class Records:
        async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
            seen.append(request)
            return None

    nodes = manager.informers.informer(NODES)
    pods = manager.informers.informer(PODS)
    manager.add(
        Controller("owned", Records()).for_(nodes, update_predicate=lambda a, b: False).owns(pods)
    )
    node = await client.create(NODES, {"metadata": {"name": "owner-node"}})
    async with running(manager):
        await until(lambda: _has_request(seen, Request("owner-node")), what="the node itself")
        seen.clear()
        pod = {
            "metadata": {"name": "static", "ownerReferences": [owner_reference(node)]},
            "spec": {"containers": [{"name": "c", "image": "x:1"}]},
        }
        await client.create(PODS, pod, NS)
        await until(lambda: _has_request(seen, Request("owner-node")), what="the owner")
    assert all(r.namespace is None for r in seen)


async def _has_request(seen: list[Request], request: Request) -> bool:
    return request in seen
