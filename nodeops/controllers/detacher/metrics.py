"""The detacher's own metrics, served with the runtime's on the manager's `/metrics`."""

from __future__ import annotations

from prometheus_client import Counter

from nodeops.kube.metrics import REGISTRY

__all__ = ["DRAINING_TIMEOUTS", "TARGET_CALLS", "TRANSITIONS"]

TARGET_CALLS = Counter(
    "nodeops_detacher_target_calls_total",
    "Deregistrations and registrations of nodes in load balancer targets, by outcome "
    "(ok, or the provider's error code).",
    ["call", "outcome"],
    registry=REGISTRY,
)
TRANSITIONS = Counter(
    "nodeops_detacher_transitions_total",
    "Nodes that finished leaving (Detached) or rejoining (Attached) their load balancers.",
    ["phase"],
    registry=REGISTRY,
)
DRAINING_TIMEOUTS = Counter(
    "nodeops_detacher_draining_timeouts_total",
    "Targets still draining after the draining timeout, given up on.",
    registry=REGISTRY,
)
