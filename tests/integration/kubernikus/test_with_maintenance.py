"""The seed's full flatcar + kubelet example end to end: the maintenance controller and the
kubernikus controller in one operator (as `nodeops run --controllers maintenance,kubernikus`
with `--*-compat sapcc`), against a simulated Kubernikus cluster whose three nodes run an
outdated kubelet.

Each node goes outdated kubelet -> kubelet-needs-update -> maintenance-required ->
in-maintenance (maxMaintenance and stagger let one through; delete_node sets the label) ->
cordoned, drained, VM deleted, Node removed -> the pool's replacement registers with the new
kubelet, carries the pool's maintenance profile, gets no needs-update label and starts
operational. Never two nodes at once.

The example file is the reference's, changed only where a test must: the Slack API points at a
local stand-in, and the requeue interval and the stagger duration are seconds, not minutes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nodeops.controllers import SetupContext
from nodeops.controllers.kubernikus import PLUGIN as KUBERNIKUS
from nodeops.controllers.kubernikus import KubernikusSettings
from nodeops.controllers.maintenance import PLUGIN as MAINTENANCE
from nodeops.controllers.maintenance import MaintenanceSettings
from nodeops.kube import Client, Informer, Manager
from nodeops.kube.resources import DEPLOYMENTS, NODES, PODS
from tests.integration.maintenance.servers import slack_server
from tests.repo import ROOT

from .conftest import NEW, OLD, Env

pytestmark = [
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK50Warning"),
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK60Warning"),
]

EXAMPLE = ROOT / "examples" / "maintenance" / "kubernikus.yaml"
PROFILE = "cloud.sap/maintenance-profile"
STATE = "cloud.sap/maintenance-state"
DELETE = "cloud.sap/delete-node"
OUTDATED = "cloud.sap/kubelet-needs-update"


def example(slack_url: str) -> str:
    text = EXAMPLE.read_text()
    assert text.count("requeue: 60s") == 1 and text.count("duration: 8m") == 1
    text = text.replace("requeue: 60s", "requeue: 1s").replace("duration: 8m", "duration: 3s")
    return text.replace('token: "token"', f'token: "token"\n      url: "{slack_url}/api/"')


class Watcher:
    """Every state the API server's node list went through, checked as it happens."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.busiest = 0
        self.deleting: list[str] = []
        self.states: dict[str, list[str]] = {}

    def seen(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        self.nodes[name] = node
        labels = node["metadata"].get("labels") or {}
        states = self.states.setdefault(name, [])
        if labels.get(STATE) and (not states or states[-1] != labels[STATE]):
            states.append(labels[STATE])
        if labels.get(DELETE) == "true" and name not in self.deleting:
            self.deleting.append(name)
        busy = [
            n
            for n, obj in self.nodes.items()
            if (obj["metadata"].get("labels") or {}).get(STATE) == "in-maintenance"
            or (obj["metadata"].get("labels") or {}).get(DELETE) == "true"
        ]
        self.busiest = max(self.busiest, len(busy))

    def gone(self, node: dict[str, Any]) -> None:
        self.nodes.pop(node["metadata"]["name"], None)


async def test_outdated_kubelets_are_replaced_one_node_at_a_time(env: Env, tmp_path: Path) -> None:
    original = await env.nodes()
    for name in original:
        await env.label(name, PROFILE, "flatcar--kubelet")
    env.sim.openstack.state.pools["workers"].labels[PROFILE] = "flatcar--kubelet"
    # Something to drain: the pods of a Deployment, rescheduled as nodes go.
    await env.client.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "c", "image": "nginx:1.27"}],
                    },
                },
            },
        },
        "default",
    )
    watcher = Watcher()
    observer = Informer(env.client, NODES)
    observer.add_handler(
        on_add=watcher.seen, on_update=lambda _old, new: watcher.seen(new), on_delete=watcher.gone
    )
    observer.start()
    async with slack_server() as slack:
        config = tmp_path / "maintenance.yaml"
        config.write_text(example(slack.url))
        client = Client(env.sim.server.url, token=env.sim.server.admin_token, qps=0)
        manager = Manager(client, metrics_addr="0", health_addr="0", drain_timeout=2)
        ctx = SetupContext(manager=manager, namespace="nodeops-system")
        await MAINTENANCE.setup(
            ctx,
            MaintenanceSettings(
                config=str(config), compat="sapcc", api_addr="0", reload_interval=0.5
            ),
        )
        await KUBERNIKUS.setup(ctx, KubernikusSettings(config=env.config_file(), compat="sapcc"))
        task = asyncio.create_task(manager.run())
        try:

            async def all_replaced() -> dict[str, dict[str, Any]] | None:
                current = await env.nodes()
                if len(current) != 3 or set(current) & set(original):
                    return None
                settled = all(
                    n["status"]["nodeInfo"]["kubeletVersion"] == NEW
                    and n["metadata"]["labels"].get(STATE) == "operational"
                    for n in current.values()
                )
                return current if settled else None

            final = await env.wait(all_replaced, "every node replaced", timeout=240)
        finally:
            manager.stop()
            await asyncio.wait_for(task, 30)
            await client.close()
            await observer.stop()

    # One node at a time, each of the outdated ones once, in the order the profile chose.
    assert watcher.busiest == 1
    assert sorted(watcher.deleting) == sorted(original)
    for name in original:
        assert watcher.states[name][-2:] == ["maintenance-required", "in-maintenance"], name
    for name in final:
        assert watcher.states[name] == ["operational"], name
    for node in final.values():
        labels = node["metadata"]["labels"]
        assert labels[PROFILE] == "flatcar--kubelet"
        assert OUTDATED not in labels and DELETE not in labels
        assert not node["spec"].get("unschedulable")
    # Their servers are gone; the pool runs three new ones; the pods run on the new nodes.
    servers = env.sim.openstack.state.listed()
    assert {s.name for s in servers} == set(final)
    assert all(s.kubelet_version == NEW for s in servers)
    pods, _ = await env.client.list(PODS, "default", label_selector="app=web")
    assert {p["spec"].get("nodeName") for p in pods} <= set(final)
    assert OLD not in {n["status"]["nodeInfo"]["kubeletVersion"] for n in final.values()}
    # The kubelet profile announced each replacement in its Slack thread.
    assert any("will be replaced for kubelet update" in t for t in slack.texts())
