"""Controllers over real informers: concurrency, retries, terminal errors, requeue_after."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from nodeops.kube.client import Client
from nodeops.kube.controller import (
    Controller,
    ReconcileContext,
    Request,
    Result,
    TerminalError,
    labels_changed,
)
from nodeops.kube.informer import Informer
from nodeops.kube.metrics import REGISTRY
from nodeops.kube.resources import CONFIGMAPS
from nodeops.sim.server.app import SimServer


class Recorder:
    def __init__(self) -> None:
        self.active: set[Request] = set()
        self.overlaps = 0
        self.calls: Counter[str] = Counter()
        self.last_seen: dict[str, str] = {}

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        if request in self.active:
            self.overlaps += 1
        self.active.add(request)
        try:
            self.calls[request.name] += 1
            await asyncio.sleep(random.random() * 0.002)
            return None
        finally:
            self.active.discard(request)


async def _wait(predicate: object, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():  # type: ignore[operator]
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_no_key_is_reconciled_concurrently_under_load(client: Client, sim: SimServer) -> None:
    inf = Informer(client, CONFIGMAPS)
    rec = Recorder()
    ctl = Controller("load", rec, max_concurrent_reconciles=16).for_(inf)
    inf.start()
    ctl.start()
    try:
        await inf.wait_synced()
        names = [f"c{i}" for i in range(20)]
        for n in names:
            await client.create(
                CONFIGMAPS, {"metadata": {"name": n}, "data": {"v": "0"}}, "default"
            )
        rng = random.Random(1)

        async def writer(seed: int) -> None:
            r = random.Random(seed)
            for i in range(60):
                await client.patch(CONFIGMAPS, r.choice(names), {"data": {"v": str(i)}}, "default")

        await asyncio.gather(*(writer(rng.randrange(1000)) for _ in range(8)))
        await _wait(lambda: len(ctl.queue) == 0 and not rec.active)
        assert rec.overlaps == 0
        assert set(rec.calls) >= set(names)
    finally:
        await ctl.stop()
        await inf.stop()


class Flaky:
    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        self.attempts[request.name] += 1
        if request.name == "terminal":
            raise TerminalError("spec.size: must be positive")
        if request.name == "flaky" and self.attempts[request.name] < 4:
            raise RuntimeError("transient")
        if request.name == "later" and self.attempts[request.name] == 1:
            return Result(requeue_after=0.2)
        return None


async def test_retries_terminal_errors_and_requeue_after(client: Client, sim: SimServer) -> None:
    inf = Informer(client, CONFIGMAPS)
    rec = Flaky()
    ctl = Controller("flaky", rec).for_(inf, update_predicate=labels_changed)
    inf.start()
    ctl.start()
    try:
        await inf.wait_synced()
        for n in ("terminal", "flaky", "later"):
            await client.create(CONFIGMAPS, {"metadata": {"name": n}}, "default")
        await _wait(lambda: rec.attempts["flaky"] == 4 and rec.attempts["later"] == 2)
        await asyncio.sleep(0.3)
        assert rec.attempts["terminal"] == 1  # never retried
        assert rec.attempts["flaky"] == 4  # 3 failures with 5/10/20 ms backoff, then success
        assert ctl.queue.num_requeues(Request("flaky", "default")) == 0  # forgotten on success

        def sample(name: str, **labels: str) -> float:
            return REGISTRY.get_sample_value(name, labels) or 0.0

        assert sample("controller_runtime_terminal_reconcile_errors_total", controller="flaky") == 1
        assert sample("controller_runtime_reconcile_total", controller="flaky", result="error") == 4
        assert (
            sample("controller_runtime_reconcile_total", controller="flaky", result="requeue_after")
            == 1
        )
        # A change the predicate does not look at does not reach the reconciler.
        before = rec.attempts["later"]
        await client.patch(CONFIGMAPS, "later", {"data": {"x": "y"}}, "default")
        await asyncio.sleep(0.3)
        assert rec.attempts["later"] == before
    finally:
        await ctl.stop()
        await inf.stop()
