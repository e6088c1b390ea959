"""The maintenance controller's metrics, in the manager's registry.

The reference's `maintenance_controller_*` series under nodeops' own prefix (counters carry
`_total` in the exposition): pod shuffles when a node enters maintenance, plugin failures per
profile, and how many nodes are in each state per profile.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Iterator

from prometheus_client import Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from nodeops.kube.metrics import REGISTRY

POD_SHUFFLES = Counter(
    "nodeops_maintenance_pod_shuffle_count",
    "Pods of DaemonSets, Deployments and StatefulSets likely shuffled by a node entering "
    "maintenance",
    ["owner", "profile"],
    registry=REGISTRY,
)
POD_SHUFFLES_PER_REPLICA = Counter(
    "nodeops_maintenance_pod_shuffles_per_replica",
    "Shuffled pods divided by their owner's replica count at that moment",
    ["owner", "profile"],
    registry=REGISTRY,
)
TRANSITION_FAILURES = Counter(
    "nodeops_maintenance_transition_failure_count",
    "Plugin failures while entering, notifying, checking or triggering, per profile",
    ["profile"],
    registry=REGISTRY,
)
NOTIFICATIONS = Counter(
    "nodeops_maintenance_notifications",
    # Not `instance`: a scrape sets that label on every series and would rename ours.
    "Notifications by notification instance and result (sent, retried, failed, dropped)",
    ["notification", "result"],
    registry=REGISTRY,
)
CONFIG_RELOADS = Counter(
    "nodeops_maintenance_config_reloads",
    "Configuration (re)loads by result",
    ["result"],
    registry=REGISTRY,
)
CONFIG_GOOD = Gauge(
    "nodeops_maintenance_config_last_reload_successful",
    "1 when the last configuration load succeeded, 0 while the previous good one is in use",
    registry=REGISTRY,
)


class NodeStates(Collector):
    """`nodeops_maintenance_nodes{profile,state}`: counted at scrape time from the last
    reconcile of each node, so deleted nodes and changed profiles never leave stale series."""

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[tuple[str, str], ...]] = {}

    def set(self, node: str, states: Iterable[tuple[str, str]]) -> None:
        self._nodes[node] = tuple(states)

    def remove(self, node: str) -> None:
        self._nodes.pop(node, None)

    def tally(self) -> Tally[tuple[str, str]]:
        out: Tally[tuple[str, str]] = Tally()
        for states in self._nodes.values():
            out.update(states)
        return out

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "nodeops_maintenance_nodes",
            "Nodes per maintenance profile and state",
            labels=["profile", "state"],
        )
        for (profile, state), n in sorted(self.tally().items()):
            family.add_metric([profile, state], n)
        yield family


NODE_STATES = NodeStates()
REGISTRY.register(NODE_STATES)
