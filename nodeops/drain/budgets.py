"""A client-side view of PodDisruptionBudgets, so a drain sends only evictions that can pass.

kubectl fires every eviction and retries each refusal on a 5 s timer. Here every eviction of a
pod covered by a budget first takes a token: the budget's `disruptionsAllowed` as last seen,
minus the evictions of its pods that this view has sent and that the seen status does not
reflect yet. A freed budget is used the moment its status changes, and the server is never asked
for what it must refuse. The server stays the judge: a refusal still happens when the view is
stale, and is retried on the next change.

When a status reflects an eviction is the whole difficulty, because three streams race: the
eviction's answer, the budget's watch and the pod's watch. kube-apiserver writes the budget's
status (one disruption spent, the pod in `status.disruptedPods`) before it touches the pod and
long before it answers, so that status often arrives before the answer; the disruption
controller drops the pod from `disruptedPods` as soon as the pod is terminating, so the next
status may never list it. An eviction therefore stops holding a token when

- a status lists its pod in `disruptedPods` (that status has the disruption spent), or
- its pod was seen terminating or gone, and a status written after that has been seen (the pod
  then no longer counts as healthy in it): written later by resourceVersion when both are
  numbers, as etcd's revisions are, else seen later,

whatever the order these arrive in, and never because time passed. A refused eviction stops
holding its token at once.

kube-apiserver also serialises evictions under one budget: each reads the budget and writes its
status guarded by resourceVersion, and those that lose the race wait 500 ms before reading it
again. So at most one eviction per budget is sent while the budget's status has not shown the
previous one; the next goes the moment it does, which is sooner than a conflict would allow.

Evictions waiting under one budget take its tokens in turn: a change wakes the first in line
only, and each that takes a token hands the turn on. Twenty nodes drained at once may have
hundreds of pods waiting under one budget that frees one disruption at a time; woken all
together, each would look, find nothing and wait again, hundreds of times per disruption.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodeops.common.selectors import SelectorError, label_selector_from_object
from nodeops.kube import objects as o

Key = tuple[str, str]  # (namespace, name) of a budget
Obj = dict[str, Any]


class PdbSource(Protocol):
    """Where budgets are read: a watching informer, or a snapshot from one list."""

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]: ...

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None: ...


class PdbSnapshot:
    """The budgets as one list call saw them, for a single pass that does not watch."""

    def __init__(self, pdbs: list[dict[str, Any]]) -> None:
        self._by_key = {(o.namespace(p), o.name(p)): p for p in pdbs}

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]:
        return [p for (ns, _), p in self._by_key.items() if ns == value]

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self._by_key.get((namespace or "", name))


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _later(status_rv: str, event_rv: str) -> bool | None:
    """Whether `status_rv` was written after `event_rv`; None when they cannot be compared."""
    if status_rv.isdigit() and event_rv.isdigit():
        return int(status_rv) > int(event_rv)
    return None


@dataclass
class _Eviction:
    """One eviction this view sent, from the moment it takes its token."""

    uid: str
    answered: bool = False  # the server approved it (or its outcome is unknown)
    shown: bool = False  # a status listed the pod in disruptedPods
    gone_rv: str | None = None  # the pod's event that showed it terminating or gone
    gone_seq: int = 0  # statuses seen when that event was seen


@dataclass
class _Budget:
    seq: int = 0  # statuses seen
    evictions: dict[str, _Eviction] = field(default_factory=dict)  # by pod name


class BudgetGate:
    """Tokens per budget, from the watched status and the evictions sent under it.

    Feed it what the drain sees: `observe_budget` for each budget event (or call `watch` with
    the budgets' informer), `observe_pod` for each event of a pod it evicted, `release` for each
    eviction's answer. It is shared by every drain that uses the same budgets, so several nodes
    drained at once never ask a budget for more than it allows.
    """

    def __init__(self, pdbs: PdbSource) -> None:
        self.pdbs = pdbs
        self._budgets: dict[Key, _Budget] = {}
        self._by_pod: dict[tuple[str, str], Key] = {}
        self._ticks: dict[Key, asyncio.Event] = {}
        """One per budget someone waits on: a change of one budget wakes only the evictions
        waiting under it, not every eviction of every node being drained at once."""
        self._lines: dict[Key, deque[asyncio.Future[None]]] = {}
        """Per budget, the evictions waiting in `acquire` for a token, first come first."""

    # ------------------------------------------------------------------ what is seen

    def watch(self, informer: Any) -> None:
        """Follow budget changes from `informer` (the source of `pdbs`)."""
        informer.add_handler(
            on_add=self.observe_budget,
            on_update=lambda _old, new: self.observe_budget(new),
            on_delete=self.forget_budget,
        )

    def observe_budget(self, pdb: Mapping[str, Any]) -> None:
        """A budget's status as the watch delivered it."""
        key = (o.namespace(pdb), o.name(pdb))
        budget = self._budgets.get(key)
        if budget is not None:
            budget.seq += 1
            shown = (pdb.get("status") or {}).get("disruptedPods") or {}
            current = self.pdbs.get(key[1], key[0]) if budget.evictions else None
            for pod, ev in list(budget.evictions.items()):
                if pod in shown:
                    ev.shown = True
                self._drop_if_done(key, budget, pod, ev, current)
        self._notify(key)

    def forget_budget(self, pdb: Mapping[str, Any]) -> None:
        key = (o.namespace(pdb), o.name(pdb))
        budget = self._budgets.pop(key, None)
        for pod in budget.evictions if budget is not None else ():
            self._by_pod.pop((key[0], pod), None)
        self._notify(key)

    def observe_pod(self, pod: Mapping[str, Any], *, deleted: bool = False) -> None:
        """An event of a pod: one terminating or deleted may free its eviction's token."""
        if not deleted and o.deletion_timestamp(pod) is None:
            return
        ns, name = o.namespace(pod), o.name(pod)
        key = self._by_pod.get((ns, name))
        budget = self._budgets.get(key) if key is not None else None
        if key is None or budget is None:
            return
        ev = budget.evictions.get(name)
        if ev is None or ev.gone_rv is not None or (ev.uid and o.uid(pod) != ev.uid):
            return
        ev.gone_rv = _rv(pod)
        ev.gone_seq = budget.seq
        self._drop_if_done(key, budget, name, ev, self.pdbs.get(key[1], key[0]))
        self._notify(key)

    # ------------------------------------------------------------------ tokens

    def budget_for(self, pod: Mapping[str, Any]) -> Key | None:
        """The one budget covering a running pod; None when none does, or several do (the
        server answers those itself), or the pod is not running (budgets do not apply)."""
        if (pod.get("status") or {}).get("phase") != "Running":
            return None
        ns = o.namespace(pod)
        labels = o.labels(pod)
        matches = []
        for pdb in self.pdbs.by_index("namespace", ns):
            try:
                selector = label_selector_from_object((pdb.get("spec") or {}).get("selector"))
            except SelectorError:
                continue
            if selector.matches(labels):
                matches.append((ns, o.name(pdb)))
        return matches[0] if len(matches) == 1 else None

    def _reflected(self, key: Key, ev: _Eviction, pdb: Mapping[str, Any] | None) -> bool:
        if ev.shown:
            return True
        if ev.gone_rv is None:
            return False
        later = _later(_rv(pdb), ev.gone_rv) if pdb is not None else None
        if later is not None:
            return later
        return self._budgets[key].seq > ev.gone_seq

    def _drop_if_done(
        self, key: Key, budget: _Budget, pod: str, ev: _Eviction, pdb: Mapping[str, Any] | None
    ) -> None:
        """`pdb`: the budget as the source holds it, read once by the caller for all the
        evictions it looks at (a read decodes it)."""
        if ev.answered and self._reflected(key, ev, pdb):
            del budget.evictions[pod]
            self._by_pod.pop((key[0], pod), None)

    def tokens(self, key: Key) -> int:
        """Disruptions the budget allows that no eviction sent under it holds."""
        pdb = self.pdbs.get(key[1], key[0])
        if pdb is None:
            return 1
        allowed = int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)
        budget = self._budgets.get(key)
        if budget is None:
            return allowed
        shown = (pdb.get("status") or {}).get("disruptedPods") or {}
        held = 0
        for pod, ev in budget.evictions.items():
            if pod in shown:
                ev.shown = True
            if not self._reflected(key, ev, pdb):
                held += 1
        return allowed - held

    def _writing(self, key: Key) -> bool:
        """An eviction under the budget is sent and its status write not seen yet."""
        budget = self._budgets.get(key)
        return budget is not None and any(
            not ev.answered and not ev.shown for ev in budget.evictions.values()
        )

    def try_take(self, key: Key, pod: Mapping[str, Any]) -> bool:
        """Take a token for evicting `pod` if the budget has one; checking and taking is one
        step. Also False while the budget's previous eviction is still being written."""
        if self.tokens(key) <= 0 or self._writing(key):
            return False
        budget = self._budgets.setdefault(key, _Budget())
        name = o.name(pod)
        budget.evictions[name] = _Eviction(uid=o.uid(pod))
        self._by_pod[(key[0], name)] = key
        return True

    async def acquire(self, key: Key, pod: Mapping[str, Any], timeout: float) -> bool:
        """Take a token, waiting up to `timeout` for the budget to allow one, in turn with the
        other evictions waiting under the same budget."""
        if not self._lines.get(key) and self.try_take(key, pod):
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        line = self._lines.setdefault(key, deque())
        turn: asyncio.Future[None] = loop.create_future()
        line.append(turn)
        took = False
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await asyncio.shield(turn)
                if not turn.done():
                    return False  # timed out
                took = self.try_take(key, pod)
                if took:
                    return True
                # Nothing for us yet: still first in line, for the next change.
                fresh: asyncio.Future[None] = loop.create_future()
                line[line.index(turn)] = fresh
                turn = fresh
        finally:
            woken = turn.done()
            with contextlib.suppress(ValueError):
                line.remove(turn)
            if not woken:
                turn.cancel()
            if took or woken:
                # Taken (another token may be free), or woken and leaving without looking:
                # either way the next in line looks now rather than at the next change.
                self._next_turn(key)
            if not line and self._lines.get(key) is line:
                del self._lines[key]

    def release(self, key: Key, pod: Mapping[str, Any], approved: bool) -> None:
        """The eviction was answered: approved (or with an unknown outcome), or refused."""
        budget = self._budgets.get(key)
        name = o.name(pod)
        ev = budget.evictions.get(name) if budget is not None else None
        if budget is not None and ev is not None:
            if approved:
                ev.answered = True
                self._drop_if_done(key, budget, name, ev, self.pdbs.get(key[1], key[0]))
            else:
                del budget.evictions[name]
                self._by_pod.pop((key[0], name), None)
        self._notify(key)

    def held(self, key: Key) -> list[str]:
        """Pods whose evictions still hold a token of the budget (for reports and tests)."""
        pdb = self.pdbs.get(key[1], key[0])
        budget = self._budgets.get(key)
        if budget is None:
            return []
        return sorted(p for p, ev in budget.evictions.items() if not self._reflected(key, ev, pdb))

    # ------------------------------------------------------------------ waiting

    def _notify(self, key: Key) -> None:
        tick = self._ticks.pop(key, None)
        if tick is not None:
            tick.set()
        self._next_turn(key)

    def _next_turn(self, key: Key) -> None:
        """Wake the first eviction in line under `key`: it hands the turn on if it takes a
        token, and stays first if it finds none."""
        line = self._lines.get(key)
        if line and not line[0].done():
            line[0].set_result(None)  # done already: woken, and it will see this change too

    async def wait_change(self, key: Key, timeout: float) -> None:
        """Until budget `key` changes (its status, an eviction answered or a pod gone under
        it), or `timeout` seconds."""
        tick = self._ticks.get(key)
        if tick is None:
            tick = self._ticks[key] = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # wait_for would swallow a cancellation (3.11)
                await tick.wait()
