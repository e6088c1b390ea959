"""The simulated OpenStack cloud's rules: pools keep their size, deletions take time, the
replacement runs the pool's current version."""

from __future__ import annotations

import random

import pytest

from nodeops.sim.openstack.model import (
    ACTIVE,
    BUILD,
    DELETED,
    NodePool,
    NovaError,
    OpenStackSettings,
)
from nodeops.sim.openstack.state import NovaState


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make() -> tuple[NovaState, Clock]:
    clock = Clock()
    state = NovaState(
        OpenStackSettings(shutdown_seconds=10, node_delete_seconds=5), clock, random.Random(1)
    )
    state.add_pool(NodePool("workers", size=2, kubelet_version="v1.31.4", boot_seconds=60))
    return state, clock


def test_initial_servers_are_active_and_named_after_the_pool() -> None:
    state, _ = make()
    servers = state.initial_servers("workers")
    assert [s.status for s in servers] == [ACTIVE, ACTIVE]
    assert all(s.name.startswith("kks-workers-") and len(s.name) == 17 for s in servers)
    assert all(s.provider_id == f"openstack:///{s.id}" for s in servers)
    assert state.initial_servers("workers") == []  # full already


def test_a_deleted_server_is_replaced_with_the_current_version() -> None:
    state, clock = make()
    old, _ = state.initial_servers("workers")
    state.update_pool("workers", kubelet_version="v1.32.0")
    state.delete(old.id)
    assert state.server(old.id).deleting  # still listed while it is torn down
    state.delete(old.id)  # a second delete is accepted
    state.advance()
    fresh = [s for s in state.servers.values() if s.status == BUILD]
    assert len(fresh) == 1 and fresh[0].kubelet_version == "v1.32.0"
    assert state.boots_due() == []
    clock.t += 10
    state.advance()
    assert old.status == DELETED
    with pytest.raises(NovaError) as err:
        state.server(old.id)
    assert err.value.status == 404
    # Its node is silenced, then deleted by the cloud controller manager's stand-in.
    assert state.silences_due() == [old]
    assert state.node_deletions_due() == []
    clock.t += 5
    assert state.node_deletions_due() == [old]
    state.node_gone(old.id)
    assert old.id not in state.servers
    clock.t += 45
    assert state.boots_due() == fresh
    state.booted(fresh[0].id)
    assert fresh[0].status == ACTIVE


def test_unknown_servers_and_pools_are_404() -> None:
    state, _ = make()
    with pytest.raises(NovaError):
        state.delete("00000000-0000-4000-8000-000000000000")
    with pytest.raises(NovaError):
        state.update_pool("nope", size=1)
