"""esxMaintenance: the node's ESX host is (or is not) in maintenance.

The esx controller (`--controllers esx`) polls vCenter and keeps each node's
`<prefix>esx-in-maintenance` label at `true` while its host is in or entering maintenance and
`false` otherwise; this check reads that label rather than asking vCenter again, so a profile
costs no vCenter call and sees exactly what the esx controller acts on. Its prefix is this
controller's (`--maintenance-compat sapcc`: `cloud.sap/`), which is the esx controller's when
both are given the same compat or prefix.

    check:
      - type: esxMaintenance
        name: esx
        config:
          inMaintenance: true   # false: pass while the host is out of maintenance
"""

from __future__ import annotations

from pydantic import Field

from nodeops.controllers.maintenance.plugins.base import (
    CheckResult,
    PluginConfig,
    PluginContext,
    PluginType,
)

__all__ = ["TYPES"]


class EsxMaintenanceConfig(PluginConfig):
    inMaintenance: bool = Field(
        default=True, description="pass while the host is in maintenance (false: while not)"
    )


class EsxMaintenance:
    def __init__(self, config: EsxMaintenanceConfig) -> None:
        self.config = config

    async def check(self, ctx: PluginContext) -> CheckResult:
        key = f"{ctx.keys.prefix}esx-in-maintenance"
        value = ((ctx.node.get("metadata") or {}).get("labels") or {}).get(key)
        if value is None:
            return CheckResult.blocked(
                f"no {key} label: the esx controller has not seen this node's host "
                "(not running, or the node is no VM of its vCenter)"
            )
        in_maintenance = value == "true"
        if in_maintenance == self.config.inMaintenance:
            return CheckResult.ok(esx_in_maintenance=value)
        wanted = "in" if self.config.inMaintenance else "out of"
        return CheckResult.blocked(
            f"the node's ESX host is not {wanted} maintenance ({key}={value})"
        )


TYPES = [
    PluginType(
        "check",
        "esxMaintenance",
        EsxMaintenanceConfig,
        EsxMaintenance,
        "the node's ESX host is in maintenance",
    ),
]
