"""A cluster kept full of placeholder pods, as an autoscaler's overprovisioning keeps one."""

from __future__ import annotations

from nodeops.demo.world import World
from nodeops.kube.resources import DEPLOYMENTS, NODES, PODS, PRIORITYCLASSES
from nodeops.sim.cluster.quantity import cpu_millis
from tests.waiting import until

PLACEHOLDER_CPU_MILLIS = 500


async def fill_with_placeholders(w: World, waiting: int = 4) -> int:
    """Placeholders of priority -1 (500m each) in every node's spare room, and `waiting` more
    that find none; returns how many run."""
    assert w.client is not None
    used: dict[str, int] = {}
    for p in (await w.client.list(PODS))[0]:
        for c in p["spec"]["containers"]:
            requests = (c.get("resources") or {}).get("requests") or {}
            node_name = p["spec"].get("nodeName") or ""
            used[node_name] = used.get(node_name, 0) + cpu_millis(requests.get("cpu", "0"))
    room = sum(
        (cpu_millis(n["status"]["allocatable"]["cpu"]) - used.get(n["metadata"]["name"], 0))
        // PLACEHOLDER_CPU_MILLIS
        for n in (await w.client.list(NODES))[0]
    )
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": -1}
    await w.client.create(PRIORITYCLASSES, {**pc, "metadata": {"name": "headroom"}})
    container = {
        "name": "pause",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": f"{PLACEHOLDER_CPU_MILLIS}m", "memory": "1Mi"}},
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

    async def full() -> bool:
        assert w.client is not None
        pods, _ = await w.client.list(PODS, "default", label_selector="app=headroom")
        bound = [p for p in pods if p["spec"].get("nodeName")]
        return len(pods) == room + waiting and len(bound) == room

    await until(full, timeout=30, what="the spare room full of placeholders, some waiting")
    return room
