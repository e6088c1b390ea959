"""A guest that cannot be asked to shut down (the call refused, as without VMware Tools): its VM
is powered off instead, once, and the flow goes on as usual."""

from __future__ import annotations

import pytest

from nodeops.controllers.esx.metrics import POWER_ACTIONS
from tests.integration.esx.conftest import Env
from tests.integration.esx.flow import back_up, go_down, has_event
from tests.vcsim import needs_vcsim

pytestmark = needs_vcsim


@pytest.fixture
def vcsim_args() -> tuple[str, ...]:
    return ("-no-guest-shutdown",)


async def test_a_guest_that_cannot_be_asked_is_powered_off(env: Env) -> None:
    offs = POWER_ACTIONS.labels("power_off")._value.get()
    await env.start()
    await go_down(env)
    assert POWER_ACTIONS.labels("power_off")._value.get() == offs + 2
    # No guest was asked: read from this cluster's events, not from the process-wide counter,
    # which another test's controller of the same worker can move while this one runs.
    for name in ("esx-a", "esx-b"):
        assert not await has_event(env, name, "ShuttingDown: "), await env.events(name)
    await env.wait(lambda: has_event(env, "esx-a", "PoweredOff: "), "the PoweredOff event")
    nodes = await back_up(env)
    assert not nodes["esx-a"]["spec"].get("unschedulable")
