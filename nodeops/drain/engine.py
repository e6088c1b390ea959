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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog

from nodeops.common.selectors import parse_label_selector
from nodeops.drain.budgets import BudgetGate
from nodeops.drain.classify import (
    Behavior,
    Classification,
    Decision,
    RuleView,
    classify,
    daemonset_of,
)
from nodeops.drain.errors import (
    DrainError,
    DrainTimeout,
    PreflightError,
    VolumeDetachTimeout,
)
from nodeops.drain.metrics import (
    DELETED,
    DRAINS,
    EVICTED,
    EVICTIONS,
    FAILED,
    FORCE_DELETED,
    REFUSED,
    controller_in_context,
)
from nodeops.drain.options import DAEMONSET_DRAIN_TAINT, DrainOptions
from nodeops.drain.plan import Plan, budget_wait, make_plan, report
from nodeops.drain.sources import ClusterSnapshot, DrainSources, WatchedCluster
from nodeops.drain.volumes import pending_volumes, skipped_volume_ids, volume_report
from nodeops.kube import errors
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.events import NORMAL, WARNING, EventRecorder
from nodeops.kube.resources import NODES, PODS

log = structlog.get_logger(__name__)

Obj = dict[str, Any]

__all__ = [
    "DrainError",
    "DrainProgress",
    "DrainResult",
    "DrainTimeout",
    "Drainer",
    "PreflightError",
    "VolumeDetachTimeout",
]


@dataclass
class DrainProgress:
    node: str
    message: str
    complete: bool
    plan: Plan
    failures: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)  # still attached (with wait_for_volumes)

    @property
    def blocking(self) -> dict[str, str]:
        """Pods holding the drain back, with the reason for each."""
        out = {d.ref: "terminating" for d in self.plan.terminating}
        for d in self.plan.evict_now:
            out[d.ref] = self.failures.get(d.ref, "eviction in progress")
        for d in self.plan.wait_completed_now:
            out[d.ref] = "waiting for completion"
        return out


@dataclass
class DrainResult:
    node: str
    evicted: list[str]
    deleted: list[str]
    skipped: list[str]
    warnings: list[str]
    seconds: float


