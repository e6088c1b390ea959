"""`LoadBalancerAttachment`: the load balancer targets a node was taken out of, and their state.

One object per node, named after it, in the operator's namespace. Its spec is the record the
detacher writes *before* it deregisters anything: the classic load balancers and target groups
(with ports) the node's instance was registered in, so that a node that comes back (an uncordon,
a cancelled scale-down) is registered in exactly those again, and so that a restarted operator
resumes from it. Targets can also be written by hand (`source: Static`) for load balancers
managed outside Kubernetes; the detacher keeps those and replaces only what it discovered.

The status holds the state of each target, each change written before and after the cloud call
it stands for, which is what makes a crash between two deregistrations harmless.

node-detacher's `Attachment` kept the detach state in its spec and never wrote its status; here
the spec is what should be registered and the status what is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, Self

from pydantic import Field, model_validator

from nodeops.api.conditions import Conditions
from nodeops.api.errors import FieldProblem
from nodeops.api.meta import ApiModel, NonNegativeInt64
from nodeops.api.resource import AGE_COLUMN, KindInfo, PrinterColumn, Resource

__all__ = [
    "MAX_TARGETS",
    "AttachmentPhase",
    "LoadBalancerAttachment",
    "LoadBalancerAttachmentSpec",
    "LoadBalancerAttachmentStatus",
    "TargetSource",
    "TargetState",
    "TargetStatus",
    "TargetType",
    "parse",
]

MAX_TARGETS: Final = 256
"""An instance is registered in a few load balancers; the bound keeps the object small."""

TargetSource = Literal["Static", "Discovered"]
TargetState = Literal[
    "Registered",
    "Deregistering",
    "Draining",
    "Deregistered",
    "Registering",
    "NotRegistered",
]
AttachmentPhase = Literal["Attached", "Detaching", "Detached", "Attaching", "Invalid"]

# A provider's word for a kind of load balancer (`classic`, `target-group`, an OpenStack pool).
_TYPE_PATTERN: Final = r"^[a-z][a-z0-9-]*$"
TargetType = Annotated[str, Field(pattern=_TYPE_PATTERN, max_length=63)]
TargetName = Annotated[str, Field(min_length=1, max_length=2048)]
Port = Annotated[int, Field(ge=1, le=65535, json_schema_extra={"format": "int32"})]


class AttachmentTarget(ApiModel):
    """One load balancer target of the node's instance."""

    type: TargetType
    """The kind of load balancer, in the provider's words: classic (an AWS Classic Load
    Balancer, by name) or target-group (an AWS ELBv2 target group, by ARN)."""
    name: TargetName
    """The classic load balancer's name or the target group's ARN."""
    port: Port | None = None
    """The port the instance is registered on in a target group; omitted for a classic load
    balancer, or for every port the instance is registered on."""
    source: TargetSource = "Static"
    """Static targets were written by hand or configured, and are kept; Discovered targets were
    found by the detacher when the node went away, and are found again the next time."""

    @property
    def key(self) -> tuple[str, str, int | None]:
        return (self.type, self.name, self.port)


Targets = Annotated[
    list[AttachmentTarget],
    Field(max_length=MAX_TARGETS, json_schema_extra={"x-kubernetes-list-type": "atomic"}),
]


class LoadBalancerAttachmentSpec(ApiModel):
    """The load balancer targets of one node."""

    node_name: Annotated[str, Field(min_length=1, max_length=253)]
    """The node whose instance is registered in the targets; the object's own name."""
    targets: Targets = Field(default_factory=list)
    """Where the node's instance receives load-balanced traffic from, and is registered in again
    when the node comes back."""

    @model_validator(mode="after")
    def _unique_targets(self) -> Self:
        seen: dict[tuple[str, str, int | None], int] = {}
        for i, target in enumerate(self.targets):
            first = seen.setdefault(target.key, i)
            if first != i:
                raise FieldProblem(
                    f"targets[{i}]", "Duplicate value: same as {}", f"targets[{first}]"
                )
        return self


