"""Values of the simulated cloud: instances, node groups, load balancers, registrations.

The vocabulary is AWS's (an Auto Scaling group's lifecycle states, EC2's machine states, a target
group's `draining`), because that is the cloud whose behaviour the operator's node operations
were first written against; the `sim` provider maps it onto the provider protocols as the `aws`
provider maps the real one, so both paths through the operator stay exercised.

All times are seconds since the epoch on the simulator's clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from nodeops.sim.scenario import NodeGroup as NodeGroupSpec

__all__ = [
    "CLASSIC",
    "DETACHED",
    "DETACHING",
    "IN_SERVICE",
    "LEAVING",
    "PENDING",
    "TARGET_GROUP",
    "TERMINATED",
    "TERMINATING",
    "CloudError",
    "CloudSettings",
    "LoadBalancerKind",
    "Registration",
    "SimInstance",
    "SimLoadBalancer",
    "SimNodeGroup",
]

# Lifecycle states, as an Auto Scaling group reports its members; `Detached` is an instance in
# no group at all.
PENDING: Final = "Pending"
IN_SERVICE: Final = "InService"
DETACHING: Final = "Detaching"
DETACHED: Final = "Detached"
TERMINATING: Final = "Terminating"
TERMINATED: Final = "Terminated"

LEAVING: Final = frozenset({DETACHING, DETACHED, TERMINATING, TERMINATED})
"""States of an instance that is on its way out of its group or already out."""

CLASSIC: Final = "classic"
TARGET_GROUP: Final = "target-group"
LoadBalancerKind = Literal["classic", "target-group"]


class CloudError(Exception):
    """A refused cloud call: the HTTP status, a stable code to branch on, and a message.

    Codes are what clients match (`NodeGroupNotFound`, `IncorrectInstanceState`, ...); the
    message is for people.
    """

    def __init__(
        self, status: int, code: str, message: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


@dataclass(slots=True)
class CloudSettings:
    """How long the cloud's slow operations take, in simulated seconds.

    Defaults follow what AWS takes, so that an operator tuned on the simulator is not surprised
    by the real cloud: detaching takes seconds, an instance shuts down in tens of seconds, the
    cloud node lifecycle controller notices a gone instance within its 5 s monitor period, and a
    target group drains for 300 s unless told otherwise.
    """

    detach_seconds: float = 2.0
    shutdown_seconds: float = 20.0
    node_delete_seconds: float = 5.0
    deregistration_delay_seconds: float = 300.0
    terminated_retention_seconds: float = 3600.0
    retry_seconds: float = 2.0


@dataclass(eq=False, slots=True)
class SimInstance:
    """A virtual machine. `origin` is the group it was launched in; it stays in the provider ID
    after a detach, as a real provider ID keeps naming the zone it was launched in."""

    id: str
    origin: str
    zone: str
    launch_version: str
    private_ip: str
    node_name: str
    launched_at: float
    group: str | None
    lifecycle: str
    protected: bool = False
    termination_protected: bool = False
    """EC2's DisableApiTermination: terminating the instance is refused."""
    due: float | None = None
    """When the current transition (boot, detach, shutdown, node removal) is over."""
    node_created: bool = False
    node_gone: bool = False
    kubelet_signalled: str | None = None
    terminated_at: float | None = None

    @property
    def provider_id(self) -> str:
        return f"sim:///{self.origin}/{self.id}"

    @property
    def machine_state(self) -> str:
        """EC2's view of the machine, independent of group membership."""
        if self.lifecycle == PENDING:
            return "pending"
        if self.lifecycle == TERMINATING:
            return "shutting-down"
        if self.lifecycle == TERMINATED:
            return "terminated"
        return "running"

    @property
    def running(self) -> bool:
        return self.machine_state in ("pending", "running")


@dataclass(eq=False, slots=True)
class SimNodeGroup:
    """An Auto Scaling group: keeps `desired` instances Pending or InService."""

    spec: NodeGroupSpec
    desired: int
    min_size: int
    max_size: int
    launch_version: str
    members: list[str] = field(default_factory=list)
    launched: int = 0
    protect_new: bool = False

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(eq=False, slots=True)
class Registration:
    """One instance (and port) registered in a load balancer; draining once deregistered."""

    instance_id: str
    port: int
    registered_at: float
    draining_until: float | None = None

    @property
    def draining(self) -> bool:
        return self.draining_until is not None


@dataclass(eq=False, slots=True)
class SimLoadBalancer:
    """A classic load balancer (one registration per instance, on its port) or a target group
    (one registration per instance and port)."""

    name: str
    kind: LoadBalancerKind
    port: int
    node_groups: list[str]
    deregistration_delay: float
    tags: dict[str, str] = field(default_factory=dict)
    registrations: dict[tuple[str, int], Registration] = field(default_factory=dict)

    def of(self, instance_id: str) -> list[Registration]:
        return [r for (iid, _), r in sorted(self.registrations.items()) if iid == instance_id]
