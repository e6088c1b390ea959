"""Leader election against the simulated API server over loopback.

Timing bounds are the algorithm's own (lease duration, renew deadline, retry period with jitter)
plus generous margins, so a slow machine delays the tests but does not fail them; a broken
algorithm (no expiry wait, no release, renewing past the deadline) falls outside the bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.leaderelection import (
    JITTER_FACTOR,
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLost,
)
from nodeops.kube.metrics import REGISTRY
from nodeops.kube.resources import LEASES
from nodeops.sim.clock import Clock
from nodeops.sim.server.app import SimServer

NS = "default"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
# Slack for scheduling on a loaded machine, added to every upper bound.
MARGIN = 1.5


@pytest.fixture
async def server() -> AsyncIterator[SimServer]:
    srv = SimServer(clock=Clock(1.0))
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def clients(server: SimServer) -> AsyncIterator[Callable[[], Client]]:
    """A new client per candidate, as each replica of an operator has its own connection."""
    made: list[Client] = []

    def make() -> Client:
        client = Client(server.url, timeout=5.0)
        made.append(client)
        return client

    try:
        yield make
    finally:
        for client in made:
            await client.close()


@pytest.fixture
async def tasks() -> AsyncIterator[list[asyncio.Task[Any]]]:
    """Tasks a test starts; whatever is still running at the end is cancelled and awaited."""
    started: list[asyncio.Task[Any]] = []
    try:
        yield started
    finally:
        for task in started:
            task.cancel()
        for task in started:
            with contextlib.suppress(BaseException):
                await task


def config(
    name: str,
    identity: str,
    lease_duration: float = 1.0,
    renew_deadline: float = 0.7,
    retry_period: float = 0.2,
    *,
    release_on_cancel: bool = True,
    watch_lease: bool = True,
) -> LeaderElectionConfig:
    return LeaderElectionConfig(
        namespace=NS,
        name=name,
        identity=identity,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        release_on_cancel=release_on_cancel,
        watch_lease=watch_lease,
    )


def max_acquire_gap(cfg: LeaderElectionConfig) -> float:
    """The longest pause between two acquire attempts (retry period plus its jitter)."""
    return cfg.retry_period * (1 + JITTER_FACTOR)


@dataclass
class Term:
    identity: str
    start: float
    end: float | None = None


@dataclass
class Terms:
    """Leadership terms as the callbacks report them, on the monotonic clock."""

    terms: list[Term] = field(default_factory=list)
    stopped: dict[str, asyncio.Event] = field(default_factory=dict)

    def elector(
        self,
        client: Client,
        cfg: LeaderElectionConfig,
        work: Callable[[], Awaitable[None]] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
    ) -> LeaderElector:
        identity = cfg.identity
        self.stopped[identity] = asyncio.Event()

        async def started() -> None:
            self.terms.append(Term(identity, time.monotonic()))
            if work is not None:
                await work()

        def stopped() -> None:
            term = next(t for t in reversed(self.terms) if t.identity == identity)
            assert term.end is None, f"{identity} stopped leading twice"
            term.end = time.monotonic()
            self.stopped[identity].set()

        return LeaderElector(
            client,
            cfg,
            on_started_leading=started,
            on_stopped_leading=stopped,
            on_new_leader=on_new_leader,
        )

    def of(self, identity: str) -> list[Term]:
        return [t for t in self.terms if t.identity == identity]

    def assert_no_overlap(self) -> None:
        ordered = sorted(self.terms, key=lambda t: t.start)
        for before, after in itertools.pairwise(ordered):
            assert before.end is not None, (
                f"{before.identity} still led when {after.identity} began"
            )
            assert before.end <= after.start, (
                f"{before.identity} led until {before.end:.3f} but {after.identity} "
                f"began at {after.start:.3f}"
            )


async def read_lease(client: Client, name: str) -> dict[str, Any]:
    return await client.get(LEASES, name, NS)


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float, interval: float = 0.05
) -> None:
    """Poll `check` until it holds; fail after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while True:
            if await check():
                return
            await asyncio.sleep(interval)


def leader_gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value("leader_election_master_status", {"name": name})


def make_lease(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NS},
        "spec": dict(spec),
    }


