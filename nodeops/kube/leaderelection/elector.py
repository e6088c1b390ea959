"""The elector: one candidate's term, from acquiring the Lease through renewing it to releasing it.

The algorithm and its differences from client-go are described in `nodeops.kube.leaderelection`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any

import structlog

from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.leaderelection.config import JITTER_FACTOR, LeaderElectionConfig
from nodeops.kube.leaderelection.record import LeaseRecord, micro_now
from nodeops.kube.metrics import LEADER_SLOWPATH, LEADER_STATUS
from nodeops.kube.resources import LEASES

__all__ = ["LeaderElector", "LeadershipLost"]

log = structlog.get_logger(__name__)

# A lease watch that ends sooner than this counts as failed and is reopened with backoff (up to
# the maximum), so a server that ends every watch at once is not hammered.
_WATCH_MIN_LIFE = 1.0
_WATCH_MAX_BACKOFF = 30.0


class LeadershipLost(Exception):
    """Leadership ended against our will: the lease could not be renewed or was taken over.

    Whatever the leader was doing may now be done by another replica, so the process should stop
    acting at once; controller-runtime exits without a graceful shutdown.
    """


class _Outcome(Enum):
    OK = "ok"
    HELD = "held by another candidate"
    FAILED = "failed"


class LeaderElector:
    """Contends for one Lease; `run` holds it until cancelled or until leadership is lost.

    `on_started_leading` runs as a task while we lead and is cancelled when leadership ends. If it
    returns we keep the lease (client-go's behaviour: a leader whose work finished still blocks
    others); if it raises, we step down and `run` raises the same exception.
    `on_stopped_leading` runs once when leadership ends, for whatever reason, before the lease is
    released, so nothing the callbacks bracket can overlap with a successor.
    `on_new_leader` runs whenever a different holder is observed, ourselves included.

    One elector runs once: its events describe a single term, so make a new elector to stand again.
    """

    def __init__(
        self,
        client: Client,
        config: LeaderElectionConfig,
        *,
        on_started_leading: Callable[[], Awaitable[None]] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()
        self._log = log.bind(identity=config.identity, lease=f"{config.namespace}/{config.name}")
        self._gauge = LEADER_STATUS.labels(config.name)
        self._slowpath = LEADER_SLOWPATH.labels(config.name)
        self._gauge.set(0)
        self._started = False
        self._is_leader = False
        # The lease as last read or written: its resourceVersion guards our next PUT.
        self._lease: dict[str, Any] | None = None
        self._record: LeaseRecord | None = None
        # Local monotonic time at which `_record` was last seen to change.
        self._observed_at = 0.0
        # Local monotonic time at which the last successful acquire or renew *started*; counting
        # from the start, not the answer, keeps the deadline ahead of the server's write.
        self._renewed_at = 0.0
        self._reported_leader = ""
        # Set by the lease watch on every event, so a waiting candidate re-plans its next attempt.
        self._changed = asyncio.Event()
        # The watch saw the lease released or deleted since the last attempt started.
        self._free_seen = False
        self._attempt_started = 0.0

    # ------------------------------------------------------------------ state

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    def holds_lease(self) -> bool:
        """Whether we lead and our last successful renewal is younger than the lease duration.

        Judged on the local monotonic clock from the start of that renewal, so it turns False
        no later than any other candidate could take the lease over, even while a renewal hangs.
        """
        return self._is_leader and self._loop_time() < self._renewed_at + self.config.lease_duration

    @property
    def leader(self) -> str | None:
        """The holder of the lease as last observed; None when unknown or released."""
        if self._record is None or not self._record.holder:
            return None
        return self._record.holder

    async def wait_leading(self) -> None:
        """Return once we lead; raise `LeadershipLost` if our term already ended."""
        if not self.lost.is_set():
            await self.leading.wait()
        if self.lost.is_set():
            raise LeadershipLost(f"leadership of lease {self._lease_name} was lost")

    @property
    def _lease_name(self) -> str:
        return f"{self.config.namespace}/{self.config.name}"

    def _loop_time(self) -> float:
        return asyncio.get_running_loop().time()

    def _holds_record(self) -> bool:
        return self._record is not None and self._record.holder == self.config.identity

    def _record_valid(self, now: float) -> bool:
        if self._record is None:
            return False
        seconds = self._record.lease_duration_seconds or self.config.lease_duration
        return now < self._observed_at + seconds

    def _observe(self, lease: dict[str, Any]) -> LeaseRecord:
        """Remember the lease; restart the expiry clock only if the record itself changed."""
        self._lease = lease
        record = LeaseRecord.from_lease(lease)
        if record != self._record:
            self._record = record
            self._observed_at = self._loop_time()
        holder = record.holder
        if holder and holder != self._reported_leader:
            self._reported_leader = holder
            self._log.info("new leader elected", leader=holder)
            if self.on_new_leader is not None:
                try:
                    self.on_new_leader(holder)
                except Exception:
                    self._log.exception("on_new_leader failed")
        return record

    # ------------------------------------------------------------------ run

    async def run(self) -> None:
        """Acquire the lease, then keep it until cancelled or lost.

        Raises `LeadershipLost` when the lease could not be renewed in time or was taken over.
        On cancellation, stops leading and, with `release_on_cancel`, releases the lease (bounded
        by the renew deadline) before re-raising `CancelledError`.
        """
        if self._started:
            raise RuntimeError("a LeaderElector runs once; create a new one to stand again")
        self._started = True
        self._log.info("attempting to acquire leader lease")
        await self._acquire()
        self._is_leader = True
        self._gauge.set(1)
        self.leading.set()
        self._log.info("successfully acquired lease")
        work: asyncio.Task[None] | None = None
        if self.on_started_leading is not None:
            work = asyncio.create_task(
                self._lead(self.on_started_leading), name=f"leading:{self.config.name}"
            )
        renew = asyncio.create_task(self._renew(), name=f"renew:{self.config.name}")
        try:
            await self._supervise(renew, work)
        except LeadershipLost:
            await self._stop_leading(renew, work, lost=True)
            raise
        except BaseException:
            # Cancellation, or the leader's own work failed: a voluntary end of term.
            await self._stop_leading(renew, work, lost=False)
            if self.config.release_on_cancel:
                await self._release()
            raise

    @staticmethod
    async def _lead(callback: Callable[[], Awaitable[None]]) -> None:
        await callback()

    async def _supervise(self, renew: asyncio.Task[None], work: asyncio.Task[None] | None) -> None:
        """Wait until renewal fails or the work fails; work that simply returns keeps the lease."""
        pending: set[asyncio.Task[None]] = {renew}
        if work is not None:
            pending.add(work)
        while True:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if renew in done:
                renew.result()
                raise LeadershipLost("renewal stopped")  # _renew only ends by raising
            if work is not None and work in done:
                pending.discard(work)
                if not work.cancelled() and work.exception() is not None:
                    self._log.error("on_started_leading failed, stepping down")
                    work.result()
                self._log.info("on_started_leading returned, keeping the lease")

    async def _stop_leading(
        self, renew: asyncio.Task[None], work: asyncio.Task[None] | None, *, lost: bool
    ) -> None:
        self._is_leader = False
        self._gauge.set(0)
        self.leading.clear()
        if lost:
            self.lost.set()
        # asyncio.wait, not await: whatever these tasks ended with must not cut the stop short
        # (the callback and the release below still have to run); our own cancellation still
        # propagates.
        renew.cancel()
        await asyncio.wait({renew})
        if not renew.cancelled() and renew.exception() is not None:
            exc = renew.exception()
            if not isinstance(exc, LeadershipLost):
                self._log.error("lease renewal failed unexpectedly", exc_info=exc)
        if work is not None and not work.done():
            work.cancel()
            await asyncio.wait({work})
            if not work.cancelled() and work.exception() is not None:
                self._log.error(
                    "on_started_leading failed while being stopped", exc_info=work.exception()
                )
        self._log.info("stopped leading", lost=lost)
        if self.on_stopped_leading is not None:
            try:
                self.on_stopped_leading()
            except Exception:
                self._log.exception("on_stopped_leading failed")

    # ------------------------------------------------------------------ acquire and renew

    async def _acquire(self) -> None:
        """Try at once, then every retry period with jitter, until the lease is ours.

        With `watch_lease`, the lease watch may bring an attempt forward (see `_wait_to_retry`).
        """
        watch: asyncio.Task[None] | None = None
        if self.config.watch_lease:
            watch = asyncio.create_task(self._watch_lease(), name=f"watch:{self.config.name}")
        try:
            while True:
                started = self._attempt_started = self._loop_time()
                self._free_seen = False
                outcome = await self._attempt(renewing=False)
                if outcome is _Outcome.OK:
                    self._renewed_at = started
                    return
                if outcome is _Outcome.HELD:
                    self._log.debug("lease is held by another candidate", leader=self.leader)
                await self._wait_to_retry(watching=watch is not None and not watch.done())
        finally:
            if watch is not None:
                watch.cancel()
                await asyncio.wait({watch})

    async def _wait_to_retry(self, *, watching: bool) -> None:
        """Sleep a jittered retry period, as client-go does, or less when the watch says so.

        While the watch runs, the attempt comes as soon as the lease is seen released or deleted,
        or at the moment the holder's record expires by our observation. An expiry at or before
        the last attempt's start does not count again, so a failed attempt (a lost race, a server
        error) falls back to the jittered period instead of retrying in a tight loop.
        """
        period = self.config.retry_period
        deadline = self._loop_time() + period + random.random() * JITTER_FACTOR * period
        while True:
            if watching:
                if self._free_seen:
                    return
                expiry = self._expires_at()
                if expiry is not None and expiry > self._attempt_started:
                    deadline = min(deadline, expiry)
            if self._loop_time() >= deadline:
                return
            self._changed.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._changed.wait()
            except TimeoutError:
                return

    def _expires_at(self) -> float | None:
        """When the record held by someone else expires by our observation, on the loop clock.

        A millisecond late: at the instant itself the record still counts as valid.
        """
        if self._record is None or not self._record.holder or self._holds_record():
            return None
        seconds = self._record.lease_duration_seconds or self.config.lease_duration
        return self._observed_at + seconds + 0.001

    async def _watch_lease(self) -> None:
        """Feed every change of the lease into our observation and wake the waiting candidate.

        A watch that fails is reopened with backoff (its first event is the lease as it is now);
        one the server refuses outright (no RBAC for watch, say) is given up, leaving the
        jittered retries alone, exactly client-go's behaviour.
        """
        cfg = self.config
        failures = 0
        while True:
            opened = self._loop_time()
            try:
                async for event in self.client.watch(
                    LEASES,
                    cfg.namespace,
                    field_selector=f"metadata.name={cfg.name}",
                    timeout_seconds=random.randint(300, 600),
                ):
                    failures = 0
                    if event.type in ("ADDED", "MODIFIED"):
                        if not self._observe(event.object).holder:
                            self._free_seen = True
                    elif event.type == "DELETED":
                        self._free_seen = True
                    self._changed.set()
                # The server ended the watch (its timeout): reopen, unless it ends them at once.
                if self._loop_time() - opened >= _WATCH_MIN_LIFE:
                    continue
                failures += 1
            except (errors.Forbidden, errors.MethodNotAllowed, errors.NotFound) as exc:
                self._log.warning("cannot watch lease, polling only", error=str(exc))
                return
            except errors.KubeError as exc:
                failures += 1
                self._log.debug("lease watch failed", error=str(exc))
            except Exception:
                # Whatever went wrong (a body that does not decode, say), the watch is only an
                # accelerator: log it, back off and try again; polling goes on meanwhile.
                failures += 1
                self._log.warning("lease watch failed unexpectedly", exc_info=True)
            delay = min(_WATCH_MAX_BACKOFF, _WATCH_MIN_LIFE * 2 ** min(failures - 1, 6))
            await asyncio.sleep(delay * (0.5 + random.random() / 2))

    async def _renew(self) -> None:
        """Renew every retry period; raise `LeadershipLost` once the renew deadline passes.

        Each attempt is cut off at the deadline, so a hung request cannot keep us "leading"
        past it; a late answer that did land only makes others wait longer.
        """
        cfg = self.config
        while True:
            deadline = self._renewed_at + cfg.renew_deadline
            await asyncio.sleep(max(0.0, min(cfg.retry_period, deadline - self._loop_time())))
            started = self._loop_time()
            if started >= deadline:
                self._log.warning("failed to renew lease", reason="renew deadline passed")
                raise LeadershipLost(f"could not renew lease {self._lease_name} in time")
            outcome = await self._attempt(renewing=True, deadline=deadline)
            if outcome is _Outcome.OK:
                self._renewed_at = started
                self._log.debug("successfully renewed lease")
            elif outcome is _Outcome.HELD:
                self._log.warning("failed to renew lease", reason="taken over", leader=self.leader)
                raise LeadershipLost(f"lease {self._lease_name} was taken by {self.leader}")

    async def _attempt(self, *, renewing: bool, deadline: float | None = None) -> _Outcome:
        """One acquire-or-renew, bounded in time; API failures are reported, not raised."""
        if deadline is None:
            deadline = self._loop_time() + self.config.renew_deadline
        try:
            async with asyncio.timeout_at(deadline):
                return await self._try_acquire_or_renew(renewing=renewing)
        except TimeoutError:
            self._log.warning("lease request timed out")
            return _Outcome.FAILED
        except errors.KubeError as exc:
            self._log.warning(
                "failed to renew lease" if renewing else "failed to acquire lease",
                error=str(exc),
                error_type=type(exc).__name__,
            )
            return _Outcome.FAILED

    async def _try_acquire_or_renew(self, *, renewing: bool) -> _Outcome:
        cfg = self.config
        now = micro_now()
        # 1. The leader's fast path: write over the lease as we last saw it. Any failure (a 409
        #    when someone else wrote, or an error whose effect we cannot know) sends us to read.
        if self._holds_record() and self._record_valid(self._loop_time()):
            assert self._record is not None
            renewed = LeaseRecord(
                holder=cfg.identity,
                lease_duration_seconds=cfg.lease_duration_seconds,
                acquire_time=self._record.acquire_time,
                renew_time=now,
                transitions=self._record.transitions,
            )
            try:
                self._observe(await self._write(renewed))
                return _Outcome.OK
            except errors.KubeError as exc:
                self._log.info("failed to update lease optimistically, reading it", error=str(exc))

        # 2. Read the lease, or create it if nobody has yet.
        try:
            lease = await self.client.get(LEASES, cfg.name, cfg.namespace)
        except errors.NotFound:
            created = LeaseRecord(
                holder=cfg.identity,
                lease_duration_seconds=cfg.lease_duration_seconds,
                acquire_time=now,
                renew_time=now,
                transitions=0,
            )
            self._observe(await self.client.create(LEASES, self._body(created), cfg.namespace))
            return _Outcome.OK
        current = self._observe(lease)

        # 3. Someone else holds it: during renewal that means we lost; otherwise wait for expiry.
        if current.holder != cfg.identity:
            if renewing:
                return _Outcome.HELD
            if current.holder and self._record_valid(self._loop_time()):
                return _Outcome.HELD

        # 4. Take it over (a new term) or renew it (ours already), guarded by the RV just read.
        if current.holder == cfg.identity:
            if renewing:
                self._slowpath.inc()
            record = LeaseRecord(
                holder=cfg.identity,
                lease_duration_seconds=cfg.lease_duration_seconds,
                acquire_time=current.acquire_time,
                renew_time=now,
                transitions=current.transitions,
            )
        else:
            record = LeaseRecord(
                holder=cfg.identity,
                lease_duration_seconds=cfg.lease_duration_seconds,
                acquire_time=now,
                renew_time=now,
                transitions=current.transitions + 1,
            )
        self._observe(await self._write(record))
        return _Outcome.OK

    def _body(self, record: LeaseRecord) -> dict[str, Any]:
        return {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": record.to_spec(),
        }

    async def _write(self, record: LeaseRecord) -> dict[str, Any]:
        """PUT the record over the lease last seen; its resourceVersion makes a race a 409.

        Spec fields we do not manage (coordinated election's preferredHolder, strategy) are kept.
        """
        if self._lease is None:
            raise errors.KubeError("no lease observed yet")
        body = dict(self._lease)
        body["spec"] = {**(self._lease.get("spec") or {}), **record.to_spec()}
        return await self.client.replace(LEASES, body)

    # ------------------------------------------------------------------ release

    async def _release(self) -> None:
        """Hand the lease back so a successor takes over at once instead of after expiry.

        Written as client-go does (no holder, a one-second duration, transitions kept), and only
        over a lease that still names us: a 409 means somebody wrote, so we read again and release
        only if we are still the holder. Bounded by the renew deadline; a release that cannot be
        written just leaves the lease to expire.
        """
        if not self._holds_record():
            return
        cfg = self.config
        try:
            async with asyncio.timeout(cfg.renew_deadline):
                while True:
                    assert self._record is not None
                    now = micro_now()
                    released = LeaseRecord(
                        holder="",
                        lease_duration_seconds=1,
                        acquire_time=now,
                        renew_time=now,
                        transitions=self._record.transitions,
                    )
                    try:
                        self._observe(await self._write(released))
                        self._log.info("released lease")
                        return
                    except errors.Conflict:
                        if not await self._reread_for_release():
                            return
                    except errors.KubeError as exc:
                        self._log.warning("failed to release lease", error=str(exc))
                        await asyncio.sleep(cfg.retry_period)
        except TimeoutError:
            self._log.warning("gave up releasing lease; it will expire", timeout=cfg.renew_deadline)

    async def _reread_for_release(self) -> bool:
        """After a 409: read the lease again; True if it still names us and release should retry."""
        cfg = self.config
        try:
            self._observe(await self.client.get(LEASES, cfg.name, cfg.namespace))
        except errors.NotFound:
            return False
        except errors.KubeError as exc:
            self._log.warning("failed to read lease to release it", error=str(exc))
            await asyncio.sleep(cfg.retry_period)
            return True
        if not self._holds_record():
            self._log.info("lease already taken over, nothing to release")
            return False
        return True
