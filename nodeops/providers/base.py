"""What every cloud provider speaks: errors, provider IDs, the value types and the protocols.

Controllers never name a cloud. They hold a provider object and ask it which of the small
protocols below it implements (`isinstance(provider, NodeGroups)`); each protocol is optional, so
a provider that only deletes VMs implements `Servers` and nothing else.

Every protocol method is idempotent: the operator records its intent, acts, and may crash and act
again, so "already done" (a detached instance detached again, a terminated one terminated again,
an absent target deregistered) is a success, never an error. Failures raise `ProviderError`,
whose `retryable` flag tells the caller whether requeueing can help.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Final, Protocol, Self, runtime_checkable

from pydantic import BaseModel

__all__ = [
    "CLASSIC",
    "TARGET_GROUP",
    "BaseProvider",
    "Instance",
    "Lifecycle",
    "LoadBalancerDraining",
    "LoadBalancerTarget",
    "LoadBalancers",
    "NodeGroup",
    "NodeGroups",
    "Provider",
    "ProviderConfigError",
    "ProviderError",
    "ProviderId",
    "ProviderIdError",
    "RegistrationState",
    "Server",
    "Servers",
    "ServiceRef",
    "TargetHealth",
    "node_name",
    "node_provider_id",
    "parse_provider_id",
]


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class ProviderError(Exception):
    """A cloud call that failed after the retries it was allowed.

    `code` is the cloud's own error code (`Throttling`, `InvalidInstanceID.Malformed`, an HTTP
    status for clouds without codes) so callers and logs can match on what the cloud said, not on
    message text. Some codes are ours, for failures that never reached the cloud or that a
    provider detected itself, for example `Timeout`, `ConnectionError`, `InvalidResponse`,
    `IncorrectInstanceState`, `InstanceInOtherGroup`, `IncorrectTargetState`, `NotFound`.

    `retryable` is true when the same call may succeed later unchanged (throttling, 5xx, network,
    a transient instance state); a reconciler requeues those with backoff and fails on the rest.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        operation: str | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.retryable = retryable
        self.operation = operation
        where = f"{operation}: " if operation else ""
        super().__init__(f"{where}{code}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments are lost by the default pickling of exceptions.
        return (_rebuild_provider_error, (self.code, self.message, self.retryable, self.operation))


def _rebuild_provider_error(
    code: str, message: str, retryable: bool, operation: str | None
) -> ProviderError:
    return ProviderError(code, message, retryable=retryable, operation=operation)


class ProviderConfigError(ValueError):
    """A provider that cannot be selected or built from the configuration.

    The message starts with the configuration key at fault (`providers.aws.region: ...`) because
    the person reading it is editing a YAML file, not reading a traceback. When a block has
    several problems, all of them are in `problems` and in the message, so one edit fixes all.
    """

    def __init__(self, key: str, message: str, *, more: Sequence[tuple[str, str]] = ()) -> None:
        self.key = key
        self.message = message
        self.problems: list[tuple[str, str]] = [(key, message), *more]
        super().__init__("; ".join(f"{k}: {m}" for k, m in self.problems))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_config_error, (self.key, self.message, tuple(self.problems[1:])))


def _rebuild_config_error(
    key: str, message: str, more: tuple[tuple[str, str], ...]
) -> ProviderConfigError:
    return ProviderConfigError(key, message, more=more)


class ProviderIdError(ValueError):
    """A `spec.providerID` that does not have the `<scheme>://<host>/<path>` shape."""

    def __init__(self, value: object, reason: str) -> None:
        self.value = value
        self.reason = reason
        super().__init__(f"invalid provider ID {value!r}: {reason}")


# --------------------------------------------------------------------------------------------
# Provider IDs
# --------------------------------------------------------------------------------------------

_SCHEME_RE: Final = re.compile(r"[a-z][a-z0-9+.-]*")