# ---------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lease_duration": 10, "renew_deadline": 10}, "lease_duration"),
        ({"lease_duration": 5, "renew_deadline": 10}, "lease_duration"),
        ({"renew_deadline": 2.4, "retry_period": 2}, "retry_period"),
        ({"retry_period": 0}, "retry_period must be greater than zero"),
        ({"lease_duration": -1}, "lease_duration must be greater than zero"),
        ({"identity": ""}, "identity must not be empty"),
        ({"name": ""}, "name must not be empty"),
    ],
)
def test_config_is_validated(kwargs: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"namespace": NS, "name": "lease", "identity": "me"}
    with pytest.raises(ValueError, match=message):
        LeaderElectionConfig(**{**base, **kwargs})


def test_config_defaults_are_client_gos() -> None:
    cfg = LeaderElectionConfig(namespace=NS, name="lease", identity="me")
    assert (cfg.lease_duration, cfg.renew_deadline, cfg.retry_period) == (15, 10, 2)
    assert cfg.lease_duration_seconds == 15
    assert config("x", "me", 1.5, 1.0, 0.2).lease_duration_seconds == 2


# ---------------------------------------------------------------------- one candidate


async def test_acquires_renews_and_releases(
    clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    name = "single"
    reader = clients()
    terms = Terms()
    seen: list[str] = []
    cfg = config(name, "alpha")
    elector = terms.elector(clients(), cfg, on_new_leader=seen.append)
    assert leader_gauge(name) == 0
    run = asyncio.create_task(elector.run())
    tasks.append(run)

    await asyncio.wait_for(elector.wait_leading(), timeout=5)
    assert elector.is_leader and elector.leader == "alpha" and seen == ["alpha"]
    assert leader_gauge(name) == 1
    first = await read_lease(reader, name)
    spec = first["spec"]
    assert spec["holderIdentity"] == "alpha"
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 0
    assert MICRO_TIME.match(spec["acquireTime"]) and MICRO_TIME.match(spec["renewTime"])

    async def renewed_twice() -> bool:
        lease = await read_lease(reader, name)
        return lease["spec"]["renewTime"] > spec["renewTime"] and (
            int(lease["metadata"]["resourceVersion"])
            >= int(first["metadata"]["resourceVersion"]) + 2
        )

    await eventually(renewed_twice, timeout=5)
    later = (await read_lease(reader, name))["spec"]
    assert later["holderIdentity"] == "alpha"
    assert later["acquireTime"] == spec["acquireTime"]
    assert later["leaseTransitions"] == 0
    assert elector.is_leader and not elector.lost.is_set()

    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert not elector.is_leader and not elector.leading.is_set()
    assert not elector.lost.is_set()
    assert leader_gauge(name) == 0
    assert terms.of("alpha")[0].end is not None
    released = (await read_lease(reader, name))["spec"]
    assert released["holderIdentity"] == ""
    assert released["leaseDurationSeconds"] == 1
    assert released["leaseTransitions"] == 0
    assert elector.leader is None


async def test_an_elector_runs_once(
    clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    elector = LeaderElector(clients(), config("once", "alpha"))
    tasks.append(asyncio.create_task(elector.run()))
    await asyncio.wait_for(elector.wait_leading(), timeout=5)
    with pytest.raises(RuntimeError, match="runs once"):
        await elector.run()


async def test_acquire_retries_through_server_errors(
    server: SimServer, clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    name = "flaky-acquire"
    server.faults.update("error=500:1@*/leases")
    elector = LeaderElector(clients(), config(name, "alpha"))
    tasks.append(asyncio.create_task(elector.run()))

    async def refused_three_times() -> bool:
        return server.faults.counts()["error-500"] >= 3

    await eventually(refused_three_times, timeout=5)
    assert not elector.is_leader
    server.faults.update("")
    await asyncio.wait_for(elector.wait_leading(), timeout=5)
    assert (await read_lease(clients(), name))["spec"]["holderIdentity"] == "alpha"


async def test_acquire_retries_while_the_server_is_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = Client(f"http://127.0.0.1:{port}", timeout=2.0)
    elector = LeaderElector(client, config("unreachable", "alpha"))
    run = asyncio.create_task(elector.run())
    srv = SimServer(port=port)
    try:
        # Long enough for a few refused connections; the elector must keep trying.
        await asyncio.sleep(0.5)
        assert not elector.is_leader and not run.done()
        await srv.start()
        await asyncio.wait_for(elector.wait_leading(), timeout=5)
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        await client.close()
        await srv.stop()


async def test_failing_work_steps_down_and_releases(
    clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    name = "failing-work"
    terms = Terms()

    async def boom() -> None:
        raise RuntimeError("reconcilers crashed")

    elector = terms.elector(clients(), config(name, "alpha"), work=boom)
    with pytest.raises(RuntimeError, match="reconcilers crashed"):
        await asyncio.wait_for(elector.run(), timeout=5)
    assert terms.stopped["alpha"].is_set() and not elector.is_leader
    assert (await read_lease(clients(), name))["spec"]["holderIdentity"] == ""


async def test_work_that_returns_keeps_the_lease(
    clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    name = "finished-work"
    done = asyncio.Event()

    async def short_work() -> None:
        done.set()

    # A renew deadline that a loaded machine's scheduling cannot miss: the point is that the
    # elector keeps renewing after the work returned, not how fast it renews.
    cfg = config(name, "alpha", lease_duration=6.0, renew_deadline=4.0, retry_period=0.2)
    elector = LeaderElector(clients(), cfg, on_started_leading=short_work)
    run = asyncio.create_task(elector.run())
    tasks.append(run)
    await asyncio.wait_for(done.wait(), timeout=5)
    reader = clients()
    before = (await read_lease(reader, name))["spec"]["renewTime"]

    async def renewed() -> bool:
        return (await read_lease(reader, name))["spec"]["renewTime"] > before

    await eventually(renewed, timeout=5)
    assert elector.is_leader and not run.done()


# ---------------------------------------------------------------------- losing leadership


async def test_leader_that_cannot_renew_stops_by_the_renew_deadline(
    server: SimServer, clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    name = "renew-fails"
    cfg = config(name, "alpha", lease_duration=3.0, renew_deadline=1.0, retry_period=0.2)
    terms = Terms()
    work_cancelled = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            work_cancelled.set()
            raise

    elector = terms.elector(clients(), cfg, work=work)
    run = asyncio.create_task(elector.run())
    tasks.append(run)
    await asyncio.wait_for(elector.wait_leading(), timeout=5)

    server.faults.update("error=500:1@update/leases")
    blocked_at = time.monotonic()
    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(run, timeout=cfg.lease_duration + MARGIN)
    elapsed = terms.of("alpha")[0].end
    assert elapsed is not None
    elapsed -= blocked_at
    # The last renewal started at most a retry period (and a request) before the block.
    assert elapsed >= cfg.renew_deadline - 2 * cfg.retry_period
    assert elapsed <= cfg.renew_deadline + MARGIN
    assert work_cancelled.is_set()
    assert elector.lost.is_set() and not elector.is_leader and not elector.leading.is_set()
    assert leader_gauge(name) == 0
    with pytest.raises(LeadershipLost):
        await elector.wait_leading()
    # A lost lease is not released: renewals were failing, and someone may already hold it.
    server.faults.update("")
    assert (await read_lease(clients(), name))["spec"]["holderIdentity"] == "alpha"


async def test_leader_that_finds_another_holder_stops_at_once(
    clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    name = "usurped"
    cfg = config(name, "alpha", lease_duration=3.0, renew_deadline=2.0, retry_period=0.2)
    terms = Terms()
    elector = terms.elector(clients(), cfg)
    run = asyncio.create_task(elector.run())
    tasks.append(run)
    await asyncio.wait_for(elector.wait_leading(), timeout=5)

    # Someone overwrites the lease behind the leader's back (an administrator, say).
    admin = clients()
    lease = await read_lease(admin, name)
    lease["spec"]["holderIdentity"] = "intruder"
    await admin.replace(LEASES, lease)
    overwritten_at = time.monotonic()
    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(run, timeout=5)
    end = terms.of("alpha")[0].end
    assert end is not None
    # Well before the renew deadline: the first renewal after the overwrite notices it.
    assert end - overwritten_at < cfg.renew_deadline
    assert (await read_lease(admin, name))["spec"]["holderIdentity"] == "intruder"


# ---------------------------------------------------------------------- two candidates


async def start_leader_and_follower(
    clients: Callable[[], Client],
    tasks: list[asyncio.Task[Any]],
    terms: Terms,
    leader_cfg: LeaderElectionConfig,
    follower_cfg: LeaderElectionConfig,
) -> tuple[LeaderElector, asyncio.Task[Any], LeaderElector, asyncio.Task[Any]]:
    leader = terms.elector(clients(), leader_cfg)
    leader_run = asyncio.create_task(leader.run())
    tasks.append(leader_run)
    await asyncio.wait_for(leader.wait_leading(), timeout=5)
    follower = terms.elector(clients(), follower_cfg)
    follower_run = asyncio.create_task(follower.run())
    tasks.append(follower_run)

    async def follower_saw_leader() -> bool:
        return follower.leader == leader_cfg.identity

    await eventually(follower_saw_leader, timeout=5)
    return leader, leader_run, follower, follower_run


async def test_follower_never_deposes_a_live_leader(
    clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    """Every renewal restarts the follower's wait, however long the leader stays."""
    name = "long-term"
    leader_cfg = config(name, "alpha")
    follower_cfg = config(name, "beta")
    terms = Terms()
    leader, _, follower, _ = await start_leader_and_follower(
        clients, tasks, terms, leader_cfg, follower_cfg
    )
    reader = clients()
    start_rv = int((await read_lease(reader, name))["metadata"]["resourceVersion"])
    renewals_needed = int(3 * leader_cfg.lease_duration / leader_cfg.retry_period)

    async def held_for_three_lease_durations() -> bool:
        lease = await read_lease(reader, name)
        return int(lease["metadata"]["resourceVersion"]) - start_rv >= renewals_needed

    await eventually(held_for_three_lease_durations, timeout=3 * leader_cfg.lease_duration + 5)
    assert leader.is_leader and not follower.is_leader
    assert [t.identity for t in terms.terms] == ["alpha"]
    spec = (await read_lease(reader, name))["spec"]
    assert spec["holderIdentity"] == "alpha" and spec["leaseTransitions"] == 0


async def test_killed_leader_is_replaced_after_the_lease_expires(
    clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    name = "killed"
    timing = (2.0, 1.4, 0.2)  # lease duration, renew deadline, retry period
    leader_cfg = config(name, "alpha", *timing, release_on_cancel=False)
    follower_cfg = config(name, "beta", *timing)
    terms = Terms()
    _, leader_run, follower, _ = await start_leader_and_follower(
        clients, tasks, terms, leader_cfg, follower_cfg
    )
    assert not follower.is_leader

    # kill -9: no release, so the follower must wait out the lease as it last saw it renewed.
    leader_run.cancel()
    killed_at = time.monotonic()
    with contextlib.suppress(asyncio.CancelledError):
        await leader_run
    await asyncio.wait_for(
        follower.wait_leading(),
        timeout=follower_cfg.lease_duration + max_acquire_gap(follower_cfg) + MARGIN,
    )
    took_over = terms.of("beta")[0].start - killed_at
    assert took_over >= follower_cfg.lease_duration - 2 * follower_cfg.retry_period
    assert took_over <= follower_cfg.lease_duration + max_acquire_gap(follower_cfg) + MARGIN
    terms.assert_no_overlap()
    spec = (await read_lease(clients(), name))["spec"]
    assert spec["holderIdentity"] == "beta"
    assert spec["leaseTransitions"] == 1


async def test_graceful_stop_hands_over_without_waiting_for_expiry(
    clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    name = "graceful"
    timing = (3.0, 2.0, 0.2)
    leader_cfg = config(name, "alpha", *timing, release_on_cancel=True)
    follower_cfg = config(name, "beta", *timing)
    terms = Terms()
    _, leader_run, follower, _ = await start_leader_and_follower(
        clients, tasks, terms, leader_cfg, follower_cfg
    )

    leader_run.cancel()
    stopped_at = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await leader_run
    await asyncio.wait_for(follower.wait_leading(), timeout=5)
    took_over = terms.of("beta")[0].start - stopped_at
    # A release lets the follower in at its next attempt, long before the lease would expire.
    assert took_over <= max_acquire_gap(follower_cfg) + MARGIN
    assert took_over < follower_cfg.lease_duration - 2 * follower_cfg.retry_period
    terms.assert_no_overlap()
    spec = (await read_lease(clients(), name))["spec"]
    assert spec["holderIdentity"] == "beta"
    assert spec["leaseTransitions"] == 1
    assert spec["leaseDurationSeconds"] == 3


class StepDown(Exception):
    """Raised by a test leader's work to end its term."""


@pytest.mark.parametrize("faults", ["", "error=500:0.3@update/leases"], ids=["clean", "500s"])
async def test_two_candidates_never_lead_at_once(
    server: SimServer, clients: Callable[[], Client], faults: str, tasks: list[asyncio.Task[Any]]
) -> None:
    """Candidates step down, crash without releasing, lose renewals and restart, for seconds on end.

    Every restart takes a new identity, as a restarted replica does. Whatever the path of each
    handover, the terms the callbacks report must never overlap.
    """
    name = "contested"
    server.faults.update(faults)
    terms = Terms()
    rng = random.Random(7)
    losses = 0

    async def candidate(slot: str) -> None:
        nonlocal losses
        client = clients()
        for round_ in range(1000):
            cfg = config(name, f"{slot}-{round_}", release_on_cancel=rng.random() < 0.75)
            # Mostly short terms for many handovers, some longer than the lease duration.
            hold = rng.uniform(0.1, 0.5) if rng.random() < 0.7 else rng.uniform(1.0, 1.8)

            async def work(hold: float = hold) -> None:
                await asyncio.sleep(hold)
                raise StepDown

            try:
                await terms.elector(client, cfg, work=work).run()
            except StepDown:
                pass
            except LeadershipLost:
                losses += 1
            # Give the other candidate, polling every retry period or so, the first chance.
            await asyncio.sleep(0.5)

    runners = [asyncio.create_task(candidate(slot)) for slot in ("a", "b")]
    tasks.extend(runners)
    await asyncio.sleep(5.0)
    for runner in runners:
        runner.cancel()
    for runner in runners:
        with contextlib.suppress(asyncio.CancelledError):
            await runner
        assert runner.cancelled(), runner

    terms.assert_no_overlap()
    assert len(terms.terms) >= 3, terms.terms
    assert {t.identity[0] for t in terms.terms} == {"a", "b"}, terms.terms
    lease = (await read_lease(clients(), name))["spec"]
    assert lease["leaseTransitions"] >= len({t.identity for t in terms.terms}) - 1


# ---------------------------------------------------------------------- races and clocks


class RacingClient(Client):
    """A client whose lease PUTs always lose a race: a rival renews just before each lands."""

    def __init__(self, base_url: str, rival: Client) -> None:
        super().__init__(base_url, timeout=5.0)
        self.rival = rival
        self.racing = True
        self.conflicts = 0
        self.conflicted = asyncio.Event()

    async def replace(
        self,
        res: Any,
        body: Mapping[str, Any],
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        if self.racing:
            current = await self.rival.get(LEASES, body["metadata"]["name"], NS)
            current["spec"]["renewTime"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            await self.rival.replace(LEASES, current)
        try:
            return await super().replace(
                res, body, subresource=subresource, field_manager=field_manager
            )
        except errors.Conflict:
            self.conflicts += 1
            self.conflicted.set()
            raise


async def test_stale_resource_version_conflicts_and_does_not_steal(
    server: SimServer, clients: Callable[[], Client]
) -> None:
    name = "race"
    rival = clients()
    stamp = "2030-01-01T00:00:00.000000Z"
    await rival.create(
        LEASES,
        make_lease(
            name,
            {
                "holderIdentity": "rival",
                "leaseDurationSeconds": 1,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 3,
            },
        ),
        NS,
    )
    client = RacingClient(server.url, rival)
    cfg = config(name, "beta")
    elector = LeaderElector(client, cfg)
    run = asyncio.create_task(elector.run())
    try:

        async def conflicted_twice() -> bool:
            return client.conflicts >= 2

        await eventually(conflicted_twice, timeout=3 * (cfg.lease_duration + MARGIN))
        assert not elector.is_leader
        spec = (await read_lease(rival, name))["spec"]
        assert spec["holderIdentity"] == "rival"
        assert spec["leaseTransitions"] == 3

        # Once the rival stops renewing, the candidate takes over as a new term.
        client.racing = False
        await asyncio.wait_for(elector.wait_leading(), timeout=cfg.lease_duration + 2 * MARGIN)
        spec = (await read_lease(rival, name))["spec"]
        assert spec["holderIdentity"] == "beta"
        assert spec["leaseTransitions"] == 4
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        await client.close()


@pytest.mark.parametrize(
    "renew_time",
    ["2001-01-01T00:00:00.000000Z", "2999-01-01T00:00:00.000000Z"],
    ids=["holder-clock-behind", "holder-clock-ahead"],
)
async def test_expiry_is_judged_by_local_observation(
    clients: Callable[[], Client], renew_time: str, tasks: list[asyncio.Task[Any]]
) -> None:
    """The holder's renewTime, decades off, neither shortens nor extends the wait."""
    name = "skewed"
    admin = clients()
    await admin.create(
        LEASES,
        make_lease(
            name,
            {
                "holderIdentity": "ghost",
                "leaseDurationSeconds": 1,
                "acquireTime": renew_time,
                "renewTime": renew_time,
                "leaseTransitions": 7,
            },
        ),
        NS,
    )
    terms = Terms()
    cfg = config(name, "beta")
    elector = terms.elector(clients(), cfg)
    began = time.monotonic()
    tasks.append(asyncio.create_task(elector.run()))
    await asyncio.wait_for(
        elector.wait_leading(), timeout=cfg.lease_duration + max_acquire_gap(cfg) + MARGIN
    )
    waited = terms.of("beta")[0].start - began
    assert waited >= cfg.lease_duration
    spec = (await read_lease(admin, name))["spec"]
    assert spec["holderIdentity"] == "beta"
    assert spec["leaseTransitions"] == 8
    assert spec["acquireTime"] != renew_time


# ---------------------------------------------------------------------- watching the lease

# A follower that polls this rarely cannot explain a takeover within SLOW_POLL.retry_period of
# its first attempt: only the lease watch can.
SLOW_POLL = (30.0, 25.0, 20.0)
# Well inside the slow follower's first retry, and generous for a loaded machine.
WATCH_BOUND = 12.0


def lease_watches(server: SimServer) -> int:
    pairs = server.stats.snapshot()["by_verb_resource"]
    return int((pairs.get("watch/leases") or {}).get("requests", 0))


async def test_watch_takes_a_released_lease_before_the_next_retry(
    server: SimServer, clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    name = "watched-release"
    # The leader's record asks for 30 s: only the release, not an expiry, can hand over in time.
    leader_cfg = config(name, "alpha", 30.0, 25.0, 0.2)
    follower_cfg = config(name, "beta", *SLOW_POLL)
    terms = Terms()
    _, leader_run, follower, _ = await start_leader_and_follower(
        clients, tasks, terms, leader_cfg, follower_cfg
    )
    leader_run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader_run
    await asyncio.wait_for(follower.wait_leading(), timeout=WATCH_BOUND)
    terms.assert_no_overlap()
    spec = (await read_lease(clients(), name))["spec"]
    assert spec["holderIdentity"] == "beta" and spec["leaseTransitions"] == 1
    assert lease_watches(server) >= 1


async def test_watch_takes_an_abandoned_lease_when_it_expires(
    clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    """kill -9 of the leader: the follower attempts at the expiry it observed, not at a retry."""
    name = "watched-expiry"
    leader_cfg = config(name, "alpha", 2.0, 1.4, 0.2, release_on_cancel=False)
    follower_cfg = config(name, "beta", *SLOW_POLL)
    terms = Terms()
    _, leader_run, follower, _ = await start_leader_and_follower(
        clients, tasks, terms, leader_cfg, follower_cfg
    )
    leader_run.cancel()
    killed_at = time.monotonic()
    with contextlib.suppress(asyncio.CancelledError):
        await leader_run
    await asyncio.wait_for(follower.wait_leading(), timeout=WATCH_BOUND)
    took_over = terms.of("beta")[0].start - killed_at
    # Never before the record the follower last saw renewed has expired.
    assert took_over >= leader_cfg.lease_duration - 2 * leader_cfg.retry_period
    terms.assert_no_overlap()
    spec = (await read_lease(clients(), name))["spec"]
    assert spec["holderIdentity"] == "beta" and spec["leaseTransitions"] == 1


async def test_watch_still_never_deposes_a_live_leader(
    clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    """Each renewal the watch delivers restarts the follower's wait instead of shortening it."""
    name = "watched-live"
    # Renewals every 0.2 s against a 3 s lease: a loaded machine delays a renewal, but not by
    # the 2 s renew deadline, so the leader stays live and only the watch could depose it.
    leader_cfg = config(name, "alpha", 3.0, 2.0, 0.2)
    follower_cfg = config(name, "beta", 3.0, 2.0, 0.2)
    terms = Terms()
    leader, _, follower, _ = await start_leader_and_follower(
        clients, tasks, terms, leader_cfg, follower_cfg
    )
    reader = clients()
    start_rv = int((await read_lease(reader, name))["metadata"]["resourceVersion"])

    async def held_for_three_lease_durations() -> bool:
        lease = await read_lease(reader, name)
        return int(lease["metadata"]["resourceVersion"]) - start_rv >= 15

    await eventually(held_for_three_lease_durations, timeout=3 * leader_cfg.lease_duration + 5)
    assert leader.is_leader and not follower.is_leader
    assert [t.identity for t in terms.terms] == ["alpha"]


@pytest.mark.parametrize(
    "faults",
    ["watch-cut=seconds:1@leases", "watch-cut=events:1@leases"],
    ids=["cut-by-time", "cut-after-one-event"],
)
async def test_a_cut_watch_is_reopened_and_still_sees_the_release(
    server: SimServer,
    clients: Callable[[], Client],
    faults: str,
    tasks: list[asyncio.Task[Any]],
) -> None:
    name = "cut-watch"
    server.faults.update(faults)
    leader_cfg = config(name, "alpha", 30.0, 25.0, 0.2)
    follower_cfg = config(name, "beta", *SLOW_POLL)
    terms = Terms()
    _, leader_run, follower, _ = await start_leader_and_follower(
        clients, tasks, terms, leader_cfg, follower_cfg
    )

    # The follower's watch is cut at least twice (and reopened) before the release.
    cuts = server.faults.counts()["watch-cut"]

    async def cut_twice() -> bool:
        return server.faults.counts()["watch-cut"] >= cuts + 2

    await eventually(cut_twice, timeout=WATCH_BOUND)
    leader_run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader_run
    await asyncio.wait_for(follower.wait_leading(), timeout=WATCH_BOUND)
    terms.assert_no_overlap()
    assert (await read_lease(clients(), name))["spec"]["holderIdentity"] == "beta"


@pytest.mark.parametrize(
    "faults",
    ["latency=120s@watch/leases", "error=500@watch/leases"],
    ids=["never-delivers", "refused"],
)
async def test_without_a_working_watch_polling_still_hands_over(
    server: SimServer,
    clients: Callable[[], Client],
    faults: str,
    tasks: list[asyncio.Task[Any]],
) -> None:
    name = "dead-watch"
    server.faults.update(faults)
    timing = (2.0, 1.4, 0.2)
    leader_cfg = config(name, "alpha", *timing, release_on_cancel=False)
    follower_cfg = config(name, "beta", *timing)
    terms = Terms()
    _, leader_run, follower, _ = await start_leader_and_follower(
        clients, tasks, terms, leader_cfg, follower_cfg
    )
    leader_run.cancel()
    killed_at = time.monotonic()
    with contextlib.suppress(asyncio.CancelledError):
        await leader_run
    await asyncio.wait_for(
        follower.wait_leading(),
        timeout=follower_cfg.lease_duration + max_acquire_gap(follower_cfg) + MARGIN,
    )
    took_over = terms.of("beta")[0].start - killed_at
    assert took_over >= follower_cfg.lease_duration - 2 * follower_cfg.retry_period
    terms.assert_no_overlap()
    counts = server.faults.counts()
    assert counts["latency"] + counts["error-500"] >= 1


async def test_watch_can_be_switched_off(
    server: SimServer, clients: Callable[[], Client], tasks: list[asyncio.Task[Any]]
) -> None:
    name = "polling-only"
    leader_cfg = config(name, "alpha", watch_lease=False)
    follower_cfg = config(name, "beta", watch_lease=False)
    terms = Terms()
    _, leader_run, follower, _ = await start_leader_and_follower(
        clients, tasks, terms, leader_cfg, follower_cfg
    )
    leader_run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader_run
    await asyncio.wait_for(follower.wait_leading(), timeout=max_acquire_gap(follower_cfg) + MARGIN)
    terms.assert_no_overlap()
    assert lease_watches(server) == 0
