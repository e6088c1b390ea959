"""A host's maintenance against govmomi's vCenter simulator: nothing moves until every node on
the host is reboot-ok; then drained, shut down and kept off; brought back, Ready, uncordoned
and unmarked when the host leaves maintenance; a crash in between resumes without powering a VM
twice; VMs without nodes and nodes without VMs are left alone."""

from __future__ import annotations

from nodeops.kube.resources import NODES
from tests.integration.esx.conftest import Env
from tests.integration.esx.flow import (
    IN_MAINTENANCE,
    INITIATED,
    PROGRESS,
    REBOOT_OK,
    VERSION,
    annotations_of,
    back_up,
    go_down,
    has_event,
    labelled,
    labels,
    more_polls,
    power_actions,
)
from tests.vcsim import needs_vcsim

pytestmark = needs_vcsim


async def test_nothing_moves_until_every_node_is_reboot_ok(env: Env) -> None:
    await env.start()
    await env.wait(lambda: labelled(env, "false"), "esx-in-maintenance=false on both nodes")
    nodes = await env.nodes()
    assert labels(nodes["esx-a"])[VERSION] == "6.5.0"
    assert IN_MAINTENANCE not in labels(nodes["spare"])  # no VM: left alone

    await env.vcsim.enter_maintenance(env.host)
    await env.wait(lambda: labelled(env, "true"), "esx-in-maintenance=true on both nodes")
    await env.label("esx-a", REBOOT_OK, "true")
    await more_polls(env, 5)

    nodes = await env.nodes()
    power = await env.vcsim.power()
    for name in ("esx-a", "esx-b"):
        assert not nodes[name]["spec"].get("unschedulable"), name
        assert PROGRESS not in annotations_of(nodes[name]), name
        assert power[env.vm_of[name].ref] == "poweredOn", name
    assert await env.pods_on("esx-a") or await env.pods_on("esx-b")


async def test_host_maintenance_shuts_down_and_brings_back(env: Env) -> None:
    ours = {vm.ref for vm in env.vm_of.values()}
    others = {vm.ref: vm.host for vm in await env.vcsim.vms() if vm.ref not in ours}
    assert others, "vcsim made no VM without a node"
    for host in set(others.values()) - {env.host}:
        await env.vcsim.enter_maintenance(host)  # hosts whose VMs no node runs on
    await env.start()
    await go_down(env)

    nodes = await env.nodes()
    power = await env.vcsim.power()
    for name in ("esx-a", "esx-b"):
        assert nodes[name]["spec"]["unschedulable"] is True
        assert annotations_of(nodes[name])[INITIATED] == "true"
        assert await env.pods_on(name) == [], f"{name} still runs pods"
    assert all(power[ref] == "poweredOn" for ref in others), "a VM without a node was touched"
    assert await env.vcsim.in_maintenance(env.host)
    await env.wait(lambda: has_event(env, "esx-a", "Drained: "), "the Drained event")

    nodes = await back_up(env)
    power = await env.vcsim.power()
    for name in ("esx-a", "esx-b"):
        node = nodes[name]
        assert power[env.vm_of[name].ref] == "poweredOn"
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        assert labels(node)[IN_MAINTENANCE] == "false"
        assert REBOOT_OK not in labels(node)
        assert INITIATED not in annotations_of(node)
    spare = nodes["spare"]
    assert not spare["spec"].get("unschedulable")
    assert not any(k.startswith("nodeops.dev/esx") for k in labels(spare))


async def test_a_crash_between_shutdown_and_power_on_resumes(env: Env) -> None:
    first = await env.start()
    await go_down(env)
    ons = power_actions("power_on")
    await first.crash()

    await env.vcsim.exit_maintenance(env.host)
    await env.start()
    nodes = await back_up(env)
    assert all(labels(nodes[n])[IN_MAINTENANCE] == "false" for n in ("esx-a", "esx-b"))
    assert power_actions("power_on") == ons + 2, "each VM powered on exactly once"
    power = await env.vcsim.power()
    assert all(power[env.vm_of[n].ref] == "poweredOn" for n in ("esx-a", "esx-b"))


async def test_a_node_the_reference_controller_shut_down_is_adopted(env: Env) -> None:
    """`esx-reboot-initiated=true` without a progress record: the VM is powered on once the host
    is out of maintenance, the node uncordoned when Ready."""
    vm = env.vm_of["esx-a"]
    await env.vcsim.power_off(vm.ref)
    await env.client.patch(
        NODES,
        "esx-a",
        {"metadata": {"annotations": {INITIATED: "true"}}, "spec": {"unschedulable": True}},
    )
    await env.start()

    async def back() -> bool:
        node = (await env.nodes())["esx-a"]
        return not node["spec"].get("unschedulable") and INITIATED not in annotations_of(node)

    await env.wait(back, "esx-a powered on and uncordoned")
    assert (await env.vcsim.power())[vm.ref] == "poweredOn"
    await env.wait(lambda: has_event(env, "esx-a", "Adopted: "), "the Adopted event")
