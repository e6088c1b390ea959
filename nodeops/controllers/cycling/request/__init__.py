"""The CycleNodeRequest controller: Cyclops's state machine, crash-safe at every step.

Each reconcile runs the step of the phase stored in status (`reconciler.TRANSITIONS`) and ends
by writing the next phase, or by waiting for an event: a child CycleNodeStatus changing, a node
becoming Ready, the cloud poller seeing a node group change, or the one timer a phase needs (a
timeout, a health check retry, a budget window). The phases are Cyclops's:

    Pending -> Initialised -> ScalingUp -> CordoningNode -> WaitingTermination -> Initialised ...
    ... -> Successful                         any failure -> Healing -> Failed

The steps live by concern: `selection` (Pending: which nodes, and the claim on them),
`batching` (Initialised, WaitingTermination: concurrency and budgets), `scaleup` and
`annotations` (ScalingUp), `health` (every check), `handover` (CordoningNode), `healing`,
and `cleanup` (Successful, Failed, deleted). What makes each step safe to crash in and repeat:

- Intent before action. The selected nodes are labelled before the status leaves Pending (the
  queue lives on the nodes, so the status stays the same size whatever the group's). A batch's
  nodes get the finalizer and their origin group before their instances are detached, and the
  batch is written to `status.currentNodes` (with the phase ScalingUp) before the first detach
  call; ScalingUp detaches whatever of the batch is still attached, so a crash between the
  write and the calls loses nothing.
- Idempotent children. A CycleNodeStatus has a deterministic name; finding it already there is
  success.
- Healing touches only nodes no CycleNodeStatus is still working on, and waits for the working
  ones to finish before the request becomes Failed. Successful and Failed are terminal: their
  reconciles only clean up, never change the phase.
- Every irreversible call (detach; deleting a Node) is preceded by `ctx.ensure_may_act`.
"""

from __future__ import annotations

from nodeops.controllers.cycling.request.env import (
    BY_NODE,
    BY_OWNER,
    BY_PROVIDER_ID,
    child_name,
    cnr_node,
)
from nodeops.controllers.cycling.request.reconciler import TRANSITIONS, CycleNodeRequestReconciler

__all__ = [
    "BY_NODE",
    "BY_OWNER",
    "BY_PROVIDER_ID",
    "TRANSITIONS",
    "CycleNodeRequestReconciler",
    "child_name",
    "cnr_node",
]
