"""Cycling's own metrics, in the manager's registry beside controller-runtime's.

Counters and histograms are updated on transitions; the number of requests per phase is read
from the informer at scrape time, so it is right after a restart and never drifts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from nodeops.kube.metrics import REGISTRY

__all__ = [
    "FAILURES",
    "NODES_CYCLED",
    "PHASE_SECONDS",
    "POD_MOVES",
    "TRANSITIONS",
    "register_phase_gauge",
]

TRANSITIONS = Counter(
    "nodeops_cycling_transitions_total",
    "Phase transitions of CycleNodeRequests and CycleNodeStatuses",
    ["kind", "phase"],
    registry=REGISTRY,
)
PHASE_SECONDS = Histogram(
    "nodeops_cycling_phase_duration_seconds",
    "Time spent in a phase, observed when it is left",
    ["kind", "phase"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400),
    registry=REGISTRY,
)
NODES_CYCLED = Counter(
    "nodeops_cycling_nodes_cycled_total",
    "Nodes replaced (drained, deleted and terminated)",
    registry=REGISTRY,
)
FAILURES = Counter(
    "nodeops_cycling_failures_total",
    "CycleNodeRequests and CycleNodeStatuses that failed, by reason",
    ["kind", "reason"],
    registry=REGISTRY,
)
POD_MOVES = Counter(
    "nodeops_cycling_pod_moves_total",
    "Pods moved off nodes being replaced (a pod moved twice counts twice)",
    registry=REGISTRY,
)


class _PhaseCollector(Collector):
    def __init__(self, source: Callable[[], Iterable[dict[str, Any]]]) -> None:
        self.source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "nodeops_cycling_requests",
            "CycleNodeRequests by phase",
            labels=["phase"],
        )
        counts: dict[str, int] = {}
        try:
            for obj in self.source():
                phase = (obj.get("status") or {}).get("phase") or "Undefined"
                counts[phase] = counts.get(phase, 0) + 1
        except Exception:  # not synced yet: report nothing rather than zeros
            return
        for phase, count in sorted(counts.items()):
            family.add_metric([phase], count)
        yield family


_collector: _PhaseCollector | None = None


def register_phase_gauge(source: Callable[[], Iterable[dict[str, Any]]]) -> None:
    """Serve `nodeops_cycling_requests{phase}` from `source` (the requests' informer)."""
    global _collector
    if _collector is not None:
        _collector.source = source
        return
    _collector = _PhaseCollector(source)
    REGISTRY.register(_collector)