@dataclass(frozen=True, slots=True)
class ProviderId:
    """A parsed `spec.providerID`.

    Kubernetes only says a provider ID is `<scheme>://<provider-specific>`; clouds agree on
    `<scheme>://<host>/<zone>/<id>` with an often empty host:

    - `aws:///us-east-1a/i-0abc` -> zone `us-east-1a`, id `i-0abc`
    - `openstack:///8f9c...` -> no zone, id `8f9c...` (`openstack://RegionOne/8f9c...` sets host)
    - `sim:///group-a/n-1` -> the simulated cloud keeps its group in the zone slot

    With more than two path segments (Azure's resource paths, Fargate) nothing is a zone and `id`
    is the whole path; a provider decides whether such an ID is one of its machines.
    """

    scheme: str
    zone: str | None
    id: str
    host: str | None = None

    def __str__(self) -> str:
        zone = f"{self.zone}/" if self.zone else ""
        return f"{self.scheme}://{self.host or ''}/{zone}{self.id}"


def parse_provider_id(value: str) -> ProviderId:
    """Parse a provider ID, raising `ProviderIdError` with the reason when it is malformed."""
    if not isinstance(value, str):
        raise ProviderIdError(value, "not a string")
    if not value:
        raise ProviderIdError(value, "empty")
    if value != value.strip() or any(ch.isspace() for ch in value):
        raise ProviderIdError(value, "contains whitespace")
    scheme, sep, rest = value.partition("://")
    if not sep:
        raise ProviderIdError(value, "missing '://' after the scheme")
    if not _SCHEME_RE.fullmatch(scheme):
        raise ProviderIdError(value, f"scheme {scheme!r} is not a lower-case URI scheme")
    if "/" not in rest:
        # `digitalocean://12345`: no host, no path, the whole remainder is the ID.
        if not rest:
            raise ProviderIdError(value, "no ID after the scheme")
        return ProviderId(scheme=scheme, zone=None, id=rest)
    host, _, path = rest.partition("/")
    segments = path.split("/")
    if not segments[-1]:
        raise ProviderIdError(value, "empty ID (trailing '/' or nothing after the host)")
    if len(segments) == 1:
        zone, ident = None, segments[0]
    elif len(segments) == 2:
        zone, ident = segments[0] or None, segments[1]
    else:
        zone, ident = None, path
    return ProviderId(scheme=scheme, zone=zone, id=ident, host=host or None)


def node_provider_id(node: Mapping[str, Any]) -> ProviderId | None:
    """The parsed `spec.providerID` of a Node object, or None if the node has none yet.

    A node registers before the cloud controller fills the field in, so absence is normal and
    providers fall back to their own lookup (AWS: the private DNS name); a malformed value is a
    real error and raises `ProviderIdError`.
    """
    spec = node.get("spec") or {}
    raw = spec.get("providerID")
    if raw is None or raw == "":
        return None
    return parse_provider_id(raw)


