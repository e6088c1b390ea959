"""The delete-node flow as data: where a node's deletion stands and what to do next.

The flow is cordon and drain, delete the server, wait for it to be gone, remove the Node. Each
step is written into an annotation on the node *before* it is taken, so a controller that
restarts (or a new leader) reads the annotation and carries on from there; every step is
idempotent, so doing one twice after a crash is harmless.

Nothing here does I/O: `next_action` decides from the node, the annotation and the clock, and
the reconciler carries the action out. That keeps every path of the flow testable without a
cluster.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from nodeops.controllers.kit import NodeProgress, ProgressError
from nodeops.controllers.kubernikus.keys import Keys
from nodeops.kube import objects as o

__all__ = ["Action", "Progress", "ProgressError", "Step", "delete_requested", "next_action"]


class Step(StrEnum):
    DRAINING = "Draining"
    """Cordoned; pods are being evicted."""
    DELETING_SERVER = "DeletingServer"
    """Drained; the server's deletion is about to be requested (or was, before a crash)."""
    WAITING_FOR_SERVER = "WaitingForServer"
    """The cloud accepted the deletion; waiting until it no longer lists the server."""
    REMOVING_NODE = "RemovingNode"
    """The server is gone; the Node object is about to be deleted."""
    SERVER_DELETED = "ServerDeleted"
    """The server is gone and the Node is left for the cloud controller manager to remove."""


class Action(StrEnum):
    NONE = "None"
    START = "Start"
    """Cordon and record `Draining`, in one write."""
    CANCEL = "Cancel"
    """The request was withdrawn before the server deletion began: undo the cordon we did."""
    DRAIN = "Drain"
    DELETE_SERVER = "DeleteServer"
    WAIT_FOR_SERVER = "WaitForServer"
    REMOVE_NODE = "RemoveNode"
    WAIT_FOR_NODE_REMOVAL = "WaitForNodeRemoval"


class Progress(NodeProgress[Step]):
    """The node's place in the delete flow, in the `delete-node-progress` annotation."""

    __slots__ = ()
    steps = Step
    first = Step.DRAINING
    what = "a delete-node progress record"


def delete_requested(node: dict[str, Any], keys: Keys) -> bool:
    return o.labels(node).get(keys.delete_node) == "true"


def read_progress(node: dict[str, Any], keys: Keys) -> Progress | None:
    """The node's progress record, None without one; raises `ProgressError` for garbage."""
    return Progress.of_node(node, keys.delete_progress)


def next_action(requested: bool, progress: Progress | None, *, remove_node: bool) -> Action:
    """What to do for a node, from whether deletion is asked for and how far it got.

    Withdrawing the request (removing the label) cancels the flow only while it is still
    draining; from `DeletingServer` on, the server may already be going, so the flow finishes.
    """
    if progress is None:
        return Action.START if requested else Action.NONE
    match progress.step:
        case Step.DRAINING:
            return Action.DRAIN if requested else Action.CANCEL
        case Step.DELETING_SERVER:
            return Action.DELETE_SERVER
        case Step.WAITING_FOR_SERVER:
            return Action.WAIT_FOR_SERVER
        case Step.REMOVING_NODE:
            return Action.REMOVE_NODE if remove_node else Action.WAIT_FOR_NODE_REMOVAL
        case Step.SERVER_DELETED:
            return Action.REMOVE_NODE if remove_node else Action.WAIT_FOR_NODE_REMOVAL
