"""Settings of the AWS provider (`providers.aws` in the operator configuration).

Credentials are deliberately not settings: they come from the standard AWS chain (environment,
shared profile, web identity / IRSA, instance role), which keeps secrets out of configuration
files and lets the same file work on a laptop and in a pod.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nodeops.providers.retry import RetryPolicy

__all__ = ["AwsConfig"]


class AwsConfig(BaseModel):
    """Configuration block of the `aws` provider."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    region: str | None = Field(
        default=None,
        description="AWS region; unset means the standard chain (AWS_REGION, profile, ...).",
    )
    profile: str | None = Field(default=None, description="Shared-config profile to use.")
    endpoint_url: str | None = Field(
        default=None,
        description="One endpoint for every AWS API (a local emulator or a private gateway).",
    )
    vpc_id: str | None = Field(
        default=None,
        description="Only consider load balancers and target groups of this VPC, and only "
        "instances of this VPC when a node is looked up by its private DNS name.",
    )
    cluster_name: str | None = Field(
        default=None,
        description="Cluster whose load balancer tags count when finding a Service's target "
        "groups (elbv2.k8s.aws/cluster, kubernetes.io/cluster/<name>).",
    )
    private_dns_fallback: bool = Field(
        default=True,
        description="Find the instance of a node without spec.providerID by private DNS name.",
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    connect_timeout: float = Field(default=5.0, gt=0)
    read_timeout: float = Field(default=20.0, gt=0)
    max_concurrency: int = Field(
        default=8, ge=1, description="Parallel describe calls when scanning target groups."
    )
    poll_interval: float = Field(
        default=5.0, gt=0, description="Between checks while waiting for deletion or draining."
    )

    @field_validator("endpoint_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("region", "profile", "vpc_id", "cluster_name")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty (leave the key out instead)")
        return value