def node_name(node: Mapping[str, Any]) -> str:
    """`metadata.name` of a Node object, the key of every fallback lookup."""
    name = (node.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("node object has no metadata.name")
    return name


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


class Lifecycle(StrEnum):
    """Where an instance stands in its node group, in words every cloud can map onto.

    Controllers wait for `IN_SERVICE` (Cyclops waits for every instance of a group to be
    InService before it starts, and for replacements to become InService); the raw cloud state
    stays available in `Instance.raw_state` for messages.
    """

    PENDING = "Pending"
    IN_SERVICE = "InService"
    STANDBY = "Standby"
    DETACHING = "Detaching"
    TERMINATING = "Terminating"
    TERMINATED = "Terminated"
    WARMED = "Warmed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class Instance:
    """A member of a node group.

    `launch_version` names what the instance was launched from (a launch template ID and version,
    a launch configuration name, an image); `out_of_date` is the provider's verdict that it
    differs from what the group launches now, which is what cycling replaces.
    """

    id: str
    provider_id: str
    zone: str | None
    lifecycle_state: Lifecycle
    healthy: bool
    launch_version: str | None
    out_of_date: bool
    protected_from_scale_in: bool = False
    raw_state: str = ""

    @property
    def in_service(self) -> bool:
        return self.lifecycle_state is Lifecycle.IN_SERVICE


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """A group of interchangeable instances kept at `desired` by the cloud (an ASG).

    `launch_version` is the group's resolved current launch version (None when the provider
    cannot tell), the value instances are compared with for `out_of_date`.
    """

    name: str
    desired: int
    min: int
    max: int
    instances: list[Instance] = field(default_factory=list, hash=False)
    launch_version: str | None = None

    def instance(self, instance_id: str) -> Instance | None:
        return next((i for i in self.instances if i.id == instance_id), None)


CLASSIC: Final = "classic"
"""`LoadBalancerTarget.kind` of an AWS Classic Load Balancer; `name` is the CLB name."""

TARGET_GROUP: Final = "target-group"
"""`LoadBalancerTarget.kind` of an AWS ELBv2 target group; `name` is the target group ARN."""


@dataclass(frozen=True, slots=True)
class LoadBalancerTarget:
    """One place an instance receives load-balanced traffic from.

    `kind` is a provider-defined word (`CLASSIC`, `TARGET_GROUP` for AWS; other providers add
    their own, such as an OpenStack pool); `name` identifies the load balancer or group in the
    provider's terms; `port` is the registered port when the provider registers per port (a
    target group) and None when membership is per instance (a classic LB) or not yet known.
    """

    kind: str
    name: str
    port: int | None = None


@dataclass(frozen=True, slots=True)
class ServiceRef:
    """A Kubernetes Service by namespace and name, as load balancer tags record it."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, value: str) -> ServiceRef:
        namespace, sep, name = value.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise ValueError(f"expected <namespace>/<name>, got {value!r}")
        return cls(namespace, name)


class RegistrationState(StrEnum):
    """Where an instance stands in one load balancer target, in words every cloud can map onto.

    `REGISTERED` covers every state in which the load balancer may still send new requests
    (AWS's initial, healthy, unhealthy, unavailable); `DRAINING` is deregistered with requests
    still finishing; `UNUSED` is not registered at all (or the load balancer is gone).
    """

    REGISTERED = "Registered"
    DRAINING = "Draining"
    UNUSED = "Unused"


@dataclass(frozen=True, slots=True)
class TargetHealth:
    """An instance's registration in one target, as the load balancer reports it right now.

    `drain_seconds` is for load balancers that do not report draining themselves (an AWS classic
    load balancer drops the instance from its list at once and keeps serving its connections for
    its connection-draining timeout): how long after the deregistration requests may still run.
    A caller that recorded when it deregistered waits that long; it is 0 where draining is
    reported as a state.
    """

    state: RegistrationState
    detail: str = ""
    drain_seconds: float = 0.0

    @property
    def registered(self) -> bool:
        return self.state is RegistrationState.REGISTERED

    @property
    def healthy(self) -> bool:
        """Registered and passing the load balancer's health checks (a target group's
        `healthy`, a classic load balancer's `InService`)."""
        return self.registered and self.detail in ("healthy", "InService")

    @property
    def checking(self) -> bool:
        """Registered and not yet judged by the health checks (a target group's `initial`)."""
        return self.registered and self.detail == "initial"


@dataclass(frozen=True, slots=True)
class Server:
    """The virtual machine behind a node, as far as deleting it is concerned."""

    id: str
    name: str
    status: str
    provider_id: str | None = None
    zone: str | None = None


# --------------------------------------------------------------------------------------------
# Providers
# --------------------------------------------------------------------------------------------


@runtime_checkable
class Provider(Protocol):
    """What the registry builds: `cls(config)` where `config` is an instance of `cls.Config`.

    A provider class declares `Config`, a pydantic model with `extra="forbid"` (so a misspelt key
    is an error, not a silently ignored setting), and `name`, the entry-point name it is meant to
    be registered under. Construction does no I/O; connections open on first use and `close()`
    releases them.
    """

    name: ClassVar[str]
    Config: ClassVar[type[BaseModel]]

    async def close(self) -> None: ...


class BaseProvider:
    """Optional convenience base: `async with` support around `close()`."""

    name: ClassVar[str] = ""
    Config: ClassVar[type[BaseModel]]

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


@runtime_checkable
class NodeGroups(Protocol):
    """Cloud node groups (AWS Auto Scaling groups) and their instances."""

    async def describe_groups(self, names: Sequence[str]) -> list[NodeGroup]:
        """The named groups with their instances, in the order of `names`.

        Groups that do not exist are left out rather than failing the whole call; the caller
        compares names and decides whether a missing group is an error.
        """
        ...

    async def detach_instance(self, group: str, instance_id: str) -> None:
        """Take the instance out of the group without lowering the desired capacity.

        The group therefore launches a replacement while the detached instance keeps running
        (surge by detach). Detaching an instance that is already detaching, detached, gone or in
        another group succeeds.
        """
        ...

    async def attach_instance(self, group: str, instance_id: str) -> None:
        """Put a detached instance back into `group`; attaching an attached one succeeds."""
        ...

    async def terminate_instance(self, instance_id: str) -> None:
        """Terminate the instance; a terminated or unknown instance is a success."""
        ...


@runtime_checkable
class LoadBalancers(Protocol):
    """External load balancers that send traffic to instances."""

    async def targets_of(
        self,
        instance_id: str,
        *,
        among: Sequence[LoadBalancerTarget] | None = None,
    ) -> list[LoadBalancerTarget]:
        """Every load balancer target the instance is registered in, with its ports.

        `among` narrows the search to known load balancers (for example those of
        `targets_behind_services`; their ports are ignored) instead of scanning the region.
        """
        ...

    async def deregister(self, target: LoadBalancerTarget, instance_id: str) -> None:
        """Stop sending traffic to the instance; an absent registration is a success."""
        ...

    async def register(self, target: LoadBalancerTarget, instance_id: str) -> None:
        """Send traffic to the instance again; an existing registration is a success."""
        ...

    async def registrations(
        self, *, among: Sequence[LoadBalancerTarget] | None = None
    ) -> dict[str, list[LoadBalancerTarget]]:
        """Every instance registered (not draining) in the load balancers, with its targets.

        One scan for all instances, which a caller caches instead of scanning once per node;
        `among` narrows it to known load balancers as in `targets_of`. Instances registered
        nowhere are absent.
        """
        ...

    async def targets_behind_services(
        self,
        services: Sequence[ServiceRef],
        *,
        cluster: str | None = None,
    ) -> dict[ServiceRef, list[LoadBalancerTarget]]:
        """The load balancers the cloud created for these `type: LoadBalancer` Services.

        Found through the tags the Kubernetes cloud provider and the load balancer controllers
        put on what they create; `cluster` keeps another cluster's Service of the same name
        out. Every requested Service is a key, with an empty list when nothing was found.
        Returned targets carry no port: pass them as `among` to `targets_of`.
        """
        ...


@runtime_checkable
class LoadBalancerDraining(Protocol):
    """Load balancers that finish in-flight requests after a deregistration."""

    async def wait_drained(
        self, target: LoadBalancerTarget, instance_id: str, timeout: float
    ) -> None:
        """Return once the target no longer sends the instance traffic.

        Raises a retryable `ProviderError` with code `Timeout` if draining outlasts `timeout`.
        """
        ...

    async def target_health(self, target: LoadBalancerTarget, instance_id: str) -> TargetHealth:
        """The instance's registration in the target now, without waiting: for reconcilers
        that requeue rather than block. A target without a port sums up every port: registered
        on any, else draining on any, else unused."""
        ...


@runtime_checkable
class Servers(Protocol):
    """Virtual machines behind nodes, for deleting a node's VM."""

    async def find_server(self, node: Mapping[str, Any]) -> Server | None:
        """The VM of a Node object (a dict), or None if it no longer exists.

        Uses `spec.providerID` and, when a node has none, a documented provider-specific
        fallback.
        """
        ...

    async def delete_server(self, server: Server) -> None:
        """Delete the VM; deleting a deleted one succeeds."""
        ...

    async def wait_deleted(self, server: Server, timeout: float) -> None:
        """Return once the VM is gone; a retryable `Timeout` error if it outlasts `timeout`."""
        ...
