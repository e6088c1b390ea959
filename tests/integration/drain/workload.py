"""Workloads and waits for the drain tests: deployments placed on a node, budgets, pods."""

from __future__ import annotations

import asyncio
from typing import Any

from nodeops.kube.client import Client
from nodeops.kube.resources import DEPLOYMENTS, NODES, PDBS, PODS

NS = "default"


def deployment(name: str, replicas: int, node: str | None = None, **pod: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": "nginx:1.27"}],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    spec.update(pod.pop("spec", {}))
    meta: dict[str, Any] = {"labels": {"app": name, **pod.pop("labels", {})}}
    if pod.get("annotations"):
        meta["annotations"] = pod["annotations"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": meta, "spec": spec},
        },
    }


def pdb(name: str, app: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": app}}, **spec},
    }


async def wait_until(predicate: Any, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def pods_on(client: Client, node: str, selector: str | None = None) -> list[dict[str, Any]]:
    items, _ = await client.list(
        PODS, field_selector=f"spec.nodeName={node}", label_selector=selector
    )
    return items


async def running(client: Client, app: str, count: int) -> None:
    async def ready() -> bool:
        items, _ = await client.list(PODS, NS, label_selector=f"app={app}")
        live = [
            p
            for p in items
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]
        return len(live) == count

    await wait_until(ready)


async def settle_pdb(client: Client, name: str, healthy: int) -> None:
    async def current() -> bool:
        obj = await client.get(PDBS, name, NS)
        return (obj.get("status") or {}).get("currentHealthy") == healthy

    await wait_until(current)


async def create_on(client: Client, node: str, *deployments: dict[str, Any]) -> None:
    """Create deployments whose pods all land on `node`, free to move anywhere afterwards:
    the other nodes are cordoned while the pods are scheduled."""
    others = [f"node-{i}" for i in range(3) if f"node-{i}" != node]
    for other in others:
        await client.patch(NODES, other, {"spec": {"unschedulable": True}})
    for dep in deployments:
        await client.create(DEPLOYMENTS, dep, NS)
    for dep in deployments:
        await running(client, dep["metadata"]["name"], dep["spec"]["replicas"])
    for other in others:
        await client.patch(NODES, other, {"spec": {"unschedulable": None}})


def bare_pod(name: str, node: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, **extra.pop("metadata", {})},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "nginx:1.27"}],
            **extra.pop("spec", {}),
        },
    }
    return body
