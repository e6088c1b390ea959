"""The scheduler: binds pending pods to nodes through the `binding` subresource.

It keeps per-node usage incrementally from pod events rather than summing pods per decision, and
with thousands of nodes it stops looking once it has found as many feasible nodes as
kube-scheduler would (`percentageOfNodesToScore`), rotating the starting node so that load
spreads. Pods that fit nowhere may preempt pods of a lower priority (`preemption`); otherwise they
wait until a node or a pod changes in a way that could free room.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, cast

import orjson

from nodeops.common.interpod import InterPodCheck, PlacedPods, pod_rules
from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import PODS, ApiClient, Conflict, NotFound, Obj
from nodeops.sim.cluster.informer import Informer, Key, key_of
from nodeops.sim.cluster.preemption import (
    DISRUPTION_TARGET,
    NOT_ELIGIBLE_POLICY,
    NOT_ELIGIBLE_TERMINATING,
    PREEMPTION_BY_SCHEDULER,
    Budgets,
    Candidate,
    Victim,
    may_preempt,
    no_fit_message,
    nominated_node,
    nothing_to_preempt,
    pick,
    priority,
    select_victims,
    unresolvable,
    victim,
)
from nodeops.sim.cluster.runtime import supervise
from nodeops.sim.cluster.scheduling import (
    DEFAULT_SCHEDULER,
    PREFER_NO_SCHEDULE,
    TAINT_TOLERATION_WEIGHT,
    NodeUsage,
    effective_taints,
    intolerable_prefer_no_schedule,
    is_deleting,
    is_terminal,
    least_allocated_score,
    node_allocatable,
    node_change_may_help,
    node_ready_status,
    pod_requests,
    resource_filter,
    static_filter,
    taint_toleration_scores,
)

log = logging.getLogger(__name__)


def feasible_nodes_to_find(total: int) -> int:
    """kube-scheduler's adaptive `percentageOfNodesToScore`."""
    if total < 100:
        return total
    pct = max(5, 50 - total // 125)
    return max(100, total * pct // 100)


def static_class(pod: Obj) -> bytes:
    """Pods with equal selectors, affinity and tolerations pass the same nodes' static checks."""
    spec = pod.get("spec") or {}
    return orjson.dumps(
        [spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations")],
        option=orjson.OPT_SORT_KEYS,
    )


def pod_class(static: bytes, requests: dict[str, int], pod: Obj | None = None) -> bytes:
    """Pods of one class fit the same nodes.

    A Deployment's pending pods all share one class, so when one of them fits nowhere the others
    are known to fit nowhere too until the cluster changes; that keeps a thousand pending
    replicas from costing a thousand full scans of the nodes. With `pod`, where inter-pod rules
    are in play, the pod's namespace, labels and spread constraints are part of its class:
    they decide which pods' rules it meets (a Deployment's replicas still share theirs).
    """
    cls = static + orjson.dumps(requests, option=orjson.OPT_SORT_KEYS)
    if pod is None:
        return cls
    meta = pod.get("metadata") or {}
    spread = (pod.get("spec") or {}).get("topologySpreadConstraints")
    return cls + orjson.dumps(
        [meta.get("namespace"), meta.get("labels"), spread], option=orjson.OPT_SORT_KEYS
    )


_UNKNOWN = object()
STATIC_FITS_KEPT = 32
"""Static classes whose passing nodes are kept up to date as nodes change: the workloads' few
classes; a DaemonSet pod, pinned to its node, is a class of its own and used once."""


class _NodeInfo:
    """A node as the scheduler uses it, with per-pod-class results of the static checks."""

    __slots__ = (
        "alloc",
        "labels",
        "name",
        "node",
        "position",
        "prefer_no_schedule",
        "signature",
        "static",
        "taints",
    )

    def __init__(self, node: Obj) -> None:
        self.name = key_of(node)[1]
        self.node = node
        self.signature: tuple[Any, ...] = ()
        self.static: dict[bytes, str | None] = {}
        self.position = -1
        """Where it stands in the scheduler's order of nodes."""
        self.alloc: dict[str, int] = {}
        self.labels: Mapping[str, str] = {}
        self.taints: list[Mapping[str, Any]] = []
        self.prefer_no_schedule: list[Mapping[str, Any]] = []
        """Its PreferNoSchedule taints, the only ones the score reads: most nodes have none,
        and a thousand-node cluster scores some four hundred nodes for every pod."""
        self.update(node)

    def update(self, node: Obj) -> bool:
        """Whether what the static checks read changed."""
        self.node = node
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        self.labels = meta.get("labels") or {}
        signature = (
            meta.get("labels"),
            spec.get("unschedulable"),
            spec.get("taints"),
            node_ready_status(node),
        )
        changed = signature != self.signature
        if changed:
            self.signature = signature
            self.static = {}
            self.taints = effective_taints(node)
            self.prefer_no_schedule = [
                t for t in self.taints if t.get("effect") == PREFER_NO_SCHEDULE
            ]
        self.alloc = node_allocatable(node)
        return changed

    def static_reason(self, key: bytes, pod: Obj) -> str | None:
        """Why a pod of static class `key` cannot run here whatever the node's load, or None."""
        reason: Any = self.static.get(key, _UNKNOWN)
        if reason is _UNKNOWN:
            reason = self.static[key] = static_filter(pod, self.node, self.taints)
        return cast("str | None", reason)


class _StaticFit:
    """The nodes that pass a static class's checks, by their place in the scheduler's order.

    During a roll most nodes pass, but a thousand-node cluster has a hundred cordoned at a
    time, and kube-scheduler's walk over some four hundred nodes for each pod stepped over
    each of them; the walk now visits only nodes that pass, and still counts the ones it steps
    over, so it stops and rotates exactly where the full walk did.
    """

    __slots__ = ("pod", "positions")

    def __init__(self, pod: Obj, infos: list[_NodeInfo], key: bytes) -> None:
        self.pod = pod
        """A pod of the class, to check nodes that change against."""
        self.positions = [i.position for i in infos if i.static_reason(key, pod) is None]

    def node_changed(self, info: _NodeInfo, key: bytes) -> None:
        at = bisect.bisect_left(self.positions, info.position)
        present = at < len(self.positions) and self.positions[at] == info.position
        fits = info.static_reason(key, self.pod) is None
        if fits and not present:
            self.positions.insert(at, info.position)
        elif present and not fits:
            del self.positions[at]


class Scheduler:
    name = "scheduler"

    def __init__(
        self,
        clock: Clock,
        client: ApiClient,
        pods: Informer,
        nodes: Informer,
        *,
        namespaces: Informer | None = None,
        pdbs: Informer | None = None,
        scheduler_name: str = DEFAULT_SCHEDULER,
        bind_concurrency: int = 32,
        flush_seconds: float = 60.0,
    ) -> None:
        self.clock = clock
        self.client = client
        self.pods = pods
        self.nodes = nodes
        self.namespaces = namespaces
        """Namespaces' labels, for affinity terms' namespace selectors (none: no labels)."""
        self.pdbs = pdbs
        """The budgets preemption tries not to break (none: it breaks none by its count)."""
        self.scheduler_name = scheduler_name
        self.flush_seconds = flush_seconds
        self._usage: dict[str, NodeUsage] = {}
        self._accounted: dict[Key, tuple[str, dict[str, int], int]] = {}
        """Pods placed: their node, requests and priority."""
        self._pods_on: dict[str, set[Key]] = {}
        self._priorities: dict[int, int] = {}
        """How many placed pods have each priority: preemption looks for victims only when
        some have a lower one than the pod, which in most clusters none ever has."""
        self._nominated: dict[Key, tuple[str, int, dict[str, int]]] = {}
        """Pods that preempted, waiting for their victims to go: the node made room on, their
        priority and requests. Pods of no higher priority must leave them that room."""
        self._placed = PlacedPods()
        """The pods accounted to nodes, for the inter-pod rules."""
        self._active: OrderedDict[Key, None] = OrderedDict()
        self._unschedulable: set[Key] = set()
        self._waiting_for_pods: set[Key] = set()
        """Unschedulable pods with pod affinity or spread constraints: a pod placed, not only
        one gone, may let them fit."""
        self._classes_waiting_for_pods = False
        """Whether a class known to fit nowhere has pod affinity or spread constraints: its
        pods may be gone, but the next of its class must not be refused on an old answer."""
        self._binding: set[Key] = set()
        self._infos: dict[str, _NodeInfo] = {}
        self._order: list[_NodeInfo] | None = None
        self._static_fit: OrderedDict[bytes, _StaticFit] = OrderedDict()
        # Pod classes that fit nowhere, with their rejection reasons; cleared whenever something
        # happens that could let an unschedulable pod fit.
        self._class_failed: dict[bytes, dict[str, int]] = {}
        self._next_start = 0
        self._wake = asyncio.Event()
        self._bind_slots = asyncio.Semaphore(bind_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        pods.add_handler(self._on_pod)
        nodes.add_handler(self._on_node)

    # -- event handlers -------------------------------------------------------------------------

    def _responsible(self, pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return (spec.get("schedulerName") or DEFAULT_SCHEDULER) == self.scheduler_name

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        if new is None:
            assert old is not None
            key = key_of(old)
            held = key in self._nominated
            self._forget_pending(key)
            if self._unaccount(key) or held:
                self._flush_unschedulable()
            return
        key = key_of(new)
        spec = new.get("spec") or {}
        node = spec.get("nodeName")
        if node:
            self._forget_pending(key)
            if is_terminal(new):
                if self._unaccount(key):
                    self._flush_unschedulable()
            else:
                self._account(key, node, new)
            return
        gated = bool(spec.get("schedulingGates"))
        if gated or is_deleting(new) or is_terminal(new) or not self._responsible(new):
            self._forget_pending(key)
            return
        if key in self._binding:
            return
        if key in self._unschedulable:
            if old is not None and old.get("spec") == spec:
                return
            self._unschedulable.discard(key)
        self._enqueue(key)

    def _on_node(self, old: Obj | None, new: Obj | None) -> None:
        if new is None:
            assert old is not None
            self._infos.pop(key_of(old)[1], None)
            self._forget_order()
            return
        name = key_of(new)[1]
        info = self._infos.get(name)
        if info is None:
            self._infos[name] = _NodeInfo(new)
            self._forget_order()
        elif info.update(new) and self._order is not None:
            for key, fit in self._static_fit.items():
                fit.node_changed(info, key)
        if node_change_may_help(old, new):
            self._flush_unschedulable()

    def _enqueue(self, key: Key) -> None:
        if key not in self._active:
            self._active[key] = None
            self._wake.set()

    def _forget_pending(self, key: Key) -> None:
        self._nominated.pop(key, None)
        self._active.pop(key, None)
        self._unschedulable.discard(key)
        self._waiting_for_pods.discard(key)

    def _flush_unschedulable(self) -> None:
        self._class_failed.clear()
        self._classes_waiting_for_pods = False
        if not self._unschedulable:
            return
        for key in self._unschedulable:
            self._active[key] = None
        self._unschedulable.clear()
        self._waiting_for_pods.clear()
        self._wake.set()

    def _account(self, key: Key, node: str, pod: Obj) -> None:
        prev = self._accounted.get(key)
        if prev is not None:
            if prev[0] == node:
                self._place(key, node, pod)
                return
            self._unaccount(key)
        req = pod_requests(pod)
        prio = priority(pod)
        self._accounted[key] = (node, req, prio)
        self._pods_on.setdefault(node, set()).add(key)
        self._priorities[prio] = self._priorities.get(prio, 0) + 1
        self._usage.setdefault(node, NodeUsage()).add(req)
        self._nominated.pop(key, None)
        self._place(key, node, pod)

    def _place(self, key: Key, node: str, pod: Obj) -> None:
        if self._placed.add(key, node, pod) and (
            self._waiting_for_pods or self._classes_waiting_for_pods
        ):
            self._flush_unschedulable()

    def _unaccount(self, key: Key) -> bool:
        prev = self._accounted.pop(key, None)
        if prev is None:
            return False
        self._placed.remove(key)
        on_node = self._pods_on.get(prev[0])
        if on_node is not None:
            on_node.discard(key)
            if not on_node:
                del self._pods_on[prev[0]]
        left = self._priorities.get(prev[2], 0) - 1
        if left > 0:
            self._priorities[prev[2]] = left
        else:
            self._priorities.pop(prev[2], None)
        usage = self._usage.get(prev[0])
        if usage is not None:
            usage.remove(prev[1])
            if usage.pods <= 0:
                del self._usage[prev[0]]
        return True

    # -- scheduling -----------------------------------------------------------------------------

    async def run(self) -> None:
        await asyncio.gather(
            supervise("scheduler", self._schedule_loop), supervise("scheduler-flush", self._flusher)
        )

    async def _flusher(self) -> None:
        """A safety net like kube-scheduler's: retry unschedulable pods now and then."""
        while True:
            await self.clock.sleep(self.flush_seconds)
            self._flush_unschedulable()

    async def _schedule_loop(self) -> None:
        await self.nodes.synced.wait()
        await self.pods.synced.wait()
        done = 0
        while True:
            if not self._active:
                self._wake.clear()
                await self._wake.wait()
                continue
            key, _ = self._active.popitem(last=False)
            pod = self.pods.store.get(key)
            if pod is None or (pod.get("spec") or {}).get("nodeName") or is_deleting(pod):
                continue
            self._schedule_one(key, pod)
            done += 1
            if done % 50 == 0:
                await asyncio.sleep(0)

    def _forget_order(self) -> None:
        self._order = None
        self._static_fit.clear()

    def _candidate_nodes(self) -> list[_NodeInfo]:
        if self._order is None:
            self._order = [self._infos[n] for n in sorted(self._infos)]
            for i, info in enumerate(self._order):
                info.position = i
        return self._order

    def select_node(
        self, pod: Obj, requests: dict[str, int] | None = None
    ) -> tuple[str | None, dict[str, int]]:
        """The best node for `pod`; None when it fits nowhere, with the count of each reason
        the nodes gave (the reasons are complete only then: a walk that finds nodes does not
        collect the static reasons of the nodes it stepped over)."""
        infos = self._candidate_nodes()
        total = len(infos)
        reasons: dict[str, int] = {}
        if total == 0:
            return None, reasons
        want = feasible_nodes_to_find(total)
        if requests is None:
            requests = pod_requests(pod)
        static_key = static_class(pod)
        fit = self._static_fit.get(static_key)
        if fit is None:
            fit = self._static_fit[static_key] = _StaticFit(pod, infos, static_key)
            if len(self._static_fit) > STATIC_FITS_KEPT:
                self._static_fit.popitem(last=False)
        else:
            self._static_fit.move_to_end(static_key)
        positions = fit.positions
        empty = NodeUsage()
        usages = self._usage
        held = self._held_for(pod)
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        interpod = self._interpod_check(pod)
        candidates: list[tuple[str, float, int, int]] = []
        found = 0
        start = self._next_start % total
        checked = total
        # kube-scheduler's walk: from `start` round the nodes until `want` feasible ones.
        first = bisect.bisect_left(positions, start)
        count = len(positions)
        for j in range(count):
            info = infos[positions[(first + j) % count]]
            usage = (held.get(info.name) if held else None) or usages.get(info.name) or empty
            reason = resource_filter(requests, info.alloc, usage)
            if reason is None and interpod is not None:
                reason = interpod.reason(info.labels)
            if reason is not None:
                reasons[reason] = reasons.get(reason, 0) + 1
                continue
            found += 1
            candidates.append(
                (
                    info.name,
                    least_allocated_score(requests, info.alloc, usage),
                    intolerable_prefer_no_schedule(info.prefer_no_schedule, tolerations)
                    if info.prefer_no_schedule
                    else 0,
                    usage.pods,
                )
            )
            if found >= want:
                checked = (info.position - start) % total + 1
                break
        if not candidates:
            for info in infos:
                static_reason = info.static_reason(static_key, pod)
                if static_reason is not None:
                    reasons[static_reason] = reasons.get(static_reason, 0) + 1
        # Scores are summed with kube-scheduler's default weights; the taint score is
        # normalised over the feasible nodes, so it needs them all first.
        best: str | None = None
        best_score = -1.0
        best_pods = 0
        taint_scores = taint_toleration_scores([c[2] for c in candidates])
        for (name, fit_score, _, pods), taint_score in zip(candidates, taint_scores, strict=True):
            score = fit_score + TAINT_TOLERATION_WEIGHT * taint_score
            if score > best_score or (score == best_score and pods < best_pods):
                best, best_score, best_pods = name, score, pods
        self._next_start = (start + checked) % total
        return best, reasons

    def _interpod_check(self, pod: Obj) -> InterPodCheck | None:
        """The attempt's inter-pod state; None when no rule of the pod or of a placed pod
        applies, which is every attempt in most clusters."""
        rules = pod_rules(pod)
        if not rules and not self._placed.anti_affinity:
            return None
        return InterPodCheck(pod, rules, self._infos, self._placed, self._namespace_labels)

    def _namespace_labels(self, name: str) -> Mapping[str, str]:
        if self.namespaces is None:
            return {}
        ns = self.namespaces.store.get(("", name))
        return ((ns or {}).get("metadata") or {}).get("labels") or {}

    # -- preemption -----------------------------------------------------------------------------

    def _held_for(self, pod: Obj) -> dict[str, NodeUsage]:
        """The usage of nodes where pods that preempted, of at least `pod`'s priority, wait for
        their room: kube-scheduler counts them there for every pod that would take it."""
        if not self._nominated:
            return {}
        key, prio = key_of(pod), priority(pod)
        held: dict[str, NodeUsage] = {}
        for other, (node, other_prio, requests) in self._nominated.items():
            if other == key or other_prio < prio:
                continue
            usage = held.get(node)
            if usage is None:
                now = self._usage.get(node) or NodeUsage()
                usage = held[node] = NodeUsage(
                    dict(now.requested), now.pods, now.nonzero_cpu, now.nonzero_memory
                )
            usage.add(requests)
        return held

    def _fits_on(self, node: str, pod: Obj, requests: dict[str, int]) -> bool:
        info = self._infos.get(node)
        if info is None or info.static_reason(static_class(pod), pod) is not None:
            return False
        usage = self._held_for(pod).get(node) or self._usage.get(node) or NodeUsage()
        if resource_filter(requests, info.alloc, usage) is not None:
            return False
        interpod = self._interpod_check(pod)
        return interpod is None or interpod.reason(info.labels) is None

    def _lower(self, node: str, prio: int) -> list[Victim]:
        """The pods on `node` of a lower priority than `prio`."""
        found = []
        for key in self._pods_on.get(node, ()):
            _, requests, other_prio = self._accounted[key]
            if other_prio < prio:
                other = self.pods.store.get(key)
                if other is not None:
                    found.append(victim(other, requests))
        return found

    def _preemption(
        self, key: Key, pod: Obj, requests: dict[str, int], reasons: Mapping[str, int]
    ) -> tuple[str, Candidate | None]:
        """kube-scheduler's PostFilter for a pod that fits nowhere: the node to preempt on,
        with its victims, or None and what preemption says of the nodes."""
        if not may_preempt(pod):
            return NOT_ELIGIBLE_POLICY, None
        prio = priority(pod)
        nominated = self._nominated.get(key)
        if nominated is not None and any(v.deleting for v in self._lower(nominated[0], prio)):
            return NOT_ELIGIBLE_TERMINATING, None
        infos = self._candidate_nodes()
        if not self._priorities or min(self._priorities) >= prio:
            return nothing_to_preempt(len(infos), reasons), None
        budgets = Budgets(self.pdbs.store.values() if self.pdbs is not None else ())
        static_key = static_class(pod)
        interpod = self._interpod_check(pod)
        held = self._held_for(pod)
        candidates = []
        for info in infos:
            if info.static_reason(static_key, pod) is not None:
                continue
            refused = interpod.reason(info.labels) if interpod is not None else None
            if refused is not None and unresolvable(refused):
                continue
            lower = self._lower(info.name, prio)
            if not lower:
                continue
            if refused is not None and not any(self._in_the_way(pod, v.pod) for v in lower):
                # Taking these pods away leaves the rules as they are; judging that would
                # count the rules afresh for every node (every node, for a spread).
                continue
            usage = held.get(info.name) or self._usage.get(info.name) or NodeUsage()
            chosen = select_victims(
                info.name,
                requests,
                info.alloc,
                usage,
                lower,
                budgets,
                None if refused is None else functools.partial(self._rules_pass, pod, info),
            )
            if chosen is not None:
                candidates.append(chosen)
        if not candidates:
            return nothing_to_preempt(len(infos), reasons), None
        return "", pick(candidates)

    def _in_the_way(self, pod: Obj, other: Obj) -> bool:
        """Whether `other` counts for `pod`'s anti-affinity or spread, or its own
        anti-affinity keeps `pod` out: only then can its going resolve an inter-pod refusal."""
        rules = pod_rules(pod)
        meta, other_meta = pod.get("metadata") or {}, other.get("metadata") or {}
        namespace, labels = meta.get("namespace") or "", meta.get("labels") or {}
        other_ns, other_labels = other_meta.get("namespace") or "", other_meta.get("labels") or {}
        if other_ns == namespace and any(c.selector.matches(other_labels) for c in rules.spread):
            return True
        if any(
            t.matches(other_ns, other_labels, self._namespace_labels(other_ns))
            for t in rules.anti_affinity
        ):
            return True
        own_ns_labels = self._namespace_labels(namespace)
        return any(
            t.matches(namespace, labels, own_ns_labels) for t in pod_rules(other).anti_affinity
        )

    def _rules_pass(self, pod: Obj, info: _NodeInfo, gone: Sequence[Victim]) -> bool:
        """Whether `pod`'s inter-pod rules, and those of the pods that stay, let it onto
        `info`'s node once the pods `gone` are."""
        with self._placed.without(v.key for v in gone):
            interpod = self._interpod_check(pod)
            return interpod is None or interpod.reason(info.labels) is None

    def _nominate(self, key: Key, pod: Obj, requests: dict[str, int], node: str) -> None:
        """Hold `node`'s room for the pod; pods of a lower priority waiting for the same node
        lose their hold there and are scheduled afresh, as kube-scheduler does."""
        prio = priority(pod)
        for other, (other_node, other_prio, _) in list(self._nominated.items()):
            if other_node == node and other_prio < prio:
                del self._nominated[other]
                self._unschedulable.discard(other)
                self._enqueue(other)
                self._spawn(
                    self._patch_status(
                        {"namespace": other[0], "name": other[1]},
                        {"status": {"nominatedNodeName": None}},
                    )
                )
        self._nominated[key] = (node, prio, requests)

    async def _preempt(self, preemptor: Obj, victims: list[Victim]) -> None:
        """Mark each victim DisruptionTarget and delete it, with its own grace period."""
        scheduler = (preemptor.get("spec") or {}).get("schedulerName") or self.scheduler_name
        for v in victims:
            if v.deleting:
                continue
            name, namespace = v.key[1], v.key[0]
            condition = {
                "type": DISRUPTION_TARGET,
                "status": "True",
                "reason": PREEMPTION_BY_SCHEDULER,
                "message": f"{scheduler}: preempting to accommodate a higher priority pod",
                "lastTransitionTime": self.clock.timestamp(),
            }
            await self._patch_status(v.pod["metadata"], {"status": {"conditions": [condition]}})
            try:
                async with self._bind_slots:
                    await self.client.delete(PODS, name, namespace)
            except NotFound:
                continue
            except Exception as exc:
                # The pod stays; the preemptor is judged again when the cluster changes.
                log.warning("preempting %s/%s failed: %s", namespace, name, exc)

    def _schedule_one(self, key: Key, pod: Obj) -> None:
        requests = pod_requests(pod)
        rules = pod_rules(pod)
        cls = pod_class(
            static_class(pod), requests, pod if rules or self._placed.anti_affinity else None
        )
        if self._nominated:
            # Room held for a preemptor is held from pods of no higher priority only: while
            # any is held, pods alike in all but priority may not fit alike.
            cls += b"@%d" % priority(pod)
        nominated = self._nominated.get(key)
        failed = self._class_failed.get(cls)
        node: str | None
        if nominated is not None and self._fits_on(nominated[0], pod, requests):
            # kube-scheduler tries the node a pod preempted on before any other.
            node, reasons = nominated[0], {}
        elif failed is not None:
            node, reasons = None, failed
        else:
            node, reasons = self.select_node(pod, requests)
        if node is None:
            self._class_failed[cls] = reasons
            self._unschedulable.add(key)
            if rules.affinity or rules.spread:
                self._waiting_for_pods.add(key)
                self._classes_waiting_for_pods = True
            total = len(self._candidate_nodes())
            found, chosen = self._preemption(key, pod, requests, reasons)
            if chosen is None:
                self._spawn(self._report_unschedulable(pod, no_fit_message(total, reasons, found)))
                return
            self._nominate(key, pod, requests, chosen.node)
            message = no_fit_message(total, reasons, None)
            self._spawn(self._report_unschedulable(pod, message, nominate=chosen.node))
            self._spawn(self._preempt(pod, chosen.victims))
            return
        self._class_failed.pop(cls, None)
        self._account(key, node, pod)
        self._binding.add(key)
        self._spawn(self._bind(key, pod, node))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bind(self, key: Key, pod: Obj, node: str) -> None:
        meta = pod.get("metadata") or {}
        try:
            async with self._bind_slots:
                await self.client.bind(meta["name"], meta["namespace"], node, meta.get("uid"))
        except (Conflict, NotFound) as exc:
            # Already bound elsewhere or gone: the watch will tell the truth.
            log.debug("bind %s/%s -> %s: %s", key[0], key[1], node, exc)
            self._release(key, node)
        except Exception as exc:
            log.warning("bind %s/%s -> %s failed: %s", key[0], key[1], node, exc)
            self._release(key, node)
            await asyncio.sleep(0.2)
            current = self.pods.store.get(key)
            if current is not None and not (current.get("spec") or {}).get("nodeName"):
                self._enqueue(key)
        finally:
            self._binding.discard(key)

    def _release(self, key: Key, node: str) -> None:
        current = self.pods.store.get(key)
        if current is not None and (current.get("spec") or {}).get("nodeName") == node:
            return
        acc = self._accounted.get(key)
        if acc is not None and acc[0] == node:
            self._unaccount(key)
            self._flush_unschedulable()

    async def _report_unschedulable(
        self, pod: Obj, message: str, *, nominate: str | None = None
    ) -> None:
        """Set PodScheduled=False/Unschedulable, as `kubectl describe` and autoscalers read it,
        and with `nominate` the node the pod preempted on, as `status.nominatedNodeName`."""
        if nominate is None or nominated_node(pod) == nominate:
            for c in (pod.get("status") or {}).get("conditions") or []:
                if c.get("type") == "PodScheduled" and c.get("message") == message:
                    return
        meta = pod.get("metadata") or {}
        status: dict[str, Any] = {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": self.clock.timestamp(),
                }
            ]
        }
        if nominate is not None:
            status["nominatedNodeName"] = nominate
        await self._patch_status(meta, {"status": status})

    async def _patch_status(self, meta: Mapping[str, Any], patch: Obj) -> None:
        try:
            async with self._bind_slots:
                await self.client.patch(
                    PODS,
                    meta["name"],
                    patch,
                    meta["namespace"],
                    patch_type="strategic",
                    subresource="status",
                )
        except NotFound:
            return
        except Exception as exc:
            log.debug(
                "pod %s/%s: status update failed: %s",
                meta.get("namespace"),
                meta.get("name"),
                exc,
            )

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
