"""Settings of the cycling controllers: `nodeops run --cycling-<field>` / `NODEOPS_CYCLING_<FIELD>`.

Durations are Go durations (`90s`, `3h`) or seconds. Defaults are Cyclops's where Cyclops has
the setting, except the minimum scale-up wait (Cyclops waits 1 minute after every detach; nodeops
waits until the cloud says the replacements are in service and their nodes are Ready, so it needs
no fixed pause).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from nodeops.api.settingduration import SettingDuration

__all__ = ["CyclingSettings", "ObserverSettings"]


class CyclingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    namespace: str | None = Field(
        default=None, description="namespace of CycleNodeRequests (default: the operator's)"
    )
    scale_up_wait: SettingDuration = Field(
        default=0.0, ge=0, description="least wait after a detach"
    )
    scale_up_limit: SettingDuration = Field(
        default=1200.0, gt=0, description="ScalingUp -> Healing after"
    )
    equilibrium_wait_limit: SettingDuration = Field(
        default=300.0, gt=0, description="Pending waits this long for the cloud and nodes to agree"
    )
    default_cycling_timeout: SettingDuration = Field(
        default=10800.0, gt=0, description="a node's timeout when cyclingTimeout is unset"
    )
    health_check_timeout: SettingDuration = Field(default=5.0, gt=0, description="per HTTP request")
    check_interval: SettingDuration = Field(
        default=10.0, gt=0, description="between attempts of failing health/pre-termination checks"
    )
    cloud_poll_interval: SettingDuration = Field(
        default=10.0, gt=0, description="between descriptions of the node groups being cycled"
    )
    cloud_max_backoff: SettingDuration = Field(
        default=120.0, gt=0, description="poll backoff limit"
    )
    request_workers: int = Field(default=4, ge=1, description="CycleNodeRequests at once")
    node_workers: int = Field(
        default=32,
        ge=1,
        description="CycleNodeStatuses at once (fewer than a batch's concurrency delays the "
        "drains of the nodes beyond it)",
    )
    batch_refill: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="start the next batch when at most this share of concurrency is still busy "
        "(Cyclops: 0.5; 0 waits for the batch, so every batch is full)",
    )
    wait_for_load_balancers: bool = Field(
        default=True,
        description="detach a batch only once the load balancers it leaves have another "
        "healthy target (needs the provider's load balancer read permissions)",
    )
    delete_cnr: bool = Field(default=False, description="delete Successful requests after expiry")
    delete_cnr_expiry: SettingDuration = Field(
        default=604800.0, gt=0, description="how long a Successful request is kept"
    )
    slack_channel: str | None = Field(default=None, description="Slack channel ID to notify")
    slack_token_secret: str | None = Field(
        default=None,
        description="Secret holding the Slack bot token: [namespace/]name[:key], key 'token'",
    )
    slack_api_url: str = Field(default="https://slack.com/api", description="Slack Web API")
    cluster_name: str | None = Field(default=None, description="the cluster's name in messages")
    time_scale: float = Field(
        default=1.0,
        gt=0,
        description="cluster seconds per wall second (for simulated clusters run faster)",
    )
    time_origin: datetime | None = Field(
        default=None,
        description="with time_scale: when the cluster's clock agreed with the wall clock",
    )


class ObserverSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    namespace: str | None = Field(
        default=None, description="namespace of the CycleNodeRequests it creates"
    )
    check_interval: SettingDuration = Field(default=300.0, gt=0, description="between observations")
    wait_interval: SettingDuration = Field(
        default=120.0, ge=0, description="how long a finding must persist before a request"
    )
    daemonset_namespaces: list[str] = Field(
        default_factory=lambda: ["kube-system"],
        description="namespaces whose OnDelete DaemonSets are checked for outdated pods",
    )
    dry: bool = Field(default=False, description="report, but create nothing")
    time_scale: float = Field(default=1.0, gt=0, description="cluster seconds per wall second")