ProgressCallback = Callable[[DrainProgress], None]


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
    ) -> None:
        self.client = client
        self.controller = controller
        self.options = options or DrainOptions()
        self.sources = sources
        self.events = events
        self.on_progress = on_progress
        self.on_evicting = on_evicting
        self.on_gone = on_gone  # an evicted pod is gone from the node
        self.on_warnings = on_warnings  # the pre-flight passed with these warnings
        # When each node's volume wait began, for `volume_timeout` across `step` passes.
        self._volumes_since: dict[str, float] = {}

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

    async def _taint_for_daemonsets(self, node: Obj) -> None:
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
        run = _Run(self, sources, node_name, started_at)
        try:
            progress = await run.step()
        except Exception as exc:
            run.publish(None, exc)
            raise
        finally:
            await run.close()
            if owned:
                await sources.close()
        run.publish(progress)
        return progress

    def stopped(self, node_name: str) -> None:
        """The caller gave up draining `node_name` before it completed (its request was
        withdrawn): the drain is no longer reported as in progress."""
        DRAINS.finished(self.label(), node_name)

    def label(self) -> str:
        """The `controller` label of this drainer's metrics."""
        return self.controller or controller_in_context()

    async def drain(self, node_name: str, node: Obj | None = None) -> DrainResult:
        """Drain to completion; pass `node` when it was just cordoned to save a round trip."""
        sources, owned = self._sources(WatchedCluster)
        run = _Run(self, sources, node_name, o.now())
        try:
            return await run.drain(node)
        finally:
            DRAINS.finished(run.controller, node_name)
            await run.close()
            await sources.done(node_name)
            if owned:
                await sources.close()

    def _sources(self, default: type[DrainSources]) -> tuple[DrainSources, bool]:
        if self.sources is not None:
            return self.sources, False
        return default(self.client, self.options), True

    # ------------------------------------------------------------------ actions

    async def _evict_once(
        self, pod: Obj, controller: str | None = None
    ) -> tuple[str | None, str | None]:
        """Evict (or delete) one pod: what happened (`EVICTED`, `REFUSED`, ...; None when the
        pod was gone already) and the refusal's message (None when it went).

        Raises DrainError for refusals retrying cannot fix (kubectl fails those at once). The
        answer is counted under `controller`; a dry run is not (nothing happened).
        """
        if self.options.dry_run != "none":
            controller = None
        result: str | None = FAILED  # what an exception out of the request counts as
        try:
            result, refusal = await self._send_eviction(pod)
            return result, refusal
        except asyncio.CancelledError:
            result = None  # the pass ended before the answer came: no answer to count
            raise
        finally:
            if controller is not None and result is not None:
                EVICTIONS.labels(controller, result).inc()

    async def _send_eviction(self, pod: Obj) -> tuple[str | None, str | None]:
        """The result to count (None: the pod was gone already) and the refusal (None: it
        went)."""
        ns, name = o.namespace(pod), o.name(pod)
        grace = self.options.grace_period if self.options.grace_period >= 0 else None
        pre = {"uid": o.uid(pod)}
        server_dry = self.options.dry_run == "server"
        if self.options.dry_run == "client":
            return None, None
        try:
            if self.options.disable_eviction:
                await self.client.delete(
                    PODS, name, ns, grace_period=grace, preconditions=pre, dry_run=server_dry
                )
                return DELETED, None
            await self.client.evict(
                name, ns, grace_period=grace, preconditions=pre, dry_run=server_dry
            )
            return EVICTED, None
        except errors.NotFound:
            return None, None
        except errors.Conflict as exc:
            if "UID in precondition" in exc.message or "UID in the precondition" in exc.message:
                return None, None  # the pod we meant is gone; a new one of that name is not ours
            return FAILED, exc.message
        except errors.TooManyRequests as exc:
            causes = " ".join(c.get("message", "") for c in exc.causes if c.get("message"))
            return REFUSED, f"{exc.message} {causes}".strip()
        except errors.Forbidden as exc:
            if any(c.get("reason") == "NamespaceTerminating" for c in exc.causes):
                return FAILED, (
                    "Cannot evict pod from terminating namespace: unable to create eviction "
                    "(kube-controller-manager should set deletionTimestamp)"
                )
            raise DrainError(f'error when evicting pods/"{name}" -n "{ns}": {exc.message}') from exc
        except errors.ApiError as exc:
            if exc.code >= 500 and "more than one PodDisruptionBudget" not in exc.message:
                return FAILED, exc.message  # a server hiccup: retry
            raise DrainError(f'error when evicting pods/"{name}" -n "{ns}": {exc.message}') from exc

    async def _force_delete_stuck(self, plan: Plan, controller: str) -> list[str]:
        """Force-delete pods terminating past grace + slack, only when the caller asked."""
        if not self.options.force_delete_stuck or self.options.dry_run != "none":
            return []
        done = []
        now = o.now()
        for d in plan.terminating:
            deadline = o.deletion_timestamp(d.pod)
            if deadline is None:
                continue
            if now - deadline > timedelta(seconds=self.options.stuck_slack_seconds):
                with contextlib.suppress(errors.NotFound):
                    await self.client.delete(
                        PODS,
                        o.name(d.pod),
                        o.namespace(d.pod),
                        grace_period=0,
                        preconditions={"uid": o.uid(d.pod)},
                    )
                    EVICTIONS.labels(controller, FORCE_DELETED).inc()
                done.append(d.ref)
                self._event(
                    d.pod,
                    WARNING,
                    "ForceDeleted",
                    "Drain",
                    "pod still terminating past its grace period; deleted with grace 0",
                )
        return done

    def _event(self, obj: Obj, type_: str, reason: str, action: str, note: str) -> None:
        if self.events is not None:
            self.events.event(obj, type_, reason, action, note)


@dataclass
class _Lookups:
    """What a run looks up once: rules, namespace labels, DaemonSets."""

    daemonsets: dict[tuple[str, str], str | None] = field(default_factory=dict)
    rules: list[RuleView] | None = None
    namespaces: dict[str, dict[str, str]] | None = None


