"""The models of our custom resources (group nodeops.dev, version v1alpha1) and their CRDs.

`KINDS` is the registry of every kind we serve: a new kind joins it here, and from then on its
CRD is generated, rendered and checked for drift with the others.
"""

from __future__ import annotations

from typing import Final

from nodeops.api.conditions import (
    Condition,
    Conditions,
    ConditionStatus,
    find_condition,
    is_condition_true,
    remove_condition,
    set_condition,
)
from nodeops.api.crd import all_crds, crd_for, render_crds_yaml, write_all_crd_files
from nodeops.api.cyclenoderequest import CycleNodeRequest
from nodeops.api.cyclenodestatus import CycleNodeStatus
from nodeops.api.drainrule import DrainBehavior, NodeDrainRule
from nodeops.api.errors import FieldError, InvalidResource
from nodeops.api.labelselector import LabelSelector, LabelSelectorRequirement
from nodeops.api.loadbalancerattachment import LoadBalancerAttachment
from nodeops.api.meta import API_VERSION, GROUP, VERSION, ObjectMeta
from nodeops.api.nodegroup import NodeGroup
from nodeops.api.resource import KindInfo, PrinterColumn, Resource

__all__ = [
    "API_VERSION",
    "GROUP",
    "KINDS",
    "VERSION",
    "Condition",
    "ConditionStatus",
    "Conditions",
    "CycleNodeRequest",
    "CycleNodeStatus",
    "DrainBehavior",
    "FieldError",
    "InvalidResource",
    "KindInfo",
    "LabelSelector",
    "LabelSelectorRequirement",
    "LoadBalancerAttachment",
    "NodeDrainRule",
    "NodeGroup",
    "ObjectMeta",
    "PrinterColumn",
    "Resource",
    "all_crds",
    "crd_for",
    "find_condition",
    "is_condition_true",
    "remove_condition",
    "render_crds_yaml",
    "set_condition",
    "write_all_crd_files",
]

KINDS: Final[tuple[type[Resource], ...]] = (
    NodeDrainRule,
    CycleNodeRequest,
    CycleNodeStatus,
    NodeGroup,
    LoadBalancerAttachment,
)
