"""The maintenance controller's settings: `nodeops run --maintenance-<field>` /
`NODEOPS_MAINTENANCE_<FIELD>`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from nodeops.api.settingduration import SettingDuration

__all__ = ["MaintenanceSettings"]


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
    reload_interval: SettingDuration = Field(5.0, gt=0, description="between looks at the config")
