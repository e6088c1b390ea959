"""`kubernikus.yaml`: how often to look at nodes and how patiently to drain them.

The file is the one the reference Kubernikus controller reads, key for key, so an operator can
point nodeops at it unchanged:

    intervals:
      requeue: 30s
      podDeletion: {period: 20s, timeout: 5m}
      podEviction: {period: 20s, timeout: 5m, force: false}
    cloudProviderSecret: {name: cloud-config, namespace: kube-system}

`removeNode` is ours (the reference leaves the Node to the cloud controller manager). Every
mistake stops startup as `FILE:LINE: field: reason`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from nodeops.api.configfile import GoDuration, load_config_file

__all__ = [
    "CloudProviderSecret",
    "EvictionParameters",
    "Intervals",
    "KubernikusConfig",
    "WaitParameters",
    "load_kubernikus_config",
]


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be a positive duration")
    return value


Positive = Annotated[GoDuration, AfterValidator(_positive)]


class _Model(BaseModel):
    """camelCase keys as in the reference's file; an unknown key is a typo, not an extension."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class WaitParameters(_Model):
    """How often to look again (`period`) and after how long to call it stuck (`timeout`)."""

    period: Positive
    timeout: Positive


class EvictionParameters(WaitParameters):
    force: bool = Field(
        default=False,
        description="Delete pods that are still terminating podDeletion.timeout after their "
        "grace period ended (grace 0). Evictions themselves always respect "
        "PodDisruptionBudgets.",
    )


class Intervals(_Model):
    requeue: Positive
    pod_deletion: WaitParameters
    pod_eviction: EvictionParameters


def _secret_part(value: str) -> str:
    return value.strip()


class CloudProviderSecret(_Model):
    """A Secret holding the OpenStack credentials, read through the API at runtime.

    Key `cloudprovider.conf` (a `[Global]` section, as the cluster's own `cloud-config`
    Secret holds it) or `clouds.yaml` (with `cloud` naming the entry to use).
    """

    name: Annotated[str, AfterValidator(_secret_part)] = ""
    namespace: Annotated[str, AfterValidator(_secret_part)] = ""
    cloud: str | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> CloudProviderSecret:
        if bool(self.name) != bool(self.namespace):
            missing = "namespace" if self.name else "name"
            raise ValueError(f"set both name and namespace (or neither); {missing} is empty")
        return self

    @property
    def configured(self) -> bool:
        return bool(self.name and self.namespace)


class KubernikusConfig(_Model):
    intervals: Intervals
    cloud_provider_secret: CloudProviderSecret = Field(default_factory=CloudProviderSecret)
    remove_node: bool = Field(
        default=True,
        description="Delete the Node object once its server is gone, rather than leaving that "
        "to the cloud controller manager.",
    )


def load_kubernikus_config(path: str | Path) -> KubernikusConfig:
    """Read and validate the file; raises `ConfigFileError` (`FILE:LINE: ...` per problem)."""
    return load_config_file(path, KubernikusConfig)
