"""The controller kit against the simulated API server: the status writer's guarded writes, one
drain pass's answers, and a channel asking for every object again."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodeops.api.crd import all_crds
from nodeops.controllers.cycling.resources import CYCLENODESTATUSES
from nodeops.controllers.kit import (
    Channel,
    Clock,
    StatusWriter,
    View,
    drain_pass,
    every_object,
    going_away,
)
from nodeops.drain.engine import Drainer
from nodeops.drain.options import DrainOptions
from nodeops.drain.sources import SharedInformers
from nodeops.kube import Client, Controller, Request, Result, errors
from nodeops.kube.controller import ReconcileContext
from nodeops.kube.informer import InformerFactory
from nodeops.kube.objects import now
from nodeops.kube.resources import CRDS, NAMESPACES, NODES, PODS
from nodeops.sim.serve import SimCluster, SimOptions
from tests.waiting import until

NS = "nodeops-system"


@pytest.fixture
async def cluster() -> AsyncIterator[Client]:
    sim = SimCluster(SimOptions(nodes=2, instant=True, time_scale=20.0))
    await sim.start()
    client = Client(sim.server.url, token=sim.server.admin_token, qps=0)
    try:
        yield client
    finally:
        await client.close()
        await sim.stop()


async def _child(client: Client) -> dict[str, Any]:
    for crd in all_crds():
        with contextlib.suppress(errors.AlreadyExists):
            await client.create(CRDS, crd)
    with contextlib.suppress(errors.AlreadyExists):
        await client.create(NAMESPACES, {"metadata": {"name": NS}})
    body = {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "CycleNodeStatus",
        "metadata": {"name": "child", "namespace": NS},
        "spec": {"nodeName": "node-0", "cycleSettings": {"method": "Drain"}},
    }
    created: dict[str, Any] = await until(
        lambda: _create(client, body), what="the CycleNodeStatus kind served", timeout=10
    )
    return created


async def _create(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    try:
        return await client.create(CYCLENODESTATUSES, body, NS)
    except errors.NotFound:
        return {}  # the kind is not served yet


class _Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def event(
        self, regarding: dict[str, Any], type_: str, reason: str, action: str, note: str
    ) -> None:
        self.seen.append((type_, reason, action))


async def test_the_status_writer_writes_what_changed_guarded_and_says_so(cluster: Client) -> None:
    client = cluster
    obj = await _child(client)
    events = _Events()
    seen: list[tuple[str, str, str, float | None]] = []
    writer = StatusWriter(
        client,
        CYCLENODESTATUSES,
        events=events,
        clock=Clock(),
        observe=lambda *transition: seen.append(transition),
        progress_condition="Blocked",
        action="Test",
    )
    view = View(obj)
    assert await writer.commit(view, {"startedTimestamp": "2026-01-01T00:00:00Z"}, phase="Pending")
    assert view.phase == "Pending" and view.time("phaseTimestamp") is not None
    assert [c["type"] for c in view.status["conditions"]] == ["Blocked"]
    assert seen == [("CycleNodeStatus", "", "Pending", None)]
    assert events.seen == [("Normal", "Pending", "Transition")]
    # Nothing changed: nothing is sent.
    rv = view.obj["metadata"]["resourceVersion"]
    assert not await writer.commit(view, {"startedTimestamp": "2026-01-01T00:00:00Z"})
    assert view.obj["metadata"]["resourceVersion"] == rv
    # A field given as None is removed; a reason without a phase change is an Event too.
    assert await writer.commit(
        view, {"startedTimestamp": None}, reason="Nudged", message="look", warning=True
    )
    stored = await client.get(CYCLENODESTATUSES, "child", NS)
    assert "startedTimestamp" not in stored["status"] and stored["status"]["message"] == "look"
    assert events.seen[-1] == ("Warning", "Nudged", "Test")
    # A write from a stale read is refused, never merged over someone else's.
    stale = View(obj)
    with pytest.raises(errors.Conflict):
        await writer.commit(stale, {"message": "from the past"})


async def test_a_condition_changed_in_place_is_sent_and_the_read_status_left_as_read(
    cluster: Client,
) -> None:
    """The writer copies no status whole: the conditions it edits are its own copy, so the
    change shows in the patch (the view's status is what the patch is computed against) and
    neither the object read nor the caller's changes are edited."""
    client = cluster
    obj = await _child(client)
    writer = StatusWriter(client, CYCLENODESTATUSES, clock=Clock(), progress_condition="Blocked")
    view = View(obj)
    assert await writer.commit(
        view, phase="Pending", condition=("Blocked", "True", "Waiting", "nodes in use")
    )
    read = await client.get(CYCLENODESTATUSES, "child", NS)
    view = View(read)
    mine = [dict(c) for c in read["status"]["conditions"]]
    given = [dict(c) for c in mine]
    # Entering a phase clears Blocked: an edit of the condition already there.
    assert await writer.commit(view, {"conditions": given}, phase="WaitingPods")
    stored = await client.get(CYCLENODESTATUSES, "child", NS)
    assert [(c["type"], c["status"]) for c in stored["status"]["conditions"]] == [
        ("Blocked", "False")
    ]
    assert read["status"]["conditions"] == mine and given == mine
    assert view.status["conditions"][0]["status"] == "False"


async def test_one_drain_pass_answers_done_wait_or_failed(cluster: Client) -> None:
    client = cluster
    drainer = Drainer(client, going_away())
    # An empty node is drained at once (and cordoned); a node that does not exist is "gone".
    empty = await drain_pass(drainer, "node-1", now())
    assert empty.done and not empty.gone and empty.progress is not None
    assert (await client.get(NODES, "node-1"))["spec"]["unschedulable"]
    gone = await drain_pass(drainer, "no-such-node", now())
    assert gone.done and gone.gone
    # A bare pod without `force` is refused by kubectl's pre-flight: failed, whatever is retried.
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare", "namespace": "default"},
        "spec": {"nodeName": "node-0", "containers": [{"name": "c", "image": "nginx"}]},
    }
    await client.create(PODS, bare, "default")
    refused = await drain_pass(Drainer(client, DrainOptions()), "node-0", now())
    assert refused.failed and refused.reason == "PreflightError"
    assert "cannot delete Pods that declare no controller" in refused.message
    # With the preset it goes: evicted, then waited for.
    first = await drain_pass(drainer, "node-0", now())
    assert first.waiting and first.error is None and "bare" in first.message

    async def drained() -> bool:
        return (await drain_pass(drainer, "node-0", now())).done

    await until(drained, what="node-0 drained")
    # Sources whose informers never sync: wait, not failed.
    factory = InformerFactory(client)
    unsynced = SharedInformers(factory, client, sync_timeout=0.1)
    caches = await drain_pass(Drainer(client, going_away(), sources=unsynced), "node-0", now())
    assert caches.waiting and caches.reason == "SourcesNotReady" and not caches.blocked


class _Nothing:
    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        return None


async def test_a_channel_asks_for_every_object_once_the_cache_has_them(cluster: Client) -> None:
    client = cluster
    factory = InformerFactory(client)
    nodes = factory.informer(NODES)
    controller = Controller("kit-channel", _Nothing()).for_(nodes)
    reload = Channel(controller, every_object(nodes))
    factory.start()
    try:
        await nodes.wait_synced()
        while len(controller.queue):  # what the first sync enqueued
            controller.queue.done(await controller.queue.get())
        reload.send("config reloaded")
        got = {(await controller.queue.get()).name for _ in range(2)}
        assert got == {"node-0", "node-1"}
    finally:
        await factory.stop()
