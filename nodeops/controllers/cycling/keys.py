"""The labels, annotations, taints and finalizers cycling puts on objects, in one place.

Every side effect has a marker, so a restarted manager (or a human) can tell what cycling did
and undo exactly that: the finalizer holds a Node until its instance is dealt with, the
node-group annotation says where a detached instance is re-attached, the managed marker says
which cluster-autoscaler annotations are ours to remove.
"""

from __future__ import annotations

from typing import Final

NODE_FINALIZER: Final = "nodeops.dev/cycling"
"""On a Node from just before its instance is detached until its Node is deleted or healed."""

NODE_GROUP_ANNOTATION: Final = "nodeops.dev/nodegroup"
"""On a Node: the cloud node group its instance was detached from, for re-attaching it."""

SELECTED_LABEL: Final = "nodeops.dev/selected-by"
"""On a Node a request selected for replacement: the request's name, from its selection until
the node is deleted or put back. The labelled nodes not yet in a batch or handed to a
CycleNodeStatus are the request's queue (`kubectl get nodes -l nodeops.dev/selected-by=NAME`),
so the request's status keeps counts, not a list that grows with the node group."""

TERMINATE_LABEL: Final = "nodeops.dev/terminate"
"""On a Node handed to a CycleNodeStatus: the name of the request replacing it."""

CYCLE_TAINT: Final = "nodeops.dev/cycling"
"""Taint on the nodes still to be replaced (value: the request's name), so evicted pods land on
new nodes rather than on nodes drained next."""

REQUEST_LABEL: Final = "nodeops.dev/cycle-node-request"
"""On a CycleNodeStatus: the request that created it."""

CYCLOPS_NAME_LABEL: Final = "name"
"""On a CycleNodeStatus: the request's name, as Cyclops labels its children."""

REQUEST_FINALIZER: Final = "nodeops.dev/cycle-cleanup"
"""On a CycleNodeRequest: a deleted request first puts its nodes back as they were."""

SCALE_DOWN_DISABLED: Final = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
"""The cluster autoscaler leaves nodes with this annotation alone; new nodes get it for the
duration of a batch so they are not removed while the old nodes' pods move onto them."""

ANNOTATION_MANAGED: Final = "nodeops.dev/annotation-managed"
"""Marks that we added SCALE_DOWN_DISABLED (value: the request's name), so we never remove an
annotation someone else set."""

DISABLE_ANNOTATION_MANAGEMENT: Final = (
    "nodeops.dev/disable-annotation-management",
    "cyclops.atlassian.com/disable-annotation-management",
)
"""On a NodeGroup, "true" opts its nodes out of the scale-down-disabled annotation."""

DO_NOT_DISRUPT: Final = (
    "nodeops.dev/do-not-disrupt",
    "cyclops.atlassian.com/do-not-disrupt",
    "karpenter.sh/do-not-disrupt",
)
"""Pod annotations the Wait method waits for: "true", or for Karpenter's a duration after the
pod started (the pod may be disrupted once it is over)."""

REASON_ANNOTATION: Final = "nodeops.dev/reason"
"""On a CycleNodeRequest made by `nodeops cycle` or the observer: why it was made."""

SUPERSEDED_LABEL: Final = "nodeops.dev/superseded-by"
"""On a Failed CycleNodeRequest: the later Successful request of the same node groups. The
observer no longer counts it as a failure; it is kept, with its reason, until it expires."""
