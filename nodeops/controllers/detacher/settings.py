"""The detacher's settings: `nodeops run --controllers detacher --detacher-<field> ...`.

Each field is a flag `--detacher-<field>` and an environment variable `NODEOPS_DETACHER_<FIELD>`;
lists are comma-separated. node-detacher's flags map onto them (see docs/detacher.md):
`--daemonset` is `daemonsets`, `--manage-daemonset-pods` is `manage_daemonset_pods`,
`--sync-period` is `sync_period`, and its `--enable-*-integration` switches are `discovery`
and `integrations`.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nodeops.api.settingduration import SettingDuration
from nodeops.providers.base import CLASSIC, TARGET_GROUP, LoadBalancerTarget, ServiceRef

__all__ = ["DetacherSettings", "parse_static_target"]

_KIND: Final = re.compile(r"[a-z][a-z0-9-]*")


def parse_static_target(value: str) -> LoadBalancerTarget:
    """`classic:NAME`, `target-group:ARN` or `target-group:ARN:PORT` (any `kind:name[:port]`).

    An ARN has colons of its own but never ends in a number, so a trailing `:<digits>` is the
    port.
    """
    kind, sep, rest = value.strip().partition(":")
    if not sep or not _KIND.fullmatch(kind) or not rest:
        raise ValueError(f"{value!r}: expected <kind>:<name>[:<port>], e.g. classic:my-elb")
    port: int | None = None
    head, sep, tail = rest.rpartition(":")
    if sep and tail.isdigit():
        port = int(tail)
        rest = head
        if not 1 <= port <= 65535:
            raise ValueError(f"{value!r}: port {port} is not a port number")
        if kind == CLASSIC:
            raise ValueError(f"{value!r}: a classic load balancer has no port to register on")
    if not rest:
        raise ValueError(f"{value!r}: the name is empty")
    return LoadBalancerTarget(kind, rest, port)


def _split(value: Any) -> Any:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


class DetacherSettings(BaseModel):
    """Settings of the detacher controller."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str | None = Field(
        default=None,
        description="The cloud provider whose load balancers the nodes are taken out of; "
        "defaults to --provider.",
    )
    discovery: Literal["all", "services", "static"] = Field(
        default="all",
        description="Where the load balancers of a node are looked for when it goes away: "
        "all (every classic load balancer and instance target group the provider sees, "
        "scanned once per cache period for all nodes), services (those the cloud made for "
        "Services of type LoadBalancer and NodePort, found by their tags) or static (only "
        "the static targets and the targets written in a node's LoadBalancerAttachment).",
    )
    static_targets: list[str] = Field(
        default_factory=list,
        description="Load balancers managed outside Kubernetes that every node is taken out "
        "of when registered in them: classic:NAME, target-group:ARN or target-group:ARN:PORT.",
    )
    integrations: list[str] = Field(
        default_factory=lambda: [CLASSIC, TARGET_GROUP],
        description="The kinds of load balancer managed: classic, target-group.",
    )
    cluster_name: str | None = Field(
        default=None,
        description="The cluster whose tags count when finding a Service's load balancers "
        "(services discovery); defaults to the provider's own setting.",
    )
    cache_seconds: SettingDuration = Field(
        default=60.0,
        gt=0,
        description="How long one scan of the load balancers is reused for every node.",
    )
    miss_refresh_seconds: SettingDuration = Field(
        default=5.0,
        ge=0,
        description="A node missing from a cached scan (registered after it) refreshes the "
        "scan, unless the scan is younger than this.",
    )
    taints: list[str] = Field(
        default_factory=list,
        description="More taint keys that mean a node is going away (a trailing * matches a "
        "prefix), e.g. karpenter.sh/disrupted.",
    )
    control_plane: bool = Field(
        default=False, description="Detach control-plane nodes too (skipped by default)."
    )
    wait_for_draining: bool = Field(
        default=True,
        description="Wait for each load balancer's deregistration delay (connection draining) "
        "before the node counts as detached and pods are stopped.",
    )
    draining_timeout: SettingDuration = Field(
        default=600.0,
        gt=0,
        description="Give up waiting for draining after this long and carry on, with a "
        "warning event.",
    )
    draining_poll_seconds: SettingDuration = Field(
        default=5.0, gt=0, description="How often a draining target's health is read."
    )
    exclude_label: bool = Field(
        default=True,
        description="Label detached nodes node.kubernetes.io/exclude-from-external-load-"
        "balancers, so that the Service controller and the AWS Load Balancer Controller do "
        "not register them again behind the detacher's back.",
    )
    stop_pods: bool = Field(
        default=False,
        description="Once detached, stop the node's pods in order through the drain engine "
        "(NodeDrainRules, the nodeops.dev/drain label, the deletion-priority annotation).",
    )
    stop_daemonset_pods: bool = Field(
        default=False,
        description="When pods are stopped, stop DaemonSet pods too, after every other pod; the "
        "node is tainted until it comes back so that they are not recreated.",
    )
    drain_force: bool = Field(
        default=False, description="Stop pods no controller manages (kubectl drain --force)."
    )
    drain_delete_emptydir_data: bool = Field(
        default=False,
        description="Stop pods with emptyDir volumes (kubectl drain --delete-emptydir-data).",
    )
    drain_grace_period: int = Field(
        default=-1,
        description="Grace period of stopped pods (s); negative: each pod's own.",
    )
    daemonsets: list[str] = Field(
        default_factory=list,
        description="Ingress DaemonSets (namespace/name): when one of their pods on a node "
        "starts terminating (a rolling update), the node is detached first and attached again "
        "once the new pod is ready. Needs the management of DaemonSet pods on.",
    )
    manage_daemonset_pods: bool = Field(
        default=False,
        description="Detach nodes whose pod of one of the daemonsets is terminating.",
    )
    sync_period: SettingDuration = Field(
        default=30.0,
        gt=0,
        description="How often a detached node is checked again for registrations made "
        "behind the detacher's back.",
    )
    max_concurrent_reconciles: int = Field(default=8, ge=1, description="Nodes handled at once.")

    @field_validator("static_targets", "integrations", "taints", "daemonsets", mode="before")
    @classmethod
    def _comma_lists(cls, value: Any) -> Any:
        return _split(value)

    @field_validator("static_targets")
    @classmethod
    def _targets(cls, value: list[str]) -> list[str]:
        for item in value:
            parse_static_target(item)
        return value

    @field_validator("integrations")
    @classmethod
    def _kinds(cls, value: list[str]) -> list[str]:
        for kind in value:
            if not _KIND.fullmatch(kind):
                raise ValueError(f"{kind!r} is not a load balancer kind (classic, target-group)")
        return value

    @field_validator("daemonsets")
    @classmethod
    def _daemonsets(cls, value: list[str]) -> list[str]:
        for item in value:
            ServiceRef.parse(item)  # the same namespace/name shape
        return value

    @property
    def targets(self) -> list[LoadBalancerTarget]:
        return [parse_static_target(t) for t in self.static_targets]

    @property
    def ingress_daemonsets(self) -> set[tuple[str, str]]:
        if not self.manage_daemonset_pods:
            return set()
        refs = (ServiceRef.parse(d) for d in self.daemonsets)
        return {(r.namespace, r.name) for r in refs}
