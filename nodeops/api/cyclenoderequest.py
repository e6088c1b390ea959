"""`CycleNodeRequest` (cnr): replace the nodes of one or more cloud node groups, batch by batch.

Cyclops's CycleNodeRequest with its field names and meanings, so a Cyclops manifest works after
changing `apiVersion` to `nodeops.dev/v1alpha1`; nodeops adds a status subresource with
conditions and progress counts, `spec.provider`, and disruption budgets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, Self

from pydantic import AwareDatetime, ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from nodeops.api.conditions import Conditions
from nodeops.api.cycling import (
    Budgets,
    CycleNodeRequestNode,
    CycleNodeRequestPhase,
    CycleSettings,
    HealthCheck,
    PreTerminationCheck,
    ValidationOptions,
)
from nodeops.api.errors import FieldProblem, InvalidResource
from nodeops.api.labelselector import LabelSelector
from nodeops.api.meta import ApiModel, NonNegativeInt64
from nodeops.api.resource import AGE_COLUMN, KindInfo, PrinterColumn, Resource

__all__ = [
    "CycleNodeRequest",
    "CycleNodeRequestSpec",
    "CycleNodeRequestStatus",
    "HealthCheckStatus",
    "PreTerminationCheckStatus",
    "PreTerminationCheckStatusList",
    "Progress",
    "check_request_name",
    "node_group_names",
]

Time = Annotated[AwareDatetime, Field(strict=False)]
Names = Annotated[
    list[Annotated[str, Field(min_length=1)]],
    Field(json_schema_extra={"x-kubernetes-list-type": "atomic"}),
]

_DNS_1035: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def check_request_name(name: str) -> str | None:
    """Why `name` cannot name a request, or None.

    The name is a label value on the nodes and CycleNodeStatuses the request works on, so it
    must be a DNS-1035 label (Cyclops's rule as well).
    """
    if len(name) > 63:
        return f"Invalid value: {name!r}: must be no more than 63 characters"
    if not _DNS_1035.match(name):
        return (
            f"Invalid value: {name!r}: a DNS-1035 label must consist of lower case alphanumeric "
            "characters or '-', start with an alphabetic character, and end with an alphanumeric "
            "character"
        )
    return None


NODE_GROUP_REQUIRED: Final[JsonDict] = {
    # What `check_selection` refuses about the groups, refused by the API server as well.
    "x-kubernetes-validations": [
        {
            "rule": "(has(self.nodeGroupName) && self.nodeGroupName != '') || "
            "(has(self.nodeGroupsList) && size(self.nodeGroupsList) > 0)",
            "message": "name a node group here or in nodeGroupsList",
            "fieldPath": ".nodeGroupName",
            "reason": "FieldValueRequired",
        }
    ]
}


class CycleNodeRequestSpec(ApiModel):
    """Which nodes to replace and how."""

    model_config = ConfigDict(json_schema_extra=NODE_GROUP_REQUIRED)

    node_group_name: str = ""
    """Name of the cloud node group (an Auto Scaling group) whose nodes are replaced."""
    node_groups_list: Names | None = None
    """More cloud node groups, cycled together with nodeGroupName (duplicates are ignored);
    concurrency counts across all of them."""
    selector: LabelSelector
    """Selects the Kubernetes nodes to replace among the node groups' nodes. Must not be empty."""
    node_names: Names | None = None
    """Replace only these nodes; every selected node when unset."""
    cycle_settings: CycleSettings
    """How the nodes are cycled."""
    validation_options: ValidationOptions | None = None
    """How strictly the selected nodes are checked before cycling."""
    health_checks: list[HealthCheck] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
    """Checks every new node must pass before old nodes are cordoned (and, unless
    skipInitialHealthChecks, every selected node before cycling starts)."""
    pre_termination_checks: list[PreTerminationCheck] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
    """Triggers and checks run on each old node after it is cordoned and before it is drained."""
    skip_initial_health_checks: bool = False
    """Do not run the health checks on the selected nodes before cycling starts."""
    skip_pre_termination_checks: bool = False
    """Do not run the pre-termination checks."""
    provider: str | None = None
    """The cloud provider of the node groups (aws, openstack, sim, ...); the manager's default
    provider when unset."""
    budgets: Budgets | None = None
    """Disruption budgets: at most so many nodes of these node groups in replacement at once
    across every request, optionally only inside scheduled windows. The most restrictive budget
    in force applies, together with those of matching NodeGroups."""

    @model_validator(mode="after")
    def _selection(self) -> Self:
        check_selection(self.selector, "selector", self.node_group_name, self.node_groups_list)
        return self

    @property
    def node_groups(self) -> list[str]:
        return node_group_names(self.node_group_name, self.node_groups_list)


def check_selection(
    selector: LabelSelector, selector_field: str, group: str, more_groups: list[str] | None
) -> None:
    """A request or NodeGroup must select nodes by a label and name at least one group: an
    empty selector would match every node of the cluster."""
    if not (selector.match_labels or selector.match_expressions):
        raise FieldProblem(
            selector_field, "Required value: must select nodes by at least one label"
        )
    if not group and not more_groups:
        raise FieldProblem(
            "nodeGroupName", "Required value: name a node group here or in {}", "nodeGroupsList"
        )


def node_group_names(first: str, more: list[str] | None) -> list[str]:
    """nodeGroupName and nodeGroupsList together, de-duplicated, in order."""
    names = ([first] if first else []) + list(more or ())
    return list(dict.fromkeys(names))


class Progress(ApiModel):
    """How far the request is, in nodes."""

    total: NonNegativeInt64 = 0
    """Nodes selected for replacement."""
    cycled: NonNegativeInt64 = 0
    """Nodes replaced: drained, deleted and terminated."""
    in_progress: NonNegativeInt64 = 0
    """Nodes detached, cordoned or draining right now."""
    failed: NonNegativeInt64 = 0
    """Nodes whose CycleNodeStatus failed."""
    queued: NonNegativeInt64 = 0
    """Selected nodes not yet picked for a batch: the nodes labelled
    `nodeops.dev/selected-by=<request>` that no batch or CycleNodeStatus has taken."""


class HealthCheckStatus(ApiModel):
    """The health checks of one node."""

    ready: Time | None = None
    """When the node was first seen Ready: the start of the checks' wait periods."""
    checks: list[bool] | None = None
    """Which checks (by index in spec.healthChecks) have passed."""
    skip: bool = False
    """The node existed before cycling began (with skipInitialHealthChecks): not checked."""


class PreTerminationCheckStatus(ApiModel):
    """One pre-termination check of one node."""

    trigger: Time | None = None
    """When the trigger was sent."""
    check: bool = False
    """Whether the check after the trigger has passed."""


class PreTerminationCheckStatusList(ApiModel):
    """The pre-termination checks of one node."""

    checks: list[PreTerminationCheckStatus] | None = None
    """By index in spec.preTerminationChecks."""


class CycleNodeRequestStatus(ApiModel):
    """Where the request stands. Every fact needed to resume after a restart is here."""

    phase: CycleNodeRequestPhase = ""
    """Pending, Initialised, ScalingUp, CordoningNode, WaitingTermination, Healing, Successful
    or Failed."""
    message: str = ""
    """Details of the last problem, if any."""
    conditions: Conditions | None = None
    """Ready (the request finished), Progressing, Blocked (waiting on a budget, capacity or
    another request) and CleanedUp."""
    observed_generation: NonNegativeInt64 | None = None
    """The generation of the spec the status was computed from."""
    provider: str | None = None
    """The provider in use."""
    node_groups: list[str] | None = None
    """The cloud node groups being cycled."""
    concurrency: NonNegativeInt64 | None = None
    """The concurrency in force (spec's, or the number of selected nodes)."""
    phase_timestamp: Time | None = None
    """When the request entered its current phase."""
    started_timestamp: Time | None = None
    """When the request left its first phase."""
    finished_timestamp: Time | None = None
    """When the request became Successful or Failed."""
    current_nodes: list[CycleNodeRequestNode] | None = None
    """The batch detached from its node groups and not yet handed to CycleNodeStatuses."""
    selected_by_group: dict[str, NonNegativeInt64] | None = None
    """Nodes selected for replacement, by cloud node group. The nodes themselves carry the
    label `nodeops.dev/selected-by=<request>` until they are deleted or put back: a status
    that listed them would grow with the node group and be read at every event of the roll."""
    selection_note: str | None = None
    """What the selection left out that the spec asked for (a selector that selects nothing,
    named nodes skipped), repeated in the final message."""
    nodes_to_terminate: list[CycleNodeRequestNode] | None = None
    """Deprecated, no longer written: every node selected, as releases before the selection
    label recorded it. A request found with it labels its queue and drops the lists."""
    nodes_available: list[CycleNodeRequestNode] | None = None
    """Deprecated, no longer written: the selected nodes not yet picked for a batch, as
    releases before the selection label recorded them."""
    scale_up_started: Time | None = None
    """When the current batch was detached: the anchor of the scale-up limit."""
    equilibrium_wait_started: Time | None = None
    """When the request began waiting for the cloud and the cluster to agree."""
    active_children: NonNegativeInt64 = 0
    """CycleNodeStatuses still working."""
    thread_timestamp: str | None = None
    """The notification thread of the request."""
    num_nodes_cycled: NonNegativeInt64 = 0
    """Nodes replaced so far."""
    progress: Progress | None = None
    """Counts of nodes: total, cycled, in progress, failed."""
    health_checks: dict[str, HealthCheckStatus] | None = None
    """Health check state per node, keyed `<providerId>/<nodeName>`."""
    pre_termination_checks: dict[str, PreTerminationCheckStatusList] | None = None
    """Pre-termination check state per node, keyed by node name."""
    annotated_nodes: list[str] | None = None
    """Nodes given the cluster-autoscaler scale-down-disabled annotation by this request."""
    pods_to_move: NonNegativeInt64 | None = None
    """Pods (not DaemonSet or mirror pods) on the selected nodes when cycling began."""
    pod_moves: NonNegativeInt64 | None = None
    """Pods evicted from the request's nodes so far."""
    pod_moves_per_pod: float | None = None
    """podMoves / podsToMove: 1.0 when every pod moved once."""


class CycleNodeRequest(Resource):
    """CycleNodeRequest replaces the nodes of cloud node groups batch by batch: it detaches a
    batch from its groups so the cloud launches replacements, waits for them to be Ready and
    healthy, then hands each old node to a CycleNodeStatus that drains, deletes and terminates
    it. On failure it heals: re-attaches and uncordons what no CycleNodeStatus still works on."""

    KIND_INFO = KindInfo(
        kind="CycleNodeRequest",
        plural="cyclenoderequests",
        scope="Namespaced",
        short_names=("cnr",),
        has_status=True,
        printer_columns=(
            PrinterColumn(
                "Node Group Name", "string", ".spec.nodeGroupName", "The node group being cycled"
            ),
            PrinterColumn(
                "Method",
                "string",
                ".spec.cycleSettings.method",
                "The method being used for the cycle operation",
            ),
            PrinterColumn(
                "Concurrency",
                "integer",
                ".spec.cycleSettings.concurrency",
                "Max nodes the request is cycling at once",
            ),
            PrinterColumn("Status", "string", ".status.phase", "The status of the request"),
            PrinterColumn("Cycled", "integer", ".status.progress.cycled", "Nodes replaced"),
            PrinterColumn("Total", "integer", ".status.progress.total", "Nodes selected"),
            AGE_COLUMN,
        ),
    )

    kind: Literal["CycleNodeRequest"] = "CycleNodeRequest"
    """Kind is the REST resource this object represents."""
    cluster_name: str | None = None
    """The cluster's name in notifications."""
    spec: CycleNodeRequestSpec
    """Which nodes to replace and how."""
    status: CycleNodeRequestStatus | None = None
    """Where the request stands."""

    @classmethod
    def parse_spec(cls, obj: Mapping[str, Any]) -> Self:
        """The request as its controller sees it: metadata and spec validated, status ignored.

        The status is the controller's own record, read as a dict; a spec that is invalid, or a
        name that cannot label nodes, raises InvalidResource naming the field.
        """
        request = cls.parse({k: v for k, v in obj.items() if k != "status"})
        problem = check_request_name(request.name)
        if problem is not None:
            raise InvalidResource("metadata.name", problem)
        return request