class TargetStatus(ApiModel):
    """Where one target stands."""

    type: TargetType
    """The target's type, as in the spec."""
    name: TargetName
    """The target's name, as in the spec."""
    port: Port | None = None
    """The target's port, as in the spec."""
    state: TargetState
    """Registered: receiving traffic. Deregistering: a deregistration is being sent.
    Draining: deregistered, the load balancer finishes requests in flight. Deregistered: no
    traffic any more. Registering: a registration is being sent. NotRegistered: the instance was
    not registered in the target when the node went away, so it is not registered again."""
    deregistered_at: str | None = None
    """When the deregistration was accepted (RFC 3339)."""
    registered_at: str | None = None
    """When the registration was accepted (RFC 3339)."""
    message: str | None = None
    """Details of the last change, such as a draining that timed out."""


class LoadBalancerAttachmentStatus(ApiModel):
    """What the detacher has done with the node's targets."""

    phase: AttachmentPhase | None = None
    """Attached: the node receives traffic. Detaching: it is being taken out of its targets.
    Detached: no target sends it traffic. Attaching: it is being registered again. Invalid: the
    spec cannot be acted on; the message names the field."""
    reason: str | None = None
    """Why the node was detached (Unschedulable, ToBeDeletedByClusterAutoscaler, ...)."""
    message: str | None = None
    """A human-readable account of the phase."""
    instance_id: str | None = None
    """The cloud instance behind the node, as the provider names it."""
    detached_at: str | None = None
    """When the node stopped receiving traffic (RFC 3339)."""
    attached_at: str | None = None
    """When the node was last registered again (RFC 3339)."""
    pods_stopped_at: str | None = None
    """When the node's pods were stopped after the detachment, if the detacher stops them."""
    daemon_set_pods_stopped: bool | None = None
    """Whether DaemonSet pods were stopped too (the node is then tainted until it comes back)."""
    cordoned: bool | None = None
    """Whether the detacher cordoned the node to stop its pods; it uncordons it when the node
    comes back."""
    observed_generation: NonNegativeInt64 | None = None
    """The generation of the spec the status describes."""
    targets: list[TargetStatus] = Field(
        default_factory=list, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
    """The state of each target of the spec."""
    conditions: Conditions | None = None
    """Standard conditions."""


class LoadBalancerAttachment(Resource):
    """LoadBalancerAttachment records the external load balancer targets (classic load balancers,
    target groups and ports) a node was registered in when it went away, and the state of each,
    so that the node is taken out of all of them before its pods stop and registered in exactly
    those again when it comes back."""

    KIND_INFO = KindInfo(
        kind="LoadBalancerAttachment",
        plural="loadbalancerattachments",
        scope="Namespaced",
        short_names=("lba",),
        has_status=True,
        printer_columns=(
            PrinterColumn("Node", "string", ".spec.nodeName"),
            PrinterColumn("Phase", "string", ".status.phase"),
            PrinterColumn("Reason", "string", ".status.reason"),
            PrinterColumn("Detached", "date", ".status.detachedAt", priority=1),
            AGE_COLUMN,
        ),
    )

    kind: Literal["LoadBalancerAttachment"] = "LoadBalancerAttachment"
    """Kind is the REST resource this object represents."""
    spec: LoadBalancerAttachmentSpec
    """The node and the targets it is registered in."""
    status: LoadBalancerAttachmentStatus | None = None
    """The state of each target, written by the detacher."""

    @model_validator(mode="after")
    def _named_after_the_node(self) -> Self:
        if self.spec.node_name != self.metadata.name:
            raise FieldProblem("spec.nodeName", "must equal {}", "metadata.name")
        return self


def parse(obj: Mapping[str, Any]) -> LoadBalancerAttachment:
    """A LoadBalancerAttachment from its JSON form; raises InvalidResource naming the field.

    Only the spec and metadata are checked strictly: the status is ours, written as a dict, and
    an older operator's status fields must not make a newer one refuse the object.
    """
    body = {k: v for k, v in obj.items() if k != "status"}
    return LoadBalancerAttachment.parse(body)
