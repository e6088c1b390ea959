"""The drain engine's metrics, in the manager's registry: why a drain is stuck, at a glance.

Every controller drains through `Drainer`, so these families cover all of them; the label
`controller` says whose drain it is (the name the runtime's `controller_runtime_*` series use).

- `nodeops_drain_evictions_total{controller,result}`: the answers to evictions sent (`evicted`,
  `refused`: a 429, a PodDisruptionBudget without room; `failed`: any other error), pods
  `deleted` instead (eviction disabled) and stuck pods `force_deleted`. Dry runs are not counted.
- `nodeops_drain_pods_waiting_on_budget{controller,node}`: per node being drained, its pods whose
  last eviction a budget held back (by the server's 429, or by the engine's own count of the
  budget's room before asking).
- `nodeops_drain_in_progress{controller}` and `nodeops_drain_oldest_in_progress_seconds{controller}`:
  the drains in progress and the age of the oldest, from the start the caller keeps (so a new
  leader reports the true age).

The last three are computed at scrape time from the drains in progress: a drain is in progress
from its first pass until a pass finds it complete, out of time or its node gone (or `drain`
returns, or its caller calls `Drainer.stopped`); a refused or failing pass keeps it, for a stuck
drain is still one. Controllers step their
drains every few seconds to a minute; one not stepped for `STALE_AFTER` was abandoned (its
request withdrawn, the node gone, leadership lost) and is no longer reported, so no series
outlives the drain behind it. The node label's cardinality is the number of nodes being drained
at once, never pods.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

import structlog
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from nodeops.kube import objects as o
from nodeops.kube.metrics import REGISTRY

__all__ = [
    "DEFAULT_CONTROLLER",
    "DRAINS",
    "EVICTIONS",
    "STALE_AFTER",
    "DrainsInProgress",
    "controller_in_context",
]

STALE_AFTER = 600.0
"""Seconds without a pass after which a drain counts as abandoned."""

DEFAULT_CONTROLLER = "drain"
"""The label of drains outside any controller (`nodeops drain`)."""

EVICTED, REFUSED, FAILED, DELETED, FORCE_DELETED = (
    "evicted",
    "refused",
    "failed",
    "deleted",
    "force_deleted",
)

EVICTIONS = Counter(
    "nodeops_drain_evictions",
    "Pods evicted, evictions refused by a PodDisruptionBudget (429) or failed otherwise, pods "
    "deleted instead of evicted and stuck pods force-deleted, by the controller draining",
    ["controller", "result"],
    registry=REGISTRY,
)


def controller_in_context() -> str:
    """The controller whose reconcile is running (the manager binds its name for the logs),
    else `DEFAULT_CONTROLLER`: the label of a `Drainer` its builder did not name."""
    name = structlog.contextvars.get_contextvars().get("controller")
    return str(name) if name else DEFAULT_CONTROLLER


@dataclass
class _Drain:
    started: datetime
    waiting: int
    seen: float  # monotonic time of the last pass


class DrainsInProgress(Collector):
    """The drains in progress by (controller, node), and the gauges computed from them."""

    def __init__(
        self,
        *,
        clock: Callable[[], datetime] = o.now,
        monotonic: Callable[[], float] = time.monotonic,
        stale_after: float = STALE_AFTER,
    ) -> None:
        self._clock = clock
        self._monotonic = monotonic
        self._stale_after = stale_after
        self._drains: dict[tuple[str, str], _Drain] = {}
        self._lock = threading.Lock()  # a registry may be collected from any thread

    def passed(self, controller: str, node: str, started: datetime, waiting: int | None) -> None:
        """A pass of the drain of `node` found it not complete, `waiting` pods held back by
        their budgets (None: the pass could not tell; the last count stays)."""
        with self._lock:
            last = self._drains.get((controller, node))
            if waiting is None:
                waiting = last.waiting if last is not None else 0
            self._drains[(controller, node)] = _Drain(started, waiting, self._monotonic())

    def finished(self, controller: str, node: str) -> None:
        """The drain completed, or its caller stopped it: its series go."""
        with self._lock:
            self._drains.pop((controller, node), None)

    def current(self) -> dict[tuple[str, str], _Drain]:
        """The drains in progress; abandoned ones are dropped here."""
        limit = self._monotonic() - self._stale_after
        with self._lock:
            for key in [k for k, d in self._drains.items() if d.seen < limit]:
                del self._drains[key]
            return dict(self._drains)

    def describe(self) -> list[GaugeMetricFamily]:
        """The families without samples: their names and label names."""
        return list(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        drains = self.current()
        now = self._clock()
        waiting, count, oldest = self._families()
        by_controller: dict[str, list[datetime]] = {}
        for (controller, node), drain in sorted(drains.items(), key=lambda item: item[0]):
            waiting.add_metric([controller, node], drain.waiting)
            by_controller.setdefault(controller, []).append(drain.started)
        for controller, starts in sorted(by_controller.items()):
            count.add_metric([controller], len(starts))
            oldest.add_metric([controller], max(0.0, (now - min(starts)).total_seconds()))
        yield waiting
        yield count
        yield oldest

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        waiting = GaugeMetricFamily(
            "nodeops_drain_pods_waiting_on_budget",
            "Pods of a node being drained whose eviction a PodDisruptionBudget holds back",
            labels=["controller", "node"],
        )
        count = GaugeMetricFamily(
            "nodeops_drain_in_progress",
            "Drains in progress (not yet found complete), by the controller draining",
            labels=["controller"],
        )
        oldest = GaugeMetricFamily(
            "nodeops_drain_oldest_in_progress_seconds",
            "Seconds since the oldest drain in progress began, by the controller draining",
            labels=["controller"],
        )
        return waiting, count, oldest


DRAINS = DrainsInProgress()
REGISTRY.register(DRAINS)
