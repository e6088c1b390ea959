"""A simulated cluster with the cycling controllers running, for the cycling integration tests.

Built with the demo's `World` (the same cluster and manager wiring `nodeops demo` uses), with a
scenario each test chooses, and checked with the simulator's own record.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson

from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, CYCLENODESTATUSES
from nodeops.demo.world import OPERATOR_NAMESPACE, World, WorldOptions
from nodeops.kube.resources import EVENTS, NODES, Resource
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


def on_write(
    w: World,
    resource: Resource,
    fn: Callable[[str, dict[str, Any], dict[str, Any] | None], None],
) -> None:
    """Call `fn(event_type, object, previous)` for every write of `resource` the simulated API
    server stores, in order, as it stores it (`previous` is None for ADDED and DELETED, whose
    object is the final state): what a test checks this way no polling can miss."""
    key = (resource.group, resource.plural)

    def hook(written: tuple[str, str], ev: Any) -> None:
        if written != key:
            return
        prev = None if ev.prev is None or ev.type != "MODIFIED" else orjson.loads(ev.prev.raw)
        fn(ev.type, orjson.loads(ev.entry.raw), prev)

    w.sim.server.store.write_hooks.append(hook)


@dataclass(frozen=True)
class Transition:
    kind: str
    name: str
    uid: str
    previous: str
    phase: str
    message: str


class Transitions:
    """Every phase change of every CycleNodeRequest and CycleNodeStatus, from the writes the
    API server stored."""

    def __init__(self, w: World) -> None:
        self.seen: list[Transition] = []
        on_write(w, CYCLENODEREQUESTS, self._on)
        on_write(w, CYCLENODESTATUSES, self._on)

    def _on(self, kind: str, obj: dict[str, Any], prev: dict[str, Any] | None) -> None:
        if kind == "DELETED":
            return
        status = obj.get("status") or {}
        phase = str(status.get("phase") or "")
        previous = str(((prev or {}).get("status") or {}).get("phase") or "")
        if phase and phase != previous:
            meta = obj["metadata"]
            self.seen.append(
                Transition(
                    obj["kind"],
                    meta["name"],
                    meta["uid"],
                    previous,
                    phase,
                    str(status.get("message") or ""),
                )
            )

    def of(self, name: str) -> list[str]:
        return [t.phase for t in self.seen if t.name == name]


WARNING_PHASES = ("Healing", "Failed")


async def assert_every_transition_is_an_event(w: World, transitions: Transitions) -> None:
    """Each phase change has its Event on the object, as `kubectl describe` lists them: a
    Normal one named after the phase, or for a failure a Warning one whose note is the failure
    message; repeats of the same event count in its series."""
    assert w.client is not None
    assert transitions.seen, "no transitions recorded"

    async def matched() -> list[str]:
        assert w.client is not None
        items, _ = await w.client.list(EVENTS, NS)
        events = [e for e in items if e.get("action") == "Transition"]
        problems = []
        for uid in {t.uid for t in transitions.seen}:
            mine = [t for t in transitions.seen if t.uid == uid]
            theirs = [e for e in events if (e.get("regarding") or {}).get("uid") == uid]
            counted = sum(int((e.get("series") or {}).get("count") or 1) for e in theirs)
            if counted != len(mine):
                problems.append(
                    f"{mine[0].kind} {mine[0].name}: {len(mine)} transitions "
                    f"{[t.phase for t in mine]}, {counted} events "
                    f"{[(e.get('reason'), e.get('note')) for e in theirs]}"
                )
                continue
            for t in mine:
                if not any(_describes(e, t) for e in theirs):
                    problems.append(f"no event for {t}: {[_brief(e) for e in theirs]}")
        return problems

    async def none_left() -> bool:
        return not await matched()

    try:
        await until(none_left, timeout=30, what="an event for every transition")
    except AssertionError:
        raise AssertionError("\n".join(await matched())) from None


def _describes(event: Mapping[str, Any], t: Transition) -> bool:
    if t.phase in WARNING_PHASES:
        return (
            event.get("type") == "Warning"
            and bool(event.get("reason"))
            and bool(t.message)
            and event.get("note") == t.message[:1024]
        )
    return (
        event.get("type") == "Normal"
        and event.get("reason") == t.phase
        and event.get("note") in (f"entered phase {t.phase}", t.message[:1024])
    )


def _brief(event: Mapping[str, Any]) -> tuple[Any, ...]:
    return (event.get("type"), event.get("reason"), event.get("note"))
