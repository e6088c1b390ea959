"""The maintenance controller: SAP maintenance-controller's node state machine, as a plugin.

`nodeops run --controllers maintenance --maintenance-config ./config/maintenance.yaml`
(`--maintenance-compat sapcc` keeps the reference's `cloud.sap/` keys). The settings model
(`settings.py`) and `setup` are all the top level loads; everything else is imported when the
controller is set up.
"""

from __future__ import annotations

from nodeops.controllers import ControllerPlugin, SetupContext
from nodeops.controllers.maintenance.settings import MaintenanceSettings

__all__ = ["PLUGIN", "MaintenanceSettings"]


async def setup(ctx: SetupContext, settings: MaintenanceSettings) -> None:
    from nodeops.controllers.maintenance.wiring import build

    build(ctx.manager, settings)


PLUGIN = ControllerPlugin(
    name="maintenance",
    settings=MaintenanceSettings,
    setup=setup,
    description="node maintenance state machine (maintenance.yaml profiles and plugin chains)",
)
