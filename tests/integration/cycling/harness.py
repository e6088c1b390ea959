"""A simulated cluster with the cycling controllers running, for the cycling integration tests.

Built with the demo's `World` (the same cluster and manager wiring `nodeops demo` uses), with a
scenario each test chooses, and checked with the simulator's own record.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from nodeops.controllers.cycling.resources import CYCLENODESTATUSES
from nodeops.demo.world import OPERATOR_NAMESPACE, World, WorldOptions
from nodeops.kube.resources import NODES
from nodeops.sim.scenario import Scenario
from tests.waiting import until

NS = OPERATOR_NAMESPACE


def request(name: str, groups: list[str], **spec: Any) -> dict[str, Any]:
    settings = {"method": "Drain", "concurrency": 2, **spec.pop("cycleSettings", {})}
    body: dict[str, Any] = {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "CycleNodeRequest",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeGroupName": groups[0],
            "selector": {"matchLabels": {"role": "worker"}},
            "cycleSettings": settings,
            **spec,
        },
    }
    if len(groups) > 1:
        body["spec"]["nodeGroupsList"] = groups[1:]
    return body


@asynccontextmanager
async def world(
    scenario: Scenario, *, time_scale: float = 40.0, **options: Any
) -> AsyncIterator[World]:
    w = World(WorldOptions(scenario=scenario, time_scale=time_scale, **options))
    await w.start()
    try:
        yield w
    finally:
        await w.stop()


async def wait_phase(
    w: World, name: str, phases: str | tuple[str, ...], timeout: float = 120.0
) -> dict[str, Any]:
    wanted = (phases,) if isinstance(phases, str) else phases

    async def check() -> dict[str, Any] | None:
        obj = await w.request(name)
        if obj is not None and (obj.get("status") or {}).get("phase") in wanted:
            return obj
        return None

    try:
        return await until(check, timeout=timeout, what=f"{name} in {wanted}")
    except AssertionError:
        obj = await w.request(name)
        raise AssertionError(
            f"{name} never reached {wanted}; status: {(obj or {}).get('status')}"
        ) from None


async def children(w: World, name: str) -> list[dict[str, Any]]:
    assert w.client is not None
    items, _ = await w.client.list(CYCLENODESTATUSES, NS, label_selector=f"name={name}")
    return items


async def nodes(w: World) -> list[dict[str, Any]]:
    assert w.client is not None
    items, _ = await w.client.list(NODES)
    return items


def cloud_groups(w: World) -> Mapping[str, Any]:
    return w.sim.cloud.state.groups


def scenario(nodes: int = 4, groups: int = 1, **changes: Any) -> Scenario:
    """The demo's cluster, small and fast, with `changes` applied to its scenario document
    (a callable value is given the current value and returns the new one)."""
    from nodeops.demo.scenario import demo_scenario

    base = demo_scenario(nodes, groups=groups, boot_seconds=30, grace_seconds=2)
    doc = base.model_dump(by_alias=True, mode="json", exclude_none=True)
    for key, value in changes.items():
        doc[key] = value(doc.get(key)) if callable(value) else value
    return Scenario.model_validate(doc)


def blocking_budget(workloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The api Deployment's budget allows no disruption at all."""
    out = []
    for w in workloads:
        if w["name"] == "api":
            w = {**w, "pdb": {"minAvailable": w["replicas"]}}
        out.append(w)
    return out


async def instance_states(w: World) -> dict[str, tuple[str | None, str]]:
    """instance id -> (its node group or None, lifecycle state)."""
    return {i.id: (i.group, i.lifecycle) for i in w.sim.cloud.state.instances.values()}


def assert_clean(all_nodes: list[dict[str, Any]]) -> None:
    """No node is left cordoned, held by our finalizer, or tainted or labelled by cycling."""
    from nodeops.controllers.cycling.nodes import has_marks

    for node in all_nodes:
        assert not has_marks(node), node["metadata"]["name"]
