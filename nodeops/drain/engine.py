"""The drain engine: cordon, decide, evict in order, wait, report.

One algorithm serves `nodeops drain` (`Drainer.drain`: run to completion) and the controllers
(`Drainer.step`: one pass that returns progress for a condition, then the reconciler requeues).
Both look at the node the same way (kubectl's filters, then rules, labels and priorities), take
the same budget tokens, honour dry runs and the volume wait alike; they differ only in where they
read the cluster (`nodeops.drain.sources`) and in whether they wait for the next change.

Waiting is driven by watches, never by polling: the node's pods are watched (a deletion is seen
the moment it happens, and a pod re-created under the same name is told apart by its UID), and
so are the PodDisruptionBudgets, so an eviction is sent the moment its budget allows it rather
than on a fixed timer. Budgets are never bypassed: pods are deleted instead of evicted only when
the caller disables eviction, and pods stuck terminating past their grace are force-deleted only
when asked for.

`Drainer` is the entry point and what it does to the node itself (cordon, taint); one drain of one
node is a `DrainRun` (`nodeops.drain.run`), the API calls that take pods off are in
`nodeops.drain.eviction`, and what a drain reports in `nodeops.drain.results`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from nodeops.drain.errors import (
    DrainError,
    DrainTimeout,
    PreflightError,
    VolumeDetachTimeout,
)
from nodeops.drain.metrics import DRAINS, controller_in_context
from nodeops.drain.options import DAEMONSET_DRAIN_TAINT, DrainOptions
from nodeops.drain.results import DrainProgress, DrainResult, ProgressCallback
from nodeops.drain.run import DrainRun
from nodeops.drain.sources import ClusterSnapshot, DrainSources, WatchedCluster
from nodeops.kube import errors
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.clock import Clock
from nodeops.kube.events import EventRecorder
from nodeops.kube.resources import NODES

Obj = dict[str, Any]

__all__ = [
    "DrainError",
    "DrainProgress",
    "DrainResult",
    "DrainTimeout",
    "Drainer",
    "PreflightError",
    "ProgressCallback",
    "VolumeDetachTimeout",
]


class Drainer:
    """Drains nodes. `sources` says where the cluster is read (see `nodeops.drain.sources`):
    by default `drain` watches on its own and `step` lists once per pass; a controller passes
    `SharedInformers.for_manager(manager)`, made once when the controllers are set up.

    `controller` names whose drains these are in the drain metrics (`nodeops.drain.metrics`):
    the controller's name, as the runtime's metrics give it. Unnamed, a drain is labelled with
    the controller whose reconcile runs it, or `drain` outside any.
    """

    def __init__(
        self,
        client: Client,
        options: DrainOptions | None = None,
        *,
        sources: DrainSources | None = None,
        events: EventRecorder | None = None,
        on_progress: ProgressCallback | None = None,
        on_evicting: Callable[[Obj], None] | None = None,
        on_gone: Callable[[Obj], None] | None = None,
        on_warnings: Callable[[list[str]], None] | None = None,
        controller: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.controller = controller
        self.options = options or DrainOptions()
        self.clock = clock or Clock()
        """The cluster's time, which the options' seconds are in; a simulated cluster's runs
        faster than the loop's timers, and the drain's waits and deadlines follow it."""
        self.sources = sources
        self.events = events
        self.on_progress = on_progress
        self.on_evicting = on_evicting
        self.on_gone = on_gone  # an evicted pod is gone from the node
        self.on_warnings = on_warnings  # the pre-flight passed with these warnings
        # When each node's volume wait began, for `volume_timeout` across `step` passes.
        self.volumes_since: dict[str, float] = {}
        # The budgets each node's last `step` waited on, and the nodes waiting on each budget.
        self._held: dict[str, frozenset[tuple[str, str]]] = {}
        self._holding: dict[tuple[str, str], set[str]] = {}

    # ------------------------------------------------------------------ cordon

    async def cordon(
        self, node_name: str, unschedulable: bool = True, node: Obj | None = None
    ) -> tuple[Obj, bool]:
        """Set `spec.unschedulable`; returns (node, changed). A no-op when already so."""
        if node is None:
            node = await self.client.get(NODES, node_name)
        if bool((node.get("spec") or {}).get("unschedulable")) == unschedulable:
            return node, False
        if self.options.dry_run == "client":
            return node, True
        node = await self.client.patch(
            NODES,
            node_name,
            {"spec": {"unschedulable": unschedulable or None}},
            patch_type="strategic",
            dry_run=self.options.dry_run == "server",
        )
        return node, True

    async def taint_for_daemonsets(self, node: Obj) -> None:
        """Keep DaemonSet pods from coming back while they are stopped in order.

        Taints are one atomic list that the node lifecycle controller writes too (it mirrors
        the cordon right after it), so the write is guarded by resourceVersion and redone on
        the current node after a conflict, never blindly overwriting someone else's taint.
        """
        if self.options.dry_run != "none":
            return
        for _ in range(10):
            taints = list((node.get("spec") or {}).get("taints") or [])
            if any(t.get("key") == DAEMONSET_DRAIN_TAINT for t in taints):
                return
            taints.append({"key": DAEMONSET_DRAIN_TAINT, "effect": "NoSchedule"})
            rv = o.meta(node).get("resourceVersion")
            try:
                await self.client.patch(
                    NODES,
                    o.name(node),
                    {"metadata": {"resourceVersion": rv}, "spec": {"taints": taints}},
                    patch_type="merge",
                )
                return
            except errors.Conflict:
                node = await self.client.get(NODES, o.name(node))
        raise DrainError(f"could not taint node {o.name(node)}: it kept changing")

    # ------------------------------------------------------------------ the two entries

    async def step(self, node_name: str, started_at: datetime) -> DrainProgress:
        """One pass for a reconciler: cordon, evict what may go now, return the progress.

        Requeue until `complete`. `started_at` is when the drain began (kept by the caller, e.g.
        in a status field); the report names it and `options.timeout` counts from it. Raises
        `DrainTimeout` past that, `PreflightError` (kubectl's refusal), `DrainError` for an
        eviction retrying cannot fix, `InvalidRule`, and `SourcesNotReady` while the informers
        have not synced (requeue).
        """
        sources, owned = self._sources(ClusterSnapshot)
        run = DrainRun(self, sources, node_name, started_at)
        try:
            progress = await run.step()
        except Exception as exc:
            self._hold(node_name, frozenset())
            run.publish(None, exc)
            raise
        finally:
            await run.close()
            if owned:
                await sources.close()
        self._hold(node_name, frozenset() if progress.complete else progress.held_by)
        run.publish(progress)
        return progress

    def nodes_held_by(self, namespace: str, name: str) -> set[str]:
        """The nodes whose last pass (`step`) a budget `namespace/name` held back: the drains
        a change of that budget can move on, and the only ones a caller need wake for it
        (waking every drain at every budget change costs a pass per drain per eviction)."""
        return self._holding.get((namespace, name), set()) | self._holding.get(
            (namespace, ""), set()
        )

    def _hold(self, node_name: str, budgets: frozenset[tuple[str, str]]) -> None:
        for key in self._held.pop(node_name, frozenset()) - budgets:
            nodes = self._holding.get(key)
            if nodes is not None:
                nodes.discard(node_name)
                if not nodes:
                    del self._holding[key]
        if budgets:
            self._held[node_name] = budgets
            for key in budgets:
                self._holding.setdefault(key, set()).add(node_name)

    def stopped(self, node_name: str) -> None:
        """The caller gave up draining `node_name` before it completed (its request was
        withdrawn): the drain is no longer reported as in progress."""
        self._hold(node_name, frozenset())
        DRAINS.finished(self.label(), node_name)

    def label(self) -> str:
        """The `controller` label of this drainer's metrics."""
        return self.controller or controller_in_context()

    async def drain(self, node_name: str, node: Obj | None = None) -> DrainResult:
        """Drain to completion; pass `node` when it was just cordoned to save a round trip."""
        sources, owned = self._sources(WatchedCluster)
        run = DrainRun(self, sources, node_name, self.clock.now())
        try:
            return await run.drain(node)
        finally:
            DRAINS.finished(run.controller, node_name)
            self.volumes_since.pop(node_name, None)
            await run.close()
            await sources.done(node_name)
            if owned:
                await sources.close()

    def _sources(self, default: type[DrainSources]) -> tuple[DrainSources, bool]:
        if self.sources is not None:
            return self.sources, False
        return default(self.client, self.options), True

    def event(self, obj: Obj, type_: str, reason: str, action: str, note: str) -> None:
        """An Event on `obj`, when the drainer was given a recorder."""
        if self.events is not None:
            self.events.event(obj, type_, reason, action, note)
