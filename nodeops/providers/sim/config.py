"""Settings of the `sim` provider (`providers.sim` in the operator configuration).

The simulated cloud is reached over HTTP like any cloud API, so its settings are an endpoint,
its credentials and the same retry and timeout knobs as a real cloud's.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nodeops.providers.retry import RetryPolicy

__all__ = ["SimConfig"]


class SimConfig(BaseModel):
    """Configuration block of the `sim` provider."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(description="Base URL of the simulator, e.g. http://127.0.0.1:8001.")
    token: str | None = Field(
        default=None,
        repr=False,
        description="Bearer token, when the simulator runs with --auth (its admin token).",
    )
    ca_file: str | None = Field(
        default=None,
        description="PEM file of the CA to trust for an https:// URL (the simulator's "
        "self-signed CA, the kubeconfig's certificate-authority-data decoded).",
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    connect_timeout: float = Field(default=5.0, gt=0, description="Limit of one connect (s).")
    read_timeout: float = Field(default=20.0, gt=0, description="Limit of one read (s).")
    poll_interval: float = Field(
        default=1.0, gt=0, description="Between checks while waiting for draining or deletion."
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("token")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty (leave the key out instead)")
        return value
