"""What must hold after any roll, however often its manager crashed: checked against the
simulator's own state and record, not against what the operator reports."""

from __future__ import annotations

from collections import Counter
from typing import Any

from nodeops.demo.world import World
from nodeops.kube.resources import NODES
from nodeops.sim.cloud.model import DETACHED, DETACHING, IN_SERVICE, TERMINATED, TERMINATING
from tests.integration.cycling.harness import assert_clean


async def assert_roll_invariants(w: World, *, original: set[str], desired: dict[str, int]) -> None:
    """Every original instance terminated exactly once and replaced exactly once, none left
    detached or orphaned, no node left cordoned or marked, no budget ever violated."""
    state = w.sim.cloud.state
    assert w.client is not None
    instances = state.instances
    # No instance is running outside every group (orphaned or left detached).
    loose = [
        i.id for i in instances.values() if i.group is None and i.lifecycle in (DETACHED, DETACHING)
    ]
    assert loose == [], f"instances left detached: {loose}"
    # Every original instance is gone; every group is back at its size with new instances.
    survivors = [
        iid
        for iid in original
        if iid in instances and instances[iid].lifecycle not in (TERMINATING, TERMINATED)
    ]
    assert survivors == [], f"original instances still running: {survivors}"
    for name, size in desired.items():
        group = state.groups[name]
        members = [instances[i] for i in group.members]
        in_service = [m for m in members if m.lifecycle == IN_SERVICE]
        assert len(in_service) == size == group.desired, (name, len(in_service), group.desired)
        assert not {m.id for m in members} & original
    # Nothing was replaced twice: one new instance per original one (a replacement terminated
    # by mistake, or an old instance terminated while still in its group, shows as more).
    launched = Counter(i.origin for i in instances.values() if i.id not in original)
    terminated_new = [
        i.id
        for i in instances.values()
        if i.id not in original and i.lifecycle in (TERMINATING, TERMINATED)
    ]
    assert terminated_new == [], f"replacements terminated: {terminated_new}"
    for name, size in desired.items():
        assert launched[name] == size, (name, launched[name], size)
    nodes: list[dict[str, Any]]
    nodes, _ = await w.client.list(NODES)
    assert_clean(nodes)
    assert w.record.violations == [], w.record.violations
