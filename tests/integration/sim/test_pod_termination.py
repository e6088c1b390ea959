"""Conformance: how the simulated kubelet ends a deleted pod, against the real API semantics.

Since 1.27 kubelet writes a deleted pod's terminal phase (Succeeded when every container exited
0, else Failed) before its final delete, and a pod with finalizers stays, terminating and
terminal, until they are removed. Controllers and drains that watch pods see exactly that.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodeops.sim import objects
from nodeops.sim.clock import Clock
from nodeops.sim.cluster import ClusterLoops
from nodeops.sim.cluster import sim_annotations as ann
from nodeops.sim.cluster.apiclient import DELETED, NODES, PODS, ApiClient, NotFound, WatchEvent
from nodeops.sim.server.app import SimServer
from tests.waiting import until

NS = "default"


class Env:
    def __init__(self, client: ApiClient, server: SimServer) -> None:
        self.client = client
        self.server = server

    async def running_pod(self, name: str, **metadata: Any) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, **metadata},
            "spec": {
                "terminationGracePeriodSeconds": 5,
                "containers": [{"name": "c", "image": "nginx:1.27"}],
            },
        }
        await self.client.create(PODS, body, NS)

        async def running() -> dict[str, Any] | None:
            pod = await self.client.get(PODS, name, NS)
            return pod if (pod.get("status") or {}).get("phase") == "Running" else None

        return await until(running, what=f"{name} running")

    async def gone(self, name: str) -> bool:
        try:
            await self.client.get(PODS, name, NS)
        except NotFound:
            return True
        return False


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    clock = Clock(50.0)
    server = SimServer(clock=clock, bookmark_interval=0.2)
    await server.start()
    client = ApiClient(server.url, server.admin_token, component="test")
    loops = ClusterLoops(server.url, server.admin_token, clock, kubelet_start_seconds=0.5)
    try:
        node = objects.make_node("node-0", now=clock.now())
        await client.create(NODES, objects.for_create(node))
        await loops.start()
        yield Env(client, server)
    finally:
        await loops.stop()
        await client.close()
        await server.stop()


async def _events_until_deleted(client: ApiClient, name: str, rv: str) -> list[WatchEvent]:
    events: list[WatchEvent] = []
    watch = client.watch(PODS, NS, resource_version=rv, field_selector=f"metadata.name={name}")
    try:
        async for event in watch:
            events.append(event)
            if event.type == DELETED:
                return events
    finally:
        await watch.aclose()
    return events


def _phase(pod: dict[str, Any]) -> str | None:
    return (pod.get("status") or {}).get("phase")


def _exit_codes(pod: dict[str, Any]) -> list[int]:
    return [
        cs["state"]["terminated"]["exitCode"]
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
        if "terminated" in (cs.get("state") or {})
    ]


@pytest.mark.parametrize(
    ("annotations", "phase", "code"),
    [({}, "Succeeded", 0), ({ann.EXIT_CODE: "137"}, "Failed", 137)],
    ids=["clean-exit", "killed"],
)
async def test_deleted_pod_reports_its_terminal_phase_before_removal(
    env: Env, annotations: dict[str, str], phase: str, code: int
) -> None:
    pod = await env.running_pod("p", annotations=annotations)
    rv = pod["metadata"]["resourceVersion"]
    watching = asyncio.create_task(_events_until_deleted(env.client, "p", rv))
    await env.client.delete(PODS, "p", NS)
    events = await asyncio.wait_for(watching, timeout=30)
    assert events[-1].type == DELETED
    final = events[-1].object
    assert final["metadata"]["deletionTimestamp"]
    assert _phase(final) == phase, final.get("status")
    assert _exit_codes(final) == [code]
    # Nothing saw the pod removed while it still claimed to be running.
    terminal_seen = [e for e in events[:-1] if _phase(e.object) == phase]
    assert terminal_seen, [(e.type, _phase(e.object)) for e in events]


async def test_finalizer_keeps_a_terminal_pod_until_removed(env: Env) -> None:
    await env.running_pod("held", finalizers=["example.com/hold"])
    await env.client.delete(PODS, "held", NS)

    async def terminal_and_released_by_kubelet() -> dict[str, Any] | None:
        pod = await env.client.get(PODS, "held", NS)
        meta = pod["metadata"]
        # Grace 0 is kubelet's final delete: the finalizer is all that keeps the pod now.
        if _phase(pod) == "Succeeded" and meta.get("deletionGracePeriodSeconds") == 0:
            return pod
        return None

    pod = await until(terminal_and_released_by_kubelet, timeout=30, what="terminal held pod")
    assert pod["metadata"]["deletionTimestamp"]
    assert pod["metadata"]["finalizers"] == ["example.com/hold"]
    assert not await env.gone("held")

    await env.client.patch(
        PODS,
        "held",
        [{"op": "remove", "path": "/metadata/finalizers"}],
        NS,
        patch_type="json",
    )
    await until(lambda: env.gone("held"), timeout=30, what="pod removed with its finalizer")


async def test_pod_deleted_before_it_started_ends_failed(env: Env) -> None:
    """A container that never ran is reported as kubelet finds it: unknown, 137, Failed."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "early",
            "namespace": NS,
            "annotations": {ann.START_SECONDS: "100000"},
            "finalizers": ["example.com/hold"],
        },
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]},
    }
    await env.client.create(PODS, body, NS)

    async def bound() -> bool:
        pod = await env.client.get(PODS, "early", NS)
        return bool(pod["spec"].get("nodeName"))

    await until(bound, what="pod bound")
    await env.client.delete(PODS, "early", NS)

    async def failed() -> dict[str, Any] | None:
        pod = await env.client.get(PODS, "early", NS)
        return pod if _phase(pod) == "Failed" else None

    pod = await until(failed, timeout=30, what="pod Failed")
    cs = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert cs["reason"] == "ContainerStatusUnknown" and cs["exitCode"] == 137


async def test_a_refused_status_write_does_not_leave_the_pod_terminating(env: Env) -> None:
    """A 409 on the kubelet's terminal-status write is the server's passing refusal as often as
    it is a new pod under the name: the kubelet reads the pod again and finishes the job."""
    await env.running_pod("p")
    env.server.faults.update("error=409@patch/pods/status")
    await env.client.delete(PODS, "p", NS)

    async def refused_twice() -> bool:
        return env.server.faults.counts()["error-409"] >= 2

    await until(refused_twice, what="the kubelet's status write refused twice")
    env.server.faults.update("")
    await until(lambda: env.gone("p"), what="p removed once the server takes the write")
