"""The drain engine: cordon, decide, evict in order, wait by watch, report.

One engine serves `nodeops drain` (run to completion) and the controllers (`step`: one
non-blocking pass that returns progress for a condition, then the reconciler requeues).

Waiting is driven by watches, never by polling: the pods of the node are watched (a deletion is
seen the moment it happens, and a pod re-created under the same name is told apart by its UID),
and PodDisruptionBudgets are watched once an eviction is refused, so the eviction is retried the
moment the budget allows one more disruption rather than on a fixed timer. Budgets are never
bypassed: pods are deleted instead of evicted only when the caller disables eviction, and pods
stuck terminating past their grace are force-deleted only when asked for.
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

from nodeops.drain.budgets import BudgetGate, PdbSnapshot
from nodeops.drain.classify import (
    Classification,
    Decision,
    RuleView,
    classify,
    daemonset_of,
)
from nodeops.drain.errors import DrainError, DrainTimeout, PreflightError
from nodeops.drain.options import DAEMONSET_DRAIN_TAINT, DrainOptions
from nodeops.drain.plan import Plan, budget_wait, make_plan, report
from nodeops.drain.rules import load_rules
from nodeops.kube import errors
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.events import NORMAL, WARNING, EventRecorder
from nodeops.kube.informer import Informer
from nodeops.kube.resources import DAEMONSETS, NAMESPACES, NODES, PDBS, PODS

log = structlog.get_logger(__name__)

Obj = dict[str, Any]


@dataclass
class DrainProgress:
    node: str
    message: str
    complete: bool
    plan: Plan
    failures: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

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
    def __init__(
        self,
        client: Client,
        options: DrainOptions | None = None,
        *,
        events: EventRecorder | None = None,
        on_progress: ProgressCallback | None = None,
        on_evicting: Callable[[Obj], None] | None = None,
        on_gone: Callable[[Obj], None] | None = None,
        on_warnings: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.client = client
        self.options = options or DrainOptions()
        self.events = events
        self.on_progress = on_progress
        self.on_evicting = on_evicting
        self.on_gone = on_gone  # an evicted pod is gone from the node
        self.on_warnings = on_warnings  # the pre-flight passed with these warnings
        self._log = log

    # ------------------------------------------------------------------ cordon

    async def cordon(self, node_name: str, unschedulable: bool = True) -> tuple[Obj, bool]:
        """Set `spec.unschedulable`; returns (node, changed). A no-op when already so."""
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

    # ------------------------------------------------------------------ classification

    async def _classify(
        self,
        node: Obj,
        pods: list[Obj],
        cache: _LookupCache,
    ) -> Classification:
        for pod in pods:
            ds = daemonset_of(pod)
            if ds is not None and ds not in cache.daemonsets:
                try:
                    await self.client.get(DAEMONSETS, ds[1], ds[0])
                    cache.daemonsets[ds] = None
                except errors.NotFound as exc:
                    cache.daemonsets[ds] = exc.message
        if self.options.respect_rules and cache.rules is None:
            cache.rules = await load_rules(self.client)
        if any(r.needs_namespace_labels for r in cache.rules or ()) and cache.namespaces is None:
            items, _ = await self.client.list(NAMESPACES)
            cache.namespaces = {o.name(n): dict(o.labels(n)) for n in items}
        namespaces = cache.namespaces or {}
        return classify(
            pods,
            node=node,
            options=self.options,
            now=o.now(),
            daemonsets=cache.daemonsets,
            rules=cache.rules or (),
            namespace_labels=lambda ns: namespaces.get(ns, {}),
        )

    # ------------------------------------------------------------------ one pass (controllers)

    async def step(self, node_name: str, started_at: datetime) -> DrainProgress:
        """Cordon, then evict what may go now, without waiting: for reconcilers that requeue."""
        node, _ = await self.cordon(node_name)
        if self.options.evict_daemonsets:
            await self._taint_for_daemonsets(node)
        pods, _ = await self.client.list(
            PODS,
            field_selector=f"spec.nodeName={node_name}",
            label_selector=self.options.pod_selector or None,
        )
        cache = _LookupCache()
        classification = await self._classify(node, pods, cache)
        if not classification.ok:
            raise PreflightError(*classification.error_reasons())
        plan = make_plan(classification)
        failures: dict[str, str] = {}
        sem = asyncio.Semaphore(self.options.max_in_flight)
        budgets: BudgetGate | None = None
        if plan.evict_now and not self.options.disable_eviction:
            items, _ = await self.client.list(PDBS)
            budgets = BudgetGate(PdbSnapshot(items))

        async def one(d: Decision) -> None:
            budget = budgets.budget_for(d.pod) if budgets is not None else None
            if budget is not None and budgets is not None and not budgets.try_take(budget):
                failures[d.ref] = budget_wait(*budget)  # not sent: the budget has no room
                self._event(d.pod, WARNING, "EvictionBlocked", "Evict", failures[d.ref])
                return
            approved = False
            try:
                async with sem:
                    outcome = await self._evict_once(d.pod)
                approved = outcome is None
            finally:
                if budget is not None and budgets is not None:
                    budgets.release(budget, o.name(d.pod) if approved else None)
            if outcome is not None:
                failures[d.ref] = outcome
                self._event(d.pod, WARNING, "EvictionBlocked", "Evict", outcome)

        await asyncio.gather(*(one(d) for d in plan.evict_now))
        await self._force_delete_stuck(plan)
        return DrainProgress(
            node_name,
            report(plan, started_at=started_at, failures=failures),
            plan.complete,
            plan,
            failures,
            classification.warning_lines(),
        )

    # ------------------------------------------------------------------ run to completion

    async def drain(self, node_name: str, node: Obj | None = None) -> DrainResult:
        """Drain to completion; pass `node` when it was just cordoned to save a round trip."""
        started = time.monotonic()
        started_at = o.now()
        deadline = started + self.options.timeout if self.options.timeout > 0 else None
        if node is None:
            node, _ = await self.cordon(node_name)
        if self.options.evict_daemonsets and self.options.dry_run == "none":
            await self._taint_for_daemonsets(node)
        run = _Run(self, node_name, started_at, deadline)
        try:
            return await run.execute(node)
        finally:
            await run.close()

    # ------------------------------------------------------------------ actions

    async def _evict_once(self, pod: Obj) -> str | None:
        """Evict (or delete) one pod; None when it went, else the refusal's message.

        Raises DrainError for refusals retrying cannot fix (kubectl fails those at once).
        """
        ns, name = o.namespace(pod), o.name(pod)
        grace = self.options.grace_period if self.options.grace_period >= 0 else None
        pre = {"uid": o.uid(pod)}
        server_dry = self.options.dry_run == "server"
        if self.options.dry_run == "client":
            return None
        try:
            if self.options.disable_eviction:
                await self.client.delete(
                    PODS, name, ns, grace_period=grace, preconditions=pre, dry_run=server_dry
                )
            else:
                await self.client.evict(
                    name, ns, grace_period=grace, preconditions=pre, dry_run=server_dry
                )
            return None
        except errors.NotFound:
            return None
        except errors.Conflict as exc:
            if "UID in precondition" in exc.message:
                return None  # the pod we meant is gone; a new one of the same name is not ours
            return exc.message
        except errors.TooManyRequests as exc:
            causes = " ".join(c.get("message", "") for c in exc.causes if c.get("message"))
            return f"{exc.message} {causes}".strip()
        except errors.Forbidden as exc:
            if any(c.get("reason") == "NamespaceTerminating" for c in exc.causes):
                return (
                    "Cannot evict pod from terminating namespace: unable to create eviction "
                    "(kube-controller-manager should set deletionTimestamp)"
                )
            raise DrainError(f'error when evicting pods/"{name}" -n "{ns}": {exc.message}') from exc
        except errors.ApiError as exc:
            if exc.code >= 500 and "more than one PodDisruptionBudget" not in exc.message:
                return exc.message  # a server hiccup: retry
            raise DrainError(f'error when evicting pods/"{name}" -n "{ns}": {exc.message}') from exc

    async def _force_delete_stuck(self, plan: Plan) -> list[str]:
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
class _LookupCache:
    daemonsets: dict[tuple[str, str], str | None] = field(default_factory=dict)
    rules: list[RuleView] | None = None
    namespaces: dict[str, dict[str, str]] | None = None


class _Run:
    """One drain run to completion, driven by the pod and PDB watches."""

    def __init__(
        self, drainer: Drainer, node_name: str, started_at: datetime, deadline: float | None
    ) -> None:
        self.d = drainer
        self.options = drainer.options
        self.node_name = node_name
        self.started_at = started_at
        self.deadline = deadline
        self.changed = asyncio.Event()
        self.cache = _LookupCache()
        self.pods = Informer(
            drainer.client,
            PODS,
            field_selector=f"spec.nodeName={node_name}",
            label_selector=self.options.pod_selector or None,
        )
        self.pods.add_handler(
            on_add=lambda _: self.changed.set(),
            on_update=lambda _old, _new: self.changed.set(),
            on_delete=self._pod_deleted,
        )
        self.pdbs = Informer(drainer.client, PDBS)
        self.budgets = BudgetGate(self.pdbs)
        self.budgets.watch(self.pdbs)
        self.failures: dict[str, str] = {}
        self.in_flight: dict[str, asyncio.Task[None]] = {}
        self.attempted: dict[str, str] = {}  # ref -> uid we evicted
        self.evicted: list[str] = []
        self.fatal: DrainError | None = None
        self.sem = asyncio.Semaphore(self.options.max_in_flight)
        self.last_message = ""

    def _pod_deleted(self, pod: Obj) -> None:
        self.changed.set()
        if self.d.on_gone is not None and self.attempted.get(o.ref(pod)) == o.uid(pod):
            self.d.on_gone(pod)

    async def close(self) -> None:
        for task in self.in_flight.values():
            task.cancel()
        for task in list(self.in_flight.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.pods.stop()
        await self.pdbs.stop()

    def _remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    async def execute(self, node: Obj) -> DrainResult:
        self.pods.start()
        self.pdbs.start()
        await self._wait_for(self.pods.wait_synced())
        await self._wait_for(self.pdbs.wait_synced())
        classification = await self.d._classify(node, self.pods.objects(), self.cache)
        if not classification.ok:
            raise PreflightError(*classification.error_reasons())
        warnings = classification.warning_lines()
        if self.d.on_warnings is not None:
            self.d.on_warnings(warnings)
        self.d._event(node, NORMAL, "Draining", "Drain", "draining node")
        started = time.monotonic()
        if self.options.dry_run != "none":
            plan = make_plan(classification)
            for d in plan.evict_now + plan.evict_later:
                if self.d.on_evicting is not None:
                    self.d.on_evicting(d.pod)
                await self.d._evict_once(d.pod)
                self.evicted.append(d.ref)
            return self._result(classification, warnings, started)
        while True:
            self.changed.clear()
            pods = self.pods.objects()
            classification = await self.d._classify(node, pods, self.cache)
            if not classification.ok:
                raise PreflightError(*classification.error_reasons())
            plan = make_plan(classification)
            self._progress(plan, classification)
            if self.fatal is not None:
                raise self.fatal
            if plan.complete:
                break
            for d in plan.evict_now:
                if d.ref not in self.in_flight and self.attempted.get(d.ref) != o.uid(d.pod):
                    self.in_flight[d.ref] = asyncio.create_task(self._evict(d))
            await self.d._force_delete_stuck(plan)
            remaining = self._remaining()
            if remaining is not None and remaining <= 0:
                raise DrainTimeout(*self._timeout_reasons(plan))
            wake = 1.0 if self.options.force_delete_stuck else None
            if remaining is not None:
                wake = remaining if wake is None else min(wake, remaining)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), wake)
        if self.options.wait_for_volumes:
            from nodeops.drain.volumes import wait_for_volumes

            await wait_for_volumes(
                self.d.client,
                self.node_name,
                skipped=[d.pod for d in classification.skipped()],
                timeout=self.options.volume_timeout or self._remaining(),
            )
        self.d._event(node, NORMAL, "Drained", "Drain", "node drained")
        return self._result(classification, warnings, started)

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
            await asyncio.wait_for(awaitable, remaining)
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

    def _progress(self, plan: Plan, classification: Classification) -> None:
        message = report(plan, started_at=self.started_at, failures=self.failures)
        if message == self.last_message:
            return
        self.last_message = message
        if self.d.on_progress is not None:
            self.d.on_progress(
                DrainProgress(
                    self.node_name,
                    message,
                    plan.complete,
                    plan,
                    dict(self.failures),
                    classification.warning_lines(),
                )
            )

    async def _evict(self, d: Decision) -> None:
        """Evict one pod once its budget allows; retry refusals when the budget changes."""
        delay = self.options.retry_initial
        uid = o.uid(d.pod)
        announced = False
        try:
            while True:
                current = self.pods.get(o.name(d.pod), o.namespace(d.pod))
                if current is None or o.uid(current) != uid:
                    return
                budget = self.budgets.budget_for(current)
                if budget is not None and self.budgets.tokens(budget) <= 0:
                    if d.ref not in self.failures:
                        self.failures[d.ref] = budget_wait(*budget)
                        self.changed.set()
                if budget is not None and not await self.budgets.acquire(
                    budget, self.options.retry_max
                ):
                    continue  # still no room: look at the pod again, then keep waiting
                approved = False
                try:
                    async with self.sem:
                        if not announced and self.d.on_evicting is not None:
                            self.d.on_evicting(current)
                        announced = True
                        refusal = await self.d._evict_once(current)
                    approved = refusal is None
                except DrainError as exc:
                    self.fatal = exc
                    self.changed.set()
                    return
                finally:
                    if budget is not None:
                        self.budgets.release(budget, o.name(current) if approved else None)
                if refusal is None:
                    self.failures.pop(d.ref, None)
                    self.attempted[d.ref] = uid
                    self.evicted.append(d.ref)
                    self.changed.set()
                    return
                if d.ref not in self.failures:
                    self.d._event(current, WARNING, "EvictionBlocked", "Evict", refusal)
                self.failures[d.ref] = refusal
                self.changed.set()
                if budget is not None:
                    await self.budgets.wait_change(self.options.retry_max)
                else:
                    await asyncio.sleep(delay)
                    delay = min(self.options.retry_max, delay * 2)
        finally:
            self.in_flight.pop(d.ref, None)
