"""`NodeGroup` (ng): a cluster-scoped template of CycleNodeRequests for one set of node groups.

`nodeops cycle` and the observer turn NodeGroups into CycleNodeRequests, so how a group of
nodes is cycled (method, concurrency, checks, budgets) is written once. Fields are Cyclops's,
plus `provider` and `budgets`; the NodeGroup's budgets also bound requests created by hand for
the same cloud node groups.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from nodeops.api.cyclenoderequest import NODE_GROUP_REQUIRED, check_selection, node_group_names
from nodeops.api.cycling import (
    Budgets,
    CycleSettings,
    HealthCheck,
    PreTerminationCheck,
    ValidationOptions,
)
from nodeops.api.labelselector import LabelSelector
from nodeops.api.meta import ApiModel, Int32
from nodeops.api.resource import AGE_COLUMN, KindInfo, PrinterColumn, Resource

__all__ = ["DISABLE_ANNOTATION_MANAGEMENT", "NodeGroup", "NodeGroupSpec"]

DISABLE_ANNOTATION_MANAGEMENT: Final = "nodeops.dev/disable-annotation-management"
"""On a NodeGroup, "true" keeps the cluster-autoscaler annotation off its new nodes (Cyclops's
`cyclops.atlassian.com/disable-annotation-management` is honoured too)."""

Names = Annotated[
    list[Annotated[str, Field(min_length=1)]],
    Field(json_schema_extra={"x-kubernetes-list-type": "atomic"}),
]


class NodeGroupSpec(ApiModel):
    """How the nodes of some cloud node groups are cycled."""

    model_config = ConfigDict(json_schema_extra=NODE_GROUP_REQUIRED)

    node_group_name: str = ""
    """Name of the cloud node group."""
    node_groups_list: Names | None = None
    """More cloud node groups cycled together with nodeGroupName."""
    node_selector: LabelSelector
    """Selects the group's Kubernetes nodes. Must not be empty."""
    cycle_settings: CycleSettings
    """How the nodes are cycled."""
    max_failed_cycle_node_requests: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
    """How many Failed requests of this group the observer tolerates before it stops creating
    new ones (a Successful request deletes the Failed ones before it)."""
    validation_options: ValidationOptions | None = None
    """Copied into the requests."""
    health_checks: list[HealthCheck] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
    """Copied into the requests."""
    pre_termination_checks: list[PreTerminationCheck] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
    """Copied into the requests."""
    skip_initial_health_checks: bool = False
    """Copied into the requests."""
    skip_pre_termination_checks: bool = False
    """Copied into the requests."""
    priority: Int32 = 0
    """The observer cycles groups with a lower priority first; no group of a higher priority
    starts while one of a lower priority is in progress."""
    provider: str | None = None
    """The cloud provider of the node groups; the manager's default when unset."""
    budgets: Budgets | None = None
    """Disruption budgets for these cloud node groups, in force for every request that cycles
    any of them."""

    @model_validator(mode="after")
    def _selection(self) -> Self:
        check_selection(
            self.node_selector, "nodeSelector", self.node_group_name, self.node_groups_list
        )
        return self

    @property
    def node_groups(self) -> list[str]:
        return node_group_names(self.node_group_name, self.node_groups_list)


class NodeGroup(Resource):
    """NodeGroup describes how to cycle the nodes of one or more cloud node groups; `nodeops
    cycle` and the observer create CycleNodeRequests from it."""

    KIND_INFO = KindInfo(
        kind="NodeGroup",
        plural="nodegroups",
        scope="Cluster",
        short_names=("ng",),
        printer_columns=(
            PrinterColumn(
                "Node Group Name",
                "string",
                ".spec.nodeGroupName",
                "The name of the node group in the cloud provider",
            ),
            PrinterColumn(
                "Method",
                "string",
                ".spec.cycleSettings.method",
                "The method to use when cycling nodes",
            ),
            PrinterColumn(
                "Concurrency",
                "integer",
                ".spec.cycleSettings.concurrency",
                "The number of nodes to cycle in parallel",
            ),
            PrinterColumn("Priority", "integer", ".spec.priority", "Lower cycles first"),
            AGE_COLUMN,
        ),
    )

    kind: Literal["NodeGroup"] = "NodeGroup"
    """Kind is the REST resource this object represents."""
    spec: NodeGroupSpec
    """How the nodes of the node groups are cycled."""

    @classmethod
    def parse_spec(cls, obj: Mapping[str, Any]) -> Self:
        """A NodeGroup as read from the API server; Cyclops objects may carry an empty status."""
        return cls.parse({k: v for k, v in obj.items() if k != "status"})
