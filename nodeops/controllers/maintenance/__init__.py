"""The maintenance controller: SAP maintenance-controller's node state machine, as a plugin.

`nodeops run --controllers maintenance --maintenance-config ./config/maintenance.yaml`
(`--maintenance-compat sapcc` keeps the reference's `cloud.sap/` keys). The settings model and
`setup` live here; everything else is imported when the controller is set up.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from nodeops.controllers import ControllerPlugin, SetupContext


class MaintenanceSettings(BaseModel):
    """Flags `--maintenance-<field>`, environment `NODEOPS_MAINTENANCE_<FIELD>`."""

    config: str = Field("./config/maintenance.yaml", description="the maintenance.yaml to run")
    compat: Literal["sapcc"] | None = Field(
        None, description="sapcc: the reference's cloud.sap/ label and annotation keys"
    )
    key_prefix: str = Field("nodeops.dev/", description="label/annotation prefix without compat")
    api_addr: str = Field(
        ":8090", description="info API and dashboard address on the leader, 0 to disable"
    )
    reload_interval: float = Field(5.0, gt=0, description="seconds between looks at the config")


async def setup(ctx: SetupContext, settings: MaintenanceSettings) -> None:
    from nodeops.controllers.maintenance.wiring import build

    build(ctx.manager, settings)


PLUGIN = ControllerPlugin(
    name="maintenance",
    settings=MaintenanceSettings,
    setup=setup,
    description="node maintenance state machine (maintenance.yaml profiles and plugin chains)",
)
