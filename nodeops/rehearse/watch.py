"""What the roll did to the simulated copy, seen from the simulator's store.

The recorder hangs on the store's write hooks, so it sees every stored change of pods, nodes,
budgets and the roll's own objects at the simulated instant it happened, and costs the roll no
API request. The same recorder watches a real roll on the simulator (the benchmark's reference),
so prediction and outcome are measured by one rule. On a cluster whose store is not ours (a
real control plane) watches feed it the same changes through `observe`, a moment later.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeops.common.selectors import LabelSelector, label_selector_from_object
from nodeops.controllers.cycling.fit import pod_priority
from nodeops.rehearse.timings import Workloads
from nodeops.sim.clock import Clock
from nodeops.sim.server.app import SimServer
from nodeops.sim.server.store import WatchEvent

__all__ = ["PENDING_SETTLE_SECONDS", "WATCHED", "RollRecorder"]

Key = tuple[str, str]

_PODS = ("", "pods")
_NODES = ("", "nodes")
_PDBS = ("policy", "poddisruptionbudgets")
_REPLICASETS = ("apps", "replicasets")
_CNRS = ("nodeops.dev", "cyclenoderequests")
_CNSS = ("nodeops.dev", "cyclenodestatuses")
_TERMINAL = ("Successful", "Failed")
WATCHED: frozenset[Key] = frozenset((_PODS, _NODES, _PDBS, _REPLICASETS, _CNRS, _CNSS))
"""What the recorder follows, by API group and plural."""
PENDING_SETTLE_SECONDS = 90.0
"""Pods are judged left Pending this long after the roll ends, by what the scheduler says of
them then. During the roll it last judged them with the roll's last nodes still there: its
reason counted nodes since deleted, and pods that waited for such a node to go (a drained node
is a domain of spread over hostnames until it is deleted) had not yet had their place.
kube-scheduler 1.24 retries the pods it could not place every 30 s once they have waited a
minute, the simulator's every minute; newer ones as soon as a change could help."""


