"""Kubernikus's settings: `nodeops run --kubernikus-<field>` / `NODEOPS_KUBERNIKUS_<FIELD>`."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from nodeops.controllers.kubernikus.keys import Compat

__all__ = ["KubernikusSettings"]


class KubernikusSettings(BaseModel):
    config: Path = Field(
        default=Path("config/kubernikus.yaml"),
        description="the kubernikus.yaml to run (intervals, cloudProviderSecret, removeNode)",
    )
    compat: Compat | None = Field(
        default=None, description="sapcc: the reference's cloud.sap/ label and annotation keys"
    )
    key_prefix: str = Field(
        default="nodeops.dev/", description="label/annotation prefix without compat"
    )
    cloudprovider_conf: Path = Field(
        default=Path("provider/cloudprovider.conf"),
        description="cloudprovider.conf to use when no Secret or provider is configured",
    )
    workers: int = Field(default=5, ge=1, le=100, description="nodes reconciled at once")
