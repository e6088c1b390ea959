"""`CycleNodeStatus` (cns): the replacement of one node, created by its CycleNodeRequest.

It drains the node (or waits for its pods), deletes the Node and terminates the instance. The
request owns it (a controller owner reference), so deleting the request deletes its children.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import AwareDatetime, Field

from nodeops.api.conditions import Conditions
from nodeops.api.cycling import CycleNodeRequestNode, CycleNodeStatusPhase, CycleSettings
from nodeops.api.meta import ApiModel, NonNegativeInt64
from nodeops.api.resource import AGE_COLUMN, KindInfo, PrinterColumn, Resource

__all__ = ["CycleNodeStatus", "CycleNodeStatusSpec", "CycleNodeStatusStatus"]

Time = Annotated[AwareDatetime, Field(strict=False)]


class CycleNodeStatusSpec(ApiModel):
    """The node to replace and how."""

    node_name: Annotated[str, Field(min_length=1)]
    """Name of the node."""
    cycle_settings: CycleSettings
    """The settings of the request that created this."""
    provider: str | None = None
    """The cloud provider that terminates the instance; the manager's default when unset."""
    node_group_name: str | None = None
    """The cloud node group the node's instance was detached from."""
    provider_id: str | None = Field(default=None, alias="providerId")
    """The node's provider ID when the request picked it, so its instance is terminated even
    if the Node is deleted by someone else first."""


class CycleNodeStatusStatus(ApiModel):
    """Where the replacement of the node stands."""

    phase: CycleNodeStatusPhase = ""
    """Pending, WaitingPods, RemovingLabelsFromPods, DrainingPods, DeletingNode,
    TerminatingNode, Successful or Failed."""
    message: str = ""
    """Details of the last problem, or of what the drain waits for."""
    conditions: Conditions | None = None
    """Drained (with the pods still blocking while False)."""
    current_node: CycleNodeRequestNode | None = None
    """The node, recorded before anything is done to it."""
    phase_timestamp: Time | None = None
    """When the node entered its current phase."""
    started_timestamp: Time | None = None
    """When work on the node started."""
    timeout_timestamp: Time | None = None
    """When the node fails if it is not replaced by then (cyclingTimeout)."""
    drain_started_timestamp: Time | None = None
    """When draining began: the anchor of the drain deadline."""
    pods_to_move: NonNegativeInt64 | None = None
    """Pods the drain had to move off the node when it began."""
    forced: bool = False
    """The drain deadline passed and the remaining pods were deleted without their budgets."""


class CycleNodeStatus(Resource):
    """CycleNodeStatus replaces one node: it waits for or drains its pods, deletes the Node and
    terminates the instance. Created by a CycleNodeRequest."""

    KIND_INFO = KindInfo(
        kind="CycleNodeStatus",
        plural="cyclenodestatuses",
        scope="Namespaced",
        short_names=("cns",),
        has_status=True,
        printer_columns=(
            PrinterColumn("Node", "string", ".status.currentNode.name", "The name of the node"),
            PrinterColumn(
                "Provider ID",
                "string",
                ".status.currentNode.providerId",
                "The provider ID of the node",
            ),
            PrinterColumn(
                "Method",
                "string",
                ".spec.cycleSettings.method",
                "The method being used for the cycle operation",
            ),
            PrinterColumn("Status", "string", ".status.phase", "The status of the request"),
            AGE_COLUMN,
        ),
    )

    kind: Literal["CycleNodeStatus"] = "CycleNodeStatus"
    """Kind is the REST resource this object represents."""
    spec: CycleNodeStatusSpec
    """The node to replace and how."""
    status: CycleNodeStatusStatus | None = None
    """Where the replacement of the node stands."""

    @classmethod
    def parse_spec(cls, obj: Mapping[str, Any]) -> Self:
        """Metadata and spec validated; the status is the controller's own record."""
        return cls.parse({k: v for k, v in obj.items() if k != "status"})
