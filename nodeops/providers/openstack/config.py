"""Settings of the `openstack` provider (`providers.openstack` in the operator configuration).

Credentials are named here, never held: a clouds.yaml cloud, or the cloudprovider.conf the
cluster's OpenStack cloud controller manager already reads, so the secret has one home.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nodeops.providers.retry import RetryPolicy

__all__ = ["KEY", "NAME", "OpenStackConfig"]

NAME: Final = "openstack"
"""The provider's name in the registry and the scheme of its nodes' provider IDs."""
KEY: Final = f"providers.{NAME}"
"""Where the provider's settings live, so every configuration error names its key."""


class OpenStackConfig(BaseModel):
    """Configuration block of the `openstack` provider.

    Exactly one credential source: `cloud` (a clouds.yaml entry) or `cloudprovider_conf`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cloud: str | None = Field(
        default=None, description="Name of the cloud in clouds.yaml to authenticate as."
    )
    clouds_yaml: Path | None = Field(
        default=None,
        description="clouds.yaml to read `cloud` from; unset means the standard locations "
        "(./clouds.yaml, ~/.config/openstack/, /etc/openstack/).",
    )
    cloudprovider_conf: Path | None = Field(
        default=None,
        description="cloudprovider.conf whose [Global] section holds the credentials "
        "(auth-url, username, password, domain-name, tenant-id, region, ...).",
    )
    region: str | None = Field(
        default=None, description="Region to use, overriding the one of the credential source."
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    poll_interval: float = Field(
        default=2.0, gt=0, description="Between checks while waiting for a server to go."
    )
    max_workers: int = Field(
        default=4, ge=1, le=64, description="Threads running blocking SDK calls."
    )

    @field_validator("cloud", "region")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty (leave the key out instead)")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> OpenStackConfig:
        if (self.cloud is None) == (self.cloudprovider_conf is None):
            raise ValueError(
                "set exactly one of `cloud` (a clouds.yaml cloud) and `cloudprovider_conf` "
                "(a file with a [Global] section)"
            )
        if self.clouds_yaml is not None and self.cloud is None:
            raise ValueError("`clouds_yaml` needs `cloud`, the name of the cloud to use in it")
        return self
