"""The esx controller's settings: `nodeops run --controllers esx --esx-<field> ...`.

Each field is a flag `--esx-<field>` and an environment variable `NODEOPS_ESX_<FIELD>`. The
reference's `config/esx.yaml` maps onto them (see docs/esx.md): `vCenters.templateUrl` is
`vcenter_url` (one vCenter per operator), `vCenters.credentials` is the file named by
`credentials_file`, `vCenters.insecure` is `insecure`, `intervals.check.period` is
`check_interval`, `intervals.vmShutdown.timeout` is `shutdown_timeout`,
`intervals.podEviction.period` is `eviction_period`. Durations take `90s`, `5m` or seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nodeops.api.settingduration import SettingDuration
from nodeops.controllers.esx.keys import Compat

__all__ = ["EsxSettings"]


class EsxSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    vcenter_url: str = Field(
        default="",
        description="The vCenter's URL, https://vcenter.example.com (the SDK path /sdk is "
        "added when no path is given); required",
    )
    credentials_file: Path = Field(
        default=Path("/etc/nodeops-esx/credentials.yaml"),
        description="A YAML file with username and password, mounted from a Secret; read at "
        "every login, so a rotated Secret is picked up",
    )
    ca_file: Path | None = Field(
        default=None,
        description="PEM CA bundle that signs the vCenter's certificate; the system's CAs "
        "when not given",
    )
    insecure: bool = Field(
        default=False, description="skip verifying the vCenter's certificate (tests only)"
    )
    match_by: Literal["providerID", "name"] = Field(
        default="providerID",
        description="how a node finds its VM: providerID (vsphere://<VM BIOS UUID>, as the "
        "vSphere cloud provider sets it) or name (the VM's name equals the node's)",
    )
    check_interval: SettingDuration = Field(
        default=60.0, gt=0, description="between vCenter inventory polls"
    )
    shutdown_timeout: SettingDuration = Field(
        default=120.0,
        ge=0,
        description="how long a guest OS gets to shut down before its VM is powered off",
    )
    timeout: SettingDuration = Field(
        default=30.0, gt=0, description="how long one vCenter call may take"
    )
    eviction_period: SettingDuration = Field(
        default=5.0,
        gt=0,
        description="between drain passes while evictions are refused (a "
        "PodDisruptionBudget without room)",
    )
    compat: Compat | None = Field(
        default=None,
        description="sapcc: the reference's cloud.sap/ label and annotation keys",
    )
    key_prefix: str = Field(
        default="nodeops.dev/", description="label/annotation prefix without compat"
    )
    workers: int = Field(default=5, ge=1, le=100, description="nodes reconciled at once")

    @field_validator("vcenter_url")
    @classmethod
    def _url(cls, value: str) -> str:
        value = value.strip()
        if value and not value.startswith(("https://", "http://")):
            raise ValueError("must start with https:// (or http:// for a test vCenter)")
        return value
