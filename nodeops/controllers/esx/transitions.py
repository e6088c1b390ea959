"""The maintenance flow of one node as data: where it stands and what to do next.

Cordon and drain; ask the guest to shut down; power the VM off if it has not stopped within
the timeout; keep it off while its host is in maintenance; power it on once the host left;
wait for the node to be Ready; uncordon it and remove the marks. The step is written into an
annotation on the node *before* it is taken, so a restarted controller (or a new leader)
continues from there. Power operations are only sent to a VM whose state, read right before,
is not already the wanted one: a resumed flow never powers a machine on or off twice.

Nothing here does I/O; `next_action` decides and the reconciler acts.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from nodeops.controllers.kit import NodeProgress, ProgressError

__all__ = ["Action", "Facts", "Progress", "ProgressError", "Step", "next_action"]


class Step(StrEnum):
    DRAINING = "Draining"
    """Cordoned; pods are being evicted."""
    SHUTTING_DOWN = "ShuttingDown"
    """Drained; the guest OS was (or is about to be) asked to shut down."""
    POWERING_OFF = "PoweringOff"
    """The guest did not stop within the timeout, or cannot be asked: the VM is powered off."""
    OFF = "Off"
    """The VM is off; waiting for the host to leave maintenance."""
    POWERING_ON = "PoweringOn"
    """The host left maintenance; the VM is (being) powered on, the node not yet Ready."""


class Action(StrEnum):
    NONE = "None"
    START = "Start"
    """Cordon, mark the reboot initiated and record `Draining`, in one write."""
    CANCEL = "Cancel"
    """The host left maintenance while the node was draining: undo our cordon and marks."""
    DRAIN = "Drain"
    SHUTDOWN_GUEST = "ShutdownGuest"
    WAIT_FOR_SHUTDOWN = "WaitForShutdown"
    POWER_OFF = "PowerOff"
    RECORD_OFF = "RecordOff"
    STAY_OFF = "StayOff"
    POWER_ON = "PowerOn"
    WAIT_FOR_READY = "WaitForReady"
    FINISH = "Finish"
    """Powered on and Ready: uncordon (if we cordoned) and remove the marks."""


class Progress(NodeProgress[Step]):
    """The node's place in the flow, in the `esx-maintenance-progress` annotation."""

    __slots__ = ()
    steps = Step
    first = Step.DRAINING
    what = "an esx maintenance record"


@dataclass(frozen=True, slots=True)
class Facts:
    """What is true of the node, its VM and its host right now."""

    host_in_maintenance: bool
    all_reboot_ok: bool
    """Every node on the host carries the reboot-ok label."""
    vm_on: bool
    node_ready: bool
    """Ready, as reported after the flow's current step began."""
    shutdown_overdue: bool
    """The guest has had its shutdown timeout."""


def next_action(facts: Facts, progress: Progress | None) -> Action:
    if progress is None:
        if facts.host_in_maintenance and facts.all_reboot_ok:
            return Action.START
        return Action.NONE
    match progress.step:
        case Step.DRAINING:
            return Action.DRAIN if facts.host_in_maintenance else Action.CANCEL
        case Step.SHUTTING_DOWN:
            if not facts.vm_on:
                return Action.RECORD_OFF
            return Action.POWER_OFF if facts.shutdown_overdue else Action.WAIT_FOR_SHUTDOWN
        case Step.POWERING_OFF:
            return Action.POWER_OFF if facts.vm_on else Action.RECORD_OFF
        case Step.OFF:
            return Action.STAY_OFF if facts.host_in_maintenance else Action.POWER_ON
        case Step.POWERING_ON:
            if not facts.vm_on:
                return Action.POWER_ON
            return Action.FINISH if facts.node_ready else Action.WAIT_FOR_READY
