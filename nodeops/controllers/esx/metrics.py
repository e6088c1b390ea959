"""The esx controller's metrics, in the manager's registry.

vCenter polls are counted by outcome and their duration observed, so an alert can tell a
vCenter that stopped answering from one that is slow; the hosts in maintenance are a gauge set
by each successful poll; VM power operations and the flow's Warnings are counted as they happen.
Drains are in the drain engine's families under `controller="esx"`.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from nodeops.kube.metrics import REGISTRY

__all__ = ["FAILURES", "HOSTS_IN_MAINTENANCE", "POLLS", "POLL_SECONDS", "POWER_ACTIONS", "READY"]

POLLS = Counter(
    "nodeops_esx_vcenter_polls",
    "Inventory polls of vCenter (one property-collector call each), by result: ok or the "
    "error code (Unreachable, Login, TLS, Timeout, Fault)",
    ["result"],
    registry=REGISTRY,
)
POLL_SECONDS = Histogram(
    "nodeops_esx_vcenter_poll_seconds",
    "Duration of vCenter inventory polls",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
READY = Gauge(
    "nodeops_esx_vcenter_up",
    "1 while the last vCenter poll succeeded, 0 after a failed one",
    registry=REGISTRY,
)
HOSTS_IN_MAINTENANCE = Gauge(
    "nodeops_esx_hosts_in_maintenance",
    "ESX hosts in or entering maintenance, as of the last vCenter poll",
    registry=REGISTRY,
)
POWER_ACTIONS = Counter(
    "nodeops_esx_vm_power_actions",
    "Power operations sent to nodes' VMs, by action: shutdown_guest, power_off, power_on",
    ["action"],
    registry=REGISTRY,
)
FAILURES = Counter(
    "nodeops_esx_failures",
    "Failed or stalled steps of the maintenance flow (each is retried), by the reason of the "
    "Warning Event on the node",
    ["reason"],
    registry=REGISTRY,
)
