"""The cloud as an event source: node groups polled with backoff, requests woken on change.

Clouds offer no watch, so one runnable polls the node groups that requests are interested in
and enqueues those requests when a group changes (an instance comes into service, a detach
completes). Reconciles read the latest snapshot instead of calling the cloud themselves, asking
for a fresh one only where a decision needs it (before starting, after acting). Errors back off
exponentially up to a limit and are logged, never swallowed: a request waiting on a group whose
description keeps failing says so in its status through `last_error`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import structlog

from nodeops.common.looptime import loop_time
from nodeops.kube.controller import Request
from nodeops.providers.base import NodeGroup, NodeGroups, Provider, ProviderError

__all__ = ["CloudWatcher", "Providers", "Snapshot"]

log = structlog.get_logger(__name__)

QUIET_STRETCH = 4
"""How many intervals the poll may stretch to while the groups it polls do not change."""


class Providers:
    """Providers by name, built on first use; `None` is the manager's default provider."""

    def __init__(self, factory: Callable[[str | None], Provider], default: str | None) -> None:
        self._factory = factory
        self.default = default
        self._built: dict[str, Provider] = {}

    def name(self, wanted: str | None) -> str:
        chosen = wanted or self.default
        if not chosen:
            raise ProviderError(
                "NoProvider",
                "no provider named in spec.provider and no default provider (--provider)",
            )
        return chosen

    def get(self, wanted: str | None) -> NodeGroups:
        name = self.name(wanted)
        provider = self._built.get(name)
        if provider is None:
            provider = self._built[name] = self._factory(name)
        if not isinstance(provider, NodeGroups):
            raise ProviderError(
                "Unsupported", f"provider {name} does not manage node groups", retryable=False
            )
        return provider

    async def close(self) -> None:
        for provider in self._built.values():
            with contextlib.suppress(Exception):
                await provider.close()
        self._built.clear()


@dataclass
class Snapshot:
    """The node groups of one provider as last described, and when (monotonic seconds).

    A group described again unchanged keeps its object, so a reader can tell by identity that
    nothing changed and keep what it built from it (an index of thousands of instances).
    """

    groups: dict[str, NodeGroup] = field(default_factory=dict)
    fetched_at: dict[str, float] = field(default_factory=dict)


class CloudWatcher:
    """Polls the node groups requests are interested in; wakes them when a group changes."""

    def __init__(
        self,
        providers: Providers,
        *,
        interval: float = 10.0,
        max_backoff: float = 120.0,
        on_change: Callable[[Request], None] | None = None,
    ) -> None:
        self.providers = providers
        self.interval = interval
        self.max_backoff = max_backoff
        self.on_change = on_change
        self.last_error: str | None = None
        self._snapshots: dict[str, Snapshot] = {}
        self._interest: dict[Request, tuple[str, frozenset[str]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._wake = asyncio.Event()
        self._quiet_polls = 0

    # -- interest --------------------------------------------------------------------------

    def watch(self, request: Request, provider: str, groups: Iterable[str]) -> None:
        """Wake `request` when any of `groups` changes, until `forget`."""
        wanted = (provider, frozenset(groups))
        if self._interest.get(request) != wanted:
            self._interest[request] = wanted
            self._wake.set()

    def forget(self, request: Request) -> None:
        self._interest.pop(request, None)

    def _wanted(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for provider, groups in self._interest.values():
            out.setdefault(provider, set()).update(groups)
        return out

    # -- reads -----------------------------------------------------------------------------

    async def describe(
        self, provider: str, groups: Sequence[str], *, max_age: float | None = None
    ) -> dict[str, NodeGroup]:
        """The groups (those that exist), from a snapshot at most `max_age` seconds old.

        `max_age=0` always asks the cloud; None accepts any snapshot. Concurrent callers for
        the same provider share one call. Provider errors propagate.
        """
        snap = self._snapshots.setdefault(provider, Snapshot())
        now = loop_time()

        def fresh() -> bool:
            if max_age is None:
                return all(g in snap.fetched_at for g in groups)
            return all(now - snap.fetched_at.get(g, float("-inf")) <= max_age for g in groups)

        if not fresh():
            lock = self._locks.setdefault(provider, asyncio.Lock())
            async with lock:
                if not fresh():
                    await self._fetch(provider, list(groups))
        return {g: snap.groups[g] for g in groups if g in snap.groups}

    def invalidate(self, provider: str, groups: Iterable[str]) -> None:
        """Forget the snapshot of `groups`: the next read asks the cloud (after acting on it)."""
        snap = self._snapshots.get(provider)
        if snap is not None:
            for g in groups:
                snap.fetched_at.pop(g, None)
        self._wake.set()

    async def _fetch(self, provider: str, groups: list[str]) -> bool:
        """Describe `groups`, wake the requests watching those that changed; True if any did."""
        started = loop_time()
        described = await self.providers.get(provider).describe_groups(groups)
        snap = self._snapshots.setdefault(provider, Snapshot())
        found = {g.name: g for g in described}
        changed: set[str] = set()
        for name in groups:
            group = found.get(name)
            snap.fetched_at[name] = started
            if group is None:
                if snap.groups.pop(name, None) is not None:
                    changed.add(name)
                continue
            if snap.groups.get(name) != group:
                changed.add(name)
                snap.groups[name] = group
        if changed:
            self._quiet_polls = 0
            if self.on_change is not None:
                for request, (p, wanted) in list(self._interest.items()):
                    if p == provider and wanted & changed:
                        self.on_change(request)
        return bool(changed)

    # -- the runnable ----------------------------------------------------------------------

    def _quiet_delay(self) -> float:
        """The wait before the next poll after `_quiet_polls` polls that found nothing new:
        the interval, doubled for each up to `QUIET_STRETCH` times it.

        A scale-up waits a boot's time (a minute or more) for instances that change once; the
        nodes they register wake the request, which then reads the cloud itself. Polling a
        group of thousands every interval meanwhile cost, per node replaced, in proportion to
        the roll's length. A change, a new interest or an action of ours polls at once again.
        """
        return self.interval * min(QUIET_STRETCH, 2 ** max(0, self._quiet_polls - 1))

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until `stop`: every `interval` while the groups change, less often while they
        do not (`_quiet_delay`), backing off on errors up to `max_backoff`."""
        delay = self.interval
        while not stop.is_set():
            failed = False
            for provider, groups in self._wanted().items():
                try:
                    await self._fetch(provider, sorted(groups))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    failed = True
                    self.last_error = f"describing {sorted(groups)} with {provider}: {exc}"
                    log.warning("cloud poll failed", provider=provider, error=str(exc))
            if failed:
                delay = min(self.max_backoff, max(delay, self.interval) * 2)
            else:
                self.last_error = None
                self._quiet_polls += 1  # a poll that found a change set it to 0 first
                delay = self._quiet_delay()
            self._wake.clear()
            waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())}
            try:
                await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            if self._wake.is_set() and not failed:
                # A new interest or an invalidation: poll soon, but never busy-loop.
                self._quiet_polls = 0
                await asyncio.sleep(min(self.interval, 0.05))
