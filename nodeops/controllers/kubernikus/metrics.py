"""The Kubernikus controller's metrics, in the manager's registry.

What is on the nodes (outdated kubelets, replacements under way and the oldest one's age) is
counted from the nodes' informer at scrape time: it is right after a restart, served by every
replica alike, and never outlives a node. What happened (replacements started, completed and
cancelled; the Warnings of the delete flow) is counted as it happens. Its drains are in the drain
engine's families under `controller="kubernikus"`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from nodeops.controllers.kubernikus.keys import Keys
from nodeops.controllers.kubernikus.progress import ProgressError, read_progress
from nodeops.kube import objects as o
from nodeops.kube.errors import NotSynced
from nodeops.kube.metrics import REGISTRY

__all__ = ["FAILURES", "NODE_GAUGES", "REPLACEMENTS"]

REPLACEMENTS = Counter(
    "nodeops_kubernikus_replacements",
    "Node replacements (delete-node label -> drain, server deleted, Node removed) by "
    "transition: started, completed (the server is gone), cancelled (the label was removed)",
    ["transition"],
    registry=REGISTRY,
)
FAILURES = Counter(
    "nodeops_kubernikus_replacement_failures",
    "Failed or stalled steps of node replacements (each is retried), by the reason of the "
    "Warning Event on the node",
    ["reason"],
    registry=REGISTRY,
)


class NodeGauges(Collector):
    """The gauges counted from the nodes' informer; without one (before the controller is set
    up) its families have no samples."""

    def __init__(self) -> None:
        self._source: tuple[Callable[[], list[dict[str, Any]]], Keys] | None = None
        self._clock: Callable[[], datetime] = o.now

    def watch(
        self,
        nodes: Callable[[], list[dict[str, Any]]],
        keys: Keys,
        clock: Callable[[], datetime] = o.now,
    ) -> None:
        """Count from `nodes` (the informer's `objects`); a later setup in the same process
        (tests) points the gauges at its own informer."""
        self._source = (nodes, keys)
        self._clock = clock

    def describe(self) -> list[GaugeMetricFamily]:
        """The families without samples: their names and label names."""
        return list(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        outdated, in_progress, oldest = self._families()
        nodes: list[dict[str, Any]] | None = None
        keys: Keys | None = None
        if self._source is not None:
            source, keys = self._source
            try:
                nodes = source()
            except NotSynced:  # before the first sync: no samples rather than zeros
                nodes = None
        if nodes is not None and keys is not None:
            steps: dict[str, int] = {}
            starts: list[datetime] = []
            for node in nodes:
                try:
                    progress = read_progress(node, keys)
                except ProgressError:
                    progress = None  # the controller discards it and starts over
                if progress is not None:
                    steps[progress.step.value] = steps.get(progress.step.value, 0) + 1
                    starts.append(progress.started)
            outdated.add_metric(
                [], sum(o.labels(n).get(keys.needs_update) == "true" for n in nodes)
            )
            for step, count in sorted(steps.items()):
                in_progress.add_metric([step], count)
            if starts:
                oldest.add_metric([], max(0.0, (self._clock() - min(starts)).total_seconds()))
        yield outdated
        yield in_progress
        yield oldest

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        outdated = GaugeMetricFamily(
            "nodeops_kubernikus_nodes_outdated",
            "Nodes labelled for a kubelet update (their kubelet's version differs from the API "
            "server's)",
        )
        in_progress = GaugeMetricFamily(
            "nodeops_kubernikus_replacements_in_progress",
            "Nodes being replaced, by the step their progress record names",
            labels=["step"],
        )
        oldest = GaugeMetricFamily(
            "nodeops_kubernikus_oldest_replacement_seconds",
            "Seconds since the oldest replacement in progress began",
        )
        return outdated, in_progress, oldest


NODE_GAUGES = NodeGauges()
REGISTRY.register(NODE_GAUGES)
