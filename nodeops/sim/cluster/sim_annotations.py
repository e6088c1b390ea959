"""Annotations that steer the simulation of a pod or node.

Scenarios set them on ordinary objects (through pod templates, or by patching a node) so that
"this job runs for 90 s" or "this node's kubelet died" needs no side channel to the simulator.
"""

from __future__ import annotations

PREFIX = "sim.nodeops.dev/"

# Pods -----------------------------------------------------------------------------------------

RUN_SECONDS = PREFIX + "run-seconds"
"""Seconds a pod with restartPolicy Never/OnFailure runs before it completes (phase Succeeded)."""

START_SECONDS = PREFIX + "start-seconds"
"""Per-pod override of the kubelet's start delay (seconds from binding to Running)."""

EXIT_CODE = PREFIX + "exit-code"
"""The code every container of a pod exits with when it stops (default 0): on completion after
`run-seconds`, and when the pod is deleted (137 models a process that ignores SIGTERM and is
killed at the end of its grace period). 0 ends in phase Succeeded, anything else in Failed."""

READY = PREFIX + "ready"
""""false" keeps a running pod unready (a failing readiness probe); changing it flips Ready."""

# Nodes ----------------------------------------------------------------------------------------

KUBELET_STATE = PREFIX + "kubelet"
"""The simulated kubelet's health on a node: "Running" (default), "NotReady", or "Stopped".

NotReady: the kubelet renews its lease but reports Ready=False and leaves pods as they are.
Stopped: the kubelet is gone; no lease, no status, no pod updates, so the node lifecycle
controller marks the node Unknown once the grace period passes.
"""

KUBELET_RUNNING = "Running"
KUBELET_NOT_READY = "NotReady"
KUBELET_STOPPED = "Stopped"
