"""A PodDisruptionBudget referee reading the simulator's own record of every pod write."""

from __future__ import annotations

from typing import Any

import orjson

from nodeops.sim.server.app import SimServer
from nodeops.sim.server.store import WatchEvent


def _healthy(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


class BudgetMonitor:
    """Sees each pod write as the server stores it; records the fewest healthy pods per app
    (the pods whose `app` label, or the label named in `watch`, has that value)."""

    def __init__(self, server: SimServer) -> None:
        self.budgets: dict[str, int] = {}
        self.labels: dict[str, str] = {}
        self.healthy: dict[str, dict[str, bool]] = {}
        self.lowest: dict[str, int] = {}
        self.evictions: dict[str, int] = {}
        self.server = server
        server.store.write_hooks.append(self._on_write)

    def watch(self, app: str, *, min_available: int, label: str = "app") -> None:
        """Start refereeing the pods labelled `label=app`, from the state the server holds now."""
        self.budgets[app] = min_available
        self.labels[app] = label
        self.evictions.setdefault(app, 0)
        pods = self.healthy.setdefault(app, {})
        for entry in self.server.store.bucket(("", "pods")).entries():
            if entry.labels.get(label) == app:
                pods[entry.name] = _healthy(entry.decode())

    def _on_write(self, key: tuple[str, str], ev: WatchEvent) -> None:
        if key != ("", "pods"):
            return
        pod = orjson.loads(ev.entry.raw)
        labels = pod["metadata"].get("labels") or {}
        for app, label in self.labels.items():
            if labels.get(label) == app:
                self._count(app, pod, ev)

    def _count(self, app: str, pod: dict[str, Any], ev: WatchEvent) -> None:
        pods = self.healthy[app]
        name = pod["metadata"]["name"]
        was_healthy = pods.get(name, False)
        if ev.type == "DELETED":
            pods.pop(name, None)
        else:
            pods[name] = _healthy(pod)
        if was_healthy and not pods.get(name, False):
            conditions = (pod.get("status") or {}).get("conditions") or ()
            if any(c.get("type") == "DisruptionTarget" for c in conditions):
                self.evictions[app] += 1
        count = sum(pods.values())
        self.lowest[app] = min(self.lowest.get(app, count), count)

    def assert_never_violated(self) -> None:
        for app, need in self.budgets.items():
            lowest = self.lowest.get(app, need)
            assert lowest >= need, f"budget of {app} violated: {lowest} healthy < {need}"