def _ready(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _preempted(pod: Mapping[str, Any]) -> bool:
    """Whether the scheduler marked the pod a victim of its preemption (kube-scheduler sets
    `DisruptionTarget` with this reason before it deletes one)."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return cond.get("reason") == "PreemptionByScheduler"
    return False


def _unscheduled(pod: Mapping[str, Any]) -> str:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message") or cond.get("reason") or "")
    return "not scheduled yet"


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


@dataclass
class _Pod:
    labels: Mapping[str, str]
    node: str
    deleting: bool
    ready: bool
    workload: str | None
    unscheduled: str = ""
    """Why the scheduler left it without a node, while it has none."""
    priority: int = 0


@dataclass
class _Budget:
    selector: LabelSelector
    allowed: int
    waiting: set[str] = field(default_factory=set)
    """Pods it selects that stand on a node being drained and are not yet going."""
    blocked_since: float | None = None
    blocked_seconds: float = 0.0
    longest: float = 0.0
    stalls: int = 0


@dataclass
class Child:
    """One node's replacement (a CycleNodeStatus) as the recorder saw it."""

    name: str
    node: str
    created: float
    ended: float | None = None
    phase: str = ""
    message: str = ""


@dataclass
class Request:
    name: str
    created: float
    ended: float | None = None
    phase: str = ""
    message: str = ""
    held_since: float | None = None
    """While the capacity check holds its next batch (`Blocked`, `InsufficientCapacity`)."""
    held_seconds: float = 0.0
    longest_hold: float = 0.0
    holds: int = 0
    hold_message: str = ""
    """What the capacity check said last: the first pod that did not fit, and why."""
    selected: int = 0
    """Nodes the request selected for replacement, once its status says."""

    def hold(self, now: float, message: str | None) -> None:
        """The capacity check holds the request (`message`: what it says) or not (None)."""
        if message is not None:
            if self.held_since is None:
                self.held_since = now
                self.holds += 1
            self.hold_message = message
        elif self.held_since is not None:
            self.held_seconds += now - self.held_since
            self.longest_hold = max(self.longest_hold, now - self.held_since)
            self.held_since = None


def _capacity_hold(status: Mapping[str, Any]) -> str | None:
    for cond in status.get("conditions") or ():
        if (
            cond.get("type") == "Blocked"
            and cond.get("status") == "True"
            and cond.get("reason") == "InsufficientCapacity"
        ):
            return str(cond.get("message") or "")
    return None


class RollRecorder:
    """Fed by the store's write hooks of `server`, or, on a cluster whose store is not ours,
    by watches through `observe`; `start()` marks the roll's beginning."""

    def __init__(self, server: SimServer | None, clock: Clock, workloads: Workloads) -> None:
        self.clock = clock
        self.workloads = workloads
        self.recording = False
        self.started_at = 0.0
        self._pods: dict[Key, _Pod] = {}
        self._on_node: dict[str, set[Key]] = {}
        self._draining: set[str] = set()
        self._cordoned_before: set[str] = set()
        self._budgets: dict[Key, _Budget] = {}
        self.desired: dict[str, int] = {}
        self._ready: dict[str, int] = {}
        self.lowest_ready: dict[str, float] = {}
        self.children: dict[str, Child] = {}
        self._children_ended = 0
        self._children_failed = 0
        self.requests: dict[str, Request] = {}
        self.pending_before: set[Key] = set()
        self._preempted: dict[Key, str] = {}
        """Pods the scheduler preempted during the roll, with their workload."""
        self._pending_per_workload: Counter[str] = Counter()
        self.settling = {"pods_created": 0, "pods_deleted": 0}
        """Pods the copy's own controllers made or deleted between its loading (`loaded`) and
        the roll: 0 when the copy agrees with the cluster it was taken from."""
        self._loaded = False
        self._changed = asyncio.Event()
        self.on_roll_change: Callable[[], None] | None = None
        """Called, while recording, when a node's replacement or a request changes."""
        if server is not None:
            server.store.write_hooks.append(self._on_write)

    async def until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Wait, woken by the store's writes, until `done()`; False after `timeout` wall
        seconds without it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not done():
            self._changed.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return done()
        return True

    def wake(self) -> None:
        """Wake `until` to look at its condition again, which something else than a write of
        the store changed."""
        self._changed.set()

    # -- the roll ------------------------------------------------------------------------------

    def loaded(self) -> None:
        """The copy is loaded: pods made or deleted from here until `start` are its
        controllers' doing (`settling`)."""
        self._loaded = True

    def start(self, desired: Mapping[str, int]) -> None:
        """Begin recording: the workloads' wanted replicas, and the nodes cordoned before the
        roll (a drain did not cordon them, so budgets waiting on them are not the roll's)."""
        self.recording = True
        self.started_at = self._now()
        self.desired = dict(desired)
        self._cordoned_before = set(self._draining)
        self._draining.clear()
        for budget in self._budgets.values():
            budget.waiting.clear()
        for workload in self.desired:
            self.lowest_ready[workload] = self._share(workload)
        self.pending_before = {k for k, p in self._pods.items() if not p.node and not p.deleting}
        self._pending_per_workload = Counter(
            w for k in self.pending_before if (w := self._pods[k].workload) is not None
        )

    def ready_pods(self) -> int:
        return sum(1 for p in self._pods.values() if p.ready)

    def pods_of(self, workload: str) -> int:
        return sum(1 for p in self._pods.values() if p.workload == workload and not p.deleting)

    def nodes_replaced(self) -> tuple[int, int, int]:
        """Replacements ended, of them failed, and nodes selected by the requests so far."""
        selected = sum(r.selected for r in self.requests.values())
        return self._children_ended, self._children_failed, selected

    def simulated_seconds(self) -> float:
        """Since the roll began."""
        return self._now() - self.started_at if self.recording else 0.0

    def all_ended(self, names: Iterable[str]) -> bool:
        return all((r := self.requests.get(n)) is not None and r.phase in _TERMINAL for n in names)

    async def settle(self) -> None:
        """Let the cluster run on `PENDING_SETTLE_SECONDS` past the roll's end."""
        await asyncio.sleep(self.clock.wall_seconds(PENDING_SETTLE_SECONDS))

    def finish(self) -> None:
        """Close every budget's open stall and every capacity hold at the current instant."""
        now = self._now()
        for request in self.requests.values():
            request.hold(now, None)
        for budget in self._budgets.values():
            if budget.blocked_since is not None:
                budget.blocked_seconds += now - budget.blocked_since
                budget.longest = max(budget.longest, now - budget.blocked_since)
                budget.blocked_since = None

    def preempted(self) -> dict[str, int]:
        """Pods the scheduler preempted to place others during the roll, per workload."""
        return dict(Counter(self._preempted.values()))

    def budgets(self) -> dict[str, tuple[float, float, int]]:
        """Each budget that held a drain: total and longest blocked seconds, and its stalls."""
        return {
            f"{ns}/{name}": (b.blocked_seconds, b.longest, b.stalls)
            for (ns, name), b in self._budgets.items()
            if b.stalls
        }

    def _now(self) -> float:
        return self.clock.now().timestamp()

    def _share(self, workload: str) -> float:
        desired = self.desired.get(workload, 0)
        if desired <= 0:
            return 1.0
        return min(1.0, self._ready.get(workload, 0) / desired)

    # -- the write hook ------------------------------------------------------------------------

    def _on_write(self, key: Key, ev: WatchEvent) -> None:
        if key in WATCHED:
            self.observe(key, ev.type, ev.decoded())

    def observe(self, key: Key, event: str, obj: Mapping[str, Any]) -> None:
        """One change of a resource (`key`: its API group and plural, one of `WATCHED`), as a
        watch reports it: ADDED, MODIFIED or DELETED."""
        if key not in WATCHED:
            return
        self._changed.set()
        deleted = event == "DELETED"
        if key == _PODS:
            if self._loaded and not self.recording and event in ("ADDED", "DELETED"):
                self.settling["pods_created" if event == "ADDED" else "pods_deleted"] += 1
            self._pod(obj, deleted)
        elif key == _NODES:
            self._node(obj, deleted)
        elif key == _PDBS:
            self._budget(obj, deleted)
        elif key == _REPLICASETS and not deleted:
            self.workloads.add_replicaset(obj)
        elif key == _CNSS and not deleted:
            self._child(obj)
        elif key == _CNRS and not deleted:
            self._request(obj)

    def _pod(self, obj: Mapping[str, Any], deleted: bool) -> None:
        key = _key(obj)
        before = self._pods.pop(key, None)
        if before is not None:
            self._on_node.get(before.node, set()).discard(key)
            if before.ready and before.workload is not None:
                self._ready[before.workload] = self._ready.get(before.workload, 1) - 1
        pod: _Pod | None = None
        if not deleted:
            meta = obj.get("metadata") or {}
            node = str((obj.get("spec") or {}).get("nodeName") or "")
            pod = _Pod(
                labels=meta.get("labels") or {},
                node=node,
                deleting=bool(meta.get("deletionTimestamp")),
                ready=_ready(obj),
                workload=self.workloads.of(obj),
                unscheduled="" if node else _unscheduled(obj),
                priority=pod_priority(obj),
            )
            self._pods[key] = pod
            self._on_node.setdefault(pod.node, set()).add(key)
            if pod.ready and pod.workload is not None:
                self._ready[pod.workload] = self._ready.get(pod.workload, 0) + 1
        seen = pod if pod is not None else before
        workload = seen.workload if seen is not None else None
        # A watch may show a victim only as it goes: its last state is in the deletion.
        if self.recording and key not in self._preempted and _preempted(obj):
            self._preempted[key] = workload or f"Pod/{key[0]}/{key[1]}"
        if self.recording and workload in self.desired:
            self.lowest_ready[workload] = min(self.lowest_ready[workload], self._share(workload))
        self._wait(key, pod)

    def _waiting(self, pod: _Pod | None) -> bool:
        return pod is not None and not pod.deleting and pod.node in self._draining

    def _wait(self, key: Key, pod: _Pod | None) -> None:
        """Keep the budgets' sets of waiting pods current for this pod, and their stalls."""
        namespace, name = key
        waiting = self._waiting(pod)
        for (ns, _), budget in self._budgets.items():
            if ns != namespace:
                continue
            if waiting and pod is not None and budget.selector.matches(pod.labels):
                budget.waiting.add(name)
            else:
                budget.waiting.discard(name)
            self._judge(budget)

    def _judge(self, budget: _Budget) -> None:
        if not self.recording:
            return
        blocked = budget.allowed <= 0 and bool(budget.waiting)
        if blocked and budget.blocked_since is None:
            budget.blocked_since = self._now()
            budget.stalls += 1
        elif not blocked and budget.blocked_since is not None:
            now = self._now()
            budget.blocked_seconds += now - budget.blocked_since
            budget.longest = max(budget.longest, now - budget.blocked_since)
            budget.blocked_since = None

    def _node(self, obj: Mapping[str, Any], deleted: bool) -> None:
        name = _key(obj)[1]
        draining = (
            not deleted
            and bool((obj.get("spec") or {}).get("unschedulable"))
            and name not in self._cordoned_before
        )
        if draining == (name in self._draining):
            return
        if draining:
            self._draining.add(name)
        else:
            self._draining.discard(name)
        for key in list(self._on_node.get(name, ())):
            self._wait(key, self._pods.get(key))

    def _budget(self, obj: Mapping[str, Any], deleted: bool) -> None:
        key = _key(obj)
        if deleted:
            self._budgets.pop(key, None)
            return
        selector = label_selector_from_object((obj.get("spec") or {}).get("selector"))
        allowed = int((obj.get("status") or {}).get("disruptionsAllowed") or 0)
        budget = self._budgets.get(key)
        if budget is None or budget.selector != selector:
            budget = _Budget(selector, allowed)
            self._budgets[key] = budget
            for node in self._draining:
                for pod_key in self._on_node.get(node, ()):
                    pod = self._pods.get(pod_key)
                    if (
                        pod_key[0] == key[0]
                        and self._waiting(pod)
                        and pod is not None
                        and selector.matches(pod.labels)
                    ):
                        budget.waiting.add(pod_key[1])
        budget.allowed = allowed
        self._judge(budget)

    def _child(self, obj: Mapping[str, Any]) -> None:
        name = _key(obj)[1]
        status = obj.get("status") or {}
        child = self.children.get(name)
        if child is None:
            node = str((obj.get("spec") or {}).get("nodeName") or "")
            child = self.children[name] = Child(name, node, self._now())
        child.phase = str(status.get("phase") or "")
        child.message = str(status.get("message") or "")
        if child.phase in _TERMINAL and child.ended is None:
            child.ended = self._now()
            # Counted as they end: the progress line asks at every replacement's change.
            self._children_ended += 1
            self._children_failed += child.phase == "Failed"
        if self.recording and self.on_roll_change is not None:
            self.on_roll_change()

    def _request(self, obj: Mapping[str, Any]) -> None:
        name = _key(obj)[1]
        status = obj.get("status") or {}
        request = self.requests.get(name)
        if request is None:
            request = self.requests[name] = Request(name, self._now())
        request.phase = str(status.get("phase") or "")
        request.message = str(status.get("message") or "")
        if self.recording:
            request.hold(self._now(), _capacity_hold(status))
        if request.phase in _TERMINAL and request.ended is None:
            request.ended = self._now()
        selected = status.get("selectedByGroup") or {}
        if selected:
            request.selected = sum(int(n) for n in selected.values())
        if self.recording and self.on_roll_change is not None:
            self.on_roll_change()

    # -- at the end ----------------------------------------------------------------------------

    def pending(self) -> list[tuple[str, str, bool, int]]:
        """Pods left without a node: `namespace/name`, the scheduler's reason, whether the
        pod stands for one already pending before the roll, and its priority.

        A workload's replicas are alike: one Pending before the roll may be placed on a new
        node while another replica, evicted, takes its turn to wait. So a pod stands for one
        pending before if it is that pod, or a replica of a workload that had as many Pending
        then as now; only the rest are the roll's doing."""
        left = sorted(
            (key, pod) for key, pod in self._pods.items() if not pod.node and not pod.deleting
        )
        allowance = Counter(self._pending_per_workload)
        for key, pod in left:
            if key in self.pending_before and pod.workload is not None:
                allowance[pod.workload] -= 1
        out = []
        for key, pod in left:
            before = key in self.pending_before
            if not before and pod.workload is not None and allowance[pod.workload] > 0:
                allowance[pod.workload] -= 1
                before = True
            out.append((f"{key[0]}/{key[1]}", self._reason(key), before, pod.priority))
        return out

    def _reason(self, key: Key) -> str:
        pod = self._pods.get(key)
        return pod.unscheduled if pod is not None else ""
