"""The delete-node flow end to end: cordon, drain, server deletion through Keystone + Nova, Node
removal, the pool's replacement; with a crash between steps, a server already gone, Node removal
off, a withdrawn request, and credentials that never reach a log line."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from nodeops.kube.logging import configure
from nodeops.kube.metrics import REGISTRY
from nodeops.kube.resources import DEPLOYMENTS, NODES, PDBS, PODS
from nodeops.sim import objects as gen

from .conftest import NEW, OLD, Env

pytestmark = [
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK50Warning"),
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK60Warning"),
]

NS = "default"


def keys(prefix: str) -> tuple[str, str, str]:
    return (
        f"{prefix}delete-node",
        f"{prefix}delete-node-progress",
        f"{prefix}kubelet-needs-update",
    )


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def counters() -> dict[str, float]:
    """The Kubernikus counters now, to compare with after a scenario."""
    out = {
        t: sample("nodeops_kubernikus_replacements_total", transition=t)
        for t in ("started", "completed", "cancelled")
    }
    for reason in ("DrainStalled", "DrainFailed", "DeleteServerFailed"):
        out[reason] = sample("nodeops_kubernikus_replacement_failures_total", reason=reason)
    out["evicted"] = sample(
        "nodeops_drain_evictions_total", controller="kubernikus", result="evicted"
    )
    return out


def moved(before: dict[str, float]) -> dict[str, float]:
    return {k: v - before[k] for k, v in counters().items() if v != before[k]}


def progress(node: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    if node is None:
        return None
    text = (node["metadata"].get("annotations") or {}).get(key)
    return json.loads(text) if text else None


async def deploy(env: Env, name: str, replicas: int, node: str) -> None:
    """Pods of `name`, all on `node` (the other nodes cordoned while they are scheduled)."""
    others = [n for n in await env.nodes() if n != node]
    for other in others:
        await env.client.patch(NODES, other, {"spec": {"unschedulable": True}})
    await env.client.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "c", "image": "nginx:1.27"}],
                    },
                },
            },
        },
        NS,
    )

    async def running() -> bool:
        items, _ = await env.client.list(PODS, NS, label_selector=f"app={name}")
        return len([p for p in items if p["status"].get("phase") == "Running"]) == replicas

    await env.wait(running, f"{replicas} pods of {name} running on {node}")
    for other in others:
        await env.client.patch(NODES, other, {"spec": {"unschedulable": None}})


async def pods_on(env: Env, node: str) -> list[str]:
    items, _ = await env.client.list(PODS, field_selector=f"spec.nodeName={node}")
    return [p["metadata"]["name"] for p in items]


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Every log line at DEBUG: ours (structlog, JSON) and every library's (stdlib logging)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    structlog.reset_defaults()
    configure("debug", "json")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=out))
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
        structlog.reset_defaults()


async def test_sapcc_keys_replace_a_node_and_credentials_stay_out_of_logs(
    env: Env, captured: io.StringIO
) -> None:
    delete, record, outdated = keys("cloud.sap/")
    await env.start(compat="sapcc")
    nodes = await env.nodes()
    victim = next(iter(nodes))
    await deploy(env, "web", 3, victim)
    await env.client.create(
        PDBS,
        {
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
        NS,
    )

    async def labelled() -> bool:
        node = await env.node(victim)
        return bool(node and node["metadata"]["labels"].get(outdated) == "true")

    await env.wait(labelled, "the outdated node labelled with the cloud.sap/ key")
    before = counters()
    steps: list[str] = []

    async def watch_steps() -> bool:
        node = await env.node(victim)
        current = progress(node, record)
        if current and (not steps or steps[-1] != current["step"]):
            steps.append(current["step"])
        return node is None

    await env.label(victim, delete, "true")
    await env.wait(watch_steps, "the node removed", timeout=90)
    assert steps[0] == "Draining"
    assert {"DeletingServer", "WaitingForServer", "RemovingNode"} & set(steps)

    # Its pods moved elsewhere; its server is gone; a replacement runs the new kubelet.
    assert await pods_on(env, victim) == []
    assert all(s.name != victim for s in env.sim.openstack.state.listed())

    async def replaced() -> dict[str, Any] | None:
        current = await env.nodes()
        fresh = [
            n
            for n in current.values()
            if n["status"]["nodeInfo"]["kubeletVersion"] == NEW
            and n["metadata"]["name"] not in nodes
        ]
        return fresh[0] if len(current) == 3 and fresh else None

    fresh = await env.wait(replaced, "the replacement node", timeout=90)
    assert outdated not in fresh["metadata"].get("labels", {})
    reasons = [e.split(":")[0] for e in await env.events(victim)]
    assert {"Draining", "Drained", "DeletingServer", "ServerDeleted"} <= set(reasons)
    # One replacement started and completed, its pods evicted by the kubernikus drain (an
    # eviction whose answer a pass stopped waiting for is not counted, hence not always 3).
    changed = moved(before)
    assert changed.pop("started") == 1 and changed.pop("completed") == 1
    assert 1 <= changed.pop("evicted") <= 3
    assert changed == {}
    assert sample("nodeops_drain_in_progress", controller="kubernikus") == 0

    async def none_in_progress() -> bool:
        return sample("nodeops_kubernikus_replacements_in_progress", step="Draining") == 0

    await env.wait(none_in_progress, "no replacement in progress in the informer")

    password = env.sim.openstack.credentials.password
    logs = captured.getvalue()
    assert "server deletion requested" in logs  # our own lines were captured
    assert password not in logs
    for event in await env.events(victim):
        assert password not in event


async def test_restart_between_recording_and_deleting_the_server(env: Env) -> None:
    delete, record, _ = keys("nodeops.dev/")
    victim = next(iter(await env.nodes()))
    env.sim.server.faults.update("error=500:1@delete/openstack/servers")
    before = counters()
    first = await env.start()
    await env.label(victim, delete, "true")

    async def stuck_at_deletion() -> bool:
        current = progress(await env.node(victim), record)
        failed = any(e.startswith("DeleteServerFailed") for e in await env.events(victim))
        return bool(current and current["step"] == "DeletingServer" and failed)

    await env.wait(stuck_at_deletion, "the server deletion recorded and refused")
    await first.crash()
    node = await env.node(victim)
    assert node is not None and node["spec"].get("unschedulable") is True

    env.sim.server.faults.update(None)
    await env.start()

    async def gone() -> bool:
        return await env.node(victim) is None

    await env.wait(gone, "the node removed by the restarted controller", timeout=90)
    assert all(s.name != victim for s in env.sim.openstack.state.listed())
    changed = moved(before)
    assert changed["started"] == 1 and changed["completed"] == 1
    assert changed["DeleteServerFailed"] >= 1


async def test_server_already_gone_and_node_kept(env: Env) -> None:
    delete, record, _ = keys("nodeops.dev/")
    # A node whose server no longer exists (and no cloud controller manager to remove it).
    orphan = gen.make_node(
        "kks-workers-orphan",
        provider_id="openstack:///0b6f3cb2-1e8f-4c2d-9a55-3a6d8c1f2e4b",
        kubelet_version=OLD,
    )
    await env.client.create(NODES, gen.for_create(orphan))
    await env.start(config=env.config_file(remove_node=False))
    await env.label("kks-workers-orphan", delete, "true")

    async def done() -> bool:
        current = progress(await env.node("kks-workers-orphan"), record)
        return bool(current and current["step"] == "ServerDeleted")

    await env.wait(done, "the flow at ServerDeleted")
    node = await env.node("kks-workers-orphan")
    assert node is not None and node["spec"]["unschedulable"] is True
    assert any(e.startswith("ServerGone") for e in await env.events("kks-workers-orphan"))
    assert len(env.sim.openstack.state.listed()) == 3  # no other server was touched


async def test_withdrawn_request_uncordons(env: Env) -> None:
    delete, record, _ = keys("nodeops.dev/")
    victim = next(iter(await env.nodes()))
    await deploy(env, "db", 2, victim)
    # No disruption allowed: the drain cannot finish.
    await env.client.create(
        PDBS,
        {
            "metadata": {"name": "db", "namespace": NS},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}},
        },
        NS,
    )
    before = counters()
    await env.start(config=env.config_file(eviction_timeout="1s"))
    await env.label(victim, delete, "true")

    async def blocked() -> bool:
        node = await env.node(victim)
        current = progress(node, record)
        stalled = [e for e in await env.events(victim) if e.startswith("DrainStalled")]
        drained = current and current["step"] == "Draining" and node["spec"].get("unschedulable")
        return bool(drained and stalled)

    await env.wait(blocked, "the drain reported stalled by the budget")
    assert len(await pods_on(env, victim)) == 2
    stalled = [e for e in await env.events(victim) if e.startswith("DrainStalled")]
    assert len(stalled) == 1 and "evictions still refused after 1s" in stalled[0]

    # The scrape says the same: a replacement draining, both pods held back by their budget.
    async def shown() -> bool:
        return (
            sample("nodeops_drain_pods_waiting_on_budget", controller="kubernikus", node=victim)
            == 2
            and sample("nodeops_kubernikus_replacements_in_progress", step="Draining") == 1
            and sample("nodeops_kubernikus_oldest_replacement_seconds") > 0
            and sample("nodeops_drain_oldest_in_progress_seconds", controller="kubernikus") > 0
        )

    await env.wait(shown, "the blocked drain in the metrics")
    assert moved(before) == {"started": 1, "DrainStalled": 1}
    await env.label(victim, delete, None)

    async def released() -> bool:
        node = await env.node(victim)
        return bool(
            node and progress(node, record) is None and not node["spec"].get("unschedulable")
        )

    await env.wait(released, "the node uncordoned and its record removed")
    assert len(env.sim.openstack.state.listed()) == 3

    # Cancelled: the drain is no longer reported, nor the replacement.
    async def gone_from_the_metrics() -> bool:
        waiting = REGISTRY.get_sample_value(
            "nodeops_drain_pods_waiting_on_budget", {"controller": "kubernikus", "node": victim}
        )
        return (
            waiting is None
            and sample("nodeops_drain_in_progress", controller="kubernikus") == 0
            and sample("nodeops_kubernikus_replacements_in_progress", step="Draining") == 0
        )

    await env.wait(gone_from_the_metrics, "the cancelled drain gone from the metrics")
    assert moved(before) == {"started": 1, "cancelled": 1, "DrainStalled": 1}
