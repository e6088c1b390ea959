"""The manager: runs informers, leader election, controllers and runnables in controller-runtime's
order, and supervises them.

Probes and metrics come up first (so a stuck start is visible), then the event recorder and the
informers (caches warm in every replica, leader or not), then the runnables that need no
leadership, then leader election, then controllers and the runnables that need leadership.

A stop request (SIGTERM in `nodeops run`) sets every reconcile's `ctx.stopping` at once and stops
handing out queued work; in-flight reconciles and runnables get `drain_timeout` seconds to finish,
then the lease is released so a successor takes over at once. A lost lease, also while draining,
cancels everything immediately and makes `run` return 1, because another replica may already be
acting on the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from nodeops.kube.client import Client
from nodeops.kube.controller import Controller
from nodeops.kube.errors import CacheSyncTimeout
from nodeops.kube.events import EventRecorder
from nodeops.kube.health import Check, Checks
from nodeops.kube.informer import Informer, InformerFactory, wait_all_synced
from nodeops.kube.leaderelection import LeaderElectionConfig, LeaderElector
from nodeops.kube.metrics import REGISTRY, RUNNABLE_FAILURES

log = structlog.get_logger(__name__)

EXIT_OK = 0
EXIT_LEADERSHIP_LOST = 1
EXIT_FAILED = 1
EXIT_SYNC_FAILED = 3

#: A runnable: a long-running task beside the controllers (a cloud poller, an HTTP API). It
#: returns when `stop` is set; it may return earlier when its work is done.
Runnable = Callable[[asyncio.Event], Awaitable[None]]

T = TypeVar("T")


def parse_addr(addr: str) -> tuple[str, int] | None:
    """`:8080`, `127.0.0.1:0`, or `0` / empty to disable (controller-runtime's convention)."""
    if addr in ("", "0"):
        return None
    host, _, port = addr.rpartition(":")
    return (host or "0.0.0.0", int(port))


class _HttpEndpoint:
    def __init__(self, app: web.Application, addr: tuple[str, int]) -> None:
        self.app = app
        self.addr = addr
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.addr[0], self.addr[1], reuse_address=True)
        await site.start()
        addresses = self._runner.addresses
        self.port = int(addresses[0][1]) if addresses else self.addr[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@dataclass(eq=False)
class _RunnableEntry:
    name: str
    fn: Runnable
    needs_leader: bool
    task: asyncio.Task[None] | None = None


@dataclass(eq=False)
class _Supervised:
    """A task the manager keeps alive: how to start it again, and how often it already did."""

    kind: str  # informer, controller or runnable
    name: str
    restart: Callable[[], asyncio.Task[Any]]
    restarts: list[float] = field(default_factory=list)
    dead: str | None = None


class _Outcome(enum.Enum):
    DONE = "done"
    STOPPED = "stop requested"
    WATCHED = "watched task ended"


class _Failed(Exception):
    """A supervised task ended in a way the manager cannot carry on from."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Manager:
    """Owns the client's shared informers, the event recorder, controllers and runnables."""

    def __init__(
        self,
        client: Client,
        *,
        leader_election: LeaderElectionConfig | None = None,
        metrics_addr: str = ":8080",
        health_addr: str = ":8081",
        drain_timeout: float = 10.0,
        sync_timeout: float = 120.0,
        read_your_writes: bool = True,
        read_your_writes_timeout: float = 30.0,
        event_source: str = "nodeops",
        event_instance: str | None = None,
        restart_limit: int = 3,
        restart_window: float = 600.0,
        restart_backoff: float = 1.0,
    ) -> None:
        self.client = client
        self.informers = InformerFactory(
            client,
            read_your_writes=read_your_writes,
            read_your_writes_timeout=read_your_writes_timeout,
        )
        identity = leader_election.identity if leader_election is not None else None
        self.events = EventRecorder(
            client, event_source, event_instance or identity or socket.gethostname()
        )
        self.controllers: list[Controller] = []
        self.runnables: list[_RunnableEntry] = []
        self.leader_election = leader_election
        self.drain_timeout = drain_timeout
        self.sync_timeout = sync_timeout
        self.leading = asyncio.Event()
        self.stopping = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._failure: asyncio.Future[None] | None = None
        self._running = False
        self._elector: LeaderElector | None = None
        self._caches_synced = False
        # Supervision: a task that dies unexpectedly is restarted (with backoff) up to
        # `restart_limit` times within `restart_window` seconds; beyond that `run` returns 1.
        self.restart_limit = restart_limit
        self.restart_window = restart_window
        self.restart_backoff = restart_backoff
        self._supervised: dict[int, _Supervised] = {}
        self._shared: dict[Hashable, Any] = {}
        self.informers.on_start.append(self._supervise_informer)
        self.readiness = Checks("/readyz")
        self.health = Checks("/healthz")
        self.health.add("ping", lambda: None)
        self.readiness.add("informers", self._informers_ready)
        self.readiness.add("tasks", self._tasks_ready)
        health = parse_addr(health_addr)
        metrics = parse_addr(metrics_addr)
        self.health_endpoint = _HttpEndpoint(self._health_app(), health) if health else None
        self.metrics_endpoint = _HttpEndpoint(self._metrics_app(), metrics) if metrics else None

    # ------------------------------------------------------------------ building

    def add(self, *controllers: Controller) -> None:
        """Add controllers; their sources are started and synced before their first reconcile.

        Controllers added while running start as soon as this replica leads.
        """
        for controller in controllers:
            if any(c.name == controller.name for c in self.controllers):
                raise ValueError(f"a controller named {controller.name!r} was already added")
            controller.leading = self._holds_leadership
            controller.sync_timeout = min(controller.sync_timeout, self.sync_timeout)
            self.controllers.append(controller)
            if self._running and self.leading.is_set() and not self.stopping.is_set():
                self._start_controller(controller)

    def add_runnable(self, fn: Runnable, *, name: str, needs_leader: bool = True) -> None:
        """Run `fn(stop)` beside the controllers until `stop` is set.

        `needs_leader=True` runs it only while this replica leads (anything that acts on the
        cluster or a cloud); False runs it in every replica once the caches synced (an API that
        serves reads). An exception from it stops the manager: a runnable that died unseen
        would leave the operator half-working.
        """
        if any(r.name == name for r in self.runnables):
            raise ValueError(f"a runnable named {name!r} was already added")
        entry = _RunnableEntry(name, fn, needs_leader)
        self.runnables.append(entry)
        if self._running and not self.stopping.is_set():
            if not needs_leader and self._caches_synced:
                self._start_runnable(entry)
            elif needs_leader and self.leading.is_set():
                self._start_runnable(entry)

    def shared(self, key: Hashable, make: Callable[[], T]) -> T:
        """The one object under `key` that every controller of this manager shares, made by
        `make()` on first use.

        For state that is only right when there is one of it per process, such as the drain's
        budget tokens: two controllers each keeping their own would each spend a budget's one
        allowed disruption. Kept on the manager rather than in a module-level map keyed by it,
        because what is shared holds the manager's informers, which hold the manager: such a
        map would keep every manager alive.
        """
        if key not in self._shared:
            self._shared[key] = make()
        found: T = self._shared[key]
        return found

    def add_readiness_check(self, name: str, check: Check) -> None:
        """`check()` returns None when ready, else a reason; it runs on every `/readyz`."""
        self.readiness.add(name, check)

    def add_health_check(self, name: str, check: Check) -> None:
        """`check()` returns None when healthy, else a reason; it runs on every `/healthz`."""
        self.health.add(name, check)

    def stop(self) -> None:
        """Ask `run` to finish gracefully (what SIGTERM does); reconciles see it at once."""
        self._stop_requested.set()
        self.stopping.set()
        for controller in self.controllers:
            controller.request_stop()

    # ------------------------------------------------------------------ state

    @property
    def ready(self) -> bool:
        return not self.readiness.failures()

    def may_act(self) -> bool:
        """False once stopping, or when leader election is on and the lease is not held."""
        return not self.stopping.is_set() and self._holds_leadership()

    def _holds_leadership(self) -> bool:
        if self.leader_election is None:
            return True
        return self._elector is not None and self._elector.holds_lease()

    def _all_informers(self) -> list[Informer]:
        seen: dict[int, Informer] = {id(i): i for i in self.informers.informers()}
        for controller in self.controllers:
            for inf in controller.sources:
                seen.setdefault(id(inf), inf)
        return list(seen.values())

    def _informers_ready(self) -> str | None:
        if not self._caches_synced:
            return "caches not synced yet"
        problems = [p for p in (i.problem() for i in self._all_informers()) if p is not None]
        return "; ".join(sorted(problems)) or None

    def _tasks_ready(self) -> str | None:
        dead = [f"{s.kind} {s.name}: {s.dead}" for s in self._supervised.values() if s.dead]
        return "; ".join(sorted(dead)) or None

    # ------------------------------------------------------------------ http

    def _health_app(self) -> web.Application:
        app = web.Application()
        self.health.register(app)
        self.readiness.register(app)
        return app

    def _metrics_app(self) -> web.Application:
        async def metrics(_: web.Request) -> web.Response:
            body = generate_latest(REGISTRY)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        return app

    # ------------------------------------------------------------------ run

    async def run(self) -> int:
        """Run until stopped; returns the process exit code (0, 1 lease lost or failure, 3 sync)."""
        endpoints = [e for e in (self.health_endpoint, self.metrics_endpoint) if e is not None]
        started_endpoints = []
        self._failure = asyncio.get_running_loop().create_future()
        self._running = True
        elector_task: asyncio.Task[None] | None = None
        try:
            for endpoint in endpoints:
                await endpoint.start()
                started_endpoints.append(endpoint)
            self.events.start()
            self.informers.start()
            for inf in self._all_informers():
                self._start_informer(inf)
            outcome, synced = await self._wait(self._wait_caches())
            if outcome is not _Outcome.DONE:
                return EXIT_OK
            if not synced:
                laggards = [i for i in self._all_informers() if not i.has_synced]
                log.error(
                    "caches did not sync",
                    timeout=self.sync_timeout,
                    informers=[
                        i.resource.key + (f": {i.last_error}" if i.last_error else "")
                        for i in laggards
                    ],
                )
                return EXIT_SYNC_FAILED
            self._caches_synced = True
            log.info("caches synced", informers=len(self._all_informers()))
            for entry in self.runnables:
                if not entry.needs_leader:
                    self._start_runnable(entry)
            if self.leader_election is not None:
                self._elector = LeaderElector(self.client, self.leader_election)
                elector_task = asyncio.create_task(self._elector.run(), name="leader-election")
                outcome, _ = await self._wait(self._elector.wait_leading(), elector_task)
                if outcome is not _Outcome.DONE:
                    return await self._shutdown(elector_task, lost=outcome is _Outcome.WATCHED)
            self.leading.set()
            for controller in self.controllers:
                self._start_controller(controller)
            for entry in self.runnables:
                if entry.needs_leader:
                    self._start_runnable(entry)
            outcome, _ = await self._wait(asyncio.Event().wait(), elector_task)
            return await self._shutdown(elector_task, lost=outcome is _Outcome.WATCHED)
        except _Failed as failed:
            log.error("stopping: a supervised task failed", error=str(failed))
            await self._cancel_all(elector_task)
            return failed.code
        finally:
            self._running = False
            self.stopping.set()
            self.leading.clear()
            await self._stop_runnables(0)
            await self.events.stop()
            await self.informers.stop()
            for inf in self._all_informers():
                await inf.stop()
            for endpoint in started_endpoints:
                await endpoint.stop()

    async def _wait_caches(self) -> bool:
        """Wait for every informer known now to sync, bounded by the sync timeout."""
        return await wait_all_synced(self._all_informers(), self.sync_timeout)

    async def _wait(
        self, awaitable: Awaitable[Any], watch: asyncio.Task[None] | None = None
    ) -> tuple[_Outcome, Any]:
        """Wait for `awaitable` while watching for a stop request, `watch` ending and failures.

        Returns what ended the wait (and the awaitable's result when it was that); raises
        `_Failed` when a supervised task failed, and what `awaitable` raised.
        """
        main: asyncio.Future[Any] = asyncio.ensure_future(awaitable)
        stop: asyncio.Future[Any] = asyncio.ensure_future(self._stop_requested.wait())
        assert self._failure is not None
        waits: set[asyncio.Future[Any]] = {main, stop, self._failure}
        if watch is not None:
            waits.add(watch)
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for fut in (main, stop):
                if not fut.done():
                    fut.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await fut
        if self._failure in done:
            self._failure.result()
        if watch is not None and watch in done:
            return _Outcome.WATCHED, None
        if main in done and not self._stop_requested.is_set():
            return _Outcome.DONE, main.result()
        return _Outcome.STOPPED, None

    # ------------------------------------------------------------------ supervision

    def _start_informer(self, inf: Informer) -> None:
        if not inf.started:
            inf.start()
        self._supervise_informer(inf)

    def _supervise_informer(self, inf: Informer) -> None:
        if id(inf) in self._supervised or inf.task is None:
            return

        def restart() -> asyncio.Task[Any]:
            inf.start()
            assert inf.task is not None
            return inf.task

        name = inf.resource.key + (f"@{inf.namespace}" if inf.namespace else "")
        record = _Supervised("informer", name, restart)
        self._supervised[id(inf)] = record
        self._watch_task(inf.task, record)

    def _start_controller(self, controller: Controller) -> None:
        if controller.task is not None and not controller.task.done():
            return
        for inf in controller.sources:
            self._start_informer(inf)
        record = _Supervised("controller", controller.name, controller.start)
        self._supervised[id(controller)] = record
        self._watch_task(controller.start(), record)

    def _start_runnable(self, entry: _RunnableEntry) -> None:
        if entry.task is not None:
            return

        def start() -> asyncio.Task[Any]:
            entry.task = asyncio.create_task(
                self._run_runnable(entry), name=f"runnable:{entry.name}"
            )
            return entry.task

        record = _Supervised("runnable", entry.name, start)
        self._supervised[id(entry)] = record
        self._watch_task(start(), record)
        log.info("runnable started", runnable=entry.name, needs_leader=entry.needs_leader)

    async def _run_runnable(self, entry: _RunnableEntry) -> None:
        await entry.fn(self.stopping)

    def _watch_task(self, task: asyncio.Task[Any], record: _Supervised) -> None:
        task.add_done_callback(lambda t: self._task_done(t, record))

    def _task_done(self, task: asyncio.Task[Any], record: _Supervised) -> None:
        """A supervised task ended: fine when stopping, else restart it or give up."""
        if self.stopping.is_set() or not self._running:
            return
        exc: BaseException | None = None
        if task.cancelled():
            reason = "cancelled"
        else:
            exc = task.exception()
            if exc is None:
                if record.kind == "runnable":
                    log.info("runnable finished", runnable=record.name)
                    return
                reason = "ended on its own"
            else:
                reason = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, CacheSyncTimeout):
            log.error("controller cannot start", controller=record.name, error=str(exc))
            self._fail(_Failed(EXIT_SYNC_FAILED, str(exc)))
            return
        RUNNABLE_FAILURES.labels(record.kind, record.name).inc()
        record.dead = reason
        loop = asyncio.get_running_loop()
        now = loop.time()
        record.restarts = [t for t in record.restarts if now - t < self.restart_window]
        if len(record.restarts) >= self.restart_limit:
            log.error(
                f"{record.kind} died and cannot be restarted",
                name=record.name,
                error=reason,
                restarts=len(record.restarts),
                exc_info=exc,
            )
            message = f"{record.kind} {record.name} died and was not restarted: {reason}"
            self._fail(_Failed(EXIT_FAILED, message))
            return
        delay = self.restart_backoff * 2 ** len(record.restarts)
        record.restarts.append(now)
        log.error(
            f"{record.kind} died, restarting",
            name=record.name,
            error=reason,
            restart_in=delay,
            exc_info=exc,
        )
        loop.call_later(delay, self._restart, record)

    def _restart(self, record: _Supervised) -> None:
        if self.stopping.is_set() or not self._running:
            return
        task = record.restart()
        record.dead = None
        self._watch_task(task, record)

    def _fail(self, failed: _Failed) -> None:
        if self._failure is not None and not self._failure.done():
            self._failure.set_exception(failed)
            # Retrieved by `_wait`; mark it retrieved here too in case run already ended.
            self._failure.exception()

    # ------------------------------------------------------------------ shutdown

    async def _shutdown(self, elector_task: asyncio.Task[None] | None, *, lost: bool) -> int:
        if lost:
            log.error("leader election lost, stopping all controllers")
            await self._cancel_all(elector_task)
            return EXIT_LEADERSHIP_LOST
        log.info("stopping", drain_timeout=self.drain_timeout)
        self.stopping.set()
        draining = asyncio.ensure_future(
            asyncio.gather(
                *(c.stop(self.drain_timeout) for c in self.controllers),
                self._stop_runnables(self.drain_timeout),
            )
        )
        waits: set[asyncio.Future[Any]] = {draining}
        if elector_task is not None:
            waits.add(elector_task)
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if elector_task is not None and elector_task.done() and not draining.done():
            # The lease went while draining: nothing may go on acting.
            log.error("leader election lost while draining, cancelling everything")
            draining.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await draining
            await self._cancel_all(elector_task)
            return EXIT_LEADERSHIP_LOST
        await draining
        if elector_task is not None:
            elector_task.cancel()  # the elector releases the lease on cancellation
            with contextlib.suppress(BaseException):
                await elector_task
        return EXIT_OK

    async def _cancel_all(self, elector_task: asyncio.Task[None] | None) -> None:
        self.stopping.set()
        self.leading.clear()
        for controller in self.controllers:
            controller.cancel()
        for controller in self.controllers:
            if controller.task is not None:
                with contextlib.suppress(BaseException):
                    await controller.task
        await self._stop_runnables(0)
        if elector_task is not None:
            elector_task.cancel()
            with contextlib.suppress(BaseException):
                await elector_task

    async def _stop_runnables(self, timeout: float) -> None:
        """Runnables see `stopping` set; those still running after `timeout` are cancelled."""
        tasks = [r.task for r in self.runnables if r.task is not None and not r.task.done()]
        if tasks and timeout > 0:
            await asyncio.wait(tasks, timeout=timeout)
        for task in tasks:
            if not task.done():
                task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    def controllers_named(self, names: Iterable[str]) -> list[Controller]:
        wanted = set(names)
        return [c for c in self.controllers if c.name in wanted]
