"""Steps the flow tests share: a host down with both nodes, and back."""

from __future__ import annotations

from typing import Any

from nodeops.controllers.esx.metrics import POLLS, POWER_ACTIONS
from tests.integration.esx.conftest import Env

IN_MAINTENANCE = "nodeops.dev/esx-in-maintenance"
REBOOT_OK = "nodeops.dev/esx-reboot-ok"
VERSION = "nodeops.dev/esx-version"
INITIATED = "nodeops.dev/esx-reboot-initiated"
PROGRESS = "nodeops.dev/esx-maintenance-progress"


def labels(node: dict[str, Any]) -> dict[str, str]:
    return dict(node["metadata"].get("labels") or {})


def annotations_of(node: dict[str, Any]) -> dict[str, str]:
    return dict(node["metadata"].get("annotations") or {})


def polls() -> float:
    return POLLS.labels("ok")._value.get()


def power_actions(action: str) -> float:
    return POWER_ACTIONS.labels(action)._value.get()


async def has_event(env: Env, node: str, start: str) -> bool:
    return any(e.startswith(start) for e in await env.events(node))


async def labelled(env: Env, value: str) -> bool:
    nodes = await env.nodes()
    return all(labels(nodes[n]).get(IN_MAINTENANCE) == value for n in ("esx-a", "esx-b"))


async def more_polls(env: Env, count: int) -> None:
    """Wait until the controller has polled vCenter `count` more times (and so reconciled every
    node with what it saw)."""
    target = polls() + count
    await env.wait(lambda: _at_least(target), f"{count} more vCenter polls")


async def _at_least(target: float) -> bool:
    return polls() >= target


async def go_down(env: Env) -> None:
    """Host in maintenance, both nodes reboot-ok: wait until both VMs are off."""
    await env.vcsim.enter_maintenance(env.host)
    await env.wait(lambda: labelled(env, "true"), "esx-in-maintenance=true on both nodes")
    for name in ("esx-a", "esx-b"):
        await env.label(name, REBOOT_OK, "true")

    async def both_off() -> bool:
        power = await env.vcsim.power()
        nodes = await env.nodes()
        return all(power[env.vm_of[n].ref] == "poweredOff" for n in ("esx-a", "esx-b")) and all(
            '"step":"Off"' in annotations_of(nodes[n]).get(PROGRESS, "") for n in ("esx-a", "esx-b")
        )

    await env.wait(both_off, "both VMs shut down and recorded Off")


async def back_up(env: Env) -> dict[str, dict[str, Any]]:
    await env.vcsim.exit_maintenance(env.host)

    async def done() -> dict[str, dict[str, Any]] | None:
        nodes = await env.nodes()
        for name in ("esx-a", "esx-b"):
            node = nodes[name]
            if node["spec"].get("unschedulable") or PROGRESS in annotations_of(node):
                return None
        return nodes

    return await env.wait(done, "both nodes uncordoned and their flow ended")
