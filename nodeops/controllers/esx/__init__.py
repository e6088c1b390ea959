"""ESX maintenance: nodes on an ESX host that goes into maintenance are labelled, drained, shut
down and brought back.

`nodeops run --controllers esx` polls a vCenter for its hosts' maintenance state and labels
every node running on one of its VMs (`<prefix>esx-in-maintenance`, `<prefix>esx-version`).
When a host is in (or entering) maintenance and every node on it carries
`<prefix>esx-reboot-ok=true`, their nodes are cordoned and drained and their VMs shut down and
kept off, so the host can complete its maintenance; when the host leaves it, the VMs are powered
on, and once the nodes are Ready they are uncordoned and the marks removed. See docs/esx.md.

vCenter is reached with pyVmomi, the `vsphere` extra (`pip install nodeops[vsphere]`).
"""

from __future__ import annotations

from nodeops.controllers import ControllerPlugin, SetupContext
from nodeops.controllers.esx.settings import EsxSettings

__all__ = ["PLUGIN", "EsxSettings"]


async def _setup(ctx: SetupContext, settings: EsxSettings) -> None:
    from nodeops.controllers.esx.wiring import setup

    await setup(ctx, settings)


PLUGIN = ControllerPlugin(
    name="esx",
    settings=EsxSettings,
    setup=_setup,
    description="ESX host maintenance: label, drain, shut down and bring back the nodes' VMs",
)
