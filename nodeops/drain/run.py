"""One drain of one node: look, decide, evict in order, wait, report.

A run holds what one drain learns as it goes (the evictions in flight and their answers, the
budget waits, the deadline) for a single pass (`step`, for a reconciler) or for passes until the
node is empty (`drain`, for `nodeops drain`). It is woken by the sources' watches, never by a
timer: a pod's deletion or a budget's change sets `changed`, and the run looks again.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nodeops.common.looptime import loop_time
from nodeops.common.selectors import parse_label_selector
from nodeops.drain.budgets import BudgetGate
from nodeops.drain.budgets import Key as BudgetKey
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
from nodeops.drain.eviction import evict_once, force_delete_stuck
from nodeops.drain.metrics import DRAINS, REFUSED
from nodeops.drain.plan import Plan, budget_wait, make_plan, report
from nodeops.drain.results import DrainProgress, DrainResult
from nodeops.drain.sources import DrainSources
from nodeops.drain.volumes import pending_volumes, skipped_volume_ids, volume_report
from nodeops.kube import errors
from nodeops.kube import objects as o
from nodeops.kube.events import NORMAL, WARNING

if TYPE_CHECKING:
    from nodeops.drain.engine import Drainer

__all__ = ["DrainRun", "Lookups", "nothing_left", "wait_event"]

Obj = dict[str, Any]


@dataclass
class Lookups:
    """What a run looks up once: rules, namespace labels, DaemonSets."""

    daemonsets: dict[tuple[str, str], str | None] = field(default_factory=dict)
    rules: list[RuleView] | None = None
    namespaces: dict[str, dict[str, str]] | None = None


class DrainRun:
    """One drain of one node: a single pass (`step`) or passes until done (`drain`)."""

    def __init__(
        self, drainer: Drainer, sources: DrainSources, node_name: str, started_at: datetime
    ) -> None:
        self.d = drainer
        self.controller = drainer.label()
        self.options = drainer.options
        self.clock = drainer.clock
        self.sources = sources
        self.node_name = node_name
        self.started_at = started_at
        self.started = loop_time()
        timeout = self.options.timeout
        elapsed = max(0.0, self.clock.since(started_at))
        self.deadline = self.started + self.clock.wall(timeout - elapsed) if timeout > 0 else None
        self.changed = asyncio.Event()
        self.lookups = Lookups()
        self.failures: dict[str, str] = {}
        self.in_flight: dict[str, asyncio.Task[None]] = {}
        self.attempted: dict[str, str] = {}  # ref -> uid evicted (approved)
        self.gone_early: dict[str, Obj] = {}  # deleted while its eviction was unanswered
        self.evicted: list[str] = []
        self.budget_waits: dict[str, BudgetKey] = {}
        """Refs whose last eviction a budget held back, with that budget ((namespace, "") for a
        pod under several, which the server refused on its own)."""
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
        return len(self.budget_waits.keys() & {d.ref for d in plan.evict_now})

    def _held_by(self, plan: Plan) -> frozenset[BudgetKey]:
        """The budgets holding back pods of the plan's current batch."""
        return frozenset(
            self.budget_waits[d.ref] for d in plan.evict_now if d.ref in self.budget_waits
        )

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
        return None if self.deadline is None else self.deadline - loop_time()

    # ------------------------------------------------------------------ looking

    async def _node(self, node: Obj | None) -> Obj:
        if node is None:
            node = await self.sources.node(self.node_name)
        node, _ = await self.d.cordon(self.node_name, node=node)
        if self.options.evict_daemonsets:
            await self.d.taint_for_daemonsets(node)
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
            now=self.clock.now(),
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
            self._held_by(plan),
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
            await evict_once(self.d.client, self.options, d.pod)
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
            return self._progress(make_plan(nothing_left(classification)), classification)
        if plan.complete:
            volumes = await self._volumes(classification)
            if not volumes:
                self.d.volumes_since.pop(self.node_name, None)
                self.d.event(node, NORMAL, "Drained", "Drain", "node drained")
            return self._progress(plan, classification, volumes)
        self._check_deadline(plan)
        self._start_evictions(plan, retry=False)
        refs = {task: ref for ref, task in self.in_flight.items()}
        if refs:
            _, late = await asyncio.wait(refs, timeout=self.clock.wall(self.options.pass_seconds))
            for task in late:
                task.cancel()
                self.failures[refs[task]] = (
                    f"eviction timeout of {self.options.pass_seconds:g}s reached, "
                    "eviction will be retried"
                )
            await asyncio.gather(*late, return_exceptions=True)
        if self.fatal is not None:
            raise self.fatal
        await force_delete_stuck(
            self.d.client, self.options, plan, self.controller, self.d.event, self.clock.now()
        )
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
        self._volume_time_left(pending)
        return pending

    def _volume_time_left(self, pending: list[str]) -> float | None:
        """The seconds the volume wait may still take (None: no limit), for a pass and for a
        run alike; raises `VolumeDetachTimeout` when none are left.

        Two limits hold at once: `volume_timeout` from when the wait began (remembered by the
        Drainer across passes) and the drain's own `timeout` from its start."""
        now = loop_time()
        since = self.d.volumes_since.setdefault(self.node_name, now)
        limits = [] if (remaining := self._remaining()) is None else [remaining]
        if self.options.volume_timeout:
            limits.append(since + self.clock.wall(self.options.volume_timeout) - now)
        left = min(limits, default=None)
        if left is not None and left <= 0:
            raise VolumeDetachTimeout(
                f"Waiting for Node volumes to be detached timed out: {', '.join(pending)}"
            )
        return left

    # ------------------------------------------------------------------ to completion

    async def drain(self, node: Obj | None) -> DrainResult:
        await self._wait_for(self.sources.prepare(self.node_name))
        node = await self._node(node)
        classification = await self._classify(node)
        warnings = classification.warning_lines()
        if self.d.on_warnings is not None:
            self.d.on_warnings(warnings)
        self.d.event(node, NORMAL, "Draining", "Drain", "draining node")
        started = loop_time()
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
            await force_delete_stuck(
                self.d.client, self.options, plan, self.controller, self.d.event, self.clock.now()
            )
            self._check_deadline(plan)
            await self._wait_change(
                self.clock.wall(1.0) if self.options.force_delete_stuck else None
            )
        if self.options.wait_for_volumes:
            await self._wait_for_volumes(classification)
        self.d.event(node, NORMAL, "Drained", "Drain", "node drained")
        return self._result(classification, warnings, started)

    async def _wait_change(self, wake: float | None) -> None:
        remaining = self._remaining()
        if remaining is not None:
            wake = remaining if wake is None else min(wake, remaining)
        await wait_event(self.changed, None if wake is None else max(0.0, wake))

    async def _wait_for_volumes(self, classification: Classification) -> None:
        skipped = [d.pod for d in classification.skipped()]
        ignore = await skipped_volume_ids(self.d.client, skipped)
        await self._wait_for(self.sources.watch_volumes(self.node_name))
        while True:
            self.changed.clear()
            pending = await pending_volumes(
                self.sources, self.node_name, skipped=skipped, ignore=ignore
            )
            if not pending:
                return
            plan = make_plan(classification)
            self._report(self._progress(plan, classification, pending))
            await wait_event(self.changed, self._volume_time_left(pending))

    def _result(
        self, classification: Classification, warnings: list[str], started: float
    ) -> DrainResult:
        return DrainResult(
            node=self.node_name,
            evicted=[] if self.options.disable_eviction else list(self.evicted),
            deleted=list(self.evicted) if self.options.disable_eviction else [],
            skipped=[d.ref for d in classification.skipped()],
            warnings=warnings,
            seconds=(loop_time() - started) * self.clock.scale,
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
        delay = self.clock.wall(self.options.retry_initial)
        retry_max = self.clock.wall(self.options.retry_max)
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
                        self._refused(d, current, budget_wait(*budget), budget=budget)
                        if not retry:
                            return
                    wait = retry_max if retry else self.clock.wall(self.options.pass_seconds)
                    if not await self.gate.acquire(budget, current, wait):
                        if not retry:
                            self._refused(d, current, budget_wait(*budget), budget=budget)
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
                        result, refusal = await evict_once(
                            self.d.client, self.options, current, self.controller
                        )
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
                    self.budget_waits.pop(d.ref, None)
                    self.attempted[d.ref] = uid
                    self.evicted.append(d.ref)
                    early = self.gone_early.pop(d.ref, None)
                    if early is not None and o.uid(early) == uid:
                        self._gone(early)
                    self.changed.set()
                    return
                held = (budget or (o.namespace(current), "")) if result == REFUSED else None
                self._refused(d, current, refusal, budget=held)
                if not retry:
                    return
                if budget is not None:
                    await self.gate.wait_change(budget, retry_max)
                else:
                    await asyncio.sleep(delay)
                    delay = min(retry_max, delay * 2)
        finally:
            self.in_flight.pop(d.ref, None)

    def _refused(self, d: Decision, pod: Obj, why: str, *, budget: BudgetKey | None) -> None:
        """A refusal of `d`'s eviction; `budget` when a disruption budget refused it."""
        if self.failures.get(d.ref) != why:
            self.d.event(pod, WARNING, "EvictionBlocked", "Evict", why)
        self.failures[d.ref] = why
        if budget is not None:
            self.budget_waits[d.ref] = budget
        else:
            self.budget_waits.pop(d.ref, None)
        self.changed.set()


async def wait_event(event: asyncio.Event, timeout: float | None) -> None:
    """Until `event` is set or `timeout` passes. `asyncio.timeout`, not `wait_for`: on Python
    3.11 `wait_for` swallows a cancellation that arrives as the event is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


def nothing_left(classification: Classification) -> Classification:
    """The classification a dry run ends with: every pod it would evict gone."""
    return Classification(
        [d for d in classification.decisions if d.behavior is Behavior.SKIP or d.error]
    )
