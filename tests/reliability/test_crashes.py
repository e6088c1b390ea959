"""A 30-node roll whose manager is killed with SIGKILL at 20 random moments, restarted each
time, and a roll through API faults, cut watches and cloud throttling: both finish with every
node replaced once, nothing orphaned, detached or cordoned, and no budget violated."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from pathlib import Path
from typing import Any

from nodeops.demo.world import World
from nodeops.sim.scenario import Scenario
from tests.integration.cycling.harness import request, scenario, wait_phase, world

from .invariants import assert_roll_invariants

GROUPS = ["workers-a", "workers-b", "workers-c"]
TIME_SCALE = 30.0


def thirty_nodes() -> Scenario:
    return scenario(
        30,
        groups=3,
        workloads=lambda ws: [
            {**w, "replicas": max(2, (w.get("replicas") or 0) // 3)}
            if w["kind"] == "Deployment"
            else w
            for w in ws
        ],
    )


async def start_manager(w: World, tmp: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *w.manager_command(tmp),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


async def _until_written(w: World, name: str, before: Any, *, limit: float) -> None:
    rv = ((before or {}).get("metadata") or {}).get("resourceVersion")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while loop.time() < deadline:
        now = await w.request(name)
        if ((now or {}).get("metadata") or {}).get("resourceVersion") != rv:
            return
        await asyncio.sleep(0.05)


async def test_kill_9_at_twenty_random_moments(tmp_path: Path) -> None:
    rng = random.Random(20)
    async with world(thirty_nodes(), time_scale=TIME_SCALE, controllers=False) as w:
        state = w.sim.cloud.state
        original = set(state.instances)
        desired = {g: state.groups[g].desired for g in GROUPS}
        await w.create_request(request("crashy", GROUPS, cycleSettings={"concurrency": 6}))
        kills = 0
        phases: list[str] = []
        while kills < 20:
            before = await w.request("crashy")
            proc = await start_manager(w, tmp_path)
            # A random moment once this manager is at work: it has written the request at
            # least once (or a few seconds passed), then up to a second and a half more.
            await _until_written(w, "crashy", before, limit=20.0)
            await asyncio.sleep(rng.uniform(0.0, 1.5))
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            kills += 1
            obj = await w.request("crashy")
            phases.append(((obj or {}).get("status") or {}).get("phase") or "")
            if phases[-1] in ("Successful", "Failed"):
                break
        proc = await start_manager(w, tmp_path)
        try:
            done = await wait_phase(w, "crashy", ("Successful", "Failed"), timeout=600)
        finally:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
        assert done["status"]["phase"] == "Successful", done["status"]
        # The kills hit the roll in several phases, not only before it started.
        assert len({p for p in phases if p}) >= 3, phases
        await assert_roll_invariants(w, original=original, desired=desired)


async def test_a_roll_through_faults_cut_watches_and_throttling() -> None:
    faults = (
        "error=500:0.05@*/*; error=429:0.05@*/*:retry-after=1; "
        "error=429:0.2@*/cloud/*:retry-after=1; error=500:0.05@*/cloud/*; "
        "watch-cut=seconds:5@*"
    )
    async with world(thirty_nodes(), time_scale=TIME_SCALE, faults=faults) as w:
        state = w.sim.cloud.state
        original = set(state.instances)
        desired = {g: state.groups[g].desired for g in GROUPS}
        await w.create_request(request("faulty", GROUPS, cycleSettings={"concurrency": 6}))
        done = await wait_phase(w, "faulty", ("Successful", "Failed"), timeout=600)
        assert done["status"]["phase"] == "Successful", done["status"]
        counts = w.sim.server.faults.counts()
        assert counts["error-500"] > 0 and counts["error-429"] > 0 and counts["watch-cut"] > 0
        await assert_roll_invariants(w, original=original, desired=desired)
