"""A cluster kept full of placeholder pods, as an autoscaler's overprovisioning keeps one: for
the rehearsal's benchmark (`--placeholders`) and the tests of rolls of such clusters."""

from __future__ import annotations

import asyncio

from nodeops.demo.world import World
from nodeops.kube.resources import DEPLOYMENTS, NODES, PODS, PRIORITYCLASSES
from nodeops.sim.cluster.quantity import cpu_millis

PLACEHOLDER_CPU_MILLIS = 500


async def fill_with_placeholders(
    w: World, waiting: int = 4, cpu_millis_each: int = PLACEHOLDER_CPU_MILLIS
) -> int:
    """Placeholders of priority -1 (`cpu_millis_each` each) in every node's spare room, and
    `waiting` more that find none; returns how many run."""
    assert w.client is not None
    used: dict[str, int] = {}
    for p in (await w.client.list(PODS))[0]:
        for c in p["spec"]["containers"]:
            requests = (c.get("resources") or {}).get("requests") or {}
            node_name = p["spec"].get("nodeName") or ""
            used[node_name] = used.get(node_name, 0) + cpu_millis(requests.get("cpu", "0"))
    room = sum(
        (cpu_millis(n["status"]["allocatable"]["cpu"]) - used.get(n["metadata"]["name"], 0))
        // cpu_millis_each
        for n in (await w.client.list(NODES))[0]
    )
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": -1}
    await w.client.create(PRIORITYCLASSES, {**pc, "metadata": {"name": "headroom"}})
    container = {
        "name": "pause",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": f"{cpu_millis_each}m", "memory": "1Mi"}},
    }
    template = {
        "metadata": {"labels": {"app": "headroom"}},
        "spec": {
            "priorityClassName": "headroom",
            "terminationGracePeriodSeconds": 0,
            "containers": [container],
        },
    }
    headroom = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "headroom", "namespace": "default"},
        "spec": {
            "replicas": room + waiting,
            "selector": {"matchLabels": {"app": "headroom"}},
            "template": template,
        },
    }
    await w.client.create(DEPLOYMENTS, headroom, "default")

    async with asyncio.timeout(w.clock.wall_seconds(120)):
        while True:  # the cluster's own pace; nothing to watch for but its pods
            pods, _ = await w.client.list(PODS, "default", label_selector="app=headroom")
            bound = [p for p in pods if p["spec"].get("nodeName")]
            if len(pods) == room + waiting and len(bound) == room:
                return room
            await asyncio.sleep(0.05)