class _Run:
    """One drain of one node: a single pass (`step`) or passes until done (`drain`)."""

    def __init__(
        self, drainer: Drainer, sources: DrainSources, node_name: str, started_at: datetime
    ) -> None:
        self.d = drainer
        self.controller = drainer.label()
        self.options = drainer.options
        self.sources = sources
        self.node_name = node_name
        self.started_at = started_at
        self.started = time.monotonic()
        timeout = self.options.timeout
        elapsed = (o.now() - started_at).total_seconds()
        self.deadline = self.started + timeout - max(0.0, elapsed) if timeout > 0 else None
        self.changed = asyncio.Event()
        self.lookups = _Lookups()
        self.failures: dict[str, str] = {}
        self.in_flight: dict[str, asyncio.Task[None]] = {}
        self.attempted: dict[str, str] = {}  # ref -> uid evicted (approved)
        self.gone_early: dict[str, Obj] = {}  # deleted while its eviction was unanswered
        self.evicted: list[str] = []
        self.budget_waits: set[str] = set()  # refs whose last eviction a budget held back
        self.fatal: DrainError | None = None
        self.sem = asyncio.Semaphore(self.options.max_in_flight)
        self.last_message = ""
        self._selector = (
            parse_label_selector(self.options.pod_selector) if self.options.pod_selector else None
        )
        self._unlisten = sources.listen(self._on_change)

    def _selected(self, pod: Obj) -> bool:
        """`pod_selector`, applied here whatever the source fetched (a shared source serves
        drains with different selectors)."""
        return self._selector is None or self._selector.matches(o.labels(pod))

    @property
    def gate(self) -> BudgetGate:
        return self.sources.budgets  # a snapshot makes its gate when it lists

    def _on_change(self, kind: str, obj: Obj) -> None:
        if kind in ("pod", "pod-deleted"):
            if (obj.get("spec") or {}).get("nodeName") != self.node_name:
                return
            if kind == "pod-deleted":
                ref = o.ref(obj)
                if self.attempted.get(ref) == o.uid(obj):
                    self._gone(obj)
                elif ref in self.in_flight:
                    # Gone before its eviction's answer came: reported once the answer does.
                    self.gone_early[ref] = obj
        self.changed.set()

    def _gone(self, pod: Obj) -> None:
        if self.d.on_gone is not None:
            self.d.on_gone(pod)

    async def close(self) -> None:
        self._unlisten()
        for task in self.in_flight.values():
            task.cancel()
        for task in list(self.in_flight.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _waiting(self, plan: Plan) -> int:
        """Pods of the plan's current batch whose last eviction a budget held back."""
        return len(self.budget_waits & {d.ref for d in plan.evict_now})

    def publish(self, progress: DrainProgress | None, error: Exception | None = None) -> None:
        """Report a pass to the drain metrics: complete, out of time or its node gone ends the
        drain; a pass that did not finish (`error`) leaves its last count, for a drain refused
        or failing is still one in progress (a stuck one)."""
        if self.options.dry_run != "none":
            return
        over = isinstance(error, DrainTimeout | errors.NotFound)
        if (progress is not None and progress.complete) or over:
            DRAINS.finished(self.controller, self.node_name)
        elif progress is not None:
            DRAINS.passed(
                self.controller, self.node_name, self.started_at, self._waiting(progress.plan)
            )
        else:
            DRAINS.passed(self.controller, self.node_name, self.started_at, None)

    def _remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    # ------------------------------------------------------------------ looking

    async def _node(self, node: Obj | None) -> Obj:
        if node is None:
            node = await self.sources.node(self.node_name)
        node, _ = await self.d.cordon(self.node_name, node=node)
        if self.options.evict_daemonsets:
            await self.d._taint_for_daemonsets(node)
        return node

    async def _classify(self, node: Obj) -> Classification:
        pods = [p for p in self.sources.pods_on(self.node_name) if self._selected(p)]
        cache = self.lookups
        for pod in pods:
            ds = daemonset_of(pod)
            if ds is not None and ds not in cache.daemonsets:
                cache.daemonsets[ds] = await self.sources.daemonset_error(*ds)
        if self.options.respect_rules and cache.rules is None:
            cache.rules = await self.sources.rules()
        if any(r.needs_namespace_labels for r in cache.rules or ()) and cache.namespaces is None:
            cache.namespaces = {
                o.name(n): dict(o.labels(n)) for n in await self.sources.namespace_items()
            }
        namespaces = cache.namespaces or {}
        classification = classify(
            pods,
            node=node,
            options=self.options,
            now=o.now(),
            daemonsets=cache.daemonsets,
            rules=cache.rules or (),
            namespace_labels=lambda ns: namespaces.get(ns, {}),
        )
        if not classification.ok:
            raise PreflightError(*classification.error_reasons())
        return classification

    def _progress(
        self, plan: Plan, classification: Classification, volumes: list[str] | None = None
    ) -> DrainProgress:
        if volumes:
            message = volume_report(o.format_time(self.started_at), volumes)
        else:
            message = report(plan, started_at=self.started_at, failures=self.failures)
        return DrainProgress(
            self.node_name,
            message,
            plan.complete and not volumes,
            plan,
            dict(self.failures),
            classification.warning_lines(),
            list(volumes or ()),
        )

    def _report(self, progress: DrainProgress) -> None:
        if progress.message == self.last_message or self.d.on_progress is None:
            return
        self.last_message = progress.message
        self.d.on_progress(progress)

    async def _dry_run(self, classification: Classification) -> None:
        """What a dry run does, pass or run: every pod that would go is "evicted" once, in
        order, with nothing written (client) or everything written as dry run (server)."""
        plan = make_plan(classification)
        for d in plan.evict_now + plan.evict_later:
            if self.d.on_evicting is not None:
                self.d.on_evicting(d.pod)
            await self.d._evict_once(d.pod)
            self.evicted.append(d.ref)

    def _start_evictions(self, plan: Plan, *, retry: bool) -> None:
        for d in plan.evict_now:
            if d.ref not in self.in_flight and self.attempted.get(d.ref) != o.uid(d.pod):
                self.in_flight[d.ref] = asyncio.create_task(self._evict(d, retry=retry))

    def _check_deadline(self, plan: Plan) -> None:
        remaining = self._remaining()
        if remaining is not None and remaining <= 0:
            raise DrainTimeout(*self._timeout_reasons(plan))

    # ------------------------------------------------------------------ one pass

    async def step(self) -> DrainProgress:
        await self.sources.prepare(self.node_name)
        node = await self._node(None)
        classification = await self._classify(node)
        plan = make_plan(classification)
        if self.options.dry_run != "none":
            await self._dry_run(classification)
            return self._progress(make_plan(_nothing_left(classification)), classification)
        if plan.complete:
            volumes = await self._volumes(classification)
            if not volumes:
                self.d._volumes_since.pop(self.node_name, None)
                self.d._event(node, NORMAL, "Drained", "Drain", "node drained")
            return self._progress(plan, classification, volumes)
        self._check_deadline(plan)
        self._start_evictions(plan, retry=False)
        refs = {task: ref for ref, task in self.in_flight.items()}
        if refs:
            _, late = await asyncio.wait(refs, timeout=self.options.pass_seconds)
            for task in late:
                task.cancel()
                self.failures[refs[task]] = (
                    f"eviction timeout of {self.options.pass_seconds:g}s reached, "
                    "eviction will be retried"
                )
            await asyncio.gather(*late, return_exceptions=True)
        if self.fatal is not None:
            raise self.fatal
        await self.d._force_delete_stuck(plan, self.controller)
        return self._progress(plan, classification)

    async def _volumes(self, classification: Classification) -> list[str]:
        """With `wait_for_volumes`: the node's volumes still attached, checked once (a pass).

        Bounded by `timeout` from the start of the drain and by `volume_timeout` from the first
        pass that found the pods gone (remembered by the Drainer, so a restarted controller
        waits its full `volume_timeout` again rather than too little)."""
        if not self.options.wait_for_volumes:
            return []
        skipped = [d.pod for d in classification.skipped()]
        pending = await pending_volumes(self.sources, self.node_name, skipped=skipped)
        if not pending:
            return []
        since = self.d._volumes_since.setdefault(self.node_name, time.monotonic())
        vt = self.options.volume_timeout
        if (vt and time.monotonic() - since >= vt) or (
            self._remaining() is not None and (self._remaining() or 0) <= 0
        ):
            raise VolumeDetachTimeout(
                f"Waiting for Node volumes to be detached timed out: {', '.join(pending)}"
            )
        return pending

    # ------------------------------------------------------------------ to completion

    async def drain(self, node: Obj | None) -> DrainResult:
        await self._wait_for(self.sources.prepare(self.node_name))
        node = await self._node(node)
        classification = await self._classify(node)
        warnings = classification.warning_lines()
        if self.d.on_warnings is not None:
            self.d.on_warnings(warnings)
        self.d._event(node, NORMAL, "Draining", "Drain", "draining node")
        started = time.monotonic()
        if self.options.dry_run != "none":
            await self._dry_run(classification)
            return self._result(classification, warnings, started)
        while True:
            self.changed.clear()
            classification = await self._classify(node)
            plan = make_plan(classification)
            self._report(self._progress(plan, classification))
            if not plan.complete:
                DRAINS.passed(self.controller, self.node_name, self.started_at, self._waiting(plan))
            if self.fatal is not None:
                raise self.fatal
            if plan.complete:
                break
            self._start_evictions(plan, retry=True)
            await self.d._force_delete_stuck(plan, self.controller)
            self._check_deadline(plan)
            await self._wait_change(1.0 if self.options.force_delete_stuck else None)
        if self.options.wait_for_volumes:
            await self._wait_for_volumes(classification)
        self.d._event(node, NORMAL, "Drained", "Drain", "node drained")
        return self._result(classification, warnings, started)

    async def _wait_change(self, wake: float | None) -> None:
        remaining = self._remaining()
        if remaining is not None:
            wake = remaining if wake is None else min(wake, remaining)
        await _wait_event(self.changed, None if wake is None else max(0.0, wake))

    async def _wait_for_volumes(self, classification: Classification) -> None:
        skipped = [d.pod for d in classification.skipped()]
        ignore = await skipped_volume_ids(self.d.client, skipped)
        await self._wait_for(self.sources.watch_volumes(self.node_name))
        loop = asyncio.get_running_loop()
        vt = self.options.volume_timeout
        limit = vt if vt else self._remaining()
        deadline = None if limit is None else loop.time() + limit
        while True:
            self.changed.clear()
            pending = await pending_volumes(
                self.sources, self.node_name, skipped=skipped, ignore=ignore
            )
            if not pending:
                return
            plan = make_plan(classification)
            self._report(self._progress(plan, classification, pending))
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise VolumeDetachTimeout(
                    f"Waiting for Node volumes to be detached timed out: {', '.join(pending)}"
                )
            await _wait_event(self.changed, remaining)

    def _result(
        self, classification: Classification, warnings: list[str], started: float
    ) -> DrainResult:
        return DrainResult(
            node=self.node_name,
            evicted=[] if self.options.disable_eviction else list(self.evicted),
            deleted=list(self.evicted) if self.options.disable_eviction else [],
            skipped=[d.ref for d in classification.skipped()],
            warnings=warnings,
            seconds=time.monotonic() - started,
        )

    async def _wait_for(self, awaitable: Any) -> None:
        remaining = self._remaining()
        try:
            async with asyncio.timeout(remaining):
                await awaitable
        except TimeoutError:
            raise DrainTimeout(f"global timeout reached: {self._fmt_timeout()}") from None

    def _fmt_timeout(self) -> str:
        t = self.options.timeout
        return f"{int(t)}s" if t == int(t) else f"{t}s"

    def _timeout_reasons(self, plan: Plan) -> list[str]:
        parts = [
            f'error when waiting for pod "{o.name(d.pod)}" in namespace "{o.namespace(d.pod)}" '
            f"to terminate: global timeout reached: {self._fmt_timeout()}"
            for d in plan.terminating
        ]
        parts += [
            f'error when evicting pods/"{o.name(d.pod)}" -n "{o.namespace(d.pod)}": '
            f"global timeout reached: {self._fmt_timeout()}"
            + (f" ({self.failures[d.ref]})" if d.ref in self.failures else "")
            for d in plan.evict_now
        ]
        return parts or [f"global timeout reached: {self._fmt_timeout()}"]

    # ------------------------------------------------------------------ one pod

    async def _evict(self, d: Decision, *, retry: bool) -> None:
        """Evict one pod once its budget allows. With `retry` (a drain to completion), a
        refusal is retried when the budget changes; without (a pass), the next pass retries."""
        delay = self.options.retry_initial
        uid = o.uid(d.pod)
        announced = False
        try:
            while True:
                current = self.sources.pod(o.namespace(d.pod), o.name(d.pod))
                if current is None or o.uid(current) != uid:
                    return  # gone, or another pod under the same name: not ours to evict
                if o.deletion_timestamp(current) is not None:
                    return  # someone else is deleting it; the plan waits for it
                budget = None if self.options.disable_eviction else self.gate.budget_for(current)
                if budget is not None:
                    if self.gate.tokens(budget) <= 0:
                        self._refused(d, current, budget_wait(*budget), budget=True)
                        if not retry:
                            return
                    wait = self.options.retry_max if retry else self.options.pass_seconds
                    if not await self.gate.acquire(budget, current, wait):
                        if not retry:
                            self._refused(d, current, budget_wait(*budget), budget=True)
                            return
                        continue  # still no room: look at the pod again, then keep waiting
                outcome_known = False
                result: str | None = None
                refusal: str | None = None
                try:
                    async with self.sem:
                        if not announced and self.d.on_evicting is not None:
                            self.d.on_evicting(current)
                        announced = True
                        result, refusal = await self.d._evict_once(current, self.controller)
                    outcome_known = True
                except DrainError as exc:
                    outcome_known = True
                    refusal = str(exc)
                    self.fatal = exc
                    self.changed.set()
                    return
                except (errors.RequestTimeout, errors.ConnectionFailed) as exc:
                    refusal = str(exc)  # the eviction may or may not have happened
                finally:
                    if budget is not None:
                        # An unknown outcome keeps the token until the status shows it.
                        self.gate.release(budget, current, not outcome_known or refusal is None)
                if refusal is None:
                    self.failures.pop(d.ref, None)
                    self.budget_waits.discard(d.ref)
                    self.attempted[d.ref] = uid
                    self.evicted.append(d.ref)
                    early = self.gone_early.pop(d.ref, None)
                    if early is not None and o.uid(early) == uid:
                        self._gone(early)
                    self.changed.set()
                    return
                self._refused(d, current, refusal, budget=result == REFUSED)
                if not retry:
                    return
                if budget is not None:
                    await self.gate.wait_change(self.options.retry_max)
                else:
                    await asyncio.sleep(delay)
                    delay = min(self.options.retry_max, delay * 2)
        finally:
            self.in_flight.pop(d.ref, None)

    def _refused(self, d: Decision, pod: Obj, why: str, *, budget: bool) -> None:
        if self.failures.get(d.ref) != why:
            self.d._event(pod, WARNING, "EvictionBlocked", "Evict", why)
        self.failures[d.ref] = why
        if budget:
            self.budget_waits.add(d.ref)
        else:
            self.budget_waits.discard(d.ref)
        self.changed.set()


async def _wait_event(event: asyncio.Event, timeout: float | None) -> None:
    """Until `event` is set or `timeout` passes. `asyncio.timeout`, not `wait_for`: on Python
    3.11 `wait_for` swallows a cancellation that arrives as the event is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


def _nothing_left(classification: Classification) -> Classification:
    """The classification a dry run ends with: every pod it would evict gone."""
    return Classification(
        [d for d in classification.decisions if d.behavior is Behavior.SKIP or d.error]
    )
