"""A client-side view of PodDisruptionBudgets, so a drain sends only evictions that can pass.

kubectl fires every eviction and retries each refusal on a 5 s timer. Here every eviction of a
pod covered by a budget first takes a token: the budget's `disruptionsAllowed` as last seen by
watch, minus evictions in flight, minus evictions the server approved that the watched status
does not show yet (the pod is not in `status.disruptedPods`). A freed budget is used the moment
its status changes, and the server is never asked for what it must refuse. The server stays the
judge: a refusal still happens when the view is stale, and is retried on the next change.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Protocol

from nodeops.common.selectors import SelectorError, label_selector_from_object
from nodeops.kube import objects as o
from nodeops.kube.informer import Informer

Key = tuple[str, str]
# An approval the watched status never showed (a missed event) stops counting after this long.
_APPROVAL_MEMORY = 30.0


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


class BudgetGate:
    def __init__(self, pdbs: PdbSource) -> None:
        self.pdbs = pdbs
        self.approved: dict[Key, dict[str, float]] = {}
        self.in_flight: dict[Key, int] = {}
        self._tick = asyncio.Event()

    def watch(self, informer: Informer) -> None:
        """Follow budget changes from `informer` (the source of `pdbs`)."""
        informer.add_handler(
            on_add=self._changed,
            on_update=lambda _old, new: self._changed(new),
            on_delete=self._changed,
        )

    def _notify(self) -> None:
        self._tick.set()
        self._tick = asyncio.Event()

    def _changed(self, pdb: Mapping[str, Any]) -> None:
        key = (o.namespace(pdb), o.name(pdb))
        shown = (pdb.get("status") or {}).get("disruptedPods") or {}
        approved = self.approved.get(key)
        if approved:
            for name in [n for n in approved if n in shown]:
                del approved[name]
        self._notify()

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

    def tokens(self, key: Key) -> int:
        pdb = self.pdbs.get(key[1], key[0])
        if pdb is None:
            return 1
        allowed = int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)
        approved = self.approved.get(key) or {}
        cutoff = time.monotonic() - _APPROVAL_MEMORY
        for name in [n for n, at in approved.items() if at < cutoff]:
            del approved[name]
        return allowed - len(approved) - self.in_flight.get(key, 0)

    def try_take(self, key: Key) -> bool:
        """Take a token if the budget has one; checking and taking is one step."""
        if self.tokens(key) <= 0:
            return False
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
        return True

    async def acquire(self, key: Key, timeout: float) -> bool:
        """Take a token, waiting up to `timeout` for the budget to allow one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.try_take(key):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await self.wait_change(remaining)
        return True

    def release(self, key: Key, approved_pod: str | None) -> None:
        self.in_flight[key] = max(0, self.in_flight.get(key, 0) - 1)
        if approved_pod is not None:
            self.approved.setdefault(key, {})[approved_pod] = time.monotonic()
        self._notify()

    async def wait_change(self, timeout: float) -> None:
        tick = self._tick
        try:
            await asyncio.wait_for(tick.wait(), timeout)
        except TimeoutError:
            pass
